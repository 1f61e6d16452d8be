//! The `pmem` backing: pool memory is a file mapped `MAP_SHARED` (on a DAX file system backed by
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
//! What survives what: process death (kill -9) always, since the mapping's pages belong to the
//! file. A power cut only on real persistent memory (DAX), where a flushed cache line is durable;
//! on tmpfs the file itself is lost with power, and on a block file system the kernel writes pages
//! back in no particular order, so there the backing promises kill -9 only.
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
use std::path::{Path, PathBuf};

use memmap2::MmapMut;

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

/// One pool's memory on the `pmem` backing.
#[derive(Debug)]
pub struct PmemMemory {
    region: MmapMut,
    undo_file: File,
    undo: MmapMut,
    undo_name: String,
    /// Bytes of entries in the undo log for the transaction under way.
    undo_used: usize,
    /// Sequence number of the header's current count slot.
    undo_seq: u64,
    /// Ranges of the region changed in the transaction under way, flushed by `commit`.
    changed: Vec<(usize, usize)>,
}

/// Maps the whole of `file` copy-on-write: changes stay in this process and never reach the file.
#[allow(unsafe_code)]
fn map_private(file: &File) -> io::Result<MmapMut> {
    // SAFETY: as for `map`; writes to a private mapping touch only this process's copies.
    unsafe { memmap2::MmapOptions::new().map_copy(file) }
}

/// Maps the whole of `file` read-write and shared.
#[allow(unsafe_code)]
fn map(file: &File) -> io::Result<MmapMut> {
    // SAFETY: the mapping lives as long as the returned `MmapMut`. The files are this pool's own,
    // created and sized by this module before mapping; the region is never resized and the undo
    // log is remapped after each growth (the old map is dropped first). A data directory is
    // locked by one server, so no other process truncates them under us.
    unsafe { MmapMut::map_mut(file) }
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
    /// log) and maps them. Fails if they exist.
    pub fn create(dir: &Path, id: u64, region_bytes: u64) -> Result<PmemMemory, PmemError> {
        let (region_path, undo_path) = pool_files(dir, id);
        let create = |path: &Path, len: u64| {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(io_error(format!("creating {}", path.display())))?;
            // Blocks are reserved now: a store into a mapped hole on a full file system would
            // kill the process with SIGBUS instead of failing cleanly here.
            if let Err(error) = super::wal::storage::preallocate(&file, len) {
                let _ = std::fs::remove_file(path);
                return Err(io_error(format!("reserving {len} bytes for {}", path.display()))(error));
            }
            Ok::<_, PmemError>(file)
        };
        let region_file = create(&region_path, region_bytes)?;
        let undo_file = create(&undo_path, UNDO_INITIAL_BYTES)?;
        let mut memory = PmemMemory::map_files(&region_file, undo_file, &undo_path)?;
        memory.write_undo_header(0);
        for path in [&region_path, &undo_path] {
            File::open(path)
                .and_then(|file| file.sync_all())
                .map_err(io_error(format!("syncing {}", path.display())))?;
        }
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
        let region = map_private(&region_file).map_err(io_error(format!("mapping {}", region_path.display())))?;
        let undo = map_private(&undo_file).map_err(io_error(format!("mapping {}", undo_path.display())))?;
        let undo_name = undo_path.display().to_string();
        let mut memory =
            PmemMemory { region, undo_file, undo, undo_name, undo_used: 0, undo_seq: 0, changed: Vec::new() };
        memory.roll_back()?;
        Ok(memory)
    }

    fn map_files(region_file: &File, undo_file: File, undo_path: &Path) -> Result<PmemMemory, PmemError> {
        let undo_name = undo_path.display().to_string();
        let region = map(region_file).map_err(io_error("mapping the pool region".into()))?;
        let undo = map(&undo_file).map_err(io_error(format!("mapping {undo_name}")))?;
        Ok(PmemMemory { region, undo_file, undo, undo_name, undo_used: 0, undo_seq: 0, changed: Vec::new() })
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
        let crc = crc32c::crc32c(&slot[0..16]);
        slot[16..20].copy_from_slice(&crc.to_le_bytes());
        flush(&self.undo[at..at + SLOT_BYTES]);
        fence();
    }

    /// The current slot's count and sequence number, or `None` if neither slot is valid.
    fn current_slot(&self) -> Option<(u64, u64)> {
        SLOT_OFFSETS
            .iter()
            .map(|at| &self.undo[*at..*at + SLOT_BYTES])
            .filter(|slot| u32_at(slot, 16) == crc32c::crc32c(&slot[0..16]))
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
        let header = &self.undo[..UNDO_HEADER_BYTES];
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
            let entry = &self.undo[at..];
            let (offset, len) = (u64_at(entry, 0) as usize, u64_at(entry, 8) as usize);
            let old = entry.get(ENTRY_HEADER_BYTES..ENTRY_HEADER_BYTES.saturating_add(len));
            let old = old.ok_or_else(|| corrupt(at, format!("an entry of {len} bytes runs past the file")))?;
            if u32_at(entry, 16) != crc32c::crc32c_append(crc32c::crc32c(&entry[0..16]), old) {
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
        let new_len = (needed as u64).next_power_of_two();
        // Only a transaction larger than every earlier one (a table growth) gets here. Growing
        // can fail only when the file system is full, and the engine's transaction is already
        // decided, so there is no refusing it: the shard stops, and on restart the undo log,
        // intact up to here, rolls the transaction back.
        super::wal::storage::preallocate(&self.undo_file, new_len).expect("the pmem undo log can grow");
        self.undo = map(&self.undo_file).expect("the grown pmem undo log maps");
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
            let crc = crc32c::crc32c_append(crc32c::crc32c(&entry[0..16]), old);
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
