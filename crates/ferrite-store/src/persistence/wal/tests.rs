//! The log's promises, tested over the simulated disk: what `commit` acknowledged survives any
//! power cut, a torn tail is cut and nothing else is, damage is reported with its place, failures
//! poison, a full disk is a clean refusal, and recycled segments never resurrect old records.

use proptest::prelude::*;

use super::format::{segment_name, SEGMENT_HEADER_BYTES};
use super::sim::SimStorage;
use super::storage::FsStorage;
use super::{recover, Lsn, WalConfig, WalError, WalWriter};

/// Small segments, so a few records already span several of them.
const SMALL: WalConfig = WalConfig { segment_bytes: 1024 };

fn payload(lsn: Lsn, len: usize) -> Vec<u8> {
    (0..len).map(|i| (lsn as usize * 31 + i) as u8).collect()
}

fn open_writer(storage: &SimStorage, from_lsn: Lsn) -> WalWriter<SimStorage> {
    let recovered = recover(storage, from_lsn, |_, _| {}).expect("recover");
    WalWriter::open(storage.clone(), SMALL, &recovered).expect("open writer")
}

fn replay(storage: &SimStorage, from_lsn: Lsn) -> Result<Vec<(Lsn, Vec<u8>)>, WalError> {
    let mut records = Vec::new();
    recover(storage, from_lsn, |lsn, payload| records.push((lsn, payload.to_vec())))?;
    Ok(records)
}

#[test]
fn records_come_back_in_order_across_segments() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    let mut expected = Vec::new();
    for lsn in 1..=200u64 {
        let record = payload(lsn, (lsn as usize * 7) % 300);
        assert_eq!(writer.append(&record).expect("append"), lsn);
        expected.push((lsn, record));
        if lsn % 9 == 0 {
            assert_eq!(writer.commit().expect("commit"), lsn);
        }
    }
    writer.commit().expect("commit");
    assert_eq!(replay(&storage, 1).expect("replay"), expected);
    assert_eq!(replay(&storage, 150).expect("replay from a checkpoint"), expected[149..].to_vec());
    let recovered = recover(&storage, 1, |_, _| {}).expect("recover");
    assert_eq!(recovered.next_lsn, 201);
    assert!(recovered.segments.len() > 10, "1 KiB segments hold only a few records each");
}

#[test]
fn writing_resumes_where_the_log_ends() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    for lsn in 1..=10 {
        writer.append(&payload(lsn, 50)).expect("append");
    }
    writer.commit().expect("commit");
    drop(writer);
    let mut writer = open_writer(&storage, 1);
    assert_eq!(writer.append(&payload(11, 50)).expect("append"), 11);
    writer.commit().expect("commit");
    let lsns: Vec<Lsn> = replay(&storage, 1).expect("replay").into_iter().map(|(lsn, _)| lsn).collect();
    assert_eq!(lsns, (1..=11).collect::<Vec<_>>());
}

/// A power cut during a commit, at every point: the first or second sync fails (so the first
/// segment's records may or may not be durable), then any number of the unsynced writes reach the
/// device, the last of them torn at any byte. Recovery always succeeds, keeps every acknowledged
/// record, and what it keeps of the interrupted commit is an intact prefix of it. Then the log
/// takes new records.
#[test]
fn a_power_cut_during_commit_loses_nothing_acknowledged() {
    for syncs_before_failure in [0, 1] {
        let storage = SimStorage::default();
        let mut writer = open_writer(&storage, 1);
        let mut acknowledged = Vec::new();
        for lsn in 1..=12 {
            let record = payload(lsn, 90);
            writer.append(&record).expect("append");
            acknowledged.push((lsn, record));
        }
        writer.commit().expect("commit");
        // The interrupted commit spans a segment boundary, so it writes and syncs twice.
        let mut interrupted = Vec::new();
        for lsn in 13..=20 {
            let record = payload(lsn, 120);
            writer.append(&record).expect("append");
            interrupted.push((lsn, record));
        }
        storage.fail_syncs_after(syncs_before_failure);
        assert!(writer.commit().is_err(), "a sync fails");
        assert!(matches!(writer.append(b"x"), Err(WalError::Poisoned(_))), "a failed sync poisons the writer");

        let writes = storage.unsynced_writes();
        assert!(writes >= 1, "the interrupted commit left a write unsynced");
        for kept in 0..=writes {
            let tears: Vec<Option<usize>> = if kept == 0 {
                vec![None]
            } else {
                (0..storage.last_unsynced_len_after(kept)).map(Some).chain([None]).collect()
            };
            for torn_at in tears {
                let case = format!("sync failure after {syncs_before_failure}, kept {kept}, torn at {torn_at:?}");
                let after = storage.crash(kept, torn_at);
                let records = replay(&after, 1).unwrap_or_else(|e| panic!("{case}: {e}"));
                assert_eq!(records[..acknowledged.len()], acknowledged[..], "{case}");
                let extra = &records[acknowledged.len()..];
                assert_eq!(extra, &interrupted[..extra.len()], "{case}");
                // The recovered log accepts new records after whatever survived.
                let mut writer = open_writer(&after, 1);
                let next = writer.append(b"after the cut").expect("append after recovery");
                writer.commit().expect("commit after recovery");
                let again = replay(&after, 1).expect("replay after new writes");
                assert_eq!(again.last(), Some(&(next, b"after the cut".to_vec())), "{case}");
                assert_eq!(again.len(), records.len() + 1, "{case}");
            }
        }
    }
}

#[test]
fn damage_inside_the_log_is_refused_with_its_place() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    for lsn in 1..=40 {
        writer.append(&payload(lsn, 100)).expect("append");
    }
    writer.commit().expect("commit");
    // A record in the middle of the first segment: later records in the same segment are intact.
    let first = segment_name(1);
    storage.corrupt(&first, SEGMENT_HEADER_BYTES + 130);
    match replay(&storage, 1) {
        Err(WalError::Corrupt { file, offset, .. }) => assert_eq!((file, offset), (first, SEGMENT_HEADER_BYTES + 128)),
        other => panic!("damage must be refused, got {other:?}"),
    }
}

#[test]
fn damage_at_the_end_of_a_full_segment_is_a_gap() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    for lsn in 1..=40 {
        writer.append(&payload(lsn, 100)).expect("append");
    }
    writer.commit().expect("commit");
    // The last record of segment 1 (records of 128 bytes: 7 fit after the header).
    storage.corrupt(&segment_name(1), SEGMENT_HEADER_BYTES + 6 * 128 + 40);
    assert!(matches!(replay(&storage, 1), Err(WalError::Corrupt { .. })), "the next segment proves it was not a tail");
}

#[test]
fn a_failed_write_poisons_the_writer() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    writer.append(b"one").expect("append");
    writer.commit().expect("commit");
    storage.fail_writes_after(0);
    writer.append(b"two").expect("append only buffers");
    assert!(matches!(writer.commit(), Err(WalError::Io { .. })));
    assert!(matches!(writer.commit(), Err(WalError::Poisoned(_))));
    assert!(matches!(writer.append(b"three"), Err(WalError::Poisoned(_))));
    assert_eq!(writer.durable_lsn(), 1);
}

#[test]
fn a_full_disk_refuses_cleanly_and_recovers_when_space_returns() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    writer.append(&payload(1, 500)).expect("append");
    writer.commit().expect("commit");
    storage.set_full(true);
    // The next record needs a new segment, which cannot be created.
    assert!(matches!(writer.append(&payload(2, 500)), Err(WalError::NoSpace(_))));
    assert_eq!(writer.next_lsn(), 2, "a refused append assigns no LSN");
    storage.set_full(false);
    assert_eq!(writer.append(&payload(2, 500)).expect("space is back"), 2);
    writer.commit().expect("commit");
    assert_eq!(replay(&storage, 1).expect("replay").len(), 2);
}

/// A record larger than a segment (a growing hash table's record can be) gets a segment of its
/// own, sized to fit, and the log goes on in ordinary segments after it.
#[test]
fn a_record_larger_than_a_segment_gets_its_own_segment() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    writer.append(&payload(1, 100)).expect("append");
    writer.append(&payload(2, 5000)).expect("a record five times a segment is appended");
    writer.append(&payload(3, 100)).expect("append");
    writer.commit().expect("commit");
    let records = replay(&storage, 1).expect("replay");
    assert_eq!(records, vec![(1, payload(1, 100)), (2, payload(2, 5000)), (3, payload(3, 100))]);
    let mut writer = open_writer(&storage, 1);
    assert_eq!(writer.append(&payload(4, 100)).expect("append after reopening"), 4);
    writer.commit().expect("commit");
    assert_eq!(replay(&storage, 1).expect("replay").len(), 4);
}

/// Room is reserved ahead: `ensure_room` prepares segments, and a full disk refuses the
/// reservation while appends into the room already prepared keep working.
#[test]
fn room_is_prepared_ahead_and_a_full_disk_refuses_only_the_reservation() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    writer.ensure_room(3000).expect("room for three segments' worth");
    assert!(writer.prepared_bytes() >= 3000);
    storage.set_full(true);
    assert!(matches!(writer.ensure_room(10_000), Err(WalError::NoSpace(_))));
    for lsn in 1..=20 {
        writer.append(&payload(lsn, 100)).expect("appends within the prepared room need no new file");
    }
    writer.commit().expect("commit");
    assert_eq!(replay(&storage, 1).expect("replay").len(), 20);
}

/// Segments released after a checkpoint are reused under new names; their old records never
/// come back, and a recovery from the checkpoint's LSN sees exactly the later records.
#[test]
fn recycled_segments_never_resurrect_old_records() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    for lsn in 1..=30 {
        writer.append(&payload(lsn, 100)).expect("append");
    }
    writer.commit().expect("commit");
    let recycled = writer.release_before(25).expect("release");
    assert!(recycled >= 2, "segments holding only records before LSN 25 are recycled");
    for lsn in 31..=60 {
        writer.append(&payload(lsn, 100)).expect("append");
    }
    writer.commit().expect("commit");
    let records = replay(&storage, 25).expect("replay from the checkpoint");
    let lsns: Vec<Lsn> = records.iter().map(|(lsn, _)| *lsn).collect();
    assert_eq!(lsns, (25..=60).collect::<Vec<_>>());
    for (lsn, bytes) in records {
        assert_eq!(bytes, payload(lsn, 100));
    }
    let before = storage.clone();
    drop(writer);
    assert!(replay(&before, 1).is_err(), "the records before the checkpoint are gone, and recovery says so");
}

/// Segments may be recycled while records are buffered and a batch is out (a checkpoint finishes
/// while the shard keeps writing): only durable segments go, and the buffered records still land
/// where they belong.
#[test]
fn recycling_while_records_are_buffered_keeps_them_in_place() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    for lsn in 1..=30 {
        writer.append(&payload(lsn, 100)).expect("append");
    }
    writer.commit().expect("commit");
    for lsn in 31..=40 {
        writer.append(&payload(lsn, 100)).expect("append");
    }
    let batch = writer.take_batch().expect("usable").expect("records are buffered");
    for lsn in 41..=50 {
        writer.append(&payload(lsn, 100)).expect("append");
    }
    assert!(writer.release_before(45).expect("release") >= 2, "durable segments before LSN 31 are recycled");
    writer.finish_batch(batch.write()).expect("the batch lands");
    for lsn in 51..=60 {
        writer.append(&payload(lsn, 100)).expect("append");
    }
    writer.commit().expect("commit");
    let lsns: Vec<Lsn> = replay(&storage, 31).expect("replay").into_iter().map(|(lsn, _)| lsn).collect();
    assert_eq!(lsns, (31..=60).collect::<Vec<_>>());
}

/// Spare segments made elsewhere are adopted in sequence order and filled like any other; only
/// one is asked for at a time, and a failed one is asked for again.
#[test]
fn spare_segments_are_adopted_in_order() {
    use super::storage::LogStorage;
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    assert!(writer.spare_wanted().is_some(), "an empty log wants a spare");
    assert_eq!(writer.spare_wanted(), None, "one spare at a time");
    writer.spare_failed();
    let size = writer.spare_wanted().expect("a failed spare is asked for again");
    let name = super::spare_name(1);
    let file = storage.create_written(&name, size).expect("make the spare");
    writer.adopt_spare(&name, file, size).expect("adopt");
    assert!(!storage.list().expect("list").contains(&name), "the temporary name is gone");
    assert_eq!(writer.spare_wanted(), None, "a full spare segment is room enough");
    for lsn in 1..=30 {
        writer.append(&payload(lsn, 100)).expect("append");
    }
    writer.commit().expect("commit");
    assert_eq!(replay(&storage, 1).expect("replay").len(), 30);
}

#[test]
fn the_real_file_system_backend_round_trips() {
    let dir = std::env::temp_dir().join(format!("ferrite-wal-{}-{}", std::process::id(), line!()));
    let _ = std::fs::remove_dir_all(&dir);
    let storage = FsStorage::open_dir(&dir).expect("create the log directory");
    let recovered = recover(&storage, 1, |_, _| {}).expect("recover an empty log");
    let mut writer =
        WalWriter::open(storage.clone(), WalConfig { segment_bytes: 64 * 1024 }, &recovered).expect("open");
    for lsn in 1..=100 {
        writer.append(&payload(lsn, 2000)).expect("append");
    }
    writer.commit().expect("commit");
    let mut count = 0;
    recover(&storage, 1, |lsn, bytes| {
        count += 1;
        assert_eq!(bytes, payload(lsn, 2000));
    })
    .expect("recover");
    assert_eq!(count, 100);
    std::fs::remove_dir_all(&dir).expect("clean up");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random commit groups and a random power cut: every acknowledged record survives and the
    /// rest is an intact prefix of what was appended.
    #[test]
    fn random_histories_survive_a_random_cut(
        groups in proptest::collection::vec(proptest::collection::vec(0usize..400, 1..6), 1..12),
        cut in any::<proptest::sample::Index>(),
        tear in any::<proptest::sample::Index>(),
    ) {
        let storage = SimStorage::default();
        let mut writer = open_writer(&storage, 1);
        let mut appended = Vec::new();
        let mut acknowledged = 0;
        let (last, committed) = groups.split_last().expect("at least one group");
        for group in committed {
            for len in group {
                let lsn = writer.next_lsn();
                writer.append(&payload(lsn, *len)).expect("append");
                appended.push((lsn, payload(lsn, *len)));
            }
            writer.commit().expect("commit");
            acknowledged = appended.len();
        }
        for len in last {
            let lsn = writer.next_lsn();
            writer.append(&payload(lsn, *len)).expect("append");
            appended.push((lsn, payload(lsn, *len)));
        }
        storage.fail_syncs_after(0);
        let _ = writer.commit();
        let writes = storage.unsynced_writes();
        let kept = cut.index(writes + 1);
        let torn_at = (kept > 0).then(|| tear.index(storage.last_unsynced_len_after(kept) + 1));
        let records = replay(&storage.crash(kept, torn_at), 1).expect("recovery succeeds");
        prop_assert!(records.len() >= acknowledged);
        prop_assert_eq!(&records[..], &appended[..records.len()]);
    }
}
