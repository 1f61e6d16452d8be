//! Driving the async client: connect the sessions, prepare the pool, preload, run the workers
//! while a progress line ticks, then clean up.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite_client::{ClientOptions, Error, Pool, PoolOptions, Session};

use super::report::{format_rate, rate, Outcome, Preload, Tally};
use super::workload::{format_key, value_pattern, Op, OpMix, SplitMix64};
use super::{Plan, Stop};

/// Puts in flight while preloading: enough to keep a shard busy through one connection without
/// making the preload's own latency the point.
const PRELOAD_OUTSTANDING: u64 = 128;

/// How often the progress line is refreshed.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

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
    puts: Tally,
    gets: Tally,
    first_error: Option<String>,
}

/// Runs the whole benchmark. Fails only if it cannot start (no server, no pool); request
/// failures during the run are counted in the outcome.
pub async fn run(plan: &Plan, live_progress: bool) -> Result<Outcome, String> {
    let options = ClientOptions {
        client_name: concat!("ferrite-bench/", env!("CARGO_PKG_VERSION")).to_owned(),
        ..ClientOptions::default()
    };
    let mut sessions = Vec::with_capacity(plan.clients as usize);
    for _ in 0..plan.clients {
        let session = Session::connect_with(&plan.addr, options.clone()).await.map_err(|error| match error {
            Error::Io { .. } => {
                format!("{error}\n(is ferrite-server running there? choose the server with --addr or FERRITE_ADDR)")
            }
            other => other.to_string(),
        })?;
        sessions.push(session);
    }
    let limits = sessions[0].limits();
    if plan.key_size > limits.key_bytes_max as usize || plan.value_size > limits.value_bytes_max as usize {
        return Err(format!(
            "the server takes keys of at most {} bytes and values of at most {} bytes; \
             --key-size {} --value-size {} do not fit",
            limits.key_bytes_max, limits.value_bytes_max, plan.key_size, plan.value_size
        ));
    }

    let pool_options =
        PoolOptions { size_bytes: plan.pool_size_bytes(), expected_objects: plan.keys, ..PoolOptions::default() };
    let first = sessions[0]
        .create_pool(&plan.pool, pool_options)
        .await
        .map_err(|error| format!("creating pool '{}': {error}", plan.pool))?;
    let created = first.created();
    if !created {
        eprintln!(
            "note: pool '{}' already exists; using it as it is (its size is kept) and leaving it in place",
            plan.pool
        );
    }
    let mut pools = vec![first];
    for session in &sessions[1..] {
        match session.open_pool(&plan.pool).await {
            Ok(pool) => pools.push(pool),
            Err(error) => {
                let message = format!("opening pool '{}' in another session: {error}", plan.pool);
                finish(&sessions[0], pools, plan, created).await;
                return Err(message);
            }
        }
    }

    let preload = if plan.preloads() { Some(preload(&pools, plan).await) } else { None };
    let measured = measure(&pools, plan, live_progress).await;
    let pool_fate = finish(&sessions[0], pools, plan, created).await;
    let (elapsed, results) = measured?;

    let mut puts = Tally::new();
    let mut gets = Tally::new();
    let mut first_error = preload.as_ref().and_then(|(_, error)| error.clone());
    for result in &results {
        puts.merge(&result.puts);
        gets.merge(&result.gets);
        if first_error.is_none() {
            first_error.clone_from(&result.first_error);
        }
    }
    Ok(Outcome {
        preload: preload.map(|(preload, _)| preload),
        elapsed,
        puts,
        gets,
        first_error,
        pool_fate,
        runtime_threads: tokio::runtime::Handle::current().metrics().num_workers(),
    })
}

/// Stores every key of the key space once, `PRELOAD_OUTSTANDING` puts at a time spread over the
/// sessions, so a read workload finds every key.
async fn preload(pools: &[Pool], plan: &Plan) -> (Preload, Option<String>) {
    eprintln!("preloading {} keys into pool '{}'...", plan.keys, plan.pool);
    let workers = PRELOAD_OUTSTANDING.min(plan.keys);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(workers as usize);
    for index in 0..workers {
        let pool = pools[(index % pools.len() as u64) as usize].clone();
        let (keys, key_size, value_size) = (plan.keys, plan.key_size, plan.value_size);
        tasks.push(tokio::spawn(async move {
            let mut key = vec![0u8; key_size];
            let value = value_pattern(value_size);
            let (mut ops, mut errors, mut first_error) = (0u64, 0u64, None);
            // Worker `index` stores keys index, index + workers, ...: every key exactly once.
            for number in (index..keys).step_by(workers as usize) {
                assert!(format_key(number, &mut key), "Plan::new checked that every key number fits");
                ops += 1;
                if let Err(error) = pool.put(&key[..], &value[..]).await {
                    errors += 1;
                    let closed = error.is_connection_closed();
                    first_error.get_or_insert_with(|| format!("preload: {error}"));
                    if closed {
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
    (Preload { ops, errors, elapsed: start.elapsed(), outstanding: workers }, first_error)
}

/// The measured phase: `clients × outstanding` workers, each with one request in flight.
async fn measure(pools: &[Pool], plan: &Plan, live_progress: bool) -> Result<(Duration, Vec<WorkerResult>), String> {
    let workers = plan.workers();
    let counters: Arc<[Counters]> = (0..workers).map(|_| Counters::default()).collect();
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(workers as usize);
    for index in 0..workers {
        // Worker i belongs to client i / outstanding, so each session carries exactly
        // `outstanding` requests.
        let pool = pools[(index / u64::from(plan.outstanding)) as usize].clone();
        let quota = match plan.stop {
            Stop::After(duration) => Quota::Until(start + duration),
            // Split up front (the first `ops % workers` workers take one more), so workers need
            // no shared counter to know when the run is over.
            Stop::Ops(ops) => Quota::Ops(ops / workers + u64::from(index < ops % workers)),
        };
        let job = Job {
            pool,
            mix: plan.mix,
            keys: plan.keys,
            key_size: plan.key_size,
            value_size: plan.value_size,
            rng: SplitMix64::for_worker(plan.seed, index),
            quota,
            counters: Arc::clone(&counters),
            slot: index as usize,
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
    /// Send no request after this instant.
    Until(Instant),
    /// Send exactly this many requests.
    Ops(u64),
}

/// One worker: its pool handle, its random stream and its share of the run.
struct Job {
    pool: Pool,
    mix: OpMix,
    keys: u64,
    key_size: usize,
    value_size: usize,
    rng: SplitMix64,
    quota: Quota,
    counters: Arc<[Counters]>,
    slot: usize,
}

impl Job {
    async fn run(mut self) -> WorkerResult {
        // Allocated once; every request borrows them.
        let mut key = vec![0u8; self.key_size];
        let value = value_pattern(self.value_size);
        let mut puts = Tally::new();
        let mut gets = Tally::new();
        let mut first_error = None;
        let counters = &self.counters[self.slot];
        let mut done = 0u64;
        let mut now = Instant::now();
        loop {
            match self.quota {
                Quota::Until(deadline) if now >= deadline => break,
                Quota::Ops(quota) if done >= quota => break,
                _ => {}
            }
            let op = self.mix.choose(&mut self.rng);
            let number = self.rng.below(self.keys);
            assert!(format_key(number, &mut key), "Plan::new checked that every key number fits");
            let sent = Instant::now();
            let result = match op {
                Op::Put => self.pool.put(&key[..], &value[..]).await,
                // The client returns an owned copy of the value; dropping it is the only cost
                // here we cannot avoid without changing the client.
                Op::Get => self.pool.get(&key[..]).await.map(drop),
            };
            now = Instant::now();
            let tally = if op == Op::Put { &mut puts } else { &mut gets };
            tally.record(now - sent, result.is_ok());
            done += 1;
            counters.ops.store(done, Ordering::Relaxed);
            if let Err(error) = result {
                counters.errors.fetch_add(1, Ordering::Relaxed);
                let closed = error.is_connection_closed();
                first_error.get_or_insert_with(|| error.to_string());
                // Every later request on a dead connection fails at once; spinning on them
                // would only inflate the error count.
                if closed {
                    break;
                }
            }
        }
        WorkerResult { puts, gets, first_error }
    }
}

/// Prints the progress line every second until aborted: rewritten in place on a terminal,
/// one plain line per tick otherwise (logs, CI).
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
        let _ = if live { write!(err, "\r{line}\x1b[K") } else { writeln!(err, "{line}") };
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

/// Closes every session's pool, then deletes the pool if this run created it and may remove
/// it. Problems here are reported but do not void the measurements.
async fn finish(session: &Session, pools: Vec<Pool>, plan: &Plan, created: bool) -> &'static str {
    for pool in pools {
        if let Err(error) = pool.close().await {
            eprintln!("warning: closing pool '{}': {error}", plan.pool);
        }
    }
    if !created {
        return "existed before the run; left in place";
    }
    if plan.keep_pool {
        return "kept (--keep-pool)";
    }
    match session.delete_pool(&plan.pool).await {
        Ok(()) => "deleted",
        Err(error) => {
            eprintln!("warning: deleting pool '{}': {error}", plan.pool);
            "delete failed"
        }
    }
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
}
