//! A cluster's nodes and pods as `plan` and `explain` read them: from a snapshot file (the
//! List that `kubectl get nodes,pods -A -o json` prints) or live and read-only through a
//! kubeconfig.

use std::path::Path;

use anyhow::Context;
use kube::api::ListParams;
use kube::{Api, Client};

use crate::slim::{self, SlimNode, SlimPod};

/// Errors loading a snapshot; see [`crate::input::InputError`].
pub type SnapshotError = crate::input::InputError;

/// Nodes and pods, and where they came from.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    pub nodes: Vec<SlimNode>,
    pub pods: Vec<SlimPod>,
    pub source: String,
    /// Items of other kinds that were skipped.
    pub skipped: usize,
}

impl ClusterState {
    /// Read a snapshot: a `List` (or `NodeList`/`PodList`) of nodes and pods, or a single
    /// object, as JSON or YAML.
    pub fn from_file(path: &Path) -> Result<ClusterState, SnapshotError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| crate::input::InputError::Read {
                path: path.to_path_buf(),
                source,
            })?;
        ClusterState::parse(path, &text)
    }

    pub fn parse(path: &Path, text: &str) -> Result<ClusterState, SnapshotError> {
        let syntax =
            |line: usize, column: usize, message: String| crate::input::InputError::Syntax {
                path: path.to_path_buf(),
                line,
                column,
                message,
            };
        let invalid = |field: String, message: String| crate::input::InputError::Invalid {
            path: path.to_path_buf(),
            field,
            message,
        };
        let value: serde_json::Value = if text.trim_start().starts_with(['{', '[']) {
            serde_json::from_str(text).map_err(|e| {
                let (line, column, message) = crate::input::json_error(&e);
                syntax(line, column, message)
            })?
        } else {
            serde_yaml_ng::from_str(text).map_err(|e| {
                let (line, column, message) = crate::input::yaml_error(&e);
                syntax(line, column, message)
            })?
        };
        let (items, prefix): (Vec<serde_json::Value>, &str) = match value {
            serde_json::Value::Object(ref map) if map.contains_key("items") => {
                match map.get("items") {
                    Some(serde_json::Value::Array(items)) => (items.clone(), "items"),
                    Some(serde_json::Value::Null) => (Vec::new(), "items"),
                    _ => return Err(invalid("items".into(), "must be a list".into())),
                }
            }
            serde_json::Value::Object(_) => (vec![value], ""),
            serde_json::Value::Array(items) => (items, ""),
            _ => {
                return Err(invalid(
                    "(top level)".into(),
                    "expected a List of nodes and pods (kubectl get nodes,pods -A -o json)".into(),
                ));
            }
        };
        let mut state = ClusterState {
            source: format!("snapshot {}", path.display()),
            ..ClusterState::default()
        };
        for (i, item) in items.into_iter().enumerate() {
            let field = if prefix.is_empty() {
                format!("[{i}]")
            } else {
                format!("{prefix}[{i}]")
            };
            let kind = item
                .get("kind")
                .and_then(|k| k.as_str())
                .map(str::to_string)
                .ok_or_else(|| invalid(format!("{field}.kind"), "missing".into()))?;
            let name = item
                .pointer("/metadata/name")
                .and_then(|n| n.as_str())
                .map(str::to_string);
            let describe = |e: serde_json::Error| {
                invalid(
                    field.clone(),
                    format!("{kind} {}: {e}", name.as_deref().unwrap_or("(unnamed)")),
                )
            };
            if name.as_deref().is_none_or(str::is_empty) && (kind == "Node" || kind == "Pod") {
                return Err(invalid(format!("{field}.metadata.name"), "missing".into()));
            }
            match kind.as_str() {
                "Node" => {
                    let mut node: SlimNode = serde_json::from_value(item).map_err(describe)?;
                    slim::trim_meta(&mut node.metadata);
                    state.nodes.push(node);
                }
                "Pod" => {
                    let mut pod: SlimPod = serde_json::from_value(item).map_err(describe)?;
                    slim::trim_meta(&mut pod.metadata);
                    if pod.metadata.namespace.as_deref().is_none_or(str::is_empty) {
                        pod.metadata.namespace = Some("default".into());
                    }
                    state.pods.push(pod);
                }
                _ => state.skipped += 1,
            }
        }
        if state.nodes.is_empty() && state.pods.is_empty() {
            return Err(invalid(
                "items".into(),
                "no Node or Pod in the snapshot (make it with: kubectl get nodes,pods -A -o json)"
                    .into(),
            ));
        }
        Ok(state)
    }

    /// Read the cluster live. Only `list` calls, paginated.
    pub async fn from_cluster(client: Client) -> anyhow::Result<ClusterState> {
        let nodes: Api<SlimNode> = Api::all_with(client.clone(), &slim::node_resource());
        let pods: Api<SlimPod> = Api::all_with(client, &slim::pod_resource());
        let mut state = ClusterState {
            source: "the live cluster".into(),
            ..ClusterState::default()
        };
        let mut lp = ListParams::default().limit(500);
        loop {
            let page = nodes.list(&lp).await.context("listing nodes")?;
            state.nodes.extend(page.items);
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => lp = lp.continue_token(&token),
                None => break,
            }
        }
        let mut lp = ListParams::default().limit(500).fields("spec.nodeName!=");
        loop {
            let page = pods.list(&lp).await.context("listing pods")?;
            state.pods.extend(page.items.into_iter().map(|mut p| {
                slim::trim_meta(&mut p.metadata);
                p
            }));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => lp = lp.continue_token(&token),
                None => break,
            }
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ClusterState, SnapshotError> {
        ClusterState::parse(Path::new("snap.json"), text)
    }

    #[test]
    fn reads_a_kubectl_list() {
        let state = parse(
            r#"{"apiVersion":"v1","kind":"List","items":[
              {"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","labels":{"z":"a"}},
               "spec":{"taints":[{"key":"k","effect":"NoExecute","timeAdded":"2026-11-30T10:00:00Z"}]}},
              {"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","uid":"u"},
               "spec":{"nodeName":"n1","containers":[{"name":"c","image":"i"}],
                       "tolerations":[{"key":"k","operator":"Exists","effect":"NoExecute","tolerationSeconds":60}]},
               "status":{"phase":"Running"}},
              {"apiVersion":"v1","kind":"Service","metadata":{"name":"s"}}]}"#,
        );
        let state = state.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(state.nodes.len(), 1);
        assert_eq!(state.pods.len(), 1);
        assert_eq!(state.skipped, 1);
        let pod = crate::convert::pod(&state.pods[0]);
        assert_eq!(pod.tolerations[0].toleration_seconds, Some(60));
        let node = crate::convert::node(&state.nodes[0]);
        assert!(node.taints[0].time_added.is_some());
    }

    #[test]
    fn errors_name_the_place() {
        let cases = [
            ("{\"items\": [}", "snap.json:1:"),
            ("{\"items\": 3}", "snap.json: items:"),
            (
                "{\"items\": [{\"metadata\": {\"name\": \"x\"}}]}",
                "snap.json: items[0].kind:",
            ),
            (
                "{\"items\": [{\"kind\": \"Pod\", \"metadata\": {}}]}",
                "snap.json: items[0].metadata.name:",
            ),
            (
                "{\"items\": [{\"kind\": \"Pod\", \"apiVersion\": \"v1\", \"metadata\": {\"name\": \"p\"}, \"spec\": {\"tolerations\": [{\"tolerationSeconds\": \"ten\"}]}}]}",
                "snap.json: items[0]: Pod p:",
            ),
            ("{\"kind\": \"List\", \"items\": []}", "no Node or Pod"),
            ("42", "expected a List"),
        ];
        for (text, want) in cases {
            let err = parse(text).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(want), "{text}\n=> {err}");
        }
    }
}
