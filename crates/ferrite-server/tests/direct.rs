//! Direct transfers through the real server: values past the inline limit written and read back
//! whole, in slices and at their edges; a reader racing a writer never sees a torn value; kill -9
//! during large direct puts leaves each key with its old value or its new one, whole; and small
//! gets keep being answered while large transfers stream.
//!
//! `FERRITE_TEST_1GIB=1` adds a 1 GiB value to the integrity test.

mod common;
mod wire;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{crc32, fresh_dir, TestServer};
use ferrite_client::{blocking, Durability, ErrorCode, PoolOptions, PutFlags};
use ferrite_proto::{Request, Response};
use wire::RawClient;

/// A small deterministic generator (xorshift64*), so a failure can be replayed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `len` bytes that differ with `seed` everywhere, so a value mixed from two writes (or shifted
/// by one piece) never passes for either.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut random = Random(seed | 1);
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        bytes.extend_from_slice(&random.next().to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// Sends one request on a raw connection: `Err` with the server's message if it refused.
fn answer(raw: &mut RawClient, request_id: u64, request: &Request<'_>) -> Result<(), String> {
    match raw.call(request_id, request).response() {
        Response::Error { message, .. } => Err(message.to_owned()),
        _ => Ok(()),
    }
}

fn pool(session: &blocking::Session, name: &str, size_bytes: u64) -> blocking::Pool {
    let options = PoolOptions { size_bytes, durability: Durability::Async, ..PoolOptions::default() };
    session.create_pool(name, options).expect("create the pool")
}

/// Random sizes from 0 bytes to 64 MiB, written inline (`put`, which goes direct past the
/// threshold by itself) and direct, read back whole by `get` and by `get_direct`, and in slices
/// at the value's edges; offsets past the end are refused clearly.
#[test]
fn values_of_every_size_come_back_whole_and_in_slices() {
    let server = TestServer::start(&[]);
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let huge = std::env::var_os("FERRITE_TEST_1GIB").is_some();
    let pool = pool(&session, "sizes", if huge { 3 << 30 } else { 600 << 20 });
    let mut random = Random(0x1a26e);
    let mut sizes = vec![0usize, 1, 63, 64, 4095, 4096, (2 << 20) - 1, 2 << 20, (2 << 20) + 1, 64 << 20];
    for _ in 0..10 {
        let magnitude = random.below(27);
        sizes.push(random.below(1 << magnitude) as usize);
    }
    if huge {
        sizes.push(1 << 30);
    }
    for (n, &size) in sizes.iter().enumerate() {
        let value = pattern(n as u64 + 1, size);
        let key = format!("value-{n}");
        if n % 2 == 0 {
            pool.put(&key, &value).expect("put");
        } else {
            pool.put_direct(&key, &value).expect("put_direct");
        }
        let attributes = pool.value_attributes(&key).expect("attributes");
        assert_eq!((attributes.length, attributes.crc32), (size as u64, crc32(&value)), "{size} bytes");
        let read = if n % 2 == 0 { pool.get(&key) } else { pool.get_direct(&key) }.expect("read back");
        assert!(read == value, "a value of {size} bytes came back different");
        let mut buffer = vec![0u8; size];
        assert_eq!(pool.get_direct_into(&key, &mut buffer).expect("into a buffer"), size);
        assert!(buffer == value, "get_direct_into of {size} bytes");
        for (offset, len) in [(0, 10), (size.saturating_sub(10), 10), (size / 2, 3 << 20), (size, 5)] {
            let mut slice = vec![0u8; len];
            let read = pool.get_direct_offset(&key, offset as u64, &mut slice).expect("a slice");
            let end = (offset + len).min(size);
            assert_eq!(&slice[..read], &value[offset..end], "{len} bytes at {offset} of {size}");
        }
        let past = pool.get_direct_offset(&key, size as u64 + 1, &mut [0u8; 4]).expect_err("past the end");
        assert_eq!(past.code(), Some(ErrorCode::InvalidArgument), "{past}");
        assert!(past.to_string().contains("past the end"), "{past}");
    }
    // A buffer too small for the value, and a value past the server's direct limit.
    let error = pool.get_direct_into("value-9", &mut [0u8; 16]).expect_err("too small");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    // The pool was given back every staged byte: its use is exactly its values.
    let used: u64 = pool.pool_attributes().expect("attributes").used_bytes;
    let stored: u64 =
        sizes.iter().enumerate().map(|(n, size)| *size as u64 + format!("value-{n}").len() as u64 + 64).sum();
    assert_eq!(used, stored);
}

/// Offset writes change bytes inside a large value in place, at its edges, durably; a range
/// past the end is refused and changes nothing.
#[test]
fn offset_writes_change_ranges_inside_a_value() {
    let server = TestServer::start(&[]);
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = pool(&session, "offsets", 64 << 20);
    let mut value = pattern(7, 5 << 20);
    pool.put_direct("big", &value).expect("put_direct");
    let patch = pattern(8, 3 << 20);
    pool.put_direct_offset_with("big", 1 << 20, &patch, PutFlags::SYNC).expect("inside the value");
    value[1 << 20..(1 << 20) + patch.len()].copy_from_slice(&patch);
    pool.put_direct_offset("big", (5 << 20) - 4, b"tail").expect("at the very end");
    value[(5 << 20) - 4..].copy_from_slice(b"tail");
    let error = pool.put_direct_offset("big", (5 << 20) - 3, b"tail").expect_err("past the end");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    let error = pool.put_direct_offset("absent", 0, b"x").expect_err("no such key");
    assert_eq!(error.code(), Some(ErrorCode::KeyNotFound), "{error}");
    assert!(pool.get("big").expect("get") == value, "the value holds every write and nothing else");
    pool.put("small", b"0123456789").expect("put");
    pool.put_direct_offset("small", 2, b"ab").expect("an inline value");
    assert_eq!(pool.get("small").expect("get"), b"01ab456789");
}

/// A reader polling a key with direct reads while a writer keeps replacing its large value with
/// direct puts (and inline puts of other lengths): every read is one whole written value.
#[test]
fn a_reader_racing_a_writer_never_sees_a_torn_value() {
    let server = TestServer::start(&[]);
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = pool(&session, "race", 256 << 20);
    let versions: Vec<Vec<u8>> =
        (0..6u64).map(|v| pattern(100 + v, if v % 3 == 2 { 100_000 } else { (6 << 20) + v as usize * 4099 })).collect();
    pool.put("hot", &versions[0]).expect("first version");
    let crcs: Vec<u32> = versions.iter().map(|v| crc32(v)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let writer = {
        let (address, stop, writes, versions) =
            (server.addr_string(), Arc::clone(&stop), Arc::clone(&writes), versions.clone());
        std::thread::spawn(move || {
            let session = blocking::Session::connect(&address).expect("connect");
            let pool = session.open_pool("race").expect("open");
            let mut n = 1;
            while !stop.load(Ordering::Relaxed) {
                pool.put("hot", &versions[n % versions.len()]).expect("replace");
                writes.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
        })
    };
    let started = Instant::now();
    let mut reads = 0;
    while reads < 40 || writes.load(Ordering::Relaxed) < 10 {
        let value = pool.get_direct("hot").expect("read");
        let crc = crc32(&value);
        assert!(crcs.contains(&crc), "read {reads}: {} bytes that match no version written", value.len());
        reads += 1;
        assert!(started.elapsed() < Duration::from_secs(120), "the race made too little progress");
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
}

/// A session's transfers end with it: an uncommitted direct put, whose room the pool's used bytes
/// count while it is open, leaves the old value and gives its room back; a reader that
/// disconnects lets writers go on. Misuse gets clear errors.
#[test]
fn transfers_end_with_their_session_and_misuse_is_refused() {
    let server = TestServer::builder().config("direct_value_bytes_max", 16 << 20).start();
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = pool(&session, "ends", 64 << 20);
    pool.put("k", b"old").expect("put");
    let error = pool.put_direct("k", &vec![0u8; (16 << 20) + 1]).expect_err("past the direct limit");
    assert_eq!(error.code(), Some(ErrorCode::ValueTooLarge), "{error}");
    assert!(error.to_string().contains("limits.direct_value_bytes_max"), "{error}");
    let error = pool.put_direct_with("k", &vec![1u8; 3 << 20], PutFlags::CREATE_ONLY).expect_err("create-only");
    assert_eq!(error.code(), Some(ErrorCode::KeyExists), "{error}");
    assert_eq!(pool.get("k").expect("get"), b"old");
    let used = pool.pool_attributes().expect("attributes").used_bytes;

    // A raw session opens a direct put and a direct read, then vanishes.
    let mut raw = RawClient::handshaken(server.addr(0));
    let handle = raw.open_pool(2, "ends");
    let open = Request::PutDirect { pool: handle, flags: PutFlags::NONE, transfer: 1, length: 10 << 20, key: b"k" };
    answer(&mut raw, 3, &open).expect("opened");
    answer(&mut raw, 4, &Request::DirectWrite { transfer: 1, offset: 0, bytes: &[7u8; 1 << 20] }).expect("a piece");
    let held = pool.pool_attributes().expect("attributes").used_bytes;
    assert_eq!(held, used + (10 << 20) + 64, "the open put holds its value's room");
    let misplaced = answer(&mut raw, 5, &Request::DirectWrite { transfer: 1, offset: 5, bytes: b"x" });
    assert!(misplaced.is_err_and(|message| message.contains("expected")), "pieces come in order");
    answer(&mut raw, 6, &Request::GetDirect { pool: handle, transfer: 2, key: b"k" }).expect("read opened");
    let unknown = answer(&mut raw, 7, &Request::DirectRead { transfer: 9, offset: 0, length: 1 });
    assert!(unknown.is_err_and(|message| message.contains("no direct read 9")), "an unknown transfer");
    let again = answer(&mut raw, 8, &Request::GetDirect { pool: handle, transfer: 2, key: b"k" });
    assert!(again.is_err_and(|message| message.contains("already open")), "a transfer id in use");

    // While the raw session reads `k`, a write of it from another session waits...
    let waiting = {
        let address = server.addr_string();
        std::thread::spawn(move || {
            let session = blocking::Session::connect(&address).expect("connect");
            let pool = session.open_pool("ends").expect("open");
            let started = Instant::now();
            pool.put("k", b"new").expect("put after the reader left");
            started.elapsed()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(pool.get("k").expect("reads are not held"), b"old", "the write waits for the reader");
    drop(raw);
    let waited = waiting.join().expect("writer");
    assert!(waited >= Duration::from_millis(250), "the write waited for the direct read ({waited:?})");
    assert_eq!(pool.get("k").expect("get"), b"new");
    assert_eq!(pool.pool_attributes().expect("attributes").used_bytes, used, "the staged value was freed");
}

/// A session that stops sending half way through a direct put is disconnected once it has sent
/// nothing for `limits.direct_read_idle_ms`, though the server has no idle timeout, and its
/// staged value is dropped; a quiet session with nothing staged stays connected.
#[test]
fn a_session_silent_in_a_direct_put_is_disconnected() {
    let server = TestServer::builder().config("direct_read_idle_ms", 1000).start();
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = pool(&session, "silent", 64 << 20);
    let mut raw = RawClient::handshaken(server.addr(0));
    let handle = raw.open_pool(2, "silent");
    let open = Request::PutDirect { pool: handle, flags: PutFlags::NONE, transfer: 1, length: 10 << 20, key: b"k" };
    answer(&mut raw, 3, &open).expect("opened");
    answer(&mut raw, 4, &Request::DirectWrite { transfer: 1, offset: 0, bytes: &[7u8; 1 << 20] }).expect("a piece");
    let started = Instant::now();
    raw.expect_closed();
    let silence = started.elapsed();
    assert!(silence >= Duration::from_millis(900) && silence < Duration::from_secs(5), "{silence:?}");
    let missing = pool.get("k").expect_err("never committed");
    assert_eq!(missing.code(), Some(ErrorCode::KeyNotFound), "{missing}");
    assert_eq!(pool.pool_attributes().expect("attributes").used_bytes, 0, "the staged value was freed");
}

/// kill -9 while clients stream large direct puts, many rounds: after each restart every key
/// holds a value some put wrote, whole (its old one or its new one), and every acknowledged put
/// is there.
#[test]
fn kill_9_during_large_direct_puts_leaves_old_or_new_values_whole() {
    let rounds: u64 = std::env::var("FERRITE_DIRECT_CRASH_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(8);
    let data_dir = fresh_dir("direct-crash").join("data");
    let start = || {
        TestServer::builder()
            .data_dir(&data_dir)
            .append_config("[durability]\ncheckpoint_wal_bytes = 67108864\ncheckpoint_interval_secs = 1")
            .start()
    };
    let keys = 3u64;
    let version = |key: u64, n: u64| pattern(key * 1000 + n, (3 << 20) + (n as usize % 5) * 1_000_003);
    let mut acknowledged = vec![0u64; keys as usize];
    let mut random = Random(0xc4a5);
    {
        let server = start();
        let session = blocking::Session::connect(&server.addr_string()).expect("connect");
        let pool = pool(&session, "crash", 256 << 20);
        for key in 0..keys {
            pool.put_direct(format!("k{key}"), &version(key, 0)).expect("first versions");
        }
        server.stop_gracefully();
    }
    for round in 0..rounds {
        let mut server = start();
        let session = blocking::Session::connect(&server.addr_string()).expect("connect");
        let pool = session.open_pool("crash").expect("open");
        for key in 0..keys {
            let value = pool.get(format!("k{key}")).expect("every key survives");
            let n = (acknowledged[key as usize]..acknowledged[key as usize] + 2)
                .find(|n| value == version(key, *n))
                .unwrap_or_else(|| panic!("round {round}: k{key} holds {} bytes of no version written", value.len()));
            acknowledged[key as usize] = n;
        }
        let writers: Vec<_> = (0..keys)
            .map(|key| {
                let address = server.addr_string();
                let first = acknowledged[key as usize];
                std::thread::spawn(move || {
                    let Ok(session) = blocking::Session::connect(&address) else { return first };
                    let Ok(pool) = session.open_pool("crash") else { return first };
                    let mut n = first;
                    while pool.put_direct_with(format!("k{key}"), &version(key, n + 1), PutFlags::SYNC).is_ok() {
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100 + random.below(600)));
        server.kill9();
        for (key, writer) in writers.into_iter().enumerate() {
            acknowledged[key] = writer.join().expect("writer");
        }
    }
    let server = start();
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = session.open_pool("crash").expect("open");
    for key in 0..keys {
        let value = pool.get(format!("k{key}")).expect("every key survives");
        let n = acknowledged[key as usize];
        assert!(
            value == version(key, n) || value == version(key, n + 1),
            "k{key}: neither its acknowledged value nor the next"
        );
    }
    server.stop_gracefully();
}

/// Small gets on the same shard keep being answered while large direct transfers stream: the
/// slowest of them waits far less than one transfer takes (a shard that held its loop for a
/// whole transfer would make some wait nearly that long).
#[test]
fn small_gets_are_served_while_large_transfers_stream() {
    let server = TestServer::start(&[]);
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = pool(&session, "probe", 1 << 30);
    let large = pattern(3, 256 << 20);
    pool.put_direct("large", &large).expect("put_direct");
    pool.put("small", b"value").expect("put");
    let stop = Arc::new(AtomicBool::new(false));
    let transfer_times = Arc::new(std::sync::Mutex::new(Vec::new()));
    let streamer = {
        let (address, stop, times) = (server.addr_string(), Arc::clone(&stop), Arc::clone(&transfer_times));
        std::thread::spawn(move || {
            let session = blocking::Session::connect(&address).expect("connect");
            let pool = session.open_pool("probe").expect("open");
            let mut buffer = vec![0u8; 256 << 20];
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) || n < 2 {
                let started = Instant::now();
                if n % 2 == 0 {
                    pool.get_direct_into("large", &mut buffer).expect("read");
                } else {
                    pool.put_direct("large", &buffer).expect("write");
                }
                times.lock().expect("times").push(started.elapsed());
                n += 1;
            }
        })
    };
    let prober = blocking::Session::connect(&server.addr_string()).expect("connect");
    let probe = prober.open_pool("probe").expect("open");
    let mut latencies = Vec::new();
    while transfer_times.lock().expect("times").len() < 4 {
        let started = Instant::now();
        assert_eq!(probe.get("small").expect("a small get"), b"value");
        latencies.push(started.elapsed());
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Relaxed);
    streamer.join().expect("streamer");
    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    let fastest_transfer = *transfer_times.lock().expect("times").iter().min().expect("transfers ran");
    eprintln!("{} probes, p99 {p99:?}, fastest 256 MiB transfer {fastest_transfer:?}", latencies.len());
    assert!(latencies.len() >= 20, "the probe ran during the transfers");
    assert!(p99 * 4 < fastest_transfer, "p99 {p99:?} of small gets against transfers of {fastest_transfer:?}");
}

/// Every engine and backing takes direct puts, offset writes and direct reads, and the `pmem`
/// and `ssd` backings keep them across a restart.
#[test]
fn every_engine_and_backing_moves_large_values() {
    for (store, backing) in [("hstore", "ssd"), ("hstore", "pmem"), ("hstore", "memory"), ("mapstore", "memory")] {
        let data_dir = fresh_dir("direct-backings").join("data");
        let start = || {
            TestServer::builder()
                .data_dir(&data_dir)
                .config("store", format!("\"{store}\""))
                .config("backing", format!("\"{backing}\""))
                .start()
        };
        let server = start();
        let session = blocking::Session::connect(&server.addr_string()).expect("connect");
        let pool = pool(&session, "engines", 64 << 20);
        let mut value = pattern(11, (5 << 20) + 17);
        pool.put_direct_with("big", &value, PutFlags::SYNC).expect("put_direct");
        pool.put_direct_offset_with("big", 4 << 20, b"patched", PutFlags::SYNC).expect("an offset write");
        value[4 << 20..(4 << 20) + 7].copy_from_slice(b"patched");
        assert!(pool.get("big").expect("get") == value, "{store} on {backing}");
        let mut slice = [0u8; 20];
        let read = pool.get_direct_offset("big", value.len() as u64 - 10, &mut slice).expect("the last bytes");
        assert_eq!(&slice[..read], &value[value.len() - 10..], "{store} on {backing}");
        drop(pool);
        drop(session);
        server.stop_gracefully();
        if backing != "memory" {
            let server = start();
            let session = blocking::Session::connect(&server.addr_string()).expect("connect");
            let pool = session.open_pool("engines").expect("the pool survives");
            assert!(pool.get_direct("big").expect("get") == value, "{store} on {backing} after a restart");
            server.stop_gracefully();
        }
    }
}

/// A direct read that stops reading holds its key's writers back for `limits.direct_read_idle_ms`
/// at most: then the writer goes ahead, and the read's next piece says why it failed.
#[test]
fn an_idle_direct_read_stops_holding_its_key() {
    let server = TestServer::builder().config("direct_read_idle_ms", 500).start();
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = pool(&session, "idle", 64 << 20);
    pool.put("k", b"old").expect("put");
    let mut raw = RawClient::handshaken(server.addr(0));
    let handle = raw.open_pool(2, "idle");
    answer(&mut raw, 3, &Request::GetDirect { pool: handle, transfer: 1, key: b"k" }).expect("read opened");
    answer(&mut raw, 4, &Request::DirectRead { transfer: 1, offset: 0, length: 3 }).expect("a piece");
    let started = Instant::now();
    pool.put("k", b"new").expect("the write goes ahead once the read has been idle long enough");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(400), "the write waited for the read first ({waited:?})");
    assert!(waited < Duration::from_secs(10), "the write waited {waited:?}");
    let broken = answer(&mut raw, 5, &Request::DirectRead { transfer: 1, offset: 0, length: 3 });
    assert!(broken.is_err_and(|message| message.contains("no longer holds its key")), "the read is told");
    answer(&mut raw, 6, &Request::EndTransfer { transfer: 1, flags: ferrite_proto::EndTransferFlags::COMMIT })
        .expect("ending a broken read is fine");
    answer(&mut raw, 7, &Request::GetDirect { pool: handle, transfer: 1, key: b"k" }).expect("a new read");
    assert_eq!(pool.get("k").expect("get"), b"new");
}

/// Opens direct put 1 of `key` with `length` bytes on a fresh raw session of `pool_name`.
fn raw_put_opened(server: &TestServer, pool_name: &str, key: &[u8], length: u64) -> RawClient {
    let mut raw = RawClient::handshaken(server.addr(0));
    let handle = raw.open_pool(2, pool_name);
    let open = Request::PutDirect { pool: handle, flags: PutFlags::NONE, transfer: 1, length, key };
    answer(&mut raw, 3, &open).expect("opened");
    raw
}

/// Waits (a few seconds at most) until the pool's used bytes are `used`: a session the client
/// left ends on the server's side a moment later.
fn wait_for_used_bytes(pool: &blocking::Pool, used: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now_used = pool.pool_attributes().expect("attributes").used_bytes;
        if now_used == used {
            return;
        }
        assert!(Instant::now() < deadline, "the staged value was not freed: {now_used} bytes used, {used} expected");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A large piece is read from the socket straight into the staged value's memory as it arrives
/// (counted in `direct_bytes_in_place`), in however many writes its client makes, and the
/// requests sent in the same write as its last bytes are answered after it. A client that hangs
/// up or goes silent half way through such a piece leaves the key's old value and gives its
/// room back; a large piece the put refuses (misplaced, past the value) gets its error, and the
/// connection goes on.
#[test]
fn large_pieces_are_read_into_pool_memory_as_they_arrive() {
    let server = TestServer::builder().config("direct_read_idle_ms", 1000).start();
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = pool(&session, "in-place", 64 << 20);
    let value = pattern(7, 3 << 20);
    let mut raw = raw_put_opened(&server, "in-place", b"k", value.len() as u64);
    let piece = |request_id, n: usize| {
        let bytes = &value[n << 20..(n + 1) << 20];
        wire::encode(request_id, &Request::DirectWrite { transfer: 1, offset: (n << 20) as u64, bytes })
    };
    for chunk in piece(4, 0).chunks(100_003) {
        raw.send_bytes(chunk);
        std::thread::sleep(Duration::from_millis(2));
    }
    raw.read_frame().expect_ok(4);
    let mut rest = [piece(5, 1), piece(6, 2)].concat();
    rest.extend(wire::encode(7, &Request::EndTransfer { transfer: 1, flags: ferrite_proto::EndTransferFlags::COMMIT }));
    raw.send_bytes(&rest);
    for request_id in 5..=7 {
        raw.read_frame().expect_ok(request_id);
    }
    assert!(pool.get("k").expect("get") == value, "the value read in place came back whole");
    let stats = raw.statistics(8);
    assert_eq!(wire::counter(&stats, "direct_bytes_in_place"), 3 << 20, "every piece was read in place");
    let used = pool.pool_attributes().expect("attributes").used_bytes;

    // Refused pieces: the put answers them as if they had come whole.
    let mut refused = raw_put_opened(&server, "in-place", b"k", 1 << 20);
    let misplaced = Request::DirectWrite { transfer: 1, offset: 5, bytes: &value[..1 << 20] };
    let error = answer(&mut refused, 4, &misplaced).expect_err("misplaced");
    assert!(error.contains("expected"), "{error}");
    let past_the_end = Request::DirectWrite { transfer: 1, offset: 0, bytes: &value[..(1 << 20) + 1] };
    let error = answer(&mut refused, 5, &past_the_end).expect_err("past the value");
    assert!(error.contains("pass the value's"), "{error}");
    answer(&mut refused, 6, &Request::EndTransfer { transfer: 1, flags: ferrite_proto::EndTransferFlags::ABORT })
        .expect("aborted");
    assert_eq!(pool.get("k").expect("get").len(), value.len());

    // Half a piece, then the client hangs up; half a piece, then it says nothing more.
    let replacing = pattern(8, 2 << 20);
    let half = Request::DirectWrite { transfer: 1, offset: 0, bytes: &replacing[..1 << 20] };
    let half = &wire::encode(4, &half)[..512 << 10];
    let mut hangs_up = raw_put_opened(&server, "in-place", b"k", replacing.len() as u64);
    hangs_up.send_bytes(half);
    std::thread::sleep(Duration::from_millis(100));
    drop(hangs_up);
    wait_for_used_bytes(&pool, used);
    let mut silent = raw_put_opened(&server, "in-place", b"k", replacing.len() as u64);
    silent.send_bytes(half);
    let started = Instant::now();
    silent.expect_closed();
    let silence = started.elapsed();
    assert!(silence >= Duration::from_millis(900) && silence < Duration::from_secs(5), "{silence:?}");
    wait_for_used_bytes(&pool, used);
    assert!(pool.get("k").expect("get") == value, "the key kept its value");
    let stats = raw.statistics(9);
    assert_eq!(wire::counter(&stats, "direct_bytes_in_place"), 3 << 20, "pieces not answered are not counted");
}

/// A piece longer than the server's configured value limit is refused as it would be whole, and
/// none of it is read into pool memory.
#[test]
fn a_piece_past_the_configured_value_limit_is_refused_before_any_byte_is_read_in_place() {
    let server = TestServer::builder().config("value_bytes_max", 262_144).start();
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = pool(&session, "limited", 64 << 20);
    let value = pattern(9, 1 << 20);
    let mut raw = raw_put_opened(&server, "limited", b"k", value.len() as u64);
    let over = Request::DirectWrite { transfer: 1, offset: 0, bytes: &value[..(256 << 10) + 1] };
    raw.send(4, &over);
    let error = raw.read_frame().expect_error(4, ErrorCode::ValueTooLarge);
    assert!(error.contains("262144"), "{error}");
    assert_eq!(wire::counter(&raw.statistics(5), "direct_bytes_in_place"), 0);
    for (n, piece) in value.chunks(256 << 10).enumerate() {
        let within = Request::DirectWrite { transfer: 1, offset: (n * (256 << 10)) as u64, bytes: piece };
        answer(&mut raw, 10 + n as u64, &within).expect("a piece within the limit");
    }
    answer(&mut raw, 20, &Request::EndTransfer { transfer: 1, flags: ferrite_proto::EndTransferFlags::COMMIT })
        .expect("committed");
    assert!(pool.get("k").expect("get") == value);
}
