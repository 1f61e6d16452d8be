//! The data directory: locked by one server at a time, and stamped with the shard count it was
//! created for.
//!
//! Two servers on one directory would interleave their logs and destroy both, so the directory is
//! locked with `flock` on `LOCK` for as long as the server runs (the kernel drops the lock when the
//! process dies, even by SIGKILL, so a crash never leaves a stale lock). Pools are placed on
//! shards by a hash of their name, so a directory written by N shards cannot be served by M: the
//! identity file `FERRITE` records N and a different count is refused.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

const LOCK_NAME: &str = "LOCK";
const IDENTITY_NAME: &str = "FERRITE";
const IDENTITY_TEMP_NAME: &str = "FERRITE.tmp";
const IDENTITY_MAGIC: &str = "ferrite-data-dir";
const IDENTITY_VERSION: u32 = 1;

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
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            let holder = std::fs::read_to_string(&lock_path).unwrap_or_default();
            let holder = holder.trim().parse::<u32>().map(|pid| format!(" (pid {pid})")).unwrap_or_default();
            return Err(DataDirError::Locked { path: shown, holder });
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
                return self.write_identity(shard_count);
            }
            Err(error) => return Err(io("cannot read its identity file")(error)),
        };
        let found = parse_identity(&text).map_err(|reason| self.identity_error(reason))?;
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
        file.write_all(identity_text(shard_count).as_bytes()).map_err(io("cannot write its identity file"))?;
        file.sync_all().map_err(io("cannot sync its identity file"))?;
        std::fs::rename(&temp, self.path.join(IDENTITY_NAME)).map_err(io("cannot rename its identity file"))?;
        sync_dir(&self.path).map_err(io("cannot sync it"))
    }

    /// The directory of shard `index`, created (durably) if missing.
    pub fn create_shard_dir(&self, index: usize) -> std::io::Result<PathBuf> {
        let dir = self.path.join(format!("shard-{index}"));
        if !dir.exists() {
            std::fs::create_dir(&dir)?;
            sync_dir(&self.path)?;
        }
        Ok(dir)
    }
}

/// The identity file: three `key = value` lines and a CRC-32C of them, readable by a person.
fn identity_text(shard_count: usize) -> String {
    let body = format!("format = {IDENTITY_MAGIC}\nversion = {IDENTITY_VERSION}\nshards = {shard_count}\n");
    format!("{body}crc32c = {:08x}\n", crc32c::crc32c(body.as_bytes()))
}

/// The shard count recorded in an identity file, or why the file is not valid.
fn parse_identity(text: &str) -> Result<usize, String> {
    let Some((body, crc_line)) = text.trim_end_matches('\n').rsplit_once('\n') else {
        return Err("too short".into());
    };
    let body = format!("{body}\n");
    let stored = crc_line.strip_prefix("crc32c = ").ok_or("the last line is not its checksum")?;
    let computed = format!("{:08x}", crc32c::crc32c(body.as_bytes()));
    if stored != computed {
        return Err(format!("checksum mismatch: stored {stored}, computed {computed}"));
    }
    let field = |key: &str| {
        body.lines()
            .find_map(|line| line.strip_prefix(key).and_then(|rest| rest.strip_prefix(" = ")))
            .ok_or_else(|| format!("no '{key}' line"))
    };
    if field("format")? != IDENTITY_MAGIC {
        return Err("not a Ferrite data directory identity".into());
    }
    let version = field("version")?;
    if version != IDENTITY_VERSION.to_string() {
        return Err(format!("format version {version}; this build reads version {IDENTITY_VERSION}"));
    }
    field("shards")?.parse().map_err(|_| "the shard count is not a number".into())
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

    #[test]
    fn a_damaged_identity_is_refused_naming_the_file() {
        let path = temp("identity");
        drop(DataDir::open(&path, 1).expect("create"));
        let file = path.join(IDENTITY_NAME);
        let text = std::fs::read_to_string(&file).expect("read").replace("shards = 1", "shards = 4");
        std::fs::write(&file, text).expect("write");
        let error = DataDir::open(&path, 4).expect_err("damaged").to_string();
        assert!(error.contains("FERRITE") && error.contains("checksum mismatch"), "{error}");
        assert_eq!(parse_identity(&identity_text(7)), Ok(7));
        std::fs::remove_dir_all(&path).expect("clean up");
    }
}
