//! openraft's storage conformance suite, run on a replica's log store and state machine over a
//! real shard directory (its write-ahead log, its Raft state file), with the shard's sync thread
//! making appends durable as in a running server.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;

use super::log_store::{complete_flushes, ShardLog};
use super::snapshot::SnapshotStore;
use super::startup::recover_replica;
use super::state_machine::ShardMachine;
use super::types::C;
use crate::config::{Config, DurabilityConfig};
use crate::data_dir::DataDir;
use crate::handler::tests::shard_state;

/// Each store the suite asks for gets a fresh data directory.
static STORES: AtomicU64 = AtomicU64::new(0);

struct Builder {
    tag: String,
}

/// Keeps a store's data directory (locked) until the suite's test ends, then removes it.
struct Guard {
    dir: std::path::PathBuf,
    _data_dir: std::sync::Mutex<DataDir>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl StoreBuilder<C, ShardLog, ShardMachine, Guard> for Builder {
    async fn build(&self) -> Result<(Guard, ShardLog, ShardMachine), StorageError<C>> {
        let number = STORES.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ferrite-suite-{}-{}-{number}", self.tag, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut config = Config::embedded_default();
        config.data_dir.clone_from(&dir);
        config.durability = DurabilityConfig { commit_interval_ms: 1, ..DurabilityConfig::default() };
        let data_dir = DataDir::open(&dir, 1).expect("data dir");
        let replica = recover_replica(&config, &data_dir, 0, 1).expect("a fresh replica");
        let mut durability = replica.durability;
        if let Some(task) = durability.take_task() {
            tokio::task::spawn_local(task.run());
        }
        let (wal, batches) = (durability.log.clone(), durability.local_durable());
        let mut state = shard_state(replica.pools, Some(durability));
        state.replication = Some(replica.replication);
        let shard = Rc::new(RefCell::new(state));
        let log = ShardLog::new(Rc::clone(&shard));
        tokio::task::spawn_local(complete_flushes(log.flushes(), wal, batches));
        let snapshots = SnapshotStore::open(&replica.raft_dir).expect("snapshots");
        let machine = ShardMachine::new(shard, snapshots);
        Ok((Guard { dir, _data_dir: std::sync::Mutex::new(data_dir) }, log, machine))
    }
}

type ReplicaSuite = Suite<C, ShardLog, ShardMachine, Builder, Guard>;

/// Runs each named test of the suite on a store of its own (as the suite's `test_all` does) and
/// collects the failures.
macro_rules! run_suite {
    ($builder:expr, $($name:ident,)*) => {{
        let mut failed: Vec<String> = Vec::new();
        $(
            let (_guard, store, machine) = $builder.build().await.expect("a store");
            if let Err(error) = ReplicaSuite::$name(store, machine).await {
                failed.push(format!("{}: {error}", stringify!($name)));
            }
        )*
        failed
    }};
}

/// The whole suite but four tests, which apply entries to the state machine that the log never
/// held and then make a snapshot (and send it): a replica applies only entries its log holds,
/// and its snapshot is its checkpoint plus its log from there, so it refuses to make or install
/// one that its log does not back (`get_initial_state_membership_from_log_insm_is_smaller`,
/// `get_initial_state_last_log_lt_sm`, `get_initial_state_re_apply_committed`,
/// `transfer_snapshot`). The cluster tests send snapshots between real nodes.
#[test]
fn the_replica_passes_openrafts_storage_suite() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let builder = Builder { tag: "suite".into() };
        let failed = run_suite!(
            builder,
            last_membership_in_log_initial,
            last_membership_in_log,
            last_membership_in_log_multi_step,
            get_membership_initial,
            get_membership_from_log_and_empty_sm,
            get_membership_from_empty_log_and_sm,
            get_membership_from_log_le_sm_last_applied,
            get_membership_from_log_gt_sm_last_applied_1,
            get_membership_from_log_gt_sm_last_applied_2,
            get_initial_state_without_init,
            get_initial_state_membership_from_empty_log_and_sm,
            get_initial_state_membership_from_sm_inlog_is_smaller,
            get_initial_state_with_state,
            get_initial_state_last_log_gt_sm,
            get_initial_state_inverted_log_order,
            get_initial_state_conflict_at_same_index,
            get_initial_state_log_ids,
            save_vote,
            get_log_entries,
            limited_get_log_entries,
            leader_bounded_stream,
            entries_stream,
            try_get_log_entry,
            log_reader_reads_new_entries,
            initial_logs,
            get_log_state,
            get_log_id,
            last_id_in_log,
            last_applied_state,
            purge_logs_upto_0,
            purge_logs_upto_5,
            purge_logs_upto_20,
            delete_logs_after_11,
            delete_logs_after_5,
            delete_logs_after_0,
            delete_logs_after_none,
            append_to_log,
            snapshot_meta,
            snapshot_meta_optional,
            apply_single,
            apply_multiple,
        );
        assert!(failed.is_empty(), "failed:\n{}", failed.join("\n"));
    });
}

/// Appends `entries` and waits (bounded) until the log reports them durable.
async fn append_durably(log: &mut ShardLog, entries: Vec<super::types::Entry>) -> Result<(), String> {
    use openraft::storage::{IOFlushed, RaftLogStorage};
    use openraft::type_config::TypeConfigExt;
    let (sender, flushed) = C::oneshot();
    log.append(entries, IOFlushed::signal(sender)).await.map_err(|error| error.to_string())?;
    match tokio::time::timeout(std::time::Duration::from_secs(10), flushed).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(outcome) => Err(format!("the flush failed: {outcome:?}")),
        Err(_) => Err("the entries were never reported durable".into()),
    }
}

/// Proves that entries written again where the log was cut back (a restarted replica's
/// uncommitted tail, replaced by its new leader's entries) are reported durable: the log's
/// durable end was past them before the cut, and a flush waiting for that same position again
/// was never told (the replica then never acknowledged its leader).
#[test]
fn entries_written_again_after_a_cut_are_reported_durable() {
    use openraft::storage::RaftLogStorage;
    use openraft::testing::{blank_ent, log_id};
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let (_guard, mut log, _machine) = Builder { tag: "cut".into() }.build().await.expect("a store");
        let first_term: Vec<_> = (1..=5).map(|index| blank_ent::<C>(1, 1, index)).collect();
        append_durably(&mut log, first_term).await.expect("the first entries");
        log.truncate_after(Some(log_id::<C>(1, 1, 3))).await.expect("the cut");
        let second_term: Vec<_> = (4..=5).map(|index| blank_ent::<C>(2, 2, index)).collect();
        append_durably(&mut log, second_term).await.expect("the entries written again");
        let held = openraft::RaftLogReader::try_get_log_entries(&mut log, 1..6).await.expect("a read");
        let terms: Vec<u64> = held.iter().map(|entry| entry.log_id.leader_id.term).collect();
        assert_eq!(terms, [1, 1, 1, 2, 2]);
    });
}

/// Proves that entries a leader sends again, which the log holds but memory no longer does (as
/// after a restart), are kept, not cut and written again (this replica may be one of the
/// majority that committed them), while an entry of another term at the same index is a
/// conflict that cuts the log.
#[test]
fn entries_sent_again_are_kept_and_only_conflicts_cut() {
    use openraft::storage::{IOFlushed, RaftLogStorage};
    use openraft::testing::blank_ent;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let (_guard, mut log, _machine) = Builder { tag: "resent".into() }.build().await.expect("a store");
        append_durably(&mut log, (1..=5).map(|index| blank_ent::<C>(1, 1, index)).collect()).await.expect("entries");
        let shard = log.shard();
        let durable = || shard.borrow().durability.as_ref().map_or(0, |durability| durability.log.durable_lsn());
        // Memory forgets the entries, as after a restart.
        shard.borrow_mut().replication.as_mut().expect("a replica").started_at(6);
        log.append((3..=5).map(|index| blank_ent::<C>(1, 1, index)).collect::<Vec<_>>(), IOFlushed::noop())
            .await
            .expect("entries sent again");
        assert_eq!(durable(), 5, "the log was cut over entries it held");
        log.append(vec![blank_ent::<C>(2, 2, 5)], IOFlushed::noop()).await.expect("a conflicting entry");
        assert!(durable() < 5, "a conflict at 5 cuts the log");
        let held = openraft::RaftLogReader::try_get_log_entries(&mut log, 1..6).await.expect("a read");
        let terms: Vec<u64> = held.iter().map(|entry| entry.log_id.leader_id.term).collect();
        assert_eq!(terms, [1, 1, 1, 1, 2]);
    });
}

/// Proves that reads of entries memory no longer holds (as after a restart) give exactly the
/// log's entries, whatever order they come in: backwards in small steps as Raft's start-up
/// scans, single entries all over, forwards, and across the window's edges, and again after the
/// log was cut back where a window lay.
#[test]
fn entries_read_back_from_disk_are_the_logs_in_any_order() {
    use openraft::storage::RaftLogStorage;
    use openraft::testing::{blank_ent, log_id};
    use openraft::RaftLogReader;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let (_guard, mut log, _machine) = Builder { tag: "readback".into() }.build().await.expect("a store");
        // Terms change every 700 entries: each entry's term says where it is.
        let term_of = |index: u64| 1 + (index - 1) / 700;
        let entries = (1..=3000).map(|index| blank_ent::<C>(term_of(index), 1, index)).collect();
        append_durably(&mut log, entries).await.expect("entries");
        let shard = log.shard();
        shard.borrow_mut().replication.as_mut().expect("a replica").started_at(3001);
        let mut reader = log.clone();
        let mut read = |from: u64, to: u64| {
            let read = futures_util::FutureExt::now_or_never(reader.try_get_log_entries(from..to));
            let held = read.expect("a read from disk does not wait").expect("a read");
            held.iter().map(|entry| (entry.log_id.index, entry.log_id.leader_id.term)).collect::<Vec<_>>()
        };
        let expected = |from: u64, to: u64| (from..to).map(|index| (index, term_of(index))).collect::<Vec<_>>();
        let mut end: u64 = 3001;
        while end > 1 {
            let start = end.saturating_sub(64).max(1);
            assert_eq!(read(start, end), expected(start, end), "{start}..{end}");
            end = start;
        }
        for index in [1, 2999, 1500, 3000, 700, 701, 1024, 1025, 2048] {
            assert_eq!(read(index, index + 1), expected(index, index + 1), "{index}");
        }
        assert_eq!(read(1, 3001), expected(1, 3001));
        // With windows of ten entries' bytes (blank entries count 64 each): reads larger than
        // that are answered and not kept, smaller ones keep a window; both give the log's entries.
        shard.borrow().replication.as_ref().expect("a replica").limit_read_back(640);
        for (from, to) in [(1, 3001), (100, 200), (150, 152), (2990, 3001), (1, 2), (690, 711), (5, 15)] {
            assert_eq!(read(from, to), expected(from, to), "{from}..{to} with small windows");
        }
        shard.borrow().replication.as_ref().expect("a replica").limit_read_back(32 << 20);
        log.truncate_after(Some(log_id::<C>(term_of(2000), 1, 2000))).await.expect("the cut");
        append_durably(&mut log, (2001..=2100).map(|index| blank_ent::<C>(9, 2, index)).collect()).await.expect("more");
        shard.borrow_mut().replication.as_mut().expect("a replica").started_at(2101);
        let after: Vec<(u64, u64)> = read(1990, 2010);
        let wanted: Vec<(u64, u64)> =
            (1990..2010).map(|index| (index, if index <= 2000 { term_of(index) } else { 9 })).collect();
        assert_eq!(after, wanted);
    });
}

/// Proves that a replication stream asking for entries the leader purged meanwhile gets none
/// (openraft then sends a heartbeat and chooses a snapshot), not the entries after the purge,
/// which would follow its previous entry with a hole between them; a range that begins after
/// the purge is read as always.
#[test]
fn a_stream_asking_for_purged_entries_gets_none() {
    use openraft::storage::RaftLogStorage;
    use openraft::testing::{blank_ent, log_id};
    use openraft::RaftLogReader;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        let (_guard, mut log, _machine) = Builder { tag: "purged".into() }.build().await.expect("a store");
        append_durably(&mut log, (1..=10).map(|index| blank_ent::<C>(1, 1, index)).collect()).await.expect("entries");
        log.purge(log_id::<C>(1, 1, 6)).await.expect("the purge");
        let from_purged = log.limited_get_log_entries(3, 10).await.expect("a read");
        assert!(from_purged.is_empty(), "{from_purged:?}");
        let after: Vec<u64> =
            log.limited_get_log_entries(7, 10).await.expect("a read").iter().map(|entry| entry.log_id.index).collect();
        assert_eq!(after, [7, 8, 9]);
    });
}
