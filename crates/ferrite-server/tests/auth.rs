//! Users, grants and quotas through the real server (`--users FILE`), over the native protocol in
//! clear and over TLS: every operation by users with different grants on their own and others'
//! pools (allowed ones succeed, denied ones fail with `permission_denied` and change nothing),
//! authentication by password and by client certificate, reloading the users file on SIGHUP, and
//! quotas on connections, pools and pool bytes (which survive a restart). The RESP side is
//! covered by `tests/python/test_auth.py`, but for a long `SET` whose right is revoked mid-value.

mod common;
mod pki;
mod resp_wire;
mod wire;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{fresh_dir, wait_until, TestServer, SETTLE_TIMEOUT};
use ferrite_auth::{secret, PoolPattern, Quota, Rights, UsersFile};
use ferrite_client::blocking::{Pool, Session};
use ferrite_client::{
    Attribute, ClientOptions, Error, ErrorCode, FindKind, InvokeOptions, PoolOptions, PoolSetting, TlsOptions,
    UserCredentials,
};
use ferrite_proto::{Credentials, EndTransferFlags, PoolHandle, PutFlags, Request, PROTOCOL_VERSION};
use pki::Pki;
use resp_wire::{bulk, encode, ok, simple, Reply, RespClient};
use wire::RawClient;

const PASSWORD: &str = "correct horse battery";

/// A users file in a fresh directory, edited through `ferrite_auth` as `ferrite user` does.
struct Users {
    path: PathBuf,
    file: UsersFile,
}

impl Users {
    fn new(label: &str) -> Users {
        Users { path: fresh_dir(label).join("users.toml"), file: UsersFile::default() }
    }

    fn add(&mut self, name: &str) -> &mut Self {
        let hash = secret::hash_secret(PASSWORD.as_bytes()).expect("hash");
        self.file.add(name, Some(hash), None).expect("add a user");
        self
    }

    fn grant(&mut self, name: &str, pools: &str, rights: &str) -> &mut Self {
        let pattern = PoolPattern::new(pools).expect("pattern");
        self.file.grant(name, pattern, Rights::parse_list(rights).expect("rights")).expect("grant");
        self
    }

    fn save(&self) -> &Path {
        self.file.save(&self.path).expect("save the users file");
        &self.path
    }
}

fn options(user: Option<(&str, &str)>, tls: Option<TlsOptions>) -> ClientOptions {
    ClientOptions {
        tls,
        credentials: user.map(|(name, password)| UserCredentials::new(name, password)),
        connect_timeout: Duration::from_secs(10),
        ..ClientOptions::default()
    }
}

fn connect_as(server: &TestServer, user: &str, tls: Option<TlsOptions>) -> Session {
    Session::connect_with(&server.addr_string(), options(Some((user, PASSWORD)), tls))
        .unwrap_or_else(|error| panic!("{user} connects: {error}"))
}

fn code<T: std::fmt::Debug>(outcome: Result<T, Error>) -> Option<ErrorCode> {
    outcome.err().and_then(|error| error.code())
}

/// `root` administers everything; `alice` owns `alice*` (all rights, admin included) and may read
/// `shared`; `bob` may read and invoke `shared` and write `drop*`, nothing more.
fn matrix_users(label: &str) -> Users {
    let mut users = Users::new(label);
    users.add("root").grant("root", "*", "all");
    users.add("alice").grant("alice", "alice*", "all").grant("alice", "shared", "read");
    users.add("bob").grant("bob", "shared", "read,invoke").grant("bob", "drop*", "write");
    users
}

/// What the matrix expects `user` may do on `pool`.
fn rights_of(users: &UsersFile, user: &str, pool: &str) -> Rights {
    users.user(user).expect("a matrix user").rights_on(pool)
}

/// Runs every operation of `user` on every pool, checking each against its grants; a denied write
/// must leave the pool as `root` sees it.
fn run_matrix(server: &TestServer, users: &UsersFile, tls: Option<TlsOptions>) {
    let root = connect_as(server, "root", tls.clone());
    let pools = ["alice-data", "shared", "drop-box", "secret"];
    for name in pools {
        let pool = root.create_pool(name, PoolOptions { plugins: vec!["counter".into()], ..PoolOptions::default() });
        let pool = pool.expect("root creates every pool");
        pool.put(b"key", b"original").expect("seed");
        let counter = InvokeOptions { create_size: Some(8), ..InvokeOptions::default() };
        pool.invoke(b"counter", b"add 1", counter).expect("seed the counter");
        pool.close().expect("close");
    }
    for user in ["alice", "bob"] {
        let session = connect_as(server, user, tls.clone());
        let listed: Vec<String> = session.list_pools().expect("list").into_iter().map(|info| info.name).collect();
        let visible: Vec<&str> =
            pools.iter().copied().filter(|pool| !rights_of(users, user, pool).is_empty()).collect();
        let mut listed_known: Vec<&str> =
            listed.iter().map(String::as_str).filter(|name| pools.contains(name)).collect();
        listed_known.sort_unstable();
        let mut expected = visible.clone();
        expected.sort_unstable();
        assert_eq!(listed_known, expected, "{user} lists only the pools it has rights on");
        for name in pools {
            check_pool(&session, &root, users, user, name);
        }
        let created = session.create_pool(&format!("{user}-new"), PoolOptions::default());
        let may_admin = rights_of(users, user, &format!("{user}-new")).contains(Rights::ADMIN);
        assert_eq!(created.is_ok(), may_admin, "{user} creating {user}-new");
        if let Ok(pool) = created {
            pool.close().expect("close");
            session.delete_pool(&format!("{user}-new")).expect("the creator with admin deletes");
        } else {
            assert_eq!(code(created), Some(ErrorCode::PermissionDenied));
        }
        let deleted = session.delete_pool("secret");
        assert_eq!(code(deleted), Some(ErrorCode::PermissionDenied), "{user} deleting secret");
        for name in pools {
            let configured = session.configure_pool(name, PoolSetting::AddIndex);
            let may = rights_of(users, user, name).contains(Rights::ADMIN);
            let expected = if may { None } else { Some(ErrorCode::PermissionDenied) };
            assert_eq!(code(configured), expected, "{user} configuring {name}");
        }
        let backup = session.back_up(&fresh_dir("auth-backup").join("b").display().to_string());
        assert_eq!(code(backup), Some(ErrorCode::PermissionDenied), "{user} backing the server up");
    }
    let survivors: Vec<String> = root.list_pools().expect("list").into_iter().map(|info| info.name).collect();
    assert!(survivors.contains(&"secret".to_owned()), "denied deletes deleted nothing");
}

fn check_pool(session: &Session, root: &Session, users: &UsersFile, user: &str, name: &str) {
    let rights = rights_of(users, user, name);
    let opened = session.open_pool(name);
    if rights.is_empty() {
        assert_eq!(code(opened), Some(ErrorCode::PermissionDenied), "{user} opening {name}");
        return;
    }
    let pool = opened.unwrap_or_else(|error| panic!("{user} opens {name}: {error}"));
    let allowed = |needed: Rights| rights.contains(needed);
    let expect = |what: &str, needed: Rights, outcome: Option<ErrorCode>| {
        if allowed(needed) {
            assert_eq!(outcome, None, "{user} may {what} on {name}");
        } else {
            assert_eq!(outcome, Some(ErrorCode::PermissionDenied), "{user} may not {what} on {name}");
        }
    };
    expect("get", Rights::READ, code(pool.get(b"key")));
    expect("count", Rights::READ, code(pool.count()));
    expect("read attributes", Rights::READ, code(pool.attribute(Attribute::ValueLength, b"key")));
    expect("find", Rights::READ, code(pool.find(FindKind::Prefix, b"", None, 10)));
    let read_only = InvokeOptions { read_only: true, ..InvokeOptions::default() };
    expect("invoke read-only", Rights::INVOKE.union(Rights::READ), code(pool.invoke(b"counter", b"get", read_only)));
    let writing = InvokeOptions { create_size: Some(8), ..InvokeOptions::default() };
    expect("invoke", Rights::INVOKE.union(Rights::WRITE), code(pool.invoke(b"counter", b"add 1", writing)));
    expect("put", Rights::WRITE, code(pool.put(b"key", b"changed")));
    expect("erase", Rights::WRITE, code(pool.erase(b"other")).filter(|code| *code != ErrorCode::KeyNotFound));
    if !allowed(Rights::WRITE) {
        let seen = root.open_pool(name).expect("root opens");
        assert_eq!(seen.get(b"key").expect("root reads"), b"original", "a denied write changed {name}");
        seen.close().expect("close");
    }
    pool.close().expect("close");
}

fn plugin_server(builder: common::ServerBuilder) -> common::ServerBuilder {
    let binary_dir = Path::new(env!("CARGO_BIN_EXE_ferrite-server")).parent().expect("a directory");
    assert!(binary_dir.join("libferrite_plugin_counter.so").exists(), "run `cargo build --workspace` first");
    builder
}

#[test]
fn grants_decide_every_operation_in_clear() {
    let users = matrix_users("auth-matrix");
    let server = plugin_server(TestServer::builder().arg("--users").arg(users.save().display().to_string())).start();
    run_matrix(&server, &users.file, None);
    let statistics = connect_as(&server, "root", None).statistics().expect("statistics");
    assert_eq!(statistics[0].get("users"), Some(3));
    assert!(statistics[0].get("requests_denied").is_some_and(|denied| denied > 10));
}

#[test]
fn grants_decide_every_operation_over_tls() {
    let users = matrix_users("auth-matrix-tls");
    let pki = Pki::new("auth-matrix-tls");
    let server = plugin_server(
        TestServer::builder().args(&pki.server_args(false)).arg("--users").arg(users.save().display().to_string()),
    )
    .start();
    run_matrix(&server, &users.file, Some(TlsOptions::with_ca(pki.dir.join("ca.pem"))));
}

#[test]
fn only_the_right_password_authenticates_and_nothing_else_is_possible_before() {
    let mut users = Users::new("auth-passwords");
    users.add("alice").grant("alice", "*", "all");
    let server = TestServer::builder().arg("--users").arg(users.save().display().to_string()).start();
    let refused = |user: Option<(&str, &str)>| {
        let error = Session::connect_with(&server.addr_string(), options(user, None)).expect_err("refused");
        assert_eq!(error.code(), Some(ErrorCode::AuthenticationFailed), "{error}");
        error.to_string()
    };
    let wrong = refused(Some(("alice", "not the password")));
    let unknown = refused(Some(("mallory", PASSWORD)));
    assert_eq!(wrong, unknown, "an unknown user and a wrong password are told apart by nothing");
    assert!(refused(None).contains("requires a user"));

    // A raw client that skips the handshake gets nothing either.
    let session = connect_as(&server, "alice", None);
    let statistics = session.statistics().expect("statistics");
    assert_eq!(statistics[0].get("authentication_failures"), Some(3));
    // Several connections of one user share one argon2 run: the others find it verified.
    for _ in 0..4 {
        connect_as(&server, "alice", None).list_pools().expect("served");
    }
}

#[test]
fn a_client_certificate_named_in_the_users_file_identifies_its_user() {
    let pki = Pki::new("auth-certificate");
    use rustls_pki_types::pem::PemObject;
    let der = rustls_pki_types::CertificateDer::pem_file_iter(pki.dir.join("client.pem"))
        .expect("read")
        .next()
        .expect("one certificate")
        .expect("valid PEM");
    let mut users = Users::new("auth-certificate");
    users.file.add("agent", None, Some(secret::certificate_fingerprint(&der))).expect("add by certificate");
    users.grant("agent", "agent*", "read,write,admin");
    let server = TestServer::builder()
        .args(&pki.server_args(true))
        .arg("--users")
        .arg(users.save().display().to_string())
        .start();
    let tls = TlsOptions {
        ca_file: pki.dir.join("ca.pem"),
        client_cert: Some((pki.dir.join("client.pem"), pki.dir.join("client-key.pem"))),
    };
    let session =
        Session::connect_with(&server.addr_string(), options(None, Some(tls))).expect("the certificate names agent");
    let pool = session.create_pool("agent-pool", PoolOptions::default()).expect("agent creates its pool");
    pool.put(b"k", b"v").expect("agent writes");
    assert_eq!(code(session.create_pool("other", PoolOptions::default())), Some(ErrorCode::PermissionDenied));
}

/// Sends SIGHUP to the server and waits until its log says the users file was read again (or not).
fn hang_up(server: &TestServer, expected_in_log: &str) {
    let before = server.stderr().matches(expected_in_log).count();
    let status = std::process::Command::new("kill").args(["-HUP", &server.pid().to_string()]).status().expect("kill");
    assert!(status.success());
    common::wait_until("the server to reread its users file", Duration::from_secs(20), || {
        (server.stderr().matches(expected_in_log).count() > before).then_some(())
    });
}

#[test]
fn sighup_reloads_the_users_file_and_open_sessions_follow_it() {
    let mut users = Users::new("auth-reload");
    users.add("root").grant("root", "*", "all");
    users.add("alice").grant("alice", "notes", "read");
    let server = TestServer::builder().arg("--users").arg(users.save().display().to_string()).start();
    connect_as(&server, "root", None)
        .create_pool("notes", PoolOptions::default())
        .expect("create")
        .close()
        .expect("close");
    let alice = connect_as(&server, "alice", None);
    let notes: Pool = alice.open_pool("notes").expect("alice may read notes");
    assert_eq!(code(notes.put(b"k", b"v")), Some(ErrorCode::PermissionDenied));

    users.grant("alice", "notes", "write");
    users.save();
    hang_up(&server, "reloaded the users file");
    notes.put(b"k", b"v").expect("the new grant applies to the open pool");

    users.file.revoke("alice", &PoolPattern::new("notes").expect("pattern"), Rights::ALL).expect("revoke");
    users.save();
    hang_up(&server, "reloaded the users file");
    assert_eq!(code(notes.get(b"k")), Some(ErrorCode::PermissionDenied), "a revoked grant applies at once");

    std::fs::write(&users.path, "[users.alice]\npassword = \"not a hash\"\n").expect("break the file");
    hang_up(&server, "kept the previous users");
    connect_as(&server, "root", None).list_pools().expect("the previous users still authenticate");

    users.file.remove("alice").expect("remove");
    users.save();
    hang_up(&server, "reloaded the users file");
    assert_eq!(code(notes.count()), Some(ErrorCode::PermissionDenied), "a removed user keeps no rights");
    let error = Session::connect_with(&server.addr_string(), options(Some(("alice", PASSWORD)), None))
        .expect_err("a removed user cannot log in");
    assert_eq!(error.code(), Some(ErrorCode::AuthenticationFailed));
}

/// Sends a `hello` as `user` with `password` on a new raw connection, without reading its answer.
fn raw_hello(server: &TestServer, user: &str, password: &str) -> RawClient {
    let mut client = RawClient::connect(server.addr(0));
    let auth = Credentials { user, password: password.as_bytes() }.encode();
    client.send(1, &Request::Hello { version: PROTOCOL_VERSION, client_name: "raw-test", auth: &auth });
    client
}

/// A raw connection authenticated as `user`.
fn raw_session(server: &TestServer, user: &str) -> RawClient {
    let mut client = raw_hello(server, user, PASSWORD);
    client.read_frame().expect_ok(1);
    client
}

/// The error code a raw request got, `None` if it succeeded.
fn raw_code(client: &mut RawClient, request_id: u64, request: &Request<'_>) -> Option<ErrorCode> {
    client.call(request_id, request).error_code()
}

/// Opens direct put `transfer` of `length` bytes to `key` and sends `written` as its first piece.
fn open_put(client: &mut RawClient, pool: PoolHandle, transfer: u64, key: &[u8], length: u64, written: &[u8]) {
    let put = Request::PutDirect { pool, flags: PutFlags::NONE, transfer, length, key };
    assert_eq!(raw_code(client, 10 + transfer, &put), None, "open direct put {transfer}");
    let piece = Request::DirectWrite { transfer, offset: 0, bytes: written };
    assert_eq!(raw_code(client, 20 + transfer, &piece), None, "first piece of direct put {transfer}");
}

/// Opens direct read `transfer` of `key` and reads its first byte.
fn open_read(client: &mut RawClient, pool: PoolHandle, transfer: u64, key: &[u8]) {
    assert_eq!(raw_code(client, 10 + transfer, &Request::GetDirect { pool, transfer, key }), None, "open a read");
    let piece = Request::DirectRead { transfer, offset: 0, length: 1 };
    assert_eq!(raw_code(client, 20 + transfer, &piece), None, "first piece of direct read {transfer}");
}

/// A direct transfer follows the users file like any request, though its right was checked
/// when it opened: once a grant is revoked (or the user deleted) and the file reloaded, its next
/// piece or its commit is refused with `permission_denied` and the transfer ends, nothing read
/// or written: a staged value is dropped, a read's hold on its key released. A transfer whose
/// right remains goes on.
#[test]
fn direct_transfers_end_when_their_right_is_revoked() {
    let mut users = Users::new("auth-direct");
    users.add("root").grant("root", "*", "all");
    users.add("alice").grant("alice", "big", "read,write");
    users.add("bob").grant("bob", "big", "read,write");
    // A read hold that is never released would hold root's write back for an hour.
    let server = TestServer::builder()
        .config("direct_read_idle_ms", 3_600_000)
        .arg("--users")
        .arg(users.save().display().to_string())
        .start();
    let root = connect_as(&server, "root", None);
    let pool = root.create_pool("big", PoolOptions::default()).expect("create");
    pool.put(b"held", b"the old value").expect("seed");
    let used_before = pool.pool_attributes().expect("attributes").used_bytes;

    let mut alice = raw_session(&server, "alice");
    let alice_big = alice.open_pool(2, "big");
    open_put(&mut alice, alice_big, 1, b"alice-whole", 4, b"1234");
    open_put(&mut alice, alice_big, 2, b"alice-half", 8, b"1234");
    open_read(&mut alice, alice_big, 3, b"held");
    let mut bob = raw_session(&server, "bob");
    let bob_big = bob.open_pool(2, "big");
    open_put(&mut bob, bob_big, 1, b"bob-whole", 4, b"1234");
    open_read(&mut bob, bob_big, 3, b"held");
    // Half of a large piece, which the server reads straight into the staged value as it comes.
    open_put(&mut bob, bob_big, 4, b"bob-large", 4 + (1 << 20), b"1234");
    let large = wire::encode(34, &Request::DirectWrite { transfer: 4, offset: 4, bytes: &[5u8; 1 << 20] });
    let (large_first, large_rest) = large.split_at(large.len() / 2);
    bob.send_bytes(large_first);

    users.file.remove("alice").expect("delete alice");
    users.file.revoke("bob", &PoolPattern::new("big").expect("pattern"), Rights::WRITE).expect("revoke");
    users.save();
    hang_up(&server, "reloaded the users file");

    let denied = Some(ErrorCode::PermissionDenied);
    let read = Request::DirectRead { transfer: 3, offset: 1, length: 4 };
    assert_eq!(raw_code(&mut alice, 31, &read), denied, "a deleted user's read goes on");
    let piece = Request::DirectWrite { transfer: 2, offset: 4, bytes: b"5678" };
    assert_eq!(raw_code(&mut alice, 32, &piece), denied, "a deleted user's put takes a piece");
    let commit = Request::EndTransfer { transfer: 1, flags: EndTransferFlags::COMMIT };
    assert_eq!(raw_code(&mut alice, 33, &commit), denied, "a deleted user's put commits");
    for transfer in 1..=3 {
        let end = Request::EndTransfer { transfer, flags: EndTransferFlags::ABORT };
        assert_eq!(raw_code(&mut alice, 40 + transfer, &end), Some(ErrorCode::InvalidArgument), "{transfer} ended");
    }

    bob.send_bytes(large_rest);
    assert_eq!(bob.read_frame().error_code(), denied, "bob's large piece, read in place, is refused once whole");
    let end_large = Request::EndTransfer { transfer: 4, flags: EndTransferFlags::ABORT };
    assert_eq!(raw_code(&mut bob, 35, &end_large), Some(ErrorCode::InvalidArgument), "bob's large put ended");
    assert_eq!(raw_code(&mut bob, 31, &read), None, "bob may still read");
    assert_eq!(raw_code(&mut bob, 32, &commit), denied, "bob's put commits without the write right");
    let end_read = Request::EndTransfer { transfer: 3, flags: EndTransferFlags::COMMIT };
    assert_eq!(raw_code(&mut bob, 33, &end_read), None, "bob ends his read");

    // Every hold on `held` is gone: root's write is answered at once, not after an hour.
    let mut raw_root = raw_session(&server, "root");
    let root_big = raw_root.open_pool(2, "big");
    let put = Request::Put { pool: root_big, flags: PutFlags::NONE, key: b"held", value: b"the new value" };
    assert_eq!(raw_code(&mut raw_root, 3, &put), None, "root writes the key the reads held");
    for key in [&b"alice-whole"[..], b"alice-half", b"bob-whole", b"bob-large"] {
        assert_eq!(code(pool.get(key)), Some(ErrorCode::KeyNotFound), "a denied put stored {key:?}");
    }
    assert_eq!(pool.get(b"held").expect("read"), b"the new value");
    let used_after = pool.pool_attributes().expect("attributes").used_bytes;
    assert_eq!(used_after, used_before, "the denied puts' staged values were given back");
}

/// A long RESP `SET` follows the users file as a direct put does: once its user's right to write
/// is revoked and the file reloaded while a piece of its value is being read in place, that
/// piece is refused once whole, the rest of the value read and dropped, and the `SET` answered
/// `NOPERM`. The key keeps its value, the pool its room, and the connection carries on with
/// what the user may still do.
#[test]
fn a_long_resp_set_ends_when_its_right_to_write_is_revoked() {
    const PIECE: usize = 256 * 1024;
    let mut users = Users::new("auth-resp-long-set");
    users.add("root").grant("root", "*", "all");
    users.add("alice").grant("alice", "*", "read,write");
    let server = TestServer::builder()
        .resp()
        .config("value_bytes_max", PIECE)
        .arg("--users")
        .arg(users.save().display().to_string())
        .start();
    let root = connect_as(&server, "root", None);
    let in_place = || root.statistics().expect("statistics")[0].get("direct_bytes_in_place");
    let pool = root.open_pool("@0/redis").expect("the RESP pool");
    let used = || pool.pool_attributes().expect("attributes").used_bytes;
    let mut alice = RespClient::connect(server.resp_addr(0));
    assert_eq!(alice.call(&["AUTH", "alice", PASSWORD]), ok());
    assert_eq!(alice.call(&["SET", "long", "old"]), ok());
    let used_before = used();

    let value = vec![b'n'; 4 * PIECE + 7];
    let command = encode(&[b"SET", b"long", &value]);
    // One whole piece and half the second, which is then being read in place.
    let value_start = command.len() - value.len() - 2;
    let (head, rest) = command.split_at(value_start + PIECE + PIECE / 2);
    alice.send_bytes(head);
    wait_until("a piece read in place", SETTLE_TIMEOUT, || (in_place() == Some(PIECE as u64)).then_some(()));
    assert!(used() >= used_before + value.len() as u64, "the staged value holds its room");
    users.file.revoke("alice", &PoolPattern::new("*").expect("pattern"), Rights::WRITE).expect("revoke");
    users.save();
    hang_up(&server, "reloaded the users file");

    alice.send_bytes(rest);
    let Reply::Error(message) = alice.read() else { panic!("the SET is refused") };
    assert!(message.starts_with("NOPERM ") && message.contains("write right"), "{message}");
    assert!(
        message.ends_with("; the value being written was dropped"),
        "no transfer a RESP user never named: {message}"
    );
    assert_eq!(in_place(), Some(PIECE as u64), "the piece under way at the reload was not taken");
    assert_eq!(used(), used_before, "the staged value's room was given back");
    assert_eq!(alice.call(&["GET", "long"]), bulk("old"), "the key kept its value; alice may still read");
    assert_eq!(alice.call(&["PING"]), simple("PONG"));
    let Reply::Error(message) = alice.call(&["SET", "long", "new"]) else { panic!("alice may not write") };
    assert!(message.starts_with("NOPERM "), "{message}");
}

/// Sends one RESP command and returns the first line of its reply.
fn resp_line(stream: &mut std::io::BufReader<std::net::TcpStream>, args: &[&str]) -> String {
    use std::io::{BufRead, Write};
    let mut command = format!("*{}\r\n", args.len());
    for arg in args {
        command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.get_mut().write_all(command.as_bytes()).expect("send a RESP command");
    let mut line = String::new();
    stream.read_line(&mut line).expect("a RESP reply");
    line
}

/// A session that may not make a request is refused at once, even when the request names a key
/// another session holds: one that waited for the hold to end would tell a client before its
/// `hello`, or a user without the right, which keys others are reading. Here root's direct read
/// holds a key of the RESP default pool for an hour; every refused writer, native or RESP, must
/// be answered while it still holds it.
#[test]
fn requests_a_session_may_not_make_never_wait_for_other_sessions_keys() {
    const HELD: &str = "@0/redis";
    let mut users = Users::new("auth-no-wait");
    users.add("root").grant("root", "*", "all");
    users.add("reader").grant("reader", HELD, "read");
    users.add("stranger").grant("stranger", "elsewhere", "all");
    let server = TestServer::builder()
        .resp()
        .config("direct_read_idle_ms", 3_600_000)
        .arg("--users")
        .arg(users.save().display().to_string())
        .start();
    connect_as(&server, "root", None).open_pool(HELD).expect("open").put(b"key", b"a value").expect("seed");
    let mut root = raw_session(&server, "root");
    let pool = root.open_pool(2, HELD);
    open_read(&mut root, pool, 1, b"key");

    let writes = [
        Request::Put { pool, flags: PutFlags::NONE, key: b"key", value: b"changed" },
        Request::Erase { pool, key: b"key" },
        Request::PutOffset { pool, flags: PutFlags::NONE, offset: 0, key: b"key", bytes: b"c" },
    ];
    for write in &writes {
        let mut anonymous = RawClient::connect(server.addr(0));
        anonymous.send(7, write);
        anonymous.read_frame().expect_error(7, ErrorCode::HandshakeRequired);
        anonymous.expect_closed();
    }
    let mut stranger = raw_session(&server, "stranger");
    for (id, write) in (2..).zip(&writes) {
        assert_eq!(raw_code(&mut stranger, id, write), Some(ErrorCode::PoolNotOpen), "{write:?}");
    }
    let mut reader = raw_session(&server, "reader");
    assert_eq!(reader.open_pool(2, HELD), pool);
    for (id, write) in (3..).zip(&writes) {
        assert_eq!(raw_code(&mut reader, id, write), Some(ErrorCode::PermissionDenied), "{write:?}");
    }
    for user in ["stranger", "reader"] {
        let stream = std::net::TcpStream::connect(server.resp_addr(0)).expect("connect to RESP");
        stream.set_read_timeout(Some(wire::IO_TIMEOUT)).expect("a read timeout");
        let mut resp = std::io::BufReader::new(stream);
        assert_eq!(resp_line(&mut resp, &["SET", "key", "changed"]), "-NOAUTH Authentication required.\r\n");
        assert_eq!(resp_line(&mut resp, &["AUTH", user, PASSWORD]), "+OK\r\n");
        let refused = resp_line(&mut resp, &["SET", "key", "changed"]);
        assert!(refused.starts_with("-NOPERM"), "{user} got {refused:?}");
    }

    // A commit that lost its right is refused without waiting for another session's read.
    let put = Request::PutDirect { pool, flags: PutFlags::NONE, transfer: 2, length: 0, key: b"key" };
    assert_eq!(raw_code(&mut root, 3, &put), None, "root stages a put of the key it reads");
    users.file.revoke("root", &PoolPattern::new("*").expect("pattern"), Rights::WRITE).expect("revoke");
    users.save();
    hang_up(&server, "reloaded the users file");
    let mut other_root = raw_session(&server, "root");
    other_root.open_pool(2, HELD);
    open_read(&mut other_root, pool, 5, b"key");
    let commit = Request::EndTransfer { transfer: 2, flags: EndTransferFlags::COMMIT };
    assert_eq!(raw_code(&mut root, 4, &commit), Some(ErrorCode::PermissionDenied), "a commit without the right");
}

/// A password checked against the users file of before a reload is not trusted after it. A
/// check of the old password still queued at SIGHUP (here behind wrong guesses, which anyone who
/// can connect may send to stretch the window) must not put the old secret back into the cache
/// of verified secrets that the reload cleared: every new connection would then log in with the
/// old password until the next reload.
#[test]
fn a_changed_password_stops_working_even_if_a_check_of_it_was_queued_at_the_reload() {
    let mut users = Users::new("auth-stale-check");
    users.add("alice").grant("alice", "*", "read");
    let server = TestServer::builder().arg("--users").arg(users.save().display().to_string()).start();
    let mut guesses: Vec<RawClient> = (0..40).map(|_| raw_hello(&server, "alice", "a wrong guess")).collect();
    let mut in_flight = raw_hello(&server, "alice", PASSWORD);
    // One refused guess: the server is verifying them, the old password's check queued behind.
    guesses[0].read_frame().expect_error(1, ErrorCode::AuthenticationFailed);

    const NEW_PASSWORD: &str = "a new password";
    let hash = secret::hash_secret(NEW_PASSWORD.as_bytes()).expect("hash");
    users.file.set_password("alice", hash).expect("change the password");
    users.save();
    hang_up(&server, "reloaded the users file");
    // The check queued before the reload answers either way; only what follows it matters.
    let _ = in_flight.read_frame_or_end();

    let error = Session::connect_with(&server.addr_string(), options(Some(("alice", PASSWORD)), None))
        .expect_err("the old password no longer logs in");
    assert_eq!(error.code(), Some(ErrorCode::AuthenticationFailed), "{error}");
    Session::connect_with(&server.addr_string(), options(Some(("alice", NEW_PASSWORD)), None))
        .expect("the new password logs in")
        .list_pools()
        .expect("served");
}

/// A users file that its group or others may read (or write) is named in a warning at start and
/// at every reload that finds it so: anyone who can read it can try its hashes offline.
#[test]
fn a_users_file_others_may_read_is_warned_about_at_start_and_at_each_reload() {
    use std::os::unix::fs::PermissionsExt;
    let mut users = Users::new("auth-exposed");
    users.add("alice");
    let path = users.save().to_owned();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let server = TestServer::builder().arg("--users").arg(path.display().to_string()).start();
    let warnings = || server.stderr().matches("readable by its group and others").count();
    assert_eq!(warnings(), 1, "at start: {}", server.stderr());
    hang_up(&server, "reloaded the users file");
    assert_eq!(warnings(), 2, "at the reload: {}", server.stderr());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    hang_up(&server, "reloaded the users file");
    assert_eq!(warnings(), 2, "a private file is not warned about: {}", server.stderr());
}

/// An argon2id hash whose check runs for hours (a billion passes over 8 KiB): every check of it
/// holds a verifier thread, or a place in the verifier's queue, until the server is stopped.
const TARPIT_HASH: &str =
    "$argon2id$v=19$m=8,t=1000000000,p=1$c2FsdHNhbHRzYWx0$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

/// How many of the server's password-verifying threads (`ferrite-auth-N`) have used CPU time.
fn verifier_threads_at_work(pid: u32) -> usize {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    tasks
        .filter_map(Result::ok)
        .filter(|task| {
            let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
            // utime is the 14th field; the name in parentheses (field 2) holds no spaces here.
            let utime = stat.split_whitespace().nth(13).and_then(|ticks| ticks.parse::<u64>().ok());
            name.starts_with("ferrite-auth") && utime.is_some_and(|ticks| ticks > 0)
        })
        .count()
}

/// The connection of `clients` that answers first (each has one `hello` unanswered).
fn first_answer(clients: &mut [RawClient]) -> &mut RawClient {
    for client in clients.iter() {
        client.stream().set_nonblocking(true).expect("non-blocking");
    }
    let answered = common::wait_until("a hello to be answered", Duration::from_secs(20), || {
        clients.iter().position(|client| {
            let mut byte = [0u8];
            client.stream().peek(&mut byte).is_ok_and(|read| read > 0)
        })
    });
    let client = &mut clients[answered];
    client.stream().set_nonblocking(false).expect("blocking");
    client
}

/// A flood of password checks fills the verifier's bounded queue and is refused at once past
/// it, without touching what the server already knows: passwords are checked on two threads
/// with a queue of 64, and a `hello` that finds the queue full gets `authentication_failed`
/// ("too many authentications in progress") and its connection is closed, an `AUTH`
/// `-ERR ...`; a secret verified before the flood needs no check and still logs in. Here every
/// check of mallory's tarpit hash runs for hours, so the threads and the queue never drain.
#[test]
fn a_flood_of_password_checks_is_refused_past_the_queue_and_verified_secrets_still_log_in() {
    const IN_FLIGHT_MAX: usize = 2 + 64;
    const BUSY: &str = "too many authentications in progress; try again";
    let mut users = Users::new("auth-flood");
    users.add("alice").grant("alice", "*", "read");
    users.add("bob");
    users.file.add("mallory", Some(TARPIT_HASH.to_owned()), None).expect("add the tarpit");
    let server = TestServer::builder().resp().arg("--users").arg(users.save().display().to_string()).start();
    connect_as(&server, "alice", None).list_pools().expect("alice is verified before the flood");

    let mut flood: Vec<RawClient> =
        (0..=IN_FLIGHT_MAX).map(|_| raw_hello(&server, "mallory", "any guess at all")).collect();
    // No check of mallory's ever ends, so the first answer is a refusal, and from then on the
    // threads and the queue are full.
    let refused = first_answer(&mut flood);
    assert_eq!(refused.read_frame().expect_error(1, ErrorCode::AuthenticationFailed), BUSY);
    refused.expect_closed();
    // The threads may not have taken their first checks off the queue yet when it first
    // refused (a loaded machine): once both are busy with a check (they use CPU time), up to two
    // more of mallory's fit, and after those the queue stays full.
    common::wait_until("both verifier threads at work", Duration::from_secs(20), || {
        (verifier_threads_at_work(server.pid()) == 2).then_some(())
    });
    let mut more = Vec::new();
    loop {
        let mut client = raw_hello(&server, "mallory", "another guess");
        client.stream().set_read_timeout(Some(Duration::from_millis(500))).expect("a read timeout");
        match client.read_frame_or_end() {
            Ok(Some(frame)) => {
                assert_eq!(frame.expect_error(1, ErrorCode::AuthenticationFailed), BUSY);
                break;
            }
            _ => more.push(client),
        }
        assert!(more.len() <= 2, "no more than the two checks the threads took fit in the queue");
    }
    for user in ["bob", "nobody-at-all"] {
        let mut client = raw_hello(&server, user, PASSWORD);
        assert_eq!(client.read_frame().expect_error(1, ErrorCode::AuthenticationFailed), BUSY, "{user}");
        client.expect_closed();
    }
    let stream = std::net::TcpStream::connect(server.resp_addr(0)).expect("connect to RESP");
    stream.set_read_timeout(Some(wire::IO_TIMEOUT)).expect("a read timeout");
    let mut resp = std::io::BufReader::new(stream);
    assert_eq!(resp_line(&mut resp, &["AUTH", "bob", PASSWORD]), format!("-ERR {BUSY}\r\n"));
    assert_eq!(resp_line(&mut resp, &["PING"]), "-NOAUTH Authentication required.\r\n", "still connected");

    connect_as(&server, "alice", None).list_pools().expect("a secret verified before the flood logs in at once");
    let statistics = connect_as(&server, "alice", None).statistics().expect("statistics");
    assert_eq!(statistics[0].get("authentication_failures"), Some(0), "refusals for a full queue are not failures");
}

/// SIGHUP never ends a server: without a users file there is nothing to reread, and it says so.
#[test]
fn sighup_without_users_only_logs() {
    let mut server = TestServer::builder().start();
    hang_up(&server, "nothing to reload");
    assert!(server.is_alive(), "SIGHUP stopped the server");
    Session::connect(&server.addr_string()).expect("connect").list_pools().expect("still served");
}

#[test]
fn quotas_bound_connections_pools_and_pool_bytes_across_restarts() {
    let mut users = Users::new("auth-quota");
    users.add("alice").grant("alice", "alice*", "all");
    users
        .file
        .set_quota("alice", Quota { connections: Some(2), pools: Some(2), pool_bytes: Some(8 << 20) })
        .expect("quota");
    let data_dir = fresh_dir("auth-quota-data");
    let users_path = users.save().display().to_string();
    let start = || TestServer::builder().data_dir(&data_dir).arg("--users").arg(users_path.clone()).start();
    let mut server = start();
    let first = connect_as(&server, "alice", None);
    let second = connect_as(&server, "alice", None);
    let third = Session::connect_with(&server.addr_string(), options(Some(("alice", PASSWORD)), None));
    assert_eq!(third.expect_err("a third connection").code(), Some(ErrorCode::QuotaExceeded));
    drop(second);
    common::wait_until("a closed connection to leave the quota", Duration::from_secs(20), || {
        Session::connect_with(&server.addr_string(), options(Some(("alice", PASSWORD)), None)).ok()
    });

    let sized = |bytes: u64| PoolOptions { size_bytes: bytes, ..PoolOptions::default() };
    first.create_pool("alice-a", sized(4 << 20)).expect("first pool").close().expect("close");
    let too_big = first.create_pool("alice-b", sized(5 << 20));
    assert_eq!(code(too_big), Some(ErrorCode::QuotaExceeded), "past pool_bytes");
    first.create_pool("alice-b", sized(4 << 20)).expect("up to the quota").close().expect("close");
    first.open_pool("alice-b").expect("opening an existing pool costs nothing").close().expect("close");
    drop(first);

    server.kill9();
    let server = start();
    let alice = connect_as(&server, "alice", None);
    let third_pool = alice.create_pool("alice-c", sized(1 << 20));
    assert_eq!(code(third_pool), Some(ErrorCode::QuotaExceeded), "pools created before the restart still count");
    alice.delete_pool("alice-a").expect("delete");
    alice.create_pool("alice-c", sized(1 << 20)).expect("a deleted pool frees its quota").close().expect("close");
}
