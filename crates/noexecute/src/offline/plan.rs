//! `noexecute plan`: who would be evicted, and when, if these taints were added to a real
//! cluster's nodes or devices now; and who is safe, and why.
//!
//! The pipeline is fed the cluster's current nodes and pods (and its ResourceSlices,
//! ResourceClaims and DeviceTaintRules, if it has any) at the current wall-clock time, then
//! the hypothetical taints and rules, and runs on a virtual clock until nothing is pending.
//! Existing `NoExecute` taints are counted from their `timeAdded` (the best estimate of when
//! the running controller started counting; for devices it is exactly what upstream counts
//! from), hypothetical ones from now.

use std::collections::{BTreeMap, BTreeSet};

use noexecute_engine::device::{DeviceAction, PodDeviceTaint, Publication};
use noexecute_engine::pipeline::Watched;
use noexecute_engine::taint::add_or_replace;
use noexecute_engine::toleration::{TolerationTime, first_tolerating};
use noexecute_engine::{Action, Pipeline, PipelineEffect, Taint, TaintEffect, Time, Verdict};

use crate::adapters::convert;
pub use crate::adapters::selector::Selector;
use crate::offline::state::ClusterState;

/// A taint as `kubectl taint` writes it: `key=value:Effect` or `key:Effect`.
pub fn parse_taint(s: &str) -> Result<Taint, String> {
    let (kv, effect) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("taint {s:?} needs an effect: key[=value]:NoExecute"))?;
    let effect = match effect {
        "NoExecute" | "NoSchedule" | "PreferNoSchedule" => TaintEffect::parse(effect),
        other => {
            return Err(format!(
                "taint {s:?}: unknown effect {other:?}; expected NoExecute, NoSchedule or PreferNoSchedule"
            ));
        }
    };
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if key.is_empty() {
        return Err(format!("taint {s:?} has an empty key"));
    }
    Ok(Taint::new(key, value, effect))
}

/// `--taint NODE=key=value:Effect`.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeTaint {
    pub node: String,
    pub taint: Taint,
}

pub fn parse_node_taint(s: &str) -> Result<NodeTaint, String> {
    let (node, taint) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected NODE=key[=value]:Effect"))?;
    if node.is_empty() {
        return Err(format!("{s:?}: empty node name"));
    }
    Ok(NodeTaint {
        node: node.into(),
        taint: parse_taint(taint)?,
    })
}

/// `--device-taint DRIVER/POOL/DEVICE=key[=value]:Effect`: a taint a driver would publish on
/// one device of its ResourceSlice.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceTaint {
    pub driver: String,
    pub pool: String,
    pub device: String,
    pub taint: Taint,
}

impl DeviceTaint {
    pub fn id(&self) -> String {
        format!("{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// The driver is a DNS subdomain and the device a DNS label, neither with a `/`; the pool name
/// may have some, so it is what lies between the first and the last.
pub fn parse_device_taint(s: &str) -> Result<DeviceTaint, String> {
    let (device, taint) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected DRIVER/POOL/DEVICE=key[=value]:Effect"))?;
    let (driver, rest) = device
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected DRIVER/POOL/DEVICE before the ="))?;
    let (pool, name) = rest
        .rsplit_once('/')
        .ok_or_else(|| format!("{s:?}: expected DRIVER/POOL/DEVICE before the ="))?;
    if driver.is_empty() || pool.is_empty() || name.is_empty() {
        return Err(format!("{s:?}: empty driver, pool or device name"));
    }
    // A device taint's effects are NoSchedule, NoExecute and None (only NoExecute evicts).
    let taint = match taint.rsplit_once(':') {
        Some((kv, "None")) => {
            let mut t = parse_taint(&format!("{kv}:NoSchedule"))?;
            t.effect = TaintEffect::parse("None");
            t
        }
        Some((_, "PreferNoSchedule")) => {
            return Err(format!(
                "{s:?}: a device taint's effect is NoExecute, NoSchedule or None"
            ));
        }
        _ => parse_taint(taint)?,
    };
    Ok(DeviceTaint {
        driver: driver.into(),
        pool: pool.into(),
        device: name.into(),
        taint,
    })
}

/// Why a hypothesis cannot be planned against the cluster ([`Hypothesis::resolve`]).
#[derive(Debug, thiserror::Error)]
pub enum Unresolved {
    /// A node, a device or nodes or devices matching a selector are not there.
    #[error("{0}")]
    NotFound(String),
    /// A live read could not see the DRA objects: the API server refused to list them.
    #[error(
        "--device-taint and --device-rule need ResourceSlices, ResourceClaims and DeviceTaintRules, which this user is not allowed to list"
    )]
    DevicesUnreadable,
}

impl From<Unresolved> for String {
    fn from(e: Unresolved) -> String {
        e.to_string()
    }
}

/// A hypothesis checked against one cluster state ([`Hypothesis::resolve`]): the node taints
/// it adds, by node. [`run`] and [`crate::offline::explain::explain`] take this, so the check is
/// made once and cannot be skipped.
#[derive(Debug)]
pub struct Resolved<'h> {
    hypothesis: &'h Hypothesis,
    added: BTreeMap<String, Vec<Taint>>,
}

impl<'h> Resolved<'h> {
    /// The hypothesis as given.
    pub fn hypothesis(&self) -> &'h Hypothesis {
        self.hypothesis
    }

    /// Node → the taints the hypothesis adds to it.
    pub fn added(&self) -> &BTreeMap<String, Vec<Taint>> {
        &self.added
    }
}

/// The hypothetical change: taints on named nodes and on nodes matching selectors; taints on
/// named devices; DeviceTaintRules as if created now.
#[derive(Clone, Debug, Default)]
pub struct Hypothesis {
    pub taints: Vec<NodeTaint>,
    pub selected: Vec<(Selector, Taint)>,
    pub device_taints: Vec<DeviceTaint>,
    pub rules: Vec<crate::adapters::device::DeviceTaintRule>,
}

impl Hypothesis {
    /// Node → taints to add, checked against the cluster: every named node must exist and
    /// every selector must match at least one node; the device taints and rules must touch a
    /// device ([`Hypothesis::resolve_devices`]).
    pub fn resolve(&self, state: &ClusterState) -> Result<Resolved<'_>, Unresolved> {
        // First: without the DRA objects, nothing else about a device hypothesis can be said.
        if self.has_devices() && state.devices_unreadable {
            return Err(Unresolved::DevicesUnreadable);
        }
        let mut out: BTreeMap<String, Vec<Taint>> = BTreeMap::new();
        let names: BTreeSet<&str> = state
            .nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        for t in &self.taints {
            if !names.contains(t.node.as_str()) {
                return Err(Unresolved::NotFound(format!(
                    "--taint: node {} is not in {}",
                    t.node, state.source
                )));
            }
            out.entry(t.node.clone()).or_default().push(t.taint.clone());
        }
        for (selector, taint) in &self.selected {
            let mut matched = 0;
            for node in &state.nodes {
                let labels = node.metadata.labels.clone().unwrap_or_default();
                if selector.matches(&labels) {
                    matched += 1;
                    let name = node.metadata.name.clone().unwrap_or_default();
                    out.entry(name).or_default().push(taint.clone());
                }
            }
            if matched == 0 {
                return Err(Unresolved::NotFound(format!(
                    "--taint-selector: {selector} matches no node in {}",
                    state.source
                )));
            }
        }
        if self.has_devices() {
            self.resolve_devices(state)?;
        }
        Ok(Resolved {
            hypothesis: self,
            added: out,
        })
    }

    /// The device part checked against the cluster: each `--device-taint` names a device of
    /// its pool's current generation, and each new `--device-rule` selects a published or an
    /// allocated device (rules apply to allocated devices, published or not). An update of a
    /// rule already there may select nothing: that previews taking its taint away.
    fn resolve_devices(&self, state: &ClusterState) -> Result<(), Unresolved> {
        let hint = if state.slices.is_empty()
            && state.claims.is_empty()
            && state.source.starts_with("snapshot ")
        {
            " (it has no ResourceSlices or ResourceClaims; a snapshot takes them with kubectl get nodes,pods,resourceslices,resourceclaims,devicetaintrules -A -o json)"
        } else {
            ""
        };
        // The engine decides which generation of a pool counts, as it does in `run`.
        let mut devices = noexecute_engine::device::Devices::new();
        for s in &state.slices {
            devices.upsert_slice(s.observe());
        }
        for t in &self.device_taints {
            let place = match devices.publication(&t.driver, &t.pool, &t.device) {
                Publication::Current => continue,
                Publication::Older => {
                    "only in an older generation of its pool (the newest does not publish it)"
                }
                Publication::Unknown => "in no ResourceSlice",
            };
            return Err(Unresolved::NotFound(format!(
                "--device-taint: device {} is {place} of {}{hint}",
                t.id(),
                state.source
            )));
        }
        let allocated: Vec<noexecute_engine::device::AllocatedDevice> = state
            .claims
            .iter()
            .filter_map(|c| c.observe().allocation)
            .flatten()
            .collect();
        let existing: BTreeSet<&str> = state
            .rules
            .iter()
            .map(|r| r.metadata.name.as_str())
            .collect();
        for wire in &self.rules {
            let rule = wire.observe();
            if existing.contains(rule.name.as_str()) {
                continue;
            }
            let Some(selector) = &rule.selector else {
                return Err(Unresolved::NotFound(format!(
                    "--device-rule: DeviceTaintRule {} has no deviceSelector, so it selects no device",
                    rule.name
                )));
            };
            let selects = devices
                .published()
                .any(|(driver, pool, device)| selector.selects(driver, pool, device))
                || allocated
                    .iter()
                    .any(|d| selector.selects(&d.driver, &d.pool, &d.device));
            if !selects {
                return Err(Unresolved::NotFound(format!(
                    "--device-rule: DeviceTaintRule {} selects no device published or allocated in {}{hint}",
                    rule.name, state.source
                )));
            }
        }
        Ok(())
    }

    /// Whether it touches devices.
    pub fn has_devices(&self) -> bool {
        !(self.device_taints.is_empty() && self.rules.is_empty())
    }
}

/// What would happen to one pod on an affected node.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub pod: String,
    pub node: String,
    /// When it would be evicted; `None` when it is safe (within the horizon) or held.
    pub evicted_at: Option<Time>,
    /// Due, but held by the mass-eviction brake (or rate limits) past the horizon.
    pub held: bool,
    pub reason: String,
    /// The `NoExecute` taints on the devices allocated to the pod, if any.
    pub device_taints: Vec<PodDeviceTaint>,
}

impl Row {
    /// The tainted devices (`driver/pool/device`) allocated to the pod.
    pub fn devices(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .device_taints
            .iter()
            .map(|t| t.device.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    pub fn decision(&self) -> &'static str {
        if self.evicted_at.is_some() {
            "evict"
        } else if self.held {
            "held"
        } else {
            "safe"
        }
    }
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub now: Time,
    pub rows: Vec<Row>,
    /// Nodes carrying `NoExecute` taints once the hypothesis is applied.
    pub affected_nodes: usize,
    pub unaffected_pods: usize,
    pub unaffected_nodes: usize,
    pub source: String,
    pub horizon: Option<Time>,
    /// The mass-eviction brake engaged with the hypothesis applied.
    pub brake: Option<BrakeFigures>,
}

/// What the brake counted when it engaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BrakeFigures {
    pub tainted: usize,
    pub nodes: usize,
    /// (published devices, `NoExecute`-tainted devices); (0, 0) without devices.
    pub devices: (usize, usize),
}

impl std::fmt::Display for BrakeFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {} nodes", self.tainted, self.nodes)?;
        let (published, tainted) = self.devices;
        if published > 0 {
            write!(f, " and {tainted} of {published} devices")?;
        }
        write!(f, " NoExecute-tainted")
    }
}

/// Run the plan at wall-clock time `now` (Unix milliseconds), up to `horizon` if given.
/// Consumes the state: each pod is dropped once the engine has it, so a large snapshot is not
/// held twice.
pub fn run(
    state: ClusterState,
    resolved: &Resolved<'_>,
    now: Time,
    horizon: Option<Time>,
    policy: &crate::adapters::policy::Policy,
    comparison_operators: bool,
) -> Result<Plan, String> {
    let hypothesis = resolved.hypothesis();
    let device_taints = state.has_devices() || hypothesis.has_devices();
    let ClusterState {
        nodes: listed_nodes,
        pods: listed_pods,
        slices,
        claims,
        rules,
        source,
        ..
    } = state;
    let node_count = listed_nodes.len();
    let mut config = policy.engine_config(comparison_operators);
    // Existing taints are counted from timeAdded whatever the policy: it is the best estimate
    // of when the running controller started counting.
    config.deadline_from_time_added = true;
    let mut pipeline_config = policy.pipeline_config(comparison_operators, usize::MAX, 0);
    pipeline_config.engine = config;
    pipeline_config.device_taints = device_taints;
    // As the live controller: nothing starts before the whole state is known (so the brake
    // sees every node), then this "replica" leads.
    let mut pipeline = Pipeline::new(pipeline_config);
    let watched: &[Watched] = if device_taints {
        &[
            Watched::Nodes,
            Watched::Pods,
            Watched::Slices,
            Watched::Claims,
            Watched::Rules,
        ]
    } else {
        &[Watched::Nodes, Watched::Pods]
    };
    for what in watched {
        pipeline.listing_started(*what);
    }
    let mut nodes: BTreeMap<String, Vec<Taint>> = BTreeMap::new();
    let mut released: BTreeSet<String> = BTreeSet::new();
    for n in listed_nodes {
        let obs = convert::node(&n);
        if crate::adapters::policy::release_annotated(&n.metadata) {
            released.insert(obs.name.clone());
        }
        nodes.insert(obs.name.clone(), obs.taints.clone());
        pipeline.upsert_node(&obs, released.contains(&obs.name), now);
    }
    for p in listed_pods {
        let mut obs = convert::pod(&p);
        obs.excluded = policy.excludes(&obs.namespace, p.metadata.labels.as_ref());
        pipeline.upsert_pod(obs, now);
    }
    for (node, taints) in resolved.added() {
        let current = nodes.entry(node.clone()).or_default();
        for t in taints {
            let mut t = t.clone();
            t.time_added = Some(now);
            add_or_replace(current, t);
        }
        let obs = noexecute_engine::NodeObservation {
            name: node.clone(),
            taints: current.clone(),
        };
        pipeline.upsert_node(&obs, released.contains(node), now);
    }
    devices_in(&mut pipeline, slices, claims, rules, hypothesis, now);
    for what in watched {
        pipeline.listing_done(*what, now);
    }
    pipeline.set_leading(true, now);
    // The planned executor evicts at once; evicted pods stay (terminating) for the rows.
    let mut clock = now;
    let mut evicted: BTreeMap<String, (Time, String)> = BTreeMap::new();
    let mut skipped: BTreeSet<String> = BTreeSet::new();
    let mut due: BTreeMap<String, (Time, String)> = BTreeMap::new();
    // Device evictions are decided (with their time) before they are due.
    let mut device_due: BTreeMap<String, (Time, String)> = BTreeMap::new();
    loop {
        while let Some(effect) = pipeline.poll_effect_evicting_at_once(clock) {
            match effect {
                PipelineEffect::Decided(Action::Evict {
                    pod,
                    cause,
                    deadline,
                    ..
                }) => {
                    let reason = cause.map_or_else(
                        || "scheduled earlier; the node no longer reports its taints".into(),
                        |c| c.to_string(),
                    );
                    due.insert(pod.to_string(), (deadline, reason));
                }
                PipelineEffect::Device(DeviceAction::Evict { pod, eviction }) => {
                    device_due.insert(pod.to_string(), (eviction.at, eviction.to_string()));
                }
                PipelineEffect::Device(DeviceAction::Cancel { pod, .. }) => {
                    device_due.remove(&pod.to_string());
                }
                PipelineEffect::Decided(Action::Skip { pod, .. }) => {
                    skipped.insert(pod.to_string());
                }
                PipelineEffect::Start(attempt) => {
                    let pod = attempt.pod.to_string();
                    let decided = if attempt.device.is_some() {
                        device_due.get(&pod)
                    } else {
                        due.get(&pod)
                    };
                    if let Some((deadline, reason)) = decided {
                        // A deadline already past at `now` (an old taint in a snapshot) starts
                        // at `now`: overdue, not held. Only a start after both was paced.
                        let could_start = (*deadline).max(now);
                        let reason = if clock > could_start {
                            format!(
                                "{reason} (held {:.1}s by pacing)",
                                clock.since(could_start).as_secs_f64()
                            )
                        } else if *deadline < now.whole_second() {
                            // Within the current second is not overdue: the API server
                            // stamps taints to the second.
                            format!(
                                "{reason} (overdue: due {:.1}s before now)",
                                now.since(*deadline).as_secs_f64()
                            )
                        } else {
                            reason.clone()
                        };
                        evicted.insert(pod, (clock, reason));
                    }
                }
                _ => {}
            }
        }
        match pipeline.next_wake().map(|d| d.max(clock)) {
            Some(d) if horizon.is_none_or(|h| d <= h) => {
                clock = d;
                pipeline.tick(clock);
            }
            _ => break,
        }
    }
    let engine = &pipeline;
    // The brake's figures with everything applied (it may have engaged part way through).
    let brake = pipeline.braking().then(|| {
        let (nodes, tainted, _) = pipeline.brake_counts();
        BrakeFigures {
            tainted,
            nodes,
            devices: pipeline.devices().device_counts(),
        }
    });

    let mut rows = Vec::new();
    let mut unaffected_pods = 0;
    let mut affected: BTreeSet<String> = BTreeSet::new();
    for view in engine.pods() {
        let pod = view.pod.to_string();
        let Some(node) = view.pod.node.as_deref() else {
            continue;
        };
        // An excluded pod is unscheduled to the device core: its taints are shown as its
        // node's would be.
        let device_taints = engine
            .devices()
            .pod(&view.pod.namespace, &view.pod.name)
            .map(|p| {
                let mut p = p.clone();
                p.node = Some(node.to_string());
                engine.devices().pod_taints(&p)
            })
            .unwrap_or_default();
        let node_taints = engine.node_taints(node);
        if node_taints.is_none() && device_taints.is_empty() {
            unaffected_pods += 1;
            continue;
        }
        let taints = node_taints.unwrap_or_default();
        if node_taints.is_some() {
            affected.insert(node.to_string());
        }
        // The earlier of its node and device deadlines, if it is due at all.
        let first_due = [due.get(&pod), device_due.get(&pod)]
            .into_iter()
            .flatten()
            .min_by_key(|(d, _)| *d);
        let row = if let Some((at, reason)) = evicted.get(&pod) {
            Row {
                pod,
                node: node.into(),
                evicted_at: Some(*at),
                held: false,
                reason: reason.clone(),
                device_taints,
            }
        } else if let Some((deadline, reason)) =
            first_due.filter(|(d, _)| horizon.is_some_and(|h| *d > h))
        {
            Row {
                pod,
                node: node.into(),
                evicted_at: None,
                held: false,
                reason: format!(
                    "would be evicted at {} (after the horizon): {reason}",
                    crate::offline::plan::relative(*deadline, now)
                ),
                device_taints,
            }
        } else if let Some((deadline, reason)) = first_due {
            let why = match brake {
                Some(figures) if !pipeline.is_released(node) => {
                    format!(
                        "held by the mass-eviction brake ({figures}); release with the node annotation {}=true",
                        crate::adapters::policy::RELEASE_ANNOTATION
                    )
                }
                _ => "held by the rate limits past the horizon".to_string(),
            };
            Row {
                pod,
                node: node.into(),
                evicted_at: None,
                held: true,
                reason: format!(
                    "due {}: {reason}; {why}",
                    crate::offline::plan::relative(*deadline, now)
                ),
                device_taints,
            }
        } else {
            let verdict = noexecute_engine::toleration::verdict(
                taints,
                view.tolerations,
                config.comparison_operators,
            );
            let reason = if skipped.contains(&pod) || view.terminating {
                "already terminating".to_string()
            } else if view.excluded {
                "excluded by policy".to_string()
            } else if let Some(e) = view.eviction {
                format!(
                    "would be evicted at {} (after the horizon)",
                    crate::offline::plan::relative(e.deadline, now)
                )
            } else {
                let mut parts = Vec::new();
                if !taints.is_empty() {
                    parts.push(match verdict {
                        Verdict::Tolerated {
                            time: TolerationTime::Forever,
                            ..
                        } => forever_reason(taints, view.tolerations, config.comparison_operators),
                        _ => "not evicted".to_string(),
                    });
                }
                if !device_taints.is_empty() {
                    parts.push(device_safe_reason(&device_taints));
                }
                parts.join("; ")
            };
            Row {
                pod,
                node: node.into(),
                evicted_at: None,
                held: false,
                reason,
                device_taints,
            }
        };
        rows.push(row);
    }
    rows.sort_by(|a, b| {
        (
            a.evicted_at.is_none(),
            !a.held,
            a.evicted_at,
            &a.node,
            &a.pod,
        )
            .cmp(&(
                b.evicted_at.is_none(),
                !b.held,
                b.evicted_at,
                &b.node,
                &b.pod,
            ))
    });
    let unaffected_nodes = node_count.saturating_sub(affected.len());
    Ok(Plan {
        now,
        rows,
        affected_nodes: affected.len(),
        unaffected_pods,
        unaffected_nodes,
        source,
        horizon,
        brake,
    })
}

/// Feed the pipeline the DRA objects, then the hypothetical device taints (on every slice
/// publishing the device) and rules, added now unless the rule says when.
fn devices_in(
    pipeline: &mut Pipeline,
    slices: Vec<crate::adapters::device::ResourceSlice>,
    claims: Vec<crate::adapters::device::ResourceClaim>,
    rules: Vec<crate::adapters::device::DeviceTaintRule>,
    hypothesis: &Hypothesis,
    now: Time,
) {
    for wire in &slices {
        let mut slice = wire.observe();
        for t in &hypothesis.device_taints {
            if slice.driver != t.driver || slice.pool != t.pool {
                continue;
            }
            for device in slice.devices.iter_mut().filter(|d| d.name == t.device) {
                let mut taint = t.taint.clone();
                // Stamped as the API server stamps it: to the second.
                taint.time_added = Some(now.whole_second());
                add_or_replace(&mut device.taints, taint);
            }
        }
        pipeline.upsert_slice(slice, now);
    }
    for wire in claims {
        pipeline.upsert_claim(wire.observe(), now);
    }
    let status = |wire: &crate::adapters::device::DeviceTaintRule| {
        let (generation, condition) = wire.status();
        noexecute_engine::pipeline::RuleStatus {
            generation,
            condition: condition.map(|c| noexecute_engine::pipeline::WrittenCondition {
                status: c.status,
                reason: c.reason,
                message: c.message,
                observed_generation: c.observed_generation,
                last_transition: c.last_transition,
            }),
        }
    };
    let mut existing: BTreeMap<String, (noexecute_engine::device::Rule, i64)> = BTreeMap::new();
    for wire in &rules {
        let rule = wire.observe();
        pipeline.upsert_rule(rule.clone(), status(wire), now);
        existing.insert(rule.name.clone(), (rule, wire.status().0));
    }
    for wire in &hypothesis.rules {
        let mut rule = wire.observe();
        // The API server keeps whole seconds of a time the file gives.
        rule.taint.time_added = rule.taint.time_added.map(Time::whole_second);
        let mut status = status(wire);
        match existing.get(&rule.name) {
            // As `kubectl apply -f FILE` would: an update keeps the rule's identity, and its
            // taint's timeAdded unless the file gives one; the API server moves it to now
            // when the effect changes and the time did not.
            Some((old, generation)) => {
                rule.uid = old.uid.clone();
                status.generation = generation + 1;
                let kept = rule.taint.time_added.or(old.taint.time_added);
                rule.taint.time_added =
                    if rule.taint.effect != old.taint.effect && kept == old.taint.time_added {
                        Some(now.whole_second())
                    } else {
                        kept.or(Some(now.whole_second()))
                    };
            }
            None => {
                if rule.uid.to_string().is_empty() {
                    rule.uid = noexecute_engine::Uid::new(&format!("planned-{}", rule.name));
                }
                rule.taint.time_added.get_or_insert(now.whole_second());
            }
        }
        pipeline.upsert_rule(rule, status, now);
    }
}

/// The toleration of a device request that decides a device taint's time
/// (`docs/parity.md` §22.4): any matching one without seconds (the taint is then ignored),
/// else the one with the fewest.
pub fn device_toleration<'a>(
    taint: &noexecute_engine::Taint,
    tolerations: &'a [noexecute_engine::Toleration],
) -> Option<&'a noexecute_engine::Toleration> {
    tolerations
        .iter()
        .filter(|t| t.effect == Some(TaintEffect::NoExecute) && t.tolerates(taint, false))
        .min_by_key(|t| match t.toleration_seconds {
            Some(s) if s <= noexecute_engine::toleration::MAX_TOLERATION_SECONDS => (1, s.max(0)),
            _ => (0, 0),
        })
}

/// Why a pod whose devices carry `NoExecute` taints is not due: each taint, and the
/// toleration that tolerates it forever.
fn device_safe_reason(taints: &[PodDeviceTaint]) -> String {
    let parts: Vec<String> = taints
        .iter()
        .map(|t| {
            let by = match device_toleration(&t.taint, &t.tolerations) {
                _ if t.taint.time_added.is_none() => "ignored: it has no timeAdded".to_string(),
                Some(tol) => format!("by \"{tol}\""),
                None => "not tolerated".to_string(),
            };
            format!("{} on {} ({}) {by}", t.taint, t.device, t.source)
        })
        .collect();
    format!("tolerates device taints forever: {}", parts.join("; "))
}

/// "tolerates a:NoExecute forever (a Exists NoExecute forever)", for each taint.
fn forever_reason(
    taints: &[Taint],
    tolerations: &[noexecute_engine::Toleration],
    gate: bool,
) -> String {
    let parts: Vec<String> = taints
        .iter()
        .map(
            |taint| match first_tolerating(tolerations, taint, gate).map(|i| &tolerations[i]) {
                Some(t) => format!("{taint} by \"{t}\""),
                None => format!("{taint} (not tolerated)"),
            },
        )
        .collect();
    format!("tolerates forever: {}", parts.join("; "))
}

pub use crate::adapters::time::{relative, timestamp};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taint_syntax() {
        assert_eq!(
            parse_taint("k=v:NoExecute"),
            Ok(Taint::new("k", "v", TaintEffect::NoExecute))
        );
        assert_eq!(
            parse_taint("k:NoExecute"),
            Ok(Taint::new("k", "", TaintEffect::NoExecute))
        );
        assert!(parse_taint("k=v").is_err());
        assert!(parse_taint("k=v:Sometimes").is_err());
        assert!(parse_taint(":NoExecute").is_err());
        assert_eq!(
            parse_node_taint("node-a=k=v:NoExecute").map(|t| t.node),
            Ok("node-a".into())
        );
        assert!(parse_node_taint("k:NoExecute").is_err());
    }

    /// [`run`] after [`Hypothesis::resolve`], as `plan` runs them.
    fn planned(
        state: ClusterState,
        hypothesis: &Hypothesis,
        now: Time,
        horizon: Option<Time>,
        policy: &crate::adapters::policy::Policy,
        comparison_operators: bool,
    ) -> Result<Plan, String> {
        let resolved = hypothesis.resolve(&state)?;
        run(state, &resolved, now, horizon, policy, comparison_operators)
    }

    /// A node, four pods each with a claim allocated one device of slice `s` (driver `d`,
    /// pool `p`); claim `c1`'s request tolerates `k` for 30 s, `c2`'s forever.
    fn device_snapshot() -> ClusterState {
        let mut items = vec![
            serde_json::json!({"kind": "Node", "metadata": {"name": "n1"}}),
            serde_json::json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": "s"},
                "spec": {"driver": "d", "nodeName": "n1",
                         "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                         "devices": [{"name": "g0"}, {"name": "g1"}, {"name": "g2"}, {"name": "g3"}]}}),
        ];
        for i in 0..4 {
            let tolerations = match i {
                1 => {
                    serde_json::json!([{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}])
                }
                2 => serde_json::json!([{"key": "k", "operator": "Exists", "effect": "NoExecute"}]),
                _ => serde_json::json!([]),
            };
            items.push(serde_json::json!({"kind": "Pod",
                "metadata": {"name": format!("p{i}"), "namespace": "ns", "uid": format!("u{i}")},
                "spec": {"nodeName": "n1", "containers": [],
                         "resourceClaims": [{"name": "gpu", "resourceClaimName": format!("c{i}")}]},
                "status": {"phase": "Running"}}));
            items.push(serde_json::json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"name": format!("c{i}"), "namespace": "ns", "uid": format!("cu{i}")},
                "status": {
                    "allocation": {"devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p",
                        "device": format!("g{i}"), "tolerations": tolerations}]}},
                    "reservedFor": [{"resource": "pods", "name": format!("p{i}"), "uid": format!("u{i}")}]}}));
        }
        let text = serde_json::json!({"kind": "List", "items": items}).to_string();
        ClusterState::parse(
            std::path::Path::new("snap.json"),
            &text,
            &crate::offline::state::PodLabels::All,
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn row<'a>(plan: &'a Plan, pod: &str) -> &'a Row {
        plan.rows
            .iter()
            .find(|r| r.pod == pod)
            .unwrap_or_else(|| panic!("no row for {pod}: {:?}", plan.rows))
    }

    #[test]
    fn device_taints_and_rules_are_planned() {
        let now = Time::from_secs(1_000_000);
        let policy = crate::adapters::policy::Policy::default();
        let state = device_snapshot();
        assert_eq!((state.slices.len(), state.claims.len()), (1, 4));
        // Nothing tainted: nothing affected.
        let plan = planned(
            state.clone(),
            &Hypothesis::default(),
            now,
            None,
            &policy,
            false,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(plan.rows.is_empty(), "{:?}", plan.rows);
        assert_eq!(plan.unaffected_pods, 4);

        let rule: crate::adapters::device::DeviceTaintRule =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "r"},
                "spec": {"deviceSelector": {"driver": "d", "pool": "p", "device": "g3"},
                         "taint": {"key": "r", "effect": "NoExecute"}}
            }))
            .unwrap_or_else(|e| panic!("{e}"));
        let hypothesis = Hypothesis {
            device_taints: ["g0", "g1", "g2"]
                .iter()
                .map(|d| parse_device_taint(&format!("d/p/{d}=k=v:NoExecute")))
                .collect::<Result<_, _>>()
                .unwrap_or_else(|e| panic!("{e}")),
            rules: vec![rule],
            ..Hypothesis::default()
        };
        let plan = planned(state, &hypothesis, now, None, &policy, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(row(&plan, "ns/p0").evicted_at, Some(now));
        assert_eq!(row(&plan, "ns/p1").evicted_at, Some(now.plus_secs(30)));
        assert_eq!(row(&plan, "ns/p3").evicted_at, Some(now));
        assert!(row(&plan, "ns/p3").reason.contains("DeviceTaintRule r"));
        let safe = row(&plan, "ns/p2");
        assert_eq!(safe.decision(), "safe");
        assert!(
            safe.reason.contains("tolerates device taints forever")
                && safe.reason.contains("d/p/g2"),
            "{}",
            safe.reason
        );
        assert_eq!(row(&plan, "ns/p1").devices(), vec!["d/p/g1".to_string()]);
    }

    /// A hypothetical device taint or rule is stamped as the API server stamps it, to the
    /// second, so a pod tolerating it for 30 s goes up to a second before now + 30 s.
    #[test]
    fn hypothetical_device_taints_are_stamped_to_the_second() {
        let now = Time::from_millis(1_000_000_750);
        let policy = crate::adapters::policy::Policy::default();
        for hypothesis in [
            Hypothesis {
                device_taints: ["g0", "g1"]
                    .iter()
                    .map(|d| parse_device_taint(&format!("d/p/{d}=k:NoExecute")))
                    .collect::<Result<_, _>>()
                    .unwrap_or_else(|e| panic!("{e}")),
                ..Hypothesis::default()
            },
            Hypothesis {
                rules: vec![ruled(serde_json::json!({"pool": "p"}), None)],
                ..Hypothesis::default()
            },
        ] {
            let plan = planned(device_snapshot(), &hypothesis, now, None, &policy, false)
                .unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                row(&plan, "ns/p1").evicted_at,
                Some(Time::from_secs(1_000_030)),
                "{hypothesis:?}"
            );
            // Due within the second it was stamped in: at once, and not "overdue".
            let p0 = row(&plan, "ns/p0");
            assert_eq!(p0.evicted_at, Some(now), "{hypothesis:?}");
            assert!(!p0.reason.contains("overdue"), "{}", p0.reason);
        }
    }

    /// DeviceTaintRule `r` over `selector` (null: it has none), its taint added at `added`.
    fn ruled(
        selector: serde_json::Value,
        added: Option<&str>,
    ) -> crate::adapters::device::DeviceTaintRule {
        let mut taint = serde_json::json!({"key": "k", "effect": "NoExecute"});
        if let Some(a) = added {
            taint["timeAdded"] = a.into();
        }
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "r", "uid": "rule-uid", "generation": 1},
            "spec": {"deviceSelector": selector, "taint": taint}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A device eviction due after `--until` is not "held".
    #[test]
    fn a_device_eviction_after_the_horizon_is_not_held() {
        let now = Time::from_secs(1_000_000);
        let hypothesis = Hypothesis {
            device_taints: vec![
                parse_device_taint("d/p/g1=k:NoExecute").unwrap_or_else(|e| panic!("{e}")),
            ],
            ..Hypothesis::default()
        };
        let policy = crate::adapters::policy::Policy::default();
        let plan = planned(
            device_snapshot(),
            &hypothesis,
            now,
            Some(now.plus_secs(10)),
            &policy,
            false,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let r = row(&plan, "ns/p1");
        assert!(!r.held && r.evicted_at.is_none(), "{r:?}");
        assert!(r.reason.contains("after the horizon"), "{}", r.reason);
    }

    /// The brake's figures are those with everything applied, nodes included, even when the
    /// devices engaged it before the nodes were counted.
    #[test]
    fn the_brake_figures_count_the_nodes_and_the_devices() {
        let now = Time::from_secs(1_000_000);
        let hypothesis = Hypothesis {
            rules: vec![ruled(serde_json::json!({"driver": "d"}), None)],
            ..Hypothesis::default()
        };
        let mut policy = crate::adapters::policy::Policy::default();
        policy.pace.brake = Some(noexecute_engine::pace::Brake {
            threshold_percent: 50.0,
            min_tainted_nodes: 1,
        });
        let plan = planned(device_snapshot(), &hypothesis, now, None, &policy, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            plan.brake,
            Some(BrakeFigures {
                tainted: 0,
                nodes: 1,
                devices: (4, 4)
            })
        );
        assert!(row(&plan, "ns/p0").held, "{:?}", row(&plan, "ns/p0"));
    }

    /// `--device-rule` naming an existing rule is an update, as `kubectl apply` makes it: the
    /// taint keeps its timeAdded (here 100 s ago), so the tolerating pod is overdue, not due
    /// in 30 s.
    #[test]
    fn applying_an_existing_rule_keeps_its_time_added() {
        let now = Time::from_secs(1_000_000);
        let before = crate::adapters::time::timestamp(Time::from_secs(1_000_000 - 100));
        let mut state = device_snapshot();
        state.rules.push(ruled(
            serde_json::json!({"driver": "d", "pool": "p", "device": "g3"}),
            Some(&before),
        ));
        let hypothesis = Hypothesis {
            rules: vec![ruled(serde_json::json!({"driver": "d", "pool": "p"}), None)],
            ..Hypothesis::default()
        };
        let policy = crate::adapters::policy::Policy::default();
        let plan = planned(state, &hypothesis, now, None, &policy, false)
            .unwrap_or_else(|e| panic!("{e}"));
        let r = row(&plan, "ns/p1");
        assert_eq!(r.evicted_at, Some(now), "{r:?}");
        assert!(r.reason.contains("overdue"), "{}", r.reason);
    }

    /// A pod excluded by policy still shows its device taints, as excluded.
    #[test]
    fn an_excluded_pod_with_tainted_devices_is_shown_as_excluded() {
        let now = Time::from_secs(1_000_000);
        let hypothesis = Hypothesis {
            rules: vec![ruled(serde_json::json!({"driver": "d"}), None)],
            ..Hypothesis::default()
        };
        let mut policy = crate::adapters::policy::Policy::default();
        policy.exclude_namespaces.insert("ns".into());
        let plan = planned(device_snapshot(), &hypothesis, now, None, &policy, false)
            .unwrap_or_else(|e| panic!("{e}"));
        let r = row(&plan, "ns/p0");
        assert_eq!(
            (r.decision(), r.reason.as_str()),
            ("safe", "excluded by policy")
        );
        assert_eq!(r.devices(), vec!["d/p/g0".to_string()]);
    }

    #[test]
    fn a_device_taint_on_an_unpublished_device_is_refused() {
        let hypothesis = Hypothesis {
            device_taints: vec![
                parse_device_taint("d/p/g9=k:NoExecute").unwrap_or_else(|e| panic!("{e}")),
            ],
            ..Hypothesis::default()
        };
        let err = hypothesis
            .resolve(&device_snapshot())
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("--device-taint: device d/p/g9 is in no ResourceSlice of snapshot snap.json")
        );
    }

    fn refusal(state: &ClusterState, hypothesis: Hypothesis) -> Option<String> {
        hypothesis.resolve(state).err().map(|e| e.to_string())
    }

    fn with_rules(rules: Vec<crate::adapters::device::DeviceTaintRule>) -> Hypothesis {
        Hypothesis {
            rules,
            ..Hypothesis::default()
        }
    }

    /// A rule that selects nothing would plan no eviction: a typo must not read as "safe".
    #[test]
    fn a_device_rule_selecting_no_device_is_refused() {
        let state = device_snapshot();
        let refused = Some(
            "--device-rule: DeviceTaintRule r selects no device published or allocated in snapshot snap.json"
                .to_string(),
        );
        let rule = |selector| with_rules(vec![ruled(selector, None)]);
        assert_eq!(
            refusal(&state, rule(serde_json::json!({"driver": "other"}))),
            refused
        );
        assert_eq!(
            refusal(&state, rule(serde_json::json!({"device": "g9"}))),
            refused
        );
        assert_eq!(
            refusal(&state, rule(serde_json::Value::Null)).as_deref(),
            Some("--device-rule: DeviceTaintRule r has no deviceSelector, so it selects no device")
        );
        // Positive controls: a device of the snapshot, and the empty selector (every device).
        let one = serde_json::json!({"driver": "d", "pool": "p", "device": "g1"});
        assert_eq!(refusal(&state, rule(one)), None);
        assert_eq!(refusal(&state, rule(serde_json::json!({}))), None);
    }

    /// Rules taint allocated devices whether or not a slice still publishes them (a driver
    /// gone, its pods still holding its devices): such a rule is planned, not refused.
    #[test]
    fn a_device_rule_over_allocated_but_unpublished_devices_is_planned() {
        let mut state = device_snapshot();
        state.slices.clear();
        let hypothesis = with_rules(vec![ruled(serde_json::json!({"pool": "p"}), None)]);
        assert_eq!(refusal(&state, hypothesis.clone()), None);
        let policy = crate::adapters::policy::Policy::default();
        let now = Time::from_secs(1_000_000);
        let plan = planned(state.clone(), &hypothesis, now, None, &policy, false)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(row(&plan, "ns/p0").evicted_at, Some(now));
        assert!(
            refusal(
                &state,
                with_rules(vec![ruled(serde_json::json!({"pool": "q"}), None)])
            )
            .is_some()
        );
    }

    /// Updating a rule that is there to select nothing previews taking its taint away.
    #[test]
    fn an_existing_rule_may_be_updated_to_select_nothing() {
        let mut state = device_snapshot();
        state
            .rules
            .push(ruled(serde_json::json!({"device": "g0"}), None));
        let nothing = with_rules(vec![ruled(serde_json::json!({"device": "g9"}), None)]);
        assert_eq!(refusal(&state, nothing), None);
    }

    /// A device only an older generation of its pool publishes is not published: the engine
    /// reads the newest generation only, so tainting it would plan nothing.
    #[test]
    fn a_device_taint_on_an_old_generation_only_is_refused() {
        let mut state = device_snapshot();
        let mut newer = state.slices[0].clone();
        newer.metadata.name = format!("{}-2", newer.metadata.name);
        newer.spec.pool.generation = 2;
        newer.spec.devices.retain(|d| d.name != "g3");
        state.slices.push(newer);
        let taint = |d: &str| Hypothesis {
            device_taints: vec![
                parse_device_taint(&format!("d/p/{d}=k:NoExecute"))
                    .unwrap_or_else(|e| panic!("{e}")),
            ],
            ..Hypothesis::default()
        };
        assert_eq!(
            refusal(&state, taint("g3")).as_deref(),
            Some(
                "--device-taint: device d/p/g3 is only in an older generation of its pool (the newest does not publish it) of snapshot snap.json"
            )
        );
        assert_eq!(refusal(&state, taint("g2")), None);
    }

    /// Without read access to the DRA objects, a device hypothesis says so, not "no device".
    #[test]
    fn device_hypotheses_without_access_say_so() {
        let mut state = device_snapshot();
        state.slices.clear();
        state.claims.clear();
        state.devices_unreadable = true;
        let err = refusal(&state, with_rules(vec![ruled(serde_json::json!({}), None)]));
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("not allowed to list")),
            "{err:?}"
        );
        // Said before a missing node is: the refusal's exit status (4) does not depend on
        // the rest of the command line.
        let mut both = with_rules(vec![ruled(serde_json::json!({}), None)]);
        both.taints =
            vec![parse_node_taint("nowhere=k:NoExecute").unwrap_or_else(|e| panic!("{e}"))];
        assert!(
            matches!(both.resolve(&state), Err(Unresolved::DevicesUnreadable)),
            "{:?}",
            both.resolve(&state).err()
        );
        state.devices_unreadable = false;
        let err = refusal(&state, with_rules(vec![ruled(serde_json::json!({}), None)]));
        assert!(
            err.as_deref()
                .is_some_and(|e| e.contains("it has no ResourceSlices or ResourceClaims")),
            "{err:?}"
        );
    }

    #[test]
    fn device_taint_syntax() {
        let t = parse_device_taint("gpu.example.com/a/b/dev-0=k=v:NoExecute")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (t.driver.as_str(), t.pool.as_str(), t.device.as_str()),
            ("gpu.example.com", "a/b", "dev-0")
        );
        assert!(parse_device_taint("d/dev=k:NoExecute").is_err());
        assert!(parse_device_taint("d//x=k:NoExecute").is_err());
        assert!(parse_device_taint("d/p/x").is_err());
    }

    #[test]
    fn relative_times() {
        let now = Time::from_secs(1000);
        assert_eq!(relative(now, now), "+0s");
        assert_eq!(relative(now.plus_secs(300), now), "+5m00s");
        assert_eq!(relative(now.plus_secs(3720), now), "+1h02m");
    }
}
