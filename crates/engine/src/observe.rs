//! What the engine is told: slim observations of nodes and pods, and the executor's reports.

use std::fmt;
use std::sync::Arc;

use crate::taint::Taint;
use crate::time::Time;
use crate::toleration::Toleration;

/// A pod's UID. The API server issues lowercase UUIDs, which are kept in 16 bytes; anything
/// else (hand-written scenarios, other servers) is kept verbatim.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Uid {
    Uuid([u8; 16]),
    Other(Box<str>),
}

impl Uid {
    pub fn new(s: &str) -> Uid {
        parse_uuid(s).map_or_else(|| Uid::Other(s.into()), Uid::Uuid)
    }
}

impl From<&str> for Uid {
    fn from(s: &str) -> Self {
        Uid::new(s)
    }
}

impl fmt::Display for Uid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Uid::Other(s) => f.write_str(s),
            Uid::Uuid(b) => {
                for (i, byte) in b.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{byte:02x}")?;
                }
                Ok(())
            }
        }
    }
}

/// Parses only the canonical lowercase form, so that printing gives back the exact string the
/// API server compares preconditions against.
fn parse_uuid(s: &str) -> Option<[u8; 16]> {
    let b = s.as_bytes();
    if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 16];
    let mut hex = b.iter().copied().filter(|&c| c != b'-');
    for byte in &mut out {
        let hi = nibble(hex.next()?)?;
        let lo = nibble(hex.next()?)?;
        *byte = hi << 4 | lo;
    }
    Some(out)
}

/// `status.phase`. Only "terminal or not" matters to the engine, and only under a policy.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Phase {
    #[default]
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl Phase {
    pub fn parse(s: &str) -> Phase {
        match s {
            "Running" => Phase::Running,
            "Succeeded" => Phase::Succeeded,
            "Failed" => Phase::Failed,
            "Pending" | "" => Phase::Pending,
            _ => Phase::Unknown,
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Unknown => "Unknown",
        }
    }
}

/// A node as the engine needs it: its name and taints (all of them; the engine keeps the
/// `NoExecute` ones).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeObservation {
    pub name: String,
    pub taints: Vec<Taint>,
}

/// A pod as the engine needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodObservation {
    pub namespace: String,
    pub name: String,
    pub uid: Uid,
    /// `spec.nodeName`; `None` while unscheduled.
    pub node_name: Option<String>,
    pub tolerations: Vec<Toleration>,
    pub phase: Phase,
    /// `metadata.deletionTimestamp` is set: somebody is already deleting the pod.
    pub terminating: bool,
    /// A policy outside the engine (namespace or label exclusions) says never to evict it.
    pub excluded: bool,
    /// `metadata.generation` (0 when unknown): the executor writes it as the condition's
    /// `observedGeneration`, as upstream does.
    pub generation: i64,
    /// `spec.resourceClaims`, resolved as upstream's `resourceclaim.Name` does (device taints;
    /// not kept by the engine).
    pub claims: Vec<crate::device::PodClaim>,
}

impl PodObservation {
    pub fn new(namespace: &str, name: &str, uid: &str, node: Option<&str>) -> Self {
        PodObservation {
            namespace: namespace.into(),
            name: name.into(),
            uid: Uid::new(uid),
            node_name: node.map(Into::into),
            tolerations: Vec::new(),
            phase: Phase::Running,
            terminating: false,
            excluded: false,
            generation: 0,
            claims: Vec::new(),
        }
    }

    pub fn with_tolerations(mut self, tolerations: Vec<Toleration>) -> Self {
        self.tolerations = tolerations;
        self
    }

    pub fn with_claims(mut self, claims: Vec<crate::device::PodClaim>) -> Self {
        self.claims = claims;
        self
    }
}

/// One eviction, as handed to the executor and reported back by it. The id changes every time
/// an eviction is created, so a report about an eviction that was cancelled or replaced since
/// is recognised and ignored.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EvictionId(pub u64);

/// What happened when the executor acted on an `Evict`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The pod was deleted (or evicted) by us.
    Evicted,
    /// The pod is gone, or its UID changed: nothing left to do.
    Gone,
    /// A fresh read of the node no longer justified an immediate eviction (the stale-cache
    /// guard): the eviction is dropped and the pod is decided again on the taints the engine
    /// holds now. A delayed verdict is scheduled from now; an immediate one is left to the node
    /// update the watch has yet to deliver (it re-decides every pod of the node), so a lagging
    /// watch cannot turn the guard into a loop. With `cache_moved` (the node's taints changed
    /// in the engine after the attempt began, so the read may be the older), the pod is
    /// decided again on the engine's taints whatever the verdict.
    Stale { cache_moved: bool },
    /// The attempt failed; try again at this time. The executor picks the time (backoff with
    /// jitter) so the engine stays deterministic.
    Failed { retry_at: Time },
}

/// The executor's report on one eviction attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
    pub eviction: EvictionId,
    pub outcome: Outcome,
}
