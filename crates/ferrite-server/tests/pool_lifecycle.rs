//! Pools from creation to deletion: who may delete a pool and when, what happens to handles and
//! opens, routing by name, and the capacity and count limits.

mod common;
mod wire;

use common::{wait_until, TestServer, SETTLE_TIMEOUT};
use ferrite_client::{blocking, Attribute, Durability, ErrorCode, PoolOptions, PoolSetting, PutFlags};
use ferrite_proto::{shard_for_pool, CreatePoolFlags, PoolHandle, Request, Response};
use wire::RawClient;

fn connect(server: &TestServer) -> blocking::Session {
    blocking::Session::connect(&server.addr_string()).expect("connect to the test server")
}

fn options(size_bytes: u64) -> PoolOptions {
    PoolOptions { size_bytes, ..PoolOptions::default() }
}

/// A pool name that routes to `shard` of `shard_count`.
fn name_on_shard(prefix: &str, shard: u16, shard_count: u16) -> String {
    (0..1000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|name| shard_for_pool(name, shard_count) == shard)
        .expect("one of a thousand names lands on the shard")
}

/// Opening or deleting a pool that does not exist fails with `pool_not_found`, through the client
/// and on the wire, and creates nothing.
#[test]
fn unknown_pools_are_pool_not_found() {
    let server = TestServer::start(&[]);
    let session = connect(&server);
    let error = session.open_pool("ghost").expect_err("open an unknown pool");
    assert_eq!(error.code(), Some(ErrorCode::PoolNotFound), "{error}");
    assert!(error.is_pool_not_found());
    let error = session.delete_pool("ghost").expect_err("delete an unknown pool");
    assert_eq!(error.code(), Some(ErrorCode::PoolNotFound), "{error}");

    let mut raw = RawClient::handshaken(server.addr(0));
    raw.call(2, &Request::OpenPool { name: "ghost" }).expect_error(2, ErrorCode::PoolNotFound);
    raw.call(3, &Request::DeletePool { name: "ghost" }).expect_error(3, ErrorCode::PoolNotFound);
    assert!(session.list_pools().expect("list").is_empty(), "nothing was created");
}

/// `delete_pool` is refused with `pool_in_use` while another session has the pool open, and the
/// data is intact; once every open is closed the delete succeeds and the name can be created
/// again, empty.
#[test]
fn delete_waits_until_every_session_has_closed_the_pool() {
    let server = TestServer::start(&[]);
    let owner = connect(&server);
    let other = connect(&server);
    let pool = owner.create_pool("shared", options(1 << 20)).expect("create");
    pool.put("k", "precious").expect("put");

    let error = other.delete_pool("shared").expect_err("delete while another session has it open");
    assert_eq!(error.code(), Some(ErrorCode::PoolInUse), "{error}");
    let error = owner.delete_pool("shared").expect_err("delete while this very session has it open");
    assert_eq!(error.code(), Some(ErrorCode::PoolInUse), "{error}");
    assert_eq!(pool.get("k").expect("data intact after refused deletes"), b"precious");
    assert_eq!(pool.count().expect("count"), 1);

    pool.close().expect("close");
    other.delete_pool("shared").expect("delete once nobody has it open");
    assert!(other.list_pools().expect("list").is_empty());

    let again = other.create_pool("shared", options(2 << 20)).expect("create the name again");
    assert!(again.created(), "the name was free");
    assert_eq!(again.count().expect("count"), 0, "the new pool starts empty");
    assert!(again.get("k").expect_err("old data is gone").is_key_not_found());
    assert_eq!(again.attribute(Attribute::PoolSize, b"").expect("size"), 2 << 20, "the new pool has the new size");
}

/// A handle kept after its pool was closed and deleted fails with `pool_not_open`, and keeps
/// failing after a new pool of the same name exists: handles are never reused.
#[test]
fn a_handle_outlives_its_deleted_pool_only_as_pool_not_open() {
    let server = TestServer::start(&[]);
    let mut raw = RawClient::handshaken(server.addr(0));
    let old = raw.create_pool(2, "doomed", 1 << 20);
    raw.call(3, &Request::Put { pool: old, flags: PutFlags::NONE, key: b"k", value: b"v" }).expect_ok(3);
    raw.call(4, &Request::ClosePool { pool: old }).expect_ok(4);
    raw.call(5, &Request::DeletePool { name: "doomed" }).expect_ok(5);

    assert_eq!(raw.get(6, old, b"k"), Err(ErrorCode::PoolNotOpen));
    raw.call(7, &Request::Put { pool: old, flags: PutFlags::NONE, key: b"k", value: b"v" })
        .expect_error(7, ErrorCode::PoolNotOpen);
    raw.call(8, &Request::Count { pool: old }).expect_error(8, ErrorCode::PoolNotOpen);
    raw.call(9, &Request::ClosePool { pool: old }).expect_error(9, ErrorCode::PoolNotOpen);

    let new = raw.create_pool(10, "doomed", 1 << 20);
    assert_ne!(new, old, "a new pool of the same name gets a new handle");
    assert_eq!(raw.get(11, old, b"k"), Err(ErrorCode::PoolNotOpen), "the old handle does not reach the new pool");
    assert_eq!(raw.get(12, new, b"k"), Err(ErrorCode::KeyNotFound));

    // A handle some other session opened is not open in this one either.
    let mut stranger = RawClient::handshaken(server.addr(0));
    assert_eq!(stranger.get(2, new, b"k"), Err(ErrorCode::PoolNotOpen));
    assert_eq!(stranger.get(3, PoolHandle(u64::MAX), b"k"), Err(ErrorCode::PoolNotOpen));
}

/// A session that opens a pool twice holds it twice: one close leaves it in use, the second
/// frees it for deletion. A close too many fails with `pool_not_open`.
#[test]
fn a_pool_opened_twice_needs_two_closes() {
    let server = TestServer::start(&[]);
    let mut raw = RawClient::handshaken(server.addr(0));
    let handle = raw.create_pool(2, "twice", 1 << 20);
    assert_eq!(raw.open_pool(3, "twice"), handle);

    raw.call(4, &Request::ClosePool { pool: handle }).expect_ok(4);
    raw.call(5, &Request::DeletePool { name: "twice" }).expect_error(5, ErrorCode::PoolInUse);
    assert_eq!(raw.get(6, handle, b"k"), Err(ErrorCode::KeyNotFound), "still open once");

    raw.call(7, &Request::ClosePool { pool: handle }).expect_ok(7);
    raw.call(8, &Request::ClosePool { pool: handle }).expect_error(8, ErrorCode::PoolNotOpen);
    raw.call(9, &Request::DeletePool { name: "twice" }).expect_ok(9);

    // The same through the client: two `Pool`s, each closing once.
    let session = connect(&server);
    let first = session.create_pool("twice", options(1 << 20)).expect("create");
    let second = session.open_pool("twice").expect("open");
    first.close().expect("close one");
    let error = session.delete_pool("twice").expect_err("one open is left");
    assert_eq!(error.code(), Some(ErrorCode::PoolInUse), "{error}");
    second.close().expect("close the other");
    session.delete_pool("twice").expect("delete");
}

/// The opens of a session whose connection drops, with nothing closed, are released by the
/// server, so the pool can be deleted afterwards.
#[test]
fn a_dropped_connection_releases_its_opens() {
    let server = TestServer::start(&[]);
    let mut raw = RawClient::handshaken(server.addr(0));
    let handle = raw.create_pool(2, "left-open", 1 << 20);
    assert_eq!(raw.open_pool(3, "left-open"), handle);
    raw.call(4, &Request::Put { pool: handle, flags: PutFlags::NONE, key: b"k", value: b"v" }).expect_ok(4);

    let session = connect(&server);
    let error = session.delete_pool("left-open").expect_err("open twice by the raw session");
    assert_eq!(error.code(), Some(ErrorCode::PoolInUse), "{error}");

    drop(raw);
    // The server notices the hang-up on its own schedule; retry until it has.
    wait_until("the dropped connection's opens to be released", SETTLE_TIMEOUT, || {
        match session.delete_pool("left-open") {
            Ok(()) => Some(()),
            Err(error) if error.code() == Some(ErrorCode::PoolInUse) => None,
            Err(error) => panic!("unexpected error deleting: {error}"),
        }
    });
    assert!(session.list_pools().expect("list").is_empty());
}

/// `create_pool`, `open_pool` and `delete_pool` sent to a shard that does not own the name fail
/// with `wrong_shard` naming the owner, and create nothing on either shard.
#[test]
fn pool_names_sent_to_the_wrong_shard_are_refused() {
    let server = TestServer::builder().shards(2).start();
    let name = name_on_shard("elsewhere", 1, 2);
    let mut wrong = RawClient::connect(server.addr(0));
    let announced = wrong.hello();
    assert_eq!(announced.shard_index, 0);
    assert_eq!(announced.shard_addresses.len(), 2);
    assert_eq!(announced.shard_addresses[1], server.addr(1).to_string());

    let create = Request::CreatePool {
        name: &name,
        size_bytes: 1 << 20,
        expected_objects: 1,
        flags: CreatePoolFlags::NONE,
        plugins: "",
    };
    let message = wrong.call(2, &create).expect_error(2, ErrorCode::WrongShard);
    assert!(message.contains("shard 1"), "the message names the owner: {message}");
    wrong.call(3, &Request::OpenPool { name: &name }).expect_error(3, ErrorCode::WrongShard);
    wrong.call(4, &Request::DeletePool { name: &name }).expect_error(4, ErrorCode::WrongShard);
    match wrong.call(5, &Request::ListPools).expect_ok(5) {
        Response::Pools(pools) => assert!(pools.is_empty(), "nothing was created on shard 0: {pools:?}"),
        other => panic!("expected pools, got {other:?}"),
    }

    let mut right = RawClient::handshaken(server.addr(1));
    right.call(2, &Request::OpenPool { name: &name }).expect_error(2, ErrorCode::PoolNotFound);
    let handle = right.create_pool(3, &name, 1 << 20);
    right.call(4, &Request::Put { pool: handle, flags: PutFlags::NONE, key: b"k", value: b"v" }).expect_ok(4);

    // Once it exists, the wrong shard still refuses it rather than answering pool_not_found.
    wrong.call(6, &Request::OpenPool { name: &name }).expect_error(6, ErrorCode::WrongShard);
    wrong.call(7, &Request::DeletePool { name: &name }).expect_error(7, ErrorCode::WrongShard);
    assert_eq!(right.get(5, handle, b"k"), Ok(b"v".to_vec()));
}

/// A described listing (`list_pools` with its describe flag) gives each pool's settings: whether
/// it has a whole index (given at creation, or later by `configure_pool`), its default
/// durability and its plugins; asked for one pool by name it lists that pool alone, or nothing.
#[test]
fn described_listings_give_each_pools_settings() {
    let server = TestServer::start(&[]);
    let session = connect(&server);
    let tuned = PoolOptions {
        indexed: true,
        durability: Durability::Async,
        plugins: vec!["counter".to_owned()],
        ..options(1 << 20)
    };
    session.create_pool("tuned", tuned).expect("create an indexed async pool with a plugin");
    session.create_pool("plain", options(1 << 20)).expect("create a plain pool");
    let settings = |info: &ferrite_client::PoolInfo| (info.indexed, info.durability, info.plugins.clone());
    let listed: Vec<_> =
        session.list_pools().expect("list").iter().map(|info| (info.name.clone(), settings(info))).collect();
    assert_eq!(
        listed,
        [
            ("plain".to_owned(), (false, Durability::Sync, vec![])),
            ("tuned".to_owned(), (true, Durability::Async, vec!["counter".to_owned()])),
        ]
    );
    session.configure_pool("plain", PoolSetting::AddIndex).expect("add an index");
    let plain = session.pool_info("plain").expect("describe").expect("the pool exists");
    assert_eq!((plain.name.as_str(), plain.indexed), ("plain", true), "an index built later counts once whole");
    assert_eq!(session.pool_info("absent").expect("describe"), None);

    let mut raw = RawClient::handshaken(server.addr(0));
    match raw.call(2, &Request::DescribePools { name: Some("tuned") }).expect_ok(2) {
        Response::PoolDescriptions(pools) => {
            let names: Vec<&str> = pools.iter().map(|pool| pool.info.name).collect();
            assert_eq!(names, ["tuned"], "one pool asked for, one listed");
        }
        other => panic!("expected pool descriptions, got {other:?}"),
    }
    match raw.call(3, &Request::DescribePools { name: Some("absent") }).expect_ok(3) {
        Response::PoolDescriptions(pools) => assert!(pools.is_empty(), "{pools:?}"),
        other => panic!("expected pool descriptions, got {other:?}"),
    }
}

/// A put that would exceed the pool's capacity fails with `pool_full` and leaves the pool exactly
/// as it was (pairs, values, bytes used); shrinking a value or erasing makes room again.
#[test]
fn a_full_pool_refuses_puts_and_stays_unchanged() {
    let server = TestServer::start(&[]);
    let session = connect(&server);
    // Room for exactly two pairs of a 1-byte key and a 100-byte value.
    let size = 2 * (1 + 100 + 64);
    let pool = session.create_pool("tiny", options(size)).expect("create");
    pool.put("a", [b'a'; 100]).expect("first pair fits");
    pool.put("b", [b'b'; 100]).expect("second pair fits exactly");
    assert_eq!(pool.attribute(Attribute::PoolUsed, b"").expect("used"), size);

    let error = pool.put("c", b"").expect_err("a third pair does not fit");
    assert_eq!(error.code(), Some(ErrorCode::PoolFull), "{error}");
    let error = pool.put("a", [b'A'; 101]).expect_err("growing a value does not fit");
    assert_eq!(error.code(), Some(ErrorCode::PoolFull), "{error}");

    assert_eq!(pool.count().expect("count"), 2);
    assert_eq!(pool.get("a").expect("get"), [b'a'; 100], "the refused overwrite kept the old value");
    assert!(pool.get("c").expect_err("c was not stored").is_key_not_found());
    assert_eq!(pool.attribute(Attribute::PoolUsed, b"").expect("used"), size, "no bytes were charged");

    pool.put("a", [b'A'; 50]).expect("shrinking always fits, even in a full pool");
    assert_eq!(pool.attribute(Attribute::PoolUsed, b"").expect("used"), size - 50);
    pool.put("a", [b'A'; 100]).expect("the freed bytes are usable");
    pool.erase("b").expect("erase");
    pool.put("c", [b'c'; 100]).expect("erasing frees room");
    assert_eq!(pool.count().expect("count"), 2);
    assert_eq!(pool.attribute(Attribute::PoolUsed, b"").expect("used"), size);
}

/// A shard configured with `pools_per_shard_max = 2` refuses a third pool with `too_many_pools`,
/// still opens its existing pools through `create_pool`, and accepts a new one after a delete.
#[test]
fn a_shard_at_its_pool_limit_refuses_new_pools() {
    let server = TestServer::builder().config("pools_per_shard_max", 2).start();
    let session = connect(&server);
    session.create_pool("one", options(1 << 20)).expect("first pool").close().expect("close");
    session.create_pool("two", options(1 << 20)).expect("second pool").close().expect("close");

    let error = session.create_pool("three", options(1 << 20)).expect_err("a third pool");
    assert_eq!(error.code(), Some(ErrorCode::TooManyPools), "{error}");
    let reopened = session.create_pool("two", options(1 << 20)).expect("create_pool of an existing pool opens it");
    assert!(!reopened.created());
    reopened.close().expect("close");
    assert_eq!(session.list_pools().expect("list").len(), 2, "the refused pool does not exist");

    session.delete_pool("one").expect("delete");
    assert!(session.create_pool("three", options(1 << 20)).expect("room again").created());
}
