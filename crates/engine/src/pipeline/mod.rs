//! The pure controller core: everything between the engine's decision and an API request.
//!
//! The [`Engine`] decides *whether* and *when* a pod is evicted. The [`Pipeline`] owns the
//! engine and carries each due eviction the rest of the way, the same for `run`, `simulate`,
//! `plan` and the tests, and it owns every rule that decides whether a request may go:
//!
//! ```text
//!  observations ─┐                                          ┌─► Effect::Start(Attempt)
//!  reports ──────┤                                          ├─► Effect::Hold / Cancel
//!  term (lease) ─┼─► Engine ─► due ─► parked ─► Pacer ─► queue ─► in flight ─► reports
//!  foreign signs ┤            (no term,    (rate limits, (fair:    (≤ concurrency,
//!  tick(now) ────┘             refusing)    brake)        fresh and  one per pod)
//!                                                         retries)
//!                          the brake holds the queue and unwritten attempts too
//! ```
//!
//! It is sans-I/O in the manner of quinn-proto: inputs are method calls that take `now`;
//! outputs are [`Effect`]s, taken with [`Pipeline::poll_effect`], and [`Pipeline::next_wake`],
//! when the driver must call [`Pipeline::tick`] at the latest. It reads no clock, performs no
//! I/O and holds no task; jitter comes from a seeded generator.
//!
//! The rules it owns, each in one place:
//! - **Acting** ([`Pipeline::may_act`]): synced, in a [`Term`] of leadership whose deadline has
//!   not passed, and not refusing because another taint eviction controller was seen. A term
//!   ends at its deadline even if no one says so: the pipeline wakes for it, stops every
//!   attempt and parks the rest. Every attempt and event names its term, and the shell's fence
//!   lets it write only while that term lasts.
//! - **The brake** ([`Pacer::brake_holds`]): nothing starts on a node it holds, from the pacer
//!   or from the queue, and an attempt that has not yet written is held back
//!   ([`Effect::Hold`]).
//! - **The stale-cache guard**: which attempts re-read the node ([`StaleGuard`], the engine's
//!   verdict) and what a stale answer means (`Outcome::Stale`, knowing whether the cache
//!   moved under the attempt).
//! - **The second-controller guard** ([`ForeignSign`] in, [`Effect::Foreign`] out).
//!
//! What it guarantees, and `tests/pipeline.rs` checks over a million random steps:
//! - no attempt starts for an eviction the engine cancelled, and every attempt in flight for
//!   one is told to stop ([`Effect::Cancel`]), so it sends no further request;
//! - at most one attempt per pod is in flight, a cancelled one included, until it reports;
//! - nothing starts while the brake holds its node, and nothing starts outside a term;
//! - no eviction is lost: parking, pacing, queueing, leadership changes and cancelled attempts
//!   all keep it until the engine drops it or an attempt concludes it;
//! - what it holds is bounded by the pending evictions and the executor's concurrency.

mod attempt;
mod countdown;
mod devices;
mod foreign;
mod queue;
mod rules;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

pub use attempt::{
    Attempt, AttemptId, AttemptReport, AttemptResult, Backoff, EvictionMode, Finish, GoneReason,
    Plan, StaleGuard,
};
pub use countdown::{Countdown, Countdowns, Held};
pub use devices::is_device;
pub use foreign::{DEPARTED_MAX, DEPARTED_MS, ForeignSign, HANDOVER_MS, SignKind};
pub use rules::{RULE_STATUS_PERIOD, RuleStatus, RuleWrite, WrittenCondition};

use crate::action::{Action, Cause, PodRef, SkipReason, UpstreamEvent};
use crate::device::{self, Claim, DeviceAction, DeviceEviction, DevicePod, Devices, Rule, Slice};
use crate::engine::{Config, Engine, PodView, Stage};
use crate::observe::{EvictionId, NodeObservation, Outcome, PodObservation, Report, Uid};
use crate::pace::{BrakeChange, PaceConfig, Pacer};
use crate::time::Time;
use devices::DeviceEvictions;
use foreign::{Finding, Guard};
use queue::{Place, Queue};
use rules::RuleStatuses;

/// What the pipeline needs beyond the engine's own [`Config`].
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineConfig {
    pub engine: Config,
    pub pace: PaceConfig,
    /// `--release-brake`: the brake is computed and reported but holds nothing.
    pub release_brake: bool,
    /// Attempts the executor carries out at once; more wait in the pipeline's queue, where a
    /// cancel simply removes them.
    pub concurrency: usize,
    pub mode: EvictionMode,
    /// With `EvictionMode::Evict`: refused evictions fall back to a DELETE once they have
    /// been refused for this long.
    pub pdb_timeout: Option<Duration>,
    /// Decide and report, but change nothing.
    pub dry_run: bool,
    /// Re-read the node before an eviction a pod event decided was due at once.
    pub stale_cache_guard: bool,
    pub backoff: Backoff,
    /// Seed of the jitter generator (the live controller seeds it randomly).
    pub seed: u64,
    /// Deadlines one tick fires at most ([`TICK_BATCH`]).
    pub tick_batch: usize,
    /// Our Lease (`namespace/name`): every replica of ours names it in its Events, so a sign
    /// that names it is never foreign.
    pub lease: Option<String>,
    /// Stop acting (until restarted) once another taint eviction controller is seen.
    pub refuse_if_foreign: bool,
    /// `--handover-delay`: while upstream's controller may still be running (the switch to
    /// noexecute, or back), start each eviction this long after it fell due, reading the pod
    /// first, so that whichever controller still runs evicts it, and only once.
    pub handover: Option<Duration>,
    /// `--device-taints`: evict for DRA device taints too (`docs/parity.md` §22). Acting then
    /// waits for the slice, claim and rule listings as well.
    pub device_taints: bool,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            engine: Config::default(),
            pace: PaceConfig::default(),
            release_brake: false,
            concurrency: 64,
            mode: EvictionMode::Delete,
            pdb_timeout: None,
            dry_run: false,
            stale_cache_guard: false,
            backoff: Backoff::default(),
            seed: 0x5eed,
            tick_batch: TICK_BATCH,
            lease: None,
            refuse_if_foreign: false,
            handover: None,
            device_taints: false,
        }
    }
}

/// Deadlines one [`Pipeline::tick`] fires at most (the default of
/// [`PipelineConfig::tick_batch`]). When 135,000 pods fall due in the same instant (a zone's
/// 300 s default tolerations running out), a driver that only ticks (`simulate`, `plan`, whose
/// executors answer at once) is handed them a batch at a time, so what waits for it (effects,
/// due evictions) stays bounded instead of all 135,000 being materialised at once. Every
/// observation still fires everything due before it applies, so none can overtake a deadline
/// that has passed: in the live controller, the first pod update of a mass deadline fires it
/// whole (its executor starts at most `concurrency` attempts of them at a time).
pub const TICK_BATCH: usize = 1024;

/// A term of leadership: its number, and the instant (on the pipeline's clock) until which
/// it may act unless renewed. The shell's lease renews it by giving the same `id` a later
/// `until`; a new `id` is a new term.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Term {
    pub id: u64,
    pub until: Time,
}

/// What holds a due eviction back.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PacedBy {
    Brake {
        tainted: usize,
        nodes: usize,
        /// (published devices, tainted devices), with `--device-taints`.
        devices: (usize, usize),
    },
    RateLimit,
}

/// What the pipeline asks its driver to do or know.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// The engine decided this (logs and timelines). `Evict` means *due*, not started.
    Decided(Action),
    /// A due eviction is held by the rate limits or the brake.
    Paced {
        pod: PodRef,
        eviction: EvictionId,
        by: PacedBy,
    },
    /// Carry out this attempt and report on it.
    Start(Attempt),
    /// Send no further request for this attempt; it is still reported.
    Cancel(AttemptId),
    /// The brake now holds this attempt's node: if it has not sent its first mutating
    /// request, it must send none and report `Cancelled` (it is held, and goes on when the
    /// brake lets it); if it has, it finishes.
    Hold(AttemptId),
    /// Record this event about the pod, in this term (the shell's fence drops it once the
    /// term is over).
    PodEvent {
        pod: PodRef,
        event: UpstreamEvent,
        term: u64,
    },
    /// The brake engaged or let go (whether acting or not).
    Brake(BrakeChange),
    /// Record this event about the controller itself (the brake, while acting).
    ControllerEvent { event: UpstreamEvent, term: u64 },
    /// While the brake holds, a node's release annotation changed.
    NodeRelease { node: String, released: bool },
    /// Evictions decided while not acting are acted on now.
    Unparked { count: usize },
    /// A listing finished: (objects removed because the listing no longer had them).
    Synced { what: Watched, removed: usize },
    /// The term ended at its deadline without being renewed: acting stopped.
    TermExpired { term: u64 },
    /// Another taint eviction controller was seen evicting `pod`. `first`: the first time
    /// (warn loudly); `refusing`: with `refuse_if_foreign`, this replica has stopped acting.
    Foreign {
        pod: String,
        evidence: String,
        first: bool,
        refusing: bool,
    },
    /// The device core decided this (logs and timelines): a pod is due at a time because of
    /// its devices, or no longer is.
    Device(DeviceAction),
    /// Write this condition on a DeviceTaintRule (`docs/parity.md` §22.7); a failure is
    /// reported with [`Pipeline::rule_status_failed`].
    RuleStatus(RuleWrite),
}

/// Which watch a listing belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Watched {
    Nodes,
    Pods,
    /// ResourceSlices, ResourceClaims, DeviceTaintRules (with `device_taints`).
    Slices,
    Claims,
    Rules,
}

impl Watched {
    pub fn as_str(self) -> &'static str {
        match self {
            Watched::Nodes => "nodes",
            Watched::Pods => "pods",
            Watched::Slices => "resourceslices",
            Watched::Claims => "resourceclaims",
            Watched::Rules => "devicetaintrules",
        }
    }
}

/// Where a due eviction waits in the pipeline.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Where {
    /// Decided while this replica may not act.
    Parked,
    /// Held for the handover delay until this instant.
    Deferred(Time),
    /// In the pacer.
    Paced,
    /// Released by the pacer, waiting for an executor slot (at this place in its queue).
    Queued(Place),
    /// Waiting for an earlier attempt on the same pod to report.
    WaitingForPod,
    InFlight(AttemptId),
    /// The engine holds it until its retry is due.
    Retrying,
}

#[derive(Clone, Debug)]
struct Entry {
    pod: PodRef,
    deadline: Time,
    cause: Option<Cause>,
    /// A device eviction: the taints behind it (`cause` is `None`).
    device: Option<DeviceEviction>,
    /// Decided at once on a pod event (or after a stale answer): the stale-cache guard applies.
    guarded: bool,
    /// Upstream's "Marking for deletion" event: every attempt carries it until one has
    /// reported anything but `Cancelled` (the executor records it just before the attempt's
    /// first write, so an attempt the brake or a term stopped before writing announces
    /// nothing).
    event: Option<UpstreamEvent>,
    failures: u32,
    /// When the Eviction API first refused it.
    refused_since: Option<Time>,
    retry: bool,
    due_at: Time,
    at: Where,
}

type PodKey = (Arc<str>, Arc<str>);

#[derive(Clone, Debug)]
struct Flight {
    eviction: EvictionId,
    pod: PodKey,
    cancelled: bool,
    /// Told to hold (the brake) and not yet reported.
    held: bool,
    /// The node's taint stamp when it started (did the cache move under it?).
    node_version: Option<u64>,
}

/// What a listing did not see of `known`: deleted while the watch was down.
fn unseen<'a, K: Clone + Eq + std::hash::Hash + 'a>(
    known: impl Iterator<Item = &'a K>,
    listing: &Listing<K>,
) -> Vec<K> {
    known
        .filter(|k| !listing.seen.contains(*k))
        .cloned()
        .collect()
}

#[derive(Debug, Default)]
struct Listing<K> {
    active: bool,
    seen: HashSet<K>,
    done_once: bool,
    /// The watch failed, and has delivered nothing live nor completed a listing since: what
    /// the cache holds may be older than the failure.
    failed: bool,
}

impl<K> Listing<K> {
    /// A listing just completed.
    fn done() -> Listing<K> {
        Listing {
            active: false,
            seen: HashSet::new(),
            done_once: true,
            failed: false,
        }
    }
}

/// The pure controller core. See the module documentation.
#[derive(Debug)]
pub struct Pipeline {
    engine: Engine,
    config: PipelineConfig,
    pacer: Pacer<EvictionId>,
    entries: HashMap<EvictionId, Entry>,
    parked: BTreeSet<EvictionId>,
    /// Evictions held for the handover delay, by when it ends.
    deferred: BTreeSet<(Time, EvictionId)>,
    queue: Queue,
    flights: HashMap<AttemptId, Flight>,
    /// Pods with an attempt in flight.
    busy: HashMap<PodKey, AttemptId>,
    /// Evictions waiting for the pod's earlier attempt to report (a node eviction and a device
    /// one may both wait).
    waiting: HashMap<PodKey, Vec<EvictionId>>,
    next_attempt: u64,
    term: Option<Term>,
    /// The last term id handed out by [`Pipeline::set_leading`].
    last_term: u64,
    /// Another taint eviction controller was seen and `refuse_if_foreign` is set.
    refusing: bool,
    guard: Guard,
    nodes: Listing<String>,
    pods: Listing<(String, String)>,
    /// Device taints: the core and its evictions until they are due.
    devices: DeviceEvictions,
    /// When each DeviceTaintRule's status is looked at.
    rule_status: RuleStatuses,
    /// Device evictions cancelled (their pod deleted, say) while an attempt was in flight: if
    /// it evicts all the same, the rules count it.
    device_flights: HashMap<EvictionId, DeviceEviction>,
    slices: Listing<String>,
    claims: Listing<(String, String)>,
    rules: Listing<String>,
    brake_announced: bool,
    /// The brake may hold more than before (it engaged, or a node lost its release): take
    /// back what it holds at the next settle.
    rebrake: bool,
    rng: u64,
    effects: VecDeque<Effect>,
    /// Scratch buffer for engine actions.
    actions: Vec<Action>,
}

impl Pipeline {
    pub fn new(config: PipelineConfig) -> Pipeline {
        let mut pacer = Pacer::new(config.pace);
        pacer.set_release_all(config.release_brake);
        Pipeline {
            engine: Engine::new(config.engine),
            pacer,
            entries: HashMap::new(),
            parked: BTreeSet::new(),
            deferred: BTreeSet::new(),
            queue: Queue::default(),
            flights: HashMap::new(),
            busy: HashMap::new(),
            waiting: HashMap::new(),
            next_attempt: 1,
            term: None,
            last_term: 0,
            refusing: false,
            guard: Guard::default(),
            nodes: Listing::default(),
            pods: Listing::default(),
            devices: DeviceEvictions::default(),
            rule_status: RuleStatuses::default(),
            device_flights: HashMap::new(),
            slices: Listing::default(),
            claims: Listing::default(),
            rules: Listing::default(),
            brake_announced: false,
            rebrake: false,
            rng: config.seed,
            effects: VecDeque::new(),
            actions: Vec::new(),
            config,
        }
    }

    /// A pipeline that acts from the start: synced and in a term without end (simulate,
    /// plan, tests).
    pub fn acting(config: PipelineConfig) -> Pipeline {
        let mut p = Pipeline::new(config);
        p.nodes.done_once = true;
        p.pods.done_once = true;
        p.slices.done_once = true;
        p.claims.done_once = true;
        p.rules.done_once = true;
        p.set_term(
            Some(Term {
                id: 1,
                until: Time::MAX,
            }),
            Time::MIN,
        );
        p.effects.clear();
        p
    }

    // === Queries ===

    pub fn config(&self) -> &PipelineConfig {
        &self.config
    }

    /// Every watch has completed a listing (with `device_taints`, the slices, claims and
    /// rules too).
    pub fn synced(&self) -> bool {
        self.nodes.done_once
            && self.pods.done_once
            && (!self.config.device_taints
                || (self.slices.done_once && self.claims.done_once && self.rules.done_once))
    }

    /// The device core: what is pending because of devices, and each rule's status.
    pub fn devices(&self) -> &Devices {
        &self.devices.core
    }

    /// The rule for acting: synced, in a term, and not refusing. (The term's deadline is
    /// applied by every input before it looks at this.)
    pub fn may_act(&self) -> bool {
        self.synced() && self.term.is_some() && !self.refusing
    }

    /// The current term, if this replica leads.
    pub fn term(&self) -> Option<Term> {
        self.term
    }

    /// Whether this replica leads (its term has not ended), whether or not it may act.
    pub fn leading(&self) -> bool {
        self.term.is_some()
    }

    /// Another taint eviction controller was seen, and `refuse_if_foreign` stopped acting.
    pub fn refusing(&self) -> bool {
        self.refusing
    }

    pub fn braking(&self) -> bool {
        self.pacer.braking()
    }

    pub fn is_released(&self, node: &str) -> bool {
        self.pacer.is_released(node)
    }

    /// (nodes, tainted nodes) as the brake last saw them, and the tainted share in percent.
    pub fn brake_counts(&self) -> (usize, usize, f64) {
        let (nodes, tainted) = self.pacer.node_counts();
        (nodes, tainted, self.pacer.tainted_percent())
    }

    pub fn brake_threshold(&self) -> f64 {
        self.pacer.brake_threshold()
    }

    /// Due evictions held by the pacer.
    pub fn paced(&self) -> usize {
        self.pacer.len()
    }

    pub fn parked(&self) -> usize {
        self.parked.len()
    }

    /// Evictions scheduled in the engine and counting down to their deadline (or retry).
    pub fn scheduled(&self) -> usize {
        self.engine.queued_count() + self.devices.waiting()
    }

    /// Whether the node is known (an add or update was seen, and no delete or leave since).
    pub fn knows_node(&self, name: &str) -> bool {
        self.engine.node_exists(name)
    }

    /// Pods known (on any node).
    pub fn pod_count(&self) -> usize {
        self.engine.pod_count()
    }

    /// Every pod known, as the engine holds it.
    pub fn pods(&self) -> impl Iterator<Item = PodView<'_>> + '_ {
        self.engine.pods()
    }

    /// The pods with a pending eviction (counting down, due or in flight).
    pub fn pending_pods(&self) -> impl Iterator<Item = PodView<'_>> + '_ {
        self.engine.pending()
    }

    /// A node's `NoExecute` taints as last observed; `None` for an unknown or untainted node.
    pub fn node_taints(&self, name: &str) -> Option<&[crate::taint::Taint]> {
        self.engine.node_taints(name)
    }

    /// Released by the pacer and waiting for an executor slot (or for the pod's earlier
    /// attempt).
    pub fn queued(&self) -> usize {
        self.entries
            .values()
            .filter(|e| matches!(e.at, Where::Queued(_) | Where::WaitingForPod))
            .count()
    }

    /// Whether evictions wait for an executor slot (cheap; may count cancelled leftovers).
    pub fn backlog(&self) -> bool {
        !self.queue.is_empty() || !self.waiting.is_empty()
    }

    /// Pending evictions: waiting for their deadline or retry in the engine, or due and held
    /// here (parked, paced, queued, in flight). O(due evictions).
    pub fn pending(&self) -> usize {
        self.engine.queued_count()
            + self.devices.waiting()
            + self
                .entries
                .values()
                .filter(|e| e.at != Where::Retrying)
                .count()
    }

    /// Attempts started and not yet reported (cancelled ones included).
    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    /// Due evictions the pipeline holds (parked, paced, queued, in flight or retrying).
    pub fn tracked(&self) -> usize {
        self.entries.len()
    }

    /// Sizes of every internal collection, for memory-bound checks.
    pub fn footprint(&self) -> usize {
        self.entries.len()
            + self.parked.len()
            + self.deferred.len()
            + self.queue.len()
            + self.flights.len()
            + self.busy.len()
            + self.waiting.len()
            + self.pacer.len()
            + self.pacer.queue_count()
            + self.nodes.seen.len()
            + self.pods.seen.len()
            + self.devices.len()
            + self.slices.seen.len()
            + self.claims.seen.len()
            + self.rules.seen.len()
            + self.rule_status.len()
            + self.device_flights.len()
    }

    /// Pods the second-controller guard remembers (started by us, already judged, or deleted
    /// lately): the pods known, and those deleted in the last [`DEPARTED_MS`] (at most
    /// [`DEPARTED_MAX`]), forgotten at the next input or tick after that.
    pub fn guard_memory(&self) -> usize {
        self.guard.len()
    }

    /// The next effect to carry out, in order.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// The virtual executor that `simulate` and `plan` share: the next effect, as
    /// [`Pipeline::poll_effect`]; an attempt it starts is carried out at once and succeeds
    /// (reported `Evicted` at `now`, so what follows from that comes next).
    pub fn poll_effect_evicting_at_once(&mut self, now: Time) -> Option<Effect> {
        let effect = self.effects.pop_front()?;
        if let Effect::Start(attempt) = &effect {
            let report = AttemptReport {
                attempt: attempt.id,
                result: AttemptResult::Evicted,
            };
            self.report(report, now);
        }
        Some(effect)
    }

    /// When [`Pipeline::tick`] must be called at the latest (besides any input): the next
    /// deadline, the pacer's next release, or the end of the term.
    pub fn next_wake(&self) -> Option<Time> {
        let engine = self.engine.next_deadline();
        let pacer = if self.may_act() {
            self.pacer.next_release()
        } else {
            None
        };
        let term = self.term.map(|t| t.until).filter(|t| *t != Time::MAX);
        let deferred = self.deferred.first().map(|(t, _)| *t);
        let devices = self.devices.next_wake();
        let rules = if self.may_act() && !self.config.dry_run {
            self.rule_status.next_wake()
        } else {
            None
        };
        [engine, pacer, term, deferred, devices, rules]
            .into_iter()
            .flatten()
            .min()
    }

    // === Inputs ===

    /// Time passed: end the term if its deadline passed, fire due deadlines (at most
    /// [`PipelineConfig::tick_batch`]), start what the pacer lets go.
    /// With more due, [`Pipeline::next_wake`] stays at or before `now`: the driver carries out
    /// this batch's effects and ticks again.
    pub fn tick(&mut self, now: Time) {
        self.expire_term(now);
        self.guard.expire(now);
        let batch = self.config.tick_batch.max(1);
        self.engine.advance_at_most(now, batch, &mut self.actions);
        self.absorb(now, false);
        self.fire_devices(now, batch);
        self.undefer(now);
        self.settle(now);
    }

    /// A watch failed (an error from the API server or the connection): until it delivers a
    /// live change or completes a listing, its cache may be stale. A stale node cache makes
    /// the stale-cache guard read the node before every eviction that starts meanwhile
    /// (`node_view_stale`).
    pub fn watch_failed(&mut self, what: Watched) {
        match what {
            Watched::Nodes => self.nodes.failed = true,
            // A pod the cache has wrong is caught by the UID (and resourceVersion)
            // preconditions of every write; its node binding and tolerations do not change.
            // A device eviction is decided on the device objects, which stale or not, are what
            // upstream's informers would hold too.
            Watched::Pods | Watched::Slices | Watched::Claims | Watched::Rules => {}
        }
    }

    /// Whether this replica's node cache is known to be stale: its node watch failed and has
    /// not recovered, or it is relisting (a `410 Gone` after a failure; the first listing is
    /// not counted, as nothing acts before it completes).
    pub fn node_view_stale(&self) -> bool {
        self.nodes.failed || (self.nodes.active && self.nodes.done_once)
    }

    /// A listing (initial or relist) of a watch began.
    pub fn listing_started(&mut self, what: Watched) {
        match what {
            Watched::Nodes => {
                self.nodes.active = true;
                self.nodes.seen.clear();
            }
            Watched::Pods => {
                self.pods.active = true;
                self.pods.seen.clear();
            }
            Watched::Slices => {
                self.slices.active = true;
                self.slices.seen.clear();
            }
            Watched::Claims => {
                self.claims.active = true;
                self.claims.seen.clear();
            }
            Watched::Rules => {
                self.rules.active = true;
                self.rules.seen.clear();
            }
        }
    }

    /// A listing completed: whatever it did not contain was deleted meanwhile. This holds for
    /// the first listing too, which may follow one that failed half-way.
    pub fn listing_done(&mut self, what: Watched, now: Time) {
        self.begin(now);
        let removed = match what {
            Watched::Nodes => {
                let gone: Vec<String> = self
                    .engine
                    .node_names()
                    .filter(|n| !self.nodes.seen.contains(*n))
                    .map(str::to_string)
                    .collect();
                for name in &gone {
                    self.delete_node_inner(name, now);
                }
                self.nodes = Listing {
                    active: false,
                    seen: HashSet::new(),
                    done_once: true,
                    failed: false,
                };
                gone.len()
            }
            Watched::Pods => {
                let gone: Vec<(String, String, Uid)> = self
                    .engine
                    .pods()
                    .map(|v| {
                        (
                            v.pod.namespace.to_string(),
                            v.pod.name.to_string(),
                            v.pod.uid,
                        )
                    })
                    .filter(|(ns, name, _)| !self.pods.seen.contains(&(ns.clone(), name.clone())))
                    .collect();
                for (ns, name, _) in &gone {
                    // Deleted while the watch was down: remembered like any deletion.
                    self.remember_departed(ns, name, now);
                    self.engine
                        .delete_pod(ns, name, None, now, &mut self.actions);
                    self.absorb(now, false);
                }
                // Pods only the device core knows (unscheduled ones, which the engine does
                // not keep).
                let device_gone: Vec<(String, String)> = self
                    .devices
                    .core
                    .pod_names()
                    .filter(|k| !self.pods.seen.contains(k))
                    .cloned()
                    .collect();
                for (ns, name) in &device_gone {
                    self.devices.core.delete_pod(ns, name);
                }
                self.absorb_devices(now);
                self.pods = Listing {
                    active: false,
                    seen: HashSet::new(),
                    done_once: true,
                    failed: false,
                };
                gone.len() + device_gone.len()
            }
            Watched::Slices => {
                let gone = unseen(self.devices.core.slice_names(), &self.slices);
                for name in &gone {
                    self.devices.core.delete_slice(name);
                }
                self.slices = Listing::done();
                gone.len()
            }
            Watched::Claims => {
                let gone = unseen(self.devices.core.claim_names(), &self.claims);
                for (ns, name) in &gone {
                    self.devices.core.delete_claim(ns, name);
                }
                self.claims = Listing::done();
                gone.len()
            }
            Watched::Rules => {
                let gone = unseen(self.devices.core.rule_names(), &self.rules);
                for name in &gone {
                    self.rule_status.deleted(name);
                    self.devices.core.delete_rule(name);
                }
                self.rules = Listing::done();
                gone.len()
            }
        };
        self.absorb_devices(now);
        self.effects.push_back(Effect::Synced { what, removed });
        self.settle(now);
    }

    /// A node was added or updated; `released` is its brake-release annotation.
    pub fn upsert_node(&mut self, node: &NodeObservation, released: bool, now: Time) {
        self.begin(now);
        if self.nodes.active {
            self.nodes.seen.insert(node.name.clone());
        } else {
            // A live change: the watch resumed where it stopped.
            self.nodes.failed = false;
        }
        // The release first: the decisions this update brings start (or are held) under it.
        self.set_node_released(&node.name, released);
        self.engine.upsert_node(node, now, &mut self.actions);
        self.absorb(now, false);
        self.settle(now);
    }

    /// A node was deleted. Its pods' pending evictions stay, as upstream's do.
    pub fn delete_node(&mut self, name: &str, now: Time) {
        self.begin(now);
        if !self.nodes.active {
            self.nodes.failed = false;
        }
        self.delete_node_inner(name, now);
        self.settle(now);
    }

    /// A node left this controller's view without being deleted (it no longer matches the
    /// node selector). No decision made on its last taints stands: its pods' pending
    /// evictions are cancelled, and attempts in flight told to stop.
    pub fn node_left(&mut self, name: &str, now: Time) {
        self.begin(now);
        self.engine.forget_node(name, &mut self.actions);
        self.absorb(now, false);
        self.set_node_released(name, false);
        self.settle(now);
    }

    fn delete_node_inner(&mut self, name: &str, now: Time) {
        self.engine.delete_node(name, now, &mut self.actions);
        self.absorb(now, false);
        self.set_node_released(name, false);
    }

    /// A pod was added or updated.
    pub fn upsert_pod(&mut self, pod: PodObservation, now: Time) {
        self.begin(now);
        if self.pods.active {
            self.pods
                .seen
                .insert((pod.namespace.clone(), pod.name.clone()));
        }
        if let Some(old) = self.engine.pod_view(&pod.namespace, &pod.name)
            && old.pod.uid != pod.uid
        {
            let uid = old.pod.uid.clone();
            self.guard.forget(&uid);
        }
        let terminating = pod.terminating;
        let key = (pod.namespace.clone(), pod.name.clone());
        let device_key = device::PodKey {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
        };
        let device_pod = self.device_pod(&pod);
        self.engine.upsert_pod(pod, now, &mut self.actions);
        self.absorb(now, true);
        if let Some(device_pod) = device_pod {
            self.devices.core.upsert_pod(device_pod);
            self.absorb_devices(now);
        }
        if terminating {
            self.drop_unstarted(&key.0, &key.1, now);
            self.drop_unstarted_device(&device_key, now);
        }
        self.settle(now);
    }

    /// A pod became terminating: its due device eviction that has not started is dropped
    /// (no second delete, `docs/deviations.md` #4), and counted for its rules, as upstream
    /// counts a pod it finds terminating (§22.8, quirk 2).
    fn drop_unstarted_device(&mut self, key: &device::PodKey, now: Time) {
        let Some(id) = self.devices.id_of(key) else {
            return;
        };
        let Some(entry) = self.entries.get(&id) else {
            return;
        };
        if matches!(entry.at, Where::InFlight(_) | Where::Retrying) {
            return;
        }
        let pod = entry.pod.clone();
        self.forget(id);
        self.end_device(id, true, now);
        self.effects.push_back(Effect::Decided(Action::Skip {
            pod,
            eviction: id,
            reason: SkipReason::AlreadyTerminating,
        }));
    }

    /// What the device core needs of a pod: only pods with claims (their claims never
    /// change), or one it knows under another UID. An excluded pod is given as unscheduled,
    /// so that its devices never make it due (and a rule's status does not count it).
    fn device_pod(&self, pod: &PodObservation) -> Option<DevicePod> {
        if !self.config.device_taints
            || (pod.claims.is_empty() && self.devices.core.pod(&pod.namespace, &pod.name).is_none())
        {
            return None;
        }
        Some(DevicePod {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            node: pod.node_name.clone().filter(|_| !pod.excluded),
            claims: pod.claims.clone(),
            deleting: pod.terminating,
        })
    }

    /// The node of a pod the device core knows, as the engine (else the device core) has it.
    fn device_pod_node(&self, key: &device::PodKey) -> Option<Arc<str>> {
        self.engine
            .pod_view(&key.namespace, &key.name)
            .filter(|v| v.pod.uid == key.uid)
            .and_then(|v| v.pod.node)
            .or_else(|| {
                self.devices
                    .core
                    .pod(&key.namespace, &key.name)
                    .and_then(|p| p.node.as_deref().map(Arc::from))
            })
    }

    /// Whether the pod's devices make it due (the second-controller guard's "watched" for
    /// device taints: another controller evicting it is evicting it for its devices).
    fn device_tainted(&self, namespace: &str, name: &str, uid: &Uid) -> bool {
        self.devices
            .core
            .pod(namespace, name)
            .filter(|p| p.uid == *uid)
            .is_some_and(|p| self.devices.core.pod_eviction(p).is_some())
    }

    /// A ResourceSlice was added or updated.
    pub fn upsert_slice(&mut self, slice: Slice, now: Time) {
        self.begin(now);
        if self.slices.active {
            self.slices.seen.insert(slice.name.clone());
        }
        self.devices.core.upsert_slice(slice);
        self.absorb_devices(now);
        self.settle(now);
    }

    pub fn delete_slice(&mut self, name: &str, now: Time) {
        self.begin(now);
        self.devices.core.delete_slice(name);
        self.absorb_devices(now);
        self.settle(now);
    }

    /// A ResourceClaim was added or updated.
    pub fn upsert_claim(&mut self, claim: Claim, now: Time) {
        self.begin(now);
        if self.claims.active {
            self.claims
                .seen
                .insert((claim.namespace.clone(), claim.name.clone()));
        }
        self.devices.core.upsert_claim(claim);
        self.absorb_devices(now);
        self.settle(now);
    }

    pub fn delete_claim(&mut self, namespace: &str, name: &str, now: Time) {
        self.begin(now);
        self.devices.core.delete_claim(namespace, name);
        self.absorb_devices(now);
        self.settle(now);
    }

    /// A DeviceTaintRule was added or updated, with its status as watched.
    pub fn upsert_rule(&mut self, rule: Rule, status: RuleStatus, now: Time) {
        self.begin(now);
        if self.rules.active {
            self.rules.seen.insert(rule.name.clone());
        }
        self.rule_status
            .observed(&rule.name, &rule.uid, status, now);
        self.devices.core.upsert_rule(rule);
        self.absorb_devices(now);
        self.settle(now);
    }

    pub fn delete_rule(&mut self, name: &str, now: Time) {
        self.begin(now);
        self.rule_status.deleted(name);
        self.devices.core.delete_rule(name);
        self.absorb_devices(now);
        self.settle(now);
    }

    /// Writing a rule's status failed: it is looked at again shortly.
    pub fn rule_status_failed(&mut self, rule: &str, uid: &Uid, now: Time) {
        self.rule_status.failed(rule, uid, now);
        self.settle(now);
    }

    /// Rules whose status is due a look, while acting: the writes that changed.
    fn look_at_rules(&mut self, now: Time) {
        // A dry run writes nothing, rule status included.
        let Some(term) = self.term.filter(|_| self.may_act() && !self.config.dry_run) else {
            return;
        };
        for name in self.rule_status.due(now) {
            let computed = self.devices.core.rule_condition(&name);
            if let Some(write) = self.rule_status.look(&name, computed, now, term.id) {
                self.effects.push_back(Effect::RuleStatus(write));
            }
        }
    }

    /// The rules among `reasons` are looked at within 10 s (upstream's delayed status update
    /// after a pod was decided or evicted because of them).
    fn touch_rules(&mut self, reasons: &[device::TaintSource], now: Time) {
        for reason in reasons {
            if let device::TaintSource::Rule { name, .. } = reason {
                self.rule_status.touched(name, now);
            }
        }
    }

    /// A pod was deleted (with `uid`, only that incarnation).
    pub fn delete_pod(&mut self, namespace: &str, name: &str, uid: Option<&Uid>, now: Time) {
        self.begin(now);
        if self
            .engine
            .pod_view(namespace, name)
            .is_some_and(|view| uid.is_none_or(|u| *u == view.pod.uid))
        {
            self.remember_departed(namespace, name, now);
        }
        self.engine
            .delete_pod(namespace, name, uid, now, &mut self.actions);
        self.absorb(now, false);
        if self
            .devices
            .core
            .pod(namespace, name)
            .is_some_and(|p| uid.is_none_or(|u| *u == p.uid))
        {
            self.devices.core.delete_pod(namespace, name);
            self.absorb_devices(now);
        }
        self.settle(now);
    }

    /// The pod is going: the second-controller guard remembers it a while, for another
    /// controller's Event announcing this deletion can reach us after the pod watch did.
    fn remember_departed(&mut self, namespace: &str, name: &str, now: Time) {
        let Some(view) = self.engine.pod_view(namespace, name) else {
            return;
        };
        let watched = view
            .pod
            .node
            .as_deref()
            .is_some_and(|n| self.engine.node_taints(n).is_some());
        let uid = view.pod.uid.clone();
        let watched = watched || self.device_tainted(namespace, name, &uid);
        self.guard.departed(namespace, name, uid, watched, now);
    }

    /// Leadership as the lease has it: `Some(term)` while this replica leads. The same term
    /// with a later `until` renews it; another term, or `None`, ends the current one at once
    /// (every attempt in flight is told to stop and the rest park), as does a term whose
    /// deadline passes.
    pub fn set_term(&mut self, term: Option<Term>, now: Time) {
        let term = term.filter(|t| t.until > now);
        match (self.term, term) {
            (Some(old), Some(new)) if old.id == new.id => {
                self.term = Some(Term {
                    id: old.id,
                    until: old.until.max(new.until),
                });
            }
            (old, new) => {
                if old.is_some() {
                    self.end_term();
                }
                self.term = new;
                if let Some(t) = new {
                    self.last_term = self.last_term.max(t.id);
                    self.guard.set_leading(true, now);
                }
            }
        }
        self.begin(now);
        self.settle(now);
    }

    /// Lead without end, or stop leading (simulate, plan, tests): a new term each time.
    pub fn set_leading(&mut self, leading: bool, now: Time) {
        match (leading, self.term) {
            (true, Some(_)) | (false, None) => {}
            (true, None) => {
                let id = self.last_term + 1;
                self.set_term(
                    Some(Term {
                        id,
                        until: Time::MAX,
                    }),
                    now,
                );
            }
            (false, Some(_)) => self.set_term(None, now),
        }
    }

    /// Stop acting for good (shutdown): every attempt in flight is told to stop.
    pub fn shutdown(&mut self) {
        if self.term.is_some() {
            self.end_term();
        }
        self.term = None;
        self.stop_acting();
    }

    /// Someone evicts a pod for a taint: judge whether it is another controller, and with
    /// `refuse_if_foreign` stop acting if it is. Signs naming our Lease, about pods unknown (or
    /// deleted more than [`DEPARTED_MS`] ago) or on nodes without `NoExecute` taints,
    /// or from before our term are not counted.
    pub fn foreign_sign(&mut self, sign: ForeignSign, now: Time) {
        self.begin(now);
        if sign.lease.is_some() && sign.lease == self.config.lease {
            return;
        }
        let (uid, watched) = match self.engine.pod_view(&sign.namespace, &sign.name) {
            Some(view) => (
                view.pod.uid.clone(),
                view.pod
                    .node
                    .as_deref()
                    .is_some_and(|n| self.engine.node_taints(n).is_some())
                    || self.device_tainted(&sign.namespace, &sign.name, &view.pod.uid),
            ),
            // Deleted lately: an Event may announce that very deletion. (A mark comes with a
            // pod the watch shows; one not yet known is judged when it is upserted.)
            None if sign.kind == SignKind::Announcement => {
                match self.guard.departed_pod(&sign.namespace, &sign.name, now) {
                    Some(d) => (d.uid, d.watched),
                    None => return,
                }
            }
            None => return,
        };
        if !watched {
            return;
        }
        let finding = self.guard.judge(&uid, sign.kind, sign.at);
        if finding == Finding::None {
            return;
        }
        let evidence = match sign.kind {
            SignKind::Mark => format!(
                "pod {}/{} was marked for deletion by a taint (DisruptionTarget, DeletionByTaintManager) by someone other than this replica",
                sign.namespace, sign.name
            ),
            SignKind::Announcement => format!(
                "{} announced \"Marking for deletion Pod {}/{}\"",
                sign.writer, sign.namespace, sign.name
            ),
        };
        let refusing_now = self.config.refuse_if_foreign && !self.refusing;
        self.effects.push_back(Effect::Foreign {
            pod: format!("{}/{}", sign.namespace, sign.name),
            evidence,
            first: finding == Finding::First,
            refusing: self.config.refuse_if_foreign,
        });
        if refusing_now {
            self.refusing = true;
            self.stop_acting();
        }
        self.settle(now);
    }

    /// The executor's report on an attempt. Returns whether it concluded a live eviction
    /// (false for an attempt that was cancelled, replaced or unknown: its outcome changes
    /// nothing, and it should not be counted as a retry or an avoided eviction).
    ///
    /// Unlike the observations, a report does not fire the deadlines due by `now` first: it
    /// concerns an eviction already fired, and no deadline's outcome depends on it. Those due
    /// keep [`Pipeline::next_wake`] at or before `now` and fire, a batch at a time, at the
    /// next tick; so a driver whose executor answers at once (`simulate`, `plan`) cannot turn
    /// one batch's reports into firing every other deadline due.
    pub fn report(&mut self, report: AttemptReport, now: Time) -> bool {
        self.expire_term(now);
        let Some(flight) = self.flights.remove(&report.attempt) else {
            // Not ours, or reported twice: nothing to free.
            self.settle(now);
            return false;
        };
        if self.busy.get(&flight.pod) == Some(&report.attempt) {
            self.busy.remove(&flight.pod);
        }
        if let Some(eviction) = self.device_flights.remove(&flight.eviction)
            && matches!(
                report.result,
                AttemptResult::Evicted | AttemptResult::Gone(GoneReason::Terminating)
            )
        {
            // Cancelled under it, but it evicted: as upstream counts it for the rules.
            self.devices.core.count_eviction(&eviction);
            self.touch_rules(&eviction.reasons, now);
        }
        for next in self.waiting.remove(&flight.pod).unwrap_or_default() {
            if let Some(e) = self.entries.get_mut(&next)
                && e.at == Where::WaitingForPod
            {
                e.at = Where::Queued(self.queue.push_front(next, e.retry));
            }
        }
        let current = self
            .entries
            .get(&flight.eviction)
            .is_some_and(|e| e.at == Where::InFlight(report.attempt));
        if report.result != AttemptResult::Cancelled
            && let Some(e) = self.entries.get_mut(&flight.eviction)
        {
            // It got as far as it could: the announcement was made (or is moot).
            e.event = None;
        }
        if flight.cancelled || !current {
            // The eviction was cancelled (or the report is late): its outcome changes nothing.
            if current && report.result == AttemptResult::Cancelled {
                // Stopped for leadership, not by the engine: the eviction goes on (a device
                // eviction whose time moved later meanwhile waits for it).
                if !self.device_waits(flight.eviction, now) {
                    self.requeue(flight.eviction, now);
                }
            } else if current {
                self.conclude(&flight, report.result, now);
            }
            self.settle(now);
            return false;
        }
        self.conclude(&flight, report.result, now);
        self.settle(now);
        true
    }

    // === Internals ===

    /// Before any input: end a term whose deadline passed, then fire what is due by `now`
    /// (so no input overtakes a deadline).
    fn begin(&mut self, now: Time) {
        self.expire_term(now);
        self.guard.expire(now);
        self.engine.advance(now, &mut self.actions);
        self.absorb(now, false);
        self.fire_devices(now, usize::MAX);
        self.undefer(now);
    }

    /// Device evictions (or their retries) due by `now`, at most `batch`, go on.
    fn fire_devices(&mut self, now: Time, batch: usize) {
        for id in self.devices.take_due(now, batch) {
            self.device_due(id, now);
        }
    }

    /// Carry the device core's actions into the pipeline.
    fn absorb_devices(&mut self, now: Time) {
        while let Some(action) = self.devices.core.poll_action() {
            match &action {
                DeviceAction::Evict { pod, eviction } => {
                    self.touch_rules(&eviction.reasons, now);
                    let id = self.devices.track(pod.clone(), eviction.clone());
                    self.effects.push_back(Effect::Device(action.clone()));
                    match self.entries.get_mut(&id) {
                        Some(e) => {
                            // Due already: an attempt under way goes on (upstream's worker
                            // has read the time); otherwise a time moved later waits again.
                            e.device = Some(eviction.clone());
                            e.deadline = eviction.at;
                            if eviction.at > now && !matches!(e.at, Where::InFlight(_)) {
                                self.forget(id);
                                self.devices.wait_until(id, eviction.at);
                            }
                        }
                        None if eviction.at > now => self.devices.wait_until(id, eviction.at),
                        None => {
                            self.devices.stop_waiting(id);
                            self.device_due(id, now);
                        }
                    }
                }
                DeviceAction::Cancel { pod, event } => {
                    self.effects.push_back(Effect::Device(action.clone()));
                    let Some(id) = self.devices.id_of(pod) else {
                        continue;
                    };
                    // Announced only if no attempt has started for it (as for node taints,
                    // `docs/deviations.md` #6), and only by the replica that acts.
                    let started = self
                        .entries
                        .get(&id)
                        .is_some_and(|e| matches!(e.at, Where::InFlight(_)) || e.failures > 0);
                    let node = self.entries.get(&id).and_then(|e| e.pod.node.clone());
                    let in_flight = self
                        .entries
                        .get(&id)
                        .is_some_and(|e| matches!(e.at, Where::InFlight(_)));
                    self.forget(id);
                    if let Some(t) = self.devices.remove(id)
                        && in_flight
                    {
                        self.device_flights.insert(id, t.eviction);
                    }
                    if *event
                        && !started
                        && self.may_act()
                        && let Some(term) = self.term
                    {
                        self.effects.push_back(Effect::PodEvent {
                            pod: device_pod_ref(pod, node),
                            event: device_event("Cancelling deletion"),
                            term: term.id,
                        });
                    }
                }
            }
        }
    }

    /// A device eviction whose time moved past `now` while its attempt was in flight waits for
    /// it again instead of going on (upstream's worker reads the time again each try).
    fn device_waits(&mut self, id: EvictionId, now: Time) -> bool {
        if !is_device(id) {
            return false;
        }
        let Some(at) = self.devices.get(id).map(|t| t.eviction.at) else {
            return false;
        };
        if at <= now {
            return false;
        }
        self.forget(id);
        self.devices.wait_until(id, at);
        true
    }

    /// A device eviction falls due (or its retry does): it becomes an entry, parked or
    /// paced like any due eviction.
    fn device_due(&mut self, id: EvictionId, now: Time) {
        if let Some(e) = self.entries.get_mut(&id) {
            // A retry.
            e.retry = true;
            self.requeue(id, now);
            if self.may_act() {
                self.pace(now);
                self.announce_held(id);
            }
            return;
        }
        let Some(tracked) = self.devices.get(id).cloned() else {
            return;
        };
        let key = &tracked.pod;
        let view = self
            .engine
            .pod_view(&key.namespace, &key.name)
            .filter(|v| v.pod.uid == key.uid);
        let pod = device_pod_ref(key, self.device_pod_node(key));
        if view.as_ref().is_some_and(|v| v.terminating) {
            // Already being deleted: no second delete (`docs/deviations.md` #4). Upstream
            // counts it as evicted (§22.8, quirk 2), and so does the rule's status.
            self.end_device(id, true, now);
            self.effects.push_back(Effect::Decided(Action::Skip {
                pod,
                eviction: id,
                reason: SkipReason::AlreadyTerminating,
            }));
            return;
        }
        self.entries.insert(
            id,
            Entry {
                pod: pod.clone(),
                deadline: tracked.eviction.at,
                cause: None,
                device: Some(tracked.eviction.clone()),
                guarded: false,
                event: Some(device_event("Marking for deletion")),
                failures: 0,
                refused_since: None,
                retry: false,
                due_at: now,
                at: Where::Parked,
            },
        );
        if let Some(delay) = self.config.handover
            && let Some(e) = self.entries.get_mut(&id)
        {
            let until = now.plus(delay);
            e.at = Where::Deferred(until);
            self.deferred.insert((until, id));
            return;
        }
        self.requeue(id, now);
        if self.may_act() {
            self.pace(now);
            self.announce_held(id);
        }
    }

    /// An attempt evicted the pod (or found it gone or terminating): what else is due for
    /// the same pod on the other side (a node eviction for a device one, or the reverse) ends
    /// without a request, so that a pod hit by both gets one eviction.
    fn end_others(&mut self, done: EvictionId, pod: &PodRef, evicted: bool, now: Time) {
        let others: Vec<EvictionId> = self
            .entries
            .iter()
            .filter(|(id, e)| {
                **id != done
                    && e.pod.uid == pod.uid
                    && e.pod.namespace == pod.namespace
                    && e.pod.name == pod.name
                    && !matches!(e.at, Where::InFlight(_))
            })
            .map(|(id, _)| *id)
            .collect();
        for id in others {
            let Some(entry) = self.entries.get(&id) else {
                continue;
            };
            let pod = entry.pod.clone();
            self.forget(id);
            if is_device(id) {
                // As upstream's device controller would find the pod: terminating (counted,
                // §22.8, quirk 2), or gone, replaced, or not touched by a dry run (not).
                self.end_device(id, evicted, now);
            } else {
                let report = Report {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    eviction: id,
                    outcome: Outcome::Gone,
                };
                self.engine.report(&report, now, &mut self.actions);
                self.absorb(now, false);
            }
            self.effects.push_back(Effect::Decided(Action::Skip {
                pod,
                eviction: id,
                reason: SkipReason::AlreadyTerminating,
            }));
        }
    }

    /// Evictions whose handover delay has passed go on, as if they fell due now.
    fn undefer(&mut self, now: Time) {
        let mut ids = Vec::new();
        // At most a tick's batch at a time; `next_wake` (the first left, already due) brings
        // the rest on the next turn.
        let batch = self.config.tick_batch.max(1);
        while ids.len() < batch
            && let Some(&(until, id)) = self.deferred.first()
            && until <= now
        {
            self.deferred.pop_first();
            ids.push(id);
        }
        if ids.is_empty() {
            return;
        }
        for &id in &ids {
            self.requeue(id, now);
        }
        if self.may_act() {
            self.pace(now);
            for id in ids {
                self.announce_held(id);
            }
        }
    }

    fn expire_term(&mut self, now: Time) {
        if let Some(term) = self.term
            && term.until <= now
        {
            self.end_term();
            self.term = None;
            self.effects
                .push_back(Effect::TermExpired { term: term.id });
        }
    }

    /// The term is over: stop every attempt, park the rest.
    fn end_term(&mut self) {
        self.guard.set_leading(false, Time::MIN);
        self.stop_acting();
    }

    fn conclude(&mut self, flight: &Flight, result: AttemptResult, now: Time) {
        let eviction = flight.eviction;
        if is_device(eviction) {
            self.conclude_device(eviction, result, now);
            return;
        }
        let mut guarded = false;
        let outcome = match result {
            AttemptResult::Evicted => Outcome::Evicted,
            AttemptResult::WouldEvict | AttemptResult::Gone(_) => Outcome::Gone,
            AttemptResult::Stale => {
                let node = self.entries.get(&eviction).and_then(|e| e.pod.node.clone());
                let version = node.as_deref().and_then(|n| self.engine.node_version(n));
                // Decided again on a cache that moved under the attempt: the guard applies
                // to what follows, so a read that is newer still can drop it.
                guarded = true;
                Outcome::Stale {
                    cache_moved: version != flight.node_version,
                }
            }
            AttemptResult::Cancelled => {
                self.requeue(eviction, now);
                return;
            }
            AttemptResult::Failed { refused, .. } => {
                let Some(retry_at) = self.failed(eviction, refused, now) else {
                    return;
                };
                Outcome::Failed { retry_at }
            }
        };
        let Some(entry) = self.entries.get(&eviction) else {
            return;
        };
        let report = Report {
            namespace: entry.pod.namespace.clone(),
            name: entry.pod.name.clone(),
            eviction,
            outcome,
        };
        let done = matches!(outcome, Outcome::Evicted | Outcome::Gone);
        let evicted = matches!(
            result,
            AttemptResult::Evicted | AttemptResult::Gone(GoneReason::Terminating)
        );
        let pod = entry.pod.clone();
        if !matches!(outcome, Outcome::Failed { .. }) {
            self.entries.remove(&eviction);
        }
        self.engine.report(&report, now, &mut self.actions);
        self.absorb(now, guarded);
        if done {
            self.end_others(eviction, &pod, evicted, now);
        }
    }

    /// How a device eviction's attempt ended (`docs/parity.md` §22.5).
    fn conclude_device(&mut self, eviction: EvictionId, result: AttemptResult, now: Time) {
        let counted = match result {
            AttemptResult::Cancelled => {
                if !self.device_waits(eviction, now) {
                    self.requeue(eviction, now);
                }
                return;
            }
            AttemptResult::Failed { refused, .. } => {
                let Some(retry_at) = self.failed(eviction, refused, now) else {
                    return;
                };
                // Not before its time, if that moved later while the attempt was in flight.
                let due = self
                    .devices
                    .get(eviction)
                    .map_or(retry_at, |t| t.eviction.at);
                self.devices.wait_until(eviction, retry_at.max(due));
                return;
            }
            // A pod already terminating counts as evicted, as upstream counts it (quirk 2).
            AttemptResult::Evicted | AttemptResult::Gone(GoneReason::Terminating) => true,
            AttemptResult::Gone(_) | AttemptResult::WouldEvict | AttemptResult::Stale => false,
        };
        let Some(entry) = self.entries.remove(&eviction) else {
            return;
        };
        self.end_device(eviction, counted, now);
        self.end_others(eviction, &entry.pod, counted, now);
    }

    /// A device eviction is over: the pod was evicted (`counted`: each rule among its reasons
    /// counts it, and its status is looked at within 10 s) or found gone; either way the pod
    /// is not due again while it exists.
    fn end_device(&mut self, id: EvictionId, counted: bool, now: Time) {
        let Some(t) = self.devices.remove(id) else {
            return;
        };
        if counted {
            self.devices.core.evicted(&t.pod);
            self.touch_rules(&t.eviction.reasons, now);
        } else {
            self.devices.core.gone(&t.pod);
        }
    }

    /// An attempt failed: count it (and when the Eviction API first refused), mark the entry
    /// retrying; when its retry is due by the backoff.
    fn failed(&mut self, eviction: EvictionId, refused: bool, now: Time) -> Option<Time> {
        let jitter = self.jitter();
        let e = self.entries.get_mut(&eviction)?;
        e.failures += 1;
        // The --pdb-timeout clock runs from the first refusal; a transient failure in
        // between (or of the fallback DELETE itself) does not restart it.
        if refused {
            e.refused_since.get_or_insert(now);
        }
        e.at = Where::Retrying;
        Some(now.plus(self.config.backoff.delay(e.failures, jitter)))
    }

    /// Send a due eviction on: to the pacer while acting, else parked. Used for fresh and
    /// retried evictions, attempts stopped without an answer, and queued evictions the brake
    /// takes back.
    fn requeue(&mut self, eviction: EvictionId, now: Time) {
        let may_act = self.may_act();
        let Some(e) = self.entries.get_mut(&eviction) else {
            return;
        };
        if let Where::Deferred(until) = e.at {
            self.deferred.remove(&(until, eviction));
        }
        if may_act {
            e.at = Where::Paced;
            e.due_at = now;
            let (node, deadline) = (e.pod.node.clone(), e.deadline);
            self.pacer.offer(eviction, node, deadline, eviction);
        } else {
            e.at = Where::Parked;
            self.parked.insert(eviction);
        }
    }

    fn stop_acting(&mut self) {
        let ids: Vec<AttemptId> = self
            .flights
            .iter()
            .filter(|(_, f)| !f.cancelled)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            if let Some(f) = self.flights.get_mut(&id) {
                f.cancelled = true;
            }
            self.effects.push_back(Effect::Cancel(id));
        }
        // In-flight entries stay where they are: their attempt reports `Cancelled` (or how
        // far it got) and they are parked then.
        let mut park = Vec::new();
        for (id, e) in &self.entries {
            if matches!(e.at, Where::Paced | Where::Queued(_) | Where::WaitingForPod) {
                park.push(*id);
            }
        }
        for id in park {
            self.pacer.cancel(id);
            if let Some(e) = self.entries.get_mut(&id) {
                e.at = Where::Parked;
                self.parked.insert(id);
            }
        }
        self.queue.clear();
        self.waiting.clear();
        self.brake_announced = false;
    }

    /// The brake now holds some nodes: evictions of their pods that wait in the queue go back
    /// to the pacer, and attempts on them that have not yet written are told to hold.
    fn hold_braked(&mut self, now: Time) {
        let pacer = &self.pacer;
        let entries = &self.entries;
        let taken = self.queue.take_where(|id| {
            entries
                .get(&id)
                .is_some_and(|e| pacer.brake_holds(e.pod.node.as_deref()))
        });
        for id in taken {
            self.requeue(id, now);
            self.announce_held(id);
        }
        let mut holds = Vec::new();
        for (attempt, flight) in &mut self.flights {
            if flight.cancelled || flight.held {
                continue;
            }
            let node = self
                .entries
                .get(&flight.eviction)
                .and_then(|e| e.pod.node.as_deref());
            if self.pacer.brake_holds(node) {
                flight.held = true;
                holds.push(*attempt);
            }
        }
        holds.sort();
        self.effects.extend(holds.into_iter().map(Effect::Hold));
    }

    fn announce_held(&mut self, id: EvictionId) {
        if self.pacer.holds(id)
            && let Some(e) = self.entries.get(&id)
        {
            let by = self.held_by(e.pod.node.as_deref());
            self.effects.push_back(Effect::Paced {
                pod: e.pod.clone(),
                eviction: id,
                by,
            });
        }
    }

    /// A pod became terminating: evictions of it that have not started are dropped, as the
    /// engine drops due ones (a second delete would only shorten its grace period).
    fn drop_unstarted(&mut self, namespace: &str, name: &str, now: Time) {
        let Some(view) = self.engine.pod_view(namespace, name) else {
            return;
        };
        let Some(ev) = view.eviction.filter(|e| e.stage == Stage::Due) else {
            return;
        };
        let Some(entry) = self.entries.get(&ev.id) else {
            return;
        };
        if matches!(entry.at, Where::InFlight(_) | Where::Retrying) {
            return;
        }
        let pod = entry.pod.clone();
        self.forget(ev.id);
        self.effects.push_back(Effect::Decided(Action::Skip {
            pod: pod.clone(),
            eviction: ev.id,
            reason: SkipReason::AlreadyTerminating,
        }));
        let report = Report {
            namespace: pod.namespace,
            name: pod.name,
            eviction: ev.id,
            outcome: Outcome::Gone,
        };
        self.engine.report(&report, now, &mut self.actions);
        self.absorb(now, false);
    }

    /// Remove an eviction from wherever it waits; an attempt in flight is told to stop.
    fn forget(&mut self, eviction: EvictionId) {
        let Some(entry) = self.entries.remove(&eviction) else {
            return;
        };
        match entry.at {
            Where::Parked => {
                self.parked.remove(&eviction);
            }
            Where::Deferred(until) => {
                self.deferred.remove(&(until, eviction));
            }
            Where::Paced => {
                self.pacer.cancel(eviction);
            }
            Where::Queued(place) => self.queue.remove(place),
            Where::Retrying => {}
            Where::WaitingForPod => {
                let key = (entry.pod.namespace.clone(), entry.pod.name.clone());
                if let Some(waiting) = self.waiting.get_mut(&key) {
                    waiting.retain(|id| *id != eviction);
                    if waiting.is_empty() {
                        self.waiting.remove(&key);
                    }
                }
            }
            Where::InFlight(attempt) => {
                if let Some(f) = self.flights.get_mut(&attempt)
                    && !f.cancelled
                {
                    f.cancelled = true;
                    self.effects.push_back(Effect::Cancel(attempt));
                }
            }
        }
    }

    /// Carry the engine's actions into the pipeline. `guarded`: immediate evictions among them
    /// re-read the node first (they follow a pod event, or a stale answer).
    fn absorb(&mut self, now: Time, guarded: bool) {
        let mut actions = std::mem::take(&mut self.actions);
        for action in actions.drain(..) {
            match &action {
                Action::Cancel {
                    pod,
                    eviction,
                    announce,
                    ..
                } => {
                    self.forget(*eviction);
                    // Upstream's "Cancelling deletion" event, only from the replica that acts.
                    let event = action
                        .upstream_event()
                        .filter(|_| *announce && self.may_act());
                    let pod = pod.clone();
                    self.effects.push_back(Effect::Decided(action));
                    if let (Some(event), Some(term)) = (event, self.term) {
                        self.effects.push_back(Effect::PodEvent {
                            pod,
                            event,
                            term: term.id,
                        });
                    }
                    continue;
                }
                Action::Evict {
                    pod,
                    eviction,
                    deadline,
                    retry,
                    cause,
                } => {
                    let id = *eviction;
                    let event = action.upstream_event();
                    // Due at once on a pod event: a taint the pod does not tolerate, or a
                    // countdown from `timeAdded` that had already run out.
                    let guarded = guarded
                        && !retry
                        && (*deadline <= now
                            || cause.as_ref().is_some_and(|c| c.verdict.is_immediate()));
                    match self.entries.get_mut(&id) {
                        // A retry of an eviction already tracked.
                        Some(e) => e.retry = true,
                        None => {
                            self.entries.insert(
                                id,
                                Entry {
                                    pod: pod.clone(),
                                    deadline: *deadline,
                                    cause: cause.clone(),
                                    device: None,
                                    guarded,
                                    event,
                                    failures: 0,
                                    refused_since: None,
                                    retry: *retry,
                                    due_at: now,
                                    at: Where::Parked,
                                },
                            );
                        }
                    }
                    self.effects.push_back(Effect::Decided(action.clone()));
                    if let Some(delay) = self.config.handover.filter(|_| !*retry)
                        && let Some(e) = self.entries.get_mut(&id)
                        && e.at == Where::Parked
                        && e.failures == 0
                    {
                        let until = now.plus(delay);
                        e.at = Where::Deferred(until);
                        self.deferred.insert((until, id));
                        continue;
                    }
                    self.requeue(id, now);
                    if self.may_act() {
                        self.pace(now);
                        self.announce_held(id);
                    }
                    continue;
                }
                // A due eviction (a retry too) of a pod already terminating: the engine
                // dropped it, and so does the pipeline.
                Action::Skip { eviction, .. } => self.forget(*eviction),
                Action::Schedule { .. } => {}
            }
            self.effects.push_back(Effect::Decided(action));
        }
        // Keep the buffer's capacity.
        self.actions = actions;
    }

    fn held_by(&self, node: Option<&str>) -> PacedBy {
        if self.pacer.brake_holds(node) {
            let (nodes, tainted) = self.pacer.node_counts();
            PacedBy::Brake {
                tainted,
                nodes,
                devices: self.pacer.device_counts(),
            }
        } else {
            PacedBy::RateLimit
        }
    }

    fn set_node_released(&mut self, node: &str, released: bool) {
        if self.pacer.config().brake.is_none() || self.pacer.is_released(node) == released {
            return;
        }
        self.pacer.set_node_released(node, released);
        if self.pacer.braking() {
            self.effects.push_back(Effect::NodeRelease {
                node: node.to_string(),
                released,
            });
            if !released {
                self.rebrake = true;
            }
        }
    }

    /// After every input: unpark if acting, update the brake, start what may start.
    fn settle(&mut self, now: Time) {
        if self.may_act() && !self.parked.is_empty() {
            let parked = std::mem::take(&mut self.parked);
            self.effects.push_back(Effect::Unparked {
                count: parked.len(),
            });
            for id in parked {
                if self.entries.get(&id).is_some_and(|e| e.at == Where::Parked) {
                    self.requeue(id, now);
                }
            }
        }
        self.pace(now);
        self.look_at_rules(now);
    }

    /// Update the brake from the engine's node counts, announce it, take back what it now
    /// holds, release from the pacer into the queue and start attempts while slots are free.
    fn pace(&mut self, now: Time) {
        let (nodes, tainted) = self.engine.node_counts();
        let mut changes = Vec::new();
        changes.extend(self.pacer.set_node_counts(nodes, tainted));
        if self.devices.core.take_counts_changed() && self.pacer.config().brake.is_some() {
            let (devices, tainted) = self.devices.core.device_counts();
            changes.extend(self.pacer.set_device_counts(devices, tainted));
        }
        for change in changes {
            if matches!(change, BrakeChange::Engaged { .. }) {
                self.rebrake = true;
            }
            self.effects.push_back(Effect::Brake(change));
        }
        if std::mem::take(&mut self.rebrake) {
            self.hold_braked(now);
        }
        if !self.may_act() {
            self.pacer.tidy(now);
            return;
        }
        let braking = self.pacer.braking();
        if braking != self.brake_announced
            && let Some(term) = self.term
        {
            self.brake_announced = braking;
            // Nothing to announce when a leader takes over with the brake off.
            let event = self.brake_event(braking);
            self.effects.push_back(Effect::ControllerEvent {
                event,
                term: term.id,
            });
        }
        let mut released = Vec::new();
        self.pacer.release(now, &mut released);
        for id in released {
            if let Some(e) = self.entries.get_mut(&id)
                && e.at == Where::Paced
            {
                e.at = Where::Queued(self.queue.push_back(id, e.retry));
            }
        }
        self.start_attempts(now);
    }

    fn start_attempts(&mut self, now: Time) {
        let Some(term) = self.term else {
            return;
        };
        while self.flights.len() < self.config.concurrency.max(1) {
            let Some(id) = self.queue.pop() else {
                return;
            };
            let Some(entry) = self.entries.get_mut(&id) else {
                continue;
            };
            if !matches!(entry.at, Where::Queued(_)) {
                continue;
            }
            // The brake's rule applies to the queue as well as the pacer.
            if self.pacer.brake_holds(entry.pod.node.as_deref()) {
                self.requeue(id, now);
                self.announce_held(id);
                continue;
            }
            let key = (entry.pod.namespace.clone(), entry.pod.name.clone());
            if self.busy.contains_key(&key) {
                entry.at = Where::WaitingForPod;
                self.waiting.entry(key).or_default().push(id);
                continue;
            }
            let attempt = AttemptId(self.next_attempt);
            self.next_attempt += 1;
            entry.at = Where::InFlight(attempt);
            let plan = self.plan(id, now);
            let Some(entry) = self.entries.get_mut(&id) else {
                continue;
            };
            let generation = self
                .engine
                .pod_view(&entry.pod.namespace, &entry.pod.name)
                .map_or(0, |v| v.generation);
            let node_version = entry
                .pod
                .node
                .as_deref()
                .and_then(|n| self.engine.node_version(n));
            let start = Attempt {
                id: attempt,
                pod: entry.pod.clone(),
                eviction: id,
                deadline: entry.deadline,
                due_at: entry.due_at,
                generation,
                cause: entry.cause.clone(),
                device: entry.device.clone(),
                plan,
                term: term.id,
                announce: entry.event.clone(),
            };
            self.guard.started(&entry.pod.uid);
            self.flights.insert(
                attempt,
                Flight {
                    eviction: id,
                    pod: key.clone(),
                    cancelled: false,
                    held: false,
                    node_version,
                },
            );
            self.busy.insert(key, attempt);
            self.effects.push_back(Effect::Start(start));
        }
    }

    /// The requests of the next attempt of `id`.
    fn plan(&self, id: EvictionId, now: Time) -> Plan {
        let Some(entry) = self.entries.get(&id) else {
            return Plan::PatchThenDelete;
        };
        let evict_api = self.config.mode == EvictionMode::Evict;
        // Decided on a pod event, or starting while the node cache is known to be stale (the
        // soak found a new leader start evictions decided before a kube-apiserver restart,
        // while its node watch relisted, 3 s after their taint had gone).
        // And, with a handover delay, every start, whatever --stale-cache-guard says: the
        // node may have changed in the delay, and the decision is that old.
        // A device eviction is not justified by the node's taints: no guard re-reads the node.
        let guard = (entry.device.is_none()
            && ((self.config.stale_cache_guard && (entry.guarded || self.node_view_stale()))
                || self.config.handover.is_some()))
        .then(|| {
            let countdown = entry
                .cause
                .as_ref()
                .is_some_and(|c| !c.verdict.is_immediate());
            StaleGuard::new(self.config.engine).with_countdown(countdown && !entry.guarded)
        });
        let fallback = evict_api
            && match (self.config.pdb_timeout, entry.refused_since) {
                (Some(limit), Some(since)) => now.since(since) >= limit,
                _ => false,
            };
        let finish = if self.config.dry_run {
            Finish::Nothing
        } else if evict_api && !fallback {
            Finish::Evict
        } else {
            Finish::Delete { fallback }
        };
        // In the handover, the pod is read first: the other controller may have evicted it.
        if entry.failures == 0
            && guard.is_none()
            && self.config.handover.is_none()
            && finish == (Finish::Delete { fallback: false })
        {
            Plan::PatchThenDelete
        } else {
            Plan::ReadFirst { guard, finish }
        }
    }

    fn jitter(&mut self) -> f64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The brake's event about the controller, as the live controller records it.
    pub fn brake_event(&self, braking: bool) -> UpstreamEvent {
        let (nodes, tainted, share) = self.brake_counts();
        let threshold = self.pacer.brake_threshold();
        let (devices, tainted_devices) = self.pacer.device_counts();
        // With device taints, the devices' share too (either share over the threshold holds).
        let devices = if devices > 0 {
            format!(
                " and {tainted_devices} of {devices} devices ({:.1}%)",
                tainted_devices as f64 * 100.0 / devices as f64
            )
        } else {
            String::new()
        };
        if braking {
            let how = if self.config.release_brake {
                "released by --release-brake: evictions continue".to_string()
            } else {
                format!(
                    "evictions are paused ({} held); release nodes with the annotation {}=true, or restart with --release-brake",
                    self.pacer.len(),
                    RELEASE_ANNOTATION
                )
            };
            UpstreamEvent {
                type_: "Warning",
                reason: "EvictionBrakeEngaged",
                message: format!(
                    "{tainted} of {nodes} nodes ({share:.1}%){devices} carry NoExecute taints, more than the brake threshold of {threshold}%: {how}"
                ),
            }
        } else {
            UpstreamEvent {
                type_: "Normal",
                reason: "EvictionBrakeReleased",
                message: format!(
                    "{tainted} of {nodes} nodes ({share:.1}%){devices} carry NoExecute taints, within the brake threshold of {threshold}%: evictions resume"
                ),
            }
        }
    }
}

/// The node annotation that releases the brake for that node's evictions.
pub const RELEASE_ANNOTATION: &str = "noexecute.io/release-brake";

/// A pod of the device core as the pipeline names it.
fn device_pod_ref(key: &device::PodKey, node: Option<Arc<str>>) -> PodRef {
    PodRef {
        namespace: Arc::from(key.namespace.as_str()),
        name: Arc::from(key.name.as_str()),
        uid: key.uid.clone(),
        node,
    }
}

/// The reason of both of upstream's device Events (`docs/parity.md` §22.6).
pub const DEVICE_EVENT_REASON: &str = "DeviceTaintManagerEviction";

/// Upstream's device Event: "Marking for deletion" or "Cancelling deletion", about the pod
/// (its UID included).
fn device_event(message: &str) -> UpstreamEvent {
    UpstreamEvent {
        type_: "Normal",
        reason: DEVICE_EVENT_REASON,
        message: message.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::taint::Taint;

    fn t(ms: i64) -> Time {
        Time::from_millis(ms)
    }

    fn drain(p: &mut Pipeline) -> Vec<Effect> {
        std::iter::from_fn(|| p.poll_effect()).collect()
    }

    fn starts(effects: &[Effect]) -> Vec<Attempt> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Start(a) => Some(a.clone()),
                _ => None,
            })
            .collect()
    }

    fn tainted(name: &str) -> NodeObservation {
        NodeObservation {
            name: name.into(),
            taints: vec![Taint::no_execute("k", "v")],
        }
    }

    /// 2,148 pods whose toleration runs out in the same instant, with a driver whose executor
    /// answers at once (as `simulate` and `plan` have): each tick hands over at most one batch,
    /// the reports fire nothing more, the pipeline keeps asking to be woken now until every
    /// one has started, and every one starts at its deadline.
    #[test]
    fn a_mass_deadline_is_handed_over_a_batch_at_a_time() {
        use crate::Toleration;
        let n = 2 * TICK_BATCH + 100;
        let mut p = Pipeline::acting(PipelineConfig {
            concurrency: usize::MAX,
            ..PipelineConfig::default()
        });
        p.upsert_node(&tainted("n"), false, t(0));
        for i in 0..n {
            let name = format!("p{i}");
            let pod = PodObservation::new("ns", &name, &format!("u{i}"), Some("n"))
                .with_tolerations(vec![Toleration::exists("k", None).for_seconds(10)]);
            p.upsert_pod(pod, t(0));
        }
        drain(&mut p);
        let due = t(10_000);
        assert_eq!(p.next_wake(), Some(due));
        let mut started = 0;
        let mut ticks = 0;
        while p.next_wake().is_some_and(|w| w <= due) {
            p.tick(due);
            ticks += 1;
            let batch = starts(&drain(&mut p));
            assert!(batch.len() <= TICK_BATCH, "{} in one tick", batch.len());
            assert!(batch.iter().all(|a| a.deadline == due));
            for a in &batch {
                p.report(
                    AttemptReport {
                        attempt: a.id,
                        result: AttemptResult::Evicted,
                    },
                    due,
                );
            }
            assert!(
                starts(&drain(&mut p)).is_empty(),
                "a report fired the deadlines of other pods"
            );
            started += batch.len();
        }
        assert_eq!(started, n, "every pod's eviction started");
        assert_eq!(ticks, n.div_ceil(TICK_BATCH));
        assert_eq!(p.next_wake(), None);
        assert_eq!(p.footprint(), 0);
    }

    /// An observation still fires everything due first: whatever it is about, an update that
    /// comes between two batches cannot overtake a deadline that has passed.
    #[test]
    fn an_observation_between_batches_fires_every_deadline_due_first() {
        use crate::Toleration;
        let n = 2 * TICK_BATCH + 10;
        let mut p = Pipeline::acting(PipelineConfig {
            concurrency: usize::MAX,
            ..PipelineConfig::default()
        });
        p.upsert_node(&tainted("n"), false, t(0));
        let tolerating = vec![Toleration::exists("k", None).for_seconds(10)];
        for i in 0..n {
            let name = format!("p{i}");
            let pod = PodObservation::new("ns", &name, &format!("u{i}"), Some("n"))
                .with_tolerations(tolerating.clone());
            p.upsert_pod(pod, t(0));
        }
        drain(&mut p);
        p.tick(t(10_000));
        assert_eq!(starts(&drain(&mut p)).len(), TICK_BATCH);
        // A pod on another node: before it is looked at, every eviction due has started.
        p.upsert_pod(
            PodObservation::new("ns", "other", "uo", Some("m")),
            t(10_000),
        );
        let effects = drain(&mut p);
        assert_eq!(starts(&effects).len(), n - TICK_BATCH);
        assert_eq!(p.next_wake(), None);
    }

    #[test]
    fn a_cancel_reaches_queued_and_in_flight_attempts() {
        let mut p = Pipeline::acting(PipelineConfig {
            concurrency: 1,
            ..PipelineConfig::default()
        });
        p.upsert_pod(PodObservation::new("ns", "a", "ua", Some("n")), t(0));
        p.upsert_pod(PodObservation::new("ns", "b", "ub", Some("n")), t(0));
        drain(&mut p);
        p.upsert_node(&tainted("n"), false, t(1));
        let effects = drain(&mut p);
        let started = starts(&effects);
        assert_eq!(started.len(), 1, "one slot: {effects:?}");
        assert_eq!(p.queued(), 1);
        // The node recovers: the queued one is dropped, the running one told to stop.
        p.upsert_node(
            &NodeObservation {
                name: "n".into(),
                taints: vec![],
            },
            false,
            t(2),
        );
        let effects = drain(&mut p);
        assert!(
            effects.contains(&Effect::Cancel(started[0].id)),
            "{effects:?}"
        );
        assert_eq!(p.queued(), 0);
        // The stopped attempt reports (not a live one: nothing to count); nothing else starts.
        let live = p.report(
            AttemptReport {
                attempt: started[0].id,
                result: AttemptResult::Cancelled,
            },
            t(3),
        );
        assert!(!live);
        assert!(starts(&drain(&mut p)).is_empty());
        assert_eq!(p.footprint(), 0);
    }

    #[test]
    fn refused_evictions_fall_back_to_delete_after_the_pdb_timeout() {
        let mut p = Pipeline::acting(PipelineConfig {
            mode: EvictionMode::Evict,
            pdb_timeout: Some(Duration::from_secs(5)),
            ..PipelineConfig::default()
        });
        p.upsert_node(&tainted("n"), false, t(0));
        p.upsert_pod(PodObservation::new("ns", "a", "ua", Some("n")), t(0));
        let mut now = 0;
        let mut attempt = starts(&drain(&mut p)).remove(0);
        assert_eq!(attempt.finish(), Finish::Evict);
        while attempt.finish() == Finish::Evict {
            p.report(
                AttemptReport {
                    attempt: attempt.id,
                    result: AttemptResult::Failed {
                        error: "500: multiple budgets".into(),
                        refused: true,
                    },
                },
                t(now),
            );
            drain(&mut p);
            now = p.next_wake().map(Time::as_millis).unwrap_or(now);
            p.tick(t(now));
            attempt = starts(&drain(&mut p)).remove(0);
        }
        assert!(attempt.fallback());
        assert!(now >= 5_000, "fell back at {now} ms");
    }

    fn report(p: &mut Pipeline, a: &Attempt, result: AttemptResult, at: i64) {
        p.report(
            AttemptReport {
                attempt: a.id,
                result,
            },
            t(at),
        );
    }

    fn toleration(seconds: Option<i64>) -> crate::toleration::Toleration {
        let tol =
            crate::toleration::Toleration::exists("k", Some(crate::taint::TaintEffect::NoExecute));
        match seconds {
            Some(s) => tol.for_seconds(s),
            None => tol,
        }
    }

    /// Issue 2: the guard's GET is in flight when the node's taint changes to one the pod
    /// tolerates for 300 s; the guard answers Stale. The eviction must be scheduled again, not
    /// lost.
    #[test]
    fn a_stale_guard_answer_after_a_taint_change_schedules_the_delayed_eviction() {
        let mut p = Pipeline::acting(PipelineConfig {
            stale_cache_guard: true,
            ..PipelineConfig::default()
        });
        p.upsert_node(
            &NodeObservation {
                name: "n".into(),
                taints: vec![Taint::no_execute("other", "")],
            },
            false,
            t(0),
        );
        let pod = PodObservation::new("ns", "a", "ua", Some("n"))
            .with_tolerations(vec![toleration(Some(300))]);
        p.upsert_pod(pod, t(0));
        let attempt = starts(&drain(&mut p)).remove(0);
        assert!(
            attempt.guard().is_some(),
            "a pod-triggered immediate eviction is guarded"
        );
        // The node now carries only the tolerated taint (the watch delivers it first).
        p.upsert_node(&tainted("n"), false, t(100));
        assert!(starts(&drain(&mut p)).is_empty());
        report(&mut p, &attempt, AttemptResult::Stale, 200);
        let effects = drain(&mut p);
        assert!(
            effects.iter().any(|e| matches!(e,
                Effect::Decided(Action::Schedule { deadline, .. }) if *deadline == t(300_200))),
            "rescheduled from the Stale answer: {effects:?}"
        );
        assert_eq!(p.engine.pending_count(), 1);
    }

    /// Issue 2 on a standby: the eviction was parked while the node changed; at takeover the
    /// guarded attempt answers Stale and the delayed one is scheduled.
    #[test]
    fn a_parked_eviction_that_turns_stale_at_takeover_is_not_lost() {
        let mut p = Pipeline::new(PipelineConfig {
            stale_cache_guard: true,
            ..PipelineConfig::default()
        });
        for w in [Watched::Nodes, Watched::Pods] {
            p.listing_started(w);
            p.listing_done(w, t(0));
        }
        p.upsert_node(
            &NodeObservation {
                name: "n".into(),
                taints: vec![Taint::no_execute("other", "")],
            },
            false,
            t(0),
        );
        p.upsert_pod(
            PodObservation::new("ns", "a", "ua", Some("n"))
                .with_tolerations(vec![toleration(Some(300))]),
            t(0),
        );
        assert_eq!(p.parked(), 1);
        p.upsert_node(&tainted("n"), false, t(60_000));
        p.set_leading(true, t(120_000));
        let attempt = starts(&drain(&mut p)).remove(0);
        report(&mut p, &attempt, AttemptResult::Stale, 120_100);
        assert!(drain(&mut p).iter().any(|e| matches!(e,
            Effect::Decided(Action::Schedule { deadline, .. }) if *deadline == t(420_100))));
    }

    /// Issue 3: only "another UID" ends an Eviction-API eviction; every other refusal is
    /// retried and then deleted after --pdb-timeout (see also the 500 test above).
    #[test]
    fn a_budget_conflict_is_retried_not_dropped() {
        let mut p = Pipeline::acting(PipelineConfig {
            mode: EvictionMode::Evict,
            pdb_timeout: Some(Duration::from_secs(1)),
            ..PipelineConfig::default()
        });
        p.upsert_node(&tainted("n"), false, t(0));
        p.upsert_pod(PodObservation::new("ns", "a", "ua", Some("n")), t(0));
        let a = starts(&drain(&mut p)).remove(0);
        report(
            &mut p,
            &a,
            AttemptResult::Failed {
                error: "409: poddisruptionbudgets.policy modified".into(),
                refused: true,
            },
            10,
        );
        assert_eq!(p.engine.pending_count(), 1, "still pending");
        let mut now = 10;
        let mut fallback = None;
        for _ in 0..20 {
            now = p.next_wake().map_or(now, Time::as_millis);
            p.tick(t(now));
            let Some(a) = starts(&drain(&mut p)).pop() else {
                continue;
            };
            if a.fallback() {
                fallback = Some(a);
                break;
            }
            report(
                &mut p,
                &a,
                AttemptResult::Failed {
                    error: "403: denied".into(),
                    refused: true,
                },
                now,
            );
        }
        let a = fallback.expect("a DELETE after the timeout");
        assert_eq!(a.finish(), Finish::Delete { fallback: true });
        report(&mut p, &a, AttemptResult::Evicted, now);
        assert_eq!(p.engine.pending_count(), 0);
        assert_eq!(p.footprint(), 0);
    }

    /// A transient failure between refusals (a timed-out Eviction) does not restart the
    /// --pdb-timeout clock, nor does a failed fallback DELETE send the eviction back.
    #[test]
    fn the_pdb_clock_runs_from_the_first_refusal() {
        let mut p = Pipeline::acting(PipelineConfig {
            mode: EvictionMode::Evict,
            pdb_timeout: Some(Duration::from_secs(2)),
            backoff: Backoff {
                initial: Duration::from_millis(500),
                max: Duration::from_millis(500),
            },
            ..PipelineConfig::default()
        });
        p.upsert_node(&tainted("n"), false, t(0));
        p.upsert_pod(PodObservation::new("ns", "a", "ua", Some("n")), t(0));
        let mut a = starts(&drain(&mut p)).remove(0);
        let mut now = 0;
        let mut results = vec![
            AttemptResult::Failed {
                error: "429".into(),
                refused: true,
            },
            AttemptResult::Failed {
                error: "timed out".into(),
                refused: false,
            },
        ]
        .into_iter();
        let mut seen = Vec::new();
        while now < 10_000 {
            seen.push((now, a.finish(), a.fallback()));
            let result = results.next().unwrap_or(AttemptResult::Failed {
                error: "still failing".into(),
                refused: !a.fallback(),
            });
            report(&mut p, &a, result, now);
            drain(&mut p);
            now = p.next_wake().map_or(now + 1, Time::as_millis);
            p.tick(t(now));
            a = match starts(&drain(&mut p)).pop() {
                Some(a) => a,
                None => break,
            };
        }
        let first_fallback = seen.iter().find(|(_, _, f)| *f).map(|(at, _, _)| *at);
        assert!(
            first_fallback.is_some_and(|at| (2_000..3_000).contains(&at)),
            "{seen:?}"
        );
        // Once falling back, it stays a DELETE.
        let after: Vec<_> = seen.iter().skip_while(|(_, _, f)| !f).collect();
        assert!(
            after
                .iter()
                .all(|(_, finish, f)| *f && *finish == Finish::Delete { fallback: true }),
            "{seen:?}"
        );
    }

    /// `noexecute status`: every pending eviction, soonest first, with where it is held and
    /// why; an evicted pod leaves the list.
    #[test]
    fn countdowns_show_every_pending_eviction_where_it_is_held() {
        let mut p = Pipeline::acting(PipelineConfig {
            concurrency: 1,
            ..PipelineConfig::default()
        });
        let mut slow = PodObservation::new("ns", "slow", "us", Some("n"));
        slow.tolerations = vec![toleration(Some(60))];
        p.upsert_pod(slow, t(0));
        p.upsert_pod(PodObservation::new("ns", "a", "ua", Some("n")), t(0));
        p.upsert_pod(PodObservation::new("ns", "b", "ub", Some("n")), t(0));
        p.upsert_pod(
            PodObservation::new("ns", "elsewhere", "ue", Some("m")),
            t(0),
        );
        p.upsert_node(&tainted("n"), false, t(1_000));
        let started = starts(&drain(&mut p));
        assert_eq!(started.len(), 1, "one slot");
        let rows: Vec<(String, Held, i64)> = p
            .countdowns(|_| true, usize::MAX)
            .rows
            .into_iter()
            .map(|c| (c.pod.to_string(), c.held, c.deadline.as_millis()))
            .collect();
        let running = started[0].pod.to_string();
        let queued = if running == "ns/a" { "ns/b" } else { "ns/a" };
        assert_eq!(
            rows,
            vec![
                (running.clone(), Held::InFlight, 1_000),
                (queued.to_string(), Held::Queued, 1_000),
                ("ns/slow".to_string(), Held::Counting, 61_000),
            ]
        );
        let reasons: Vec<String> = p
            .countdowns(|_| true, usize::MAX)
            .rows
            .into_iter()
            .filter_map(|c| c.reason)
            .collect();
        assert!(reasons[2].contains("tolerated for 60s"), "{reasons:?}");
        assert!(reasons[0].contains("not tolerated"), "{reasons:?}");
        assert_eq!(
            p.countdowns(|pod| &*pod.name == "slow", usize::MAX).total,
            1,
            "filtered"
        );
        report(&mut p, &started[0], AttemptResult::Evicted, 1_100);
        assert!(
            p.countdowns(|_| true, usize::MAX)
                .rows
                .iter()
                .all(|c| c.pod.to_string() != running),
            "an evicted pod leaves the list"
        );
    }

    /// Issue 4: losing the lease stops every attempt in flight and parks the queued ones; no
    /// attempt starts until leadership returns, and then the parked ones do.
    #[test]
    fn losing_leadership_stops_attempts_and_parks_the_queue() {
        let mut p = Pipeline::acting(PipelineConfig {
            concurrency: 1,
            ..PipelineConfig::default()
        });
        p.upsert_pod(PodObservation::new("ns", "a", "ua", Some("n")), t(0));
        p.upsert_pod(PodObservation::new("ns", "b", "ub", Some("n")), t(0));
        p.upsert_node(&tainted("n"), false, t(0));
        let a = starts(&drain(&mut p)).remove(0);
        p.set_leading(false, t(10));
        let effects = drain(&mut p);
        assert!(effects.contains(&Effect::Cancel(a.id)));
        assert!(starts(&effects).is_empty());
        report(&mut p, &a, AttemptResult::Cancelled, 20);
        assert!(
            starts(&drain(&mut p)).is_empty(),
            "nothing while not leading"
        );
        assert_eq!(p.parked(), 2);
        p.set_leading(true, t(30));
        let started = starts(&drain(&mut p));
        assert_eq!(started.len(), 1, "one slot");
        report(&mut p, &started[0], AttemptResult::Evicted, 40);
        assert_eq!(starts(&drain(&mut p)).len(), 1, "then the other");
    }

    /// Issue 4: shutdown tells every attempt in flight to stop.
    #[test]
    fn shutdown_cancels_every_attempt_in_flight() {
        let mut p = Pipeline::acting(PipelineConfig::default());
        p.upsert_pod(PodObservation::new("ns", "a", "ua", Some("n")), t(0));
        p.upsert_pod(PodObservation::new("ns", "b", "ub", Some("n")), t(0));
        p.upsert_node(&tainted("n"), false, t(0));
        let started = starts(&drain(&mut p));
        assert_eq!(started.len(), 2);
        p.shutdown();
        let effects = drain(&mut p);
        for a in &started {
            assert!(effects.contains(&Effect::Cancel(a.id)));
        }
    }

    /// Issue 5: a parked eviction of a pod that became terminating is dropped, not attempted
    /// (nor announced) at takeover.
    #[test]
    fn a_pod_terminating_while_parked_is_not_attempted_at_takeover() {
        let mut p = Pipeline::new(PipelineConfig::default());
        for w in [Watched::Nodes, Watched::Pods] {
            p.listing_started(w);
            p.listing_done(w, t(0));
        }
        p.upsert_node(&tainted("n"), false, t(0));
        p.upsert_pod(PodObservation::new("ns", "a", "ua", Some("n")), t(0));
        assert_eq!(p.parked(), 1);
        let mut gone = PodObservation::new("ns", "a", "ua", Some("n"));
        gone.terminating = true;
        p.upsert_pod(gone, t(10));
        assert_eq!(p.parked(), 0);
        p.set_leading(true, t(20));
        let effects = drain(&mut p);
        assert!(starts(&effects).is_empty(), "{effects:?}");
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::PodEvent { .. })),
            "no event either"
        );
        assert_eq!(p.footprint(), 0);
    }

    /// Issue 5: retries and fresh work alternate, so failing pods cannot starve the others.
    #[test]
    fn retries_cannot_starve_fresh_evictions() {
        let mut p = Pipeline::acting(PipelineConfig {
            concurrency: 1,
            backoff: Backoff {
                initial: Duration::ZERO,
                max: Duration::ZERO,
            },
            ..PipelineConfig::default()
        });
        p.upsert_node(&tainted("n"), false, t(0));
        p.upsert_pod(PodObservation::new("ns", "bad", "u0", Some("n")), t(0));
        for i in 0..3 {
            p.upsert_pod(
                PodObservation::new("ns", &format!("ok{i}"), &format!("u{}", i + 1), Some("n")),
                t(0),
            );
        }
        // "bad" fails every time, at once; the others succeed.
        let mut order = Vec::new();
        let mut now = 0;
        while order
            .iter()
            .filter(|n: &&String| n.starts_with("ok"))
            .count()
            < 3
            && now < 100
        {
            now += 1;
            p.tick(t(now));
            for a in starts(&drain(&mut p)) {
                order.push(a.pod.name.to_string());
                let result = if &*a.pod.name == "bad" {
                    AttemptResult::Failed {
                        error: "webhook denied".into(),
                        refused: false,
                    }
                } else {
                    AttemptResult::Evicted
                };
                report(&mut p, &a, result, now);
            }
        }
        let bad = order.iter().filter(|n| *n == "bad").count();
        assert!(
            bad <= 4,
            "the failing pod took {bad} of {} starts: {order:?}",
            order.len()
        );
    }

    /// Issue 6: a first listing that failed half-way, then a complete one that no longer has a
    /// pod or node: neither stays behind.
    #[test]
    fn a_failed_first_listing_leaves_no_ghosts() {
        let mut p = Pipeline::new(PipelineConfig::default());
        p.listing_started(Watched::Nodes);
        p.upsert_node(&tainted("ghost-node"), false, t(0));
        p.upsert_node(&tainted("n"), false, t(0));
        p.listing_started(Watched::Pods);
        p.upsert_pod(PodObservation::new("ns", "ghost", "ug", Some("n")), t(0));
        // Both listings fail and start again; the second ones are complete.
        p.listing_started(Watched::Nodes);
        p.upsert_node(&tainted("n"), false, t(1));
        p.listing_done(Watched::Nodes, t(1));
        p.listing_started(Watched::Pods);
        p.upsert_pod(PodObservation::new("ns", "real", "ur", Some("n")), t(1));
        p.listing_done(Watched::Pods, t(1));
        assert!(!p.engine.node_exists("ghost-node"));
        assert!(p.engine.pod_view("ns", "ghost").is_none());
        assert!(p.engine.pod_view("ns", "real").is_some());
        assert_eq!(p.engine.node_counts(), (1, 1));
    }

    /// Issue 7: node churn under a per-node rate limit and failures leaves nothing behind.
    #[test]
    fn churn_leaves_nothing_behind() {
        let mut p = Pipeline::acting(PipelineConfig {
            pace: PaceConfig {
                node_rate: Some(crate::pace::Rate {
                    per_second: 1.0,
                    burst: 2,
                }),
                ..PaceConfig::default()
            },
            ..PipelineConfig::default()
        });
        let mut now = 0;
        for round in 0..200 {
            let node = format!("n{round}");
            p.upsert_node(&tainted(&node), false, t(now));
            p.upsert_pod(
                PodObservation::new(
                    "ns",
                    &format!("p{round}"),
                    &format!("u{round}"),
                    Some(&node),
                ),
                t(now),
            );
            for a in starts(&drain(&mut p)) {
                let result = if round % 2 == 0 {
                    AttemptResult::Evicted
                } else {
                    AttemptResult::Failed {
                        error: "boom".into(),
                        refused: true,
                    }
                };
                report(&mut p, &a, result, now);
            }
            p.delete_pod("ns", &format!("p{round}"), None, t(now + 1));
            p.delete_node(&node, t(now + 1));
            now += 100;
            p.tick(t(now));
            drain(&mut p);
            // Node queues whose bucket still refills (1 s at 100 ms a round) and nothing else.
            assert!(p.footprint() <= 16, "round {round}: {}", p.footprint());
        }
        p.tick(t(now + 10_000));
        drain(&mut p);
        assert_eq!(p.footprint(), 0);
        assert_eq!(p.tracked(), 0);
    }
}
