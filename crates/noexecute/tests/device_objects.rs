//! DRA objects as a real kube-apiserver serves them, through `adapters::device` into
//! `noexecute_engine::device` (`docs/parity.md` §22): the API server sets a device taint's
//! `timeAdded` when it has none, and sets it again when a DeviceTaintRule's effect changes
//! (§22.3); the objects it returns decide a pod's eviction as §22.4 says, and a `None` rule's
//! preview counts as §22.7 says.
//!
//! The plane serves DeviceTaintRules (`DRADeviceTaintRules` and `resource.k8s.io/v1beta2`, off
//! by default in 1.36); slices, claims and their device taints are on by default.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use noexecute::adapters::device::{ClaimingPod, DeviceTaintRule, ResourceClaim, ResourceSlice};
use noexecute_engine::device::{Devices, RuleCondition, TaintSource};
use noexecute_engine::{TaintEffect, Time};
use noexecute_testkit::{Plane, TestNamespace, dra};
use serde::de::DeserializeOwned;
use serde_json::json;

const APISERVER_ARGS: &str = dra::APISERVER_ARGS;
const DRIVER: &str = "gpu.example.com";

use noexecute_testkit::dra::{object, resource};

fn slim<T: DeserializeOwned>(o: &impl serde::Serialize) -> Result<T> {
    Ok(serde_json::from_value(serde_json::to_value(o)?)?)
}

fn unix_now() -> Result<Time> {
    let d = SystemTime::now().duration_since(UNIX_EPOCH)?;
    Ok(Time::from_millis(i64::try_from(d.as_millis())?))
}

/// Until the wall clock is in a later second than `t` (bounded): the API server stamps
/// `timeAdded` to the second.
async fn next_second(t: Time) -> Result<()> {
    let until = Time::from_secs(t.as_millis().div_euclid(1000) + 1);
    for _ in 0..40 {
        if unix_now()? >= until {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("the clock did not pass {until:?}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_servers_device_objects_decide_as_the_contract_says() -> Result<()> {
    let plane = Plane::up_with_env(
        "device-objects",
        &[],
        &[("NOEXECUTE_APISERVER_ARGS", APISERVER_ARGS)],
    )?;
    let admin = plane.admin_client().await?;
    let ns = TestNamespace::create(&admin, "device-objects").await?;
    let node = ns.create_node("n", vec![]).await?;
    let pool = format!("{}-pool", ns.name);
    let post = PostParams::default();

    // A slice whose gpu-0 is tainted NoExecute without a timeAdded.
    let slices_ar = resource("v1", "ResourceSlice", "resourceslices");
    let slices: Api<DynamicObject> = Api::all_with(admin.clone(), &slices_ar);
    let before = unix_now()?;
    let slice = slices
        .create(
            &post,
            &object(
                &slices_ar,
                json!({
                    "metadata": {"name": format!("{}-slice", ns.name)},
                    "spec": {
                        "driver": DRIVER,
                        "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
                        "allNodes": true,
                        "devices": [
                            {"name": "gpu-0",
                             "taints": [{"key": "health", "value": "bad", "effect": "NoExecute"}]},
                            {"name": "gpu-1"}
                        ]
                    }
                }),
            )?,
        )
        .await
        .context("creating the ResourceSlice")?;
    let slice = slim::<ResourceSlice>(&slice)?.observe();
    let slice_taint = slice.devices[0].taints[0].clone();
    let slice_added = slice_taint
        .time_added
        .context("the API server sets a slice taint's timeAdded")?;
    ensure!(
        slice_added.as_millis() % 1000 == 0
            && slice_added >= Time::from_secs(before.as_millis().div_euclid(1000))
            && slice_added <= unix_now()?,
        "timeAdded {slice_added:?} is the creation's second"
    );

    // A pod on the node using a claim by name, and the claim allocated gpu-0 (its taint
    // tolerated for 60 s) and gpu-1, reserved for the pod.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "trainer", "namespace": ns.name},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "resourceClaims": [{"name": "gpus", "resourceClaimName": "gpus"}]
        }
    }))?;
    let pod = ns.create_pod(&pod).await?;
    let pod_uid = pod.metadata.uid.clone().context("the pod's uid")?;
    let claims_ar = resource("v1", "ResourceClaim", "resourceclaims");
    let claims: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns.name, &claims_ar);
    claims
        .create(
            &post,
            &object(
                &claims_ar,
                json!({
                    "metadata": {"name": "gpus"},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                        "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 2}}]}}
                }),
            )?,
        )
        .await
        .context("creating the ResourceClaim")?;
    let tolerate_health = json!([{"key": "health", "operator": "Exists", "effect": "NoExecute",
                                  "tolerationSeconds": 60}]);
    let claim = claims
        .patch_status(
            "gpus",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": DRIVER, "pool": pool, "device": "gpu-0",
                     "tolerations": tolerate_health},
                    {"request": "gpu", "driver": DRIVER, "pool": pool, "device": "gpu-1"}
                ]}},
                "reservedFor": [{"resource": "pods", "name": "trainer", "uid": pod_uid}]
            }})),
        )
        .await
        .context("allocating the ResourceClaim")?;

    // A rule on gpu-1 with effect None: the preview.
    let rules_ar = resource("v1beta2", "DeviceTaintRule", "devicetaintrules");
    let rules: Api<DynamicObject> = Api::all_with(admin.clone(), &rules_ar);
    let rule_name = format!("{}-drain", ns.name);
    let rule = rules
        .create(
            &post,
            &object(
                &rules_ar,
                json!({
                    "metadata": {"name": rule_name},
                    "spec": {
                        "deviceSelector": {"driver": DRIVER, "pool": pool, "device": "gpu-1"},
                        "taint": {"key": "drain", "effect": "None"}
                    }
                }),
            )?,
        )
        .await
        .context("creating the DeviceTaintRule (is v1beta2 served?)")?;
    let none_rule = slim::<DeviceTaintRule>(&rule)?.observe();
    let none_added = none_rule
        .taint
        .time_added
        .context("the API server sets a rule taint's timeAdded")?;

    let mut devices = Devices::new();
    devices.upsert_slice(slice);
    devices.upsert_claim(slim::<ResourceClaim>(&claim)?.observe());
    devices.upsert_pod(slim::<ClaimingPod>(&pod)?.observe());
    devices.upsert_rule(none_rule);
    let pod_key = slim::<ClaimingPod>(&pod)?.observe().key();
    ensure!(
        devices.pending().get(&pod_key).map(|e| e.at) == Some(slice_added.plus_secs(60)),
        "the slice taint, tolerated for 60 s: {:?}",
        devices.pending()
    );
    let preview = devices.rule_condition(&rule_name);
    ensure!(
        preview
            == Some(RuleCondition {
                status: false,
                reason: "NoEffect",
                message: "1 published device selected. 1 allocated device selected. 1 pod would \
                          be evicted in 1 namespace if the effect was NoExecute. This \
                          information will not be updated again. Recreate the DeviceTaintRule \
                          to trigger an update."
                    .into(),
            }),
        "{preview:?}"
    );

    // The effect becomes NoExecute in a later second: the API server stamps timeAdded again,
    // and the pod is due at that time, untolerated.
    next_second(none_added).await?;
    let rule = rules
        .patch(
            &rule_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taint": {"effect": "NoExecute"}}})),
        )
        .await
        .context("switching the rule to NoExecute")?;
    let rule = slim::<DeviceTaintRule>(&rule)?.observe();
    ensure!(rule.taint.effect == TaintEffect::NoExecute);
    let rule_added = rule.taint.time_added.context("timeAdded")?;
    ensure!(
        rule_added > none_added,
        "a changed effect moves timeAdded: {none_added:?} → {rule_added:?}"
    );
    devices.upsert_rule(rule.clone());
    let eviction = devices
        .pending()
        .get(&pod_key)
        .cloned()
        .context("pending")?;
    ensure!(
        eviction.at == rule_added,
        "due when the rule's taint was added: {eviction:?}"
    );
    ensure!(
        eviction.reasons.first()
            == Some(&TaintSource::Rule {
                name: rule_name.clone(),
                uid: rule.uid.clone(),
            })
            && eviction.reasons.len() == 2,
        "{:?}",
        eviction.reasons
    );

    rules.delete(&rule_name, &Default::default()).await?;
    slices
        .delete(&format!("{}-slice", ns.name), &Default::default())
        .await?;
    ns.cleanup().await?;
    plane.down()?;
    Ok(())
}
