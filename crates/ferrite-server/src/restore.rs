//! `ferrite-server --restore DIR --data-dir NEW_DIR`: a backup (`ferrite backup DIR`) made into a
//! data directory again.
//!
//! 1. The backup must be whole ([`read_backup`]: its identity and every shard's descriptor), and
//!    `NEW_DIR` new or empty; otherwise nothing is created.
//! 2. Every shard's files are copied into `NEW_DIR`, locked as a server's data directory.
//! 3. Every copied shard is verified as `ferrite check` verifies a backup's ([`verify_shard`]:
//!    checkpoint and log loaded, the log ending at the descriptor's record, every pool's table
//!    sound), so the two never disagree, and a damaged copy is found now, not at the next start.
//!
//! A restore that fails after it began creating removes what it created (and only that:
//! `NEW_DIR` was new or empty), so the next attempt finds `NEW_DIR` as it was; if that removal
//! fails too, the error says what to remove.

use std::path::{Path, PathBuf};

use ferrite_store::persistence::identity::shard_dir;
use ferrite_store::persistence::ssd::backup::files_bytes;
use ferrite_store::persistence::ssd::{read_backup, restore_shard, verify_shard, ShardPaths};
use ferrite_store::progress::Progress;

use crate::data_dir::DataDir;

/// What `ferrite-server --restore` did for one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredShard {
    pub shard: usize,
    /// The last log record of the backup: the shard is restored as it was then.
    pub lsn: u64,
    /// The files copied and their sizes added up, counted as `ferrite backup` counts them.
    pub files: u64,
    pub bytes: u64,
    pub pools: usize,
    pub records_replayed: u64,
}

/// Restores the backup in `backup` into `data_dir`, a new or empty directory, for a server of the
/// backup's shard count (see the module's steps). With `progress` (`--progress`), the copy and
/// the verification show how far they are on standard error even off a terminal.
pub fn restore(backup: &Path, data_dir: &Path, progress: bool) -> Result<Vec<RestoredShard>, String> {
    let descriptors = read_backup(backup)
        .map_err(|error| format!("{} is not a complete backup, so nothing was restored: {error}", backup.display()))?;
    let created = Created::before(data_dir)?;
    let target = match DataDir::open(data_dir, descriptors.len()) {
        Ok(target) => target,
        Err(error) => {
            // Opening may have created the directory before it failed (to lock it, say).
            let mut message = error.to_string();
            if let Some(outermost) = created.outermost.as_deref().filter(|dir| dir.exists()) {
                if let Err(error) = std::fs::remove_dir_all(outermost) {
                    message.push_str(&format!("; remove {} (the restore created it): {error}", outermost.display()));
                }
            }
            return Err(message);
        }
    };
    let outcome = copy_and_verify(backup, &target, &descriptors, progress);
    outcome.map_err(|reason| created.undo(target, descriptors.len(), reason))
}

fn copy_and_verify(
    backup: &Path,
    target: &DataDir,
    descriptors: &[ferrite_store::persistence::ssd::BackupDescriptor],
    progress: bool,
) -> Result<Vec<RestoredShard>, String> {
    let shards = descriptors.len();
    let total: u64 = (0..shards)
        .map(|index| ShardPaths::new(&shard_dir(backup, index)))
        .map(|paths| files_bytes(&paths.checkpoint) + files_bytes(&paths.wal))
        .sum();
    let mut copying = Progress::on_stderr(format!("restore: copying {}", backup.display()), total, progress);
    let mut copied = Vec::with_capacity(shards);
    for index in 0..shards {
        let dir = target.create_shard_dir(index).map_err(|error| format!("creating shard {index}: {error}"))?;
        let paths = ShardPaths::new(&dir);
        let counted = restore_shard(&shard_dir(backup, index), &paths, &mut copying)
            .map_err(|error| format!("restoring shard {index}: {error}"))?;
        copied.push((paths, counted));
    }
    copying.finish();
    let mut verifying = Progress::on_stderr(format!("restore: verifying {}", target.path().display()), total, progress);
    let mut restored = Vec::with_capacity(shards);
    for (index, (descriptor, (paths, (files, bytes)))) in descriptors.iter().zip(copied).enumerate() {
        let checked = verify_shard(&paths, Some(descriptor), &mut verifying)
            .map_err(|error| format!("shard {index} of the backup does not verify: {error}"))?;
        if let Some(damage) = checked.damage() {
            return Err(format!("shard {index} of the backup does not verify: {damage}"));
        }
        restored.push(RestoredShard {
            shard: index,
            lsn: descriptor.lsn,
            files,
            bytes,
            pools: checked.pools.len(),
            records_replayed: checked.report.records_replayed,
        });
    }
    verifying.finish();
    Ok(restored)
}

/// What a restore is about to create, so that a failed one removes exactly that.
#[derive(Debug)]
struct Created {
    data_dir: PathBuf,
    /// The outermost directory the restore creates (`data_dir` or one of its parents); `None`
    /// when `data_dir` exists already (empty).
    outermost: Option<PathBuf>,
}

impl Created {
    /// Refuses a `data_dir` that exists and is not an empty directory.
    fn before(data_dir: &Path) -> Result<Created, String> {
        if data_dir.exists() {
            let mut entries = std::fs::read_dir(data_dir)
                .map_err(|error| format!("{} is not a directory we can use: {error}", data_dir.display()))?;
            if entries.next().is_some() {
                return Err(format!("{} is not empty: restore into a new or empty data directory", data_dir.display()));
            }
            return Ok(Created { data_dir: data_dir.to_path_buf(), outermost: None });
        }
        let outermost = data_dir.ancestors().take_while(|dir| !dir.as_os_str().is_empty() && !dir.exists()).last();
        Ok(Created { data_dir: data_dir.to_path_buf(), outermost: outermost.map(Path::to_path_buf) })
    }

    /// Removes what the restore created in a data directory of `shards` shards (its lock held
    /// until then), and returns `reason` with what became of it.
    fn undo(self, target: DataDir, shards: usize, reason: String) -> String {
        let removed = match &self.outermost {
            Some(outermost) => {
                drop(target);
                std::fs::remove_dir_all(outermost).map(|()| format!("{} was removed again", outermost.display()))
            }
            None => target.remove_contents(shards).map(|()| format!("{} is empty again", self.data_dir.display())),
        };
        match removed {
            Ok(state) => format!("{reason}; nothing was restored: {state}"),
            Err(error) => format!(
                "{reason}; and what the restore had created could not be removed ({error}): remove {} yourself \
                 before restoring again",
                self.outermost.as_deref().unwrap_or(&self.data_dir).display()
            ),
        }
    }
}
