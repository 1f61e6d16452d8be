//! The `pmem` backing: pool memory is a file mapped shared (on a DAX file system backed by
//! persistent memory, or on tmpfs to emulate one), changed in place. There is no write-ahead log:
//! atomicity comes from an undo log beside the region (the PMDK way), and durability from
//! flushing the changed cache lines before a commit completes.
//!
//! A transaction: before a range is changed, its old bytes are appended to the undo log and
//! flushed, and only then does the undo log's header count them (so a crash never finds a
//! counted entry half-written). `commit` flushes every changed range of the region, then empties
//! the undo log. Opening a pool whose undo log is not empty rolls the unfinished transaction
//! back, newest entry first, which restores the region as of the last commit.
//!
//! Files are filled with written zeros and synced when they are created or grown, never only
//! reserved with `fallocate`. A reserved extent stays "unwritten" until the file system commits
//! its conversion; on a DAX file system a store goes straight to the medium but that conversion
//! does not, so after a power cut flushed data reads back as zeros. Written, synced zeros leave a
//! later store nothing to wait for from the file system; they also take the blocks, so a store
//! into the mapping on a full file system cannot kill the process with SIGBUS.
//!
//! Files are mapped `MAP_SHARED_VALIDATE | MAP_SYNC` where the file system accepts it (only DAX
//! ones do), else plain `MAP_SHARED`; [`PmemMemory::mapping`] says which, for the server's log.
//! What survives what: process death (kill -9) always, since the mapping's pages belong to the
//! file. A power cut with [`PmemMapping::Sync`], where a flushed cache line is durable and the
//! kernel keeps the file's metadata durable for every page the mapping can write. With
//! [`PmemMapping::Shared`], only if the file lies on persistent memory anyway: on tmpfs the file
//! itself is lost with power, and on a block file system the kernel writes pages back in no
//! particular order, so there the backing promises kill -9 only.
//!
//! Formats (little-endian). Undo log file `pool-<id>.undo`:
//!
//! ```text
//! header   0  8 magic "FRPMUNDO"        entry  0  8 region offset
//!          8  2 version (1)                    8  8 length n
//!         10  6 reserved                      16  4 CRC-32C of bytes 0..16 and the old bytes
//!         16 24 slot A                        20  4 reserved
//!         40 24 slot B                        24  n old bytes, zero padding to 8 bytes
//! slot     0  8 bytes of counted entries
//!          8  8 sequence number
//!         16  4 CRC-32C of bytes 0..16 of the slot
//!         20  4 reserved
//! ```
//!
//! The count lives in two slots written alternately; the valid slot with the higher sequence
//! number is current. A crash can stop the process between any two stores, so an update that
//! tears leaves the other slot, and with it the count before the update: fewer entries (whose
//! ranges were not yet changed) or, for a commit's clearing, the whole unfinished transaction.

use std::fs::{File, OpenOptions};
use std::io;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use rustix::mm::{MapFlags, ProtFlags};

use super::wal::storage::write_zeros_between;
use super::{Offset, PoolMemory};

const UNDO_MAGIC: [u8; 8] = *b"FRPMUNDO";
const UNDO_VERSION: u16 = 1;
const UNDO_HEADER_BYTES: usize = 64;
const ENTRY_HEADER_BYTES: usize = 24;
/// Where the header's two count slots are, and how long each is.
const SLOT_OFFSETS: [usize; 2] = [16, 40];
const SLOT_BYTES: usize = 24;
/// The undo log's initial size; it grows (doubling) for transactions that need more.
const UNDO_INITIAL_BYTES: u64 = 1 << 20;
const CACHE_LINE_BYTES: usize = 64;

/// Why a pmem pool could not be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PmemError {
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("pmem undo log {file} is damaged at offset {offset}: {reason}")]
    Corrupt { file: String, offset: u64, reason: String },
}

fn io_error(context: String) -> impl FnOnce(io::Error) -> PmemError {
    move |source| PmemError::Io { context, source }
}

/// The file names of pool `id`'s region and undo log.
pub fn pool_files(dir: &Path, id: u64) -> (PathBuf, PathBuf) {
    (dir.join(format!("pool-{id:016x}.pmem")), dir.join(format!("pool-{id:016x}.undo")))
}

/// How a pool's files are mapped, which decides what a flushed store survives. Ordered weakest
/// first, so that the weaker of the region's and the undo log's mappings is their minimum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PmemMapping {
    /// Copy-on-write (`PmemMemory::open_private`, what `ferrite check` inspects): changes stay in
    /// this process and never reach the files.
    Private,
    /// Plain `MAP_SHARED`, because the file system refused `MAP_SYNC` (it is not DAX). Stores
    /// reach the file, so they survive kill -9; they survive a power cut only if the file lies
    /// on persistent memory anyway, never on tmpfs or a page-cached block file system.
    Shared,
    /// `MAP_SHARED_VALIDATE | MAP_SYNC` on a DAX file system: a store is durable across power
    /// loss once its cache line is flushed, since the kernel keeps the file's metadata durable
    /// for every page the mapping can write.
    Sync,
}

impl std::fmt::Display for PmemMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PmemMapping::Private => "MAP_PRIVATE (a copy-on-write view: nothing reaches the files)",
            PmemMapping::Shared => {
                "MAP_SHARED (no MAP_SYNC: flushed stores survive kill -9, a power cut only on persistent memory)"
            }
            PmemMapping::Sync => "MAP_SYNC (DAX: flushed stores survive a power cut)",
        })
    }
}

/// A whole file mapped read-write, unmapped when dropped. Not `memmap2`, which cannot ask for
/// `MAP_SYNC`.
#[derive(Debug)]
struct Mapping {
    start: NonNull<u8>,
    len: usize,
    mode: PmemMapping,
}

// SAFETY: a `Mapping` owns its memory as a `Box<[u8]>` owns its own: nothing else in this process
// holds a pointer into it, and access goes through `&self`/`&mut self`, so moving it to another
// thread moves that ownership with it.
#[allow(unsafe_code)]
unsafe impl Send for Mapping {}

// SAFETY: shared references hand out only `&[u8]`, which many threads may read at once.
#[allow(unsafe_code)]
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `file` shared: with `MAP_SYNC` if its file system accepts it, else plain. Only DAX
    /// file systems accept `MAP_SYNC`; the others refuse it with `EOPNOTSUPP`, and kernels older
    /// than 4.15 (no `MAP_SHARED_VALIDATE`) with `EINVAL`.
    fn shared(file: &File) -> io::Result<Mapping> {
        let len = whole_len(file)?;
        match Mapping::new(file, len, MapFlags::SHARED_VALIDATE | MapFlags::SYNC, PmemMapping::Sync) {
            Err(errno) if errno == rustix::io::Errno::OPNOTSUPP || errno == rustix::io::Errno::INVAL => {}
            mapped => return Ok(mapped?),
        }
        Ok(Mapping::new(file, len, MapFlags::SHARED, PmemMapping::Shared)?)
    }

    /// Maps `file` copy-on-write: changes stay in this process and never reach the file.
    fn private(file: &File) -> io::Result<Mapping> {
        Ok(Mapping::new(file, whole_len(file)?, MapFlags::PRIVATE, PmemMapping::Private)?)
    }

    /// Maps the first `len` bytes of `file`, readable and writable, with `flags`.
    #[allow(unsafe_code)]
    fn new(file: &File, len: usize, flags: MapFlags, mode: PmemMapping) -> rustix::io::Result<Mapping> {
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        // SAFETY: a null address lets the kernel place the mapping where nothing else lives. The
        // mapping lives until `drop`. The files are this pool's own, created and sized by this
        // module before mapping; the region is never resized and the undo log is remapped after
        // each growth. A data directory is locked by one server, so no other process truncates
        // them under us (which would turn reads into SIGBUS).
        let start = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, prot, flags, file, 0)? };
        let start = NonNull::new(start.cast::<u8>()).ok_or(rustix::io::Errno::NOMEM)?;
        Ok(Mapping { start, len, mode })
    }
}

/// The length of `file`, all of which is mapped.
fn whole_len(file: &File) -> io::Result<usize> {
    let len = file.metadata()?.len();
    usize::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, format!("{len} bytes cannot be mapped")))
}

impl Drop for Mapping {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: `start..start + len` is this mapping's, made by `Mapping::new`, and no slice of
        // it outlives `self` (they borrow it). munmap of a whole valid mapping cannot fail.
        let _ = unsafe { rustix::mm::munmap(self.start.as_ptr().cast(), self.len) };
    }
}

impl Deref for Mapping {
    type Target = [u8];

    #[allow(unsafe_code)]
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` readable bytes from `start`, mapped until `self` drops; the borrow of
        // `self` keeps `&mut` access out while this slice lives.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.len) }
    }
}

impl DerefMut for Mapping {
    #[allow(unsafe_code)]
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`; the mapping is writable, and `&mut self` makes this the only
        // slice of it.
        unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr(), self.len) }
    }
}

/// One pool's memory on the `pmem` backing.
#[derive(Debug)]
pub struct PmemMemory {
    region: Mapping,
    undo_file: File,
    undo: Mapping,
    undo_name: String,
    /// Bytes of entries in the undo log for the transaction under way.
    undo_used: usize,
    /// Sequence number of the header's current count slot.
    undo_seq: u64,
    /// Ranges of the region changed in the transaction under way, flushed by `commit`.
    changed: Vec<(usize, usize)>,
}

/// Writes back the cache lines holding `bytes` (on x86-64: `clflush` per line). On real
/// persistent memory this makes them durable; elsewhere it costs a little and changes nothing.
#[allow(unsafe_code)]
fn flush(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        let start = bytes.as_ptr() as usize & !(CACHE_LINE_BYTES - 1);
        let end = bytes.as_ptr() as usize + bytes.len();
        for line in (start..end).step_by(CACHE_LINE_BYTES) {
            // SAFETY: `line` lies within (the cache lines of) `bytes`, a live mapping; clflush
            // only writes back a line and needs no alignment of its own.
            unsafe { core::arch::x86_64::_mm_clflush(line as *const u8) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (bytes, CACHE_LINE_BYTES);
}

/// Orders the flushes before it ahead of the stores after it.
#[allow(unsafe_code)]
fn fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Creates `path` holding `len` bytes of written zeros, synced (see the module documentation for
/// why written rather than reserved). A file that cannot be completed is removed, so that a full
/// file system leaves nothing behind.
fn create_zeroed(path: &Path, len: u64) -> Result<File, PmemError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_error(format!("creating {}", path.display())))?;
    if let Err(error) = write_zeros_between(&file, 0, len).and_then(|()| file.sync_all()) {
        let _ = std::fs::remove_file(path);
        return Err(io_error(format!("writing {len} zero bytes to {}", path.display()))(error));
    }
    Ok(file)
}

/// Refuses a region file whose size is not the one its pool's catalog entry records.
fn check_region_len(file: &File, path: &Path, region_bytes: u64) -> Result<(), PmemError> {
    let len = file.metadata().map_err(io_error(format!("reading {}", path.display())))?.len();
    if len != region_bytes {
        return Err(PmemError::Corrupt {
            file: path.display().to_string(),
            offset: 0,
            reason: format!("the region file has {len} bytes; the pool's catalog entry says {region_bytes}"),
        });
    }
    Ok(())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

impl PmemMemory {
    /// Creates pool `id`'s files in `dir` (a zeroed region of `region_bytes` and an empty undo
    /// log), durably, and maps them. Fails if they exist; on any other failure, removes what it
    /// made, so that the id can be used again.
    pub fn create(dir: &Path, id: u64, region_bytes: u64) -> Result<PmemMemory, PmemError> {
        let (region_path, undo_path) = pool_files(dir, id);
        let region_file = create_zeroed(&region_path, region_bytes)?;
        let undo_file = match create_zeroed(&undo_path, UNDO_INITIAL_BYTES) {
            Ok(file) => file,
            Err(error) => {
                let _ = std::fs::remove_file(&region_path);
                return Err(error);
            }
        };
        let formatted = PmemMemory::format(dir, &region_file, undo_file, &undo_path);
        if formatted.is_err() {
            let _ = (std::fs::remove_file(&region_path), std::fs::remove_file(&undo_path));
        }
        formatted
    }

    /// Maps freshly created files and writes an empty undo log's header, durably (the directory
    /// entries included).
    fn format(dir: &Path, region_file: &File, undo_file: File, undo_path: &Path) -> Result<PmemMemory, PmemError> {
        let mut memory = PmemMemory::map_files(region_file, undo_file, undo_path)?;
        memory.write_undo_header(0);
        // Without MAP_SYNC the header is only in the page cache until this sync.
        memory.undo_file.sync_all().map_err(io_error(format!("syncing {}", undo_path.display())))?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(io_error(format!("syncing {}", dir.display())))?;
        Ok(memory)
    }

    /// Maps pool `id`'s files in `dir`, rolling back a transaction a crash interrupted.
    pub fn open(dir: &Path, id: u64, region_bytes: u64) -> Result<PmemMemory, PmemError> {
        let (region_path, undo_path) = pool_files(dir, id);
        let open = |path: &Path| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .map_err(io_error(format!("opening {}", path.display())))
        };
        let region_file = open(&region_path)?;
        check_region_len(&region_file, &region_path, region_bytes)?;
        let mut memory = PmemMemory::map_files(&region_file, open(&undo_path)?, &undo_path)?;
        memory.roll_back()?;
        Ok(memory)
    }

    /// Pool `id` as opening it would leave it (an interrupted transaction rolled back), in
    /// private copy-on-write mappings: nothing reaches the files. What `ferrite check` inspects.
    pub fn open_private(dir: &Path, id: u64, region_bytes: u64) -> Result<PmemMemory, PmemError> {
        let (region_path, undo_path) = pool_files(dir, id);
        let open = |path: &Path| File::open(path).map_err(io_error(format!("opening {}", path.display())));
        let (region_file, undo_file) = (open(&region_path)?, open(&undo_path)?);
        check_region_len(&region_file, &region_path, region_bytes)?;
        let region = Mapping::private(&region_file).map_err(io_error(format!("mapping {}", region_path.display())))?;
        let undo = Mapping::private(&undo_file).map_err(io_error(format!("mapping {}", undo_path.display())))?;
        let undo_name = undo_path.display().to_string();
        let mut memory =
            PmemMemory { region, undo_file, undo, undo_name, undo_used: 0, undo_seq: 0, changed: Vec::new() };
        memory.roll_back()?;
        Ok(memory)
    }

    fn map_files(region_file: &File, undo_file: File, undo_path: &Path) -> Result<PmemMemory, PmemError> {
        let undo_name = undo_path.display().to_string();
        let region = Mapping::shared(region_file).map_err(io_error("mapping the pool region".into()))?;
        let undo = Mapping::shared(&undo_file).map_err(io_error(format!("mapping {undo_name}")))?;
        Ok(PmemMemory { region, undo_file, undo, undo_name, undo_used: 0, undo_seq: 0, changed: Vec::new() })
    }

    /// How the pool's files are mapped, and so what a committed transaction survives; the
    /// weaker of the region's and the undo log's mappings, should they ever differ.
    pub fn mapping(&self) -> PmemMapping {
        self.region.mode.min(self.undo.mode)
    }

    /// Records `counted` in the slot the current one is not (see the module documentation).
    fn write_undo_header(&mut self, counted: u64) {
        self.undo_seq += 1;
        let at = SLOT_OFFSETS[(self.undo_seq % 2) as usize];
        let header = &mut self.undo[..UNDO_HEADER_BYTES];
        header[0..8].copy_from_slice(&UNDO_MAGIC);
        header[8..10].copy_from_slice(&UNDO_VERSION.to_le_bytes());
        let slot = &mut header[at..at + SLOT_BYTES];
        slot[0..8].copy_from_slice(&counted.to_le_bytes());
        slot[8..16].copy_from_slice(&self.undo_seq.to_le_bytes());
        let crc = crate::checksum::crc32c(&slot[0..16]);
        slot[16..20].copy_from_slice(&crc.to_le_bytes());
        flush(&self.undo[at..at + SLOT_BYTES]);
        fence();
    }

    /// The current slot's count and sequence number, or `None` if neither slot is valid.
    fn current_slot(&self) -> Option<(u64, u64)> {
        SLOT_OFFSETS
            .iter()
            .map(|at| &self.undo[*at..*at + SLOT_BYTES])
            .filter(|slot| u32_at(slot, 16) == crate::checksum::crc32c(&slot[0..16]))
            .map(|slot| (u64_at(slot, 0), u64_at(slot, 8)))
            .max_by_key(|(_, seq)| *seq)
    }

    /// Undoes the transaction a crash interrupted, if the undo log counts one.
    fn roll_back(&mut self) -> Result<(), PmemError> {
        let corrupt = |offset: usize, reason: String| PmemError::Corrupt {
            file: self.undo_name.clone(),
            offset: offset as u64,
            reason,
        };
        let Some(header) = self.undo.get(..UNDO_HEADER_BYTES) else {
            return Err(corrupt(0, format!("the file has {} bytes, less than a header", self.undo.len())));
        };
        if header[0..8] != UNDO_MAGIC || u16::from_le_bytes([header[8], header[9]]) != UNDO_VERSION {
            return Err(corrupt(0, "bad magic or unsupported version".into()));
        }
        let Some((counted, seq)) = self.current_slot() else {
            return Err(corrupt(16, "neither count slot of the header is valid".into()));
        };
        self.undo_seq = seq;
        let counted = usize::try_from(counted).unwrap_or(usize::MAX);
        if counted > self.undo.len() - UNDO_HEADER_BYTES {
            return Err(corrupt(16, format!("counts {counted} bytes of entries, more than the file holds")));
        }
        let mut entries = Vec::new();
        let mut at = UNDO_HEADER_BYTES;
        while at < UNDO_HEADER_BYTES + counted {
            let Some(entry) = self.undo.get(at..).filter(|entry| entry.len() >= ENTRY_HEADER_BYTES) else {
                return Err(corrupt(at, "an entry's header runs past the file".into()));
            };
            let (offset, len) = (u64_at(entry, 0) as usize, u64_at(entry, 8) as usize);
            let old = entry.get(ENTRY_HEADER_BYTES..ENTRY_HEADER_BYTES.saturating_add(len));
            let old = old.ok_or_else(|| corrupt(at, format!("an entry of {len} bytes runs past the file")))?;
            if u32_at(entry, 16) != crate::checksum::crc32c_append(crate::checksum::crc32c(&entry[0..16]), old) {
                return Err(corrupt(at, "entry checksum mismatch".into()));
            }
            if offset.checked_add(len).is_none_or(|end| end > self.region.len()) {
                return Err(corrupt(at, format!("the entry's range {offset}+{len} lies outside the region")));
            }
            entries.push((offset, at + ENTRY_HEADER_BYTES, len));
            at += (ENTRY_HEADER_BYTES + len).next_multiple_of(8);
        }
        for &(offset, from, len) in entries.iter().rev() {
            self.region[offset..offset + len].copy_from_slice(&self.undo[from..from + len]);
            flush(&self.region[offset..offset + len]);
        }
        fence();
        self.write_undo_header(0);
        Ok(())
    }

    /// Makes room for `bytes` more of undo entries, growing (and remapping) the undo log.
    fn reserve_undo(&mut self, bytes: usize) {
        let needed = UNDO_HEADER_BYTES + self.undo_used + bytes;
        if needed <= self.undo.len() {
            return;
        }
        let (old_len, new_len) = (self.undo.len() as u64, (needed as u64).next_power_of_two());
        // Only a transaction larger than every earlier one (a table growth) gets here. Growing
        // can fail only when the file system is full (or failing), and the engine's transaction
        // is already decided, so there is no refusing it: the shard stops, and on restart the
        // undo log, intact up to here, rolls the transaction back. The new part is written and
        // synced before any entry goes there, for the reason the module documentation gives.
        let grown = write_zeros_between(&self.undo_file, old_len, new_len).and_then(|()| self.undo_file.sync_all());
        if let Err(error) = grown {
            panic!(
                "cannot grow the pmem undo log {} from {old_len} to {new_len} bytes ({error}); the shard stops, \
                 and reopening the pool rolls the unfinished transaction back",
                self.undo_name
            );
        }
        self.undo = Mapping::shared(&self.undo_file).unwrap_or_else(|error| {
            panic!("cannot map the grown pmem undo log {} ({error}); the shard stops", self.undo_name)
        });
    }
}

impl PoolMemory for PmemMemory {
    fn bytes(&self) -> &[u8] {
        &self.region
    }

    fn modify(&mut self, offset: Offset, len: usize) -> &mut [u8] {
        let start = usize::try_from(offset).expect("pool memory offsets fit the address space");
        let entry_bytes = (ENTRY_HEADER_BYTES + len).next_multiple_of(8);
        self.reserve_undo(entry_bytes);
        let at = UNDO_HEADER_BYTES + self.undo_used;
        {
            let (old, entry) = (&self.region[start..start + len], &mut self.undo[at..at + entry_bytes]);
            entry[0..8].copy_from_slice(&offset.to_le_bytes());
            entry[8..16].copy_from_slice(&(len as u64).to_le_bytes());
            entry[ENTRY_HEADER_BYTES..ENTRY_HEADER_BYTES + len].copy_from_slice(old);
            let crc = crate::checksum::crc32c_append(crate::checksum::crc32c(&entry[0..16]), old);
            entry[16..20].copy_from_slice(&crc.to_le_bytes());
        }
        flush(&self.undo[at..at + entry_bytes]);
        fence();
        self.undo_used += entry_bytes;
        self.write_undo_header(self.undo_used as u64);
        self.changed.push((start, len));
        &mut self.region[start..start + len]
    }

    fn commit(&mut self) {
        if self.changed.is_empty() {
            return;
        }
        for &(start, len) in &self.changed {
            flush(&self.region[start..start + len]);
        }
        fence();
        self.write_undo_header(0);
        self.undo_used = 0;
        self.changed.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hstore::HStore;
    use crate::store::{PoolSpec, PutMode, Store};

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ferrite-pmem-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    /// The lines of `filefrag -v path` for extents whose data the file system could still lose
    /// in a power cut: unwritten (reserved, read back as zeros until their conversion is
    /// committed) or delayed allocation (no block yet). `None`, said on stderr, when this machine
    /// cannot tell: no `filefrag`, or a file system without extent maps (tmpfs).
    fn volatile_extents(path: &Path) -> Option<Vec<String>> {
        let ran = ["filefrag", "/usr/sbin/filefrag", "/sbin/filefrag"]
            .iter()
            .find_map(|tool| std::process::Command::new(tool).arg("-v").arg(path).output().ok());
        let report = match ran {
            Some(output) if output.status.success() => String::from_utf8_lossy(&output.stdout).into_owned(),
            Some(output) => {
                eprintln!(
                    "skipped: filefrag cannot map {}: {}",
                    path.display(),
                    String::from_utf8_lossy(&output.stderr)
                );
                return None;
            }
            None => {
                eprintln!("skipped: no filefrag on this machine");
                return None;
            }
        };
        Some(
            report
                .lines()
                .filter(|line| line.contains("unwritten") || line.contains("delalloc"))
                .map(String::from)
                .collect(),
        )
    }

    /// Whether `dir` lies on a file system mounted with DAX: the options of the longest mount
    /// point in `/proc/mounts` that contains it.
    fn mounted_with_dax(dir: &Path) -> bool {
        let dir = dir.canonicalize().expect("the test directory exists");
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        mounts
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(' ').skip(1);
                Some((fields.next()?, fields.nth(1)?))
            })
            .filter(|(point, _)| dir.starts_with(point))
            .max_by_key(|(point, _)| point.len())
            .is_some_and(|(_, options)| options.split(',').any(|o| o.starts_with("dax") && o != "dax=never"))
    }

    /// Creating a pool leaves both files written and synced, with no unwritten extents: on a DAX
    /// file system a flushed store into an unwritten extent reads back as zeros after a power cut.
    #[test]
    fn created_files_have_no_unwritten_extents() {
        let dir = temp("extents");
        let memory = PmemMemory::create(&dir, 3, 4 << 20).expect("create");
        let (region, undo) = pool_files(&dir, 3);
        for path in [&region, &undo] {
            if let Some(volatile) = volatile_extents(path) {
                assert!(volatile.is_empty(), "{} has extents a power cut could lose: {volatile:#?}", path.display());
            }
        }
        drop(memory);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// Growing the undo log mid-transaction writes and syncs its new part before using it.
    #[test]
    fn a_grown_undo_log_has_no_unwritten_extents() {
        let dir = temp("growth");
        let mut memory = PmemMemory::create(&dir, 4, 4 << 20).expect("create");
        let big = vec![7u8; 2 << 20];
        memory.modify(1 << 20, big.len()).copy_from_slice(&big);
        let (_, undo) = pool_files(&dir, 4);
        assert!(std::fs::metadata(&undo).expect("stat").len() > UNDO_INITIAL_BYTES, "the undo log grew");
        if let Some(volatile) = volatile_extents(&undo) {
            assert!(volatile.is_empty(), "the grown undo log has extents a power cut could lose: {volatile:#?}");
        }
        memory.commit();
        drop(memory);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// Where the file system refuses `MAP_SYNC` (not DAX: ext4 or tmpfs on the test machines),
    /// the refusal is one the fallback recognises, the pool says it is mapped plainly shared, and
    /// it still keeps what it commits; a private view says it is private.
    #[test]
    fn without_dax_the_mapping_falls_back_to_shared() {
        let dir = temp("mapping");
        if mounted_with_dax(&dir) {
            eprintln!("skipped: {} is on a DAX file system, where MAP_SYNC is expected to work", dir.display());
            std::fs::remove_dir_all(&dir).expect("clean up");
            return;
        }
        let mut memory = PmemMemory::create(&dir, 5, 1 << 20).expect("create");
        assert_eq!(memory.mapping(), PmemMapping::Shared);
        memory.modify(64, 6).copy_from_slice(b"shared");
        memory.commit();
        drop(memory);
        let (region, _) = pool_files(&dir, 5);
        let file = OpenOptions::new().read(true).write(true).open(&region).expect("open");
        match Mapping::new(&file, 1 << 20, MapFlags::SHARED_VALIDATE | MapFlags::SYNC, PmemMapping::Sync) {
            Err(errno) => {
                assert!(errno == rustix::io::Errno::OPNOTSUPP || errno == rustix::io::Errno::INVAL, "{errno}")
            }
            Ok(_) => panic!("a file system that is not DAX accepted MAP_SYNC"),
        }
        let memory = PmemMemory::open(&dir, 5, 1 << 20).expect("open");
        assert_eq!(memory.mapping(), PmemMapping::Shared);
        assert!(memory.mapping().to_string().starts_with("MAP_SHARED"));
        assert_eq!(&memory.bytes()[64..70], b"shared");
        drop(memory);
        let private = PmemMemory::open_private(&dir, 5, 1 << 20).expect("open a private view");
        assert_eq!(private.mapping(), PmemMapping::Private);
        assert_eq!(&private.bytes()[64..70], b"shared");
        drop(private);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// A creation that fails removes the files it made, so the pool id can be used again, and
    /// touches none it did not make.
    #[test]
    fn a_failed_create_removes_what_it_made() {
        let dir = temp("failed");
        let (region, undo) = pool_files(&dir, 6);
        std::fs::write(&undo, b"not ours").expect("write");
        match PmemMemory::create(&dir, 6, 1 << 20) {
            Err(PmemError::Io { context, .. }) => assert!(context.contains(".undo"), "{context}"),
            other => panic!("creating over an existing undo log must fail, got {other:?}"),
        }
        assert!(!region.exists(), "the region file the failed creation made is removed");
        assert_eq!(std::fs::read(&undo).expect("read"), b"not ours");
        std::fs::remove_file(&undo).expect("remove");
        PmemMemory::create(&dir, 6, 1 << 20).expect("the id can be used again");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// An undo log cut shorter than its header is refused as damaged, naming the file, rather
    /// than read past its end.
    #[test]
    fn a_truncated_undo_log_is_refused() {
        let dir = temp("truncated");
        drop(PmemMemory::create(&dir, 7, 1 << 20).expect("create"));
        let (_, undo) = pool_files(&dir, 7);
        OpenOptions::new().write(true).open(&undo).and_then(|file| file.set_len(40)).expect("truncate");
        for opened in [PmemMemory::open(&dir, 7, 1 << 20), PmemMemory::open_private(&dir, 7, 1 << 20)] {
            match opened {
                Err(PmemError::Corrupt { file, .. }) => assert!(file.ends_with(".undo"), "{file}"),
                other => panic!("a truncated undo log must be refused, got {other:?}"),
            }
        }
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// A transaction a crash interrupts (modified, never committed) is rolled back on open; a
    /// committed one stays, across growth of the undo log.
    #[test]
    fn an_interrupted_transaction_is_rolled_back() {
        let dir = temp("rollback");
        let mut memory = PmemMemory::create(&dir, 1, 4 << 20).expect("create");
        memory.modify(100, 5).copy_from_slice(b"first");
        memory.commit();
        memory.modify(100, 5).copy_from_slice(b"later");
        memory.modify(4000, 3).copy_from_slice(b"abc");
        // Larger than the undo log's initial size: the log grows mid-transaction.
        let big = vec![7u8; 2 << 20];
        memory.modify(1 << 20, big.len()).copy_from_slice(&big);
        memory.modify(100, 2).copy_from_slice(b"ZZ");
        drop(memory); // the process dies mid-transaction
        let (region_file, undo_file) = pool_files(&dir, 1);
        let before = (std::fs::read(&region_file).expect("read"), std::fs::read(&undo_file).expect("read"));
        let private = PmemMemory::open_private(&dir, 1, 4 << 20).expect("a private view rolls back");
        assert_eq!(&private.bytes()[100..105], b"first");
        drop(private);
        let after = (std::fs::read(&region_file).expect("read"), std::fs::read(&undo_file).expect("read"));
        assert!(before == after, "a private view changes no file");
        let memory = PmemMemory::open(&dir, 1, 4 << 20).expect("open rolls back");
        assert_eq!(&memory.bytes()[100..105], b"first");
        assert_eq!(&memory.bytes()[4000..4003], &[0, 0, 0]);
        assert!(memory.bytes()[1 << 20..(1 << 20) + big.len()].iter().all(|b| *b == 0));
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// An hstore over pmem: committed pairs survive reopening; a damaged undo header is refused
    /// naming the file.
    #[test]
    fn an_hstore_over_pmem_reopens_with_its_pairs() {
        let dir = temp("hstore");
        let spec = PoolSpec { size_bytes: 1 << 20, expected_objects: 100 };
        let region = HStore::<PmemMemory>::region_bytes_for(spec).expect("size");
        let memory = PmemMemory::create(&dir, 2, region).expect("create");
        let mut store = HStore::create_on_zeroed(memory, spec).expect("format");
        for i in 0..500u32 {
            let value = vec![i as u8; (i % 300) as usize];
            store.put(format!("k{i}").as_bytes(), &value, PutMode::Upsert, 1).expect("room");
        }
        store.erase(b"k7").expect("present");
        drop(store);
        let store = HStore::open(PmemMemory::open(&dir, 2, region).expect("open")).expect("valid");
        assert_eq!(store.count(), 499);
        assert_eq!(store.get(b"k42"), Some(&vec![42u8; 42][..]));
        assert_eq!(store.get(b"k7"), None);
        store.check().expect("invariants hold");
        drop(store);
        // A torn update of one count slot leaves the other: the pool still opens.
        let (_, undo) = pool_files(&dir, 2);
        let mut bytes = std::fs::read(&undo).expect("read");
        bytes[20] ^= 1;
        std::fs::write(&undo, &bytes).expect("write");
        let store = HStore::open(PmemMemory::open(&dir, 2, region).expect("the other slot")).expect("valid");
        assert_eq!(store.count(), 499);
        drop(store);
        // Both slots damaged: refused, naming the file.
        let mut bytes = std::fs::read(&undo).expect("read");
        bytes[20] ^= 1;
        bytes[44] ^= 1;
        std::fs::write(&undo, bytes).expect("write");
        match PmemMemory::open(&dir, 2, region) {
            Err(PmemError::Corrupt { file, .. }) => assert!(file.ends_with(".undo"), "{file}"),
            other => panic!("a damaged undo log must be refused, got {other:?}"),
        }
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
