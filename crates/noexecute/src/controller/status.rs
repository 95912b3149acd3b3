//! What is counting down right now: the running controller's pending evictions (pod, node,
//! deadline, where each is held, why it is due), served as JSON on the admin server's
//! `/status` and shown as a table by `noexecute status` (`kubectl noexecute status`).
//! Upstream's controller offers no way to see its timers.

use std::io::{self, Write};

use noexecute_engine::{Countdown, Held, Pipeline, Time};
use serde::{Deserialize, Serialize};

use crate::adapters::time::{relative, timestamp};

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub identity: String,
    /// This replica leads (or leader election is off): only a leader's countdowns act.
    pub leading: bool,
    pub synced: bool,
    pub braking: bool,
    /// `--refuse-if-foreign` has stopped this replica evicting (another taint eviction
    /// controller was seen); only a restart clears it.
    #[serde(default)]
    pub refusing: bool,
    /// The controller's clock when it answered.
    pub now: String,
    /// Sorted by deadline: the earliest, at most the limit asked for.
    pub pending: Vec<Pending>,
    /// Pending evictions in all (of the namespace asked for), shown or not.
    #[serde(default)]
    pub total: usize,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    /// RFC 3339.
    pub deadline: String,
    /// Seconds from `now` to the deadline (negative: due and held).
    pub in_seconds: f64,
    /// counting, parked, pacing, brake, queued, handover, in-flight or retrying.
    pub held: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
    /// Held by `--handover-delay`: when the delay ends and the eviction starts (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handover_until: Option<String>,
    pub failures: u32,
    pub reason: String,
}

impl Pending {
    fn new(c: Countdown, now: Time) -> Pending {
        let retry_at = match c.held {
            Held::Retrying { at } => at.map(timestamp),
            _ => None,
        };
        let handover_until = match c.held {
            Held::Handover { until } => Some(timestamp(until)),
            _ => None,
        };
        Pending {
            namespace: c.pod.namespace.to_string(),
            name: c.pod.name.to_string(),
            uid: c.pod.uid.to_string(),
            node: c.pod.node.as_deref().unwrap_or_default().to_string(),
            deadline: timestamp(c.deadline),
            in_seconds: (c.deadline.as_millis() - now.as_millis()) as f64 / 1000.0,
            held: c.held.as_str().to_string(),
            retry_at,
            handover_until,
            failures: c.failures,
            reason: c.reason.unwrap_or_default(),
        }
    }
}

/// The status of `pipeline` as of `now`, of pods in `namespace` (all: `None`).
pub fn of(
    pipeline: &Pipeline,
    identity: &str,
    namespace: Option<&str>,
    limit: usize,
    now: Time,
) -> Status {
    let countdowns = pipeline.countdowns(
        |pod| namespace.is_none_or(|ns| &*pod.namespace == ns),
        limit,
    );
    Status {
        identity: identity.to_string(),
        leading: pipeline.leading() && !pipeline.refusing(),
        synced: pipeline.synced(),
        braking: pipeline.braking(),
        refusing: pipeline.refusing(),
        now: timestamp(now),
        total: countdowns.total,
        pending: countdowns
            .rows
            .into_iter()
            .map(|c| Pending::new(c, now))
            .collect(),
    }
}

/// A table for people: one pod a line, sorted by deadline; `wide` adds the uid, failures and
/// the reason.
pub fn table(status: &Status, wide: bool, w: &mut impl Write) -> io::Result<()> {
    writeln!(
        w,
        "{}: {}{}{}, {} pending eviction(s)",
        status.identity,
        if status.refusing {
            "REFUSING (another taint eviction controller was seen; restart to clear)"
        } else if status.leading {
            "leading"
        } else {
            "standing by"
        },
        if status.synced { "" } else { ", not synced" },
        if status.braking {
            ", mass-eviction brake engaged"
        } else {
            ""
        },
        status.total.max(status.pending.len())
    )?;
    if status.total > status.pending.len() {
        writeln!(
            w,
            "(the {} earliest shown; ask for more with --limit)",
            status.pending.len()
        )?;
    }
    if status.pending.is_empty() {
        return Ok(());
    }
    let now = jiff_millis(&status.now);
    let mut rows: Vec<Vec<String>> = vec![
        ["POD", "NODE", "DEADLINE", "IN", "HELD"]
            .into_iter()
            .chain(
                wide.then_some(["UID", "FAILURES", "REASON"])
                    .into_iter()
                    .flatten(),
            )
            .map(str::to_string)
            .collect(),
    ];
    for p in &status.pending {
        let mut row = vec![
            format!("{}/{}", p.namespace, p.name),
            p.node.clone(),
            p.deadline.clone(),
            match (now, jiff_millis(&p.deadline)) {
                (Some(now), Some(at)) => relative(Time::from_millis(at), Time::from_millis(now)),
                _ => format!("{:+.1}s", p.in_seconds),
            },
            held(p, now),
        ];
        if wide {
            row.extend([p.uid.clone(), p.failures.to_string(), p.reason.clone()]);
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let last = row.len() - 1;
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i == last {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        writeln!(w, "{}", line.trim_end())?;
    }
    Ok(())
}

/// The HELD cell: the state, and for a handover or a retry how long until it moves on
/// (`handover (+3s)`: the delay ends and the eviction starts in 3 s).
fn held(p: &Pending, now: Option<i64>) -> String {
    let next = p.handover_until.as_deref().or(p.retry_at.as_deref());
    match (next.and_then(jiff_millis), now) {
        (Some(at), Some(now)) => format!(
            "{} ({})",
            p.held,
            relative(Time::from_millis(at), Time::from_millis(now))
        ),
        _ => p.held.clone(),
    }
}

fn jiff_millis(s: &str) -> Option<i64> {
    s.parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_sorted_rows_and_wide_columns() {
        let status = Status {
            identity: "r1".into(),
            leading: true,
            synced: true,
            braking: false,
            refusing: false,
            now: "2026-12-01T10:00:00Z".into(),
            pending: vec![Pending {
                namespace: "ns".into(),
                name: "p".into(),
                uid: "u".into(),
                node: "n".into(),
                deadline: "2026-12-01T10:05:00Z".into(),
                in_seconds: 300.0,
                held: "counting".into(),
                retry_at: None,
                handover_until: None,
                failures: 0,
                reason: "tolerated for 300s".into(),
            }],
            total: 1,
        };
        let mut out = Vec::new();
        table(&status, true, &mut out).unwrap_or_else(|e| panic!("{e}"));
        let text = String::from_utf8(out).unwrap_or_default();
        assert!(
            text.starts_with("r1: leading, 1 pending eviction(s)\n"),
            "{text}"
        );
        assert!(text.contains("POD   NODE  DEADLINE"), "{text}");
        assert!(
            text.contains("ns/p  n     2026-12-01T10:05:00Z  +5m00s  counting  u"),
            "{text}"
        );
    }

    #[test]
    fn a_handover_and_a_retry_show_when_they_move_on() {
        let row = |held: &str, retry_at: Option<&str>, handover_until: Option<&str>| Pending {
            namespace: "ns".into(),
            name: held.into(),
            uid: "u".into(),
            node: "n".into(),
            deadline: "2026-12-01T09:59:58Z".into(),
            in_seconds: -2.0,
            held: held.into(),
            retry_at: retry_at.map(str::to_string),
            handover_until: handover_until.map(str::to_string),
            failures: 0,
            reason: String::new(),
        };
        let status = Status {
            identity: "r1".into(),
            leading: true,
            synced: true,
            braking: false,
            refusing: false,
            now: "2026-12-01T10:00:00Z".into(),
            pending: vec![
                row("handover", None, Some("2026-12-01T10:00:03Z")),
                row("retrying", Some("2026-12-01T10:01:30Z"), None),
                row("queued", None, None),
            ],
            total: 3,
        };
        let mut out = Vec::new();
        table(&status, false, &mut out).unwrap_or_else(|e| panic!("{e}"));
        let text = String::from_utf8(out).unwrap_or_default();
        let held: Vec<&str> = text
            .lines()
            .skip(2)
            .filter_map(|l| l.split("  ").filter(|c| !c.is_empty()).nth(4))
            .collect();
        assert_eq!(
            held,
            ["handover (+3s)", "retrying (+1m30s)", "queued"],
            "{text}"
        );
    }
}
