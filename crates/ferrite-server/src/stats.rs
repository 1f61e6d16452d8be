//! Per-shard counters. A shard is single-threaded, so plain integers suffice.

use std::time::Instant;

use ferrite_proto::Statistic;

/// What a durable shard adds to its statistics.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DurabilityReport {
    pub wal_bytes: u64,
    pub wal_commits: u64,
    pub wal_record_bytes_max: u64,
    pub wal_pending_bytes_max: u64,
    pub wal_buffer_bytes: u64,
    pub durable_lsn: u64,
    pub checkpoints: u64,
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
    pub clients: u64,
    pub clients_total: u64,
    /// Connections turned away at the connection limit.
    pub clients_refused: u64,
    /// Plugin calls accepted, and those that failed (plugin error, crash, timeout).
    pub invocations: u64,
    pub invocation_failures: u64,
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
            clients: 0,
            clients_total: 0,
            clients_refused: 0,
            invocations: 0,
            invocation_failures: 0,
        }
    }

    /// The counters as the named pairs of a `get_statistics` response (names in `docs/protocol.md`).
    pub fn report(
        &self,
        shard_index: u16,
        pools: PoolTotals,
        durability: Option<DurabilityReport>,
    ) -> Vec<Statistic<'static>> {
        let uptime_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let durable = durability.map(|d| {
            [
                ("wal_bytes", d.wal_bytes),
                ("wal_commits", d.wal_commits),
                ("wal_record_bytes_max", d.wal_record_bytes_max),
                ("wal_pending_bytes_max", d.wal_pending_bytes_max),
                ("wal_buffer_bytes", d.wal_buffer_bytes),
                ("durable_lsn", d.durable_lsn),
                ("checkpoints", d.checkpoints),
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
            ("invocations", self.invocations),
            ("invocation_failures", self.invocation_failures),
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
