//! Reading the log back after a restart.
//!
//! Recovery is a decision table, applied segment by segment in sequence order (each case named in
//! the code). A record *counts* when it is intact and carries the salt of its segment's header.
//!
//! | situation | decision |
//! |---|---|
//! | a segment file without a valid header of its own sequence | **unstarted**: prepared or recycled, never written since; reusable. Only valid after every started segment. |
//! | the record at the read position counts and has the next LSN | **apply** it (if at or after the checkpoint's LSN) |
//! | a record whose LSN a later started segment's header names as its first (or is past it) | **superseded**: the log was cut back there ([`WalWriter::truncate_after`](super::WalWriter::truncate_after), a replica overwriting entries a new Raft leader did not keep) and the later segment holds what follows; read past, never applied |
//! | anything else, and a later started segment exists | **segment end**: the next segment's header must name the next LSN or an earlier one (a cut), or a later one that recovery does not need (the log restarted there, [`WalWriter::restart_at`](super::WalWriter::restart_at)); any other later one is a **gap** (damage) |
//! | anything else in the last started segment, and no record counts beyond it | **end**: the log ends here (a torn record, if one began here, is cut) |
//! | anything else in the last started segment, and every record that counts beyond it belongs to the commit of the missing LSN | **torn commit**: the last commit was interrupted and the device kept some of its records and not others; the log ends here and the rest of that commit is cut |
//! | anything else in the last started segment, and a record of a later commit counts beyond it | **damage**: a later commit is written only after this one's `fdatasync` returned, so the record here was durable |
//!
//! Nothing cut was acknowledged: a commit is acknowledged only after all its records are synced.
//! One case cannot be told apart from the torn commit: damage (a flipped bit) inside the very
//! last commit, after it was synced, looks exactly like that commit torn; recovery then cuts it.

use super::format::{
    decode_record, parse_segment_name, segment_name, Lsn, SegmentHeader, FORMAT_VERSION, RECORD_ALIGN_BYTES,
    RECORD_MAGIC, SEGMENT_HEADER_BYTES, SEGMENT_MAGIC,
};
use super::held::RecordAt;
use super::storage::{LogStorage, SegmentFile};
use super::WalError;

/// A started segment as recovery found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentState {
    pub seq: u64,
    pub first_lsn: Lsn,
    /// The salt of its header.
    pub salt: u64,
    /// LSN of the last intact record, if any.
    pub last_lsn: Option<Lsn>,
    /// Offset just after the last intact record: where writing resumes.
    pub end: u64,
}

/// The interrupted last commit recovery cut off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornCommit {
    /// Where the log now ends (file and offset).
    pub file: String,
    pub offset: u64,
    /// The first LSN that did not survive.
    pub missing_lsn: Lsn,
    /// Intact records of the same commit found beyond the cut and dropped with it, and the
    /// highest of their LSNs.
    pub dropped_records: u64,
    pub last_dropped_lsn: Lsn,
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
    /// Where a torn record was cut off (file and offset), if the last segment ended in one.
    pub torn_tail: Option<(String, u64)>,
    /// The interrupted last commit, if the device kept some of its records beyond a lost one.
    pub torn_commit: Option<TornCommit>,
}

fn io_error(context: String) -> impl FnOnce(std::io::Error) -> WalError {
    move |source| WalError::Io { context, source }
}

pub(super) fn read_segment<S: LogStorage>(storage: &S, name: &str) -> Result<Vec<u8>, WalError> {
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
    recover_placed(storage, from_lsn, |lsn, _, payload| apply(lsn, payload))
}

/// [`recover`], also telling `apply` where each record lies in the log.
pub fn recover_placed<S: LogStorage>(
    storage: &S,
    from_lsn: Lsn,
    mut apply: impl FnMut(Lsn, RecordAt, &[u8]),
) -> Result<Recovered, WalError> {
    let from_lsn = from_lsn.max(1);
    let (started, unstarted) = classify_segments(storage)?;
    let mut recovered = Recovered {
        segments: Vec::new(),
        unstarted,
        next_lsn: from_lsn,
        replayed: 0,
        torn_tail: None,
        torn_commit: None,
    };
    let mut expected: Option<Lsn> = None;
    let caps = superseded_from(&started);
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
        // Apply: every record that counts and has the next LSN, unless a later segment
        // supersedes it.
        while let Some(record) =
            decode_record(&bytes[position as usize..], header.salt).filter(|record| record.lsn == next)
        {
            if record.lsn < caps[index] {
                if record.lsn >= from_lsn {
                    apply(record.lsn, RecordAt { segment: *seq, position }, record.payload);
                    recovered.replayed += 1;
                }
                last_lsn = Some(record.lsn);
            }
            position += record.size;
            next += 1;
        }
        expected = Some(next.min(caps[index]));
        if let Some((next_seq, next_header)) = started.get(index + 1) {
            // Segment end: the next segment must start where this one's records end, or earlier
            // (a cut), or where the log restarted past everything recovery needs; otherwise the
            // record here was damaged.
            let restarted = next_header.first_lsn > next && next_header.first_lsn <= from_lsn;
            if next_header.first_lsn > next && !restarted {
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
            match end_of_last_segment(&bytes, position, next, header.salt) {
                LastSegmentEnd::End => {}
                LastSegmentEnd::TornCommit { dropped_records, last_dropped_lsn } => {
                    recovered.torn_commit = Some(TornCommit {
                        file: name.clone(),
                        offset: position,
                        missing_lsn: next,
                        dropped_records,
                        last_dropped_lsn,
                    });
                }
                LastSegmentEnd::Damage { offset, lsn, commit_first_lsn } => {
                    return Err(corrupt(
                        position,
                        format!(
                            "the record here (LSN {next}) is damaged, but record {lsn} of a later commit (from LSN \
                             {commit_first_lsn}) follows at offset {offset}, and a commit is written only after the \
                             previous one was durable"
                        ),
                    ));
                }
            }
            let begins_record = bytes.get(position as usize..position as usize + 4) == Some(&RECORD_MAGIC[..]);
            if begins_record || recovered.torn_commit.is_some() {
                recovered.torn_tail = Some((name.clone(), position));
            }
        }
        recovered.segments.push(SegmentState {
            seq: *seq,
            first_lsn: header.first_lsn,
            salt: header.salt,
            last_lsn,
            end: position,
        });
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

/// For each started segment, the first LSN it may contribute no record at or past: the lowest
/// first LSN of the segments after it (a later segment that starts at or before a record's LSN
/// was written after the log was cut back, and holds what follows), or no bound for the last.
pub(super) fn superseded_from(started: &[(u64, SegmentHeader)]) -> Vec<Lsn> {
    let mut caps = vec![Lsn::MAX; started.len()];
    let mut lowest = Lsn::MAX;
    for (index, (_, header)) in started.iter().enumerate().rev() {
        caps[index] = lowest;
        lowest = lowest.min(header.first_lsn);
    }
    caps
}

/// Reads the records with LSNs in `from..=to` from the log in `storage` (a replica sending
/// entries it no longer holds in memory), in order, honouring cuts as recovery does; stops early
/// at the log's end. Reads only the segments that can hold them. The records visited are always
/// `from`, `from + 1`, ... with no gap: a range the log does not hold in one run (it starts after
/// `from`, was restarted past part of the range, or lost a record that later ones follow) is
/// refused with [`WalError::Missing`] once the records before the gap were visited.
pub fn read_range<S: LogStorage>(
    storage: &S,
    from: Lsn,
    to: Lsn,
    mut visit: impl FnMut(Lsn, &[u8]),
) -> Result<(), WalError> {
    let (started, _) = classify_segments(storage)?;
    let caps = superseded_from(&started);
    // The LSN the next record visited must have.
    let mut expected = from.max(1);
    for (index, (seq, header)) in started.iter().enumerate() {
        if expected > to {
            break;
        }
        if header.first_lsn > to || caps[index] <= expected {
            continue;
        }
        let name = segment_name(*seq);
        let bytes = read_segment(storage, &name)?;
        let mut next = header.first_lsn;
        let mut position = SEGMENT_HEADER_BYTES;
        while let Some(record) =
            decode_record(&bytes[position as usize..], header.salt).filter(|record| record.lsn == next)
        {
            if record.lsn >= caps[index] || record.lsn > to {
                break;
            }
            if record.lsn > expected {
                return Err(missing(expected, format!("the next record the log holds is {} in {name}", record.lsn)));
            }
            if record.lsn == expected {
                visit(record.lsn, record.payload);
                expected += 1;
            }
            position += record.size;
            next += 1;
        }
    }
    // Past the records visited, the range ends with the log unless a later segment starts past
    // them: the last segment's own records end where the log does.
    match started.last() {
        Some((seq, header)) if expected <= to && header.first_lsn > expected => {
            Err(missing(expected, format!("the log goes on at LSN {} in {}", header.first_lsn, segment_name(*seq))))
        }
        _ => Ok(()),
    }
}

fn missing(lsn: Lsn, reason: String) -> WalError {
    WalError::Missing { lsn, reason }
}

/// How the last started segment ends, from what counts beyond the first record that breaks the
/// chain (at `position`, where LSN `missing` was expected).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LastSegmentEnd {
    /// Nothing counts beyond: the log ends here.
    End,
    /// Only records of the commit that `missing` belongs to count beyond.
    TornCommit { dropped_records: u64, last_dropped_lsn: Lsn },
    /// A record that cannot belong to that commit counts beyond (at `offset`).
    Damage { offset: u64, lsn: Lsn, commit_first_lsn: Lsn },
}

fn end_of_last_segment(bytes: &[u8], position: u64, missing: Lsn, salt: u64) -> LastSegmentEnd {
    let step = RECORD_ALIGN_BYTES as usize;
    let mut end = LastSegmentEnd::End;
    let mut offset = position as usize;
    while offset < bytes.len() {
        let Some(record) = decode_record(&bytes[offset..], salt) else {
            offset += step;
            continue;
        };
        let same_commit = record.commit_first_lsn <= missing && missing < record.lsn;
        if !same_commit {
            return LastSegmentEnd::Damage {
                offset: offset as u64,
                lsn: record.lsn,
                commit_first_lsn: record.commit_first_lsn,
            };
        }
        end = match end {
            LastSegmentEnd::TornCommit { dropped_records, last_dropped_lsn } => LastSegmentEnd::TornCommit {
                dropped_records: dropped_records + 1,
                last_dropped_lsn: last_dropped_lsn.max(record.lsn),
            },
            _ => LastSegmentEnd::TornCommit { dropped_records: 1, last_dropped_lsn: record.lsn },
        };
        offset += record.size as usize;
    }
    end
}

/// Started segments with their headers, and the sequence numbers of unstarted ones.
type Classified = (Vec<(u64, SegmentHeader)>, Vec<u64>);

/// Whether `raw` is a whole segment header of log format 1 (its own checksum rule: CRC-32C of
/// bytes 0..12 and 16..40). A header torn by a crash is not one, whatever its version bytes say.
fn is_format_1_header(raw: &[u8]) -> bool {
    let crc = crate::checksum::crc32c_append(crate::checksum::crc32c(&raw[0..12]), &raw[16..40]);
    raw[0..8] == SEGMENT_MAGIC && raw[8..10] == 1u16.to_le_bytes() && raw[12..16] == crc.to_le_bytes()
}

/// Splits the segment files into started ones (a valid header naming their own sequence), with
/// their headers, and unstarted ones, both in sequence order. Segments start in sequence order, so
/// an unstarted segment before a started one means the log was damaged.
pub(super) fn classify_segments<S: LogStorage>(storage: &S) -> Result<Classified, WalError> {
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
        let mut raw = [0u8; SEGMENT_HEADER_BYTES as usize];
        let readable = file.read_exact_at(0, &mut raw).is_ok();
        if readable && is_format_1_header(&raw) {
            // Written by a build with the first log format: never to be taken for an unwritten
            // file, which would make recovery skip its records.
            return Err(WalError::Corrupt {
                file: name,
                offset: 8,
                reason: format!("log format version 1; this build reads version {FORMAT_VERSION}"),
            });
        }
        let header = readable.then(|| SegmentHeader::decode(&raw)).flatten();
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
