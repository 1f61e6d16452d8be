//! The wire protocol spoken with hand-written bytes (after mini-redis's `tests/server.rs`):
//! exact frames, the handshake rules, malformed input, pipelining, and hostile clients that must
//! not disturb well-behaved ones.

mod common;
mod wire;

use std::net::Shutdown;

use common::{wait_until, TestServer, SETTLE_TIMEOUT};
use ferrite_client::{blocking, PoolOptions};
use ferrite_proto::{ErrorCode, PoolHandle, PutFlags, Request, Response};
use wire::{counter, frame, header, hello_body, RawClient, ERROR_OPCODE};

const HELLO: u16 = 0x0001;
const CREATE_POOL: u16 = 0x0010;
const PUT: u16 = 0x0020;
const GET: u16 = 0x0021;
const COUNT: u16 = 0x0023;
const GET_ATTRIBUTE: u16 = 0x0024;

/// `u64` pool handle followed by a `u32`-length key: the body of `get`, `erase` and friends.
fn pool_key_body(pool: PoolHandle, key: &[u8]) -> Vec<u8> {
    let mut body = pool.0.to_le_bytes().to_vec();
    body.extend_from_slice(&(key.len() as u32).to_le_bytes());
    body.extend_from_slice(key);
    body
}

fn put_frame(request_id: u64, pool: PoolHandle, key: &[u8], value: &[u8]) -> Vec<u8> {
    let mut body = pool.0.to_le_bytes().to_vec();
    body.extend_from_slice(&(key.len() as u32).to_le_bytes());
    body.extend_from_slice(&(value.len() as u32).to_le_bytes());
    body.extend_from_slice(key);
    body.extend_from_slice(value);
    frame(PUT, 0, request_id, &body)
}

/// A hello written out byte for byte is answered with the reply layout docs/protocol.md gives:
/// opcode 0x8001, the request id echoed, version, shard index and count, limits, and the shard's
/// address.
#[test]
fn a_hand_written_hello_gets_the_documented_reply() {
    let server = TestServer::start(&[]);
    let mut raw = RawClient::connect(server.addr(0));
    #[rustfmt::skip]
    let hello: &[u8] = &[
        13, 0, 0, 0,                // body_len
        0x01, 0x00,                 // opcode: hello
        0x00, 0x00,                 // flags
        0x2A, 0, 0, 0, 0, 0, 0, 0,  // request id 42
        b'F', b'R', b'R', b'T',     // magic
        3, 0,                       // version 3
        3, 0, b'r', b'a', b'w',     // client name "raw"
        0, 0,                       // empty auth
    ];
    raw.send_bytes(hello);
    let reply = raw.read_frame();
    let address = server.addr(0).to_string();
    let mut expected_body = vec![3, 0, 0, 0, 1, 0];
    expected_body.extend_from_slice(&65_536u32.to_le_bytes());
    expected_body.extend_from_slice(&2_097_152u32.to_le_bytes());
    expected_body.extend_from_slice(&(address.len() as u16).to_le_bytes());
    expected_body.extend_from_slice(address.as_bytes());
    assert_eq!(reply.header.opcode, 0x8001);
    assert_eq!(reply.header.flags, 0);
    assert_eq!(reply.header.request_id, 42);
    assert_eq!(reply.body, expected_body);

    // A count of an unopened handle: an error frame is code (u16) then a str16 message.
    raw.send_bytes(&[8, 0, 0, 0, 0x23, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
    let error = raw.read_frame();
    assert_eq!((error.header.opcode, error.header.request_id), (ERROR_OPCODE, 7));
    assert_eq!(error.body[..2], [11, 0], "pool_not_open is code 11");
    let message_len = usize::from(u16::from_le_bytes([error.body[2], error.body[3]]));
    assert_eq!(error.body.len(), 4 + message_len, "the body is exactly code and message");
}

/// Bytes that are not a Ferrite frame, sent before any hello, get one error frame and the
/// connection is closed: an HTTP request (whose first bytes read as a 500 MB body length) and
/// 16 bytes of noise with a small length and no known opcode.
#[test]
fn garbage_before_hello_is_answered_with_an_error_and_closed() {
    let server = TestServer::start(&[]);

    let mut http = RawClient::connect(server.addr(0));
    http.send_bytes(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let reply = http.read_frame();
    assert_eq!(reply.header.opcode, ERROR_OPCODE);
    assert_eq!(reply.error_code(), Some(ErrorCode::FrameTooLarge), "{reply:?}");
    http.expect_closed();

    let mut noise = RawClient::connect(server.addr(0));
    let mut bytes = vec![4, 0, 0, 0, 0x42, 0x42, 0, 0, 0xEF, 0xBE, 0xAD, 0xDE, 0, 0, 0, 0];
    bytes.extend_from_slice(b"junk");
    noise.send_bytes(&bytes);
    noise.read_frame().expect_error(0xDEAD_BEEF, ErrorCode::UnknownOpcode);
    noise.expect_closed();

    // Garbage in the hello's own fields is malformed_frame, and closes too.
    let mut bad_utf8 = RawClient::connect(server.addr(0));
    let mut body = hello_body(b"FRRT", ferrite_proto::PROTOCOL_VERSION, "");
    body.truncate(6);
    body.extend_from_slice(&[2, 0, 0xC3, 0x28, 0, 0]);
    bad_utf8.send_bytes(&frame(HELLO, 0, 5, &body));
    bad_utf8.read_frame().expect_error(5, ErrorCode::MalformedFrame);
    bad_utf8.expect_closed();

    assert!(RawClient::handshaken(server.addr(0)).statistics(2).len() > 1, "the server still serves");
}

/// A request before hello is answered with `handshake_required`, carrying the request's id, and
/// the connection is closed.
#[test]
fn a_request_before_hello_is_handshake_required_and_closed() {
    let server = TestServer::start(&[]);
    let mut raw = RawClient::connect(server.addr(0));
    raw.send_bytes(&frame(COUNT, 0, 77, &1u64.to_le_bytes()));
    raw.read_frame().expect_error(77, ErrorCode::HandshakeRequired);
    raw.expect_closed();

    let mut raw = RawClient::connect(server.addr(0));
    raw.send(9, &Request::GetStatistics);
    raw.read_frame().expect_error(9, ErrorCode::HandshakeRequired);
    raw.expect_closed();
}

/// A hello for another protocol version is `unsupported_version`; one with the wrong magic is
/// `malformed_frame`; one with unknown flags is `invalid_argument`. Each closes the connection.
#[test]
fn a_bad_hello_is_refused_and_closed() {
    let server = TestServer::start(&[]);
    for (request_id, hello, code) in [
        (
            3,
            frame(HELLO, 0, 3, &hello_body(b"FRRT", ferrite_proto::PROTOCOL_VERSION + 1, "future")),
            ErrorCode::UnsupportedVersion,
        ),
        (
            4,
            frame(HELLO, 0, 4, &hello_body(b"FRRT", ferrite_proto::PROTOCOL_VERSION - 1, "past")),
            ErrorCode::UnsupportedVersion,
        ),
        (
            5,
            frame(HELLO, 0, 5, &hello_body(b"RESP", ferrite_proto::PROTOCOL_VERSION, "stranger")),
            ErrorCode::MalformedFrame,
        ),
        (
            6,
            frame(HELLO, 0x0100, 6, &hello_body(b"FRRT", ferrite_proto::PROTOCOL_VERSION, "flagged")),
            ErrorCode::InvalidArgument,
        ),
    ] {
        let mut raw = RawClient::connect(server.addr(0));
        raw.send_bytes(&hello);
        raw.read_frame().expect_error(request_id, code);
        raw.expect_closed();
    }
}

/// After hello, an unknown opcode (including response and error opcodes sent as requests) is
/// `unknown_opcode` with the request's id, and the connection stays usable.
#[test]
fn an_unknown_opcode_after_hello_keeps_the_connection() {
    let server = TestServer::start(&[]);
    let mut raw = RawClient::handshaken(server.addr(0));
    for (request_id, opcode) in [(2u64, 0x0099u16), (3, 0x8021), (4, ERROR_OPCODE), (5, 0x0000)] {
        raw.send_bytes(&frame(opcode, 0, request_id, b"whatever"));
        raw.read_frame().expect_error(request_id, ErrorCode::UnknownOpcode);
    }
    let handle = raw.create_pool(6, "still-here", 1 << 20);
    raw.send_bytes(&put_frame(7, handle, b"k", b"v"));
    raw.read_frame().expect_ok(7);
    assert_eq!(raw.get(8, handle, b"k"), Ok(b"v".to_vec()));
}

/// Bodies that do not match their opcode's layout (truncated, trailing bytes, invalid UTF-8) are
/// `malformed_frame`; fields out of range (unknown flags, both put flags, empty pool name, zero
/// size, unknown attribute) are `invalid_argument`. None of them changes anything, and the
/// connection stays usable after each.
#[test]
fn malformed_bodies_after_hello_are_refused_and_the_connection_survives() {
    let server = TestServer::start(&[]);
    let mut raw = RawClient::handshaken(server.addr(0));
    let handle = raw.create_pool(2, "strict", 1 << 20);

    let mut truncated_put = handle.0.to_le_bytes().to_vec();
    truncated_put.extend_from_slice(&3u32.to_le_bytes());
    truncated_put.extend_from_slice(&5u32.to_le_bytes());
    truncated_put.extend_from_slice(b"ke");
    let mut trailing_get = pool_key_body(handle, b"k");
    trailing_get.push(0);
    let mut bad_utf8_name = vec![2, 0, 0xFF, 0xFE];
    bad_utf8_name.extend_from_slice(&[0; 16]);
    let mut empty_name = vec![0, 0];
    empty_name.extend_from_slice(&[0; 16]);
    let mut zero_size = vec![1, 0, b'z'];
    zero_size.extend_from_slice(&[0; 16]);
    let mut unknown_attribute = handle.0.to_le_bytes().to_vec();
    unknown_attribute.extend_from_slice(&99u16.to_le_bytes());
    unknown_attribute.extend_from_slice(&0u32.to_le_bytes());
    let put = |flags: u16| {
        let mut f = put_frame(0, handle, b"k", b"v");
        f[6..8].copy_from_slice(&flags.to_le_bytes());
        f
    };

    let cases: Vec<(&str, Vec<u8>, ErrorCode)> = vec![
        ("truncated put", frame(PUT, 0, 0, &truncated_put), ErrorCode::MalformedFrame),
        ("put with no body", frame(PUT, 0, 0, b""), ErrorCode::MalformedFrame),
        ("get with trailing bytes", frame(GET, 0, 0, &trailing_get), ErrorCode::MalformedFrame),
        ("pool name not UTF-8", frame(CREATE_POOL, 0, 0, &bad_utf8_name), ErrorCode::MalformedFrame),
        ("empty pool name", frame(CREATE_POOL, 0, 0, &empty_name), ErrorCode::InvalidArgument),
        ("pool size zero", frame(CREATE_POOL, 0, 0, &zero_size), ErrorCode::InvalidArgument),
        ("unknown attribute", frame(GET_ATTRIBUTE, 0, 0, &unknown_attribute), ErrorCode::InvalidArgument),
        ("unknown put flag", put(0x0010), ErrorCode::InvalidArgument),
        ("sync and async", put(0x000C), ErrorCode::InvalidArgument),
        ("create-only and update-only", put(0x0003), ErrorCode::InvalidArgument),
        ("flags on get", frame(GET, 1, 0, &pool_key_body(handle, b"k")), ErrorCode::InvalidArgument),
    ];
    for (i, (what, mut bytes, code)) in cases.into_iter().enumerate() {
        let request_id = 100 + i as u64;
        bytes[8..16].copy_from_slice(&request_id.to_le_bytes());
        raw.send_bytes(&bytes);
        let reply = raw.read_frame();
        assert_eq!(reply.error_code(), Some(code), "{what}: {reply:?}");
        assert_eq!(reply.header.request_id, request_id, "{what}");
        assert_eq!(raw.get(200 + i as u64, handle, b"k"), Err(ErrorCode::KeyNotFound), "{what} changed nothing");
    }
    match raw.call(300, &Request::ListPools).expect_ok(300) {
        Response::Pools(pools) => assert_eq!(pools.len(), 1, "only the valid pool exists: {pools:?}"),
        other => panic!("expected pools, got {other:?}"),
    }
}

/// Many frames in one write (hello included) are all answered, each with its own request id, and
/// the answers carry the right results. Ids are sparse and unordered so nothing can be matched by
/// position by accident.
#[test]
fn pipelined_frames_in_one_write_are_all_answered_by_id() {
    let server = TestServer::start(&[]);
    let mut raw = RawClient::connect(server.addr(0));
    // First write: the hello and a create_pool right behind it.
    let mut batch = frame(HELLO, 0, 9_000, &hello_body(b"FRRT", ferrite_proto::PROTOCOL_VERSION, "pipeliner"));
    let mut create = vec![4, 0];
    create.extend_from_slice(b"pipe");
    create.extend_from_slice(&(1u64 << 20).to_le_bytes());
    create.extend_from_slice(&64u64.to_le_bytes());
    batch.extend(frame(CREATE_POOL, 0, 8_000, &create));
    raw.send_bytes(&batch);
    let mut answers = std::collections::HashMap::new();
    for _ in 0..2 {
        let reply = raw.read_frame();
        answers.insert(reply.header.request_id, reply);
    }
    assert!(matches!(answers[&9_000].expect_ok(9_000), Response::Hello(_)));
    let handle = match answers[&8_000].expect_ok(8_000) {
        Response::PoolCreated { pool, created: true } => pool,
        other => panic!("expected a new pool, got {other:?}"),
    };

    // Second write: 50 puts, 50 gets in reverse order, a miss and a count.
    let id = |i: u64, kind: u64| 1_000_003 * i + 17 * kind + 5;
    let mut batch = Vec::new();
    for i in 0..50u64 {
        batch.extend(put_frame(id(i, 1), handle, format!("k{i}").as_bytes(), format!("v{i}").as_bytes()));
    }
    for i in (0..50u64).rev() {
        batch.extend(frame(GET, 0, id(i, 2), &pool_key_body(handle, format!("k{i}").as_bytes())));
    }
    batch.extend(frame(GET, 0, 7_000, &pool_key_body(handle, b"missing")));
    batch.extend(frame(COUNT, 0, 6_000, &handle.0.to_le_bytes()));
    raw.send_bytes(&batch);

    let mut answers = std::collections::HashMap::new();
    for _ in 0..(50 + 50 + 2) {
        let reply = raw.read_frame();
        assert!(answers.insert(reply.header.request_id, reply).is_none(), "one answer per request id");
    }
    for i in 0..50u64 {
        assert_eq!(answers[&id(i, 1)].expect_ok(id(i, 1)), Response::Stored);
        let value = format!("v{i}");
        assert_eq!(answers[&id(i, 2)].expect_ok(id(i, 2)), Response::Value(value.as_bytes()));
    }
    answers[&7_000].expect_error(7_000, ErrorCode::KeyNotFound);
    assert_eq!(answers[&6_000].expect_ok(6_000), Response::Count(50));
}

/// While hostile clients misbehave (half a frame then hang-up, a header then silence, a connection
/// that never says hello, a frame dribbled a byte at a time, garbage, an oversized frame abandoned
/// mid-skip), a well-behaved client's 1,000 interleaved puts and gets all get correct answers.
/// Afterwards the statistics account for exactly what happened and the server is still running.
#[test]
fn hostile_clients_do_not_disturb_a_well_behaved_one() {
    let mut server = TestServer::start(&[]);
    let address = server.addr(0);
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = session.create_pool("good", PoolOptions::default()).expect("create");

    let mut stalled_header: Option<RawClient> = None;
    let mut never_hello: Option<RawClient> = None;
    let dribbled = frame(HELLO, 0, 31, &hello_body(b"FRRT", ferrite_proto::PROTOCOL_VERSION, "one byte at a time"));
    let mut dribbler: Option<(RawClient, usize)> = None;

    for i in 0..1000u32 {
        match i {
            100 => {
                // Half a put, then hang up mid-frame.
                let mut c = RawClient::handshaken(address);
                let put = put_frame(2, PoolHandle(1), b"half", &[b'h'; 1000]);
                c.send_bytes(&put[..put.len() / 2]);
                drop(c);
            }
            200 => {
                // A header announcing a body that never comes; stays connected to the end.
                let mut c = RawClient::handshaken(address);
                c.send_bytes(&header(GET, 0, 2, 100));
                c.send_bytes(&pool_key_body(PoolHandle(1), b"k")[..5]);
                stalled_header = Some(c);
            }
            300 => {
                // Seven bytes of a header, then gone.
                let mut c = RawClient::connect(address);
                c.send_bytes(&header(HELLO, 0, 1, 20)[..7]);
                drop(c);
            }
            400 => {
                // Connected, silent, never says hello.
                never_hello = Some(RawClient::connect(address));
            }
            500 => {
                let mut c = RawClient::connect(address);
                c.send_bytes(&[0xFF; 64]);
                assert_eq!(c.read_frame().error_code(), Some(ErrorCode::FrameTooLarge));
                c.expect_closed();
            }
            600 => dribbler = Some((RawClient::connect(address), 0)),
            700 => {
                // An oversized frame after hello, abandoned a megabyte into its body.
                let mut c = RawClient::handshaken(address);
                c.send_bytes(&header(PUT, 0, 2, 100 << 20));
                c.read_frame().expect_error(2, ErrorCode::FrameTooLarge);
                c.send_bytes(&vec![0; 1 << 20]);
                c.stream().shutdown(Shutdown::Both).expect("hang up");
            }
            _ => {}
        }
        if let Some((client, sent)) = dribbler.as_mut() {
            if *sent < dribbled.len() {
                client.send_bytes(&dribbled[*sent..*sent + 1]);
                *sent += 1;
            }
        }

        let key = format!("key-{}", i % 20);
        let value = format!("value {i}");
        pool.put(&key, &value).expect("the good client's put");
        assert_eq!(pool.get(&key).expect("the good client's get"), value.as_bytes(), "op {i}");
    }

    let (mut dribbler, sent) = dribbler.expect("the dribbler started at op 600");
    assert_eq!(sent, dribbled.len(), "the dribbled hello was sent completely");
    assert!(matches!(dribbler.read_frame().expect_ok(31), Response::Hello(_)), "a dribbled frame is answered");

    // Connected now: the good session, the stalled header, the silent one and the dribbler.
    let stats = wait_until("the hung-up clients to be accounted for", SETTLE_TIMEOUT, || {
        let stats = session.statistics().expect("statistics").remove(0);
        (stats.get("clients") == Some(4)).then_some(stats)
    });
    assert_eq!(stats.get("puts"), Some(1000));
    assert_eq!(stats.get("gets"), Some(1000));
    assert_eq!(stats.get("failures"), Some(2), "the garbage and the oversized frame: {stats:?}");
    assert_eq!(stats.get("clients_total"), Some(8));
    assert_eq!(pool.count().expect("count"), 20);

    drop((stalled_header, never_hello, dribbler));
    wait_until("the remaining hostile clients to leave", SETTLE_TIMEOUT, || {
        let stats = session.statistics().expect("statistics").remove(0);
        (stats.get("clients") == Some(1)).then_some(())
    });
    assert!(server.is_alive(), "the server survived:\n{}", server.stderr());
    let mut check = RawClient::handshaken(address);
    assert_eq!(counter(&check.statistics(2), "clients"), 2);
}

/// A frame too large for the server, sent before hello, is answered with `frame_too_large` and the
/// connection is closed: the server will not skip megabytes for a peer that has not shown it
/// speaks the protocol.
#[test]
fn an_oversized_frame_before_hello_is_refused_and_closed() {
    let server = TestServer::start(&[]);
    let mut raw = RawClient::connect(server.addr(0));
    raw.send_bytes(&header(HELLO, 0, 12, u32::MAX));
    raw.read_frame().expect_error(12, ErrorCode::FrameTooLarge);
    raw.expect_closed();
}

/// A `handshake_required` error frame reaches the client, with the id of the frame it answers,
/// even when the client had sent hundreds of kilobytes more than the server reads before it
/// closes (closing with unread input makes the kernel reset the connection, which must not cost
/// the client its answer).
#[test]
fn a_handshake_error_reaches_a_client_that_sent_much_more() {
    let server = TestServer::start(&[]);
    for attempt in 0..10 {
        let mut raw = RawClient::connect(server.addr(0));
        let mut burst = Vec::new();
        for i in 0..20_000u64 {
            burst.extend(frame(COUNT, 0, 1 + i, &1u64.to_le_bytes()));
        }
        // The server may close before taking all of it; the answer is what matters.
        let _ = raw.try_send_bytes(&burst);
        match raw.read_frame_or_end() {
            Ok(Some(reply)) => {
                reply.expect_error(1, ErrorCode::HandshakeRequired);
            }
            other => panic!("attempt {attempt}: the handshake_required frame was lost: {other:?}"),
        }
    }
}

/// A put through the raw wire is visible to the Rust client and the other way round: both speak
/// the same bytes.
#[test]
fn raw_and_client_writes_are_the_same_bytes() {
    let server = TestServer::start(&[]);
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = session.create_pool("both", PoolOptions::default()).expect("create");
    pool.put("from-client", b"\x00\x01\x02").expect("put");
    let mut raw = RawClient::handshaken(server.addr(0));
    let handle = raw.open_pool(2, "both");
    assert_eq!(raw.get(3, handle, b"from-client"), Ok(vec![0, 1, 2]));
    raw.call(4, &Request::Put { pool: handle, flags: PutFlags::CREATE_ONLY, key: b"from-raw", value: b"\xff" })
        .expect_ok(4);
    assert_eq!(pool.get("from-raw").expect("get"), b"\xff");
}
