//! The `noexecute` binary: parses the command line and hands over to the library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = noexecute::cli::Cli::parse();
    match noexecute::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("noexecute: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
