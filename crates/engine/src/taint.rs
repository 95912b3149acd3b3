//! Node taints, as far as taint eviction cares about them.

use std::fmt;

use crate::time::Time;

/// A taint effect. Only `NoExecute` drives eviction; the others are kept so that matching and
/// display stay exact.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
    /// Any other string, including the empty one. The API server rejects unknown effects on
    /// taints, but tolerations and hand-written scenarios may carry them; they match nothing but
    /// themselves.
    Other(Box<str>),
}

impl TaintEffect {
    pub fn parse(s: &str) -> TaintEffect {
        match s {
            "NoSchedule" => TaintEffect::NoSchedule,
            "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
            "NoExecute" => TaintEffect::NoExecute,
            other => TaintEffect::Other(other.into()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
            TaintEffect::Other(s) => s,
        }
    }
}

impl fmt::Display for TaintEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node taint (`core/v1 Taint`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: TaintEffect,
    /// When the taint was added, if the API object says so. Upstream ignores it; the engine uses
    /// it only under the restart-safe deadline policy.
    pub time_added: Option<Time>,
}

impl Taint {
    pub fn new(key: impl Into<String>, value: impl Into<String>, effect: TaintEffect) -> Self {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
            time_added: None,
        }
    }

    /// A `NoExecute` taint, the only kind the engine acts on.
    pub fn no_execute(key: impl Into<String>, value: impl Into<String>) -> Self {
        Taint::new(key, value, TaintEffect::NoExecute)
    }

    pub fn is_no_execute(&self) -> bool {
        self.effect == TaintEffect::NoExecute
    }

    /// Upstream `Taint.MatchTaint`: the same key and effect, whatever the value. This is how
    /// `kubectl taint` and our scenario format identify a taint to remove.
    pub fn matches(&self, other: &Taint) -> bool {
        self.key == other.key && self.effect == other.effect
    }
}

/// Upstream `Taint.ToString`: `key=value:effect`, dropping an empty value and keeping the
/// separator for an empty effect only when there is a value.
impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let effect = self.effect.as_str();
        match (self.value.is_empty(), effect.is_empty()) {
            (true, true) => write!(f, "{}", self.key),
            (true, false) => write!(f, "{}:{}", self.key, effect),
            (false, _) => write!(f, "{}={}:{}", self.key, self.value, effect),
        }
    }
}

/// Add `taint` as `kubectl taint` does: a taint with the same key and effect is replaced, any
/// other is kept. The one copy of this rule for `simulate` and `plan`.
pub fn add_or_replace(taints: &mut Vec<Taint>, taint: Taint) {
    taints.retain(|old| !old.matches(&taint));
    taints.push(taint);
}

/// The `NoExecute` subset of a taint list, in order (upstream `getNoExecuteTaints`).
pub fn no_execute_taints<'a>(taints: impl IntoIterator<Item = &'a Taint>) -> Vec<Taint> {
    taints
        .into_iter()
        .filter(|t| t.is_no_execute())
        .cloned()
        .collect()
}
