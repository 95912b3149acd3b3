//! The queue of due evictions the pacer let go, waiting for an executor slot.
//!
//! Fresh evictions and retries wait apart and take turns, so a pod that keeps failing cannot
//! starve the others. Each entry has a sequence number (its place), so a cancel removes it in
//! O(log n); an eviction sent back to the queue after its slot was lost goes to the front.

use std::collections::BTreeMap;

use crate::observe::EvictionId;

/// An entry's place: its sequence number and which line it waits in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Place {
    seq: i64,
    retry: bool,
}

#[derive(Debug)]
pub(super) struct Queue {
    fresh: BTreeMap<i64, EvictionId>,
    retries: BTreeMap<i64, EvictionId>,
    /// The next sequence numbers at the back and (going down) at the front.
    back: i64,
    front: i64,
    retry_turn: bool,
}

impl Default for Queue {
    fn default() -> Self {
        Queue {
            fresh: BTreeMap::new(),
            retries: BTreeMap::new(),
            back: 1,
            front: 0,
            retry_turn: false,
        }
    }
}

impl Queue {
    fn line(&mut self, retry: bool) -> &mut BTreeMap<i64, EvictionId> {
        if retry {
            &mut self.retries
        } else {
            &mut self.fresh
        }
    }

    /// Join at the back.
    pub(super) fn push_back(&mut self, id: EvictionId, retry: bool) -> Place {
        let seq = self.back;
        self.back += 1;
        self.line(retry).insert(seq, id);
        Place { seq, retry }
    }

    /// Join at the front (it already waited its turn once).
    pub(super) fn push_front(&mut self, id: EvictionId, retry: bool) -> Place {
        let seq = self.front;
        self.front -= 1;
        self.line(retry).insert(seq, id);
        Place { seq, retry }
    }

    pub(super) fn remove(&mut self, place: Place) {
        self.line(place.retry).remove(&place.seq);
    }

    /// The next to start: fresh work and retries alternate when both wait.
    pub(super) fn pop(&mut self) -> Option<EvictionId> {
        let take_retry = match (self.fresh.is_empty(), self.retries.is_empty()) {
            (true, true) => return None,
            (false, true) => false,
            (true, false) => true,
            (false, false) => self.retry_turn,
        };
        self.retry_turn = !take_retry;
        self.line(take_retry).pop_first().map(|(_, id)| id)
    }

    /// Take out every entry `take` picks, in queue order.
    pub(super) fn take_where(
        &mut self,
        mut take: impl FnMut(EvictionId) -> bool,
    ) -> Vec<EvictionId> {
        let mut out = Vec::new();
        for line in [&mut self.fresh, &mut self.retries] {
            line.retain(|_, id| {
                let t = take(*id);
                if t {
                    out.push(*id);
                }
                !t
            });
        }
        out
    }

    pub(super) fn is_empty(&self) -> bool {
        self.fresh.is_empty() && self.retries.is_empty()
    }

    pub(super) fn len(&self) -> usize {
        self.fresh.len() + self.retries.len()
    }

    pub(super) fn clear(&mut self) {
        self.fresh.clear();
        self.retries.clear();
    }
}
