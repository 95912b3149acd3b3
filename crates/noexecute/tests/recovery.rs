//! Recovery under a client rate limit, on a real control plane: a mass eviction that the
//! client-side QPS holds back, and one of the two tainted nodes recovers mid-way.
//!
//! On the recovered node at most the attempts whose requests were already sent may complete;
//! on the other node every untolerated pod is still evicted. The same case runs against
//! upstream's controller at the same QPS (its fired timers keep waiting on the limiter and
//! delete anyway); both sets of figures are printed and recorded in docs/benchmarks.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use noexecute_testkit::*;

const PODS_PER_NODE: usize = 10;
const TOLERATION_SECONDS: i64 = 3;
const KEY: &str = "example.com/outage";

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

struct Figures {
    recovered_before_untaint: usize,
    recovered_total: usize,
    stayed_total: usize,
    stayed_makespan: Duration,
}

/// Taint both nodes; once the first eviction shows, untaint `recovers`; wait until every pod
/// on `stays` is evicted, then keep watching for a while. Returns what was evicted where.
async fn outage_with_recovery(ns: &TestNamespace) -> Result<Figures> {
    let recovers = ns.create_node("recovers", vec![]).await?;
    let stays = ns.create_node("stays", vec![]).await?;
    for i in 0..PODS_PER_NODE {
        for (prefix, node) in [("r", &recovers), ("s", &stays)] {
            ns.create_pod(&pod(
                &format!("{prefix}-{i}"),
                node,
                vec![tolerate(KEY, Some(TOLERATION_SECONDS))],
                Some(0),
            ))
            .await?;
        }
    }
    let log = EvictionLog::start(ns.pods());
    // Let the controller see every pod before the outage.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tainted = Instant::now();
    add_taint(&ns.nodes(), &recovers, no_execute(KEY, "")).await?;
    add_taint(&ns.nodes(), &stays, no_execute(KEY, "")).await?;
    eventually(Duration::from_secs(30), "the first eviction", || async {
        Ok((log.count("r-") + log.count("s-") > 0).then_some(()))
    })
    .await?;
    remove_taint(&ns.nodes(), &recovers, KEY).await?;
    let recovered_before_untaint = log.count("r-");
    let stay_names: Vec<String> = (0..PODS_PER_NODE).map(|i| format!("s-{i}")).collect();
    eventually(
        Duration::from_secs(90),
        "every pod on the node that stays down evicted",
        || async { Ok((log.count("s-") == PODS_PER_NODE).then_some(())) },
    )
    .await?;
    let stayed_makespan = stay_names
        .iter()
        .filter_map(|n| log.instant(n))
        .max()
        .map_or(Duration::ZERO, |t| t.duration_since(tainted));
    // The whole window after the last eviction: nothing more may happen on the recovered node.
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(Figures {
        recovered_before_untaint,
        recovered_total: log.count("r-"),
        stayed_total: log.count("s-"),
        stayed_makespan,
    })
}

#[tokio::test]
async fn noexecute_stops_queued_evictions_of_a_node_that_recovers() -> Result<()> {
    let plane = Plane::shared("recovery", &[])?;
    plane.install_rbac()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "recovery").await?;
    let selector = ns.node_selector();
    let mut c = Controller::start(
        plane,
        binary(),
        &format!("{}-c", ns.name),
        &[
            "--leader-elect=false",
            "--node-selector",
            selector.as_str(),
            "--kube-api-qps",
            "2",
            "--kube-api-burst",
            "2",
        ],
    )?;
    c.wait_ready(Duration::from_secs(30)).await?;
    let f = outage_with_recovery(&ns).await?;
    println!(
        "noexecute at QPS 2: recovered node {} evicted ({} before the untaint), node down {}/{} evicted in {:?}",
        f.recovered_total,
        f.recovered_before_untaint,
        f.stayed_total,
        PODS_PER_NODE,
        f.stayed_makespan
    );
    assert_eq!(f.stayed_total, PODS_PER_NODE, "every pod on the down node");
    // At QPS 2 at most one request is on the wire when the untaint arrives, so at most one
    // more eviction of the recovered node can complete (two, to allow for the watch's lag).
    assert!(
        f.recovered_total <= f.recovered_before_untaint + 2,
        "{} of the recovered node's pods evicted, {} of them after the untaint",
        f.recovered_total,
        f.recovered_total - f.recovered_before_untaint
    );
    ns.cleanup().await
}

#[tokio::test]
async fn upstream_at_the_same_qps_for_comparison() -> Result<()> {
    let plane = Plane::up_with_env(
        "recovery-upstream",
        &["taint-eviction-controller", "daemonset-controller"],
        &[("NOEXECUTE_KCM_ARGS", "--kube-api-qps=2 --kube-api-burst=2")],
    )?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "recovery-up").await?;
    let f = outage_with_recovery(&ns).await?;
    println!(
        "upstream at QPS 2: recovered node {} evicted ({} before the untaint), node down {}/{} evicted in {:?}",
        f.recovered_total,
        f.recovered_before_untaint,
        f.stayed_total,
        PODS_PER_NODE,
        f.stayed_makespan
    );
    // The reference: upstream evicts every pod of the node that stays down too.
    assert_eq!(f.stayed_total, PODS_PER_NODE);
    ns.cleanup().await
}
