//! The second-controller guard's bookkeeping. Upstream's taint eviction controller announces
//! each pod it evicts with an Event (reason `TaintManagerEviction`, "Marking for deletion Pod
//! …") and marks the pod with the `DisruptionTarget` condition, reason
//! `DeletionByTaintManager`, as noexecute does. Either sign from someone else, about a pod on
//! a tainted node this controller watches, while it leads, means another taint eviction
//! controller is active: almost always kube-controller-manager's own, left on.
//!
//! What is *ours* is decided here, never in the shell: an Event naming our Lease (every
//! replica of ours writes its Lease into its Events), a mark on a pod this replica started
//! evicting, or a sign made before our term began (a predecessor's last marks and Events,
//! which are fenced by their own term and reach us late; the condition's time has whole
//! seconds, hence a short handover allowance). The pipeline feeds it and turns its findings
//! into [`super::Effect::Foreign`] (and, with `refuse_if_foreign`, stops acting).

use std::collections::{HashMap, HashSet, VecDeque};

use crate::observe::Uid;
use crate::time::Time;

/// How long a deleted pod is remembered for signs that reach us after its deletion: under
/// load, another controller's "Marking for deletion" Event can arrive after the pod watch
/// delivered the deletion it announced.
pub const DEPARTED_MS: i64 = 30_000;

/// At most this many deleted pods are remembered (the oldest go first).
pub const DEPARTED_MAX: usize = 10_000;

/// Signs dated within this of our term's start are a predecessor's: the condition's
/// `lastTransitionTime` has whole seconds, and two replicas' clocks differ a little.
pub const HANDOVER_MS: i64 = 3_000;

/// Which sign of another controller was seen.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SignKind {
    /// The pod carries the taint manager's `DisruptionTarget` condition.
    Mark,
    /// A "Marking for deletion" Event about the pod.
    Announcement,
}

/// A sign that some taint eviction controller is evicting a pod.
#[derive(Clone, Debug, PartialEq)]
pub struct ForeignSign {
    pub namespace: String,
    pub name: String,
    pub kind: SignKind,
    /// When the sign was made (the condition's `lastTransitionTime`, the Event's last
    /// timestamp), on the pipeline's clock.
    pub at: Time,
    /// The Lease the sign names (noexecute's Events carry theirs); `None` for upstream's.
    pub lease: Option<String>,
    /// Who made it, as the sign says (for the warning).
    pub writer: String,
}

/// What the guard concluded about a sign.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Finding {
    /// Not foreign (ours, old, already counted, or we are not leading).
    None,
    /// Foreign: count it.
    Again,
    /// Foreign, and the first: count it and warn loudly.
    First,
}

/// A pod the watch saw deleted, as the guard remembers it for [`DEPARTED_MS`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Departed {
    pub(super) uid: Uid,
    /// Whether it was on a node with `NoExecute` taints when it was deleted.
    pub(super) watched: bool,
    /// Which departure made this entry (a name can go twice within the window).
    seq: u64,
}

#[derive(Debug, Default)]
pub(super) struct Guard {
    /// Pods this replica has started evicting (by UID), until [`DEPARTED_MS`] after they are
    /// gone.
    ours: HashSet<Uid>,
    /// Pods already judged.
    seen: HashSet<Uid>,
    /// Pods deleted lately, by namespace and name, and the order they went in.
    departed: HashMap<(String, String), Departed>,
    departures: VecDeque<(Time, u64, (String, String))>,
    next_departure: u64,
    /// Since when this replica's term runs (`None`: standing by).
    leading_since: Option<Time>,
    warned: bool,
}

impl Guard {
    pub(super) fn set_leading(&mut self, leading: bool, now: Time) {
        match (leading, self.leading_since) {
            (true, None) => self.leading_since = Some(now),
            (false, _) => self.leading_since = None,
            _ => {}
        }
    }

    /// This replica started an eviction of `uid`.
    pub(super) fn started(&mut self, uid: &Uid) {
        self.ours.insert(uid.clone());
    }

    /// The pod is gone (deleted, replaced, or missing from a relist).
    pub(super) fn forget(&mut self, uid: &Uid) {
        self.ours.remove(uid);
        self.seen.remove(uid);
    }

    /// The watch saw the pod deleted: remember it for late signs, then forget it.
    pub(super) fn departed(
        &mut self,
        namespace: &str,
        name: &str,
        uid: Uid,
        watched: bool,
        now: Time,
    ) {
        self.expire(now);
        let key = (namespace.to_string(), name.to_string());
        let seq = self.next_departure;
        self.next_departure += 1;
        if let Some(old) = self
            .departed
            .insert(key.clone(), Departed { uid, watched, seq })
        {
            // The same name went twice within the window: the older pod is forgotten now.
            self.ours.remove(&old.uid);
            self.seen.remove(&old.uid);
        }
        self.departures.push_back((now, seq, key));
        while self.departures.len() > DEPARTED_MAX {
            self.drop_oldest();
        }
    }

    /// A pod deleted lately under this name, if any.
    pub(super) fn departed_pod(
        &mut self,
        namespace: &str,
        name: &str,
        now: Time,
    ) -> Option<Departed> {
        self.expire(now);
        self.departed
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// Forget the pods deleted [`DEPARTED_MS`] or more before `now`.
    pub(super) fn expire(&mut self, now: Time) {
        while self
            .departures
            .front()
            .is_some_and(|(at, _, _)| now.as_millis() >= at.as_millis().saturating_add(DEPARTED_MS))
        {
            self.drop_oldest();
        }
    }

    fn drop_oldest(&mut self) {
        let Some((_, seq, key)) = self.departures.pop_front() else {
            return;
        };
        // Only the entry this departure made: a later one under the same name stays.
        if self.departed.get(&key).is_some_and(|d| d.seq == seq)
            && let Some(d) = self.departed.remove(&key)
        {
            self.ours.remove(&d.uid);
            self.seen.remove(&d.uid);
        }
    }

    /// Pods remembered (for the footprint).
    pub(super) fn len(&self) -> usize {
        self.ours.len() + self.seen.len() + self.departed.len()
    }

    /// Judge a sign about the pod `uid`, made at `at`, from someone other than our Lease. A
    /// mark on a pod this replica started evicting is taken to be its own.
    pub(super) fn judge(&mut self, uid: &Uid, kind: SignKind, at: Time) -> Finding {
        let Some(since) = self.leading_since else {
            // Another replica's (or from before): never counted, even once we lead.
            self.seen.insert(uid.clone());
            return Finding::None;
        };
        let ours = kind == SignKind::Mark && self.ours.contains(uid);
        if ours
            || at.as_millis() < since.as_millis().saturating_add(HANDOVER_MS)
            || !self.seen.insert(uid.clone())
        {
            return Finding::None;
        }
        if self.warned {
            Finding::Again
        } else {
            self.warned = true;
            Finding::First
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_signs_by_others_while_leading_count_once_each() {
        let t = Time::from_millis;
        let mark = SignKind::Mark;
        let event = SignKind::Announcement;
        let mut g = Guard::default();
        let u = Uid::new;
        assert_eq!(
            g.judge(&u("e"), mark, t(4_000)),
            Finding::None,
            "standing by"
        );
        g.set_leading(true, t(5_000));
        assert_eq!(
            g.judge(&u("e"), mark, t(9_000)),
            Finding::None,
            "seen while standing by: the previous leader's"
        );
        g.started(&u("b"));
        assert_eq!(g.judge(&u("b"), mark, t(9_000)), Finding::None, "our own");
        assert_eq!(
            g.judge(&u("c"), mark, t(3_000)),
            Finding::None,
            "before we led"
        );
        assert_eq!(
            g.judge(&u("d"), mark, t(6_000)),
            Finding::None,
            "the handover: the old leader's last marks, in whole seconds"
        );
        assert_eq!(g.judge(&u("a"), mark, t(9_000)), Finding::First);
        assert_eq!(g.judge(&u("a"), mark, t(9_000)), Finding::None, "again");
        assert_eq!(g.judge(&u("f"), mark, t(9_500)), Finding::Again);
        g.forget(&u("b"));
        assert_eq!(
            g.judge(&u("b"), mark, t(10_000)),
            Finding::Again,
            "a new pod with the old uid"
        );
        // Another controller's Event about a pod this replica is evicting too: counted once.
        g.started(&u("h"));
        assert_eq!(g.judge(&u("h"), mark, t(10_500)), Finding::None, "our mark");
        assert_eq!(g.judge(&u("h"), event, t(10_500)), Finding::Again, "theirs");
        assert_eq!(g.judge(&u("h"), event, t(10_600)), Finding::None, "once");
        g.set_leading(false, t(11_000));
        assert_eq!(
            g.judge(&u("g"), mark, t(12_000)),
            Finding::None,
            "standing by"
        );
    }
}
