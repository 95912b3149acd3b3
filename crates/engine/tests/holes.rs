//! The holes a close reading of the pipeline found (issue 18), each as the smallest scenario
//! on a virtual clock. Every test here failed before its fix.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use noexecute_engine::pace::{Brake, PaceConfig};
use noexecute_engine::pipeline::{
    Attempt, AttemptReport, AttemptResult, Effect as Fx, ForeignSign, Held, Pipeline,
    PipelineConfig, SignKind, Term, Watched,
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

fn one_pod_on_a_tainted_node(config: PipelineConfig, term: Option<Term>) -> (Pipeline, Attempt) {
    let mut p = Pipeline::new(config);
    p.listing_started(Watched::Nodes);
    p.listing_done(Watched::Nodes, t(0));
    p.listing_started(Watched::Pods);
    p.listing_done(Watched::Pods, t(0));
    p.set_term(term, t(0));
    p.upsert_node(&node("n", vec![Taint::no_execute("k", "v")]), false, t(0));
    p.upsert_pod(PodObservation::new("ns", "p", "u", Some("n")), t(1));
    let started = starts(&drain(&mut p));
    assert_eq!(started.len(), 1);
    (p, started[0].clone())
}

/// Hole 1, in flight: the brake engages while an attempt waits for the rate limiter, before
/// its first write. It is told to hold; its `Cancelled` report parks it behind the brake, and
/// it goes on once the brake lets go.
#[test]
fn the_brake_holds_an_attempt_that_has_not_written() {
    let config = PipelineConfig {
        pace: PaceConfig {
            brake: Some(Brake {
                threshold_percent: 50.0,
                min_tainted_nodes: 1,
            }),
            ..PaceConfig::default()
        },
        ..PipelineConfig::default()
    };
    let mut p = Pipeline::acting(config);
    for n in ["n", "m1", "m2", "m3"] {
        p.upsert_node(&node(n, vec![]), false, t(0));
    }
    p.upsert_pod(PodObservation::new("ns", "p", "u", Some("n")), t(0));
    p.upsert_node(&node("n", vec![Taint::no_execute("k", "v")]), false, t(1));
    let first = starts(&drain(&mut p));
    assert_eq!(first.len(), 1);
    p.upsert_node(&node("m1", vec![Taint::no_execute("k", "v")]), false, t(2));
    p.upsert_node(&node("m2", vec![Taint::no_execute("k", "v")]), false, t(2));
    let effects = drain(&mut p);
    assert!(p.braking());
    assert!(
        effects.contains(&Fx::Hold(first[0].id)),
        "the attempt was not told to hold: {effects:?}"
    );
    report(&mut p, &first[0], AttemptResult::Cancelled, 3);
    let mut during = drain(&mut p);
    p.tick(t(60_000));
    during.extend(drain(&mut p));
    assert!(starts(&during).is_empty(), "restarted under the brake");
    let held: Vec<Held> = p
        .countdowns(|_| true, 10)
        .rows
        .iter()
        .map(|c| c.held)
        .collect();
    assert_eq!(held, vec![Held::Brake]);
    p.upsert_node(&node("m1", vec![]), false, t(61_000));
    assert_eq!(starts(&drain(&mut p)).len(), 1, "goes on after the brake");
}

/// Hole 3: leadership is a term with a deadline. At the deadline, with no renewal and no word
/// from the lease, the pipeline stops every attempt of the term and starts nothing more; a
/// renewal moves the deadline; another term ends the old one at once.
#[test]
fn a_term_ends_at_its_deadline_unrenewed() {
    let (mut p, first) = one_pod_on_a_tainted_node(
        PipelineConfig::default(),
        Some(Term {
            id: 7,
            until: t(10_000),
        }),
    );
    assert_eq!(first.term, 7, "an attempt names its term");
    // Renewed at 5 s until 15 s.
    p.set_term(
        Some(Term {
            id: 7,
            until: t(15_000),
        }),
        t(5_000),
    );
    assert!(drain(&mut p).iter().all(|e| !matches!(e, Fx::Cancel(_))));
    assert_eq!(p.next_wake(), Some(t(15_000)), "it wakes for the deadline");
    p.tick(t(15_000));
    let effects = drain(&mut p);
    assert!(effects.contains(&Fx::Cancel(first.id)), "{effects:?}");
    assert!(effects.contains(&Fx::TermExpired { term: 7 }));
    assert!(!p.may_act());
    // A pod decided now is parked, not started.
    p.upsert_pod(PodObservation::new("ns", "q", "uq", Some("n")), t(15_001));
    assert!(starts(&drain(&mut p)).is_empty());
    report(&mut p, &first, AttemptResult::Cancelled, 15_002);
    assert!(starts(&drain(&mut p)).is_empty());
    // A new term: both go, in it.
    p.set_term(
        Some(Term {
            id: 8,
            until: t(30_000),
        }),
        t(16_000),
    );
    let again = starts(&drain(&mut p));
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|a| a.term == 8));
    // The lease shows another holder (term 9 is someone else's view; for us: none).
    p.set_term(None, t(17_000));
    let effects = drain(&mut p);
    for a in &again {
        assert!(effects.contains(&Fx::Cancel(a.id)), "{effects:?}");
    }
}

/// A stall longer than the term: the first input after it (whatever it is) ends the term
/// before anything else happens, so no due deadline starts an attempt in a dead term.
#[test]
fn a_stalled_leader_starts_nothing_when_it_wakes() {
    let mut p = Pipeline::new(PipelineConfig::default());
    p.listing_started(Watched::Nodes);
    p.listing_done(Watched::Nodes, t(0));
    p.listing_started(Watched::Pods);
    p.listing_done(Watched::Pods, t(0));
    p.set_term(
        Some(Term {
            id: 1,
            until: t(10_000),
        }),
        t(0),
    );
    p.upsert_node(&node("n", vec![Taint::no_execute("k", "v")]), false, t(0));
    let pod = PodObservation::new("ns", "p", "u", Some("n"))
        .with_tolerations(vec![Toleration::exists("k", None).for_seconds(5)]);
    p.upsert_pod(pod, t(0));
    drain(&mut p);
    // Frozen from 1 s to 60 s: the deadline (5 s) and the term's end (10 s) passed meanwhile.
    p.upsert_pod(
        PodObservation::new("ns", "other", "uo", Some("m")),
        t(60_000),
    );
    let effects = drain(&mut p);
    assert!(starts(&effects).is_empty(), "{effects:?}");
    assert!(effects.contains(&Fx::TermExpired { term: 1 }));
}

/// Hole 2: a rolling restart. The old leader's last "Marking for deletion" Events reach the
/// new leader's watch after it took over; they name our Lease, so they are never foreign, and
/// `refuse_if_foreign` does not stop the new leader. Another controller's Event (no Lease) is.
#[test]
fn our_own_replicas_events_are_never_foreign() {
    let config = PipelineConfig {
        lease: Some("noexecute/noexecute".into()),
        refuse_if_foreign: true,
        ..PipelineConfig::default()
    };
    let (mut p, first) = one_pod_on_a_tainted_node(
        config,
        Some(Term {
            id: 2,
            until: Time::MAX,
        }),
    );
    let sign = |lease: Option<&str>, at: i64| ForeignSign {
        namespace: "ns".into(),
        name: "p".into(),
        kind: SignKind::Announcement,
        at: t(at),
        lease: lease.map(str::to_string),
        writer: "taint-eviction-controller (old-replica)".into(),
    };
    // Well past the handover window: only the Lease tells it apart.
    p.foreign_sign(sign(Some("noexecute/noexecute"), 20_000), t(20_000));
    let effects = drain(&mut p);
    assert!(
        !effects.iter().any(|e| matches!(e, Fx::Foreign { .. })),
        "{effects:?}"
    );
    assert!(p.may_act() && !p.refusing());
    // Another taint eviction controller's Event: foreign, and refused.
    p.foreign_sign(sign(None, 21_000), t(21_000));
    let effects = drain(&mut p);
    assert!(effects.iter().any(|e| matches!(
        e,
        Fx::Foreign {
            first: true,
            refusing: true,
            ..
        }
    )));
    assert!(effects.contains(&Fx::Cancel(first.id)));
    assert!(p.refusing() && !p.may_act());
}

/// Hole 5: a node relabelled out of `--node-selector` is another shard's. Its pods'
/// evictions, decided on its last taints, must not fire: here a 60 s toleration would run out
/// at 61 s, after the node left at 10 s (and was untainted by the other shard's view).
#[test]
fn a_node_that_leaves_the_selector_keeps_no_eviction() {
    let mut p = Pipeline::acting(PipelineConfig::default());
    p.upsert_node(&node("n", vec![Taint::no_execute("k", "v")]), false, t(0));
    let pod = PodObservation::new("ns", "p", "u", Some("n"))
        .with_tolerations(vec![Toleration::exists("k", None).for_seconds(60)]);
    p.upsert_pod(pod, t(1_000));
    drain(&mut p);
    assert_eq!(p.pending(), 1);
    p.node_left("n", t(10_000));
    let mut effects = drain(&mut p);
    for at in [61_000, 120_000] {
        p.tick(t(at));
        effects.extend(drain(&mut p));
    }
    assert!(starts(&effects).is_empty(), "{effects:?}");
    assert_eq!(p.pending(), 0);
    assert_eq!(p.next_wake(), None);
    // A deletion keeps upstream's behaviour: the eviction stays.
    let mut q = Pipeline::acting(PipelineConfig::default());
    q.upsert_node(&node("n", vec![Taint::no_execute("k", "v")]), false, t(0));
    let pod = PodObservation::new("ns", "p", "u", Some("n"))
        .with_tolerations(vec![Toleration::exists("k", None).for_seconds(60)]);
    q.upsert_pod(pod, t(1_000));
    q.delete_node("n", t(10_000));
    drain(&mut q);
    q.tick(t(61_000));
    assert_eq!(
        starts(&drain(&mut q)).len(),
        1,
        "upstream's parity on deletion"
    );
}

/// Hole 6: the guard's memory of pods (ours, already judged) is forgotten for pods a relist
/// no longer has, as for deleted ones.
#[test]
fn the_guard_forgets_pods_a_relist_removed() {
    let (mut p, first) = one_pod_on_a_tainted_node(
        PipelineConfig::default(),
        Some(Term {
            id: 1,
            until: Time::MAX,
        }),
    );
    report(&mut p, &first, AttemptResult::Evicted, 2);
    p.foreign_sign(
        ForeignSign {
            namespace: "ns".into(),
            name: "p".into(),
            kind: SignKind::Mark,
            at: t(2),
            lease: None,
            writer: String::new(),
        },
        t(2),
    );
    drain(&mut p);
    assert!(p.guard_memory() > 0);
    // The relist does not have the pod: it was deleted while the watch was down.
    p.listing_started(Watched::Pods);
    p.listing_done(Watched::Pods, t(3));
    drain(&mut p);
    // Remembered like a deletion, for late signs, and no longer.
    p.tick(t(3 + noexecute_engine::pipeline::DEPARTED_MS));
    assert_eq!(
        p.guard_memory(),
        0,
        "the guard still remembers a pod that is gone"
    );
}

/// Hole 6: `/status` formatted every pending eviction on the controller's own thread. It now
/// asks for the earliest `limit` and gets the total beside them: the rows are the earliest
/// deadlines, in order, whatever the number pending.
#[test]
fn countdowns_are_bounded_to_the_earliest_deadlines() {
    let mut p = Pipeline::acting(PipelineConfig::default());
    p.upsert_node(&node("n", vec![Taint::no_execute("k", "v")]), false, t(0));
    for i in 0..1_000i64 {
        // Deadlines from 1,000 s down to 1 s: the last pods are due first.
        let pod = PodObservation::new("ns", &format!("p{i:04}"), &format!("u{i}"), Some("n"))
            .with_tolerations(vec![Toleration::exists("k", None).for_seconds(1_000 - i)]);
        p.upsert_pod(pod, t(0));
    }
    drain(&mut p);
    let c = p.countdowns(|_| true, 10);
    assert_eq!(c.total, 1_000);
    let names: Vec<&str> = c.rows.iter().map(|r| &*r.pod.name).collect();
    let want: Vec<String> = (990..1_000).rev().map(|i| format!("p{i:04}")).collect();
    assert_eq!(names, want, "the ten due first, earliest first");
    assert!(c.rows.windows(2).all(|w| w[0].deadline <= w[1].deadline));
    let some = p.countdowns(|pod| pod.name.ends_with('7'), 1_000);
    assert_eq!((some.total, some.rows.len()), (100, 100));
}
