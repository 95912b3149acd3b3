//! How a timeline is printed: an aligned table for people, or one JSON object per line.

use std::io::{self, Write};

use noexecute_engine::Time;
use serde::Serialize;

use crate::offline::plan::{self, Plan};
use crate::offline::simulate::{Entry, Kind, Timeline};

/// Seconds from the start, as printed.
fn secs(t: Time) -> f64 {
    t.as_millis() as f64 / 1000.0
}

fn fmt_secs(t: Time) -> String {
    format!("{:.1}s", secs(t))
}

/// Write aligned columns separated by two spaces; `right[i]` right-aligns column `i`. The last
/// column is not padded.
fn write_table<const N: usize>(
    w: &mut impl Write,
    header: [&str; N],
    rows: &[[String; N]],
    right: [bool; N],
) -> io::Result<()> {
    let mut widths = header.map(str::len);
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut line = |cells: [&str; N]| -> io::Result<()> {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            if i + 1 == N {
                out.push_str(cell);
            } else if right[i] {
                out.push_str(&format!("{cell:>width$}", width = widths[i]));
            } else {
                out.push_str(&format!("{cell:<width$}", width = widths[i]));
            }
        }
        writeln!(w, "{out}")
    };
    line(header)?;
    for row in rows {
        line(std::array::from_fn(|i| row[i].as_str()))?;
    }
    Ok(())
}

pub fn table(t: &Timeline, w: &mut impl Write) -> io::Result<()> {
    let rows: Vec<[String; 6]> = t
        .entries
        .iter()
        .map(|e| {
            let deadline = match e.kind {
                Kind::Scheduled { deadline } => fmt_secs(deadline),
                _ => String::new(),
            };
            [
                fmt_secs(e.at),
                e.kind.name().to_string(),
                e.pod.clone(),
                e.node.clone().unwrap_or_else(|| "-".into()),
                deadline,
                e.reason.clone(),
            ]
        })
        .collect();
    write_table(
        w,
        ["AT", "EVENT", "POD", "NODE", "DEADLINE", "REASON"],
        &rows,
        [true, false, false, false, true, false],
    )?;
    writeln!(w)?;
    writeln!(
        w,
        "{} of {} pods evicted; {} eviction(s) still pending at {}.",
        t.evicted(),
        t.pods_seen,
        t.pending.len(),
        fmt_secs(t.end)
    )?;
    for (pod, node, deadline) in t.pending.iter().take(20) {
        writeln!(
            w,
            "  pending: {pod} on {} due at {}",
            node.as_deref().unwrap_or("-"),
            fmt_secs(*deadline)
        )?;
    }
    if t.pending.len() > 20 {
        writeln!(w, "  … and {} more", t.pending.len() - 20)?;
    }
    Ok(())
}

#[derive(Serialize)]
struct Line<'a> {
    at: f64,
    event: &'a str,
    pod: &'a str,
    node: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    deadline: Option<f64>,
    reason: &'a str,
}

pub fn json_lines(t: &Timeline, w: &mut impl Write) -> io::Result<()> {
    t.entries.iter().try_for_each(|e| json_entry(e, w))
}

/// The timeline as one JSON document: an array of the JSON lines' objects.
pub fn json(t: &Timeline, w: &mut impl Write) -> io::Result<()> {
    let mut list = JsonList::default();
    for e in &t.entries {
        list.item(w, &line(e))?;
    }
    list.end(w)
}

/// One entry of the timeline as an item of a JSON array written as it comes.
pub fn json_item(list: &mut JsonList, e: &Entry, w: &mut impl Write) -> io::Result<()> {
    list.item(w, &line(e))
}

/// A JSON array written item by item (one item per line), so that a long timeline streams
/// and still parses as one document.
#[derive(Debug, Default)]
pub struct JsonList {
    items: usize,
}

impl JsonList {
    pub fn item(&mut self, w: &mut impl Write, item: &impl Serialize) -> io::Result<()> {
        w.write_all(if self.items == 0 { b"[\n  " } else { b",\n  " })?;
        serde_json::to_writer(&mut *w, item)?;
        self.items += 1;
        Ok(())
    }

    pub fn end(self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(if self.items == 0 { b"[]\n" } else { b"\n]\n" })
    }
}

/// One entry of the timeline as a JSON line.
pub fn json_entry(e: &Entry, w: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer(&mut *w, &line(e))?;
    writeln!(w)
}

/// The timeline as a YAML list of the JSON lines' objects, written item by item.
pub fn yaml(t: &Timeline, w: &mut impl Write) -> io::Result<()> {
    t.entries.iter().try_for_each(|e| yaml_entry(e, w))
}

/// One entry of the timeline as an item of a YAML list.
pub fn yaml_entry(e: &Entry, w: &mut impl Write) -> io::Result<()> {
    yaml_item(w, &line(e))
}

/// One YAML list item.
fn yaml_item(w: &mut impl Write, item: &impl Serialize) -> io::Result<()> {
    let text = serde_saphyr::to_string(&[item]).map_err(io::Error::other)?;
    w.write_all(text.as_bytes())
}

fn line(e: &Entry) -> Line<'_> {
    Line {
        at: secs(e.at),
        event: e.kind.name(),
        pod: &e.pod,
        node: e.node.as_deref(),
        deadline: match e.kind {
            Kind::Scheduled { deadline } => Some(secs(deadline)),
            _ => None,
        },
        reason: &e.reason,
    }
}

/// The plan as a table; `wide` adds each eviction's absolute time.
pub fn plan_table(p: &Plan, wide: bool, w: &mut impl Write) -> io::Result<()> {
    writeln!(
        w,
        "Plan at {} from {}: {} node(s) with NoExecute taints.",
        plan::timestamp(p.now),
        p.source,
        p.affected_nodes
    )?;
    writeln!(
        w,
        "Existing NoExecute taints are counted from their timeAdded; the hypothetical ones from now."
    )?;
    writeln!(w)?;
    let when = |r: &plan::Row| {
        r.evicted_at.map_or_else(
            || if r.held { "held" } else { "never" }.into(),
            |t| plan::relative(t, p.now),
        )
    };
    if wide {
        let rows: Vec<[String; 6]> = p
            .rows
            .iter()
            .map(|r| {
                [
                    when(r),
                    r.evicted_at.map(plan::timestamp).unwrap_or_default(),
                    r.pod.clone(),
                    r.node.clone(),
                    r.decision().into(),
                    r.reason.clone(),
                ]
            })
            .collect();
        write_table(
            w,
            ["WHEN", "TIME", "POD", "NODE", "DECISION", "REASON"],
            &rows,
            [false; 6],
        )?;
    } else {
        let rows: Vec<[String; 5]> = p
            .rows
            .iter()
            .map(|r| {
                [
                    when(r),
                    r.pod.clone(),
                    r.node.clone(),
                    r.decision().into(),
                    r.reason.clone(),
                ]
            })
            .collect();
        write_table(
            w,
            ["WHEN", "POD", "NODE", "DECISION", "REASON"],
            &rows,
            [false; 5],
        )?;
    }
    let evicted: Vec<&plan::Row> = p.rows.iter().filter(|r| r.evicted_at.is_some()).collect();
    let at_once = evicted
        .iter()
        .filter(|r| r.evicted_at == Some(p.now))
        .count();
    let last = evicted.iter().filter_map(|r| r.evicted_at).max();
    let held = p.rows.iter().filter(|r| r.held).count();
    writeln!(w)?;
    writeln!(
        w,
        "{} pod(s) would be evicted ({} at once{}){}; {} safe; {} pod(s) on {} node(s) without NoExecute taints are not affected.",
        evicted.len(),
        at_once,
        last.filter(|l| *l > p.now)
            .map(|l| format!(", the last {}", plan::relative(l, p.now)))
            .unwrap_or_default(),
        if held > 0 {
            format!("; {held} held")
        } else {
            String::new()
        },
        p.rows.len() - evicted.len() - held,
        p.unaffected_pods,
        p.unaffected_nodes
    )?;
    if let Some(figures) = p.brake {
        writeln!(w, "The mass-eviction brake would engage: {figures}.")?;
    }
    Ok(())
}

#[derive(Serialize)]
struct PlanLine<'a> {
    pod: &'a str,
    node: &'a str,
    decision: &'a str,
    /// Seconds from now.
    at: Option<f64>,
    time: Option<String>,
    reason: &'a str,
    /// The tainted devices allocated to the pod.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    devices: Vec<String>,
}

pub fn plan_json_lines(p: &Plan, w: &mut impl Write) -> io::Result<()> {
    plan_lines(p, |line| {
        serde_json::to_writer(&mut *w, &line)?;
        writeln!(w)
    })
}

/// The plan as one JSON document: an array of the JSON lines' objects.
pub fn plan_json(p: &Plan, w: &mut impl Write) -> io::Result<()> {
    let mut list = JsonList::default();
    plan_lines(p, |line| list.item(w, &line))?;
    list.end(w)
}

/// The plan as a YAML list of the JSON lines' objects.
pub fn plan_yaml(p: &Plan, w: &mut impl Write) -> io::Result<()> {
    plan_lines(p, |line| yaml_item(w, &line))
}

fn plan_lines(p: &Plan, mut each: impl FnMut(PlanLine<'_>) -> io::Result<()>) -> io::Result<()> {
    for r in &p.rows {
        each(PlanLine {
            pod: &r.pod,
            node: &r.node,
            decision: r.decision(),
            at: r
                .evicted_at
                .map(|t| t.since(p.now).as_millis() as f64 / 1000.0),
            time: r.evicted_at.map(plan::timestamp),
            reason: &r.reason,
            devices: r.devices(),
        })?;
    }
    Ok(())
}
