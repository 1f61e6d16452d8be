//! The RESP listener on a server with users, before a client authenticates: what a stranger may
//! cost the server. It may send only small commands (Redis's limits), and it is closed at the
//! handshake deadline however much it talks, so it can neither pin memory nor hold connection
//! slots. What authenticated users may do is covered by `tests/python/test_auth.py`.

mod common;
mod resp_wire;

use std::time::Duration;

use common::{fresh_dir, wait_until, TestServer, SETTLE_TIMEOUT};
use ferrite_auth::{secret, PoolPattern, Rights, UsersFile};
use ferrite_client::blocking::Session;
use ferrite_client::{ClientOptions, UserCredentials};
use resp_wire::{bulk, encode, error, ok, simple, Reply, RespClient};

const USER: &str = "member";
const PASSWORD: &str = "correct horse battery";
/// A user who may only read.
const READER: &str = "reader";
const NOAUTH: &str = "NOAUTH Authentication required.";

/// A server whose user `member` may do everything and `reader` only read, serving RESP, with `config` changes.
fn server(config: &[(&str, u64)]) -> TestServer {
    let path = fresh_dir("resp-users").join("users.toml");
    let mut users = UsersFile::default();
    let hash = secret::hash_secret(PASSWORD.as_bytes()).expect("hash");
    users.add(USER, Some(hash), None).expect("add the user");
    users
        .grant(USER, PoolPattern::new("*").expect("pattern"), Rights::parse_list("all").expect("rights"))
        .expect("grant");
    let hash = secret::hash_secret(PASSWORD.as_bytes()).expect("hash");
    users.add(READER, Some(hash), None).expect("add the reader");
    users
        .grant(READER, PoolPattern::new("*").expect("pattern"), Rights::parse_list("read").expect("rights"))
        .expect("grant");
    users.save(&path).expect("save the users file");
    let mut builder = TestServer::builder().resp().arg("--users").arg(path.display().to_string());
    for (key, value) in config {
        builder = builder.config(key, value);
    }
    builder.start()
}

/// A client that has not authenticated may send at most 10 arguments of at most 16 KiB each
/// (`redis-server`'s limits since CVE-2021-32675): a longer header is refused as soon as it
/// arrives, before the client has sent any of the data it announces, and the connection is
/// closed. Within the limits it is answered `NOAUTH` and stays connected; once authenticated, the
/// same connection sends commands as large as the server's limits allow, even in the write that
/// carried its `AUTH`.
#[test]
fn unauthenticated_clients_may_send_only_small_commands() {
    let server = server(&[]);
    let address = server.resp_addr(0);

    // 2,000,000 bytes is within the value limit: an authenticated client's value would be awaited.
    let mut long = RespClient::connect(address);
    long.send_bytes(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000\r\n");
    let Reply::Error(message) = long.read() else { panic!("the header alone is refused") };
    assert!(message.starts_with("ERR Protocol error: unauthenticated bulk length"), "{message}");
    assert!(long.is_closed());

    let mut many = RespClient::connect(address);
    many.send_bytes(b"*11\r\n");
    let Reply::Error(message) = many.read() else { panic!("the count alone is refused") };
    assert!(message.starts_with("ERR Protocol error: unauthenticated multibulk length"), "{message}");
    assert!(many.is_closed());

    let mut polite = RespClient::connect(address);
    let largest = vec![b'x'; 16 * 1024];
    let mut at_the_limits: Vec<&[u8]> = vec![b"PING"];
    at_the_limits.extend(std::iter::repeat_n(&largest[..], 9));
    polite.send_bytes(&encode(&at_the_limits));
    assert_eq!(polite.read(), error(NOAUTH));
    assert_eq!(polite.call(&["GET", "k"]), error(NOAUTH), "still connected");

    let value = vec![b'v'; 100_000];
    let mut after_auth = encode(&[b"AUTH", USER.as_bytes(), PASSWORD.as_bytes()]);
    let pairs: Vec<&[u8]> = vec![b"MSET", b"a", &value, b"b", b"2", b"c", b"3", b"d", b"4", b"e", b"5", b"f", b"6"];
    after_auth.extend_from_slice(&encode(&pairs));
    polite.send_bytes(&after_auth);
    assert_eq!(polite.read(), ok());
    assert_eq!(polite.read(), ok(), "13 arguments, one of 100,000 bytes, once authenticated");
    assert_eq!(polite.call(&["GET", "a"]), Reply::Bulk(value));
    assert_eq!(polite.call(&["GET", "f"]), bulk("6"));
}

/// On a server with users, a RESP connection's handshake is its authentication: connections that
/// keep talking without authenticating (every command answered `NOAUTH`) are closed at the
/// handshake deadline, as silent ones are, so they cannot hold the shard's connection slots. An
/// authenticated connection outlives the deadline, and a native client then gets in.
#[test]
fn unauthenticated_resp_connections_are_closed_at_the_handshake_deadline() {
    let server = server(&[("connections_per_shard_max", 4), ("handshake_timeout_ms", 500)]);
    let address = server.resp_addr(0);
    let mut member = RespClient::connect(address);
    assert_eq!(member.call(&["AUTH", USER, PASSWORD]), ok());
    let mut strangers: Vec<RespClient> = (0..3).map(|_| RespClient::connect(address)).collect();
    wait_until("every stranger to be closed", SETTLE_TIMEOUT, || {
        strangers.retain_mut(|stranger| match stranger.call_unless_closed(&["PING"]) {
            Some(line) => {
                assert_eq!(line, format!("-{NOAUTH}"));
                true
            }
            None => false,
        });
        std::thread::sleep(Duration::from_millis(50));
        strangers.is_empty().then_some(())
    });

    assert_eq!(member.call(&["PING"]), simple("PONG"), "authenticated before the deadline: kept");
    let options = ClientOptions {
        credentials: Some(UserCredentials::new(USER, PASSWORD)),
        connect_timeout: Duration::from_secs(10),
        ..ClientOptions::default()
    };
    let native = wait_until("a free connection slot", SETTLE_TIMEOUT, || {
        Session::connect_with(&server.addr_string(), options.clone()).ok()
    });
    let statistics = native.statistics().expect("statistics");
    assert_eq!(statistics[0].get("clients_timed_out"), Some(3), "{statistics:?}");
}

/// A `SET` of a value past the inline limit by a user without the right to write is refused with
/// `NOPERM` once its value has been read and dropped: nothing is staged, the key keeps its value
/// and the connection carries on.
#[test]
fn a_long_set_needs_the_right_to_write() {
    let server = server(&[("value_bytes_max", 64 * 1024)]);
    let long = vec![b'w'; 1024 * 1024];
    let mut member = RespClient::connect(server.resp_addr(0));
    assert_eq!(member.call(&["AUTH", USER, PASSWORD]), ok());
    member.send_bytes(&encode(&[b"SET", b"long", &long]));
    assert_eq!(member.read(), ok());

    let mut reader = RespClient::connect(server.resp_addr(0));
    assert_eq!(reader.call(&["AUTH", READER, PASSWORD]), ok());
    reader.send_bytes(&encode(&[b"SET", b"long", &vec![b'r'; 2 * 1024 * 1024]]));
    let Reply::Error(message) = reader.read() else { panic!("a reader may not write") };
    assert!(message.starts_with("NOPERM"), "{message}");
    reader.send_bytes(&encode(&[b"GET", b"long"]));
    assert_eq!(reader.read(), Reply::Bulk(long), "the connection carries on; the value is as it was");
}
