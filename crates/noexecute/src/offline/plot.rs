//! `--plot FILE.svg`: evictions over time as a picture, one cumulative line per zone (the
//! `topology.kubernetes.io/zone` label) or, when nodes carry no zone, per node.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::offline::simulate::{Kind, Timeline};

pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
const MAX_GROUPS: usize = 10;
const COLOURS: [&str; 11] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#444444",
];

/// Which group a node's evictions are counted in.
fn group_of(t: &Timeline, node: Option<&str>, by_zone: bool) -> String {
    let Some(node) = node else {
        return "(no node)".into();
    };
    if by_zone {
        t.node_labels
            .get(node)
            .and_then(|l| l.get(ZONE_LABEL))
            .map_or_else(|| "(no zone)".into(), |z| format!("zone {z}"))
    } else {
        node.to_string()
    }
}

/// A step between time ticks that reads well (10s, 30s, 1m, 5m, …) for about `n` ticks.
fn time_step(max: f64, n: f64) -> f64 {
    const STEPS: [f64; 16] = [
        0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0,
        3600.0, 7200.0,
    ];
    let raw = max / n;
    STEPS
        .iter()
        .copied()
        .find(|s| *s >= raw)
        .unwrap_or_else(|| (raw / 3600.0).ceil() * 3600.0)
}

/// A round step for about `n` ticks over `0..max`.
fn tick_step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(1e-9);
    let magnitude = 10f64.powf(raw.log10().floor());
    let norm = raw / magnitude;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

pub fn svg(t: &Timeline, title: &str) -> String {
    let by_zone = t.node_labels.values().any(|l| l.contains_key(ZONE_LABEL));
    // Eviction times per group; every zone is shown, even one without evictions.
    let mut groups: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    if by_zone {
        for node in t.node_labels.keys() {
            groups.entry(group_of(t, Some(node), true)).or_default();
        }
    }
    for e in t.entries.iter().filter(|e| e.kind == Kind::Evicted) {
        groups
            .entry(group_of(t, e.node.as_deref(), by_zone))
            .or_default()
            .push(e.at.as_millis() as f64 / 1000.0);
    }
    // Keep the largest groups; fold the rest into one line.
    let mut ordered: Vec<(String, Vec<f64>)> = groups.into_iter().collect();
    ordered.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then(a.0.cmp(&b.0)));
    if ordered.len() > MAX_GROUPS {
        let rest: Vec<f64> = ordered
            .drain(MAX_GROUPS - 1..)
            .flat_map(|(_, v)| v)
            .collect();
        ordered.push(("other".into(), rest));
    }
    for (_, times) in &mut ordered {
        times.sort_by(f64::total_cmp);
    }

    let (w, h) = (900.0, 520.0);
    let (left, right, top, bottom) = (70.0, 200.0, 50.0, 60.0);
    let plot_w = w - left - right;
    let plot_h = h - top - bottom;
    let end = (t.end.as_millis() as f64 / 1000.0).max(1.0);
    let max_y = ordered
        .iter()
        .map(|(_, v)| v.len())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let x = |s: f64| left + s / end * plot_w;
    let y = |n: f64| top + plot_h - n / max_y * plot_h;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{left}" y="25" font-size="16" font-weight="bold">{}</text>"#,
        escape(title)
    );
    // Axes, grid and ticks.
    let xs = time_step(end, 8.0);
    let mut s = 0.0;
    while s <= end + 1e-9 {
        let px = x(s);
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{:.1}" stroke="#eee"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            top + plot_h,
            top + plot_h + 18.0,
            format_secs(s)
        );
        s += xs;
    }
    let ys = tick_step(max_y, 6.0).max(1.0);
    let mut n = 0.0;
    while n <= max_y + 1e-9 {
        let py = y(n);
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#eee"/><text x="{:.1}" y="{:.1}" text-anchor="end">{n}</text>"##,
            left + plot_w,
            left - 8.0,
            py + 4.0
        );
        n += ys;
    }
    let _ = writeln!(
        out,
        r##"<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#333"/>"##
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">time since start (simulated)</text>"#,
        left + plot_w / 2.0,
        h - 15.0
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">pods evicted (cumulative)</text>"#,
        top + plot_h / 2.0
    );
    // Scenario changes that touch taints, as dashed markers.
    for (i, (at, label)) in t.markers.iter().enumerate() {
        let px = x(at.as_millis() as f64 / 1000.0);
        // Stagger the labels so that neighbours do not overprint each other.
        let label_y = top + 12.0 + (i % 4) as f64 * 13.0;
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{top}" x2="{px:.1}" y2="{:.1}" stroke="#999" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" fill="#666" font-size="10">{}</text>"##,
            top + plot_h,
            px + 3.0,
            label_y,
            escape(label)
        );
    }
    // One step line per group.
    for (i, (name, times)) in ordered.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let mut points = format!("{:.1},{:.1}", x(0.0), y(0.0));
        for (k, at) in times.iter().enumerate() {
            let _ = write!(
                points,
                " {:.1},{:.1} {:.1},{:.1}",
                x(*at),
                y(k as f64),
                x(*at),
                y(k as f64 + 1.0)
            );
        }
        let _ = write!(points, " {:.1},{:.1}", x(end), y(times.len() as f64));
        let _ = writeln!(
            out,
            r#"<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>"#
        );
        let ly = top + 10.0 + i as f64 * 20.0;
        let lx = left + plot_w + 15.0;
        let _ = writeln!(
            out,
            r#"<rect x="{lx}" y="{:.1}" width="14" height="4" fill="{colour}"/><text x="{:.1}" y="{:.1}">{} ({})</text>"#,
            ly - 4.0,
            lx + 20.0,
            ly + 2.0,
            escape(name),
            times.len()
        );
    }
    if ordered.is_empty() {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="14">no pod is evicted</text>"#,
            left + plot_w / 2.0,
            top + plot_h / 2.0
        );
    }
    let _ = writeln!(out, "</svg>");
    out
}

fn format_secs(s: f64) -> String {
    if s >= 3600.0 && s % 60.0 == 0.0 {
        format!(
            "{}h{:02}m",
            (s / 3600.0) as i64,
            ((s % 3600.0) / 60.0) as i64
        )
    } else if s >= 60.0 && s % 1.0 == 0.0 {
        format!("{}m{:02}s", (s / 60.0) as i64, (s % 60.0) as i64)
    } else {
        format!("{s}s")
    }
}
