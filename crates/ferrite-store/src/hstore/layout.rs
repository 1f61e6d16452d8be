//! The on-memory format of an `hstore` region, as offset constants beside the code that reads
//! them (the prose version is the module documentation of `hstore`).
//!
//! Everything is little-endian and addressed by offset from the start of the region, never by
//! pointer, because an Active Data Object host maps the same region at another address.
//!
//! ```text
//! offset 0            ┌──────────────────────────────────────────────┐
//!                     │ header (HEADER_BYTES): magic, version,        │
//!                     │ checksum, geometry, segment directory         │
//! HEADER_BYTES        ├──────────────────────────────────────────────┤
//!                     │ heap: slabs of small keys/values, from low    │
//!                     │ addresses upward                              │
//!                     │                 ... free ...                  │
//!                     │ large values and table segments, from high    │
//!                     │ addresses downward                            │
//! heap end            └──────────────────────────────────────────────┘
//! ```
//!
//! Header fields (offsets in bytes from the start of the region):
//!
//! | offset | size | field | notes |
//! |---:|---:|---|---|
//! | 0 | 8 | magic | `FERHSTOR` |
//! | 8 | 4 | format version | [`FORMAT_VERSION`] |
//! | 12 | 4 | header checksum | CRC-32 (IEEE) of bytes `16..HEADER_BYTES` |
//! | 16 | 8 | region bytes | length of the region when formatted; `open` requires the same length |
//! | 24 | 8 | capacity bytes | the pool's declared size (`PoolSpec::size_bytes`) |
//! | 32 | 8 | expected objects | the pool's sizing hint, kept for reporting |
//! | 40 | 16 | hash key | two u64 halves of the SipHash-2-4 key of this pool |
//! | 56 | 4 | slab bytes | size (and alignment) of one slab; a power of two |
//! | 60 | 4 | base buckets log2 | log2 of the bucket count of segment 0 |
//! | 64 | 4 | segment count | segments in use, at least 1 |
//! | 68 | 4 | reserved | zero |
//! | 72 | 8 × [`SEGMENTS_MAX`] | segment directory | offset of each segment; unused slots zero |
//! | [`HEADER_USED_BYTES`] | .. | reserved | zero up to `HEADER_BYTES` |
//!
//! Table entry (64 bytes, one cache line; MCAS section 3.2.2):
//!
//! | offset | size | field | notes |
//! |---:|---:|---|---|
//! | 0 | 8 | hop word | bits 0..63: hop bitmap of this bucket (bit j set: the entry at bucket `this + j` has its home here); bit 63: this entry is in use |
//! | 8 | 8 | hash | SipHash-2-4 of the key under the pool's hash key |
//! | 16 | 8 | write time | nanoseconds since the Unix epoch of the last put |
//! | 24 | 8 | value length | |
//! | 32 | 4 | key length | |
//! | 36 | 28 | payload | key and value inline, or u64 offsets of out-of-line copies; see [`Placement`] |
//!
//! The hop word belongs to the *bucket*, the other 56 bytes (the "occupant") to the pair that
//! lives in the entry, so a displacement moves the occupant and leaves hop bitmaps in place.

use super::hash::siphash24;
use super::OpenError;
use crate::store::PoolSpec;

/// Bytes of the header page at the start of the region.
pub(crate) const HEADER_BYTES: u64 = 4096;
pub(crate) const MAGIC: [u8; 8] = *b"FERHSTOR";
/// Version 1: the format described in this file.
pub(crate) const FORMAT_VERSION: u32 = 1;

pub(crate) const MAGIC_OFFSET: usize = 0;
pub(crate) const VERSION_OFFSET: usize = 8;
pub(crate) const CHECKSUM_OFFSET: usize = 12;
/// The checksum covers every header byte after it, so any flipped bit in the header page is caught.
pub(crate) const CHECKSUM_COVERS_FROM: usize = 16;
pub(crate) const REGION_BYTES_OFFSET: usize = 16;
pub(crate) const CAPACITY_BYTES_OFFSET: usize = 24;
pub(crate) const EXPECTED_OBJECTS_OFFSET: usize = 32;
pub(crate) const HASH_KEY_OFFSET: usize = 40;
pub(crate) const SLAB_BYTES_OFFSET: usize = 56;
pub(crate) const BASE_BUCKETS_LOG2_OFFSET: usize = 60;
pub(crate) const SEGMENT_COUNT_OFFSET: usize = 64;
pub(crate) const HEADER_RESERVED_OFFSET: usize = 68;
pub(crate) const SEGMENTS_OFFSET: usize = 72;
/// Most segments a table can have. Segment 0 has `2^base` buckets and each later segment doubles
/// the table, so 56 segments reach far beyond any region this format can address.
pub(crate) const SEGMENTS_MAX: usize = 56;
pub(crate) const HEADER_USED_BYTES: usize = SEGMENTS_OFFSET + 8 * SEGMENTS_MAX;

/// One hash-table entry is one cache line, as in MCAS.
pub(crate) const ENTRY_BYTES: u64 = 64;
pub(crate) const HOP_WORD_OFFSET: usize = 0;
pub(crate) const OCCUPANT_OFFSET: usize = 8;
pub(crate) const OCCUPANT_BYTES: usize = 56;
pub(crate) const HASH_OFFSET: usize = 8;
pub(crate) const WRITE_TIME_OFFSET: usize = 16;
pub(crate) const VALUE_LEN_OFFSET: usize = 24;
pub(crate) const KEY_LEN_OFFSET: usize = 32;
pub(crate) const PAYLOAD_OFFSET: usize = 36;
pub(crate) const PAYLOAD_BYTES: usize = 28;
/// Bytes of an out-of-line reference inside the payload: a u64 region offset.
pub(crate) const REFERENCE_BYTES: usize = 8;

/// Hopscotch neighbourhood H: a pair lives at most H - 1 buckets after its home bucket. 63 as in
/// MCAS, so the bitmap and the in-use flag share one u64.
pub(crate) const NEIGHBOURHOOD: u64 = 63;
pub(crate) const USED_BIT: u64 = 1 << 63;
pub(crate) const HOP_MASK: u64 = USED_BIT - 1;

/// Smallest segment 0: 64 buckets (4 KiB), more than the neighbourhood so a neighbourhood never
/// wraps onto itself.
pub(crate) const BUCKETS_LOG2_MIN: u32 = 6;
/// Largest segment 0 a sizing hint can ask for: 2^24 buckets (1 GiB of entries, 14.7 million
/// pairs at the load limit), so a pool that claims to expect billions of objects cannot make
/// creation claim more. A pool sized by its hint never grows while it fills to the hint: a growth
/// rewrites the whole table in one transaction (one log record the size of the table).
pub(crate) const BASE_BUCKETS_LOG2_MAX: u32 = 24;
/// Largest table: 2^46 buckets (4 PiB of entries); keeps bucket arithmetic far from overflow.
pub(crate) const BUCKETS_LOG2_MAX: u32 = 46;

/// The table grows when it would be more than 7/8 full. Hopscotch tables with H = 63 still find
/// room easily at that load, and the margin keeps the free-slot search short.
pub(crate) const LOAD_NUMERATOR: u64 = 7;
pub(crate) const LOAD_DENOMINATOR: u64 = 8;

/// Allocation unit of the region allocator (one cache line).
pub(crate) const GRAIN_BYTES: u64 = 64;
/// Small pools get small slabs, so one partly filled slab per class stays a small share of them.
pub(crate) const SLAB_BYTES_MIN: u64 = 1024;
/// MCAS uses 1 MiB slab regions.
pub(crate) const SLAB_BYTES_MAX: u64 = 1 << 20;
/// MCAS keeps objects up to 4 KiB in slabs and gives larger ones extents of their own.
pub(crate) const SMALL_OBJECT_BYTES_MAX: u64 = 4096;
/// A slab holds at least this many objects of its class; classes above `slab_bytes / 8` are
/// allocated as extents instead.
pub(crate) const SLAB_OBJECTS_MIN: u64 = 8;
/// Largest region this format addresses (4 PiB); larger pools are refused at creation.
pub(crate) const REGION_BYTES_MAX: u64 = 1 << 52;

const _: () = assert!(HEADER_USED_BYTES as u64 <= HEADER_BYTES);
const _: () = assert!(PAYLOAD_OFFSET + PAYLOAD_BYTES == ENTRY_BYTES as usize);
const _: () = assert!(OCCUPANT_OFFSET + OCCUPANT_BYTES == ENTRY_BYTES as usize);
const _: () = assert!(KEY_LEN_OFFSET + 4 == PAYLOAD_OFFSET);
const _: () = assert!(NEIGHBOURHOOD < 1 << BUCKETS_LOG2_MIN);
const _: () = assert!(is_aligned(HEADER_BYTES, SLAB_BYTES_MIN) && is_aligned(HEADER_BYTES, GRAIN_BYTES));
const _: () = assert!(SMALL_OBJECT_BYTES_MAX * SLAB_OBJECTS_MIN <= SLAB_BYTES_MAX);
const _: () = assert!(BASE_BUCKETS_LOG2_MAX <= BUCKETS_LOG2_MAX);

pub(crate) fn read_u64(bytes: &[u8], offset: usize) -> u64 {
    u64::from_le_bytes(bytes[offset..offset + 8].try_into().expect("an 8-byte slice converts to [u8; 8]"))
}

pub(crate) fn read_u32(bytes: &[u8], offset: usize) -> u32 {
    u32::from_le_bytes(bytes[offset..offset + 4].try_into().expect("a 4-byte slice converts to [u8; 4]"))
}

fn write_u64(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_le_bytes());
}

fn write_u32(bytes: &mut [u8], offset: usize, value: u32) {
    bytes[offset..offset + 4].copy_from_slice(&value.to_le_bytes());
}

/// Converts a region offset or length to an index. Regions are in-memory slices, so every valid
/// offset fits; a corrupt one is caught by the bounds checks of whoever uses the result.
pub(crate) fn index(offset: u64) -> usize {
    usize::try_from(offset).unwrap_or(usize::MAX)
}

/// `len` bytes at `offset` of `bytes`, or `None` if any of them lies outside.
pub(crate) fn slice(bytes: &[u8], offset: u64, len: u64) -> Option<&[u8]> {
    let start = usize::try_from(offset).ok()?;
    let len = usize::try_from(len).ok()?;
    bytes.get(start..start.checked_add(len)?)
}

pub(crate) fn align_up(value: u64, align: u64) -> u64 {
    value.div_ceil(align) * align
}

/// Whether `value` is a multiple of `align` (written without `%` so it is usable in constants
/// and on toolchains before `u64::is_multiple_of`).
pub(crate) const fn is_aligned(value: u64, align: u64) -> bool {
    value / align * align == value
}

/// The persistent header, decoded. Changed only when the table gains a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub region_bytes: u64,
    pub capacity_bytes: u64,
    pub expected_objects: u64,
    pub hash_key: [u64; 2],
    pub slab_bytes: u64,
    pub base_buckets_log2: u32,
    pub segments: Vec<u64>,
}

impl Header {
    pub(crate) fn encode(&self) -> Vec<u8> {
        assert!(!self.segments.is_empty() && self.segments.len() <= SEGMENTS_MAX, "segment count within format limits");
        let mut bytes = vec![0; index(HEADER_BYTES)];
        bytes[MAGIC_OFFSET..MAGIC_OFFSET + 8].copy_from_slice(&MAGIC);
        write_u32(&mut bytes, VERSION_OFFSET, FORMAT_VERSION);
        write_u64(&mut bytes, REGION_BYTES_OFFSET, self.region_bytes);
        write_u64(&mut bytes, CAPACITY_BYTES_OFFSET, self.capacity_bytes);
        write_u64(&mut bytes, EXPECTED_OBJECTS_OFFSET, self.expected_objects);
        write_u64(&mut bytes, HASH_KEY_OFFSET, self.hash_key[0]);
        write_u64(&mut bytes, HASH_KEY_OFFSET + 8, self.hash_key[1]);
        write_u32(&mut bytes, SLAB_BYTES_OFFSET, u32::try_from(self.slab_bytes).expect("slab size is at most 1 MiB"));
        write_u32(&mut bytes, BASE_BUCKETS_LOG2_OFFSET, self.base_buckets_log2);
        write_u32(&mut bytes, SEGMENT_COUNT_OFFSET, self.segments.len() as u32);
        for (k, segment) in self.segments.iter().enumerate() {
            write_u64(&mut bytes, SEGMENTS_OFFSET + 8 * k, *segment);
        }
        let checksum = crc32fast::hash(&bytes[CHECKSUM_COVERS_FROM..]);
        write_u32(&mut bytes, CHECKSUM_OFFSET, checksum);
        bytes
    }

    /// Decodes and validates the header page: magic, version, checksum, then every field that
    /// does not depend on the rest of the region. Each error names the offset it concerns.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Header, OpenError> {
        let page = bytes
            .get(..index(HEADER_BYTES))
            .ok_or(OpenError::RegionTooSmall { needed: HEADER_BYTES, actual: bytes.len() as u64 })?;
        let magic: [u8; 8] = page[MAGIC_OFFSET..MAGIC_OFFSET + 8].try_into().expect("8 bytes");
        if magic != MAGIC {
            return Err(OpenError::BadMagic { offset: MAGIC_OFFSET as u64, found: magic });
        }
        let version = read_u32(page, VERSION_OFFSET);
        if version != FORMAT_VERSION {
            return Err(OpenError::UnsupportedVersion {
                offset: VERSION_OFFSET as u64,
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let stored = read_u32(page, CHECKSUM_OFFSET);
        let computed = crc32fast::hash(&page[CHECKSUM_COVERS_FROM..]);
        if stored != computed {
            return Err(OpenError::HeaderChecksum {
                offset: CHECKSUM_OFFSET as u64,
                stored,
                computed,
                covered: (CHECKSUM_COVERS_FROM as u64, HEADER_BYTES),
            });
        }
        let invalid = |offset: usize, field: &'static str, reason: String| OpenError::InvalidField {
            offset: offset as u64,
            field,
            reason,
        };
        let slab_bytes = u64::from(read_u32(page, SLAB_BYTES_OFFSET));
        if !slab_bytes.is_power_of_two() || !(SLAB_BYTES_MIN..=SLAB_BYTES_MAX).contains(&slab_bytes) {
            return Err(invalid(
                SLAB_BYTES_OFFSET,
                "slab bytes",
                format!("{slab_bytes} is not a power of two between {SLAB_BYTES_MIN} and {SLAB_BYTES_MAX}"),
            ));
        }
        let base_buckets_log2 = read_u32(page, BASE_BUCKETS_LOG2_OFFSET);
        if !(BUCKETS_LOG2_MIN..=BASE_BUCKETS_LOG2_MAX).contains(&base_buckets_log2) {
            return Err(invalid(
                BASE_BUCKETS_LOG2_OFFSET,
                "base buckets log2",
                format!("{base_buckets_log2} is not between {BUCKETS_LOG2_MIN} and {BASE_BUCKETS_LOG2_MAX}"),
            ));
        }
        let segment_count = read_u32(page, SEGMENT_COUNT_OFFSET) as usize;
        let segments_max = SEGMENTS_MAX.min((BUCKETS_LOG2_MAX - base_buckets_log2) as usize + 1);
        if !(1..=segments_max).contains(&segment_count) {
            return Err(invalid(
                SEGMENT_COUNT_OFFSET,
                "segment count",
                format!("{segment_count} is not between 1 and {segments_max}"),
            ));
        }
        if read_u32(page, HEADER_RESERVED_OFFSET) != 0 {
            return Err(invalid(HEADER_RESERVED_OFFSET, "reserved", "must be zero".into()));
        }
        let mut segments = Vec::with_capacity(segment_count);
        for k in 0..SEGMENTS_MAX {
            let offset = SEGMENTS_OFFSET + 8 * k;
            let segment = read_u64(page, offset);
            if k >= segment_count {
                if segment != 0 {
                    return Err(invalid(offset, "segment directory", format!("unused slot {k} is not zero")));
                }
            } else if segment < HEADER_BYTES || !is_aligned(segment, GRAIN_BYTES) {
                return Err(invalid(
                    offset,
                    "segment directory",
                    format!("segment {k} at {segment:#x} is inside the header or not {GRAIN_BYTES}-byte aligned"),
                ));
            } else {
                segments.push(segment);
            }
        }
        if let Some(position) = page[HEADER_USED_BYTES..].iter().position(|b| *b != 0) {
            return Err(invalid(HEADER_USED_BYTES + position, "reserved", "must be zero".into()));
        }
        Ok(Header {
            region_bytes: read_u64(page, REGION_BYTES_OFFSET),
            capacity_bytes: read_u64(page, CAPACITY_BYTES_OFFSET),
            expected_objects: read_u64(page, EXPECTED_OBJECTS_OFFSET),
            hash_key: [read_u64(page, HASH_KEY_OFFSET), read_u64(page, HASH_KEY_OFFSET + 8)],
            slab_bytes,
            base_buckets_log2,
            segments,
        })
    }

    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        siphash24(self.hash_key, key)
    }

    pub(crate) fn small_object_bytes_max(&self) -> u64 {
        small_object_bytes_max(self.slab_bytes)
    }

    /// End of the heap: the region's length rounded down to the allocation grain.
    pub(crate) fn heap_end(&self) -> u64 {
        self.region_bytes / GRAIN_BYTES * GRAIN_BYTES
    }
}

pub(crate) fn small_object_bytes_max(slab_bytes: u64) -> u64 {
    (slab_bytes / SLAB_OBJECTS_MIN).min(SMALL_OBJECT_BYTES_MAX)
}

/// Where a pair's key and value live. Decided by their lengths alone, so it needs no flag in the
/// entry and the reconstituting allocator can recompute it.
///
/// Payload layouts (offsets inside the 28-byte payload):
/// - both inline (`k + v <= 28`): key at 0, value at `k`;
/// - key inline, value out of line (`k <= 20`): key at 0, value's offset at 20;
/// - key out of line, value inline (`v <= 20`): key's offset at 0, value at 8;
/// - both out of line: key's offset at 0, value's offset at 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    pub key_inline: bool,
    pub value_inline: bool,
    /// Where the value (or its offset) starts inside the payload.
    pub value_at: usize,
}

impl Placement {
    pub(crate) fn of(key_len: u64, value_len: u64) -> Placement {
        let payload = PAYLOAD_BYTES as u64;
        let shared = (payload - REFERENCE_BYTES as u64) as usize;
        if key_len.saturating_add(value_len) <= payload {
            Placement { key_inline: true, value_inline: true, value_at: key_len as usize }
        } else if key_len <= shared as u64 {
            Placement { key_inline: true, value_inline: false, value_at: shared }
        } else if value_len <= shared as u64 {
            Placement { key_inline: false, value_inline: true, value_at: REFERENCE_BYTES }
        } else {
            Placement { key_inline: false, value_inline: false, value_at: REFERENCE_BYTES }
        }
    }
}

/// The 56 bytes of an entry that belong to the pair living in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Occupant {
    pub hash: u64,
    pub write_time_ns: u64,
    pub value_len: u64,
    pub key_len: u32,
    pub payload: [u8; PAYLOAD_BYTES],
}

impl Occupant {
    /// Builds the occupant of a pair; `key_at` / `value_at` are the offsets of the out-of-line
    /// copies that `placement` asks for.
    pub(crate) fn new(
        hash: u64,
        write_time_ns: u64,
        key: &[u8],
        value: &[u8],
        key_at: Option<u64>,
        value_at: Option<u64>,
    ) -> Occupant {
        let key_len = u32::try_from(key.len()).expect("callers refuse keys longer than u32::MAX");
        let placement = Placement::of(key.len() as u64, value.len() as u64);
        let mut payload = [0; PAYLOAD_BYTES];
        match (placement.key_inline, key_at) {
            (true, None) => payload[..key.len()].copy_from_slice(key),
            (false, Some(at)) => payload[..REFERENCE_BYTES].copy_from_slice(&at.to_le_bytes()),
            _ => panic!("key offset given exactly when the key is out of line"),
        }
        let v = placement.value_at;
        match (placement.value_inline, value_at) {
            (true, None) => payload[v..v + value.len()].copy_from_slice(value),
            (false, Some(at)) => payload[v..v + REFERENCE_BYTES].copy_from_slice(&at.to_le_bytes()),
            _ => panic!("value offset given exactly when the value is out of line"),
        }
        Occupant { hash, write_time_ns, value_len: value.len() as u64, key_len, payload }
    }

    /// `bytes` is a whole 64-byte entry.
    pub(crate) fn decode(entry: &[u8]) -> Occupant {
        Occupant {
            hash: read_u64(entry, HASH_OFFSET),
            write_time_ns: read_u64(entry, WRITE_TIME_OFFSET),
            value_len: read_u64(entry, VALUE_LEN_OFFSET),
            key_len: read_u32(entry, KEY_LEN_OFFSET),
            payload: entry[PAYLOAD_OFFSET..PAYLOAD_OFFSET + PAYLOAD_BYTES].try_into().expect("28 bytes"),
        }
    }

    /// The occupant's 56 bytes, which go at `OCCUPANT_OFFSET` of an entry.
    pub(crate) fn encode(&self) -> [u8; OCCUPANT_BYTES] {
        let mut entry = [0; ENTRY_BYTES as usize];
        write_u64(&mut entry, HASH_OFFSET, self.hash);
        write_u64(&mut entry, WRITE_TIME_OFFSET, self.write_time_ns);
        write_u64(&mut entry, VALUE_LEN_OFFSET, self.value_len);
        write_u32(&mut entry, KEY_LEN_OFFSET, self.key_len);
        entry[PAYLOAD_OFFSET..].copy_from_slice(&self.payload);
        entry[OCCUPANT_OFFSET..].try_into().expect("56 bytes")
    }

    pub(crate) fn placement(&self) -> Placement {
        Placement::of(u64::from(self.key_len), self.value_len)
    }

    fn reference(&self, at: usize) -> u64 {
        read_u64(&self.payload, at)
    }

    /// Offset of the out-of-line key, if the key is not inline.
    pub(crate) fn key_at(&self) -> Option<u64> {
        (!self.placement().key_inline).then(|| self.reference(0))
    }

    pub(crate) fn value_at(&self) -> Option<u64> {
        let placement = self.placement();
        (!placement.value_inline).then(|| self.reference(placement.value_at))
    }

    /// Region offset and length of the key, given the region offset of this occupant's entry.
    pub(crate) fn key_range(&self, entry_offset: u64) -> (u64, u64) {
        let at = self.key_at().unwrap_or(entry_offset + PAYLOAD_OFFSET as u64);
        (at, u64::from(self.key_len))
    }

    pub(crate) fn value_range(&self, entry_offset: u64) -> (u64, u64) {
        let inline = entry_offset + (PAYLOAD_OFFSET + self.placement().value_at) as u64;
        (self.value_at().unwrap_or(inline), self.value_len)
    }
}

/// The sizes a pool of a given spec is formatted with. Pure function of the spec, so
/// `region_bytes_for` and `create` agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub slab_bytes: u64,
    pub base_buckets_log2: u32,
    /// Buckets the table needs to hold `size_bytes / 64` pairs (the most the pool's accounting
    /// admits) without exceeding its load limit.
    pub buckets_max: u64,
    pub region_bytes: u64,
}

impl Geometry {
    /// `None` if the spec needs a region larger than [`REGION_BYTES_MAX`].
    pub(crate) fn of(spec: PoolSpec) -> Option<Geometry> {
        let capacity = spec.size_bytes;
        // Slabs of about 1/256 of the pool, so the one partly filled slab per size class stays a
        // small share of a small pool while large pools get MCAS's 1 MiB slabs.
        let slab_bytes = prev_power_of_two(capacity / 256).clamp(SLAB_BYTES_MIN, SLAB_BYTES_MAX);
        let pairs_max = capacity / crate::store::ENTRY_OVERHEAD_BYTES;
        let expected = spec.expected_objects.min(pairs_max);
        let wanted = expected.saturating_mul(LOAD_DENOMINATOR).div_ceil(LOAD_NUMERATOR);
        let base_buckets_log2 = ceil_log2(wanted).clamp(BUCKETS_LOG2_MIN, BASE_BUCKETS_LOG2_MAX);
        let mut buckets_max_log2 = base_buckets_log2;
        while (1u64 << buckets_max_log2) / LOAD_DENOMINATOR * LOAD_NUMERATOR < pairs_max {
            buckets_max_log2 += 1;
            if buckets_max_log2 > BUCKETS_LOG2_MAX {
                return None;
            }
        }
        let buckets_max = 1u64 << buckets_max_log2;
        let table_bytes = buckets_max.checked_mul(ENTRY_BYTES)?;
        let classes = super::allocator::class_count(small_object_bytes_max(slab_bytes)) as u64;
        // Payload room: the pool's size and half again, for size-class rounding (at most 25 %
        // plus 16 bytes per object, which the 64 bytes charged per pair cover) and for
        // fragmentation; plus one partly filled slab per class and the alignment gap below the
        // first slab.
        let payload_bytes = align_up(capacity.checked_add(capacity / 2)?, GRAIN_BYTES)
            .checked_add(classes.checked_add(1)?.checked_mul(slab_bytes)?)?;
        let region_bytes = HEADER_BYTES.checked_add(table_bytes)?.checked_add(payload_bytes)?;
        (region_bytes <= REGION_BYTES_MAX).then_some(Geometry {
            slab_bytes,
            base_buckets_log2,
            buckets_max,
            region_bytes,
        })
    }
}

fn prev_power_of_two(value: u64) -> u64 {
    if value == 0 {
        0
    } else {
        1 << (63 - value.leading_zeros())
    }
}

fn ceil_log2(value: u64) -> u32 {
    if value <= 1 {
        0
    } else {
        64 - (value - 1).leading_zeros()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            region_bytes: 1 << 20,
            capacity_bytes: 1 << 18,
            expected_objects: 100,
            hash_key: [0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210],
            slab_bytes: 4096,
            base_buckets_log2: 7,
            segments: vec![0x8_0000, 0x7_e000],
        }
    }

    /// A header survives encode and decode, and lands at the documented offsets.
    #[test]
    fn header_round_trips_at_documented_offsets() {
        let bytes = header().encode();
        assert_eq!(bytes.len() as u64, HEADER_BYTES);
        assert_eq!(&bytes[..8], b"FERHSTOR");
        assert_eq!(read_u32(&bytes, VERSION_OFFSET), FORMAT_VERSION);
        assert_eq!(read_u64(&bytes, CAPACITY_BYTES_OFFSET), 1 << 18);
        assert_eq!(read_u64(&bytes, SEGMENTS_OFFSET + 8), 0x7_e000);
        assert_eq!(read_u32(&bytes, CHECKSUM_OFFSET), crc32fast::hash(&bytes[16..]));
        assert_eq!(Header::decode(&bytes), Ok(header()));
    }

    /// Every single flipped bit of the header page is refused, with an error naming an offset.
    #[test]
    fn every_header_bit_flip_is_refused() {
        let good = header().encode();
        for byte in 0..good.len() {
            for bit in [0, 7] {
                let mut bad = good.clone();
                bad[byte] ^= 1 << bit;
                let error = Header::decode(&bad).expect_err("a flipped header bit is refused");
                assert!(error.to_string().contains("offset 0x"), "{error}");
            }
        }
    }

    /// A header whose checksum is right but whose fields are impossible is still refused, naming
    /// the field's offset.
    #[test]
    fn impossible_fields_are_refused_by_offset() {
        let mut bad = header();
        bad.slab_bytes = 4097;
        let error = Header::decode(&bad.encode()).expect_err("slab size not a power of two");
        assert!(matches!(error, OpenError::InvalidField { offset: 56, .. }), "{error}");
        let mut bad = header();
        bad.segments[1] = 100;
        let error = Header::decode(&bad.encode()).expect_err("segment inside the header");
        assert!(matches!(error, OpenError::InvalidField { offset: 80, .. }), "{error}");
        assert!(matches!(Header::decode(&[0; 100]), Err(OpenError::RegionTooSmall { .. })));
    }

    /// An occupant survives encode and decode, and its payload follows the documented placements.
    #[test]
    fn occupant_round_trips_and_places_by_length() {
        let key = b"key";
        let value = b"value";
        let occupant = Occupant::new(7, 9, key, value, None, None);
        let mut entry = [0u8; 64];
        entry[8..].copy_from_slice(&occupant.encode());
        assert_eq!(Occupant::decode(&entry), occupant);
        assert_eq!(&entry[PAYLOAD_OFFSET..PAYLOAD_OFFSET + 8], b"keyvalue");
        assert_eq!(occupant.key_range(1000), (1036, 3));
        assert_eq!(occupant.value_range(1000), (1039, 5));

        let long_value = [1u8; 30];
        let occupant = Occupant::new(7, 9, key, &long_value, None, Some(0x1234));
        assert_eq!(occupant.value_at(), Some(0x1234));
        assert_eq!(occupant.key_at(), None);
        assert_eq!(read_u64(&occupant.payload, 20), 0x1234);

        let long_key = [2u8; 21];
        let occupant = Occupant::new(7, 9, &long_key, b"12345678", Some(0x40), None);
        assert_eq!((occupant.key_at(), occupant.value_at()), (Some(0x40), None));
        assert_eq!(occupant.value_range(0), (PAYLOAD_OFFSET as u64 + 8, 8));
    }

    /// The inline limits sit exactly where the payload runs out.
    #[test]
    fn placement_boundaries() {
        let p = |k, v| {
            let p = Placement::of(k, v);
            (p.key_inline, p.value_inline)
        };
        assert_eq!(p(0, 0), (true, true));
        assert_eq!(p(0, 28), (true, true));
        assert_eq!(p(14, 14), (true, true));
        assert_eq!(p(0, 29), (true, false));
        assert_eq!(p(20, 9), (true, false));
        assert_eq!(p(21, 8), (false, true));
        assert_eq!(p(28, 1), (false, true));
        assert_eq!(p(29, 0), (false, true));
        assert_eq!(p(21, 21), (false, false));
        assert_eq!(p(u64::from(u32::MAX), u64::MAX), (false, false));
    }

    /// The region rule leaves room for the largest table the accounting admits plus the payload.
    #[test]
    fn geometry_reserves_table_and_payload() {
        let g = Geometry::of(PoolSpec { size_bytes: 256 * 1024, expected_objects: 1 }).expect("small pool");
        assert_eq!(g.slab_bytes, 1024);
        assert_eq!(small_object_bytes_max(g.slab_bytes), 128);
        assert_eq!(g.base_buckets_log2, BUCKETS_LOG2_MIN);
        // 4096 pairs need 8192 buckets at 7/8 load (4096 buckets hold only 3584).
        assert_eq!(g.buckets_max, 8192);
        assert!(g.region_bytes >= HEADER_BYTES + 8192 * 64 + 256 * 1024 * 3 / 2);
        let g = Geometry::of(PoolSpec { size_bytes: 1 << 30, expected_objects: u64::MAX }).expect("1 GiB pool");
        assert_eq!(g.slab_bytes, SLAB_BYTES_MAX);
        assert_eq!(g.base_buckets_log2, BASE_BUCKETS_LOG2_MAX);
        assert_eq!(Geometry::of(PoolSpec { size_bytes: u64::MAX, expected_objects: 0 }), None);
        let g = Geometry::of(PoolSpec { size_bytes: 0, expected_objects: 0 }).expect("empty pool");
        assert_eq!(g.buckets_max, 64);
    }
}
