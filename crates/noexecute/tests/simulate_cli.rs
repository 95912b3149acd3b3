//! `noexecute simulate` end to end: the examples give the timelines they promise, the JSON
//! output has the documented shape, and bad input fails cleanly with the file and the place.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn noexecute(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_noexecute"))
        .args(args)
        .current_dir(repo())
        .output()
        .expect("running noexecute")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn json_lines(args: &[&str]) -> Vec<serde_json::Value> {
    let out = noexecute(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// (at, event, pod) of every line.
fn events(lines: &[serde_json::Value]) -> Vec<(f64, String, String)> {
    lines
        .iter()
        .map(|l| {
            (
                l["at"].as_f64().unwrap(),
                l["event"].as_str().unwrap().to_string(),
                l["pod"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn node_maintenance_timeline() {
    let lines = json_lines(&[
        "simulate",
        "examples/node-maintenance.yaml",
        "--output",
        "jsonl",
    ]);
    let got = events(&lines);
    let want = vec![
        (10.0, "evicted", "jobs/batch-7f9c"),
        (10.0, "scheduled", "shop/cache-0"),
        (10.0, "scheduled", "shop/db-0"),
        (40.0, "evicted", "shop/cache-0"),
        (300.0, "cancelled", "shop/db-0"),
    ];
    let want: Vec<(f64, String, String)> = want
        .into_iter()
        .map(|(a, e, p)| (a, e.to_string(), p.to_string()))
        .collect();
    assert_eq!(got, want);
    // The documented shape: scheduled lines carry the deadline; every line names the node.
    assert_eq!(lines[1]["deadline"].as_f64(), Some(40.0));
    assert_eq!(lines[1]["node"].as_str(), Some("node-1"));
    assert!(lines[0].get("deadline").is_none());
    assert!(
        lines[0]["reason"]
            .as_str()
            .unwrap()
            .contains("example.com/maintenance=planned:NoExecute is not tolerated")
    );
}

#[test]
fn cni_startup_timeline() {
    let got = events(&json_lines(&[
        "simulate",
        "examples/cni-startup.yaml",
        "-o",
        "jsonl",
    ]));
    let got: Vec<(f64, &str, &str)> = got
        .iter()
        .map(|(a, e, p)| (*a, e.as_str(), p.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (0.0, "evicted", "default/early-bird"),
            (0.0, "scheduled", "default/patient"),
            (20.0, "cancelled", "default/patient"),
        ]
    );
}

#[test]
fn zone_outage_evicts_zone_a_only_and_spares_the_recovered_node() {
    let got = events(&json_lines(&[
        "simulate",
        "examples/zone-outage.yaml",
        "-o",
        "jsonl",
    ]));
    let evicted: Vec<&(f64, String, String)> = got.iter().filter(|e| e.1 == "evicted").collect();
    assert_eq!(evicted.len(), 19);
    assert!(evicted.iter().all(|e| e.2.contains("-a-")), "only zone a");
    for e in &evicted {
        let expected = if e.2.starts_with("shop/api-") {
            120.0
        } else {
            360.0
        };
        assert_eq!(e.0, expected, "{e:?}");
    }
    assert!(
        !evicted.iter().any(|e| e.2 == "shop/web-a-3"),
        "a-3 recovered in time"
    );
    assert!(got.contains(&(200.0, "cancelled".into(), "shop/web-a-3".into())));
    assert!(
        !got.iter().any(|e| e.2.starts_with("kube-system/")),
        "the agent tolerates forever"
    );
}

#[test]
fn default_tolerations_flag_adds_the_admission_plugins_tolerations() {
    let dir = std::env::temp_dir().join(format!("noexecute-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("unreachable.yaml");
    std::fs::write(
        &file,
        "nodes: [{name: n}]\npods: [{name: p, nodeName: n}]\nevents: [{at: 10s, addTaint: {node: n, taint: {key: node.kubernetes.io/unreachable, effect: NoExecute}}}]\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let without = events(&json_lines(&["simulate", path, "-o", "jsonl"]));
    assert_eq!(without, vec![(10.0, "evicted".into(), "default/p".into())]);
    let with = events(&json_lines(&[
        "simulate",
        path,
        "-o",
        "jsonl",
        "--default-tolerations",
    ]));
    assert_eq!(
        with,
        vec![
            (10.0, "scheduled".into(), "default/p".into()),
            (310.0, "evicted".into(), "default/p".into())
        ]
    );
}

#[test]
fn table_output_and_plot() {
    let svg = std::env::temp_dir().join(format!("noexecute-plot-{}.svg", std::process::id()));
    let out = noexecute(&[
        "simulate",
        "examples/zone-outage.yaml",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.starts_with("    AT  EVENT"), "{table}");
    assert!(table.contains("19 of 90 pods evicted"), "{table}");
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.starts_with("<svg"));
    assert!(
        svg.contains("zone a (19)") && svg.contains("zone b (0)"),
        "one line per zone"
    );
}

/// Bad input: a non-zero exit, a message naming the file and the place, never a panic.
fn fails_with(contents: &str, expected: &[&str]) {
    let dir = std::env::temp_dir().join(format!("noexecute-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let n = expected.join("").len();
    let file = dir.join(format!("bad-{n}.yaml"));
    std::fs::write(&file, contents).unwrap();
    let out = noexecute(&["simulate", file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A bad file is a failure (1), not a usage error of the command line (2).
    assert_eq!(out.status.code(), Some(1), "{contents:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains(file.to_str().unwrap()),
        "names the file: {stderr}"
    );
    for e in expected {
        assert!(stderr.contains(e), "expected {e:?} in: {stderr}");
    }
    assert!(out.stdout.is_empty(), "nothing half-printed");
}

#[test]
fn bad_input_is_reported_with_file_and_place() {
    fails_with(
        "nodes: [{name: a, taints: [{key: k, effect: NoExecute, colour: red}]}]",
        &[":1:", "unknown field `colour`"],
    );
    fails_with(
        "nodes:\n  - name: a\n    taints: {key: k}\n",
        &[":3:13:", "expected sequence"],
    );
    fails_with("until: soon\n", &[":1:", "duration"]);
    fails_with(
        "nodes: [{name: a, taints: [{key: k, effect: NoExecut}]}]",
        &["nodes[0].taints[0].effect", "unknown effect"],
    );
    fails_with(
        "pods: [{name: p, tolerations: [{key: k, tolerationSeconds: ten}]}]",
        &[":1:", "tolerationSeconds"],
    );
    fails_with(
        "events: [{at: 5s, removeTaint: {node: ghost, key: k}}]",
        &["events[0].removeTaint.node", "ghost"],
    );
    fails_with(": : :\n\t- [", &[":"]);
    fails_with("", &["the scenario is empty"]);
    fails_with("# nothing but a comment\n", &["the scenario is empty"]);
}

#[test]
fn missing_file_is_reported() {
    let out = noexecute(&["simulate", "no/such/scenario.yaml"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no/such/scenario.yaml"), "{stderr}");
}

#[test]
fn policies_show_in_the_simulated_timeline() {
    // Excluding the shop namespace leaves only the (forever-tolerating) agents in zone a: no
    // eviction at all.
    let excluded = events(&json_lines(&[
        "simulate",
        "examples/zone-outage.yaml",
        "-o",
        "jsonl",
        "--exclude-namespace",
        "shop",
    ]));
    assert!(!excluded.iter().any(|e| e.1 == "evicted"), "{excluded:?}");
    let dir = std::env::temp_dir().join(format!("noexecute-pol-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("policy.yaml");
    std::fs::write(&config, "excludeSelector: tier=db\n").unwrap();
    let file = dir.join("labels.yaml");
    std::fs::write(
        &file,
        "nodes: [{name: n}]\npods: [{name: db, nodeName: n, labels: {tier: db}}, {name: web, nodeName: n}]\nevents: [{at: 1s, addTaint: {node: n, taint: {key: k, effect: NoExecute}}}]\n",
    )
    .unwrap();
    let got = events(&json_lines(&[
        "simulate",
        file.to_str().unwrap(),
        "-o",
        "jsonl",
        "--config",
        config.to_str().unwrap(),
    ]));
    assert_eq!(got, vec![(1.0, "evicted".into(), "default/web".into())]);
}

fn owned(want: Vec<(f64, &str, &str)>) -> Vec<(f64, String, String)> {
    want.into_iter()
        .map(|(a, e, p)| (a, e.to_string(), p.to_string()))
        .collect()
}

#[test]
fn the_mass_eviction_brake_example_holds_releases_and_paces() {
    let lines = json_lines(&[
        "simulate",
        "examples/mass-eviction-brake.yaml",
        "-o",
        "jsonl",
        "--brake-threshold",
        "40",
        "--max-evictions-per-second",
        "1",
        "--eviction-burst",
        "2",
    ]);
    let got: Vec<(f64, String, String)> = events(&lines)
        .into_iter()
        .filter(|e| e.1 != "scheduled")
        .collect();
    assert_eq!(
        got,
        owned(vec![
            (10.0, "evicted", "jobs/batch-0"),
            (11.0, "evicted", "jobs/batch-1"),
            (12.0, "evicted", "jobs/batch-2"),
            (13.0, "evicted", "jobs/batch-3"),
            (14.0, "brake-engaged", "-"),
            (14.0, "held", "jobs/batch-4"),
            (15.0, "held", "jobs/batch-5"),
            (70.0, "held", "shop/web-0"),
            (71.0, "held", "shop/web-1"),
            (72.0, "held", "shop/web-2"),
            (73.0, "held", "shop/web-3"),
            (74.0, "held", "shop/web-4"),
            (75.0, "held", "shop/web-5"),
            // The release annotation on n0.
            (100.0, "evicted", "shop/web-0"),
            (200.0, "cancelled", "jobs/batch-5"),
            (200.0, "cancelled", "shop/web-5"),
            (200.0, "cancelled", "jobs/batch-4"),
            (200.0, "cancelled", "shop/web-4"),
            (200.0, "brake-released", "-"),
            // The burst of 2, in deadline order; web-3 waits for a token and is cancelled.
            (200.0, "evicted", "shop/web-1"),
            (200.0, "evicted", "shop/web-2"),
            (200.0, "cancelled", "shop/web-3"),
        ])
    );
    let engaged = lines
        .iter()
        .find(|l| l["event"] == "brake-engaged")
        .unwrap();
    assert!(
        engaged["reason"]
            .as_str()
            .unwrap()
            .contains("5 of 10 nodes NoExecute-tainted (50.0%)"),
        "{engaged}"
    );

    // --release-brake: the brake is still reported, but nothing is held.
    let released = events(&json_lines(&[
        "simulate",
        "examples/mass-eviction-brake.yaml",
        "-o",
        "jsonl",
        "--brake-threshold",
        "40",
        "--release-brake",
    ]));
    assert!(released.iter().any(|e| e.1 == "brake-engaged"));
    assert!(!released.iter().any(|e| e.1 == "held"), "{released:?}");
    assert!(released.contains(&(14.0, "evicted".into(), "jobs/batch-4".into())));
}

#[test]
fn rate_limits_space_the_evictions_out() {
    // Zone a's ten 60 s pods fall due together at 120 s; at 2/s with a burst of 2 they
    // start two at once, then one every half second.
    let got: Vec<(f64, String, String)> = events(&json_lines(&[
        "simulate",
        "examples/zone-outage.yaml",
        "-o",
        "jsonl",
        "--max-evictions-per-second",
        "2",
        "--until",
        "150s",
    ]))
    .into_iter()
    .filter(|e| e.1 == "evicted")
    .collect();
    let times: Vec<f64> = got.iter().map(|e| e.0).collect();
    assert_eq!(
        times,
        vec![
            120.0, 120.0, 120.5, 121.0, 121.5, 122.0, 122.5, 123.0, 123.5, 124.0
        ]
    );
    // At most 1 per node per 10 s: two due pods on one node start 10 s apart.
    let dir = std::env::temp_dir().join(format!("noexecute-rate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("node.yaml");
    std::fs::write(
        &file,
        "nodes: [{name: n}, {name: m}]\npods: [{name: a, nodeName: n}, {name: b, nodeName: n}, {name: c, nodeName: m}]\nevents: [{at: 1s, addTaint: {node: n, taint: {key: k, effect: NoExecute}}}, {at: 1s, addTaint: {node: m, taint: {key: k, effect: NoExecute}}}]\n",
    )
    .unwrap();
    let got: Vec<(f64, String, String)> = events(&json_lines(&[
        "simulate",
        file.to_str().unwrap(),
        "-o",
        "jsonl",
        "--max-node-evictions-per-second",
        "0.1",
    ]))
    .into_iter()
    .filter(|e| e.1 == "evicted")
    .collect();
    assert_eq!(
        got,
        owned(vec![
            (1.0, "evicted", "default/a"),
            (1.0, "evicted", "default/c"),
            (11.0, "evicted", "default/b"),
        ])
    );
}

#[test]
fn bad_pacing_flags_are_named() {
    for (args, expected) in [
        (
            vec!["--brake-threshold", "100"],
            "brake-threshold (brakeThreshold) must be a percentage",
        ),
        (
            vec!["--max-evictions-per-second", "0"],
            "max-evictions-per-second (maxEvictionsPerSecond) must be a positive number",
        ),
        (
            vec![
                "--max-node-evictions-per-second",
                "1",
                "--node-eviction-burst",
                "0",
            ],
            "burst of max-node-evictions-per-second",
        ),
        (vec!["--eviction-burst", "many"], "--eviction-burst"),
    ] {
        let mut all = vec!["simulate", "examples/zone-outage.yaml"];
        all.extend(args.iter().copied());
        let out = noexecute(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// A mass deadline larger than a tick's batch (3,000 pods whose toleration runs out in the
/// same instant): the JSON lines written as the simulation runs are exactly the ones of the
/// whole timeline (kept for `--plot`), every pod goes at its deadline, and YAML has the same
/// items.
#[test]
fn a_mass_deadline_streams_the_same_timeline_it_keeps() {
    let dir = std::env::temp_dir().join(format!("noexecute-mass-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pods: Vec<serde_json::Value> = (0..3000usize)
        .map(|i| {
            let tolerations = if i.is_multiple_of(10) {
                serde_json::json!([])
            } else {
                serde_json::json!([{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}])
            };
            serde_json::json!({"name": format!("p{i}"), "nodeName": "n", "tolerations": tolerations})
        })
        .collect();
    let scenario = serde_json::json!({
        "nodes": [{"name": "n"}, {"name": "m"}],
        "pods": pods,
        "events": [{"at": "10s", "addTaint": {"node": "n", "taint": {"key": "k", "effect": "NoExecute"}}}],
    });
    let file = dir.join("mass.json");
    std::fs::write(&file, scenario.to_string()).unwrap();
    let file = file.to_str().unwrap();
    let svg = dir.join("mass.svg");

    let streamed = noexecute(&["simulate", file, "-o", "jsonl"]);
    let kept = noexecute(&[
        "simulate",
        file,
        "-o",
        "jsonl",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(streamed.status.success() && kept.status.success());
    assert_eq!(
        streamed.stdout, kept.stdout,
        "the same lines, in the same order"
    );

    let lines = json_lines(&["simulate", file, "-o", "jsonl"]);
    let evicted: Vec<(f64, String, String)> = events(&lines)
        .into_iter()
        .filter(|(_, e, _)| e == "evicted")
        .collect();
    assert_eq!(evicted.len(), 3000);
    for (at, _, pod) in &evicted {
        let i: usize = pod.trim_start_matches("default/p").parse().unwrap();
        let due = if i.is_multiple_of(10) { 10.0 } else { 40.0 };
        assert_eq!(*at, due, "{pod}");
    }

    let yaml = noexecute(&["simulate", file, "-o", "yaml"]);
    assert!(yaml.status.success());
    let items: Vec<serde_json::Value> = serde_yaml_ng::from_slice(&yaml.stdout).unwrap();
    assert_eq!(items, lines, "YAML lists the JSON lines' objects");

    let table = noexecute(&["simulate", file]);
    let table = String::from_utf8(table.stdout).unwrap();
    assert!(table.contains("3000 of 3000 pods evicted"), "{table}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn output_json_is_one_document_streamed_or_not() {
    let scenario = "examples/node-maintenance.yaml";
    let lines = json_lines(&["simulate", scenario, "-o", "jsonl"]);
    assert!(!lines.is_empty());
    let streamed = noexecute(&["simulate", scenario, "-o", "json"]);
    assert!(streamed.status.success());
    let doc: Vec<serde_json::Value> = serde_json::from_slice(&streamed.stdout).unwrap();
    assert_eq!(doc, lines, "one array of the JSON lines' objects");
    // With a plot the timeline is written at the end: the same bytes.
    let svg = std::env::temp_dir().join(format!("noexecute-json-{}.svg", std::process::id()));
    let kept = noexecute(&[
        "simulate",
        scenario,
        "-o",
        "json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(kept.status.success());
    assert_eq!(kept.stdout, streamed.stdout);
    let _ = std::fs::remove_file(svg);
}

#[test]
fn gpu_ecc_timeline() {
    let lines = json_lines(&["simulate", "examples/gpu-ecc.yaml", "--output", "jsonl"]);
    let got = events(&lines);
    let want = vec![
        (10.0, "scheduled", "ml/train-0"),
        (10.0, "evicted", "ml/train-0"),
        (10.0, "scheduled", "ml/infer-0"),
        (25.0, "cancelled", "ml/infer-0"),
        (60.0, "scheduled", "ml/train-1"),
        (60.0, "evicted", "ml/train-1"),
    ];
    let want: Vec<(f64, String, String)> = want
        .into_iter()
        .map(|(a, e, p)| (a, e.to_string(), p.to_string()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(lines[2]["deadline"].as_f64(), Some(40.0), "{}", lines[2]);
    assert!(
        lines[4]["reason"]
            .as_str()
            .unwrap()
            .contains("DeviceTaintRule n2-maintenance"),
        "{}",
        lines[4]
    );
}

/// A rule over every GPU holds with the brake at 50 % although no node is tainted; the
/// release annotation on n1 lets its pod go.
#[test]
fn the_brake_holds_a_device_wide_rule() {
    let dir = std::env::temp_dir().join(format!("noexecute-gpu-brake-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("gpu-brake.yaml");
    std::fs::write(
        &file,
        "until: 30s
slices:
  - {driver: d, pool: n1, devices: [{name: g0}]}
  - {driver: d, pool: n2, devices: [{name: g0}]}
nodes: [{name: n1}, {name: n2}]
pods:
  - {name: a, nodeName: n1, devices: [{driver: d, pool: n1, device: g0}]}
  - {name: b, nodeName: n2, devices: [{driver: d, pool: n2, device: g0}]}
events:
  - {at: 5s, addRule: {name: all, deviceSelector: {driver: d}, taint: {key: k, effect: NoExecute}}}
  - {at: 10s, releaseBrake: {node: n1}}
",
    )
    .unwrap();
    let lines = json_lines(&[
        "simulate",
        file.to_str().unwrap(),
        "--brake-threshold",
        "50",
        "--output",
        "jsonl",
    ]);
    let got = events(&lines);
    let evicted: Vec<&(f64, String, String)> =
        got.iter().filter(|(_, e, _)| e == "evicted").collect();
    assert_eq!(
        evicted,
        vec![&(10.0, "evicted".to_string(), "default/a".to_string())],
        "{got:?}"
    );
    assert!(
        got.contains(&(5.0, "brake-engaged".to_string(), "-".to_string())),
        "{got:?}"
    );
    assert!(
        got.contains(&(5.0, "held".to_string(), "default/b".to_string())),
        "{got:?}"
    );
    let engaged = lines
        .iter()
        .find(|l| l["event"] == "brake-engaged")
        .unwrap();
    assert!(
        engaged["reason"]
            .as_str()
            .unwrap()
            .contains("2 of 2 devices NoExecute-tainted (0.0% of nodes, 100.0% of devices)"),
        "{engaged}"
    );
    // b is still held at the end: counted as pending.
    let out = noexecute(&[
        "simulate",
        file.to_str().unwrap(),
        "--brake-threshold",
        "50",
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("1 eviction(s) still pending"), "{table}");
}

#[test]
fn bad_device_input_is_reported_with_the_field() {
    fails_with(
        "slices: [{driver: d, pool: p, devices: [{name: g0}]}]\npods: [{name: a, devices: [{driver: d, pool: p, device: g9}]}]",
        &["pods[0].devices[0].device", "d/p/g9 is in no slice"],
    );
    fails_with(
        "slices: [{driver: d, pool: p, devices: [{name: g0}]}]\nevents: [{at: 1s, deleteRule: {name: r}}]",
        &["events[0].deleteRule.name", "rule r does not exist"],
    );
    fails_with(
        "slices: [{driver: d, pool: p, devices: [{name: g0, taints: [{key: k, effect: Sometimes}]}]}]",
        &[
            "slices[0].devices[0].taints[0].effect",
            "unknown device taint effect",
        ],
    );
    // Device taints and tolerations are checked as the API server checks them.
    fails_with(
        "slices: [{driver: d, pool: p, devices: [{name: g0, taints: [{key: k, effect: PreferNoSchedule}]}]}]",
        &[
            "slices[0].devices[0].taints[0].effect",
            "expected NoSchedule, NoExecute or None",
        ],
    );
    fails_with(
        "slices: [{driver: d, pool: p, devices: [{name: g0}]}]\npods: [{name: a, devices: [{driver: d, pool: p, device: g0, tolerations: [{key: k, operator: Lt, value: '1'}]}]}]",
        &[
            "pods[0].devices[0].tolerations[0].operator",
            "expected Equal or Exists",
        ],
    );
}

/// Run a scenario given as text; its JSON lines.
fn simulate_text(name: &str, text: &str, flags: &[&str]) -> Vec<serde_json::Value> {
    let dir = std::env::temp_dir().join(format!("noexecute-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, text).unwrap();
    let mut args = vec!["simulate", file.to_str().unwrap(), "--output", "jsonl"];
    args.extend_from_slice(flags);
    json_lines(&args)
}

/// A pod evicted for its node while its device eviction waits: one eviction, and no
/// "cancelled" for its devices afterwards (its claim goes after it).
#[test]
fn a_pod_evicted_for_its_node_is_not_then_cancelled_for_its_devices() {
    let lines = simulate_text(
        "node-then-device",
        "slices: [{driver: d, pool: p, devices: [{name: g0, taints: [{key: k, effect: NoExecute}]}]}]
nodes: [{name: n}]
pods:
  - {name: a, nodeName: n, devices: [{driver: d, pool: p, device: g0,
       tolerations: [{key: k, operator: Exists, effect: NoExecute, tolerationSeconds: 60}]}]}
events:
  - {at: 5s, addTaint: {node: n, taint: {key: t, effect: NoExecute}}}
",
        &[],
    );
    let got = events(&lines);
    assert_eq!(
        got,
        vec![
            (0.0, "scheduled".to_string(), "default/a".to_string()),
            (5.0, "evicted".to_string(), "default/a".to_string()),
        ],
        "{lines:?}"
    );
}

/// `addRule` for an existing name is an update: the taint keeps its time (0 s, the 0.5 s
/// truncated), so the pod tolerating it for 30 s goes at 30 s, not 30 s after the update.
#[test]
fn a_rule_applied_again_keeps_its_time() {
    let lines = simulate_text(
        "rule-update",
        "slices: [{driver: d, pool: p, devices: [{name: g0}, {name: g1}]}]
nodes: [{name: n}]
pods:
  - {name: a, nodeName: n, devices: [{driver: d, pool: p, device: g1,
       tolerations: [{key: k, operator: Exists, effect: NoExecute, tolerationSeconds: 30}]}]}
  - {name: b, nodeName: n, devices: [{driver: d, pool: p, device: g0,
       tolerations: [{key: k, operator: Exists, effect: NoExecute, tolerationSeconds: 30}]}]}
events:
  - {at: 500ms, addRule: {name: r, deviceSelector: {driver: d, device: g0}, taint: {key: k, effect: NoExecute}}}
  - {at: 20s, addRule: {name: r, deviceSelector: {driver: d}, taint: {key: k, effect: NoExecute}}}
",
        &[],
    );
    let evicted: Vec<(f64, String)> = events(&lines)
        .into_iter()
        .filter(|(_, e, _)| e == "evicted")
        .map(|(at, _, pod)| (at, pod))
        .collect();
    assert_eq!(
        evicted,
        vec![
            (30.0, "default/b".to_string()),
            (30.0, "default/a".to_string())
        ],
        "{lines:?}"
    );
}
