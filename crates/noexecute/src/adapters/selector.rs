//! Equality-based label selectors (`k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-joined), as
//! `kubectl -l` takes them. Used by `plan --taint-selector` and the exclusion policy.

use std::collections::BTreeMap;
use std::fmt;

/// An equality-based label selector: `k=v`, `k==v`, `k!=v`, `k` (exists), `!k`, joined by
/// commas.
#[derive(Clone, Debug, PartialEq)]
pub struct Selector(Vec<Requirement>);

#[derive(Clone, Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
}

impl Selector {
    pub fn parse(s: &str) -> Result<Selector, String> {
        let mut reqs = Vec::new();
        for term in s.split(',').map(str::trim) {
            if term.is_empty() {
                return Err(format!("selector {s:?} has an empty term"));
            }
            if term.contains(" in ") || term.contains(" notin ") || term.contains('(') {
                return Err(format!(
                    "selector {s:?}: set-based terms (in, notin) are not supported; use k=v, k!=v, k or !k"
                ));
            }
            let req = if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some(k) = term.strip_prefix('!') {
                Requirement::NotExists(k.trim().into())
            } else {
                Requirement::Exists(term.into())
            };
            reqs.push(req);
        }
        Ok(Selector(reqs))
    }

    /// The label keys this selector reads.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|r| match r {
            Requirement::Equals(k, _)
            | Requirement::NotEquals(k, _)
            | Requirement::Exists(k)
            | Requirement::NotExists(k) => k.as_str(),
        })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        })
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let terms: Vec<String> = self
            .0
            .iter()
            .map(|r| match r {
                Requirement::Equals(k, v) => format!("{k}={v}"),
                Requirement::NotEquals(k, v) => format!("{k}!={v}"),
                Requirement::Exists(k) => k.clone(),
                Requirement::NotExists(k) => format!("!{k}"),
            })
            .collect();
        f.write_str(&terms.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors() {
        let labels: BTreeMap<String, String> = [
            ("zone".to_string(), "a".to_string()),
            ("gpu".to_string(), "yes".to_string()),
        ]
        .into();
        let m = |s: &str| Selector::parse(s).map(|sel| sel.matches(&labels));
        assert_eq!(m("zone=a"), Ok(true));
        assert_eq!(m("zone==a,gpu"), Ok(true));
        assert_eq!(m("zone!=a"), Ok(false));
        assert_eq!(m("!gpu"), Ok(false));
        assert_eq!(m("zone=b"), Ok(false));
        assert!(Selector::parse("zone in (a,b)").is_err());
        assert!(Selector::parse("zone=a,").is_err());
    }
}
