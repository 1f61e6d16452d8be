//! SIGKILL while a pool's hash table grows: the real server, on the `ssd` backing, loads a pool
//! created without a sizing hint (its subtables start at 64 buckets and grow by a quarter at 7/8
//! load, each growth one transaction rewriting a whole subtable), and is killed at random
//! moments of the load and restarted on its own files, again and again. Writers put new keys in
//! order with sync durability and record what was acknowledged; after every restart each
//! acknowledged key must hold its value and no other key may exist but the one each writer had
//! in flight. Then the load carries on past further growths, and a clean stop and restart keep
//! everything.
//!
//! `FERRITE_GROWTH_CRASH_SEED` replays a failing run's kill moments.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{fresh_dir, TestServer};
use ferrite_client::blocking::Session;
use ferrite_client::{FindKind, PoolOptions};

const POOL: &str = "growing";
const WRITERS: usize = 3;
const KILLS: usize = 10;
/// Keys each writer puts at most while the server is being killed (a debug build reaches about
/// 2 300), and after: 3 400 keys per writer, each charged at most 9 + 100 + 64 bytes, fit the
/// 2 MiB pool.
const KEYS_WHILE_KILLING: u64 = 3000;
const KEYS_AFTER: u64 = 400;

/// A 2 MiB pool has five subtables; without a sizing hint (one expected object) each starts at
/// 64 buckets, so the first growths come after about 280 keys, and more every hundred or so.
fn pool_options() -> PoolOptions {
    PoolOptions { size_bytes: 2 << 20, expected_objects: 1, ..PoolOptions::default() }
}

fn key(writer: usize, n: u64) -> Vec<u8> {
    format!("w{writer}-{n:06}").into_bytes()
}

/// A value naming its key, inline in its entry for most keys, in a slab slot for some.
fn value(writer: usize, n: u64) -> Vec<u8> {
    let mut value = format!("{writer}/{n}/").into_bytes();
    value.resize([4, 16, 24, 100][n as usize % 4], b'0' + (n % 10) as u8);
    value
}

/// What one writer knows: keys `0..acknowledged` were acknowledged; key `acknowledged` may be
/// in flight (sent, no answer before the server died) and may or may not exist.
#[derive(Debug, Default)]
struct Ledger {
    acknowledged: AtomicU64,
}

/// Puts the writer's next keys, in order, until told to stop or the server dies.
fn load(addr: &str, writer: usize, ledger: &Ledger, stop: &AtomicBool, until: u64) {
    let Ok(session) = Session::connect(addr) else { return };
    let Ok(pool) = session.open_pool(POOL) else { return };
    loop {
        let n = ledger.acknowledged.load(Ordering::SeqCst);
        if stop.load(Ordering::Relaxed) || n >= until {
            return;
        }
        if pool.put(key(writer, n), value(writer, n)).is_err() {
            return;
        }
        ledger.acknowledged.store(n + 1, Ordering::SeqCst);
    }
}

/// Checks the pool against the ledgers after a restart: every acknowledged key holds its
/// value, the key a writer had in flight exists whole or not at all (and counts as acknowledged
/// from now on if it exists), and no other key exists. Each writer's keys are read on a
/// connection of their own, in parallel.
fn verify(addr: &str, ledgers: &[Ledger], when: &str) {
    let mut expected: Vec<Vec<u8>> = std::thread::scope(|scope| {
        let checks: Vec<_> = ledgers
            .iter()
            .enumerate()
            .map(|(writer, ledger)| scope.spawn(move || verify_writer(addr, writer, ledger, when)))
            .collect();
        checks
            .into_iter()
            .flat_map(|check| check.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
            .collect()
    });
    expected.sort_unstable();
    let session = Session::connect(addr).expect("connect");
    let pool = session.open_pool(POOL).expect("the pool survives");
    let found = pool.find_all(FindKind::Prefix, b"").expect("walk the pool");
    if found != expected {
        let extra: Vec<String> = found
            .iter()
            .filter(|k| expected.binary_search(k).is_err())
            .map(|k| String::from_utf8_lossy(k).into())
            .collect();
        panic!("{when}: {} keys found, {} expected; never written: {extra:?}", found.len(), expected.len());
    }
    assert_eq!(pool.count().expect("count"), expected.len() as u64, "{when}: the pool's count");
}

/// [`verify`] for one writer's keys; returns the keys that exist.
fn verify_writer(addr: &str, writer: usize, ledger: &Ledger, when: &str) -> Vec<Vec<u8>> {
    let session = Session::connect(addr).expect("connect");
    let pool = session.open_pool(POOL).expect("the pool survives");
    let acknowledged = ledger.acknowledged.load(Ordering::SeqCst);
    for n in 0..acknowledged {
        match pool.get(key(writer, n)) {
            Ok(found) => assert_eq!(found, value(writer, n), "{when}: writer {writer} key {n} has another value"),
            Err(error) => panic!("{when}: writer {writer}'s acknowledged key {n} of {acknowledged}: {error}"),
        }
    }
    match pool.get(key(writer, acknowledged)) {
        Ok(found) => {
            assert_eq!(found, value(writer, acknowledged), "{when}: writer {writer}'s key in flight is damaged");
            ledger.acknowledged.store(acknowledged + 1, Ordering::SeqCst);
        }
        Err(error) if error.is_key_not_found() => {}
        Err(error) => panic!("{when}: writer {writer}'s key in flight: {error}"),
    }
    (0..ledger.acknowledged.load(Ordering::SeqCst)).map(|n| key(writer, n)).collect()
}

/// Checkpoints every second and small log segments, as in the crash torture, so that kills also
/// land around checkpoints of a table that is growing (values up to 4 KiB, so that 2 MiB
/// segments hold the largest record).
fn start(data_dir: &std::path::Path) -> TestServer {
    TestServer::builder()
        .data_dir(data_dir)
        .config("backing", "\"ssd\"")
        .config("value_bytes_max", 4096)
        .append_config(
            "[durability]\nwal_segment_bytes = 2097152\ncheckpoint_wal_bytes = 2097152\ncheckpoint_interval_secs = 1",
        )
        .start()
}

/// Runs the writers against `server` until each has `until` keys acknowledged, or until the
/// server is killed after `kill_after`.
fn run_writers(server: &mut TestServer, ledgers: &Arc<Vec<Ledger>>, until: u64, kill_after: Option<Duration>) {
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (addr, ledgers, stop) = (server.addr_string(), Arc::clone(ledgers), Arc::clone(&stop));
            std::thread::spawn(move || load(&addr, writer, &ledgers[writer], &stop, until))
        })
        .collect();
    if let Some(delay) = kill_after {
        std::thread::sleep(delay);
        server.kill9();
        stop.store(true, Ordering::Relaxed);
    }
    for writer in writers {
        writer.join().expect("writer thread");
    }
}

/// Kill -9 in the middle of table growth: a pool without a sizing hint is loaded by three sync
/// writers while the server is killed at random moments, ten times, and restarted on its data
/// directory. The load (about 7 000 keys in a debug build) takes the pool's five subtables
/// through dozens of growths, up to about 1 600 buckets (a 100 KiB transaction each), with a
/// checkpoint every second, so kills fall at random points among growths, their commits and
/// checkpoints of grown tables (a kill lands inside a growth's commit only by chance; the
/// simulated power cuts of ferrite-store's `growth_tests` cover every point of one). After each
/// restart every acknowledged key holds its value, the key each writer had in flight exists
/// whole or not at all, and no key that was never written exists: a growth that was not wholly
/// logged, or not wholly checkpointed, loses keys or leaves a table the restart refuses. Then the
/// load carries on through more growths without kills, and a clean stop and restart keep every
/// key.
#[test]
fn acknowledged_keys_survive_kill_9_while_subtables_grow() {
    let seed: u64 = std::env::var("FERRITE_GROWTH_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64));
    eprintln!("growth crash: {KILLS} kills, FERRITE_GROWTH_CRASH_SEED={seed}");
    let mut state = seed;
    let mut below = |n: u64| {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % n
    };
    let data_dir = fresh_dir("growth-crash").join("data");
    {
        let server = start(&data_dir);
        let session = Session::connect(&server.addr_string()).expect("connect");
        session.create_pool(POOL, pool_options()).expect("create the pool").close().expect("close");
    }
    let ledgers: Arc<Vec<Ledger>> = Arc::new((0..WRITERS).map(|_| Ledger::default()).collect());
    for kill in 0..KILLS {
        let mut server = start(&data_dir);
        verify(&server.addr_string(), &ledgers, &format!("restart {kill} (seed {seed})"));
        run_writers(&mut server, &ledgers, KEYS_WHILE_KILLING, Some(Duration::from_millis(50 + below(800))));
    }
    let loaded: u64 = ledgers.iter().map(|ledger| ledger.acknowledged.load(Ordering::SeqCst)).sum();
    assert!(loaded > 1500, "the writers loaded {loaded} keys between kills, through several growths of every subtable");

    // Further growths without kills, then a clean stop and restart.
    let mut server = start(&data_dir);
    verify(&server.addr_string(), &ledgers, &format!("the restart after the last kill (seed {seed})"));
    let until = ledgers.iter().map(|ledger| ledger.acknowledged.load(Ordering::SeqCst)).max().unwrap_or(0) + KEYS_AFTER;
    run_writers(&mut server, &ledgers, until, None);
    for (writer, ledger) in ledgers.iter().enumerate() {
        assert_eq!(ledger.acknowledged.load(Ordering::SeqCst), until, "writer {writer} loads without kills");
    }
    server.stop_gracefully();
    let server = start(&data_dir);
    verify(&server.addr_string(), &ledgers, "the restart after a clean stop");
    server.stop_gracefully();
    let _ = std::fs::remove_dir_all(data_dir.parent().expect("fresh dir"));
}
