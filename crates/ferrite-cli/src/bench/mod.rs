//! `ferrite bench`: a load generator in the spirit of MCAS's `kvstore-perf`.
//!
//! `--clients` sessions (one connection each to the pool's shard) each run `--outstanding` worker
//! futures; a worker sends one request, awaits it, records its latency and sends the next, so
//! exactly `clients × outstanding` requests are in flight and the client library pipelines them
//! on the shared connections. Workers share nothing on the hot path: each has its own random
//! stream, key buffer and HDR histograms, merged once at the end, and publishes its counts for
//! the progress line through an atomic on its own cache line.
//!
//! `workload` holds the pure choices (keys, operation mix), `runner` the async driving of the
//! client, `report` the rendering of results as a table or one JSON document.

mod report;
mod runner;
mod workload;

use std::io::{ErrorKind, IsTerminal};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::output::Report;
use workload::{decimal_digits, OpMix};

/// How long a run lasts when neither `--duration` nor `--ops` is given.
const DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// Share of gets in `--workload mixed` when `--read-percent` is not given.
const DEFAULT_READ_PERCENT: u8 = 50;

/// Options of `ferrite bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// What each request does. `get` and `mixed` first store every key of the key space
    /// (reported separately as the preload), so reads find their keys.
    #[arg(long, value_enum, default_value_t = WorkloadKind::Put)]
    pub workload: WorkloadKind,

    /// Percentage of gets in `--workload mixed` [default: 50].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub read_percent: Option<u8>,

    /// Key length in bytes: keys are key numbers in decimal, zero-padded to this width.
    #[arg(long, value_name = "BYTES", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub key_size: u32,

    /// Value length in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 16)]
    pub value_size: u32,

    /// Size of the key space: each request picks a key uniformly from 0..N.
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,

    /// Number of sessions, each with its own connection.
    #[arg(long, value_name = "C", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub clients: u32,

    /// Requests in flight per client: that many workers each await one request at a time.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub outstanding: u32,

    /// Run for this long (decimals allowed) [default: 10 unless --ops is given].
    #[arg(long, value_name = "SECS", value_parser = parse_seconds, conflicts_with = "ops")]
    pub duration: Option<Duration>,

    /// Run until this many requests in total have completed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub ops: Option<u64>,

    /// Pool to run against: created if missing (sized for the key space) and deleted at the end
    /// unless --keep-pool. A pool that already existed is used as is and never deleted.
    #[arg(long, value_name = "NAME", default_value = "bench")]
    pub pool: String,

    /// Leave the pool and its keys in place at the end.
    #[arg(long)]
    pub keep_pool: bool,

    /// Seed of the random key and operation streams; the same seed replays the same requests.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkloadKind {
    Put,
    Get,
    Mixed,
}

impl WorkloadKind {
    fn name(self) -> &'static str {
        match self {
            WorkloadKind::Put => "put",
            WorkloadKind::Get => "get",
            WorkloadKind::Mixed => "mixed",
        }
    }
}

/// When the measured phase ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Workers stop sending once this much time has passed since the start.
    After(Duration),
    /// Workers stop once this many requests in total have completed.
    Ops(u64),
}

/// A validated run description: the options with defaults resolved and combinations checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub workload: WorkloadKind,
    pub mix: OpMix,
    pub key_size: usize,
    pub value_size: usize,
    pub keys: u64,
    pub clients: u32,
    pub outstanding: u32,
    pub stop: Stop,
    pub pool: String,
    pub keep_pool: bool,
    pub seed: u64,
    pub addr: String,
}

impl Plan {
    pub fn new(addr: &str, args: &BenchArgs) -> Result<Plan, String> {
        let mix = match (args.workload, args.read_percent) {
            (WorkloadKind::Mixed, percent) => OpMix::reads(percent.unwrap_or(DEFAULT_READ_PERCENT)),
            (WorkloadKind::Put, None) => OpMix::ALL_PUTS,
            (WorkloadKind::Get, None) => OpMix::ALL_GETS,
            (other, Some(_)) => {
                return Err(format!("--read-percent applies only to --workload mixed, not {}", other.name()))
            }
        };
        let key_size = args.key_size as usize;
        let widest = decimal_digits(args.keys - 1);
        if widest > key_size {
            return Err(format!(
                "--key-size {key_size} cannot hold {} distinct keys: key {} needs {widest} digits \
                 (raise --key-size or lower --keys)",
                args.keys,
                args.keys - 1
            ));
        }
        let stop = match (args.duration, args.ops) {
            (Some(duration), _) => Stop::After(duration),
            (None, Some(ops)) => Stop::Ops(ops),
            (None, None) => Stop::After(DEFAULT_DURATION),
        };
        Ok(Plan {
            workload: args.workload,
            mix,
            key_size,
            value_size: args.value_size as usize,
            keys: args.keys,
            clients: args.clients,
            outstanding: args.outstanding,
            stop,
            pool: args.pool.clone(),
            keep_pool: args.keep_pool,
            seed: args.seed,
            addr: addr.to_owned(),
        })
    }

    /// Worker futures in the measured phase.
    pub fn workers(&self) -> u64 {
        u64::from(self.clients) * u64::from(self.outstanding)
    }

    /// Whether the key space is stored before the measured phase.
    pub fn preloads(&self) -> bool {
        self.mix != OpMix::ALL_PUTS
    }

    /// Pool capacity for the whole key space (key + value + 64 bytes of overhead per pair, the
    /// server's accounting), doubled plus a mebibyte so that stores charging a little more than
    /// the documented minimum still never report `pool_full` in a benchmark.
    pub fn pool_size_bytes(&self) -> u64 {
        let pair = self.key_size as u64 + self.value_size as u64 + 64;
        self.keys.saturating_mul(pair).saturating_mul(2).saturating_add(1 << 20)
    }
}

/// Parses seconds, decimals allowed (`10`, `0.5`), into a positive duration.
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let seconds: f64 = text.trim().parse().map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !seconds.is_finite() || seconds <= 0.0 {
        return Err("the duration must be a positive number of seconds".to_owned());
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{text:?} seconds is too long"))
}

/// Runs `ferrite bench` and prints its report. Owns its exit status, unlike the other commands,
/// because a run whose every request failed still has a report worth printing before failing.
pub fn main(addr: &str, json: bool, args: &BenchArgs) -> ExitCode {
    let plan = match Plan::new(addr, args) {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("error: {message}");
            // The status clap uses for other usage errors.
            return ExitCode::from(2);
        }
    };
    // The rest of the CLI is blocking; only bench needs requests from many tasks on all cores.
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("ferrite-bench").build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: starting the benchmark's runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let live = std::io::stderr().is_terminal();
    let outcome = match runtime.block_on(runner::run(&plan, live)) {
        Ok(outcome) => outcome,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::FAILURE;
        }
    };
    // Nothing is left running: every task was awaited or its connection closed.
    runtime.shutdown_timeout(Duration::from_secs(1));

    let report = Report::text(report::render_text(&plan, &outcome), report::render_json(&plan, &outcome));
    match report.write(json, &mut std::io::stdout().lock()) {
        Ok(()) => {}
        Err(error) if error.kind() == ErrorKind::BrokenPipe => {}
        Err(error) => {
            eprintln!("error: writing the output: {error}");
            return ExitCode::FAILURE;
        }
    }
    let total = outcome.total();
    if total.ops == total.errors {
        let cause = outcome.first_error.as_deref().unwrap_or("no request completed");
        eprintln!("error: every request failed; the first failure was: {cause}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser;

    fn parse(extra: &[&str]) -> Result<Plan, String> {
        let cli = Cli::try_parse_from(["ferrite", "bench"].iter().chain(extra)).map_err(|e| e.to_string())?;
        match cli.command {
            Command::Bench(args) => Plan::new(&cli.addr, &args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn defaults_follow_the_documented_values() {
        let plan = parse(&[]).expect("defaults are valid");
        assert_eq!(plan.workload, WorkloadKind::Put);
        assert_eq!(plan.mix, OpMix::ALL_PUTS);
        assert_eq!((plan.key_size, plan.value_size, plan.keys), (8, 16, 100_000));
        assert_eq!((plan.clients, plan.outstanding), (1, 1));
        assert_eq!(plan.stop, Stop::After(Duration::from_secs(10)));
        assert_eq!(plan.pool, "bench");
        assert!(!plan.keep_pool);
        assert!(!plan.preloads());
    }

    #[test]
    fn mixed_reads_half_unless_told() {
        assert_eq!(parse(&["--workload", "mixed"]).expect("valid").mix, OpMix::reads(50));
        let plan = parse(&["--workload", "mixed", "--read-percent", "90"]).expect("valid");
        assert_eq!(plan.mix, OpMix::reads(90));
        assert!(plan.preloads());
        assert!(parse(&["--workload", "get"]).expect("valid").preloads());
    }

    #[test]
    fn read_percent_needs_the_mixed_workload_and_a_percentage() {
        let error = parse(&["--workload", "get", "--read-percent", "10"]).expect_err("refused");
        assert!(error.contains("only to --workload mixed"), "{error}");
        assert!(parse(&["--workload", "mixed", "--read-percent", "101"]).is_err());
    }

    #[test]
    fn key_size_must_hold_every_key_number() {
        let error = parse(&["--key-size", "4", "--keys", "100000"]).expect_err("refused");
        assert!(error.contains("key 99999 needs 5 digits"), "{error}");
        assert!(parse(&["--key-size", "5", "--keys", "100000"]).is_ok());
        assert!(parse(&["--key-size", "1", "--keys", "10"]).is_ok());
        assert!(parse(&["--key-size", "0"]).is_err());
        assert!(parse(&["--keys", "0"]).is_err());
    }

    #[test]
    fn duration_or_ops_but_not_both() {
        assert_eq!(parse(&["--duration", "2.5"]).expect("valid").stop, Stop::After(Duration::from_millis(2500)));
        assert_eq!(parse(&["--ops", "1000"]).expect("valid").stop, Stop::Ops(1000));
        assert!(parse(&["--duration", "1", "--ops", "5"]).is_err());
        assert!(parse(&["--duration", "0"]).is_err());
        assert!(parse(&["--duration", "-1"]).is_err());
        assert!(parse(&["--duration", "soon"]).is_err());
        assert!(parse(&["--clients", "0"]).is_err());
        assert!(parse(&["--outstanding", "0"]).is_err());
    }

    #[test]
    fn pool_is_sized_for_the_key_space() {
        let plan = parse(&["--keys", "1000", "--key-size", "8", "--value-size", "16"]).expect("valid");
        assert_eq!(plan.pool_size_bytes(), 1000 * 88 * 2 + (1 << 20));
        assert_eq!(plan.workers(), 1);
        let plan = parse(&["--clients", "4", "--outstanding", "128"]).expect("valid");
        assert_eq!(plan.workers(), 512);
    }
}
