//! One attempt at an eviction: the requests the executor is asked to send (one [`Plan`] of the
//! legal sequences), the stale-cache guard's judgement it applies, and how it ended.
//!
//! The pipeline chooses the plan; the executor only sends what the plan says, fetches what the
//! guard needs and reports. It never judges a taint itself: [`StaleGuard::justifies`] is the
//! engine's verdict function.

use crate::action::{Cause, PodRef};
use crate::engine::Config;
use crate::observe::EvictionId;
use crate::taint::Taint;
use crate::time::Time;
use crate::toleration::{Toleration, TolerationTime, Verdict, verdict};

/// How an eviction ends: a DELETE (upstream's way) or an Eviction (policy/v1), which
/// PodDisruptionBudgets can refuse. The one definition: flags and policy files parse into it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum EvictionMode {
    /// DELETE, as upstream (PodDisruptionBudgets do not apply).
    #[default]
    Delete,
    /// A policy/v1 Eviction, so PodDisruptionBudgets apply; a refusal is retried with backoff.
    Evict,
}

impl EvictionMode {
    /// The names flags and policy files use.
    pub const NAMES: [&'static str; 2] = ["delete", "evict"];

    pub fn as_str(self) -> &'static str {
        match self {
            EvictionMode::Delete => "delete",
            EvictionMode::Evict => "evict",
        }
    }
}

impl std::str::FromStr for EvictionMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "delete" => Ok(EvictionMode::Delete),
            "evict" => Ok(EvictionMode::Evict),
            other => Err(format!(
                "unknown eviction mode {other:?}: expected delete or evict"
            )),
        }
    }
}

/// One attempt's identity; reports name it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttemptId(pub u64);

/// The request that ends a [`Plan::ReadFirst`] attempt.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The condition unless it is there, then DELETE with a UID precondition. `fallback`: the
    /// Eviction API refused for longer than `--pdb-timeout`, so this attempt deletes instead.
    Delete { fallback: bool },
    /// POST an Eviction.
    Evict,
    /// Dry run: read and check, change nothing.
    Nothing,
}

/// The stale-cache guard: before an eviction a pod event decided was due at once (a taint the
/// pod does not tolerate, or a countdown from `timeAdded` already run out), the node is read
/// afresh, and the eviction goes on only if the fresh read still makes it due. The judgement is
/// the engine's verdict and deadline rule, with the engine's own switches.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StaleGuard {
    pub(super) engine: Config,
    /// The eviction is a countdown that ran out on the timer (it starts while the node cache
    /// is known to be stale): with upstream's deadlines, counted from when the controller
    /// first saw the taint, a fresh read cannot recompute it, and a taint the pod still
    /// tolerates for a while keeps it, as upstream keeps a countdown once begun.
    pub(super) countdown: bool,
}

impl StaleGuard {
    /// The guard with the engine's switches (the `Lt`/`Gt` operators, restart-safe deadlines).
    pub fn new(engine: Config) -> StaleGuard {
        StaleGuard {
            engine,
            countdown: false,
        }
    }

    /// The same guard for a countdown that ran out on the timer.
    pub fn with_countdown(self, countdown: bool) -> StaleGuard {
        StaleGuard { countdown, ..self }
    }

    /// Whether the node as read fresh at `now` still justifies evicting a pod with these
    /// tolerations. Only `NoExecute` taints count; none at all justifies nothing. The eviction
    /// is justified by a taint the pod does not tolerate (or tolerates for 0 s), or, with
    /// deadlines from `timeAdded`, by a countdown that has run out (the fault soak found pods
    /// bound just after their node's expired taint was removed, evicted on the stale cache).
    /// A node that no longer matches the controller's node selector (`selected` false)
    /// justifies nothing either: it is another shard's, whatever its taints (the soak found a
    /// leader whose node watch was relisting evict the pods of a node relabelled out of its
    /// shard, on a fresh read that showed the new label).
    pub fn justifies(
        &self,
        selected: bool,
        taints: &[Taint],
        tolerations: &[Toleration],
        now: Time,
    ) -> bool {
        let no_execute: Vec<Taint> = taints
            .iter()
            .filter(|t| t.is_no_execute())
            .cloned()
            .collect();
        if !selected || no_execute.is_empty() {
            return false;
        }
        match verdict(&no_execute, tolerations, self.engine.comparison_operators) {
            v if v.is_immediate() => true,
            Verdict::Tolerated {
                time: TolerationTime::After(d),
                limit,
            } => {
                if self.countdown && !self.engine.deadline_from_time_added {
                    return true;
                }
                let taint = limit.and_then(|(t, _)| no_execute.get(t));
                self.engine.deadline(now, d, taint) <= now
            }
            _ => false,
        }
    }
}

/// The requests of one attempt: the only legal sequences.
#[derive(Clone, Debug, PartialEq)]
pub enum Plan {
    /// The usual first attempt: the condition patch (its answer stands in for a GET), then a
    /// DELETE preconditioned on the UID and the resourceVersion the patch returned.
    PatchThenDelete,
    /// Read the pod first (gone, replaced or terminating ends it), re-read the node if the
    /// guard applies, then finish.
    ReadFirst {
        guard: Option<StaleGuard>,
        finish: Finish,
    },
}

/// One attempt at an eviction, for the executor to carry out and report on.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    pub id: AttemptId,
    pub pod: PodRef,
    pub eviction: EvictionId,
    /// When the eviction was due (for the latency metric).
    pub deadline: Time,
    /// When the pacer was offered it: `start - due_at` is how long pacing held it.
    pub due_at: Time,
    /// The pod's `metadata.generation` as last observed (the condition's `observedGeneration`).
    pub generation: i64,
    /// Why it is evicted, as decided.
    pub cause: Option<Cause>,
    /// A device eviction (`docs/parity.md` §22): the taints behind it. The condition's reason
    /// is then `DeletionByDeviceTaintManager`.
    pub device: Option<crate::device::DeviceEviction>,
    pub plan: Plan,
    /// The term of leadership it was started in: it may write only while that term lasts.
    pub term: u64,
    /// Upstream's "Marking for deletion" event, to record just before the first write (a dry
    /// run records it when it would have written).
    pub announce: Option<crate::action::UpstreamEvent>,
}

impl Attempt {
    /// The stale-cache guard, if it applies.
    pub fn guard(&self) -> Option<StaleGuard> {
        match &self.plan {
            Plan::ReadFirst { guard, .. } => *guard,
            Plan::PatchThenDelete => None,
        }
    }

    /// How it ends.
    pub fn finish(&self) -> Finish {
        match &self.plan {
            Plan::ReadFirst { finish, .. } => *finish,
            Plan::PatchThenDelete => Finish::Delete { fallback: false },
        }
    }

    /// Whether it deletes because the Eviction API refused for longer than `--pdb-timeout`.
    pub fn fallback(&self) -> bool {
        self.finish() == Finish::Delete { fallback: true }
    }
}

/// Why an attempt did not evict and nothing is left to do.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GoneReason {
    NotFound,
    Replaced,
    Terminating,
}

impl GoneReason {
    pub fn as_str(self) -> &'static str {
        match self {
            GoneReason::NotFound => "pod not found",
            GoneReason::Replaced => "pod was replaced (another UID)",
            GoneReason::Terminating => "pod is already terminating",
        }
    }
}

/// How an attempt ended, as the executor saw it.
#[derive(Clone, Debug, PartialEq)]
pub enum AttemptResult {
    Evicted,
    /// Dry run: everything checked, nothing changed.
    WouldEvict,
    /// The stale-cache guard's fresh read of the node does not justify the eviction.
    Stale,
    Gone(GoneReason),
    /// It failed. `refused` is true when the Eviction API answered with a refusal (a budget's
    /// 429, a 500 for a pod under two budgets, a 403, a budget-update 409): those count
    /// towards `--pdb-timeout`.
    Failed {
        error: String,
        refused: bool,
    },
    /// Stopped before its next request: it was cancelled, held before its first write, or its
    /// term ended.
    Cancelled,
}

/// The executor's report on one attempt. Every started attempt is reported exactly once.
#[derive(Clone, Debug, PartialEq)]
pub struct AttemptReport {
    pub attempt: AttemptId,
    pub result: AttemptResult,
}

/// Backoff between failed attempts of one eviction: initial × 2^(n-1), capped, ±25% jitter.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub initial: std::time::Duration,
    pub max: std::time::Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: std::time::Duration::from_millis(200),
            max: std::time::Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The delay after the `failures`-th failure (1-based), given a uniform `jitter` in [0, 1).
    pub fn delay(&self, failures: u32, jitter: f64) -> std::time::Duration {
        let exp = self
            .initial
            .saturating_mul(1u32 << failures.saturating_sub(1).min(20));
        exp.min(self.max)
            .mul_f64(0.75 + 0.5 * jitter.clamp(0.0, 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The guard's judgement of a fresh read: an untolerated NoExecute taint justifies an
    /// eviction, unless the node is another shard's now (the soak's seed-3 finding).
    #[test]
    fn a_node_outside_the_selector_justifies_nothing() {
        let guard = StaleGuard::new(Config::default());
        let taints = vec![Taint::no_execute("k", "v")];
        let now = Time::from_millis(0);
        assert!(guard.justifies(true, &taints, &[], now));
        assert!(!guard.justifies(false, &taints, &[], now));
        assert!(!guard.justifies(true, &[], &[], now));
    }

    /// With deadlines from `timeAdded`, a countdown that ran out justifies the eviction as an
    /// untolerated taint does, and one still running does not (the soak's second seed-3
    /// finding). With upstream's deadlines a countdown starts at the decision: never due.
    #[test]
    fn a_countdown_run_out_from_time_added_justifies_the_eviction() {
        let restart_safe = StaleGuard::new(Config {
            deadline_from_time_added: true,
            ..Config::default()
        });
        let upstream = StaleGuard::new(Config::default());
        let now = Time::from_millis(60_000);
        let taint = |added_ms| {
            let mut t = Taint::no_execute("node.kubernetes.io/unreachable", "");
            t.time_added = Some(Time::from_millis(added_ms));
            vec![t]
        };
        let tolerates_5s =
            [Toleration::exists("node.kubernetes.io/unreachable", None).for_seconds(5)];
        assert!(restart_safe.justifies(true, &taint(50_000), &tolerates_5s, now));
        assert!(restart_safe.justifies(true, &taint(55_000), &tolerates_5s, now));
        assert!(!restart_safe.justifies(true, &taint(56_000), &tolerates_5s, now));
        assert!(!upstream.justifies(true, &taint(50_000), &tolerates_5s, now));
        // Another shard's node justifies nothing, countdown or not.
        assert!(!restart_safe.justifies(false, &taint(50_000), &tolerates_5s, now));
    }
}
