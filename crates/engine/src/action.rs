//! What the engine says back: actions for the executor, with the reasons behind them.

use std::fmt;
use std::sync::Arc;

use crate::observe::{EvictionId, Uid};
use crate::taint::Taint;
use crate::time::Time;
use crate::toleration::{Toleration, TolerationTime, Verdict};

/// The pod an action is about. Cheap to clone: the strings are shared with the engine.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodRef {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub uid: Uid,
    pub node: Option<Arc<str>>,
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Why a pod is (or would be) evicted: the node's `NoExecute` taints and the pod's tolerations
/// as they were when the decision was made, and the verdict over them.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    pub taints: Arc<[Taint]>,
    pub tolerations: Arc<[Toleration]>,
    pub verdict: Verdict,
}

impl Cause {
    /// The taint that decided: the untolerated one, or the one whose toleration runs out first.
    pub fn taint(&self) -> Option<&Taint> {
        match self.verdict {
            Verdict::Untolerated { taint } => self.taints.get(taint),
            Verdict::Tolerated { limit, .. } => limit.and_then(|(t, _)| self.taints.get(t)),
        }
    }

    /// The toleration whose time runs out first, if the taints are tolerated.
    pub fn toleration(&self) -> Option<&Toleration> {
        match self.verdict {
            Verdict::Untolerated { .. } => None,
            Verdict::Tolerated { limit, .. } => limit.and_then(|(_, t)| self.tolerations.get(t)),
        }
    }
}

/// A sentence for logs, events and the simulator's timeline.
impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.verdict, self.taint()) {
            (Verdict::Untolerated { .. }, Some(taint)) => {
                write!(f, "taint {taint} is not tolerated")
            }
            (Verdict::Tolerated { time, .. }, Some(taint)) => match time {
                TolerationTime::Immediate => {
                    write!(f, "taint {taint} is tolerated for 0s")
                }
                TolerationTime::After(d) => {
                    write!(f, "taint {taint} is tolerated for {}s", d.as_secs())
                }
                TolerationTime::Forever => write!(f, "all taints are tolerated forever"),
            },
            (Verdict::Tolerated { .. }, None) if self.taints.is_empty() => {
                write!(f, "node has no NoExecute taints")
            }
            _ => write!(f, "all taints are tolerated forever"),
        }
    }
}

/// Why a pending eviction was dropped.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CancelReason {
    /// The node no longer has `NoExecute` taints.
    NodeUntainted,
    /// The pod now tolerates every taint forever.
    ToleratedForever,
    /// An immediate eviction replaces the scheduled one.
    Superseded,
    /// Scheduled again at the same instant with a new deadline (upstream's equal-time case).
    Rescheduled,
    /// The pod was deleted.
    PodDeleted,
    /// A pod with the same name but another UID replaced it.
    PodReplaced,
    /// The pod moved to another node (only scenarios can do this; `nodeName` is immutable).
    NodeChanged,
    /// A policy (exclusion, terminal-phase skip) now protects the pod.
    Excluded,
    /// The node left this controller's view (it no longer matches `--node-selector`).
    NodeLeft,
}

impl CancelReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::NodeUntainted => "node no longer has NoExecute taints",
            CancelReason::ToleratedForever => "pod tolerates all taints forever",
            CancelReason::Superseded => "replaced by an immediate eviction",
            CancelReason::Rescheduled => "rescheduled at the same instant",
            CancelReason::PodDeleted => "pod deleted",
            CancelReason::PodReplaced => "pod replaced by a new pod with the same name",
            CancelReason::NodeChanged => "pod moved to another node",
            CancelReason::Excluded => "pod excluded by policy",
            CancelReason::NodeLeft => "node no longer matches --node-selector",
        }
    }
}

/// Why a due eviction was not carried out.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// The pod already has a deletion timestamp; a second delete would only shorten its grace.
    AlreadyTerminating,
}

/// One thing the engine wants done or known.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// An eviction is scheduled for `deadline`. Nothing to do yet; the driver sleeps until
    /// [`crate::Engine::next_deadline`].
    Schedule {
        pod: PodRef,
        eviction: EvictionId,
        created_at: Time,
        deadline: Time,
        cause: Cause,
    },
    /// A pending eviction is dropped. `announce` is true when it was a delayed eviction that
    /// had not fired yet: upstream emits its "Cancelling deletion" event exactly then.
    Cancel {
        pod: PodRef,
        eviction: EvictionId,
        announce: bool,
        reason: CancelReason,
    },
    /// Evict this pod now, and report the outcome. `deadline` is when it was due (for the
    /// latency metric); `retry` is true for attempts after a failure.
    Evict {
        pod: PodRef,
        eviction: EvictionId,
        deadline: Time,
        retry: bool,
        cause: Option<Cause>,
    },
    /// A due eviction was dropped without acting.
    Skip {
        pod: PodRef,
        eviction: EvictionId,
        reason: SkipReason,
    },
}

impl Action {
    pub fn pod(&self) -> &PodRef {
        match self {
            Action::Schedule { pod, .. }
            | Action::Cancel { pod, .. }
            | Action::Evict { pod, .. }
            | Action::Skip { pod, .. } => pod,
        }
    }

    pub fn eviction(&self) -> EvictionId {
        match self {
            Action::Schedule { eviction, .. }
            | Action::Cancel { eviction, .. }
            | Action::Evict { eviction, .. }
            | Action::Skip { eviction, .. } => *eviction,
        }
    }
}

/// A core/v1 Event as upstream's controller records it for an action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamEvent {
    /// Always `Normal` for taint eviction.
    pub type_: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// The event reason upstream uses for both of its events.
pub const EVENT_REASON: &str = "TaintManagerEviction";

impl Action {
    /// The event upstream records for this action: "Marking for deletion" when an eviction
    /// fires (once per eviction, not per retry), "Cancelling deletion" when a delayed eviction
    /// that had not fired is cancelled. Other actions record nothing.
    pub fn upstream_event(&self) -> Option<UpstreamEvent> {
        let (pod, verb) = match self {
            Action::Evict {
                pod, retry: false, ..
            } => (pod, "Marking for deletion"),
            Action::Cancel {
                pod,
                announce: true,
                ..
            } => (pod, "Cancelling deletion of"),
            _ => return None,
        };
        Some(UpstreamEvent {
            type_: "Normal",
            reason: EVENT_REASON,
            message: format!("{verb} Pod {}/{}", pod.namespace, pod.name),
        })
    }
}
