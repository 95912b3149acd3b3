//! The second-controller guard. Upstream's taint eviction controller announces each pod it
//! evicts with an Event (reason `TaintManagerEviction`, "Marking for deletion Pod …") and
//! marks the pod with the `DisruptionTarget` condition, reason `DeletionByTaintManager`, as
//! noexecute does. Either sign, from someone else, about a pod on a node this replica watches,
//! while it leads, means another taint eviction controller is active: almost always
//! kube-controller-manager's own `taint-eviction-controller`, left on. Two controllers double
//! the requests and undo every policy (the brake, exclusions, rate limits), so this is
//! reported loudly, once, and counted for every pod; with `--refuse-if-foreign` the replica
//! stops evicting until it is restarted.
//!
//! The Event is the sign that holds when both controllers race for the same pods: upstream
//! sends it whenever it evicts, even when noexecute marked the pod first (upstream then
//! deletes without marking). The condition catches a controller that sends no such Event, on
//! pods noexecute did not start evicting itself.
//!
//! Pure bookkeeping: the driver feeds it and carries out what it returns.

use std::collections::HashSet;

use noexecute_engine::{Time, Uid};

/// Marks from the first moments of our leadership are not counted: the previous leader's
/// last marks carry times up to its release of the Lease, written in whole seconds by its
/// clock. Marks seen while standing by are remembered and never counted.
const HANDOVER_MS: i64 = 3_000;

#[derive(Debug, Default)]
pub struct Guard {
    /// Pods this replica has started evicting (by UID), until they are gone.
    ours: HashSet<Uid>,
    /// Pods already reported.
    seen: HashSet<Uid>,
    /// Since when this replica leads (`None`: standing by).
    leading_since: Option<Time>,
    warned: bool,
}

/// What the driver must do about a mark.
#[derive(Debug, PartialEq, Eq)]
pub enum Finding {
    /// Not foreign (ours, old, already counted, or we are not leading).
    None,
    /// Foreign: count it.
    Again,
    /// Foreign, and the first: count it and warn loudly.
    First,
}

impl Guard {
    pub fn set_leading(&mut self, leading: bool, now: Time) {
        match (leading, self.leading_since) {
            (true, None) => self.leading_since = Some(now),
            (false, _) => self.leading_since = None,
            _ => {}
        }
    }

    /// This replica started an eviction of `uid`.
    pub fn started(&mut self, uid: &Uid) {
        self.ours.insert(uid.clone());
    }

    /// The pod is gone.
    pub fn forget(&mut self, uid: &Uid) {
        self.ours.remove(uid);
        self.seen.remove(uid);
    }

    /// A pod update shows the taint-manager mark, set at `marked_at`. A pod this replica
    /// started evicting is taken to carry its own mark.
    pub fn marked(&mut self, uid: &Uid, marked_at: Time) -> Finding {
        let ours = self.ours.contains(uid);
        self.judge(uid, marked_at, ours)
    }

    /// Someone else's Event announced, at `at`, that it is evicting the pod for a taint. It
    /// counts whether or not this replica is evicting the pod too.
    pub fn announced(&mut self, uid: &Uid, at: Time) -> Finding {
        self.judge(uid, at, false)
    }

    fn judge(&mut self, uid: &Uid, at: Time, ours: bool) -> Finding {
        let Some(since) = self.leading_since else {
            // Another replica's (or from before): never counted, even once we lead.
            self.seen.insert(uid.clone());
            return Finding::None;
        };
        if ours
            || at.as_millis() < since.as_millis() + HANDOVER_MS
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
    fn only_marks_by_others_while_leading_count_once_each() {
        let t = Time::from_millis;
        let mut g = Guard::default();
        let (a, b, c, d, e) = (
            Uid::new("a"),
            Uid::new("b"),
            Uid::new("c"),
            Uid::new("d"),
            Uid::new("e"),
        );
        assert_eq!(g.marked(&e, t(4_000)), Finding::None, "standing by");
        g.set_leading(true, t(5_000));
        assert_eq!(
            g.marked(&e, t(9_000)),
            Finding::None,
            "seen while standing by: the previous leader's"
        );
        g.started(&b);
        assert_eq!(g.marked(&b, t(9_000)), Finding::None, "our own");
        assert_eq!(g.marked(&c, t(3_000)), Finding::None, "before we led");
        assert_eq!(
            g.marked(&d, t(6_000)),
            Finding::None,
            "the handover: the old leader's last marks, in whole seconds"
        );
        assert_eq!(g.marked(&a, t(9_000)), Finding::First);
        assert_eq!(g.marked(&a, t(9_000)), Finding::None, "the same pod again");
        let f = Uid::new("f");
        assert_eq!(g.marked(&f, t(9_500)), Finding::Again);
        g.forget(&b);
        assert_eq!(
            g.marked(&b, t(10_000)),
            Finding::Again,
            "a new pod with the old uid"
        );
        // Another controller's Event about a pod this replica is evicting too: counted once.
        let h = Uid::new("h");
        g.started(&h);
        assert_eq!(g.marked(&h, t(10_500)), Finding::None, "our own mark");
        assert_eq!(g.announced(&h, t(10_500)), Finding::Again, "their Event");
        assert_eq!(g.announced(&h, t(10_600)), Finding::None, "counted once");
        assert_eq!(
            g.announced(&Uid::new("i"), t(6_000)),
            Finding::None,
            "an Event from the handover"
        );
        g.set_leading(false, t(11_000));
        assert_eq!(
            g.marked(&Uid::new("g"), t(12_000)),
            Finding::None,
            "standing by again"
        );
    }
}
