//! `noexecute plan`: who would be evicted, and when, if these taints were added to a real
//! cluster's nodes now; and who is safe, and why.
//!
//! The engine is fed the cluster's current nodes and pods at the current wall-clock time, then
//! the hypothetical taints, and runs on a virtual clock until nothing is pending. Existing
//! `NoExecute` taints are counted from their `timeAdded` (the best estimate of when the
//! running controller started counting), hypothetical ones from now.

use std::collections::{BTreeMap, BTreeSet};

use noexecute_engine::pipeline::Watched;
use noexecute_engine::taint::add_or_replace;
use noexecute_engine::toleration::{TolerationTime, first_tolerating};
use noexecute_engine::{Action, Pipeline, PipelineEffect, Taint, TaintEffect, Time, Verdict};

use crate::adapters::convert;
pub use crate::adapters::selector::Selector;
use crate::offline::state::ClusterState;

/// A taint as `kubectl taint` writes it: `key=value:Effect` or `key:Effect`.
pub fn parse_taint(s: &str) -> Result<Taint, String> {
    let (kv, effect) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("taint {s:?} needs an effect: key[=value]:NoExecute"))?;
    let effect = match effect {
        "NoExecute" | "NoSchedule" | "PreferNoSchedule" => TaintEffect::parse(effect),
        other => {
            return Err(format!(
                "taint {s:?}: unknown effect {other:?}; expected NoExecute, NoSchedule or PreferNoSchedule"
            ));
        }
    };
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if key.is_empty() {
        return Err(format!("taint {s:?} has an empty key"));
    }
    Ok(Taint::new(key, value, effect))
}

/// `--taint NODE=key=value:Effect`.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeTaint {
    pub node: String,
    pub taint: Taint,
}

pub fn parse_node_taint(s: &str) -> Result<NodeTaint, String> {
    let (node, taint) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected NODE=key[=value]:Effect"))?;
    if node.is_empty() {
        return Err(format!("{s:?}: empty node name"));
    }
    Ok(NodeTaint {
        node: node.into(),
        taint: parse_taint(taint)?,
    })
}

/// The hypothetical change: taints on named nodes and on nodes matching selectors.
#[derive(Clone, Debug, Default)]
pub struct Hypothesis {
    pub taints: Vec<NodeTaint>,
    pub selected: Vec<(Selector, Taint)>,
}

impl Hypothesis {
    /// Node → taints to add, checked against the cluster: every named node must exist and
    /// every selector must match at least one node.
    pub fn resolve(&self, state: &ClusterState) -> Result<BTreeMap<String, Vec<Taint>>, String> {
        let mut out: BTreeMap<String, Vec<Taint>> = BTreeMap::new();
        let names: BTreeSet<&str> = state
            .nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        for t in &self.taints {
            if !names.contains(t.node.as_str()) {
                return Err(format!(
                    "--taint: node {} is not in {}",
                    t.node, state.source
                ));
            }
            out.entry(t.node.clone()).or_default().push(t.taint.clone());
        }
        for (selector, taint) in &self.selected {
            let mut matched = 0;
            for node in &state.nodes {
                let labels = node.metadata.labels.clone().unwrap_or_default();
                if selector.matches(&labels) {
                    matched += 1;
                    let name = node.metadata.name.clone().unwrap_or_default();
                    out.entry(name).or_default().push(taint.clone());
                }
            }
            if matched == 0 {
                return Err(format!(
                    "--taint-selector: {selector} matches no node in {}",
                    state.source
                ));
            }
        }
        Ok(out)
    }
}

/// What would happen to one pod on an affected node.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub pod: String,
    pub node: String,
    /// When it would be evicted; `None` when it is safe (within the horizon) or held.
    pub evicted_at: Option<Time>,
    /// Due, but held by the mass-eviction brake (or rate limits) past the horizon.
    pub held: bool,
    pub reason: String,
}

impl Row {
    pub fn decision(&self) -> &'static str {
        if self.evicted_at.is_some() {
            "evict"
        } else if self.held {
            "held"
        } else {
            "safe"
        }
    }
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub now: Time,
    pub rows: Vec<Row>,
    /// Nodes carrying `NoExecute` taints once the hypothesis is applied.
    pub affected_nodes: usize,
    pub unaffected_pods: usize,
    pub unaffected_nodes: usize,
    pub source: String,
    pub horizon: Option<Time>,
    /// The mass-eviction brake engaged with the hypothesis applied: (tainted, nodes).
    pub brake: Option<(usize, usize)>,
}

/// Run the plan at wall-clock time `now` (Unix milliseconds), up to `horizon` if given.
/// Consumes the state: each pod is dropped once the engine has it, so a large snapshot is not
/// held twice.
pub fn run(
    state: ClusterState,
    hypothesis: &Hypothesis,
    now: Time,
    horizon: Option<Time>,
    policy: &crate::adapters::policy::Policy,
    comparison_operators: bool,
) -> Result<Plan, String> {
    let added = hypothesis.resolve(&state)?;
    let ClusterState {
        nodes: listed_nodes,
        pods: listed_pods,
        source,
        ..
    } = state;
    let node_count = listed_nodes.len();
    let mut config = policy.engine_config(comparison_operators);
    // Existing taints are counted from timeAdded whatever the policy: it is the best estimate
    // of when the running controller started counting.
    config.deadline_from_time_added = true;
    let mut pipeline_config = policy.pipeline_config(comparison_operators, usize::MAX, 0);
    pipeline_config.engine = config;
    // As the live controller: nothing starts before the whole state is known (so the brake
    // sees every node), then this "replica" leads.
    let mut pipeline = Pipeline::new(pipeline_config);
    pipeline.listing_started(Watched::Nodes);
    pipeline.listing_started(Watched::Pods);
    let mut nodes: BTreeMap<String, Vec<Taint>> = BTreeMap::new();
    let mut released: BTreeSet<String> = BTreeSet::new();
    for n in listed_nodes {
        let obs = convert::node(&n);
        if crate::adapters::policy::release_annotated(&n.metadata) {
            released.insert(obs.name.clone());
        }
        nodes.insert(obs.name.clone(), obs.taints.clone());
        pipeline.upsert_node(&obs, released.contains(&obs.name), now);
    }
    for p in listed_pods {
        let mut obs = convert::pod(&p);
        obs.excluded = policy.excludes(&obs.namespace, p.metadata.labels.as_ref());
        pipeline.upsert_pod(obs, now);
    }
    for (node, taints) in &added {
        let current = nodes.entry(node.clone()).or_default();
        for t in taints {
            let mut t = t.clone();
            t.time_added = Some(now);
            add_or_replace(current, t);
        }
        let obs = noexecute_engine::NodeObservation {
            name: node.clone(),
            taints: current.clone(),
        };
        pipeline.upsert_node(&obs, released.contains(node), now);
    }
    pipeline.listing_done(Watched::Nodes, now);
    pipeline.listing_done(Watched::Pods, now);
    pipeline.set_leading(true, now);
    // The planned executor evicts at once; evicted pods stay (terminating) for the rows.
    let mut clock = now;
    let mut brake = None;
    let mut evicted: BTreeMap<String, (Time, String)> = BTreeMap::new();
    let mut skipped: BTreeSet<String> = BTreeSet::new();
    let mut due: BTreeMap<String, (Time, String)> = BTreeMap::new();
    loop {
        while let Some(effect) = pipeline.poll_effect_evicting_at_once(clock) {
            match effect {
                PipelineEffect::Decided(Action::Evict {
                    pod,
                    cause,
                    deadline,
                    ..
                }) => {
                    let reason = cause.map_or_else(
                        || "scheduled earlier; the node no longer reports its taints".into(),
                        |c| c.to_string(),
                    );
                    due.insert(pod.to_string(), (deadline, reason));
                }
                PipelineEffect::Decided(Action::Skip { pod, .. }) => {
                    skipped.insert(pod.to_string());
                }
                PipelineEffect::Brake(noexecute_engine::BrakeChange::Engaged {
                    tainted,
                    nodes,
                    ..
                }) => brake = Some((tainted, nodes)),
                PipelineEffect::Start(attempt) => {
                    let pod = attempt.pod.to_string();
                    if let Some((deadline, reason)) = due.get(&pod) {
                        // A deadline already past at `now` (an old taint in a snapshot) starts
                        // at `now`: overdue, not held. Only a start after both was paced.
                        let could_start = (*deadline).max(now);
                        let reason = if clock > could_start {
                            format!(
                                "{reason} (held {:.1}s by pacing)",
                                clock.since(could_start).as_secs_f64()
                            )
                        } else if *deadline < now {
                            format!(
                                "{reason} (overdue: due {:.1}s before now)",
                                now.since(*deadline).as_secs_f64()
                            )
                        } else {
                            reason.clone()
                        };
                        evicted.insert(pod, (clock, reason));
                    }
                }
                _ => {}
            }
        }
        match pipeline.next_wake().map(|d| d.max(clock)) {
            Some(d) if horizon.is_none_or(|h| d <= h) => {
                clock = d;
                pipeline.tick(clock);
            }
            _ => break,
        }
    }
    let engine = &pipeline;

    let mut rows = Vec::new();
    let mut unaffected_pods = 0;
    let mut affected: BTreeSet<String> = BTreeSet::new();
    for view in engine.pods() {
        let pod = view.pod.to_string();
        let Some(node) = view.pod.node.as_deref() else {
            continue;
        };
        let Some(taints) = engine.node_taints(node) else {
            unaffected_pods += 1;
            continue;
        };
        affected.insert(node.to_string());
        let row = if let Some((at, reason)) = evicted.get(&pod) {
            Row {
                pod,
                node: node.into(),
                evicted_at: Some(*at),
                held: false,
                reason: reason.clone(),
            }
        } else if let Some((deadline, reason)) = due.get(&pod) {
            let why = match brake {
                Some((tainted, nodes)) if pipeline.braking() && !pipeline.is_released(node) => {
                    format!(
                        "held by the mass-eviction brake ({tainted} of {nodes} nodes NoExecute-tainted); release with the node annotation {}=true",
                        crate::adapters::policy::RELEASE_ANNOTATION
                    )
                }
                _ => "held by the rate limits past the horizon".to_string(),
            };
            Row {
                pod,
                node: node.into(),
                evicted_at: None,
                held: true,
                reason: format!(
                    "due {}: {reason}; {why}",
                    crate::offline::plan::relative(*deadline, now)
                ),
            }
        } else {
            let verdict = noexecute_engine::toleration::verdict(
                taints,
                view.tolerations,
                config.comparison_operators,
            );
            let reason = if skipped.contains(&pod) || view.terminating {
                "already terminating".to_string()
            } else if view.excluded {
                "excluded by policy".to_string()
            } else if let Some(e) = view.eviction {
                format!(
                    "would be evicted at {} (after the horizon)",
                    crate::offline::plan::relative(e.deadline, now)
                )
            } else {
                match verdict {
                    Verdict::Tolerated {
                        time: TolerationTime::Forever,
                        ..
                    } => forever_reason(taints, view.tolerations, config.comparison_operators),
                    _ => "not evicted".to_string(),
                }
            };
            Row {
                pod,
                node: node.into(),
                evicted_at: None,
                held: false,
                reason,
            }
        };
        rows.push(row);
    }
    rows.sort_by(|a, b| {
        (
            a.evicted_at.is_none(),
            !a.held,
            a.evicted_at,
            &a.node,
            &a.pod,
        )
            .cmp(&(
                b.evicted_at.is_none(),
                !b.held,
                b.evicted_at,
                &b.node,
                &b.pod,
            ))
    });
    let unaffected_nodes = node_count.saturating_sub(affected.len());
    Ok(Plan {
        now,
        rows,
        affected_nodes: affected.len(),
        unaffected_pods,
        unaffected_nodes,
        source,
        horizon,
        brake: brake.filter(|_| pipeline.braking()),
    })
}

/// "tolerates a:NoExecute forever (a Exists NoExecute forever)", for each taint.
fn forever_reason(
    taints: &[Taint],
    tolerations: &[noexecute_engine::Toleration],
    gate: bool,
) -> String {
    let parts: Vec<String> = taints
        .iter()
        .map(
            |taint| match first_tolerating(tolerations, taint, gate).map(|i| &tolerations[i]) {
                Some(t) => format!("{taint} by \"{t}\""),
                None => format!("{taint} (not tolerated)"),
            },
        )
        .collect();
    format!("tolerates forever: {}", parts.join("; "))
}

pub use crate::adapters::time::{relative, timestamp};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taint_syntax() {
        assert_eq!(
            parse_taint("k=v:NoExecute"),
            Ok(Taint::new("k", "v", TaintEffect::NoExecute))
        );
        assert_eq!(
            parse_taint("k:NoExecute"),
            Ok(Taint::new("k", "", TaintEffect::NoExecute))
        );
        assert!(parse_taint("k=v").is_err());
        assert!(parse_taint("k=v:Sometimes").is_err());
        assert!(parse_taint(":NoExecute").is_err());
        assert_eq!(
            parse_node_taint("node-a=k=v:NoExecute").map(|t| t.node),
            Ok("node-a".into())
        );
        assert!(parse_node_taint("k:NoExecute").is_err());
    }

    #[test]
    fn relative_times() {
        let now = Time::from_secs(1000);
        assert_eq!(relative(now, now), "+0s");
        assert_eq!(relative(now.plus_secs(300), now), "+5m00s");
        assert_eq!(relative(now.plus_secs(3720), now), "+1h02m");
    }
}
