//! How a durable shard answers, tested on its state directly: which responses must wait for the
//! log, and for what. The sync thread is never asked to commit here (nothing waits), so every
//! `sync` write stays undurable and each answer's required LSN can be read off its session.

use std::sync::Arc;

use ferrite_proto::{CreatePoolFlags, Durability, EndTransferFlags, Limits, PoolHandle, PutFlags, Request, Response};
use ferrite_store::persistence::ssd::{recover_shard, ShardPaths, SharedLog};
use ferrite_store::persistence::wal::{Lsn, WalConfig};

use super::ShardState;
use crate::config::DurabilityConfig;
use crate::durability::ShardDurability;
use crate::plugins::PluginRegistry;
use crate::pools::Pools;
use crate::session::Session;
use crate::stats::ShardStats;

/// Shard 0's state over `pools`, with `durability` (none: the `memory` backing), limits at their
/// largest, no plugins, no users and no cluster.
pub(crate) fn shard_state(pools: Pools, durability: Option<ShardDurability>) -> ShardState {
    ShardState {
        index: 0,
        shard_addresses: Arc::from(vec!["127.0.0.1:1".to_string()]),
        limits: Limits::MAX,
        connections_max: 16,
        admission: crate::stats::Admission {
            connections_max: 16,
            handshake_timeout: std::time::Duration::from_secs(10),
            idle_timeout: None,
            staging_idle: std::time::Duration::from_secs(30),
            in_flight_max: 256,
        },
        pool_bytes_max: 1 << 30,
        direct_value_bytes_max: 1 << 30,
        cluster: None,
        replication: None,
        direct_reads: crate::handler::DirectReads::new(std::time::Duration::from_secs(30)),
        pools,
        stats: ShardStats::new(),
        durability,
        stop: tokio::sync::watch::channel(false).0,
        halted: None,
        low_load_poll: crate::low_load_poll::LowLoadPoll::new(std::time::Duration::ZERO),
        find_cursor: [0; 8],
        plugins: Arc::new(PluginRegistry::default()),
        ado: crate::ado::AdoSettings::beside_server(crate::config::AdoConfig::default()),
        calls: Default::default(),
        new_hosts: Vec::new(),
        retiring: Vec::new(),
        hosts_started: 0,
        to_submit: Vec::new(),
        host_started: Default::default(),
        calls_queued: Default::default(),
        backups: Vec::new(),
        backups_queued: Default::default(),
        index_builds: Vec::new(),
        index_builds_queued: Default::default(),
        user_statistics: Vec::new(),
        backup_root: None,
        auth: Arc::new(crate::auth::Auth::open()),
        traffic: Default::default(),
        current_pool: None,
        current_op: crate::stats::Op::Other,
    }
}

/// A one-shard state on a fresh data directory, with its sync thread running but idle.
pub(super) fn durable_shard(tag: &str) -> (ShardState, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("ferrite-handler-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let config = DurabilityConfig { commit_interval_ms: 3_600_000, ..DurabilityConfig::default() };
    let recovered =
        recover_shard(&ShardPaths::new(&dir), WalConfig { segment_bytes: config.wal_segment_bytes }).expect("recover");
    let log = SharedLog::new(recovered.writer);
    let pools = Pools::logged(log.clone(), 16, recovered.next_pool_id);
    let durability =
        ShardDurability::start(0, ShardPaths::new(&dir), log, recovered.checkpointer, config).expect("sync thread");
    (shard_state(pools, Some(durability)), dir)
}

fn session(state: &mut ShardState) -> Session {
    let mut session = Session::default();
    let hello = Request::Hello { version: ferrite_proto::PROTOCOL_VERSION, client_name: "test", auth: b"" };
    state.execute(hello, &mut session, 1).expect("hello");
    session
}

/// Runs `request` and returns whether it succeeded and the LSN its answer must wait for.
fn answer(state: &mut ShardState, session: &mut Session, request: Request<'_>) -> (bool, Lsn) {
    let ok = state.execute(request, session, 1).is_ok();
    (ok, std::mem::take(&mut session.wait_lsn))
}

fn open(state: &mut ShardState, session: &mut Session, name: &str) -> PoolHandle {
    match state.execute(Request::OpenPool { name }, session, 1) {
        Ok(Response::PoolOpened { pool }) => pool,
        other => panic!("open {name}: {other:?}"),
    }
}

/// Creates the pool `name` of `size_bytes` and opens it.
fn create_and_open(state: &mut ShardState, session: &mut Session, name: &str, size_bytes: u64) -> PoolHandle {
    let create =
        Request::CreatePool { name, size_bytes, expected_objects: 16, flags: CreatePoolFlags::NONE, plugins: "" };
    assert!(answer(state, session, create).0, "create {name}");
    open(state, session, name)
}

/// Every answer whose content depends on pool state waits until the `sync` writes before it
/// are durable, failures included: "key exists", "not found", "pool exists" reveal state just as
/// a value does. Otherwise a client could act on a state that a power cut then takes back.
#[test]
fn answers_that_reveal_state_wait_for_the_writes_before_them() {
    let (mut state, dir) = durable_shard("reveal");
    let mut writer = session(&mut state);
    let create = |name| Request::CreatePool {
        name,
        size_bytes: 1 << 20,
        expected_objects: 16,
        flags: CreatePoolFlags::NONE,
        plugins: "",
    };
    let (created, _) = answer(&mut state, &mut writer, create("p"));
    assert!(created);
    let doomed = match state.execute(create("doomed"), &mut writer, 1) {
        Ok(Response::PoolCreated { pool, .. }) => pool,
        other => panic!("create doomed: {other:?}"),
    };
    let (closed, _) = answer(&mut state, &mut writer, Request::ClosePool { pool: doomed });
    assert!(closed, "a creation opens the pool; it is closed so it can be deleted");
    let pool = open(&mut state, &mut writer, "p");
    let put = |flags, key| Request::Put { pool, flags, key, value: b"v" };
    let (stored, written) = answer(&mut state, &mut writer, put(PutFlags::NONE, b"k"));
    assert!(stored && written > 0, "a sync put waits for its own record");

    let mut reader = session(&mut state);
    let reader_pool = open(&mut state, &mut reader, "p");
    assert_eq!(reader_pool, pool);
    let _ = std::mem::take(&mut reader.wait_lsn);
    let cases: Vec<(&str, Request<'_>, bool)> = vec![
        ("create-only put of an existing key", put(PutFlags::CREATE_ONLY, b"k"), false),
        ("update-only put of an absent key", put(PutFlags::UPDATE_ONLY, b"absent"), false),
        (
            "async create-only put of an absent key",
            put(PutFlags::CREATE_ONLY.with_durability(Durability::Async), b"new"),
            true,
        ),
        ("erase of an absent key", Request::Erase { pool, key: b"absent" }, false),
        ("open of a pool", Request::OpenPool { name: "p" }, true),
        ("open of an absent pool", Request::OpenPool { name: "absent" }, false),
        ("delete of an absent pool", Request::DeletePool { name: "absent" }, false),
        (
            "create-only creation of an existing pool",
            Request::CreatePool {
                name: "p",
                size_bytes: 1 << 20,
                expected_objects: 16,
                flags: CreatePoolFlags::CREATE_ONLY,
                plugins: "",
            },
            false,
        ),
        ("creation of an existing pool", create("p"), true),
    ];
    for (what, request, succeeds) in cases {
        let (ok, wait) = answer(&mut state, &mut reader, request);
        assert_eq!(ok, succeeds, "{what}");
        assert!(wait >= written, "the answer to the {what} must wait for LSN {written}, waits for {wait}");
    }

    // An erase and a pool deletion that are not durable yet cannot be revealed either.
    let (erased, erased_at) = answer(&mut state, &mut writer, Request::Erase { pool, key: b"k" });
    assert!(erased);
    let (ok, wait) = answer(&mut state, &mut reader, Request::Erase { pool, key: b"k" });
    assert!(!ok && wait >= erased_at, "a second erase of the key must wait for the first: {wait} < {erased_at}");
    let (deleted, deleted_at) = answer(&mut state, &mut writer, Request::DeletePool { name: "doomed" });
    assert!(deleted);
    let (ok, wait) = answer(&mut state, &mut reader, Request::OpenPool { name: "doomed" });
    assert!(!ok && wait >= deleted_at, "'no such pool' must wait for the deletion: {wait} < {deleted_at}");
    if let Some(durability) = state.durability.as_mut() {
        durability.stop();
        durability.log.wait_for_spare();
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// A shard that halts (pool memory ran ahead of its log) answers nothing more, to anyone: every
/// request after it is refused and closes its connection, the shard's stop signal is raised, and
/// its log takes nothing more.
#[test]
fn a_halted_shard_answers_nothing() {
    let (mut state, dir) = durable_shard("halt");
    let mut session = session(&mut state);
    let pool = create_and_open(&mut state, &mut session, "p", 1 << 20);
    let stop = state.stop.subscribe();
    let failure = state.halt("a test".into());
    assert!(failure.close, "the request that found out closes its connection");
    assert!(*stop.borrow(), "the shard's stop signal is raised");
    for request in [
        Request::Get { pool, key: b"k" },
        Request::Put { pool, flags: PutFlags::NONE, key: b"k", value: b"v" },
        Request::ListPools,
        Request::GetStatistics,
    ] {
        match state.execute(request, &mut session, 1) {
            Err(failure) => assert!(failure.close && failure.message.contains("stopped"), "{}", failure.message),
            Ok(response) => panic!("a halted shard answered: {response:?}"),
        }
    }
    let durability = state.durability.as_mut().expect("durable");
    assert!(durability.log.failure().is_some(), "the log takes nothing more");
    durability.stop();
    // A spare segment still being made would land in the directory as it is removed.
    durability.log.wait_for_spare();
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// `async` writes are answered without waiting for the disk, and their connection reads on until
/// more than a bound of log waits for it untaken (the backlog past a first, lower bound is only
/// handed to the log to write): from then on each one makes its connection wait for its record
/// to be written (here no batch is on its way), so a client writing faster than the disk cannot
/// grow the log's buffer without bound. The waits are for the write, never for the sync.
#[test]
fn async_writes_wait_once_the_log_has_too_much_waiting() {
    let (mut state, dir) = durable_shard("backpressure");
    let mut session = session(&mut state);
    let pool = create_and_open(&mut state, &mut session, "p", 64 << 20);
    let _ = std::mem::take(&mut session.wait_lsn);
    // Without its sync thread the log writes nothing it is asked to: every record stays pending.
    state.durability.as_mut().expect("durable").stop();
    let value = vec![7u8; 64 * 1024];
    let flags = PutFlags::NONE.with_durability(Durability::Async);
    let keys: Vec<String> = (0..96).map(|i| format!("k{i}")).collect();
    let mut waits = Vec::new();
    for key in &keys {
        let (stored, durable_wait) =
            answer(&mut state, &mut session, Request::Put { pool, flags, key: key.as_bytes(), value: &value });
        assert!(stored);
        assert_eq!(durable_wait, 0, "an async write's answer never waits for the disk");
        waits.push(std::mem::take(&mut session.backlog_lsn));
    }
    let first_waiting = waits.iter().position(|wait| *wait > 0).expect("some async write waits");
    let untaken_max = (super::ASYNC_UNTAKEN_BYTES_MAX / value.len() as u64) as usize;
    assert!(
        (untaken_max - 4..=untaken_max).contains(&first_waiting),
        "async writes waited from write {first_waiting}, not once about {untaken_max} waited"
    );
    assert!(waits[first_waiting..].iter().all(|wait| *wait > 0), "every later write waits too: {waits:?}");
    let durability = state.durability.as_mut().expect("durable");
    assert!(durability.log.pending_bytes() > super::ASYNC_PENDING_BYTES_MAX);
    // A spare segment still being made would land in the directory as it is removed.
    durability.log.wait_for_spare();
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// A direct put's piece that leaves the log's backlog past its first bound is handed to the disk
/// as it lands, except the piece that completes the value: its commit follows, and one write and
/// one flush then take the value's last bytes and the commit record, where handing the piece over
/// at once made a second write for the commit.
#[test]
fn a_direct_puts_last_piece_is_written_with_its_commit() {
    let (mut state, dir) = durable_shard("last-piece");
    let mut session = session(&mut state);
    let pool = create_and_open(&mut state, &mut session, "p", 16 << 20);
    let log = state.durability.as_ref().expect("durable").log.clone();
    let within_10s = |done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !done() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        done()
    };
    let written_by = |lsn: Lsn| within_10s(&|| log.written_lsn() >= lsn);
    let piece = vec![5u8; 1536 * 1024];
    assert!(piece.len() as u64 > super::ASYNC_PENDING_BYTES_MAX, "each piece passes the bound alone");
    let flags = PutFlags::NONE.with_durability(Durability::Sync);
    let (length, key) = (2 * piece.len() as u64, b"v".as_slice());
    assert!(answer(&mut state, &mut session, Request::PutDirect { pool, flags, transfer: 1, length, key }).0);
    assert!(answer(&mut state, &mut session, Request::DirectWrite { transfer: 1, offset: 0, bytes: &piece }).0);
    assert!(written_by(log.last_lsn()), "a piece with more to come is handed to the disk");
    let offset = piece.len() as u64;
    assert!(answer(&mut state, &mut session, Request::DirectWrite { transfer: 1, offset, bytes: &piece }).0);
    let last_piece = log.last_lsn();
    // Asked for, the write would be taken (a moment's work, whatever the disk) well within this.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(log.taken_lsn() < last_piece, "the completing piece waits for its commit");
    let commits = log.counters().commits;
    let end = Request::EndTransfer { transfer: 1, flags: EndTransferFlags::COMMIT };
    let (committed, durable_wait) = answer(&mut state, &mut session, end);
    assert!(committed && durable_wait > last_piece);
    log.request_sync();
    assert!(within_10s(&|| log.durable_lsn() >= durable_wait), "the commit's sync makes both durable");
    assert_eq!(log.counters().commits, commits + 1, "with one flush");
    log.wait_for_spare();
    std::fs::remove_dir_all(&dir).expect("clean up");
}

/// An `async` write's connection waits only once more than the untaken bound of log waits for
/// the disk, with a batch on its way to the disk as without one (a lower bound while a batch was
/// on its way made the shard stop for every batch's write); it then waits for the batch on its
/// way if there is one, else for its own record.
#[test]
fn an_async_write_waits_for_the_batch_on_its_way_only_past_the_untaken_bound() {
    let bound = super::ASYNC_UNTAKEN_BYTES_MAX;
    let (lsn, taken, written) = (90, 60, 40);
    for pending in [super::ASYNC_PENDING_BYTES_MAX + 1, bound / 2, bound] {
        assert_eq!(
            super::backlog_wait(pending, lsn, taken, written),
            None,
            "{pending} bytes waiting, a batch on its way"
        );
        assert_eq!(
            super::backlog_wait(pending, lsn, written, written),
            None,
            "{pending} bytes waiting, none on its way"
        );
    }
    assert_eq!(super::backlog_wait(bound + 1, lsn, taken, written), Some(taken), "the batch on its way");
    assert_eq!(super::backlog_wait(bound + 1, lsn, written, written), Some(lsn), "its own record, none on its way");
}

/// Each write a session makes, `sync` or `async`, records its log position as the session's last
/// write (what RESP's `WAIT` asks replicas to hold); reads and other sessions' writes leave it.
#[test]
fn a_session_knows_the_log_position_of_its_last_write() {
    let (mut state, dir) = durable_shard("last-write");
    let mut writer = session(&mut state);
    let pool = create_and_open(&mut state, &mut writer, "p", 1 << 20);
    let (stored, synced) =
        answer(&mut state, &mut writer, Request::Put { pool, flags: PutFlags::NONE, key: b"a", value: b"1" });
    assert!(stored && synced > 0);
    assert_eq!(writer.last_write_lsn, synced, "a sync write's position is the one its answer waits for");
    let flags = PutFlags::NONE.with_durability(Durability::Async);
    assert!(answer(&mut state, &mut writer, Request::Put { pool, flags, key: b"b", value: b"2" }).0);
    let after_async = writer.last_write_lsn;
    assert!(after_async > synced, "an async write moves it too, though nothing waits for it");
    assert!(answer(&mut state, &mut writer, Request::Get { pool, key: b"a" }).0);
    let mut other = session(&mut state);
    let other_pool = open(&mut state, &mut other, "p");
    assert!(answer(&mut state, &mut other, Request::Erase { pool: other_pool, key: b"b" }).0);
    assert_eq!(writer.last_write_lsn, after_async, "reads and other sessions' writes leave it");
    assert!(other.last_write_lsn > after_async);
    assert_eq!(state.replicas_holding(0), 0, "a single server has no replicas");
    if let Some(durability) = state.durability.as_mut() {
        durability.stop();
        durability.log.wait_for_spare();
    }
    std::fs::remove_dir_all(&dir).expect("clean up");
}
