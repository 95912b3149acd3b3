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

/// A live `plan` by someone allowed to list nodes and pods but not ResourceSlices,
/// ResourceClaims or DeviceTaintRules (the API server serves `resource.k8s.io/v1`) still plans
/// the node taints, and warns that device taints are left out; with the admin's rights
/// (the control) there is no warning. A device hypothesis by that user is refused (exit 4).
#[tokio::test]
async fn a_live_plan_without_device_reads_warns_and_plans_the_nodes() -> Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kube::api::{Api, PostParams};
    let plane = Plane::shared("plan", &[])?;
    let admin = plane.admin_client().await?;
    let ns = TestNamespace::create(&admin, "plan-no-dra").await?;
    let node = ns.create_node("n", vec![]).await?;
    ns.create_pod(&pod("plain", &node, vec![], None)).await?;
    let user = format!("{}-reader", ns.name);
    let role: ClusterRole = serde_json::from_value(serde_json::json!({
        "metadata": {"name": user},
        "rules": [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}]
    }))?;
    Api::<ClusterRole>::all(admin.clone())
        .create(&PostParams::default(), &role)
        .await?;
    let binding: ClusterRoleBinding = serde_json::from_value(serde_json::json!({
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    }))?;
    Api::<ClusterRoleBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await?;
    // The admin's kubeconfig, acting as the reader.
    let admin_config = std::fs::read_to_string(&plane.kubeconfig)?;
    let reader_config =
        admin_config.replacen("  user:\n", &format!("  user:\n    as: {user}\n"), 1);
    assert_ne!(
        reader_config, admin_config,
        "the kubeconfig has a user entry"
    );
    let reader = plane.state_dir.join(format!("{user}.kubeconfig"));
    std::fs::write(&reader, reader_config)?;

    let taint = format!("{node}=example.com/x:NoExecute");
    let plan = |kubeconfig: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_noexecute"))
            .args([
                "plan",
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--taint",
                &taint,
                "-o",
                "jsonl",
            ])
            .output()
    };
    let warning = "device taints are left out";
    let out = plan(&reader)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(warning), "{stderr}");
    let stdout = String::from_utf8(out.stdout)?;
    assert!(
        stdout.contains(&format!("\"pod\":\"{}/plain\"", ns.name)),
        "{stdout}"
    );
    let out = plan(&plane.kubeconfig)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains(warning), "{stderr}");
    // A device hypothesis cannot be planned without them: refused as the API server refused
    // (exit 4), saying why, rather than planned as if nothing were tainted.
    let out = Command::new(env!("CARGO_BIN_EXE_noexecute"))
        .args([
            "plan",
            "--kubeconfig",
            reader.to_str().unwrap(),
            "--device-taint",
            "gpu.example.com/pool/gpu-0=example.com/ecc:NoExecute",
        ])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("not allowed to list"), "{stderr}");
    ns.cleanup().await
}
