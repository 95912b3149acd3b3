//! The scenario parser never panics, whatever it is given: random text, and random
//! recombinations of valid fragments (which reach the semantic checks). Every rejection names
//! the file. The coverage-guided target in `fuzz/` does the same for longer runs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use noexecute::offline::scenario::Scenario;
use noexecute::offline::simulate;
use proptest::prelude::*;

const FRAGMENTS: &[&str] = &[
    "nodes:",
    "pods:",
    "events:",
    "until: 90s",
    "until: -1",
    "until: 1e400",
    "  - name: a",
    "  - {name: b, labels: {topology.kubernetes.io/zone: z}}",
    "    taints: [{key: k, effect: NoExecute}]",
    "    taints: [{key: '', effect: NoExecute}]",
    "    nodeName: a",
    "    tolerations: [{operator: Exists}]",
    "    tolerations: [{key: k, operator: Lt, value: '5'}]",
    "    tolerations: [{key: k, tolerationSeconds: 9223372036854775807}]",
    "  - {at: 1s, addTaint: {node: a, taint: {key: k, effect: NoExecute}}}",
    "  - {at: 2s, removeTaint: {node: a, key: k}}",
    "  - {at: 3s, deletePod: {name: p}}",
    "  - {at: 0, addPod: {name: p, nodeName: a}}",
    "  - {at: 1h30m, updatePod: {name: p, nodeName: b}}",
    "  - {at: 5m, deleteNode: {name: a}}",
    "  - {at: 5m, addNode: {name: a}}",
    "  - {at: 1s, setTaints: {node: b}}",
    "  - name: p",
    "    namespace: ns",
    "slices:",
    "  - {driver: d, pool: a, devices: [{name: g}, {name: h, taints: [{key: k, effect: NoExecute}]}]}",
    "  - {driver: d, pool: a, devices: [{name: g, taints: [{key: k, effect: None}]}]}",
    "    devices: [{driver: d, pool: a, device: g, tolerations: [{operator: Exists, effect: NoExecute, tolerationSeconds: 5}]}]",
    "    devices: [{driver: d, pool: a, device: h}]",
    "  - {at: 1s, addDeviceTaint: {driver: d, pool: a, device: g, taint: {key: k, effect: NoExecute}}}",
    "  - {at: 2s, removeDeviceTaint: {driver: d, pool: a, device: g, key: k}}",
    "  - {at: 1s, addRule: {name: r, deviceSelector: {}, taint: {key: k, effect: NoExecute}}}",
    "  - {at: 2s, addRule: {name: r, deviceSelector: {pool: a}, taint: {key: k, effect: None}}}",
    "  - {at: 3s, deleteRule: {name: r}}",
    "  - {at: 0, addPod: {name: q, nodeName: a, devices: [{driver: d, pool: a, device: g}]}}",
    "- [",
    "{",
    "}",
    ": :",
    "\t",
    "&a *a",
    "!!binary x",
    "'",
    "\"\\u0000\"",
];

fn check(text: &str) -> Result<(), TestCaseError> {
    match Scenario::parse(Path::new("fuzz.yaml"), text) {
        Ok(scenario) => {
            // Whatever parses must also simulate without panicking.
            let timeline = simulate::run(scenario, simulate::Options::default());
            prop_assert!(timeline.evicted() <= timeline.pods_seen);
        }
        Err(e) => prop_assert!(e.to_string().starts_with("fuzz.yaml"), "{e}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3_000, ..ProptestConfig::default() })]

    #[test]
    fn random_text_never_panics(text in ".{0,400}") {
        check(&text)?;
    }

    #[test]
    fn recombined_fragments_never_panic(parts in prop::collection::vec(prop::sample::select(FRAGMENTS), 0..25)) {
        check(&parts.join("\n"))?;
    }
}
