//! What the fault soak found in the pipeline (issue 19, `docs/soak.md`), each as the smallest
//! scenario on a virtual clock. Every test here failed before its fix.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use noexecute_engine::pipeline::{Attempt, Effect as Fx, Pipeline, PipelineConfig};
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
