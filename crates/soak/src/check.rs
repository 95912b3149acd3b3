//! The judge: every write of the controller under test, and every deadline its pods had,
//! against the model of `docs/parity.md` (`rules`) over the recorded history (`history`).
//!
//! Kinds of violation:
//! - **wrong**: a pod deleted, evicted or marked while no untolerated or expired taint on its
//!   node justified it at any time in the `slack` before the request arrived (or, if a fault
//!   delayed the writer's watches without an error it could notice, before the fault began:
//!   `view_since` with `Hidden::Undetectable`);
//! - **late** / **missed**: a pod still on a node whose taints kept demanding its eviction,
//!   `slack` after its deadline, not counting time no replica could act (no valid Lease, a
//!   fault window and its recovery), the brake held, or the rate limits queued it (a queue
//!   that such time pauses, and that only evictions still demanded at their turn take a place
//!   in); late if the controller did evict it after that, missed if it never did;
//! - **duplicate**: two successful deletions or evictions of one pod UID by the controller;
//! - **unfenced**: a write by a replica that arrived after another replica's first write in a
//!   newer term (terms are the Lease's holders, in order);
//! - **brake**: an eviction started (the first write for a pod) while the brake held over the
//!   whole slack before it (and, if a fault held up the writer's view, over as long before as
//!   the fault may have delayed it: `view_since`);
//! - **rate**: more eviction starts in some window than the configured rate and burst allow;
//! - **excluded**: a write to a pod the exclusions protect.

use crate::audit::{Micros, show_time};
use crate::faults::Fault;
use crate::history::{Controller, History, Pod, Write, WriteKind};
use crate::rules::{Demand, Selector, demand};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

#[derive(Debug, Clone)]
pub struct Config {
    pub controller: Controller,
    /// The controller's Lease, `namespace/name`.
    pub lease: String,
    /// A Lease write lets its holder act for this long.
    pub renew_deadline_ms: i64,
    /// Watch delay and scheduling: how stale a decision may be, and how long after its
    /// deadline an eviction may come, with every replica able to act.
    pub slack_ms: i64,
    /// How much earlier than the model's deadline an eviction may come (`timeAdded` has whole
    /// seconds).
    pub early_ms: i64,
    pub deadline_from_time_added: bool,
    pub max_clock_skew_ms: i64,
    pub node_selector: Selector,
    pub exclude_namespaces: Vec<String>,
    pub exclude_selector: Selector,
    /// `--max-evictions-per-second` and its burst.
    pub eviction_rate: Option<(f64, f64)>,
    /// The client's QPS, burst, and requests per eviction: a queue the model allows for.
    pub qps: Option<(f64, f64, f64)>,
    /// `--brake-threshold` and `--brake-min-nodes`.
    pub brake: Option<(f64, usize)>,
    /// The nemesis's faults. Which of them kept the controller from acting is decided here
    /// (`fault_windows`), from the Lease's history, not by the driver.
    pub faults: Vec<Fault>,
    /// After a fault of the plane or of the acting replica's connection: time to relist.
    pub recovery_ms: i64,
    /// Eviction-API mode with `--pdb-timeout`: how long a refused eviction may wait before
    /// the controller deletes the pod anyway. None: the controller deletes (no budgets).
    pub pdb_timeout_ms: Option<i64>,
    /// The longest wait between two attempts at a refused eviction (the retry backoff's cap,
    /// with its jitter): the fallback DELETE comes at the first attempt after the timeout.
    pub retry_cap_ms: i64,
}

impl Config {
    pub fn new(controller: Controller, lease: &str) -> Config {
        Config {
            controller,
            lease: lease.to_string(),
            renew_deadline_ms: 10_000,
            slack_ms: 3_000,
            early_ms: 1_000,
            deadline_from_time_added: false,
            max_clock_skew_ms: 5_000,
            node_selector: Selector::default(),
            exclude_namespaces: Vec::new(),
            exclude_selector: Selector::default(),
            eviction_rate: None,
            qps: None,
            brake: None,
            faults: Vec::new(),
            recovery_ms: 5_000,
            pdb_timeout_ms: None,
            retry_cap_ms: 37_500,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Wrong,
    Late,
    Missed,
    Duplicate,
    Unfenced,
    Brake,
    Rate,
    Excluded,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Wrong,
        Kind::Late,
        Kind::Missed,
        Kind::Duplicate,
        Kind::Unfenced,
        Kind::Brake,
        Kind::Rate,
        Kind::Excluded,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Wrong => "wrong",
            Kind::Late => "late",
            Kind::Missed => "missed",
            Kind::Duplicate => "duplicate",
            Kind::Unfenced => "unfenced",
            Kind::Brake => "brake",
            Kind::Rate => "rate",
            Kind::Excluded => "excluded",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Violation {
    pub kind: Kind,
    pub at: Micros,
    /// One line: what happened.
    pub what: String,
    /// The history around it: the pod's node's versions and the controller's writes.
    pub history: String,
    /// For late ones: whether the controller restarted or failed over between the taint and
    /// the deadline (upstream's known restart-timing bug, `docs/parity.md` §20.1).
    pub after_restart: bool,
}

#[derive(Debug, Default)]
pub struct Report {
    pub controller: String,
    /// Successful deletions and evictions by the controller, each judged for wrongness.
    pub evictions: usize,
    /// Writes of the controller judged in all (pods and Events).
    pub writes: usize,
    /// Deadlines judged for lateness (a pod's stay on a node whose taints demanded its
    /// eviction).
    pub deadlines: usize,
    pub terms: usize,
    /// How often the brake held by the checker's own count, and for how long in all (s).
    pub brake_holds: usize,
    pub brake_held_s: f64,
    /// Time no replica could act, in all (s): outside every term, or a fault that hit the
    /// Lease holder or the plane.
    pub unavailable_s: f64,
    pub violations: Vec<Violation>,
    /// History entries the checker could not place (should be none).
    pub unresolved: BTreeMap<String, usize>,
}

impl Report {
    pub fn count(&self, kind: Kind) -> usize {
        self.violations.iter().filter(|v| v.kind == kind).count()
    }

    pub fn total(&self) -> usize {
        self.violations.len()
    }

    /// Adds another judgement of the same soak (another shard's).
    pub fn absorb(&mut self, other: Report) {
        self.evictions += other.evictions;
        self.writes += other.writes;
        self.deadlines += other.deadlines;
        self.terms += other.terms;
        self.brake_holds += other.brake_holds;
        self.brake_held_s += other.brake_held_s;
        self.unavailable_s += other.unavailable_s;
        self.violations.extend(other.violations);
        for (k, n) in other.unresolved {
            *self.unresolved.entry(k).or_default() += n;
        }
    }
}

/// One stretch of a pod's stay with the same demand.
#[derive(Debug, Clone, Copy)]
struct Seg {
    from: Micros,
    to: Micros,
    demand: Demand,
    watched: bool,
    /// The node did not exist: nothing changed for the controller (a deletion does not cancel
    /// evictions), so the demand before carries on.
    absent: bool,
}

/// A maximal stretch in which the node's taints kept demanding the pod's eviction.
#[derive(Debug, Clone)]
struct Run {
    start: Micros,
    end: Micros,
    segs: Vec<Seg>,
}

pub fn check(h: &History, cfg: &Config) -> Report {
    let mut report = Report {
        controller: cfg.controller.name().to_string(),
        unresolved: h.unresolved.clone(),
        ..Report::default()
    };
    let runs: Vec<Vec<Run>> = h.pods.iter().map(|p| runs_of(h, cfg, p)).collect();
    let terms = terms(h, cfg);
    report.terms = terms.len();
    let unavailable = unavailable(h, cfg);
    let brake = brake_intervals(h, cfg);
    // (An empty sum of f64 is -0.0; from 0.0 it prints as 0.)
    let seconds = |v: &[(Micros, Micros)]| {
        v.iter()
            .fold(0.0, |total, (a, b)| total + (b - a) as f64 / 1e6)
    };
    report.brake_holds = brake.len();
    report.brake_held_s = seconds(&brake);
    report.unavailable_s = seconds(&merge(unavailable.clone()));
    let mut blocked = unavailable.clone();
    blocked.extend(brake.iter().copied());
    let blocked = merge(blocked);
    let restarts: Vec<Micros> = terms.iter().map(|t| t.start).collect();

    // Wrong, excluded, duplicate.
    let mut deletions: HashMap<usize, Vec<&Write>> = HashMap::new();
    for w in &h.writes {
        report.writes += 1;
        let Some(i) = w.pod else { continue };
        let pod = &h.pods[i];
        if !matches!(
            w.kind,
            WriteKind::Delete | WriteKind::Evict | WriteKind::Mark
        ) {
            continue;
        }
        if excluded(cfg, pod) {
            report.violations.push(Violation {
                kind: Kind::Excluded,
                at: w.received,
                what: format!(
                    "{:?} of excluded pod {}/{} by {}",
                    w.kind, pod.namespace, pod.name, w.replica
                ),
                history: pod_history(h, pod, w.received),
                after_restart: false,
            });
        }
        if !w.ok() {
            continue;
        }
        if matches!(w.kind, WriteKind::Delete | WriteKind::Evict) {
            report.evictions += 1;
            // Deleted again: after the controller's own deletion, or after anyone else's that
            // was older than the slack (a watch could not have shown it yet).
            let again = deletions.get(&i).is_some_and(|d| !d.is_empty())
                || pod
                    .gone
                    .is_some_and(|g| g < w.received - cfg.slack_ms * 1000);
            deletions.entry(i).or_default().push(w);
            if again {
                report.violations.push(Violation {
                    kind: Kind::Duplicate,
                    at: w.received,
                    what: format!(
                        "{:?} of {}/{} (uid {}) by {} at {}: it was deleted already at {}",
                        w.kind,
                        pod.namespace,
                        pod.name,
                        pod.uid,
                        w.replica,
                        show_time(w.received),
                        pod.gone.map(show_time).unwrap_or_default()
                    ),
                    history: pod_history(h, pod, w.received),
                    after_restart: false,
                });
                continue;
            }
        }
        // A pod already leaving is judged as a duplicate (above), not again here.
        if pod.gone.is_some_and(|g| g < w.received) {
            continue;
        }
        let seen = view_since(h, cfg, &w.replica, w.received, Hidden::Undetectable);
        // A view that lagged further than the slack may have judged a new pod on its node as
        // it was before the pod came.
        let lagged = (seen < w.received - cfg.slack_ms * 1000)
            .then(|| runs_in(segments_from(h, cfg, pod, seen)));
        if !justified(
            cfg,
            pod,
            lagged.as_deref().unwrap_or(&runs[i]),
            w.received,
            seen,
        ) {
            report.violations.push(Violation {
                kind: Kind::Wrong,
                at: w.received,
                what: format!(
                    "{:?} of {}/{} (uid {}) by {} at {}: nothing on node {} demanded it in the {} ms before (since {})",
                    w.kind,
                    pod.namespace,
                    pod.name,
                    pod.uid,
                    w.replica,
                    show_time(w.received),
                    pod.node.as_deref().unwrap_or("(none)"),
                    cfg.slack_ms,
                    show_time(seen)
                ),
                history: pod_history(h, pod, w.received),
                after_restart: false,
            });
        }
    }

    // Late and missed. A run is ready when its deadline has come (not before the pod did)
    // and some replica can act; the rate limits then start the ready ones in order.
    let mut acted_at: HashMap<usize, Micros> = HashMap::new();
    for w in h.writes.iter().filter(|w| w.ok()) {
        if let Some(i) = w.pod
            && matches!(w.kind, WriteKind::Delete | WriteKind::Evict)
        {
            acted_at
                .entry(i)
                .and_modify(|t| *t = (*t).min(w.received))
                .or_insert(w.received);
        }
    }
    // Evictions a budget refused (the Eviction API's 429, or the 500, 403 and 409 noexecute
    // also retries): by pod, the first refusal.
    let mut refused_at: HashMap<usize, Micros> = HashMap::new();
    if cfg.pdb_timeout_ms.is_some() {
        for w in &h.writes {
            if let Some(i) = w.pod
                && w.kind == WriteKind::Evict
                && matches!(w.code, 429 | 500 | 403 | 409)
            {
                refused_at
                    .entry(i)
                    .and_modify(|t| *t = (*t).min(w.received))
                    .or_insert(w.received);
            }
        }
    }
    let mut ready: Vec<(Micros, Micros, usize, usize)> = Vec::new();
    for (i, pod_runs) in runs.iter().enumerate() {
        if excluded(cfg, &h.pods[i]) {
            continue;
        }
        for (r, run) in pod_runs.iter().enumerate() {
            if let Some(due) = due(cfg, run)
                && due < run.end
            {
                // A deadline from timeAdded can fall before the pod came: due when it comes.
                let due = due.max(run.start);
                ready.push((ready_at(due, cfg.slack_ms * 1000, &blocked), due, i, r));
            }
        }
    }
    ready.sort();
    // Only an eviction still demanded when its turn comes (or carried out) takes its place in
    // the queue: one whose demand ended first (a taint that came and went in a burst, the pod
    // deleted by someone else) was cancelled while it waited, and costs the limits nothing. Charging it would let the queue run ahead of the
    // controller for the rest of the soak and push later allowances past its end, unjudged.
    let mut queue = Queue::new(cfg);
    let mut charged = vec![false; ready.len()];
    let queued: Vec<Micros> = ready
        .iter()
        .enumerate()
        .map(|(k, &(at, _, i, r))| {
            let run = &runs[i][r];
            let mut trial = queue.clone();
            let start = trial.take_unblocked(at, &blocked);
            // Its run ended in the controller's eviction: that took its place, whenever.
            let evicted = acted_at
                .get(&i)
                .is_some_and(|&a| a >= run.start && a <= run.end);
            if start < run.end || evicted {
                queue = trial;
                charged[k] = true;
            }
            start
        })
        .collect();
    // The order within a backlog is the controller's (deadline order, which with deadlines
    // from timeAdded is not the order in which evictions became ready): an eviction may wait
    // for any other of its backlog. So each may start as late as the backlog's last start.
    // A backlog goes on while the next eviction in the queue is ready before the previous
    // one started.
    let mut backlog_end = queued.clone();
    let in_queue: Vec<usize> = (0..ready.len()).filter(|&k| charged[k]).collect();
    for w in in_queue.windows(2).rev() {
        let (k, next) = (w[0], w[1]);
        if ready[next].0 <= queued[k] {
            backlog_end[k] = backlog_end[next];
        }
    }
    for (k, (_, due, i, r)) in ready.into_iter().enumerate() {
        let pod = &h.pods[i];
        let run = &runs[i][r];
        let start = backlog_end[k];
        let mut allowed = advance(start, cfg.slack_ms * 1000, &blocked);
        // A budget refused it in time: it may wait out --pdb-timeout, then the next retry
        // deletes it. A budget is a wait the operator asked for, not lateness.
        if let (Some(timeout), Some(&refused)) = (cfg.pdb_timeout_ms, refused_at.get(&i))
            && refused <= allowed
        {
            allowed = allowed.max(advance(
                refused,
                (timeout + cfg.retry_cap_ms + cfg.slack_ms) * 1000,
                &blocked,
            ));
        }
        if allowed > h.end {
            continue; // the soak ended before the deadline plus its allowance
        }
        // The node deleted between the deadline and the allowance: the pod is orphaned and
        // the pod garbage collector's. noexecute's stale-cache guard, when it re-reads the
        // node for an eviction a pod event decided, finds it gone and drops the eviction;
        // evictions a timer fired go ahead (§20.9). Not judged.
        if run
            .segs
            .iter()
            .any(|s| s.absent && s.to > due && s.from < allowed)
        {
            continue;
        }
        report.deadlines += 1;
        let acted = acted_at.get(&i).copied();
        let left = acted.into_iter().chain(pod.gone).min();
        if left.is_some_and(|t| t <= allowed) || run.end <= allowed {
            continue;
        }
        let by_us = acted.is_some();
        let kind = if by_us { Kind::Late } else { Kind::Missed };
        let after_restart = restarts.iter().any(|&t| t > run.start && t <= allowed);
        report.violations.push(Violation {
            kind,
            at: allowed,
            what: format!(
                "{}/{} (uid {}) on {}: due at {} (demanded since {}), allowed until {}, {}",
                pod.namespace,
                pod.name,
                pod.uid,
                pod.node.as_deref().unwrap_or("(none)"),
                show_time(due),
                show_time(run.start),
                show_time(allowed),
                match acted {
                    Some(t) => format!("evicted at {}", show_time(t)),
                    None => match pod.gone {
                        Some(t) =>
                            format!("never evicted by the controller (left at {})", show_time(t)),
                        None => "never evicted".to_string(),
                    },
                }
            ),
            history: pod_history(h, pod, allowed),
            after_restart,
        });
    }

    // Unfenced: a write received after the first write, in a newer term than the writer's
    // own latest, of another replica.
    if cfg.controller == Controller::Noexecute {
        for w in &h.writes {
            let own = terms
                .iter()
                .filter(|t| t.replica == w.replica && t.start <= w.received)
                .map(|t| t.start)
                .max()
                .unwrap_or(Micros::MIN);
            let newer = terms.iter().find(|t| {
                t.start > own
                    && t.replica != w.replica
                    && t.first_write.is_some_and(|f| f < w.received)
            });
            if let Some(term) = newer {
                report.violations.push(Violation {
                    kind: Kind::Unfenced,
                    at: w.received,
                    what: format!(
                        "{:?} {}/{} by {} at {}, after {} (term from {}) first wrote at {}",
                        w.kind,
                        w.namespace,
                        w.name,
                        w.replica,
                        show_time(w.received),
                        term.holder,
                        show_time(term.start),
                        term.first_write.map(show_time).unwrap_or_default()
                    ),
                    history: lease_history(h, w.received),
                    after_restart: false,
                });
            }
        }
    }

    // Policies: the brake and the rate limit, over eviction starts.
    let starts = starts(h);
    // The log stamps the node write that lets the brake go when its response completes, and
    // watchers may see it up to `early` before: a start that close to the end is not judged.
    let early = cfg.early_ms * 1000;
    for &(t, i, replica) in &starts {
        let seen = view_since(h, cfg, replica, t, Hidden::Any);
        if brake.iter().any(|&(a, b)| a <= seen && t + early < b) {
            let pod = &h.pods[i];
            report.violations.push(Violation {
                kind: Kind::Brake,
                at: t,
                what: format!(
                    "eviction of {}/{} started at {} while the brake held",
                    pod.namespace,
                    pod.name,
                    show_time(t)
                ),
                history: pod_history(h, pod, t),
                after_restart: false,
            });
        }
    }
    // Each process has its own bucket (a new leader starts with a full burst); requests
    // reach the API server with up to a second of network jitter (the proxy faults).
    if let Some((rate, burst)) = cfg.eviction_rate.filter(|(rate, _)| *rate > 0.0) {
        let mut by_replica: BTreeMap<&str, Vec<Micros>> = BTreeMap::new();
        for &(t, _, replica) in &starts {
            by_replica.entry(replica).or_default().push(t);
        }
        for (replica, times) in by_replica {
            if let Some((a, b, n)) = rate_exceeded(&times, rate, burst, 1_000_000) {
                report.violations.push(Violation {
                    kind: Kind::Rate,
                    at: b,
                    what: format!(
                        "{replica} started {n} evictions between {} and {}: more than {burst} + {rate}/s allows",
                        show_time(a),
                        show_time(b)
                    ),
                    history: String::new(),
                    after_restart: false,
                });
            }
        }
    }
    report.violations.sort_by_key(|v| (v.at, v.kind));
    // Only the first of each kind is printed with its history.
    let mut seen = std::collections::HashSet::new();
    for v in &mut report.violations {
        if !seen.insert(v.kind) {
            v.history.clear();
        }
    }
    report
}

fn excluded(cfg: &Config, pod: &Pod) -> bool {
    cfg.exclude_namespaces.contains(&pod.namespace)
        || (!cfg.exclude_selector.is_empty() && cfg.exclude_selector.matches(pod.labels.as_ref()))
}

/// The pod's stay on its node in stretches of equal demand.
fn segments(h: &History, cfg: &Config, pod: &Pod) -> Vec<Seg> {
    segments_from(h, cfg, pod, Micros::MAX)
}

/// The pod's segments, from its binding or from `from` if that is earlier: what its node
/// demanded of its tolerations before it was bound (a writer whose view of the node lagged
/// may have judged a new pod on the node as it was before).
fn segments_from(h: &History, cfg: &Config, pod: &Pod, from: Micros) -> Vec<Seg> {
    let (Some(node), Some(bound)) = (pod.node.as_deref(), pod.bound) else {
        return Vec::new();
    };
    let bound = bound.min(from);
    let end = pod.gone.unwrap_or(h.end);
    if end <= bound {
        return Vec::new();
    }
    let mut cuts = vec![bound];
    if let Some(versions) = h.nodes.get(node) {
        cuts.extend(
            versions
                .iter()
                .map(|v| v.at)
                .filter(|&t| t > bound && t < end),
        );
    }
    cuts.push(end);
    let mut out: Vec<Seg> = Vec::new();
    for pair in cuts.windows(2) {
        let (from, to) = (pair[0], pair[1]);
        let seg = match h.node_at(node, from).filter(|v| v.exists) {
            Some(v) => Seg {
                from,
                to,
                demand: demand(&v.taints, &pod.tolerations),
                watched: cfg.node_selector.matches(v.labels.as_ref()),
                absent: false,
            },
            None => {
                let before = out.last().copied();
                Seg {
                    from,
                    to,
                    demand: before.map_or(Demand::Stay, |s| s.demand),
                    watched: before.is_some_and(|s| s.watched),
                    absent: true,
                }
            }
        };
        match out.last_mut() {
            Some(last)
                if last.demand == seg.demand
                    && last.watched == seg.watched
                    && last.absent == seg.absent =>
            {
                last.to = to;
            }
            _ => out.push(seg),
        }
    }
    out
}

fn runs_of(h: &History, cfg: &Config, pod: &Pod) -> Vec<Run> {
    runs_in(segments(h, cfg, pod))
}

fn runs_in(segments: Vec<Seg>) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    let mut current: Option<Run> = None;
    for seg in segments {
        let demanding = seg.watched && seg.demand != Demand::Stay;
        if demanding {
            match current.as_mut() {
                Some(run) => {
                    run.end = seg.to;
                    run.segs.push(seg);
                }
                None => {
                    current = Some(Run {
                        start: seg.from,
                        end: seg.to,
                        segs: vec![seg],
                    });
                }
            }
        } else if let Some(run) = current.take() {
            runs.push(run);
        }
    }
    runs.extend(current);
    runs
}

/// When a countdown that began at `start` for a limit set by a taint added at `added` began,
/// as the configured deadline mode counts it.
fn anchor(cfg: &Config, start: Micros, seen: Micros, added: Option<Micros>) -> Micros {
    match added {
        Some(a) if cfg.deadline_from_time_added && a <= seen + cfg.max_clock_skew_ms * 1000 => {
            a.min(start)
        }
        _ => start,
    }
}

/// The model's deadline for a run: an untolerated taint means at once; otherwise the first
/// countdown stands (it never moves, `docs/parity.md` §8), unless an untolerated taint comes
/// before it runs out.
fn due(cfg: &Config, run: &Run) -> Option<Micros> {
    let first = run.segs.first()?;
    let mut due = match first.demand {
        Demand::Now => first.from,
        Demand::After { limit_ms, added } => {
            anchor(cfg, run.start, first.from, added) + limit_ms * 1000
        }
        Demand::Stay => return None,
    };
    for seg in &run.segs[1..] {
        if seg.from >= due {
            break;
        }
        if seg.demand == Demand::Now && !seg.absent {
            due = due.min(seg.from);
        }
    }
    Some(due)
}

/// Whether an eviction of `pod` requested at `t` had a reason: some run of its stay that
/// reached into what the writer may still have been seeing (`seen`: the slack before `t`, or
/// earlier under a fault that delayed its view unannounced) had, by `t`, an untolerated taint
/// or a countdown (any of its countdowns: the lenient reading) that had run out.
fn justified(cfg: &Config, pod: &Pod, runs: &[Run], t: Micros, seen: Micros) -> bool {
    // The log stamps a write when its response is complete; watchers may have seen it a
    // little before, so a demand may begin up to `early` after the request that follows it.
    let early = cfg.early_ms * 1000;
    runs.iter()
        .filter(|r| r.start <= t + early && r.end >= seen)
        .any(|run| earliest_due(cfg, run, t + early) <= t + early)
        && pod.bound.is_some_and(|b| b <= t)
}

/// The earliest an eviction in `run` could be due by `t`: the model's deadline (`due`), or a
/// countdown that any later limit would have run out, each limit counted from when it began
/// to apply without a break (a restart may count a shortened limit from its taint, and the
/// checker does not call that early).
fn earliest_due(cfg: &Config, run: &Run, t: Micros) -> Micros {
    let mut best = due(cfg, run).unwrap_or(Micros::MAX);
    let mut since: Option<(i64, Micros)> = None;
    for s in run.segs.iter().filter(|s| s.from <= t) {
        match s.demand {
            Demand::Now => best = best.min(s.from),
            Demand::After { limit_ms, added } => {
                let start = match since {
                    Some((limit, from)) if limit == limit_ms => from,
                    _ => s.from,
                };
                since = Some((limit_ms, start));
                best = best.min(anchor(cfg, start, s.from, added) + limit_ms * 1000);
            }
            Demand::Stay => since = None,
        }
    }
    best
}

/// Each pod's first eviction write (mark, eviction or delete), with the pod and the replica
/// that wrote it: the starts the brake and the rate limits govern.
fn starts(h: &History) -> Vec<(Micros, usize, &str)> {
    let mut first: HashMap<usize, (Micros, &str)> = HashMap::new();
    for w in &h.writes {
        if let Some(i) = w.pod
            && matches!(
                w.kind,
                WriteKind::Delete | WriteKind::Evict | WriteKind::Mark
            )
        {
            let e = first.entry(i).or_insert((w.received, w.replica.as_str()));
            if w.received < e.0 {
                *e = (w.received, w.replica.as_str());
            }
        }
    }
    let mut out: Vec<(Micros, usize, &str)> =
        first.into_iter().map(|(i, (t, r))| (t, i, r)).collect();
    out.sort();
    out
}

/// The first window in which more starts came than `burst + rate × (window + jitter)`.
fn rate_exceeded(
    times: &[Micros],
    rate: f64,
    burst: f64,
    jitter: Micros,
) -> Option<(Micros, Micros, usize)> {
    for j in 0..times.len() {
        for i in (0..=j).rev() {
            let n = j - i + 1;
            let window = (times[j] - times[i] + jitter) as f64 / 1e6;
            if n as f64 > burst + rate * window + 1e-9 {
                return Some((times[i], times[j], n));
            }
            // Once the window is long enough for every start before it, no earlier i fails.
            if burst + rate * window > times.len() as f64 {
                break;
            }
        }
    }
    None
}

struct Term {
    /// The Lease's holder identity.
    holder: String,
    /// Whose writes are this term's (the holder; upstream: the one manager).
    replica: String,
    start: Micros,
    first_write: Option<Micros>,
}

/// The Lease's holders in order: a term starts with each successful write that names another
/// holder than the last (or re-creates a deleted Lease).
fn terms(h: &History, cfg: &Config) -> Vec<Term> {
    let mut out: Vec<Term> = Vec::new();
    let mut last: Option<String> = None;
    for l in h.leases.iter().filter(|l| l.ok) {
        match l.holder.clone() {
            None => last = None,
            Some(holder) if holder.is_empty() => last = None,
            Some(holder) => {
                if last.as_deref() != Some(holder.as_str()) || l.verb == "create" {
                    out.push(Term {
                        replica: match cfg.controller {
                            Controller::Upstream => l.replica.clone(),
                            Controller::Noexecute => holder.clone(),
                        },
                        holder: holder.clone(),
                        start: l.completed,
                        first_write: None,
                    });
                }
                last = Some(holder);
            }
        }
    }
    let mut first: HashMap<&str, Vec<Micros>> = HashMap::new();
    for w in &h.writes {
        first
            .entry(w.replica.as_str())
            .or_default()
            .push(w.received);
    }
    for list in first.values_mut() {
        list.sort_unstable();
    }
    for term in &mut out {
        term.first_write = first.get(term.replica.as_str()).and_then(|list| {
            let i = list.partition_point(|&t| t < term.start);
            list.get(i).copied()
        });
    }
    out
}

/// When no replica could act: outside every Lease write's renew deadline, and in the windows
/// of the faults that hit the plane or the replica holding the Lease (`fault_windows`).
fn unavailable(h: &History, cfg: &Config) -> Vec<(Micros, Micros)> {
    let mut covered: Vec<(Micros, Micros)> = h
        .leases
        .iter()
        .filter(|l| l.ok && l.verb != "delete")
        .filter(|l| match cfg.controller {
            Controller::Upstream => l.holder.is_some(),
            Controller::Noexecute => l.holder.as_deref() == Some(l.replica.as_str()),
        })
        .map(|l| (l.completed, l.completed + cfg.renew_deadline_ms * 1000))
        .collect();
    covered = merge(covered);
    let mut out = Vec::new();
    let mut t = h.start;
    for &(a, b) in &covered {
        if a > t {
            out.push((t, a));
        }
        t = t.max(b);
    }
    if t < h.end {
        out.push((t, h.end));
    }
    out.extend(fault_windows(h, cfg));
    merge(out)
}

/// The faults that kept the controller from acting, as windows:
/// - the plane's (kube-apiserver, etcd) and the Lease's, always, with `recovery_ms` after;
/// - a replica's (killed, stopped, frozen, its connection cut or slowed) only if that replica
///   held the Lease during the fault (a successful renewal naming it within a renew deadline
///   of the window): a killed or stopped one until it could no longer have renewed, a frozen
///   one while frozen, a connection until `recovery_ms` after it healed.
///
/// Against upstream the one manager is always the acting replica.
pub fn fault_windows(h: &History, cfg: &Config) -> Vec<(Micros, Micros)> {
    let renew = cfg.renew_deadline_ms * 1000;
    let recovery = cfg.recovery_ms * 1000;
    let held = |target: &str, a: Micros, b: Micros| {
        cfg.controller == Controller::Upstream
            || h.leases.iter().any(|l| {
                l.ok && l.completed >= a - renew
                    && l.completed <= b
                    && l.holder.as_deref().is_some_and(|holder| {
                        holder
                            .strip_prefix(target)
                            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['_', '-']))
                    })
            })
    };
    cfg.faults
        .iter()
        .filter_map(|f| match f.kind.as_str() {
            "kill" | "term" => {
                held(&f.target, f.start, f.end).then_some((f.start, f.end.max(f.start + renew)))
            }
            "freeze" => held(&f.target, f.start, f.end).then_some((f.start, f.end)),
            k if k.starts_with("proxy-") => {
                held(&f.target, f.start, f.end).then_some((f.start, f.end + recovery))
            }
            // Another shard's Lease: nothing to this one.
            "lease-delete" | "lease-edit"
                if f.target != cfg.lease.rsplit('/').next().unwrap_or_default() =>
            {
                None
            }
            // The plane is back when kube-apiserver serves writes again: after an etcd restart
            // it takes seconds to reconnect, after the restarted process is healthy.
            _ => {
                let i = h.served.partition_point(|&t| t < f.end);
                let back = h.served.get(i).copied().unwrap_or(f.end).max(f.end);
                Some((f.start, back + recovery))
            }
        })
        .collect()
}

/// Which faults may have held up a replica's view.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Hidden {
    /// Every fault that stopped or delayed what it sees (the brake binds a replica only from
    /// what it could have seen).
    Any,
    /// Only the faults that delay its watches without an error: a connection slowed or
    /// delayed. A replica is told of the others (a frozen one by its lapsed term, a cut or
    /// reset connection and a restarting plane by failing watches) and must not act on a
    /// view it knows is stale; a wrong eviction is excused by these alone.
    Undetectable,
}

/// The oldest moment whose nodes `replica` may still have been acting on at `t`: `slack`
/// before it. While a fault stopped what that replica sees (it was frozen, its connection cut
/// or slowed to a trickle, the plane restarting) and `recovery` after, `slack` before the fault
/// began: a watch delivers what it buffered only when the fault ends. While its connection was
/// delayed or reset, events still came, late by at most `recovery` more (a delay is at most
/// 2.5 s down and 1 s up; a reset costs a reconnect). `hidden` says which faults count.
fn view_since(h: &History, cfg: &Config, replica: &str, t: Micros, hidden: Hidden) -> Micros {
    let slack = cfg.slack_ms * 1000;
    let recovery = cfg.recovery_ms * 1000;
    let mine = |target: &str| {
        replica
            .strip_prefix(target)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['_', '-']))
    };
    cfg.faults
        .iter()
        .filter(|f| {
            hidden == Hidden::Any || matches!(f.kind.as_str(), "proxy-slow" | "proxy-latency")
        })
        .filter_map(|f| {
            let (until, lagged) = match f.kind.as_str() {
                "freeze" | "proxy-cut" | "proxy-slow" if mine(&f.target) => {
                    (f.end + recovery, f.start)
                }
                "proxy-latency" | "proxy-reset" if mine(&f.target) => {
                    (f.end + recovery, f.start.max(t - recovery))
                }
                "apiserver-restart" | "etcd-restart" => {
                    let i = h.served.partition_point(|&s| s < f.end);
                    let back = h.served.get(i).copied().unwrap_or(f.end).max(f.end);
                    (back + recovery, f.start)
                }
                _ => return None,
            };
            (f.start <= t && t <= until).then_some(lagged)
        })
        .min()
        .unwrap_or(t)
        .min(t)
        - slack
}

/// When the brake held, by the checker's own count of watched nodes and tainted ones.
fn brake_intervals(h: &History, cfg: &Config) -> Vec<(Micros, Micros)> {
    let Some((threshold, min_nodes)) = cfg.brake else {
        return Vec::new();
    };
    let mut times: Vec<Micros> = h.nodes.values().flatten().map(|v| v.at).collect();
    times.sort();
    times.dedup();
    let mut out = Vec::new();
    let mut since: Option<Micros> = None;
    for &t in &times {
        let (mut nodes, mut tainted) = (0usize, 0usize);
        for name in h.nodes.keys() {
            if let Some(v) = h.node_at(name, t).filter(|v| v.exists)
                && cfg.node_selector.matches(v.labels.as_ref())
            {
                nodes += 1;
                if v.taints.iter().any(|t| t.effect == "NoExecute") {
                    tainted += 1;
                }
            }
        }
        let holds = nodes > 0
            && tainted >= min_nodes.max(1)
            && tainted as f64 * 100.0 > threshold * nodes as f64;
        match (holds, since) {
            (true, None) => since = Some(t),
            (false, Some(s)) => {
                out.push((s, t));
                since = None;
            }
            _ => {}
        }
    }
    if let Some(s) = since {
        out.push((s, h.end));
    }
    out
}

fn merge(mut v: Vec<(Micros, Micros)>) -> Vec<(Micros, Micros)> {
    v.sort();
    let mut out: Vec<(Micros, Micros)> = Vec::new();
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// When an eviction due at `due` joins the queue: at once if some replica can act, else when
/// one can. One caught by a block (an outage, the brake) before its slack ran out joins again
/// when the block ends, with every eviction the block held.
fn ready_at(due: Micros, slack: Micros, blocked: &[(Micros, Micros)]) -> Micros {
    let mut ready = advance(due, 0, blocked);
    loop {
        let tentative = advance(ready, slack, blocked);
        match blocked
            .iter()
            .filter(|(a, _)| *a > ready && *a < tentative)
            .map(|(_, b)| *b)
            .max()
        {
            Some(end) if end > ready => ready = end,
            _ => return ready,
        }
    }
}

/// The time at which `budget` of unblocked time has passed since `from`.
fn advance(from: Micros, budget: Micros, blocked: &[(Micros, Micros)]) -> Micros {
    let (mut t, mut left) = (from, budget);
    for &(a, b) in blocked {
        if b <= t {
            continue;
        }
        if a > t {
            if a - t >= left {
                return t + left;
            }
            left -= a - t;
        }
        t = t.max(b);
    }
    t + left
}

/// The rate limits as queues: when the eviction due at `due` could start at the earliest,
/// after every eviction due before it.
#[derive(Clone)]
struct Queue {
    buckets: Vec<Bucket>,
}

#[derive(Clone)]
struct Bucket {
    rate: f64,
    burst: f64,
    cost: f64,
    tokens: f64,
    at: Micros,
}

impl Queue {
    fn new(cfg: &Config) -> Queue {
        let mut buckets = Vec::new();
        // A rate of zero (or less) is no limit the checker can model: left out.
        if let Some((rate, burst)) = cfg.eviction_rate.filter(|(r, _)| *r > 0.0) {
            buckets.push(Bucket::new(rate, burst.max(1.0), 1.0));
        }
        if let Some((qps, burst, cost)) = cfg.qps.filter(|(q, _, _)| *q > 0.0) {
            buckets.push(Bucket::new(qps, burst.max(cost), cost));
        }
        Queue { buckets }
    }

    fn take(&mut self, due: Micros) -> Micros {
        let mut t = due;
        for b in &mut self.buckets {
            t = b.take(t);
        }
        t
    }

    /// [`Queue::take`], paused while no replica can act: a turn that falls in a blocked
    /// window (an outage, the brake) comes at its end instead, behind the evictions already
    /// waiting, so a backlog goes on through the block rather than ending in it.
    fn take_unblocked(&mut self, due: Micros, blocked: &[(Micros, Micros)]) -> Micros {
        let mut at = due;
        loop {
            let mut trial = self.clone();
            let t = trial.take(at);
            match blocked.iter().find(|(a, b)| *a <= t && t < *b) {
                Some(&(_, end)) => at = end,
                None => {
                    *self = trial;
                    return t;
                }
            }
        }
    }
}

impl Bucket {
    fn new(rate: f64, burst: f64, cost: f64) -> Bucket {
        Bucket {
            rate,
            burst,
            cost,
            tokens: burst,
            at: Micros::MIN,
        }
    }

    fn take(&mut self, t: Micros) -> Micros {
        let t = t.max(self.at);
        if self.at != Micros::MIN {
            self.tokens = (self.tokens + (t - self.at) as f64 / 1e6 * self.rate).min(self.burst);
        }
        self.at = t;
        if self.tokens >= self.cost {
            self.tokens -= self.cost;
            return t;
        }
        let wait = ((self.cost - self.tokens) / self.rate * 1e6).ceil() as Micros;
        self.at = t.saturating_add(wait);
        self.tokens = 0.0;
        self.at
    }
}

fn pod_history(h: &History, pod: &Pod, around: Micros) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  pod {}/{} uid {} created {} bound to {} at {} left {}",
        pod.namespace,
        pod.name,
        pod.uid,
        show_time(pod.created),
        pod.node.as_deref().unwrap_or("(none)"),
        pod.bound.map(show_time).unwrap_or_else(|| "-".into()),
        pod.gone.map(show_time).unwrap_or_else(|| "-".into()),
    );
    let _ = writeln!(out, "  tolerations: {:?}", pod.tolerations);
    if let Some(node) = pod.node.as_deref()
        && let Some(versions) = h.nodes.get(node)
    {
        let from = pod.bound.unwrap_or(pod.created) - 120_000_000;
        for v in versions
            .iter()
            .filter(|v| v.at >= from && v.at <= around + 5_000_000)
        {
            let taints: Vec<String> = v
                .taints
                .iter()
                .map(|t| {
                    format!(
                        "{}={}:{}{}",
                        t.key,
                        t.value,
                        t.effect,
                        t.added
                            .map(|a| format!("@{}", show_time(a)))
                            .unwrap_or_default()
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "  node {node} at {}: {}",
                show_time(v.at),
                if v.exists {
                    taints.join(", ")
                } else {
                    "deleted".into()
                }
            );
        }
    }
    for w in h
        .writes
        .iter()
        .filter(|w| w.namespace == pod.namespace && w.name == pod.name)
    {
        let _ = writeln!(
            out,
            "  {:?} by {} received {} → {}",
            w.kind,
            w.replica,
            show_time(w.received),
            w.code
        );
    }
    out
}

fn lease_history(h: &History, around: Micros) -> String {
    let mut out = String::new();
    for l in h
        .leases
        .iter()
        .filter(|l| l.completed >= around - 30_000_000 && l.completed <= around + 5_000_000)
    {
        let _ = writeln!(
            out,
            "  lease {} by {} holder {:?} at {} ok={}",
            l.verb,
            l.replica,
            l.holder,
            show_time(l.completed),
            l.ok
        );
    }
    out
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{}: {} evictions judged ({} writes), {} deadlines judged, {} Lease terms",
            self.controller, self.evictions, self.writes, self.deadlines, self.terms
        )?;
        writeln!(
            f,
            "no replica could act for {:.1} s in all; the brake held {} times, {:.1} s in all",
            self.unavailable_s, self.brake_holds, self.brake_held_s
        )?;
        let counts: Vec<String> = Kind::ALL
            .iter()
            .map(|&k| format!("{} {}", k.name(), self.count(k)))
            .collect();
        writeln!(f, "violations: {}", counts.join(", "))?;
        let restart_late = self
            .violations
            .iter()
            .filter(|v| matches!(v.kind, Kind::Late | Kind::Missed) && v.after_restart)
            .count();
        if restart_late > 0 {
            writeln!(
                f,
                "  of late and missed, {restart_late} had a restart or failover between taint and deadline"
            )?;
        }
        for (what, n) in &self.unresolved {
            writeln!(f, "unresolved: {n} × {what}")?;
        }
        for kind in Kind::ALL {
            if let Some(v) = self.violations.iter().find(|v| v.kind == kind) {
                writeln!(f, "first {}: {}", kind.name(), v.what)?;
                write!(f, "{}", v.history)?;
            }
        }
        if !self.violations.is_empty() {
            writeln!(f, "every violation, in time order:")?;
            for v in self.violations.iter().take(500) {
                writeln!(f, "  {} {}: {}", show_time(v.at), v.kind.name(), v.what)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_skips_blocked_time() {
        let blocked = vec![(10, 20), (30, 40)];
        assert_eq!(advance(0, 5, &blocked), 5);
        assert_eq!(advance(0, 15, &blocked), 25);
        assert_eq!(advance(12, 5, &blocked), 25);
        assert_eq!(advance(0, 25, &blocked), 45);
    }

    #[test]
    fn the_rate_check_allows_the_burst_and_the_rate() {
        let s = 1_000_000;
        // 5 at once with burst 5: fine; a sixth at once is not.
        assert!(rate_exceeded(&[0, 0, 0, 0, 0], 1.0, 5.0, 0).is_none());
        assert!(rate_exceeded(&[0, 0, 0, 0, 0, 0], 1.0, 5.0, 0).is_some());
        // One per second at rate 1, burst 1: fine.
        let steady: Vec<Micros> = (0..20).map(|i| i * s).collect();
        assert!(rate_exceeded(&steady, 1.0, 1.0, 0).is_none());
        let fast: Vec<Micros> = (0..20).map(|i| i * s / 2).collect();
        assert!(rate_exceeded(&fast, 1.0, 1.0, 0).is_some());
    }

    #[test]
    fn the_queue_spaces_starts_by_the_rate() {
        let mut cfg = Config::new(Controller::Noexecute, "ns/l");
        cfg.eviction_rate = Some((2.0, 1.0));
        let mut q = Queue::new(&cfg);
        assert_eq!(q.take(0), 0);
        assert_eq!(q.take(0), 500_000);
        assert_eq!(q.take(0), 1_000_000);
        assert_eq!(q.take(10_000_000), 10_000_000);
    }
}
