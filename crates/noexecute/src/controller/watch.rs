//! Watches of nodes and of bound pods, decoded straight into slim objects (`crate::adapters::slim`),
//! and of the `TaintManagerEviction` Events (for the second-controller guard), forwarded to
//! the controller loop.
//!
//! kube's watcher does the listing (paginated), resumes from the last resource version, and
//! relists after `410 Gone` (emitting `Init`, `InitApply`…, `InitDone` again). Errors are
//! counted as watch restarts and retried with backoff; the stream never ends on its own.

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;
use crate::adapters::slim::{self, SlimNode, SlimPod};

pub type NodeEvent = watcher::Event<SlimNode>;
pub type PodEvent = watcher::Event<SlimPod>;
/// A taint eviction controller's Event (reason `TaintManagerEviction`), ours or another's.
pub type TaintEvent = watcher::Event<Event>;

/// The reason of upstream's (and noexecute's) Events about the pods they evict.
pub const TAINT_EVENT_REASON: &str = "TaintManagerEviction";

/// The receiving ends of the watches.
pub struct Watches {
    pub nodes: mpsc::Receiver<NodeEvent>,
    pub pods: mpsc::Receiver<PodEvent>,
    pub taint_events: mpsc::Receiver<TaintEvent>,
}

async fn forward<K>(
    api: Api<K>,
    config: watcher::Config,
    resource: &'static str,
    tx: mpsc::Sender<watcher::Event<K>>,
    metrics: Metrics,
    shutdown: CancellationToken,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut stream = watcher(api, config).default_backoff().boxed();
    loop {
        let item = tokio::select! {
            _ = shutdown.cancelled() => return,
            item = stream.next() => item,
        };
        match item {
            Some(Ok(event)) => {
                if tx.send(event).await.is_err() {
                    return;
                }
            }
            Some(Err(e)) => {
                metrics.watch_restart(resource);
                tracing::warn!(resource, error = %e, "watch failed; retrying with backoff");
            }
            None => return,
        }
    }
}

/// Start the watches. `page_size` bounds each list page (and the client memory it costs).
/// The Events are selected by the API server (`reason=TaintManagerEviction`): only those of
/// taint eviction controllers are sent.
pub fn spawn(
    client: Client,
    page_size: u32,
    node_selector: Option<&str>,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> Watches {
    let (node_tx, nodes_rx) = mpsc::channel(1024);
    let (pod_tx, pods_rx) = mpsc::channel(1024);
    let (event_tx, events_rx) = mpsc::channel(256);
    let nodes: Api<SlimNode> = Api::all_with(client.clone(), &slim::node_resource());
    let pods: Api<SlimPod> = Api::all_with(client.clone(), &slim::pod_resource());
    let events: Api<Event> = Api::all(client);
    let mut node_config = watcher::Config::default().page_size(page_size);
    if let Some(selector) = node_selector {
        node_config = node_config.labels(selector);
    }
    // Unbound pods cannot be taint-evicted; they arrive as updates once bound.
    let pod_config = watcher::Config::default()
        .page_size(page_size)
        .fields("spec.nodeName!=");
    let event_config = watcher::Config::default()
        .page_size(page_size)
        .fields(&format!("reason={TAINT_EVENT_REASON}"));
    tokio::spawn(forward(
        nodes,
        node_config,
        "nodes",
        node_tx,
        metrics.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(forward(
        pods,
        pod_config,
        "pods",
        pod_tx,
        metrics.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(forward(
        events,
        event_config,
        "events",
        event_tx,
        metrics,
        shutdown,
    ));
    Watches {
        nodes: nodes_rx,
        pods: pods_rx,
        taint_events: events_rx,
    }
}
