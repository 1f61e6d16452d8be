//! `ferrite`: the command-line client for a Ferrite server.
//!
//! `args` defines the command line, `commands` carries each command out with the blocking
//! client (`pools` those on pools, `cluster` the administration of a cluster), `local` runs a
//! cluster of servers on this machine, `users` edits the server's users file, and `output`
//! renders the result as text or JSON.

mod args;
mod bench;
mod check;
mod cluster;
mod commands;
mod local;
mod output;
mod pools;
mod users;

use std::io::ErrorKind;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Usage errors are printed with the usage, and exit with status 2.
    let cli = args::Cli::parse_checked();
    if let args::Command::Bench(options) = &cli.command {
        let credentials = match cli.credentials() {
            Ok(credentials) => credentials,
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        };
        return bench::main(&cli.addr, cli.json, options, cli.tls_options(), credentials);
    }
    if let args::Command::Check { data_dir, progress } = &cli.command {
        return match check::run(data_dir, cli.json, *progress) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(error) => {
                eprintln!("error: {error}");
                ExitCode::from(2)
            }
        };
    }
    if let args::Command::Cluster(args::ClusterCommand::Local(options)) = &cli.command {
        return local::main(options);
    }
    let outcome = match &cli.command {
        // `user` edits a file and needs no server, so it never connects.
        args::Command::User(command) => users::run(command),
        _ => commands::run(&cli).map_err(|error| error.to_string()),
    };
    let report = match outcome {
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
