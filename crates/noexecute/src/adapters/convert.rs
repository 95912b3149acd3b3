//! From Kubernetes API types to the engine's observations. Lossless for everything the
//! decision reads; no other module converts.

use kube::core::ObjectMeta;
use noexecute_engine::{
    NodeObservation, Operator, Phase, PodObservation, Taint, TaintEffect, Time, Toleration, Uid,
};

use crate::adapters::slim::{SlimNode, SlimPod};

pub fn taint(t: &k8s_openapi::api::core::v1::Taint) -> Taint {
    Taint {
        key: t.key.clone(),
        value: t.value.clone().unwrap_or_default(),
        effect: TaintEffect::parse(&t.effect),
        time_added: t
            .time_added
            .as_ref()
            .map(|at| Time::from_millis(at.0.as_millisecond())),
    }
}

pub fn toleration(t: &k8s_openapi::api::core::v1::Toleration) -> Toleration {
    Toleration {
        key: t.key.clone().unwrap_or_default(),
        operator: Operator::parse(t.operator.as_deref().unwrap_or("")),
        value: t.value.clone().unwrap_or_default(),
        effect: t
            .effect
            .as_deref()
            .filter(|e| !e.is_empty())
            .map(TaintEffect::parse),
        toleration_seconds: t.toleration_seconds,
    }
}

pub fn node(node: &SlimNode) -> NodeObservation {
    NodeObservation {
        name: node.metadata.name.clone().unwrap_or_default(),
        taints: node.spec.taints.iter().map(taint).collect(),
    }
}

fn is_terminating(meta: &ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

pub fn pod(pod: &SlimPod) -> PodObservation {
    let meta = &pod.metadata;
    PodObservation {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: Uid::new(meta.uid.as_deref().unwrap_or_default()),
        node_name: pod.spec.node_name.clone().filter(|n| !n.is_empty()),
        tolerations: pod.spec.tolerations.iter().map(toleration).collect(),
        phase: pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .map_or(Phase::Pending, Phase::parse),
        terminating: is_terminating(meta),
        excluded: false,
        generation: meta.generation.unwrap_or(0),
        claims: super::device::pod_claims(
            &pod.spec.resource_claims,
            pod.status
                .as_ref()
                .map_or(&[][..], |s| &s.resource_claim_statuses),
        ),
    }
}
