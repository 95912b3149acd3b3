//! `noexecute explain NAMESPACE/POD`: the pod's tolerations against its node's `NoExecute`
//! taints, which toleration matches which taint, the decision and the deadline. The decision
//! and the deadline come from the same engine run as `plan`.

use std::fmt::Write;

use noexecute_engine::Time;
use noexecute_engine::toleration::first_tolerating;

use crate::convert;
use crate::plan::{self, Hypothesis};
use crate::state::ClusterState;

pub fn explain(
    state: ClusterState,
    hypothesis: &Hypothesis,
    target: &str,
    now: Time,
    policy: &crate::policy::Policy,
    comparison_operators: bool,
) -> Result<String, String> {
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
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Pod {target} (uid {}), phase {}{}",
        obs.uid,
        obs.phase.as_str(),
        if obs.terminating { ", terminating" } else { "" }
    );
    let Some(node_name) = obs.node_name.clone() else {
        let _ = writeln!(out, "Not bound to a node: taint eviction does not apply.");
        return Ok(out);
    };
    let added = hypothesis.resolve(&state)?;
    let node = state
        .nodes
        .iter()
        .find(|n| n.metadata.name.as_deref() == Some(node_name.as_str()));
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
    let other = taints.len() - no_execute.len();
    match node {
        None => {
            let _ = writeln!(out, "Node {node_name}: not found in {}", state.source);
        }
        Some(_) => {
            let _ = writeln!(
                out,
                "Node {node_name}: {} NoExecute taint(s){}",
                no_execute.len(),
                if other > 0 {
                    format!(" ({other} other taint(s) do not evict and are ignored)")
                } else {
                    String::new()
                }
            );
        }
    }
    let gate = comparison_operators;
    let tolerations = &obs.tolerations;
    for taint in &no_execute {
        let since = taint
            .time_added
            .map(|t| format!(" (added {})", plan::timestamp(t)))
            .unwrap_or_default();
        match first_tolerating(tolerations, taint, gate) {
            Some(i) => {
                let _ = writeln!(
                    out,
                    "  {taint}{since}\n      tolerated by #{}: {}",
                    i + 1,
                    tolerations[i]
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "  {taint}{since}\n      NOT TOLERATED by any toleration"
                );
            }
        }
    }
    let _ = writeln!(out, "Tolerations ({}):", tolerations.len());
    for (i, t) in tolerations.iter().enumerate() {
        let used: Vec<String> = no_execute
            .iter()
            .filter(|taint| first_tolerating(tolerations, taint, gate) == Some(i))
            .map(|taint| taint.to_string())
            .collect();
        let note = if used.is_empty() {
            "matches no NoExecute taint on the node (or an earlier toleration does)".to_string()
        } else {
            format!("used for {}", used.join(", "))
        };
        let _ = writeln!(out, "  #{} {t}\n      {note}", i + 1);
    }
    let result = plan::run(state, hypothesis, now, None, policy, comparison_operators)?;
    let row = result.rows.iter().find(|r| r.pod == target);
    let decision = match row {
        Some(r) => match r.evicted_at {
            Some(at) if at <= now => format!("evict now: {}", r.reason),
            Some(at) => format!(
                "evict at {} ({}): {}",
                plan::timestamp(at),
                plan::relative(at, now),
                r.reason
            ),
            None => format!("not evicted: {}", r.reason),
        },
        None => "not evicted: the node has no NoExecute taints".to_string(),
    };
    let _ = writeln!(out, "Decision: {decision}");
    if no_execute
        .iter()
        .any(|t| t.time_added.is_some_and(|a| a < now))
    {
        let _ = writeln!(
            out,
            "(Countdowns of existing taints are estimated from their timeAdded; upstream's controller counts from when it first saw the taint.)"
        );
    }
    Ok(out)
}
