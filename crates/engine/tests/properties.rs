//! Property tests: random sequences of node and pod events, executor outcomes and clock
//! advances, run against the engine and against a small reference model written the plain
//! way (ordered maps, linear scans, upstream's two-step matching). Besides agreeing with the
//! model, the engine must keep these invariants at every step:
//!
//! - a pod whose `NoExecute` taints are all tolerated forever is never evicted;
//! - a pod with an untolerated `NoExecute` taint is evicted at once;
//! - no eviction happens before its deadline;
//! - at most one eviction is pending per pod.
//!
//! Every run counts its steps and fails below 1,000,000.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use noexecute_engine::toleration::{matching_tolerations, min_toleration_time};
use noexecute_engine::*;
use proptest::prelude::*;

const CASES: u32 = 2_500;
/// Sequences are 1..=MAX_STEPS long (short ones shrink well); the total is counted and must
/// reach MIN_TOTAL_STEPS.
const MAX_STEPS: usize = 1_000;
const MIN_TOTAL_STEPS: usize = 1_000_000;

const NODES: [&str; 3] = ["n0", "n1", "n2"];
const PODS: [&str; 6] = ["p0", "p1", "p2", "p3", "p4", "p5"];

#[derive(Clone, Debug)]
enum Op {
    Node {
        node: usize,
        taints: Vec<Taint>,
    },
    DeleteNode {
        node: usize,
    },
    Pod {
        pod: usize,
        incarnation: u8,
        node: Option<usize>,
        tolerations: Vec<Toleration>,
        terminating: bool,
    },
    DeletePod {
        pod: usize,
    },
    Advance {
        ms: i64,
    },
    Executor(Mode),
    /// Deliver the reports the executor held back, all with this outcome.
    Deliver {
        success: bool,
    },
}

/// How the test executor answers an `Evict`.
#[derive(Copy, Clone, Debug, PartialEq)]
enum Mode {
    Succeed,
    /// Fails; the engine is told to retry a second later.
    Fail,
    /// Keeps the attempt in flight until a `Deliver`.
    Hold,
}

fn taint_strategy() -> impl Strategy<Value = Taint> {
    (
        0..3u8,
        0..2u8,
        prop_oneof![4 => Just(TaintEffect::NoExecute), 1 => Just(TaintEffect::NoSchedule)],
    )
        .prop_map(|(k, v, effect)| Taint::new(format!("k{k}"), format!("v{v}"), effect))
}

fn toleration_strategy() -> impl Strategy<Value = Toleration> {
    let seconds = prop_oneof![
        3 => Just(None),
        1 => Just(Some(0)),
        1 => Just(Some(-1)),
        3 => (1..120i64).prop_map(Some),
        1 => Just(Some(toleration::MAX_TOLERATION_SECONDS + 1)),
    ];
    let key = prop_oneof![4 => (0..3u8).prop_map(|k| format!("k{k}")), 1 => Just(String::new())];
    let effect = prop_oneof![3 => Just(Some(TaintEffect::NoExecute)), 1 => Just(None), 1 => Just(Some(TaintEffect::NoSchedule))];
    (key, any::<bool>(), 0..2u8, effect, seconds).prop_map(|(key, exists, v, effect, seconds)| {
        // An empty key is only valid with Exists.
        let exists = exists || key.is_empty();
        Toleration {
            operator: if exists {
                Operator::Exists
            } else {
                Operator::Equal
            },
            value: if exists {
                String::new()
            } else {
                format!("v{v}")
            },
            key,
            effect,
            toleration_seconds: seconds,
        }
    })
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..NODES.len(), prop::collection::vec(taint_strategy(), 0..3))
            .prop_map(|(node, taints)| Op::Node { node, taints }),
        1 => (0..NODES.len()).prop_map(|node| Op::DeleteNode { node }),
        6 => (
            0..PODS.len(),
            0..2u8,
            prop::option::weighted(0.9, 0..NODES.len()),
            prop::collection::vec(toleration_strategy(), 0..3),
            prop::bool::weighted(0.1),
        )
            .prop_map(|(pod, incarnation, node, tolerations, terminating)| Op::Pod {
                pod,
                incarnation,
                node,
                tolerations,
                terminating,
            }),
        2 => (0..PODS.len()).prop_map(|pod| Op::DeletePod { pod }),
        6 => prop_oneof![Just(0i64), 1..2_000i64, 1_000..150_000i64].prop_map(|ms| Op::Advance { ms }),
        1 => prop_oneof![3 => Just(Mode::Succeed), 1 => Just(Mode::Fail), 1 => Just(Mode::Hold)].prop_map(Op::Executor),
        1 => prop::bool::weighted(0.7).prop_map(|success| Op::Deliver { success }),
    ]
}

// === The reference model ===

#[derive(Clone, Debug)]
struct MEviction {
    seq: u64,
    created_at: Time,
    deadline: Time,
    /// When it is queued to fire (the deadline, or a retry time); `None` while in flight.
    due: Option<Time>,
    fired: bool,
}

#[derive(Clone, Debug)]
struct MPod {
    uid: String,
    node: Option<String>,
    tolerations: Vec<Toleration>,
    terminating: bool,
    eviction: Option<MEviction>,
}

#[derive(Default)]
struct Model {
    /// Node name → (exists, NoExecute taints).
    nodes: BTreeMap<String, (bool, Vec<Taint>)>,
    pods: BTreeMap<String, MPod>,
    seq: u64,
    /// (time, pod, uid) of every eviction handed to the executor.
    evictions: Vec<(Time, String, String)>,
}

impl Model {
    fn taints_of(&self, node: &Option<String>) -> Vec<Taint> {
        node.as_ref()
            .and_then(|n| self.nodes.get(n))
            .map(|(_, t)| t.clone())
            .unwrap_or_default()
    }

    fn cancel(&mut self, pod: &str) {
        if let Some(p) = self.pods.get_mut(pod) {
            p.eviction = None;
        }
    }

    fn start(&mut self, pod: &str, created_at: Time, deadline: Time, now: Time) {
        self.seq += 1;
        let due = Some(deadline);
        self.pods.get_mut(pod).unwrap().eviction = Some(MEviction {
            seq: self.seq,
            created_at,
            deadline,
            due,
            fired: false,
        });
        if deadline <= now {
            self.fire(pod, now);
        }
    }

    fn fire(&mut self, pod: &str, now: Time) {
        let p = self.pods.get_mut(pod).unwrap();
        if p.terminating {
            p.eviction = None;
            return;
        }
        let e = p.eviction.as_mut().unwrap();
        if !e.fired {
            self.evictions.push((now, pod.to_string(), p.uid.clone()));
        }
        e.fired = true;
        e.due = None;
    }

    fn evaluate(&mut self, pod: &str, now: Time) {
        let p = &self.pods[pod];
        let taints = self.taints_of(&p.node);
        if taints.is_empty() {
            return;
        }
        let (all, used) = matching_tolerations(&taints, &p.tolerations, false);
        let existing = p.eviction.clone();
        let waiting = existing.as_ref().filter(|e| !e.fired);
        let replaceable = waiting
            .filter(|e| e.created_at >= now)
            .map(|e| e.created_at);
        if !all {
            match &existing {
                Some(e) if e.fired => {}
                _ => {
                    self.cancel(pod);
                    self.start(pod, now, now, now);
                }
            }
            return;
        }
        match min_toleration_time(used) {
            TolerationTime::Forever => self.cancel(pod),
            TolerationTime::Immediate => match (&existing, replaceable) {
                (None, _) => self.start(pod, now, now, now),
                (_, Some(created)) => {
                    self.cancel(pod);
                    self.start(pod, created, now, now);
                }
                _ => {}
            },
            TolerationTime::After(d) => match (&existing, replaceable) {
                (None, _) => self.start(pod, now, now.plus(d), now),
                (_, Some(created)) => {
                    self.cancel(pod);
                    self.start(pod, created, now.plus(d), now);
                }
                _ => {}
            },
        }
    }

    fn pods_on(&self, node: &str) -> Vec<String> {
        self.pods
            .iter()
            .filter(|(_, p)| p.node.as_deref() == Some(node))
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn advance(&mut self, now: Time) {
        loop {
            let next = self
                .pods
                .iter()
                .filter_map(|(k, p)| {
                    let e = p.eviction.as_ref()?;
                    e.due.filter(|d| *d <= now).map(|d| (d, e.seq, k.clone()))
                })
                .min();
            let Some((_, _, pod)) = next else { break };
            self.fire(&pod, now);
        }
    }
}

// === Driving both ===

struct Run {
    engine: Engine,
    model: Model,
    now: Time,
    mode: Mode,
    /// Held attempts: the engine's report (outcome to be filled in) and the model's eviction.
    held: Vec<(Report, u64)>,
    /// (time, pod, uid) of every Evict the engine produced.
    evictions: Vec<(Time, String, String)>,
    /// Per pod UID: the deadline of its pending eviction, if any, as the actions tell it.
    pending: BTreeMap<String, Time>,
}

impl Run {
    fn new() -> Self {
        Run {
            engine: Engine::default(),
            model: Model::default(),
            now: Time::from_millis(0),
            mode: Mode::Succeed,
            held: Vec::new(),
            evictions: Vec::new(),
            pending: BTreeMap::new(),
        }
    }

    fn absorb(&mut self, actions: Vec<Action>) {
        let mut queue = actions;
        while !queue.is_empty() {
            let mut next = Vec::new();
            for action in queue {
                let uid = action.pod().uid.to_string();
                match &action {
                    Action::Schedule { deadline, .. } => {
                        assert!(
                            self.pending.insert(uid.clone(), *deadline).is_none(),
                            "a second eviction scheduled for {uid} while one is pending"
                        );
                        assert!(*deadline > self.now, "scheduled in the past");
                    }
                    Action::Cancel { .. } | Action::Skip { .. } => {
                        self.pending.remove(&uid);
                    }
                    Action::Evict {
                        pod,
                        eviction,
                        deadline,
                        retry,
                        ..
                    } => {
                        assert!(
                            *deadline <= self.now,
                            "evicted {pod} before its deadline {deadline}"
                        );
                        if let Some(scheduled) = self.pending.get(&uid) {
                            assert!(*scheduled <= self.now, "evicted {pod} before {scheduled}");
                        }
                        if !retry {
                            self.evictions
                                .push((self.now, pod.name.to_string(), uid.clone()));
                        }
                        self.pending.insert(uid.clone(), *deadline);
                        let model_seq = self.model.pods[&*pod.name]
                            .eviction
                            .as_ref()
                            .map_or(0, |e| e.seq);
                        let mut report = Report {
                            namespace: pod.namespace.clone(),
                            name: pod.name.clone(),
                            eviction: *eviction,
                            outcome: Outcome::Evicted,
                        };
                        match self.mode {
                            Mode::Hold => self.held.push((report, model_seq)),
                            Mode::Succeed | Mode::Fail => {
                                if self.mode == Mode::Fail {
                                    report.outcome = Outcome::Failed {
                                        retry_at: self.now.plus_secs(1),
                                    };
                                }
                                self.deliver(report, model_seq, &mut next);
                            }
                        }
                    }
                }
            }
            queue = next;
        }
    }

    fn deliver(&mut self, report: Report, model_seq: u64, out: &mut Vec<Action>) {
        self.engine.report(&report, self.now, out);
        let uid = self
            .engine
            .pod_view(&report.namespace, &report.name)
            .map(|v| v.pod.uid.to_string());
        let Some(p) = self.model.pods.get_mut(&*report.name) else {
            return;
        };
        let Some(e) = p.eviction.as_mut() else { return };
        if e.seq != model_seq || !e.fired || e.due.is_some() {
            return; // cancelled or replaced since, or not in flight: the engine ignores it too
        }
        if report.outcome == Outcome::Evicted
            && let Some(uid) = uid
        {
            self.pending.remove(&uid);
        }
        match report.outcome {
            Outcome::Evicted => {
                p.eviction = None;
                p.terminating = true;
            }
            // This test's executor never reports `Stale` (tests/pipeline.rs covers it).
            Outcome::Gone | Outcome::Stale { .. } => p.eviction = None,
            Outcome::Failed { retry_at } => {
                e.due = Some(retry_at);
            }
        }
    }

    fn step(&mut self, op: &Op) {
        let mut out = Vec::new();
        match op {
            Op::Advance { ms } => {
                // Stop at every deadline on the way, as the live driver does.
                let target = Time::from_millis(self.now.as_millis() + ms);
                while let Some(d) = self.engine.next_deadline().filter(|d| *d <= target) {
                    self.now = self.now.max(d);
                    self.model.advance(self.now);
                    let mut out = Vec::new();
                    self.engine.advance(self.now, &mut out);
                    self.absorb(out);
                }
                self.now = target;
                self.model.advance(self.now);
                self.engine.advance(self.now, &mut out);
            }
            Op::Executor(mode) => self.mode = *mode,
            Op::Deliver { success } => {
                // The oldest held attempt reports first; stale ones must change nothing.
                if !self.held.is_empty() {
                    let (mut report, model_seq) = self.held.remove(0);
                    if !success {
                        report.outcome = Outcome::Failed {
                            retry_at: self.now.plus_secs(1),
                        };
                    }
                    self.deliver(report, model_seq, &mut out);
                }
            }
            Op::Node { node, taints } => {
                let name = NODES[*node];
                self.engine.upsert_node(
                    &NodeObservation {
                        name: name.into(),
                        taints: taints.clone(),
                    },
                    self.now,
                    &mut out,
                );
                let ne = noexecute_engine::taint::no_execute_taints(taints);
                let entry = self
                    .model
                    .nodes
                    .entry(name.into())
                    .or_insert((false, Vec::new()));
                if !(entry.0 && entry.1 == ne) {
                    *entry = (true, ne.clone());
                    for pod in self.model.pods_on(name) {
                        if ne.is_empty() {
                            self.model.cancel(&pod);
                        } else {
                            self.model.evaluate(&pod, self.now);
                        }
                    }
                }
            }
            Op::DeleteNode { node } => {
                let name = NODES[*node];
                self.engine.delete_node(name, self.now, &mut out);
                if let Some(entry) = self.model.nodes.get_mut(name) {
                    *entry = (false, Vec::new());
                }
            }
            Op::Pod {
                pod,
                incarnation,
                node,
                tolerations,
                terminating,
            } => {
                let name = PODS[*pod];
                let uid = format!("{name}-{incarnation}");
                let node_name = node.map(|n| NODES[n].to_string());
                let mut obs = PodObservation::new("ns", name, &uid, node_name.as_deref())
                    .with_tolerations(tolerations.clone());
                obs.terminating = *terminating;
                self.engine.upsert_pod(obs, self.now, &mut out);
                let m = &mut self.model;
                let replace = m.pods.get(name).is_some_and(|p| p.uid != uid);
                if replace {
                    m.pods.remove(name);
                }
                match m.pods.get_mut(name) {
                    Some(p) => {
                        p.terminating |= *terminating;
                        let same = p.tolerations == *tolerations && p.node == node_name;
                        if !same {
                            if p.node != node_name {
                                p.eviction = None;
                            }
                            p.tolerations = tolerations.clone();
                            p.node = node_name;
                            m.evaluate(name, self.now);
                        }
                    }
                    None => {
                        m.pods.insert(
                            name.into(),
                            MPod {
                                uid,
                                node: node_name,
                                tolerations: tolerations.clone(),
                                terminating: *terminating,
                                eviction: None,
                            },
                        );
                        m.evaluate(name, self.now);
                    }
                }
            }
            Op::DeletePod { pod } => {
                let name = PODS[*pod];
                self.engine.delete_pod("ns", name, None, self.now, &mut out);
                self.model.pods.remove(name);
            }
        }
        self.absorb(out);
        self.check_invariants();
    }

    fn check_invariants(&self) {
        let existing = self.model.nodes.values().filter(|(e, _)| *e).count();
        let tainted = self
            .model
            .nodes
            .values()
            .filter(|(e, t)| *e && t.iter().any(|t| t.is_no_execute()))
            .count();
        assert_eq!(
            self.engine.node_counts(),
            (existing, tainted),
            "node counts (for the brake)"
        );
        let mut pending = 0;
        for view in self.engine.pods() {
            let pod = &view.pod;
            let taints = pod
                .node
                .as_deref()
                .and_then(|n| self.engine.node_taints(n))
                .unwrap_or(&[]);
            let (all, used) = matching_tolerations(taints, view.tolerations, false);
            let forever = !taints.is_empty()
                && all
                && min_toleration_time(used.iter().copied()) == TolerationTime::Forever;
            if forever {
                assert!(
                    view.eviction.is_none(),
                    "{pod} tolerates every taint forever but has {:?}",
                    view.eviction
                );
            }
            let untolerated = !taints.is_empty() && !all;
            if untolerated && !view.terminating && !view.excluded {
                let e = view
                    .eviction
                    .unwrap_or_else(|| panic!("{pod} has an untolerated taint but no eviction"));
                assert!(
                    e.stage != Stage::Waiting,
                    "{pod} has an untolerated taint but only a scheduled eviction"
                );
            }
            if let Some(e) = view.eviction {
                pending += 1;
                if e.stage == Stage::Waiting {
                    assert!(e.deadline > self.now, "{pod}'s eviction is overdue");
                }
            }
        }
        let queued = self
            .engine
            .pods()
            .filter(|v| v.eviction.is_some_and(|e| e.stage != Stage::Due))
            .count();
        assert_eq!(
            queued,
            self.engine.queued_count(),
            "the deadline queue and the pods disagree"
        );
        assert_eq!(pending, self.engine.pending_count());
        assert_eq!(self.engine.pod_count(), self.model.pods.len());
        for (name, m) in &self.model.pods {
            let view = self
                .engine
                .pod_view("ns", name)
                .expect("pod known to the model");
            assert_eq!(view.pod.uid.to_string(), m.uid);
            assert_eq!(view.terminating, m.terminating, "{name}: terminating");
            match (&view.eviction, &m.eviction) {
                (None, None) => {}
                (Some(e), Some(me)) => {
                    assert_eq!(e.deadline, me.deadline, "{name}: deadline");
                    let stage = match (me.fired, me.due) {
                        (false, _) => Stage::Waiting,
                        (true, None) => Stage::Due,
                        (true, Some(_)) => Stage::Retrying,
                    };
                    assert_eq!(e.stage, stage, "{name}: stage");
                    if stage == Stage::Retrying {
                        assert_eq!(e.retry_at, me.due, "{name}: retry time");
                    }
                }
                (e, me) => panic!("{name}: engine has {e:?}, model has {me:?}"),
            }
        }
    }
}

fn sorted(mut v: Vec<(Time, String, String)>) -> Vec<(Time, String, String)> {
    v.sort();
    v
}

#[test]
fn engine_keeps_invariants_and_agrees_with_the_model() {
    use proptest::test_runner::{Config, TestRunner};
    use std::sync::atomic::{AtomicUsize, Ordering};

    let total = AtomicUsize::new(0);
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        max_shrink_iters: 4_000,
        ..Config::default()
    });
    let strategy = prop::collection::vec(op_strategy(), 1..=MAX_STEPS);
    let result = runner.run(&strategy, |ops| {
        total.fetch_add(ops.len(), Ordering::Relaxed);
        let mut run = Run::new();
        for op in &ops {
            run.step(op);
        }
        prop_assert_eq!(
            sorted(run.evictions.clone()),
            sorted(run.model.evictions.clone())
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let total = total.into_inner();
    assert!(total >= MIN_TOTAL_STEPS, "only {total} steps ran");
    println!("{total} steps");
}

proptest! {
    #[test]
    fn fast_verdict_agrees_with_upstream_two_step_matching(
        taints in prop::collection::vec(taint_strategy(), 0..4),
        tolerations in prop::collection::vec(toleration_strategy(), 0..4),
    ) {
        let ne = noexecute_engine::taint::no_execute_taints(&taints);
        let (all, used) = matching_tolerations(&ne, &tolerations, false);
        match toleration::verdict(&ne, &tolerations, false) {
            Verdict::Untolerated { taint } => {
                prop_assert!(!all);
                prop_assert!(!tolerations.iter().any(|t| t.tolerates(&ne[taint], false)));
            }
            Verdict::Tolerated { time, limit } => {
                prop_assert!(all);
                prop_assert_eq!(time, min_toleration_time(used.iter().copied()));
                if let Some((ti, tol)) = limit {
                    prop_assert!(std::ptr::eq(used[ti], &tolerations[tol]));
                }
            }
        }
    }
}
