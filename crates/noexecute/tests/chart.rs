//! The Helm chart (`deploy/helm/noexecute`) and the plain manifests rendered from it:
//! `helm lint`, `helm template` with the default values and with every values file in the
//! chart's `ci/`, the plain manifests in `deploy/` equal to the default rendering byte for byte,
//! every rendered flag and policy file accepted by the binary, and every rendering accepted by
//! a real kube-apiserver (`kubectl apply --dry-run=server`); `promtool check rules` of every
//! rules file and rendered PrometheusRule, and `promtool test rules` of the alerts' unit tests.
//!
//! helm and promtool come from `scripts/build-kube`'s cache, like the plane's binaries: a
//! missing one fails these tests, it never skips them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, anyhow, bail, ensure};
use noexecute_testkit::{Plane, repo_root};
use serde::Deserialize;

const PLANE: &str = "chart";

/// The plain manifests `scripts/render-manifests` writes.
const PLAIN: [&str; 4] = [
    "namespace.yaml",
    "rbac.yaml",
    "deployment.yaml",
    "flowschema.yaml",
];

fn chart() -> PathBuf {
    repo_root().join("deploy/helm/noexecute")
}

fn binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_noexecute"))
}

/// The values files of the chart's `ci/` directory, sorted.
fn ci_values() -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart().join("ci"))
        .context("reading the chart's ci/ directory")?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    ensure!(
        files.iter().any(|p| p.ends_with("all-options-values.yaml")),
        "ci/all-options-values.yaml is missing"
    );
    Ok(files)
}

/// The directory of the plane's binaries (scripts/build-kube's cache).
fn kube_bin(plane: &Plane) -> Result<PathBuf> {
    plane
        .env
        .get("NOEXECUTE_KUBE_BIN")
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("the plane's env file has no NOEXECUTE_KUBE_BIN"))
}

fn helm(plane: &Plane) -> Result<PathBuf> {
    let bin = kube_bin(plane)?;
    let helm = bin.join("helm");
    ensure!(
        helm.is_file(),
        "helm is missing from {}: scripts/build-kube builds it (helm.sh/helm/v3 from the Go \
         module proxy); run scripts/build-kube, or point NOEXECUTE_KUBE_BIN at a directory with \
         helm",
        bin.display()
    );
    Ok(helm)
}

/// Run a command from the repository root; its stdout, or an error with its stderr.
fn run(program: &Path, args: &[&str], envs: &[(&str, &Path)]) -> Result<String> {
    let output = Command::new(program)
        .args(args)
        .envs(envs.iter().map(|(k, v)| (*k, *v)))
        .current_dir(repo_root())
        .output()
        .with_context(|| format!("running {}", program.display()))?;
    if !output.status.success() {
        bail!(
            "{} {args:?} failed ({}):\n{}{}",
            program.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The prometheus-operator kinds the chart renders only where the cluster serves them: the
/// renderings here say that it does (the stand-in CRDs serve them to the dry run).
const MONITORING_APIS: [&str; 4] = [
    "--api-versions",
    "monitoring.coreos.com/v1/ServiceMonitor",
    "--api-versions",
    "monitoring.coreos.com/v1/PrometheusRule",
];

/// `helm template noexecute CHART -n noexecute [-f VALUES]`, with the monitoring APIs served.
fn template(plane: &Plane, values: Option<&Path>) -> Result<String> {
    let chart = chart();
    let chart = chart.to_string_lossy();
    let mut args = vec!["template", "noexecute", &chart, "--namespace", "noexecute"];
    args.extend(MONITORING_APIS);
    let values = values.map(|v| v.to_string_lossy().into_owned());
    if let Some(v) = &values {
        args.extend(["--values", v]);
    }
    run(&helm(plane)?, &args, &[])
}

/// The one object of `kind` in `helm template RELEASE CHART --set SET`, with the monitoring
/// APIs served.
fn rendered(plane: &Plane, release: &str, set: &str, kind: &str) -> Result<serde_yaml_ng::Value> {
    let chart = chart();
    let chart = chart.to_string_lossy();
    let mut args = vec!["template", release, &chart, "--set", set];
    args.extend(MONITORING_APIS);
    let out = run(&helm(plane)?, &args, &[])?;
    Ok(find(&documents(&out)?, kind)?.clone())
}

/// The YAML documents of a stream (comment-only documents left out).
fn documents(text: &str) -> Result<Vec<serde_yaml_ng::Value>> {
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value = serde_yaml_ng::Value::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

fn field<'a>(value: &'a serde_yaml_ng::Value, path: &[&str]) -> Option<&'a serde_yaml_ng::Value> {
    path.iter().try_fold(value, |v, key| v.get(*key))
}

fn text<'a>(value: &'a serde_yaml_ng::Value, path: &[&str]) -> &'a str {
    field(value, path).and_then(|v| v.as_str()).unwrap_or("")
}

/// (kind, namespace, name) of every object.
fn objects(text_: &str) -> Result<BTreeSet<(String, String, String)>> {
    Ok(documents(text_)?
        .iter()
        .map(|d| {
            (
                text(d, &["kind"]).to_string(),
                text(d, &["metadata", "namespace"]).to_string(),
                text(d, &["metadata", "name"]).to_string(),
            )
        })
        .collect())
}

fn find<'a>(docs: &'a [serde_yaml_ng::Value], kind: &str) -> Result<&'a serde_yaml_ng::Value> {
    docs.iter()
        .find(|d| text(d, &["kind"]) == kind)
        .ok_or_else(|| anyhow!("no {kind} in the rendering"))
}

/// Every rendering to check: (what, the `helm template` output).
fn renderings(plane: &Plane) -> Result<Vec<(String, String)>> {
    let mut all = vec![("default values".to_string(), template(plane, None)?)];
    for values in ci_values()? {
        let name = values
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        all.push((name, template(plane, Some(&values))?));
    }
    Ok(all)
}

fn scratch(name: &str) -> Result<PathBuf> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("chart-{name}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[test]
fn helm_lint_passes_with_default_and_ci_values() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    let helm = helm(plane)?;
    let chart = chart();
    let chart = chart.to_string_lossy();
    let out = run(&helm, &["lint", "--strict", &chart], &[])?;
    println!("{out}");
    for values in ci_values()? {
        let values = values.to_string_lossy();
        let out = run(
            &helm,
            &["lint", "--strict", &chart, "--values", &values],
            &[],
        )?;
        println!("{values}: {out}");
    }
    Ok(())
}

#[test]
fn plain_manifests_are_the_default_rendering_byte_for_byte() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    let root = repo_root();
    // The chart's copies of the alerts and the dashboard are the originals in deploy/.
    for (original, copy) in [
        (
            "deploy/prometheus/rules.yaml",
            "deploy/helm/noexecute/files/prometheus-rules.yaml",
        ),
        (
            "deploy/grafana/noexecute.json",
            "deploy/helm/noexecute/files/grafana-dashboard.json",
        ),
    ] {
        let a = std::fs::read(root.join(original)).with_context(|| original.to_string())?;
        let b = std::fs::read(root.join(copy)).with_context(|| copy.to_string())?;
        assert!(
            a == b,
            "{copy} differs from {original}: run scripts/render-manifests"
        );
    }

    let out = scratch("render")?;
    let bin = kube_bin(plane)?;
    run(
        &root.join("scripts/render-manifests"),
        &[&out.to_string_lossy()],
        &[("NOEXECUTE_KUBE_BIN", &bin)],
    )?;
    for file in PLAIN {
        let rendered = std::fs::read_to_string(out.join(file))?;
        let committed = std::fs::read_to_string(root.join("deploy").join(file))
            .with_context(|| format!("reading deploy/{file}"))?;
        assert!(
            rendered == committed,
            "deploy/{file} is not what the chart renders: run scripts/render-manifests \
             (rendered:\n{rendered})"
        );
    }

    // rbac.yaml and deployment.yaml hold exactly what the default values install.
    let default = objects(&template(plane, None)?)?;
    let mut plain = objects(&std::fs::read_to_string(root.join("deploy/rbac.yaml"))?)?;
    plain.extend(objects(&std::fs::read_to_string(
        root.join("deploy/deployment.yaml"),
    )?)?);
    assert_eq!(
        default, plain,
        "the default rendering and deploy/rbac.yaml + deploy/deployment.yaml hold different objects"
    );
    Ok(())
}

#[test]
fn every_rendered_flag_and_policy_file_is_accepted_by_the_binary() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    let help = run(binary(), &["run", "--help"], &[])?;
    let known: BTreeSet<&str> = help
        .split_whitespace()
        .filter(|w| w.starts_with("--"))
        .map(|w| w.split(['=', ',', '[']).next().unwrap_or(w))
        .collect();
    let scratch = scratch("policy")?;
    for (what, rendering) in renderings(plane)? {
        let docs = documents(&rendering)?;
        let deployment = find(&docs, "Deployment")?;
        let container = field(deployment, &["spec", "template", "spec", "containers"])
            .and_then(|c| c.get(0))
            .ok_or_else(|| anyhow!("{what}: the Deployment has no container"))?;
        let args: Vec<&str> = container
            .get("args")
            .and_then(|a| a.as_sequence())
            .ok_or_else(|| anyhow!("{what}: the container has no args"))?
            .iter()
            .map(|a| a.as_str().unwrap_or(""))
            .collect();
        assert_eq!(args.first(), Some(&"run"), "{what}: {args:?}");
        for arg in &args[1..] {
            let flag = arg.split('=').next().unwrap_or(arg);
            assert!(
                flag.starts_with("--"),
                "{what}: argument {arg:?} is no flag"
            );
            assert!(
                known.contains(flag),
                "{what}: `noexecute run` has no flag {flag} (fix templates/_helpers.tpl)"
            );
        }

        // The policy file parses and validates: `simulate` takes the same --config.
        let configmap = docs
            .iter()
            .find(|d| {
                text(d, &["kind"]) == "ConfigMap"
                    && text(d, &["metadata", "name"]).ends_with("-policy")
            })
            .ok_or_else(|| anyhow!("{what}: no policy ConfigMap"))?;
        let policy = text(configmap, &["data", "policy.yaml"]);
        let file = scratch.join(format!("{what}.policy.yaml"));
        std::fs::write(&file, policy)?;
        let config = format!("--config={}", file.display());
        let out = run(
            binary(),
            &[
                "simulate",
                "examples/zone-outage.yaml",
                &config,
                "-o",
                "json",
            ],
            &[],
        )
        .with_context(|| format!("{what}: the policy file\n{policy}"))?;
        ensure!(!out.is_empty(), "{what}: simulate printed nothing");
        assert!(
            args.contains(&"--config=/etc/noexecute/policy/policy.yaml"),
            "{what}: the policy file is not passed: {args:?}"
        );
    }
    Ok(())
}

#[test]
fn every_rendering_and_plain_manifest_is_accepted_by_the_api_server() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    // The namespace and the controller's service account exist for real, as after the
    // documented first step; CRDs must exist before their objects can be dry-run.
    plane.install_rbac()?;
    plane.kubectl(&[
        "apply",
        "-f",
        "crates/noexecute/tests/fixtures/monitoring-crds.yaml",
    ])?;
    plane.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/servicemonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com",
    ])?;
    let dir = scratch("dry-run")?;
    for (what, rendering) in renderings(plane)? {
        let file = dir.join(format!("{what}.yaml"));
        std::fs::write(&file, &rendering)?;
        let out = plane
            .kubectl(&["apply", "--dry-run=server", "-f", &file.to_string_lossy()])
            .with_context(|| format!("{what}: kubectl apply --dry-run=server"))?;
        println!("{what}:\n{out}");
        // Every object of the rendering was sent.
        let sent = out
            .lines()
            .filter(|l| l.ends_with("(server dry run)"))
            .count();
        assert_eq!(
            sent,
            objects(&rendering)?.len(),
            "{what}: not every object was applied:\n{out}"
        );
    }
    for file in PLAIN {
        let path = format!("deploy/{file}");
        let out = plane
            .kubectl(&["apply", "--dry-run=server", "-f", &path])
            .with_context(|| format!("kubectl apply --dry-run=server -f {path}"))?;
        println!("{path}:\n{out}");
    }
    Ok(())
}

/// Lease timings the binary refuses (it exits, and the pods would crash-loop) fail to render,
/// with the rule they break; timings it accepts render. The binary is asked directly: its
/// flags are checked before it looks for a kubeconfig.
#[test]
fn lease_timings_the_binary_refuses_do_not_render() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    let helm = helm(plane)?;
    let chart = chart();
    let chart = chart.to_string_lossy();
    let missing = scratch("lease-timings")?.join("no-kubeconfig");
    let missing = format!("--kubeconfig={}", missing.display());
    let cases = [
        ("15s", "10s", "2s"),
        ("10s", "10s", "2s"),
        ("15s", "2s", "2s"),
        ("11s", "10s", "2s"),
        ("11.5s", "10s", "2s"),
        ("1m", "30s", "500ms"),
        ("1.5m", "1m30s", "2s"),
        ("1m31s", "1m29.5s", "1s"),
        ("20", "15", "2"),
    ];
    let mut refused = 0;
    for (lease, renew, retry) in cases {
        let flags = [
            format!("--leader-elect-lease-duration={lease}"),
            format!("--leader-elect-renew-deadline={renew}"),
            format!("--leader-elect-retry-period={retry}"),
        ];
        let mut args = vec!["run", missing.as_str()];
        args.extend(flags.iter().map(String::as_str));
        let binary_refuses = match run(binary(), &args, &[]) {
            Ok(out) => bail!("noexecute run {args:?} ran without a kubeconfig: {out}"),
            Err(e) => {
                let e = format!("{e:#}");
                let refuses = e.contains("--leader-elect-lease-duration must")
                    || e.contains("--leader-elect-renew-deadline must");
                // Accepted: it went on to read the kubeconfig.
                ensure!(
                    refuses || e.contains("no-kubeconfig"),
                    "noexecute run {args:?} failed on something else: {e}"
                );
                refuses
            }
        };
        let set = format!(
            "leaderElection.leaseDuration={lease},leaderElection.renewDeadline={renew},leaderElection.retryPeriod={retry}"
        );
        let rendered = run(
            &helm,
            &["template", "noexecute", &chart, "--set-string", &set],
            &[],
        );
        match (binary_refuses, rendered) {
            (false, Ok(_)) => {}
            (true, Err(e)) => {
                refused += 1;
                let e = format!("{e:#}");
                assert!(e.contains("leaderElection."), "{set}: {e}");
            }
            (true, Ok(_)) => bail!("{set}: the binary refuses it, and the chart renders it"),
            (false, Err(e)) => bail!("{set}: the binary accepts it, and the chart fails: {e:#}"),
        }
    }
    // Both kinds were tried.
    assert!((1..cases.len()).contains(&refused), "{refused} refused");
    Ok(())
}

/// A single replica must never block a drain of its node: the default budget allows one
/// replica down, whatever `replicaCount`; `minAvailable` replaces it when set.
#[test]
fn the_disruption_budget_never_blocks_a_drain_of_a_single_replica() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    let budget = |set: &str| rendered(plane, "noexecute", set, "PodDisruptionBudget");
    let single = budget("replicaCount=1")?;
    assert_eq!(
        field(&single, &["spec", "maxUnavailable"]).and_then(|v| v.as_u64()),
        Some(1),
        "{single:?}"
    );
    assert!(field(&single, &["spec", "minAvailable"]).is_none());
    let kept = budget("podDisruptionBudget.minAvailable=2")?;
    assert_eq!(
        field(&kept, &["spec", "minAvailable"]).and_then(|v| v.as_u64()),
        Some(2)
    );
    assert!(field(&kept, &["spec", "maxUnavailable"]).is_none());
    Ok(())
}

/// The PrometheusRule: alerts can be switched off one by one (a misspelt name fails the
/// rendering), and `NoexecuteAbsent` looks for this release's job, not any noexecute at all.
/// Every rule of a rendered PrometheusRule, group by group.
fn rules_of(rule: &serde_yaml_ng::Value) -> impl Iterator<Item = &serde_yaml_ng::Value> {
    field(rule, &["spec", "groups"])
        .and_then(|g| g.as_sequence())
        .into_iter()
        .flatten()
        .flat_map(|g| {
            g.get("rules")
                .and_then(|r| r.as_sequence())
                .into_iter()
                .flatten()
        })
}

#[test]
fn alerts_can_be_switched_off_and_absence_is_scoped_to_the_job() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    let rule = |set: &str| {
        rendered(
            plane,
            "pool-a",
            &format!("prometheusRule.enabled=true,{set}"),
            "PrometheusRule",
        )
    };
    // (name, expression) of every alert.
    let alerts = |rule: &serde_yaml_ng::Value| -> Vec<(String, String)> {
        rules_of(rule)
            .map(|r| {
                (
                    text(r, &["alert"]).to_string(),
                    text(r, &["expr"]).to_string(),
                )
            })
            .collect()
    };
    let all = alerts(&rule("prometheusRule.disabled=null")?);
    let file = std::fs::read_to_string(repo_root().join("deploy/prometheus/rules.yaml"))?;
    assert_eq!(all.len(), file.matches("- alert:").count(), "{all:?}");
    let absent = all
        .iter()
        .find(|(name, _)| name == "NoexecuteAbsent")
        .ok_or_else(|| anyhow!("no NoexecuteAbsent: {all:?}"))?;
    assert_eq!(
        absent.1,
        r#"absent(noexecute_leader{namespace="default",job="pool-a-noexecute-metrics"})"#
    );
    let some = alerts(&rule(
        "prometheusRule.disabled={NoexecuteEvictionsLate,NoexecuteStaleCacheGuardFiring},prometheusRule.job=mine",
    )?);
    assert_eq!(some.len(), all.len() - 2);
    assert!(
        !some
            .iter()
            .any(|(n, _)| n == "NoexecuteEvictionsLate" || n == "NoexecuteStaleCacheGuardFiring")
    );
    assert!(some.iter().any(|(_, e)| e.contains(r#"job="mine""#)));
    let misspelt = rule("prometheusRule.disabled={NoexecuteEvictionLate}")
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(
        misspelt.contains("no alert is named NoexecuteEvictionLate"),
        "{misspelt}"
    );
    // The runbook links point at a mirror when asked, every one of them.
    let mirrored = rule("prometheusRule.runbookBaseUrl=https://wiki.example.com/ops")?;
    let urls: Vec<String> = rules_of(&mirrored)
        .map(|r| text(r, &["annotations", "runbook_url"]).to_string())
        .collect();
    assert_eq!(urls.len(), all.len());
    assert!(
        urls.iter()
            .all(|u| u.starts_with("https://wiki.example.com/ops#noexecute")),
        "{urls:?}"
    );
    Ok(())
}

fn promtool(plane: &Plane) -> Result<PathBuf> {
    let bin = kube_bin(plane)?;
    let promtool = bin.join("promtool");
    ensure!(
        promtool.is_file(),
        "promtool is missing from {}: scripts/build-kube builds it (github.com/prometheus/\
         prometheus from the Go module proxy); run scripts/build-kube",
        bin.display()
    );
    Ok(promtool)
}

/// `promtool check rules` accepts the plain rules file and the groups of every PrometheusRule
/// the chart renders (default values, every `ci/` values file, alerts switched off, a runbook
/// mirror), and `promtool test rules` runs the alerts' unit tests
/// (`deploy/prometheus/rules_test.yaml`): they fire when they should, with the labels and
/// text an on-call person reads, and stay quiet beside it.
#[test]
fn promtool_checks_every_rules_file_and_the_alerts_unit_tests_pass() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    let promtool = promtool(plane)?;
    let out = run(
        &promtool,
        &["check", "rules", "deploy/prometheus/rules.yaml"],
        &[],
    )?;
    println!("{out}");
    let out = run(
        &promtool,
        &["test", "rules", "deploy/prometheus/rules_test.yaml"],
        &[],
    )?;
    println!("{out}");
    ensure!(out.contains("SUCCESS"), "promtool test rules: {out}");

    let mut rules = Vec::new();
    for (what, text_) in renderings(plane)? {
        for doc in documents(&text_)? {
            if text(&doc, &["kind"]) == "PrometheusRule" {
                rules.push((what.clone(), doc));
            }
        }
    }
    for set in [
        "prometheusRule.disabled={NoexecuteEvictionsLate}",
        "prometheusRule.runbookBaseUrl=https://wiki.example.com/ops,prometheusRule.job=mine",
    ] {
        let doc = rendered(
            plane,
            "pool-a",
            &format!("prometheusRule.enabled=true,{set}"),
            "PrometheusRule",
        )?;
        rules.push((set.to_string(), doc));
    }
    ensure!(
        rules.len() >= 3,
        "only {} renderings have a PrometheusRule: {:?}",
        rules.len(),
        rules.iter().map(|(w, _)| w).collect::<Vec<_>>()
    );
    let dir = scratch("promtool")?;
    for (i, (what, doc)) in rules.iter().enumerate() {
        let spec = field(doc, &["spec"]).ok_or_else(|| anyhow!("{what}: no spec"))?;
        let file = dir.join(format!("rules-{i}.yaml"));
        std::fs::write(&file, serde_yaml_ng::to_string(spec)?)?;
        let out = run(&promtool, &["check", "rules", &file.to_string_lossy()], &[])
            .with_context(|| format!("the PrometheusRule of {what}"))?;
        ensure!(out.contains("SUCCESS"), "{what}: {out}");
    }
    // promtool fails a broken rule: the check above could fail.
    let broken = dir.join("broken.yaml");
    std::fs::write(
        &broken,
        "groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: sum(\n",
    )?;
    ensure!(
        run(
            &promtool,
            &["check", "rules", &broken.to_string_lossy()],
            &[]
        )
        .is_err(),
        "promtool accepted a rule whose expression does not parse"
    );
    Ok(())
}

/// The install notes warn when the image names no registry and no digest (nothing publishes
/// `noexecute:VERSION`, so its pods would not start), and only then.
#[test]
fn the_install_notes_warn_of_an_image_no_registry_serves() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    let helm = helm(plane)?;
    let chart = chart();
    let chart = chart.to_string_lossy();
    let notes = |set: &[&str]| -> Result<String> {
        let mut args = vec![
            "install",
            "notes",
            &chart,
            "--namespace",
            "notes-check",
            "--dry-run=client",
        ];
        for s in set {
            args.extend(["--set", s]);
        }
        let out = run(&helm, &args, &[("KUBECONFIG", &plane.kubeconfig)])?;
        out.split_once("NOTES:")
            .map(|(_, notes)| notes.to_string())
            .ok_or_else(|| anyhow!("no NOTES in: {out}"))
    };
    let warning = "names no registry and no digest";
    let default = notes(&[])?;
    assert!(default.contains(warning), "{default}");
    assert!(default.contains("Image: noexecute:"), "{default}");
    for set in [
        &["image.repository=registry.example.com/platform/noexecute"][..],
        &["image.digest=sha256:0000000000000000000000000000000000000000000000000000000000000000"][..],
    ] {
        let out = notes(set)?;
        assert!(!out.contains(warning), "{set:?}: {out}");
    }
    Ok(())
}

#[test]
fn monitoring_objects_are_left_out_where_their_api_is_not_served() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    let chart = chart();
    let chart = chart.to_string_lossy();
    let set = "serviceMonitor.enabled=true,prometheusRule.enabled=true";
    let kinds = |extra: &[&str]| -> Result<Vec<String>> {
        let mut args = vec!["template", "noexecute", &chart, "--set", set];
        args.extend(extra);
        let out = run(&helm(plane)?, &args, &[])?;
        Ok(documents(&out)?
            .iter()
            .map(|d| text(d, &["kind"]).to_string())
            .filter(|k| k == "ServiceMonitor" || k == "PrometheusRule")
            .collect())
    };
    // A cluster without prometheus-operator: enabled, but nothing to install them into.
    assert_eq!(kinds(&[])?, Vec::<String>::new());
    // Only the ServiceMonitor's API: only the ServiceMonitor.
    assert_eq!(kinds(&MONITORING_APIS[..2])?, vec!["ServiceMonitor"]);
    let mut both = kinds(&MONITORING_APIS)?;
    both.sort();
    assert_eq!(both, vec!["PrometheusRule", "ServiceMonitor"]);
    Ok(())
}

#[test]
fn probe_overrides_keep_the_chart_s_path_and_other_timings() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    let deployment = rendered(
        plane,
        "noexecute",
        "livenessProbe.failureThreshold=9,readinessProbe.periodSeconds=20,commonLabels.team=sre",
        "Deployment",
    )?;
    let container = field(&deployment, &["spec", "template", "spec", "containers"])
        .and_then(|c| c.get(0))
        .ok_or_else(|| anyhow!("no container"))?;
    let num = |path: &[&str]| field(container, path).and_then(|v| v.as_u64());
    assert_eq!(num(&["livenessProbe", "failureThreshold"]), Some(9));
    assert_eq!(num(&["livenessProbe", "periodSeconds"]), Some(10));
    assert_eq!(
        text(container, &["livenessProbe", "httpGet", "path"]),
        "/healthz"
    );
    assert_eq!(num(&["readinessProbe", "periodSeconds"]), Some(20));
    assert_eq!(num(&["readinessProbe", "failureThreshold"]), Some(2));
    assert_eq!(
        text(container, &["readinessProbe", "httpGet", "path"]),
        "/readyz"
    );
    assert_eq!(text(&deployment, &["metadata", "labels", "team"]), "sre");
    // commonLabels never reach the selector, which a Deployment cannot change.
    assert!(field(&deployment, &["spec", "selector", "matchLabels", "team"]).is_none());
    Ok(())
}

#[test]
fn the_chart_readme_is_what_scripts_chart_readme_writes_from_values() -> Result<()> {
    let root = repo_root();
    let out = scratch("readme")?.join("README.md");
    run(
        &root.join("scripts/chart-readme"),
        &[&out.to_string_lossy()],
        &[],
    )?;
    let generated = std::fs::read_to_string(&out)?;
    let committed = std::fs::read_to_string(root.join("deploy/helm/noexecute/README.md"))?;
    assert!(
        generated == committed,
        "deploy/helm/noexecute/README.md is not generated from values.yaml: run scripts/chart-readme"
    );
    // Every value has its row.
    let values = std::fs::read_to_string(root.join("deploy/helm/noexecute/values.yaml"))?;
    for key in [
        "commonLabels",
        "networkPolicy.egress.apiServer.cidrs",
        "policy.brakeThreshold",
    ] {
        assert!(
            committed.contains(&format!("| `{key}` |")),
            "no row for {key}"
        );
    }
    assert!(values.contains("commonLabels:"));
    Ok(())
}

#[test]
fn helm_takes_over_the_plain_manifests_after_the_documented_annotations() -> Result<()> {
    let plane = Plane::shared(PLANE, &[])?;
    // As applied by hand from deploy/ (docs/operating.md, "Deploy noexecute").
    plane.install_rbac()?;
    plane.kubectl(&["apply", "-f", "deploy/deployment.yaml"])?;
    let uid = |plane: &Plane| {
        plane.kubectl(&[
            "get",
            "deployment/noexecute",
            "-n",
            "noexecute",
            "-o",
            "jsonpath={.metadata.uid}",
        ])
    };
    let before = uid(plane)?;
    let helm = helm(plane)?;
    let chart = chart();
    let chart = chart.to_string_lossy();
    let kubeconfig = plane.kubeconfig.to_string_lossy();
    let install = [
        "install",
        "noexecute",
        &chart,
        "--namespace",
        "noexecute",
        "--kubeconfig",
        &kubeconfig,
    ];
    // Without the annotations Helm refuses objects it does not own.
    let refused = run(&helm, &install, &[])
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default();
    assert!(
        refused.contains("invalid ownership metadata"),
        "helm install over the plain manifests: {refused}"
    );
    // The documented loop.
    let names = plane.kubectl(&[
        "get",
        "-f",
        "deploy/rbac.yaml",
        "-f",
        "deploy/deployment.yaml",
        "-o",
        "name",
    ])?;
    for object in names.lines().filter(|l| !l.is_empty()) {
        plane.kubectl(&[
            "annotate",
            object,
            "-n",
            "noexecute",
            "--overwrite",
            "meta.helm.sh/release-name=noexecute",
            "meta.helm.sh/release-namespace=noexecute",
        ])?;
    }
    let out = run(&helm, &install, &[])?;
    assert!(out.contains("STATUS: deployed"), "{out}");
    // The same Deployment, now the release's: nothing was deleted and created again.
    assert_eq!(uid(plane)?, before);
    let managed = plane.kubectl(&[
        "get",
        "deployment/noexecute",
        "-n",
        "noexecute",
        "-o",
        "jsonpath={.metadata.annotations.meta\\.helm\\.sh/release-name}",
    ])?;
    assert_eq!(managed.trim(), "noexecute");
    Ok(())
}

/// Two shards in one namespace (two releases of two replicas each) and a rollout's surge pod
/// of each: the API server admits all six critical pods under both releases' critical-pods
/// quotas, which kube-controller-manager's resourcequota controller keeps counting. The pods
/// are created directly, as the ReplicaSet controller would; a quota sized for one release's
/// replicas would refuse the fifth.
#[test]
fn two_shards_and_their_surge_pods_are_admitted_by_the_critical_pods_quotas() -> Result<()> {
    let plane = &Plane::up("chart-quota", &["resourcequota-controller"])?;
    let ns = "noexecute-shards";
    if plane.kubectl(&["get", "namespace", ns]).is_err() {
        plane.kubectl(&["create", "namespace", ns])?;
    }
    if plane
        .kubectl(&["-n", ns, "get", "serviceaccount", "default"])
        .is_err()
    {
        plane.kubectl(&["-n", ns, "create", "serviceaccount", "default"])?;
    }
    let dir = scratch("shards")?;
    let chart = chart();
    let chart = chart.to_string_lossy();
    for shard in ["shard-a", "shard-b"] {
        let out = run(
            &helm(plane)?,
            &[
                "template",
                shard,
                &chart,
                "--namespace",
                ns,
                "--set",
                "replicaCount=2",
            ],
            &[],
        )?;
        let docs = documents(&out)?;
        let quota = find(&docs, "ResourceQuota")?;
        let file = dir.join(format!("{shard}-quota.yaml"));
        std::fs::write(&file, serde_yaml_ng::to_string(quota)?)?;
        plane.kubectl(&["apply", "-f", &file.to_string_lossy()])?;
    }
    let quotas = plane.kubectl(&["-n", ns, "get", "resourcequota", "-o", "name"])?;
    assert_eq!(quotas.lines().count(), 2, "{quotas}");
    // Admission enforces a quota once the controller has set its status.
    let used = |plane: &Plane| {
        plane.kubectl(&[
            "-n",
            ns,
            "get",
            "resourcequota",
            "-o",
            "jsonpath={.items[*].status.used.pods}",
        ])
    };
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while used(plane)?.split_whitespace().count() < 2 {
        anyhow::ensure!(
            std::time::Instant::now() < until,
            "the quotas were never counted"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let mut pods = String::new();
    for shard in ["shard-a", "shard-b"] {
        for i in 0..3 {
            pods.push_str(&format!(
                "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {shard}-{i}\n  namespace: {ns}\n\
                 spec:\n  priorityClassName: system-cluster-critical\n  \
                 automountServiceAccountToken: false\n  containers:\n  - name: c\n    \
                 image: registry.invalid/pause:1\n"
            ));
        }
    }
    let file = dir.join("pods.yaml");
    std::fs::write(&file, &pods)?;
    let file = file.to_string_lossy();
    plane.kubectl(&["delete", "--ignore-not-found", "--wait=false", "-f", &file])?;
    let out = plane.kubectl(&["apply", "-f", &file])?;
    assert_eq!(
        out.lines().filter(|l| l.ends_with("created")).count(),
        6,
        "{out}"
    );
    let counted = used(plane)?;
    assert_eq!(
        counted.split_whitespace().collect::<Vec<_>>(),
        ["6", "6"],
        "{counted}"
    );
    plane.kubectl(&["delete", "--ignore-not-found", "--wait=false", "-f", &file])?;
    Ok(())
}
