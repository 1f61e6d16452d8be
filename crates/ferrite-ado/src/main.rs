//! `ferrite-ado`: the Active Data Object host process. The shard's `AdoLink` starts it with the
//! descriptors and plugin chain on its command line (see `ferrite_ado::args`); it is not meant
//! to be run by hand.

use std::process::ExitCode;

use ferrite_ado::args::HostArgs;

fn main() -> ExitCode {
    let args = match HostArgs::parse(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("ferrite-ado: {e}");
            return ExitCode::from(2);
        }
    };
    match ferrite_ado::host::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrite-ado: {e}");
            ExitCode::FAILURE
        }
    }
}
