//! `hstore`: MCAS's persistent hopscotch hash engine (MCAS section 3.2), living entirely inside one
//! region of pool memory.
//!
//! # Format
//!
//! The region starts with a 4 KiB header (magic, format version, CRC-32 of the rest of the page,
//! the pool's capacity, its SipHash key, slab size, and where the directory is); the rest is the
//! heap. The byte-level layout is in [`layout`](self::layout)'s documentation and offset
//! constants, the reasoning in `docs/hstore.md`. Everything persistent is an offset from the
//! region's start, never a pointer.
//!
//! The primary index is a fixed number of hopscotch hash tables, *subtables*, chosen when the
//! pool is created from its capacity; a key's hash picks its subtable (high 32 bits) and its home
//! bucket there (low 32 bits). Entries are 64 bytes (one cache line): a hop bitmap, the key's
//! hash, an in-use flag and the key length, the value length, the write time and a 40-byte
//! payload that holds the key and value themselves when they fit (a 16-byte key with a 16-byte
//! value does), or the offsets of out-of-line copies in the heap. A directory in the heap records
//! each subtable's place and size.
//!
//! # Growth in bounded steps
//!
//! A subtable grows on its own: when it would pass 9/10 full, it is rewritten at 5/4 of its size,
//! with the new pair, in the same transaction as the put that needed the room. A subtable has at
//! most [`layout::BUCKETS_MAX`] buckets (1 MiB), so no growth's log record or transient buffer
//! is larger, and no request's turn is long; the index's load stays between 0.72 and 0.9 (a
//! table that doubles falls to 0.44), and only one subtable's old copy exists at a time, so the
//! memory in use during a growth stays close to the memory after it. (MCAS doubles one table by
//! segments; that growth is one transaction the size of the whole table.)
//!
//! # Allocation and the reconstituting allocator
//!
//! Subtables, the directory and values over the small-object limit get extents from a region
//! allocator (best fit, from the high end of the heap); keys and values up to the limit get slots
//! in slabs, one size class per slab, slabs packed from the low end. All allocator state is
//! volatile: `open` rebuilds it from the directory and the tables, as MCAS does, because every
//! allocation is referenced by exactly one entry or directory entry.
//!
//! # Transactions
//!
//! Every change goes through [`PoolMemory::modify`] and every successful operation ends with
//! exactly one [`PoolMemory::commit`]. An operation decides everything that can fail first: the
//! accounting check, every allocation (recorded in an [`AllocTxn`] and undone if a later one
//! fails), the free entry and its displacements, or a whole planned growth; only then does it
//! write. A refused operation writes nothing and does not commit.
//!
//! # Capacity
//!
//! Accounting is the [`Store`] contract: `used_bytes` is key bytes plus value bytes plus
//! [`ENTRY_OVERHEAD_BYTES`] per pair, and a put that would take it past the pool's size is refused
//! with [`StoreError::PoolFull`]. The region must also physically hold what the accounting admits,
//! so it is larger than the pool: [`HStore::region_bytes_for`] gives room for every pair the
//! accounting allows at the lowest load after a growth, with margin for the allocator's gaps,
//! plus 1.5 times the pool's size for keys and values, plus one slab per size class. Untouched
//! parts of a region cost no physical memory on the `memory` and `ssd` backings (both are lazily
//! zeroed). Erasures and overwrites can fragment the heap; if a put that the accounting admits
//! finds no space, it is refused with `PoolFull` as well, before anything is modified.
//!
//! # Limits and known gaps
//!
//! - Keys are at most 2^31 - 1 bytes and values at most 2^32 - 1 ([`StoreError::KeyTooLarge`],
//!   [`StoreError::ValueTooLarge`]).
//! - Subtables never shrink (as in MCAS).

mod allocator;
mod check;
mod hash;
mod layout;
mod table;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;

use allocator::{AllocTxn, Heap};
use check::Allocation;
pub use check::CheckReport;
use layout::{
    grown_buckets, index, read_u32, small_object_bytes_max, subtable_of, tag_of, within_load, DirectoryEntry, Geometry,
    Header, Occupant, Placement, BUCKETS_MAX, DIRECTORY_ENTRY_BYTES, ENTRY_BYTES, GRAIN_BYTES, HEADER_BYTES,
    HOP_OFFSET, KEY_BYTES_MAX, OCCUPANT_BYTES, OCCUPANT_OFFSET, REGION_BYTES_OFFSET, VALUE_BYTES_MAX,
};
use table::{plan_insert, Image, Move, Overlay, Source, Subtable, MOVES_MAX};

use crate::memory::MemoryUsage;
use crate::persistence::PoolMemory;
use crate::store::{
    staged_charge, KeptAllocation, PoolSpec, PutMode, PutOutcome, RegionCopy, StagedValue, Store, StoreError,
    ValueAttributes, ValueLocation, WriteFootprint, ENTRY_OVERHEAD_BYTES,
};

/// Why [`HStore::create`] refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CreateError {
    #[error("a pool of {size_bytes} bytes is too large for an hstore region (at most 4 PiB including its table)")]
    TooLarge { size_bytes: u64 },
    #[error(
        "a region of {actual} bytes is too small for an hstore pool of {size_bytes} bytes, which needs {needed} \
         (HStore::region_bytes_for)"
    )]
    RegionTooSmall { size_bytes: u64, needed: u64, actual: u64 },
}

/// Why [`HStore::open`] refused a region. Every variant names the region offset it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    #[error("region of {actual} bytes is too small for an hstore header ({needed} bytes at offset 0x0)")]
    RegionTooSmall { needed: u64, actual: u64 },
    #[error("not an hstore region: bad magic {found:02x?} at offset {offset:#x}")]
    BadMagic { offset: u64, found: [u8; 8] },
    #[error("unsupported hstore format version {found} at offset {offset:#x} (this build reads version {supported})")]
    UnsupportedVersion { offset: u64, found: u32, supported: u32 },
    #[error(
        "hstore header checksum mismatch at offset {offset:#x}: stored {stored:#010x}, computed {computed:#010x} \
         over bytes {:#x}..{:#x}",
        covered.0,
        covered.1
    )]
    HeaderChecksum { offset: u64, stored: u32, computed: u32, covered: (u64, u64) },
    #[error("invalid hstore header field '{field}' at offset {offset:#x}: {reason}")]
    InvalidField { offset: u64, field: &'static str, reason: String },
    #[error("corrupt hstore region at offset {offset:#x}: {detail}")]
    Corrupt { offset: u64, detail: String },
}

/// Whether the memory given to `create` is known to be all zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Zeroed {
    Unknown,
    Known,
}

/// The `hstore` engine over one region of pool memory.
pub struct HStore<M: PoolMemory> {
    memory: M,
    /// Mirror of the persistent header; written only when the pool is created.
    header: Header,
    /// Mirror of the directory: every subtable's place (no buckets while it has held no pair).
    subtables: Vec<Subtable>,
    /// Pairs in each subtable (volatile, rebuilt by `open`).
    pairs: Vec<u32>,
    /// Volatile allocator state, rebuilt from the tables by `open`.
    heap: Heap,
    /// The allocations the engine keeps for plugins, by place (volatile, rebuilt by `open`).
    allocations: BTreeMap<u64, Allocation>,
    objects: u64,
    /// What the pairs are charged (see [`Store::used_bytes`]), as the region's header keeps it.
    used_bytes: u64,
    /// The room staged values hold until their commit or discard ([`staged_charge`]; volatile:
    /// a staged value does not outlive its store).
    staged_bytes: u64,
}

/// The value stored under the client key `key` in the hstore region `bytes`, looked up in place
/// with no store open over it: what a cluster follower reads from its replica of a pool, whose
/// memory its group's log changes underneath any store. Only the key's subtable is read; a
/// region whose header, directory entry or table does not make sense gives `None`, as does an
/// absent key.
pub fn peek<'a>(bytes: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let header = Header::decode(bytes).ok()?;
    if header.region_bytes != bytes.len() as u64 {
        return None;
    }
    let hash = header.hash(key);
    let number = subtable_of(hash, header.subtables);
    let raw = layout::slice(bytes, header.directory_entry_offset(number), DIRECTORY_ENTRY_BYTES)?;
    let entry = DirectoryEntry::decode(raw, number).ok()?;
    let subtable = Subtable { offset: entry.offset, buckets: entry.buckets };
    let table_bytes = entry.buckets.checked_mul(ENTRY_BYTES)?;
    if entry.buckets == 0 || layout::slice(bytes, entry.offset, table_bytes).is_none() {
        return None;
    }
    let bucket = subtable.find(bytes, tag_of(hash), key, false)?;
    let occupant = subtable.occupant(bytes, bucket);
    subtable.pair(bytes, bucket, &occupant).map(|(_, value)| value)
}

impl<M: PoolMemory> fmt::Debug for HStore<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HStore")
            .field("objects", &self.objects)
            .field("used_bytes", &self.used_bytes)
            .field("staged_bytes", &self.staged_bytes)
            .field("capacity_bytes", &self.header.capacity_bytes)
            .field("region_bytes", &self.header.region_bytes)
            .field("subtables", &self.subtables.len())
            .finish_non_exhaustive()
    }
}

fn charge(key_len: u64, value_len: u64) -> u64 {
    key_len + value_len + ENTRY_OVERHEAD_BYTES
}

/// The operating system's page: scratch memory (a plugin call's copies and allocations) comes in
/// whole pages of it, so that a plugin host can be given write access to exactly a call's own.
fn page_bytes() -> u64 {
    rustix::param::page_size() as u64
}

/// How the index takes a new pair.
enum TablePlan {
    /// Into its subtable as it is, after these displacements.
    InPlace { moves: Vec<Move>, bucket: u64 },
    /// By writing its subtable anew at `grown` (a growth, or a subtable's first buckets), with
    /// the new pair already placed in the image.
    Rewrite { grown: Subtable, image: Image },
}

/// Where a put's value comes from.
#[derive(Debug, Clone, Copy)]
enum NewValue<'v> {
    /// Bytes to copy into the pair.
    Bytes(&'v [u8]),
    /// A staged value already out of line at `at`, its bytes logged as they were written.
    Placed { at: u64, len: u64 },
}

impl NewValue<'_> {
    fn len(self) -> u64 {
        match self {
            NewValue::Bytes(bytes) => bytes.len() as u64,
            NewValue::Placed { len, .. } => len,
        }
    }

    fn placed_at(self) -> Option<u64> {
        match self {
            NewValue::Placed { at, .. } => Some(at),
            NewValue::Bytes(_) => None,
        }
    }
}

/// Everything an insert decided before writing.
struct InsertPlan {
    key_at: Option<u64>,
    value_at: Option<u64>,
    table: TablePlan,
}

/// Where a scan stands: the subtable and the lowest hash part (low 32 bits) not yet visited in
/// it. See [`HStore::scan`].
fn scan_position(cursor: u64) -> (u64, u32) {
    (cursor >> 32, cursor as u32)
}

impl<M: PoolMemory> HStore<M> {
    /// Bytes of pool memory a pool of shape `spec` needs: see "Capacity" in the module
    /// documentation. Callers allocate a region of (at least) this size and pass it to `create`.
    pub fn region_bytes_for(spec: PoolSpec) -> Result<u64, CreateError> {
        Geometry::of(spec).map(|g| g.region_bytes).ok_or(CreateError::TooLarge { size_bytes: spec.size_bytes })
    }

    /// The most one put of a key and value of these lengths can change: its out-of-line key and
    /// value, and the larger of an insert in place (every displacement rewriting two occupants
    /// and a hop bitmap) and a subtable's rewrite at its largest size with its directory entry.
    pub fn put_footprint_for(key_len: u64, value_len: u64) -> WriteFootprint {
        let occupant = OCCUPANT_BYTES as u64;
        let in_place_bytes = MOVES_MAX * (2 * occupant + 4) + occupant + 4;
        let rewrite_bytes = BUCKETS_MAX * ENTRY_BYTES + DIRECTORY_ENTRY_BYTES;
        let in_place_ranges = MOVES_MAX * 3 + 2;
        let rewrite_ranges = 2;
        WriteFootprint {
            bytes: key_len + value_len + in_place_bytes.max(rewrite_bytes),
            ranges: 2 + in_place_ranges.max(rewrite_ranges),
        }
    }

    /// The most formatting a pool of shape `spec` changes: its header, and its directory when the
    /// memory is not known to be zero (see [`WriteFootprint`]).
    pub fn creation_footprint(spec: PoolSpec) -> Result<WriteFootprint, CreateError> {
        let geometry = Geometry::of(spec).ok_or(CreateError::TooLarge { size_bytes: spec.size_bytes })?;
        let directory_bytes = layout::directory_bytes(geometry.subtables);
        Ok(WriteFootprint { bytes: HEADER_BYTES + directory_bytes, ranges: 2 })
    }

    /// Formats `memory` as an empty store for a pool of shape `spec`. Whatever the region held is
    /// ignored; its length must be at least [`HStore::region_bytes_for`]`(spec)`, and any extra
    /// bytes become heap.
    pub fn create(memory: M, spec: PoolSpec) -> Result<Self, CreateError> {
        Self::create_with_hash_key(memory, spec, hash::random_hash_key(), Zeroed::Unknown)
    }

    /// [`HStore::create`] over memory every byte of which is known to be zero (a fresh memfd):
    /// only the header is written, however large the directory.
    pub fn create_on_zeroed(memory: M, spec: PoolSpec) -> Result<Self, CreateError> {
        Self::create_with_hash_key(memory, spec, hash::random_hash_key(), Zeroed::Known)
    }

    /// `create` with a chosen hash key, so tests are reproducible.
    pub(crate) fn create_with_hash_key(
        mut memory: M,
        spec: PoolSpec,
        hash_key: [u64; 2],
        zeroed: Zeroed,
    ) -> Result<Self, CreateError> {
        let geometry = Geometry::of(spec).ok_or(CreateError::TooLarge { size_bytes: spec.size_bytes })?;
        let actual = memory.len() as u64;
        if actual < geometry.region_bytes {
            return Err(CreateError::RegionTooSmall {
                size_bytes: spec.size_bytes,
                needed: geometry.region_bytes,
                actual,
            });
        }
        let mut heap = Heap::new(
            HEADER_BYTES,
            actual / GRAIN_BYTES * GRAIN_BYTES,
            geometry.slab_bytes,
            small_object_bytes_max(geometry.slab_bytes),
        );
        let directory_bytes = layout::directory_bytes(geometry.subtables);
        let directory =
            heap.alloc_segment(directory_bytes).expect("a region of region_bytes_for(spec) has room for the directory");
        let header = Header {
            region_bytes: actual,
            capacity_bytes: spec.size_bytes,
            expected_objects: spec.expected_objects,
            hash_key,
            slab_bytes: geometry.slab_bytes,
            subtables: geometry.subtables,
            directory,
            initial_buckets: geometry.initial_buckets,
        };
        memory.modify(0, index(HEADER_BYTES)).copy_from_slice(&header.encode());
        if zeroed == Zeroed::Unknown {
            // An all-zero directory is every subtable without buckets.
            memory.modify(directory, index(directory_bytes)).fill(0);
        }
        memory.commit();
        let count = index(geometry.subtables);
        Ok(HStore {
            memory,
            header,
            subtables: vec![Subtable { offset: 0, buckets: 0 }; count],
            pairs: vec![0; count],
            heap,
            allocations: BTreeMap::new(),
            objects: 0,
            used_bytes: 0,
            staged_bytes: 0,
        })
    }

    /// Re-attaches to a region formatted by `create`: validates the header (magic, version,
    /// checksum, fields), walks the directory and every table to check every entry, and rebuilds
    /// the volatile allocator and the counts from what they reference. Writes nothing.
    pub fn open(memory: M) -> Result<Self, OpenError> {
        let bytes = memory.bytes();
        let header = Header::decode(bytes)?;
        if header.region_bytes != bytes.len() as u64 {
            return Err(OpenError::InvalidField {
                offset: REGION_BYTES_OFFSET as u64,
                field: "region bytes",
                reason: format!("the header records {} bytes but the region has {}", header.region_bytes, bytes.len()),
            });
        }
        let mut problems = Vec::new();
        let walk = check::walk(bytes, &header, &mut problems);
        if let Some(problem) = problems.into_iter().next() {
            return Err(OpenError::Corrupt { offset: problem.offset, detail: problem.detail });
        }
        Ok(HStore {
            memory,
            header,
            subtables: walk.subtables,
            pairs: walk.pairs,
            heap: walk.heap,
            allocations: walk.allocations,
            objects: walk.objects,
            used_bytes: walk.used_bytes,
            staged_bytes: 0,
        })
    }

    /// Checks the whole region (what `ferrite check` runs): the header, the directory, hop
    /// bitmaps against entry positions, that every key is found by a lookup, that allocations
    /// lie inside the heap and overlap nothing, and that the counts, used bytes and volatile
    /// allocator state equal what a fresh walk implies. Returns every problem found (up to a
    /// hundred).
    pub fn check(&self) -> Result<CheckReport, Vec<String>> {
        let bytes = self.memory.bytes();
        match Header::decode(bytes) {
            Err(error) => return Err(vec![error.to_string()]),
            Ok(header) if header != self.header => {
                return Err(vec!["the header in pool memory differs from the one the store was opened with".into()]);
            }
            Ok(_) => {}
        }
        let mut problems = Vec::new();
        let walk = check::walk(bytes, &self.header, &mut problems);
        let mut problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        if problems.is_empty() {
            if walk.objects != self.objects {
                problems.push(format!("the tables hold {} pairs but the store counts {}", walk.objects, self.objects));
            }
            if walk.used_bytes != self.used_bytes {
                problems.push(format!(
                    "the tables' pairs take {} bytes but the store counts {}",
                    walk.used_bytes, self.used_bytes
                ));
            }
            if walk.allocations != self.allocations {
                problems.push(format!(
                    "the tables record {} allocations but the store keeps {}",
                    walk.allocations.len(),
                    self.allocations.len()
                ));
            }
            if walk.subtables != self.subtables || walk.pairs != self.pairs {
                problems.push("the directory or the per-subtable counts differ from the store's".into());
            }
            if walk.heap != self.heap {
                problems.push(format!(
                    "the allocator state differs from the one the tables imply ({} free bytes in {} extents and {} \
                     slabs, against {} in {} and {})",
                    self.heap.free_bytes(),
                    self.heap.free_extents(),
                    self.heap.slabs(),
                    walk.heap.free_bytes(),
                    walk.heap.free_extents(),
                    walk.heap.slabs()
                ));
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(CheckReport {
            objects: self.objects,
            used_bytes: self.used_bytes,
            capacity_bytes: self.header.capacity_bytes,
            region_bytes: self.header.region_bytes,
            buckets: self.subtables.iter().map(|subtable| subtable.buckets).sum(),
            subtables: self.subtables.len(),
            out_of_line_objects: walk.out_of_line_objects,
            slabs: self.heap.slabs(),
            heap_free_bytes: self.heap.free_bytes(),
            heap_free_extents: self.heap.free_extents(),
        })
    }

    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// Every subtable's bucket count (0 while it has none), in directory order: how crash tests
    /// outside this module tell which put grew a subtable.
    #[cfg(test)]
    pub(crate) fn subtable_buckets(&self) -> Vec<u64> {
        self.subtables.iter().map(|subtable| subtable.buckets).collect()
    }

    /// Gives the region back, e.g. to checkpoint it or to `open` it again.
    pub fn into_memory(self) -> M {
        self.memory
    }

    /// The subtable, the hash part its entries keep, and the bucket holding the client key
    /// `key`, if present.
    fn locate(&self, key: &[u8]) -> (usize, u32, Option<u64>) {
        self.locate_among(key, false)
    }

    /// [`Self::locate`] among client pairs, or among the engine's own allocations if `internal`.
    fn locate_among(&self, key: &[u8], internal: bool) -> (usize, u32, Option<u64>) {
        let hash = self.header.hash(key);
        let index = layout::index(subtable_of(hash, self.header.subtables));
        let tag = tag_of(hash);
        let subtable = self.subtables[index];
        let found = (subtable.buckets > 0).then(|| subtable.find(self.memory.bytes(), tag, key, internal)).flatten();
        (index, tag, found)
    }

    fn pool_full(&self, needed: u64) -> StoreError {
        StoreError::PoolFull {
            needed,
            free: self.header.capacity_bytes.saturating_sub(self.used_bytes + self.staged_bytes),
            capacity: self.header.capacity_bytes,
        }
    }

    /// The pairs' charge after replacing a charge of `old` with one of `new`, or `PoolFull` if
    /// that grows past what the capacity leaves beside the staged values (shrinking always
    /// passes, as in mapstore).
    fn reserve(&self, old: u64, new: u64) -> Result<u64, StoreError> {
        let used_after = (self.used_bytes - old).saturating_add(new);
        if new > old && used_after.saturating_add(self.staged_bytes) > self.header.capacity_bytes {
            return Err(self.pool_full(new - old));
        }
        Ok(used_after)
    }

    /// Read-modify-write of one hop bitmap.
    fn update_hop(&mut self, subtable: Subtable, bucket: u64, change: impl FnOnce(u32) -> u32) {
        let at = subtable.entry_offset(bucket) + HOP_OFFSET as u64;
        let hop = read_u32(self.memory.bytes(), index(at));
        self.memory.modify(at, 4).copy_from_slice(&change(hop).to_le_bytes());
    }

    fn write_occupant(&mut self, subtable: Subtable, bucket: u64, occupant: &[u8; OCCUPANT_BYTES]) {
        let at = subtable.entry_offset(bucket) + OCCUPANT_OFFSET as u64;
        self.memory.modify(at, OCCUPANT_BYTES).copy_from_slice(occupant);
    }

    /// One hopscotch displacement: the pair in `mv.from` moves to the free `mv.to`, and its home's
    /// bitmap follows.
    fn apply_move(&mut self, subtable: Subtable, mv: Move) {
        let occupant: [u8; OCCUPANT_BYTES] =
            subtable.occupant_bytes(self.memory.bytes(), mv.from).try_into().expect("60 bytes");
        self.write_occupant(subtable, mv.to, &occupant);
        self.write_occupant(subtable, mv.from, &[0; OCCUPANT_BYTES]);
        self.update_hop(subtable, mv.home, |hop| table::moved_hop(hop, mv, subtable.buckets));
    }

    /// Decides where a new pair goes and allocates what it needs, writing nothing. `None` (with
    /// `txn` holding what was allocated, for the caller to undo) if the region has no room.
    fn plan_insert(
        &mut self,
        txn: &mut AllocTxn,
        index: usize,
        tag: u32,
        key_len: u64,
        value: NewValue<'_>,
    ) -> Option<InsertPlan> {
        let placement = Placement::of(key_len, value.len());
        let key_at = if placement.key_inline { None } else { Some(txn.alloc(&mut self.heap, key_len)?) };
        let value_at = match (placement.value_inline, value.placed_at()) {
            (true, _) => None,
            (false, Some(at)) => Some(at),
            (false, None) => Some(txn.alloc(&mut self.heap, value.len())?),
        };
        let table = self.plan_table(txn, index, tag)?;
        Some(InsertPlan { key_at, value_at, table })
    }

    /// Where subtable `index` takes a pair whose hash keeps `tag`: in place while it is within
    /// its load limit and has a free entry near enough, else in a grown copy (its first buckets,
    /// for a subtable that has none). At the largest size, or with no room left to grow, a
    /// subtable past its load limit still takes the pair in place if it can.
    fn plan_table(&mut self, txn: &mut AllocTxn, index: usize, tag: u32) -> Option<TablePlan> {
        let subtable = self.subtables[index];
        let pairs = u64::from(self.pairs[index]);
        let bytes = self.memory.bytes();
        let in_place = || plan_insert(&mut Overlay::new(bytes, subtable), subtable.home(tag));
        let within = subtable.buckets > 0 && within_load(pairs, subtable.buckets);
        if within {
            if let Some((moves, bucket)) = in_place() {
                return Some(TablePlan::InPlace { moves, bucket });
            }
        }
        let mut size =
            if subtable.buckets == 0 { Some(self.header.initial_buckets) } else { grown_buckets(subtable.buckets) };
        while let Some(buckets) = size {
            let mut growth = AllocTxn::default();
            let Some(offset) = growth.alloc_segment(&mut self.heap, buckets * ENTRY_BYTES) else { break };
            let image = if subtable.buckets == 0 {
                Some(Image::empty(buckets))
            } else {
                Image::rehash(bytes, subtable, buckets)
            };
            let grown = Subtable { offset, buckets };
            if let Some(mut image) = image {
                let home = grown.home(tag);
                if let Some((_, to)) = plan_insert(&mut image, home) {
                    image.place(home, to, Source::New);
                    txn.absorb(growth);
                    return Some(TablePlan::Rewrite { grown, image });
                }
            }
            growth.rollback(&mut self.heap);
            size = grown_buckets(buckets);
        }
        let (moves, bucket) = if subtable.buckets > 0 && !within { in_place() } else { None }?;
        Some(TablePlan::InPlace { moves, bucket })
    }

    fn insert(
        &mut self,
        index: usize,
        tag: u32,
        key: &[u8],
        value: NewValue<'_>,
        write_time_ns: u64,
    ) -> Result<(), StoreError> {
        let mut txn = AllocTxn::default();
        let Some(plan) = self.plan_insert(&mut txn, index, tag, key.len() as u64, value) else {
            txn.rollback(&mut self.heap);
            return Err(self.pool_full(charge(key.len() as u64, value.len())));
        };
        // Nothing below can fail.
        if let Some(at) = plan.key_at {
            self.memory.modify(at, key.len()).copy_from_slice(key);
        }
        let occupant = self.write_value(tag, write_time_ns, key, value, plan.key_at, plan.value_at).encode();
        self.place(index, tag, plan.table, &occupant);
        self.memory.commit();
        self.pairs[index] += 1;
        Ok(())
    }

    /// Writes a new pair's `occupant` into subtable `index` as `table` planned.
    fn place(&mut self, index: usize, tag: u32, table: TablePlan, occupant: &[u8; OCCUPANT_BYTES]) {
        let subtable = self.subtables[index];
        match table {
            TablePlan::InPlace { moves, bucket } => {
                for mv in moves {
                    self.apply_move(subtable, mv);
                }
                self.write_occupant(subtable, bucket, occupant);
                let home = subtable.home(tag);
                let distance = subtable.distance(home, bucket);
                self.update_hop(subtable, home, |hop| hop | (1 << distance));
            }
            TablePlan::Rewrite { grown, image } => self.rewrite(index, grown, &image, occupant),
        }
    }

    /// Empties `bucket` of subtable `index`, whose pair has hash part `tag` (its allocations
    /// already freed).
    fn remove_occupant(&mut self, index: usize, tag: u32, bucket: u64) {
        let subtable = self.subtables[index];
        let home = subtable.home(tag);
        let distance = subtable.distance(home, bucket);
        self.write_occupant(subtable, bucket, &[0; OCCUPANT_BYTES]);
        self.update_hop(subtable, home, |hop| hop & !(1 << distance));
        self.pairs[index] -= 1;
    }

    /// Writes subtable `index` anew at `grown` from `image` (its old pairs and the new one), points
    /// its directory entry there and gives the old buckets back to the allocator.
    fn rewrite(&mut self, index: usize, grown: Subtable, image: &Image, new_pair: &[u8; OCCUPANT_BYTES]) {
        let old = self.subtables[index];
        // A bounded copy (a subtable is at most 1 MiB): the old buckets are read while the new
        // ones are written, both in pool memory.
        let old_bytes = if old.buckets > 0 {
            self.memory.bytes()[layout::index(old.offset)..layout::index(old.offset + old.bytes())].to_vec()
        } else {
            Vec::new()
        };
        let local = Subtable { offset: 0, buckets: old.buckets };
        let entries = self.memory.modify(grown.offset, layout::index(grown.bytes()));
        for (bucket, entry) in entries.chunks_exact_mut(ENTRY_BYTES as usize).enumerate() {
            let bucket = bucket as u64;
            entry[HOP_OFFSET..HOP_OFFSET + 4].copy_from_slice(&image.hop_word(bucket).to_le_bytes());
            let occupant = &mut entry[OCCUPANT_OFFSET..];
            match image.source(bucket) {
                None => occupant.fill(0),
                Some(Source::Old(from)) => occupant.copy_from_slice(local.occupant_bytes(&old_bytes, from)),
                Some(Source::New) => occupant.copy_from_slice(new_pair),
            }
        }
        let entry = DirectoryEntry { offset: grown.offset, buckets: grown.buckets }.encode(index as u64);
        let at = self.header.directory_entry_offset(index as u64);
        self.memory.modify(at, DIRECTORY_ENTRY_BYTES as usize).copy_from_slice(&entry);
        if old.buckets > 0 {
            self.heap.free_segment(old.offset, old.bytes());
            self.memory.release(old.offset, old.bytes());
        }
        self.subtables[index] = grown;
    }

    /// Copies a new value's bytes to its out-of-line place (a placed one is there already) and
    /// builds its pair's occupant.
    fn write_value(
        &mut self,
        tag: u32,
        write_time_ns: u64,
        key: &[u8],
        value: NewValue<'_>,
        key_at: Option<u64>,
        value_at: Option<u64>,
    ) -> Occupant {
        match value {
            NewValue::Bytes(bytes) => {
                if let Some(at) = value_at {
                    self.memory.modify(at, bytes.len()).copy_from_slice(bytes);
                }
                Occupant::new(tag, write_time_ns, key, bytes, key_at, value_at)
            }
            NewValue::Placed { at, len } => Occupant::placed(tag, write_time_ns, key, len, key_at, at),
        }
    }

    /// Gives an object's space back to the allocator and tells the memory it is free (a
    /// checkpoint need not copy the pages wholly inside it once this transaction is durable).
    fn free_object(&mut self, at: u64, len: u64) {
        self.heap.free(at, len);
        self.memory.freed(at, len);
    }

    fn overwrite(
        &mut self,
        index: usize,
        bucket: u64,
        old: Occupant,
        key: &[u8],
        value: NewValue<'_>,
        write_time_ns: u64,
    ) -> Result<(), StoreError> {
        let placement = Placement::of(key.len() as u64, value.len());
        let mut txn = AllocTxn::default();
        // Frees first, so the new copies can reuse the space. The key itself is unchanged, so an
        // out-of-line key that stays out of line keeps its copy.
        let mut freed = [None, None];
        let mut key_at = old.key_at();
        if let (Some(at), true) = (key_at, placement.key_inline) {
            txn.free(&mut self.heap, at, key.len() as u64);
            freed[0] = Some((at, key.len() as u64));
            key_at = None;
        }
        // A value of the same size class (or extent size) is overwritten in place; a placed one
        // brings its own place.
        let old_value_len = u64::from(old.value_len);
        let mut value_at = old.value_at();
        if let Some(at) = value_at {
            let reusable = self.heap.backing(old_value_len) == self.heap.backing(value.len());
            if placement.value_inline || !reusable || value.placed_at().is_some() {
                txn.free(&mut self.heap, at, old_value_len);
                freed[1] = Some((at, old_value_len));
                value_at = None;
            }
        }
        let key_moves_out = !placement.key_inline && key_at.is_none();
        if key_moves_out {
            key_at = txn.alloc(&mut self.heap, key.len() as u64);
        }
        if !placement.value_inline && value_at.is_none() {
            value_at = value.placed_at().or_else(|| txn.alloc(&mut self.heap, value.len()));
        }
        if key_at.is_none() == placement.key_inline && value_at.is_none() == placement.value_inline {
            // Nothing below can fail.
            if key_moves_out {
                let at = key_at.expect("allocated just above");
                self.memory.modify(at, key.len()).copy_from_slice(key);
            }
            let occupant = self.write_value(old.tag, write_time_ns, key, value, key_at, value_at);
            self.write_occupant(self.subtables[index], bucket, &occupant.encode());
            for (at, len) in freed.into_iter().flatten() {
                self.memory.freed(at, len);
            }
            self.memory.commit();
            return Ok(());
        }
        txn.rollback(&mut self.heap);
        let (old_charge, new_charge) =
            (charge(u64::from(old.key_len), old_value_len), charge(key.len() as u64, value.len()));
        Err(self.pool_full(new_charge.saturating_sub(old_charge)))
    }
}

impl<M: PoolMemory> HStore<M> {
    /// A put of bytes or of a staged value. A placed value that this refuses stays allocated:
    /// the caller frees it.
    fn put_value(
        &mut self,
        key: &[u8],
        value: NewValue<'_>,
        mode: PutMode,
        write_time_ns: u64,
    ) -> Result<PutOutcome, StoreError> {
        if key.len() as u64 > KEY_BYTES_MAX {
            return Err(StoreError::KeyTooLarge { bytes: key.len() as u64, max: KEY_BYTES_MAX });
        }
        if value.len() > VALUE_BYTES_MAX {
            return Err(StoreError::ValueTooLarge { bytes: value.len(), max: VALUE_BYTES_MAX });
        }
        let (index, tag, found) = self.locate(key);
        match (found, mode) {
            (Some(_), PutMode::CreateOnly) => return Err(StoreError::KeyExists),
            (None, PutMode::UpdateOnly) => return Err(StoreError::KeyNotFound),
            _ => {}
        }
        let new_charge = charge(key.len() as u64, value.len());
        match found {
            Some(bucket) => {
                let old = self.subtables[index].occupant(self.memory.bytes(), bucket);
                let used_after = self.reserve(charge(u64::from(old.key_len), u64::from(old.value_len)), new_charge)?;
                self.overwrite(index, bucket, old, key, value, write_time_ns)?;
                self.used_bytes = used_after;
                Ok(PutOutcome::Replaced)
            }
            None => {
                let used_after = self.reserve(0, new_charge)?;
                self.insert(index, tag, key, value, write_time_ns)?;
                self.used_bytes = used_after;
                self.objects += 1;
                Ok(PutOutcome::Inserted)
            }
        }
    }
}

impl<M: PoolMemory> Store for HStore<M> {
    fn put(&mut self, key: &[u8], value: &[u8], mode: PutMode, write_time_ns: u64) -> Result<PutOutcome, StoreError> {
        self.put_value(key, NewValue::Bytes(value), mode, write_time_ns)
    }

    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        let (index, _, bucket) = self.locate(key);
        let subtable = self.subtables[index];
        let bytes = self.memory.bytes();
        let occupant = subtable.occupant(bytes, bucket?);
        subtable.pair(bytes, bucket?, &occupant).map(|(_, value)| value)
    }

    fn stored_key(&self, key: &[u8]) -> Option<&[u8]> {
        let (index, _, bucket) = self.locate(key);
        let subtable = self.subtables[index];
        let bytes = self.memory.bytes();
        let occupant = subtable.occupant(bytes, bucket?);
        subtable.pair(bytes, bucket?, &occupant).map(|(key, _)| key)
    }

    fn erase(&mut self, key: &[u8]) -> Result<(), StoreError> {
        let (index, tag, found) = self.locate(key);
        let bucket = found.ok_or(StoreError::KeyNotFound)?;
        let subtable = self.subtables[index];
        let occupant = subtable.occupant(self.memory.bytes(), bucket);
        if let Some(at) = occupant.key_at() {
            self.free_object(at, u64::from(occupant.key_len));
        }
        if let Some(at) = occupant.value_at() {
            self.free_object(at, u64::from(occupant.value_len));
        }
        self.remove_occupant(index, tag, bucket);
        self.memory.commit();
        self.objects -= 1;
        self.used_bytes -= charge(u64::from(occupant.key_len), u64::from(occupant.value_len));
        Ok(())
    }

    fn count(&self) -> u64 {
        self.objects
    }

    fn for_each_key(&self, visit: &mut dyn FnMut(&[u8])) {
        let bytes = self.memory.bytes();
        for subtable in &self.subtables {
            for bucket in 0..subtable.buckets {
                if subtable.is_used(bytes, bucket) {
                    let occupant = subtable.occupant(bytes, bucket);
                    if occupant.internal {
                        continue;
                    }
                    if let Some((key, _)) = subtable.pair(bytes, bucket, &occupant) {
                        visit(key);
                    }
                }
            }
        }
    }

    /// Visits the keys of up to `homes` home buckets. A cursor is a position in hash order: a
    /// subtable, and in it the lowest hash part not yet visited. Buckets are in hash order inside
    /// a subtable, and a growth keeps that order (it only rescales it) and never moves a key to
    /// another subtable, so every key present for the whole walk is visited at least once, however
    /// the table grows between calls (the guarantee of Redis's `SCAN`); a key may be visited
    /// twice, by a call before and one after a growth.
    fn scan<'s>(&'s self, cursor: u64, homes: u64, visit: &mut dyn FnMut(&'s [u8])) -> u64 {
        let (mut index, mut from) = scan_position(cursor);
        let bytes = self.memory.bytes();
        let mut homes_left = homes.max(1);
        while let Some(subtable) = self.subtables.get(layout::index(index)) {
            // A subtable holding nothing is passed over as no work: a large pool's many subtables
            // would otherwise make the walk of a nearly empty store long.
            if self.pairs[layout::index(index)] > 0 {
                let mut home = subtable.home(from);
                while home < subtable.buckets {
                    if homes_left == 0 {
                        // The lowest hash part whose home is `home`: every key below it was visited.
                        let next = (home << 32).div_ceil(subtable.buckets);
                        return (index << 32) | next;
                    }
                    let mut hop = subtable.hop(bytes, home);
                    while hop != 0 {
                        let bucket = subtable.forward(home, u64::from(hop.trailing_zeros()));
                        hop &= hop - 1;
                        let occupant = subtable.occupant(bytes, bucket);
                        if occupant.internal {
                            continue;
                        }
                        if let Some((key, _)) = subtable.pair(bytes, bucket, &occupant) {
                            visit(key);
                        }
                    }
                    homes_left -= 1;
                    home += 1;
                }
            }
            index += 1;
            from = 0;
        }
        0
    }

    fn attributes(&self, key: &[u8]) -> Option<ValueAttributes> {
        let (index, _, bucket) = self.locate(key);
        let subtable = self.subtables[index];
        let bytes = self.memory.bytes();
        let occupant = subtable.occupant(bytes, bucket?);
        let (_, value) = subtable.pair(bytes, bucket?, &occupant)?;
        Some(ValueAttributes {
            length: u64::from(occupant.value_len),
            crc32: crate::checksum::crc32(value),
            write_time_ns: occupant.write_time_ns,
        })
    }

    fn capacity_bytes(&self) -> u64 {
        self.header.capacity_bytes
    }

    fn used_bytes(&self) -> u64 {
        self.used_bytes + self.staged_bytes
    }

    /// Exact: what the region's allocators have handed out. Free extents are not counted (free
    /// slots are, inside the slabs that hold them whole); on the lazily zeroed backings a part of
    /// the region never touched costs no memory, and a subtable a growth left behind is released
    /// (on `ssd`) when the growth commits, but a freed value may stay resident until reused.
    fn memory_usage(&self) -> MemoryUsage {
        let table_buckets = self.subtables.iter().map(|subtable| subtable.buckets).sum::<u64>();
        MemoryUsage {
            table_buckets,
            table_bytes: table_buckets * ENTRY_BYTES,
            slab_bytes: self.heap.slab_bytes(),
            large_bytes: self.heap.large_bytes(),
            other_bytes: HEADER_BYTES + self.header.directory_bytes(),
        }
    }

    fn put_footprint(&self, key_len: u64, value_len: u64) -> WriteFootprint {
        Self::put_footprint_for(key_len, value_len)
    }

    /// An overwrite writes the key (when it moves out of line), the value and the occupant.
    fn update_footprint(&self, key_len: u64, value_len: u64) -> WriteFootprint {
        WriteFootprint { bytes: key_len + value_len + OCCUPANT_BYTES as u64, ranges: 3 }
    }

    fn erase_footprint(&self) -> WriteFootprint {
        WriteFootprint { bytes: OCCUPANT_BYTES as u64 + 4, ranges: 2 }
    }

    fn value_location(&self, key: &[u8]) -> Option<ValueLocation> {
        let (index, _, bucket) = self.locate(key);
        let subtable = self.subtables[index];
        let bytes = self.memory.bytes();
        let occupant = subtable.occupant(bytes, bucket?);
        let (_, value) = subtable.pair(bytes, bucket?, &occupant)?;
        // The value is a slice of the region: its place is its distance from the region's start.
        let offset = value.as_ptr() as u64 - bytes.as_ptr() as u64;
        Some(ValueLocation { offset, len: value.len() as u64, stable: occupant.value_at().is_some() })
    }

    fn allocate_scratch(&mut self, len: u64) -> Option<u64> {
        self.heap.alloc_pages(len, page_bytes())
    }

    fn free_scratch(&mut self, offset: u64, len: u64) {
        self.heap.free_pages(offset, len, page_bytes());
        self.memory.freed(offset, len);
    }

    fn write_scratch(&mut self, offset: u64, bytes: &[u8]) -> bool {
        match self.memory.scratch_mut(offset, bytes.len()) {
            Some(scratch) => {
                scratch.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }

    fn region_bytes(&self, offset: u64, len: u64) -> Option<&[u8]> {
        let start = usize::try_from(offset).ok()?;
        self.memory.bytes().get(start..start.checked_add(usize::try_from(len).ok()?)?)
    }

    fn copy_within_region(&mut self, copies: &[RegionCopy]) {
        let mut bytes = Vec::new();
        for copy in copies {
            let (from, len) = (layout::index(copy.from), layout::index(copy.len));
            bytes.clear();
            bytes.extend_from_slice(&self.memory.bytes()[from..from + len]);
            self.memory.modify(copy.to, len).copy_from_slice(&bytes);
        }
        self.memory.commit();
    }

    fn keep_scratch(&mut self, id: u64, at: u64, len: u64, write_time_ns: u64) -> Result<(), StoreError> {
        let key = id.to_le_bytes();
        // The allocation is the whole pages `allocate_scratch` gave, and is recorded as such.
        let pages = layout::align_up(len.max(1), page_bytes());
        let recorded =
            u32::try_from(pages).map_err(|_| StoreError::ValueTooLarge { bytes: len, max: VALUE_BYTES_MAX })?;
        let len = pages;
        let (index, tag, found) = self.locate_among(&key, true);
        if found.is_some() {
            return Err(StoreError::KeyExists);
        }
        let needed = charge(key.len() as u64, len);
        let used_after = self.reserve(0, needed)?;
        let mut txn = AllocTxn::default();
        let Some(table) = self.plan_table(&mut txn, index, tag) else {
            txn.rollback(&mut self.heap);
            return Err(self.pool_full(needed));
        };
        // Its bytes were written outside the engine (scratch memory): logged with its record.
        self.memory.modify(at, layout::index(len));
        let occupant = Occupant::allocation(tag, write_time_ns, id, at, recorded).encode();
        self.place(index, tag, table, &occupant);
        self.memory.commit();
        self.pairs[index] += 1;
        self.used_bytes = used_after;
        self.allocations.insert(at, Allocation { id, len, pages: true });
        Ok(())
    }

    fn release_kept(&mut self, id: u64) -> Result<(), StoreError> {
        let key = id.to_le_bytes();
        let (index, tag, found) = self.locate_among(&key, true);
        let bucket = found.ok_or(StoreError::KeyNotFound)?;
        let occupant = self.subtables[index].occupant(self.memory.bytes(), bucket);
        let at = occupant.value_at().expect("an allocation lies out of line");
        let len = u64::from(occupant.value_len);
        if occupant.pages {
            self.heap.free_pages(at, len, page_bytes());
            self.memory.freed(at, len);
        } else {
            self.free_object(at, len);
        }
        self.remove_occupant(index, tag, bucket);
        self.memory.commit();
        self.used_bytes -= charge(key.len() as u64, len);
        self.allocations.remove(&at);
        Ok(())
    }

    fn kept_containing(&self, offset: u64, len: u64) -> Option<KeptAllocation> {
        let (&at, allocation) = self.allocations.range(..=offset).next_back()?;
        let inside = offset.checked_add(len).is_some_and(|end| end <= at + allocation.len);
        inside.then_some(KeptAllocation { id: allocation.id, offset: at, len: allocation.len })
    }

    /// A value that lies out of line is staged in the heap, where it will stay: the commit
    /// only points the key's entry at it. A shorter one is staged in process memory.
    fn stage_value(&mut self, key_len: u64, len: u64) -> Result<StagedValue, StoreError> {
        if len > VALUE_BYTES_MAX {
            return Err(StoreError::ValueTooLarge { bytes: len, max: VALUE_BYTES_MAX });
        }
        self.reserve(0, charge(key_len, len))?;
        let staged = match Placement::of(key_len, len).value_inline {
            true => StagedValue::owned(len),
            false => {
                let offset = self.heap.alloc(len).ok_or_else(|| self.pool_full(charge(key_len, len)))?;
                StagedValue::Region { offset, len }
            }
        };
        self.staged_bytes += staged_charge(len);
        Ok(staged)
    }

    fn write_staged(&mut self, staged: &mut StagedValue, offset: u64, bytes: &[u8]) {
        match staged {
            // A piece of no bytes changes nothing, and logs nothing.
            StagedValue::Region { .. } if bytes.is_empty() => {}
            StagedValue::Region { offset: at, len } => {
                assert!(offset + bytes.len() as u64 <= *len, "pieces lie inside the staged value");
                self.memory.modify(*at + offset, bytes.len()).copy_from_slice(bytes);
                // Nobody waits for a piece until the value's commit, whose record follows it.
                self.memory.commit_with_next();
            }
            StagedValue::Owned { .. } => {
                staged.write_owned(offset, bytes);
            }
        }
    }

    /// A piece of a value staged in the heap is lent where the backing lends memory no pair owns
    /// ([`PoolMemory::scratch_mut`]): the staged bytes are such memory until the commit.
    fn staged_piece_mut(&mut self, staged: &StagedValue, offset: u64, len: usize) -> Option<&mut [u8]> {
        let StagedValue::Region { offset: at, len: value_len } = *staged else { return None };
        let end = offset.checked_add(len as u64)?;
        if end > value_len {
            return None;
        }
        self.memory.scratch_mut(at + offset, len)
    }

    /// The bytes are in place already: declaring them after they were written is what a backing
    /// that lends memory needs (the logged one notes the range and copies it into the log at the
    /// commit), and a backing whose declaration must come first (an undo log) lends none.
    fn write_staged_in_place(&mut self, staged: &mut StagedValue, offset: u64, len: u64) {
        let StagedValue::Region { offset: at, len: value_len } = *staged else {
            unreachable!("a value staged in process memory lends no piece")
        };
        if len == 0 {
            return;
        }
        assert!(offset + len <= value_len, "pieces lie inside the staged value");
        let len = usize::try_from(len).expect("a piece fits the address space");
        self.memory.modify(at + offset, len);
        // Nobody waits for a piece until the value's commit, whose record follows it.
        self.memory.commit_with_next();
    }

    fn commit_staged(
        &mut self,
        key: &[u8],
        staged: StagedValue,
        mode: PutMode,
        write_time_ns: u64,
    ) -> Result<PutOutcome, StoreError> {
        // The pair is charged instead, by the put.
        self.staged_bytes -= staged_charge(staged.len());
        match staged {
            StagedValue::Region { offset, len } => {
                let outcome = self.put_value(key, NewValue::Placed { at: offset, len }, mode, write_time_ns);
                if outcome.is_err() {
                    self.free_object(offset, len);
                }
                outcome
            }
            owned @ StagedValue::Owned { .. } => {
                let bytes = owned.into_owned_bytes().expect("an owned staged value");
                self.put(key, &bytes, mode, write_time_ns)
            }
        }
    }

    fn discard_staged(&mut self, staged: StagedValue) {
        self.staged_bytes -= staged_charge(staged.len());
        if let StagedValue::Region { offset, len } = staged {
            self.free_object(offset, len);
        }
    }

    /// An out-of-line value is changed in place, with its occupant's write time; a value inside
    /// its entry is put anew.
    fn write_value_range(
        &mut self,
        key: &[u8],
        offset: u64,
        bytes: &[u8],
        write_time_ns: u64,
    ) -> Result<(), StoreError> {
        let (index, _, found) = self.locate(key);
        let bucket = found.ok_or(StoreError::KeyNotFound)?;
        let subtable = self.subtables[index];
        let mut occupant = subtable.occupant(self.memory.bytes(), bucket);
        let value_len = u64::from(occupant.value_len);
        let end = offset.checked_add(bytes.len() as u64).filter(|end| *end <= value_len);
        if end.is_none() {
            return Err(StoreError::RangeOutside { offset, len: bytes.len() as u64, value_len });
        }
        let Some(at) = occupant.value_at() else {
            let (_, value) = subtable.pair(self.memory.bytes(), bucket, &occupant).expect("a present pair");
            let mut new = value.to_vec();
            new[offset as usize..offset as usize + bytes.len()].copy_from_slice(bytes);
            return self.put(key, &new, PutMode::UpdateOnly, write_time_ns).map(|_| ());
        };
        self.memory.modify(at + offset, bytes.len()).copy_from_slice(bytes);
        occupant.write_time_ns = write_time_ns;
        self.write_occupant(subtable, bucket, &occupant.encode());
        self.memory.commit();
        Ok(())
    }

    fn value_range_footprint(&self, key_len: u64, value_len: u64, len: u64) -> WriteFootprint {
        let in_place = WriteFootprint { bytes: len + OCCUPANT_BYTES as u64, ranges: 2 };
        let rewritten = self.update_footprint(key_len, value_len);
        WriteFootprint { bytes: in_place.bytes.max(rewritten.bytes), ranges: in_place.ranges.max(rewritten.ranges) }
    }

    fn begin_transaction(&mut self) -> bool {
        self.memory.begin_group()
    }

    fn end_transaction(&mut self) {
        self.memory.end_group();
    }
}
