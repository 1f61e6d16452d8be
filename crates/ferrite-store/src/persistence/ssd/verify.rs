//! Verifying a shard's files offline, changing nothing: its checkpoint and log loaded as recovery
//! would load them, every pool's table checked, and for a backup's shard, its log ending exactly
//! at the record its descriptor names. `ferrite check` runs this on every shard of a data
//! directory or a backup, and `ferrite-server --restore` on every shard it restores, so that the
//! two never disagree on a backup.

use super::backup::BackupDescriptor;
use super::recovery::{load_shard_in_mode, RecoveryReport, ReplayMode, ShardPaths};
use crate::hstore::{CheckReport, HStore};
use crate::persistence::wal::Lsn;
use crate::progress::Progress;

/// What checking one pool's table found.
#[derive(Debug)]
pub struct PoolCheck {
    pub name: String,
    pub id: u64,
    /// Its counts, or every problem found.
    pub outcome: Result<CheckReport, Vec<String>>,
}

/// What verifying a shard found, when its files loaded.
#[derive(Debug)]
pub struct ShardCheck {
    pub report: RecoveryReport,
    pub pools: Vec<PoolCheck>,
}

impl ShardCheck {
    /// The first damaged pool, as a sentence; `None` if every pool is sound.
    pub fn damage(&self) -> Option<String> {
        self.pools.iter().find_map(|pool| match &pool.outcome {
            Ok(_) => None,
            Err(problems) => Some(format!(
                "pool '{}' (id {}) is damaged: {}",
                pool.name,
                pool.id,
                problems.first().map_or("", String::as_str)
            )),
        })
    }
}

/// Verifies the shard whose files are at `paths`: loads them (the bytes read are counted in
/// `progress`) and checks every pool's table; with `backup`, the descriptor of a backup's shard,
/// also that the log ends exactly at its LSN (a log cut short loses records the backup was taken
/// with, and recovery alone would take it for a torn tail). An error says why the shard's files
/// do not load or do not end where they should.
pub fn verify_shard(
    paths: &ShardPaths,
    backup: Option<&BackupDescriptor>,
    progress: &mut Progress,
) -> Result<ShardCheck, String> {
    // A replica's log may hold entries its group never committed: they are records all the
    // same, and checked as such.
    let mode = if paths.is_replicated() { ReplayMode::Replicated { until: Lsn::MAX } } else { ReplayMode::Plain };
    let loaded =
        load_shard_in_mode(paths, mode, &mut |bytes| progress.advance(bytes)).map_err(|error| error.to_string())?;
    let report = loaded.report;
    if let Some(descriptor) = backup {
        let last_lsn = (report.replay_from.max(1) + report.records_replayed).saturating_sub(1);
        if last_lsn != descriptor.lsn {
            return Err(format!(
                "the backup's descriptor names LSN {} but its log ends at LSN {last_lsn}",
                descriptor.lsn
            ));
        }
    }
    let pools = loaded
        .pools
        .into_iter()
        .map(|pool| {
            let (name, id) = (pool.descriptor.name.clone(), pool.descriptor.id);
            let outcome =
                HStore::open(pool.region).map_err(|error| vec![error.to_string()]).and_then(|store| store.check());
            PoolCheck { name, id, outcome }
        })
        .collect();
    Ok(ShardCheck { report, pools })
}
