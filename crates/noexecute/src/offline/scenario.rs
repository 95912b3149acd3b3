//! The scenario file of `noexecute simulate`: nodes, pods and timed events, with field names
//! taken from Kubernetes objects so that taints and tolerations can be pasted from manifests.
//!
//! ```yaml
//! until: 10m                    # optional; else run until nothing is pending
//! nodes: [{name: n1, labels: {}, taints: []}]
//! pods: [{name: p, namespace: default, labels: {}, nodeName: n1, tolerations: []}]
//! events:                       # each has `at` and exactly one of:
//!   - {at: 10s, addTaint: {node: n1, taint: {key: k, value: v, effect: NoExecute}}}
//!   - {at: 20s, removeTaint: {node: n1, key: k, effect: NoExecute}}
//!   - {at: 30s, setTaints: {node: n1, taints: []}}
//!   - {at: 40s, addPod: {...}}   # updatePod (nodeName, tolerations), deletePod {name, namespace}
//!   - {at: 50s, addNode: {name: n2}}   # deleteNode {name}
//!   - {at: 60s, releaseBrake: {node: n1}}   # the noexecute.io/release-brake annotation
//! ```
//!
//! Device taints (DRA, `docs/parity.md` §22) take a driver's ResourceSlices, the devices
//! allocated to each pod (one claim per pod, allocated and reserved as kube-scheduler leaves
//! it, with its request's tolerations) and timed device taints and DeviceTaintRules:
//!
//! ```yaml
//! slices: [{driver: gpu.example.com, pool: n1, devices: [{name: gpu-0, taints: []}]}]
//! pods: [{name: p, nodeName: n1, devices: [{driver: gpu.example.com, pool: n1, device: gpu-0,
//!          tolerations: [{key: k, operator: Exists, effect: NoExecute, tolerationSeconds: 60}]}]}]
//! events:
//!   - {at: 10s, addDeviceTaint: {driver: gpu.example.com, pool: n1, device: gpu-0, taint: {key: k, effect: NoExecute}}}
//!   - {at: 20s, removeDeviceTaint: {driver: gpu.example.com, pool: n1, device: gpu-0, key: k}}
//!   - {at: 30s, addRule: {name: r, deviceSelector: {driver: gpu.example.com}, taint: {key: k, effect: NoExecute}}}
//!   - {at: 40s, deleteRule: {name: r}}
//! ```
//!
//! Loading never panics: a malformed file gives a [`ScenarioError`] naming the file and the
//! line and column (for syntax and type errors) or the offending field (for everything the
//! format allows but the semantics do not).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use noexecute_engine::{Operator, Taint, TaintEffect, Time, Toleration};
use serde::Deserialize;

/// Errors loading a scenario; see [`crate::adapters::input::InputError`].
pub type ScenarioError = crate::adapters::input::InputError;

/// Durations in scenarios (`90s`, `5m`, `1h30m`): the same type as every duration flag.
pub use crate::adapters::time::Offset;

/// `NodeSpec.taints[]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TaintSpec {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: String,
    /// Accepted so manifests paste cleanly; the simulator stamps taints with the virtual time
    /// they are added at, as the API server does.
    #[serde(default)]
    pub time_added: Option<String>,
}

/// `PodSpec.tolerations[]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, Hash, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TolerationSpec {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub operator: String,
    #[serde(default)]
    pub value: String,
    #[serde(default)]
    pub effect: String,
    #[serde(default)]
    pub toleration_seconds: Option<i64>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeSpec {
    pub name: String,
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    pub taints: Vec<TaintSpec>,
}

fn default_namespace() -> String {
    "default".into()
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PodSpec {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Pod labels (only exclusion selectors read them).
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    pub tolerations: Vec<TolerationSpec>,
    /// The devices allocated to the pod's claim, each with its request's tolerations.
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    pub devices: Vec<AllocatedSpec>,
}

/// A device allocated to a pod: `status.allocation.devices.results[]` of its claim.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq, Hash)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AllocatedSpec {
    pub driver: String,
    pub pool: String,
    pub device: String,
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    pub tolerations: Vec<TolerationSpec>,
}

/// A ResourceSlice: one driver's pool (one slice per pool, generation 1).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SliceSpec {
    pub driver: String,
    pub pool: String,
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    pub devices: Vec<DeviceSpec>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeviceSpec {
    pub name: String,
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    pub taints: Vec<TaintSpec>,
}

/// `addDeviceTaint`: the driver publishes a taint on one device.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeviceTaintChange {
    pub driver: String,
    pub pool: String,
    pub device: String,
    pub taint: TaintSpec,
}

/// `removeDeviceTaint`: every taint of the device with this key (and effect, if given).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RemoveDeviceTaint {
    pub driver: String,
    pub pool: String,
    pub device: String,
    pub key: String,
    #[serde(default)]
    pub effect: Option<String>,
}

/// A DeviceTaintRule's `spec.deviceSelector`: each field given must match.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeviceSelectorSpec {
    #[serde(default)]
    pub driver: Option<String>,
    #[serde(default)]
    pub pool: Option<String>,
    #[serde(default)]
    pub device: Option<String>,
}

/// `addRule`: a DeviceTaintRule is created, or, for a name that exists, updated as
/// `kubectl apply` would (its taint keeps its time unless the effect changes).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RuleSpec {
    pub name: String,
    /// Absent: the rule matches no device, as upstream's controller reads it.
    #[serde(default)]
    pub device_selector: Option<DeviceSelectorSpec>,
    pub taint: TaintSpec,
}

/// `updatePod`: the fields given replace the pod's.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PodUpdate {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
    #[serde(default)]
    pub node_name: Option<String>,
    #[serde(default)]
    pub tolerations: Option<Vec<TolerationSpec>>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PodKey {
    pub name: String,
    #[serde(default = "default_namespace")]
    pub namespace: String,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeTaint {
    pub node: String,
    pub taint: TaintSpec,
}

/// `removeTaint`: every taint with this key (and this effect, if given) goes, whatever its
/// value, as `kubectl taint node n key:effect-` does.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RemoveTaint {
    pub node: String,
    pub key: String,
    #[serde(default)]
    pub effect: Option<String>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SetTaints {
    pub node: String,
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    pub taints: Vec<TaintSpec>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeKey {
    pub name: String,
}

fn yes() -> bool {
    true
}

/// `releaseBrake`: annotate a node `noexecute.io/release-brake=true` (or take the annotation
/// off with `release: false`), so its evictions go while the mass-eviction brake holds.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReleaseBrake {
    pub node: String,
    #[serde(default = "yes")]
    pub release: bool,
}

/// One entry of `events:` as written: `at` and exactly one action.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawEvent {
    at: Offset,
    #[serde(default)]
    add_taint: Option<NodeTaint>,
    #[serde(default)]
    remove_taint: Option<RemoveTaint>,
    #[serde(default)]
    set_taints: Option<SetTaints>,
    #[serde(default)]
    add_pod: Option<PodSpec>,
    #[serde(default)]
    update_pod: Option<PodUpdate>,
    #[serde(default)]
    delete_pod: Option<PodKey>,
    #[serde(default)]
    add_node: Option<NodeSpec>,
    #[serde(default)]
    delete_node: Option<NodeKey>,
    #[serde(default)]
    release_brake: Option<ReleaseBrake>,
    #[serde(default)]
    add_device_taint: Option<DeviceTaintChange>,
    #[serde(default)]
    remove_device_taint: Option<RemoveDeviceTaint>,
    #[serde(default)]
    add_rule: Option<RuleSpec>,
    #[serde(default)]
    delete_rule: Option<NodeKey>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    AddTaint(NodeTaint),
    RemoveTaint(RemoveTaint),
    SetTaints(SetTaints),
    AddPod(PodSpec),
    UpdatePod(PodUpdate),
    DeletePod(PodKey),
    AddNode(NodeSpec),
    DeleteNode(NodeKey),
    ReleaseBrake(ReleaseBrake),
    AddDeviceTaint(DeviceTaintChange),
    RemoveDeviceTaint(RemoveDeviceTaint),
    AddRule(RuleSpec),
    DeleteRule(NodeKey),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub at: Offset,
    pub change: Change,
    /// Position in the file, for messages.
    pub index: usize,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawScenario {
    #[serde(default)]
    until: Option<Offset>,
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    nodes: Vec<NodeSpec>,
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    pods: Vec<PodSpec>,
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    slices: Vec<SliceSpec>,
    #[serde(default, deserialize_with = "crate::adapters::input::or_default")]
    events: Vec<RawEvent>,
}

/// A validated scenario; events are in the order they apply (by `at`, then file order).
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub until: Option<Offset>,
    pub nodes: Vec<NodeSpec>,
    pub pods: Vec<PodSpec>,
    pub slices: Vec<SliceSpec>,
    pub events: Vec<Event>,
}

impl Scenario {
    /// Whether device taints apply: it has slices, pods with devices, or rule events.
    pub fn has_devices(&self) -> bool {
        !self.slices.is_empty()
            || self.pods.iter().any(|p| !p.devices.is_empty())
            || self.events.iter().any(|e| match &e.change {
                Change::AddPod(p) => !p.devices.is_empty(),
                Change::AddRule(_) | Change::AddDeviceTaint(_) => true,
                _ => false,
            })
    }

    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|cause| {
            crate::adapters::input::InputError::Read {
                path: path.to_path_buf(),
                cause,
            }
        })?;
        Scenario::parse(path, &text)
    }

    /// Parse a scenario: YAML, or JSON (which is YAML too) when it starts with `{`, which the
    /// JSON parser reads faster. Neither builds a tree of the document: both decode straight
    /// into the scenario's types.
    pub fn parse(path: &Path, text: &str) -> Result<Scenario, ScenarioError> {
        let syntax = |(line, column, message)| crate::adapters::input::InputError::Syntax {
            path: path.to_path_buf(),
            line,
            column,
            message,
        };
        // YAML in flow style (`{nodes: [...]}`) starts with `{` too: what is not JSON's syntax
        // is read as YAML; a JSON file with a wrong value gets the JSON error.
        let raw: RawScenario = if text.trim_start().starts_with('{') {
            match serde_json::from_str(text) {
                Ok(raw) => raw,
                Err(e) if e.classify() == serde_json::error::Category::Data => {
                    return Err(syntax(crate::adapters::input::json_error(&e)));
                }
                Err(_) => serde_saphyr::from_str_with_options(
                    text,
                    crate::adapters::input::yaml_options(text.len() as u64),
                )
                .map_err(|e| syntax(crate::adapters::input::yaml_error(&e)))?,
            }
        } else {
            serde_saphyr::from_str_with_options(
                text,
                crate::adapters::input::yaml_options(text.len() as u64),
            )
            .map_err(|e| syntax(crate::adapters::input::yaml_error(&e)))?
        };
        let invalid =
            |field: String, message: String| crate::adapters::input::InputError::Invalid {
                path: path.to_path_buf(),
                field,
                message,
            };
        let mut events = Vec::with_capacity(raw.events.len());
        for (i, e) in raw.events.into_iter().enumerate() {
            let mut changes = Vec::new();
            let mut names = Vec::new();
            macro_rules! take {
                ($field:ident, $name:literal, $variant:ident) => {
                    if let Some(v) = e.$field {
                        changes.push(Change::$variant(v));
                        names.push($name);
                    }
                };
            }
            take!(add_taint, "addTaint", AddTaint);
            take!(remove_taint, "removeTaint", RemoveTaint);
            take!(set_taints, "setTaints", SetTaints);
            take!(add_pod, "addPod", AddPod);
            take!(update_pod, "updatePod", UpdatePod);
            take!(delete_pod, "deletePod", DeletePod);
            take!(add_node, "addNode", AddNode);
            take!(delete_node, "deleteNode", DeleteNode);
            take!(release_brake, "releaseBrake", ReleaseBrake);
            take!(add_device_taint, "addDeviceTaint", AddDeviceTaint);
            take!(remove_device_taint, "removeDeviceTaint", RemoveDeviceTaint);
            take!(add_rule, "addRule", AddRule);
            take!(delete_rule, "deleteRule", DeleteRule);
            if changes.len() != 1 {
                let found = if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(" and ")
                };
                return Err(invalid(
                    format!("events[{i}]"),
                    format!(
                        "needs exactly one of addTaint, removeTaint, setTaints, addPod, updatePod, deletePod, addNode, deleteNode, releaseBrake, addDeviceTaint, removeDeviceTaint, addRule, deleteRule; found {found}"
                    ),
                ));
            }
            let change = changes.remove(0);
            events.push(Event {
                at: e.at,
                change,
                index: i,
            });
        }
        // Same `at`: file order (a stable sort keeps it).
        events.sort_by_key(|e| e.at);
        let scenario = Scenario {
            until: raw.until,
            nodes: raw.nodes,
            pods: raw.pods,
            slices: raw.slices,
            events,
        };
        scenario.validate().map_err(|(f, m)| invalid(f, m))?;
        Ok(scenario)
    }

    /// Everything serde cannot check: valid effects and operators, unique names, and events
    /// that refer to nodes and pods existing at that time.
    fn validate(&self) -> Result<(), (String, String)> {
        if self.nodes.is_empty()
            && self.pods.is_empty()
            && self.slices.is_empty()
            && self.events.is_empty()
        {
            return Err((
                "nodes".into(),
                "the scenario is empty: give nodes, pods, slices or events".into(),
            ));
        }
        let mut nodes = BTreeSet::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let field = format!("nodes[{i}]");
            check_name(&n.name).map_err(|m| (format!("{field}.name"), m))?;
            if !nodes.insert(n.name.clone()) {
                return Err((
                    format!("{field}.name"),
                    format!("node {} is listed twice", n.name),
                ));
            }
            check_taints(&n.taints, &format!("{field}.taints"))?;
        }
        let mut devices = BTreeSet::new();
        let mut pools = BTreeSet::new();
        for (i, slice) in self.slices.iter().enumerate() {
            let field = format!("slices[{i}]");
            check_name(&slice.driver).map_err(|m| (format!("{field}.driver"), m))?;
            if slice.pool.is_empty() {
                return Err((format!("{field}.pool"), "must not be empty".into()));
            }
            if !pools.insert((slice.driver.clone(), slice.pool.clone())) {
                return Err((
                    format!("{field}.pool"),
                    format!("pool {}/{} is listed twice", slice.driver, slice.pool),
                ));
            }
            for (j, d) in slice.devices.iter().enumerate() {
                let f = format!("{field}.devices[{j}]");
                check_name(&d.name).map_err(|m| (format!("{f}.name"), m))?;
                if !devices.insert((slice.driver.clone(), slice.pool.clone(), d.name.clone())) {
                    return Err((
                        format!("{f}.name"),
                        format!("device {} is listed twice", d.name),
                    ));
                }
                check_device_taints(&d.taints, &format!("{f}.taints"))?;
            }
        }
        let published = |driver: &str, pool: &str, device: &str, field: String| {
            if devices.contains(&(driver.to_string(), pool.to_string(), device.to_string())) {
                Ok(())
            } else {
                Err((
                    field,
                    format!("device {driver}/{pool}/{device} is in no slice"),
                ))
            }
        };
        let check_devices = |p: &PodSpec, field: &str| -> Result<(), (String, String)> {
            for (j, d) in p.devices.iter().enumerate() {
                let f = format!("{field}.devices[{j}]");
                published(&d.driver, &d.pool, &d.device, format!("{f}.device"))?;
                check_device_tolerations(&d.tolerations, &format!("{f}.tolerations"))?;
            }
            Ok(())
        };
        let mut pods = BTreeSet::new();
        for (i, p) in self.pods.iter().enumerate() {
            let field = format!("pods[{i}]");
            check_pod(p, &field)?;
            check_devices(p, &field)?;
            if !pods.insert((p.namespace.clone(), p.name.clone())) {
                return Err((
                    format!("{field}.name"),
                    format!("pod {}/{} is listed twice", p.namespace, p.name),
                ));
            }
        }
        let mut rules = BTreeSet::new();
        for e in &self.events {
            let field = format!("events[{}]", e.index);
            let at = e.at;
            let node_exists = |nodes: &BTreeSet<String>, node: &str, what: &str| {
                if nodes.contains(node) {
                    Ok(())
                } else {
                    Err((
                        format!("{field}.{what}"),
                        format!("node {node} does not exist at {at}"),
                    ))
                }
            };
            match &e.change {
                Change::AddTaint(t) => {
                    node_exists(&nodes, &t.node, "addTaint.node")?;
                    check_taints(
                        std::slice::from_ref(&t.taint),
                        &format!("{field}.addTaint.taint"),
                    )?;
                }
                Change::RemoveTaint(t) => {
                    node_exists(&nodes, &t.node, "removeTaint.node")?;
                    if let Some(effect) = &t.effect {
                        check_effect(effect)
                            .map_err(|m| (format!("{field}.removeTaint.effect"), m))?;
                    }
                }
                Change::SetTaints(t) => {
                    node_exists(&nodes, &t.node, "setTaints.node")?;
                    check_taints(&t.taints, &format!("{field}.setTaints.taints"))?;
                }
                Change::AddNode(n) => {
                    check_name(&n.name).map_err(|m| (format!("{field}.addNode.name"), m))?;
                    check_taints(&n.taints, &format!("{field}.addNode.taints"))?;
                    if !nodes.insert(n.name.clone()) {
                        return Err((
                            format!("{field}.addNode.name"),
                            format!("node {} already exists at {at}", n.name),
                        ));
                    }
                }
                Change::DeleteNode(n) => {
                    node_exists(&nodes, &n.name, "deleteNode.name")?;
                    nodes.remove(&n.name);
                }
                Change::ReleaseBrake(r) => {
                    node_exists(&nodes, &r.node, "releaseBrake.node")?;
                }
                Change::AddDeviceTaint(t) => {
                    published(
                        &t.driver,
                        &t.pool,
                        &t.device,
                        format!("{field}.addDeviceTaint.device"),
                    )?;
                    check_device_taints(
                        std::slice::from_ref(&t.taint),
                        &format!("{field}.addDeviceTaint.taint"),
                    )?;
                }
                Change::RemoveDeviceTaint(t) => {
                    published(
                        &t.driver,
                        &t.pool,
                        &t.device,
                        format!("{field}.removeDeviceTaint.device"),
                    )?;
                    if let Some(effect) = &t.effect {
                        check_device_effect(effect)
                            .map_err(|m| (format!("{field}.removeDeviceTaint.effect"), m))?;
                    }
                }
                Change::AddRule(r) => {
                    check_name(&r.name).map_err(|m| (format!("{field}.addRule.name"), m))?;
                    check_device_taints(
                        std::slice::from_ref(&r.taint),
                        &format!("{field}.addRule.taint"),
                    )?;
                    rules.insert(r.name.clone());
                }
                Change::DeleteRule(r) => {
                    if !rules.remove(&r.name) {
                        return Err((
                            format!("{field}.deleteRule.name"),
                            format!("rule {} does not exist at {at}", r.name),
                        ));
                    }
                }
                Change::AddPod(p) => {
                    check_pod(p, &format!("{field}.addPod"))?;
                    check_devices(p, &format!("{field}.addPod"))?;
                    if !pods.insert((p.namespace.clone(), p.name.clone())) {
                        return Err((
                            format!("{field}.addPod.name"),
                            format!("pod {}/{} already exists at {at}", p.namespace, p.name),
                        ));
                    }
                }
                Change::UpdatePod(u) => {
                    if !pods.contains(&(u.namespace.clone(), u.name.clone())) {
                        return Err((
                            format!("{field}.updatePod.name"),
                            format!("pod {}/{} does not exist at {at}", u.namespace, u.name),
                        ));
                    }
                    if let Some(t) = &u.tolerations {
                        check_tolerations(t, &format!("{field}.updatePod.tolerations"))?;
                    }
                }
                Change::DeletePod(k) => {
                    if !pods.remove(&(k.namespace.clone(), k.name.clone())) {
                        return Err((
                            format!("{field}.deletePod.name"),
                            format!("pod {}/{} does not exist at {at}", k.namespace, k.name),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        Err("must not be empty".into())
    } else if name.contains('/') || name.chars().any(char::is_whitespace) {
        Err(format!("{name:?} is not a valid object name"))
    } else {
        Ok(())
    }
}

fn check_effect(effect: &str) -> Result<(), String> {
    match effect {
        "NoSchedule" | "PreferNoSchedule" | "NoExecute" => Ok(()),
        other => Err(format!(
            "unknown effect {other:?}; expected NoSchedule, PreferNoSchedule or NoExecute"
        )),
    }
}

fn check_taints(taints: &[TaintSpec], field: &str) -> Result<(), (String, String)> {
    for (i, t) in taints.iter().enumerate() {
        if t.key.is_empty() {
            return Err((format!("{field}[{i}].key"), "must not be empty".into()));
        }
        check_effect(&t.effect).map_err(|m| (format!("{field}[{i}].effect"), m))?;
    }
    Ok(())
}

/// A device taint's effect: `NoSchedule`, `NoExecute` or `None` (only `NoExecute` evicts).
fn check_device_effect(effect: &str) -> Result<(), String> {
    match effect {
        "NoSchedule" | "NoExecute" | "None" => Ok(()),
        other => Err(format!(
            "unknown device taint effect {other:?}; expected NoSchedule, NoExecute or None"
        )),
    }
}

fn check_device_taints(taints: &[TaintSpec], field: &str) -> Result<(), (String, String)> {
    for (i, t) in taints.iter().enumerate() {
        if t.key.is_empty() {
            return Err((format!("{field}[{i}].key"), "must not be empty".into()));
        }
        check_device_effect(&t.effect).map_err(|m| (format!("{field}[{i}].effect"), m))?;
    }
    Ok(())
}

/// A device request's tolerations: as a pod's, but only `Equal` and `Exists`, and the device
/// effects.
fn check_device_tolerations(
    tolerations: &[TolerationSpec],
    field: &str,
) -> Result<(), (String, String)> {
    for (i, t) in tolerations.iter().enumerate() {
        let f = |name: &str| format!("{field}[{i}].{name}");
        match t.operator.as_str() {
            "" | "Equal" if t.key.is_empty() => {
                return Err((
                    f("operator"),
                    "an empty key requires operator Exists".into(),
                ));
            }
            "" | "Equal" => {}
            "Exists" if !t.value.is_empty() => {
                return Err((f("value"), "must be empty with operator Exists".into()));
            }
            "Exists" => {}
            other => {
                return Err((
                    f("operator"),
                    format!(
                        "unknown operator {other:?} for a device toleration; expected Equal or Exists"
                    ),
                ));
            }
        }
        if !t.effect.is_empty() {
            check_device_effect(&t.effect).map_err(|m| (f("effect"), m))?;
        }
        if t.toleration_seconds.is_some() && !t.effect.is_empty() && t.effect != "NoExecute" {
            return Err((
                f("tolerationSeconds"),
                "only applies to effect NoExecute (or an empty effect)".into(),
            ));
        }
    }
    Ok(())
}

fn check_tolerations(tolerations: &[TolerationSpec], field: &str) -> Result<(), (String, String)> {
    for (i, t) in tolerations.iter().enumerate() {
        let f = |name: &str| format!("{field}[{i}].{name}");
        match t.operator.as_str() {
            "" | "Equal" | "Lt" | "Gt" => {
                if t.key.is_empty() {
                    return Err((
                        f("operator"),
                        "an empty key requires operator Exists".into(),
                    ));
                }
            }
            "Exists" => {
                if !t.value.is_empty() {
                    return Err((f("value"), "must be empty with operator Exists".into()));
                }
            }
            other => {
                return Err((
                    f("operator"),
                    format!("unknown operator {other:?}; expected Equal, Exists, Lt or Gt"),
                ));
            }
        }
        if !t.effect.is_empty() {
            check_effect(&t.effect).map_err(|m| (f("effect"), m))?;
        }
        if t.toleration_seconds.is_some() && !t.effect.is_empty() && t.effect != "NoExecute" {
            return Err((
                f("tolerationSeconds"),
                "only applies to effect NoExecute (or an empty effect)".into(),
            ));
        }
    }
    Ok(())
}

fn check_pod(p: &PodSpec, field: &str) -> Result<(), (String, String)> {
    check_name(&p.name).map_err(|m| (format!("{field}.name"), m))?;
    check_name(&p.namespace).map_err(|m| (format!("{field}.namespace"), m))?;
    check_tolerations(&p.tolerations, &format!("{field}.tolerations"))
}

/// An engine taint from a scenario taint, stamped with `added`.
pub fn taint(t: &TaintSpec, added: Time) -> Taint {
    Taint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: TaintEffect::parse(&t.effect),
        time_added: Some(added),
    }
}

/// An engine toleration from a scenario toleration.
pub fn toleration(t: &TolerationSpec) -> Toleration {
    Toleration {
        key: t.key.clone(),
        operator: Operator::parse(&t.operator),
        value: t.value.clone(),
        effect: (!t.effect.is_empty()).then(|| TaintEffect::parse(&t.effect)),
        toleration_seconds: t.toleration_seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        Scenario::parse(Path::new("s.yaml"), text)
    }

    #[test]
    fn durations() {
        assert_eq!(Offset::parse("90s"), Ok(Offset(90_000)));
        assert_eq!(Offset::parse("5m"), Ok(Offset(300_000)));
        assert_eq!(Offset::parse("1h30m"), Ok(Offset(5_400_000)));
        assert_eq!(Offset::parse("250ms"), Ok(Offset(250)));
        assert_eq!(Offset::parse("1.5s"), Ok(Offset(1_500)));
        assert_eq!(Offset::parse("42"), Ok(Offset(42_000)));
        assert!(Offset::parse("5x").is_err());
        assert!(Offset::parse("5m3").is_err());
        assert!(Offset::parse("-5").is_err());
        assert!(Offset::parse("s").is_err());
        assert!(Offset::parse("").is_err());
    }

    #[test]
    fn events_sort_by_time_then_file_order() {
        let s = parse(
            "nodes: [{name: a}]\nevents:\n- {at: 20s, deleteNode: {name: a}}\n- {at: 10s, addTaint: {node: a, taint: {key: k, effect: NoExecute}}}\n- {at: 10s, removeTaint: {node: a, key: k}}\n",
        );
        let s = s.unwrap_or_else(|e| panic!("{e}"));
        let order: Vec<usize> = s.events.iter().map(|e| e.index).collect();
        assert_eq!(order, vec![1, 2, 0]);
    }

    /// As serde_yaml read them: blank lists and maps are empty, a blank or `~` string is that
    /// text, `off` is no boolean, and an anchor may be used by any number of pods.
    #[test]
    fn blank_values_anchors_and_strict_booleans() {
        let s = parse(
            "nodes:\n  - name: n\n    labels:\n    taints:\n      - {key: k, value: ~, effect: NoExecute}\npods:\n  - name: p\n    nodeName: n\n    tolerations:\n      - key: k\n        value:\n        operator: Equal\nevents:\n  # none yet\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(s.nodes[0].labels.is_empty() && s.events.is_empty());
        assert_eq!(s.nodes[0].taints[0].value, "~");
        assert_eq!(s.pods[0].tolerations[0].value, "");
        let mut text = String::from(
            "nodes: [{name: n}]\npods:\n  - {name: p0, nodeName: n, tolerations: &t [{operator: Exists}]}\n",
        );
        for i in 1..500 {
            text.push_str(&format!(
                "  - {{name: p{i}, nodeName: n, tolerations: *t}}\n"
            ));
        }
        let s = parse(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.pods.len(), 500);
        assert!(s.pods.iter().all(|p| p.tolerations.len() == 1));
        let err = parse(
            "nodes: [{name: n}]\nevents: [{at: 1s, releaseBrake: {node: n, release: off}}]\n",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(err.starts_with("s.yaml:2:"), "{err}");
    }

    /// A document whose aliases would expand far beyond its size (here a list of 1,000
    /// tolerations used by 2,000 pods: 120 KB for 2 million tolerations) is refused before it
    /// is expanded, with the file and place.
    #[test]
    fn aliases_expanding_far_beyond_the_file_are_refused() {
        let mut text = String::from(
            "nodes: [{name: n}]\npods:\n  - {name: p0, nodeName: n, tolerations: &t [",
        );
        for i in 0..1000 {
            text.push_str(&format!("{{key: k{i}, operator: Exists}}, "));
        }
        text.push_str("]}\n");
        for i in 1..2000 {
            text.push_str(&format!(
                "  - {{name: p{i}, nodeName: n, tolerations: *t}}\n"
            ));
        }
        let err = parse(&text)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.starts_with("s.yaml:"), "{err}");
        assert!(err.contains("alias") || err.contains("replay"), "{err}");
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let err =
            parse("nodes:\n  - name: a\n    taints: [{key: k, effect: NoExecute, colour: red}]\n")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
        assert!(err.starts_with("s.yaml:3:"), "{err}");
        assert!(err.contains("colour"), "{err}");
    }

    #[test]
    fn semantic_errors_name_the_field() {
        let cases = [
            (
                "nodes: [{name: a, taints: [{key: k, effect: NoExecut}]}]",
                "nodes[0].taints[0].effect",
            ),
            (
                "pods: [{name: p, tolerations: [{operator: Equal, value: v}]}]",
                "pods[0].tolerations[0].operator",
            ),
            ("events: [{at: 1s}]", "events[0]"),
            (
                "events: [{at: 1s, deleteNode: {name: x}}]",
                "events[0].deleteNode.name",
            ),
            (
                "nodes: [{name: a}]\nevents: [{at: 1s, deleteNode: {name: a}, addNode: {name: b}}]",
                "events[0]",
            ),
            ("pods: [{name: p}, {name: p}]", "pods[1].name"),
            (
                "events: [{at: 1s, updatePod: {name: p}}]",
                "events[0].updatePod.name",
            ),
        ];
        for (text, field) in cases {
            let err = parse(text).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(
                err.starts_with(&format!("s.yaml: {field}:")),
                "{text}\n=> {err}"
            );
        }
    }

    #[test]
    fn bad_durations_are_syntax_errors_with_position() {
        let err = parse("until: 5 minutes")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.starts_with("s.yaml:1:"), "{err}");
    }

    /// A JSON scenario (which is YAML too) is read by the JSON parser, to the same scenario,
    /// with positions in its errors.
    #[test]
    fn json_scenarios_read_as_yaml_ones_do() {
        let yaml = "nodes:\n  - {name: n1}\npods:\n  - {name: p, nodeName: n1, tolerations: [{key: k, operator: Exists, effect: NoExecute, tolerationSeconds: 5}]}\nevents:\n  - {at: 10s, addTaint: {node: n1, taint: {key: k, effect: NoExecute}}}\n";
        let json = r#"{"nodes": [{"name": "n1"}],
 "pods": [{"name": "p", "nodeName": "n1", "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}]}],
 "events": [{"at": "10s", "addTaint": {"node": "n1", "taint": {"key": "k", "effect": "NoExecute"}}}]}"#;
        let a = parse(yaml).unwrap_or_else(|e| panic!("{e}"));
        let b = parse(json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(a, b);
        let err = parse("{\"pods\": [{\"name\": 3}]}")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.starts_with("s.yaml:1:"), "{err}");
        assert!(err.contains("invalid type"), "{err}");
        let flow = parse("{nodes: [{name: n1}], pods: [{name: p, nodeName: n1}]}");
        assert_eq!(
            flow.map(|s| s.pods.len()).unwrap_or_else(|e| panic!("{e}")),
            1,
            "flow-style YAML"
        );
    }
}
