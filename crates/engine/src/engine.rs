//! The eviction state machine.
//!
//! It owns every fact the decision needs: the `NoExecute` taints of each node, the pods bound
//! to each node with their (interned) tolerations, and at most one pending eviction per pod in
//! a [`DeadlineQueue`]. Each input is applied completely before the next, so there are no
//! races to reason about: upstream's node-before-pod channel priority and "update the taint
//! cache before listing pods" rule hold by construction.
//!
//! The engine never performs I/O and never reads a clock.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::{DefaultHashBuilder, HashMap, HashTable};

use crate::action::{Action, CancelReason, Cause, PodRef, SkipReason};
use crate::intern::Interner;
use crate::observe::{EvictionId, NodeObservation, Outcome, Phase, PodObservation, Report, Uid};
use crate::schedule::DeadlineQueue;
use crate::slab::Slab;
use crate::taint::Taint;
use crate::time::Time;
use crate::toleration::{Toleration, TolerationTime, Verdict, verdict};

/// Switches that change decisions. The defaults are upstream's behaviour (with the bug fixes
/// listed in `docs/deviations.md`, which need no switch).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Honour the `Lt`/`Gt` toleration operators (upstream's alpha
    /// `TaintTolerationComparisonOperators` gate). Off by default, as upstream.
    pub comparison_operators: bool,
    /// Never evict pods in phase `Succeeded` or `Failed`. Off by default: upstream deletes them.
    pub skip_terminal_pods: bool,
    /// Measure a finite toleration from the taint's `timeAdded` instead of from when the
    /// engine first saw the taint, so restarts and failovers do not extend a countdown.
    pub deadline_from_time_added: bool,
    /// With `deadline_from_time_added`: a `timeAdded` later than `now` by more than this is
    /// treated as clock skew and replaced by `now`.
    pub max_clock_skew_ms: i64,
}

impl Config {
    /// When a toleration of `d` for `taint`, decided at `now`, runs out: `now + d`, or with
    /// `deadline_from_time_added` the taint's `timeAdded + d` (which may already have passed).
    /// The engine's one rule; the stale-cache guard judges a fresh read with it too.
    pub fn deadline(&self, now: Time, d: std::time::Duration, taint: Option<&Taint>) -> Time {
        if self.deadline_from_time_added
            && let Some(added) = taint.and_then(|t| t.time_added)
        {
            // A timeAdded from the future is clock skew between whoever tainted the node and
            // us: trust our clock beyond the allowed skew.
            let start = if added.as_millis() > now.as_millis() + self.max_clock_skew_ms {
                now
            } else {
                added.min(now)
            };
            return start.plus(d);
        }
        now.plus(d)
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            comparison_operators: false,
            skip_terminal_pods: false,
            deadline_from_time_added: false,
            max_clock_skew_ms: 5_000,
        }
    }
}

/// An input to the engine; [`Engine::handle`] dispatches it.
#[derive(Clone, Debug, PartialEq)]
pub enum Input {
    UpsertNode(NodeObservation),
    DeleteNode {
        name: String,
    },
    UpsertPod(PodObservation),
    DeletePod {
        namespace: String,
        name: String,
        /// When given, a delete for another incarnation of the pod is ignored.
        uid: Option<Uid>,
    },
    Report(Report),
}

/// Where a pending eviction is in its life.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Waiting for its deadline (upstream: a timer is armed).
    Waiting,
    /// Due: handed on (to the pipeline, then an attempt); waiting for its report.
    Due,
    /// The last attempt failed; queued to try again.
    Retrying,
}

/// A pending eviction as the queries show it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct EvictionView {
    pub id: EvictionId,
    /// When the decision that created it was made (upstream's `CreatedAt`).
    pub created_at: Time,
    /// When it is (or was) due.
    pub deadline: Time,
    pub stage: Stage,
    /// When the next attempt is due, while `Retrying`.
    pub retry_at: Option<Time>,
}

/// A tracked pod as the queries show it.
#[derive(Clone, Debug)]
pub struct PodView<'a> {
    pub pod: PodRef,
    pub tolerations: &'a [Toleration],
    pub phase: Phase,
    pub terminating: bool,
    pub excluded: bool,
    /// The last `metadata.generation` observed.
    pub generation: i64,
    pub eviction: Option<EvictionView>,
}

fn generation32(g: i64) -> u32 {
    u32::try_from(g.max(0)).unwrap_or(u32::MAX)
}

type PodId = u32;
type NodeId = u32;
const NO_NODE: NodeId = u32::MAX;
/// Interned id of the empty toleration list.
const NO_TOLERATIONS: u32 = 0;

#[derive(Copy, Clone, Debug)]
struct Eviction {
    id: u64,
    created_at: Time,
    deadline: Time,
    stage: Stage,
}

#[derive(Debug)]
struct Pod {
    name: Arc<str>,
    uid: Uid,
    namespace: u32,
    node: NodeId,
    /// Index of this pod in its node's `pods`.
    node_slot: u32,
    tolerations: u32,
    phase: Phase,
    terminating: bool,
    excluded: bool,
    /// `metadata.generation`, saturated to 32 bits (it only counts spec changes).
    generation: u32,
    eviction: Option<Eviction>,
}

#[derive(Debug)]
struct Node {
    name: Arc<str>,
    /// An add or update was seen and no delete since.
    exists: bool,
    /// The node's `NoExecute` taints; `None` when it has none (upstream's `taintedNodes`).
    taints: Option<Arc<[Taint]>>,
    /// The engine's count of taint changes when this node's taints last changed: a stamp an
    /// in-flight attempt can compare to learn whether the cache moved under it.
    version: u64,
    pods: Vec<PodId>,
}

/// The taint eviction engine. See the crate documentation.
#[derive(Debug)]
pub struct Engine {
    config: Config,
    pods: Slab<Pod>,
    /// (namespace, name) → pod id, hashed on the strings without storing them twice.
    pod_index: HashTable<PodId>,
    hasher: DefaultHashBuilder,
    nodes: Vec<Option<Node>>,
    free_nodes: Vec<NodeId>,
    node_index: HashMap<Arc<str>, NodeId>,
    namespaces: Interner<str>,
    tolerations: Interner<[Toleration]>,
    queue: DeadlineQueue,
    next_eviction: u64,
    /// Node taint changes observed so far (stamps [`Node::version`]).
    taint_changes: u64,
    /// Nodes that exist, and those of them with `NoExecute` taints (for the brake).
    existing_nodes: usize,
    tainted_nodes: usize,
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new(Config::default())
    }
}

impl Engine {
    pub fn new(config: Config) -> Self {
        let mut tolerations = Interner::default();
        // The empty list is id 0 and is never released (one extra reference).
        let empty = tolerations.acquire(&[][..], |_| Arc::from(Vec::new()));
        debug_assert_eq!(empty, NO_TOLERATIONS);
        Engine {
            config,
            pods: Slab::default(),
            pod_index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            node_index: HashMap::new(),
            namespaces: Interner::default(),
            tolerations,
            queue: DeadlineQueue::new(),
            next_eviction: 1,
            taint_changes: 0,
            existing_nodes: 0,
            tainted_nodes: 0,
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Apply one input at `now`, appending the resulting actions to `out`.
    pub fn handle(&mut self, input: Input, now: Time, out: &mut Vec<Action>) {
        match input {
            Input::UpsertNode(node) => self.upsert_node(&node, now, out),
            Input::DeleteNode { name } => self.delete_node(&name, now, out),
            Input::UpsertPod(pod) => self.upsert_pod(pod, now, out),
            Input::DeletePod {
                namespace,
                name,
                uid,
            } => self.delete_pod(&namespace, &name, uid.as_ref(), now, out),
            Input::Report(report) => self.report(&report, now, out),
        }
    }

    /// The earliest time [`Engine::advance`] has something to do.
    pub fn next_deadline(&self) -> Option<Time> {
        self.queue.next_deadline()
    }

    /// Fire every eviction due at or before `now`.
    pub fn advance(&mut self, now: Time, out: &mut Vec<Action>) {
        self.advance_at_most(now, usize::MAX, out);
    }

    /// Fire at most `limit` of the deadlines due by `now`, earliest first; those left over
    /// keep [`Engine::next_deadline`] at or before `now`.
    pub fn advance_at_most(&mut self, now: Time, limit: usize, out: &mut Vec<Action>) {
        for _ in 0..limit {
            let Some((id, _)) = self.queue.pop_due(now) else {
                break;
            };
            self.fire(id, None, out);
        }
    }

    // === Nodes ===

    /// A node was added or updated. Updates that leave its `NoExecute` taints unchanged are
    /// ignored, as upstream does.
    pub fn upsert_node(&mut self, node: &NodeObservation, now: Time, out: &mut Vec<Action>) {
        let id = self.intern_node(&node.name);
        let taints: Vec<Taint> = node
            .taints
            .iter()
            .filter(|t| t.is_no_execute())
            .cloned()
            .collect();
        let entry = self.node_mut(id);
        let unchanged = match &entry.taints {
            Some(old) => **old == *taints,
            None => taints.is_empty(),
        };
        if entry.exists && unchanged {
            return;
        }
        let (existed, was_tainted) = (entry.exists, entry.taints.is_some());
        self.taint_changes += 1;
        let version = self.taint_changes;
        let entry = self.node_mut(id);
        entry.version = version;
        entry.exists = true;
        // The taints are recorded before the pods are looked at: upstream's ordering rule.
        entry.taints = if taints.is_empty() {
            None
        } else {
            Some(Arc::from(taints))
        };
        let tainted = entry.taints.is_some();
        let count = entry.pods.len();
        self.count_node(existed, was_tainted, true, tainted);
        // Neither evaluating nor cancelling moves pods between nodes, so the list is stable.
        for i in 0..count {
            let pod = self.node(id).pods[i];
            if tainted {
                self.evaluate(pod, now, out);
            } else {
                self.cancel(pod, CancelReason::NodeUntainted, out);
            }
        }
    }

    /// A node was deleted. Its pods' pending evictions stay, as upstream: the pods are still
    /// bound to it and will be deleted by the garbage collector or by us.
    pub fn delete_node(&mut self, name: &str, _now: Time, _out: &mut Vec<Action>) {
        let Some(&id) = self.node_index.get(name) else {
            return;
        };
        self.taint_changes += 1;
        let version = self.taint_changes;
        let entry = self.node_mut(id);
        let (existed, was_tainted) = (entry.exists, entry.taints.is_some());
        entry.exists = false;
        entry.taints = None;
        entry.version = version;
        self.count_node(existed, was_tainted, false, false);
        self.release_node_if_unused(id);
    }

    /// The node left this controller's view without being deleted (it no longer matches
    /// `--node-selector`: another shard, or none, owns it now). Unlike a deletion, the pods
    /// stay on a live node whose later taints this controller will never see, so no decision
    /// made on its last taints may stand: every pending eviction of its pods is cancelled
    /// (quietly: nothing about the pod changed) and the node is forgotten.
    pub fn forget_node(&mut self, name: &str, out: &mut Vec<Action>) {
        let Some(&id) = self.node_index.get(name) else {
            return;
        };
        let count = self.node(id).pods.len();
        for i in 0..count {
            let pod = self.node(id).pods[i];
            if let Some(eviction) = self.pod_mut(pod).eviction.take() {
                self.queue.cancel(pod);
                out.push(Action::Cancel {
                    pod: self.pod_ref(pod),
                    eviction: EvictionId(eviction.id),
                    announce: false,
                    reason: CancelReason::NodeLeft,
                });
            }
        }
        self.delete_node(name, Time::MIN, out);
    }

    // === Pods ===

    /// A pod was added or updated. An update that changes neither its tolerations nor its node
    /// is only recorded (phase, deletion state), never re-evaluated, as upstream.
    pub fn upsert_pod(&mut self, obs: PodObservation, now: Time, out: &mut Vec<Action>) {
        if let Some(id) = self.find_pod(&obs.namespace, &obs.name) {
            if self.pod(id).uid == obs.uid {
                self.update_pod(id, obs, now, out);
                return;
            }
            // Same name, new UID: the old pod is gone (its delete event was coalesced away).
            self.cancel(id, CancelReason::PodReplaced, out);
            self.remove_pod(id);
        }
        let id = self.insert_pod(obs);
        self.evaluate_if_tainted(id, now, out);
    }

    fn update_pod(&mut self, id: PodId, obs: PodObservation, now: Time, out: &mut Vec<Action>) {
        let skip_terminal = self.config.skip_terminal_pods;
        let same_tolerations = **self.tolerations.get(self.pod(id).tolerations) == *obs.tolerations;
        let same_node = self.pod_node_name(id) == obs.node_name.as_deref();
        let pod = self.pod_mut(id);
        let policy_changed = pod.excluded != obs.excluded
            || (skip_terminal && pod.phase.is_terminal() != obs.phase.is_terminal());
        pod.phase = obs.phase;
        pod.generation = generation32(obs.generation);
        // A deletion timestamp is never taken back: an observation without one is older than
        // our own delete, or than the one we saw.
        pod.terminating |= obs.terminating;
        pod.excluded = obs.excluded;
        if same_tolerations && same_node && !policy_changed {
            return;
        }
        if !same_tolerations {
            let old = pod.tolerations;
            let new = self.intern_tolerations(&obs.tolerations);
            self.tolerations.release(old);
            self.pod_mut(id).tolerations = new;
        }
        if !same_node {
            // `spec.nodeName` is immutable in a real cluster; only scenarios move pods. An
            // eviction decided for the old node must not follow the pod (upstream would let it).
            self.cancel(id, CancelReason::NodeChanged, out);
            self.unlink_node(id);
            if let Some(node) = obs.node_name.as_deref() {
                self.link_node(id, node);
            }
        }
        self.evaluate_if_tainted(id, now, out);
    }

    /// A pod was deleted. With `uid`, a delete of another incarnation is ignored.
    pub fn delete_pod(
        &mut self,
        namespace: &str,
        name: &str,
        uid: Option<&Uid>,
        _now: Time,
        out: &mut Vec<Action>,
    ) {
        let Some(id) = self.find_pod(namespace, name) else {
            return;
        };
        if uid.is_some_and(|uid| *uid != self.pod(id).uid) {
            return;
        }
        self.cancel(id, CancelReason::PodDeleted, out);
        self.remove_pod(id);
    }

    /// The executor's report on an `Evict`. Reports for evictions that were cancelled or
    /// replaced since are ignored.
    pub fn report(&mut self, report: &Report, now: Time, out: &mut Vec<Action>) {
        let Some(id) = self.find_pod(&report.namespace, &report.name) else {
            return;
        };
        let pod = self.pod_mut(id);
        let Some(eviction) = &mut pod.eviction else {
            return;
        };
        if eviction.id != report.eviction.0 || eviction.stage != Stage::Due {
            return;
        }
        match report.outcome {
            Outcome::Evicted => {
                pod.eviction = None;
                // The delete gave it a deletion timestamp; never delete it a second time.
                pod.terminating = true;
            }
            Outcome::Gone => pod.eviction = None,
            Outcome::Stale { cache_moved } => {
                pod.eviction = None;
                let due_now = self
                    .current_cause(id)
                    .is_none_or(|c| self.due_at_once(&c, now));
                // A fresh read that contradicts a cache which has not moved since is newer than
                // the cache: the watch has the change on its way, and its node update decides
                // the pod again. Deciding again on that cache would only make the same eviction
                // due at once and read the node again, over and over until the watch caught up.
                // A cache that moved after the attempt began may be the newer: decide on it now
                // (an eviction due at once is re-read by the next attempt).
                if !due_now || cache_moved {
                    self.evaluate(id, now, out);
                }
            }
            Outcome::Failed { retry_at } => {
                eviction.stage = Stage::Retrying;
                self.queue.schedule(id, retry_at);
            }
        }
    }

    // === Decisions ===

    fn evaluate_if_tainted(&mut self, id: PodId, now: Time, out: &mut Vec<Action>) {
        let node = self.pod(id).node;
        if node != NO_NODE && self.node(node).taints.is_some() {
            self.evaluate(id, now, out);
        }
    }

    /// Upstream `processPodOnNode`, for a pod on a node with `NoExecute` taints.
    fn evaluate(&mut self, id: PodId, now: Time, out: &mut Vec<Action>) {
        let pod = self.pod(id);
        let Some(taints) = self.node(pod.node).taints.clone() else {
            return;
        };
        if pod.excluded || (self.config.skip_terminal_pods && pod.phase.is_terminal()) {
            self.cancel(id, CancelReason::Excluded, out);
            return;
        }
        let tolerations = self.tolerations.get(pod.tolerations).clone();
        let verdict = verdict(&taints, &tolerations, self.config.comparison_operators);
        let existing = pod.eviction;
        let cause = || Cause {
            taints: taints.clone(),
            tolerations: tolerations.clone(),
            verdict,
        };
        // A delayed eviction decided at this very instant may be replaced (upstream compares
        // `CreatedAt + d` with `now + d`); any earlier one is never moved.
        let replaceable = existing.filter(|e| e.stage == Stage::Waiting && e.created_at >= now);
        match verdict {
            Verdict::Untolerated { .. } => match existing {
                Some(e) if e.stage != Stage::Waiting => {} // already being evicted
                Some(_) => {
                    self.cancel(id, CancelReason::Superseded, out);
                    self.evict_now(id, now, now, cause(), out);
                }
                None => self.evict_now(id, now, now, cause(), out),
            },
            Verdict::Tolerated {
                time: TolerationTime::Forever,
                ..
            } => self.cancel(id, CancelReason::ToleratedForever, out),
            Verdict::Tolerated {
                time: TolerationTime::Immediate,
                ..
            } => match (existing, replaceable) {
                (None, _) => self.evict_now(id, now, now, cause(), out),
                (_, Some(e)) => {
                    self.cancel(id, CancelReason::Rescheduled, out);
                    self.evict_now(id, e.created_at, now, cause(), out);
                }
                _ => {}
            },
            Verdict::Tolerated {
                time: TolerationTime::After(d),
                limit,
            } => {
                let deadline = self.deadline(now, d, limit.and_then(|(t, _)| taints.get(t)));
                match (existing, replaceable) {
                    // Only a deadline measured from `timeAdded` can already have passed.
                    (None, _) if deadline <= now => self.evict_now(id, now, deadline, cause(), out),
                    (None, _) => self.schedule(id, now, deadline, cause(), out),
                    (_, Some(e)) => {
                        self.cancel(id, CancelReason::Rescheduled, out);
                        self.schedule(id, e.created_at, deadline, cause(), out);
                    }
                    _ => {}
                }
            }
        }
    }

    /// When a toleration of `d` for `taint`, decided at `now`, runs out.
    fn deadline(&self, now: Time, d: std::time::Duration, taint: Option<&Taint>) -> Time {
        self.config.deadline(now, d, taint)
    }

    fn new_eviction(&mut self, created_at: Time, deadline: Time, stage: Stage) -> Eviction {
        let id = self.next_eviction;
        self.next_eviction += 1;
        Eviction {
            id,
            created_at,
            deadline,
            stage,
        }
    }

    fn schedule(
        &mut self,
        id: PodId,
        created_at: Time,
        deadline: Time,
        cause: Cause,
        out: &mut Vec<Action>,
    ) {
        let eviction = self.new_eviction(created_at, deadline, Stage::Waiting);
        self.pod_mut(id).eviction = Some(eviction);
        self.queue.schedule(id, deadline);
        out.push(Action::Schedule {
            pod: self.pod_ref(id),
            eviction: EvictionId(eviction.id),
            created_at,
            deadline,
            cause,
        });
    }

    fn evict_now(
        &mut self,
        id: PodId,
        created_at: Time,
        deadline: Time,
        cause: Cause,
        out: &mut Vec<Action>,
    ) {
        let eviction = self.new_eviction(created_at, deadline, Stage::Waiting);
        self.pod_mut(id).eviction = Some(eviction);
        self.fire(id, Some(cause), out);
    }

    /// Hand a due eviction to the executor (or drop it if the pod is already terminating).
    fn fire(&mut self, id: PodId, cause: Option<Cause>, out: &mut Vec<Action>) {
        let pod = self.pod(id);
        let Some(eviction) = pod.eviction else {
            return;
        };
        if pod.terminating {
            self.pod_mut(id).eviction = None;
            out.push(Action::Skip {
                pod: self.pod_ref(id),
                eviction: EvictionId(eviction.id),
                reason: SkipReason::AlreadyTerminating,
            });
            return;
        }
        let cause = cause.or_else(|| self.current_cause(id));
        if let Some(e) = &mut self.pod_mut(id).eviction {
            e.stage = Stage::Due;
        }
        out.push(Action::Evict {
            pod: self.pod_ref(id),
            eviction: EvictionId(eviction.id),
            deadline: eviction.deadline,
            retry: eviction.stage == Stage::Retrying,
            cause,
        });
    }

    /// Why the pod would be evicted given what is known now.
    /// Whether `cause` makes an eviction due at `now`: a taint not tolerated (or for 0 s), or,
    /// with deadlines from `timeAdded`, a countdown already run out.
    fn due_at_once(&self, cause: &Cause, now: Time) -> bool {
        match cause.verdict {
            v if v.is_immediate() => true,
            Verdict::Tolerated {
                time: TolerationTime::After(d),
                limit,
            } => {
                let taint = limit.and_then(|(t, _)| cause.taints.get(t));
                self.config.deadline(now, d, taint) <= now
            }
            _ => false,
        }
    }

    fn current_cause(&self, id: PodId) -> Option<Cause> {
        let pod = self.pod(id);
        if pod.node == NO_NODE {
            return None;
        }
        let taints = self.node(pod.node).taints.clone()?;
        let tolerations = self.tolerations.get(pod.tolerations).clone();
        let verdict = verdict(&taints, &tolerations, self.config.comparison_operators);
        Some(Cause {
            taints,
            tolerations,
            verdict,
        })
    }

    /// Drop the pod's pending eviction, if any. An attempt already in flight cannot be called
    /// back; its report will simply be ignored.
    fn cancel(&mut self, id: PodId, reason: CancelReason, out: &mut Vec<Action>) {
        let Some(eviction) = self.pod_mut(id).eviction.take() else {
            return;
        };
        self.queue.cancel(id);
        let announce = eviction.stage == Stage::Waiting;
        out.push(Action::Cancel {
            pod: self.pod_ref(id),
            eviction: EvictionId(eviction.id),
            announce,
            reason,
        });
    }

    // === Queries ===

    /// Everything known about one pod.
    pub fn pod_view(&self, namespace: &str, name: &str) -> Option<PodView<'_>> {
        let id = self.find_pod(namespace, name)?;
        Some(self.view(id))
    }

    fn view(&self, id: PodId) -> PodView<'_> {
        let pod = self.pod(id);
        PodView {
            pod: self.pod_ref(id),
            tolerations: self.tolerations.get(pod.tolerations),
            phase: pod.phase,
            terminating: pod.terminating,
            excluded: pod.excluded,
            generation: i64::from(pod.generation),
            eviction: pod.eviction.map(|e| EvictionView {
                id: EvictionId(e.id),
                created_at: e.created_at,
                deadline: e.deadline,
                stage: e.stage,
                retry_at: if e.stage == Stage::Retrying {
                    self.queue.deadline(id)
                } else {
                    None
                },
            }),
        }
    }

    /// Every tracked pod, in no particular order.
    pub fn pods(&self) -> impl Iterator<Item = PodView<'_>> + '_ {
        self.pods.iter().map(|(id, _)| self.view(id))
    }

    /// Every pod with a pending eviction, in no particular order.
    pub fn pending(&self) -> impl Iterator<Item = PodView<'_>> + '_ {
        self.pods
            .iter()
            .filter(|(_, p)| p.eviction.is_some())
            .map(|(id, _)| self.view(id))
    }

    /// Number of pending evictions.
    pub fn pending_count(&self) -> usize {
        self.pods
            .iter()
            .filter(|(_, p)| p.eviction.is_some())
            .count()
    }

    /// Number of evictions waiting in the deadline queue (delayed or retrying).
    pub fn queued_count(&self) -> usize {
        self.queue.len()
    }

    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// The `NoExecute` taints the engine holds for a node; `None` for an unknown, deleted or
    /// untainted node.
    pub fn node_taints(&self, name: &str) -> Option<&[Taint]> {
        let id = *self.node_index.get(name)?;
        self.node(id).taints.as_deref()
    }

    /// A stamp that changes whenever the node's taints (or existence) change as observed.
    pub fn node_version(&self, name: &str) -> Option<u64> {
        let id = *self.node_index.get(name)?;
        Some(self.node(id).version)
    }

    /// Whether an add or update of the node has been seen (and no delete since).
    pub fn node_exists(&self, name: &str) -> bool {
        self.node_index
            .get(name)
            .is_some_and(|&id| self.node(id).exists)
    }

    /// Names of the nodes whose add or update was seen (and no delete since).
    pub fn node_names(&self) -> impl Iterator<Item = &str> + '_ {
        self.nodes
            .iter()
            .flatten()
            .filter(|n| n.exists)
            .map(|n| &*n.name)
    }

    /// (nodes that exist, nodes among them with `NoExecute` taints), kept as nodes change.
    pub fn node_counts(&self) -> (usize, usize) {
        (self.existing_nodes, self.tainted_nodes)
    }

    fn count_node(&mut self, existed: bool, was_tainted: bool, exists: bool, tainted: bool) {
        self.existing_nodes = self.existing_nodes + usize::from(exists) - usize::from(existed);
        self.tainted_nodes = self.tainted_nodes + usize::from(tainted) - usize::from(was_tainted);
    }

    /// Number of distinct toleration lists held (interning statistics).
    pub fn distinct_toleration_sets(&self) -> usize {
        self.tolerations.len()
    }

    // === Storage ===

    fn pod(&self, id: PodId) -> &Pod {
        match self.pods.get(id) {
            Some(p) => p,
            None => unreachable!("pod slot {id} is empty"),
        }
    }

    fn pod_mut(&mut self, id: PodId) -> &mut Pod {
        match self.pods.get_mut(id) {
            Some(p) => p,
            None => unreachable!("pod slot {id} is empty"),
        }
    }

    fn node(&self, id: NodeId) -> &Node {
        match &self.nodes[id as usize] {
            Some(n) => n,
            None => unreachable!("node slot {id} is empty"),
        }
    }

    fn node_mut(&mut self, id: NodeId) -> &mut Node {
        match &mut self.nodes[id as usize] {
            Some(n) => n,
            None => unreachable!("node slot {id} is empty"),
        }
    }

    fn pod_node_name(&self, id: PodId) -> Option<&str> {
        let node = self.pod(id).node;
        (node != NO_NODE).then(|| &*self.node(node).name)
    }

    fn pod_ref(&self, id: PodId) -> PodRef {
        let pod = self.pod(id);
        PodRef {
            namespace: self.namespaces.get(pod.namespace).clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            node: (pod.node != NO_NODE).then(|| self.node(pod.node).name.clone()),
        }
    }

    fn hash_key(&self, namespace: &str, name: &str) -> u64 {
        self.hasher.hash_one((namespace, name))
    }

    fn find_pod(&self, namespace: &str, name: &str) -> Option<PodId> {
        let hash = self.hash_key(namespace, name);
        self.pod_index
            .find(hash, |&id| {
                let p = self.pod(id);
                &*p.name == name && &**self.namespaces.get(p.namespace) == namespace
            })
            .copied()
    }

    fn intern_tolerations(&mut self, tolerations: &[Toleration]) -> u32 {
        self.tolerations.acquire(tolerations, |t| Arc::from(t))
    }

    fn insert_pod(&mut self, obs: PodObservation) -> PodId {
        let namespace = self.namespaces.acquire(&*obs.namespace, |n| Arc::from(n));
        let tolerations = self.intern_tolerations(&obs.tolerations);
        let pod = Pod {
            name: Arc::from(obs.name.as_str()),
            uid: obs.uid,
            namespace,
            node: NO_NODE,
            node_slot: 0,
            tolerations,
            phase: obs.phase,
            terminating: obs.terminating,
            excluded: obs.excluded,
            generation: generation32(obs.generation),
            eviction: None,
        };
        let id = self.pods.insert(pod);
        let hash = self.hash_key(&obs.namespace, &obs.name);
        let Engine {
            pod_index,
            pods,
            namespaces,
            hasher,
            ..
        } = self;
        pod_index.insert_unique(hash, id, |&other| match pods.get(other) {
            Some(p) => hasher.hash_one((&**namespaces.get(p.namespace), &*p.name)),
            None => 0,
        });
        if let Some(node) = obs.node_name.as_deref() {
            self.link_node(id, node);
        }
        id
    }

    fn remove_pod(&mut self, id: PodId) {
        self.queue.cancel(id);
        self.unlink_node(id);
        let pod = self.pod(id);
        let (namespace, tolerations) = (pod.namespace, pod.tolerations);
        let hash = self.hash_key(self.namespaces.get(namespace), &pod.name);
        if let Ok(entry) = self.pod_index.find_entry(hash, |&other| other == id) {
            entry.remove();
        }
        self.namespaces.release(namespace);
        self.tolerations.release(tolerations);
        self.pods.remove(id);
    }

    fn intern_node(&mut self, name: &str) -> NodeId {
        if let Some(&id) = self.node_index.get(name) {
            return id;
        }
        let name: Arc<str> = Arc::from(name);
        let node = Node {
            name: name.clone(),
            exists: false,
            taints: None,
            version: 0,
            pods: Vec::new(),
        };
        let id = match self.free_nodes.pop() {
            Some(id) => {
                self.nodes[id as usize] = Some(node);
                id
            }
            None => {
                self.nodes.push(Some(node));
                (self.nodes.len() - 1) as NodeId
            }
        };
        self.node_index.insert(name, id);
        id
    }

    fn release_node_if_unused(&mut self, id: NodeId) {
        let node = self.node(id);
        if node.exists || !node.pods.is_empty() {
            return;
        }
        let name = node.name.clone();
        self.node_index.remove(&*name);
        self.nodes[id as usize] = None;
        self.free_nodes.push(id);
    }

    fn link_node(&mut self, id: PodId, node_name: &str) {
        let node = self.intern_node(node_name);
        let entry = self.node_mut(node);
        entry.pods.push(id);
        let slot = (entry.pods.len() - 1) as u32;
        let pod = self.pod_mut(id);
        pod.node = node;
        pod.node_slot = slot;
    }

    fn unlink_node(&mut self, id: PodId) {
        let pod = self.pod_mut(id);
        let (node, slot) = (pod.node, pod.node_slot);
        if node == NO_NODE {
            return;
        }
        pod.node = NO_NODE;
        let entry = self.node_mut(node);
        entry.pods.swap_remove(slot as usize);
        if let Some(&moved) = entry.pods.get(slot as usize) {
            self.pod_mut(moved).node_slot = slot;
        }
        self.release_node_if_unused(node);
    }
}
