//! Pacing of due evictions: the opt-in rate limits (overall and per node) and the
//! mass-eviction brake.
//!
//! The engine decides *that* a pod must go and when it is due; the [`Pacer`] decides when a
//! due eviction may start. With nothing configured it lets everything through at once, which
//! is upstream's behaviour. Like the engine it is pure and deterministic: time comes in as an
//! argument, and the live controller and the simulator drive the same code.
//!
//! - **Rate limits** are token buckets: `per_second` tokens a second, up to `burst` saved.
//!   Every eviction takes a token from the overall bucket and one from its node's bucket.
//! - **Order:** among the evictions whose node may go, the one due first (then the older
//!   eviction) starts first. A node out of tokens never holds up other nodes.
//! - **The brake:** while more than `threshold_percent` of the known nodes carry `NoExecute`
//!   taints (and at least `min_tainted_nodes` do), nothing starts, except on nodes an operator
//!   released one by one. Evictions that were held are not lost: they start, paced, as soon
//!   as the brake lets go, or are dropped when the engine cancels them.
//!
//! Costs: O(log n) per eviction offered, started or cancelled; engaging or releasing the brake
//! is O(nodes with held evictions).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use crate::observe::EvictionId;
use crate::time::Time;

/// A token bucket's settings.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Rate {
    /// Tokens added per second (> 0).
    pub per_second: f64,
    /// Tokens that can be saved up (≥ 1); a full bucket lets this many start at once.
    pub burst: u32,
}

/// The mass-eviction brake's settings.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Brake {
    /// Evictions pause while more than this percentage of nodes carry `NoExecute` taints.
    pub threshold_percent: f64,
    /// ... and at least this many nodes are tainted (so one tainted node of a tiny cluster
    /// does not stop everything).
    pub min_tainted_nodes: usize,
}

/// What paces evictions; the default paces nothing.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct PaceConfig {
    /// Overall evictions per second.
    pub rate: Option<Rate>,
    /// Evictions per second on any one node.
    pub node_rate: Option<Rate>,
    pub brake: Option<Brake>,
}

impl PaceConfig {
    /// Whether anything is paced at all.
    pub fn is_active(&self) -> bool {
        self.rate.is_some() || self.node_rate.is_some() || self.brake.is_some()
    }
}

/// The brake engaged or let go; the caller records it (event, metric, log).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BrakeChange {
    Engaged {
        tainted: usize,
        nodes: usize,
        /// (published devices, `NoExecute`-tainted devices), with `--device-taints`.
        devices: (usize, usize),
    },
    Released {
        tainted: usize,
        nodes: usize,
        devices: (usize, usize),
    },
}

/// A token bucket: `rate.per_second` tokens a second, at most `rate.burst` saved. The one
/// bucket of the project: the pacer's rate limits and the live controller's client-side QPS
/// limit (which reserves tokens ahead, going into debt) both count with it.
#[derive(Copy, Clone, Debug)]
pub struct Bucket {
    tokens: f64,
    at: Time,
}

impl Bucket {
    /// A bucket with every token saved, as of `now`.
    pub fn full(rate: &Rate, now: Time) -> Bucket {
        Bucket {
            tokens: f64::from(rate.burst.max(1)),
            at: now,
        }
    }

    /// Add what `now` brings since the last refill, up to the burst.
    pub fn refill(&mut self, rate: &Rate, now: Time) {
        if now > self.at {
            let elapsed = (now.as_millis() - self.at.as_millis()) as f64 / 1000.0;
            self.tokens =
                (self.tokens + elapsed * rate.per_second).min(f64::from(rate.burst.max(1)));
            self.at = now;
        }
    }

    /// Tokens saved (negative: owed by reservations ahead).
    pub fn tokens(&self) -> f64 {
        self.tokens
    }

    /// Take `n` tokens at `now`, going into debt for what is not there yet; when the last of
    /// them is due (`now` if they were all there). Reservations are served in the order made.
    pub fn reserve(&mut self, rate: &Rate, now: Time, n: f64) -> Time {
        self.refill(rate, now);
        self.tokens -= n;
        if self.tokens >= 0.0 {
            return now;
        }
        let ms = (-self.tokens * 1000.0 / rate.per_second).ceil();
        Time::from_millis(
            self.at
                .as_millis()
                .saturating_add(ms.min(i64::MAX as f64) as i64),
        )
    }

    /// Give `n` reserved tokens back (a wait that was cancelled), up to the burst.
    pub fn give_back(&mut self, rate: &Rate, n: f64) {
        self.tokens = (self.tokens + n).min(f64::from(rate.burst.max(1)));
    }

    /// When the bucket holds a whole token (after refilling to `self.at`).
    pub fn ready_at(&self, rate: &Rate) -> Time {
        if self.tokens >= 1.0 {
            return self.at;
        }
        let ms = ((1.0 - self.tokens) * 1000.0 / rate.per_second).ceil();
        Time::from_millis(
            self.at
                .as_millis()
                .saturating_add(ms.min(i64::MAX as f64) as i64),
        )
    }
}

/// A node's held evictions, due first first.
#[derive(Debug)]
struct NodeQueue {
    items: BTreeSet<(Time, EvictionId)>,
    bucket: Option<Bucket>,
}

type Key = Option<Arc<str>>;

/// Holds due evictions (with a payload `T` for the caller) until they may start.
#[derive(Debug)]
pub struct Pacer<T> {
    config: PaceConfig,
    held: HashMap<EvictionId, (Key, Time, T)>,
    queues: HashMap<Key, NodeQueue>,
    /// The head of every node queue that may start now as far as its own node goes.
    ready: BTreeSet<(Time, EvictionId, Key)>,
    /// Nodes out of tokens, by when they have one again.
    cooling: BTreeSet<(Time, Key)>,
    cooling_at: HashMap<Key, Time>,
    /// Empty node queues whose bucket is not full yet, by when it will be: forgotten then, so
    /// node churn cannot grow the map.
    idle: BTreeSet<(Time, Key)>,
    overall: Option<Bucket>,
    braking: bool,
    released: HashSet<Arc<str>>,
    release_all: bool,
    counts: (usize, usize),
    /// (published devices, tainted devices).
    device_counts: (usize, usize),
}

impl<T> Pacer<T> {
    pub fn new(config: PaceConfig) -> Pacer<T> {
        Pacer {
            config,
            held: HashMap::new(),
            queues: HashMap::new(),
            ready: BTreeSet::new(),
            cooling: BTreeSet::new(),
            cooling_at: HashMap::new(),
            idle: BTreeSet::new(),
            overall: None,
            braking: false,
            released: HashSet::new(),
            release_all: false,
            counts: (0, 0),
            device_counts: (0, 0),
        }
    }

    pub fn config(&self) -> &PaceConfig {
        &self.config
    }

    /// Whether the brake holds now.
    pub fn braking(&self) -> bool {
        self.braking
    }

    /// Whether this eviction is held.
    pub fn holds(&self, eviction: EvictionId) -> bool {
        self.held.contains_key(&eviction)
    }

    /// Node queues kept (held evictions or a bucket still refilling).
    pub fn queue_count(&self) -> usize {
        self.queues.len()
    }

    /// Evictions held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Evictions held only by the brake (their node is neither released nor cooling).
    pub fn held_by_brake(&self) -> usize {
        self.queues
            .iter()
            .filter(|(k, _)| self.brake_holds(k.as_deref()))
            .map(|(_, q)| q.items.len())
            .sum()
    }

    /// The (nodes, tainted nodes) counts last given to [`Pacer::set_node_counts`].
    pub fn node_counts(&self) -> (usize, usize) {
        self.counts
    }

    /// The share of nodes with `NoExecute` taints, in percent, from the last counts.
    pub fn tainted_percent(&self) -> f64 {
        let (nodes, tainted) = self.counts;
        if nodes == 0 {
            0.0
        } else {
            tainted as f64 * 100.0 / nodes as f64
        }
    }

    /// The brake's threshold in percent (0 without a brake).
    pub fn brake_threshold(&self) -> f64 {
        self.config.brake.map_or(0.0, |b| b.threshold_percent)
    }

    /// Whether the brake lets this node's evictions start.
    fn node_open(&self, key: &Key) -> bool {
        !self.brake_holds(key.as_deref())
    }

    /// A due eviction of a pod on `node`; `deadline` orders it among the others.
    pub fn offer(
        &mut self,
        eviction: EvictionId,
        node: Option<Arc<str>>,
        deadline: Time,
        payload: T,
    ) {
        if self.held.contains_key(&eviction) {
            return;
        }
        let queue = self
            .queues
            .entry(node.clone())
            .or_insert_with(|| NodeQueue {
                items: BTreeSet::new(),
                bucket: None,
            });
        let old_head = queue.items.first().copied();
        queue.items.insert((deadline, eviction));
        let new_head = queue.items.first().copied();
        self.held
            .insert(eviction, (node.clone(), deadline, payload));
        if old_head != new_head {
            self.requeue_head(&node, old_head);
        }
    }

    /// The engine cancelled the eviction (or the pod went away): drop it if held.
    pub fn cancel(&mut self, eviction: EvictionId) -> Option<T> {
        let (node, deadline, payload) = self.held.remove(&eviction)?;
        let mut empty = false;
        let mut old_head = None;
        if let Some(queue) = self.queues.get_mut(&node) {
            old_head = queue.items.first().copied();
            queue.items.remove(&(deadline, eviction));
            empty = queue.items.is_empty();
        }
        if old_head == Some((deadline, eviction)) {
            self.requeue_head(&node, old_head);
        }
        if empty {
            self.drop_queue_if_idle(&node);
        }
        Some(payload)
    }

    /// Put a node's head back in `ready` after it changed (`old` is the head that was there).
    fn requeue_head(&mut self, key: &Key, old: Option<(Time, EvictionId)>) {
        if let Some((d, id)) = old {
            self.ready.remove(&(d, id, key.clone()));
        }
        if !self.node_open(key) || self.cooling_at.contains_key(key) {
            return;
        }
        if let Some(&(d, id)) = self.queues.get(key).and_then(|q| q.items.first()) {
            self.ready.insert((d, id, key.clone()));
        }
    }

    /// A queue with nothing held and a full bucket carries no information: forget it.
    fn drop_queue_if_idle(&mut self, key: &Key) {
        self.drop_queue_if_idle_at(key, Time::MIN);
    }

    /// As [`Pacer::drop_queue_if_idle`], looked at no earlier than `now`: the queue is looked
    /// at again a millisecond later at least, so a bucket short by a rounding cannot keep it.
    fn drop_queue_if_idle_at(&mut self, key: &Key, now: Time) {
        let Some(queue) = self.queues.get(key) else {
            return;
        };
        if !queue.items.is_empty() || self.cooling_at.contains_key(key) {
            return;
        }
        match (&queue.bucket, &self.config.node_rate) {
            (Some(b), Some(rate)) if b.tokens < f64::from(rate.burst.max(1)) => {
                // Forget it once the bucket is full again.
                let missing = f64::from(rate.burst.max(1)) - b.tokens;
                let ms = (missing * 1000.0 / rate.per_second).ceil();
                let full_at = Time::from_millis(
                    b.at.as_millis()
                        .saturating_add(ms.min(i64::MAX as f64) as i64),
                )
                .max(Time::from_millis(now.as_millis().saturating_add(1)));
                self.idle.insert((full_at, key.clone()));
            }
            _ => {
                self.queues.remove(key);
            }
        }
    }

    /// Release (or stop releasing) one node's evictions while the brake holds.
    pub fn set_node_released(&mut self, node: &str, released: bool) {
        let key: Key = Some(Arc::from(node));
        let changed = if released {
            self.released.insert(Arc::from(node))
        } else {
            self.released.remove(node)
        };
        if changed && self.braking {
            let head = self.queues.get(&key).and_then(|q| q.items.first().copied());
            if let Some((d, id)) = head {
                self.ready.remove(&(d, id, key.clone()));
            }
            self.requeue_head(&key, None);
        }
    }

    /// Release every node: the brake is still computed and reported, but holds nothing.
    pub fn set_release_all(&mut self, release: bool) {
        if self.release_all != release {
            self.release_all = release;
            self.rebuild_ready();
        }
    }

    /// Whether a node's evictions are released while the brake holds.
    pub fn is_released(&self, node: &str) -> bool {
        self.release_all || self.released.contains(node)
    }

    /// The brake's one rule: whether it holds an eviction of a pod on `node` now (it is
    /// engaged, and the node is not released). Everything that asks "may this start, as far
    /// as the brake goes?" asks this: the pacer's own queues, the pipeline's queue and the
    /// attempts that have not yet written, and what `/status` shows.
    pub fn brake_holds(&self, node: Option<&str>) -> bool {
        self.braking && !(self.release_all || node.is_some_and(|n| self.released.contains(n)))
    }

    /// The cluster's node counts: (nodes known, nodes with `NoExecute` taints). Returns the
    /// brake's change, if any.
    pub fn set_node_counts(&mut self, nodes: usize, tainted: usize) -> Option<BrakeChange> {
        self.counts = (nodes, tainted);
        self.update_brake()
    }

    /// The devices' counts (`--device-taints`): (published devices, devices with a
    /// `NoExecute` taint, from their slice or a rule). The brake holds when either share is
    /// over the threshold (each with at least the minimum count tainted).
    pub fn set_device_counts(&mut self, devices: usize, tainted: usize) -> Option<BrakeChange> {
        self.device_counts = (devices, tainted);
        self.update_brake()
    }

    /// The (devices, tainted devices) counts last given.
    pub fn device_counts(&self) -> (usize, usize) {
        self.device_counts
    }

    fn update_brake(&mut self) -> Option<BrakeChange> {
        let brake = self.config.brake?;
        let over_share = |(all, tainted): (usize, usize)| {
            all > 0
                && tainted >= brake.min_tainted_nodes.max(1)
                && (tainted as f64) * 100.0 > brake.threshold_percent * all as f64
        };
        let over = over_share(self.counts) || over_share(self.device_counts);
        if over == self.braking {
            return None;
        }
        self.braking = over;
        self.rebuild_ready();
        let (nodes, tainted) = self.counts;
        let devices = self.device_counts;
        Some(if over {
            BrakeChange::Engaged {
                tainted,
                nodes,
                devices,
            }
        } else {
            BrakeChange::Released {
                tainted,
                nodes,
                devices,
            }
        })
    }

    fn rebuild_ready(&mut self) {
        self.ready.clear();
        let mut heads = Vec::new();
        for (key, queue) in &self.queues {
            if self.cooling_at.contains_key(key) || !self.node_open(key) {
                continue;
            }
            if let Some(&(d, id)) = queue.items.first() {
                heads.push((d, id, key.clone()));
            }
        }
        self.ready.extend(heads);
    }

    /// Start every held eviction that may start at `now`, in order, appending payloads.
    pub fn release(&mut self, now: Time, out: &mut Vec<T>) {
        self.tidy(now);
        self.release_ready(now, out);
    }

    /// Forget empty node queues whose bucket has refilled by `now`: they carry no information
    /// any more. (Also while nothing may start, so a replica that stopped acting holds nothing
    /// for nodes whose evictions are all gone.)
    pub fn tidy(&mut self, now: Time) {
        // Nodes whose bucket refilled go back to the ready set. Cooling first: a node whose
        // cooling ends with an empty queue is then looked at as idle in the same call, not
        // left for the next.
        while let Some((at, key)) = self.cooling.first().cloned() {
            if at > now {
                break;
            }
            self.cooling.pop_first();
            self.cooling_at.remove(&key);
            self.requeue_head(&key, None);
            if self.queues.get(&key).is_some_and(|q| q.items.is_empty()) {
                self.drop_queue_if_idle(&key);
            }
        }
        while let Some((at, key)) = self.idle.first().cloned() {
            if at > now {
                break;
            }
            self.idle.pop_first();
            // The queue may have been used again since this entry was made: only a queue
            // that is still empty goes, once its bucket is full. One whose bucket is not full
            // yet (used again, or short by a rounding) is looked at again when it will be;
            // a cooling one when its cooling ends.
            if self.cooling_at.contains_key(&key) {
                continue;
            }
            let rate = self.config.node_rate;
            let Some(queue) = self.queues.get_mut(&key) else {
                continue;
            };
            if !queue.items.is_empty() {
                continue;
            }
            if let (Some(b), Some(rate)) = (queue.bucket.as_mut(), rate.as_ref()) {
                b.refill(rate, now);
            }
            self.drop_queue_if_idle_at(&key, now);
        }
    }

    fn release_ready(&mut self, now: Time, out: &mut Vec<T>) {
        while let Some((deadline, eviction, key)) = self.ready.first().cloned() {
            if let Some(rate) = self.config.rate {
                let bucket = self.overall.get_or_insert_with(|| Bucket::full(&rate, now));
                bucket.refill(&rate, now);
                if bucket.tokens < 1.0 {
                    break;
                }
            }
            self.ready.pop_first();
            if let Some(rate) = self.config.node_rate {
                let queue = match self.queues.get_mut(&key) {
                    Some(q) => q,
                    None => continue,
                };
                let bucket = queue.bucket.get_or_insert_with(|| Bucket::full(&rate, now));
                bucket.refill(&rate, now);
                if bucket.tokens < 1.0 {
                    let at = bucket.ready_at(&rate);
                    self.cooling.insert((at, key.clone()));
                    self.cooling_at.insert(key, at);
                    continue;
                }
                bucket.tokens -= 1.0;
            }
            if let Some(bucket) = self.overall.as_mut() {
                bucket.tokens -= 1.0;
            }
            let Some((_, _, payload)) = self.held.remove(&eviction) else {
                continue;
            };
            if let Some(queue) = self.queues.get_mut(&key) {
                queue.items.remove(&(deadline, eviction));
            }
            self.requeue_head(&key, None);
            if self.queues.get(&key).is_some_and(|q| q.items.is_empty()) {
                self.drop_queue_if_idle(&key);
            }
            out.push(payload);
        }
    }

    /// The earliest time [`Pacer::release`] may start something that is held now; `None`
    /// when nothing can start until an input changes (the brake holds, or nothing is held).
    pub fn next_release(&self) -> Option<Time> {
        let overall = if self.ready.is_empty() {
            None
        } else {
            match (&self.config.rate, &self.overall) {
                (Some(rate), Some(bucket)) => Some(bucket.ready_at(rate)),
                _ => Some(Time::MIN),
            }
        };
        // The first cooling node may be braked or empty by now: waking for it is harmless.
        let cooling = self.cooling.first().map(|(t, _)| *t);
        match (overall, cooling) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: i64) -> Time {
        Time::from_millis(ms)
    }

    fn node(n: &str) -> Option<Arc<str>> {
        Some(Arc::from(n))
    }

    /// Release at every instant the pacer asks for, up to `until`; (time, payload) pairs.
    fn drain(p: &mut Pacer<u32>, from: i64, until: i64) -> Vec<(i64, u32)> {
        let mut now = t(from);
        let mut got = Vec::new();
        loop {
            let mut out = Vec::new();
            p.release(now, &mut out);
            got.extend(out.into_iter().map(|x| (now.as_millis(), x)));
            match p.next_release() {
                Some(next) if next.as_millis() <= until => now = next.max(now),
                _ => return got,
            }
        }
    }

    #[test]
    fn nothing_configured_lets_everything_through_in_deadline_order() {
        let mut p = Pacer::new(PaceConfig::default());
        p.offer(EvictionId(2), node("a"), t(20), 2);
        p.offer(EvictionId(1), node("b"), t(10), 1);
        p.offer(EvictionId(3), None, t(5), 3);
        let mut out = Vec::new();
        p.release(t(100), &mut out);
        assert_eq!(out, vec![3, 1, 2]);
        assert!(p.is_empty());
        assert_eq!(p.next_release(), None);
    }

    #[test]
    fn overall_rate_spaces_evictions_after_the_burst() {
        let mut p = Pacer::new(PaceConfig {
            rate: Some(Rate {
                per_second: 2.0,
                burst: 2,
            }),
            ..PaceConfig::default()
        });
        for i in 0..5 {
            p.offer(EvictionId(i), node(&format!("n{i}")), t(0), i as u32);
        }
        let got = drain(&mut p, 0, 10_000);
        assert_eq!(got, vec![(0, 0), (0, 1), (500, 2), (1000, 3), (1500, 4)]);
    }

    #[test]
    fn a_node_out_of_tokens_does_not_hold_up_other_nodes() {
        let mut p = Pacer::new(PaceConfig {
            node_rate: Some(Rate {
                per_second: 1.0,
                burst: 1,
            }),
            ..PaceConfig::default()
        });
        p.offer(EvictionId(1), node("a"), t(0), 1);
        p.offer(EvictionId(2), node("a"), t(0), 2);
        p.offer(EvictionId(3), node("a"), t(0), 3);
        p.offer(EvictionId(4), node("b"), t(1), 4);
        let got = drain(&mut p, 0, 10_000);
        assert_eq!(got, vec![(0, 1), (0, 4), (1000, 2), (2000, 3)]);
    }

    #[test]
    fn the_brake_holds_until_the_share_drops_and_released_nodes_go_first() {
        let mut p = Pacer::new(PaceConfig {
            brake: Some(Brake {
                threshold_percent: 50.0,
                min_tainted_nodes: 1,
            }),
            ..PaceConfig::default()
        });
        assert_eq!(
            p.set_node_counts(4, 2),
            None,
            "exactly 50% is not more than 50%"
        );
        assert_eq!(
            p.set_node_counts(4, 3),
            Some(BrakeChange::Engaged {
                tainted: 3,
                nodes: 4,
                devices: (0, 0)
            })
        );
        p.offer(EvictionId(1), node("a"), t(0), 1);
        p.offer(EvictionId(2), node("b"), t(0), 2);
        p.offer(EvictionId(3), node("b"), t(0), 3);
        let mut out = Vec::new();
        p.release(t(10), &mut out);
        assert!(out.is_empty());
        assert_eq!(p.next_release(), None, "nothing to wake for");
        assert_eq!(p.held_by_brake(), 3);
        p.set_node_released("b", true);
        p.release(t(20), &mut out);
        assert_eq!(out, vec![2, 3]);
        assert_eq!(p.held_by_brake(), 1);
        assert_eq!(
            p.cancel(EvictionId(1)),
            Some(1),
            "a cancel drops a held eviction"
        );
        p.offer(EvictionId(4), node("a"), t(30), 4);
        assert_eq!(
            p.set_node_counts(4, 1),
            Some(BrakeChange::Released {
                tainted: 1,
                nodes: 4,
                devices: (0, 0)
            })
        );
        out.clear();
        p.release(t(40), &mut out);
        assert_eq!(out, vec![4]);
    }

    #[test]
    fn the_brake_needs_the_minimum_number_of_tainted_nodes() {
        let mut p: Pacer<u32> = Pacer::new(PaceConfig {
            brake: Some(Brake {
                threshold_percent: 30.0,
                min_tainted_nodes: 3,
            }),
            ..PaceConfig::default()
        });
        assert_eq!(p.set_node_counts(2, 2), None, "100% of a 2-node cluster");
        assert!(p.set_node_counts(5, 3).is_some());
        assert!(p.braking());
    }

    #[test]
    fn cancelling_a_head_lets_the_next_one_go() {
        let mut p = Pacer::new(PaceConfig {
            rate: Some(Rate {
                per_second: 1.0,
                burst: 1,
            }),
            ..PaceConfig::default()
        });
        p.offer(EvictionId(1), node("a"), t(0), 1);
        p.offer(EvictionId(2), node("a"), t(1), 2);
        p.offer(EvictionId(3), node("b"), t(2), 3);
        let mut out = Vec::new();
        p.release(t(0), &mut out);
        assert_eq!(out, vec![1]);
        assert_eq!(p.cancel(EvictionId(2)), Some(2));
        assert_eq!(p.next_release(), Some(t(1000)));
        out.clear();
        p.release(t(1000), &mut out);
        assert_eq!(out, vec![3]);
        assert!(p.is_empty());
    }
}
