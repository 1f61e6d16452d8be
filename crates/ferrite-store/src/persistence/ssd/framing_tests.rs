//! Records as entries of a Raft group's log: the frame of each entry ([`super::entry`]) and the
//! shard's log framing what a leading replica appends ([`SharedLog::frame_as`]) or taking the
//! entries other nodes wrote ([`SharedLog::append_entry`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::entry::{encode_normal_header, Entry, HEADER_BYTES, NORMAL_HEADER_BYTES};
use super::record::{decode, encode_pool_configured, encode_pool_created, encode_pool_deleted, encode_transaction};
use super::tests::{descriptor_of, sim_log};
use super::*;
use crate::persistence::wal::sim::SimStorage;
use crate::persistence::wal::{read_range, Lsn, WalError};
use crate::store::PoolSpec;

fn encoded(entry: Entry<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    entry.encode(&mut out);
    out
}

fn entry() -> impl Strategy<Value = (u8, u64, u64, u64, Vec<u8>)> {
    (0u8..3, any::<u64>(), any::<u64>(), any::<u64>(), proptest::collection::vec(any::<u8>(), 0..300))
}

fn build(kind: u8, term: u64, origin: u64, seq: u64, body: &[u8]) -> Entry<'_> {
    match kind {
        0 => Entry::Blank { term },
        1 => Entry::Normal { term, origin, seq, record: body },
        _ => Entry::Membership { term, body },
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Every entry comes back as it was encoded, with its term; a normal entry's header is what
    /// `encode_normal_header` writes.
    #[test]
    fn entries_round_trip((kind, term, origin, seq, body) in entry()) {
        let entry = build(kind, term, origin, seq, &body);
        let bytes = encoded(entry);
        prop_assert_eq!(Entry::decode(&bytes), Some(entry));
        prop_assert_eq!(entry.term(), term);
        if let Entry::Normal { .. } = entry {
            let mut header = Vec::new();
            encode_normal_header(term, origin, seq, &mut header);
            prop_assert_eq!(&bytes[..NORMAL_HEADER_BYTES], &header[..]);
        }
    }

    /// Any bytes at all: decoding never panics, and whatever decodes is exactly what its
    /// encoding gives back (one byte string per entry, so nothing is read two ways).
    #[test]
    fn any_bytes_decode_without_panic_and_canonically(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Some(entry) = Entry::decode(&bytes) {
            prop_assert_eq!(encoded(entry), bytes);
        }
    }

    /// An entry with its kind byte changed to anything but another entry kind is refused.
    #[test]
    fn entries_of_an_unknown_kind_are_refused((kind, term, origin, seq, body) in entry(), wrong in any::<u8>()) {
        let mut bytes = encoded(build(kind, term, origin, seq, &body));
        let kinds: Vec<u8> = (0..3).map(|kind| encoded(build(kind, 0, 0, 0, b""))[0]).collect();
        prop_assume!(!kinds.contains(&wrong));
        bytes[0] = wrong;
        prop_assert_eq!(Entry::decode(&bytes), None);
    }
}

/// An entry cut inside its header is refused: a blank entry of any other length, a normal one
/// shorter than its header, anything shorter than a kind and a term. (Past the header the frame
/// has no length of its own: the log record's checksummed length bounds the body.)
#[test]
fn entries_cut_inside_their_header_are_refused() {
    for entry in [
        Entry::Blank { term: 7 },
        Entry::Normal { term: 7, origin: 3, seq: 99, record: b"record" },
        Entry::Membership { term: 9, body: b"members" },
    ] {
        let bytes = encoded(entry);
        let header = match entry {
            Entry::Normal { .. } => NORMAL_HEADER_BYTES,
            _ => HEADER_BYTES,
        };
        for len in 0..header {
            assert_eq!(Entry::decode(&bytes[..len]), None, "{entry:?} cut to {len} bytes");
        }
    }
    let mut blank = encoded(Entry::Blank { term: 1 });
    blank.push(0);
    assert_eq!(Entry::decode(&blank), None, "a blank entry carries nothing after its term");
}

/// A record of a single server's log is never an entry, and an entry is never such a record:
/// each log says which kind of shard wrote it, so recovery in the wrong mode refuses it rather
/// than reading it the other way.
#[test]
fn records_and_entries_are_told_apart() {
    let spec = PoolSpec { size_bytes: 1 << 20, expected_objects: 16 };
    let memory = vec![7u8; 4096];
    let mut records = Vec::new();
    let mut created = Vec::new();
    encode_pool_created(&descriptor_of(3, "pool", spec), &mut vec![(0, 64)], &memory, &mut created);
    records.push(created);
    let mut deleted = Vec::new();
    encode_pool_deleted(3, &mut deleted);
    records.push(deleted);
    let mut configured = Vec::new();
    encode_pool_configured(3, true, &mut configured);
    records.push(configured);
    let mut transaction = Vec::new();
    encode_transaction(3, &mut vec![(128, 300)], &memory, &mut transaction);
    records.push(transaction);
    for record in &records {
        assert!(decode(record).is_ok(), "a valid record");
        assert_eq!(Entry::decode(record), None, "record {record:?} read as an entry");
    }
    for entry in [
        Entry::Blank { term: 1 },
        Entry::Membership { term: 3, body: &records[1] },
        Entry::Normal { term: 2, origin: 1, seq: 1, record: &records[3] },
    ] {
        assert!(decode(&encoded(entry)).is_err(), "entry {entry:?} read as a record");
    }
}

/// The framing state of a log: what `wake` was called, counted.
fn framed_log() -> (SimStorage, SharedLog<SimStorage>, Arc<AtomicUsize>) {
    let (sim, log) = sim_log(64 * 1024);
    let wakes = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&wakes);
    log.frame_as(
        4,
        2,
        10,
        Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }),
    );
    (sim, log, wakes)
}

/// While framing, each record the shard appends becomes a normal entry of the term, from the
/// node, numbered on from the first sequence number; `take_framed` hands them over in order,
/// once; `wake` fires when entries start waiting, not per entry; `stop_framing` returns what was
/// not taken and later records are plain again.
#[test]
fn a_leading_replica_frames_what_it_appends() {
    let (sim, log, wakes) = framed_log();
    assert_eq!(wakes.load(Ordering::SeqCst), 0, "nothing waits yet");
    let first = log.append(b"one").expect("append");
    let second = log.append_encoded(|out| out.extend_from_slice(b"two")).expect("append");
    let third = log.append(b"three").expect("append");
    assert_eq!(wakes.load(Ordering::SeqCst), 1, "one wake for the batch");
    let taken = log.take_framed();
    assert_eq!(
        taken.iter().map(|e| (e.lsn, e.term, e.seq)).collect::<Vec<_>>(),
        [(first, 4, 10), (second, 4, 11), (third, 4, 12)]
    );
    for (entry, record) in taken.iter().zip([&b"one"[..], b"two", b"three"]) {
        let expected = Entry::Normal { term: 4, origin: 2, seq: entry.seq, record };
        assert_eq!(Entry::decode(&entry.payload), Some(expected));
    }
    assert!(log.take_framed().is_empty(), "taken once");
    let fourth = log.append(b"four").expect("append");
    assert_eq!(wakes.load(Ordering::SeqCst), 2, "entries wait again");
    log.append(b"five").expect("append");
    assert_eq!(wakes.load(Ordering::SeqCst), 2);
    let untaken = log.stop_framing();
    assert_eq!(untaken.iter().map(|e| (e.lsn, e.seq)).collect::<Vec<_>>(), [(fourth, 13), (fourth + 1, 14)]);
    let plain = log.append(b"plain").expect("append");
    assert!(log.take_framed().is_empty(), "nothing is framed any more");
    assert_eq!(wakes.load(Ordering::SeqCst), 2);
    log.commit_now().expect("commit");
    let mut payloads = Vec::new();
    read_range(&sim, 1, plain, |lsn, bytes| payloads.push((lsn, bytes.to_vec()))).expect("read");
    assert_eq!(payloads.len() as Lsn, plain, "every record is in the log");
    for (entry, (lsn, bytes)) in taken.iter().chain(&untaken).zip(&payloads) {
        assert_eq!((entry.lsn, &entry.payload), (*lsn, bytes), "the log holds the framed entry");
    }
    assert_eq!(payloads.last().map(|(_, bytes)| &bytes[..]), Some(&b"plain"[..]));
}

/// A new term (the node leads again) frames with the new term and sequence numbers; entries
/// another node wrote go in at the log's next index only, are not framed again and not handed
/// out as this node's; a wrong index is refused with both indexes named and changes nothing.
#[test]
fn entries_of_others_go_in_at_the_next_index_only() {
    let (_sim, log, wakes) = framed_log();
    let lsn = log.append(b"mine").expect("append");
    let blank = encoded(Entry::Blank { term: 4 });
    for wrong in [lsn, lsn + 2, 0, 1000] {
        match log.append_entry(wrong, &blank) {
            Err(WalError::OutOfOrder { index, next }) => assert_eq!((index, next), (wrong, lsn + 1)),
            other => panic!("entry {wrong} where the next is {} must be refused, got {other:?}", lsn + 1),
        }
    }
    assert_eq!(log.next_lsn(), lsn + 1, "the refusals changed nothing");
    assert!(log.failure().is_none(), "a refusal does not poison the log");
    let theirs = encoded(Entry::Normal { term: 4, origin: 9, seq: 1, record: b"theirs" });
    log.append_entry(lsn + 1, &blank).expect("blank at the next index");
    log.append_entry(lsn + 2, &theirs).expect("normal at the next index");
    assert_eq!(log.next_lsn(), lsn + 3);
    assert_eq!(log.take_framed().iter().map(|e| e.lsn).collect::<Vec<_>>(), [lsn], "only this node's own");
    assert_eq!(wakes.load(Ordering::SeqCst), 1);
    log.stop_framing();
    log.frame_as(5, 2, 40, Box::new(|| {}));
    let next = log.append(b"again").expect("append");
    let taken = log.take_framed();
    assert_eq!(taken.iter().map(|e| (e.lsn, e.term, e.seq)).collect::<Vec<_>>(), [(next, 5, 40)]);
    log.commit_now().expect("commit");
    assert_eq!(log.durable_lsn(), next);
}

/// Waits, for at most ten seconds (a liveness bound, not a speed check), until `done`.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Through the shared log and its sync thread: a cut or restart is refused until what was
/// appended is written, moves `next_lsn` at once, keeps the log from being quiet until the sync
/// thread (unasked) has written it, and is then what recovery finds.
#[test]
fn cuts_and_restarts_through_the_shared_log_reach_the_disk() {
    let (sim, log) = sim_log(4096);
    let thread = log
        .spawn_sync_thread("test-sync".into(), Duration::from_millis(5), Box::new(|_| {}))
        .expect("spawn the sync thread");
    assert!(log.is_quiet());
    for i in 0..20u8 {
        log.append(&[i; 100]).expect("append");
    }
    assert!(!log.is_quiet());
    assert!(matches!(log.truncate_after(5), Err(WalError::Unflushed)));
    assert!(matches!(log.restart_at(50), Err(WalError::Unflushed)));
    log.request_sync();
    eventually("the appended records were synced", || log.is_quiet());
    log.truncate_after(12).expect("cut");
    assert_eq!(log.next_lsn(), 13);
    assert_eq!(log.last_lsn(), 12);
    eventually("the cut was synced within the interval", || log.is_quiet());
    let recovered = crate::persistence::wal::recover(&sim.crash(&Default::default()), 1, |_, _| {}).expect("recover");
    assert_eq!(recovered.next_lsn, 13, "the cut is on the disk");
    log.restart_at(100).expect("restart");
    assert_eq!(log.next_lsn(), 100);
    eventually("the restart was synced within the interval", || log.is_quiet());
    assert_eq!(log.durable_lsn(), 99);
    let restarted = crate::persistence::wal::recover(&sim.crash(&Default::default()), 100, |_, _| {}).expect("recover");
    assert_eq!(restarted.next_lsn, 100, "the restart is on the disk");
    assert_eq!(log.append(b"after").expect("append"), 100);
    thread.stop();
    assert_eq!(log.durable_lsn(), 100);
}
