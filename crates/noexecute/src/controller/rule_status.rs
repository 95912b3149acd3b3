//! Writes a DeviceTaintRule's `EvictionInProgress` condition (`docs/parity.md` §22.7) as
//! upstream's device controller does: a server-side apply of the rule's status, forced, with
//! its field manager and the rule's UID (so a rule deleted and made again under the name is
//! not written). When to write is the pipeline's ([`noexecute_engine::pipeline::RuleWrite`]).
//!
//! Fenced like every write: only in the term the pipeline named, after the rate limiter.

use std::sync::Arc;
use std::time::Duration;

use kube::Api;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use noexecute_engine::observe::Uid;
use noexecute_engine::pipeline::RuleWrite;
use serde_json::json;
use tokio::sync::mpsc;

use super::lease::Leadership;
use super::metrics::Metrics;
use super::ratelimit::RateLimiter;

/// Upstream's field manager (the controller's name), so that the condition changes hands
/// with the controller.
pub const FIELD_MANAGER: &str = "device-taint-eviction-controller";

#[derive(Clone)]
pub struct RuleStatusWriter {
    api: Api<DynamicObject>,
    leadership: Leadership,
    limiter: Arc<RateLimiter>,
    metrics: Metrics,
    timeout: Duration,
    failed: mpsc::UnboundedSender<(String, Uid)>,
}

impl RuleStatusWriter {
    /// The writer, and where failed writes are reported (rule name and UID).
    pub fn new(
        client: kube::Client,
        leadership: Leadership,
        limiter: Arc<RateLimiter>,
        metrics: Metrics,
        timeout: Duration,
    ) -> (RuleStatusWriter, mpsc::UnboundedReceiver<(String, Uid)>) {
        let ar = ApiResource {
            group: "resource.k8s.io".into(),
            version: "v1beta2".into(),
            api_version: "resource.k8s.io/v1beta2".into(),
            kind: "DeviceTaintRule".into(),
            plural: "devicetaintrules".into(),
        };
        let (failed, rx) = mpsc::unbounded_channel();
        let writer = RuleStatusWriter {
            api: Api::all_with(client, &ar),
            leadership,
            limiter,
            metrics,
            timeout,
            failed,
        };
        (writer, rx)
    }

    /// Write it in the background.
    pub fn write(&self, w: RuleWrite) {
        let this = self.clone();
        tokio::spawn(async move { this.send(w).await });
    }

    async fn send(&self, w: RuleWrite) {
        if self.leadership.may_write(w.term) {
            self.limiter.acquire_background().await;
        }
        if !self.leadership.may_write(w.term) {
            tracing::debug!(rule = %w.rule, "rule status not written: its term of leadership is over");
            // The pipeline took it as written: tell it otherwise.
            let _ = self.failed.send((w.rule.clone(), w.uid.clone()));
            return;
        }
        let body = status_apply(&w, crate::adapters::time::rfc3339_now_seconds());
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let patch = Patch::Apply(&body);
        let write = self.api.patch_status(&w.rule, &params, &patch);
        let result = tokio::time::timeout(self.timeout, write).await;
        match result {
            Ok(Ok(_)) => {
                tracing::info!(rule = %w.rule, reason = w.condition.reason, message = %w.condition.message, "DeviceTaintRule status written");
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => {
                tracing::debug!(rule = %w.rule, "DeviceTaintRule gone before its status was written");
            }
            other => {
                let error = match other {
                    Ok(Err(e)) => e.to_string(),
                    _ => "timed out".to_string(),
                };
                self.metrics.api_error("rule-status");
                tracing::warn!(rule = %w.rule, %error, "writing a DeviceTaintRule's status failed; trying again shortly");
                let _ = self.failed.send((w.rule.clone(), w.uid.clone()));
            }
        }
    }
}

/// The apply configuration: the rule's name and UID, and the one condition.
pub fn status_apply(w: &RuleWrite, last_transition: String) -> serde_json::Value {
    json!({
        "apiVersion": "resource.k8s.io/v1beta2",
        "kind": "DeviceTaintRule",
        "metadata": {"name": w.rule, "uid": w.uid.to_string()},
        "status": {"conditions": [{
            "type": "EvictionInProgress",
            "status": if w.condition.status { "True" } else { "False" },
            "reason": w.condition.reason,
            "message": w.condition.message,
            "observedGeneration": w.generation,
            "lastTransitionTime": last_transition,
        }]}
    })
}
