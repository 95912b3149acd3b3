//! The rules of `docs/parity.md`, written again from the document (§2, §8, §9) for the checker:
//! which of a pod's tolerations a node's `NoExecute` taints use, and how long they allow.
//! Nothing here comes from the engine; the two must agree because both follow the document.

use crate::audit::{Micros, parse_time};
use serde_json::Value;

/// The largest `tolerationSeconds` honoured as a number (`docs/deviations.md` #7): above it
/// Go's nanosecond arithmetic wraps, and noexecute tolerates forever.
pub const MAX_SECONDS: i64 = 9_223_372_036;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
    /// `timeAdded`, when the writer set one.
    pub added: Option<Micros>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toleration {
    pub key: String,
    pub operator: String,
    pub value: String,
    pub effect: String,
    pub seconds: Option<i64>,
}

/// What a node's `NoExecute` taints mean for one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Demand {
    /// No `NoExecute` taint, or all tolerated without a limit.
    Stay,
    /// All tolerated; the smallest used limit is `limit_ms`. `added` is the `timeAdded` of the
    /// taint whose toleration set that limit (for restart-safe deadlines).
    After {
        limit_ms: i64,
        added: Option<Micros>,
    },
    /// Some taint is not tolerated.
    Now,
}

/// §2.1: one toleration against one taint.
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if !t.effect.is_empty() && t.effect != taint.effect {
        return false;
    }
    if !t.key.is_empty() && t.key != taint.key {
        return false;
    }
    match t.operator.as_str() {
        "Exists" => true,
        "Equal" | "" => t.value == taint.value,
        // Lt/Gt only with an alpha gate the soak never turns on; anything else never matches.
        _ => false,
    }
}

/// §2.2 and §9: the demand of `taints` (all of the node's taints; only `NoExecute` ones count)
/// on a pod with `tolerations`.
pub fn demand(taints: &[Taint], tolerations: &[Toleration]) -> Demand {
    let mut smallest: Option<(i64, Option<Micros>)> = None;
    let mut any = false;
    for taint in taints.iter().filter(|t| t.effect == "NoExecute") {
        any = true;
        // The first toleration that tolerates the taint is the one used.
        let Some(used) = tolerations.iter().find(|t| tolerates(t, taint)) else {
            return Demand::Now;
        };
        let Some(seconds) = used.seconds else {
            continue;
        };
        if seconds > MAX_SECONDS {
            continue;
        }
        let ms = seconds.max(0) * 1000;
        if smallest.is_none_or(|(s, _)| ms < s) {
            smallest = Some((ms, taint.added));
        }
    }
    match (any, smallest) {
        (true, Some((limit_ms, added))) => Demand::After { limit_ms, added },
        _ => Demand::Stay,
    }
}

/// Taints from a node object (its `spec.taints`).
pub fn taints_of(node: &Value) -> Vec<Taint> {
    let Some(list) = node.pointer("/spec/taints").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .map(|t| Taint {
            key: str_at(t, "/key"),
            value: str_at(t, "/value"),
            effect: str_at(t, "/effect"),
            added: t
                .pointer("/timeAdded")
                .and_then(Value::as_str)
                .and_then(parse_time),
        })
        .collect()
}

/// Tolerations from a pod object (its `spec.tolerations`).
pub fn tolerations_of(pod: &Value) -> Vec<Toleration> {
    let Some(list) = pod.pointer("/spec/tolerations").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .map(|t| Toleration {
            key: str_at(t, "/key"),
            operator: str_at(t, "/operator"),
            value: str_at(t, "/value"),
            effect: str_at(t, "/effect"),
            seconds: t.pointer("/tolerationSeconds").and_then(Value::as_i64),
        })
        .collect()
}

fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// A label selector as `--node-selector` and `--exclude-selector` take it: `k=v`, `k==v`,
/// `k!=v`, `k`, `!k`, comma-joined. Set-based terms (`in`, `notin`) are not supported: the
/// soak never uses them, and a checker must not guess.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector(Vec<Requirement>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Has(String),
    HasNot(String),
}

impl std::str::FromStr for Selector {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let req = if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = term.strip_prefix('!') {
                Requirement::HasNot(k.trim().into())
            } else if term.contains(' ') {
                return Err(format!(
                    "selector term {term:?}: only k=v, k!=v, k and !k are supported"
                ));
            } else {
                Requirement::Has(term.into())
            };
            out.push(req);
        }
        Ok(Selector(out))
    }
}

impl Selector {
    /// Whether `labels` (a JSON object, or nothing) match every requirement. The empty selector
    /// matches everything.
    pub fn matches(&self, labels: Option<&Value>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => get(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => get(k) != Some(v.as_str()),
            Requirement::Has(k) => get(k).is_some(),
            Requirement::HasNot(k) => get(k).is_none(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
            added: None,
        }
    }

    fn tol(key: &str, op: &str, value: &str, effect: &str, seconds: Option<i64>) -> Toleration {
        Toleration {
            key: key.into(),
            operator: op.into(),
            value: value.into(),
            effect: effect.into(),
            seconds,
        }
    }

    #[test]
    fn matching_follows_parity_2_1() {
        let t = taint("k", "v", "NoExecute");
        assert!(tolerates(&tol("k", "Equal", "v", "NoExecute", None), &t));
        assert!(tolerates(&tol("k", "", "v", "", None), &t));
        assert!(!tolerates(&tol("k", "Equal", "w", "", None), &t));
        assert!(tolerates(&tol("", "Exists", "", "", None), &t));
        assert!(!tolerates(&tol("k", "Exists", "", "NoSchedule", None), &t));
        assert!(!tolerates(&tol("k", "Lt", "v", "", None), &t));
        assert!(!tolerates(&tol("j", "Exists", "", "", None), &t));
        // An empty value matches only an empty value.
        assert!(!tolerates(&tol("k", "Equal", "", "", None), &t));
    }

    #[test]
    fn the_first_match_is_used_and_the_smallest_limit_wins() {
        let taints = vec![
            taint("a", "", "NoExecute"),
            taint("b", "", "NoExecute"),
            taint("c", "", "NoSchedule"),
        ];
        // First match wins even when a later toleration would tolerate forever (§2.2).
        let tols = vec![
            tol("a", "Exists", "", "", Some(10)),
            tol("", "Exists", "", "", None),
        ];
        assert_eq!(
            demand(&taints, &tols),
            Demand::After {
                limit_ms: 10_000,
                added: None
            }
        );
        assert_eq!(
            demand(&taints, &[tol("a", "Exists", "", "", None)]),
            Demand::Now
        );
        assert_eq!(
            demand(&taints, &[tol("", "Exists", "", "", None)]),
            Demand::Stay
        );
        // Any limit ≤ 0 is immediate; a huge one is forever.
        let tols = vec![
            tol("a", "Exists", "", "", Some(-5)),
            tol("", "Exists", "", "", Some(30)),
        ];
        assert_eq!(
            demand(&taints, &tols),
            Demand::After {
                limit_ms: 0,
                added: None
            }
        );
        assert_eq!(
            demand(&taints, &[tol("", "Exists", "", "", Some(MAX_SECONDS + 1))]),
            Demand::Stay
        );
        // Only NoExecute taints count.
        assert_eq!(demand(&[taint("c", "", "NoSchedule")], &[]), Demand::Stay);
    }

    #[test]
    fn bodies_are_read() {
        let node = json!({"spec": {"taints": [
            {"key": "k", "effect": "NoExecute", "timeAdded": "1970-01-01T00:00:02Z"},
            {"key": "m", "value": "x", "effect": "NoSchedule"}]}});
        let taints = taints_of(&node);
        assert_eq!(taints.len(), 2);
        assert_eq!(taints[0].added, Some(2_000_000));
        let pod = json!({"spec": {"tolerations": [
            {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 7}]}});
        assert_eq!(tolerations_of(&pod)[0].seconds, Some(7));
    }

    #[test]
    fn selectors() {
        let s: Selector = "a=1,b!=2,c,!d".parse().unwrap();
        assert!(s.matches(Some(&json!({"a": "1", "c": ""}))));
        assert!(!s.matches(Some(&json!({"a": "1", "c": "", "d": "x"}))));
        assert!(!s.matches(Some(&json!({"a": "1", "b": "2", "c": ""}))));
        assert!(Selector::default().matches(None));
        assert!("a in (x)".parse::<Selector>().is_err());
    }
}
