//! The holes a close reading of the pipeline found (issue 18), each as the smallest scenario
//! on a virtual clock. Every test here failed before its fix.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use noexecute_engine::pace::{Brake, PaceConfig};
use noexecute_engine::pipeline::{
    Attempt, AttemptReport, AttemptResult, Effect as Fx, Held, Pipeline, PipelineConfig,
};
use noexecute_engine::{NodeObservation, PodObservation, Taint, Time, Toleration};

fn t(ms: i64) -> Time {
    Time::from_millis(ms)
}

fn drain(p: &mut Pipeline) -> Vec<Fx> {
    std::iter::from_fn(|| p.poll_effect()).collect()
}

fn starts(effects: &[Fx]) -> Vec<Attempt> {
    effects
        .iter()
        .filter_map(|e| match e {
            Fx::Start(a) => Some(a.clone()),
            _ => None,
        })
        .collect()
}

fn node(name: &str, taints: Vec<Taint>) -> NodeObservation {
    NodeObservation {
        name: name.into(),
        taints,
    }
}

fn report(p: &mut Pipeline, a: &Attempt, result: AttemptResult, at: i64) {
    p.report(
        AttemptReport {
            attempt: a.id,
            result,
        },
        t(at),
    );
}

/// Hole 1: with no eviction rate limit, the pacer hands every due eviction straight to the
/// queue, and the queue started them without asking the brake. A taint on one node of four
/// (below the threshold) queues five evictions behind one executor slot; then two more nodes
/// are tainted and the brake engages. Not one queued eviction may start while it holds, and
/// `/status` must show them held by the brake; once the taints go, the rest go on.
#[test]
fn the_brake_holds_evictions_already_queued() {
    let mut p = Pipeline::acting(PipelineConfig {
        concurrency: 1,
        pace: PaceConfig {
            brake: Some(Brake {
                threshold_percent: 50.0,
                min_tainted_nodes: 1,
            }),
            ..PaceConfig::default()
        },
        ..PipelineConfig::default()
    });
    for n in ["n0", "n1", "n2", "n3"] {
        p.upsert_node(&node(n, vec![]), false, t(0));
    }
    for i in 0..5 {
        p.upsert_pod(
            PodObservation::new("ns", &format!("p{i}"), &format!("u{i}"), Some("n0")),
            t(0),
        );
    }
    drain(&mut p);
    p.upsert_node(&node("n0", vec![Taint::no_execute("k", "v")]), false, t(1));
    let first = starts(&drain(&mut p));
    assert_eq!(first.len(), 1, "one slot");
    assert_eq!(p.queued(), 4);
    // Three of four nodes tainted: 75% > 50%.
    p.upsert_node(&node("n1", vec![Taint::no_execute("k", "v")]), false, t(2));
    p.upsert_node(&node("n2", vec![Taint::no_execute("k", "v")]), false, t(3));
    assert!(p.braking());
    let mut during = drain(&mut p);
    // The slot frees while the brake holds.
    report(&mut p, &first[0], AttemptResult::Evicted, 4);
    during.extend(drain(&mut p));
    for at in [5, 1_000, 60_000] {
        p.tick(t(at));
        during.extend(drain(&mut p));
    }
    assert!(
        starts(&during).is_empty(),
        "started while the brake held: {:?}",
        starts(&during)
    );
    let held: Vec<Held> = p
        .countdowns(|_| true, 100)
        .rows
        .iter()
        .map(|c| c.held)
        .collect();
    assert_eq!(held, vec![Held::Brake; 4], "what /status shows");
    // The brake lets go: the four go on.
    p.upsert_node(&node("n1", vec![]), false, t(70_000));
    p.upsert_node(&node("n2", vec![]), false, t(70_000));
    assert!(!p.braking());
    let mut started = 0;
    let mut now = 70_000;
    loop {
        let batch = starts(&drain(&mut p));
        if batch.is_empty() {
            break;
        }
        for a in &batch {
            report(&mut p, a, AttemptResult::Evicted, now);
        }
        started += batch.len();
        now += 1;
    }
    assert_eq!(started, 4);
}

/// Hole 4: taint A (untolerated) → a guarded attempt; its fresh read sees B (tolerated for a
/// minute); then the watch delivers B and A again while the attempt is in flight, so the
/// engine's cache is A again. The `Stale` report must not end the eviction: the pod is on a
/// node whose taint it does not tolerate, and the next attempt re-reads the node.
#[test]
fn a_stale_answer_older_than_the_cache_does_not_lose_the_eviction() {
    let mut p = Pipeline::acting(PipelineConfig {
        stale_cache_guard: true,
        ..PipelineConfig::default()
    });
    let a = vec![Taint::no_execute("a", "")];
    let b = vec![Taint::no_execute("b", "")];
    p.upsert_node(&node("n", a.clone()), false, t(0));
    let pod = PodObservation::new("ns", "p", "u", Some("n"))
        .with_tolerations(vec![Toleration::exists("b", None).for_seconds(60)]);
    p.upsert_pod(pod, t(1));
    let first = starts(&drain(&mut p));
    assert_eq!(first.len(), 1);
    assert!(
        first[0].guard().is_some(),
        "a pod-triggered immediate eviction"
    );
    // The watch catches up with B, then A comes back, while the attempt is in flight.
    p.upsert_node(&node("n", b), false, t(2));
    p.upsert_node(&node("n", a), false, t(3));
    drain(&mut p);
    // The attempt's fresh read (made at B) says stale.
    report(&mut p, &first[0], AttemptResult::Stale, 4);
    let mut effects = drain(&mut p);
    for at in [5, 1_000, 61_000, 120_000] {
        p.tick(t(at));
        effects.extend(drain(&mut p));
    }
    let again = starts(&effects);
    assert_eq!(
        again.len(),
        1,
        "the pod tolerates nothing of A: it must be evicted ({effects:?})"
    );
    assert!(
        again[0].guard().is_some(),
        "the next attempt re-reads the node"
    );
}
