//! The log's memory stays bounded through a large load: four million keys through the RESP
//! default pool take every subtable of its table through many growths, yet no log record is
//! larger than one subtable's rewrite (1 MiB and the pair), the bytes waiting for a commit stay
//! near their bound, and the writer's buffers come back to their retained size afterwards. The
//! shard keeps answering small reads throughout.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TestServer;
use ferrite_client::blocking;

const KEYS: u64 = 4_000_000;
const PAIRS_PER_MSET: u64 = 1000;
/// `MSET` commands a loader keeps in flight: enough to fill group commits.
const MSETS_IN_FLIGHT: u64 = 8;

/// One subtable at its largest (16,384 buckets of 64 bytes) and its directory entry, with room
/// for the pair and the record's own framing: see `docs/hstore.md`, "Growth".
const RECORD_BYTES_BOUND: u64 = 1024 * 1024 + 64 * 1024;
/// What may wait for a commit: 1 MiB (past which a backlog is handed to the disk), a largest
/// record appended when it was reached, and one read's worth of `MSET`s from the loader.
const PENDING_BYTES_BOUND: u64 = 4 * 1024 * 1024;
/// The log's buffers after the load: the most a batch's buffer keeps (8 MiB) for the one being
/// filled and for the spare, and the scratch buffer records are encoded in (kept up to 4 MiB).
const BUFFER_BYTES_BOUND: u64 = (2 * 8 + 4) * 1024 * 1024;

fn mset(first: u64) -> Vec<u8> {
    let mut command = format!("*{}\r\n$4\r\nMSET\r\n", 1 + 2 * PAIRS_PER_MSET).into_bytes();
    for i in first..first + PAIRS_PER_MSET {
        // 16-byte keys and 16-byte values: the shape users size machines by.
        command.extend_from_slice(format!("$16\r\nkey:{i:012}\r\n$16\r\nval:{i:012}\r\n").as_bytes());
    }
    command
}

/// Loads `KEYS` pairs with pipelined `MSET`s, checking every reply is `+OK`.
fn load(address: SocketAddr) {
    let stream = TcpStream::connect(address).expect("connect the loader");
    let mut writer = stream.try_clone().expect("clone");
    let mut replies = BufReader::new(stream);
    let commands = KEYS / PAIRS_PER_MSET;
    let (mut sent, mut answered) = (0, 0);
    let mut line = String::new();
    while answered < commands {
        while sent < commands && sent - answered < MSETS_IN_FLIGHT {
            writer.write_all(&mset(sent * PAIRS_PER_MSET)).expect("send MSET");
            sent += 1;
        }
        line.clear();
        replies.read_line(&mut line).expect("read a reply");
        assert_eq!(line, "+OK\r\n", "MSET {answered} failed");
        answered += 1;
    }
}

/// Reads `key` until `loading` clears; returns how many reads were answered while it was set,
/// and the slowest (for the test's output, not an assertion: timings are for `bench/`).
fn probe(address: SocketAddr, loading: &AtomicBool) -> (u64, Duration) {
    let mut stream = TcpStream::connect(address).expect("connect the probe");
    let command = b"*2\r\n$3\r\nGET\r\n$5\r\nprobe\r\n";
    let expected = b"$5\r\nvalue\r\n";
    let (mut answered, mut slowest) = (0, Duration::ZERO);
    while loading.load(Ordering::Acquire) {
        let started = Instant::now();
        stream.write_all(command).expect("send GET");
        let mut reply = [0; 11];
        stream.read_exact(&mut reply).expect("read GET");
        assert_eq!(&reply, expected);
        slowest = slowest.max(started.elapsed());
        answered += 1;
    }
    (answered, slowest)
}

#[test]
fn a_four_million_key_load_keeps_log_records_and_buffers_bounded() {
    let server = TestServer::builder().resp().start();
    let resp = server.resp_addr(0);
    let mut setup = TcpStream::connect(resp).expect("connect");
    setup.write_all(b"*3\r\n$3\r\nSET\r\n$5\r\nprobe\r\n$5\r\nvalue\r\n").expect("SET");
    let mut ok = [0; 5];
    setup.read_exact(&mut ok).expect("SET reply");
    assert_eq!(&ok, b"+OK\r\n");

    let loading = Arc::new(AtomicBool::new(true));
    let prober = {
        let loading = Arc::clone(&loading);
        std::thread::spawn(move || probe(resp, &loading))
    };
    let started = Instant::now();
    load(resp);
    let load_time = started.elapsed();
    loading.store(false, Ordering::Release);
    let (reads, slowest) = prober.join().expect("the probe");

    let session = blocking::Session::connect(&server.addr_string()).expect("connect natively");
    let stats = session.statistics().expect("statistics").remove(0);
    let counter = |name: &str| stats.get(name).unwrap_or_else(|| panic!("the shard reports {name}"));
    let pool = session.open_pool("@0/redis").expect("open the RESP pool");
    assert_eq!(pool.count().expect("count"), KEYS + 1);
    println!(
        "{KEYS} keys in {load_time:?}; largest log record {} bytes; most bytes waiting for a commit {}; \
         log buffers after {} bytes; {reads} GETs answered during the load, slowest {slowest:?}",
        counter("wal_record_bytes_max"),
        counter("wal_pending_bytes_max"),
        counter("wal_buffer_bytes"),
    );
    assert!(counter("wal_record_bytes_max") <= RECORD_BYTES_BOUND, "a log record passed the bound");
    assert!(counter("wal_pending_bytes_max") <= PENDING_BYTES_BOUND, "the log's pending bytes passed the bound");
    assert!(counter("wal_buffer_bytes") <= BUFFER_BYTES_BOUND, "the log kept large buffers after the load");
    assert!(reads > 0, "small reads are answered while the table grows");
}
