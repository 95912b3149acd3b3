//! Slim Kubernetes objects: only the fields taint eviction reads, so that 150,000 pods never
//! sit in memory as full `Pod`s, and are never built as full `Pod`s either.
//!
//! Decoding skips what it never reads (managed fields, owner references, other annotations,
//! container specs, volumes, status beyond the phase) with serde's ignored-value path: the
//! bytes are scanned, nothing is allocated for them. The same types serve the live watch and
//! list (through [`Slim`]'s [`kube::Resource`] impl over the erased `Pod` and `Node`
//! resources), snapshot files, `plan`/`explain`'s live reads and the executor's requests.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::{ApiResource, DynamicResourceScope, ObjectMeta};
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// A Kubernetes object with a slim metadata decoder and the given spec and status types.
/// `apiVersion` and `kind` are not kept (the [`ApiResource`] says what it is). The metadata is
/// boxed: `ObjectMeta` is 360 bytes of mostly empty fields, and `plan` holds 150,000 pods in
/// one vector.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct Slim<S, T> {
    #[serde(default, deserialize_with = "slim_meta")]
    pub metadata: Box<ObjectMeta>,
    #[serde(default)]
    pub spec: S,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<T>,
}

impl<S: Clone, T: Clone> kube::Resource for Slim<S, T> {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }
    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }
    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }
    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }
    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The metadata fields anything here reads. Labels drive `plan`'s selectors and the exclusion
/// policy; of the annotations only the brake's release annotation is kept; the resource
/// version is what the watcher resumes from.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    deletion_timestamp: Option<Time>,
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "release_annotation")]
    annotations: Option<BTreeMap<String, String>>,
}

fn slim_meta<'de, D: Deserializer<'de>>(d: D) -> Result<Box<ObjectMeta>, D::Error> {
    let w = Option::<WireMeta>::deserialize(d)?;
    Ok(Box::new(w.map_or_else(ObjectMeta::default, |w| {
        ObjectMeta {
            name: w.name,
            namespace: w.namespace,
            uid: w.uid,
            resource_version: w.resource_version,
            generation: w.generation,
            deletion_timestamp: w.deletion_timestamp,
            labels: w.labels,
            annotations: w.annotations,
            ..ObjectMeta::default()
        }
    })))
}

/// Annotations, keeping only the release annotation's value: other values (a
/// `last-applied-configuration` can be the whole object again) are skipped unread.
fn release_annotation<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Keep;
    impl<'de> Visitor<'de> for Keep {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a map of annotations")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(Keep)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept = None;
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if key == noexecute_engine::pipeline::RELEASE_ANNOTATION {
                    let value: String = map.next_value()?;
                    kept = Some([(key.into_owned(), value)].into());
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(kept)
        }
    }
    d.deserialize_option(Keep)
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// DRA claims (device taints, `docs/parity.md` §22).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_claims: Vec<super::device::PodResourceClaim>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Where the claims made from templates are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_claim_statuses: Vec<super::device::PodResourceClaimStatus>,
    /// When a taint eviction controller marked the pod for deletion: the last transition of
    /// its `DisruptionTarget` condition with reason `DeletionByTaintManager`. Only that
    /// condition is kept of the pod's conditions (the second-controller guard reads it).
    #[serde(
        default,
        rename = "conditions",
        deserialize_with = "taint_disruption",
        skip_serializing
    )]
    pub taint_disruption: Option<Time>,
}

/// The `DisruptionTarget` condition's reason when a taint manager set it.
pub const TAINT_DISRUPTION_REASON: &str = "DeletionByTaintManager";
/// ... and when the device taint manager set it (`docs/parity.md` §22.5).
pub const DEVICE_DISRUPTION_REASON: &str = "DeletionByDeviceTaintManager";

/// Whether a `DisruptionTarget` reason is a taint manager's (node or device).
pub fn is_taint_disruption(reason: &[u8]) -> bool {
    reason == TAINT_DISRUPTION_REASON.as_bytes() || reason == DEVICE_DISRUPTION_REASON.as_bytes()
}

fn taint_disruption<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
    #[derive(Deserialize)]
    struct Wire<'a> {
        #[serde(rename = "type", borrow)]
        type_: Cow<'a, str>,
        #[serde(default, borrow)]
        reason: Option<Cow<'a, str>>,
        #[serde(default, rename = "lastTransitionTime", borrow)]
        last_transition_time: Option<Cow<'a, str>>,
    }
    let conditions = Option::<Vec<Wire<'de>>>::deserialize(d)?;
    // Only the matching condition's time is parsed.
    Ok(conditions.into_iter().flatten().find_map(|c| {
        (c.type_ == "DisruptionTarget"
            && c.reason
                .as_deref()
                .is_some_and(|r| is_taint_disruption(r.as_bytes())))
        .then(|| c.last_transition_time?.parse().ok().map(Time))
        .flatten()
    }))
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct NoStatus {}

pub type SlimPod = Slim<PodSpec, PodStatus>;
pub type SlimNode = Slim<NodeSpec, NoStatus>;

pub fn pod_resource() -> ApiResource {
    ApiResource::erase::<Pod>(&())
}

pub fn node_resource() -> ApiResource {
    ApiResource::erase::<Node>(&())
}

/// A pod condition, as the executor reads it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The status the executor reads: conditions only.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionsStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The pod as the executor GETs, patches and deletes it: the same requests as for a full Pod,
/// with only these fields decoded from the responses.
pub type ExecPod = Slim<PodSpec, ConditionsStatus>;

/// Metadata alone, decoded as the slim objects decode theirs.
#[derive(Deserialize)]
pub struct Meta(#[serde(deserialize_with = "slim_meta")] pub Box<ObjectMeta>);

/// Which pod labels to keep. Node labels are always kept (`--taint-selector` reads them); of a
/// pod's only those the exclusion policy reads, which on a large cluster saves about half of
/// what a pod costs here.
#[derive(Clone, Debug, PartialEq)]
pub enum PodLabels {
    All,
    Only(BTreeSet<String>),
}

impl PodLabels {
    /// Drop the labels not kept.
    pub fn trim(&self, meta: &mut kube::core::ObjectMeta) {
        if let PodLabels::Only(keys) = self {
            meta.labels = meta.labels.take().and_then(|mut labels| {
                labels.retain(|k, _| keys.contains(k));
                (!labels.is_empty()).then_some(labels)
            });
        }
    }
}
