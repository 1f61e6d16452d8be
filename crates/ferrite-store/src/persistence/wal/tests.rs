//! The log's promises, tested over the simulated disk: what `commit` acknowledged survives any
//! power cut, a torn tail is cut and nothing else is, damage is reported with its place, failures
//! poison, a full disk is a clean refusal, and recycled segments never resurrect old records.

use proptest::prelude::*;

use super::format::{segment_name, SEGMENT_HEADER_BYTES};
use super::sim::{Cut, SimStorage};
use super::storage::FsStorage;
use super::writer::RETAINED_BUFFER_BYTES_MAX;
use super::{recover, BatchSync, Lsn, WalConfig, WalError, WalWriter};

/// Small segments, so a few records already span several of them.
pub(super) const SMALL: WalConfig = WalConfig { segment_bytes: 1024 };

pub(super) fn payload(lsn: Lsn, len: usize) -> Vec<u8> {
    (0..len).map(|i| (lsn as usize * 31 + i) as u8).collect()
}

pub(super) fn open_writer(storage: &SimStorage, from_lsn: Lsn) -> WalWriter<SimStorage> {
    let recovered = recover(storage, from_lsn, |_, _| {}).expect("recover");
    WalWriter::open(storage.clone(), SMALL, &recovered).expect("open writer")
}

pub(super) fn replay(storage: &SimStorage, from_lsn: Lsn) -> Result<Vec<(Lsn, Vec<u8>)>, WalError> {
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

/// A log with `committed` records acknowledged and an interrupted commit of `interrupted`
/// records after them: the last commit's sync failed after `syncs_before_failure` syncs, so its
/// sector writes are on the simulated disk but not covered by a sync.
struct Interrupted {
    storage: SimStorage,
    acknowledged: Vec<(Lsn, Vec<u8>)>,
    interrupted: Vec<(Lsn, Vec<u8>)>,
}

fn interrupted_commit(syncs_before_failure: u64) -> Interrupted {
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
    assert!(storage.unsynced_sectors() >= 1, "the interrupted commit left a sector unsynced");
    Interrupted { storage, acknowledged, interrupted }
}

impl Interrupted {
    /// Recovery after `cut` succeeds, keeps every acknowledged record and an intact prefix of the
    /// interrupted commit, and the recovered log takes new records after whatever survived.
    fn check(&self, cut: &Cut, case: &str) {
        let after = self.storage.crash(cut);
        let records = replay(&after, 1).unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(records[..self.acknowledged.len()], self.acknowledged[..], "{case}");
        let extra = &records[self.acknowledged.len()..];
        assert_eq!(extra, &self.interrupted[..extra.len()], "{case}");
        let mut writer = open_writer(&after, 1);
        let next = writer.append(b"after the cut").expect("append after recovery");
        writer.commit().expect("commit after recovery");
        let again = replay(&after, 1).unwrap_or_else(|e| panic!("{case}, after new writes: {e}"));
        assert_eq!(again.last(), Some(&(next, b"after the cut".to_vec())), "{case}");
        assert_eq!(again.len(), records.len() + 1, "{case}");
    }
}

/// A power cut during a commit, at every point a device that persists in order could leave: the
/// first or second sync fails (so the first segment's records may or may not be durable), then
/// any number of the unsynced sector writes reach the device, the last of them torn at any byte.
#[test]
fn a_power_cut_during_commit_loses_nothing_acknowledged() {
    for syncs_before_failure in [0, 1] {
        let log = interrupted_commit(syncs_before_failure);
        let sectors = log.storage.unsynced_sectors();
        for kept in 0..=sectors {
            let tears: Vec<Option<usize>> = if kept == 0 {
                vec![None]
            } else {
                (0..log.storage.unsynced_sector_len(kept - 1)).map(Some).chain([None]).collect()
            };
            for torn_at in tears {
                let case = format!("sync failure after {syncs_before_failure}, kept {kept}, torn at {torn_at:?}");
                log.check(&Cut::prefix(kept, torn_at), &case);
            }
        }
    }
}

/// A device may persist the sectors of one commit in any order: every cut that loses exactly
/// one sector of the interrupted commit (keeping the later ones), and every cut that keeps
/// exactly one, is an interrupted last commit, never damage.
#[test]
fn a_power_cut_that_reorders_a_commit_loses_nothing_acknowledged() {
    for syncs_before_failure in [0, 1] {
        let log = interrupted_commit(syncs_before_failure);
        let sectors = log.storage.unsynced_sectors();
        for chosen in 0..sectors {
            let lose_one = Cut { keep: (0..sectors).map(|i| i != chosen).collect(), tear: None };
            log.check(&lose_one, &format!("sync failure after {syncs_before_failure}, all but sector {chosen}"));
            let keep_one = Cut { keep: (0..sectors).map(|i| i == chosen).collect(), tear: None };
            log.check(&keep_one, &format!("sync failure after {syncs_before_failure}, only sector {chosen}"));
            let torn = Cut { keep: vec![true; sectors], tear: Some((chosen, 100)) };
            log.check(&torn, &format!("sync failure after {syncs_before_failure}, sector {chosen} torn"));
        }
    }
}

/// Records of 100 bytes, each committed on its own, in 1 KiB segments.
fn one_commit_per_record(records: u64) -> SimStorage {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    for lsn in 1..=records {
        writer.append(&payload(lsn, 100)).expect("append");
        writer.commit().expect("commit");
    }
    storage
}

/// Where record `index` (from 0) of a segment starts, for records of 100 bytes.
fn record_at(index: u64) -> u64 {
    SEGMENT_HEADER_BYTES + index * super::format::record_bytes(100)
}

/// A damaged record followed, in the same last segment, by intact records of later commits was
/// durable before they were written: damage, refused with its place.
#[test]
fn damage_inside_the_log_is_refused_with_its_place() {
    let storage = one_commit_per_record(3);
    let first = segment_name(1);
    storage.corrupt(&first, record_at(1) + 40);
    match replay(&storage, 1) {
        Err(WalError::Corrupt { file, offset, .. }) => assert_eq!((file, offset), (first, record_at(1))),
        other => panic!("damage must be refused, got {other:?}"),
    }
}

/// A damaged record at the end of a full segment, with later segments following, is a gap.
#[test]
fn damage_at_the_end_of_a_full_segment_is_a_gap() {
    let storage = one_commit_per_record(40);
    // 7 records of 136 bytes fit after the header of a 1 KiB segment.
    storage.corrupt(&segment_name(1), record_at(6) + 40);
    assert!(matches!(replay(&storage, 1), Err(WalError::Corrupt { .. })), "the next segment proves it was not a tail");
}

/// Damage inside the last commit cannot be told from a power cut during it: that commit is cut,
/// and everything before it kept. (Its records were synced, but the decision table documents
/// why a log cannot tell; the commit before it is never touched.)
#[test]
fn damage_inside_the_last_commit_cuts_only_that_commit() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    writer.append(&payload(1, 100)).expect("append");
    writer.commit().expect("commit");
    for lsn in 2..=4 {
        writer.append(&payload(lsn, 100)).expect("append");
    }
    writer.commit().expect("commit");
    storage.corrupt(&segment_name(1), record_at(2) + 40);
    let recovered = recover(&storage, 1, |_, _| {}).expect("a torn last commit is not damage");
    assert_eq!(recovered.next_lsn, 3, "records 1 and 2 are kept");
    let torn = recovered.torn_commit.expect("the cut is reported");
    assert_eq!((torn.missing_lsn, torn.dropped_records, torn.last_dropped_lsn), (3, 1, 4));
    assert_eq!(torn.offset, record_at(2));
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

/// A batch that held a large record leaves no large buffer behind: the writer's buffers return
/// to at most the retained size, while a small batch's buffer is kept for reuse.
#[test]
fn buffers_return_to_their_retained_size_after_a_large_batch() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    writer.append(&payload(1, 100)).expect("append");
    writer.commit().expect("commit");
    writer.append(&payload(2, 100)).expect("append");
    writer.commit().expect("commit");
    let small = writer.buffer_bytes();
    assert!(small > 0, "a small batch's buffer is kept for the next one");
    writer.append(&payload(3, 3 * RETAINED_BUFFER_BYTES_MAX)).expect("append a large record");
    assert!(writer.buffer_bytes() > 3 * RETAINED_BUFFER_BYTES_MAX, "the record is buffered whole");
    writer.commit().expect("commit");
    writer.append(&payload(4, 100)).expect("append");
    writer.commit().expect("commit");
    assert!(
        writer.buffer_bytes() <= 2 * RETAINED_BUFFER_BYTES_MAX,
        "{} bytes of buffers kept after a large batch",
        writer.buffer_bytes()
    );
    assert_eq!(replay(&storage, 1).expect("replay").len(), 4);
}

/// Room is reserved ahead: `ensure_room` makes sure one record of the given size can be
/// appended without creating a file, even one larger than a segment (which gets a segment of its
/// own); a full disk refuses only the reservation, and appends into the room already prepared
/// keep working.
#[test]
fn room_is_prepared_ahead_and_a_full_disk_refuses_only_the_reservation() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    writer.ensure_room(3000).expect("room for a record three segments long");
    storage.set_full(true);
    writer.ensure_room(3000).expect("already prepared: nothing to create");
    assert!(writer.record_room() >= 3000, "the room says so");
    assert_eq!(writer.append(&payload(1, 3000)).expect("the reserved record needs no new file"), 1);
    // That record's segment (4 KiB) has about 1000 bytes left: enough for small records only.
    writer.ensure_room(100).expect("a small record fits in the rest of the segment");
    assert!(matches!(writer.ensure_room(2000), Err(WalError::NoSpace(_))), "and none can be made");
    let room = writer.record_room();
    assert!((100..2000).contains(&room), "{room}");
    writer.append(&payload(2, room as usize)).expect("a record of exactly the room fits");
    assert!(writer.record_room() < room);
    storage.set_full(false);
    writer.ensure_room(2000).expect("space is back");
    storage.set_full(true);
    for lsn in 3..=6 {
        writer.append(&payload(lsn, 100)).expect("appends within the prepared room need no new file");
    }
    writer.commit().expect("commit");
    assert_eq!(replay(&storage, 1).expect("replay").len(), 6);
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
    let recycled = writer.release_before(25, &Default::default()).expect("release").recycled;
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
    let batch = writer.take_batch(BatchSync::Now).expect("usable").expect("records are buffered");
    for lsn in 41..=50 {
        writer.append(&payload(lsn, 100)).expect("append");
    }
    assert!(
        writer.release_before(45, &Default::default()).expect("release").recycled >= 2,
        "durable segments before LSN 31 are recycled"
    );
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

/// Writes 100 records of 2000 bytes to a log in `dir` over several commits (a reopen between
/// them) and reads them back.
fn round_trip_on_the_file_system(dir: &std::path::Path) {
    let _ = std::fs::remove_dir_all(dir);
    let storage = FsStorage::open_dir(dir).expect("create the log directory");
    let config = WalConfig { segment_bytes: 64 * 1024 };
    for commit in 0..4u64 {
        let recovered = recover(&storage, 1, |_, _| {}).expect("recover");
        let mut writer = WalWriter::open(storage.clone(), config, &recovered).expect("open");
        for lsn in commit * 25 + 1..=commit * 25 + 25 {
            writer.append(&payload(lsn, 2000)).expect("append");
        }
        writer.commit().expect("commit");
    }
    let mut count = 0;
    recover(&storage, 1, |lsn, bytes| {
        count += 1;
        assert_eq!(bytes, payload(lsn, 2000));
    })
    .expect("recover");
    assert_eq!(count, 100);
    std::fs::remove_dir_all(dir).expect("clean up");
}

#[test]
fn the_real_file_system_backend_round_trips() {
    round_trip_on_the_file_system(&std::env::temp_dir().join(format!(
        "ferrite-wal-{}-{}",
        std::process::id(),
        line!()
    )));
}

/// tmpfs (at `/dev/shm` on Linux), which refused `O_DIRECT` before Linux 6.6 and takes it since,
/// gets the same log either way.
#[test]
fn a_tmpfs_log_round_trips() {
    let shm = std::path::Path::new("/dev/shm");
    assert!(shm.is_dir(), "Linux mounts a tmpfs at /dev/shm");
    round_trip_on_the_file_system(&shm.join(format!("ferrite-wal-{}-{}", std::process::id(), line!())));
}

/// With segments of whole blocks, every write of every batch covers whole blocks of its file
/// from a block boundary of memory (what `O_DIRECT` needs), including the first batch after
/// the log is reopened in the middle of a block; and the log reads back exactly.
#[test]
fn batches_are_written_in_whole_blocks() {
    use super::writer::DIRECT_BLOCK_BYTES;
    let storage = SimStorage::default();
    let config = WalConfig { segment_bytes: 16 * DIRECT_BLOCK_BYTES };
    let open = |storage: &SimStorage| {
        let recovered = recover(storage, 1, |_, _| {}).expect("recover");
        WalWriter::open(storage.clone(), config, &recovered).expect("open writer")
    };
    let mut writer = open(&storage);
    let mut expected = Vec::new();
    let mut writes = 0;
    for lsn in 1..=300u64 {
        let record = payload(lsn, (lsn as usize * 997) % 9000);
        writer.append(&record).expect("append");
        expected.push((lsn, record));
        if lsn % 7 == 0 {
            let batch = writer.take_batch(BatchSync::Now).expect("take").expect("a batch");
            for (position, bytes) in batch.writes() {
                assert_eq!(position % DIRECT_BLOCK_BYTES, 0, "record {lsn}: a write starts on a block");
                assert_eq!(bytes.len() as u64 % DIRECT_BLOCK_BYTES, 0, "record {lsn}: a write is whole blocks");
                assert_eq!(bytes.as_ptr() as u64 % DIRECT_BLOCK_BYTES, 0, "record {lsn}: memory on a block");
                writes += 1;
            }
            writer.finish_batch(batch.write()).expect("commit");
        }
        if lsn % 50 == 0 {
            writer.commit().expect("commit");
            writer = open(&storage);
        }
    }
    writer.commit().expect("commit");
    assert!(writes > 40, "{writes} writes checked");
    assert_eq!(replay(&storage, 1).expect("replay"), expected);
}

/// A process that stops with records written and not synced leaves them to the next one: the
/// log they open calls them durable only once it has synced them, so a power cut afterwards
/// keeps them.
#[test]
fn records_a_stopped_process_left_unsynced_are_synced_before_they_count() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    let records: Vec<_> = (1..=5).map(|lsn| (lsn, payload(lsn, 300))).collect();
    for (_, record) in &records {
        writer.append(record).expect("append");
    }
    let batch = writer.take_batch(BatchSync::Later).expect("usable").expect("a batch");
    writer.finish_batch(batch.write()).expect("written");
    assert_eq!(writer.durable_lsn(), 0);
    drop(writer);
    assert!(storage.unsynced_sectors() > 0, "the records are written, not synced");
    let reopened = open_writer(&storage, 1);
    assert_eq!(reopened.durable_lsn(), 5);
    assert_eq!(storage.unsynced_sectors(), 0, "opening the log synced them");
    assert_eq!(replay(&storage.crash(&Cut::default()), 1).expect("recover"), records);
}

/// Batches written without their sync leave their records in one commit (recovery tells a torn
/// commit by it), but never more than a bound of them: past it a batch syncs anyway.
#[test]
fn a_commit_of_batches_written_without_their_sync_is_bounded() {
    let storage = SimStorage::default();
    let recovered = recover(&storage, 1, |_, _| {}).expect("recover");
    let mut writer = WalWriter::open(storage.clone(), WalConfig { segment_bytes: 64 << 20 }, &recovered).expect("open");
    let mut syncs = 0;
    for _ in 0..3 {
        for _ in 0..super::writer::COMMIT_RECORDS_MAX / 2 {
            writer.append(b"").expect("append");
        }
        let batch = writer.take_batch(BatchSync::Later).expect("usable").expect("a batch");
        syncs += u32::from(batch.syncs());
        let end = writer.finish_batch(batch.write()).expect("written");
        assert_eq!(end.written, writer.next_lsn() - 1);
    }
    assert_eq!(syncs, 1, "the batch that reached the bound synced");
    assert_eq!(writer.durable_lsn(), super::writer::COMMIT_RECORDS_MAX);
    assert_eq!(replay(&storage, 1).expect("replay").len() as u64, 3 * super::writer::COMMIT_RECORDS_MAX / 2);
}

/// The commit groups `groups` (payload lengths) written on a log shaped by `config`, each
/// committed, or written without its sync where `later_bits` (cycled) says, then a power cut
/// during the last group's commit that keeps the unsynced sector writes `keep_bits` says
/// (cycled), one of them torn: every record the writer called durable survives and the rest is
/// an intact prefix of what was appended.
fn survives_a_random_cut(
    config: WalConfig,
    groups: &[Vec<usize>],
    later_bits: &[bool],
    keep_bits: &[bool],
    tear: proptest::sample::Index,
    tear_at: proptest::sample::Index,
) -> Result<(), TestCaseError> {
    let storage = SimStorage::default();
    let recovered = recover(&storage, 1, |_, _| {}).expect("recover");
    let mut writer = WalWriter::open(storage.clone(), config, &recovered).expect("open writer");
    let mut appended = Vec::new();
    let (last, committed) = groups.split_last().expect("at least one group");
    for (index, group) in committed.iter().enumerate() {
        for len in group {
            let lsn = writer.next_lsn();
            writer.append(&payload(lsn, *len)).expect("append");
            appended.push((lsn, payload(lsn, *len)));
        }
        let sync = if later_bits[index % later_bits.len()] { BatchSync::Later } else { BatchSync::Now };
        let batch = writer.take_batch(sync).expect("usable").expect("records are buffered");
        let end = writer.finish_batch(batch.write()).expect("written");
        prop_assert_eq!(end.written, appended.len() as Lsn);
        prop_assert_eq!(end.durable == end.written, sync == BatchSync::Now, "durable only once synced");
    }
    let acknowledged = writer.durable_lsn() as usize;
    for len in last {
        let lsn = writer.next_lsn();
        writer.append(&payload(lsn, *len)).expect("append");
        appended.push((lsn, payload(lsn, *len)));
    }
    storage.fail_syncs_after(0);
    let _ = writer.commit();
    let sectors = storage.unsynced_sectors();
    let keep: Vec<bool> = (0..sectors).map(|i| keep_bits.get(i % keep_bits.len()).copied().unwrap_or(false)).collect();
    let tear = (sectors > 0).then(|| {
        let torn = tear.index(sectors);
        (torn, tear_at.index(storage.unsynced_sector_len(torn) + 1))
    });
    let records = replay(&storage.crash(&Cut { keep, tear }), 1).expect("recovery succeeds");
    prop_assert!(records.len() >= acknowledged);
    prop_assert_eq!(&records[..], &appended[..records.len()]);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random commit groups on small segments, some written without their sync, and a random
    /// power cut during the last commit.
    #[test]
    fn random_histories_survive_a_random_cut(
        groups in proptest::collection::vec(proptest::collection::vec(0usize..400, 1..6), 1..12),
        keep_bits in proptest::collection::vec(any::<bool>(), 1..64),
        later_bits in proptest::collection::vec(any::<bool>(), 1..8),
        tear in any::<proptest::sample::Index>(),
        tear_at in any::<proptest::sample::Index>(),
    ) {
        survives_a_random_cut(SMALL, &groups, &later_bits, &keep_bits, tear, tear_at)?;
    }

    /// The same on segments of whole blocks, where every commit is written in whole blocks:
    /// rewriting the head of the block the last commit ended in (durable records) and filling
    /// out its own last block with zeros, any subset of those sectors kept and one torn.
    #[test]
    fn random_histories_in_whole_blocks_survive_a_random_cut(
        groups in proptest::collection::vec(proptest::collection::vec(0usize..6000, 1..6), 1..12),
        keep_bits in proptest::collection::vec(any::<bool>(), 1..64),
        later_bits in proptest::collection::vec(any::<bool>(), 1..8),
        tear in any::<proptest::sample::Index>(),
        tear_at in any::<proptest::sample::Index>(),
    ) {
        let config = WalConfig { segment_bytes: 4 * super::writer::DIRECT_BLOCK_BYTES };
        survives_a_random_cut(config, &groups, &later_bits, &keep_bits, tear, tear_at)?;
    }
}

/// A stored value reaches the log byte for byte, so it can hold the image of a well-formed
/// record. Segment 1's second record carries such images, forged under the segment's own salt
/// (read back from the disk), so they are intact records of that use of the file. After
/// segment 1 is recycled and reused they lie in stale bytes: one exactly where the reused
/// segment's records end, claiming the next LSN, and (if `later_image`) one further on claiming
/// a much later LSN of a later commit. Recovery must neither replay the first nor refuse the log
/// because of the second.
fn recover_past_stale_record_images(later_image: bool) -> Result<Vec<Lsn>, WalError> {
    use super::format::{encode_record, record_bytes, RecordPlace, SegmentHeader};
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    writer.append(b"").expect("append");
    writer.commit().expect("commit");
    let salt = SegmentHeader::decode(&storage.read_file(&segment_name(1))).expect("segment 1 is started").salt;
    // Where the images sit in segment 1: the reused segment's first record will end at the first.
    let reused_record_len = 400;
    let image_at = SEGMENT_HEADER_BYTES + record_bytes(reused_record_len);
    let later_image_at = image_at + 128;
    let payload_start = SEGMENT_HEADER_BYTES + record_bytes(0) + record_bytes(0);
    let mut value = vec![0x5a; (image_at - payload_start) as usize];
    encode_record(8, RecordPlace { salt, commit_first_lsn: 8 }, b"forged: replayed as if written", &mut value);
    if later_image {
        value.resize((later_image_at - payload_start) as usize, 0x5a);
        let place = RecordPlace { salt, commit_first_lsn: 1000 };
        encode_record(1000, place, b"forged: a record of a later commit", &mut value);
    }
    writer.append(&value).expect("append");
    // Records 3..=6 fill a segment each, so segments 1 and 2 can be recycled.
    for lsn in 3..=6 {
        writer.append(&payload(lsn, 900)).expect("append");
    }
    writer.commit().expect("commit");
    assert_eq!(
        writer.release_before(4, &Default::default()).expect("release").recycled,
        2,
        "segments 1 and 2 are recycled"
    );
    // Record 7 does not fit in segment 6's rest, so it starts the recycled segment 1 and ends
    // exactly where the first image begins, which claims LSN 8.
    assert_eq!(writer.next_lsn(), 7);
    writer.append(&payload(7, reused_record_len)).expect("append");
    writer.commit().expect("commit");
    Ok(replay(&storage, 4)?.into_iter().map(|(lsn, _)| lsn).collect())
}

#[test]
fn a_stale_record_image_with_the_next_lsn_is_not_replayed() {
    assert_eq!(recover_past_stale_record_images(false).expect("recovered"), vec![4, 5, 6, 7]);
}

#[test]
fn a_stale_record_image_with_a_later_lsn_does_not_stop_recovery() {
    assert_eq!(recover_past_stale_record_images(true).expect("a clean, synced log is recovered"), vec![4, 5, 6, 7]);
}

/// A segment of the first log format (an older build's) is refused with its version named, never
/// taken for an unwritten file (which would make recovery skip it and lose its records).
#[test]
fn a_segment_of_the_first_format_is_refused() {
    use super::storage::LogStorage;
    let storage = SimStorage::default();
    // A format-1 header: magic, version 1, CRC-32C of bytes 0..12 and 16..40, sequence 1.
    let mut header = [0u8; 64];
    header[0..8].copy_from_slice(b"FRWALSEG");
    header[8..10].copy_from_slice(&1u16.to_le_bytes());
    header[16..24].copy_from_slice(&1u64.to_le_bytes());
    header[24..32].copy_from_slice(&1u64.to_le_bytes());
    header[32..40].copy_from_slice(&1024u64.to_le_bytes());
    let crc = crate::checksum::crc32c_append(crate::checksum::crc32c(&header[0..12]), &header[16..40]);
    header[12..16].copy_from_slice(&crc.to_le_bytes());
    let file = storage.create(&segment_name(1), 1024).expect("create");
    super::storage::SegmentFile::write_all_at(&file, 0, &header).expect("write");
    match replay(&storage, 1) {
        Err(WalError::Corrupt { offset: 8, reason, .. }) => assert!(reason.contains("version 1"), "{reason}"),
        other => panic!("a format-1 segment must be refused, got {other:?}"),
    }
}

/// A backup's copy of a log ends exactly at the chosen record, whatever follows it in the source:
/// more committed records, or (mid-append) a damaged record followed by intact ones.
#[test]
fn a_copy_ends_at_its_record_whatever_follows_in_the_source() {
    use super::format::decode_record;
    use super::storage::{LogStorage, SegmentFile};
    let source = SimStorage::default();
    let mut writer = open_writer(&source, 1);
    let expected: Vec<(Lsn, Vec<u8>)> =
        (1..=230u64).map(|lsn| (lsn, payload(lsn, (lsn as usize * 13) % 200))).collect();
    for (lsn, record) in &expected {
        writer.append(record).expect("append");
        if lsn % 9 == 0 {
            writer.commit().expect("commit");
        }
    }
    writer.commit().expect("commit");
    for until in [0, 1, 57, 200, 230] {
        let target = SimStorage::default();
        super::copy_until(&source, &target, until).expect("copy");
        assert_eq!(
            replay(&target, 1).expect("the copy recovers"),
            expected[..until as usize].to_vec(),
            "until {until}"
        );
        assert_eq!(recover(&target, 1, |_, _| {}).expect("recover").next_lsn, until + 1);
    }
    // Damage record 201 in the source, as a copy taken while it is being written could see it.
    let recovered = recover(&source, 1, |_, _| {}).expect("recover");
    let holding = recovered.segments.iter().find(|s| s.first_lsn <= 201 && s.last_lsn >= Some(201)).expect("a segment");
    let name = segment_name(holding.seq);
    let file = source.open(&name).expect("open");
    let mut bytes = vec![0u8; file.size_bytes().expect("size") as usize];
    file.read_exact_at(0, &mut bytes).expect("read");
    let mut position = SEGMENT_HEADER_BYTES as usize;
    while let Some(record) = decode_record(&bytes[position..], holding.salt).filter(|record| record.lsn < 201) {
        position += record.size as usize;
    }
    file.write_all_at(position as u64 + 40, &[0xFF; 8]).expect("damage record 201");
    assert!(replay(&source, 1).is_err(), "the damaged source is refused");
    let target = SimStorage::default();
    super::copy_until(&source, &target, 200).expect("copy up to the damage");
    assert_eq!(replay(&target, 1).expect("the copy recovers"), expected[..200].to_vec());
    let error = super::copy_until(&source, &SimStorage::default(), 230).expect_err("record 201 is gone");
    assert!(error.to_string().contains("ends at LSN 200"), "{error}");
}

/// A log cut back (a Raft replica dropping entries a new leader did not keep) and written on:
/// recovery and `read_range` see the records up to the cut and the new ones after it, never the
/// cut ones, whether the cut lies in the tail segment or several segments back; a crash before
/// the first new record is written leaves the old records, as if the cut had not happened; a
/// cut with records still buffered is refused.
#[test]
fn a_cut_log_reads_back_without_the_records_it_dropped() {
    for (written, cut) in [(40u64, 35u64), (40, 12), (40, 0)] {
        let storage = SimStorage::default();
        let mut writer = open_writer(&storage, 1);
        let mut expected = Vec::new();
        for lsn in 1..=written {
            writer.append(&payload(lsn, 100)).expect("append");
            if lsn <= cut {
                expected.push((lsn, payload(lsn, 100)));
            }
        }
        assert!(matches!(writer.truncate_after(cut), Err(WalError::Unflushed)), "records are buffered");
        writer.commit().expect("commit");
        writer.truncate_after(cut).expect("cut");
        assert_eq!(
            replay(&storage, 1).expect("replay"),
            (1..=written).map(|l| (l, payload(l, 100))).collect::<Vec<_>>(),
            "nothing new written yet"
        );
        for lsn in cut + 1..=cut + 10 {
            let record = payload(lsn + 1000, 60);
            assert_eq!(writer.append(&record).expect("append"), lsn);
            expected.push((lsn, record));
        }
        writer.commit().expect("commit");
        assert_eq!(replay(&storage, 1).expect("replay"), expected, "cut after {cut} of {written}");
        let mut read = Vec::new();
        super::read_range(&storage, 3, cut + 5, |lsn, bytes| read.push((lsn, bytes.to_vec()))).expect("read");
        assert_eq!(read, expected[2..(cut + 5) as usize].to_vec(), "cut after {cut}");
        drop(writer);
        let mut writer = open_writer(&storage, 1);
        assert_eq!(
            writer.append(&payload(9999, 10)).expect("append"),
            cut + 11,
            "writing resumes after the new records"
        );
    }
}

/// A log restarted at a later LSN (a replica that installed a snapshot) recovers from there, the
/// gap before it not needed; its older segments are recycled by the next release.
#[test]
fn a_restarted_log_recovers_from_its_new_start() {
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    for lsn in 1..=30 {
        writer.append(&payload(lsn, 100)).expect("append");
    }
    writer.commit().expect("commit");
    writer.restart_at(500).expect("restart");
    for lsn in 500..510 {
        assert_eq!(writer.append(&payload(lsn, 100)).expect("append"), lsn);
    }
    writer.commit().expect("commit");
    let expected: Vec<_> = (500..510).map(|l| (l, payload(l, 100))).collect();
    assert_eq!(replay(&storage, 500).expect("replay from the new start"), expected);
    assert!(replay(&storage, 20).is_err(), "the records 31 to 499 are nowhere: recovery from before the gap fails");
    assert!(
        writer.release_before(500, &Default::default()).expect("release").recycled > 0,
        "the old segments are recycled"
    );
    assert_eq!(replay(&storage, 500).expect("replay"), expected);
}

/// A fresh buffer of records asks for huge pages: where the kernel grants them on request
/// (transparent huge pages in `madvise` mode, of 2 MiB, not disabled for this process), the
/// mapping that holds its first whole huge page is eligible for them. Under `always` every
/// mapping is and under `never` none is, so neither shows the request.
#[test]
fn the_log_buffer_asks_for_huge_pages() {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let granted_on_request = read("/sys/kernel/mm/transparent_hugepage/enabled").contains("[madvise]")
        && read("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size").trim() == "2097152"
        && !read("/proc/self/status").lines().any(|line| line.replace(char::is_whitespace, "") == "THP_enabled:0");
    if !granted_on_request {
        return;
    }
    let storage = SimStorage::default();
    let mut writer = open_writer(&storage, 1);
    writer.append(&payload(1, 100)).expect("append");
    let huge_page = writer.buffer_address().next_multiple_of(2 * 1024 * 1024);
    let smaps = read("/proc/self/smaps");
    if !smaps.contains("THPeligible:") {
        return;
    }
    let mut inside = false;
    let mut eligible = None;
    for line in smaps.lines() {
        // A mapping's first line starts with its address range; the lines after it describe it.
        let range = line.split_whitespace().next().and_then(|field| field.split_once('-'));
        if let Some((Ok(start), Ok(end))) =
            range.map(|(start, end)| (usize::from_str_radix(start, 16), usize::from_str_radix(end, 16)))
        {
            inside = (start..end).contains(&huge_page);
        } else if let Some(value) = line.strip_prefix("THPeligible:").filter(|_| inside) {
            eligible = Some(value.trim().to_owned());
        }
    }
    assert_eq!(eligible.as_deref(), Some("1"), "the mapping holding the buffer's huge page at {huge_page:#x}");
}
