//! Random offers, cancels, brake changes and releases against the pacer, checking after the
//! fact that every limit held and nothing was lost or duplicated.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use noexecute_engine::pace::{Brake, PaceConfig, Pacer, Rate};
use noexecute_engine::{EvictionId, Time};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Offer { node: usize, due_in: i64 },
    Cancel { pick: usize },
    Tainted { tainted: usize },
    Release { node: usize, on: bool },
    Wait { ms: i64 },
}

const NODES: usize = 5;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..NODES, 0..3000i64).prop_map(|(node, due_in)| Op::Offer { node, due_in }),
        2 => (0..64usize).prop_map(|pick| Op::Cancel { pick }),
        1 => (0..=NODES).prop_map(|tainted| Op::Tainted { tainted }),
        1 => (0..NODES, any::<bool>()).prop_map(|(node, on)| Op::Release { node, on }),
        4 => (0..2500i64).prop_map(|ms| Op::Wait { ms }),
    ]
}

fn config() -> impl Strategy<Value = PaceConfig> {
    let rate = proptest::option::of((1u32..20, 1u32..4).prop_map(|(tenths, burst)| Rate {
        per_second: f64::from(tenths) / 2.0,
        burst,
    }));
    let brake = proptest::option::of((20u32..90, 1usize..3).prop_map(|(p, m)| Brake {
        threshold_percent: f64::from(p),
        min_tainted_nodes: m,
    }));
    (rate.clone(), rate, brake).prop_map(|(rate, node_rate, brake)| PaceConfig {
        rate,
        node_rate,
        brake,
    })
}

/// At most `burst + rate × window` starts in any window (checked on every pair of starts).
fn assert_rate(starts: &[i64], rate: &Rate, what: &str) {
    for i in 0..starts.len() {
        for j in i..starts.len() {
            let window = (starts[j] - starts[i]) as f64 / 1000.0;
            let allowed = f64::from(rate.burst) + rate.per_second * window + 1e-9;
            assert!(
                (j - i + 1) as f64 <= allowed,
                "{what}: {} starts in {window} s exceed burst {} + {}/s",
                j - i + 1,
                rate.burst,
                rate.per_second
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn limits_hold_and_nothing_is_lost(config in config(), ops in proptest::collection::vec(op(), 1..120)) {
        let names: Vec<Arc<str>> = (0..NODES).map(|i| Arc::from(format!("n{i}"))).collect();
        let mut p: Pacer<u64> = Pacer::new(config);
        let mut now = 0i64;
        let mut next_id = 0u64;
        let mut held: BTreeMap<u64, usize> = BTreeMap::new();
        let mut started: HashSet<u64> = HashSet::new();
        let mut overall: Vec<i64> = Vec::new();
        let mut per_node: Vec<Vec<i64>> = vec![Vec::new(); NODES];
        let mut released = [false; NODES];
        let mut cancelled = 0u64;
        p.set_node_counts(NODES, 0);
        let mut step = |p: &mut Pacer<u64>, now: i64, held: &mut BTreeMap<u64, usize>, released: &[bool; NODES]| {
            let mut out = Vec::new();
            p.release(Time::from_millis(now), &mut out);
            for id in out {
                let node = held.remove(&id).ok_or_else(|| format!("{id} started twice or never offered"))?;
                if p.braking() && !released[node] {
                    return Err(format!("{id} on n{node} started while braking"));
                }
                started.insert(id);
                overall.push(now);
                per_node[node].push(now);
            }
            Ok::<(), String>(())
        };
        for op in ops {
            match op {
                Op::Offer { node, due_in } => {
                    next_id += 1;
                    p.offer(EvictionId(next_id), Some(names[node].clone()), Time::from_millis(now + due_in), next_id);
                    held.insert(next_id, node);
                }
                Op::Cancel { pick } => {
                    if let Some(&id) = held.keys().nth(pick % held.len().max(1)) {
                        prop_assert_eq!(p.cancel(EvictionId(id)), Some(id));
                        held.remove(&id);
                        cancelled += 1;
                    }
                }
                Op::Tainted { tainted } => { p.set_node_counts(NODES, tainted); }
                Op::Release { node, on } => {
                    released[node] = on;
                    p.set_node_released(&names[node], on);
                }
                Op::Wait { ms } => {
                    // Wake when the pacer asks to, as the driver does, until `now + ms`.
                    let until = now + ms;
                    while let Some(at) = p.next_release() {
                        let at = at.as_millis().max(now);
                        if at > until { break; }
                        now = at;
                        step(&mut p, now, &mut held, &released).map_err(TestCaseError::fail)?;
                        if p.next_release().is_some_and(|n| n.as_millis() <= now) {
                            // Something is startable now but was not started: a stall.
                            let mut out = Vec::new();
                            p.release(Time::from_millis(now), &mut out);
                            prop_assert!(out.is_empty(), "release left startable work behind");
                            break;
                        }
                    }
                    now = until;
                }
            }
            step(&mut p, now, &mut held, &released).map_err(TestCaseError::fail)?;
            prop_assert_eq!(p.len(), held.len());
        }
        // With the brake off, everything held drains eventually.
        p.set_node_counts(NODES, 0);
        let mut guard = 0;
        while !held.is_empty() {
            now = p.next_release().map(|t| t.as_millis().max(now)).unwrap_or(now);
            step(&mut p, now, &mut held, &released).map_err(TestCaseError::fail)?;
            guard += 1;
            prop_assert!(guard < 10_000, "held evictions never drain: {:?}", held);
        }

        if let Some(rate) = &config.rate {
            assert_rate(&overall, rate, "overall");
        }
        if let Some(rate) = &config.node_rate {
            for (i, starts) in per_node.iter().enumerate() {
                assert_rate(starts, rate, &format!("node n{i}"));
            }
        }
        prop_assert_eq!(started.len() as u64 + cancelled, next_id, "every offer started or was cancelled once");
    }
}
