//! What the fault soak found in the pipeline (issue 19, `docs/soak.md`), each as the smallest
//! scenario on a virtual clock. Every test here failed before its fix.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use noexecute_engine::pipeline::{
    Attempt, DEPARTED_MS, Effect as Fx, ForeignSign, Pipeline, PipelineConfig, SignKind,
};
use noexecute_engine::{Config, NodeObservation, PodObservation, Taint, Time, Toleration};

fn t(ms: i64) -> Time {
    Time::from_millis(ms)
}

fn starts(p: &mut Pipeline) -> Vec<Attempt> {
    std::iter::from_fn(|| p.poll_effect())
        .filter_map(|e| match e {
            Fx::Start(a) => Some(a),
            _ => None,
        })
        .collect()
}

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
