//! `find` through the Rust client against the real server: over a pool's secondary index every
//! kind matches as documented, the index follows puts and erases, paging returns each key once
//! even while the pool changes, and a rarely matching pattern is answered in bounded steps; over a
//! pool without one, the hash table is walked and every key present throughout is found.

mod common;

use common::TestServer;
use ferrite_client::{blocking, Durability, ErrorCode, FindKind, PoolOptions};

fn indexed_pool(session: &blocking::Session, name: &str) -> blocking::Pool {
    let options = PoolOptions { size_bytes: 256 << 20, indexed: true, ..PoolOptions::default() };
    session.create_pool(name, options).expect("create an indexed pool")
}

fn strings(keys: Vec<Vec<u8>>) -> Vec<String> {
    keys.into_iter().map(|k| String::from_utf8(k).expect("test keys are UTF-8")).collect()
}

/// Each kind selects exactly the documented keys, in byte order, and the index forgets erased keys
/// and does not duplicate overwritten ones.
#[test]
fn every_kind_matches_as_documented() {
    let server = TestServer::start(&[]);
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = indexed_pool(&session, "people");
    for key in ["user:2", "user:10", "user:1", "order:7", "admin", "user:3"] {
        pool.put(key, b"v").expect("put");
    }
    pool.put("user:1", b"overwritten").expect("overwrite");
    pool.erase("user:3").expect("erase");

    let all = strings(pool.find_all(FindKind::Prefix, b"").expect("find all"));
    assert_eq!(all, ["admin", "order:7", "user:1", "user:10", "user:2"]);
    assert_eq!(strings(pool.find_all(FindKind::Prefix, b"user:").expect("prefix")), ["user:1", "user:10", "user:2"]);
    assert_eq!(strings(pool.find_all(FindKind::Exact, b"admin").expect("exact")), ["admin"]);
    assert!(pool.find_all(FindKind::Exact, b"user:3").expect("exact erased").is_empty());
    assert_eq!(strings(pool.find_all(FindKind::Glob, b"user:?").expect("glob")), ["user:1", "user:2"]);
    assert_eq!(strings(pool.find_all(FindKind::Regex, b"^[ou].*[07]$").expect("regex")), ["order:7", "user:10"]);
}

/// A bad regular expression, an out-of-range limit, and (on a pool without an index) a resume
/// point that is not a cursor are refused with `invalid_argument`, and the connection goes on
/// working.
#[test]
fn invalid_searches_are_refused() {
    let server = TestServer::start(&[]);
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let plain = session.create_pool("plain", PoolOptions::default()).expect("create");
    let error = plain.find(FindKind::Prefix, b"", Some(b"k0001"), 10).expect_err("a key is not a cursor");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    assert!(error.to_string().contains("8-byte cursor"), "{error}");

    let pool = indexed_pool(&session, "indexed");
    let error = pool.find(FindKind::Regex, b"(unclosed", None, 10).expect_err("bad regex");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    let error = pool.find(FindKind::Prefix, b"", None, 0).expect_err("limit 0");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    pool.put("k", "v").expect("the session still works");
    assert_eq!(pool.find(FindKind::Prefix, b"", None, 1).expect("find").keys, [b"k".to_vec()]);
}

/// A pool without an index is searched by walking its hash table: every kind of search works,
/// pages resume from the opaque cursor of the previous page, and every key present for the whole
/// search is returned at least once while keys are added (growing the table) and erased between
/// pages.
#[test]
fn a_pool_without_an_index_is_searched_by_walking_its_table() {
    let server = TestServer::start(&[]);
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    // Asynchronous writes: the test is about the walk, not about waiting for the disk.
    let options = PoolOptions {
        size_bytes: 64 << 20,
        expected_objects: 100,
        durability: Durability::Async,
        ..PoolOptions::default()
    };
    let pool = session.create_pool("walked", options).expect("create");
    let stable: Vec<String> = (0..2000).map(|i| format!("k{i:04}")).collect();
    for key in &stable {
        pool.put(key, b"v").expect("put");
    }
    let found = |kind, pattern: &[u8]| {
        let mut keys = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = pool.find(kind, pattern, after.as_deref(), 1024).expect("page");
            keys.extend(strings(page.keys));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        keys.sort();
        keys
    };
    assert_eq!(found(FindKind::Exact, b"k0042"), ["k0042"]);
    assert_eq!(found(FindKind::Exact, b"k9999"), Vec::<String>::new());
    assert_eq!(found(FindKind::Prefix, b"k000"), (0..10).map(|i| format!("k000{i}")).collect::<Vec<_>>());
    assert_eq!(
        found(FindKind::Glob, b"k1?00"),
        ["k1000", "k1100", "k1200", "k1300", "k1400", "k1500", "k1600", "k1700", "k1800", "k1900"]
    );
    assert_eq!(found(FindKind::Regex, b"^k0{3}[12]$"), ["k0001", "k0002"]);

    let mut seen = std::collections::BTreeSet::new();
    let mut after: Option<Vec<u8>> = None;
    let mut page_number = 0;
    loop {
        let page = pool.find(FindKind::Prefix, b"k", after.as_deref(), 50).expect("page");
        assert!(page.keys.len() <= 50 + 32, "a page passes its limit by at most one bucket");
        seen.extend(strings(page.keys));
        // Between pages: new keys the search does not match (so it still ends) grow the table,
        // and a transient key it matches comes and goes.
        for i in 0..200 {
            pool.put(format!("n{page_number:04}:{i:03}"), b"n").expect("add a key");
        }
        pool.put(format!("k{page_number:04}x"), b"t").expect("add a transient key");
        pool.erase(format!("k{page_number:04}x")).expect("erase it again");
        page_number += 1;
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let missing: Vec<&String> = stable.iter().filter(|key| !seen.contains(*key)).collect();
    assert!(missing.is_empty(), "keys present throughout but never returned: {missing:?}");
    assert!(page_number > 2000 / 82, "pages hold at most a limit and a bucket");
    // A 64 MiB pool has 143 subtables, each first made 64 buckets and held to 9/10 of that (see
    // docs/hstore.md): more pairs than 143 × 57 means the table grew during the search.
    assert!(pool.count().expect("count") > 143 * 57, "the table grew during the search");
}

/// Keys present for the whole of a paged search are returned exactly once, in order, even when
/// keys are added and erased between pages.
#[test]
fn paging_survives_concurrent_changes() {
    let server = TestServer::start(&[]);
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = indexed_pool(&session, "paged");
    let stable: Vec<String> = (0..300).map(|i| format!("k{i:04}")).collect();
    for key in &stable {
        pool.put(key, b"v").expect("put");
    }
    let mut seen = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    let mut page_number = 0;
    loop {
        let page = pool.find(FindKind::Prefix, b"k", after.as_deref(), 25).expect("page");
        seen.extend(strings(page.keys));
        // Churn between pages: transient keys come and go on both sides of the cursor.
        pool.put(format!("k{:04}x", page_number * 7), b"t").expect("add a transient key");
        pool.erase(format!("k{:04}x", page_number * 7)).expect("erase it again");
        page_number += 1;
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, stable);
}

/// A pattern that matches one key among many is answered a bounded step at a time: pages with no
/// keys but a resume point, never one long scan, and the match is still found.
#[test]
fn a_rare_match_is_found_in_bounded_steps() {
    let server = TestServer::start(&[]);
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = indexed_pool(&session, "haystack");
    let keys = 40_000;
    // Load through an async session of our own: tens of thousands of pipelined puts in one go.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let session = ferrite_client::Session::connect(&server.addr_string()).await.expect("connect");
        let loader = session.open_pool("haystack").await.expect("open");
        let mut puts = tokio::task::JoinSet::new();
        for i in 0..keys {
            let loader = loader.clone();
            puts.spawn(async move { loader.put(format!("hay{i:06}"), b"").await });
        }
        while let Some(put) = puts.join_next().await {
            put.expect("task").expect("put");
        }
    });
    pool.put("needle", b"").expect("put the needle");

    let mut calls = 0;
    let mut found = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        calls += 1;
        let page = pool.find(FindKind::Glob, b"needle", after.as_deref(), 1024).expect("page");
        found.extend(strings(page.keys));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(found, ["needle"]);
    assert!(calls >= 3, "40,001 keys need at least 3 steps of 16,384; the server answered in {calls}");
}
