//! `noexecute-soak drive` runs a soak on a plane; `noexecute-soak check` judges one again from
//! its directory (the audit log stays in the plane's directory). scripts/soak wraps both.

use clap::{Parser, Subcommand};
use noexecute_soak::drive;
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "noexecute-soak",
    about = "The fault soak and its independent checker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a soak: replicas, churn and faults on a running plane, then judge it.
    Drive(drive::DriveArgs),
    /// Judge a finished soak again.
    Check {
        /// The soak's output directory (soak.json, nemesis.jsonl).
        #[arg(long)]
        out: PathBuf,
        /// The plane's state directory (audit.log).
        #[arg(long, env = "NOEXECUTE_CLUSTER_DIR")]
        plane: PathBuf,
    },
}

fn main() -> std::process::ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Drive(args) => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(drive::drive(args))),
        Command::Check { out, plane } => drive::judge(&out, &plane).map(|(report, text)| {
            print!("{text}");
            i32::from(report.total() > 0 || !report.unresolved.is_empty())
        }),
    };
    match result {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("noexecute-soak: error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
