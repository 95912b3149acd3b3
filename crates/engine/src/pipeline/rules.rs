//! When a DeviceTaintRule's `EvictionInProgress` condition is written (`docs/parity.md`
//! §22.7): what upstream's work queue does, as a state machine.
//!
//! A rule is looked at at once when it is new or its spec changed (its generation), and
//! 10 s after a pod was decided or evicted because of it. A look writes only if the condition
//! changed, and not within 10 s of the last write for the same generation (the condition's
//! `lastTransitionTime` tells), in which case it looks again then. The condition itself is the
//! device core's ([`crate::device::Devices::rule_condition`]).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::device::RuleCondition;
use crate::observe::Uid;
use crate::time::Time;

/// Upstream's `ruleStatusPeriod`.
pub const RULE_STATUS_PERIOD: Duration = Duration::from_secs(10);

/// The `EvictionInProgress` condition as a rule carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenCondition {
    pub status: bool,
    pub reason: String,
    pub message: String,
    pub observed_generation: i64,
    /// On the pipeline's clock.
    pub last_transition: Time,
}

/// What the rule watch shows of a rule's status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleStatus {
    pub generation: i64,
    pub condition: Option<WrittenCondition>,
}

/// A condition to write on a rule (server-side apply of its status, forced, as upstream's
/// field manager), in a term of leadership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleWrite {
    pub rule: String,
    pub uid: Uid,
    pub generation: i64,
    pub condition: RuleCondition,
    /// `lastTransitionTime`, on the pipeline's clock.
    pub at: Time,
    pub term: u64,
}

#[derive(Clone, Debug)]
struct Tracked {
    uid: Uid,
    status: RuleStatus,
    /// When to look next.
    due: Option<Time>,
}

#[derive(Debug, Default)]
pub(super) struct RuleStatuses {
    rules: BTreeMap<String, Tracked>,
}

impl RuleStatuses {
    /// The rule as watched: new, another instance, or a new generation is looked at now.
    pub fn observed(&mut self, name: &str, uid: &Uid, status: RuleStatus, now: Time) {
        match self.rules.get_mut(name) {
            Some(t) if t.uid == *uid => {
                if status.generation != t.status.generation {
                    t.due = Some(now);
                }
                t.status = status;
            }
            _ => {
                self.rules.insert(
                    name.to_owned(),
                    Tracked {
                        uid: uid.clone(),
                        status,
                        due: Some(now),
                    },
                );
            }
        }
    }

    pub fn deleted(&mut self, name: &str) {
        self.rules.remove(name);
    }

    /// A pod was decided or evicted because of the rule: look again in 10 s at the latest.
    pub fn touched(&mut self, name: &str, now: Time) {
        if let Some(t) = self.rules.get_mut(name) {
            let at = now.plus(RULE_STATUS_PERIOD);
            t.due = Some(t.due.map_or(at, |d| d.min(at)));
        }
    }

    /// The earliest look due.
    pub fn next_wake(&self) -> Option<Time> {
        self.rules.values().filter_map(|t| t.due).min()
    }

    /// The rules to look at by `now`.
    pub fn due(&self, now: Time) -> Vec<String> {
        self.rules
            .iter()
            .filter(|(_, t)| t.due.is_some_and(|d| d <= now))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Look at the rule with its condition `computed` now: a write, or none (and maybe a
    /// later look).
    pub fn look(
        &mut self,
        name: &str,
        computed: Option<RuleCondition>,
        now: Time,
        term: u64,
    ) -> Option<RuleWrite> {
        let t = self.rules.get_mut(name)?;
        t.due = None;
        let generation = t.status.generation;
        if let Some(written) = &t.status.condition
            && written.observed_generation == generation
        {
            let next = written.last_transition.plus(RULE_STATUS_PERIOD);
            if next > now {
                t.due = Some(next);
                return None;
            }
        }
        let computed = computed?;
        let same = t.status.condition.as_ref().is_some_and(|w| {
            w.status == computed.status
                && w.reason == computed.reason
                && w.message == computed.message
                && w.observed_generation == generation
        });
        if same {
            return None;
        }
        // As the watch will show it once written (a failed write forgets it).
        t.status.condition = Some(WrittenCondition {
            status: computed.status,
            reason: computed.reason.to_owned(),
            message: computed.message.clone(),
            observed_generation: generation,
            last_transition: now,
        });
        Some(RuleWrite {
            rule: name.to_owned(),
            uid: t.uid.clone(),
            generation,
            condition: computed,
            at: now,
            term,
        })
    }

    /// A write failed: look again after a while, whatever the rule shows.
    pub fn failed(&mut self, name: &str, uid: &Uid, now: Time) {
        if let Some(t) = self.rules.get_mut(name)
            && t.uid == *uid
        {
            t.status.condition = None;
            t.due = Some(now.plus(Duration::from_secs(1)));
        }
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }
}
