//! Segments held for a checkpoint: a segment whose records hold the bytes of pages a checkpoint
//! refers to (the pages of large values, written to the disk once, in the log) is not recycled
//! when the log moves past it. It leaves the log under another name (`wal-<seq>.held`), which
//! recovery's reading of the log ignores, and stays until no checkpoint refers to it; then it
//! is recycled like any other segment.
//!
//! A checkpoint names a record by [`RecordAt`] and its LSN. What is read back there counts only
//! if the file's header names that segment, the record carries the header's salt and that LSN,
//! and its checksum holds: the same binding recovery of the log asks of every record, so no
//! stale or forged bytes can pass for a value's.

use super::format::{
    decode_record, parse_sequence_name, segment_name, Lsn, SegmentHeader, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES,
};
use super::storage::{LogStorage, SegmentFile};
use super::WalError;

/// Where a record lies in the log: its segment's sequence number and its offset in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordAt {
    pub segment: u64,
    pub position: u64,
}

/// The file name of segment `seq` while a checkpoint holds it.
pub fn held_name(seq: u64) -> String {
    format!("wal-{seq:016x}.held")
}

/// The sequence number in a held segment's file name, or `None` for other files.
pub fn parse_held_name(name: &str) -> Option<u64> {
    parse_sequence_name(name, ".held")
}

/// The name segment `seq` has in `storage`: held, or still in the log (a crash came between the
/// checkpoint that holds it and its renaming), or `None` if it is in neither.
pub fn find_segment<S: LogStorage>(storage: &S, seq: u64) -> Result<Option<String>, WalError> {
    let names =
        storage.list().map_err(|source| WalError::Io { context: "listing the log directory".into(), source })?;
    Ok([held_name(seq), segment_name(seq)].into_iter().find(|name| names.contains(name)))
}

/// Reads the payload of record `lsn` at `at`, checked as described above.
pub fn read_record_at<S: LogStorage>(storage: &S, at: RecordAt, lsn: Lsn) -> Result<Vec<u8>, WalError> {
    let Some(name) = find_segment(storage, at.segment)? else {
        return Err(WalError::Missing {
            lsn,
            reason: format!("segment {} is neither held nor in the log", segment_name(at.segment)),
        });
    };
    let io = |context: String| move |source| WalError::Io { context, source };
    let corrupt = |offset: u64, reason: String| WalError::Corrupt { file: name.clone(), offset, reason };
    let file = storage.open(&name).map_err(io(format!("opening {name}")))?;
    let mut raw = [0u8; SEGMENT_HEADER_BYTES as usize];
    file.read_exact_at(0, &mut raw).map_err(io(format!("reading {name}")))?;
    let header = SegmentHeader::decode(&raw).filter(|header| header.seq == at.segment);
    let header = header.ok_or_else(|| corrupt(0, format!("no valid header of segment {:#x}", at.segment)))?;
    if at.position < SEGMENT_HEADER_BYTES || at.position >= header.segment_bytes {
        return Err(corrupt(at.position, "the record's offset lies outside the segment".into()));
    }
    let mut head = [0u8; RECORD_HEADER_BYTES as usize];
    file.read_exact_at(at.position, &mut head).map_err(io(format!("reading {name}")))?;
    let payload_len = u64::from(u32::from_le_bytes(head[4..8].try_into().expect("4 bytes")));
    let end = at.position + RECORD_HEADER_BYTES + payload_len;
    let file_bytes = file.size_bytes().map_err(io(format!("reading the size of {name}")))?;
    if end > header.segment_bytes.min(file_bytes) {
        return Err(corrupt(at.position, "the record's length runs past the segment".into()));
    }
    let mut bytes = vec![0u8; (RECORD_HEADER_BYTES + payload_len) as usize];
    file.read_exact_at(at.position, &mut bytes).map_err(io(format!("reading {name}")))?;
    match decode_record(&bytes, header.salt) {
        Some(record) if record.lsn == lsn => {
            bytes.drain(..RECORD_HEADER_BYTES as usize);
            bytes.truncate(payload_len as usize);
            Ok(bytes)
        }
        _ => Err(corrupt(at.position, format!("no intact record {lsn} of this segment here"))),
    }
}
