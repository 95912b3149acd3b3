//! `noexecute simulate`: the engine on a virtual clock over a scenario.
//!
//! The driver is the same as the live controller's: at each step it first fires every
//! deadline due by then, then applies the scenario's change. Due evictions pass through the
//! same pacer (rate limits, mass-eviction brake) as in the live controller. The simulated
//! executor succeeds at once, and an evicted pod leaves the simulation.

use std::collections::BTreeMap;

use std::sync::Arc;

use noexecute_engine::pace::{BrakeChange, Pacer};
use noexecute_engine::toleration::add_default_tolerations;
use noexecute_engine::{
    Action, Config, Engine, EvictionId, NodeObservation, Outcome, PodObservation, Report, Taint,
    Time, Toleration,
};

use crate::scenario::{self, Change, PodSpec, Scenario};

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
    pub policy: crate::policy::Policy,
}

/// The result of a simulation.
#[derive(Clone, Debug)]
pub struct Timeline {
    pub entries: Vec<Entry>,
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
        self.entries
            .iter()
            .filter(|e| e.kind == Kind::Evicted)
            .count()
    }
}

struct SimPod {
    uid: String,
    node: Option<String>,
    tolerations: Vec<Toleration>,
    excluded: bool,
}

/// A due eviction waiting in the pacer: what the timeline says when it starts.
struct Due {
    namespace: Arc<str>,
    name: Arc<str>,
    node: Option<String>,
    eviction: EvictionId,
    reason: String,
    since: Time,
}

struct Sim {
    engine: Engine,
    pacer: Pacer<Due>,
    now: Time,
    opts: Options,
    nodes: BTreeMap<String, Vec<Taint>>,
    pods: BTreeMap<(String, String), SimPod>,
    uids: u64,
    timeline: Timeline,
}

pub fn run(scenario: &Scenario, opts: Options) -> Timeline {
    let mut pacer = Pacer::new(opts.policy.pace);
    pacer.set_release_all(opts.policy.release_brake);
    let mut sim = Sim {
        engine: Engine::new(opts.config.clone()),
        pacer,
        now: Time::from_millis(0),
        nodes: BTreeMap::new(),
        pods: BTreeMap::new(),
        uids: 0,
        timeline: Timeline {
            entries: Vec::new(),
            end: Time::from_millis(0),
            pods_seen: 0,
            pending: Vec::new(),
            node_labels: BTreeMap::new(),
            markers: Vec::new(),
        },
        opts,
    };
    for node in &scenario.nodes {
        sim.timeline
            .node_labels
            .insert(node.name.clone(), node.labels.clone());
        let taints = node
            .taints
            .iter()
            .map(|t| scenario::taint(t, sim.now))
            .collect();
        sim.set_node(&node.name, taints);
    }
    for pod in &scenario.pods {
        sim.add_pod(pod);
    }
    let until = sim.opts.until.or(scenario.until.map(|u| u.time()));
    for event in &scenario.events {
        let at = event.at.time();
        if until.is_some_and(|u| at > u) {
            break;
        }
        sim.advance_to(at);
        sim.mark(&event.change);
        sim.apply(&event.change);
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

impl Sim {
    /// The next instant the engine or the pacer has something to do.
    fn next_step(&self) -> Option<Time> {
        let engine = self.engine.next_deadline();
        let pacer = self.pacer.next_release().map(|t| t.max(self.now));
        match (engine, pacer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn advance_to(&mut self, t: Time) {
        while let Some(next) = self.next_step() {
            if next > t {
                break;
            }
            self.now = self.now.max(next);
            let mut out = Vec::new();
            self.engine.advance(self.now, &mut out);
            self.absorb(out);
        }
        self.now = self.now.max(t);
    }

    /// Update the brake and start the due evictions the pacer lets go.
    fn pace(&mut self) {
        let (nodes, tainted) = self.engine.node_counts();
        if let Some(change) = self.pacer.set_node_counts(nodes, tainted) {
            let threshold = self.pacer.brake_threshold();
            let (kind, tainted, nodes, what) = match change {
                BrakeChange::Engaged { tainted, nodes } => (
                    Kind::BrakeEngaged,
                    tainted,
                    nodes,
                    if self.opts.policy.release_brake {
                        format!("more than the {threshold}% threshold; released by --release-brake")
                    } else {
                        format!("more than the {threshold}% threshold: evictions paused")
                    },
                ),
                BrakeChange::Released { tainted, nodes } => (
                    Kind::BrakeReleased,
                    tainted,
                    nodes,
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
            self.timeline.entries.push(Entry {
                at: self.now,
                kind,
                pod: "-".into(),
                node: None,
                reason: format!(
                    "{tainted} of {nodes} nodes NoExecute-tainted ({:.1}%), {what}",
                    self.pacer.tainted_percent()
                ),
            });
        }
        let mut started = Vec::new();
        self.pacer.release(self.now, &mut started);
        for due in started {
            let waited = self.now.since(due.since);
            let reason = if waited.is_zero() {
                due.reason
            } else {
                format!(
                    "{} (held {:.1}s by pacing)",
                    due.reason,
                    waited.as_secs_f64()
                )
            };
            self.timeline.entries.push(Entry {
                at: self.now,
                kind: Kind::Evicted,
                pod: format!("{}/{}", due.namespace, due.name),
                node: due.node,
                reason,
            });
            self.evicted(due.namespace, due.name, due.eviction);
        }
    }

    fn absorb(&mut self, actions: Vec<Action>) {
        for action in actions {
            let pod = action.pod().to_string();
            let node = action.pod().node.as_deref().map(str::to_string);
            let (kind, reason) = match &action {
                Action::Schedule {
                    deadline, cause, ..
                } => (
                    Kind::Scheduled {
                        deadline: *deadline,
                    },
                    cause.to_string(),
                ),
                Action::Cancel {
                    reason, eviction, ..
                } => {
                    self.pacer.cancel(*eviction);
                    (Kind::Cancelled, reason.as_str().to_string())
                }
                Action::Evict {
                    cause,
                    eviction,
                    pod: pod_ref,
                    deadline,
                    ..
                } => {
                    let reason = match cause {
                        Some(c) => c.to_string(),
                        None => "scheduled earlier; the node no longer reports its taints".into(),
                    };
                    // Evictions start through the pacer; one it holds is shown as held.
                    self.pacer.offer(
                        *eviction,
                        pod_ref.node.clone(),
                        *deadline,
                        Due {
                            namespace: pod_ref.namespace.clone(),
                            name: pod_ref.name.clone(),
                            node: node.clone(),
                            eviction: *eviction,
                            reason,
                            since: self.now,
                        },
                    );
                    self.pace();
                    match self.held_reason(*eviction, node.as_deref()) {
                        Some(why) => (Kind::Held, why),
                        None => continue,
                    }
                }
                Action::Skip { .. } => (Kind::Skipped, "pod is already terminating".into()),
            };
            self.timeline.entries.push(Entry {
                at: self.now,
                kind,
                pod,
                node,
                reason,
            });
        }
        self.pace();
    }

    /// Why a due eviction is still held, if it is.
    fn held_reason(&self, id: EvictionId, node: Option<&str>) -> Option<String> {
        if !self.pacer.holds(id) {
            return None;
        }
        let (nodes, tainted) = self.pacer.node_counts();
        if self.pacer.braking() && !node.is_some_and(|n| self.pacer.is_released(n)) {
            Some(format!(
                "mass-eviction brake: {tainted} of {nodes} nodes NoExecute-tainted"
            ))
        } else {
            Some("rate limit".into())
        }
    }

    /// The simulated executor: every eviction succeeds at once and the pod is gone.
    fn evicted(
        &mut self,
        namespace: std::sync::Arc<str>,
        name: std::sync::Arc<str>,
        id: EvictionId,
    ) {
        let report = Report {
            namespace: namespace.clone(),
            name: name.clone(),
            eviction: id,
            outcome: Outcome::Evicted,
        };
        let mut out = Vec::new();
        self.engine.report(&report, self.now, &mut out);
        self.engine
            .delete_pod(&namespace, &name, None, self.now, &mut out);
        self.pods.remove(&(namespace.to_string(), name.to_string()));
        // Neither call produces actions for a pod whose eviction just completed.
        debug_assert!(out.is_empty());
    }

    fn set_node(&mut self, name: &str, taints: Vec<Taint>) {
        let obs = NodeObservation {
            name: name.to_string(),
            taints: taints.clone(),
        };
        self.nodes.insert(name.to_string(), taints);
        let mut out = Vec::new();
        self.engine.upsert_node(&obs, self.now, &mut out);
        self.absorb(out);
    }

    fn tolerations(&self, specs: &[scenario::TolerationSpec]) -> Vec<Toleration> {
        let mut tolerations: Vec<Toleration> = specs.iter().map(scenario::toleration).collect();
        if self.opts.default_tolerations {
            add_default_tolerations(&mut tolerations, 300);
        }
        tolerations
    }

    fn add_pod(&mut self, spec: &PodSpec) {
        self.uids += 1;
        self.timeline.pods_seen += 1;
        let pod = SimPod {
            uid: format!("sim-{}", self.uids),
            node: spec.node_name.clone(),
            tolerations: self.tolerations(&spec.tolerations),
            excluded: self
                .opts
                .policy
                .excludes(&spec.namespace, Some(&spec.labels)),
        };
        self.observe_pod(&spec.namespace, &spec.name, &pod);
        self.pods
            .insert((spec.namespace.clone(), spec.name.clone()), pod);
    }

    fn observe_pod(&mut self, namespace: &str, name: &str, pod: &SimPod) {
        let mut obs = PodObservation::new(namespace, name, &pod.uid, pod.node.as_deref())
            .with_tolerations(pod.tolerations.clone());
        obs.excluded = pod.excluded;
        let mut out = Vec::new();
        self.engine.upsert_pod(obs, self.now, &mut out);
        self.absorb(out);
    }

    fn ignored(&mut self, pod: String, reason: &str) {
        self.timeline.entries.push(Entry {
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

    fn apply(&mut self, change: &Change) {
        match change {
            Change::AddTaint(t) => {
                let mut taints = self.nodes.get(&t.node).cloned().unwrap_or_default();
                let new = scenario::taint(&t.taint, self.now);
                // Like `kubectl taint`: a taint with the same key and effect is replaced.
                taints.retain(|old| !old.matches(&new));
                taints.push(new);
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
                self.timeline
                    .node_labels
                    .insert(n.name.clone(), n.labels.clone());
                let taints = n
                    .taints
                    .iter()
                    .map(|t| scenario::taint(t, self.now))
                    .collect();
                self.set_node(&n.name, taints);
            }
            Change::DeleteNode(n) => {
                self.nodes.remove(&n.name);
                let mut out = Vec::new();
                self.engine.delete_node(&n.name, self.now, &mut out);
                self.absorb(out);
            }
            Change::ReleaseBrake(r) => {
                self.pacer.set_node_released(&r.node, r.release);
                self.pace();
            }
            Change::AddPod(p) => self.add_pod(p),
            Change::UpdatePod(u) => {
                let key = (u.namespace.clone(), u.name.clone());
                let Some(mut pod) = self.pods.remove(&key) else {
                    self.ignored(
                        format!("{}/{}", u.namespace, u.name),
                        "updatePod: the pod was already evicted",
                    );
                    return;
                };
                if let Some(node) = &u.node_name {
                    pod.node = Some(node.clone());
                }
                if let Some(t) = &u.tolerations {
                    pod.tolerations = self.tolerations(t);
                }
                self.observe_pod(&u.namespace, &u.name, &pod);
                self.pods.insert(key, pod);
            }
            Change::DeletePod(k) => {
                if self
                    .pods
                    .remove(&(k.namespace.clone(), k.name.clone()))
                    .is_none()
                {
                    self.ignored(
                        format!("{}/{}", k.namespace, k.name),
                        "deletePod: the pod was already evicted",
                    );
                    return;
                }
                let mut out = Vec::new();
                self.engine
                    .delete_pod(&k.namespace, &k.name, None, self.now, &mut out);
                self.absorb(out);
            }
        }
    }

    fn finish(mut self) -> Timeline {
        self.timeline.end = self.now;
        let mut pending: Vec<(String, Option<String>, Time)> = self
            .engine
            .pending()
            .map(|v| {
                let deadline = v.eviction.map_or(self.now, |e| e.deadline);
                (
                    v.pod.to_string(),
                    v.pod.node.as_deref().map(str::to_string),
                    deadline,
                )
            })
            .collect();
        pending.sort_by(|a, b| (a.2, &a.0).cmp(&(b.2, &b.0)));
        self.timeline.pending = pending;
        self.timeline
    }
}
