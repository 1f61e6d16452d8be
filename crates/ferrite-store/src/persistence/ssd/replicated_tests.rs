//! Recovery of a replicated shard ([`ReplayMode::Replicated`]): its log holds entries of its
//! group's log, and recovery replays only the normal ones up to the last committed entry, alone
//! or after a checkpoint; entries after it stay in the log for a later recovery or a new
//! leader. A log written in one mode is refused in the other, with a clear error.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::checkpoint::Step;
use super::entry::Entry;
use super::tests::{contents, descriptor_of, key, new_tracked_pool, temp_dir, value, TrackedPool};
use super::*;
use crate::hstore::HStore;
use crate::persistence::wal::{read_range, FsStorage, LogStorage, Lsn, WalConfig};
use crate::store::{PoolSpec, PutMode, Store};

/// A pool's pairs.
pub(super) type Pairs = BTreeMap<Vec<u8>, Vec<u8>>;

const SPEC: PoolSpec = PoolSpec { size_bytes: 1 << 20, expected_objects: 64 };

/// The pool the tests write.
pub(super) const POOL: u64 = 1;

/// The node that leads in these tests.
const NODE: u64 = 1;

/// Segments small enough that a history spans several.
pub(super) const CONFIG: WalConfig = WalConfig { segment_bytes: 64 * 1024 };

/// What a log's entries say, entry by entry: the term of each and the pool's pairs once it is
/// applied (`None` before the pool exists), and the membership entries.
#[derive(Debug, Clone, Default)]
pub(super) struct History {
    pub entries: Vec<(u64, Option<Pairs>)>,
    pub memberships: Vec<(Lsn, u64, Vec<u8>)>,
}

impl History {
    pub fn last(&self) -> Lsn {
        self.entries.len() as Lsn
    }

    pub fn term(&self, lsn: Lsn) -> u64 {
        self.entries[lsn as usize - 1].0
    }

    /// The pool as of entry `lsn` (0: before any).
    pub fn pool(&self, lsn: Lsn) -> Option<Pairs> {
        lsn.checked_sub(1).and_then(|index| self.entries[index as usize].1.clone())
    }

    /// What recovery reports of a log holding this history's first `last` entries, having
    /// applied up to entry `applied` and read them from `read_from`.
    pub fn summary(&self, last: Lsn, applied: Lsn, read_from: Lsn) -> EntrySummary {
        EntrySummary {
            last: (last > 0).then(|| (last, self.term(last))),
            applied: (applied > 0).then(|| (applied, self.term(applied))),
            memberships: self
                .memberships
                .iter()
                .filter(|(lsn, _, _)| (read_from..=applied).contains(lsn))
                .cloned()
                .collect(),
        }
    }
}

/// A leading replica writing its group's log: an hstore pool on logged memory, its records
/// framed as normal entries, with Raft's blank and membership entries between them; and the
/// history of what each entry leaves.
pub(super) struct Leader<S: LogStorage + Clone + 'static> {
    pub log: SharedLog<S>,
    store: Option<TrackedPool<S>>,
    pool: u64,
    term: u64,
    pairs: Pairs,
    pub history: History,
    version: u32,
}

impl<S: LogStorage + Clone + 'static> Leader<S> {
    /// Leads `term` on `log` (empty); `framed: false` writes a single server's log instead.
    pub fn new(log: SharedLog<S>, term: u64, framed: bool) -> Leader<S> {
        if framed {
            log.frame_as(term, NODE, 1, Box::new(|| {}));
        }
        Leader { log, store: None, pool: POOL, term, pairs: Pairs::new(), history: History::default(), version: 0 }
    }

    /// The leader writes pool `id` rather than [`POOL`].
    pub fn with_pool(self, id: u64) -> Leader<S> {
        Leader { pool: id, ..self }
    }

    fn store(&mut self) -> &mut HStore<LoggedMemory<S>> {
        &mut self.store.as_mut().expect("the pool exists").0
    }

    /// What a checkpoint of the leader's pool copies.
    pub fn checkpoint_pool(&self) -> CheckpointPool {
        let (store, pages) = self.store.as_ref().expect("the pool exists");
        CheckpointPool {
            descriptor: descriptor_of(self.pool, "replicated", SPEC),
            pages: Arc::clone(pages),
            region: Arc::clone(store.memory().region().file()),
        }
    }

    /// Notes the entries appended since the last call, each leaving the pool as it is now.
    fn noted(&mut self) {
        let pool = self.store.as_ref().map(|_| self.pairs.clone());
        while self.history.last() < self.log.last_lsn() {
            self.history.entries.push((self.term, pool.clone()));
        }
        // The leader's proposer would take them; nothing else here does.
        self.log.take_framed();
    }

    pub fn create_pool(&mut self) {
        self.store = Some(new_tracked_pool(&self.log, &descriptor_of(self.pool, "replicated", SPEC)));
        self.noted();
    }

    pub fn put(&mut self, k: u16, len: usize) {
        self.version += 1;
        let value = value(k, len, self.version);
        let before = self.log.last_lsn();
        self.store().put(&key(k), &value, PutMode::Upsert, 1).expect("put");
        assert_eq!(self.log.last_lsn(), before + 1, "a put is one entry");
        self.pairs.insert(key(k), value);
        self.noted();
    }

    pub fn erase(&mut self, k: u16) {
        if self.store().erase(&key(k)).is_ok() {
            self.pairs.remove(&key(k));
        }
        self.noted();
    }

    /// Appends Raft's own entry (blank, or a membership with `body`).
    pub fn raft_entry(&mut self, membership: Option<&[u8]>) {
        let mut payload = Vec::new();
        match membership {
            Some(body) => Entry::Membership { term: self.term, body }.encode(&mut payload),
            None => Entry::Blank { term: self.term }.encode(&mut payload),
        }
        let lsn = self.log.next_lsn();
        self.log.append_entry(lsn, &payload).expect("append at the next index");
        if let Some(body) = membership {
            self.history.memberships.push((lsn, self.term, body.to_vec()));
        }
        self.noted();
    }

    /// Leads the next term (after an election this node won again).
    pub fn next_term(&mut self) {
        self.log.stop_framing();
        self.term += 1;
        self.log.frame_as(self.term, NODE, 1000 * self.term, Box::new(|| {}));
    }

    /// A history of every kind of entry over two terms: a blank entry, the pool's creation,
    /// puts (some large enough to grow the table), an erase, memberships.
    pub fn write_two_terms(&mut self) {
        self.raft_entry(None);
        self.create_pool();
        for k in 0..12 {
            self.put(k, 40 + 90 * usize::from(k % 4));
        }
        self.raft_entry(Some(b"members 1"));
        self.erase(3);
        for k in 5..10 {
            self.put(k, 2000);
        }
        self.next_term();
        self.raft_entry(None);
        self.raft_entry(Some(b"members 1 2"));
        for k in 20..28 {
            self.put(k, 16);
        }
    }
}

/// The pairs of pool [`POOL`] among `pools`, if it is there; its table checked.
pub(super) fn pool_of(pools: Vec<RecoveredPool>) -> Option<Pairs> {
    pools_of(pools).remove(&POOL)
}

/// The pairs of each of `pools`, by id; each table checked.
pub(super) fn pools_of(pools: Vec<RecoveredPool>) -> BTreeMap<u64, Pairs> {
    pools
        .into_iter()
        .map(|pool| {
            let store = HStore::open(pool.region).expect("the recovered table opens");
            store.check().expect("table invariants hold");
            (pool.descriptor.id, contents(&store))
        })
        .collect()
}

/// An empty replicated shard at `paths` and its log.
fn new_shard(paths: &ShardPaths) -> (SharedLog, Checkpointer) {
    let recovered = recover_shard_in_mode(paths, CONFIG, ReplayMode::Replicated { until: 0 }).expect("recover");
    (SharedLog::new(recovered.writer), recovered.checkpointer)
}

fn load(paths: &ShardPaths, mode: ReplayMode) -> Result<LoadedShard, RecoveryError> {
    load_shard_in_mode(paths, mode, &mut |_| {})
}

/// Commits what `log` holds and waits for the spare segment it may be making.
fn settle<S: LogStorage + Clone + 'static>(log: &SharedLog<S>) {
    log.commit_now().expect("commit");
    log.wait_for_spare();
}

/// A replicated shard at `paths` whose leader wrote [`Leader::write_two_terms`], all committed:
/// its checkpointer and the history of its log.
fn written_shard(paths: &ShardPaths) -> (Checkpointer, History) {
    let (log, checkpointer) = new_shard(paths);
    let mut leader = Leader::new(log, 1, true);
    leader.write_two_terms();
    settle(&leader.log);
    (checkpointer, leader.history.clone())
}

/// Checks what recovery of `paths` in replicated mode up to `until` gives against `history`,
/// after a checkpoint whose state is as of entry `covered` (0: none).
fn check_replicated(paths: &ShardPaths, history: &History, until: Lsn, covered: Lsn) {
    let loaded = load(paths, ReplayMode::Replicated { until }).unwrap_or_else(|e| panic!("until {until}: {e}"));
    let applied = until.max(covered).min(history.last());
    assert_eq!(pool_of(loaded.pools), history.pool(applied), "until {until}: the pool as of entry {applied}");
    assert_eq!(loaded.entries, history.summary(history.last(), applied, covered + 1), "until {until}");
    assert_eq!(loaded.wal.next_lsn, history.last() + 1, "until {until}: every entry stays in the log");
}

/// Every `until` from nothing to past the end: the pool is exactly as the normal entries up to
/// it leave it, blank and membership entries change nothing, and the summary names the last
/// entry, the last applied one and the memberships up to it. A later recovery with a larger
/// `until` applies the entries an earlier one left in the log.
#[test]
fn replicated_recovery_applies_the_committed_entries_only() {
    let dir = temp_dir("replicated-until");
    let paths = ShardPaths::new(&dir);
    let (_, history) = written_shard(&paths);
    let last = history.last();
    for until in [0, 1, 2, 3, 10, 15, 16, 17, last - 9, last - 1, last, last + 5, Lsn::MAX] {
        check_replicated(&paths, &history, until, 0);
    }
    let partial = recover_shard_in_mode(&paths, CONFIG, ReplayMode::Replicated { until: 10 }).expect("recover");
    assert_eq!(pool_of(partial.pools), history.pool(10));
    assert_eq!(partial.writer.next_lsn(), last + 1, "the entries after 10 stay in the log");
    drop(partial.writer);
    let whole = recover_shard_in_mode(&paths, CONFIG, ReplayMode::Replicated { until: last }).expect("recover");
    assert_eq!(pool_of(whole.pools), history.pool(last), "a later recovery applies them");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// Pools a follower rebuilt by applying the normal entries `1..=until` of the log in `wal`.
fn follow(wal: &Path, until: Lsn) -> ReplicaPools {
    let storage = FsStorage::open_dir(wal).expect("log directory");
    let mut replica = ReplicaPools::new(Vec::new(), 1);
    read_range(&storage, 1, until, |lsn, payload| {
        if let Some(Entry::Normal { record, .. }) = Entry::decode(payload) {
            replica.apply(lsn, record).expect("apply");
        }
    })
    .expect("read");
    replica
}

/// Checkpoints `replica`, whose state is as of entry `replay_from - 1`, durable up to `durable`.
pub(super) fn checkpoint(checkpointer: &mut Checkpointer, replica: &ReplicaPools, replay_from: Lsn, durable: Lsn) {
    checkpointer.begin(replay_from, replica.next_pool_id, replica.checkpoint_pools(), &Default::default(), 1 << 20);
    loop {
        match checkpointer.step(durable, 64).expect("step") {
            Step::Write(write) => checkpointer.recycle(write.run().expect("write pages")),
            Step::Continue => {}
            Step::Finish(job) => {
                checkpointer.complete(job.run(|| None)).expect("complete");
                return;
            }
            Step::WaitDurable(lsn) => panic!("entry {lsn} was applied before it was durable"),
        }
    }
}

/// A follower's checkpoint as of entry `covered` (replay from `covered + 1`), then recovery up
/// to `until`: the checkpoint's state plus the normal entries after it up to `until`, whether
/// `until` lies past it, at it, or (a state file that lags the checkpoint) before it. A
/// checkpoint that covers the whole log still names the entry it holds as the last applied.
#[test]
fn replicated_recovery_goes_on_from_a_checkpoint() {
    let dir = temp_dir("replicated-checkpoint");
    let paths = ShardPaths::new(&dir);
    let (mut checkpointer, history) = written_shard(&paths);
    let last = history.last();
    for covered in [12, 16, last - 1, last] {
        let replica = follow(&paths.wal, covered);
        checkpoint(&mut checkpointer, &replica, covered + 1, last);
        drop(replica);
        for until in [covered - 3, covered, covered + 1, last, Lsn::MAX] {
            check_replicated(&paths, &history, until, covered);
        }
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// A replica that installed a snapshot: its checkpoint is the snapshot's (as of entry
/// `covered`), its log restarted after it with the snapshot's tail of entries. Recovery applies
/// the tail up to `until`; where it applies none, the log holds no entry to name as applied
/// (the replica knows the snapshot's last entry from its own records).
#[test]
fn a_replica_that_installed_a_snapshot_recovers_from_it() {
    let dir = temp_dir("replicated-snapshot");
    let leader_paths = ShardPaths::new(&dir.join("leader"));
    let (_, history) = written_shard(&leader_paths);
    let last = history.last();
    let covered = 14;
    let paths = ShardPaths::new(&dir.join("follower"));
    let (log, mut checkpointer) = new_shard(&paths);
    log.restart_at(covered + 1).expect("restart after the snapshot");
    let storage = FsStorage::open_dir(&leader_paths.wal).expect("leader's log");
    read_range(&storage, covered + 1, last, |lsn, payload| {
        log.append_entry(lsn, payload).expect("append");
    })
    .expect("read the tail");
    settle(&log);
    drop(log);
    checkpoint(&mut checkpointer, &follow(&leader_paths.wal, covered), covered + 1, last);
    for until in [covered + 1, covered + 5, last] {
        check_replicated(&paths, &history, until, covered);
    }
    let loaded = load(&paths, ReplayMode::Replicated { until: covered }).expect("recover");
    assert_eq!(pool_of(loaded.pools), history.pool(covered));
    assert_eq!(loaded.entries.applied, None, "entry {covered} is not in the restarted log");
    assert_eq!(loaded.entries.last, Some((last, history.term(last))));
    std::fs::remove_dir_all(&dir).expect("clean up");
}

fn refusal(result: Result<LoadedShard, RecoveryError>) -> String {
    match result {
        Err(RecoveryError::BadRecord { reason, .. }) => reason,
        Err(other) => panic!("a log of the wrong kind must be refused as such, got {other}"),
        Ok(_) => panic!("a log of the wrong kind must be refused"),
    }
}

/// A single server's data directory recovered as a replica's is refused with an error that says
/// so, whatever `until` (0 reads no entry's content): from its first record, and after a
/// checkpoint from which its log holds transactions only.
#[test]
fn a_single_servers_directory_is_refused_in_replicated_mode() {
    let dir = temp_dir("plain-as-replicated");
    let paths = ShardPaths::new(&dir);
    let recovered = recover_shard(&paths, CONFIG).expect("recover");
    let mut checkpointer = recovered.checkpointer;
    let mut server = Leader::new(SharedLog::new(recovered.writer), 0, false);
    server.create_pool();
    for k in 0..6 {
        server.put(k, 30);
    }
    settle(&server.log);
    for until in [0, 3, Lsn::MAX] {
        let reason = refusal(load(&paths, ReplayMode::Replicated { until }));
        assert!(reason.contains("single server"), "until {until}: {reason}");
    }
    let storage = FsStorage::open_dir(&paths.wal).expect("log");
    let mut replica = ReplicaPools::new(Vec::new(), 1);
    read_range(&storage, 1, 7, |lsn, payload| drop(replica.apply(lsn, payload).expect("apply"))).expect("read");
    checkpoint(&mut checkpointer, &replica, 8, 7);
    for k in 0..4 {
        server.put(k, 500);
    }
    settle(&server.log);
    assert!(load(&paths, ReplayMode::Plain).is_ok(), "the directory is sound");
    for until in [0, 9, Lsn::MAX] {
        let reason = refusal(load(&paths, ReplayMode::Replicated { until }));
        assert!(reason.contains("single server"), "after a checkpoint, until {until}: {reason}");
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// A replicated shard's data directory recovered as a single server's is refused with an error
/// that says so.
#[test]
fn a_replicated_directory_is_refused_in_plain_mode() {
    let dir = temp_dir("replicated-as-plain");
    let paths = ShardPaths::new(&dir);
    let (log, _) = new_shard(&paths);
    let mut leader = Leader::new(log, 1, true);
    leader.create_pool();
    leader.put(1, 10);
    settle(&leader.log);
    let reason = refusal(load(&paths, ReplayMode::Plain));
    assert!(reason.contains("replicated"), "{reason}");
    let error = recover_shard(&paths, CONFIG).expect_err("refused");
    assert!(error.to_string().contains("replicated"), "{error}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// Replica pools apply records as recovery does, and refuse one that makes no sense against what
/// came before it (a pool created twice, a change or deletion of a pool that does not exist, a
/// range outside the pool's memory, an undecodable record), naming its LSN.
#[test]
fn replica_pools_apply_records_and_refuse_nonsense() {
    use super::record::{encode_pool_configured, encode_pool_created, encode_pool_deleted, encode_transaction};
    let descriptor = descriptor_of(4, "replica", SPEC);
    let memory = vec![9u8; descriptor.region_bytes as usize];
    let mut created = Vec::new();
    encode_pool_created(&descriptor, &mut vec![(0, 4096)], &memory, &mut created);
    let mut change = Vec::new();
    encode_transaction(4, &mut vec![(8192, 100)], &memory, &mut change);
    let mut configured = Vec::new();
    encode_pool_configured(4, true, &mut configured);
    let mut deleted = Vec::new();
    encode_pool_deleted(4, &mut deleted);
    let mut outside = Vec::new();
    encode_transaction(4, &mut vec![(descriptor.region_bytes - 10, 10)], &memory, &mut outside);
    outside[9 + 4..9 + 12].copy_from_slice(&descriptor.region_bytes.to_le_bytes());

    let mut replica = ReplicaPools::new(Vec::new(), 1);
    replica.apply(1, &created).expect("create");
    assert_eq!(replica.next_pool_id, 5, "pool ids go on after the largest");
    replica.apply(2, &change).expect("change");
    let pool = &replica.pools[&4];
    assert_eq!(&pool.region.bytes()[..4096], &memory[..4096]);
    assert_eq!(&pool.region.bytes()[8192..8292], &memory[8192..8292]);
    assert_eq!(pool.region.bytes()[5000], 0, "bytes no record wrote stay zero");
    replica.apply(3, &configured).expect("configure");
    assert!(replica.pools[&4].descriptor.indexed);
    let pools = replica.checkpoint_pools();
    assert_eq!(
        pools.iter().map(|pool| pool.descriptor.clone()).collect::<Vec<_>>(),
        [replica.pools[&4].descriptor.clone()]
    );
    let bad = |replica: &mut ReplicaPools, lsn: Lsn, payload: &[u8]| match replica.apply(lsn, payload) {
        Err(RecoveryError::BadRecord { lsn: at, reason }) => {
            assert_eq!(at, lsn);
            reason
        }
        other => panic!("record {lsn} must be refused, got {other:?}"),
    };
    assert!(bad(&mut replica, 4, &created).contains("already exists"));
    assert!(bad(&mut replica, 5, &outside).contains("outside"));
    assert!(bad(&mut replica, 6, b"\x63garbage").contains("unknown record kind"));
    replica.apply(7, &deleted).expect("delete");
    assert!(replica.pools.is_empty());
    assert!(bad(&mut replica, 8, &change).contains("does not exist"));
    assert!(bad(&mut replica, 9, &deleted).contains("does not exist"));
    assert!(bad(&mut replica, 10, &configured).contains("does not exist"));
    assert!(replica.checkpoint_pools().is_empty());
}
