//! The API server's protobuf encoding of the objects taint eviction reads, decoded straight into
//! the slim objects (`crate::adapters::slim`), as the slim JSON decoder does for JSON.
//!
//! The messages below declare only the fields the slim objects keep, under the field numbers of
//! upstream's `generated.proto` (checked by `tests/proto.rs` against the files
//! `scripts/build-kube` takes from the Go module proxy). Every other field (managed fields,
//! owner references, containers, volumes, the node's status) is skipped by its length without
//! being read, and of the annotations only the key is looked at, without a copy: the input is
//! a [`Bytes`], so `bytes` fields are slices of it.
//!
//! Wire format (apimachinery's `runtime/serializer/protobuf`):
//! - a list or an object: the 4 bytes `k8s\0`, then a `runtime.Unknown` whose `raw` holds the
//!   object's message;
//! - a watch stream: frames of a 4-byte big-endian length, then a `metav1.WatchEvent` (no
//!   prefix); its `object.raw` holds the object as above, prefix and `Unknown` included.
//!
//! What protobuf carries and JSON does not is dropped, so that both formats give the same
//! observations: an empty string where JSON omits the field becomes `None`, a zero
//! `generation` becomes `None`, and times keep whole seconds (JSON's RFC 3339 has no
//! fractions; `metav1.Time` keeps nanoseconds in protobuf).

use std::collections::BTreeMap;

use bytes::{Buf, Bytes};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time as MetaTime};
use kube::api::DeleteParams;
use kube::core::ObjectMeta;
use prost::Message;

use super::slim::{self, Condition, ConditionsStatus, ExecPod, NoStatus, SlimNode, SlimPod};

/// The media type of protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The media type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// What starts every enveloped protobuf body.
pub const PREFIX: [u8; 4] = *b"k8s\0";

/// Why a protobuf body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("protobuf body does not start with the k8s\\0 prefix")]
    NoPrefix,
    #[error("{0} is read in JSON only, not protobuf")]
    JsonOnly(&'static str),
    #[error("protobuf {what}: {source}")]
    Message {
        what: &'static str,
        #[source]
        source: prost::DecodeError,
    },
    #[error("protobuf {what}: expected kind {expected}, got {got:?}")]
    Kind {
        what: &'static str,
        expected: &'static str,
        got: String,
    },
    #[error("protobuf {what}: {field} is not a valid time ({seconds} s)")]
    Time {
        what: &'static str,
        field: &'static str,
        seconds: i64,
    },
}

fn message<M: Message + Default>(what: &'static str, raw: Bytes) -> Result<M, DecodeError> {
    M::decode(raw).map_err(|source| DecodeError::Message { what, source })
}

// ---- runtime ----------------------------------------------------------------------------------

#[derive(Clone, PartialEq, Message)]
pub struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub kind: Option<String>,
}

/// `runtime.Unknown`: the envelope around every protobuf object and list.
#[derive(Clone, PartialEq, Message)]
pub struct Unknown {
    #[prost(message, optional, tag = "1")]
    pub type_meta: Option<TypeMeta>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    pub raw: Option<Bytes>,
    #[prost(string, optional, tag = "3")]
    pub content_encoding: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub content_type: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct RawExtension {
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub raw: Option<Bytes>,
}

// ---- meta/v1 ----------------------------------------------------------------------------------

#[derive(Clone, PartialEq, Message)]
pub struct Time {
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    pub nanos: Option<i32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ListMeta {
    #[prost(string, optional, tag = "2")]
    pub resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub r#continue: Option<String>,
}

/// One annotation, read as two slices of the input: only the key is compared, and only the
/// release annotation's value is copied.
#[derive(Clone, PartialEq, Message)]
pub struct StringEntry {
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub key: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    pub value: Option<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
pub struct WireObjectMeta {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    pub generation: Option<i64>,
    #[prost(message, optional, tag = "9")]
    pub deletion_timestamp: Option<Time>,
    #[prost(btree_map = "string, string", tag = "11")]
    pub labels: BTreeMap<String, String>,
    /// Map entries on the wire: a repeated message of key = 1, value = 2.
    #[prost(bytes = "bytes", repeated, tag = "12")]
    pub annotations: Vec<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
pub struct WatchEvent {
    #[prost(string, optional, tag = "1")]
    pub r#type: Option<String>,
    #[prost(message, optional, tag = "2")]
    pub object: Option<RawExtension>,
}

/// `metav1.Status`, as an ERROR watch event or an error response carries it.
#[derive(Clone, PartialEq, Message)]
pub struct Status {
    #[prost(string, optional, tag = "2")]
    pub status: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub reason: Option<String>,
    #[prost(int32, optional, tag = "6")]
    pub code: Option<i32>,
}

// ---- core/v1 ----------------------------------------------------------------------------------

#[derive(Clone, PartialEq, Message)]
pub struct WireToleration {
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub operator: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub value: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub effect: Option<String>,
    #[prost(int64, optional, tag = "5")]
    pub toleration_seconds: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
pub struct WirePodSpec {
    #[prost(string, optional, tag = "10")]
    pub node_name: Option<String>,
    #[prost(message, repeated, tag = "22")]
    pub tolerations: Vec<WireToleration>,
    #[prost(message, repeated, tag = "39")]
    pub resource_claims: Vec<WirePodResourceClaim>,
}

#[derive(Clone, PartialEq, Message)]
pub struct WirePodResourceClaim {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub resource_claim_name: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub resource_claim_template_name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct WirePodResourceClaimStatus {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub resource_claim_name: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
pub struct WirePodCondition {
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub r#type: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "2")]
    pub status: Option<Bytes>,
    #[prost(message, optional, tag = "4")]
    pub last_transition_time: Option<Time>,
    #[prost(bytes = "bytes", optional, tag = "5")]
    pub reason: Option<Bytes>,
    #[prost(bytes = "bytes", optional, tag = "6")]
    pub message: Option<Bytes>,
}

#[derive(Clone, PartialEq, Message)]
pub struct WirePodStatus {
    /// Bytes, read as UTF-8 with replacement: the API server does not check a status's
    /// strings, and JSON would carry invalid UTF-8 as U+FFFD rather than fail the pod.
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub phase: Option<Bytes>,
    #[prost(message, repeated, tag = "2")]
    pub conditions: Vec<WirePodCondition>,
    #[prost(message, repeated, tag = "15")]
    pub resource_claim_statuses: Vec<WirePodResourceClaimStatus>,
}

#[derive(Clone, PartialEq, Message)]
pub struct WirePod {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<WireObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<WirePodSpec>,
    #[prost(message, optional, tag = "3")]
    pub status: Option<WirePodStatus>,
}

#[derive(Clone, PartialEq, Message)]
pub struct WireTaint {
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub effect: Option<String>,
    #[prost(message, optional, tag = "4")]
    pub time_added: Option<Time>,
}

#[derive(Clone, PartialEq, Message)]
pub struct WireNodeSpec {
    #[prost(message, repeated, tag = "5")]
    pub taints: Vec<WireTaint>,
}

#[derive(Clone, PartialEq, Message)]
pub struct WireNode {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<WireObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<WireNodeSpec>,
}

/// `PodList` and `NodeList`: the items stay undecoded slices until [`Decode::from_proto`].
#[derive(Clone, PartialEq, Message)]
pub struct WireList {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ListMeta>,
    #[prost(bytes = "bytes", repeated, tag = "2")]
    pub items: Vec<Bytes>,
}

// ---- request bodies (encoded) -----------------------------------------------------------------

/// The metadata of an object created here (a name, a namespace, annotations), and of an Event
/// read (its resource version too).
#[derive(Clone, PartialEq, Message)]
pub struct WireNewMeta {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    #[prost(btree_map = "string, string", tag = "12")]
    pub annotations: BTreeMap<String, String>,
}

/// `metav1.Preconditions`.
#[derive(Clone, PartialEq, Message)]
pub struct WirePreconditions {
    #[prost(string, optional, tag = "1")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub resource_version: Option<String>,
}

/// `metav1.DeleteOptions`: what kube's `DeleteParams` can say.
#[derive(Clone, PartialEq, Message)]
pub struct WireDeleteOptions {
    #[prost(int64, optional, tag = "1")]
    pub grace_period_seconds: Option<i64>,
    #[prost(message, optional, tag = "2")]
    pub preconditions: Option<WirePreconditions>,
    #[prost(string, optional, tag = "4")]
    pub propagation_policy: Option<String>,
    #[prost(string, repeated, tag = "5")]
    pub dry_run: Vec<String>,
}

/// `policy/v1.Eviction`.
#[derive(Clone, PartialEq, Message)]
pub struct WireEviction {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<WireNewMeta>,
    #[prost(message, optional, tag = "2")]
    pub delete_options: Option<WireDeleteOptions>,
}

/// `core/v1.ObjectReference`.
#[derive(Clone, PartialEq, Message)]
pub struct WireObjectReference {
    #[prost(string, optional, tag = "1")]
    pub kind: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub field_path: Option<String>,
}

/// `core/v1.EventSource`.
#[derive(Clone, PartialEq, Message)]
pub struct WireEventSource {
    #[prost(string, optional, tag = "1")]
    pub component: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub host: Option<String>,
}

/// `core/v1.Event`, as the taint managers record them (no series, action or related object),
/// and as the second-controller guard reads them (`eventTime` too, which others may set).
#[derive(Clone, PartialEq, Message)]
pub struct WireEvent {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<WireNewMeta>,
    #[prost(message, optional, tag = "2")]
    pub involved_object: Option<WireObjectReference>,
    #[prost(string, optional, tag = "3")]
    pub reason: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub message: Option<String>,
    #[prost(message, optional, tag = "5")]
    pub source: Option<WireEventSource>,
    #[prost(message, optional, tag = "6")]
    pub first_timestamp: Option<Time>,
    #[prost(message, optional, tag = "7")]
    pub last_timestamp: Option<Time>,
    #[prost(int32, optional, tag = "8")]
    pub count: Option<i32>,
    #[prost(string, optional, tag = "9")]
    pub r#type: Option<String>,
    /// `MicroTime`, the same message as `Time`.
    #[prost(message, optional, tag = "10")]
    pub event_time: Option<Time>,
    #[prost(string, optional, tag = "14")]
    pub reporting_component: Option<String>,
    #[prost(string, optional, tag = "15")]
    pub reporting_instance: Option<String>,
}

/// An enveloped body: the prefix, then an `Unknown` naming the object's kind around its
/// message, as the API server reads a protobuf request body.
pub fn envelope(api_version: &str, kind: &str, object: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.to_string()),
            kind: Some(kind.to_string()),
        }),
        raw: Some(object.encode_to_vec().into()),
        content_encoding: None,
        content_type: None,
    };
    let mut out = Vec::with_capacity(PREFIX.len() + unknown.encoded_len());
    out.extend_from_slice(&PREFIX);
    out.extend_from_slice(&unknown.encode_to_vec());
    out
}

/// A DELETE's body: what its JSON (kube's `DeleteParams`) says.
pub fn delete_options(params: &DeleteParams) -> Vec<u8> {
    envelope(
        "meta.k8s.io/v1",
        "DeleteOptions",
        &delete_options_message(params),
    )
}

fn delete_options_message(params: &DeleteParams) -> WireDeleteOptions {
    WireDeleteOptions {
        grace_period_seconds: params.grace_period_seconds.map(i64::from),
        preconditions: params.preconditions.as_ref().map(|p| WirePreconditions {
            uid: p.uid.clone(),
            resource_version: p.resource_version.clone(),
        }),
        // `Orphan`, `Background` or `Foreground`, as its JSON names it.
        propagation_policy: params
            .propagation_policy
            .as_ref()
            .and_then(|p| serde_json::to_value(p).ok())
            .and_then(|v| v.as_str().map(str::to_string)),
        dry_run: if params.dry_run {
            vec!["All".to_string()]
        } else {
            Vec::new()
        },
    }
}

/// An Eviction of the named pod with these delete options.
pub fn eviction(namespace: &str, name: &str, options: &DeleteParams) -> Vec<u8> {
    envelope(
        "policy/v1",
        "Eviction",
        &WireEviction {
            metadata: Some(WireNewMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                resource_version: None,
                annotations: BTreeMap::new(),
            }),
            delete_options: Some(delete_options_message(options)),
        },
    )
}

fn wire_time(t: &MetaTime) -> Time {
    Time {
        seconds: Some(t.0.as_second()),
        nanos: Some(0),
    }
}

/// An Event's protobuf body, carrying what its JSON would (times in whole seconds, as JSON).
pub fn event(e: &core::Event) -> Vec<u8> {
    let meta = &e.metadata;
    let object = &e.involved_object;
    let source = e.source.as_ref();
    envelope(
        "v1",
        "Event",
        &WireEvent {
            metadata: Some(WireNewMeta {
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                resource_version: None,
                annotations: meta.annotations.clone().unwrap_or_default(),
            }),
            involved_object: Some(WireObjectReference {
                kind: object.kind.clone(),
                namespace: object.namespace.clone(),
                name: object.name.clone(),
                uid: object.uid.clone(),
                api_version: object.api_version.clone(),
                resource_version: object.resource_version.clone(),
                field_path: object.field_path.clone(),
            }),
            reason: e.reason.clone(),
            message: e.message.clone(),
            source: source.map(|s| WireEventSource {
                component: s.component.clone(),
                host: s.host.clone(),
            }),
            first_timestamp: e.first_timestamp.as_ref().map(wire_time),
            last_timestamp: e.last_timestamp.as_ref().map(wire_time),
            count: e.count,
            r#type: e.type_.clone(),
            event_time: e.event_time.as_ref().map(|t| Time {
                seconds: Some(t.0.as_second()),
                nanos: Some(t.0.subsec_nanosecond()),
            }),
            reporting_component: e.reporting_component.clone(),
            reporting_instance: e.reporting_instance.clone(),
        },
    )
}

// ---- the envelope -----------------------------------------------------------------------------

/// The `Unknown` inside an enveloped body: its kind and its object's bytes.
pub fn unwrap(mut body: Bytes) -> Result<(String, Bytes), DecodeError> {
    if !body.starts_with(&PREFIX) {
        return Err(DecodeError::NoPrefix);
    }
    body.advance(PREFIX.len());
    let unknown: Unknown = message("envelope", body)?;
    let kind = unknown.type_meta.and_then(|t| t.kind).unwrap_or_default();
    Ok((kind, unknown.raw.unwrap_or_default()))
}

/// The object in an enveloped body, checking its kind.
fn unwrap_kind(
    what: &'static str,
    expected: &'static str,
    body: Bytes,
) -> Result<Bytes, DecodeError> {
    let (kind, raw) = unwrap(body)?;
    if kind != expected {
        return Err(DecodeError::Kind {
            what,
            expected,
            got: kind,
        });
    }
    Ok(raw)
}

/// A list page: its items and its `ListMeta` (resource version, continue token).
pub struct Page<K> {
    pub items: Vec<K>,
    pub resource_version: Option<String>,
    pub continue_token: Option<String>,
}

/// A frame of a protobuf watch stream.
pub enum Frame<K> {
    Added(K),
    Modified(K),
    Deleted(K),
    /// A bookmark: its resource version, and whether it ends a watch's initial events
    /// (`sendInitialEvents`, the annotation `k8s.io/initial-events-end: "true"`).
    Bookmark {
        resource_version: String,
        initial_events_end: bool,
    },
    /// An ERROR event: the `Status` it carries.
    Error(StatusReport),
}

/// What an error `Status` says.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusReport {
    pub code: u16,
    pub reason: String,
    pub message: String,
}

impl From<Status> for StatusReport {
    fn from(s: Status) -> Self {
        StatusReport {
            code: s.code.and_then(|c| u16::try_from(c).ok()).unwrap_or(0),
            reason: s.reason.unwrap_or_default(),
            message: s.message.unwrap_or_default(),
        }
    }
}

/// A `Status` body (an error response in protobuf).
pub fn status(body: Bytes) -> Result<StatusReport, DecodeError> {
    let raw = unwrap_kind("error response", "Status", body)?;
    Ok(message::<Status>("Status", raw)?.into())
}

/// The slim objects protobuf decodes into.
pub trait Decode: Sized {
    /// The list kind (`PodList`), which the envelope of a list names.
    const LIST_KIND: &'static str;
    /// The object's message, without envelope.
    fn from_proto(raw: Bytes) -> Result<Self, DecodeError>;
    /// The resource version, from which a watch resumes.
    fn resource_version(&self) -> Option<&str>;
}

/// A list body: the envelope, then a list of `K`.
pub fn page<K: Decode>(body: Bytes) -> Result<Page<K>, DecodeError> {
    let raw = unwrap_kind("list", K::LIST_KIND, body)?;
    let list: WireList = message(K::LIST_KIND, raw)?;
    let meta = list.metadata.unwrap_or_default();
    Ok(Page {
        items: list
            .items
            .into_iter()
            .map(K::from_proto)
            .collect::<Result<_, _>>()?,
        resource_version: non_empty(meta.resource_version),
        continue_token: non_empty(meta.r#continue),
    })
}

/// An object body (a GET's or a write's answer): the envelope, then a `K`.
pub fn object<K: Decode>(body: Bytes) -> Result<K, DecodeError> {
    let kind = K::LIST_KIND.strip_suffix("List").unwrap_or(K::LIST_KIND);
    K::from_proto(unwrap_kind("object", kind, body)?)
}

/// The annotation of the bookmark that ends a watch's initial events.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// One watch frame's message (the 4-byte length already taken off).
pub fn frame<K: Decode>(frame: Bytes) -> Result<Frame<K>, DecodeError> {
    let event: WatchEvent = message("WatchEvent", frame)?;
    let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
    // The object is enveloped as a GET response is; a server that sent it bare is read too.
    let object = if raw.starts_with(&PREFIX) {
        unwrap(raw)?.1
    } else {
        raw
    };
    Ok(match event.r#type.as_deref().unwrap_or_default() {
        "ADDED" => Frame::Added(K::from_proto(object)?),
        "MODIFIED" => Frame::Modified(K::from_proto(object)?),
        "DELETED" => Frame::Deleted(K::from_proto(object)?),
        "BOOKMARK" => {
            let meta = message::<WireNode>("bookmark", object)?
                .metadata
                .unwrap_or_default();
            let mut initial_events_end = false;
            for entry in meta.annotations {
                let entry: StringEntry = message("annotation", entry)?;
                if entry.key.as_deref() == Some(INITIAL_EVENTS_END.as_bytes()) {
                    initial_events_end = entry.value.as_deref() == Some(b"true");
                }
            }
            Frame::Bookmark {
                resource_version: meta.resource_version.unwrap_or_default(),
                initial_events_end,
            }
        }
        "ERROR" => Frame::Error(message::<Status>("Status", object)?.into()),
        other => {
            return Err(DecodeError::Kind {
                what: "watch event",
                expected: "ADDED, MODIFIED, DELETED, BOOKMARK or ERROR",
                got: other.to_string(),
            });
        }
    })
}

// ---- into the slim objects --------------------------------------------------------------------

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// Go's zero `time.Time` (year 1), in Unix seconds.
const GO_ZERO_TIME: i64 = -62_135_596_800;

/// Whole seconds, as JSON carries them; `None` for a zero time, which Go writes as an empty
/// message in protobuf and as `null` in JSON.
fn time(what: &'static str, field: &'static str, t: Time) -> Result<Option<MetaTime>, DecodeError> {
    let seconds = match t.seconds {
        None if t.nanos.unwrap_or(0) == 0 => return Ok(None),
        Some(GO_ZERO_TIME) if t.nanos.unwrap_or(0) == 0 => return Ok(None),
        s => s.unwrap_or(0),
    };
    k8s_openapi::jiff::Timestamp::from_second(seconds)
        .map(|t| Some(MetaTime(t)))
        .map_err(|_| DecodeError::Time {
            what,
            field,
            seconds,
        })
}

fn meta(what: &'static str, m: Option<WireObjectMeta>) -> Result<Box<ObjectMeta>, DecodeError> {
    let Some(m) = m else {
        return Ok(Box::default());
    };
    let release = noexecute_engine::pipeline::RELEASE_ANNOTATION.as_bytes();
    let mut annotations = None;
    for entry in m.annotations {
        let entry: StringEntry = message("annotation", entry)?;
        if entry.key.as_deref() == Some(release) {
            let value = String::from_utf8_lossy(&entry.value.unwrap_or_default()).into_owned();
            annotations = Some(BTreeMap::from([(
                noexecute_engine::pipeline::RELEASE_ANNOTATION.to_string(),
                value,
            )]));
        }
    }
    Ok(Box::new(ObjectMeta {
        name: non_empty(m.name),
        namespace: non_empty(m.namespace),
        uid: non_empty(m.uid),
        resource_version: non_empty(m.resource_version),
        generation: m.generation.filter(|g| *g != 0),
        deletion_timestamp: match m.deletion_timestamp {
            Some(t) => time(what, "deletionTimestamp", t)?,
            None => None,
        },
        labels: (!m.labels.is_empty()).then_some(m.labels),
        annotations,
        ..ObjectMeta::default()
    }))
}

fn pod_spec(spec: WirePodSpec) -> slim::PodSpec {
    slim::PodSpec {
        node_name: non_empty(spec.node_name),
        tolerations: spec
            .tolerations
            .into_iter()
            .map(|t| core::Toleration {
                key: non_empty(t.key),
                operator: non_empty(t.operator),
                value: non_empty(t.value),
                effect: non_empty(t.effect),
                toleration_seconds: t.toleration_seconds,
            })
            .collect(),
        resource_claims: spec
            .resource_claims
            .into_iter()
            .map(|c| super::device::PodResourceClaim {
                name: c.name.unwrap_or_default(),
                resource_claim_name: non_empty(c.resource_claim_name),
                resource_claim_template_name: non_empty(c.resource_claim_template_name),
            })
            .collect(),
    }
}

/// A string read as UTF-8 with replacement (the API server does not check a status's strings).
fn lossy(b: Option<Bytes>) -> Option<String> {
    b.filter(|b| !b.is_empty())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

impl Decode for SlimPod {
    const LIST_KIND: &'static str = "PodList";

    fn from_proto(raw: Bytes) -> Result<Self, DecodeError> {
        let pod: WirePod = message("Pod", raw)?;
        let spec = pod.spec.unwrap_or_default();
        let status = pod.status.unwrap_or_default();
        // As the JSON decoder: the first matching condition with a time that reads.
        let taint_disruption = status.conditions.into_iter().find_map(|c| {
            (c.r#type.as_deref() == Some(b"DisruptionTarget".as_slice())
                && c.reason.as_deref().is_some_and(slim::is_taint_disruption))
            .then(|| time("Pod", "lastTransitionTime", c.last_transition_time?).ok()?)
            .flatten()
        });
        Ok(SlimPod {
            metadata: meta("Pod", pod.metadata)?,
            spec: pod_spec(spec),
            status: Some(slim::PodStatus {
                phase: status
                    .phase
                    .filter(|p| !p.is_empty())
                    .map(|p| String::from_utf8_lossy(&p).into_owned()),
                resource_claim_statuses: status
                    .resource_claim_statuses
                    .into_iter()
                    .map(|s| super::device::PodResourceClaimStatus {
                        name: s.name.unwrap_or_default(),
                        resource_claim_name: non_empty(s.resource_claim_name),
                    })
                    .collect(),
                taint_disruption,
            }),
        })
    }

    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
}

impl Decode for ExecPod {
    const LIST_KIND: &'static str = "PodList";

    fn from_proto(raw: Bytes) -> Result<Self, DecodeError> {
        let pod: WirePod = message("Pod", raw)?;
        let conditions = pod.status.unwrap_or_default().conditions;
        Ok(ExecPod {
            metadata: meta("Pod", pod.metadata)?,
            spec: pod_spec(pod.spec.unwrap_or_default()),
            status: Some(ConditionsStatus {
                conditions: conditions
                    .into_iter()
                    .map(|c| Condition {
                        type_: lossy(c.r#type).unwrap_or_default(),
                        status: lossy(c.status).unwrap_or_default(),
                        reason: lossy(c.reason),
                        message: lossy(c.message),
                    })
                    .collect(),
            }),
        })
    }

    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
}

impl Decode for SlimNode {
    const LIST_KIND: &'static str = "NodeList";

    fn from_proto(raw: Bytes) -> Result<Self, DecodeError> {
        let node: WireNode = message("Node", raw)?;
        Ok(SlimNode {
            metadata: meta("Node", node.metadata)?,
            spec: slim::NodeSpec {
                taints: node
                    .spec
                    .unwrap_or_default()
                    .taints
                    .into_iter()
                    .map(|t| {
                        Ok(core::Taint {
                            key: t.key.unwrap_or_default(),
                            value: non_empty(t.value),
                            effect: t.effect.unwrap_or_default(),
                            time_added: match t.time_added {
                                Some(a) => time("Node", "timeAdded", a)?,
                                None => None,
                            },
                        })
                    })
                    .collect::<Result<_, DecodeError>>()?,
            },
            status: Some(NoStatus {}),
        })
    }

    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
}

/// Events, for the second-controller guard: every field a taint manager's Event carries
/// (annotations whole: the guard reads the Lease one, and Events carry few).
impl Decode for core::Event {
    const LIST_KIND: &'static str = "EventList";

    fn from_proto(raw: Bytes) -> Result<Self, DecodeError> {
        let e: WireEvent = message("Event", raw)?;
        let meta = e.metadata.unwrap_or_default();
        let object = e.involved_object.unwrap_or_default();
        let stamp = |field, t: Option<Time>| match t {
            Some(t) => time("Event", field, t),
            None => Ok(None),
        };
        Ok(core::Event {
            metadata: ObjectMeta {
                name: non_empty(meta.name),
                namespace: non_empty(meta.namespace),
                resource_version: non_empty(meta.resource_version),
                annotations: Some(meta.annotations).filter(|a| !a.is_empty()),
                ..ObjectMeta::default()
            },
            involved_object: core::ObjectReference {
                kind: non_empty(object.kind),
                namespace: non_empty(object.namespace),
                name: non_empty(object.name),
                uid: non_empty(object.uid),
                api_version: non_empty(object.api_version),
                resource_version: non_empty(object.resource_version),
                field_path: non_empty(object.field_path),
            },
            reason: non_empty(e.reason),
            message: non_empty(e.message),
            source: e.source.map(|s| core::EventSource {
                component: non_empty(s.component),
                host: non_empty(s.host),
            }),
            first_timestamp: stamp("firstTimestamp", e.first_timestamp)?,
            last_timestamp: stamp("lastTimestamp", e.last_timestamp)?,
            count: e.count,
            type_: non_empty(e.r#type),
            event_time: match e.event_time {
                Some(t) => micro_time(t)?,
                None => None,
            },
            reporting_component: non_empty(e.reporting_component),
            reporting_instance: non_empty(e.reporting_instance),
            ..core::Event::default()
        })
    }

    fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
}

/// A `MicroTime`: as [`time`], with its fraction of a second.
fn micro_time(t: Time) -> Result<Option<MicroTime>, DecodeError> {
    let nanos = t.nanos.unwrap_or(0);
    let seconds = match t.seconds {
        None | Some(GO_ZERO_TIME) if nanos == 0 => return Ok(None),
        s => s.unwrap_or(0),
    };
    k8s_openapi::jiff::Timestamp::new(seconds, nanos)
        .map(|t| Some(MicroTime(t)))
        .map_err(|_| DecodeError::Time {
            what: "Event",
            field: "eventTime",
            seconds,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::slim::TAINT_DISRUPTION_REASON;

    type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

    fn enveloped(kind: &str, raw: Vec<u8>) -> Bytes {
        let unknown = Unknown {
            type_meta: Some(TypeMeta {
                api_version: Some("v1".into()),
                kind: Some(kind.into()),
            }),
            raw: Some(raw.into()),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        let mut body = PREFIX.to_vec();
        body.extend(unknown.encode_to_vec());
        body.into()
    }

    fn entry(key: &str, value: &str) -> Bytes {
        StringEntry {
            key: Some(Bytes::copy_from_slice(key.as_bytes())),
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
        }
        .encode_to_vec()
        .into()
    }

    fn seconds(s: i64, nanos: i32) -> Time {
        Time {
            seconds: Some(s),
            nanos: Some(nanos),
        }
    }

    /// As Go marshals a pod: every string written, empty or not.
    fn wire_pod(name: &str) -> WirePod {
        let release = noexecute_engine::pipeline::RELEASE_ANNOTATION;
        WirePod {
            metadata: Some(WireObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some("u-1".into()),
                resource_version: Some("42".into()),
                generation: Some(0),
                deletion_timestamp: Some(seconds(1_700_000_000, 999_999_999)),
                labels: BTreeMap::from([("app".into(), "web".into())]),
                annotations: vec![
                    entry("kubectl.kubernetes.io/last-applied-configuration", "{...}"),
                    entry(release, "2026-12-01T00:00:00Z"),
                ],
            }),
            spec: Some(WirePodSpec {
                node_name: Some("node-1".into()),
                tolerations: vec![
                    WireToleration {
                        key: Some("node.kubernetes.io/unreachable".into()),
                        operator: Some("Exists".into()),
                        value: Some(String::new()),
                        effect: Some("NoExecute".into()),
                        toleration_seconds: Some(300),
                    },
                    WireToleration {
                        key: Some(String::new()),
                        operator: Some("Exists".into()),
                        value: Some(String::new()),
                        effect: Some(String::new()),
                        toleration_seconds: None,
                    },
                ],
                resource_claims: vec![
                    WirePodResourceClaim {
                        name: Some("gpu".into()),
                        resource_claim_name: None,
                        resource_claim_template_name: Some("one-gpu".into()),
                    },
                    WirePodResourceClaim {
                        name: Some("shared".into()),
                        resource_claim_name: Some("fleet".into()),
                        resource_claim_template_name: None,
                    },
                ],
            }),
            status: Some(WirePodStatus {
                phase: Some(Bytes::from_static(b"Running")),
                resource_claim_statuses: vec![WirePodResourceClaimStatus {
                    name: Some("gpu".into()),
                    resource_claim_name: Some("pod-gpu-abc".into()),
                }],
                conditions: vec![
                    WirePodCondition {
                        r#type: Some(Bytes::from_static(b"Ready")),
                        last_transition_time: Some(seconds(1, 0)),
                        reason: Some(Bytes::new()),
                        status: Some(Bytes::from_static(b"True")),
                        message: None,
                    },
                    WirePodCondition {
                        r#type: Some(Bytes::from_static(b"DisruptionTarget")),
                        last_transition_time: Some(seconds(1_700_000_100, 5)),
                        reason: Some(Bytes::from_static(TAINT_DISRUPTION_REASON.as_bytes())),
                        status: Some(Bytes::from_static(b"True")),
                        message: Some(Bytes::from_static(
                            b"Taint manager: deleting due to NoExecute taint",
                        )),
                    },
                ],
            }),
        }
    }

    /// The same pod as the API server's JSON has it.
    fn json_pod(name: &str) -> R<SlimPod> {
        Ok(serde_json::from_value(json_pod_value(name))?)
    }

    fn json_pod_value(name: &str) -> serde_json::Value {
        let release = noexecute_engine::pipeline::RELEASE_ANNOTATION;
        serde_json::json!({
            "metadata": {
                "name": name, "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                "deletionTimestamp": "2023-11-14T22:13:20Z",
                "labels": {"app": "web"},
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{...}",
                    release: "2026-12-01T00:00:00Z"
                }
            },
            "spec": {"nodeName": "node-1", "containers": [], "tolerations": [
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
                {"operator": "Exists"}
            ], "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                {"name": "shared", "resourceClaimName": "fleet"}
            ]},
            "status": {"phase": "Running",
             "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "pod-gpu-abc"}],
             "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "1970-01-01T00:00:01Z"},
                {"type": "DisruptionTarget", "status": "True", "reason": TAINT_DISRUPTION_REASON,
                 "message": "Taint manager: deleting due to NoExecute taint",
                 "lastTransitionTime": "2023-11-14T22:15:00Z"}
            ]}
        })
    }

    /// Everything kube's `DeleteParams` can say reaches the protobuf body, not only the
    /// preconditions the executor sets today.
    #[test]
    fn delete_options_carry_all_of_delete_params() -> R {
        let params = DeleteParams {
            dry_run: true,
            grace_period_seconds: Some(5),
            propagation_policy: Some(kube::api::PropagationPolicy::Background),
            preconditions: Some(kube::api::Preconditions {
                uid: Some("u".into()),
                resource_version: Some("7".into()),
            }),
        };
        let (kind, raw) = unwrap(delete_options(&params).into())?;
        assert_eq!(kind, "DeleteOptions");
        let wire = WireDeleteOptions::decode(raw)?;
        assert_eq!(wire.grace_period_seconds, Some(5));
        assert_eq!(wire.propagation_policy.as_deref(), Some("Background"));
        assert_eq!(wire.dry_run, ["All"]);
        let p = wire.preconditions.ok_or("no preconditions")?;
        assert_eq!(
            (p.uid.as_deref(), p.resource_version.as_deref()),
            (Some("u"), Some("7"))
        );
        let (kind, raw) = unwrap(eviction("ns", "p", &params).into())?;
        assert_eq!(kind, "Eviction");
        let wire = WireEviction::decode(raw)?;
        let meta = wire.metadata.ok_or("no metadata")?;
        assert_eq!(
            (meta.namespace.as_deref(), meta.name.as_deref()),
            (Some("ns"), Some("p"))
        );
        assert_eq!(
            wire.delete_options.and_then(|o| o.grace_period_seconds),
            Some(5)
        );
        Ok(())
    }

    /// The executor's view of a pod (its conditions in full), from a GET's or a write's answer.
    #[test]
    fn the_executor_s_pod_decodes_to_what_its_json_gives() -> R {
        let body = enveloped("Pod", wire_pod("a").encode_to_vec());
        let from_proto: ExecPod = object(body.clone())?;
        let from_json: ExecPod = serde_json::from_value(json_pod_value("a"))?;
        assert_eq!(from_proto, from_json);
        let conditions = from_proto.status.map(|s| s.conditions).unwrap_or_default();
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[1].status, "True");
        assert!(conditions[1].message.is_some());
        assert!(
            matches!(object::<SlimNode>(body), Err(DecodeError::Kind { .. })),
            "a Pod is not a Node"
        );
        Ok(())
    }

    #[test]
    fn a_protobuf_pod_list_decodes_to_what_its_json_gives() -> R {
        let list = WireList {
            metadata: Some(ListMeta {
                resource_version: Some("77".into()),
                r#continue: Some(String::new()),
            }),
            items: vec![
                wire_pod("a").encode_to_vec().into(),
                wire_pod("b").encode_to_vec().into(),
            ],
        };
        let page: Page<SlimPod> = page(enveloped("PodList", list.encode_to_vec()))?;
        assert_eq!(page.resource_version.as_deref(), Some("77"));
        assert_eq!(
            page.continue_token, None,
            "an empty continue is no continue"
        );
        assert_eq!(page.items, vec![json_pod("a")?, json_pod("b")?]);
        Ok(())
    }

    #[test]
    fn a_node_keeps_its_taints_and_their_times_in_whole_seconds() -> R {
        let node = WireNode {
            metadata: Some(WireObjectMeta {
                name: Some("n".into()),
                resource_version: Some("5".into()),
                ..WireObjectMeta::default()
            }),
            spec: Some(WireNodeSpec {
                taints: vec![
                    WireTaint {
                        key: Some("k".into()),
                        value: Some(String::new()),
                        effect: Some("NoExecute".into()),
                        time_added: Some(seconds(1_700_000_000, 750_000_000)),
                    },
                    WireTaint {
                        key: Some("k2".into()),
                        value: Some("v".into()),
                        effect: Some("NoSchedule".into()),
                        time_added: None,
                    },
                ],
            }),
        };
        let got = SlimNode::from_proto(node.encode_to_vec().into())?;
        let want: SlimNode = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "resourceVersion": "5"},
            "spec": {"taints": [
                {"key": "k", "effect": "NoExecute", "timeAdded": "2023-11-14T22:13:20Z"},
                {"key": "k2", "value": "v", "effect": "NoSchedule"}
            ]},
            "status": {}
        }))?;
        assert_eq!(got, want);
        Ok(())
    }

    #[test]
    fn watch_frames_carry_enveloped_objects_bookmarks_and_errors() -> R {
        let frame_of = |kind: &str, object: Bytes| -> Bytes {
            WatchEvent {
                r#type: Some(kind.into()),
                object: Some(RawExtension { raw: Some(object) }),
            }
            .encode_to_vec()
            .into()
        };
        let pod = enveloped("Pod", wire_pod("a").encode_to_vec());
        assert!(matches!(
            frame::<SlimPod>(frame_of("MODIFIED", pod))?,
            Frame::Modified(p) if p == json_pod("a")?
        ));
        let bookmark = WirePod {
            metadata: Some(WireObjectMeta {
                resource_version: Some("99".into()),
                ..WireObjectMeta::default()
            }),
            ..WirePod::default()
        };
        let bookmark = enveloped("Pod", bookmark.encode_to_vec());
        assert!(matches!(
            frame::<SlimPod>(frame_of("BOOKMARK", bookmark))?,
            Frame::Bookmark { resource_version, initial_events_end: false } if resource_version == "99"
        ));
        // The bookmark that ends the initial events of a streaming list says so.
        let end = WirePod {
            metadata: Some(WireObjectMeta {
                resource_version: Some("100".into()),
                annotations: vec![
                    entry("k8s.io/initial-events-list-blueprint", "x"),
                    entry(INITIAL_EVENTS_END, "true"),
                ],
                ..WireObjectMeta::default()
            }),
            ..WirePod::default()
        };
        let end = enveloped("Pod", end.encode_to_vec());
        assert!(matches!(
            frame::<SlimPod>(frame_of("BOOKMARK", end))?,
            Frame::Bookmark { resource_version, initial_events_end: true } if resource_version == "100"
        ));
        let gone = Status {
            status: Some("Failure".into()),
            message: Some("too old resource version: 1 (5)".into()),
            reason: Some("Expired".into()),
            code: Some(410),
        };
        let gone = enveloped("Status", gone.encode_to_vec());
        assert!(matches!(
            frame::<SlimPod>(frame_of("ERROR", gone))?,
            Frame::Error(StatusReport { code: 410, .. })
        ));
        Ok(())
    }

    #[test]
    fn bad_bodies_are_named_errors_not_panics() -> R {
        assert!(matches!(
            page::<SlimPod>(Bytes::from_static(b"{\"kind\":\"PodList\"}")),
            Err(DecodeError::NoPrefix)
        ));
        assert!(matches!(
            page::<SlimPod>(enveloped("NodeList", Vec::new())),
            Err(DecodeError::Kind {
                expected: "PodList",
                ..
            })
        ));
        let mut truncated = wire_pod("a").encode_to_vec();
        truncated.truncate(truncated.len() / 2);
        let err = SlimPod::from_proto(truncated.into())
            .err()
            .ok_or("a truncated pod decoded")?;
        assert!(err.to_string().contains("Pod"), "{err}");
        let unknown_type = WatchEvent {
            r#type: Some("SOMETHING".into()),
            object: None,
        };
        assert!(frame::<SlimPod>(unknown_type.encode_to_vec().into()).is_err());
        Ok(())
    }

    /// Go writes a zero time as an empty message (a non-pointer condition time, a set but
    /// zero `timeAdded`), and JSON as `null`: both are no time, not 1970.
    #[test]
    fn a_zero_time_is_no_time() -> R {
        let zero = Time::default();
        let go_zero = seconds(GO_ZERO_TIME, 0);
        let node = WireNode {
            metadata: None,
            spec: Some(WireNodeSpec {
                taints: vec![
                    WireTaint {
                        key: Some("a".into()),
                        effect: Some("NoExecute".into()),
                        time_added: Some(zero.clone()),
                        ..WireTaint::default()
                    },
                    WireTaint {
                        key: Some("b".into()),
                        effect: Some("NoExecute".into()),
                        time_added: Some(go_zero),
                        ..WireTaint::default()
                    },
                ],
            }),
        };
        let node = SlimNode::from_proto(node.encode_to_vec().into())?;
        assert!(
            node.spec.taints.iter().all(|t| t.time_added.is_none()),
            "{node:?}"
        );
        // A marking condition without a time is passed over for the next one, as in JSON.
        let mark = |time: Option<Time>| WirePodCondition {
            r#type: Some(Bytes::from_static(b"DisruptionTarget")),
            last_transition_time: time,
            reason: Some(Bytes::from_static(TAINT_DISRUPTION_REASON.as_bytes())),
            ..Default::default()
        };
        let pod = WirePod {
            status: Some(WirePodStatus {
                phase: None,
                resource_claim_statuses: vec![],
                conditions: vec![
                    mark(Some(zero)),
                    mark(None),
                    mark(Some(seconds(1_700_000_000, 0))),
                ],
            }),
            ..WirePod::default()
        };
        let pod = SlimPod::from_proto(pod.encode_to_vec().into())?;
        let json: SlimPod = serde_json::from_value(serde_json::json!({"status": {"conditions": [
            {"type": "DisruptionTarget", "reason": TAINT_DISRUPTION_REASON, "lastTransitionTime": null},
            {"type": "DisruptionTarget", "reason": TAINT_DISRUPTION_REASON},
            {"type": "DisruptionTarget", "reason": TAINT_DISRUPTION_REASON, "lastTransitionTime": "2023-11-14T22:13:20Z"}
        ]}}))?;
        assert_eq!(pod.status, json.status);
        assert!(pod.status.and_then(|s| s.taint_disruption).is_some());
        // The device taint manager's mark counts too (the guard for upstream's device
        // controller); another reason does not.
        for (reason, marked) in [
            (crate::adapters::slim::DEVICE_DISRUPTION_REASON, true),
            ("EvictionByEvictionAPI", false),
        ] {
            let wire = WirePod {
                status: Some(WirePodStatus {
                    conditions: vec![WirePodCondition {
                        reason: Some(Bytes::from(reason.as_bytes().to_vec())),
                        ..mark(Some(seconds(1_700_000_000, 0)))
                    }],
                    ..Default::default()
                }),
                ..WirePod::default()
            };
            let pod = SlimPod::from_proto(wire.encode_to_vec().into())?;
            let json: SlimPod = serde_json::from_value(
                serde_json::json!({"status": {"conditions": [
                    {"type": "DisruptionTarget", "reason": reason, "lastTransitionTime": "2023-11-14T22:13:20Z"}
                ]}}),
            )?;
            assert_eq!(pod.status, json.status);
            assert_eq!(
                pod.status.and_then(|s| s.taint_disruption).is_some(),
                marked,
                "{reason}"
            );
        }
        Ok(())
    }

    /// A status string the API server never checked is read with replacement, not refused
    /// (a refused pod would stall the whole watch).
    #[test]
    fn a_phase_that_is_not_utf8_is_read_with_replacement() -> R {
        let pod = WirePod {
            status: Some(WirePodStatus {
                phase: Some(Bytes::from_static(b"Run\xffning")),
                conditions: vec![],
                resource_claim_statuses: vec![],
            }),
            ..WirePod::default()
        };
        let pod = SlimPod::from_proto(pod.encode_to_vec().into())?;
        assert_eq!(
            pod.status.and_then(|s| s.phase).as_deref(),
            Some("Run\u{fffd}ning")
        );
        Ok(())
    }
}
