//! The side-by-side benchmark, small: 20 nodes × 10 realistic pods through upstream's
//! taint-eviction-controller and through noexecute, each on a fresh plane, half the nodes
//! tainted, each controller started twice. Both must evict exactly the same pods, with
//! nothing wrong (a pod tolerating forever, or on an untainted node) and nothing missed. (Timing and resource figures
//! come from `bench/run` at larger scales; see docs/benchmarks.md.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use noexecute_bench::{Options, Which, markdown, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_controllers_evict_exactly_the_same_pods() -> anyhow::Result<()> {
    let opts = Options {
        nodes: 20,
        pods_per_node: 10,
        toleration_seconds: 5,
        qps: 500.0,
        burst: 1000,
        binary: PathBuf::from(env!("CARGO_BIN_EXE_noexecute")),
        settle: Duration::from_secs(3),
        taint_spread: Duration::ZERO,
        noexecute_args: Vec::new(),
        kcm_args: Vec::new(),
        taint_share: 0.5,
        // Two starts: the second finds the first's canary gone and evicts its own.
        starts: 2,
    };
    let upstream = run(Which::Upstream, &opts).await?;
    let ours = run(Which::Noexecute, &opts).await?;
    println!("{}", markdown(&upstream, &ours));
    assert_eq!(
        upstream.wrong, 0,
        "upstream evicted a pod that tolerates forever"
    );
    assert_eq!(upstream.missed, 0, "upstream missed an eviction");
    assert_eq!(
        ours.wrong, 0,
        "noexecute evicted a pod that tolerates forever"
    );
    assert_eq!(ours.missed, 0, "noexecute missed an eviction");
    assert_eq!(ours.tainted_nodes, 10);
    assert_eq!(
        ours.evicted, 90,
        "90% of the 100 pods on the 10 tainted nodes"
    );
    assert_eq!(upstream.evicted_names, ours.evicted_names, "the same pods");
    assert_eq!(upstream.synced.len(), 2, "upstream synced twice");
    assert_eq!(ours.synced.len(), 2, "noexecute synced twice");
    Ok(())
}
