//! Engine throughput at the scale of a large cluster: 5,000 nodes × 30 pods.
//!
//! `cargo bench -p noexecute-engine --bench engine`
//!
//! - `mass_taint`: every node gets a NoExecute taint; 150,000 pod decisions (15,000 immediate
//!   evictions, 135,000 scheduled). Criterion reports decisions per second.
//! - `drain_deadlines`: from there, the clock moves past the 300 s deadline and all 135,000
//!   scheduled evictions fire.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use noexecute_engine::{Action, Engine, Time, workload};

const NODES: usize = 5_000;
const PODS_PER_NODE: usize = 30;

fn populated() -> (Engine, Vec<noexecute_engine::NodeObservation>) {
    let (nodes, pods) = workload::population(NODES, PODS_PER_NODE);
    let mut engine = Engine::default();
    let mut out = Vec::new();
    let now = Time::from_secs(0);
    for node in &nodes {
        engine.upsert_node(node, now, &mut out);
    }
    for pod in pods {
        engine.upsert_pod(pod, now, &mut out);
    }
    (engine, workload::tainted(&nodes))
}

fn taint_all(
    engine: &mut Engine,
    tainted: &[noexecute_engine::NodeObservation],
    out: &mut Vec<Action>,
) {
    let now = Time::from_secs(1);
    for node in tainted {
        engine.upsert_node(node, now, out);
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine");
    group.sample_size(10);
    group.throughput(Throughput::Elements((NODES * PODS_PER_NODE) as u64));
    group.bench_function("mass_taint", |b| {
        b.iter_batched(
            || (populated(), Vec::with_capacity(NODES * PODS_PER_NODE)),
            |((mut engine, tainted), mut out)| {
                taint_all(&mut engine, &tainted, &mut out);
                assert_eq!(out.len(), NODES * PODS_PER_NODE);
                (engine, out)
            },
            BatchSize::PerIteration,
        )
    });
    group.throughput(Throughput::Elements(
        (NODES * PODS_PER_NODE * 9 / 10) as u64,
    ));
    group.bench_function("drain_deadlines", |b| {
        b.iter_batched(
            || {
                let (mut engine, tainted) = populated();
                let mut out = Vec::new();
                taint_all(&mut engine, &tainted, &mut out);
                (engine, Vec::with_capacity(NODES * PODS_PER_NODE))
            },
            |(mut engine, mut out)| {
                engine.advance(Time::from_secs(301), &mut out);
                assert_eq!(out.len(), NODES * PODS_PER_NODE * 9 / 10);
                (engine, out)
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
