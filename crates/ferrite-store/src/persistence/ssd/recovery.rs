//! Bringing a shard's pools back after a restart: load the last complete checkpoint, replay the
//! write-ahead log from where it says, cut a torn tail, and hand back each pool's memory with
//! its changed pages marked for the next checkpoint.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::checkpoint::{load_pool, remove_unreferenced, CheckpointError, Checkpointer, Manifest};
use super::entry::Entry;
use super::logged::IN_LOG_RANGE_BYTES_MIN;
use super::pages::PageTracker;
use super::record::{decode, LogRecord, PoolDescriptor, Ranges};
use super::region::SharedRegion;
use crate::persistence::wal::{self, FsStorage, LogStorage, Lsn, RecordAt, TornCommit, WalConfig, WalError, WalWriter};

/// Where a shard keeps its log and its checkpoints.
#[derive(Debug, Clone)]
pub struct ShardPaths {
    pub wal: PathBuf,
    pub checkpoint: PathBuf,
}

/// The directory in which a cluster node's shard keeps its replica's Raft state, beside its log:
/// its presence says the log's records are entries of the group's log.
pub const RAFT_DIR: &str = "raft";

impl ShardPaths {
    pub fn new(shard_dir: &Path) -> ShardPaths {
        ShardPaths { wal: shard_dir.join("wal"), checkpoint: shard_dir.join("checkpoint") }
    }

    /// The shard's Raft state directory (see [`RAFT_DIR`]).
    pub fn raft(&self) -> PathBuf {
        self.wal.parent().map_or_else(|| PathBuf::from(RAFT_DIR), |dir| dir.join(RAFT_DIR))
    }

    /// Whether the shard is a replica of a cluster's group (its log holds the group's entries).
    pub fn is_replicated(&self) -> bool {
        self.raft().is_dir()
    }
}

/// Why a shard could not be recovered. Nothing was changed on disk.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryError {
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    /// A log record that is intact but makes no sense against what came before it.
    #[error("write-ahead log record {lsn} is invalid: {reason}")]
    BadRecord { lsn: Lsn, reason: String },
}

/// A pool as recovery rebuilt it.
#[derive(Debug)]
pub struct RecoveredPool {
    pub descriptor: PoolDescriptor,
    pub region: SharedRegion,
    pub pages: Arc<Mutex<PageTracker>>,
}

/// What recovery found, for the log line a server prints.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    pub checkpoint_seq: u64,
    pub checkpoint_pages: u64,
    /// Of the checkpoint's pages, those read from log records it keeps (large values).
    pub pages_in_log: u64,
    pub replay_from: Lsn,
    pub records_replayed: u64,
    pub bytes_replayed: u64,
    pub torn_tail: Option<(String, u64)>,
    /// The interrupted last commit that was cut, if the device kept some of its records.
    pub torn_commit: Option<TornCommit>,
    pub stray_files_removed: usize,
    pub elapsed: Duration,
}

/// A shard ready to serve.
#[derive(Debug)]
pub struct RecoveredShard {
    pub pools: Vec<RecoveredPool>,
    pub next_pool_id: u64,
    pub writer: WalWriter<FsStorage>,
    pub checkpointer: Checkpointer,
    pub report: RecoveryReport,
    /// What a replicated shard's log holds of its group's log (empty for a single server's).
    pub entries: EntrySummary,
}

/// How a shard's log records are read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayMode {
    /// A single server's: every record is one of its own, and every one is replayed.
    Plain,
    /// A replicated shard's: every record is an entry of its group's log ([`super::entry`]),
    /// and only the normal entries up to `until` (the last the group committed, as this
    /// replica knows) are replayed; those after it may yet be dropped by a new leader.
    Replicated { until: Lsn },
}

/// What a replicated shard's log holds, besides the records replay applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntrySummary {
    /// The last entry the log holds: its index and term.
    pub last: Option<(Lsn, u64)>,
    /// The entry the recovered state is as of: its index and term. That is the last entry the
    /// log holds at or before `until`, or at or before the checkpoint's last entry
    /// (`replay_from - 1`) if that is later: a checkpoint holds only applied entries, which were
    /// committed, even if the `until` the caller kept lags behind it. `None` if the log holds
    /// no such entry (a log restarted after a snapshot: the caller knows that one's last entry).
    pub applied: Option<(Lsn, u64)>,
    /// Membership entries from the checkpoint's `replay_from` up to `applied`, which the replay
    /// read: index, term and body, in order. (Earlier ones are the caller's to keep.)
    pub memberships: Vec<(Lsn, u64, Vec<u8>)>,
}

fn io_error(context: String) -> impl FnOnce(std::io::Error) -> RecoveryError {
    move |source| RecoveryError::Io { context, source }
}

/// Pool memory rebuilt from log records: what recovery replays into, and what a replica that
/// follows its group's leader applies the leader's records to.
#[derive(Debug, Default)]
pub struct ReplicaPools {
    pub pools: BTreeMap<u64, RecoveredPool>,
    pub next_pool_id: u64,
    bytes: u64,
    error: Option<RecoveryError>,
}

type Replay = ReplicaPools;

impl ReplicaPools {
    /// Pools as a recovery left them.
    pub fn new(pools: Vec<RecoveredPool>, next_pool_id: u64) -> ReplicaPools {
        ReplicaPools {
            pools: pools.into_iter().map(|pool| (pool.descriptor.id, pool)).collect(),
            next_pool_id,
            ..ReplicaPools::default()
        }
    }

    /// What a checkpoint of these pools copies: each one's descriptor, dirty pages and memory
    /// file (a follower's shard checkpoints its replica as a leader's checkpoints its stores).
    pub fn checkpoint_pools(&self) -> Vec<super::checkpoint::CheckpointPool> {
        self.pools
            .values()
            .map(|pool| super::checkpoint::CheckpointPool {
                descriptor: pool.descriptor.clone(),
                pages: Arc::clone(&pool.pages),
                region: Arc::clone(pool.region.file()),
            })
            .collect()
    }

    /// The value under `key` in the pool named `name`, read in place (see
    /// [`crate::hstore::peek`]); `None` if there is no such pool.
    pub fn peek(&self, name: &str, key: &[u8]) -> Option<Option<&[u8]>> {
        let pool = self.pools.values().find(|pool| pool.descriptor.name == name)?;
        Some(crate::hstore::peek(pool.region.bytes(), key))
    }

    /// Applies one record (of this shard's own kinds, [`super::record`]) with LSN `lsn`; says
    /// which pool it created or deleted, if it did (users' quotas count pools).
    pub fn apply(&mut self, lsn: Lsn, payload: &[u8]) -> Result<Option<PoolChange>, RecoveryError> {
        self.apply_at(lsn, None, payload)
    }

    /// [`ReplicaPools::apply`] of a record found at `at` in the log (alone, or framed as an
    /// entry): a checkpoint may keep the pages of its large ranges there.
    pub fn apply_at(
        &mut self,
        lsn: Lsn,
        at: Option<RecordAt>,
        payload: &[u8],
    ) -> Result<Option<PoolChange>, RecoveryError> {
        let bad = |reason: String| RecoveryError::BadRecord { lsn, reason };
        self.bytes += payload.len() as u64;
        match decode(payload).map_err(|error| bad(error.to_string()))? {
            LogRecord::PoolCreated { descriptor, ranges } => {
                if self.pools.contains_key(&descriptor.id) {
                    return Err(bad(format!("creates pool {} which already exists", descriptor.id)));
                }
                self.next_pool_id = self.next_pool_id.max(descriptor.id + 1);
                let (region, pages) = new_region(&descriptor)?;
                let id = descriptor.id;
                let change =
                    PoolChange::Created { owner: descriptor.owner.clone(), size_bytes: descriptor.spec.size_bytes };
                let pool = self.pools.entry(id).or_insert(RecoveredPool { descriptor, region, pages });
                apply_ranges(pool, ranges, lsn, None)?;
                Ok(Some(change))
            }
            LogRecord::PoolDeleted { id } => {
                let pool =
                    self.pools.remove(&id).ok_or_else(|| bad(format!("deletes pool {id}, which does not exist")))?;
                let PoolDescriptor { owner, spec, .. } = pool.descriptor;
                Ok(Some(PoolChange::Deleted { owner, size_bytes: spec.size_bytes }))
            }
            LogRecord::PoolConfigured { id, indexed } => {
                let pool = self
                    .pools
                    .get_mut(&id)
                    .ok_or_else(|| bad(format!("configures pool {id}, which does not exist")))?;
                pool.descriptor.indexed = indexed;
                Ok(None)
            }
            LogRecord::Transaction { pool, ranges } => {
                let target = self
                    .pools
                    .get_mut(&pool)
                    .ok_or_else(|| bad(format!("changes pool {pool}, which does not exist")))?;
                apply_ranges(target, ranges, lsn, at)?;
                Ok(None)
            }
        }
    }
}

/// A pool a record created or deleted: its owner (on a server with users) and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolChange {
    Created { owner: Option<String>, size_bytes: u64 },
    Deleted { owner: Option<String>, size_bytes: u64 },
}

/// Writes the new bytes of record `lsn` into `pool`'s memory and marks their pages.
fn apply_ranges(
    pool: &mut RecoveredPool,
    ranges: Ranges<'_>,
    lsn: Lsn,
    at: Option<RecordAt>,
) -> Result<(), RecoveryError> {
    let id = pool.descriptor.id;
    let mut pages = pool.pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let memory = pool.region.bytes_mut();
    for (offset, len, bytes) in ranges {
        let end = offset.checked_add(u64::from(len)).filter(|end| *end <= memory.len() as u64);
        let end = end.ok_or_else(|| RecoveryError::BadRecord {
            lsn,
            reason: format!("range {offset}+{len} lies outside pool {id}'s region of {} bytes", memory.len()),
        })?;
        let target = &mut memory[offset as usize..end as usize];
        match bytes {
            Some(bytes) => target.copy_from_slice(bytes),
            None => target.fill(0),
        }
        match at {
            Some(at) if u64::from(len) >= IN_LOG_RANGE_BYTES_MIN => {
                pages.record_in_log(offset, u64::from(len), lsn, at)
            }
            _ => pages.record(offset, u64::from(len), lsn),
        }
    }
    Ok(())
}

/// The memory of a pool a checkpoint or a log record describes, with its page tracker. The
/// region size comes from disk, so it is checked against the pool's shape (the one size the
/// server gives such a pool) and allocated fallibly.
fn new_region(descriptor: &PoolDescriptor) -> Result<(SharedRegion, Arc<Mutex<PageTracker>>), RecoveryError> {
    let context = || format!("pool '{}' (id {})", descriptor.name, descriptor.id);
    let expected = crate::hstore::HStore::<SharedRegion>::region_bytes_for(descriptor.spec)
        .ok()
        .map(|bytes| bytes.next_multiple_of(super::pages::PAGE_BYTES));
    if expected != Some(descriptor.region_bytes) {
        return Err(RecoveryError::Io {
            context: context(),
            source: std::io::Error::other(format!(
                "its descriptor claims a region of {} bytes, which a pool of {} bytes for {} objects never has",
                descriptor.region_bytes, descriptor.spec.size_bytes, descriptor.spec.expected_objects
            )),
        });
    }
    let region = SharedRegion::zeroed(&format!("ferrite-pool-{}", descriptor.id), descriptor.region_bytes)
        .map_err(io_error(format!("allocating {} bytes of pool memory for {}", descriptor.region_bytes, context())))?;
    let pages = PageTracker::try_new(descriptor.region_bytes).map_err(|error| RecoveryError::Io {
        context: format!("allocating the page tracker of {}", context()),
        source: std::io::Error::other(error.to_string()),
    })?;
    Ok((region, Arc::new(Mutex::new(pages))))
}

/// Removes spare log segments a crash left half-made (their temporary names are never a
/// segment's, so recovery would ignore them; they only take space).
fn remove_stale_spares(wal: &Path) -> Result<(), RecoveryError> {
    let entries = std::fs::read_dir(wal).map_err(io_error(format!("listing {}", wal.display())))?;
    for entry in entries {
        let entry = entry.map_err(io_error(format!("listing {}", wal.display())))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("wal-spare-") && name.ends_with(".tmp") {
            match std::fs::remove_file(entry.path()) {
                // Gone already: a spare thread of an earlier log in this process (tests reopen a
                // shard while it runs) adopted or removed it. Gone is what was wanted.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                removed => removed.map_err(io_error(format!("removing {}", entry.path().display())))?,
            }
        }
    }
    Ok(())
}

/// What reading a shard's files produced, before anything is opened for writing.
#[derive(Debug)]
pub struct LoadedShard {
    pub pools: Vec<RecoveredPool>,
    pub next_pool_id: u64,
    pub manifest: Manifest,
    pub wal: wal::Recovered,
    pub report: RecoveryReport,
    pub entries: EntrySummary,
}

/// Loads the last complete checkpoint of the shard at `paths` and replays its log, changing
/// nothing on disk: what recovery does before it opens the log for writing, and all that
/// `ferrite check` does.
pub fn load_shard(paths: &ShardPaths) -> Result<LoadedShard, RecoveryError> {
    load_shard_observing(paths, &mut |_| {})
}

/// [`load_shard`], telling `progress` how many bytes it has read as it goes (the pages of each
/// pool loaded, then each log record replayed), for a job that shows its progress.
pub fn load_shard_observing(paths: &ShardPaths, progress: &mut dyn FnMut(u64)) -> Result<LoadedShard, RecoveryError> {
    load_shard_in_mode(paths, ReplayMode::Plain, progress)
}

/// [`load_shard_observing`] for a shard whose log records are read as `mode` says.
pub fn load_shard_in_mode(
    paths: &ShardPaths,
    mode: ReplayMode,
    progress: &mut dyn FnMut(u64),
) -> Result<LoadedShard, RecoveryError> {
    let storage = FsStorage::open_dir(&paths.wal).map_err(io_error(format!("opening {}", paths.wal.display())))?;
    load_shard_from(&paths.checkpoint, &storage, mode, progress)
}

/// [`load_shard_in_mode`] with the checkpoint in `checkpoint_dir` and the log in `storage` (the
/// simulated disk, in tests).
pub fn load_shard_with<S: LogStorage>(
    checkpoint_dir: &Path,
    storage: &S,
    mode: ReplayMode,
) -> Result<LoadedShard, RecoveryError> {
    load_shard_from(checkpoint_dir, storage, mode, &mut |_| {})
}

fn load_shard_from<S: LogStorage>(
    checkpoint_dir: &Path,
    storage: &S,
    mode: ReplayMode,
    progress: &mut dyn FnMut(u64),
) -> Result<LoadedShard, RecoveryError> {
    let started = Instant::now();
    let manifest = Manifest::read(checkpoint_dir)?.unwrap_or_default();
    let mut report = RecoveryReport {
        checkpoint_seq: manifest.seq,
        replay_from: manifest.replay_from.max(1),
        ..RecoveryReport::default()
    };
    let mut replay = Replay { next_pool_id: manifest.next_pool_id.max(1), ..Replay::default() };
    let mut entries = EntrySummary::default();
    for pool in &manifest.pools {
        let (mut region, pages) = new_region(&pool.descriptor)?;
        let loaded = load_pool(checkpoint_dir, storage, pool, region.bytes_mut())?;
        {
            // The pages are still the records' bytes: the next checkpoint keeps them there too.
            let mut tracker = pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for extent in &pool.in_log {
                tracker.restore_in_log(*extent);
                report.pages_in_log += extent.pages;
            }
        }
        report.checkpoint_pages += loaded;
        progress(loaded * super::pages::PAGE_BYTES);
        replay.pools.insert(pool.descriptor.id, RecoveredPool { descriptor: pool.descriptor.clone(), region, pages });
    }
    let recovered = wal::recover_placed(storage, report.replay_from, |lsn, at, payload| {
        progress(payload.len() as u64);
        if replay.error.is_some() {
            return;
        }
        let applied = match mode {
            ReplayMode::Plain => {
                replay.apply_at(lsn, Some(at), payload).map(drop).map_err(|error| match Entry::decode(payload) {
                    Some(_) => not_plain(lsn),
                    None => error,
                })
            }
            ReplayMode::Replicated { until } => entry_of(lsn, payload).and_then(|entry| {
                entries.last = Some((lsn, entry.term()));
                match entry {
                    _ if lsn > until => Ok(()),
                    Entry::Normal { record, .. } => replay.apply_at(lsn, Some(at), record).map(drop),
                    Entry::Membership { term, body } => {
                        entries.memberships.push((lsn, term, body.to_vec()));
                        Ok(())
                    }
                    Entry::Blank { .. } => Ok(()),
                }
                .map(|()| {
                    if lsn <= until {
                        entries.applied = Some((lsn, entry.term()));
                    }
                })
            }),
        };
        if let Err(error) = applied {
            replay.error = Some(error);
        }
    })?;
    if let Some(error) = replay.error {
        return Err(error);
    }
    if mode != ReplayMode::Plain && entries.applied.is_none() {
        // No entry up to `until` was replayed: the state is the checkpoint's, as of the entry
        // before its replay point (the last entry too, if none follows).
        let covered = checkpoint_entry(storage, report.replay_from)?;
        entries.applied = covered;
        entries.last = entries.last.or(covered);
    }
    report.records_replayed = recovered.replayed;
    report.bytes_replayed = replay.bytes;
    report.torn_tail = recovered.torn_tail.clone();
    report.torn_commit = recovered.torn_commit.clone();
    report.elapsed = started.elapsed();
    Ok(LoadedShard {
        pools: replay.pools.into_values().collect(),
        next_pool_id: replay.next_pool_id,
        manifest,
        wal: recovered,
        report,
        entries,
    })
}

/// The entry a replicated shard's log record holds, or why the record is none: a record of a
/// single server's log says so.
fn entry_of(lsn: Lsn, payload: &[u8]) -> Result<Entry<'_>, RecoveryError> {
    Entry::decode(payload).ok_or_else(|| {
        let reason = match decode(payload) {
            Ok(_) => {
                "it is a record of a single server's log, not an entry of a replicated shard's: this data \
                 directory belongs to a single server, not to a cluster node"
            }
            Err(_) => "it is no entry of a replicated shard's log",
        };
        RecoveryError::BadRecord { lsn, reason: reason.into() }
    })
}

/// Why a single server's recovery refuses the entry at `lsn`.
fn not_plain(lsn: Lsn) -> RecoveryError {
    RecoveryError::BadRecord {
        lsn,
        reason: "it is an entry of a replicated shard's log, not a record of a single server's: this data directory \
                 belongs to a cluster node"
            .into(),
    }
}

/// The index and term of the entry before `replay_from` (the last a checkpoint covers), if the
/// log holds it.
fn checkpoint_entry<S: LogStorage>(storage: &S, replay_from: Lsn) -> Result<Option<(Lsn, u64)>, RecoveryError> {
    let Some(lsn) = replay_from.checked_sub(1).filter(|lsn| *lsn > 0) else { return Ok(None) };
    let mut found = Ok(None);
    match wal::read_range(storage, lsn, lsn, |_, payload| found = entry_of(lsn, payload).map(|e| Some((lsn, e.term()))))
    {
        Ok(()) | Err(WalError::Missing { .. }) => found,
        Err(error) => Err(error.into()),
    }
}

/// Recovers the shard whose files are at `paths`, creating empty directories on first start.
/// Removes only what no complete checkpoint references (leftovers of an interrupted one).
pub fn recover_shard(paths: &ShardPaths, wal_config: WalConfig) -> Result<RecoveredShard, RecoveryError> {
    recover_shard_in_mode(paths, wal_config, ReplayMode::Plain)
}

/// [`recover_shard`] for a shard whose log records are read as `mode` says.
pub fn recover_shard_in_mode(
    paths: &ShardPaths,
    wal_config: WalConfig,
    mode: ReplayMode,
) -> Result<RecoveredShard, RecoveryError> {
    let started = Instant::now();
    for dir in [&paths.wal, &paths.checkpoint] {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(io_error(format!("creating {}", dir.display())))?;
            if let Some(parent) = dir.parent() {
                super::checkpoint::sync_dir(parent).map_err(io_error(format!("syncing {}", parent.display())))?;
            }
        }
    }
    remove_stale_spares(&paths.wal)?;
    let loaded = load_shard_in_mode(paths, mode, &mut |_| {})?;
    let mut report = loaded.report;
    report.stray_files_removed = remove_unreferenced(&paths.checkpoint, &loaded.manifest)?;
    let storage = FsStorage::open_dir(&paths.wal).map_err(io_error(format!("opening {}", paths.wal.display())))?;
    let writer = WalWriter::open(storage, wal_config, &loaded.wal)?;
    report.elapsed = started.elapsed();
    Ok(RecoveredShard {
        pools: loaded.pools,
        next_pool_id: loaded.next_pool_id,
        writer,
        checkpointer: Checkpointer::new(paths.checkpoint.clone(), loaded.manifest),
        report,
        entries: loaded.entries,
    })
}
