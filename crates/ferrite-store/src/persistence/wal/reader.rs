//! Reading the log back after a restart.
//!
//! Recovery is a decision table, applied segment by segment in sequence order (each case named in
//! the code):
//!
//! | situation | decision |
//! |---|---|
//! | a segment file without a valid header of its own sequence | **unstarted**: prepared or recycled, never written; reusable. Only valid after every started segment. |
//! | the record at the read position is intact and has the next LSN | **apply** it (if at or after the checkpoint's LSN) |
//! | anything else, and a later started segment exists | **segment end**: the next segment's header must name the next LSN, or the log has a **gap** (corrupt) |
//! | anything else in the last started segment, and an intact record with a later LSN follows | **damage** inside the log (corrupt) |
//! | anything else in the last started segment, and nothing intact follows | **torn tail**: the log ends here; the writer overwrites it |
//!
//! A torn tail can only hold records whose commit never completed (the writer syncs a segment
//! before it writes to the next), so cutting it loses nothing that was acknowledged.

use super::format::{
    decode_record, parse_segment_name, segment_name, Lsn, SegmentHeader, RECORD_ALIGN_BYTES, RECORD_MAGIC,
    SEGMENT_HEADER_BYTES,
};
use super::storage::{LogStorage, SegmentFile};
use super::WalError;

/// A started segment as recovery found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentState {
    pub seq: u64,
    pub first_lsn: Lsn,
    /// LSN of the last intact record, if any.
    pub last_lsn: Option<Lsn>,
    /// Offset just after the last intact record: where writing resumes.
    pub end: u64,
}

/// What recovery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Started segments, in sequence order.
    pub segments: Vec<SegmentState>,
    /// Sequence numbers of segment files that were never written: free for reuse.
    pub unstarted: Vec<u64>,
    /// The LSN the next record gets.
    pub next_lsn: Lsn,
    /// Records handed to `apply`.
    pub replayed: u64,
    /// Where a torn tail was cut off (file and offset), if the last segment ended in one.
    pub torn_tail: Option<(String, u64)>,
}

fn io_error(context: String) -> impl FnOnce(std::io::Error) -> WalError {
    move |source| WalError::Io { context, source }
}

fn read_segment<S: LogStorage>(storage: &S, name: &str) -> Result<Vec<u8>, WalError> {
    let file = storage.open(name).map_err(io_error(format!("opening {name}")))?;
    let len = file.size_bytes().map_err(io_error(format!("reading the size of {name}")))?;
    let mut bytes = vec![0u8; usize::try_from(len).expect("segments fit in memory")];
    file.read_exact_at(0, &mut bytes).map_err(io_error(format!("reading {name}")))?;
    Ok(bytes)
}

/// Reads the log in `storage`, calls `apply` for every record with an LSN at or after `from_lsn`
/// (the LSN a checkpoint says replay starts at; 1 without a checkpoint), in order, and reports
/// where the log ends.
pub fn recover<S: LogStorage>(
    storage: &S,
    from_lsn: Lsn,
    mut apply: impl FnMut(Lsn, &[u8]),
) -> Result<Recovered, WalError> {
    let from_lsn = from_lsn.max(1);
    let (started, unstarted) = classify_segments(storage)?;
    let mut recovered = Recovered { segments: Vec::new(), unstarted, next_lsn: from_lsn, replayed: 0, torn_tail: None };
    let mut expected: Option<Lsn> = None;
    for (index, (seq, header)) in started.iter().enumerate() {
        let name = segment_name(*seq);
        let corrupt = |offset: u64, reason: String| WalError::Corrupt { file: name.clone(), offset, reason };
        if expected.is_none() && header.first_lsn > from_lsn {
            return Err(corrupt(
                24,
                format!("the log starts at LSN {} but recovery needs it from LSN {from_lsn}", header.first_lsn),
            ));
        }
        let bytes = read_segment(storage, &name)?;
        let mut next = header.first_lsn;
        let mut position = SEGMENT_HEADER_BYTES;
        let mut last_lsn = None;
        // Apply: every intact record with the next LSN.
        while let Some(record) = decode_record(&bytes[position as usize..]).filter(|record| record.lsn == next) {
            if record.lsn >= from_lsn {
                apply(record.lsn, record.payload);
                recovered.replayed += 1;
            }
            last_lsn = Some(record.lsn);
            position += record.size;
            next += 1;
        }
        expected = Some(next);
        // Segment end: the next segment must start where this one's records end; otherwise the
        // record at this position was damaged. In the last segment, what follows decides between
        // damage and a torn tail.
        if let Some((next_seq, next_header)) = started.get(index + 1) {
            if next_header.first_lsn != next {
                return Err(corrupt(
                    position,
                    format!(
                        "the record here is damaged: this segment's records end at LSN {} but segment {} starts at LSN {}",
                        next - 1,
                        segment_name(*next_seq),
                        next_header.first_lsn
                    ),
                ));
            }
        } else {
            if let Some(offset) = later_intact_record(&bytes, position, next) {
                return Err(corrupt(
                    position,
                    format!(
                        "the record here is damaged but an intact record with a later LSN follows at offset {offset}"
                    ),
                ));
            }
            if bytes.get(position as usize..position as usize + 4) == Some(&RECORD_MAGIC[..]) {
                recovered.torn_tail = Some((name.clone(), position));
            }
        }
        recovered.segments.push(SegmentState { seq: *seq, first_lsn: header.first_lsn, last_lsn, end: position });
    }
    if let (Some(next), Some(last)) = (expected, recovered.segments.last()) {
        if next < from_lsn {
            return Err(WalError::Corrupt {
                file: segment_name(last.seq),
                offset: last.end,
                reason: format!(
                    "the log ends at LSN {} but the checkpoint covers up to LSN {}",
                    next - 1,
                    from_lsn - 1
                ),
            });
        }
        recovered.next_lsn = next;
    }
    Ok(recovered)
}

/// Started segments with their headers, and the sequence numbers of unstarted ones.
type Classified = (Vec<(u64, SegmentHeader)>, Vec<u64>);

/// Splits the segment files into started ones (a valid header naming their own sequence), with
/// their headers, and unstarted ones, both in sequence order. Segments start in sequence order, so
/// an unstarted segment before a started one means the log was damaged.
fn classify_segments<S: LogStorage>(storage: &S) -> Result<Classified, WalError> {
    let mut seqs: Vec<u64> = storage
        .list()
        .map_err(io_error("listing the log directory".into()))?
        .iter()
        .filter_map(|name| parse_segment_name(name))
        .collect();
    seqs.sort_unstable();
    let mut started = Vec::new();
    let mut unstarted = Vec::new();
    for seq in seqs {
        let name = segment_name(seq);
        let file = storage.open(&name).map_err(io_error(format!("opening {name}")))?;
        let mut header = [0u8; SEGMENT_HEADER_BYTES as usize];
        let header = file.read_exact_at(0, &mut header).ok().and_then(|()| SegmentHeader::decode(&header));
        match header.filter(|header| header.seq == seq) {
            Some(header) => {
                if let Some(before) = unstarted.first() {
                    return Err(WalError::Corrupt {
                        file: name,
                        offset: 0,
                        reason: format!("segment {before:#x} was never written, yet this later segment was"),
                    });
                }
                started.push((seq, header));
            }
            None => unstarted.push(seq),
        }
    }
    Ok((started, unstarted))
}

/// The offset of an intact record with an LSN of at least `next` after `position`, if any.
fn later_intact_record(bytes: &[u8], position: u64, next: Lsn) -> Option<u64> {
    let step = RECORD_ALIGN_BYTES as usize;
    (position as usize + step..bytes.len())
        .step_by(step)
        .find(|offset| decode_record(&bytes[*offset..]).is_some_and(|record| record.lsn >= next))
        .map(|offset| offset as u64)
}
