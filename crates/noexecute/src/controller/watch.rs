//! Watches of nodes and of bound pods, decoded straight into slim objects (`crate::adapters::slim`),
//! and of the `TaintManagerEviction` Events (for the second-controller guard), forwarded to
//! the controller loop.
//!
//! All three are listed and watched by `listwatch`, in protobuf unless told otherwise (the
//! Events are few, selected by the server, and decoded whole). Each reads its initial state
//! as a streaming list (or page by page), resumes from the last resource version, and reads
//! it again after `410 Gone` (emitting `Init`, `InitApply`…, `InitDone` again). Errors are
//! counted as watch restarts, passed on as [`Watch::Failed`] (the core then knows the cache
//! may be stale), and retried with backoff (`backoff`); the stream never ends on its own.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::{WatchStreamExt, watcher};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::listwatch::{self, ContentType, InitialList};
use super::metrics::Metrics;
use crate::adapters::device::{DeviceTaintRule, ResourceClaim, ResourceSlice};
use crate::adapters::slim::{SlimNode, SlimPod};

/// What a watch delivers: its events, and word of each failure (it retries on its own).
#[derive(Debug)]
pub enum Watch<K> {
    Event(watcher::Event<K>),
    /// A list or watch request failed: until the watch delivers again, what it delivered may
    /// be stale.
    Failed,
}

pub type NodeEvent = Watch<SlimNode>;
pub type PodEvent = Watch<SlimPod>;
/// A taint eviction controller's Event (reason `TaintManagerEviction`), ours or another's.
pub type TaintEvent = Watch<Event>;

/// The reason of upstream's (and noexecute's) Events about the pods they evict.
pub const TAINT_EVENT_REASON: &str = "TaintManagerEviction";
/// The same for device taints.
pub use noexecute_engine::pipeline::DEVICE_EVENT_REASON;

pub type SliceEvent = Watch<ResourceSlice>;
pub type ClaimEvent = Watch<ResourceClaim>;
pub type RuleEvent = Watch<DeviceTaintRule>;

/// The receiving ends of the watches.
pub struct Watches {
    pub nodes: mpsc::Receiver<NodeEvent>,
    pub pods: mpsc::Receiver<PodEvent>,
    pub taint_events: mpsc::Receiver<TaintEvent>,
    /// With `--device-taints`.
    pub devices: Option<DeviceWatches>,
}

/// The DRA watches of `--device-taints`, in JSON (`docs/parity.md` §22.1).
pub struct DeviceWatches {
    pub slices: mpsc::Receiver<SliceEvent>,
    pub claims: mpsc::Receiver<ClaimEvent>,
    /// `None` where the API server does not serve DeviceTaintRules (`v1beta2`): upstream's
    /// controller then ignores rules as well.
    pub rules: Option<mpsc::Receiver<RuleEvent>>,
}

/// How every watch reads: its initial list, and the format.
#[derive(Clone, Copy, Debug)]
pub struct Reads {
    pub initial: InitialList,
    /// The page size of a list read in pages.
    pub page_size: u32,
    pub content_type: ContentType,
}

/// What `--device-taints` watches.
#[derive(Clone, Copy, Debug)]
pub struct DeviceTaints {
    /// DeviceTaintRules are served (`resource.k8s.io/v1beta2`).
    pub rules: bool,
}

async fn forward<K, E>(
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, E>> + Send + 'static,
    resource: &'static str,
    tx: mpsc::Sender<Watch<K>>,
    metrics: Metrics,
    shutdown: CancellationToken,
) where
    K: Send + 'static,
    E: std::fmt::Display + Send + 'static,
{
    let mut stream = stream.backoff(backoff()).boxed();
    loop {
        let item = tokio::select! {
            _ = shutdown.cancelled() => return,
            item = stream.next() => item,
        };
        match item {
            Some(Ok(event)) => {
                if tx.send(Watch::Event(event)).await.is_err() {
                    return;
                }
            }
            Some(Err(e)) => {
                metrics.watch_restart(resource);
                tracing::warn!(resource, error = %e, "watch failed; retrying with backoff");
                if tx.send(Watch::Failed).await.is_err() {
                    return;
                }
            }
            None => return,
        }
    }
}

/// How long a failed watch waits before trying again: from 100 ms, doubling, at most 2 s (with
/// up to as much again of jitter), and afresh after 30 s without a failure.
///
/// kube's default (client-go's too) grows to 30 s and forgets only after 2 minutes without a
/// failure, so a second control-plane blip within 2 minutes of the first could leave the
/// controller blind for half a minute: the fault soak found a leader that, after a
/// kube-apiserver restart and an etcd restart 10 s apart, did not see a new taint for 19 s
/// (`docs/soak.md`). A failed list or watch costs the API server little; a blind eviction
/// controller costs pods their deadlines.
pub fn backoff() -> ResetTimerBackoff<watcher::ExponentialBackoff> {
    let schedule = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(2))
        .with_factor(2.0)
        .without_max_times()
        .with_jitter();
    ResetTimerBackoff::new(schedule.into(), Duration::from_secs(30))
}

/// Start the watches. `reads` says how each reads its initial state (a streaming list, or
/// pages whose size bounds the client memory each costs) and in what format. The Events are
/// selected by the API server (`reason=TAINT_EVENT_REASON`): only those of taint eviction
/// controllers are sent.
pub fn spawn(
    client: Client,
    reads: Reads,
    node_selector: Option<&str>,
    device_taints: Option<DeviceTaints>,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Watches {
    let (node_tx, nodes_rx) = mpsc::channel(1024);
    let (pod_tx, pods_rx) = mpsc::channel(1024);
    let (event_tx, events_rx) = mpsc::channel(256);
    let config = |path: &str, labels: Option<&str>, fields: Option<&str>| listwatch::Config {
        path: path.to_string(),
        page_size: reads.page_size,
        labels: labels.map(str::to_string),
        fields: fields.map(str::to_string),
        content_type: reads.content_type,
        timeout_secs: 290,
        initial: reads.initial,
    };
    let nodes = listwatch::list_watch::<SlimNode>(
        client.clone(),
        config("/api/v1/nodes", node_selector, None),
    );
    // Unbound pods cannot be taint-evicted; they arrive as updates once bound.
    let pods = listwatch::list_watch::<SlimPod>(
        client.clone(),
        config("/api/v1/pods", None, Some("spec.nodeName!=")),
    );
    let devices = device_taints.map(|d| {
        // Few and small objects, which the protobuf decoder does not know: JSON.
        let json = |path: &str| listwatch::Config {
            content_type: ContentType::Json,
            ..config(path, None, None)
        };
        let (slice_tx, slices) = mpsc::channel(256);
        let (claim_tx, claims) = mpsc::channel(1024);
        tokio::spawn(forward(
            listwatch::list_watch::<ResourceSlice>(
                client.clone(),
                json("/apis/resource.k8s.io/v1/resourceslices"),
            ),
            "resourceslices",
            slice_tx,
            metrics.clone(),
            shutdown.clone(),
        ));
        tokio::spawn(forward(
            listwatch::list_watch::<ResourceClaim>(
                client.clone(),
                json("/apis/resource.k8s.io/v1/resourceclaims"),
            ),
            "resourceclaims",
            claim_tx,
            metrics.clone(),
            shutdown.clone(),
        ));
        let rules = d.rules.then(|| {
            let (rule_tx, rules) = mpsc::channel(64);
            tokio::spawn(forward(
                listwatch::list_watch::<DeviceTaintRule>(
                    client.clone(),
                    json("/apis/resource.k8s.io/v1beta2/devicetaintrules"),
                ),
                "devicetaintrules",
                rule_tx,
                metrics.clone(),
                shutdown.clone(),
            ));
            rules
        });
        DeviceWatches {
            slices,
            claims,
            rules,
        }
    });
    if device_taints.is_some() {
        // Upstream's device controller's announcements, for the guard too.
        let device_events = listwatch::list_watch::<Event>(
            client.clone(),
            config(
                "/api/v1/events",
                None,
                Some(&format!("reason={DEVICE_EVENT_REASON}")),
            ),
        );
        tokio::spawn(forward(
            device_events,
            "events",
            event_tx.clone(),
            metrics.clone(),
            shutdown.clone(),
        ));
    }
    let events = listwatch::list_watch::<Event>(
        client,
        config(
            "/api/v1/events",
            None,
            Some(&format!("reason={TAINT_EVENT_REASON}")),
        ),
    );
    tokio::spawn(forward(
        nodes,
        "nodes",
        node_tx,
        metrics.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(forward(
        pods,
        "pods",
        pod_tx,
        metrics.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(forward(events, "events", event_tx, metrics, shutdown));
    Watches {
        nodes: nodes_rx,
        pods: pods_rx,
        taint_events: events_rx,
        devices,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// However many failures in a row, a watch tries again within 4 s (2 s and its jitter).
    #[tokio::test(start_paused = true)]
    async fn a_failing_watch_never_waits_long() {
        let mut b = backoff();
        for i in 0..40 {
            let delay = b.next().unwrap_or(Duration::MAX);
            assert!(delay <= Duration::from_secs(4), "failure {i}: {delay:?}");
            tokio::time::advance(delay).await;
        }
    }
}
