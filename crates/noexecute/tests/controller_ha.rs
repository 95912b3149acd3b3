//! Leader election and recovery on a real control plane of their own (so that the API
//! server's request counters see only these tests' deletes).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use noexecute_testkit::*;

const PLANE: &str = "controller-ha";

/// The tests here count the API server's pod DELETEs, so they run one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

fn replica(plane: &Plane, ns: &TestNamespace, name: &str) -> Result<Controller> {
    let selector = ns.node_selector();
    let lease = format!("lease-{}", ns.name);
    let mut args = vec![
        "--node-selector",
        selector.as_str(),
        "--leader-elect-name",
        lease.as_str(),
    ];
    args.extend_from_slice(&SHORT_LEASE);
    let identity = format!("--identity={name}");
    args.push(&identity);
    Controller::start(plane, binary(), &format!("{}-{name}", ns.name), &args)
}

async fn leader_of(controllers: &[&Controller]) -> Result<Option<usize>> {
    for (i, c) in controllers.iter().enumerate() {
        if c.metric("noexecute_leader").await? == Some(1.0) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

#[tokio::test]
async fn killing_the_leader_mid_countdown_hands_over_without_double_deletes() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let plane = Plane::shared(PLANE, &[])?;
    plane.install_rbac()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "ha-kill").await?;
    let node = ns.create_node("n", vec![]).await?;
    for i in 0..3 {
        ns.create_pod(&pod(
            &format!("p{i}"),
            &node,
            vec![tolerate("example.com/t", Some(6))],
            None,
        ))
        .await?;
    }
    let mut a = replica(plane, &ns, "a")?;
    a.wait_ready(Duration::from_secs(30)).await?;
    let leader_deadline = Instant::now() + Duration::from_secs(15);
    while leader_of(&[&a]).await? != Some(0) {
        anyhow::ensure!(
            Instant::now() < leader_deadline,
            "a never led: {}",
            a.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut b = replica(plane, &ns, "b")?;
    b.wait_ready(Duration::from_secs(30)).await?;
    assert_eq!(leader_of(&[&b]).await?, None, "b stands by while a leads");

    let deletes_before = plane.pod_deletes()?;
    let tainted = Instant::now();
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.kill().await?;

    // b takes over after the lease expires (4 s) and evicts every pod.
    for i in 0..3 {
        let e = wait_evicted(&ns.pods(), &format!("p{i}"), Duration::from_secs(20)).await?;
        println!(
            "p{i} evicted {:?} after the taint",
            e.seen_at.duration_since(tainted)
        );
    }
    assert_eq!(
        leader_of(&[&b]).await?,
        Some(0),
        "b leads: {}",
        b.log_text()
    );
    // Give any duplicate a chance to show up, then count: one DELETE per pod.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deletes = plane.pod_deletes()? - deletes_before;
    assert_eq!(
        deletes,
        3.0,
        "pods deleted more than once? b's log:\n{}",
        b.log_text()
    );
    b.wait_metric(
        "taint_eviction_controller_pod_deletions_total",
        3.0,
        Duration::from_secs(5),
    )
    .await?;
    ns.cleanup().await
}

#[tokio::test]
async fn sigterm_releases_the_lease_and_the_standby_takes_over_at_once() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let plane = Plane::shared(PLANE, &[])?;
    plane.install_rbac()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "ha-term").await?;
    let node = ns.create_node("n", vec![]).await?;
    let mut a = replica(plane, &ns, "a")?;
    a.wait_ready(Duration::from_secs(30)).await?;
    let deadline = Instant::now() + Duration::from_secs(15);
    while leader_of(&[&a]).await? != Some(0) {
        anyhow::ensure!(Instant::now() < deadline, "a never led");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut b = replica(plane, &ns, "b")?;
    b.wait_ready(Duration::from_secs(30)).await?;
    let stopped = Instant::now();
    assert_eq!(
        a.terminate(Duration::from_secs(10)).await?,
        Some(0),
        "clean exit: {}",
        a.log_text()
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while leader_of(&[&b]).await? != Some(0) {
        anyhow::ensure!(
            Instant::now() < deadline,
            "b did not take over: {}",
            b.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let handover = stopped.elapsed();
    println!("handover took {handover:?}");
    assert!(
        handover < Duration::from_secs(3),
        "a released lease is taken at the next retry, took {handover:?}"
    );
    // And b acts.
    ns.create_pod(&pod("after", &node, vec![], None)).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    wait_evicted(&ns.pods(), "after", Duration::from_secs(3)).await?;
    ns.cleanup().await
}

#[tokio::test]
async fn the_controller_rides_out_an_api_server_restart_and_evicts_on_time() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let plane = Plane::shared(PLANE, &[])?;
    plane.install_rbac()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "ha-restart").await?;
    let node = ns.create_node("n", vec![]).await?;
    let later = ns.create_node("later", vec![]).await?;
    ns.create_pod(&pod(
        "timed",
        &node,
        vec![tolerate("example.com/t", Some(14))],
        None,
    ))
    .await?;
    ns.create_pod(&pod("after-restart", &later, vec![], None))
        .await?;
    // Default leader-election timings: a 7 s outage is within the 10 s renew deadline.
    let selector = ns.node_selector();
    let lease = format!("lease-{}", ns.name);
    let mut c = Controller::start(
        plane,
        binary(),
        &ns.name,
        &["--node-selector", &selector, "--leader-elect-name", &lease],
    )?;
    c.wait_ready(Duration::from_secs(30)).await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.metric("noexecute_leader").await? != Some(1.0) {
        anyhow::ensure!(Instant::now() < deadline, "never led: {}", c.log_text());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let tainted = Instant::now();
    add_taint(&ns.nodes(), &node, no_execute("example.com/t", "")).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let restart = tokio::task::spawn_blocking(move || {
        plane.script(&["apiserver-restart", "--down-for", "3"])
    });
    restart.await??;
    println!("API server back {:?} after the taint", tainted.elapsed());
    // Clients made before the restart keep working (same port, certificates, tokens).
    let pods = ns.pods();
    let evicted = wait_evicted(&pods, "timed", Duration::from_secs(20)).await?;
    let after = evicted.seen_at.duration_since(tainted);
    println!("evicted {after:?} after the taint (toleration 14 s)");
    assert!(
        after >= Duration::from_secs(13) && after <= Duration::from_secs(16),
        "evicted {after:?} after the taint; expected 14 s (+ latency). log:\n{}",
        c.log_text()
    );
    // The watches recover. They back off as client-go's reflector does (0.8 s doubling to
    // 30 s, kind to a struggling API server), so a taint right after the restart can wait for
    // the next retry: allow the full backoff.
    let tainted = Instant::now();
    add_taint(&ns.nodes(), &later, no_execute("example.com/t", "")).await?;
    let e = wait_evicted(&ns.pods(), "after-restart", Duration::from_secs(40)).await?;
    println!(
        "after the restart, evicted {:?} after the taint",
        e.seen_at.duration_since(tainted)
    );
    assert_eq!(c.exited()?, None, "still running: {}", c.log_text());
    let restarts = c.metrics().await?;
    assert!(
        restarts.contains("noexecute_watch_restarts_total"),
        "{restarts}"
    );
    ns.cleanup().await
}
