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

/// The ALPN protocols offered in a TLS ClientHello record (empty when it offers none), or
/// `None` when the bytes are not a ClientHello.
fn offered_alpn(record: &[u8]) -> Option<Vec<String>> {
    let u16_at = |b: &[u8], i: usize| -> Option<usize> {
        Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]) as usize)
    };
    // The record's header (5 bytes), then the handshake's (type 1, 3 bytes of length).
    let hello = record.get(5..)?;
    (record.first() == Some(&0x16) && hello.first() == Some(&1)).then_some(())?;
    // Version (2) and random (32), then the session id, cipher suites and compressions.
    let mut i = 4 + 2 + 32;
    i += 1 + *hello.get(i)? as usize;
    i += 2 + u16_at(hello, i)?;
    i += 1 + *hello.get(i)? as usize;
    let end = i + 2 + u16_at(hello, i)?;
    i += 2;
    let mut offered = Vec::new();
    while i + 4 <= end {
        let (kind, len) = (u16_at(hello, i)?, u16_at(hello, i + 2)?);
        let data = hello.get(i + 4..i + 4 + len)?;
        if kind == 0x10 {
            // ALPN: a 2-byte list length, then 1-byte-length names.
            let mut j = 2;
            while j < data.len() {
                let n = data[j] as usize;
                offered.push(String::from_utf8_lossy(data.get(j + 1..j + 1 + n)?).into_owned());
                j += 1 + n;
            }
        }
        i += 4 + len;
    }
    Some(offered)
}

/// Each connection's offered ALPN protocols (`None`: its first record was not a
/// ClientHello), in the order they were accepted.
type Offers = std::sync::Arc<std::sync::Mutex<Vec<Option<Vec<String>>>>>;

/// A TCP forwarder to `target` that records, for each connection, the ALPN protocols its
/// client offered. Threads, not tasks: the commands under test are waited for blockingly.
fn alpn_recorder(target: std::net::SocketAddr) -> Result<(u16, Offers)> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let seen = Offers::default();
    let record = seen.clone();
    std::thread::spawn(move || {
        for inbound in listener.incoming() {
            let Ok(mut inbound) = inbound else { return };
            let record = record.clone();
            std::thread::spawn(move || -> std::io::Result<()> {
                let mut hello = vec![0u8; 5];
                inbound.read_exact(&mut hello)?;
                let len = u16::from_be_bytes([hello[3], hello[4]]) as usize;
                hello.resize(5 + len, 0);
                inbound.read_exact(&mut hello[5..])?;
                record.lock().unwrap().push(offered_alpn(&hello));
                let mut outbound = std::net::TcpStream::connect(target)?;
                outbound.write_all(&hello)?;
                let (mut from, mut to) = (inbound.try_clone()?, outbound.try_clone()?);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
                let _ = std::io::copy(&mut outbound, &mut inbound);
                inbound.shutdown(std::net::Shutdown::Write)
            });
        }
    });
    Ok((port, seen))
}

/// `plan` and `explain` read the cluster over the HTTP version asked for: with
/// `--api-http-version http1` no connection they open offers HTTP/2 (ALPN `h2`); left at
/// `auto` (the control) every one does. The ALPN offer is read from the TLS ClientHello by a
/// forwarder between the command and the API server.
#[tokio::test]
async fn plan_and_explain_read_over_the_http_version_asked() -> Result<()> {
    let plane = Plane::shared("plan", &[])?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "plan-h1").await?;
    let node = ns.create_node("n", vec![]).await?;
    ns.create_pod(&pod("plain", &node, vec![], None)).await?;
    let config = std::fs::read_to_string(&plane.kubeconfig)?;
    let server = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .expect("the kubeconfig names its server")
        .to_string();
    let target: std::net::SocketAddr = server.parse()?;
    let taint = format!("{node}=example.com/x:NoExecute");
    let target_pod = format!("{}/plain", ns.name);
    let commands: [Vec<&str>; 2] = [
        vec!["plan", "--taint", &taint],
        vec!["explain", &target_pod, "--taint", &taint],
    ];
    for command in &commands {
        for (version, offers_h2) in [("http1", false), ("auto", true)] {
            // A forwarder of its own for each run: no late connection of one run is
            // counted in the next.
            let (port, seen) = alpn_recorder(target)?;
            let forwarded = plane
                .state_dir
                .join(format!("{}-{}-{version}.kubeconfig", ns.name, command[0]));
            std::fs::write(
                &forwarded,
                config.replace(&server, &format!("127.0.0.1:{port}")),
            )?;
            let out = Command::new(env!("CARGO_BIN_EXE_noexecute"))
                .args(command)
                .args(["--kubeconfig", forwarded.to_str().unwrap()])
                .args(["--api-http-version", version])
                // A proxy would take the connection past the forwarder.
                .env_remove("HTTPS_PROXY")
                .env_remove("https_proxy")
                .env_remove("NOEXECUTE_API_HTTP_VERSION")
                .output()?;
            std::fs::remove_file(&forwarded)?;
            assert!(
                out.status.success(),
                "{command:?} {version}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let offers = seen.lock().unwrap().clone();
            assert!(!offers.is_empty(), "{command:?} {version}: no connection");
            for offered in &offers {
                let offered = offered
                    .as_ref()
                    .unwrap_or_else(|| panic!("{command:?} {version}: not a ClientHello"));
                assert_eq!(
                    offered.iter().any(|p| p == "h2"),
                    offers_h2,
                    "{command:?} {version}: offered {offered:?}"
                );
            }
        }
    }
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
