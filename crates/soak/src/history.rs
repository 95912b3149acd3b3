//! The recorded history, rebuilt from the audit log alone: every node's versions (taints,
//! labels, annotations), every pod's life (created, bound, first deleted), every write of the
//! controller under test, and its Lease's writes.

use crate::audit::{Entry, Micros};
use crate::rules::{Taint, Toleration, taints_of, tolerations_of};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

/// Whose writes are judged, and how its replicas and Lease are told apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Controller {
    /// `noexecute run`: user agent `noexecute/VERSION (IDENTITY)`; its Lease is written with
    /// the same user agent and names the identity as holder.
    Noexecute,
    /// kube-controller-manager's taint-eviction-controller. It shares its client, and so its
    /// user agent (`.../node-controller`), with node-lifecycle-controller, which writes pod
    /// status too (Ready=False): a status write is the taint eviction controller's only when it
    /// sets `DisruptionTarget` (the audit log's request body says), and its pod deletions are
    /// the only ones under that name. The manager's Lease is written by `/leader-election`.
    /// One manager: every write is replica `kube-controller-manager`.
    Upstream,
}

impl std::str::FromStr for Controller {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "noexecute" => Ok(Controller::Noexecute),
            "upstream" => Ok(Controller::Upstream),
            _ => Err(format!("controller {s:?}: use noexecute or upstream")),
        }
    }
}

const KCM: &str = "kube-controller-manager";

impl Controller {
    /// The replica behind a write of the controller itself (not its Lease), if it is one.
    pub fn writer(&self, e: &Entry) -> Option<String> {
        match self {
            Controller::Noexecute => noexecute_identity(&e.user_agent),
            Controller::Upstream => {
                let ours = e.user_agent.starts_with("kube-controller-manager/")
                    && e.user_agent.ends_with("/node-controller")
                    && e.resource == "pods"
                    && match (e.subresource.as_str(), e.verb.as_str()) {
                        ("", "delete") => true,
                        // node-lifecycle's Ready=False is an update of the whole status;
                        // the taint eviction controller patches in DisruptionTarget.
                        ("status", "patch") => e
                            .request
                            .as_ref()
                            .is_some_and(|r| r.to_string().contains("DisruptionTarget")),
                        _ => false,
                    };
                ours.then(|| KCM.to_string())
            }
        }
    }

    /// The replica behind a write of the controller's Lease.
    pub fn lease_writer(&self, e: &Entry) -> Option<String> {
        match self {
            Controller::Noexecute => noexecute_identity(&e.user_agent),
            Controller::Upstream => e
                .user_agent
                .starts_with("kube-controller-manager/")
                .then(|| KCM.to_string()),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Controller::Noexecute => "noexecute",
            Controller::Upstream => "upstream",
        }
    }
}

pub fn noexecute_identity(agent: &str) -> Option<String> {
    let rest = agent.strip_prefix("noexecute/")?;
    let open = rest.find('(')?;
    let close = rest.rfind(')')?;
    (close > open).then(|| rest[open + 1..close].to_string())
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeVersion {
    pub at: Micros,
    /// `false`: the node was deleted at `at`.
    pub exists: bool,
    pub taints: Vec<Taint>,
    pub labels: Option<Value>,
    pub annotations: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Pod {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub labels: Option<Value>,
    pub tolerations: Vec<Toleration>,
    pub created: Micros,
    pub node: Option<String>,
    pub bound: Option<Micros>,
    /// The first successful deletion or eviction by anyone: from then on the pod is leaving.
    pub gone: Option<Micros>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WriteKind {
    /// DELETE of a pod.
    Delete,
    /// POST of a pod's `eviction`.
    Evict,
    /// A write of a pod's status (the `DisruptionTarget` condition).
    Mark,
    /// Any other write of a pod.
    OtherPod,
    /// An Event.
    Event,
    /// Anything else (nodes, say): never expected.
    Other,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub kind: WriteKind,
    pub replica: String,
    /// Index into `History::pods`, for pod writes that could be resolved.
    pub pod: Option<usize>,
    pub namespace: String,
    pub name: String,
    pub code: u16,
    pub received: Micros,
    pub completed: Micros,
}

impl Write {
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.code)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct LeaseWrite {
    pub replica: String,
    /// `spec.holderIdentity` of the Lease as written (None: deleted, or no body).
    pub holder: Option<String>,
    pub verb: String,
    pub ok: bool,
    pub received: Micros,
    pub completed: Micros,
}

#[derive(Debug, Default)]
pub struct History {
    pub nodes: BTreeMap<String, Vec<NodeVersion>>,
    pub pods: Vec<Pod>,
    pub writes: Vec<Write>,
    pub leases: Vec<LeaseWrite>,
    /// The first and last completion times in the log.
    pub start: Micros,
    pub end: Micros,
    /// Entries the history could not use, by reason (reported, never silently dropped).
    pub unresolved: BTreeMap<String, usize>,
    /// When each successful write of anyone completed, in order: when the API server served.
    pub served: Vec<Micros>,
}

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error(
        "the audit log has no bodies for pod and node writes: the plane must be created with \
         NOEXECUTE_AUDIT=bodies (scripts/soak does)"
    )]
    NoBodies,
}

impl History {
    /// Rebuilds the history from `entries` (sorted by completion). `lease` is the controller's
    /// Lease as `namespace/name`.
    pub fn build(
        entries: &[Entry],
        controller: &Controller,
        lease: &str,
    ) -> Result<History, HistoryError> {
        let mut h = History {
            start: entries.first().map(|e| e.completed).unwrap_or_default(),
            end: entries.last().map(|e| e.completed).unwrap_or_default(),
            ..History::default()
        };
        let (lease_ns, lease_name) = lease.split_once('/').unwrap_or(("", lease));
        h.served = entries
            .iter()
            .filter(|e| e.ok())
            .map(|e| e.completed)
            .collect();
        h.served.sort_unstable();
        let mut by_name: HashMap<(String, String), Vec<usize>> = HashMap::new();
        let mut by_uid: HashMap<String, usize> = HashMap::new();
        let mut pod_writes_seen = false;
        let mut pod_bodies_seen = false;
        // Pods first: the scheduler can bind a pod before its creation's response is complete
        // (and so before it in the log).
        for e in entries
            .iter()
            .filter(|e| e.resource == "pods" && e.subresource.is_empty() && e.verb == "create")
        {
            pod_writes_seen = true;
            if !e.ok() {
                continue;
            }
            let Some(body) = e.response.as_ref() else {
                continue;
            };
            pod_bodies_seen = true;
            let uid = body
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let namespace = body
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or(&e.namespace)
                .to_string();
            let name = body
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or(&e.name)
                .to_string();
            let node = body
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .map(str::to_string);
            let index = h.pods.len();
            h.pods.push(Pod {
                uid: uid.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
                labels: body.pointer("/metadata/labels").cloned(),
                tolerations: tolerations_of(body),
                // From when the request came: the pod exists from some time between then
                // and the response.
                created: e.received,
                bound: node.as_ref().map(|_| e.received),
                node,
                gone: None,
            });
            by_uid.insert(uid, index);
            by_name.entry((namespace, name)).or_default().push(index);
        }
        for e in entries {
            match (e.resource.as_str(), e.subresource.as_str()) {
                ("nodes", "") => h.node_write(e),
                ("pods", "") if e.verb == "create" => {}
                ("pods", "binding") if e.ok() => {
                    let target = e.request_str("/target/name").map(str::to_string);
                    let uid = e.request_str("/metadata/uid");
                    let index = uid
                        .and_then(|u| by_uid.get(u).copied())
                        .or_else(|| resolve(&by_name, &h.pods, e));
                    match (index, target) {
                        (Some(i), Some(node)) if h.pods[i].bound.is_none() => {
                            h.pods[i].node = Some(node);
                            h.pods[i].bound = Some(e.received);
                        }
                        _ => *h.unresolved.entry("binding".into()).or_default() += 1,
                    }
                }
                _ => {}
            }
            // Deletions and evictions by anyone end a pod's stay.
            let leaving = matches!(
                (e.resource.as_str(), e.subresource.as_str(), e.verb.as_str()),
                ("pods", "", "delete") | ("pods", "eviction", "create")
            );
            let pod_index = if e.resource == "pods" {
                pod_of(e, &by_uid, &by_name, &h.pods)
            } else {
                None
            };
            if leaving
                && e.ok()
                && let Some(i) = pod_index
                && h.pods[i].gone.is_none()
            {
                h.pods[i].gone = Some(e.completed);
            }
            // The controller's own writes.
            if e.resource == "leases"
                && e.namespace == lease_ns
                && e.name == lease_name
                && let Some(replica) = controller.lease_writer(e)
            {
                let holder = e
                    .response_str("/spec/holderIdentity")
                    .or_else(|| e.request_str("/spec/holderIdentity"))
                    .map(str::to_string);
                h.leases.push(LeaseWrite {
                    replica,
                    holder: if e.verb == "delete" { None } else { holder },
                    verb: e.verb.clone(),
                    ok: e.ok(),
                    received: e.received,
                    completed: e.completed,
                });
                continue;
            }
            if e.resource == "leases" {
                continue;
            }
            let Some(replica) = controller.writer(e) else {
                continue;
            };
            let kind = match (e.resource.as_str(), e.subresource.as_str(), e.verb.as_str()) {
                ("pods", "", "delete") => WriteKind::Delete,
                ("pods", "eviction", _) => WriteKind::Evict,
                ("pods", "status", _) => WriteKind::Mark,
                ("pods", _, _) => WriteKind::OtherPod,
                ("events", _, _) => WriteKind::Event,
                _ => WriteKind::Other,
            };
            if matches!(
                kind,
                WriteKind::Delete | WriteKind::Evict | WriteKind::Mark | WriteKind::OtherPod
            ) && pod_index.is_none()
            {
                *h.unresolved
                    .entry(format!(
                        "{kind:?} of an unknown pod {}/{} at {}",
                        e.namespace,
                        e.name,
                        crate::audit::show_time(e.received)
                    ))
                    .or_default() += 1;
            }
            h.writes.push(Write {
                kind,
                replica,
                pod: pod_index,
                namespace: e.namespace.clone(),
                name: e.name.clone(),
                code: e.code,
                received: e.received,
                completed: e.completed,
            });
        }
        if pod_writes_seen && !pod_bodies_seen {
            return Err(HistoryError::NoBodies);
        }
        Ok(h)
    }

    fn node_write(&mut self, e: &Entry) {
        if !e.ok() || e.name.is_empty() && e.verb != "create" {
            return;
        }
        if e.verb == "delete" || e.verb == "deletecollection" {
            if let Some(versions) = self.nodes.get_mut(&e.name) {
                versions.push(NodeVersion {
                    at: e.completed,
                    exists: false,
                    taints: Vec::new(),
                    labels: None,
                    annotations: None,
                });
            }
            return;
        }
        let Some(body) = e.response.as_ref() else {
            *self
                .unresolved
                .entry("node write without a body".into())
                .or_default() += 1;
            return;
        };
        let Some(name) = body.pointer("/metadata/name").and_then(Value::as_str) else {
            return;
        };
        self.nodes
            .entry(name.to_string())
            .or_default()
            .push(NodeVersion {
                at: e.completed,
                exists: true,
                taints: taints_of(body),
                labels: body.pointer("/metadata/labels").cloned(),
                annotations: body.pointer("/metadata/annotations").cloned(),
            });
    }

    /// The node's version in force at `at` (the last written at or before it).
    pub fn node_at(&self, node: &str, at: Micros) -> Option<&NodeVersion> {
        let versions = self.nodes.get(node)?;
        let i = versions.partition_point(|v| v.at <= at);
        i.checked_sub(1).map(|i| &versions[i])
    }
}

/// The pod a write is about: by the UID in its body (a deletion's answer, a precondition),
/// else the newest pod of that name created before the request arrived.
fn pod_of(
    e: &Entry,
    by_uid: &HashMap<String, usize>,
    by_name: &HashMap<(String, String), Vec<usize>>,
    pods: &[Pod],
) -> Option<usize> {
    let uid = e
        .response_str("/metadata/uid")
        .filter(|_| e.response_str("/kind") == Some("Pod"))
        .or_else(|| e.request_str("/metadata/uid"))
        .or_else(|| e.request_str("/preconditions/uid"))
        .or_else(|| e.request_str("/deleteOptions/preconditions/uid"));
    if let Some(i) = uid.and_then(|u| by_uid.get(u)) {
        return Some(*i);
    }
    resolve(by_name, pods, e)
}

fn resolve(
    by_name: &HashMap<(String, String), Vec<usize>>,
    pods: &[Pod],
    e: &Entry,
) -> Option<usize> {
    by_name
        .get(&(e.namespace.clone(), e.name.clone()))?
        .iter()
        .rev()
        .copied()
        .find(|&i| pods[i].created <= e.received)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_come_from_the_user_agent() {
        assert_eq!(
            noexecute_identity("noexecute/0.1.0 (host-a-x1y2)").as_deref(),
            Some("host-a-x1y2")
        );
        assert_eq!(noexecute_identity("kubectl/v1.36.3"), None);
    }
}
