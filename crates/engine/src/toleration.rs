//! Pod tolerations and how they match taints, exactly as upstream's `ToleratesTaint`,
//! `GetMatchingTolerations` and `getMinTolerationTime` decide.

use std::fmt;
use std::time::Duration;

use crate::taint::{Taint, TaintEffect};

/// The largest `tolerationSeconds` that Go's `time.Duration(s) * time.Second` holds without
/// wrapping (`i64::MAX / 1e9`). Upstream wraps past it, so a toleration of 300 years can turn
/// into a negative or a tiny duration. We treat anything larger as "tolerate forever", which is
/// what such a value means to the person who wrote it.
pub const MAX_TOLERATION_SECONDS: i64 = i64::MAX / 1_000_000_000;

/// A toleration operator. The empty string means `Equal`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    Equal,
    Exists,
    /// `Lt` and `Gt` compare the taint's value as an integer against the toleration's
    /// threshold. Upstream gates them behind the alpha `TaintTolerationComparisonOperators`
    /// feature; without the gate they match nothing.
    Lt,
    Gt,
    /// Any other operator string: matches nothing.
    Other(Box<str>),
}

impl Operator {
    pub fn parse(s: &str) -> Operator {
        match s {
            "" | "Equal" => Operator::Equal,
            "Exists" => Operator::Exists,
            "Lt" => Operator::Lt,
            "Gt" => Operator::Gt,
            other => Operator::Other(other.into()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Operator::Equal => "Equal",
            Operator::Exists => "Exists",
            Operator::Lt => "Lt",
            Operator::Gt => "Gt",
            Operator::Other(s) => s,
        }
    }
}

/// A pod toleration (`core/v1 Toleration`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Toleration {
    /// Empty matches every key (the API then requires `Exists`).
    pub key: String,
    pub operator: Operator,
    pub value: String,
    /// `None` matches every effect.
    pub effect: Option<TaintEffect>,
    /// `None` tolerates forever; `<= 0` means evict at once.
    pub toleration_seconds: Option<i64>,
}

impl Toleration {
    /// `key=value:effect` tolerated forever with the `Equal` operator.
    pub fn equal(
        key: impl Into<String>,
        value: impl Into<String>,
        effect: Option<TaintEffect>,
    ) -> Self {
        Toleration {
            key: key.into(),
            operator: Operator::Equal,
            value: value.into(),
            effect,
            toleration_seconds: None,
        }
    }

    /// `key` (any value) tolerated forever with the `Exists` operator.
    pub fn exists(key: impl Into<String>, effect: Option<TaintEffect>) -> Self {
        Toleration {
            key: key.into(),
            operator: Operator::Exists,
            value: String::new(),
            effect,
            toleration_seconds: None,
        }
    }

    /// The same toleration, bounded to `seconds`.
    pub fn for_seconds(mut self, seconds: i64) -> Self {
        self.toleration_seconds = Some(seconds);
        self
    }

    /// Upstream `Toleration.ToleratesTaint`. `comparison_operators` is the state of the
    /// `TaintTolerationComparisonOperators` gate.
    pub fn tolerates(&self, taint: &Taint, comparison_operators: bool) -> bool {
        if let Some(effect) = &self.effect
            && *effect != taint.effect
        {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match &self.operator {
            Operator::Equal => self.value == taint.value,
            Operator::Exists => true,
            Operator::Lt | Operator::Gt => {
                comparison_operators
                    && compare_numeric_values(&self.value, &taint.value, &self.operator)
            }
            Operator::Other(_) => false,
        }
    }
}

impl fmt::Display for Toleration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = if self.key.is_empty() { "*" } else { &self.key };
        match self.operator {
            Operator::Exists => write!(f, "{key} Exists")?,
            _ => write!(f, "{key} {} {:?}", self.operator.as_str(), self.value)?,
        }
        match &self.effect {
            Some(e) => write!(f, " {e}")?,
            None => write!(f, " (all effects)")?,
        }
        match self.toleration_seconds {
            Some(s) => write!(f, " for {s}s"),
            None => write!(f, " forever"),
        }
    }
}

/// Upstream `content.IsDecimalInteger`: an optional `-`, then `0` or a digit string without
/// leading zeros. `+`, spaces, `-0` and the empty string are rejected.
fn is_decimal_integer(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let mut bytes = digits.bytes();
    match bytes.next() {
        None => false,
        Some(b'0') => digits.len() == 1 && digits.len() == s.len(),
        Some(b'1'..=b'9') => bytes.all(|b| b.is_ascii_digit()),
        Some(_) => false,
    }
}

/// Upstream `compareNumericValues`: `Gt` holds when the taint's value is greater than the
/// toleration's, `Lt` when it is smaller. Anything that is not a canonical 64-bit decimal
/// integer on either side makes the toleration not match.
pub fn compare_numeric_values(toleration_value: &str, taint_value: &str, op: &Operator) -> bool {
    let parse = |s: &str| {
        if is_decimal_integer(s) {
            s.parse::<i64>().ok()
        } else {
            None
        }
    };
    let (Some(threshold), Some(value)) = (parse(toleration_value), parse(taint_value)) else {
        return false;
    };
    match op {
        Operator::Gt => value > threshold,
        Operator::Lt => value < threshold,
        _ => false,
    }
}

/// How long a set of used tolerations lets a pod stay on a tainted node.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TolerationTime {
    /// Evict now: a taint is tolerated for zero or negative seconds.
    Immediate,
    /// Evict after this long.
    After(Duration),
    /// Never evict for these taints.
    Forever,
}

/// Upstream `getMinTolerationTime` over the tolerations that were used: the smallest positive
/// `tolerationSeconds`; zero if any is `<= 0` or the list is empty; forever if none is set.
/// Values above [`MAX_TOLERATION_SECONDS`] count as unset (see there).
pub fn min_toleration_time<'a>(used: impl IntoIterator<Item = &'a Toleration>) -> TolerationTime {
    let mut min: Option<i64> = None;
    let mut any = false;
    for toleration in used {
        any = true;
        match toleration.toleration_seconds {
            Some(s) if s <= 0 => return TolerationTime::Immediate,
            Some(s) if s <= MAX_TOLERATION_SECONDS => {
                min = Some(min.map_or(s, |m| m.min(s)));
            }
            _ => {}
        }
    }
    if !any {
        return TolerationTime::Immediate;
    }
    match min {
        Some(s) => TolerationTime::After(Duration::from_secs(s.unsigned_abs())),
        None => TolerationTime::Forever,
    }
}

/// Upstream `GetMatchingTolerations`: whether every taint is tolerated and, if so, the first
/// toleration (in pod order) that tolerates each taint (in taint order).
pub fn matching_tolerations<'a>(
    taints: &[Taint],
    tolerations: &'a [Toleration],
    comparison_operators: bool,
) -> (bool, Vec<&'a Toleration>) {
    let mut used = Vec::with_capacity(taints.len());
    for taint in taints {
        match tolerations
            .iter()
            .find(|t| t.tolerates(taint, comparison_operators))
        {
            Some(t) => used.push(t),
            None => return (false, Vec::new()),
        }
    }
    (true, used)
}

/// What a pod's tolerations mean against its node's `NoExecute` taints.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The taint at this index is tolerated by none of the tolerations: evict now.
    Untolerated { taint: usize },
    /// Every taint is tolerated. `limit` names the taint and the toleration that set the time
    /// (the first with the smallest `tolerationSeconds`); `None` when the time is forever, or
    /// immediate because there are no taints at all.
    Tolerated {
        time: TolerationTime,
        limit: Option<(usize, usize)>,
    },
}

impl Verdict {
    /// Whether this verdict evicts at once: a taint is not tolerated, or tolerated for 0 s.
    /// The one place the shell's "evicts now?" questions are answered (the stale-cache guard
    /// applies only to such evictions).
    pub fn is_immediate(self) -> bool {
        matches!(
            self,
            Verdict::Untolerated { .. }
                | Verdict::Tolerated {
                    time: TolerationTime::Immediate,
                    ..
                }
        )
    }
}

/// The index of the first toleration that tolerates `taint` (upstream's matching), if any.
pub fn first_tolerating(
    tolerations: &[Toleration],
    taint: &Taint,
    comparison_operators: bool,
) -> Option<usize> {
    tolerations
        .iter()
        .position(|t| t.tolerates(taint, comparison_operators))
}

/// The decision upstream makes in `processPodOnNode`, in one pass and without allocating:
/// the same answer as [`matching_tolerations`] followed by [`min_toleration_time`].
pub fn verdict(
    taints: &[Taint],
    tolerations: &[Toleration],
    comparison_operators: bool,
) -> Verdict {
    let mut min: Option<(i64, usize, usize)> = None;
    let mut immediate: Option<(usize, usize)> = None;
    for (ti, taint) in taints.iter().enumerate() {
        let Some(tol_index) = first_tolerating(tolerations, taint, comparison_operators) else {
            return Verdict::Untolerated { taint: ti };
        };
        let Some(s) = tolerations[tol_index].toleration_seconds else {
            continue;
        };
        if s <= 0 {
            immediate = immediate.or(Some((ti, tol_index)));
        } else if s <= MAX_TOLERATION_SECONDS && min.is_none_or(|(m, _, _)| s < m) {
            min = Some((s, ti, tol_index));
        }
    }
    if taints.is_empty() {
        return Verdict::Tolerated {
            time: TolerationTime::Immediate,
            limit: None,
        };
    }
    if let Some(limit) = immediate {
        return Verdict::Tolerated {
            time: TolerationTime::Immediate,
            limit: Some(limit),
        };
    }
    match min {
        Some((s, ti, tol)) => Verdict::Tolerated {
            time: TolerationTime::After(Duration::from_secs(s.unsigned_abs())),
            limit: Some((ti, tol)),
        },
        None => Verdict::Tolerated {
            time: TolerationTime::Forever,
            limit: None,
        },
    }
}

/// Component-helpers `FindMatchingUntoleratedTaint` (used by the scheduler, and by `explain`):
/// the first taint passing `filter` that no toleration tolerates.
pub fn find_untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    filter: impl Fn(&Taint) -> bool,
    comparison_operators: bool,
) -> Option<&'a Taint> {
    taints.iter().filter(|t| filter(t)).find(|taint| {
        !tolerations
            .iter()
            .any(|t| t.tolerates(taint, comparison_operators))
    })
}

/// The well-known taint a node gets when its Ready condition is False.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// The well-known taint a node gets when its Ready condition is Unknown.
pub const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// What the `DefaultTolerationSeconds` admission plugin adds to a pod: a `NoExecute`
/// toleration of `seconds` for not-ready and for unreachable, each only if the pod has no
/// toleration for that key (or an empty key) with effect `NoExecute` (or empty) already.
/// The operator, value and seconds of an existing toleration are not looked at.
pub fn add_default_tolerations(tolerations: &mut Vec<Toleration>, seconds: i64) {
    let covers = |tolerations: &[Toleration], key: &str| {
        tolerations.iter().any(|t| {
            (t.key == key || t.key.is_empty())
                && matches!(t.effect, None | Some(TaintEffect::NoExecute))
        })
    };
    for key in [NOT_READY_TAINT, UNREACHABLE_TAINT] {
        if !covers(tolerations, key) {
            tolerations
                .push(Toleration::exists(key, Some(TaintEffect::NoExecute)).for_seconds(seconds));
        }
    }
}
