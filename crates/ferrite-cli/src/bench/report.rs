//! What a run measured, and its two renderings: a table for people, one JSON document for
//! programs (`bench/small-ops.sh` reads it).

use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::workload::OpMix;
use super::{Plan, Stop};
use crate::output::Table;

/// Significant decimal digits the latency histograms keep: 0.1% resolution at any magnitude,
/// which is what p99.9 needs to mean something.
const HISTOGRAM_SIGNIFICANT_DIGITS: u8 = 3;

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
        Some(Latency { min_ns: self.min_ns, max_ns: self.max_ns, ..latency })
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

    fn json(&self) -> Value {
        json!({
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
}

/// Everything a run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub preload: Option<Preload>,
    /// From the first request sent to the last reply received in the measured phase.
    pub elapsed: Duration,
    pub puts: Tally,
    pub gets: Tally,
    /// The first failure seen, as an example of what went wrong when `errors` is not zero.
    pub first_error: Option<String>,
    /// What happened to the pool at the end, for the record (`deleted`, `kept`, ...).
    pub pool_fate: &'static str,
    /// Worker threads of the client's runtime (one per core unless `TOKIO_WORKER_THREADS` says
    /// otherwise); they share the machine with the server when both run on it.
    pub runtime_threads: usize,
}

impl Outcome {
    /// Puts and gets together.
    pub fn total(&self) -> Tally {
        let mut total = self.puts.clone();
        total.merge(&self.gets);
        total
    }

    /// The rows of the report: one per kind of request the workload sends, plus their sum for a
    /// mixed workload.
    fn rows(&self, mix: OpMix) -> Vec<(&'static str, Tally)> {
        match mix {
            OpMix::ALL_PUTS => vec![("put", self.puts.clone())],
            OpMix::ALL_GETS => vec![("get", self.gets.clone())],
            _ => vec![("get", self.gets.clone()), ("put", self.puts.clone()), ("all", self.total())],
        }
    }
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
    }
    text.push('\n');
    let mut table = Table::new(&[
        ("OP", false),
        ("OPS", true),
        ("ERRORS", true),
        ("ELAPSED_S", true),
        ("OPS/S", true),
        ("P50_US", true),
        ("P90_US", true),
        ("P99_US", true),
        ("P99.9_US", true),
        ("MAX_US", true),
    ]);
    for (name, tally) in outcome.rows(plan.mix) {
        let mut row = vec![
            name.to_owned(),
            tally.ops.to_string(),
            tally.errors.to_string(),
            format!("{:.2}", outcome.elapsed.as_secs_f64()),
            format_rate(rate(tally.ops, outcome.elapsed)),
        ];
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
    let workload = match plan.workload {
        super::WorkloadKind::Mixed => format!("mixed ({}% get)", plan.mix.read_percent()),
        other => other.name().to_owned(),
    };
    let stop = match plan.stop {
        Stop::After(duration) => format!("for {} s", duration.as_secs_f64()),
        Stop::Ops(ops) => format!("for {ops} requests"),
    };
    format!(
        "bench {workload} {stop}: {} client(s) x {} outstanding, {} keys of {} B, values of {} B, seed {}, pool '{}' at {}",
        plan.clients, plan.outstanding, plan.keys, plan.key_size, plan.value_size, plan.seed, plan.pool, plan.addr
    )
}

/// The report for programs: the parameters, the preload, the totals and each kind of request.
pub fn render_json(plan: &Plan, outcome: &Outcome) -> Value {
    let (duration_s, ops_target) = match plan.stop {
        Stop::After(duration) => (Some(duration.as_secs_f64()), None),
        Stop::Ops(ops) => (None, Some(ops)),
    };
    let parameters = json!({
        "addr": plan.addr,
        "workload": plan.workload.name(),
        "read_percent": plan.mix.read_percent(),
        "key_size": plan.key_size,
        "value_size": plan.value_size,
        "keys": plan.keys,
        "clients": plan.clients,
        "outstanding": plan.outstanding,
        "duration_s": duration_s,
        "ops": ops_target,
        "pool": plan.pool,
        "keep_pool": plan.keep_pool,
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
        })
    });
    let by_op: serde_json::Map<String, Value> = outcome
        .rows(plan.mix)
        .into_iter()
        .filter(|(name, _)| *name != "all")
        .map(|(name, tally)| {
            let summary = json!({
                "ops": tally.ops,
                "errors": tally.errors,
                "ops_per_s": round_to(rate(tally.ops, outcome.elapsed), 1),
                "latency_us": tally.latency().map(|latency| latency.json()),
            });
            (name.to_owned(), summary)
        })
        .collect();
    let total = outcome.total();
    json!({
        "parameters": parameters,
        "preload": preload,
        "ops": total.ops,
        "errors": total.errors,
        "elapsed_s": outcome.elapsed.as_secs_f64(),
        "ops_per_s": round_to(rate(total.ops, outcome.elapsed), 1),
        "latency_us": total.latency().map(|latency| latency.json()),
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
    use crate::bench::{BenchArgs, WorkloadKind};

    fn plan(workload: WorkloadKind, read_percent: Option<u8>) -> Plan {
        let args = BenchArgs {
            workload,
            read_percent,
            key_size: 8,
            value_size: 16,
            keys: 1000,
            clients: 2,
            outstanding: 4,
            duration: Some(Duration::from_secs(2)),
            ops: None,
            pool: "bench".into(),
            keep_pool: false,
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

    fn outcome(puts: Tally, gets: Tally) -> Outcome {
        Outcome {
            preload: None,
            elapsed: Duration::from_secs(2),
            puts,
            gets,
            first_error: None,
            pool_fate: "deleted",
            runtime_threads: 2,
        }
    }

    #[test]
    fn text_report_is_a_table_with_percentiles_in_microseconds() {
        let outcome = outcome(tally(&[10, 20, 30, 40], 0), Tally::new());
        assert_eq!(
            render_text(&plan(WorkloadKind::Put, None), &outcome),
            "bench put for 2 s: 2 client(s) x 4 outstanding, 1000 keys of 8 B, values of 16 B, seed 9, \
             pool 'bench' at 127.0.0.1:7000\n\
             \n\
             OP   OPS  ERRORS  ELAPSED_S  OPS/S  P50_US  P90_US  P99_US  P99.9_US  MAX_US\n\
             put    4       0       2.00      2    20.0    40.0    40.0      40.0    40.0\n"
        );
    }

    #[test]
    fn mixed_report_has_a_row_per_kind_and_their_sum() {
        let mut outcome = outcome(tally(&[10], 1), tally(&[30, 30, 30], 0));
        outcome.preload = Some(Preload { ops: 1000, errors: 0, elapsed: Duration::from_millis(500), outstanding: 128 });
        outcome.first_error = Some("pool_full: no room".into());
        let text = render_text(&plan(WorkloadKind::Mixed, Some(75)), &outcome);
        assert!(text.starts_with("bench mixed (75% get) for 2 s:"), "{text}");
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
        let text = render_text(&plan(WorkloadKind::Get, None), &outcome(Tally::new(), Tally::new()));
        assert!(
            text.ends_with("get    0       0       2.00      0       -       -       -         -       -\n"),
            "{text}"
        );
    }

    #[test]
    fn json_report_carries_parameters_totals_and_each_kind() {
        let outcome = outcome(tally(&[10, 20], 0), tally(&[40, 40], 1));
        let json = render_json(&plan(WorkloadKind::Mixed, Some(50)), &outcome);
        assert_eq!(json["parameters"]["workload"], "mixed");
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
    }
}
