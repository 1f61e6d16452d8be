//! Power cuts in a replicated shard's life, on the simulated disk: a leading replica writing its
//! group's log through the shared log and its sync thread, cut off at a random moment; and a
//! follower whose log a new leader cuts back, cut off at every point of the commit that follows.
//! Recovery in replicated mode must keep every entry the log synced, hold a prefix of what was
//! appended (never an entry a durable cut dropped), and leave the pools exactly as the
//! committed entries up to `until` say.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::checkpoint::Step;
use super::recovery::load_shard_with;
use super::replicated_tests::{checkpoint, pool_of, pools_of, History, Leader, Pairs};
use super::tests::{sim_log, temp_dir};
use super::*;
use crate::persistence::wal::sim::{power_cuts, Cut, SimStorage};
use crate::persistence::wal::{read_range, LogStorage, Lsn, WalError};

/// A small deterministic generator (xorshift64*), so that a failing run can be named by its seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    /// A number in `0..bound`.
    fn below(&mut self, bound: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % bound
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
}

/// The entries `from..=to` of the log in `storage`.
fn entries<S: LogStorage>(storage: &S, from: Lsn, to: Lsn) -> Result<Vec<(Lsn, Vec<u8>)>, WalError> {
    let mut entries = Vec::new();
    read_range(storage, from, to, |lsn, payload| entries.push((lsn, payload.to_vec())))?;
    Ok(entries)
}

/// Runs the checkpoint the leader's shard has in progress as far as the log's durable entries
/// allow, or begins one if every entry the leader executed is committed (a single-node group
/// commits what is durable): only then are the pools it copies as of its replay point (a pool
/// created or deleted by a later entry would be in the checkpoint and in the replay both).
/// Returns the committed entry the finished checkpoint may hold changes of (its state file
/// would say so before the manifest), having recycled the log the checkpoint covers.
fn checkpoint_step(leader: &Leader<SimStorage>, checkpointer: &mut Checkpointer) -> Option<Lsn> {
    if !checkpointer.in_progress() {
        let durable = leader.log.durable_lsn();
        if durable < leader.log.last_lsn() {
            leader.log.request_sync();
            return None;
        }
        checkpointer.begin(durable + 1, 2, vec![leader.checkpoint_pool()], &Default::default(), 1 << 20);
    }
    loop {
        let durable = leader.log.durable_lsn();
        match checkpointer.step(durable, 16).expect("step") {
            Step::Write(write) => checkpointer.recycle(write.run().expect("write pages")),
            Step::Continue => {}
            Step::WaitDurable(_) => {
                leader.log.request_sync();
                return None;
            }
            Step::Finish(job) => {
                let replay_from = checkpointer.complete(job.run(|| None)).expect("complete");
                leader.log.release_before(replay_from, &Default::default()).expect("recycle");
                return Some(durable);
            }
        }
    }
}

/// One run: a leader of term 1 writes a random history (puts, erases, blank and membership
/// entries, new terms, checkpoints, requested syncs, pauses) while its sync thread commits, and
/// the power goes at a random moment, keeping a random subset of the unsynced sectors (one
/// perhaps torn).
fn leader_run(seed: u64) {
    let mut rng = Rng::new(seed);
    let dir = temp_dir(&format!("replicated-crash-{seed}"));
    let (sim, log) = sim_log(16 * 1024);
    let thread = log
        .spawn_sync_thread("crash-sync".into(), Duration::from_micros(300), Box::new(|_| {}))
        .expect("spawn the sync thread");
    let mut leader = Leader::new(log.clone(), 1, true);
    let mut checkpointer = Checkpointer::new(dir.clone(), Manifest::default());
    // The committed entry a complete checkpoint may hold: the least `until` recovery is given.
    let mut floor = 0;
    leader.raft_entry(None);
    leader.create_pool();
    for _ in 0..10 + rng.below(80) {
        match rng.below(30) {
            0 => leader.raft_entry(None),
            1 => leader.raft_entry(Some(format!("members {}", rng.below(9)).as_bytes())),
            2 => leader.next_term(),
            3 | 4 => leader.erase(rng.below(40) as u16),
            5 | 6 => log.request_sync(),
            7 => std::thread::sleep(Duration::from_micros(rng.below(400))),
            8 | 9 => floor = checkpoint_step(&leader, &mut checkpointer).unwrap_or(floor),
            _ => {
                let len = if rng.chance(8) { 3000 + rng.below(3000) } else { rng.below(300) };
                leader.put(rng.below(40) as u16, len as usize);
            }
        }
    }
    let durable = log.durable_lsn();
    let keep = (0..1024).map(|_| rng.chance(2)).collect();
    let tear = rng.chance(2).then(|| (rng.below(64) as usize, rng.below(513) as usize));
    let crashed = sim.crash(&Cut { keep, tear });
    // Whatever the leader and its thread do from here reaches the live disk only: the live log
    // then holds every entry appended, and what survived must be a prefix of it.
    thread.stop();
    log.wait_for_spare();
    let history = leader.history.clone();
    drop(leader);
    drop(log);
    let case = format!("seed {seed}, durable {durable}, appended {}", history.last());
    let all = load_shard_with(&dir, &crashed, ReplayMode::Replicated { until: Lsn::MAX })
        .unwrap_or_else(|e| panic!("{case}: recovery fails: {e}"));
    let replay_from = all.manifest.replay_from.max(1);
    let last = all.wal.next_lsn - 1;
    assert!(last >= durable, "{case}: synced entries up to {durable} lost, the log ends at {last}");
    assert!(last <= history.last(), "{case}: entries nobody appended");
    assert_eq!(
        entries(&crashed, replay_from, last).expect("read the crashed log"),
        entries(&sim, replay_from, last).expect("read the live log"),
        "{case}: the recovered log is not a prefix of the appended one"
    );
    let held_before = !entries(&crashed, replay_from - 1, replay_from - 1).unwrap_or_default().is_empty();
    let mut untils = vec![floor, floor + rng.below(last.saturating_sub(floor) + 1), durable.max(floor), last, Lsn::MAX];
    untils.dedup();
    for until in untils {
        let loaded = load_shard_with(&dir, &crashed, ReplayMode::Replicated { until })
            .unwrap_or_else(|e| panic!("{case}, until {until}: recovery fails: {e}"));
        let applied = until.min(last).max(replay_from - 1);
        let case = format!("{case}, until {until}, checkpoint replays from {replay_from}");
        assert_eq!(pool_of(loaded.pools), history.pool(applied), "{case}: the pool is not as of entry {applied}");
        let mut expected = history.summary(last, applied, replay_from);
        if applied < replay_from && !held_before {
            // The checkpoint's last entry went with a recycled segment.
            expected.applied = None;
            expected.last = expected.last.filter(|(lsn, _)| *lsn >= replay_from);
        }
        assert_eq!(loaded.entries, expected, "{case}");
    }
    // The recovered log takes the next entry.
    let config = crate::persistence::wal::WalConfig { segment_bytes: 16 * 1024 };
    let mut writer =
        crate::persistence::wal::WalWriter::open(crashed.clone(), config, &all.wal).expect("open the recovered log");
    assert_eq!(writer.append(&[0x81; 9]).expect("append"), last + 1);
    writer.commit().expect("commit");
    let again = load_shard_with(&dir, &crashed, ReplayMode::Replicated { until: 0 }).expect("recover");
    assert_eq!(again.entries.last.map(|(lsn, _)| lsn), Some(last + 1), "{case}");
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// Leaders cut off at random moments, while their sync thread runs: a bounded number of runs,
/// stopped early (after a few) if they take too long on a slow machine.
#[test]
fn a_leader_cut_off_at_a_random_moment_recovers_its_committed_state() {
    const RUNS: u64 = 200;
    const RUNS_MIN: u64 = 8;
    const BUDGET: Duration = Duration::from_secs(8);
    let started = Instant::now();
    for seed in 1..=RUNS {
        if seed > RUNS_MIN && started.elapsed() > BUDGET {
            break;
        }
        leader_run(seed);
    }
}

/// The payloads of every entry of the log in `storage`, from 1.
fn all_entries(storage: &SimStorage) -> Vec<Vec<u8>> {
    let last = crate::persistence::wal::recover(storage, 1, |_, _| {}).expect("recover").next_lsn - 1;
    entries(storage, 1, last).expect("read").into_iter().map(|(_, payload)| payload).collect()
}

/// A leader of `term` writing pool `pool`: a blank entry, the pool's creation, `puts` puts.
fn leader_history(term: u64, pool: u64, puts: u16) -> (Vec<Vec<u8>>, History) {
    let (sim, log) = sim_log(16 * 1024);
    let mut leader = Leader::new(log, term, true).with_pool(pool);
    leader.raft_entry(None);
    leader.create_pool();
    for k in 0..puts {
        leader.put(k, 20 + 70 * usize::from(k % 5));
    }
    leader.log.commit_now().expect("commit");
    (all_entries(&sim), leader.history.clone())
}

/// A follower's log after a new leader cut it back: what the test expects of a recovery.
struct CutFollower {
    /// The old leader's entries (pool 1) and how they leave it; the follower held them all.
    old: (Vec<Vec<u8>>, History),
    /// The new leader's entries (pool 2), which follow `committed` in the follower's log.
    new: (Vec<Vec<u8>>, History),
    committed: Lsn,
}

impl CutFollower {
    /// Checks a recovery of `crashed` up to `until`, after a checkpoint as of `covered`.
    fn check(&self, dir: &std::path::Path, crashed: &SimStorage, until: Lsn, covered: Lsn, case: &str) {
        let loaded = load_shard_with(dir, crashed, ReplayMode::Replicated { until })
            .unwrap_or_else(|e| panic!("{case}: recovery fails: {e}"));
        let last = loaded.wal.next_lsn - 1;
        let held: Vec<Vec<u8>> =
            entries(crashed, covered + 1, last).expect("read").into_iter().map(|(_, payload)| payload).collect();
        let (old, new) = (&self.old.0, &self.new.0);
        let k = self.committed;
        let cut_kept = last <= k || held.get((k - covered) as usize) == new.first();
        let applied = until.min(last);
        let mut expected = BTreeMap::new();
        if cut_kept {
            let expected_log: Vec<Vec<u8>> = old[..k as usize].iter().chain(new).cloned().collect();
            assert_eq!(held[..], expected_log[covered as usize..last as usize], "{case}: not the cut log");
            expected.extend(self.old.1.pool(applied.min(k)).map(|pairs| (1, pairs)));
            expected.extend(self.new.1.pool(applied.saturating_sub(k)).map(|pairs| (2, pairs)));
        } else {
            assert_eq!(held[..], old[covered as usize..last as usize], "{case}: not the old log");
            assert!(until <= k, "{case}: the cut of a committed entry's successors was lost");
            expected.extend(self.old.1.pool(applied).map(|pairs| (1, pairs)));
        }
        let found: BTreeMap<u64, Pairs> = pools_of(loaded.pools);
        assert_eq!(found, expected, "{case}");
        let term = |lsn: Lsn| match lsn {
            0 => None,
            lsn if cut_kept && lsn > k => Some((lsn, self.new.1.term(lsn - k))),
            lsn => Some((lsn, self.old.1.term(lsn))),
        };
        // Where replay applied nothing, the entry the checkpoint is as of is named only if the
        // log still holds it (recycling may have taken its segment).
        let held = |lsn: Lsn| entries(crashed, lsn, lsn).is_ok_and(|entries| !entries.is_empty());
        let named = |lsn: Lsn| term(lsn).filter(|_| lsn > covered || held(lsn));
        assert_eq!((loaded.entries.last, loaded.entries.applied), (named(last), named(applied)), "{case}");
    }
}

/// A follower holds an old leader's entries, of which the first `committed` were committed and
/// applied; a checkpoint holds the first `covered` of them, and the log it covers is recycled,
/// before or after the cut. A new leader, elected with exactly the committed ones, cuts the
/// rest: the follower cuts its log, takes the new leader's entries, acknowledges some, and the
/// power goes during the next commit. At every power cut, recovery up to what was committed
/// gives the old leader's committed state and the new leader's applied entries, and never an
/// entry of the old leader past the cut once the cut or any entry after it reached the disk.
#[test]
fn a_follower_cut_back_by_a_new_leader_recovers_at_every_power_cut() {
    struct Case {
        committed: Lsn,
        covered: Lsn,
        checkpoint_after_cut: bool,
        acknowledged: usize,
        syncs_before_failure: u64,
    }
    let old = leader_history(1, 1, 10);
    let new = leader_history(2, 2, 4);
    let cases = [
        Case { committed: 7, covered: 5, checkpoint_after_cut: false, acknowledged: 0, syncs_before_failure: 0 },
        Case { committed: 7, covered: 7, checkpoint_after_cut: false, acknowledged: 2, syncs_before_failure: 0 },
        Case { committed: 7, covered: 7, checkpoint_after_cut: true, acknowledged: 0, syncs_before_failure: 0 },
        Case { committed: 4, covered: 3, checkpoint_after_cut: true, acknowledged: 1, syncs_before_failure: 0 },
        Case { committed: 3, covered: 0, checkpoint_after_cut: false, acknowledged: 1, syncs_before_failure: 0 },
        Case { committed: 3, covered: 2, checkpoint_after_cut: false, acknowledged: 0, syncs_before_failure: 1 },
    ];
    for Case { committed, covered, checkpoint_after_cut, acknowledged, syncs_before_failure } in cases {
        let tag = format!("{committed}-{covered}-{checkpoint_after_cut}-{acknowledged}-{syncs_before_failure}");
        let dir = temp_dir(&format!("follower-cut-{tag}"));
        let follower = CutFollower { old: old.clone(), new: new.clone(), committed };
        // Segments of 1 KiB hold two or three entries each: the cut lies several segments back.
        let (sim, log) = sim_log(1024);
        for (index, payload) in old.0.iter().enumerate() {
            log.append_entry(index as Lsn + 1, payload).expect("append");
        }
        log.commit_now().expect("commit");
        let take_checkpoint = || {
            let mut replica = ReplicaPools::new(Vec::new(), 1);
            read_range(&sim, 1, covered, |lsn, payload| {
                if let Some(super::entry::Entry::Normal { record, .. }) = super::entry::Entry::decode(payload) {
                    replica.apply(lsn, record).expect("apply");
                }
            })
            .expect("read");
            let mut checkpointer = Checkpointer::new(dir.clone(), Manifest::default());
            checkpoint(&mut checkpointer, &replica, covered + 1, log.durable_lsn());
            log.release_before(covered + 1, &Default::default()).expect("recycle");
        };
        if covered > 0 && !checkpoint_after_cut {
            take_checkpoint();
        }
        log.truncate_after(committed).expect("cut");
        if covered > 0 && checkpoint_after_cut {
            take_checkpoint();
        }
        let (acked, rest) = new.0.split_at(acknowledged);
        for payload in acked {
            log.append_entry(log.next_lsn(), payload).expect("append");
        }
        log.commit_now().expect("commit");
        for payload in rest {
            log.append_entry(log.next_lsn(), payload).expect("append");
        }
        sim.fail_syncs_after(syncs_before_failure);
        let _ = log.commit_now();
        let acked_to = committed + acknowledged as Lsn;
        for (cut, what) in power_cuts(&sim) {
            let crashed = sim.crash(&cut);
            let mut untils = vec![committed, acked_to];
            untils.dedup();
            for until in untils {
                follower.check(&dir, &crashed, until, covered, &format!("case {tag}, until {until}, {what}"));
            }
        }
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
