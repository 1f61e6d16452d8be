//! The file operations the write-ahead log needs, behind a narrow trait so tests can substitute
//! a backend that simulates power loss (see `sim.rs`), as redb's `StorageBackend` does.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// One segment file.
///
/// Methods take `&self` so a segment can be written and synced by a log's sync thread while the
/// shard that owns the log keeps appending (positional writes to disjoint ranges need no lock).
pub trait SegmentFile: Send + Sync + std::fmt::Debug {
    /// Fills `buf` from `offset`; fails with `UnexpectedEof` past the end.
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    fn write_all_at(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Makes every completed write durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    fn size_bytes(&self) -> io::Result<u64>;
}

/// The directory that holds a log's segment files.
pub trait LogStorage: Send + std::fmt::Debug {
    type File: SegmentFile;

    /// Names of the files in the directory.
    fn list(&self) -> io::Result<Vec<String>>;
    fn open(&self, name: &str) -> io::Result<Self::File>;
    /// Creates `name` with `len` bytes reserved on the device (so later writes inside it cannot
    /// run out of space), durably: the file and its directory entry are synced.
    fn create(&self, name: &str, len: u64) -> io::Result<Self::File>;
    /// Like `create`, but with every byte written (zeros) rather than only reserved. Slower to
    /// make (a log's spare segments are made off the shard's thread), but syncing a write into
    /// it then needs no file-system metadata change: on ext4 a commit into a written segment
    /// costs about two thirds of one into reserved, unwritten space.
    fn create_written(&self, name: &str, len: u64) -> io::Result<Self::File>;
    /// Removes a file (a spare segment that was never adopted), durably.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Renames a file, durably (the directory is synced).
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
}

/// Segment files in a directory of the real file system.
#[derive(Debug, Clone)]
pub struct FsStorage {
    dir: PathBuf,
}

impl FsStorage {
    /// Uses `dir`, creating it (and syncing its parent) if missing.
    pub fn open_dir(dir: &Path) -> io::Result<FsStorage> {
        if !dir.exists() {
            std::fs::create_dir_all(dir)?;
            if let Some(parent) = dir.parent() {
                sync_dir(parent)?;
            }
        }
        Ok(FsStorage { dir: dir.to_path_buf() })
    }
}

/// A directory's entries (created, renamed, removed files) are durable only once the directory
/// itself is synced: the step the ALICE study found most often missing.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Reserves `len` bytes for `file`. `fallocate(2)` where the file system has it; otherwise (some
/// FUSE and network file systems) by writing zeros, which reserves the space just as well.
pub(crate) fn preallocate(file: &File, len: u64) -> io::Result<()> {
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::empty(), 0, len) {
        Ok(()) => return Ok(()),
        Err(errno) if errno == rustix::io::Errno::OPNOTSUPP || errno == rustix::io::Errno::NOSYS => {}
        Err(errno) => return Err(errno.into()),
    }
    write_zeros(file, len)
}

/// Writes `len` zero bytes to `file` from its start.
fn write_zeros(file: &File, len: u64) -> io::Result<()> {
    write_zeros_between(file, 0, len)
}

/// Writes zeros over bytes `start..end` of `file` (extending it to `end` if shorter), a chunk at a
/// time so that filling a large file needs little memory.
pub(crate) fn write_zeros_between(file: &File, start: u64, end: u64) -> io::Result<()> {
    const CHUNK_BYTES: u64 = 1 << 20;
    let zeros = vec![0u8; CHUNK_BYTES.min(end.saturating_sub(start)) as usize];
    let mut offset = start;
    while offset < end {
        let chunk = (end - offset).min(CHUNK_BYTES) as usize;
        file.write_all_at(&zeros[..chunk], offset)?;
        offset += chunk as u64;
    }
    Ok(())
}

/// A segment file of the real file system.
///
/// Writes laid out in whole blocks of memory and of the file (the log's batches, see
/// [`super::writer::DIRECT_BLOCK_BYTES`]) go through a second descriptor opened with `O_DIRECT`:
/// the device takes them straight from the buffer, without the page cache's copy. Every other
/// write and every read goes through the page cache, and so does everything on a file system
/// that refuses `O_DIRECT` (tmpfs before Linux 6.6, some network file systems). Linux keeps the two coherent: a direct write first writes
/// back and afterwards drops the cached pages it covers.
#[derive(Debug)]
pub struct FsSegment {
    file: File,
    direct: Option<File>,
}

impl FsSegment {
    fn new(file: File, path: &Path) -> FsSegment {
        let direct = OpenOptions::new().write(true).custom_flags(DIRECT_FLAG).open(path).ok();
        FsSegment { file, direct }
    }
}

/// `O_DIRECT`, for [`OpenOptionsExt::custom_flags`].
const DIRECT_FLAG: i32 = rustix::fs::OFlags::DIRECT.bits() as i32;

/// Whether a write of `data` at `offset` meets `O_DIRECT`'s alignment: whole blocks of the file
/// from a block boundary of memory.
fn whole_blocks(offset: u64, data: &[u8]) -> bool {
    let block = super::writer::DIRECT_BLOCK_BYTES;
    offset.is_multiple_of(block)
        && (data.len() as u64).is_multiple_of(block)
        && (data.as_ptr() as u64).is_multiple_of(block)
}

impl SegmentFile for FsSegment {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        FileExt::read_exact_at(&self.file, buf, offset)
    }

    fn write_all_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        if let Some(direct) = self.direct.as_ref().filter(|_| whole_blocks(offset, data)) {
            match FileExt::write_all_at(direct, data, offset) {
                // A device with larger blocks than ours refuses the alignment: the same bytes
                // through the page cache (writing them again is harmless).
                Err(error) if error.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {}
                written => return written,
            }
        }
        FileExt::write_all_at(&self.file, data, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn size_bytes(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
}

impl FsStorage {
    /// Creates `name`, fills or reserves it with `prepare`, and syncs it and the directory.
    fn create_with(&self, name: &str, prepare: impl FnOnce(&File) -> io::Result<()>) -> io::Result<FsSegment> {
        let path = self.dir.join(name);
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        let prepared = prepare(&file).and_then(|()| file.sync_all()).and_then(|()| sync_dir(&self.dir));
        if let Err(error) = prepared {
            // A half-made segment must not linger: it would be taken for a log file later.
            let _ = std::fs::remove_file(&path);
            return Err(error);
        }
        Ok(FsSegment::new(file, &path))
    }
}

impl LogStorage for FsStorage {
    type File = FsSegment;

    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            if let Some(name) = entry?.file_name().to_str() {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }

    fn open(&self, name: &str) -> io::Result<FsSegment> {
        let path = self.dir.join(name);
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        Ok(FsSegment::new(file, &path))
    }

    fn create(&self, name: &str, len: u64) -> io::Result<FsSegment> {
        self.create_with(name, |file| preallocate(file, len))
    }

    fn create_written(&self, name: &str, len: u64) -> io::Result<FsSegment> {
        self.create_with(name, |file| write_zeros(file, len))
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        std::fs::remove_file(self.dir.join(name))?;
        sync_dir(&self.dir)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        std::fs::rename(self.dir.join(from), self.dir.join(to))?;
        sync_dir(&self.dir)
    }
}
