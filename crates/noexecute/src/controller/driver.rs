//! The controller loop: a thin driver of the pure [`Pipeline`].
//!
//! It turns watch events, executor reports, leadership changes and the clock into pipeline
//! inputs, and carries the pipeline's effects out: attempts to the executor (each with a
//! cancellation token the pipeline can fire), events to the event sink, gauges to the metrics,
//! decisions to the log. It decides nothing itself. No lock is held across an await: nothing
//! else touches the pipeline.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::watcher;
use noexecute_engine::pace::BrakeChange;
use noexecute_engine::pipeline::{
    AttemptId, AttemptReport, AttemptResult, Effect, ForeignSign, PacedBy, SignKind, Term, Watched,
};
use noexecute_engine::{Action, Pipeline, Time};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::admin::Health;
use super::clock::Clock;
use super::events::EventSink;
use super::events::LEASE_ANNOTATION;
use super::executor::{Control, Executor};
use super::lease::{self, Leadership};
use super::metrics::Metrics;
use super::ratelimit::{Priority, RateLimiter};
use super::watch::{
    ClaimEvent, NodeEvent, PodEvent, RuleEvent, SliceEvent, TAINT_EVENT_REASON, TaintEvent, Watch,
    Watches,
};
use crate::adapters::convert;

/// The heartbeat's period: the loop turns at least this often.
const HEARTBEAT: Duration = Duration::from_secs(5);

pub struct Driver {
    pub pipeline: Pipeline,
    pub policy: crate::adapters::policy::Policy,
    pub clock: Clock,
    pub executor: Executor,
    pub events: EventSink,
    pub metrics: Metrics,
    pub leadership: Leadership,
    pub health: Arc<Health>,
    /// What the brake's events are about (the Lease).
    brake_object: ObjectReference,
    /// The cancel and hold of every attempt started and not yet reported.
    attempts: HashMap<AttemptId, (CancellationToken, CancellationToken)>,
    /// Held while evictions wait for an executor slot: events yield to them.
    limiter: Arc<RateLimiter>,
    backlog: Option<Priority>,
    /// When the pending gauge may be refreshed next, and whether a refresh was skipped.
    gauges_at: Option<std::time::Instant>,
    gauges_stale: bool,
    /// This replica's identity (for `/status`).
    identity: String,
    /// `--node-selector`, to tell a node that left it from one deleted.
    node_selector: Option<crate::adapters::selector::Selector>,
    /// Device taints' `timeAdded` onto the clock, steadily (they are compared for equality).
    device_offset: super::clock::WallOffset,
    /// Writes DeviceTaintRules' status (`--device-taints`), and its failures.
    rule_status: Option<super::rule_status::RuleStatusWriter>,
    rule_failures: Option<mpsc::UnboundedReceiver<(String, noexecute_engine::Uid)>>,
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
        pipeline: Pipeline,
        policy: crate::adapters::policy::Policy,
        clock: Clock,
        executor: Executor,
        events: EventSink,
        metrics: Metrics,
        leadership: Leadership,
        health: Arc<Health>,
        brake_object: ObjectReference,
        limiter: Arc<RateLimiter>,
        identity: String,
        node_selector: Option<crate::adapters::selector::Selector>,
    ) -> Driver {
        Driver {
            pipeline,
            policy,
            clock,
            executor,
            events,
            metrics,
            leadership,
            health,
            brake_object,
            attempts: HashMap::new(),
            limiter,
            backlog: None,
            gauges_at: None,
            gauges_stale: false,
            identity,
            node_selector,
            device_offset: super::clock::WallOffset::default(),
            rule_status: None,
            rule_failures: None,
        }
    }

    /// Write DeviceTaintRules' status with `writer`; its failures come on `failures`.
    pub fn with_rule_status(
        mut self,
        writer: super::rule_status::RuleStatusWriter,
        failures: mpsc::UnboundedReceiver<(String, noexecute_engine::Uid)>,
    ) -> Driver {
        self.rule_status = Some(writer);
        self.rule_failures = Some(failures);
        self
    }

    /// The lease published `state` (after `seen`): hand it over; whether a term was lost.
    fn leadership_changed(&mut self, state: lease::Term, seen: &mut lease::Term) -> bool {
        let lost = state.lost_since(*seen);
        *seen = state;
        self.metrics.leader.set(i64::from(state.leading));
        self.set_term(state);
        lost
    }

    /// Leadership as the lease has it, as a term with a deadline on the pipeline's clock.
    fn set_term(&mut self, state: lease::Term) {
        let term = state.leading.then(|| Term {
            id: state.term,
            until: state.until.map_or(Time::MAX, |u| self.clock.at(u)),
        });
        self.pipeline.set_term(term, self.clock.now());
    }

    /// A pod update carries the taint-manager mark, set at `marked_at` (wall clock).
    fn marked(&mut self, pod: &crate::adapters::slim::SlimPod, marked_at: Time) {
        let sign = ForeignSign {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            kind: SignKind::Mark,
            at: self.clock.from_wall(marked_at),
            lease: None,
            writer: String::new(),
        };
        self.pipeline.foreign_sign(sign, self.clock.now());
    }

    /// A taint eviction controller's Event. Whether it is another's is the pipeline's to say:
    /// noexecute's Events name their Lease, upstream's do not.
    fn taint_event(&mut self, event: TaintEvent) {
        let Watch::Event(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) = event else {
            return;
        };
        let announces = matches!(
            e.reason.as_deref(),
            Some(TAINT_EVENT_REASON | super::watch::DEVICE_EVENT_REASON)
        ) && e
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with("Marking for deletion"));
        if !announces {
            return;
        }
        let (Some(namespace), Some(name)) = (
            e.involved_object.namespace.clone(),
            e.involved_object.name.clone(),
        ) else {
            return;
        };
        let Some(at) = e
            .last_timestamp
            .as_ref()
            .or(e.first_timestamp.as_ref())
            .map(|t| t.0)
            .or(e.event_time.as_ref().map(|t| t.0))
        else {
            return;
        };
        let writer = match (
            e.reporting_component
                .as_deref()
                .or(e.source.as_ref().and_then(|s| s.component.as_deref())),
            e.reporting_instance.as_deref().filter(|i| !i.is_empty()),
        ) {
            (Some(component), Some(instance)) => format!("{component} ({instance})"),
            (Some(component), None) => component.to_string(),
            (None, _) => "another controller".to_string(),
        };
        let lease = e
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LEASE_ANNOTATION))
            .cloned();
        let sign = ForeignSign {
            namespace,
            name,
            kind: SignKind::Announcement,
            at: self.clock.from_wall(Time::from_millis(at.as_millisecond())),
            lease,
            writer,
        };
        self.pipeline.foreign_sign(sign, self.clock.now());
    }

    /// Count a foreign eviction and warn loudly the first time.
    fn foreign(&mut self, pod: &str, evidence: &str, first: bool, refusing: bool) {
        self.metrics.foreign_taint_evictions.inc();
        if refusing {
            self.metrics.refusing.set(1);
        }
        if !first {
            tracing::debug!(%pod, "another taint eviction controller evicted this pod");
            return;
        }
        let message = format!(
            "Another taint eviction controller is active: {evidence}. Turn kube-controller-manager's off with --controllers=*,-taint-eviction-controller{}",
            if refusing {
                "; --refuse-if-foreign: this replica has stopped evicting until it is restarted"
            } else {
                ""
            }
        );
        tracing::error!(%pod, "{message}");
        // Said while leading, in this term (a refusing replica still holds the Lease).
        if let Some(term) = self.pipeline.term() {
            self.events.record_about(
                self.brake_object.clone(),
                noexecute_engine::action::UpstreamEvent {
                    type_: "Warning",
                    reason: "ForeignTaintEviction",
                    message,
                },
                term.id,
            );
        }
    }

    /// Run until shutdown, lost leadership or the end of the watches. Before returning, every
    /// attempt in flight has been told to stop; the caller waits for them
    /// ([`Executor::drain`]) before releasing the lease.
    pub async fn run(
        mut self,
        watches: Watches,
        mut report_rx: mpsc::UnboundedReceiver<AttemptReport>,
        mut status_rx: mpsc::Receiver<super::admin::StatusRequest>,
        shutdown: CancellationToken,
    ) -> Stop {
        let Watches {
            nodes: mut node_rx,
            pods: mut pod_rx,
            taint_events: mut event_rx,
            devices,
        } = watches;
        let mut rule_failures = self.rule_failures.take();
        let (mut slice_rx, mut claim_rx, mut rule_rx) = match devices {
            Some(d) => (Some(d.slices), Some(d.claims), d.rules),
            None => (None, None, None),
        };
        if self.pipeline.config().device_taints && rule_rx.is_none() {
            // Not served: no rules, as upstream's controller has none then.
            let now = self.clock.now();
            self.pipeline.listing_started(Watched::Rules);
            self.pipeline.listing_done(Watched::Rules, now);
        }
        let mut leadership = self.leadership.clone();
        let mut seen = leadership.current();
        self.set_term(seen);
        self.metrics.leader.set(i64::from(seen.leading));
        let stop = loop {
            // A renewal (or a loss) the lease has already published goes in before the
            // clock: a term renewed just before its deadline is not ended by this turn's tick.
            if let Some(state) = leadership.poll_change()
                && self.leadership_changed(state, &mut seen)
            {
                break Stop::LostLeadership;
            }
            // Deadlines that are due go first, a batch a turn (`Pipeline::tick`), whatever
            // waits in the channels: a stream of reports cannot hold them back.
            if self
                .pipeline
                .next_wake()
                .is_some_and(|due| due <= self.clock.now())
            {
                self.pipeline.tick(self.clock.now());
            }
            self.carry_out();
            let now = self.clock.now();
            self.health.beat(std::time::Instant::now());
            let heartbeat = match self.gauges_at {
                Some(at) if self.gauges_stale => at,
                _ => std::time::Instant::now() + HEARTBEAT,
            };
            let wake = self
                .pipeline
                .next_wake()
                .map_or(heartbeat, |d| self.clock.instant(d.max(now)).min(heartbeat));
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break Stop::Shutdown,
                state = leadership.changed() => {
                    if self.leadership_changed(state, &mut seen) {
                        break Stop::LostLeadership;
                    }
                }
                // Nodes before pods, as upstream's workers drain node updates first.
                event = node_rx.recv() => match event {
                    Some(event) => self.node_event(event),
                    None => break Stop::WatchesEnded,
                },
                event = pod_rx.recv() => match event {
                    Some(event) => self.pod_event(event),
                    None => break Stop::WatchesEnded,
                },
                event = recv(&mut slice_rx) => match event {
                    Some(event) => self.slice_event(event),
                    None => break Stop::WatchesEnded,
                },
                event = recv(&mut claim_rx) => match event {
                    Some(event) => self.claim_event(event),
                    None => break Stop::WatchesEnded,
                },
                event = recv(&mut rule_rx) => match event {
                    Some(event) => self.rule_event(event),
                    None => break Stop::WatchesEnded,
                },
                Some((rule, uid)) = recv_unbounded(&mut rule_failures) => {
                    self.pipeline.rule_status_failed(&rule, &uid, self.clock.now());
                }
                // The guard's watch: its end stops nothing.
                Some(event) = event_rx.recv() => self.taint_event(event),
                Some(report) = report_rx.recv() => {
                    self.attempts.remove(&report.attempt);
                    let stale = report.result == AttemptResult::Stale;
                    let failed = matches!(report.result, AttemptResult::Failed { .. });
                    let live = self.pipeline.report(report, self.clock.now());
                    // An attempt the pipeline had cancelled is neither retried nor avoided.
                    if live && stale {
                        self.metrics.stale_evictions_avoided.inc();
                    }
                    if live && failed {
                        self.metrics.eviction_retries.inc();
                    }
                }
                Some(request) = status_rx.recv() => {
                    // A caller that gave up costs nothing.
                    if !request.reply.is_closed() {
                        let status = super::status::of(
                            &self.pipeline,
                            &self.identity,
                            request.namespace.as_deref(),
                            request.limit,
                            self.clock.now(),
                        );
                        let _ = request.reply.send(status);
                    }
                }
                _ = tokio::time::sleep_until(wake.into()) => {
                    self.pipeline.tick(self.clock.now());
                }
            }
        };
        // Stop acting: every attempt in flight is told to stop before the caller drains them.
        self.pipeline.shutdown();
        self.carry_out();
        stop
    }

    fn node_event(&mut self, event: NodeEvent) {
        let now = self.clock.now();
        let event = match event {
            Watch::Event(event) => event,
            Watch::Failed => return self.pipeline.watch_failed(Watched::Nodes),
        };
        match event {
            watcher::Event::Init => self.pipeline.listing_started(Watched::Nodes),
            watcher::Event::InitApply(node) | watcher::Event::Apply(node) => {
                // With `--node-selector` the watch has every node and the selector is applied
                // here, so a node relabelled out of it arrives as an update (a selecting watch
                // would say "deleted", with the old labels, as for a real deletion).
                let ours = self.node_selector.as_ref().is_none_or(|s| {
                    s.matches(node.metadata.labels.as_ref().unwrap_or(&Default::default()))
                });
                if !ours {
                    let name = node.metadata.name.as_deref().unwrap_or_default();
                    if self.pipeline.knows_node(name) {
                        tracing::info!(node = %name, "node no longer matches --node-selector: its pods' evictions are another's now");
                        self.pipeline.node_left(name, now);
                    }
                    return;
                }
                let mut obs = convert::node(&node);
                for taint in &mut obs.taints {
                    taint.time_added = taint.time_added.map(|t| self.clock.from_wall(t));
                }
                let release = crate::adapters::policy::release_annotated(&node.metadata);
                self.pipeline.upsert_node(&obs, release, now);
            }
            watcher::Event::Delete(node) => {
                let name = node.metadata.name.unwrap_or_default();
                self.pipeline.delete_node(&name, now);
            }
            watcher::Event::InitDone => self.pipeline.listing_done(Watched::Nodes, now),
        }
    }

    fn pod_event(&mut self, event: PodEvent) {
        let now = self.clock.now();
        let event = match event {
            Watch::Event(event) => event,
            Watch::Failed => return self.pipeline.watch_failed(Watched::Pods),
        };
        match event {
            watcher::Event::Init => self.pipeline.listing_started(Watched::Pods),
            watcher::Event::InitApply(pod) | watcher::Event::Apply(pod) => {
                if let Some(at) = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.taint_disruption.as_ref())
                {
                    self.marked(&pod, Time::from_millis(at.0.as_millisecond()));
                }
                let mut obs = convert::pod(&pod);
                obs.excluded = self
                    .policy
                    .excludes(&obs.namespace, pod.metadata.labels.as_ref());
                self.pipeline.upsert_pod(obs, now);
            }
            watcher::Event::Delete(pod) => {
                let obs = convert::pod(&pod);
                self.pipeline
                    .delete_pod(&obs.namespace, &obs.name, Some(&obs.uid), now);
            }
            watcher::Event::InitDone => self.pipeline.listing_done(Watched::Pods, now),
        }
    }

    /// A device taint's `timeAdded` (wall clock) onto the pipeline's clock.
    fn device_taint(&mut self, taint: &mut noexecute_engine::Taint) {
        if let Some(wall) = taint.time_added {
            taint.time_added = Some(self.device_offset.from_wall(&self.clock, wall));
        }
    }

    fn slice_event(&mut self, event: SliceEvent) {
        let now = self.clock.now();
        let event = match event {
            Watch::Event(event) => event,
            Watch::Failed => return self.pipeline.watch_failed(Watched::Slices),
        };
        match event {
            watcher::Event::Init => self.pipeline.listing_started(Watched::Slices),
            watcher::Event::InitApply(slice) | watcher::Event::Apply(slice) => {
                let mut slice = slice.observe();
                for device in &mut slice.devices {
                    for taint in &mut device.taints {
                        self.device_taint(taint);
                    }
                }
                self.pipeline.upsert_slice(slice, now);
            }
            watcher::Event::Delete(slice) => self.pipeline.delete_slice(&slice.metadata.name, now),
            watcher::Event::InitDone => self.pipeline.listing_done(Watched::Slices, now),
        }
    }

    fn claim_event(&mut self, event: ClaimEvent) {
        let now = self.clock.now();
        let event = match event {
            Watch::Event(event) => event,
            Watch::Failed => return self.pipeline.watch_failed(Watched::Claims),
        };
        match event {
            watcher::Event::Init => self.pipeline.listing_started(Watched::Claims),
            watcher::Event::InitApply(claim) | watcher::Event::Apply(claim) => {
                self.pipeline.upsert_claim(claim.observe(), now);
            }
            watcher::Event::Delete(claim) => {
                let m = &claim.metadata;
                self.pipeline.delete_claim(&m.namespace, &m.name, now);
            }
            watcher::Event::InitDone => self.pipeline.listing_done(Watched::Claims, now),
        }
    }

    fn rule_event(&mut self, event: RuleEvent) {
        let now = self.clock.now();
        let event = match event {
            Watch::Event(event) => event,
            Watch::Failed => return self.pipeline.watch_failed(Watched::Rules),
        };
        match event {
            watcher::Event::Init => self.pipeline.listing_started(Watched::Rules),
            watcher::Event::InitApply(wire) | watcher::Event::Apply(wire) => {
                let mut rule = wire.observe();
                self.device_taint(&mut rule.taint);
                let (generation, condition) = wire.status();
                let condition = condition.map(|c| noexecute_engine::pipeline::WrittenCondition {
                    status: c.status,
                    reason: c.reason,
                    message: c.message,
                    observed_generation: c.observed_generation,
                    last_transition: self.device_offset.from_wall(&self.clock, c.last_transition),
                });
                let status = noexecute_engine::pipeline::RuleStatus {
                    generation,
                    condition,
                };
                self.pipeline.upsert_rule(rule, status, now);
            }
            watcher::Event::Delete(rule) => self.pipeline.delete_rule(&rule.metadata.name, now),
            watcher::Event::InitDone => self.pipeline.listing_done(Watched::Rules, now),
        }
    }

    /// Carry out every effect the pipeline has, then refresh the gauges.
    fn carry_out(&mut self) {
        while let Some(effect) = self.pipeline.poll_effect() {
            self.effect(effect);
        }
        if self.pipeline.backlog() {
            if self.backlog.is_none() {
                self.backlog = Some(self.limiter.priority());
            }
        } else {
            self.backlog = None;
        }
        self.health
            .synced
            .store(self.pipeline.synced(), std::sync::atomic::Ordering::Relaxed);
        self.metrics
            .scheduled_evictions
            .set(self.pipeline.scheduled() as i64);
        self.metrics
            .paced_evictions
            .set(self.pipeline.paced() as i64);
        self.metrics
            .brake_engaged
            .set(i64::from(self.pipeline.braking()));
        // The pending gauge costs a pass over the due evictions: at most four times a second,
        // and the loop wakes for a refresh it skipped.
        let now = std::time::Instant::now();
        match self.gauges_at {
            Some(at) if now < at => self.gauges_stale = true,
            _ => {
                self.gauges_at = Some(now + Duration::from_millis(250));
                self.gauges_stale = false;
                self.metrics
                    .pending_evictions
                    .set(self.pipeline.pending() as i64);
            }
        }
    }

    fn effect(&mut self, effect: Effect) {
        match effect {
            Effect::Start(attempt) => {
                let cancel = CancellationToken::new();
                let hold = cancel.child_token();
                self.attempts
                    .insert(attempt.id, (cancel.clone(), hold.clone()));
                self.executor.start(attempt, Control::new(cancel, hold));
            }
            Effect::Cancel(id) => {
                if let Some((cancel, _)) = self.attempts.get(&id) {
                    cancel.cancel();
                }
            }
            Effect::Hold(id) => {
                if let Some((_, hold)) = self.attempts.get(&id) {
                    hold.cancel();
                }
            }
            Effect::PodEvent {
                pod,
                mut event,
                term,
            } => {
                if self.pipeline.config().dry_run {
                    event.message = format!("[dry-run] {}", event.message);
                }
                self.events.record(&pod, event, term);
            }
            Effect::ControllerEvent { event, term } => {
                self.events
                    .record_about(self.brake_object.clone(), event, term);
            }
            Effect::TermExpired { term } => {
                tracing::warn!(
                    term,
                    "the term of leadership passed its deadline unrenewed: stopped acting"
                );
            }
            Effect::Foreign {
                pod,
                evidence,
                first,
                refusing,
            } => self.foreign(&pod, &evidence, first, refusing),
            Effect::Decided(action) => log_decision(&action),
            Effect::Paced { pod, by, .. } => match by {
                PacedBy::Brake {
                    tainted,
                    nodes,
                    devices: (devices, tainted_devices),
                } => {
                    tracing::info!(pod = %pod, tainted, nodes, devices, tainted_devices, "due eviction held by the mass-eviction brake")
                }
                PacedBy::RateLimit => {
                    tracing::debug!(pod = %pod, "due eviction held by the rate limits")
                }
            },
            Effect::Brake(change) => {
                let threshold = self.pipeline.brake_threshold();
                let held = self.pipeline.paced();
                match change {
                    BrakeChange::Engaged {
                        tainted,
                        nodes,
                        devices: (devices, tainted_devices),
                    } => {
                        self.metrics.brake_engagements.inc();
                        tracing::warn!(
                            tainted,
                            nodes,
                            devices,
                            tainted_devices,
                            threshold_percent = threshold,
                            held,
                            released = self.pipeline.config().release_brake,
                            "mass-eviction brake engaged: evictions paused"
                        );
                    }
                    BrakeChange::Released {
                        tainted,
                        nodes,
                        devices: (devices, tainted_devices),
                    } => {
                        tracing::info!(
                            tainted,
                            nodes,
                            devices,
                            tainted_devices,
                            threshold_percent = threshold,
                            held,
                            "mass-eviction brake let go: evictions resume"
                        );
                    }
                }
            }
            Effect::NodeRelease { node, released } => {
                tracing::warn!(
                    node,
                    annotation = crate::adapters::policy::RELEASE_ANNOTATION,
                    release = released,
                    "mass-eviction brake: node {}",
                    if released { "released" } else { "held again" }
                );
            }
            Effect::Unparked { count } => {
                tracing::info!(count, "acting on evictions decided while not leading");
            }
            Effect::Synced { what, removed } => {
                let what = what.as_str();
                tracing::info!(removed, pods = self.pipeline.pod_count(), "{what} synced");
            }
            Effect::Device(action) => log_device_decision(&action),
            Effect::RuleStatus(write) => match &self.rule_status {
                Some(writer) => writer.write(write),
                None => {
                    tracing::debug!(rule = %write.rule, "no writer for a DeviceTaintRule's status")
                }
            },
        }
    }
}

/// The next event of a watch that may not run (it never comes then).
async fn recv<T>(rx: &mut Option<mpsc::Receiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// [`recv`] for an unbounded channel.
async fn recv_unbounded<T>(rx: &mut Option<mpsc::UnboundedReceiver<T>>) -> Option<T> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

fn log_device_decision(action: &noexecute_engine::device::DeviceAction) {
    use noexecute_engine::device::DeviceAction;
    match action {
        DeviceAction::Evict { pod, eviction } => {
            let reasons: Vec<String> = eviction.reasons.iter().map(|r| r.to_string()).collect();
            tracing::info!(pod = %pod, uid = %pod.uid, at = %crate::adapters::time::timestamp(eviction.at), reasons = %reasons.join(", "), "device eviction scheduled");
        }
        DeviceAction::Cancel { pod, .. } => {
            tracing::info!(pod = %pod, uid = %pod.uid, "device eviction cancelled");
        }
    }
}

fn log_decision(action: &Action) {
    match action {
        Action::Schedule {
            pod,
            deadline,
            cause,
            ..
        } => {
            tracing::info!(pod = %pod, node = ?pod.node, deadline = %crate::adapters::time::timestamp(*deadline), %cause, "eviction scheduled");
        }
        Action::Cancel { pod, reason, .. } => {
            tracing::info!(pod = %pod, reason = reason.as_str(), "eviction cancelled");
        }
        Action::Evict {
            pod, retry, cause, ..
        } => {
            if !retry {
                let cause = cause.as_ref().map(|c| c.to_string()).unwrap_or_default();
                tracing::info!(pod = %pod, node = ?pod.node, %cause, "evicting");
            }
        }
        Action::Skip { pod, .. } => {
            tracing::info!(pod = %pod, "already terminating; not deleting again");
        }
    }
}
