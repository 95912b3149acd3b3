//! The `noexecute` binary: parses the command line and hands over to the library.
//!
//! Installed (linked or copied) as `kubectl-noexecute`, it is a kubectl plugin: kubectl runs
//! it for `kubectl noexecute …` with the remaining arguments, and it names itself so in help
//! and errors. The commands and flags are the same either way.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

/// The plugin's name as kubectl shows it, when the binary runs as `kubectl-noexecute`.
fn plugin_name() -> Option<&'static str> {
    let argv0 = std::env::args_os().next()?;
    let file = std::path::Path::new(&argv0)
        .file_name()?
        .to_str()?
        .to_string();
    file.starts_with("kubectl-noexecute")
        .then_some("kubectl noexecute")
}

fn main() -> ExitCode {
    let mut command = noexecute::cli::Cli::command();
    let name = plugin_name().unwrap_or("noexecute");
    if plugin_name().is_some() {
        command = command.name(name).bin_name(name).display_name(name);
    }
    let plugin = plugin_name().is_some();
    if plugin {
        // The plugin only reads: the controller runs in the cluster, under its own Lease. A
        // `run` from a laptop would be a second acting leader.
        command = command.mut_subcommand("run", |run| run.hide(true));
    }
    let cli = match noexecute::cli::Cli::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if plugin && matches!(cli.command, noexecute::cli::Command::Run(_)) {
        eprintln!(
            "{name}: error: the plugin does not run the controller (it offers plan, explain, status, simulate and version); deploy it (docs/operating.md), or run the noexecute binary itself"
        );
        return ExitCode::from(2);
    }
    match noexecute::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{name}: error: {e:#}");
            ExitCode::from(noexecute::cli::exit_code(&e))
        }
    }
}
