//! `mapstore`: a DRAM-only engine over a hash map, for caches and tests.
//!
//! Beside the map, every key is kept in hash order (an ordered set of hash and key, sharing the
//! key's allocation with the map), which is what lets a scan resume from a cursor however the map
//! grows between calls: a hash map's own order changes with every resize.

use std::collections::BTreeSet;
use std::hash::BuildHasher;
use std::ops::Bound;
use std::sync::Arc;

use foldhash::HashMap;
use foldhash::HashMapExt;

use crate::memory::{btree_set_node_bytes, heap_allocation_bytes, MemoryUsage};
use crate::store::{
    staged_charge, PoolSpec, PutMode, PutOutcome, StagedValue, Store, StoreError, ValueAttributes, WriteFootprint,
    ENTRY_OVERHEAD_BYTES,
};

/// Up-front index capacity is capped so a pool that claims to expect billions of objects cannot
/// make the server allocate much before storing anything; the index grows on demand past this.
const PREALLOCATED_ENTRIES_MAX: u64 = 1 << 16;

#[derive(Debug)]
struct Entry {
    value: Vec<u8>,
    write_time_ns: u64,
}

#[derive(Debug)]
pub struct MapStore {
    entries: HashMap<Arc<[u8]>, Entry>,
    /// Every key with its scan hash, in hash order.
    order: BTreeSet<(u64, Arc<[u8]>)>,
    capacity_bytes: u64,
    /// What the pairs are charged (see [`Store::used_bytes`]).
    used_bytes: u64,
    /// The room staged values hold until their commit or discard ([`staged_charge`]).
    staged_bytes: u64,
    /// Heap bytes of every key and value, as malloc rounds them: kept up to date by each put and
    /// erase so that [`Store::memory_usage`] walks nothing.
    pair_heap_bytes: u64,
}

/// The position of a key in a scan: a hash that is the same for the life of the process (a
/// mapstore lives no longer), whatever the map's own seeds.
/// Kept below 2^63, so a cursor derived from it is a positive signed 64-bit integer too (some
/// Redis clients parse `SCAN` cursors as such).
fn scan_hash(key: &[u8]) -> u64 {
    foldhash::fast::FixedState::with_seed(0x5eed).hash_one(key) >> 1
}

fn charge(key_len: usize, value_len: usize) -> u64 {
    key_len as u64 + value_len as u64 + ENTRY_OVERHEAD_BYTES
}

/// Bytes of a key's shared allocation: its two reference counts and its bytes.
fn key_heap_bytes(key_len: usize) -> u64 {
    heap_allocation_bytes(2 * size_of::<usize>() as u64 + key_len as u64)
}

/// Bytes of a value's allocation: its capacity, which an overwrite by a shorter value keeps.
fn value_heap_bytes(capacity: usize) -> u64 {
    if capacity == 0 {
        0
    } else {
        heap_allocation_bytes(capacity as u64)
    }
}

/// Bytes the control array of the standard hash map has past its buckets: one group of control
/// bytes, 16 with SSE2 on x86-64 (8 on other targets, a difference of 8 bytes a map).
const HASH_MAP_GROUP_BYTES: u64 = 16;

/// Buckets of a standard hash map (hashbrown) of `capacity`: a table of `b` buckets holds
/// `b - 1` pairs below 8 buckets, and 7/8 of `b` from 8 on.
fn hash_map_buckets(capacity: usize) -> u64 {
    let capacity = capacity as u64;
    match capacity {
        0 => 0,
        1..8 => capacity + 1,
        _ => capacity / 7 * 8,
    }
}

impl MapStore {
    pub fn new(spec: PoolSpec) -> Self {
        // Never more entries than the pool's size could hold, whatever the hint claims.
        let fits = spec.size_bytes / ENTRY_OVERHEAD_BYTES;
        let capacity = spec.expected_objects.min(fits).min(PREALLOCATED_ENTRIES_MAX) as usize;
        MapStore {
            entries: HashMap::with_capacity(capacity),
            order: BTreeSet::new(),
            capacity_bytes: spec.size_bytes,
            used_bytes: 0,
            staged_bytes: 0,
            pair_heap_bytes: 0,
        }
    }

    /// The pairs' charge after replacing a charge of `old_charge` with one of `new_charge`, or
    /// `PoolFull` if that grows past what the capacity leaves beside the staged values.
    fn reserve(&self, old_charge: u64, new_charge: u64) -> Result<u64, StoreError> {
        let used_after = self.used_bytes - old_charge + new_charge;
        if new_charge > old_charge && used_after + self.staged_bytes > self.capacity_bytes {
            return Err(StoreError::PoolFull {
                needed: new_charge - old_charge,
                free: self.capacity_bytes.saturating_sub(self.used_bytes + self.staged_bytes),
                capacity: self.capacity_bytes,
            });
        }
        Ok(used_after)
    }
}

impl MapStore {
    /// A put of a value of `len` bytes that `fill` writes into the entry's value (emptied of the
    /// old one, its allocation kept): what `put` and `commit_staged` share.
    fn put_filled(
        &mut self,
        key: &[u8],
        len: usize,
        mode: PutMode,
        write_time_ns: u64,
        fill: impl FnOnce(&mut Vec<u8>),
    ) -> Result<PutOutcome, StoreError> {
        let new_charge = charge(key.len(), len);
        if let Some(entry) = self.entries.get(key) {
            if mode == PutMode::CreateOnly {
                return Err(StoreError::KeyExists);
            }
            self.used_bytes = self.reserve(charge(key.len(), entry.value.len()), new_charge)?;
            let entry = self.entries.get_mut(key).expect("the key was found just above");
            let old_heap_bytes = value_heap_bytes(entry.value.capacity());
            entry.value.clear();
            fill(&mut entry.value);
            entry.write_time_ns = write_time_ns;
            self.pair_heap_bytes = self.pair_heap_bytes - old_heap_bytes + value_heap_bytes(entry.value.capacity());
            return Ok(PutOutcome::Replaced);
        }
        if mode == PutMode::UpdateOnly {
            return Err(StoreError::KeyNotFound);
        }
        self.used_bytes = self.reserve(0, new_charge)?;
        let key: Arc<[u8]> = Arc::from(key);
        let mut value = Vec::new();
        fill(&mut value);
        self.pair_heap_bytes += key_heap_bytes(key.len()) + value_heap_bytes(value.capacity());
        self.order.insert((scan_hash(&key), Arc::clone(&key)));
        self.entries.insert(key, Entry { value, write_time_ns });
        Ok(PutOutcome::Inserted)
    }
}

impl Store for MapStore {
    fn put(&mut self, key: &[u8], value: &[u8], mode: PutMode, write_time_ns: u64) -> Result<PutOutcome, StoreError> {
        self.put_filled(key, value.len(), mode, write_time_ns, |stored| stored.extend_from_slice(value))
    }

    fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.entries.get(key).map(|entry| entry.value.as_slice())
    }

    /// Staged in process memory, as a `Vec` that grows as pieces come.
    fn stage_value(&mut self, key_len: u64, len: u64) -> Result<StagedValue, StoreError> {
        self.reserve(0, key_len + len + ENTRY_OVERHEAD_BYTES)?;
        self.staged_bytes += staged_charge(len);
        Ok(StagedValue::owned(len))
    }

    /// The staged bytes become the entry's value as they are: a direct put of a large value
    /// costs no second copy.
    fn commit_staged(
        &mut self,
        key: &[u8],
        staged: StagedValue,
        mode: PutMode,
        write_time_ns: u64,
    ) -> Result<PutOutcome, StoreError> {
        self.staged_bytes -= staged_charge(staged.len());
        let value = staged.into_owned_bytes().expect("mapstore stages values in process memory");
        self.put_filled(key, value.len(), mode, write_time_ns, |stored| *stored = value)
    }

    fn discard_staged(&mut self, staged: StagedValue) {
        self.staged_bytes -= staged_charge(staged.len());
    }

    /// In place: the value keeps its allocation.
    fn write_value_range(
        &mut self,
        key: &[u8],
        offset: u64,
        bytes: &[u8],
        write_time_ns: u64,
    ) -> Result<(), StoreError> {
        let entry = self.entries.get_mut(key).ok_or(StoreError::KeyNotFound)?;
        let value_len = entry.value.len() as u64;
        let end = offset.checked_add(bytes.len() as u64).filter(|end| *end <= value_len);
        let end = end.ok_or(StoreError::RangeOutside { offset, len: bytes.len() as u64, value_len })?;
        entry.value[offset as usize..end as usize].copy_from_slice(bytes);
        entry.write_time_ns = write_time_ns;
        Ok(())
    }

    fn stored_key(&self, key: &[u8]) -> Option<&[u8]> {
        self.entries.get_key_value(key).map(|(stored, _)| &**stored)
    }

    fn erase(&mut self, key: &[u8]) -> Result<(), StoreError> {
        let (stored, entry) = self.entries.remove_entry(key).ok_or(StoreError::KeyNotFound)?;
        self.order.remove(&(scan_hash(key), stored));
        self.used_bytes -= charge(key.len(), entry.value.len());
        self.pair_heap_bytes -= key_heap_bytes(key.len()) + value_heap_bytes(entry.value.capacity());
        Ok(())
    }

    fn count(&self) -> u64 {
        self.entries.len() as u64
    }

    fn for_each_key(&self, visit: &mut dyn FnMut(&[u8])) {
        for key in self.entries.keys() {
            visit(key);
        }
    }

    /// Visits up to `entries` keys in hash order from the hash `cursor`, then any more with the
    /// same hash as the last (a cursor cannot fall between them), and returns the next hash.
    fn scan<'s>(&'s self, cursor: u64, entries: u64, visit: &mut dyn FnMut(&'s [u8])) -> u64 {
        let from = (cursor, Arc::<[u8]>::from(&[][..]));
        let mut last = None;
        let mut budget = entries.max(1);
        for (hash, key) in self.order.range((Bound::Included(from), Bound::Unbounded)) {
            if budget == 0 && last != Some(*hash) {
                return *hash;
            }
            visit(key);
            last = Some(*hash);
            budget = budget.saturating_sub(1);
        }
        0
    }

    fn attributes(&self, key: &[u8]) -> Option<ValueAttributes> {
        self.entries.get(key).map(|entry| ValueAttributes {
            length: entry.value.len() as u64,
            crc32: crate::checksum::crc32(&entry.value),
            write_time_ns: entry.write_time_ns,
        })
    }

    fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    fn used_bytes(&self) -> u64 {
        self.used_bytes + self.staged_bytes
    }

    /// An estimate, from the layout of the standard library's structures and malloc's rounding:
    /// the hash map's one allocation (a slot of key pointer and entry per bucket, and a control
    /// byte per bucket) as its table; every key and value allocation and the hash-ordered set of
    /// keys (its B-tree nodes; it shares the keys' allocations) as other bytes.
    fn memory_usage(&self) -> MemoryUsage {
        let table_buckets = hash_map_buckets(self.entries.capacity());
        let slots_bytes = (table_buckets * size_of::<(Arc<[u8]>, Entry)>() as u64).next_multiple_of(16);
        let table_bytes = if table_buckets == 0 {
            0
        } else {
            heap_allocation_bytes(slots_bytes + table_buckets + HASH_MAP_GROUP_BYTES)
        };
        let order_bytes = btree_set_node_bytes(self.order.len() as u64, size_of::<(u64, Arc<[u8]>)>() as u64);
        MemoryUsage {
            table_buckets,
            table_bytes,
            slab_bytes: 0,
            large_bytes: 0,
            other_bytes: self.pair_heap_bytes + order_bytes,
        }
    }

    /// A mapstore lives in DRAM only and is never logged; its "footprint" is just the pair.
    fn put_footprint(&self, key_len: u64, value_len: u64) -> WriteFootprint {
        WriteFootprint { bytes: key_len + value_len, ranges: 1 }
    }

    fn erase_footprint(&self) -> WriteFootprint {
        WriteFootprint { bytes: 0, ranges: 0 }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    fn store(size_bytes: u64) -> MapStore {
        MapStore::new(PoolSpec { size_bytes, expected_objects: 16 })
    }

    #[test]
    fn put_get_overwrite_erase() {
        let mut s = store(1 << 20);
        s.put(b"k", b"one", PutMode::Upsert, 1).expect("room");
        assert_eq!(s.get(b"k"), Some(&b"one"[..]));
        s.put(b"k", b"three", PutMode::Upsert, 2).expect("room");
        assert_eq!(s.get(b"k"), Some(&b"three"[..]));
        assert_eq!(s.attributes(b"k").map(|a| a.write_time_ns), Some(2));
        assert_eq!(s.count(), 1);
        assert_eq!(s.stored_key(b"k"), Some(&b"k"[..]));
        s.erase(b"k").expect("present");
        assert_eq!(s.get(b"k"), None);
        assert_eq!(s.erase(b"k"), Err(StoreError::KeyNotFound));
        assert_eq!(s.used_bytes(), 0);
    }

    #[test]
    fn modes_refuse_without_changing_anything() {
        let mut s = store(1 << 20);
        assert_eq!(s.put(b"k", b"v", PutMode::UpdateOnly, 1), Err(StoreError::KeyNotFound));
        assert_eq!(s.count(), 0);
        s.put(b"k", b"v", PutMode::CreateOnly, 1).expect("absent key");
        assert_eq!(s.put(b"k", b"w", PutMode::CreateOnly, 2), Err(StoreError::KeyExists));
        assert_eq!(s.get(b"k"), Some(&b"v"[..]));
        s.put(b"k", b"w", PutMode::UpdateOnly, 3).expect("present key");
        assert_eq!(s.get(b"k"), Some(&b"w"[..]));
    }

    #[test]
    fn attributes_report_length_and_zlib_crc() {
        let mut s = store(1 << 20);
        s.put(b"k", b"123456789", PutMode::Upsert, 7).expect("room");
        let attributes = s.attributes(b"k").expect("present");
        assert_eq!(attributes.length, 9);
        // The CRC-32 check value of "123456789".
        assert_eq!(attributes.crc32, 0xCBF4_3926);
        assert_eq!(s.attributes(b"missing"), None);
    }

    #[test]
    fn full_pool_refuses_growth_but_allows_shrinking() {
        let mut s = store(ENTRY_OVERHEAD_BYTES + 10);
        s.put(b"k", b"123456789", PutMode::Upsert, 1).expect("exactly fits");
        assert!(matches!(s.put(b"other", b"", PutMode::Upsert, 1), Err(StoreError::PoolFull { .. })));
        assert!(matches!(s.put(b"k", b"1234567890", PutMode::Upsert, 1), Err(StoreError::PoolFull { .. })));
        assert_eq!(s.get(b"k"), Some(&b"123456789"[..]));
        s.put(b"k", b"1", PutMode::Upsert, 1).expect("shrinking always fits");
        assert_eq!(s.used_bytes(), ENTRY_OVERHEAD_BYTES + 2);
    }

    /// The estimate follows the map: its buckets keep the load at most 7/8, other bytes grow with
    /// each value's allocation and fall back when the pairs go.
    #[test]
    fn memory_follows_the_pairs() {
        let mut s = MapStore::new(PoolSpec { size_bytes: u64::MAX, expected_objects: 0 });
        assert_eq!(s.memory_usage(), MemoryUsage::default(), "an empty map allocates nothing");
        for i in 0..1000u32 {
            s.put(&i.to_le_bytes(), &[0; 16], PutMode::Upsert, 0).expect("room");
        }
        let filled = s.memory_usage();
        assert!(filled.table_buckets * 7 / 8 >= 1000 && filled.table_buckets.is_power_of_two(), "{filled:?}");
        assert_eq!(filled.table_bytes, heap_allocation_bytes(filled.table_buckets * 49 + 16));
        // Per pair: a 20-byte key allocation (32), a 16-byte value (32), and about 40 bytes of
        // the ordered set's nodes.
        assert_eq!(filled.other_bytes, 1000 * 64 + btree_set_node_bytes(1000, 24));
        s.put(&0u32.to_le_bytes(), &[0; 100], PutMode::Upsert, 0).expect("room");
        assert_eq!(s.memory_usage().other_bytes, filled.other_bytes - 32 + 112, "the value's allocation grew");
        for i in 0..1000u32 {
            s.erase(&i.to_le_bytes()).expect("present");
        }
        assert_eq!(s.memory_usage().other_bytes, 0);
    }

    /// Every key present for a whole scan is visited at least once, while puts (which grow the
    /// map) and erases happen between the calls.
    #[test]
    fn a_scan_returns_every_key_present_throughout() {
        crate::store::scan_checks::keys_present_throughout_are_visited(&mut store(u64::MAX));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, Vec<u8>, u8),
        Erase(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..64), 0u8..3).prop_map(|(k, v, m)| Op::Put(k, v, m)),
            any::<u8>().prop_map(Op::Erase),
        ]
    }

    proptest! {
        /// The store agrees with a BTreeMap model after every step, including its byte accounting and
        /// the keys `for_each_key` visits (each exactly once).
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec(op(), 1..300)) {
            let mut s = store(u64::MAX);
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Put(k, v, m) => {
                        let key = vec![k];
                        let mode = [PutMode::Upsert, PutMode::CreateOnly, PutMode::UpdateOnly][m as usize];
                        let expected = match (mode, model.contains_key(&key)) {
                            (PutMode::CreateOnly, true) => Err(StoreError::KeyExists),
                            (PutMode::UpdateOnly, false) => Err(StoreError::KeyNotFound),
                            (_, true) => Ok(PutOutcome::Replaced),
                            (_, false) => Ok(PutOutcome::Inserted),
                        };
                        let result = s.put(&key, &v, mode, 0);
                        prop_assert_eq!(&result, &expected);
                        if result.is_ok() {
                            model.insert(key, v);
                        }
                    }
                    Op::Erase(k) => {
                        let expected = if model.remove(&vec![k]).is_some() { Ok(()) } else { Err(StoreError::KeyNotFound) };
                        prop_assert_eq!(s.erase(&[k]), expected);
                    }
                }
                prop_assert_eq!(s.count(), model.len() as u64);
                let used: u64 = model.iter().map(|(k, v)| charge(k.len(), v.len())).sum();
                prop_assert_eq!(s.used_bytes(), used);
                let heap: u64 =
                    s.entries.iter().map(|(k, e)| key_heap_bytes(k.len()) + value_heap_bytes(e.value.capacity())).sum();
                prop_assert_eq!(s.pair_heap_bytes, heap, "the heap counter follows every put and erase");
                let mut visited = Vec::new();
                s.for_each_key(&mut |key| visited.push(key.to_vec()));
                visited.sort();
                prop_assert_eq!(visited, model.keys().cloned().collect::<Vec<_>>(), "each key visited once");
                let scanned = crate::store::scan_checks::walk(&s, 3);
                prop_assert_eq!(scanned, model.keys().cloned().collect::<Vec<_>>(), "a scan visits each key once here");
            }
            for (key, value) in &model {
                prop_assert_eq!(s.get(key), Some(value.as_slice()));
            }
        }
    }
}
