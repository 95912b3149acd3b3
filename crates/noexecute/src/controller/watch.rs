//! Watches of nodes and of bound pods, decoded straight into slim objects (`crate::slim`),
//! forwarded to the controller loop.
//!
//! kube's watcher does the listing (paginated), resumes from the last resource version, and
//! relists after `410 Gone` (emitting `Init`, `InitApply`…, `InitDone` again). Errors are
//! counted as watch restarts and retried with backoff; the stream never ends on its own.

use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::metrics::Metrics;
use crate::slim::{self, SlimNode, SlimPod};

pub type NodeEvent = watcher::Event<SlimNode>;
pub type PodEvent = watcher::Event<SlimPod>;

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

/// Start both watches. `page_size` bounds each list page (and the client memory it costs).
pub fn spawn(
    client: Client,
    page_size: u32,
    node_selector: Option<&str>,
    metrics: Metrics,
    shutdown: CancellationToken,
) -> (mpsc::Receiver<NodeEvent>, mpsc::Receiver<PodEvent>) {
    let (node_tx, node_rx) = mpsc::channel(1024);
    let (pod_tx, pod_rx) = mpsc::channel(1024);
    let nodes: Api<SlimNode> = Api::all_with(client.clone(), &slim::node_resource());
    let pods: Api<SlimPod> = Api::all_with(client, &slim::pod_resource());
    let mut node_config = watcher::Config::default().page_size(page_size);
    if let Some(selector) = node_selector {
        node_config = node_config.labels(selector);
    }
    // Unbound pods cannot be taint-evicted; they arrive as updates once bound.
    let pod_config = watcher::Config::default()
        .page_size(page_size)
        .fields("spec.nodeName!=");
    tokio::spawn(forward(
        nodes,
        node_config,
        "nodes",
        node_tx,
        metrics.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(forward(pods, pod_config, "pods", pod_tx, metrics, shutdown));
    (node_rx, pod_rx)
}
