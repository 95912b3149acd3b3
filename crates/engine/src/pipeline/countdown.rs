//! What is counting down: every pending eviction, where it is held and why it is due, as
//! `/status` serves it and `noexecute status` prints it. Bounded: at most `limit` rows are
//! formatted, the earliest deadlines first, whatever the number pending.

use std::collections::BinaryHeap;

use super::{Pipeline, Where};
use crate::action::{Cause, PodRef};
use crate::engine::Stage;
use crate::time::Time;

/// Where a pending eviction is, as [`Pipeline::countdowns`] shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Held {
    /// Counting down to its deadline in the engine.
    Counting,
    /// Due, but this replica may not act (not synced, not leading, or refusing).
    Parked,
    /// Due, held by the rate limits.
    Pacing,
    /// Due, held because the mass-eviction brake is engaged.
    Brake,
    /// Due, waiting for an executor slot (or for an earlier attempt on the pod).
    Queued,
    /// Due, waiting out the handover delay (`--handover-delay`) until `until`.
    Handover { until: Time },
    /// Being evicted now.
    InFlight,
    /// An attempt failed; the next is due at `at`.
    Retrying { at: Option<Time> },
}

impl Held {
    pub fn as_str(&self) -> &'static str {
        match self {
            Held::Counting => "counting",
            Held::Parked => "parked",
            Held::Pacing => "pacing",
            Held::Brake => "brake",
            Held::Queued => "queued",
            Held::Handover { .. } => "handover",
            Held::InFlight => "in-flight",
            Held::Retrying { .. } => "retrying",
        }
    }
}

/// One pending eviction: the pod (and its node), its deadline, where it is held and why.
#[derive(Clone, Debug)]
pub struct Countdown {
    pub pod: PodRef,
    pub deadline: Time,
    pub held: Held,
    /// Failed attempts so far.
    pub failures: u32,
    /// The taint and toleration that make it due (`None` if the node's taints are unknown).
    pub reason: Option<String>,
}

/// The first rows by deadline, and how many the filter kept in all.
#[derive(Clone, Debug)]
pub struct Countdowns {
    pub rows: Vec<Countdown>,
    pub total: usize,
}

/// (deadline, namespace, name, the device eviction's id for a device row).
type Key = (
    Time,
    std::sync::Arc<str>,
    std::sync::Arc<str>,
    Option<crate::observe::EvictionId>,
);

impl Pipeline {
    /// The pending evictions of pods `keep` accepts, the `limit` earliest by deadline (then
    /// pod), with where each is held and why it is due. O(pods × log limit); only the rows
    /// returned are formatted.
    pub fn countdowns(&self, keep: impl Fn(&PodRef) -> bool, limit: usize) -> Countdowns {
        let mut total = 0;
        let mut first: BinaryHeap<Key> = BinaryHeap::new();
        for view in self.engine.pending() {
            if view.eviction.is_none() || !keep(&view.pod) {
                continue;
            }
            let Some(eviction) = view.eviction else {
                continue;
            };
            total += 1;
            let key = (
                eviction.deadline,
                view.pod.namespace.clone(),
                view.pod.name.clone(),
                None,
            );
            push_bounded(&mut first, key, limit);
        }
        // Device evictions (`--device-taints`), counting down or due.
        for (id, tracked) in self.devices.iter() {
            let key = &tracked.pod;
            let pod = super::device_pod_ref(key, self.device_pod_node(key));
            if !keep(&pod) {
                continue;
            }
            total += 1;
            push_bounded(
                &mut first,
                (tracked.eviction.at, pod.namespace, pod.name, Some(id)),
                limit,
            );
        }
        let gate = self.config.engine.comparison_operators;
        let rows = first
            .into_sorted_vec()
            .into_iter()
            .filter_map(|(_, namespace, name, device)| {
                if let Some(id) = device {
                    return self.device_countdown(id);
                }
                let view = self.engine.pod_view(&namespace, &name)?;
                let eviction = view.eviction?;
                let entry = self.entries.get(&eviction.id);
                let node = view.pod.node.as_deref();
                let held = match entry.map(|e| &e.at) {
                    None => match eviction.stage {
                        Stage::Retrying => Held::Retrying {
                            at: eviction.retry_at,
                        },
                        _ => Held::Counting,
                    },
                    Some(at) => self.held_at(at, node, eviction.retry_at),
                };
                let cause = entry.and_then(|e| e.cause.clone()).or_else(|| {
                    let taints = node.and_then(|n| self.engine.node_taints(n))?;
                    let verdict = crate::toleration::verdict(taints, view.tolerations, gate);
                    Some(Cause {
                        taints: taints.into(),
                        tolerations: view.tolerations.into(),
                        verdict,
                    })
                });
                Some(Countdown {
                    pod: view.pod,
                    deadline: eviction.deadline,
                    held,
                    failures: entry.map_or(0, |e| e.failures),
                    reason: cause.map(|c| c.to_string()),
                })
            })
            .collect();
        Countdowns { rows, total }
    }

    /// A device eviction's row: its taints are the reason.
    fn device_countdown(&self, id: crate::observe::EvictionId) -> Option<Countdown> {
        let tracked = self.devices.get(id)?;
        let key = &tracked.pod;
        let node = self.device_pod_node(key);
        let entry = self.entries.get(&id);
        let held = match entry.map(|e| &e.at) {
            None => Held::Counting,
            Some(at) => self.held_at(at, node.as_deref(), tracked.at),
        };
        let reasons: Vec<String> = tracked
            .eviction
            .reasons
            .iter()
            .map(|r| r.to_string())
            .collect();
        Some(Countdown {
            pod: super::device_pod_ref(key, node),
            deadline: tracked.eviction.at,
            held,
            failures: entry.map_or(0, |e| e.failures),
            reason: Some(format!("device taints: {}", reasons.join(", "))),
        })
    }
}

impl Pipeline {
    /// Where a due eviction is held.
    fn held_at(&self, at: &Where, node: Option<&str>, retry_at: Option<Time>) -> Held {
        match at {
            Where::Parked => Held::Parked,
            Where::Deferred(until) => Held::Handover { until: *until },
            Where::Paced | Where::Queued(_) | Where::WaitingForPod
                if self.pacer.brake_holds(node) =>
            {
                Held::Brake
            }
            Where::Paced => Held::Pacing,
            Where::Queued(_) | Where::WaitingForPod => Held::Queued,
            Where::InFlight(_) => Held::InFlight,
            Where::Retrying => Held::Retrying { at: retry_at },
        }
    }
}

fn push_bounded(first: &mut BinaryHeap<Key>, key: Key, limit: usize) {
    if first.len() < limit {
        first.push(key);
    } else if first.peek().is_some_and(|top| key < *top) {
        first.pop();
        first.push(key);
    }
}
