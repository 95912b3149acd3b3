//! `noexecute-bench`: the side-by-side benchmark. See `docs/benchmarks.md`.
//!
//!     bench/run --nodes 100 --pods-per-node 30 --toleration-seconds 30 --qps 20 --burst 30

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use noexecute_bench::{Options, Outcome, Which, markdown, medians, run};

#[derive(Debug, Parser)]
#[command(
    about = "noexecute run vs upstream's taint-eviction-controller on the same real control plane"
)]
struct Args {
    #[arg(long, default_value_t = 100)]
    nodes: usize,
    #[arg(long, default_value_t = 30)]
    pods_per_node: usize,
    /// S: tolerationSeconds of the 80% tolerating pods.
    #[arg(long, default_value_t = 30)]
    toleration_seconds: i64,
    /// Client QPS for both controllers (kube-controller-manager's default is 20).
    #[arg(long, default_value_t = 20.0)]
    qps: f64,
    /// Client burst for both controllers (kube-controller-manager's default is 30).
    #[arg(long, default_value_t = 30)]
    burst: u32,
    /// Seconds to keep watching after the last expected eviction.
    #[arg(long, default_value_t = 5)]
    settle: u64,
    /// The noexecute binary (build it with --profile dist first, as bench/run does).
    #[arg(long, default_value = "target/dist/noexecute")]
    binary: PathBuf,
    /// Spread the taints evenly over this many seconds (0: all at once). With a spread, the
    /// tolerating pods fall due a few at a time, so the lag shows the controller's own delay
    /// rather than the QPS limit.
    #[arg(long, default_value_t = 0.0)]
    taint_spread: f64,
    /// An extra flag for `noexecute run` (repeatable), e.g. --noexecute-arg=--stale-cache-guard=false.
    #[arg(long = "noexecute-arg", allow_hyphen_values = true)]
    noexecute_args: Vec<String>,
    /// An extra flag for kube-controller-manager (repeatable), e.g.
    /// --kcm-arg=--kube-api-content-type=application/json.
    #[arg(long = "kcm-arg", allow_hyphen_values = true)]
    kcm_args: Vec<String>,
    /// Taint only this share of the nodes (0..=1, e.g. 0.1 at 5,000 nodes); pods on the others
    /// must not be evicted.
    #[arg(long, default_value_t = 1.0)]
    taint_share: f64,
    /// Run one controller only (for profiling); no comparison is printed.
    #[arg(long, value_parser = ["upstream", "noexecute"])]
    only: Option<String>,
    /// Run each controller this many times, alternating which goes first, and print the
    /// medians beside each run's table.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// Start each controller this many times on the same population, each start timed to
    /// synced with its own canary and stopped before the next; time to synced and the CPU
    /// figures until then are the medians. The mass taint follows the last start.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    starts: u32,
    /// Write both outcomes and the table here as JSON.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let opts = Options {
        nodes: args.nodes,
        pods_per_node: args.pods_per_node,
        toleration_seconds: args.toleration_seconds,
        qps: args.qps,
        burst: args.burst,
        binary: args.binary.canonicalize().with_context(|| {
            format!(
                "{} (build it: cargo build --profile dist -p noexecute)",
                args.binary.display()
            )
        })?,
        settle: Duration::from_secs(args.settle),
        taint_spread: Duration::from_secs_f64(args.taint_spread.max(0.0)),
        noexecute_args: args.noexecute_args.clone(),
        kcm_args: args.kcm_args.clone(),
        taint_share: args.taint_share,
        starts: args.starts as usize,
    };
    if let Some(only) = &args.only {
        let which = if only == "upstream" {
            Which::Upstream
        } else {
            Which::Noexecute
        };
        let outcome = run(which, &opts).await?;
        println!("{}", serde_json::to_string_pretty(&outcome)?);
        return Ok(());
    }
    let mut upstream_runs: Vec<Outcome> = Vec::new();
    let mut our_runs: Vec<Outcome> = Vec::new();
    for round in 0..args.repeat {
        // Alternate the order, so neither always runs on a machine the other just warmed.
        let order = if round % 2 == 0 {
            [Which::Upstream, Which::Noexecute]
        } else {
            [Which::Noexecute, Which::Upstream]
        };
        for which in order {
            let outcome = run(which, &opts).await?;
            if let Some(slowest) = &outcome.slowest {
                eprintln!("[{which}] {slowest}");
            }
            match which {
                Which::Upstream => upstream_runs.push(outcome),
                Which::Noexecute => our_runs.push(outcome),
            }
        }
        if args.repeat > 1
            && let (Some(u), Some(o)) = (upstream_runs.last(), our_runs.last())
        {
            println!(
                "Run {} of {}:\n\n{}",
                round + 1,
                args.repeat,
                markdown(u, o)
            );
        }
    }
    let (Some(upstream), Some(ours)) = (medians(&upstream_runs), medians(&our_runs)) else {
        anyhow::bail!("no runs");
    };
    let table = markdown(&upstream, &ours);
    if args.repeat > 1 {
        println!(
            "Medians of {} runs each (the request counts, the server's mean time per request and the share of deletions within 25 / 100 ms are the first run's):\n",
            args.repeat
        );
    }
    println!("{table}");
    let same = upstream_runs
        .iter()
        .zip(&our_runs)
        .all(|(u, o)| u.evicted_names == o.evicted_names);
    println!("Same set of pods evicted by both: {same}");
    if let Some(path) = &args.out {
        let json = serde_json::json!({
            "upstream": upstream,
            "noexecute": ours,
            "upstream_runs": upstream_runs,
            "noexecute_runs": our_runs,
            "same_evicted_set": same,
            "markdown": table,
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
