//! Device taints at upstream's integration size (issue 22): 1,000 pods, each with a claim
//! allocated one device of 20 ResourceSlices of 50 devices, and one DeviceTaintRule that
//! taints them all. Upstream's `device-taint-eviction-controller` and `noexecute run
//! --device-taints` each get a plane of their own, one after the other, at the same client
//! QPS; both must evict every pod, and the makespans (rule created → last pod evicted) are
//! printed side by side. A second rule with effect `None` previews the same devices: both
//! controllers must write the same preview, once each has evicted a sentinel pod written after
//! all the others (so neither judges from a cache still catching up).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use noexecute_testkit::dra::{self, object};
use noexecute_testkit::*;
use serde_json::json;

const DRIVER: &str = "gpu.example.com";
const SLICES: usize = 20;
const DEVICES: usize = 50;
const QPS: &str = "200";
/// The sentinel's driver: no rule below selects it.
const SENTINEL_DRIVER: &str = "sentinel.example.com";

fn binary() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

/// A pod on `node` with the claim `name`, allocated `device` (driver, pool, device) and
/// reserved for the pod, as the scheduler would leave it.
async fn pod_with_device(
    pods: &Api<Pod>,
    claims: &Api<DynamicObject>,
    ns: &str,
    node: &str,
    name: &str,
    (driver, pool, device): (&str, &str, &str),
) -> Result<()> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": name}]}
    }))?;
    let pod = pods.create(&PostParams::default(), &pod).await?;
    let uid = pod.metadata.uid.context("uid")?;
    claims
        .create(
            &PostParams::default(),
            &object(
                &dra::claims(),
                json!({"metadata": {"name": name},
                       "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                           "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1}}]}}}),
            )?,
        )
        .await?;
    claims
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "allocation": {"devices": {"results": [{"request": "gpu", "driver": driver,
                    "pool": pool, "device": device}]}},
                "reservedFor": [{"resource": "pods", "name": name, "uid": uid}]
            }})),
        )
        .await?;
    Ok(())
}

/// A DeviceTaintRule tainting every device of `DRIVER` with `key` and `effect`.
async fn rule_over_every_device(
    rules: &Api<DynamicObject>,
    name: &str,
    key: &str,
    effect: &str,
) -> Result<()> {
    rules
        .create(
            &PostParams::default(),
            &object(
                &dra::rules(),
                json!({"metadata": {"name": name},
                       "spec": {"deviceSelector": {"driver": DRIVER},
                                "taint": {"key": key, "effect": effect}}}),
            )?,
        )
        .await
        .with_context(|| format!("creating the rule {name}"))?;
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Who {
    Noexecute,
    Upstream,
}

struct Run {
    makespan: Duration,
    preview: String,
}

async fn run(who: Who) -> Result<Run> {
    let (name, controllers, kcm_args): (&str, &[&str], String) = match who {
        Who::Noexecute => ("device-scale", &[], String::new()),
        Who::Upstream => (
            "device-scale-upstream",
            &["device-taint-eviction-controller"],
            format!(
                "--feature-gates=DRADeviceTaintRules=true --kube-api-qps={QPS} --kube-api-burst={QPS}"
            ),
        ),
    };
    let plane = Plane::up_with_env(
        name,
        controllers,
        &[
            ("NOEXECUTE_APISERVER_ARGS", dra::APISERVER_ARGS),
            ("NOEXECUTE_KCM_ARGS", &kcm_args),
        ],
    )?;
    plane.install_device_rbac()?;
    let admin = plane.admin_client().await?;
    let ns = TestNamespace::create(&admin, "device-scale").await?;
    let node = ns.create_node("n", vec![]).await?;
    let slices: Api<DynamicObject> = Api::all_with(admin.clone(), &dra::slices());
    let claims: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns.name, &dra::claims());
    let rules: Api<DynamicObject> = Api::all_with(admin.clone(), &dra::rules());
    let pool = |s: usize| format!("{}-pool-{s}", ns.name);
    for s in 0..SLICES {
        let devices: Vec<_> = (0..DEVICES)
            .map(|d| json!({"name": format!("gpu-{d}")}))
            .collect();
        slices
            .create(
                &PostParams::default(),
                &object(
                    &dra::slices(),
                    json!({
                        "metadata": {"name": format!("{}-slice-{s}", ns.name)},
                        "spec": {"driver": DRIVER, "allNodes": true, "devices": devices,
                                 "pool": {"name": pool(s), "generation": 1, "resourceSliceCount": 1}}
                    }),
                )?,
            )
            .await
            .context("creating a slice")?;
    }
    // 1,000 pods, each with its claim allocated one device and reserved for it.
    let pods = ns.pods();
    futures::stream::iter(0..SLICES * DEVICES)
        .map(|i| {
            let (pods, claims, pool) = (pods.clone(), claims.clone(), pool(i / DEVICES));
            let (ns_name, node) = (ns.name.clone(), node.clone());
            async move {
                let device = format!("gpu-{}", i % DEVICES);
                let name = format!("p-{i:04}");
                pod_with_device(
                    &pods,
                    &claims,
                    &ns_name,
                    &node,
                    &name,
                    (DRIVER, &pool, &device),
                )
                .await
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .context("creating the pods and their claims")?;
    let mut controller = match who {
        Who::Noexecute => {
            let mut c = Controller::start(
                &plane,
                binary(),
                &ns.name,
                &[
                    "--leader-elect=false",
                    "--device-taints",
                    "--kube-api-qps",
                    QPS,
                    "--kube-api-burst",
                    QPS,
                ],
            )?;
            c.wait_ready(Duration::from_secs(60)).await?;
            Some(c)
        }
        Who::Upstream => None,
    };
    // A sentinel, written after every pod and claim above: a pod whose device its own slice
    // taints. A controller that has evicted it has seen, on each watch, every object written
    // before it, so the preview below is judged on the whole set and not on a cache still
    // catching up (upstream writes its preview once, from whatever its informers hold).
    let sentinel_pool = format!("{}-sentinel", ns.name);
    slices
        .create(
            &PostParams::default(),
            &object(
                &dra::slices(),
                json!({
                    "metadata": {"name": sentinel_pool},
                    "spec": {"driver": SENTINEL_DRIVER, "allNodes": true,
                             "devices": [{"name": "s-0", "taints": [{"key": "sentinel", "effect": "NoExecute"}]}],
                             "pool": {"name": sentinel_pool, "generation": 1, "resourceSliceCount": 1}}
                }),
            )?,
        )
        .await
        .context("creating the sentinel slice")?;
    pod_with_device(
        &pods,
        &claims,
        &ns.name,
        &node,
        "sentinel",
        (SENTINEL_DRIVER, &sentinel_pool, "s-0"),
    )
    .await
    .context("creating the sentinel")?;
    eventually(Duration::from_secs(60), "the sentinel evicted", || async {
        Ok(pods
            .get_opt("sentinel")
            .await?
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(()))
    })
    .await?;

    // The preview first: a None rule over every device of the namespace's pools.
    let preview_name = format!("{}-preview", ns.name);
    rule_over_every_device(&rules, &preview_name, "preview", "None").await?;
    let preview = eventually(
        Duration::from_secs(30),
        "the None rule's preview",
        || async {
            let rule = rules.get(&preview_name).await?;
            Ok(rule.data["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "EvictionInProgress"))
                .and_then(|c| c["message"].as_str().map(str::to_string)))
        },
    )
    .await?;

    let log = EvictionLog::start(ns.pods());
    log.listed(Duration::from_secs(10)).await?;
    let rule_name = format!("{}-all", ns.name);
    let started = Instant::now();
    rule_over_every_device(&rules, &rule_name, "maintenance", "NoExecute").await?;
    let total = SLICES * DEVICES;
    eventually(Duration::from_secs(300), "every pod evicted", || async {
        Ok((log.count("p-") == total).then_some(()))
    })
    .await?;
    let last = (0..total)
        .filter_map(|i| log.instant(&format!("p-{i:04}")))
        .max()
        .context("eviction times")?;
    let makespan = last.duration_since(started);
    if let Some(c) = &mut controller {
        c.wait_metric(
            "device_taint_eviction_controller_pod_deletions_total",
            (total + 1) as f64,
            Duration::from_secs(10),
        )
        .await?;
    }
    rules.delete(&rule_name, &Default::default()).await?;
    rules.delete(&preview_name, &Default::default()).await?;
    ns.cleanup().await?;
    plane.down()?;
    Ok(Run { makespan, preview })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_pods_on_twenty_slices_evicted_by_one_rule_beside_upstream() -> Result<()> {
    let upstream = run(Who::Upstream).await?;
    let ours = run(Who::Noexecute).await?;
    println!(
        "makespan, 1,000 pods, QPS {QPS}: upstream {:.2} s, noexecute {:.2} s ({:.2}x)",
        upstream.makespan.as_secs_f64(),
        ours.makespan.as_secs_f64(),
        ours.makespan.as_secs_f64() / upstream.makespan.as_secs_f64()
    );
    ensure!(
        upstream.preview == ours.preview,
        "the same preview: upstream {:?}, noexecute {:?}",
        upstream.preview,
        ours.preview
    );
    ensure!(
        ours.preview.starts_with("1000 published devices selected. 1000 allocated devices selected. 1000 pods would be evicted in 1 namespace"),
        "{}",
        ours.preview
    );
    Ok(())
}
