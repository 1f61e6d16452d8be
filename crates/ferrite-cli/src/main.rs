//! `ferrite`: the command-line client for a Ferrite server.
//!
//! `args` defines the command line, `commands` carries each command out with the blocking
//! client, and `output` renders the result as text or JSON.

mod args;
mod bench;
mod check;
mod commands;
mod output;

use std::io::ErrorKind;
use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // clap prints usage errors itself and exits with status 2.
    let cli = args::Cli::parse();
    if let args::Command::Bench(options) = &cli.command {
        return bench::main(&cli.addr, cli.json, options, cli.tls_options());
    }
    if let args::Command::Check { data_dir } = &cli.command {
        return match check::run(data_dir, cli.json) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::from(2)
            }
        };
    }
    let report = match commands::run(&cli) {
        Ok(report) => report,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    match report.write(cli.json, &mut std::io::stdout().lock()) {
        Ok(()) => ExitCode::SUCCESS,
        // `ferrite get p k | head -c 10` closing the pipe early is not our failure.
        Err(error) if error.kind() == ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: writing the output: {error}");
            ExitCode::FAILURE
        }
    }
}
