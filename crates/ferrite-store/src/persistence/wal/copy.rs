//! Copying a log up to a chosen record: what an online backup takes of a running shard's log.
//!
//! The records up to the backup point are durable and never rewritten while the backup holds the
//! log's segments (the shard recycles segments only after a checkpoint, and a backup holds
//! checkpoints off), but the bytes after them are still being appended: a copy of them could hold
//! a later commit's records without an earlier one's, which recovery rightly calls damage. So the
//! copy keeps each segment's bytes up to the end of the last record at or before the point and
//! writes zeros after it: the copied log ends exactly at the point, as if the shard had stopped
//! there.

use super::format::{decode_record, segment_name, Lsn, SEGMENT_HEADER_BYTES};
use super::reader::{classify_segments, read_segment, superseded_from};
use super::storage::{LogStorage, SegmentFile};
use super::WalError;

/// What [`copy_until`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopiedLog {
    pub segments: u64,
    /// The sizes of the segment files written: each as long as its source, with zeros after the
    /// records copied (what a restore copies back, and counts alike).
    pub bytes: u64,
}

/// Copies the log in `source` into `target` (an empty directory) so that it ends with record
/// `until` (LSN 0: an empty log). Fails if `source` does not hold every record up to `until`.
/// Honours cuts as recovery does: records a cut dropped are not copied, and segments holding
/// nothing else are left out.
pub fn copy_until<S: LogStorage, T: LogStorage>(source: &S, target: &T, until: Lsn) -> Result<CopiedLog, WalError> {
    let io = |context: String| move |source| WalError::Io { context, source };
    let (started, _unstarted) = classify_segments(source)?;
    let caps = superseded_from(&started);
    let mut copied = CopiedLog::default();
    let mut next = None;
    for (index, (seq, header)) in started.iter().enumerate() {
        // A segment holding only records past `until`, or only records a cut dropped (a later
        // segment starts at or before its first), has nothing to copy.
        if header.first_lsn > until || caps[index] <= header.first_lsn {
            continue;
        }
        if next.is_some_and(|next| header.first_lsn > next) {
            // The previous segment's records ended early: the log does not reach `until`.
            break;
        }
        let name = segment_name(*seq);
        let bytes = read_segment(source, &name)?;
        let mut position = SEGMENT_HEADER_BYTES;
        let mut lsn = header.first_lsn;
        // Records from the cap on were dropped by a cut: a later segment holds what follows.
        while lsn <= until && lsn < caps[index] {
            match decode_record(&bytes[position as usize..], header.salt).filter(|record| record.lsn == lsn) {
                Some(record) => {
                    position += record.size;
                    lsn += 1;
                }
                None => break,
            }
        }
        let file = target.create(&name, bytes.len() as u64).map_err(io(format!("creating {name}")))?;
        file.write_all_at(0, &bytes[..position as usize]).map_err(io(format!("writing {name}")))?;
        file.sync_data().map_err(io(format!("syncing {name}")))?;
        copied.segments += 1;
        copied.bytes += bytes.len() as u64;
        next = Some(lsn);
    }
    let reached = next.map_or(0, |next| next - 1);
    if reached < until {
        return Err(WalError::Corrupt {
            file: started.last().map_or_else(|| "(no segment)".to_owned(), |(seq, _)| segment_name(*seq)),
            offset: 0,
            reason: format!("the log ends at LSN {reached}, before the copy's end at LSN {until}"),
        });
    }
    Ok(copied)
}
