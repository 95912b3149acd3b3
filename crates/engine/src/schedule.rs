//! The deadline queue: every pending eviction, ordered by when it is due.
//!
//! Upstream arms one timer (a goroutine) per pod. We keep one indexed binary min-heap instead,
//! so the driver sleeps on a single "next deadline", and scheduling, cancelling and popping are
//! all O(log n). Items are dense `u32` ids (the engine's pod slots); the queue remembers where
//! each item sits in the heap so that cancelling needs no search.
//!
//! Ties are broken by insertion order, so evictions due at the same instant fire in the order
//! they were scheduled, which keeps every run of the engine reproducible.

use crate::time::Time;

const ABSENT: u32 = u32::MAX;

#[derive(Copy, Clone, Debug)]
struct Entry {
    at: Time,
    seq: u32,
    item: u32,
}

impl Entry {
    fn before(&self, other: &Entry) -> bool {
        (self.at, self.seq) < (other.at, other.seq)
    }
}

/// A min-heap of `(deadline, item)` with at most one deadline per item.
#[derive(Debug, Default, Clone)]
pub struct DeadlineQueue {
    heap: Vec<Entry>,
    /// `position[item]` is the item's index in `heap`, or `ABSENT`.
    position: Vec<u32>,
    next_seq: u32,
}

impl DeadlineQueue {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The earliest deadline, which is what the driver should sleep until.
    pub fn next_deadline(&self) -> Option<Time> {
        self.heap.first().map(|e| e.at)
    }

    /// The deadline of `item`, if it is queued.
    pub fn deadline(&self, item: u32) -> Option<Time> {
        match self.position.get(item as usize) {
            Some(&p) if p != ABSENT => Some(self.heap[p as usize].at),
            _ => None,
        }
    }

    pub fn contains(&self, item: u32) -> bool {
        self.deadline(item).is_some()
    }

    /// Queue `item` at `at`, replacing any deadline it already had.
    pub fn schedule(&mut self, item: u32, at: Time) {
        self.cancel(item);
        if self.next_seq == u32::MAX {
            self.renumber();
        }
        let entry = Entry {
            at,
            seq: self.next_seq,
            item,
        };
        self.next_seq += 1;
        let index = item as usize;
        if self.position.len() <= index {
            self.position.resize(index + 1, ABSENT);
        }
        self.heap.push(entry);
        let last = self.heap.len() - 1;
        self.set_position(last);
        self.sift_up(last);
    }

    /// Remove `item`; returns the deadline it had.
    pub fn cancel(&mut self, item: u32) -> Option<Time> {
        let p = *self.position.get(item as usize)?;
        if p == ABSENT {
            return None;
        }
        Some(self.remove_at(p as usize).at)
    }

    /// Pop the earliest item if it is due at or before `now`.
    pub fn pop_due(&mut self, now: Time) -> Option<(u32, Time)> {
        match self.heap.first() {
            Some(e) if e.at <= now => {
                let e = self.remove_at(0);
                Some((e.item, e.at))
            }
            _ => None,
        }
    }

    fn remove_at(&mut self, index: usize) -> Entry {
        let removed = self.heap.swap_remove(index);
        self.position[removed.item as usize] = ABSENT;
        if index < self.heap.len() {
            self.set_position(index);
            let index = self.sift_up(index);
            self.sift_down(index);
        }
        if self.heap.is_empty() {
            self.next_seq = 0;
        }
        removed
    }

    fn set_position(&mut self, index: usize) {
        let item = self.heap[index].item as usize;
        // Heap indices fit in u32 because items are u32 and each is queued at most once.
        self.position[item] = index as u32;
    }

    fn sift_up(&mut self, mut index: usize) -> usize {
        while index > 0 {
            let parent = (index - 1) / 2;
            if !self.heap[index].before(&self.heap[parent]) {
                break;
            }
            self.heap.swap(index, parent);
            self.set_position(index);
            self.set_position(parent);
            index = parent;
        }
        index
    }

    fn sift_down(&mut self, mut index: usize) {
        let len = self.heap.len();
        loop {
            let left = 2 * index + 1;
            if left >= len {
                break;
            }
            let right = left + 1;
            let child = if right < len && self.heap[right].before(&self.heap[left]) {
                right
            } else {
                left
            };
            if !self.heap[child].before(&self.heap[index]) {
                break;
            }
            self.heap.swap(index, child);
            self.set_position(index);
            self.set_position(child);
            index = child;
        }
    }

    /// Sequence numbers ran out: renumber in heap order, which keeps the relative order of
    /// entries with equal deadlines.
    fn renumber(&mut self) {
        let mut order: Vec<usize> = (0..self.heap.len()).collect();
        order.sort_by_key(|&i| (self.heap[i].at, self.heap[i].seq));
        for (seq, i) in order.into_iter().enumerate() {
            self.heap[i].seq = seq as u32;
        }
        self.next_seq = self.heap.len() as u32;
    }

    /// Bytes this queue holds on the heap, for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.heap.capacity() * std::mem::size_of::<Entry>()
            + self.position.capacity() * std::mem::size_of::<u32>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(q: &mut DeadlineQueue, now: i64) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some((item, _)) = q.pop_due(Time::from_secs(now)) {
            out.push(item);
        }
        out
    }

    #[test]
    fn pops_in_deadline_then_insertion_order() {
        let mut q = DeadlineQueue::new();
        q.schedule(3, Time::from_secs(5));
        q.schedule(1, Time::from_secs(2));
        q.schedule(2, Time::from_secs(5));
        q.schedule(0, Time::from_secs(9));
        assert_eq!(q.next_deadline(), Some(Time::from_secs(2)));
        assert_eq!(drain(&mut q, 1), Vec::<u32>::new());
        assert_eq!(drain(&mut q, 5), vec![1, 3, 2]);
        assert_eq!(drain(&mut q, 100), vec![0]);
        assert!(q.is_empty());
    }

    #[test]
    fn cancel_and_reschedule() {
        let mut q = DeadlineQueue::new();
        for i in 0..10 {
            q.schedule(i, Time::from_secs(i64::from(i)));
        }
        assert_eq!(q.cancel(4), Some(Time::from_secs(4)));
        assert_eq!(q.cancel(4), None);
        assert_eq!(q.cancel(99), None);
        q.schedule(7, Time::from_secs(0));
        assert_eq!(q.deadline(7), Some(Time::from_secs(0)));
        assert_eq!(drain(&mut q, 100), vec![0, 7, 1, 2, 3, 5, 6, 8, 9]);
    }

    #[test]
    fn renumbering_keeps_order() {
        let mut q = DeadlineQueue::new();
        q.next_seq = u32::MAX - 2;
        for i in 0..6 {
            q.schedule(i, Time::from_secs(1));
        }
        assert_eq!(drain(&mut q, 1), vec![0, 1, 2, 3, 4, 5]);
    }
}
