//! Upstream's `device_taint_eviction_test.go` `TestController` cases (`docs/parity.md` §22.10),
//! on a virtual clock: the decision part of each case (which pods are due, when and why, and
//! which cancellations record an event), then the clock run well past every deadline. Where
//! upstream applies a case's events in every order, so does [`outcome`]; events grouped in one
//! inner list keep their order, as upstream's nested lists do.
//!
//! The DeviceTaintRule status cases check the condition's status, reason and message; when it
//! is written (at most every 10 s, only when it changed) is the driver's, and comes with it.
//! Not yet here: the PodGroup and extended-resource claim cases (`docs/parity.md` §22.9).

use noexecute_engine::device::{
    AllocatedDevice, Claim, Consumer, Device, DeviceAction, DeviceEviction, DevicePod, Devices,
    PodClaim, PodKey, Rule, RuleCondition, Selector, Slice, TaintSource,
};
use noexecute_engine::{Operator, Taint, TaintEffect, Time, Toleration, observe::Uid};

const NS: &str = "default";
const DRIVER: &str = "some-driver";
const POOL: &str = "worker";

/// Upstream's `taintTime`: the fake clock's start.
fn t0() -> Time {
    Time::from_secs(946_684_800)
}

fn taint(key: &str, value: &str, effect: &str) -> Taint {
    let mut t = Taint::new(key, value, TaintEffect::parse(effect));
    t.time_added = Some(t0());
    t
}

fn no_execute() -> Taint {
    taint("example.com/taint", "something", "NoExecute")
}

fn exists(key: &str, seconds: Option<i64>) -> Toleration {
    Toleration {
        key: key.into(),
        operator: Operator::Exists,
        value: String::new(),
        effect: Some(TaintEffect::NoExecute),
        toleration_seconds: seconds,
    }
}

fn device(name: &str, taints: Vec<Taint>) -> Device {
    Device {
        name: name.into(),
        taints,
    }
}

fn slice_named(name: &str, generation: i64, instance: Vec<Taint>) -> Slice {
    Slice {
        name: name.into(),
        driver: DRIVER.into(),
        pool: POOL.into(),
        generation,
        devices: vec![
            device("instance", instance),
            device(
                "instance-no-schedule",
                vec![taint("no-schedule", "", "NoSchedule")],
            ),
            device(
                "instance-no-execute",
                vec![
                    taint("no-effect", "", "None"),
                    taint("no-execute", "", "NoExecute"),
                ],
            ),
        ],
    }
}

/// Upstream's `slice`: `instance` untainted.
fn slice() -> Slice {
    slice_named("my-slice", 1, vec![])
}

/// Upstream's `sliceTainted`: `instance` carries a `NoExecute` taint since `t0`.
fn slice_tainted() -> Slice {
    slice_named("my-slice", 1, vec![no_execute()])
}

fn pod_uid() -> Uid {
    Uid::new("1234")
}

fn allocated(device: &str, tolerations: Vec<Toleration>) -> AllocatedDevice {
    AllocatedDevice {
        driver: DRIVER.into(),
        pool: POOL.into(),
        device: device.into(),
        tolerations,
    }
}

/// Upstream's `inUseClaim`: `instance`, owned by and reserved for `my-pod`.
fn claim() -> Claim {
    claim_of("my-claim", vec![allocated("instance", vec![])])
}

fn claim_of(name: &str, devices: Vec<AllocatedDevice>) -> Claim {
    Claim {
        namespace: NS.into(),
        name: name.into(),
        uid: Uid::new(&format!("{name}-uid")),
        owner: Some(pod_uid()),
        allocation: Some(devices),
        reserved_for: vec![Consumer::pod("my-pod", pod_uid())],
    }
}

fn tolerating(tolerations: Vec<Toleration>) -> Claim {
    claim_of("my-claim", vec![allocated("instance", tolerations)])
}

/// Upstream's `podWithClaimName`: scheduled on `worker`, using `my-claim` by name.
fn pod() -> DevicePod {
    DevicePod {
        namespace: NS.into(),
        name: "my-pod".into(),
        uid: pod_uid(),
        node: Some("worker".into()),
        claims: vec![PodClaim::Named("my-claim".into())],
        deleting: false,
    }
}

fn key() -> PodKey {
    pod().key()
}

fn rule(name: &str, selector: Selector, t: Taint) -> Rule {
    Rule {
        name: name.into(),
        uid: Uid::new(&format!("{name}-uid")),
        selector: Some(selector),
        taint: t,
    }
}

fn driver_selector() -> Selector {
    Selector {
        driver: Some(DRIVER.into()),
        ..Selector::default()
    }
}

fn device_selector(device: &str) -> Selector {
    Selector {
        device: Some(device.into()),
        ..Selector::default()
    }
}

fn rule_source(name: &str) -> TaintSource {
    TaintSource::Rule {
        name: name.into(),
        uid: Uid::new(&format!("{name}-uid")),
    }
}

fn slice_source(device: &str, index: usize) -> TaintSource {
    TaintSource::Slice {
        driver: DRIVER.into(),
        pool: POOL.into(),
        device: device.into(),
        index,
        slice: "my-slice".into(),
    }
}

#[derive(Clone, Debug)]
enum Ev {
    Slice(Slice),
    DelSlice(&'static str),
    Rule(Rule),
    Claim(Claim),
    DelClaim(&'static str),
    Pod(DevicePod),
    DelPod(&'static str),
}

fn apply(d: &mut Devices, ev: &Ev) {
    match ev {
        Ev::Slice(s) => d.upsert_slice(s.clone()),
        Ev::DelSlice(n) => d.delete_slice(n),
        Ev::Rule(r) => d.upsert_rule(r.clone()),
        Ev::Claim(c) => d.upsert_claim(c.clone()),
        Ev::DelClaim(n) => d.delete_claim(NS, n),
        Ev::Pod(p) => d.upsert_pod(p.clone()),
        Ev::DelPod(n) => d.delete_pod(NS, n),
    }
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for rest in permutations(n - 1) {
        for at in 0..=rest.len() {
            let mut p = rest.clone();
            p.insert(at, n - 1);
            out.push(p);
        }
    }
    out
}

/// What a case's events leave behind.
#[derive(Debug)]
struct Outcome {
    /// Upstream's `deletePodAt` after the events.
    pending: Vec<(PodKey, DeviceEviction)>,
    /// The pods whose cancellation records "Cancelling deletion", during the events.
    cancel_events: Vec<PodKey>,
    devices: Devices,
}

/// The state after `initial`, then `events` in every order of the outer list; every order must
/// agree on what is pending and on the cancellation events.
fn outcome(initial: &[Ev], events: &[Vec<Ev>]) -> Outcome {
    let mut first: Option<Outcome> = None;
    for order in permutations(events.len()) {
        let mut d = Devices::new();
        for ev in initial {
            apply(&mut d, ev);
        }
        d.drain_actions();
        for &i in &order {
            for ev in &events[i] {
                apply(&mut d, ev);
            }
        }
        let mut cancel_events: Vec<PodKey> = d
            .drain_actions()
            .into_iter()
            .filter_map(|a| match a {
                DeviceAction::Cancel { pod, event: true } => Some(pod),
                _ => None,
            })
            .collect();
        cancel_events.sort();
        let got = Outcome {
            pending: d.pending().clone().into_iter().collect(),
            cancel_events,
            devices: d,
        };
        match &first {
            None => first = Some(got),
            Some(f) => {
                assert_eq!(
                    (&f.pending, &f.cancel_events),
                    (&got.pending, &got.cancel_events),
                    "order {order:?} disagrees"
                );
            }
        }
    }
    first.unwrap_or_else(|| unreachable!("at least one order"))
}

/// Runs the virtual clock from `t0` to `until`: every pod due fires at its time (at `t0` if
/// that has passed), as upstream's workers do. Returns (time, pod) in order.
fn run(d: &mut Devices, until: Time) -> Vec<(Time, PodKey)> {
    let mut fired = Vec::new();
    while let Some(at) = d.next_due() {
        let now = at.max(t0());
        if now > until {
            break;
        }
        for pod in d.due(now) {
            d.evicted(&pod);
            fired.push((now, pod));
        }
    }
    fired
}

fn later() -> Time {
    t0().plus_secs(7200)
}

/// Nothing pending, and nothing fires over two hours.
fn assert_never(mut o: Outcome) {
    assert_eq!(o.pending, vec![], "nothing pending");
    assert_eq!(run(&mut o.devices, later()), vec![], "nothing fires");
}

/// `my-pod` pending at `at` for `reasons`, and fired exactly then.
fn assert_evicted_at(mut o: Outcome, at: Time, reasons: Vec<TaintSource>) {
    assert_eq!(
        o.pending,
        vec![(key(), DeviceEviction { at, reasons })],
        "pending"
    );
    assert_eq!(run(&mut o.devices, later()), vec![(at, key())], "fired");
}

fn single(ev: Ev) -> Vec<Vec<Ev>> {
    vec![vec![ev]]
}

fn each(evs: Vec<Ev>) -> Vec<Vec<Ev>> {
    evs.into_iter().map(|e| vec![e]).collect()
}

#[test]
fn empty() {
    assert_never(outcome(&[], &[]));
}

/// Upstream's `slice2`: `slice` in another pool, one generation on.
fn slice2() -> Slice {
    let mut s = slice();
    s.name = "my-slice-2".into();
    s.pool = "worker-2".into();
    s.generation = 2;
    s
}

/// A claim on `instance-no-execute` of pool `worker-2` (tainted `NoExecute` in `slice2`).
fn claim_in_slice2() -> Claim {
    let mut device = allocated("instance-no-execute", vec![]);
    device.pool = "worker-2".into();
    claim_of("my-claim", vec![device])
}

/// Upstream checks only the pools it keeps; here the pools show through a pod on `slice2`'s
/// tainted device and a `None` rule's count of published devices.
#[test]
fn populate_pools() {
    let o = outcome(
        &[Ev::Claim(claim_in_slice2()), Ev::Pod(pod())],
        &each(vec![Ev::Slice(slice()), Ev::Slice(slice2())]),
    );
    let mut d = o.devices.clone();
    d.upsert_rule(none_rule());
    assert!(
        d.rule_condition("rule-none")
            .is_some_and(|c| c.message.starts_with("6 published devices selected.")),
        "{:?}",
        d.rule_condition("rule-none")
    );
    let mut source = slice_source("instance-no-execute", 1);
    if let TaintSource::Slice { pool, slice, .. } = &mut source {
        *pool = "worker-2".into();
        *slice = "my-slice-2".into();
    }
    assert_evicted_at(o, t0(), vec![source]);
}

/// Upstream's case, with a pod whose device loses its taint (`sliceUntainted`) and a `None`
/// rule that counts the published devices once `slice2` is gone.
#[test]
fn update_pools() {
    let mut untainted = slice();
    untainted.devices[1].taints.clear();
    untainted.devices[2].taints.clear();
    let o = outcome(
        &[
            Ev::Slice(slice()),
            Ev::Slice(slice2()),
            Ev::Claim(claim_of(
                "my-claim",
                vec![allocated("instance-no-execute", vec![])],
            )),
            Ev::Pod(pod()),
        ],
        &each(vec![Ev::Slice(untainted), Ev::DelSlice("my-slice-2")]),
    );
    assert_eq!(o.cancel_events, vec![key()], "the taint went away");
    let mut d = o.devices.clone();
    d.upsert_rule(none_rule());
    assert!(
        d.rule_condition("rule-none")
            .is_some_and(|c| c.message.starts_with("3 published devices selected.")),
        "{:?}",
        d.rule_condition("rule-none")
    );
    assert_never(o);
}

#[test]
fn untainted_claim() {
    assert_never(outcome(
        &[],
        &each(vec![Ev::Slice(slice()), Ev::Claim(claim())]),
    ));
}

#[test]
fn tainted_claim_through_resourceslice() {
    // The claim is due at t0, but no pod uses it.
    let o = outcome(
        &[],
        &each(vec![Ev::Slice(slice_tainted()), Ev::Claim(claim())]),
    );
    let mut d = o.devices.clone();
    d.upsert_pod(pod());
    assert_eq!(
        d.pending().get(&key()).map(|e| e.at),
        Some(t0()),
        "the claim's time, once a pod uses it (positive control)"
    );
    assert_never(o);
}

#[test]
fn tainted_claim_through_rule() {
    let o = outcome(
        &[],
        &each(vec![
            Ev::Rule(rule("rule", driver_selector(), no_execute())),
            Ev::Claim(claim()),
        ]),
    );
    let mut d = o.devices.clone();
    d.upsert_pod(pod());
    assert_eq!(
        d.pending().get(&key()).map(|e| e.reasons.clone()),
        Some(vec![rule_source("rule")]),
        "the rule is the claim's reason (positive control)"
    );
    assert_never(o);
}

#[test]
fn evict_pod_resourceclaim() {
    let o = outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(claim()),
            Ev::Pod(pod()),
        ]),
    );
    assert_evicted_at(o, t0(), vec![slice_source("instance", 0)]);
}

fn condition(status: bool, reason: &'static str, message: &str) -> Option<RuleCondition> {
    Some(RuleCondition {
        status,
        reason,
        message: message.into(),
    })
}

/// Fires every pod due, and deletes it, as the API server would.
fn evict_and_delete(d: &mut Devices) {
    for (_, pod) in run(d, later()) {
        d.delete_pod(&pod.namespace, &pod.name);
    }
}

#[test]
fn rule_status() {
    let o = outcome(
        &[],
        &single(Ev::Rule(rule("rule", driver_selector(), no_execute()))),
    );
    assert_eq!(
        o.devices.rule_condition("rule"),
        condition(false, "NotStarted", "")
    );
    assert_never(o);
}

#[test]
fn evict_pod_rule() {
    let mut o = outcome(
        &[],
        &each(vec![
            Ev::Rule(rule("rule", driver_selector(), no_execute())),
            Ev::Claim(claim()),
            Ev::Pod(pod()),
        ]),
    );
    let d = &mut o.devices;
    assert_eq!(
        d.rule_condition("rule"),
        condition(
            true,
            "PodsPendingEviction",
            "1 pod needs to be evicted in 1 namespace."
        )
    );
    evict_and_delete(d);
    assert_eq!(
        d.rule_condition("rule"),
        condition(
            false,
            "Completed",
            "1 pod evicted since starting the controller."
        )
    );
    let o = outcome(
        &[],
        &each(vec![
            Ev::Rule(rule("rule", driver_selector(), no_execute())),
            Ev::Claim(claim()),
            Ev::Pod(pod()),
        ]),
    );
    assert_evicted_at(o, t0(), vec![rule_source("rule")]);
}

#[test]
fn evict_pod_rule_later() {
    let mut o = outcome(
        &[],
        &each(vec![
            Ev::Rule(rule("rule", driver_selector(), no_execute())),
            Ev::Claim(tolerating(vec![exists("", Some(3600))])),
            Ev::Pod(pod()),
        ]),
    );
    assert_eq!(
        o.devices.rule_condition("rule"),
        condition(
            true,
            "PodsPendingEviction",
            "1 pod needs to be evicted in 1 namespace."
        ),
        "pending for the hour"
    );
    let mut d = o.devices.clone();
    evict_and_delete(&mut d);
    assert_eq!(
        d.rule_condition("rule"),
        condition(
            false,
            "Completed",
            "1 pod evicted since starting the controller."
        )
    );
    assert_evicted_at(o, t0().plus_secs(3600), vec![rule_source("rule")]);
    o = outcome(&[], &[]);
    assert_eq!(o.devices.rule_condition("rule"), None, "an unknown rule");
}

fn pod_in(namespace: &str, name: &str, uid: &str) -> (DevicePod, Claim) {
    let uid = Uid::new(uid);
    let p = DevicePod {
        namespace: namespace.into(),
        name: name.into(),
        uid: uid.clone(),
        node: Some("worker".into()),
        claims: vec![PodClaim::Named(format!("{name}-claim"))],
        deleting: false,
    };
    let c = Claim {
        namespace: namespace.into(),
        name: format!("{name}-claim"),
        uid: Uid::new(&format!("{name}-claim-uid")),
        owner: Some(uid.clone()),
        allocation: Some(vec![allocated("instance", vec![])]),
        reserved_for: vec![Consumer::pod(name, uid)],
    };
    (p, c)
}

fn many_pods(second_namespace: &str) {
    let (p1, c1) = pod_in(NS, "pod-1", "uid-1");
    let (p2, c2) = pod_in(second_namespace, "pod-2", "uid-2");
    let mut o = outcome(
        &[],
        &each(vec![
            Ev::Rule(rule("rule", driver_selector(), no_execute())),
            Ev::Claim(c1),
            Ev::Pod(p1.clone()),
            Ev::Claim(c2),
            Ev::Pod(p2.clone()),
        ]),
    );
    assert_eq!(o.pending.len(), 2);
    let namespaces = if second_namespace == NS {
        "1 namespace"
    } else {
        "2 different namespaces"
    };
    assert_eq!(
        o.devices.rule_condition("rule"),
        condition(
            true,
            "PodsPendingEviction",
            &format!("2 pods need to be evicted in {namespaces}.")
        )
    );
    let mut after = o.devices.clone();
    evict_and_delete(&mut after);
    assert_eq!(
        after.rule_condition("rule"),
        condition(
            false,
            "Completed",
            "2 pods evicted since starting the controller."
        )
    );
    let mut fired = run(&mut o.devices, later());
    fired.sort();
    let mut want = vec![(t0(), p1.key()), (t0(), p2.key())];
    want.sort();
    assert_eq!(fired, want);
}

#[test]
fn evict_many_pods_many_namespaces() {
    many_pods("other");
}

#[test]
fn evict_many_pods_same_namespace() {
    many_pods(NS);
}

fn two_claims_pod() -> (DevicePod, Claim, Claim) {
    let mut p = pod();
    p.claims = vec![
        PodClaim::Named("claim-1".into()),
        PodClaim::Named("claim-2".into()),
    ];
    let c1 = claim_of("claim-1", vec![allocated("instance", vec![])]);
    let c2 = claim_of("claim-2", vec![allocated("instance-no-execute", vec![])]);
    (p, c1, c2)
}

#[test]
fn multiple_claims_same_rule() {
    let (p, c1, c2) = two_claims_pod();
    let o = outcome(
        &[],
        &each(vec![
            Ev::Rule(rule("rule", driver_selector(), no_execute())),
            Ev::Claim(c1),
            Ev::Claim(c2),
            Ev::Pod(p),
        ]),
    );
    assert_evicted_at(o, t0(), vec![rule_source("rule")]);
}

fn two_rules() -> (Rule, Rule) {
    let r1 = rule("rule-1", device_selector("instance"), no_execute());
    let mut t = no_execute();
    t.time_added = Some(t0().plus_secs(40));
    let r2 = rule("rule-2", device_selector("instance-no-execute"), t);
    (r1, r2)
}

#[test]
fn multiple_claims_different_rules_order_1() {
    let (p, c1, c2) = two_claims_pod();
    let (r1, r2) = two_rules();
    let o = outcome(
        &[],
        &[vec![
            Ev::Rule(r1),
            Ev::Rule(r2),
            Ev::Claim(c1),
            Ev::Claim(c2),
            Ev::Pod(p),
        ]],
    );
    assert_evicted_at(o, t0(), vec![rule_source("rule-1"), rule_source("rule-2")]);
}

#[test]
fn multiple_claims_different_rules_order_2() {
    let (p, c1, c2) = two_claims_pod();
    let (r1, r2) = two_rules();
    let o = outcome(
        &[],
        &[vec![
            Ev::Rule(r2),
            Ev::Claim(c2),
            Ev::Pod(p),
            Ev::Rule(r1),
            Ev::Claim(c1),
        ]],
    );
    assert_evicted_at(o, t0(), vec![rule_source("rule-1"), rule_source("rule-2")]);
}

#[test]
fn evict_pod_resourceclaim_again() {
    let o = outcome(
        &[
            Ev::Slice(slice_tainted()),
            Ev::Claim(claim()),
            Ev::Pod(pod()),
        ],
        &[vec![Ev::DelSlice("my-slice"), Ev::Slice(slice_tainted())]],
    );
    assert_eq!(o.cancel_events, vec![key()], "cancelled in between");
    assert_evicted_at(o, t0(), vec![slice_source("instance", 0)]);
}

#[test]
fn evict_pod_after_scheduling() {
    let mut unscheduled = pod();
    unscheduled.node = None;
    let o = outcome(
        &[
            Ev::Slice(slice_tainted()),
            Ev::Claim(claim()),
            Ev::Pod(unscheduled),
        ],
        &single(Ev::Pod(pod())),
    );
    assert_evicted_at(o, t0(), vec![slice_source("instance", 0)]);
}

#[test]
fn evict_pod_resourceclaim_unrelated_changes() {
    let mut more = slice_tainted();
    more.devices.push(device("other", vec![no_execute()]));
    let o = outcome(
        &[
            Ev::Slice(slice_tainted()),
            Ev::Claim(claim()),
            Ev::Pod(pod()),
        ],
        &each(vec![Ev::Slice(more), Ev::Claim(claim()), Ev::Pod(pod())]),
    );
    assert_eq!(o.cancel_events, vec![]);
    assert_evicted_at(o, t0(), vec![slice_source("instance", 0)]);
}

fn template_pod(status: Option<&str>) -> DevicePod {
    let mut p = pod();
    p.claims = vec![PodClaim::FromTemplate(status.map(str::to_owned))];
    p
}

#[test]
fn evict_pod_resourceclaimtemplate() {
    let o = outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(claim()),
            Ev::Pod(template_pod(Some("my-claim"))),
        ]),
    );
    assert_evicted_at(o, t0(), vec![slice_source("instance", 0)]);
}

#[test]
fn evict_pod_later() {
    let o = outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(tolerating(vec![exists("", Some(3600))])),
            Ev::Pod(pod()),
        ]),
    );
    assert_evicted_at(o, t0().plus_secs(3600), vec![slice_source("instance", 0)]);
}

#[test]
fn evict_pod_later_many() {
    let o = outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(tolerating(vec![
                exists("other-key", Some(20)),
                exists("", Some(60)),
                exists("", Some(30)),
            ])),
            Ev::Pod(pod()),
        ]),
    );
    assert_evicted_at(o, t0().plus_secs(30), vec![slice_source("instance", 0)]);
}

#[test]
fn evict_pod_toleration_mismatch() {
    let o = outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(tolerating(vec![exists("other-key", None)])),
            Ev::Pod(pod()),
        ]),
    );
    assert_evicted_at(o, t0(), vec![slice_source("instance", 0)]);
}

#[test]
fn no_evict_pod_toleration_forever() {
    assert_never(outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(tolerating(vec![exists("", None)])),
            Ev::Pod(pod()),
        ]),
    ));
}

#[test]
fn no_evict_pod_toleration_forever_many() {
    assert_never(outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(tolerating(vec![exists("", Some(60)), exists("", None)])),
            Ev::Pod(pod()),
        ]),
    ));
}

#[test]
fn evict_pod_partial_toleration() {
    let two = slice_named(
        "my-slice",
        1,
        vec![
            taint("key-1", "", "NoExecute"),
            taint("key-2", "", "NoExecute"),
        ],
    );
    let o = outcome(
        &[],
        &each(vec![
            Ev::Slice(two),
            Ev::Claim(tolerating(vec![exists("key-1", None)])),
            Ev::Pod(pod()),
        ]),
    );
    assert_evicted_at(o, t0(), vec![slice_source("instance", 1)]);
}

#[test]
fn evict_pod_many_taints() {
    let two = slice_named(
        "my-slice",
        1,
        vec![
            taint("key-1", "", "NoExecute"),
            taint("key-2", "", "NoExecute"),
        ],
    );
    let o = outcome(
        &[],
        &each(vec![
            Ev::Rule(rule(
                "rule-1",
                driver_selector(),
                taint("key-1", "", "NoExecute"),
            )),
            Ev::Rule(rule(
                "rule-2",
                driver_selector(),
                taint("key-2", "", "NoExecute"),
            )),
            Ev::Slice(two),
            Ev::Claim(tolerating(vec![
                exists("key-1", Some(60)),
                exists("key-2", Some(30)),
            ])),
            Ev::Pod(pod()),
        ]),
    );
    assert_evicted_at(
        o,
        t0().plus_secs(30),
        vec![
            rule_source("rule-1"),
            rule_source("rule-2"),
            slice_source("instance", 0),
            slice_source("instance", 1),
        ],
    );
}

#[test]
fn no_evict_pod_not_scheduled() {
    let mut unscheduled = pod();
    unscheduled.node = None;
    assert_never(outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(claim()),
            Ev::Pod(unscheduled),
        ]),
    ));
}

#[test]
fn no_evict_no_taint() {
    assert_never(outcome(
        &[],
        &each(vec![Ev::Slice(slice()), Ev::Claim(claim()), Ev::Pod(pod())]),
    ));
}

/// Upstream's `simpleSlice`: one untainted `instance`.
fn simple_slice() -> Slice {
    let mut s = slice();
    s.devices.truncate(1);
    s
}

#[test]
fn no_evict_no_taint_update() {
    let o = outcome(
        &[
            Ev::Slice(simple_slice()),
            Ev::Claim(claim()),
            Ev::Pod(pod()),
        ],
        &single(Ev::Slice(simple_slice())),
    );
    // The positive control: the same state, then the device tainted, evicts at once.
    let mut tainted = o.devices.clone();
    let mut s = simple_slice();
    s.devices[0].taints.push(no_execute());
    tainted.upsert_slice(s);
    assert_eq!(run(&mut tainted, later()), vec![(t0(), key())]);
    assert_never(o);
}

#[test]
fn no_evict_pod_resourceclaimtemplate_no_status() {
    assert_never(outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(claim()),
            Ev::Pod(template_pod(None)),
        ]),
    ));
}

#[test]
fn no_evict_pod_resourceclaimtemplate_no_claim() {
    // A status entry without a claim name: `adapters::device` reads it, like a missing entry,
    // as `FromTemplate(None)` (its tests pin that).
    let p = template_pod(None);
    assert_never(outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(claim()),
            Ev::Pod(p),
        ]),
    ));
}

#[test]
fn no_evict_other_device() {
    let mut renamed = slice_tainted();
    for d in &mut renamed.devices {
        d.name = format!("other-{}", d.name);
    }
    assert_never(outcome(
        &[],
        &each(vec![Ev::Slice(renamed), Ev::Claim(claim()), Ev::Pod(pod())]),
    ));
}

#[test]
fn no_evict_wrong_pod() {
    let mut wrong = pod();
    wrong.uid = Uid::new("other-uid");
    assert_never(outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(claim()),
            Ev::Pod(wrong),
        ]),
    ));
}

#[test]
fn evict_wrong_pod_replaced() {
    let mut wrong = pod();
    wrong.uid = Uid::new("other-uid");
    let o = outcome(
        &[
            Ev::Slice(slice_tainted()),
            Ev::Claim(claim()),
            Ev::Pod(wrong),
        ],
        &[vec![Ev::DelPod("my-pod"), Ev::Pod(pod())]],
    );
    assert_evicted_at(o, t0(), vec![slice_source("instance", 0)]);
}

fn pending_then(events: Vec<Vec<Ev>>, claim: Claim) -> Outcome {
    outcome(
        &[Ev::Slice(slice_tainted()), Ev::Claim(claim), Ev::Pod(pod())],
        &events,
    )
}

#[test]
fn cancel_eviction_remove_taint() {
    let o = pending_then(single(Ev::Slice(slice())), claim());
    assert_eq!(o.cancel_events, vec![key()]);
    assert_never(o);
}

#[test]
fn cancel_eviction_reduce_taint() {
    let reduced = slice_named(
        "my-slice",
        1,
        vec![taint("example.com/taint", "something", "NoSchedule")],
    );
    let o = pending_then(single(Ev::Slice(reduced)), claim());
    assert_eq!(o.cancel_events, vec![key()]);
    assert_never(o);
}

#[test]
fn ignore_none_effect() {
    let none = slice_named(
        "my-slice",
        1,
        vec![taint("example.com/taint", "something", "None")],
    );
    assert_never(outcome(
        &[Ev::Slice(none), Ev::Claim(claim()), Ev::Pod(pod())],
        &[],
    ));
}

#[test]
fn ignore_unknown_effect() {
    let unknown = slice_named(
        "my-slice",
        1,
        vec![taint("example.com/taint", "something", "SomeOtherEffect")],
    );
    assert_never(outcome(
        &[Ev::Slice(unknown), Ev::Claim(claim()), Ev::Pod(pod())],
        &[],
    ));
}

#[test]
fn eviction_change_taint() {
    let tolerated = Toleration {
        key: "example.com/taint".into(),
        operator: Operator::Equal,
        value: "something".into(),
        effect: Some(TaintEffect::NoExecute),
        toleration_seconds: Some(3600),
    };
    let changed = slice_named(
        "my-slice",
        1,
        vec![taint("example.com/taint", "something-else", "NoExecute")],
    );
    let before = pending_then(vec![], tolerating(vec![tolerated.clone()]));
    assert_eq!(
        before.pending,
        vec![(
            key(),
            DeviceEviction {
                at: t0().plus_secs(3600),
                reasons: vec![slice_source("instance", 0)]
            }
        )],
        "tolerated for an hour before the change"
    );
    let o = pending_then(single(Ev::Slice(changed)), tolerating(vec![tolerated]));
    assert_evicted_at(o, t0(), vec![slice_source("instance", 0)]);
}

#[test]
fn cancel_eviction_remove_taint_in_new_slice() {
    // Upstream's `sliceReplaced`: the device moves to a newer slice, untainted.
    let newer = slice_named("my-slice-updated", 2, vec![]);
    let o = pending_then(
        each(vec![Ev::DelSlice("my-slice"), Ev::Slice(newer)]),
        claim(),
    );
    assert_eq!(o.cancel_events, vec![key()]);
    assert_never(o);
}

#[test]
fn cancel_eviction_remove_slice() {
    let o = pending_then(single(Ev::DelSlice("my-slice")), claim());
    assert_eq!(o.cancel_events, vec![key()]);
    assert_never(o);
}

#[test]
fn cancel_eviction_pod_deletion() {
    let o = pending_then(
        single(Ev::DelPod("my-pod")),
        tolerating(vec![exists("", Some(60))]),
    );
    assert_eq!(o.cancel_events, vec![], "no event for a deleted pod");
    assert_never(o);
}

#[test]
fn no_evict_wrong_resourceclaim() {
    let mut other = claim();
    other.owner = Some(Uid::new("other-uid"));
    assert_never(outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(other),
            Ev::Pod(template_pod(Some("my-claim"))),
        ]),
    ));
}

#[test]
fn evict_wrong_resourceclaim_replaced() {
    let mut other = claim();
    other.owner = Some(Uid::new("other-uid"));
    other.uid = Uid::new("other-claim-uid");
    let o = outcome(
        &[
            Ev::Slice(slice_tainted()),
            Ev::Claim(other),
            Ev::Pod(template_pod(Some("my-claim"))),
        ],
        &[vec![Ev::DelClaim("my-claim"), Ev::Claim(claim())]],
    );
    assert_evicted_at(o, t0(), vec![slice_source("instance", 0)]);
}

#[test]
fn no_evict_resourceclaim_deallocated() {
    let mut deallocated = claim();
    deallocated.allocation = None;
    let o = pending_then(single(Ev::Claim(deallocated)), claim());
    assert_eq!(o.cancel_events, vec![key()]);
    assert_never(o);
}

#[test]
fn no_evict_resourceclaim_deleted() {
    let o = pending_then(single(Ev::DelClaim("my-claim")), claim());
    assert_eq!(o.cancel_events, vec![key()]);
    assert_never(o);
}

// Beyond upstream's table: the rules of §22.4 and §22.8 that no upstream case pins.

/// §22.8, quirk 3: a toleration with an empty effect does not count against a device taint,
/// although one with `NoExecute` does (the positive control).
#[test]
fn an_empty_effect_toleration_does_not_protect() {
    let mut any_effect = exists("", None);
    any_effect.effect = None;
    let o = outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(tolerating(vec![any_effect])),
            Ev::Pod(pod()),
        ]),
    );
    assert_evicted_at(o, t0(), vec![slice_source("instance", 0)]);
    assert_never(outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(tolerating(vec![exists("", None)])),
            Ev::Pod(pod()),
        ]),
    ));
}

/// §22.4: a negative `tolerationSeconds` counts as 0.
#[test]
fn negative_toleration_seconds_count_as_zero() {
    let o = outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(tolerating(vec![
                exists("", Some(-10)),
                exists("", Some(60)),
            ])),
            Ev::Pod(pod()),
        ]),
    );
    assert_evicted_at(o, t0(), vec![slice_source("instance", 0)]);
}

/// §22.4: unlike a node taint's deadline, a device eviction follows its taint: a rule whose
/// `timeAdded` moves later moves the pending eviction later.
#[test]
fn a_device_eviction_moves_with_its_taint() {
    let r = rule("rule", driver_selector(), no_execute());
    let mut moved = r.clone();
    moved.taint.time_added = Some(t0().plus_secs(100));
    let mut o = outcome(
        &[
            Ev::Rule(r),
            Ev::Claim(tolerating(vec![exists("", Some(60))])),
            Ev::Pod(pod()),
        ],
        &single(Ev::Rule(moved)),
    );
    assert_eq!(
        o.pending.first().map(|(_, e)| e.at),
        Some(t0().plus_secs(160))
    );
    assert_eq!(
        run(&mut o.devices, later()),
        vec![(t0().plus_secs(160), key())]
    );
}

/// §22.2: a claim reserved for two pods, the first gone: v1.36.3's walk skips the missing pod
/// and decides the second when the claim's time changes.
#[test]
fn a_claims_walk_skips_a_missing_pod() {
    let gone = Consumer::pod("gone", Uid::new("gone-uid"));
    let mut shared = tolerating(vec![exists("", Some(60))]);
    shared.owner = None;
    shared.reserved_for = vec![gone, Consumer::pod("my-pod", pod_uid())];
    let mut d = Devices::new();
    d.upsert_claim(shared);
    d.upsert_pod(pod());
    assert!(d.pending().is_empty(), "untainted");
    d.upsert_slice(slice_tainted());
    assert_eq!(
        d.pending().get(&key()).map(|e| e.at),
        Some(t0().plus_secs(60)),
        "decided past the missing pod"
    );
}

/// §22.5: an eviction that finds the pod gone (404, or another pod under the name) is not
/// counted for its rules, and the pod is not due again.
#[test]
fn a_pod_found_gone_is_not_counted_for_its_rules() {
    let r = rule("rule", driver_selector(), no_execute());
    let mut o = outcome(
        &[],
        &each(vec![Ev::Rule(r), Ev::Claim(claim()), Ev::Pod(pod())]),
    );
    assert_eq!(o.devices.due(t0()), vec![key()]);
    // The positive control: an eviction that deleted the pod counts.
    let mut deleted = o.devices.clone();
    deleted.evicted(&key());
    deleted.delete_pod(NS, "my-pod");
    assert_eq!(
        deleted.rule_condition("rule"),
        condition(
            false,
            "Completed",
            "1 pod evicted since starting the controller."
        )
    );
    let d = &mut o.devices;
    d.gone(&key());
    assert_eq!(d.due(later()), vec![], "not due again");
    assert_eq!(d.drain_actions(), vec![], "nothing to cancel");
    d.delete_pod(NS, "my-pod");
    assert_eq!(d.rule_condition("rule"), condition(false, "NotStarted", ""));
}

/// `docs/deviations.md` #21: a `tolerationSeconds` too large for Go's `Duration` wraps upstream
/// (it can evict at once); here it tolerates forever, as for node taints (#7). The largest
/// value that fits is honoured as a number.
#[test]
fn a_toleration_too_long_for_a_duration_tolerates_forever() {
    use noexecute_engine::toleration::MAX_TOLERATION_SECONDS;
    let o = outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(tolerating(vec![exists(
                "",
                Some(MAX_TOLERATION_SECONDS + 1),
            )])),
            Ev::Pod(pod()),
        ]),
    );
    assert_never(o);
    let o = outcome(
        &[],
        &each(vec![
            Ev::Slice(slice_tainted()),
            Ev::Claim(tolerating(vec![exists("", Some(MAX_TOLERATION_SECONDS))])),
            Ev::Pod(pod()),
        ]),
    );
    assert_eq!(
        o.pending.first().map(|(_, e)| e.at),
        Some(t0().plus_secs(MAX_TOLERATION_SECONDS))
    );
}

/// A pod that was evicted is not due again while it exists, even when its taints change; once
/// it is deleted, a pod under that name is decided afresh.
#[test]
fn an_evicted_pod_is_not_due_again() {
    let mut o = pending_then(vec![], claim());
    assert_eq!(run(&mut o.devices, later()), vec![(t0(), key())]);
    let d = &mut o.devices;
    d.upsert_slice(slice());
    d.upsert_slice(slice_tainted());
    assert!(d.pending().is_empty());
    // docs/deviations.md #22: upstream would record "Cancelling deletion" for the pod it has
    // already deleted, here, had its entry come back meanwhile.
    d.upsert_slice(slice());
    assert_eq!(d.drain_actions(), vec![], "no action for an evicted pod");
    d.upsert_slice(slice_tainted());
    d.delete_pod(NS, "my-pod");
    d.upsert_pod(pod());
    assert_eq!(d.pending().get(&key()).map(|e| e.at), Some(t0()));
}

fn none_rule() -> Rule {
    rule(
        "rule-none",
        driver_selector(),
        taint("example.com/taint", "something", "None"),
    )
}

const NOT_AGAIN: &str = "if the effect was NoExecute. This information will not be updated \
                         again. Recreate the DeviceTaintRule to trigger an update.";

#[test]
fn none_pod_rule() {
    let o = outcome(
        &[],
        &[vec![
            Ev::Slice(slice()),
            Ev::Claim(claim()),
            Ev::Pod(pod()),
            Ev::Rule(none_rule()),
        ]],
    );
    assert_eq!(
        o.devices.rule_condition("rule-none"),
        condition(
            false,
            "NoEffect",
            &format!(
                "3 published devices selected. 1 allocated device selected. 1 pod would be \
                 evicted in 1 namespace {NOT_AGAIN}"
            )
        )
    );
    assert_never(o);
}

fn none_many_pods(second_namespace: &str, namespaces: &str) {
    let (p1, c1) = pod_in(NS, "pod-1", "uid-1");
    let (p2, mut c2) = pod_in(second_namespace, "pod-2", "uid-2");
    if let Some(devices) = c2.allocation.as_mut() {
        devices.push(allocated("instance-no-execute", vec![]));
    }
    let o = outcome(
        &[],
        &[vec![
            Ev::Claim(c1),
            Ev::Pod(p1),
            Ev::Claim(c2),
            Ev::Pod(p2),
            Ev::Rule(none_rule()),
        ]],
    );
    assert_eq!(
        o.devices.rule_condition("rule-none"),
        condition(
            false,
            "NoEffect",
            &format!(
                "0 published devices selected. 3 allocated devices selected. 2 pods would be \
                 evicted in {namespaces} {NOT_AGAIN}"
            )
        )
    );
    assert_never(o);
}

#[test]
fn none_many_pods_many_namespaces() {
    none_many_pods("other", "2 different namespaces");
}

#[test]
fn none_many_pods_same_namespace() {
    none_many_pods(NS, "1 namespace");
}

/// Beyond upstream's table: a rule with another effect, and a pod being deleted, which a rule's
/// status does not count as pending (§22.7).
#[test]
fn other_effects_and_deleting_pods_in_a_rules_status() {
    let o = outcome(
        &[],
        &single(Ev::Rule(rule(
            "rule",
            driver_selector(),
            taint("k", "", "NoSchedule"),
        ))),
    );
    assert_eq!(
        o.devices.rule_condition("rule"),
        condition(
            false,
            "OtherEffect",
            "Eviction only happens for the NoExecute effect."
        )
    );
    let mut deleting = pod();
    deleting.deleting = true;
    let o = outcome(
        &[
            Ev::Rule(rule("rule", driver_selector(), no_execute())),
            Ev::Claim(claim()),
            Ev::Pod(pod()),
        ],
        &single(Ev::Pod(deleting)),
    );
    assert_eq!(
        o.devices.rule_condition("rule"),
        condition(false, "NotStarted", "")
    );
}

/// Beyond upstream's table: a `None` rule's preview counts the devices of the pool's newest
/// generation only, as upstream's `countTaintedDevices` does.
#[test]
fn a_previews_published_devices_are_the_newest_generations() {
    let mut newer = slice_named("newer-slice", 2, vec![]);
    newer.devices.truncate(1);
    let o = outcome(
        &[],
        &each(vec![
            Ev::Slice(slice()),
            Ev::Slice(newer),
            Ev::Rule(none_rule()),
        ]),
    );
    assert_eq!(
        o.devices.rule_condition("rule-none"),
        condition(
            false,
            "NoEffect",
            &format!(
                "1 published device selected. 0 allocated devices selected. 0 pods would be \
                 evicted in 0 different namespaces {NOT_AGAIN}"
            )
        )
    );
}

/// `docs/deviations.md` #23: a slice updated into another pool leaves the old one (upstream
/// keeps a stale copy there, whose taint goes on evicting).
#[test]
fn a_slice_that_changes_pools_leaves_the_old_one() {
    let mut moved = slice_tainted();
    moved.pool = "worker-2".into();
    let o = pending_then(single(Ev::Slice(moved)), claim());
    assert_eq!(o.cancel_events, vec![key()]);
    assert_never(o);
}

/// Not an upstream case: what `plan` asks before it previews a device taint or a rule. Only a
/// pool's newest generation publishes; a device only an older one names is told apart.
#[test]
fn publication_follows_the_newest_generation() {
    use noexecute_engine::device::Publication;
    let mut devices = Devices::new();
    devices.upsert_slice(slice_named("old", 1, vec![]));
    let mut newer = slice_named("new", 2, vec![]);
    newer.devices.retain(|d| d.name != "instance");
    devices.upsert_slice(newer);
    assert_eq!(
        devices.publication(DRIVER, POOL, "instance-no-schedule"),
        Publication::Current
    );
    assert_eq!(
        devices.publication(DRIVER, POOL, "instance"),
        Publication::Older
    );
    assert_eq!(
        devices.publication(DRIVER, POOL, "nothing"),
        Publication::Unknown
    );
    assert_eq!(
        devices.publication(DRIVER, "another-pool", "instance"),
        Publication::Unknown
    );
    let published: Vec<_> = devices.published().collect();
    assert_eq!(
        published,
        vec![
            (DRIVER, POOL, "instance-no-schedule"),
            (DRIVER, POOL, "instance-no-execute"),
        ]
    );
    devices.delete_slice("new");
    assert_eq!(
        devices.publication(DRIVER, POOL, "instance"),
        Publication::Current
    );
    assert_eq!(devices.published().count(), 3);
}
