//! Online backups (`ferrite backup DIR`): each shard copies its last checkpoint and its log up to
//! the last record it had applied into `DIR/shard-N`, while it keeps serving.
//!
//! The copy runs on a thread of its own; the shard's part is to choose the backup point and to
//! keep the files the copy reads in place:
//! 1. wait until no checkpoint is running, then start none until the copy ends (a checkpoint
//!    would remove the page files of the one before it and recycle log segments);
//! 2. make the log durable up to its last appended record, which becomes the backup point: every
//!    write the shard acknowledged before the backup began, `async` ones included, is in it;
//! 3. copy (`ferrite_store::persistence::ssd::back_up_shard`), ending with the shard's descriptor.
//!
//! `ferrite-server --restore DIR --data-dir NEW` turns the backup back into a data directory.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use ferrite_proto::{BackupReport, ErrorCode, Response};
use ferrite_store::persistence::ssd::{
    back_up_shard, recover_shard, restore_shard, BackupDescriptor, ShardBackup, ShardPaths,
};
use ferrite_store::persistence::wal::WalConfig;
use tokio::sync::{oneshot, watch};
use tracing::{info, warn};

use crate::backup_root::BackupDir;
use crate::completion::Completion;
use crate::config::Config;
use crate::data_dir::{stamp_backup_dir, stamped_shard_count, DataDir};
use crate::handler::{Accepted, Failure, ShardState};
use crate::session::Session;

/// How often a backup waiting for a running checkpoint to finish looks again.
const CHECKPOINT_POLL: Duration = Duration::from_millis(10);

/// A backup asked for and not yet done.
#[derive(Debug)]
pub(crate) struct PendingBackup {
    dir: PathBuf,
    request_id: u64,
    answer: Arc<Completion>,
}

impl ShardState {
    /// Takes a `backup` request: queued for the shard's backup task, answered when it is done.
    pub(crate) fn queue_backup(&mut self, dir: &str, request_id: u64, session: &Session) -> Result<Accepted, Failure> {
        let Some(durability) = &self.durability else {
            return Err(Failure::new(
                ErrorCode::InvalidArgument,
                format!(
                    "shard {}: only shards on the ssd backing are backed up online (this one keeps no log); stop \
                     the server and copy its data directory instead",
                    self.index
                ),
            ));
        };
        let dir = PathBuf::from(dir);
        if let Some(root) = &self.backup_root {
            // A `..` could climb out of the root after the prefix matched.
            let escapes = dir.components().any(|part| part == std::path::Component::ParentDir);
            if escapes || !dir.starts_with(root) {
                return Err(Failure::new(
                    ErrorCode::InvalidArgument,
                    format!("backups go beneath {} ([backup] root), not to {}", root.display(), dir.display()),
                ));
            }
        }
        if durability.backing_up || !self.backups.is_empty() {
            return Err(Failure::new(
                ErrorCode::InvalidArgument,
                format!("shard {}: a backup is already running; wait for it to finish", self.index),
            ));
        }
        let answer = Completion::telling(session.answers.clone(), crate::stats::Op::Other);
        self.backups.push(PendingBackup { dir, request_id, answer: Arc::clone(&answer) });
        self.backups_queued.notify_one();
        Ok(Accepted::Later(answer))
    }
}

/// The shard's backup task: takes queued backups one at a time until the shard stops.
pub(crate) async fn run(shard: Rc<RefCell<ShardState>>, mut stop: watch::Receiver<bool>) {
    let queued = Arc::clone(&shard.borrow().backups_queued);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            () = queued.notified() => {}
        }
        while let Some(backup) = {
            let mut state = shard.borrow_mut();
            (!state.backups.is_empty()).then(|| state.backups.remove(0))
        } {
            let outcome = tokio::select! {
                outcome = back_up(&shard, &backup.dir) => outcome,
                _ = stop.wait_for(|stop| *stop) => Err("the server is stopping; the backup is unfinished".to_owned()),
            };
            if let Some(durability) = shard.borrow_mut().durability.as_mut() {
                durability.backing_up = false;
            }
            let index = shard.borrow().index;
            let mut frame = BytesMut::new();
            match outcome {
                Ok(done) => {
                    info!(shard = index, dir = %backup.dir.display(), lsn = done.lsn, files = done.files, bytes = done.bytes, "backup done");
                    let report = BackupReport { lsn: done.lsn, files: done.files, bytes: done.bytes };
                    Response::BackedUp(report).encode(backup.request_id, &mut frame);
                }
                Err(reason) => {
                    warn!(shard = index, dir = %backup.dir.display(), %reason, "backup failed");
                    let message = format!("shard {index}: backup into {} failed: {reason}", backup.dir.display());
                    Response::Error { code: ErrorCode::StorageFailed, message: &message }
                        .encode(backup.request_id, &mut frame);
                }
            }
            backup.answer.complete(0, |out| out.extend_from_slice(&frame));
        }
    }
}

/// Chooses the backup point, holds checkpoints off and copies on a thread of its own.
async fn back_up(shard: &Rc<RefCell<ShardState>>, dir: &Path) -> Result<ShardBackup, String> {
    loop {
        {
            let mut state = shard.borrow_mut();
            let durability = state.durability.as_mut().ok_or("the shard keeps no log")?;
            if !durability.checkpointer.in_progress() {
                durability.backing_up = true;
                break;
            }
        }
        tokio::time::sleep(CHECKPOINT_POLL).await;
    }
    let (lsn, mut gate, paths, index, shards, root) = {
        let state = shard.borrow();
        let durability = state.durability.as_ref().ok_or("the shard keeps no log")?;
        (
            durability.log.last_lsn(),
            durability.gate.clone(),
            durability.paths.clone(),
            state.index,
            state.shard_addresses.len(),
            state.backup_root.clone(),
        )
    };
    gate.wait_for(lsn).await.map_err(|_| "the write-ahead log failed before the backup point was durable")?;
    let descriptor =
        BackupDescriptor { shard: index, shards: u16::try_from(shards).map_err(|_| "too many shards")?, lsn };
    let dir = dir.to_path_buf();
    let (done, finished) = oneshot::channel();
    std::thread::Builder::new()
        .name(format!("backup-{index}"))
        .spawn(move || {
            let copied = copy_shard(root.as_deref(), &dir, shards, &paths, descriptor);
            // The shard may have stopped waiting (a stop); then nobody needs the outcome.
            let _ = done.send(copied);
        })
        .map_err(|error| format!("cannot start the copying thread: {error}"))?;
    finished.await.map_err(|_| "the copying thread ended without an outcome".to_owned())?
}

/// The copying thread's work: stamps the backup directory and copies the shard into it. Beneath
/// a root, the directory is opened without following links and written through the open
/// directory ([`BackupDir`]).
fn copy_shard(
    root: Option<&Path>,
    dir: &Path,
    shards: usize,
    paths: &ShardPaths,
    descriptor: BackupDescriptor,
) -> Result<ShardBackup, String> {
    let opened = root.map(|root| BackupDir::open_beneath(root, dir)).transpose()?;
    let base = opened.as_ref().map_or_else(|| dir.to_path_buf(), BackupDir::path);
    let shown = |message: String| opened.as_ref().map_or_else(|| message.clone(), |opened| opened.shown(&message));
    stamp_backup_dir(&base, shards, usize::from(descriptor.shard))
        .map_err(|error| shown(format!("preparing {}: {error}", base.display())))?;
    back_up_shard(paths, &base.join(format!("shard-{}", descriptor.shard)), descriptor)
        .map_err(|error| shown(error.to_string()))
}

/// What `ferrite-server --restore` did for one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoredShard {
    pub shard: usize,
    /// The last log record of the backup: the shard is restored as it was then.
    pub lsn: u64,
    pub files: u64,
    pub bytes: u64,
    pub pools: usize,
    pub records_replayed: u64,
}

/// Restores the backup in `backup` into `data_dir`, a new or empty directory, for a server of the
/// backup's shard count; then recovers every shard from it, as a server starting on it would, to
/// prove the copy whole. The directory is locked while this runs. `config` gives the log's segment
/// size for that recovery.
pub fn restore(backup: &Path, data_dir: &Path, config: &Config) -> Result<Vec<RestoredShard>, String> {
    let shards =
        stamped_shard_count(backup).map_err(|error| format!("{} is not a backup: {error}", backup.display()))?;
    let mut descriptors = Vec::with_capacity(shards);
    for index in 0..shards {
        let shard_dir = backup.join(format!("shard-{index}"));
        match BackupDescriptor::read(&shard_dir).map_err(|error| error.to_string())? {
            Some(descriptor) if usize::from(descriptor.shard) == index && usize::from(descriptor.shards) == shards => {
                descriptors.push(descriptor);
            }
            Some(descriptor) => {
                return Err(format!(
                    "{} describes shard {} of {}, not shard {index} of {shards}",
                    shard_dir.display(),
                    descriptor.shard,
                    descriptor.shards
                ))
            }
            None => {
                return Err(format!(
                    "the backup is incomplete: {} has no finished copy (no BACKUP descriptor); take the backup again",
                    shard_dir.display()
                ))
            }
        }
    }
    let occupied = std::fs::read_dir(data_dir).map(|mut entries| entries.next().is_some()).unwrap_or(false);
    if occupied {
        return Err(format!("{} is not empty: restore into a new or empty data directory", data_dir.display()));
    }
    let target = DataDir::open(data_dir, shards).map_err(|error| error.to_string())?;
    let wal_config = WalConfig { segment_bytes: config.durability.wal_segment_bytes };
    let mut restored = Vec::with_capacity(shards);
    for (index, descriptor) in descriptors.iter().enumerate() {
        let dir = target.create_shard_dir(index).map_err(|error| format!("creating shard {index}: {error}"))?;
        let paths = ShardPaths::new(&dir);
        let (files, bytes) = restore_shard(&backup.join(format!("shard-{index}")), &paths)
            .map_err(|error| format!("restoring shard {index}: {error}"))?;
        let recovered = recover_shard(&paths, wal_config)
            .map_err(|error| format!("shard {index} does not recover from the restored files: {error}"))?;
        restored.push(RestoredShard {
            shard: index,
            lsn: descriptor.lsn,
            files,
            bytes,
            pools: recovered.pools.len(),
            records_replayed: recovered.report.records_replayed,
        });
    }
    Ok(restored)
}
