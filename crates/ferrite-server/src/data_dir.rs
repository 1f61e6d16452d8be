//! The data directory: locked by one server at a time, and stamped with the shard count it was
//! created for.
//!
//! Two servers on one directory would interleave their logs and destroy both, so the directory is
//! locked with `flock` on `LOCK` for as long as the server runs (the kernel drops the lock when the
//! process dies, even by SIGKILL, so a crash never leaves a stale lock). Pools are placed on
//! shards by a hash of their name, so a directory written by N shards cannot be served by M: the
//! identity file `FERRITE` records N and a different count is refused.
//!
//! # The identity file
//!
//! `FERRITE` (its format: `ferrite_store::persistence::identity`) is written once, when the
//! directory is created (to `FERRITE.tmp`, fsynced, renamed, directory fsynced), and only read
//! afterwards. A backup's says it is a backup, and a server refuses to start on one (it would
//! change the backup): a backup is restored into a data directory first. Shard directories are created
//! after it and each creation fsyncs the directory again, so a directory that holds `shard-N` but
//! no `FERRITE` did not get that way by a crash: it is refused rather than stamped afresh.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use ferrite_store::persistence::identity::{shard_dir, Identity, IDENTITY_NAME, SHARD_DIR_PREFIX};

const LOCK_NAME: &str = "LOCK";
const IDENTITY_TEMP_NAME: &str = "FERRITE.tmp";

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataDirError {
    #[error("data directory {path}: {context}: {source}")]
    Io { path: String, context: &'static str, source: std::io::Error },
    #[error("data directory {path} is in use by another ferrite-server{holder}; stop it or choose another --data-dir")]
    Locked { path: String, holder: String },
    #[error(
        "data directory {path} was created for {found} shard(s) but the configuration has {configured}: pools are \
         placed on shards by name, so the shard count of a data directory cannot change"
    )]
    ShardCount { path: String, found: usize, configured: usize },
    #[error("data directory {path}: {file} is not a valid identity file: {reason}")]
    Identity { path: String, file: String, reason: String },
}

/// A locked data directory. The lock is released when this is dropped (or the process ends).
#[derive(Debug)]
pub struct DataDir {
    path: PathBuf,
    _lock: File,
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

impl DataDir {
    /// Opens (creating if missing) and locks the data directory of a server with `shard_count`
    /// shards.
    pub fn open(path: &Path, shard_count: usize) -> Result<DataDir, DataDirError> {
        let shown = path.display().to_string();
        let io = |context: &'static str| {
            let path = shown.clone();
            move |source| DataDirError::Io { path, context, source }
        };
        if !path.exists() {
            std::fs::create_dir_all(path).map_err(io("cannot create it"))?;
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            sync_dir(parent).map_err(io("cannot sync its parent directory"))?;
        }
        let lock_path = path.join(LOCK_NAME);
        let mut lock = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io("cannot open its LOCK file"))?;
        match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                // The pid is a courtesy for the operator; the lock itself is the truth, so an
                // unreadable or half-written LOCK file only loses the pid from the message.
                let holder = std::fs::read_to_string(&lock_path).unwrap_or_default();
                let holder = holder.trim().parse::<u32>().map(|pid| format!(" (pid {pid})")).unwrap_or_default();
                return Err(DataDirError::Locked { path: shown, holder });
            }
            // Anything else (ENOLCK on some network file systems) is not another server: say what
            // it is rather than blame a holder that does not exist.
            Err(errno) => return Err(io("cannot lock its LOCK file")(errno.into())),
        }
        lock.set_len(0).map_err(io("cannot write its LOCK file"))?;
        writeln!(lock, "{}", std::process::id()).map_err(io("cannot write its LOCK file"))?;
        let data_dir = DataDir { path: path.to_path_buf(), _lock: lock };
        data_dir.check_identity(shard_count)?;
        Ok(data_dir)
    }

    fn identity_error(&self, reason: impl Into<String>) -> DataDirError {
        DataDirError::Identity {
            path: self.path.display().to_string(),
            file: self.path.join(IDENTITY_NAME).display().to_string(),
            reason: reason.into(),
        }
    }

    /// Reads the identity file, or writes it if the directory is new.
    fn check_identity(&self, shard_count: usize) -> Result<(), DataDirError> {
        let file = self.path.join(IDENTITY_NAME);
        let io = |context: &'static str| {
            let path = self.path.display().to_string();
            move |source| DataDirError::Io { path, context, source }
        };
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                if let Some(shard) = self.any_shard_dir().map_err(io("cannot list it"))? {
                    return Err(self.identity_error(format!(
                        "it is missing, but the directory already holds {shard}, so the shard count it was created \
                         with is unknown"
                    )));
                }
                return self.write_identity(shard_count);
            }
            Err(error) => return Err(io("cannot read its identity file")(error)),
        };
        let identity = Identity::parse(&text).map_err(|reason| self.identity_error(reason))?;
        if identity.backup {
            return Err(self.identity_error(
                "it is a backup's: restore it into a data directory (ferrite-server --restore DIR --data-dir NEW_DIR)",
            ));
        }
        let found = identity.shards;
        if found != shard_count {
            return Err(DataDirError::ShardCount {
                path: self.path.display().to_string(),
                found,
                configured: shard_count,
            });
        }
        Ok(())
    }

    fn write_identity(&self, shard_count: usize) -> Result<(), DataDirError> {
        let io = |context: &'static str| {
            let path = self.path.display().to_string();
            move |source| DataDirError::Io { path, context, source }
        };
        let temp = self.path.join(IDENTITY_TEMP_NAME);
        let mut file = File::create(&temp).map_err(io("cannot create its identity file"))?;
        let identity = Identity { shards: shard_count, backup: false };
        file.write_all(identity.text().as_bytes()).map_err(io("cannot write its identity file"))?;
        file.sync_all().map_err(io("cannot sync its identity file"))?;
        std::fs::rename(&temp, self.path.join(IDENTITY_NAME)).map_err(io("cannot rename its identity file"))?;
        sync_dir(&self.path).map_err(io("cannot sync it"))
    }

    /// The name of some `shard-N` entry in the directory, if there is one.
    fn any_shard_dir(&self) -> std::io::Result<Option<String>> {
        for entry in std::fs::read_dir(&self.path)? {
            let name = entry?.file_name();
            if name.to_str().is_some_and(|name| name.starts_with(SHARD_DIR_PREFIX)) {
                return Ok(Some(name.to_string_lossy().into_owned()));
            }
        }
        Ok(None)
    }

    /// Where shard `index` keeps its files; [`DataDir::create_shard_dir`] makes sure it exists.
    pub fn shard_dir(&self, index: usize) -> PathBuf {
        shard_dir(&self.path, index)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes what a server of `shard_count` shards keeps in the directory (its shard
    /// directories, the identity file and the lock file), then releases the lock: for a restore
    /// that failed in a directory that was empty before it.
    pub(crate) fn remove_contents(self, shard_count: usize) -> std::io::Result<()> {
        for index in 0..shard_count {
            match std::fs::remove_dir_all(self.shard_dir(index)) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
                _ => {}
            }
        }
        for name in [IDENTITY_NAME, LOCK_NAME] {
            match std::fs::remove_file(self.path.join(name)) {
                Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
                _ => {}
            }
        }
        sync_dir(&self.path)
    }

    /// The directory of shard `index`, created (durably) if missing.
    pub fn create_shard_dir(&self, index: usize) -> std::io::Result<PathBuf> {
        let dir = self.shard_dir(index);
        if !dir.exists() {
            std::fs::create_dir(&dir)?;
            sync_dir(&self.path)?;
        }
        Ok(dir)
    }
}

/// Stamps `dir` (a backup directory) with the identity file of a backup of `shard_count`
/// shards, so that a backup is laid out as a data directory (`ferrite check` reads it as one) and
/// known for a backup. The shards of a server back up at once, each calling this: each writes its
/// own temporary file and renames it into place, and every copy is the same text.
pub(crate) fn stamp_backup_dir(dir: &Path, shard_count: usize, shard: usize) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let file = dir.join(IDENTITY_NAME);
    let identity = Identity { shards: shard_count, backup: true };
    if let Ok(text) = std::fs::read_to_string(&file) {
        return match Identity::parse(&text) {
            Ok(found) if found == identity => Ok(()),
            _ => Err(std::io::Error::other(format!(
                "{} holds something else than a backup of {shard_count} shards ({} says otherwise)",
                dir.display(),
                file.display()
            ))),
        };
    }
    // Created anew, never opened: a link planted at this name in a directory the client chose
    // would otherwise have the server truncate and write whatever file it points to.
    let temp = dir.join(format!("{IDENTITY_TEMP_NAME}.{shard}"));
    let mut out = File::options()
        .write(true)
        .create_new(true)
        .open(&temp)
        .map_err(|error| std::io::Error::new(error.kind(), format!("cannot create {}: {error}", temp.display())))?;
    out.write_all(identity.text().as_bytes())?;
    out.sync_all()?;
    std::fs::rename(&temp, &file)?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ferrite-datadir-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_second_server_is_refused_while_the_first_holds_the_directory() {
        let path = temp("lock");
        let first = DataDir::open(&path, 2).expect("first open creates and locks");
        let error = DataDir::open(&path, 2).expect_err("locked").to_string();
        assert!(error.contains("in use by another ferrite-server"), "{error}");
        assert!(error.contains(&format!("pid {}", std::process::id())), "{error}");
        drop(first);
        let again = DataDir::open(&path, 2).expect("free once the first is gone");
        assert_eq!(again.create_shard_dir(1).expect("shard dir"), path.join("shard-1"));
        drop(again);
        std::fs::remove_dir_all(&path).expect("clean up");
    }

    #[test]
    fn the_shard_count_cannot_change() {
        let path = temp("count");
        drop(DataDir::open(&path, 3).expect("create"));
        let error = DataDir::open(&path, 2).expect_err("other count").to_string();
        assert!(error.contains("created for 3 shard(s)") && error.contains("has 2"), "{error}");
        drop(DataDir::open(&path, 3).expect("same count"));
        std::fs::remove_dir_all(&path).expect("clean up");
    }

    /// The identity is written once: reopening leaves the file byte for byte as it was.
    #[test]
    fn the_identity_survives_reopening() {
        let path = temp("reopen");
        drop(DataDir::open(&path, 5).expect("create"));
        let written = std::fs::read(path.join(IDENTITY_NAME)).expect("identity written");
        assert_eq!(written, Identity { shards: 5, backup: false }.text().as_bytes());
        assert!(!path.join(IDENTITY_TEMP_NAME).exists(), "the temporary file was renamed");
        for _ in 0..2 {
            let data_dir = DataDir::open(&path, 5).expect("same count");
            assert_eq!(data_dir.shard_dir(4), path.join("shard-4"));
            drop(data_dir);
            assert_eq!(std::fs::read(path.join(IDENTITY_NAME)).expect("still there"), written);
        }
        std::fs::remove_dir_all(&path).expect("clean up");
    }

    /// An identity file that is not valid (every way is in `ferrite_store`'s identity tests) is
    /// refused with its reason, naming the file.
    #[test]
    fn a_wrong_magic_or_version_is_refused_naming_the_file() {
        let body = "format = something-else\nversion = 2\nshards = 1\n";
        let cases = [
            (
                format!("{body}crc32c = {:08x}\n", ferrite_store::checksum::crc32c(body.as_bytes())),
                "not a Ferrite data directory",
            ),
            (String::new(), "too short"),
        ];
        for (i, (text, reason)) in cases.iter().enumerate() {
            let path = temp(&format!("magic-{i}"));
            std::fs::create_dir_all(&path).expect("create");
            std::fs::write(path.join(IDENTITY_NAME), text).expect("write");
            let error = DataDir::open(&path, 1).expect_err("refused").to_string();
            assert!(error.contains(&path.join(IDENTITY_NAME).display().to_string()), "{error}");
            assert!(error.contains(reason), "{error}");
            std::fs::remove_dir_all(&path).expect("clean up");
        }
    }

    /// Shard directories without an identity mean the identity was lost (a crash cannot do that):
    /// stamping the configured count then could put every pool on the wrong shard.
    #[test]
    fn a_lost_identity_beside_shard_directories_is_refused() {
        let path = temp("lost");
        let data_dir = DataDir::open(&path, 2).expect("create");
        data_dir.create_shard_dir(0).expect("shard dir");
        drop(data_dir);
        std::fs::remove_file(path.join(IDENTITY_NAME)).expect("remove");
        let error = DataDir::open(&path, 2).expect_err("refused").to_string();
        assert!(error.contains("FERRITE") && error.contains("missing") && error.contains("shard-0"), "{error}");
        std::fs::remove_dir_all(&path).expect("clean up");
    }

    #[test]
    fn a_damaged_identity_is_refused_naming_the_file() {
        let path = temp("identity");
        drop(DataDir::open(&path, 1).expect("create"));
        let file = path.join(IDENTITY_NAME);
        let text = std::fs::read_to_string(&file).expect("read").replace("shards = 1", "shards = 4");
        std::fs::write(&file, text).expect("write");
        let error = DataDir::open(&path, 4).expect_err("damaged").to_string();
        assert!(error.contains("FERRITE") && error.contains("checksum mismatch"), "{error}");
        std::fs::remove_dir_all(&path).expect("clean up");
    }

    /// A server never starts on a backup (it would change it); the refusal says to restore it.
    #[test]
    fn a_backup_is_not_opened_as_a_data_directory() {
        let path = temp("backup");
        stamp_backup_dir(&path, 2, 0).expect("stamp a backup");
        stamp_backup_dir(&path, 2, 1).expect("the other shard stamps the same");
        assert!(stamp_backup_dir(&path, 3, 0).is_err(), "another server's backup");
        let error = DataDir::open(&path, 2).expect_err("a backup").to_string();
        assert!(error.contains("backup") && error.contains("--restore"), "{error}");
        std::fs::remove_dir_all(&path).expect("clean up");
    }
}
