//! `noexecute plan` and `explain` on a snapshot taken from a real cluster (the fixture was
//! made with `kubectl get nodes,pods -A -o json` against scripts/cluster: zones a and b with
//! two nodes each; per node a plain web pod, an agent tolerating everything and a batch pod
//! tolerating unreachable for 0 s; node b-1 already carries example.com/maintenance:NoExecute).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SNAPSHOT: &str = "crates/noexecute/tests/fixtures/snapshot.json";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn noexecute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_noexecute"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("running noexecute")
}

fn plan_json(extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["plan", "--snapshot", SNAPSHOT, "-o", "jsonl"];
    args.extend_from_slice(extra);
    let out = noexecute(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn decisions(rows: &[serde_json::Value]) -> Vec<(String, String, Option<f64>)> {
    rows.iter()
        .map(|r| {
            (
                r["pod"].as_str().unwrap().to_string(),
                r["decision"].as_str().unwrap().to_string(),
                r["at"].as_f64(),
            )
        })
        .collect()
}

#[test]
fn zone_outage_plan() {
    let rows = plan_json(&[
        "--taint-selector",
        "topology.kubernetes.io/zone=a",
        "node.kubernetes.io/unreachable:NoExecute",
    ]);
    let got = decisions(&rows);
    let expect = |pod: &str, decision: &str, at: Option<f64>| {
        assert!(
            got.contains(&(format!("default/{pod}"), decision.to_string(), at)),
            "{pod}: {got:?}"
        );
    };
    // Zone a: batch pods go at once (0 s toleration), web pods after the default 300 s.
    expect("batch-a-0", "evict", Some(0.0));
    expect("batch-a-1", "evict", Some(0.0));
    expect("web-a-0", "evict", Some(300.0));
    expect("web-a-1", "evict", Some(300.0));
    expect("agent-a-0", "safe", None);
    // b-1 is already under maintenance: its untolerating pods are due now.
    expect("web-b-1", "evict", Some(0.0));
    expect("agent-b-1", "safe", None);
    // b-0 has no NoExecute taint: not listed.
    assert!(!got.iter().any(|(p, _, _)| p.ends_with("-b-0")));
    let agent = rows
        .iter()
        .find(|r| r["pod"] == "default/agent-a-0")
        .unwrap();
    assert!(
        agent["reason"]
            .as_str()
            .unwrap()
            .starts_with("tolerates forever")
    );
}

#[test]
fn single_node_taint_and_horizon() {
    let rows = plan_json(&[
        "--taint",
        "a-0=example.com/drain:NoExecute",
        "--until",
        "1m",
    ]);
    let got = decisions(&rows);
    // The web pod has no toleration for the custom key: now. Within a one-minute horizon
    // nothing else happens on a-0.
    assert!(got.contains(&("default/web-a-0".into(), "evict".into(), Some(0.0))));
    assert!(got.contains(&("default/batch-a-0".into(), "evict".into(), Some(0.0))));
    assert!(got.contains(&("default/agent-a-0".into(), "safe".into(), None)));
}

#[test]
fn table_output_reads_well() {
    let out = noexecute(&[
        "plan",
        "--snapshot",
        SNAPSHOT,
        "--taint",
        "a-1=node.kubernetes.io/unreachable:NoExecute",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("WHEN"), "{text}");
    assert!(text.contains("+5m00s  default/web-a-1"), "{text}");
    assert!(text.contains("would be evicted"), "{text}");
}

#[test]
fn explain_shows_matches_decision_and_deadline() {
    let out = noexecute(&[
        "explain",
        "default/web-a-0",
        "--snapshot",
        SNAPSHOT,
        "--taint",
        "a-0=node.kubernetes.io/unreachable:NoExecute",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("Node a-0: 1 NoExecute taint(s)"), "{text}");
    assert!(
        text.contains("tolerated by #2: node.kubernetes.io/unreachable Exists NoExecute for 300s"),
        "{text}"
    );
    assert!(text.contains("Decision: evict at "), "{text}");
    assert!(text.contains("(+5m00s)"), "{text}");

    let out = noexecute(&["explain", "default/agent-b-1", "--snapshot", SNAPSHOT]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("example.com/maintenance=yes:NoExecute"),
        "{text}"
    );
    assert!(
        text.contains("Decision: not evicted: tolerates forever"),
        "{text}"
    );

    let out = noexecute(&["explain", "default/web-b-1", "--snapshot", SNAPSHOT]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("NOT TOLERATED"), "{text}");
    assert!(text.contains("Decision: evict now"), "{text}");
}

/// `-o json` and `-o yaml` give the same explanation as data.
#[test]
fn explain_as_json_and_yaml() {
    let args = [
        "explain",
        "default/web-a-0",
        "--snapshot",
        SNAPSHOT,
        "--taint",
        "a-0=node.kubernetes.io/unreachable:NoExecute",
    ];
    let json = noexecute(&[&args[..], &["-o", "json"]].concat());
    assert!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["pod"], "default/web-a-0");
    assert_eq!(json["node"], "a-0");
    assert_eq!(json["noExecuteTaints"][0]["toleratedBy"], 2);
    assert_eq!(
        json["tolerations"][1]["usedFor"][0],
        "node.kubernetes.io/unreachable:NoExecute"
    );
    assert_eq!(json["decision"]["action"], "evict");
    assert_eq!(json["decision"]["inSeconds"], 300.0);
    let yaml = noexecute(&[&args[..], &["-o", "yaml"]].concat());
    assert!(yaml.status.success());
    let yaml: serde_json::Value = serde_yaml_ng::from_slice(&yaml.stdout).unwrap();
    // Two runs, two clocks: the same decision, whatever the absolute time.
    for field in ["action", "inSeconds", "reason"] {
        assert_eq!(yaml["decision"][field], json["decision"][field], "{field}");
    }
    assert_eq!(yaml["tolerations"], json["tolerations"]);

    let keep = noexecute(&[
        "explain",
        "default/agent-b-1",
        "--snapshot",
        SNAPSHOT,
        "-o",
        "jsonl",
    ]);
    let keep: serde_json::Value = serde_json::from_slice(&keep.stdout).unwrap();
    assert_eq!(keep["decision"]["action"], "keep");
    assert!(
        keep["decision"]["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("tolerates forever"))
    );
}

/// Fails with exit status `code` (2 usage, 3 not found, 1 anything else) and says `expected`.
fn fails(args: &[&str], code: i32, expected: &str) {
    let out = noexecute(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains(expected),
        "{args:?}: expected {expected:?} in {stderr}"
    );
}

#[test]
fn bad_input_fails_cleanly() {
    fails(
        &[
            "plan",
            "--snapshot",
            SNAPSHOT,
            "--taint",
            "ghost=k:NoExecute",
        ],
        3,
        "node ghost is not in snapshot",
    );
    fails(
        &[
            "plan",
            "--snapshot",
            SNAPSHOT,
            "--taint-selector",
            "zone=z",
            "k:NoExecute",
        ],
        3,
        "matches no node",
    );
    fails(
        &["plan", "--snapshot", SNAPSHOT, "--taint", "a-0=k:Sometimes"],
        2,
        "unknown effect",
    );
    fails(
        &[
            "plan",
            "--snapshot",
            SNAPSHOT,
            "--taint-selector",
            "zone in (a)",
            "k:NoExecute",
        ],
        2,
        "set-based",
    );
    fails(
        &["explain", "default/nope", "--snapshot", SNAPSHOT],
        3,
        "pod default/nope is not in snapshot",
    );
    fails(
        &["explain", "nope", "--snapshot", SNAPSHOT],
        // A bare NAME is in -n's namespace, else (a snapshot has no context) `default`.
        3,
        "pod default/nope is not in snapshot",
    );
    fails(
        &["plan", "--snapshot", "no/such.json"],
        1,
        "no/such.json: No such file",
    );
    let out = noexecute(&["plan", "--snapshot", "no/such.json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("No such file").count(),
        1,
        "the cause once: {stderr}"
    );
    let bad = std::env::temp_dir().join(format!("noexecute-bad-snap-{}.json", std::process::id()));
    std::fs::write(&bad, "{\"items\": [{\"kind\": \"Pod\", \"apiVersion\": \"v1\", \"metadata\": {\"name\": \"p\"}, \"spec\": {\"nodeName\": 7}}]}").unwrap();
    fails(
        &["plan", "--snapshot", bad.to_str().unwrap()],
        1,
        ":1:97: items[0]: invalid type: integer `7`, expected a string",
    );
    std::fs::write(&bad, "{\"items\": [").unwrap();
    fails(&["plan", "--snapshot", bad.to_str().unwrap()], 1, ":1:");
}

#[test]
fn the_plan_shows_the_brake_and_the_rate_limits() {
    // Tainting zone a makes 3 of 4 nodes NoExecute-tainted: past a 50% brake, everything due
    // is held; nothing is evicted.
    let rows = plan_json(&[
        "--taint-selector",
        "topology.kubernetes.io/zone=a",
        "node.kubernetes.io/unreachable:NoExecute",
        "--brake-threshold",
        "50",
    ]);
    let got = decisions(&rows);
    for pod in ["batch-a-0", "batch-a-1", "web-a-0", "web-a-1", "web-b-1"] {
        assert!(
            got.contains(&(format!("default/{pod}"), "held".into(), None)),
            "{pod}: {got:?}"
        );
    }
    assert!(!got.iter().any(|r| r.1 == "evict"), "{got:?}");
    let held = rows.iter().find(|r| r["decision"] == "held").unwrap();
    assert!(
        held["reason"]
            .as_str()
            .unwrap()
            .contains("mass-eviction brake (3 of 4 nodes"),
        "{held}"
    );
    // One tainted node of four stays under the brake: b-1's pods go at once.
    let got = decisions(&plan_json(&["--brake-threshold", "50"]));
    assert!(got.contains(&("default/web-b-1".into(), "evict".into(), Some(0.0))));

    // 1 eviction a second: the four due now start 1 s apart, in deadline order.
    let rows = plan_json(&[
        "--taint-selector",
        "topology.kubernetes.io/zone=a",
        "node.kubernetes.io/unreachable:NoExecute",
        "--max-evictions-per-second",
        "1",
    ]);
    let mut at: Vec<f64> = decisions(&rows).iter().filter_map(|r| r.2).collect();
    at.sort_by(f64::total_cmp);
    assert_eq!(at, vec![0.0, 1.0, 2.0, 3.0, 300.0, 301.0]);
}

/// `plan` on a generated snapshot of realistic objects (managed fields, containers, status),
/// streamed from JSON and read from YAML: every pod on the tainted zone's nodes gets the
/// decision its tolerations call for, and nothing elsewhere is touched.
#[test]
fn plan_on_a_realistic_snapshot_json_and_yaml() {
    use noexecute_testkit::realistic;
    let (nodes, per_node) = (30, 12);
    let dir = std::env::temp_dir().join(format!("noexecute-realistic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("snap.json");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&json).unwrap());
    realistic::write_snapshot(&mut file, nodes, per_node).unwrap();
    drop(file);
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let yaml = dir.join("snap.yaml");
    std::fs::write(&yaml, serde_yaml_ng::to_string(&value).unwrap()).unwrap();

    let mut outputs = Vec::new();
    for path in [&json, &yaml] {
        let out = noexecute(&[
            "plan",
            "--snapshot",
            path.to_str().unwrap(),
            "--taint-selector",
            "topology.kubernetes.io/zone=zone-a",
            "node.kubernetes.io/unreachable:NoExecute",
            "-o",
            "jsonl",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows: Vec<serde_json::Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        outputs.push(decisions(&rows));
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(outputs[0], outputs[1], "JSON and YAML give the same plan");

    let mut expected = Vec::new();
    for n in (0..nodes).filter(|n| n % 3 == 0) {
        for i in 0..per_node {
            let index = n * per_node + i;
            let at = match index % 10 {
                0 => Some(0.0),
                1 => None,
                _ => Some(300.0),
            };
            expected.push((format!("team-{}/pod-{n}-{i}", index % 10), at));
        }
    }
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    let mut got: Vec<(String, Option<f64>)> = outputs[0]
        .iter()
        .map(|(pod, _, at)| (pod.clone(), *at))
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(got, expected);
}

/// A snapshot of one node with a NoExecute taint added an hour ago and `pods` pods that
/// tolerate it for 60 s, written to a scratch file.
fn overdue_snapshot(pods: usize) -> std::path::PathBuf {
    let added = (std::time::SystemTime::now() - std::time::Duration::from_secs(3600))
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let added = chrono_like(added);
    let mut items = vec![serde_json::json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "uid": "node-n1"},
        "spec": {"taints": [{"key": "maintenance", "effect": "NoExecute", "timeAdded": added}]}
    })];
    for i in 0..pods {
        items.push(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("p{i}"), "namespace": "team", "uid": format!("uid-{i}"),
                         "labels": {"app": if i % 2 == 0 { "even" } else { "odd" }}},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "pause"}],
                     "tolerations": [{"key": "maintenance", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}]},
            "status": {"phase": "Running"}
        }));
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let path = dir.join(format!("overdue-{pods}.json"));
    std::fs::write(
        &path,
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string(),
    )
    .unwrap();
    path
}

/// RFC 3339 (UTC, whole seconds) of seconds since the epoch.
fn chrono_like(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn plan_of(snapshot: &std::path::Path, extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec![
        "plan",
        "--snapshot",
        snapshot.to_str().unwrap(),
        "-o",
        "jsonl",
    ];
    args.extend_from_slice(extra);
    let out = noexecute(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn an_overdue_eviction_is_not_called_held_by_pacing_unless_pacing_holds_it() {
    let snapshot = overdue_snapshot(3);
    let rows = plan_of(&snapshot, &["--deadline-from", "taint-time-added"]);
    assert_eq!(rows.len(), 3);
    for row in &rows {
        let reason = row["reason"].as_str().unwrap();
        assert_eq!(row["decision"], "evict", "{row}");
        assert!(!reason.contains("pacing"), "no pacing is set: {reason}");
        assert!(reason.contains("overdue"), "{reason}");
    }
    // The positive control: one eviction a second, burst 1. The first starts at once; the
    // others wait for the limiter and say so.
    let rows = plan_of(
        &snapshot,
        &[
            "--deadline-from",
            "taint-time-added",
            "--max-evictions-per-second",
            "1",
            "--eviction-burst",
            "1",
        ],
    );
    let paced = rows
        .iter()
        .filter(|r| r["reason"].as_str().unwrap().contains("by pacing"))
        .count();
    assert_eq!(paced, 2, "{rows:?}");
}

#[test]
fn output_json_is_one_document_and_jsonl_one_object_a_line() {
    let snapshot = overdue_snapshot(4);
    let s = snapshot.to_str().unwrap();
    let json = noexecute(&["plan", "--snapshot", s, "-o", "json"]);
    assert!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let doc: Vec<serde_json::Value> = serde_json::from_slice(&json.stdout).unwrap();
    let lines = plan_of(&snapshot, &[]);
    assert_eq!(doc.len(), 4);
    // The same objects, whatever the wall clock said between the two runs.
    let pods = |v: &[serde_json::Value]| v.iter().map(|r| r["pod"].clone()).collect::<Vec<_>>();
    assert_eq!(pods(&doc), pods(&lines));
    // Nothing affected: still one document, an empty array.
    let empty = noexecute(&["plan", "--snapshot", SNAPSHOT, "-o", "json"]);
    assert!(empty.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&empty.stdout).unwrap();
    assert!(doc.is_array(), "{doc}");
}

#[test]
fn label_and_namespace_filters_and_exit_codes() {
    let snapshot = overdue_snapshot(4);
    let s = snapshot.to_str().unwrap();
    let rows = plan_of(&snapshot, &["-l", "app=even"]);
    let pods: Vec<&str> = rows.iter().map(|r| r["pod"].as_str().unwrap()).collect();
    assert_eq!(pods, ["team/p0", "team/p2"]);
    assert_eq!(plan_of(&snapshot, &["-A"]).len(), 4);
    assert_eq!(plan_of(&snapshot, &["-n", "other"]).len(), 0);
    // -A and -n together, and an unparsable selector: usage errors.
    let code = |args: &[&str]| noexecute(args).status.code();
    assert_eq!(
        code(&["plan", "--snapshot", s, "-A", "-n", "team"]),
        Some(2)
    );
    assert_eq!(code(&["plan", "--snapshot", s, "-l", "a,,b"]), Some(2));
    // Policy flags that only change how an eviction is carried out are not plan's.
    assert_eq!(code(&["plan", "--snapshot", s, "--dry-run"]), Some(2));
    assert_eq!(
        code(&[
            "explain",
            "team/p0",
            "--snapshot",
            s,
            "--eviction-mode",
            "evict"
        ]),
        Some(2)
    );
    // Not found: a pod, a node, a selector that matches no node.
    assert_eq!(code(&["explain", "team/nope", "--snapshot", s]), Some(3));
    assert_eq!(
        code(&["plan", "--snapshot", s, "--taint", "nope=k:NoExecute"]),
        Some(3)
    );
    assert_eq!(
        code(&[
            "plan",
            "--snapshot",
            s,
            "--taint-selector",
            "zone=z",
            "k:NoExecute"
        ]),
        Some(3)
    );
    // A file that cannot be read: neither usage nor not found.
    assert_eq!(
        code(&["plan", "--snapshot", "/nonexistent/snapshot.json"]),
        Some(1)
    );
    // version, in both forms.
    let v = noexecute(&["version", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&v.stdout).unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    let plain = String::from_utf8(noexecute(&["version"]).stdout).unwrap();
    assert_eq!(
        plain.trim(),
        format!("noexecute {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn the_kubectl_plugin_never_runs_the_controller() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("plugin-readonly");
    std::fs::create_dir_all(&dir).unwrap();
    let plugin = dir.join("kubectl-noexecute");
    let _ = std::fs::remove_file(&plugin);
    std::fs::copy(env!("CARGO_BIN_EXE_noexecute"), &plugin).unwrap();
    let help = Command::new(&plugin).arg("--help").output().unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("kubectl noexecute"), "{help}");
    for command in ["plan", "explain", "status", "version"] {
        assert!(
            help.contains(&format!("  {command} ")),
            "{command} missing: {help}"
        );
    }
    assert!(!help.contains("  run "), "the plugin offers run: {help}");
    let run = Command::new(&plugin)
        .args(["run", "--leader-elect=false"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("does not run the controller"), "{err}");
    // The binary itself still runs it (its help lists run).
    let own = noexecute(&["--help"]);
    assert!(String::from_utf8_lossy(&own.stdout).contains("  run "));
}
