//! `plan` and `explain` reading a real API server live (read-only).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use anyhow::Result;
use noexecute_testkit::*;

#[tokio::test]
async fn plan_and_explain_read_the_live_cluster() -> Result<()> {
    let plane = Plane::shared("plan", &[])?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "plan-live").await?;
    let node = ns.create_node("n", vec![]).await?;
    ns.create_pod(&pod("plain", &node, vec![], None)).await?;
    ns.create_pod(&pod(
        "patient",
        &node,
        vec![tolerate("example.com/x", Some(90))],
        None,
    ))
    .await?;
    let kubeconfig = plane.kubeconfig.to_str().unwrap();
    let taint = format!("{node}=example.com/x:NoExecute");
    let out = Command::new(env!("CARGO_BIN_EXE_noexecute"))
        .args([
            "plan",
            "--kubeconfig",
            kubeconfig,
            "--taint",
            &taint,
            "-o",
            "jsonl",
        ])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = String::from_utf8(out.stdout)?
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let find = |name: &str| {
        rows.iter()
            .find(|r| r["pod"] == format!("{}/{name}", ns.name).as_str())
            .cloned()
            .unwrap_or_else(|| panic!("{name} not in {rows:?}"))
    };
    assert_eq!(find("plain")["at"].as_f64(), Some(0.0));
    assert_eq!(find("patient")["at"].as_f64(), Some(90.0));

    let target = format!("{}/patient", ns.name);
    let out = Command::new(env!("CARGO_BIN_EXE_noexecute"))
        .args([
            "explain",
            &target,
            "--kubeconfig",
            kubeconfig,
            "--taint",
            &taint,
        ])
        .output()?;
    let text = String::from_utf8(out.stdout)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("tolerated by #1: example.com/x Exists NoExecute for 90s"),
        "{text}"
    );
    assert!(text.contains("(+1m30s)"), "{text}");
    // Read-only: the node was not actually tainted.
    let live = ns.nodes().get(&node).await?;
    assert!(
        live.spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .all(|t| t.key != "example.com/x")
    );
    ns.cleanup().await
}
