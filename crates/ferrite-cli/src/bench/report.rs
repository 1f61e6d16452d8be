//! What a run measured, and its two renderings: a table for people, one JSON document for
//! programs (`bench/compare` reads it).

use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::workload::{Mix, Op, SCAN_LENGTH_MAX};
use super::{Plan, Stop, Transfer, WorkloadKind};
use crate::output::Table;

/// Significant decimal digits the latency histograms keep: 0.1% resolution at any magnitude,
/// which is what p99.9 needs to mean something.
const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;

/// The percentiles the JSON report lists for each kind of operation, enough to draw its latency
/// distribution (a CDF) without shipping the histogram: dense in the tail, where latency
/// distributions differ. 100 is the exact maximum.
const PERCENTILE_LADDER: [f64; 19] = [
    1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 80.0, 85.0, 90.0, 95.0, 97.5, 99.0, 99.5, 99.75, 99.9, 99.95, 99.99, 99.999,
    100.0,
];

/// Values from this length up are "large": the text report adds a column of value bytes per
/// second, where bandwidth says more than operations do.
const LARGE_VALUE_BYTES: usize = 64 * 1024;

/// Highest latency a fresh histogram tracks before it resizes itself. Small so an idle worker's
/// histogram is small (about 90 KiB), while a slower request still records exactly.
const HISTOGRAM_INITIAL_MAX_NS: u64 = 1_000_000;

/// Counts and latencies of one kind of request, for one worker or, once merged, for the run.
#[derive(Debug, Clone)]
pub struct Tally {
    /// Requests completed, failed ones included.
    pub ops: u64,
    /// Requests the server (or the connection) failed.
    pub errors: u64,
    /// Latency of every completed request, failed ones included, in nanoseconds.
    pub latency_ns: Histogram<u64>,
    /// The exact extremes: the histogram knows them only to its precision.
    min_ns: u64,
    max_ns: u64,
}

impl Tally {
    pub fn new() -> Tally {
        let mut latency_ns = Histogram::new_with_bounds(1, HISTOGRAM_INITIAL_MAX_NS, HISTOGRAM_SIGNIFICANT_DIGITS)
            .expect("constant bounds are valid: 1 <= low, high >= 2 * low, 3 significant digits");
        latency_ns.auto(true);
        Tally { ops: 0, errors: 0, latency_ns, min_ns: u64::MAX, max_ns: 0 }
    }

    /// Counts one completed request.
    pub fn record(&mut self, latency: Duration, ok: bool) {
        self.ops += 1;
        self.errors += u64::from(!ok);
        // A zero would be below the histogram's lowest value; no request takes under 1 ns.
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX).max(1);
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        if self.latency_ns.record(ns).is_err() {
            // Only if resizing could not allocate; clamping beats losing the sample.
            self.latency_ns.saturating_record(ns);
        }
    }

    /// Adds `other`'s counts into this tally.
    pub fn merge(&mut self, other: &Tally) {
        self.ops += other.ops;
        self.errors += other.errors;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        self.latency_ns
            .add(&other.latency_ns)
            .expect("auto-resizing histograms with the same precision accept any other's values");
    }

    pub fn latency(&self) -> Option<Latency> {
        let latency = Latency::of(&self.latency_ns)?;
        // The histogram rounds a percentile up to its precision, which can pass the exact maximum.
        let cap = |ns: u64| ns.min(self.max_ns);
        Some(Latency {
            min_ns: self.min_ns,
            max_ns: self.max_ns,
            p50_ns: cap(latency.p50_ns),
            p90_ns: cap(latency.p90_ns),
            p99_ns: cap(latency.p99_ns),
            p99_9_ns: cap(latency.p99_9_ns),
            ..latency
        })
    }

    /// `[percentile, microseconds]` for each step of [`PERCENTILE_LADDER`], the last one the
    /// exact maximum; empty without samples.
    pub fn percentile_ladder(&self) -> Vec<(f64, f64)> {
        if self.latency_ns.is_empty() {
            return Vec::new();
        }
        PERCENTILE_LADDER
            .iter()
            .map(|&percentile| {
                let ns = if percentile >= 100.0 {
                    self.max_ns
                } else {
                    // Never above the exact maximum: the histogram rounds up to its precision.
                    self.latency_ns.value_at_quantile(percentile / 100.0).min(self.max_ns)
                };
                (percentile, micros(ns))
            })
            .collect()
    }
}

/// Counts and latencies of each kind of operation a workload sends, in report order.
#[derive(Debug, Clone)]
pub struct Tallies {
    /// One entry per kind the mix sends (at most two): a linear search is the fastest lookup.
    by_op: Vec<(Op, Tally)>,
}

impl Tallies {
    pub fn for_mix(mix: Mix) -> Tallies {
        Tallies { by_op: mix.ops().into_iter().map(|op| (op, Tally::new())).collect() }
    }

    /// Counts one completed operation of kind `op`, which must be one the mix sends.
    pub fn record(&mut self, op: Op, latency: Duration, ok: bool) {
        let (_, tally) = self
            .by_op
            .iter_mut()
            .find(|(kind, _)| *kind == op)
            .expect("workers only send the kinds of their mix, and the tallies were made for it");
        tally.record(latency, ok);
    }

    /// Adds `other`'s counts (from the same mix) into these.
    pub fn merge(&mut self, other: &Tallies) {
        for ((op, tally), (other_op, other_tally)) in self.by_op.iter_mut().zip(&other.by_op) {
            assert_eq!(op, other_op, "tallies of one run share their mix");
            tally.merge(other_tally);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &(Op, Tally)> {
        self.by_op.iter()
    }

    /// Every kind together.
    pub fn total(&self) -> Tally {
        let mut total = Tally::new();
        for (_, tally) in &self.by_op {
            total.merge(tally);
        }
        total
    }
}

/// The latency figures a report shows, in nanoseconds. Percentiles are the histogram's: the
/// highest value equivalent to the true one at three significant digits, so at most 0.1% high.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    pub min_ns: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p99_9_ns: u64,
    pub max_ns: u64,
}

impl Latency {
    /// The summary of `histogram`, or `None` if it holds no sample.
    pub fn of(histogram: &Histogram<u64>) -> Option<Latency> {
        if histogram.is_empty() {
            return None;
        }
        Some(Latency {
            min_ns: histogram.min(),
            mean_ns: histogram.mean(),
            p50_ns: histogram.value_at_quantile(0.50),
            p90_ns: histogram.value_at_quantile(0.90),
            p99_ns: histogram.value_at_quantile(0.99),
            p99_9_ns: histogram.value_at_quantile(0.999),
            max_ns: histogram.max(),
        })
    }

    fn json(&self, ladder: Vec<(f64, f64)>) -> Value {
        let percentiles: Vec<Value> = ladder.into_iter().map(|(p, us)| json!({"p": p, "us": us})).collect();
        json!({
            "percentiles": percentiles,
            "min": micros(self.min_ns),
            "mean": round_to(self.mean_ns / 1_000.0, 3),
            "p50": micros(self.p50_ns),
            "p90": micros(self.p90_ns),
            "p99": micros(self.p99_ns),
            "p99_9": micros(self.p99_9_ns),
            "max": micros(self.max_ns),
        })
    }
}

/// The preload phase: every key of the key space stored once before a read workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Preload {
    pub ops: u64,
    pub errors: u64,
    pub elapsed: Duration,
    /// Puts in flight during the preload.
    pub outstanding: u64,
    /// For an invoke workload, the invocations that started the plugin hosts after the puts.
    pub host_start: Option<HostStart>,
}

/// The first invocation of each pool, sent before the measured phase: it starts the pool's
/// plugin host process, a cost paid once per host rather than per invocation.
#[derive(Debug, Clone, PartialEq)]
pub struct HostStart {
    /// One per pool (that holds a key).
    pub invocations: u64,
    pub errors: u64,
    /// From the first sent to the last answered: the slowest host start.
    pub elapsed: Duration,
}

/// Everything a run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub preload: Option<Preload>,
    /// From the first operation sent to the last reply received in the measured phase.
    pub elapsed: Duration,
    /// Each kind of operation the workload sent.
    pub tallies: Tallies,
    /// The first failure seen, as an example of what went wrong when `errors` is not zero.
    pub first_error: Option<String>,
    /// What happened to the pools at the end, for the record (`deleted`, `kept`, ...).
    pub pool_fate: &'static str,
    /// The pools the keys were spread over, with their shards (native only).
    pub pools: Vec<(String, u16)>,
    /// Shards of the server, where the protocol tells (native).
    pub shard_count: Option<u16>,
    /// Worker threads of the client's runtime (one per core unless `TOKIO_WORKER_THREADS` says
    /// otherwise); they share the machine with the server when both run on it.
    pub runtime_threads: usize,
}

impl Outcome {
    /// Every kind of operation together.
    pub fn total(&self) -> Tally {
        self.tallies.total()
    }

    /// The rows of the report: one per kind of operation the workload sends, plus their sum when
    /// it sends more than one; each with the value bytes its successful operations moved.
    fn rows(&self, value_size: usize) -> Vec<(&'static str, Tally, u64)> {
        let mut rows: Vec<(&'static str, Tally, u64)> = self
            .tallies
            .iter()
            .map(|(op, tally)| (op.name(), tally.clone(), value_bytes(*op, tally, value_size)))
            .collect();
        if rows.len() > 1 {
            rows.push(("all", self.total(), self.value_bytes(value_size)));
        }
        rows
    }

    /// Value bytes the run's successful operations moved.
    pub fn value_bytes(&self, value_size: usize) -> u64 {
        self.tallies.iter().map(|(op, tally)| value_bytes(*op, tally, value_size)).sum()
    }
}

/// Value bytes `tally`'s successful operations of kind `op` moved: a value each for a put, an
/// insert or a get, two for a read-modify-write, none for the others (an erase or a scan moves no
/// value; an invocation's value stays in the server).
fn value_bytes(op: Op, tally: &Tally, value_size: usize) -> u64 {
    let values = match op {
        Op::Get | Op::Put | Op::Insert => 1,
        Op::ReadModifyWrite => 2,
        Op::Scan | Op::Erase | Op::Invoke => 0,
    };
    (tally.ops - tally.errors).saturating_mul(values * value_size as u64)
}

/// The report for people: what ran, the preload if any, then the results table.
pub fn render_text(plan: &Plan, outcome: &Outcome) -> String {
    let mut text = format!("{}\n", describe(plan));
    if let Some(preload) = &outcome.preload {
        text.push_str(&format!(
            "preload: {} puts ({} outstanding), {} errors, {:.2} s, {} ops/s\n",
            preload.ops,
            preload.outstanding,
            preload.errors,
            preload.elapsed.as_secs_f64(),
            format_rate(rate(preload.ops, preload.elapsed)),
        ));
        if let Some(host_start) = &preload.host_start {
            text.push_str(&format!(
                "plugin hosts started by {} invocation(s), {} errors, {:.1} ms\n",
                host_start.invocations,
                host_start.errors,
                host_start.elapsed.as_secs_f64() * 1_000.0
            ));
        }
    }
    text.push('\n');
    let large = plan.value_size >= LARGE_VALUE_BYTES;
    let mut columns = vec![("OP", false), ("OPS", true), ("ERRORS", true), ("ELAPSED_S", true), ("OPS/S", true)];
    if large {
        columns.push(("GIB/S", true));
    }
    columns.extend([("P50_US", true), ("P90_US", true), ("P99_US", true), ("P99.9_US", true), ("MAX_US", true)]);
    let mut table = Table::new(&columns);
    for (name, tally, bytes) in outcome.rows(plan.value_size) {
        let mut row = vec![
            name.to_owned(),
            tally.ops.to_string(),
            tally.errors.to_string(),
            format!("{:.2}", outcome.elapsed.as_secs_f64()),
            format_rate(rate(tally.ops, outcome.elapsed)),
        ];
        if large {
            row.push(format_gib_per_s(rate(bytes, outcome.elapsed)));
        }
        match tally.latency() {
            Some(latency) => row.extend(
                [latency.p50_ns, latency.p90_ns, latency.p99_ns, latency.p99_9_ns, latency.max_ns].map(format_micros),
            ),
            None => row.extend(std::iter::repeat_n("-".to_owned(), 5)),
        }
        table.row(row);
    }
    text.push_str(&table.render());
    if let Some(error) = &outcome.first_error {
        text.push_str(&format!("first error: {error}\n"));
    }
    text
}

/// One line naming everything that shapes the numbers.
fn describe(plan: &Plan) -> String {
    let mut details = Vec::new();
    if plan.workload == WorkloadKind::Mixed {
        details.push(format!("{}% get", plan.mix.percent(Op::Get)));
    }
    if let Some(invoke) = &plan.invoke {
        details.push(format!("plugin {}, payload {:?}", invoke.plugin, invoke.payload));
    }
    if let Some(distribution) = plan.distribution {
        details.push(format!("{} keys", distribution.name()));
    }
    let workload = match details.is_empty() {
        true => plan.workload.name().to_owned(),
        false => format!("{} ({})", plan.workload.name(), details.join(", ")),
    };
    let stop = match plan.stop {
        Stop::After(duration) => format!("for {} s", duration.as_secs_f64()),
        Stop::Ops(ops) => format!("for {ops} operations"),
    };
    let place = match (plan.target, plan.pools) {
        (super::TargetKind::Native, 1) => format!("pool '{}' at {}", plan.pool, plan.addr),
        (super::TargetKind::Native, pools) => format!("{pools} pools '{}-*' at {}", plan.pool, plan.addr),
        (target, _) => format!("{} server at {}", target.name(), plan.addr),
    };
    let transfer = match plan.transfer {
        Transfer::Auto => String::new(),
        chosen => format!(", {} transfers", chosen.name()),
    };
    format!(
        "bench {workload} {stop}: {} client(s) x {} outstanding, {} keys of {} B, values of {}{transfer}, seed {}, \
         {place}",
        plan.clients,
        plan.outstanding,
        plan.keys,
        plan.key_size,
        format_size(plan.value_size),
        plan.seed
    )
}

/// A length for people: `16 B`, `4 KiB`, `1 GiB`; bytes unless a whole number of a larger unit.
pub fn format_size(bytes: usize) -> String {
    for (unit, scale) in [("GiB", 1usize << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= scale && bytes.is_multiple_of(scale) {
            return format!("{} {unit}", bytes / scale);
        }
    }
    format!("{bytes} B")
}

/// The report for programs: the parameters, the preload, the totals and each kind of operation.
pub fn render_json(plan: &Plan, outcome: &Outcome) -> Value {
    let (duration_s, ops_target) = match plan.stop {
        Stop::After(duration) => (Some(duration.as_secs_f64()), None),
        Stop::Ops(ops) => (None, Some(ops)),
    };
    let mix: serde_json::Map<String, Value> =
        plan.mix.ops().into_iter().map(|op| (op.name().to_owned(), json!(plan.mix.percent(op)))).collect();
    let pools: Vec<Value> = outcome.pools.iter().map(|(name, shard)| json!({"name": name, "shard": shard})).collect();
    let parameters = json!({
        "addr": plan.addr,
        "target": plan.target.name(),
        "workload": plan.workload.name(),
        "mix_percent": mix,
        "read_percent": plan.mix.percent(Op::Get),
        "distribution": plan.distribution.map(|d| d.name()),
        "scan_length_max": plan.mix.sends(Op::Scan).then_some(SCAN_LENGTH_MAX),
        "plugin": plan.invoke.as_ref().map(|invoke| &invoke.plugin),
        "payload": plan.invoke.as_ref().map(|invoke| &invoke.payload),
        "key_size": plan.key_size,
        "value_size": plan.value_size,
        "transfer": plan.transfer.name(),
        "keys": plan.keys,
        "clients": plan.clients,
        "outstanding": plan.outstanding,
        "duration_s": duration_s,
        "ops": ops_target,
        "pool": plan.pool,
        "pools": pools,
        "shards": outcome.shard_count,
        "keep_pool": plan.keep_pool,
        "no_preload": plan.no_preload,
        "seed": plan.seed,
        "runtime_threads": outcome.runtime_threads,
    });
    let preload = outcome.preload.as_ref().map(|preload| {
        json!({
            "ops": preload.ops,
            "errors": preload.errors,
            "elapsed_s": preload.elapsed.as_secs_f64(),
            "ops_per_s": round_to(rate(preload.ops, preload.elapsed), 1),
            "outstanding": preload.outstanding,
            "host_start": preload.host_start.as_ref().map(|host_start| json!({
                "invocations": host_start.invocations,
                "errors": host_start.errors,
                "elapsed_ms": round_to(host_start.elapsed.as_secs_f64() * 1_000.0, 3),
            })),
        })
    });
    let summary = |tally: &Tally, bytes: u64| {
        json!({
            "ops": tally.ops,
            "errors": tally.errors,
            "ops_per_s": round_to(rate(tally.ops, outcome.elapsed), 1),
            "value_bytes": bytes,
            "bytes_per_s": round_to(rate(bytes, outcome.elapsed), 0),
            "latency_us": tally.latency().map(|latency| latency.json(tally.percentile_ladder())),
        })
    };
    let by_op: serde_json::Map<String, Value> = outcome
        .tallies
        .iter()
        .map(|(op, tally)| (op.name().to_owned(), summary(tally, value_bytes(*op, tally, plan.value_size))))
        .collect();
    let total = outcome.total();
    let total_bytes = outcome.value_bytes(plan.value_size);
    json!({
        "parameters": parameters,
        "preload": preload,
        "ops": total.ops,
        "errors": total.errors,
        "elapsed_s": outcome.elapsed.as_secs_f64(),
        "ops_per_s": round_to(rate(total.ops, outcome.elapsed), 1),
        "value_bytes": total_bytes,
        "bytes_per_s": round_to(rate(total_bytes, outcome.elapsed), 0),
        "latency_us": total.latency().map(|latency| latency.json(total.percentile_ladder())),
        "by_op": by_op,
        "first_error": outcome.first_error,
        "pool": outcome.pool_fate,
    })
}

/// Requests per second; zero for an empty interval rather than infinity.
pub fn rate(ops: u64, elapsed: Duration) -> f64 {
    let seconds = elapsed.as_secs_f64();
    if seconds > 0.0 {
        ops as f64 / seconds
    } else {
        0.0
    }
}

/// Bytes per second as GiB/s for people, three significant decimals' worth at loopback speeds.
pub fn format_gib_per_s(bytes_per_s: f64) -> String {
    format!("{:.3}", bytes_per_s / (1u64 << 30) as f64)
}

/// Requests per second for people: whole numbers, which is all the precision a benchmark has.
pub fn format_rate(ops_per_s: f64) -> String {
    format!("{ops_per_s:.0}")
}

/// Nanoseconds as microseconds with one decimal (`12345` → `12.3`): the histogram keeps three
/// significant digits, and a tenth of a microsecond is at or below that for any network request.
pub fn format_micros(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1_000.0)
}

/// Nanoseconds as microseconds for JSON: exact, since three decimals of a microsecond are whole
/// nanoseconds.
fn micros(ns: u64) -> f64 {
    round_to(ns as f64 / 1_000.0, 3)
}

fn round_to(value: f64, decimals: i32) -> f64 {
    let scale = 10f64.powi(decimals);
    (value * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{BenchArgs, TargetKind, WorkloadKind};

    fn plan(workload: WorkloadKind, read_percent: Option<u8>) -> Plan {
        let args = BenchArgs {
            workload,
            read_percent,
            key_size: 8,
            value_size: None,
            transfer: Transfer::Auto,
            keys: 1000,
            clients: 2,
            outstanding: 4,
            duration: Some(Duration::from_secs(2)),
            ops: None,
            distribution: None,
            target: TargetKind::Native,
            pools: 1,
            pool: "bench".into(),
            keep_pool: false,
            no_preload: false,
            durability: None,
            plugin: (workload == WorkloadKind::Invoke).then(|| "counter".to_owned()),
            payload: None,
            seed: 9,
        };
        Plan::new("127.0.0.1:7000", &args).expect("valid plan")
    }

    /// A tally whose latencies are exactly `micros` microseconds each.
    fn tally(micros: &[u64], errors: u64) -> Tally {
        let mut tally = Tally::new();
        for (index, &us) in micros.iter().enumerate() {
            tally.record(Duration::from_micros(us), index as u64 >= errors);
        }
        tally
    }

    #[test]
    fn microseconds_have_one_decimal() {
        assert_eq!(format_micros(12_345), "12.3");
        assert_eq!(format_micros(999), "1.0");
        assert_eq!(format_micros(40), "0.0");
        assert_eq!(format_micros(1_500_000), "1500.0");
        assert_eq!(micros(12_345), 12.345);
        assert_eq!(format_rate(123_456.7), "123457");
        assert_eq!(rate(10, Duration::ZERO), 0.0);
        assert_eq!(rate(500, Duration::from_millis(250)), 2000.0);
    }

    /// Percentiles come from the merged histogram and are exact to its three significant digits.
    #[test]
    fn percentiles_of_merged_workers() {
        let mut first = tally(&(1..=500).collect::<Vec<_>>(), 0);
        let second = tally(&(501..=1000).collect::<Vec<_>>(), 3);
        first.merge(&second);
        assert_eq!((first.ops, first.errors), (1000, 3));
        let latency = first.latency().expect("samples were recorded");
        let close = |ns: u64, us: u64| ns.abs_diff(us * 1_000) <= us; // 0.1%
        assert!(close(latency.p50_ns, 500), "{latency:?}");
        assert!(close(latency.p90_ns, 900), "{latency:?}");
        assert!(close(latency.p99_ns, 990), "{latency:?}");
        assert!(close(latency.p99_9_ns, 999), "{latency:?}");
        assert_eq!((latency.min_ns, latency.max_ns), (1_000, 1_000_000), "extremes are exact");
        assert!(Tally::new().latency().is_none());
    }

    /// Latencies beyond the initial range are recorded, not clamped.
    #[test]
    fn slow_requests_grow_the_histogram() {
        let latency = tally(&[5, 2_000_000], 0).latency().expect("samples");
        assert_eq!(latency.max_ns, 2_000_000_000);
        assert!(latency.p99_9_ns.abs_diff(2_000_000_000) <= 2_000_000, "{latency:?}");
    }

    /// An outcome with a tally for each kind the plan's mix sends: `puts` and `gets` where it
    /// sends those.
    fn outcome(plan: &Plan, puts: Tally, gets: Tally) -> Outcome {
        let mut tallies = Tallies::for_mix(plan.mix);
        for (op, tally) in &mut tallies.by_op {
            match op {
                Op::Put => *tally = puts.clone(),
                Op::Get => *tally = gets.clone(),
                _ => {}
            }
        }
        Outcome {
            preload: None,
            elapsed: Duration::from_secs(2),
            tallies,
            first_error: None,
            pool_fate: "deleted",
            pools: vec![("bench".into(), 0)],
            shard_count: Some(1),
            runtime_threads: 2,
        }
    }

    #[test]
    fn text_report_is_a_table_with_percentiles_in_microseconds() {
        let plan = plan(WorkloadKind::Put, None);
        let outcome = outcome(&plan, tally(&[10, 20, 30, 40], 0), Tally::new());
        assert_eq!(
            render_text(&plan, &outcome),
            "bench put (uniform keys) for 2 s: 2 client(s) x 4 outstanding, 1000 keys of 8 B, values of 16 B, seed 9, \
             pool 'bench' at 127.0.0.1:7000\n\
             \n\
             OP   OPS  ERRORS  ELAPSED_S  OPS/S  P50_US  P90_US  P99_US  P99.9_US  MAX_US\n\
             put    4       0       2.00      2    20.0    40.0    40.0      40.0    40.0\n"
        );
    }

    #[test]
    fn mixed_report_has_a_row_per_kind_and_their_sum() {
        let plan = plan(WorkloadKind::Mixed, Some(75));
        let mut outcome = outcome(&plan, tally(&[10], 1), tally(&[30, 30, 30], 0));
        outcome.preload = Some(Preload {
            ops: 1000,
            errors: 0,
            elapsed: Duration::from_millis(500),
            outstanding: 128,
            host_start: None,
        });
        outcome.first_error = Some("pool_full: no room".into());
        let text = render_text(&plan, &outcome);
        assert!(text.starts_with("bench mixed (75% get, uniform keys) for 2 s:"), "{text}");
        assert!(text.contains("\npreload: 1000 puts (128 outstanding), 0 errors, 0.50 s, 2000 ops/s\n"), "{text}");
        let rows: Vec<&str> = text.lines().skip_while(|line| !line.starts_with("OP ")).collect();
        assert_eq!(rows.len(), 5, "{text}");
        assert!(rows[1].starts_with("get    3       0"), "{text}");
        assert!(rows[2].starts_with("put    1       1"), "{text}");
        assert!(rows[3].starts_with("all    4       1"), "{text}");
        assert_eq!(rows[4], "first error: pool_full: no room");
    }

    #[test]
    fn empty_rows_show_dashes() {
        let plan = plan(WorkloadKind::Get, None);
        let text = render_text(&plan, &outcome(&plan, Tally::new(), Tally::new()));
        assert!(
            text.ends_with("get    0       0       2.00      0       -       -       -         -       -\n"),
            "{text}"
        );
    }

    #[test]
    fn json_report_carries_parameters_totals_and_each_kind() {
        let plan = plan(WorkloadKind::Mixed, Some(50));
        let outcome = outcome(&plan, tally(&[10, 20], 0), tally(&[40, 40], 1));
        let json = render_json(&plan, &outcome);
        assert_eq!(json["parameters"]["workload"], "mixed");
        assert_eq!(json["parameters"]["target"], "native");
        assert_eq!(json["parameters"]["distribution"], "uniform");
        assert_eq!(json["parameters"]["mix_percent"], serde_json::json!({"get": 50, "put": 50}));
        assert_eq!(json["parameters"]["pools"], serde_json::json!([{"name": "bench", "shard": 0}]));
        assert_eq!(json["parameters"]["read_percent"], 50);
        assert_eq!(json["parameters"]["outstanding"], 4);
        assert_eq!(json["parameters"]["duration_s"], 2.0);
        assert_eq!(json["parameters"]["ops"], Value::Null);
        assert_eq!(json["parameters"]["runtime_threads"], 2);
        assert_eq!(json["preload"], Value::Null);
        assert_eq!(json["ops"], 4);
        assert_eq!(json["errors"], 1);
        assert_eq!(json["elapsed_s"], 2.0);
        assert_eq!(json["ops_per_s"], 2.0);
        assert_eq!(json["latency_us"]["max"], 40.0);
        let p50 = json["latency_us"]["p50"].as_f64().expect("a number");
        assert!((20.0..=20.02).contains(&p50), "{p50}");
        assert_eq!(json["by_op"]["get"]["ops"], 2);
        assert_eq!(json["by_op"]["put"]["latency_us"]["max"], 20.0);
        assert_eq!(json["by_op"]["put"]["latency_us"]["min"], 10.0);
        assert!(json["by_op"].get("all").is_none());
        assert_eq!(json["pool"], "deleted");
        let ladder = json["by_op"]["get"]["latency_us"]["percentiles"].as_array().expect("a ladder");
        assert_eq!(ladder.len(), PERCENTILE_LADDER.len());
        assert_eq!(ladder.last().expect("a last step")["p"], 100.0);
        assert_eq!(ladder.last().expect("a last step")["us"], 40.0);
    }

    /// The ladder climbs with the percentile, ends at the exact maximum, and never passes it.
    #[test]
    fn percentile_ladder_is_monotonic_and_capped_by_the_maximum() {
        let tally = tally(&(1..=10_000).collect::<Vec<_>>(), 0);
        let ladder = tally.percentile_ladder();
        assert_eq!(ladder.len(), PERCENTILE_LADDER.len());
        assert!(ladder.windows(2).all(|pair| pair[0].0 < pair[1].0 && pair[0].1 <= pair[1].1), "{ladder:?}");
        assert_eq!(ladder.last(), Some(&(100.0, 10_000.0)));
        let p50 = ladder.iter().find(|(p, _)| *p == 50.0).expect("p50 is on the ladder").1;
        assert!((p50 - 5_000.0).abs() <= 5.0, "{p50}");
        assert!(Tally::new().percentile_ladder().is_empty());
    }

    /// An invoke run names its plugin and payload in both reports, and has one row, `invoke`.
    #[test]
    fn invoke_report_names_the_plugin_and_payload() {
        let invoke = plan(WorkloadKind::Invoke, None);
        let mut outcome = outcome(&invoke, Tally::new(), Tally::new());
        outcome.tallies.record(Op::Invoke, Duration::from_micros(30), true);
        let host_start = HostStart { invocations: 1, errors: 0, elapsed: Duration::from_micros(12_345) };
        outcome.preload = Some(Preload {
            ops: 1000,
            errors: 0,
            elapsed: Duration::from_millis(10),
            outstanding: 128,
            host_start: Some(host_start),
        });
        let text = render_text(&invoke, &outcome);
        assert!(
            text.starts_with(
                "bench invoke (plugin counter, payload \"add 1\", uniform keys) for 2 s: 2 client(s) x 4 outstanding, \
                 1000 keys of 8 B, values of 8 B"
            ),
            "{text}"
        );
        assert!(text.contains("\nplugin hosts started by 1 invocation(s), 0 errors, 12.3 ms\n"), "{text}");
        assert!(text.contains("\ninvoke    1       0"), "{text}");
        let json = render_json(&invoke, &outcome);
        assert_eq!(json["parameters"]["workload"], "invoke");
        assert_eq!(json["parameters"]["plugin"], "counter");
        assert_eq!(json["parameters"]["payload"], "add 1");
        assert_eq!(json["parameters"]["value_size"], 8);
        assert_eq!(json["parameters"]["mix_percent"], serde_json::json!({"invoke": 100}));
        assert_eq!(json["by_op"]["invoke"]["ops"], 1);
        assert_eq!(
            json["preload"]["host_start"],
            serde_json::json!({"invocations": 1, "errors": 0, "elapsed_ms": 12.345})
        );
        let get = render_json(&plan(WorkloadKind::Get, None), &outcome);
        assert_eq!((&get["parameters"]["plugin"], &get["parameters"]["payload"]), (&Value::Null, &Value::Null));
    }

    /// Large values add a column of value bytes per second to the table and name the transfer;
    /// the JSON carries bytes per second for every run, failed operations moving none.
    #[test]
    fn large_values_report_bandwidth() {
        let mut args_plan = plan(WorkloadKind::Put, None);
        args_plan.value_size = 1 << 30;
        args_plan.transfer = Transfer::Direct;
        // Four puts of 1 GiB in 2 s, one of them failed: 1.5 GiB/s.
        let outcome = outcome(&args_plan, tally(&[10, 20, 30, 40], 1), Tally::new());
        let text = render_text(&args_plan, &outcome);
        assert!(text.contains("values of 1 GiB, direct transfers, seed 9"), "{text}");
        assert!(text.contains("OPS/S  GIB/S  P50_US"), "{text}");
        assert!(text.contains("\nput    4       1       2.00      2  1.500"), "{text}");
        let json = render_json(&args_plan, &outcome);
        assert_eq!(json["parameters"]["transfer"], "direct");
        assert_eq!(json["value_bytes"], 3u64 << 30);
        assert_eq!(json["bytes_per_s"], 1.5 * (1u64 << 30) as f64);
        assert_eq!(json["by_op"]["put"]["bytes_per_s"], 1.5 * (1u64 << 30) as f64);
        assert_eq!(format_size(16), "16 B");
        assert_eq!(format_size(1000), "1000 B");
        assert_eq!(format_size(64 << 10), "64 KiB");
        assert_eq!(format_size(3 << 20), "3 MiB");
    }

    /// A read-modify-write moves two values; scans, erases and invocations none.
    #[test]
    fn value_bytes_follow_the_operation() {
        let ok = tally(&[1, 1, 1], 0);
        assert_eq!(value_bytes(Op::Get, &ok, 10), 30);
        assert_eq!(value_bytes(Op::Insert, &ok, 10), 30);
        assert_eq!(value_bytes(Op::ReadModifyWrite, &ok, 10), 60);
        assert_eq!(value_bytes(Op::Scan, &ok, 10), 0);
        assert_eq!(value_bytes(Op::Erase, &ok, 10), 0);
        assert_eq!(value_bytes(Op::Invoke, &ok, 10), 0);
    }

    /// A YCSB workload reports each of its kinds and their sum; one that sends a single kind has
    /// no sum row.
    #[test]
    fn rows_follow_the_mix() {
        let f = plan(WorkloadKind::YcsbF, None);
        let outcome_f = outcome(&f, Tally::new(), tally(&[5], 0));
        let names: Vec<&str> = outcome_f.rows(16).iter().map(|(name, _, _)| *name).collect();
        assert_eq!(names, ["get", "rmw", "all"]);
        let c = plan(WorkloadKind::YcsbC, None);
        let names: Vec<&str> =
            outcome(&c, Tally::new(), Tally::new()).rows(16).iter().map(|(name, _, _)| *name).collect();
        assert_eq!(names, ["get"]);
        assert!(render_text(&f, &outcome_f).starts_with("bench ycsb-f (zipfian keys) for 2 s:"));
    }
}
