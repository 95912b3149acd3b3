//! The executor: carries out the pipeline's [`Attempt`]s against the API server and reports
//! how each went. It never decides *whether*, *when* or *how* to evict (the pipeline chose the
//! request sequence); it only sends requests, stops when told, and classifies the answers.
//!
//! A two-request attempt (the usual first one):
//! 1. Add the `DisruptionTarget` condition (reason `DeletionByTaintManager`, `observedGeneration`
//!    from the watch) with a status patch that carries the UID as a precondition. Its answer is
//!    the live pod: gone, another UID, or already terminating, and the eviction is over
//!    (`Gone`); a terminating pod never gets a second delete.
//! 2. DELETE with preconditions on the UID *and* the resource version the patch returned, with
//!    the pod's own grace period. If anything changed the pod in between, the DELETE is refused
//!    and the pipeline retries the careful way.
//!
//! The careful way (retries, dry run, Eviction-API mode, the stale-cache guard) is upstream's
//! three-request sequence, made safe: GET the pod live (gone, replaced or terminating: `Gone`),
//! re-read the node if the guard applies, then add the condition unless it is there and DELETE
//! with a UID precondition, or POST an Eviction (whose refusals count towards
//! `--pdb-timeout`), or, in a dry run, stop.
//!
//! **Stopping.** Each attempt has two tokens the driver fires when the pipeline says so:
//! *cancel* (send nothing more) and *hold* (the brake: send nothing if nothing was written
//! yet). Before every request the attempt waits for the shared client-side rate limiter (or
//! the cancel, which gives the token back), then checks the cancel again and, before a
//! mutating request, the hold (until its first write) and the leadership fence for the
//! attempt's own term ([`Leadership::may_write`]: that term, before its deadline). A stopped
//! attempt reports `Cancelled`. Every request is bounded by a timeout. kube's built-in retries
//! are off, so every request is ours and counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use kube::api::{DeleteParams, GetParams, Patch, PatchParams, PostParams, Preconditions};
use kube::core::Request;
use noexecute_engine::pipeline::{
    Attempt, AttemptReport, AttemptResult, Finish, GoneReason, Plan, StaleGuard,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::clock::Clock;
use super::format::{ContentType, Failure, Requests, protobuf_body};
use super::lease::Leadership;
use super::metrics::Metrics;
use super::ratelimit::RateLimiter;
use crate::adapters::proto;
use crate::adapters::slim::{ExecPod as Pod, SlimNode};

pub const CONDITION_TYPE: &str = "DisruptionTarget";
pub const CONDITION_REASON: &str = "DeletionByTaintManager";
pub const CONDITION_MESSAGE: &str = "Taint manager: deleting due to NoExecute taint";
/// The condition upstream's device-taint-eviction-controller writes (`docs/parity.md` §22.5),
/// without `observedGeneration`.
pub const DEVICE_CONDITION_REASON: &str = "DeletionByDeviceTaintManager";
pub const DEVICE_CONDITION_MESSAGE: &str = "Device Taint manager: deleting due to NoExecute taint";

/// What the executor needs besides its channels.
#[derive(Clone, Debug)]
pub struct ExecutorConfig {
    /// Bound on every request (within the lease's fence when electing a leader).
    pub request_timeout: Duration,
    /// How long the guard's node reads are shared by the pods of one node.
    pub node_read_ttl: Duration,
    /// `--node-selector` as the driver applies it: a fresh read of a node that no longer
    /// matches it justifies no eviction.
    pub node_selector: Option<crate::adapters::selector::Selector>,
    /// The format of requests and answers (`--api-content-type`).
    pub content_type: ContentType,
}

/// The stale-cache guard: fresh node reads, shared for a short while by the pods of one node.
/// The guard's recent node reads: when, whether the node matched `--node-selector`, its taints.
type NodeReads = Mutex<HashMap<String, (std::time::Instant, bool, Vec<noexecute_engine::Taint>)>>;

#[derive(Clone)]
pub struct Executor {
    requests: Requests,
    limiter: Arc<RateLimiter>,
    leadership: Leadership,
    reports: mpsc::UnboundedSender<AttemptReport>,
    metrics: Metrics,
    clock: Clock,
    config: ExecutorConfig,
    node_reads: Arc<NodeReads>,
    tasks: TaskTracker,
    /// Where an attempt's announcement goes, just before its first write.
    events: Option<super::events::EventSink>,
}

/// How the driver stops an attempt, and what the attempt has done so far.
pub struct Control {
    /// Send nothing more.
    pub cancel: CancellationToken,
    /// The brake holds it: send nothing if nothing was written yet. Make it a child of
    /// `cancel` (a cancel holds too).
    pub hold: CancellationToken,
    wrote: std::sync::atomic::AtomicBool,
}

impl Control {
    pub fn new(cancel: CancellationToken, hold: CancellationToken) -> Control {
        Control {
            cancel,
            hold,
            wrote: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// Why a request was not answered.
#[derive(Debug)]
enum CallError {
    Status(u16, String),
    Other(String),
    /// Cancelled, or no longer leading: nothing was sent.
    Stopped,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Status(code, message) => write!(f, "{code}: {message}"),
            CallError::Other(message) => f.write_str(message),
            CallError::Stopped => f.write_str("stopped"),
        }
    }
}

/// A precondition on the UID failed: another pod of that name. (A budget-update conflict or a
/// changed resourceVersion is not this.)
fn uid_conflict(message: &str) -> bool {
    message.contains("UID")
}

/// The answer to a failed request, as an attempt's result.
fn failed(what: &str, e: CallError) -> AttemptResult {
    match e {
        CallError::Stopped => AttemptResult::Cancelled,
        e => AttemptResult::Failed {
            error: format!("{what}: {e}"),
            refused: false,
        },
    }
}

impl Executor {
    pub fn new(
        client: Client,
        limiter: Arc<RateLimiter>,
        leadership: Leadership,
        reports: mpsc::UnboundedSender<AttemptReport>,
        metrics: Metrics,
        clock: Clock,
        config: ExecutorConfig,
    ) -> Executor {
        Executor {
            requests: Requests::new(client, config.content_type),
            limiter,
            leadership,
            reports,
            metrics,
            clock,
            config,
            node_reads: Arc::new(Mutex::new(HashMap::new())),
            tasks: TaskTracker::new(),
            events: None,
        }
    }

    /// How this executor speaks to the API server (to share its switch to JSON).
    pub fn requests(&self) -> Requests {
        self.requests.clone()
    }

    /// Record attempts' announcements ("Marking for deletion") here.
    pub fn with_events(mut self, events: super::events::EventSink) -> Executor {
        self.events = Some(events);
        self
    }

    /// The attempt's announcement, recorded once (`prefix`: "[dry-run] " for a dry run).
    fn announce(&self, a: &Attempt, prefix: &str) {
        if let (Some(events), Some(event)) = (&self.events, &a.announce) {
            let mut event = event.clone();
            event.message = format!("{prefix}{}", event.message);
            events.record(&a.pod, event, a.term);
        }
    }

    /// Carry out an attempt; its report arrives on the reports channel. The pipeline bounds how
    /// many run at once, so one task each is cheap.
    pub fn start(&self, attempt: Attempt, control: Control) {
        let this = self.clone();
        tracing::debug!(pod = %attempt.pod, attempt = attempt.id.0, late_ms = self.clock.now().since(attempt.due_at).as_millis() as u64, "attempt started");
        self.tasks.spawn(async move {
            let result = this.attempt(&attempt, &control).await;
            // An attempt that failed before it could write still tried to carry the eviction
            // out (upstream announces before its requests, whatever they answer); only one
            // that was stopped announces nothing. The pipeline drops the announcement after
            // any report but `Cancelled`.
            if matches!(result, AttemptResult::Failed { .. })
                && !control.wrote.load(std::sync::atomic::Ordering::Relaxed)
            {
                this.announce(&attempt, "");
            }
            this.record(&attempt, &result);
            let _ = this.reports.send(AttemptReport {
                attempt: attempt.id,
                result,
            });
        });
    }

    /// Wait for every attempt started to end (on shutdown, after cancelling them).
    pub async fn drain(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Metrics and logs for an ended attempt.
    fn record(&self, a: &Attempt, result: &AttemptResult) {
        match result {
            AttemptResult::Evicted => {
                if a.fallback() {
                    self.metrics.pdb_timeouts.inc();
                }
                let (count, duration) = if a.device.is_some() {
                    (
                        &self.metrics.device_pod_deletions,
                        &self.metrics.device_pod_deletion_duration,
                    )
                } else {
                    (
                        &self.metrics.pod_deletions,
                        &self.metrics.pod_deletion_duration,
                    )
                };
                count.inc();
                duration.observe(self.clock.now().since(a.deadline).as_secs_f64());
                tracing::info!(pod = %a.pod, uid = %a.pod.uid, "evicted pod");
            }
            AttemptResult::WouldEvict => {
                self.metrics.dry_run_evictions.inc();
                tracing::info!(pod = %a.pod, uid = %a.pod.uid, "dry run: would evict pod");
            }
            // Counted by the driver, only when the pipeline takes the report as live.
            AttemptResult::Stale => {
                tracing::info!(pod = %a.pod, node = ?a.pod.node, "the node's fresh taints do not justify the eviction; dropped (stale cache)");
            }
            AttemptResult::Gone(why) => {
                tracing::info!(pod = %a.pod, why = why.as_str(), "nothing to evict");
            }
            AttemptResult::Failed { error, .. } => {
                tracing::warn!(pod = %a.pod, %error, "eviction attempt failed; will retry");
            }
            AttemptResult::Cancelled => {
                tracing::info!(pod = %a.pod, "eviction attempt stopped before its next request");
            }
        }
    }

    /// Wait for `tokens` of the rate limiter (0: paid for by the previous request of the
    /// attempt), stopping at the cancel (or, while nothing is written, the hold); then check
    /// the cancel, the hold before the first write, and the fence of the attempt's term before
    /// every write; then run `request` within the timeout.
    async fn call<T>(
        &self,
        verb: &'static str,
        tokens: u32,
        a: &Attempt,
        control: &Control,
        request: impl std::future::Future<Output = Result<T, Failure>>,
    ) -> Result<T, CallError> {
        use std::sync::atomic::Ordering;
        let wrote = control.wrote.load(Ordering::Relaxed);
        // Until the first write, a hold stops the wait too (the hold fires with the cancel).
        let stop = if wrote {
            &control.cancel
        } else {
            &control.hold
        };
        let queued = std::time::Instant::now();
        if tokens > 0 && !self.limiter.acquire_n_unless(tokens, stop).await {
            return Err(CallError::Stopped);
        }
        if control.cancel.is_cancelled()
            || (!wrote && control.hold.is_cancelled())
            || (verb != "get" && !self.leadership.may_write(a.term))
        {
            // Sent nothing: the tokens are not spent.
            self.limiter.give_back(tokens).await;
            return Err(CallError::Stopped);
        }
        // Upstream announces an eviction as it starts to carry it out: before the first write.
        if verb != "get" && !control.wrote.swap(true, Ordering::Relaxed) {
            self.announce(a, "");
        }
        let sent = std::time::Instant::now();
        let answer = tokio::time::timeout(self.config.request_timeout, request).await;
        // A slow eviction's timeline: the wait for the rate limiter, then the round trip.
        tracing::debug!(
            pod = %a.pod,
            verb,
            limiter_ms = (sent - queued).as_millis() as u64,
            round_trip_ms = sent.elapsed().as_millis() as u64,
            ok = matches!(answer, Ok(Ok(_))),
            "request"
        );
        match answer {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) if e.status().is_some() => {
                let (code, message) = e.status().unwrap_or_default();
                // Not found is an answer, and a budget's 429 is counted on its own.
                if code != 404 && !(verb == "evict" && code == 429) {
                    self.metrics.api_error(verb);
                }
                Err(CallError::Status(code, message.to_string()))
            }
            Ok(Err(e)) => {
                self.metrics.api_error(verb);
                Err(CallError::Other(e.to_string()))
            }
            Err(_) => {
                self.metrics.api_error(verb);
                Err(CallError::Other(format!(
                    "{verb} timed out after {:?}",
                    self.config.request_timeout
                )))
            }
        }
    }

    /// [`Executor::call`] with a token paid ahead if there is one (and kept for the next
    /// request if this one is stopped before it is sent).
    async fn call_prepaid<T>(
        &self,
        verb: &'static str,
        prepaid: &mut Prepaid,
        a: &Attempt,
        control: &Control,
        request: impl std::future::Future<Output = Result<T, Failure>>,
    ) -> Result<T, CallError> {
        let tokens = prepaid.spend();
        let result = self.call(verb, tokens, a, control, request).await;
        if tokens == 0 && matches!(result, Err(CallError::Stopped)) {
            prepaid.0 += 1;
        }
        result
    }

    /// GET the pod.
    async fn get(&self, a: &Attempt) -> Result<Pod, Failure> {
        let path = pods_path(&a.pod.namespace);
        let name: &str = &a.pod.name;
        self.requests
            .object(|_| Request::new(&path).get(name, &GetParams::default()))
            .await
    }

    /// Add the condition with a status patch preconditioned on the UID; the patched pod.
    async fn patch_condition(
        &self,
        a: &Attempt,
        uid: &str,
        generation: Option<i64>,
    ) -> Result<Pod, Failure> {
        let path = pods_path(&a.pod.namespace);
        let name: &str = &a.pod.name;
        let patch = condition_patch(uid, generation, a.device.is_some());
        let (params, patch) = (PatchParams::default(), Patch::Strategic(&patch));
        self.requests
            .object(|_| Request::new(&path).patch_subresource("status", name, &params, &patch))
            .await
    }

    /// DELETE the pod, preconditioned on its UID (and resource version, if given).
    async fn delete(
        &self,
        a: &Attempt,
        uid: &str,
        resource_version: Option<&str>,
    ) -> Result<(), Failure> {
        let path = pods_path(&a.pod.namespace);
        let name: &str = &a.pod.name;
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: resource_version.map(str::to_string),
            }),
            ..DeleteParams::default()
        };
        self.requests
            .done(|format| {
                let request = Request::new(&path).delete(name, &params);
                match format {
                    ContentType::Protobuf => protobuf_body(request, proto::delete_options(&params)),
                    ContentType::Json => request,
                }
            })
            .await
    }

    async fn attempt(&self, a: &Attempt, control: &Control) -> AttemptResult {
        let uid = a.pod.uid.to_string();
        let (guard, finish) = match &a.plan {
            Plan::PatchThenDelete => return self.patch_then_delete(a, &uid, control).await,
            Plan::ReadFirst { guard, finish } => (*guard, *finish),
        };
        // Every request the attempt may send, paid for at once with the GET, as the two-request
        // attempt does: its writes then follow its read at once instead of queueing behind
        // every attempt that started meanwhile (under a backlog, a pod marked for deletion
        // would wait seconds for its DELETE). What it does not send goes back.
        let writes = match finish {
            Finish::Nothing => 0,
            Finish::Evict => 1,
            Finish::Delete { .. } => 2,
        };
        let all = 1 + u32::from(guard.is_some()) + writes;
        let mut prepaid = Prepaid(0);
        let result = self
            .read_first(a, &uid, guard, finish, control, all, &mut prepaid)
            .await;
        self.limiter.give_back(prepaid.0).await;
        result
    }

    /// The careful attempt: read the pod (and, for the stale-cache guard, its node), then
    /// finish. `all` tokens are taken with the GET; `prepaid` counts those not spent yet.
    #[allow(clippy::too_many_arguments)]
    async fn read_first(
        &self,
        a: &Attempt,
        uid: &str,
        guard: Option<StaleGuard>,
        finish: Finish,
        control: &Control,
        all: u32,
        prepaid: &mut Prepaid,
    ) -> AttemptResult {
        let pod = match self.call("get", all, a, control, self.get(a)).await {
            // Stopped before it was sent: `call` gave every token back.
            Err(CallError::Stopped) => return AttemptResult::Cancelled,
            result => {
                prepaid.0 = all - 1;
                match result {
                    Ok(p) => p,
                    Err(CallError::Status(404, _)) => {
                        return AttemptResult::Gone(GoneReason::NotFound);
                    }
                    Err(e) => return failed("get", e),
                }
            }
        };
        if pod.metadata.uid.as_deref() != Some(uid) {
            return AttemptResult::Gone(GoneReason::Replaced);
        }
        if pod.metadata.deletion_timestamp.is_some() {
            return AttemptResult::Gone(GoneReason::Terminating);
        }
        if let Some(guard) = guard {
            match self.confirm(a, &pod, guard, control, prepaid).await {
                Ok(true) => {}
                Ok(false) => return AttemptResult::Stale,
                Err(e) => return failed("stale-cache guard", e),
            }
        }
        match finish {
            Finish::Nothing => {
                if control.cancel.is_cancelled() || control.hold.is_cancelled() {
                    AttemptResult::Cancelled
                } else {
                    self.announce(a, "[dry-run] ");
                    AttemptResult::WouldEvict
                }
            }
            Finish::Evict => self.evict(a, uid, control, prepaid).await,
            Finish::Delete { fallback } => {
                if fallback {
                    tracing::warn!(pod = %a.pod, "the Eviction API refused this eviction for longer than --pdb-timeout; deleting");
                }
                self.patch_and_delete(a, &pod, uid, control, prepaid).await
            }
        }
    }

    /// The careful finish: the condition unless it is there, then DELETE with a UID
    /// precondition.
    async fn patch_and_delete(
        &self,
        a: &Attempt,
        pod: &Pod,
        uid: &str,
        control: &Control,
        prepaid: &mut Prepaid,
    ) -> AttemptResult {
        if !has_condition(pod) {
            let patch = self.patch_condition(a, uid, pod.metadata.generation);
            match self.call_prepaid("patch", prepaid, a, control, patch).await {
                Ok(_) => {}
                Err(CallError::Status(404, _)) => return AttemptResult::Gone(GoneReason::NotFound),
                Err(CallError::Status(409, m)) if uid_conflict(&m) => {
                    return AttemptResult::Gone(GoneReason::Replaced);
                }
                Err(e) => return failed("patch status", e),
            }
        }
        match self
            .call_prepaid("delete", prepaid, a, control, self.delete(a, uid, None))
            .await
        {
            Ok(_) => AttemptResult::Evicted,
            Err(CallError::Status(404, _)) => AttemptResult::Gone(GoneReason::NotFound),
            Err(CallError::Status(409, m)) if uid_conflict(&m) => {
                AttemptResult::Gone(GoneReason::Replaced)
            }
            Err(e) => failed("delete", e),
        }
    }

    /// The two-request attempt: the condition patch's answer stands in for the GET, and the
    /// DELETE is conditional on the pod not having changed since.
    async fn patch_then_delete(&self, a: &Attempt, uid: &str, control: &Control) -> AttemptResult {
        // Both requests' tokens at once, so the DELETE follows the patch at once: an eviction
        // is done as soon as it starts, and a hold (the brake) finds the attempts waiting
        // behind it with nothing written.
        let patched = match self
            .call(
                "patch",
                2,
                a,
                control,
                self.patch_condition(a, uid, Some(a.generation)),
            )
            .await
        {
            Ok(p) => p,
            Err(e) => {
                // The DELETE's token was taken with the patch's: unused, it goes back.
                if !matches!(e, CallError::Stopped) {
                    self.limiter.give_back(1).await;
                }
                return match e {
                    CallError::Status(404, _) => AttemptResult::Gone(GoneReason::NotFound),
                    CallError::Status(409, m) if uid_conflict(&m) => {
                        AttemptResult::Gone(GoneReason::Replaced)
                    }
                    e => failed("patch status", e),
                };
            }
        };
        let ended = if patched.metadata.uid.as_deref() != Some(uid) {
            Some(AttemptResult::Gone(GoneReason::Replaced))
        } else if patched.metadata.deletion_timestamp.is_some() {
            Some(AttemptResult::Gone(GoneReason::Terminating))
        } else {
            None
        };
        if let Some(result) = ended {
            self.limiter.give_back(1).await;
            return result;
        }
        let delete = self.delete(a, uid, patched.metadata.resource_version.as_deref());
        match self.call("delete", 0, a, control, delete).await {
            Ok(_) => AttemptResult::Evicted,
            Err(CallError::Status(404, _)) => AttemptResult::Gone(GoneReason::NotFound),
            // Replaced, or changed since the patch (perhaps being deleted by someone else):
            // the retry reads it first.
            Err(CallError::Status(409, m)) => AttemptResult::Failed {
                error: format!("the pod changed after the condition patch: {m}"),
                refused: false,
            },
            Err(e) => failed("delete", e),
        }
    }

    /// An Eviction (policy/v1), so PodDisruptionBudgets apply. The Eviction API sets its own
    /// DisruptionTarget condition (reason EvictionByEvictionAPI), so ours is not patched. Any
    /// refusal but "not found" and "another UID" counts towards `--pdb-timeout`: a budget's
    /// 429, the 500 of a pod under two budgets, a 403, a budget-update 409.
    async fn evict(
        &self,
        a: &Attempt,
        uid: &str,
        control: &Control,
        prepaid: &mut Prepaid,
    ) -> AttemptResult {
        let options = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let path = pods_path(&a.pod.namespace);
        let (namespace, name): (&str, &str) = (&a.pod.namespace, &a.pod.name);
        // Its answer is a Status either way.
        let evict = self.requests.done(|format| {
            let post = |body| {
                Request::new(&path).create_subresource(
                    "eviction",
                    name,
                    &PostParams::default(),
                    body,
                )
            };
            match format {
                ContentType::Protobuf => {
                    protobuf_body(post(Vec::new()), proto::eviction(namespace, name, &options))
                }
                ContentType::Json => post(
                    eviction_json(namespace, name, &options)
                        .map_err(kube::core::request::Error::SerializeBody)?,
                ),
            }
        });
        match self.call_prepaid("evict", prepaid, a, control, evict).await {
            Ok(_) => AttemptResult::Evicted,
            Err(CallError::Status(404, _)) => AttemptResult::Gone(GoneReason::NotFound),
            Err(CallError::Status(409, m)) if uid_conflict(&m) => {
                AttemptResult::Gone(GoneReason::Replaced)
            }
            Err(CallError::Status(code, message)) => {
                if code == 429 {
                    self.metrics.pdb_blocked.inc();
                }
                AttemptResult::Failed {
                    error: format!("the Eviction API refused ({code}): {message}"),
                    refused: true,
                }
            }
            Err(e) => failed("evict", e),
        }
    }

    /// Fetch what the stale-cache guard judges: the node's current taints (read fresh, or
    /// shared from a read within the last moment). The judgement is the pipeline's
    /// ([`StaleGuard::justifies`]).
    async fn confirm(
        &self,
        a: &Attempt,
        pod: &Pod,
        guard: StaleGuard,
        control: &Control,
        prepaid: &mut Prepaid,
    ) -> Result<bool, CallError> {
        let Some(node) = a.pod.node.as_deref() else {
            return Ok(true);
        };
        let tolerations: Vec<noexecute_engine::Toleration> = pod
            .spec
            .tolerations
            .iter()
            .map(crate::adapters::convert::toleration)
            .collect();
        // A read shared from another pod's attempt may confirm an eviction, never drop one:
        // only a read made after this attempt began may say the eviction is stale.
        let cached = self.node_reads.lock().ok().and_then(|c| {
            c.get(node)
                .filter(|(at, _, _)| at.elapsed() < self.config.node_read_ttl)
                .map(|(_, selected, t)| (*selected, t.clone()))
        });
        let now = self.clock.now();
        if cached
            .is_some_and(|(selected, taints)| guard.justifies(selected, &taints, &tolerations, now))
        {
            return Ok(true);
        }
        let read = self
            .requests
            .object::<SlimNode>(|_| Request::new("/api/v1/nodes").get(node, &GetParams::default()));
        let fresh = match self.call_prepaid("get", prepaid, a, control, read).await {
            Ok(n) => n,
            // The node is gone: its taints no longer speak for anything.
            Err(CallError::Status(404, _)) => return Ok(false),
            Err(e) => return Err(e),
        };
        let selected = self.config.node_selector.as_ref().is_none_or(|s| {
            s.matches(
                fresh
                    .metadata
                    .labels
                    .as_ref()
                    .unwrap_or(&Default::default()),
            )
        });
        let taints: Vec<noexecute_engine::Taint> = fresh
            .spec
            .taints
            .iter()
            .map(crate::adapters::convert::taint)
            .collect();
        let justified = guard.justifies(selected, &taints, &tolerations, self.clock.now());
        if let Ok(mut c) = self.node_reads.lock() {
            if c.len() > 10_000 {
                c.clear();
            }
            c.insert(
                node.to_string(),
                (std::time::Instant::now(), selected, taints),
            );
        }
        Ok(justified)
    }
}

/// An Eviction in JSON. (kube's own Eviction body names its options `delete_options`, which
/// the API server ignores: the UID precondition would be lost.)
pub fn eviction_json(
    namespace: &str,
    name: &str,
    options: &DeleteParams,
) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": { "name": name, "namespace": namespace },
        "deleteOptions": options,
    }))
}

fn pods_path(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods")
}

/// Rate-limiter tokens an attempt took ahead and has not spent yet.
struct Prepaid(u32);

impl Prepaid {
    /// The tokens the next request must still take: none if one was paid for ahead.
    fn spend(&mut self) -> u32 {
        if self.0 > 0 {
            self.0 -= 1;
            0
        } else {
            1
        }
    }
}

/// Upstream's `UpdatePodCondition` says no patch is needed when an identical condition is
/// there.
/// Whether a taint manager's condition is there already: the node one's or the device one's,
/// whichever this attempt writes (a pod evicted for both keeps the first, `docs/deviations.md`
/// #25).
fn has_condition(pod: &Pod) -> bool {
    pod.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            c.type_ == CONDITION_TYPE
                && c.status == "True"
                && [false, true].into_iter().any(|device| {
                    let (reason, message) = condition_words(device);
                    c.reason.as_deref() == Some(reason) && c.message.as_deref() == Some(message)
                })
        })
    })
}

/// The condition's reason and message: the node controller's, or the device controller's.
fn condition_words(device: bool) -> (&'static str, &'static str) {
    if device {
        (DEVICE_CONDITION_REASON, DEVICE_CONDITION_MESSAGE)
    } else {
        (CONDITION_REASON, CONDITION_MESSAGE)
    }
}

/// The status patch: the condition (merged by type) and the UID as a precondition, as
/// upstream's `PatchPodStatus` builds it.
pub fn condition_patch(uid: &str, generation: Option<i64>, device: bool) -> serde_json::Value {
    let (reason, message) = condition_words(device);
    // Upstream's device controller sets no `observedGeneration`.
    let generation = generation.filter(|_| !device);
    let mut condition = serde_json::json!({
        "type": CONDITION_TYPE,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().round(k8s_openapi::jiff::Unit::Second).map(|t| t.to_string()).unwrap_or_default(),
    });
    if let Some(g) = generation.filter(|g| *g > 0) {
        condition["observedGeneration"] = serde_json::json!(g);
    }
    serde_json::json!({
        "metadata": { "uid": uid },
        "status": { "conditions": [condition] },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_carries_uid_and_condition() {
        let p = condition_patch("u-1", Some(3), false);
        assert_eq!(p["metadata"]["uid"], "u-1");
        assert_eq!(p["status"]["conditions"][0]["reason"], CONDITION_REASON);
        assert_eq!(p["status"]["conditions"][0]["observedGeneration"], 3);
        let p = condition_patch("u-1", Some(3), true);
        assert_eq!(
            p["status"]["conditions"][0]["reason"],
            DEVICE_CONDITION_REASON
        );
        assert_eq!(
            p["status"]["conditions"][0]["message"],
            DEVICE_CONDITION_MESSAGE
        );
        assert!(
            p["status"]["conditions"][0]
                .get("observedGeneration")
                .is_none()
        );
    }

    #[test]
    fn only_a_uid_precondition_means_replaced() {
        assert!(uid_conflict(
            "Precondition failed: UID in precondition: a, UID in object meta: b"
        ));
        assert!(!uid_conflict(
            "Operation cannot be fulfilled on poddisruptionbudgets.policy \"pdb\": the object has been modified; please apply your changes to the latest version and try again"
        ));
    }
}
