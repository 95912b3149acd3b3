//! The leadership fence across a graceful handover, read from the API server's audit log.
//!
//! Two replicas share a Lease. The leader works through a mass eviction that the client rate
//! limit holds back (so attempts are queued and waiting on the limiter) when it gets SIGTERM;
//! the standby takes over and finishes. The audit log, with each replica's User-Agent, must
//! show no mutating pod request from the old leader received after the standby's first one.
//! The plane is this test's own: its API server writes the audit log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use noexecute_testkit::*;

const PODS: usize = 12;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete"]
  resources:
  - group: ""
    resources: ["pods", "pods/status", "pods/eviction"]
- level: None
"#;

/// A mutating pod request as the audit log shows it.
#[derive(Debug)]
struct Write {
    at: k8s_openapi::jiff::Timestamp,
    agent: String,
    verb: String,
    pod: String,
}

fn writes(log: &Path, namespace: &str) -> Result<Vec<Write>> {
    let text =
        std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
    let mut out = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        if v["objectRef"]["namespace"] != namespace || v["stage"] != "ResponseComplete" {
            continue;
        }
        let at: k8s_openapi::jiff::Timestamp = v["requestReceivedTimestamp"]
            .as_str()
            .context("requestReceivedTimestamp")?
            .parse()?;
        out.push(Write {
            at,
            agent: v["userAgent"].as_str().unwrap_or_default().to_string(),
            verb: v["verb"].as_str().unwrap_or_default().to_string(),
            pod: v["objectRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        });
    }
    out.sort_by_key(|w| w.at);
    Ok(out)
}

#[tokio::test]
async fn no_request_of_the_old_leader_follows_the_standbys_first_write() -> Result<()> {
    let dir: PathBuf = repo_root().join("target").join("audit-fence");
    std::fs::create_dir_all(&dir)?;
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, AUDIT_POLICY)?;
    let log = dir.join("audit.log");
    let _ = std::fs::remove_file(&log);
    let args = format!(
        "--audit-policy-file={} --audit-log-path={} --audit-log-mode=blocking",
        policy.display(),
        log.display()
    );
    // A plane of its own, created with the audit flags (they are recorded at creation).
    Plane::reset("fence")?;
    let plane = Plane::up_with_env("fence", &[], &[("NOEXECUTE_APISERVER_ARGS", &args)])?;
    plane.install_rbac()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "fence").await?;
    let node = ns.create_node("n", vec![]).await?;
    for i in 0..PODS {
        ns.create_pod(&pod(&format!("p{i}"), &node, vec![], Some(0)))
            .await?;
    }
    let selector = ns.node_selector();
    let lease = format!("lease-{}", ns.name);
    let replica = |name: &str| {
        let identity = format!("--identity={name}-{}", ns.name);
        Controller::start(
            &plane,
            binary(),
            &format!("{}-{name}", ns.name),
            &[
                &[
                    "--node-selector",
                    selector.as_str(),
                    "--leader-elect-name",
                    lease.as_str(),
                    "--kube-api-qps",
                    "3",
                    "--kube-api-burst",
                    "1",
                    identity.as_str(),
                ][..],
                &SHORT_LEASE[..],
            ]
            .concat(),
        )
    };
    let mut old = replica("old")?;
    old.wait_ready(Duration::from_secs(30)).await?;
    eventually(
        Duration::from_secs(15),
        "the first replica leads",
        || async { Ok((old.metric("noexecute_leader").await? == Some(1.0)).then_some(())) },
    )
    .await?;
    let mut standby = replica("standby")?;
    standby.wait_ready(Duration::from_secs(30)).await?;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    // Let a few evictions through, then stop the leader with most of them still queued.
    eventually(Duration::from_secs(20), "three evictions", || async {
        Ok((old
            .metric("taint_eviction_controller_pod_deletions_total")
            .await?
            >= Some(3.0))
        .then_some(()))
    })
    .await?;
    let code = old.terminate(Duration::from_secs(20)).await?;
    assert_eq!(code, Some(0), "a clean shutdown");
    let names: Vec<String> = (0..PODS).map(|i| format!("p{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    wait_all_evicted(&ns.pods(), &refs, Duration::from_secs(60)).await?;
    let _ = standby.terminate(Duration::from_secs(20)).await?;

    let all = writes(&log, &ns.name)?;
    let old_agent = format!("(old-{}_", ns.name);
    let new_agent = format!("(standby-{}_", ns.name);
    let first_new = all
        .iter()
        .find(|w| w.agent.contains(&new_agent))
        .context("the standby wrote nothing")?;
    let old_writes = all.iter().filter(|w| w.agent.contains(&old_agent)).count();
    let late: Vec<&Write> = all
        .iter()
        .filter(|w| w.agent.contains(&old_agent) && w.at >= first_new.at)
        .collect();
    println!(
        "audit: {} writes by the old leader, {} by the standby, first standby write {} {} at {}",
        old_writes,
        all.len() - old_writes,
        first_new.verb,
        first_new.pod,
        first_new.at
    );
    assert!(old_writes > 0, "the old leader wrote before the handover");
    assert!(
        late.is_empty(),
        "the old leader wrote after the standby's first write: {late:?}"
    );
    ns.cleanup().await?;
    plane.down()
}
