//! Online backups of a shard on the `ssd` backing, and restoring them.
//!
//! A backup of a shard is its last checkpoint (the manifest, the page files it names and the log
//! segments held for it: immutable once written) and its log from the checkpoint's replay point up to a *backup LSN*, copied so
//! that it ends exactly there ([`copy_until`]). The shard makes everything up to that LSN durable
//! before the copy starts and starts no checkpoint until it ends, so neither the page files nor
//! the log segments the copy reads are removed or recycled under it, while writes go on. The
//! result is the shard as it was when record `lsn` was the last one: recovery from it (checkpoint
//! plus replay) gives exactly the acknowledged state at that point.
//!
//! A backup directory is laid out like a data directory (`FERRITE`, saying it is a backup of N
//! shards, `shard-N/checkpoint`, `shard-N/wal`), so `ferrite check` verifies it as it is, and each
//! shard's copy ends with a descriptor, `shard-N/BACKUP`, written last: a shard directory without
//! one is an unfinished copy. [`read_backup`] says whether a directory is a complete backup, and
//! both `ferrite check` and a restore start with it. Like the identity file, a descriptor is
//! `key = value` text with a CRC-32C of the lines above it:
//!
//! ```text
//! format = ferrite-backup
//! version = 1
//! shard = 0
//! shards = 2
//! lsn = 12345
//! crc32c = 1a2b3c4d
//! ```

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::checkpoint::{sync_dir, Manifest, MANIFEST_NAME};
use super::recovery::ShardPaths;
use crate::persistence::identity::{shard_dir, Identity, SHARD_DIR_PREFIX};
use crate::persistence::wal::{copy_until, find_segment, held_name, FsStorage, Lsn, WalError};
use crate::progress::Progress;

/// How much a copy reads and writes at a time, between two counts of its progress.
const COPY_CHUNK_BYTES: usize = 1 << 20;

/// The descriptor's file name in a shard's backup directory.
pub const BACKUP_NAME: &str = "BACKUP";
const BACKUP_TEMP_NAME: &str = "BACKUP.tmp";
const BACKUP_MAGIC: &str = "ferrite-backup";
const BACKUP_VERSION: u32 = 1;

/// Why a backup or a restore failed. A failed backup leaves a shard directory without its
/// descriptor, which a restore refuses.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackupError {
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    #[error(transparent)]
    Wal(#[from] WalError),
    #[error(transparent)]
    Checkpoint(#[from] super::CheckpointError),
    #[error("{file} is not a valid backup descriptor: {reason}")]
    Descriptor { file: String, reason: String },
    #[error("{0}")]
    Refused(String),
}

fn io_error(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BackupError {
    let context = context.into();
    move |source| BackupError::Io { context, source }
}

/// What a shard's backup holds: which shard of how many, and up to which log record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupDescriptor {
    pub shard: u16,
    pub shards: u16,
    /// The last log record the backup holds.
    pub lsn: Lsn,
}

impl BackupDescriptor {
    fn text(&self) -> String {
        let body = format!(
            "format = {BACKUP_MAGIC}\nversion = {BACKUP_VERSION}\nshard = {}\nshards = {}\nlsn = {}\n",
            self.shard, self.shards, self.lsn
        );
        format!("{body}crc32c = {:08x}\n", crate::checksum::crc32c(body.as_bytes()))
    }

    fn parse(text: &str) -> Result<BackupDescriptor, String> {
        let (body, crc_line) = text.trim_end_matches('\n').rsplit_once('\n').ok_or("too short")?;
        let body = format!("{body}\n");
        let stored = crc_line.strip_prefix("crc32c = ").ok_or("the last line is not its checksum")?;
        if u32::from_str_radix(stored, 16).ok() != Some(crate::checksum::crc32c(body.as_bytes())) {
            return Err("its checksum does not match".into());
        }
        let field = |key: &str| {
            body.lines()
                .find_map(|line| line.strip_prefix(key).and_then(|rest| rest.strip_prefix(" = ")))
                .ok_or_else(|| format!("it has no `{key}` line"))
        };
        if field("format")? != BACKUP_MAGIC {
            return Err(format!("it is not a `{BACKUP_MAGIC}` descriptor"));
        }
        let number = |key: &str| field(key)?.parse::<u64>().map_err(|_| format!("`{key}` is not a number"));
        if number("version")? != u64::from(BACKUP_VERSION) {
            return Err(format!("version {} (this build reads {BACKUP_VERSION})", number("version")?));
        }
        let small = |key: &str| u16::try_from(number(key)?).map_err(|_| format!("`{key}` is out of range"));
        let descriptor = BackupDescriptor { shard: small("shard")?, shards: small("shards")?, lsn: number("lsn")? };
        if descriptor.shard >= descriptor.shards {
            return Err(format!("shard {} of {} shards", descriptor.shard, descriptor.shards));
        }
        Ok(descriptor)
    }

    /// The descriptor of the shard backup in `shard_dir`, or `None` if it has none (the copy
    /// did not finish).
    pub fn read(shard_dir: &Path) -> Result<Option<BackupDescriptor>, BackupError> {
        let path = shard_dir.join(BACKUP_NAME);
        match std::fs::read_to_string(&path) {
            Ok(text) => BackupDescriptor::parse(&text)
                .map(Some)
                .map_err(|reason| BackupError::Descriptor { file: path.display().to_string(), reason }),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(io_error(format!("reading {}", path.display()))(error)),
        }
    }

    /// Writes the descriptor into `shard_dir` durably: the last step of a shard's backup.
    fn write(&self, shard_dir: &Path) -> Result<(), BackupError> {
        let temp = shard_dir.join(BACKUP_TEMP_NAME);
        let context = format!("writing {}", temp.display());
        let mut file = create_new(&temp).map_err(io_error(&context))?;
        file.write_all(self.text().as_bytes()).map_err(io_error(&context))?;
        file.sync_all().map_err(io_error(&context))?;
        std::fs::rename(&temp, shard_dir.join(BACKUP_NAME)).map_err(io_error(&context))?;
        sync_dir(shard_dir).map_err(io_error(format!("syncing {}", shard_dir.display())))
    }
}

/// What a shard's backup copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardBackup {
    pub lsn: Lsn,
    pub files: u64,
    pub bytes: u64,
}

/// Creates `path`, which must not exist: a backup or a restore writes only files of its own, and
/// never through a link someone put in their place.
fn create_new(path: &Path) -> std::io::Result<File> {
    File::options().write(true).create_new(true).open(path)
}

/// Copies `file` into `to` (a directory) as a new file, counting its bytes in `progress` as they
/// go, and syncs the copy; returns its size.
fn copy_file(file: &Path, to: &Path, progress: &mut Progress) -> Result<u64, BackupError> {
    let name = file.file_name().expect("a file name");
    let target = to.join(name);
    let context = format!("copying {} to {}", file.display(), target.display());
    let mut source = File::open(file).map_err(io_error(&context))?;
    let mut copy = create_new(&target).map_err(io_error(&context))?;
    let mut buffer = vec![0; COPY_CHUNK_BYTES];
    let mut bytes = 0;
    loop {
        let read = source.read(&mut buffer).map_err(io_error(&context))?;
        if read == 0 {
            break;
        }
        copy.write_all(&buffer[..read]).map_err(io_error(&context))?;
        bytes += read as u64;
        progress.advance(read as u64);
    }
    copy.sync_all().map_err(io_error(format!("syncing {}", target.display())))?;
    Ok(bytes)
}

/// The sizes of the files in `dir` added up (none if it does not exist): what a copy of a
/// shard's checkpoint or log directory reads, for its progress.
pub fn files_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// The backup in `dir`, if it is a complete one: its identity file names its shard count N,
/// and each of `shard-0` to `shard-N-1` holds the descriptor of that shard of N; nothing else
/// is named `shard-*`. Returns the descriptors by shard. A restore refuses a backup this refuses,
/// and `ferrite check` reports why.
pub fn read_backup(dir: &Path) -> Result<Vec<BackupDescriptor>, BackupError> {
    let identity = Identity::read(dir).map_err(BackupError::Refused)?;
    let mut descriptors = Vec::with_capacity(identity.shards);
    for index in 0..identity.shards {
        let shard = shard_dir(dir, index);
        match BackupDescriptor::read(&shard)? {
            Some(descriptor)
                if usize::from(descriptor.shard) == index && usize::from(descriptor.shards) == identity.shards =>
            {
                descriptors.push(descriptor);
            }
            Some(descriptor) => {
                return Err(BackupError::Refused(format!(
                    "{} describes shard {} of {}, not shard {index} of {}",
                    shard.join(BACKUP_NAME).display(),
                    descriptor.shard,
                    descriptor.shards,
                    identity.shards
                )))
            }
            None if !shard.is_dir() => {
                return Err(BackupError::Refused(format!(
                    "{} is missing: the backup holds {} shard(s)",
                    shard.display(),
                    identity.shards
                )))
            }
            None => {
                return Err(BackupError::Refused(format!(
                    "{} has no {BACKUP_NAME} descriptor: its copy did not finish; take the backup again",
                    shard.display()
                )))
            }
        }
    }
    if let Some(extra) = shard_dirs(dir)?.into_iter().find(|(index, _)| *index >= identity.shards) {
        return Err(BackupError::Refused(format!(
            "{} lies beyond the backup's {} shard(s)",
            extra.1.display(),
            identity.shards
        )));
    }
    Ok(descriptors)
}

/// Whether `dir` holds a backup, whole or not: its identity file says so, or one of its shards
/// has a descriptor (backups taken before identity files said so).
pub fn is_backup(dir: &Path) -> bool {
    Identity::read(dir).is_ok_and(|identity| identity.backup)
        || shard_dirs(dir).is_ok_and(|shards| shards.iter().any(|(_, shard)| shard.join(BACKUP_NAME).exists()))
}

/// The `shard-N` entries of `dir` with their numbers (`usize::MAX` for a name that is not one).
fn shard_dirs(dir: &Path) -> Result<Vec<(usize, PathBuf)>, BackupError> {
    let entries = std::fs::read_dir(dir).map_err(io_error(format!("listing {}", dir.display())))?;
    let mut shards = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_error(format!("listing {}", dir.display())))?;
        let name = entry.file_name();
        if let Some(number) = name.to_str().and_then(|name| name.strip_prefix(SHARD_DIR_PREFIX)) {
            shards.push((number.parse().unwrap_or(usize::MAX), entry.path()));
        }
    }
    Ok(shards)
}

fn create_dir(dir: &Path) -> Result<(), BackupError> {
    std::fs::create_dir(dir).map_err(io_error(format!("creating {}", dir.display())))?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent).map_err(io_error(format!("syncing {}", parent.display())))?;
    }
    Ok(())
}

/// Backs up the shard whose files are in `source` into `target` (a shard directory that must not
/// exist yet), up to log record `descriptor.lsn`. The caller guarantees that every record up to
/// it is durable and that no checkpoint runs until this returns.
pub fn back_up_shard(
    source: &ShardPaths,
    target: &Path,
    descriptor: BackupDescriptor,
    progress: &mut Progress,
) -> Result<ShardBackup, BackupError> {
    if target.exists() {
        return Err(BackupError::Refused(format!(
            "{} already exists: a backup goes into a new directory (or one without this shard)",
            target.display()
        )));
    }
    create_dir(target)?;
    let copied = ShardPaths::new(target);
    create_dir(&copied.checkpoint)?;
    create_dir(&copied.wal)?;
    let mut backup = ShardBackup { lsn: descriptor.lsn, files: 0, bytes: 0 };
    let mut held_segments = std::collections::BTreeSet::new();
    if let Some(manifest) = Manifest::read(&source.checkpoint)? {
        held_segments = manifest.held_segments();
        for name in std::iter::once(MANIFEST_NAME.to_owned()).chain(manifest.files()) {
            backup.bytes += copy_file(&source.checkpoint.join(name), &copied.checkpoint, progress)?;
            backup.files += 1;
        }
    }
    let source_log = FsStorage::open_dir(&source.wal).map_err(io_error(format!("opening {}", source.wal.display())))?;
    let log = copy_until(
        &source_log,
        &FsStorage::open_dir(&copied.wal).map_err(io_error(format!("opening {}", copied.wal.display())))?,
        descriptor.lsn,
    )?;
    backup.files += log.segments;
    backup.bytes += log.bytes;
    progress.advance(log.bytes);
    // Segments held for the checkpoint (large values kept in the log): those still in the log
    // were copied with it.
    for seq in held_segments {
        if let Some(name) = find_segment(&source_log, seq)?.filter(|name| *name == held_name(seq)) {
            backup.bytes += copy_file(&source.wal.join(name), &copied.wal, progress)?;
            backup.files += 1;
        }
    }
    for dir in [&copied.checkpoint, &copied.wal] {
        sync_dir(dir).map_err(io_error(format!("syncing {}", dir.display())))?;
    }
    descriptor.write(target)?;
    Ok(backup)
}

/// Copies the shard backup in `backup` (which must have its descriptor) into a new shard's
/// directories `target`, counting the bytes in `progress`; returns the files and bytes copied,
/// counted as [`back_up_shard`] counts them.
pub fn restore_shard(backup: &Path, target: &ShardPaths, progress: &mut Progress) -> Result<(u64, u64), BackupError> {
    if BackupDescriptor::read(backup)?.is_none() {
        return Err(BackupError::Refused(format!(
            "{} has no {BACKUP_NAME} descriptor: its backup did not finish",
            backup.display()
        )));
    }
    let copied = ShardPaths::new(backup);
    let (mut files, mut bytes) = (0, 0);
    for (from, to) in [(&copied.checkpoint, &target.checkpoint), (&copied.wal, &target.wal)] {
        create_dir(to)?;
        let entries = std::fs::read_dir(from).map_err(io_error(format!("listing {}", from.display())))?;
        for entry in entries {
            let path = entry.map_err(io_error(format!("listing {}", from.display())))?.path();
            bytes += copy_file(&path, to, progress)?;
            files += 1;
        }
        sync_dir(to).map_err(io_error(format!("syncing {}", to.display())))?;
    }
    Ok((files, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_read_back_and_refuse_damage() {
        let descriptor = BackupDescriptor { shard: 1, shards: 4, lsn: 987_654 };
        assert_eq!(BackupDescriptor::parse(&descriptor.text()), Ok(descriptor));
        let damaged = descriptor.text().replace("lsn = 987654", "lsn = 987655");
        assert!(BackupDescriptor::parse(&damaged).expect_err("checksum").contains("checksum"));
        let body = "format = ferrite-backup\nversion = 1\nshard = 4\nshards = 4\nlsn = 1\n";
        let bad = format!("{body}crc32c = {:08x}\n", crate::checksum::crc32c(body.as_bytes()));
        assert!(BackupDescriptor::parse(&bad).expect_err("shard out of range").contains("shard 4 of 4"));
    }
}
