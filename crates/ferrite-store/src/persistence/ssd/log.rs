//! A shard's write-ahead log as the shard and its sync thread share it: the shard appends records
//! (memory only), the sync thread writes and `fdatasync`s everything appended since its last
//! batch, one sync per batch: group commit. While one batch is on its way to the device, the next
//! one gathers, so under load each sync covers every operation that arrived during the previous
//! one, and the shard's thread never waits for the disk. A backlog nobody waits for yet is
//! written without a sync when the shard asks ([`SharedLog::request_write`]); the next sync
//! covers it.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::record::{pool_created_payload_max, transaction_payload_max, POOL_DELETED_PAYLOAD_BYTES};
use crate::persistence::wal::{
    record_bytes, spare_name, BatchSync, FsStorage, LogEnd, LogStorage, Lsn, RecordAt, Released, WalError, WalWriter,
    SEGMENT_HEADER_BYTES,
};
use crate::store::WriteFootprint;

#[derive(Debug)]
struct LogState<S: LogStorage> {
    writer: WalWriter<S>,
    counters: LogCounters,
    /// Spare segments started, which also names each one's temporary file uniquely.
    spares_made: u64,
    /// What the log took lately: bytes of records, and of large records among them (see
    /// [`LogState::spare_written`]), both halved every two segments' worth.
    recent_bytes: u64,
    recent_large_bytes: u64,
    /// When the oldest record no batch has taken was appended.
    oldest_pending: Option<Instant>,
    stopping: bool,
    /// Where [`SharedLog::append_encoded`] encodes records.
    scratch: Vec<u8>,
    /// In cluster mode, while this node leads its group: records the shard appends are entries
    /// of its Raft log, framed (see [`super::entry`]), and kept here for the Raft log store.
    framing: Option<Framing>,
}

/// How the records a leading replica appends are framed as its group's log entries.
struct Framing {
    term: u64,
    origin: u64,
    next_seq: u64,
    /// Entries appended and not yet taken by [`SharedLog::take_framed`].
    appended: Vec<FramedEntry>,
    /// Called when an entry is appended while none waits to be taken: the replica's proposer
    /// wakes once per batch of entries, not once per entry.
    wake: Box<dyn Fn() + Send>,
}

impl std::fmt::Debug for Framing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Framing")
            .field("term", &self.term)
            .field("origin", &self.origin)
            .field("next_seq", &self.next_seq)
            .field("appended", &self.appended.len())
            .finish_non_exhaustive()
    }
}

/// A record the shard appended as an entry of its group's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramedEntry {
    /// Its index in the log (its LSN).
    pub lsn: Lsn,
    pub term: u64,
    /// The node's sequence number for it, in its frame.
    pub seq: u64,
    /// The whole record payload: frame and record.
    pub payload: Vec<u8>,
}

/// A record this large is a large value's (or a direct put piece's): a commit of such records
/// writes far more than the metadata a reserved segment's first writes change.
const LARGE_RECORD_BYTES: u64 = 64 * 1024;

impl<S: LogStorage> LogState<S> {
    /// Counts a record of `payload_len` bytes into what the log took lately.
    fn took(&mut self, payload_len: u64) {
        self.recent_bytes += payload_len;
        if payload_len >= LARGE_RECORD_BYTES {
            self.recent_large_bytes += payload_len;
        }
        if self.recent_bytes > 2 * self.writer.segment_bytes() {
            self.recent_bytes /= 2;
            self.recent_large_bytes /= 2;
        }
    }

    /// Whether the next spare segment is written with zeros (the log is taking small commits,
    /// whose `fdatasync` would otherwise also commit the file system's metadata for each block
    /// first written: 1.2-1.5 times the time on this project's machine), or only reserved (the
    /// log is taking large records, mostly). For large records the zeros cost more than they
    /// save: measured there, a 1 MiB commit into reserved space took 1.2 ms against 0.78 ms into
    /// written space, but writing that megabyte's zeros first took 0.6 ms more and doubled the
    /// bytes the disk wrote for every value, which is written to the disk once by its record.
    fn spare_written(&self) -> bool {
        self.recent_large_bytes * 2 <= self.recent_bytes
    }
}

/// Largest scratch buffer the log keeps between records: room for a transaction that writes the
/// largest inline value (2 MiB) or a direct put's piece, with their ranges' headers. A larger one
/// (a record of a huge transaction) is freed after use.
const RETAINED_SCRATCH_BYTES_MAX: usize = 4 * 1024 * 1024;

#[derive(Debug)]
struct Shared<S: LogStorage> {
    state: Mutex<LogState<S>>,
    /// A write that waits for durability was appended: sync as soon as possible. Outside the
    /// mutex so that asking costs no lock.
    urgent: AtomicBool,
    /// The shard wants the records buffered so far written to their files, without waiting for
    /// them to be durable (a backlog of records nobody waits for: see [`SharedLog::request_write`]).
    write_wanted: AtomicBool,
    /// The sync thread, once started. It sleeps with `park` and is woken with `unpark`: no lock
    /// is taken to wake it (a condition variable made the woken thread wait at once for the
    /// mutex its waker still held), and `unpark` of a thread that is not parked is one atomic
    /// operation, remembered until it next parks, so no wake-up is ever lost.
    thread: OnceLock<std::thread::Thread>,
    /// Published from the writer every time the lock is released ([`Locked`]), so that the
    /// shard's per-write questions (is there room for this record, what did the last append
    /// get, has the log failed) take no lock. The shard is the only appender, so what it reads
    /// after its own append is exact; room only grows behind its back (a spare segment adopted,
    /// segments recycled).
    room: AtomicU64,
    last_appended: AtomicU64,
    poisoned: AtomicBool,
    /// Bytes appended that no batch has taken yet.
    pending: AtomicU64,
    /// The LSN of the last record a batch took.
    taken: AtomicU64,
    /// The LSN of the last record written to its file.
    written: AtomicU64,
}

/// The log's state, locked; publishes the writer's room, last LSN and failure when released.
struct Locked<'a, S: LogStorage> {
    state: MutexGuard<'a, LogState<S>>,
    shared: &'a Shared<S>,
}

impl<S: LogStorage> std::ops::Deref for Locked<'_, S> {
    type Target = LogState<S>;

    fn deref(&self) -> &LogState<S> {
        &self.state
    }
}

impl<S: LogStorage> std::ops::DerefMut for Locked<'_, S> {
    fn deref_mut(&mut self) -> &mut LogState<S> {
        &mut self.state
    }
}

impl<S: LogStorage> Drop for Locked<'_, S> {
    fn drop(&mut self) {
        let writer = &self.state.writer;
        self.shared.room.store(writer.record_room(), Ordering::Release);
        self.shared.last_appended.store(writer.next_lsn() - 1, Ordering::Release);
        self.shared.poisoned.store(writer.poisoned().is_some(), Ordering::Release);
        self.shared.pending.store(writer.pending_bytes() as u64, Ordering::Release);
        self.shared.taken.store(writer.taken_lsn(), Ordering::Release);
        self.shared.written.store(writer.written_lsn(), Ordering::Release);
    }
}

/// The log of one shard. Cheap to clone; every clone is the same log. Generic over the storage
/// so that tests can put it on the simulated disk; the server uses the file system.
#[derive(Debug)]
pub struct SharedLog<S: LogStorage = FsStorage> {
    shared: Arc<Shared<S>>,
}

impl<S: LogStorage> Clone for SharedLog<S> {
    fn clone(&self) -> Self {
        SharedLog { shared: Arc::clone(&self.shared) }
    }
}

/// What a log has done since the server started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogCounters {
    /// Bytes written to segment files: records, their headers and padding, segment headers.
    pub bytes_written: u64,
    /// Batches committed (ending with every file written so far synced), each with one
    /// `fdatasync` per segment with unsynced writes. Batches written without their sync
    /// ([`SharedLog::request_write`]) count only in `bytes_written`.
    pub commits: u64,
    /// The largest record payload appended: what bounds a single write's log traffic.
    pub record_bytes_max: u64,
    /// The most bytes ever waiting for a batch at once: what the buffers grew to.
    pub pending_bytes_max: u64,
    /// Spare segments made with zeros written, and made only reserved.
    pub spares_written: u64,
    pub spares_reserved: u64,
}

/// When an appended record must be durable by, unless a sync asked for comes sooner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Within the commit interval: what an acknowledged `async` write is promised.
    Interval,
    /// With the next record that is due: nobody is promised this one on its own (a piece of a
    /// staged value, which only its commit makes visible). It is written when the shard asks
    /// for its backlog to be written, and durable with the next sync.
    WithNext,
}

/// Called by the sync thread after each batch: where the log's durable and written records now
/// end, or why the log failed.
pub type DurableCallback = Box<dyn Fn(Result<LogEnd, String>) + Send>;

impl<S: LogStorage + Clone + 'static> SharedLog<S> {
    pub fn new(writer: WalWriter<S>) -> SharedLog<S> {
        let state = LogState {
            writer,
            counters: LogCounters::default(),
            spares_made: 0,
            recent_bytes: 0,
            recent_large_bytes: 0,
            oldest_pending: None,
            stopping: false,
            scratch: Vec::new(),
            framing: None,
        };
        let shared = Shared {
            room: AtomicU64::new(state.writer.record_room()),
            last_appended: AtomicU64::new(state.writer.next_lsn() - 1),
            poisoned: AtomicBool::new(state.writer.poisoned().is_some()),
            pending: AtomicU64::new(state.writer.pending_bytes() as u64),
            taken: AtomicU64::new(state.writer.taken_lsn()),
            written: AtomicU64::new(state.writer.written_lsn()),
            state: Mutex::new(state),
            urgent: AtomicBool::new(false),
            write_wanted: AtomicBool::new(false),
            thread: OnceLock::new(),
        };
        SharedLog { shared: Arc::new(shared) }
    }

    fn lock(&self) -> Locked<'_, S> {
        // A panic while holding the lock leaves the writer in an unknown state; the guard's data is
        // still the best record of what was appended, and every later failure is reported.
        let state = self.shared.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Locked { state, shared: &self.shared }
    }

    /// Buffers a record; returns its LSN. A failure poisons the log.
    pub fn append(&self, payload: &[u8]) -> Result<Lsn, WalError> {
        self.append_encoded(|out| out.extend_from_slice(payload))
    }

    /// Buffers the record `encode` writes; returns its LSN. A failure poisons the log. A single
    /// server's records are encoded straight into the log's buffer; a leader's, framed as entries
    /// of its group's log, into a scratch buffer first, as the Raft log store keeps a copy. The
    /// scratch buffer is the shard's, kept from record to record: a buffer per record cost a fresh
    /// allocation, faulted in page by page, for every large value.
    pub fn append_encoded(&self, encode: impl FnOnce(&mut Vec<u8>)) -> Result<Lsn, WalError> {
        self.append_encoded_at(encode).map(|(lsn, _)| lsn)
    }

    /// [`SharedLog::append_encoded`], also saying where the record lies in the log (a checkpoint
    /// may keep the pages of its large ranges there).
    pub fn append_encoded_at(&self, encode: impl FnOnce(&mut Vec<u8>)) -> Result<(Lsn, Option<RecordAt>), WalError> {
        self.append_encoded_due(Due::Interval, encode)
    }

    /// [`SharedLog::append_encoded_at`] of a record that must be durable by `due`.
    pub fn append_encoded_due(
        &self,
        due: Due,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> Result<(Lsn, Option<RecordAt>), WalError> {
        let mut state = self.lock();
        if state.framing.is_none() {
            let appended = state.writer.append_encoded(encode);
            let appended = Self::appended_locked(&mut state, self, appended, due);
            return appended.map(|lsn| (lsn, Some(state.writer.last_record_at())));
        }
        let mut scratch = std::mem::take(&mut state.scratch);
        scratch.clear();
        let framed = state.framing.as_mut().map(|framing| {
            let seq = framing.next_seq;
            framing.next_seq += 1;
            super::entry::encode_normal_header(framing.term, framing.origin, seq, &mut scratch);
            (framing.term, seq)
        });
        encode(&mut scratch);
        let appended = state.writer.append(&scratch).map(|lsn| (lsn, scratch.len() as u64));
        let appended = Self::appended_locked(&mut state, self, appended, due);
        let at = state.writer.last_record_at();
        if let (Ok(lsn), Some((term, seq)), Some(framing)) = (&appended, framed, state.framing.as_mut()) {
            if framing.appended.is_empty() {
                (framing.wake)();
            }
            framing.appended.push(FramedEntry { lsn: *lsn, term, seq, payload: scratch.clone() });
        }
        if scratch.capacity() <= RETAINED_SCRATCH_BYTES_MAX {
            state.scratch = scratch;
        }
        appended.map(|lsn| (lsn, Some(at)))
    }

    /// From now on, frames the records the shard appends as normal entries of `term` written by
    /// node `origin`, numbered from `first_seq` (cluster mode, while this node leads its group).
    /// `wake` is called when entries wait to be taken ([`SharedLog::take_framed`]) where none did,
    /// with the log locked: it may only signal (wake a task), never call the log.
    pub fn frame_as(&self, term: u64, origin: u64, first_seq: u64, wake: Box<dyn Fn() + Send>) {
        self.lock().framing = Some(Framing { term, origin, next_seq: first_seq, appended: Vec::new(), wake });
    }

    /// Stops framing (this node no longer leads); returns the entries not yet taken.
    pub fn stop_framing(&self) -> Vec<FramedEntry> {
        self.lock().framing.take().map(|framing| framing.appended).unwrap_or_default()
    }

    /// Takes the entries the shard appended since the last call (in order).
    pub fn take_framed(&self) -> Vec<FramedEntry> {
        self.lock().framing.as_mut().map(|framing| std::mem::take(&mut framing.appended)).unwrap_or_default()
    }

    /// Buffers `payload`, already an entry of the group's log, as the record with LSN `index`
    /// (an entry another node wrote, or one of Raft's own): the log's next LSN must be `index`.
    /// Returns where the record lies in the log.
    pub fn append_entry(&self, index: Lsn, payload: &[u8]) -> Result<RecordAt, WalError> {
        let mut state = self.lock();
        let next = state.writer.next_lsn();
        if next != index {
            return Err(WalError::OutOfOrder { index, next });
        }
        Self::append_locked(&mut state, self, payload).map(|_| state.writer.last_record_at())
    }

    /// Whether everything appended is written and synced (or the log failed): the condition to
    /// cut the log back or restart it, and what says a cut or restart is on stable storage.
    pub fn is_quiet(&self) -> bool {
        self.lock().writer.is_quiet()
    }

    /// Cuts the log back after `last` (see [`WalWriter::truncate_after`]). The sync thread
    /// writes the cut within its interval, or at once if asked ([`SharedLog::request_sync`]).
    pub fn truncate_after(&self, last: Lsn) -> Result<(), WalError> {
        let mut state = self.lock();
        state.writer.truncate_after(last)?;
        self.start_interval(&mut state);
        Ok(())
    }

    /// Starts the log over at `first` (see [`WalWriter::restart_at`]). The sync thread writes
    /// the restart within its interval, or at once if asked.
    pub fn restart_at(&self, first: Lsn) -> Result<(), WalError> {
        let mut state = self.lock();
        state.writer.restart_at(first)?;
        self.start_interval(&mut state);
        Ok(())
    }

    /// Starts the sync thread's interval if something waits for a batch and none had: the
    /// thread may be asleep with nothing to do.
    fn start_interval(&self, state: &mut Locked<'_, S>) {
        if state.oldest_pending.is_none() && state.writer.has_pending() {
            state.oldest_pending = Some(Instant::now());
            self.wake_sync_thread();
        }
    }

    /// The LSN the next appended record gets.
    pub fn next_lsn(&self) -> Lsn {
        self.shared.last_appended.load(Ordering::Acquire) + 1
    }

    fn append_locked(state: &mut Locked<'_, S>, log: &Self, payload: &[u8]) -> Result<Lsn, WalError> {
        let appended = state.writer.append(payload).map(|lsn| (lsn, payload.len() as u64));
        Self::appended_locked(state, log, appended, Due::Interval)
    }

    /// What follows an append: the counters, the sync thread's interval (for a record `due`
    /// within it) and a spare segment if one is wanted; or, if the record was refused, the log
    /// failed for good.
    fn appended_locked(
        state: &mut Locked<'_, S>,
        log: &Self,
        appended: Result<(Lsn, u64), WalError>,
        due: Due,
    ) -> Result<Lsn, WalError> {
        match appended {
            Ok((lsn, payload_len)) => {
                let pending = state.writer.pending_bytes() as u64;
                let counters = &mut state.counters;
                counters.record_bytes_max = counters.record_bytes_max.max(payload_len);
                counters.pending_bytes_max = counters.pending_bytes_max.max(pending);
                state.took(payload_len);
                if due == Due::Interval {
                    log.start_interval(state);
                }
                log.start_spare_if_wanted(state);
                Ok(lsn)
            }
            Err(error) => {
                // Pool memory already holds the change this record describes, so nothing may be
                // acknowledged after it: the log refuses everything until the server restarts.
                state.writer.fail(format!("a transaction could not be logged: {error}"));
                Err(error)
            }
        }
    }

    /// Asks the sync thread to commit what is buffered now rather than at the interval.
    pub fn request_sync(&self) {
        self.shared.urgent.store(true, Ordering::SeqCst);
        self.wake_sync_thread();
    }

    /// Asks the sync thread to write what is buffered now without syncing it: the records
    /// become durable with the next sync (one asked for, or the interval's). For a backlog that
    /// nobody waits for yet, such as the pieces of a large value before its commit: written as
    /// they come, they keep the device busy while the rest arrives, and one flush at the commit
    /// covers them all instead of one flush per batch.
    pub fn request_write(&self) {
        self.shared.write_wanted.store(true, Ordering::SeqCst);
        self.wake_sync_thread();
    }

    fn wake_sync_thread(&self) {
        if let Some(thread) = self.shared.thread.get() {
            thread.unpark();
        }
    }

    /// Whether the record of a transaction that changes at most `footprint` of pool memory fits
    /// one segment of the configured size. The log takes larger records (in a segment made for
    /// them), but a transaction whose size a client or a plugin chooses must not make it.
    pub fn fits_segment(&self, footprint: WriteFootprint) -> bool {
        let record = usize::try_from(transaction_payload_max(footprint)).ok().map(record_bytes);
        let segment_bytes = self.lock().writer.segment_bytes();
        record.is_some_and(|record| SEGMENT_HEADER_BYTES + record <= segment_bytes)
    }

    /// Makes sure the log can take the record of a transaction that changes at most `footprint`
    /// of pool memory: what a shard calls before a write changes anything.
    pub fn reserve_transaction(&self, footprint: WriteFootprint) -> Result<(), WalError> {
        self.ensure_room(transaction_payload_max(footprint))
    }

    /// Makes sure the log can take the creation record of a pool whose formatting changes at most
    /// `footprint` of its memory.
    pub fn reserve_pool_creation(&self, footprint: WriteFootprint) -> Result<(), WalError> {
        self.ensure_room(pool_created_payload_max(footprint))
    }

    /// Makes sure the log can take a pool's deletion record.
    pub fn reserve_pool_deletion(&self) -> Result<(), WalError> {
        self.ensure_room(POOL_DELETED_PAYLOAD_BYTES)
    }

    /// See [`WalWriter::ensure_room`]. Takes no lock while the log has the room (the common
    /// case: segments are prepared ahead).
    pub fn ensure_room(&self, payload_len: u64) -> Result<(), WalError> {
        if !self.shared.poisoned.load(Ordering::Acquire) && payload_len <= self.shared.room.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut state = self.lock();
        self.start_spare_if_wanted(&mut state);
        state.writer.ensure_room(payload_len)
    }

    /// Starts making a spare segment in the background when the log is running low, so that the
    /// shard's thread rarely has to create one itself.
    fn start_spare_if_wanted(&self, state: &mut Locked<'_, S>) {
        if let Some(size) = state.writer.spare_wanted() {
            state.spares_made += 1;
            let token = state.spares_made;
            let storage = state.writer.storage().clone();
            let written = state.spare_written();
            if written {
                state.counters.spares_written += 1;
            } else {
                state.counters.spares_reserved += 1;
            }
            if !self.make_spare(storage, token, size, written) {
                state.writer.spare_failed();
            }
        }
    }

    /// Makes one zero-filled spare segment now, on this thread, if the log has none: what a server
    /// does before it starts serving a fresh log, so that even its first writes commit into
    /// written space.
    pub fn prepare_spare_now(&self) -> Result<(), WalError> {
        let (storage, token, size) = {
            let mut state = self.lock();
            let Some(size) = state.writer.spare_wanted() else { return Ok(()) };
            state.spares_made += 1;
            (state.writer.storage().clone(), state.spares_made, size)
        };
        let name = spare_name(token);
        match storage.create_written(&name, size) {
            Ok(file) => self.lock().writer.adopt_spare(&name, file, size),
            Err(source) => {
                self.lock().writer.spare_failed();
                Err(WalError::Io { context: format!("creating {name}"), source })
            }
        }
    }

    /// Makes a spare segment, zero-filled if `written` (else only reserved), on a thread of its
    /// own (writing a segment takes tens of milliseconds) and hands it to the writer. A failure
    /// (a full disk) only means no spare: the shard then creates a segment itself when it needs
    /// one, or refuses the write. Returns false if the thread could not be started.
    fn make_spare(&self, storage: S, token: u64, size: u64, written: bool) -> bool {
        let log = self.clone();
        let spawned = std::thread::Builder::new().name("wal-spare".into()).spawn(move || {
            let name = spare_name(token);
            let made = if written { storage.create_written(&name, size) } else { storage.create(&name, size) };
            let mut state = log.lock();
            match made {
                Ok(file) => {
                    if state.writer.adopt_spare(&name, file, size).is_err() {
                        let _ = storage.remove(&name);
                    }
                }
                Err(_) => state.writer.spare_failed(),
            }
        });
        spawned.is_ok()
    }

    /// Refuses everything from now on, as after a failed write: what a shard does when it stops
    /// because pool memory ran ahead of the log, so that nothing more is committed after it.
    pub fn fail(&self, reason: &str) {
        self.lock().writer.fail(reason.to_string());
        self.request_sync();
    }

    /// Waits until no spare segment is being made. A test that drops a log and recovers the same
    /// directory in one process must: the thread making a spare would otherwise rename it into
    /// place under a sequence number the recovered log may be using by then. (A process that
    /// exits takes the thread with it, and recovery removes its temporary file.)
    pub fn wait_for_spare(&self) {
        while self.lock().writer.making_spare() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Commits what is buffered on this thread, as the sync thread would (for tests that drive
    /// the log by hand).
    #[cfg(test)]
    pub(crate) fn commit_now(&self) -> Result<Lsn, WalError> {
        self.lock().writer.commit()
    }

    /// Whether the commit interval runs: a record is waiting to be made durable by it.
    #[cfg(test)]
    pub(crate) fn interval_runs(&self) -> bool {
        self.lock().oldest_pending.is_some()
    }

    /// Writes what is buffered without syncing it, on this thread, as the sync thread does when
    /// asked to ([`SharedLog::request_write`]); for tests that drive the log by hand.
    #[cfg(test)]
    pub(crate) fn write_now(&self) -> Result<Option<LogEnd>, WalError> {
        let mut state = self.lock();
        match state.writer.take_batch(BatchSync::Later)? {
            Some(batch) => state.writer.finish_batch(batch.write()).map(Some),
            None => Ok(None),
        }
    }

    /// The LSN of the last appended record, or why the log refuses everything: what a shard
    /// checks after each write before it may acknowledge it.
    pub fn appended(&self) -> Result<Lsn, WalError> {
        if !self.shared.poisoned.load(Ordering::Acquire) {
            return Ok(self.shared.last_appended.load(Ordering::Acquire));
        }
        match self.lock().writer.poisoned() {
            Some(reason) => Err(WalError::Poisoned(reason.to_string())),
            None => Ok(self.shared.last_appended.load(Ordering::Acquire)),
        }
    }

    /// The LSN of the last appended record.
    pub fn last_lsn(&self) -> Lsn {
        self.shared.last_appended.load(Ordering::Acquire)
    }

    pub fn durable_lsn(&self) -> Lsn {
        self.lock().writer.durable_lsn()
    }

    /// Why the log refuses everything, if a write or sync failed.
    pub fn failure(&self) -> Option<String> {
        self.lock().writer.poisoned().map(str::to_string)
    }

    pub fn counters(&self) -> LogCounters {
        self.lock().counters
    }

    /// Bytes appended that no batch has taken yet. Takes no lock.
    pub fn pending_bytes(&self) -> u64 {
        self.shared.pending.load(Ordering::Acquire)
    }

    /// The LSN of the last record a batch took: written once that batch's write returns. Takes
    /// no lock.
    pub fn taken_lsn(&self) -> Lsn {
        self.shared.taken.load(Ordering::Acquire)
    }

    /// The LSN of the last record written to its file, durable or not. Takes no lock.
    pub fn written_lsn(&self) -> Lsn {
        self.shared.written.load(Ordering::Acquire)
    }

    /// Memory the log's buffers hold now: the writer's ([`WalWriter::buffer_bytes`]) and the
    /// scratch buffer records are encoded in.
    pub fn buffer_bytes(&self) -> usize {
        let state = self.lock();
        state.writer.buffer_bytes() + state.scratch.capacity()
    }

    /// See [`WalWriter::release_before`].
    pub fn release_before(&self, lsn: Lsn, held: &BTreeSet<u64>) -> Result<Released, WalError> {
        self.lock().writer.release_before(lsn, held)
    }

    /// The segments the log holds for the last checkpoint ([`crate::persistence::wal::held_name`]).
    pub fn held_segments(&self) -> BTreeSet<u64> {
        self.lock().writer.held_segments()
    }

    /// The configured size of a segment.
    pub fn segment_bytes(&self) -> u64 {
        self.lock().writer.segment_bytes()
    }

    /// See [`WalWriter::held_bytes`].
    pub fn held_bytes(&self) -> u64 {
        self.lock().writer.held_bytes()
    }

    /// See [`WalWriter::retained_bytes`].
    pub fn retained_bytes(&self) -> u64 {
        self.lock().writer.retained_bytes()
    }

    /// Starts the sync thread. Records that nobody asked to sync urgently (async writes) are
    /// synced at most `interval` after they were appended. The thread stops, after a last commit,
    /// when [`SyncThread::stop`] is called or the handle dropped.
    pub fn spawn_sync_thread(
        &self,
        name: String,
        interval: Duration,
        on_durable: DurableCallback,
    ) -> std::io::Result<SyncThread<S>> {
        let log = self.clone();
        let handle = std::thread::Builder::new().name(name).spawn(move || log.sync_loop(interval, on_durable))?;
        // Set once: a log has one sync thread.
        let _ = self.shared.thread.set(handle.thread().clone());
        Ok(SyncThread { log: self.clone(), handle: Some(handle) })
    }

    /// Takes and writes batches until the log stops or fails: one that syncs when a write waits
    /// for durability, the interval is due or the log stops; one written without its sync when
    /// the shard only asked for its backlog to be written ([`SharedLog::request_write`]).
    fn sync_loop(&self, interval: Duration, on_durable: DurableCallback) {
        loop {
            let mut state = self.lock();
            let urgent = self.shared.urgent.load(Ordering::SeqCst);
            let write_wanted = self.shared.write_wanted.load(Ordering::SeqCst);
            // The interval runs from the oldest record not yet durable, written or not.
            let due = state.oldest_pending.map(|since| since + interval);
            let sync = urgent || state.stopping || due.is_some_and(|due| due <= Instant::now());
            let pending = state.writer.has_pending();
            let ready = (pending && (sync || write_wanted)) || (sync && state.writer.has_unsynced());
            if !ready {
                if state.stopping {
                    return;
                }
                drop(state);
                // Until asked (a request, an append that starts the interval, a stop) or due.
                match due {
                    Some(due) => std::thread::park_timeout(due.saturating_duration_since(Instant::now())),
                    None => std::thread::park(),
                }
                continue;
            }
            // Cleared before the batch is taken, under the lock appends take too: a request for
            // records this batch misses sets it again.
            self.shared.write_wanted.store(false, Ordering::SeqCst);
            let sync = if sync {
                self.shared.urgent.store(false, Ordering::SeqCst);
                state.oldest_pending = None;
                BatchSync::Now
            } else {
                BatchSync::Later
            };
            let batch = match state.writer.take_batch(sync) {
                // A batch the writer made sync (its commit reached its bound) covers the
                // interval's records too: without this the interval, long past, would wake the
                // thread at once for ever until the next append.
                Ok(Some(batch)) if batch.syncs() => {
                    self.shared.urgent.store(false, Ordering::SeqCst);
                    state.oldest_pending = None;
                    batch
                }
                Ok(Some(batch)) => batch,
                Ok(None) => continue,
                Err(error) => {
                    drop(state);
                    on_durable(Err(error.to_string()));
                    return;
                }
            };
            drop(state);
            let (bytes, syncs) = (batch.len_bytes() as u64, batch.syncs());
            let outcome = batch.write();
            let mut state = self.lock();
            let finished = state.writer.finish_batch(outcome);
            if finished.is_ok() {
                state.counters.bytes_written += bytes;
                state.counters.commits += u64::from(syncs);
            }
            drop(state);
            let failed = finished.is_err();
            on_durable(finished.map_err(|error| error.to_string()));
            if failed {
                return;
            }
        }
    }
}

/// The running sync thread of a log.
#[derive(Debug)]
pub struct SyncThread<S: LogStorage + Clone + 'static = FsStorage> {
    log: SharedLog<S>,
    handle: Option<JoinHandle<()>>,
}

impl<S: LogStorage + Clone + 'static> SyncThread<S> {
    /// Commits what is buffered, then stops the thread and waits for it.
    pub fn stop(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.log.lock().stopping = true;
        self.log.wake_sync_thread();
        if let Some(handle) = self.handle.take() {
            // A panicked sync thread has already reported nothing more can become durable.
            let _ = handle.join();
        }
    }
}

impl<S: LogStorage + Clone + 'static> Drop for SyncThread<S> {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::persistence::wal::{recover, WalConfig};

    fn temp_log(tag: &str) -> (std::path::PathBuf, SharedLog) {
        let dir = std::env::temp_dir().join(format!("ferrite-sharedlog-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let storage = FsStorage::open_dir(&dir).expect("log directory");
        let recovered = recover(&storage, 1, |_, _| {}).expect("recover");
        let writer = WalWriter::open(storage, WalConfig { segment_bytes: 1 << 20 }, &recovered).expect("open");
        (dir, SharedLog::new(writer))
    }

    /// The log's sync thread with `interval`, and what it reports after each batch.
    fn reporting_sync_thread(
        log: &SharedLog,
        interval: Duration,
    ) -> (SyncThread, mpsc::Receiver<Result<LogEnd, String>>) {
        let (tx, rx) = mpsc::channel();
        let thread = log
            .spawn_sync_thread("test-sync".into(), interval, Box::new(move |end| drop(tx.send(end))))
            .expect("spawn");
        (thread, rx)
    }

    /// Asking for room starts a zero-filled spare segment in the background; it joins the log
    /// under a segment name, and no temporary file is left.
    #[test]
    fn spare_segments_are_made_in_the_background() {
        let (dir, log) = temp_log("spare");
        log.ensure_room(1000).expect("room");
        let segments = || {
            std::fs::read_dir(&dir)
                .expect("list")
                .filter_map(Result::ok)
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while segments().iter().filter(|name| name.ends_with(".log")).count() < 2 {
            assert!(Instant::now() < deadline, "no spare appeared: {:?}", segments());
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!segments().iter().any(|name| name.ends_with(".tmp")), "{:?}", segments());
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// A log taking large records gets spare segments only reserved (their zeros would double
    /// the bytes written for every value); one taking small commits gets them zero-filled.
    #[test]
    fn spares_are_zero_filled_for_small_commits_and_only_reserved_for_large_records() {
        for (tag, record_bytes, records) in [("spare-large", 100 << 10, 40), ("spare-small", 200, 20_000)] {
            let (dir, log) = temp_log(tag);
            let record = vec![7u8; record_bytes];
            for _ in 0..records {
                log.ensure_room(record.len() as u64).expect("room");
                log.append(&record).expect("append");
                if log.pending_bytes() > 256 << 10 {
                    log.commit_now().expect("commit");
                }
                log.wait_for_spare();
            }
            log.commit_now().expect("commit");
            let counters = log.counters();
            if record_bytes >= LARGE_RECORD_BYTES as usize {
                assert!(counters.spares_reserved >= 2, "{tag}: {counters:?}");
                assert!(counters.spares_written <= 1, "{tag}: only the first, before any record: {counters:?}");
            } else {
                assert!(counters.spares_written >= 2 && counters.spares_reserved == 0, "{tag}: {counters:?}");
            }
            std::fs::remove_dir_all(&dir).expect("clean up");
        }
    }

    #[test]
    fn urgent_records_are_synced_promptly_and_lazy_ones_within_the_interval() {
        let (dir, log) = temp_log("interval");
        let (thread, rx) = reporting_sync_thread(&log, Duration::from_millis(50));
        let lsn = log.append(b"urgent").expect("append");
        log.request_sync();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).expect("synced").map(|end| end.durable), Ok(lsn));
        let lazy = log.append(b"lazy").expect("append");
        let started = Instant::now();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).expect("synced").map(|end| end.durable), Ok(lazy));
        assert!(started.elapsed() >= Duration::from_millis(40), "a lazy record waits for the interval");
        let last = log.append(b"at stop").expect("append");
        thread.stop();
        assert_eq!(log.durable_lsn(), last, "stopping commits what is buffered");
        let mut count = 0;
        recover(&FsStorage::open_dir(&dir).expect("dir"), 1, |_, _| count += 1).expect("recover");
        assert_eq!(count, 3);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
    /// A backlog the shard asks to have written reaches its file at once without a sync: the
    /// log is written there and not durable, no commit is counted, and the commit interval (or
    /// a sync asked for) then makes it durable with one sync.
    #[test]
    fn a_backlog_asked_to_be_written_is_written_at_once_and_synced_later() {
        let (dir, log) = temp_log("write-later");
        let (thread, rx) = reporting_sync_thread(&log, Duration::from_millis(1500));
        let first = log.append(&[1u8; 100_000]).expect("append");
        let second = log.append(&[2u8; 100_000]).expect("append");
        log.request_write();
        let written = rx.recv_timeout(Duration::from_secs(5)).expect("written").expect("no failure");
        assert_eq!(written.written, second, "both records were written");
        assert!(written.durable < first, "and neither is durable yet: {written:?}");
        assert_eq!(log.written_lsn(), second);
        assert!(!log.is_quiet(), "written records wait for their sync");
        assert_eq!(log.counters().commits, 0, "a write without its sync is no commit");
        assert!(log.counters().bytes_written >= 200_000);
        let synced = rx.recv_timeout(Duration::from_secs(10)).expect("synced within the interval").expect("no failure");
        assert_eq!((synced.durable, synced.written), (second, second));
        assert_eq!(log.counters().commits, 1);
        assert!(log.is_quiet());
        let third = log.append(b"asked").expect("append");
        log.request_write();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).expect("written").expect("ok").written, third);
        log.request_sync();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).expect("synced").expect("ok").durable, third);
        thread.stop();
        let mut count = 0;
        recover(&FsStorage::open_dir(&dir).expect("dir"), 1, |_, _| count += 1).expect("recover");
        assert_eq!(count, 3);
        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    /// A batch the writer syncs because its commit reached the bound makes the interval's
    /// records durable too: the interval stops, instead of waking the sync thread without pause
    /// until the next append.
    #[test]
    fn a_batch_synced_at_the_commit_bound_stops_the_interval() {
        let (dir, log) = temp_log("commit-bound");
        let (thread, rx) = reporting_sync_thread(&log, Duration::from_secs(60));
        let promised = log.append(b"async").expect("append");
        assert!(log.interval_runs());
        for _ in 0..crate::persistence::wal::COMMIT_RECORDS_MAX {
            log.append_encoded_due(Due::WithNext, |_| {}).expect("append");
        }
        log.request_write();
        let end = rx.recv_timeout(Duration::from_secs(30)).expect("written").expect("no failure");
        assert!(end.durable >= promised, "the batch at the bound synced: {end:?}");
        assert!(!log.interval_runs(), "nothing waits for the interval any more");
        thread.stop();
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
