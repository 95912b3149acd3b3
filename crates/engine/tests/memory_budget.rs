//! Engine memory per tracked pod, counted by a global allocator: 5,000 nodes × 30 pods, then a
//! NoExecute taint on every node (so 135,000 evictions are queued). The budget is 200 bytes of
//! engine state per pod.
//!
//! `cargo test --release -p noexecute-engine --test memory_budget -- --nocapture` prints it.
#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use noexecute_engine::{Engine, Time, workload};

/// Counts the bytes currently allocated (as requested; the system allocator's own rounding
/// and headers are not included).
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; we only count.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const NODES: usize = 5_000;
const PODS_PER_NODE: usize = 30;
const BUDGET: f64 = 200.0;

#[test]
fn engine_state_per_pod_is_within_budget() {
    let pods_total = NODES * PODS_PER_NODE;
    let (nodes, pods) = workload::population(NODES, PODS_PER_NODE);
    let tainted = workload::tainted(&nodes);
    let mut engine = Engine::default();
    let mut out = Vec::new();
    for node in &nodes {
        engine.upsert_node(node, Time::from_secs(0), &mut out);
    }
    for pod in pods {
        engine.upsert_pod(pod, Time::from_secs(0), &mut out);
    }
    for node in &tainted {
        engine.upsert_node(node, Time::from_secs(1), &mut out);
        out.clear();
    }
    assert_eq!(engine.queued_count(), pods_total * 9 / 10);
    assert_eq!(
        engine.distinct_toleration_sets(),
        2,
        "tolerations are interned"
    );
    drop(out);
    // Measure the engine itself: drop it and see how much goes away.
    let with_engine = LIVE.load(Ordering::Relaxed);
    drop(engine);
    let without_engine = LIVE.load(Ordering::Relaxed);
    let engine_bytes = (with_engine - without_engine) as f64;
    let per_pod = engine_bytes / pods_total as f64;
    println!(
        "engine: {engine_bytes:.0} bytes for {pods_total} pods on {NODES} nodes with {} evictions queued = {per_pod:.1} bytes/pod",
        pods_total * 9 / 10
    );
    assert!(
        per_pod <= BUDGET,
        "{per_pod:.1} bytes per pod exceeds the {BUDGET} byte budget"
    );
}
