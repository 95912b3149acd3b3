//! Device-taint evictions on their way to being due (`docs/parity.md` §22).
//!
//! The device core ([`Devices`]) says when a pod is due because of its devices, and that time
//! follows the objects: it can move earlier or later until it is reached. This module keeps
//! the pipeline's side of that: an [`EvictionId`] per pod the core has pending, and the ones
//! still waiting for their time (or for a retry after a failed attempt). Once due, an
//! eviction is an entry of the pipeline like a node eviction, and goes through the same
//! parking, pacing, queue and attempts.

use std::collections::{BTreeSet, HashMap};

use crate::device::{DeviceEviction, Devices, PodKey};
use crate::observe::EvictionId;
use crate::time::Time;

/// Device eviction ids start here, clear of the engine's, which count up from 1.
const FIRST_ID: u64 = 1 << 63;

/// Whether an eviction id is a device eviction's.
pub fn is_device(id: EvictionId) -> bool {
    id.0 >= FIRST_ID
}

/// A device eviction the pipeline tracks.
#[derive(Clone, Debug)]
pub(super) struct Tracked {
    pub pod: PodKey,
    pub eviction: DeviceEviction,
    /// Waiting until this instant (its time, or its retry); `None` once due.
    pub at: Option<Time>,
}

#[derive(Debug)]
pub(super) struct DeviceEvictions {
    pub core: Devices,
    ids: HashMap<PodKey, EvictionId>,
    tracked: HashMap<EvictionId, Tracked>,
    waiting: BTreeSet<(Time, EvictionId)>,
    next: u64,
}

impl Default for DeviceEvictions {
    fn default() -> Self {
        DeviceEvictions {
            core: Devices::new(),
            ids: HashMap::new(),
            tracked: HashMap::new(),
            waiting: BTreeSet::new(),
            next: FIRST_ID,
        }
    }
}

impl DeviceEvictions {
    /// The pod's eviction, new or updated to `eviction`: its id, and whether it was new.
    pub fn track(&mut self, pod: PodKey, eviction: DeviceEviction) -> EvictionId {
        if let Some(&id) = self.ids.get(&pod) {
            if let Some(t) = self.tracked.get_mut(&id) {
                t.eviction = eviction;
            }
            return id;
        }
        let id = EvictionId(self.next);
        self.next += 1;
        self.ids.insert(pod.clone(), id);
        self.tracked.insert(
            id,
            Tracked {
                pod,
                eviction,
                at: None,
            },
        );
        id
    }

    pub fn get(&self, id: EvictionId) -> Option<&Tracked> {
        self.tracked.get(&id)
    }

    pub fn id_of(&self, pod: &PodKey) -> Option<EvictionId> {
        self.ids.get(pod).copied()
    }

    /// Wait until `at` (replacing any earlier wait).
    pub fn wait_until(&mut self, id: EvictionId, at: Time) {
        self.stop_waiting(id);
        if let Some(t) = self.tracked.get_mut(&id) {
            t.at = Some(at);
            self.waiting.insert((at, id));
        }
    }

    /// No longer waiting (it is due).
    pub fn stop_waiting(&mut self, id: EvictionId) {
        if let Some(t) = self.tracked.get_mut(&id)
            && let Some(at) = t.at.take()
        {
            self.waiting.remove(&(at, id));
        }
    }

    /// Forget the eviction altogether.
    pub fn remove(&mut self, id: EvictionId) -> Option<Tracked> {
        self.stop_waiting(id);
        let t = self.tracked.remove(&id)?;
        self.ids.remove(&t.pod);
        Some(t)
    }

    /// The next instant one is due.
    pub fn next_wake(&self) -> Option<Time> {
        self.waiting.first().map(|(t, _)| *t)
    }

    /// Those due at `now` or before, earliest first, at most `batch`: no longer waiting.
    pub fn take_due(&mut self, now: Time, batch: usize) -> Vec<EvictionId> {
        let mut out = Vec::new();
        while out.len() < batch
            && let Some(&(at, id)) = self.waiting.first()
            && at <= now
        {
            self.waiting.pop_first();
            if let Some(t) = self.tracked.get_mut(&id) {
                t.at = None;
            }
            out.push(id);
        }
        out
    }

    /// Every tracked eviction, with its id.
    pub fn iter(&self) -> impl Iterator<Item = (EvictionId, &Tracked)> {
        self.tracked.iter().map(|(id, t)| (*id, t))
    }

    /// How many are tracked (waiting or due).
    pub fn len(&self) -> usize {
        self.tracked.len()
    }

    /// How many wait for their time or retry.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}
