//! The rules the core owns, against the real API server, judged from its audit log (issue 18,
//! holes 1 to 3): the brake holds evictions already queued behind a tiny client QPS; a rolling
//! restart with `--refuse-if-foreign` evicts every pod once and never refuses; a leader that
//! sees another holder in its Lease stops at once; a leader frozen past its term writes
//! nothing when it thaws.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use noexecute_testkit::*;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

fn plane() -> Result<&'static Plane> {
    let plane = Plane::shared("fence-rules", &[])?;
    plane.install_rbac()?;
    Ok(plane)
}

/// Writes by noexecute (its User-Agent) in `namespace`, with the replica's name in it.
fn ours<'a>(audit: &'a [AuditEntry], namespace: &str, replica: &str) -> Vec<&'a AuditEntry> {
    audit
        .iter()
        .filter(|e| {
            e.namespace == namespace
                && e.user_agent.starts_with("noexecute/")
                && e.user_agent.contains(replica)
        })
        .collect()
}

async fn deletions(c: &Controller) -> Result<f64> {
    Ok(c.metric("taint_eviction_controller_pod_deletions_total")
        .await?
        .unwrap_or(0.0))
}

/// Hole 1: the brake engages while evictions wait in the queue behind `--kube-api-qps 2`. No
/// attempt that had not written yet may write once the brake holds (the audit log: no first
/// write, the condition patch, of a pod after the brake's node write plus the watch's delay),
/// and the rest go on when it lets go.
#[tokio::test]
async fn the_brake_holds_evictions_queued_behind_a_tiny_qps() -> Result<()> {
    const PODS: usize = 18;
    let plane = plane()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "brake-queue").await?;
    let mut nodes = Vec::new();
    for i in 0..4 {
        nodes.push(ns.create_node(&format!("n{i}"), vec![]).await?);
    }
    let mut names = Vec::new();
    for i in 0..PODS {
        let name = format!("p{i}");
        ns.create_pod(&pod(&name, &nodes[0], vec![], Some(0)))
            .await?;
        names.push(name);
    }
    let selector = ns.node_selector();
    let mut c = Controller::start(
        plane,
        binary(),
        &format!("{}-brake", ns.name),
        &[
            "--node-selector",
            &selector,
            "--leader-elect=false",
            "--kube-api-qps",
            "2",
            "--kube-api-burst",
            "1",
            "--brake-threshold",
            "50",
            "--brake-min-nodes",
            "1",
            "--identity",
            "brake",
        ],
    )?;
    c.wait_ready(Duration::from_secs(30)).await?;
    let log = EvictionLog::start(ns.pods());
    // One node of four: below the threshold, evictions start (two requests each at 2/s).
    add_taint(&ns.nodes(), &nodes[0], no_execute("example.com/t", "")).await?;
    eventually(Duration::from_secs(20), "the first eviction", || async {
        Ok((deletions(&c).await? >= 1.0).then_some(()))
    })
    .await?;
    // Three of four: the brake engages with most evictions still queued.
    add_taint(&ns.nodes(), &nodes[1], no_execute("example.com/t", "")).await?;
    add_taint(&ns.nodes(), &nodes[2], no_execute("example.com/t", "")).await?;
    eventually(Duration::from_secs(10), "the brake engages", || async {
        Ok((c.metric("noexecute_brake_engaged").await? == Some(1.0)).then_some(()))
    })
    .await?;
    // The whole window: nothing more is evicted than what had written before.
    let at_brake = log.count("p");
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after_window = log.count("p");
    // The positive control: untainted again, the rest go.
    remove_taint(&ns.nodes(), &nodes[1], "example.com/t").await?;
    remove_taint(&ns.nodes(), &nodes[2], "example.com/t").await?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    wait_all_evicted(&ns.pods(), &refs, Duration::from_secs(60)).await?;
    let _ = c.terminate(Duration::from_secs(20)).await?;

    let audit = plane.audit()?;
    // n2's first write after its creation is the taint that engaged the brake.
    let braked_at = audit
        .iter()
        .filter(|e| e.resource == "nodes" && e.name == nodes[2] && e.verb != "create")
        .filter(|e| e.ok())
        .map(|e| e.received)
        .min()
        .context("the brake's node write is not in the audit log")?;
    let writes = ours(&audit, &ns.name, "brake");
    let patched_before: std::collections::BTreeSet<&str> = writes
        .iter()
        .filter(|e| e.subresource == "status" && e.received < braked_at)
        .map(|e| e.name.as_str())
        .collect();
    // Writes of the brake's own moments: received up to a second after the node write (the
    // watch's delay and a request already on the wire).
    let settled = braked_at + SignedDuration::from_secs(1);
    // n1's last write is the untaint that let the brake go.
    let released_at = audit
        .iter()
        .filter(|e| e.resource == "nodes" && e.name == nodes[1] && e.verb != "create")
        .filter(|e| e.ok())
        .map(|e| e.received)
        .max()
        .context("the release's node write")?;
    let under_brake: Vec<&&AuditEntry> = writes
        .iter()
        .filter(|e| e.resource == "pods")
        .filter(|e| e.received >= settled && e.received < released_at)
        .filter(|e| e.subresource == "status" || !patched_before.contains(e.name.as_str()))
        .collect();
    println!(
        "brake: {} evicted when it engaged, {} after the 8 s window, {} patched before it; \
         {} first writes under the brake",
        at_brake,
        after_window,
        patched_before.len(),
        under_brake.len()
    );
    assert!(
        under_brake.is_empty(),
        "evictions started under the brake: {under_brake:#?}"
    );
    // Nor is a held eviction announced: the Events written under the brake are about the
    // controller (EvictionBrakeEngaged on the Lease, in the Lease's namespace), not pods here.
    let announced: Vec<&&AuditEntry> = writes
        .iter()
        .filter(|e| e.resource == "events" && e.verb == "create")
        .filter(|e| e.received >= settled && e.received < released_at)
        .collect();
    assert!(
        announced.len() <= patched_before.len(),
        "held evictions announced under the brake: {announced:#?}"
    );
    assert!(
        after_window <= patched_before.len(),
        "{after_window} evicted while the brake held, only {} had written before it",
        patched_before.len()
    );
    assert!(patched_before.len() < PODS, "nothing was left to hold");
    ns.cleanup().await
}

fn replica(plane: &Plane, ns: &TestNamespace, name: &str, extra: &[&str]) -> Result<Controller> {
    let selector = ns.node_selector();
    let lease = format!("lease-{}", ns.name);
    let identity = format!("--identity={name}-{}", ns.name);
    let mut args = vec![
        "--node-selector",
        selector.as_str(),
        "--leader-elect-name",
        lease.as_str(),
        identity.as_str(),
    ];
    args.extend_from_slice(&SHORT_LEASE);
    args.extend_from_slice(extra);
    Controller::start(plane, binary(), &format!("{}-{name}", ns.name), &args)
}

/// Wait (bounded) for the controller to exit on its own; its exit code.
async fn exit_code(c: &mut Controller, timeout: Duration) -> Result<i32> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(code) = c.exited()? {
            return Ok(code);
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the controller did not exit within {timeout:?}; log:\n{}",
            c.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn leading(c: &Controller) -> Result<bool> {
    Ok(c.metric("noexecute_leader").await? == Some(1.0))
}

/// Hole 2: a rolling restart (SIGTERM to the leader) mid-eviction, with `--refuse-if-foreign`.
/// The old leader's last "Marking for deletion" Events must not make the new leader refuse:
/// every pod is evicted exactly once, nobody counts a foreign eviction, and no write of the
/// old leader (Events included) follows the new leader's first.
#[tokio::test]
async fn a_rolling_restart_with_refuse_if_foreign_evicts_every_pod_once() -> Result<()> {
    const PODS: usize = 60;
    let plane = plane()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "rolling").await?;
    let node = ns.create_node("n", vec![]).await?;
    let mut names = Vec::new();
    for i in 0..PODS {
        let name = format!("p{i}");
        ns.create_pod(&pod(&name, &node, vec![], Some(0))).await?;
        names.push(name);
    }
    let extra = [
        "--refuse-if-foreign",
        "--kube-api-qps",
        "5",
        "--kube-api-burst",
        "1",
    ];
    let mut old = replica(plane, &ns, "old", &extra)?;
    old.wait_ready(Duration::from_secs(30)).await?;
    eventually(
        Duration::from_secs(15),
        "the first replica leads",
        || async { Ok(leading(&old).await?.then_some(())) },
    )
    .await?;
    let mut new = replica(plane, &ns, "new", &extra)?;
    new.wait_ready(Duration::from_secs(30)).await?;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    eventually(Duration::from_secs(30), "ten evictions", || async {
        Ok((deletions(&old).await? >= 10.0).then_some(()))
    })
    .await?;
    assert_eq!(old.terminate(Duration::from_secs(20)).await?, Some(0));
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    wait_all_evicted(&ns.pods(), &refs, Duration::from_secs(120)).await?;
    // Late Events of the old leader would have been seen by now: the guard stayed quiet.
    let foreign = new
        .metric("noexecute_foreign_taint_evictions_total")
        .await?
        .unwrap_or(0.0);
    let refusing = new.metric("noexecute_refusing").await?.unwrap_or(0.0);
    let fenced = new.metric("noexecute_events_fenced_total").await?;
    let log = new.log_text();
    let _ = new.terminate(Duration::from_secs(20)).await?;

    let audit = plane.audit()?;
    let mut deleted: std::collections::BTreeMap<&str, usize> = Default::default();
    for e in audit
        .iter()
        .filter(|e| e.namespace == ns.name && e.resource == "pods" && e.verb == "delete")
        .filter(|e| e.subresource.is_empty() && e.ok())
    {
        *deleted.entry(e.name.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = deleted.iter().filter(|(_, n)| **n > 1).collect();
    let old_writes = ours(&audit, &ns.name, &format!("(old-{}", ns.name));
    let new_writes = ours(&audit, &ns.name, &format!("(new-{}", ns.name));
    let first_new = new_writes
        .iter()
        .map(|e| e.received)
        .min()
        .context("the new leader wrote nothing")?;
    let late: Vec<&&AuditEntry> = old_writes
        .iter()
        .filter(|e| e.received >= first_new)
        .collect();
    println!(
        "rolling restart: {} pods deleted ({} by the old leader's writes, {} by the new's), \
         foreign {foreign}, refusing {refusing}, events fenced {fenced:?}",
        deleted.len(),
        old_writes.len(),
        new_writes.len()
    );
    assert_eq!(deleted.len(), PODS, "every pod deleted");
    assert!(twice.is_empty(), "deleted twice: {twice:?}");
    assert!(
        late.is_empty(),
        "the old leader wrote after the new one: {late:#?}"
    );
    assert_eq!(
        foreign, 0.0,
        "the new leader counted its predecessor:\n{log}"
    );
    assert_eq!(refusing, 0.0, "the new leader refused:\n{log}");
    ns.cleanup().await
}

/// Hole 3: an operator (or anyone) writes another holder into the Lease. The leader must stop
/// writing at its next look at the Lease (every 0.5 s here), not at its renew deadline (3 s),
/// and exit to stand by again.
#[tokio::test]
async fn an_edited_lease_ends_the_term_at_once() -> Result<()> {
    const PODS: usize = 40;
    let plane = plane()?;
    let admin = plane.admin_client().await?;
    let ns = TestNamespace::create(&admin, "lease-edit").await?;
    let node = ns.create_node("n", vec![]).await?;
    for i in 0..PODS {
        ns.create_pod(&pod(&format!("p{i}"), &node, vec![], Some(0)))
            .await?;
    }
    let extra = ["--kube-api-qps", "4", "--kube-api-burst", "1"];
    let mut c = replica(plane, &ns, "edited", &extra)?;
    c.wait_ready(Duration::from_secs(30)).await?;
    eventually(Duration::from_secs(15), "it leads", || async {
        Ok(leading(&c).await?.then_some(()))
    })
    .await?;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    eventually(Duration::from_secs(30), "five evictions", || async {
        Ok((deletions(&c).await? >= 5.0).then_some(()))
    })
    .await?;
    // The edit: someone else holds the Lease now.
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(admin.clone(), "noexecute");
    let name = format!("lease-{}", ns.name);
    let patch = serde_json::json!({ "spec": { "holderIdentity": "an-operator" } });
    leases
        .patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .context("editing the Lease")?;
    let code = exit_code(&mut c, Duration::from_secs(10)).await?;
    let log = c.log_text();
    assert_eq!(code, 1, "lost leadership exits 1:\n{log}");

    let audit = plane.audit()?;
    let edited_at = audit
        .iter()
        .filter(|e| e.resource == "leases" && e.name == name && e.verb == "patch" && e.ok())
        .map(|e| e.received)
        .max()
        .context("the edit is not in the audit log")?;
    let writes = ours(&audit, &ns.name, &format!("(edited-{}", ns.name));
    let before = writes.iter().filter(|e| e.received < edited_at).count();
    // One look at the Lease (0.5 s), plus a request already on the wire.
    let limit = edited_at + SignedDuration::from_millis(1_500);
    let late: Vec<&&AuditEntry> = writes.iter().filter(|e| e.received > limit).collect();
    let last = writes.iter().map(|e| e.received).max();
    println!(
        "edited lease: {before} writes before the edit, last write {:?} after it",
        last.map(|l| l.duration_since(edited_at))
    );
    assert!(before > 0, "the leader wrote before the edit");
    assert!(late.is_empty(), "writes after the edit was seen: {late:#?}");
    ns.cleanup().await
}

/// Hole 3: a leader frozen (SIGSTOP) for longer than its lease. The standby takes over; when
/// the old leader thaws (SIGCONT) its term is long over by the monotonic clock, and it writes
/// nothing more: no pod request, no Event, whatever its loops had pending.
#[tokio::test]
async fn a_leader_frozen_past_its_term_writes_nothing_when_it_thaws() -> Result<()> {
    const PODS: usize = 40;
    let plane = plane()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "frozen").await?;
    let node = ns.create_node("n", vec![]).await?;
    let mut names = Vec::new();
    for i in 0..PODS {
        let name = format!("p{i}");
        ns.create_pod(&pod(&name, &node, vec![], Some(0))).await?;
        names.push(name);
    }
    let extra = ["--kube-api-qps", "4", "--kube-api-burst", "1"];
    let mut old = replica(plane, &ns, "frozen", &extra)?;
    old.wait_ready(Duration::from_secs(30)).await?;
    eventually(
        Duration::from_secs(15),
        "the first replica leads",
        || async { Ok(leading(&old).await?.then_some(())) },
    )
    .await?;
    let mut standby = replica(plane, &ns, "standby", &extra)?;
    standby.wait_ready(Duration::from_secs(30)).await?;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    eventually(Duration::from_secs(30), "five evictions", || async {
        Ok((deletions(&old).await? >= 5.0).then_some(()))
    })
    .await?;
    let pid = old.pid().context("the leader's pid")?.to_string();
    let signal = |sig: &str| -> Result<()> {
        let status = std::process::Command::new("kill")
            .args([sig, pid.as_str()])
            .status()?;
        anyhow::ensure!(status.success(), "kill {sig} {pid}");
        Ok(())
    };
    signal("-STOP")?;
    // Past the lease (5 s) and the standby's takeover.
    eventually(Duration::from_secs(20), "the standby leads", || async {
        Ok(leading(&standby).await?.then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let thawed_at = Timestamp::now();
    signal("-CONT")?;
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    wait_all_evicted(&ns.pods(), &refs, Duration::from_secs(90)).await?;
    // The thawed replica notices and exits (lost leadership).
    let code = exit_code(&mut old, Duration::from_secs(20)).await?;
    let old_log = old.log_text();
    let _ = standby.terminate(Duration::from_secs(20)).await?;

    let audit = plane.audit()?;
    let old_writes = ours(&audit, &ns.name, &format!("(frozen-{}", ns.name));
    let late: Vec<&&AuditEntry> = old_writes
        .iter()
        .filter(|e| e.received >= thawed_at)
        .collect();
    println!(
        "frozen leader: {} writes before the freeze, {} after the thaw, exit {code}",
        old_writes.len() - late.len(),
        late.len()
    );
    assert!(
        !old_writes.is_empty(),
        "the old leader wrote before the freeze"
    );
    assert!(
        late.is_empty(),
        "the thawed leader wrote: {late:#?}\nits log:\n{old_log}"
    );
    assert_eq!(code, 1, "lost leadership exits 1:\n{old_log}");
    ns.cleanup().await
}

/// Hole 5: a node relabelled out of `--node-selector` is another shard's. The eviction this
/// controller counted down for its pod must not fire (here: the node stays tainted, and the
/// 6 s toleration runs out after the relabel), while the same eviction on a node still
/// selected does, in the same window.
#[tokio::test]
async fn a_node_relabelled_out_of_the_selector_keeps_no_eviction() -> Result<()> {
    let plane = plane()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "selector").await?;
    let leaves = ns.create_node("leaves", vec![]).await?;
    let stays = ns.create_node("stays", vec![]).await?;
    let toleration = || vec![tolerate("example.com/t", Some(6))];
    ns.create_pod(&pod("kept", &leaves, toleration(), Some(0)))
        .await?;
    ns.create_pod(&pod("goes", &stays, toleration(), Some(0)))
        .await?;
    let selector = ns.node_selector();
    let mut c = Controller::start(
        plane,
        binary(),
        &format!("{}-selector", ns.name),
        &[
            "--node-selector",
            &selector,
            "--leader-elect=false",
            "--identity",
            "selector",
        ],
    )?;
    c.wait_ready(Duration::from_secs(30)).await?;
    add_taint(&ns.nodes(), &leaves, no_execute("example.com/t", "")).await?;
    add_taint(&ns.nodes(), &stays, no_execute("example.com/t", "")).await?;
    eventually(Duration::from_secs(10), "both countdowns", || async {
        Ok((c.metric("noexecute_scheduled_evictions").await? == Some(2.0)).then_some(()))
    })
    .await?;
    // Another shard's now.
    let (key, _) = selector
        .split_once('=')
        .context("the selector is key=value")?;
    let relabel = serde_json::json!({ "metadata": { "labels": { key: "another-shard" } } });
    ns.nodes()
        .patch(
            &leaves,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&relabel),
        )
        .await?;
    wait_evicted(&ns.pods(), "goes", Duration::from_secs(12)).await?;
    assert_not_evicted_for(&ns.pods(), "kept", Duration::from_secs(4)).await?;
    let log = c.log_text();
    assert!(
        log.contains("no longer matches --node-selector"),
        "the leave was not seen:\n{log}"
    );
    let _ = c.terminate(Duration::from_secs(20)).await?;
    ns.cleanup().await
}
