//! DRA objects cut to what device taint eviction reads (`docs/parity.md` §22), and turned into
//! the engine's device observations (`noexecute_engine::device`): ResourceSlices and
//! ResourceClaims (`resource.k8s.io/v1`), DeviceTaintRules (`v1beta2` in Kubernetes 1.36), and
//! a pod's claim references.
//!
//! As in `slim`, everything else is skipped unread. Fields the API server always sets (a
//! slice's driver, a taint's `timeAdded`) default to empty rather than fail the object: a
//! missing `timeAdded` makes the engine ignore that taint, as it says.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as WireTime;
use noexecute_engine::device::{
    AllocatedDevice, Claim, Consumer, Device, DevicePod, PodClaim, Rule, Selector, Slice,
};
use noexecute_engine::{Operator, Taint, TaintEffect, Time, Toleration, Uid};
use serde::{Deserialize, Serialize};

/// The metadata these objects need: identity, and the controlling owner (a claim made from a
/// template is the pod's).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct Meta {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub generation: i64,
    pub owner_references: Vec<OwnerReference>,
    pub deletion_timestamp: Option<WireTime>,
    /// Where a watch resumes.
    pub resource_version: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct OwnerReference {
    pub uid: String,
    pub controller: Option<bool>,
}

impl Meta {
    fn uid(&self) -> Uid {
        Uid::new(&self.uid)
    }

    fn controller(&self) -> Option<Uid> {
        self.owner_references
            .iter()
            .find(|o| o.controller == Some(true))
            .map(|o| Uid::new(&o.uid))
    }
}

/// A device taint (`resource.k8s.io` `DeviceTaint`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct WireTaint {
    pub key: String,
    pub value: String,
    pub effect: String,
    pub time_added: Option<WireTime>,
}

impl WireTaint {
    fn taint(&self) -> Taint {
        Taint {
            key: self.key.clone(),
            value: self.value.clone(),
            effect: TaintEffect::parse(&self.effect),
            time_added: self
                .time_added
                .as_ref()
                .map(|t| Time::from_millis(t.0.as_millisecond())),
        }
    }
}

/// A device toleration (`DeviceToleration`), as copied into an allocation result.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct WireToleration {
    pub key: String,
    pub operator: String,
    pub value: String,
    pub effect: String,
    pub toleration_seconds: Option<i64>,
}

impl WireToleration {
    /// Device tolerations know `Equal` (the default) and `Exists`; anything else matches
    /// nothing, which the engine's `Operator::Other` does.
    fn toleration(&self) -> Toleration {
        let operator = match self.operator.as_str() {
            "" | "Equal" => Operator::Equal,
            "Exists" => Operator::Exists,
            other => Operator::Other(other.into()),
        };
        Toleration {
            key: self.key.clone(),
            operator,
            value: self.value.clone(),
            effect: (!self.effect.is_empty()).then(|| TaintEffect::parse(&self.effect)),
            toleration_seconds: self.toleration_seconds,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ResourceSlice {
    pub metadata: Meta,
    pub spec: SliceSpec,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct SliceSpec {
    pub driver: String,
    pub pool: PoolRef,
    pub devices: Vec<WireDevice>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct PoolRef {
    pub name: String,
    pub generation: i64,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct WireDevice {
    pub name: String,
    pub taints: Vec<WireTaint>,
}

impl ResourceSlice {
    pub fn observe(&self) -> Slice {
        Slice {
            name: self.metadata.name.clone(),
            driver: self.spec.driver.clone(),
            pool: self.spec.pool.name.clone(),
            generation: self.spec.pool.generation,
            devices: self
                .spec
                .devices
                .iter()
                .map(|d| Device {
                    name: d.name.clone(),
                    taints: d.taints.iter().map(WireTaint::taint).collect(),
                })
                .collect(),
        }
    }
}

/// A DeviceTaintRule manifest from a file (YAML or JSON), as `plan --device-rule` reads it:
/// `kind: DeviceTaintRule` with a name, a taint with a key and an effect.
pub fn read_rule(
    path: &std::path::Path,
) -> Result<DeviceTaintRule, crate::adapters::input::InputError> {
    use crate::adapters::input::{InputError, json_error, yaml_error};
    let text = std::fs::read_to_string(path).map_err(|cause| InputError::Read {
        path: path.to_path_buf(),
        cause,
    })?;
    let syntax = |(line, column, message): (usize, usize, String)| InputError::Syntax {
        path: path.to_path_buf(),
        line,
        column,
        message,
    };
    let invalid = |field: &str, message: String| InputError::Invalid {
        path: path.to_path_buf(),
        field: field.into(),
        message,
    };
    let value: serde_json::Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(&text).map_err(|e| syntax(json_error(&e)))?
    } else {
        serde_saphyr::from_str(&text).map_err(|e| syntax(yaml_error(&e)))?
    };
    match value.get("kind").and_then(|k| k.as_str()) {
        Some("DeviceTaintRule") => {}
        Some(other) => {
            return Err(invalid(
                "kind",
                format!("{other:?}, expected DeviceTaintRule"),
            ));
        }
        None => return Err(invalid("kind", "missing (expected DeviceTaintRule)".into())),
    }
    let rule: DeviceTaintRule = crate::adapters::input::from_value(value)
        .map_err(|(at, e)| invalid(if at.is_empty() { "(the manifest)" } else { &at }, e))?;
    if rule.metadata.name.is_empty() {
        return Err(invalid("metadata.name", "missing".into()));
    }
    if rule.spec.taint.key.is_empty() {
        return Err(invalid("spec.taint.key", "missing".into()));
    }
    match rule.spec.taint.effect.as_str() {
        "" => return Err(invalid("spec.taint.effect", "missing".into())),
        // As the API server validates a device taint's effect.
        "NoExecute" | "NoSchedule" | "None" => {}
        other => {
            return Err(invalid(
                "spec.taint.effect",
                format!("{other:?}, expected NoExecute, NoSchedule or None"),
            ));
        }
    }
    Ok(rule)
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct DeviceTaintRule {
    pub metadata: Meta,
    pub spec: RuleSpec,
    pub status: RuleStatusWire,
}

/// A rule's `status.conditions`: only `EvictionInProgress` is read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct RuleStatusWire {
    pub conditions: Vec<WireCondition>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct WireCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub observed_generation: i64,
    pub last_transition_time: Option<WireTime>,
}

/// A rule's `EvictionInProgress` condition, its `lastTransitionTime` on the wall clock.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedCondition {
    pub status: bool,
    pub reason: String,
    pub message: String,
    pub observed_generation: i64,
    pub last_transition: Time,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct RuleSpec {
    pub device_selector: Option<WireSelector>,
    pub taint: WireTaint,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct WireSelector {
    pub driver: Option<String>,
    pub pool: Option<String>,
    pub device: Option<String>,
}

impl DeviceTaintRule {
    pub fn observe(&self) -> Rule {
        Rule {
            name: self.metadata.name.clone(),
            uid: self.metadata.uid(),
            selector: self.spec.device_selector.as_ref().map(|s| Selector {
                driver: s.driver.clone(),
                pool: s.pool.clone(),
                device: s.device.clone(),
            }),
            taint: self.spec.taint.taint(),
        }
    }

    /// Its generation, and its `EvictionInProgress` condition if it has one (with a time).
    pub fn status(&self) -> (i64, Option<ObservedCondition>) {
        let condition = self
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "EvictionInProgress")
            .and_then(|c| {
                Some(ObservedCondition {
                    status: c.status == "True",
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                    observed_generation: c.observed_generation,
                    last_transition: Time::from_millis(
                        c.last_transition_time.as_ref()?.0.as_millisecond(),
                    ),
                })
            });
        (self.metadata.generation, condition)
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ResourceClaim {
    pub metadata: Meta,
    pub status: ClaimStatus,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ClaimStatus {
    pub allocation: Option<Allocation>,
    pub reserved_for: Vec<ConsumerReference>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Allocation {
    pub devices: DeviceAllocation,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct DeviceAllocation {
    pub results: Vec<AllocationResult>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct AllocationResult {
    pub driver: String,
    pub pool: String,
    pub device: String,
    pub tolerations: Vec<WireToleration>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ConsumerReference {
    pub api_group: String,
    pub resource: String,
    pub name: String,
    pub uid: String,
}

impl ResourceClaim {
    pub fn observe(&self) -> Claim {
        Claim {
            namespace: self.metadata.namespace.clone(),
            name: self.metadata.name.clone(),
            uid: self.metadata.uid(),
            owner: self.metadata.controller(),
            allocation: self.status.allocation.as_ref().map(|a| {
                a.devices
                    .results
                    .iter()
                    .map(|r| AllocatedDevice {
                        driver: r.driver.clone(),
                        pool: r.pool.clone(),
                        device: r.device.clone(),
                        tolerations: r
                            .tolerations
                            .iter()
                            .map(WireToleration::toleration)
                            .collect(),
                    })
                    .collect()
            }),
            reserved_for: self
                .status
                .reserved_for
                .iter()
                .map(|c| Consumer {
                    api_group: c.api_group.clone(),
                    resource: c.resource.clone(),
                    name: c.name.clone(),
                    uid: Uid::new(&c.uid),
                })
                .collect(),
        }
    }
}

/// A pod's DRA fields: its node, its claim references and where their generated claims are.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ClaimingPod {
    pub metadata: Meta,
    pub spec: ClaimingPodSpec,
    pub status: ClaimingPodStatus,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ClaimingPodSpec {
    pub node_name: Option<String>,
    pub resource_claims: Vec<PodResourceClaim>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct PodResourceClaim {
    pub name: String,
    pub resource_claim_name: Option<String>,
    pub resource_claim_template_name: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct ClaimingPodStatus {
    pub resource_claim_statuses: Vec<PodResourceClaimStatus>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct PodResourceClaimStatus {
    pub name: String,
    pub resource_claim_name: Option<String>,
}

impl ClaimingPod {
    /// Upstream's `resourceclaim.Name` for each entry (`docs/parity.md` §22.2). An entry with
    /// neither a claim nor a template names nothing, like one whose claim is not made yet.
    pub fn observe(&self) -> DevicePod {
        let claims = pod_claims(
            &self.spec.resource_claims,
            &self.status.resource_claim_statuses,
        );
        DevicePod {
            namespace: self.metadata.namespace.clone(),
            name: self.metadata.name.clone(),
            uid: self.metadata.uid(),
            node: self.spec.node_name.clone().filter(|n| !n.is_empty()),
            claims,
            deleting: self.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// These objects are listed and watched in JSON: the protobuf decoder declares no DRA message.
macro_rules! json_only {
    ($($ty:ty => $list:literal),*) => {$(
        impl super::proto::Decode for $ty {
            const LIST_KIND: &'static str = $list;

            fn from_proto(_: bytes::Bytes) -> Result<Self, super::proto::DecodeError> {
                Err(super::proto::DecodeError::JsonOnly($list))
            }

            fn resource_version(&self) -> Option<&str> {
                self.metadata.resource_version.as_deref()
            }
        }
    )*};
}

json_only!(
    ResourceSlice => "ResourceSliceList",
    ResourceClaim => "ResourceClaimList",
    DeviceTaintRule => "DeviceTaintRuleList"
);

/// Upstream's `resourceclaim.Name` for each of a pod's claim entries (`docs/parity.md` §22.2).
/// An entry with neither a claim nor a template names nothing, like one whose claim is not
/// made yet.
pub fn pod_claims(
    claims: &[PodResourceClaim],
    statuses: &[PodResourceClaimStatus],
) -> Vec<PodClaim> {
    claims
        .iter()
        .map(
            |c| match (&c.resource_claim_name, &c.resource_claim_template_name) {
                (Some(name), _) => PodClaim::Named(name.clone()),
                (None, Some(_)) => PodClaim::FromTemplate(
                    statuses
                        .iter()
                        .find(|s| s.name == c.name)
                        .and_then(|s| s.resource_claim_name.clone()),
                ),
                (None, None) => PodClaim::FromTemplate(None),
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

    fn t0() -> Time {
        // 2026-01-02T03:04:05Z
        Time::from_secs(1_767_323_045)
    }

    #[test]
    fn a_slice_keeps_its_pool_generation_devices_and_taints() -> R {
        let slice: ResourceSlice = serde_json::from_str(
            r#"{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice",
                "metadata":{"name":"node-1-gpu","uid":"u1","managedFields":[{"manager":"x"}]},
                "spec":{"driver":"gpu.example.com","nodeName":"node-1",
                  "pool":{"name":"node-1","generation":3,"resourceSliceCount":1},
                  "devices":[
                    {"name":"gpu-0","attributes":{"model":{"string":"x"}},
                     "taints":[{"key":"health","value":"bad","effect":"NoExecute",
                                "timeAdded":"2026-01-02T03:04:05Z"},
                               {"key":"maint","effect":"None","timeAdded":"2026-01-02T03:04:05Z"}]},
                    {"name":"gpu-1"}]}}"#,
        )?;
        let mut bad = Taint::new("health", "bad", TaintEffect::NoExecute);
        bad.time_added = Some(t0());
        let mut none = Taint::new("maint", "", TaintEffect::parse("None"));
        none.time_added = Some(t0());
        assert_eq!(
            slice.observe(),
            Slice {
                name: "node-1-gpu".into(),
                driver: "gpu.example.com".into(),
                pool: "node-1".into(),
                generation: 3,
                devices: vec![
                    Device {
                        name: "gpu-0".into(),
                        taints: vec![bad, none],
                    },
                    Device {
                        name: "gpu-1".into(),
                        taints: vec![],
                    },
                ],
            }
        );
        Ok(())
    }

    #[test]
    fn a_claim_keeps_its_controller_allocation_tolerations_and_consumers() -> R {
        let claim: ResourceClaim = serde_json::from_str(
            r#"{"metadata":{"name":"pod-gpu-abc","namespace":"ml","uid":"c1",
                  "ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"other","uid":"p0"},
                                     {"apiVersion":"v1","kind":"Pod","name":"pod","uid":"p1",
                                      "controller":true,"blockOwnerDeletion":true}]},
                "spec":{"devices":{"requests":[{"name":"gpu"}]}},
                "status":{"allocation":{"devices":{"results":[
                    {"request":"gpu","driver":"gpu.example.com","pool":"node-1","device":"gpu-0",
                     "tolerations":[{"key":"health","operator":"Exists","effect":"NoExecute",
                                     "tolerationSeconds":30},
                                    {"key":"maint","value":"x"}]}]},
                  "nodeSelector":{}},
                  "reservedFor":[{"resource":"pods","name":"pod","uid":"p1"}]}}"#,
        )?;
        let observed = claim.observe();
        assert_eq!(observed.owner, Some(Uid::new("p1")), "the controller");
        assert_eq!(
            observed.reserved_for,
            vec![Consumer::pod("pod", Uid::new("p1"))]
        );
        let devices = observed.allocation.ok_or("allocated")?;
        assert_eq!(devices.len(), 1);
        assert_eq!(
            (
                devices[0].driver.as_str(),
                devices[0].pool.as_str(),
                devices[0].device.as_str()
            ),
            ("gpu.example.com", "node-1", "gpu-0")
        );
        assert_eq!(
            devices[0].tolerations,
            vec![
                Toleration::exists("health", Some(TaintEffect::NoExecute)).for_seconds(30),
                Toleration::equal("maint", "x", None),
            ]
        );
        let unallocated: ResourceClaim =
            serde_json::from_str(r#"{"metadata":{"name":"c","namespace":"ml","uid":"c2"}}"#)?;
        assert_eq!(unallocated.observe().allocation, None);
        assert_eq!(unallocated.observe().owner, None);
        Ok(())
    }

    /// `plan --device-rule`: a manifest that cannot be used says which field is wrong.
    #[test]
    fn a_rule_manifest_in_error_names_its_field() -> R {
        let path = std::env::temp_dir().join(format!("noexecute-rule-{}.yaml", std::process::id()));
        let read = |text: &str| -> R<String> {
            std::fs::write(&path, text)?;
            Ok(match read_rule(&path) {
                Ok(rule) => format!("ok {}", rule.metadata.name),
                Err(e) => e.to_string(),
            })
        };
        let head =
            "apiVersion: resource.k8s.io/v1beta2\nkind: DeviceTaintRule\nmetadata: {name: r}\n";
        let cases = [
            (
                format!("{head}spec:\n  taint: {{key: k, effect: NoExecute}}\n"),
                "ok r".to_string(),
            ),
            (
                format!("{head}spec:\n  taint: {{key: k, effect: [NoExecute]}}\n"),
                "spec.taint.effect: invalid type: sequence, expected a string".into(),
            ),
            (
                format!(
                    "{head}spec:\n  taint: {{key: k, effect: NoExecute, timeAdded: yesterday}}\n"
                ),
                "spec.taint.timeAdded: ".into(),
            ),
            (
                format!(
                    "{head}spec:\n  deviceSelector: {{driver: 7}}\n  taint: {{key: k, effect: NoExecute}}\n"
                ),
                "spec.deviceSelector.driver: invalid type: integer `7`, expected a string".into(),
            ),
            (
                format!("{head}spec: [1]\n"),
                "spec[0]: invalid type: integer `1`, expected struct WireSelector".into(),
            ),
            (
                format!("{head}spec:\n  taint: {{effect: NoExecute}}\n"),
                "spec.taint.key: missing".into(),
            ),
            (
                format!("{head}spec:\n  taint: {{key: k, effect: NoExecte}}\n"),
                "spec.taint.effect: \"NoExecte\", expected NoExecute, NoSchedule or None".into(),
            ),
            (
                "kind: Pod\nmetadata: {name: p}\n".into(),
                "kind: \"Pod\", expected DeviceTaintRule".into(),
            ),
            (
                "kind: DeviceTaintRule\nmetadata: {name: [r]\n".into(),
                ".yaml:2:".into(),
            ),
        ];
        let mut wrong = Vec::new();
        for (text, want) in &cases {
            let got = read(text)?;
            if !got.contains(want.as_str()) {
                wrong.push(format!("{text}=> {got}\nwant {want}"));
            }
        }
        std::fs::remove_file(&path)?;
        assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
        Ok(())
    }

    #[test]
    fn a_rule_keeps_its_selector_and_taint() -> R {
        let rule: DeviceTaintRule = serde_json::from_str(
            r#"{"apiVersion":"resource.k8s.io/v1beta2","kind":"DeviceTaintRule",
                "metadata":{"name":"drain-node-1","uid":"r1","generation":2},
                "spec":{"deviceSelector":{"driver":"gpu.example.com","pool":"node-1"},
                        "taint":{"key":"drain","effect":"NoExecute",
                                 "timeAdded":"2026-01-02T03:04:05Z"}},
                "status":{"conditions":[]}}"#,
        )?;
        let observed = rule.observe();
        assert_eq!(
            observed.selector,
            Some(Selector {
                driver: Some("gpu.example.com".into()),
                pool: Some("node-1".into()),
                device: None,
            })
        );
        assert_eq!(observed.taint.effect, TaintEffect::NoExecute);
        assert_eq!(observed.taint.time_added, Some(t0()));
        let open: DeviceTaintRule =
            serde_json::from_str(r#"{"metadata":{"name":"r"},"spec":{"taint":{"key":"k"}}}"#)?;
        assert_eq!(open.observe().selector, None, "no selector selects nothing");
        Ok(())
    }

    #[test]
    fn a_pods_claims_resolve_as_upstreams_resourceclaim_name() -> R {
        let pod: ClaimingPod = serde_json::from_str(
            r#"{"metadata":{"name":"pod","namespace":"ml","uid":"p1",
                            "deletionTimestamp":"2026-01-02T03:04:05Z"},
                "spec":{"nodeName":"node-1","containers":[{"name":"c","image":"i"}],
                  "resourceClaims":[{"name":"shared","resourceClaimName":"fleet-gpu"},
                                    {"name":"gpu","resourceClaimTemplateName":"one-gpu"},
                                    {"name":"pending","resourceClaimTemplateName":"one-gpu"},
                                    {"name":"skipped","resourceClaimTemplateName":"one-gpu"}]},
                "status":{"phase":"Running","resourceClaimStatuses":[
                    {"name":"gpu","resourceClaimName":"pod-gpu-abc"},
                    {"name":"skipped"}]}}"#,
        )?;
        let observed = pod.observe();
        assert_eq!(
            observed.claims,
            vec![
                PodClaim::Named("fleet-gpu".into()),
                PodClaim::FromTemplate(Some("pod-gpu-abc".into())),
                PodClaim::FromTemplate(None),
                PodClaim::FromTemplate(None),
            ]
        );
        assert_eq!(observed.node.as_deref(), Some("node-1"));
        assert!(observed.deleting);
        let unscheduled: ClaimingPod =
            serde_json::from_str(r#"{"metadata":{"name":"p"},"spec":{"nodeName":""}}"#)?;
        assert_eq!(unscheduled.observe().node, None);
        Ok(())
    }

    #[test]
    fn a_malformed_time_added_is_an_error_not_a_guess() {
        let err = serde_json::from_str::<DeviceTaintRule>(
            r#"{"metadata":{"name":"r"},"spec":{"taint":{"key":"k","timeAdded":"yesterday"}}}"#,
        );
        assert!(err.is_err(), "{err:?}");
    }
}
