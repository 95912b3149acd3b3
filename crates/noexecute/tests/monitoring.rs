//! Every metric that the alerts (`deploy/prometheus/rules.yaml`) and the Grafana dashboard
//! (`deploy/grafana/noexecute.json`) query is one that a running controller exports: the names
//! come from the PromQL of both files, the families from a real `noexecute run`'s /metrics on
//! the real plane, and a sample name counts only with its family's type (`_total` of a counter,
//! `_bucket`/`_sum`/`_count` of a histogram, the bare name of a gauge).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use noexecute_testkit::*;

const PLANE: &str = "monitoring";

/// Prefixes of the controller's metric names: its own, and upstream's two.
const PREFIXES: [&str; 2] = ["noexecute_", "taint_eviction_controller_"];

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

/// The metric names in a PromQL expression: identifiers with one of [`PREFIXES`], outside
/// string literals (label values such as `job="noexecute-metrics"` are not names).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut chars = expr.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' || c == '\'' || c == '`' {
            // A string literal: skip to its closing quote (backslash escapes, except in raw
            // backtick strings).
            while let Some(d) = chars.next() {
                if d == '\\' && c != '`' {
                    chars.next();
                } else if d == c {
                    break;
                }
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let mut ident = String::from(c);
            while let Some(&d) = chars.peek() {
                if d.is_ascii_alphanumeric() || d == '_' || d == ':' {
                    ident.push(d);
                    chars.next();
                } else {
                    break;
                }
            }
            if PREFIXES.iter().any(|p| ident.starts_with(p)) {
                names.push(ident);
            }
        } else if c.is_ascii_digit() || c == '$' {
            // A number (1e3, 0x1f) or a Grafana variable ($__rate_interval): not a name.
            while chars
                .peek()
                .is_some_and(|d| d.is_ascii_alphanumeric() || *d == '_' || *d == '.')
            {
                chars.next();
            }
        }
    }
    names
}

/// Every string under one of `keys`, anywhere in a JSON tree.
fn strings_under<'a>(value: &'a serde_json::Value, keys: &[&str], out: &mut Vec<&'a str>) {
    match value {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match v {
                    serde_json::Value::String(s) if keys.contains(&k.as_str()) => out.push(s),
                    _ => strings_under(v, keys, out),
                }
            }
        }
        serde_json::Value::Array(items) => {
            for v in items {
                strings_under(v, keys, out);
            }
        }
        _ => {}
    }
}

/// The PromQL of the alerting rules: every rule's `expr`.
fn rule_expressions(text: &str) -> Result<Vec<String>> {
    let rules: serde_json::Value = serde_yaml_ng::from_str(text)?;
    let groups = rules["groups"]
        .as_array()
        .ok_or_else(|| anyhow!("rules.yaml has no groups"))?;
    let mut exprs = Vec::new();
    for group in groups {
        for rule in group["rules"].as_array().into_iter().flatten() {
            let expr = rule["expr"]
                .as_str()
                .ok_or_else(|| anyhow!("a rule without expr: {rule}"))?;
            exprs.push(expr.to_string());
        }
    }
    Ok(exprs)
}

/// The PromQL of the dashboard: panel targets' `expr`, and the variables' queries.
fn dashboard_expressions(text: &str) -> Result<Vec<String>> {
    let dashboard: serde_json::Value = serde_json::from_str(text)?;
    let mut exprs = Vec::new();
    strings_under(&dashboard, &["expr", "query", "definition"], &mut exprs);
    Ok(exprs.into_iter().map(str::to_string).collect())
}

/// Sample name -> family, for every family `/metrics` declares (`# TYPE name type`), whether
/// or not it has samples yet (a labelled family has none before its first increment).
fn exported_samples(metrics: &str) -> BTreeMap<String, String> {
    let mut samples = BTreeMap::new();
    for line in metrics.lines() {
        let mut words = line.split_whitespace();
        if words.next() != Some("#") || words.next() != Some("TYPE") {
            continue;
        }
        let (Some(family), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        let names: Vec<String> = match kind {
            "counter" => vec![format!("{family}_total"), format!("{family}_created")],
            "histogram" => ["_bucket", "_sum", "_count", "_created"]
                .iter()
                .map(|s| format!("{family}{s}"))
                .collect(),
            _ => vec![family.to_string()],
        };
        for name in names {
            samples.insert(name, format!("{family} ({kind})"));
        }
    }
    samples
}

#[test]
fn tokenizer_finds_names_and_skips_strings_numbers_and_variables() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.9, sum by (le) (rate(taint_eviction_controller_pod_deletion_duration_seconds_bucket{job="noexecute_x"}[$__rate_interval]))) > 30 and noexecute_leader == 1e3"#
        ),
        [
            "taint_eviction_controller_pod_deletion_duration_seconds_bucket",
            "noexecute_leader"
        ]
    );
    assert_eq!(
        metric_names(r#"label_values(noexecute_leader{namespace=~"$namespace"}, job)"#),
        ["noexecute_leader"]
    );
    assert!(metric_names(r#"up{job='noexecute_\'quoted'}"#).is_empty());
}

/// GitHub's anchor of a Markdown heading: lower case, spaces to dashes, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// docs/operating.md in the project's repository: every alert's `runbook_url` is a section of
/// it (absolute, as Alertmanager and its receivers link it).
const RUNBOOKS: &str = "https://github.com/noexecute/noexecute/blob/main/docs/operating.md";

#[test]
fn every_alert_has_a_severity_a_summary_a_description_and_a_runbook_section() -> Result<()> {
    let root = repo_root();
    let rules: serde_json::Value = serde_yaml_ng::from_str(&std::fs::read_to_string(
        root.join("deploy/prometheus/rules.yaml"),
    )?)?;
    let operating = std::fs::read_to_string(root.join("docs/operating.md"))?;
    let anchors: BTreeSet<String> = operating
        .lines()
        .filter_map(|l| {
            l.trim_start_matches('#')
                .strip_prefix(' ')
                .filter(|_| l.starts_with('#'))
        })
        .map(anchor)
        .collect();
    let mut alerts = 0;
    for rule in rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
    {
        let name = rule["alert"]
            .as_str()
            .ok_or_else(|| anyhow!("a rule without a name: {rule}"))?;
        alerts += 1;
        let severity = rule["labels"]["severity"].as_str().unwrap_or("");
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        for key in ["summary", "description"] {
            assert!(
                rule["annotations"][key]
                    .as_str()
                    .is_some_and(|s| !s.is_empty()),
                "{name}: no {key}"
            );
        }
        let runbook = rule["annotations"]["runbook_url"].as_str().unwrap_or("");
        let section = runbook
            .strip_prefix(RUNBOOKS)
            .and_then(|r| r.strip_prefix('#'))
            .ok_or_else(|| {
                anyhow!("{name}: runbook_url {runbook:?} is not a section of {RUNBOOKS}")
            })?;
        assert!(
            anchors.contains(section),
            "{name}: docs/operating.md has no section #{section}"
        );
    }
    ensure!(alerts > 0, "rules.yaml has no alert");
    Ok(())
}

#[tokio::test]
async fn every_metric_in_the_alerts_and_the_dashboard_is_exported() -> Result<()> {
    let root = repo_root();
    let rules = std::fs::read_to_string(root.join("deploy/prometheus/rules.yaml"))
        .context("reading deploy/prometheus/rules.yaml")?;
    let dashboard = std::fs::read_to_string(root.join("deploy/grafana/noexecute.json"))
        .context("reading deploy/grafana/noexecute.json")?;
    // Where each name is used: (file, name) pairs.
    let mut used: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
    for (file, exprs) in [
        ("deploy/prometheus/rules.yaml", rule_expressions(&rules)?),
        (
            "deploy/grafana/noexecute.json",
            dashboard_expressions(&dashboard)?,
        ),
    ] {
        let names: Vec<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
        ensure!(!names.is_empty(), "{file} names no metric");
        for name in names {
            used.entry(name).or_default().insert(file);
        }
    }

    let plane = Plane::shared(PLANE, &[])?;
    plane.install_rbac()?;
    let ns = TestNamespace::create(&plane.admin_client().await?, "monitoring").await?;
    let selector = ns.node_selector();
    // Controller::start serves the admin server in plain mode (--admin-insecure).
    let args = vec!["--leader-elect=false", "--node-selector", &selector];
    let mut controller = Controller::start(plane, binary(), &ns.name, &args)?;
    controller.wait_ready(Duration::from_secs(30)).await?;
    let metrics = controller.metrics().await?;
    let mut exported = exported_samples(&metrics);
    ensure!(
        exported.contains_key("noexecute_leader"),
        "no noexecute_leader family in /metrics:\n{metrics}"
    );

    // A labelled family shows in /metrics only from its first sample: API errors and watch
    // restarts need a controller that fails. This one's token is refused (401), so its
    // watches restart and its Lease requests fail; its admin server answers all the same.
    let kubeconfig = std::fs::read_to_string(&plane.controller_kubeconfig)?;
    let refused: String = kubeconfig
        .lines()
        .map(|l| match l.split_once("token:") {
            Some((indent, _)) => format!("{indent}token: not-a-valid-token\n"),
            None => format!("{l}\n"),
        })
        .collect();
    ensure!(
        refused != kubeconfig,
        "no token in {}",
        plane.controller_kubeconfig.display()
    );
    let mut failing_plane = plane.clone();
    failing_plane.controller_kubeconfig =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("monitoring-refused.kubeconfig");
    std::fs::write(&failing_plane.controller_kubeconfig, refused)?;
    let mut failing_args = vec!["--node-selector", &selector];
    failing_args.extend(SHORT_LEASE);
    let mut failing = Controller::start(
        &failing_plane,
        binary(),
        "monitoring-refused",
        &failing_args,
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let failed_metrics = loop {
        if let Some(code) = failing.exited()? {
            bail!(
                "the refused controller exited ({code}): {}",
                failing.log_text()
            );
        }
        // Until its admin server listens, /metrics is refused: try again.
        let text = failing
            .metrics()
            .await
            .unwrap_or_else(|e| format!("(no /metrics yet: {e:#})"));
        let samples = exported_samples(&text);
        if samples.contains_key("noexecute_api_errors_total")
            && samples.contains_key("noexecute_watch_restarts_total")
        {
            break text;
        }
        ensure!(
            Instant::now() < deadline,
            "a controller whose token is refused exported no noexecute_api_errors and \
             noexecute_watch_restarts within 30 s:\n{text}\nlog: {}",
            failing.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    exported.extend(exported_samples(&failed_metrics));
    failing.kill().await?;

    let mut missing = Vec::new();
    for (name, files) in &used {
        match exported.get(name) {
            Some(family) => println!("{name}: {family}"),
            None => missing.push(format!("{name} (in {files:?})")),
        }
    }
    // Families nothing shows: a hint for the dashboard, not a failure.
    let shown: BTreeSet<&str> = used
        .keys()
        .filter_map(|n| exported.get(n))
        .map(String::as_str)
        .collect();
    let unshown: BTreeSet<&str> = exported
        .values()
        .map(String::as_str)
        .filter(|f| PREFIXES.iter().any(|p| f.starts_with(p)) && !shown.contains(f))
        .collect();
    if !unshown.is_empty() {
        println!("exported but in neither file: {unshown:?}");
    }
    controller.terminate(Duration::from_secs(10)).await?;
    ns.cleanup().await?;
    assert!(
        missing.is_empty(),
        "metrics named in the alerts or the dashboard that the controller does not export:\n  {}\n/metrics:\n{metrics}",
        missing.join("\n  ")
    );
    Ok(())
}

#[test]
fn every_dashboard_query_is_scoped_to_the_chosen_cluster_namespace_and_job() -> Result<()> {
    let dashboard = std::fs::read_to_string(repo_root().join("deploy/grafana/noexecute.json"))?;
    let value: serde_json::Value = serde_json::from_str(&dashboard)?;
    let mut exprs = Vec::new();
    strings_under(&value, &["expr"], &mut exprs);
    ensure!(!exprs.is_empty(), "the dashboard has no query");
    for expr in exprs {
        // Every selector of the query, not just one of them.
        let selectors = expr.matches('{').count();
        for scope in [
            r#"cluster=~"$cluster""#,
            r#"namespace=~"$namespace""#,
            r#"job=~"$job""#,
        ] {
            ensure!(
                expr.matches(scope).count() == selectors,
                "{expr}: not every selector has {scope}"
            );
        }
        // Aggregations keep the cluster apart.
        ensure!(
            !expr.contains("by (namespace") && !expr.contains("on (namespace"),
            "{expr}: aggregates clusters together"
        );
    }
    let variables: Vec<&str> = value["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(variables, ["datasource", "cluster", "namespace", "job"]);
    Ok(())
}
