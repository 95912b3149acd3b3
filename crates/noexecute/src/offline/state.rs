//! A cluster's nodes and pods (and its DRA objects: ResourceSlices, ResourceClaims and
//! DeviceTaintRules) as `plan` and `explain` read them: from a snapshot file (the List that
//! `kubectl get nodes,pods -A -o json` prints, with `resourceslices,resourceclaims,devicetaintrules`
//! added for devices) or live and read-only through a kubeconfig.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use anyhow::Context;
use kube::api::ListParams;
use kube::{Api, Client};
use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::adapters::device::{DeviceTaintRule, ResourceClaim, ResourceSlice};
use crate::adapters::slim::{self, SlimNode, SlimPod};

use crate::adapters::input::{self, InputError};

/// Errors loading a snapshot; see [`crate::adapters::input::InputError`].
pub type SnapshotError = InputError;

pub use crate::adapters::slim::PodLabels;

/// Nodes and pods, and where they came from.
#[derive(Debug, Clone, Default)]
pub struct ClusterState {
    pub nodes: Vec<SlimNode>,
    pub pods: Vec<SlimPod>,
    pub slices: Vec<ResourceSlice>,
    pub claims: Vec<ResourceClaim>,
    pub rules: Vec<DeviceTaintRule>,
    /// The live read was not allowed to list the DRA objects: device taints are left out.
    pub devices_unreadable: bool,
    pub source: String,
    /// Items of other kinds that were skipped.
    pub skipped: usize,
}

impl ClusterState {
    /// Read a snapshot: a `List` (or `NodeList`/`PodList`) of nodes and pods, a bare array of
    /// them, or a single object, as JSON or YAML.
    ///
    /// Both are streamed: items are decoded one at a time straight into slim objects, so
    /// memory grows with the slim fields, not with the file (a 1 GB snapshot of 150,000
    /// realistic pods fits in a fraction of it; `docs/benchmarks.md`). YAML goes through the
    /// YAML parser's events as they come (serde-saphyr), at about a sixth of JSON's speed:
    /// JSON (`-o json`) is the quicker choice for large clusters.
    pub fn from_file(path: &Path, pod_labels: &PodLabels) -> Result<ClusterState, SnapshotError> {
        let read = |cause| InputError::Read {
            path: path.to_path_buf(),
            cause,
        };
        let file = File::open(path).map_err(read)?;
        let mut reader = BufReader::with_capacity(1 << 16, file);
        let head = reader.fill_buf().map_err(read)?;
        match head.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{' | b'[') => {
                let mut de = serde_json::Deserializer::from_reader(reader);
                Loader::new(path, pod_labels).json(&mut de)
            }
            _ => {
                let size = reader.get_ref().metadata().map_or(0, |m| m.len());
                Loader::new(path, pod_labels).yaml_reader(reader, size)
            }
        }
    }

    /// Read a snapshot held in memory (see [`ClusterState::from_file`]).
    pub fn parse(
        path: &Path,
        text: &str,
        pod_labels: &PodLabels,
    ) -> Result<ClusterState, SnapshotError> {
        if text.trim_start().starts_with(['{', '[']) {
            let mut de = serde_json::Deserializer::from_str(text);
            Loader::new(path, pod_labels).json(&mut de)
        } else {
            Loader::new(path, pod_labels).yaml_text(text)
        }
    }

    /// Whether any DRA object was read (device taints then apply).
    pub fn has_devices(&self) -> bool {
        !(self.slices.is_empty() && self.claims.is_empty() && self.rules.is_empty())
    }

    /// Read the cluster live. Only `list` calls, paginated; nodes and pods in protobuf (JSON
    /// where refused). ResourceSlices, ResourceClaims and DeviceTaintRules are read where the
    /// API server serves them, in JSON.
    pub async fn from_cluster(
        client: Client,
        pod_labels: &PodLabels,
    ) -> anyhow::Result<ClusterState> {
        let dra = crate::adapters::client::dra_served(&client)
            .await
            .context("reading which resource.k8s.io resources are served")?;
        let mut state = ClusterState {
            source: "the live cluster".into(),
            ..ClusterState::default()
        };
        state.nodes = list_slim(&client, "/api/v1/nodes", None)
            .await
            .context("listing nodes")?;
        state.pods = list_slim(&client, "/api/v1/pods", Some("spec.nodeName!="))
            .await
            .context("listing pods")?;
        for p in &mut state.pods {
            pod_labels.trim(&mut p.metadata);
        }
        // Device objects may be unreadable to someone allowed nodes and pods: then device
        // taints are left out, and said so.
        let forbidden = |e: &anyhow::Error| {
            e.downcast_ref::<kube::Error>()
                .is_some_and(|e| matches!(e, kube::Error::Api(s) if s.code == 403))
        };
        let read = async {
            if dra.slices_and_claims {
                state.slices = list_all(&client, "v1", "ResourceSlice", "resourceslices").await?;
                state.claims = list_all(&client, "v1", "ResourceClaim", "resourceclaims").await?;
            }
            if dra.rules {
                state.rules =
                    list_all(&client, "v1beta2", "DeviceTaintRule", "devicetaintrules").await?;
            }
            anyhow::Ok(())
        };
        match read.await {
            Ok(()) => {}
            Err(e) if forbidden(&e) => {
                tracing::warn!(
                    error = %e,
                    "not allowed to list ResourceSlices, ResourceClaims or DeviceTaintRules: device taints are left out"
                );
                state.slices.clear();
                state.claims.clear();
                state.rules.clear();
                state.devices_unreadable = true;
            }
            Err(e) => return Err(e),
        }
        Ok(state)
    }
}

/// Every node or bound pod, as the controller reads them (`listwatch`: in protobuf, JSON where
/// refused), in pages: `list` calls only, so a user allowed to list but not to watch may plan.
async fn list_slim<K: crate::controller::listwatch::Object>(
    client: &Client,
    path: &str,
    fields: Option<&str>,
) -> Result<Vec<K>, crate::controller::listwatch::Error> {
    use crate::controller::listwatch::{self, ContentType, InitialList};
    use futures::StreamExt;
    use kube::runtime::watcher::Event;
    let mut stream = std::pin::pin!(listwatch::list_watch::<K>(
        client.clone(),
        listwatch::Config {
            path: path.into(),
            page_size: 500,
            labels: None,
            fields: fields.map(str::to_string),
            content_type: ContentType::Protobuf,
            timeout_secs: 290,
            initial: InitialList::Pages,
        },
    ));
    let mut out = Vec::new();
    // The stream never ends; it is dropped (before its watch starts) once listed.
    while let Some(event) = stream.next().await {
        match event? {
            Event::Init => out.clear(),
            Event::InitApply(o) => out.push(o),
            Event::InitDone => break,
            Event::Apply(_) | Event::Delete(_) => {}
        }
    }
    Ok(out)
}

/// Every object of a `resource.k8s.io` resource, paginated.
async fn list_all<K: serde::de::DeserializeOwned + Clone + std::fmt::Debug>(
    client: &Client,
    version: &str,
    kind: &str,
    plural: &str,
) -> anyhow::Result<Vec<K>> {
    let ar = kube::api::ApiResource {
        group: "resource.k8s.io".into(),
        version: version.into(),
        api_version: format!("resource.k8s.io/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    };
    let api: Api<kube::core::DynamicObject> = Api::all_with(client.clone(), &ar);
    let mut out = Vec::new();
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = api
            .list(&lp)
            .await
            .map_err(anyhow::Error::new)
            .with_context(|| format!("listing {plural}"))?;
        for item in page.items {
            let name = item.metadata.name.clone().unwrap_or_default();
            let value = serde_json::to_value(&item)
                .with_context(|| format!("re-encoding {plural} {name}"))?;
            out.push(
                serde_json::from_value(value)
                    .with_context(|| format!("reading {plural} {name}"))?,
            );
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => break,
        }
    }
    Ok(out)
}

/// The DRA kinds a snapshot may hold beside nodes and pods.
const DEVICE_KINDS: [&str; 3] = ["ResourceSlice", "ResourceClaim", "DeviceTaintRule"];

/// One snapshot being decoded: the state so far, the item being read (for error messages) and
/// a semantic error that stopped the decoding.
struct Loader<'p> {
    path: &'p Path,
    pod_labels: &'p PodLabels,
    state: RefCell<ClusterState>,
    item: Cell<Option<(&'static str, usize)>>,
    failed: RefCell<Option<InputError>>,
}

impl<'p> Loader<'p> {
    fn new(path: &'p Path, pod_labels: &'p PodLabels) -> Self {
        Loader {
            path,
            pod_labels,
            state: RefCell::new(ClusterState {
                source: format!("snapshot {}", path.display()),
                ..ClusterState::default()
            }),
            item: Cell::new(None),
            failed: RefCell::new(None),
        }
    }

    fn json<'de, R: serde_json::de::Read<'de>>(
        self,
        de: &mut serde_json::Deserializer<R>,
    ) -> Result<ClusterState, SnapshotError> {
        let decoded = Document(&self)
            .deserialize(&mut *de)
            .and_then(|()| de.end());
        self.finish(decoded.map_err(|e| crate::adapters::input::json_error(&e)))
    }

    fn yaml_text(self, text: &str) -> Result<ClusterState, SnapshotError> {
        let decoded = serde_saphyr::with_deserializer_from_str_with_options(
            text,
            crate::adapters::input::yaml_options(text.len() as u64),
            |de| Document(&self).deserialize(de),
        );
        self.finish(decoded.map_err(|e| crate::adapters::input::yaml_error(&e)))
    }

    /// YAML from a reader of `size` bytes, item by item as JSON is.
    fn yaml_reader(self, reader: impl Read, size: u64) -> Result<ClusterState, SnapshotError> {
        let decoded = serde_saphyr::with_deserializer_from_reader_with_options(
            reader,
            crate::adapters::input::yaml_options(size),
            |de| Document(&self).deserialize(de),
        );
        self.finish(decoded.map_err(|e| crate::adapters::input::yaml_error(&e)))
    }

    fn invalid(&self, field: String, message: &str) -> InputError {
        InputError::Invalid {
            path: self.path.to_path_buf(),
            field,
            message: message.into(),
        }
    }

    /// Stop decoding with a semantic error (kept here; the decoder only sees that it failed).
    fn fail<E: de::Error>(&self, field: String, message: &str) -> E {
        *self.failed.borrow_mut() = Some(self.invalid(field, message));
        E::custom(message)
    }

    fn finish(
        self,
        decoded: Result<(), (usize, usize, String)>,
    ) -> Result<ClusterState, SnapshotError> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        if let Err((line, column, message)) = decoded {
            let message = match self.item.get() {
                Some((prefix, i)) => format!("{prefix}[{i}]: {message}"),
                None => message,
            };
            return Err(InputError::Syntax {
                path: self.path.to_path_buf(),
                line,
                column,
                message,
            });
        }
        let empty = {
            let state = self.state.borrow();
            state.nodes.is_empty() && state.pods.is_empty()
        };
        if empty {
            return Err(self.invalid(
                "items".into(),
                "no Node or Pod in the snapshot (make it with: kubectl get nodes,pods -A -o json)",
            ));
        }
        Ok(self.state.into_inner())
    }

    /// Keep one item. An error is (field, what is wrong with it).
    fn add(&self, field: &str, mut item: Item) -> Result<(), (String, String)> {
        let missing = |f: String| (f, "missing".to_string());
        let Some(kind) = item.kind.take() else {
            return Err(missing(format!("{field}.kind")));
        };
        let is_object = kind == "Node" || kind == "Pod" || DEVICE_KINDS.contains(&kind.as_str());
        let named = item
            .raw
            .get("metadata")
            .map_or(item.metadata.name.as_deref(), |m| m.get("name")?.as_str())
            .is_some_and(|n| !n.is_empty());
        if is_object && !named {
            return Err(missing(format!("{field}.metadata.name")));
        }
        // What came before the kind was kept as JSON: read it now.
        if kind == "Node" || kind == "Pod" {
            if let Some(meta) = item.raw.remove("metadata") {
                item.metadata = serde_json::from_value::<slim::Meta>(meta)
                    .map_err(|e| (format!("{field}.metadata"), e.to_string()))?
                    .0;
            }
            if let Some(spec) = item.raw.remove("spec").filter(|v| !v.is_null()) {
                item.spec = serde_json::from_value::<Option<ItemSpec>>(spec)
                    .map_err(|e| (format!("{field}.spec"), e.to_string()))?
                    .unwrap_or_default();
            }
            if let Some(status) = item.raw.remove("status").filter(|v| !v.is_null()) {
                item.status = serde_json::from_value(status)
                    .map_err(|e| (format!("{field}.status"), e.to_string()))?;
            }
        }
        if DEVICE_KINDS.contains(&kind.as_str()) {
            // resource.k8s.io/v1beta1 nests a device's fields under `basic`: its taints
            // would be lost without a word.
            let version = item.raw.get("apiVersion").and_then(|v| v.as_str());
            if version == Some("resource.k8s.io/v1beta1") {
                return Err((
                    format!("{field}.apiVersion"),
                    format!(
                        "{kind} in resource.k8s.io/v1beta1 is not read; list it as v1 (kubectl get resourceslices.v1.resource.k8s.io,resourceclaims.v1.resource.k8s.io -A -o json)"
                    ),
                ));
            }
            // A blank (null) part reads as absent.
            item.raw.retain(|_, v| !v.is_null());
            let object = serde_json::Value::Object(std::mem::take(&mut item.raw));
            let invalid =
                |(at, e): (String, String)| (input::joined(field, &at), format!("{kind}: {e}"));
            let mut state = self.state.borrow_mut();
            match kind.as_str() {
                "ResourceSlice" => state
                    .slices
                    .push(input::from_value(object).map_err(invalid)?),
                "ResourceClaim" => state
                    .claims
                    .push(input::from_value(object).map_err(invalid)?),
                _ => state
                    .rules
                    .push(input::from_value(object).map_err(invalid)?),
            }
            return Ok(());
        }
        let mut state = self.state.borrow_mut();
        match kind.as_str() {
            "Node" => state.nodes.push(SlimNode {
                metadata: item.metadata,
                spec: slim::NodeSpec {
                    taints: item.spec.taints,
                },
                status: None,
            }),
            "Pod" => {
                let mut metadata = item.metadata;
                self.pod_labels.trim(&mut metadata);
                if metadata.namespace.as_deref().is_none_or(str::is_empty) {
                    metadata.namespace = Some("default".into());
                }
                state.pods.push(SlimPod {
                    metadata,
                    spec: slim::PodSpec {
                        node_name: item.spec.node_name,
                        tolerations: item.spec.tolerations,
                        resource_claims: item.spec.resource_claims,
                    },
                    status: item.status,
                });
            }
            _ => state.skipped += 1,
        }
        Ok(())
    }
}

/// What is read of one item: a pod's and a node's fields together; the kind says which.
#[derive(Default)]
struct Item {
    kind: Option<String>,
    metadata: Box<kube::core::ObjectMeta>,
    spec: ItemSpec,
    status: Option<slim::PodStatus>,
    /// A DRA object's fields as JSON; or a spec or status that came before the kind.
    raw: serde_json::Map<String, serde_json::Value>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ItemSpec {
    #[serde(default)]
    node_name: Option<String>,
    #[serde(default)]
    tolerations: Vec<k8s_openapi::api::core::v1::Toleration>,
    #[serde(default)]
    taints: Vec<k8s_openapi::api::core::v1::Taint>,
    #[serde(default)]
    resource_claims: Vec<crate::adapters::device::PodResourceClaim>,
}

/// Reads one field of an item into `item`; a field of an object of another kind (once the
/// kind is known) is skipped unread.
fn item_field<'de, A: MapAccess<'de>>(
    item: &mut Item,
    key: &str,
    map: &mut A,
) -> Result<(), A::Error> {
    let kind = item.kind.as_deref();
    let device = kind.is_some_and(|k| DEVICE_KINDS.contains(&k));
    let other_kind = kind.is_some_and(|k| k != "Node" && k != "Pod") && !device;
    match key {
        "kind" => item.kind = Some(map.next_value()?),
        _ if other_kind => {
            map.next_value::<IgnoredAny>()?;
        }
        "apiVersion" | "metadata" | "spec" | "status" if device => {
            item.raw.insert(key.into(), map.next_value()?);
        }
        // The kind is not known yet: keep what it decides how to read as it is.
        "apiVersion" | "metadata" | "spec" | "status" if kind.is_none() => {
            item.raw.insert(key.into(), map.next_value()?);
        }
        "metadata" => item.metadata = map.next_value::<slim::Meta>()?.0,
        "spec" => item.spec = map.next_value::<Option<ItemSpec>>()?.unwrap_or_default(),
        "status" => item.status = map.next_value()?,
        _ => {
            map.next_value::<IgnoredAny>()?;
        }
    }
    Ok(())
}

/// The whole document: a List (`items`), an array of items, or one object.
struct Document<'a, 'p>(&'a Loader<'p>);

impl<'de> DeserializeSeed<'de> for Document<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Document<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a List of nodes and pods (kubectl get nodes,pods -A -o json)")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<(), A::Error> {
        Items(self.0, "").visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut single = Item::default();
        let mut fields = 0;
        let mut list = false;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            if key == "items" {
                list = true;
                map.next_value_seed(Items(self.0, "items"))?;
            } else {
                fields += 1;
                item_field(&mut single, &key, &mut map)?;
            }
        }
        if !list && fields > 0 {
            self.0.add("", single).map_err(|(field, message)| {
                self.0.fail(field.trim_start_matches('.').into(), &message)
            })?;
        }
        Ok(())
    }
}

/// The items, decoded and kept one at a time.
struct Items<'a, 'p>(&'a Loader<'p>, &'static str);

impl<'de> DeserializeSeed<'de> for Items<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for Items<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a list of items")
    }

    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Items(loader, prefix) = self;
        let mut i = 0;
        loop {
            loader.item.set(Some((prefix, i)));
            let Some(item) = seq.next_element_seed(ItemSeed)? else {
                break;
            };
            loader.item.set(None);
            loader
                .add(&format!("{prefix}[{i}]"), item)
                .map_err(|(field, message)| loader.fail(field, &message))?;
            i += 1;
        }
        loader.item.set(None);
        Ok(())
    }
}

struct ItemSeed;

impl<'de> DeserializeSeed<'de> for ItemSeed {
    type Value = Item;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Item, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ItemSeed {
    type Value = Item;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Item, A::Error> {
        let mut item = Item::default();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            item_field(&mut item, &key, &mut map)?;
        }
        Ok(item)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ClusterState, SnapshotError> {
        ClusterState::parse(Path::new("snap.json"), text, &PodLabels::All)
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
        let pod = crate::adapters::convert::pod(&state.pods[0]);
        assert_eq!(pod.tolerations[0].toleration_seconds, Some(60));
        let node = crate::adapters::convert::node(&state.nodes[0]);
        assert!(node.taints[0].time_added.is_some());
    }

    /// A claim whose metadata comes before its kind keeps its owner (the pod it was made for
    /// from a template); a v1beta1 slice is refused, not read without its taints.
    #[test]
    fn device_items_in_any_field_order() {
        let state = parse(
            r#"{"items":[
              {"kind":"Node","metadata":{"name":"n1"}},
              {"metadata":{"name":"c","namespace":"ns","uid":"cu",
                           "ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"p","uid":"pu","controller":true}]},
               "status":{"allocation":{"devices":{"results":[{"request":"r","driver":"d","pool":"p","device":"g"}]}}},
               "apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim"},
              {"spec":{"nodeName":"n1"},"metadata":{"name":"p","namespace":"ns","uid":"pu"},"kind":"Pod"}]}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(state.claims.len(), 1);
        assert_eq!(state.claims[0].metadata.owner_references.len(), 1);
        assert_eq!(
            state.claims[0].observe().owner.map(|u| u.to_string()),
            Some("pu".to_string())
        );
        assert_eq!(state.pods[0].spec.node_name.as_deref(), Some("n1"));
        assert_eq!(state.pods[0].metadata.uid.as_deref(), Some("pu"));
        let err = parse(
            r#"{"items":[{"apiVersion":"resource.k8s.io/v1beta1","kind":"ResourceSlice",
               "metadata":{"name":"s"},"spec":{"driver":"d","devices":[{"name":"g","basic":{}}]}}]}"#,
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(
            err.contains("items[0].apiVersion") && err.contains("v1beta1 is not read"),
            "{err}"
        );
    }

    #[test]
    fn errors_name_the_place() {
        let cases = [
            ("{\"items\": [}", "snap.json:1:12: items[0]: expected value"),
            (
                "{\"items\": 3}",
                "snap.json:1:11: invalid type: integer `3`, expected a list of items",
            ),
            (
                "{\"items\": [{\"metadata\": {\"name\": \"x\"}}]}",
                "snap.json: items[0].kind: missing",
            ),
            (
                "{\"items\": [{\"kind\": \"Pod\", \"metadata\": {}}]}",
                "snap.json: items[0].metadata.name: missing",
            ),
            (
                "{\"items\": [{\"kind\": \"Node\", \"metadata\": {\"name\": \"n\"}},\n {\"kind\": \"Pod\", \"apiVersion\": \"v1\", \"metadata\": {\"name\": \"p\"}, \"spec\": {\"tolerations\": [{\"tolerationSeconds\": \"ten\"}]}}]}",
                "snap.json:2:116: items[1]: invalid type: string \"ten\", expected i64",
            ),
            (
                "[{\"kind\": \"Pod\", \"metadata\": {\"name\": 7}}]",
                "snap.json:1:39: [0]: invalid type: integer `7`, expected a string",
            ),
            (
                "{\"kind\": \"Pod\", \"metadata\": {}}",
                "snap.json: metadata.name: missing",
            ),
            (
                "{\"items\": [{\"apiVersion\": \"resource.k8s.io/v1\", \"kind\": \"ResourceSlice\", \"metadata\": {\"name\": \"s\"}, \"spec\": {\"driver\": \"d\", \"devices\": [{\"name\": \"g\", \"taints\": [{\"key\": \"k\", \"effect\": 7}]}]}}]}",
                "snap.json: items[0].spec.devices[0].taints[0].effect: ResourceSlice: invalid type: integer `7`, expected a string",
            ),
            ("{\"kind\": \"List\", \"items\": []}", "no Node or Pod"),
            ("{\"kind\": \"List\", \"items\": null}", "no Node or Pod"),
            ("42", "expected a List of nodes and pods"),
            ("{\"items\": []} x", "snap.json:1:15: trailing characters"),
            (
                "items:\n  - kind: Pod\n    metadata: {name: [1]}\n",
                "snap.json:3:",
            ),
        ];
        for (text, want) in cases {
            let err = parse(text).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(want), "{text}\n=> {err}\nwant {want}");
        }
    }

    /// A realistic item: what is never read (managed fields, owner references, other
    /// annotations, containers, status beyond the phase) is not kept, and a file streams to
    /// the same state as text in memory, JSON or YAML.
    #[test]
    fn keeps_only_the_slim_fields_from_file_json_and_yaml() {
        let json = r#"{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":""},"items":[
          {"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","labels":{"zone":"a"},
            "annotations":{"noexecute.io/release-brake":"true","kubeadm.alpha.kubernetes.io/cri-socket":"x"},
            "managedFields":[{"manager":"kubelet","fieldsV1":{"f:status":{}}}]},
           "spec":{"podCIDR":"10.0.0.0/24","taints":[{"key":"k","effect":"NoExecute"}]},
           "status":{"capacity":{"cpu":"4"},"images":[{"names":["a"],"sizeBytes":1}]}},
          {"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","uid":"u",
            "resourceVersion":"7","generation":2,"deletionTimestamp":"2026-12-01T00:00:00Z",
            "annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"big\":true}"},
            "ownerReferences":[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"r","uid":"x"}],
            "managedFields":[{"manager":"kube-controller-manager","operation":"Update"}]},
           "spec":{"nodeName":"n1","containers":[{"name":"c","image":"i","env":[{"name":"A","value":"b"}]}],
             "volumes":[{"name":"v","emptyDir":{}}],
             "tolerations":[{"key":"k","operator":"Exists","effect":"NoExecute","tolerationSeconds":60}]},
           "status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}],"podIP":"10.0.0.5"}},
          {"apiVersion":"v1","kind":"Service","metadata":{"name":"s"},"spec":{"ports":[{"port":80}]}}]}"#;
        let from_text = parse(json).unwrap_or_else(|e| panic!("{e}"));
        let dir = std::env::temp_dir().join(format!("noexecute-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let file = dir.join("snap.json");
        std::fs::write(&file, json).unwrap_or_else(|e| panic!("{e}"));
        let from_file =
            ClusterState::from_file(&file, &PodLabels::All).unwrap_or_else(|e| panic!("{e}"));
        let value: serde_json::Value = serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}"));
        let yaml_text = serde_saphyr::to_string(&value).unwrap_or_else(|e| panic!("{e}"));
        let yaml_file = dir.join("snap.yaml");
        std::fs::write(&yaml_file, yaml_text).unwrap_or_else(|e| panic!("{e}"));
        let from_yaml =
            ClusterState::from_file(&yaml_file, &PodLabels::All).unwrap_or_else(|e| panic!("{e}"));
        std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        for state in [&from_text, &from_file, &from_yaml] {
            assert_eq!(state.nodes, from_text.nodes);
            assert_eq!(state.pods, from_text.pods);
            assert_eq!(state.skipped, 1);
        }
        let node = &from_text.nodes[0];
        assert!(crate::adapters::policy::release_annotated(&node.metadata));
        assert_eq!(node.metadata.annotations.as_ref().map(|a| a.len()), Some(1));
        assert!(node.metadata.managed_fields.is_none());
        assert_eq!(node.spec.taints.len(), 1);
        let pod = &from_text.pods[0];
        assert!(pod.metadata.annotations.is_none());
        assert!(pod.metadata.owner_references.is_none());
        assert!(pod.metadata.managed_fields.is_none());
        assert_eq!(pod.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(pod.metadata.generation, Some(2));
        assert!(pod.metadata.deletion_timestamp.is_some());
        assert_eq!(pod.spec.node_name.as_deref(), Some("n1"));
        assert_eq!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running")
        );
    }

    #[test]
    fn a_single_object_or_a_bare_array() {
        let one = parse(r#"{"kind":"Node","metadata":{"name":"n"}}"#);
        assert_eq!(
            one.map(|s| s.nodes.len()).unwrap_or_else(|e| panic!("{e}")),
            1
        );
        let many = parse(
            r#"[{"kind":"Pod","metadata":{"name":"p"}},{"kind":"Node","metadata":{"name":"n"}}]"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((many.nodes.len(), many.pods.len()), (1, 1));
        assert_eq!(many.pods[0].metadata.namespace.as_deref(), Some("default"));
    }

    /// The cause of an unreadable file is said once (it used to be said twice through the
    /// error chain).
    #[test]
    fn a_missing_file_says_why_once() {
        let err = ClusterState::from_file(Path::new("/nonexistent/snap.json"), &PodLabels::All)
            .err()
            .map(|e| format!("{:#}", anyhow::Error::from(e)))
            .unwrap_or_default();
        assert_eq!(err.matches("No such file").count(), 1, "{err}");
        assert!(err.starts_with("/nonexistent/snap.json: "), "{err}");
    }
}
