//! `ferrite bench`: a load generator in the spirit of MCAS's `kvstore-perf`.
//!
//! `--clients` sessions (one connection each to every shard they use) each run `--outstanding`
//! worker futures; a worker sends one operation, awaits it, records its latency and sends the
//! next, so exactly `clients × outstanding` operations are in flight and the client library
//! pipelines them on the shared connections. Workers share nothing on the hot path: each has its
//! own random stream, key buffer and HDR histograms, merged once at the end, and publishes its
//! counts for the progress line through an atomic on its own cache line.
//!
//! `--workload invoke` runs an Active Data Object on each key instead: the pools are created with
//! the one-plugin chain `--plugin` names, and each operation is one `Pool::invoke`.
//!
//! The same workers drive three protocols (`--target`): Ferrite's native one through
//! `ferrite-client`, RESP through the `redis` crate (Ferrite's RESP listener or Redis itself),
//! and memcached's text protocol through a small client of our own, so a comparison between
//! stores measures the stores, not two different load generators.
//!
//! Values may be up to 1 GiB (`--value-size`): past the server's inline limit the native target
//! moves them with direct transfers, and `--transfer` chooses between inline and direct where both
//! are possible. The value is generated once and shared by every worker, and a worker reading
//! values directly reads them into one buffer of its own, allocated before the clock starts, so a
//! run of large values measures the transfers rather than the allocator.
//!
//! `workload` and `distribution` hold the pure choices (operation mixes, YCSB's among them; which
//! key each operation touches), `target` the three protocol clients, `inline` the connection that
//! sends puts inline past the client's own threshold, `runner` the async driving of a run,
//! `report` the rendering of results as a table or one JSON document.

mod distribution;
mod memcache;
mod report;
mod runner;
mod target;
mod workload;

use std::io::{ErrorKind, IsTerminal};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::output::Report;
pub use distribution::Distribution;
use workload::{decimal_digits, Mix, Op, Ycsb};

/// How long a run lasts when neither `--duration` nor `--ops` is given (and the workload is not
/// `erase`, which ends when every key is erased).
const DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// Share of gets in `--workload mixed` when `--read-percent` is not given.
const DEFAULT_READ_PERCENT: u8 = 50;

/// Room for inserted keys in a timed run of an inserting workload (YCSB D and E), beyond the
/// preloaded key space: a run that inserts more fills the pool and its inserts fail.
const TIMED_INSERTS_ROOM: u64 = 1_000_000;

/// Most pools one run may spread its keys over.
const POOLS_MAX: u32 = 1024;

/// Value length when `--value-size` is not given.
const DEFAULT_VALUE_SIZE: u64 = 16;

/// Longest value `--value-size` accepts: 1 GiB, the server's default
/// `limits.direct_value_bytes_max`.
pub const VALUE_SIZE_MAX: u64 = 1 << 30;

/// Most direct transfers the server lets one session hold open at once (its
/// `TRANSFERS_PER_SESSION_MAX`): a client's operations in flight when they go direct.
const DIRECT_TRANSFERS_PER_SESSION_MAX: u32 = 64;

/// What `--workload invoke` sends the shipped plugins unless `--payload` and `--value-size` say
/// otherwise: (plugin, payload, value size). Each is the plugin's cheapest request that does its
/// work: passthru ignores its payload, and a counter's `add 1` on its 8-byte value is the
/// increment the benchmark is after. A plugin not listed has no payload the benchmark could guess,
/// so `--payload` is required for it.
const SHIPPED_PLUGIN_DEFAULTS: [(&str, &str, u64); 2] = [("passthru", "", DEFAULT_VALUE_SIZE), ("counter", "add 1", 8)];

/// Options of `ferrite bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// What each operation does. Every workload except `put` first stores every key of the key
    /// space (reported separately as the preload). `erase` then erases each key once. `invoke`
    /// runs --plugin on each key (native only). `ycsb-a` to `ycsb-f` are YCSB's core workloads:
    /// A 50% get / 50% put, B 95/5, C all gets, D 95% gets / 5% inserts, E 95% scans (1-100
    /// keys) / 5% inserts, F 50% gets / 50% read-modify-writes.
    #[arg(long, value_enum, default_value_t = WorkloadKind::Put)]
    pub workload: WorkloadKind,

    /// Percentage of gets in `--workload mixed` [default: 50].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=100))]
    pub read_percent: Option<u8>,

    /// How operations choose keys [default: uniform; YCSB's own for ycsb-*: zipfian, latest for
    /// ycsb-d]. zipfian is YCSB's scrambled zipfian (constant 0.99); latest favours the newest
    /// keys.
    #[arg(long, value_enum, value_name = "KIND")]
    pub distribution: Option<Distribution>,

    /// Key length in bytes: keys are key numbers in decimal, zero-padded to this width.
    #[arg(long, value_name = "BYTES", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub key_size: u32,

    /// Value length in bytes, up to 1 GiB; KiB, MiB and GiB suffixes allowed (`64KiB`, `1GiB`)
    /// [default: 16; 8 with --plugin counter, its 64-bit integer]. Values past the server's inline
    /// limit (2 MiB by default) go as direct transfers (native only). An invoke workload creates
    /// absent keys with values of this many zero bytes.
    #[arg(long, value_name = "BYTES", value_parser = parse_value_size)]
    pub value_size: Option<u64>,

    /// How native puts and gets move their values. auto: as `Pool::put` and `Pool::get` choose
    /// (puts past the client's DIRECT_THRESHOLD_BYTES go direct; gets go inline while the server
    /// can send the value inline, direct beyond). inline: every put and get in one frame (values
    /// up to the server's inline limit). direct: every put and get as a direct transfer.
    #[arg(long, value_enum, default_value_t = Transfer::Auto)]
    pub transfer: Transfer,

    /// Size of the key space: keys 0..N (YCSB's record count). Inserts add keys after it.
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,

    /// Number of clients: sessions with a connection of their own to every shard they use (one
    /// connection each for resp and memcache).
    #[arg(long, value_name = "C", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub clients: u32,

    /// Operations in flight per client: that many workers each await one operation at a time.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub outstanding: u32,

    /// Run for this long (decimals allowed) [default: 10 unless --ops is given; erase: until
    /// every key is erased].
    #[arg(long, value_name = "SECS", value_parser = parse_seconds, conflicts_with = "ops")]
    pub duration: Option<Duration>,

    /// Run until this many operations in total have completed [erase: at most --keys].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub ops: Option<u64>,

    /// The protocol to drive: native (Ferrite's own), resp (Redis protocol: Ferrite's RESP
    /// listener or Redis; --addr is the RESP address) or memcache (memcached's text protocol).
    #[arg(long, value_enum, default_value_t = TargetKind::Native)]
    pub target: TargetKind,

    /// Spread the keys over N pools (key k in pool k mod N) whose names are chosen so that they
    /// cover every shard of the server in turn: the way to load several shards. Native only.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=i64::from(POOLS_MAX)))]
    pub pools: u32,

    /// Pool to run against (native): created if missing (sized for the key space) and deleted at
    /// the end unless --keep-pool. A pool that already existed is used as is and never deleted.
    /// With --pools N, the base of the N pools' names.
    #[arg(long, value_name = "NAME", default_value = "bench")]
    pub pool: String,

    /// Leave the pool and its keys in place at the end.
    #[arg(long)]
    pub keep_pool: bool,

    /// Measure at once, without storing the key space first: the keys are already there (an
    /// earlier run's --keep-pool). A missing key fails its get. Lets a harness wait for the
    /// server to finish the background work a preload leaves (log flushes, checkpoints) before
    /// it measures. An invoke run then starts its plugin hosts in the measured phase.
    #[arg(long)]
    pub no_preload: bool,

    /// Durability of every put (native only): sync waits for stable storage, async does not.
    /// Also the default of the pools the benchmark creates, which is the durability of an
    /// invocation's writes (an invocation does not choose its own). Default: the pool's own.
    #[arg(long, value_name = "sync|async")]
    pub durability: Option<ferrite_client::Durability>,

    /// The plugin `--workload invoke` runs: the pools the benchmark creates get this one-plugin
    /// chain. The server must know it (the shipped passthru and counter, installed beside
    /// ferrite-server, or one its configuration names).
    #[arg(long, value_name = "NAME")]
    pub plugin: Option<String>,

    /// Payload of every invocation [default: empty for passthru, `add 1` for counter; required
    /// for any other plugin].
    #[arg(long, value_name = "TEXT")]
    pub payload: Option<String>,

    /// Seed of the random key and operation streams; the same seed replays the same operations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WorkloadKind {
    Put,
    Get,
    Mixed,
    Erase,
    #[value(name = "ycsb-a")]
    YcsbA,
    #[value(name = "ycsb-b")]
    YcsbB,
    #[value(name = "ycsb-c")]
    YcsbC,
    #[value(name = "ycsb-d")]
    YcsbD,
    #[value(name = "ycsb-e")]
    YcsbE,
    #[value(name = "ycsb-f")]
    YcsbF,
    Invoke,
}

impl WorkloadKind {
    fn name(self) -> &'static str {
        match self {
            WorkloadKind::Put => "put",
            WorkloadKind::Get => "get",
            WorkloadKind::Mixed => "mixed",
            WorkloadKind::Erase => "erase",
            WorkloadKind::YcsbA => "ycsb-a",
            WorkloadKind::YcsbB => "ycsb-b",
            WorkloadKind::YcsbC => "ycsb-c",
            WorkloadKind::YcsbD => "ycsb-d",
            WorkloadKind::YcsbE => "ycsb-e",
            WorkloadKind::YcsbF => "ycsb-f",
            WorkloadKind::Invoke => "invoke",
        }
    }

    fn ycsb(self) -> Option<Ycsb> {
        match self {
            WorkloadKind::YcsbA => Some(Ycsb::A),
            WorkloadKind::YcsbB => Some(Ycsb::B),
            WorkloadKind::YcsbC => Some(Ycsb::C),
            WorkloadKind::YcsbD => Some(Ycsb::D),
            WorkloadKind::YcsbE => Some(Ycsb::E),
            WorkloadKind::YcsbF => Some(Ycsb::F),
            _ => None,
        }
    }
}

/// How the native target moves values (`--transfer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transfer {
    Auto,
    Inline,
    Direct,
}

impl Transfer {
    pub fn name(self) -> &'static str {
        match self {
            Transfer::Auto => "auto",
            Transfer::Inline => "inline",
            Transfer::Direct => "direct",
        }
    }
}

/// Which protocol `ferrite bench` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TargetKind {
    Native,
    Resp,
    Memcache,
}

impl TargetKind {
    fn name(self) -> &'static str {
        match self {
            TargetKind::Native => "native",
            TargetKind::Resp => "resp",
            TargetKind::Memcache => "memcache",
        }
    }
}

/// When the measured phase ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Workers stop sending once this much time has passed since the start.
    After(Duration),
    /// Workers stop once this many operations in total have completed.
    Ops(u64),
}

/// What each operation of `--workload invoke` runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invoke {
    /// The plugin, by the name the server knows it by: the whole chain of the run's pools.
    pub plugin: String,
    pub payload: String,
}

/// A validated run description: the options with defaults resolved and combinations checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub workload: WorkloadKind,
    pub mix: Mix,
    /// `None` for `erase`, which takes every key once in a fixed order.
    pub distribution: Option<Distribution>,
    pub target: TargetKind,
    pub key_size: usize,
    pub value_size: usize,
    pub transfer: Transfer,
    pub keys: u64,
    pub clients: u32,
    pub outstanding: u32,
    pub stop: Stop,
    pub pools: u32,
    pub pool: String,
    pub keep_pool: bool,
    /// `--no-preload`: the key space is stored already.
    pub no_preload: bool,
    pub durability: Option<ferrite_client::Durability>,
    /// Set exactly for `--workload invoke`.
    pub invoke: Option<Invoke>,
    pub seed: u64,
    pub addr: String,
    /// TLS to the server (`--ca`, native target only).
    pub tls: Option<ferrite_client::TlsOptions>,
    /// The user every connection authenticates as (`--user`, native target only).
    pub credentials: Option<ferrite_client::UserCredentials>,
}

impl Plan {
    /// Speaks TLS to the server (the CLI's `--ca`) and authenticates as a user (`--user`): the
    /// native target only.
    pub fn with_security(
        self,
        tls: Option<ferrite_client::TlsOptions>,
        credentials: Option<ferrite_client::UserCredentials>,
    ) -> Result<Plan, String> {
        if (tls.is_some() || credentials.is_some()) && self.target != TargetKind::Native {
            return Err("TLS (--ca) and users (--user) are supported by the native target only".into());
        }
        Ok(Plan { tls, credentials, ..self })
    }

    pub fn new(addr: &str, args: &BenchArgs) -> Result<Plan, String> {
        let mix = match (args.workload, args.read_percent) {
            (WorkloadKind::Mixed, percent) => Mix::reads(percent.unwrap_or(DEFAULT_READ_PERCENT)),
            (other, Some(_)) => {
                return Err(format!("--read-percent applies only to --workload mixed, not {}", other.name()))
            }
            (WorkloadKind::Put, None) => Mix::ALL_PUTS,
            (WorkloadKind::Get, None) => Mix::ALL_GETS,
            (WorkloadKind::Erase, None) => Mix::only(Op::Erase),
            (WorkloadKind::Invoke, None) => Mix::only(Op::Invoke),
            (ycsb, None) => ycsb.ycsb().expect("every other workload is a YCSB one").mix(),
        };
        let distribution = match (args.workload, args.distribution) {
            (WorkloadKind::Erase, Some(_)) => {
                return Err("--distribution does not apply to --workload erase, which erases every key once".into())
            }
            (WorkloadKind::Erase, None) => None,
            (_, Some(chosen)) => Some(chosen),
            (workload, None) => Some(workload.ycsb().map_or(Distribution::Uniform, Ycsb::default_distribution)),
        };
        if mix.sends(Op::Scan) && args.target != TargetKind::Native {
            let why = match args.target {
                TargetKind::Resp => "RESP has no ordered scan (SCAN walks a hash table in no key order)",
                _ => "memcached has no scan",
            };
            return Err(format!(
                "--workload {} scans keys in order from a start key; {why}. Run it with --target native",
                args.workload.name()
            ));
        }
        if args.durability.is_some() && args.target != TargetKind::Native {
            return Err(format!(
                "--durability applies to --target native; configure the {} server's own persistence instead",
                args.target.name()
            ));
        }
        if args.transfer != Transfer::Auto && args.target != TargetKind::Native {
            return Err(format!(
                "--transfer applies to --target native; the {} target sends every value inline",
                args.target.name()
            ));
        }
        if args.pools > 1 && args.target != TargetKind::Native {
            return Err(format!(
                "--pools applies to --target native; the {} target has no pools (to load several shards, \
                 run one bench per shard's port)",
                args.target.name()
            ));
        }
        let invoke = Plan::invoke(args)?;
        let value_size = match (args.value_size, &invoke) {
            (Some(size), _) => size,
            (None, Some(invoke)) => SHIPPED_PLUGIN_DEFAULTS
                .iter()
                .find(|(plugin, _, _)| *plugin == invoke.plugin)
                .map_or(DEFAULT_VALUE_SIZE, |&(_, _, size)| size),
            (None, None) => DEFAULT_VALUE_SIZE,
        };
        if args.transfer == Transfer::Inline && value_size > ferrite_proto::VALUE_INLINE_BYTES_MAX as u64 {
            return Err(format!(
                "--transfer inline sends each value in one frame, which holds at most {} bytes \
                 (the protocol's inline limit); --value-size {value_size} needs --transfer direct or auto",
                ferrite_proto::VALUE_INLINE_BYTES_MAX
            ));
        }
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
            (None, Some(ops)) if args.workload == WorkloadKind::Erase && ops > args.keys => {
                return Err(format!("--workload erase erases each of the {} keys once: --ops {ops} is more", args.keys))
            }
            (None, Some(ops)) => Stop::Ops(ops),
            (None, None) if args.workload == WorkloadKind::Erase => Stop::Ops(args.keys),
            (None, None) => Stop::After(DEFAULT_DURATION),
        };
        let plan = Plan {
            workload: args.workload,
            mix,
            distribution,
            target: args.target,
            key_size,
            value_size: usize::try_from(value_size).expect("--value-size is at most 1 GiB"),
            transfer: args.transfer,
            keys: args.keys,
            clients: args.clients,
            outstanding: args.outstanding,
            stop,
            pools: args.pools,
            pool: args.pool.clone(),
            keep_pool: args.keep_pool,
            no_preload: args.no_preload,
            durability: args.durability,
            invoke,
            seed: args.seed,
            addr: addr.to_owned(),
            tls: None,
            credentials: None,
        };
        if plan.puts_may_go_direct() {
            plan.check_direct_outstanding()?;
        }
        if plan.inserts() && plan.insert_end() <= plan.keys {
            return Err(format!(
                "--workload {} inserts keys after the {} preloaded ones, and --key-size {key_size} leaves no \
                 room for them (raise --key-size)",
                args.workload.name(),
                args.keys
            ));
        }
        Ok(plan)
    }

    /// The plugin and payload of `--workload invoke`, or `None` for the other workloads; refuses
    /// `--plugin` or `--payload` without it, and `--workload invoke` without a plugin, without a
    /// payload it cannot guess, or on a target with no plugins.
    fn invoke(args: &BenchArgs) -> Result<Option<Invoke>, String> {
        if args.workload != WorkloadKind::Invoke {
            let given =
                if args.plugin.is_some() { Some("--plugin") } else { args.payload.as_ref().map(|_| "--payload") };
            return match given {
                Some(option) => {
                    Err(format!("{option} applies only to --workload invoke, not {}", args.workload.name()))
                }
                None => Ok(None),
            };
        }
        if args.target != TargetKind::Native {
            return Err(format!(
                "--workload invoke runs plugins through Ferrite's native protocol; the {} target has none \
                 (run it with --target native)",
                args.target.name()
            ));
        }
        let Some(plugin) = args.plugin.clone() else {
            return Err("--workload invoke needs --plugin NAME: the plugin each operation runs (passthru, counter \
                 or any the server knows)"
                .into());
        };
        let default = SHIPPED_PLUGIN_DEFAULTS.iter().find(|(name, _, _)| *name == plugin);
        let payload = match (&args.payload, default) {
            (Some(payload), _) => payload.clone(),
            (None, Some(&(_, payload, _))) => payload.to_owned(),
            (None, None) => {
                return Err(format!(
                    "--plugin {plugin} needs --payload TEXT, what each invocation sends (only passthru and counter \
                 have a default)"
                ))
            }
        };
        Ok(Some(Invoke { plugin, payload }))
    }

    /// The value this run's puts store, the preload's included: for an invoke workload zero
    /// bytes, exactly what create-on-demand makes of an absent key, so the plugin finds a
    /// preloaded key as its first invocation would have created it (a counter starts at 0,
    /// where the printable pattern would read as some large number); otherwise the printable
    /// pattern. A run makes it once and shares it (see `runner`): a 1 GiB value must not be
    /// copied per worker.
    pub fn value(&self) -> Vec<u8> {
        match self.invoke {
            Some(_) => vec![0; self.value_size],
            None => workload::value_pattern(self.value_size),
        }
    }

    /// Whether this run's puts may go as direct transfers: `--transfer direct`, or auto with values
    /// longer than the client sends inline.
    pub fn puts_may_go_direct(&self) -> bool {
        match self.transfer {
            Transfer::Direct => true,
            Transfer::Inline => false,
            Transfer::Auto => self.value_size > ferrite_client::DIRECT_THRESHOLD_BYTES,
        }
    }

    /// Refuses more operations in flight per client than the server lets a session hold direct
    /// transfers open, for a plan whose operations go direct.
    pub fn check_direct_outstanding(&self) -> Result<(), String> {
        if self.outstanding > DIRECT_TRANSFERS_PER_SESSION_MAX {
            return Err(format!(
                "--outstanding {} with direct transfers: the server lets a connection hold at most \
                 {DIRECT_TRANSFERS_PER_SESSION_MAX} open at once (spread the load with --clients)",
                self.outstanding
            ));
        }
        Ok(())
    }

    /// Puts in flight during the preload: `PRELOAD_OUTSTANDING`, or fewer where there are fewer
    /// keys, or where the puts go direct and each client may hold only so many transfers open.
    pub fn preload_outstanding(&self) -> u64 {
        let mut outstanding = runner::PRELOAD_OUTSTANDING.min(self.keys);
        if self.puts_may_go_direct() {
            outstanding = outstanding.min(u64::from(DIRECT_TRANSFERS_PER_SESSION_MAX) * u64::from(self.clients));
        }
        outstanding
    }

    /// Puts that may be in flight at once, the preload's included.
    fn puts_in_flight_max(&self) -> u64 {
        let preload = if self.preloads() { self.preload_outstanding() } else { 0 };
        self.workers().max(preload)
    }

    /// Worker futures in the measured phase.
    pub fn workers(&self) -> u64 {
        u64::from(self.clients) * u64::from(self.outstanding)
    }

    /// Whether the key space is stored before the measured phase.
    pub fn preloads(&self) -> bool {
        self.mix != Mix::ALL_PUTS && !self.no_preload
    }

    /// Whether the workload adds keys beyond the preloaded key space.
    pub fn inserts(&self) -> bool {
        self.mix.sends(Op::Insert)
    }

    /// First key number too wide for `--key-size` digits: inserts stop below it.
    pub fn insert_end(&self) -> u64 {
        u32::try_from(self.key_size).ok().and_then(|digits| 10u64.checked_pow(digits)).unwrap_or(u64::MAX)
    }

    /// Pairs the pools must hold: the key space, plus room for inserts.
    pub fn pairs_max(&self) -> u64 {
        if !self.inserts() {
            return self.keys;
        }
        let room = match self.stop {
            Stop::Ops(ops) => ops,
            Stop::After(_) => self.keys.max(TIMED_INSERTS_ROOM),
        };
        self.keys.saturating_add(room)
    }

    /// Capacity of each pool (key + value + 64 bytes of overhead per pair, the server's
    /// accounting) for its share of `pairs_max`, doubled plus a mebibyte so that stores charging
    /// a little more than the documented minimum still never report `pool_full` in a benchmark.
    /// When puts may go direct, also room for a staged value per put in flight: a direct put
    /// stages its whole value in the pool beside the key's old one until it commits.
    pub fn pool_size_bytes(&self) -> u64 {
        let pair = self.key_size as u64 + self.value_size as u64 + 64;
        let pairs = self.pairs_max().div_ceil(u64::from(self.pools));
        let staging = if self.puts_may_go_direct() { self.puts_in_flight_max().saturating_mul(pair) } else { 0 };
        pairs.saturating_mul(pair).saturating_mul(2).saturating_add(staging).saturating_add(1 << 20)
    }
}

/// Parses a value size: bytes, or a whole number of KiB, MiB or GiB (`64KiB`, `1GiB`; `K`, `M`,
/// `G` and any case too), at most [`VALUE_SIZE_MAX`].
fn parse_value_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let digits_end = trimmed.find(|c: char| !c.is_ascii_digit()).unwrap_or(trimmed.len());
    let (digits, unit) = trimmed.split_at(digits_end);
    let scale: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        _ => return Err(format!("{text:?} is not a size: write bytes, or a number with KiB, MiB or GiB")),
    };
    let size = digits
        .parse::<u64>()
        .ok()
        .and_then(|number| number.checked_mul(scale))
        .ok_or_else(|| format!("{text:?} is not a size: write bytes, or a number with KiB, MiB or GiB"))?;
    if size > VALUE_SIZE_MAX {
        return Err(format!("{size} bytes is more than the largest value, {VALUE_SIZE_MAX} bytes (1 GiB)"));
    }
    Ok(size)
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
pub fn main(
    addr: &str,
    json: bool,
    args: &BenchArgs,
    tls: Option<ferrite_client::TlsOptions>,
    credentials: Option<ferrite_client::UserCredentials>,
) -> ExitCode {
    let plan = match Plan::new(addr, args).and_then(|plan| plan.with_security(tls, credentials)) {
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

    /// TLS and users reach the native target only: the RESP and memcache ones speak in clear,
    /// unauthenticated.
    #[test]
    fn tls_and_users_are_for_the_native_target() {
        let tls = || Some(ferrite_client::TlsOptions::with_ca("ca.pem"));
        let user = || Some(ferrite_client::UserCredentials::new("alice", "a password"));
        let native = parse(&[]).and_then(|plan| plan.with_security(tls(), user())).expect("native");
        assert!(native.tls.is_some() && native.credentials.is_some());
        for (tls, user) in [(tls(), None), (None, user())] {
            let error =
                parse(&["--target", "resp"]).and_then(|plan| plan.with_security(tls, user)).expect_err("resp in clear");
            assert!(error.contains("native target only"), "{error}");
        }
    }

    #[test]
    fn defaults_follow_the_documented_values() {
        let plan = parse(&[]).expect("defaults are valid");
        assert_eq!(plan.workload, WorkloadKind::Put);
        assert_eq!(plan.mix, Mix::ALL_PUTS);
        assert_eq!((plan.key_size, plan.value_size, plan.keys), (8, 16, 100_000));
        assert_eq!((plan.clients, plan.outstanding), (1, 1));
        assert_eq!((plan.target, plan.pools, plan.distribution), (TargetKind::Native, 1, Some(Distribution::Uniform)));
        assert_eq!(plan.stop, Stop::After(Duration::from_secs(10)));
        assert_eq!(plan.pool, "bench");
        assert!(!plan.keep_pool);
        assert!(!plan.preloads());
        assert_eq!(plan.invoke, None);
    }

    #[test]
    fn mixed_reads_half_unless_told() {
        assert_eq!(parse(&["--workload", "mixed"]).expect("valid").mix, Mix::reads(50));
        let plan = parse(&["--workload", "mixed", "--read-percent", "90"]).expect("valid");
        assert_eq!(plan.mix, Mix::reads(90));
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
    fn ycsb_workloads_take_their_mix_and_distribution() {
        let a = parse(&["--workload", "ycsb-a"]).expect("valid");
        assert_eq!(a.mix, Ycsb::A.mix());
        assert_eq!(a.distribution, Some(Distribution::Zipfian));
        assert!(a.preloads() && !a.inserts());
        let d = parse(&["--workload", "ycsb-d"]).expect("valid");
        assert_eq!(d.distribution, Some(Distribution::Latest));
        assert!(d.inserts());
        let e = parse(&["--workload", "ycsb-e", "--distribution", "uniform"]).expect("valid");
        assert_eq!(e.distribution, Some(Distribution::Uniform));
        assert!(e.mix.sends(Op::Scan));
        assert_eq!(parse(&["--workload", "get"]).expect("valid").distribution, Some(Distribution::Uniform));
        let error = parse(&["--workload", "ycsb-a", "--read-percent", "10"]).expect_err("refused");
        assert!(error.contains("only to --workload mixed"), "{error}");
    }

    #[test]
    fn erase_takes_every_key_once() {
        let plan = parse(&["--workload", "erase", "--keys", "500"]).expect("valid");
        assert_eq!(plan.stop, Stop::Ops(500), "erase ends when every key is gone");
        assert_eq!(plan.distribution, None);
        assert!(plan.preloads());
        assert_eq!(
            parse(&["--workload", "erase", "--keys", "500", "--ops", "300"]).expect("valid").stop,
            Stop::Ops(300)
        );
        let error = parse(&["--workload", "erase", "--keys", "500", "--ops", "501"]).expect_err("refused");
        assert!(error.contains("erases each of the 500 keys once"), "{error}");
        let error = parse(&["--workload", "erase", "--distribution", "zipfian"]).expect_err("refused");
        assert!(error.contains("does not apply"), "{error}");
    }

    #[test]
    fn scans_and_pools_are_native_only() {
        let error = parse(&["--workload", "ycsb-e", "--target", "resp"]).expect_err("refused");
        assert!(error.contains("--target native"), "{error}");
        assert!(parse(&["--workload", "ycsb-e", "--target", "memcache"]).is_err());
        assert!(parse(&["--workload", "ycsb-d", "--target", "resp"]).is_ok());
        let error = parse(&["--pools", "2", "--target", "resp"]).expect_err("refused");
        assert!(error.contains("--pools applies to --target native"), "{error}");
        assert_eq!(parse(&["--pools", "4"]).expect("valid").pools, 4);
        assert!(parse(&["--pools", "0"]).is_err());
        assert!(parse(&["--pools", "1025"]).is_err());
    }

    /// Inserts need key numbers beyond the key space that still fit the key width.
    #[test]
    fn inserts_need_room_in_the_key_width() {
        let error = parse(&["--workload", "ycsb-d", "--keys", "100", "--key-size", "2"]).expect_err("refused");
        assert!(error.contains("no room"), "{error}");
        let plan = parse(&["--workload", "ycsb-d", "--keys", "100", "--key-size", "3"]).expect("valid");
        assert_eq!(plan.insert_end(), 1_000);
        assert_eq!(parse(&["--key-size", "40"]).expect("valid").insert_end(), u64::MAX);
        // Room for the inserts in the pools: the --ops bound, or a generous allowance when timed.
        let plan = parse(&["--workload", "ycsb-d", "--keys", "1000", "--ops", "300"]).expect("valid");
        assert_eq!(plan.pairs_max(), 1300);
        let plan = parse(&["--workload", "ycsb-d", "--keys", "1000", "--duration", "1"]).expect("valid");
        assert_eq!(plan.pairs_max(), 1000 + TIMED_INSERTS_ROOM);
        assert_eq!(parse(&["--workload", "ycsb-c", "--keys", "1000"]).expect("valid").pairs_max(), 1000);
    }

    /// `--workload invoke` names its plugin; the shipped ones have a payload and value size of
    /// their own, any other plugin must be given its payload.
    #[test]
    fn invoke_runs_a_plugin_with_its_payload() {
        let passthru = parse(&["--workload", "invoke", "--plugin", "passthru"]).expect("valid");
        assert_eq!(passthru.invoke, Some(Invoke { plugin: "passthru".into(), payload: String::new() }));
        assert_eq!((passthru.mix, passthru.value_size), (Mix::only(Op::Invoke), 16));
        assert_eq!(passthru.distribution, Some(Distribution::Uniform));
        assert!(passthru.preloads(), "the keys exist before the measured invocations");

        let counter = parse(&["--workload", "invoke", "--plugin", "counter"]).expect("valid");
        assert_eq!(counter.invoke, Some(Invoke { plugin: "counter".into(), payload: "add 1".into() }));
        assert_eq!(counter.value_size, 8, "a counter is a 64-bit integer");
        let told = parse(&["--workload", "invoke", "--plugin", "counter", "--payload", "add -3", "--value-size", "16"])
            .expect("valid");
        assert_eq!(told.invoke.map(|invoke| invoke.payload), Some("add -3".into()));
        assert_eq!(told.value_size, 16);

        let error = parse(&["--workload", "invoke", "--plugin", "mine"]).expect_err("refused");
        assert!(error.contains("--plugin mine needs --payload"), "{error}");
        let mine = parse(&["--workload", "invoke", "--plugin", "mine", "--payload", ""]).expect("valid");
        assert_eq!((mine.invoke.map(|invoke| invoke.payload), mine.value_size), (Some(String::new()), 16));
    }

    #[test]
    fn invoke_options_go_together_and_need_the_native_target() {
        let error = parse(&["--workload", "invoke"]).expect_err("refused");
        assert!(error.contains("needs --plugin NAME"), "{error}");
        let error = parse(&["--workload", "get", "--plugin", "passthru"]).expect_err("refused");
        assert!(error.contains("--plugin applies only to --workload invoke, not get"), "{error}");
        let error = parse(&["--payload", "add 1"]).expect_err("refused");
        assert!(error.contains("--payload applies only to --workload invoke, not put"), "{error}");
        let error = parse(&["--workload", "invoke", "--plugin", "counter", "--target", "resp"]).expect_err("refused");
        assert!(error.contains("--target native"), "{error}");
        assert!(parse(&["--workload", "invoke", "--plugin", "counter", "--target", "memcache"]).is_err());
        assert_eq!(parse(&[]).expect("valid").invoke, None);
    }

    /// An invoke run preloads zeroed values, as create-on-demand would make them; the others the
    /// printable pattern.
    #[test]
    fn invoke_preloads_what_create_on_demand_makes() {
        let counter = parse(&["--workload", "invoke", "--plugin", "counter"]).expect("valid");
        assert_eq!(counter.value(), [0u8; 8]);
        let get = parse(&["--workload", "get", "--value-size", "7"]).expect("valid");
        assert_eq!(get.value(), b"ferrite");
    }

    /// Sizes up to 1 GiB, in bytes or with a binary unit; nothing larger.
    #[test]
    fn value_sizes_take_binary_units_up_to_a_gibibyte() {
        let size = |text: &str| parse(&["--value-size", text]).map(|plan| plan.value_size);
        assert_eq!(size("4096"), Ok(4096));
        assert_eq!(size("64KiB"), Ok(64 << 10));
        assert_eq!(size("64k"), Ok(64 << 10));
        assert_eq!(size("2 MiB"), Ok(2 << 20));
        assert_eq!(size("1GiB"), Ok(1 << 30));
        assert_eq!(size("1073741824"), Ok(1 << 30));
        assert_eq!(size("0"), Ok(0));
        for refused in ["1073741825", "2GiB", "1.5MiB", "MiB", "12 parsecs", "-1", "99999999999999999999G"] {
            assert!(size(refused).is_err(), "{refused}");
        }
    }

    /// `--transfer` is native only, and inline stops at the protocol's inline limit.
    #[test]
    fn transfers_are_native_and_inline_fits_a_frame() {
        assert_eq!(parse(&[]).expect("valid").transfer, Transfer::Auto);
        let direct = parse(&["--transfer", "direct", "--value-size", "1GiB", "--keys", "2"]).expect("valid");
        assert_eq!((direct.transfer, direct.value_size), (Transfer::Direct, 1 << 30));
        assert!(parse(&["--transfer", "inline", "--value-size", "2MiB"]).is_ok());
        let error = parse(&["--transfer", "inline", "--value-size", "3MiB"]).expect_err("refused");
        assert!(error.contains("--transfer inline") && error.contains("2097152"), "{error}");
        let error = parse(&["--transfer", "direct", "--target", "resp"]).expect_err("refused");
        assert!(error.contains("--transfer applies to --target native"), "{error}");
        assert!(parse(&["--transfer", "sideways"]).is_err());
    }

    /// Puts that may go direct stage a whole value beside the old one until they commit: the pool
    /// has room for one staged value per put in flight (the preload's 128 at most).
    #[test]
    fn pools_for_direct_puts_have_room_to_stage() {
        let pair = 8 + (64u64 << 20) + 64;
        let plan = parse(&["--keys", "4", "--value-size", "64MiB", "--outstanding", "2"]).expect("valid");
        assert!(plan.puts_may_go_direct());
        assert_eq!(plan.pool_size_bytes(), 4 * pair * 2 + 2 * pair + (1 << 20));
        let plan = parse(&["--keys", "4", "--value-size", "64MiB", "--workload", "get"]).expect("valid");
        assert_eq!(plan.pool_size_bytes(), 4 * pair * 2 + 4 * pair + (1 << 20), "the preload puts 4 at once");
        let inline = parse(&["--keys", "4", "--value-size", "2MiB", "--transfer", "inline"]).expect("valid");
        assert!(!inline.puts_may_go_direct());
        assert!(!parse(&["--value-size", "1MiB"]).expect("valid").puts_may_go_direct(), "auto: 1 MiB goes inline");
        assert!(parse(&["--value-size", "1MiB", "--transfer", "direct"]).expect("valid").puts_may_go_direct());
    }

    /// `--no-preload` measures reads of a kept pool at once.
    #[test]
    fn no_preload_skips_storing_the_key_space() {
        assert!(!parse(&["--workload", "get", "--no-preload"]).expect("valid").preloads());
        assert!(!parse(&["--workload", "ycsb-b", "--no-preload"]).expect("valid").preloads());
        assert!(!parse(&["--no-preload"]).expect("valid").preloads());
    }

    /// A server lets a session hold 64 direct transfers open: direct runs keep each client within
    /// that, in the preload too.
    #[test]
    fn direct_transfers_stay_within_a_sessions_allowance() {
        let error = parse(&["--transfer", "direct", "--outstanding", "65"]).expect_err("refused");
        assert!(error.contains("at most 64"), "{error}");
        let past_inline = (ferrite_client::DIRECT_THRESHOLD_BYTES + 1).to_string();
        assert!(
            parse(&["--value-size", &past_inline, "--outstanding", "65"]).is_err(),
            "auto puts past 2 MiB go direct"
        );
        assert!(parse(&["--value-size", "2MiB", "--outstanding", "128"]).is_ok(), "auto puts of 2 MiB go inline");
        let plan = parse(&["--transfer", "direct", "--workload", "get", "--keys", "1000"]).expect("valid");
        assert_eq!(plan.preload_outstanding(), 64);
        let plan = parse(&["--transfer", "direct", "--workload", "get", "--clients", "3"]).expect("valid");
        assert_eq!(plan.preload_outstanding(), 128);
        assert_eq!(parse(&["--workload", "get"]).expect("valid").preload_outstanding(), 128);
        assert_eq!(parse(&["--workload", "get", "--keys", "5"]).expect("valid").preload_outstanding(), 5);
    }

    #[test]
    fn pool_is_sized_for_the_key_space() {
        let plan = parse(&["--keys", "1000", "--key-size", "8", "--value-size", "16"]).expect("valid");
        assert_eq!(plan.pool_size_bytes(), 1000 * 88 * 2 + (1 << 20));
        assert_eq!(plan.workers(), 1);
        let plan = parse(&["--clients", "4", "--outstanding", "128"]).expect("valid");
        assert_eq!(plan.workers(), 512);
        // Spread over pools, each holds its share.
        let plan = parse(&["--keys", "1000", "--pools", "4"]).expect("valid");
        assert_eq!(plan.pool_size_bytes(), 250 * 88 * 2 + (1 << 20));
    }
}
