//! Checkpoints: copies of pool memory that let the write-ahead log be recycled and bound the
//! replay after a restart.
//!
//! A checkpoint is incremental and fuzzy. It begins at a log position `replay_from` by taking
//! every pool's set of pages changed since the previous checkpoint began; it then copies those
//! pages, a bounded number per step, while the shard keeps serving. A page is copied only when the
//! LSN of its last change is durable (the page-LSN rule), so a checkpoint never holds a change the
//! log could still lose. Each pool's pages go to a new, immutable page file; when every page is
//! copied, the page files are synced and a new manifest naming them (and `replay_from`) replaces
//! the old one atomically. Only then may the log drop records before `replay_from`.
//!
//! Why this is correct even though pages change while they are copied: log records are physical
//! redo (the bytes a transaction left), and replay applies every record from `replay_from` on. A
//! copied page holds, for each byte, a value from some moment at or after `replay_from` and at
//! or before the durable end of the log; replaying from `replay_from` rewrites every byte that
//! changed after that moment, and the bytes no record touches are already right.
//!
//! Pages whose bytes one log record holds (the pages of large values, see [`LogExtent`]) are not
//! copied: the manifest refers to the record, and the log holds the segment it lies in until no
//! checkpoint refers to it ([`crate::persistence::wal::held_name`]). Recovery applies a pool's
//! page files, then the records its manifest refers to. While held segments take more than
//! [`HELD_BYTES_PER_KEPT_BYTE_MAX`] times what the checkpoint needs of them, the least needed are
//! cleaned: their pages are copied after all, and they are recycled.
//!
//! A pool's state is its chain of page files applied in order. When a chain grows past
//! [`CHAIN_MAX`] files, the next checkpoint of that pool copies every non-zero page into one new
//! file that replaces the chain.
//!
//! Formats (little-endian), in `docs/durability.md` as well:
//!
//! ```text
//! MANIFEST   0  8 magic "FRCKMANI"     page file   0  8 magic "FRCKPAGE"
//!            8  2 version (2)                      8  2 version (1)
//!           10  2 reserved                        10  2 reserved
//!           12  4 CRC-32C of bytes 16..end        12  4 CRC-32C of bytes 16..64
//!           16  8 checkpoint sequence             16  8 pool id
//!           24  8 replay-from LSN                 24  8 file sequence
//!           32  8 next pool id                    32  8 region bytes
//!           40  4 pool count                      40  8 page count
//!           44  .. per pool: descriptor (as in    48 16 reserved
//!              the log), u32 file count, u64      64  .. entries: u64 page number, u32 CRC-32C
//!              file sequence per file, u32            of the page number and the page, u32
//!              extent count, per extent: u64          reserved, 4096 bytes of page
//!              first page, u64 pages, u64 LSN,
//!              u64 segment, u64 record offset
//!              (version 2; version 1 has none)
//! ```

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use std::collections::{BTreeSet, HashMap};

use super::entry::{Entry, ENTRY_KIND_BIT};
use super::pages::{LogExtent, PageTracker, PAGE_BYTES};
use super::record::{decode, decode_descriptor, encode_descriptor, is_all_zero, LogRecord, PoolDescriptor};
use crate::persistence::wal::{read_record_at, LogStorage, Lsn, RecordAt};

pub const MANIFEST_NAME: &str = "MANIFEST";
const MANIFEST_TEMP_NAME: &str = "MANIFEST.tmp";
const MANIFEST_MAGIC: [u8; 8] = *b"FRCKMANI";
const PAGES_MAGIC: [u8; 8] = *b"FRCKPAGE";
const FORMAT_VERSION: u16 = 1;
/// The manifest's format: version 2 adds each pool's extents kept in the log. Version 1
/// manifests (written before) are read as having none.
const MANIFEST_VERSION: u16 = 2;
const EXTENT_BYTES: usize = 40;
const PAGES_HEADER_BYTES: u64 = 64;
const ENTRY_HEADER_BYTES: u64 = 16;
/// Bytes one page takes in a page file.
pub const ENTRY_BYTES: u64 = ENTRY_HEADER_BYTES + PAGE_BYTES;
/// A pool whose chain of page files is this long is copied whole at its next checkpoint.
pub const CHAIN_MAX: usize = 8;

/// Why a checkpoint could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckpointError {
    #[error("{context}: {source}")]
    Io { context: String, source: io::Error },
    #[error("checkpoint file {file} is damaged at offset {offset}: {reason}")]
    Corrupt { file: String, offset: u64, reason: String },
    /// A page a checkpoint keeps in the log cannot be read back from it.
    #[error("pool {pool}: pages {first_page}..{end_page} kept in the log at LSN {lsn} cannot be read: {reason}")]
    InLog { pool: u64, first_page: u64, end_page: u64, lsn: Lsn, reason: String },
    /// The write-ahead log failed while the checkpoint ran: it is abandoned, never completed.
    #[error("the write-ahead log failed ({0}); the checkpoint is abandoned")]
    LogFailed(String),
}

fn io_error(context: String) -> impl FnOnce(io::Error) -> CheckpointError {
    move |source| CheckpointError::Io { context, source }
}

/// A pool as a checkpoint holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestPool {
    pub descriptor: PoolDescriptor,
    /// Sequence numbers of its page files, applied in this order.
    pub chain: Vec<u64>,
    /// Pages whose bytes log records hold, applied after the page files.
    pub in_log: Vec<LogExtent>,
}

/// The last complete checkpoint of a shard.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Manifest {
    pub seq: u64,
    /// Recovery replays the log from this LSN.
    pub replay_from: Lsn,
    pub next_pool_id: u64,
    pub pools: Vec<ManifestPool>,
}

/// The file name of page file `seq` of pool `pool`.
pub fn pages_name(pool: u64, seq: u64) -> String {
    format!("pool-{pool:016x}-{seq:016x}.pages")
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// Makes a directory's entries durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

impl Manifest {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.pools.len() * 64);
        out.extend_from_slice(&MANIFEST_MAGIC);
        out.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
        out.extend_from_slice(&[0; 6]);
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.replay_from.to_le_bytes());
        out.extend_from_slice(&self.next_pool_id.to_le_bytes());
        out.extend_from_slice(&(self.pools.len() as u32).to_le_bytes());
        for pool in &self.pools {
            encode_descriptor(&pool.descriptor, &mut out);
            out.extend_from_slice(&(pool.chain.len() as u32).to_le_bytes());
            for seq in &pool.chain {
                out.extend_from_slice(&seq.to_le_bytes());
            }
            out.extend_from_slice(&(pool.in_log.len() as u32).to_le_bytes());
            for extent in &pool.in_log {
                for field in [extent.first_page, extent.pages, extent.lsn, extent.at.segment, extent.at.position] {
                    out.extend_from_slice(&field.to_le_bytes());
                }
            }
        }
        let crc = crate::checksum::crc32c(&out[16..]);
        out[12..16].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a manifest read from `file` (named in errors).
    pub fn decode(bytes: &[u8], file: &str) -> Result<Manifest, CheckpointError> {
        let corrupt = |offset: usize, reason: String| CheckpointError::Corrupt {
            file: file.to_string(),
            offset: offset as u64,
            reason,
        };
        if bytes.len() < 44 || bytes[0..8] != MANIFEST_MAGIC {
            return Err(corrupt(0, "not a checkpoint manifest (bad magic or too short)".into()));
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if !(1..=MANIFEST_VERSION).contains(&version) {
            return Err(corrupt(8, format!("format version {version}; this build reads 1 to {MANIFEST_VERSION}")));
        }
        let (stored, computed) = (u32_at(bytes, 12), crate::checksum::crc32c(&bytes[16..]));
        if stored != computed {
            return Err(corrupt(12, format!("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")));
        }
        let mut manifest = Manifest {
            seq: u64_at(bytes, 16),
            replay_from: u64_at(bytes, 24),
            next_pool_id: u64_at(bytes, 32),
            pools: Vec::new(),
        };
        let count = u32_at(bytes, 40);
        let mut at = 44;
        for _ in 0..count {
            let (descriptor, used) =
                decode_descriptor(&bytes[at..]).map_err(|error| corrupt(at + error.at, error.reason.into()))?;
            at += used;
            let entry_at = at;
            let short = || corrupt(entry_at, "the manifest ends inside a pool entry".into());
            let chain_len = bytes.get(at..at + 4).map(|_| u32_at(bytes, at)).ok_or_else(short)? as usize;
            at += 4;
            let chain_bytes = bytes.get(at..at.saturating_add(chain_len * 8)).ok_or_else(short)?;
            let chain = chain_bytes.chunks_exact(8).map(|raw| u64_at(raw, 0)).collect();
            at += chain_len * 8;
            let mut in_log = Vec::new();
            if version >= 2 {
                let count = bytes.get(at..at + 4).map(|_| u32_at(bytes, at)).ok_or_else(short)? as usize;
                at += 4;
                let raw = bytes.get(at..at.saturating_add(count.saturating_mul(EXTENT_BYTES))).ok_or_else(short)?;
                for (index, raw) in raw.chunks_exact(EXTENT_BYTES).enumerate() {
                    let extent = LogExtent {
                        first_page: u64_at(raw, 0),
                        pages: u64_at(raw, 8),
                        lsn: u64_at(raw, 16),
                        at: RecordAt { segment: u64_at(raw, 24), position: u64_at(raw, 32) },
                    };
                    let after_previous =
                        in_log.last().is_none_or(|last: &LogExtent| last.end_page() <= extent.first_page);
                    let region_pages = descriptor.region_bytes.div_ceil(PAGE_BYTES);
                    let inside = extent.pages > 0
                        && extent.first_page.checked_add(extent.pages).is_some_and(|end| end <= region_pages);
                    if !after_previous || !inside {
                        return Err(corrupt(
                            at + index * EXTENT_BYTES,
                            "an extent kept in the log overlaps another or lies outside the pool".into(),
                        ));
                    }
                    in_log.push(extent);
                }
                at += count * EXTENT_BYTES;
            }
            manifest.pools.push(ManifestPool { descriptor, chain, in_log });
        }
        if at != bytes.len() {
            return Err(corrupt(at, "trailing bytes after the last pool".into()));
        }
        Ok(manifest)
    }

    /// The manifest in `dir`, or `None` if no checkpoint was ever completed.
    pub fn read(dir: &Path) -> Result<Option<Manifest>, CheckpointError> {
        let path = dir.join(MANIFEST_NAME);
        match std::fs::read(&path) {
            Ok(bytes) => Manifest::decode(&bytes, &path.display().to_string()).map(Some),
            Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(io_error(format!("reading {}", path.display()))(error)),
        }
    }

    /// Replaces the manifest in `dir` atomically and durably: a temporary file, synced, renamed
    /// over the old one, and the directory synced. A crash at any point leaves either manifest.
    pub fn write(&self, dir: &Path) -> Result<(), CheckpointError> {
        let temp = dir.join(MANIFEST_TEMP_NAME);
        let context = || format!("writing {}", temp.display());
        let mut file = File::create(&temp).map_err(io_error(context()))?;
        file.write_all(&self.encode()).map_err(io_error(context()))?;
        file.sync_all().map_err(io_error(context()))?;
        std::fs::rename(&temp, dir.join(MANIFEST_NAME))
            .map_err(io_error(format!("renaming {} into place", temp.display())))?;
        sync_dir(dir).map_err(io_error(format!("syncing {}", dir.display())))
    }

    /// Every page file this manifest references.
    pub fn files(&self) -> impl Iterator<Item = String> + '_ {
        self.pools.iter().flat_map(|pool| pool.chain.iter().map(|seq| pages_name(pool.descriptor.id, *seq)))
    }

    /// The log segments this manifest refers to (which the log must hold).
    pub fn held_segments(&self) -> BTreeSet<u64> {
        self.pools.iter().flat_map(|pool| pool.in_log.iter().map(|extent| extent.at.segment)).collect()
    }
}

/// Applies a pool's chain of page files to `region` (zeroed, `descriptor.region_bytes` long),
/// then the pages it keeps in the log (read from `log`). Returns how many pages were loaded.
pub fn load_pool<S: LogStorage>(
    dir: &Path,
    log: &S,
    pool: &ManifestPool,
    region: &mut [u8],
) -> Result<u64, CheckpointError> {
    let mut loaded = 0;
    for seq in &pool.chain {
        loaded += load_pages(dir, pool.descriptor.id, *seq, pool.descriptor.region_bytes, region)?;
    }
    let mut last: Option<(RecordAt, Vec<u8>)> = None;
    for extent in &pool.in_log {
        let failed = |reason: String| CheckpointError::InLog {
            pool: pool.descriptor.id,
            first_page: extent.first_page,
            end_page: extent.end_page(),
            lsn: extent.lsn,
            reason,
        };
        if last.as_ref().is_none_or(|(at, _)| *at != extent.at) {
            let payload = read_record_at(log, extent.at, extent.lsn).map_err(|error| failed(error.to_string()))?;
            last = Some((extent.at, payload));
        }
        let payload = &last.as_ref().expect("read above").1;
        apply_extent(pool.descriptor.id, extent, payload, region).map_err(failed)?;
        loaded += extent.pages;
    }
    Ok(loaded)
}

/// Copies the pages of `extent` into `region` (the pool's memory) from `payload`, the log record
/// that holds them.
fn apply_extent(pool: u64, extent: &LogExtent, payload: &[u8], region: &mut [u8]) -> Result<(), String> {
    let (start, end) = (extent.first_page * PAGE_BYTES, extent.end_page() * PAGE_BYTES);
    if end > region.len() as u64 {
        return Err("the pages lie outside the pool's region".into());
    }
    extent_pages(pool, extent, payload, &mut region[start as usize..end as usize])
}

/// Copies the pages of `extent` into `pages` (as long as they are) from `payload`, the log record
/// that holds them: a transaction of pool `pool` whose ranges cover every byte of them (in a
/// replicated shard's log, framed as a normal entry of its group's log).
fn extent_pages(pool: u64, extent: &LogExtent, payload: &[u8], pages: &mut [u8]) -> Result<(), String> {
    let record = match payload.first() {
        Some(kind) if kind & ENTRY_KIND_BIT != 0 => match Entry::decode(payload) {
            Some(Entry::Normal { record, .. }) => record,
            _ => return Err("the entry there holds no record".into()),
        },
        _ => payload,
    };
    let Ok(LogRecord::Transaction { pool: record_pool, ranges }) = decode(record) else {
        return Err("the record there is not a transaction".into());
    };
    if record_pool != pool {
        return Err(format!("the record there changes pool {record_pool}"));
    }
    let (start, end) = (extent.first_page * PAGE_BYTES, extent.end_page() * PAGE_BYTES);
    let mut covered = 0;
    for (offset, len, bytes) in ranges {
        let (from, to) = (offset.max(start), (offset + u64::from(len)).min(end));
        if from >= to {
            continue;
        }
        let target = &mut pages[(from - start) as usize..(to - start) as usize];
        match bytes {
            Some(bytes) => target.copy_from_slice(&bytes[(from - offset) as usize..(to - offset) as usize]),
            None => target.fill(0),
        }
        covered += to - from;
    }
    if covered != end - start {
        return Err(format!("the record holds {covered} of the pages' {} bytes", end - start));
    }
    Ok(())
}

fn load_pages(dir: &Path, pool: u64, seq: u64, region_bytes: u64, region: &mut [u8]) -> Result<u64, CheckpointError> {
    let path = dir.join(pages_name(pool, seq));
    let name = path.display().to_string();
    let corrupt = |offset: u64, reason: String| CheckpointError::Corrupt { file: name.clone(), offset, reason };
    let file = File::open(&path).map_err(io_error(format!("opening {name}")))?;
    let len = file.metadata().map_err(io_error(format!("reading the size of {name}")))?.len();
    let mut header = [0u8; PAGES_HEADER_BYTES as usize];
    if len < PAGES_HEADER_BYTES {
        return Err(corrupt(0, "shorter than a page file header".into()));
    }
    file.read_exact_at(&mut header, 0).map_err(io_error(format!("reading {name}")))?;
    if header[0..8] != PAGES_MAGIC {
        return Err(corrupt(0, "not a checkpoint page file (bad magic)".into()));
    }
    let version = u16::from_le_bytes([header[8], header[9]]);
    if version != FORMAT_VERSION {
        return Err(corrupt(8, format!("format version {version}; this build reads {FORMAT_VERSION}")));
    }
    if u32_at(&header, 12) != crate::checksum::crc32c(&header[16..]) {
        return Err(corrupt(12, "header checksum mismatch".into()));
    }
    let (file_pool, file_seq, file_region, count) =
        (u64_at(&header, 16), u64_at(&header, 24), u64_at(&header, 32), u64_at(&header, 40));
    if (file_pool, file_seq, file_region) != (pool, seq, region_bytes) {
        return Err(corrupt(
            16,
            format!(
                "the header names pool {file_pool}, file {file_seq}, region of {file_region} bytes; the manifest \
                 expects pool {pool}, file {seq}, {region_bytes} bytes"
            ),
        ));
    }
    if len < PAGES_HEADER_BYTES + count * ENTRY_BYTES {
        return Err(corrupt(40, format!("the header counts {count} pages but the file holds fewer")));
    }
    const ENTRIES_PER_READ: u64 = 256;
    let mut buffer = vec![0u8; (ENTRIES_PER_READ * ENTRY_BYTES) as usize];
    let mut index = 0;
    while index < count {
        let entries = (count - index).min(ENTRIES_PER_READ);
        let offset = PAGES_HEADER_BYTES + index * ENTRY_BYTES;
        let chunk = &mut buffer[..(entries * ENTRY_BYTES) as usize];
        file.read_exact_at(chunk, offset).map_err(io_error(format!("reading {name}")))?;
        for (k, entry) in chunk.chunks_exact(ENTRY_BYTES as usize).enumerate() {
            let at = offset + k as u64 * ENTRY_BYTES;
            let page = u64_at(entry, 0);
            let crc = crate::checksum::crc32c_append(crate::checksum::crc32c(&entry[0..8]), &entry[16..]);
            if crc != u32_at(entry, 8) {
                return Err(corrupt(at, format!("checksum mismatch in the entry of page {page}")));
            }
            let start = page.checked_mul(PAGE_BYTES).filter(|start| *start < region.len() as u64);
            let start = start.ok_or_else(|| corrupt(at, format!("page {page} lies outside the pool's region")))?;
            let len = (region.len() as u64 - start).min(PAGE_BYTES) as usize;
            region[start as usize..start as usize + len].copy_from_slice(&entry[16..16 + len]);
        }
        index += entries;
    }
    Ok(count)
}

/// Writes the pages `pool` keeps in the log (read from `log`) into a new page file `seq` of the
/// pool in `dir`, synced: what a copy of the checkpoint that must stand without the log (a
/// replica's snapshot) holds instead of its extents. Returns how many pages it wrote.
pub fn write_in_log_pages<S: LogStorage>(
    dir: &Path,
    log: &S,
    pool: &ManifestPool,
    seq: u64,
) -> Result<u64, CheckpointError> {
    let id = pool.descriptor.id;
    let name = pages_name(id, seq);
    let context = || format!("writing {}", dir.join(&name).display());
    let file = OpenOptions::new().write(true).create_new(true).open(dir.join(&name)).map_err(io_error(context()))?;
    let mut offset = PAGES_HEADER_BYTES;
    let mut count = 0;
    for extent in &pool.in_log {
        let failed = |reason: String| CheckpointError::InLog {
            pool: id,
            first_page: extent.first_page,
            end_page: extent.end_page(),
            lsn: extent.lsn,
            reason,
        };
        let payload = read_record_at(log, extent.at, extent.lsn).map_err(|error| failed(error.to_string()))?;
        let mut pages = vec![0u8; (extent.pages * PAGE_BYTES) as usize];
        extent_pages(id, extent, &payload, &mut pages).map_err(failed)?;
        let mut entries = Vec::with_capacity((extent.pages * ENTRY_BYTES) as usize);
        for (index, page) in pages.chunks_exact(PAGE_BYTES as usize).enumerate() {
            let number = extent.first_page + index as u64;
            let crc = crate::checksum::crc32c_append(crate::checksum::crc32c(&number.to_le_bytes()), page);
            entries.extend_from_slice(&number.to_le_bytes());
            entries.extend_from_slice(&crc.to_le_bytes());
            entries.extend_from_slice(&[0; 4]);
            entries.extend_from_slice(page);
        }
        file.write_all_at(&entries, offset).map_err(io_error(context()))?;
        offset += entries.len() as u64;
        count += extent.pages;
    }
    let header = pages_header(id, seq, pool.descriptor.region_bytes, count);
    file.write_all_at(&header, 0).map_err(io_error(context()))?;
    file.sync_data().map_err(io_error(context()))?;
    Ok(count)
}

/// What a checkpoint needs of a live pool.
#[derive(Debug, Clone)]
pub struct CheckpointPool {
    pub descriptor: PoolDescriptor,
    pub pages: Arc<Mutex<PageTracker>>,
    /// The pool's memory file; pages are copied out of it with positional reads.
    pub region: Arc<File>,
}

#[derive(Debug)]
struct OpenPages {
    seq: u64,
    file: Arc<File>,
    entries: u64,
}

#[derive(Debug)]
struct ActivePool {
    source: CheckpointPool,
    /// Pages to copy, in order.
    pages: Vec<u64>,
    next: usize,
    /// Copy every non-zero page and replace the chain.
    whole: bool,
    chain: Vec<u64>,
    open: Option<OpenPages>,
    /// Pages kept in the log instead of copied, as the pool's tracker had them at the start.
    in_log: Vec<LogExtent>,
}

#[derive(Debug)]
struct Active {
    replay_from: Lsn,
    next_pool_id: u64,
    pools: Vec<ActivePool>,
    current: usize,
}

/// The next thing a checkpoint in progress needs.
#[derive(Debug)]
pub enum Step {
    /// Write these pages off the shard's thread ([`PageWrite::run`]), then step again.
    Write(PageWrite),
    /// The next page's last change (at this LSN) is not durable yet: have the log synced and
    /// step again once it is.
    WaitDurable(Lsn),
    /// Every page is copied: run this off the shard's thread, then call
    /// [`Checkpointer::complete`] with its result.
    Finish(FinishJob),
    /// Nothing to write in this step (its pages were all zeros); step again.
    Continue,
}

/// Pages copied out of a pool, bound for its page file.
#[derive(Debug)]
pub struct PageWrite {
    file: Arc<File>,
    name: String,
    offset: u64,
    bytes: Vec<u8>,
}

impl PageWrite {
    /// How many pages this write holds.
    pub fn pages(&self) -> u64 {
        self.bytes.len() as u64 / ENTRY_BYTES
    }

    /// Writes the pages (no sync: the finish syncs every page file once). Returns the buffer
    /// they were in, for [`Checkpointer::recycle`].
    pub fn run(self) -> Result<Vec<u8>, CheckpointError> {
        self.file.write_all_at(&self.bytes, self.offset).map_err(io_error(format!("writing {}", self.name)))?;
        Ok(self.bytes)
    }
}

/// The end of a checkpoint: headers written, page files synced, the manifest replaced.
#[derive(Debug)]
pub struct FinishJob {
    dir: PathBuf,
    headers: Vec<(Arc<File>, String, [u8; PAGES_HEADER_BYTES as usize])>,
    manifest: Manifest,
    obsolete: Vec<String>,
}

impl FinishJob {
    /// Does the I/O; returns the manifest now in place. Page files the new manifest no longer
    /// references are removed afterwards (a failure to remove one is harmless: recovery removes
    /// unreferenced files).
    ///
    /// `log_failure` is asked, once the page files are synced and just before the manifest is
    /// written, whether the log has failed: then pool memory may hold changes the log never
    /// recorded, the copied pages cannot be trusted, and no manifest is written.
    pub fn run(self, log_failure: impl Fn() -> Option<String>) -> Result<Manifest, CheckpointError> {
        for (file, name, header) in &self.headers {
            file.write_all_at(header, 0).map_err(io_error(format!("writing {name}")))?;
            file.sync_data().map_err(io_error(format!("syncing {name}")))?;
        }
        sync_dir(&self.dir).map_err(io_error(format!("syncing {}", self.dir.display())))?;
        if let Some(reason) = log_failure() {
            return Err(CheckpointError::LogFailed(reason));
        }
        self.manifest.write(&self.dir)?;
        for name in &self.obsolete {
            let _ = std::fs::remove_file(self.dir.join(name));
        }
        Ok(self.manifest)
    }

    pub fn replay_from(&self) -> Lsn {
        self.manifest.replay_from
    }
}

/// A shard's checkpoints: the last complete one and the one in progress, if any.
#[derive(Debug)]
pub struct Checkpointer {
    dir: PathBuf,
    manifest: Manifest,
    next_file_seq: u64,
    active: Option<Active>,
    /// The buffer the last write's pages were in, for the next step: a fresh one per step was
    /// a megabyte allocated and faulted in page by page, a tenth of the shard's time during
    /// large puts.
    spare: Vec<u8>,
}

fn pages_header(pool: u64, seq: u64, region_bytes: u64, count: u64) -> [u8; PAGES_HEADER_BYTES as usize] {
    let mut header = [0u8; PAGES_HEADER_BYTES as usize];
    header[0..8].copy_from_slice(&PAGES_MAGIC);
    header[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[16..24].copy_from_slice(&pool.to_le_bytes());
    header[24..32].copy_from_slice(&seq.to_le_bytes());
    header[32..40].copy_from_slice(&region_bytes.to_le_bytes());
    header[40..48].copy_from_slice(&count.to_le_bytes());
    let crc = crate::checksum::crc32c(&header[16..]);
    header[12..16].copy_from_slice(&crc.to_le_bytes());
    header
}

impl Checkpointer {
    /// A checkpointer for `dir`, whose last complete checkpoint is `manifest`.
    pub fn new(dir: PathBuf, manifest: Manifest) -> Checkpointer {
        let next_file_seq = manifest.pools.iter().flat_map(|pool| pool.chain.iter().copied()).max().unwrap_or(0) + 1;
        Checkpointer { dir, manifest, next_file_seq, active: None, spare: Vec::new() }
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    pub fn in_progress(&self) -> bool {
        self.active.is_some()
    }

    /// Begins a checkpoint at log position `replay_from` (the LSN the next record will get) over
    /// `pools`, every pool of the shard. Takes each pool's changed pages, less those kept in the
    /// log. `held` are the segments the log holds for the last checkpoint (each of
    /// `segment_bytes`, or its records' extent if larger): while those this checkpoint would still
    /// refer to take more than [`HELD_BYTES_PER_KEPT_BYTE_MAX`] times the bytes of the pages it
    /// needs of them, the least needed is cleaned, its pages copied instead, so held segments take
    /// at most about that many times the bytes of the pages they keep.
    pub fn begin(
        &mut self,
        replay_from: Lsn,
        next_pool_id: u64,
        pools: Vec<CheckpointPool>,
        held: &BTreeSet<u64>,
        segment_bytes: u64,
    ) {
        let extents: Vec<Vec<LogExtent>> = pools
            .iter()
            .map(|pool| pool.pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner).in_log())
            .collect();
        let cleaned = segments_to_clean(extents.iter().flatten(), held, segment_bytes);
        let pools = pools
            .into_iter()
            .zip(extents)
            .map(|(source, extents)| {
                let kept = self.manifest.pools.iter().find(|pool| pool.descriptor.id == source.descriptor.id);
                let whole = kept.is_some_and(|pool| pool.chain.len() >= CHAIN_MAX);
                let mut tracker = source.pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                let dirty = tracker.take_dirty();
                let (cleaned, in_log): (Vec<LogExtent>, Vec<LogExtent>) =
                    extents.into_iter().partition(|extent| cleaned.contains(&extent.at.segment));
                for extent in &cleaned {
                    tracker.forget(extent);
                }
                let candidates: Box<dyn Iterator<Item = u64>> =
                    if whole { Box::new(0..tracker.pages()) } else { Box::new(dirty.into_iter()) };
                let mut pages: Vec<u64> = candidates
                    .filter(|page| !covers(&in_log, *page))
                    .chain(cleaned.iter().flat_map(|extent| extent.first_page..extent.end_page()))
                    .collect();
                drop(tracker);
                pages.sort_unstable();
                pages.dedup();
                let chain = match kept {
                    Some(pool) if !whole => pool.chain.clone(),
                    _ => Vec::new(),
                };
                ActivePool { source, pages, next: 0, whole, chain, open: None, in_log }
            })
            .collect();
        self.active = Some(Active { replay_from, next_pool_id, pools, current: 0 });
    }

    /// Copies up to `budget` pages whose last change is at or below `durable_lsn`.
    pub fn step(&mut self, durable_lsn: Lsn, budget: usize) -> Result<Step, CheckpointError> {
        let Some(active) = self.active.as_mut() else {
            return Err(CheckpointError::Io {
                context: "stepping a checkpoint".into(),
                source: io::Error::other("no checkpoint is in progress"),
            });
        };
        let replay_from = active.replay_from;
        let Some(pool) = active.pools.get_mut(active.current) else {
            // The log is recycled up to `replay_from` once this checkpoint is in place, so every
            // record before it must be durable first (a page-less record, such as a pool's
            // deletion, was never waited for while copying).
            if durable_lsn + 1 < active.replay_from {
                return Ok(Step::WaitDurable(active.replay_from - 1));
            }
            return Ok(Step::Finish(self.finish_job()));
        };
        let mut bytes = std::mem::take(&mut self.spare);
        bytes.clear();
        let mut copied = 0;
        let tracker = Arc::clone(&pool.source.pages);
        let tracker = tracker.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while pool.next < pool.pages.len() && copied < budget {
            let page = pool.pages[pool.next];
            let lsn = tracker.page_lsn(page);
            if lsn > durable_lsn {
                if bytes.is_empty() {
                    return Ok(Step::WaitDurable(lsn));
                }
                break;
            }
            if tracker.is_free(page) {
                // Freed by a durable record: whatever the chain holds for it is never read.
                pool.next += 1;
                copied += 1;
                continue;
            }
            if pool.whole && tracker.written_whole_since(page, replay_from) {
                // A whole copy takes every page, those written since it began too: one that a
                // record replayed from `replay_from` writes whole (a large value's piece arriving
                // meanwhile) needs no copy, as replay rewrites every byte of it.
                pool.next += 1;
                copied += 1;
                continue;
            }
            let start = bytes.len();
            bytes.resize(start + ENTRY_BYTES as usize, 0);
            let (head, body) = bytes[start..].split_at_mut(ENTRY_HEADER_BYTES as usize);
            // The last page of a region whose size is not a multiple of the page size is short;
            // its entry is padded with zeros.
            let readable = pool.source.descriptor.region_bytes.saturating_sub(page * PAGE_BYTES).min(PAGE_BYTES);
            pool.source
                .region
                .read_exact_at(&mut body[..readable as usize], page * PAGE_BYTES)
                .map_err(io_error(format!("copying page {page} of pool '{}'", pool.source.descriptor.name)))?;
            pool.next += 1;
            copied += 1;
            if pool.whole && is_all_zero(body) {
                bytes.truncate(start);
                continue;
            }
            head[0..8].copy_from_slice(&page.to_le_bytes());
            let crc = crate::checksum::crc32c_append(crate::checksum::crc32c(&head[0..8]), body);
            head[8..12].copy_from_slice(&crc.to_le_bytes());
        }
        drop(tracker);
        if pool.next == pool.pages.len() {
            active.current += 1;
        }
        if bytes.is_empty() {
            return Ok(Step::Continue);
        }
        let open = match &mut pool.open {
            Some(open) => open,
            None => {
                let seq = self.next_file_seq;
                self.next_file_seq += 1;
                let name = pages_name(pool.source.descriptor.id, seq);
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(self.dir.join(&name))
                    .map_err(io_error(format!("creating {name}")))?;
                pool.open.insert(OpenPages { seq, file: Arc::new(file), entries: 0 })
            }
        };
        let entries = bytes.len() as u64 / ENTRY_BYTES;
        let write = PageWrite {
            file: Arc::clone(&open.file),
            name: pages_name(pool.source.descriptor.id, open.seq),
            offset: PAGES_HEADER_BYTES + open.entries * ENTRY_BYTES,
            bytes,
        };
        open.entries += entries;
        Ok(Step::Write(write))
    }

    /// Takes back the buffer of a [`PageWrite`] that ran, for the next step to fill.
    pub fn recycle(&mut self, mut bytes: Vec<u8>) {
        bytes.clear();
        self.spare = bytes;
    }

    fn finish_job(&self) -> FinishJob {
        let active = self.active.as_ref().expect("called with a checkpoint in progress");
        let mut headers = Vec::new();
        let mut pools = Vec::new();
        for pool in &active.pools {
            let id = pool.source.descriptor.id;
            let mut chain = pool.chain.clone();
            if let Some(open) = &pool.open {
                let header = pages_header(id, open.seq, pool.source.descriptor.region_bytes, open.entries);
                headers.push((Arc::clone(&open.file), pages_name(id, open.seq), header));
                chain.push(open.seq);
            }
            pools.push(ManifestPool { descriptor: pool.source.descriptor.clone(), chain, in_log: pool.in_log.clone() });
        }
        let manifest = Manifest {
            seq: self.manifest.seq + 1,
            replay_from: active.replay_from,
            next_pool_id: active.next_pool_id,
            pools,
        };
        let keep: std::collections::HashSet<String> = manifest.files().collect();
        let obsolete = self.manifest.files().filter(|name| !keep.contains(name)).collect();
        FinishJob { dir: self.dir.clone(), headers, manifest, obsolete }
    }

    /// Records a finished checkpoint (the result of [`FinishJob::run`]). On failure the
    /// checkpoint is abandoned: its pages count as changed again, for the next one.
    pub fn complete(&mut self, finished: Result<Manifest, CheckpointError>) -> Result<Lsn, CheckpointError> {
        match finished {
            Ok(manifest) => {
                self.active = None;
                let replay_from = manifest.replay_from;
                self.manifest = manifest;
                Ok(replay_from)
            }
            Err(error) => {
                self.abandon();
                Err(error)
            }
        }
    }

    /// Gives up the checkpoint in progress (after an I/O error); its pages count as changed
    /// again. Its partial page files are removed by the next recovery.
    pub fn abandon(&mut self) {
        if let Some(active) = self.active.take() {
            for pool in active.pools {
                let mut tracker = pool.source.pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                tracker.restore_dirty(&pool.pages);
            }
        }
    }
}

/// Whether one of `extents` (sorted, disjoint) holds `page`.
fn covers(extents: &[LogExtent], page: u64) -> bool {
    let after = extents.partition_point(|extent| extent.first_page <= page);
    after > 0 && extents[after - 1].end_page() > page
}

/// Held log segments may take this many times the bytes of the pages checkpoints keep in them
/// before the cleaner copies pages to free some. The trade is disk space against writes: under
/// random overwrites of 256 values of 1 MiB (`bench/compare --only large-values`), a bound of 2
/// had checkpoints copy 0.22 bytes per value byte (1.28 disk bytes per value byte in all), 3 had
/// them copy 0.15 (1.21), 4 copied 0.08 (1.14), with 2.0 times the kept bytes held at the end.
pub const HELD_BYTES_PER_KEPT_BYTE_MAX: u64 = 4;

/// The held segments to clean (see [`Checkpointer::begin`]): while the held segments that
/// `extents` still need take more than [`HELD_BYTES_PER_KEPT_BYTE_MAX`] times the bytes they need
/// of them, the least needed one, by fraction, is cleaned (its needed bytes copied, its size
/// freed). Cleaning the emptiest first copies the least for the space it frees (as a
/// log-structured file system's cleaner does), and none is cleaned while the bound holds.
fn segments_to_clean<'a>(
    extents: impl Iterator<Item = &'a LogExtent>,
    held: &BTreeSet<u64>,
    segment_bytes: u64,
) -> BTreeSet<u64> {
    let mut needed: HashMap<u64, (u64, u64)> = HashMap::new();
    for extent in extents.filter(|extent| held.contains(&extent.at.segment)) {
        let (bytes, size) = needed.entry(extent.at.segment).or_insert((0, segment_bytes));
        *bytes += extent.pages * PAGE_BYTES;
        *size = (*size).max(extent.at.position + extent.pages * PAGE_BYTES);
    }
    let mut segments: Vec<(u64, u64, u64)> =
        needed.into_iter().map(|(segment, (bytes, size))| (segment, bytes, size)).collect();
    segments.sort_unstable_by(|a, b| (u128::from(a.1) * u128::from(b.2)).cmp(&(u128::from(b.1) * u128::from(a.2))));
    let mut held_bytes: u64 = segments.iter().map(|(_, _, size)| size).sum();
    let mut needed_bytes: u64 = segments.iter().map(|(_, bytes, _)| bytes).sum();
    let mut cleaned = BTreeSet::new();
    for (segment, bytes, size) in segments {
        if held_bytes <= HELD_BYTES_PER_KEPT_BYTE_MAX * needed_bytes {
            break;
        }
        cleaned.insert(segment);
        held_bytes -= size;
        needed_bytes -= bytes;
    }
    cleaned
}

/// Removes files in `dir` that no complete checkpoint references: page files of a checkpoint a
/// crash interrupted, and a stray temporary manifest. Returns how many were removed.
pub fn remove_unreferenced(dir: &Path, manifest: &Manifest) -> Result<usize, CheckpointError> {
    let keep: std::collections::HashSet<String> = manifest.files().collect();
    let mut removed = 0;
    let entries = std::fs::read_dir(dir).map_err(io_error(format!("listing {}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(io_error(format!("listing {}", dir.display())))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else { continue };
        let stray = (name.ends_with(".pages") && !keep.contains(&name)) || name == MANIFEST_TEMP_NAME;
        if stray {
            std::fs::remove_file(entry.path()).map_err(io_error(format!("removing {}", entry.path().display())))?;
            removed += 1;
        }
    }
    if removed > 0 {
        sync_dir(dir).map_err(io_error(format!("syncing {}", dir.display())))?;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An extent of `pages` pages in segment `segment`.
    fn extent(segment: u64, first_page: u64, pages: u64) -> LogExtent {
        LogExtent { first_page, pages, lsn: 1, at: RecordAt { segment, position: 64 } }
    }

    /// Nothing is cleaned while held segments take at most four times what is needed of them,
    /// even a segment needed a tenth; past the bound, the emptiest go first, only as many as the
    /// bound needs; segments not held are never cleaned.
    #[test]
    fn the_cleaner_takes_the_emptiest_held_segments_only_past_the_bound() {
        const SEGMENT: u64 = 100 * PAGE_BYTES;
        assert_eq!(HELD_BYTES_PER_KEPT_BYTE_MAX, 4, "the cases below are written for this bound");
        let held: BTreeSet<u64> = [1, 2, 3, 4].into();
        let within = [extent(1, 0, 10), extent(2, 100, 40), extent(3, 200, 50)];
        assert!(segments_to_clean(within.iter(), &held, SEGMENT).is_empty(), "300 held for 100 needed");
        let past = [extent(1, 0, 40), extent(2, 100, 5), extent(3, 200, 40), extent(4, 300, 10), extent(9, 400, 1)];
        let cleaned = segments_to_clean(past.iter(), &held, SEGMENT);
        assert_eq!(cleaned, [2].into(), "400 held for 95 needed: the emptiest goes, leaving 300 for 90");
        let mostly_free = [extent(1, 0, 20), extent(2, 100, 5), extent(3, 200, 15), extent(4, 300, 10)];
        let cleaned = segments_to_clean(mostly_free.iter(), &held, SEGMENT);
        assert_eq!(cleaned, held, "each needed less than a quarter: all go, emptiest first, until none is left");
    }
}
