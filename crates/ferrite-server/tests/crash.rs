//! Crash torture: the real server under concurrent writers is killed with SIGKILL at random
//! moments and restarted on its own files, again and again. Writers record every acknowledged
//! put and erase; after each restart every acknowledged write must be there with its value, and
//! no acknowledged erase may be undone. The one request a writer had in flight when the server
//! died may or may not have happened; nothing else is uncertain.
//!
//! Checkpoints are made frequent (every second, or every 2 MiB of log) so crashes land before,
//! during and after them. `FERRITE_CRASH_ROUNDS` sets the number of kills (default 50);
//! `FERRITE_CRASH_SEED` replays a failing run.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{fresh_dir, TestServer};
use ferrite_client::blocking::Session;
use ferrite_client::PoolOptions;

const WRITERS: usize = 4;
const KEYS_PER_WRITER: u64 = 300;
const POOL: &str = "torture";

/// A tiny deterministic generator, so a failing run can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What a key must hold after a crash.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expected {
    Absent,
    Value(Vec<u8>),
}

/// One writer's knowledge: the acknowledged state of its keys, and the request it had in flight
/// when the connection died (which may or may not have been applied).
#[derive(Debug, Default)]
struct Ledger {
    acknowledged: HashMap<u64, Expected>,
    in_flight: Option<(u64, Expected)>,
}

fn key(writer: usize, k: u64) -> Vec<u8> {
    format!("w{writer}-key-{k}").into_bytes()
}

/// Values of varied sizes (inline, slab, out-of-line extents) that name their writer, key and
/// version, so a value that came back from the wrong write is caught.
fn value(writer: usize, k: u64, version: u64, len: usize) -> Vec<u8> {
    let mut value = format!("{writer}/{k}/{version}/").into_bytes();
    value.extend((0..len).map(|i| (i as u64 ^ version) as u8));
    value
}

fn run_writer(addr: String, writer: usize, seed: u64, ledger: Arc<Mutex<Ledger>>, stop: Arc<AtomicBool>) {
    let mut rng = Rng(seed | 1);
    let Ok(session) = Session::connect(&addr) else { return };
    let Ok(pool) = session.open_pool(POOL) else { return };
    let mut version = 0;
    while !stop.load(Ordering::Relaxed) {
        let k = rng.below(KEYS_PER_WRITER);
        version += 1;
        let intent = if rng.below(10) < 7 {
            let len = [0, 10, 100, 1000, 5000][rng.below(5) as usize];
            Expected::Value(value(writer, k, seed.wrapping_add(version), len))
        } else {
            Expected::Absent
        };
        ledger.lock().expect("ledger").in_flight = Some((k, intent.clone()));
        let outcome = match &intent {
            Expected::Value(v) => pool.put(key(writer, k), v).map(|()| true),
            Expected::Absent => match pool.erase(key(writer, k)) {
                Ok(()) => Ok(true),
                Err(error) if error.is_key_not_found() => Ok(true),
                Err(error) => Err(error),
            },
        };
        let mut ledger = ledger.lock().expect("ledger");
        match outcome {
            Ok(_) => {
                ledger.in_flight = None;
                ledger.acknowledged.insert(k, intent);
            }
            // The server died: the in-flight request stays uncertain.
            Err(_) => return,
        }
    }
}

fn verify(addr: &str, ledgers: &[Arc<Mutex<Ledger>>], round: usize, seed: u64) {
    let session = Session::connect(addr).expect("connect after restart");
    let pool = session.open_pool(POOL).expect("the pool survives");
    for (writer, ledger) in ledgers.iter().enumerate() {
        let mut ledger = ledger.lock().expect("ledger");
        let in_flight = ledger.in_flight.take();
        for k in 0..KEYS_PER_WRITER {
            let found = match pool.get(key(writer, k)) {
                Ok(value) => Expected::Value(value),
                Err(error) if error.is_key_not_found() => Expected::Absent,
                Err(error) => panic!("round {round} (seed {seed}): get failed: {error}"),
            };
            let acknowledged = ledger.acknowledged.get(&k).cloned().unwrap_or(Expected::Absent);
            let uncertain = in_flight.as_ref().filter(|(key, _)| *key == k).map(|(_, intent)| intent);
            if found == acknowledged {
                continue;
            }
            if Some(&found) == uncertain {
                // The in-flight request was applied; from now on it is what the key holds.
                ledger.acknowledged.insert(k, found);
                continue;
            }
            panic!(
                "round {round} (seed {seed}): writer {writer} key {k}: found {:?}, acknowledged {:?}, in flight {:?}",
                summary(&found),
                summary(&acknowledged),
                uncertain.map(summary)
            );
        }
    }
}

fn summary(expected: &Expected) -> String {
    match expected {
        Expected::Absent => "absent".into(),
        Expected::Value(v) => {
            format!("{} bytes starting {:?}", v.len(), String::from_utf8_lossy(&v[..v.len().min(24)]))
        }
    }
}

/// Small log segments and a low checkpoint threshold, so crashes land around recycling and
/// checkpoints; values up to 256 KiB, so that 2 MiB segments hold the largest record.
fn start(data_dir: &std::path::Path, backing: &str) -> TestServer {
    TestServer::builder()
        .data_dir(data_dir)
        .config("backing", format!("\"{backing}\""))
        .config("value_bytes_max", 262_144)
        .append_config(
            "[durability]\nwal_segment_bytes = 2097152\ncheckpoint_wal_bytes = 2097152\ncheckpoint_interval_secs = 1",
        )
        .start()
}

/// The `ssd` backing (the default): write-ahead log, group commit, checkpoints.
#[test]
fn acknowledged_writes_survive_kill_9_at_random_moments() {
    let rounds: usize = std::env::var("FERRITE_CRASH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(50);
    torture("ssd", rounds);
}

/// The `pmem` backing: an undo log per pool, no write-ahead log. Fewer rounds: it shares the
/// engine with `ssd`, and its own part (roll back on open) is small.
#[test]
fn acknowledged_writes_survive_kill_9_on_pmem() {
    let rounds: usize = std::env::var("FERRITE_CRASH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(50);
    torture("pmem", rounds.div_ceil(5));
}

fn torture(backing: &str, rounds: usize) {
    let seed: u64 = std::env::var("FERRITE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64));
    eprintln!("crash torture ({backing}): {rounds} rounds, FERRITE_CRASH_SEED={seed}");
    let mut rng = Rng(seed | 1);
    let data_dir = fresh_dir("crash").join("data");
    {
        let server = start(&data_dir, backing);
        let session = Session::connect(&server.addr_string()).expect("connect");
        let options = PoolOptions { size_bytes: 64 << 20, expected_objects: 256, ..PoolOptions::default() };
        session.create_pool(POOL, options).expect("create the pool").close().expect("close");
    }
    let ledgers: Vec<Arc<Mutex<Ledger>>> = (0..WRITERS).map(|_| Arc::default()).collect();
    for round in 0..rounds {
        let mut server = start(&data_dir, backing);
        verify(&server.addr_string(), &ledgers, round, seed);
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let (addr, ledger, stop) = (server.addr_string(), Arc::clone(&ledgers[writer]), Arc::clone(&stop));
                let writer_seed = rng.next();
                std::thread::spawn(move || run_writer(addr, writer, writer_seed, ledger, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(20 + rng.below(400)));
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        for writer in writers {
            writer.join().expect("writer thread");
        }
    }
    let server = start(&data_dir, backing);
    verify(&server.addr_string(), &ledgers, rounds, seed);
    let acknowledged: usize = ledgers.iter().map(|l| l.lock().expect("ledger").acknowledged.len()).sum();
    assert!(acknowledged > WRITERS * 10, "the writers got work done between crashes ({acknowledged} keys touched)");
    server.stop_gracefully();
    let _ = std::fs::remove_dir_all(data_dir.parent().expect("fresh dir"));
}
