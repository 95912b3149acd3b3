//! `noexecute explain NAMESPACE/POD`: the pod's tolerations against its node's `NoExecute`
//! taints, which toleration matches which taint; the `NoExecute` taints of the devices
//! allocated to its ResourceClaims, where each comes from and which toleration of the claim's
//! request decides it; the decision and the deadline. The decision and the deadline come from
//! the same pipeline run as `plan`.

use std::fmt::Write;

use noexecute_engine::Time;
use noexecute_engine::toleration::first_tolerating;

use serde::Serialize;

use crate::adapters::convert;
use crate::offline::plan::{self, Resolved};
use crate::offline::state::ClusterState;

/// Why a pod would be evicted or not, as data (`-o json|yaml`) and as text.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `namespace/name`.
    pub pod: String,
    pub uid: String,
    pub phase: String,
    pub terminating: bool,
    /// The node it is bound to (none: taint eviction does not apply).
    pub node: Option<String>,
    /// Whether that node is in the source.
    pub node_found: bool,
    /// Where the state came from (a snapshot file, the live cluster).
    pub source: String,
    /// Taints of the node with another effect, which do not evict.
    pub other_taints: usize,
    pub no_execute_taints: Vec<TaintLine>,
    pub tolerations: Vec<TolerationLine>,
    /// `NoExecute` taints on the devices allocated to the pod's claims.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub device_taints: Vec<DeviceTaintLine>,
    /// Absent for a pod bound to no node.
    pub decision: Option<Decision>,
    /// A countdown of an existing taint is estimated from its `timeAdded`.
    pub estimated: bool,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaintLine {
    pub taint: String,
    /// RFC 3339.
    pub added: Option<String>,
    /// 1-based index of the first toleration that tolerates it.
    pub tolerated_by: Option<usize>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceTaintLine {
    /// `driver/pool/device`.
    pub device: String,
    /// The pod's ResourceClaim it is allocated to.
    pub claim: String,
    pub taint: String,
    /// Where the taint comes from: a DeviceTaintRule, or the device's ResourceSlice.
    pub source: String,
    /// RFC 3339.
    pub added: Option<String>,
    /// The toleration of the claim's request that decides the time, if any.
    pub tolerated_by: Option<String>,
    /// When it makes the pod due (RFC 3339); absent when tolerated forever.
    pub due: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TolerationLine {
    pub toleration: String,
    /// The taints it is the one tolerating.
    pub used_for: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// `evict` or `keep`.
    pub action: &'static str,
    /// RFC 3339; absent when not evicted.
    pub at: Option<String>,
    /// Seconds from now (0: at once).
    pub in_seconds: Option<f64>,
    pub reason: String,
    #[serde(skip)]
    evicted_at: Option<Time>,
}

pub fn explain(
    state: ClusterState,
    resolved: &Resolved<'_>,
    target: &str,
    now: Time,
    policy: &crate::adapters::policy::Policy,
    comparison_operators: bool,
) -> Result<Explanation, String> {
    let (namespace, name) = target
        .split_once('/')
        .ok_or_else(|| format!("{target:?}: expected NAMESPACE/POD"))?;
    let pod = state
        .pods
        .iter()
        .find(|p| {
            p.metadata.namespace.as_deref() == Some(namespace)
                && p.metadata.name.as_deref() == Some(name)
        })
        .ok_or_else(|| format!("pod {target} is not in {}", state.source))?;
    let obs = convert::pod(pod);
    let mut out = Explanation {
        pod: target.to_string(),
        uid: obs.uid.to_string(),
        phase: obs.phase.as_str().to_string(),
        terminating: obs.terminating,
        node: obs.node_name.clone(),
        node_found: false,
        source: state.source.clone(),
        other_taints: 0,
        no_execute_taints: Vec::new(),
        tolerations: Vec::new(),
        device_taints: Vec::new(),
        decision: None,
        estimated: false,
    };
    let Some(node_name) = obs.node_name.clone() else {
        return Ok(out);
    };
    let added = resolved.added();
    let node = state
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node_name.as_str()));
    out.node_found = node.is_some();
    let mut taints: Vec<noexecute_engine::Taint> =
        node.map(|n| convert::node(n).taints).unwrap_or_default();
    for t in added.get(&node_name).into_iter().flatten() {
        taints.retain(|old| !old.matches(t));
        let mut t = t.clone();
        t.time_added = Some(now);
        taints.push(t);
    }
    let no_execute: Vec<&noexecute_engine::Taint> =
        taints.iter().filter(|t| t.is_no_execute()).collect();
    out.other_taints = taints.len() - no_execute.len();
    let gate = comparison_operators;
    let tolerations = &obs.tolerations;
    out.no_execute_taints = no_execute
        .iter()
        .map(|taint| TaintLine {
            taint: taint.to_string(),
            added: taint.time_added.map(plan::timestamp),
            tolerated_by: first_tolerating(tolerations, taint, gate).map(|i| i + 1),
        })
        .collect();
    out.tolerations = tolerations
        .iter()
        .enumerate()
        .map(|(i, t)| TolerationLine {
            toleration: t.to_string(),
            used_for: no_execute
                .iter()
                .filter(|taint| first_tolerating(tolerations, taint, gate) == Some(i))
                .map(|taint| taint.to_string())
                .collect(),
        })
        .collect();
    out.estimated = no_execute
        .iter()
        .any(|t| t.time_added.is_some_and(|a| a < now));
    let result = plan::run(state, resolved, now, None, policy, comparison_operators)?;
    let row = result.rows.iter().find(|r| r.pod == target);
    out.device_taints = row
        .into_iter()
        .flat_map(|r| &r.device_taints)
        .map(|t| DeviceTaintLine {
            device: t.device.clone(),
            claim: t.claim.clone(),
            taint: t.taint.to_string(),
            source: t.source.to_string(),
            added: t.taint.time_added.map(plan::timestamp),
            tolerated_by: plan::device_toleration(&t.taint, &t.tolerations).map(|t| t.to_string()),
            due: t.at.map(plan::timestamp),
        })
        .collect();
    out.decision = Some(match row {
        Some(r) => Decision {
            action: if r.evicted_at.is_some() {
                "evict"
            } else {
                "keep"
            },
            at: r.evicted_at.map(plan::timestamp),
            in_seconds: r
                .evicted_at
                .map(|at| (at.as_millis() - now.as_millis()).max(0) as f64 / 1000.0),
            reason: r.reason.clone(),
            evicted_at: r.evicted_at,
        },
        None => Decision {
            action: "keep",
            at: None,
            in_seconds: None,
            reason: "neither the node nor the pod's devices have NoExecute taints".to_string(),
            evicted_at: None,
        },
    });
    Ok(out)
}

impl Explanation {
    /// The explanation for people.
    pub fn text(&self, now: Time) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Pod {} (uid {}), phase {}{}",
            self.pod,
            self.uid,
            self.phase,
            if self.terminating {
                ", terminating"
            } else {
                ""
            }
        );
        let (Some(node_name), Some(decision)) = (&self.node, &self.decision) else {
            let _ = writeln!(out, "Not bound to a node: taint eviction does not apply.");
            return out;
        };
        if self.node_found {
            let _ = writeln!(
                out,
                "Node {node_name}: {} NoExecute taint(s){}",
                self.no_execute_taints.len(),
                if self.other_taints > 0 {
                    format!(
                        " ({} other taint(s) do not evict and are ignored)",
                        self.other_taints
                    )
                } else {
                    String::new()
                }
            );
        } else {
            let _ = writeln!(out, "Node {node_name}: not found in {}", self.source);
        }
        for t in &self.no_execute_taints {
            let since = t
                .added
                .as_ref()
                .map(|a| format!(" (added {a})"))
                .unwrap_or_default();
            match t.tolerated_by {
                Some(i) => {
                    let _ = writeln!(
                        out,
                        "  {}{since}\n      tolerated by #{i}: {}",
                        t.taint,
                        self.tolerations
                            .get(i - 1)
                            .map_or("", |l| l.toleration.as_str())
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "  {}{since}\n      NOT TOLERATED by any toleration",
                        t.taint
                    );
                }
            }
        }
        let _ = writeln!(out, "Tolerations ({}):", self.tolerations.len());
        for (i, t) in self.tolerations.iter().enumerate() {
            let note = if t.used_for.is_empty() {
                "matches no NoExecute taint on the node (or an earlier toleration does)".to_string()
            } else {
                format!("used for {}", t.used_for.join(", "))
            };
            let _ = writeln!(out, "  #{} {}\n      {note}", i + 1, t.toleration);
        }
        if !self.device_taints.is_empty() {
            let _ = writeln!(
                out,
                "Devices: {} NoExecute taint(s) on devices allocated to its claims",
                self.device_taints.len()
            );
        }
        for t in &self.device_taints {
            let since = t
                .added
                .as_ref()
                .map(|a| format!(", added {a}"))
                .unwrap_or_default();
            let fate = match (&t.tolerated_by, &t.due) {
                _ if t.added.is_none() => "ignored: it has no timeAdded".to_string(),
                (Some(by), Some(due)) => format!("tolerated by {by}: due {due}"),
                (Some(by), None) => format!("tolerated forever by {by}"),
                (None, Some(due)) => format!("NOT TOLERATED by the claim's request: due {due}"),
                (None, None) => "not tolerated, yet not due".to_string(),
            };
            let _ = writeln!(
                out,
                "  {} on device {} (claim {}; {}{since})\n      {fate}",
                t.taint, t.device, t.claim, t.source
            );
        }
        let line = match decision.evicted_at {
            Some(at) if at <= now => format!("evict now: {}", decision.reason),
            Some(at) => format!(
                "evict at {} ({}): {}",
                plan::timestamp(at),
                plan::relative(at, now),
                decision.reason
            ),
            None => format!("not evicted: {}", decision.reason),
        };
        let _ = writeln!(out, "Decision: {line}");
        if self.estimated {
            let _ = writeln!(
                out,
                "(Countdowns of existing taints are estimated from their timeAdded; upstream's controller counts from when it first saw the taint.)"
            );
        }
        out
    }
}
