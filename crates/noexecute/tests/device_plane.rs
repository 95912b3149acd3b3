//! Device taints on a whole plane with DRA and no real driver (`scripts/cluster up --full
//! --dra`): the test publishes a ResourceSlice per kwok node as a driver would, a DeviceClass
//! and ResourceClaimTemplates; kube-controller-manager's resourceclaim controller makes each
//! pod's claim, kube-scheduler allocates a device and binds the pod, and kwok runs it.
//!
//! Four nodes with four GPUs each; on each node three pods, one GPU each: `none` (its request
//! tolerates nothing), `short` (tolerates the ECC taint for 6 s) and `forever` (tolerates it
//! without seconds, which ignores it). Then, at once:
//! - the driver taints every GPU of node 0 in its ResourceSlice;
//! - a DeviceTaintRule taints every GPU of node 1's pool.
//!
//! The same runs on a second plane where upstream's `device-taint-eviction-controller` evicts.
//! Both must evict the same pods (`none` and `short` of nodes 0 and 1); `forever` pods and the
//! pods of nodes 2 and 3 stay over the whole window. Times are wall-clock seconds after the
//! taint was written. The API server stamps `timeAdded` in whole seconds (truncated), so a
//! `short` pod is due 6 s after that stamp, up to 1 s before 6 s after the write, differently
//! on each plane: each eviction's lateness (after when it was due: the stamp plus its
//! seconds, or the write for an untolerated taint) must be within 1 s of upstream's. On each
//! plane `noexecute plan`, run live just before the taints with them as its hypothesis, must
//! have predicted the evicted set and each time after the taint within 2 s.
//!
//! Then, on noexecute's plane only, with the brake at 50 %: a rule tainting every GPU of the
//! driver is held (nodes 2 and 3's `none` pods stay), except on node 3, released by its
//! annotation, whose `none` pod goes (the positive control in the same window); `plan` says
//! "held" beforehand.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use noexecute_testkit::dra::{self, object};
use noexecute_testkit::*;
use serde_json::{Value, json};

const DRIVER: &str = "gpu.example.com";
const ECC: &str = "gpu.example.com/ecc";
const NODES: usize = 4;
const GPUS: usize = 4;
/// The `short` pods' tolerationSeconds.
const SHORT: u64 = 6;
/// How long after the taints the window is watched (past `SHORT`).
const WINDOW: Duration = Duration::from_secs(SHORT + 5);
const KINDS: [&str; 3] = ["none", "short", "forever"];

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

fn node(i: usize) -> String {
    format!("zone-a-{i}")
}

fn class() -> ApiResource {
    dra::resource("v1", "DeviceClass", "deviceclasses")
}

fn templates() -> ApiResource {
    dra::resource("v1", "ResourceClaimTemplate", "resourceclaimtemplates")
}

/// Node `i`'s slice: its pool (named after the node) with gpu-0..3, each with `taint` if any.
fn slice(i: usize, taint: Option<&Value>) -> Value {
    let devices: Vec<Value> = (0..GPUS)
        .map(|g| match taint {
            Some(t) => json!({"name": format!("gpu-{g}"), "taints": [t]}),
            None => json!({"name": format!("gpu-{g}")}),
        })
        .collect();
    json!({
        "metadata": {"name": format!("{}-gpus", node(i))},
        "spec": {
            "driver": DRIVER,
            "nodeName": node(i),
            "pool": {"name": node(i), "generation": 1, "resourceSliceCount": 1},
            "devices": devices
        }
    })
}

fn ecc_taint() -> Value {
    json!({"key": ECC, "value": "uncorrectable", "effect": "NoExecute"})
}

/// A DeviceTaintRule tainting the driver's devices with the ECC taint (in `pool` only, if any).
fn rule(name: &str, pool: Option<&str>) -> Value {
    let mut selector = json!({"driver": DRIVER});
    if let Some(pool) = pool {
        selector["pool"] = json!(pool);
    }
    json!({
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {"deviceSelector": selector, "taint": {"key": ECC, "value": "maintenance", "effect": "NoExecute"}}
    })
}

/// A template whose request tolerates the ECC taint as `kind` says.
fn template(kind: &str) -> Value {
    let mut exactly =
        json!({"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1});
    match kind {
        "short" => {
            exactly["tolerations"] = json!([{"key": ECC, "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": SHORT}])
        }
        "forever" => {
            exactly["tolerations"] =
                json!([{"key": ECC, "operator": "Exists", "effect": "NoExecute"}])
        }
        _ => {}
    }
    json!({
        "metadata": {"name": format!("gpu-{kind}")},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}
    })
}

fn pod_name(i: usize, kind: &str) -> String {
    format!("n{i}-{kind}")
}

/// The cluster-scoped objects of the scenario, and the pods with their claims, Running.
async fn populate(client: &Client, ns: &TestNamespace) -> Result<()> {
    let classes: Api<DynamicObject> = Api::all_with(client.clone(), &class());
    classes
        .create(
            &PostParams::default(),
            &object(
                &class(),
                json!({
                    "metadata": {"name": DRIVER},
                    "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{DRIVER}'")}}]}
                }),
            )?,
        )
        .await
        .context("creating the DeviceClass")?;
    let slices: Api<DynamicObject> = Api::all_with(client.clone(), &dra::slices());
    for i in 0..NODES {
        slices
            .create(
                &PostParams::default(),
                &object(&dra::slices(), slice(i, None))?,
            )
            .await
            .with_context(|| format!("creating node {i}'s ResourceSlice"))?;
    }
    let tpl: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &templates());
    for kind in KINDS {
        tpl.create(
            &PostParams::default(),
            &object(&templates(), template(kind))?,
        )
        .await
        .with_context(|| format!("creating the template gpu-{kind}"))?;
    }
    for i in 0..NODES {
        for kind in KINDS {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": pod_name(i, kind)},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node(i)},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.invalid/pause:1",
                                    "resources": {"claims": [{"name": "gpu"}]}}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": format!("gpu-{kind}")}]
                }
            }))?;
            ns.pods()
                .create(&PostParams::default(), &pod)
                .await
                .with_context(|| format!("creating {}", pod_name(i, kind)))?;
        }
    }
    // Scheduled with a device each, Running, and the claims reserved for them.
    let claims: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &dra::claims());
    let want = NODES * KINDS.len();
    eventually(
        Duration::from_secs(90),
        "every pod Running with its claim reserved",
        || async {
            let pods = ns.pods().list(&ListParams::default()).await?;
            let running = pods
                .items
                .iter()
                .filter(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                        && p.status
                            .as_ref()
                            .and_then(|s| s.resource_claim_statuses.as_ref())
                            .is_some_and(|c| !c.is_empty())
                })
                .count();
            let reserved = claims
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .filter(|c| {
                    c.data["status"]["reservedFor"]
                        .as_array()
                        .is_some_and(|r| !r.is_empty())
                        && c.data["status"]["allocation"]["devices"]["results"][0]["pool"]
                            .is_string()
                })
                .count();
            Ok((running == want && reserved == want).then_some(()))
        },
    )
    .await?;
    // Each pod's device is on its own node (pool = node).
    for c in claims.list(&ListParams::default()).await?.items {
        let pool = c.data["status"]["allocation"]["devices"]["results"][0]["pool"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let owner = c.data["status"]["reservedFor"][0]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let i: usize = owner
            .get(1..2)
            .with_context(|| format!("claim reserved for {owner:?}"))?
            .parse()?;
        ensure!(
            pool == node(i),
            "claim {:?} of {owner} allocated from {pool}",
            c.metadata.name
        );
    }
    Ok(())
}

/// `noexecute plan` live, as JSON rows: pod → (decision, seconds from its now).
fn plan(plane: &Plane, extra: &[&str]) -> Result<BTreeMap<String, (String, Option<f64>)>> {
    let kubeconfig = plane.kubeconfig.to_str().context("kubeconfig path")?;
    let mut args = vec!["plan", "--kubeconfig", kubeconfig, "-o", "json"];
    args.extend_from_slice(extra);
    let output = std::process::Command::new(binary()).args(&args).output()?;
    ensure!(
        output.status.success(),
        "plan {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rows: Vec<Value> = serde_json::from_slice(&output.stdout)?;
    let mut out = BTreeMap::new();
    for row in rows {
        let pod = row["pod"].as_str().context("a row's pod")?;
        let name = pod.rsplit('/').next().unwrap_or(pod).to_string();
        out.insert(
            name,
            (
                row["decision"].as_str().unwrap_or_default().to_string(),
                row["at"].as_f64(),
            ),
        );
    }
    Ok(out)
}

/// Who evicts on the plane.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Noexecute,
    Upstream,
}

/// What a plane saw: pod → (seconds from the taint's write to its eviction, seconds after it
/// was due).
type Evictions = BTreeMap<String, (f64, f64)>;

/// A `timeAdded` as wall-clock time.
fn wall(value: &Value) -> Result<SystemTime> {
    let t: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time =
        serde_json::from_value(value.clone()).with_context(|| format!("timeAdded {value}"))?;
    let ms = u64::try_from(t.0.as_millisecond()).context("a timeAdded before 1970")?;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

fn secs_between(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

async fn scenario(who: Who) -> Result<Evictions> {
    let name = match who {
        Who::Noexecute => "device-plane",
        Who::Upstream => "device-plane-upstream",
    };
    Plane::reset(name)?;
    let plane = Plane::full_dra(name, 1, NODES as u32, who == Who::Upstream)?;
    plane.install_rbac()?;
    plane.install_device_rbac()?;
    let admin = plane.admin_client().await?;
    let ns = TestNamespace::create(&admin, "device-plane").await?;
    populate(&admin, &ns).await?;

    let mut controller = match who {
        Who::Noexecute => {
            let mut c = Controller::start(
                &plane,
                binary(),
                "device-plane",
                &["--leader-elect=false", "--device-taints"],
            )?;
            c.wait_ready(Duration::from_secs(30)).await?;
            Some(c)
        }
        Who::Upstream => None,
    };

    // The prediction, from the live plane, just before the taints.
    let rule_file = plane.state_dir.join("rule-node-1.json");
    std::fs::write(&rule_file, rule("node-1-ecc", Some(&node(1))).to_string())?;
    let device_flags: Vec<String> = (0..GPUS)
        .map(|g| format!("{DRIVER}/{}/gpu-{g}={ECC}=uncorrectable:NoExecute", node(0)))
        .collect();
    let mut extra: Vec<&str> = Vec::new();
    for f in &device_flags {
        extra.extend(["--device-taint", f.as_str()]);
    }
    let rule_path = rule_file.to_str().context("rule path")?;
    extra.extend(["--device-rule", rule_path]);
    let predicted = plan(&plane, &extra)?;

    let log = EvictionLog::start(ns.pods());
    log.listed(Duration::from_secs(10)).await?;
    let slices: Api<DynamicObject> = Api::all_with(admin.clone(), &dra::slices());
    let rules: Api<DynamicObject> = Api::all_with(admin.clone(), &dra::rules());
    let tainted = Instant::now();
    let tainted_wall = SystemTime::now();
    let taint = ecc_taint();
    slices
        .patch(
            &format!("{}-gpus", node(0)),
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": slice(0, Some(&taint))["spec"]})),
        )
        .await
        .context("tainting node 0's GPUs in the slice")?;
    rules
        .create(
            &PostParams::default(),
            &object(&dra::rules(), rule("node-1-ecc", Some(&node(1))))?,
        )
        .await
        .context("creating the rule for node 1's pool")?;
    let ruled = Instant::now();
    ensure!(
        ruled.duration_since(tainted) < Duration::from_millis(500),
        "the slice taint and the rule are {:?} apart",
        ruled.duration_since(tainted)
    );
    // The whole window, then what was evicted when.
    tokio::time::sleep_until((tainted + WINDOW).into()).await;
    // The taints' timeAdded as the API server stamped them: node 0's in its slice, node 1's
    // in the rule.
    let slice0 = slices.get(&format!("{}-gpus", node(0))).await?;
    let added0 = wall(&slice0.data["spec"]["devices"][0]["taints"][0]["timeAdded"])?;
    let rule1 = rules.get("node-1-ecc").await?;
    let added1 = wall(&rule1.data["spec"]["taint"]["timeAdded"])?;
    let mut seen = Evictions::new();
    for name in log.names() {
        let at = log.at(&name).context("eviction time")?;
        let added = if name.starts_with("n0-") {
            added0
        } else {
            added1
        };
        let due = if name.ends_with("-short") {
            added + Duration::from_secs(SHORT)
        } else {
            added
        }
        .max(tainted_wall);
        seen.insert(
            name,
            (secs_between(tainted_wall, at), secs_between(due, at)),
        );
    }
    let expected: Vec<String> = [0, 1]
        .iter()
        .flat_map(|i| [pod_name(*i, "none"), pod_name(*i, "short")])
        .collect();
    let mut names: Vec<String> = seen.keys().cloned().collect();
    names.sort();
    let mut want = expected.clone();
    want.sort();
    ensure!(names == want, "{who:?} evicted {seen:?}; expected {want:?}");
    for (pod, (after, late)) in &seen {
        ensure!(
            (-0.05..1.0).contains(late),
            "{who:?}: {pod} evicted {after:.2} s after the taint, {late:.2} s after it was due"
        );
    }
    // The forever pods are still there, unmarked, at the end of the window.
    for i in 0..NODES {
        let pod = ns.pods().get(&pod_name(i, "forever")).await?;
        ensure!(
            pod.metadata.deletion_timestamp.is_none(),
            "{} is marked",
            pod_name(i, "forever")
        );
    }
    // The plan predicted it: the same set, each within 2 s of its time after the taint (the
    // plan's hypothetical taints are added at its now).
    let planned: BTreeMap<&String, f64> = predicted
        .iter()
        .filter(|(_, (decision, _))| decision == "evict")
        .map(|(pod, (_, at))| (pod, at.unwrap_or(f64::NAN)))
        .collect();
    ensure!(
        planned.keys().map(|k| k.as_str()).collect::<Vec<_>>()
            == want.iter().map(String::as_str).collect::<Vec<_>>(),
        "{who:?}: plan predicted {predicted:?}, evicted {seen:?}"
    );
    for (pod, at) in &planned {
        let actual = seen[*pod].0;
        println!("{who:?}: {pod} planned {at:.2} s after the taint, evicted {actual:.2} s");
        ensure!(
            (actual - at).abs() <= 2.0,
            "{who:?}: plan said {pod} at {at:.2} s after the taint, it went at {actual:.2} s"
        );
    }
    for i in 0..2 {
        let (decision, _) = predicted
            .get(&pod_name(i, "forever"))
            .with_context(|| format!("plan has no row for {}", pod_name(i, "forever")))?;
        ensure!(
            decision == "safe",
            "plan on {}: {decision}",
            pod_name(i, "forever")
        );
    }

    if let Some(c) = controller.as_mut() {
        c.kill().await?;
        brake(&plane, &admin, &ns, &rules).await?;
    }
    drop(log);
    ns.cleanup().await?;
    plane.down()?;
    Ok(seen)
}

/// The brake at 50 % holds a rule over every GPU; node 3, released, lets its pod go.
async fn brake(
    plane: &Plane,
    admin: &Client,
    ns: &TestNamespace,
    rules: &Api<DynamicObject>,
) -> Result<()> {
    let mut c = Controller::start(
        plane,
        binary(),
        "device-plane-brake",
        &[
            "--leader-elect=false",
            "--device-taints",
            "--brake-threshold=50",
        ],
    )?;
    c.wait_ready(Duration::from_secs(30)).await?;
    let rule_file = plane.state_dir.join("rule-all.json");
    std::fs::write(&rule_file, rule("all-ecc", None).to_string())?;
    let rule_path = rule_file.to_str().context("rule path")?;
    let predicted = plan(plane, &["--device-rule", rule_path, "--brake-threshold=50"])?;
    for i in [2, 3] {
        let (decision, _) = predicted
            .get(&pod_name(i, "none"))
            .with_context(|| format!("plan has no row for {}", pod_name(i, "none")))?;
        ensure!(
            decision == "held",
            "plan with the brake on {}: {decision}",
            pod_name(i, "none")
        );
    }
    let nodes: Api<Node> = Api::all(admin.clone());
    nodes
        .patch(
            &node(3),
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"noexecute.io/release-brake": "true"}}}),
            ),
        )
        .await
        .context("releasing node 3")?;
    let log = EvictionLog::start(ns.pods());
    log.listed(Duration::from_secs(10)).await?;
    let start = Instant::now();
    rules
        .create(
            &PostParams::default(),
            &object(&dra::rules(), rule("all-ecc", None))?,
        )
        .await
        .context("creating the rule over every GPU")?;
    // The positive control goes in the window; node 2's pod stays over all of it.
    let released = wait_evicted(&ns.pods(), &pod_name(3, "none"), Duration::from_secs(5)).await?;
    assert_not_evicted_for(
        &ns.pods(),
        &pod_name(2, "none"),
        (start + WINDOW).saturating_duration_since(Instant::now()),
    )
    .await?;
    let evicted: Vec<String> = log
        .names()
        .into_iter()
        .filter(|n| n.starts_with("n2-") || n.starts_with("n3-"))
        .collect();
    // Node 3's `short` pod was due 6 s in: released too, it went in the window.
    ensure!(
        evicted == vec![pod_name(3, "none"), pod_name(3, "short")],
        "with the brake, only node 3's untolerating and short pods go: {evicted:?}"
    );
    ensure!(
        released.seen_at.duration_since(start) < Duration::from_secs(2),
        "the released pod went {:?} after the rule",
        released.seen_at.duration_since(start)
    );
    let braking = c.metric("noexecute_brake_engaged").await?;
    if braking != Some(1.0) {
        bail!("the brake is not reported engaged: {braking:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_taints_on_a_whole_plane_match_upstream_and_the_plan() -> Result<()> {
    let ours = scenario(Who::Noexecute).await?;
    let upstream = scenario(Who::Upstream).await?;
    println!("seconds from the taint to each eviction (and after it was due):");
    ensure!(
        ours.keys().eq(upstream.keys()),
        "evicted sets differ: {ours:?} vs {upstream:?}"
    );
    for (pod, (at, late)) in &ours {
        let (theirs, their_late) = upstream[pod];
        println!(
            "  {pod}: noexecute {at:.2} ({late:.2} late), upstream {theirs:.2} ({their_late:.2} late)"
        );
        ensure!(
            (late - their_late).abs() <= 1.0,
            "{pod}: noexecute {late:.2} s late, upstream {their_late:.2} s"
        );
    }
    Ok(())
}
