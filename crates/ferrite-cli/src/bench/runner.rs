//! Driving a run: connect the clients, prepare the pools, preload, run the workers while a
//! progress bar ticks, then clean up.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferrite_client::DirectMemory;

use super::distribution::{Distribution, KeyChooser};
use super::report::{format_rate, rate, HostStart, Outcome, Preload, Tallies};
use super::target::{Client, Connections, Failure};
use super::workload::{format_key, Inserts, Mix, Op, SplitMix64, SCAN_LENGTH_MAX};
use super::{Plan, Stop};

/// Puts in flight while preloading: enough to keep a shard busy through one connection without
/// making the preload's own latency the point.
pub(super) const PRELOAD_OUTSTANDING: u64 = 128;

/// How often the progress bar is refreshed.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// Width of the progress bar, in characters between the brackets.
const PROGRESS_BAR_WIDTH: usize = 24;

/// One worker's counts for the progress line. Each worker writes only its own slot, and the slot
/// fills a cache line, so the hot path never shares a line with another worker (no false
/// sharing) and takes no lock; the progress task reads all slots once a second.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Counters {
    ops: AtomicU64,
    errors: AtomicU64,
}

/// What one worker measured.
#[derive(Debug)]
struct WorkerResult {
    tallies: Tallies,
    first_error: Option<String>,
}

/// Runs the whole benchmark. Fails only if it cannot start (no server, no pool); operation
/// failures during the run are counted in the outcome.
pub async fn run(plan: &Plan, live_progress: bool) -> Result<Outcome, String> {
    let connections = Connections::open(plan).await?;
    let pools = connections.pools();
    let shard_count = connections.shard_count();
    // Made once and shared by every put of the run: clones of `Bytes` share one buffer.
    let value = Bytes::from(plan.value());
    let preload = if plan.preloads() { Some(preload(&connections, plan, &value).await) } else { None };
    let measured = measure(&connections, plan, &value, live_progress).await;
    let pool_fate = connections.finish(plan).await;
    let (elapsed, results) = measured?;

    let mut tallies = Tallies::for_mix(plan.mix);
    let mut first_error = preload.as_ref().and_then(|(_, error)| error.clone());
    for result in &results {
        tallies.merge(&result.tallies);
        if first_error.is_none() {
            first_error.clone_from(&result.first_error);
        }
    }
    Ok(Outcome {
        preload: preload.map(|(preload, _)| preload),
        elapsed,
        tallies,
        first_error,
        pool_fate,
        pools,
        shard_count,
        runtime_threads: tokio::runtime::Handle::current().metrics().num_workers(),
    })
}

/// Stores every key of the key space once, `Plan::preload_outstanding` puts at a time spread over
/// the clients, so reads find every key; for an invoke workload, then starts the plugin hosts.
async fn preload(connections: &Connections, plan: &Plan, value: &Bytes) -> (Preload, Option<String>) {
    eprintln!("preloading {} keys...", plan.keys);
    let workers = plan.preload_outstanding();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(workers as usize);
    for index in 0..workers {
        let mut client = connections.client((index % u64::from(plan.clients)) as usize);
        let (keys, key_size, value) = (plan.keys, plan.key_size, value.clone());
        tasks.push(tokio::spawn(async move {
            let mut key = vec![0u8; key_size];
            let (mut ops, mut errors, mut first_error) = (0u64, 0u64, None);
            // Worker `index` stores keys index, index + workers, ...: every key exactly once.
            for number in (index..keys).step_by(workers as usize) {
                assert!(format_key(number, &mut key), "Plan::new checked that every key number fits");
                ops += 1;
                if let Err(failure) = client.put(number, &key, &value).await {
                    errors += 1;
                    first_error.get_or_insert_with(|| format!("preload: {}", failure.message));
                    if failure.fatal {
                        break;
                    }
                }
            }
            (ops, errors, first_error)
        }));
    }
    let (mut ops, mut errors, mut first_error) = (0, 0, None);
    for task in tasks {
        match task.await {
            Ok((task_ops, task_errors, task_error)) => {
                ops += task_ops;
                errors += task_errors;
                first_error = first_error.or(task_error);
            }
            Err(error) => {
                first_error.get_or_insert_with(|| format!("preload task failed: {error}"));
            }
        }
    }
    let elapsed = start.elapsed();
    let host_start = match plan.invoke {
        Some(_) => {
            let (host_start, error) = start_hosts(connections, plan).await;
            first_error = first_error.or(error);
            Some(host_start)
        }
        None => None,
    };
    (Preload { ops, errors, elapsed, outstanding: workers, host_start }, first_error)
}

/// Sends one invocation (the run's payload) to every pool, on keys 0, 1, ... (key k lives in pool
/// k mod pools), all at once. A pool's first invocation starts its plugin host process, which
/// would otherwise land in the measured phase and time a process start as an invocation.
async fn start_hosts(connections: &Connections, plan: &Plan) -> (HostStart, Option<String>) {
    let payload = plan.invoke.as_ref().map_or("", |invoke| invoke.payload.as_str());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for number in 0..u64::from(plan.pools).min(plan.keys) {
        let mut client = connections.client(0);
        let (mut key, payload, create_size) = (vec![0u8; plan.key_size], payload.to_owned(), plan.value_size as u64);
        assert!(format_key(number, &mut key), "Plan::new checked that every key number fits");
        tasks.push(tokio::spawn(async move { client.invoke(number, &key, payload.as_bytes(), create_size).await }));
    }
    let (mut invocations, mut errors, mut first_error) = (0, 0, None);
    for task in tasks {
        invocations += 1;
        let error = match task.await {
            Ok(Ok(())) => continue,
            Ok(Err(failure)) => failure.message,
            Err(error) => format!("task failed: {error}"),
        };
        errors += 1;
        first_error.get_or_insert_with(|| format!("starting the plugin host: {error}"));
    }
    (HostStart { invocations, errors, elapsed: start.elapsed() }, first_error)
}

/// The measured phase: `clients × outstanding` workers, each with one operation in flight.
async fn measure(
    connections: &Connections,
    plan: &Plan,
    value: &Bytes,
    live_progress: bool,
) -> Result<(Duration, Vec<WorkerResult>), String> {
    let workers = plan.workers();
    let counters: Arc<[Counters]> = (0..workers).map(|_| Counters::default()).collect();
    // Erase takes every key in a fixed order and needs no chooser; any will do.
    let chooser = KeyChooser::new(plan.distribution.unwrap_or(Distribution::Uniform), plan.keys);
    let inserts = plan.inserts().then(|| Arc::new(Inserts::new(plan.keys, plan.insert_end())));
    // Shared by every worker, so the hot path copies no payload.
    let payload: Arc<[u8]> = plan.invoke.as_ref().map_or(&[][..], |invoke| invoke.payload.as_bytes()).into();
    // Each worker that reads values directly reads them into a buffer of its own, allocated and
    // touched here, before the clock starts, and reused by every get.
    let reads = plan.mix.sends(Op::Get) || plan.mix.sends(Op::ReadModifyWrite);
    let mut buffers: Vec<Option<DirectMemory>> = (0..workers)
        .map(|_| (reads && connections.gets_direct()).then(|| DirectMemory::new(plan.value_size)))
        .collect();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(workers as usize);
    for index in 0..workers {
        let quota = match plan.stop {
            Stop::After(duration) => Quota::Until(start + duration),
            // Split up front (the first `ops % workers` workers take one more), so workers need
            // no shared counter to know when the run is over. For erase this is also exactly each
            // worker's share of the key space, so `--ops` = `--keys` erases every key.
            Stop::Ops(ops) => Quota::Ops(ops / workers + u64::from(index < ops % workers)),
        };
        let job = Job {
            // Worker i belongs to client i / outstanding, so each client carries exactly
            // `outstanding` operations.
            client: connections.client((index / u64::from(plan.outstanding)) as usize),
            mix: plan.mix,
            chooser,
            inserts: inserts.clone(),
            keys: plan.keys,
            key_size: plan.key_size,
            value: value.clone(),
            read_buffer: buffers[index as usize].take(),
            payload: Arc::clone(&payload),
            rng: SplitMix64::for_worker(plan.seed, index),
            quota,
            counters: Arc::clone(&counters),
            index,
            workers,
        };
        tasks.push(tokio::spawn(job.run()));
    }
    let progress = tokio::spawn(show_progress(Arc::clone(&counters), start, plan.stop, live_progress));

    let mut results = Vec::with_capacity(tasks.len());
    let mut failure = None;
    for task in tasks {
        match task.await {
            Ok(result) => results.push(result),
            Err(error) => failure = Some(format!("a benchmark worker failed: {error}")),
        }
    }
    let elapsed = start.elapsed();
    progress.abort();
    // Wait for the abort, so the line is not redrawn after it is cleared.
    let _ = progress.await;
    if live_progress {
        eprint!("\r\x1b[K");
    }
    match failure {
        Some(message) => Err(message),
        None => Ok((elapsed, results)),
    }
}

/// When a worker stops.
#[derive(Debug, Clone, Copy)]
enum Quota {
    /// Send no operation after this instant.
    Until(Instant),
    /// Send exactly this many operations.
    Ops(u64),
}

/// One worker: its client, its random stream and its share of the run.
struct Job {
    client: Client,
    mix: Mix,
    chooser: KeyChooser,
    /// The insert counter shared by the run's workers, if the workload inserts.
    inserts: Option<Arc<Inserts>>,
    keys: u64,
    key_size: usize,
    /// What puts store (shared by every worker); its length is also the size invocations create
    /// absent keys with.
    value: Bytes,
    /// Where direct gets read values, if gets go direct.
    read_buffer: Option<DirectMemory>,
    /// What invocations send (empty for the other workloads).
    payload: Arc<[u8]>,
    rng: SplitMix64,
    quota: Quota,
    counters: Arc<[Counters]>,
    /// This worker's index among `workers`: its counter slot, and its share of an erase run.
    index: u64,
    workers: u64,
}

impl Job {
    async fn run(mut self) -> WorkerResult {
        // Allocated once; every operation borrows them.
        let mut key = vec![0u8; self.key_size];
        let value = self.value.clone();
        let create_size = value.len() as u64;
        let mut tallies = Tallies::for_mix(self.mix);
        let mut first_error = None;
        let counters = Arc::clone(&self.counters);
        let counters = &counters[self.index as usize];
        let mut done = 0u64;
        // Erase takes keys index, index + workers, ...: each key of the key space exactly once.
        let mut erase_next = self.index;
        let mut now = Instant::now();
        loop {
            match self.quota {
                Quota::Until(deadline) if now >= deadline => break,
                Quota::Ops(quota) if done >= quota => break,
                _ => {}
            }
            let op = self.mix.choose(&mut self.rng);
            let (sent, result) = match op {
                Op::Insert => self.insert(&mut key, &value).await,
                Op::Erase => {
                    if erase_next >= self.keys {
                        break;
                    }
                    let number = erase_next;
                    erase_next += self.workers;
                    assert!(format_key(number, &mut key), "Plan::new checked that every key number fits");
                    let sent = Instant::now();
                    (sent, self.client.erase(number, &key).await)
                }
                Op::Get | Op::Put | Op::Scan | Op::ReadModifyWrite | Op::Invoke => {
                    let present = self.inserts.as_ref().map_or(self.keys, |inserts| inserts.present());
                    let number = self.chooser.next(&mut self.rng, present);
                    assert!(format_key(number, &mut key), "Plan::new checked that every present key number fits");
                    // Drawn before the clock starts, so the stream of numbers does not depend on
                    // whether the workload scans.
                    let scan_length = if op == Op::Scan { 1 + self.rng.below(u64::from(SCAN_LENGTH_MAX)) } else { 0 };
                    let sent = Instant::now();
                    let result = match op {
                        Op::Get => self.client.get(number, &key, self.read_buffer.as_mut()).await,
                        Op::Put => self.client.put(number, &key, &value).await,
                        Op::Scan => {
                            let length = u32::try_from(scan_length).expect("at most SCAN_LENGTH_MAX");
                            self.client.scan(number, &key, length).await
                        }
                        Op::Invoke => self.client.invoke(number, &key, &self.payload, create_size).await,
                        _ => match self.client.get(number, &key, self.read_buffer.as_mut()).await {
                            Ok(()) => self.client.put(number, &key, &value).await,
                            Err(failure) => Err(failure),
                        },
                    };
                    (sent, result)
                }
            };
            now = Instant::now();
            tallies.record(op, now - sent, result.is_ok());
            done += 1;
            counters.ops.store(done, Ordering::Relaxed);
            if let Err(failure) = result {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                first_error.get_or_insert_with(|| failure.message.clone());
                // Every later operation on a dead connection fails at once; spinning on them
                // would only inflate the error count.
                if failure.fatal {
                    break;
                }
            }
        }
        WorkerResult { tallies, first_error }
    }

    /// Stores the next new key, and makes it readable once every insert before it is answered.
    async fn insert(&mut self, key: &mut [u8], value: &[u8]) -> (Instant, Result<(), Failure>) {
        let inserts = Arc::clone(self.inserts.as_ref().expect("Plan::inserts() holds for a mix that inserts"));
        let Some(number) = inserts.claim() else {
            let failure = Failure {
                message: format!(
                    "inserts ran out of {}-digit key numbers; raise --key-size to insert more",
                    self.key_size
                ),
                fatal: true,
            };
            return (Instant::now(), Err(failure));
        };
        assert!(format_key(number, key), "Inserts::claim stays below 10^key_size");
        let sent = Instant::now();
        let result = self.client.put(number, key, value).await;
        inserts.acknowledge(number);
        (sent, result)
    }
}

/// Prints the progress every second until aborted: a bar rewritten in place on a terminal, one
/// plain line per tick otherwise (logs, CI).
async fn show_progress(counters: Arc<[Counters]>, start: Instant, stop: Stop, live: bool) {
    let mut ticks = tokio::time::interval_at((start + PROGRESS_INTERVAL).into(), PROGRESS_INTERVAL);
    let (mut last_ops, mut last_time) = (0u64, start);
    loop {
        ticks.tick().await;
        let now = Instant::now();
        let ops: u64 = counters.iter().map(|c| c.ops.load(Ordering::Relaxed)).sum();
        let errors: u64 = counters.iter().map(|c| c.errors.load(Ordering::Relaxed)).sum();
        let current = rate(ops - last_ops, now - last_time);
        (last_ops, last_time) = (ops, now);
        let line = progress_line(now - start, stop, ops, errors, current);
        let mut err = std::io::stderr().lock();
        // A closed stderr must not stop the benchmark.
        let _ = if live {
            let bar = progress_bar(progress_fraction(now - start, stop, ops));
            write!(err, "\r{bar} {line}\x1b[K")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    }
}

fn progress_line(elapsed: Duration, stop: Stop, ops: u64, errors: u64, ops_per_s: f64) -> String {
    let (time_target, ops_target) = match stop {
        Stop::After(duration) => (format!("/{:.0}", duration.as_secs_f64()), String::new()),
        Stop::Ops(total) => (String::new(), format!("/{total}")),
    };
    format!(
        "bench: {:.0}{time_target} s, {ops}{ops_target} ops, {} ops/s now, {errors} errors",
        elapsed.as_secs_f64(),
        format_rate(ops_per_s)
    )
}

/// How far the run is, from 0 to 1: by time or by operations, whichever ends it.
fn progress_fraction(elapsed: Duration, stop: Stop, ops: u64) -> f64 {
    let fraction = match stop {
        Stop::After(duration) => elapsed.as_secs_f64() / duration.as_secs_f64(),
        Stop::Ops(total) => ops as f64 / total as f64,
    };
    fraction.clamp(0.0, 1.0)
}

/// `[#########---------------]  37%`
fn progress_bar(fraction: f64) -> String {
    let filled = ((fraction * PROGRESS_BAR_WIDTH as f64).round() as usize).min(PROGRESS_BAR_WIDTH);
    format!("[{}{}] {:>3.0}%", "#".repeat(filled), "-".repeat(PROGRESS_BAR_WIDTH - filled), fraction * 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_say_how_far_the_run_is() {
        assert_eq!(
            progress_line(Duration::from_millis(3_020), Stop::After(Duration::from_secs(10)), 123_456, 0, 41_152.4),
            "bench: 3/10 s, 123456 ops, 41152 ops/s now, 0 errors"
        );
        assert_eq!(
            progress_line(Duration::from_secs(2), Stop::Ops(1_000_000), 500_000, 7, 250_000.0),
            "bench: 2 s, 500000/1000000 ops, 250000 ops/s now, 7 errors"
        );
    }

    #[test]
    fn progress_bar_fills_with_time_or_operations() {
        let ten_s = Stop::After(Duration::from_secs(10));
        assert_eq!(progress_fraction(Duration::from_secs(5), ten_s, 0), 0.5);
        assert_eq!(progress_fraction(Duration::from_secs(12), ten_s, 0), 1.0);
        assert_eq!(progress_fraction(Duration::from_secs(1), Stop::Ops(400), 100), 0.25);
        assert_eq!(progress_bar(0.0), "[------------------------]   0%");
        assert_eq!(progress_bar(0.5), "[############------------]  50%");
        assert_eq!(progress_bar(1.0), "[########################] 100%");
    }
}
