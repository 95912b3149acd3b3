//! The checker can fail: a recorded history with no fault passes, and the same history with a
//! wrong, late, missed, duplicate, unfenced, brake, rate or excluded write planted in it fails
//! with exactly that kind. The histories are audit-log lines as kube-apiserver writes them
//! (RequestResponse bodies for nodes, pods and the Lease), parsed by the checker's own reader.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use noexecute_soak::audit::{Entry, parse_line};
use noexecute_soak::check::{Config, Kind, Report, check};
use noexecute_soak::history::{Controller, History};
use serde_json::{Value, json};

const S: i64 = 1_000_000;
const LEASE: &str = "kube-system/noexecute";

fn at(t: f64) -> String {
    let micros = (t * 1e6) as i64 + 1_800_000_000 * S;
    jiff::Timestamp::from_microsecond(micros)
        .map(|ts| ts.to_string())
        .unwrap_or_default()
}

#[derive(Default, Clone)]
struct Log(Vec<String>);

#[allow(clippy::too_many_arguments)]
fn line(
    t: f64,
    verb: &str,
    resource: &str,
    sub: &str,
    ns: &str,
    name: &str,
    agent: &str,
    code: u16,
    request: Option<Value>,
    response: Option<Value>,
) -> String {
    let mut v = json!({
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "RequestResponse",
        "stage": "ResponseComplete", "verb": verb,
        "user": {"username": "someone"}, "userAgent": agent,
        "objectRef": {"resource": resource, "subresource": sub, "namespace": ns, "name": name},
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": at(t - 0.01), "stageTimestamp": at(t),
    });
    if let Some(r) = request {
        v["requestObject"] = r;
    }
    if let Some(r) = response {
        v["responseObject"] = r;
    }
    v.to_string()
}

fn agent(replica: &str) -> String {
    format!("noexecute/0.1.0 ({replica})")
}

impl Log {
    fn node(&mut self, t: f64, name: &str, taints: &[(&str, f64)]) -> &mut Self {
        let taints: Vec<Value> = taints
            .iter()
            .map(|(k, added)| json!({"key": k, "effect": "NoExecute", "timeAdded": at(*added)}))
            .collect();
        let body = json!({"kind": "Node", "metadata": {"name": name, "labels": {"zone": "a"}},
                          "spec": {"taints": taints}});
        self.0.push(line(
            t,
            "patch",
            "nodes",
            "",
            "",
            name,
            "kubectl/v1.36.3",
            200,
            None,
            Some(body),
        ));
        self
    }

    fn pod(&mut self, t: f64, ns: &str, name: &str, node: &str, tolerations: Value) -> &mut Self {
        let body = json!({"kind": "Pod", "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
                          "spec": {"nodeName": node, "tolerations": tolerations}});
        self.0.push(line(
            t,
            "create",
            "pods",
            "",
            ns,
            name,
            "soak",
            201,
            None,
            Some(body),
        ));
        self
    }

    fn lease(&mut self, t: f64, replica: &str, holder: &str) -> &mut Self {
        let body = json!({"kind": "Lease", "spec": {"holderIdentity": holder}});
        self.0.push(line(
            t,
            "update",
            "leases",
            "",
            "kube-system",
            "noexecute",
            &agent(replica),
            200,
            None,
            Some(body),
        ));
        self
    }

    fn renewals(&mut self, from: f64, to: f64, replica: &str) -> &mut Self {
        let mut t = from;
        while t <= to {
            self.lease(t, replica, replica);
            t += 2.0;
        }
        self
    }

    fn mark(&mut self, t: f64, replica: &str, ns: &str, name: &str) -> &mut Self {
        self.0.push(line(
            t,
            "patch",
            "pods",
            "status",
            ns,
            name,
            &agent(replica),
            200,
            None,
            None,
        ));
        self
    }

    fn delete(&mut self, t: f64, replica: &str, ns: &str, name: &str) -> &mut Self {
        let body = json!({"kind": "Pod", "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"),
                          "deletionTimestamp": at(t)}});
        self.0.push(line(
            t,
            "delete",
            "pods",
            "",
            ns,
            name,
            &agent(replica),
            200,
            None,
            Some(body),
        ));
        self
    }

    /// A POST of the pod's `eviction` subresource, answered `code` (429: a budget refused).
    fn evict(&mut self, t: f64, replica: &str, ns: &str, name: &str, code: u16) -> &mut Self {
        self.0.push(line(
            t,
            "create",
            "pods",
            "eviction",
            ns,
            name,
            &agent(replica),
            code,
            None,
            None,
        ));
        self
    }

    fn event(&mut self, t: f64, replica: &str, ns: &str) -> &mut Self {
        self.0.push(line(
            t,
            "create",
            "events",
            "",
            ns,
            "ev",
            &agent(replica),
            201,
            None,
            None,
        ));
        self
    }

    fn entries(&self) -> Vec<Entry> {
        let mut out: Vec<Entry> = self
            .0
            .iter()
            .map(|l| parse_line(l).unwrap().unwrap())
            .collect();
        out.sort_by_key(|e| (e.completed, e.received));
        out
    }
}

/// Replica a leads until 40 s, b from 40 s. Node n1 is tainted k at 10 s and cleared at
/// 30 s; n2 is tainted at 45 s. p1 (no tolerations) goes at once, p2 (k for 10 s) at 20 s,
/// p3 (k forever) stays, p4 on n2 goes at once under b.
fn baseline() -> Log {
    let mut log = Log::default();
    log.renewals(0.0, 38.0, "a")
        .lease(40.0, "b", "b")
        .renewals(42.0, 70.0, "b");
    log.node(1.0, "n1", &[]).node(1.0, "n2", &[]);
    log.pod(2.0, "t", "p1", "n1", json!([]))
        .pod(2.0, "t", "p2", "n1", json!([{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 10}]))
        .pod(2.0, "t", "p3", "n1", json!([{"key": "k", "operator": "Exists"}]))
        .pod(2.0, "u", "p4", "n2", json!([]));
    log.node(10.0, "n1", &[("k", 10.0)]);
    log.event(10.4, "a", "t")
        .mark(10.5, "a", "t", "p1")
        .delete(10.6, "a", "t", "p1");
    log.event(20.2, "a", "t")
        .mark(20.3, "a", "t", "p2")
        .delete(20.4, "a", "t", "p2");
    log.node(30.0, "n1", &[]);
    log.node(45.0, "n2", &[("k", 45.0)]);
    log.event(45.3, "b", "u")
        .mark(45.4, "b", "u", "p4")
        .delete(45.5, "b", "u", "p4");
    log
}

fn config() -> Config {
    let mut cfg = Config::new(Controller::Noexecute, LEASE);
    cfg.renew_deadline_ms = 5_000;
    cfg.deadline_from_time_added = true;
    cfg
}

fn judge(log: &Log, cfg: &Config) -> Report {
    let history = History::build(&log.entries(), &cfg.controller, &cfg.lease).unwrap();
    check(&history, cfg)
}

fn only(report: &Report, kind: Kind, n: usize) {
    for k in Kind::ALL {
        let want = if k == kind { n } else { 0 };
        assert_eq!(report.count(k), want, "{} violations:\n{report}", k.name());
    }
}

#[test]
fn the_baseline_passes() {
    let r = judge(&baseline(), &config());
    assert_eq!(r.total(), 0, "{r}");
    assert_eq!(r.evictions, 3);
    assert_eq!(r.deadlines, 3, "{r}");
    assert_eq!(r.terms, 2);
    assert!(r.unresolved.is_empty(), "{r}");
}

#[test]
fn a_planted_wrong_eviction_is_found() {
    let mut log = baseline();
    // p3 tolerates k forever.
    log.mark(15.0, "a", "t", "p3").delete(15.1, "a", "t", "p3");
    let r = judge(&log, &config());
    // The mark and the delete are each wrong.
    only(&r, Kind::Wrong, 2);
    assert!(r.to_string().contains("first wrong: Mark of t/p3"), "{r}");
}

#[test]
fn an_early_eviction_is_wrong_too() {
    let mut log = baseline();
    log.0
        .retain(|l| !l.contains("\"name\":\"p2\"") || l.contains("\"create\""));
    log.mark(16.0, "a", "t", "p2").delete(16.1, "a", "t", "p2");
    let r = judge(&log, &config());
    only(&r, Kind::Wrong, 2);
}

#[test]
fn a_planted_late_eviction_is_found() {
    let mut log = baseline();
    log.0
        .retain(|l| !(l.contains("\"p2\"") && l.contains("\"delete\"")));
    log.delete(27.0, "a", "t", "p2");
    let r = judge(&log, &config());
    only(&r, Kind::Late, 1);
}

#[test]
fn a_missed_eviction_is_found() {
    let mut log = baseline();
    log.0
        .retain(|l| !(l.contains("\"p2\"") && l.contains("\"delete\"")));
    let r = judge(&log, &config());
    only(&r, Kind::Missed, 1);
}

#[test]
fn time_no_replica_could_act_excuses_lateness() {
    let mut log = baseline();
    log.0
        .retain(|l| !(l.contains("\"p2\"") && l.contains("\"delete\"")));
    log.delete(27.0, "a", "t", "p2");
    // a froze from 16 s to 28 s: its last renewal at 16 s let it act until 21 s.
    log.0
        .retain(|l| !(l.contains("\"leases\"") && l.contains("(a)")));
    log.renewals(0.0, 16.0, "a").renewals(28.0, 38.0, "a");
    let r = judge(&log, &config());
    assert_eq!(r.total(), 0, "{r}");
}

#[test]
fn a_planted_duplicate_is_found() {
    let mut log = baseline();
    log.delete(11.0, "a", "t", "p1");
    let r = judge(&log, &config());
    only(&r, Kind::Duplicate, 1);
}

#[test]
fn a_planted_unfenced_write_is_found() {
    let mut log = baseline();
    // a records an Event after b's first write (45.3 s) in b's newer term.
    log.event(46.0, "a", "t");
    let r = judge(&log, &config());
    only(&r, Kind::Unfenced, 1);
    // Before b's first write it is not a violation.
    let mut log = baseline();
    log.event(41.0, "a", "t");
    assert_eq!(judge(&log, &config()).total(), 0);
}

#[test]
fn a_start_under_the_brake_is_found() {
    // With two nodes, one tainted is 50 %: a 40 % brake holds from 10 s to 30 s, and p2's
    // start at 20.3 s (p1's at 10.5 s is within the slack of the brake's start) breaks it.
    let mut cfg = config();
    cfg.brake = Some((40.0, 1));
    let r = judge(&baseline(), &cfg);
    only(&r, Kind::Brake, 1);
    assert!(r.to_string().contains("t/p2"), "{r}");
    // The untaint at 30 s that lets the brake go is stamped when its response completes, and
    // a watcher may see it up to `early_ms` before: a start within that of the end is not
    // judged (seed 3, 1 h: a start 0.9 ms before the stamp, 1.5 ms after the controller saw
    // the untaint). Stretched here to reach p2's start at 20.3 s.
    cfg.early_ms = 9_800;
    assert_eq!(judge(&baseline(), &cfg).total(), 0);
    cfg.early_ms = 9_600;
    only(&judge(&baseline(), &cfg), Kind::Brake, 1);
}

#[test]
fn a_stale_view_excuses_a_start_under_the_brake_only_when_the_fault_hid_its_onset() {
    use noexecute_soak::faults::Fault;
    // The brake holds from 10 s to 30 s; a starts p2 at 20.3 s.
    let fault = |kind: &str, target: &str, from: i64, to: i64| Fault {
        kind: kind.into(),
        target: target.into(),
        start: 1_800_000_000 * S + from * S,
        end: 1_800_000_000 * S + to * S,
        disruptive: false,
    };
    let mut cfg = config();
    cfg.brake = Some((40.0, 1));
    // a's connection cut from 9 s to 18 s (and 5 s of recovery): what a saw at 20.3 s may
    // date from before the brake: excused. Frozen, the same.
    cfg.faults = vec![fault("proxy-cut", "a", 9, 18)];
    assert_eq!(judge(&baseline(), &cfg).total(), 0);
    cfg.faults = vec![fault("freeze", "a", 9, 18)];
    assert_eq!(judge(&baseline(), &cfg).total(), 0);
    // Only delayed: events still came, at most 5 s late, and the brake began 10.3 s before.
    cfg.faults = vec![fault("proxy-latency", "a", 9, 18)];
    only(&judge(&baseline(), &cfg), Kind::Brake, 1);
    // The plane restarting hides it from every replica.
    cfg.faults = vec![fault("apiserver-restart", "plane", 9, 18)];
    assert_eq!(judge(&baseline(), &cfg).total(), 0);
    // b's connection: a saw the brake.
    cfg.faults = vec![fault("proxy-cut", "b", 9, 18)];
    only(&judge(&baseline(), &cfg), Kind::Brake, 1);
    // Over and recovered before the start.
    cfg.faults = vec![fault("proxy-cut", "a", 9, 15)];
    only(&judge(&baseline(), &cfg), Kind::Brake, 1);
    // Begun after a had seen the brake for longer than the slack.
    cfg.faults = vec![fault("proxy-cut", "a", 16, 22)];
    only(&judge(&baseline(), &cfg), Kind::Brake, 1);
    // A Lease fault hides nothing.
    cfg.faults = vec![fault("lease-edit", "noexecute", 9, 18)];
    only(&judge(&baseline(), &cfg), Kind::Brake, 1);
}

#[test]
fn a_rate_limit_breach_is_found() {
    let mut cfg = config();
    cfg.eviction_rate = Some((0.01, 1.0));
    let r = judge(&baseline(), &cfg);
    assert_eq!(r.count(Kind::Rate), 1, "{r}");
    cfg.eviction_rate = Some((1.0, 1.0));
    assert_eq!(judge(&baseline(), &cfg).total(), 0);
}

#[test]
fn a_touched_excluded_pod_is_found() {
    let mut cfg = config();
    cfg.exclude_namespaces = vec!["u".into()];
    let r = judge(&baseline(), &cfg);
    // Its mark and its delete.
    only(&r, Kind::Excluded, 2);
}

#[test]
fn upstream_semantics_count_from_the_controller_not_time_added() {
    // n1's taint carries timeAdded 2 s, 8 s before the node write reached the log. With
    // restart-safe deadlines p2 is due at 12 s; counted from when the controller saw the taint
    // (upstream), at 20 s.
    let mut log = baseline();
    log.0
        .retain(|l| !(l.contains("\"n1\"") && l.contains("08:00:10Z")));
    log.node(10.0, "n1", &[("k", 2.0)]);
    let restart_safe = config();
    let mut upstream_like = restart_safe.clone();
    upstream_like.deadline_from_time_added = false;
    // The baseline's delete at 20.4 s: on time for upstream, late for restart-safe deadlines.
    assert_eq!(judge(&log, &upstream_like).total(), 0);
    only(&judge(&log, &restart_safe), Kind::Late, 1);
    // A delete at 13 s: on time for restart-safe deadlines, wrong (early) for upstream's.
    log.0
        .retain(|l| !l.contains("\"name\":\"p2\"") || l.contains("\"create\""));
    log.mark(12.9, "a", "t", "p2").delete(13.0, "a", "t", "p2");
    assert_eq!(judge(&log, &restart_safe).total(), 0);
    only(&judge(&log, &upstream_like), Kind::Wrong, 2);
}

#[test]
fn a_log_without_bodies_is_refused() {
    let mut log = Log::default();
    log.0.push(line(
        1.0, "create", "pods", "", "t", "p", "x", 201, None, None,
    ));
    let err = History::build(&log.entries(), &Controller::Noexecute, LEASE).err();
    assert!(err.is_some_and(|e| e.to_string().contains("NOEXECUTE_AUDIT=bodies")));
}

#[test]
fn unfenced_is_judged_against_every_newer_term() {
    // b takes over at 40 s and writes at 45.3 s; c takes over at 50 s and has not written.
    // a's Event at 52 s comes after b's first write in a term newer than a's own: unfenced,
    // although the latest term (c's) has no write yet.
    let mut log = baseline();
    log.lease(50.0, "c", "c");
    log.event(52.0, "a", "t");
    only(&judge(&log, &config()), Kind::Unfenced, 1);
    // A replica that never held the Lease is no better.
    let mut log = baseline();
    log.event(47.0, "z", "t");
    only(&judge(&log, &config()), Kind::Unfenced, 1);
}

#[test]
fn a_fault_excuses_lateness_only_when_it_hit_the_leader() {
    use noexecute_soak::faults::Fault;
    let mut log = baseline();
    log.0
        .retain(|l| !(l.contains("\"p2\"") && l.contains("\"delete\"")));
    log.delete(27.0, "a", "t", "p2");
    let fault = |target: &str| Fault {
        kind: "freeze".into(),
        target: target.into(),
        start: 1_800_000_000 * S + 19 * S,
        end: 1_800_000_000 * S + 26 * S,
        disruptive: false,
    };
    // b (a standby) frozen: p2 is still late.
    let mut cfg = config();
    cfg.faults = vec![fault("b")];
    only(&judge(&log, &cfg), Kind::Late, 1);
    // a (the leader) frozen from 19 s to 26 s: the deadline (20 s) plus 3 s of slack falls
    // after the thaw.
    cfg.faults = vec![fault("a")];
    assert_eq!(judge(&log, &cfg).total(), 0);
}

#[test]
fn upstreams_writes_are_node_controllers_deletions_and_disruption_patches() {
    let kcm = "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/unknown/node-controller";
    let mut log = Log::default();
    let body = json!({"kind": "Lease", "spec": {"holderIdentity": "host_1"}});
    for i in 0..30 {
        log.0.push(line(
            f64::from(i) * 2.0,
            "update",
            "leases",
            "",
            "kube-system",
            "kube-controller-manager",
            "kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/unknown/leader-election",
            200,
            None,
            Some(body.clone()),
        ));
    }
    log.node(1.0, "n1", &[]);
    log.pod(2.0, "t", "p1", "n1", json!([]));
    log.pod(2.0, "t", "p2", "n1", json!([]));
    // node-lifecycle marks p2 not ready (an update of the whole status): not a taint eviction.
    log.0.push(line(5.0, "update", "pods", "status", "t", "p2", kcm, 200,
        Some(json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "DisruptionTarget"}]}})), None));
    log.node(10.0, "n1", &[("k", 10.0)]);
    log.0.push(line(
        10.2,
        "patch",
        "pods",
        "status",
        "t",
        "p1",
        kcm,
        200,
        Some(json!({"status": {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}})),
        None,
    ));
    let gone =
        json!({"kind": "Pod", "metadata": {"name": "p1", "namespace": "t", "uid": "uid-p1"}});
    log.0.push(line(
        10.3,
        "delete",
        "pods",
        "",
        "t",
        "p1",
        kcm,
        200,
        None,
        Some(gone),
    ));
    let gone =
        json!({"kind": "Pod", "metadata": {"name": "p2", "namespace": "t", "uid": "uid-p2"}});
    log.0.push(line(
        10.4,
        "delete",
        "pods",
        "",
        "t",
        "p2",
        kcm,
        200,
        None,
        Some(gone),
    ));
    let mut cfg = Config::new(Controller::Upstream, "kube-system/kube-controller-manager");
    cfg.renew_deadline_ms = 5_000;
    let history = History::build(&log.entries(), &cfg.controller, &cfg.lease).unwrap();
    // The mark of p1 and both deletions are its; the Ready=False update is not.
    assert_eq!(history.writes.len(), 3, "{:?}", history.writes);
    let r = check(&history, &cfg);
    assert_eq!(r.evictions, 2);
    assert_eq!(r.total(), 0, "{r}");
}

/// Ten pods due at once on a node tainted at 50 s, under a limit of one eviction a second: the
/// controller starts them in its own order (here the reverse of the checker's), one a second.
fn backlog(last_at: f64) -> (Log, Config) {
    let mut log = baseline();
    log.node(1.0, "n3", &[]);
    for k in 0..10 {
        log.pod(2.0, "v", &format!("q{k}"), "n3", json!([]));
    }
    log.node(50.0, "n3", &[("k", 50.0)]);
    for (n, k) in (0..10).rev().enumerate() {
        let t = if k == 0 { last_at } else { 50.1 + n as f64 };
        log.mark(t, "b", "v", &format!("q{k}"))
            .delete(t + 0.01, "b", "v", &format!("q{k}"));
    }
    let mut cfg = config();
    cfg.eviction_rate = Some((1.0, 1.0));
    (log, cfg)
}

#[test]
fn any_order_within_a_backlog_is_on_time_but_not_past_its_end() {
    // q0 is ready first in the checker's order but started last, at the backlog's end.
    let (log, cfg) = backlog(59.1);
    let r = judge(&log, &cfg);
    assert_eq!(r.total(), 0, "{r}");
    assert_eq!(r.deadlines, 13, "{r}");
    // Started 4.4 s after the backlog's last start (59 s) and past the 3 s slack: late.
    let (log, cfg) = backlog(63.4);
    let r = judge(&log, &cfg);
    only(&r, Kind::Late, 1);
    assert!(r.to_string().contains("first late: v/q0"), "{r}");
}

/// A burst whose demand ended before its turn: n3 tainted from 50 s to 50.5 s under ten pods,
/// one eviction a second. Only q0's turn comes while the taint holds; the other nine were
/// cancelled while they waited and cost the queue nothing. w, on n4 tainted at 51 s, may start
/// at 51 s (plus the slack), not behind the burst's nine (60 s). Deleted at `w_deleted`.
fn burst(w_deleted: f64) -> (Log, Config) {
    let mut log = baseline();
    log.node(1.0, "n3", &[]).node(1.0, "n4", &[]);
    for k in 0..10 {
        log.pod(2.0, "v", &format!("q{k}"), "n3", json!([]));
    }
    log.pod(2.0, "v", "w", "n4", json!([]));
    log.node(50.0, "n3", &[("k", 50.0)]).node(50.5, "n3", &[]);
    log.node(51.0, "n4", &[("k", 51.0)]);
    log.mark(w_deleted, "b", "v", "w")
        .delete(w_deleted + 0.01, "b", "v", "w");
    let mut cfg = config();
    cfg.eviction_rate = Some((1.0, 1.0));
    (log, cfg)
}

#[test]
fn evictions_cancelled_while_they_waited_do_not_hold_up_the_queue() {
    let (log, cfg) = burst(53.5);
    let r = judge(&log, &cfg);
    assert_eq!(r.total(), 0, "{r}");
    // 6 s after it fell due: late, though the nine cancelled ones would have held the queue
    // until 60 s had they been charged.
    let (log, cfg) = burst(57.0);
    let r = judge(&log, &cfg);
    only(&r, Kind::Late, 1);
    assert!(r.to_string().contains("first late: v/w"), "{r}");
}

/// A backlog across a block: q0..q19 on n3 tainted at 50 s, one eviction a second, the leader
/// `b` frozen from 54 s to 60 s (more than the slack after they fell due, so they do not
/// simply join when it ends). It evicts q0..q3 before the freeze and, from `resumed` on,
/// q4..q19 a second apart.
fn backlog_across_a_block(resumed: f64) -> (Log, Config) {
    use noexecute_soak::faults::Fault;
    let mut log = baseline();
    log.node(1.0, "n3", &[]);
    for k in 0..20 {
        log.pod(2.0, "v", &format!("q{k}"), "n3", json!([]));
    }
    log.node(50.0, "n3", &[("k", 50.0)]);
    for k in 0..20 {
        let t = if k < 4 {
            50.1 + k as f64
        } else {
            resumed + (k - 4) as f64
        };
        log.mark(t, "b", "v", &format!("q{k}"))
            .delete(t + 0.01, "b", "v", &format!("q{k}"));
    }
    log.renewals(70.0, 90.0, "b");
    let mut cfg = config();
    cfg.eviction_rate = Some((1.0, 1.0));
    cfg.faults = vec![Fault {
        kind: "freeze".into(),
        target: "b".into(),
        start: 1_800_000_000 * S + 54_000_000,
        end: 1_800_000_000 * S + 60_000_000,
        disruptive: true,
    }];
    (log, cfg)
}

#[test]
fn a_block_pauses_the_queue_and_the_backlog_goes_on_after_it() {
    // At once after the thaw, one a second: the last (q19) at 75.1 s. The queue's turns that
    // fell in the freeze come after it, so the backlog ends at 75 s: on time. (Turns taken
    // as if nothing paused the queue end the backlog at 69 s, and q16..q19 were late.)
    let (log, cfg) = backlog_across_a_block(60.1);
    let r = judge(&log, &cfg);
    assert_eq!(r.total(), 0, "{r}");
    // Idle for 5 s after the thaw: q17, q18 and q19 (78.1 s to 80.1 s) are late.
    let (log, cfg) = backlog_across_a_block(65.1);
    let r = judge(&log, &cfg);
    only(&r, Kind::Late, 3);
}

/// p2's eviction (due at 20 s) refused by a budget from `first_refusal` on, and the pod
/// deleted at `deleted`, once --pdb-timeout (10 s) and a retry have passed. n1 stays tainted.
fn budget(deleted: f64, first_refusal: f64) -> Log {
    let mut log = baseline();
    log.0
        .retain(|l| !(l.contains("\"p2\"") && l.contains("\"delete\"")));
    // n1 stays tainted (its untaint at 30 s would cancel the eviction).
    let untaint = at(30.0);
    log.0
        .retain(|l| !(l.contains("\"nodes\"") && l.contains(&untaint)));
    let mut t = first_refusal;
    while t < 40.0 {
        log.evict(t, "a", "t", "p2", 429);
        t += 5.0;
    }
    log.delete(deleted, "b", "t", "p2");
    log
}

#[test]
fn a_budget_s_refusal_excuses_waiting_out_the_pdb_timeout_and_no_more() {
    let mut cfg = config();
    cfg.pdb_timeout_ms = Some(10_000);
    // Deleted 35 s after the first refusal: within timeout + retry cap + slack (50.5 s).
    let r = judge(&budget(55.0, 20.35), &cfg);
    assert_eq!(r.total(), 0, "{r}");
    // The same without budgets (delete mode): late.
    only(&judge(&budget(55.0, 20.35), &config()), Kind::Late, 1);
    // Past the budget's allowance (20.35 + 50.5 = 70.85 s): late.
    only(&judge(&budget(72.0, 20.35), &cfg), Kind::Late, 1);
    // A refusal that came after the eviction was already late excuses nothing.
    only(&judge(&budget(55.0, 27.0), &cfg), Kind::Late, 1);
}

/// The seed-11 finding the controller could not see: its connection slowed, it fired a
/// countdown from a `timeAdded` that node-lifecycle-controller had just re-stamped. n1's `k`
/// (from 10 s, p5 tolerates it 8 s: due 18 s) goes at 16 s and comes back at 16.5 s with a new
/// `timeAdded` (due 24.5 s); a deletes p5 at 21 s.
#[test]
fn a_delayed_view_excuses_a_wrong_eviction_only_when_nothing_told_the_writer() {
    use noexecute_soak::faults::Fault;
    let fault = |kind: &str, target: &str, from: f64, to: f64| Fault {
        kind: kind.into(),
        target: target.into(),
        start: 1_800_000_000 * S + (from * 1e6) as i64,
        end: 1_800_000_000 * S + (to * 1e6) as i64,
        disruptive: false,
    };
    let mut log = baseline();
    log.pod(
        3.0,
        "t",
        "p5",
        "n1",
        json!([{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 8}]),
    );
    log.node(16.0, "n1", &[]).node(16.5, "n1", &[("k", 16.5)]);
    // p2's countdown (10 s) from the new stamp: due 26.5 s, not 20 s.
    log.0
        .retain(|l| !l.contains("\"p2\"") || l.contains("\"create\""));
    log.mark(26.7, "a", "t", "p2").delete(26.8, "a", "t", "p2");
    log.mark(21.0, "a", "t", "p5").delete(21.1, "a", "t", "p5");
    let mut cfg = config();
    // No fault: the re-stamp was 4.5 s old, older than the slack: wrong (the mark and the
    // delete).
    only(&judge(&log, &cfg), Kind::Wrong, 2);
    // a's connection slowed from 15 s: a could not know its view lagged. Delayed, the same.
    for kind in ["proxy-slow", "proxy-latency"] {
        cfg.faults = vec![fault(kind, "a", 15.0, 22.0)];
        let r = judge(&log, &cfg);
        assert_eq!(r.count(Kind::Wrong), 0, "{kind}: {r}");
    }
    // Cut, or the plane restarting: a's watches failed, it knew its view was stale.
    for (kind, target) in [
        ("proxy-cut", "a"),
        ("proxy-reset", "a"),
        ("apiserver-restart", "plane"),
    ] {
        cfg.faults = vec![fault(kind, target, 15.0, 22.0)];
        assert_eq!(judge(&log, &cfg).count(Kind::Wrong), 2, "{kind}");
    }
    // The other replica's connection slowed: a saw the re-stamp.
    cfg.faults = vec![fault("proxy-slow", "b", 15.0, 22.0)];
    assert_eq!(judge(&log, &cfg).count(Kind::Wrong), 2);
    // Slowed only after the re-stamp was older than the slack.
    cfg.faults = vec![fault("proxy-slow", "a", 20.0, 22.0)];
    assert_eq!(judge(&log, &cfg).count(Kind::Wrong), 2);
}

/// The seed-11 pod exactly: created after the re-stamp, so its own stay never saw the old
/// `timeAdded`; a's lagging view of n1 did. n1's `k` from 10 s, re-stamped at 16.5 s; p6
/// (tolerates k 8 s) comes at 17 s (due 24.5 s); a deletes it at 18.2 s, as due from 10 s.
#[test]
fn a_delayed_view_may_judge_a_new_pod_on_its_node_as_it_was_before() {
    use noexecute_soak::faults::Fault;
    let mut log = baseline();
    log.node(16.0, "n1", &[]).node(16.5, "n1", &[("k", 16.5)]);
    log.0
        .retain(|l| !l.contains("\"p2\"") || l.contains("\"create\""));
    log.mark(26.7, "a", "t", "p2").delete(26.8, "a", "t", "p2");
    log.pod(
        17.0,
        "t",
        "p6",
        "n1",
        json!([{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 8}]),
    );
    log.mark(20.2, "a", "t", "p6").delete(20.3, "a", "t", "p6");
    let mut cfg = config();
    only(&judge(&log, &cfg), Kind::Wrong, 2);
    let slowed = |target: &str, from: f64| Fault {
        kind: "proxy-slow".into(),
        target: target.into(),
        start: 1_800_000_000 * S + (from * 1e6) as i64,
        end: 1_800_000_000 * S + 21 * S,
        disruptive: false,
    };
    cfg.faults = vec![slowed("a", 15.5)];
    let r = judge(&log, &cfg);
    assert_eq!(r.count(Kind::Wrong), 0, "{r}");
    // b's connection, or a's slowed only after the re-stamp: wrong.
    cfg.faults = vec![slowed("b", 15.5)];
    assert_eq!(judge(&log, &cfg).count(Kind::Wrong), 2);
    cfg.faults = vec![slowed("a", 19.8)];
    assert_eq!(judge(&log, &cfg).count(Kind::Wrong), 2);
}

/// A shard is judged on its own replicas' writes: the baseline judged as a shard of `a` alone
/// does not count p4's eviction, which only `b` made; as a shard of `a` and `b` it does.
#[test]
fn a_shard_is_judged_on_its_own_replicas_writes_only() {
    let cfg = config();
    let log = baseline();
    let judge_shard = |replicas: &[&str]| {
        let replicas: Vec<String> = replicas.iter().map(|r| r.to_string()).collect();
        let entries = noexecute_soak::drive::shard_entries(&log.entries(), &replicas);
        let history = History::build(&entries, &cfg.controller, &cfg.lease).unwrap();
        check(&history, &cfg)
    };
    let both = judge_shard(&["a", "b"]);
    assert_eq!(both.total(), 0, "{both}");
    assert_eq!(both.evictions, 3, "{both}");
    let r = judge_shard(&["a"]);
    assert_eq!(r.evictions, 2, "{r}");
    assert_eq!(r.terms, 1, "{r}");
}
