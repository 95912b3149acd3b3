//! The command line: one subcommand per job, each a thin adapter onto a library module.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use noexecute_engine::Config;

use crate::scenario::{Offset, Scenario};
use crate::{plot, report, simulate};

#[derive(Debug, Parser)]
#[command(
    name = "noexecute",
    version,
    about = "Kubernetes NoExecute taint eviction: controller, simulator and planner"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a scenario on a virtual clock and print the eviction timeline.
    Simulate(SimulateArgs),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// An aligned table for people.
    Table,
    /// One JSON object per line.
    Json,
}

/// Switches of the engine shared by every subcommand that decides.
#[derive(Debug, Args, Clone, Default)]
pub struct EngineArgs {
    /// Honour the Lt/Gt toleration operators (upstream's alpha TaintTolerationComparisonOperators gate).
    #[arg(long)]
    pub comparison_operators: bool,
}

impl EngineArgs {
    pub fn config(&self) -> Config {
        Config {
            comparison_operators: self.comparison_operators,
            ..Config::default()
        }
    }
}

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The scenario file (YAML).
    pub scenario: PathBuf,
    /// How to print the timeline.
    #[arg(long, short, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Also draw the timeline (pods evicted over time, per zone or node) as an SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Add the DefaultTolerationSeconds admission plugin's 300 s not-ready/unreachable
    /// tolerations to every pod, as a real API server does.
    #[arg(long)]
    pub default_tolerations: bool,
    /// Stop at this time (overrides the scenario's `until`), e.g. 900s or 1h.
    #[arg(long, value_parser = parse_offset)]
    pub until: Option<Offset>,
    #[command(flatten)]
    pub engine: EngineArgs,
}

fn parse_offset(s: &str) -> Result<Offset, String> {
    Offset::parse(s)
}

pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Simulate(args) => simulate_command(args),
    }
}

fn simulate_command(args: SimulateArgs) -> Result<ExitCode> {
    let scenario = Scenario::load(&args.scenario)?;
    let opts = simulate::Options {
        default_tolerations: args.default_tolerations,
        until: args.until.map(Offset::time),
        config: args.engine.config(),
    };
    let timeline = simulate::run(&scenario, opts);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    match args.output {
        Output::Table => report::table(&timeline, &mut out),
        Output::Json => report::json_lines(&timeline, &mut out),
    }
    .context("writing the timeline")?;
    out.flush().context("writing the timeline")?;
    if let Some(path) = &args.plot {
        let title = format!(
            "{}: {} of {} pods evicted",
            args.scenario.display(),
            timeline.evicted(),
            timeline.pods_seen
        );
        std::fs::write(path, plot::svg(&timeline, &title))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
