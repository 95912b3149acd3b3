//! The soak itself: controller replicas behind fault-injecting proxies, seeded churn (taints,
//! zones, not-ready and out-of-service nodes, pods with random tolerations, Deployments,
//! nodes deleted and recreated, selector labels) and a seeded nemesis (kills, stops, freezes,
//! Lease edits and deletions, kube-apiserver and etcd restarts, cut, delayed and slowed
//! connections). It writes the nemesis's log and the checker's configuration beside the audit
//! log, then judges it.

use crate::check::{self, Config};
use crate::faults::Fault;
use crate::history::{Controller, History};
use crate::rules::Selector;
use crate::toxi::Toxiproxy;
use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

pub const FAULT_KINDS: [&str; 11] = [
    "kill",
    "term",
    "freeze",
    "lease-delete",
    "lease-edit",
    "apiserver-restart",
    "etcd-restart",
    "proxy-cut",
    "proxy-latency",
    "proxy-slow",
    "proxy-reset",
];

/// Namespaces of the soak's pods. The last is excluded by noexecute's `--exclude-namespace`.
const NAMESPACES: [&str; 3] = ["soak-a", "soak-b", "soak-excluded"];
const EXCLUDED: &str = "soak-excluded";
/// noexecute manages nodes without this label; the churn sets and clears it.
const UNMANAGED: &str = "soak.noexecute.io/unmanaged";
const TAINT_KEYS: [&str; 3] = ["soak/a", "soak/b", "soak/c"];
const LEASE_NS: &str = "noexecute";
const LEASE_NAME: &str = "soak";

#[derive(Debug, Clone, clap::Args)]
pub struct DriveArgs {
    /// How long churn and faults go on (e.g. 5m, 1h); a settle period follows.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub duration: Duration,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// noexecute or upstream (kube-controller-manager's taint-eviction-controller, which the
    /// plane must run: scripts/cluster up --full --upstream).
    #[arg(long, default_value = "noexecute")]
    pub controller: Controller,
    /// noexecute replicas (upstream: always the plane's one kube-controller-manager); with
    /// `--shards`, per shard.
    #[arg(long, default_value_t = 2)]
    pub replicas: usize,
    /// noexecute shards (1 to 3): each its own `--replicas`, Lease (`soak`, `soak-1`, …) and
    /// `--node-selector` over the zones (2: zones a and b, and zone c; 3: one zone each).
    /// The checker judges each shard on its own: a write by one shard's replica to a pod on
    /// another's node is wrong there.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=3))]
    pub shards: u32,
    /// Fault kinds, comma-separated, or `all`, or `none`.
    #[arg(long, default_value = "all")]
    pub faults: String,
    /// Mean seconds between faults.
    #[arg(long, default_value_t = 8.0)]
    pub fault_every: f64,
    /// The noexecute binary.
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// The plane's state directory (scripts/cluster's NOEXECUTE_CLUSTER_DIR).
    #[arg(long, env = "NOEXECUTE_CLUSTER_DIR")]
    pub plane: PathBuf,
    /// Where the logs, the nemesis's log, the configuration and the report go.
    #[arg(long)]
    pub out: PathBuf,
    /// After the churn stops: time for every due eviction to happen before judging.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub settle: Duration,
    /// Pods kept at most (older ones are deleted by the churn).
    #[arg(long, default_value_t = 300)]
    pub max_pods: usize,
    /// Extra flags for every noexecute replica (word-split).
    #[arg(long, default_value = "")]
    pub controller_args: String,
    /// noexecute's `--max-evictions-per-second` and `--eviction-burst` (the checker judges
    /// the same). A low rate keeps evictions queued for longer, which is what the brake's
    /// queue check guards.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u32).range(1..))]
    pub eviction_rate: u32,
    /// noexecute evicts through the Eviction API (`--eviction-mode evict`) with this
    /// `--pdb-timeout` (e.g. 10s), and each Deployment gets a PodDisruptionBudget that lets
    /// one of its pods go at a time. Unset: DELETE, no budgets.
    #[arg(long, value_parser = parse_duration)]
    pub pdb_timeout: Option<Duration>,
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|i| text.split_at(i))
        .unwrap_or((text, "s"));
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 90s, 5m, 1h)"))?;
    let seconds = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{text:?}: unit {unit:?} is not ms, s, m or h")),
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("{text:?} is not a duration"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// What the checker needs to judge a soak, written beside its logs (`soak.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SoakConfig {
    pub controller: String,
    pub seed: u64,
    pub duration_s: f64,
    pub replicas: usize,
    pub faults: Vec<String>,
    pub lease: String,
    pub renew_deadline_ms: i64,
    pub deadline_from_time_added: bool,
    pub node_selector: String,
    pub exclude_namespaces: Vec<String>,
    pub eviction_rate: Option<(f64, f64)>,
    pub qps: Option<(f64, f64, f64)>,
    pub brake: Option<(f64, usize)>,
    /// Extra flags given to every replica (`scripts/soak -- FLAGS`): the checker knows nothing
    /// of them, so a report of a soak with any says so.
    #[serde(default)]
    pub controller_args: String,
    /// Eviction-API mode: `--pdb-timeout` in milliseconds.
    #[serde(default)]
    pub pdb_timeout_ms: Option<i64>,
    /// With more than one shard: each shard's Lease, selector and replicas (the top-level
    /// `lease` and `node_selector` are then the first shard's).
    #[serde(default)]
    pub shards: Vec<Shard>,
}

/// One shard of a sharded soak.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Shard {
    pub lease: String,
    pub node_selector: String,
    /// Its replicas' names (the prefixes of their identities).
    pub replicas: Vec<String>,
}

/// The `--node-selector` of each of `n` shards: the unmanaged label's exclusion and a share of
/// the zones.
fn shard_selectors(n: u32) -> Vec<String> {
    let base = format!("!{UNMANAGED}");
    let zone = "topology.kubernetes.io/zone";
    match n {
        2 => vec![
            format!("{base},{zone}!=zone-c"),
            format!("{base},{zone}=zone-c"),
        ],
        3 => ["a", "b", "c"]
            .iter()
            .map(|z| format!("{base},{zone}=zone-{z}"))
            .collect(),
        _ => vec![base],
    }
}

/// The Lease of shard `k`.
fn shard_lease(k: usize) -> String {
    if k == 0 {
        LEASE_NAME.to_string()
    } else {
        format!("{LEASE_NAME}-{k}")
    }
}

/// What one shard is judged on: every entry but the writes of noexecute replicas outside
/// `replicas` (another shard's).
pub fn shard_entries(
    entries: &[crate::audit::Entry],
    replicas: &[String],
) -> Vec<crate::audit::Entry> {
    entries
        .iter()
        .filter(|e| {
            crate::history::noexecute_identity(&e.user_agent)
                .is_none_or(|id| replicas.iter().any(|name| is_replica(&id, name)))
        })
        .cloned()
        .collect()
}

/// Whether a replica named `name` wrote with `identity` (`NAME_SUFFIX`).
fn is_replica(identity: &str, name: &str) -> bool {
    identity
        .strip_prefix(name)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['_', '-']))
}

impl SoakConfig {
    pub fn checker(&self, faults: &[Fault]) -> Result<Config> {
        let controller: Controller = self.controller.parse().map_err(anyhow::Error::msg)?;
        let mut cfg = Config::new(controller, &self.lease);
        cfg.renew_deadline_ms = self.renew_deadline_ms;
        cfg.deadline_from_time_added = self.deadline_from_time_added;
        cfg.node_selector = self
            .node_selector
            .parse::<Selector>()
            .map_err(anyhow::Error::msg)?;
        cfg.exclude_namespaces = self.exclude_namespaces.clone();
        cfg.eviction_rate = self.eviction_rate;
        cfg.qps = self.qps;
        cfg.brake = self.brake;
        cfg.faults = faults.to_vec();
        cfg.pdb_timeout_ms = self.pdb_timeout_ms;
        Ok(cfg)
    }
}

/// The plane, from the env file scripts/cluster writes.
struct Plane {
    dir: PathBuf,
    env: BTreeMap<String, String>,
    root: PathBuf,
}

impl Plane {
    fn load(dir: &Path) -> Result<Plane> {
        let text = std::fs::read_to_string(dir.join("env"))
            .with_context(|| format!("reading {}/env: is the plane up?", dir.display()))?;
        let env = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.trim_matches(['\'', '"']).to_string()))
            .collect();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        Ok(Plane {
            dir: dir.to_path_buf(),
            env,
            root,
        })
    }

    fn get(&self, key: &str) -> Result<&str> {
        self.env
            .get(key)
            .map(String::as_str)
            .with_context(|| format!("{}/env has no {key}", self.dir.display()))
    }

    async fn script(&self, args: &[&str], extra_env: &[(&str, &str)]) -> Result<()> {
        let out = tokio::process::Command::new(self.root.join("scripts/cluster"))
            .args(args)
            .env("NOEXECUTE_CLUSTER_DIR", &self.dir)
            .envs(extra_env.iter().copied())
            .output()
            .await?;
        if !out.status.success() {
            bail!(
                "scripts/cluster {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or_default()
            );
        }
        Ok(())
    }

    fn pid(&self, component: &str) -> Option<u32> {
        std::fs::read_to_string(self.dir.join(format!("{component}.pid")))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = std::process::Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status();
}

fn now_micros() -> i64 {
    jiff::Timestamp::now().as_microsecond()
}

/// One noexecute replica, restarted when it exits (as a Deployment's pod would be).
struct Replica {
    name: String,
    /// Its shard's flags (Lease and node selector).
    args: Vec<String>,
    kubeconfig: PathBuf,
    log: PathBuf,
    child: Option<tokio::process::Child>,
    /// Down on purpose (killed or stopped, waiting to be restarted by the nemesis).
    held_down: bool,
    frozen: bool,
    starts: u32,
}

struct Replicas {
    binary: PathBuf,
    args: Vec<String>,
    list: Vec<Replica>,
}

impl Replicas {
    fn start(&mut self, i: usize) -> Result<()> {
        let r = &mut self.list[i];
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&r.log)?;
        let port = crate::toxi::free_port()?;
        let child = tokio::process::Command::new(&self.binary)
            .arg("run")
            .arg("--kubeconfig")
            .arg(&r.kubeconfig)
            .args([
                "--admin-insecure",
                "--admin-addr",
                &format!("127.0.0.1:{port}"),
            ])
            .args(["--identity", &r.name])
            .args(&self.args)
            .args(&r.args)
            .env("RUST_LOG", "info")
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        r.child = Some(child);
        r.held_down = false;
        r.frozen = false;
        r.starts += 1;
        Ok(())
    }

    fn pid(&self, i: usize) -> Option<u32> {
        self.list[i].child.as_ref()?.id()
    }

    /// Restarts replicas that exited on their own (lost leadership exits 1).
    fn supervise(&mut self) -> Result<()> {
        for i in 0..self.list.len() {
            let r = &mut self.list[i];
            if r.held_down {
                continue;
            }
            let exited = match r.child.as_mut() {
                Some(c) => c.try_wait()?.is_some(),
                None => true,
            };
            if exited {
                self.start(i)?;
            }
        }
        Ok(())
    }
}

struct Shared {
    plane: Plane,
    client: kube::Client,
    controller: Controller,
    replicas: Mutex<Replicas>,
    toxi: Option<Toxiproxy>,
    faults: Mutex<std::fs::File>,
    stop: AtomicBool,
    counter: AtomicU64,
    churn: Mutex<BTreeMap<&'static str, usize>>,
    errors: AtomicU64,
    /// noexecute's Leases, one per shard.
    leases: Vec<String>,
}

impl Shared {
    async fn record(&self, kind: &str, target: &str, start: i64, disruptive: bool) {
        let fault = Fault {
            kind: kind.to_string(),
            target: target.to_string(),
            start,
            end: now_micros(),
            disruptive,
        };
        let mut file = self.faults.lock().await;
        if let Ok(line) = serde_json::to_string(&fault) {
            let _ = writeln!(file, "{line}");
        }
    }

    async fn counted(&self, what: &'static str, result: Result<()>) {
        match result {
            Ok(()) => *self.churn.lock().await.entry(what).or_default() += 1,
            Err(e) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("churn {what}: {e:#}");
            }
        }
    }
}

pub async fn drive(args: DriveArgs) -> Result<i32> {
    let plane = Plane::load(&args.plane)?;
    std::fs::create_dir_all(&args.out)?;
    let kinds: Vec<String> = match args.faults.as_str() {
        // kube-controller-manager is not behind a proxy (see below).
        "all" => FAULT_KINDS
            .iter()
            .filter(|k| args.controller == Controller::Noexecute || !k.starts_with("proxy-"))
            .map(|s| s.to_string())
            .collect(),
        "none" | "" => Vec::new(),
        list => list.split(',').map(|s| s.trim().to_string()).collect(),
    };
    for k in &kinds {
        if !FAULT_KINDS.contains(&k.as_str()) {
            bail!(
                "unknown fault kind {k:?}; kinds: {}",
                FAULT_KINDS.join(", ")
            );
        }
        if args.controller == Controller::Upstream && k.starts_with("proxy-") {
            bail!(
                "fault {k}: kube-controller-manager talks to kube-apiserver directly here (its other controllers keep the plane alive), so proxy faults apply to noexecute only"
            );
        }
    }
    let kubeconfig = PathBuf::from(plane.get("KUBECONFIG")?);
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    let client = kube::Client::try_from(config)?;
    let bin = PathBuf::from(plane.get("NOEXECUTE_KUBE_BIN")?);
    let api_port = plane.get("NOEXECUTE_API_PORT")?.to_string();

    // The controller and what the checker must know about it.
    let soak = match args.controller {
        Controller::Noexecute => SoakConfig {
            controller: "noexecute".into(),
            seed: args.seed,
            duration_s: args.duration.as_secs_f64(),
            replicas: args.replicas,
            faults: kinds.clone(),
            lease: format!("{LEASE_NS}/{LEASE_NAME}"),
            renew_deadline_ms: 3_000,
            deadline_from_time_added: true,
            node_selector: shard_selectors(args.shards)[0].clone(),
            exclude_namespaces: vec![EXCLUDED.into()],
            eviction_rate: Some((f64::from(args.eviction_rate), f64::from(args.eviction_rate))),
            qps: Some((20.0, 30.0, 3.0)),
            brake: Some((75.0, 4)),
            controller_args: args.controller_args.clone(),
            pdb_timeout_ms: args
                .pdb_timeout
                .map(|t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX)),
            shards: if args.shards > 1 {
                shard_selectors(args.shards)
                    .into_iter()
                    .enumerate()
                    .map(|(k, node_selector)| Shard {
                        lease: format!("{LEASE_NS}/{}", shard_lease(k)),
                        node_selector,
                        replicas: (0..args.replicas)
                            .map(|i| format!("soak-{}", k * args.replicas + i))
                            .collect(),
                    })
                    .collect()
            } else {
                Vec::new()
            },
        },
        Controller::Upstream => SoakConfig {
            controller: "upstream".into(),
            seed: args.seed,
            duration_s: args.duration.as_secs_f64(),
            replicas: 1,
            faults: kinds.clone(),
            lease: "kube-system/kube-controller-manager".into(),
            renew_deadline_ms: 3_000,
            deadline_from_time_added: false,
            node_selector: String::new(),
            exclude_namespaces: Vec::new(),
            eviction_rate: None,
            qps: Some((20.0, 30.0, 4.0)),
            brake: None,
            controller_args: String::new(),
            pdb_timeout_ms: None,
            shards: Vec::new(),
        },
    };
    std::fs::write(
        args.out.join("soak.json"),
        serde_json::to_string_pretty(&soak)?,
    )?;

    setup(&client, &plane, args.pdb_timeout.is_some()).await?;

    // Replicas behind their proxies.
    let mut toxi = None;
    let mut replicas = Replicas {
        binary: args.binary.clone().unwrap_or_default(),
        args: Vec::new(),
        list: Vec::new(),
    };
    if args.controller == Controller::Noexecute {
        let binary = args
            .binary
            .clone()
            .context("--binary (the noexecute binary) is required with --controller noexecute")?;
        let proxy = Toxiproxy::start(
            &bin.join("toxiproxy-server"),
            &args.out.join("toxiproxy.log"),
        )
        .await?;
        let token = plane.get("NOEXECUTE_CONTROLLER_TOKEN")?.to_string();
        let ca = std::fs::read(plane.get("NOEXECUTE_CA_FILE")?)?;
        let ca = base64(&ca);
        replicas.binary = binary;
        replicas.args = vec![
            "--leader-elect-namespace".into(),
            LEASE_NS.into(),
            "--leader-elect-lease-duration".into(),
            "5s".into(),
            "--leader-elect-renew-deadline".into(),
            "3s".into(),
            "--leader-elect-retry-period".into(),
            "500ms".into(),
            "--deadline-from".into(),
            "taint-time-added".into(),
            "--exclude-namespace".into(),
            EXCLUDED.into(),
            "--max-evictions-per-second".into(),
            args.eviction_rate.to_string(),
            "--eviction-burst".into(),
            args.eviction_rate.to_string(),
            "--brake-threshold".into(),
            "75".into(),
            "--brake-min-nodes".into(),
            "4".into(),
        ];
        if let Some(timeout) = args.pdb_timeout {
            replicas.args.extend([
                "--eviction-mode".into(),
                "evict".into(),
                "--pdb-timeout".into(),
                format!("{}ms", timeout.as_millis()),
            ]);
        }
        replicas
            .args
            .extend(args.controller_args.split_whitespace().map(str::to_string));
        let selectors = shard_selectors(args.shards);
        for i in 0..args.replicas * selectors.len() {
            let name = format!("soak-{i}");
            let shard = i / args.replicas.max(1);
            let port = proxy.proxy(&name, &format!("127.0.0.1:{api_port}")).await?;
            let path = args.out.join(format!("{name}.kubeconfig"));
            std::fs::write(
                &path,
                format!(
                    "apiVersion: v1\nkind: Config\nclusters:\n- name: soak\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority-data: {ca}\nusers:\n- name: c\n  user:\n    token: {token}\ncontexts:\n- name: soak\n  context: {{cluster: soak, user: c}}\ncurrent-context: soak\n"
                ),
            )?;
            replicas.list.push(Replica {
                log: args.out.join(format!("{name}.log")),
                args: vec![
                    "--leader-elect-name".into(),
                    shard_lease(shard),
                    "--node-selector".into(),
                    selectors[shard].clone(),
                ],
                name,
                kubeconfig: path,
                child: None,
                held_down: false,
                frozen: false,
                starts: 0,
            });
        }
        for i in 0..replicas.list.len() {
            replicas.start(i)?;
        }
        toxi = Some(proxy);
    }

    let shared = Arc::new(Shared {
        plane,
        client,
        controller: args.controller.clone(),
        replicas: Mutex::new(replicas),
        toxi,
        faults: Mutex::new(std::fs::File::create(args.out.join("nemesis.jsonl"))?),
        stop: AtomicBool::new(false),
        counter: AtomicU64::new(0),
        churn: Mutex::new(BTreeMap::new()),
        errors: AtomicU64::new(0),
        leases: (0..args.shards as usize).map(shard_lease).collect(),
    });

    let started = Instant::now();
    tracing::info!(
        "soak: {} for {:?}, seed {}, faults {:?}",
        args.controller.name(),
        args.duration,
        args.seed,
        kinds
    );
    let supervisor = tokio::spawn(supervise(shared.clone()));
    let churn = tokio::spawn(churn(shared.clone(), args.seed, args.max_pods));
    let nemesis = tokio::spawn(nemesis(
        shared.clone(),
        args.seed ^ 0x9e37_79b9_7f4a_7c15,
        kinds.clone(),
        args.fault_every,
    ));
    tokio::time::sleep(args.duration).await;
    shared.stop.store(true, Ordering::SeqCst);
    let _ = churn.await;
    let _ = nemesis.await;
    tracing::info!(
        "soak: churn and faults stopped after {:?}; settling {:?}",
        started.elapsed(),
        args.settle
    );
    tokio::time::sleep(args.settle).await;
    supervisor.abort();
    // The end of the judged history: stop the replicas (a clean shutdown) and the proxy.
    {
        let mut replicas = shared.replicas.lock().await;
        for i in 0..replicas.list.len() {
            if let Some(pid) = replicas.pid(i) {
                signal(pid, "CONT");
                signal(pid, "TERM");
            }
        }
        for r in &mut replicas.list {
            if let Some(c) = r.child.as_mut() {
                let _ = tokio::time::timeout(Duration::from_secs(15), c.wait()).await;
            }
        }
    }
    let churn_counts = shared.churn.lock().await.clone();
    let errors = shared.errors.load(Ordering::Relaxed);
    let starts: Vec<u32> = shared
        .replicas
        .lock()
        .await
        .list
        .iter()
        .map(|r| r.starts)
        .collect();
    if let Ok(shared) = Arc::try_unwrap(shared)
        && let Some(t) = shared.toxi
    {
        t.stop().await;
    }
    std::fs::write(
        args.out.join("churn.json"),
        serde_json::to_string_pretty(
            &json!({"actions": churn_counts, "failed_actions": errors, "replica_starts": starts}),
        )?,
    )?;
    let (report, text) = judge(&args.out, &args.plane)?;
    print!("{text}");
    Ok(if report.total() == 0 && report.unresolved.is_empty() {
        0
    } else {
        1
    })
}

/// Judges a finished soak: its audit log, nemesis log and configuration. Writes report.txt.
pub fn judge(out: &Path, plane: &Path) -> Result<(check::Report, String)> {
    let soak: SoakConfig = serde_json::from_str(
        &std::fs::read_to_string(out.join("soak.json")).context("reading soak.json")?,
    )
    .context("soak.json")?;
    let faults = crate::faults::read(&out.join("nemesis.jsonl"))?;
    let cfg = soak.checker(&faults)?;
    let files = crate::audit::files(plane);
    let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let log = crate::audit::read(&paths)?;
    let mut shards_text = String::new();
    let mut report = if soak.shards.is_empty() {
        let history = History::build(&log.entries, &cfg.controller, &cfg.lease)?;
        check::check(&history, &cfg)
    } else {
        // Each shard on its own, over the writes of its replicas (and everyone else's that
        // are not noexecute's): another shard's write on its nodes is judged in that shard.
        let mut all: Option<check::Report> = None;
        for (k, shard) in soak.shards.iter().enumerate() {
            let mut cfg = soak.checker(&faults)?;
            cfg.lease = shard.lease.clone();
            cfg.node_selector = shard
                .node_selector
                .parse::<Selector>()
                .map_err(anyhow::Error::msg)?;
            let entries = shard_entries(&log.entries, &shard.replicas);
            let history = History::build(&entries, &cfg.controller, &cfg.lease)?;
            let r = check::check(&history, &cfg);
            shards_text.push_str(&format!(
                "shard {k} (Lease {}, --node-selector '{}', replicas {}):\n{r}\n",
                shard.lease,
                shard.node_selector,
                shard.replicas.join(", ")
            ));
            match &mut all {
                None => all = Some(r),
                Some(a) => {
                    // Unplaced entries are the same in every shard's history: counted once.
                    let mut r = r;
                    r.unresolved.clear();
                    a.absorb(r);
                }
            }
        }
        all.context("soak.json names no shard")?
    };
    drop(log.entries);
    if !log.unreadable.is_empty() {
        report.unresolved.insert(
            format!(
                "unreadable audit lines (first: {})",
                log.unreadable
                    .first()
                    .map(String::as_str)
                    .unwrap_or_default()
            ),
            log.unreadable.len(),
        );
    }
    let churn = std::fs::read_to_string(out.join("churn.json")).unwrap_or_default();
    let mut text = format!(
        "soak: controller {} seed {} duration {} s, {}\nfaults injected: {} ({})\nchurn: {}\n",
        soak.controller,
        soak.seed,
        soak.duration_s,
        if soak.shards.is_empty() {
            format!("{} replica(s)", soak.replicas)
        } else {
            format!(
                "{} shards of {} replica(s)",
                soak.shards.len(),
                soak.replicas
            )
        },
        faults.len(),
        crate::faults::by_kind(&faults)
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        churn.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    if !soak.controller_args.trim().is_empty() {
        text.push_str(&format!(
            "note: the replicas also ran with `{}`, which the checker does not model\n",
            soak.controller_args.trim()
        ));
    }
    if !shards_text.is_empty() {
        text.push_str(&shards_text);
        text.push_str("all shards:\n");
    }
    text.push_str(&report.to_string());
    std::fs::write(out.join("report.txt"), &text)?;
    Ok((report, text))
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

async fn setup(client: &kube::Client, plane: &Plane, budgets: bool) -> Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    for ns in NAMESPACES.iter().chain([&LEASE_NS]) {
        let body: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}}))?;
        match nss.create(&PostParams::default(), &body).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    // The controller's own RBAC, as deployed.
    let out = tokio::process::Command::new(
        PathBuf::from(plane.get("NOEXECUTE_KUBE_BIN")?).join("kubectl"),
    )
    .arg("--kubeconfig")
    .arg(plane.get("KUBECONFIG")?)
    .args(["apply", "-f"])
    .arg(plane.root.join("deploy/namespace.yaml"))
    .arg("-f")
    .arg(plane.root.join("deploy/rbac.yaml"))
    .output()
    .await?;
    if !out.status.success() {
        bail!(
            "kubectl apply of deploy/rbac.yaml: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Deployments: their ReplicaSets create and delete pods as they are scaled.
    for ns in &NAMESPACES[..2] {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
        for d in 0..2 {
            let name = format!("d{d}");
            let tolerations = if d == 0 {
                json!([])
            } else {
                json!([{"key": "soak/a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 4}])
            };
            let body: Deployment = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                  "template": {"metadata": {"labels": {"app": name}},
                    "spec": {"terminationGracePeriodSeconds": 0, "tolerations": tolerations,
                      "containers": [{"name": "c", "image": "soak"}]}}}}))?;
            match deployments.create(&PostParams::default(), &body).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            if budgets {
                // One pod of the Deployment may be disrupted at a time: evicting a second
                // while the first is being replaced is refused (429) until then.
                let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
                let body: PodDisruptionBudget = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": name}}}}))?;
                match pdbs.create(&PostParams::default(), &body).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(())
}

async fn supervise(shared: Arc<Shared>) {
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if shared.controller == Controller::Noexecute {
            let mut replicas = shared.replicas.lock().await;
            if let Err(e) = replicas.supervise() {
                tracing::warn!("restarting a replica: {e:#}");
            }
        } else if shared
            .plane
            .pid("kube-controller-manager")
            .is_none_or(|p| !alive(p))
            && !shared.stop.load(Ordering::SeqCst)
        {
            // kube-controller-manager exits when it loses its Lease: start it again.
            let _ = restart_kcm(&shared).await;
        }
    }
}

/// Whether the process runs and is not a zombie. Its state is the first field after the
/// command name, which may hold spaces and parentheses: read after the last `)`.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_none_or(|state| state != "Z")
        })
        .unwrap_or(false)
}

async fn restart_kcm(shared: &Shared) -> Result<()> {
    let spec = std::fs::read_to_string(shared.plane.dir.join("kcm.spec")).unwrap_or_default();
    let (list, extra) = spec.trim().split_once(' ').unwrap_or((spec.trim(), ""));
    let list = if list.is_empty() { "*" } else { list };
    shared
        .plane
        .script(&["kcm-start", list], &[("NOEXECUTE_KCM_ARGS", extra)])
        .await
}

// --- churn ---------------------------------------------------------------------------------

fn tolerations(rng: &mut StdRng) -> Value {
    let mut out = Vec::new();
    for _ in 0..rng.random_range(0..3u32) {
        let key = TAINT_KEYS[rng.random_range(0..TAINT_KEYS.len())];
        let t = match rng.random_range(0..8u32) {
            0 => json!({"key": key, "operator": "Exists", "effect": "NoExecute"}),
            1 => {
                json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0})
            }
            2 => json!({"key": key, "operator": "Equal", "value": "x", "effect": "NoExecute",
                        "tolerationSeconds": rng.random_range(1..9u32)}),
            3 => {
                json!({"key": key, "value": "", "effect": "NoExecute", "tolerationSeconds": rng.random_range(1..6u32)})
            }
            4 => {
                json!({"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": rng.random_range(2..8u32)})
            }
            5 => json!({"operator": "Exists"}),
            6 => {
                json!({"key": key, "operator": "Exists", "tolerationSeconds": rng.random_range(1..5u32)})
            }
            _ => {
                json!({"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                        "tolerationSeconds": rng.random_range(1..10u32)})
            }
        };
        out.push(t);
    }
    Value::Array(out)
}

fn taint_time() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

async fn node_names(client: &kube::Client) -> Result<Vec<(String, String)>> {
    let nodes: Api<Node> = Api::all(client.clone());
    Ok(nodes
        .list(&ListParams::default().labels("type=kwok"))
        .await?
        .items
        .into_iter()
        .filter_map(|n| {
            let zone = n
                .metadata
                .labels
                .as_ref()?
                .get("topology.kubernetes.io/zone")?
                .clone();
            Some((n.metadata.name?, zone))
        })
        .collect())
}

/// Changes a node's taints with `edit`, with the resourceVersion read (a conflict with the
/// node-lifecycle controller is tried again).
async fn edit_taints(
    client: &kube::Client,
    node: &str,
    edit: impl Fn(&mut Vec<Value>),
) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    for _ in 0..4 {
        let n = nodes.get(node).await?;
        let mut taints: Vec<Value> = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(|t| {
                t.iter()
                    .filter_map(|t| serde_json::to_value(t).ok())
                    .collect()
            })
            .unwrap_or_default();
        edit(&mut taints);
        let patch = json!({"metadata": {"resourceVersion": n.metadata.resource_version},
                           "spec": {"taints": taints}});
        match nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    bail!("node {node}: conflicts on every try")
}

async fn churn(shared: Arc<Shared>, seed: u64, max_pods: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let client = shared.client.clone();
    let mut down_zones: Vec<String> = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..400u64))).await;
        let nodes = match node_names(&client).await {
            Ok(n) if !n.is_empty() => n,
            _ => continue,
        };
        let zones: Vec<String> = {
            let mut z: Vec<String> = nodes.iter().map(|(_, z)| z.clone()).collect();
            z.sort();
            z.dedup();
            z
        };
        let (node, zone) = nodes[rng.random_range(0..nodes.len())].clone();
        let roll = rng.random_range(0..100u32);
        match roll {
            0..=34 => {
                let n = rng.random_range(2..8u32);
                for _ in 0..n {
                    let r = create_pod(&shared, &mut rng, &nodes).await;
                    shared.counted("pod-create", r).await;
                }
            }
            35..=44 => {
                let r = delete_pods(&shared, &mut rng, max_pods).await;
                shared.counted("pod-delete", r).await;
            }
            45..=59 => {
                let key = TAINT_KEYS[rng.random_range(0..3)];
                let value = ["x", "y", ""][rng.random_range(0..3)];
                let effect = [
                    "NoExecute",
                    "NoExecute",
                    "NoExecute",
                    "NoSchedule",
                    "PreferNoSchedule",
                ][rng.random_range(0..5)];
                let whole_zone = rng.random_range(0..5u32) == 0;
                let targets: Vec<String> = if whole_zone {
                    nodes
                        .iter()
                        .filter(|(_, z)| *z == zone)
                        .map(|(n, _)| n.clone())
                        .collect()
                } else {
                    vec![node.clone()]
                };
                for t in targets {
                    let at = taint_time();
                    let r = edit_taints(&client, &t, |taints| {
                        taints.retain(|x| !(x["key"] == key && x["effect"] == effect));
                        let mut taint = json!({"key": key, "value": value, "effect": effect});
                        if effect == "NoExecute" {
                            taint["timeAdded"] = json!(at);
                        }
                        taints.push(taint);
                    })
                    .await;
                    shared
                        .counted(if whole_zone { "taint-zone" } else { "taint" }, r)
                        .await;
                }
            }
            60..=74 => {
                let whole_zone = rng.random_range(0..4u32) == 0;
                let targets: Vec<String> = if whole_zone {
                    nodes
                        .iter()
                        .filter(|(_, z)| *z == zone)
                        .map(|(n, _)| n.clone())
                        .collect()
                } else {
                    vec![node.clone()]
                };
                for t in targets {
                    let r = edit_taints(&client, &t, |taints| {
                        taints.retain(|x| {
                            !x["key"].as_str().is_some_and(|k| k.starts_with("soak/"))
                                && x["key"] != "node.kubernetes.io/out-of-service"
                        })
                    })
                    .await;
                    shared
                        .counted(
                            if whole_zone {
                                "untaint-zone"
                            } else {
                                "untaint"
                            },
                            r,
                        )
                        .await;
                }
            }
            75..=77 => {
                // A zone outage (its kwok stops: node-lifecycle taints its nodes unreachable),
                // or the end of one.
                let r = if let Some(z) = down_zones.pop() {
                    shared.plane.script(&["zone-up", &z], &[]).await
                } else if zones.len() > 1 {
                    down_zones.push(zone.clone());
                    shared.plane.script(&["zone-down", &zone], &[]).await
                } else {
                    Ok(())
                };
                shared.counted("zone-down-up", r).await;
            }
            78..=81 => {
                // Not-ready through kwok's chaos label: node-lifecycle taints it not-ready.
                let on = rng.random_range(0..2u32) == 0;
                let nodes_api: Api<Node> = Api::all(client.clone());
                let patch = json!({"metadata": {"labels": {"node-not-ready.stage.kwok.x-k8s.io": if on { json!("true") } else { Value::Null }}}});
                let r = nodes_api
                    .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
                    .map_err(anyhow::Error::from);
                shared.counted("not-ready", r).await;
            }
            82..=84 => {
                let at = taint_time();
                let r = edit_taints(&client, &node, |taints| {
                    taints.retain(|x| x["key"] != "node.kubernetes.io/out-of-service");
                    taints.push(
                        json!({"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
                                       "effect": "NoExecute", "timeAdded": at}),
                    );
                })
                .await;
                shared.counted("out-of-service", r).await;
            }
            85..=89 => {
                let ns = NAMESPACES[rng.random_range(0..2)];
                let d = format!("d{}", rng.random_range(0..2u32));
                let replicas = rng.random_range(0..7u32);
                let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
                let r = api
                    .patch(
                        &d,
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
                    )
                    .await
                    .map(|_| ())
                    .map_err(anyhow::Error::from);
                shared.counted("deployment-scale", r).await;
            }
            90..=92 => {
                let r = recreate_node(&client, &node).await;
                shared.counted("node-recreate", r).await;
            }
            _ => {
                let on = rng.random_range(0..3u32) == 0;
                let nodes_api: Api<Node> = Api::all(client.clone());
                let patch = json!({"metadata": {"labels": {UNMANAGED: if on { json!("true") } else { Value::Null }}}});
                let r = nodes_api
                    .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
                    .map_err(anyhow::Error::from);
                shared.counted("selector-label", r).await;
            }
        }
    }
    for z in down_zones {
        let r = shared.plane.script(&["zone-up", &z], &[]).await;
        shared.counted("zone-down-up", r).await;
    }
}

async fn create_pod(shared: &Shared, rng: &mut StdRng, nodes: &[(String, String)]) -> Result<()> {
    let ns = NAMESPACES[rng.random_range(0..NAMESPACES.len())];
    let n = shared.counter.fetch_add(1, Ordering::Relaxed);
    // Now and then a name used before (deleted or not): pods are told apart by UID.
    let name = if n > 10 && rng.random_range(0..10u32) == 0 {
        format!("p{}", rng.random_range(0..n))
    } else {
        format!("p{n}")
    };
    let mut spec = json!({"terminationGracePeriodSeconds": rng.random_range(0..3u32),
                          "tolerations": tolerations(rng),
                          "containers": [{"name": "c", "image": "soak"}]});
    if rng.random_range(0..10u32) < 7 {
        spec["nodeName"] = json!(nodes[rng.random_range(0..nodes.len())].0);
    }
    let body: Pod = serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"soak": "true"}}, "spec": spec}),
    )?;
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), ns);
    match api.create(&PostParams::default(), &body).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn delete_pods(shared: &Shared, rng: &mut StdRng, max_pods: usize) -> Result<()> {
    let mut all = Vec::new();
    for ns in NAMESPACES {
        let api: Api<Pod> = Api::namespaced(shared.client.clone(), ns);
        for p in api
            .list(&ListParams::default().labels("soak=true"))
            .await?
            .items
        {
            if p.metadata.deletion_timestamp.is_none()
                && let Some(name) = p.metadata.name
            {
                all.push((ns, name));
            }
        }
    }
    if all.is_empty() {
        return Ok(());
    }
    let n = if all.len() > max_pods {
        all.len() - max_pods + 5
    } else {
        rng.random_range(1..4usize)
    };
    for _ in 0..n.min(all.len()) {
        let (ns, name) = all.swap_remove(rng.random_range(0..all.len()));
        let api: Api<Pod> = Api::namespaced(shared.client.clone(), ns);
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
    Ok(())
}

async fn recreate_node(client: &kube::Client, name: &str) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(name).await?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    nodes.delete(name, &DeleteParams::default()).await?;
    let client = client.clone();
    let name = name.to_string();
    // Back a moment later, with the same name and labels, clean.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let nodes: Api<Node> = Api::all(client);
        if let Ok(body) =
            serde_json::from_value::<Node>(json!({"metadata": {"name": name, "labels": labels,
              "annotations": {"kwok.x-k8s.io/node": "fake"}}}))
        {
            let _ = nodes.create(&PostParams::default(), &body).await;
        }
    });
    Ok(())
}

// --- nemesis -------------------------------------------------------------------------------

/// The replica holding `lease`, if any.
async fn leader(shared: &Shared, lease: &str) -> Option<usize> {
    let leases: Api<Lease> = Api::namespaced(shared.client.clone(), LEASE_NS);
    let holder = leases.get(lease).await.ok()?.spec?.holder_identity?;
    let replicas = shared.replicas.lock().await;
    replicas
        .list
        .iter()
        .position(|r| is_replica(&holder, &r.name))
}

async fn nemesis(shared: Arc<Shared>, seed: u64, kinds: Vec<String>, every: f64) {
    let mut rng = StdRng::seed_from_u64(seed);
    if kinds.is_empty() {
        return;
    }
    // The first faults come after the controller has settled in.
    tokio::time::sleep(Duration::from_secs(10)).await;
    while !shared.stop.load(Ordering::SeqCst) {
        let pause = rng.random_range(0.5..1.5) * every;
        tokio::time::sleep(Duration::from_secs_f64(pause)).await;
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let kind = kinds[rng.random_range(0..kinds.len())].clone();
        let r = fault(&shared, &mut rng, &kind).await;
        if let Err(e) = r {
            tracing::warn!("fault {kind}: {e:#}");
        }
    }
}

async fn fault(shared: &Shared, rng: &mut StdRng, kind: &str) -> Result<()> {
    let start = now_micros();
    let upstream = shared.controller == Controller::Upstream;
    // The target: a leader half of the time (a random shard's), else any replica.
    // (One shard draws nothing here, so a seed replays as before shards existed.)
    let lease = match shared.leases.len() {
        0 | 1 => LEASE_NAME.to_string(),
        n => shard_lease(rng.random_range(0..n)),
    };
    let leader = if upstream {
        Some(0)
    } else {
        leader(shared, &lease).await
    };
    let count = shared.replicas.lock().await.list.len();
    let target = match leader {
        Some(l) if rng.random_range(0..2u32) == 0 || count == 0 => l,
        _ => rng.random_range(0..count.max(1)),
    };
    let on_leader = leader == Some(target);
    let target_name = if upstream {
        "kube-controller-manager".to_string()
    } else {
        shared.replicas.lock().await.list[target].name.clone()
    };
    match kind {
        "kill" | "term" => {
            let sig = if kind == "kill" { "KILL" } else { "TERM" };
            let down = Duration::from_millis(rng.random_range(500..4000u64));
            if upstream {
                if let Some(pid) = shared.plane.pid("kube-controller-manager") {
                    signal(pid, sig);
                }
                tokio::time::sleep(down).await;
                if shared
                    .plane
                    .pid("kube-controller-manager")
                    .is_none_or(|p| !alive(p))
                {
                    restart_kcm(shared).await?;
                }
            } else {
                {
                    let mut replicas = shared.replicas.lock().await;
                    replicas.list[target].held_down = true;
                    if let Some(pid) = replicas.pid(target) {
                        signal(pid, "CONT");
                        signal(pid, sig);
                    }
                }
                tokio::time::sleep(down).await;
                let mut replicas = shared.replicas.lock().await;
                if let Some(c) = replicas.list[target].child.as_mut() {
                    if sig == "TERM" {
                        let _ = tokio::time::timeout(Duration::from_secs(10), c.wait()).await;
                    }
                    let _ = c.kill().await;
                }
                replicas.start(target)?;
            }
            shared.record(kind, &target_name, start, on_leader).await;
        }
        "freeze" => {
            let pid = if upstream {
                shared.plane.pid("kube-controller-manager")
            } else {
                shared.replicas.lock().await.pid(target)
            };
            let Some(pid) = pid else { return Ok(()) };
            signal(pid, "STOP");
            if !upstream {
                shared.replicas.lock().await.list[target].frozen = true;
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(1000..9000u64))).await;
            signal(pid, "CONT");
            if !upstream {
                shared.replicas.lock().await.list[target].frozen = false;
            }
            shared.record(kind, &target_name, start, on_leader).await;
        }
        "lease-delete" | "lease-edit" => {
            let (ns, name) = if upstream {
                ("kube-system", "kube-controller-manager")
            } else {
                (LEASE_NS, lease.as_str())
            };
            let leases: Api<Lease> = Api::namespaced(shared.client.clone(), ns);
            if kind == "lease-delete" {
                leases.delete(name, &DeleteParams::default()).await?;
            } else {
                let now = jiff::Timestamp::now()
                    .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
                    .to_string();
                leases
                    .patch(
                        name,
                        &PatchParams::default(),
                        &Patch::Merge(
                            &json!({"spec": {"holderIdentity": "soak-intruder", "renewTime": now}}),
                        ),
                    )
                    .await?;
            }
            shared.record(kind, name, start, true).await;
        }
        "apiserver-restart" | "etcd-restart" => {
            let down = format!("{:.1}", rng.random_range(0.0..3.0));
            shared
                .plane
                .script(&[kind, "--down-for", &down], &[])
                .await?;
            // The plane is back when kube-apiserver is ready again (after an etcd restart it
            // takes seconds to reconnect), not when the restarted process is.
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                let ready = match http::Request::get("/readyz").body(Vec::new()) {
                    Ok(request) => shared
                        .client
                        .request_text(request)
                        .await
                        .is_ok_and(|body| body.trim() == "ok"),
                    Err(_) => true,
                };
                if ready {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            shared.record(kind, "plane", start, true).await;
        }
        _ => {
            let Some(toxi) = shared.toxi.as_ref() else {
                return Ok(());
            };
            let held = Duration::from_millis(rng.random_range(2000..10000u64));
            match kind {
                "proxy-cut" => toxi.enable(&target_name, false).await?,
                "proxy-latency" => {
                    let latency = rng.random_range(200..2000u32);
                    toxi.toxic(
                        &target_name,
                        "lat-down",
                        "latency",
                        "downstream",
                        json!({"latency": latency, "jitter": latency / 4}),
                    )
                    .await?;
                    toxi.toxic(
                        &target_name,
                        "lat-up",
                        "latency",
                        "upstream",
                        json!({"latency": latency / 2}),
                    )
                    .await?;
                }
                "proxy-slow" => {
                    toxi.toxic(
                        &target_name,
                        "slow",
                        "bandwidth",
                        "downstream",
                        json!({"rate": rng.random_range(2..32u32)}),
                    )
                    .await?;
                }
                _ => {
                    toxi.toxic(
                        &target_name,
                        "reset",
                        "reset_peer",
                        "downstream",
                        json!({"timeout": rng.random_range(0..500u32)}),
                    )
                    .await?;
                }
            }
            tokio::time::sleep(held).await;
            toxi.heal(&target_name).await?;
            // A standby behind a slowed proxy may take the Lease meanwhile: always counted.
            shared.record(kind, &target_name, start, true).await;
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    #[test]
    fn base64_pads() {
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
    }
}
