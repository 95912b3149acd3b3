//! The opt-in policies (issue: beyond upstream) on a real control plane.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as K8sTime;
use kube::api::{Patch, PatchParams};
use noexecute_testkit::*;

const PLANE: &str = "policies";

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

async fn namespace(test: &str) -> Result<(&'static Plane, TestNamespace)> {
    let plane = Plane::shared(PLANE, &[])?;
    plane.install_rbac()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, test).await?;
    Ok((plane, ns))
}

async fn controller(
    plane: &Plane,
    ns: &TestNamespace,
    name: &str,
    extra: &[&str],
) -> Result<Controller> {
    let selector = ns.node_selector();
    let mut args = vec!["--leader-elect=false", "--node-selector", selector.as_str()];
    args.extend_from_slice(extra);
    let mut c = Controller::start(plane, binary(), &format!("{}-{name}", ns.name), &args)?;
    c.wait_ready(Duration::from_secs(30)).await?;
    Ok(c)
}

#[tokio::test]
async fn restart_safe_deadlines_survive_a_controller_restart() -> Result<()> {
    let (plane, ns) = namespace("restart-safe").await?;
    let node = ns.create_node("n", vec![]).await?;
    ns.create_pod(&pod(
        "timed",
        &node,
        vec![tolerate("example.com/t", Some(10))],
        None,
    ))
    .await?;
    let mut first = controller(
        plane,
        &ns,
        "first",
        &["--deadline-from", "taint-time-added"],
    )
    .await?;
    // The taint carries timeAdded, as the node lifecycle controller and kubectl set it.
    let tainted = Instant::now();
    let taint = Taint {
        time_added: Some(K8sTime(k8s_openapi::jiff::Timestamp::now())),
        ..no_execute("example.com/t", "")
    };
    add_taint(&ns.nodes(), &node, taint).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    first.kill().await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Upstream's semantics would start a fresh 10 s window now (evicting at ~14 s).
    let _second = controller(
        plane,
        &ns,
        "second",
        &["--deadline-from", "taint-time-added"],
    )
    .await?;
    let evicted = wait_evicted(&ns.pods(), "timed", Duration::from_secs(15)).await?;
    let after = evicted.seen_at.duration_since(tainted);
    println!("evicted {after:?} after the taint (toleration 10 s, restart at 3 s)");
    assert!(
        after >= Duration::from_secs(9) && after <= Duration::from_secs(11),
        "evicted {after:?} after the taint; the original deadline is 10 s ± 1 s"
    );
    ns.cleanup().await
}

#[tokio::test]
async fn dry_run_decides_and_records_but_deletes_nothing() -> Result<()> {
    let (plane, ns) = namespace("dry-run").await?;
    let node = ns.create_node("n", vec![]).await?;
    ns.create_pod(&pod("kept", &node, vec![], None)).await?;
    let c = controller(plane, &ns, "c", &["--dry-run"]).await?;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    assert_not_evicted_for(&ns.pods(), "kept", Duration::from_secs(3)).await?;
    let live = ns.pods().get("kept").await?;
    assert!(
        condition(&live, "DisruptionTarget").is_none(),
        "nothing patched"
    );
    let want = format!("[dry-run] Marking for deletion Pod {}/kept", ns.name);
    eventually(Duration::from_secs(5), "the dry-run event", || async {
        let events = pod_events(&ns.client, &ns.name, "kept").await?;
        Ok(events
            .iter()
            .any(|e| e.message.as_deref() == Some(want.as_str()))
            .then_some(()))
    })
    .await?;
    assert_eq!(
        c.metric("noexecute_dry_run_evictions_total").await?,
        Some(1.0)
    );
    assert_eq!(
        c.metric("taint_eviction_controller_pod_deletions_total")
            .await?,
        Some(0.0)
    );
    ns.cleanup().await
}

#[tokio::test]
async fn excluded_namespaces_and_labels_are_never_evicted() -> Result<()> {
    let (plane, ns) = namespace("exclusions").await?;
    let node = ns.create_node("n", vec![]).await?;
    let mut protected = pod("protected", &node, vec![], None);
    protected
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("noexecute.io/exclude".into(), "true".into());
    ns.create_pod(&protected).await?;
    ns.create_pod(&pod("ordinary", &node, vec![], None)).await?;
    let _c = controller(
        plane,
        &ns,
        "c",
        &["--exclude-selector", "noexecute.io/exclude=true"],
    )
    .await?;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    wait_evicted(&ns.pods(), "ordinary", Duration::from_secs(3)).await?;
    assert_not_evicted_for(&ns.pods(), "protected", Duration::from_secs(2)).await?;

    // A whole namespace excluded.
    let (plane, ns2) = namespace("exclude-ns").await?;
    let node2 = ns2.create_node("n", vec![]).await?;
    ns2.create_pod(&pod("anything", &node2, vec![], None))
        .await?;
    let _c2 = controller(plane, &ns2, "c", &["--exclude-namespace", &ns2.name]).await?;
    add_taint(&ns2.nodes(), &node2, no_execute("example.com/t", "")).await?;
    assert_not_evicted_for(&ns2.pods(), "anything", Duration::from_secs(3)).await?;
    ns2.cleanup().await?;
    ns.cleanup().await
}

#[tokio::test]
async fn terminal_pods_are_skipped_only_when_asked() -> Result<()> {
    let (plane, ns) = namespace("terminal").await?;
    let node = ns.create_node("n", vec![]).await?;
    for name in ["done", "running"] {
        ns.create_pod(&pod(name, &node, vec![], None)).await?;
    }
    let status = serde_json::json!({"status": {"phase": "Succeeded"}});
    ns.pods()
        .patch_status("done", &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    let _c = controller(plane, &ns, "c", &["--skip-terminal-pods"]).await?;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    wait_evicted(&ns.pods(), "running", Duration::from_secs(3)).await?;
    assert_not_evicted_for(&ns.pods(), "done", Duration::from_secs(2)).await?;
    ns.cleanup().await
}
