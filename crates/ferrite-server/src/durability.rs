//! A shard's durability on the `ssd` backing: its log, the sync thread that group-commits it, the
//! durable LSN the sync thread publishes, and the rules for when a response may leave.
//!
//! - A `sync` write's response waits until the log is durable up to the write's record.
//! - A read's response waits until every `sync` write the shard applied before it is durable, so
//!   no client acts on a value a crash could still take back. `async` writes are visible at once.
//! - If the log fails (an I/O error), connections waiting for durability are closed without their
//!   responses, and the shard refuses writes until it is restarted.
//! - A connection whose `async` writes fill the log's backlog reads no more until the log has
//!   written it (durable or not): the pace of the disk, without a flush per batch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ferrite_store::persistence::ssd::{Checkpointer, ShardPaths, SharedLog, SyncThread};
use ferrite_store::persistence::wal::{LogEnd, Lsn};
use tokio::sync::{watch, Notify};

use crate::config::DurabilityConfig;
use crate::stats::DurabilityReport;

/// The durable end of the log as connections see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DurableState {
    pub lsn: Lsn,
    /// The last record written to its file, durable or not.
    pub written: Lsn,
    pub failed: bool,
}

/// What the sync thread publishes to its shard, lock-free: the durable end of the log, and a
/// wake-up for the shard's durability task.
#[derive(Debug)]
struct DurableSignal {
    /// The last durable LSN the sync thread published.
    durable: AtomicU64,
    /// In cluster mode, the last entry the group committed that this replica applied: a record
    /// counts as durable for responses and checkpoints only once it is both in this replica's
    /// log and committed (on a majority, this replica included). `Lsn::MAX` on a single server.
    committed: AtomicU64,
    /// The last record the sync thread wrote to its file, durable or not.
    written: AtomicU64,
    failed: AtomicBool,
    /// Wakes the shard's durability task.
    published: Notify,
}

impl DurableSignal {
    fn state(&self) -> DurableState {
        let lsn = self.durable.load(Ordering::Acquire).min(self.committed.load(Ordering::Acquire));
        DurableState { lsn, written: self.written.load(Ordering::Acquire), failed: self.failed.load(Ordering::Acquire) }
    }
}

/// What a connection needs to wait for durability.
#[derive(Debug, Clone)]
pub(crate) struct DurableGate {
    durable: watch::Receiver<DurableState>,
    /// Wakes the shard's durability task to ask for a commit (see [`DurabilityTask`]).
    wanted: Arc<Notify>,
}

/// Why a wait for durability ended without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotDurable {
    /// The log failed: the waiting responses must not be sent.
    LogFailed,
}

impl DurableGate {
    /// Waits until the log is durable up to `lsn`, asking for a commit at the end of the shard's
    /// current loop turn.
    pub async fn wait_for(&mut self, lsn: Lsn) -> Result<(), NotDurable> {
        let state = *self.durable.borrow();
        if state.failed {
            return Err(NotDurable::LogFailed);
        }
        if state.lsn >= lsn {
            return Ok(());
        }
        self.wanted.notify_one();
        match self.durable.wait_for(|state| state.lsn >= lsn || state.failed).await {
            Ok(state) if !state.failed => Ok(()),
            _ => Err(NotDurable::LogFailed),
        }
    }

    /// Waits until the log has written its records up to `lsn` to their files, durable or not;
    /// asks for nothing (the shard asked the log to write them).
    pub async fn wait_written(&mut self, lsn: Lsn) -> Result<(), NotDurable> {
        match self.durable.wait_for(|state| state.written >= lsn || state.failed).await {
            Ok(state) if !state.failed => Ok(()),
            _ => Err(NotDurable::LogFailed),
        }
    }

    /// Whether a response that needs the log durable up to `lsn` may leave now.
    pub fn is_durable(&self, lsn: Lsn) -> bool {
        let state = *self.durable.borrow();
        !state.failed && state.lsn >= lsn
    }

    pub fn durable_lsn(&self) -> Lsn {
        self.durable.borrow().lsn
    }

    /// A gate whose log is durable up to `lsn`, and the sender that moves it, for tests.
    #[cfg(test)]
    pub(crate) fn durable_up_to(lsn: Lsn) -> (watch::Sender<DurableState>, DurableGate) {
        let (sender, durable) = watch::channel(DurableState { lsn, written: lsn, failed: false });
        (sender, DurableGate { durable, wanted: Arc::new(Notify::new()) })
    }
}

/// The shard-local half of group commit, run as one task on the shard's thread for as long as the
/// shard runs ([`DurabilityTask::run`]).
///
/// - **Asking for commits once per turn.** A connection that needs durability wakes this task
///   rather than the sync thread. The task is queued behind the connections that are ready in the
///   same turn of the shard's loop, so it runs once they have all read, answered and appended
///   their records: the commit it asks for covers every write of the turn, as Redis's
///   `appendfsync always` syncs once per event-loop iteration after reading every ready socket.
///   Asking at the first write instead started a commit with that one record and left the rest of
///   the turn to wait for the next: about 12 puts per `fdatasync` with 64 clients. While a commit
///   is on its way to the device the next turns' records gather behind it.
/// - **Relaying durability.** The sync thread wakes this one task when a batch is durable, and the
///   task wakes the waiting connections on the shard's own thread: one wake-up across threads per
///   commit instead of one per waiting connection.
#[derive(Debug)]
pub(crate) struct DurabilityTask {
    log: SharedLog,
    wanted: Arc<Notify>,
    signal: Arc<DurableSignal>,
    /// What the shard's connections wait on.
    to_connections: watch::Sender<DurableState>,
    /// The durable end of the log itself (in cluster mode what Raft's log store waits on).
    local: watch::Sender<Lsn>,
}

impl DurabilityTask {
    pub(crate) async fn run(self) {
        let DurabilityTask { log, wanted, signal, to_connections, local } = self;
        let requests = async {
            loop {
                wanted.notified().await;
                log.request_sync();
            }
        };
        let relay = async {
            loop {
                signal.published.notified().await;
                let state = signal.state();
                // Every batch is told, even one that ends where an earlier one did: a replica whose
                // log was cut back writes the same positions again, and what waits for them
                // (Raft's flush callbacks) must hear of it.
                local.send_replace(signal.durable.load(Ordering::Acquire));
                to_connections.send_if_modified(|current| {
                    let changed = *current != state;
                    *current = state;
                    changed
                });
            }
        };
        tokio::select! {
            () = requests => {}
            () = relay => {}
        }
    }
}

/// The durability machinery of one shard.
#[derive(Debug)]
pub(crate) struct ShardDurability {
    /// Where the shard's log and checkpoints live.
    pub paths: ShardPaths,
    pub log: SharedLog,
    pub gate: DurableGate,
    pub checkpointer: Checkpointer,
    pub config: DurabilityConfig,
    /// The shard-local task of group commit, until the shard takes it to run.
    task: Option<DurabilityTask>,
    /// The LSN of the last `sync` write: reads wait until it is durable.
    pub visible_lsn: Lsn,
    pub last_checkpoint: Instant,
    /// Checkpoints completed since the server started.
    pub checkpoints: u64,
    /// A backup is copying the checkpoint and log: no checkpoint may start (it would remove the
    /// page files and recycle the segments the copy reads).
    pub backing_up: bool,
    /// A snapshot from the group's leader is replacing the checkpoint and the log: no checkpoint
    /// may start (see `cluster::snapshot`).
    pub installing: bool,
    /// How long the last checkpoint took and how many pages it wrote, and the pages written
    /// since start, for the metrics endpoint.
    pub last_checkpoint_took: std::time::Duration,
    pub last_checkpoint_pages: u64,
    pub checkpoint_pages_total: u64,
    /// How long the shard took to recover from its files at start.
    pub recovered_in: std::time::Duration,
    /// Stopped (after a last commit) when the shard stops.
    sync_thread: Option<SyncThread>,
    signal: Arc<DurableSignal>,
    /// The durable end of the log itself.
    local: watch::Receiver<Lsn>,
}

impl ShardDurability {
    /// Starts the sync thread of shard `index` over `log`.
    pub fn start(
        index: usize,
        paths: ShardPaths,
        log: SharedLog,
        checkpointer: Checkpointer,
        config: DurabilityConfig,
    ) -> std::io::Result<ShardDurability> {
        let durable_lsn = log.durable_lsn();
        let signal = Arc::new(DurableSignal {
            durable: AtomicU64::new(durable_lsn),
            committed: AtomicU64::new(Lsn::MAX),
            written: AtomicU64::new(durable_lsn),
            failed: AtomicBool::new(false),
            published: Notify::new(),
        });
        let published = Arc::clone(&signal);
        let on_durable = Box::new(move |outcome: Result<LogEnd, String>| {
            match &outcome {
                Ok(end) => {
                    published.written.store(end.written, Ordering::Release);
                    published.durable.store(end.durable, Ordering::Release);
                }
                Err(reason) => {
                    tracing::error!(shard = index, %reason, "write-ahead log failed; the shard refuses writes until restarted");
                    published.failed.store(true, Ordering::Release);
                }
            }
            published.published.notify_one();
        });
        let interval = std::time::Duration::from_millis(config.commit_interval_ms);
        let sync_thread = log.spawn_sync_thread(format!("wal-sync-{index}"), interval, on_durable)?;
        let wanted = Arc::new(Notify::new());
        let (to_connections, durable) = watch::channel(signal.state());
        let (local_sender, local) = watch::channel(durable_lsn);
        let task = DurabilityTask {
            log: log.clone(),
            wanted: Arc::clone(&wanted),
            signal: Arc::clone(&signal),
            to_connections,
            local: local_sender,
        };
        Ok(ShardDurability {
            paths,
            backing_up: false,
            installing: false,
            last_checkpoint_took: std::time::Duration::ZERO,
            last_checkpoint_pages: 0,
            checkpoint_pages_total: 0,
            recovered_in: std::time::Duration::ZERO,
            gate: DurableGate { durable, wanted },
            task: Some(task),
            log,
            checkpointer,
            config,
            visible_lsn: durable_lsn,
            last_checkpoint: Instant::now(),
            checkpoints: 0,
            sync_thread: Some(sync_thread),
            signal,
            local,
        })
    }

    /// In cluster mode: the group has committed, and this replica applied, the entries up to
    /// `lsn`; responses and checkpoints may count them as durable once they are in its log too.
    /// A replica starts at 0 (nothing counts) until its group tells it more.
    pub fn set_committed(&self, lsn: Lsn) {
        self.signal.committed.store(lsn, Ordering::Release);
        self.signal.published.notify_one();
    }

    /// The durable end of the log itself, as the shard's thread learns it after each batch.
    pub fn local_durable(&self) -> watch::Receiver<Lsn> {
        self.local.clone()
    }

    /// The shard-local task of group commit, for the shard to spawn on its thread (once).
    pub fn take_task(&mut self) -> Option<DurabilityTask> {
        self.task.take()
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
            wal_record_bytes_max: counters.record_bytes_max,
            wal_pending_bytes_max: counters.pending_bytes_max,
            wal_buffer_bytes: self.log.buffer_bytes() as u64,
            wal_held_bytes: self.log.held_bytes(),
            wal_spares_written: counters.spares_written,
            wal_spares_reserved: counters.spares_reserved,
            durable_lsn: self.gate.durable_lsn(),
            checkpoints: self.checkpoints,
            checkpoint_pages: self.checkpoint_pages_total,
        }
    }

    /// Whether no checkpoint may begin now: one runs, or a backup or a snapshot installation
    /// uses the checkpoint's files.
    pub fn checkpoints_held(&self) -> bool {
        self.checkpointer.in_progress() || self.backing_up || self.installing
    }

    /// A checkpoint is due: enough log has accumulated, or enough time has passed and something
    /// changed since the last one.
    pub fn checkpoint_due(&self) -> bool {
        if self.checkpoints_held() {
            return false;
        }
        let changed = self.log.last_lsn() >= self.checkpointer.manifest().replay_from.max(1);
        let retained = self.log.retained_bytes();
        retained >= self.config.checkpoint_wal_bytes
            || (changed && self.last_checkpoint.elapsed().as_secs() >= self.config.checkpoint_interval_secs)
    }
}
