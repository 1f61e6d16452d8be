//! The protocol's limits at their edges: keys, values, frames, configured limits and the
//! connection cap. Each is checked on both sides: the client refuses locally what the server
//! would refuse, and the server refuses it when a raw client sends it anyway.

mod common;
mod wire;

use common::{crc32, wait_until, TestServer, SETTLE_TIMEOUT};
use ferrite_client::{blocking, ErrorCode, PoolOptions};
use ferrite_proto::{PutFlags, Request, Response, FRAME_BODY_BYTES_MAX, KEY_BYTES_MAX, VALUE_INLINE_BYTES_MAX};
use wire::{counter, frame, header, RawClient};

const PUT: u16 = 0x0020;
const GET: u16 = 0x0021;

fn connect(server: &TestServer) -> blocking::Session {
    blocking::Session::connect(&server.addr_string()).expect("connect to the test server")
}

fn options() -> PoolOptions {
    PoolOptions { size_bytes: 64 << 20, ..PoolOptions::default() }
}

/// A put body by hand, with lengths that may disagree with the bytes that follow.
fn put_body(pool: u64, key_len: u32, value_len: u32, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut body = pool.to_le_bytes().to_vec();
    body.extend_from_slice(&key_len.to_le_bytes());
    body.extend_from_slice(&value_len.to_le_bytes());
    body.extend_from_slice(key);
    body.extend_from_slice(value);
    body
}

/// A key of 65,537 bytes is refused by the client before sending (the server never sees it) and
/// by the server when sent raw, with `key_too_large` both times; the connection stays usable.
#[test]
fn a_key_over_the_limit_is_key_too_large() {
    let server = TestServer::start(&[]);
    let session = connect(&server);
    let pool = session.create_pool("keys", options()).expect("create");
    let key = vec![b'k'; KEY_BYTES_MAX + 1];
    for error in [
        pool.put(&key, "v").expect_err("put"),
        pool.get(&key).expect_err("get"),
        pool.erase(&key).expect_err("erase"),
        pool.attribute(ferrite_client::Attribute::ValueLength, &key).expect_err("get_attribute"),
    ] {
        assert_eq!(error.code(), Some(ErrorCode::KeyTooLarge), "{error}");
    }
    let stats = session.statistics().expect("statistics");
    assert_eq!(stats[0].get("failures"), Some(0), "the client refused locally; nothing reached the server");

    let mut raw = RawClient::handshaken(server.addr(0));
    let handle = raw.create_pool(2, "keys", 64 << 20);
    raw.send_bytes(&frame(PUT, 0, 3, &put_body(handle.0, key.len() as u32, 1, &key, b"v")));
    raw.read_frame().expect_error(3, ErrorCode::KeyTooLarge);
    let mut get = handle.0.to_le_bytes().to_vec();
    get.extend_from_slice(&(key.len() as u32).to_le_bytes());
    get.extend_from_slice(&key);
    raw.send_bytes(&frame(GET, 0, 4, &get));
    raw.read_frame().expect_error(4, ErrorCode::KeyTooLarge);
    // The length alone decides, even when the key bytes never follow.
    raw.send_bytes(&frame(PUT, 0, 5, &put_body(handle.0, u32::MAX, 0, b"", b"")));
    raw.read_frame().expect_error(5, ErrorCode::KeyTooLarge);
    assert_eq!(raw.get(6, handle, b"k"), Err(ErrorCode::KeyNotFound), "the connection is still usable");
    assert_eq!(pool.count().expect("count"), 0, "nothing was stored");
}

/// A value of 2 MiB + 1 bytes is `value_too_large` in an inline put sent raw (the frame itself is
/// within the frame limit); the client sends it as a direct put instead, and an inline get of it
/// is refused with a message that names the direct read, which the client then uses.
#[test]
fn a_value_over_the_limit_is_value_too_large() {
    let server = TestServer::start(&[]);
    let session = connect(&server);
    let pool = session.create_pool("values", options()).expect("create");
    let value = vec![b'v'; VALUE_INLINE_BYTES_MAX + 1];
    pool.put("direct", &value).expect("a put past the inline limit goes direct");
    assert!(pool.get("direct").expect("read directly") == value);

    let mut raw = RawClient::handshaken(server.addr(0));
    let handle = raw.create_pool(2, "values", 64 << 20);
    let body = put_body(handle.0, 1, value.len() as u32, b"k", &value);
    assert!(body.len() <= FRAME_BODY_BYTES_MAX, "the frame is legal; only the value is too large");
    raw.send_bytes(&frame(PUT, 0, 3, &body));
    raw.read_frame().expect_error(3, ErrorCode::ValueTooLarge);
    assert_eq!(raw.get(4, handle, b"k"), Err(ErrorCode::KeyNotFound), "nothing stored, connection usable");
    assert_eq!(raw.get(5, handle, b"direct"), Err(ErrorCode::ValueTooLarge), "too long to come inline");
}

/// A key of exactly 65,536 bytes with a value of exactly 2,097,152 bytes is accepted and comes
/// back byte for byte, with matching length and CRC-32 attributes.
#[test]
fn a_key_and_value_exactly_at_the_limits_round_trip() {
    let server = TestServer::start(&[]);
    let session = connect(&server);
    let pool = session.create_pool("edge", options()).expect("create");
    let key: Vec<u8> = (0..KEY_BYTES_MAX).map(|i| (i % 251) as u8).collect();
    let value: Vec<u8> = (0..VALUE_INLINE_BYTES_MAX).map(|i| (i % 253) as u8).collect();
    pool.put(&key, &value).expect("a maximal pair is accepted");
    assert!(pool.get(&key).expect("get") == value, "the maximal value round-trips");
    let attributes = pool.value_attributes(&key).expect("attributes");
    assert_eq!(attributes.length, VALUE_INLINE_BYTES_MAX as u64);
    assert_eq!(attributes.crc32, crc32(&value));

    // And raw: the largest put the protocol allows is answered, not rejected as a frame.
    let mut raw = RawClient::handshaken(server.addr(0));
    let handle = raw.open_pool(2, "edge");
    raw.call(3, &Request::Put { pool: handle, flags: PutFlags::NONE, key: &key, value: b"small" }).expect_ok(3);
    assert_eq!(raw.get(4, handle, &key), Ok(b"small".to_vec()));
}

/// A header announcing a 100 MB body is answered with `frame_too_large` at once, before any of
/// the body arrives; the server then skips exactly that many bytes, and the same connection
/// answers the next request. A body one byte over the limit is refused the same way; one exactly
/// at the limit is parsed (and here found malformed, since its fields do not fill it).
#[test]
fn an_oversized_frame_is_refused_skipped_and_the_connection_survives() {
    let server = TestServer::start(&[]);
    let mut raw = RawClient::handshaken(server.addr(0));
    let handle = raw.create_pool(2, "frames", 1 << 20);
    raw.call(3, &Request::Put { pool: handle, flags: PutFlags::NONE, key: b"k", value: b"before" }).expect_ok(3);

    const HUGE: usize = 100 * 1024 * 1024;
    raw.send_bytes(&header(PUT, 0, 4, HUGE as u32));
    raw.read_frame().expect_error(4, ErrorCode::FrameTooLarge);
    // The body the header announced, in chunks; it looks like frames but must all be skipped.
    let lookalike = frame(PUT, 0, 666, &put_body(handle.0, 1, 5, b"k", b"after"));
    let chunk: Vec<u8> = lookalike.iter().copied().cycle().take(1024 * 1024).collect();
    for _ in 0..HUGE / chunk.len() {
        raw.send_bytes(&chunk);
    }
    assert_eq!(raw.get(5, handle, b"k"), Ok(b"before".to_vec()), "the skipped body was not executed");

    raw.send_bytes(&header(GET, 0, 6, (FRAME_BODY_BYTES_MAX + 1) as u32));
    raw.read_frame().expect_error(6, ErrorCode::FrameTooLarge);
    raw.send_bytes(&vec![0u8; FRAME_BODY_BYTES_MAX + 1]);
    assert_eq!(raw.get(7, handle, b"k"), Ok(b"before".to_vec()));

    let mut at_limit = put_body(handle.0, 1, 1, b"k", b"x");
    at_limit.resize(FRAME_BODY_BYTES_MAX, 0);
    raw.send_bytes(&frame(PUT, 0, 8, &at_limit));
    raw.read_frame().expect_error(8, ErrorCode::MalformedFrame);
    assert_eq!(raw.get(9, handle, b"k"), Ok(b"before".to_vec()));

    let stats = raw.statistics(10);
    assert_eq!(counter(&stats, "failures"), 3);
    assert_eq!(counter(&stats, "puts"), 1);
}

/// A server configured with `key_bytes_max = 16` announces it in the hello reply, the client
/// adopts it and refuses a 17-byte key locally, and the server refuses one sent raw; 16 bytes work.
#[test]
fn a_configured_key_limit_is_announced_and_enforced() {
    let server = TestServer::builder().config("key_bytes_max", 16).start();
    let mut raw = RawClient::connect(server.addr(0));
    let announced = raw.hello();
    assert_eq!(announced.key_bytes_max, 16);
    assert_eq!(announced.value_bytes_max, VALUE_INLINE_BYTES_MAX as u32, "the value limit is the default");

    let session = connect(&server);
    assert_eq!(session.limits().key_bytes_max, 16);
    let pool = session.create_pool("short-keys", options()).expect("create");
    pool.put([b'k'; 16], "v").expect("a 16-byte key is allowed");
    let error = pool.put([b'k'; 17], "v").expect_err("a 17-byte key");
    assert_eq!(error.code(), Some(ErrorCode::KeyTooLarge), "{error}");

    let handle = raw.open_pool(2, "short-keys");
    raw.call(3, &Request::Put { pool: handle, flags: PutFlags::NONE, key: &[b'k'; 17], value: b"v" })
        .expect_error(3, ErrorCode::KeyTooLarge);
    raw.call(4, &Request::Get { pool: handle, key: &[b'k'; 17] }).expect_error(4, ErrorCode::KeyTooLarge);
    assert_eq!(raw.get(5, handle, &[b'k'; 16]), Ok(b"v".to_vec()));
    assert_eq!(pool.count().expect("count"), 1);
}

/// With `connections_per_shard_max = 3`, a fourth connection receives one `too_many_connections`
/// error frame with request id 0 (whether or not it said hello) and is closed, while the first
/// three keep working; the client reports the same code. Once one of the three disconnects, a new
/// connection is accepted.
#[test]
fn connections_beyond_the_limit_are_refused_and_the_others_keep_working() {
    let server = TestServer::builder().config("connections_per_shard_max", 3).start();
    let mut admitted: Vec<RawClient> = (0..3).map(|_| RawClient::handshaken(server.addr(0))).collect();
    let handle = admitted[0].create_pool(2, "capped", 1 << 20);
    admitted[0].call(3, &Request::Put { pool: handle, flags: PutFlags::NONE, key: b"k", value: b"v" }).expect_ok(3);

    let mut silent = RawClient::connect(server.addr(0));
    silent.read_frame().expect_error(0, ErrorCode::TooManyConnections);
    silent.expect_closed();

    let mut polite = RawClient::connect(server.addr(0));
    // The hello may meet a socket the server already shut; the error frame is what matters.
    let _ = polite.try_send_bytes(&wire::encode(
        1,
        &Request::Hello { version: ferrite_proto::PROTOCOL_VERSION, client_name: "fourth", auth: b"" },
    ));
    polite.read_frame().expect_error(0, ErrorCode::TooManyConnections);
    polite.expect_closed();

    let error = blocking::Session::connect(&server.addr_string()).expect_err("the client meets the same limit");
    assert_eq!(error.code(), Some(ErrorCode::TooManyConnections), "{error}");

    for (i, client) in admitted.iter_mut().enumerate() {
        let id = 10 + i as u64;
        match client.call(id, &Request::ListPools).expect_ok(id) {
            Response::Pools(pools) => assert_eq!(pools.len(), 1),
            other => panic!("expected pools, got {other:?}"),
        }
    }
    assert_eq!(admitted[0].get(20, handle, b"k"), Ok(b"v".to_vec()));
    let stats = admitted[1].statistics(21);
    assert_eq!(counter(&stats, "clients"), 3);
    assert_eq!(counter(&stats, "clients_total"), 3, "refused connections were never clients");

    admitted.pop();
    // The server frees the slot when it notices the hang-up; until then it may still refuse.
    let mut newcomer = wait_until("a freed connection slot", SETTLE_TIMEOUT, || {
        let mut client = RawClient::connect(server.addr(0));
        client.send_bytes(&wire::frame(
            0x0001,
            0,
            1,
            &wire::hello_body(b"FRRT", ferrite_proto::PROTOCOL_VERSION, "newcomer"),
        ));
        let reply = client.read_frame();
        match reply.error_code() {
            None => Some(client),
            Some(ErrorCode::TooManyConnections) => None,
            Some(other) => panic!("unexpected error {other}"),
        }
    });
    assert_eq!(newcomer.open_pool(2, "capped"), handle);
    assert_eq!(newcomer.get(3, handle, b"k"), Ok(b"v".to_vec()));
}

/// Pool names of 1 to 255 bytes are accepted; an empty one or one of 256 bytes is
/// `invalid_argument`, from the client locally and from the server when sent raw.
#[test]
fn pool_names_are_one_to_255_bytes() {
    let server = TestServer::start(&[]);
    let session = connect(&server);
    let longest = "n".repeat(255);
    assert!(session.create_pool(&longest, options()).expect("255 bytes").created());
    assert!(session.create_pool("x", options()).expect("1 byte").created());
    let too_long = "n".repeat(256);
    for name in ["", too_long.as_str()] {
        let error = session.create_pool(name, options()).expect_err("a bad name");
        assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{} bytes: {error}", name.len());
        let error = session.open_pool(name).expect_err("a bad name");
        assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{} bytes: {error}", name.len());
    }

    let mut raw = RawClient::handshaken(server.addr(0));
    let create = |name: &str| {
        let mut body = (name.len() as u16).to_le_bytes().to_vec();
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(&1024u64.to_le_bytes());
        body.extend_from_slice(&1u64.to_le_bytes());
        body
    };
    raw.send_bytes(&frame(0x0010, 0, 2, &create(&too_long)));
    raw.read_frame().expect_error(2, ErrorCode::InvalidArgument);
    raw.send_bytes(&frame(0x0010, 0, 3, &create("")));
    raw.read_frame().expect_error(3, ErrorCode::InvalidArgument);
    assert_eq!(session.list_pools().expect("list").len(), 2, "only the valid names exist");
}

/// A shard configured for the largest pool count the protocol allows (4,096) holds that many
/// pools with 255-byte names, lists them all in one `list_pools` reply, and refuses one more
/// with `too_many_pools`.
#[test]
fn the_largest_pool_count_lists_in_one_frame() {
    const POOLS: usize = ferrite_proto::POOLS_PER_SHARD_MAX;
    let server = TestServer::builder().config("pools_per_shard_max", POOLS).start();
    let name = |i: usize| format!("{i:04}-{}", "p".repeat(250));
    let mut raw = RawClient::handshaken(server.addr(0));
    let batch: Vec<u8> = (0..POOLS)
        .flat_map(|i| {
            let name = name(i);
            let request = Request::CreatePool {
                name: &name,
                size_bytes: 1024,
                expected_objects: 1,
                flags: ferrite_proto::CreatePoolFlags::NONE,
                plugins: "",
            };
            wire::encode(10 + i as u64, &request)
        })
        .collect();
    let sender = raw.send_in_background(batch);
    for i in 0..POOLS {
        let reply = raw.read_frame();
        assert!(reply.error_code().is_none(), "pool {i}: {reply:?}");
    }
    sender.join().expect("the batch was sent");

    let listed = raw.call(2, &Request::ListPools);
    assert!(listed.body.len() <= FRAME_BODY_BYTES_MAX);
    match listed.expect_ok(2) {
        Response::Pools(pools) => {
            assert_eq!(pools.len(), POOLS);
            assert!(pools.iter().all(|p| p.name.len() == 255 && p.open_count == 1));
        }
        other => panic!("expected pools, got {other:?}"),
    }
    assert_eq!(connect(&server).list_pools().expect("the client reads the largest listing").len(), POOLS);
    let error = connect(&server).create_pool("one-too-many", options()).expect_err("a shard full of pools");
    assert_eq!(error.code(), Some(ErrorCode::TooManyPools), "{error}");
}

/// Pools that can hold at most one pair (capacity 64 bytes: an empty key and value) but claim to
/// expect billions of objects must not make the server build an index for them: the up-front index
/// is bounded by what the pool can hold (`size_bytes / 64` pairs). Before that bound, each such
/// pool made the shard touch about 2 MB, so forty of them grew the server by about 80 MB. Measured
/// as the growth of resident memory (Linux `/proc`; skipped elsewhere): address space alone moves in
/// 64 MiB steps whenever the allocator opens an arena, so it cannot tell.
#[test]
fn a_tiny_pool_does_not_reserve_a_huge_index() {
    let server = TestServer::start(&[]);
    let status = format!("/proc/{}/status", server.pid());
    let resident_kib = || -> Option<u64> {
        let text = std::fs::read_to_string(&status).ok()?;
        let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let session = connect(&server);
    // Warm up the connection and the shard's allocations before the baseline.
    session.create_pool("warm-up", PoolOptions::default()).expect("create").close().expect("close");
    let Some(before) = resident_kib() else {
        eprintln!("no /proc on this machine; skipping");
        return;
    };
    for i in 0..40 {
        let options =
            PoolOptions { size_bytes: 64, expected_objects: u64::MAX, create_only: true, ..PoolOptions::default() };
        session.create_pool(&format!("tiny-{i}"), options).expect("create").close().expect("close");
    }
    let after = resident_kib().expect("the server is still running");
    let grown_mib = after.saturating_sub(before) / 1024;
    assert!(
        grown_mib < 16,
        "forty pools of at most one pair each grew the server's resident memory by {grown_mib} MiB"
    );
}

/// A pool larger than `limits.pool_bytes_max` is refused with `invalid_argument` before the
/// server reserves anything for it, with either engine; a pool at the limit is created.
#[test]
fn pools_over_the_size_limit_are_refused() {
    for (store, backing) in [("mapstore", "memory"), ("hstore", "memory"), ("hstore", "ssd")] {
        let server = TestServer::builder()
            .config("pool_bytes_max", 1 << 20)
            .config("store", format!("\"{store}\""))
            .config("backing", format!("\"{backing}\""))
            .start();
        let session = connect(&server);
        let too_big = PoolOptions { size_bytes: (1 << 20) + 1, ..PoolOptions::default() };
        let error = session.create_pool("huge", too_big).expect_err("over the limit");
        assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{store}: {error}");
        assert!(error.to_string().contains("pool_bytes_max"), "{store}: {error}");
        let at_limit = PoolOptions { size_bytes: 1 << 20, ..PoolOptions::default() };
        let pool = session.create_pool("fits", at_limit).expect("at the limit");
        pool.put("k", "v").expect("put");
        assert_eq!(pool.get("k").expect("get"), b"v");
    }
}
