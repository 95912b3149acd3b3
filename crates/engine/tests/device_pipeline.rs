//! Device-taint evictions through the pipeline (`docs/parity.md` §22): from the device core's
//! decision to an attempt, on a virtual clock. The device core's own decisions are
//! `device_conformance.rs`'s; here, what the pipeline does with them: when an attempt starts,
//! what it says (reason and Events), a time that moves, a cancel, a retry, exclusions, the
//! listings acting waits for, and one eviction for a pod hit by a node taint and a device
//! taint at once.
#![allow(clippy::expect_used)]

use noexecute_engine::device::{
    AllocatedDevice, Claim, Consumer, Device, PodClaim, Rule, Selector, Slice,
};
use noexecute_engine::pipeline::{
    Attempt, AttemptReport, AttemptResult, DEVICE_EVENT_REASON, Effect, Finish, Plan, RuleStatus,
    RuleWrite, Term, Watched, WrittenCondition,
};
use noexecute_engine::{
    NodeObservation, Operator, Pipeline, PipelineConfig, PodObservation, Taint, TaintEffect, Time,
    Toleration, observe::Uid,
};

const NS: &str = "ml";

fn t(s: i64) -> Time {
    Time::from_secs(1_000 + s)
}

fn config() -> PipelineConfig {
    PipelineConfig {
        device_taints: true,
        ..PipelineConfig::default()
    }
}

fn no_execute(added: Time) -> Taint {
    let mut taint = Taint::new("gpu.example.com/ecc", "", TaintEffect::NoExecute);
    taint.time_added = Some(added);
    taint
}

/// A slice of two GPUs; `tainted` carry a `NoExecute` taint added at `added`.
fn slice(tainted: &[&str], added: Time) -> Slice {
    let devices = ["gpu-0", "gpu-1"]
        .iter()
        .map(|name| Device {
            name: (*name).into(),
            taints: if tainted.contains(name) {
                vec![no_execute(added)]
            } else {
                vec![]
            },
        })
        .collect();
    Slice {
        name: "node-a-gpus".into(),
        driver: "gpu.example.com".into(),
        pool: "node-a".into(),
        generation: 1,
        devices,
    }
}

fn tolerating(seconds: Option<i64>) -> Vec<Toleration> {
    seconds
        .map(|s| Toleration {
            key: "gpu.example.com/ecc".into(),
            operator: Operator::Exists,
            value: String::new(),
            effect: Some(TaintEffect::NoExecute),
            toleration_seconds: Some(s),
        })
        .into_iter()
        .collect()
}

/// `pod`'s claim on `device`, tolerating the taint for `seconds` (`None`: no toleration).
fn claim(pod: &str, device: &str, seconds: Option<i64>) -> Claim {
    Claim {
        namespace: NS.into(),
        name: format!("{pod}-gpu"),
        uid: Uid::new(&format!("{pod}-gpu-uid")),
        owner: None,
        allocation: Some(vec![AllocatedDevice {
            driver: "gpu.example.com".into(),
            pool: "node-a".into(),
            device: device.into(),
            tolerations: tolerating(seconds),
        }]),
        reserved_for: vec![Consumer::pod(pod, Uid::new(&format!("{pod}-uid")))],
    }
}

fn pod(name: &str) -> PodObservation {
    PodObservation::new(NS, name, &format!("{name}-uid"), Some("node-a"))
        .with_claims(vec![PodClaim::Named(format!("{name}-gpu"))])
}

fn node(tainted: bool) -> NodeObservation {
    NodeObservation {
        name: "node-a".into(),
        taints: if tainted {
            vec![Taint::no_execute("node.kubernetes.io/unreachable", "")]
        } else {
            vec![]
        },
    }
}

fn drain(p: &mut Pipeline) -> Vec<Effect> {
    std::iter::from_fn(|| p.poll_effect()).collect()
}

fn starts(effects: &[Effect]) -> Vec<Attempt> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Start(a) => Some(a.clone()),
            _ => None,
        })
        .collect()
}

fn started_pods(effects: &[Effect]) -> Vec<String> {
    starts(effects).iter().map(|a| a.pod.to_string()).collect()
}

/// Ticks at every wake-up up to `until`, answering each attempt with `answer`; returns every
/// effect.
/// Attempts already started (in `p`'s effects not yet drained) are answered at `t(0)`.
fn run_until(p: &mut Pipeline, until: Time, answer: &AttemptResult) -> Vec<Effect> {
    let mut all = Vec::new();
    let mut now = t(0);
    loop {
        let effects = drain(p);
        if effects.is_empty() {
            match p.next_wake().filter(|at| *at <= until) {
                Some(at) => {
                    now = at.max(now);
                    p.tick(now);
                    continue;
                }
                None => return all,
            }
        }
        for a in starts(&effects) {
            p.report(
                AttemptReport {
                    attempt: a.id,
                    result: answer.clone(),
                },
                now,
            );
        }
        all.extend(effects);
    }
}

/// Acting, with node-a untainted and `pods` on it using their claims, then the slice.
fn with_pods(pods: &[(&str, &str, Option<i64>)], slice: Slice) -> (Pipeline, Vec<Effect>) {
    let mut p = Pipeline::acting(config());
    p.upsert_node(&node(false), false, t(0));
    for (name, device, seconds) in pods {
        p.upsert_claim(claim(name, device, *seconds), t(0));
        p.upsert_pod(pod(name), t(0));
    }
    p.upsert_slice(slice, t(0));
    let effects = drain(&mut p);
    (p, effects)
}

/// An untolerated device taint: one attempt at once, for that pod only, that writes the device
/// condition and announces upstream's device Event; once it evicted, nothing is due again.
#[test]
fn an_untolerated_device_taint_starts_an_attempt_at_once() {
    let (mut p, effects) = with_pods(
        &[("train-0", "gpu-0", None), ("train-1", "gpu-1", None)],
        slice(&["gpu-0"], t(0)),
    );
    let started = starts(&effects);
    assert_eq!(started_pods(&effects), vec!["ml/train-0"]);
    let a = &started[0];
    assert_eq!(a.pod.uid, Uid::new("train-0-uid"));
    assert!(a.cause.is_none());
    assert_eq!(a.device.as_ref().map(|d| d.at), Some(t(0)));
    assert_eq!(a.plan, Plan::PatchThenDelete);
    let announce = a.announce.as_ref().map(|e| (e.reason, e.message.as_str()));
    assert_eq!(
        announce,
        Some((DEVICE_EVENT_REASON, "Marking for deletion"))
    );
    assert!(p.report(
        AttemptReport {
            attempt: a.id,
            result: AttemptResult::Evicted,
        },
        t(0),
    ));
    let later = run_until(&mut p, t(7200), &AttemptResult::Evicted);
    assert_eq!(starts(&later), vec![], "not due again");
    assert!(p.devices().pending().is_empty());
}

/// A tolerated taint waits for `timeAdded` + seconds; when the taint's time moves later, so
/// does the eviction (unlike a node taint's deadline), and nothing starts in between.
#[test]
fn a_device_eviction_waits_and_follows_its_taints_time() {
    let (mut p, effects) = with_pods(&[("train-0", "gpu-0", Some(60))], slice(&["gpu-0"], t(0)));
    assert_eq!(starts(&effects), vec![]);
    assert_eq!(p.next_wake(), Some(t(60)));
    p.tick(t(30));
    p.upsert_slice(slice(&["gpu-0"], t(40)), t(30));
    assert_eq!(p.next_wake(), Some(t(100)));
    let mut all = drain(&mut p);
    p.tick(t(60));
    all.extend(drain(&mut p));
    assert_eq!(starts(&all), vec![], "nothing at the old time");
    p.tick(t(100));
    let effects = drain(&mut p);
    assert_eq!(started_pods(&effects), vec!["ml/train-0"]);
}

/// A time that moves later after it fell due, while parked (not leading): it waits for its
/// new time rather than start when leadership comes.
#[test]
fn a_due_device_eviction_moved_later_waits_again() {
    let mut p = Pipeline::new(config());
    for what in [
        Watched::Nodes,
        Watched::Pods,
        Watched::Slices,
        Watched::Claims,
        Watched::Rules,
    ] {
        p.listing_started(what);
        p.listing_done(what, t(0));
    }
    p.upsert_node(&node(false), false, t(0));
    p.upsert_claim(claim("train-0", "gpu-0", Some(60)), t(0));
    p.upsert_pod(pod("train-0"), t(0));
    p.upsert_slice(slice(&["gpu-0"], t(0)), t(0));
    // Not leading: due at 60 s, parked.
    p.tick(t(60));
    assert_eq!(starts(&drain(&mut p)), vec![]);
    assert_eq!(p.parked(), 1);
    // The taint is re-added later: the eviction waits for its new time, even once leading.
    p.upsert_slice(slice(&["gpu-0"], t(50)), t(61));
    p.set_term(
        Some(Term {
            id: 1,
            until: Time::MAX,
        }),
        t(62),
    );
    assert_eq!(starts(&drain(&mut p)), vec![]);
    assert_eq!(p.next_wake(), Some(t(110)));
    p.tick(t(110));
    assert_eq!(started_pods(&drain(&mut p)), vec!["ml/train-0"]);
}

/// A delayed device eviction whose taint goes away before it is due is cancelled with
/// upstream's "Cancelling deletion" (reason `DeviceTaintManagerEviction`, about the pod and
/// its UID); the pod beside it, still tainted, is evicted in the same window.
#[test]
fn a_device_eviction_cancelled_before_it_is_due_records_cancelling_deletion() {
    let (mut p, _) = with_pods(
        &[
            ("train-0", "gpu-0", Some(60)),
            ("train-1", "gpu-1", Some(60)),
        ],
        slice(&["gpu-0", "gpu-1"], t(0)),
    );
    p.upsert_slice(slice(&["gpu-1"], t(0)), t(10));
    let effects = drain(&mut p);
    let events: Vec<(String, Uid, &str, String)> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::PodEvent { pod, event, .. } => Some((
                pod.to_string(),
                pod.uid.clone(),
                event.reason,
                event.message.clone(),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        events,
        vec![(
            "ml/train-0".to_string(),
            Uid::new("train-0-uid"),
            DEVICE_EVENT_REASON,
            "Cancelling deletion".to_string()
        )]
    );
    let all = run_until(&mut p, t(7200), &AttemptResult::Evicted);
    assert_eq!(started_pods(&all), vec!["ml/train-1"]);
}

/// A pod whose node and device are both tainted (neither tolerated) is evicted once: one
/// attempt, and the other eviction ends without a request once it reports.
#[test]
fn a_pod_hit_by_a_node_taint_and_a_device_taint_is_evicted_once() {
    let mut p = Pipeline::acting(config());
    p.upsert_node(&node(true), false, t(0));
    p.upsert_claim(claim("train-0", "gpu-0", None), t(0));
    p.upsert_slice(slice(&["gpu-0"], t(0)), t(0));
    p.upsert_pod(pod("train-0"), t(0));
    let all = run_until(&mut p, t(7200), &AttemptResult::Evicted);
    assert_eq!(started_pods(&all), vec!["ml/train-0"], "{all:#?}");
    assert_eq!(p.tracked(), 0);
    // The positive control: without the node taint, the device alone evicts it.
    let (_, effects) = with_pods(&[("train-0", "gpu-0", None)], slice(&["gpu-0"], t(0)));
    assert_eq!(started_pods(&effects), vec!["ml/train-0"]);
}

/// A failed attempt is retried after a backoff, without announcing "Marking for deletion"
/// again; an attempt that finds the pod gone ends it.
#[test]
fn a_failed_device_attempt_is_retried_without_a_second_announcement() {
    let (mut p, effects) = with_pods(&[("train-0", "gpu-0", None)], slice(&["gpu-0"], t(0)));
    let first = starts(&effects);
    assert_eq!(first.len(), 1);
    p.report(
        AttemptReport {
            attempt: first[0].id,
            result: AttemptResult::Failed {
                error: "500".into(),
                refused: false,
            },
        },
        t(0),
    );
    let retry_at = p.next_wake().expect("a retry is due");
    assert!(retry_at > t(0) && retry_at <= t(1));
    p.tick(retry_at);
    let second = starts(&drain(&mut p));
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].announce, None, "announced once");
    assert_ne!(
        second[0].plan,
        Plan::PatchThenDelete,
        "a retry reads the pod first"
    );
    p.report(
        AttemptReport {
            attempt: second[0].id,
            result: AttemptResult::Gone(noexecute_engine::pipeline::GoneReason::NotFound),
        },
        retry_at,
    );
    let later = run_until(&mut p, t(7200), &AttemptResult::Evicted);
    assert_eq!(starts(&later), vec![]);
    assert_eq!(p.tracked(), 0);
}

/// An excluded pod is never evicted for its devices (nor counted by a rule's status); the pod
/// beside it is.
#[test]
fn an_excluded_pod_is_not_evicted_for_its_devices() {
    let mut p = Pipeline::acting(config());
    p.upsert_node(&node(false), false, t(0));
    p.upsert_rule(
        Rule {
            name: "drain-node-a".into(),
            uid: Uid::new("rule-uid"),
            selector: Some(Selector {
                pool: Some("node-a".into()),
                ..Selector::default()
            }),
            taint: no_execute(t(0)),
        },
        RuleStatus::default(),
        t(0),
    );
    for name in ["train-0", "train-1"] {
        p.upsert_claim(claim(name, "gpu-0", None), t(0));
    }
    let mut excluded = pod("train-0");
    excluded.excluded = true;
    p.upsert_pod(excluded, t(0));
    p.upsert_pod(pod("train-1"), t(0));
    let all = run_until(&mut p, t(7200), &AttemptResult::Evicted);
    assert_eq!(started_pods(&all), vec!["ml/train-1"]);
    let mut terminating = pod("train-1");
    terminating.terminating = true;
    p.upsert_pod(terminating, t(7200));
    let condition = p.devices().rule_condition("drain-node-a");
    assert_eq!(
        condition.map(|c| (c.reason, c.message)),
        Some((
            "Completed",
            "1 pod evicted since starting the controller.".to_string()
        )),
        "the excluded pod is not pending"
    );
}

/// With device taints on, acting waits for the slice, claim and rule listings too.
#[test]
fn acting_waits_for_the_device_listings() {
    let mut p = Pipeline::new(config());
    p.set_leading(true, t(0));
    let all = [
        Watched::Nodes,
        Watched::Pods,
        Watched::Slices,
        Watched::Claims,
        Watched::Rules,
    ];
    for what in all {
        p.listing_started(what);
    }
    p.upsert_node(&node(false), false, t(0));
    p.upsert_claim(claim("train-0", "gpu-0", None), t(0));
    p.upsert_pod(pod("train-0"), t(0));
    p.upsert_slice(slice(&["gpu-0"], t(0)), t(0));
    for what in [Watched::Nodes, Watched::Pods] {
        p.listing_done(what, t(0));
    }
    assert!(!p.may_act());
    assert_eq!(starts(&drain(&mut p)), vec![]);
    for what in [Watched::Slices, Watched::Claims] {
        p.listing_done(what, t(1));
    }
    assert_eq!(starts(&drain(&mut p)), vec![], "rules not listed yet");
    p.listing_done(Watched::Rules, t(2));
    assert_eq!(started_pods(&drain(&mut p)), vec!["ml/train-0"]);
}

/// A relist that no longer has the slice drops it: the pod's pending eviction is cancelled.
#[test]
fn a_slice_missing_from_a_relist_is_deleted() {
    let (mut p, _) = with_pods(&[("train-0", "gpu-0", Some(60))], slice(&["gpu-0"], t(0)));
    assert_eq!(p.devices().pending().len(), 1);
    p.listing_started(Watched::Slices);
    p.listing_done(Watched::Slices, t(5));
    assert!(p.devices().pending().is_empty());
    let all = run_until(&mut p, t(7200), &AttemptResult::Evicted);
    assert_eq!(starts(&all), vec![]);
}

/// Dry run: the attempt reads and writes nothing.
#[test]
fn a_dry_run_device_attempt_changes_nothing() {
    let mut p = Pipeline::acting(PipelineConfig {
        dry_run: true,
        ..config()
    });
    p.upsert_node(&node(false), false, t(0));
    p.upsert_claim(claim("train-0", "gpu-0", None), t(0));
    p.upsert_pod(pod("train-0"), t(0));
    p.upsert_slice(slice(&["gpu-0"], t(0)), t(0));
    let started = starts(&drain(&mut p));
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].finish(), Finish::Nothing);
}

fn braking_config() -> PipelineConfig {
    PipelineConfig {
        pace: noexecute_engine::PaceConfig {
            brake: Some(noexecute_engine::pace::Brake {
                threshold_percent: 50.0,
                min_tainted_nodes: 1,
            }),
            ..noexecute_engine::PaceConfig::default()
        },
        ..config()
    }
}

fn pool_rule(name: &str, device: Option<&str>) -> Rule {
    Rule {
        name: name.into(),
        uid: Uid::new(&format!("{name}-uid")),
        selector: Some(Selector {
            pool: Some("node-a".into()),
            device: device.map(Into::into),
            ..Selector::default()
        }),
        taint: no_execute(t(0)),
    }
}

/// The brake counts devices: a rule that taints every device of the pool (100% > 50%) holds
/// every eviction, with no node tainted at all; a rule on one device of two (50%, not more)
/// evicts its pod (the positive control). Releasing the node lets its pods go.
#[test]
fn the_brake_holds_a_rule_that_taints_most_devices() {
    let mut p = Pipeline::acting(braking_config());
    p.upsert_node(&node(false), false, t(0));
    p.upsert_slice(slice(&[], t(0)), t(0));
    for (name, gpu) in [("train-0", "gpu-0"), ("train-1", "gpu-1")] {
        p.upsert_claim(claim(name, gpu, None), t(0));
        p.upsert_pod(pod(name), t(0));
    }
    drain(&mut p);
    p.upsert_rule(pool_rule("one", Some("gpu-0")), RuleStatus::default(), t(1));
    let effects = drain(&mut p);
    assert_eq!(
        started_pods(&effects),
        vec!["ml/train-0"],
        "50% does not brake"
    );

    let mut p = Pipeline::acting(braking_config());
    p.upsert_node(&node(false), false, t(0));
    p.upsert_slice(slice(&[], t(0)), t(0));
    for (name, gpu) in [("train-0", "gpu-0"), ("train-1", "gpu-1")] {
        p.upsert_claim(claim(name, gpu, None), t(0));
        p.upsert_pod(pod(name), t(0));
    }
    drain(&mut p);
    p.upsert_rule(pool_rule("all", None), RuleStatus::default(), t(1));
    let effects = drain(&mut p);
    assert!(
        effects.iter().any(|e| matches!(
            e,
            Effect::Brake(noexecute_engine::BrakeChange::Engaged {
                devices: (2, 2),
                tainted: 0,
                ..
            })
        )),
        "{effects:#?}"
    );
    let all = {
        let mut all = effects;
        all.extend(run_until(&mut p, t(7200), &AttemptResult::Evicted));
        all
    };
    assert_eq!(starts(&all), vec![], "held over the whole window");
    assert_eq!(p.paced(), 2);
    // An operator releases the node: its pods go.
    p.upsert_node(&node(false), true, t(7200));
    assert_eq!(started_pods(&drain(&mut p)).len(), 2);
}

fn rule_writes(effects: &[Effect]) -> Vec<RuleWrite> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::RuleStatus(w) => Some(w.clone()),
            _ => None,
        })
        .collect()
}

/// As the rule watch shows `write` once applied.
fn as_written(w: &RuleWrite) -> RuleStatus {
    RuleStatus {
        generation: w.generation,
        condition: Some(WrittenCondition {
            status: w.condition.status,
            reason: w.condition.reason.to_string(),
            message: w.condition.message.clone(),
            observed_generation: w.generation,
            last_transition: w.at,
        }),
    }
}

/// §22.7: a new rule's status is written at once; after its pod is evicted, 10 s later, not
/// sooner (nothing is written in between), it says Completed; a standby writes nothing.
#[test]
fn a_rules_status_is_written_at_once_then_10_s_after_an_eviction() {
    let rule = || pool_rule("drain", Some("gpu-0"));
    let new = RuleStatus {
        generation: 1,
        condition: None,
    };
    let mut p = Pipeline::acting(config());
    p.upsert_node(&node(false), false, t(0));
    p.upsert_slice(slice(&[], t(0)), t(0));
    p.upsert_claim(claim("train-0", "gpu-0", None), t(0));
    p.upsert_pod(pod("train-0"), t(0));
    drain(&mut p);
    p.upsert_rule(rule(), new.clone(), t(0));
    let effects = drain(&mut p);
    let writes = rule_writes(&effects);
    assert_eq!(writes.len(), 1, "{effects:#?}");
    assert_eq!(
        (writes[0].condition.status, writes[0].condition.reason),
        (true, "PodsPendingEviction")
    );
    assert_eq!(
        writes[0].condition.message,
        "1 pod needs to be evicted in 1 namespace."
    );
    // The watch shows the write; the attempt evicts; the pod is terminating.
    p.upsert_rule(rule(), as_written(&writes[0]), t(0));
    let attempt = starts(&effects)[0].id;
    p.report(
        AttemptReport {
            attempt,
            result: AttemptResult::Evicted,
        },
        t(1),
    );
    let mut terminating = pod("train-0");
    terminating.terminating = true;
    p.upsert_pod(terminating, t(1));
    let mut between = drain(&mut p);
    p.tick(t(10));
    between.extend(drain(&mut p));
    assert_eq!(rule_writes(&between), vec![], "not within 10 s");
    assert_eq!(p.next_wake(), Some(t(11)));
    p.tick(t(11));
    let writes = rule_writes(&drain(&mut p));
    assert_eq!(writes.len(), 1);
    assert_eq!(
        (
            writes[0].condition.status,
            writes[0].condition.reason,
            writes[0].condition.message.as_str()
        ),
        (
            false,
            "Completed",
            "1 pod evicted since starting the controller."
        )
    );
    assert_eq!(writes[0].at, t(11));

    // A standby decides the same but writes nothing.
    let mut standby = Pipeline::new(config());
    for what in [
        Watched::Nodes,
        Watched::Pods,
        Watched::Slices,
        Watched::Claims,
        Watched::Rules,
    ] {
        standby.listing_started(what);
        standby.listing_done(what, t(0));
    }
    standby.upsert_node(&node(false), false, t(0));
    standby.upsert_slice(slice(&[], t(0)), t(0));
    standby.upsert_claim(claim("train-0", "gpu-0", None), t(0));
    standby.upsert_pod(pod("train-0"), t(0));
    standby.upsert_rule(rule(), new, t(0));
    let mut all = drain(&mut standby);
    standby.tick(t(60));
    all.extend(drain(&mut standby));
    assert_eq!(rule_writes(&all), vec![]);
}

/// The pod's deletion reaches the watch before its attempt reports (the real API server's
/// order, which the real-API test found): the eviction still counts for the rule.
#[test]
fn a_pod_deleted_before_its_attempt_reports_still_counts_for_its_rule() {
    let mut p = Pipeline::acting(config());
    p.upsert_node(&node(false), false, t(0));
    p.upsert_slice(slice(&[], t(0)), t(0));
    p.upsert_claim(claim("train-0", "gpu-0", None), t(0));
    p.upsert_pod(pod("train-0"), t(0));
    p.upsert_rule(
        pool_rule("drain", Some("gpu-0")),
        RuleStatus {
            generation: 1,
            condition: None,
        },
        t(0),
    );
    let attempt = starts(&drain(&mut p))[0].id;
    p.delete_pod(NS, "train-0", Some(&Uid::new("train-0-uid")), t(0));
    p.report(
        AttemptReport {
            attempt,
            result: AttemptResult::Evicted,
        },
        t(0),
    );
    let condition = p.devices().rule_condition("drain");
    assert_eq!(
        condition.map(|c| (c.reason, c.message)),
        Some((
            "Completed",
            "1 pod evicted since starting the controller.".to_string()
        ))
    );
    p.tick(t(10));
    assert_eq!(rule_writes(&drain(&mut p)).len(), 1, "written 10 s later");
}

/// The second-controller guard knows device taints: upstream's device controller announcing
/// a pod whose devices make it due is another controller at work; the same announcement about
/// a pod whose devices are untainted is not counted.
#[test]
fn the_guard_counts_another_device_controller() {
    use noexecute_engine::pipeline::{ForeignSign, SignKind};
    let (mut p, _) = with_pods(
        &[("train-0", "gpu-0", Some(3600)), ("train-1", "gpu-1", None)],
        slice(&["gpu-0"], t(0)),
    );
    let sign = |name: &str| ForeignSign {
        namespace: NS.into(),
        name: name.into(),
        kind: SignKind::Announcement,
        at: t(5),
        lease: None,
        writer: "device-taint-eviction-controller".into(),
    };
    p.foreign_sign(sign("train-1"), t(5));
    let untainted = drain(&mut p);
    assert!(
        !untainted
            .iter()
            .any(|e| matches!(e, Effect::Foreign { .. })),
        "{untainted:#?}"
    );
    p.foreign_sign(sign("train-0"), t(5));
    let effects = drain(&mut p);
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::Foreign { pod, first: true, .. } if pod == "ml/train-0")),
        "{effects:#?}"
    );
}

/// `status` shows device countdowns beside node ones, earliest first, with the taints that
/// make them due.
#[test]
fn countdowns_show_device_evictions() {
    let (mut p, _) = with_pods(
        &[
            ("train-0", "gpu-0", Some(60)),
            ("train-1", "gpu-1", Some(30)),
        ],
        slice(&["gpu-0", "gpu-1"], t(0)),
    );
    drain(&mut p);
    let c = p.countdowns(|_| true, 10);
    assert_eq!(c.total, 2);
    let rows: Vec<(String, Time, &str)> = c
        .rows
        .iter()
        .map(|r| (r.pod.to_string(), r.deadline, r.held.as_str()))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("ml/train-1".to_string(), t(30), "counting"),
            ("ml/train-0".to_string(), t(60), "counting"),
        ]
    );
    assert_eq!(
        c.rows[0].reason.as_deref(),
        Some(
            "device taints: taint 0 of device gpu.example.com/node-a/gpu-1 (ResourceSlice node-a-gpus)"
        )
    );
    assert_eq!(p.countdowns(|_| true, 1).rows.len(), 1, "bounded");
}

/// A claim on `gpu-0` for `pod` tolerating the `maintenance` taint for `seconds`, and not the
/// ECC one.
fn claim_tolerating_maintenance(pod: &str, seconds: i64) -> Claim {
    let mut c = claim(pod, "gpu-0", None);
    if let Some(devices) = c.allocation.as_mut() {
        devices[0].tolerations = vec![Toleration {
            key: "maintenance".into(),
            operator: Operator::Exists,
            value: String::new(),
            effect: Some(TaintEffect::NoExecute),
            toleration_seconds: Some(seconds),
        }];
    }
    c
}

/// The review's finding: a time that moves later while the attempt is in flight holds for
/// the retry (upstream's worker reads the time again): the untolerated slice taint goes away
/// while the attempt is under way, the attempt fails, and nothing starts before the tolerated
/// rule's 300 s are up.
#[test]
fn a_time_moved_later_during_an_attempt_holds_for_its_retry() {
    let mut p = Pipeline::acting(config());
    p.upsert_node(&node(false), false, t(0));
    p.upsert_claim(claim_tolerating_maintenance("train-0", 300), t(0));
    p.upsert_pod(pod("train-0"), t(0));
    let mut maintenance = pool_rule("maintenance", Some("gpu-0"));
    maintenance.taint = Taint::new("maintenance", "", TaintEffect::NoExecute);
    maintenance.taint.time_added = Some(t(0));
    p.upsert_rule(maintenance, RuleStatus::default(), t(0));
    p.upsert_slice(slice(&["gpu-0"], t(0)), t(0));
    let first = starts(&drain(&mut p));
    assert_eq!(first.len(), 1, "due at once for the ECC taint");
    p.upsert_slice(slice(&[], t(0)), t(1));
    p.report(
        AttemptReport {
            attempt: first[0].id,
            result: AttemptResult::Failed {
                error: "webhook".into(),
                refused: false,
            },
        },
        t(1),
    );
    let mut all = drain(&mut p);
    let mut now = t(1);
    while let Some(at) = p.next_wake().filter(|at| *at < t(300)) {
        now = at.max(now);
        p.tick(now);
        all.extend(drain(&mut p));
    }
    assert_eq!(starts(&all), vec![], "nothing before 300 s");
    assert_eq!(p.next_wake(), Some(t(300)));
    p.tick(t(300));
    assert_eq!(started_pods(&drain(&mut p)), vec!["ml/train-0"]);
}

/// The review's finding: a pod that starts terminating while its due device eviction is
/// parked gets no attempt when the replica takes over (no second delete, deviations #4), and
/// counts as evicted for the rule (quirk 2).
#[test]
fn a_pod_terminating_while_its_device_eviction_is_parked_is_not_attempted() {
    let mut p = Pipeline::new(config());
    for what in [
        Watched::Nodes,
        Watched::Pods,
        Watched::Slices,
        Watched::Claims,
        Watched::Rules,
    ] {
        p.listing_started(what);
        p.listing_done(what, t(0));
    }
    p.upsert_node(&node(false), false, t(0));
    p.upsert_claim(claim("train-0", "gpu-0", None), t(0));
    p.upsert_claim(claim("train-1", "gpu-1", None), t(0));
    p.upsert_pod(pod("train-0"), t(0));
    p.upsert_pod(pod("train-1"), t(0));
    p.upsert_rule(pool_rule("drain", None), RuleStatus::default(), t(0));
    assert_eq!(p.parked(), 2);
    let mut terminating = pod("train-0");
    terminating.terminating = true;
    p.upsert_pod(terminating, t(1));
    p.set_leading(true, t(2));
    let effects = drain(&mut p);
    assert_eq!(
        started_pods(&effects),
        vec!["ml/train-1"],
        "the positive control only"
    );
}

/// The review's finding: a dry run writes no rule status.
#[test]
fn a_dry_run_writes_no_rule_status() {
    let mut p = Pipeline::acting(PipelineConfig {
        dry_run: true,
        ..config()
    });
    p.upsert_node(&node(false), false, t(0));
    p.upsert_claim(claim("train-0", "gpu-0", None), t(0));
    p.upsert_pod(pod("train-0"), t(0));
    p.upsert_rule(
        pool_rule("drain", None),
        RuleStatus {
            generation: 1,
            condition: None,
        },
        t(0),
    );
    let all = run_until(&mut p, t(600), &AttemptResult::WouldEvict);
    assert_eq!(started_pods(&all), vec!["ml/train-0"], "it is decided");
    assert_eq!(rule_writes(&all), vec![], "and nothing is written");
}

/// A rule's status is not written again within 10 s of the last write of its generation,
/// even when a look is due sooner; a new generation is written at once.
#[test]
fn a_rules_status_waits_10_s_after_its_last_write_and_not_for_a_new_generation() {
    let mut p = Pipeline::acting(config());
    p.upsert_node(&node(false), false, t(0));
    p.upsert_claim(claim("train-0", "gpu-0", Some(3600)), t(0));
    p.upsert_claim(claim("train-1", "gpu-1", Some(3600)), t(0));
    p.upsert_pod(pod("train-0"), t(0));
    let rule = pool_rule("drain", None);
    let first = RuleStatus {
        generation: 1,
        condition: None,
    };
    p.upsert_rule(rule.clone(), first, t(0));
    let w = rule_writes(&drain(&mut p));
    assert_eq!(w.len(), 1);
    p.upsert_rule(rule.clone(), as_written(&w[0]), t(0));
    // A second pod becomes pending for the rule at 2 s: a look is due at 12 s. Meanwhile
    // another writer (the controller being replaced, say) wrote the condition at 8 s: the look
    // waits until 18 s, 10 s after that write.
    p.upsert_pod(pod("train-1"), t(2));
    let mut other = as_written(&w[0]);
    if let Some(c) = other.condition.as_mut() {
        c.message = "written by another".into();
        c.last_transition = t(8);
    }
    p.upsert_rule(rule.clone(), other, t(8));
    let mut all = drain(&mut p);
    p.tick(t(12));
    all.extend(drain(&mut p));
    assert_eq!(
        rule_writes(&all),
        vec![],
        "not within 10 s of the last write"
    );
    assert_eq!(p.next_wake(), Some(t(18)));
    p.tick(t(18));
    let w = rule_writes(&drain(&mut p));
    assert_eq!(
        w.iter()
            .map(|w| w.condition.message.as_str())
            .collect::<Vec<_>>(),
        vec!["2 pods need to be evicted in 1 namespace."]
    );
    p.upsert_rule(rule.clone(), as_written(&w[0]), t(18));
    // A new generation at 19 s is written at once, 10 s or not.
    let mut changed = rule;
    changed.selector = Some(Selector {
        device: Some("gpu-0".into()),
        ..Selector::default()
    });
    p.upsert_rule(
        changed,
        RuleStatus {
            generation: 2,
            ..as_written(&w[0])
        },
        t(19),
    );
    let w = rule_writes(&drain(&mut p));
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].generation, 2);
    assert_eq!(
        w[0].condition.message,
        "1 pod needs to be evicted in 1 namespace."
    );
}

/// The review's finding: a node eviction and a device eviction may both wait for the pod's
/// earlier attempt; when it reports, both go on (one at a time), and the device one is not
/// lost when the node one is cancelled.
#[test]
fn a_node_and_a_device_eviction_may_both_wait_for_a_pods_attempt() {
    let mut p = Pipeline::acting(config());
    p.upsert_node(&node(false), false, t(0));
    p.upsert_claim(claim("train-0", "gpu-0", None), t(0));
    p.upsert_pod(pod("train-0"), t(0));
    p.upsert_slice(slice(&["gpu-0"], t(0)), t(0));
    let first = starts(&drain(&mut p));
    assert_eq!(first.len(), 1);
    // The device taint flaps: the first attempt is told to stop, the pod stays busy.
    p.upsert_slice(slice(&[], t(0)), t(1));
    p.upsert_slice(slice(&["gpu-0"], t(1)), t(1));
    // The node gets tainted too: both wait for the first attempt.
    p.upsert_node(&node(true), false, t(1));
    assert_eq!(starts(&drain(&mut p)), vec![], "one attempt at a time");
    p.report(
        AttemptReport {
            attempt: first[0].id,
            result: AttemptResult::Cancelled,
        },
        t(2),
    );
    let second = starts(&drain(&mut p));
    assert_eq!(second.len(), 1, "one of the two goes on");
    // Whichever went first is stopped (its cause goes away); the other then goes on.
    if second[0].device.is_some() {
        p.upsert_slice(slice(&[], t(1)), t(3));
    } else {
        p.upsert_node(&node(false), false, t(3));
    }
    p.report(
        AttemptReport {
            attempt: second[0].id,
            result: AttemptResult::Cancelled,
        },
        t(3),
    );
    let third = starts(&drain(&mut p));
    assert_eq!(third.len(), 1, "the other was not lost");
    assert_ne!(third[0].device.is_some(), second[0].device.is_some());
}
