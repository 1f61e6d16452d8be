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
//! A large copy logs its progress at each tenth (`ferrite_store::progress`).
//!
//! `ferrite-server --restore DIR --data-dir NEW` turns the backup back into a data directory
//! (`restore.rs`).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use ferrite_proto::{BackupReport, ErrorCode, Response};
use ferrite_store::persistence::identity::shard_dir;
use ferrite_store::persistence::ssd::backup::files_bytes;
use ferrite_store::persistence::ssd::{back_up_shard, BackupDescriptor, ShardBackup, ShardPaths};
use ferrite_store::progress::Progress;
use tokio::sync::{oneshot, watch};
use tracing::{info, warn};

use crate::backup_root::BackupDir;
use crate::completion::Completion;
use crate::data_dir::stamp_backup_dir;
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
            if !durability.checkpoints_held() {
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
    let total = files_bytes(&paths.checkpoint) + files_bytes(&paths.wal);
    let what = format!("shard {}: backup into {}", descriptor.shard, dir.display());
    let mut progress = Progress::reported(what, total, |line| info!("{line}"));
    let copied = back_up_shard(paths, &shard_dir(&base, usize::from(descriptor.shard)), descriptor, &mut progress)
        .map_err(|error| shown(error.to_string()))?;
    progress.finish();
    Ok(copied)
}
