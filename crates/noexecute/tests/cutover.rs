//! The switch from upstream's taint-eviction-controller to noexecute and back, on a whole
//! plane (every kube-controller-manager controller, kube-scheduler, kwok nodes), judged from
//! the API server's audit log (docs/operating.md, "The switch" and "Rollback"):
//!
//! 1. shadow: noexecute in dry run beside upstream shows the countdowns upstream keeps and
//!    writes nothing to a pod;
//! 2. handover: noexecute with `--handover-delay` beside upstream: upstream evicts, noexecute
//!    reads each pod the delay later, finds it gone, and writes nothing to it;
//! 3. upstream off: a countdown that straddles the switch is kept by one of the two, once; after
//!    it, noexecute evicts alone, the delay late;
//! 4. alone: noexecute without the delay and with `--refuse-if-foreign` evicts on time;
//! 5. upstream back by mistake: the two race for the first pods; noexecute deletes none twice,
//!    sees upstream, stands down, and upstream evicts the next pods alone;
//! 6. rollback: noexecute with the delay again beside upstream, then gone: upstream evicts, and
//!    what noexecute held goes with it.
//!
//! Every pod that does not tolerate its taint for ever is evicted (none missed), each by
//! whichever controller acted, noexecute never twice; a pod that tolerates it stays. Node
//! `zone-a-2` is a canary outside noexecute's `--node-selector`: a pod there is evicted only by
//! upstream, which shows (a bounded wait, no sleep) that upstream's controller is acting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use noexecute_testkit::*;

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

const DELAY: Duration = Duration::from_secs(4);
/// s-later's toleration in the shadow phase: time to read the shadow's countdown before it ends.
const SHADOW_LATER: Duration = Duration::from_secs(5);
const CANARY: &str = "zone-a-2";
const CANARY_LABEL: &str = "cutover.noexecute.io/canary";
const WAIT: Duration = Duration::from_secs(60);

/// Successful pod DELETEs in `namespace`, per pod: (by noexecute, by kube-controller-manager).
/// kwok's own final delete of a terminating pod is neither.
fn deletes(audit: &[AuditEntry], namespace: &str) -> BTreeMap<String, (usize, usize)> {
    let mut out: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for e in audit.iter().filter(|e| {
        e.namespace == namespace
            && e.resource == "pods"
            && e.subresource.is_empty()
            && e.verb == "delete"
            && (200..300).contains(&e.code)
    }) {
        let count = out.entry(e.name.clone()).or_default();
        if e.user_agent.starts_with("noexecute/") {
            count.0 += 1;
        } else if e.user_agent.starts_with("kube-controller-manager/") {
            count.1 += 1;
        }
    }
    out
}

/// Every write by noexecute to the pod `name` (a condition patch, a delete, an eviction).
fn noexecute_writes(audit: &[AuditEntry], namespace: &str, name: &str) -> usize {
    audit
        .iter()
        .filter(|e| {
            e.namespace == namespace
                && e.resource == "pods"
                && e.name == name
                && e.user_agent.starts_with("noexecute/")
                && matches!(e.verb.as_str(), "patch" | "update" | "delete" | "create")
        })
        .count()
}

/// On `node`, cleared of the taints of earlier steps: pods `{prefix}-now` (no toleration),
/// `{prefix}-later` (tolerates `later` s) and `{prefix}-stays` (tolerates every NoExecute
/// taint for ever), then the NoExecute taint `{prefix}`.
async fn tainted(ns: &TestNamespace, node: &str, prefix: &str, later: i64) -> Result<Instant> {
    let key = format!("example.com/{prefix}");
    set_taints(&ns.nodes(), node, vec![]).await?;
    let forever = k8s_openapi::api::core::v1::Toleration {
        operator: Some("Exists".into()),
        effect: Some("NoExecute".into()),
        ..Default::default()
    };
    ns.create_pod(&pod(&format!("{prefix}-now"), node, vec![], None))
        .await?;
    ns.create_pod(&pod(
        &format!("{prefix}-later"),
        node,
        vec![tolerate(&key, Some(later))],
        None,
    ))
    .await?;
    ns.create_pod(&pod(&format!("{prefix}-stays"), node, vec![forever], None))
        .await?;
    // Both controllers' pod caches hold the pods before the taint comes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    add_taint(&ns.nodes(), node, no_execute(&key, "")).await?;
    Ok(Instant::now())
}

async fn evicted(ns: &TestNamespace, prefix: &str) -> Result<BTreeMap<String, Instant>> {
    let now = format!("{prefix}-now");
    let later = format!("{prefix}-later");
    wait_all_evicted(&ns.pods(), &[&now, &later], WAIT).await
}

/// Upstream's controller is acting: a pod on the tainted canary node is evicted.
async fn upstream_acting(ns: &TestNamespace, n: u32) -> Result<()> {
    let name = format!("canary-{n}");
    ns.create_pod(&pod(&name, CANARY, vec![], None)).await?;
    wait_evicted(&ns.pods(), &name, WAIT)
        .await
        .with_context(|| format!("upstream's controller did not evict {name}"))?;
    Ok(())
}

async fn start(
    plane: &Plane,
    ns: &TestNamespace,
    name: &str,
    extra: &[&str],
) -> Result<Controller> {
    let selector = format!("!{CANARY_LABEL}");
    let mut args = vec!["--node-selector", &selector];
    args.extend_from_slice(extra);
    args.extend(SHORT_LEASE);
    let mut controller = Controller::start(plane, binary(), &format!("{}-{name}", ns.name), &args)?;
    controller.wait_ready(Duration::from_secs(30)).await?;
    eventually(Duration::from_secs(20), "noexecute leads", || async {
        Ok((controller.metric("noexecute_leader ").await? == Some(1.0)).then_some(()))
    })
    .await?;
    Ok(controller)
}

#[tokio::test]
async fn the_switch_and_back_evict_each_pod_once_with_no_gap() -> Result<()> {
    // A fresh plane: the test restarts kube-controller-manager and taints its nodes.
    Plane::reset("cutover")?;
    let plane = Plane::full("cutover", 1, 3, true)?;
    plane.install_rbac()?;
    plane.kubectl(&[
        "label",
        "node",
        CANARY,
        &format!("{CANARY_LABEL}=true"),
        "--overwrite",
    ])?;
    let client = plane.admin_client().await?;
    let ns = TestNamespace::create(&client, "cutover").await?;
    add_taint(&ns.nodes(), CANARY, no_execute("example.com/canary", "")).await?;
    let delay = format!("{}s", DELAY.as_secs());
    let slack = Duration::from_millis(500);

    // 1. Shadow: dry run beside upstream.
    upstream_acting(&ns, 1).await?;
    let mut controller = start(&plane, &ns, "shadow", &["--dry-run"]).await?;
    let t = tainted(&ns, "zone-a-0", "s", SHADOW_LATER.as_secs() as i64).await?;
    // The shadow decides as upstream does: s-later's countdown is on its /status, due when
    // the toleration runs out. (Whether its dry run then counts "would evict" is a race with
    // upstream's delete, which it loses as often as not, so that counter is not asserted;
    // tests/policies.rs checks it with noexecute alone.)
    let deadline = eventually(
        SHADOW_LATER - Duration::from_secs(1),
        "the shadow's countdown for s-later",
        || async {
            let status = controller.status().await?;
            Ok(status["pending"].as_array().and_then(|pending| {
                pending
                    .iter()
                    .find(|p| p["name"] == "s-later")
                    .and_then(|p| p["inSeconds"].as_f64())
                    .map(|left| Instant::now() + Duration::from_secs_f64(left.max(0.0)))
            }))
        },
    )
    .await?;
    ensure!(
        deadline.saturating_duration_since(t + SHADOW_LATER) < slack * 2
            && (t + SHADOW_LATER).saturating_duration_since(deadline) < slack * 2,
        "the shadow's s-later is due {:?} after the taint, not {SHADOW_LATER:?}",
        deadline - t
    );
    evicted(&ns, "s").await?;
    assert_not_evicted_for(&ns.pods(), "s-stays", Duration::from_secs(3)).await?;
    controller.terminate(Duration::from_secs(20)).await?;

    // 2. Handover beside upstream: upstream evicts; noexecute's reads, DELAY later, find
    //    the pods gone.
    let mut controller = start(&plane, &ns, "handover", &["--handover-delay", &delay]).await?;
    let t = tainted(&ns, "zone-a-1", "h", 2).await?;
    let e = evicted(&ns, "h").await?;
    ensure!(
        e["h-now"] < t + DELAY,
        "upstream evicts at once, not after the delay: {:?}",
        e["h-now"] - t
    );
    // Past both pods' delay and then some: noexecute's reads have happened.
    assert_not_evicted_for(&ns.pods(), "h-stays", DELAY + Duration::from_secs(4)).await?;

    // 3. Upstream off, with a countdown running across the switch (`o-later`, 3 s), then
    //    noexecute alone with the delay.
    tainted(&ns, "zone-a-0", "o", 3).await?;
    plane.script(&["kcm-start", "*,-taint-eviction-controller"])?;
    evicted(&ns, "o").await?;
    let t = tainted(&ns, "zone-a-1", "p", 2).await?;
    let e = evicted(&ns, "p").await?;
    ensure!(
        e["p-now"] + slack >= t + DELAY,
        "p-now evicted {:?} after the taint, before the delay",
        e["p-now"] - t
    );
    ensure!(
        e["p-later"] + slack >= t + Duration::from_secs(2) + DELAY,
        "p-later evicted {:?} after the taint",
        e["p-later"] - t
    );
    assert_not_evicted_for(&ns.pods(), "p-stays", Duration::from_secs(2)).await?;
    controller.terminate(Duration::from_secs(20)).await?;

    // 4. Alone, as installed for good: on time, and ready to stand down.
    let mut controller = start(&plane, &ns, "alone", &["--refuse-if-foreign"]).await?;
    let t = tainted(&ns, "zone-a-0", "q", 2).await?;
    let e = evicted(&ns, "q").await?;
    ensure!(
        e["q-now"] < t + Duration::from_secs(2),
        "q-now evicted {:?} after the taint",
        e["q-now"] - t
    );
    assert_not_evicted_for(&ns.pods(), "q-stays", Duration::from_secs(2)).await?;

    // 5. Upstream back by mistake: both race for the `m` pods; noexecute stands down, and
    //    upstream evicts the `n` pods alone.
    plane.script(&["kcm-start", "*"])?;
    upstream_acting(&ns, 2).await?;
    tainted(&ns, "zone-a-1", "m", 1).await?;
    evicted(&ns, "m").await?;
    eventually(Duration::from_secs(15), "noexecute refuses", || async {
        Ok((controller.metric("noexecute_refusing ").await? == Some(1.0)).then_some(()))
    })
    .await?;
    tainted(&ns, "zone-a-0", "n", 2).await?;
    evicted(&ns, "n").await?;
    assert_not_evicted_for(&ns.pods(), "n-stays", Duration::from_secs(2)).await?;
    controller.terminate(Duration::from_secs(20)).await?;

    // 6. Rollback, from there: noexecute restarts with the delay (which clears the refusal)
    //    beside upstream, then goes while it still holds the `r` pods' evictions (30 s);
    //    upstream has evicted them.
    let mut controller = start(&plane, &ns, "rollback", &["--handover-delay", "30s"]).await?;
    tainted(&ns, "zone-a-1", "r", 2).await?;
    evicted(&ns, "r").await?;
    assert_not_evicted_for(&ns.pods(), "r-stays", Duration::from_secs(2)).await?;
    controller.terminate(Duration::from_secs(20)).await?;

    // The audit log.
    let audit = eventually(Duration::from_secs(10), "the audit log", || async {
        let audit = plane.audit()?;
        Ok(deletes(&audit, &ns.name)
            .contains_key("r-later")
            .then_some(audit))
    })
    .await?;
    let d = deletes(&audit, &ns.name);
    let of = |name: &str| d.get(name).copied().unwrap_or((0, 0));
    for (name, (ours, upstream)) in &d {
        assert!(*ours <= 1, "{name}: noexecute deleted it {ours} times");
        println!("{name}: deleted by noexecute {ours}, by upstream {upstream}");
    }
    for phase in ["s", "h", "o", "p", "q", "m", "n", "r"] {
        for pod in ["now", "later"] {
            let name = format!("{phase}-{pod}");
            let (ours, upstream) = of(&name);
            ensure!(ours + upstream >= 1, "{name} was deleted by neither");
            match phase {
                // Upstream alone acts: noexecute writes nothing to the pod.
                "s" | "h" | "n" | "r" => {
                    ensure!(
                        noexecute_writes(&audit, &ns.name, &name) == 0,
                        "{name}: noexecute wrote to a pod upstream evicts"
                    );
                }
                // noexecute alone.
                "p" | "q" => ensure!(
                    (ours, upstream) == (1, 0),
                    "{name}: (noexecute, upstream) = ({ours}, {upstream})"
                ),
                // Across the switch: one of them, or both racing (step 5).
                _ => {}
            }
        }
        let stays = format!("{phase}-stays");
        ensure!(of(&stays) == (0, 0), "{stays} tolerates its taint");
        ensure!(
            noexecute_writes(&audit, &ns.name, &stays) == 0,
            "{stays}: noexecute wrote to it"
        );
    }
    // The straddling countdown was kept by exactly one of the two.
    let (ours, upstream) = of("o-later");
    ensure!(
        ours + upstream == 1,
        "o-later: (noexecute, upstream) = ({ours}, {upstream})"
    );
    ns.cleanup().await?;
    plane.down()?;
    Ok(())
}
