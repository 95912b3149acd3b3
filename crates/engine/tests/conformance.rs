//! Upstream's unit tests, case by case, as engine scenarios on a virtual clock.
//!
//! Test names carry the case ids of `docs/parity.md` §19: `aNN_` for
//! `taint_eviction_test.go`, `bN_` for `timed_workers_test.go`, `cNN_` for the core/v1
//! toleration and taint tests, `dNN_` for `FindMatchingUntoleratedTaint`. Upstream checks
//! "not deleted" once, about 10 ms in; here every negative case is checked over the whole
//! window up to (and past) the toleration deadline.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use noexecute_engine::toleration::{
    compare_numeric_values, find_untolerated_taint, matching_tolerations, min_toleration_time,
};
use noexecute_engine::*;

// === §19.A taint_eviction_test.go ===

#[test]
fn a01_filter_no_execute_taints() {
    let taints = [
        Taint::new("one", "one", TaintEffect::NoExecute),
        Taint::new("two", "two", TaintEffect::NoSchedule),
    ];
    let filtered = noexecute_engine::taint::no_execute_taints(&taints);
    assert_eq!(filtered.len(), 1);
    assert_eq!(filtered[0].key, "one");
}

/// One `TestCreatePod` case: the node is tainted first, then the pod is added.
fn create_pod_case(node_taints: Vec<Taint>, pod: PodObservation) -> Harness {
    let mut h = Harness::default();
    h.node("node1", node_taints);
    h.pod(pod);
    h
}

#[test]
fn a02_create_pod_not_scheduled_is_ignored() {
    let mut h = create_pod_case(vec![taint(1)], pod("pod1", None, vec![]));
    h.assert_not_evicted_through("pod1", secs(DAY));
    assert!(h.log.is_empty());
}

#[test]
fn a03_create_pod_on_untainted_node() {
    let mut h = create_pod_case(vec![], pod("pod1", Some("node1"), vec![]));
    h.assert_not_evicted_through("pod1", secs(DAY));
    assert!(h.log.is_empty());
}

#[test]
fn a04_create_pod_on_tainted_node_is_evicted_at_once() {
    let h = create_pod_case(vec![taint(1)], pod("pod1", Some("node1"), vec![]));
    assert_eq!(h.evicted_at("pod1"), vec![secs(0.0)]);
}

#[test]
fn a05_create_pod_with_finite_toleration_is_evicted_when_it_runs_out() {
    let mut h = create_pod_case(
        vec![taint(1)],
        pod("pod1", Some("node1"), vec![toleration(1, 100)]),
    );
    h.assert_not_evicted_through("pod1", secs(99.999));
    h.advance_to(secs(100.0));
    assert_eq!(h.evicted_at("pod1"), vec![secs(100.0)]);
}

#[test]
fn a06_create_pod_with_infinite_toleration_is_never_evicted() {
    let mut h = create_pod_case(
        vec![taint(1)],
        pod("pod1", Some("node1"), vec![toleration(1, -1)]),
    );
    h.assert_not_evicted_through("pod1", secs(DAY));
    assert!(h.eviction_of("pod1").is_none());
}

#[test]
fn a07_create_pod_with_toleration_for_another_taint_is_evicted() {
    let h = create_pod_case(
        vec![taint(1)],
        pod("pod1", Some("node1"), vec![toleration(2, -1)]),
    );
    assert_eq!(h.evicted_at("pod1"), vec![secs(0.0)]);
}

#[test]
fn a08_deleting_an_unknown_pod_is_harmless() {
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    h.delete_pod("pod1");
    h.advance_secs(0.02);
    assert!(h.log.is_empty());
    assert_eq!(h.engine.pod_count(), 0);
}

/// One `TestUpdatePod` case: `prev` is added, time passes, then it is updated to `new`.
fn update_pod_case(prev: PodObservation, new: PodObservation) -> Harness {
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    h.pod(prev);
    // Upstream waits for the first evaluation before sending the update; a later instant is
    // what makes the update an update rather than a same-instant replacement.
    h.advance_secs(0.01);
    h.pod(new);
    h
}

#[test]
fn a09_scheduling_onto_tainted_node_evicts() {
    let h = update_pod_case(
        pod("pod1", None, vec![]),
        pod("pod1", Some("node1"), vec![]),
    );
    assert_eq!(h.evicted_at("pod1"), vec![secs(0.01)]);
}

#[test]
fn a10_scheduling_onto_tainted_node_with_toleration_does_not_evict() {
    let mut h = update_pod_case(
        pod("pod1", None, vec![toleration(1, -1)]),
        pod("pod1", Some("node1"), vec![toleration(1, -1)]),
    );
    h.assert_not_evicted_through("pod1", secs(DAY));
}

#[test]
fn a11_removing_toleration_evicts_at_once_and_cancels_the_schedule() {
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    h.pod(pod("pod1", Some("node1"), vec![toleration(1, 100)]));
    assert_eq!(h.eviction_of("pod1").map(|e| e.deadline), Some(secs(100.0)));
    h.advance_secs(0.01);
    h.pod(pod("pod1", Some("node1"), vec![]));
    assert_eq!(h.evicted_at("pod1"), vec![secs(0.01)]);
    let cancels = h.cancels();
    assert_eq!(cancels.len(), 1);
    assert!(cancels[0].2, "the cancelled delayed eviction is announced");
    assert_eq!(
        h.events(),
        vec![
            "Cancelling deletion of Pod default/pod1".to_string(),
            "Marking for deletion Pod default/pod1".to_string()
        ]
    );
}

#[test]
fn a12_lengthening_toleration_is_ignored() {
    let mut h = update_pod_case(
        pod("pod1", Some("node1"), vec![toleration(1, 1)]),
        pod("pod1", Some("node1"), vec![toleration(1, 100)]),
    );
    h.assert_not_evicted_through("pod1", secs(0.999));
    h.advance_to(secs(5.0));
    assert_eq!(h.evicted_at("pod1"), vec![secs(1.0)]);
}

/// One `TestCreateNode` case: the pod exists, then the node is created.
fn create_node_case(node_taints: Vec<Taint>, tolerations: Vec<Toleration>) -> Harness {
    let mut h = Harness::default();
    h.pod(pod("pod1", Some("node1"), tolerations));
    h.node("node1", node_taints);
    h
}

#[test]
fn a13_creating_untainted_node_of_assigned_pod() {
    let mut h = create_node_case(vec![], vec![]);
    h.assert_not_evicted_through("pod1", secs(DAY));
}

#[test]
fn a14_creating_tainted_node_of_assigned_pod_evicts() {
    let h = create_node_case(vec![taint(1)], vec![]);
    assert_eq!(h.evicted_at("pod1"), vec![secs(0.0)]);
}

#[test]
fn a15_creating_tainted_node_of_tolerating_pod() {
    let mut h = create_node_case(vec![taint(1)], vec![toleration(1, -1)]);
    h.assert_not_evicted_through("pod1", secs(DAY));
}

#[test]
fn a16_deleting_node_forgets_its_taints() {
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    assert_eq!(h.engine.node_taints("node1"), Some(&[taint(1)][..]));
    h.delete_node("node1");
    assert_eq!(h.engine.node_taints("node1"), None);
    assert!(!h.engine.node_exists("node1"));
}

/// One `TestUpdateNode` case: the pod is on `node1` (untainted, or `old`), which is updated.
fn update_node_case(old: Vec<Taint>, new: Vec<Taint>, tolerations: Vec<Toleration>) -> Harness {
    let mut h = Harness::default();
    h.node("node1", old);
    h.pod(pod("pod1", Some("node1"), tolerations));
    h.advance_secs(0.01);
    h.node("node1", new);
    h
}

#[test]
fn a17_added_taint_evicts() {
    let h = update_node_case(vec![], vec![taint(1)], vec![]);
    assert_eq!(h.evicted_at("pod1"), vec![secs(0.01)]);
}

#[test]
fn a18_added_tolerated_taint_does_not_evict_before_the_toleration_ends() {
    let mut h = update_node_case(vec![], vec![taint(1)], vec![toleration(1, 100)]);
    h.assert_not_evicted_through("pod1", secs(100.009));
    h.advance_to(secs(100.01));
    assert_eq!(h.evicted_at("pod1"), vec![secs(100.01)]);
}

#[test]
fn a19_only_one_added_taint_tolerated_evicts() {
    let h = update_node_case(vec![], vec![taint(1), taint(2)], vec![toleration(1, 100)]);
    assert_eq!(h.evicted_at("pod1"), vec![secs(0.01)]);
}

#[test]
fn a20_taint_removed_does_not_evict() {
    // Upstream's case: the node's old version had the taint, but the controller never saw it.
    let mut h = Harness::default();
    h.pod(pod("pod1", Some("node1"), vec![toleration(1, 1)]));
    h.node("node1", vec![]);
    h.assert_not_evicted_through("pod1", secs(DAY));
}

#[test]
fn a20_implied_taint_removed_before_deadline_cancels() {
    let mut h = update_node_case(vec![taint(1)], vec![], vec![toleration(1, 1)]);
    h.assert_not_evicted_through("pod1", secs(DAY));
    let cancels = h.cancels();
    assert_eq!(cancels.len(), 1);
    assert_eq!(cancels[0].3, CancelReason::NodeUntainted);
    assert_eq!(
        h.events(),
        vec!["Cancelling deletion of Pod default/pod1".to_string()]
    );
}

#[test]
fn a21_first_toleration_to_run_out_decides() {
    let mut h = update_node_case(
        vec![],
        vec![taint(1), taint(2)],
        vec![toleration(1, 1), toleration(2, 100)],
    );
    h.assert_not_evicted_through("pod1", secs(1.009));
    h.advance_to(secs(5.0));
    assert_eq!(h.evicted_at("pod1"), vec![secs(1.01)]);
}

#[test]
fn a22_update_node_with_multiple_taints() {
    let tolerations = vec![
        Toleration::exists("testTaint1", Some(TaintEffect::NoExecute)),
        Toleration::exists("testTaint2", Some(TaintEffect::NoExecute)).for_seconds(60),
    ];
    let mut h = Harness::default();
    h.pod(pod("pod1", Some("node1"), tolerations));
    h.node("node1", vec![]);
    assert!(
        h.eviction_of("pod1").is_none(),
        "(1) untainted: nothing scheduled"
    );
    h.advance_secs(1.0);
    h.node("node1", vec![taint(1)]);
    assert!(h.eviction_of("pod1").is_none(), "(2) tolerated forever");
    h.advance_secs(1.0);
    h.node("node1", vec![taint(1), taint(2)]);
    let e = h.eviction_of("pod1").expect("(3) scheduled");
    assert_eq!(e.deadline, secs(62.0));
    h.advance_secs(1.0);
    h.node("node1", vec![taint(1)]);
    assert!(h.eviction_of("pod1").is_none(), "(4) cancelled");
    h.assert_not_evicted_through("pod1", secs(DAY));
}

fn multiple_pods() -> Vec<PodObservation> {
    vec![
        pod("pod1", Some("node1"), vec![]),
        pod("pod2", Some("node1"), vec![toleration(1, 1)]),
        pod("pod3", Some("node1"), vec![toleration(1, -1)]),
    ]
}

#[test]
fn a23_pods_with_different_toleration_times_are_evicted_in_turn() {
    let mut h = Harness::default();
    for p in multiple_pods() {
        h.pod(p);
    }
    h.node("node1", vec![taint(1)]);
    h.advance_to(secs(0.5));
    assert_eq!(h.evicted_names(), vec!["pod1"]);
    h.advance_to(secs(1.5));
    assert_eq!(h.evicted_names(), vec!["pod1", "pod2"]);
    assert_eq!(h.evicted_at("pod2"), vec![secs(1.0)]);
    h.assert_not_evicted_through("pod3", secs(DAY));
}

#[test]
fn a24_pods_not_tolerating_all_taints_are_evicted_at_once() {
    let mut h = Harness::default();
    for p in multiple_pods() {
        h.pod(p);
    }
    h.node("node1", vec![taint(1), taint(2)]);
    assert_eq!(h.evicted_names(), vec!["pod1", "pod2", "pod3"]);
    assert!(h.evictions().iter().all(|(t, _)| *t == secs(0.0)));
}

fn seconds(s: Option<i64>) -> Toleration {
    Toleration {
        toleration_seconds: s,
        ..Toleration::exists("k", None)
    }
}

#[test]
fn a25_min_toleration_time_of_nothing_is_zero() {
    assert_eq!(min_toleration_time(&[]), TolerationTime::Immediate);
}

#[test]
fn a26_min_toleration_time_unset_is_forever() {
    assert_eq!(
        min_toleration_time(&[seconds(None)]),
        TolerationTime::Forever
    );
}

#[test]
fn a27_min_toleration_time_is_the_smallest() {
    assert_eq!(
        min_toleration_time(&[seconds(Some(1)), seconds(Some(2))]),
        TolerationTime::After(Duration::from_secs(1))
    );
}

#[test]
fn a28_min_toleration_time_ignores_unset_after() {
    assert_eq!(
        min_toleration_time(&[seconds(Some(1)), seconds(None)]),
        TolerationTime::After(Duration::from_secs(1))
    );
}

#[test]
fn a29_min_toleration_time_ignores_unset_before() {
    assert_eq!(
        min_toleration_time(&[seconds(None), seconds(Some(1))]),
        TolerationTime::After(Duration::from_secs(1))
    );
}

/// `TestEventualConsistency`: pod1 (no tolerations) is on node1, which gets tainted; then
/// pod2 appears on node1 (added directly, or bound from an unscheduled pod).
fn eventual_consistency_case(prev: Option<PodObservation>, new: PodObservation) -> Harness {
    let mut h = Harness::default();
    h.pod(pod("pod1", Some("node1"), vec![]));
    if let Some(prev) = prev {
        h.pod(prev);
    }
    h.node("node1", vec![]);
    h.advance_secs(0.01);
    h.node("node1", vec![taint(1)]);
    assert_eq!(h.evicted_names(), vec!["pod1"]);
    h.advance_secs(0.02);
    h.pod(new);
    h
}

#[test]
fn a30_existing_pod_scheduled_onto_tainted_node() {
    let h = eventual_consistency_case(
        Some(pod("pod2", None, vec![])),
        pod("pod2", Some("node1"), vec![]),
    );
    assert_eq!(h.evicted_at("pod2"), vec![secs(0.03)]);
}

#[test]
fn a31_existing_tolerating_pod_scheduled_onto_tainted_node() {
    let mut h = eventual_consistency_case(
        Some(pod("pod2", None, vec![toleration(1, 100)])),
        pod("pod2", Some("node1"), vec![toleration(1, 100)]),
    );
    h.assert_not_evicted_through("pod2", secs(100.029));
    h.advance_to(secs(200.0));
    assert_eq!(h.evicted_at("pod2"), vec![secs(100.03)]);
}

#[test]
fn a32_new_pod_created_on_tainted_node() {
    let h = eventual_consistency_case(None, pod("pod2", Some("node1"), vec![]));
    assert_eq!(h.evicted_at("pod2"), vec![secs(0.03)]);
}

#[test]
fn a33_new_tolerating_pod_created_on_tainted_node() {
    let mut h =
        eventual_consistency_case(None, pod("pod2", Some("node1"), vec![toleration(1, 100)]));
    h.assert_not_evicted_through("pod2", secs(100.029));
    h.advance_to(secs(200.0));
    assert_eq!(h.evicted_at("pod2"), vec![secs(100.03)]);
}

fn test_pod_ref() -> PodRef {
    PodRef {
        namespace: "test".into(),
        name: "test".into(),
        uid: Uid::new("u"),
        node: None,
    }
}

#[test]
fn a34_pod_deletion_event() {
    let action = Action::Evict {
        pod: test_pod_ref(),
        eviction: EvictionId(1),
        deadline: secs(0.0),
        retry: false,
        cause: None,
    };
    let event = action.upstream_event().expect("an event");
    assert_eq!(event.type_, "Normal");
    assert_eq!(event.reason, "TaintManagerEviction");
    assert_eq!(event.message, "Marking for deletion Pod test/test");
    // A retry of the same eviction records nothing more.
    let retry = Action::Evict {
        pod: test_pod_ref(),
        eviction: EvictionId(1),
        deadline: secs(0.0),
        retry: true,
        cause: None,
    };
    assert_eq!(retry.upstream_event(), None);
}

#[test]
fn a35_cancel_pod_deletion_event() {
    let action = Action::Cancel {
        pod: test_pod_ref(),
        eviction: EvictionId(1),
        announce: true,
        reason: CancelReason::NodeUntainted,
    };
    let event = action.upstream_event().expect("an event");
    assert_eq!(event.type_, "Normal");
    assert_eq!(event.reason, "TaintManagerEviction");
    assert_eq!(event.message, "Cancelling deletion of Pod test/test");
    let silent = Action::Cancel {
        pod: test_pod_ref(),
        eviction: EvictionId(1),
        announce: false,
        reason: CancelReason::NodeUntainted,
    };
    assert_eq!(silent.upstream_event(), None);
}

// --- Implied cases (§19.A, after A35) ---

#[test]
fn a_implied_shortening_toleration_keeps_the_later_deadline() {
    let mut h = update_pod_case(
        pod("pod1", Some("node1"), vec![toleration(1, 100)]),
        pod("pod1", Some("node1"), vec![toleration(1, 1)]),
    );
    h.assert_not_evicted_through("pod1", secs(99.999));
    h.advance_to(secs(100.0));
    assert_eq!(h.evicted_at("pod1"), vec![secs(100.0)]);
}

#[test]
fn a_implied_second_taint_with_shorter_toleration_keeps_the_deadline() {
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    h.pod(pod(
        "pod1",
        Some("node1"),
        vec![toleration(1, 100), toleration(2, 10)],
    ));
    h.advance_secs(1.0);
    h.node("node1", vec![taint(1), taint(2)]);
    h.assert_not_evicted_through("pod1", secs(99.999));
    h.advance_to(secs(100.0));
    assert_eq!(h.evicted_at("pod1"), vec![secs(100.0)]);
}

#[test]
fn a_implied_removing_the_short_taint_keeps_the_short_deadline() {
    // kubernetes/kubernetes#90794: the deadline set by taint2 (10 s) stays after taint2 goes.
    let mut h = Harness::default();
    h.node("node1", vec![taint(1), taint(2)]);
    h.pod(pod(
        "pod1",
        Some("node1"),
        vec![toleration(1, 100), toleration(2, 10)],
    ));
    h.advance_secs(1.0);
    h.node("node1", vec![taint(1)]);
    h.assert_not_evicted_through("pod1", secs(9.999));
    h.advance_to(secs(10.0));
    assert_eq!(h.evicted_at("pod1"), vec![secs(10.0)]);
}

#[test]
fn a_implied_zero_second_toleration_evicts_at_once() {
    let h = create_pod_case(
        vec![taint(1)],
        pod("pod1", Some("node1"), vec![toleration(1, 0)]),
    );
    assert_eq!(h.evicted_at("pod1"), vec![secs(0.0)]);
}

#[test]
fn a_implied_negative_toleration_evicts_at_once() {
    let h = create_pod_case(
        vec![taint(1)],
        pod("pod1", Some("node1"), vec![toleration(1, -5)]),
    );
    // `toleration(1, -5)` means "forever" in upstream's helper; build the negative one directly.
    assert!(h.evicted_at("pod1").is_empty());
    let t = Toleration::equal("testTaint1", "test1", Some(TaintEffect::NoExecute)).for_seconds(-5);
    let h = create_pod_case(vec![taint(1)], pod("pod1", Some("node1"), vec![t]));
    assert_eq!(h.evicted_at("pod1"), vec![secs(0.0)]);
}

#[test]
fn a_implied_first_matching_toleration_counts() {
    // The 10 s toleration comes first, so the forever wildcard after it is never used.
    let tolerations = vec![
        Toleration::exists("testTaint1", Some(TaintEffect::NoExecute)).for_seconds(10),
        Toleration::exists("", None),
    ];
    let mut h = create_pod_case(vec![taint(1)], pod("pod1", Some("node1"), tolerations));
    h.advance_to(secs(20.0));
    assert_eq!(h.evicted_at("pod1"), vec![secs(10.0)]);
}

#[test]
fn a_implied_same_instant_update_replaces_the_schedule() {
    // Upstream replaces a scheduled eviction when `CreatedAt` is not before `now`.
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    h.pod(pod("pod1", Some("node1"), vec![toleration(1, 100)]));
    h.pod(pod("pod1", Some("node1"), vec![toleration(1, 50)]));
    assert_eq!(h.eviction_of("pod1").map(|e| e.deadline), Some(secs(50.0)));
    h.advance_to(secs(60.0));
    assert_eq!(h.evicted_at("pod1"), vec![secs(50.0)]);
}

#[test]
fn a_implied_pod_update_without_toleration_or_node_change_is_ignored() {
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    h.pod(pod("pod1", Some("node1"), vec![toleration(1, 100)]));
    let before = h.log.len();
    h.advance_secs(10.0);
    let mut p = pod("pod1", Some("node1"), vec![toleration(1, 100)]);
    p.phase = Phase::Succeeded;
    h.pod(p);
    assert_eq!(h.log.len(), before);
}

#[test]
fn a_implied_node_update_without_no_execute_change_is_ignored() {
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    h.pod(pod("pod1", Some("node1"), vec![toleration(1, 100)]));
    let before = h.log.len();
    h.advance_secs(10.0);
    h.node(
        "node1",
        vec![Taint::new("x", "y", TaintEffect::NoSchedule), taint(1)],
    );
    assert_eq!(h.log.len(), before);
}

#[test]
fn a_implied_deleting_the_node_keeps_pending_evictions() {
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    h.pod(pod("pod1", Some("node1"), vec![toleration(1, 100)]));
    h.advance_secs(10.0);
    h.delete_node("node1");
    h.advance_to(secs(200.0));
    assert_eq!(h.evicted_at("pod1"), vec![secs(100.0)]);
}

#[test]
fn a_implied_deleting_the_pod_cancels_with_an_event() {
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    h.pod(pod("pod1", Some("node1"), vec![toleration(1, 100)]));
    h.advance_secs(10.0);
    h.delete_pod("pod1");
    h.assert_not_evicted_through("pod1", secs(DAY));
    assert_eq!(
        h.events(),
        vec!["Cancelling deletion of Pod default/pod1".to_string()]
    );
}

#[test]
fn a_implied_huge_toleration_seconds_mean_forever() {
    let big = toleration(1, toleration::MAX_TOLERATION_SECONDS + 1);
    let mut h = create_pod_case(vec![taint(1)], pod("pod1", Some("node1"), vec![big]));
    h.assert_not_evicted_through("pod1", secs(DAY));
    let largest = toleration(1, toleration::MAX_TOLERATION_SECONDS);
    let h = create_pod_case(vec![taint(1)], pod("pod1", Some("node1"), vec![largest]));
    assert_eq!(
        h.eviction_of("pod1").map(|e| e.deadline),
        Some(Time::from_secs(toleration::MAX_TOLERATION_SECONDS))
    );
}

// === §19.B timed_workers_test.go, as engine scenarios ===
// A "work" is a pod's eviction; keys 1..5 are pods on one node.

fn five_pods(h: &mut Harness, tolerations: Vec<Toleration>) {
    for i in 1..=5 {
        h.pod(pod(&i.to_string(), Some("node1"), tolerations.clone()));
    }
}

#[test]
fn b1_execute_immediate_work() {
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    five_pods(&mut h, vec![]);
    assert_eq!(h.evictions().len(), 5);
    // Adding the same thing a second time is a no-op.
    five_pods(&mut h, vec![]);
    assert_eq!(h.evictions().len(), 5);
}

#[test]
fn b2_execute_delayed_work() {
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    five_pods(&mut h, vec![toleration(1, 10)]);
    h.advance_secs(1.0);
    five_pods(&mut h, vec![toleration(1, 10)]);
    assert!(h.evictions().is_empty());
    h.advance_to(secs(11.0));
    assert_eq!(h.evictions().len(), 5);
}

#[test]
fn b3_cancel_delayed_work() {
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    five_pods(&mut h, vec![toleration(1, 10)]);
    h.delete_pod("2");
    h.delete_pod("4");
    h.advance_to(secs(11.0));
    assert_eq!(h.evicted_names(), vec!["1", "3", "5"]);
}

#[test]
fn b4_cancel_and_readd_delayed_work() {
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    five_pods(&mut h, vec![toleration(1, 10)]);
    h.delete_pod("2");
    h.delete_pod("4");
    h.pod(pod("2", Some("node1"), vec![toleration(1, 10)]));
    h.advance_to(secs(11.0));
    assert_eq!(h.evicted_names(), vec!["1", "2", "3", "5"]);
}

#[test]
fn b5_completion_of_a_replaced_eviction_does_not_remove_the_replacement() {
    // Upstream's master fails this (PR #141568 documents it): a running worker's completion
    // deletes whatever entry holds the key. Our reports carry the eviction id.
    let mut h = Harness::default();
    h.node("node1", vec![taint(1)]);
    let mut out = Vec::new();
    h.engine.upsert_pod(
        pod("p", Some("node1"), vec![toleration(1, 1)]),
        secs(0.0),
        &mut out,
    );
    h.engine.advance(secs(1.0), &mut out);
    let first = match out.last() {
        Some(Action::Evict { eviction, .. }) => *eviction,
        other => panic!("expected an eviction in flight, got {other:?}"),
    };
    // The taint goes and comes back while the first attempt is in flight.
    h.engine
        .upsert_node(&node("node1", vec![]), secs(1.5), &mut out);
    h.engine
        .upsert_node(&node("node1", vec![taint(1)]), secs(2.0), &mut out);
    let replacement = h
        .engine
        .pod_view("default", "p")
        .and_then(|v| v.eviction)
        .expect("replacement");
    assert_ne!(replacement.id, first);
    assert_eq!(replacement.deadline, secs(3.0));
    // The stale attempt completes.
    let report = Report {
        namespace: "default".into(),
        name: "p".into(),
        eviction: first,
        outcome: Outcome::Evicted,
    };
    h.engine.report(&report, secs(2.5), &mut out);
    let still = h
        .engine
        .pod_view("default", "p")
        .and_then(|v| v.eviction)
        .expect("still pending");
    assert_eq!(still.id, replacement.id);
    assert_eq!(still.deadline, secs(3.0));
}

// === §19.C core/v1 toleration and taint tests ===

fn tol(key: &str, op: &str, value: &str, effect: Option<TaintEffect>) -> Toleration {
    Toleration {
        key: key.into(),
        operator: Operator::parse(op),
        value: value.into(),
        effect,
        toleration_seconds: None,
    }
}

fn ns_taint(key: &str, value: &str) -> Taint {
    Taint::new(key, value, TaintEffect::NoSchedule)
}

fn ns() -> Option<TaintEffect> {
    Some(TaintEffect::NoSchedule)
}

/// One test per `TestTolerationToleratesTaint` case: toleration, taint, gate => tolerated.
macro_rules! tolerates_cases {
    ($($name:ident: $tol:expr, $taint:expr, gate $gate:expr => $want:expr;)*) => {$(
        #[test]
        fn $name() {
            assert_eq!($tol.tolerates(&$taint, $gate), $want);
        }
    )*};
}

tolerates_cases! {
    c01_exists_matches_taint_without_value: tol("foo", "Exists", "", ns()), ns_taint("foo", ""), gate false => true;
    c02_exists_matches_taint_with_value: tol("foo", "Exists", "", ns()), ns_taint("foo", "bar"), gate false => true;
    c03_empty_key_exists_matches_any_key: tol("", "Exists", "", ns()), ns_taint("foo", "bar"), gate false => true;
    c04_equal_matches_same_value: tol("foo", "Equal", "bar", ns()), ns_taint("foo", "bar"), gate false => true;
    c05_equal_rejects_other_value: tol("foo", "Equal", "value1", ns()), ns_taint("foo", "value2"), gate false => false;
    c06_effect_must_match: tol("foo", "Equal", "bar", ns()), Taint::new("foo", "bar", TaintEffect::NoExecute), gate false => false;
    c07_gt_threshold_above_value: tol("node.kubernetes.io/sla", "Gt", "950", ns()), ns_taint("node.kubernetes.io/sla", "800"), gate true => false;
    c08_gt_value_above_threshold: tol("node.kubernetes.io/sla", "Gt", "750", ns()), ns_taint("node.kubernetes.io/sla", "950"), gate true => true;
    c09_lt_value_above_threshold: tol("node.kubernetes.io/sla", "Lt", "800", ns()), ns_taint("node.kubernetes.io/sla", "950"), gate true => false;
    c10_lt_value_below_threshold: tol("node.kubernetes.io/sla", "Lt", "950", ns()), ns_taint("node.kubernetes.io/sla", "800"), gate true => true;
    c11_gt_equal_is_false: tol("node.kubernetes.io/sla", "Gt", "950", ns()), ns_taint("node.kubernetes.io/sla", "950"), gate true => false;
    c12_gt_non_numeric_value: tol("node.kubernetes.io/sla", "Gt", "950", ns()), ns_taint("node.kubernetes.io/sla", "high"), gate true => false;
    c13_gt_negative: tol("test-key", "Gt", "-100", ns()), ns_taint("test-key", "-200"), gate true => false;
    c14_gt_near_max: tol("test-key", "Gt", "9223372036854775806", ns()), ns_taint("test-key", "100"), gate true => false;
    // Implied: without the gate Lt/Gt never match, even where they would with it.
    c_implied_gt_without_gate: tol("node.kubernetes.io/sla", "Gt", "750", ns()), ns_taint("node.kubernetes.io/sla", "950"), gate false => false;
    c_implied_unknown_operator: tol("foo", "Matches", "bar", ns()), ns_taint("foo", "bar"), gate true => false;
    c_implied_empty_effect_matches_all: tol("foo", "Exists", "", None), Taint::new("foo", "", TaintEffect::NoExecute), gate false => true;
    c_implied_empty_operator_is_equal: tol("foo", "", "bar", None), ns_taint("foo", "bar"), gate false => true;
    c_implied_equal_empty_value_only_matches_empty: tol("foo", "Equal", "", None), ns_taint("foo", "bar"), gate false => false;
}

#[test]
fn c_compare_numeric_values() {
    let gt = Operator::Gt;
    let lt = Operator::Lt;
    let cases: Vec<(&str, &str, &str, &Operator, bool)> = vec![
        ("gt_100_200", "100", "200", &gt, true),
        ("gt_200_100", "200", "100", &gt, false),
        ("gt_equal", "100", "100", &gt, false),
        ("gt_negative", "-100", "-50", &gt, true),
        ("gt_negative_false", "-50", "-100", &gt, false),
        ("gt_zero_one", "0", "1", &gt, true),
        (
            "gt_near_max",
            "9223372036854775806",
            "9223372036854775807",
            &gt,
            true,
        ),
        ("lt_200_100", "200", "100", &lt, true),
        ("lt_100_200", "100", "200", &lt, false),
        ("lt_equal", "100", "100", &lt, false),
        ("lt_negative", "-50", "-100", &lt, true),
        ("lt_negative_false", "-100", "-50", &lt, false),
        ("lt_zero_minus_one", "0", "-1", &lt, true),
        ("invalid_toleration_abc", "abc", "100", &gt, false),
        ("invalid_toleration_empty", "", "100", &gt, false),
        ("invalid_toleration_leading_zero", "0100", "200", &gt, false),
        ("invalid_toleration_plus", "+100", "200", &gt, false),
        ("invalid_toleration_float", "100.5", "200", &gt, false),
        ("invalid_toleration_lone_minus", "-", "200", &gt, false),
        ("invalid_taint_xyz", "100", "xyz", &gt, false),
        ("invalid_taint_empty", "100", "", &gt, false),
        ("invalid_taint_leading_zero", "100", "0200", &gt, false),
        ("invalid_taint_plus", "100", "+200", &lt, false),
        ("invalid_taint_spaces", "100", " 200 ", &lt, false),
        ("unsupported_equal", "100", "100", &Operator::Equal, false),
        ("unsupported_exists", "100", "100", &Operator::Exists, false),
        ("zero_gt", "0", "0", &gt, false),
        ("zero_lt", "0", "0", &lt, false),
        ("bound_gt_max", "0", "9223372036854775807", &gt, true),
        ("bound_lt_min", "0", "-9223372036854775808", &lt, true),
    ];
    assert_eq!(cases.len(), 30);
    for (name, tol_value, taint_value, op, want) in cases {
        assert_eq!(
            compare_numeric_values(tol_value, taint_value, op),
            want,
            "{name}"
        );
    }
    // Implied: "-0" is not canonical, and values past i64 do not parse.
    assert!(!compare_numeric_values("-0", "1", &gt));
    assert!(!compare_numeric_values("0", "9223372036854775808", &gt));
}

#[test]
fn c_taint_to_string() {
    let cases = [
        (
            Taint::new("foo", "bar", TaintEffect::NoSchedule),
            "foo=bar:NoSchedule",
        ),
        (
            Taint::new("foo", "", TaintEffect::NoSchedule),
            "foo:NoSchedule",
        ),
        (Taint::new("foo", "", TaintEffect::parse("")), "foo"),
        (Taint::new("foo", "bar", TaintEffect::parse("")), "foo=bar:"),
    ];
    for (taint, want) in cases {
        assert_eq!(taint.to_string(), want);
    }
}

#[test]
fn c_match_taint() {
    let base = Taint::new("foo", "bar", TaintEffect::NoSchedule);
    assert!(
        base.matches(&Taint::new("foo", "bar", TaintEffect::NoSchedule)),
        "same everything"
    );
    assert!(
        base.matches(&Taint::new("foo", "other", TaintEffect::NoSchedule)),
        "value ignored"
    );
    assert!(
        !base.matches(&Taint::new("other", "bar", TaintEffect::NoSchedule)),
        "different key"
    );
    assert!(
        !base.matches(&Taint::new("foo", "bar", TaintEffect::PreferNoSchedule)),
        "different effect"
    );
}

#[test]
fn c_get_matching_tolerations_keeps_taint_order_and_first_match() {
    let taints = [taint(1), taint(2)];
    let tolerations = [
        Toleration::exists("", None).for_seconds(5),
        toleration(1, 10),
    ];
    let (all, used) = matching_tolerations(&taints, &tolerations, false);
    assert!(all);
    assert_eq!(used.len(), 2);
    assert!(used.iter().all(|t| t.toleration_seconds == Some(5)));
    let only_first = [toleration(1, 10)];
    let (all, used) = matching_tolerations(&taints, &only_first, false);
    assert!(!all);
    assert!(used.is_empty());
    let (all, used) = matching_tolerations(&[], &[], false);
    assert!(all);
    assert!(used.is_empty());
}

// === §19.D FindMatchingUntoleratedTaint ===

fn foo_ns() -> Toleration {
    tol("foo", "Exists", "", Some(TaintEffect::NoSchedule))
}

fn sla(op: &str, value: &str) -> Toleration {
    tol("sla", op, value, Some(TaintEffect::NoSchedule))
}

/// One test per `TestFindMatchingUntoleratedTaint` case:
/// tolerations, taints, filter, gate => every filtered taint tolerated.
macro_rules! untolerated_cases {
    ($($name:ident: $tols:expr, $taints:expr, $filter:expr, gate $gate:expr => $want:expr;)*) => {$(
        #[test]
        fn $name() {
            let tolerations: Vec<Toleration> = $tols;
            let taints: Vec<Taint> = $taints;
            let untolerated = find_untolerated_taint(&taints, &tolerations, $filter, $gate);
            assert_eq!(untolerated.is_none(), $want, "untolerated: {untolerated:?}");
        }
    )*};
}

untolerated_cases! {
    d01_no_tolerations_no_taints: vec![], vec![], |_: &Taint| true, gate false => true;
    d02_no_taints: vec![foo_ns()], vec![], |_: &Taint| true, gate false => true;
    d03_tolerated: vec![foo_ns()], vec![ns_taint("foo", "")], |_: &Taint| true, gate false => true;
    d04_filtered_out: vec![foo_ns()], vec![ns_taint("bar", "")], |_: &Taint| false, gate false => true;
    d05_untolerated: vec![foo_ns()], vec![ns_taint("bar", "")], |_: &Taint| true, gate false => false;
    d06_no_execute_filter:
        vec![tol("foo", "Exists", "", Some(TaintEffect::NoExecute))],
        vec![Taint::new("foo", "", TaintEffect::NoExecute), ns_taint("bar", "")],
        |t: &Taint| t.is_no_execute(), gate false => true;
    d07_gt_not_met: vec![sla("Gt", "950")], vec![ns_taint("sla", "800")], |_: &Taint| true, gate true => false;
    d08_gt_met: vec![sla("Gt", "750")], vec![ns_taint("sla", "950")], |_: &Taint| true, gate true => true;
    d09_lt_not_met: vec![sla("Lt", "800")], vec![ns_taint("sla", "950")], |_: &Taint| true, gate true => false;
    d10_parse_error: vec![sla("Gt", "950")], vec![ns_taint("sla", "high")], |_: &Taint| true, gate true => false;
    d11_parse_error_ignored_when_a_later_toleration_matches:
        vec![sla("Gt", "950"), sla("Exists", "")], vec![ns_taint("sla", "high")], |_: &Taint| true, gate true => true;
}
