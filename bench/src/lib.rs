//! # noexecute-bench
//!
//! `noexecute run` against upstream's `taint-eviction-controller` (kube-controller-manager with
//! only that controller), each in turn on a freshly started kube-apiserver + etcd, with the
//! same client QPS and burst, never both at once.
//!
//! One run:
//! 1. a fresh plane; N nodes × M pods: 10% tolerate nothing, 80% tolerate not-ready and
//!    unreachable for S seconds (as DefaultTolerationSeconds would, with S), 10% forever;
//!    Pods and nodes are realistic objects (`noexecute_testkit::realistic`: two containers
//!    with env and probes, volumes, labels; the API server adds managed fields), so both
//!    controllers decode what they would in production;
//! 2. a canary node is tainted and a canary pod bound to it, then the controller starts: the
//!    canary's eviction is its time to synced, and the CPU until then its initial-list CPU
//!    (with `--starts N`: N starts on the same population, each with its own canary, stopped
//!    in between; the figures are the medians). Before each start the API server is made to
//!    collect its garbage and left to fall idle, and its own work in the window (GC, checks
//!    against etcd) is read from its metrics beside its CPU;
//! 3. every node (or a share of them) gets `node.kubernetes.io/unreachable:NoExecute` at once;
//! 4. a watch records when each pod is evicted (deletion timestamp set or gone), until every
//!    expected eviction is seen, then a few more seconds to catch wrong ones;
//! 5. the controller process's RSS (steady and peak) and CPU, and the API server's request
//!    counters, are read around it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Pod, Toleration};
use kube::api::PostParams;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use noexecute_testkit::realistic;
use noexecute_testkit::*;
use serde::Serialize;

pub const TAINT_KEY: &str = "node.kubernetes.io/unreachable";

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Which {
    Upstream,
    Noexecute,
}

impl std::fmt::Display for Which {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Which::Upstream => "upstream",
            Which::Noexecute => "noexecute",
        })
    }
}

#[derive(Clone, Debug)]
pub struct Options {
    pub nodes: usize,
    pub pods_per_node: usize,
    /// S: the tolerating pods' `tolerationSeconds`.
    pub toleration_seconds: i64,
    pub qps: f64,
    pub burst: u32,
    /// The `noexecute` binary.
    pub binary: PathBuf,
    /// How long to keep watching after the last expected eviction, for wrong ones.
    pub settle: Duration,
    /// Spread the taints evenly over this long instead of all at once (so that the tolerating
    /// pods fall due a few at a time and the QPS does not bind the lag).
    pub taint_spread: Duration,
    /// Extra flags for `noexecute run`.
    pub noexecute_args: Vec<String>,
    /// Extra flags for kube-controller-manager (upstream's run), e.g.
    /// `--kube-api-content-type=application/json`.
    pub kcm_args: Vec<String>,
    /// The share of nodes that get the taint (1.0: all). Pods on the other nodes must not be
    /// evicted.
    pub taint_share: f64,
    /// Start the controller this many times on the same population, timing each start to
    /// synced, and stop it between starts.
    pub starts: usize,
}

/// What a pod is expected to do.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Class {
    Untolerated,
    Tolerating,
    Forever,
}

fn class_of(index: usize) -> Class {
    match index % 10 {
        0 => Class::Untolerated,
        1 => Class::Forever,
        _ => Class::Tolerating,
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub controller: Which,
    pub nodes: usize,
    pub pods: usize,
    pub toleration_seconds: i64,
    pub qps: f64,
    pub burst: u32,
    /// The taints were spread over this many seconds.
    pub taint_spread_s: f64,
    /// Extra flags noexecute ran with.
    pub args: Vec<String>,
    /// Nodes tainted (the rest are left alone).
    pub tainted_nodes: usize,
    /// From the controller process's start to its first eviction (of a canary on a node
    /// tainted before the start), in seconds: the initial list, sync and one eviction. With
    /// `--starts`, the median of the starts.
    pub time_to_synced_s: f64,
    /// User + system CPU seconds from the start to that first eviction (the median of the
    /// starts, taken on its own).
    pub cpu_initial_s: f64,
    /// Each start's figures (one with `--starts 1`); with `--repeat`, every run's.
    pub synced: Vec<Synced>,
    /// Taint to the last untolerated pod evicted, in seconds.
    /// (With spread taints: from the first taint.)
    pub makespan_s: f64,
    /// Eviction lag of the tolerating pods against their deadline (node tainted + S), ms.
    pub lag_p50_ms: f64,
    pub lag_p99_ms: f64,
    pub lag_max_ms: f64,
    /// The API server's own time on each tolerating pod's eviction writes (its status PATCHes
    /// and DELETEs, or Eviction API requests, retries included; from received to response
    /// complete, by its audit log), summed per pod, ms. Received is taken before
    /// authentication and API Priority and Fairness, so a queue there is in it (neither
    /// controller queues in the bench: both are exempt). Upstream's GET before its PATCH is a
    /// read and not audited, so its figure leaves that out. Over the pods of `lag_*` that the
    /// audit log has writes for (`server_timed` of them); `None` if none.
    pub server_time_p50_ms: Option<f64>,
    pub server_time_p99_ms: Option<f64>,
    pub server_timed: usize,
    /// Resident memory once synced and idle, and the process's peak, in MiB.
    pub rss_steady_mib: f64,
    pub rss_peak_mib: f64,
    /// User + system CPU seconds from the mass taint to the end of the run.
    pub cpu_s: f64,
    /// kube-apiserver's user + system CPU seconds from the harness's call to start the
    /// controller to synced: its initial lists and the start of its watches (the median of
    /// the starts, taken on its own).
    pub apiserver_cpu_initial_s: f64,
    /// kube-apiserver's user + system CPU seconds from the mass taint to the end of the run
    /// (the harness's taints and its metadata watch are in both controllers' figures).
    pub apiserver_cpu_s: f64,
    /// API server requests made during the run, by "VERB resource[/subresource]".
    pub requests: BTreeMap<String, f64>,
    /// The API server's mean time serving one of those requests, ms (from its
    /// `apiserver_request_duration_seconds`): the floor under the eviction lag.
    pub server_ms: BTreeMap<String, f64>,
    /// noexecute only: the share of evictions whose DELETE completed within 25 ms and 100 ms
    /// of their deadline, by the controller's own clock (its `pod_deletion_duration_seconds`
    /// histogram; upstream's records nanoseconds as seconds and cannot say).
    pub controller_within_25ms: Option<f64>,
    pub controller_within_100ms: Option<f64>,
    /// noexecute only: Events not sent because the event queue was full
    /// (`noexecute_events_dropped_total`), from the controller's start to the end of the run
    /// (the starts' canaries post a few Events and drop none). Upstream drops the same way but
    /// does not count it.
    pub events_dropped: Option<f64>,
    pub evicted: usize,
    pub wrong: usize,
    pub missed: usize,
    /// The slowest eviction of a tolerating pod, step by step.
    pub slowest: Option<Timeline>,
    /// Pods the harness's watch missed being deleted (its watch fell out of the API server's
    /// window, 410, and relisted): their eviction is timed at the relist, a late bound.
    pub timed_at_relist: usize,
    #[serde(skip)]
    pub evicted_names: BTreeSet<String>,
}

/// One start of the controller to its first eviction (the canary's).
#[derive(Clone, Debug, Serialize)]
pub struct Synced {
    /// From the process's start (its start time in `/proc`) to the canary's eviction seen by
    /// the harness, seconds.
    pub time_s: f64,
    /// From the harness's call to start the controller to the process's start: for upstream,
    /// `scripts/cluster` checking the plane before it starts kube-controller-manager. Not in
    /// `time_s`.
    pub launch_s: f64,
    /// The controller's user + system CPU seconds until then.
    pub cpu_s: f64,
    /// The API server's user + system CPU seconds until then.
    pub apiserver_cpu_s: f64,
    /// Before the start: how long the API server took to fall idle after a forced GC
    /// ([`quiesce`]), seconds.
    pub quiesced_s: f64,
    /// The API server's live heap after that GC, MiB (if it exports `go_gc_heap_live_bytes`).
    pub apiserver_heap_mib: Option<f64>,
    /// What the API server did in the window besides serving requests.
    pub server: ServerWork,
}

/// Counters of the API server's own work, from its `/metrics` (each the sum over its series;
/// a metric with no series yet counts 0). Read before and after a window, they say what of
/// the server's CPU in it was garbage collection or background checks rather than serving.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServerWork {
    /// CPU seconds of Go's garbage collector (`go_cpu_classes_gc_total_cpu_seconds_total`,
    /// the runtime's estimate).
    pub gc_cpu_s: f64,
    /// Completed GC cycles (`go_gc_cycles_total_gc_cycles_total`).
    pub gc_cycles: f64,
    /// The watch cache's consistency checks against etcd
    /// (`apiserver_storage_consistency_checks_total`), each a list of the resource from etcd.
    pub consistency_checks: f64,
    /// Lists served from etcd rather than the watch cache (`apiserver_storage_list_total`).
    pub etcd_lists: f64,
    /// Initial events sent to new watches (`apiserver_init_events_total`).
    pub init_events: f64,
    /// Watches the server closed because their client fell behind
    /// (`apiserver_terminated_watchers_total`).
    pub terminated_watchers: f64,
}

impl ServerWork {
    fn read(metrics: &str) -> ServerWork {
        let sum = |name: &str| -> f64 {
            metrics
                .lines()
                .filter(|l| {
                    l.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        ServerWork {
            gc_cpu_s: sum("go_cpu_classes_gc_total_cpu_seconds_total"),
            gc_cycles: sum("go_gc_cycles_total_gc_cycles_total"),
            consistency_checks: sum("apiserver_storage_consistency_checks_total"),
            etcd_lists: sum("apiserver_storage_list_total"),
            init_events: sum("apiserver_init_events_total"),
            terminated_watchers: sum("apiserver_terminated_watchers_total"),
        }
    }

    /// What grew from `before` to `self`.
    fn since(&self, before: &ServerWork) -> ServerWork {
        ServerWork {
            gc_cpu_s: self.gc_cpu_s - before.gc_cpu_s,
            gc_cycles: self.gc_cycles - before.gc_cycles,
            consistency_checks: self.consistency_checks - before.consistency_checks,
            etcd_lists: self.etcd_lists - before.etcd_lists,
            init_events: self.init_events - before.init_events,
            terminated_watchers: self.terminated_watchers - before.terminated_watchers,
        }
    }
}

/// The live heap of the last GC (`go_gc_heap_live_bytes`), MiB; `None` if the server does
/// not export it.
fn heap_live_mib(metrics: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("go_gc_heap_live_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|b| b / (1024.0 * 1024.0))
}

/// Requests the API server dispatched under the bench's FlowSchema `noexecute-bench-exempt`.
fn exempted(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("apiserver_flowcontrol_dispatched_requests_total{")
                && l.contains("flow_schema=\"noexecute-bench-exempt\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Bring the API server to the same state before each start: a forced GC (its
/// `/debug/pprof/heap?gc=1`, on by default with `--profiling`), then wait until it is idle,
/// under 5% of a core over a second, for at most 60 s. Without this a GC cycle owed to the
/// previous start, or to the population, lands in the next start's window on one controller
/// and not the other. Returns the seconds waited.
async fn quiesce(plane: &Plane, apiserver: u32) -> Result<f64> {
    let began = Instant::now();
    // Without profiling (`--profiling=false`) there is no forced GC: say so, and still wait.
    if let Err(e) = plane.kubectl(&["get", "--raw", "/debug/pprof/heap?gc=1"]) {
        eprintln!(
            "could not force a GC in the API server, waiting for it to fall idle only: {e:#}"
        );
    }
    let cpu = || process_stats(apiserver).map(|(cpu, _, _)| cpu);
    let mut last = cpu()?;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = cpu()?;
        if now - last < 0.05 {
            return Ok(began.elapsed().as_secs_f64());
        }
        if began.elapsed() > Duration::from_secs(60) {
            eprintln!(
                "the API server was still busy ({:.2} s CPU in the last second) 60 s after a forced GC: starting anyway",
                now - last
            );
            return Ok(began.elapsed().as_secs_f64());
        }
        last = now;
    }
}

/// The slowest eviction of a tolerating pod as the harness saw it (wall-clock times, RFC 3339)
/// and, for noexecute, its log lines about that pod (debug: when it saw the taint, when the
/// eviction fell due, when the attempt started, each request's wait for the rate limiter and
/// its round trip).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Timeline {
    pub pod: String,
    pub lag_ms: f64,
    /// The harness's taint of the pod's node was answered.
    pub tainted: String,
    /// `tainted` + S: when the eviction was due.
    pub due: String,
    /// The harness's watch saw the pod being deleted.
    pub observed: String,
    pub log: Vec<String>,
    /// The API server's audit records of the pod's eviction writes: when each was received
    /// and completed.
    pub server: Vec<String>,
}

impl std::fmt::Display for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "slowest eviction: {} ({:.0} ms late)",
            self.pod, self.lag_ms
        )?;
        writeln!(f, "  {}  harness: node tainted", self.tainted)?;
        writeln!(f, "  {}  harness: due (tainted + S)", self.due)?;
        writeln!(f, "  {}  harness: deletion observed", self.observed)?;
        for line in &self.log {
            writeln!(f, "  {line}")?;
        }
        for line in &self.server {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

/// A wall-clock time for an `Instant`, from a pair of readings taken together.
fn wall(at: Instant, reference: (Instant, std::time::SystemTime)) -> String {
    let (i0, s0) = reference;
    let t = if at >= i0 {
        s0 + (at - i0)
    } else {
        s0 - (i0 - at)
    };
    k8s_openapi::jiff::Timestamp::try_from(t)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// Each pod's eviction writes in `namespace` (status PATCHes, DELETEs and Eviction API
/// requests, whoever sent them; the harness sends none of these to the `p…` pods), from the
/// API server's audit log, by pod name, in the order received.
fn eviction_writes(audit: Vec<AuditEntry>, namespace: &str) -> HashMap<String, Vec<AuditEntry>> {
    let mut out: HashMap<String, Vec<AuditEntry>> = HashMap::new();
    for e in audit {
        let write = (e.verb == "patch" && e.subresource == "status")
            || (e.verb == "delete" && e.subresource.is_empty())
            || (e.verb == "create" && e.subresource == "eviction");
        if e.resource == "pods" && e.namespace == namespace && write {
            out.entry(e.name.clone()).or_default().push(e);
        }
    }
    for writes in out.values_mut() {
        writes.sort_by_key(|e| e.received);
    }
    out
}

/// One audit record as a timeline line.
fn audit_line(e: &AuditEntry) -> String {
    let what = if e.subresource.is_empty() {
        format!("{} {}", e.verb, e.resource)
    } else {
        format!("{} {}/{}", e.verb, e.resource, e.subresource)
    };
    format!(
        "{}  API server: {what} received, completed {} ({:.0} ms, {})",
        e.received,
        e.completed,
        e.server_ms(),
        e.code
    )
}

/// A log's lines about one pod (`pod=ns/name`, then a space or the end), without colour codes.
pub fn lines_about(log: &str, pod: &str) -> Vec<String> {
    let needle = format!("pod={pod}");
    log.lines()
        .map(strip_ansi)
        .filter(|line| {
            line.match_indices(&needle).any(|(i, _)| {
                line[i + needle.len()..]
                    .chars()
                    .next()
                    .is_none_or(char::is_whitespace)
            })
        })
        .collect()
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ ... final byte in @..~
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) && c != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A toleration that keeps the DefaultTolerationSeconds plugin from adding its own (it sees a
/// toleration for the key) but matches no real taint (it wants a value the taint lacks).
fn decoy(key: &str) -> Toleration {
    Toleration {
        key: Some(key.into()),
        operator: Some("Equal".into()),
        value: Some("never-matches".into()),
        effect: Some("NoExecute".into()),
        toleration_seconds: None,
    }
}

fn tolerations(class: Class, seconds: i64) -> Vec<Toleration> {
    match class {
        Class::Untolerated => vec![decoy("node.kubernetes.io/not-ready"), decoy(TAINT_KEY)],
        Class::Forever => vec![Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        }],
        Class::Tolerating => vec![
            tolerate("node.kubernetes.io/not-ready", Some(seconds)),
            tolerate(TAINT_KEY, Some(seconds)),
        ],
    }
}

/// The fields of `/proc/PID/stat` from the third (state) on, so that field n is at index
/// n - 3. The command name before them may hold spaces and parentheses, so the split is
/// after its last `)`.
fn stat_fields(pid: u32) -> Result<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("unexpected /proc stat")?;
    Ok(rest.split_whitespace().map(str::to_owned).collect())
}

/// Field `n` (1-based, as in proc(5)) of [`stat_fields`], as a number.
fn stat_field(fields: &[String], n: usize) -> Result<f64> {
    n.checked_sub(3)
        .and_then(|i| fields.get(i))
        .and_then(|v| v.parse::<f64>().ok())
        .with_context(|| format!("no field {n} in /proc stat"))
}

/// (utime + stime) seconds and (VmRSS, VmHWM) MiB of a process, from /proc.
fn process_stats(pid: u32) -> Result<(f64, f64, f64)> {
    let fields = stat_fields(pid)?;
    // utime and stime, in clock ticks of 1/100 s.
    let cpu = (stat_field(&fields, 14)? + stat_field(&fields, 15)?) / 100.0;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok((cpu, kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0))
}

/// How long the process has run, in seconds: `/proc/uptime` less its start time
/// (field 22, in clock ticks of 1/100 s since boot). 10 ms resolution.
fn running_for(pid: u32) -> Result<f64> {
    let started = stat_field(&stat_fields(pid)?, 22)? / 100.0;
    let uptime = std::fs::read_to_string("/proc/uptime")?;
    let up = uptime
        .split_whitespace()
        .next()
        .and_then(|v| v.parse::<f64>().ok())
        .context("unexpected /proc/uptime")?;
    Ok(up - started)
}

/// The API server's request counters, and the seconds it spent serving them, by "VERB
/// resource[/subresource]" (`apiserver_request_total`, `apiserver_request_duration_seconds`).
#[derive(Default)]
struct Requests {
    count: BTreeMap<String, f64>,
    seconds: BTreeMap<String, f64>,
    served: BTreeMap<String, f64>,
}

fn request_counts(plane: &Plane) -> Result<Requests> {
    let text = plane.kubectl(&["get", "--raw", "/metrics"])?;
    let mut out = Requests::default();
    for line in text.lines() {
        let into = if line.starts_with("apiserver_request_total{") {
            &mut out.count
        } else if line.starts_with("apiserver_request_duration_seconds_sum{") {
            &mut out.seconds
        } else if line.starts_with("apiserver_request_duration_seconds_count{") {
            &mut out.served
        } else {
            continue;
        };
        let label = |name: &str| {
            let needle = format!("{name}=\"");
            line.split(&needle)
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("")
                .to_string()
        };
        let (verb, resource, sub) = (label("verb"), label("resource"), label("subresource"));
        if resource.is_empty() {
            continue;
        }
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let key = if sub.is_empty() {
            format!("{verb} {resource}")
        } else {
            format!("{verb} {resource}/{sub}")
        };
        *into.entry(key).or_insert(0.0) += value;
    }
    Ok(out)
}

/// What grew between two readings.
fn grown(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

/// An object as a client creates it: without what the API server sets (uid, resource
/// version, managed fields, creation time, status) and without owner references (nothing owns
/// these; a garbage collector would otherwise delete them).
fn for_create<K: kube::Resource>(mut object: K) -> K {
    let meta = object.meta_mut();
    meta.uid = None;
    meta.resource_version = None;
    meta.managed_fields = None;
    meta.creation_timestamp = None;
    meta.owner_references = None;
    meta.generate_name = None;
    object
}

async fn is_evicted(api: &kube::Api<Pod>, name: &str) -> Result<bool> {
    Ok(api
        .get_opt(name)
        .await
        .with_context(|| format!("reading pod {name}"))?
        .is_none_or(|p| p.metadata.deletion_timestamp.is_some()))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The controller under test, started on `plane`.
enum Running {
    Upstream,
    Noexecute(Box<Controller>),
}

/// Start the controller with the run's client limits: upstream's as kube-controller-manager
/// running only taint-eviction-controller, noexecute as `noexecute run`.
fn start_controller(which: Which, opts: &Options, plane: &Plane, n: usize) -> Result<Running> {
    let qps = format!("{}", opts.qps);
    let burst = format!("{}", opts.burst);
    Ok(match which {
        Which::Upstream => {
            let mut kcm_args = format!("--kube-api-qps={qps} --kube-api-burst={burst}");
            for arg in &opts.kcm_args {
                kcm_args.push(' ');
                kcm_args.push_str(arg);
            }
            Plane::up_with_env(
                &plane.name,
                &["taint-eviction-controller"],
                &[("NOEXECUTE_KCM_ARGS", kcm_args.as_str())],
            )?;
            Running::Upstream
        }
        Which::Noexecute => {
            let mut args = vec![
                "--leader-elect=false",
                "--kube-api-qps",
                &qps,
                "--kube-api-burst",
                &burst,
            ];
            args.extend(opts.noexecute_args.iter().map(String::as_str));
            let c = Controller::start(plane, &opts.binary, &format!("bench-{n}"), &args)?;
            Running::Noexecute(Box::new(c))
        }
    })
}

/// Keep noexecute's logs of the last run (one per start) in `target/bench-logs/PLANE/`: the
/// plane's directory goes with the next run. A failure to keep them is reported, not fatal.
fn keep_logs(plane: &Plane) {
    let kept = repo_root()
        .join("target")
        .join("bench-logs")
        .join(&plane.name);
    let result = (|| -> Result<usize> {
        if kept.exists() {
            std::fs::remove_dir_all(&kept)?;
        }
        let mut copied = 0;
        for entry in std::fs::read_dir(&plane.state_dir)? {
            let entry = entry?;
            let name = entry.file_name();
            if name.to_string_lossy().starts_with("controller-") {
                std::fs::create_dir_all(&kept)?;
                std::fs::copy(entry.path(), kept.join(&name))?;
                copied += 1;
            }
        }
        Ok(copied)
    })();
    match result {
        Ok(0) => {}
        Ok(n) => eprintln!("kept the controller's {n} log(s) in {}", kept.display()),
        Err(e) => eprintln!(
            "could not keep the controller's logs in {}: {e:#}",
            kept.display()
        ),
    }
}

/// Stop the controller between two starts.
async fn stop_controller(running: Running, plane: &Plane) -> Result<()> {
    match running {
        // `--with-controllers=` (none) stops kube-controller-manager.
        Running::Upstream => Plane::up(&plane.name, &[]).map(|_| ()),
        Running::Noexecute(mut c) => c.terminate(Duration::from_secs(10)).await.map(|_| ()),
    }
}

pub async fn run(which: Which, opts: &Options) -> Result<Outcome> {
    let name = format!("bench-{which}");
    // Always a fresh plane.
    Plane::reset(&name)?;
    let plane = Plane::up(&name, &[])?;
    let result = measure(which, opts, &plane).await;
    keep_logs(&plane);
    let _ = plane.down();
    result
}

async fn measure(which: Which, opts: &Options, plane: &Plane) -> Result<Outcome> {
    plane.install_rbac()?;
    // API Priority and Fairness: the plane's kube-controller-manager is exempt (system:masters);
    // noexecute gets the same level (the file says why).
    plane.kubectl(&["apply", "-f", "bench/flowschema-exempt.yaml"])?;
    let client = plane.admin_client().await?;
    let ns = TestNamespace::create(&client, "bench").await?;
    let total = opts.nodes * opts.pods_per_node;
    eprintln!(
        "[{which}] populating {} nodes × {} pods",
        opts.nodes, opts.pods_per_node
    );
    let node_names: Vec<String> = futures::stream::iter(0..opts.nodes)
        .map(|n| {
            let api = ns.nodes();
            async move {
                let name = format!("n{n}");
                let node = for_create(realistic::node(&name, n)?);
                api.create(&PostParams::default(), &node)
                    .await
                    .with_context(|| format!("creating node {name}"))?;
                Ok::<_, anyhow::Error>(name)
            }
        })
        .buffer_unordered(32)
        .try_collect()
        .await?;
    let mut node_names = node_names;
    node_names.sort();
    let pods_api = ns.pods();
    let mut classes: HashMap<String, (Class, String)> = HashMap::new();
    let mut specs = Vec::with_capacity(total);
    for (n, node) in node_names.iter().enumerate() {
        for i in 0..opts.pods_per_node {
            let index = n * opts.pods_per_node + i;
            let class = class_of(index);
            let pod_name = format!("p{index}");
            classes.insert(pod_name.clone(), (class, node.clone()));
            specs.push((pod_name, node.clone(), index, class));
        }
    }
    let created = Instant::now();
    futures::stream::iter(specs)
        .map(|(name, node, index, class)| {
            let api = pods_api.clone();
            let ns = ns.name.clone();
            let seconds = opts.toleration_seconds;
            async move {
                let tolerations = tolerations(class, seconds);
                let pod = for_create(realistic::pod(&name, &ns, &node, index, &tolerations)?);
                api.create(&PostParams::default(), &pod)
                    .await
                    .with_context(|| format!("creating pod {name}"))?;
                Ok::<_, anyhow::Error>(())
            }
        })
        .buffer_unordered(64)
        .try_collect::<Vec<()>>()
        .await
        .context("creating pods")?;
    eprintln!(
        "[{which}] {total} pods created in {:.0} s",
        created.elapsed().as_secs_f64()
    );

    let apiserver = plane
        .pid("kube-apiserver")
        .context("the API server's pid")?;
    let apiserver_cpu = || process_stats(apiserver).map(|(cpu, _, _)| cpu);
    // Each start to synced on the same population; the mass taint follows the last.
    let starts = opts.starts.max(1);
    let mut synced: Vec<Synced> = Vec::with_capacity(starts);
    let mut peak = 0f64;
    let mut last = None;
    for n in 1..=starts {
        // The canary: its node is tainted before the controller starts, so its eviction is
        // the controller's first, as soon as it has listed and synced.
        let canary = format!("canary-{n}");
        let canary_node = ns.create_node(&canary, vec![]).await?;
        ns.create_pod(&pod(
            &canary,
            &canary_node,
            tolerations(Class::Untolerated, 0),
            Some(0),
        ))
        .await?;
        add_taint(
            &ns.nodes(),
            &canary_node,
            no_execute("example.com/canary", ""),
        )
        .await?;

        let quiesced_s = quiesce(plane, apiserver).await?;
        let metrics_start = plane.kubectl(&["get", "--raw", "/metrics"])?;
        let work_start = ServerWork::read(&metrics_start);
        let apiserver_heap_mib = heap_live_mib(&metrics_start);
        let apiserver_start = apiserver_cpu()?;
        let start = Instant::now();
        let running = start_controller(which, opts, plane, n)?;
        let pid = match &running {
            Running::Upstream => plane.pid("kube-controller-manager"),
            Running::Noexecute(c) => c.pid(),
        }
        .context("the controller's pid")?;

        // Time to synced, the same for both: the canary is evicted.
        let synced_by = Instant::now() + Duration::from_secs(600);
        let (time_s, cpu_s) = loop {
            if let Ok((_, _, hwm)) = process_stats(pid) {
                peak = peak.max(hwm);
            }
            if is_evicted(&pods_api, &canary).await? {
                let (cpu, _, _) = process_stats(pid)?;
                // From the process's own start: upstream's launch (scripts/cluster, which
                // checks the plane first) is not the controller's time.
                break (running_for(pid)?, cpu);
            }
            if Instant::now() > synced_by {
                bail!("[{which}] the controller did not evict {canary} within 600 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let apiserver_cpu_s = apiserver_cpu()? - apiserver_start;
        let launch_s = (start.elapsed().as_secs_f64() - time_s).max(0.0);
        let metrics_synced = plane.kubectl(&["get", "--raw", "/metrics"])?;
        let server = ServerWork::read(&metrics_synced).since(&work_start);
        if which == Which::Noexecute && exempted(&metrics_synced) == 0.0 {
            bail!(
                "[{which}] none of noexecute's requests fell under bench/flowschema-exempt.yaml: its API priority would differ from upstream's"
            );
        }
        eprintln!(
            "[{which}] start {n}/{starts} synced: {canary} evicted {time_s:.2} s after the process started ({launch_s:.2} s launching it before that), {cpu_s:.1} s CPU (API server {apiserver_cpu_s:.1} s, of it GC {:.1} s in {} cycles; {} consistency checks, {} etcd lists, {} watches closed; heap {} MiB after a forced GC, idle {quiesced_s:.1} s later)",
            server.gc_cpu_s,
            server.gc_cycles,
            server.consistency_checks,
            server.etcd_lists,
            server.terminated_watchers,
            apiserver_heap_mib.map_or_else(|| "?".to_string(), |h| format!("{h:.0}")),
        );
        synced.push(Synced {
            time_s,
            launch_s,
            cpu_s,
            apiserver_cpu_s,
            quiesced_s,
            apiserver_heap_mib,
            server,
        });
        if n < starts {
            stop_controller(running, plane).await?;
            // Gone, so that the next start has only its own canary to evict.
            let no_grace = kube::api::DeleteParams {
                grace_period_seconds: Some(0),
                ..kube::api::DeleteParams::default()
            };
            // A canary tolerates no grace period: its eviction usually deleted it already.
            match pods_api.delete(&canary, &no_grace).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e).with_context(|| format!("deleting pod {canary}")),
            }
            ns.nodes()
                .delete(&canary_node, &kube::api::DeleteParams::default())
                .await
                .with_context(|| format!("deleting node {canary_node}"))?;
        } else {
            last = Some((running, pid));
        }
    }
    let (running, pid) = last.context("no start")?;
    let time_to_synced = median(synced.iter().map(|s| s.time_s).collect());
    let cpu_initial = median(synced.iter().map(|s| s.cpu_s).collect());
    let apiserver_cpu_initial = median(synced.iter().map(|s| s.apiserver_cpu_s).collect());
    // Let the canary's aftermath (events) pass before measuring.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (cpu_before, rss_steady, _) = process_stats(pid)?;
    let requests_before = request_counts(plane)?;

    // Record every eviction.
    let evicted_at: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let (listed_tx, listed_rx) = tokio::sync::oneshot::channel::<()>();
    let timed_at_relist = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let recorder = {
        let evicted_at = evicted_at.clone();
        let timed_at_relist = timed_at_relist.clone();
        let population: BTreeSet<String> = classes.keys().cloned().collect();
        // Metadata only: the harness shares the machine and should cost little.
        let api: kube::Api<PartialObjectMeta<Pod>> =
            kube::Api::namespaced(client.clone(), &ns.name);
        tokio::spawn(async move {
            // A failed list or watch (a loaded API server at 150,000 pods times out) is
            // retried with backoff; the recorder only stops when aborted.
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            let mut listed = Some(listed_tx);
            // The names a (re)list gave: a pod of the population missing from a relist was
            // deleted while the watch was down.
            let mut listing: Option<BTreeSet<String>> = None;
            while let Some(item) = stream.next().await {
                let event = match item {
                    Ok(event) => event,
                    Err(e) => {
                        eprintln!("recorder: watch failed, retrying: {e}");
                        continue;
                    }
                };
                let (pod, gone) = match event {
                    watcher::Event::Apply(p) => (p, false),
                    watcher::Event::InitApply(p) => {
                        if let (Some(names), Some(name)) = (listing.as_mut(), &p.metadata.name) {
                            names.insert(name.clone());
                        }
                        (p, false)
                    }
                    watcher::Event::Delete(p) => (p, true),
                    watcher::Event::InitDone => {
                        if let (Some(names), Ok(mut map)) = (listing.take(), evicted_at.lock()) {
                            let now = Instant::now();
                            for name in population.difference(&names) {
                                if !map.contains_key(name) {
                                    map.insert(name.clone(), now);
                                    timed_at_relist
                                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                }
                            }
                        }
                        if let Some(tx) = listed.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    watcher::Event::Init => {
                        listing = Some(BTreeSet::new());
                        continue;
                    }
                };
                if gone || pod.metadata.deletion_timestamp.is_some() {
                    let name = pod.metadata.name.unwrap_or_default();
                    if let Ok(mut map) = evicted_at.lock() {
                        map.entry(name).or_insert_with(Instant::now);
                    }
                }
            }
        })
    };
    // Taint only once the recorder has listed every pod, so each eviction is timed by its
    // watch event.
    tokio::time::timeout(Duration::from_secs(600), listed_rx)
        .await
        .context("the recorder did not list the pods within 600 s")?
        .context("the recorder stopped")?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let tainted_count = ((opts.nodes as f64 * opts.taint_share.clamp(0.0, 1.0)).round() as usize)
        .clamp(1, opts.nodes.max(1));
    let to_taint: Vec<String> = node_names.iter().take(tainted_count).cloned().collect();
    eprintln!(
        "[{which}] tainting {tainted_count} of {} nodes over {:?}",
        opts.nodes, opts.taint_spread
    );
    let nodes_api = ns.nodes();
    let apiserver_before = apiserver_cpu()?;
    let started = Instant::now();
    let clocks = (started, std::time::SystemTime::now());
    let step = opts.taint_spread.div_f64(tainted_count as f64);
    let tainted: Vec<(String, Instant)> = futures::stream::iter(to_taint.into_iter().enumerate())
        .map(|(i, n)| {
            let api = nodes_api.clone();
            async move {
                if !step.is_zero() {
                    tokio::time::sleep_until((started + step.mul_f64(i as f64)).into()).await;
                }
                add_taint(&api, &n, no_execute(TAINT_KEY, "")).await?;
                // The taint is in effect once the API server has it: take the time after.
                Ok::<_, anyhow::Error>((n, Instant::now()))
            }
        })
        .buffer_unordered(50)
        .try_collect()
        .await?;
    let tainted: HashMap<String, Instant> = tainted.into_iter().collect();

    // Wait for every expected eviction (bounded by what the QPS allows, with room).
    let expected: BTreeSet<String> = classes
        .iter()
        .filter(|(_, (c, node))| *c != Class::Forever && tainted.contains_key(node))
        .map(|(n, _)| n.clone())
        .collect();
    let expected_count = expected.len();
    let budget = Duration::from_secs_f64(
        opts.toleration_seconds as f64
            + opts.taint_spread.as_secs_f64()
            + 60.0
            + expected_count as f64 * 6.0 / opts.qps,
    );
    let deadline = Instant::now() + budget;
    loop {
        let seen = evicted_at.lock().map(|m| m.len()).unwrap_or(0);
        if let Ok((_, _, hwm)) = process_stats(pid) {
            peak = peak.max(hwm);
        }
        let done = evicted_at
            .lock()
            .map(|m| expected.iter().all(|p| m.contains_key(p)))
            .unwrap_or(false);
        if done {
            break;
        }
        if Instant::now() > deadline {
            eprintln!("[{which}] gave up waiting after {budget:?} ({seen} evicted)");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(opts.settle).await;
    let (cpu_after, _, hwm) = process_stats(pid)?;
    let apiserver_after = apiserver_cpu()?;
    peak = peak.max(hwm);
    let requests_after = request_counts(plane)?;
    recorder.abort();
    let mut within = (None, None);
    let mut events_dropped = None;
    let log_path = match &running {
        Running::Noexecute(c) => Some(c.log.clone()),
        Running::Upstream => None,
    };
    if let Running::Noexecute(mut c) = running {
        if let Ok(text) = c.metrics().await {
            within = deletion_shares(&text);
            events_dropped = counter(&text, "noexecute_events_dropped_total");
        }
        let _ = c.terminate(Duration::from_secs(10)).await;
    }

    let evicted_at = evicted_at.lock().map(|m| m.clone()).unwrap_or_default();
    let evicted_names: BTreeSet<String> = evicted_at
        .keys()
        .filter(|n| classes.contains_key(*n))
        .cloned()
        .collect();
    let wrong = evicted_names
        .iter()
        .filter(|n| {
            classes
                .get(*n)
                .is_some_and(|(c, node)| *c == Class::Forever || !tainted.contains_key(node))
        })
        .count();
    let missed = expected.difference(&evicted_names).count();
    let makespan = classes
        .iter()
        .filter(|(_, (c, _))| *c == Class::Untolerated)
        .filter_map(|(n, _)| evicted_at.get(n))
        .map(|t| t.duration_since(started).as_secs_f64())
        .fold(0f64, f64::max);
    let timed: Vec<(f64, &String, Instant, Instant)> = classes
        .iter()
        .filter(|(_, (c, _))| *c == Class::Tolerating)
        .filter_map(|(n, (_, node))| {
            let at = evicted_at.get(n)?;
            let due = *tainted.get(node)? + Duration::from_secs(opts.toleration_seconds as u64);
            let lag = if *at >= due {
                at.duration_since(due).as_secs_f64() * 1000.0
            } else {
                -(due.duration_since(*at).as_secs_f64() * 1000.0)
            };
            Some((lag, n, due, *at))
        })
        .collect();
    let writes = eviction_writes(plane.audit()?, &ns.name);
    let mut server_times: Vec<f64> = timed
        .iter()
        .filter_map(|(_, name, _, _)| writes.get(*name))
        .map(|w| w.iter().map(AuditEntry::server_ms).sum())
        .collect();
    server_times.sort_by(f64::total_cmp);
    if server_times.len() < timed.len() {
        eprintln!(
            "[{which}] the audit log has the eviction writes of {} of the {} timed pods",
            server_times.len(),
            timed.len()
        );
    }
    let slowest = timed
        .iter()
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(lag, name, due, at)| {
            let pod = format!("{}/{name}", ns.name);
            let log = log_path
                .as_ref()
                .and_then(|p| std::fs::read_to_string(p).ok())
                .map(|text| lines_about(&text, &pod))
                .unwrap_or_default();
            Timeline {
                pod,
                lag_ms: *lag,
                tainted: wall(
                    *due - Duration::from_secs(opts.toleration_seconds as u64),
                    clocks,
                ),
                due: wall(*due, clocks),
                observed: wall(*at, clocks),
                log,
                server: writes
                    .get(*name)
                    .into_iter()
                    .flatten()
                    .map(audit_line)
                    .collect(),
            }
        });
    let mut lags: Vec<f64> = timed.iter().map(|t| t.0).collect();
    lags.sort_by(f64::total_cmp);
    let requests = grown(&requests_after.count, &requests_before.count);
    let served = grown(&requests_after.served, &requests_before.served);
    let server_ms = grown(&requests_after.seconds, &requests_before.seconds)
        .into_iter()
        .filter_map(|(k, secs)| {
            let n = served.get(&k).copied().filter(|n| *n > 0.0)?;
            Some((k, secs / n * 1000.0))
        })
        .collect();
    if evicted_names.is_empty() {
        bail!("[{which}] nothing was evicted");
    }
    Ok(Outcome {
        controller: which,
        nodes: opts.nodes,
        pods: total,
        toleration_seconds: opts.toleration_seconds,
        qps: opts.qps,
        burst: opts.burst,
        taint_spread_s: opts.taint_spread.as_secs_f64(),
        args: opts.noexecute_args.clone(),
        tainted_nodes: tainted_count,
        time_to_synced_s: time_to_synced,
        cpu_initial_s: cpu_initial,
        synced,
        makespan_s: makespan,
        lag_p50_ms: percentile(&lags, 50.0),
        lag_p99_ms: percentile(&lags, 99.0),
        lag_max_ms: lags.last().copied().unwrap_or(0.0),
        server_time_p50_ms: (!server_times.is_empty()).then(|| percentile(&server_times, 50.0)),
        server_time_p99_ms: (!server_times.is_empty()).then(|| percentile(&server_times, 99.0)),
        server_timed: server_times.len(),
        rss_steady_mib: rss_steady,
        rss_peak_mib: peak,
        cpu_s: cpu_after - cpu_before,
        apiserver_cpu_initial_s: apiserver_cpu_initial,
        apiserver_cpu_s: apiserver_after - apiserver_before,
        requests,
        server_ms,
        controller_within_25ms: within.0,
        controller_within_100ms: within.1,
        events_dropped,
        evicted: evicted_names.len(),
        wrong,
        missed,
        slowest,
        timed_at_relist: timed_at_relist.load(std::sync::atomic::Ordering::Relaxed),
        evicted_names,
    })
}

/// From `taint_eviction_controller_pod_deletion_duration_seconds`: the share of deletions
/// within 25 ms and within 100 ms of the deadline.
fn deletion_shares(metrics: &str) -> (Option<f64>, Option<f64>) {
    let sample = |suffix: &str| {
        let name = format!("taint_eviction_controller_pod_deletion_duration_seconds{suffix} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name.as_str()))
            .and_then(|v| v.trim().parse::<f64>().ok())
    };
    let Some(count) = sample("_count").filter(|c| *c > 0.0) else {
        return (None, None);
    };
    (
        sample("_bucket{le=\"0.025\"}").map(|b| b / count),
        sample("_bucket{le=\"0.1\"}").map(|b| b / count),
    )
}

/// The value of an unlabelled counter or gauge in a Prometheus text exposition.
fn counter(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name)
            .then(|| v.split_whitespace().next()?.parse::<f64>().ok())
            .flatten()
    })
}

fn ratio(ours: f64, theirs: f64) -> String {
    if theirs.abs() < f64::EPSILON {
        "–".into()
    } else {
        format!("{:.2}×", ours / theirs)
    }
}

/// The side-by-side Markdown table (noexecute / upstream ratios).
pub fn markdown(upstream: &Outcome, ours: &Outcome) -> String {
    let mut s = format!(
        "{} nodes × {} pods ({} pods), {} node(s) tainted, S = {} s, QPS/burst {}/{}{}{}\n\n| metric | upstream | noexecute | noexecute / upstream |\n|---|---|---|---|\n",
        ours.nodes,
        ours.pods / ours.nodes.max(1),
        ours.pods,
        ours.tainted_nodes,
        ours.toleration_seconds,
        ours.qps,
        ours.burst,
        if ours.taint_spread_s > 0.0 {
            format!(", taints spread over {} s", ours.taint_spread_s)
        } else {
            String::new()
        },
        if ours.args.is_empty() {
            String::new()
        } else {
            format!(", noexecute {}", ours.args.join(" "))
        }
    );
    let rows: [(&str, f64, f64, &str); 12] = [
        (
            "time to synced: start → first eviction",
            upstream.time_to_synced_s,
            ours.time_to_synced_s,
            "s",
        ),
        (
            "CPU (user + sys) from the start to synced",
            upstream.cpu_initial_s,
            ours.cpu_initial_s,
            "s",
        ),
        (
            "makespan: taint → last untolerated pod evicted",
            upstream.makespan_s,
            ours.makespan_s,
            "s",
        ),
        (
            "lag of tolerating pods, p50",
            upstream.lag_p50_ms,
            ours.lag_p50_ms,
            "ms",
        ),
        (
            "lag of tolerating pods, p99",
            upstream.lag_p99_ms,
            ours.lag_p99_ms,
            "ms",
        ),
        (
            "lag of tolerating pods, max",
            upstream.lag_max_ms,
            ours.lag_max_ms,
            "ms",
        ),
        (
            "RSS, steady",
            upstream.rss_steady_mib,
            ours.rss_steady_mib,
            "MiB",
        ),
        ("RSS, peak", upstream.rss_peak_mib, ours.rss_peak_mib, "MiB"),
        (
            "CPU (user + sys) from the mass taint to the end",
            upstream.cpu_s,
            ours.cpu_s,
            "s",
        ),
        (
            "API server CPU from the start to synced",
            upstream.apiserver_cpu_initial_s,
            ours.apiserver_cpu_initial_s,
            "s",
        ),
        (
            "API server CPU from the mass taint to the end",
            upstream.apiserver_cpu_s,
            ours.apiserver_cpu_s,
            "s",
        ),
        (
            "pods evicted",
            upstream.evicted as f64,
            ours.evicted as f64,
            "",
        ),
    ];
    for (label, theirs, mine, unit) in rows {
        s.push_str(&format!(
            "| {label} | {theirs:.1} {unit} | {mine:.1} {unit} | {} |\n",
            ratio(mine, theirs)
        ));
    }
    for (label, theirs, mine) in [
        ("p50", upstream.server_time_p50_ms, ours.server_time_p50_ms),
        ("p99", upstream.server_time_p99_ms, ours.server_time_p99_ms),
    ] {
        let cell = |v: Option<f64>| v.map_or_else(|| "–".to_string(), |v| format!("{v:.1} ms"));
        s.push_str(&format!(
            "| API server's own time on a tolerating pod's eviction writes (audit: status PATCH + DELETE, received → completed), {label} | {} | {} | {} |\n",
            cell(theirs),
            cell(mine),
            match (mine, theirs) {
                (Some(m), Some(t)) => ratio(m, t),
                _ => "–".to_string(),
            }
        ));
    }
    if let (Some(a), Some(b)) = (ours.controller_within_25ms, ours.controller_within_100ms) {
        s.push_str(&format!(
            "| deletions done within 25 / 100 ms of the deadline, by the controller's clock | – | {:.1}% / {:.1}% | |\n",
            a * 100.0,
            b * 100.0
        ));
    }
    if let Some(d) = ours.events_dropped {
        let posted = |o: &Outcome| o.requests.get("POST events").copied().unwrap_or(0.0);
        s.push_str(&format!(
            "| Events posted by all clients (noexecute's dropped, queue full) | {:.0} | {:.0} ({d:.0} dropped) | |\n",
            posted(upstream),
            posted(ours)
        ));
    }
    s.push_str(&format!(
        "| wrongly evicted / missed | {} / {} | {} / {} | |\n",
        upstream.wrong, upstream.missed, ours.wrong, ours.missed
    ));
    if upstream.timed_at_relist + ours.timed_at_relist > 0 {
        s.push_str(&format!(
            "| evictions timed only by the harness's relist (late bound) | {} | {} | |\n",
            upstream.timed_at_relist, ours.timed_at_relist
        ));
    }
    let keys: BTreeSet<&String> = upstream
        .requests
        .keys()
        .chain(ours.requests.keys())
        .collect();
    for k in keys {
        if !(k.contains("pods")
            || k.contains("events")
            || k.contains("leases")
            || k.contains("nodes"))
        {
            continue;
        }
        let theirs = upstream.requests.get(k).copied().unwrap_or(0.0);
        let mine = ours.requests.get(k).copied().unwrap_or(0.0);
        s.push_str(&format!(
            "| API requests: {k} | {theirs:.0} | {mine:.0} | {} |\n",
            ratio(mine, theirs)
        ));
    }
    let keys: BTreeSet<&String> = upstream
        .server_ms
        .keys()
        .chain(ours.server_ms.keys())
        // Short requests only: a watch's or a list's mean is no per-request floor.
        .filter(|k| {
            k.contains("pods")
                && ["GET ", "PATCH ", "POST ", "PUT ", "DELETE "]
                    .iter()
                    .any(|v| k.starts_with(v))
        })
        .collect();
    for k in keys {
        let cell = |o: &Outcome| {
            o.server_ms
                .get(k)
                .map_or_else(|| "–".to_string(), |ms| format!("{ms:.1} ms"))
        };
        s.push_str(&format!(
            "| API server's mean time per request (every client's): {k} | {} | {} | |\n",
            cell(upstream),
            cell(ours)
        ));
    }
    if upstream.synced.len() > 1 || ours.synced.len() > 1 {
        let each = |o: &Outcome| {
            let times: Vec<String> = o
                .synced
                .iter()
                .map(|x| format!("{:.2}", x.time_s))
                .collect();
            format!("{} s", times.join(", "))
        };
        s.push_str(&format!(
            "| time to synced, each start (the median is above) | {} | {} | |\n",
            each(upstream),
            each(ours)
        ));
        let each = |o: &Outcome| {
            let cells: Vec<String> = o
                .synced
                .iter()
                .map(|x| format!("{:.1}/{:.1}", x.apiserver_cpu_s, x.server.gc_cpu_s))
                .collect();
            format!("{} s", cells.join(", "))
        };
        s.push_str(&format!(
            "| API server CPU / of it GC, each start | {} | {} | |\n",
            each(upstream),
            each(ours)
        ));
        let checks = |o: &Outcome| {
            let n: f64 = o.synced.iter().map(|x| x.server.consistency_checks).sum();
            let lists: f64 = o.synced.iter().map(|x| x.server.etcd_lists).sum();
            format!("{n} / {lists}")
        };
        s.push_str(&format!(
            "| consistency checks / etcd lists in the starts' windows | {} | {} | |\n",
            checks(upstream),
            checks(ours)
        ));
    }
    s
}

/// The median of the runs that have the figure; `None` if none has.
fn median_of_some(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let values: Vec<f64> = values.flatten().collect();
    (!values.is_empty()).then(|| median(values))
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// One controller's runs as one outcome: the median of each figure; the counts of wrong and
/// missed evictions are the worst run's, so a single bad run shows.
pub fn medians(runs: &[Outcome]) -> Option<Outcome> {
    let first = runs.first()?.clone();
    let m = |f: fn(&Outcome) -> f64| median(runs.iter().map(f).collect());
    Some(Outcome {
        time_to_synced_s: m(|o| o.time_to_synced_s),
        cpu_initial_s: m(|o| o.cpu_initial_s),
        makespan_s: m(|o| o.makespan_s),
        lag_p50_ms: m(|o| o.lag_p50_ms),
        lag_p99_ms: m(|o| o.lag_p99_ms),
        lag_max_ms: m(|o| o.lag_max_ms),
        server_time_p50_ms: median_of_some(runs.iter().map(|o| o.server_time_p50_ms)),
        server_time_p99_ms: median_of_some(runs.iter().map(|o| o.server_time_p99_ms)),
        server_timed: runs.iter().map(|o| o.server_timed).min().unwrap_or(0),
        rss_steady_mib: m(|o| o.rss_steady_mib),
        rss_peak_mib: m(|o| o.rss_peak_mib),
        cpu_s: m(|o| o.cpu_s),
        apiserver_cpu_initial_s: m(|o| o.apiserver_cpu_initial_s),
        apiserver_cpu_s: m(|o| o.apiserver_cpu_s),
        evicted: m(|o| o.evicted as f64) as usize,
        // Every run's starts, not a median.
        synced: runs.iter().flat_map(|o| o.synced.clone()).collect(),
        // Not a median: the slowest of all runs.
        slowest: runs
            .iter()
            .filter_map(|o| o.slowest.clone())
            .max_by(|a, b| a.lag_ms.total_cmp(&b.lag_ms)),
        wrong: runs.iter().map(|o| o.wrong).max().unwrap_or(0),
        timed_at_relist: runs.iter().map(|o| o.timed_at_relist).max().unwrap_or(0),
        missed: runs.iter().map(|o| o.missed).max().unwrap_or(0),
        ..first
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_s_log_lines_are_its_own_not_a_longer_name_s() {
        let log = "t1 \u{1b}[2mINFO\u{1b}[0m evicting pod=ns/p-1 node=n\nt2 evicting pod=ns/p-10\nt3 request pod=ns/p-1\nt4 nothing";
        assert_eq!(
            lines_about(log, "ns/p-1"),
            [
                "t1 INFO evicting pod=ns/p-1 node=n",
                "t3 request pod=ns/p-1"
            ]
        );
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }

    #[test]
    fn the_server_s_own_work_is_summed_over_series_and_told_apart_from_longer_names() {
        let before = "# HELP go_gc_cycles_total_gc_cycles_total x\n\
go_gc_cycles_total_gc_cycles_total 10\n\
go_cpu_classes_gc_total_cpu_seconds_total 1.5\n\
apiserver_storage_list_total{resource=\"pods\"} 2\n\
apiserver_storage_list_total{resource=\"nodes\"} 1\n\
apiserver_storage_list_total_other 100\n\
go_gc_heap_live_bytes 2.097152e+06\n";
        let after = "go_gc_cycles_total_gc_cycles_total 13\n\
go_cpu_classes_gc_total_cpu_seconds_total 4\n\
apiserver_storage_consistency_checks_total{resource=\"pods\",status=\"success\"} 1\n\
apiserver_storage_list_total{resource=\"pods\"} 4\n\
apiserver_storage_list_total{resource=\"nodes\"} 1\n\
apiserver_terminated_watchers_total{resource=\"pods\"} 1\n";
        let work = ServerWork::read(after).since(&ServerWork::read(before));
        assert_eq!(work.gc_cycles, 3.0);
        assert_eq!(work.gc_cpu_s, 2.5);
        assert_eq!(work.consistency_checks, 1.0);
        assert_eq!(work.etcd_lists, 2.0);
        assert_eq!(work.terminated_watchers, 1.0);
        assert_eq!(work.init_events, 0.0);
        assert_eq!(heap_live_mib(before), Some(2.0));
        assert_eq!(heap_live_mib(after), None);
        let apf = "apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"exempt\",priority_level=\"exempt\"} 9\n\
apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"noexecute-bench-exempt\",priority_level=\"exempt\"} 4\n\
apiserver_flowcontrol_current_executing_requests{flow_schema=\"noexecute-bench-exempt\",priority_level=\"exempt\"} 1\n";
        assert_eq!(exempted(apf), 4.0);
        assert_eq!(exempted(before), 0.0);
    }

    #[test]
    fn a_counter_is_read_by_its_whole_name() {
        let text = "# HELP noexecute_events_dropped Events not sent.\n\
# TYPE noexecute_events_dropped counter\n\
noexecute_events_dropped_total_x 5\n\
noexecute_events_dropped_total 12 1700000000000\n\
noexecute_events_fenced_total 3\n";
        assert_eq!(counter(text, "noexecute_events_dropped_total"), Some(12.0));
        assert_eq!(counter(text, "noexecute_events_fenced_total"), Some(3.0));
        assert_eq!(counter(text, "noexecute_events"), None);
    }

    #[test]
    fn a_pod_s_eviction_writes_are_its_status_patches_and_deletes_in_its_namespace() {
        let entry = |verb: &str, sub: &str, ns: &str, name: &str, at_ms: i64, took_ms: i64| {
            let received = k8s_openapi::jiff::Timestamp::from_millisecond(1_000_000 + at_ms)
                .unwrap_or_else(|e| panic!("{e}"));
            AuditEntry {
                verb: verb.into(),
                resource: "pods".into(),
                subresource: sub.into(),
                namespace: ns.into(),
                name: name.into(),
                user: "u".into(),
                user_agent: "a".into(),
                code: 200,
                received,
                completed: received
                    .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(took_ms))
                    .unwrap_or_else(|e| panic!("{e}")),
            }
        };
        let audit = vec![
            entry("delete", "", "b", "p1", 50, 30),
            entry("create", "", "b", "p1", 0, 5),
            entry("patch", "status", "b", "p1", 10, 20),
            entry("patch", "", "b", "p1", 20, 7),
            entry("delete", "", "other", "p1", 60, 9),
            entry("patch", "status", "b", "p2", 10, 4),
        ];
        let writes = eviction_writes(audit, "b");
        let p1 = &writes["p1"];
        assert_eq!(
            p1.iter().map(|e| e.verb.as_str()).collect::<Vec<_>>(),
            ["patch", "delete"],
            "the status patch first, then the DELETE; not the create, the metadata patch or another namespace's"
        );
        assert_eq!(p1.iter().map(AuditEntry::server_ms).sum::<f64>(), 50.0);
        assert_eq!(writes["p2"].len(), 1);
        assert!(
            audit_line(&p1[0]).contains("patch pods/status received"),
            "{}",
            audit_line(&p1[0])
        );
        assert!(
            audit_line(&p1[1]).contains("(30 ms, 200)"),
            "{}",
            audit_line(&p1[1])
        );
    }

    #[test]
    fn this_process_s_stat_reads_as_running_and_using_cpu() {
        let me = std::process::id();
        // Spend a little CPU so that utime + stime has something to count.
        let spun: u64 = (0..5_000_000u64).fold(0, |a, b| a.wrapping_add(b * b));
        assert_ne!(spun, 1);
        let (cpu, rss, hwm) = process_stats(me).unwrap_or_else(|e| panic!("{e}"));
        assert!(cpu >= 0.0 && rss > 0.0 && hwm >= rss, "{cpu} {rss} {hwm}");
        let up = running_for(me).unwrap_or_else(|e| panic!("{e}"));
        // Started since boot and no longer ago than the machine has been up.
        assert!((0.0..1e7).contains(&up), "{up}");
        assert!(stat_field(&stat_fields(me).unwrap_or_else(|e| panic!("{e}")), 999).is_err());
    }
}
