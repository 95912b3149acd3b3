//! The opt-in policies (issue: beyond upstream) on a real control plane.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as K8sTime;
use kube::api::{Patch, PatchParams};
use noexecute_testkit::*;

const PLANE: &str = "policies";
/// kube-controller-manager runs the disruption controller, so PodDisruptionBudget status is
/// real (it does not evict anything itself).
const CONTROLLERS: &[&str] = &["disruption"];

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

async fn namespace(test: &str) -> Result<(&'static Plane, TestNamespace)> {
    let plane = Plane::shared(PLANE, CONTROLLERS)?;
    plane.install_rbac()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, test).await?;
    Ok((plane, ns))
}

async fn controller(
    plane: &Plane,
    ns: &TestNamespace,
    name: &str,
    extra: &[&str],
) -> Result<Controller> {
    let selector = ns.node_selector();
    let mut args = vec!["--leader-elect=false", "--node-selector", selector.as_str()];
    args.extend_from_slice(extra);
    let mut c = Controller::start(plane, binary(), &format!("{}-{name}", ns.name), &args)?;
    c.wait_ready(Duration::from_secs(30)).await?;
    Ok(c)
}

#[tokio::test]
async fn restart_safe_deadlines_survive_a_controller_restart() -> Result<()> {
    let (plane, ns) = namespace("restart-safe").await?;
    let node = ns.create_node("n", vec![]).await?;
    ns.create_pod(&pod(
        "timed",
        &node,
        vec![tolerate("example.com/t", Some(10))],
        None,
    ))
    .await?;
    let mut first = controller(
        plane,
        &ns,
        "first",
        &["--deadline-from", "taint-time-added"],
    )
    .await?;
    // The taint carries timeAdded, as the node lifecycle controller and kubectl set it.
    let tainted = Instant::now();
    let taint = Taint {
        time_added: Some(K8sTime(k8s_openapi::jiff::Timestamp::now())),
        ..no_execute("example.com/t", "")
    };
    add_taint(&ns.nodes(), &node, taint).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    first.kill().await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Upstream's semantics would start a fresh 10 s window now (evicting at ~14 s).
    let _second = controller(
        plane,
        &ns,
        "second",
        &["--deadline-from", "taint-time-added"],
    )
    .await?;
    let evicted = wait_evicted(&ns.pods(), "timed", Duration::from_secs(15)).await?;
    let after = evicted.seen_at.duration_since(tainted);
    println!("evicted {after:?} after the taint (toleration 10 s, restart at 3 s)");
    assert!(
        after >= Duration::from_secs(9) && after <= Duration::from_secs(11),
        "evicted {after:?} after the taint; the original deadline is 10 s ± 1 s"
    );
    ns.cleanup().await
}

#[tokio::test]
async fn dry_run_decides_and_records_but_deletes_nothing() -> Result<()> {
    let (plane, ns) = namespace("dry-run").await?;
    let node = ns.create_node("n", vec![]).await?;
    ns.create_pod(&pod("kept", &node, vec![], None)).await?;
    let c = controller(plane, &ns, "c", &["--dry-run"]).await?;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    assert_not_evicted_for(&ns.pods(), "kept", Duration::from_secs(3)).await?;
    let live = ns.pods().get("kept").await?;
    assert!(
        condition(&live, "DisruptionTarget").is_none(),
        "nothing patched"
    );
    let want = format!("[dry-run] Marking for deletion Pod {}/kept", ns.name);
    eventually(Duration::from_secs(5), "the dry-run event", || async {
        let events = pod_events(&ns.client, &ns.name, "kept").await?;
        Ok(events
            .iter()
            .any(|e| e.message.as_deref() == Some(want.as_str()))
            .then_some(()))
    })
    .await?;
    c.wait_metric(
        "noexecute_dry_run_evictions_total",
        1.0,
        Duration::from_secs(5),
    )
    .await?;
    assert_eq!(
        c.metric("taint_eviction_controller_pod_deletions_total")
            .await?,
        Some(0.0)
    );
    ns.cleanup().await
}

#[tokio::test]
async fn excluded_namespaces_and_labels_are_never_evicted() -> Result<()> {
    let (plane, ns) = namespace("exclusions").await?;
    let node = ns.create_node("n", vec![]).await?;
    let mut protected = pod("protected", &node, vec![], None);
    protected
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("noexecute.io/exclude".into(), "true".into());
    ns.create_pod(&protected).await?;
    ns.create_pod(&pod("ordinary", &node, vec![], None)).await?;
    let _c = controller(
        plane,
        &ns,
        "c",
        &["--exclude-selector", "noexecute.io/exclude=true"],
    )
    .await?;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    wait_evicted(&ns.pods(), "ordinary", Duration::from_secs(3)).await?;
    assert_not_evicted_for(&ns.pods(), "protected", Duration::from_secs(2)).await?;

    // A whole namespace excluded.
    let (plane, ns2) = namespace("exclude-ns").await?;
    let node2 = ns2.create_node("n", vec![]).await?;
    ns2.create_pod(&pod("anything", &node2, vec![], None))
        .await?;
    let _c2 = controller(plane, &ns2, "c", &["--exclude-namespace", &ns2.name]).await?;
    add_taint(&ns2.nodes(), &node2, no_execute("example.com/t", "")).await?;
    assert_not_evicted_for(&ns2.pods(), "anything", Duration::from_secs(3)).await?;
    ns2.cleanup().await?;
    ns.cleanup().await
}

#[tokio::test]
async fn terminal_pods_are_skipped_only_when_asked() -> Result<()> {
    let (plane, ns) = namespace("terminal").await?;
    let node = ns.create_node("n", vec![]).await?;
    for name in ["done", "running"] {
        ns.create_pod(&pod(name, &node, vec![], None)).await?;
    }
    let status = serde_json::json!({"status": {"phase": "Succeeded"}});
    ns.pods()
        .patch_status("done", &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    let _c = controller(plane, &ns, "c", &["--skip-terminal-pods"]).await?;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    wait_evicted(&ns.pods(), "running", Duration::from_secs(3)).await?;
    assert_not_evicted_for(&ns.pods(), "done", Duration::from_secs(2)).await?;
    ns.cleanup().await
}

/// Pods that the disruption controller counts as healthy: Running and Ready.
async fn ready_pod(ns: &TestNamespace, name: &str, node: &str, app: &str) -> Result<()> {
    let mut p = pod(name, node, vec![], None);
    p.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("app".into(), app.into());
    ns.create_pod(&p).await?;
    let status = serde_json::json!({"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": K8sTime(k8s_openapi::jiff::Timestamp::now())}
    ]}});
    ns.pods()
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

async fn pdb(ns: &TestNamespace, app: &str, min_available: i32, allowed: i32) -> Result<()> {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let budget: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": app},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}}
    }))?;
    let api: kube::Api<PodDisruptionBudget> = kube::Api::namespaced(ns.client.clone(), &ns.name);
    api.create(&Default::default(), &budget).await?;
    eventually(
        Duration::from_secs(20),
        "the disruption controller's budget status",
        || async {
            let b = api.get(app).await?;
            Ok(b.status
                .filter(|s| s.disruptions_allowed == allowed && s.current_healthy >= min_available)
                .map(|_| ()))
        },
    )
    .await
}

#[tokio::test]
async fn eviction_mode_respects_budgets_and_falls_back_after_the_pdb_timeout() -> Result<()> {
    let (plane, ns) = namespace("pdb").await?;
    let node = ns.create_node("n", vec![]).await?;
    ready_pod(&ns, "guarded-0", &node, "guarded").await?;
    ready_pod(&ns, "guarded-1", &node, "guarded").await?;
    ready_pod(&ns, "free", &node, "free").await?;
    // Nothing of "guarded" may go; "free" may.
    pdb(&ns, "guarded", 2, 0).await?;
    pdb(&ns, "free", 0, 1).await?;
    let c = controller(
        plane,
        &ns,
        "evict",
        &["--eviction-mode", "evict", "--pdb-timeout", "4s"],
    )
    .await?;
    let tainted = Instant::now();
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    // The budget allows "free": evicted through the Eviction API at once.
    let free = wait_evicted(&ns.pods(), "free", Duration::from_secs(5)).await?;
    let reason = free
        .last
        .as_ref()
        .and_then(|p| condition(p, "DisruptionTarget"))
        .and_then(|c| c.reason.clone());
    assert_eq!(reason.as_deref(), Some("EvictionByEvictionAPI"));
    // The budget blocks the guarded pods (429) until the 4 s timeout, then they are deleted.
    assert_not_evicted_for(&ns.pods(), "guarded-0", Duration::from_secs(3)).await?;
    let g = wait_evicted(&ns.pods(), "guarded-0", Duration::from_secs(10)).await?;
    let after = g.seen_at.duration_since(tainted);
    println!("guarded pod deleted {after:?} after the taint (pdb-timeout 4 s)");
    assert!(after >= Duration::from_secs(4), "{after:?}");
    wait_evicted(&ns.pods(), "guarded-1", Duration::from_secs(10)).await?;
    let blocked = c
        .metric("noexecute_pdb_blocked_total")
        .await?
        .unwrap_or(0.0);
    assert!(blocked >= 2.0, "blocked {blocked} times");
    c.wait_metric("noexecute_pdb_timeouts_total", 2.0, Duration::from_secs(5))
        .await?;
    ns.cleanup().await
}

/// A pod matched by two PodDisruptionBudgets: the Eviction API answers 500 ("more than one
/// PodDisruptionBudget") however often it is asked. That refusal counts towards --pdb-timeout
/// like a budget's 429: the pod is deleted once the timeout has passed, not retried forever.
#[tokio::test]
async fn eviction_mode_deletes_a_pod_under_two_budgets_after_the_pdb_timeout() -> Result<()> {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let (plane, ns) = namespace("pdb-two").await?;
    let node = ns.create_node("n", vec![]).await?;
    ready_pod(&ns, "double", &node, "double").await?;
    pdb(&ns, "double", 0, 1).await?;
    let second: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "double-again"},
        "spec": {"minAvailable": 0, "selector": {"matchLabels": {"app": "double"}}}
    }))?;
    kube::Api::<PodDisruptionBudget>::namespaced(ns.client.clone(), &ns.name)
        .create(&Default::default(), &second)
        .await?;
    let c = controller(
        plane,
        &ns,
        "evict",
        &["--eviction-mode", "evict", "--pdb-timeout", "3s"],
    )
    .await?;
    let tainted = Instant::now();
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    assert_not_evicted_for(&ns.pods(), "double", Duration::from_secs(2)).await?;
    let evicted = wait_evicted(&ns.pods(), "double", Duration::from_secs(15)).await?;
    let after = evicted.seen_at.duration_since(tainted);
    println!("pod under two budgets deleted {after:?} after the taint (pdb-timeout 3 s)");
    assert!(after >= Duration::from_secs(3), "{after:?}");
    let reason = evicted
        .last
        .as_ref()
        .and_then(|p| condition(p, "DisruptionTarget"))
        .and_then(|c| c.reason.clone());
    assert_eq!(
        reason.as_deref(),
        Some("DeletionByTaintManager"),
        "our DELETE"
    );
    c.wait_metric("noexecute_pdb_timeouts_total", 1.0, Duration::from_secs(5))
        .await?;
    assert!(
        c.log_text().contains("more than one PodDisruptionBudget"),
        "the 500 was seen and logged"
    );
    ns.cleanup().await
}

#[tokio::test]
async fn eviction_mode_without_timeout_never_breaks_a_budget() -> Result<()> {
    let (plane, ns) = namespace("pdb-hold").await?;
    let node = ns.create_node("n", vec![]).await?;
    ready_pod(&ns, "held", &node, "held").await?;
    pdb(&ns, "held", 1, 0).await?;
    let _c = controller(plane, &ns, "evict", &["--eviction-mode", "evict"]).await?;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    assert_not_evicted_for(&ns.pods(), "held", Duration::from_secs(6)).await?;
    ns.cleanup().await
}

/// Events about the controller's Lease (the brake's events; the testkit puts the Lease in
/// namespace `noexecute`), oldest first.
async fn lease_events(ns: &TestNamespace, lease: &str) -> Result<Vec<(String, String)>> {
    let events: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(ns.client.clone(), "noexecute");
    let lp = kube::api::ListParams::default().fields(&format!(
        "involvedObject.name={lease},involvedObject.kind=Lease"
    ));
    let mut list = events.list(&lp).await?.items;
    list.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
    Ok(list
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect())
}

#[tokio::test]
async fn the_mass_eviction_brake_pauses_releases_by_annotation_and_lets_go() -> Result<()> {
    let (plane, ns) = namespace("brake").await?;
    let mut nodes = Vec::new();
    for i in 0..4 {
        let node = ns.create_node(&format!("n{i}"), vec![]).await?;
        ns.create_pod(&pod(&format!("p{i}"), &node, vec![], None))
            .await?;
        nodes.push(node);
    }
    let lease = format!("{}-lease", ns.name);
    let c = controller(
        plane,
        &ns,
        "c",
        &["--brake-threshold", "50", "--leader-elect-name", &lease],
    )
    .await?;
    let taint = || no_execute("example.com/outage", "");
    // 1 and then 2 of 4 nodes (25%, 50%): not more than 50%, evictions go at once.
    add_taint(&ns.nodes(), &nodes[0], taint()).await?;
    wait_evicted(&ns.pods(), "p0", Duration::from_secs(3)).await?;
    add_taint(&ns.nodes(), &nodes[1], taint()).await?;
    wait_evicted(&ns.pods(), "p1", Duration::from_secs(3)).await?;
    assert_eq!(c.metric("noexecute_brake_engaged").await?, Some(0.0));
    // 3 of 4 (75%): the brake holds p2 for the whole window.
    add_taint(&ns.nodes(), &nodes[2], taint()).await?;
    assert_not_evicted_for(&ns.pods(), "p2", Duration::from_secs(3)).await?;
    assert_eq!(c.metric("noexecute_brake_engaged").await?, Some(1.0));
    assert_eq!(c.metric("noexecute_paced_evictions").await?, Some(1.0));
    let engaged = eventually(Duration::from_secs(5), "the brake event", || async {
        Ok(lease_events(&ns, &lease)
            .await?
            .into_iter()
            .find(|(reason, _)| reason == "EvictionBrakeEngaged"))
    })
    .await?;
    assert!(
        engaged.1.contains("3 of 4 nodes (75.0%)") && engaged.1.contains("1 held"),
        "{engaged:?}"
    );
    assert!(
        c.log_text().contains("mass-eviction brake engaged"),
        "the log line"
    );
    // An operator releases n2 alone.
    let annotate =
        serde_json::json!({"metadata": {"annotations": {"noexecute.io/release-brake": "true"}}});
    ns.nodes()
        .patch(&nodes[2], &PatchParams::default(), &Patch::Merge(&annotate))
        .await?;
    wait_evicted(&ns.pods(), "p2", Duration::from_secs(3)).await?;
    // n3 is not released: held while the brake holds.
    add_taint(&ns.nodes(), &nodes[3], taint()).await?;
    assert_not_evicted_for(&ns.pods(), "p3", Duration::from_secs(3)).await?;
    // n0 and n1 recover: 2 of 4 (50%): the brake lets go and p3 goes.
    remove_taint(&ns.nodes(), &nodes[0], "example.com/outage").await?;
    remove_taint(&ns.nodes(), &nodes[1], "example.com/outage").await?;
    wait_evicted(&ns.pods(), "p3", Duration::from_secs(3)).await?;
    assert_eq!(c.metric("noexecute_brake_engaged").await?, Some(0.0));
    assert_eq!(
        c.metric("noexecute_brake_engagements_total").await?,
        Some(1.0)
    );
    eventually(Duration::from_secs(5), "the release event", || async {
        Ok(lease_events(&ns, &lease)
            .await?
            .into_iter()
            .find(|(reason, _)| reason == "EvictionBrakeReleased"))
    })
    .await?;
    ns.cleanup().await
}

#[tokio::test]
async fn rate_limits_space_evictions_overall_and_per_node() -> Result<()> {
    let (plane, ns) = namespace("rate").await?;
    // Overall: 6 pods due at once at 2/s with a burst of 1 start 0.5 s apart: ≥ 2.5 s in all.
    let a = ns.create_node("a", vec![]).await?;
    let b = ns.create_node("b", vec![]).await?;
    let names: Vec<String> = (0..6).map(|i| format!("o{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let node = if i % 2 == 0 { &a } else { &b };
        ns.create_pod(&pod(name, node, vec![], None)).await?;
    }
    let mut c = controller(
        plane,
        &ns,
        "overall",
        &["--max-evictions-per-second", "2", "--eviction-burst", "1"],
    )
    .await?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let watch = {
        let pods = ns.pods();
        let refs: Vec<String> = names.clone();
        tokio::spawn(async move {
            let refs: Vec<&str> = refs.iter().map(String::as_str).collect();
            wait_all_evicted(&pods, &refs, Duration::from_secs(20)).await
        })
    };
    add_taint(&ns.nodes(), &a, no_execute("example.com/t", "")).await?;
    add_taint(&ns.nodes(), &b, no_execute("example.com/t", "")).await?;
    let seen = watch.await??;
    let mut times: Vec<std::time::Instant> = seen.values().copied().collect();
    times.sort();
    let span = times[times.len() - 1].duration_since(times[0]);
    println!("6 evictions at 2/s took {span:?}");
    assert!(
        span >= Duration::from_millis(2300) && span <= Duration::from_secs(5),
        "6 evictions at 2/s (burst 1) should span about 2.5 s, spanned {span:?}"
    );
    assert_eq!(refs.len(), seen.len());
    c.terminate(Duration::from_secs(10)).await?;

    // Per node: 3 pods on each of two nodes at 1/s per node: each node's evictions ≥ ~1 s
    // apart, while the two nodes proceed side by side.
    let c_node = ns.create_node("c", vec![]).await?;
    let d_node = ns.create_node("d", vec![]).await?;
    let mut per_node: Vec<(String, Vec<String>)> = Vec::new();
    for node in [&c_node, &d_node] {
        let mut mine = Vec::new();
        for i in 0..3 {
            let name = format!("{}-{i}", node.rsplit('-').next().unwrap_or("x"));
            ns.create_pod(&pod(&name, node, vec![], None)).await?;
            mine.push(name);
        }
        per_node.push((node.clone(), mine));
    }
    let _c = controller(
        plane,
        &ns,
        "per-node",
        &[
            "--max-node-evictions-per-second",
            "1",
            "--node-eviction-burst",
            "1",
        ],
    )
    .await?;
    let all: Vec<String> = per_node.iter().flat_map(|(_, p)| p.clone()).collect();
    let watch = {
        let pods = ns.pods();
        let all = all.clone();
        tokio::spawn(async move {
            let refs: Vec<&str> = all.iter().map(String::as_str).collect();
            wait_all_evicted(&pods, &refs, Duration::from_secs(20)).await
        })
    };
    add_taint(&ns.nodes(), &c_node, no_execute("example.com/t", "")).await?;
    add_taint(&ns.nodes(), &d_node, no_execute("example.com/t", "")).await?;
    let seen = watch.await??;
    let mut firsts = Vec::new();
    for (node, pods) in &per_node {
        let mut times: Vec<std::time::Instant> = pods.iter().map(|p| seen[p]).collect();
        times.sort();
        for pair in times.windows(2) {
            let gap = pair[1].duration_since(pair[0]);
            assert!(
                gap >= Duration::from_millis(800),
                "evictions on {node} only {gap:?} apart at 1/s per node"
            );
        }
        firsts.push(times[0]);
    }
    let apart = if firsts[0] > firsts[1] {
        firsts[0].duration_since(firsts[1])
    } else {
        firsts[1].duration_since(firsts[0])
    };
    assert!(
        apart < Duration::from_millis(800),
        "the nodes' first evictions were {apart:?} apart: one node held up the other"
    );
    ns.cleanup().await
}

/// The stale-cache guard, driven directly: the executor is handed an immediate eviction that
/// a stale cache would justify (the node's taint is already gone in the API), as happens in
/// the race of kubernetes/kubernetes#119862. A live controller cannot be made to lose that
/// race on demand, so the test plays the cache's part.
#[tokio::test]
async fn the_stale_cache_guard_drops_evictions_the_fresh_node_does_not_justify() -> Result<()> {
    use noexecute::controller::{clock, executor, lease, metrics, ratelimit};
    use noexecute_engine::pipeline::{Attempt, AttemptId, AttemptResult, Finish, Plan, StaleGuard};
    use noexecute_engine::{EvictionId, PodRef, Time, Uid};
    let (plane, ns) = namespace("stale-guard").await?;
    let clean = ns.create_node("clean", vec![]).await?;
    let tainted = ns
        .create_node("tainted", vec![no_execute("example.com/t", "")])
        .await?;
    let mut refs = Vec::new();
    for (name, node) in [("on-clean", &clean), ("on-tainted", &tainted)] {
        let created = ns.create_pod(&pod(name, node, vec![], None)).await?;
        refs.push(PodRef {
            namespace: ns.name.as_str().into(),
            name: name.into(),
            uid: Uid::from(created.metadata.uid.as_deref().unwrap_or_default()),
            node: Some(node.as_str().into()),
        });
    }
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = metrics::Metrics::new(&mut registry);
    let (leadership, _) = lease::Leadership::always();
    let (tx, mut reports) = tokio::sync::mpsc::unbounded_channel();
    let exec = executor::Executor::new(
        plane.controller_client().await?,
        std::sync::Arc::new(ratelimit::RateLimiter::new(50.0, 50)),
        leadership,
        tx,
        metrics.clone(),
        clock::Clock::new(),
        executor::ExecutorConfig {
            request_timeout: Duration::from_secs(10),
            node_read_ttl: Duration::from_secs(1),
            node_selector: None,
            content_type: Default::default(),
        },
    );
    let mut names = std::collections::BTreeMap::new();
    for (i, pod) in refs.into_iter().enumerate() {
        let id = AttemptId(i as u64 + 1);
        names.insert(id, pod.name.to_string());
        let attempt = Attempt {
            id,
            pod,
            eviction: EvictionId(i as u64 + 1),
            deadline: Time::from_millis(0),
            due_at: Time::from_millis(0),
            generation: 0,
            cause: None,
            device: None,
            plan: Plan::ReadFirst {
                guard: Some(StaleGuard::new(noexecute_engine::Config::default())),
                finish: Finish::Delete { fallback: false },
            },
            term: 1,
            announce: None,
        };
        let control = executor::Control::new(
            tokio_util::sync::CancellationToken::new(),
            tokio_util::sync::CancellationToken::new(),
        );
        exec.start(attempt, control);
    }
    let mut outcomes = std::collections::BTreeMap::new();
    while outcomes.len() < 2 {
        let report = tokio::time::timeout(Duration::from_secs(10), reports.recv())
            .await?
            .ok_or_else(|| anyhow::anyhow!("the executor stopped"))?;
        let name = names
            .get(&report.attempt)
            .ok_or_else(|| anyhow::anyhow!("a report for an attempt never started"))?;
        outcomes.insert(name.clone(), report.result);
    }
    // The pod on the still-tainted node goes; the other is dropped, not deleted.
    assert_eq!(outcomes.get("on-tainted"), Some(&AttemptResult::Evicted));
    assert_eq!(outcomes.get("on-clean"), Some(&AttemptResult::Stale));
    wait_evicted(&ns.pods(), "on-tainted", Duration::from_secs(2)).await?;
    assert_not_evicted_for(&ns.pods(), "on-clean", Duration::from_secs(2)).await?;
    // The executor counts what it deleted; avoided evictions are the driver's to count (only
    // for attempts the pipeline takes as live), so this executor, driven alone, counts none.
    assert_eq!(metrics.pod_deletions.get(), 1);
    assert_eq!(metrics.stale_evictions_avoided.get(), 0);
    exec.drain().await;
    ns.cleanup().await
}
