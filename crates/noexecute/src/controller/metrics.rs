//! The controller's Prometheus metrics: upstream's two (same names, same buckets; the latency
//! in real seconds, fixing upstream's unit bug) and noexecute's own.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upstream's buckets for `pod_deletion_duration_seconds`: 5 ms to 4 min.
pub const DELETION_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 30.0, 60.0, 120.0, 180.0, 240.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    pub resource: String,
}

#[derive(Clone)]
pub struct Metrics {
    pub pod_deletions: Counter,
    pub pod_deletion_duration: Histogram,
    /// The device controller's two (`docs/parity.md` §22.6).
    pub device_pod_deletions: Counter,
    pub device_pod_deletion_duration: Histogram,
    pub scheduled_evictions: Gauge,
    pub pending_evictions: Gauge,
    pub api_errors: Family<VerbLabels, Counter>,
    pub watch_restarts: Family<ResourceLabels, Counter>,
    pub leader: Gauge,
    pub events_dropped: Counter,
    pub events_fenced: Counter,
    pub eviction_retries: Counter,
    pub dry_run_evictions: Counter,
    pub stale_evictions_avoided: Counter,
    pub pdb_blocked: Counter,
    pub pdb_timeouts: Counter,
    pub brake_engaged: Gauge,
    pub brake_engagements: Counter,
    pub paced_evictions: Gauge,
    pub foreign_taint_evictions: Counter,
    pub refusing: Gauge,
}

impl Metrics {
    pub fn new(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            pod_deletions: Counter::default(),
            pod_deletion_duration: Histogram::new(DELETION_BUCKETS),
            device_pod_deletions: Counter::default(),
            device_pod_deletion_duration: Histogram::new(DELETION_BUCKETS),
            scheduled_evictions: Gauge::default(),
            pending_evictions: Gauge::default(),
            api_errors: Family::default(),
            watch_restarts: Family::default(),
            leader: Gauge::default(),
            events_dropped: Counter::default(),
            events_fenced: Counter::default(),
            eviction_retries: Counter::default(),
            dry_run_evictions: Counter::default(),
            stale_evictions_avoided: Counter::default(),
            pdb_blocked: Counter::default(),
            pdb_timeouts: Counter::default(),
            brake_engaged: Gauge::default(),
            brake_engagements: Counter::default(),
            paced_evictions: Gauge::default(),
            foreign_taint_evictions: Counter::default(),
            refusing: Gauge::default(),
        };
        let upstream = registry.sub_registry_with_prefix("taint_eviction_controller");
        // The encoder appends `_total` to counters.
        upstream.register(
            "pod_deletions",
            "Total number of Pods deleted by TaintEvictionController since its start.",
            m.pod_deletions.clone(),
        );
        upstream.register(
            "pod_deletion_duration_seconds",
            "Latency, in seconds, between the time when a taint effect has been activated for the Pod and its deletion via TaintEvictionController.",
            m.pod_deletion_duration.clone(),
        );
        let device = registry.sub_registry_with_prefix("device_taint_eviction_controller");
        device.register(
            "pod_deletions",
            "Total number of Pods deleted by DeviceTaintEvictionController since its start.",
            m.device_pod_deletions.clone(),
        );
        device.register(
            "pod_deletion_duration_seconds",
            "Latency, in seconds, between the time when a device taint effect has been activated and a Pod's deletion via DeviceTaintEvictionController.",
            m.device_pod_deletion_duration.clone(),
        );
        let own = registry.sub_registry_with_prefix("noexecute");
        own.register(
            "scheduled_evictions",
            "Evictions waiting for their deadline.",
            m.scheduled_evictions.clone(),
        );
        own.register(
            "pending_evictions",
            "Evictions not yet confirmed: waiting, in flight or retrying.",
            m.pending_evictions.clone(),
        );
        own.register(
            "api_errors",
            "Failed API requests by verb.",
            m.api_errors.clone(),
        );
        own.register(
            "watch_restarts",
            "Watch streams that failed and were restarted, by resource.",
            m.watch_restarts.clone(),
        );
        own.register(
            "leader",
            "1 while this replica holds the lease (or leader election is off).",
            m.leader.clone(),
        );
        own.register(
            "events_dropped",
            "Events not sent because the event queue was full.",
            m.events_dropped.clone(),
        );
        own.register(
            "events_fenced",
            "Events not sent because their term of leadership had ended (a handover).",
            m.events_fenced.clone(),
        );
        own.register(
            "eviction_retries",
            "Eviction attempts after a failed one.",
            m.eviction_retries.clone(),
        );
        own.register(
            "dry_run_evictions",
            "Evictions that --dry-run decided and did not carry out.",
            m.dry_run_evictions.clone(),
        );
        own.register(
            "foreign_taint_evictions",
            "Pods on watched nodes that another controller marked for deletion by a taint (DisruptionTarget, DeletionByTaintManager): another taint eviction controller is active.",
            m.foreign_taint_evictions.clone(),
        );
        own.register(
            "refusing",
            "1 while --refuse-if-foreign has stopped this replica evicting.",
            m.refusing.clone(),
        );
        own.register(
            "stale_evictions_avoided",
            "Immediate evictions dropped because a fresh read of the node no longer justified them.",
            m.stale_evictions_avoided.clone(),
        );
        own.register(
            "pdb_blocked",
            "Eviction API attempts refused (429) by a PodDisruptionBudget.",
            m.pdb_blocked.clone(),
        );
        own.register(
            "pdb_timeouts",
            "Evictions deleted after a PodDisruptionBudget blocked them past --pdb-timeout.",
            m.pdb_timeouts.clone(),
        );
        own.register(
            "brake_engaged",
            "1 while the mass-eviction brake holds (more than --brake-threshold of nodes NoExecute-tainted).",
            m.brake_engaged.clone(),
        );
        own.register(
            "brake_engagements",
            "Times the mass-eviction brake engaged.",
            m.brake_engagements.clone(),
        );
        own.register(
            "paced_evictions",
            "Due evictions held by the rate limits or the mass-eviction brake.",
            m.paced_evictions.clone(),
        );
        // Which build runs, as a constant 1 labelled with its version (join on it in
        // queries; it changes in a rollout).
        let build_info: Family<BuildLabels, Gauge> = Family::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
            })
            .set(1);
        own.register(
            "build_info",
            "A constant 1, labelled with the version of the noexecute build that runs.",
            build_info,
        );
        registry.register_collector(Box::new(super::process::ProcessCollector));
        m
    }

    pub fn api_error(&self, verb: &str) {
        self.api_errors
            .get_or_create(&VerbLabels { verb: verb.into() })
            .inc();
    }

    pub fn watch_restart(&self, resource: &str) {
        self.watch_restarts
            .get_or_create(&ResourceLabels {
                resource: resource.into(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_names_and_buckets() {
        let mut registry = Registry::default();
        let m = Metrics::new(&mut registry);
        m.pod_deletions.inc();
        m.pod_deletion_duration.observe(0.2);
        m.api_error("delete");
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap_or_default();
        assert!(
            text.contains("taint_eviction_controller_pod_deletions_total 1"),
            "{text}"
        );
        assert!(
            text.contains(
                "taint_eviction_controller_pod_deletion_duration_seconds_bucket{le=\"0.5\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "taint_eviction_controller_pod_deletion_duration_seconds_bucket{le=\"0.1\"} 0"
            ),
            "{text}"
        );
        assert!(
            text.contains("noexecute_api_errors_total{verb=\"delete\"} 1"),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "noexecute_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_start_time_seconds ",
            "process_open_fds ",
            "process_max_fds ",
        ] {
            assert!(text.contains(name), "{name}: {text}");
        }
    }
}
