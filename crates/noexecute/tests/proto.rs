//! Protobuf against a real API server: the decoder's field numbers are upstream's, the
//! protobuf and JSON list-watches give the same observations of the same objects, and a
//! server that refuses protobuf gets JSON.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use futures::{Stream, StreamExt};
use http::Request;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time as MetaTime;
use kube::Client;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::client::Body;
use kube::runtime::watcher::Event;
use noexecute::adapters::proto::{self, Decode};
use noexecute::adapters::slim::{SlimNode, SlimPod, TAINT_DISRUPTION_REASON};
use noexecute::controller::listwatch::{self, ContentType};
use noexecute_testkit::{Plane, TestNamespace, pod};
use prost::Message;

fn plane() -> Result<&'static Plane> {
    Plane::shared("proto", &[])
}

// ---- field numbers ---------------------------------------------------------------------------

/// A message's fields: name → (type, number).
type Fields = BTreeMap<String, (String, u32)>;

/// `message NAME { ... }` blocks of a `.proto` file.
fn messages(path: &PathBuf) -> Result<BTreeMap<String, Fields>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path:?}"))?;
    let mut out: BTreeMap<String, Fields> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("message ") {
            let name = rest.trim_end_matches('{').trim().to_string();
            out.entry(name.clone()).or_default();
            current = Some(name);
            continue;
        }
        if line == "}" {
            current = None;
            continue;
        }
        let Some(message) = &current else { continue };
        let Some(decl) = line.strip_suffix(';') else {
            continue;
        };
        let Some((lhs, number)) = decl.split_once('=') else {
            continue;
        };
        let lhs = lhs
            .trim()
            .trim_start_matches("optional ")
            .trim_start_matches("repeated ");
        let Some((ty, field)) = lhs.rsplit_once(' ') else {
            continue;
        };
        let number: u32 = number
            .trim()
            .parse()
            .with_context(|| format!("{path:?}: field number in {line:?}"))?;
        if let Some(fields) = out.get_mut(message) {
            fields.insert(field.to_string(), (ty.trim().to_string(), number));
        }
    }
    Ok(out)
}

/// The field number prost writes for a message with one field set.
fn tag_of(m: impl Message) -> Result<u32> {
    let bytes = m.encode_to_vec();
    let key = prost::encoding::decode_varint(&mut bytes.as_slice())
        .map_err(|e| anyhow!("no field written: {e}"))?;
    Ok((key >> 3) as u32)
}

#[test]
fn the_protobuf_messages_use_upstreams_field_numbers_and_types() -> Result<()> {
    use proto::*;
    use std::collections::BTreeMap as Map;
    let bin = PathBuf::from(
        plane()?
            .env
            .get("NOEXECUTE_KUBE_BIN")
            .ok_or_else(|| anyhow!("the plane's env has no NOEXECUTE_KUBE_BIN"))?,
    );
    let mut files = Map::new();
    for f in ["core-v1", "meta-v1", "runtime", "policy-v1"] {
        files.insert(f, messages(&bin.join("proto").join(format!("{f}.proto")))?);
    }
    let s = || Some(String::new());
    let b = || Some(bytes::Bytes::new());
    let t = || Some(Time::default());
    // (file, upstream message, upstream field, upstream type (last segment), our message with
    // only that field set)
    #[rustfmt::skip]
    let checks: Vec<(&str, &str, &str, &str, Result<u32>)> = vec![
        ("runtime", "TypeMeta", "apiVersion", "string", tag_of(TypeMeta { api_version: s(), kind: None, })),
        ("runtime", "TypeMeta", "kind", "string", tag_of(TypeMeta { api_version: None, kind: s(), })),
        ("runtime", "Unknown", "typeMeta", "TypeMeta", tag_of(Unknown { type_meta: Some(TypeMeta::default()), ..Unknown::default() })),
        ("runtime", "Unknown", "raw", "bytes", tag_of(Unknown { raw: b(), ..Unknown::default() })),
        ("runtime", "Unknown", "contentEncoding", "string", tag_of(Unknown { content_encoding: s(), ..Unknown::default() })),
        ("runtime", "Unknown", "contentType", "string", tag_of(Unknown { content_type: s(), ..Unknown::default() })),
        ("runtime", "RawExtension", "raw", "bytes", tag_of(RawExtension { raw: b() })),
        ("meta-v1", "Time", "seconds", "int64", tag_of(Time { seconds: Some(0), nanos: None, })),
        ("meta-v1", "Time", "nanos", "int32", tag_of(Time { seconds: None, nanos: Some(0), })),
        ("meta-v1", "ListMeta", "resourceVersion", "string", tag_of(ListMeta { resource_version: s(), r#continue: None, })),
        ("meta-v1", "ListMeta", "continue", "string", tag_of(ListMeta { resource_version: None, r#continue: s(), })),
        ("meta-v1", "ObjectMeta", "name", "string", tag_of(WireObjectMeta { name: s(), ..Default::default() })),
        ("meta-v1", "ObjectMeta", "namespace", "string", tag_of(WireObjectMeta { namespace: s(), ..Default::default() })),
        ("meta-v1", "ObjectMeta", "uid", "string", tag_of(WireObjectMeta { uid: s(), ..Default::default() })),
        ("meta-v1", "ObjectMeta", "resourceVersion", "string", tag_of(WireObjectMeta { resource_version: s(), ..Default::default() })),
        ("meta-v1", "ObjectMeta", "generation", "int64", tag_of(WireObjectMeta { generation: Some(0), ..Default::default() })),
        ("meta-v1", "ObjectMeta", "deletionTimestamp", "Time", tag_of(WireObjectMeta { deletion_timestamp: t(), ..Default::default() })),
        ("meta-v1", "ObjectMeta", "labels", "map<string, string>", tag_of(WireObjectMeta { labels: [(String::new(), String::new())].into(), ..Default::default() })),
        ("meta-v1", "ObjectMeta", "annotations", "map<string, string>", tag_of(WireObjectMeta { annotations: vec![bytes::Bytes::new()], ..Default::default() })),
        ("meta-v1", "WatchEvent", "type", "string", tag_of(WatchEvent { r#type: s(), object: None, })),
        ("meta-v1", "WatchEvent", "object", "RawExtension", tag_of(WatchEvent { r#type: None, object: Some(RawExtension::default()), })),
        ("meta-v1", "Status", "status", "string", tag_of(Status { status: s(), ..Default::default() })),
        ("meta-v1", "Status", "message", "string", tag_of(Status { message: s(), ..Default::default() })),
        ("meta-v1", "Status", "reason", "string", tag_of(Status { reason: s(), ..Default::default() })),
        ("meta-v1", "Status", "code", "int32", tag_of(Status { code: Some(0), ..Default::default() })),
        ("core-v1", "Toleration", "key", "string", tag_of(WireToleration { key: s(), ..Default::default() })),
        ("core-v1", "Toleration", "operator", "string", tag_of(WireToleration { operator: s(), ..Default::default() })),
        ("core-v1", "Toleration", "value", "string", tag_of(WireToleration { value: s(), ..Default::default() })),
        ("core-v1", "Toleration", "effect", "string", tag_of(WireToleration { effect: s(), ..Default::default() })),
        ("core-v1", "Toleration", "tolerationSeconds", "int64", tag_of(WireToleration { toleration_seconds: Some(0), ..Default::default() })),
        ("core-v1", "PodSpec", "nodeName", "string", tag_of(WirePodSpec { node_name: s(), ..Default::default() })),
        ("core-v1", "PodSpec", "tolerations", "Toleration", tag_of(WirePodSpec { tolerations: vec![WireToleration::default()], ..Default::default() })),
        ("core-v1", "PodSpec", "resourceClaims", "PodResourceClaim", tag_of(WirePodSpec { resource_claims: vec![WirePodResourceClaim::default()], ..Default::default() })),
        ("core-v1", "PodResourceClaim", "name", "string", tag_of(WirePodResourceClaim { name: s(), ..Default::default() })),
        ("core-v1", "PodResourceClaim", "resourceClaimName", "string", tag_of(WirePodResourceClaim { resource_claim_name: s(), ..Default::default() })),
        ("core-v1", "PodResourceClaim", "resourceClaimTemplateName", "string", tag_of(WirePodResourceClaim { resource_claim_template_name: s(), ..Default::default() })),
        ("core-v1", "PodStatus", "resourceClaimStatuses", "PodResourceClaimStatus", tag_of(WirePodStatus { resource_claim_statuses: vec![WirePodResourceClaimStatus::default()], ..Default::default() })),
        ("core-v1", "PodResourceClaimStatus", "name", "string", tag_of(WirePodResourceClaimStatus { name: s(), ..Default::default() })),
        ("core-v1", "PodResourceClaimStatus", "resourceClaimName", "string", tag_of(WirePodResourceClaimStatus { resource_claim_name: s(), ..Default::default() })),
        ("core-v1", "PodCondition", "type", "string", tag_of(WirePodCondition { r#type: b(), ..Default::default() })),
        ("core-v1", "PodCondition", "lastTransitionTime", "Time", tag_of(WirePodCondition { last_transition_time: t(), ..Default::default() })),
        ("core-v1", "PodCondition", "reason", "string", tag_of(WirePodCondition { reason: b(), ..Default::default() })),
        ("core-v1", "PodStatus", "phase", "string", tag_of(WirePodStatus { phase: b(), ..Default::default() })),
        ("core-v1", "PodStatus", "conditions", "PodCondition", tag_of(WirePodStatus { conditions: vec![WirePodCondition::default()], ..Default::default() })),
        ("core-v1", "Pod", "metadata", "ObjectMeta", tag_of(WirePod { metadata: Some(WireObjectMeta::default()), ..Default::default() })),
        ("core-v1", "Pod", "spec", "PodSpec", tag_of(WirePod { spec: Some(WirePodSpec::default()), ..Default::default() })),
        ("core-v1", "Pod", "status", "PodStatus", tag_of(WirePod { status: Some(WirePodStatus::default()), ..Default::default() })),
        ("core-v1", "Taint", "key", "string", tag_of(WireTaint { key: s(), ..Default::default() })),
        ("core-v1", "Taint", "value", "string", tag_of(WireTaint { value: s(), ..Default::default() })),
        ("core-v1", "Taint", "effect", "string", tag_of(WireTaint { effect: s(), ..Default::default() })),
        ("core-v1", "Taint", "timeAdded", "Time", tag_of(WireTaint { time_added: t(), ..Default::default() })),
        ("core-v1", "NodeSpec", "taints", "Taint", tag_of(WireNodeSpec { taints: vec![WireTaint::default()], })),
        ("core-v1", "Node", "metadata", "ObjectMeta", tag_of(WireNode { metadata: Some(WireObjectMeta::default()), spec: None, })),
        ("core-v1", "Node", "spec", "NodeSpec", tag_of(WireNode { metadata: None, spec: Some(WireNodeSpec::default()), })),
        ("core-v1", "PodList", "metadata", "ListMeta", tag_of(WireList { metadata: Some(ListMeta::default()), items: vec![], })),
        ("core-v1", "PodList", "items", "Pod", tag_of(WireList { metadata: None, items: vec![bytes::Bytes::new()], })),
        ("core-v1", "NodeList", "metadata", "ListMeta", tag_of(WireList { metadata: Some(ListMeta::default()), items: vec![], })),
        ("core-v1", "NodeList", "items", "Node", tag_of(WireList { metadata: None, items: vec![bytes::Bytes::new()], })),
        ("core-v1", "PodCondition", "status", "string", tag_of(WirePodCondition { status: b(), ..Default::default() })),
        ("core-v1", "PodCondition", "message", "string", tag_of(WirePodCondition { message: b(), ..Default::default() })),
        ("meta-v1", "ObjectMeta", "name", "string", tag_of(WireNewMeta { name: s(), ..Default::default() })),
        ("meta-v1", "ObjectMeta", "namespace", "string", tag_of(WireNewMeta { namespace: s(), ..Default::default() })),
        ("meta-v1", "ObjectMeta", "resourceVersion", "string", tag_of(WireNewMeta { resource_version: s(), ..Default::default() })),
        ("meta-v1", "ObjectMeta", "annotations", "map<string, string>", tag_of(WireNewMeta { annotations: [(String::new(), String::new())].into(), ..Default::default() })),
        ("meta-v1", "Preconditions", "uid", "string", tag_of(WirePreconditions { uid: s(), resource_version: None, })),
        ("meta-v1", "Preconditions", "resourceVersion", "string", tag_of(WirePreconditions { uid: None, resource_version: s(), })),
        ("meta-v1", "DeleteOptions", "preconditions", "Preconditions", tag_of(WireDeleteOptions { preconditions: Some(WirePreconditions::default()), ..Default::default() })),
        ("meta-v1", "DeleteOptions", "gracePeriodSeconds", "int64", tag_of(WireDeleteOptions { grace_period_seconds: Some(0), ..Default::default() })),
        ("meta-v1", "DeleteOptions", "propagationPolicy", "string", tag_of(WireDeleteOptions { propagation_policy: s(), ..Default::default() })),
        ("meta-v1", "DeleteOptions", "dryRun", "string", tag_of(WireDeleteOptions { dry_run: vec![String::new()], ..Default::default() })),
        ("policy-v1", "Eviction", "metadata", "ObjectMeta", tag_of(WireEviction { metadata: Some(WireNewMeta::default()), delete_options: None, })),
        ("policy-v1", "Eviction", "deleteOptions", "DeleteOptions", tag_of(WireEviction { metadata: None, delete_options: Some(WireDeleteOptions::default()), })),
        ("core-v1", "ObjectReference", "kind", "string", tag_of(WireObjectReference { kind: s(), ..Default::default() })),
        ("core-v1", "ObjectReference", "namespace", "string", tag_of(WireObjectReference { namespace: s(), ..Default::default() })),
        ("core-v1", "ObjectReference", "name", "string", tag_of(WireObjectReference { name: s(), ..Default::default() })),
        ("core-v1", "ObjectReference", "uid", "string", tag_of(WireObjectReference { uid: s(), ..Default::default() })),
        ("core-v1", "ObjectReference", "apiVersion", "string", tag_of(WireObjectReference { api_version: s(), ..Default::default() })),
        ("core-v1", "ObjectReference", "resourceVersion", "string", tag_of(WireObjectReference { resource_version: s(), ..Default::default() })),
        ("core-v1", "ObjectReference", "fieldPath", "string", tag_of(WireObjectReference { field_path: s(), ..Default::default() })),
        ("core-v1", "EventSource", "component", "string", tag_of(WireEventSource { component: s(), host: None, })),
        ("core-v1", "EventSource", "host", "string", tag_of(WireEventSource { component: None, host: s(), })),
        ("core-v1", "Event", "metadata", "ObjectMeta", tag_of(WireEvent { metadata: Some(WireNewMeta::default()), ..Default::default() })),
        ("core-v1", "Event", "involvedObject", "ObjectReference", tag_of(WireEvent { involved_object: Some(WireObjectReference::default()), ..Default::default() })),
        ("core-v1", "Event", "reason", "string", tag_of(WireEvent { reason: s(), ..Default::default() })),
        ("core-v1", "Event", "message", "string", tag_of(WireEvent { message: s(), ..Default::default() })),
        ("core-v1", "Event", "source", "EventSource", tag_of(WireEvent { source: Some(WireEventSource::default()), ..Default::default() })),
        ("core-v1", "Event", "firstTimestamp", "Time", tag_of(WireEvent { first_timestamp: t(), ..Default::default() })),
        ("core-v1", "Event", "lastTimestamp", "Time", tag_of(WireEvent { last_timestamp: t(), ..Default::default() })),
        ("core-v1", "Event", "count", "int32", tag_of(WireEvent { count: Some(0), ..Default::default() })),
        ("core-v1", "Event", "type", "string", tag_of(WireEvent { r#type: s(), ..Default::default() })),
        ("core-v1", "Event", "eventTime", "MicroTime", tag_of(WireEvent { event_time: t(), ..Default::default() })),
        ("core-v1", "Event", "reportingComponent", "string", tag_of(WireEvent { reporting_component: s(), ..Default::default() })),
        ("core-v1", "Event", "reportingInstance", "string", tag_of(WireEvent { reporting_instance: s(), ..Default::default() })),
    ];
    let mut wrong = Vec::new();
    for (file, message, field, ty, ours) in checks {
        let ours = ours.with_context(|| format!("{message}.{field}"))?;
        let Some((upstream_ty, number)) = files[file].get(message).and_then(|m| m.get(field))
        else {
            wrong.push(format!("{file}.proto has no {message}.{field}"));
            continue;
        };
        let last = upstream_ty.rsplit('.').next().unwrap_or(upstream_ty);
        if *number != ours || last != ty {
            wrong.push(format!(
                "{message}.{field}: upstream {upstream_ty} = {number}, ours {ty} = {ours}"
            ));
        }
    }
    ensure!(
        wrong.is_empty(),
        "field numbers or types differ:\n{}",
        wrong.join("\n")
    );
    // The parser itself reads: a known field of a message we do not decode.
    ensure!(
        files["core-v1"]["Container"]["image"].1 == 2,
        "the .proto parser misread Container.image"
    );
    Ok(())
}

// ---- both formats against the real server ----------------------------------------------------

/// What each request asked for and what came back.
#[derive(Clone, Debug)]
struct Seen {
    watch: bool,
    /// A streaming list's watch (`sendInitialEvents=true`).
    initial_events: bool,
    accept: String,
    status: u16,
    content_type: String,
}

/// A client that sends through `real`, recording each exchange; with `refuse_protobuf`, a
/// request that accepts protobuf is answered `406 Not Acceptable` instead (a real API server
/// serves protobuf for pods and nodes, so only a stand-in can refuse it).
fn recording(real: Client, refuse_protobuf: bool) -> (Client, Arc<Mutex<Vec<Seen>>>) {
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let log = seen.clone();
    let service = tower::service_fn(move |req: Request<Body>| {
        let real = real.clone();
        let log = log.clone();
        async move {
            let accept = req
                .headers()
                .get(http::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let query = req.uri().query().unwrap_or_default();
            let watch = query.contains("watch=true");
            let initial_events = query.contains("sendInitialEvents=true");
            let response = if refuse_protobuf && accept.contains("protobuf") {
                http::Response::builder()
                    .status(406)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Body::from(
                        br#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotAcceptable","code":406}"#.to_vec(),
                    ))
                    .map_err(|e| kube::Error::Service(e.into()))?
            } else {
                real.send(req).await?
            };
            let content_type = response
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            if let Ok(mut log) = log.lock() {
                log.push(Seen {
                    watch,
                    initial_events,
                    accept,
                    status: response.status().as_u16(),
                    content_type,
                });
            }
            Ok::<_, kube::Error>(response)
        }
    });
    (Client::new(service, "default"), seen)
}

/// An event as the comparison sees it: its kind and its object.
#[derive(Clone, Debug, PartialEq)]
enum Seen2<K> {
    Init,
    InitApply(K),
    InitDone,
    Apply(K),
    Delete(K),
}

async fn next<K>(
    stream: &mut (impl Stream<Item = Result<Event<K>, listwatch::Error>> + Unpin),
) -> Result<Seen2<K>> {
    let event = tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .context("no event within 30 s")?
        .ok_or_else(|| anyhow!("the list-watch ended"))?
        .context("the list-watch failed")?;
    Ok(match event {
        Event::Init => Seen2::Init,
        Event::InitApply(o) => Seen2::InitApply(o),
        Event::InitDone => Seen2::InitDone,
        Event::Apply(o) => Seen2::Apply(o),
        Event::Delete(o) => Seen2::Delete(o),
    })
}

/// Events up to and including `InitDone`.
async fn listed<K>(
    stream: &mut (impl Stream<Item = Result<Event<K>, listwatch::Error>> + Unpin),
) -> Result<Vec<Seen2<K>>> {
    let mut out = Vec::new();
    loop {
        let e = next(stream).await?;
        let done = matches!(e, Seen2::InitDone);
        out.push(e);
        if done {
            return Ok(out);
        }
    }
}

/// The watch after a listing goes on: a pod created now arrives as an `Apply`.
async fn sees_a_late_pod(
    pods: &mut (impl Stream<Item = Result<Event<SlimPod>, listwatch::Error>> + Unpin),
    ns: &TestNamespace,
    node: &str,
) -> Result<()> {
    ns.create_pod(&pod("late", node, vec![], Some(0))).await?;
    match next(pods).await? {
        Seen2::Apply(p) if p.metadata.name.as_deref() == Some("late") => Ok(()),
        other => bail!("expected the new pod, got {other:?}"),
    }
}

fn config(
    path: &str,
    labels: Option<String>,
    fields: Option<String>,
    ct: ContentType,
) -> listwatch::Config {
    listwatch::Config {
        path: path.into(),
        // Small pages, so that paging with `continue` is part of what is compared.
        page_size: 2,
        labels,
        fields,
        content_type: ct,
        timeout_secs: 290,
        initial: listwatch::InitialList::Pages,
    }
}

/// A namespace with a node and the pods `p0`…, bound to it; the node's name.
async fn with_pods(admin: &Client, name: &str, pods: usize) -> Result<(TestNamespace, String)> {
    let ns = TestNamespace::create(admin, name).await?;
    let node = ns.create_node("n", vec![]).await?;
    for i in 0..pods {
        ns.create_pod(&pod(&format!("p{i}"), &node, vec![], Some(0)))
            .await?;
    }
    Ok((ns, node))
}

/// A client through `real`, except that each request whose query contains `picked` is
/// counted and answered by `answer`, given the real server's answer (a stand-in for answers a
/// real server gives only under load, or never).
fn intercepting<F, Fut>(real: Client, picked: &'static str, answer: F) -> (Client, Arc<AtomicUsize>)
where
    F: Fn(http::Response<Body>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<http::Response<Body>, kube::Error>> + Send + 'static,
{
    let count = Arc::new(AtomicUsize::new(0));
    let counter = count.clone();
    let service = tower::service_fn(move |req: Request<Body>| {
        let (real, counter, answer) = (real.clone(), counter.clone(), answer.clone());
        async move {
            let is_picked = req.uri().query().unwrap_or_default().contains(picked);
            let response = real.send(req).await?;
            if !is_picked {
                return Ok(response);
            }
            counter.fetch_add(1, Ordering::SeqCst);
            answer(response).await
        }
    });
    (Client::new(service, "default"), count)
}

/// A `200` with a JSON body.
fn json_answer(body: String) -> Result<http::Response<Body>, kube::Error> {
    http::Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.into_bytes()))
        .map_err(|e| kube::Error::Service(e.into()))
}

/// The same, read by a streaming list (`sendInitialEvents`) instead of pages.
fn streaming(config: listwatch::Config) -> listwatch::Config {
    listwatch::Config {
        initial: listwatch::InitialList::Stream,
        ..config
    }
}

/// A listing as `Init`, the objects by name, `InitDone`: a streaming list need not give them
/// in a list's order.
fn by_name<K: kube::Resource + std::fmt::Debug>(
    listed: Vec<Seen2<K>>,
) -> Result<BTreeMap<String, K>> {
    let n = listed.len();
    let mut out = BTreeMap::new();
    for (i, e) in listed.into_iter().enumerate() {
        match e {
            Seen2::Init if i == 0 => {}
            Seen2::InitDone if i + 1 == n => {}
            Seen2::InitApply(o) => {
                let name = o.meta().name.clone().context("a listed object's name")?;
                ensure!(out.insert(name, o).is_none(), "an object listed twice");
            }
            other => bail!("at {i} of {n}: {other:?}"),
        }
    }
    Ok(out)
}

fn toleration(
    key: Option<&str>,
    op: &str,
    value: Option<&str>,
    effect: Option<&str>,
    seconds: Option<i64>,
) -> Toleration {
    Toleration {
        key: key.map(Into::into),
        operator: Some(op.into()),
        value: value.map(Into::into),
        effect: effect.map(Into::into),
        toleration_seconds: seconds,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_and_json_list_watches_observe_the_same_objects() -> Result<()> {
    let plane = plane()?;
    let admin = plane.admin_client().await?;
    let ns = TestNamespace::create(&admin, "proto-same").await?;
    let now = k8s_openapi::jiff::Timestamp::now();
    let tainted = ns
        .create_node(
            "tainted",
            vec![
                Taint {
                    key: "node.kubernetes.io/unreachable".into(),
                    value: None,
                    effect: "NoExecute".into(),
                    time_added: Some(MetaTime(now)),
                },
                Taint {
                    key: "dedicated".into(),
                    value: Some("gpu".into()),
                    effect: "NoSchedule".into(),
                    time_added: None,
                },
            ],
        )
        .await?;
    ns.create_node("clean", vec![]).await?;
    let tolerations = [
        toleration(
            Some("node.kubernetes.io/unreachable"),
            "Exists",
            None,
            Some("NoExecute"),
            Some(300),
        ),
        toleration(
            Some("dedicated"),
            "Equal",
            Some("gpu"),
            Some("NoSchedule"),
            None,
        ),
        toleration(None, "Exists", None, None, None),
        toleration(Some("k"), "Equal", Some("v"), Some("NoExecute"), Some(0)),
        toleration(Some("k2"), "Equal", None, Some("NoExecute"), Some(-5)),
    ];
    let release = noexecute_engine::pipeline::RELEASE_ANNOTATION;
    for i in 0..5 {
        let mut p = pod(&format!("p{i}"), &tainted, tolerations[..i].to_vec(), None);
        p.metadata.annotations = Some(BTreeMap::from([
            (
                "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                "{\"a\":1}".repeat(50),
            ),
            (release.to_string(), format!("release-{i}")),
        ]));
        if i == 3 {
            p.metadata.finalizers = Some(vec!["noexecute.test/hold".into()]);
        }
        ns.create_pod(&p).await?;
    }
    // A DisruptionTarget condition from a taint manager, and a phase.
    let status = PodStatus {
        phase: Some("Running".into()),
        conditions: Some(vec![PodCondition {
            type_: "DisruptionTarget".into(),
            status: "True".into(),
            reason: Some(TAINT_DISRUPTION_REASON.into()),
            message: Some("Taint manager: deleting due to NoExecute taint".into()),
            last_transition_time: Some(MetaTime(now)),
            ..PodCondition::default()
        }]),
        ..PodStatus::default()
    };
    let pods = ns.pods();
    pods.patch_status(
        "p2",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
    .context("setting p2's status")?;
    // A deletion timestamp: a bound pod is deleted gracefully, and p3's finalizer holds it.
    pods.delete("p3", &DeleteParams::default().grace_period(30))
        .await
        .context("deleting p3")?;

    // The namespace's own path, not a `metadata.namespace` field selector on all pods: with
    // that selector and `limit`, kube-apiserver 1.36 gives a continue token relative to the
    // namespace that the next page reads as relative to all pods, and serves page one again.
    let pods_path = format!("/api/v1/namespaces/{}/pods", ns.name);
    let pod_fields = Some("spec.nodeName!=".to_string());
    let node_labels = Some(ns.node_selector());
    let (pb_client, pb_seen) = recording(admin.clone(), false);
    let mut pb_pods = Box::pin(listwatch::list_watch::<SlimPod>(
        pb_client.clone(),
        config(&pods_path, None, pod_fields.clone(), ContentType::Protobuf),
    ));
    let mut pb_nodes = Box::pin(listwatch::list_watch::<SlimNode>(
        pb_client,
        config(
            "/api/v1/nodes",
            node_labels.clone(),
            None,
            ContentType::Protobuf,
        ),
    ));
    let mut json_pods = Box::pin(listwatch::list_watch::<SlimPod>(
        admin.clone(),
        config(&pods_path, None, pod_fields.clone(), ContentType::Json),
    ));
    let mut json_nodes = Box::pin(listwatch::list_watch::<SlimNode>(
        admin.clone(),
        config(
            "/api/v1/nodes",
            node_labels.clone(),
            None,
            ContentType::Json,
        ),
    ));

    // The same, each read by a streaming list: one watch, no list request.
    let (stream_client, stream_seen) = recording(admin.clone(), false);
    let mut streams = [ContentType::Protobuf, ContentType::Json].map(|ct| {
        (
            Box::pin(listwatch::list_watch::<SlimPod>(
                stream_client.clone(),
                streaming(config(&pods_path, None, pod_fields.clone(), ct)),
            )),
            Box::pin(listwatch::list_watch::<SlimNode>(
                stream_client.clone(),
                streaming(config("/api/v1/nodes", node_labels.clone(), None, ct)),
            )),
        )
    });

    let pb_listed = listed(&mut pb_pods).await?;
    let json_listed = listed(&mut json_pods).await?;
    ensure!(
        pb_listed.len() == 7,
        "Init, 5 pods, InitDone: {pb_listed:?}"
    );
    ensure!(
        pb_listed == json_listed,
        "the pods listed differ:\nprotobuf {pb_listed:#?}\njson {json_listed:#?}"
    );
    let pb_nodes_listed = listed(&mut pb_nodes).await?;
    ensure!(
        pb_nodes_listed.len() == 4,
        "Init, 2 nodes, InitDone: {pb_nodes_listed:?}"
    );
    ensure!(
        pb_nodes_listed == listed(&mut json_nodes).await?,
        "the nodes listed differ"
    );
    // A streaming list gives what pages give (the pages' objects checked field by field
    // below), in either format.
    let paged_pods = by_name(pb_listed.clone())?;
    let paged_nodes = by_name(pb_nodes_listed.clone())?;
    for (i, (pods, nodes)) in streams.iter_mut().enumerate() {
        let streamed = by_name(listed(pods).await?)?;
        ensure!(
            streamed == paged_pods,
            "stream {i}: the pods streamed differ from those paged:\n{streamed:#?}\n{paged_pods:#?}"
        );
        let streamed = by_name(listed(nodes).await?)?;
        ensure!(
            streamed == paged_nodes,
            "stream {i}: the nodes streamed differ from those paged: {streamed:#?}"
        );
    }

    // What the slim objects hold came through: the cases the formats write differently.
    let by_name = |name: &str| {
        pb_listed.iter().find_map(|e| match e {
            Seen2::InitApply(p) if p.metadata.name.as_deref() == Some(name) => Some(p.clone()),
            _ => None,
        })
    };
    let p4 = by_name("p4").ok_or_else(|| anyhow!("p4 not listed"))?;
    ensure!(
        p4.spec.tolerations == tolerations[..4],
        "p4's tolerations: {:?}",
        p4.spec.tolerations
    );
    let p2 = by_name("p2").ok_or_else(|| anyhow!("p2 not listed"))?;
    ensure!(
        p2.status
            .as_ref()
            .and_then(|s| s.taint_disruption.clone())
            .is_some(),
        "p2's DisruptionTarget condition was not read"
    );
    let p3 = by_name("p3").ok_or_else(|| anyhow!("p3 not listed"))?;
    ensure!(
        p3.metadata.deletion_timestamp.is_some(),
        "p3 has no deletionTimestamp"
    );
    ensure!(
        p3.metadata.annotations.as_ref().map(|a| a.len()) == Some(1),
        "of the annotations only the release annotation is kept: {:?}",
        p3.metadata.annotations
    );
    let taints = pb_nodes_listed
        .iter()
        .find_map(|e| match e {
            Seen2::InitApply(n) if n.metadata.name.as_deref() == Some(tainted.as_str()) => {
                Some(n.spec.taints.clone())
            }
            _ => None,
        })
        .ok_or_else(|| anyhow!("the tainted node was not listed"))?;
    ensure!(
        taints[0].time_added.as_ref().map(|t| t.0.as_second()) == Some(now.as_second()),
        "timeAdded: {taints:?}"
    );

    // Changes, as watch events: a taint, a label, a status, a deletion.
    noexecute_testkit::add_taint(
        &ns.nodes(),
        &ns.node_name("clean"),
        noexecute_testkit::no_execute("k", "v"),
    )
    .await?;
    pods.patch(
        "p0",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {"tier": "db"}}})),
    )
    .await?;
    pods.patch_status(
        "p1",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await?;
    pods.delete("p4", &DeleteParams::default().grace_period(0))
        .await?;
    // Up to p4's deletion (a deletion may come as an update first, then the delete).
    async fn until_p4_deleted(
        stream: &mut (impl Stream<Item = Result<Event<SlimPod>, listwatch::Error>> + Unpin),
    ) -> Result<Vec<Seen2<SlimPod>>> {
        let mut out = Vec::new();
        while out.len() < 8 {
            let e = next(stream).await?;
            let last = matches!(&e, Seen2::Delete(p) if p.metadata.name.as_deref() == Some("p4"));
            out.push(e);
            if last {
                return Ok(out);
            }
        }
        bail!("p4's deletion not seen in 8 events: {out:?}")
    }
    let pb_events = until_p4_deleted(&mut pb_pods).await?;
    let json_events = until_p4_deleted(&mut json_pods).await?;
    ensure!(
        pb_events.len() >= 3,
        "a label, a status and a deletion: {pb_events:?}"
    );
    ensure!(
        pb_events == json_events,
        "the pod watches differ:\nprotobuf {pb_events:#?}\njson {json_events:#?}"
    );
    let pb_node = next(&mut pb_nodes).await?;
    ensure!(
        pb_node == next(&mut json_nodes).await?,
        "the node watches differ"
    );
    // The streaming lists' watches go on from their end, with the same events.
    for (i, (pods, nodes)) in streams.iter_mut().enumerate() {
        let events = until_p4_deleted(pods).await?;
        ensure!(
            events == pb_events,
            "stream {i}: the pod watch differs:\n{events:#?}\n{pb_events:#?}"
        );
        ensure!(
            next(nodes).await? == pb_node,
            "stream {i}: the node watch differs"
        );
    }
    let seen = stream_seen.lock().map_err(|_| anyhow!("poisoned"))?.clone();
    ensure!(
        seen.len() == 4
            && seen
                .iter()
                .all(|s| s.watch && s.initial_events && s.status == 200),
        "one streaming watch for each, no list: {seen:?}"
    );
    ensure!(
        seen.iter()
            .filter(|s| s.content_type == proto::WATCH_MEDIA_TYPE)
            .count()
            == 2,
        "the protobuf streams in protobuf: {seen:?}"
    );

    // And protobuf is what was spoken.
    let seen = pb_seen.lock().map_err(|_| anyhow!("poisoned"))?.clone();
    ensure!(
        seen.iter().any(|s| !s.watch) && seen.iter().any(|s| s.watch),
        "{seen:?}"
    );
    for s in &seen {
        let want = if s.watch {
            proto::WATCH_MEDIA_TYPE
        } else {
            proto::MEDIA_TYPE
        };
        ensure!(
            s.status == 200 && s.content_type == want,
            "not protobuf: {s:?}"
        );
    }
    ns.cleanup().await?;
    pods.patch(
        "p3",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .context("releasing p3's finalizer")?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_protobuf_gets_json() -> Result<()> {
    let plane = plane()?;
    let admin = plane.admin_client().await?;
    let ns = TestNamespace::create(&admin, "proto-406").await?;
    let node = ns.create_node("n", vec![]).await?;
    for i in 0..3 {
        ns.create_pod(&pod(&format!("p{i}"), &node, vec![], Some(0)))
            .await?;
    }
    let (client, seen) = recording(admin.clone(), true);
    let mut pods = Box::pin(listwatch::list_watch::<SlimPod>(
        client,
        config(
            &format!("/api/v1/namespaces/{}/pods", ns.name),
            None,
            None,
            ContentType::Protobuf,
        ),
    ));
    let listed = listed(&mut pods).await?;
    ensure!(listed.len() == 5, "Init, 3 pods, InitDone: {listed:?}");
    sees_a_late_pod(&mut pods, &ns, &node).await?;
    let seen = seen.lock().map_err(|_| anyhow!("poisoned"))?.clone();
    // One refusal, then JSON only, for the list pages and the watch alike.
    ensure!(seen.first().map(|s| s.status) == Some(406), "{seen:?}");
    ensure!(
        seen.iter().filter(|s| s.status == 406).count() == 1,
        "protobuf was asked again after the refusal: {seen:?}"
    );
    for s in &seen[1..] {
        ensure!(
            s.accept == "application/json" && s.content_type.starts_with("application/json"),
            "{s:?}"
        );
    }
    ensure!(seen.iter().any(|s| s.watch), "no watch was made: {seen:?}");
    ns.cleanup().await?;
    Ok(())
}

/// A server with streaming lists off (`WatchList=false`; one that predates them refuses them
/// the same way, `422`) gets pages: one refused watch, then list pages and a watch from the
/// list, and no streaming list asked for again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_streaming_lists_gets_pages() -> Result<()> {
    let plane = Plane::up_with_env(
        "proto-no-watch-list",
        &[],
        &[(
            "NOEXECUTE_APISERVER_ARGS",
            "--feature-gates=WatchList=false",
        )],
    )?;
    let admin = plane.admin_client().await?;
    let (ns, node) = with_pods(&admin, "no-watch-list", 3).await?;
    let (client, seen) = recording(admin.clone(), false);
    let mut pods = Box::pin(listwatch::list_watch::<SlimPod>(
        client,
        streaming(config(
            &format!("/api/v1/namespaces/{}/pods", ns.name),
            None,
            None,
            ContentType::Protobuf,
        )),
    ));
    let listed = by_name(listed(&mut pods).await?)?;
    ensure!(
        listed.keys().eq(["p0", "p1", "p2"]),
        "the pods listed: {listed:?}"
    );
    sees_a_late_pod(&mut pods, &ns, &node).await?;
    let seen = seen.lock().map_err(|_| anyhow!("poisoned"))?.clone();
    let (refused, rest) = seen.split_first().context("no request")?;
    ensure!(
        refused.watch && refused.initial_events && refused.status == 422,
        "first a streaming list, refused: {seen:?}"
    );
    // Pages of 2: two list requests, then the watch from the list.
    ensure!(
        rest.len() == 3
            && rest[..2].iter().all(|s| !s.watch && s.status == 200)
            && rest[2].watch
            && !rest[2].initial_events,
        "then pages and a plain watch: {seen:?}"
    );
    ns.cleanup().await?;
    plane.down()?;
    Ok(())
}

/// A streaming list that ends cleanly before its initial events do (the watch's timeout came
/// first: the list is too long to stream in one) is not asked for again: pages from then on.
/// The real server's first streaming answer is ended after its first event by a stand-in (a
/// real server ends a watch early only at its timeout, which a few objects never reach).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_list_cut_before_its_end_falls_back_to_pages() -> Result<()> {
    let plane = plane()?;
    let admin = plane.admin_client().await?;
    let (ns, node) = with_pods(&admin, "proto-cut", 3).await?;
    // The server's first event (a length-prefixed protobuf frame), then a clean end.
    let (client, cut) = intercepting(admin.clone(), "sendInitialEvents=true", |response| async {
        let (parts, mut body) = response.into_parts();
        let mut read = Vec::new();
        let whole = |read: &[u8]| {
            read.first_chunk::<4>()
                .map(|len| 4 + u32::from_be_bytes(*len) as usize)
                .filter(|&n| read.len() >= n)
        };
        let first = loop {
            if let Some(n) = whole(&read) {
                break read[..n].to_vec();
            }
            match http_body_util::BodyExt::frame(&mut body).await {
                Some(Ok(f)) => read.extend_from_slice(&f.into_data().unwrap_or_default()),
                _ => break Vec::new(),
            }
        };
        Ok(http::Response::from_parts(parts, Body::from(first)))
    });
    let mut pods = Box::pin(listwatch::list_watch::<SlimPod>(
        client,
        streaming(config(
            &format!("/api/v1/namespaces/{}/pods", ns.name),
            None,
            None,
            ContentType::Protobuf,
        )),
    ));
    // The cut stream: Init, perhaps some pods, then the failure.
    let mut events = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), pods.next())
            .await
            .context("no event within 30 s")?
            .context("the list-watch ended")?;
        match event {
            Ok(Event::Init | Event::InitApply(_)) if events.len() < 5 => events.push(event),
            Err(listwatch::Error::StreamCut(_)) => break,
            other => bail!("expected the streaming list to be cut, got {other:?} after {events:?}"),
        }
    }
    // Then pages, and the watch from them.
    let listed = by_name(listed(&mut pods).await?)?;
    ensure!(
        listed.keys().eq(["p0", "p1", "p2"]),
        "the pods listed: {listed:?}"
    );
    sees_a_late_pod(&mut pods, &ns, &node).await?;
    ensure!(
        cut.load(Ordering::SeqCst) == 1,
        "a streaming list was asked for again after one was cut"
    );
    ns.cleanup().await?;
    Ok(())
}

/// A streaming list that the server fails with an ERROR event (here a `500`, as when etcd
/// cannot report its progress to the watch cache) is reported, and that listing goes on in
/// pages: not streamed again and again. The ERROR is a stand-in's (a real server sends it only
/// with an old etcd, or under load).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_list_failed_by_the_server_is_listed_in_pages() -> Result<()> {
    let plane = plane()?;
    let admin = plane.admin_client().await?;
    let (ns, _) = with_pods(&admin, "proto-500", 3).await?;
    let (client, failed) = intercepting(admin.clone(), "sendInitialEvents=true", |_| async {
        json_answer(format!(
            "{}\n",
            r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcd does not support RequestWatchProgress","reason":"InternalError","code":500}}"#
        ))
    });
    let mut pods = Box::pin(listwatch::list_watch::<SlimPod>(
        client,
        streaming(config(
            &format!("/api/v1/namespaces/{}/pods", ns.name),
            None,
            None,
            ContentType::Json,
        )),
    ));
    let mut failures = 0;
    let listed = loop {
        match tokio::time::timeout(Duration::from_secs(30), pods.next())
            .await
            .context("no event within 30 s")?
            .context("the list-watch ended")?
        {
            Ok(Event::Init) => {}
            Err(listwatch::Error::Watch(f)) if f.status().is_some_and(|(c, _)| c == 500) => {
                failures += 1;
                ensure!(
                    failures == 1,
                    "the failed streaming list was asked for again"
                );
            }
            Ok(Event::InitApply(p)) => {
                let mut rest = listed(&mut pods).await?;
                rest.insert(0, Seen2::InitApply(p));
                rest.insert(0, Seen2::Init);
                break by_name(rest)?;
            }
            other => bail!("expected the 500, then pages: {other:?}"),
        }
    };
    ensure!(
        listed.keys().eq(["p0", "p1", "p2"]),
        "the pods listed in pages: {listed:?}"
    );
    ensure!(
        failed.load(Ordering::SeqCst) == 1,
        "one streaming list asked for"
    );
    ns.cleanup().await?;
    Ok(())
}

/// An event that does not decode is reported and skipped: the watch goes on to the next
/// one, rather than starting again from before it (and reading it again, forever). The list
/// is the real server's; the watch's answer is a stand-in's (a real server sends only what
/// decodes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_that_does_not_decode_is_skipped() -> Result<()> {
    let plane = plane()?;
    let admin = plane.admin_client().await?;
    let (ns, _) = with_pods(&admin, "proto-poison", 1).await?;
    let ns_name = ns.name.clone();
    let (client, watches) = intercepting(admin.clone(), "watch=true", move |_| {
        let after = serde_json::json!({"type": "ADDED", "object": {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "after", "namespace": ns_name, "resourceVersion": "999999"},
            "spec": {"nodeName": "n"}}});
        async move {
            json_answer(format!(
                "{}\n{after}\n",
                r#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":5}}"#
            ))
        }
    });
    let mut pods = Box::pin(listwatch::list_watch::<SlimPod>(
        client,
        config(
            &format!("/api/v1/namespaces/{}/pods", ns.name),
            None,
            None,
            ContentType::Json,
        ),
    ));
    ensure!(listed(&mut pods).await?.len() == 3, "Init, p0, InitDone");
    let poison = tokio::time::timeout(Duration::from_secs(30), pods.next())
        .await
        .context("no event within 30 s")?
        .context("the list-watch ended")?;
    ensure!(
        matches!(poison, Err(listwatch::Error::Watch(_))),
        "the event that does not decode is reported: {poison:?}"
    );
    match next(&mut pods).await? {
        Seen2::Apply(p) if p.metadata.name.as_deref() == Some("after") => {}
        other => bail!("expected the event after it, got {other:?}"),
    }
    ensure!(
        watches.load(Ordering::SeqCst) == 1,
        "the watch was started again"
    );
    ns.cleanup().await?;
    Ok(())
}

/// The decoder on the server's own bytes: one pod, fetched in protobuf and in JSON.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_fetched_in_protobuf_decodes_as_its_json() -> Result<()> {
    let plane = plane()?;
    let admin = plane.admin_client().await?;
    let ns = TestNamespace::create(&admin, "proto-get").await?;
    let node = ns.create_node("n", vec![]).await?;
    let mut p = pod(
        "p",
        &node,
        vec![noexecute_testkit::tolerate("k", Some(60))],
        Some(0),
    );
    p.metadata.labels = Some(BTreeMap::from([("a".into(), "b".into())]));
    ns.create_pod(&p).await?;
    let path = format!("/api/v1/namespaces/{}/pods/p", ns.name);
    let get = |accept: &'static str| {
        Request::get(path.as_str())
            .header(http::header::ACCEPT, accept)
            .body(Vec::new())
    };
    let body = admin.send(get(proto::MEDIA_TYPE)?.map(Body::from)).await?;
    let ct = body
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    ensure!(ct == proto::MEDIA_TYPE, "content type {ct}");
    let (_, bytes) = answer(body).await?;
    let (kind, raw) = proto::unwrap(bytes)?;
    ensure!(kind == "Pod", "kind {kind}");
    let from_proto = SlimPod::from_proto(raw)?;
    let json = admin.request_text(get("application/json")?).await?;
    let from_json: SlimPod = serde_json::from_str(&json)?;
    ensure!(
        from_proto == from_json,
        "protobuf {from_proto:#?}\njson {from_json:#?}"
    );
    let full: Pod = serde_json::from_str(&json)?;
    ensure!(full.metadata.uid == from_proto.metadata.uid && from_proto.metadata.uid.is_some());
    ns.cleanup().await?;
    Ok(())
}

// ---- writes ------------------------------------------------------------------------------------

/// An attempt on `pod` in term 1.
fn attempt(
    pod: &Pod,
    node: &str,
    plan: noexecute_engine::pipeline::Plan,
) -> Result<noexecute_engine::pipeline::Attempt> {
    use noexecute_engine::pipeline::{Attempt, AttemptId};
    use noexecute_engine::{EvictionId, PodRef, Time, Uid};
    Ok(Attempt {
        id: AttemptId(1),
        pod: PodRef {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .context("a namespace")?
                .into(),
            name: pod.metadata.name.clone().context("a name")?.into(),
            uid: Uid::new(pod.metadata.uid.as_deref().context("a UID")?),
            node: Some(node.into()),
        },
        eviction: EvictionId(1),
        deadline: Time::from_millis(0),
        due_at: Time::from_millis(0),
        generation: pod.metadata.generation.unwrap_or(1),
        cause: None,
        device: None,
        plan,
        term: 1,
        announce: None,
    })
}

/// Carry out one attempt in protobuf over `client`; its result.
async fn execute(
    client: Client,
    a: noexecute_engine::pipeline::Attempt,
) -> Result<noexecute_engine::pipeline::AttemptResult> {
    use noexecute::controller::executor::{Control, Executor, ExecutorConfig};
    use noexecute::controller::{clock, lease, metrics, ratelimit};
    let mut registry = prometheus_client::registry::Registry::default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let exec = Executor::new(
        client,
        Arc::new(ratelimit::RateLimiter::new(100.0, 100)),
        lease::Leadership::always().0,
        tx,
        metrics::Metrics::new(&mut registry),
        clock::Clock::new(),
        ExecutorConfig {
            request_timeout: Duration::from_secs(10),
            node_read_ttl: Duration::from_secs(1),
            node_selector: None,
            content_type: ContentType::Protobuf,
        },
    );
    let cancel = tokio_util::sync::CancellationToken::new();
    exec.start(a, Control::new(cancel.clone(), cancel.child_token()));
    let report = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .context("no report within 30 s")?
        .context("the executor reported nothing")?;
    exec.drain().await;
    Ok(report.result)
}

/// A protobuf body sent as it is; the answer's status and (JSON) body.
/// A response's status and body.
async fn answer(response: http::Response<Body>) -> Result<(u16, bytes::Bytes)> {
    let status = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body())
        .await
        .map_err(|e| anyhow!("{e}"))?
        .to_bytes();
    Ok((status, bytes))
}

async fn send_protobuf(
    client: &Client,
    method: http::Method,
    path: &str,
    body: Vec<u8>,
) -> Result<(u16, String)> {
    let request = Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::CONTENT_TYPE, proto::MEDIA_TYPE)
        .header(http::header::ACCEPT, "application/json")
        .body(Body::from(body))?;
    let (status, bytes) = answer(client.send(request).await?).await?;
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// Delete options preconditioned on `uid`.
fn uid_precondition(uid: &str) -> DeleteParams {
    DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some(uid.into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// A JSON body POSTed as it is; the answer's status and body.
async fn send_json(client: &Client, path: &str, body: Vec<u8>) -> Result<(u16, String)> {
    let request = Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))?;
    let (status, bytes) = answer(client.send(request).await?).await?;
    Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// The executor's writes in protobuf against the real server: every request accepts
/// protobuf and is answered in it, the DELETE's options and the Eviction are protobuf bodies,
/// and each does what its JSON does: the condition is there, the pod is being deleted, and a
/// precondition on another UID is refused (so the server read the body's preconditions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_writes_in_protobuf_with_the_effect_of_json() -> Result<()> {
    use noexecute::controller::executor::{CONDITION_MESSAGE, CONDITION_REASON};
    use noexecute_engine::pipeline::{AttemptResult, Finish, Plan, StaleGuard};
    let plane = plane()?;
    let admin = plane.admin_client().await?;
    let ns = TestNamespace::create(&admin, "proto-exec").await?;
    let node = ns
        .create_node("n", vec![noexecute_testkit::no_execute("k", "")])
        .await?;
    // Held by a finalizer, so that what the writes did can be read afterwards.
    let mut created = BTreeMap::new();
    for name in ["two-requests", "careful", "evicted", "refused"] {
        let mut p = pod(name, &node, vec![], Some(30));
        p.metadata.finalizers = Some(vec!["noexecute.test/hold".into()]);
        created.insert(name, ns.create_pod(&p).await?);
    }
    let (client, seen) = recording(admin.clone(), false);
    let plans = [
        ("two-requests", Plan::PatchThenDelete),
        (
            "careful",
            Plan::ReadFirst {
                guard: Some(StaleGuard::new(noexecute_engine::Config::default())),
                finish: Finish::Delete { fallback: false },
            },
        ),
        (
            "evicted",
            Plan::ReadFirst {
                guard: None,
                finish: Finish::Evict,
            },
        ),
    ];
    for (name, plan) in plans {
        let result = execute(client.clone(), attempt(&created[name], &node, plan)?).await?;
        ensure!(result == AttemptResult::Evicted, "{name}: {result:?}");
    }
    let pods = ns.pods();
    for name in ["two-requests", "careful", "evicted"] {
        let p = pods
            .get(name)
            .await
            .with_context(|| format!("reading {name}"))?;
        ensure!(
            p.metadata.deletion_timestamp.is_some(),
            "{name} is not being deleted"
        );
        let conditions = p.status.and_then(|s| s.conditions).unwrap_or_default();
        let want = if name == "evicted" {
            "EvictionByEvictionAPI"
        } else {
            CONDITION_REASON
        };
        ensure!(
            conditions.iter().any(|c| c.type_ == "DisruptionTarget"
                && c.reason.as_deref() == Some(want)
                && (name == "evicted" || c.message.as_deref() == Some(CONDITION_MESSAGE))),
            "{name}: no DisruptionTarget condition with reason {want}: {conditions:?}"
        );
    }
    let seen = seen.lock().map_err(|_| anyhow!("poisoned"))?.clone();
    // two-requests: PATCH, DELETE; careful: GET pod, GET node, PATCH, DELETE; evicted: GET, POST.
    ensure!(seen.len() == 8, "{seen:#?}");
    for s in &seen {
        ensure!(
            s.accept.starts_with(proto::MEDIA_TYPE)
                && (200..300).contains(&s.status)
                && s.content_type == proto::MEDIA_TYPE,
            "not protobuf: {s:?}"
        );
    }

    // Preconditions on another UID, in protobuf bodies: refused, the pod untouched.
    let refused = &created["refused"];
    let path = format!("/api/v1/namespaces/{}/pods/refused", ns.name);
    let (status, body) = send_protobuf(
        &admin,
        http::Method::DELETE,
        &path,
        proto::delete_options(&uid_precondition("not-its-uid")),
    )
    .await?;
    ensure!(
        status == 409 && body.contains("UID"),
        "DELETE with another UID: {status} {body}"
    );
    let (status, body) = send_protobuf(
        &admin,
        http::Method::POST,
        &format!("{path}/eviction"),
        proto::eviction(&ns.name, "refused", &uid_precondition("not-its-uid")),
    )
    .await?;
    ensure!(
        status == 409 && body.contains("UID"),
        "Eviction with another UID: {status} {body}"
    );
    // The same in JSON, as the executor sends it with --api-content-type json.
    let (status, body) = send_json(
        &admin,
        &format!("{path}/eviction"),
        noexecute::controller::executor::eviction_json(
            &ns.name,
            "refused",
            &uid_precondition("not-its-uid"),
        )?,
    )
    .await?;
    ensure!(
        status == 409 && body.contains("UID"),
        "JSON Eviction with another UID: {status} {body}"
    );
    let p = pods.get("refused").await?;
    ensure!(
        p.metadata.deletion_timestamp.is_none(),
        "a refused precondition deleted the pod"
    );
    // And with its own UID, the protobuf DELETE goes through.
    let (status, body) = send_protobuf(
        &admin,
        http::Method::DELETE,
        &path,
        proto::delete_options(&uid_precondition(
            refused.metadata.uid.as_deref().context("a UID")?,
        )),
    )
    .await?;
    ensure!(status == 200, "DELETE with its UID: {status} {body}");

    for name in created.keys() {
        pods.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await
        .with_context(|| format!("releasing {name}'s finalizer"))?;
    }
    ns.cleanup().await?;
    Ok(())
}

/// An Event created in protobuf reads back, in JSON, as the Event it was built from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_created_in_protobuf_is_the_event_built() -> Result<()> {
    use k8s_openapi::api::core::v1::{Event as K8sEvent, EventSource, ObjectReference};
    let plane = plane()?;
    let admin = plane.admin_client().await?;
    let ns = TestNamespace::create(&admin, "proto-event").await?;
    let stamp =
        MetaTime(k8s_openapi::jiff::Timestamp::now().round(k8s_openapi::jiff::Unit::Second)?);
    let event = K8sEvent {
        metadata: kube::api::ObjectMeta {
            name: Some("p.1a2b".into()),
            namespace: Some(ns.name.clone()),
            annotations: Some(BTreeMap::from([(
                "noexecute.io/lease".to_string(),
                "kube-system/noexecute".to_string(),
            )])),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some("p".into()),
            namespace: Some(ns.name.clone()),
            ..Default::default()
        },
        reason: Some("TaintManagerEviction".into()),
        message: Some(format!("Marking for deletion Pod {}/p", ns.name)),
        type_: Some("Normal".into()),
        source: Some(EventSource {
            component: Some("taint-eviction-controller".into()),
            host: None,
        }),
        count: Some(1),
        first_timestamp: Some(stamp.clone()),
        last_timestamp: Some(stamp),
        reporting_component: Some("taint-eviction-controller".into()),
        reporting_instance: Some("noexecute-0".into()),
        ..Default::default()
    };
    let path = format!("/api/v1/namespaces/{}/events", ns.name);
    let (status, body) =
        send_protobuf(&admin, http::Method::POST, &path, proto::event(&event)).await?;
    ensure!(status == 201, "creating the event: {status} {body}");
    let api: kube::Api<K8sEvent> = kube::Api::namespaced(admin.clone(), &ns.name);
    let mut back = api.get("p.1a2b").await?;
    // What the server adds.
    back.metadata = kube::api::ObjectMeta {
        name: back.metadata.name,
        namespace: back.metadata.namespace,
        annotations: back.metadata.annotations,
        ..Default::default()
    };
    ensure!(back == event, "sent {event:#?}\nread back {back:#?}");
    ns.cleanup().await?;
    Ok(())
}

/// The second-controller guard's Events list-watch: in protobuf it selects and observes the
/// same Events as in JSON, every field the guard reads included (`eventTime` to the
/// microsecond, the Lease annotation, the reporting component and instance, the source).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guards_event_list_watch_reads_protobuf_as_json() -> Result<()> {
    use k8s_openapi::api::core::v1::{Event as K8sEvent, EventSource, ObjectReference};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let plane = plane()?;
    let admin = plane.admin_client().await?;
    let ns = TestNamespace::create(&admin, "proto-guard").await?;
    let api: kube::Api<K8sEvent> = kube::Api::namespaced(admin.clone(), &ns.name);
    let stamp =
        MetaTime(k8s_openapi::jiff::Timestamp::now().round(k8s_openapi::jiff::Unit::Second)?);
    let micro =
        MicroTime(k8s_openapi::jiff::Timestamp::now().round(k8s_openapi::jiff::Unit::Microsecond)?);
    let event = |name: &str, reason: &str, lease: bool, event_time: bool| K8sEvent {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.name.clone()),
            annotations: lease.then(|| {
                BTreeMap::from([(
                    "noexecute.io/lease".to_string(),
                    "kube-system/noexecute".to_string(),
                )])
            }),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name.into()),
            namespace: Some(ns.name.clone()),
            uid: Some("0e4b8a1c-6f7d-4c55-9d8e-1a2b3c4d5e6f".into()),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(format!("Marking for deletion Pod {}/{name}", ns.name)),
        type_: Some("Normal".into()),
        source: Some(EventSource {
            component: Some("taint-eviction-controller".into()),
            host: Some("cp-0".into()),
        }),
        count: Some(3),
        first_timestamp: (!event_time).then(|| stamp.clone()),
        last_timestamp: (!event_time).then(|| stamp.clone()),
        event_time: event_time.then(|| micro.clone()),
        action: event_time.then(|| "Evict".to_string()),
        reporting_component: Some("taint-eviction-controller".into()),
        reporting_instance: Some("kcm-0".into()),
        ..Default::default()
    };
    api.create(
        &Default::default(),
        &event("a", "TaintManagerEviction", true, false),
    )
    .await?;
    api.create(
        &Default::default(),
        &event("b", "TaintManagerEviction", false, true),
    )
    .await?;
    api.create(&Default::default(), &event("c", "Scheduled", false, false))
        .await?;

    let path = format!("/api/v1/namespaces/{}/events", ns.name);
    let fields = Some("reason=TaintManagerEviction".to_string());
    let (pb_client, pb_seen) = recording(admin.clone(), false);
    let mut pb = listwatch::list_watch::<K8sEvent>(
        pb_client,
        config(&path, None, fields.clone(), ContentType::Protobuf),
    )
    .boxed();
    let mut json = listwatch::list_watch::<K8sEvent>(
        admin.clone(),
        config(&path, None, fields, ContentType::Json),
    )
    .boxed();
    // JSON carries what the guard does not read; protobuf decodes only what it does.
    let read = |e: &Seen2<K8sEvent>| -> Seen2<K8sEvent> {
        let keep = |e: &K8sEvent| K8sEvent {
            metadata: kube::api::ObjectMeta {
                name: e.metadata.name.clone(),
                namespace: e.metadata.namespace.clone(),
                resource_version: e.metadata.resource_version.clone(),
                annotations: e.metadata.annotations.clone(),
                ..Default::default()
            },
            action: None,
            ..e.clone()
        };
        match e {
            Seen2::Init => Seen2::Init,
            Seen2::InitApply(e) => Seen2::InitApply(keep(e)),
            Seen2::InitDone => Seen2::InitDone,
            Seen2::Apply(e) => Seen2::Apply(keep(e)),
            Seen2::Delete(e) => Seen2::Delete(keep(e)),
        }
    };
    let pb_listed = listed(&mut pb).await?;
    let json_listed: Vec<_> = listed(&mut json).await?.iter().map(read).collect();
    ensure!(
        pb_listed.len() == 4,
        "Init, the two TaintManagerEviction Events, InitDone: {pb_listed:#?}"
    );
    ensure!(
        pb_listed == json_listed,
        "the Events listed differ:\nprotobuf {pb_listed:#?}\njson {json_listed:#?}"
    );
    // As built, less what the server sets.
    for (name, lease, event_time) in [("a", true, false), ("b", false, true)] {
        let mut want = event(name, "TaintManagerEviction", lease, event_time);
        want.action = None;
        let got = pb_listed
            .iter()
            .find_map(|e| match e {
                Seen2::InitApply(e) if e.metadata.name.as_deref() == Some(name) => Some(e.clone()),
                _ => None,
            })
            .ok_or_else(|| anyhow!("{name} not listed"))?;
        want.metadata.resource_version = got.metadata.resource_version.clone();
        ensure!(got == want, "built {want:#?}\nread {got:#?}");
    }

    // A new Event arrives by the watch, the same in both.
    api.create(
        &Default::default(),
        &event("d", "TaintManagerEviction", true, true),
    )
    .await?;
    let pb_new = next(&mut pb).await?;
    ensure!(
        matches!(&pb_new, Seen2::Apply(e) if e.metadata.name.as_deref() == Some("d")),
        "{pb_new:#?}"
    );
    ensure!(
        pb_new == read(&next(&mut json).await?),
        "the Event watched differs"
    );
    let seen = pb_seen.lock().map_err(|_| anyhow!("poisoned"))?.clone();
    ensure!(
        seen.iter().any(|s| s.watch)
            && seen.iter().all(|s| s.status == 200
                && s.content_type
                    == if s.watch {
                        proto::WATCH_MEDIA_TYPE
                    } else {
                        proto::MEDIA_TYPE
                    }),
        "not protobuf: {seen:?}"
    );
    ns.cleanup().await?;
    Ok(())
}

// ---- the transport ---------------------------------------------------------------------------

/// A TCP forwarder to the API server of `config`: the config to reach the server through it,
/// and the count of connections it has accepted.
async fn counted(mut config: kube::Config) -> Result<(kube::Config, Arc<AtomicUsize>)> {
    let authority = config
        .cluster_url
        .authority()
        .context("the cluster URL has no host")?
        .to_string();
    let target = tokio::net::lookup_host(&authority)
        .await?
        .next()
        .with_context(|| format!("{authority} resolves to nothing"))?;
    let listener = tokio::net::TcpListener::bind((target.ip(), 0)).await?;
    let port = listener.local_addr()?.port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _closed = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    // The same host (the server's certificate names it), another port.
    let host = config
        .cluster_url
        .host()
        .context("the cluster URL has no host")?;
    config.cluster_url = format!("https://{host}:{port}").parse()?;
    Ok((config, accepted))
}

/// `GET path`: the status is a success, and the HTTP version it came back in.
async fn get_version(client: &Client, path: String) -> Result<http::Version> {
    let response = client.send(Request::get(path).body(Body::empty())?).await?;
    ensure!(response.status().is_success(), "{}", response.status());
    Ok(response.version())
}

/// Fires `n` `GET path` at once on `client`: every answer is a success in `version`.
async fn all_answer_in(
    client: &Client,
    path: &str,
    n: usize,
    version: http::Version,
) -> Result<()> {
    let answers =
        futures::future::join_all((0..n).map(|_| get_version(client, path.to_string()))).await;
    for answer in answers {
        assert_eq!(answer?, version);
    }
    Ok(())
}

/// The live controller's clients speak HTTP/2 to the API server, as client-go does: a watch
/// held open and 64 requests at once beside it take one connection, and the Lease's client
/// takes a second of its own. The control: with `--api-http-version=http1` the same clients
/// speak HTTP/1.1 and open a connection for each request in flight on the same server, as
/// kube's own client does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_clients_speak_http2_on_a_connection_each() -> Result<()> {
    let plane = plane()?;
    let admin = plane.admin_client().await?;
    let ns = TestNamespace::create(&admin, "proto-h2").await?;
    let config = noexecute::adapters::client::config(Some(&plane.kubeconfig), None).await?;
    let pods_path = format!(
        "/api/v1/pods?limit=1&fieldSelector=metadata.namespace%3D{}",
        ns.name
    );
    let lease_path = format!("/apis/coordination.k8s.io/v1/namespaces/{}/leases", ns.name);

    let (through, accepted) = counted(config.clone()).await?;
    let clients = noexecute::adapters::client::RunClients::new(
        through,
        noexecute::adapters::client::HttpVersion::Auto,
    )?;
    // Pods in every namespace, as the controller watches them.
    let pods: kube::Api<Pod> = kube::Api::all(clients.api.clone());
    let in_ns = format!("metadata.namespace={}", ns.name);
    let mut watch = pods
        .watch(
            &kube::api::WatchParams::default().fields(&in_ns).timeout(60),
            "0",
        )
        .await?
        .boxed();
    all_answer_in(&clients.api, &pods_path, 64, http::Version::HTTP_2).await?;
    assert_eq!(
        get_version(&clients.lease, lease_path.clone()).await?,
        http::Version::HTTP_2
    );
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "connections: the API's and the Lease's"
    );
    // The watch still works beside them: it sees a pod created after the 64.
    let node = ns.create_node("h2", vec![]).await?;
    ns.create_pod(&pod("after", &node, vec![], None)).await?;
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = watch.next().await {
            if let kube::api::WatchEvent::Added(p) = event?
                && p.metadata.name.as_deref() == Some("after")
            {
                return Ok::<_, anyhow::Error>(true);
            }
        }
        Ok(false)
    })
    .await
    .context("the watch saw nothing within 30 s")??;
    ensure!(seen, "the watch ended before it saw the pod");

    // The control: the same clients held to HTTP/1.1, the same 64 requests at once.
    let (through, accepted) = counted(config).await?;
    let http1 = noexecute::adapters::client::RunClients::new(
        through,
        noexecute::adapters::client::HttpVersion::Http1,
    )?;
    all_answer_in(&http1.api, &pods_path, 64, http::Version::HTTP_11).await?;
    assert_eq!(
        get_version(&http1.lease, lease_path).await?,
        http::Version::HTTP_11
    );
    let opened = accepted.load(Ordering::SeqCst);
    assert!(
        opened > 2,
        "over HTTP/1.1 the API's client opened {opened} connections for 64 requests"
    );
    ns.cleanup().await
}
