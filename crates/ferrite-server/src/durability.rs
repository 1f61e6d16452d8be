//! A shard's durability on the `ssd` backing: its log, the sync thread that group-commits it, the
//! durable LSN the sync thread publishes, and the rules for when a response may leave.
//!
//! - A `sync` write's response waits until the log is durable up to the write's record.
//! - A read's response waits until every `sync` write the shard applied before it is durable, so
//!   no client acts on a value a crash could still take back. `async` writes are visible at once.
//! - If the log fails (an I/O error), connections waiting for durability are closed without their
//!   responses, and the shard refuses writes until it is restarted.

use std::time::Instant;

use ferrite_store::persistence::ssd::{Checkpointer, SharedLog, SyncThread};
use ferrite_store::persistence::wal::Lsn;
use tokio::sync::watch;

use crate::config::DurabilityConfig;
use crate::stats::DurabilityReport;

/// What the sync thread publishes after each batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DurableState {
    pub lsn: Lsn,
    pub failed: bool,
}

/// What a connection needs to wait for durability.
#[derive(Debug, Clone)]
pub(crate) struct DurableGate {
    log: SharedLog,
    durable: watch::Receiver<DurableState>,
}

/// Why a wait for durability ended without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotDurable {
    /// The log failed: the waiting responses must not be sent.
    LogFailed,
}

impl DurableGate {
    /// Waits until the log is durable up to `lsn` (asking the sync thread to commit now).
    pub async fn wait_for(&mut self, lsn: Lsn) -> Result<(), NotDurable> {
        let state = *self.durable.borrow();
        if state.failed {
            return Err(NotDurable::LogFailed);
        }
        if state.lsn >= lsn {
            return Ok(());
        }
        self.log.request_sync();
        match self.durable.wait_for(|state| state.lsn >= lsn || state.failed).await {
            Ok(state) if !state.failed => Ok(()),
            _ => Err(NotDurable::LogFailed),
        }
    }

    pub fn durable_lsn(&self) -> Lsn {
        self.durable.borrow().lsn
    }
}

/// The durability machinery of one shard.
#[derive(Debug)]
pub(crate) struct ShardDurability {
    pub log: SharedLog,
    pub gate: DurableGate,
    pub checkpointer: Checkpointer,
    pub config: DurabilityConfig,
    /// The LSN of the last `sync` write: reads wait until it is durable.
    pub visible_lsn: Lsn,
    pub last_checkpoint: Instant,
    /// Checkpoints completed since the server started.
    pub checkpoints: u64,
    /// Stopped (after a last commit) when the shard stops.
    sync_thread: Option<SyncThread>,
}

impl ShardDurability {
    /// Starts the sync thread of shard `index` over `log`.
    pub fn start(
        index: usize,
        log: SharedLog,
        checkpointer: Checkpointer,
        config: DurabilityConfig,
    ) -> std::io::Result<ShardDurability> {
        let durable_lsn = log.durable_lsn();
        let (sender, durable) = watch::channel(DurableState { lsn: durable_lsn, failed: false });
        let on_durable = Box::new(move |outcome: Result<Lsn, String>| {
            let state = match &outcome {
                Ok(lsn) => DurableState { lsn: *lsn, failed: false },
                Err(reason) => {
                    tracing::error!(shard = index, %reason, "write-ahead log failed; the shard refuses writes until restarted");
                    DurableState { lsn: sender.borrow().lsn, failed: true }
                }
            };
            // Nobody listening means the shard is gone; the log itself still holds the state.
            let _ = sender.send(state);
        });
        let interval = std::time::Duration::from_millis(config.commit_interval_ms);
        let sync_thread = log.spawn_sync_thread(format!("wal-sync-{index}"), interval, on_durable)?;
        Ok(ShardDurability {
            gate: DurableGate { log: log.clone(), durable },
            log,
            checkpointer,
            config,
            visible_lsn: durable_lsn,
            last_checkpoint: Instant::now(),
            checkpoints: 0,
            sync_thread: Some(sync_thread),
        })
    }

    /// Commits what is buffered and stops the sync thread.
    pub fn stop(&mut self) {
        if let Some(thread) = self.sync_thread.take() {
            thread.stop();
        }
    }

    /// The shard's durability counters, for `get_statistics`.
    pub fn report(&self) -> DurabilityReport {
        let counters = self.log.counters();
        DurabilityReport {
            wal_bytes: counters.bytes_written,
            wal_commits: counters.commits,
            durable_lsn: self.gate.durable_lsn(),
            checkpoints: self.checkpoints,
        }
    }

    /// A checkpoint is due: enough log has accumulated, or enough time has passed and something
    /// changed since the last one.
    pub fn checkpoint_due(&self) -> bool {
        if self.checkpointer.in_progress() {
            return false;
        }
        let changed = self.log.last_lsn() >= self.checkpointer.manifest().replay_from.max(1);
        let retained = self.log.retained_bytes();
        retained >= self.config.checkpoint_wal_bytes
            || (changed && self.last_checkpoint.elapsed().as_secs() >= self.config.checkpoint_interval_secs)
    }
}
