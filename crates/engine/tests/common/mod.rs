//! A virtual-clock harness around the engine, with an executor that succeeds (or fails) at
//! once. Tests read as scenarios: build nodes and pods with the helpers, move the clock, and
//! assert on what was evicted when.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use noexecute_engine::*;

/// Upstream's test taint `i`: `testTaint<i>=test<i>:NoExecute`.
pub fn taint(i: u32) -> Taint {
    Taint::no_execute(format!("testTaint{i}"), format!("test{i}"))
}

/// Upstream's `addToleration(pod, i, d)`: `testTaint<i>=test<i>:NoExecute` (Equal), for `d`
/// seconds, or forever when `d < 0`.
pub fn toleration(i: u32, d: i64) -> Toleration {
    let t = Toleration::equal(
        format!("testTaint{i}"),
        format!("test{i}"),
        Some(TaintEffect::NoExecute),
    );
    if d >= 0 { t.for_seconds(d) } else { t }
}

pub fn pod(name: &str, node: Option<&str>, tolerations: Vec<Toleration>) -> PodObservation {
    PodObservation::new("default", name, &format!("uid-{name}"), node).with_tolerations(tolerations)
}

pub fn node(name: &str, taints: Vec<Taint>) -> NodeObservation {
    NodeObservation {
        name: name.into(),
        taints,
    }
}

pub fn secs(s: f64) -> Time {
    Time::from_millis((s * 1000.0).round() as i64)
}

/// The virtual time `ms` milliseconds after the epoch.
pub fn t(ms: i64) -> Time {
    Time::from_millis(ms)
}

/// The attempts a pipeline starts now, its other effects dropped.
pub fn starts(p: &mut pipeline::Pipeline) -> Vec<pipeline::Attempt> {
    std::iter::from_fn(|| p.poll_effect())
        .filter_map(|e| match e {
            pipeline::Effect::Start(a) => Some(a),
            _ => None,
        })
        .collect()
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ExecutorMode {
    /// Every eviction succeeds at once.
    Succeed,
    /// Every attempt fails; retried after the given milliseconds.
    Fail(i64),
}

pub struct Harness {
    pub engine: Engine,
    pub now: Time,
    /// Every action with the time it was produced.
    pub log: Vec<(Time, Action)>,
    pub mode: ExecutorMode,
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new(Config::default())
    }
}

impl Harness {
    pub fn new(config: Config) -> Self {
        Harness {
            engine: Engine::new(config),
            now: Time::from_millis(0),
            log: Vec::new(),
            mode: ExecutorMode::Succeed,
        }
    }

    fn absorb(&mut self, actions: Vec<Action>) {
        let mut pending = actions;
        while !pending.is_empty() {
            let mut next = Vec::new();
            for action in pending {
                if let Action::Evict { pod, eviction, .. } = &action {
                    let outcome = match self.mode {
                        ExecutorMode::Succeed => Outcome::Evicted,
                        ExecutorMode::Fail(ms) => Outcome::Failed {
                            retry_at: Time::from_millis(self.now.as_millis() + ms),
                        },
                    };
                    let report = Report {
                        namespace: pod.namespace.clone(),
                        name: pod.name.clone(),
                        eviction: *eviction,
                        outcome,
                    };
                    self.engine.report(&report, self.now, &mut next);
                }
                self.log.push((self.now, action));
            }
            pending = next;
        }
    }

    pub fn apply(&mut self, input: Input) {
        let mut out = Vec::new();
        self.engine.advance(self.now, &mut out);
        self.engine.handle(input, self.now, &mut out);
        self.absorb(out);
    }

    pub fn node(&mut self, name: &str, taints: Vec<Taint>) {
        self.apply(Input::UpsertNode(node(name, taints)));
    }

    pub fn delete_node(&mut self, name: &str) {
        self.apply(Input::DeleteNode { name: name.into() });
    }

    pub fn pod(&mut self, pod: PodObservation) {
        self.apply(Input::UpsertPod(pod));
    }

    pub fn delete_pod(&mut self, name: &str) {
        self.apply(Input::DeletePod {
            namespace: "default".into(),
            name: name.into(),
            uid: None,
        });
    }

    /// Move the clock to `t`, firing every deadline on the way at its own instant.
    pub fn advance_to(&mut self, t: Time) {
        assert!(t >= self.now, "the clock only moves forward");
        while let Some(deadline) = self.engine.next_deadline() {
            if deadline > t {
                break;
            }
            self.now = self.now.max(deadline);
            let mut out = Vec::new();
            self.engine.advance(self.now, &mut out);
            self.absorb(out);
        }
        self.now = t;
    }

    pub fn advance_secs(&mut self, s: f64) {
        let t = Time::from_millis(self.now.as_millis() + (s * 1000.0).round() as i64);
        self.advance_to(t);
    }

    /// `ns/name` of every pod evicted so far, with the instant, in order.
    pub fn evictions(&self) -> Vec<(Time, String)> {
        self.log
            .iter()
            .filter_map(|(t, a)| match a {
                Action::Evict { pod, .. } => Some((*t, pod.to_string())),
                _ => None,
            })
            .collect()
    }

    /// Names (without namespace) evicted so far.
    pub fn evicted_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .evictions()
            .into_iter()
            .map(|(_, p)| p.trim_start_matches("default/").to_string())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    pub fn evicted_at(&self, name: &str) -> Vec<Time> {
        let key = format!("default/{name}");
        self.evictions()
            .into_iter()
            .filter(|(_, p)| *p == key)
            .map(|(t, _)| t)
            .collect()
    }

    /// Advance to `until`, and assert that `name` is not evicted at any instant on the way.
    pub fn assert_not_evicted_through(&mut self, name: &str, until: Time) {
        let before = self.evicted_at(name).len();
        self.advance_to(until);
        let after = self.evicted_at(name);
        assert_eq!(
            after.len(),
            before,
            "pod {name} was evicted at {:?} (window ended at {until})",
            &after[before..]
        );
    }

    pub fn eviction_of(&self, name: &str) -> Option<EvictionView> {
        self.engine
            .pod_view("default", name)
            .and_then(|v| v.eviction)
    }

    pub fn cancels(&self) -> Vec<(Time, String, bool, CancelReason)> {
        self.log
            .iter()
            .filter_map(|(t, a)| match a {
                Action::Cancel {
                    pod,
                    announce,
                    reason,
                    ..
                } => Some((*t, pod.to_string(), *announce, *reason)),
                _ => None,
            })
            .collect()
    }

    pub fn events(&self) -> Vec<String> {
        self.log
            .iter()
            .filter_map(|(_, a)| a.upstream_event().map(|e| e.message))
            .collect()
    }
}

/// A long window for "never evicted" assertions: one day.
pub const DAY: f64 = 86_400.0;
