//! core/v1 Events about pods, as upstream records them (`TaintManagerEviction`, "Marking for
//! deletion Pod ns/name", "Cancelling deletion of Pod ns/name"), sent by one background task.
//!
//! A mass eviction must not flood the API server: the queue is bounded (overflow is dropped
//! and counted, as client-go's broadcaster drops when its channel is full), every write waits
//! for the shared rate limiter, and a repeat of the same event for the same pod within ten
//! minutes increments the existing Event's count instead of creating a new one (client-go's
//! correlation).
//!
//! **Fenced.** Every event is recorded in a term of leadership and written only while that
//! term lasts ([`Leadership::may_write`]): an old leader's queue never reaches the API server
//! after a standby took over. Each Event names our Lease (annotation [`LEASE_ANNOTATION`]), so
//! the second-controller guard of any replica of ours knows it for ours.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time as K8sTime};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::Request as ApiRequest;
use noexecute_engine::PodRef;
use noexecute_engine::action::UpstreamEvent;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::format::{ContentType, Requests, protobuf_body};
use super::lease::Leadership;
use super::metrics::Metrics;
use super::ratelimit::RateLimiter;
use crate::adapters::proto;
use noexecute_engine::pipeline::DEVICE_EVENT_REASON;

/// `source.component` of the Events: the node controller's, and the device controller's.
#[derive(Clone, Debug)]
pub struct Components {
    pub node: String,
    pub device: String,
}

/// client-go's broadcaster queue (`maxQueuedEvents`): beyond it, events are dropped.
const QUEUE: usize = 1000;
const CORRELATION_WINDOW: Duration = Duration::from_secs(600);
const CORRELATION_ENTRIES: usize = 16_384;

/// The annotation on our Events that names the Lease (`namespace/name`) of the controller that
/// wrote them.
pub const LEASE_ANNOTATION: &str = "noexecute.io/lease";

struct Request {
    /// The object the event is about; its namespace is the event's.
    object: ObjectReference,
    /// The device controller's Events name it as their source.
    device: bool,
    event: UpstreamEvent,
    /// The term of leadership it belongs to.
    term: u64,
}

#[derive(Clone)]
pub struct EventSink {
    tx: mpsc::Sender<Request>,
    metrics: Metrics,
}

impl EventSink {
    /// Queue an event of term `term`; never blocks the controller loop. A device Event
    /// (`DeviceTaintManagerEviction`) names the pod's UID and comes from the device
    /// controller's component, as upstream's do (`docs/parity.md` §22.6).
    pub fn record(&self, pod: &PodRef, event: UpstreamEvent, term: u64) {
        let device = event.reason == DEVICE_EVENT_REASON;
        let object = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(pod.name.to_string()),
            namespace: Some(pod.namespace.to_string()),
            uid: device.then(|| pod.uid.to_string()),
            ..Default::default()
        };
        self.queue(Request {
            object,
            device,
            event,
            term,
        });
    }

    /// Queue an event of term `term` about any object (it must have a namespace).
    pub fn record_about(&self, object: ObjectReference, event: UpstreamEvent, term: u64) {
        self.queue(Request {
            object,
            device: false,
            event,
            term,
        });
    }

    fn queue(&self, request: Request) {
        if self.tx.try_send(request).is_err() {
            self.metrics.events_dropped.inc();
        }
    }

    /// Start the sending task. It stops when `shutdown` fires and the queue is empty.
    #[allow(clippy::too_many_arguments)]
    pub fn spawn(
        requests: Requests,
        component: Components,
        instance: String,
        lease: String,
        leadership: Leadership,
        limiter: Arc<RateLimiter>,
        metrics: Metrics,
        timeout: Duration,
        shutdown: CancellationToken,
    ) -> (EventSink, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let sink = EventSink {
            tx,
            metrics: metrics.clone(),
        };
        let sender = Sender {
            requests,
            component,
            instance,
            lease,
            leadership,
            limiter,
            metrics,
            timeout,
            seen: HashMap::new(),
            order: VecDeque::new(),
        };
        let task = tokio::spawn(sender.run(rx, shutdown));
        (sink, task)
    }
}

struct Seen {
    name: String,
    count: i32,
    at: Instant,
}

type Key = (String, String, String, String);

struct Sender {
    /// Events are created in protobuf where the server takes it; their count is a JSON merge
    /// patch in any case.
    requests: Requests,
    component: Components,
    instance: String,
    lease: String,
    leadership: Leadership,
    limiter: Arc<RateLimiter>,
    metrics: Metrics,
    /// Bound on every write (as the executor's: within the lease's fence).
    timeout: Duration,
    /// (namespace, pod, reason, message) → the Event we wrote.
    seen: HashMap<Key, Seen>,
    /// The keys of `seen` by when they were last used, oldest first (a key used again is
    /// pushed again; the stale copy is skipped when it reaches the front). Expiry pops the
    /// front: no rescan of the map, whatever its size.
    order: VecDeque<(Instant, Key)>,
}

impl Sender {
    async fn run(mut self, mut rx: mpsc::Receiver<Request>, shutdown: CancellationToken) {
        loop {
            // The shutdown first: a long queue must not keep the flush below from starting
            // (nor keep the process, and so the Lease, for as long as the queue lasts).
            let request = tokio::select! {
                biased;
                _ = shutdown.cancelled() => {
                    // Flush what is queued for about 2 s (each write fenced by its term and
                    // bounded by the timeout; a write once begun is let finish), then stop.
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
                    while tokio::time::Instant::now() < deadline {
                        let Ok(r) = rx.try_recv() else { break };
                        self.send(r).await;
                    }
                    return;
                }
                r = rx.recv() => match r { Some(r) => r, None => return },
            };
            self.send(request).await;
        }
    }

    /// Forget correlations older than the window, and the oldest beyond the bound.
    fn expire(&mut self, now: Instant) {
        while let Some((at, key)) = self.order.front() {
            let old = now.duration_since(*at) >= CORRELATION_WINDOW;
            if !old && self.seen.len() <= CORRELATION_ENTRIES {
                break;
            }
            // Only the newest use of a key removes it.
            if self.seen.get(key).is_some_and(|s| s.at == *at) {
                self.seen.remove(key);
            }
            self.order.pop_front();
        }
    }

    fn remember(&mut self, key: Key, seen: Seen) {
        self.order.push_back((seen.at, key.clone()));
        self.seen.insert(key, seen);
    }

    async fn send(&mut self, r: Request) {
        let now = Instant::now();
        self.expire(now);
        let namespace = r.object.namespace.clone().unwrap_or_default();
        let object_name = r.object.name.clone().unwrap_or_default();
        let key = (
            namespace.clone(),
            object_name.clone(),
            r.event.reason.to_string(),
            r.event.message.clone(),
        );
        let path = format!("/api/v1/namespaces/{namespace}/events");
        // The fence, before the wait (an event of an ended term costs no token) and after it
        // (a term that ended meanwhile writes nothing).
        if self.leadership.may_write(r.term) {
            self.limiter.acquire_background().await;
        }
        if !self.leadership.may_write(r.term) {
            self.metrics.events_fenced.inc();
            tracing::debug!(
                reason = r.event.reason,
                "event dropped: its term of leadership is over"
            );
            return;
        }
        let stamp = k8s_openapi::jiff::Timestamp::now();
        if let Some(seen) = self
            .seen
            .get_mut(&key)
            .filter(|s| now.duration_since(s.at) < CORRELATION_WINDOW)
        {
            seen.count += 1;
            seen.at = now;
            let name = seen.name.clone();
            let count = seen.count;
            self.order.push_back((now, key));
            let patch = serde_json::json!({
                "count": count,
                "lastTimestamp": K8sTime(stamp),
            });
            let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
            let write = self
                .requests
                .done(|_| ApiRequest::new(&path).patch(&name, &params, &patch));
            match tokio::time::timeout(self.timeout, write).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    self.metrics.api_error("patch");
                    tracing::debug!(error = %e, "could not update an event");
                }
                Err(_) => {
                    self.metrics.api_error("patch");
                    tracing::debug!("updating an event timed out");
                }
            }
            return;
        }
        let name = format!(
            "{}.{:x}",
            object_name,
            stamp.as_nanosecond() as u64
                ^ (crate::adapters::time::random_fraction() * 65536.0) as u64
        );
        let component = if r.device {
            self.component.device.clone()
        } else {
            self.component.node.clone()
        };
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace),
                annotations: Some(
                    [(LEASE_ANNOTATION.to_string(), self.lease.clone())]
                        .into_iter()
                        .collect(),
                ),
                ..Default::default()
            },
            involved_object: r.object,
            reason: Some(r.event.reason.into()),
            message: Some(r.event.message.clone()),
            type_: Some(r.event.type_.into()),
            source: Some(EventSource {
                component: Some(component.clone()),
                host: None,
            }),
            count: Some(1),
            first_timestamp: Some(K8sTime(stamp)),
            last_timestamp: Some(K8sTime(stamp)),
            event_time: None::<MicroTime>,
            reporting_component: Some(component),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        let params = PostParams::default();
        let write = self.requests.done(|format| match format {
            ContentType::Protobuf => protobuf_body(
                ApiRequest::new(&path).create(&params, Vec::new()),
                proto::event(&event),
            ),
            ContentType::Json => {
                let json = serde_json::to_vec(&event)
                    .map_err(kube::core::request::Error::SerializeBody)?;
                ApiRequest::new(&path).create(&params, json)
            }
        });
        match tokio::time::timeout(self.timeout, write)
            .await
            .unwrap_or(Err(super::format::Failure::TimedOut))
        {
            Ok(_) => {
                self.remember(
                    key,
                    Seen {
                        name,
                        count: 1,
                        at: now,
                    },
                );
            }
            Err(e) => {
                self.metrics.api_error("create");
                tracing::debug!(error = %e, "could not record an event");
            }
        }
    }
}
