//! Power cuts in the middle of a table growth, on the `ssd` backing.
//!
//! A growth is one put whose transaction rewrites a whole subtable (up to 1 MiB) and its
//! directory entry: one log record spanning many 512-byte sectors, so a power cut can leave any
//! part of it on the device. These tests interrupt the commit holding a growth on the simulated
//! log disk ([`SimStorage`], which keeps any subset of the unsynced sector writes, one of them
//! torn), recover the pool from what the disk kept (log replay into fresh memory, then
//! [`HStore::open`], as a restart does), and compare it with a model of the acknowledged puts.
//! Each recovered pool must pass the hstore checker and hold exactly what a prefix of the log's
//! records says; the run then carries on from the recovered pool, so every later growth happens
//! on a pool that has been through a cut.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use proptest::prelude::*;

use super::*;
use crate::hstore::{HStore, Zeroed};
use crate::persistence::wal::sim::{Cut, SimStorage};
use crate::persistence::wal::{recover, LogStorage, Recovered, WalConfig, WalWriter};
use crate::persistence::PoolMemory;
use crate::store::{PoolSpec, PutMode, Store};

/// Segments for the test of every step: smaller than the later growth records (a subtable of
/// 1 184 buckets is a 74 KiB record), so that some interrupted commits start a segment of their
/// own, sized to fit.
const STEPS_CONFIG: WalConfig = WalConfig { segment_bytes: 64 * 1024 };

/// Segments for the random test: larger than any of its records (its 2 500 changes leave every
/// subtable under 2 048 buckets, 128 KiB), so every segment before the tail has this size (see
/// [`tail_segment`]); growth records of tens of KiB still often leave no room for the rest of
/// their group, which then goes to the next segment.
const RANDOM_CONFIG: WalConfig = WalConfig { segment_bytes: 128 * 1024 };

/// Three subtables (a 1 MiB pool admits 16 384 pairs, one subtable per 7 168 or part of it),
/// each starting at 64 buckets (no sizing hint), so a few hundred pairs take each through
/// several growths.
const SPEC: PoolSpec = PoolSpec { size_bytes: 1 << 20, expected_objects: 1 };

const POOL_ID: u64 = 1;

const HASH_KEY: [u64; 2] = [0x6772_6f77_7468_0001, 0x6772_6f77_7468_0002];

/// A pool's contents: key to value.
type Pairs = BTreeMap<Vec<u8>, Vec<u8>>;

/// A pool on a log on the simulated disk, as a shard holds it.
struct LoggedPool {
    disk: SimStorage,
    log: SharedLog<SimStorage>,
    store: HStore<LoggedMemory<SimStorage>>,
}

impl LoggedPool {
    /// A new, empty pool on an empty log, its creation committed. The hash key is chosen so
    /// that a run is reproducible.
    fn create(hash_key: [u64; 2], config: WalConfig) -> LoggedPool {
        let disk = SimStorage::default();
        let recovered = recover(&disk, 1, |_, _| {}).expect("an empty log");
        let log = SharedLog::new(WalWriter::open(disk.clone(), config, &recovered).expect("open the log"));
        let region_bytes = HStore::<SharedRegion>::region_bytes_for(SPEC).expect("size").next_multiple_of(4096);
        let descriptor = PoolDescriptor {
            id: POOL_ID,
            name: "growth".into(),
            spec: SPEC,
            region_bytes,
            indexed: false,
            async_default: false,
            plugins: Vec::new(),
            owner: None,
        };
        let pages = Arc::new(Mutex::new(PageTracker::try_new(region_bytes).expect("small")));
        let region = SharedRegion::zeroed("growth", region_bytes).expect("memfd");
        let memory = LoggedMemory::for_new_pool(descriptor, region, log.clone(), pages);
        let store = HStore::create_with_hash_key(memory, SPEC, hash_key, Zeroed::Known).expect("create");
        log.commit_now().expect("commit the pool's creation");
        LoggedPool { disk, log, store }
    }

    /// The pool as a restart on `disk` recovers it, with its log open for more writes.
    fn restart(disk: SimStorage, config: WalConfig, context: &str) -> LoggedPool {
        let (pool, wal) = load(&disk, context);
        let log = SharedLog::new(WalWriter::open(disk.clone(), config, &wal).expect("reopen the log"));
        let memory = LoggedMemory::new(POOL_ID, pool.region, log.clone(), pool.pages);
        let store = HStore::open(memory).unwrap_or_else(|e| panic!("{context}: the recovered pool does not open: {e}"));
        LoggedPool { disk, log, store }
    }

    /// Puts `key`, leaving its record appended but not committed; true if the put grew a
    /// subtable (rather than giving one its first buckets, a rewrite of an empty table).
    fn put_growing(&mut self, key: &[u8], value: &[u8]) -> bool {
        let before = self.store.subtable_buckets();
        self.store.put(key, value, PutMode::Upsert, 1).expect("room in the pool");
        before.iter().zip(self.store.subtable_buckets()).any(|(old, new)| *old > 0 && new != *old)
    }

    /// Interrupts the commit of every record appended since the last one: its sector writes
    /// reach the device's cache, its sync fails. Returns the disk as it would be had every one
    /// of them reached the medium.
    fn interrupt_commit(&self) -> SimStorage {
        self.disk.fail_syncs_after(0);
        assert!(self.log.commit_now().is_err(), "the commit is interrupted");
        let sectors = self.disk.unsynced_sectors();
        assert!(sectors > 0, "the interrupted commit wrote sectors");
        self.disk.crash(&Cut::prefix(sectors, None))
    }
}

/// A checkpoint directory that never exists: these logs are replayed from their first record.
fn no_checkpoint() -> PathBuf {
    std::env::temp_dir().join(format!("ferrite-growth-tests-no-checkpoint-{}", std::process::id()))
}

/// Recovery's reading of `disk`: the pool's memory after log replay, and where the log ends.
fn load(disk: &SimStorage, context: &str) -> (RecoveredPool, Recovered) {
    let loaded = recovery::load_shard_with(&no_checkpoint(), disk, ReplayMode::Plain)
        .unwrap_or_else(|e| panic!("{context}: recovery fails: {e}"));
    let pool = loaded.pools.into_iter().find(|pool| pool.descriptor.id == POOL_ID);
    (pool.unwrap_or_else(|| panic!("{context}: the pool, created before any cut, is gone")), loaded.wal)
}

/// The pool recovered from `disk` (read only): it must open and pass the hstore checker.
fn recovered_contents(disk: &SimStorage, context: &str) -> Pairs {
    let (pool, _) = load(disk, context);
    let store =
        HStore::open(pool.region).unwrap_or_else(|e| panic!("{context}: the recovered pool does not open: {e}"));
    assert_consistent(&store, context);
    contents(&store)
}

fn assert_consistent<M: PoolMemory>(store: &HStore<M>, context: &str) {
    if let Err(problems) = store.check() {
        panic!("{context}: the hstore checker fails:\n{}", problems.join("\n"));
    }
}

/// The pool's pairs, read back through the store; every key is visited once.
fn contents<M: PoolMemory>(store: &HStore<M>) -> Pairs {
    let mut keys = Vec::new();
    store.for_each_key(&mut |key| keys.push(key.to_vec()));
    assert_eq!(keys.len() as u64, store.count(), "every pair is visited once");
    keys.into_iter()
        .map(|key| {
            let value = store.get(&key).expect("a visited key is found").to_vec();
            (key, value)
        })
        .collect()
}

/// How `found` differs from `expected`, briefly.
fn difference(found: &Pairs, expected: &Pairs) -> String {
    let name = |key: &Vec<u8>| String::from_utf8_lossy(key).into_owned();
    let missing: Vec<String> = expected.keys().filter(|k| !found.contains_key(*k)).take(5).map(name).collect();
    let extra: Vec<String> = found.keys().filter(|k| !expected.contains_key(*k)).take(5).map(name).collect();
    let changed: Vec<String> =
        found.iter().filter(|(k, v)| expected.get(*k).is_some_and(|e| e != *v)).take(5).map(|(k, _)| name(k)).collect();
    format!(
        "{} pairs recovered, {} expected; missing {missing:?}, unexpected {extra:?}, other values {changed:?}",
        found.len(),
        expected.len()
    )
}

/// Whether `disk` holds every byte `whole` holds, file by file: then every record of the
/// interrupted commit reached the medium intact (a byte that differs is a record's, or a new
/// segment's header, and losing either loses the record). Files only one of them has are spare
/// segments, zero-filled in the background, which hold no record.
fn holds_all_of(disk: &SimStorage, whole: &SimStorage) -> bool {
    let names = whole.list().expect("list");
    disk.list()
        .expect("list")
        .iter()
        .filter(|name| names.contains(name))
        .all(|name| disk.read_file(name) == whole.read_file(name))
}

fn key(i: usize) -> Vec<u8> {
    format!("growth-{i:05}").into_bytes()
}

/// A value naming its key and version, inline (up to 40 bytes with the key), in a slab slot, or
/// (rarely) an extent of its own, by `len`.
fn value(i: usize, version: u64, len: usize) -> Vec<u8> {
    let mut value = format!("{i}/{version}/").into_bytes();
    value.extend((0..len).map(|b| (b as u64 ^ version ^ i as u64) as u8));
    value
}

/// The cuts tried on each growth's interrupted commit, named for the failure message: nothing
/// kept; prefixes of its sector writes (as a device that persists in order leaves them), whole
/// and torn; every sector but one; scattered sectors (as one that reorders leaves them); all of
/// them, whole and with the last torn.
fn cuts_through(disk: &SimStorage) -> Vec<(String, Cut)> {
    let n = disk.unsynced_sectors();
    let all_but = |hole: usize| Cut { keep: (0..n).map(|i| i != hole).collect(), tear: None };
    let mut cuts = vec![("nothing".to_string(), Cut::default())];
    let mut prefixes = vec![1, n / 2, n - 1];
    prefixes.dedup();
    for kept in prefixes.into_iter().filter(|kept| (1..n).contains(kept)) {
        cuts.push((format!("the first {kept} of {n} sectors"), Cut::prefix(kept, None)));
    }
    for kept in [1, n / 2 + 1, n] {
        let len = disk.unsynced_sector_len(kept - 1);
        for at in [1, len / 2] {
            cuts.push((
                format!("the first {kept} of {n} sectors, the last torn after {at} bytes"),
                Cut::prefix(kept, Some(at)),
            ));
        }
    }
    for hole in [0, n / 2, n - 1] {
        cuts.push((format!("all {n} sectors but sector {hole}"), all_but(hole)));
    }
    cuts.push((
        format!("only sector {} of {n}", n - 1),
        Cut { keep: (0..n).map(|i| i == n - 1).collect(), tear: None },
    ));
    cuts.push((format!("the odd sectors of {n}"), Cut { keep: (0..n).map(|i| i % 2 == 1).collect(), tear: None }));
    cuts.push((format!("all {n} sectors"), Cut::prefix(n, None)));
    cuts
}

/// A growth interrupted at every step of its commit. 2 500 puts, each committed on its own, take
/// three subtables through about forty growths (64 to 1 184 buckets, records of 5 to 74 KiB). The commit holding each
/// growth (its record alone) is interrupted, and the disk is cut a dozen ways: before any of
/// its sectors reached the medium, with a prefix of them (whole or torn), with holes, and with
/// all of them. The pool recovered from each must open, pass the checker, and hold exactly the
/// acknowledged puts plus the growth's put if and only if its record reached the disk whole;
/// a growth that left the directory, the new subtable and the old one out of step would show as
/// lost or duplicated pairs or as a checker failure. The run carries on from a restart after
/// each growth, alternately one that kept it and one that lost it (whose put is then made again
/// and must grow the subtable again), so later puts, growths and restarts happen on recovered
/// pools; a last restart must find every pair.
#[test]
fn a_growth_cut_at_every_step_recovers_exactly_the_acknowledged_puts() {
    const PUTS: usize = 2500;
    let mut pool = LoggedPool::create(HASH_KEY, STEPS_CONFIG);
    let mut model = Pairs::new();
    let (mut growths, mut kept, mut lost) = (0, 0, 0);
    // A put whose growth a cut lost, made again on the recovered pool.
    let mut again = None;
    let mut i = 0;
    while i < PUTS {
        let (key, value) = (key(i), value(i, 0, [0, 12, 40, 100, 600][i % 5]));
        let grew = pool.put_growing(&key, &value);
        if again == Some(i) {
            assert!(grew, "put {i} grows its subtable again on the pool recovered without its first growth");
        }
        if !grew || again == Some(i) {
            pool.log.commit_now().expect("commit");
            model.insert(key, value);
            i += 1;
            continue;
        }
        growths += 1;
        let whole = pool.interrupt_commit();
        let mut grown = model.clone();
        grown.insert(key, value);
        for (what, cut) in cuts_through(&pool.disk) {
            let context = format!("growth {growths} (put {i}), a power cut keeping {what}");
            let disk = pool.disk.crash(&cut);
            let durable = holds_all_of(&disk, &whole);
            let expected = if durable { &grown } else { &model };
            let found = recovered_contents(&disk, &context);
            assert!(found == *expected, "{context}: {}", difference(&found, expected));
            if durable {
                kept += 1;
            } else {
                lost += 1;
            }
        }
        let context = format!("the restart after growth {growths} (put {i})");
        if growths % 2 == 1 {
            pool = LoggedPool::restart(whole, STEPS_CONFIG, &context);
            model = grown;
            i += 1;
        } else {
            pool = LoggedPool::restart(pool.disk.crash(&Cut::default()), STEPS_CONFIG, &context);
            again = Some(i);
        }
        assert!(contents(&pool.store) == model, "{context}: {}", difference(&contents(&pool.store), &model));
    }
    assert!(growths >= 30, "the load grew subtables {growths} times");
    assert!(kept >= growths && lost >= 10 * growths, "{kept} cuts kept a growth, {lost} lost one");
    assert_consistent(&pool.store, "the last pool");
    let last = LoggedPool::restart(pool.disk.crash(&Cut::default()), STEPS_CONFIG, "the last restart");
    assert!(contents(&last.store) == model, "the last restart: {}", difference(&contents(&last.store), &model));
    assert_consistent(&last.store, "the last restart");
}

/// A deterministic generator for the random test's choices, so a failing case replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }
}

/// One power cut of the random test: a number per unsynced sector write (cycled over them), a
/// write reaching the medium if its number is below the threshold (0: none do, 100: all do); and
/// which kept write is torn, where.
#[derive(Debug, Clone)]
struct RandomCut {
    draws: Vec<u8>,
    threshold: u8,
    tear: Option<(prop::sample::Index, prop::sample::Index)>,
}

fn random_cut() -> impl Strategy<Value = RandomCut> {
    let draws = proptest::collection::vec(0u8..100, 1..48);
    // Thresholds at both ends often: a commit lost whole, or kept whole but for a few sectors.
    let threshold = prop_oneof![Just(0u8), 0u8..=100, 90u8..=100, Just(100u8)];
    let tear = proptest::option::of(any::<(prop::sample::Index, prop::sample::Index)>());
    (draws, threshold, tear).prop_map(|(draws, threshold, tear)| RandomCut { draws, threshold, tear })
}

/// The index of the log's tail segment (the one the last record went to): the retained bytes
/// count every segment before the tail whole, each of [`RANDOM_CONFIG`]'s size, and the tail up
/// to the end of its last record.
fn tail_segment(log: &SharedLog<SimStorage>) -> u64 {
    log.retained_bytes().div_ceil(RANDOM_CONFIG.segment_bytes)
}

/// Puts, overwrites and erases in commit groups of random size, against the model. Every other
/// growth (while cuts remain) is cut: a few more changes join its group, the group's commit is
/// interrupted, and the disk cut as the next of `cuts` says. The pool recovered must pass the
/// checker and hold the state after some prefix of the group: none of it if no sector write
/// was kept, all of it if every one was, none torn, and the group lay in one segment (a failed
/// sync of a segment keeps the next one from being written at all). The run carries on from it.
fn random_cuts_through_growths(hash_key: [u64; 2], seed: u64, cuts: Vec<RandomCut>) -> Result<(), TestCaseError> {
    const CHANGES_MAX: u64 = 2500;
    let mut rng = Rng(seed | 1);
    let mut pool = LoggedPool::create(hash_key, RANDOM_CONFIG);
    // The acknowledged state, then the state after each change of the group not yet committed.
    let mut states = vec![Pairs::new()];
    // The segments the group's records went to.
    let mut segments = BTreeSet::new();
    // Which change of the group grew a subtable (if it is to be cut), and how many may follow.
    let mut growth = None;
    let mut changes_after_growth = 0;
    let (mut growths, mut cut_count, mut next_key) = (rng.below(2), 0, 0);
    let mut cuts = cuts.into_iter().peekable();
    for version in 0..CHANGES_MAX {
        let mut state = states.last().expect("the acknowledged state").clone();
        let existing = |rng: &mut Rng, state: &Pairs| state.keys().nth(rng.below(state.len())).cloned();
        let grew = match rng.below(20) {
            0 if !state.is_empty() => {
                let key = existing(&mut rng, &state).expect("not empty");
                pool.store.erase(&key).expect("present");
                state.remove(&key);
                false
            }
            1 | 2 if !state.is_empty() => {
                let key = existing(&mut rng, &state).expect("not empty");
                let value = value(0, version, [0, 8, 300][rng.below(3)]);
                let grew = pool.put_growing(&key, &value);
                state.insert(key, value);
                grew
            }
            _ => {
                // Mostly inline; a quarter in a slab slot, one in sixteen an extent of its own.
                let len = [0, 0, 0, 4, 4, 4, 16, 16, 16, 16, 16, 100, 100, 300, 300, 5000][rng.below(16)];
                let (key, value) = (key(next_key), value(next_key, version, len));
                next_key += 1;
                let grew = pool.put_growing(&key, &value);
                state.insert(key, value);
                grew
            }
        };
        states.push(state);
        segments.insert(tail_segment(&pool.log));
        if grew {
            growths += 1;
            if growth.is_none() && growths % 2 == 0 && cuts.peek().is_some() {
                growth = Some(states.len() - 1);
                changes_after_growth = rng.below(4);
            }
        }
        if let Some(at) = growth {
            if states.len() - 1 - at < changes_after_growth {
                continue;
            }
            let RandomCut { draws, threshold, tear } = cuts.next().expect("a cut remains");
            cut_count += 1;
            pool.interrupt_commit();
            let sectors = pool.disk.unsynced_sectors();
            let keep: Vec<bool> = (0..sectors).map(|i| draws[i % draws.len()] < threshold).collect();
            let tear = tear.map(|(torn, at)| {
                let torn = torn.index(sectors);
                (torn, at.index(pool.disk.unsynced_sector_len(torn) + 1))
            });
            let (nothing, everything) =
                (keep.iter().all(|kept| !kept), keep.iter().all(|kept| *kept) && tear.is_none());
            let context = format!(
                "cut {cut_count} (seed {seed}): a group of {} changes, the growth at change {at}, {} of {sectors} sector \
                 writes kept, {tear:?} torn",
                states.len() - 1,
                keep.iter().filter(|kept| **kept).count(),
            );
            let disk = pool.disk.crash(&Cut { keep, tear });
            let found = recovered_contents(&disk, &context);
            prop_assert!(
                states.contains(&found),
                "{}: the pool recovered is no prefix of the group: against the acknowledged state, {}",
                context,
                difference(&found, &states[0])
            );
            if nothing {
                prop_assert!(
                    found == states[0],
                    "{}: no sector write was kept: {}",
                    context,
                    difference(&found, &states[0])
                );
            }
            if everything && segments.len() == 1 {
                let all = states.last().expect("the group's last state");
                prop_assert!(found == *all, "{}: every sector write was kept: {}", context, difference(&found, all));
            }
            pool = LoggedPool::restart(disk, RANDOM_CONFIG, &context);
            states = vec![found];
            segments.clear();
            growth = None;
        } else if rng.below(4) == 0 || cuts.peek().is_none() {
            pool.log.commit_now().expect("commit");
            states = vec![states.pop().expect("the state after the last change")];
            segments.clear();
            if cuts.peek().is_none() {
                break;
            }
        }
    }
    prop_assert!(cuts.peek().is_none(), "{} cuts left after {} changes", cuts.count(), CHANGES_MAX);
    let last = LoggedPool::restart(pool.disk.crash(&Cut::default()), RANDOM_CONFIG, "the last restart");
    assert_consistent(&last.store, "the last restart");
    let expected = states.last().expect("the acknowledged state");
    prop_assert!(
        contents(&last.store) == *expected,
        "the last restart: {}",
        difference(&contents(&last.store), expected)
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Power cuts at random during growths: for each case, a random hash key and load (puts of
    /// inline, slab and extent values, overwrites, erases, commit groups of random size), and
    /// four to ten cuts each placed on a commit holding a growth and a few changes after it,
    /// keeping a random subset of its sector writes, one perhaps torn at a random byte. Where
    /// the fixed cuts of the test above try the shapes a cut can take, these reach the
    /// combinations: a growth's record kept while an earlier record of its commit is lost, later
    /// records kept beyond a lost growth (the torn commit recovery cuts), a growth following an
    /// out-of-line value's allocation in one group, and growths on pools recovered from such
    /// cuts. Every recovered pool must pass the checker and equal the model after a prefix of the
    /// interrupted group; a last restart must equal the model.
    #[test]
    fn random_power_cuts_during_growths_recover_a_prefix_of_the_interrupted_commit(
        hash_key: [u64; 2],
        seed: u64,
        cuts in proptest::collection::vec(random_cut(), 4..10),
    ) {
        random_cuts_through_growths(hash_key, seed, cuts)?;
    }
}

/// The subtables a growth leaves behind go back to the system when the growth commits, so the
/// pool's memory holds what its allocators hand out and little more; the pool recovered from
/// its log is the same, so releasing free pages never loses a pair.
#[test]
fn growths_release_the_subtables_they_leave_behind() {
    let mut pool = LoggedPool::create(HASH_KEY, RANDOM_CONFIG);
    let mut freed_bytes = 0;
    for i in 0..6000 {
        let before = pool.store.subtable_buckets();
        pool.store.put(&key(i), &value(i, 0, 8), PutMode::Upsert, 1).expect("room in the pool");
        let after = pool.store.subtable_buckets();
        freed_bytes += before
            .iter()
            .zip(&after)
            .filter(|(old, new)| **old > 0 && old != new)
            .map(|(old, _)| old * 64)
            .sum::<u64>();
        if i % 500 == 0 {
            pool.log.commit_now().expect("commit");
        }
    }
    pool.log.commit_now().expect("commit");
    let usage = pool.store.memory_usage();
    let resident = pool.store.memory().region().resident_bytes().expect("resident bytes");
    // Each released subtable may keep its two partial end pages; the rest of the slack is the
    // pages at the edges of live allocations.
    let slack = 64 * 1024;
    assert!(freed_bytes > 4 * slack, "the load grew subtables often enough to matter ({freed_bytes} bytes freed)");
    assert!(
        resident <= usage.total_bytes() + slack,
        "resident {resident} bytes, the allocators hand out {} and growths freed {freed_bytes}",
        usage.total_bytes()
    );
    let expected = contents(&pool.store);
    assert_eq!(expected.len(), 6000);
    assert_eq!(recovered_contents(&pool.disk, "after the growths"), expected);
}
