//! The on-memory format of an `hstore` region, as offset constants beside the code that reads
//! them (the prose version is the module documentation of `hstore` and `docs/hstore.md`).
//!
//! Everything is little-endian and addressed by offset from the start of the region, never by
//! pointer, because an Active Data Object host maps the same region at another address.
//!
//! ```text
//! offset 0            ┌──────────────────────────────────────────────┐
//!                     │ header (HEADER_BYTES): magic, version,        │
//!                     │ checksum, geometry                            │
//! HEADER_BYTES        ├──────────────────────────────────────────────┤
//!                     │ heap: slabs of small keys/values, from low    │
//!                     │ addresses upward                              │
//!                     │                 ... free ...                  │
//!                     │ the directory, subtables and large values,    │
//!                     │ from high addresses downward                  │
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
//! | 32 | 8 | expected objects | the pool's sizing hint |
//! | 40 | 16 | hash key | two u64 halves of the SipHash-2-4 key of this pool |
//! | 56 | 4 | slab bytes | size (and alignment) of one slab; a power of two |
//! | 60 | 4 | subtable count | fixed at creation, at least 1 |
//! | 64 | 8 | directory offset | where the directory's entries start |
//! | 72 | 4 | initial buckets | buckets a subtable gets when its first pair arrives |
//! | 76 | .. | reserved | zero up to `HEADER_BYTES` |
//!
//! Directory entry ([`DIRECTORY_ENTRY_BYTES`], one per subtable, in subtable order):
//!
//! | offset | size | field | notes |
//! |---:|---:|---|---|
//! | 0 | 8 | offset | where the subtable's buckets start; 0 while it has none |
//! | 8 | 4 | buckets | how many; 0 while it has none |
//! | 12 | 4 | checksum | CRC-32 of bytes 0..12 and the entry's index (u32), so an entry is bound to its place |
//!
//! A subtable entry, zero everywhere, means an empty subtable with no buckets yet (a fresh region).
//!
//! Table entry (64 bytes, one cache line; MCAS section 3.2.2):
//!
//! | offset | size | field | notes |
//! |---:|---:|---|---|
//! | 0 | 4 | hop bitmap | bit j set: the entry j buckets after this one (wrapping inside the subtable) holds a pair whose home is this bucket |
//! | 4 | 4 | hash | the low 32 bits of the key's hash: its home inside the subtable |
//! | 8 | 4 | meta | bit 31: in use; bits 0..30: key length |
//! | 12 | 4 | value length | |
//! | 16 | 8 | write time | nanoseconds since the Unix epoch of the last put |
//! | 24 | 40 | payload | key and value inline, or u64 offsets of out-of-line copies; see [`Placement`] |
//!
//! The hop bitmap belongs to the *bucket*, the other 60 bytes (the "occupant", in-use flag
//! included) to the pair that lives in the entry, so a displacement moves the occupant and leaves
//! hop bitmaps in place.

use super::hash::siphash24;
use super::OpenError;
use crate::store::PoolSpec;

/// Bytes of the header page at the start of the region.
pub(crate) const HEADER_BYTES: u64 = 4096;
pub(crate) const MAGIC: [u8; 8] = *b"FERHSTOR";
/// Version 2: subtables that grow on their own (version 1 doubled one table by segments).
pub(crate) const FORMAT_VERSION: u32 = 2;

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
pub(crate) const SUBTABLES_OFFSET: usize = 60;
pub(crate) const DIRECTORY_OFFSET: usize = 64;
pub(crate) const INITIAL_BUCKETS_OFFSET: usize = 72;
pub(crate) const HEADER_USED_BYTES: usize = 76;

pub(crate) const DIRECTORY_ENTRY_BYTES: u64 = 16;

/// One hash-table entry is one cache line, as in MCAS.
pub(crate) const ENTRY_BYTES: u64 = 64;
pub(crate) const HOP_OFFSET: usize = 0;
pub(crate) const OCCUPANT_OFFSET: usize = 4;
pub(crate) const OCCUPANT_BYTES: usize = 60;
pub(crate) const HASH_OFFSET: usize = 4;
pub(crate) const META_OFFSET: usize = 8;
pub(crate) const VALUE_LEN_OFFSET: usize = 12;
pub(crate) const WRITE_TIME_OFFSET: usize = 16;
pub(crate) const PAYLOAD_OFFSET: usize = 24;
pub(crate) const PAYLOAD_BYTES: usize = 40;
/// Bytes of an out-of-line reference inside the payload: a u64 region offset.
pub(crate) const REFERENCE_BYTES: usize = 8;
/// The meta word's in-use flag; the bits below the next flag are the key length.
pub(crate) const IN_USE: u32 = 1 << 31;
/// The meta word's flag for a pair the engine keeps for itself: an allocation of pool memory
/// that no client key owns (a plugin's, see [`Occupant::allocation`]). Lookups of client keys,
/// counts and walks never see it.
pub(crate) const INTERNAL: u32 = 1 << 30;
/// The meta word's flag, beside [`INTERNAL`], for an allocation of whole pages: the extent of
/// its recorded length from a page boundary, which a restart claims as such, rather than the
/// slot or extent its length alone would give it. Every allocation a plugin call makes takes
/// whole pages (its host may write them while the call runs, and nothing else may share them);
/// allocations from before this flag lack it and are claimed by their length as before. Only
/// allocations carry it: in a client pair's meta word these bits are the key's length.
pub(crate) const PAGES: u32 = 1 << 29;
/// Longest key the entry can describe.
pub(crate) const KEY_BYTES_MAX: u64 = (INTERNAL - 1) as u64;
/// Longest value the entry can describe.
pub(crate) const VALUE_BYTES_MAX: u64 = u32::MAX as u64;

/// Hopscotch neighbourhood H: a pair lives at most H - 1 buckets after its home bucket. 32 (MCAS
/// uses 63) keeps the bitmap to a u32 and leaves the entry 40 bytes of payload, room for a 16-byte
/// key and a 16-byte value inline; hopscotch tables with H = 32 still fill past 90 %.
pub(crate) const NEIGHBOURHOOD: u64 = 32;

/// Smallest subtable: 64 buckets (4 KiB), more than the neighbourhood so a neighbourhood never
/// wraps onto itself.
pub(crate) const BUCKETS_MIN: u64 = 64;
/// Largest subtable: 16384 buckets (1 MiB). A growth rewrites one subtable in one transaction,
/// so this bounds every growth's log record and transient buffers.
pub(crate) const BUCKETS_MAX: u64 = 16384;
/// Pairs a subtable is planned to hold when its pool is full by its accounting: half of what its
/// largest size holds, so that random variation between subtables never needs more.
pub(crate) const SUBTABLE_PAIRS_PLANNED: u64 = BUCKETS_MAX * LOAD_NUMERATOR / LOAD_DENOMINATOR / 2;

/// A subtable grows when it would be more than 9/10 full, to 5/4 of its size (18/25 full): the
/// table's load stays between 0.72 and 0.9 at every size, where a doubling table falls to 0.44.
/// Hopscotch with a neighbourhood of 32 places pairs past 95 % load (a placement that fails grows
/// the subtable early, so a higher limit can never lose a pair); 9/10 keeps the free-entry search
/// short while each point of load saves about a byte per pair.
pub(crate) const LOAD_NUMERATOR: u64 = 9;
pub(crate) const LOAD_DENOMINATOR: u64 = 10;
pub(crate) const GROWTH_NUMERATOR: u64 = 5;
pub(crate) const GROWTH_DENOMINATOR: u64 = 4;

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
const _: () = assert!(NEIGHBOURHOOD <= 32 && NEIGHBOURHOOD < BUCKETS_MIN);
const _: () = assert!(BUCKETS_MIN <= BUCKETS_MAX && BUCKETS_MAX <= u32::MAX as u64);
const _: () = assert!(PAYLOAD_BYTES >= 32, "a 16-byte key and a 16-byte value fit inline");
const _: () = assert!(is_aligned(HEADER_BYTES, SLAB_BYTES_MIN) && is_aligned(HEADER_BYTES, GRAIN_BYTES));
const _: () = assert!(SMALL_OBJECT_BYTES_MAX * SLAB_OBJECTS_MIN <= SLAB_BYTES_MAX);

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
    let end = offset.checked_add(len)?;
    bytes.get(index(offset)..index(end))
}

pub(crate) const fn is_aligned(value: u64, align: u64) -> bool {
    value.is_multiple_of(align)
}

pub(crate) fn align_up(value: u64, align: u64) -> u64 {
    value.div_ceil(align) * align
}

/// `value * range / 2^32`: maps a 32-bit hash part onto `0..range` in order (Lemire's fast range
/// reduction), so that hash order and bucket order agree, which keeps a scan cursor valid when a
/// subtable changes size.
pub(crate) fn scale(value: u32, range: u64) -> u64 {
    (u64::from(value) * range) >> 32
}

/// The subtable a key with hash `hash` lives in: chosen by the high 32 bits.
pub(crate) fn subtable_of(hash: u64, subtables: u64) -> u64 {
    scale((hash >> 32) as u32, subtables)
}

/// The part of a hash an entry keeps: the low 32 bits, which place it inside its subtable.
pub(crate) fn tag_of(hash: u64) -> u32 {
    hash as u32
}

/// The persistent header, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    pub region_bytes: u64,
    pub capacity_bytes: u64,
    pub expected_objects: u64,
    pub hash_key: [u64; 2],
    pub slab_bytes: u64,
    pub subtables: u64,
    pub directory: u64,
    pub initial_buckets: u64,
}

fn invalid(offset: usize, field: &'static str, reason: String) -> OpenError {
    OpenError::InvalidField { offset: offset as u64, field, reason }
}

impl Header {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut page = vec![0u8; index(HEADER_BYTES)];
        page[MAGIC_OFFSET..MAGIC_OFFSET + 8].copy_from_slice(&MAGIC);
        write_u32(&mut page, VERSION_OFFSET, FORMAT_VERSION);
        write_u64(&mut page, REGION_BYTES_OFFSET, self.region_bytes);
        write_u64(&mut page, CAPACITY_BYTES_OFFSET, self.capacity_bytes);
        write_u64(&mut page, EXPECTED_OBJECTS_OFFSET, self.expected_objects);
        write_u64(&mut page, HASH_KEY_OFFSET, self.hash_key[0]);
        write_u64(&mut page, HASH_KEY_OFFSET + 8, self.hash_key[1]);
        write_u32(&mut page, SLAB_BYTES_OFFSET, u32::try_from(self.slab_bytes).expect("slabs are at most 1 MiB"));
        write_u32(&mut page, SUBTABLES_OFFSET, u32::try_from(self.subtables).expect("subtable counts fit u32"));
        write_u64(&mut page, DIRECTORY_OFFSET, self.directory);
        write_u32(&mut page, INITIAL_BUCKETS_OFFSET, u32::try_from(self.initial_buckets).expect("at most BUCKETS_MAX"));
        let checksum = crate::checksum::crc32(&page[CHECKSUM_COVERS_FROM..]);
        write_u32(&mut page, CHECKSUM_OFFSET, checksum);
        debug_assert_eq!(Header::decode(&page).as_ref(), Ok(self), "a header must read back as written");
        page
    }

    /// Decodes and validates the header at the start of `bytes`; every error names the offset.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Header, OpenError> {
        let Some(page) = bytes.get(..index(HEADER_BYTES)) else {
            return Err(OpenError::RegionTooSmall { needed: HEADER_BYTES, actual: bytes.len() as u64 });
        };
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
        let computed = crate::checksum::crc32(&page[CHECKSUM_COVERS_FROM..]);
        if stored != computed {
            return Err(OpenError::HeaderChecksum {
                offset: CHECKSUM_OFFSET as u64,
                stored,
                computed,
                covered: (CHECKSUM_COVERS_FROM as u64, HEADER_BYTES),
            });
        }
        let slab_bytes = u64::from(read_u32(page, SLAB_BYTES_OFFSET));
        if !slab_bytes.is_power_of_two() || !(SLAB_BYTES_MIN..=SLAB_BYTES_MAX).contains(&slab_bytes) {
            return Err(invalid(
                SLAB_BYTES_OFFSET,
                "slab bytes",
                format!("{slab_bytes} is not a power of two in {SLAB_BYTES_MIN}..={SLAB_BYTES_MAX}"),
            ));
        }
        let subtables = u64::from(read_u32(page, SUBTABLES_OFFSET));
        if subtables == 0 {
            return Err(invalid(SUBTABLES_OFFSET, "subtable count", "must be at least 1".into()));
        }
        let directory = read_u64(page, DIRECTORY_OFFSET);
        if directory < HEADER_BYTES || !is_aligned(directory, GRAIN_BYTES) {
            return Err(invalid(
                DIRECTORY_OFFSET,
                "directory offset",
                format!("{directory:#x} is inside the header or not {GRAIN_BYTES}-byte aligned"),
            ));
        }
        let initial_buckets = u64::from(read_u32(page, INITIAL_BUCKETS_OFFSET));
        if !(BUCKETS_MIN..=BUCKETS_MAX).contains(&initial_buckets) {
            return Err(invalid(
                INITIAL_BUCKETS_OFFSET,
                "initial buckets",
                format!("{initial_buckets} is not in {BUCKETS_MIN}..={BUCKETS_MAX}"),
            ));
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
            subtables,
            directory,
            initial_buckets,
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

    /// Bytes of the directory (every subtable's entry), as allocated in the heap.
    pub(crate) fn directory_bytes(&self) -> u64 {
        directory_bytes(self.subtables)
    }

    /// Region offset of subtable `index`'s directory entry.
    pub(crate) fn directory_entry_offset(&self, index: u64) -> u64 {
        self.directory + index * DIRECTORY_ENTRY_BYTES
    }
}

/// Bytes the directory of `subtables` subtables takes in the heap.
pub(crate) fn directory_bytes(subtables: u64) -> u64 {
    align_up(subtables * DIRECTORY_ENTRY_BYTES, GRAIN_BYTES)
}

pub(crate) fn small_object_bytes_max(slab_bytes: u64) -> u64 {
    (slab_bytes / SLAB_OBJECTS_MIN).min(SMALL_OBJECT_BYTES_MAX)
}

/// Where a subtable's buckets are, as its directory entry records. `buckets == 0` (and offset 0)
/// is a subtable that has held no pair yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct DirectoryEntry {
    pub offset: u64,
    pub buckets: u64,
}

impl DirectoryEntry {
    pub(crate) fn encode(&self, index: u64) -> [u8; DIRECTORY_ENTRY_BYTES as usize] {
        let mut entry = [0u8; DIRECTORY_ENTRY_BYTES as usize];
        write_u64(&mut entry, 0, self.offset);
        write_u32(&mut entry, 8, u32::try_from(self.buckets).expect("at most BUCKETS_MAX"));
        let checksum = directory_checksum(&entry, index);
        write_u32(&mut entry, 12, checksum);
        entry
    }

    /// The entry of subtable `index` in `bytes` (its 16 bytes), or why it is not valid. An all-zero
    /// entry is a subtable without buckets.
    pub(crate) fn decode(bytes: &[u8], index: u64) -> Result<DirectoryEntry, String> {
        if bytes.iter().all(|b| *b == 0) {
            return Ok(DirectoryEntry::default());
        }
        let stored = read_u32(bytes, 12);
        let computed = directory_checksum(bytes, index);
        if stored != computed {
            return Err(format!("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"));
        }
        let entry = DirectoryEntry { offset: read_u64(bytes, 0), buckets: u64::from(read_u32(bytes, 8)) };
        if !(BUCKETS_MIN..=BUCKETS_MAX).contains(&entry.buckets) {
            return Err(format!("{} buckets is not in {BUCKETS_MIN}..={BUCKETS_MAX}", entry.buckets));
        }
        if entry.offset < HEADER_BYTES || !is_aligned(entry.offset, GRAIN_BYTES) {
            return Err(format!("offset {:#x} is inside the header or not {GRAIN_BYTES}-byte aligned", entry.offset));
        }
        Ok(entry)
    }
}

fn directory_checksum(entry: &[u8], index: u64) -> u32 {
    let mut covered = [0u8; 16];
    covered[0..12].copy_from_slice(&entry[0..12]);
    covered[12..16].copy_from_slice(&u32::try_from(index).expect("subtable counts fit u32").to_le_bytes());
    crate::checksum::crc32(&covered)
}

/// Where a pair's key and value live. Decided by their lengths alone, so it needs no flag in the
/// entry and the reconstituting allocator can recompute it.
///
/// Payload layouts (offsets inside the 40-byte payload):
/// - both inline (`k + v <= 40`): key at 0, value at `k`;
/// - key inline, value out of line (`k <= 32`): key at 0, value's offset at 32;
/// - key out of line, value inline (`v <= 32`): key's offset at 0, value at 8;
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

/// The 60 bytes of an entry that belong to the pair living in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Occupant {
    /// The low 32 bits of the key's hash.
    pub tag: u32,
    pub key_len: u32,
    pub value_len: u32,
    pub write_time_ns: u64,
    pub payload: [u8; PAYLOAD_BYTES],
    /// An allocation the engine keeps ([`INTERNAL`]), not a client's pair.
    pub internal: bool,
    /// An allocation of whole pages ([`PAGES`]).
    pub pages: bool,
}

impl Occupant {
    /// The occupant recording an allocation of `len` bytes (whole pages) at `at` (already claimed
    /// from the heap) under the 8-byte key `id`: its key inline, its "value" the allocation, out
    /// of line, so a restart's walk claims the allocation again.
    pub(crate) fn allocation(tag: u32, write_time_ns: u64, id: u64, at: u64, len: u32) -> Occupant {
        let key = id.to_le_bytes();
        let placement = Placement::of(key.len() as u64, u64::from(len));
        assert!(placement.key_inline && !placement.value_inline, "allocations are longer than an inline value");
        let mut payload = [0; PAYLOAD_BYTES];
        payload[..key.len()].copy_from_slice(&key);
        let v = placement.value_at;
        payload[v..v + REFERENCE_BYTES].copy_from_slice(&at.to_le_bytes());
        Occupant { tag, key_len: key.len() as u32, value_len: len, write_time_ns, payload, internal: true, pages: true }
    }

    /// Builds the occupant of a pair; `key_at` / `value_at` are the offsets of the out-of-line
    /// copies that `placement` asks for.
    pub(crate) fn new(
        tag: u32,
        write_time_ns: u64,
        key: &[u8],
        value: &[u8],
        key_at: Option<u64>,
        value_at: Option<u64>,
    ) -> Occupant {
        Occupant::with_value_len(tag, write_time_ns, key, value.len() as u64, value, key_at, value_at)
    }

    /// [`Occupant::new`] for a value of `value_len` bytes that lies out of line at `value_at`
    /// already (a staged value), whose bytes the occupant does not need.
    pub(crate) fn placed(
        tag: u32,
        write_time_ns: u64,
        key: &[u8],
        value_len: u64,
        key_at: Option<u64>,
        value_at: u64,
    ) -> Occupant {
        Occupant::with_value_len(tag, write_time_ns, key, value_len, &[], key_at, Some(value_at))
    }

    fn with_value_len(
        tag: u32,
        write_time_ns: u64,
        key: &[u8],
        value_len: u64,
        value: &[u8],
        key_at: Option<u64>,
        value_at: Option<u64>,
    ) -> Occupant {
        let key_len = u32::try_from(key.len()).ok().filter(|len| u64::from(*len) <= KEY_BYTES_MAX);
        let key_len = key_len.expect("callers refuse keys longer than KEY_BYTES_MAX");
        let placement = Placement::of(key.len() as u64, value_len);
        let value_len = u32::try_from(value_len).expect("callers refuse values longer than VALUE_BYTES_MAX");
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
        Occupant { tag, key_len, value_len, write_time_ns, payload, internal: false, pages: false }
    }

    /// `entry` is a whole 64-byte entry whose in-use flag is set.
    pub(crate) fn decode(entry: &[u8]) -> Occupant {
        let meta = read_u32(entry, META_OFFSET);
        let internal = meta & INTERNAL != 0;
        let pages = internal && meta & PAGES != 0;
        Occupant {
            tag: read_u32(entry, HASH_OFFSET),
            key_len: if internal { meta & (PAGES - 1) } else { meta & !(IN_USE | INTERNAL) },
            value_len: read_u32(entry, VALUE_LEN_OFFSET),
            write_time_ns: read_u64(entry, WRITE_TIME_OFFSET),
            payload: entry[PAYLOAD_OFFSET..PAYLOAD_OFFSET + PAYLOAD_BYTES].try_into().expect("40 bytes"),
            internal,
            pages,
        }
    }

    /// The occupant's 60 bytes, in-use flag set, which go at `OCCUPANT_OFFSET` of an entry.
    pub(crate) fn encode(&self) -> [u8; OCCUPANT_BYTES] {
        let mut entry = [0; ENTRY_BYTES as usize];
        write_u32(&mut entry, HASH_OFFSET, self.tag);
        let internal = if self.internal { INTERNAL } else { 0 };
        let pages = if self.pages { PAGES } else { 0 };
        write_u32(&mut entry, META_OFFSET, self.key_len | IN_USE | internal | pages);
        write_u32(&mut entry, VALUE_LEN_OFFSET, self.value_len);
        write_u64(&mut entry, WRITE_TIME_OFFSET, self.write_time_ns);
        entry[PAYLOAD_OFFSET..].copy_from_slice(&self.payload);
        entry[OCCUPANT_OFFSET..].try_into().expect("60 bytes")
    }

    pub(crate) fn placement(&self) -> Placement {
        Placement::of(u64::from(self.key_len), u64::from(self.value_len))
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
        (self.value_at().unwrap_or(inline), u64::from(self.value_len))
    }
}

/// The sizes a pool of a given spec is formatted with. Pure function of the spec, so
/// `region_bytes_for` and `create` agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub slab_bytes: u64,
    pub subtables: u64,
    /// Buckets each subtable gets with its first pair: enough for its share of the expected
    /// objects, so a pool sized by its hint does not grow while it fills to the hint.
    pub initial_buckets: u64,
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
        let subtables = pairs_max.div_ceil(SUBTABLE_PAIRS_PLANNED).max(1);
        if subtables > u64::from(u32::MAX) {
            return None;
        }
        let initial_buckets = initial_buckets(spec.expected_objects.min(pairs_max), subtables);
        // Table room: every pair the accounting admits at the lowest load after a growth (18/25;
        // reserved as 7/10),
        // every subtable at least its initial size, and one growth in flight (the old and the new
        // copy of the largest subtable the pool can have); the factor 8/5 over 10/7 leaves room
        // for the allocator's gaps.
        let largest_subtable = pairs_max.saturating_mul(10).div_ceil(7).saturating_add(BUCKETS_MIN).min(BUCKETS_MAX);
        let table_bytes = pairs_max
            .checked_mul(ENTRY_BYTES * 8 / 5)?
            .checked_add(subtables.checked_mul(initial_buckets * ENTRY_BYTES)?)?
            .checked_add(2 * largest_subtable * ENTRY_BYTES)?;
        let classes = super::allocator::class_count(small_object_bytes_max(slab_bytes)) as u64;
        // Payload room: the pool's size and half again, for size-class rounding (at most 25 %
        // plus 16 bytes per object, which the 64 bytes charged per pair cover) and for
        // fragmentation; plus one partly filled slab per class and the alignment gap below the
        // first slab.
        let payload_bytes = align_up(capacity.checked_add(capacity / 2)?, GRAIN_BYTES)
            .checked_add(classes.checked_add(1)?.checked_mul(slab_bytes)?)?;
        let region_bytes = HEADER_BYTES
            .checked_add(directory_bytes(subtables))?
            .checked_add(align_up(table_bytes, GRAIN_BYTES))?
            .checked_add(payload_bytes)?;
        (region_bytes <= REGION_BYTES_MAX).then_some(Geometry { slab_bytes, subtables, initial_buckets, region_bytes })
    }
}

/// Buckets for a subtable expected to hold an even share of `expected` pairs among `subtables`,
/// with room for the share's random excess (three standard deviations), at the load limit.
pub(crate) fn initial_buckets(expected: u64, subtables: u64) -> u64 {
    let share = expected.div_ceil(subtables);
    if share == 0 {
        return BUCKETS_MIN;
    }
    let with_excess = share + 3 * share.isqrt() + 1;
    with_excess.saturating_mul(LOAD_DENOMINATOR).div_ceil(LOAD_NUMERATOR).clamp(BUCKETS_MIN, BUCKETS_MAX)
}

/// The size a subtable of `buckets` grows to, or `None` at the largest size.
pub(crate) fn grown_buckets(buckets: u64) -> Option<u64> {
    (buckets < BUCKETS_MAX)
        .then(|| (buckets * GROWTH_NUMERATOR).div_ceil(GROWTH_DENOMINATOR).clamp(buckets + 1, BUCKETS_MAX))
}

/// Whether a subtable of `buckets` holding `pairs` can take one more without passing the load limit.
pub(crate) fn within_load(pairs: u64, buckets: u64) -> bool {
    (pairs + 1) * LOAD_DENOMINATOR <= buckets * LOAD_NUMERATOR
}

fn prev_power_of_two(value: u64) -> u64 {
    if value == 0 {
        0
    } else {
        1 << (63 - value.leading_zeros())
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
            subtables: 3,
            directory: 0x8_0000,
            initial_buckets: 128,
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
        assert_eq!(read_u32(&bytes, SUBTABLES_OFFSET), 3);
        assert_eq!(read_u64(&bytes, DIRECTORY_OFFSET), 0x8_0000);
        assert_eq!(read_u32(&bytes, CHECKSUM_OFFSET), crate::checksum::crc32(&bytes[16..]));
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

    /// A good header with the field at `offset` replaced by `value`, its checksum made right again.
    fn with_field(offset: usize, value: &[u8]) -> Vec<u8> {
        let mut page = header().encode();
        page[offset..offset + value.len()].copy_from_slice(value);
        let checksum = crate::checksum::crc32(&page[CHECKSUM_COVERS_FROM..]);
        write_u32(&mut page, CHECKSUM_OFFSET, checksum);
        page
    }

    /// A header whose checksum is right but whose fields are impossible is still refused, naming
    /// the field's offset.
    #[test]
    fn impossible_fields_are_refused_by_offset() {
        let error = Header::decode(&with_field(SLAB_BYTES_OFFSET, &4097u32.to_le_bytes())).expect_err("slab size");
        assert!(matches!(error, OpenError::InvalidField { offset: 56, .. }), "{error}");
        let error = Header::decode(&with_field(DIRECTORY_OFFSET, &100u64.to_le_bytes())).expect_err("directory");
        assert!(matches!(error, OpenError::InvalidField { offset: 64, .. }), "{error}");
        let error = Header::decode(&with_field(SUBTABLES_OFFSET, &0u32.to_le_bytes())).expect_err("no subtables");
        assert!(matches!(error, OpenError::InvalidField { offset: 60, .. }), "{error}");
        let error = Header::decode(&with_field(INITIAL_BUCKETS_OFFSET, &16u32.to_le_bytes())).expect_err("tiny");
        assert!(matches!(error, OpenError::InvalidField { offset: 72, .. }), "{error}");
        assert!(matches!(Header::decode(&[0; 100]), Err(OpenError::RegionTooSmall { .. })));
    }

    /// Directory entries round-trip, an all-zero entry is an empty subtable, and an entry copied
    /// to another subtable's place (or damaged) is refused.
    #[test]
    fn directory_entries_are_bound_to_their_place() {
        let entry = DirectoryEntry { offset: 0x10_0000, buckets: 80 };
        let bytes = entry.encode(5);
        assert_eq!(DirectoryEntry::decode(&bytes, 5), Ok(entry));
        assert!(DirectoryEntry::decode(&bytes, 6).is_err(), "an entry belongs to its own subtable");
        assert_eq!(DirectoryEntry::decode(&[0; 16], 6), Ok(DirectoryEntry::default()));
        let mut damaged = bytes;
        damaged[3] ^= 1;
        assert!(DirectoryEntry::decode(&damaged, 5).is_err());
    }

    /// An occupant survives encode and decode, and its payload follows the documented placements.
    #[test]
    fn occupant_round_trips_and_places_by_length() {
        let key = b"key";
        let value = b"value";
        let occupant = Occupant::new(7, 9, key, value, None, None);
        let mut entry = [0u8; 64];
        entry[OCCUPANT_OFFSET..].copy_from_slice(&occupant.encode());
        assert_eq!(read_u32(&entry, META_OFFSET), 3 | IN_USE);
        assert_eq!(Occupant::decode(&entry), occupant);
        assert_eq!(&entry[PAYLOAD_OFFSET..PAYLOAD_OFFSET + 8], b"keyvalue");
        assert_eq!(occupant.key_range(1000), (1024, 3));
        assert_eq!(occupant.value_range(1000), (1027, 5));

        let long_value = [1u8; 41];
        let occupant = Occupant::new(7, 9, key, &long_value, None, Some(0x1234));
        assert_eq!(occupant.value_at(), Some(0x1234));
        assert_eq!(occupant.key_at(), None);
        assert_eq!(read_u64(&occupant.payload, 32), 0x1234);

        let long_key = [2u8; 33];
        let occupant = Occupant::new(7, 9, &long_key, b"12345678", Some(0x40), None);
        assert_eq!((occupant.key_at(), occupant.value_at()), (Some(0x40), None));
        assert_eq!(occupant.value_range(0), (PAYLOAD_OFFSET as u64 + 8, 8));
    }

    /// The inline limits sit exactly where the payload runs out: a 16-byte key and a 16-byte
    /// value fit.
    #[test]
    fn placement_boundaries() {
        let p = |k, v| {
            let p = Placement::of(k, v);
            (p.key_inline, p.value_inline)
        };
        assert_eq!(p(16, 16), (true, true));
        assert_eq!(p(0, 40), (true, true));
        assert_eq!(p(20, 20), (true, true));
        assert_eq!(p(0, 41), (true, false));
        assert_eq!(p(32, 9), (true, false));
        assert_eq!(p(33, 8), (false, true));
        assert_eq!(p(40, 1), (false, true));
        assert_eq!(p(41, 0), (false, true));
        assert_eq!(p(33, 33), (false, false));
        assert_eq!(p(KEY_BYTES_MAX, VALUE_BYTES_MAX), (false, false));
    }

    /// Scaling keeps hash order: a larger hash part never maps below a smaller one, whatever the
    /// range, which is what keeps scan cursors valid across growth.
    #[test]
    fn scaling_is_monotone_and_covers_the_range() {
        for range in [1u64, 64, 80, 100, 16384] {
            let mut last = 0;
            for value in (0..=u32::MAX).step_by(1 << 20).chain([u32::MAX]) {
                let scaled = scale(value, range);
                assert!(scaled >= last && scaled < range);
                last = scaled;
            }
            assert_eq!(scale(u32::MAX, range), range - 1);
        }
    }

    /// Growth goes by 5/4 and stops at the largest size; initial sizes follow the hint.
    #[test]
    fn subtables_grow_by_a_quarter_up_to_the_limit() {
        assert_eq!(grown_buckets(64), Some(80));
        assert_eq!(grown_buckets(80), Some(100));
        assert_eq!(grown_buckets(16000), Some(BUCKETS_MAX));
        assert_eq!(grown_buckets(BUCKETS_MAX), None);
        assert!(within_load(56, 64) && !within_load(57, 64));
        assert_eq!(initial_buckets(0, 10), BUCKETS_MIN);
        // 1000 pairs over 4 subtables: 250 each, plus 3 sigma (45) and one, at 9/10.
        assert_eq!(initial_buckets(1000, 4), 329);
        assert_eq!(initial_buckets(u64::MAX / 16, 1), BUCKETS_MAX);
    }

    /// The region leaves room for the table at its lowest load and for the payload.
    #[test]
    fn geometry_reserves_table_and_payload() {
        let g = Geometry::of(PoolSpec { size_bytes: 256 * 1024, expected_objects: 1 }).expect("small pool");
        assert_eq!(g.slab_bytes, 1024);
        assert_eq!(g.subtables, 1);
        assert!(g.region_bytes >= HEADER_BYTES + 4096 * 64 * 10 / 7 + 256 * 1024 * 3 / 2);
        let g = Geometry::of(PoolSpec { size_bytes: 1 << 30, expected_objects: u64::MAX }).expect("1 GiB pool");
        assert_eq!(g.slab_bytes, SLAB_BYTES_MAX);
        assert_eq!(g.subtables, (1u64 << 24).div_ceil(SUBTABLE_PAIRS_PLANNED));
        assert!(g.initial_buckets > SUBTABLE_PAIRS_PLANNED * 10 / 9, "{}", g.initial_buckets);
        assert_eq!(Geometry::of(PoolSpec { size_bytes: u64::MAX, expected_objects: 0 }), None);
        let g = Geometry::of(PoolSpec { size_bytes: 0, expected_objects: 0 }).expect("empty pool");
        assert_eq!((g.subtables, g.initial_buckets), (1, BUCKETS_MIN));
    }
}
