//! Appending to the log: records are buffered, placed in segments as they are appended, and made
//! durable together by `commit`.

use super::format::{encode_record, record_bytes, segment_name, Lsn, SegmentHeader, SEGMENT_HEADER_BYTES};
use super::reader::Recovered;
use super::storage::{LogStorage, SegmentFile};
use super::WalError;

/// The shape of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalConfig {
    /// Size of each preallocated segment file.
    pub segment_bytes: u64,
}

impl WalConfig {
    pub const DEFAULT_SEGMENT_BYTES: u64 = 64 << 20;
}

impl Default for WalConfig {
    fn default() -> Self {
        WalConfig { segment_bytes: WalConfig::DEFAULT_SEGMENT_BYTES }
    }
}

#[derive(Debug)]
struct Segment<F> {
    seq: u64,
    file: F,
    /// LSN of the last record placed in the segment; `None` while it holds none.
    last_lsn: Option<Lsn>,
}

/// Bytes of `pending` destined for one place in one segment.
#[derive(Debug, Clone, Copy)]
struct Run {
    segment: usize,
    position: u64,
    start: usize,
    end: usize,
}

/// Appends records to a log. Not thread-safe by design: one shard owns its log.
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
    durable_lsn: Lsn,
    next_seq: u64,
    /// Encoded records (and segment headers) not yet written.
    pending: Vec<u8>,
    runs: Vec<Run>,
    poisoned: Option<String>,
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
            storage.open(&name).map_err(|source| WalError::Io { context: format!("opening {name}"), source })
        };
        let mut segments = Vec::new();
        for state in &recovered.segments {
            segments.push(Segment { seq: state.seq, file: open(state.seq)?, last_lsn: state.last_lsn });
        }
        let tail = segments.len().checked_sub(1);
        let tail_position = recovered.segments.last().map_or(0, |state| state.end);
        for seq in &recovered.unstarted {
            segments.push(Segment { seq: *seq, file: open(*seq)?, last_lsn: None });
        }
        let next_seq = segments.iter().map(|s| s.seq + 1).max().unwrap_or(1);
        let durable_lsn = recovered.next_lsn - 1;
        Ok(WalWriter {
            storage,
            segment_bytes: config.segment_bytes,
            segments,
            tail,
            tail_position,
            next_lsn: recovered.next_lsn,
            durable_lsn,
            next_seq,
            pending: Vec::new(),
            runs: Vec::new(),
            poisoned: None,
        })
    }

    /// The LSN of the last record known to be on stable storage.
    pub fn durable_lsn(&self) -> Lsn {
        self.durable_lsn
    }

    /// The LSN the next appended record will get.
    pub fn next_lsn(&self) -> Lsn {
        self.next_lsn
    }

    fn check_usable(&self) -> Result<(), WalError> {
        match &self.poisoned {
            Some(cause) => Err(WalError::Poisoned(cause.clone())),
            None => Ok(()),
        }
    }

    /// Buffers one record and returns its LSN. It is durable once a later [`WalWriter::commit`]
    /// succeeds. Fails without changing anything if the record cannot fit a segment, or if it
    /// needs a new segment and the device has no room for one.
    pub fn append(&mut self, payload: &[u8]) -> Result<Lsn, WalError> {
        self.check_usable()?;
        let size = record_bytes(payload.len());
        if SEGMENT_HEADER_BYTES + size > self.segment_bytes {
            return Err(WalError::RecordTooLarge { bytes: size, segment_bytes: self.segment_bytes });
        }
        let lsn = self.next_lsn;
        let fits = self.tail.is_some() && self.tail_position + size <= self.segment_bytes;
        if !fits {
            let next = self.tail.map_or(0, |tail| tail + 1);
            if next == self.segments.len() {
                self.prepare_segment()?;
            }
            self.tail = Some(next);
            let header =
                SegmentHeader { seq: self.segments[next].seq, first_lsn: lsn, segment_bytes: self.segment_bytes };
            self.start_run(next, 0);
            self.pending.extend_from_slice(&header.encode());
            self.tail_position = SEGMENT_HEADER_BYTES;
            self.finish_run();
        }
        let tail = self.tail.expect("a tail segment was chosen above");
        let continues = self.runs.last().is_some_and(|run| {
            run.segment == tail && run.position + (run.end - run.start) as u64 == self.tail_position
        });
        if !continues {
            self.start_run(tail, self.tail_position);
        }
        encode_record(lsn, payload, &mut self.pending);
        self.finish_run();
        self.tail_position += size;
        self.segments[tail].last_lsn = Some(lsn);
        self.next_lsn += 1;
        Ok(lsn)
    }

    fn start_run(&mut self, segment: usize, position: u64) {
        let start = self.pending.len();
        self.runs.push(Run { segment, position, start, end: start });
    }

    fn finish_run(&mut self) {
        let end = self.pending.len();
        if let Some(run) = self.runs.last_mut() {
            run.end = end;
        }
    }

    /// Creates (preallocates) the next segment file. Nothing is written to the log, so failing
    /// here leaves it usable.
    fn prepare_segment(&mut self) -> Result<(), WalError> {
        let seq = self.next_seq;
        let name = segment_name(seq);
        let file = self.storage.create(&name, self.segment_bytes).map_err(|source| {
            if is_no_space(&source) {
                WalError::NoSpace(format!("cannot create {name} ({} bytes): {source}", self.segment_bytes))
            } else {
                WalError::Io { context: format!("creating {name}"), source }
            }
        })?;
        self.next_seq += 1;
        self.segments.push(Segment { seq, file, last_lsn: None });
        Ok(())
    }

    /// Writes every buffered record and syncs them; returns the durable LSN. Segments are written
    /// and synced in order, one `fdatasync` each, so a later segment never holds records whose
    /// predecessors could still be lost. Any failure poisons the writer.
    pub fn commit(&mut self) -> Result<Lsn, WalError> {
        self.check_usable()?;
        if self.runs.is_empty() {
            return Ok(self.durable_lsn);
        }
        let runs = std::mem::take(&mut self.runs);
        let mut index = 0;
        while index < runs.len() {
            let segment = runs[index].segment;
            while index < runs.len() && runs[index].segment == segment {
                let run = runs[index];
                let seq = self.segments[segment].seq;
                let written = self.segments[segment].file.write_all_at(run.position, &self.pending[run.start..run.end]);
                written.map_err(|source| self.poison(format!("writing {}", segment_name(seq)), source))?;
                index += 1;
            }
            let seq = self.segments[segment].seq;
            let synced = self.segments[segment].file.sync_data();
            synced.map_err(|source| self.poison(format!("syncing {}", segment_name(seq)), source))?;
        }
        self.pending.clear();
        self.durable_lsn = self.next_lsn - 1;
        Ok(self.durable_lsn)
    }

    fn poison(&mut self, context: String, source: std::io::Error) -> WalError {
        self.poisoned = Some(format!("{context}: {source}"));
        WalError::Io { context, source }
    }

    /// Recycles every segment whose records all precede `lsn` (a completed checkpoint covers
    /// them): each is renamed to a new, later sequence number and becomes a prepared segment, so
    /// the log reuses its files instead of allocating new ones. Returns how many were recycled.
    /// Does nothing while records are buffered.
    pub fn release_before(&mut self, lsn: Lsn) -> Result<usize, WalError> {
        self.check_usable()?;
        let Some(tail) = self.tail else { return Ok(0) };
        if !self.runs.is_empty() {
            return Ok(0);
        }
        let releasable =
            self.segments[..tail].iter().take_while(|segment| segment.last_lsn.is_none_or(|last| last < lsn)).count();
        for _ in 0..releasable {
            let (from, to) = (segment_name(self.segments[0].seq), segment_name(self.next_seq));
            self.storage
                .rename(&from, &to)
                .map_err(|source| WalError::Io { context: format!("recycling {from} as {to}"), source })?;
            let mut segment = self.segments.remove(0);
            segment.seq = self.next_seq;
            segment.last_lsn = None;
            self.next_seq += 1;
            self.segments.push(segment);
            self.tail = self.tail.map(|tail| tail - 1);
        }
        Ok(releasable)
    }
}
