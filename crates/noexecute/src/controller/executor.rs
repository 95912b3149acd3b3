//! The executor: carries out `Evict` actions against the API server and reports the outcome
//! back to the engine. It never decides *whether* to evict, only how the attempt went.
//!
//! The first attempt of an eviction takes two requests:
//! 1. Add the `DisruptionTarget` condition (reason `DeletionByTaintManager`, `observedGeneration`
//!    from the watch) with a status patch that carries the UID as a precondition. Its answer is
//!    the live pod: gone, another UID, or already terminating, and the eviction is over
//!    (`Gone`); a terminating pod never gets a second delete.
//! 2. DELETE with preconditions on the UID *and* the resource version the patch returned, with
//!    the pod's own grace period. If anything changed the pod in between, the DELETE is refused
//!    and the attempt is retried the careful way.
//!
//! A retry (and every attempt in dry-run, Eviction-API or stale-cache-guard mode) is upstream's
//! three-request sequence, made safe:
//! 1. GET the pod (live, not from a cache). Gone, another UID, or already terminating: the
//!    eviction is over (`Gone`).
//! 2. Add the condition as above, unless an identical one is there.
//! 3. DELETE with a UID precondition.
//!
//! Failures are retried with exponential backoff and jitter, for as long as the engine keeps
//! the eviction pending. kube's built-in retries are off (see `run.rs`), so every attempt is
//! ours and is counted. Every request waits for the shared client-side rate limiter and is
//! bounded by a timeout; mutating requests check the leadership fence first.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use noexecute_engine::{EvictionId, Outcome, PodRef, Report, Time};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use super::clock::Clock;
use super::lease::Leadership;
use super::metrics::Metrics;
use super::ratelimit::{Hold, RateLimiter};
use crate::slim::ExecPod as Pod;

pub const CONDITION_TYPE: &str = "DisruptionTarget";
pub const CONDITION_REASON: &str = "DeletionByTaintManager";
pub const CONDITION_MESSAGE: &str = "Taint manager: deleting due to NoExecute taint";

/// A uniformly random number in [0, 1), for jitter. Not for anything that needs real
/// randomness.
pub fn random_fraction() -> f64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(0x9e37_79b9_7f4a_7c15);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Exponential backoff with jitter between failed attempts of one eviction.
#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The delay after the `failures`-th failure (1-based): initial × 2^(n-1), capped, ±25%.
    pub fn delay(&self, failures: u32) -> Duration {
        let exp = self
            .initial
            .saturating_mul(1u32 << failures.saturating_sub(1).min(20));
        exp.min(self.max).mul_f64(0.75 + 0.5 * random_fraction())
    }
}

/// One eviction to carry out.
#[derive(Clone, Debug)]
pub struct Job {
    pub pod: PodRef,
    pub eviction: EvictionId,
    pub deadline: Time,
    /// Decided at once (a taint not tolerated, or tolerated for 0 s) on a pod event: the
    /// stale-cache guard applies.
    pub immediate: bool,
    /// The pod's `metadata.generation` as last watched (the condition's `observedGeneration`).
    pub generation: i64,
}

/// The stale-cache guard: fresh node reads, shared for a second by the pods of one node.
struct NodeReads {
    ttl: Duration,
    cache: Mutex<HashMap<String, (std::time::Instant, Vec<noexecute_engine::Taint>)>>,
}

#[derive(Clone)]
pub struct Executor {
    client: Client,
    limiter: Arc<RateLimiter>,
    /// Jobs for the workers (each holds the limiter's urgency while queued).
    queue: mpsc::UnboundedSender<(Job, Hold)>,
    stopping: tokio_util::sync::CancellationToken,
    leadership: Leadership,
    reports: mpsc::UnboundedSender<Report>,
    metrics: Metrics,
    clock: Clock,
    request_timeout: Duration,
    backoff: Backoff,
    failures: Arc<Mutex<HashMap<EvictionId, u32>>>,
    tasks: TaskTracker,
    /// Decide and log, but patch and delete nothing.
    dry_run: bool,
    /// `Some` when the stale-cache guard is on.
    guard: Option<Arc<NodeReads>>,
    comparison_operators: bool,
    mode: crate::policy::EvictionMode,
    pdb_timeout: Option<Duration>,
    /// When a PodDisruptionBudget first blocked each eviction.
    blocked_since: Arc<Mutex<HashMap<EvictionId, std::time::Instant>>>,
}

/// What one attempt ended in.
enum Attempt {
    Evicted,
    /// Dry run: everything checked, nothing changed.
    WouldEvict,
    /// A fresh read of the node no longer justifies an immediate eviction.
    Stale,
    Gone(&'static str),
    Failed(String),
}

#[allow(clippy::too_many_arguments)]
impl Executor {
    pub fn new(
        client: Client,
        limiter: Arc<RateLimiter>,
        concurrency: usize,
        leadership: Leadership,
        reports: mpsc::UnboundedSender<Report>,
        metrics: Metrics,
        clock: Clock,
        request_timeout: Duration,
        dry_run: bool,
        stale_cache_guard: bool,
        comparison_operators: bool,
        mode: crate::policy::EvictionMode,
        pdb_timeout: Option<Duration>,
    ) -> Executor {
        let (queue, jobs) = mpsc::unbounded_channel();
        let executor = Executor {
            client,
            limiter,
            queue,
            stopping: tokio_util::sync::CancellationToken::new(),
            leadership,
            reports,
            metrics,
            clock,
            request_timeout,
            backoff: Backoff::default(),
            failures: Arc::new(Mutex::new(HashMap::new())),
            tasks: TaskTracker::new(),
            dry_run,
            guard: stale_cache_guard.then(|| {
                Arc::new(NodeReads {
                    ttl: Duration::from_secs(1),
                    cache: Mutex::new(HashMap::new()),
                })
            }),
            comparison_operators,
            mode,
            pdb_timeout,
            blocked_since: Arc::new(Mutex::new(HashMap::new())),
        };
        let jobs = Arc::new(tokio::sync::Mutex::new(jobs));
        for _ in 0..concurrency.max(1) {
            executor.tasks.spawn(executor.clone().work(jobs.clone()));
        }
        executor
    }

    /// Queue an attempt; a worker carries it out and its report arrives on the reports
    /// channel. Queued jobs cost a few hundred bytes each, not a task.
    pub fn submit(&self, job: Job) {
        // Queued work is urgent: events wait until the backlog is gone.
        let hold = self.limiter.hold();
        if self.queue.send((job, hold)).is_err() {
            tracing::warn!("the executor is stopped; eviction not carried out");
        }
    }

    /// One of `concurrency` workers: attempts jobs one after another until the queue closes
    /// or shutdown begins.
    async fn work(self, jobs: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<(Job, Hold)>>>) {
        loop {
            let next = {
                let mut jobs = jobs.lock().await;
                tokio::select! {
                    biased;
                    _ = self.stopping.cancelled() => None,
                    job = jobs.recv() => job,
                }
            };
            let Some((job, _hold)) = next else {
                return;
            };
            let outcome = self.attempt(&job).await;
            let report = self.conclude(&job, outcome);
            let _ = self.reports.send(report);
        }
    }

    /// The engine dropped this eviction: forget its failure count.
    pub fn forget(&self, eviction: EvictionId) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(&eviction);
        }
        if let Ok(mut b) = self.blocked_since.lock() {
            b.remove(&eviction);
        }
    }

    /// Wait for the attempts in flight (on shutdown).
    pub async fn drain(&self) {
        self.stopping.cancel();
        self.tasks.close();
        self.tasks.wait().await;
    }

    fn conclude(&self, job: &Job, attempt: Attempt) -> Report {
        let now = self.clock.now();
        let outcome = match attempt {
            Attempt::Evicted => {
                self.forget(job.eviction);
                self.metrics.pod_deletions.inc();
                self.metrics
                    .pod_deletion_duration
                    .observe(now.since(job.deadline).as_secs_f64());
                tracing::info!(pod = %job.pod, uid = %job.pod.uid, "evicted pod");
                Outcome::Evicted
            }
            Attempt::WouldEvict => {
                self.forget(job.eviction);
                self.metrics.dry_run_evictions.inc();
                tracing::info!(pod = %job.pod, uid = %job.pod.uid, "dry run: would evict pod");
                // The pod stays; the engine forgets this eviction and decides again on the
                // next change, as it would after a real eviction that someone undid.
                Outcome::Gone
            }
            Attempt::Stale => {
                self.forget(job.eviction);
                self.metrics.stale_evictions_avoided.inc();
                tracing::info!(pod = %job.pod, node = ?job.pod.node, "the node's fresh taints do not justify the eviction; dropped (stale cache)");
                Outcome::Gone
            }
            Attempt::Gone(why) => {
                self.forget(job.eviction);
                tracing::info!(pod = %job.pod, why, "nothing to evict");
                Outcome::Gone
            }
            Attempt::Failed(error) => {
                let failures = match self.failures.lock() {
                    Ok(mut f) => {
                        let n = f.entry(job.eviction).or_insert(0);
                        *n += 1;
                        *n
                    }
                    Err(_) => 1,
                };
                let delay = self.backoff.delay(failures);
                self.metrics.eviction_retries.inc();
                tracing::warn!(pod = %job.pod, %error, failures, retry_in = ?delay, "eviction attempt failed; will retry");
                Outcome::Failed {
                    retry_at: now.plus(delay),
                }
            }
        };
        Report {
            namespace: job.pod.namespace.clone(),
            name: job.pod.name.clone(),
            eviction: job.eviction,
            outcome,
        }
    }

    /// Wait for the rate limiter, then run `request` within the timeout.
    async fn call<T>(
        &self,
        verb: &'static str,
        request: impl std::future::Future<Output = kube::Result<T>>,
    ) -> Result<T, CallError> {
        self.limiter.acquire().await;
        match tokio::time::timeout(self.request_timeout, request).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(kube::Error::Api(status))) => {
                // Not found is an answer, and a budget's 429 is counted on its own.
                if status.code != 404 && !(verb == "evict" && status.code == 429) {
                    self.metrics.api_error(verb);
                }
                Err(CallError::Status(status.code, status.message.clone()))
            }
            Ok(Err(e)) => {
                self.metrics.api_error(verb);
                Err(CallError::Other(e.to_string()))
            }
            Err(_) => {
                self.metrics.api_error(verb);
                Err(CallError::Other(format!(
                    "{verb} timed out after {:?}",
                    self.request_timeout
                )))
            }
        }
    }

    async fn attempt(&self, job: &Job) -> Attempt {
        // Queued attempts of a replica that lost the lease (or is shutting down) stop here,
        // without spending requests.
        if !self.leadership.is_leading() {
            return Attempt::Failed("not the leader".into());
        }
        let api: Api<Pod> = Api::namespaced_with(
            self.client.clone(),
            &job.pod.namespace,
            &crate::slim::pod_resource(),
        );
        let name: &str = &job.pod.name;
        let uid = job.pod.uid.to_string();
        let first = self
            .failures
            .lock()
            .map(|f| !f.contains_key(&job.eviction))
            .unwrap_or(false);
        if first
            && !self.dry_run
            && self.mode == crate::policy::EvictionMode::Delete
            && !(job.immediate && self.guard.is_some())
        {
            return self.patch_then_delete(&api, job, &uid).await;
        }
        let pod = match self.call("get", api.get(name)).await {
            Ok(p) => p,
            Err(CallError::Status(404, _)) => return Attempt::Gone("pod not found"),
            Err(e) => return Attempt::Failed(format!("get: {e}")),
        };
        if pod.metadata.uid.as_deref() != Some(uid.as_str()) {
            return Attempt::Gone("pod was replaced (another UID)");
        }
        if pod.metadata.deletion_timestamp.is_some() {
            return Attempt::Gone("pod is already terminating");
        }
        if !self.leadership.is_leading() {
            return Attempt::Failed("not the leader".into());
        }
        if job.immediate
            && let Some(guard) = &self.guard
        {
            match self.confirm(guard, job, &pod).await {
                Ok(true) => {}
                Ok(false) => return Attempt::Stale,
                Err(e) => return Attempt::Failed(format!("stale-cache guard: {e}")),
            }
        }
        if self.dry_run {
            return Attempt::WouldEvict;
        }
        if self.mode == crate::policy::EvictionMode::Evict {
            match self.evict(job, name, &uid).await {
                // Blocked for longer than --pdb-timeout: fall through to a DELETE.
                None => {}
                Some(attempt) => return attempt,
            }
        }
        if !has_condition(&pod) {
            let patch = condition_patch(&uid, pod.metadata.generation);
            match self
                .call(
                    "patch",
                    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch)),
                )
                .await
            {
                Ok(_) => {}
                Err(CallError::Status(404, _)) => return Attempt::Gone("pod not found"),
                Err(CallError::Status(409, m)) if m.contains("UID") || m.contains("uid") => {
                    return Attempt::Gone("pod was replaced (UID precondition)");
                }
                Err(e) => return Attempt::Failed(format!("patch status: {e}")),
            }
        }
        if !self.leadership.is_leading() {
            return Attempt::Failed("not the leader".into());
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.call("delete", api.delete(name, &params)).await {
            Ok(_) => Attempt::Evicted,
            Err(CallError::Status(404, _)) => Attempt::Gone("pod not found"),
            Err(CallError::Status(409, _)) => Attempt::Gone("pod was replaced (UID precondition)"),
            Err(e) => Attempt::Failed(format!("delete: {e}")),
        }
    }
}

impl Executor {
    /// The two-request first attempt: the condition patch's answer stands in for the GET, and
    /// the DELETE is conditional on the pod not having changed since.
    async fn patch_then_delete(&self, api: &Api<Pod>, job: &Job, uid: &str) -> Attempt {
        let name: &str = &job.pod.name;
        let patch = condition_patch(uid, Some(job.generation));
        let patched = match self
            .call(
                "patch",
                api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch)),
            )
            .await
        {
            Ok(p) => p,
            Err(CallError::Status(404, _)) => return Attempt::Gone("pod not found"),
            Err(CallError::Status(409, m)) if m.contains("UID") || m.contains("uid") => {
                return Attempt::Gone("pod was replaced (UID precondition)");
            }
            Err(e) => return Attempt::Failed(format!("patch status: {e}")),
        };
        if patched.metadata.uid.as_deref() != Some(uid) {
            return Attempt::Gone("pod was replaced (another UID)");
        }
        if patched.metadata.deletion_timestamp.is_some() {
            return Attempt::Gone("pod is already terminating");
        }
        if !self.leadership.is_leading() {
            return Attempt::Failed("not the leader".into());
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: patched.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match self.call("delete", api.delete(name, &params)).await {
            Ok(_) => Attempt::Evicted,
            Err(CallError::Status(404, _)) => Attempt::Gone("pod not found"),
            // Replaced, or changed since the patch (perhaps being deleted by someone else):
            // the retry reads it first.
            Err(CallError::Status(409, m)) => {
                Attempt::Failed(format!("the pod changed after the condition patch: {m}"))
            }
            Err(e) => Attempt::Failed(format!("delete: {e}")),
        }
    }

    /// An Eviction (policy/v1), so PodDisruptionBudgets apply. `None` means: blocked by a
    /// budget for longer than --pdb-timeout, delete instead. The Eviction API sets its own
    /// DisruptionTarget condition (reason EvictionByEvictionAPI), so ours is not patched.
    async fn evict(&self, job: &Job, name: &str, uid: &str) -> Option<Attempt> {
        let params = kube::api::EvictParams {
            delete_options: Some(DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid.to_string()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            }),
            post_options: kube::api::PostParams::default(),
        };
        // The Eviction subresource is typed on the full Pod; its answer is a Status either way.
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), &job.pod.namespace);
        match self.call("evict", pods.evict(name, &params)).await {
            Ok(_) => Some(Attempt::Evicted),
            Err(CallError::Status(404, _)) => Some(Attempt::Gone("pod not found")),
            Err(CallError::Status(409, _)) => {
                Some(Attempt::Gone("pod was replaced (UID precondition)"))
            }
            Err(CallError::Status(429, message)) => {
                let since = self
                    .blocked_since
                    .lock()
                    .map(|mut b| {
                        *b.entry(job.eviction)
                            .or_insert_with(std::time::Instant::now)
                    })
                    .unwrap_or_else(|_| std::time::Instant::now());
                self.metrics.pdb_blocked.inc();
                match self.pdb_timeout {
                    Some(limit) if since.elapsed() >= limit => {
                        tracing::warn!(pod = %job.pod, blocked_for = ?since.elapsed(), "a PodDisruptionBudget blocked the eviction past --pdb-timeout; deleting");
                        self.metrics.pdb_timeouts.inc();
                        None
                    }
                    _ => Some(Attempt::Failed(format!(
                        "blocked by a PodDisruptionBudget: {message}"
                    ))),
                }
            }
            Err(e) => Some(Attempt::Failed(format!("evict: {e}"))),
        }
    }

    /// Whether the node's current taints (read fresh, or within the last second) still make
    /// this pod's eviction immediate.
    async fn confirm(&self, guard: &NodeReads, job: &Job, pod: &Pod) -> Result<bool, CallError> {
        use noexecute_engine::toleration::{TolerationTime, verdict};
        let Some(node) = job.pod.node.as_deref() else {
            return Ok(true);
        };
        let cached = guard.cache.lock().ok().and_then(|c| {
            c.get(node)
                .filter(|(at, _)| at.elapsed() < guard.ttl)
                .map(|(_, t)| t.clone())
        });
        let taints = match cached {
            Some(t) => t,
            None => {
                let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
                let fresh = match self.call("get", api.get(node)).await {
                    Ok(n) => n,
                    // The node is gone: its taints no longer speak for anything.
                    Err(CallError::Status(404, _)) => return Ok(false),
                    Err(e) => return Err(e),
                };
                let taints: Vec<noexecute_engine::Taint> = fresh
                    .spec
                    .and_then(|s| s.taints)
                    .unwrap_or_default()
                    .iter()
                    .map(crate::convert::taint)
                    .filter(|t| t.is_no_execute())
                    .collect();
                if let Ok(mut c) = guard.cache.lock() {
                    if c.len() > 10_000 {
                        c.clear();
                    }
                    c.insert(
                        node.to_string(),
                        (std::time::Instant::now(), taints.clone()),
                    );
                }
                taints
            }
        };
        let tolerations: Vec<noexecute_engine::Toleration> = pod
            .spec
            .tolerations
            .iter()
            .map(crate::convert::toleration)
            .collect();
        if taints.is_empty() {
            return Ok(false);
        }
        Ok(matches!(
            verdict(&taints, &tolerations, self.comparison_operators),
            noexecute_engine::Verdict::Untolerated { .. }
                | noexecute_engine::Verdict::Tolerated {
                    time: TolerationTime::Immediate,
                    ..
                }
        ))
    }
}

#[derive(Debug)]
enum CallError {
    Status(u16, String),
    Other(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Status(code, message) => write!(f, "{code}: {message}"),
            CallError::Other(message) => f.write_str(message),
        }
    }
}

/// Upstream's `UpdatePodCondition` says no patch is needed when an identical condition is
/// there.
fn has_condition(pod: &Pod) -> bool {
    pod.status.as_ref().is_some_and(|s| {
        s.conditions.iter().any(|c| {
            c.type_ == CONDITION_TYPE
                && c.status == "True"
                && c.reason.as_deref() == Some(CONDITION_REASON)
                && c.message.as_deref() == Some(CONDITION_MESSAGE)
        })
    })
}

/// The status patch: the condition (merged by type) and the UID as a precondition, as
/// upstream's `PatchPodStatus` builds it.
pub fn condition_patch(uid: &str, generation: Option<i64>) -> serde_json::Value {
    let mut condition = serde_json::json!({
        "type": CONDITION_TYPE,
        "status": "True",
        "reason": CONDITION_REASON,
        "message": CONDITION_MESSAGE,
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
    fn backoff_grows_and_caps() {
        let b = Backoff::default();
        let first = b.delay(1);
        assert!(first >= Duration::from_millis(150) && first <= Duration::from_millis(250));
        let fourth = b.delay(4);
        assert!(fourth >= Duration::from_millis(1200) && fourth <= Duration::from_millis(2000));
        let late = b.delay(40);
        assert!(late <= Duration::from_secs_f64(37.5) && late >= Duration::from_secs_f64(22.5));
    }

    #[test]
    fn jitter_is_in_range() {
        for _ in 0..1000 {
            let f = random_fraction();
            assert!((0.0..1.0).contains(&f));
        }
    }

    #[test]
    fn patch_carries_uid_and_condition() {
        let p = condition_patch("u-1", Some(3));
        assert_eq!(p["metadata"]["uid"], "u-1");
        assert_eq!(p["status"]["conditions"][0]["reason"], CONDITION_REASON);
        assert_eq!(p["status"]["conditions"][0]["observedGeneration"], 3);
    }
}
