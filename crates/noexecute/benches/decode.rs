//! Where the live path's CPU goes: decoding a list page of 500 realistic pods (as the API
//! server sends it, managed fields and all) into
//! - `Pod`: every field, as client-go's informers hold them (upstream's cost);
//! - `Object<PodSpec, PodStatus>` with a full `ObjectMeta`: noexecute before issue 13, which
//!   decoded managed fields, owner references and every annotation, then dropped them;
//! - `SlimPod`: noexecute now, which skips them unread.
//!
//!     cargo bench -p noexecute --bench decode

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kube::core::{Object, ObjectList};
use noexecute::adapters::slim::{PodSpec, PodStatus, SlimPod};
use noexecute_testkit::realistic;

fn page() -> Vec<u8> {
    let items: Vec<serde_json::Value> = (0..500)
        .map(|i| {
            realistic::pod_value(
                &format!("pod-{i}"),
                "team",
                "node-1",
                i,
                &realistic::snapshot_tolerations(i),
            )
        })
        .collect();
    let list = serde_json::json!({
        "apiVersion": "v1",
        "kind": "PodList",
        "metadata": {"resourceVersion": "12345", "continue": "token"},
        "items": items,
    });
    serde_json::to_vec(&list).unwrap_or_default()
}

fn decode(c: &mut Criterion) {
    let page = page();
    let mut group = c.benchmark_group("decode a page of 500 realistic pods");
    group.throughput(Throughput::Bytes(page.len() as u64));
    group.bench_function("Pod (every field, as upstream)", |b| {
        b.iter(|| serde_json::from_slice::<ObjectList<Pod>>(&page).map(|l| l.items.len()))
    });
    group.bench_function("Object<PodSpec, PodStatus> (full metadata, before)", |b| {
        b.iter(|| {
            serde_json::from_slice::<ObjectList<Object<PodSpec, PodStatus>>>(&page)
                .map(|l| l.items.len())
        })
    });
    group.bench_function("SlimPod (now)", |b| {
        b.iter(|| serde_json::from_slice::<ObjectList<SlimPod>>(&page).map(|l| l.items.len()))
    });
    group.finish();
}

criterion_group!(benches, decode);
criterion_main!(benches);
