//! The `ssd` backing: pool memory in anonymous shared memory, made durable by the shard's
//! write-ahead log (group-committed by a sync thread) and by incremental checkpoints that let the
//! log be recycled. See `docs/durability.md` for the promises and the on-disk formats.
//!
//! - [`region`]: a pool's memory (memfd).
//! - [`record`]: what log records say (pool created, pool deleted, transaction).
//! - [`logged`]: the [`PoolMemory`](crate::persistence::PoolMemory) that logs each commit.
//! - [`log`]: the log shared by a shard and its sync thread.
//! - [`pages`]: which pages changed, at which LSN.
//! - [`checkpoint`]: page files, the manifest, the checkpoint state machine.
//! - [`recovery`]: checkpoint + log replay after a restart.
//! - [`entry`]: the records of a replicated shard, each an entry of its Raft group's log.
//! - [`backup`]: online backups and restores; [`verify`]: checking a shard's files offline.

pub mod backup;
pub mod checkpoint;
pub mod entry;
pub mod log;
pub mod logged;
pub mod pages;
pub mod record;
pub mod recovery;
pub mod region;
pub mod verify;

#[cfg(test)]
mod framing_tests;
#[cfg(test)]
mod growth_tests;
#[cfg(test)]
mod in_log_tests;
#[cfg(test)]
mod replicated_crash_tests;
#[cfg(test)]
mod replicated_tests;
#[cfg(test)]
mod tests;

pub use backup::{
    back_up_shard, is_backup, read_backup, restore_shard, BackupDescriptor, BackupError, ShardBackup, BACKUP_NAME,
};
pub use checkpoint::{CheckpointError, CheckpointPool, Checkpointer, Manifest, Step};
pub use log::{Due, FramedEntry, LogCounters, SharedLog, SyncThread};
pub use logged::{LoggedMemory, IN_LOG_RANGE_BYTES_MIN, UNLOGGED};
pub use pages::PageTracker;
pub use record::PoolDescriptor;
pub use recovery::{
    load_shard, load_shard_in_mode, load_shard_observing, recover_shard, recover_shard_in_mode, EntrySummary,
    LoadedShard, PoolChange, RecoveredPool, RecoveredShard, RecoveryError, RecoveryReport, ReplayMode, ReplicaPools,
    ShardPaths, RAFT_DIR,
};
pub use region::SharedRegion;
pub use verify::{verify_shard, PoolCheck, ShardCheck};
