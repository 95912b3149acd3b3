//! `noexecute-snapshot`: write a snapshot of realistic nodes and pods, as
//! `kubectl get nodes,pods -A -o json` would, for `noexecute plan --snapshot` at any size.
//!
//!     target/dist/noexecute-snapshot --nodes 5000 --pods-per-node 30 --out /tmp/snap.json
//!
//! Node `node-N` is in zone `zone-a`, `-b` or `-c` by N; pod `pod-N-I` runs on it. One pod in
//! ten tolerates nothing, one in ten everything forever, and the rest carry the two 300 s
//! default tolerations (see `noexecute_testkit::realistic`).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;

#[derive(Debug, Parser)]
#[command(about = "Write a snapshot of realistic nodes and pods (JSON)")]
struct Args {
    #[arg(long, default_value_t = 5000)]
    nodes: usize,
    #[arg(long, default_value_t = 30)]
    pods_per_node: usize,
    /// Where to write it (default: standard output).
    #[arg(long)]
    out: Option<PathBuf>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    let sink: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = std::io::BufWriter::with_capacity(1 << 20, sink);
    noexecute_testkit::realistic::write_snapshot(&mut out, args.nodes, args.pods_per_node)
        .and_then(|()| out.flush())
        .context("writing the snapshot")?;
    Ok(())
}
