//! `noexecute run` against a real kube-apiserver + etcd, with exactly the RBAC of `deploy/`
//! (the controller authenticates as the `noexecute` service account). Each test gets its own
//! namespace, nodes labelled for it, and its own controller started with `--node-selector`,
//! so tests run in parallel without seeing each other's nodes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use noexecute_testkit::*;

const PLANE: &str = "controller";

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

struct Setup {
    plane: &'static Plane,
    ns: TestNamespace,
    controller: Controller,
}

async fn setup(test: &str, extra: &[&str]) -> Result<Setup> {
    let plane = Plane::shared(PLANE, &[])?;
    plane.install_rbac()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, test).await?;
    let selector = ns.node_selector();
    let mut args = vec!["--leader-elect=false", "--node-selector", &selector];
    args.extend_from_slice(extra);
    let mut controller = Controller::start(plane, binary(), &ns.name, &args)?;
    controller.wait_ready(Duration::from_secs(30)).await?;
    Ok(Setup {
        plane,
        ns,
        controller,
    })
}

fn event_messages(events: &[k8s_openapi::api::core::v1::Event]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.reason.as_deref() == Some("TaintManagerEviction"))
        .map(|e| e.message.clone().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn untolerated_pod_is_evicted_within_two_seconds_with_condition_and_event() -> Result<()> {
    let s = setup("evict-now", &[]).await?;
    let node = s.ns.create_node("n", vec![]).await?;
    s.ns.create_pod(&pod("victim", &node, vec![], None)).await?;
    s.ns.create_pod(&pod(
        "stays",
        &node,
        vec![tolerate("example.com/t", None)],
        None,
    ))
    .await?;
    // Let the controller see the pods before the taint, as in a running cluster.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tainted = Instant::now();
    add_taint(&s.ns.nodes(), &node, no_execute("example.com/t", "x")).await?;
    let evicted = wait_evicted(&s.ns.pods(), "victim", Duration::from_secs(2)).await?;
    println!(
        "evicted {:?} after the taint",
        evicted.seen_at.duration_since(tainted)
    );

    let last = evicted.last.expect("seen");
    let c = condition(&last, "DisruptionTarget").expect("DisruptionTarget condition");
    assert_eq!(c.status, "True");
    assert_eq!(c.reason.as_deref(), Some("DeletionByTaintManager"));
    // observedGeneration is the pod's generation when the condition was written (1: the
    // graceful delete that follows bumps it to 2), where the server keeps it (1.34 on).
    assert_eq!(
        c.observed_generation,
        kept_observed_generation(&s.ns.client, 1).await?,
        "observedGeneration"
    );
    assert_eq!(
        c.message.as_deref(),
        Some("Taint manager: deleting due to NoExecute taint")
    );

    let want = format!("Marking for deletion Pod {}/victim", s.ns.name);
    let events = eventually(Duration::from_secs(5), "the eviction event", || async {
        let events = pod_events(&s.ns.client, &s.ns.name, "victim").await?;
        Ok(event_messages(&events).contains(&want).then_some(events))
    })
    .await?;
    let e = events
        .iter()
        .find(|e| e.message.as_deref() == Some(want.as_str()))
        .unwrap();
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(
        e.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("taint-eviction-controller")
    );

    assert_not_evicted_for(&s.ns.pods(), "stays", Duration::from_secs(2)).await?;
    s.controller
        .wait_metric(
            "taint_eviction_controller_pod_deletions_total",
            1.0,
            Duration::from_secs(5),
        )
        .await?;
    s.controller
        .wait_metric(
            "taint_eviction_controller_pod_deletion_duration_seconds_count",
            1.0,
            Duration::from_secs(5),
        )
        .await?;
    // Real seconds (upstream's unit bug fixed): an immediate eviction lands in a small bucket.
    let fast = s
        .controller
        .metric("taint_eviction_controller_pod_deletion_duration_seconds_bucket{le=\"1.0\"}")
        .await?;
    assert_eq!(fast, Some(1.0), "{}", s.controller.metrics().await?);
    s.ns.cleanup().await
}

#[tokio::test]
async fn toleration_seconds_evicts_on_time_and_not_before() -> Result<()> {
    let s = setup("evict-later", &[]).await?;
    let node = s.ns.create_node("n", vec![]).await?;
    s.ns.create_pod(&pod(
        "waits",
        &node,
        vec![tolerate("example.com/t", Some(4))],
        None,
    ))
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let tainted = Instant::now();
    add_taint(&s.ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    assert_not_evicted_for(&s.ns.pods(), "waits", Duration::from_secs(3)).await?;
    let evicted = wait_evicted(&s.ns.pods(), "waits", Duration::from_secs(4)).await?;
    let after = evicted.seen_at.duration_since(tainted);
    println!("evicted {after:?} after the taint (toleration 4 s)");
    assert!(
        after >= Duration::from_secs(3) && after <= Duration::from_secs(5),
        "evicted {after:?} after the taint; expected 4 s ± 1 s"
    );
    s.ns.cleanup().await
}

#[tokio::test]
async fn removing_the_taint_before_the_deadline_cancels_with_an_event() -> Result<()> {
    let s = setup("cancel", &[]).await?;
    let node = s.ns.create_node("n", vec![]).await?;
    s.ns.create_pod(&pod(
        "spared",
        &node,
        vec![tolerate("example.com/t", Some(3))],
        None,
    ))
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    add_taint(&s.ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    remove_taint(&s.ns.nodes(), &node, "example.com/t").await?;
    // Past the original deadline and then some.
    assert_not_evicted_for(&s.ns.pods(), "spared", Duration::from_secs(5)).await?;
    let want = format!("Cancelling deletion of Pod {}/spared", s.ns.name);
    eventually(Duration::from_secs(5), "the cancel event", || async {
        let events = pod_events(&s.ns.client, &s.ns.name, "spared").await?;
        Ok(event_messages(&events).contains(&want).then_some(()))
    })
    .await?;
    s.ns.cleanup().await
}

#[tokio::test]
async fn forever_tolerating_pod_is_never_evicted() -> Result<()> {
    let s = setup("forever", &[]).await?;
    let node =
        s.ns.create_node("n", vec![no_execute("example.com/t", "")])
            .await?;
    s.ns.create_pod(&pod(
        "forever",
        &node,
        vec![tolerate("example.com/t", None)],
        None,
    ))
    .await?;
    s.ns.create_pod(&pod(
        "everything",
        &node,
        vec![k8s_openapi::api::core::v1::Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        }],
        None,
    ))
    .await?;
    assert_not_evicted_for(&s.ns.pods(), "forever", Duration::from_secs(3)).await?;
    assert_not_evicted_for(&s.ns.pods(), "everything", Duration::from_secs(1)).await?;
    s.ns.cleanup().await
}

#[tokio::test]
async fn a_recreated_pod_is_not_deleted_by_its_predecessors_eviction() -> Result<()> {
    let s = setup("recreated", &[]).await?;
    let node = s.ns.create_node("n", vec![]).await?;
    s.ns.create_pod(&pod(
        "same-name",
        &node,
        vec![tolerate("example.com/t", Some(3))],
        Some(0),
    ))
    .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    add_taint(&s.ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Replace the pod (new UID) with one that tolerates the taint for much longer. Upstream,
    // keyed by name only, keeps the old 3 s deadline and deletes the new pod.
    s.ns.pods()
        .delete("same-name", &DeleteParams::default().grace_period(0))
        .await?;
    wait_evicted(&s.ns.pods(), "same-name", Duration::from_secs(5)).await?;
    let replacement = pod(
        "same-name",
        &node,
        vec![tolerate("example.com/t", Some(60))],
        None,
    );
    let created: Pod =
        s.ns.pods()
            .create(&PostParams::default(), &replacement)
            .await?;
    assert_not_evicted_for(&s.ns.pods(), "same-name", Duration::from_secs(5)).await?;
    let now = s.ns.pods().get("same-name").await?;
    assert_eq!(now.metadata.uid, created.metadata.uid);
    s.ns.cleanup().await
}

#[tokio::test]
async fn a_terminating_pod_gets_no_second_delete_and_health_endpoints_answer() -> Result<()> {
    let s = setup("terminating", &[]).await?;
    let node = s.ns.create_node("n", vec![]).await?;
    // A 30 s grace period keeps the pod Terminating after the first delete.
    s.ns.create_pod(&pod("slow", &node, vec![], Some(30)))
        .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    add_taint(&s.ns.nodes(), &node, no_execute("example.com/a", "")).await?;
    wait_evicted(&s.ns.pods(), "slow", Duration::from_secs(3)).await?;
    // A second taint re-evaluates the pod; it is already terminating, so no new delete.
    add_taint(&s.ns.nodes(), &node, no_execute("example.com/b", "")).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        s.controller
            .metric("taint_eviction_controller_pod_deletions_total")
            .await?,
        Some(1.0)
    );
    let metrics = s.controller.metrics().await?;
    for name in [
        "noexecute_scheduled_evictions",
        "noexecute_leader 1",
        "noexecute_pending_evictions",
    ] {
        assert!(metrics.contains(name), "{name} missing from:\n{metrics}");
    }
    let _ = s.plane;
    s.ns.cleanup().await
}

/// The second-controller guard never fires when noexecute is the only taint eviction
/// controller: its own evictions (the positive control, evicted in the window), their
/// conditions and their "Marking for deletion" Events are not foreign, nor are other tests'
/// controllers' evictions on nodes it does not watch.
#[tokio::test]
async fn the_foreign_guard_stays_quiet_when_alone() -> Result<()> {
    let s = setup("quiet-guard", &[]).await?;
    // Past the 3 s after taking the Lease in which marks are taken for a previous leader's:
    // from here on, any of its own marks or Events taken for another's would count.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let node = s.ns.create_node("n", vec![]).await?;
    let key = "example.com/quiet";
    for name in ["a", "b", "c"] {
        s.ns.create_pod(&pod(name, &node, vec![], Some(0))).await?;
    }
    s.ns.create_pod(&pod("later", &node, vec![tolerate(key, Some(2))], Some(0)))
        .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    add_taint(&s.ns.nodes(), &node, no_execute(key, "")).await?;
    let window = Instant::now() + Duration::from_secs(8);
    for name in ["a", "b", "c", "later"] {
        wait_evicted(&s.ns.pods(), name, Duration::from_secs(8)).await?;
    }
    while Instant::now() < window {
        assert_eq!(
            s.controller
                .metric("noexecute_foreign_taint_evictions_total ")
                .await?,
            Some(0.0),
            "the guard fired with noexecute alone"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !s.controller
            .log_text()
            .contains("Another taint eviction controller")
    );
    Ok(())
}
