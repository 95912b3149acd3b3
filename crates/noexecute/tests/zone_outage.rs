//! A zone outage end to end, on a whole plane (`scripts/cluster up --full`): every
//! kube-controller-manager controller but taint-eviction-controller, kube-scheduler, and one
//! kwok per zone. Nothing taints by hand: stopping zone a's kwok stops its nodes' Leases,
//! node-lifecycle-controller taints them `unreachable`, noexecute evicts, the ReplicaSet
//! replaces the pods and the scheduler puts them in zones b and c.
//!
//! The API server's default not-ready/unreachable tolerations are 5 s on this plane (300 s in a
//! real cluster), so ordinary pods go 5 s after the taint.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use noexecute_testkit::*;

const REPLICAS: usize = 30;
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
const NOT_READY: &str = "node.kubernetes.io/not-ready";

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

fn toleration(key: &str, seconds: Option<i64>) -> serde_json::Value {
    let mut t = serde_json::json!({"key": key, "operator": "Exists", "effect": "NoExecute"});
    if let Some(s) = seconds {
        t["tolerationSeconds"] = s.into();
    }
    t
}

/// A pod the scheduler places on `node`, with these NoExecute tolerations.
async fn pinned_pod(
    ns: &TestNamespace,
    name: &str,
    node: &str,
    tolerations: Vec<serde_json::Value>,
) -> Result<()> {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": tolerations,
            "containers": [{"name": "c", "image": "registry.invalid/pause:1"}],
        }
    }))?;
    ns.pods().create(&PostParams::default(), &pod).await?;
    Ok(())
}

async fn workloads(ns: &TestNamespace) -> Result<()> {
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "topologySpreadConstraints": [{
                        "maxSkew": 1,
                        "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": {"matchLabels": {"app": "web"}},
                    }],
                    "containers": [{"name": "c", "image": "registry.invalid/pause:1"}],
                }
            }
        }
    }))?;
    Api::<Deployment>::namespaced(ns.client.clone(), &ns.name)
        .create(&PostParams::default(), &deployment)
        .await?;
    let daemonset: DaemonSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {"containers": [{"name": "c", "image": "registry.invalid/pause:1"}]}
            }
        }
    }))?;
    Api::<DaemonSet>::namespaced(ns.client.clone(), &ns.name)
        .create(&PostParams::default(), &daemonset)
        .await?;
    pinned_pod(
        ns,
        "sixty",
        "zone-a-0",
        vec![
            toleration(UNREACHABLE, Some(60)),
            toleration(NOT_READY, Some(60)),
        ],
    )
    .await?;
    pinned_pod(
        ns,
        "forever",
        "zone-a-1",
        vec![toleration(UNREACHABLE, None), toleration(NOT_READY, None)],
    )
    .await
}

/// Running pods of the namespace that are not terminating: (name, node).
async fn running(ns: &TestNamespace) -> Result<Vec<(String, String)>> {
    Ok(ns
        .pods()
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .map(|p| {
            (
                p.metadata.name.unwrap_or_default(),
                p.spec.and_then(|s| s.node_name).unwrap_or_default(),
            )
        })
        .collect())
}

/// The `timeAdded` of the node's unreachable NoExecute taint, once it is there.
async fn unreachable_since(nodes: &Api<Node>, node: &str) -> Result<Option<SystemTime>> {
    let n = nodes.get(node).await?;
    Ok(n.spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .find(|t| t.key == UNREACHABLE && t.effect == "NoExecute")
        .and_then(|t| t.time_added)
        .map(|t| SystemTime::UNIX_EPOCH + Duration::from_secs(t.0.as_second().max(0) as u64)))
}

/// What `noexecute plan` (live, read-only) predicts for "zone a goes unreachable now": pod
/// name → seconds from the taint to its eviction.
fn predict_zone_a(plane: &Plane, namespace: &str) -> Result<BTreeMap<String, f64>> {
    let out = std::process::Command::new(binary())
        .args(["plan", "--kubeconfig"])
        .arg(&plane.kubeconfig)
        .args([
            "--taint-selector",
            "topology.kubernetes.io/zone=zone-a",
            "node.kubernetes.io/unreachable:NoExecute",
            "-o",
            "jsonl",
        ])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "plan failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut predicted = BTreeMap::new();
    for line in String::from_utf8(out.stdout)?.lines() {
        let row: serde_json::Value = serde_json::from_str(line)?;
        let pod = row["pod"].as_str().unwrap_or_default();
        if row["decision"] == "evict"
            && let Some(name) = pod.strip_prefix(&format!("{namespace}/"))
        {
            predicted.insert(name.to_string(), row["at"].as_f64().unwrap_or(f64::NAN));
        }
    }
    Ok(predicted)
}

fn secs(t: SystemTime, since: SystemTime) -> f64 {
    match t.duration_since(since) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// What the first outage showed, for one controller.
#[derive(Debug)]
struct Outage {
    /// Seconds from each zone-a web pod's node taint (its `timeAdded`) to its eviction.
    web: Vec<f64>,
    /// The same for the pod tolerating unreachable for 60 s.
    sixty: f64,
    /// The same two, from when the test saw the taint (polled every 100 ms): `timeAdded` has
    /// one-second resolution, too coarse to compare two planes within a second.
    web_seen: Vec<f64>,
    sixty_seen: f64,
    /// Every pod evicted in the outage, with seconds from its node's taint (as the test saw
    /// it), and what `plan` predicted beforehand.
    evicted: BTreeMap<String, f64>,
    predicted: BTreeMap<String, f64>,
    /// Zone-a pods that must never go (DaemonSet, tolerates forever), checked over the outage.
    kept: usize,
}

/// Deploy the workloads, take zone a down, and check what is evicted, when, and that the
/// Deployment is whole again in zones b and c.
async fn first_outage(plane: &Plane, ns: &TestNamespace) -> Result<Outage> {
    workloads(ns).await?;
    eventually(Duration::from_secs(60), "every pod Running", || async {
        Ok((running(ns).await?.len() == REPLICAS + 6 + 2).then_some(()))
    })
    .await?;
    let before = running(ns).await?;
    let node_of: BTreeMap<String, String> = before.iter().cloned().collect();
    let web_in_a: Vec<String> = before
        .iter()
        .filter(|(n, node)| node.starts_with("zone-a-") && n.starts_with("web-"))
        .map(|(n, _)| n.clone())
        .collect();
    let kept_in_a: Vec<String> = before
        .iter()
        .filter(|(n, node)| {
            node.starts_with("zone-a-") && (n.starts_with("agent-") || n == "forever")
        })
        .map(|(n, _)| n.clone())
        .collect();
    assert!(
        !web_in_a.is_empty(),
        "the spread put web pods in zone a: {before:?}"
    );
    assert_eq!(
        kept_in_a.len(),
        3,
        "two DaemonSet pods and the forever pod: {before:?}"
    );
    let predicted = predict_zone_a(plane, &ns.name)?;
    let seen = EvictionLog::start(ns.pods());

    // Zone a goes down: its kwok stops, so do its nodes' Leases.
    plane.zone_down("zone-a")?;
    let nodes: Api<Node> = Api::all(ns.client.clone());
    let mut tainted = BTreeMap::new();
    let mut seen_tainted = BTreeMap::new();
    let mut pending = vec!["zone-a-0", "zone-a-1"];
    let deadline = SystemTime::now() + Duration::from_secs(30);
    while !pending.is_empty() {
        anyhow::ensure!(
            SystemTime::now() < deadline,
            "no unreachable taint on {pending:?}"
        );
        let mut still = Vec::new();
        for node in pending {
            match unreachable_since(&nodes, node).await? {
                Some(added) => {
                    tainted.insert(node.to_string(), added);
                    seen_tainted.insert(node.to_string(), SystemTime::now());
                }
                None => still.push(node),
            }
        }
        pending = still;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually(
        Duration::from_secs(30),
        "zone a's web pods evicted",
        || async { Ok(web_in_a.iter().all(|n| seen.at(n).is_some()).then_some(())) },
    )
    .await?;
    eventually(
        Duration::from_secs(60),
        "30 web replicas Running in b and c",
        || async {
            let now = running(ns).await?;
            let web: Vec<_> = now.iter().filter(|(n, _)| n.starts_with("web-")).collect();
            Ok(
                (web.len() == REPLICAS && web.iter().all(|(_, node)| !node.starts_with("zone-a-")))
                    .then_some(()),
            )
        },
    )
    .await?;
    let sixty = eventually(Duration::from_secs(75), "the 60 s pod evicted", || async {
        Ok(seen.at("sixty"))
    })
    .await?;
    // Never, over the whole outage: the DaemonSet's pods and the pod tolerating forever; and
    // nothing outside zone a.
    for name in &kept_in_a {
        assert!(seen.at(name).is_none(), "{name} was evicted");
    }
    let others: Vec<String> = seen
        .names()
        .into_iter()
        .filter(|n| !web_in_a.contains(n) && n.as_str() != "sixty")
        .collect();
    assert!(others.is_empty(), "evicted outside the plan: {others:?}");
    let (mut web, mut web_seen) = (Vec::new(), Vec::new());
    for name in &web_in_a {
        let at = seen.at(name).context("evicted")?;
        web.push(secs(at, tainted[&node_of[name]]));
        web_seen.push(secs(at, seen_tainted[&node_of[name]]));
    }
    web.sort_by(f64::total_cmp);
    web_seen.sort_by(f64::total_cmp);
    let mut all = BTreeMap::new();
    for name in web_in_a.iter().chain(std::iter::once(&"sixty".to_string())) {
        let at = seen.at(name).context("evicted")?;
        all.insert(name.clone(), secs(at, seen_tainted[&node_of[name]]));
    }
    Ok(Outage {
        web,
        sixty: secs(sixty, tainted["zone-a-0"]),
        web_seen,
        sixty_seen: secs(sixty, seen_tainted["zone-a-0"]),
        kept: kept_in_a.len(),
        evicted: all,
        predicted,
    })
}

fn check(who: &str, o: &Outage) {
    println!(
        "{who}: {} web pods of zone a evicted {:.2}-{:.2} s after their node's taint's timeAdded ({:.2}-{:.2} s after the test saw it); the 60 s pod at {:.2} s ({:.2} s); {} pods kept",
        o.web.len(),
        o.web.first().copied().unwrap_or(f64::NAN),
        o.web.last().copied().unwrap_or(f64::NAN),
        o.web_seen.first().copied().unwrap_or(f64::NAN),
        o.web_seen.last().copied().unwrap_or(f64::NAN),
        o.sixty,
        o.sixty_seen,
        o.kept
    );
    // The default toleration is 5 s and the 60 s pod's 60 s, counted (as upstream does) from
    // when the controller saw the taint: within 2 s of the test's own sighting.
    for at in &o.web_seen {
        assert!(
            (3.0..=7.0).contains(at),
            "{who}: a web pod evicted {at:.2} s after the taint was seen"
        );
    }
    assert!(
        (58.0..=62.0).contains(&o.sixty_seen),
        "{who}: the 60 s pod {:.2} s after the taint was seen",
        o.sixty_seen
    );
    // From `timeAdded`, which has one-second resolution (rounded down): 60 s, within 2 s plus
    // that second.
    assert!(
        (58.0..=63.0).contains(&o.sixty),
        "{who}: the 60 s pod {:.2} s after timeAdded",
        o.sixty
    );
}

// Two planes' outages run side by side: a runtime thread each, so that one plane's blocking
// calls (kubectl, scripts/cluster, plan) do not stall the other's timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_outage_with_noexecute_and_with_upstream() -> Result<()> {
    // A plane a failed run left behind holds its objects and taints: start afresh.
    Plane::reset("zone-outage")?;
    Plane::reset("zone-outage-upstream")?;
    let (ours, theirs) = tokio::try_join!(
        tokio::task::spawn_blocking(|| Plane::full("zone-outage", 3, 2, false)),
        tokio::task::spawn_blocking(|| Plane::full("zone-outage-upstream", 3, 2, true)),
    )?;
    let (plane, upstream) = (ours?, theirs?);
    plane.install_rbac()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "outage").await?;
    let up_ns = TestNamespace::create(&upstream.admin_client().await?, "outage").await?;
    let mut c = Controller::start(
        &plane,
        binary(),
        &format!("{}-c", ns.name),
        &["--leader-elect=false"],
    )?;
    c.wait_ready(Duration::from_secs(30)).await?;
    // The same outage on both planes at once.
    let (o, u) = tokio::try_join!(first_outage(&plane, &ns), first_outage(&upstream, &up_ns))?;
    check("noexecute", &o);
    check("upstream", &u);
    // The same pods go (every zone-a web pod and the 60 s pod, nothing else), each within 1 s
    // of the other controller's time.
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    assert!(
        (mean(&o.web_seen) - mean(&u.web_seen)).abs() <= 1.0,
        "{o:?} vs {u:?}"
    );
    assert!((o.sixty_seen - u.sixty_seen).abs() <= 1.0, "{o:?} vs {u:?}");
    upstream.down()?;

    // `plan`, run before the outage, named exactly the pods that were evicted, each at its
    // predicted offset (±2 s: the default toleration counts from when the controller saw the
    // taint).
    assert_eq!(
        o.predicted.keys().collect::<Vec<_>>(),
        o.evicted.keys().collect::<Vec<_>>(),
        "plan predicted {:?}, evicted {:?}",
        o.predicted,
        o.evicted
    );
    for (pod, at) in &o.evicted {
        let want = o.predicted[pod];
        assert!(
            (at - want).abs() <= 2.0,
            "{pod}: predicted +{want} s, evicted +{at:.2} s"
        );
    }
    println!(
        "plan predicted {} evictions; each happened within {:.2} s of its prediction",
        o.predicted.len(),
        o.evicted
            .iter()
            .map(|(p, at)| (at - o.predicted[p]).abs())
            .fold(0.0, f64::max)
    );

    // Zone a is still down. `out-of-service` on zone-a-1 (the operator says the node is gone
    // for good) evicts even the pod that tolerates unreachable forever; PodGC then removes it.
    let nodes: Api<Node> = Api::all(ns.client.clone());
    let seen = EvictionLog::start(ns.pods());
    add_taint(
        &nodes,
        "zone-a-1",
        no_execute("node.kubernetes.io/out-of-service", "nodeshutdown"),
    )
    .await?;
    eventually(
        Duration::from_secs(10),
        "the forever pod evicted",
        || async { Ok(seen.at("forever")) },
    )
    .await?;
    eventually(Duration::from_secs(60), "PodGC removed it", || async {
        Ok(ns.pods().get_opt("forever").await?.is_none().then_some(()))
    })
    .await?;
    drop(seen);
    remove_taint(&nodes, "zone-a-1", "node.kubernetes.io/out-of-service").await?;

    // Zone a comes back: the taints go.
    plane.zone_up("zone-a")?;
    eventually(Duration::from_secs(30), "zone a untainted", || async {
        for node in ["zone-a-0", "zone-a-1"] {
            if unreachable_since(&nodes, node).await?.is_some() {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await?;

    // A second outage, over before the 60 s deadline: that eviction is cancelled, while a pod
    // with the default toleration (the positive control) is evicted in the same window.
    pinned_pod(
        &ns,
        "sixty-again",
        "zone-a-0",
        vec![
            toleration(UNREACHABLE, Some(60)),
            toleration(NOT_READY, Some(60)),
        ],
    )
    .await?;
    pinned_pod(&ns, "plain", "zone-a-1", vec![]).await?;
    eventually(Duration::from_secs(30), "the new pods Running", || async {
        let now = running(&ns).await?;
        Ok(["sixty-again", "plain"]
            .iter()
            .all(|p| now.iter().any(|(n, _)| n == p))
            .then_some(()))
    })
    .await?;
    let seen = EvictionLog::start(ns.pods());
    plane.zone_down("zone-a")?;
    let down = eventually(Duration::from_secs(30), "zone a tainted again", || async {
        unreachable_since(&nodes, "zone-a-0").await
    })
    .await?;
    eventually(
        Duration::from_secs(20),
        "the positive control evicted",
        || async { Ok(seen.at("plain")) },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(15)).await;
    plane.zone_up("zone-a")?;
    // Watch past the old deadline (+60 s) and a margin.
    let until = down + Duration::from_secs(66);
    while SystemTime::now() < until {
        assert!(
            seen.at("sixty-again").is_none(),
            "the 60 s pod was evicted although its zone came back in time"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        c.log_text().contains("eviction cancelled"),
        "the cancel is logged"
    );
    drop(seen);

    // Not-ready: kwok's chaos stage turns zone-b-0 Ready=False; node-lifecycle-controller
    // taints it not-ready:NoExecute and its web pods go after the default 5 s.
    let on_b0: Vec<String> = running(&ns)
        .await?
        .into_iter()
        .filter(|(n, node)| node == "zone-b-0" && n.starts_with("web-"))
        .map(|(n, _)| n)
        .collect();
    assert!(!on_b0.is_empty(), "web pods on zone-b-0");
    let seen = EvictionLog::start(ns.pods());
    plane.kubectl(&[
        "label",
        "node",
        "zone-b-0",
        "node-not-ready.stage.kwok.x-k8s.io=true",
    ])?;
    eventually(Duration::from_secs(30), "the not-ready taint", || async {
        let n = nodes.get("zone-b-0").await?;
        Ok(n.spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == NOT_READY && t.effect == "NoExecute")
            .then_some(()))
    })
    .await?;
    eventually(
        Duration::from_secs(20),
        "zone-b-0's web pods evicted",
        || async { Ok(on_b0.iter().all(|n| seen.at(n).is_some()).then_some(())) },
    )
    .await?;
    drop(seen);
    ns.cleanup().await?;
    plane.down()
}

/// Two replicas, rate-limited so that a mass eviction takes seconds; the leader is killed after
/// its first evictions of the outage. The standby, which computed the same deadlines, takes
/// over once the Lease expires and finishes: every pod the outage must evict is evicted once,
/// none twice (the API server's DELETE counter), none missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_failover_during_a_zone_outage() -> Result<()> {
    Plane::reset("zone-failover")?;
    let plane = tokio::task::spawn_blocking(|| Plane::full("zone-failover", 3, 2, false)).await??;
    plane.install_rbac()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "failover").await?;
    let lease = format!("lease-{}", ns.name);
    let replica = |name: &str| {
        let identity = format!("--identity={name}");
        Controller::start(
            &plane,
            binary(),
            &format!("{}-{name}", ns.name),
            &[
                &[
                    "--leader-elect-name",
                    lease.as_str(),
                    identity.as_str(),
                    "--kube-api-qps",
                    "3",
                    "--kube-api-burst",
                    "1",
                ][..],
                &SHORT_LEASE[..],
            ]
            .concat(),
        )
    };
    let mut a = replica("a")?;
    a.wait_ready(Duration::from_secs(30)).await?;
    eventually(Duration::from_secs(15), "a leads", || async {
        Ok((a.metric("noexecute_leader").await? == Some(1.0)).then_some(()))
    })
    .await?;
    let mut b = replica("b")?;
    b.wait_ready(Duration::from_secs(30)).await?;
    workloads(&ns).await?;
    eventually(Duration::from_secs(60), "every pod Running", || async {
        Ok((running(&ns).await?.len() == REPLICAS + 6 + 2).then_some(()))
    })
    .await?;
    let must_go: Vec<String> = running(&ns)
        .await?
        .into_iter()
        .filter(|(n, node)| node.starts_with("zone-a-") && n.starts_with("web-"))
        .map(|(n, _)| n)
        .collect();
    let seen = EvictionLog::start(ns.pods());
    let deletes_before = plane.pod_deletes()?;
    plane.zone_down("zone-a")?;
    let nodes: Api<Node> = Api::all(ns.client.clone());
    eventually(Duration::from_secs(30), "the unreachable taint", || async {
        unreachable_since(&nodes, "zone-a-0").await
    })
    .await?;
    // a evicts a few (two requests each at 3 QPS), then dies mid-way.
    eventually(Duration::from_secs(30), "a's first evictions", || async {
        Ok((must_go.iter().filter(|n| seen.at(n).is_some()).count() >= 3).then_some(()))
    })
    .await?;
    let by_a = must_go.iter().filter(|n| seen.at(n).is_some()).count();
    a.kill().await?;
    eventually(
        Duration::from_secs(45),
        "zone a's web pods evicted",
        || async { Ok(must_go.iter().all(|n| seen.at(n).is_some()).then_some(())) },
    )
    .await?;
    eventually(Duration::from_secs(75), "the 60 s pod evicted", || async {
        Ok(seen.at("sixty"))
    })
    .await?;
    assert_eq!(
        b.metric("noexecute_leader").await?,
        Some(1.0),
        "b leads: {}",
        b.log_text()
    );
    // Let any duplicate show, then count: one DELETE per pod, and nothing else evicted.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deletes = plane.pod_deletes()? - deletes_before;
    let evicted_all = seen.names().len();
    println!(
        "failover: {} pods evicted, {deletes} DELETEs (a killed after {by_a} evictions)",
        must_go.len() + 1
    );
    assert_eq!(evicted_all, must_go.len() + 1, "nothing else evicted");
    assert_eq!(
        deletes,
        (must_go.len() + 1) as f64,
        "a pod deleted twice? b's log:\n{}",
        b.log_text()
    );
    drop(seen);
    ns.cleanup().await?;
    plane.down()
}
