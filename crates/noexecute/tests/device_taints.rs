//! `noexecute run --device-taints` against a real kube-apiserver that serves DeviceTaintRules,
//! with exactly the RBAC of `deploy/rbac.yaml` and `deploy/rbac-device-taints.yaml`
//! (`docs/parity.md` §22). No kube-controller-manager runs, so nothing but noexecute evicts.
//!
//! A driver's ResourceSlice publishes four GPUs; four pods each use a claim allocated one GPU
//! and reserved for the pod (as the scheduler would leave it). Then:
//! - the slice taints gpu-0 (untolerated), gpu-1 (tolerated for an hour) and gpu-2 (tolerated
//!   for 6 s): the pod on gpu-0 is evicted at once, with upstream's device condition and
//!   Event; the pod on gpu-2's taint is removed before its time runs out, which records
//!   "Cancelling deletion"; neither it nor the pod on gpu-1 is evicted over the whole window;
//! - a DeviceTaintRule taints gpu-3 (`NoExecute`): its pod is evicted too.
//!
//! The same scenario and checks run against upstream's `device-taint-eviction-controller`
//! (kube-controller-manager with only it, on a plane of its own): both must pass them.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use noexecute_testkit::dra::{self, object};
use noexecute_testkit::*;
use serde_json::{Value, json};

const DRIVER: &str = "gpu.example.com";
const DEVICE_EVENT: &str = "DeviceTaintManagerEviction";

fn binary() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

fn device(name: &str, taint: Option<Value>) -> Value {
    match taint {
        Some(t) => json!({"name": name, "taints": [t]}),
        None => json!({"name": name}),
    }
}

fn ecc() -> Value {
    json!({"key": "gpu.example.com/ecc", "value": "uncorrectable", "effect": "NoExecute"})
}

/// The slice: gpu-0..3, those in `tainted` with the ECC taint.
fn slice_spec(pool: &str, tainted: &[&str]) -> Value {
    let devices: Vec<Value> = ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
        .iter()
        .map(|d| device(d, tainted.contains(d).then(ecc)))
        .collect();
    json!({
        "driver": DRIVER,
        "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
        "allNodes": true,
        "devices": devices
    })
}

/// A pod on `node` using the claim `NAME-gpu`, allocated `gpu`, tolerating the ECC taint for
/// `seconds` (none: not at all).
async fn pod_with_gpu(
    ns: &TestNamespace,
    claims: &Api<DynamicObject>,
    node: &str,
    pool: &str,
    name: &str,
    gpu: &str,
    seconds: Option<i64>,
) -> Result<Pod> {
    let claim = format!("{name}-gpu");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns.name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}]
        }
    }))?;
    let pod = ns.create_pod(&pod).await?;
    let uid = pod.metadata.uid.clone().context("the pod's uid")?;
    let ar = dra::claims();
    claims
        .create(
            &PostParams::default(),
            &object(
                &ar,
                json!({
                    "metadata": {"name": claim},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                        "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}}]}}
                }),
            )?,
        )
        .await
        .with_context(|| format!("creating the claim {claim}"))?;
    let mut result = json!({"request": "gpu", "driver": DRIVER, "pool": pool, "device": gpu});
    if let Some(s) = seconds {
        result["tolerations"] = json!([{"key": "gpu.example.com/ecc", "operator": "Exists",
                                        "effect": "NoExecute", "tolerationSeconds": s}]);
    }
    claims
        .patch_status(
            &claim,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "allocation": {"devices": {"results": [result]}},
                "reservedFor": [{"resource": "pods", "name": name, "uid": uid}]
            }})),
        )
        .await
        .with_context(|| format!("allocating the claim {claim}"))?;
    Ok(pod)
}

/// The pod's Events of reason `DeviceTaintManagerEviction`: (message, component, UID named).
async fn device_events(
    client: &kube::Client,
    ns: &str,
    pod: &str,
) -> Result<Vec<(String, String, String)>> {
    Ok(pod_events(client, ns, pod)
        .await?
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(DEVICE_EVENT))
        .map(|e| {
            (
                e.message.unwrap_or_default(),
                e.source.and_then(|s| s.component).unwrap_or_default(),
                e.involved_object.uid.unwrap_or_default(),
            )
        })
        .collect())
}

/// What one controller did with the scenario.
#[derive(Debug)]
struct Outcome {
    /// Seconds from the slice taint to the victim's eviction, and from the rule to its pod's.
    victim_after: Duration,
    ruled_after: Duration,
}

/// Who evicts: noexecute (`run --device-taints`) or upstream's device-taint-eviction-controller.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Noexecute,
    Upstream,
}

/// A plane serving DeviceTaintRules, a namespace with a node, and a driver's slice of four
/// untainted GPUs in the pool `NAMESPACE-pool`.
struct Gpus {
    plane: Plane,
    admin: kube::Client,
    ns: TestNamespace,
    node: String,
    pool: String,
    slice_name: String,
    slices: Api<DynamicObject>,
    claims: Api<DynamicObject>,
    rules: Api<DynamicObject>,
}

impl Gpus {
    async fn up(name: &str, controllers: &[&str], kcm_args: &str) -> Result<Gpus> {
        let plane = Plane::up_with_env(
            name,
            controllers,
            &[
                ("NOEXECUTE_APISERVER_ARGS", dra::APISERVER_ARGS),
                ("NOEXECUTE_KCM_ARGS", kcm_args),
            ],
        )?;
        plane.install_device_rbac()?;
        let admin = plane.admin_client().await?;
        let ns = TestNamespace::create(&admin, name).await?;
        let node = ns.create_node("n", vec![]).await?;
        let pool = format!("{}-pool", ns.name);
        let slice_name = format!("{}-gpus", ns.name);
        let slices: Api<DynamicObject> = Api::all_with(admin.clone(), &dra::slices());
        let claims: Api<DynamicObject> =
            Api::namespaced_with(admin.clone(), &ns.name, &dra::claims());
        let rules: Api<DynamicObject> = Api::all_with(admin.clone(), &dra::rules());
        slices
            .create(
                &PostParams::default(),
                &object(
                    &dra::slices(),
                    json!({"metadata": {"name": slice_name}, "spec": slice_spec(&pool, &[])}),
                )?,
            )
            .await
            .context("creating the ResourceSlice")?;
        Ok(Gpus {
            plane,
            admin,
            ns,
            node,
            pool,
            slice_name,
            slices,
            claims,
            rules,
        })
    }
}

/// The scenario of the module documentation, on a plane of its own; every check applies to
/// both controllers alike.
async fn scenario(who: Who) -> Result<Outcome> {
    let name = match who {
        Who::Noexecute => "device-taints",
        Who::Upstream => "device-taints-upstream",
    };
    let (controllers, kcm_args): (&[&str], &str) = match who {
        Who::Noexecute => (&[], ""),
        // Only upstream's device controller, with the rules' gate as the API server has it.
        Who::Upstream => (
            &["device-taint-eviction-controller"],
            "--feature-gates=DRADeviceTaintRules=true",
        ),
    };
    let Gpus {
        plane,
        admin,
        ns,
        node,
        pool,
        slice_name,
        slices,
        claims,
        rules,
    } = Gpus::up(name, controllers, kcm_args).await?;
    let victim = pod_with_gpu(&ns, &claims, &node, &pool, "victim", "gpu-0", None).await?;
    pod_with_gpu(&ns, &claims, &node, &pool, "patient", "gpu-1", Some(3600)).await?;
    pod_with_gpu(&ns, &claims, &node, &pool, "recovers", "gpu-2", Some(6)).await?;
    pod_with_gpu(&ns, &claims, &node, &pool, "ruled", "gpu-3", None).await?;

    let mut controller = match who {
        Who::Noexecute => {
            let mut c = Controller::start(
                &plane,
                binary(),
                &ns.name,
                &["--leader-elect=false", "--device-taints"],
            )?;
            c.wait_ready(Duration::from_secs(30)).await?;
            ensure!(
                c.log_text().contains("and DeviceTaintRules"),
                "the controller found DeviceTaintRules served: {}",
                c.log_text()
            );
            Some(c)
        }
        Who::Upstream => None,
    };
    // Let the controller see the objects before the taint, as in a running cluster.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Taint gpu-0, gpu-1 and gpu-2 in the slice.
    let log = EvictionLog::start(ns.pods());
    log.listed(Duration::from_secs(10)).await?;
    let tainted = Instant::now();
    slices
        .patch(
            &slice_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": slice_spec(&pool, &["gpu-0", "gpu-1", "gpu-2"])})),
        )
        .await
        .context("tainting the devices")?;
    let evicted = wait_evicted(&ns.pods(), "victim", Duration::from_secs(5)).await?;
    let victim_after = evicted.seen_at.duration_since(tainted);
    let last = evicted.last.context("the victim as last seen")?;
    let c = condition(&last, "DisruptionTarget").context("the DisruptionTarget condition")?;
    ensure!(
        c.status == "True"
            && c.reason.as_deref() == Some("DeletionByDeviceTaintManager")
            && c.message.as_deref()
                == Some("Device Taint manager: deleting due to NoExecute taint"),
        "the device controller's condition: {c:?}"
    );
    let victim_uid = victim.metadata.uid.clone().context("uid")?;
    let events = eventually(Duration::from_secs(5), "the victim's Event", || async {
        let events = device_events(&admin, &ns.name, "victim").await?;
        Ok((!events.is_empty()).then_some(events))
    })
    .await?;
    ensure!(
        events
            == vec![(
                "Marking for deletion".to_string(),
                "device-taint-eviction-controller".to_string(),
                victim_uid
            )],
        "upstream's device Event, about the pod's UID: {events:?}"
    );

    // gpu-2's taint goes away before its 6 s run out: "Cancelling deletion".
    slices
        .patch(
            &slice_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": slice_spec(&pool, &["gpu-0", "gpu-1"])})),
        )
        .await
        .context("untainting gpu-2")?;
    let cancelled = eventually(Duration::from_secs(5), "Cancelling deletion", || async {
        let events = device_events(&admin, &ns.name, "recovers").await?;
        Ok(events
            .iter()
            .any(|(m, _, _)| m == "Cancelling deletion")
            .then_some(events))
    })
    .await?;
    ensure!(cancelled.len() == 1, "{cancelled:?}");

    // A rule taints gpu-3: its pod goes too.
    let rule_name = format!("{}-gpu-3", ns.name);
    let ruled_at = Instant::now();
    rules
        .create(
            &PostParams::default(),
            &object(
                &dra::rules(),
                json!({
                    "metadata": {"name": rule_name},
                    "spec": {
                        "deviceSelector": {"driver": DRIVER, "pool": pool, "device": "gpu-3"},
                        "taint": {"key": "maintenance", "effect": "NoExecute"}
                    }
                }),
            )?,
        )
        .await
        .context("creating the DeviceTaintRule")?;
    let ruled = wait_evicted(&ns.pods(), "ruled", Duration::from_secs(5)).await?;
    let ruled_after = ruled.seen_at.duration_since(ruled_at);
    // The rule's status: Completed, written 10 s after the eviction, by the device
    // controller's field manager.
    let rule = eventually(
        Duration::from_secs(20),
        "the rule's Completed status",
        || async {
            let rule = rules.get(&rule_name).await?;
            let condition = rule.data["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "EvictionInProgress"))
                .cloned();
            Ok(condition
                .filter(|c| c["reason"] == "Completed")
                .map(|c| (c, rule)))
        },
    )
    .await?;
    let (condition, rule) = rule;
    ensure!(
        condition["status"] == "False"
            && condition["message"] == "1 pod evicted since starting the controller."
            && condition["observedGeneration"] == 1,
        "{condition}"
    );
    let managers: Vec<(String, String)> = rule
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.subresource.clone().unwrap_or_default(),
            )
        })
        .collect();
    ensure!(
        managers.contains(&(
            "device-taint-eviction-controller".to_string(),
            "status".to_string()
        )),
        "upstream's field manager owns the status: {managers:?}"
    );

    // Over the rest of the window (past gpu-2's 6 s), the tolerating pods stay.
    let window_end = tainted + Duration::from_secs(9);
    assert_not_evicted_for(
        &ns.pods(),
        "recovers",
        window_end.saturating_duration_since(Instant::now()),
    )
    .await?;
    ensure!(
        log.names() == vec!["ruled".to_string(), "victim".to_string()],
        "evicted over the window: {:?}",
        log.names()
    );
    if let Some(controller) = &mut controller {
        controller
            .wait_metric(
                "device_taint_eviction_controller_pod_deletions_total",
                2.0,
                Duration::from_secs(5),
            )
            .await?;
        ensure!(
            controller
                .metric("taint_eviction_controller_pod_deletions_total")
                .await?
                == Some(0.0),
            "device evictions are the device controller's metric, not the node controller's"
        );
    }

    rules.delete(&rule_name, &Default::default()).await?;
    slices.delete(&slice_name, &Default::default()).await?;
    ns.cleanup().await?;
    plane.down()?;
    Ok(Outcome {
        victim_after,
        ruled_after,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_taints_evict_as_upstreams_device_controller_does() -> Result<()> {
    let ours = scenario(Who::Noexecute).await?;
    println!(
        "noexecute: victim evicted {:?} after the slice taint, ruled {:?} after the rule",
        ours.victim_after, ours.ruled_after
    );
    Ok(())
}

/// The reference: the same scenario and the same checks pass with upstream's controller.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_device_controller_passes_the_same_checks() -> Result<()> {
    let upstream = scenario(Who::Upstream).await?;
    println!(
        "upstream: victim evicted {:?} after the slice taint, ruled {:?} after the rule",
        upstream.victim_after, upstream.ruled_after
    );
    Ok(())
}

/// `--dry-run` with device taints: the pod a rule makes due is decided (the dry-run Event and
/// metric say so) but nothing is written: judged from the API server's audit log, noexecute
/// sends no request but Events, no pod patch or delete and no rule status, over the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_writes_nothing_for_devices() -> Result<()> {
    let Gpus {
        plane,
        admin,
        ns,
        node,
        pool,
        slice_name,
        slices,
        claims,
        rules,
    } = Gpus::up("device-dry-run", &[], "").await?;
    pod_with_gpu(&ns, &claims, &node, &pool, "kept", "gpu-0", None).await?;
    let mut c = Controller::start(
        &plane,
        binary(),
        &ns.name,
        &["--leader-elect=false", "--device-taints", "--dry-run"],
    )?;
    c.wait_ready(Duration::from_secs(30)).await?;
    let rule_name = format!("{}-gpu-0", ns.name);
    let started = Instant::now();
    rules
        .create(
            &PostParams::default(),
            &object(
                &dra::rules(),
                json!({
                    "metadata": {"name": rule_name},
                    "spec": {
                        "deviceSelector": {"driver": DRIVER, "pool": pool, "device": "gpu-0"},
                        "taint": {"key": "maintenance", "effect": "NoExecute"}
                    }
                }),
            )?,
        )
        .await
        .context("creating the DeviceTaintRule")?;
    // Decided: the dry-run Event and metric (the positive control) ...
    // (upstream's device Event says "Marking for deletion", without the pod's name).
    eventually(Duration::from_secs(5), "the dry-run event", || async {
        let events = device_events(&admin, &ns.name, "kept").await?;
        Ok(events
            .iter()
            .any(|(m, _, _)| m == "[dry-run] Marking for deletion")
            .then_some(()))
    })
    .await?;
    c.wait_metric(
        "noexecute_dry_run_evictions_total",
        1.0,
        Duration::from_secs(5),
    )
    .await?;
    // ... and over the window (past the rule status's 10 s), nothing written.
    assert_not_evicted_for(
        &ns.pods(),
        "kept",
        (started + Duration::from_secs(12)).saturating_duration_since(Instant::now()),
    )
    .await?;
    let live = ns.pods().get("kept").await?;
    ensure!(
        condition(&live, "DisruptionTarget").is_none(),
        "nothing patched"
    );
    let rule = rules.get(&rule_name).await?;
    ensure!(
        rule.data["status"]["conditions"].is_null(),
        "no rule status in a dry run: {}",
        rule.data["status"]
    );
    let writes: Vec<String> = plane
        .audit()?
        .into_iter()
        .filter(|e| e.user_agent.starts_with("noexecute/"))
        .filter(|e| matches!(e.verb.as_str(), "create" | "update" | "patch" | "delete"))
        .filter(|e| e.resource != "events")
        .map(|e| format!("{} {}/{} {}", e.verb, e.resource, e.subresource, e.name))
        .collect();
    ensure!(
        writes.is_empty(),
        "noexecute wrote in a dry run: {writes:?}"
    );
    rules.delete(&rule_name, &Default::default()).await?;
    slices.delete(&slice_name, &Default::default()).await?;
    ns.cleanup().await?;
    plane.down()?;
    Ok(())
}
