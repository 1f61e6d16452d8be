//! The on-disk format of the write-ahead log: segment headers and records. Documented in prose in
//! `docs/durability.md`; every field is little-endian.
//!
//! Segment header, at offset 0 of each segment file ([`SEGMENT_HEADER_BYTES`] bytes):
//!
//! ```text
//! offset size field
//!      0    8 magic "FRWALSEG"
//!      8    2 format version (2)
//!     10    2 reserved, zero
//!     12    4 CRC-32C of bytes 0..12 and 16..48
//!     16    8 segment sequence number (also in the file name)
//!     24    8 LSN of the first record in this segment
//!     32    8 segment size in bytes
//!     40    8 salt: random, drawn anew every time the header is written
//!     48   16 reserved, zero
//! ```
//!
//! Record, 8-byte aligned, anywhere after the header:
//!
//! ```text
//! offset size field
//!      0    4 magic "FRWR"
//!      4    4 payload length
//!      8    8 LSN (log sequence number: 1, 2, 3, ... with no gaps)
//!     16    8 salt of the segment the record was written into
//!     24    4 position in its commit: LSN minus the LSN of the commit's first record
//!     28    4 CRC-32C of bytes 4..28 and of the payload
//!     32    n payload
//!           padding to a multiple of 8 bytes
//! ```
//!
//! Why the salt: segments are recycled without being erased, and stored values are copied into
//! records byte for byte, so a segment can hold stale bytes that form an intact record, written
//! there by an earlier use of the file or crafted inside a value. A record counts only if it
//! carries the salt of the header in force, which no earlier use of the file and no client knows
//! (RocksDB's recyclable log format binds records to their log number the same way).
//!
//! Why the commit position: the records of one commit are written only after the previous
//! commit's `fdatasync` returned, and the device may persist them in any order. After a power
//! cut, an intact record of the *same* commit beyond a broken one is a torn last commit (nothing
//! of it was acknowledged); an intact record of a *later* commit beyond a broken one proves the
//! broken one had been synced: damage.

/// A log sequence number: the position of a record in the log, counting from 1.
pub type Lsn = u64;

pub const SEGMENT_MAGIC: [u8; 8] = *b"FRWALSEG";
pub const RECORD_MAGIC: [u8; 4] = *b"FRWR";
pub const FORMAT_VERSION: u16 = 2;
pub const SEGMENT_HEADER_BYTES: u64 = 64;
pub const RECORD_HEADER_BYTES: u64 = 32;
pub const RECORD_ALIGN_BYTES: u64 = 8;

const _: () = assert!(SEGMENT_HEADER_BYTES.is_multiple_of(RECORD_ALIGN_BYTES));
const _: () = assert!(RECORD_HEADER_BYTES.is_multiple_of(RECORD_ALIGN_BYTES));

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    pub seq: u64,
    pub first_lsn: Lsn,
    pub segment_bytes: u64,
    /// Every record written under this header carries it.
    pub salt: u64,
}

/// A salt for a segment header about to be written: random, and never zero (the value of an
/// erased file).
pub fn new_salt() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    // `RandomState` is seeded from the operating system's randomness once per process; the
    // counter makes every salt of a process different.
    static DRAWN: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(DRAWN.fetch_add(1, Ordering::Relaxed));
    hasher.finish().max(1)
}

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(raw)
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    let mut raw = [0u8; 4];
    raw.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(raw)
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES as usize] {
        let mut out = [0u8; SEGMENT_HEADER_BYTES as usize];
        out[0..8].copy_from_slice(&SEGMENT_MAGIC);
        out[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..32].copy_from_slice(&self.first_lsn.to_le_bytes());
        out[32..40].copy_from_slice(&self.segment_bytes.to_le_bytes());
        out[40..48].copy_from_slice(&self.salt.to_le_bytes());
        let crc = crate::checksum::crc32c_append(crate::checksum::crc32c(&out[0..12]), &out[16..48]);
        out[12..16].copy_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(SegmentHeader::decode(&out), Some(*self), "a header must read back as written");
        out
    }

    /// The header at the start of `bytes`, or `None` if there is no valid one (a segment that was
    /// prepared but never written, or whose first write was torn).
    pub fn decode(bytes: &[u8]) -> Option<SegmentHeader> {
        let bytes = bytes.get(..SEGMENT_HEADER_BYTES as usize)?;
        if bytes[0..8] != SEGMENT_MAGIC || bytes[8..10] != FORMAT_VERSION.to_le_bytes() {
            return None;
        }
        let crc = crate::checksum::crc32c_append(crate::checksum::crc32c(&bytes[0..12]), &bytes[16..48]);
        if u32_at(bytes, 12) != crc {
            return None;
        }
        Some(SegmentHeader {
            seq: u64_at(bytes, 16),
            first_lsn: u64_at(bytes, 24),
            segment_bytes: u64_at(bytes, 32),
            salt: u64_at(bytes, 40),
        })
    }
}

/// Bytes a record with a payload of `payload_len` bytes occupies, padding included.
pub fn record_bytes(payload_len: usize) -> u64 {
    (RECORD_HEADER_BYTES + payload_len as u64).next_multiple_of(RECORD_ALIGN_BYTES)
}

/// Where a record belongs: the segment use it was written under and its commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordPlace {
    /// The salt of the segment header in force.
    pub salt: u64,
    /// The LSN of the first record of the record's commit.
    pub commit_first_lsn: Lsn,
}

/// Appends one record to `out`.
pub fn encode_record(lsn: Lsn, place: RecordPlace, payload: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + RECORD_HEADER_BYTES as usize, 0);
    out.extend_from_slice(payload);
    seal_record(out, start, lsn, place);
}

/// Makes the bytes of `out` from `start` on a record: they are room for its header followed by
/// its payload; the header is filled in and the record padded. The payload is written in place,
/// so a record's bytes need not be copied from another buffer to be framed.
pub fn seal_record(out: &mut Vec<u8>, start: usize, lsn: Lsn, place: RecordPlace) {
    let payload_len = out.len() - start - RECORD_HEADER_BYTES as usize;
    let len = u32::try_from(payload_len).expect("the writer refuses payloads larger than a segment");
    let in_commit = u32::try_from(lsn - place.commit_first_lsn).expect("a commit holds fewer than 2^32 records");
    let header = &mut out[start..start + RECORD_HEADER_BYTES as usize];
    header[0..4].copy_from_slice(&RECORD_MAGIC);
    header[4..8].copy_from_slice(&len.to_le_bytes());
    header[8..16].copy_from_slice(&lsn.to_le_bytes());
    header[16..24].copy_from_slice(&place.salt.to_le_bytes());
    header[24..28].copy_from_slice(&in_commit.to_le_bytes());
    let (header, payload) = out[start..].split_at(RECORD_HEADER_BYTES as usize);
    let crc = crate::checksum::crc32c_append(crate::checksum::crc32c(&header[4..28]), payload);
    out[start + 28..start + 32].copy_from_slice(&crc.to_le_bytes());
    out.resize(start + record_bytes(payload_len) as usize, 0);
}

/// A record read back from a segment.
#[derive(Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub lsn: Lsn,
    /// The LSN of the first record of this record's commit.
    pub commit_first_lsn: Lsn,
    pub payload: &'a [u8],
    /// Bytes the record occupies, padding included.
    pub size: u64,
}

/// The record starting at `bytes[0]`, or `None` if the bytes there are not a whole, intact record
/// written under `salt`.
pub fn decode_record(bytes: &[u8], salt: u64) -> Option<Record<'_>> {
    let header = bytes.get(..RECORD_HEADER_BYTES as usize)?;
    if header[0..4] != RECORD_MAGIC || u64_at(header, 16) != salt {
        return None;
    }
    let payload_len = u32_at(header, 4) as usize;
    let lsn = u64_at(header, 8);
    let in_commit = u64::from(u32_at(header, 24));
    let payload = bytes.get(RECORD_HEADER_BYTES as usize..RECORD_HEADER_BYTES as usize + payload_len)?;
    let crc = crate::checksum::crc32c_append(crate::checksum::crc32c(&header[4..28]), payload);
    if u32_at(header, 28) != crc || in_commit >= lsn {
        return None;
    }
    Some(Record { lsn, commit_first_lsn: lsn - in_commit, payload, size: record_bytes(payload_len) })
}

/// The file name of segment `seq`; names sort in sequence order.
pub fn segment_name(seq: u64) -> String {
    format!("wal-{seq:016x}.log")
}

/// The sequence number in a segment file name, or `None` for other files.
pub fn parse_segment_name(name: &str) -> Option<u64> {
    parse_sequence_name(name, ".log")
}

/// The sequence number in a name `wal-<16 hex digits><suffix>`, or `None` for other names.
pub(super) fn parse_sequence_name(name: &str, suffix: &str) -> Option<u64> {
    let hex = name.strip_prefix("wal-")?.strip_suffix(suffix)?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLACE: RecordPlace = RecordPlace { salt: 0x5eed, commit_first_lsn: 5 };

    #[test]
    fn records_round_trip_and_reject_any_damage() {
        let mut out = Vec::new();
        encode_record(7, PLACE, b"hello", &mut out);
        assert_eq!(out.len() as u64, record_bytes(5));
        assert_eq!(out.len() % 8, 0);
        let record = Record { lsn: 7, commit_first_lsn: 5, payload: b"hello", size: 40 };
        assert_eq!(decode_record(&out, PLACE.salt), Some(record));
        for byte in 0..RECORD_HEADER_BYTES as usize + 5 {
            let mut damaged = out.clone();
            damaged[byte] ^= 0x40;
            assert_eq!(decode_record(&damaged, PLACE.salt), None, "a flipped byte {byte} must be caught");
        }
        assert_eq!(decode_record(&out[..out.len() - 8], PLACE.salt), None, "a cut record is not a record");
    }

    /// An intact record written under another salt (a stale one in a recycled segment, or an
    /// image inside a stored value) is not a record of this segment.
    #[test]
    fn a_record_counts_only_under_its_own_salt() {
        let mut out = Vec::new();
        encode_record(7, PLACE, b"hello", &mut out);
        assert_eq!(decode_record(&out, PLACE.salt + 1), None);
        assert_ne!(new_salt(), new_salt());
        assert_ne!(new_salt(), 0);
    }

    #[test]
    fn headers_round_trip_and_reject_damage() {
        let header = SegmentHeader { seq: 3, first_lsn: 99, segment_bytes: 1 << 20, salt: 0xabcd };
        let bytes = header.encode();
        assert_eq!(SegmentHeader::decode(&bytes), Some(header));
        for byte in [12, 30, 44] {
            let mut damaged = bytes;
            damaged[byte] ^= 1;
            assert_eq!(SegmentHeader::decode(&damaged), None, "a flipped byte {byte} must be caught");
        }
        assert_eq!(SegmentHeader::decode(&[0u8; 64]), None);
    }

    #[test]
    fn segment_names_sort_and_parse() {
        assert_eq!(segment_name(10), "wal-000000000000000a.log");
        assert_eq!(parse_segment_name(&segment_name(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_segment_name("wal-1.log"), None);
        assert_eq!(parse_segment_name("checkpoint"), None);
        assert!(segment_name(9) < segment_name(10));
    }
}
