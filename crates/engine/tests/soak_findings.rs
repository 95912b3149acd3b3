//! What the fault soak found in the pipeline (issue 19, `docs/soak.md`), each as the smallest
//! scenario on a virtual clock. Every test here failed before its fix.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::{starts, t};
use noexecute_engine::pipeline::{
    Attempt, AttemptReport, AttemptResult, DEPARTED_MS, Effect as Fx, ForeignSign, Pipeline,
    PipelineConfig, SignKind, Watched,
};
use noexecute_engine::{Config, NodeObservation, PodObservation, Taint, Toleration};

/// A node tainted `unreachable` at `added_ms` (its `timeAdded`), and a pipeline with
/// restart-safe deadlines and the stale-cache guard.
fn restart_safe(added_ms: i64) -> Pipeline {
    let mut p = Pipeline::acting(PipelineConfig {
        stale_cache_guard: true,
        engine: Config {
            deadline_from_time_added: true,
            ..Config::default()
        },
        ..PipelineConfig::default()
    });
    let mut taint = Taint::no_execute("node.kubernetes.io/unreachable", "");
    taint.time_added = Some(t(added_ms));
    p.upsert_node(
        &NodeObservation {
            name: "n".into(),
            taints: vec![taint],
        },
        false,
        t(added_ms),
    );
    p
}

fn pod(uid: &str) -> PodObservation {
    PodObservation::new("ns", uid, uid, Some("n")).with_tolerations(vec![
        Toleration::exists("node.kubernetes.io/unreachable", None).for_seconds(5),
    ])
}

/// Seed 3 (1 h), 07:10:57: a pod bound to a node whose `unreachable` taint (tolerated 5 s,
/// counted from `timeAdded`) had run out, just after the taint was removed, while the node
/// watch lagged. The pod event decided an eviction due at once, and the stale-cache guard did
/// not apply: it covered only untolerated taints. A countdown run out from `timeAdded` is due
/// at once as surely, and the node is read afresh first. A timer that fires is not re-read
/// (the positive control): its decision is as fresh as the node event that set it.
#[test]
fn a_pod_event_on_a_countdown_already_run_out_reads_the_node_first() {
    let mut p = restart_safe(0);
    p.upsert_pod(pod("late"), t(10_000));
    let started = starts(&mut p);
    assert_eq!(started.len(), 1, "due at once: 0 s + 5 s < 10 s");
    assert!(
        started[0].guard().is_some(),
        "a pod event decided it on the cache: the node must be read afresh"
    );

    let mut p = restart_safe(8_000);
    p.upsert_pod(pod("early"), t(10_000));
    assert!(starts(&mut p).is_empty(), "due at 13 s");
    p.tick(t(13_000));
    let fired = starts(&mut p);
    assert_eq!(fired.len(), 1);
    assert!(
        fired[0].guard().is_none(),
        "a timer's eviction is not re-read"
    );
}

/// CI, the real-API test `upstreams_evictions_are_noticed_within_seconds_and_refused` (both
/// controllers racing on the same pods, the machine loaded): upstream's "Marking for deletion"
/// Event about a pod reached the watch after the pod's deletion had. The guard dropped it, for
/// the pod was unknown by then, and upstream's marks on pods this replica had started evicting
/// too are rightly ambiguous; so upstream went unnoticed. A deleted pod is now remembered for
/// [`DEPARTED_MS`]; a sign about it later than that is not counted (the negative control).
#[test]
fn a_foreign_event_that_arrives_after_the_deletion_it_announced_is_counted() {
    let mut p = Pipeline::acting(PipelineConfig::default());
    p.upsert_node(
        &NodeObservation {
            name: "n".into(),
            taints: vec![Taint::no_execute("k", "v")],
        },
        false,
        t(0),
    );
    for name in ["raced", "old"] {
        p.upsert_pod(PodObservation::new("ns", name, name, Some("n")), t(1_000));
    }
    // Tolerated for ever: never ours.
    p.upsert_pod(
        PodObservation::new("ns", "again", "again", Some("n"))
            .with_tolerations(vec![Toleration::exists("k", None)]),
        t(1_000),
    );
    // Both evictions start here: the pods are ours as well as upstream's.
    assert_eq!(starts(&mut p).len(), 2);
    let sign = |name: &str, at: i64| ForeignSign {
        namespace: "ns".into(),
        name: name.into(),
        kind: SignKind::Announcement,
        at: t(at),
        lease: None,
        writer: "taint-eviction-controller".into(),
    };
    let foreign = |p: &mut Pipeline| {
        std::iter::from_fn(|| p.poll_effect())
            .filter(|e| matches!(e, Fx::Foreign { .. }))
            .count()
    };
    // "old" is deleted, and its Event comes after the window: not counted.
    p.delete_pod("ns", "old", None, t(2_000));
    p.foreign_sign(sign("old", 2_000), t(2_000 + DEPARTED_MS));
    assert_eq!(foreign(&mut p), 0, "a sign about a pod long gone");
    // "raced" is deleted by upstream; its Event arrives 3 s after the deletion.
    p.delete_pod("ns", "raced", None, t(40_000));
    p.foreign_sign(sign("raced", 39_900), t(43_000));
    assert_eq!(foreign(&mut p), 1, "upstream's late Event went unnoticed");
    // Counted once.
    p.foreign_sign(sign("raced", 39_900), t(43_500));
    assert_eq!(foreign(&mut p), 0);
    // A mark about a pod the watch does not show is not judged on a deleted namesake.
    p.delete_pod("ns", "again", None, t(44_000));
    p.foreign_sign(
        ForeignSign {
            kind: SignKind::Mark,
            ..sign("again", 44_000)
        },
        t(44_000),
    );
    assert_eq!(foreign(&mut p), 0, "a mark judged on the deleted pod");
    // The memory is bounded in time: a tick forgets it.
    assert!(p.guard_memory() > 0);
    p.tick(t(100_000));
    assert_eq!(p.guard_memory(), 0);
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

fn node(taints: Vec<Taint>) -> NodeObservation {
    NodeObservation {
        name: "n".into(),
        taints,
    }
}

/// A standby with restart-safe deadlines and the guard, synced; pod `p` (no tolerations) on
/// `n`, then `soak/b` on `n` at 1 s: the node event decides the eviction, parked.
fn standby_with_a_parked_eviction() -> Pipeline {
    let mut p = Pipeline::new(PipelineConfig {
        stale_cache_guard: true,
        engine: Config {
            deadline_from_time_added: true,
            ..Config::default()
        },
        ..PipelineConfig::default()
    });
    for w in [Watched::Nodes, Watched::Pods] {
        p.listing_started(w);
        p.listing_done(w, t(0));
    }
    p.upsert_node(&node(vec![]), false, t(0));
    p.upsert_pod(PodObservation::new("ns", "p", "p", Some("n")), t(0));
    let mut taint = Taint::no_execute("soak/b", "");
    taint.time_added = Some(t(1_000));
    p.upsert_node(&node(vec![taint]), false, t(1_000));
    assert_eq!(p.parked(), 1);
    p
}

/// Seed 11 (1 h), 17:59:38: a standby had decided evictions on an untolerated `soak/b` (a node
/// event, so unguarded: the node update is the news). A kube-apiserver restart broke its node
/// watch (403 while RBAC warmed up, then 410 and a relist), it became leader, and it started
/// the parked evictions on its cache 3.1 s after `soak/b` had gone and 0.8 s before the relist
/// would have cancelled them. Every eviction that starts while the node watch has failed and
/// not recovered (or is relisting) reads the node first; a stale answer on a cache that has not
/// moved waits for the watch, without reading again.
#[test]
fn evictions_started_while_the_node_watch_is_down_read_the_node_first() {
    let mut p = standby_with_a_parked_eviction();
    p.watch_failed(Watched::Nodes);
    assert!(p.node_view_stale());
    p.set_leading(true, t(8_000));
    let started = starts(&mut p);
    assert_eq!(started.len(), 1);
    assert!(
        started[0].guard().is_some(),
        "the node watch is down: its cache cannot be trusted to still justify the eviction"
    );
    // The fresh read shows `soak/b` gone: no new attempt while the cache stands still.
    report(&mut p, &started[0], AttemptResult::Stale, 8_100);
    p.tick(t(9_000));
    assert!(
        starts(&mut p).is_empty(),
        "read again on an unchanged cache"
    );
    // The relist brings the node without the taint: nothing is started, ever.
    p.listing_started(Watched::Nodes);
    assert!(p.node_view_stale(), "relisting");
    p.upsert_node(&node(vec![]), false, t(9_500));
    p.listing_done(Watched::Nodes, t(9_600));
    assert!(!p.node_view_stale());
    p.tick(t(60_000));
    assert!(starts(&mut p).is_empty());
    assert_eq!(p.pending(), 0);

    // The control: with the watch well, a takeover starts it as upstream does (no read).
    let mut p = standby_with_a_parked_eviction();
    p.set_leading(true, t(8_000));
    let started = starts(&mut p);
    assert_eq!(started.len(), 1);
    assert!(started[0].guard().is_none(), "parity: two requests");

    // A live node event after the failure means the watch resumed: no read after it.
    let mut p = standby_with_a_parked_eviction();
    p.watch_failed(Watched::Nodes);
    let mut taint = Taint::no_execute("soak/b", "");
    taint.time_added = Some(t(1_000));
    p.upsert_node(
        &node(vec![taint, Taint::no_execute("x", "")]),
        false,
        t(5_000),
    );
    assert!(!p.node_view_stale());
    p.set_leading(true, t(8_000));
    assert!(starts(&mut p)[0].guard().is_none());
}

/// With upstream's deadlines a countdown is counted from when the controller saw the taint, so
/// a fresh read cannot recompute it: a timer-fired eviction that starts while the node watch
/// is down is confirmed by any taint the pod still tolerates only for a while, and dropped
/// when the taints are gone.
#[test]
fn a_countdown_fired_while_the_node_watch_is_down_is_confirmed_by_a_finite_toleration() {
    let guard_of = |p: &mut Pipeline| {
        p.watch_failed(Watched::Nodes);
        p.tick(t(301_000));
        starts(p)
            .pop()
            .and_then(|a| a.guard())
            .expect("a guarded start")
    };
    let mut p = Pipeline::acting(PipelineConfig {
        stale_cache_guard: true,
        ..PipelineConfig::default()
    });
    p.upsert_node(&node(vec![Taint::no_execute("k", "")]), false, t(0));
    p.upsert_pod(
        PodObservation::new("ns", "p", "p", Some("n"))
            .with_tolerations(vec![Toleration::exists("k", None).for_seconds(300)]),
        t(1_000),
    );
    let guard = guard_of(&mut p);
    let tolerations = [Toleration::exists("k", None).for_seconds(300)];
    assert!(guard.justifies(
        true,
        &[Taint::no_execute("k", "")],
        &tolerations,
        t(301_000)
    ));
    assert!(!guard.justifies(true, &[], &tolerations, t(301_000)));
    assert!(!guard.justifies(
        false,
        &[Taint::no_execute("k", "")],
        &tolerations,
        t(301_000)
    ));
}

/// The loop the fix above would have made common: with restart-safe deadlines, a pod event
/// on a countdown already run out is guarded; when the fresh read says "not yet" (the taint
/// was re-stamped) and the cache has not moved, deciding again on that cache made it due at
/// once and read the node again, as fast as the API server answered.
#[test]
fn a_stale_answer_on_an_unmoved_cache_is_not_read_again() {
    let mut p = restart_safe(0);
    p.upsert_pod(pod("late"), t(10_000));
    let started = starts(&mut p);
    assert!(started[0].guard().is_some());
    report(&mut p, &started[0], AttemptResult::Stale, 10_100);
    assert!(starts(&mut p).is_empty(), "the same eviction, read again");
    // The watch brings the re-stamp: the countdown runs from it.
    let mut taint = Taint::no_execute("node.kubernetes.io/unreachable", "");
    taint.time_added = Some(t(9_000));
    p.upsert_node(&node(vec![taint]), false, t(10_500));
    assert!(starts(&mut p).is_empty());
    p.tick(t(14_000));
    assert_eq!(starts(&mut p).len(), 1, "due at 9 s + 5 s");
}
