//! # noexecute-testkit
//!
//! Support for tests against a real control plane: kube-apiserver + etcd (and, when asked,
//! kube-controller-manager) built from the Go module proxy by `scripts/build-kube` and run by
//! `scripts/cluster`. No mocks.
//!
//! - [`Plane::shared`] starts or reuses one plane per test binary (state in
//!   `target/cluster-<name>/`), so binaries that need different controllers never share one.
//! - [`TestNamespace`] gives each test its own namespace and remembers the nodes it created, so
//!   tests can run in parallel on one plane.
//! - [`pod`], [`node`] and the `taint*` helpers build objects; there is no kubelet, so pods are
//!   bound with `spec.nodeName` and stay `Pending`.
//! - [`wait_evicted`] and [`assert_not_evicted_for`] are bounded waits on a watch: "evicted"
//!   means the pod is gone or has a `deletionTimestamp`, and "not evicted" is checked over the
//!   whole window, not at one instant.

pub mod realistic;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{
    Container, Event, Namespace, Node, NodeSpec, Pod, PodCondition, PodSpec, Taint, Toleration,
};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kube::{Api, Client, Config};

/// Leader-election timings for tests: client-go's 15/10/2 s ratios, shortened to 5/3/0.5 s (the renew gap of 2 s leaves requests 1.5 s).
pub const SHORT_LEASE: [&str; 6] = [
    "--leader-elect-lease-duration",
    "5s",
    "--leader-elect-renew-deadline",
    "3s",
    "--leader-elect-retry-period",
    "500ms",
];

/// The repository root (this crate lives in `crates/testkit`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// A running control plane started by `scripts/cluster`.
/// One completed write, as the API server's audit log has it.
#[derive(Debug, Clone)]
pub struct AuditEntry {
    /// `create`, `update`, `patch`, `delete`, ...
    pub verb: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub user: String,
    /// noexecute's carries the replica's identity: `noexecute/VERSION (IDENTITY)`.
    pub user_agent: String,
    pub code: u16,
    /// When the API server received the request (`requestReceivedTimestamp`: early in its
    /// handler chain, before authentication and priority and fairness).
    pub received: k8s_openapi::jiff::Timestamp,
    /// When it completed the response (`stageTimestamp` of the ResponseComplete stage, the
    /// only stage the plane's policy records).
    pub completed: k8s_openapi::jiff::Timestamp,
}

impl AuditEntry {
    /// A write that succeeded.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// The API server's own time on the request, received to response complete, in ms.
    pub fn server_ms(&self) -> f64 {
        self.completed.duration_since(self.received).as_secs_f64() * 1000.0
    }
}

#[derive(Debug, Clone)]
pub struct Plane {
    pub name: String,
    pub state_dir: PathBuf,
    /// Admin (`system:masters`) kubeconfig.
    pub kubeconfig: PathBuf,
    /// Kubeconfig of `system:serviceaccount:noexecute:noexecute`: exactly what `deploy/`'s RBAC
    /// grants, nothing more.
    pub controller_kubeconfig: PathBuf,
    /// Variables from the plane's `env` file (bin dir, ports, URLs).
    pub env: BTreeMap<String, String>,
}

impl Plane {
    /// Start the plane `name`, or reuse it if it is already up, with kube-controller-manager
    /// running exactly `controllers` (none if empty). Blocking; safe to call from many threads.
    pub fn up(name: &str, controllers: &[&str]) -> Result<Plane> {
        Plane::up_with_env(name, controllers, &[])
    }

    /// [`Plane::up`] with extra environment for `scripts/cluster` (e.g. `NOEXECUTE_KCM_ARGS`).
    pub fn up_with_env(name: &str, controllers: &[&str], env: &[(&str, &str)]) -> Result<Plane> {
        let with = format!("--with-controllers={}", controllers.join(","));
        Plane::start(name, &[with.as_str()], env)
    }

    /// `scripts/cluster up ARGS` for the plane `name`, then its env file.
    fn start(name: &str, args: &[&str], env: &[(&str, &str)]) -> Result<Plane> {
        let root = repo_root();
        let state_dir = root.join("target").join(format!("cluster-{name}"));
        let output = Command::new(root.join("scripts/cluster"))
            .arg("up")
            .args(args)
            .env("NOEXECUTE_CLUSTER_DIR", &state_dir)
            .envs(env.iter().copied())
            .output()
            .context("running scripts/cluster up")?;
        if !output.status.success() {
            bail!(
                "scripts/cluster up {args:?} failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let env = read_env(&state_dir.join("env"))?;
        Ok(Plane {
            name: name.to_string(),
            kubeconfig: state_dir.join("kubeconfig"),
            controller_kubeconfig: state_dir.join("controller.kubeconfig"),
            state_dir,
            env,
        })
    }

    /// The plane for this test binary, started on first use. A failure to start is reported to
    /// every test that asks (and fails it), rather than silently skipping anything.
    pub fn shared(name: &str, controllers: &[&str]) -> Result<&'static Plane> {
        static PLANE: OnceLock<std::result::Result<Plane, String>> = OnceLock::new();
        PLANE
            .get_or_init(|| Plane::up(name, controllers).map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow!("control plane {name} did not start: {e}"))
    }

    /// Run `scripts/cluster` with `args` against this plane.
    pub fn script(&self, args: &[&str]) -> Result<String> {
        let output = Command::new(repo_root().join("scripts/cluster"))
            .args(args)
            .env("NOEXECUTE_CLUSTER_DIR", &self.state_dir)
            .output()
            .with_context(|| format!("running scripts/cluster {args:?}"))?;
        if !output.status.success() {
            bail!(
                "scripts/cluster {args:?} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Start the whole plane `name` (`scripts/cluster up --full`): every kube-controller-manager
    /// controller but the two taint eviction controllers, taint-eviction-controller and
    /// device-taint-eviction-controller (all of them with `upstream`), kube-scheduler,
    /// and one kwok per zone for `zones` × `nodes_per_zone` simulated nodes named
    /// `zone-a-0`, `zone-a-1`, …, labelled `topology.kubernetes.io/zone=zone-a`, ….
    pub fn full(name: &str, zones: u32, nodes_per_zone: u32, upstream: bool) -> Result<Plane> {
        Plane::full_with_env(name, zones, nodes_per_zone, upstream, &[])
    }

    /// [`Plane::full`] with extra environment for `scripts/cluster` (e.g.
    /// `NOEXECUTE_AUDIT=bodies` for the soak's checker).
    pub fn full_with_env(
        name: &str,
        zones: u32,
        nodes_per_zone: u32,
        upstream: bool,
        env: &[(&str, &str)],
    ) -> Result<Plane> {
        let zones = format!("--zones={zones}");
        let per = format!("--nodes-per-zone={nodes_per_zone}");
        let mut args = vec!["--full", zones.as_str(), per.as_str()];
        if upstream {
            args.push("--upstream");
        }
        Plane::start(name, &args, env)
    }

    /// [`Plane::full`] with DRA device taints (`scripts/cluster up --full --dra`): the API
    /// server serves DeviceTaintRules, and kube-scheduler and kube-controller-manager run with
    /// `DRADeviceTaints` and `DRADeviceTaintRules`. Without `upstream` neither taint eviction
    /// controller runs; with it both do.
    pub fn full_dra(name: &str, zones: u32, nodes_per_zone: u32, upstream: bool) -> Result<Plane> {
        let zones = format!("--zones={zones}");
        let per = format!("--nodes-per-zone={nodes_per_zone}");
        let mut args = vec!["--full", "--dra", zones.as_str(), per.as_str()];
        if upstream {
            args.push("--upstream");
        }
        Plane::start(name, &args, &[])
    }

    /// Stop a zone's kwok: its nodes stop renewing their Leases.
    pub fn zone_down(&self, zone: &str) -> Result<()> {
        self.script(&["zone-down", zone]).map(|_| ())
    }

    /// Start a zone's kwok again: its nodes come back Ready.
    pub fn zone_up(&self, zone: &str) -> Result<()> {
        self.script(&["zone-up", zone]).map(|_| ())
    }

    /// Stop the plane named `name` if it runs, and remove its state.
    pub fn reset(name: &str) -> Result<()> {
        let root = repo_root();
        let state_dir = root.join("target").join(format!("cluster-{name}"));
        let status = Command::new(root.join("scripts/cluster"))
            .arg("down")
            .env("NOEXECUTE_CLUSTER_DIR", &state_dir)
            .output()
            .context("running scripts/cluster down")?;
        anyhow::ensure!(
            status.status.success(),
            "scripts/cluster down failed: {}",
            String::from_utf8_lossy(&status.stderr)
        );
        Ok(())
    }

    /// Stop the plane and remove its state.
    pub fn down(&self) -> Result<()> {
        self.script(&["down"]).map(|_| ())
    }

    /// The pid of one of the plane's processes (`kube-apiserver`, `etcd`,
    /// `kube-controller-manager`), from its pid file.
    pub fn pid(&self, component: &str) -> Option<u32> {
        std::fs::read_to_string(self.state_dir.join(format!("{component}.pid")))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// Run the plane's kubectl as admin, from the repository root.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        let bin = self
            .env
            .get("NOEXECUTE_KUBE_BIN")
            .ok_or_else(|| anyhow!("the plane's env file has no NOEXECUTE_KUBE_BIN"))?;
        let output = Command::new(Path::new(bin).join("kubectl"))
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .current_dir(repo_root())
            .output()
            .context("running kubectl")?;
        if !output.status.success() {
            bail!(
                "kubectl {args:?} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Every write the API server has completed so far, from its audit log
    /// (`scripts/cluster` records writes to pods, their status and evictions, Events, Leases
    /// and nodes), oldest first.
    pub fn audit(&self) -> Result<Vec<AuditEntry>> {
        let mut entries = Vec::new();
        for path in audit_files(&self.state_dir) {
            self.read_audit(&path, &mut entries)?;
        }
        Ok(entries)
    }

    fn read_audit(&self, path: &Path, entries: &mut Vec<AuditEntry>) -> Result<()> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the audit log {}", path.display()))?;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))?;
            let field = |p: &str| {
                v.pointer(p)
                    .and_then(|x| x.as_str())
                    .unwrap_or("")
                    .to_string()
            };
            let received = field("/requestReceivedTimestamp");
            let received: k8s_openapi::jiff::Timestamp = received.parse().with_context(|| {
                format!("{}:{}: requestReceivedTimestamp", path.display(), i + 1)
            })?;
            let completed = field("/stageTimestamp");
            let completed: k8s_openapi::jiff::Timestamp = completed
                .parse()
                .with_context(|| format!("{}:{}: stageTimestamp", path.display(), i + 1))?;
            entries.push(AuditEntry {
                verb: field("/verb"),
                resource: field("/objectRef/resource"),
                subresource: field("/objectRef/subresource"),
                namespace: field("/objectRef/namespace"),
                name: field("/objectRef/name"),
                user: field("/user/username"),
                user_agent: field("/userAgent"),
                code: v
                    .pointer("/responseStatus/code")
                    .and_then(|c| c.as_u64())
                    .unwrap_or(0) as u16,
                received,
                completed,
            });
        }
        Ok(())
    }

    /// Pod DELETEs the API server answered with success, from its own metrics.
    pub fn pod_deletes(&self) -> Result<f64> {
        let text = self.kubectl(&["get", "--raw", "/metrics"])?;
        Ok(text
            .lines()
            .filter(|l| {
                l.starts_with("apiserver_request_total{")
                    && l.contains("resource=\"pods\"")
                    && l.contains("verb=\"DELETE\"")
                    && l.contains("code=\"200\"")
                    && l.contains("subresource=\"\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// Install what `deploy/` grants the controller (namespace, service account, RBAC), so
    /// that a controller running with [`Plane::controller_kubeconfig`] has exactly that.
    pub fn install_rbac(&self) -> Result<()> {
        // `kubectl apply` is idempotent one at a time, but two running at once can both try
        // to create and one fails with AlreadyExists: tests of one binary take turns.
        static APPLY: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _turn = APPLY
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.kubectl(&[
            "apply",
            "-f",
            "deploy/namespace.yaml",
            "-f",
            "deploy/rbac.yaml",
        ])?;
        Ok(())
    }

    /// What `deploy/rbac-device-taints.yaml` grants besides (`--device-taints`).
    pub fn install_device_rbac(&self) -> Result<()> {
        self.install_rbac()?;
        self.kubectl(&["apply", "-f", "deploy/rbac-device-taints.yaml"])?;
        Ok(())
    }

    /// A client with admin rights. Make one per test: a client is tied to the runtime it was
    /// made on.
    pub async fn admin_client(&self) -> Result<Client> {
        client_from(&self.kubeconfig).await
    }

    /// A client with only the controller's RBAC.
    pub async fn controller_client(&self) -> Result<Client> {
        client_from(&self.controller_kubeconfig).await
    }
}

fn read_env(path: &Path) -> Result<BTreeMap<String, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.trim_matches(['\'', '"']).to_string()))
        .collect())
}

/// The audit logs of a plane's directory, oldest first: kube-apiserver's rotated files
/// (`audit-<time>.log`, from `--audit-log-maxsize`) and then `audit.log`. The soak's checker
/// lists them itself (`noexecute_soak::audit::files`): it is written apart and does not depend
/// on the test kit.
pub fn audit_files(dir: &Path) -> Vec<PathBuf> {
    let mut rotated: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("audit-") && n.ends_with(".log"))
                })
                .collect()
        })
        .unwrap_or_default();
    rotated.sort();
    rotated.push(dir.join("audit.log"));
    rotated
}

/// A client from a kubeconfig file.
pub async fn client_from(kubeconfig: &Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// The API server's minor version (`33` for v1.33.13; a trailing `+` is dropped).
pub async fn server_minor(client: &Client) -> Result<u32> {
    let info = client
        .apiserver_version()
        .await
        .context("reading the API server's version")?;
    let digits: String = info
        .minor
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits
        .parse()
        .with_context(|| format!("the API server's minor version is {:?}", info.minor))
}

/// The `observedGeneration` a pod condition written at `generation` keeps on this API
/// server: the `PodObservedGenerationTracking` gate is alpha and off in 1.33 (the server
/// drops the field, whoever writes it) and on by default from 1.34.
pub async fn kept_observed_generation(client: &Client, generation: i64) -> Result<Option<i64>> {
    Ok((server_minor(client).await? >= 34).then_some(generation))
}

/// A namespace of one's own, with the nodes the test created. Call [`TestNamespace::cleanup`]
/// at the end (a failed test leaves its objects behind; the plane is torn down after the run).
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
    nodes: std::sync::Mutex<Vec<String>>,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Label on test nodes naming the test's namespace.
pub const TEST_LABEL: &str = "noexecute.test/namespace";

impl TestNamespace {
    pub async fn create(client: &Client, prefix: &str) -> Result<TestNamespace> {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() % 1_000_000)
            .unwrap_or(0);
        let prefix: String = prefix
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(40)
            .collect();
        let name = format!("{prefix}-{}-{stamp}-{n}", std::process::id() % 10_000);
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        Ok(TestNamespace {
            name,
            client: client.clone(),
            nodes: std::sync::Mutex::new(Vec::new()),
        })
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.name)
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// A node name unique to this namespace.
    pub fn node_name(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.name)
    }

    /// The label every node of this test carries, as a selector: a controller started with
    /// `--node-selector` set to it manages this test's nodes only.
    pub fn node_selector(&self) -> String {
        format!("{TEST_LABEL}={}", self.name)
    }

    /// Create a node (named [`TestNamespace::node_name`]) with `taints`, labelled with
    /// [`TestNamespace::node_selector`].
    pub async fn create_node(&self, suffix: &str, taints: Vec<Taint>) -> Result<String> {
        let name = self.node_name(suffix);
        let mut n = node(&name, taints);
        n.metadata.labels = Some([(TEST_LABEL.to_string(), self.name.clone())].into());
        self.nodes()
            .create(&PostParams::default(), &n)
            .await
            .with_context(|| format!("creating node {name}"))?;
        if let Ok(mut nodes) = self.nodes.lock() {
            nodes.push(name.clone());
        }
        Ok(name)
    }

    pub async fn create_pod(&self, pod: &Pod) -> Result<Pod> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.pods()
            .create(&PostParams::default(), pod)
            .await
            .with_context(|| format!("creating pod {}/{name}", self.name))
    }

    /// Force-delete every pod in the namespace and the nodes this test created. The namespace
    /// itself is left: without a namespace controller it would stay `Terminating` anyway.
    pub async fn cleanup(&self) -> Result<()> {
        let pods = self.pods();
        for p in pods.list(&ListParams::default()).await? {
            let name = p.metadata.name.unwrap_or_default();
            let _ = pods
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await;
        }
        let nodes: Vec<String> = self.nodes.lock().map(|n| n.clone()).unwrap_or_default();
        for n in nodes {
            let _ = self.nodes().delete(&n, &DeleteParams::default()).await;
        }
        Ok(())
    }
}

/// A `NoExecute` taint.
pub fn no_execute(key: &str, value: &str) -> Taint {
    Taint {
        key: key.into(),
        value: (!value.is_empty()).then(|| value.into()),
        effect: "NoExecute".into(),
        time_added: None,
    }
}

/// A toleration of `key` (`Exists`, effect `NoExecute`) for `seconds`, or forever.
pub fn tolerate(key: &str, seconds: Option<i64>) -> Toleration {
    Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some("NoExecute".into()),
        toleration_seconds: seconds,
        value: None,
    }
}

pub fn node(name: &str, taints: Vec<Taint>) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A pod bound to `node` with `tolerations`. Its grace period is the default 30 s, so an
/// evicted pod stays visible (Terminating) for inspection; pass `Some(0)` to have it vanish.
pub fn pod(name: &str, node: &str, tolerations: Vec<Toleration>, grace: Option<i64>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("app".to_string(), "noexecute-test".to_string())].into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            termination_grace_period_seconds: grace,
            tolerations: (!tolerations.is_empty()).then_some(tolerations),
            containers: vec![Container {
                name: "main".into(),
                image: Some("registry.invalid/pause:3".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Replace a node's taints (a merge patch on `spec.taints`).
pub async fn set_taints(nodes: &Api<Node>, name: &str, taints: Vec<Taint>) -> Result<()> {
    let patch = serde_json::json!({ "spec": { "taints": taints } });
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("setting the taints of node {name}"))?;
    Ok(())
}

/// Add a taint to a node, keeping the others.
pub async fn add_taint(nodes: &Api<Node>, name: &str, taint: Taint) -> Result<()> {
    let node = nodes.get(name).await?;
    let mut taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    taints.push(taint);
    set_taints(nodes, name, taints).await
}

/// Remove the taints with `key` from a node.
pub async fn remove_taint(nodes: &Api<Node>, name: &str, key: &str) -> Result<()> {
    let node = nodes.get(name).await?;
    let taints: Vec<Taint> = node
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.key != key)
        .collect();
    set_taints(nodes, name, taints).await
}

/// How a pod was seen to be evicted.
#[derive(Debug, Clone)]
pub struct Evicted {
    /// When the watch showed it (not the API's one-second timestamps).
    pub seen_at: Instant,
    /// The last version of the pod seen (carrying its conditions), if any.
    pub last: Option<Pod>,
    /// It was deleted outright rather than marked for deletion.
    pub gone: bool,
}

fn is_evicted(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Watch `name` until it is evicted (gone, or `deletionTimestamp` set), for at most `timeout`.
pub async fn wait_evicted(pods: &Api<Pod>, name: &str, timeout: Duration) -> Result<Evicted> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = watcher(pods.clone(), config).boxed();
    let mut seen_any = false;
    let watch = async {
        while let Some(event) = stream.try_next().await? {
            match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    seen_any = true;
                    if is_evicted(&p) {
                        return Ok(Evicted {
                            seen_at: Instant::now(),
                            last: Some(p),
                            gone: false,
                        });
                    }
                }
                watcher::Event::Delete(p) => {
                    return Ok(Evicted {
                        seen_at: Instant::now(),
                        last: Some(p),
                        gone: true,
                    });
                }
                watcher::Event::InitDone if !seen_any => {
                    return Ok(Evicted {
                        seen_at: Instant::now(),
                        last: None,
                        gone: true,
                    });
                }
                _ => {}
            }
        }
        Err(anyhow!("the watch of pod {name} ended"))
    };
    match tokio::time::timeout(timeout, watch).await {
        Ok(result) => result,
        Err(_) => bail!("pod {name} was not evicted within {timeout:?}"),
    }
}

/// Watch every pod in `names` until all are evicted (gone, or `deletionTimestamp` set), for
/// at most `timeout`; when each was first seen evicted.
pub async fn wait_all_evicted(
    pods: &Api<Pod>,
    names: &[&str],
    timeout: Duration,
) -> Result<std::collections::BTreeMap<String, Instant>> {
    let wanted: std::collections::BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
    let mut seen: std::collections::BTreeMap<String, Instant> = Default::default();
    let mut present: std::collections::BTreeSet<String> = Default::default();
    let mut stream = watcher(pods.clone(), watcher::Config::default()).boxed();
    let watch = async {
        while let Some(event) = stream.try_next().await? {
            let now = Instant::now();
            match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    present.insert(name.clone());
                    if is_evicted(&p) && wanted.contains(&name) {
                        seen.entry(name).or_insert(now);
                    }
                }
                watcher::Event::Delete(p) => {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    if wanted.contains(&name) {
                        seen.entry(name).or_insert(now);
                    }
                }
                watcher::Event::InitDone => {
                    // Already gone before the watch started.
                    for name in wanted.iter().filter(|n| !present.contains(*n)) {
                        seen.entry(name.clone()).or_insert(now);
                    }
                }
                watcher::Event::Init => present.clear(),
            }
            if seen.len() == wanted.len() {
                return Ok(());
            }
        }
        Err(anyhow!("the pod watch ended"))
    };
    match tokio::time::timeout(timeout, watch).await {
        Ok(result) => result.map(|_| seen),
        Err(_) => {
            let missing: Vec<&String> = wanted.iter().filter(|n| !seen.contains_key(*n)).collect();
            bail!("pods {missing:?} were not evicted within {timeout:?}")
        }
    }
}

/// Every eviction in a namespace, recorded in the background by a watch: when each pod was
/// first seen marked for deletion or gone (monotonic, and wall clock to compare with a
/// taint's `timeAdded`). The watch stops when the log is dropped.
pub struct EvictionLog {
    seen: std::sync::Arc<std::sync::Mutex<BTreeMap<String, (Instant, std::time::SystemTime)>>>,
    /// The watch's first listing completed: evictions from then on are seen.
    listed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl EvictionLog {
    pub fn start(pods: Api<Pod>) -> EvictionLog {
        let seen: std::sync::Arc<std::sync::Mutex<BTreeMap<_, _>>> = Default::default();
        let sink = seen.clone();
        let listed: std::sync::Arc<std::sync::atomic::AtomicBool> = Default::default();
        let done = listed.clone();
        let task = tokio::spawn(async move {
            let mut stream = watcher(pods, watcher::Config::default()).boxed();
            while let Ok(Some(event)) = stream.try_next().await {
                if matches!(event, watcher::Event::InitDone) {
                    done.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                let (pod, gone) = match event {
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => (p, false),
                    watcher::Event::Delete(p) => (p, true),
                    _ => continue,
                };
                if gone || is_evicted(&pod) {
                    let name = pod.metadata.name.clone().unwrap_or_default();
                    if let Ok(mut s) = sink.lock() {
                        s.entry(name)
                            .or_insert_with(|| (Instant::now(), std::time::SystemTime::now()));
                    }
                }
            }
        });
        EvictionLog { seen, listed, task }
    }

    /// Until the watch has listed (bounded): an eviction before that could be missed.
    pub async fn listed(&self, timeout: Duration) -> Result<()> {
        let flag = self.listed.clone();
        eventually(timeout, "the eviction log's first listing", move || {
            let flag = flag.clone();
            async move { Ok(flag.load(std::sync::atomic::Ordering::SeqCst).then_some(())) }
        })
        .await
    }

    /// When `name` was first seen evicted (wall clock).
    pub fn at(&self, name: &str) -> Option<std::time::SystemTime> {
        self.seen.lock().ok()?.get(name).map(|(_, wall)| *wall)
    }

    /// When `name` was first seen evicted (monotonic).
    pub fn instant(&self, name: &str) -> Option<Instant> {
        self.seen.lock().ok()?.get(name).map(|(at, _)| *at)
    }

    /// The pods seen evicted, by name.
    pub fn names(&self) -> Vec<String> {
        self.seen
            .lock()
            .map(|s| s.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// How many evicted pods' names start with `prefix`.
    pub fn count(&self, prefix: &str) -> usize {
        self.seen
            .lock()
            .map(|s| s.keys().filter(|k| k.starts_with(prefix)).count())
            .unwrap_or(0)
    }
}

impl Drop for EvictionLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watch `name` for the whole of `window` and fail if it is evicted at any point in it.
pub async fn assert_not_evicted_for(pods: &Api<Pod>, name: &str, window: Duration) -> Result<()> {
    let started = Instant::now();
    match wait_evicted(pods, name, window).await {
        Ok(e) => bail!(
            "pod {name} was evicted {:?} into a {window:?} window where it must not be",
            e.seen_at.duration_since(started)
        ),
        Err(e) if e.to_string().contains("was not evicted within") => {
            // And it is still there, unmarked, at the end of the window.
            let pod = pods.get(name).await?;
            if is_evicted(&pod) {
                bail!("pod {name} is marked for deletion at the end of the window");
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// The pod's condition of type `type_`, if present.
pub fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// core/v1 Events about pod `name`, oldest first.
pub async fn pod_events(client: &Client, namespace: &str, name: &str) -> Result<Vec<Event>> {
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let lp = ListParams::default().fields(&format!(
        "involvedObject.name={name},involvedObject.kind=Pod"
    ));
    let mut list = events.list(&lp).await?.items;
    list.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
    Ok(list)
}

/// Poll `f` every 100 ms until it returns `Some`, for at most `timeout`. For state that has no
/// watchable object (events, metrics).
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("{what}: not true within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `noexecute run` as a child process, with its admin server on a free loopback port and its
/// output in a log file. Killed when dropped.
pub struct Controller {
    child: tokio::process::Child,
    pub admin: std::net::SocketAddr,
    pub log: PathBuf,
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

impl Controller {
    /// Start `binary run` against `plane` as the controller's service account, with `args`
    /// appended. `name` names the log file.
    pub fn start(plane: &Plane, binary: &Path, name: &str, args: &[&str]) -> Result<Controller> {
        let mut all = vec!["--admin-insecure"];
        all.extend_from_slice(args);
        Controller::start_secure(plane, binary, name, &all)
    }

    /// [`Controller::start`] without `--admin-insecure`: the admin server serves TLS, and
    /// `/metrics` and `/status` only to authorized callers (the plain-HTTP helpers here then
    /// cannot read them).
    pub fn start_secure(
        plane: &Plane,
        binary: &Path,
        name: &str,
        args: &[&str],
    ) -> Result<Controller> {
        let binary = binary.to_string_lossy();
        Controller::start_via(plane, &[&binary], &plane.controller_kubeconfig, name, args)
    }

    /// `run` through a launcher: `launcher[0]` is the program and the rest its arguments
    /// before `run` (e.g. `chroot --userspec=65532:65532 ROOTFS /noexecute`). `kubeconfig` is
    /// the path of the controller's kubeconfig as the controller sees it. Like
    /// [`Controller::start_secure`], the admin server serves TLS unless `args` say otherwise.
    pub fn start_via(
        plane: &Plane,
        launcher: &[&str],
        kubeconfig: &Path,
        name: &str,
        args: &[&str],
    ) -> Result<Controller> {
        let (program, before) = launcher
            .split_first()
            .ok_or_else(|| anyhow!("an empty launcher"))?;
        let port = free_port()?;
        let admin: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        let log = plane.state_dir.join(format!("controller-{name}.log"));
        let out = std::fs::File::create(&log)?;
        let err = out.try_clone()?;
        let child = tokio::process::Command::new(program)
            .args(before)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--admin-addr")
            .arg(admin.to_string())
            .arg("--leader-elect-namespace")
            .arg("noexecute")
            .args(args)
            .env("RUST_LOG", "info,noexecute=debug")
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", launcher.join(" ")))?;
        Ok(Controller { child, admin, log })
    }

    async fn get(&self, path: &str) -> Result<(u16, String)> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(self.admin).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        Ok((status, body))
    }

    /// Wait until `/readyz` answers 200.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "the controller exited ({status}) before it was ready; log: {}",
                    self.log_text()
                );
            }
            if let Ok((200, _)) = self.get("/readyz").await {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "the controller was not ready within {timeout:?}; log: {}",
                    self.log_text()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> Result<String> {
        let (status, body) = self.get("/metrics").await?;
        anyhow::ensure!(status == 200, "/metrics answered {status}");
        Ok(body)
    }

    /// `/status` as JSON: leadership and the pending evictions (`noexecute status`'s source).
    pub async fn status(&self) -> Result<serde_json::Value> {
        let (status, body) = self.get("/status").await?;
        anyhow::ensure!(status == 200, "/status answered {status}: {body}");
        serde_json::from_str(&body).with_context(|| format!("/status is not JSON: {body}"))
    }

    /// The value of the sample whose name (with labels, as printed) is `sample`.
    pub async fn metric(&self, sample: &str) -> Result<Option<f64>> {
        Ok(self
            .metrics()
            .await?
            .lines()
            .find_map(|l| l.strip_prefix(sample).and_then(|v| v.trim().parse().ok())))
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: a crash, no clean-up.
    pub async fn kill(&mut self) -> Result<()> {
        self.child.kill().await?;
        Ok(())
    }

    /// Wait (bounded) until `sample` reads `want`. A counter the controller bumps after an
    /// API response can lag what a watch already showed; read it this way, never once.
    pub async fn wait_metric(&self, sample: &str, want: f64, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let value = self.metric(sample).await?;
            if value == Some(want) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("{sample} reads {value:?} after {timeout:?}, want {want}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM and wait for the exit code (bounded).
    pub async fn terminate(&mut self, timeout: Duration) -> Result<Option<i32>> {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status();
        }
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(status) => Ok(status?.code()),
            Err(_) => bail!("the controller did not exit within {timeout:?} of SIGTERM"),
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The exit code, if it has exited.
    pub fn exited(&mut self) -> Result<Option<i32>> {
        Ok(self.child.try_wait()?.map(|s| s.code().unwrap_or(-1)))
    }
}

/// DRA objects for tests (`resource.k8s.io`), as dynamic objects.
pub mod dra {
    use anyhow::Result;
    use kube::api::{ApiResource, DynamicObject};
    use serde_json::json;

    /// A `resource.k8s.io` resource at `version`.
    pub fn resource(version: &str, kind: &str, plural: &str) -> ApiResource {
        ApiResource {
            group: "resource.k8s.io".into(),
            version: version.into(),
            api_version: format!("resource.k8s.io/{version}"),
            kind: kind.into(),
            plural: plural.into(),
        }
    }

    pub fn slices() -> ApiResource {
        resource("v1", "ResourceSlice", "resourceslices")
    }

    pub fn claims() -> ApiResource {
        resource("v1", "ResourceClaim", "resourceclaims")
    }

    pub fn rules() -> ApiResource {
        resource("v1beta2", "DeviceTaintRule", "devicetaintrules")
    }

    /// `value` as an object of `ar` (its apiVersion and kind set).
    pub fn object(ar: &ApiResource, value: serde_json::Value) -> Result<DynamicObject> {
        let mut value = value;
        value["apiVersion"] = json!(ar.api_version);
        value["kind"] = json!(ar.kind);
        Ok(serde_json::from_value(value)?)
    }

    /// kube-apiserver's flags that serve DeviceTaintRules (`DRADeviceTaintRules`, beta and off
    /// by default in 1.36, and `resource.k8s.io/v1beta2`).
    pub const APISERVER_ARGS: &str = "--feature-gates=DRADeviceTaints=true,DRADeviceTaintRules=true \
                                      --runtime-config=resource.k8s.io/v1beta2=true";
}
