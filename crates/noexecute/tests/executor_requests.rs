//! The executor's request sequences, against a request-level fake of the API server (in the
//! manner of kube-rs's controller-rs `fixtures.rs`): what each plan sends, in which order, with
//! which preconditions, and what stops it (the term's fence, a hold, a cancel). The fake only
//! answers what the test scripts; a request it does not expect fails the test. The real-API
//! tests stay the proof that a real server accepts these requests; this is the proof of the
//! sequence, for answers a real server cannot easily be made to give.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use noexecute::adapters::proto;
use noexecute::controller::executor::{Control, Executor, ExecutorConfig};
use noexecute::controller::format::ContentType;
use noexecute::controller::{clock, lease, metrics, ratelimit};
use noexecute_engine::pipeline::{Attempt, AttemptId, AttemptResult, Finish, Plan, StaleGuard};
use noexecute_engine::{EvictionId, PodRef, Time, Uid};
use tokio_util::sync::CancellationToken;

/// One request as the fake saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    body: String,
    raw: Vec<u8>,
    accept: String,
    content_type: String,
}

/// What the fake answers, in order; anything more is a 599 and a failed test.
#[derive(Default)]
struct Script {
    answers: VecDeque<(u16, serde_json::Value)>,
    seen: Vec<Seen>,
}

fn fake(answers: Vec<(u16, serde_json::Value)>) -> (kube::Client, Arc<Mutex<Script>>) {
    let script = Arc::new(Mutex::new(Script {
        answers: answers.into(),
        seen: Vec::new(),
    }));
    let state = script.clone();
    let service = tower::service_fn(move |req: Request<Body>| {
        let state = state.clone();
        async move {
            let method = req.method().to_string();
            let path = req
                .uri()
                .path_and_query()
                .map(|p| p.to_string())
                .unwrap_or_default();
            let header = |req: &Request<Body>, name: &str| {
                req.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string()
            };
            let (accept, content_type) = (header(&req, "accept"), header(&req, "content-type"));
            let bytes = http_body_util::BodyExt::collect(req.into_body())
                .await
                .map(|b| b.to_bytes().to_vec())
                .unwrap_or_default();
            let mut s = state.lock().unwrap();
            s.seen.push(Seen {
                method,
                path,
                body: String::from_utf8_lossy(&bytes).into_owned(),
                raw: bytes,
                accept,
                content_type,
            });
            let (code, body) = s
                .answers
                .pop_front()
                .unwrap_or((599, serde_json::json!({"unexpected": true})));
            let response = Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap();
            Ok::<_, Infallible>(response)
        }
    });
    (kube::Client::new(service, "default"), script)
}

fn pod_json(uid: &str, rv: &str, terminating: bool) -> serde_json::Value {
    let mut meta = serde_json::json!({
        "name": "p", "namespace": "ns", "uid": uid, "resourceVersion": rv
    });
    if terminating {
        meta["deletionTimestamp"] = serde_json::json!("2026-12-01T00:00:00Z");
    }
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": meta,
        "spec": {"nodeName": "n", "containers": [], "tolerations": [
            {"key": "b", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}
        ]},
        "status": {"phase": "Running"}
    })
}

fn node_json(taint: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
        "spec": {"taints": [{"key": taint, "effect": "NoExecute"}]}
    })
}

fn status(code: u16, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Status", "status": "Failure",
        "code": code, "reason": reason, "message": message
    })
}

fn attempt(plan: Plan, term: u64) -> Attempt {
    Attempt {
        id: AttemptId(1),
        pod: PodRef {
            namespace: "ns".into(),
            name: "p".into(),
            uid: Uid::new("u1"),
            node: Some("n".into()),
        },
        eviction: EvictionId(1),
        deadline: Time::from_millis(0),
        due_at: Time::from_millis(0),
        generation: 2,
        cause: None,
        device: None,
        plan,
        term,
        announce: None,
    }
}

/// Run one attempt on an executor over `client`, leading in `leadership`; its report.
async fn run(
    client: kube::Client,
    leadership: lease::Leadership,
    a: Attempt,
    control: impl FnOnce(&Control),
) -> AttemptResult {
    run_selecting(client, leadership, a, control, None).await
}

/// [`run`] in protobuf.
async fn run_in_protobuf(
    client: kube::Client,
    leadership: lease::Leadership,
    a: Attempt,
) -> AttemptResult {
    run_with(client, leadership, a, |_| {}, None, ContentType::Protobuf).await
}

/// [`run`] with `--node-selector`. These tests speak JSON, whose bodies they read; one test
/// checks the protobuf bodies.
async fn run_selecting(
    client: kube::Client,
    leadership: lease::Leadership,
    a: Attempt,
    control: impl FnOnce(&Control),
    node_selector: Option<&str>,
) -> AttemptResult {
    run_with(
        client,
        leadership,
        a,
        control,
        node_selector,
        ContentType::Json,
    )
    .await
}

async fn run_with(
    client: kube::Client,
    leadership: lease::Leadership,
    a: Attempt,
    control: impl FnOnce(&Control),
    node_selector: Option<&str>,
    content_type: ContentType,
) -> AttemptResult {
    let mut registry = prometheus_client::registry::Registry::default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let exec = Executor::new(
        client,
        Arc::new(ratelimit::RateLimiter::new(1000.0, 100)),
        leadership,
        tx,
        metrics::Metrics::new(&mut registry),
        clock::Clock::new(),
        ExecutorConfig {
            request_timeout: Duration::from_secs(5),
            node_read_ttl: Duration::from_secs(1),
            node_selector: node_selector
                .map(|s| noexecute::adapters::selector::Selector::parse(s).expect("a selector")),
            content_type,
        },
    );
    let cancel = CancellationToken::new();
    let c = Control::new(cancel.clone(), cancel.child_token());
    control(&c);
    exec.start(a, c);
    let report = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a report in time")
        .expect("the executor reports");
    exec.drain().await;
    report.result
}

fn leading() -> lease::Leadership {
    lease::Leadership::always().0
}

#[tokio::test]
async fn the_usual_attempt_is_a_condition_patch_then_a_delete_preconditioned_on_its_answer() {
    let (client, script) = fake(vec![
        (200, pod_json("u1", "41", false)),
        (200, pod_json("u1", "42", true)),
    ]);
    let result = run(client, leading(), attempt(Plan::PatchThenDelete, 1), |_| {}).await;
    assert_eq!(result, AttemptResult::Evicted);
    let seen = script.lock().unwrap().seen.clone();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    assert_eq!(seen[0].method, "PATCH");
    assert!(
        seen[0]
            .path
            .starts_with("/api/v1/namespaces/ns/pods/p/status")
    );
    assert!(seen[0].body.contains("\"uid\":\"u1\""), "UID precondition");
    assert!(seen[0].body.contains("DeletionByTaintManager"));
    assert!(seen[0].body.contains("\"observedGeneration\":2"));
    assert_eq!(seen[1].method, "DELETE");
    assert!(seen[1].path.starts_with("/api/v1/namespaces/ns/pods/p"));
    assert!(
        seen[1].body.contains("\"resourceVersion\":\"41\"")
            && seen[1].body.contains("\"uid\":\"u1\""),
        "the DELETE is preconditioned on the patch's answer: {}",
        seen[1].body
    );
}

/// In protobuf, every request accepts protobuf first; the patch stays JSON (a patch has no
/// protobuf form) and the DELETE's options are a protobuf `DeleteOptions` with the same
/// preconditions. (That a real server reads them: `tests/proto.rs`.)
#[tokio::test]
async fn in_protobuf_the_delete_options_are_protobuf_with_the_same_preconditions() {
    use prost::Message;
    let (client, script) = fake(vec![
        (200, pod_json("u1", "41", false)),
        (200, pod_json("u1", "42", true)),
    ]);
    let result = run_in_protobuf(client, leading(), attempt(Plan::PatchThenDelete, 1)).await;
    assert_eq!(result, AttemptResult::Evicted);
    let seen = script.lock().unwrap().seen.clone();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    for s in &seen {
        assert!(
            s.accept
                .starts_with("application/vnd.kubernetes.protobuf, application/json"),
            "{s:?}"
        );
    }
    assert_eq!(
        seen[0].content_type,
        "application/strategic-merge-patch+json"
    );
    assert_eq!(seen[1].method, "DELETE");
    assert_eq!(seen[1].content_type, "application/vnd.kubernetes.protobuf");
    let raw = seen[1]
        .raw
        .strip_prefix(b"k8s\0".as_slice())
        .expect("the k8s prefix");
    let unknown = proto::Unknown::decode(raw).expect("an Unknown");
    let meta = unknown.type_meta.expect("a TypeMeta");
    assert_eq!(meta.kind.as_deref(), Some("DeleteOptions"));
    assert_eq!(meta.api_version.as_deref(), Some("meta.k8s.io/v1"));
    let options =
        proto::WireDeleteOptions::decode(unknown.raw.expect("the options")).expect("options");
    let preconditions = options.preconditions.expect("preconditions");
    assert_eq!(preconditions.uid.as_deref(), Some("u1"));
    assert_eq!(preconditions.resource_version.as_deref(), Some("41"));
}

/// A server (or a proxy) that refuses protobuf: a refused read is sent again at once in JSON;
/// a refused write is not (something in front of the server may have passed it on), it fails,
/// and the retry speaks JSON from its first request.
#[tokio::test]
async fn a_refusal_of_protobuf_resends_a_read_but_fails_a_write() {
    let refusal = || (406, status(406, "NotAcceptable", "only application/json"));
    let in_protobuf = |client, plan| {
        run_with(
            client,
            leading(),
            attempt(plan, 1),
            |_| {},
            None,
            ContentType::Protobuf,
        )
    };
    // A careful attempt: the GET is refused, then sent again; the rest goes in JSON.
    let (client, script) = fake(vec![
        refusal(),
        (200, pod_json("u1", "41", false)),
        (200, pod_json("u1", "42", false)),
        (200, pod_json("u1", "43", true)),
    ]);
    let plan = Plan::ReadFirst {
        guard: None,
        finish: Finish::Delete { fallback: false },
    };
    let result = in_protobuf(client, plan).await;
    assert_eq!(result, AttemptResult::Evicted);
    let seen = script.lock().unwrap().seen.clone();
    let methods: Vec<&str> = seen.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["GET", "GET", "PATCH", "DELETE"], "{seen:#?}");
    assert!(seen[0].accept.contains("protobuf"));
    for s in &seen[1..] {
        assert_eq!(s.accept, "application/json", "{s:?}");
    }
    assert_eq!(
        seen[3].content_type, "application/json",
        "a JSON DELETE body"
    );
    assert!(seen[3].body.contains("\"uid\":\"u1\""), "{}", seen[3].body);

    // The usual attempt: its PATCH is refused and not sent again; the attempt fails.
    let (client, script) = fake(vec![refusal()]);
    let result = in_protobuf(client, Plan::PatchThenDelete).await;
    assert!(matches!(result, AttemptResult::Failed { .. }), "{result:?}");
    assert_eq!(
        script.lock().unwrap().seen.len(),
        1,
        "a refused write is sent once"
    );

    // A 415 to a JSON body is about the body, not protobuf: no switch, no resend.
    let (client, script) = fake(vec![(
        415,
        status(415, "UnsupportedMediaType", "no such patch type"),
    )]);
    let result = in_protobuf(client, Plan::PatchThenDelete).await;
    assert!(matches!(result, AttemptResult::Failed { .. }), "{result:?}");
    assert_eq!(script.lock().unwrap().seen.len(), 1);
}

#[tokio::test]
async fn a_pod_changed_between_the_patch_and_the_delete_is_retried_not_deleted() {
    let (client, script) = fake(vec![
        (200, pod_json("u1", "41", false)),
        (409, status(409, "Conflict", "the object has been modified")),
    ]);
    let result = run(client, leading(), attempt(Plan::PatchThenDelete, 1), |_| {}).await;
    assert!(
        matches!(result, AttemptResult::Failed { refused: false, .. }),
        "{result:?}"
    );
    assert_eq!(script.lock().unwrap().seen.len(), 2);
}

#[tokio::test]
async fn the_stale_cache_guard_reads_the_pod_and_node_and_writes_nothing_when_stale() {
    // The node's fresh taint `b` is tolerated for 60 s: not "now".
    let (client, script) = fake(vec![
        (200, pod_json("u1", "41", false)),
        (200, node_json("b")),
    ]);
    let plan = Plan::ReadFirst {
        guard: Some(StaleGuard::new(noexecute_engine::Config::default())),
        finish: Finish::Delete { fallback: false },
    };
    let result = run(client, leading(), attempt(plan, 1), |_| {}).await;
    assert_eq!(result, AttemptResult::Stale);
    let seen = script.lock().unwrap().seen.clone();
    let methods: Vec<&str> = seen.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["GET", "GET"], "{seen:#?}");
    assert!(seen[1].path.starts_with("/api/v1/nodes/n"));
}

/// The fault soak's seed-3 finding: a node relabelled out of `--node-selector` while the
/// node watch relisted kept its taints in the cache; the guard's fresh read showed the new
/// label, and the pod was evicted anyway. A node that is another shard's now justifies nothing.
#[tokio::test]
async fn the_guard_drops_an_eviction_on_a_node_that_left_the_selector() {
    let mut node = node_json("a");
    node["metadata"]["labels"] = serde_json::json!({"example.com/unmanaged": "true"});
    let (client, script) = fake(vec![(200, pod_json("u1", "41", false)), (200, node)]);
    let plan = Plan::ReadFirst {
        guard: Some(StaleGuard::new(noexecute_engine::Config::default())),
        finish: Finish::Delete { fallback: false },
    };
    let result = run_selecting(
        client,
        leading(),
        attempt(plan, 1),
        |_| {},
        Some("!example.com/unmanaged"),
    )
    .await;
    assert_eq!(result, AttemptResult::Stale);
    let seen = script.lock().unwrap().seen.clone();
    let methods: Vec<&str> = seen.iter().map(|s| s.method.as_str()).collect();
    assert_eq!(methods, ["GET", "GET"], "{seen:#?}");
}

#[tokio::test]
async fn a_confirmed_guard_goes_on_to_patch_and_delete() {
    let (client, script) = fake(vec![
        (200, pod_json("u1", "41", false)),
        (200, node_json("a")),
        (200, pod_json("u1", "42", false)),
        (200, pod_json("u1", "43", true)),
    ]);
    let plan = Plan::ReadFirst {
        guard: Some(StaleGuard::new(noexecute_engine::Config::default())),
        finish: Finish::Delete { fallback: false },
    };
    let result = run(client, leading(), attempt(plan, 1), |_| {}).await;
    assert_eq!(result, AttemptResult::Evicted);
    let methods: Vec<String> = script
        .lock()
        .unwrap()
        .seen
        .iter()
        .map(|s| s.method.clone())
        .collect();
    assert_eq!(methods, ["GET", "GET", "PATCH", "DELETE"]);
}

#[tokio::test]
async fn an_attempt_of_an_ended_term_writes_nothing() {
    // Leading in term 1; the attempt belongs to term 7 (a term that ended).
    let (client, script) = fake(vec![(200, pod_json("u1", "41", false))]);
    let result = run(client, leading(), attempt(Plan::PatchThenDelete, 7), |_| {}).await;
    assert_eq!(result, AttemptResult::Cancelled);
    assert!(script.lock().unwrap().seen.is_empty(), "a write went out");
    // Not leading at all: the same.
    let (client, script) = fake(vec![(200, pod_json("u1", "41", false))]);
    let (standby, _writer) = lease::Leadership::new();
    let result = run(client, standby, attempt(Plan::PatchThenDelete, 1), |_| {}).await;
    assert_eq!(result, AttemptResult::Cancelled);
    assert!(script.lock().unwrap().seen.is_empty());
}

#[tokio::test]
async fn a_held_attempt_stops_before_its_first_write_but_may_read() {
    let (client, script) = fake(vec![(200, pod_json("u1", "41", false))]);
    let result = run(client, leading(), attempt(Plan::PatchThenDelete, 1), |c| {
        c.hold.cancel();
    })
    .await;
    assert_eq!(result, AttemptResult::Cancelled);
    assert!(script.lock().unwrap().seen.is_empty());
    // The careful plan reads first; held, it reads nothing more and writes nothing.
    let (client, script) = fake(vec![(200, pod_json("u1", "41", false))]);
    let plan = Plan::ReadFirst {
        guard: None,
        finish: Finish::Delete { fallback: false },
    };
    let result = run(client, leading(), attempt(plan, 1), |c| c.hold.cancel()).await;
    assert_eq!(result, AttemptResult::Cancelled);
    assert!(
        script
            .lock()
            .unwrap()
            .seen
            .iter()
            .all(|s| s.method == "GET"),
        "a held attempt wrote"
    );
}

#[tokio::test]
async fn a_replaced_or_terminating_pod_ends_the_attempt_without_a_delete() {
    let (client, script) = fake(vec![(200, pod_json("u2", "41", false))]);
    let result = run(client, leading(), attempt(Plan::PatchThenDelete, 1), |_| {}).await;
    assert_eq!(
        result,
        AttemptResult::Gone(noexecute_engine::pipeline::GoneReason::Replaced)
    );
    assert_eq!(script.lock().unwrap().seen.len(), 1);
    let (client, script) = fake(vec![(200, pod_json("u1", "41", true))]);
    let result = run(client, leading(), attempt(Plan::PatchThenDelete, 1), |_| {}).await;
    assert_eq!(
        result,
        AttemptResult::Gone(noexecute_engine::pipeline::GoneReason::Terminating)
    );
    assert_eq!(script.lock().unwrap().seen.len(), 1, "no second delete");
}

#[tokio::test]
async fn the_eviction_api_counts_a_budget_refusal_towards_the_pdb_timeout() {
    let (client, script) = fake(vec![
        (200, pod_json("u1", "41", false)),
        (
            429,
            status(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            ),
        ),
    ]);
    let plan = Plan::ReadFirst {
        guard: None,
        finish: Finish::Evict,
    };
    let result = run(client, leading(), attempt(plan, 1), |_| {}).await;
    assert!(
        matches!(result, AttemptResult::Failed { refused: true, .. }),
        "{result:?}"
    );
    let seen = script.lock().unwrap().seen.clone();
    assert_eq!(seen[1].method, "POST");
    assert!(
        seen[1]
            .path
            .starts_with("/api/v1/namespaces/ns/pods/p/eviction")
    );
    // The UID precondition where the API server reads it (kube-core's own Eviction body names
    // the field `delete_options`, which the server ignores: the precondition was lost).
    let body: serde_json::Value = serde_json::from_str(&seen[1].body).unwrap();
    assert_eq!(
        body["deleteOptions"]["preconditions"]["uid"], "u1",
        "{body}"
    );
    assert_eq!(body["kind"], "Eviction");
    assert_eq!(body["apiVersion"], "policy/v1");
    assert_eq!(body["metadata"]["name"], "p");
    assert_eq!(body["metadata"]["namespace"], "ns");
}

/// A fake that answers by method: the pod on GET, the patched pod on PATCH, the pod
/// terminating on DELETE; it records the order of requests.
fn fake_by_method() -> (kube::Client, Arc<Mutex<Vec<Seen>>>) {
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let state = seen.clone();
    let service = tower::service_fn(move |req: Request<Body>| {
        let state = state.clone();
        async move {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let body = match method.as_str() {
                "GET" => pod_json("u1", "41", false),
                "PATCH" => pod_json("u1", "42", false),
                _ => pod_json("u1", "43", true),
            };
            state.lock().unwrap().push(Seen {
                method,
                path,
                body: String::new(),
                raw: Vec::new(),
                accept: String::new(),
                content_type: String::new(),
            });
            let response = Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap();
            Ok::<_, Infallible>(response)
        }
    });
    (kube::Client::new(service, "default"), seen)
}

/// Under a backlog (three careful attempts at once, 10 requests a second, a burst of one),
/// each attempt's writes follow its read at once: it takes every token it may spend with the
/// GET. Taking them one request at a time, all three GETs went first, then the patches, and
/// each pod waited, marked, for its DELETE behind the others' requests.
#[tokio::test(start_paused = true)]
async fn a_careful_attempt_s_requests_go_back_to_back_under_a_backlog() {
    let (client, seen) = fake_by_method();
    let mut registry = prometheus_client::registry::Registry::default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let exec = Executor::new(
        client,
        Arc::new(ratelimit::RateLimiter::new(10.0, 1)),
        leading(),
        tx,
        metrics::Metrics::new(&mut registry),
        clock::Clock::new(),
        ExecutorConfig {
            request_timeout: Duration::from_secs(5),
            node_read_ttl: Duration::from_secs(1),
            node_selector: None,
            content_type: ContentType::Json,
        },
    );
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        let mut a = attempt(
            Plan::ReadFirst {
                guard: None,
                finish: Finish::Delete { fallback: false },
            },
            1,
        );
        a.id = AttemptId(i as u64 + 1);
        a.eviction = EvictionId(i as u64 + 1);
        a.pod.name = name.into();
        let cancel = CancellationToken::new();
        exec.start(a, Control::new(cancel.clone(), cancel.child_token()));
    }
    for _ in 0..3 {
        let report = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a report in time")
            .expect("the executor reports");
        assert_eq!(report.result, AttemptResult::Evicted);
    }
    exec.drain().await;
    let order: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| {
            let pod = s.path.rsplit('/').find(|p| *p != "status").unwrap_or("");
            format!("{} {pod}", s.method)
        })
        .collect();
    // Each pod's three requests together, in some order of pods.
    assert_eq!(order.len(), 9, "{order:?}");
    for chunk in order.chunks(3) {
        let pod = chunk[0].split(' ').nth(1).unwrap();
        assert_eq!(
            chunk,
            [
                format!("GET {pod}"),
                format!("PATCH {pod}"),
                format!("DELETE {pod}")
            ],
            "{order:?}"
        );
    }
}
