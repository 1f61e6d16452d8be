//! `hstore`: MCAS's persistent hopscotch hash engine (MCAS section 3.2), living entirely inside one
//! region of pool memory.
//!
//! # Format
//!
//! The region starts with a 4 KiB header (magic, format version, CRC-32 of the rest of the page,
//! the pool's capacity, its SipHash key, slab size, and the table's segment directory); the rest
//! is the heap. The byte-level layout is in [`layout`](self::layout)'s documentation and offset
//! constants. Everything persistent is an offset from the region's start, never a pointer.
//!
//! The primary index is a hopscotch hash table of 64-byte entries (one cache line each): a hop
//! word (63-bit neighbourhood bitmap plus an in-use bit), the key's hash, the write time, the key
//! and value lengths and a 28-byte payload that holds the key and value themselves when they fit,
//! or the offsets of out-of-line copies in the heap. The table grows by segments, each doubling it
//! (TBB-style addressing: the high bit of a bucket index picks the segment); a growth moves each
//! pair by zero or exactly one old table length and never needs a displacement (see
//! [`table`](self::table)).
//!
//! # Allocation and the reconstituting allocator
//!
//! Table segments and values over the small-object limit get extents from a region allocator
//! (best fit, from the high end of the heap); keys and values up to the limit get slots in slabs,
//! one size class per slab, slabs packed from the low end. All allocator state is volatile: `open`
//! rebuilds it from the table, as MCAS does, because every allocation is referenced by exactly one
//! entry or by the segment directory. Nothing is persisted per allocation, so there is nothing to
//! keep consistent with the table and no allocator state to recover.
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
//! so it is larger than the pool: [`HStore::region_bytes_for`] gives room for the largest table the
//! accounting allows (`size_bytes / 64` pairs at 7/8 load, rounded up to the doubling schedule:
//! between 1.14 and 2.29 times the pool's size), plus 1.5 times the pool's size for keys and values
//! (size-class rounding costs at most a quarter plus 16 bytes per object, which the 64 bytes
//! charged per pair cover), plus one slab per size class. Untouched parts of a region cost no
//! physical memory on the `memory` and `ssd` backings (both are lazily zeroed).
//!
//! With that rule, a pool that is only filled never runs out of room before its accounting does.
//! Erasures and overwrites can fragment the heap; if a put that the accounting admits finds no
//! space, it is refused with `PoolFull` as well, before anything is modified, and the error's
//! `free` (the accounted free bytes) is then at least its `needed`. Like any non-moving allocator
//! this cannot be ruled out; the half-pool of slack makes it rare.
//!
//! # Limits and known gaps
//!
//! - Keys are at most `u32::MAX` bytes (longer ones are refused as `PoolFull`).
//! - A growth rewrites the whole table in one transaction, which for a large table is a long
//!   operation and a large write-ahead-log record; splitting it into bounded steps is future work.
//! - The table never shrinks (as in MCAS).

mod allocator;
mod check;
mod hash;
mod layout;
mod table;
#[cfg(test)]
mod tests;

use std::fmt;

use allocator::{AllocTxn, Heap};
pub use check::CheckReport;
use layout::{
    index, read_u64, small_object_bytes_max, Geometry, Header, Occupant, Placement, BUCKETS_LOG2_MAX, ENTRY_BYTES,
    GRAIN_BYTES, HEADER_BYTES, OCCUPANT_BYTES, OCCUPANT_OFFSET, REGION_BYTES_OFFSET, SEGMENTS_MAX, USED_BIT,
};
use table::{plan_insert, Image, Move, Overlay, Source, Table};

use crate::persistence::PoolMemory;
use crate::store::{PoolSpec, PutMode, PutOutcome, Store, StoreError, ValueAttributes, ENTRY_OVERHEAD_BYTES};

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
    /// Mirror of the persistent header; rewritten (through `modify`) only when the table grows.
    header: Header,
    table: Table,
    /// Volatile allocator state, rebuilt from the table by `open`.
    heap: Heap,
    objects: u64,
    used_bytes: u64,
}

impl<M: PoolMemory> fmt::Debug for HStore<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HStore")
            .field("objects", &self.objects)
            .field("used_bytes", &self.used_bytes)
            .field("capacity_bytes", &self.header.capacity_bytes)
            .field("region_bytes", &self.header.region_bytes)
            .field("buckets", &self.table.buckets())
            .finish_non_exhaustive()
    }
}

fn charge(key_len: u64, value_len: u64) -> u64 {
    key_len + value_len + ENTRY_OVERHEAD_BYTES
}

/// How the table takes a new pair.
enum TablePlan {
    /// Into the existing table, after these displacements.
    InPlace { moves: Vec<Move>, bucket: u64 },
    /// By writing out a grown table (with the new pair already placed in its image).
    Grow { image: Image, table: Table },
}

/// Everything an insert decided before writing.
struct InsertPlan {
    key_at: Option<u64>,
    value_at: Option<u64>,
    table: TablePlan,
}

impl<M: PoolMemory> HStore<M> {
    /// Bytes of pool memory a pool of shape `spec` needs: see "Capacity" in the module
    /// documentation. Callers allocate a region of (at least) this size and pass it to `create`.
    pub fn region_bytes_for(spec: PoolSpec) -> Result<u64, CreateError> {
        Geometry::of(spec).map(|g| g.region_bytes).ok_or(CreateError::TooLarge { size_bytes: spec.size_bytes })
    }

    /// Formats `memory` as an empty store for a pool of shape `spec`. Whatever the region held is
    /// ignored; its length must be at least [`HStore::region_bytes_for`]`(spec)`, and any extra
    /// bytes become heap.
    pub fn create(memory: M, spec: PoolSpec) -> Result<Self, CreateError> {
        Self::create_with_hash_key(memory, spec, hash::random_hash_key(), Zeroed::Unknown)
    }

    /// [`HStore::create`] over memory every byte of which is known to be zero (a fresh memfd):
    /// the empty table is not written, so creating a pool sized for millions of pairs writes (and
    /// logs) only the header page and touches no memory for the table until pairs arrive.
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
        let segment_bytes = (1u64 << geometry.base_buckets_log2) * ENTRY_BYTES;
        let segment =
            heap.alloc_segment(segment_bytes).expect("a region of region_bytes_for(spec) has room for segment 0");
        let header = Header {
            region_bytes: actual,
            capacity_bytes: spec.size_bytes,
            expected_objects: spec.expected_objects,
            hash_key,
            slab_bytes: geometry.slab_bytes,
            base_buckets_log2: geometry.base_buckets_log2,
            segments: vec![segment],
        };
        memory.modify(0, index(HEADER_BYTES)).copy_from_slice(&header.encode());
        if zeroed == Zeroed::Unknown {
            memory.modify(segment, index(segment_bytes)).fill(0);
        }
        memory.commit();
        let table = Table::new(header.base_buckets_log2, header.segments.clone());
        Ok(HStore { memory, header, table, heap, objects: 0, used_bytes: 0 })
    }

    /// Re-attaches to a region formatted by `create`: validates the header (magic, version,
    /// checksum, fields), walks the table to check every entry, and rebuilds the volatile
    /// allocator and the counts from what the table references. Writes nothing.
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
        let table = Table::new(header.base_buckets_log2, header.segments.clone());
        let mut problems = Vec::new();
        let walk = check::walk(bytes, &header, &table, &mut problems);
        if let Some(problem) = problems.into_iter().next() {
            return Err(OpenError::Corrupt { offset: problem.offset, detail: problem.detail });
        }
        Ok(HStore { memory, header, table, heap: walk.heap, objects: walk.objects, used_bytes: walk.used_bytes })
    }

    /// Checks the whole region (what `ferrite check` runs): the header, hop bitmaps against entry
    /// positions, that every key is found by a lookup, that allocations lie inside the heap and
    /// overlap nothing, and that the counts, used bytes and volatile allocator state equal what a
    /// fresh walk of the table implies. Returns every problem found (up to a hundred).
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
        let walk = check::walk(bytes, &self.header, &self.table, &mut problems);
        let mut problems: Vec<String> = problems.iter().map(ToString::to_string).collect();
        if problems.is_empty() {
            if walk.objects != self.objects {
                problems.push(format!("the table holds {} pairs but the store counts {}", walk.objects, self.objects));
            }
            if walk.used_bytes != self.used_bytes {
                problems.push(format!(
                    "the table's pairs take {} bytes but the store counts {}",
                    walk.used_bytes, self.used_bytes
                ));
            }
            if walk.heap != self.heap {
                problems.push(format!(
                    "the allocator state differs from the one the table implies ({} free bytes in {} extents and {} \
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
            buckets: self.table.buckets(),
            segments: self.table.segments().len(),
            out_of_line_objects: walk.out_of_line_objects,
            slabs: self.heap.slabs(),
            heap_free_bytes: self.heap.free_bytes(),
            heap_free_extents: self.heap.free_extents(),
        })
    }

    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// Gives the region back, e.g. to checkpoint it or to `open` it again.
    pub fn into_memory(self) -> M {
        self.memory
    }

    fn pool_full(&self, needed: u64) -> StoreError {
        StoreError::PoolFull {
            needed,
            free: self.header.capacity_bytes.saturating_sub(self.used_bytes),
            capacity: self.header.capacity_bytes,
        }
    }

    /// Used bytes after replacing a charge of `old` with one of `new`, or `PoolFull` if that grows
    /// past the capacity (shrinking always passes, as in mapstore).
    fn reserve(&self, old: u64, new: u64) -> Result<u64, StoreError> {
        let used_after = (self.used_bytes - old).saturating_add(new);
        if new > old && used_after > self.header.capacity_bytes {
            return Err(self.pool_full(new - old));
        }
        Ok(used_after)
    }

    /// Read-modify-write of one hop word.
    fn update_word(&mut self, bucket: u64, change: impl FnOnce(u64) -> u64) {
        let at = self.table.entry_offset(bucket) + layout::HOP_WORD_OFFSET as u64;
        let word = read_u64(self.memory.bytes(), index(at));
        self.memory.modify(at, 8).copy_from_slice(&change(word).to_le_bytes());
    }

    fn write_occupant(&mut self, bucket: u64, occupant: &[u8; OCCUPANT_BYTES]) {
        let at = self.table.entry_offset(bucket) + OCCUPANT_OFFSET as u64;
        self.memory.modify(at, OCCUPANT_BYTES).copy_from_slice(occupant);
    }

    /// One hopscotch displacement: the pair in `mv.from` moves to the free `mv.to`, and its home's
    /// bitmap follows.
    fn apply_move(&mut self, mv: Move) {
        let from = index(self.table.entry_offset(mv.from)) + OCCUPANT_OFFSET;
        let occupant: [u8; OCCUPANT_BYTES] =
            self.memory.bytes()[from..from + OCCUPANT_BYTES].try_into().expect("56 bytes");
        self.write_occupant(mv.to, &occupant);
        self.update_word(mv.to, |word| word | USED_BIT);
        self.write_occupant(mv.from, &[0; OCCUPANT_BYTES]);
        self.update_word(mv.from, |word| word & !USED_BIT);
        let (old, new) = (self.table.distance(mv.home, mv.from), self.table.distance(mv.home, mv.to));
        self.update_word(mv.home, |word| (word & !(1 << old)) | (1 << new));
    }

    fn write_header(&mut self) {
        self.memory.modify(0, index(HEADER_BYTES)).copy_from_slice(&self.header.encode());
    }

    /// Decides where a new pair goes and allocates what it needs, writing nothing. `None` (with
    /// `txn` holding what was allocated, for the caller to undo) if the region has no room.
    fn plan_insert(&mut self, txn: &mut AllocTxn, hash: u64, key_len: u64, value_len: u64) -> Option<InsertPlan> {
        let placement = Placement::of(key_len, value_len);
        let key_at = if placement.key_inline { None } else { Some(txn.alloc(&mut self.heap, key_len)?) };
        let value_at = if placement.value_inline { None } else { Some(txn.alloc(&mut self.heap, value_len)?) };
        let buckets = self.table.buckets();
        let within_load = (self.objects + 1) * layout::LOAD_DENOMINATOR <= buckets * layout::LOAD_NUMERATOR;
        let home = self.table.home(hash);
        let bytes = self.memory.bytes();
        let in_place = || plan_insert(&mut Overlay::new(bytes, &self.table), home);
        if within_load {
            if let Some((moves, bucket)) = in_place() {
                return Some(InsertPlan { key_at, value_at, table: TablePlan::InPlace { moves, bucket } });
            }
        }
        let mut growth = AllocTxn::default();
        if let Some((image, table)) = plan_growth(bytes, &self.table, &mut self.heap, &mut growth, hash) {
            txn.absorb(growth);
            return Some(InsertPlan { key_at, value_at, table: TablePlan::Grow { image, table } });
        }
        // No room to grow: a table past its load limit can still take the pair if an entry is
        // free nearby, which beats refusing a put the accounting admits.
        growth.rollback(&mut self.heap);
        let (moves, bucket) = if within_load { None } else { in_place() }?;
        Some(InsertPlan { key_at, value_at, table: TablePlan::InPlace { moves, bucket } })
    }

    fn insert(&mut self, hash: u64, key: &[u8], value: &[u8], write_time_ns: u64) -> Result<(), StoreError> {
        let mut txn = AllocTxn::default();
        let Some(plan) = self.plan_insert(&mut txn, hash, key.len() as u64, value.len() as u64) else {
            txn.rollback(&mut self.heap);
            return Err(self.pool_full(charge(key.len() as u64, value.len() as u64)));
        };
        // Nothing below can fail.
        if let Some(at) = plan.key_at {
            self.memory.modify(at, key.len()).copy_from_slice(key);
        }
        if let Some(at) = plan.value_at {
            self.memory.modify(at, value.len()).copy_from_slice(value);
        }
        let occupant = Occupant::new(hash, write_time_ns, key, value, plan.key_at, plan.value_at);
        match plan.table {
            TablePlan::InPlace { moves, bucket } => {
                for mv in moves {
                    self.apply_move(mv);
                }
                self.write_occupant(bucket, &occupant.encode());
                let home = self.table.home(hash);
                let distance = self.table.distance(home, bucket);
                self.update_word(bucket, |word| word | USED_BIT);
                self.update_word(home, |word| word | (1 << distance));
            }
            TablePlan::Grow { image, table } => self.write_growth(&image, table, &occupant),
        }
        self.memory.commit();
        Ok(())
    }

    /// Writes out a grown table: every segment, old and new, rewritten whole from the image (one
    /// declared range per segment), then the header with the new segment directory.
    fn write_growth(&mut self, image: &Image, grown: Table, new_pair: &Occupant) {
        let old = table::snapshot_occupants(self.memory.bytes(), &self.table);
        let new_pair = new_pair.encode();
        let base_log2 = self.header.base_buckets_log2;
        for (k, segment) in grown.segments().iter().enumerate() {
            let first = Table::segment_first_bucket(base_log2, k);
            let buckets = Table::segment_buckets(base_log2, k);
            let entries = self.memory.modify(*segment, index(buckets * ENTRY_BYTES));
            for (i, entry) in entries.chunks_exact_mut(ENTRY_BYTES as usize).enumerate() {
                let bucket = first + i as u64;
                entry[..OCCUPANT_OFFSET].copy_from_slice(&image.hop_word(bucket).to_le_bytes());
                entry[OCCUPANT_OFFSET..].copy_from_slice(match image.source(bucket) {
                    None => &[0; OCCUPANT_BYTES],
                    Some(Source::Old(from)) => &old[index(from)],
                    Some(Source::New) => &new_pair,
                });
            }
        }
        self.header.segments = grown.segments().to_vec();
        self.table = grown;
        self.write_header();
    }

    fn overwrite(
        &mut self,
        bucket: u64,
        old: Occupant,
        key: &[u8],
        value: &[u8],
        write_time_ns: u64,
    ) -> Result<(), StoreError> {
        let placement = Placement::of(key.len() as u64, value.len() as u64);
        let mut txn = AllocTxn::default();
        // Frees first, so the new copies can reuse the space. The key itself is unchanged, so an
        // out-of-line key that stays out of line keeps its copy.
        let mut key_at = old.key_at();
        if let (Some(at), true) = (key_at, placement.key_inline) {
            txn.free(&mut self.heap, at, key.len() as u64);
            key_at = None;
        }
        // A value of the same size class (or extent size) is overwritten in place.
        let mut value_at = old.value_at();
        if let Some(at) = value_at {
            if placement.value_inline || self.heap.backing(old.value_len) != self.heap.backing(value.len() as u64) {
                txn.free(&mut self.heap, at, old.value_len);
                value_at = None;
            }
        }
        let key_moves_out = !placement.key_inline && key_at.is_none();
        if key_moves_out {
            key_at = txn.alloc(&mut self.heap, key.len() as u64);
        }
        if !placement.value_inline && value_at.is_none() {
            value_at = txn.alloc(&mut self.heap, value.len() as u64);
        }
        if key_at.is_none() == placement.key_inline && value_at.is_none() == placement.value_inline {
            // Nothing below can fail.
            if key_moves_out {
                let at = key_at.expect("allocated just above");
                self.memory.modify(at, key.len()).copy_from_slice(key);
            }
            if let Some(at) = value_at {
                self.memory.modify(at, value.len()).copy_from_slice(value);
            }
            let occupant = Occupant::new(old.hash, write_time_ns, key, value, key_at, value_at);
            self.write_occupant(bucket, &occupant.encode());
            self.memory.commit();
            return Ok(());
        }
        txn.rollback(&mut self.heap);
        let (old_charge, new_charge) =
            (charge(u64::from(old.key_len), old.value_len), charge(key.len() as u64, value.len() as u64));
        Err(self.pool_full(new_charge.saturating_sub(old_charge)))
    }
}

/// Plans a growth that makes room for a pair with hash `hash`: adds segments (allocated in `txn`)
/// and splits an image of the table until the pair fits. `None` if the region has no room for the
/// next segment or the format no room for more segments.
fn plan_growth(bytes: &[u8], table: &Table, heap: &mut Heap, txn: &mut AllocTxn, hash: u64) -> Option<(Image, Table)> {
    let mut image = Image::read(bytes, table);
    let mut grown = table.clone();
    loop {
        if grown.segments().len() >= SEGMENTS_MAX || grown.buckets() >= 1 << BUCKETS_LOG2_MAX {
            return None;
        }
        let segment = txn.alloc_segment(heap, grown.buckets() * ENTRY_BYTES)?;
        grown = grown.grown(segment);
        image.split();
        let home = grown.home(hash);
        if let Some((_, bucket)) = plan_insert(&mut image, home) {
            image.place(home, bucket, hash);
            return Some((image, grown));
        }
    }
}

impl<M: PoolMemory> Store for HStore<M> {
    fn put(&mut self, key: &[u8], value: &[u8], mode: PutMode, write_time_ns: u64) -> Result<PutOutcome, StoreError> {
        let hash = self.header.hash(key);
        let found = self.table.find(self.memory.bytes(), hash, key);
        match (found, mode) {
            (Some(_), PutMode::CreateOnly) => return Err(StoreError::KeyExists),
            (None, PutMode::UpdateOnly) => return Err(StoreError::KeyNotFound),
            _ => {}
        }
        let new_charge = charge(key.len() as u64, value.len() as u64);
        match found {
            Some(bucket) => {
                let old = self.table.occupant(self.memory.bytes(), bucket);
                let used_after = self.reserve(charge(u64::from(old.key_len), old.value_len), new_charge)?;
                self.overwrite(bucket, old, key, value, write_time_ns)?;
                self.used_bytes = used_after;
                Ok(PutOutcome::Replaced)
            }
            None => {
                let used_after = self.reserve(0, new_charge)?;
                if u32::try_from(key.len()).is_err() {
                    return Err(self.pool_full(new_charge));
                }
                self.insert(hash, key, value, write_time_ns)?;
                self.used_bytes = used_after;
                self.objects += 1;
                Ok(PutOutcome::Inserted)
            }
        }
    }

    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        let bytes = self.memory.bytes();
        let bucket = self.table.find(bytes, self.header.hash(key), key)?;
        let occupant = self.table.occupant(bytes, bucket);
        self.table.pair(bytes, bucket, &occupant).map(|(_, value)| value)
    }

    fn erase(&mut self, key: &[u8]) -> Result<(), StoreError> {
        let hash = self.header.hash(key);
        let bucket = self.table.find(self.memory.bytes(), hash, key).ok_or(StoreError::KeyNotFound)?;
        let occupant = self.table.occupant(self.memory.bytes(), bucket);
        if let Some(at) = occupant.key_at() {
            self.heap.free(at, u64::from(occupant.key_len));
        }
        if let Some(at) = occupant.value_at() {
            self.heap.free(at, occupant.value_len);
        }
        let home = self.table.home(hash);
        let distance = self.table.distance(home, bucket);
        self.write_occupant(bucket, &[0; OCCUPANT_BYTES]);
        self.update_word(bucket, |word| word & !USED_BIT);
        self.update_word(home, |word| word & !(1 << distance));
        self.memory.commit();
        self.objects -= 1;
        self.used_bytes -= charge(u64::from(occupant.key_len), occupant.value_len);
        Ok(())
    }

    fn count(&self) -> u64 {
        self.objects
    }

    fn for_each_key(&self, visit: &mut dyn FnMut(&[u8])) {
        let bytes = self.memory.bytes();
        for bucket in 0..self.table.buckets() {
            if self.table.word(bytes, bucket) & USED_BIT == 0 {
                continue;
            }
            let occupant = self.table.occupant(bytes, bucket);
            if let Some((key, _)) = self.table.pair(bytes, bucket, &occupant) {
                visit(key);
            }
        }
    }

    fn attributes(&self, key: &[u8]) -> Option<ValueAttributes> {
        let bytes = self.memory.bytes();
        let bucket = self.table.find(bytes, self.header.hash(key), key)?;
        let occupant = self.table.occupant(bytes, bucket);
        let (_, value) = self.table.pair(bytes, bucket, &occupant)?;
        Some(ValueAttributes {
            length: occupant.value_len,
            crc32: crc32fast::hash(value),
            write_time_ns: occupant.write_time_ns,
        })
    }

    fn capacity_bytes(&self) -> u64 {
        self.header.capacity_bytes
    }

    fn used_bytes(&self) -> u64 {
        self.used_bytes
    }
}
