//! Slim Kubernetes objects: only the fields taint eviction reads, so that 150,000 pods never
//! sit in memory as full `Pod`s. Unknown fields are skipped by serde while parsing.
//!
//! The same types serve the live watch (through [`kube::core::Object`] with the erased `Pod`
//! and `Node` resources), snapshot files and `plan`/`explain`'s live reads.

use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use kube::core::{ApiResource, Object};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct NoStatus {}

pub type SlimPod = Object<PodSpec, PodStatus>;
pub type SlimNode = Object<NodeSpec, NoStatus>;

pub fn pod_resource() -> ApiResource {
    ApiResource::erase::<Pod>(&())
}

pub fn node_resource() -> ApiResource {
    ApiResource::erase::<Node>(&())
}

/// Drop the metadata we never read (kube's advice for reflector memory): managed fields,
/// annotations (but the brake's release annotation), owner references. Labels stay: node
/// labels drive `plan`'s selectors and pod labels the exclusion policy.
pub fn trim_meta(meta: &mut kube::core::ObjectMeta) {
    meta.managed_fields = None;
    meta.annotations = meta.annotations.take().and_then(|a| {
        a.get(crate::policy::RELEASE_ANNOTATION)
            .map(|v| [(crate::policy::RELEASE_ANNOTATION.to_string(), v.clone())].into())
    });
    meta.owner_references = None;
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
pub type ExecPod = Object<PodSpec, ConditionsStatus>;
