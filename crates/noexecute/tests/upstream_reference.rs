//! Upstream's taint-eviction-controller on a real control plane: the reference that our own
//! controller is later compared against, and the proof that the harness observes evictions,
//! conditions and events the way a cluster shows them.
//!
//! kube-controller-manager runs only `taint-eviction-controller` (plus `daemonset-controller`,
//! which registers the `spec.nodeName` pod index upstream's controller needs; see
//! docs/deviations.md #9).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use anyhow::Result;
use noexecute_testkit::*;

const PLANE: &str = "upstream";

async fn setup(test: &str) -> Result<TestNamespace> {
    let plane = Plane::shared(PLANE, &["taint-eviction-controller"])?;
    let client = plane.admin_client().await?;
    TestNamespace::create(&client, test).await
}

#[tokio::test]
async fn upstream_evicts_an_untolerating_pod_with_the_disruption_condition_and_an_event()
-> Result<()> {
    let ns = setup("upstream-evicts").await?;
    let node = ns.create_node("n1", vec![]).await?;
    // The API server's DefaultTolerationSeconds plugin adds 300 s tolerations for not-ready
    // and unreachable only, so a custom taint key is untolerated.
    ns.create_pod(&pod("victim", &node, vec![], None)).await?;
    ns.create_pod(&pod(
        "survivor",
        &node,
        vec![tolerate("example.com/maintenance", None)],
        None,
    ))
    .await?;

    let tainted_at = Instant::now();
    add_taint(
        &ns.nodes(),
        &node,
        no_execute("example.com/maintenance", "now"),
    )
    .await?;
    let evicted = wait_evicted(&ns.pods(), "victim", Duration::from_secs(20)).await?;
    let lag = evicted.seen_at.duration_since(tainted_at);
    println!("upstream evicted the pod {lag:?} after the taint");

    let last = evicted.last.expect("the pod was seen");
    let condition = condition(&last, "DisruptionTarget").expect("DisruptionTarget condition");
    assert_eq!(condition.status, "True");
    assert_eq!(condition.reason.as_deref(), Some("DeletionByTaintManager"));
    // observedGeneration is the pod's generation when the condition was written (1: the
    // graceful delete that follows bumps it to 2), where the server keeps it (1.34 on).
    assert_eq!(
        condition.observed_generation,
        kept_observed_generation(&ns.client, 1).await?,
        "observedGeneration"
    );
    assert_eq!(
        condition.message.as_deref(),
        Some("Taint manager: deleting due to NoExecute taint")
    );

    let events = eventually(Duration::from_secs(10), "the eviction event", || async {
        let events = pod_events(&ns.client, &ns.name, "victim").await?;
        Ok(events
            .iter()
            .any(|e| e.reason.as_deref() == Some("TaintManagerEviction"))
            .then_some(events))
    })
    .await?;
    let event = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("TaintManagerEviction"))
        .expect("event");
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert_eq!(
        event.message.as_deref(),
        Some(format!("Marking for deletion Pod {}/victim", ns.name).as_str())
    );
    assert_eq!(
        event.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("taint-eviction-controller")
    );

    // The pod that tolerates the taint forever stays, over a whole window.
    assert_not_evicted_for(&ns.pods(), "survivor", Duration::from_secs(3)).await?;
    ns.cleanup().await
}

#[tokio::test]
async fn upstream_evicts_a_finitely_tolerating_pod_when_its_toleration_runs_out() -> Result<()> {
    let ns = setup("upstream-finite").await?;
    let node = ns.create_node("n1", vec![]).await?;
    ns.create_pod(&pod(
        "waits",
        &node,
        vec![tolerate("example.com/drain", Some(4))],
        Some(0),
    ))
    .await?;
    let tainted_at = Instant::now();
    add_taint(&ns.nodes(), &node, no_execute("example.com/drain", "")).await?;
    // Not before the toleration runs out (less a second for the watch's own latency)...
    assert_not_evicted_for(&ns.pods(), "waits", Duration::from_secs(3)).await?;
    // ...and soon after it.
    let evicted = wait_evicted(&ns.pods(), "waits", Duration::from_secs(10)).await?;
    let after = evicted.seen_at.duration_since(tainted_at);
    println!("upstream evicted the tolerating pod {after:?} after the taint");
    assert!(
        after >= Duration::from_secs(4) && after <= Duration::from_secs(6),
        "evicted {after:?} after the taint, expected 4 s (+ latency)"
    );
    ns.cleanup().await
}
