//! `noexecute simulate`: the engine on a virtual clock over a scenario (node taints, and device
//! taints when the scenario has slices, pods with devices or rules: `docs/parity.md` §22).
//!
//! It drives the same [`Pipeline`] as the live controller: at each step the pipeline first
//! fires every deadline due by then, then the scenario's change is applied. Due evictions pass
//! through the same pacing (rate limits, mass-eviction brake). The simulated executor
//! succeeds at once, and an evicted pod leaves the simulation.
//!
//! The scenario is consumed as it is fed in, and the timeline's entries can be handed out as
//! they are made ([`stream`]) instead of kept ([`run`]): printing 150,000 pods' timeline as
//! JSON lines holds no entry longer than it takes to write it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;
use std::sync::Arc;

use noexecute_engine::device::{
    AllocatedDevice, Claim, Consumer, Device, DeviceAction, PodClaim, Rule, Selector, Slice,
};
use noexecute_engine::pace::BrakeChange;
use noexecute_engine::pipeline::{Attempt, Effect, PacedBy};
use noexecute_engine::taint::add_or_replace;
use noexecute_engine::toleration::add_default_tolerations;
use noexecute_engine::{
    Action, Config, NodeObservation, Pipeline, PodObservation, Taint, Time, Toleration,
};

use crate::offline::scenario::{self, Change, PodSpec, Scenario};

/// What happened to a pod at an instant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Scheduled {
        deadline: Time,
    },
    Cancelled,
    Evicted,
    /// A due eviction that was not carried out (the pod was already terminating).
    Skipped,
    /// A scenario change that had nothing to act on (e.g. updating an evicted pod).
    Ignored,
    /// A due eviction held by the rate limits or the mass-eviction brake.
    Held,
    /// The mass-eviction brake engaged (no pod: `pod` is `-`).
    BrakeEngaged,
    /// The mass-eviction brake let go.
    BrakeReleased,
}

impl Kind {
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Scheduled { .. } => "scheduled",
            Kind::Cancelled => "cancelled",
            Kind::Evicted => "evicted",
            Kind::Skipped => "skipped",
            Kind::Ignored => "ignored",
            Kind::Held => "held",
            Kind::BrakeEngaged => "brake-engaged",
            Kind::BrakeReleased => "brake-released",
        }
    }
}

/// One line of the timeline.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub at: Time,
    pub kind: Kind,
    /// `namespace/name`.
    pub pod: String,
    pub node: Option<String>,
    pub reason: String,
}

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Add the DefaultTolerationSeconds admission plugin's tolerations (300 s for not-ready
    /// and unreachable) to every pod, as the API server would.
    pub default_tolerations: bool,
    /// Overrides the scenario's `until`.
    pub until: Option<Time>,
    pub config: Config,
    /// Exclusions apply to scenario pods by namespace and labels.
    pub policy: crate::adapters::policy::Policy,
}

/// The result of a simulation.
#[derive(Clone, Debug)]
pub struct Timeline {
    /// Every entry, in order; empty when they were streamed ([`stream`]).
    pub entries: Vec<Entry>,
    /// How many pods were evicted (counted whether or not the entries are kept).
    pub evicted: usize,
    /// When the simulation stopped.
    pub end: Time,
    /// Pods that existed at some point.
    pub pods_seen: usize,
    /// Evictions still pending at the end: (pod, node, deadline).
    pub pending: Vec<(String, Option<String>, Time)>,
    /// Node name → labels (for grouping in the plot).
    pub node_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// Scenario changes to taints and nodes, one label per instant (for the plot).
    pub markers: Vec<(Time, String)>,
}

impl Timeline {
    pub fn evicted(&self) -> usize {
        self.evicted
    }
}

/// What the simulator keeps of a live pod: pods share their toleration lists, and the UID is
/// a number (`sim-N`).
struct SimPod {
    uid: u64,
    node: Option<String>,
    tolerations: Rc<[Toleration]>,
    excluded: bool,
    /// It has a claim with allocated devices (named `<pod>-devices`).
    claim: bool,
}

/// The claim the simulator makes for a pod with devices.
fn claim_name(pod: &str) -> String {
    format!("{pod}-devices")
}

/// The brake's counts, devices too when any are published.
fn brake_counts(tainted: usize, nodes: usize, (published, devices): (usize, usize)) -> String {
    if published > 0 {
        format!("{tainted} of {nodes} nodes and {devices} of {published} devices NoExecute-tainted")
    } else {
        format!("{tainted} of {nodes} nodes NoExecute-tainted")
    }
}

struct Sim<'a> {
    pipeline: Pipeline,
    now: Time,
    opts: Options,
    nodes: BTreeMap<String, Vec<Taint>>,
    /// Each driver's pool, by (driver, pool).
    slices: BTreeMap<(String, String), Slice>,
    /// Nodes released from the brake by a scenario event.
    released: BTreeSet<String>,
    pods: BTreeMap<(String, String), SimPod>,
    /// Toleration lists as written → as the engine sees them (default tolerations added).
    tolerations: HashMap<Vec<scenario::TolerationSpec>, Rc<[Toleration]>>,
    uids: u64,
    /// Evicted pods (and whether they have a claim), deleted from the pipeline once nothing
    /// else is due (see `absorb`).
    gone: Vec<(Arc<str>, Arc<str>, bool)>,
    /// Rules by name: the rule as last applied and its generation.
    rules: BTreeMap<String, (Rule, i64)>,
    /// Rules created so far (a rule created again after its deletion is a new object).
    rule_uids: u64,
    timeline: Timeline,
    out: &'a mut dyn FnMut(Entry),
}

/// Simulate, keeping every entry of the timeline.
pub fn run(scenario: Scenario, opts: Options) -> Timeline {
    let mut entries = Vec::new();
    let mut timeline = stream(scenario, opts, &mut |e| entries.push(e));
    timeline.entries = entries;
    timeline
}

/// Simulate, handing each entry of the timeline to `out` as it is made; the timeline
/// returned has no entries.
pub fn stream(scenario: Scenario, opts: Options, out: &mut dyn FnMut(Entry)) -> Timeline {
    let mut config = opts.policy.pipeline_config(false, usize::MAX, 0);
    config.engine = opts.config;
    config.device_taints = scenario.has_devices();
    let mut sim = Sim {
        pipeline: Pipeline::acting(config),
        now: Time::from_millis(0),
        nodes: BTreeMap::new(),
        slices: BTreeMap::new(),
        released: BTreeSet::new(),
        pods: BTreeMap::new(),
        tolerations: HashMap::new(),
        uids: 0,
        gone: Vec::new(),
        rules: BTreeMap::new(),
        rule_uids: 0,
        out,
        timeline: Timeline {
            entries: Vec::new(),
            evicted: 0,
            end: Time::from_millis(0),
            pods_seen: 0,
            pending: Vec::new(),
            node_labels: BTreeMap::new(),
            markers: Vec::new(),
        },
        opts,
    };
    let Scenario {
        until,
        nodes,
        pods,
        slices,
        events,
    } = scenario;
    for spec in slices {
        let slice = Slice {
            name: format!("{}.{}", spec.pool, spec.driver),
            driver: spec.driver,
            pool: spec.pool,
            generation: 1,
            devices: spec
                .devices
                .iter()
                .map(|d| Device {
                    name: d.name.clone(),
                    taints: d
                        .taints
                        .iter()
                        .map(|t| scenario::taint(t, sim.now.whole_second()))
                        .collect(),
                })
                .collect(),
        };
        sim.set_slice(slice);
    }
    for node in nodes {
        let taints = node
            .taints
            .iter()
            .map(|t| scenario::taint(t, sim.now))
            .collect();
        sim.set_node(&node.name, taints);
        sim.timeline.node_labels.insert(node.name, node.labels);
    }
    // Each pod's spec is dropped once it is fed in.
    for pod in pods {
        sim.add_pod(pod);
    }
    let until = sim.opts.until.or(until.map(|u| u.time()));
    for event in events {
        let at = event.at.time();
        if until.is_some_and(|u| at > u) {
            break;
        }
        sim.advance_to(at);
        sim.mark(&event.change);
        sim.apply(event.change);
    }
    match until {
        Some(u) => sim.advance_to(u),
        None => {
            while let Some(next) = sim.next_step() {
                sim.advance_to(next);
            }
        }
    }
    sim.finish()
}

/// `node.kubernetes.io/unreachable` → `unreachable`, for short labels.
fn short_key(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or(key)
}

impl Sim<'_> {
    /// The next instant the pipeline has something to do.
    fn next_step(&self) -> Option<Time> {
        self.pipeline.next_wake().map(|t| t.max(self.now))
    }

    fn advance_to(&mut self, t: Time) {
        while let Some(next) = self.next_step() {
            if next > t {
                break;
            }
            self.now = self.now.max(next);
            self.pipeline.tick(self.now);
            self.absorb();
        }
        self.now = self.now.max(t);
    }

    fn brake_entry(&mut self, change: BrakeChange) {
        let threshold = self.pipeline.brake_threshold();
        let (kind, counts, what) = match change {
            BrakeChange::Engaged {
                tainted,
                nodes,
                devices,
            } => (
                Kind::BrakeEngaged,
                brake_counts(tainted, nodes, devices),
                if self.opts.policy.release_brake {
                    format!("more than the {threshold}% threshold; released by --release-brake")
                } else {
                    format!("more than the {threshold}% threshold: evictions paused")
                },
            ),
            BrakeChange::Released {
                tainted,
                nodes,
                devices,
            } => (
                Kind::BrakeReleased,
                brake_counts(tainted, nodes, devices),
                format!("within the {threshold}% threshold: evictions resume"),
            ),
        };
        self.timeline.markers.push((
            self.now,
            if kind == Kind::BrakeEngaged {
                "brake engaged".into()
            } else {
                "brake released".into()
            },
        ));
        let (_, _, share) = self.pipeline.brake_counts();
        let shares = match self.pipeline.devices().device_counts() {
            (published, tainted) if published > 0 => format!(
                "{share:.1}% of nodes, {:.1}% of devices",
                tainted as f64 * 100.0 / published as f64
            ),
            _ => format!("{share:.1}%"),
        };
        self.entry(Entry {
            at: self.now,
            kind,
            pod: "-".into(),
            node: None,
            reason: format!("{counts} ({shares}), {what}"),
        });
    }

    /// One line of the timeline, out.
    fn entry(&mut self, entry: Entry) {
        if entry.kind == Kind::Evicted {
            self.timeline.evicted += 1;
        }
        (self.out)(entry);
    }

    /// Turn the pipeline's effects into timeline entries. The simulated executor evicts at
    /// once: the pod leaves the simulation.
    fn absorb(&mut self) {
        loop {
            self.absorb_effects();
            // Evicted pods are deleted once nothing else is due now: deleting a pod first
            // fires every deadline due, which would hand over all of a mass deadline (135,000
            // pods in one instant) at once instead of a tick's batch at a time.
            let due = self.pipeline.next_wake().is_some_and(|t| t <= self.now);
            if due || self.gone.is_empty() {
                return;
            }
            for (namespace, name, claim) in std::mem::take(&mut self.gone) {
                self.pipeline.delete_pod(&namespace, &name, None, self.now);
                // Its claim goes after it (as the resourceclaim controller deletes it), so
                // the pod is not re-decided without it.
                if claim {
                    self.pipeline
                        .delete_claim(&namespace, &claim_name(&name), self.now);
                }
            }
        }
    }

    fn absorb_effects(&mut self) {
        while let Some(effect) = self.pipeline.poll_effect_evicting_at_once(self.now) {
            let (pod, node, kind, reason) = match effect {
                Effect::Decided(action) => {
                    let pod = action.pod().to_string();
                    let node = action.pod().node.as_deref().map(str::to_string);
                    match action {
                        Action::Schedule {
                            deadline, cause, ..
                        } => (pod, node, Kind::Scheduled { deadline }, cause.to_string()),
                        Action::Cancel { reason, .. } => {
                            (pod, node, Kind::Cancelled, reason.as_str().to_string())
                        }
                        Action::Skip { .. } => (
                            pod,
                            node,
                            Kind::Skipped,
                            "pod is already terminating".to_string(),
                        ),
                        // Shown when it starts, or as held.
                        Action::Evict { .. } => continue,
                    }
                }
                Effect::Paced { pod, by, .. } => {
                    let reason = match by {
                        PacedBy::Brake {
                            tainted,
                            nodes,
                            devices,
                        } => format!(
                            "mass-eviction brake: {}",
                            brake_counts(tainted, nodes, devices)
                        ),
                        PacedBy::RateLimit => "rate limit".into(),
                    };
                    let node = pod.node.as_deref().map(str::to_string);
                    (pod.to_string(), node, Kind::Held, reason)
                }
                Effect::Start(attempt) => {
                    let reason = match (&attempt.device, &attempt.cause) {
                        (Some(d), _) => d.to_string(),
                        (None, Some(c)) => c.to_string(),
                        (None, None) => {
                            "scheduled earlier; the node no longer reports its taints".into()
                        }
                    };
                    let waited = self.now.since(attempt.due_at);
                    let reason = if waited.is_zero() {
                        reason
                    } else {
                        format!("{reason} (held {:.1}s by pacing)", waited.as_secs_f64())
                    };
                    let node = attempt.pod.node.as_deref().map(str::to_string);
                    let pod = attempt.pod.to_string();
                    self.evicted(&attempt);
                    (pod, node, Kind::Evicted, reason)
                }
                Effect::Brake(change) => {
                    self.brake_entry(change);
                    continue;
                }
                Effect::Device(DeviceAction::Evict { pod, eviction }) => {
                    let node = self.node_of(&pod.namespace, &pod.name);
                    let reason = eviction.to_string();
                    (
                        pod.to_string(),
                        node,
                        Kind::Scheduled {
                            deadline: eviction.at.max(self.now),
                        },
                        reason,
                    )
                }
                // A pod this simulation evicted is deleted after: nothing to show.
                Effect::Device(DeviceAction::Cancel { pod, event: false })
                    if self.node_of(&pod.namespace, &pod.name).is_none()
                        && !self
                            .pods
                            .contains_key(&(pod.namespace.to_string(), pod.name.to_string())) =>
                {
                    continue;
                }
                Effect::Device(DeviceAction::Cancel { pod, event }) => {
                    let node = self.node_of(&pod.namespace, &pod.name);
                    let reason = if event {
                        "its devices no longer make it due"
                    } else {
                        "the pod was deleted"
                    };
                    (pod.to_string(), node, Kind::Cancelled, reason.to_string())
                }
                Effect::Cancel(_)
                | Effect::PodEvent { .. }
                | Effect::ControllerEvent { .. }
                | Effect::Hold(_)
                | Effect::TermExpired { .. }
                | Effect::Foreign { .. }
                | Effect::NodeRelease { .. }
                | Effect::Unparked { .. }
                | Effect::RuleStatus(_)
                | Effect::Synced { .. } => continue,
            };
            self.entry(Entry {
                at: self.now,
                kind,
                pod,
                node,
                reason,
            });
        }
    }

    /// The attempt succeeded at once (the pipeline's virtual executor): the pod is gone.
    fn evicted(&mut self, attempt: &Attempt) {
        let (namespace, name) = (&attempt.pod.namespace, &attempt.pod.name);
        let claim = self
            .pods
            .remove(&(namespace.to_string(), name.to_string()))
            .is_some_and(|pod| pod.claim);
        self.gone.push((namespace.clone(), name.clone(), claim));
    }

    fn node_of(&self, namespace: &str, name: &str) -> Option<String> {
        self.pods
            .get(&(namespace.to_string(), name.to_string()))
            .and_then(|p| p.node.clone())
    }

    fn set_slice(&mut self, slice: Slice) {
        self.slices
            .insert((slice.driver.clone(), slice.pool.clone()), slice.clone());
        self.pipeline.upsert_slice(slice, self.now);
        self.absorb();
    }

    /// Change one device's taints in its slice.
    fn edit_device(
        &mut self,
        driver: &str,
        pool: &str,
        device: &str,
        edit: impl FnOnce(&mut Vec<Taint>),
    ) {
        let Some(mut slice) = self
            .slices
            .get(&(driver.to_string(), pool.to_string()))
            .cloned()
        else {
            return;
        };
        if let Some(d) = slice.devices.iter_mut().find(|d| d.name == device) {
            edit(&mut d.taints);
        }
        self.set_slice(slice);
    }

    fn set_node(&mut self, name: &str, taints: Vec<Taint>) {
        let obs = NodeObservation {
            name: name.to_string(),
            taints: taints.clone(),
        };
        self.nodes.insert(name.to_string(), taints);
        let released = self.released.contains(name);
        self.pipeline.upsert_node(&obs, released, self.now);
        self.absorb();
    }

    /// A pod's tolerations as the engine sees them, shared by every pod that lists the same.
    fn tolerations(&mut self, specs: Vec<scenario::TolerationSpec>) -> Rc<[Toleration]> {
        if let Some(shared) = self.tolerations.get(specs.as_slice()) {
            return shared.clone();
        }
        let mut tolerations: Vec<Toleration> = specs.iter().map(scenario::toleration).collect();
        if self.opts.default_tolerations {
            add_default_tolerations(&mut tolerations, 300);
        }
        let shared: Rc<[Toleration]> = tolerations.into();
        self.tolerations.insert(specs, shared.clone());
        shared
    }

    fn add_pod(&mut self, spec: PodSpec) {
        self.uids += 1;
        self.timeline.pods_seen += 1;
        let excluded = self
            .opts
            .policy
            .excludes(&spec.namespace, Some(&spec.labels));
        let pod = SimPod {
            uid: self.uids,
            node: spec.node_name,
            tolerations: self.tolerations(spec.tolerations),
            excluded,
            claim: !spec.devices.is_empty(),
        };
        if pod.claim {
            // Allocated and reserved for the pod, as kube-scheduler leaves it.
            let uid = noexecute_engine::Uid::new(&format!("sim-{}", pod.uid));
            let claim = Claim {
                namespace: spec.namespace.clone(),
                name: claim_name(&spec.name),
                uid: noexecute_engine::Uid::new(&format!("sim-claim-{}", pod.uid)),
                owner: None,
                allocation: Some(
                    spec.devices
                        .iter()
                        .map(|d| AllocatedDevice {
                            driver: d.driver.clone(),
                            pool: d.pool.clone(),
                            device: d.device.clone(),
                            tolerations: d.tolerations.iter().map(scenario::toleration).collect(),
                        })
                        .collect(),
                ),
                reserved_for: vec![Consumer::pod(spec.name.clone(), uid)],
            };
            self.pipeline.upsert_claim(claim, self.now);
        }
        // In before it is observed: observing it may evict it at once, which takes it out.
        let (namespace, name) = (spec.namespace, spec.name);
        self.pods.insert((namespace.clone(), name.clone()), pod);
        self.observe_pod(&namespace, &name);
    }

    fn observe_pod(&mut self, namespace: &str, name: &str) {
        let Some(pod) = self.pods.get(&(namespace.to_string(), name.to_string())) else {
            return;
        };
        let uid = format!("sim-{}", pod.uid);
        let mut obs = PodObservation::new(namespace, name, &uid, pod.node.as_deref())
            .with_tolerations(pod.tolerations.to_vec());
        obs.excluded = pod.excluded;
        if pod.claim {
            obs.claims = vec![PodClaim::Named(claim_name(name))];
        }
        self.pipeline.upsert_pod(obs, self.now);
        self.absorb();
    }

    fn ignored(&mut self, pod: String, reason: &str) {
        self.entry(Entry {
            at: self.now,
            kind: Kind::Ignored,
            pod,
            node: None,
            reason: reason.into(),
        });
    }

    /// Remember taint and node changes for the plot, folding changes at one instant.
    fn mark(&mut self, change: &Change) {
        let label = match change {
            Change::AddTaint(t) => format!("+{} on {}", short_key(&t.taint.key), t.node),
            Change::RemoveTaint(r) => format!("-{} on {}", short_key(&r.key), r.node),
            Change::SetTaints(s) => format!("taints of {} set", s.node),
            Change::AddNode(n) => format!("node {} added", n.name),
            Change::DeleteNode(n) => format!("node {} deleted", n.name),
            Change::AddDeviceTaint(t) => {
                format!("+{} on {}/{}", short_key(&t.taint.key), t.pool, t.device)
            }
            Change::RemoveDeviceTaint(t) => {
                format!("-{} on {}/{}", short_key(&t.key), t.pool, t.device)
            }
            Change::AddRule(r) => format!("rule {} added", r.name),
            Change::DeleteRule(r) => format!("rule {} deleted", r.name),
            _ => return,
        };
        match self.timeline.markers.last_mut() {
            Some((at, existing)) if *at == self.now => {
                let more = existing
                    .rsplit_once(" (+")
                    .and_then(|(_, n)| n.trim_end_matches(')').parse::<usize>().ok())
                    .unwrap_or(0);
                let base = existing.split(" (+").next().unwrap_or_default().to_string();
                *existing = format!("{base} (+{})", more + 1);
            }
            _ => self.timeline.markers.push((self.now, label)),
        }
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::AddTaint(t) => {
                let mut taints = self.nodes.get(&t.node).cloned().unwrap_or_default();
                add_or_replace(&mut taints, scenario::taint(&t.taint, self.now));
                self.set_node(&t.node, taints);
            }
            Change::RemoveTaint(r) => {
                let mut taints = self.nodes.get(&r.node).cloned().unwrap_or_default();
                taints.retain(|t| {
                    !(t.key == r.key && r.effect.as_deref().is_none_or(|e| t.effect.as_str() == e))
                });
                self.set_node(&r.node, taints);
            }
            Change::SetTaints(s) => {
                let taints = s
                    .taints
                    .iter()
                    .map(|t| scenario::taint(t, self.now))
                    .collect();
                self.set_node(&s.node, taints);
            }
            Change::AddNode(n) => {
                let taints = n
                    .taints
                    .iter()
                    .map(|t| scenario::taint(t, self.now))
                    .collect();
                self.set_node(&n.name, taints);
                self.timeline.node_labels.insert(n.name, n.labels);
            }
            Change::DeleteNode(n) => {
                self.nodes.remove(&n.name);
                self.released.remove(&n.name);
                self.pipeline.delete_node(&n.name, self.now);
                self.absorb();
            }
            Change::ReleaseBrake(r) => {
                if r.release {
                    self.released.insert(r.node.clone());
                } else {
                    self.released.remove(&r.node);
                }
                let taints = self.nodes.get(&r.node).cloned().unwrap_or_default();
                self.set_node(&r.node, taints);
            }
            Change::AddDeviceTaint(t) => {
                let taint = scenario::taint(&t.taint, self.now.whole_second());
                self.edit_device(&t.driver, &t.pool, &t.device, |taints| {
                    add_or_replace(taints, taint)
                });
            }
            Change::RemoveDeviceTaint(r) => {
                self.edit_device(&r.driver, &r.pool, &r.device, |taints| {
                    taints.retain(|t| {
                        !(t.key == r.key
                            && r.effect.as_deref().is_none_or(|e| t.effect.as_str() == e))
                    })
                });
            }
            Change::AddRule(r) => {
                let mut rule = Rule {
                    uid: noexecute_engine::Uid::new(""),
                    name: r.name,
                    selector: r.device_selector.map(|s| Selector {
                        driver: s.driver,
                        pool: s.pool,
                        device: s.device,
                    }),
                    taint: scenario::taint(&r.taint, self.now.whole_second()),
                };
                // As `kubectl apply` updates a rule: the same object, its taint's timeAdded
                // kept unless the effect changes (the API server's update strategy).
                let generation = match self.rules.get(&rule.name) {
                    Some((old, generation)) => {
                        rule.uid = old.uid.clone();
                        if rule.taint.effect == old.taint.effect {
                            rule.taint.time_added = old.taint.time_added;
                        }
                        generation + 1
                    }
                    None => {
                        self.rule_uids += 1;
                        rule.uid =
                            noexecute_engine::Uid::new(&format!("sim-rule-{}", self.rule_uids));
                        1
                    }
                };
                self.rules
                    .insert(rule.name.clone(), (rule.clone(), generation));
                let status = noexecute_engine::pipeline::RuleStatus {
                    generation,
                    condition: None,
                };
                self.pipeline.upsert_rule(rule, status, self.now);
                self.absorb();
            }
            Change::DeleteRule(r) => {
                self.rules.remove(&r.name);
                self.pipeline.delete_rule(&r.name, self.now);
                self.absorb();
            }
            Change::AddPod(p) => self.add_pod(p),
            Change::UpdatePod(u) => {
                let key = (u.namespace.clone(), u.name.clone());
                if !self.pods.contains_key(&key) {
                    self.ignored(
                        format!("{}/{}", u.namespace, u.name),
                        "updatePod: the pod was already evicted",
                    );
                    return;
                }
                let tolerations = u.tolerations.map(|t| self.tolerations(t));
                if let Some(pod) = self.pods.get_mut(&key) {
                    if let Some(node) = u.node_name {
                        pod.node = Some(node);
                    }
                    if let Some(t) = tolerations {
                        pod.tolerations = t;
                    }
                }
                self.observe_pod(&u.namespace, &u.name);
            }
            Change::DeletePod(k) => {
                let key = (k.namespace.clone(), k.name.clone());
                if !self.pods.contains_key(&key) {
                    self.ignored(
                        format!("{}/{}", k.namespace, k.name),
                        "deletePod: the pod was already evicted",
                    );
                    return;
                }
                self.pipeline
                    .delete_pod(&k.namespace, &k.name, None, self.now);
                if self.pods.get(&key).is_some_and(|p| p.claim) {
                    self.pipeline
                        .delete_claim(&k.namespace, &claim_name(&k.name), self.now);
                }
                self.absorb();
                self.pods.remove(&key);
            }
        }
    }

    fn finish(mut self) -> Timeline {
        self.timeline.end = self.now;
        let mut pending: Vec<(String, Option<String>, Time)> = self
            .pipeline
            .pending_pods()
            .map(|v| {
                let deadline = v.eviction.map_or(self.now, |e| e.deadline);
                (
                    v.pod.to_string(),
                    v.pod.node.as_deref().map(str::to_string),
                    deadline,
                )
            })
            .collect();
        // Device evictions waiting or held, where the pod has no earlier node one.
        let devices: Vec<(String, Option<String>, Time)> = self
            .pipeline
            .devices()
            .pending()
            .iter()
            .map(|(key, eviction)| {
                (
                    key.to_string(),
                    self.node_of(&key.namespace, &key.name),
                    eviction.at,
                )
            })
            .collect();
        for (pod, node, at) in devices {
            match pending.iter_mut().find(|p| p.0 == pod) {
                Some(p) => p.2 = p.2.min(at),
                None => pending.push((pod, node, at)),
            }
        }
        pending.sort_by(|a, b| (a.2, &a.0).cmp(&(b.2, &b.0)));
        self.timeline.pending = pending;
        self.timeline
    }
}
