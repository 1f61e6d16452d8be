//! A log cut back ([`WalWriter::truncate_after`], a Raft replica dropping entries a new leader did
//! not keep) or started over ([`WalWriter::restart_at`], a replica that installed a snapshot),
//! tested over the simulated disk with a power cut at every interesting point: recovery gives
//! back every kept record that was synced, never a record the cut dropped once the cut reached
//! the disk, and a log that takes new records after whatever survived.

use proptest::prelude::*;

use super::sim::{power_cuts, Cut, SimStorage};
use super::tests::{open_writer, payload, replay};
use super::{read_range, recover, BatchSync, Lsn, WalError, WalWriter};

type Records = Vec<(Lsn, Vec<u8>)>;

/// Records `first..=last` as the tests write them before a cut: 100 bytes each, so seven fill a
/// 1 KiB segment and a few dozen span several.
fn old_records(first: Lsn, last: Lsn) -> Records {
    (first..=last).map(|lsn| (lsn, payload(lsn, 100))).collect()
}

/// A record written after a cut at `lsn`: unlike the one it replaces, byte for byte.
fn new_record(lsn: Lsn, len: usize) -> (Lsn, Vec<u8>) {
    (lsn, payload(lsn + 1000, len))
}

/// A log holding `records`, committed `per_commit` at a time.
fn log_of(records: &Records, per_commit: usize) -> (SimStorage, WalWriter<SimStorage>) {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, records.first().map_or(1, |(lsn, _)| *lsn));
    for chunk in records.chunks(per_commit.max(1)) {
        append_all(&mut writer, chunk);
        writer.commit().expect("commit");
    }
    (storage, writer)
}

fn append_all(writer: &mut WalWriter<SimStorage>, records: &[(Lsn, Vec<u8>)]) {
    for (lsn, bytes) in records {
        assert_eq!(writer.append(bytes).expect("append"), *lsn);
    }
}

/// What recovery may give after a power cut: one of `alternatives`, each a base followed by a
/// prefix (possibly empty) of an extension (the interrupted commit's records).
struct Outcomes {
    alternatives: Vec<(Records, Records)>,
}

impl Outcomes {
    fn allows(&self, records: &Records) -> bool {
        self.alternatives.iter().any(|(base, extension)| {
            records.len() >= base.len()
                && records[..base.len()] == base[..]
                && records.len() - base.len() <= extension.len()
                && records[base.len()..] == extension[..records.len() - base.len()]
        })
    }
}

/// Recovers what `crashed` holds from `from_lsn`, checks it against `outcomes`, then writes one
/// more record on the recovered log and checks it reads back after the survivors: a log recovered
/// after a cut must take new records without bringing any dropped one back.
fn check_recovery(crashed: &SimStorage, from_lsn: Lsn, outcomes: &Outcomes, case: &str) -> Records {
    let records = replay(crashed, from_lsn).unwrap_or_else(|e| panic!("{case}: recovery fails: {e}"));
    assert!(outcomes.allows(&records), "{case}: recovered {:?}", records.iter().map(|(l, _)| *l).collect::<Vec<_>>());
    let mut writer = open_writer(crashed, from_lsn);
    let next = records.last().map_or(from_lsn, |(lsn, _)| lsn + 1);
    let after = new_record(next, 77);
    assert_eq!(writer.append(&after.1).expect("append after recovery"), next, "{case}");
    writer.commit().expect("commit after recovery");
    let mut expected = records.clone();
    expected.push(after);
    assert_eq!(replay(crashed, from_lsn).unwrap_or_else(|e| panic!("{case}, written on: {e}")), expected, "{case}");
    records
}

/// A cut and what follows it, ending with a commit whose sync fails.
struct CutCase {
    written: Lsn,
    per_commit: usize,
    cut: Lsn,
    /// Commit right after the cut, before any record follows it.
    commit_cut: bool,
    /// Records appended and acknowledged after the cut (lengths).
    acknowledged: Vec<usize>,
    /// Records of the interrupted commit (lengths).
    interrupted: Vec<usize>,
}

impl CutCase {
    fn run(&self, syncs_before_failure: u64) {
        let old = old_records(1, self.written);
        let (storage, mut writer) = log_of(&old, self.per_commit);
        writer.truncate_after(self.cut).expect("cut");
        let kept = &old[..self.cut.min(self.written) as usize];
        let next = kept.len() as Lsn + 1;
        assert_eq!(writer.next_lsn(), next);
        if self.commit_cut {
            writer.commit().expect("commit the cut");
        }
        let acknowledged: Records =
            self.acknowledged.iter().enumerate().map(|(i, len)| new_record(next + i as Lsn, *len)).collect();
        append_all(&mut writer, &acknowledged);
        if !acknowledged.is_empty() {
            writer.commit().expect("commit");
        }
        let first_interrupted = next + acknowledged.len() as Lsn;
        let interrupted: Records = self
            .interrupted
            .iter()
            .enumerate()
            .map(|(i, len)| new_record(first_interrupted + i as Lsn, *len))
            .collect();
        append_all(&mut writer, &interrupted);
        storage.fail_syncs_after(syncs_before_failure);
        let _ = writer.commit();
        let mut after_cut = kept.to_vec();
        after_cut.extend(acknowledged.iter().cloned());
        let mut alternatives = vec![(after_cut, interrupted)];
        if !self.commit_cut && acknowledged.is_empty() {
            // Nothing after the cut was synced: the device may have kept none of it, and the
            // log then holds what it held before, as if the cut had not happened.
            alternatives.push((old.clone(), Vec::new()));
        }
        let outcomes = Outcomes { alternatives };
        for (cut, what) in power_cuts(&storage) {
            let case = format!(
                "{} written, cut after {}, {} syncs before the failure, {what}",
                self.written, self.cut, syncs_before_failure
            );
            check_recovery(&storage.crash(&cut), 1, &outcomes, &case);
        }
    }
}

/// A power cut during the first commit after a cut, wherever the cut lies (in the tail segment,
/// several segments back, at a segment's last record or first, at 0, past the end): recovery
/// gives the kept records and a prefix of the new ones, or (only while nothing after the cut
/// reached the disk) the log as it was; never a mix of dropped and new records.
#[test]
fn a_power_cut_after_a_cut_gives_the_kept_records_and_a_prefix_of_the_new_ones() {
    // 100-byte records are 136 bytes with their header: seven after each 64-byte segment header.
    for cut in [35, 12, 14, 15, 7, 0, 40, 45] {
        let case = CutCase {
            written: 40,
            per_commit: 5,
            cut,
            commit_cut: false,
            acknowledged: Vec::new(),
            interrupted: vec![60, 200, 60, 300, 90],
        };
        for syncs_before_failure in [0, 1] {
            case.run(syncs_before_failure);
        }
    }
}

/// The same after records that follow the cut were acknowledged, or after the cut alone was
/// committed: the cut is on the disk then, and no power cut brings a dropped record back.
#[test]
fn a_committed_cut_never_brings_a_dropped_record_back() {
    for (commit_cut, acknowledged) in [(true, vec![]), (false, vec![80, 80]), (true, vec![500])] {
        for cut in [33, 9, 0] {
            let case = CutCase {
                written: 36,
                per_commit: 36,
                cut,
                commit_cut,
                acknowledged: acknowledged.clone(),
                interrupted: vec![120, 40, 400],
            };
            for syncs_before_failure in [0, 1] {
                case.run(syncs_before_failure);
            }
        }
    }
}

/// A record after a cut too large for a segment gets one of its own, leaving the segment the cut
/// began holding no record; recovery and new writes cope at every power cut.
#[test]
fn a_large_record_after_a_cut_survives_a_power_cut() {
    let case = CutCase {
        written: 20,
        per_commit: 4,
        cut: 10,
        commit_cut: false,
        acknowledged: Vec::new(),
        interrupted: vec![3000, 50],
    };
    case.run(0);
    case.run(1);
}

/// Once cut and committed, the log recovers without the dropped records even if nothing was
/// appended after the cut; until then `is_quiet` says the cut still waits for the disk.
#[test]
fn a_cut_reaches_the_disk_with_the_next_commit() {
    let (storage, mut writer) = log_of(&old_records(1, 30), 10);
    assert!(writer.is_quiet());
    writer.truncate_after(20).expect("cut");
    assert_eq!(writer.next_lsn(), 21);
    assert!(writer.durable_lsn() <= 20, "a dropped record is not durable");
    assert!(!writer.is_quiet(), "the cut is not on the disk yet");
    assert_eq!(replay(&storage.crash(&Cut::default()), 1).expect("recover"), old_records(1, 30), "not committed yet");
    writer.commit().expect("commit the cut");
    assert!(writer.is_quiet());
    assert_eq!(writer.durable_lsn(), 20);
    let crashed = storage.crash(&Cut::default());
    let outcomes = Outcomes { alternatives: vec![(old_records(1, 20), Vec::new())] };
    check_recovery(&crashed, 1, &outcomes, "committed cut, nothing appended");
    let recovered = recover(&storage.crash(&Cut::default()), 1, |_, _| {}).expect("recover");
    assert_eq!(recovered.next_lsn, 21);
}

/// Cuts and restarts wait for buffered records, batches in flight and written records not yet
/// synced, refusing with `Unflushed` and changing nothing; a poisoned log refuses them too. A cut
/// at or past the end does nothing.
#[test]
fn cuts_and_restarts_wait_for_what_is_buffered() {
    let (storage, mut writer) = log_of(&old_records(1, 10), 10);
    append_all(&mut writer, &old_records(11, 12));
    assert!(!writer.is_quiet(), "records are buffered");
    assert!(matches!(writer.truncate_after(5), Err(WalError::Unflushed)));
    assert!(matches!(writer.restart_at(100), Err(WalError::Unflushed)));
    let batch = writer.take_batch(BatchSync::Now).expect("usable").expect("records are buffered");
    assert!(!writer.is_quiet(), "a batch is in flight");
    assert!(matches!(writer.truncate_after(5), Err(WalError::Unflushed)));
    assert!(matches!(writer.restart_at(100), Err(WalError::Unflushed)));
    assert_eq!(writer.next_lsn(), 13, "the refusals changed nothing");
    writer.finish_batch(batch.write()).expect("the batch lands");
    assert!(writer.is_quiet());
    assert_eq!(replay(&storage, 1).expect("replay"), old_records(1, 12));
    append_all(&mut writer, &old_records(13, 14));
    let batch = writer.take_batch(BatchSync::Later).expect("usable").expect("records are buffered");
    writer.finish_batch(batch.write()).expect("the batch is written");
    assert!(!writer.is_quiet(), "written records are not synced yet");
    assert!(matches!(writer.truncate_after(5), Err(WalError::Unflushed)));
    assert!(matches!(writer.restart_at(100), Err(WalError::Unflushed)));
    assert_eq!(writer.commit().expect("the sync alone"), 14, "a commit with nothing buffered syncs them");
    assert!(writer.is_quiet());
    for last in [14, 15, 1000] {
        writer.truncate_after(last).expect("a cut past the end");
        assert!(writer.is_quiet(), "a cut at or past the end writes nothing");
        assert_eq!(writer.next_lsn(), 15);
    }
    assert!(WalError::Unflushed.to_string().contains("commit them first"));
    storage.fail_writes_after(0);
    append_all(&mut writer, &old_records(15, 15));
    assert!(writer.commit().is_err());
    assert!(matches!(writer.truncate_after(5), Err(WalError::Poisoned(_))));
    assert!(matches!(writer.restart_at(100), Err(WalError::Poisoned(_))));
}

/// One step of a random history: optionally cut back, optionally recycle what a checkpoint
/// covers, then append a group of records and commit it.
#[derive(Debug, Clone)]
struct Step {
    /// Where to cut, as a fraction (of 256) of the records above the checkpoint.
    cut: Option<u8>,
    /// Take a checkpoint at this fraction (of 256) of the durable records above the last one,
    /// and recycle the segments it covers.
    checkpoint: Option<u8>,
    group: Vec<usize>,
}

fn step() -> impl Strategy<Value = Step> {
    (
        proptest::option::weighted(0.4, any::<u8>()),
        proptest::option::weighted(0.2, any::<u8>()),
        proptest::collection::vec(0usize..300, 0..8),
    )
        .prop_map(|(cut, checkpoint, group)| Step { cut, checkpoint, group })
}

/// The model of a random history: the log the writer holds, and the checkpoint's LSN (records
/// before it are no longer needed; a cut never goes below it, as Raft never drops an applied
/// entry).
struct Model {
    log: Records,
    from_lsn: Lsn,
    written: u64,
}

impl Model {
    fn next_lsn(&self) -> Lsn {
        self.log.len() as Lsn + 1
    }

    /// The model's records from the checkpoint on.
    fn needed(&self) -> Records {
        self.log[(self.from_lsn - 1) as usize..].to_vec()
    }

    /// Applies `step` to the writer and the model, up to its commit, and returns the new records.
    fn apply(&mut self, writer: &mut WalWriter<SimStorage>, step: &Step) -> Records {
        if let Some(fraction) = step.checkpoint {
            let above = writer.durable_lsn() + 1 - self.from_lsn;
            let lsn = self.from_lsn + above * u64::from(fraction) / 256;
            writer.release_before(lsn, &Default::default()).expect("release");
            self.from_lsn = lsn;
        }
        if let Some(fraction) = step.cut {
            let above = self.next_lsn() - self.from_lsn;
            let last = self.from_lsn - 1 + above * u64::from(fraction) / 256;
            writer.truncate_after(last).expect("cut");
            self.log.truncate(last as usize);
        }
        let mut group = Vec::new();
        for len in &step.group {
            self.written += 1;
            let record = (self.next_lsn() + group.len() as Lsn, payload(self.written, *len));
            assert_eq!(writer.append(&record.1).expect("append"), record.0);
            group.push(record);
        }
        group
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// A random history of cuts (repeated, across segments, down to the checkpoint), recycling
    /// and appends, each step committed, then a last step whose commit is interrupted by a random
    /// power cut (any subset of its sectors, one torn): recovery from the checkpoint gives the
    /// model's log before that step, or the log after its cut followed by a prefix of its
    /// records; and the recovered log takes new records.
    #[test]
    fn random_cuts_recover_to_the_model(
        steps in proptest::collection::vec(step(), 1..12),
        keep_bits in proptest::collection::vec(any::<bool>(), 1..64),
        tear in any::<proptest::sample::Index>(),
        tear_at in any::<proptest::sample::Index>(),
    ) {
        let storage = SimStorage::default();
        let mut writer = open_writer(&storage, 1);
        let mut model = Model { log: Vec::new(), from_lsn: 1, written: 0 };
        let (last, committed) = steps.split_last().expect("at least one step");
        for step in committed {
            let group = model.apply(&mut writer, step);
            writer.commit().expect("commit");
            model.log.extend(group);
            prop_assert_eq!(replay(&storage, model.from_lsn).expect("replay"), model.needed());
        }
        let before = model.needed();
        let group = model.apply(&mut writer, last);
        storage.fail_syncs_after(0);
        let _ = writer.commit();
        let mut alternatives = vec![(model.needed(), group)];
        if last.cut.is_some() {
            alternatives.push((before, Vec::new()));
        }
        let sectors = storage.unsynced_sectors();
        let keep = (0..sectors).map(|i| keep_bits[i % keep_bits.len()]).collect();
        let tear = (sectors > 0).then(|| {
            let torn = tear.index(sectors);
            (torn, tear_at.index(storage.unsynced_sector_len(torn) + 1))
        });
        let crashed = storage.crash(&Cut { keep, tear });
        // A checkpoint taken in the last step is in place: recovery starts from it.
        let from_lsn = model.from_lsn;
        let trimmed: Vec<(Records, Records)> = alternatives
            .into_iter()
            .map(|(base, extension)| (base.into_iter().filter(|(lsn, _)| *lsn >= from_lsn).collect(), extension))
            .collect();
        check_recovery(&crashed, from_lsn, &Outcomes { alternatives: trimmed }, "random history");
    }
}

/// A cut back to the checkpoint, whose covered segments are then recycled (the checkpoint covers
/// every kept record), and a power cut before anything new reaches the disk: recovery from the
/// checkpoint finds the log empty from there, never a log that starts past it.
#[test]
fn a_cut_to_the_checkpoint_survives_recycling_and_a_power_cut() {
    let (storage, mut writer) = log_of(&old_records(1, 40), 8);
    writer.truncate_after(12).expect("cut");
    writer.release_before(13, &Default::default()).expect("recycle what the checkpoint covers");
    let outcomes = Outcomes { alternatives: vec![(Vec::new(), vec![new_record(13, 50)])] };
    check_recovery(&storage.crash(&Cut::default()), 13, &outcomes, "recycled, nothing committed");
    append_all(&mut writer, &[new_record(13, 50)]);
    storage.fail_syncs_after(0);
    let _ = writer.commit();
    for (cut, what) in power_cuts(&storage) {
        check_recovery(&storage.crash(&cut), 13, &outcomes, &format!("recycled, first record interrupted: {what}"));
    }
}

/// A log restarted at a later LSN (a replica that installed a snapshot), at every point of a
/// power cut: before the restart reaches the disk, the old log recovers from the old checkpoint
/// and the new checkpoint cannot be used yet; once it has, the log recovers from the new start
/// (empty, or with a prefix of the records written since) and the old checkpoint is refused
/// with a clear error. Never both, never neither.
#[test]
fn a_restart_survives_a_power_cut_at_every_point() {
    let old = old_records(1, 30);
    for (commit_restart, written) in [(false, 0), (true, 0), (false, 4), (true, 4)] {
        for syncs_before_failure in [0, 1] {
            let (storage, mut writer) = log_of(&old, 7);
            writer.restart_at(500).expect("restart");
            assert_eq!(writer.next_lsn(), 500);
            assert!(!writer.is_quiet(), "the restart waits for the disk");
            if commit_restart {
                writer.commit().expect("commit the restart");
                assert!(writer.is_quiet());
                assert_eq!(writer.durable_lsn(), 499);
            }
            let new: Records = (0..written).map(|i| new_record(500 + i, 150 * (i as usize + 1))).collect();
            append_all(&mut writer, &new);
            storage.fail_syncs_after(syncs_before_failure);
            let _ = writer.commit();
            for (cut, what) in power_cuts(&storage) {
                let case = format!("restart committed {commit_restart}, {written} written, {what}");
                let crashed = storage.crash(&cut);
                let from_old = replay(&crashed, 1);
                let from_new = replay(&crashed, 500);
                match (&from_old, &from_new) {
                    (Ok(records), Err(WalError::Corrupt { .. })) => {
                        assert!(!commit_restart, "{case}: a committed restart was lost");
                        assert_eq!(records, &old, "{case}");
                        check_recovery(&crashed, 1, &Outcomes { alternatives: vec![(old.clone(), Vec::new())] }, &case);
                    }
                    (Err(WalError::Corrupt { reason, .. }), Ok(_)) => {
                        assert!(reason.contains("starts at LSN 500"), "{case}: {reason}");
                        check_recovery(
                            &crashed,
                            500,
                            &Outcomes { alternatives: vec![(Vec::new(), new.clone())] },
                            &case,
                        );
                    }
                    _ => panic!("{case}: exactly one checkpoint must work: {from_old:?} / {from_new:?}"),
                }
            }
        }
    }
}

/// The old segments are recycled as soon as the checkpoint at the new start is in place, even
/// before the restart reached the disk: a power cut then leaves a log that recovers from the new
/// start, empty.
#[test]
fn a_restart_survives_recycling_and_a_power_cut() {
    let (storage, mut writer) = log_of(&old_records(1, 30), 7);
    writer.restart_at(500).expect("restart");
    assert!(writer.release_before(500, &Default::default()).expect("recycle").recycled >= 4, "every old segment goes");
    let outcomes = Outcomes { alternatives: vec![(Vec::new(), Vec::new())] };
    check_recovery(&storage.crash(&Cut::default()), 500, &outcomes, "restart recycled, nothing committed");
    writer.commit().expect("commit the restart");
    check_recovery(&storage.crash(&Cut::default()), 500, &outcomes, "restart recycled and committed");
}

/// A restart back into the log's records is a cut; a restart at the next LSN starts a segment
/// and drops nothing; each survives a reopening.
#[test]
fn restarts_at_or_before_the_end_keep_what_precedes_them() {
    for (first, kept) in [(31, 30), (20, 19), (1, 0)] {
        let (storage, mut writer) = log_of(&old_records(1, 30), 30);
        writer.restart_at(first).expect("restart");
        append_all(&mut writer, &[new_record(first, 64)]);
        writer.commit().expect("commit");
        let mut expected = old_records(1, kept);
        expected.push(new_record(first, 64));
        let outcomes = Outcomes { alternatives: vec![(expected, Vec::new())] };
        check_recovery(&storage.crash(&Cut::default()), 1, &outcomes, &format!("restart at {first}"));
    }
}

/// A log of records 1 to 40, cut back after `first.0` and written on up to `first.1`, then cut
/// again (several segments back) after `second.0` and written on up to `second.1`, each step
/// committed; and the records it holds.
fn cut_twice(first: (Lsn, Lsn), second: (Lsn, Lsn)) -> (SimStorage, WalWriter<SimStorage>, Records) {
    let (storage, mut writer) = log_of(&old_records(1, 40), 6);
    let mut model = old_records(1, 40);
    for ((cut, last), len) in [(first, 90), (second, 40)] {
        writer.truncate_after(cut).expect("cut");
        model.truncate(cut as usize);
        model.extend((cut + 1..=last).map(|lsn| new_record(lsn, len)));
        append_all(&mut writer, &model[cut as usize..]);
        writer.commit().expect("commit");
    }
    (storage, writer, model)
}

/// `read_range` gives exactly the records the log holds in a range, honouring cuts across
/// segments, and stops at the log's end; a range the log does not hold without a gap (it starts
/// later, was restarted past it, or lost a record that later ones follow) is an error, never a
/// silent skip that would hand a follower the wrong entries.
#[test]
fn read_range_gives_the_records_of_a_range_or_says_why_not() {
    let read = |storage: &SimStorage, from: Lsn, to: Lsn| -> Result<Records, WalError> {
        let mut records = Vec::new();
        read_range(storage, from, to, |lsn, bytes| records.push((lsn, bytes.to_vec())))?;
        Ok(records)
    };
    let (storage, mut writer, model) = cut_twice((30, 33), (10, 20));
    for (from, to) in [(1, 20), (5, 15), (11, 11), (10, 40), (20, 20), (21, 30), (15, 9)] {
        let expected: Records = model.iter().filter(|(lsn, _)| (from..=to).contains(lsn)).cloned().collect();
        assert_eq!(read(&storage, from, to).expect("read"), expected, "{from}..={to}");
    }
    // Restarted past its end: records 21 to 99 are nowhere.
    writer.restart_at(100).expect("restart");
    append_all(&mut writer, &[new_record(100, 10)]);
    writer.commit().expect("commit");
    assert_eq!(read(&storage, 100, 200).expect("read"), vec![new_record(100, 10)]);
    assert_eq!(read(&storage, 15, 20).expect("read"), model[14..20].to_vec());
    match read(&storage, 15, 100) {
        Err(WalError::Missing { lsn: 21, .. }) => {}
        other => panic!("a range across the restart's gap must be refused, got {other:?}"),
    }
    writer.release_before(100, &Default::default()).expect("recycle");
    match read(&storage, 1, 100) {
        Err(WalError::Missing { lsn: 1, .. }) => {}
        other => panic!("a range before the log's start must be refused, got {other:?}"),
    }
}

/// A damaged record inside a range, with later records after it, is refused rather than skipped.
#[test]
fn read_range_refuses_a_damaged_record_inside_the_range() {
    use super::format::{segment_name, SEGMENT_HEADER_BYTES};
    let (storage, _writer) = log_of(&old_records(1, 20), 20);
    // Record 3 of segment 1 (the third of seven 136-byte records).
    storage.corrupt(&segment_name(1), SEGMENT_HEADER_BYTES + 2 * 136 + 40);
    let mut seen = Vec::new();
    let result = read_range(&storage, 1, 20, |lsn, _| seen.push(lsn));
    assert!(matches!(result, Err(WalError::Missing { lsn: 3, .. })), "{result:?}");
    assert_eq!(seen, vec![1, 2]);
}

/// A checkpoint below a cut recycles only the segments wholly before it: the segment holding
/// both kept records and dropped ones keeps its kept records, and so do the segments after it
/// until the checkpoint passes the cut. Recovery from the checkpoint then finds every record it
/// needs, before and after new records are written.
#[test]
fn recycling_after_a_cut_keeps_the_records_the_checkpoint_needs() {
    let (storage, mut writer) = log_of(&old_records(1, 40), 8);
    // Segments hold records 1-7, 8-14, ...: the cut lies inside the second one.
    writer.truncate_after(10).expect("cut");
    writer.commit().expect("commit the cut");
    assert_eq!(
        writer.release_before(8, &Default::default()).expect("recycle what a checkpoint at 8 covers").recycled,
        1
    );
    let outcomes = Outcomes { alternatives: vec![(old_records(8, 10), Vec::new())] };
    check_recovery(&storage.crash(&Cut::default()), 8, &outcomes, "recycled below the cut");
    append_all(&mut writer, &[new_record(11, 60)]);
    writer.commit().expect("commit");
    let mut expected = old_records(8, 10);
    expected.push(new_record(11, 60));
    assert_eq!(replay(&storage, 8).expect("recover from the checkpoint"), expected);
}

/// A backup's copy of a log that was cut back (a replica's, which a new leader overwrote) holds
/// the records the log holds now, never the dropped ones that earlier segments still carry.
#[test]
fn a_copy_of_a_cut_log_holds_the_records_that_replaced_the_dropped_ones() {
    let (storage, _writer, model) = cut_twice((30, 35), (12, 25));
    for until in [0, 5, 12, 13, 20, 25] {
        let target = SimStorage::default();
        super::copy_until(&storage, &target, until).unwrap_or_else(|e| panic!("copy until {until}: {e}"));
        assert_eq!(replay(&target, 1).expect("the copy recovers"), model[..until as usize].to_vec(), "until {until}");
    }
    let error = super::copy_until(&storage, &SimStorage::default(), 30).expect_err("records 26 to 30 are gone");
    assert!(error.to_string().contains("ends at LSN 25"), "{error}");
}

/// A gap in a restarted log is allowed only at or before the LSN recovery starts from: from the
/// new start or later the log recovers; from anywhere in the gap, or in the old records before
/// it, recovery refuses, naming where the log goes on.
#[test]
fn a_restart_gap_is_allowed_only_before_where_recovery_starts() {
    let (storage, mut writer) = log_of(&old_records(1, 30), 10);
    writer.restart_at(500).expect("restart");
    append_all(&mut writer, &(500..=510).map(|lsn| new_record(lsn, 70)).collect::<Records>());
    writer.commit().expect("commit");
    for from in [500, 505, 510, 511] {
        let expected: Records = (from..=510).map(|lsn| new_record(lsn, 70)).collect();
        assert_eq!(replay(&storage, from).expect("recover"), expected, "from {from}");
    }
    for from in [1, 30, 31, 499] {
        match replay(&storage, from) {
            Err(WalError::Corrupt { reason, .. }) => {
                assert!(reason.contains("starts at LSN 500"), "from {from}: {reason}")
            }
            other => panic!("from {from}: the gap before 500 is needed, got {other:?}"),
        }
    }
    match replay(&storage, 512) {
        Err(WalError::Corrupt { reason, .. }) => assert!(reason.contains("ends at LSN 510"), "{reason}"),
        other => panic!("a checkpoint past the log's end must be refused, got {other:?}"),
    }
}
