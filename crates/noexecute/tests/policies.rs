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
/// kube-controller-manager runs the disruption controller, so PodDisruptionBudget status is
/// real (it does not evict anything itself).
const CONTROLLERS: &[&str] = &["disruption"];

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

async fn namespace(test: &str) -> Result<(&'static Plane, TestNamespace)> {
    let plane = Plane::shared(PLANE, CONTROLLERS)?;
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

/// Pods that the disruption controller counts as healthy: Running and Ready.
async fn ready_pod(ns: &TestNamespace, name: &str, node: &str, app: &str) -> Result<()> {
    let mut p = pod(name, node, vec![], None);
    p.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("app".into(), app.into());
    ns.create_pod(&p).await?;
    let status = serde_json::json!({"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": "True", "lastTransitionTime": K8sTime(k8s_openapi::jiff::Timestamp::now())}
    ]}});
    ns.pods()
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

async fn pdb(ns: &TestNamespace, app: &str, min_available: i32, allowed: i32) -> Result<()> {
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let budget: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": app},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}}
    }))?;
    let api: kube::Api<PodDisruptionBudget> = kube::Api::namespaced(ns.client.clone(), &ns.name);
    api.create(&Default::default(), &budget).await?;
    eventually(
        Duration::from_secs(20),
        "the disruption controller's budget status",
        || async {
            let b = api.get(app).await?;
            Ok(b.status
                .filter(|s| s.disruptions_allowed == allowed && s.current_healthy >= min_available)
                .map(|_| ()))
        },
    )
    .await
}

#[tokio::test]
async fn eviction_mode_respects_budgets_and_falls_back_after_the_pdb_timeout() -> Result<()> {
    let (plane, ns) = namespace("pdb").await?;
    let node = ns.create_node("n", vec![]).await?;
    ready_pod(&ns, "guarded-0", &node, "guarded").await?;
    ready_pod(&ns, "guarded-1", &node, "guarded").await?;
    ready_pod(&ns, "free", &node, "free").await?;
    // Nothing of "guarded" may go; "free" may.
    pdb(&ns, "guarded", 2, 0).await?;
    pdb(&ns, "free", 0, 1).await?;
    let c = controller(
        plane,
        &ns,
        "evict",
        &["--eviction-mode", "evict", "--pdb-timeout", "4s"],
    )
    .await?;
    let tainted = Instant::now();
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    // The budget allows "free": evicted through the Eviction API at once.
    let free = wait_evicted(&ns.pods(), "free", Duration::from_secs(5)).await?;
    let reason = free
        .last
        .as_ref()
        .and_then(|p| condition(p, "DisruptionTarget"))
        .and_then(|c| c.reason.clone());
    assert_eq!(reason.as_deref(), Some("EvictionByEvictionAPI"));
    // The budget blocks the guarded pods (429) until the 4 s timeout, then they are deleted.
    assert_not_evicted_for(&ns.pods(), "guarded-0", Duration::from_secs(3)).await?;
    let g = wait_evicted(&ns.pods(), "guarded-0", Duration::from_secs(10)).await?;
    let after = g.seen_at.duration_since(tainted);
    println!("guarded pod deleted {after:?} after the taint (pdb-timeout 4 s)");
    assert!(after >= Duration::from_secs(4), "{after:?}");
    wait_evicted(&ns.pods(), "guarded-1", Duration::from_secs(10)).await?;
    let blocked = c
        .metric("noexecute_pdb_blocked_total")
        .await?
        .unwrap_or(0.0);
    assert!(blocked >= 2.0, "blocked {blocked} times");
    assert_eq!(c.metric("noexecute_pdb_timeouts_total").await?, Some(2.0));
    ns.cleanup().await
}

#[tokio::test]
async fn eviction_mode_without_timeout_never_breaks_a_budget() -> Result<()> {
    let (plane, ns) = namespace("pdb-hold").await?;
    let node = ns.create_node("n", vec![]).await?;
    ready_pod(&ns, "held", &node, "held").await?;
    pdb(&ns, "held", 1, 0).await?;
    let _c = controller(plane, &ns, "evict", &["--eviction-mode", "evict"]).await?;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    assert_not_evicted_for(&ns.pods(), "held", Duration::from_secs(6)).await?;
    ns.cleanup().await
}
