//! Pages kept in the log: a checkpoint refers to the records that hold large values instead of
//! copying their pages, the log holds those records' segments until no checkpoint needs them,
//! the cleaner copies what little of a held segment is still needed, and recovery (after a
//! restart or a power cut at any point) reads them back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proptest::prelude::*;

use super::checkpoint::{CheckpointPool, Checkpointer, Manifest, Step};
use super::recovery::{load_shard_in_mode, load_shard_with, ReplayMode};
use super::tests::{
    assert_matches, contents, descriptor_of, key, new_tracked_pool, op_with_large, open_shard, run_in, sim_log,
    temp_dir, value, Shard,
};
use super::ShardPaths;
use crate::hstore::HStore;
use crate::persistence::wal::held_name;
use crate::persistence::wal::sim::{Cut, SimStorage};
use crate::persistence::wal::storage::LogStorage;
use crate::store::{PoolSpec, PutMode, Store};

/// Bytes of every page file in `dir`.
fn page_file_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .expect("list")
        .map(|entry| entry.expect("entry"))
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".pages"))
        .map(|entry| entry.metadata().expect("size").len())
        .sum()
}

/// Held segment files in the log directory.
fn held_files(paths: &ShardPaths) -> BTreeSet<String> {
    std::fs::read_dir(&paths.wal)
        .expect("list")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".held"))
        .collect()
}

fn checkpoint(shard: &mut Shard) {
    shard.sync();
    shard.begin_checkpoint();
    assert!(shard.step_checkpoint(100_000), "a checkpoint completes");
}

fn reopen(shard: Shard, paths: &ShardPaths) -> Shard {
    shard.sync();
    shard.log.wait_for_spare();
    drop(shard);
    open_shard(paths)
}

/// A model of a pool's pairs, by key number.
type Model = BTreeMap<u16, Vec<u8>>;

/// A shard in a fresh directory named after `tag`, with a pool of 8 MiB holding `count` values
/// of `len` bytes (keys `0..count`): the directory, its paths, the shard, the pool and the model.
fn shard_with_values(tag: &str, count: u16, len: usize) -> (std::path::PathBuf, ShardPaths, Shard, u64, Model) {
    let dir = temp_dir(tag);
    let paths = ShardPaths::new(&dir);
    let mut shard = open_shard(&paths);
    let id = shard.create_pool(tag, PoolSpec { size_bytes: 8 << 20, expected_objects: 64 });
    let mut model = Model::new();
    for k in 0..count {
        let v = value(k, len, 1);
        shard.store(id).put(&key(k), &v, PutMode::Upsert, 1).expect("room");
        model.insert(k, v);
    }
    (dir, paths, shard, id, model)
}

/// Restarts `shard`, checks that pool `id` holds `model`, and removes the directory.
fn restart_and_check(shard: Shard, paths: &ShardPaths, id: u64, model: &Model, dir: &Path) {
    let mut shard = reopen(shard, paths);
    assert_matches(shard.store(id), model);
    drop(shard);
    std::fs::remove_dir_all(dir).expect("clean up");
}

/// Large values are written to the disk once: the checkpoint refers to their records, copies
/// a few pages only, and the log holds their segments (under their own names); a restart reads
/// them back. Replaced and erased values give their segments back to the log.
#[test]
fn pages_of_large_values_are_kept_in_the_log_not_copied() {
    let (dir, paths, mut shard, id, mut model) = shard_with_values("in-log", 6, 200 * 1024);
    shard.store(id).put(&key(100), b"small", PutMode::Upsert, 1).expect("room");
    model.insert(100, b"small".to_vec());
    checkpoint(&mut shard);
    let manifest = shard.checkpointer.manifest().clone();
    let kept: u64 = manifest.pools.iter().flat_map(|pool| &pool.in_log).map(|extent| extent.pages).sum();
    assert!(kept >= 6 * 48, "the values' whole pages are kept in the log ({kept} pages)");
    let copied = page_file_bytes(&paths.checkpoint);
    assert!(copied < 6 * 200 * 1024 / 2, "the values' pages are not copied ({copied} bytes of page files)");
    let held = shard.log.held_segments();
    assert!(held.len() >= 4, "the segments before the log's tail are held: {held:?}");
    assert_eq!(held_files(&paths), held.iter().map(|seq| held_name(*seq)).collect(), "held under their own names");
    assert!(held.is_subset(&manifest.held_segments()), "only segments the checkpoint refers to are held");

    let mut shard = reopen(shard, &paths);
    assert_matches(shard.store(id), &model);

    for k in 0..6u16 {
        let v = value(k, 200 * 1024, 2);
        shard.store(id).put(&key(k), &v, PutMode::Upsert, 2).expect("room");
        model.insert(k, v);
    }
    checkpoint(&mut shard);
    let now_held = shard.log.held_segments();
    assert!(now_held.is_disjoint(&held), "segments of replaced values are recycled: {held:?} then {now_held:?}");
    let mut shard = reopen(shard, &paths);
    assert_matches(shard.store(id), &model);

    for k in 0..6u16 {
        shard.store(id).erase(&key(k)).expect("present");
        model.remove(&k);
    }
    checkpoint(&mut shard);
    // The segments held before this checkpoint are recycled by it; those it began with in the
    // log (the replaced values') by the next.
    checkpoint(&mut shard);
    assert!(shard.log.held_segments().is_empty(), "nothing is held once no value needs it");
    assert!(held_files(&paths).is_empty());
    restart_and_check(shard, &paths, id, &model, &dir);
}

/// Values replayed from the log after a restart are kept there by the next checkpoint too: a
/// restart does not make a checkpoint copy what it would not have copied before.
#[test]
fn values_replayed_after_a_restart_stay_in_the_log() {
    let (dir, paths, shard, id, model) = shard_with_values("in-log-replayed", 6, 200 * 1024);
    let mut shard = reopen(shard, &paths);
    checkpoint(&mut shard);
    let copied = page_file_bytes(&paths.checkpoint);
    assert!(copied < 6 * 200 * 1024 / 2, "replayed values are not copied ({copied} bytes of page files)");
    let kept: u64 = shard.checkpointer.manifest().pools.iter().flat_map(|pool| &pool.in_log).map(|e| e.pages).sum();
    assert!(kept >= 6 * 48, "their pages are kept in the log ({kept})");
    restart_and_check(shard, &paths, id, &model, &dir);
}

/// Held segments that take more than four times what the checkpoint still needs of them are
/// cleaned, emptiest first: the next checkpoint copies their pages and the log recycles them.
/// Here most of every value is rewritten in place by small writes (pages so changed leave their
/// extents), and some values are erased: what the segments still keep is a few pages each.
#[test]
fn a_held_segment_mostly_unneeded_is_cleaned() {
    let (dir, paths, mut shard, id, mut model) = shard_with_values("in-log-clean", 12, 70 * 1024);
    checkpoint(&mut shard);
    let held = shard.log.held_segments();
    assert!(held.len() >= 2, "three values to a segment, held: {held:?}");
    let copied_before = page_file_bytes(&paths.checkpoint);
    for k in (0..12u16).filter(|k| k % 3 != 0) {
        shard.store(id).erase(&key(k)).expect("present");
        model.remove(&k);
    }
    for k in (0..12u16).filter(|k| k % 3 == 0) {
        let v = model.get_mut(&k).expect("kept");
        for offset in (0..60 * 1024).step_by(12 * 1024) {
            let bytes = vec![(k as u8).wrapping_add(offset as u8 / 7); 12 * 1024];
            shard.store(id).write_value_range(&key(k), offset as u64, &bytes, 2).expect("inside the value");
            v[offset..offset + bytes.len()].copy_from_slice(&bytes);
        }
    }
    checkpoint(&mut shard);
    let refers = shard.checkpointer.manifest().held_segments();
    assert!(refers.is_disjoint(&held), "the checkpoint no longer refers to the cleaned segments: {refers:?}");
    assert!(shard.log.held_segments().is_disjoint(&held), "the cleaned segments are recycled");
    let copied = page_file_bytes(&paths.checkpoint) - copied_before;
    assert!(copied >= 4 * 15 * 4096, "the values' pages were copied ({copied} bytes)");
    restart_and_check(shard, &paths, id, &model, &dir);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    /// The recovery model of `tests.rs` with values large enough to be kept in the log: random
    /// puts, overwrites, erases, fuzzy checkpoints stopped at random steps, restarts.
    #[test]
    fn recovery_restores_large_values_kept_in_the_log(ops in proptest::collection::vec(op_with_large(60_000..300_000), 1..150)) {
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let tag = format!("in-log-model-{}", CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        run_in(ops, &tag, PoolSpec { size_bytes: 24 << 20, expected_objects: 64 });
    }
}

/// A checkpoint of `store` (pool 1) on the simulated disk's log, its files in `dir`, run to its
/// end, and the log released up to it.
fn checkpoint_on_sim(
    checkpointer: &mut Checkpointer,
    log: &super::SharedLog<SimStorage>,
    store: &HStore<super::LoggedMemory<SimStorage>>,
    pages: &std::sync::Arc<std::sync::Mutex<super::PageTracker>>,
    descriptor: &super::PoolDescriptor,
) {
    let pool = CheckpointPool {
        descriptor: descriptor.clone(),
        pages: pages.clone(),
        region: store.memory().region().file().clone(),
    };
    checkpoint_pools(checkpointer, log, vec![pool], 2);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Large values kept in the log by one checkpoint, some replaced or erased, a second
    /// checkpoint (whose cleaner may copy what the first kept, and which recycles held segments
    /// into the log, where new records overwrite them), then a large put in progress and a power
    /// cut keeping any subset of the unsynced sectors, one torn: recovery from the checkpoint
    /// and the log holds every acknowledged value and the table is whole.
    #[test]
    fn a_power_cut_after_checkpoints_that_keep_values_in_the_log_loses_nothing_acknowledged(
        lens in proptest::collection::vec(60_000usize..150_000, 3..7),
        changes in proptest::collection::vec(0u8..3, 3..7),
        new_len in 60_000usize..200_000,
        piece in 20_000usize..70_000,
        synced_pieces in 0usize..4,
        acknowledge in any::<bool>(),
        keep_bits in proptest::collection::vec(any::<bool>(), 1..64),
        tear in any::<proptest::sample::Index>(),
        tear_at in any::<proptest::sample::Index>(),
    ) {
        let (sim, log) = sim_log(256 * 1024);
        let descriptor = descriptor_of(1, "in-log", PoolSpec { size_bytes: 8 << 20, expected_objects: 64 });
        let (mut store, pages) = new_tracked_pool(&log, &descriptor);
        let dir = temp_dir(&format!("in-log-cut-{}", lens.len() * 1000 + new_len % 1000));
        let mut checkpointer = Checkpointer::new(dir.clone(), Manifest::default());
        let mut model = BTreeMap::new();
        for (k, len) in lens.iter().enumerate() {
            let v = value(k as u16, *len, 1);
            store.put(&key(k as u16), &v, PutMode::Upsert, 1).expect("room");
            model.insert(key(k as u16), v);
        }
        checkpoint_on_sim(&mut checkpointer, &log, &store, &pages, &descriptor);
        for (k, change) in changes.iter().enumerate().take(lens.len()) {
            match change {
                0 => {}
                1 => {
                    let v = value(k as u16, lens[k] / 2 + 70_000, 2);
                    store.put(&key(k as u16), &v, PutMode::Upsert, 2).expect("room");
                    model.insert(key(k as u16), v);
                }
                _ => {
                    store.erase(&key(k as u16)).expect("present");
                    model.remove(&key(k as u16));
                }
            }
        }
        checkpoint_on_sim(&mut checkpointer, &log, &store, &pages, &descriptor);
        let new = value(1, new_len, 3);
        let old = model.get(&key(1)).cloned();
        let mut staged = store.stage_value(3, new.len() as u64).expect("room");
        for (n, chunk) in new.chunks(piece).enumerate() {
            store.write_staged(&mut staged, (n * piece) as u64, chunk);
            if n < synced_pieces {
                log.commit_now().expect("commit");
            }
        }
        store.commit_staged(&key(1), staged, PutMode::Upsert, 3).expect("room");
        if acknowledge {
            log.commit_now().expect("commit");
        }
        // A spare segment still being made would be renamed into the log after the crash's copy.
        log.wait_for_spare();
        sim.fail_syncs_after(0);
        let _ = log.commit_now();
        let sectors = sim.unsynced_sectors();
        let keep: Vec<bool> = (0..sectors).map(|i| keep_bits[i % keep_bits.len()]).collect();
        let tear = (sectors > 0).then(|| {
            let torn = tear.index(sectors);
            (torn, tear_at.index(sim.unsynced_sector_len(torn) + 1))
        });
        let after = sim.crash(&Cut { keep, tear });
        let loaded = load_shard_with(&dir, &after, ReplayMode::Plain).expect("recovery succeeds");
        std::fs::remove_dir_all(&dir).expect("clean up");
        let pool = loaded.pools.into_iter().find(|pool| pool.descriptor.id == 1).expect("the pool");
        let recovered = HStore::open(pool.region).expect("the table opens");
        recovered.check().expect("table invariants hold");
        let mut found = contents(&recovered);
        let large = found.remove(&key(1));
        if acknowledge {
            prop_assert!(large.as_ref() == Some(&new), "an acknowledged put was lost");
        } else {
            prop_assert!(large == old || large.as_ref() == Some(&new), "key 1 holds neither its old nor its new value");
        }
        model.remove(&key(1));
        prop_assert_eq!(found, model);
    }
}

/// A held segment that is missing, or whose record of a kept value is damaged, stops recovery
/// with the pool, the pages and the reason named: nothing is loaded from bytes that fail their
/// checks, and nothing is silently left out.
#[test]
fn a_missing_or_damaged_held_segment_is_refused_with_its_place() {
    let (dir, paths, mut shard, id, model) = shard_with_values("in-log-damage", 6, 200 * 1024);
    checkpoint(&mut shard);
    let held = shard.log.held_segments();
    let seq = *held.iter().next().expect("a held segment");
    shard.log.wait_for_spare();
    drop(shard);
    let path = paths.wal.join(held_name(seq));
    let original = std::fs::read(&path).expect("read the held segment");

    let mut damaged = original.clone();
    let at = damaged.len() / 2;
    damaged[at] ^= 0x40;
    std::fs::write(&path, &damaged).expect("damage it");
    let error = super::load_shard(&paths).map(drop).expect_err("a damaged kept value is refused");
    let text = error.to_string();
    assert!(text.contains("kept in the log") && text.contains("no intact record"), "{text}");

    std::fs::remove_file(&path).expect("remove it");
    let error = super::load_shard(&paths).map(drop).expect_err("a missing held segment is refused");
    let text = error.to_string();
    assert!(text.contains("neither held nor in the log"), "{text}");

    std::fs::write(&path, &original).expect("put it back");
    restart_and_check(open_shard(&paths), &paths, id, &model, &dir);
}

/// Runs a checkpoint of `pools` in `checkpointer` over `log` (everything appended committed and
/// durable) to its end and releases the log up to it.
fn checkpoint_pools<S: LogStorage + Clone + 'static>(
    checkpointer: &mut Checkpointer,
    log: &super::SharedLog<S>,
    pools: Vec<CheckpointPool>,
    next: u64,
) {
    log.commit_now().expect("commit");
    let held = log.held_segments();
    checkpointer.begin(log.last_lsn() + 1, next, pools, &held, log.segment_bytes());
    loop {
        match checkpointer.step(log.durable_lsn(), 64).expect("step") {
            Step::Write(write) => checkpointer.recycle(write.run().expect("write")),
            Step::WaitDurable(_) => {
                log.commit_now().expect("commit");
            }
            Step::Continue => {}
            Step::Finish(job) => {
                let replay_from = checkpointer.complete(job.run(|| None)).expect("complete");
                let held = checkpointer.manifest().held_segments();
                log.release_before(replay_from, &held).expect("release");
                return;
            }
        }
    }
}

/// Pages kept in the log / all pages of the manifest's extents.
fn kept_pages(manifest: &Manifest) -> u64 {
    manifest.pools.iter().flat_map(|pool| &pool.in_log).map(|extent| extent.pages).sum()
}

/// In a cluster, large values are written once on every replica too: the leader's records,
/// framed as entries of its group's log, and a follower's copies of them, appended as entries
/// and applied once committed, are kept in each one's log by its checkpoints; recovery in
/// replicated mode reads them back; and a snapshot's copy of such a checkpoint, which must stand
/// without the log, holds their pages in a page file of its own.
#[test]
fn replicas_keep_large_values_in_their_logs_and_snapshots_carry_them() {
    use super::entry::Entry;
    use crate::persistence::wal::{read_range, WalConfig};
    const CONFIG: WalConfig = WalConfig { segment_bytes: 256 * 1024 };
    let dir = temp_dir("in-log-replicated");
    let (leader_paths, follower_paths) = (ShardPaths::new(&dir.join("leader")), ShardPaths::new(&dir.join("follower")));
    let mode = ReplayMode::Replicated { until: 0 };

    let recovered = super::recover_shard_in_mode(&leader_paths, CONFIG, mode).expect("recover");
    let (log, checkpointer) = (super::SharedLog::new(recovered.writer), recovered.checkpointer);
    log.frame_as(1, 1, 1, Box::new(|| {}));
    let descriptor = descriptor_of(1, "replicated", PoolSpec { size_bytes: 8 << 20, expected_objects: 64 });
    let (mut store, pages) = new_tracked_pool(&log, &descriptor);
    let mut model = BTreeMap::new();
    for k in 0..6u16 {
        let v = value(k, 200 * 1024, 1);
        store.put(&key(k), &v, PutMode::Upsert, 1).expect("room");
        model.insert(key(k), v);
    }
    log.take_framed();
    log.commit_now().expect("commit");
    let last = log.last_lsn();

    let (log_of_leader, checkpointer_of_leader) = (log, checkpointer);
    let recovered = super::recover_shard_in_mode(&follower_paths, CONFIG, mode).expect("recover");
    let (log, mut checkpointer) = (super::SharedLog::new(recovered.writer), recovered.checkpointer);
    let mut replica = super::ReplicaPools::new(Vec::new(), 1);
    let leader_log = crate::persistence::wal::FsStorage::open_dir(&leader_paths.wal).expect("the leader's log");
    read_range(&leader_log, 1, last, |lsn, payload| {
        let at = log.append_entry(lsn, payload).expect("append");
        if let Some(Entry::Normal { record, .. }) = Entry::decode(payload) {
            replica.apply_at(lsn, Some(at), record).expect("apply");
        }
    })
    .expect("read the leader's log");

    let region = store.memory().region().file().clone();
    let (leader_log, mut leader_checkpointer) = (log_of_leader, checkpointer_of_leader);
    checkpoint_pools(&mut leader_checkpointer, &leader_log, vec![CheckpointPool { descriptor, pages, region }], 2);
    assert!(
        kept_pages(leader_checkpointer.manifest()) >= 6 * 48,
        "the leader's checkpoint keeps the values in its log"
    );
    leader_log.wait_for_spare();
    drop((store, leader_log));
    let loaded = load_shard_in_mode(&leader_paths, ReplayMode::Replicated { until: last }, &mut |_| {}).expect("load");
    let pool = loaded.pools.into_iter().next().expect("the pool");
    assert_eq!(contents(&HStore::open(pool.region).expect("opens")), model, "the leader recovers them");
    checkpoint_pools(&mut checkpointer, &log, replica.checkpoint_pools(), replica.next_pool_id);
    let manifest = checkpointer.manifest().clone();
    assert!(kept_pages(&manifest) >= 6 * 48, "the follower's checkpoint keeps the values in its own log");
    assert!(!log.held_segments().is_empty(), "its log holds their segments");
    let loaded =
        load_shard_in_mode(&follower_paths, ReplayMode::Replicated { until: last }, &mut |_| {}).expect("load");
    let pool = loaded.pools.into_iter().next().expect("the pool");
    assert_eq!(contents(&HStore::open(pool.region).expect("opens")), model, "the follower recovers them");

    // A snapshot: the checkpoint's page files, one more holding the kept pages, and a manifest
    // naming it instead of the extents; loaded with no log at all.
    let snapshot = ShardPaths::new(&dir.join("snapshot"));
    std::fs::create_dir_all(&snapshot.checkpoint).expect("snapshot dir");
    std::fs::create_dir_all(&snapshot.wal).expect("snapshot log dir");
    let mut standalone = manifest.clone();
    for pool in &mut standalone.pools {
        for seq in &pool.chain {
            let name = super::checkpoint::pages_name(pool.descriptor.id, *seq);
            std::fs::copy(follower_paths.checkpoint.join(&name), snapshot.checkpoint.join(&name)).expect("copy");
        }
        let seq = pool.chain.iter().max().map_or(1, |seq| seq + 1);
        let written =
            super::checkpoint::write_in_log_pages(&snapshot.checkpoint, &log_storage(&follower_paths), pool, seq)
                .expect("write the kept pages");
        assert_eq!(written, kept_pages(&manifest));
        pool.chain.push(seq);
        pool.in_log.clear();
    }
    standalone.write(&snapshot.checkpoint).expect("manifest");
    let loaded = load_shard_in_mode(&snapshot, ReplayMode::Replicated { until: last }, &mut |_| {}).expect("load");
    let pool = loaded.pools.into_iter().next().expect("the pool");
    assert_eq!(contents(&HStore::open(pool.region).expect("opens")), model, "the snapshot stands alone");
    log.wait_for_spare();
    drop(log);
    std::fs::remove_dir_all(&dir).expect("clean up");
}

fn log_storage(paths: &ShardPaths) -> crate::persistence::wal::FsStorage {
    crate::persistence::wal::FsStorage::open_dir(&paths.wal).expect("log directory")
}

/// A checkpoint that copies a pool whole (its chain of page files at its longest) copies every
/// page, those written while it runs too, but not the pages of a large value that arrives
/// meanwhile: replay from the checkpoint rewrites them whole. A restart finds the value.
#[test]
fn a_whole_copy_leaves_out_the_large_values_written_while_it_runs() {
    let dir = temp_dir("in-log-whole");
    let paths = ShardPaths::new(&dir);
    let mut shard = open_shard(&paths);
    let id = shard.create_pool("whole", PoolSpec { size_bytes: 8 << 20, expected_objects: 64 });
    let mut model = BTreeMap::new();
    while shard.checkpointer.manifest().pools.first().is_none_or(|pool| pool.chain.len() < super::checkpoint::CHAIN_MAX)
    {
        let k = model.len() as u16;
        shard.store(id).put(&key(k), &value(k, 100, 1), PutMode::Upsert, 1).expect("room");
        model.insert(k, value(k, 100, 1));
        checkpoint(&mut shard);
    }
    shard.sync();
    shard.begin_checkpoint();
    let large = value(500, 600 * 1024, 2);
    shard.store(id).put(&key(500), &large, PutMode::Upsert, 2).expect("room");
    model.insert(500, large);
    assert!(shard.step_checkpoint(100_000), "the whole copy completes");
    let chain = &shard.checkpointer.manifest().pools[0].chain;
    assert_eq!(chain.len(), 1, "the copy replaced the chain");
    let name = super::checkpoint::pages_name(id, chain[0]);
    let copied = std::fs::metadata(paths.checkpoint.join(name)).expect("the page file").len();
    assert!(copied < 300 * 1024, "the large value's pages were left to replay ({copied} bytes copied)");
    let mut shard = reopen(shard, &paths);
    assert_matches(shard.store(id), &model);
    drop(shard);
    std::fs::remove_dir_all(&dir).expect("clean up");
}
