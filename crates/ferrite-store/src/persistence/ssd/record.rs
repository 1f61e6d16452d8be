//! What a shard's write-ahead log records say: the payloads inside WAL records (the record frame
//! itself, with its LSN and checksum, is `wal::format`). Little-endian throughout; documented in
//! `docs/durability.md`.
//!
//! ```text
//! pool created   u8 1, descriptor (below), ranges (below): the pool and its formatting, one record
//! pool deleted   u8 2, u64 pool id
//! transaction    u8 3, u64 pool id, ranges
//! ranges         u32 range count, then per range:
//!                  u64 offset, u32 length, u8 form (0 = bytes follow, 1 = zeros), [length bytes]
//! descriptor     u64 pool id, u64 size bytes, u64 expected objects, u64 region bytes,
//!                u8 flags (1 = indexed, 2 = async by default), u16 name length, name (UTF-8)
//! ```
//!
//! A pool's creation and the formatting of its memory are one record, so no crash can keep the
//! pool without its format (a pool of zeros would stop every restart).
//!
//! Ranges are physical redo: the bytes a transaction left in pool memory. Replaying a record is
//! idempotent, which is what lets checkpoints be fuzzy (see `checkpoint.rs`).

use crate::store::{PoolSpec, WriteFootprint};

const KIND_POOL_CREATED: u8 = 1;
const KIND_POOL_DELETED: u8 = 2;
const KIND_TRANSACTION: u8 = 3;
const KIND_POOL_CONFIGURED: u8 = 4;
// A record kind never looks like an entry of a replicated log (see `entry.rs`).
const _: () = assert!(
    (KIND_POOL_CREATED | KIND_POOL_DELETED | KIND_TRANSACTION | KIND_POOL_CONFIGURED) & super::entry::ENTRY_KIND_BIT
        == 0
);
const FORM_BYTES: u8 = 0;
const FORM_ZEROS: u8 = 1;
const FLAG_INDEXED: u8 = 1;
const FLAG_ASYNC: u8 = 2;
/// The descriptor ends with the pool's plugin chain.
const FLAG_PLUGINS: u8 = 4;
/// The descriptor ends (after the chain, if any) with the name of the user who created the pool.
const FLAG_OWNER: u8 = 8;

/// Longest owner (user) name, in bytes.
pub const OWNER_BYTES_MAX: usize = 64;

/// Most plugins in a pool's chain.
pub const PLUGINS_MAX: usize = 8;
/// Longest plugin name, in bytes.
pub const PLUGIN_NAME_BYTES_MAX: usize = 64;

/// Whether `name` can name a plugin: 1 to 64 bytes of ASCII letters, digits, `-` and `_`, so a
/// chain prints as a comma-separated list and a name is safe in a file name.
pub fn is_plugin_name(name: &str) -> bool {
    (1..=PLUGIN_NAME_BYTES_MAX).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Zeros inside a logged range are found in aligned chunks of this many bytes (one table entry)...
const ZERO_CHUNK_BYTES: u64 = 64;
/// ...and a run of zero chunks at least this long is logged without its bytes: a subtable's first
/// buckets (one pair among 64 empty entries), a fresh directory or a rewritten table are mostly
/// zeros. Shorter runs stay in the bytes around them, where a range header would cost more.
pub const ZERO_RUN_BYTES_MIN: u64 = 256;

/// Bytes of a range's header in a record: offset, length, form.
const RANGE_HEADER_BYTES: u64 = 13;

/// Bytes of a descriptor at most (names are at most 255 bytes).
const DESCRIPTOR_BYTES_MAX: u64 = 4 * 8 + 1 + 2 + 255 + 1 + PLUGINS_MAX as u64 * (1 + PLUGIN_NAME_BYTES_MAX as u64);

/// The largest payload a transaction of `footprint` (see [`WriteFootprint`]) can be encoded as.
pub fn transaction_payload_max(footprint: WriteFootprint) -> u64 {
    1 + 8 + ranges_bytes_max(footprint)
}

/// The largest payload a pool's creation record can be, given its formatting's `footprint`.
pub fn pool_created_payload_max(footprint: WriteFootprint) -> u64 {
    1 + DESCRIPTOR_BYTES_MAX + ranges_bytes_max(footprint)
}

/// The payload of a pool's deletion record.
pub const POOL_DELETED_PAYLOAD_BYTES: u64 = 1 + 8;

/// The largest record payload a shard can write, given its largest write and the formatting of
/// its largest pool: what its log segments must be able to hold.
pub fn largest_payload(largest_write: WriteFootprint, largest_creation: WriteFootprint) -> u64 {
    transaction_payload_max(largest_write)
        .max(pool_created_payload_max(largest_creation))
        .max(POOL_DELETED_PAYLOAD_BYTES)
}

/// Ranges of `footprint` as encoded: the count, and per range its header and bytes. Splitting out
/// zero runs (each at least `ZERO_RUN_BYTES_MIN` long, with bytes between them) turns the
/// footprint's ranges into at most `ranges + 2 * bytes / ZERO_RUN_BYTES_MIN` pieces.
fn ranges_bytes_max(footprint: WriteFootprint) -> u64 {
    let pieces = footprint.ranges + 2 * footprint.bytes / ZERO_RUN_BYTES_MIN;
    4 + pieces * RANGE_HEADER_BYTES + footprint.bytes
}

/// What a shard knows of a pool beyond its memory: enough to recreate it after a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolDescriptor {
    /// Never reused within a data directory, so a record can never reach a later pool.
    pub id: u64,
    pub name: String,
    pub spec: PoolSpec,
    pub region_bytes: u64,
    pub indexed: bool,
    /// Writes that do not choose a durability get `async`.
    pub async_default: bool,
    /// The pool's chain of Active Data Object plugins, by name, in the order they run; each
    /// name [`is_plugin_name`], at most [`PLUGINS_MAX`].
    pub plugins: Vec<String>,
    /// The user who created the pool, on a server with users: its pool quota counts it. At most
    /// [`OWNER_BYTES_MAX`] bytes.
    pub owner: Option<String>,
}

/// Ranges of new bytes of a pool's memory: offset, length, and the bytes (`None`: zeros).
pub type Ranges<'a> = Vec<(u64, u32, Option<&'a [u8]>)>;

/// A decoded log record.
#[derive(Debug, PartialEq, Eq)]
pub enum LogRecord<'a> {
    /// A new pool, with the ranges that format its memory.
    PoolCreated {
        descriptor: PoolDescriptor,
        ranges: Ranges<'a>,
    },
    PoolDeleted {
        id: u64,
    },
    /// A pool's settings changed (`configure_pool`): whether it keeps a secondary index.
    PoolConfigured {
        id: u64,
        indexed: bool,
    },
    Transaction {
        pool: u64,
        ranges: Ranges<'a>,
    },
}

/// Why a payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("undecodable log record at payload byte {at}: {reason}")]
pub struct RecordError {
    pub at: usize,
    pub reason: &'static str,
}

pub fn encode_descriptor(descriptor: &PoolDescriptor, out: &mut Vec<u8>) {
    out.extend_from_slice(&descriptor.id.to_le_bytes());
    out.extend_from_slice(&descriptor.spec.size_bytes.to_le_bytes());
    out.extend_from_slice(&descriptor.spec.expected_objects.to_le_bytes());
    out.extend_from_slice(&descriptor.region_bytes.to_le_bytes());
    let flags = if descriptor.indexed { FLAG_INDEXED } else { 0 }
        | if descriptor.async_default { FLAG_ASYNC } else { 0 }
        | if descriptor.plugins.is_empty() { 0 } else { FLAG_PLUGINS }
        | if descriptor.owner.is_some() { FLAG_OWNER } else { 0 };
    out.push(flags);
    let name = descriptor.name.as_bytes();
    let len = u16::try_from(name.len()).expect("pool names are at most 255 bytes");
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(name);
    if !descriptor.plugins.is_empty() {
        assert!(descriptor.plugins.len() <= PLUGINS_MAX, "a chain has at most {PLUGINS_MAX} plugins");
        out.push(descriptor.plugins.len() as u8);
        for plugin in &descriptor.plugins {
            assert!(is_plugin_name(plugin), "plugin names are checked before a pool is created");
            out.push(plugin.len() as u8);
            out.extend_from_slice(plugin.as_bytes());
        }
    }
    if let Some(owner) = &descriptor.owner {
        assert!(
            !owner.is_empty() && owner.len() <= OWNER_BYTES_MAX,
            "owner names are checked before a pool is created"
        );
        out.push(owner.len() as u8);
        out.extend_from_slice(owner.as_bytes());
    }
}

/// Encodes a pool's creation together with its formatting: `ranges` (offset, length) of
/// `memory`, sorted and merged in place as for a transaction.
pub fn encode_pool_created(
    descriptor: &PoolDescriptor,
    ranges: &mut Vec<(u64, u64)>,
    memory: &[u8],
    out: &mut Vec<u8>,
) {
    out.push(KIND_POOL_CREATED);
    encode_descriptor(descriptor, out);
    encode_ranges(ranges, memory, out);
}

pub fn encode_pool_configured(id: u64, indexed: bool, out: &mut Vec<u8>) {
    out.push(KIND_POOL_CONFIGURED);
    out.extend_from_slice(&id.to_le_bytes());
    out.push(u8::from(indexed));
}

pub fn encode_pool_deleted(id: u64, out: &mut Vec<u8>) {
    out.push(KIND_POOL_DELETED);
    out.extend_from_slice(&id.to_le_bytes());
}

/// Encodes a transaction of `ranges` (offset, length) of `memory`, merged where they touch.
/// `ranges` is sorted and merged in place.
pub fn encode_transaction(pool: u64, ranges: &mut Vec<(u64, u64)>, memory: &[u8], out: &mut Vec<u8>) {
    out.push(KIND_TRANSACTION);
    out.extend_from_slice(&pool.to_le_bytes());
    encode_ranges(ranges, memory, out);
}

/// Appends the range count and the ranges (offset, length) of `memory`, merged where they touch,
/// with runs of zeros inside them logged as zero runs.
fn encode_ranges(ranges: &mut Vec<(u64, u64)>, memory: &[u8], out: &mut Vec<u8>) {
    merge_ranges(ranges);
    let count_at = out.len();
    out.extend_from_slice(&0u32.to_le_bytes());
    let mut count = 0u32;
    for &(offset, len) in ranges.iter() {
        for_each_piece(memory, offset, offset + len, |start, piece_len, zeros| {
            out.extend_from_slice(&start.to_le_bytes());
            out.extend_from_slice(&(piece_len as u32).to_le_bytes());
            if zeros {
                out.push(FORM_ZEROS);
            } else {
                out.push(FORM_BYTES);
                out.extend_from_slice(&memory[start as usize..(start + piece_len) as usize]);
            }
            count += 1;
        });
    }
    out[count_at..count_at + 4].copy_from_slice(&count.to_le_bytes());
}

/// Calls `emit(start, len, zeros)` for the pieces `start..end` of `memory` is logged as, in order:
/// runs of zeros at least `ZERO_RUN_BYTES_MIN` long (aligned to `ZERO_CHUNK_BYTES`), and runs of
/// anything else, none longer than a range's length field holds. Allocates nothing: it runs for
/// every write.
fn for_each_piece(memory: &[u8], start: u64, end: u64, mut emit: impl FnMut(u64, u64, bool)) {
    const PIECE_MAX: u64 = u32::MAX as u64 & !(ZERO_CHUNK_BYTES - 1);
    let mut emit_bounded = |mut at: u64, end: u64, zeros: bool| {
        while at < end {
            let len = (end - at).min(PIECE_MAX);
            emit(at, len, zeros);
            at += len;
        }
    };
    let mut at = start;
    while at < end {
        match next_zero_run(memory, at, end) {
            Some((zeros_start, zeros_end)) => {
                emit_bounded(at, zeros_start, false);
                emit_bounded(zeros_start, zeros_end, true);
                at = zeros_end;
            }
            None => {
                emit_bounded(at, end, false);
                at = end;
            }
        }
    }
}

/// The first run of whole zero chunks in `from..end` at least `ZERO_RUN_BYTES_MIN` long.
///
/// Such a run holds at least `ZERO_RUN_BYTES_MIN / ZERO_CHUNK_BYTES` consecutive chunks, so it
/// holds a chunk at a multiple of `ZERO_RUN_BYTES_MIN`: only those chunks are looked at until one
/// is zero, and the run around it is then measured chunk by chunk. Values' bytes, which are
/// rarely zero, are so scanned at a quarter of the chunks (the scan was 5 % of a shard's time
/// under large puts).
fn next_zero_run(memory: &[u8], from: u64, end: u64) -> Option<(u64, u64)> {
    let first = from.next_multiple_of(ZERO_CHUNK_BYTES);
    let zero_chunk = |chunk: u64| is_all_zero(&memory[chunk as usize..(chunk + ZERO_CHUNK_BYTES) as usize]);
    let mut candidate = first.next_multiple_of(ZERO_RUN_BYTES_MIN);
    while candidate + ZERO_CHUNK_BYTES <= end {
        if !zero_chunk(candidate) {
            candidate += ZERO_RUN_BYTES_MIN;
            continue;
        }
        let mut start = candidate;
        while start > first && zero_chunk(start - ZERO_CHUNK_BYTES) {
            start -= ZERO_CHUNK_BYTES;
        }
        let mut stop = candidate + ZERO_CHUNK_BYTES;
        while stop + ZERO_CHUNK_BYTES <= end && zero_chunk(stop) {
            stop += ZERO_CHUNK_BYTES;
        }
        if stop - start >= ZERO_RUN_BYTES_MIN {
            return Some((start, stop));
        }
        candidate = stop.next_multiple_of(ZERO_RUN_BYTES_MIN);
    }
    None
}

/// Sorts ranges and merges overlapping or adjacent ones.
fn merge_ranges(ranges: &mut Vec<(u64, u64)>) {
    ranges.sort_unstable();
    let mut merged = 0;
    for index in 0..ranges.len() {
        let (offset, len) = ranges[index];
        if merged > 0 {
            let (last_offset, last_len) = ranges[merged - 1];
            if offset <= last_offset + last_len {
                ranges[merged - 1].1 = (offset + len).max(last_offset + last_len) - last_offset;
                continue;
            }
        }
        ranges[merged] = (offset, len);
        merged += 1;
    }
    ranges.truncate(merged);
}

pub fn is_all_zero(bytes: &[u8]) -> bool {
    let chunks = bytes.chunks_exact(16);
    let rest = chunks.remainder();
    chunks.into_iter().all(|chunk| u128::from_ne_bytes(chunk.try_into().expect("16 bytes")) == 0)
        && rest.iter().all(|b| *b == 0)
}

/// A cursor over a payload that reports where it ran short.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], RecordError> {
        let end = self.at.checked_add(len).filter(|end| *end <= self.bytes.len());
        let end = end.ok_or(RecordError { at: self.at, reason: "payload ends early" })?;
        let bytes = &self.bytes[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, RecordError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }

    fn u32(&mut self) -> Result<u32, RecordError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Result<u64, RecordError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    fn fail<T>(&self, reason: &'static str) -> Result<T, RecordError> {
        Err(RecordError { at: self.at, reason })
    }
}

fn read_descriptor(reader: &mut Reader<'_>) -> Result<PoolDescriptor, RecordError> {
    let id = reader.u64()?;
    let spec = PoolSpec { size_bytes: reader.u64()?, expected_objects: reader.u64()? };
    let region_bytes = reader.u64()?;
    let flags = reader.u8()?;
    if flags & !(FLAG_INDEXED | FLAG_ASYNC | FLAG_PLUGINS | FLAG_OWNER) != 0 {
        return reader.fail("unknown pool flags");
    }
    let len = usize::from(reader.u16()?);
    let Ok(name) = std::str::from_utf8(reader.take(len)?) else {
        return reader.fail("pool name is not UTF-8");
    };
    let mut plugins = Vec::new();
    if flags & FLAG_PLUGINS != 0 {
        let count = usize::from(reader.u8()?);
        if count == 0 || count > PLUGINS_MAX {
            return reader.fail("plugin count out of range");
        }
        for _ in 0..count {
            let len = usize::from(reader.u8()?);
            match std::str::from_utf8(reader.take(len)?) {
                Ok(plugin) if is_plugin_name(plugin) => plugins.push(plugin.to_string()),
                _ => return reader.fail("invalid plugin name"),
            }
        }
    }
    let mut owner = None;
    if flags & FLAG_OWNER != 0 {
        let len = usize::from(reader.u8()?);
        match std::str::from_utf8(reader.take(len)?) {
            Ok(name) if !name.is_empty() && len <= OWNER_BYTES_MAX => owner = Some(name.to_string()),
            _ => return reader.fail("invalid owner name"),
        }
    }
    Ok(PoolDescriptor {
        id,
        name: name.to_string(),
        spec,
        region_bytes,
        indexed: flags & FLAG_INDEXED != 0,
        async_default: flags & FLAG_ASYNC != 0,
        plugins,
        owner,
    })
}

/// Decodes a descriptor that fills all of `bytes` (as a checkpoint manifest stores them).
pub fn decode_descriptor(bytes: &[u8]) -> Result<(PoolDescriptor, usize), RecordError> {
    let mut reader = Reader { bytes, at: 0 };
    let descriptor = read_descriptor(&mut reader)?;
    Ok((descriptor, reader.at))
}

fn read_ranges<'a>(reader: &mut Reader<'a>) -> Result<Ranges<'a>, RecordError> {
    let count = reader.u32()?;
    // A count read from disk is bounded by what the payload can hold (13 bytes per range at least).
    let mut ranges = Vec::with_capacity((count as usize).min(reader.bytes.len() / 13));
    for _ in 0..count {
        let offset = reader.u64()?;
        let len = reader.u32()?;
        let bytes = match reader.u8()? {
            FORM_BYTES => Some(reader.take(len as usize)?),
            FORM_ZEROS => None,
            _ => return reader.fail("unknown range form"),
        };
        ranges.push((offset, len, bytes));
    }
    Ok(ranges)
}

/// Decodes one record payload.
pub fn decode(payload: &[u8]) -> Result<LogRecord<'_>, RecordError> {
    let mut reader = Reader { bytes: payload, at: 0 };
    let record = match reader.u8()? {
        KIND_POOL_CREATED => {
            let descriptor = read_descriptor(&mut reader)?;
            LogRecord::PoolCreated { descriptor, ranges: read_ranges(&mut reader)? }
        }
        KIND_POOL_DELETED => LogRecord::PoolDeleted { id: reader.u64()? },
        KIND_POOL_CONFIGURED => {
            let id = reader.u64()?;
            let indexed = match reader.u8()? {
                0 => false,
                1 => true,
                _ => return reader.fail("a pool's index setting is neither 0 nor 1"),
            };
            LogRecord::PoolConfigured { id, indexed }
        }
        KIND_TRANSACTION => {
            let pool = reader.u64()?;
            LogRecord::Transaction { pool, ranges: read_ranges(&mut reader)? }
        }
        _ => return Err(RecordError { at: 0, reason: "unknown record kind" }),
    };
    if reader.at != payload.len() {
        return reader.fail("trailing bytes after the record");
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The first run of whole zero chunks in `from..end` at least `ZERO_RUN_BYTES_MIN` long,
    /// found by looking at every chunk: what [`next_zero_run`] must agree with.
    fn next_zero_run_chunk_by_chunk(memory: &[u8], from: u64, end: u64) -> Option<(u64, u64)> {
        let mut chunk = from.next_multiple_of(ZERO_CHUNK_BYTES);
        let mut run_start = None;
        while chunk + ZERO_CHUNK_BYTES <= end {
            if is_all_zero(&memory[chunk as usize..(chunk + ZERO_CHUNK_BYTES) as usize]) {
                run_start.get_or_insert(chunk);
            } else {
                if let Some(run) = run_start.filter(|run| chunk - run >= ZERO_RUN_BYTES_MIN) {
                    return Some((run, chunk));
                }
                run_start = None;
            }
            chunk += ZERO_CHUNK_BYTES;
        }
        run_start.filter(|run| chunk - run >= ZERO_RUN_BYTES_MIN).map(|run| (run, chunk))
    }

    proptest! {
        /// Memory of zero and non-zero chunks in random runs (a non-zero byte anywhere in a
        /// chunk), searched from and to random places: the quick scan finds the run a scan of
        /// every chunk finds.
        #[test]
        fn the_quick_zero_run_scan_finds_what_a_scan_of_every_chunk_finds(
            runs in proptest::collection::vec((any::<bool>(), 1usize..12, 0usize..64), 1..24),
            from in 0u64..600,
            short_of_end in 0u64..600,
        ) {
            let mut memory = Vec::new();
            for (zero, chunks, at) in runs {
                for _ in 0..chunks {
                    let mut chunk = [0u8; ZERO_CHUNK_BYTES as usize];
                    if !zero {
                        chunk[at] = 1;
                    }
                    memory.extend_from_slice(&chunk);
                }
            }
            let len = memory.len() as u64;
            let (from, end) = (from.min(len), len.saturating_sub(short_of_end).max(from.min(len)));
            prop_assert_eq!(next_zero_run(&memory, from, end), next_zero_run_chunk_by_chunk(&memory, from, end));
        }
    }

    fn descriptor() -> PoolDescriptor {
        PoolDescriptor {
            id: 7,
            name: "users".into(),
            spec: PoolSpec { size_bytes: 1 << 20, expected_objects: 100 },
            region_bytes: 4 << 20,
            indexed: true,
            async_default: false,
            plugins: Vec::new(),
            owner: None,
        }
    }

    /// A pool's owner is part of its descriptor, after its chain; a descriptor without one
    /// encodes exactly as before owners existed, and a damaged owner is refused.
    #[test]
    fn owners_round_trip_and_bad_ones_are_refused() {
        let mut plain_bytes = Vec::new();
        encode_descriptor(&descriptor(), &mut plain_bytes);
        let owned = PoolDescriptor { plugins: vec!["counter".into()], owner: Some("alice".into()), ..descriptor() };
        let mut bytes = Vec::new();
        encode_descriptor(&owned, &mut bytes);
        assert_eq!(decode_descriptor(&bytes), Ok((owned.clone(), bytes.len())));
        assert_eq!(&bytes[bytes.len() - 6..], b"\x05alice", "the owner ends the descriptor");
        let mut empty_owner = bytes[..bytes.len() - 5].to_vec();
        *empty_owner.last_mut().expect("bytes") = 0;
        assert!(decode_descriptor(&empty_owner).is_err(), "an empty owner is refused");
        let mut long = bytes[..bytes.len() - 6].to_vec();
        long.push(65);
        long.extend(std::iter::repeat_n(b'a', 65));
        assert!(decode_descriptor(&long).is_err(), "an owner past the limit is refused");
        let mut bad_utf8 = bytes.clone();
        *bad_utf8.last_mut().expect("bytes") = 0xff;
        assert!(decode_descriptor(&bad_utf8).is_err());
    }

    /// A pool's plugin chain is part of its descriptor, in order; a descriptor without one
    /// encodes exactly as before chains existed, and a damaged chain is refused, not guessed at.
    #[test]
    fn plugin_chains_round_trip_and_bad_ones_are_refused() {
        let plain = descriptor();
        let mut plain_bytes = Vec::new();
        encode_descriptor(&plain, &mut plain_bytes);
        assert_eq!(plain_bytes.len(), 4 * 8 + 1 + 2 + plain.name.len(), "no chain costs no bytes");
        let chained = PoolDescriptor { plugins: vec!["counter".into(), "versioning".into()], ..descriptor() };
        let mut bytes = Vec::new();
        encode_descriptor(&chained, &mut bytes);
        assert_eq!(decode_descriptor(&bytes), Ok((chained.clone(), bytes.len())));
        let name_end = plain_bytes.len();
        assert_eq!(&bytes[name_end..name_end + 2], &[2, 7], "two plugins, the first 7 bytes long");
        let mut empty_count = bytes.clone();
        empty_count[name_end] = 0;
        assert!(decode_descriptor(&empty_count).is_err());
        let mut bad_name = bytes.clone();
        bad_name[name_end + 2] = b',';
        assert!(decode_descriptor(&bad_name).is_err());
        assert!(decode_descriptor(&bytes[..bytes.len() - 1]).is_err(), "a cut chain is refused");
        assert!(is_plugin_name("tabulator_2-x"));
        assert!(!is_plugin_name(""));
        assert!(!is_plugin_name("a/b"));
        assert!(!is_plugin_name(&"x".repeat(PLUGIN_NAME_BYTES_MAX + 1)));
    }

    #[test]
    fn catalog_records_round_trip() {
        let mut out = Vec::new();
        let mut memory = vec![0u8; 8192];
        memory[0..5].copy_from_slice(b"HSTOR");
        encode_pool_created(&descriptor(), &mut vec![(0, 4096)], &memory, &mut out);
        // The header's bytes, then its zeros as a zero run.
        let ranges = vec![(0, 64, Some(&memory[..64])), (64, 4032, None)];
        assert_eq!(decode(&out), Ok(LogRecord::PoolCreated { descriptor: descriptor(), ranges }));
        out.clear();
        encode_pool_deleted(7, &mut out);
        assert_eq!(decode(&out), Ok(LogRecord::PoolDeleted { id: 7 }));
        for indexed in [false, true] {
            let mut configured = Vec::new();
            encode_pool_configured(9, indexed, &mut configured);
            assert_eq!(decode(&configured), Ok(LogRecord::PoolConfigured { id: 9, indexed }));
            *configured.last_mut().expect("bytes") = 2;
            assert!(decode(&configured).is_err(), "an index setting other than 0 or 1 is refused");
        }
    }

    #[test]
    fn a_single_byte_anywhere_makes_bytes_not_all_zero() {
        for len in [0usize, 1, 15, 63, 64, 65, 200, 4096] {
            let mut bytes = vec![0u8; len];
            assert!(is_all_zero(&bytes), "{len} zeros");
            for at in 0..len {
                bytes[at] = 0x80;
                assert!(!is_all_zero(&bytes), "{len} bytes, one set at {at}");
                bytes[at] = 0;
            }
        }
    }

    #[test]
    fn transactions_merge_ranges_and_log_zeros_without_bytes() {
        let mut memory = vec![0u8; 64 * 1024];
        memory[10..20].copy_from_slice(b"0123456789");
        let mut ranges = vec![(15, 10), (10, 5), (8192, 8192), (40, 2)];
        let mut out = Vec::new();
        encode_transaction(3, &mut ranges, &memory, &mut out);
        assert_eq!(ranges, vec![(10, 15), (40, 2), (8192, 8192)]);
        let LogRecord::Transaction { pool, ranges } = decode(&out).expect("decodes") else {
            panic!("a transaction");
        };
        assert_eq!(pool, 3);
        assert_eq!(ranges[0], (10, 15, Some(&memory[10..25])));
        assert_eq!(ranges[1], (40, 2, Some(&[0u8, 0][..])));
        assert_eq!(ranges[2], (8192, 8192, None), "a long zero range carries no bytes");
        assert!(out.len() < 100);
    }

    /// Zero runs of at least 256 bytes inside a range are logged without their bytes; the pieces
    /// cover the range exactly, and replaying them rebuilds the memory.
    #[test]
    fn zero_runs_inside_a_range_are_logged_without_their_bytes() {
        let mut memory = vec![0u8; 8 * 4096];
        memory[100] = 1;
        memory[3 * 4096 + 5] = 2;
        memory[3 * 4096 + 200] = 2; // a zero run of 128 bytes in between stays with the bytes
        memory[7 * 4096 + 4095] = 3;
        let mut out = Vec::new();
        encode_transaction(1, &mut vec![(50, 8 * 4096 - 50)], &memory, &mut out);
        let LogRecord::Transaction { ranges, .. } = decode(&out).expect("decodes") else { panic!("a transaction") };
        // (offset, length, whether the bytes are logged)
        let shape: Vec<(u64, u32, bool)> = ranges.iter().map(|(at, len, bytes)| (*at, *len, bytes.is_some())).collect();
        assert_eq!(
            shape,
            vec![
                (50, 128 - 50, true),
                (128, 3 * 4096 - 128, false),
                (3 * 4096, 256, true),
                (3 * 4096 + 256, (8 * 4096 - 64) - (3 * 4096 + 256), false),
                (8 * 4096 - 64, 64, true)
            ]
        );
        let mut rebuilt = vec![0xffu8; 8 * 4096];
        for (at, len, bytes) in ranges {
            let target = &mut rebuilt[at as usize..at as usize + len as usize];
            match bytes {
                Some(bytes) => target.copy_from_slice(bytes),
                None => target.fill(0),
            }
        }
        assert_eq!(rebuilt[50..], memory[50..]);
        assert!(out.len() < 500, "a few hundred bytes of data, no more: {}", out.len());
        let footprint = WriteFootprint { bytes: 8 * 4096, ranges: 1 };
        assert!(out.len() as u64 <= transaction_payload_max(footprint));
    }

    #[test]
    fn every_truncation_and_bad_kind_is_an_error() {
        let mut out = Vec::new();
        encode_pool_created(&descriptor(), &mut vec![(8, 16)], &[1u8; 64], &mut out);
        for len in 0..out.len() {
            assert!(decode(&out[..len]).is_err(), "a payload cut at {len} is refused");
        }
        out[0] = 9;
        assert!(decode(&out).is_err());
    }
}
