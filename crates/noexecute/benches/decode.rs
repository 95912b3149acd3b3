//! Where the live path's CPU goes: decoding a list page of 500 realistic pods (as the API
//! server sends it, managed fields and all) into
//! - `Pod`: every field, as client-go's informers hold them (upstream's cost);
//! - `Object<PodSpec, PodStatus>` with a full `ObjectMeta`: noexecute before issue 13, which
//!   decoded managed fields, owner references and every annotation, then dropped them;
//! - `SlimPod`: noexecute now, which skips them unread.
//!
//! Then the same 500 pods as a real kube-apiserver sends them (created on a plane of their own,
//! status included, listed once in JSON and once in protobuf), decoded into `SlimPod` from each
//! format, and into `Pod` from JSON.
//!
//!     cargo bench -p noexecute --bench decode

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kube::core::{Object, ObjectList};
use noexecute::adapters::proto;
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

/// The same 500 realistic pods, listed from a real API server in JSON and in protobuf.
fn server_pages() -> anyhow::Result<(bytes::Bytes, bytes::Bytes)> {
    use anyhow::Context;
    use kube::api::{Patch, PatchParams, PostParams};
    let plane = noexecute_testkit::Plane::up("bench-decode", &[])?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = plane.admin_client().await?;
        let ns = "decode";
        let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
            kube::Api::all(client.clone());
        let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), ns);
        if namespaces.get_opt(ns).await?.is_none() {
            let namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": ns}}))?;
            namespaces
                .create(&PostParams::default(), &namespace)
                .await?;
        }
        for i in pods.list(&Default::default()).await?.items.len()..500 {
            let name = format!("pod-{i:03}");
            let mut value =
                realistic::pod_value(&name, ns, "node-1", i, &realistic::snapshot_tolerations(i));
            let status = value["status"].take();
            if let Some(meta) = value["metadata"].as_object_mut() {
                for server_side in [
                    "uid",
                    "resourceVersion",
                    "creationTimestamp",
                    "managedFields",
                ] {
                    meta.remove(server_side);
                }
            }
            let pod: Pod = serde_json::from_value(value)?;
            pods.create(&PostParams::default(), &pod)
                .await
                .with_context(|| format!("creating {name}"))?;
            pods.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "status": status })),
            )
            .await
            .with_context(|| format!("setting {name}'s status"))?;
        }
        let page = |accept: &'static str| {
            let client = client.clone();
            async move {
                let req = http::Request::get(format!("/api/v1/namespaces/{ns}/pods?limit=500"))
                    .header(http::header::ACCEPT, accept)
                    .body(kube::client::Body::empty())?;
                let response = client.send(req).await?;
                let body = http_body_util::BodyExt::collect(response.into_body())
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                Ok::<_, anyhow::Error>(body.to_bytes())
            }
        };
        Ok((
            page("application/json").await?,
            page(proto::MEDIA_TYPE).await?,
        ))
    })
}

fn decode_server_pages(c: &mut Criterion) {
    let (json, protobuf) = match server_pages() {
        Ok(pages) => pages,
        Err(e) => panic!("could not list the pods from a real API server: {e:#}"),
    };
    let mut group = c.benchmark_group("decode 500 realistic pods as kube-apiserver lists them");
    group.throughput(Throughput::Elements(500));
    group.bench_function("JSON into Pod (every field, as upstream in JSON)", |b| {
        b.iter(|| serde_json::from_slice::<ObjectList<Pod>>(&json).map(|l| l.items.len()))
    });
    group.bench_function("JSON into SlimPod", |b| {
        b.iter(|| serde_json::from_slice::<ObjectList<SlimPod>>(&json).map(|l| l.items.len()))
    });
    group.bench_function("protobuf into SlimPod", |b| {
        b.iter(|| proto::page::<SlimPod>(protobuf.clone()).map(|p| p.items.len()))
    });
    group.finish();
    println!(
        "page sizes: JSON {} bytes, protobuf {} bytes",
        json.len(),
        protobuf.len()
    );
}

criterion_group!(benches, decode, decode_server_pages);
criterion_main!(benches);
