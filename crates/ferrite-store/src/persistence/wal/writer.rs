//! Appending to the log: records are buffered, placed in segments as they are appended, and made
//! durable together by a commit.
//!
//! A commit has two halves so that the `fdatasync` can run off the shard's thread: [`WalWriter::
//! take_batch`] hands over every buffered record (memory only, quick), [`CommitBatch::write`] does
//! the I/O (on any thread, while the shard keeps appending), and [`WalWriter::finish_batch`]
//! publishes the new durable LSN. [`WalWriter::commit`] does all three in place.
//!
//! A batch may also be written without its sync ([`BatchSync::Later`]): records nobody waits for yet
//! (the pieces of a large value, a backlog of `async` writes) reach the device as they come, and
//! the next batch that syncs makes them durable with its own `fdatasync`, as one large write
//! followed by one flush does, instead of a flush per megabyte (which a device with a volatile
//! write cache pays for in bandwidth). The order rule holds across batches: a segment file is written only once every
//! other file with unsynced writes has been synced, so a power cut never keeps records of a
//! later segment while it loses their predecessors in an earlier one; inside a segment, a cut
//! that keeps some unsynced sectors and not others leaves a torn tail, as it always could.
//!
//! Batches are laid out for direct I/O: each run of a batch starts and ends on a block boundary
//! of its file ([`DIRECT_BLOCK_BYTES`]) and of memory, so the file system can take it straight
//! from the buffer (`O_DIRECT`) instead of copying it into the page cache first, a copy that took
//! a fifth of a shard's CPU time under large puts. A run that starts inside a block begins with
//! that block's bytes as the log last wrote them (its head), and the last block of a run is
//! padded with zeros past the log's end. Writing the head again is safe: a power cut during the
//! write keeps, of every sector, the old bytes or the new, and they are the same bytes where
//! records were already durable; the padding lies where the next records go, and the next batch
//! writes over it. Where the layout cannot hold (a segment whose size is not a multiple of the
//! block, a buffer that moved in memory, a log just opened whose tail could not be read), the run
//! is written as it is, through the page cache.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::format::{
    new_salt, record_bytes, seal_record, segment_name, Lsn, RecordPlace, SegmentHeader, RECORD_ALIGN_BYTES,
    RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES,
};
use super::held::{held_name, parse_held_name, RecordAt};
use super::reader::Recovered;
use super::storage::{LogStorage, SegmentFile};
use super::WalError;

/// The shape of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalConfig {
    /// Size of each preallocated segment file. A record too large for one gets a segment of its
    /// own, sized to fit.
    pub segment_bytes: u64,
}

impl WalConfig {
    pub const DEFAULT_SEGMENT_BYTES: u64 = 16 << 20;
}

impl Default for WalConfig {
    fn default() -> Self {
        WalConfig { segment_bytes: WalConfig::DEFAULT_SEGMENT_BYTES }
    }
}

#[derive(Debug)]
struct Segment<F> {
    seq: u64,
    file: Arc<F>,
    /// The file's size: records fill it up to here.
    bytes: u64,
    /// LSN of the last record placed in the segment; `None` while it holds none.
    last_lsn: Option<Lsn>,
    /// The salt of the header written when the segment was started (0 while unstarted).
    salt: u64,
}

/// Bytes of `pending` destined for one place in one segment.
#[derive(Debug, Clone, Copy)]
struct Run {
    segment: usize,
    position: u64,
    start: usize,
    end: usize,
}

/// The unit of direct I/O a batch's runs are laid out in: their file positions, lengths and
/// places in memory are multiples of it. The page size, which every device's logical block
/// divides.
pub const DIRECT_BLOCK_BYTES: u64 = 4096;
const BLOCK: usize = DIRECT_BLOCK_BYTES as usize;

/// Most records a batch written without its sync may leave in one commit: past it the batch
/// syncs anyway. A record's place counts its position in its commit in 32 bits, and a client that
/// only stages pieces it never commits would otherwise grow one commit for ever.
pub const COMMIT_RECORDS_MAX: u64 = 1 << 20;

/// Bytes reserved for a fresh buffer of records: room for the backlog a shard lets gather (4
/// MiB) and a direct put's piece (2 MiB) without growing, so a buffer rarely moves in memory (a
/// moved buffer loses its block alignment until the next batch); within what a finished batch's
/// buffer may keep.
const BUFFER_BYTES_RESERVED: usize = RETAINED_BUFFER_BYTES_MAX - BLOCK;

/// The size of a transparent huge page (x86-64, and arm64 with 4 KiB pages).
const HUGE_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// Asks the kernel to back a new buffer's allocation of `capacity` bytes at `start` with huge
/// pages where whole ones fit (`MADV_HUGEPAGE`: under the usual `madvise` setting of transparent
/// huge pages, only memory that asks gets them). An `O_DIRECT` write pins every page it is taken
/// from, and a large value's batches are megabytes: with 4 KiB pages the pinning was 6 % of the
/// server's CPU under 64 MiB puts, and copying pieces into the buffer missed the TLB more.
/// Measured, sync 64 MiB direct puts went faster in 13 of 15 pairs, 1 MiB and 4 KiB ones even
/// (`docs/benchmarks.md`). The advice covers every page the allocation touches, so its mapping
/// stays one piece: a buffer that a large batch grows is then moved by the kernel (`mremap`) with
/// its advice, not copied into fresh memory without it. A kernel with huge pages off ignores or
/// refuses the advice, and nothing else changes: it decides which pages back the memory, never
/// what it holds.
#[allow(unsafe_code)]
fn advise_huge_pages(start: *const u8, capacity: usize) {
    if capacity < HUGE_PAGE_BYTES {
        return;
    }
    let page = rustix::param::page_size();
    let first = start as usize / page * page;
    let end = (start as usize + capacity).next_multiple_of(page);
    // SAFETY: every page of the range holds bytes of the buffer's allocation, so it is mapped
    // while the buffer lives, and the advice changes no byte of it. A refusal leaves ordinary pages.
    let _ =
        unsafe { rustix::mm::madvise(first as *mut std::ffi::c_void, end - first, rustix::mm::Advice::LinuxHugepage) };
}

/// One write of a batch: bytes for a place in a segment file.
#[derive(Debug)]
struct BatchRun<F> {
    file: Arc<F>,
    name: String,
    position: u64,
    start: usize,
    end: usize,
}

/// Buffered records handed over for writing, with the files they go to. Writing it needs no
/// access to the writer, so it can run on another thread while the writer takes new records.
#[derive(Debug)]
pub struct CommitBatch<F> {
    bytes: Vec<u8>,
    runs: Vec<BatchRun<F>>,
    /// The LSN of the batch's last record: written once `write` succeeds, and durable if the
    /// batch syncs.
    last_lsn: Lsn,
    /// Files earlier batches wrote without syncing them, in the order written.
    unsynced: Vec<UnsyncedFile<F>>,
    sync: BatchSync,
}

/// Whether a batch ends with its files synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchSync {
    /// Every record written so far is durable once the batch's write returns.
    Now,
    /// The batch's records are written, and made durable by a later batch that syncs.
    Later,
}

/// A segment file written since its last sync.
#[derive(Debug)]
struct UnsyncedFile<F> {
    file: Arc<F>,
    name: String,
}

/// How a batch's I/O ended; hand it back with [`WalWriter::finish_batch`].
#[derive(Debug)]
pub struct BatchOutcome<F> {
    bytes: Vec<u8>,
    last_lsn: Lsn,
    /// Files the batch left written and not synced (none after a batch that synced).
    unsynced: Vec<UnsyncedFile<F>>,
    result: Result<(), (String, std::io::Error)>,
}

/// The log's end as a finished batch leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogEnd {
    /// The last record on stable storage.
    pub durable: Lsn,
    /// The last record written to its file (durable or not yet).
    pub written: Lsn,
}

impl<F: SegmentFile> CommitBatch<F> {
    /// The LSN of the batch's last record.
    pub fn last_lsn(&self) -> Lsn {
        self.last_lsn
    }

    /// Each write of the batch: the file position and the bytes.
    #[cfg(test)]
    pub(crate) fn writes(&self) -> Vec<(u64, &[u8])> {
        self.runs.iter().map(|run| (run.position, &self.bytes[run.start..run.end])).collect()
    }

    /// Bytes the batch writes, segment headers, blocks' heads and padding included.
    pub fn len_bytes(&self) -> usize {
        self.runs.iter().map(|run| run.end - run.start).sum()
    }

    /// Whether the batch ends with every file it and earlier batches wrote synced.
    pub fn syncs(&self) -> bool {
        self.sync == BatchSync::Now
    }

    /// Writes the batch's runs in order, syncing every other file with unsynced writes before a
    /// run goes to a file (so a later segment never holds records whose predecessors could still
    /// be lost), and, for [`BatchSync::Now`], every file written at the end.
    pub fn write(mut self) -> BatchOutcome<F> {
        let mut unsynced = std::mem::take(&mut self.unsynced);
        let result = self.write_runs(&mut unsynced);
        BatchOutcome { bytes: self.bytes, last_lsn: self.last_lsn, unsynced, result }
    }

    fn write_runs(&self, unsynced: &mut Vec<UnsyncedFile<F>>) -> Result<(), (String, std::io::Error)> {
        for run in &self.runs {
            sync_files(unsynced, Some(&run.file))?;
            run.file
                .write_all_at(run.position, &self.bytes[run.start..run.end])
                .map_err(|source| (format!("writing {}", run.name), source))?;
            if !unsynced.iter().any(|written| Arc::ptr_eq(&written.file, &run.file)) {
                unsynced.push(UnsyncedFile { file: Arc::clone(&run.file), name: run.name.clone() });
            }
        }
        if self.sync == BatchSync::Now {
            sync_files(unsynced, None)?;
        }
        Ok(())
    }
}

/// Syncs, in the order written, every file of `unsynced` but `except`, and forgets them.
fn sync_files<F: SegmentFile>(
    unsynced: &mut Vec<UnsyncedFile<F>>,
    except: Option<&Arc<F>>,
) -> Result<(), (String, std::io::Error)> {
    let mut kept = None;
    for written in unsynced.drain(..) {
        if except.is_some_and(|except| Arc::ptr_eq(except, &written.file)) {
            kept = Some(written);
            continue;
        }
        written.file.sync_data().map_err(|source| (format!("syncing {}", written.name), source))?;
    }
    unsynced.extend(kept);
    Ok(())
}

/// Appends records to a log. Not thread-safe by design: one shard owns its log; only a taken
/// [`CommitBatch`] travels to another thread.
#[derive(Debug)]
pub struct WalWriter<S: LogStorage> {
    storage: S,
    segment_bytes: u64,
    /// Every open segment in sequence order: those holding records, then prepared empty ones.
    segments: Vec<Segment<S::File>>,
    /// Index in `segments` of the segment receiving records, if any has been started.
    tail: Option<usize>,
    /// Where the next record goes in the tail segment.
    tail_position: u64,
    next_lsn: Lsn,
    /// The LSN of the first record no batch that syncs has taken: the first of the commit that
    /// the next appended record belongs to.
    commit_first_lsn: Lsn,
    /// The LSN of the last record a batch took.
    taken_lsn: Lsn,
    durable_lsn: Lsn,
    /// The last record written to its file; past `durable_lsn` while `unsynced` holds files.
    written_lsn: Lsn,
    /// Files batches wrote without syncing them ([`BatchSync::Later`]), in the order written.
    unsynced: Vec<UnsyncedFile<S::File>>,
    next_seq: u64,
    /// Encoded records (and segment headers) not yet taken by a batch, from index `lead` on,
    /// laid out in blocks (see the module's documentation).
    pending: Vec<u8>,
    /// Unused bytes at the start of `pending` that put its index `lead` on a block boundary of
    /// memory (as long as the buffer does not move).
    lead: usize,
    /// The bytes of the tail segment's last block before the log's end, as the log wrote them
    /// (or will write them with the buffered records): a run that starts there rewrites them.
    /// `None` while unknown.
    tail_head: Option<Vec<u8>>,
    runs: Vec<Run>,
    /// A taken batch has not been finished yet.
    in_flight: bool,
    /// A spare buffer, returned by the last finished batch, so steady-state commits allocate nothing.
    spare: Vec<u8>,
    /// A spare segment is being made off the writer's thread (see [`WalWriter::spare_wanted`]).
    making_spare: bool,
    poisoned: Option<String>,
    /// Where the last appended record lies.
    last_at: RecordAt,
    /// Segments a checkpoint holds (see [`super::held`]), by sequence number, with their sizes.
    held: BTreeMap<u64, u64>,
}

/// What [`WalWriter::release_before`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Released {
    /// Segments recycled: renamed to follow the log and prepared for its records.
    pub recycled: usize,
    /// Segments that left the log to be held for the checkpoint.
    pub held: usize,
}

/// Largest buffer a finished batch hands back for reuse. A batch holding a large record (a
/// subtable's rewrite) or a burst of writes leaves a buffer that large; keeping it for good would
/// pin that memory for the life of the server, so a larger one is freed and the next burst
/// allocates again. Large enough for a few records of the largest inline value (2 MiB) or direct
/// put piece: at 1 MiB every such put allocated a fresh buffer and faulted it in page by page,
/// which took more of the shard's time than the value's copies did. Two buffers per shard.
pub const RETAINED_BUFFER_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Bytes a record with a payload of `payload_len` takes, or the error for a payload longer than a
/// record's length field holds.
fn checked_record_bytes(payload_len: u64, segment_bytes: u64) -> Result<u64, WalError> {
    match usize::try_from(payload_len) {
        Ok(len) if u32::try_from(len).is_ok() => Ok(record_bytes(len)),
        _ => Err(WalError::RecordTooLarge { bytes: payload_len, segment_bytes }),
    }
}

/// The bytes of `file` from the block boundary before `end` to `end`: the head of the block a
/// log ending at `end` writes next. `None` if they cannot be read (the block is then written
/// through the page cache once).
fn read_head<F: SegmentFile>(file: &F, end: u64) -> Option<Vec<u8>> {
    let mut head = vec![0u8; (end % DIRECT_BLOCK_BYTES) as usize];
    file.read_exact_at(end - head.len() as u64, &mut head).ok()?;
    Some(head)
}

/// The name a spare segment is made under before [`WalWriter::adopt_spare`] gives it its place.
pub fn spare_name(token: u64) -> String {
    format!("wal-spare-{token:016x}.tmp")
}

fn is_no_space(error: &std::io::Error) -> bool {
    error.kind() == std::io::ErrorKind::StorageFull || error.kind() == std::io::ErrorKind::QuotaExceeded
}

impl<S: LogStorage> WalWriter<S> {
    /// Opens the log for writing where `recovered` (the result of [`super::recover`] on the same
    /// storage) says it ends. A torn tail is overwritten by the next records.
    pub fn open(storage: S, config: WalConfig, recovered: &Recovered) -> Result<WalWriter<S>, WalError> {
        let open = |seq: u64| {
            let name = segment_name(seq);
            let io = |source| WalError::Io { context: format!("opening {name}"), source };
            let file = storage.open(&name).map_err(io)?;
            let bytes = file.size_bytes().map_err(io)?;
            Ok::<_, WalError>((Arc::new(file), bytes))
        };
        let mut segments = Vec::new();
        for state in &recovered.segments {
            let (file, bytes) = open(state.seq)?;
            segments.push(Segment { seq: state.seq, file, bytes, last_lsn: state.last_lsn, salt: state.salt });
        }
        let tail = segments.len().checked_sub(1);
        // After a torn commit, intact records of it may lie beyond where the log now ends, under
        // the tail's salt and with LSNs the log is about to give again: the next record starts
        // a new segment (with a new salt) so that none of them can ever be taken for a new one.
        let tail_position = match (recovered.segments.last(), tail) {
            (Some(state), Some(index)) if recovered.torn_commit.is_none() => state.end.min(segments[index].bytes),
            (Some(_), Some(index)) => segments[index].bytes,
            _ => 0,
        };
        for seq in &recovered.unstarted {
            let (file, bytes) = open(*seq)?;
            segments.push(Segment { seq: *seq, file, bytes, last_lsn: None, salt: 0 });
        }
        let mut held = BTreeMap::new();
        let names =
            storage.list().map_err(|source| WalError::Io { context: "listing the log directory".into(), source })?;
        for seq in names.iter().filter_map(|name| parse_held_name(name)) {
            let name = held_name(seq);
            let io = |source| WalError::Io { context: format!("opening {name}"), source };
            held.insert(seq, storage.open(&name).map_err(io)?.size_bytes().map_err(io)?);
        }
        // Sequence numbers are never given twice, held segments' included: a checkpoint names a
        // segment by its number.
        let next_seq = segments.iter().map(|s| s.seq + 1).chain(held.keys().map(|seq| seq + 1)).max().unwrap_or(1);
        // What a stopped process wrote may not have been synced (a batch written without its
        // sync, or one whose sync it did not live to finish): the log's last written file is
        // synced before anything counts as durable or another file is written. Only the tail
        // can hold such writes, as a file is written only once every other one is synced.
        if let Some(tail) = tail {
            let segment = &segments[tail];
            segment
                .file
                .sync_data()
                .map_err(|source| WalError::Io { context: format!("syncing {}", segment_name(segment.seq)), source })?;
        }
        let durable_lsn = recovered.next_lsn - 1;
        let tail_head = tail.and_then(|tail| read_head(&*segments[tail].file, tail_position));
        let mut writer = WalWriter {
            storage,
            segment_bytes: config.segment_bytes,
            segments,
            tail,
            tail_position,
            next_lsn: recovered.next_lsn,
            commit_first_lsn: recovered.next_lsn,
            taken_lsn: durable_lsn,
            durable_lsn,
            written_lsn: durable_lsn,
            unsynced: Vec::new(),
            next_seq,
            pending: Vec::new(),
            lead: 0,
            tail_head,
            runs: Vec::new(),
            in_flight: false,
            spare: Vec::new(),
            making_spare: false,
            poisoned: None,
            last_at: RecordAt { segment: 0, position: 0 },
            held,
        };
        writer.reset_buffer();
        Ok(writer)
    }

    /// Where the last appended record lies in the log.
    pub fn last_record_at(&self) -> RecordAt {
        self.last_at
    }

    /// The segments held for checkpoints.
    pub fn held_segments(&self) -> BTreeSet<u64> {
        self.held.keys().copied().collect()
    }

    /// Bytes of the segments held for checkpoints.
    pub fn held_bytes(&self) -> u64 {
        self.held.values().sum()
    }

    /// The configured size of a segment.
    pub fn segment_bytes(&self) -> u64 {
        self.segment_bytes
    }

    /// The LSN of the last record known to be on stable storage.
    pub fn durable_lsn(&self) -> Lsn {
        self.durable_lsn
    }

    /// The LSN the next appended record will get.
    pub fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }

    /// Why the log refuses everything, if an earlier write or sync failed.
    pub fn poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    /// Refuses everything from now on, because something outside the writer failed in a way
    /// that leaves the log behind pool memory (a record that could not be appended).
    pub fn fail(&mut self, reason: String) {
        self.poisoned.get_or_insert(reason);
    }

    /// True if no record is buffered, no batch is being written and every written record is
    /// synced: everything appended is durable (or the log failed).
    pub fn is_quiet(&self) -> bool {
        self.runs.is_empty() && !self.in_flight && self.unsynced.is_empty()
    }

    /// True if records are buffered that no batch has taken yet.
    pub fn has_pending(&self) -> bool {
        !self.runs.is_empty()
    }

    /// True if batches wrote records that no sync has made durable yet.
    pub fn has_unsynced(&self) -> bool {
        !self.unsynced.is_empty()
    }

    /// The LSN of the last record a batch took (written, or being written).
    pub fn taken_lsn(&self) -> Lsn {
        self.taken_lsn
    }

    /// The LSN of the last record written to its file, durable or not.
    pub fn written_lsn(&self) -> Lsn {
        self.written_lsn
    }

    /// Bytes buffered and not yet taken by a batch.
    pub fn pending_bytes(&self) -> usize {
        self.pending.len().saturating_sub(self.lead)
    }

    /// Memory the writer's buffers hold now (a batch being written holds its own).
    pub fn buffer_bytes(&self) -> usize {
        self.pending.capacity() + self.spare.capacity()
    }

    /// Where the buffer records are appended to lies in memory.
    #[cfg(test)]
    pub(super) fn buffer_address(&self) -> usize {
        self.pending.as_ptr() as usize
    }

    fn check_usable(&self) -> Result<(), WalError> {
        match &self.poisoned {
            Some(cause) => Err(WalError::Poisoned(cause.clone())),
            None => Ok(()),
        }
    }

    /// Bytes that records can take before the log must create another segment file: the rest of
    /// the tail segment plus every prepared one (each less its header).
    pub fn prepared_bytes(&self) -> u64 {
        let first_unused = self.tail.map_or(0, |tail| tail + 1);
        let in_tail = self.tail.map_or(0, |tail| self.segments[tail].bytes - self.tail_position);
        in_tail + self.segments[first_unused..].iter().map(|s| s.bytes - SEGMENT_HEADER_BYTES).sum::<u64>()
    }

    /// The largest payload a record appended now can have without creating a segment file (in
    /// the rest of the tail segment or in a prepared one), or 0 if the log refuses everything.
    pub fn record_room(&self) -> u64 {
        if self.poisoned.is_some() {
            return 0;
        }
        let in_tail = self.tail.map_or(0, |tail| self.segments[tail].bytes - self.tail_position);
        let first_unused = self.tail.map_or(0, |tail| tail + 1);
        let in_prepared = self.segments[first_unused..].iter().map(|s| s.bytes - SEGMENT_HEADER_BYTES).max();
        // A record is its header, its payload and padding to 8 bytes.
        in_tail.max(in_prepared.unwrap_or(0)).saturating_sub(RECORD_HEADER_BYTES) & !(RECORD_ALIGN_BYTES - 1)
    }

    /// Makes sure a record with a payload of up to `payload_len` bytes can be appended without
    /// creating a segment file: it fits in the rest of the tail segment, or a prepared segment is
    /// large enough to hold it (a record never spans segments). Prepares one if not. A shard calls
    /// this before it changes pool memory with the write's whole footprint, so that a full disk
    /// refuses the write cleanly ([`WalError::NoSpace`]) instead of failing after the change.
    pub fn ensure_room(&mut self, payload_len: u64) -> Result<(), WalError> {
        self.check_usable()?;
        let size = checked_record_bytes(payload_len, self.segment_bytes)?;
        let in_tail = self.tail.is_some_and(|tail| self.tail_position + size <= self.segments[tail].bytes);
        let first_unused = self.tail.map_or(0, |tail| tail + 1);
        let needed = SEGMENT_HEADER_BYTES + size;
        if in_tail || self.segments[first_unused..].iter().any(|segment| segment.bytes >= needed) {
            return Ok(());
        }
        self.prepare_segment(self.segment_bytes_for(needed))
    }

    /// The size of a segment made for a record that needs `needed` bytes with the header: the
    /// configured size, or larger for a record that needs it.
    fn segment_bytes_for(&self, needed: u64) -> u64 {
        if needed <= self.segment_bytes {
            self.segment_bytes
        } else {
            needed.next_multiple_of(4096)
        }
    }

    /// Whether the log wants a spare segment made: less than half a segment's worth of room is
    /// prepared and none is being made. Returns its size and marks one as being made; the caller
    /// makes it (with [`LogStorage::create_written`] under [`spare_name`]) off the shard's thread,
    /// then calls [`WalWriter::adopt_spare`] or [`WalWriter::spare_failed`].
    pub fn spare_wanted(&mut self) -> Option<u64> {
        if self.making_spare || self.poisoned.is_some() || self.prepared_bytes() >= self.segment_bytes / 2 {
            return None;
        }
        self.making_spare = true;
        Some(self.segment_bytes)
    }

    /// Whether a spare segment is being made (see [`WalWriter::spare_wanted`]).
    pub fn making_spare(&self) -> bool {
        self.making_spare
    }

    /// The storage, for making a spare segment elsewhere.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// Takes a spare segment made under `temp` into the log: renamed (durably) to the next
    /// sequence number, it becomes the last prepared segment.
    pub fn adopt_spare(&mut self, temp: &str, file: S::File, bytes: u64) -> Result<(), WalError> {
        self.making_spare = false;
        let name = segment_name(self.next_seq);
        self.storage
            .rename(temp, &name)
            .map_err(|source| WalError::Io { context: format!("renaming {temp} to {name}"), source })?;
        self.segments.push(Segment { seq: self.next_seq, file: Arc::new(file), bytes, last_lsn: None, salt: 0 });
        self.next_seq += 1;
        Ok(())
    }

    /// Records that making a spare failed; the next [`WalWriter::spare_wanted`] asks again.
    pub fn spare_failed(&mut self) {
        self.making_spare = false;
    }

    /// Buffers one record and returns its LSN. It is durable once a later commit covering it
    /// succeeds. Fails without changing anything if it needs a new segment and the device has
    /// no room for one (which [`WalWriter::ensure_room`] beforehand rules out).
    pub fn append(&mut self, payload: &[u8]) -> Result<Lsn, WalError> {
        self.append_encoded(|out| out.extend_from_slice(payload)).map(|(lsn, _)| lsn)
    }

    /// [`WalWriter::append`] of the payload `encode` appends to the buffer it is given: the
    /// log's own, so the payload is written where the record goes, not copied there from another
    /// buffer (a large value's bytes are copied once on their way to the disk, from pool
    /// memory). Returns the LSN and the payload's length.
    pub fn append_encoded(&mut self, encode: impl FnOnce(&mut Vec<u8>)) -> Result<(Lsn, u64), WalError> {
        self.check_usable()?;
        let lsn = self.next_lsn;
        let (before, runs_before) = (self.pending.len(), self.runs.len());
        if let Some(tail) = self.tail {
            if !self.continues_last_run(tail) {
                self.begin_run(tail, self.tail_position);
            }
        }
        let mut start = self.pending.len();
        self.pending.resize(start + RECORD_HEADER_BYTES as usize, 0);
        encode(&mut self.pending);
        let payload_len = (self.pending.len() - start) as u64 - RECORD_HEADER_BYTES;
        let size = match checked_record_bytes(payload_len, self.segment_bytes) {
            Ok(size) => size,
            Err(error) => {
                self.pending.truncate(before);
                self.runs.truncate(runs_before);
                return Err(error);
            }
        };
        let fits = self.tail.is_some_and(|tail| self.tail_position + size <= self.segments[tail].bytes);
        if !fits {
            // The segment's header goes first: the record moves behind it, inside the buffer
            // (once a segment; a record of its own took a fresh allocation and faulted it in).
            self.runs.truncate(runs_before);
            match self.start_segment(lsn, SEGMENT_HEADER_BYTES + size, before, start) {
                Ok(moved) => start = moved,
                Err(error) => {
                    self.pending.truncate(before);
                    return Err(error);
                }
            }
        }
        let tail = self.tail.expect("a tail segment was chosen above");
        let place = RecordPlace { salt: self.segments[tail].salt, commit_first_lsn: self.commit_first_lsn };
        self.last_at = RecordAt { segment: self.segments[tail].seq, position: self.tail_position };
        seal_record(&mut self.pending, start, lsn, place);
        self.finish_run();
        self.tail_position += size;
        self.segments[tail].last_lsn = Some(lsn);
        self.next_lsn += 1;
        Ok((lsn, payload_len))
    }

    /// Whether the next bytes buffered follow the last run, in the tail segment.
    fn continues_last_run(&self, tail: usize) -> bool {
        self.runs.last().is_some_and(|run| {
            run.segment == tail
                && run.position + (run.end - run.start) as u64 == self.tail_position
                && run.end == self.pending.len()
        })
    }

    /// Starts the segment after the tail, whose first record will be `first_lsn`, in a prepared
    /// segment of at least `needed` bytes (a new one if none is), and makes it the tail. Its
    /// header is buffered like a record, at the start of a run after the first `keep` bytes of
    /// the buffer, and written by the next commit. The bytes from `carried` to the buffer's end
    /// (a record encoded before it was known not to fit the tail) move behind the header, and
    /// whatever lay between `keep` and them goes; returns where they now start. Fails without
    /// changing the log if a segment is needed and the device has no room for one.
    fn start_segment(&mut self, first_lsn: Lsn, needed: u64, keep: usize, carried: usize) -> Result<usize, WalError> {
        let next = self.tail.map_or(0, |tail| tail + 1);
        // Prepared segments too small for this record stay prepared for later records.
        let chosen = match self.segments[next..].iter().position(|segment| segment.bytes >= needed) {
            Some(offset) => next + offset,
            None => {
                self.prepare_segment(self.segment_bytes_for(needed))?;
                self.segments.len() - 1
            }
        };
        let segment = self.segments.remove(chosen);
        self.segments.insert(next, segment);
        self.renumber_from(next)?;
        self.tail = Some(next);
        self.segments[next].salt = new_salt();
        let header = SegmentHeader {
            seq: self.segments[next].seq,
            first_lsn,
            segment_bytes: self.segments[next].bytes,
            salt: self.segments[next].salt,
        };
        // A run at the segment's start begins on a block boundary of the buffer, as
        // `begin_run` places one.
        let aligned = self.lead + (keep - self.lead).next_multiple_of(BLOCK);
        let moved = aligned + SEGMENT_HEADER_BYTES as usize;
        let carried_len = self.pending.len() - carried;
        if self.pending.len() < moved + carried_len {
            self.pending.resize(moved + carried_len, 0);
        }
        self.pending.copy_within(carried..carried + carried_len, moved);
        self.pending.truncate(moved + carried_len);
        self.pending[keep..aligned].fill(0);
        self.pending[aligned..moved].copy_from_slice(&header.encode());
        self.runs.push(Run { segment: next, position: 0, start: aligned, end: moved });
        self.tail_head.get_or_insert_with(Vec::new).clear();
        self.tail_position = SEGMENT_HEADER_BYTES;
        Ok(moved)
    }

    /// Segment files start in sequence order (recovery relies on it), so when a prepared
    /// segment is taken out of order the unstarted ones from `from` on are renamed to follow
    /// in the order they now have. Only unstarted segments are renamed.
    fn renumber_from(&mut self, from: usize) -> Result<(), WalError> {
        let in_order = self.segments[from..].windows(2).all(|pair| pair[0].seq < pair[1].seq);
        if in_order {
            return Ok(());
        }
        for index in from..self.segments.len() {
            let (old, new) = (segment_name(self.segments[index].seq), segment_name(self.next_seq));
            self.storage
                .rename(&old, &new)
                .map_err(|source| WalError::Io { context: format!("renaming {old} to {new}"), source })?;
            self.segments[index].seq = self.next_seq;
            self.next_seq += 1;
        }
        Ok(())
    }

    /// Starts a run of bytes for `position` of `segment` on a block boundary of the buffer: the
    /// last run's block is filled out with zeros first, and a run starting inside a block begins
    /// with the block's head. Without the head the run starts where it is (written buffered).
    fn begin_run(&mut self, segment: usize, position: u64) {
        let in_block = (position % DIRECT_BLOCK_BYTES) as usize;
        let head = self.tail_head.as_ref().filter(|head| head.len() == in_block);
        if head.is_none() && in_block != 0 {
            let start = self.pending.len();
            self.runs.push(Run { segment, position, start, end: start });
            return;
        }
        let aligned = self.lead + (self.pending.len() - self.lead).next_multiple_of(BLOCK);
        self.pending.resize(aligned, 0);
        if let Some(head) = self.tail_head.as_deref().filter(|head| head.len() == in_block) {
            self.pending.extend_from_slice(head);
        }
        let end = self.pending.len();
        self.runs.push(Run { segment, position: position - in_block as u64, start: aligned, end });
    }

    /// Makes the empty buffer's index `lead` a block boundary of memory, reserving room first so
    /// that it rarely moves.
    fn reset_buffer(&mut self) {
        self.pending.clear();
        let before = self.pending.as_ptr();
        self.pending.reserve(BUFFER_BYTES_RESERVED);
        if self.pending.as_ptr() != before {
            advise_huge_pages(self.pending.as_ptr(), self.pending.capacity());
        }
        self.lead = self.pending.as_ptr().align_offset(BLOCK);
        self.pending.resize(self.lead, 0);
    }

    fn finish_run(&mut self) {
        let end = self.pending.len();
        if let Some(run) = self.runs.last_mut() {
            run.end = end;
        }
    }

    /// Creates (preallocates) a segment file of `bytes` at the end of the list. Nothing is
    /// written to the log, so failing here leaves it usable.
    fn prepare_segment(&mut self, bytes: u64) -> Result<(), WalError> {
        let seq = self.next_seq;
        let name = segment_name(seq);
        let file = self.storage.create(&name, bytes).map_err(|source| {
            if is_no_space(&source) {
                WalError::NoSpace(format!("cannot create {name} ({bytes} bytes): {source}"))
            } else {
                WalError::Io { context: format!("creating {name}"), source }
            }
        })?;
        self.next_seq += 1;
        self.segments.push(Segment { seq, file: Arc::new(file), bytes, last_lsn: None, salt: 0 });
        Ok(())
    }

    /// Takes every buffered record for writing, to be made durable `sync`; `None` if a batch
    /// is already out (batches are written one at a time, in order), or if none is buffered
    /// and (for [`BatchSync::Now`]) no earlier batch left its records unsynced.
    pub fn take_batch(&mut self, sync: BatchSync) -> Result<Option<CommitBatch<S::File>>, WalError> {
        self.check_usable()?;
        if self.in_flight {
            return Ok(None);
        }
        let sync = match sync {
            BatchSync::Later if self.next_lsn - self.commit_first_lsn >= COMMIT_RECORDS_MAX => BatchSync::Now,
            sync => sync,
        };
        if self.runs.is_empty() {
            if sync == BatchSync::Later || self.unsynced.is_empty() {
                return Ok(None);
            }
            self.in_flight = true;
            self.commit_first_lsn = self.next_lsn;
            let unsynced = std::mem::take(&mut self.unsynced);
            return Ok(Some(CommitBatch {
                bytes: Vec::new(),
                runs: Vec::new(),
                last_lsn: self.written_lsn,
                unsynced,
                sync,
            }));
        }
        self.keep_head_of_tail();
        let in_memory_blocks = (self.pending.as_ptr() as usize + self.lead).is_multiple_of(BLOCK);
        let mut runs = Vec::with_capacity(self.runs.len());
        for run in std::mem::take(&mut self.runs) {
            let segment = &self.segments[run.segment];
            let mut end = run.end;
            // Filled out to its block with zeros where the segment has room for them.
            let padded = self.lead + (end - self.lead).next_multiple_of(BLOCK);
            if in_memory_blocks && run.position + (padded - run.start) as u64 <= segment.bytes {
                if self.pending.len() < padded {
                    self.pending.resize(padded, 0);
                }
                end = padded;
            }
            runs.push(BatchRun {
                file: Arc::clone(&segment.file),
                name: segment_name(segment.seq),
                position: run.position,
                start: run.start,
                end,
            });
        }
        let bytes = std::mem::replace(&mut self.pending, std::mem::take(&mut self.spare));
        self.reset_buffer();
        self.in_flight = true;
        self.taken_lsn = self.next_lsn - 1;
        // Records up to the next sync are one commit for recovery: a batch written before the
        // one it follows is durable may outlive it in a power cut, which is a torn commit, not
        // damage (see `reader.rs`).
        if sync == BatchSync::Now {
            self.commit_first_lsn = self.next_lsn;
        }
        let unsynced = std::mem::take(&mut self.unsynced);
        Ok(Some(CommitBatch { bytes, runs, last_lsn: self.next_lsn - 1, unsynced, sync }))
    }

    /// Keeps the tail segment's bytes from its last block boundary to the log's end, from the
    /// last run buffered (which is the tail's), in the buffer the last head used (a commit
    /// allocates nothing for it); unknown if that run starts after the boundary.
    fn keep_head_of_tail(&mut self) {
        let range = self.runs.last().and_then(|run| {
            let block_start = self.tail_position - self.tail_position % DIRECT_BLOCK_BYTES;
            let from = run.start + usize::try_from(block_start.checked_sub(run.position)?).ok()?;
            let to = run.start + usize::try_from(self.tail_position - run.position).ok()?;
            self.pending.get(from..to).map(|_| from..to)
        });
        match (range, &mut self.tail_head) {
            (Some(range), Some(head)) => {
                head.clear();
                head.extend_from_slice(&self.pending[range]);
            }
            (Some(range), None) => self.tail_head = Some(self.pending[range].to_vec()),
            (None, _) => self.tail_head = None,
        }
    }

    /// Records how a batch's I/O ended: on success its records are written, and durable with
    /// every record before them once no file is left unsynced; on failure the log is poisoned
    /// and the error returned.
    pub fn finish_batch(&mut self, outcome: BatchOutcome<S::File>) -> Result<LogEnd, WalError> {
        self.in_flight = false;
        let mut bytes = outcome.bytes;
        bytes.clear();
        if bytes.capacity() > RETAINED_BUFFER_BYTES_MAX {
            bytes = Vec::new();
        }
        if bytes.capacity() > 0 || self.spare.capacity() == 0 {
            self.spare = bytes;
        }
        self.unsynced = outcome.unsynced;
        match outcome.result {
            Ok(()) => {
                self.written_lsn = self.written_lsn.max(outcome.last_lsn);
                if self.unsynced.is_empty() {
                    self.durable_lsn = self.durable_lsn.max(self.written_lsn);
                }
                Ok(LogEnd { durable: self.durable_lsn, written: self.written_lsn })
            }
            Err((context, source)) => {
                self.poisoned = Some(format!("{context}: {source}"));
                Err(WalError::Io { context, source })
            }
        }
    }

    /// Writes every buffered record and syncs them, on this thread; returns the durable LSN. Any
    /// failure poisons the writer.
    pub fn commit(&mut self) -> Result<Lsn, WalError> {
        match self.take_batch(BatchSync::Now)? {
            Some(batch) => self.finish_batch(batch.write()).map(|end| end.durable),
            None => Ok(self.durable_lsn),
        }
    }

    /// Cuts the log back so that `last` is its last record (a Raft replica dropping entries a new
    /// leader did not keep): the next record gets LSN `last + 1`, in a new segment whose header
    /// supersedes, for recovery and [`super::read_range`], the records at and past `last + 1`
    /// that earlier segments hold. The header is buffered at once, so the cut is on stable
    /// storage once the next commit returns (the log is not quiet until then); a crash before
    /// that leaves the dropped records in the log, as if the cut had not happened. A cut at or
    /// past the end does nothing. Refused (`Poisoned` aside) until the log is quiet (no record
    /// buffered, no batch being written, none written and not yet synced): commit first.
    pub fn truncate_after(&mut self, last: Lsn) -> Result<(), WalError> {
        self.check_usable()?;
        if last + 1 >= self.next_lsn {
            return Ok(());
        }
        self.start_over(last + 1)
    }

    /// Starts the log over at `first`, forgetting every record it holds from `first` on and
    /// every gap before it (a Raft replica that installed a snapshot whose state covers them):
    /// the next record gets LSN `first`, in a new segment whose header is buffered at once, so
    /// that the restart is on stable storage once the next commit returns (the log is not quiet
    /// until then). Recovery then needs the log from `first` on only: the caller moves its
    /// checkpoint there once the restart is durable, not before (until then the log recovers
    /// only from the old checkpoint; after, only from the new one). The older segments are
    /// recycled by the next [`WalWriter::release_before`]. Refused until the log is quiet.
    pub fn restart_at(&mut self, first: Lsn) -> Result<(), WalError> {
        self.check_usable()?;
        self.start_over(first.max(1))
    }

    /// Starts the segment the records from `next` on go to, and forgets the records at and past
    /// `next` that the log held.
    fn start_over(&mut self, next: Lsn) -> Result<(), WalError> {
        if !self.is_quiet() {
            return Err(WalError::Unflushed);
        }
        let end = self.pending.len();
        self.start_segment(next, SEGMENT_HEADER_BYTES, end, end)?;
        self.next_lsn = next;
        self.commit_first_lsn = next;
        self.taken_lsn = next - 1;
        // The header's batch makes `next - 1` durable (nothing from the old log past it counts).
        self.durable_lsn = self.durable_lsn.min(next - 1);
        self.written_lsn = self.durable_lsn;
        // A segment that held records past the cut now ends, for recycling, no later than the
        // cut: one holding kept records must stay until a checkpoint covers them. (One holding
        // only dropped records stays as long, which costs nothing but its space.)
        for segment in &mut self.segments {
            segment.last_lsn = segment.last_lsn.map(|lsn| lsn.min(next - 1));
        }
        Ok(())
    }

    /// Releases every segment whose records all precede `lsn` (a completed checkpoint covers
    /// them) and are durable. One the checkpoint refers to (its sequence number is in `held`)
    /// leaves the log to be held ([`super::held`]); any other is recycled: renamed to a new,
    /// later sequence number, it becomes a prepared segment, so the log reuses its files instead
    /// of allocating new ones. Held segments the checkpoint no longer refers to are recycled
    /// likewise. Buffered records and a batch in flight are all newer than the durable LSN, so
    /// they never lie in a released segment.
    pub fn release_before(&mut self, lsn: Lsn, held: &BTreeSet<u64>) -> Result<Released, WalError> {
        self.check_usable()?;
        let mut released = Released::default();
        if let Some(tail) = self.tail {
            let lsn = lsn.min(self.durable_lsn + 1);
            let releasable = self.segments[..tail]
                .iter()
                .take_while(|segment| segment.last_lsn.is_none_or(|last| last < lsn))
                .count();
            for _ in 0..releasable {
                let seq = self.segments[0].seq;
                if held.contains(&seq) {
                    let (from, to) = (segment_name(seq), held_name(seq));
                    self.storage
                        .rename(&from, &to)
                        .map_err(|source| WalError::Io { context: format!("holding {from} as {to}"), source })?;
                    let segment = self.segments.remove(0);
                    self.held.insert(seq, segment.bytes);
                    released.held += 1;
                } else {
                    let (from, to) = (segment_name(seq), segment_name(self.next_seq));
                    self.storage
                        .rename(&from, &to)
                        .map_err(|source| WalError::Io { context: format!("recycling {from} as {to}"), source })?;
                    let mut segment = self.segments.remove(0);
                    segment.seq = self.next_seq;
                    segment.last_lsn = None;
                    segment.salt = 0;
                    self.next_seq += 1;
                    self.segments.push(segment);
                    released.recycled += 1;
                }
                self.tail = self.tail.map(|tail| tail - 1);
                // Buffered runs name segments by index, and every index just moved down by one.
                for run in &mut self.runs {
                    run.segment -= 1;
                }
            }
        }
        let unheld: Vec<u64> = self.held.keys().copied().filter(|seq| !held.contains(seq)).collect();
        for seq in unheld {
            let (from, to) = (held_name(seq), segment_name(self.next_seq));
            self.storage
                .rename(&from, &to)
                .map_err(|source| WalError::Io { context: format!("recycling {from} as {to}"), source })?;
            let bytes = self.held.remove(&seq).unwrap_or(0);
            let io = |source| WalError::Io { context: format!("opening {to}"), source };
            let file = self.storage.open(&to).map_err(io)?;
            self.segments.push(Segment { seq: self.next_seq, file: Arc::new(file), bytes, last_lsn: None, salt: 0 });
            self.next_seq += 1;
            released.recycled += 1;
        }
        Ok(released)
    }

    /// Bytes of log between the oldest record still kept and the end: what a checkpoint would
    /// let the log recycle.
    pub fn retained_bytes(&self) -> u64 {
        let Some(tail) = self.tail else { return 0 };
        self.segments[..tail].iter().map(|s| s.bytes).sum::<u64>() + self.tail_position
    }
}
