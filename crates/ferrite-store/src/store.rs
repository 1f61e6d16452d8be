//! The engine-neutral interface of a pool's storage.

use crate::hstore::{self, HStore};
use crate::mapstore::MapStore;
use crate::memory::MemoryUsage;
use crate::persistence::VolatileMemory;

/// Bytes charged against a pool's capacity for each key-value pair on top of its key and value:
/// one 64-byte hash-table entry, the unit of MCAS's hopscotch table. Every engine charges the same
/// so a pool's sizing does not depend on the engine behind it.
pub const ENTRY_OVERHEAD_BYTES: u64 = 64;

/// The room a staged value of `len` bytes holds in its pool's accounting until its commit or
/// discard: its value and one entry's overhead. Its key is charged at the commit (keys are short,
/// and a discard does not know it).
pub fn staged_charge(len: u64) -> u64 {
    len + ENTRY_OVERHEAD_BYTES
}

/// Most keys one unit of [`Store::scan`] work visits: a home bucket of `hstore` (its hopscotch
/// neighbourhood), or one entry of `mapstore` (save keys sharing a 64-bit hash). What a paged
/// `find` keeps room for before each step.
pub const SCAN_KEYS_PER_WORK_MAX: u64 = 32;

/// How a put treats an existing key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PutMode {
    /// Insert or overwrite.
    #[default]
    Upsert,
    /// Fail with [`StoreError::KeyExists`] if the key is present.
    CreateOnly,
    /// Fail with [`StoreError::KeyNotFound`] if the key is absent.
    UpdateOnly,
}

/// What a successful put did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The key was new.
    Inserted,
    /// The key existed and its value was replaced.
    Replaced,
}

/// Why a store refused an operation. A refused operation changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("key already exists")]
    KeyExists,
    #[error("key not found")]
    KeyNotFound,
    /// `free` is what the pool's accounting has left. An engine whose heap can fragment (hstore)
    /// may also refuse a put that the accounting admits, when it finds no space for it; then
    /// `free` is at least `needed`.
    #[error("pool is full: {needed} bytes needed, {free} of {capacity} free")]
    PoolFull { needed: u64, free: u64, capacity: u64 },
    #[error("a key of {bytes} bytes is longer than the engine's limit of {max}")]
    KeyTooLarge { bytes: u64, max: u64 },
    #[error("a value of {bytes} bytes is longer than the engine's limit of {max}")]
    ValueTooLarge { bytes: u64, max: u64 },
    #[error("{len} bytes at offset {offset} pass the end of a value of {value_len} bytes")]
    RangeOutside { offset: u64, len: u64, value_len: u64 },
}

/// Bytes to copy inside a store's memory region: what a plugin call declared in its copy of a
/// value (`from`), applied to the value (`to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionCopy {
    pub from: u64,
    pub to: u64,
    pub len: u64,
}

/// Where a value lies in a store's memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueLocation {
    pub offset: u64,
    pub len: u64,
    /// Whether the value stays at `offset` while its key is neither written nor erased. A value
    /// kept out of line does; one kept inside its index entry moves when other inserts move
    /// entries (hopscotch displacement, table growth).
    pub stable: bool,
}

/// An allocation a store keeps for a plugin ([`Store::keep_scratch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptAllocation {
    pub id: u64,
    pub offset: u64,
    pub len: u64,
}

/// The most pool memory one write may change, as its log record will carry it: the bytes, and how
/// many separate ranges it declares them in. A durable shard reserves room in its log for this much
/// before the write, so that pool memory never changes unless its whole record (a table growth
/// included) is sure to be logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteFootprint {
    pub bytes: u64,
    pub ranges: u64,
}

/// A value a direct put writes in pieces before it replaces its key's value at once
/// ([`Store::stage_value`]). Nothing refers to it until [`Store::commit_staged`], so a crash or a
/// restart frees it and the key keeps its old value. It belongs to the store that staged it:
/// only that store's commit or discard may take it.
#[derive(Debug)]
pub enum StagedValue {
    /// In the store's memory region at `offset`: each piece is logged as it is written, so the
    /// commit logs only the index change.
    Region { offset: u64, len: u64 },
    /// In process memory: for engines without a region (mapstore), and for values short enough
    /// to lie inside an index entry, which the commit then copies (and logs) like a put.
    Owned { bytes: Vec<u8>, len: u64 },
}

impl StagedValue {
    /// The value's full length, however much of it is written yet.
    pub fn len(&self) -> u64 {
        match self {
            StagedValue::Region { len, .. } | StagedValue::Owned { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A staged value held in process memory, filled by [`Self::write_owned`]. Only a store
    /// makes one, in [`Store::stage_value`]: the room it holds is counted there, and given back
    /// by the same store's commit or discard.
    pub(crate) fn owned(len: u64) -> StagedValue {
        StagedValue::Owned { bytes: Vec::new(), len }
    }

    /// Writes `bytes` at `offset` of an owned staged value; pieces in order append without
    /// zero-filling. False for a region value.
    pub(crate) fn write_owned(&mut self, offset: u64, piece: &[u8]) -> bool {
        let StagedValue::Owned { bytes, len } = self else { return false };
        let (start, end) = (offset as usize, offset as usize + piece.len());
        debug_assert!(end as u64 <= *len, "pieces lie inside the value");
        if start == bytes.len() {
            if bytes.capacity() == 0 {
                bytes.reserve_exact(*len as usize);
            }
            bytes.extend_from_slice(piece);
        } else {
            if bytes.len() < end {
                bytes.resize(end, 0);
            }
            bytes[start..end].copy_from_slice(piece);
        }
        true
    }

    /// An owned value's bytes, zero-filled to its full length (pieces never written read as zeros).
    pub fn into_owned_bytes(self) -> Option<Vec<u8>> {
        match self {
            StagedValue::Owned { mut bytes, len } => {
                bytes.resize(len as usize, 0);
                Some(bytes)
            }
            StagedValue::Region { .. } => None,
        }
    }
}

/// What a pool knows about one stored value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueAttributes {
    pub length: u64,
    /// CRC-32 (IEEE) of the value, as zlib computes it.
    pub crc32: u32,
    /// Nanoseconds since the Unix epoch at the value's last write.
    pub write_time_ns: u64,
}

/// The shape of a pool, fixed at creation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSpec {
    /// Capacity in bytes: keys, values and [`ENTRY_OVERHEAD_BYTES`] per pair.
    pub size_bytes: u64,
    /// How many pairs the pool expects; engines size their index for it up front.
    pub expected_objects: u64,
}

/// A pool's key-value storage.
///
/// Stores are driven by one shard thread, never shared, so methods take `&mut self` and need no
/// locking. `get` returns a slice of the store's own memory so the server can copy a value straight
/// into a response buffer.
pub trait Store: Send {
    /// Stores `value` under `key`, stamped with `write_time_ns` (the caller's clock, read once per
    /// batch of requests rather than once per put).
    fn put(&mut self, key: &[u8], value: &[u8], mode: PutMode, write_time_ns: u64) -> Result<PutOutcome, StoreError>;

    fn get(&self, key: &[u8]) -> Option<&[u8]>;

    /// The store's own copy of `key`, if present: what a `find` for one exact key returns.
    fn stored_key(&self, key: &[u8]) -> Option<&[u8]>;

    fn erase(&mut self, key: &[u8]) -> Result<(), StoreError>;

    /// Number of key-value pairs.
    fn count(&self) -> u64;

    fn attributes(&self, key: &[u8]) -> Option<ValueAttributes>;

    fn capacity_bytes(&self) -> u64;

    /// What the pool's capacity is charged with: every pair's key and value and
    /// [`ENTRY_OVERHEAD_BYTES`], and the room each staged value holds until its commit or discard
    /// ([`staged_charge`]), so that values being written cannot together promise more than the
    /// pool holds.
    fn used_bytes(&self) -> u64;

    /// What the store takes in memory, by part: unlike `used_bytes` (the pairs as the pool's
    /// capacity charges them), the table, slabs and allocations that hold them. Cheap enough for
    /// every pool listing: no walk of the keys (hstore sums its subtables).
    fn memory_usage(&self) -> MemoryUsage;

    /// Calls `visit` once for each key, in no particular order: how a pool's secondary index is
    /// rebuilt after a restart. Takes a `dyn` visitor so the server can call it through
    /// `Box<dyn Store>`.
    fn for_each_key(&self, visit: &mut dyn FnMut(&[u8]));

    /// Visits the keys of a bounded part of the store, from `cursor` (0 to start), and returns
    /// the cursor to continue from (0 once the whole store has been walked). `work` bounds one
    /// call (home buckets for hstore, empty parts of the table passed over free; entries for
    /// mapstore), so a walk of any store is done in
    /// steps that never hold the shard long. Every key present for the whole of a walk (the calls
    /// from cursor 0 until 0 comes back) is visited at least once, whatever puts, erases and
    /// table growth happen between the calls; a key may be visited more than once.
    fn scan<'s>(&'s self, cursor: u64, work: u64, visit: &mut dyn FnMut(&'s [u8])) -> u64;

    /// The most a put of a key and value of these lengths may change, growth of the index
    /// included (see [`WriteFootprint`]).
    fn put_footprint(&self, key_len: u64, value_len: u64) -> WriteFootprint;

    /// The most an erase may change.
    fn erase_footprint(&self) -> WriteFootprint;

    /// The most a put that replaces the value of a key already present may change: no growth of
    /// the index. By default, as much as any put.
    fn update_footprint(&self, key_len: u64, value_len: u64) -> WriteFootprint {
        self.put_footprint(key_len, value_len)
    }

    /// Where `key`'s value lies in the store's memory region, for code in another process that
    /// maps the same region: an Active Data Object host, which changes values in place. `None`
    /// if the key is absent, or if the store's memory is not a region another process can map
    /// (then no plugin is ever given a value of it).
    fn value_location(&self, key: &[u8]) -> Option<ValueLocation> {
        let _ = key;
        None
    }

    /// Memory for `len` bytes that no pair owns, in whole pages of the operating system's page
    /// size that nothing else shares: where a plugin call works (its copies of values, memory
    /// it allocates), so that its host can be given write access to exactly these pages.
    /// Nothing refers to them, so a restart frees them; [`free_scratch`](Store::free_scratch)
    /// (with the same `len`) gives them back sooner. `None` if there is no room.
    fn allocate_scratch(&mut self, len: u64) -> Option<u64> {
        let _ = len;
        None
    }

    fn free_scratch(&mut self, offset: u64, len: u64) {
        let _ = (offset, len);
    }

    /// Copies `bytes` into scratch memory at `offset` (from [`allocate_scratch`]), through the
    /// store's own mapping and unlogged; false if the store cannot.
    ///
    /// [`allocate_scratch`]: Store::allocate_scratch
    fn write_scratch(&mut self, offset: u64, bytes: &[u8]) -> bool {
        let _ = (offset, bytes);
        false
    }

    /// `len` bytes of the store's memory region at `offset` (a value's place, or scratch
    /// memory), for reading what a plugin left there; `None` out of the region or for a store
    /// without one.
    fn region_bytes(&self, offset: u64, len: u64) -> Option<&[u8]> {
        let _ = (offset, len);
        None
    }

    /// Copies bytes inside the store's memory region, each from scratch memory (a plugin call's
    /// copy of a value, where it declared its writes) onto a value a
    /// [`value_location`](Store::value_location) named (its key held by the caller since), as
    /// one transaction: durable and atomic exactly like a put, its record holding exactly these
    /// bytes. The caller checked that each range lies in memory it handed out and reserved log
    /// room for them. Stores that hand out no locations have nothing to copy.
    fn copy_within_region(&mut self, copies: &[RegionCopy]) {
        let _ = copies;
    }

    /// Makes the scratch memory at `at` (from [`allocate_scratch`] for `len` bytes: its whole
    /// pages, whose bytes are the allocation's contents) an allocation the store keeps, recorded
    /// under `id`: it outlives restarts, no key owns it, and no count or walk of keys sees it.
    /// What a plugin's `allocate_memory` becomes when its call succeeds. The bytes are logged
    /// with the record. `KeyExists` if `id` is taken; stores that cannot keep allocations refuse
    /// with `ValueTooLarge`.
    ///
    /// [`allocate_scratch`]: Store::allocate_scratch
    fn keep_scratch(&mut self, id: u64, at: u64, len: u64, write_time_ns: u64) -> Result<(), StoreError> {
        let _ = (id, at, write_time_ns);
        Err(StoreError::ValueTooLarge { bytes: len, max: 0 })
    }

    /// Frees the kept allocation `id`; `KeyNotFound` if there is none.
    fn release_kept(&mut self, id: u64) -> Result<(), StoreError> {
        let _ = id;
        Err(StoreError::KeyNotFound)
    }

    /// The kept allocation that holds the `len` bytes at `offset` whole, if one does.
    fn kept_containing(&self, offset: u64, len: u64) -> Option<KeptAllocation> {
        let _ = (offset, len);
        None
    }

    /// Sets aside room for a value of `len` bytes for `key_len`-byte key, written in pieces by
    /// [`write_staged`](Store::write_staged) and made the key's value at once by
    /// [`commit_staged`](Store::commit_staged): a direct put. The room is charged to
    /// [`used_bytes`](Store::used_bytes) from now on ([`staged_charge`]) and handed back by the
    /// commit (which charges the pair instead) or [`discard_staged`](Store::discard_staged).
    /// `PoolFull` if the pool's capacity or memory cannot hold the pair beside what it holds and
    /// what other staged values hold now; `ValueTooLarge` past the engine's limit.
    fn stage_value(&mut self, key_len: u64, len: u64) -> Result<StagedValue, StoreError>;

    /// Writes `bytes` at `offset` of a staged value; for one in the region, logged as its own
    /// transaction (the caller reserved [`staged_write_footprint`](Store::staged_write_footprint)
    /// of log room), durable with the value's commit rather than on its own
    /// ([`PoolMemory::commit_with_next`](crate::persistence::PoolMemory::commit_with_next)). The
    /// range lies inside the value.
    fn write_staged(&mut self, staged: &mut StagedValue, offset: u64, bytes: &[u8]) {
        let written = staged.write_owned(offset, bytes);
        assert!(written, "this engine stages values in process memory only");
    }

    /// `len` bytes at `offset` of a staged value, lent so a piece can be read into them straight
    /// from a socket, one read at a time; [`write_staged_in_place`](Store::write_staged_in_place)
    /// then logs the piece. `None` where the bytes cannot be lent (a value staged in process
    /// memory, a backing that lends no memory, a range outside the value): the piece then comes
    /// through [`write_staged`](Store::write_staged). Nothing refers to a staged value's bytes
    /// before its commit, so a piece left half read (its client gone) changes nothing a reader,
    /// a recovery or a checkpoint's user sees.
    ///
    /// The caller lends only bytes no piece was written to yet (from where its pieces stand):
    /// bytes already logged changed again without a record would differ from the log, which a
    /// checkpoint may refer to instead of copying them.
    fn staged_piece_mut(&mut self, staged: &StagedValue, offset: u64, len: usize) -> Option<&mut [u8]> {
        let _ = (staged, offset, len);
        None
    }

    /// Logs the `len` bytes at `offset` of a staged value that were read in through
    /// [`staged_piece_mut`](Store::staged_piece_mut), as [`write_staged`](Store::write_staged)
    /// logs the bytes it copies. Only ever called for bytes that were lent, which a store that
    /// lends nothing (the default) never did.
    fn write_staged_in_place(&mut self, staged: &mut StagedValue, offset: u64, len: u64) {
        let _ = (staged, offset, len);
        unreachable!("this store lends no piece, so none was read in place")
    }

    /// The most a [`write_staged`](Store::write_staged) of `len` bytes changes.
    fn staged_write_footprint(&self, len: u64) -> WriteFootprint {
        WriteFootprint { bytes: len, ranges: 1 }
    }

    /// Makes a staged value `key`'s value, as one transaction: a reader sees the old value or
    /// this one. On failure (`mode` refused, no room in the index) the staged value is freed and
    /// the key keeps its value.
    fn commit_staged(
        &mut self,
        key: &[u8],
        staged: StagedValue,
        mode: PutMode,
        write_time_ns: u64,
    ) -> Result<PutOutcome, StoreError>;

    /// The most a [`commit_staged`](Store::commit_staged) changes.
    fn staged_commit_footprint(&self, key_len: u64, staged: &StagedValue) -> WriteFootprint {
        match staged {
            StagedValue::Owned { len, .. } => self.put_footprint(key_len, *len),
            StagedValue::Region { .. } => self.put_footprint(key_len, 0),
        }
    }

    /// Frees a staged value that will not be committed, and the room it held.
    fn discard_staged(&mut self, staged: StagedValue);

    /// `len` bytes at `offset` of `key`'s value, if the key is present and the range lies inside
    /// it: a piece of a direct read.
    fn read_value(&self, key: &[u8], offset: u64, len: u64) -> Option<&[u8]> {
        let value = self.get(key)?;
        let start = usize::try_from(offset).ok()?;
        value.get(start..start.checked_add(usize::try_from(len).ok()?)?)
    }

    /// Writes `bytes` at `offset` inside `key`'s value, which keeps its length, as one
    /// transaction (a `put_offset`). `KeyNotFound` if the key is absent; `ValueTooLarge` if the
    /// range passes the value's end (nothing changed then).
    fn write_value_range(
        &mut self,
        key: &[u8],
        offset: u64,
        bytes: &[u8],
        write_time_ns: u64,
    ) -> Result<(), StoreError>;

    /// The most a [`write_value_range`](Store::write_value_range) of `len` bytes into a value of
    /// `value_len` bytes changes.
    fn value_range_footprint(&self, key_len: u64, value_len: u64, len: u64) -> WriteFootprint {
        let _ = len;
        self.update_footprint(key_len, value_len)
    }

    /// Starts a transaction: the puts, erases and external writes that follow, until
    /// [`end_transaction`](Store::end_transaction), are logged as one record, so they become
    /// durable together or (after a crash) not at all. What a plugin call that changes several
    /// keys commits through. The caller reserves log room for all of them first. False if the
    /// store cannot group its writes (a store without a log, or of the `pmem` backing); then
    /// nothing changed and each write stays its own transaction.
    fn begin_transaction(&mut self) -> bool {
        false
    }

    /// Ends the transaction [`begin_transaction`](Store::begin_transaction) started, logging it.
    fn end_transaction(&mut self) {}
}

/// The engines a shard can put behind its pools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StoreKind {
    /// DRAM only: fast, and gone when the server stops.
    #[default]
    MapStore,
    /// MCAS's persistent hopscotch hash, here in a region of process memory (the `memory`
    /// backing); the region is [`HStore::region_bytes_for`] the pool's spec.
    HStore,
}

/// Why a store could not be created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CreateStoreError {
    #[error(transparent)]
    HStore(#[from] hstore::CreateError),
}

impl StoreKind {
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::MapStore => "mapstore",
            StoreKind::HStore => "hstore",
        }
    }

    /// The most one put of a key and value of these lengths may change in a store of this kind,
    /// growth included: with the largest key and value a server admits, its largest write.
    pub fn largest_put_footprint(self, key_len: u64, value_len: u64) -> WriteFootprint {
        match self {
            StoreKind::MapStore => WriteFootprint { bytes: key_len + value_len, ranges: 1 },
            StoreKind::HStore => HStore::<VolatileMemory>::put_footprint_for(key_len, value_len),
        }
    }

    /// The most formatting a pool of shape `spec` changes in a store of this kind.
    pub fn creation_footprint(self, spec: PoolSpec) -> Result<WriteFootprint, CreateStoreError> {
        match self {
            StoreKind::MapStore => Ok(WriteFootprint { bytes: 0, ranges: 0 }),
            StoreKind::HStore => Ok(HStore::<VolatileMemory>::creation_footprint(spec)?),
        }
    }

    /// Creates an empty store of this kind for a pool of shape `spec`, or says why the spec
    /// cannot be served (an hstore region for it would exceed the format's limits).
    pub fn try_create(self, spec: PoolSpec) -> Result<Box<dyn Store>, CreateStoreError> {
        match self {
            StoreKind::MapStore => Ok(Box::new(MapStore::new(spec))),
            StoreKind::HStore => {
                let region_bytes = HStore::<VolatileMemory>::region_bytes_for(spec)?;
                let region_bytes = usize::try_from(region_bytes)
                    .map_err(|_| hstore::CreateError::TooLarge { size_bytes: spec.size_bytes })?;
                Ok(Box::new(HStore::create_on_zeroed(VolatileMemory::zeroed(region_bytes), spec)?))
            }
        }
    }
}

/// Checks of [`Store::scan`] that every engine must pass.
#[cfg(test)]
pub(crate) mod scan_checks {
    use std::collections::BTreeSet;

    use super::{PutMode, Store};

    /// Every key of a whole walk in `work`-sized calls, sorted, repeats kept.
    pub(crate) fn walk(store: &dyn Store, work: u64) -> Vec<Vec<u8>> {
        let (mut cursor, mut keys) = (0, Vec::new());
        loop {
            cursor = store.scan(cursor, work, &mut |key| keys.push(key.to_vec()));
            if cursor == 0 {
                keys.sort();
                return keys;
            }
        }
    }

    /// Walks a store of 2,000 keys while, between calls, 40 keys are added (growing the table)
    /// and one not in the stable set is erased; asserts every key present throughout was
    /// visited. Returns the number of calls.
    pub(crate) fn keys_present_throughout_are_visited(store: &mut dyn Store) -> u32 {
        let key = |i: u32| format!("scan-{i}").into_bytes();
        for i in 0..2000 {
            store.put(&key(i), b"v", PutMode::CreateOnly, 0).expect("room");
        }
        let stable: BTreeSet<Vec<u8>> = (0..2000).filter(|i| i % 5 != 0).map(key).collect();
        let (mut cursor, mut seen, mut calls, mut next) = (0, BTreeSet::new(), 0, 2000u32);
        loop {
            cursor = store.scan(cursor, 37, &mut |k| {
                seen.insert(k.to_vec());
            });
            calls += 1;
            for _ in 0..40 {
                store.put(&key(next), b"new", PutMode::CreateOnly, 0).expect("room");
                next += 1;
            }
            let _ = store.erase(&key(5 * (calls % 400)));
            if cursor == 0 {
                break;
            }
        }
        assert!(calls > 10, "the walk took {calls} calls");
        let missed: Vec<_> = stable.difference(&seen).collect();
        assert!(missed.is_empty(), "{} stable keys missed, e.g. {:?}", missed.len(), missed.first());
        calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both engines are created by name and behave the same through the trait.
    #[test]
    fn every_kind_creates_a_working_store() {
        for kind in [StoreKind::MapStore, StoreKind::HStore] {
            let mut store = kind
                .try_create(PoolSpec { size_bytes: 1 << 16, expected_objects: 8 })
                .expect("a small pool is created");
            store.put(b"k", b"v", PutMode::Upsert, 1).expect("room");
            assert_eq!(store.get(b"k"), Some(&b"v"[..]), "{}", kind.name());
            assert_eq!(store.used_bytes(), 2 + ENTRY_OVERHEAD_BYTES);
            let memory = store.memory_usage();
            assert!(memory.table_buckets >= 1 && memory.table_bytes > 0 && memory.other_bytes > 0, "{memory:?}");
            let footprint = store.put_footprint(10, 20);
            assert!(footprint.bytes >= 30 && footprint.ranges >= 1, "{}", kind.name());
            let long_key = vec![b'x'; 300];
            store.put(&long_key, b"out of line", PutMode::Upsert, 1).expect("room");
            store.put(b"gone", b"v", PutMode::Upsert, 1).expect("room");
            store.erase(b"gone").expect("present");
            let mut keys = Vec::new();
            store.for_each_key(&mut |key| keys.push(key.to_vec()));
            keys.sort();
            assert_eq!(keys, vec![b"k".to_vec(), long_key.clone()], "{}", kind.name());
            assert_eq!(scan_checks::walk(store.as_ref(), 1), vec![b"k".to_vec(), long_key], "{}", kind.name());
        }
        assert_eq!(StoreKind::HStore.name(), "hstore");
        let huge = PoolSpec { size_bytes: u64::MAX, expected_objects: 0 };
        assert!(matches!(StoreKind::HStore.try_create(huge), Err(CreateStoreError::HStore(_))));
    }

    /// Both engines stage a value in pieces, show nothing of it before the commit, replace the
    /// key's value whole at the commit, and give everything back when a staged value is dropped
    /// or its commit refused.
    #[test]
    fn every_kind_stages_commits_and_discards_values() {
        for kind in [StoreKind::MapStore, StoreKind::HStore] {
            let mut store =
                kind.try_create(PoolSpec { size_bytes: 4 << 20, expected_objects: 8 }).expect("a pool is created");
            store.put(b"k", b"old", PutMode::Upsert, 1).expect("room");
            let used = store.used_bytes();
            for len in [0usize, 7, 5000, 1_000_000] {
                let value: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
                let mut staged = store.stage_value(1, len as u64).expect("room");
                assert_eq!(staged.len(), len as u64);
                for (n, piece) in value.chunks(65_536).enumerate() {
                    store.write_staged(&mut staged, (n * 65_536) as u64, piece);
                }
                assert_eq!(store.get(b"k"), Some(&b"old"[..]), "{}: nothing shows before the commit", kind.name());
                store.discard_staged(staged);
                assert_eq!(store.used_bytes(), used, "{}", kind.name());

                let mut staged = store.stage_value(1, len as u64).expect("room");
                for (n, piece) in value.chunks(65_536).enumerate() {
                    store.write_staged(&mut staged, (n * 65_536) as u64, piece);
                }
                let refused = store.commit_staged(b"k", staged, PutMode::CreateOnly, 2);
                assert_eq!(refused, Err(StoreError::KeyExists), "{}", kind.name());
                assert_eq!(store.get(b"k"), Some(&b"old"[..]));

                let mut staged = store.stage_value(1, len as u64).expect("room");
                for (n, piece) in value.chunks(65_536).enumerate() {
                    store.write_staged(&mut staged, (n * 65_536) as u64, piece);
                }
                assert_eq!(store.commit_staged(b"k", staged, PutMode::Upsert, 2), Ok(PutOutcome::Replaced));
                assert_eq!(store.get(b"k"), Some(&value[..]), "{} at {len} bytes", kind.name());
                assert_eq!(store.read_value(b"k", len as u64 / 2, (len - len / 2) as u64), Some(&value[len / 2..]));
                assert_eq!(store.read_value(b"k", len as u64, 1), None, "past the end");
                store.put(b"k", b"old", PutMode::Upsert, 3).expect("room");
                assert_eq!(store.used_bytes(), used, "{}: the replaced value was freed", kind.name());
            }
            let too_large = store.stage_value(1, 5 << 20);
            assert!(matches!(too_large, Err(StoreError::PoolFull { .. })), "{}: {too_large:?}", kind.name());
        }
    }

    /// A staged value holds its room from the stage to its commit or discard: `used_bytes` shows
    /// it, and a put or another staged value that would take the pool past its capacity beside it
    /// is refused at once (not at its commit, after all its bytes came); the commit charges the
    /// pair in its place.
    #[test]
    fn every_kind_holds_room_for_staged_values() {
        for kind in [StoreKind::MapStore, StoreKind::HStore] {
            let mut store =
                kind.try_create(PoolSpec { size_bytes: 4 << 20, expected_objects: 8 }).expect("a pool is created");
            let len = 3 << 20;
            let staged = store.stage_value(1, len).expect("room");
            assert_eq!(store.used_bytes(), staged_charge(len), "{}", kind.name());
            let second = store.stage_value(1, len);
            assert!(matches!(second, Err(StoreError::PoolFull { .. })), "{}: {second:?}", kind.name());
            let put = store.put(b"p", &vec![7; 2 << 20], PutMode::Upsert, 1);
            assert!(matches!(put, Err(StoreError::PoolFull { .. })), "{}: {put:?}", kind.name());
            store.put(b"p", b"small", PutMode::Upsert, 1).expect("room beside the staged value");
            store.erase(b"p").expect("present");
            store.discard_staged(staged);
            assert_eq!(store.used_bytes(), 0, "{}: the discard gave the room back", kind.name());

            let staged = store.stage_value(1, len).expect("room");
            assert_eq!(store.commit_staged(b"k", staged, PutMode::Upsert, 2), Ok(PutOutcome::Inserted));
            assert_eq!(store.used_bytes(), 1 + len + ENTRY_OVERHEAD_BYTES, "{}: the pair's charge", kind.name());
            let second = store.stage_value(1, len);
            assert!(matches!(second, Err(StoreError::PoolFull { .. })), "{}: {second:?}", kind.name());
        }
    }

    /// `write_value_range` changes bytes inside a value, inline or out of line, and refuses a
    /// range past its end or an absent key, changing nothing.
    #[test]
    fn every_kind_writes_ranges_inside_values() {
        for kind in [StoreKind::MapStore, StoreKind::HStore] {
            let mut store = kind.try_create(PoolSpec { size_bytes: 1 << 20, expected_objects: 8 }).expect("pool");
            for len in [10usize, 100_000] {
                let mut value = vec![b'a'; len];
                store.put(b"k", &value, PutMode::Upsert, 1).expect("room");
                store.write_value_range(b"k", len as u64 - 3, b"xyz", 2).expect("inside");
                value[len - 3..].copy_from_slice(b"xyz");
                assert_eq!(store.get(b"k"), Some(&value[..]), "{}", kind.name());
                assert_eq!(store.attributes(b"k").map(|a| a.write_time_ns), Some(2));
                let past = store.write_value_range(b"k", len as u64 - 2, b"xyz", 3);
                assert_eq!(
                    past,
                    Err(StoreError::RangeOutside { offset: len as u64 - 2, len: 3, value_len: len as u64 })
                );
                assert_eq!(store.get(b"k"), Some(&value[..]));
                assert_eq!(store.write_value_range(b"absent", 0, b"x", 3), Err(StoreError::KeyNotFound));
            }
        }
    }
}
