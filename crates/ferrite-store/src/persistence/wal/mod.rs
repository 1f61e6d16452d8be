//! The write-ahead log of a shard: committed transactions become durable here, in order, as
//! checksummed records in preallocated segment files.
//!
//! - [`WalWriter::append`] buffers a record and assigns its LSN; [`WalWriter::commit`] writes every
//!   buffered record and syncs them with one `fdatasync` per segment touched: the group commit
//!   that lets one sync cover every operation of a shard's loop turn.
//! - [`recover`] reads the log back after a restart, replays the records a checkpoint does not
//!   cover, truncates a torn tail and refuses anything else that fails a checksum.
//!
//! Disk space is claimed ahead: segments are preallocated when a record first needs them, so a
//! full disk surfaces as [`WalError::NoSpace`] from `append`, before anything is written, and the
//! log stays usable when space returns. Any write or sync failure poisons the writer: fsync errors
//! are not transient, and retrying could report as durable a write the kernel already dropped.

mod copy;
mod format;
mod held;
mod reader;
pub(crate) mod storage;
mod writer;

#[cfg(test)]
mod cut_tests;
#[cfg(test)]
pub(crate) mod sim;
#[cfg(test)]
mod tests;

pub use copy::{copy_until, CopiedLog};
pub use format::{encode_record, record_bytes, Lsn, RecordPlace, SEGMENT_HEADER_BYTES};
pub use held::{find_segment, held_name, parse_held_name, read_record_at, RecordAt};
pub use reader::{read_range, recover, recover_placed, Recovered, SegmentState, TornCommit};
pub use storage::{FsSegment, FsStorage, LogStorage, SegmentFile};
pub use writer::{
    spare_name, BatchOutcome, BatchSync, CommitBatch, LogEnd, Released, WalConfig, WalWriter, COMMIT_RECORDS_MAX,
};

/// Why the log refused or failed an operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WalError {
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
    /// Something other than a torn tail failed its checksum: the log cannot be trusted.
    #[error("write-ahead log is damaged in {file} at offset {offset}: {reason}")]
    Corrupt { file: String, offset: u64, reason: String },
    /// An earlier write or sync failed; nothing more is accepted.
    #[error("write-ahead log is unusable after an earlier failure: {0}")]
    Poisoned(String),
    /// No room for a new segment; nothing was written and the log stays usable.
    #[error("no space left for the write-ahead log: {0}")]
    NoSpace(String),
    #[error("a record of {bytes} bytes does not fit in a segment of {segment_bytes} bytes")]
    RecordTooLarge { bytes: u64, segment_bytes: u64 },
    /// The log cannot be cut back or restarted while records are buffered, being written, or
    /// written and not yet synced.
    #[error("the log holds records not yet durable; commit them first")]
    Unflushed,
    /// A read asked for records the log does not hold in one run: it starts after them, or
    /// skips them (restarted past them, or a record is damaged and later ones follow).
    #[error("the write-ahead log holds no record {lsn}: {reason}")]
    Missing { lsn: Lsn, reason: String },
    /// An entry of a replicated log was appended at an index other than the log's next.
    #[error("entry {index} cannot be appended: the log's next index is {next}")]
    OutOfOrder { index: Lsn, next: Lsn },
}
