//! Tests of the hstore engine as a whole, over `CheckedMemory` so that every write outside a
//! declared range fails the test.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::layout::{BUCKETS_MAX, HEADER_BYTES, PAYLOAD_OFFSET};
use super::*;
use crate::persistence::checked::CheckedMemory;
use crate::persistence::VolatileMemory;

const HASH_KEY: [u64; 2] = [0x5eed_0000_0000_0001, 0x5eed_0000_0000_0002];

fn spec(size_bytes: u64) -> PoolSpec {
    PoolSpec { size_bytes, expected_objects: 1 }
}

fn checked_store(size_bytes: u64) -> HStore<CheckedMemory> {
    let region = HStore::<CheckedMemory>::region_bytes_for(spec(size_bytes)).expect("small pool");
    HStore::create_with_hash_key(CheckedMemory::zeroed(index(region)), spec(size_bytes), HASH_KEY, Zeroed::Unknown)
        .expect("fits")
}

/// A `CheckedMemory` holding `bytes` as committed state: what a recovery would hand to `open`.
fn checked_from(bytes: &[u8]) -> CheckedMemory {
    let mut memory = CheckedMemory::zeroed(bytes.len());
    memory.modify(0, bytes.len()).copy_from_slice(bytes);
    memory.commit();
    memory
}

/// Restart: the committed image of `store`, opened afresh. The rebuilt volatile state must equal
/// the state it replaces.
fn restart(store: HStore<CheckedMemory>) -> HStore<CheckedMemory> {
    let memory = store.memory();
    assert_eq!(memory.bytes(), memory.committed_bytes(), "no uncommitted changes are pending");
    let reopened = HStore::open(checked_from(memory.committed_bytes())).expect("a committed image opens");
    assert_eq!(reopened.heap, store.heap, "reconstituted allocator equals the live one");
    assert_eq!(reopened.allocations, store.allocations, "kept allocations are found again");
    assert_eq!((reopened.objects, reopened.used_bytes), (store.objects, store.used_bytes));
    assert_eq!((&reopened.subtables, &reopened.pairs), (&store.subtables, &store.pairs));
    assert_eq!(reopened.memory_usage(), store.memory_usage(), "the memory figures are rebuilt identically");
    reopened
}

fn assert_checks(store: &HStore<CheckedMemory>) -> CheckReport {
    match store.check() {
        Ok(report) => report,
        Err(problems) => panic!("check failed:\n{}", problems.join("\n")),
    }
}

fn value(len: usize, fill: u8) -> Vec<u8> {
    (0..len).map(|i| fill.wrapping_add((i as u8).wrapping_mul(31))).collect()
}

#[test]
fn put_get_overwrite_erase() {
    let mut s = checked_store(1 << 16);
    assert_eq!(s.put(b"k", b"one", PutMode::Upsert, 1), Ok(PutOutcome::Inserted));
    assert_eq!(s.get(b"k"), Some(&b"one"[..]));
    assert_eq!(s.put(b"k", b"three", PutMode::Upsert, 2), Ok(PutOutcome::Replaced));
    assert_eq!(s.get(b"k"), Some(&b"three"[..]));
    assert_eq!(s.attributes(b"k").map(|a| a.write_time_ns), Some(2));
    assert_eq!(s.count(), 1);
    assert_eq!((s.stored_key(b"k"), s.stored_key(b"x")), (Some(&b"k"[..]), None));
    s.erase(b"k").expect("present");
    assert_eq!(s.get(b"k"), None);
    assert_eq!(s.erase(b"k"), Err(StoreError::KeyNotFound));
    assert_eq!(s.used_bytes(), 0);
    assert_checks(&s);
}

/// Refused operations change nothing and commit nothing; successful ones commit exactly once.
/// A kept allocation (a plugin's `allocate_memory`) outlives a restart, holds its memory
/// against other allocations, and is invisible to clients: no count, walk or lookup of a key
/// sees it, not even of a client key with the same bytes as its id. Released, it is gone.
#[test]
fn kept_allocations_survive_restarts_unseen_by_clients() {
    let mut s = checked_store(1 << 16);
    s.put(b"client", b"value", PutMode::Upsert, 1).expect("put");
    let at = s.allocate_scratch(200).expect("room");
    assert_eq!(s.keep_scratch(at, at, 200, 7), Ok(()));
    assert_eq!(s.keep_scratch(at, at, 200, 7), Err(StoreError::KeyExists), "an id is kept once");
    s.put(&at.to_le_bytes(), b"a client key like the id", PutMode::CreateOnly, 1).expect("a client key of its own");
    let used = s.used_bytes();
    let mut s = restart(s);
    assert_checks(&s);
    assert_eq!(s.count(), 2, "the allocation is no pair");
    assert_eq!(visited_keys(&s).len(), 2);
    let mut scanned = 0;
    let mut cursor = 0;
    loop {
        cursor = s.scan(cursor, 1_000, &mut |_| scanned += 1);
        if cursor == 0 {
            break;
        }
    }
    assert_eq!(scanned, 2);
    assert_eq!(s.get(&at.to_le_bytes()), Some(&b"a client key like the id"[..]));
    let page = rustix::param::page_size() as u64;
    assert_eq!(at % page, 0, "scratch memory starts a page");
    let kept = s.kept_containing(at + 10, 20).expect("inside the allocation");
    assert_eq!((kept.id, kept.offset, kept.len), (at, at, page), "its whole page is kept");
    assert!(s.kept_containing(at + page - 10, 20).is_none(), "past its end");
    let other = s.allocate_scratch(200).expect("room");
    assert!(other >= at + page || other + page <= at, "the restart claimed the allocation's page again");
    s.free_scratch(other, 200);
    assert_eq!(s.release_kept(at), Ok(()));
    assert_eq!(s.release_kept(at), Err(StoreError::KeyNotFound));
    assert!(s.used_bytes() < used);
    let s = restart(s);
    assert_checks(&s);
    assert!(s.kept_containing(at + 10, 20).is_none());
    assert_eq!(s.count(), 2);
}

#[test]
fn modes_refuse_without_writing_or_committing() {
    let mut s = checked_store(1 << 16);
    let commits = s.memory().commits;
    assert_eq!(s.put(b"k", b"v", PutMode::UpdateOnly, 1), Err(StoreError::KeyNotFound));
    assert_eq!(s.memory().commits, commits);
    assert_eq!(s.count(), 0);
    s.put(b"k", b"v", PutMode::CreateOnly, 1).expect("absent key");
    assert_eq!(s.memory().commits, commits + 1);
    assert_eq!(s.put(b"k", b"w", PutMode::CreateOnly, 2), Err(StoreError::KeyExists));
    assert_eq!(s.erase(b"nope"), Err(StoreError::KeyNotFound));
    assert_eq!(s.memory().commits, commits + 1);
    assert_eq!(s.memory().bytes(), s.memory().committed_bytes());
    assert_eq!(s.get(b"k"), Some(&b"v"[..]));
    s.put(b"k", b"w", PutMode::UpdateOnly, 3).expect("present key");
    assert_eq!(s.get(b"k"), Some(&b"w"[..]));
}

#[test]
fn attributes_report_length_zlib_crc_and_write_time() {
    let mut s = checked_store(1 << 16);
    s.put(b"k", b"123456789", PutMode::Upsert, 7).expect("room");
    let attributes = s.attributes(b"k").expect("present");
    assert_eq!(attributes, ValueAttributes { length: 9, crc32: 0xCBF4_3926, write_time_ns: 7 });
    assert_eq!(s.attributes(b"missing"), None);
    let s = restart(s);
    assert_eq!(s.attributes(b"k").map(|a| a.write_time_ns), Some(7));
}

/// The accounting matches mapstore's exactly: a pool of 64 + 10 bytes takes one pair of 10 bytes.
#[test]
fn full_pool_refuses_growth_but_allows_shrinking() {
    let mut s = checked_store(ENTRY_OVERHEAD_BYTES + 10);
    s.put(b"k", b"123456789", PutMode::Upsert, 1).expect("exactly fits");
    let commits = s.memory().commits;
    assert_eq!(
        s.put(b"other", b"", PutMode::Upsert, 1),
        Err(StoreError::PoolFull { needed: 69, free: 0, capacity: 74 })
    );
    assert!(matches!(s.put(b"k", b"1234567890", PutMode::Upsert, 1), Err(StoreError::PoolFull { .. })));
    assert_eq!(s.memory().commits, commits);
    assert_eq!(s.get(b"k"), Some(&b"123456789"[..]));
    s.put(b"k", b"1", PutMode::Upsert, 1).expect("shrinking always fits");
    assert_eq!(s.used_bytes(), ENTRY_OVERHEAD_BYTES + 2);
    assert_checks(&s);
}

/// Values and keys on each side of every placement limit (inline, slab classes, extents), each
/// overwritten by every other size, with a check and a restart along the way.
#[test]
fn sizes_cross_inline_slab_and_extent_boundaries() {
    // A 24 KiB pool has 1 KiB slabs: classes up to 128 bytes, extents above.
    let sizes = [0, 1, 8, 9, 20, 21, 28, 29, 64, 128, 129, 4096, 5000];
    let keys: Vec<Vec<u8>> = [0usize, 20, 21, 300].iter().map(|len| value(*len, 0xa5)).collect();
    let mut s = checked_store(24 << 10);
    assert_eq!(s.heap.backing(128), allocator::Backing::Slot { class: 7 });
    assert_eq!(s.heap.backing(129), allocator::Backing::Extent { bytes: 192 });
    let mut model = BTreeMap::new();
    let mut time = 0;
    for key in &keys {
        for (i, old) in sizes.iter().enumerate() {
            for new in sizes {
                time += 1;
                let first = value(*old, i as u8);
                s.put(key, &first, PutMode::Upsert, time).expect("room");
                assert_eq!(s.get(key), Some(first.as_slice()));
                let second = value(new, time as u8);
                assert_eq!(s.put(key, &second, PutMode::UpdateOnly, time), Ok(PutOutcome::Replaced));
                assert_eq!(s.get(key), Some(second.as_slice()), "key {} from {old} to {new} bytes", key.len());
                model.insert(key.clone(), second);
            }
        }
        assert_checks(&s);
    }
    let s = restart(s);
    for (key, value) in &model {
        assert_eq!(s.get(key), Some(value.as_slice()));
    }
    let report = assert_checks(&s);
    assert_eq!(report.objects, keys.len() as u64);
}

/// Total buckets of every subtable.
fn buckets(s: &HStore<CheckedMemory>) -> u64 {
    s.subtables.iter().map(|subtable| subtable.buckets).sum()
}

/// The memory figures are what the region holds: the table at 64 bytes a bucket of every
/// subtable, whole slabs once values go out of line (and none once the last of them comes back
/// inline), values above the small limit as large extents; a restart rebuilds every figure.
#[test]
fn memory_usage_counts_the_table_slabs_and_large_values() {
    // A 1 MiB pool: 3 subtables (a 64-byte directory), 4 KiB slabs, objects up to 512 bytes in them.
    let mut s = checked_store(1 << 20);
    let (header_and_directory, slab) = (HEADER_BYTES + 64, 4096);
    assert_eq!(s.memory_usage(), MemoryUsage { other_bytes: header_and_directory, ..MemoryUsage::default() });
    let key = |i: u32| format!("memory-{i:04}").into_bytes();
    for i in 0..2000 {
        s.put(&key(i), &[7; 16], PutMode::CreateOnly, 0).expect("room");
    }
    let inline = s.memory_usage();
    assert_eq!(inline.table_buckets, buckets(&s));
    assert_eq!(inline.table_bytes, buckets(&s) * ENTRY_BYTES);
    let load = 2000.0 / inline.table_buckets as f64;
    assert!((0.6..=0.9).contains(&load), "load {load}");
    assert_eq!((inline.slab_bytes, inline.large_bytes, inline.other_bytes), (0, 0, header_and_directory));

    // 100 values of 100 bytes leave their entries for slots of the 112-byte class, 36 to a slab.
    for i in 0..100 {
        s.put(&key(i), &[8; 100], PutMode::UpdateOnly, 0).expect("room");
    }
    s.put(&key(100), &[9; 1000], PutMode::UpdateOnly, 0).expect("room");
    let out_of_line = s.memory_usage();
    assert_eq!(out_of_line.table_bytes, inline.table_bytes, "overwrites do not touch the table's size");
    assert_eq!((out_of_line.slab_bytes, out_of_line.large_bytes), (3 * slab, 1024));
    let mut s = restart(s);

    // Emptying a slab gives it back; a slab with one slot in use is still held whole.
    for i in 0..72 {
        s.put(&key(i), &[7; 16], PutMode::UpdateOnly, 0).expect("room");
    }
    assert_eq!(s.memory_usage().slab_bytes, slab);
    for i in 72..99 {
        s.erase(&key(i)).expect("present");
    }
    assert_eq!(s.memory_usage().slab_bytes, slab, "one value of 100 bytes holds its slab");
    s.erase(&key(99)).expect("present");
    s.erase(&key(100)).expect("present");
    let s = restart(s);
    let emptied = s.memory_usage();
    assert_eq!((emptied.slab_bytes, emptied.large_bytes), (0, 0));
    assert_eq!(emptied.table_bytes, inline.table_bytes, "subtables never shrink");
}

/// Hundreds of small pairs grow a subtable by a quarter at a time (64, 80, 100, ... buckets);
/// every pair is still found, the check passes, and a restart rebuilds the same state.
#[test]
fn subtables_grow_by_a_quarter_and_survive_restart() {
    let mut s = checked_store(48 << 10);
    assert_eq!(s.subtables.len(), 1);
    assert_eq!(buckets(&s), 0, "a subtable gets buckets with its first pair");
    let key = |i: u32| format!("key-{i}").into_bytes();
    s.put(&key(0), b"", PutMode::CreateOnly, 0).expect("room");
    assert_eq!(buckets(&s), 64);
    for i in 1..600 {
        s.put(&key(i), &i.to_le_bytes(), PutMode::CreateOnly, u64::from(i)).expect("room");
    }
    // 600 pairs need more than 600 * 10/9 = 667 buckets; growth by 5/4 lands on 757.
    assert!((667..=947).contains(&buckets(&s)), "{} buckets", buckets(&s));
    let report = assert_checks(&s);
    assert_eq!(report.objects, 600);
    let mut s = restart(s);
    for i in (0..600).step_by(3) {
        s.erase(&key(i)).expect("present");
    }
    for i in 1..600u32 {
        let expected = (i % 3 != 0).then(|| i.to_le_bytes());
        assert_eq!(s.get(&key(i)), expected.as_ref().map(|v| &v[..]));
    }
    assert_checks(&restart(s));
}

/// A growth is one transaction: the committed image just before the put that grew a subtable
/// opens with the pairs before it, the image just after with the new pair too; no other state
/// ever reaches a recovery. Checked at every growth of a load of 3000 pairs.
#[test]
fn every_growth_is_atomic() {
    let mut s = checked_store(1 << 20);
    let key = |i: u32| format!("growth-{i}").into_bytes();
    let mut growths = 0;
    for i in 0..3000u32 {
        let before = s.memory().committed_bytes().to_vec();
        let buckets_before = buckets(&s);
        s.put(&key(i), &i.to_le_bytes(), PutMode::CreateOnly, 0).expect("room");
        if buckets(&s) == buckets_before {
            continue;
        }
        growths += 1;
        let old = HStore::open(checked_from(&before)).expect("the image before the growth opens");
        assert_eq!((old.count(), old.get(&key(i))), (u64::from(i), None));
        if i > 0 {
            assert_eq!(old.get(&key(i - 1)), Some(&(i - 1).to_le_bytes()[..]));
        }
        let new = HStore::open(checked_from(s.memory().committed_bytes())).expect("the image after opens");
        assert_eq!((new.count(), new.get(&key(i))), (u64::from(i) + 1, Some(&i.to_le_bytes()[..])));
    }
    assert!(growths >= 10, "{growths} growths");
    assert_checks(&s);
}

/// Pool memory that counts the bytes each transaction declares and checks nothing else: fast
/// enough to load tens of thousands of pairs (CheckedMemory compares the whole region per commit).
#[derive(Debug)]
struct Declared {
    memory: VolatileMemory,
    declared: u64,
    last: u64,
    largest: u64,
}

impl PoolMemory for Declared {
    fn bytes(&self) -> &[u8] {
        self.memory.bytes()
    }

    fn modify(&mut self, offset: crate::persistence::Offset, len: usize) -> &mut [u8] {
        self.declared += len as u64;
        self.memory.modify(offset, len)
    }

    fn commit(&mut self) {
        self.last = self.declared;
        self.largest = self.largest.max(self.declared);
        self.declared = 0;
    }
}

/// No transaction changes more than the footprint the store announces for it, and none more than
/// one largest subtable (1 MiB) besides the pair itself: growth comes in bounded steps. Loading
/// 40 000 pairs takes several subtables through many growths.
#[test]
fn no_transaction_exceeds_its_footprint() {
    let spec = spec(4 << 20);
    let region = HStore::<VolatileMemory>::region_bytes_for(spec).expect("size");
    let memory = Declared { memory: VolatileMemory::zeroed(index(region)), declared: 0, last: 0, largest: 0 };
    let mut s = HStore::create_with_hash_key(memory, spec, HASH_KEY, Zeroed::Known).expect("fits");
    assert!(s.subtables.len() > 1);
    for i in 0..40_000u32 {
        let key = format!("bounded-{i}").into_bytes();
        let footprint = s.put_footprint(key.len() as u64, 16);
        s.put(&key, &[7; 16], PutMode::CreateOnly, 0).expect("room");
        let declared = s.memory().last;
        assert!(declared <= footprint.bytes, "put {i} declared {declared} bytes, more than its footprint");
    }
    assert!(s.memory().largest <= BUCKETS_MAX * 64 + 64 + 16 + 32, "{}", s.memory().largest);
    assert!(s.memory().largest > 200_000, "growths rewrote sizable subtables: {}", s.memory().largest);
    let footprint = s.erase_footprint();
    s.erase(b"bounded-7").expect("present");
    assert!(s.memory().last <= footprint.bytes);
    // Overwrites across the inline, slab and extent sizes, either way: no growth.
    for (i, len) in [0usize, 16, 40, 700, 5_000, 12, 9_000, 3].into_iter().enumerate() {
        let key = format!("bounded-{}", 100 + i).into_bytes();
        let footprint = s.update_footprint(key.len() as u64, len as u64);
        s.put(&key, &vec![9; len], PutMode::UpdateOnly, 0).expect("room");
        let declared = s.memory().last;
        assert!(
            declared <= footprint.bytes,
            "an overwrite of {len} bytes declared {declared}, more than {footprint:?}"
        );
    }
    s.check().expect("consistent");
}

/// A pool sized by its expected objects never grows while it fills to them, and its index stays
/// dense: well under 80 bytes of table per pair.
#[test]
fn a_sized_pool_fills_to_its_hint_without_growing() {
    let pairs = 50_000u64;
    let spec = PoolSpec { size_bytes: pairs * (ENTRY_OVERHEAD_BYTES + 8 + 16), expected_objects: pairs };
    let region = HStore::<VolatileMemory>::region_bytes_for(spec).expect("size");
    let mut s = HStore::create_with_hash_key(VolatileMemory::zeroed(index(region)), spec, HASH_KEY, Zeroed::Known)
        .expect("fits");
    for i in 0..pairs {
        s.put(&i.to_le_bytes(), &[1; 16], PutMode::CreateOnly, 0).expect("room");
    }
    let initial = s.header.initial_buckets;
    assert!(s.subtables.iter().all(|subtable| subtable.buckets == initial), "no subtable grew");
    let table_bytes: u64 = s.subtables.iter().map(|subtable| subtable.bytes()).sum();
    assert!(table_bytes / pairs < 80, "{} bytes of table per pair", table_bytes / pairs);
    let report = s.check().expect("consistent");
    assert_eq!(report.out_of_line_objects, 0, "8-byte keys and 16-byte values are stored inline");
}

/// A 16-byte key and a 16-byte value live in their entry: no slab slot.
#[test]
fn sixteen_byte_keys_and_values_are_inline() {
    let mut s = checked_store(1 << 20);
    for i in 0..1000u128 {
        s.put(&i.to_le_bytes(), &(!i).to_le_bytes(), PutMode::CreateOnly, 0).expect("room");
    }
    let report = assert_checks(&s);
    assert_eq!((report.objects, report.out_of_line_objects, report.slabs), (1000, 0, 0));
}

/// Scans in hash order: every key present for the whole scan is returned at least once, while
/// puts (which grow subtables) and erases happen between the calls.
#[test]
fn a_scan_returns_every_key_present_throughout_across_growth() {
    let mut s = checked_store(4 << 20);
    crate::store::scan_checks::keys_present_throughout_are_visited(&mut s);
    let buckets_after = buckets(&s);
    assert!(buckets_after > 2000 * 8 / 7 * 2, "the table grew during the scan ({buckets_after} buckets)");
    assert_eq!(s.scan(u64::MAX, 10, &mut |_| {}), 0, "a cursor past the last subtable ends the scan");
}

/// Every key `for_each_key` visits, sorted but not deduplicated, so a key visited twice shows.
fn visited_keys(s: &dyn Store) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    s.for_each_key(&mut |key| keys.push(key.to_vec()));
    keys.sort();
    keys
}

/// `for_each_key` visits every live key exactly once, whether the key is inline or out of line,
/// through many subtable growths, after erasures that leave free entries between used ones, and
/// after a restart.
#[test]
fn for_each_key_visits_every_key_once_through_growth_and_erasure() {
    let mut s = checked_store(64 << 10);
    // 4 to 43 bytes: with an 8-byte value, keys over 32 bytes are out of line.
    let key = |i: u32| {
        let mut key = i.to_le_bytes().to_vec();
        key.resize(4 + i as usize % 40, b'k');
        key
    };
    let mut model = BTreeSet::new();
    for i in 0..600 {
        s.put(&key(i), &u64::from(i).to_le_bytes(), PutMode::CreateOnly, 0).expect("room");
        model.insert(key(i));
    }
    assert!(buckets(&s) > 600 * 8 / 7, "the table grew");
    let out_of_line = model
        .iter()
        .filter(|k| {
            let (index, _, bucket) = s.locate(k);
            let bucket = bucket.expect("present");
            s.subtables[index].occupant(s.memory().bytes(), bucket).key_at().is_some()
        })
        .count();
    assert!(out_of_line > 100, "{out_of_line} keys out of line");
    assert_eq!(visited_keys(&s), model.iter().cloned().collect::<Vec<_>>());
    for i in (0..600).step_by(3) {
        s.erase(&key(i)).expect("present");
        model.remove(&key(i));
    }
    assert_eq!(visited_keys(&s), model.iter().cloned().collect::<Vec<_>>());
    let s = restart(s);
    assert_eq!(visited_keys(&s), model.iter().cloned().collect::<Vec<_>>());
    assert_eq!(s.count(), model.len() as u64);
}

/// The largest table the accounting allows: the pool filled with pairs of a 2-byte key and an
/// empty value, every one admitted by the accounting stored, the next refused.
#[test]
fn tiny_pairs_fill_the_pool_exactly() {
    let size_bytes = 16 << 10;
    let mut s = checked_store(size_bytes);
    let pairs = size_bytes / (ENTRY_OVERHEAD_BYTES + 2);
    for i in 0..pairs {
        s.put(&(i as u16).to_le_bytes(), b"", PutMode::Upsert, 0).expect("the accounting admits it");
    }
    assert!(matches!(
        s.put(&(pairs as u16).to_le_bytes(), b"", PutMode::Upsert, 0),
        Err(StoreError::PoolFull { needed: 66, free: 16, .. })
    ));
    let report = assert_checks(&s);
    assert_eq!(report.objects, pairs);
    restart(s);
}

/// Erasing all but one pair per slab, class after class, pins slabs; once the heap has no extent
/// left for the largest value the accounting admits, that put is refused as `PoolFull` (with
/// `free >= needed`), nothing is written or committed, and the store stays consistent. Freeing
/// the heap again lets it through.
#[test]
fn a_heap_without_room_refuses_before_writing() {
    let mut s = checked_store(16 << 10);
    let mut serial = 0u32;
    // 1 KiB slabs; values of these sizes with 4-byte keys are out of line, one per slot.
    for class_bytes in [128usize, 112, 96, 80, 64, 48] {
        let slots = 1024 / class_bytes;
        let mut keys = Vec::new();
        loop {
            serial += 1;
            let key = serial.to_le_bytes();
            match s.put(&key, &value(class_bytes, 1), PutMode::Upsert, 0) {
                Ok(_) => keys.push(key),
                Err(StoreError::PoolFull { needed, free, .. }) => {
                    assert!(needed > free, "small values fit until the accounting is full");
                    break;
                }
                Err(other) => panic!("{other}"),
            }
        }
        for (i, key) in keys.iter().enumerate() {
            if i % slots != 0 {
                s.erase(key).expect("present");
            }
        }
    }
    let taken = s.heap.take_all_free();
    // The largest value the accounting admits needs one extent of its size.
    let big = (s.capacity_bytes() - s.used_bytes() - ENTRY_OVERHEAD_BYTES - 4) as usize;
    let commits = s.memory().commits;
    match s.put(b"big!", &value(big, 2), PutMode::Upsert, 0) {
        Err(StoreError::PoolFull { needed, free, .. }) => assert!(free >= needed, "admitted by the accounting"),
        other => panic!("a heap without room must refuse: {other:?}"),
    }
    assert_eq!(s.memory().commits, commits);
    assert_eq!(s.memory().bytes(), s.memory().committed_bytes());
    assert_eq!(s.get(b"big!"), None);
    for (offset, bytes) in taken {
        s.heap.free_segment(offset, bytes);
    }
    assert_checks(&s);
    s.put(b"big!", &value(big, 2), PutMode::Upsert, 0).expect("room again");
    assert_checks(&restart(s));
}

/// When the heap has no room for a grown subtable, a subtable past its load limit still takes
/// pairs into free entries within reach, and refuses (writing nothing) only when none is left.
/// Once the heap has room again, the subtable grows as usual.
#[test]
fn a_table_that_cannot_grow_fills_in_place() {
    let mut s = checked_store(16 << 10);
    s.put(b"first", b"", PutMode::CreateOnly, 0).expect("the subtable gets its first buckets");
    let taken = s.heap.take_all_free();
    let mut stored = 0u16;
    loop {
        let commits = s.memory().commits;
        match s.put(&stored.to_le_bytes(), b"", PutMode::CreateOnly, 0) {
            Ok(_) => stored += 1,
            Err(StoreError::PoolFull { needed, free, .. }) => {
                assert!(free >= needed, "the accounting has room; the table does not");
                assert_eq!(s.memory().commits, commits);
                assert_eq!(s.memory().bytes(), s.memory().committed_bytes());
                break;
            }
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(buckets(&s), 64);
    assert!(stored + 1 > 57, "past 9/10 of 64 buckets: {stored}");
    for (offset, bytes) in taken {
        s.heap.free_segment(offset, bytes);
    }
    assert_checks(&s);
    s.put(&stored.to_le_bytes(), b"", PutMode::CreateOnly, 0).expect("the table grows now");
    assert_eq!(buckets(&s), 80);
    assert_checks(&restart(s));
}

/// `create` with a random hash key: the key is kept in the header, so a restart finds the pairs.
#[test]
fn random_hash_key_persists() {
    let region = HStore::<CheckedMemory>::region_bytes_for(spec(1 << 16)).expect("small pool");
    let mut s = HStore::create(CheckedMemory::zeroed(index(region)), spec(1 << 16)).expect("fits");
    s.put(b"key", b"value", PutMode::Upsert, 0).expect("room");
    let s = restart(s);
    assert_eq!(s.get(b"key"), Some(&b"value"[..]));
}

#[test]
fn create_refuses_a_short_region() {
    let needed = HStore::<VolatileMemory>::region_bytes_for(spec(1 << 16)).expect("small pool");
    let short = VolatileMemory::zeroed(index(needed) - 1);
    let error = HStore::create(short, spec(1 << 16)).expect_err("one byte short");
    assert_eq!(error, CreateError::RegionTooSmall { size_bytes: 1 << 16, needed, actual: needed - 1 });
    let larger = VolatileMemory::zeroed(index(needed) + 1000);
    let mut s = HStore::create(larger, spec(1 << 16)).expect("a larger region is fine");
    s.put(b"k", b"v", PutMode::Upsert, 0).expect("room");
    let s = HStore::open(VolatileMemory::from_bytes(s.into_memory().into_bytes())).expect("reopens");
    assert_eq!(s.get(b"k"), Some(&b"v"[..]));
}

/// Flipping any byte of the header page makes `open` refuse, naming an offset.
#[test]
fn open_refuses_a_corrupt_header_naming_the_offset() {
    let mut s = checked_store(1 << 16);
    s.put(b"k", b"v", PutMode::Upsert, 0).expect("room");
    let image = s.memory().committed_bytes().to_vec();
    for byte in 0..index(HEADER_BYTES) {
        let mut bad = image.clone();
        bad[byte] ^= 0x10;
        let error = HStore::open(VolatileMemory::from_bytes(bad)).expect_err("corrupt header");
        assert!(error.to_string().contains("at offset 0x"), "byte {byte}: {error}");
    }
    let mut bad = image.clone();
    bad[0] = b'X';
    assert!(matches!(HStore::open(VolatileMemory::from_bytes(bad)), Err(OpenError::BadMagic { offset: 0, .. })));
    let mut bad = image.clone();
    bad[20] ^= 1;
    let error = HStore::open(VolatileMemory::from_bytes(bad)).expect_err("checksum");
    assert!(matches!(error, OpenError::HeaderChecksum { offset: 12, .. }), "{error}");
    let mut longer = image.clone();
    longer.extend_from_slice(&[0; 64]);
    let error = HStore::open(VolatileMemory::from_bytes(longer)).expect_err("length differs");
    assert!(matches!(error, OpenError::InvalidField { offset: 16, .. }), "{error}");
    assert!(HStore::open(VolatileMemory::from_bytes(image)).is_ok());
}

/// Damage to the table is refused by `open` with the offset of the damaged entry, and reported by
/// `check` on a live store.
#[test]
fn damaged_entries_are_found_by_open_and_check() {
    let mut s = checked_store(1 << 16);
    s.put(b"small", b"v", PutMode::Upsert, 0).expect("room");
    s.put(b"large", &[7; 600], PutMode::Upsert, 0).expect("room");
    s.put(b"other", &[8; 600], PutMode::Upsert, 0).expect("room");
    let entry = |s: &HStore<CheckedMemory>, key: &[u8]| {
        let (index, _, bucket) = s.locate(key);
        (s.subtables[index], bucket.expect("present"))
    };
    let image = s.memory().committed_bytes().to_vec();
    let offset_of = |(subtable, bucket): (Subtable, u64)| subtable.entry_offset(bucket);
    let small_entry = offset_of(entry(&s, b"small"));
    let large_entry = offset_of(entry(&s, b"large"));
    let other_entry = offset_of(entry(&s, b"other"));

    // A flipped low bit of the stored hash (which leaves the home bucket as it is).
    let mut bad = image.clone();
    bad[index(small_entry) + 4] ^= 1;
    let error = HStore::open(VolatileMemory::from_bytes(bad)).expect_err("hash mismatch");
    assert!(matches!(error, OpenError::Corrupt { offset, .. } if offset == small_entry), "{error}");
    assert!(error.to_string().contains("hash part"), "{error}");

    // Two values pointing at the same space.
    let value_reference = |entry: u64| index(entry) + PAYLOAD_OFFSET + 32;
    let mut bad = image.clone();
    let shared: [u8; 8] = bad[value_reference(large_entry)..value_reference(large_entry) + 8].try_into().expect("8");
    bad[value_reference(other_entry)..value_reference(other_entry) + 8].copy_from_slice(&shared);
    let error = HStore::open(VolatileMemory::from_bytes(bad)).expect_err("overlap");
    assert!(error.to_string().contains("overlaps") || error.to_string().contains("shares its slot"), "{error}");

    // A cleared hop bit, under a live store: check reports it, naming the entry.
    let (subtable, bucket) = entry(&s, b"small");
    let home = subtable.home(layout::tag_of(s.header.hash(b"small")));
    let distance = subtable.distance(home, bucket);
    s.update_hop(subtable, home, |hop| hop & !(1 << distance));
    s.memory.commit();
    let problems = s.check().expect_err("hop bit missing");
    assert!(problems.iter().any(|p| p.contains("not listed in the hop bitmap")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains(&format!("{small_entry:#x}"))), "{problems:?}");
}

#[derive(Debug, Clone)]
enum Op {
    Put { key: u16, len: usize, fill: u8, mode: u8 },
    Erase { key: u16 },
    Restart,
    Check,
}

/// Key `index`: empty for 0, else 2 to 40 bytes, so keys fall on both sides of the inline limits
/// (32 and 40 bytes); the first two bytes make every key distinct.
fn key_bytes(index: u16) -> Vec<u8> {
    if index == 0 {
        return Vec::new();
    }
    let mut key = index.to_le_bytes().to_vec();
    key.resize(2 + (usize::from(index) * 7) % 39, b'k' ^ index as u8);
    key
}

/// Value lengths: mostly around the inline limit, then slab classes, sometimes extents.
fn value_len() -> impl Strategy<Value = usize> {
    prop_oneof![6 => 0usize..=40, 2 => 0usize..=300, 1 => 0usize..=3000]
}

fn op(keys: u16) -> impl Strategy<Value = Op> {
    prop_oneof![
        14 => (0..keys, value_len(), any::<u8>(), 0u8..3).prop_map(|(key, len, fill, mode)| Op::Put { key, len, fill, mode }),
        5 => (0..keys).prop_map(|key| Op::Erase { key }),
        1 => Just(Op::Restart),
        1 => Just(Op::Check),
    ]
}

/// Mostly inserts of small pairs, so the live set grows through several table doublings.
fn growing_op(keys: u16) -> impl Strategy<Value = Op> {
    let len = prop_oneof![12 => 0usize..=24, 1 => 0usize..=300];
    let mode = prop_oneof![3 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)];
    prop_oneof![
        40 => (0..keys, len, any::<u8>(), mode).prop_map(|(key, len, fill, mode)| Op::Put { key, len, fill, mode }),
        4 => (0..keys).prop_map(|key| Op::Erase { key }),
        1 => Just(Op::Restart),
        1 => Just(Op::Check),
    ]
}

/// The model: each key's value and write time.
type Model = BTreeMap<Vec<u8>, (Vec<u8>, u64)>;

fn model_used(model: &Model) -> u64 {
    model.iter().map(|(k, (v, _))| charge(k.len() as u64, v.len() as u64)).sum()
}

fn assert_matches_model(s: &HStore<CheckedMemory>, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(s.count(), model.len() as u64);
    prop_assert_eq!(s.used_bytes(), model_used(model));
    prop_assert_eq!(visited_keys(s), model.keys().cloned().collect::<Vec<_>>(), "for_each_key visits each key once");
    for (key, (value, time)) in model {
        prop_assert_eq!(s.get(key), Some(value.as_slice()));
        prop_assert_eq!(s.attributes(key).map(|a| (a.length, a.write_time_ns)), Some((value.len() as u64, *time)));
    }
    Ok(())
}

/// Runs `ops` against a store of `size_bytes` and a model, comparing after every step. Returns how
/// many puts the accounting admitted but the heap refused.
fn run_model(size_bytes: u64, hash_key: [u64; 2], ops: Vec<Op>) -> Result<u32, TestCaseError> {
    let region = HStore::<CheckedMemory>::region_bytes_for(spec(size_bytes)).expect("small pool");
    let mut s =
        HStore::create_with_hash_key(CheckedMemory::zeroed(index(region)), spec(size_bytes), hash_key, Zeroed::Known)
            .expect("fits");
    let mut model = Model::new();
    let mut refused_by_heap = 0;
    for (step, op) in ops.into_iter().enumerate() {
        let commits = s.memory().commits;
        let time = step as u64 + 1;
        let committed = match op {
            Op::Put { key, len, fill, mode } => {
                let key = key_bytes(key);
                let value = value(len, fill);
                let mode = [PutMode::Upsert, PutMode::CreateOnly, PutMode::UpdateOnly][usize::from(mode)];
                let old = model.get(&key).map(|(v, _)| charge(key.len() as u64, v.len() as u64));
                let new = charge(key.len() as u64, value.len() as u64);
                let used = model_used(&model);
                let expected = match (mode, old) {
                    (PutMode::CreateOnly, Some(_)) => Err(StoreError::KeyExists),
                    (PutMode::UpdateOnly, None) => Err(StoreError::KeyNotFound),
                    (_, old) if new > old.unwrap_or(0) && used - old.unwrap_or(0) + new > size_bytes => {
                        Err(StoreError::PoolFull {
                            needed: new - old.unwrap_or(0),
                            free: size_bytes - used,
                            capacity: size_bytes,
                        })
                    }
                    (_, Some(_)) => Ok(PutOutcome::Replaced),
                    (_, None) => Ok(PutOutcome::Inserted),
                };
                let result = s.put(&key, &value, mode, time);
                match (&result, &expected) {
                    (Err(StoreError::PoolFull { needed, free, .. }), Ok(_)) => {
                        // Admitted by the accounting, refused by a fragmented heap.
                        prop_assert!(free >= needed, "{:?}", result);
                        refused_by_heap += 1;
                    }
                    _ => prop_assert_eq!(&result, &expected),
                }
                if result.is_ok() {
                    model.insert(key, (value, time));
                }
                result.is_ok()
            }
            Op::Erase { key } => {
                let key = key_bytes(key);
                let expected = if model.remove(&key).is_some() { Ok(()) } else { Err(StoreError::KeyNotFound) };
                let result = s.erase(&key);
                prop_assert_eq!(&result, &expected);
                result.is_ok()
            }
            Op::Restart => {
                s = restart(s);
                assert_matches_model(&s, &model)?;
                continue;
            }
            Op::Check => {
                let report = assert_checks(&s);
                prop_assert_eq!(report.objects, model.len() as u64);
                false
            }
        };
        prop_assert_eq!(s.memory().commits, commits + u64::from(committed), "exactly one commit per change");
        if !committed {
            prop_assert!(s.memory().bytes() == s.memory().committed_bytes(), "a refused operation wrote");
        }
        assert_matches_model(&s, &model)?;
    }
    assert_checks(&s);
    let s = restart(s);
    assert_matches_model(&s, &model)?;
    assert_checks(&s);
    Ok(refused_by_heap)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    /// The store agrees with a BTreeMap model after every step (values, write times, counts, used
    /// bytes, every put mode, the accounting's PoolFull), writes only declared ranges, commits
    /// exactly once per change, passes `check`, and survives restarts at random points and at the
    /// end with identical contents and allocator state. Hundreds of keys on a 64-bucket start
    /// grow the subtable many times.
    #[test]
    fn behaves_like_a_map(hash_key: [u64; 2], ops in proptest::collection::vec(op(400), 1..500)) {
        run_model(32 << 10, hash_key, ops)?;
    }

    /// The same on a pool small enough to be full most of the time, where refusals, shrinking
    /// overwrites and reuse of freed space dominate.
    #[test]
    fn behaves_like_a_map_when_nearly_full(hash_key: [u64; 2], ops in proptest::collection::vec(op(60), 1..300)) {
        run_model(8 << 10, hash_key, ops)?;
    }

    /// A pool that is only filled never refuses a put its accounting admits: the region rule
    /// leaves room for the table at its lowest load plus rounded payloads.
    #[test]
    fn filling_never_refuses_before_the_accounting(
        hash_key: [u64; 2],
        pairs in proptest::collection::vec((0usize..60, value_len()), 1..600),
    ) {
        let size_bytes = 1 << 16;
        let region = HStore::<VolatileMemory>::region_bytes_for(spec(size_bytes)).expect("small pool");
        let mut s = HStore::create_with_hash_key(VolatileMemory::zeroed(index(region)), spec(size_bytes), hash_key, Zeroed::Known)
            .expect("fits");
        let mut used = 0;
        for (i, (key_len, value_len)) in pairs.into_iter().enumerate() {
            let mut key = (i as u32).to_le_bytes().to_vec();
            key.resize(4 + key_len, 0);
            let new = charge(key.len() as u64, value_len as u64);
            let result = s.put(&key, &value(value_len, 3), PutMode::CreateOnly, 0);
            if used + new <= size_bytes {
                prop_assert_eq!(result, Ok(PutOutcome::Inserted));
                used += new;
            } else {
                let refused_by_accounting = matches!(result, Err(StoreError::PoolFull { needed, free, .. }) if needed > free);
                prop_assert!(refused_by_accounting, "{:?}", result);
            }
        }
        prop_assert!(s.check().is_ok(), "{:?}", s.check());
    }
}

proptest! {
    // Each case runs about 500 operations; CheckedMemory compares the whole region at every commit.
    #![proptest_config(ProptestConfig { cases: 4, ..ProptestConfig::default() })]

    /// Like `behaves_like_a_map`, while the live set grows past 400 pairs: a dozen growths (64 to
    /// 600 buckets), with restarts and checks between them.
    #[test]
    fn behaves_like_a_map_through_table_growth(
        hash_key: [u64; 2],
        ops in proptest::collection::vec(growing_op(600), 450..600),
    ) {
        run_model(28 << 10, hash_key, ops)?;
    }
}

/// `peek` finds in place, with no store open, exactly what the store holds: every stored value,
/// nothing for absent keys or the engine's own allocations' keys, and nothing (never a panic)
/// from a region whose header or directory is damaged.
#[test]
fn peek_reads_what_the_store_holds() {
    let mut store = checked_store(1 << 20);
    let mut model = BTreeMap::new();
    for i in 0..2_000u32 {
        let (key, value) = (format!("key-{i}").into_bytes(), format!("value-{}", i * 7).into_bytes());
        store.put(&key, &value, PutMode::Upsert, 0).expect("put");
        model.insert(key, value);
    }
    for i in (0..2_000u32).step_by(3) {
        let key = format!("key-{i}").into_bytes();
        store.erase(&key).expect("erase");
        model.remove(&key);
    }
    let bytes = store.memory().bytes();
    for i in 0..2_000u32 {
        let key = format!("key-{i}").into_bytes();
        assert_eq!(peek(bytes, &key), model.get(&key).map(Vec::as_slice), "key-{i}");
    }
    assert_eq!(peek(bytes, b"never stored"), None);
    assert_eq!(peek(&bytes[..bytes.len() - 1], b"key-1"), None, "a region of the wrong size");
    let mut damaged = bytes.to_vec();
    let header = index(HEADER_BYTES);
    for byte in &mut damaged[header..header + 4096] {
        *byte ^= 0x5a;
    }
    for i in 0..2_000u32 {
        let _ = peek(&damaged, format!("key-{i}").as_bytes());
    }
    let mut zeroed = bytes.to_vec();
    zeroed[..header].fill(0);
    assert_eq!(peek(&zeroed, b"key-1"), None, "no header");
}
