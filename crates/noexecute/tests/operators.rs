//! What operators touch, against a real kube-apiserver + etcd with `deploy/`'s RBAC:
//! - the admin server as kube-controller-manager serves its own: TLS, `/metrics` and
//!   `/status` only for callers the API server authenticates and authorizes (401 without a
//!   token, 403 for a user without the `noexecute-metrics-reader` role, 200 with it), the
//!   probes open;
//! - `noexecute status` lists exactly the pods whose evictions are counting down, with the
//!   deadlines the controller scheduled (as its log says);
//! - the kubectl plugin (`kubectl noexecute`, the same binary under the plugin's name) gives
//!   the plain binary's answers, honouring `-n` and the kubeconfig's current context.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use noexecute_testkit::*;

const PLANE: &str = "operators";

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

/// `curl -k` of an admin-server URL: (HTTP code, body). Code 0: no HTTP answer at all.
fn curl(url: &str, token: Option<&str>) -> Result<(u16, String)> {
    let mut cmd = Command::new("curl");
    cmd.args(["-sk", "--max-time", "10", "-w", "\n%{http_code}", url]);
    if let Some(token) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {token}")]);
    }
    let out = cmd.output().context("running curl")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    Ok((code.trim().parse().unwrap_or(0), body.to_string()))
}

/// A service account in `ns` and a token for it; with `reader`, bound to the
/// `noexecute-metrics-reader` ClusterRole that `deploy/rbac.yaml` ships.
fn account(plane: &Plane, ns: &str, name: &str, reader: bool) -> Result<String> {
    plane.kubectl(&["create", "serviceaccount", name, "-n", ns])?;
    if reader {
        plane.kubectl(&[
            "create",
            "clusterrolebinding",
            &format!("{ns}-{name}"),
            "--clusterrole=noexecute-metrics-reader",
            &format!("--serviceaccount={ns}:{name}"),
        ])?;
    }
    Ok(plane
        .kubectl(&["create", "token", name, "-n", ns])?
        .trim()
        .to_string())
}

async fn secure_controller(plane: &Plane, ns: &TestNamespace) -> Result<(Controller, String)> {
    let selector = ns.node_selector();
    let controller = Controller::start_secure(
        plane,
        binary(),
        &ns.name,
        &["--leader-elect=false", "--node-selector", &selector],
    )?;
    let base = format!("https://{}", controller.admin);
    // The probe answers without a token once the caches are synced.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if curl(&format!("{base}/readyz"), None)?.0 == 200 {
            break;
        }
        ensure!(Instant::now() < deadline, "/readyz never answered 200");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok((controller, base))
}

#[tokio::test]
async fn admin_server_serves_tls_and_asks_the_api_server_who_may_read() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    plane.install_rbac()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "admin-auth").await?;
    let reader = account(plane, &ns.name, "reader", true)?;
    let nobody = account(plane, &ns.name, "nobody", false)?;
    let (_controller, base) = secure_controller(plane, &ns).await?;

    assert_eq!(
        curl(&format!("{base}/healthz"), None)?.0,
        200,
        "liveness probe is open"
    );
    assert_eq!(
        curl(&format!("{base}/readyz"), None)?.0,
        200,
        "readiness probe is open"
    );
    for path in ["/metrics", "/status"] {
        let url = format!("{base}{path}");
        assert_eq!(curl(&url, None)?.0, 401, "{path} without a token");
        assert_eq!(
            curl(&url, Some("not-a-token"))?.0,
            401,
            "{path} with a bad token"
        );
        let (code, body) = curl(&url, Some(&nobody))?;
        assert_eq!(code, 403, "{path} for a user without the role: {body}");
        assert!(
            body.contains("nobody"),
            "the refusal names the user: {body}"
        );
        let (code, body) = curl(&url, Some(&reader))?;
        assert_eq!(code, 200, "{path} for a reader: {body}");
        if path == "/metrics" {
            assert!(body.contains("noexecute_leader"), "{body}");
        } else {
            let status: serde_json::Value = serde_json::from_str(&body)?;
            assert_eq!(status["leading"], true, "{body}");
        }
        // The answer is cached: asking again gives the same.
        assert_eq!(curl(&url, Some(&nobody))?.0, 403);
    }
    // Only the exact paths are pages; look-alikes are not served, with or without a token.
    for path in ["/metrics/", "//metrics", "/metrics%2F", "/status/x"] {
        let code = curl(&format!("{base}{path}"), None)?.0;
        assert!(code == 404 || code == 401, "{path}: {code}");
        assert_ne!(
            curl(&format!("{base}{path}"), Some(&nobody))?.0,
            200,
            "{path}"
        );
    }
    // Plain HTTP gets no page from the TLS port.
    let plain = format!("http://{}/metrics", base.trim_start_matches("https://"));
    assert_ne!(
        curl(&plain, Some(&reader))?.0,
        200,
        "plain HTTP is not served"
    );
    Ok(())
}

/// The deadline of each "eviction scheduled" line of the controller's log, by pod.
fn scheduled_in_log(log: &Path) -> Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(log)?;
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.contains("eviction scheduled")) {
        let field = |name: &str| {
            line.split(&format!("{name}="))
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .map(str::to_string)
        };
        if let (Some(pod), Some(deadline)) = (field("pod"), field("deadline")) {
            out.insert(pod, deadline);
        }
    }
    Ok(out)
}

fn noexecute(args: &[&str]) -> Result<Output> {
    Command::new(binary())
        .args(args)
        .output()
        .context("running noexecute")
}

#[tokio::test]
async fn status_lists_exactly_the_countdowns_with_the_engines_deadlines() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    plane.install_rbac()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "status").await?;
    let reader = account(plane, &ns.name, "reader", true)?;
    let (controller, base) = secure_controller(plane, &ns).await?;
    let node = ns.create_node("n", vec![]).await?;
    let quiet = ns.create_node("quiet", vec![]).await?;
    let key = "example.com/status";
    ns.create_pod(&pod("slow", &node, vec![tolerate(key, Some(600))], None))
        .await?;
    ns.create_pod(&pod("soon", &node, vec![tolerate(key, Some(300))], None))
        .await?;
    ns.create_pod(&pod("now", &node, vec![], Some(0))).await?;
    ns.create_pod(&pod("forever", &node, vec![tolerate(key, None)], None))
        .await?;
    ns.create_pod(&pod("elsewhere", &quiet, vec![], None))
        .await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    add_taint(&ns.nodes(), &node, no_execute(key, "")).await?;
    wait_evicted(&ns.pods(), "now", Duration::from_secs(10)).await?;

    // Both countdowns are logged as scheduled by then (decided with the one that evicted).
    let want = [format!("{}/soon", ns.name), format!("{}/slow", ns.name)];
    let deadline = Instant::now() + Duration::from_secs(10);
    let logged = loop {
        let logged = scheduled_in_log(&controller.log)?;
        if want.iter().all(|p| logged.contains_key(p)) {
            break logged;
        }
        ensure!(
            Instant::now() < deadline,
            "not scheduled in the log: {logged:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    let endpoint = base.as_str();
    let out = noexecute(&[
        "status",
        "--endpoint",
        endpoint,
        "--insecure-skip-tls-verify",
        "--token",
        &reader,
        "-o",
        "jsonl",
    ])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let pending = status["pending"].as_array().context("pending")?;
    let rows: Vec<(String, String, String, String)> = pending
        .iter()
        .map(|p| {
            (
                format!(
                    "{}/{}",
                    p["namespace"].as_str().unwrap(),
                    p["name"].as_str().unwrap()
                ),
                p["node"].as_str().unwrap().to_string(),
                p["deadline"].as_str().unwrap().to_string(),
                p["held"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mine: Vec<&(String, String, String, String)> = rows
        .iter()
        .filter(|r| r.0.starts_with(&format!("{}/", ns.name)))
        .collect();
    assert_eq!(
        mine.iter().map(|r| r.0.clone()).collect::<Vec<_>>(),
        want.to_vec(),
        "exactly the two countdowns, soonest first: {rows:?}"
    );
    for (pod, on, deadline, held) in mine {
        assert_eq!(on, &node);
        assert_eq!(held, "counting");
        assert_eq!(
            Some(deadline),
            logged.get(pod),
            "{pod}: the engine's deadline"
        );
    }

    // The table and -n.
    let out = noexecute(&[
        "status",
        "--endpoint",
        endpoint,
        "--insecure-skip-tls-verify",
        "--token",
        &reader,
        "-n",
        &ns.name,
        "-o",
        "wide",
    ])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout)?;
    assert!(table.contains("2 pending eviction(s)"), "{table}");
    assert!(
        table.contains("taint example.com/status:NoExecute is tolerated for 300s"),
        "the reason column: {table}"
    );
    // Without a token the controller refuses, and the error says so.
    let out = noexecute(&[
        "status",
        "--endpoint",
        endpoint,
        "--insecure-skip-tls-verify",
        "--token",
        "wrong",
    ])?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unauthorized"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(controller);
    Ok(())
}

/// A directory with `kubectl` and `kubectl-noexecute` (a link to the binary), for PATH.
fn plugin_path(plane: &Plane) -> Result<PathBuf> {
    let dir = plane.state_dir.join("plugin-bin");
    std::fs::create_dir_all(&dir)?;
    let link = dir.join("kubectl-noexecute");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(binary(), &link)?;
    let kube_bin = plane
        .env
        .get("NOEXECUTE_KUBE_BIN")
        .context("NOEXECUTE_KUBE_BIN")?;
    let kubectl = dir.join("kubectl");
    let _ = std::fs::remove_file(&kubectl);
    std::os::unix::fs::symlink(Path::new(kube_bin).join("kubectl"), &kubectl)?;
    Ok(dir)
}

fn kubectl_plugin(dir: &Path, kubeconfig: &Path, args: &[&str]) -> Result<Output> {
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new(dir.join("kubectl"))
        .args(args)
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .context("running kubectl")
}

fn decisions(stdout: &[u8]) -> Vec<(String, String)> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["pod"].as_str().unwrap().to_string(),
                v["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn kubectl_plugin_answers_as_the_binary_with_kubectls_conventions() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "plugin").await?;
    let node = ns.create_node("n", vec![]).await?;
    let key = "example.com/plugin";
    ns.create_pod(&pod("plain", &node, vec![], None)).await?;
    ns.create_pod(&pod("agent", &node, vec![tolerate(key, None)], None))
        .await?;
    // A kubeconfig whose current context's namespace is the test's.
    let kubeconfig = plane.state_dir.join(format!("{}.kubeconfig", ns.name));
    std::fs::copy(&plane.kubeconfig, &kubeconfig)?;
    let kc = kubeconfig.to_str().context("path")?;
    plane.kubectl(&[
        "config",
        "set-context",
        "--current",
        &format!("--namespace={}", ns.name),
        "--kubeconfig",
        kc,
    ])?;
    let context = plane
        .kubectl(&["config", "current-context", "--kubeconfig", kc])?
        .trim()
        .to_string();
    let dir = plugin_path(plane)?;
    let taint = format!("{node}={key}:NoExecute");

    // explain: NAME resolved in the context's namespace, -n, and the plain binary agree.
    let by_context = kubectl_plugin(
        &dir,
        &kubeconfig,
        &["noexecute", "explain", "plain", "--taint", &taint],
    )?;
    ensure!(
        by_context.status.success(),
        "{}",
        String::from_utf8_lossy(&by_context.stderr)
    );
    let by_flag = kubectl_plugin(
        &dir,
        &kubeconfig,
        &[
            "noexecute",
            "explain",
            "plain",
            "-n",
            &ns.name,
            "--context",
            &context,
            "--taint",
            &taint,
        ],
    )?;
    let plain = noexecute(&[
        "explain",
        &format!("{}/plain", ns.name),
        "--kubeconfig",
        kc,
        "--taint",
        &taint,
    ])?;
    ensure!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let text = String::from_utf8_lossy(&plain.stdout);
    assert!(text.contains("Decision: evict now"), "{text}");
    // The hypothetical taint is added "now", which differs between runs by milliseconds.
    let show = |o: &Output| {
        let text =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        text.lines()
            .map(|l| match l.find(" (added ") {
                Some(i) => format!("{} (added NOW)", &l[..i]),
                None => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        show(&by_context),
        show(&plain),
        "kubectl noexecute explain = noexecute explain"
    );
    assert_eq!(show(&by_flag), show(&plain), "with -n and --context");

    // plan: -n limits the rows to the namespace; the decisions match the binary's.
    let plugin_plan = kubectl_plugin(
        &dir,
        &kubeconfig,
        &[
            "noexecute",
            "plan",
            "-n",
            &ns.name,
            "--taint",
            &taint,
            "-o",
            "jsonl",
        ],
    )?;
    ensure!(
        plugin_plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plugin_plan.stderr)
    );
    let binary_plan = noexecute(&["plan", "--kubeconfig", kc, "--taint", &taint, "-o", "jsonl"])?;
    ensure!(
        binary_plan.status.success(),
        "{}",
        String::from_utf8_lossy(&binary_plan.stderr)
    );
    let mine = decisions(&plugin_plan.stdout);
    let prefix = format!("{}/", ns.name);
    let theirs: Vec<(String, String)> = decisions(&binary_plan.stdout)
        .into_iter()
        .filter(|(p, _)| p.starts_with(&prefix))
        .collect();
    assert_eq!(mine, theirs);
    assert_eq!(
        mine,
        vec![
            (format!("{}/plain", ns.name), "evict".to_string()),
            (format!("{}/agent", ns.name), "safe".to_string()),
        ]
    );
    // -o yaml: the same rows as a list.
    let yaml = kubectl_plugin(
        &dir,
        &kubeconfig,
        &[
            "noexecute",
            "plan",
            "-n",
            &ns.name,
            "--taint",
            &taint,
            "-o",
            "yaml",
        ],
    )?;
    let rows: Vec<serde_json::Value> = serde_yaml_ng::from_slice(&yaml.stdout)?;
    assert_eq!(rows.len(), 2);
    // The plugin names itself as kubectl shows it.
    let help = kubectl_plugin(&dir, &kubeconfig, &["noexecute", "--help"])?;
    let help = String::from_utf8_lossy(&help.stdout);
    if !help.contains("Usage: kubectl noexecute") {
        bail!("help does not name the plugin: {help}");
    }
    Ok(())
}
