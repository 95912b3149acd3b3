//! The second-controller guard against a real control plane where upstream's
//! taint-eviction-controller (kube-controller-manager) runs too: noexecute notices upstream's
//! first eviction of a pod on a node it watches within seconds (a Warning Event on its Lease,
//! the counter, an error in its log) and, with `--refuse-if-foreign`, stops evicting. The
//! quiet case (noexecute alone never reports) is in `tests/controller.rs`, whose plane has no
//! kube-controller-manager.
//!
//! Both controllers race for the same pods, as they would in a cluster where
//! kube-controller-manager's was left on: noexecute, quicker, usually marks them first, and
//! upstream then deletes without marking; upstream's "Marking for deletion" Event gives it
//! away all the same.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use noexecute_testkit::*;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

#[tokio::test]
async fn upstreams_evictions_are_noticed_within_seconds_and_refused() -> Result<()> {
    let plane = Plane::shared("foreign", &["taint-eviction-controller"])?;
    plane.install_rbac()?;
    let client = plane.admin_client().await?;
    let ns = TestNamespace::create(&client, "foreign").await?;
    let selector = ns.node_selector();
    let mut args = vec!["--node-selector", &selector, "--refuse-if-foreign"];
    args.extend(SHORT_LEASE);
    let mut controller = Controller::start(plane, binary(), &ns.name, &args)?;
    controller.wait_ready(Duration::from_secs(30)).await?;
    // Leading: the guard only counts while this replica leads.
    let deadline = Instant::now() + Duration::from_secs(15);
    while controller.metric("noexecute_leader ").await? != Some(1.0) {
        ensure!(Instant::now() < deadline, "never became leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        controller
            .metric("noexecute_foreign_taint_evictions_total ")
            .await?,
        Some(0.0)
    );
    // Marks dated within 3 s of taking the Lease are taken for the previous leader's (a
    // documented window, `controller/foreign.rs`): upstream's eviction must come after it.
    // Upstream's Event times are whole seconds (up to 1 s earlier than the eviction), so wait
    // out the window plus that second: with 3.5 s, an eviction at .97 s past a second was
    // dated 2.9 s after the Lease and taken for the previous leader's (a CI failure).
    tokio::time::sleep(Duration::from_millis(4_500)).await;

    let node = ns.create_node("n", vec![]).await?;
    for i in 0..5 {
        ns.create_pod(&pod(&format!("victim-{i}"), &node, vec![], Some(0)))
            .await?;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    add_taint(&ns.nodes(), &node, no_execute("example.com/foreign", "")).await?;
    let evicted = wait_evicted(&ns.pods(), "victim-0", Duration::from_secs(30)).await?;

    // Within seconds of upstream's eviction: counted, refused, an event, a log line.
    let deadline = evicted.seen_at + Duration::from_secs(5);
    loop {
        let count = controller
            .metric("noexecute_foreign_taint_evictions_total ")
            .await?;
        if count.is_some_and(|c| c >= 1.0) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the guard did not fire within 5 s of upstream's eviction: {count:?}\n{}",
            controller.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "noticed {:?} after upstream's eviction was seen",
        evicted.seen_at.elapsed()
    );
    assert_eq!(controller.metric("noexecute_refusing ").await?, Some(1.0));
    // The status says so (the test's admin server is plain HTTP; any token will do).
    let out = std::process::Command::new(binary())
        .args([
            "status",
            "--endpoint",
            &format!("http://{}", controller.admin),
            "--token",
            "unused",
            "-o",
            "json",
        ])
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(status["refusing"], true, "{status}");
    assert_eq!(status["leading"], false, "not acting: {status}");
    let table = std::process::Command::new(binary())
        .args([
            "status",
            "--endpoint",
            &format!("http://{}", controller.admin),
            "--token",
            "unused",
        ])
        .output()?;
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("REFUSING"), "{table}");
    let log = controller.log_text();
    assert!(
        log.contains("Another taint eviction controller is active"),
        "{log}"
    );
    let events: Api<Event> = Api::namespaced(client, "noexecute");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .any(|e| {
                e.reason.as_deref() == Some("ForeignTaintEviction")
                    && e.type_.as_deref() == Some("Warning")
                    && e.involved_object.kind.as_deref() == Some("Lease")
                    && e.message.as_deref().is_some_and(|m| m.contains(&ns.name))
            });
        if found {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "no ForeignTaintEviction event on the Lease"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    controller.terminate(Duration::from_secs(10)).await?;
    Ok(())
}
