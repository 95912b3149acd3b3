//! Realistic nodes and pods, shaped like what `kubectl get nodes,pods -A -o json` prints on a
//! production cluster: managed fields, owner references, labels and annotations, two
//! containers with env, ports, resources and probes, projected volumes, and a full status.
//! About 7 KB of compact JSON a pod and 6 KB a node (kubectl pretty-prints the same content at
//! about twice the bytes). Deterministic: the same index gives the same object.
//!
//! Used by the snapshot tests and benchmarks (`noexecute-snapshot`) and by the side-by-side
//! bench, which creates these pods on a real API server so that both controllers decode what
//! they would in production.

use std::io::{self, Write};

use k8s_openapi::api::core::v1::{Node, Pod, Toleration};
use serde_json::{Value, json};

pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";

fn uid(kind: u32, index: usize) -> String {
    let x = (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(kind);
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (x >> 32) as u32,
        (x >> 16) & 0xffff,
        x & 0xfff,
        (x >> 20) & 0xfff,
        x & 0xffff_ffff_ffff
    )
}

fn zone(index: usize) -> String {
    format!("zone-{}", ["a", "b", "c"][index % 3])
}

/// The tolerations a pod of a real cluster has, by its index: one in ten none at all
/// (a static pod, say), one in ten everything forever (a DaemonSet's), and the rest the two
/// 300 s tolerations the DefaultTolerationSeconds admission plugin adds.
pub fn snapshot_tolerations(index: usize) -> Vec<Toleration> {
    match index % 10 {
        0 => vec![],
        1 => vec![Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        }],
        _ => [NOT_READY, UNREACHABLE]
            .into_iter()
            .map(|key| Toleration {
                key: Some(key.into()),
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                toleration_seconds: Some(300),
                ..Default::default()
            })
            .collect(),
    }
}

fn managed(manager: &str, operation: &str, fields: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        "manager": manager,
        "operation": operation,
        "time": "2026-11-30T08:00:00Z"
    })
}

fn env(index: usize) -> Value {
    let mut vars: Vec<Value> = (0..4)
        .map(|i| json!({"name": format!("SETTING_{i}"), "value": format!("value-{index}-{i}")}))
        .collect();
    vars.push(json!({"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}));
    vars.push(json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}));
    Value::Array(vars)
}

fn probe(path: &str, port: u16) -> Value {
    json!({
        "failureThreshold": 3,
        "httpGet": {"path": path, "port": port, "scheme": "HTTP"},
        "initialDelaySeconds": 5,
        "periodSeconds": 10,
        "successThreshold": 1,
        "timeoutSeconds": 1
    })
}

fn container(name: &str, image: &str, port: u16, index: usize) -> Value {
    json!({
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["--port", port.to_string(), "--log-format=json"],
        "env": env(index),
        "ports": [{"containerPort": port, "name": "http", "protocol": "TCP"}],
        "resources": {
            "limits": {"cpu": "500m", "memory": "256Mi"},
            "requests": {"cpu": "100m", "memory": "128Mi"}
        },
        "livenessProbe": probe("/healthz", port),
        "readinessProbe": probe("/readyz", port),
        "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                            "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"mountPath": "/etc/config", "name": "config", "readOnly": true},
            {"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access", "readOnly": true}
        ]
    })
}

fn container_status(name: &str, image: &str, index: usize) -> Value {
    json!({
        "containerID": format!("containerd://{}{}", uid(7, index).replace('-', ""), name.len()),
        "image": image,
        "imageID": format!("{image}@sha256:{}", "ab".repeat(32)),
        "lastState": {},
        "name": name,
        "ready": true,
        "restartCount": 0,
        "started": true,
        "state": {"running": {"startedAt": "2026-11-30T08:00:05Z"}}
    })
}

/// A pod as a Deployment's ReplicaSet makes it, bound to `node`, with these tolerations. The
/// API server sets its own `managedFields`, `uid` and `status` on create; a snapshot keeps
/// these.
pub fn pod_value(
    name: &str,
    namespace: &str,
    node: &str,
    index: usize,
    tolerations: &[Toleration],
) -> Value {
    let app = format!("service-{}", index % 50);
    let image = format!(
        "registry.example.com/team-{}/{app}:1.{}.0",
        index % 10,
        index % 7
    );
    let sidecar = "registry.example.com/platform/proxy:2.4.1";
    let pod_conditions: Vec<Value> = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]
    .iter()
    .map(|t| json!({"type": t, "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-11-30T08:00:05Z"}))
    .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": format!("{app}-7d9f8b6c5-"),
            "namespace": namespace,
            "uid": uid(1, index),
            "resourceVersion": (1000 + index).to_string(),
            "creationTimestamp": "2026-11-30T08:00:00Z",
            "labels": {
                "app.kubernetes.io/name": app,
                "app.kubernetes.io/part-of": format!("product-{}", index % 5),
                "app.kubernetes.io/version": format!("1.{}.0", index % 7),
                "pod-template-hash": "7d9f8b6c5",
                "team": format!("team-{}", index % 10)
            },
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "8080",
                "kubectl.kubernetes.io/restartedAt": "2026-11-29T12:00:00Z"
            },
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-7d9f8b6c5"),
                "uid": uid(2, index % 50), "controller": true, "blockOwnerDeletion": true
            }],
            "managedFields": [
                managed("kube-controller-manager", "Update", json!({
                    "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app.kubernetes.io/name": {},
                        "f:app.kubernetes.io/part-of": {}, "f:app.kubernetes.io/version": {}, "f:pod-template-hash": {}, "f:team": {}},
                        "f:ownerReferences": {".": {}, "k:{\"uid\":\"x\"}": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:args": {}, "f:env": {}, "f:image": {},
                        "f:livenessProbe": {}, "f:ports": {}, "f:readinessProbe": {}, "f:resources": {}},
                        "k:{\"name\":\"proxy\"}": {".": {}, "f:image": {}, "f:ports": {}}},
                        "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:securityContext": {},
                        "f:terminationGracePeriodSeconds": {}, "f:volumes": {}}
                })),
                managed("kubelet", "Update", json!({
                    "f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {},
                        "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}},
                        "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}
                }))
            ]
        },
        "spec": {
            "containers": [
                container("app", &image, 8080, index),
                container("proxy", sidecar, 15001, index)
            ],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": true,
            "nodeName": node,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {"fsGroup": 2000, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "serviceAccount": app,
            "serviceAccountName": app,
            "terminationGracePeriodSeconds": 30,
            "tolerations": tolerations,
            "volumes": [
                {"name": "config", "configMap": {"defaultMode": 420, "name": format!("{app}-config")}},
                {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                ]}}
            ]
        },
        "status": {
            "phase": "Running",
            "conditions": pod_conditions,
            "containerStatuses": [container_status("app", &image, index), container_status("proxy", sidecar, index)],
            "hostIP": format!("10.0.{}.{}", (index / 30) % 250, 1 + index % 30),
            "podIP": format!("10.{}.{}.{}", 100 + index % 100, (index / 250) % 250, index % 250),
            "podIPs": [{"ip": format!("10.{}.{}.{}", 100 + index % 100, (index / 250) % 250, index % 250)}],
            "qosClass": "Burstable",
            "startTime": "2026-11-30T08:00:00Z"
        }
    })
}

/// [`pod_value`] as a `Pod`.
pub fn pod(
    name: &str,
    namespace: &str,
    node: &str,
    index: usize,
    tolerations: &[Toleration],
) -> serde_json::Result<Pod> {
    serde_json::from_value(pod_value(name, namespace, node, index, tolerations))
}

/// A node as a kubelet on a cloud VM registers it, in zone `zone-a`, `-b` or `-c` by index.
pub fn node_value(name: &str, index: usize) -> Value {
    let zone = zone(index);
    let images: Vec<Value> = (0..16)
        .map(|i| json!({"names": [format!("registry.example.com/team-{}/service-{i}@sha256:{}", i % 10, "cd".repeat(32)),
                                  format!("registry.example.com/team-{}/service-{i}:1.{}.0", i % 10, i % 7)],
                        "sizeBytes": 50_000_000 + i * 1_000_003}))
        .collect();
    let node_conditions: Vec<Value> = ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        .iter()
        .map(|t| {
            json!({
                "type": t, "status": if *t == "Ready" { "True" } else { "False" },
                "lastHeartbeatTime": "2026-11-30T08:00:00Z", "lastTransitionTime": "2026-11-01T00:00:00Z",
                "reason": format!("Kubelet{t}"), "message": format!("kubelet reports {t}")
            })
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": uid(3, index),
            "resourceVersion": (500 + index).to_string(),
            "creationTimestamp": "2026-11-01T00:00:00Z",
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "m6i.2xlarge",
                "topology.kubernetes.io/region": "region-1",
                "topology.kubernetes.io/zone": zone
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true"
            },
            "managedFields": [
                managed("kubelet", "Update", json!({"f:metadata": {"f:labels": {}}, "f:spec": {"f:providerID": {}},
                    "f:status": {"f:conditions": {}, "f:images": {}, "f:nodeInfo": {}}})),
                managed("kube-controller-manager", "Update", json!({"f:spec": {"f:podCIDR": {}, "f:podCIDRs": {}}}))
            ]
        },
        "spec": {
            "podCIDR": format!("10.{}.{}.0/24", 100 + index % 100, index % 250),
            "podCIDRs": [format!("10.{}.{}.0/24", 100 + index % 100, index % 250)],
            "providerID": format!("cloud://region-1/{zone}/i-{:012x}", index)
        },
        "status": {
            "addresses": [{"address": format!("10.0.{}.{}", index / 250, index % 250), "type": "InternalIP"},
                          {"address": name, "type": "Hostname"}],
            "allocatable": {"cpu": "7910m", "ephemeral-storage": "95491281146", "memory": "31619612Ki", "pods": "110"},
            "capacity": {"cpu": "8", "ephemeral-storage": "103609152Ki", "memory": "32551452Ki", "pods": "110"},
            "conditions": node_conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": images,
            "nodeInfo": {"architecture": "amd64", "bootID": uid(4, index), "containerRuntimeVersion": "containerd://2.1.4",
                         "kernelVersion": "6.8.0", "kubeProxyVersion": "", "kubeletVersion": "v1.36.3",
                         "machineID": uid(5, index).replace('-', ""), "operatingSystem": "linux",
                         "osImage": "Ubuntu 24.04 LTS", "systemUUID": uid(6, index)}
        }
    })
}

/// [`node_value`] as a `Node`.
pub fn node(name: &str, index: usize) -> serde_json::Result<Node> {
    serde_json::from_value(node_value(name, index))
}

/// Write a snapshot of `nodes` nodes (`node-N`, zones a/b/c by N) with `pods_per_node` pods
/// each (`team-T/pod-N-I`, tolerations by [`snapshot_tolerations`]), as
/// `kubectl get nodes,pods -A -o json` would (but compact, an item a line), one item at a time.
pub fn write_snapshot(out: &mut impl Write, nodes: usize, pods_per_node: usize) -> io::Result<()> {
    out.write_all(b"{\"apiVersion\": \"v1\", \"items\": [\n")?;
    let mut first = true;
    let mut item = |out: &mut dyn Write, value: &Value| -> io::Result<()> {
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        serde_json::to_writer(&mut *out, value).map_err(io::Error::other)
    };
    for n in 0..nodes {
        item(out, &node_value(&format!("node-{n}"), n))?;
    }
    for n in 0..nodes {
        for i in 0..pods_per_node {
            let index = n * pods_per_node + i;
            let pod = pod_value(
                &format!("pod-{n}-{i}"),
                &format!("team-{}", index % 10),
                &format!("node-{n}"),
                index,
                &snapshot_tolerations(index),
            );
            item(out, &pod)?;
        }
    }
    out.write_all(b"\n], \"kind\": \"List\", \"metadata\": {\"resourceVersion\": \"\"}}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_valid_and_about_the_advertised_size() {
        let tolerations = snapshot_tolerations(5);
        let pod = pod("p", "ns", "node-0", 5, &tolerations).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pod.spec.as_ref().map(|s| s.containers.len()), Some(2));
        let pod_size = serde_json::to_string(&pod_value("p", "ns", "n", 5, &tolerations))
            .map(|s| s.len())
            .unwrap_or_default();
        assert!((5_500..7_500).contains(&pod_size), "{pod_size} bytes a pod");
        let node_size = serde_json::to_string(&node_value("n", 1))
            .map(|s| s.len())
            .unwrap_or_default();
        assert!(
            (5_000..12_000).contains(&node_size),
            "{node_size} bytes a node"
        );
        let node = node("n", 1).unwrap_or_else(|e| panic!("{e}"));
        assert!(node.status.is_some());
        let mut buf = Vec::new();
        write_snapshot(&mut buf, 2, 3).unwrap_or_else(|e| panic!("{e}"));
        let list: Value = serde_json::from_slice(&buf).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(list["items"].as_array().map(Vec::len), Some(8));
    }
}
