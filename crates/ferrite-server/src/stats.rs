//! Per-shard counters. A shard is single-threaded, so plain integers suffice for what the shard
//! counts; what its connections count while they await ([`Traffic`]) uses uncontended atomics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferrite_proto::Statistic;

/// How a shard admits and keeps connections (`[limits]`): the connection limit, how long a client
/// has to complete its handshake, and how long one may idle (`None`: forever).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Admission {
    pub connections_max: u64,
    pub handshake_timeout: Duration,
    pub idle_timeout: Option<Duration>,
    /// The longest a client with a value being staged (an open direct put, a long RESP `SET`)
    /// may send nothing, whatever `idle_timeout` says: the staged value holds its pool's heap
    /// space (`limits.direct_read_idle_ms`).
    pub staging_idle: Duration,
    /// Most answers one connection may have pending (plugin calls) before it reads on.
    pub in_flight_max: u64,
}

fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// What a durable shard adds to its statistics.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DurabilityReport {
    pub wal_bytes: u64,
    pub wal_commits: u64,
    pub wal_record_bytes_max: u64,
    pub wal_pending_bytes_max: u64,
    pub wal_buffer_bytes: u64,
    pub wal_held_bytes: u64,
    pub wal_spares_written: u64,
    pub wal_spares_reserved: u64,
    pub durable_lsn: u64,
    pub checkpoints: u64,
    pub checkpoint_pages: u64,
}

/// What a shard's pools hold together.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PoolTotals {
    pub pools: u64,
    pub objects: u64,
    /// Every pool's memory in use (`PoolMemory::total_bytes`).
    pub memory_bytes: u64,
}

#[derive(Debug)]
pub(crate) struct ShardStats {
    pub started: Instant,
    pub requests: u64,
    pub puts: u64,
    pub gets: u64,
    pub erases: u64,
    pub finds: u64,
    pub failures: u64,
    /// The same failures, by the kind of request that failed.
    pub failures_by_op: [u64; OPS],
    pub clients: u64,
    pub clients_total: u64,
    /// Connections turned away at the connection limit.
    pub clients_refused: u64,
    /// Connections closed for missing their handshake deadline or for idling too long.
    pub clients_timed_out: u64,
    /// Plugin calls accepted, and those that failed (plugin error, crash, timeout).
    pub invocations: u64,
    pub invocation_failures: u64,
    /// Authentications refused for a wrong user or password (or none, where one is required).
    pub authentication_failures: u64,
    /// Requests refused for want of a grant.
    pub requests_denied: u64,
    /// Direct transfers opened, and the value bytes they carried in (put) and out (read).
    pub direct_transfers: u64,
    pub direct_bytes_in: u64,
    pub direct_bytes_out: u64,
    /// Of `direct_bytes_in`, those a connection read from its socket straight into pool memory.
    pub direct_bytes_in_place: u64,
}

impl ShardStats {
    pub fn new() -> Self {
        ShardStats {
            started: Instant::now(),
            requests: 0,
            puts: 0,
            gets: 0,
            erases: 0,
            finds: 0,
            failures: 0,
            failures_by_op: [0; OPS],
            clients: 0,
            clients_total: 0,
            clients_refused: 0,
            clients_timed_out: 0,
            invocations: 0,
            invocation_failures: 0,
            authentication_failures: 0,
            requests_denied: 0,
            direct_transfers: 0,
            direct_bytes_in: 0,
            direct_bytes_out: 0,
            direct_bytes_in_place: 0,
        }
    }

    /// The counters as the named pairs of a `get_statistics` response (names in `docs/protocol.md`).
    pub fn report(
        &self,
        shard_index: u16,
        pools: PoolTotals,
        durability: Option<DurabilityReport>,
        admission: Admission,
    ) -> Vec<Statistic<'static>> {
        let uptime_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let durable = durability.map(|d| {
            [
                ("wal_bytes", d.wal_bytes),
                ("wal_commits", d.wal_commits),
                ("wal_record_bytes_max", d.wal_record_bytes_max),
                ("wal_pending_bytes_max", d.wal_pending_bytes_max),
                ("wal_buffer_bytes", d.wal_buffer_bytes),
                ("wal_held_bytes", d.wal_held_bytes),
                ("wal_spares_written", d.wal_spares_written),
                ("wal_spares_reserved", d.wal_spares_reserved),
                ("durable_lsn", d.durable_lsn),
                ("checkpoints", d.checkpoints),
                ("checkpoint_pages", d.checkpoint_pages),
            ]
        });
        [
            ("shard", u64::from(shard_index)),
            ("requests", self.requests),
            ("puts", self.puts),
            ("gets", self.gets),
            ("erases", self.erases),
            ("finds", self.finds),
            ("failures", self.failures),
            ("clients", self.clients),
            ("clients_total", self.clients_total),
            ("clients_refused", self.clients_refused),
            ("clients_timed_out", self.clients_timed_out),
            ("connections_max", admission.connections_max),
            ("handshake_timeout_ms", duration_ms(admission.handshake_timeout)),
            ("idle_timeout_ms", admission.idle_timeout.map_or(0, duration_ms)),
            ("requests_in_flight_per_connection_max", admission.in_flight_max),
            ("authentication_failures", self.authentication_failures),
            ("requests_denied", self.requests_denied),
            ("invocations", self.invocations),
            ("invocation_failures", self.invocation_failures),
            ("direct_transfers", self.direct_transfers),
            ("direct_bytes_in", self.direct_bytes_in),
            ("direct_bytes_out", self.direct_bytes_out),
            ("direct_bytes_in_place", self.direct_bytes_in_place),
            ("pools", pools.pools),
            ("objects", pools.objects),
            ("memory_bytes", pools.memory_bytes),
            ("uptime_ms", uptime_ms),
        ]
        .into_iter()
        .chain(durable.into_iter().flatten())
        .map(|(name, value)| Statistic { name, value })
        .collect()
    }
}

/// The kinds of operation metrics break counts and latencies down by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Put,
    Get,
    Erase,
    Find,
    Invoke,
    /// Pool management, counts, attributes, statistics, handshakes.
    Other,
}

/// How many [`Op`] kinds there are.
pub(crate) const OPS: usize = 6;

impl Op {
    pub const ALL: [Op; OPS] = [Op::Put, Op::Get, Op::Erase, Op::Find, Op::Invoke, Op::Other];

    pub fn name(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::Get => "get",
            Op::Erase => "erase",
            Op::Find => "find",
            Op::Invoke => "invoke",
            Op::Other => "other",
        }
    }

    /// The kind of a request.
    pub fn of(request: &ferrite_proto::Request<'_>) -> Op {
        use ferrite_proto::Request;
        match request {
            Request::Put { .. } => Op::Put,
            Request::Get { .. } => Op::Get,
            Request::Erase { .. } => Op::Erase,
            Request::Find { .. } => Op::Find,
            Request::InvokeAdo { .. } | Request::InvokePutAdo { .. } => Op::Invoke,
            _ => Op::Other,
        }
    }
}

/// Upper bounds of the latency histograms' buckets, in microseconds (a last bucket takes the
/// rest): from a fast in-memory read to a stalled disk.
pub(crate) const LATENCY_BOUNDS_US: [u64; 14] =
    [25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000];

/// One operation kind's latencies: a count per bucket (the last for anything above the last
/// bound) and their sum.
#[derive(Debug, Default)]
pub(crate) struct LatencyHistogram {
    buckets: [AtomicU64; LATENCY_BOUNDS_US.len() + 1],
    sum_ns: AtomicU64,
}

/// A histogram as read by a scrape: the count of each bucket by its upper bound in seconds (the
/// last bucket's bound is `f64::MAX`, Prometheus's `+Inf`), the count and the sum (seconds).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LatencySnapshot {
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl LatencyHistogram {
    fn record(&self, latency: Duration, requests: u64) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        let bucket = LATENCY_BOUNDS_US.partition_point(|bound| *bound < us);
        self.buckets[bucket].fetch_add(requests, Ordering::Relaxed);
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.sum_ns.fetch_add(ns.saturating_mul(requests), Ordering::Relaxed);
    }

    fn snapshot(&self) -> LatencySnapshot {
        let buckets: Vec<(f64, u64)> = self
            .buckets
            .iter()
            .enumerate()
            .map(|(index, bucket)| {
                let bound = LATENCY_BOUNDS_US.get(index).map_or(f64::MAX, |us| *us as f64 / 1e6);
                (bound, bucket.load(Ordering::Relaxed))
            })
            .collect();
        let count = buckets.iter().map(|(_, count)| count).sum();
        LatencySnapshot { buckets, count, sum_seconds: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9 }
    }
}

/// What a shard's connections count between their awaits: bytes in and out, and request
/// latencies by operation. Shared by the shard's connections (which hold it without borrowing
/// the shard) and read by metrics scrapes; every update is a relaxed atomic add on the shard's
/// own thread, never contended.
#[derive(Debug, Default)]
pub(crate) struct Traffic {
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    latency: [LatencyHistogram; OPS],
}

/// What one pool has been asked since the server started.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PoolCounters {
    /// Requests on the pool, by [`Op`] kind.
    pub ops: [u64; OPS],
    /// Those answered with an error, by kind.
    pub failures: [u64; OPS],
}

/// Requests of each [`Op`] kind in one batch of a connection.
pub(crate) type BatchOps = [u32; OPS];

impl Traffic {
    pub fn read(&self, bytes: usize) {
        self.bytes_in.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn wrote(&self, bytes: usize) {
        self.bytes_out.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A batch's responses left `latency` after its requests were read.
    pub fn answered(&self, ops: &BatchOps, latency: Duration) {
        for (histogram, requests) in self.latency.iter().zip(ops).filter(|(_, requests)| **requests > 0) {
            histogram.record(latency, u64::from(*requests));
        }
    }

    /// One request of kind `op` was answered `latency` after it was read.
    pub fn answered_one(&self, op: Op, latency: Duration) {
        self.latency[op as usize].record(latency, 1);
    }

    pub fn bytes(&self) -> (u64, u64) {
        (self.bytes_in.load(Ordering::Relaxed), self.bytes_out.load(Ordering::Relaxed))
    }

    pub fn latency(&self, op: Op) -> LatencySnapshot {
        self.latency[op as usize].snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Latencies land in the first bucket whose bound is at or above them; the last bucket takes
    /// the rest.
    #[test]
    fn latencies_fill_cumulative_buckets() {
        let traffic = Traffic::default();
        let mut ops = BatchOps::default();
        ops[Op::Put as usize] = 3;
        traffic.answered(&ops, Duration::from_micros(25));
        traffic.answered(&ops, Duration::from_micros(700));
        traffic.answered_one(Op::Put, Duration::from_secs(5));
        let put = traffic.latency(Op::Put);
        assert_eq!(put.count, 7);
        assert_eq!(put.buckets[0], (25e-6, 3), "25 us is within the first bound");
        assert_eq!(put.buckets[5], (1e-3, 3));
        assert_eq!(put.buckets.last(), Some(&(f64::MAX, 1)));
        assert!((put.sum_seconds - (3.0 * 25e-6 + 3.0 * 700e-6 + 5.0)).abs() < 1e-9);
        assert_eq!(traffic.latency(Op::Get).count, 0);
    }
}
