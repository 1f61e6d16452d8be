//! Where a backup may be written when `[backup] root` is set: beneath the root, for real.
//!
//! A client names the backup directory, so a comparison of its path with the root's is not
//! enough: a symbolic link beneath the root (made by anyone who may write there) would carry the
//! backup elsewhere. So the directory is opened one component at a time from the root, each with
//! `O_NOFOLLOW | O_DIRECTORY` (a link or a file is refused; a missing directory is created with
//! `mkdirat` and its parent synced), and the backup then reaches its files through that open
//! directory ([`BackupDir::path`]), never through its path again: a link swapped into the path
//! afterwards changes nothing. The root itself is the operator's choice and is followed if it is
//! a link.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{fsync, mkdirat, open, openat, statat, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

/// Mode of a directory created on the way to a backup directory (before the umask).
const CREATED_DIR_MODE: u32 = 0o755;

/// A backup directory opened beneath the root. Its files are reached through the open
/// directory, so it stays open for as long as the backup writes into it.
#[derive(Debug)]
pub(crate) struct BackupDir {
    dir: OwnedFd,
    /// The directory as the client named it, for messages.
    shown: PathBuf,
}

impl BackupDir {
    /// Opens `dir`, which must lie beneath `root` (both absolute), creating what is missing of
    /// it, and following no symbolic link on the way from the root.
    pub(crate) fn open_beneath(root: &Path, dir: &Path) -> Result<BackupDir, String> {
        let beneath =
            dir.strip_prefix(root).map_err(|_| format!("{} is not beneath {}", dir.display(), root.display()))?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut current =
            open(root, flags, Mode::empty()).map_err(|error| format!("cannot open {}: {error}", root.display()))?;
        let mut reached = root.to_path_buf();
        for component in beneath.components() {
            let Component::Normal(name) = component else {
                return Err(format!("{} is not a plain path beneath {}", dir.display(), root.display()));
            };
            reached.push(name);
            // `O_NOFOLLOW | O_DIRECTORY` on a link fails with ELOOP or ENOTDIR (Linux): which
            // one it was is asked of the entry itself, for the message.
            let is_link = |parent: &OwnedFd| {
                statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|stat| FileType::from_raw_mode(stat.st_mode) == FileType::Symlink)
            };
            let refused = |parent: &OwnedFd, error: Errno| match error {
                Errno::LOOP | Errno::NOTDIR if is_link(parent) => format!(
                    "{} is a symbolic link: backups go beneath {} ([backup] root) and links there are not followed",
                    reached.display(),
                    root.display()
                ),
                Errno::NOTDIR => format!("{} is not a directory", reached.display()),
                error => format!("cannot open {}: {error}", reached.display()),
            };
            current = match openat(&current, name, flags | OFlags::NOFOLLOW, Mode::empty()) {
                Err(Errno::NOENT) => {
                    match mkdirat(&current, name, Mode::from_raw_mode(CREATED_DIR_MODE)) {
                        // Made meanwhile by another shard backing up into the same directory.
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(error) => return Err(format!("cannot create {}: {error}", reached.display())),
                    }
                    fsync(&current)
                        .map_err(|error| format!("cannot sync the parent of {}: {error}", reached.display()))?;
                    openat(&current, name, flags | OFlags::NOFOLLOW, Mode::empty())
                        .map_err(|error| refused(&current, error))?
                }
                opened => opened.map_err(|error| refused(&current, error))?,
            };
        }
        Ok(BackupDir { dir: current, shown: dir.to_path_buf() })
    }

    /// A path that reaches the opened directory itself (through `/proc/self/fd`), whatever
    /// happens to the path it was opened by.
    pub(crate) fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()))
    }

    /// `message` with the opened directory's path given back as the client named it.
    pub(crate) fn shown(&self, message: &str) -> String {
        message.replace(&self.path().display().to_string(), &self.shown.display().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ferrite-backup-root-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create");
        dir
    }

    #[test]
    fn missing_directories_are_created_and_reached_through_the_open_one() {
        let root = temp("create");
        let opened = BackupDir::open_beneath(&root, &root.join("a/b")).expect("created");
        std::fs::write(opened.path().join("file"), "x").expect("write through the open directory");
        assert_eq!(std::fs::read_to_string(root.join("a/b/file")).expect("read back"), "x");
        let message = format!("writing {}/file failed", opened.path().display());
        assert_eq!(opened.shown(&message), format!("writing {}/file failed", root.join("a/b").display()));
        std::fs::remove_dir_all(&root).expect("clean up");
    }

    #[test]
    fn links_files_and_other_paths_are_refused() {
        let root = temp("refuse");
        let outside = temp("refuse-outside");
        std::os::unix::fs::symlink(&outside, root.join("link")).expect("link");
        std::fs::write(root.join("file"), "x").expect("file");
        for (dir, reason) in [
            (root.join("link"), "symbolic link"),
            (root.join("link/below"), "symbolic link"),
            (root.join("file/below"), "not a directory"),
            (outside.join("x"), "not beneath"),
        ] {
            let error = BackupDir::open_beneath(&root, &dir).expect_err("refused");
            assert!(error.contains(reason), "{}: {error}", dir.display());
        }
        assert!(!outside.join("below").exists() && !outside.join("x").exists(), "nothing was made outside");
        for dir in [root, outside] {
            std::fs::remove_dir_all(dir).expect("clean up");
        }
    }
}
