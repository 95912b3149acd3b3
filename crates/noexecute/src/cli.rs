//! The command line: one subcommand per job, each a thin adapter onto a library module.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::offline::plan;
use crate::offline::scenario::{Offset, Scenario};
use crate::offline::state::ClusterState;
use crate::offline::{explain, plot, report, simulate};

#[derive(Debug, Parser)]
#[command(
    name = "noexecute",
    version,
    about = "Kubernetes NoExecute taint eviction: controller, simulator and planner"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller: evict pods from NoExecute-tainted nodes, as upstream's
    /// taint-eviction-controller does.
    Run(Box<crate::controller::RunArgs>),
    /// Run a scenario on a virtual clock and print the eviction timeline.
    Simulate(SimulateArgs),
    /// Who a real cluster would evict, and when, if these taints were added now; who is safe.
    Plan(PlanArgs),
    /// Why a pod would (or would not) be evicted: its tolerations against its node's taints.
    Explain(ExplainArgs),
    /// What a running controller is counting down right now: its pending evictions, by
    /// deadline, from its admin server's /status.
    Status(StatusArgs),
    /// The version of this binary (the controller, the plugin, the image and the chart share
    /// it).
    Version(VersionArgs),
}

#[derive(Debug, Args)]
pub struct VersionArgs {
    /// `table` (or `wide`) prints the version alone; `json`, `jsonl` and `yaml` an object.
    #[arg(long, short, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

/// Errors whose kind sets the exit status (see [`exit_code`]).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line asks for something impossible (exit 2, like clap's own usage errors).
    #[error("{0}")]
    Usage(String),
    /// What the command line names is not there: a pod, a node, nodes matching a selector
    /// (exit 3).
    #[error("{0}")]
    NotFound(String),
    /// The API server refused what the command needs (exit 4, as its own refusals).
    #[error("{0}")]
    Refused(String),
}

/// The exit status of a failed command: 2 for a usage error, 3 when what was named is not
/// there, 4 when the API server (or the admin server) failed or refused a request, 1 for
/// anything else (a file that cannot be read, say). Success is 0, and clap's own usage
/// errors exit with 2.
pub fn exit_code(error: &anyhow::Error) -> u8 {
    for cause in error.chain() {
        match cause.downcast_ref::<CliError>() {
            Some(CliError::Usage(_)) => return 2,
            Some(CliError::NotFound(_)) => return 3,
            Some(CliError::Refused(_)) => return 4,
            None => {}
        }
        if cause
            .downcast_ref::<crate::adapters::policy::PolicyError>()
            .is_some()
        {
            return 2;
        }
        if cause.downcast_ref::<kube::Error>().is_some()
            || cause
                .downcast_ref::<crate::controller::format::Failure>()
                .is_some()
            || cause
                .downcast_ref::<crate::controller::listwatch::Error>()
                .is_some()
        {
            return 4;
        }
    }
    1
}

fn usage(message: impl Into<String>) -> anyhow::Error {
    CliError::Usage(message.into()).into()
}

/// Where `plan` and `explain` read the cluster from.
#[derive(Debug, Args, Clone)]
pub struct SourceArgs {
    /// A snapshot file: the output of `kubectl get nodes,pods -A -o json` (add
    /// `,resourceslices,resourceclaims` for device taints, and `,devicetaintrules` where
    /// served). Without it the cluster is read live (read-only: list calls only).
    #[arg(long, value_name = "FILE")]
    pub snapshot: Option<PathBuf>,
    /// Kubeconfig for a live read (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, value_name = "PATH", conflicts_with = "snapshot")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context for a live read.
    #[arg(long, conflicts_with = "snapshot")]
    pub context: Option<String>,
    /// Only pods in this namespace (`explain`: the pod's namespace when POD has none; default:
    /// the kubeconfig context's namespace, else `default`).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// The HTTP versions of a live read: `auto` (HTTP/2 when the API server offers it) or
    /// `http1` (HTTP/1.1 only, for a proxy or load balancer that mishandles HTTP/2). Not used
    /// with --snapshot.
    #[arg(long, env = "NOEXECUTE_API_HTTP_VERSION", value_enum, default_value_t = crate::adapters::client::HttpVersion::Auto)]
    pub api_http_version: crate::adapters::client::HttpVersion,
}

/// Which pods `plan` shows. A taint acts on every pod of its nodes, so the plan covers every
/// namespace unless told otherwise; `-A` says so explicitly.
#[derive(Debug, Args, Clone, Default)]
pub struct RowFilter {
    /// Every namespace (the default of `plan`; it conflicts with -n).
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Only pods whose labels match this selector (k=v, k!=v, k, !k, comma-joined). It
    /// filters what is shown, not what is decided: the brake and rate limits still count
    /// every pod.
    #[arg(short = 'l', long = "selector", value_name = "SELECTOR")]
    pub selector: Option<String>,
}

impl SourceArgs {
    /// Read the cluster, keeping of each pod's labels only `pod_labels`.
    /// The namespace of `-n`, else (live) the kubeconfig context's, else `default`.
    pub fn default_namespace(&self) -> String {
        if let Some(ns) = &self.namespace {
            return ns.clone();
        }
        if self.snapshot.is_none()
            && let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            && let Ok(config) = runtime.block_on(crate::adapters::client::config(
                self.kubeconfig.as_deref(),
                self.context.as_deref(),
            ))
        {
            return config.default_namespace;
        }
        "default".into()
    }

    pub fn load(&self, pod_labels: &crate::offline::state::PodLabels) -> Result<ClusterState> {
        if let Some(path) = &self.snapshot {
            return Ok(ClusterState::from_file(path, pod_labels)?);
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let state = runtime.block_on(async {
            let client = crate::cli::client(
                self.kubeconfig.as_deref(),
                self.context.as_deref(),
                self.api_http_version,
            )
            .await?;
            ClusterState::from_cluster(client, pod_labels).await
        })?;
        if state.devices_unreadable {
            eprintln!(
                "warning: not allowed to list ResourceSlices, ResourceClaims or DeviceTaintRules: device taints are left out"
            );
        }
        Ok(state)
    }
}

pub use crate::adapters::client::client;

/// The hypothetical taints of `plan` and `explain`.
#[derive(Debug, Args, Clone, Default)]
pub struct HypothesisArgs {
    /// Add a taint to a node: NODE=key[=value]:Effect (repeatable).
    #[arg(long = "taint", value_name = "NODE=TAINT", value_parser = plan::parse_node_taint)]
    pub taints: Vec<plan::NodeTaint>,
    /// Add a taint to every node matching a label selector (k=v, k!=v, k, !k, comma-joined):
    /// --taint-selector topology.kubernetes.io/zone=a node.kubernetes.io/unreachable:NoExecute
    #[arg(long = "taint-selector", num_args = 2, value_names = ["SELECTOR", "TAINT"])]
    pub selectors: Vec<String>,
    /// Add a taint to a device in its ResourceSlice, as its driver would:
    /// DRIVER/POOL/DEVICE=key[=value]:Effect (repeatable; `timeAdded` is now).
    #[arg(long = "device-taint", value_name = "DEVICE=TAINT", value_parser = plan::parse_device_taint)]
    pub device_taints: Vec<plan::DeviceTaint>,
    /// Create this DeviceTaintRule (a YAML or JSON manifest; repeatable), as of now unless
    /// its taint has a `timeAdded`.
    #[arg(long = "device-rule", value_name = "FILE")]
    pub device_rules: Vec<PathBuf>,
}

impl HypothesisArgs {
    pub fn hypothesis(&self) -> Result<plan::Hypothesis> {
        let mut selected = Vec::new();
        for pair in self.selectors.chunks(2) {
            let [selector, taint] = pair else {
                anyhow::bail!("--taint-selector takes a SELECTOR and a TAINT");
            };
            let selector = plan::Selector::parse(selector).map_err(anyhow::Error::msg)?;
            let taint = plan::parse_taint(taint).map_err(anyhow::Error::msg)?;
            selected.push((selector, taint));
        }
        let rules = self
            .device_rules
            .iter()
            .map(|path| crate::adapters::device::read_rule(path))
            .collect::<Result<_, _>>()?;
        Ok(plan::Hypothesis {
            taints: self.taints.clone(),
            selected,
            device_taints: self.device_taints.clone(),
            rules,
        })
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub rows: RowFilter,
    #[command(flatten)]
    pub hypothesis: HypothesisArgs,
    /// Look no further ahead than this (e.g. 10m); default: until nothing is pending.
    #[arg(long, value_parser = parse_offset)]
    pub until: Option<Offset>,
    /// How to print the plan: a table (`wide`: with the reasons), or its rows as one JSON
    /// array, JSON lines or a YAML list.
    #[arg(long, short, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub policy: crate::adapters::policy::PolicyArgs,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The pod: NAMESPACE/NAME, or NAME with -n (or the kubeconfig context's namespace).
    pub pod: String,
    #[command(flatten)]
    pub source: SourceArgs,
    #[command(flatten)]
    pub hypothesis: HypothesisArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub policy: crate::adapters::policy::PolicyArgs,
    /// How to print it: text (`table`, `wide`), or the same as one JSON object or YAML.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

pub use crate::adapters::policy::EngineArgs;
pub use crate::adapters::time::wall_clock;

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// An aligned table for people.
    Table,
    /// The table with more columns.
    Wide,
    /// One JSON document (`plan` and `simulate`: an array of objects, one per line).
    Json,
    /// JSON lines: each object compact on a line of its own (`simulate` streams them).
    Jsonl,
    /// One YAML document (`plan` and `simulate`: a list of the same objects).
    Yaml,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The controller's admin server. In a cluster, forward a port to the leader first:
    /// `kubectl port-forward -n noexecute deploy/noexecute 8080` (the API server's service
    /// proxy drops credentials, so it cannot reach the secured endpoint).
    #[arg(long, default_value = "https://127.0.0.1:8080")]
    pub endpoint: String,
    /// Kubeconfig whose user's token is presented (default: $KUBECONFIG, ~/.kube/config).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context whose user's token is presented.
    #[arg(long)]
    pub context: Option<String>,
    /// A bearer token instead of the kubeconfig user's (e.g. `kubectl create token NAME`).
    #[arg(long, env = "NOEXECUTE_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Do not verify the admin server's certificate (self-signed unless one was given). Use
    /// it only towards a port-forward or an address you trust: the token is sent either way.
    #[arg(long, conflicts_with = "certificate_authority")]
    pub insecure_skip_tls_verify: bool,
    /// Verify the admin server's certificate against this CA bundle (PEM), e.g. the issuer of
    /// a cert-manager certificate given with --admin-tls-cert-file.
    #[arg(long, value_name = "FILE")]
    pub certificate_authority: Option<PathBuf>,
    /// Only pods in this namespace.
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
    /// Every namespace (the default: the controller counts down for the whole cluster).
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Show at most this many pending evictions, the earliest deadlines first (the controller
    /// returns at most 5,000).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub limit: u32,
    /// How to print the pending evictions: a table, or the status as one JSON or YAML
    /// document.
    #[arg(long, short, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The scenario file (YAML).
    pub scenario: PathBuf,
    /// How to print the timeline.
    #[arg(long, short, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Also draw the timeline (pods evicted over time, per zone or node) as an SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Add the DefaultTolerationSeconds admission plugin's 300 s not-ready/unreachable
    /// tolerations to every pod, as a real API server does.
    #[arg(long)]
    pub default_tolerations: bool,
    /// Stop at this time (overrides the scenario's `until`), e.g. 900s or 1h.
    #[arg(long, value_parser = parse_offset)]
    pub until: Option<Offset>,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub policy: crate::adapters::policy::PolicyArgs,
    #[command(flatten)]
    pub actions: crate::adapters::policy::ActionArgs,
}

fn parse_offset(s: &str) -> Result<Offset, String> {
    Offset::parse(s)
}

pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Run(args) => run_command(*args),
        Command::Simulate(args) => simulate_command(args),
        Command::Plan(args) => plan_command(args),
        Command::Explain(args) => explain_command(args),
        Command::Status(args) => status_command(args),
        Command::Version(args) => version_command(args),
    }
}

fn version_command(args: VersionArgs) -> Result<ExitCode> {
    let version = env!("CARGO_PKG_VERSION");
    let data = serde_json::json!({ "version": version });
    match args.output {
        Output::Table | Output::Wide => println!("noexecute {version}"),
        Output::Json => println!("{}", serde_json::to_string_pretty(&data)?),
        Output::Jsonl => println!("{data}"),
        Output::Yaml => print!("{}", serde_saphyr::to_string(&data)?),
    }
    Ok(ExitCode::SUCCESS)
}

/// Every node `--taint` names must exist, every `--taint-selector` must match a node, and
/// the device taints and rules must touch a device (`Hypothesis::resolve`): the hypothesis
/// checked against `state`, or the error and exit status that say why not.
fn require_targets<'h>(
    state: &ClusterState,
    hypothesis: &'h plan::Hypothesis,
) -> Result<plan::Resolved<'h>> {
    match hypothesis.resolve(state) {
        Ok(resolved) => Ok(resolved),
        Err(e @ plan::Unresolved::DevicesUnreadable) => {
            Err(CliError::Refused(e.to_string()).into())
        }
        Err(plan::Unresolved::NotFound(what)) => Err(CliError::NotFound(what).into()),
    }
}

fn status_command(args: StatusArgs) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let status = runtime.block_on(fetch_status(&args))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match args.output {
        Output::Table => crate::controller::status::table(&status, false, &mut out)?,
        Output::Wide => crate::controller::status::table(&status, true, &mut out)?,
        Output::Json => writeln!(out, "{}", serde_json::to_string_pretty(&status)?)?,
        Output::Jsonl => writeln!(out, "{}", serde_json::to_string(&status)?)?,
        Output::Yaml => write!(out, "{}", serde_saphyr::to_string(&status)?)?,
    }
    out.flush().context("writing the status")?;
    Ok(ExitCode::SUCCESS)
}

/// GET /status from the admin server, presenting the kubeconfig user's token (or `--token`).
async fn fetch_status(args: &StatusArgs) -> Result<crate::controller::status::Status> {
    let url: axum::http::Uri = args
        .endpoint
        .parse()
        .with_context(|| format!("--endpoint {:?} is not a URL", args.endpoint))?;
    let mut config =
        match crate::adapters::client::config(args.kubeconfig.as_deref(), args.context.as_deref())
            .await
        {
            Ok(config) => config,
            Err(_) if args.token.is_some() && args.kubeconfig.is_none() => {
                kube::Config::new(url.clone())
            }
            Err(e) => {
                return Err(
                    e.context("reading the kubeconfig for its user's token (or give --token)")
                );
            }
        };
    config.cluster_url = url;
    config.default_retry = false;
    // The kubeconfig's CA, server name and proxy are the API server's, not the controller's.
    config.root_cert = None;
    config.tls_server_name = None;
    config.proxy_url = None;
    if let Some(ca) = &args.certificate_authority {
        let pem = std::fs::read(ca)
            .with_context(|| format!("--certificate-authority {}", ca.display()))?;
        let certs: Vec<Vec<u8>> = rustls::pki_types::pem::PemObject::pem_slice_iter(&pem)
            .map(|c: Result<rustls::pki_types::CertificateDer<'static>, _>| c.map(|c| c.to_vec()))
            .collect::<Result<_, _>>()
            .with_context(|| format!("--certificate-authority {}", ca.display()))?;
        anyhow::ensure!(
            !certs.is_empty(),
            "--certificate-authority {}: no certificate in it",
            ca.display()
        );
        config.root_cert = Some(certs);
    }
    config.accept_invalid_certs = args.insecure_skip_tls_verify;
    if let Some(token) = &args.token {
        config.auth_info = kube::config::AuthInfo {
            token: Some(token.clone().into()),
            ..Default::default()
        };
    }
    let client = kube::Client::try_from(config).context("a client for the admin server")?;
    let path = match &args.namespace {
        Some(ns) => format!("/status?namespace={ns}&limit={}", args.limit),
        None => format!("/status?limit={}", args.limit),
    };
    let request = axum::http::Request::get(path)
        .body(Vec::new())
        .context("building the request")?;
    let text = client
        .request_text(request)
        .await
        .with_context(|| format!("GET {}/status", args.endpoint.trim_end_matches('/')))?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{}/status answered something other than a status",
            args.endpoint
        )
    })
}

fn simulate_command(args: SimulateArgs) -> Result<ExitCode> {
    let scenario = Scenario::load(&args.scenario)?;
    let policy = args.policy.resolve_with(&args.actions)?;
    let opts = simulate::Options {
        default_tolerations: args.default_tolerations,
        until: args.until.map(Offset::time),
        config: policy.engine_config(args.engine.comparison_operators),
        policy,
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    // JSON, JSON lines and YAML are written as the simulation makes them; the table (its
    // columns are as wide as their widest cell) and the plot need the whole timeline.
    let streamed =
        matches!(args.output, Output::Json | Output::Jsonl | Output::Yaml) && args.plot.is_none();
    let timeline = if streamed {
        let mut failed = None;
        let mut list = report::JsonList::default();
        let timeline = simulate::stream(scenario, opts, &mut |entry| {
            if failed.is_some() {
                return;
            }
            let written = match args.output {
                Output::Yaml => report::yaml_entry(&entry, &mut out),
                Output::Json => report::json_item(&mut list, &entry, &mut out),
                _ => report::json_entry(&entry, &mut out),
            };
            failed = written.err();
        });
        if let Some(e) = failed {
            return Err(e).context("writing the timeline");
        }
        if args.output == Output::Json {
            list.end(&mut out).context("writing the timeline")?;
        }
        timeline
    } else {
        let timeline = simulate::run(scenario, opts);
        match args.output {
            Output::Table | Output::Wide => report::table(&timeline, &mut out),
            Output::Json => report::json(&timeline, &mut out),
            Output::Jsonl => report::json_lines(&timeline, &mut out),
            Output::Yaml => report::yaml(&timeline, &mut out),
        }
        .context("writing the timeline")?;
        timeline
    };
    out.flush().context("writing the timeline")?;
    if let Some(path) = &args.plot {
        let title = format!(
            "{}: {} of {} pods evicted",
            args.scenario.display(),
            timeline.evicted(),
            timeline.pods_seen
        );
        std::fs::write(path, plot::svg(&timeline, &title))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn plan_command(args: PlanArgs) -> Result<ExitCode> {
    let hypothesis = args
        .hypothesis
        .hypothesis()
        .map_err(|e| usage(format!("{e:#}")))?;
    let policy = args.policy.resolve()?;
    let selector = args
        .rows
        .selector
        .as_deref()
        .map(|s| plan::Selector::parse(s).map_err(|e| usage(format!("--selector: {e}"))))
        .transpose()?;
    // Keep the labels the selector reads as well as the policy's.
    let mut labels = policy.pod_labels();
    if let (Some(sel), crate::adapters::slim::PodLabels::Only(keys)) = (&selector, &mut labels) {
        keys.extend(sel.keys().map(str::to_string));
    }
    let state = args.source.load(&labels)?;
    let resolved = require_targets(&state, &hypothesis)?;
    let shown: Option<std::collections::HashSet<String>> = selector.map(|sel| {
        state
            .pods
            .iter()
            .filter(|p| sel.matches(&p.metadata.labels.clone().unwrap_or_default()))
            .map(|p| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or(""),
                    p.metadata.name.as_deref().unwrap_or("")
                )
            })
            .collect()
    });
    let now = wall_clock();
    let horizon = args
        .until
        .map(|u| now.plus(std::time::Duration::from_millis(u.0.unsigned_abs())));
    let result = plan::run(
        state,
        &resolved,
        now,
        horizon,
        &policy,
        args.engine.comparison_operators,
    )
    .map_err(anyhow::Error::msg)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut result = result;
    if let Some(ns) = &args.source.namespace {
        let prefix = format!("{ns}/");
        result.rows.retain(|r| r.pod.starts_with(&prefix));
    }
    if let Some(shown) = &shown {
        result.rows.retain(|r| shown.contains(&r.pod));
    }
    match args.output {
        Output::Table => report::plan_table(&result, false, &mut out),
        Output::Wide => report::plan_table(&result, true, &mut out),
        Output::Json => report::plan_json(&result, &mut out),
        Output::Jsonl => report::plan_json_lines(&result, &mut out),
        Output::Yaml => report::plan_yaml(&result, &mut out),
    }
    .context("writing the plan")?;
    out.flush().context("writing the plan")?;
    Ok(ExitCode::SUCCESS)
}

fn explain_command(args: ExplainArgs) -> Result<ExitCode> {
    let hypothesis = args
        .hypothesis
        .hypothesis()
        .map_err(|e| usage(format!("{e:#}")))?;
    let policy = args.policy.resolve()?;
    let pod = if args.pod.contains('/') {
        args.pod.clone()
    } else {
        format!("{}/{}", args.source.default_namespace(), args.pod)
    };
    let Some((namespace, name)) = pod.split_once('/') else {
        return Err(usage(format!("{pod:?}: expected NAMESPACE/POD")));
    };
    let state = args.source.load(&policy.pod_labels())?;
    if !state.pods.iter().any(|p| {
        p.metadata.namespace.as_deref() == Some(namespace)
            && p.metadata.name.as_deref() == Some(name)
    }) {
        return Err(CliError::NotFound(format!("pod {pod} is not in {}", state.source)).into());
    }
    let resolved = require_targets(&state, &hypothesis)?;
    let now = wall_clock();
    let explanation = explain::explain(
        state,
        &resolved,
        &pod,
        now,
        &policy,
        args.engine.comparison_operators,
    )
    .map_err(anyhow::Error::msg)?;
    match args.output {
        Output::Table | Output::Wide => print!("{}", explanation.text(now)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&explanation)?),
        Output::Jsonl => println!("{}", serde_json::to_string(&explanation)?),
        Output::Yaml => print!("{}", serde_saphyr::to_string(&explanation)?),
    }
    Ok(ExitCode::SUCCESS)
}

fn run_command(args: crate::controller::RunArgs) -> Result<ExitCode> {
    crate::controller::init_logging(args.log_format);
    // One thread by default: the work is I/O-bound and one engine loop owns every decision;
    // a second worker thread mostly added wake-ups between threads (docs/benchmarks.md).
    let runtime = match args.worker_threads {
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        0 => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(n)
            .enable_all()
            .build(),
    }
    .context("starting the async runtime")?;
    let code = runtime.block_on(crate::controller::run(args))?;
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_flag_of_every_command_is_described() {
        let cli = super::Cli::command();
        let mut missing = Vec::new();
        for sub in cli.get_subcommands() {
            for arg in sub.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg
                    .get_help()
                    .is_none_or(|h| h.to_string().trim().is_empty())
                {
                    missing.push(format!("{} --{}", sub.get_name(), id));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "flags without a description: {missing:?}"
        );
    }

    /// `--api-http-version` is parsed into `run`'s and the live reads' arguments, `auto` is
    /// the default, each of the three commands declares `NOEXECUTE_API_HTTP_VERSION`, and a
    /// wrong value is refused with the values it could be. (That the clients then speak it is
    /// `tests/proto.rs`'s.)
    #[test]
    fn the_http_version_is_read_from_the_flag_and_declares_its_env() {
        use crate::adapters::client::HttpVersion;
        use clap::FromArgMatches as _;
        let parse = |args: &[&str]| {
            super::Cli::command()
                .try_get_matches_from(args)
                .and_then(|m| super::Cli::from_arg_matches(&m))
                .map(|cli| match cli.command {
                    super::Command::Run(args) => args.api_http_version,
                    super::Command::Plan(args) => args.source.api_http_version,
                    super::Command::Explain(args) => args.source.api_http_version,
                    other => panic!("unexpected command {other:?}"),
                })
        };
        let version = |args: &[&str]| parse(args).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(version(&["noexecute", "run"]), HttpVersion::Auto);
        assert_eq!(
            version(&["noexecute", "run", "--api-http-version=http1"]),
            HttpVersion::Http1
        );
        assert_eq!(
            version(&["noexecute", "plan", "--api-http-version", "http1"]),
            HttpVersion::Http1
        );
        assert_eq!(
            version(&["noexecute", "explain", "a", "--api-http-version=http1"]),
            HttpVersion::Http1
        );
        assert_eq!(version(&["noexecute", "plan"]), HttpVersion::Auto);
        let refused = parse(&["noexecute", "run", "--api-http-version=h2"])
            .err()
            .unwrap_or_else(|| panic!("h2 was taken"))
            .to_string();
        assert!(
            refused.contains("auto") && refused.contains("http1"),
            "{refused}"
        );
        for name in ["run", "plan", "explain"] {
            let command = super::Cli::command();
            let env = command
                .find_subcommand(name)
                .and_then(|sub| {
                    sub.get_arguments()
                        .find(|a| a.get_id() == "api_http_version")
                        .and_then(|a| a.get_env())
                        .map(|e| e.to_string_lossy().into_owned())
                })
                .unwrap_or_else(|| panic!("{name}: no --api-http-version with an env"));
            assert_eq!(env, "NOEXECUTE_API_HTTP_VERSION", "{name}");
        }
    }

    #[test]
    fn usage_not_found_and_api_errors_have_their_own_exit_codes() {
        let usage = super::usage("bad flag");
        assert_eq!(super::exit_code(&usage), 2);
        let missing: anyhow::Error = super::CliError::NotFound("pod a/b".into()).into();
        assert_eq!(super::exit_code(&missing.context("explaining")), 3);
        let api: anyhow::Error = kube::Error::LinesCodecMaxLineLengthExceeded.into();
        assert_eq!(super::exit_code(&api.context("listing pods")), 4);
        let listed: anyhow::Error =
            crate::controller::listwatch::Error::List(crate::controller::format::Failure::Status {
                code: 403,
                reason: "Forbidden".into(),
                message: "pods is forbidden".into(),
            })
            .into();
        assert_eq!(super::exit_code(&listed.context("listing pods")), 4);
        let no_version: anyhow::Error =
            crate::controller::listwatch::Error::NoResourceVersion.into();
        assert_eq!(super::exit_code(&no_version.context("listing pods")), 4);
        assert_eq!(super::exit_code(&anyhow::anyhow!("reading a file")), 1);
    }
}
