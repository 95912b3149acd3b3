//! `noexecute run`: the production controller, a drop-in replacement for
//! kube-controller-manager's `taint-eviction-controller`.
//!
//! ```text
//!  watch (nodes, bound pods) ─► driver (owns the Engine) ─► executor ─► API server
//!         ▲                        │  ▲                       │
//!         │                        │  └──── reports ◄─────────┘
//!   kube watcher               events ─► event sink ─► API server
//!                              gauges ─► metrics ◄─ admin server (/metrics /status /healthz /readyz)
//!   lease ─► leadership ─► driver (acts only while leading) and executor (fence)
//! ```
//!
//! Modules: [`watch`], [`driver`], [`executor`], [`events`], [`lease`], [`admin`] (with
//! [`tls`] and [`access`]), [`status`], [`metrics`], [`ratelimit`], [`clock`].
//! This file only parses flags and wires them.

pub mod access;
pub mod admin;
pub mod clock;
pub mod driver;
pub mod events;
pub mod executor;
pub mod format;
pub mod lease;
pub mod listwatch;
pub mod metrics;
pub mod process;
pub mod ratelimit;
pub mod rule_status;
pub mod status;
pub mod tls;
pub mod watch;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use noexecute_engine::Pipeline;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::adapters::policy::EngineArgs;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

use crate::adapters::time::parse_duration as duration;

/// `--handover-delay`: a duration of at least a millisecond (no delay is no handover: unset
/// it instead, and `--refuse-if-foreign` can come back).
fn handover_delay(text: &str) -> Result<Duration, String> {
    let d = duration(text)?;
    if d < Duration::from_millis(1) {
        return Err(format!(
            "{text:?}: a handover delay must be more than 0 (unset it to evict when due)"
        ));
    }
    Ok(d)
}

/// Flags of `noexecute run`. Every flag can also come from the environment.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Kubeconfig (default: $KUBECONFIG, ~/.kube/config, or the in-cluster service account).
    #[arg(long, env = "NOEXECUTE_KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context.
    #[arg(long, env = "NOEXECUTE_CONTEXT")]
    pub context: Option<String>,
    /// Client-side requests per second (kube-controller-manager's --kube-api-qps default).
    #[arg(long, env = "NOEXECUTE_KUBE_API_QPS", default_value_t = 20.0)]
    pub kube_api_qps: f64,
    /// Client-side burst (kube-controller-manager's --kube-api-burst default).
    #[arg(long, env = "NOEXECUTE_KUBE_API_BURST", default_value_t = 30)]
    pub kube_api_burst: u32,
    /// Evictions carried out at the same time (workers). The QPS limit is what bounds the
    /// request rate; this only has to cover the API server's latency (at 100 evictions a
    /// second and 1.3 s an eviction under load, 130 are in flight). An idle worker costs
    /// nothing; with the brake on, up to this many attempts already past their first write
    /// may finish after it engages.
    #[arg(long, env = "NOEXECUTE_CONCURRENCY", default_value_t = 256)]
    pub concurrency: usize,
    /// Threads of the async runtime: 1 (the default) runs everything on one thread, 0 uses
    /// one per core.
    #[arg(long, env = "NOEXECUTE_WORKER_THREADS", default_value_t = 1)]
    pub worker_threads: usize,
    /// Manage only the nodes matching this label selector (e.g. one node pool per
    /// controller). Pods on other nodes are never evicted by this instance.
    #[arg(long, env = "NOEXECUTE_NODE_SELECTOR")]
    pub node_selector: Option<String>,
    /// How the initial state of each watch is read: `stream` (a streaming list: one watch
    /// whose first events are every object, served from the API server's watch cache where
    /// the resource has one, as kube-controller-manager reads since 1.35; a server that
    /// refuses it gets pages) or `pages` (a list in pages of --page-size, then a watch).
    #[arg(long, env = "NOEXECUTE_INITIAL_LIST", value_enum, default_value_t = listwatch::InitialList::Stream)]
    pub initial_list: listwatch::InitialList,
    /// Page size of the initial lists when they are read in pages.
    #[arg(long, env = "NOEXECUTE_PAGE_SIZE", default_value_t = 500)]
    pub page_size: u32,
    /// The format spoken with the API server: `protobuf` (its own, as kube-controller-manager
    /// speaks it: the node, pod and Event lists and watches, the eviction's answers and its
    /// DeleteOptions, Eviction and Event bodies; patches are JSON either way; JSON answers
    /// are still read, and a server or proxy that refuses protobuf gets JSON) or `json`.
    #[arg(long, env = "NOEXECUTE_API_CONTENT_TYPE", value_enum, default_value_t = format::ContentType::Protobuf)]
    pub api_content_type: format::ContentType,
    /// The HTTP versions spoken with the API server: `auto` (HTTP/2 when the server offers
    /// it, one connection for the watches and evictions and one for the Lease, as client-go)
    /// or `http1` (HTTP/1.1 only, a connection per request in flight: what client-go does
    /// with DISABLE_HTTP2 set, for a proxy or load balancer that mishandles HTTP/2).
    #[arg(long, env = "NOEXECUTE_API_HTTP_VERSION", value_enum, default_value_t = crate::adapters::client::HttpVersion::Auto)]
    pub api_http_version: crate::adapters::client::HttpVersion,
    /// Address of the admin server (/metrics, /status, /healthz, /readyz).
    #[arg(long, env = "NOEXECUTE_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    pub admin_addr: SocketAddr,
    /// Serve the admin server over plain HTTP, to anyone (local use). By default it serves
    /// TLS, and /metrics and /status only to callers the API server authenticates and
    /// authorizes (TokenReview and SubjectAccessReview on the path); the probes stay open.
    #[arg(long, env = "NOEXECUTE_ADMIN_INSECURE")]
    pub admin_insecure: bool,
    /// The admin server's certificate (PEM; default: a self-signed one made at start).
    #[arg(
        long,
        env = "NOEXECUTE_ADMIN_TLS_CERT_FILE",
        value_name = "FILE",
        requires = "admin_tls_key_file",
        conflicts_with = "admin_insecure"
    )]
    pub admin_tls_cert_file: Option<PathBuf>,
    /// The admin server's private key (PEM).
    #[arg(
        long,
        env = "NOEXECUTE_ADMIN_TLS_KEY_FILE",
        value_name = "FILE",
        requires = "admin_tls_cert_file",
        conflicts_with = "admin_insecure"
    )]
    pub admin_tls_key_file: Option<PathBuf>,
    /// Stop evicting (until restarted) when another taint eviction controller is seen
    /// evicting pods on watched nodes. Without it the replica warns and goes on.
    #[arg(long, env = "NOEXECUTE_REFUSE_IF_FOREIGN")]
    pub refuse_if_foreign: bool,
    /// Evict for DRA device taints as well, in place of kube-controller-manager's
    /// device-taint-eviction-controller (turn that off with
    /// --controllers=*,-device-taint-eviction-controller). Watches ResourceSlices,
    /// ResourceClaims (resource.k8s.io/v1) and DeviceTaintRules (v1beta2, where served).
    #[arg(long, env = "NOEXECUTE_DEVICE_TAINTS")]
    pub device_taints: bool,
    /// For the switch to or from upstream's controller, while it may still run: start each
    /// eviction this long after it falls due, reading the pod and its node first, so that whichever
    /// controller runs evicts it, once (see docs/operating.md, "The switch"). Unset: at once.
    #[arg(
        long,
        env = "NOEXECUTE_HANDOVER_DELAY",
        value_name = "DURATION",
        value_parser = handover_delay,
        conflicts_with = "refuse_if_foreign"
    )]
    pub handover_delay: Option<Duration>,
    /// Elect a leader among replicas through a Lease.
    #[arg(long, env = "NOEXECUTE_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// How long a Lease holder is trusted after its last renewal: a standby takes over no
    /// sooner (client-go's default; longer than the renew deadline).
    #[arg(long, env = "NOEXECUTE_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = duration)]
    pub leader_elect_lease_duration: Duration,
    /// A leader that has not renewed within this stops acting (its term ends), before any
    /// standby may take over.
    #[arg(long, env = "NOEXECUTE_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = duration)]
    pub leader_elect_renew_deadline: Duration,
    /// How often the leader renews and a standby tries to take the Lease.
    #[arg(long, env = "NOEXECUTE_LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = duration)]
    pub leader_elect_retry_period: Duration,
    /// Namespace of the Lease (default: $POD_NAMESPACE, else kube-system).
    #[arg(long, env = "NOEXECUTE_LEADER_ELECT_NAMESPACE")]
    pub leader_elect_namespace: Option<String>,
    /// Name of the Lease (one per shard: replicas of one --node-selector share it).
    #[arg(long, env = "NOEXECUTE_LEADER_ELECT_NAME", default_value = "noexecute")]
    pub leader_elect_name: String,
    /// This replica's identity in the Lease: this (default: $POD_NAME or the host name) plus a
    /// random suffix, always, so that two processes given the same name (a rollout's surge
    /// pod) can never both believe they hold the Lease.
    #[arg(long, env = "NOEXECUTE_IDENTITY")]
    pub identity: Option<String>,
    /// `source.component` of the Events recorded. Upstream's name by default, so that event
    /// queries and alerts keep working after the swap.
    #[arg(
        long,
        env = "NOEXECUTE_EVENT_COMPONENT",
        default_value = "taint-eviction-controller"
    )]
    pub event_component: String,
    /// `source.component` of the device Events (`--device-taints`): upstream's device
    /// controller's name by default.
    #[arg(
        long,
        env = "NOEXECUTE_DEVICE_EVENT_COMPONENT",
        default_value = "device-taint-eviction-controller"
    )]
    pub device_event_component: String,
    /// Log lines as `text` or `json` (one object a line); RUST_LOG sets the level.
    #[arg(long, env = "NOEXECUTE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub policy: crate::adapters::policy::PolicyArgs,
    #[command(flatten)]
    pub actions: crate::adapters::policy::ActionArgs,
}

impl RunArgs {
    fn validate(&self) -> Result<()> {
        // Devices are not sharded by node (DeviceTaintRules and their status are
        // cluster-wide): two shards would both evict a device-tainted pod and both write a
        // rule's status.
        anyhow::ensure!(
            !(self.device_taints && self.node_selector.is_some()),
            "--device-taints cannot be combined with --node-selector: device taints are not sharded by node; run one release with --device-taints and no selector"
        );
        anyhow::ensure!(
            self.kube_api_qps > 0.0 && self.kube_api_qps.is_finite(),
            "--kube-api-qps must be a positive number"
        );
        anyhow::ensure!(
            self.kube_api_burst > 0,
            "--kube-api-burst must be at least 1"
        );
        anyhow::ensure!(self.concurrency > 0, "--concurrency must be at least 1");
        anyhow::ensure!(self.page_size > 0, "--page-size must be at least 1");
        if self.leader_elect {
            anyhow::ensure!(
                self.leader_elect_lease_duration > self.leader_elect_renew_deadline,
                "--leader-elect-lease-duration must be longer than --leader-elect-renew-deadline"
            );
            anyhow::ensure!(
                self.leader_elect_renew_deadline > self.leader_elect_retry_period,
                "--leader-elect-renew-deadline must be longer than --leader-elect-retry-period"
            );
            // Every request is bounded by (lease duration - renew deadline - 0.5 s), and must
            // be allowed at least 1 s.
            anyhow::ensure!(
                self.leader_elect_lease_duration - self.leader_elect_renew_deadline
                    >= Duration::from_millis(1500),
                "--leader-elect-lease-duration must exceed --leader-elect-renew-deadline by at least 1.5s (requests are bounded by the gap less 0.5s, and need at least 1s)"
            );
        }
        Ok(())
    }

    fn identity(&self) -> String {
        let host = self
            .identity
            .clone()
            .filter(|i| !i.is_empty())
            .or_else(|| std::env::var("POD_NAME").ok())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
            })
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "noexecute".into());
        format!(
            "{host}_{:08x}",
            (crate::adapters::time::random_fraction() * f64::from(u32::MAX)) as u32
        )
    }
}

pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: a log file or collector gets plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Exit codes: 0 after a clean shutdown, 1 when leadership was lost (restart to stand by again,
/// as kube-controller-manager does).
/// What the API server serves for `--device-taints`: ResourceSlices and ResourceClaims in
/// `resource.k8s.io/v1` (required), DeviceTaintRules in `v1beta2` (optional, as upstream's
/// controller reads them only with `DRADeviceTaintRules` on).
async fn device_apis(client: &kube::Client) -> Result<watch::DeviceTaints> {
    let served = crate::adapters::client::dra_served(client)
        .await
        .context("--device-taints: reading which resource.k8s.io resources are served")?;
    anyhow::ensure!(
        served.slices_and_claims,
        "--device-taints: the API server does not serve resourceslices and resourceclaims in resource.k8s.io/v1 (Kubernetes 1.34 or later is needed)"
    );
    let rules = served.rules;
    // The reads must be allowed (deploy/rbac-device-taints.yaml): a listing refused forever
    // would keep every eviction, node ones included, from starting.
    let mut resources = vec![
        ("resource.k8s.io/v1", "ResourceSlice", "resourceslices"),
        ("resource.k8s.io/v1", "ResourceClaim", "resourceclaims"),
    ];
    if rules {
        resources.push((
            "resource.k8s.io/v1beta2",
            "DeviceTaintRule",
            "devicetaintrules",
        ));
    }
    for (api_version, kind, plural) in resources {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let ar = kube::api::ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: api_version.into(),
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client.clone(), &ar);
        api.list_metadata(&kube::api::ListParams::default().limit(1))
            .await
            .map_err(anyhow::Error::new)
            .with_context(|| {
                format!(
                    "--device-taints: listing {plural} (is deploy/rbac-device-taints.yaml applied?)"
                )
            })?;
    }
    tracing::info!(
        device_taint_rules = rules,
        "device taints: watching ResourceSlices and ResourceClaims{}",
        if rules {
            " and DeviceTaintRules"
        } else {
            " (DeviceTaintRules are not served: none apply)"
        }
    );
    Ok(watch::DeviceTaints { rules })
}

pub async fn run(args: RunArgs) -> Result<i32> {
    args.validate()?;
    let policy = args.policy.resolve_with(&args.actions)?;
    let identity = args.identity();
    let mut config =
        crate::adapters::client::config(args.kubeconfig.as_deref(), args.context.as_deref())
            .await?;
    // Our retries are the executor's, visible and counted; kube's would hide 429s and 5xx
    // behind up to 15 silent attempts.
    config.default_retry = false;
    // Who is calling, as audit logs and API server metrics show it: the replica's identity,
    // so that two replicas' requests can be told apart.
    if let Ok(agent) = axum::http::HeaderValue::from_str(&format!(
        "noexecute/{} ({identity})",
        env!("CARGO_PKG_VERSION")
    )) {
        config.headers.push((axum::http::header::USER_AGENT, agent));
    }
    // HTTP/2 when the server offers it (unless --api-http-version=http1); the Lease on a
    // connection of its own.
    let crate::adapters::client::RunClients {
        api: client,
        lease: lease_client,
    } = crate::adapters::client::RunClients::new(config, args.api_http_version)?;

    let shutdown = CancellationToken::new();
    let mut registry = Registry::default();
    let metrics = metrics::Metrics::new(&mut registry);
    let health = Arc::new(admin::Health::default());
    let security = if args.admin_insecure {
        admin::Security::Insecure
    } else {
        admin::Security::Tls {
            config: Box::new(tls::server_config(
                args.admin_tls_cert_file.as_deref(),
                args.admin_tls_key_file.as_deref(),
                tls::self_signed_names(),
            )?),
            access: Arc::new(access::Access::new(client.clone())),
        }
    };
    let (status_tx, status_rx) = tokio::sync::mpsc::channel(8);
    let (admin_addr, admin_task) = admin::serve(
        args.admin_addr,
        registry,
        health.clone(),
        status_tx,
        security,
        shutdown.clone(),
    )
    .await?;
    tracing::info!(%admin_addr, tls = !args.admin_insecure, %identity, policy = %policy.describe(), "noexecute starting");

    let limiter = Arc::new(ratelimit::RateLimiter::new(
        args.kube_api_qps,
        args.kube_api_burst,
    ));
    let clock = clock::Clock::new();

    let lease_namespace = args
        .leader_elect_namespace
        .clone()
        .or_else(|| std::env::var("POD_NAMESPACE").ok())
        .unwrap_or_else(|| "kube-system".into());
    // The brake's events are about the controller's Lease (there is no better object for a
    // cluster-wide state; with leader election off it may not exist, which events allow).
    let brake_object = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("coordination.k8s.io/v1".into()),
        kind: Some("Lease".into()),
        name: Some(args.leader_elect_name.clone()),
        namespace: Some(lease_namespace.clone()),
        ..Default::default()
    };

    // The lease outlives the shutdown signal: it is released only after every attempt in
    // flight has ended, so no request of ours can follow a standby's first write.
    let lease_stop = CancellationToken::new();
    // Leadership.
    let (leadership, lease_task) = if args.leader_elect {
        let (leadership, writer) = lease::Leadership::new();
        let namespace = lease_namespace.clone();
        let cfg = lease::LeaseConfig {
            name: args.leader_elect_name.clone(),
            namespace,
            identity: identity.clone(),
            lease_duration: args.leader_elect_lease_duration,
            renew_deadline: args.leader_elect_renew_deadline,
            retry_period: args.leader_elect_retry_period,
        };
        health
            .electing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let lease_health = health.clone();
        let lease_metrics = metrics.clone();
        let lease_shutdown = lease_stop.clone();
        let task = tokio::spawn(async move {
            let result = lease::run(lease_client, cfg, writer, lease_shutdown, lease_metrics).await;
            lease_health
                .electing
                .store(false, std::sync::atomic::Ordering::Relaxed);
            result
        });
        (leadership, Some(task))
    } else {
        // Dropping the writer is fine: leadership then never changes.
        let (leadership, _) = lease::Leadership::always();
        health
            .electing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        metrics.leader.set(1);
        (leadership, None)
    };
    // A request in flight when the lease is lost must end before another replica can take
    // the lease: bound it by the gap between lease duration and renew deadline.
    let request_timeout = if args.leader_elect {
        // At least 1 s: validate() keeps the gap at 1.5 s or more.
        (args.leader_elect_lease_duration - args.leader_elect_renew_deadline)
            .saturating_sub(Duration::from_millis(500))
    } else {
        Duration::from_secs(30)
    };

    let (report_tx, report_rx) = tokio::sync::mpsc::unbounded_channel();
    let lease_name = format!("{lease_namespace}/{}", args.leader_elect_name);
    // The event sender stops after the executor has drained (its last attempts announce
    // through it), and before the Lease is released.
    let events_stop = CancellationToken::new();

    // The node selector is applied by the driver when it can read it, so that a node
    // relabelled out of it is seen leaving (a selecting watch reports it deleted, with its old
    // labels). Otherwise the API server selects, and a node that leaves counts as deleted.
    let (node_selector, server_selector) = match args
        .node_selector
        .as_deref()
        .map(crate::adapters::selector::Selector::parse)
    {
        None => (None, None),
        Some(Ok(selector)) => (Some(selector), None),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "--node-selector is left to the API server: a node relabelled out of it is taken as deleted");
            (None, args.node_selector.as_deref())
        }
    };
    let executor = executor::Executor::new(
        client.clone(),
        limiter.clone(),
        leadership.clone(),
        report_tx,
        metrics.clone(),
        clock,
        executor::ExecutorConfig {
            request_timeout,
            node_read_ttl: Duration::from_secs(1),
            node_selector: node_selector.clone(),
            content_type: args.api_content_type,
        },
    );
    let (events, events_task) = events::EventSink::spawn(
        executor.requests(),
        events::Components {
            node: args.event_component.clone(),
            device: args.device_event_component.clone(),
        },
        identity.clone(),
        lease_name.clone(),
        leadership.clone(),
        limiter.clone(),
        metrics.clone(),
        request_timeout,
        events_stop.clone(),
    );
    let executor = executor.with_events(events.clone());
    let device_taints = if args.device_taints {
        Some(device_apis(&client).await?)
    } else {
        None
    };
    let client_for_rules = client.clone();
    let watches = watch::spawn(
        client,
        watch::Reads {
            initial: args.initial_list,
            page_size: args.page_size,
            content_type: args.api_content_type,
        },
        server_selector,
        device_taints,
        metrics.clone(),
        shutdown.clone(),
    );
    let pipeline = Pipeline::new(noexecute_engine::PipelineConfig {
        lease: Some(lease_name),
        refuse_if_foreign: args.refuse_if_foreign,
        handover: args.handover_delay,
        device_taints: args.device_taints,
        ..policy.pipeline_config(
            args.engine.comparison_operators,
            args.concurrency,
            crate::adapters::time::random_u64(),
        )
    });
    let rule_status = device_taints.filter(|d| d.rules).map(|_| {
        rule_status::RuleStatusWriter::new(
            client_for_rules.clone(),
            leadership.clone(),
            limiter.clone(),
            metrics.clone(),
            request_timeout,
        )
    });
    let driver = driver::Driver::new(
        pipeline,
        policy,
        clock,
        executor.clone(),
        events,
        metrics,
        leadership,
        health,
        brake_object,
        limiter,
        identity.clone(),
        node_selector,
    );
    let driver = match rule_status {
        Some((writer, failures)) => driver.with_rule_status(writer, failures),
        None => driver,
    };

    let signals = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        signals.cancel();
    });

    let stop = driver
        .run(watches, report_rx, status_rx, shutdown.clone())
        .await;
    let code = match stop {
        driver::Stop::Shutdown => 0,
        driver::Stop::LostLeadership => {
            tracing::error!("lost leadership; stopped acting and exiting");
            1
        }
        driver::Stop::WatchesEnded => {
            tracing::error!("watches ended unexpectedly");
            1
        }
    };
    shutdown.cancel();
    // The driver told every attempt in flight to stop; wait until they have (each request is
    // bounded by the request timeout) and until the event queue is flushed (each write fenced
    // by its term), then release the lease and stop serving. Nothing of this term's can
    // follow a standby's first write.
    executor.drain().await;
    events_stop.cancel();
    let _ = events_task.await;
    lease_stop.cancel();
    if let Some(task) = lease_task
        && let Ok(Err(e)) = task.await
    {
        tracing::error!(error = %e, "leader election");
    }
    let _ = admin_task.await;
    Ok(code)
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
