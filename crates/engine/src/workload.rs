//! The standard large population used by the benchmarks and the memory budget test:
//! `nodes × pods_per_node` pods, 90% carrying the two default 300 s tolerations that the
//! `DefaultTolerationSeconds` admission plugin adds and 10% carrying none.

use crate::observe::{NodeObservation, PodObservation, Uid};
use crate::taint::Taint;
use crate::toleration::{UNREACHABLE_TAINT, add_default_tolerations};

/// Untainted nodes `node-0…`, and pods `pod-<node>-<i>` in ten namespaces.
pub fn population(
    nodes: usize,
    pods_per_node: usize,
) -> (Vec<NodeObservation>, Vec<PodObservation>) {
    let node_list: Vec<NodeObservation> = (0..nodes)
        .map(|n| NodeObservation {
            name: format!("node-{n}"),
            taints: Vec::new(),
        })
        .collect();
    let mut defaults = Vec::new();
    add_default_tolerations(&mut defaults, 300);
    let mut pods = Vec::with_capacity(nodes * pods_per_node);
    for n in 0..nodes {
        for i in 0..pods_per_node {
            let index = n * pods_per_node + i;
            // A lowercase UUID, as the API server issues them.
            let uid = format!("{:08x}-0000-4000-8000-{:012x}", index, index);
            let mut pod = PodObservation::new(
                &format!("team-{}", index % 10),
                &format!("pod-{n}-{i}"),
                &uid,
                Some(&format!("node-{n}")),
            );
            debug_assert!(matches!(pod.uid, Uid::Uuid(_)));
            if !index.is_multiple_of(10) {
                pod.tolerations = defaults.clone();
            }
            pods.push(pod);
        }
    }
    (node_list, pods)
}

/// The same nodes, each now carrying `node.kubernetes.io/unreachable:NoExecute`.
pub fn tainted(nodes: &[NodeObservation]) -> Vec<NodeObservation> {
    nodes
        .iter()
        .map(|n| NodeObservation {
            name: n.name.clone(),
            taints: vec![Taint::no_execute(UNREACHABLE_TAINT, "")],
        })
        .collect()
}
