//! Many clients at once, and many requests in flight on one connection.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier};

use common::TestServer;
use ferrite_client::{blocking, ErrorCode, PoolOptions, PutFlags, Session};
use tokio::task::JoinSet;

const CLIENTS: usize = 100;
const OPERATIONS_PER_CLIENT: usize = 300;
/// Every client uses the same few key names in its own pool, so a request routed to the wrong
/// pool or a reply delivered to the wrong caller shows up as a foreign value.
const KEYS: usize = 8;

/// xorshift64: a deterministic stream of choices per client, so a failure replays exactly.
struct Choices(u64);

impl Choices {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Runs one client's workload against its own pool and checks every read against a model of
/// its own writes. Returns the pool's final pair count.
fn client_workload(address: &str, client: usize, start: &Barrier) -> u64 {
    let session = blocking::Session::connect(address).expect("connect");
    let name = format!("client-{client}");
    let pool = session
        .create_pool(&name, PoolOptions { size_bytes: 1 << 20, ..PoolOptions::default() })
        .expect("create the client's pool");
    assert!(pool.created(), "{name} is this client's own pool");
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut choices = Choices(client as u64 + 1);
    start.wait();

    for op in 0..OPERATIONS_PER_CLIENT {
        let key = format!("key-{}", choices.next() % KEYS as u64);
        // Lengths vary so that a value cut or glued to a neighbour's would not match.
        let value = format!("client {client} op {op} {}", "x".repeat((choices.next() % 64) as usize)).into_bytes();
        match choices.next() % 5 {
            0 | 1 => {
                pool.put(&key, &value).expect("put");
                model.insert(key, value);
            }
            2 => {
                let result = pool.put_with(&key, &value, PutFlags::UPDATE_ONLY);
                match model.get_mut(&key) {
                    Some(current) => {
                        result.expect("update-only put of a key this client wrote");
                        *current = value;
                    }
                    None => {
                        let error = result.expect_err("update-only put of a key this client never wrote");
                        assert_eq!(error.code(), Some(ErrorCode::KeyNotFound), "{name}/{key}: {error}");
                    }
                }
            }
            3 => {
                let result = pool.erase(&key);
                if model.remove(&key).is_some() {
                    result.expect("erase of a key this client wrote");
                } else {
                    let error = result.expect_err("erase of an absent key");
                    assert_eq!(error.code(), Some(ErrorCode::KeyNotFound), "{name}/{key}: {error}");
                }
            }
            _ => match (pool.get(&key), model.get(&key)) {
                (Ok(got), Some(expected)) => assert!(
                    &got == expected,
                    "{name}/{key}: read {:?}, but this client last wrote {:?}",
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(expected)
                ),
                (Err(error), None) => assert!(error.is_key_not_found(), "{name}/{key}: {error}"),
                (got, expected) => panic!("{name}/{key}: read {got:?}, expected {expected:?}"),
            },
        }
    }
    for key in (0..KEYS).map(|k| format!("key-{k}")) {
        match model.get(&key) {
            Some(expected) => assert_eq!(&pool.get(&key).expect("final get"), expected, "{name}/{key}"),
            None => assert!(pool.get(&key).expect_err("absent at the end").is_key_not_found(), "{name}/{key}"),
        }
    }
    let count = pool.count().expect("count");
    assert_eq!(count, model.len() as u64, "{name}: the pool holds exactly this client's pairs");
    pool.close().expect("close");
    count
}

/// 100 clients, each with its own session and pool (spread over both shards of a two-shard
/// server), run a few hundred puts, update-only puts, erases and gets at the same time on the same
/// key names. Every value a client reads is its own latest write, and afterwards each pool holds
/// exactly its client's pairs.
#[test]
fn a_hundred_concurrent_clients_see_only_their_own_writes() {
    let server = TestServer::builder().shards(2).start();
    let address = server.addr_string();
    let shards: BTreeSet<u16> =
        (0..CLIENTS).map(|c| ferrite_proto::shard_for_pool(&format!("client-{c}"), 2)).collect();
    assert_eq!(shards.len(), 2, "the pool names put pools on both shards");

    let start = Arc::new(Barrier::new(CLIENTS));
    let threads: Vec<_> = (0..CLIENTS)
        .map(|client| {
            let address = address.clone();
            let start = Arc::clone(&start);
            std::thread::Builder::new()
                .name(format!("client-{client}"))
                .spawn(move || client_workload(&address, client, &start))
                .expect("spawn a client thread")
        })
        .collect();
    let counts: Vec<u64> =
        threads.into_iter().map(|t| t.join().expect("a client thread failed; see its panic")).collect();

    let session = blocking::Session::connect(&address).expect("connect");
    let pools = session.list_pools().expect("list");
    assert_eq!(pools.len(), CLIENTS);
    for (client, count) in counts.iter().enumerate() {
        let name = format!("client-{client}");
        let info = pools.iter().find(|p| p.name == name).unwrap_or_else(|| panic!("{name} is not listed"));
        assert_eq!(info.objects, *count, "{name}");
        assert_eq!(info.open_count, 0, "{name} was closed");
    }
    let stats = session.statistics().expect("statistics");
    assert_eq!(stats.iter().map(|s| s.get("pools").expect("pools")).sum::<u64>(), CLIENTS as u64);
    assert!(stats.iter().all(|s| s.get("pools") > Some(0)), "both shards hold pools: {stats:?}");
}

/// 10,000 puts are all issued on one connection before any reply is awaited, then 10,000 gets the
/// same way: every request succeeds and every value comes back to the request that asked for it.
#[tokio::test]
async fn ten_thousand_pipelined_requests_on_one_connection() {
    const REQUESTS: usize = 10_000;
    let server = TestServer::start(&[]);
    let session = Session::connect(&server.addr_string()).await.expect("connect");
    let pool = session.create_pool("pipelined", PoolOptions::default()).await.expect("create");
    let value_of = |i: usize| format!("value {i} {}", "v".repeat(i % 97)).into_bytes();

    // On this current-thread runtime the spawned tasks first run when we wait on the set, all in
    // one pass, so all 10,000 requests are queued before the first reply can be read.
    let mut puts = JoinSet::new();
    for i in 0..REQUESTS {
        let pool = pool.clone();
        let value = value_of(i);
        puts.spawn(async move { pool.put(format!("key {i}"), value).await.map(|()| i) });
    }
    let mut stored = 0;
    while let Some(result) = puts.join_next().await {
        result.expect("put task").expect("pipelined put");
        stored += 1;
    }
    assert_eq!(stored, REQUESTS);

    let mut gets = JoinSet::new();
    for i in 0..REQUESTS {
        let pool = pool.clone();
        gets.spawn(async move { (i, pool.get(format!("key {i}")).await) });
    }
    let mut seen = vec![false; REQUESTS];
    while let Some(result) = gets.join_next().await {
        let (i, value) = result.expect("get task");
        assert!(value.expect("pipelined get") == value_of(i), "key {i} got another request's value");
        seen[i] = true;
    }
    assert!(seen.iter().all(|s| *s));
    assert_eq!(pool.count().await.expect("count"), REQUESTS as u64);

    let stats = session.statistics().await.expect("statistics");
    assert_eq!(stats[0].get("puts"), Some(REQUESTS as u64));
    assert_eq!(stats[0].get("gets"), Some(REQUESTS as u64));
    assert_eq!(stats[0].get("failures"), Some(0));
    assert_eq!(stats[0].get("clients_total"), Some(1), "all of it went over one connection");
}
