//! Every operation of the protocol, through the Rust client, against the real server binary.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::{crc32, wait_until, TestServer};
use ferrite_client::{blocking, Attribute, ErrorCode, PoolOptions, PutFlags};

/// Bytes a pair is charged against its pool's capacity on top of key and value (docs/protocol.md,
/// `create_pool`).
const PAIR_OVERHEAD_BYTES: u64 = 64;

fn connect(server: &TestServer) -> blocking::Session {
    blocking::Session::connect(&server.addr_string()).expect("connect to the test server")
}

fn options(size_bytes: u64) -> PoolOptions {
    PoolOptions { size_bytes, ..PoolOptions::default() }
}

fn now_ns() -> u64 {
    u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_nanos())
        .expect("nanoseconds fit u64 until 2554")
}

/// The local CRC-32 is the one the protocol names: it gives the standard check value.
#[test]
fn local_crc32_matches_the_standard_check_value() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    assert_eq!(crc32(b""), 0);
    assert_eq!(crc32(b"The quick brown fox jumps over the lazy dog"), 0x414F_A339);
}

/// `create_pool` creates a pool the first time and opens it afterwards (`created` false, original
/// size kept); with create-only it refuses an existing pool with `pool_exists`.
#[test]
fn create_pool_creates_then_opens_and_create_only_refuses_an_existing_pool() {
    let server = TestServer::start(&[]);
    let session = connect(&server);

    let first = session.create_pool("orders", options(1 << 20)).expect("create a new pool");
    assert!(first.created(), "the first create_pool creates");
    first.put("k", "v").expect("put in the new pool");

    let second = session.create_pool("orders", options(5 << 20)).expect("create_pool opens an existing pool");
    assert!(!second.created(), "the second create_pool only opens");
    assert_eq!(second.handle(), first.handle(), "a pool has one handle for every open of it");
    assert_eq!(second.get("k").expect("the data is there"), b"v");
    assert_eq!(
        second.pool_attributes().expect("pool attributes").size_bytes,
        1 << 20,
        "an existing pool keeps its size"
    );

    let refused = session
        .create_pool("orders", PoolOptions { create_only: true, ..options(1 << 20) })
        .expect_err("create-only on an existing pool");
    assert_eq!(refused.code(), Some(ErrorCode::PoolExists), "{refused}");
    assert!(refused.is_pool_exists());

    let fresh = session
        .create_pool("invoices", PoolOptions { create_only: true, ..options(1 << 20) })
        .expect("create-only on a new name creates");
    assert!(fresh.created());
}

/// `open_pool` opens an existing pool with the same handle, `close_pool` releases it, and
/// `delete_pool` removes it once nobody has it open; a deleted pool cannot be opened.
#[test]
fn open_close_and_delete_a_pool() {
    let server = TestServer::start(&[]);
    let session = connect(&server);
    let created = session.create_pool("p", options(1 << 20)).expect("create");
    created.put("a", "1").expect("put");

    let opened = session.open_pool("p").expect("open an existing pool");
    assert!(!opened.created());
    assert_eq!(opened.handle(), created.handle());
    assert_eq!(opened.get("a").expect("get through the second open"), b"1");

    let opens = |session: &blocking::Session| {
        session.list_pools().expect("list").into_iter().find(|p| p.name == "p").map(|p| p.open_count)
    };
    assert_eq!(opens(&session), Some(2));
    opened.close().expect("close the second open");
    assert_eq!(opens(&session), Some(1));
    created.close().expect("close the first open");
    assert_eq!(opens(&session), Some(0));

    session.delete_pool("p").expect("delete a closed pool");
    assert_eq!(opens(&session), None, "a deleted pool is not listed");
    let error = session.open_pool("p").expect_err("open a deleted pool");
    assert_eq!(error.code(), Some(ErrorCode::PoolNotFound), "{error}");
}

/// `put` stores and replaces; create-only refuses a present key with `key_exists` and leaves the
/// old value; update-only refuses an absent key with `key_not_found` and creates nothing; `get`
/// returns exactly what was stored, including empty and binary values.
#[test]
fn put_modes_and_get() {
    let server = TestServer::start(&[]);
    let session = connect(&server);
    let pool = session.create_pool("kv", options(1 << 20)).expect("create");

    pool.put("k", "one").expect("plain put inserts");
    assert_eq!(pool.get("k").expect("get"), b"one");
    pool.put("k", "two").expect("plain put replaces");
    assert_eq!(pool.get("k").expect("get"), b"two");

    let error = pool.put_with("k", "three", PutFlags::CREATE_ONLY).expect_err("create-only on a present key");
    assert_eq!(error.code(), Some(ErrorCode::KeyExists), "{error}");
    assert_eq!(pool.get("k").expect("get"), b"two", "a refused create-only put leaves the old value");

    let error = pool.put_with("absent", "x", PutFlags::UPDATE_ONLY).expect_err("update-only on an absent key");
    assert_eq!(error.code(), Some(ErrorCode::KeyNotFound), "{error}");
    let error = pool.get("absent").expect_err("the refused update-only put created nothing");
    assert!(error.is_key_not_found(), "{error}");

    pool.put_with("k", "four", PutFlags::UPDATE_ONLY).expect("update-only on a present key");
    assert_eq!(pool.get("k").expect("get"), b"four");
    pool.put_with("new", "five", PutFlags::CREATE_ONLY).expect("create-only on an absent key");
    assert_eq!(pool.get("new").expect("get"), b"five");

    let binary: Vec<u8> = (0..=255u8).rev().collect();
    pool.put(b"\x00bin\xff", &binary).expect("binary key and value");
    assert_eq!(pool.get(b"\x00bin\xff").expect("get binary"), binary);
    pool.put("empty", b"").expect("empty value");
    assert_eq!(pool.get("empty").expect("get empty"), b"");
    pool.put(b"", "empty key").expect("empty key");
    assert_eq!(pool.get(b"").expect("get empty key"), b"empty key");
    assert_eq!(pool.count().expect("count"), 5, "k, new, the binary key, empty and the empty key");
}

/// `erase` removes a key (a later `get` fails with `key_not_found`), fails with `key_not_found` for
/// an absent key, and `count` follows every change.
#[test]
fn erase_and_count() {
    let server = TestServer::start(&[]);
    let session = connect(&server);
    let pool = session.create_pool("e", options(1 << 20)).expect("create");
    assert_eq!(pool.count().expect("count"), 0);
    for i in 0..10 {
        pool.put(format!("key-{i}"), format!("value-{i}")).expect("put");
    }
    assert_eq!(pool.count().expect("count"), 10);
    pool.put("key-3", "replaced").expect("overwrite");
    assert_eq!(pool.count().expect("count"), 10, "an overwrite adds no pair");

    pool.erase("key-3").expect("erase a present key");
    assert_eq!(pool.count().expect("count"), 9);
    assert!(pool.get("key-3").expect_err("erased").is_key_not_found());
    let error = pool.erase("key-3").expect_err("erase it again");
    assert_eq!(error.code(), Some(ErrorCode::KeyNotFound), "{error}");
    let error = pool.erase("never-was").expect_err("erase an absent key");
    assert_eq!(error.code(), Some(ErrorCode::KeyNotFound), "{error}");
    assert_eq!(pool.count().expect("count"), 9, "failed erases change nothing");
    assert_eq!(pool.get("key-4").expect("neighbours untouched"), b"value-4");
}

/// `get_attribute` reports a value's length, its zlib CRC-32 and its write time (inside the window
/// around the put), and the pool's object count, capacity and bytes used (key + value + 64 per
/// pair); a missing key fails with `key_not_found`.
#[test]
fn get_attribute_reports_value_and_pool_attributes() {
    let server = TestServer::start(&[]);
    let session = connect(&server);
    let size = 1 << 20;
    let pool = session.create_pool("attrs", options(size)).expect("create");

    let before = now_ns();
    pool.put("check", "123456789").expect("put");
    let after = now_ns();
    assert_eq!(pool.attribute(Attribute::ValueLength, "check").expect("value_length"), 9);
    assert_eq!(pool.attribute(Attribute::Crc32, "check").expect("crc32"), 0xCBF4_3926);
    let written = pool.attribute(Attribute::WriteTime, "check").expect("write_time");
    assert!((before..=after).contains(&written), "write time {written} outside [{before}, {after}]");

    let fox = b"The quick brown fox jumps over the lazy dog".repeat(100);
    pool.put("fox", &fox).expect("put");
    let attributes = pool.value_attributes("fox").expect("value attributes in one round trip");
    assert_eq!(attributes.length, fox.len() as u64);
    assert_eq!(attributes.crc32, crc32(&fox));
    assert!(attributes.write_time_ns >= written, "a later write has a later (or equal) time");

    let used = ("check".len() + 9 + "fox".len() + fox.len()) as u64 + 2 * PAIR_OVERHEAD_BYTES;
    assert_eq!(pool.attribute(Attribute::ObjectCount, b"").expect("object_count"), 2);
    assert_eq!(pool.attribute(Attribute::PoolSize, b"").expect("pool_size"), size);
    assert_eq!(pool.attribute(Attribute::PoolUsed, b"").expect("pool_used"), used);
    let attributes = pool.pool_attributes().expect("pool attributes");
    assert_eq!((attributes.objects, attributes.size_bytes, attributes.used_bytes), (2, size, used));

    pool.erase("fox").expect("erase");
    assert_eq!(pool.attribute(Attribute::PoolUsed, b"").expect("pool_used"), 5 + 9 + PAIR_OVERHEAD_BYTES);

    for attribute in [Attribute::ValueLength, Attribute::Crc32, Attribute::WriteTime] {
        let error = pool.attribute(attribute, "fox").expect_err("attribute of a missing key");
        assert_eq!(error.code(), Some(ErrorCode::KeyNotFound), "{attribute:?}: {error}");
    }
}

/// `get_statistics` counts exactly what this test did on a fresh server: puts, gets and erases
/// that succeeded, requests that failed, every request answered, and the connections open now and
/// ever.
#[test]
fn statistics_count_exactly_what_was_done() {
    let server = TestServer::start(&[]);
    let session = connect(&server);
    let pool = session.create_pool("stats", options(1 << 20)).expect("create");
    let snapshot = |session: &blocking::Session| {
        let mut shards = session.statistics().expect("statistics");
        assert_eq!(shards.len(), 1);
        shards.remove(0)
    };

    let start = snapshot(&session);
    assert_eq!(start.shard, 0);
    for name in ["puts", "gets", "erases", "failures"] {
        assert_eq!(start.get(name), Some(0), "a fresh server has done no {name}");
    }
    assert_eq!(start.get("shard"), Some(0));
    assert_eq!(start.get("clients"), Some(1));
    assert_eq!(start.get("clients_total"), Some(1));
    assert_eq!(start.get("pools"), Some(1));

    // 5 puts, 4 gets, 2 erases that succeed; 4 requests that fail; 1 count.
    for i in 0..5 {
        pool.put(format!("k{i}"), "v").expect("put");
    }
    for i in 0..4 {
        pool.get(format!("k{i}")).expect("get");
    }
    pool.erase("k0").expect("erase");
    pool.erase("k1").expect("erase");
    pool.put_with("k2", "v", PutFlags::CREATE_ONLY).expect_err("key_exists");
    pool.put_with("nope", "v", PutFlags::UPDATE_ONLY).expect_err("key_not_found");
    pool.get("k0").expect_err("key_not_found");
    pool.erase("k0").expect_err("key_not_found");
    assert_eq!(pool.count().expect("count"), 3);
    let operations = 5 + 4 + 2 + 4 + 1;

    let end = snapshot(&session);
    assert_eq!(end.get("puts"), Some(5));
    assert_eq!(end.get("gets"), Some(4));
    assert_eq!(end.get("erases"), Some(2));
    assert_eq!(end.get("failures"), Some(4));
    let requests = |s: &ferrite_client::ShardStatistics| s.get("requests").expect("requests counter");
    // The operations plus one of the two statistics requests (whichever one counts itself).
    assert_eq!(requests(&end) - requests(&start), operations + 1);
    assert!(end.get("uptime_ms") >= start.get("uptime_ms"));

    let other = connect(&server);
    let with_two = snapshot(&other);
    assert_eq!(with_two.get("clients"), Some(2));
    assert_eq!(with_two.get("clients_total"), Some(2));
    drop(other);
    wait_until("the closed session to leave the client count", common::SETTLE_TIMEOUT, || {
        let stats = snapshot(&session);
        (stats.get("clients") == Some(1)).then_some(stats)
    });
    assert_eq!(snapshot(&session).get("clients_total"), Some(2), "clients_total never goes down");
}

/// `list_pools` on a two-shard server lists every pool once, on the shard its name routes to,
/// with its pair count, size, bytes used and opens.
#[test]
fn list_pools_covers_every_shard() {
    let server = TestServer::builder().shards(2).start();
    let session = connect(&server);
    assert_eq!(session.shard_count(), 2);
    let names: Vec<String> = (0..8).map(|i| format!("listed-{i}")).collect();
    let shards: std::collections::BTreeSet<u16> = names.iter().map(|n| session.shard_for_pool(n)).collect();
    assert_eq!(shards.len(), 2, "the names were chosen to land on both shards");

    let mut pools = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let pool = session.create_pool(name, options(1 << 20)).expect("create");
        for k in 0..i {
            pool.put(format!("k{k}"), "vv").expect("put");
        }
        pools.push(pool);
    }
    let listed = session.list_pools().expect("list");
    assert_eq!(listed.len(), names.len());
    for (i, name) in names.iter().enumerate() {
        let info = listed.iter().find(|p| &p.name == name).unwrap_or_else(|| panic!("{name} is not listed"));
        assert_eq!(info.shard, ferrite_proto::shard_for_pool(name, 2), "{name}");
        assert_eq!(info.objects, i as u64, "{name}");
        assert_eq!(info.size_bytes, 1 << 20, "{name}");
        assert_eq!(info.used_bytes, i as u64 * (2 + 2 + PAIR_OVERHEAD_BYTES), "{name}");
        assert_eq!(info.open_count, 1, "{name}");
    }
    let per_shard: Vec<u64> =
        session.statistics().expect("statistics").iter().map(|s| s.get("pools").expect("pools counter")).collect();
    assert_eq!(per_shard.iter().sum::<u64>(), names.len() as u64);
}

/// A server listening on all interfaces announces `0.0.0.0:PORT` for its shards; the client,
/// connected to one shard through 127.0.0.1, reads that as "the host you connected to" and
/// reaches pools on the other shard there.
#[test]
fn unspecified_shard_hosts_mean_the_host_the_client_reached() {
    let server = TestServer::builder().listen_ip("0.0.0.0").shards(2).start();
    assert!(server.announced().iter().all(|a| a.starts_with("0.0.0.0:")), "{:?}", server.announced());
    let session = connect(&server);
    let expected: Vec<String> = server.addresses().iter().map(ToString::to_string).collect();
    assert_eq!(session.shard_addresses(), expected, "dialled at 127.0.0.1, the address we reached");
    let on_shard_1 = (0..100).map(|i| format!("far-{i}")).find(|n| session.shard_for_pool(n) == 1).expect("a name");
    let pool = session.create_pool(&on_shard_1, options(1 << 20)).expect("create on the other shard");
    assert_eq!(pool.shard(), 1);
    pool.put("k", "v").expect("put");
    assert_eq!(pool.get("k").expect("get"), b"v");
}

/// A server on the IPv6 loopback announces `[::1]:PORT`, as the protocol writes IPv6 addresses,
/// and the client reaches both shards through it. Skipped where this machine has no IPv6 loopback.
#[test]
fn ipv6_shard_addresses_are_bracketed_and_reachable() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback on this machine; skipping");
        return;
    }
    let server = TestServer::builder().listen_ip("[::1]").shards(2).start();
    for announced in server.announced() {
        assert!(announced.starts_with("[::1]:"), "{announced}");
    }
    let session = blocking::Session::connect(&server.announced()[0]).expect("connect over IPv6");
    for i in 0..6 {
        let pool = session.create_pool(&format!("v6-{i}"), options(1 << 20)).expect("create");
        pool.put("k", "v").expect("put");
    }
    let shards: std::collections::BTreeSet<u16> = session.list_pools().expect("list").iter().map(|p| p.shard).collect();
    assert_eq!(shards.len(), 2, "pools on both shards, both reached over IPv6");
}
