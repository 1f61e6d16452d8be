//! The RESP (Redis protocol) listener, spoken with hand-written bytes (after mini-redis's
//! `tests/server.rs`) and with the real `redis-cli`: every command's reply, Redis's error texts,
//! inline commands, pipelining, protocol errors that close only their own connection, `SCAN`
//! paging, and the data and statistics RESP shares with the native protocol.

mod common;
mod resp_wire;

use std::time::Duration;

use common::{wait_until, TestServer, SETTLE_TIMEOUT};
use ferrite_client::blocking;
use resp_wire::{bulk, encode, error, ok, redis_cli, redis_cli_installed, simple, Reply, RespClient};

fn start() -> TestServer {
    TestServer::builder().resp().start()
}

/// Every command of the table answers as `redis-server` would, errors included.
#[test]
fn string_commands_answer_as_redis_does() {
    let server = start();
    let mut c = RespClient::connect(server.resp_addr(0));
    assert_eq!(c.call(&["PING"]), simple("PONG"));
    assert_eq!(c.call(&["ping", "hi"]), bulk("hi"));
    assert_eq!(c.call(&["ECHO", "a\r\nb"]), bulk("a\r\nb"));

    assert_eq!(c.call(&["GET", "k"]), Reply::Nil);
    assert_eq!(c.call(&["SET", "k", "v"]), ok());
    assert_eq!(c.call(&["get", "k"]), bulk("v"));
    assert_eq!(c.call(&["SET", "k", "w", "NX"]), Reply::Nil, "NX on a present key does not set");
    assert_eq!(c.call(&["SET", "absent", "w", "XX"]), Reply::Nil, "XX on an absent key does not set");
    assert_eq!(c.call(&["GET", "absent"]), Reply::Nil);
    assert_eq!(c.call(&["SET", "k", "w", "xx"]), ok());
    assert_eq!(c.call(&["SET", "k2", "x", "NX"]), ok());
    assert_eq!(c.call(&["SET", "k", "z", "GET"]), bulk("w"), "GET returns the old value");
    assert_eq!(c.call(&["SET", "new", "z", "GET"]), Reply::Nil);
    assert_eq!(c.call(&["SET", "k", "y", "NX", "GET"]), bulk("z"), "NX GET on a present key: old value, not set");
    assert_eq!(c.call(&["GET", "k"]), bulk("z"));
    assert_eq!(c.call(&["SET", "k", "v", "NX", "XX"]), error("ERR syntax error"));
    assert_eq!(c.call(&["SET", "k", "v", "BOGUS"]), error("ERR syntax error"));
    let Reply::Error(expiry) = c.call(&["SET", "k", "v", "EX", "10"]) else { panic!("EX must be refused") };
    assert!(expiry.starts_with("ERR ") && expiry.contains("expire"), "{expiry}");
    assert_eq!(c.call(&["SET", "k", "v", "KEEPTTL"]), ok());

    assert_eq!(c.call(&["MSET", "a", "1", "b", "2"]), ok());
    assert_eq!(c.call(&["MGET", "a", "nope", "b"]), Reply::Array(vec![bulk("1"), Reply::Nil, bulk("2")]));
    assert_eq!(c.call(&["MSET", "a", "1", "b"]), error("ERR wrong number of arguments for 'mset' command"));
    assert_eq!(c.call(&["EXISTS", "a", "a", "nope"]), Reply::Integer(2), "a key named twice counts twice");
    assert_eq!(c.call(&["DEL", "a", "b", "nope"]), Reply::Integer(2));
    assert_eq!(c.call(&["EXISTS", "a"]), Reply::Integer(0));

    assert_eq!(c.call(&["INCR", "n"]), Reply::Integer(1));
    assert_eq!(c.call(&["INCRBY", "n", "41"]), Reply::Integer(42));
    assert_eq!(c.call(&["DECR", "n"]), Reply::Integer(41));
    assert_eq!(c.call(&["DECRBY", "n", "-9"]), Reply::Integer(50));
    assert_eq!(c.call(&["GET", "n"]), bulk("50"), "counters are stored as decimal text");
    assert_eq!(c.call(&["INCR", "k"]), error("ERR value is not an integer or out of range"));
    assert_eq!(c.call(&["INCRBY", "n", "x"]), error("ERR value is not an integer or out of range"));
    assert_eq!(c.call(&["SET", "big", "9223372036854775807"]), ok());
    assert_eq!(c.call(&["INCR", "big"]), error("ERR increment or decrement would overflow"));
    assert_eq!(c.call(&["DECRBY", "n", "-9223372036854775808"]), error("ERR decrement would overflow"));

    assert_eq!(c.call(&["DBSIZE"]), Reply::Integer(5), "k, k2, new, n and big");
}

/// Commands clients send on connect, and the administrative ones, answer so that clients carry on.
#[test]
fn connection_commands_answer_as_clients_expect() {
    let server = start();
    let mut c = RespClient::connect(server.resp_addr(0));
    assert_eq!(c.call(&["SELECT", "0"]), ok());
    assert_eq!(c.call(&["SELECT", "1"]), error("ERR DB index is out of range"));
    assert_eq!(c.call(&["COMMAND", "DOCS"]), Reply::Array(vec![]));
    let Reply::Array(table) = c.call(&["COMMAND"]) else { panic!("COMMAND is the command table") };
    assert_eq!(c.call(&["COMMAND", "COUNT"]), Reply::Integer(table.len() as i64), "an entry per command");
    assert_eq!(c.call(&["CLIENT", "SETINFO", "LIB-NAME", "test"]), ok());
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), Reply::Nil);
    assert_eq!(c.call(&["CLIENT", "SETNAME", "tester"]), ok());
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), bulk("tester"));
    assert_eq!(
        c.call(&["CLIENT", "SETNAME", "two words"]),
        error("ERR Client names cannot contain spaces, newlines or special characters.")
    );
    assert!(matches!(c.call(&["CLIENT", "ID"]), Reply::Integer(id) if id > 0));
    assert_eq!(c.call(&["CONFIG", "GET", "save"]), Reply::Array(vec![bulk("save"), bulk("")]));
    assert_eq!(c.call(&["CONFIG", "GET", "appendonly"]), Reply::Array(vec![bulk("appendonly"), bulk("no")]));
    assert_eq!(c.call(&["CONFIG", "GET", "maxmemory-policy"]), Reply::Array(vec![]));
    assert_eq!(
        c.call(&["FERRITE.INVOKE", "k", "payload"]),
        error("ERR pool '@0/redis' has no plugins: give it a chain when it is created (--plugins)")
    );
    assert_eq!(c.call(&["FOO", "a", "b"]), error("ERR unknown command 'FOO', with args beginning with: 'a' 'b' "));
    assert_eq!(c.call(&["GET"]), error("ERR wrong number of arguments for 'get' command"));
    assert_eq!(c.call(&["PING", "a", "b"]), error("ERR wrong number of arguments for 'ping' command"));
    // The connection is still fine after every error.
    assert_eq!(c.call(&["PING"]), simple("PONG"));
}

/// `HELLO 3` switches the connection to RESP3 (maps, `_` for no value), `HELLO 2` back; other
/// versions are refused with NOPROTO.
#[test]
fn hello_chooses_the_protocol_version() {
    let server = start();
    let mut c = RespClient::connect(server.resp_addr(0));
    let Reply::Array(fields) = c.call(&["HELLO"]) else { panic!("RESP2 HELLO is a flat array") };
    assert_eq!(fields.len(), 14);
    assert_eq!(
        fields[..6],
        [bulk("server"), bulk("ferrite"), bulk("version"), bulk("7.0.0"), bulk("proto"), Reply::Integer(2)]
    );
    assert_eq!(c.call(&["HELLO", "4"]), error("NOPROTO sorry, this protocol version is not supported"));
    assert_eq!(c.call(&["HELLO", "x"]), error("ERR Protocol version is not an integer or out of range"));
    let Reply::Map(fields) = c.call(&["HELLO", "3", "SETNAME", "three"]) else { panic!("RESP3 HELLO is a map") };
    assert_eq!(fields[4..6], [bulk("proto"), Reply::Integer(3)]);
    c.send_bytes(&encode(&[b"GET", b"missing"]));
    assert_eq!(c.line(), "_", "RESP3 null");
    assert_eq!(c.call(&["CLIENT", "GETNAME"]), bulk("three"));
    assert_eq!(c.call(&["CONFIG", "GET", "save"]), Reply::Map(vec![bulk("save"), bulk("")]));
    assert!(matches!(c.call(&["HELLO", "2"]), Reply::Array(_)));
    c.send_bytes(&encode(&[b"GET", b"missing"]));
    assert_eq!(c.line(), "$-1", "back to RESP2");
}

/// Inline commands, as typed into telnet, with Redis's quoting.
#[test]
fn inline_commands_work() {
    let server = start();
    let mut c = RespClient::connect(server.resp_addr(0));
    c.send_bytes(b"SET greeting \"hello world\\n\"\r\nget greeting\n\r\nPING\r\n");
    assert_eq!(c.read(), ok());
    assert_eq!(c.read(), bulk("hello world\n"));
    assert_eq!(c.read(), simple("PONG"), "an empty line is skipped, not answered");
}

/// Many commands in one write are answered in order, all of them; so are commands whose bytes
/// arrive one at a time.
#[test]
fn pipelined_commands_are_answered_in_order() {
    let server = start();
    let mut c = RespClient::connect(server.resp_addr(0));
    let commands = 2_000;
    let mut batch = Vec::new();
    for i in 0..commands {
        let (key, value) = (format!("key:{i}"), format!("value:{i}"));
        batch.extend_from_slice(&encode(&[b"SET", key.as_bytes(), value.as_bytes()]));
        batch.extend_from_slice(&encode(&[b"GET", key.as_bytes()]));
    }
    c.send_bytes(&batch);
    for i in 0..commands {
        assert_eq!(c.read(), ok());
        assert_eq!(c.read(), bulk(&format!("value:{i}")));
    }
    for byte in encode(&[b"ECHO", b"slowly"]) {
        c.send_bytes(&[byte]);
    }
    assert_eq!(c.read(), bulk("slowly"));
}

/// A value at the limit is stored and read back whole; one over it is refused with an error that
/// leaves the connection usable, except by `SET`, which streams it (see below).
#[test]
fn large_values_and_the_value_limit() {
    let server = TestServer::builder().resp().config("value_bytes_max", 1024 * 1024).start();
    let mut c = RespClient::connect(server.resp_addr(0));
    let value: Vec<u8> = (0..1024 * 1024).map(|i| (i % 251) as u8).collect();
    c.send_bytes(&encode(&[b"SET", b"large", &value]));
    assert_eq!(c.read(), ok());
    c.send_bytes(&encode(&[b"GET", b"large"]));
    assert_eq!(c.read(), Reply::Bulk(value.clone()));
    let mut over = value;
    over.push(0);
    c.send_bytes(&encode(&[b"MSET", b"over", &over]));
    let Reply::Error(message) = c.read() else { panic!("a value over the limit is an error") };
    assert!(message.starts_with("ERR ") && message.contains("value"), "{message}");
    assert_eq!(c.call(&["EXISTS", "over"]), Reply::Integer(0));
}

/// A value of `len` bytes that no piece boundary or period lines up with.
fn long_value(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// `SET` of a value past the inline limit streams it into the pool and `GET` answers it in
/// pieces: byte for byte, trickling in, pipelined between small commands, with `NX` and `XX`;
/// options it cannot honour, a transaction, a value past the direct limit and a client that
/// hangs up half way each leave the key's value as it was. Acknowledged values survive kill -9.
#[test]
fn values_past_the_inline_limit_stream_through_set_and_get() {
    let data_dir = common::fresh_dir("resp-long").join("data");
    let builder = || {
        TestServer::builder()
            .resp()
            .data_dir(&data_dir)
            .config("value_bytes_max", 64 * 1024)
            .config("direct_value_bytes_max", 8 * 1024 * 1024)
    };
    let mut server = builder().start();
    let mut c = RespClient::connect(server.resp_addr(0));
    let first = long_value(5 * 1024 * 1024 + 7, 0);
    let command = encode(&[b"SET", b"long", &first]);
    // The length line, then the value in two parts a moment apart.
    let (head, tail) = command.split_at(command.len() / 3);
    c.send_bytes(head);
    std::thread::sleep(std::time::Duration::from_millis(50));
    c.send_bytes(tail);
    assert_eq!(c.read(), ok());
    assert_eq!(c.call(&["STRLEN", "long"]), Reply::Integer(first.len() as i64));
    c.send_bytes(&encode(&[b"GET", b"long"]));
    assert_eq!(c.read(), Reply::Bulk(first.clone()));

    // Pipelined: each reply in its place.
    let second = long_value(200 * 1024, 1);
    let mut pipeline = encode(&[b"SET", b"small", b"v"]);
    pipeline.extend(encode(&[b"SET", b"second", &second, b"XX"]));
    pipeline.extend(encode(&[b"SET", b"second", &second, b"NX"]));
    pipeline.extend(encode(&[b"GET", b"second"]));
    pipeline.extend(encode(&[b"SET", b"long", &second, b"NX"]));
    pipeline.extend(encode(&[b"GET", b"small"]));
    c.send_bytes(&pipeline);
    assert_eq!(c.read(), ok());
    assert_eq!(c.read(), Reply::Nil, "XX of a missing key sets nothing");
    assert_eq!(c.read(), ok(), "NX of a missing key sets it");
    assert_eq!(c.read(), Reply::Bulk(second.clone()));
    assert_eq!(c.read(), Reply::Nil, "NX of a present key sets nothing");
    assert_eq!(c.read(), bulk("v"));

    // Refused once the options have come: the key keeps its value, the connection carries on.
    c.send_bytes(&encode(&[b"SET", b"long", &second, b"EX", b"10"]));
    let Reply::Error(message) = c.read() else { panic!("EX is refused") };
    assert!(message.contains("do not expire"), "{message}");
    c.send_bytes(&encode(&[b"SET", b"long", &second, b"GET"]));
    let Reply::Error(message) = c.read() else { panic!("GET is refused for long values") };
    assert!(message.contains("not supported"), "{message}");
    c.send_bytes(&encode(&[b"SET", b"long", &second, b"NX", b"bogus"]));
    assert_eq!(c.read(), error("ERR syntax error"));
    assert_eq!(c.call(&["STRLEN", "long"]), Reply::Integer(first.len() as i64));

    // Not queued in a transaction, which then runs nothing.
    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["SET", "queued", "1"]), simple("QUEUED"));
    c.send_bytes(&encode(&[b"SET", b"long", &second]));
    let Reply::Error(message) = c.read() else { panic!("refused in a transaction") };
    assert!(message.contains("transaction"), "{message}");
    let Reply::Error(message) = c.call(&["EXEC"]) else { panic!("EXEC aborts") };
    assert!(message.starts_with("EXECABORT"), "{message}");
    assert_eq!(c.call(&["EXISTS", "queued"]), Reply::Integer(0));

    // A client that hangs up half way through a value changes nothing.
    let mut quitter = RespClient::connect(server.resp_addr(0));
    let halted = encode(&[b"SET", b"long", &second]);
    quitter.send_bytes(&halted[..halted.len() / 2]);
    drop(quitter);
    // Past the direct limit: a protocol error as soon as the length line arrives.
    let mut huge = RespClient::connect(server.resp_addr(0));
    huge.send_bytes(b"*3\r\n$3\r\nSET\r\n$4\r\nhuge\r\n$8388609\r\n");
    let Reply::Error(message) = huge.read() else { panic!("past the direct limit") };
    assert!(message.starts_with("ERR Protocol error: invalid bulk length 8388609"), "{message}");
    assert!(huge.is_closed());
    c.send_bytes(&encode(&[b"GET", b"long"]));
    assert_eq!(c.read(), Reply::Bulk(first.clone()));

    server.kill9();
    let server = builder().start();
    let mut c = RespClient::connect(server.resp_addr(0));
    c.send_bytes(&encode(&[b"GET", b"long"]));
    assert_eq!(c.read(), Reply::Bulk(first), "acknowledged before kill -9");
    c.send_bytes(&encode(&[b"GET", b"second"]));
    assert_eq!(c.read(), Reply::Bulk(second));
}

/// A long `SET`'s pieces are read from the socket straight into the staged value's memory as
/// they arrive (counted in `direct_bytes_in_place`), however the client splits its writes: the
/// value comes back byte for byte and survives kill -9. A client that hangs up half way through
/// a piece read in place leaves the key's value as it was.
#[test]
fn long_set_values_are_read_into_pool_memory_as_they_arrive() {
    let data_dir = common::fresh_dir("resp-in-place").join("data");
    let builder = || TestServer::builder().resp().data_dir(&data_dir);
    let mut server = builder().start();
    let native = blocking::Session::connect(&server.addr_string()).expect("native connect");
    let in_place = || native.statistics().expect("statistics")[0].get("direct_bytes_in_place");
    let mut c = RespClient::connect(server.resp_addr(0));
    // Three pieces at the default inline limit (2 MiB, 2 MiB and 1 MiB + 7), trickling in.
    let first = long_value(5 * 1024 * 1024 + 7, 5);
    for part in encode(&[b"SET", b"k", &first]).chunks(100_000) {
        c.send_bytes(part);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(c.read(), ok());
    assert_eq!(in_place(), Some(first.len() as u64), "every piece was read in place");
    c.send_bytes(&encode(&[b"GET", b"k"]));
    assert_eq!(c.read(), Reply::Bulk(first.clone()));

    // A piece read in place and half the next, then the client hangs up: nothing changes.
    let mut quitter = RespClient::connect(server.resp_addr(0));
    let abandoned = encode(&[b"SET", b"k", &long_value(3 * 1024 * 1024, 6)]);
    quitter.send_bytes(&abandoned[..5 * 512 * 1024]);
    let first_piece = Some(first.len() as u64 + 2 * 1024 * 1024);
    wait_until("a piece read in place", SETTLE_TIMEOUT, || (in_place() == first_piece).then_some(()));
    drop(quitter);
    c.send_bytes(&encode(&[b"GET", b"k"]));
    assert_eq!(c.read(), Reply::Bulk(first.clone()), "the key kept its value");

    // In one write, with a command behind it in the same write.
    let second = long_value(3 * 1024 * 1024 + 1, 7);
    let mut both = encode(&[b"SET", b"k", &second]);
    both.extend(encode(&[b"STRLEN", b"k"]));
    c.send_bytes(&both);
    assert_eq!(c.read(), ok());
    assert_eq!(c.read(), Reply::Integer(second.len() as i64));

    server.kill9();
    let server = builder().start();
    let mut c = RespClient::connect(server.resp_addr(0));
    c.send_bytes(&encode(&[b"GET", b"k"]));
    assert_eq!(c.read(), Reply::Bulk(second), "acknowledged before kill -9");
}

/// The last piece of a long `SET`, read in place, comes in one write with the value's `\r\n`, the
/// command's option and the next command: the piece takes the value's bytes and no more, and what
/// follows it is parsed as the option and the next command, none of it written into pool memory.
/// `XX` of a present key sets it and the `GET` behind it reads the new value byte for byte; `XX`
/// of a missing key sets nothing, and the staged value's room is given back.
#[test]
fn the_last_piece_read_in_place_ends_where_the_value_does() {
    const PIECE: usize = 256 * 1024;
    let server = TestServer::builder().resp().config("value_bytes_max", PIECE).start();
    let native = blocking::Session::connect(&server.addr_string()).expect("native connect");
    let in_place = || native.statistics().expect("statistics")[0].get("direct_bytes_in_place").unwrap_or(0);
    let pool = native.open_pool("@0/redis").expect("the RESP pool");
    let used = || pool.pool_attributes().expect("attributes").used_bytes;
    let mut c = RespClient::connect(server.resp_addr(0));
    assert_eq!(c.call(&["SET", "present", "old"]), ok());
    // Four whole pieces, then a last one of at least 64 KiB: every piece is read in place.
    let value = long_value(4 * PIECE + 100_007, 8);
    // `SET key <value> XX` then `GET key`, whose last write holds the value's last 40,000 bytes,
    // its `\r\n`, `XX` and the `GET`; the two replies.
    let mut set_then_get = |key: &str| {
        let mut command = encode(&[b"SET", key.as_bytes(), &value, b"XX"]);
        let tail_start = command.len() - b"\r\n$2\r\nXX\r\n".len() - 40_000;
        command.extend(encode(&[b"GET", key.as_bytes()]));
        let (head, tail) = command.split_at(tail_start);
        let in_place_before = in_place();
        c.send_bytes(head);
        wait_until("four pieces read in place", SETTLE_TIMEOUT, || {
            (in_place() == in_place_before + 4 * PIECE as u64).then_some(())
        });
        // Time to read the last piece's first bytes, so its tail comes in a read of its own.
        std::thread::sleep(Duration::from_millis(50));
        c.send_bytes(tail);
        let replies = (c.read(), c.read());
        assert_eq!(in_place(), in_place_before + value.len() as u64, "the last piece was read in place too");
        replies
    };
    assert_eq!(set_then_get("present"), (ok(), Reply::Bulk(value.clone())), "XX of a present key sets it");
    let used_before = used();
    assert_eq!(set_then_get("missing"), (Reply::Nil, Reply::Nil), "XX of a missing key sets nothing");
    assert_eq!(used(), used_before, "the value XX refused holds no room");
    assert_eq!(c.call(&["STRLEN", "present"]), Reply::Integer(value.len() as i64));
    assert_eq!(c.call(&["EXISTS", "missing"]), Reply::Integer(0));
}

/// A client that goes silent half way through a long `SET` is disconnected once it has sent
/// nothing for `limits.direct_read_idle_ms`, and its staged value dropped (its key is never
/// written); a silent client with nothing staged stays connected (there is no idle timeout by
/// default).
#[test]
fn a_client_silent_in_a_long_set_is_disconnected_and_its_value_dropped() {
    let server =
        TestServer::builder().resp().config("value_bytes_max", 64 * 1024).config("direct_read_idle_ms", 1000).start();
    let mut idle = RespClient::connect(server.resp_addr(0));
    assert_eq!(idle.call(&["PING"]), simple("PONG"));
    let mut silent = RespClient::connect(server.resp_addr(0));
    assert_eq!(silent.call(&["PING"]), simple("PONG"), "past its handshake: no deadline but the staging one");
    let command = encode(&[b"SET", b"stalled", &long_value(4 * 1024 * 1024, 4)]);
    silent.send_bytes(&command[..1024 * 1024]);
    let started = std::time::Instant::now();
    let native = blocking::Session::connect(&server.addr_string()).expect("native connect");
    let staged = || native.statistics().expect("statistics")[0].get("direct_transfers") == Some(1);
    wait_until("the value staged", SETTLE_TIMEOUT, || staged().then_some(()));

    assert!(silent.is_closed(), "disconnected after its silence");
    let silence = started.elapsed();
    assert!(silence >= Duration::from_millis(900) && silence < Duration::from_secs(5), "{silence:?}");
    assert_eq!(idle.call(&["EXISTS", "stalled"]), Reply::Integer(0), "nothing staged is committed");
    assert_eq!(idle.call(&["PING"]), simple("PONG"), "nothing staged: still connected");
    let statistics = native.statistics().expect("statistics");
    assert_eq!(statistics[0].get("clients_timed_out"), Some(1), "{statistics:?}");
}

/// The same silence half way through a piece of over 64 KiB, which the server is reading from the
/// socket straight into pool memory: the client is disconnected after `limits.direct_read_idle_ms`
/// as well, its staged value dropped (the key keeps its value, the pool its room), and another
/// connection carries on.
#[test]
fn a_client_silent_in_a_piece_read_in_place_is_disconnected_and_its_value_dropped() {
    const PIECE: usize = 1024 * 1024;
    let server =
        TestServer::builder().resp().config("value_bytes_max", PIECE).config("direct_read_idle_ms", 1000).start();
    let native = blocking::Session::connect(&server.addr_string()).expect("native connect");
    let in_place = || native.statistics().expect("statistics")[0].get("direct_bytes_in_place");
    let pool = native.open_pool("@0/redis").expect("the RESP pool");
    let used = || pool.pool_attributes().expect("attributes").used_bytes;
    let mut other = RespClient::connect(server.resp_addr(0));
    assert_eq!(other.call(&["SET", "stalled", "old"]), ok());
    let used_before = used();

    let mut silent = RespClient::connect(server.resp_addr(0));
    let value = long_value(4 * PIECE, 9);
    let command = encode(&[b"SET", b"stalled", &value]);
    // Two whole pieces and half the third, which is then being read in place.
    let value_start = command.len() - value.len() - 2;
    silent.send_bytes(&command[..value_start + 2 * PIECE + PIECE / 2]);
    let started = std::time::Instant::now();
    wait_until("two pieces read in place", SETTLE_TIMEOUT, || (in_place() == Some(2 * PIECE as u64)).then_some(()));
    assert!(used() >= used_before + value.len() as u64, "the staged value holds its room");

    assert!(silent.is_closed(), "disconnected after its silence");
    let silence = started.elapsed();
    assert!(silence >= Duration::from_millis(900) && silence < Duration::from_secs(5), "{silence:?}");
    assert_eq!(other.call(&["GET", "stalled"]), bulk("old"), "the key kept its value");
    assert_eq!(used(), used_before, "the staged value's room was given back");
    let statistics = native.statistics().expect("statistics");
    assert_eq!(statistics[0].get("clients_timed_out"), Some(1), "{statistics:?}");
    assert_eq!(statistics[0].get("direct_bytes_in_place"), Some(2 * PIECE as u64), "the half piece was never taken");
}

/// `GETRANGE` of a value past the inline limit reads only the range: any range, counted from
/// either end as Redis counts it, byte for byte and in its place among pipelined replies, a
/// range past the inline limit in pieces; an empty range is an empty string and holds nothing.
/// Inside `MULTI`, whose replies are held whole, a range within the inline limit is answered and
/// a longer one refused with the value's length named.
#[test]
fn getrange_answers_part_of_a_long_value() {
    let server = TestServer::builder().resp().config("value_bytes_max", 64 * 1024).start();
    let mut c = RespClient::connect(server.resp_addr(0));
    let value = long_value(5 * 1024 * 1024 + 7, 10);
    c.send_bytes(&encode(&[b"SET", b"long", &value]));
    assert_eq!(c.read(), ok());
    let len = value.len();
    let (min, max) = (i64::MIN.to_string(), i64::MAX.to_string());
    let cases: [(&str, &str, &[u8]); 12] = [
        ("0", "-1", &value),
        (&min, &max, &value),
        ("-99999999", "-99999999", &value[..1]),
        (&max, &max, b""),
        ("5", &min, b""),
        ("100", "200", &value[100..=200]),
        ("-70000", "-1", &value[len - 70000..]),
        ("65530", "200000", &value[65530..=200000]),
        ("-999999999", "9", &value[..=9]),
        ("4000000", "999999999", &value[4000000..]),
        ("10", "5", b""),
        ("6000000", "6000010", b""),
    ];
    let mut pipeline = Vec::new();
    for (start, end, _) in &cases {
        pipeline.extend(encode(&[b"GETRANGE", b"long", start.as_bytes(), end.as_bytes()]));
        pipeline.extend(encode(&[b"ECHO", b"between"]));
    }
    c.send_bytes(&pipeline);
    for (start, end, expected) in &cases {
        assert_eq!(c.read(), Reply::Bulk(expected.to_vec()), "GETRANGE long {start} {end}");
        assert_eq!(c.read(), bulk("between"));
    }
    assert_eq!(c.call(&["GETRANGE", "long", "-1", "-2"]), bulk(""));
    assert_eq!(c.call(&["SUBSTR", "long", "0", "3"]), Reply::Bulk(value[..4].to_vec()));

    // Nothing stays held: another connection writes the key at once.
    let mut writer = RespClient::connect(server.resp_addr(0));
    writer.send_bytes(&encode(&[b"SET", b"long", &value[1..]]));
    assert_eq!(writer.read(), ok());

    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["GETRANGE", "long", "0", "3"]), simple("QUEUED"));
    assert_eq!(c.call(&["GETRANGE", "long", "0", "-1"]), simple("QUEUED"));
    let Reply::Array(replies) = c.call(&["EXEC"]) else { panic!("EXEC answers an array") };
    let [first, Reply::Error(message)] = replies.as_slice() else { panic!("a range, an error: {replies:?}") };
    assert_eq!(first, &Reply::Bulk(value[1..5].to_vec()), "a range within the inline limit");
    assert!(message.contains(&(len - 1).to_string()), "{message}");
    assert_eq!(c.call(&["GETRANGE", "long", "1", "2"]), Reply::Bulk(value[2..=3].to_vec()));
}

/// `MGET` answers values past the inline limit among short ones, each in its place, byte for
/// byte: the same key twice, pipelined between other commands, and over more keys than one step
/// of the shard takes. Every long key is held from the moment the short ones are read until the
/// reply has left: another connection's `SET` of the last one waits for the whole reply, so the
/// array is one moment's values, and nothing stays held afterwards. More long values than a
/// connection may read at once are refused with the limit named, holding nothing; inside `MULTI`
/// a long value is refused with its length, as before.
#[test]
fn mget_answers_long_values_in_their_places() {
    let server = TestServer::builder().resp().config("value_bytes_max", 64 * 1024).start();
    let mut c = RespClient::connect(server.resp_addr(0));
    let (first, second) = (long_value(3 * 1024 * 1024 + 5, 11), long_value(64 * 1024 + 1, 12));
    c.send_bytes(&encode(&[b"SET", b"first", &first]));
    assert_eq!(c.read(), ok());
    c.send_bytes(&encode(&[b"SET", b"second", &second]));
    assert_eq!(c.read(), ok());
    assert_eq!(c.call(&["SET", "short", "s"]), ok());

    let mut pipeline = encode(&[b"MGET", b"first", b"short", b"missing", b"second", b"first", b"short"]);
    pipeline.extend(encode(&[b"ECHO", b"between"]));
    pipeline.extend(encode(&[b"MGET", b"missing", b"second"]));
    c.send_bytes(&pipeline);
    let expected = vec![
        Reply::Bulk(first.clone()),
        bulk("s"),
        Reply::Nil,
        Reply::Bulk(second.clone()),
        Reply::Bulk(first.clone()),
        bulk("s"),
    ];
    assert_eq!(c.read(), Reply::Array(expected));
    assert_eq!(c.read(), bulk("between"));
    assert_eq!(c.read(), Reply::Array(vec![Reply::Nil, Reply::Bulk(second.clone())]));

    // Over two steps of the shard (1,024 keys each): a long value in each.
    let mut keys: Vec<&[u8]> = vec![b"MGET", b"second"];
    keys.extend(std::iter::repeat_n(b"short".as_slice(), 1500));
    keys.push(b"first");
    c.send_bytes(&encode(&keys));
    let Reply::Array(replies) = c.read() else { panic!("MGET answers an array") };
    assert_eq!(replies.len(), 1502);
    assert_eq!(replies[0], Reply::Bulk(second.clone()));
    assert!(replies[1..1501].iter().all(|reply| *reply == bulk("s")));
    assert_eq!(replies[1501], Reply::Bulk(first.clone()));

    // The reader asks and reads nothing yet: the reply fills the sockets and stalls in the first
    // value, while the writer's SET of the last key waits.
    let mut reader = RespClient::connect(server.resp_addr(0));
    let mut writer = RespClient::connect(server.resp_addr(0));
    let replaced = long_value(16 * 1024 * 1024, 13);
    c.send_bytes(&encode(&[b"SET", b"big", &replaced]));
    assert_eq!(c.read(), ok());
    reader.send_bytes(&encode(&[b"MGET", b"big", b"short", b"second"]));
    std::thread::sleep(Duration::from_millis(200));
    writer.send_bytes(&encode(&[b"SET", b"second", b"new"]));
    std::thread::sleep(Duration::from_millis(200));
    let expected = vec![Reply::Bulk(replaced), bulk("s"), Reply::Bulk(second.clone())];
    assert_eq!(reader.read(), Reply::Array(expected), "the values as they were when the MGET began");
    assert_eq!(writer.read(), ok());
    assert_eq!(reader.call(&["MGET", "second", "short"]), Reply::Array(vec![bulk("new"), bulk("s")]));
    // Nothing stays held: another connection writes a key the reply held at once.
    writer.send_bytes(&encode(&[b"SET", b"first", &second]));
    assert_eq!(writer.read(), ok());

    // More long values than a connection reads at once: refused before any leaves.
    let mut many: Vec<&[u8]> = vec![b"MGET", b"short"];
    many.extend(std::iter::repeat_n(b"first".as_slice(), 65));
    c.send_bytes(&encode(&many));
    let Reply::Error(message) = c.read() else { panic!("65 long values are refused") };
    assert!(message.contains("at most 64 values longer than 65536 bytes"), "{message}");
    writer.send_bytes(&encode(&[b"SET", b"first", &first]));
    assert_eq!(writer.read(), ok(), "the refused MGET holds nothing");
    assert_eq!(c.call(&["MGET", "short"]), Reply::Array(vec![bulk("s")]));

    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["MGET", "short", "first"]), simple("QUEUED"));
    let Reply::Array(replies) = c.call(&["EXEC"]) else { panic!("EXEC answers an array") };
    let [Reply::Error(message)] = replies.as_slice() else { panic!("an error: {replies:?}") };
    assert!(message.contains(&first.len().to_string()), "{message}");
}

/// A slow reader of an `MGET` whose first long value takes longer to leave than the hold limit
/// (`limits.direct_read_idle_ms`) keeps the holds of the values after it while it reads: the
/// reply as a whole is being read, so a writer of a later key waits for its end, and the reader
/// gets the whole array, not a connection closed half way.
#[test]
fn an_mget_being_read_keeps_the_holds_of_its_later_values() {
    use std::io::{Read, Write};
    let server =
        TestServer::builder().resp().config("value_bytes_max", 64 * 1024).config("direct_read_idle_ms", 1500).start();
    let mut c = RespClient::connect(server.resp_addr(0));
    let (big, later) = (long_value(24 * 1024 * 1024, 14), long_value(64 * 1024 + 3, 15));
    c.send_bytes(&encode(&[b"SET", b"big", &big]));
    assert_eq!(c.read(), ok());
    c.send_bytes(&encode(&[b"SET", b"later", &later]));
    assert_eq!(c.read(), ok());

    let mut reader = std::net::TcpStream::connect(server.resp_addr(0)).expect("connect");
    reader.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    reader.write_all(&encode(&[b"MGET", b"big", b"later"])).expect("send");
    std::thread::sleep(Duration::from_millis(100));
    c.send_bytes(&encode(&[b"SET", b"later", b"new"]));
    // About 5 MiB a second: the server sends the first value for about three seconds (what the
    // sockets buffer aside), twice the hold limit, in pieces a fraction of the limit apart.
    let expected = encode(&[&big, &later]);
    let mut received = Vec::with_capacity(expected.len());
    let mut chunk = vec![0; 512 * 1024];
    while received.len() < expected.len() {
        let read = reader.read(&mut chunk).expect("the reply keeps coming");
        assert!(read > 0, "the connection closed after {} of {} bytes", received.len(), expected.len());
        received.extend_from_slice(&chunk[..read]);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(received == expected, "the whole array, the later value as it was");
    assert_eq!(c.read(), ok(), "the writer went ahead once the reply had left");
    assert_eq!(c.call(&["GET", "later"]), bulk("new"));
}

/// A long `GET` holds its key: another connection's `SET` of it waits until the whole value has
/// left, so the reader gets one value, never parts of two.
#[test]
fn a_long_get_holds_its_key_until_its_last_piece() {
    let server = TestServer::builder().resp().config("value_bytes_max", 64 * 1024).start();
    let mut reader = RespClient::connect(server.resp_addr(0));
    let mut writer = RespClient::connect(server.resp_addr(0));
    let old = long_value(16 * 1024 * 1024, 2);
    let new = long_value(16 * 1024 * 1024, 3);
    writer.send_bytes(&encode(&[b"SET", b"held", &old]));
    assert_eq!(writer.read(), ok());
    // The reader asks and reads nothing yet: the value fills the sockets and the read stalls.
    reader.send_bytes(&encode(&[b"GET", b"held"]));
    std::thread::sleep(std::time::Duration::from_millis(200));
    writer.send_bytes(&encode(&[b"SET", b"held", &new]));
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(reader.read(), Reply::Bulk(old), "the value as it was when the GET began");
    assert_eq!(writer.read(), ok());
    reader.send_bytes(&encode(&[b"GET", b"held"]));
    assert_eq!(reader.read(), Reply::Bulk(new));
}

/// A framing error gets `-ERR Protocol error: ...` and closes that connection, answering the
/// commands before it first; other clients are not disturbed. An absurd bulk length is refused
/// as soon as its header arrives, before any of its data.
#[test]
fn a_protocol_error_closes_only_its_connection() {
    let server = start();
    let mut good = RespClient::connect(server.resp_addr(0));
    assert_eq!(good.call(&["SET", "k", "v"]), ok());

    let mut bad = RespClient::connect(server.resp_addr(0));
    bad.send_bytes(b"*1\r\n$4\r\nPING\r\n*1\r\n$x\r\n");
    assert_eq!(bad.read(), simple("PONG"));
    assert_eq!(bad.read(), error("ERR Protocol error: invalid bulk length"));
    assert!(bad.is_closed());

    let mut huge = RespClient::connect(server.resp_addr(0));
    huge.send_bytes(b"*2\r\n$3\r\nGET\r\n$999999999999\r\n");
    let Reply::Error(message) = huge.read() else { panic!("an oversized bulk is refused") };
    assert!(message.starts_with("ERR Protocol error: invalid bulk length"), "{message}");
    assert!(huge.is_closed());

    let mut many = RespClient::connect(server.resp_addr(0));
    many.send_bytes(b"*2000000\r\n");
    assert_eq!(many.read(), error("ERR Protocol error: invalid multibulk length"));
    assert!(many.is_closed());

    let mut quotes = RespClient::connect(server.resp_addr(0));
    quotes.send_bytes(b"SET k \"unterminated\r\n");
    assert_eq!(quotes.read(), error("ERR Protocol error: unbalanced quotes in request"));
    assert!(quotes.is_closed());

    assert_eq!(good.call(&["GET", "k"]), bulk("v"), "the well-behaved client carries on");
}

/// `MULTI` queues, `EXEC` runs the queue as one step (an array of the replies), `DISCARD` drops it;
/// a command refused while queueing aborts the whole transaction, as in Redis.
#[test]
fn multi_exec_runs_the_queue_at_once() {
    let server = start();
    let mut c = RespClient::connect(server.resp_addr(0));
    assert_eq!(c.call(&["EXEC"]), error("ERR EXEC without MULTI"));
    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["MULTI"]), error("ERR MULTI calls can not be nested"));
    assert_eq!(c.call(&["SET", "t", "1"]), simple("QUEUED"));
    assert_eq!(c.call(&["INCR", "t"]), simple("QUEUED"));
    assert_eq!(c.call(&["INCR", "missing-is-zero"]), simple("QUEUED"));
    assert_eq!(c.call(&["GET", "t"]), simple("QUEUED"));
    assert_eq!(c.call(&["EXEC"]), Reply::Array(vec![ok(), Reply::Integer(2), Reply::Integer(1), bulk("2")]));

    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["SET", "t", "3"]), simple("QUEUED"));
    assert_eq!(c.call(&["DISCARD"]), ok());
    assert_eq!(c.call(&["GET", "t"]), bulk("2"), "a discarded transaction changes nothing");

    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["SET", "t", "4"]), simple("QUEUED"));
    assert_eq!(c.call(&["GET"]), error("ERR wrong number of arguments for 'get' command"));
    assert_eq!(c.call(&["EXEC"]), error("EXECABORT Transaction discarded because of previous errors."));
    assert_eq!(c.call(&["GET", "t"]), bulk("2"));

    // Errors at run time are replies in the array; the other commands still run.
    assert_eq!(c.call(&["MULTI"]), ok());
    assert_eq!(c.call(&["INCR", "t"]), simple("QUEUED"));
    c.send(&["SET", "word", "abc"]);
    assert_eq!(c.read(), simple("QUEUED"));
    assert_eq!(c.call(&["INCR", "word"]), simple("QUEUED"));
    assert_eq!(
        c.call(&["EXEC"]),
        Reply::Array(vec![Reply::Integer(3), ok(), error("ERR value is not an integer or out of range")])
    );
    assert_eq!(c.call(&["WATCH", "t"]), error("ERR WATCH is not supported by ferrite"));
}

/// `QUIT` says OK and closes.
#[test]
fn quit_closes_the_connection() {
    let server = start();
    let mut c = RespClient::connect(server.resp_addr(0));
    assert_eq!(c.call(&["QUIT"]), ok());
    assert!(c.is_closed());
}

/// `SCAN` walks the hash table: every key comes back (once, with no growth in between), `MATCH`
/// filters with a glob, `TYPE` other than string finds nothing, and cursor 0 starts and ends a
/// walk. The cursor is a position, not a handle: any number is a valid cursor, text is not.
#[test]
fn scan_visits_every_key_once() {
    let server = start();
    let mut c = RespClient::connect(server.resp_addr(0));
    let mut expected_users = Vec::new();
    for i in 0..150 {
        let key = format!("user:{i:03}");
        assert_eq!(c.call(&["SET", &key, "x"]), ok());
        expected_users.push(key);
        assert_eq!(c.call(&["SET", &format!("item:{i:03}"), "y"]), ok());
    }
    let scan = |c: &mut RespClient, extra: &[&str]| -> Vec<String> {
        let mut keys = Vec::new();
        let mut cursor = "0".to_owned();
        let mut pages = 0;
        loop {
            let mut args = vec!["SCAN", cursor.as_str()];
            args.extend_from_slice(extra);
            let Reply::Array(reply) = c.call(&args) else { panic!("SCAN replies with an array") };
            let [Reply::Bulk(next), Reply::Array(page)] = &reply[..] else { panic!("bad SCAN reply {reply:?}") };
            pages += 1;
            keys.extend(page.iter().map(|key| match key {
                Reply::Bulk(key) => String::from_utf8(key.clone()).expect("text key"),
                other => panic!("a key is a bulk string, not {other:?}"),
            }));
            cursor = String::from_utf8(next.clone()).expect("cursor");
            if cursor == "0" {
                return keys;
            }
            assert!(pages < 1000, "the scan does not end");
        }
    };
    let mut users = scan(&mut c, &["MATCH", "user:*", "COUNT", "7"]);
    users.sort();
    assert_eq!(users, expected_users, "every match once");
    let all = scan(&mut c, &["COUNT", "1000"]);
    assert_eq!(all.len(), 300);
    assert_eq!(scan(&mut c, &["MATCH", "nothing*"]), Vec::<String>::new());
    assert_eq!(scan(&mut c, &["TYPE", "hash"]), Vec::<String>::new(), "every value is a string");
    assert_eq!(scan(&mut c, &["TYPE", "string", "MATCH", "item:*"]).len(), 150);
    let Reply::Array(reply) = c.call(&["SCAN", "18446744073709551615"]) else { panic!("any number is a cursor") };
    assert_eq!(reply[0], bulk("0"), "a cursor past the table's end ends the walk");
    assert_eq!(c.call(&["SCAN", "x1"]), error("ERR invalid cursor"));
    assert_eq!(c.call(&["SCAN", "0", "COUNT", "0"]), error("ERR syntax error"));
}

/// `INFO` is Redis's text, built from the shard's statistics, with the key count in `# Keyspace`
/// and the pool's memory in `# Memory`.
#[test]
fn info_reports_the_shard() {
    let server = start();
    let mut c = RespClient::connect(server.resp_addr(0));
    assert_eq!(c.call(&["MSET", "a", "1", "b", "2", "c", "3"]), ok());
    let Reply::Bulk(text) = c.call(&["INFO"]) else { panic!("INFO is a bulk string") };
    let text = String::from_utf8(text).expect("text");
    for expected in [
        "# Server\r\n",
        "redis_version:7.0.0\r\n",
        "ferrite_version:",
        "# Clients\r\n",
        "connected_clients:1\r\n",
        "# Memory\r\n",
        "ferrite_pool_memory:",
        "# Stats\r\n",
        "ferrite_puts:3\r\n",
        "# Keyspace\r\n",
        "db0:keys=3,expires=0,avg_ttl=0",
    ] {
        assert!(text.contains(expected), "INFO lacks {expected:?}:\n{text}");
    }
    let bytes_per_key = text.split("ferrite_pool_bytes_per_key:").nth(1).and_then(|rest| rest.split("\r\n").next());
    let bytes_per_key: f64 = bytes_per_key.and_then(|n| n.parse().ok()).expect("INFO reports the pool's bytes per key");
    assert!(bytes_per_key > 64.0, "three pairs take {bytes_per_key} bytes each, a 64-byte entry at least");
    let Reply::Bulk(keyspace) = c.call(&["info", "keyspace"]) else { panic!("INFO is a bulk string") };
    assert_eq!(String::from_utf8(keyspace).expect("text"), "# Keyspace\r\ndb0:keys=3,expires=0,avg_ttl=0\r\n");
}

/// Each shard serves its own pinned pool, `@i/redis`; the native protocol sees the same pairs, and
/// the same statistics count both.
#[test]
fn each_shard_serves_its_pinned_pool_shared_with_native_clients() {
    let server = TestServer::builder().resp().shards(2).start();
    let mut zero = RespClient::connect(server.resp_addr(0));
    let mut one = RespClient::connect(server.resp_addr(1));
    assert_eq!(zero.call(&["SET", "where", "shard 0"]), ok());
    assert_eq!(one.call(&["GET", "where"]), Reply::Nil, "shards share nothing");
    assert_eq!(one.call(&["SET", "where", "shard 1"]), ok());

    let native = blocking::Session::connect(&server.addr_string()).expect("native connect");
    for (shard, expected) in [(0, "shard 0"), (1, "shard 1")] {
        let pool = native.open_pool(&format!("@{shard}/redis")).expect("the RESP pool exists");
        assert_eq!(pool.shard(), shard);
        assert_eq!(pool.get("where").expect("native get"), expected.as_bytes());
    }
    let pool = native.open_pool("@0/redis").expect("open");
    pool.put("from-native", "hi").expect("native put");
    assert_eq!(zero.call(&["GET", "from-native"]), bulk("hi"));

    let statistics = native.statistics().expect("statistics");
    let shard0 = &statistics[0];
    assert_eq!(shard0.get("puts"), Some(2), "a RESP SET is a put: {statistics:?}");
    assert!(shard0.get("clients").expect("clients") >= 2, "RESP clients are clients: {statistics:?}");
}

/// The RESP pool, deleted through the native protocol while no RESP client holds it, is created
/// again for the next RESP connection: the listener stays usable.
#[test]
fn a_deleted_resp_pool_comes_back_empty() {
    let server = start();
    let mut c = RespClient::connect(server.resp_addr(0));
    assert_eq!(c.call(&["SET", "k", "v"]), ok());
    let native = blocking::Session::connect(&server.addr_string()).expect("native connect");
    let error = native.delete_pool("@0/redis").expect_err("open by a RESP client");
    assert!(error.to_string().contains("open"), "{error}");
    assert_eq!(c.call(&["QUIT"]), ok());
    assert!(c.is_closed());
    // The server learns of the close asynchronously.
    wait_until("the RESP pool to be released", SETTLE_TIMEOUT, || native.delete_pool("@0/redis").ok());
    let mut again = RespClient::connect(server.resp_addr(0));
    assert_eq!(again.call(&["DBSIZE"]), Reply::Integer(0));
    assert_eq!(again.call(&["SET", "k", "v2"]), ok());
}

/// RESP connections count against the shard's connection limit, shared with native clients; the
/// one over it is told so in Redis's words and closed.
#[test]
fn resp_connections_count_against_the_connection_limit() {
    let server = TestServer::builder().resp().config("connections_per_shard_max", 2).start();
    let _native = blocking::Session::connect(&server.addr_string()).expect("native connect");
    let mut first = RespClient::connect(server.resp_addr(0));
    assert_eq!(first.call(&["PING"]), simple("PONG"));
    let mut refused = RespClient::connect(server.resp_addr(0));
    assert_eq!(refused.read(), error("ERR max number of clients reached"));
    assert!(refused.is_closed());
    assert_eq!(first.call(&["PING"]), simple("PONG"));
}

/// The real `redis-cli` works unchanged: single commands, and `--pipe` mass insertion.
#[test]
fn redis_cli_works_unchanged() {
    if !redis_cli_installed() {
        return;
    }
    let server = start();
    let address = server.resp_addr(0);
    assert_eq!(redis_cli(address, &["ping"], None), "PONG\n");
    assert_eq!(redis_cli(address, &["set", "k", "v"], None), "OK\n");
    assert_eq!(redis_cli(address, &["get", "k"], None), "v\n");
    assert_eq!(redis_cli(address, &["incrby", "n", "5"], None), "5\n");
    assert_eq!(redis_cli(address, &["mget", "k", "n"], None), "v\n5\n");
    let mut mass = Vec::new();
    for i in 0..1000 {
        mass.extend_from_slice(&encode(&[b"SET", format!("bulk:{i}").as_bytes(), b"x"]));
    }
    let piped = redis_cli(address, &["--pipe"], Some(&mass));
    assert!(piped.contains("errors: 0, replies: 1000"), "{piped}");
    assert_eq!(redis_cli(address, &["dbsize"], None), "1002\n");
}

/// `redis-cli --bigkeys` walks the pool with `SCAN`, asks each key's `TYPE` and each string's
/// `STRLEN`, and reports the largest: it runs to its summary instead of aborting.
#[test]
fn redis_cli_bigkeys_reports_the_largest_string() {
    if !redis_cli_installed() {
        return;
    }
    let server = start();
    let mut c = RespClient::connect(server.resp_addr(0));
    let big = "x".repeat(5000);
    assert_eq!(c.call(&["MSET", "a", "1", "bb", "22", "ccc", "333", "big", &big]), ok());
    let report = redis_cli(server.resp_addr(0), &["--bigkeys"], None);
    assert!(report.contains("Sampled 4 keys in the keyspace!"), "{report}");
    assert!(report.contains("Biggest string found '\"big\"' has 5000 bytes"), "{report}");
    assert!(report.contains("4 strings with 5006 bytes"), "{report}");
}

/// What each write command acknowledged is durable: after kill -9 and a restart on the same
/// data directory, the pool holds exactly what the replies said.
#[test]
fn acknowledged_writes_of_every_write_command_survive_kill_9() {
    let data_dir = common::fresh_dir("resp-kill9").join("data");
    let mut server = TestServer::builder().resp().data_dir(&data_dir).start();
    let mut c = RespClient::connect(server.resp_addr(0));
    for (command, reply) in [
        (&["SETNX", "setnx", "1"][..], Reply::Integer(1)),
        (&["APPEND", "setnx", "23"], Reply::Integer(3)),
        (&["SET", "getset", "old"], ok()),
        (&["GETSET", "getset", "new"], bulk("old")),
        (&["SET", "getdel", "v"], ok()),
        (&["GETDEL", "getdel"], bulk("v")),
        (&["INCRBYFLOAT", "float", "1.5"], bulk("1.5")),
        (&["MSETNX", "m1", "x", "m2", "y"], Reply::Integer(1)),
        (&["SETRANGE", "range", "3", "abc"], Reply::Integer(6)),
        (&["SET", "from", "moved"], ok()),
        (&["RENAME", "from", "to"], ok()),
        (&["SET", "nxfrom", "moved too"], ok()),
        (&["RENAMENX", "nxfrom", "nxto"], Reply::Integer(1)),
        (&["COPY", "to", "copied"], Reply::Integer(1)),
        (&["SET", "unlinked", "v"], ok()),
        (&["UNLINK", "unlinked"], Reply::Integer(1)),
    ] {
        assert_eq!(c.call(command), reply, "{command:?}");
    }
    server.kill9();
    let server = TestServer::builder().resp().data_dir(&data_dir).start();
    let mut c = RespClient::connect(server.resp_addr(0));
    let keys = ["setnx", "getset", "getdel", "float", "m1", "m2", "range", "from", "to", "nxfrom", "nxto", "copied"];
    let mut mget = vec!["MGET"];
    mget.extend(keys);
    let values = ["123", "new", "", "1.5", "x", "y", "\0\0\0abc", "", "moved", "", "moved too", "moved"];
    let expected = values.iter().map(|value| if value.is_empty() { Reply::Nil } else { bulk(value) }).collect();
    assert_eq!(c.call(&mget), Reply::Array(expected));
    assert_eq!(c.call(&["EXISTS", "unlinked"]), Reply::Integer(0));
}
