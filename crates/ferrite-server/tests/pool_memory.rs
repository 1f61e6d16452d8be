//! The memory figures of the pool listing and the shard statistics, from the real server: what
//! each part counts for each engine, how they follow puts and erases, and that a restart rebuilds
//! them.

mod common;

use std::collections::BTreeMap;

use common::{fresh_dir, TestServer};
use ferrite_client::blocking::Session;
use ferrite_client::{PoolInfo, PoolOptions};

fn connect(server: &TestServer) -> Session {
    Session::connect(&server.addr_string()).expect("connect")
}

fn listing(session: &Session) -> BTreeMap<String, PoolInfo> {
    session.list_pools().expect("list").into_iter().map(|pool| (pool.name.clone(), pool)).collect()
}

/// Sixteen bytes, like the values: a pair that fits its hstore entry.
fn key(i: u32) -> String {
    format!("key:{i:012}")
}

/// A 1 MiB pool sized for 1,000 pairs: 3 subtables of 445 buckets once touched, 4 KiB slabs, and
/// objects over 512 bytes in extents of their own.
fn options(indexed: bool) -> PoolOptions {
    PoolOptions { size_bytes: 1 << 20, expected_objects: 1000, indexed, ..PoolOptions::default() }
}

/// hstore pools on the default (durable) server: the table exactly 64 bytes a bucket at the load
/// the engine keeps, slabs and large extents only once values leave their entries, index bytes
/// only for the indexed pool; the shard's totals add the pools up; and a restart, which rebuilds
/// the allocator and the index, reports every figure again.
#[test]
fn hstore_pools_report_their_memory_by_part() {
    let data_dir = fresh_dir("memory").join("data");
    let server = TestServer::builder().data_dir(&data_dir).start();
    let session = connect(&server);
    let plain = session.create_pool("plain", options(false)).expect("create");
    let ordered = session.create_pool("ordered", options(true)).expect("create");

    for pool in listing(&session).values() {
        let memory = pool.memory;
        assert_eq!(memory.table_buckets, 0, "{}: a subtable gets buckets with its first pair", pool.name);
        assert_eq!(memory.total_bytes(), memory.other_bytes, "{}: only the header and directory", pool.name);
        assert!(memory.other_bytes > 4096, "{}: {memory:?}", pool.name);
        assert_eq!((pool.bytes_per_key(), pool.table_load()), (None, None));
    }

    for i in 0..1000 {
        plain.put(key(i), [7; 16]).expect("put");
        ordered.put(key(i), [7; 16]).expect("put");
    }
    let filled = listing(&session);
    for pool in filled.values() {
        let memory = pool.memory;
        assert_eq!(pool.objects, 1000);
        assert_eq!(memory.table_bytes, memory.table_buckets * 64, "{}", pool.name);
        let load = pool.table_load().expect("a table");
        assert!((0.6..=0.875).contains(&load), "{}: load {load}", pool.name);
        assert_eq!((memory.slab_bytes, memory.large_bytes), (0, 0), "{}: pairs live in their entries", pool.name);
    }
    let plain_memory = filled["plain"].memory;
    assert_eq!(plain_memory.index_bytes, 0, "an unindexed pool keeps no index");
    let bytes_per_key = filled["plain"].bytes_per_key().expect("pairs");
    assert!((64.0..128.0).contains(&bytes_per_key), "{bytes_per_key} bytes per key");
    // Each key's own 32-byte allocation and at least its 16-byte slot in a B-tree node.
    let index_bytes = filled["ordered"].memory.index_bytes;
    assert!((48_000..100_000).contains(&index_bytes), "{index_bytes} index bytes for 1,000 keys");

    // Values too long for the entry: 200 bytes in slab slots of 224, 18 to a 4 KiB slab; 2,000
    // bytes in an extent of 2,048.
    for i in 0..100 {
        plain.put(key(i), [8; 200]).expect("put");
    }
    plain.put(key(100), [9; 2000]).expect("put");
    let out_of_line = listing(&session)["plain"].memory;
    assert_eq!((out_of_line.slab_bytes, out_of_line.large_bytes), (6 * 4096, 2048));
    assert_eq!(out_of_line.table_bytes, plain_memory.table_bytes);

    for i in 0..500 {
        ordered.erase(key(i)).expect("erase");
    }
    let after_erase = listing(&session);
    assert!(after_erase["ordered"].memory.index_bytes < index_bytes * 6 / 10, "the index shrinks with its keys");

    let statistics = session.statistics().expect("statistics");
    let pools = after_erase.values();
    assert_eq!(statistics[0].get("objects"), Some(pools.clone().map(|pool| pool.objects).sum()));
    assert_eq!(statistics[0].get("memory_bytes"), Some(pools.map(|pool| pool.memory.total_bytes()).sum()));

    drop((plain, ordered, session));
    server.stop_gracefully();
    let server = TestServer::builder().data_dir(&data_dir).start();
    let restarted = listing(&connect(&server));
    for (name, pool) in &after_erase {
        assert_eq!(restarted[name].memory, pool.memory, "{name}: recovery rebuilds the same figures");
    }
}

/// A mapstore pool reports its estimate: the hash map's buckets as its table, every key and
/// value allocation as other bytes, and no slabs or large extents.
#[test]
fn mapstore_pools_report_an_estimate() {
    let server = TestServer::builder().config("store", "\"mapstore\"").config("backing", "\"memory\"").start();
    let session = connect(&server);
    let pool = session.create_pool("cache", options(false)).expect("create");
    for i in 0..1000 {
        pool.put(key(i), [7; 16]).expect("put");
    }
    let listed = &listing(&session)["cache"];
    let memory = listed.memory;
    assert!(memory.table_buckets * 7 / 8 >= 1000 && memory.table_bytes > memory.table_buckets * 48, "{memory:?}");
    assert_eq!((memory.slab_bytes, memory.large_bytes, memory.index_bytes), (0, 0, 0));
    assert!(memory.other_bytes >= 1000 * 64, "a 32-byte allocation for each key and each value: {memory:?}");
    assert!(listed.bytes_per_key().expect("pairs") > 128.0);
}
