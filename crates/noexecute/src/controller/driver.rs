//! The controller loop: the single owner of the engine.
//!
//! It takes watch events, the executor's reports and the clock, feeds them to the engine one
//! at a time, and carries the resulting actions out: evictions to the executor, upstream's
//! events to the event sink, gauges to the metrics. No lock is ever held across an await,
//! because nothing else touches the engine.
//!
//! Evictions are only handed to the executor while this replica may act (caches synced and
//! leading). Until then they are parked; the engine still runs, so a standby that takes over
//! knows every deadline already. While it may act, due evictions pass through the pacer (the
//! opt-in rate limits and mass-eviction brake), which decides when each may start.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::watcher;
use noexecute_engine::action::UpstreamEvent;
use noexecute_engine::pace::{BrakeChange, Pacer};
use noexecute_engine::{Action, Engine, EvictionId, Report};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::admin::Health;
use super::clock::Clock;
use super::events::EventSink;
use super::executor::{Executor, Job};
use super::lease::Leadership;
use super::metrics::Metrics;
use super::watch::{NodeEvent, PodEvent};
use crate::convert;

/// How a relist is reconciled: objects not seen between `Init` and `InitDone` were deleted
/// while we were not watching.
#[derive(Default)]
struct Relist<K> {
    listing: bool,
    seen: HashSet<K>,
    done_once: bool,
}

impl<K: std::hash::Hash + Eq> Relist<K> {
    fn start(&mut self) {
        self.listing = true;
        self.seen.clear();
    }
    fn saw(&mut self, key: K) {
        if self.listing {
            self.seen.insert(key);
        }
    }
}

pub struct Driver {
    pub engine: Engine,
    pub policy: crate::policy::Policy,
    pub clock: Clock,
    pub executor: Executor,
    pub events: EventSink,
    pub metrics: Metrics,
    pub leadership: Leadership,
    pub health: Arc<Health>,
    /// Evictions decided while this replica may not act, with their upstream event.
    parked: HashMap<EvictionId, (Job, Option<UpstreamEvent>)>,
    /// Due evictions waiting for the rate limits or the brake, with their upstream event
    /// (recorded when the eviction starts).
    pacer: Pacer<(Job, Option<UpstreamEvent>)>,
    /// What the brake events are about (the Lease).
    brake_object: ObjectReference,
    /// The brake state last announced with an event.
    brake_announced: bool,
    in_flight: HashSet<EvictionId>,
    /// The actions being dispatched follow a pod event (not a node event or a deadline).
    pod_triggered: bool,
    nodes: Relist<String>,
    pods: Relist<(String, String)>,
}

/// Why the loop stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    Shutdown,
    LostLeadership,
    WatchesEnded,
}

impl Driver {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        engine: Engine,
        policy: crate::policy::Policy,
        clock: Clock,
        executor: Executor,
        events: EventSink,
        metrics: Metrics,
        leadership: Leadership,
        health: Arc<Health>,
        brake_object: ObjectReference,
    ) -> Driver {
        let mut pacer = Pacer::new(policy.pace);
        pacer.set_release_all(policy.release_brake);
        Driver {
            engine,
            policy,
            clock,
            executor,
            events,
            metrics,
            leadership,
            health,
            parked: HashMap::new(),
            pacer,
            brake_object,
            brake_announced: false,
            in_flight: HashSet::new(),
            pod_triggered: false,
            nodes: Relist::default(),
            pods: Relist::default(),
        }
    }

    fn synced(&self) -> bool {
        self.nodes.done_once && self.pods.done_once
    }

    fn may_act(&self) -> bool {
        self.synced() && self.leadership.is_leading()
    }

    pub async fn run(
        mut self,
        mut node_rx: mpsc::Receiver<NodeEvent>,
        mut pod_rx: mpsc::Receiver<PodEvent>,
        mut report_rx: mpsc::UnboundedReceiver<Report>,
        shutdown: CancellationToken,
    ) -> Stop {
        let mut leadership = self.leadership.clone();
        let mut was_leading = leadership.is_leading();
        let mut out = Vec::new();
        loop {
            let now = self.clock.now();
            self.health
                .heartbeat_ms
                .store(now.as_millis(), Ordering::Relaxed);
            // Wake for the next deadline, and at least every few seconds for the heartbeat.
            let pace_wake = self.pacer.next_release().filter(|_| self.may_act());
            let wake = self
                .engine
                .next_deadline()
                .into_iter()
                .chain(pace_wake)
                .min()
                .map(|d| self.clock.instant(d.max(now)))
                .unwrap_or_else(|| std::time::Instant::now() + Duration::from_secs(5))
                .min(std::time::Instant::now() + Duration::from_secs(5));
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return Stop::Shutdown,
                leading = leadership.changed() => {
                    if was_leading && !leading {
                        return Stop::LostLeadership;
                    }
                    was_leading = leading;
                    self.metrics.leader.set(i64::from(leading));
                }
                // Nodes before pods, as upstream's workers drain node updates first.
                event = node_rx.recv() => match event {
                    Some(event) => {
                        self.engine.advance(self.clock.now(), &mut out);
                        self.node_event(event, &mut out);
                    }
                    None => return Stop::WatchesEnded,
                },
                event = pod_rx.recv() => match event {
                    Some(event) => {
                        self.engine.advance(self.clock.now(), &mut out);
                        self.pod_event(event, &mut out);
                        self.pod_triggered = true;
                    }
                    None => return Stop::WatchesEnded,
                },
                Some(report) = report_rx.recv() => {
                    let now = self.clock.now();
                    self.in_flight.remove(&report.eviction);
                    self.engine.advance(now, &mut out);
                    self.engine.report(&report, now, &mut out);
                }
                _ = tokio::time::sleep_until(wake.into()) => {
                    self.engine.advance(self.clock.now(), &mut out);
                }
            }
            self.dispatch(&mut out);
            self.pod_triggered = false;
            if self.may_act() && !self.parked.is_empty() {
                self.release_parked();
            }
            self.pace();
            self.health.synced.store(self.synced(), Ordering::Relaxed);
            self.metrics
                .scheduled_evictions
                .set(self.engine.queued_count() as i64);
            self.metrics.paced_evictions.set(self.pacer.len() as i64);
            self.metrics.pending_evictions.set(
                (self.engine.queued_count()
                    + self.in_flight.len()
                    + self.parked.len()
                    + self.pacer.len()) as i64,
            );
        }
    }

    fn node_event(&mut self, event: NodeEvent, out: &mut Vec<noexecute_engine::Action>) {
        let now = self.clock.now();
        match event {
            watcher::Event::Init => self.nodes.start(),
            watcher::Event::InitApply(node) | watcher::Event::Apply(node) => {
                let obs = convert::node(&node);
                self.nodes.saw(obs.name.clone());
                self.engine.upsert_node(&obs, now, out);
                let release = crate::policy::release_annotated(&node.metadata);
                self.release_node(&obs.name, release);
            }
            watcher::Event::Delete(node) => {
                let name = node.metadata.name.unwrap_or_default();
                self.engine.delete_node(&name, now, out);
                self.release_node(&name, false);
            }
            watcher::Event::InitDone => {
                if self.nodes.done_once {
                    // A relist: forget the nodes that went away meanwhile.
                    let gone: Vec<String> = self
                        .engine
                        .node_names()
                        .filter(|n| !self.nodes.seen.contains(*n))
                        .map(str::to_string)
                        .collect();
                    for name in gone {
                        self.engine.delete_node(&name, now, out);
                        self.release_node(&name, false);
                    }
                }
                self.nodes.listing = false;
                self.nodes.done_once = true;
                tracing::info!("nodes synced");
            }
        }
    }

    fn pod_event(&mut self, event: PodEvent, out: &mut Vec<noexecute_engine::Action>) {
        let now = self.clock.now();
        match event {
            watcher::Event::Init => self.pods.start(),
            watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) => {
                let mut obs = convert::pod(&pod);
                obs.excluded = self
                    .policy
                    .excludes(&obs.namespace, pod.metadata.labels.as_ref());
                self.pods.saw((obs.namespace.clone(), obs.name.clone()));
                self.engine.upsert_pod(obs, now, out);
            }
            watcher::Event::Delete(pod) => {
                let obs = convert::pod(&pod);
                self.engine
                    .delete_pod(&obs.namespace, &obs.name, Some(&obs.uid), now, out);
            }
            watcher::Event::InitDone => {
                if self.pods.done_once {
                    let gone: Vec<(String, String)> = self
                        .engine
                        .pods()
                        .map(|v| (v.pod.namespace.to_string(), v.pod.name.to_string()))
                        .filter(|k| !self.pods.seen.contains(k))
                        .collect();
                    for (ns, name) in gone {
                        self.engine.delete_pod(&ns, &name, None, now, out);
                    }
                }
                self.pods.listing = false;
                self.pods.seen = HashSet::new();
                self.pods.done_once = true;
                tracing::info!(pods = self.engine.pod_count(), "pods synced");
            }
        }
    }

    /// Carry out the engine's actions.
    fn dispatch(&mut self, out: &mut Vec<Action>) {
        let may_act = self.may_act();
        for action in out.drain(..) {
            // Only the replica that acts records events: a standby would duplicate them.
            let event = action.upstream_event().map(|mut e| {
                if self.policy.dry_run {
                    e.message = format!("[dry-run] {}", e.message);
                }
                e
            });
            // An eviction's event is recorded when it starts (after pacing).
            if may_act
                && !matches!(action, Action::Evict { .. })
                && let Some(event) = &event
            {
                self.events.record(action.pod(), event.clone());
            }
            match action {
                Action::Schedule {
                    pod,
                    deadline,
                    cause,
                    ..
                } => {
                    tracing::info!(pod = %pod, node = ?pod.node, deadline = %crate::plan::timestamp(deadline), %cause, "eviction scheduled");
                }
                Action::Cancel {
                    pod,
                    eviction,
                    reason,
                    ..
                } => {
                    self.parked.remove(&eviction);
                    self.pacer.cancel(eviction);
                    self.executor.forget(eviction);
                    tracing::info!(pod = %pod, reason = reason.as_str(), "eviction cancelled");
                }
                Action::Evict {
                    pod,
                    eviction,
                    deadline,
                    retry,
                    cause,
                } => {
                    if !retry {
                        let cause = cause.as_ref().map(|c| c.to_string()).unwrap_or_default();
                        tracing::info!(pod = %pod, node = ?pod.node, %cause, "evicting");
                    }
                    // The stale-cache guard is for decisions a pod event triggered: a pod
                    // bound to a node whose untaint the node watch has not delivered yet
                    // (kubernetes/kubernetes#119862). A decision a node event triggered is
                    // as fresh as that event, and re-reading the node would only cost requests
                    // (one per node in a mass taint).
                    let immediate = self.pod_triggered
                        && matches!(
                            cause.as_ref().map(|c| c.verdict),
                            Some(noexecute_engine::Verdict::Untolerated { .. })
                                | Some(noexecute_engine::Verdict::Tolerated {
                                    time: noexecute_engine::TolerationTime::Immediate,
                                    ..
                                })
                        );
                    let generation = self
                        .engine
                        .pod_view(&pod.namespace, &pod.name)
                        .map_or(0, |v| v.generation);
                    let job = Job {
                        pod,
                        eviction,
                        deadline,
                        immediate,
                        generation,
                    };
                    if !may_act {
                        self.parked.insert(eviction, (job, event));
                    } else if retry {
                        // A retry already started once: pacing it again would only delay it.
                        self.in_flight.insert(eviction);
                        self.executor.submit(job);
                    } else {
                        let node = job.pod.node.clone();
                        self.pacer.offer(eviction, node, deadline, (job, event));
                    }
                }
                Action::Skip { pod, .. } => {
                    tracing::info!(pod = %pod, "already terminating; not deleting again");
                }
            }
        }
    }

    fn release_parked(&mut self) {
        tracing::info!(
            count = self.parked.len(),
            "acting on evictions decided while not leading"
        );
        for (eviction, (job, event)) in self.parked.drain() {
            let (node, deadline) = (job.pod.node.clone(), job.deadline);
            self.pacer.offer(eviction, node, deadline, (job, event));
        }
    }

    /// A node's release annotation, as last seen.
    fn release_node(&mut self, name: &str, release: bool) {
        if self.pacer.config().brake.is_none() || self.pacer.is_released(name) == release {
            return;
        }
        self.pacer.set_node_released(name, release);
        if self.pacer.braking() {
            tracing::warn!(
                node = name,
                annotation = crate::policy::RELEASE_ANNOTATION,
                release,
                "mass-eviction brake: node {}",
                if release { "released" } else { "held again" }
            );
        }
    }

    /// Update the brake from the node counts and start what the pacer lets go.
    fn pace(&mut self) {
        let (nodes, tainted) = self.engine.node_counts();
        if let Some(change) = self.pacer.set_node_counts(nodes, tainted) {
            let threshold = self.pacer.brake_threshold();
            match change {
                BrakeChange::Engaged { tainted, nodes } => {
                    self.metrics.brake_engagements.inc();
                    tracing::warn!(
                        tainted,
                        nodes,
                        threshold_percent = threshold,
                        held = self.pacer.len(),
                        released = self.policy.release_brake,
                        "mass-eviction brake engaged: evictions paused"
                    );
                }
                BrakeChange::Released { tainted, nodes } => {
                    tracing::info!(
                        tainted,
                        nodes,
                        threshold_percent = threshold,
                        held = self.pacer.len(),
                        "mass-eviction brake let go: evictions resume"
                    );
                }
            }
        }
        let braking = self.pacer.braking();
        self.metrics.brake_engaged.set(i64::from(braking));
        if !self.may_act() {
            return;
        }
        if braking != self.brake_announced {
            self.brake_announced = braking;
            self.events
                .record_about(self.brake_object.clone(), self.brake_event(braking));
        }
        let mut started = Vec::new();
        self.pacer.release(self.clock.now(), &mut started);
        for (job, event) in started {
            if let Some(event) = event {
                self.events.record(&job.pod, event);
            }
            self.in_flight.insert(job.eviction);
            self.executor.submit(job);
        }
    }

    fn brake_event(&self, braking: bool) -> UpstreamEvent {
        let (nodes, tainted) = self.pacer.node_counts();
        let share = self.pacer.tainted_percent();
        let threshold = self.pacer.brake_threshold();
        if braking {
            let how = if self.policy.release_brake {
                "released by --release-brake: evictions continue".to_string()
            } else {
                format!(
                    "evictions are paused ({} held); release nodes with the annotation {}=true, or restart with --release-brake",
                    self.pacer.len(),
                    crate::policy::RELEASE_ANNOTATION
                )
            };
            UpstreamEvent {
                type_: "Warning",
                reason: "EvictionBrakeEngaged",
                message: format!(
                    "{tainted} of {nodes} nodes ({share:.1}%) carry NoExecute taints, more than the brake threshold of {threshold}%: {how}"
                ),
            }
        } else {
            UpstreamEvent {
                type_: "Normal",
                reason: "EvictionBrakeReleased",
                message: format!(
                    "{tainted} of {nodes} nodes ({share:.1}%) carry NoExecute taints, within the brake threshold of {threshold}%: evictions resume"
                ),
            }
        }
    }
}
