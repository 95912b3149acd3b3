//! `--handover-delay`: while upstream's controller may still run (the switch to noexecute, or
//! back), each eviction starts that long after it fell due, reading the pod first, so that
//! whichever controller runs evicts it, once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::{starts, t};
use noexecute_engine::pipeline::{Pipeline, PipelineConfig, Plan};
use noexecute_engine::{NodeObservation, PodObservation, Taint, Toleration};
use std::time::Duration;

fn pipeline(handover: Option<u64>) -> Pipeline {
    let mut p = Pipeline::acting(PipelineConfig {
        handover: handover.map(Duration::from_secs),
        ..PipelineConfig::default()
    });
    p.upsert_pod(PodObservation::new("ns", "a", "ua", Some("n")), t(0));
    p.upsert_pod(
        PodObservation::new("ns", "b", "ub", Some("n"))
            .with_tolerations(vec![Toleration::exists("k", None).for_seconds(10)]),
        t(0),
    );
    p.upsert_node(
        &NodeObservation {
            name: "n".into(),
            taints: vec![Taint::no_execute("k", "")],
        },
        false,
        t(1_000),
    );
    p
}

#[test]
fn each_eviction_waits_out_the_delay_and_reads_the_pod_first() {
    // Without the delay: `a` at once, `b` at 11 s, as upstream.
    let mut p = pipeline(None);
    let now = starts(&mut p);
    assert_eq!(now.len(), 1);
    assert_eq!(now[0].plan, Plan::PatchThenDelete);

    let mut p = pipeline(Some(5));
    assert!(starts(&mut p).is_empty(), "held for the handover");
    assert_eq!(p.next_wake(), Some(t(6_000)));
    p.tick(t(5_999));
    assert!(starts(&mut p).is_empty());
    p.tick(t(6_000));
    let a = starts(&mut p);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].pod.name.as_ref(), "a");
    assert!(
        matches!(a[0].plan, Plan::ReadFirst { guard: Some(_), .. }),
        "the other controller may have evicted it, and the node may have changed: read the pod and the node first ({:?})",
        a[0].plan
    );
    // `b`'s countdown runs out at 11 s; it starts at 16 s.
    p.tick(t(11_000));
    assert!(starts(&mut p).is_empty());
    assert_eq!(p.next_wake(), Some(t(16_000)));
    p.tick(t(16_000));
    assert_eq!(starts(&mut p).len(), 1);
}

#[test]
fn a_pod_the_other_controller_evicted_during_the_delay_is_left_alone() {
    let mut p = pipeline(Some(5));
    // Upstream deletes `a` at 1.2 s: the watch shows it terminating, then gone.
    let mut gone = PodObservation::new("ns", "a", "ua", Some("n"));
    gone.terminating = true;
    p.upsert_pod(gone, t(1_200));
    p.delete_pod("ns", "a", None, t(1_300));
    // And the taint goes before `b`'s handover ends: nothing for noexecute to do.
    p.tick(t(11_000));
    p.upsert_node(
        &NodeObservation {
            name: "n".into(),
            taints: vec![],
        },
        false,
        t(12_000),
    );
    p.tick(t(60_000));
    assert!(starts(&mut p).is_empty());
    assert_eq!(p.pending(), 0);
    assert_eq!(p.next_wake(), None);
}

#[test]
fn a_deferred_eviction_reads_the_node_before_it_starts() {
    // `a` falls due at 1 s; in the delay its node's taint is swapped for one it tolerates for
    // 300 s. The attempt at 6 s must confirm against a fresh read of the node (the guard),
    // not delete on the decision of 1 s.
    let mut p = pipeline(Some(5));
    assert!(starts(&mut p).is_empty());
    p.upsert_node(
        &NodeObservation {
            name: "n".into(),
            taints: vec![Taint::no_execute("other", "")],
        },
        false,
        t(3_000),
    );
    p.tick(t(6_000));
    let a = starts(&mut p);
    let a = a
        .iter()
        .find(|a| a.pod.name.as_ref() == "a")
        .expect("a starts at 6 s");
    assert!(
        matches!(a.plan, Plan::ReadFirst { guard: Some(_), .. }),
        "{:?}",
        a.plan
    );
}
