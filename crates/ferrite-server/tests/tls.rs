//! TLS on both listeners, against certificates the test makes (rcgen): clients that trust the
//! server's CA are served; a client trusting another CA, a client speaking in clear, and (with
//! mutual TLS) a client without a certificate all fail cleanly and leave the server serving.

mod common;
mod pki;

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::TestServer;
use ferrite_client::blocking::Session;
use ferrite_client::{ClientOptions, PoolOptions, TlsOptions};
use pki::Pki;

fn options(tls: Option<TlsOptions>) -> ClientOptions {
    ClientOptions { tls, connect_timeout: Duration::from_secs(5), ..ClientOptions::default() }
}

fn clients(server: &TestServer, ca: &Path) -> u64 {
    let session =
        Session::connect_with(&server.addr_string(), options(Some(TlsOptions::with_ca(ca)))).expect("connect");
    session.statistics().expect("statistics")[0].get("clients").expect("a clients counter")
}

#[test]
fn tls_serves_clients_that_trust_its_ca_and_turns_away_the_rest() {
    let pki = Pki::new("tls");
    let other = Pki::new("tls-other");
    let server = TestServer::builder().args(&pki.server_args(false)).start();
    let trusted = options(Some(TlsOptions::with_ca(pki.dir.join("ca.pem"))));
    let session = Session::connect_with(&server.addr_string(), trusted).expect("a client trusting the CA connects");
    let pool = session.create_pool("secret", PoolOptions::default()).expect("create a pool");
    pool.put(b"key", b"sealed").expect("put over TLS");
    assert_eq!(pool.get(b"key").expect("get over TLS"), b"sealed");
    // A large value's pieces go from the TLS session's buffer straight into pool memory.
    let large: Vec<u8> = (0..5u32 << 20).map(|n| (n % 251) as u8).collect();
    pool.put_direct(b"large", &large).expect("a direct put over TLS");
    assert!(pool.get(b"large").expect("get over TLS") == large, "the large value came back whole");
    let in_place = session.statistics().expect("statistics")[0].get("direct_bytes_in_place");
    assert!(in_place.is_some_and(|bytes| bytes > 0), "pieces read in place over TLS: {in_place:?}");

    let error =
        Session::connect_with(&server.addr_string(), options(Some(TlsOptions::with_ca(other.dir.join("ca.pem")))))
            .expect_err("another CA's client is refused")
            .to_string();
    assert!(error.contains("TLS with") && error.contains("certificate"), "{error}");
    let error = Session::connect_with(&server.addr_string(), options(None)).expect_err("a clear client is refused");
    assert!(error.is_tls_required(), "{error}");
    let mut garbled = std::net::TcpStream::connect(server.addr(0)).expect("connect in clear");
    garbled.write_all(b"hello? ").expect("write");
    garbled.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut answer = Vec::new();
    garbled.read_to_end(&mut answer).expect("a client that speaks no TLS is hung up on");
    assert!(answer.is_empty() || answer[0] == 0x15, "at most a TLS alert: {answer:?}");
    let silent = std::net::TcpStream::connect(server.addr(0)).expect("connect in clear");

    assert_eq!(pool.get(b"key").expect("the first client is still served"), b"sealed");
    // The first client, the one counting, and the silent one (until its handshake times out);
    // the refused ones are gone.
    common::wait_until("refused clients no longer counted", Duration::from_secs(20), || {
        (clients(&server, &pki.dir.join("ca.pem")) == 3).then_some(())
    });
    drop(silent);
    common::wait_until("a silent client no longer counted", Duration::from_secs(20), || {
        (clients(&server, &pki.dir.join("ca.pem")) == 2).then_some(())
    });
}

#[test]
fn mutual_tls_requires_a_client_certificate_the_ca_signed() {
    let pki = Pki::new("mtls");
    let server = TestServer::builder().args(&pki.server_args(true)).start();
    let anonymous = options(Some(TlsOptions::with_ca(pki.dir.join("ca.pem"))));
    let error = Session::connect_with(&server.addr_string(), anonymous).expect_err("no client certificate, no service");
    assert!(error.to_string().contains("the server requires a client certificate"), "{error}");
    let identified = TlsOptions {
        ca_file: pki.dir.join("ca.pem"),
        client_cert: Some((pki.dir.join("client.pem"), pki.dir.join("client-key.pem"))),
    };
    let session = Session::connect_with(&server.addr_string(), options(Some(identified))).expect("a signed client");
    session.list_pools().expect("served");
}

/// Expired certificates fail the handshake on either side, with an error that says so, and the
/// server goes on serving valid clients.
#[test]
fn expired_certificates_are_refused_on_both_sides() {
    let pki = Pki::new("tls-expired");
    let expired_server = TestServer::builder()
        .args(&["--tls-cert", &pki.path("expired-server.pem"), "--tls-key", &pki.path("expired-server-key.pem")])
        .start();
    let error = Session::connect_with(
        &expired_server.addr_string(),
        options(Some(TlsOptions::with_ca(pki.dir.join("ca.pem")))),
    )
    .expect_err("a server certificate that expired is not trusted")
    .to_string();
    assert!(error.contains("the server's certificate expired") && error.contains("days ago"), "{error}");

    let server = TestServer::builder().args(&pki.server_args(true)).start();
    let with_client = |name: &str| TlsOptions {
        ca_file: pki.dir.join("ca.pem"),
        client_cert: Some((pki.dir.join(format!("{name}.pem")), pki.dir.join(format!("{name}-key.pem")))),
    };
    let refused = Session::connect_with(&server.addr_string(), options(Some(with_client("expired-client"))))
        .and_then(|session| session.list_pools())
        .expect_err("a client certificate that expired is refused");
    assert!(refused.to_string().contains("the server refused this client's certificate: it has expired"), "{refused}");
    let session = Session::connect_with(&server.addr_string(), options(Some(with_client("client")))).expect("valid");
    session.list_pools().expect("a valid client is served after the refusal");
}

/// The problem with a certificate the client refuses is named in a sentence that says what to
/// change, never as rustls's enum; a client in clear is told the server speaks TLS, a TLS client
/// that reaches a server in clear that no TLS handshake came, and only an address where nothing
/// answers is "unreachable".
#[test]
fn tls_failures_say_what_is_wrong() {
    let pki = Pki::new("tls-sentences");
    let other = Pki::new("tls-sentences-other");
    let connect = |server: &TestServer, ca: &Pki| {
        Session::connect_with(&server.addr_string(), options(Some(TlsOptions::with_ca(ca.dir.join("ca.pem")))))
            .expect_err("refused")
    };
    let tls_problem = |error: ferrite_client::Error| match error {
        ferrite_client::Error::Tls { problem, .. } => problem,
        other => panic!("not a TLS failure: {other}"),
    };

    let ca_as_server = TestServer::builder().args(&pki.server_args_with("ca")).start();
    let problem = tls_problem(connect(&ca_as_server, &pki));
    assert!(problem.starts_with("the server's certificate is a CA certificate"), "{problem}");
    assert!(problem.contains("openssl req -x509") && !problem.contains("CaUsedAsEndEntity"), "{problem}");

    let server = TestServer::builder().args(&pki.server_args(false)).start();
    let problem = tls_problem(connect(&server, &other));
    assert!(problem.contains(&format!("not signed by a CA in {}", other.path("ca.pem"))), "{problem}");

    let elsewhere = TestServer::builder().args(&pki.server_args_with("elsewhere-server")).start();
    let problem = tls_problem(connect(&elsewhere, &pki));
    assert!(problem.starts_with("the server's certificate is not valid for 127.0.0.1 (it names"), "{problem}");
    assert!(problem.contains("db.example"), "{problem}");

    let clear_client = Session::connect_with(&server.addr_string(), options(None)).expect_err("refused");
    assert!(clear_client.is_tls_required(), "{clear_client}");
    assert!(clear_client.to_string().contains("speaks TLS and this client connected in clear"), "{clear_client}");

    let clear_server = TestServer::builder().start();
    let quick = ClientOptions {
        connect_timeout: Duration::from_millis(500),
        ..options(Some(TlsOptions::with_ca(pki.dir.join("ca.pem"))))
    };
    let problem = tls_problem(Session::connect_with(&clear_server.addr_string(), quick).expect_err("no TLS there"));
    // It waits for a hello, or hangs up on bytes that are none: either way the client asks.
    assert!(problem.contains("is it configured with [tls]?"), "{problem}");

    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port();
    let nobody = Session::connect_with(&format!("127.0.0.1:{port}"), options(None)).expect_err("nobody there");
    assert!(nobody.is_unreachable(), "{nobody}");
}

/// The openssl commands `docs/security.md` gives for a test CA and a server certificate, read
/// from the page and run as written, make files the server serves with and a client that trusts
/// the CA verifies, by each name the commands put in the certificate.
#[test]
fn the_documented_openssl_commands_make_a_ca_and_a_server_certificate_that_work() {
    let dir = common::fresh_dir("tls-openssl");
    let commands = fenced_block_with(include_str!("../../../docs/security.md"), "openssl req -x509");
    let made = std::process::Command::new("sh")
        .args(["-e", "-c", &commands])
        .current_dir(&dir)
        .output()
        .expect("run sh (and openssl)");
    assert!(made.status.success(), "{commands}\n{}", String::from_utf8_lossy(&made.stderr));
    let path = |name: &str| dir.join(name).display().to_string();
    let server =
        TestServer::builder().args(&["--tls-cert", &path("server.pem"), "--tls-key", &path("server-key.pem")]).start();
    for host in ["127.0.0.1", "localhost"] {
        let address = format!("{host}:{}", server.addr(0).port());
        let session = Session::connect_with(&address, options(Some(TlsOptions::with_ca(dir.join("ca.pem")))))
            .unwrap_or_else(|error| panic!("{address}: {error}"));
        session.list_pools().expect("served over TLS");
    }
}

/// The fenced block of `page` that holds `line`, without the indentation of the list item it
/// sits in.
fn fenced_block_with(page: &str, line: &str) -> String {
    let mut blocks = Vec::new();
    let mut current: Option<(usize, Vec<&str>)> = None;
    for text in page.lines() {
        let indent = text.len() - text.trim_start().len();
        match (&mut current, text.trim_start().starts_with("```")) {
            (None, true) => current = Some((indent, Vec::new())),
            (Some(_), true) => blocks.push(current.take().expect("in a block").1),
            (Some((indent, lines)), false) => lines.push(text.get(*indent..).unwrap_or("")),
            (None, false) => {}
        }
    }
    let found: Vec<String> =
        blocks.into_iter().map(|lines| lines.join("\n")).filter(|block| block.contains(line)).collect();
    assert_eq!(found.len(), 1, "one block of the page holds {line:?}");
    found.into_iter().next().expect("one block")
}

/// RESP clients (redis-cli --tls, redis-py with ssl=True) reach the same listener over TLS.
#[test]
fn resp_speaks_tls_too() {
    let pki = Pki::new("tls-resp");
    let server = TestServer::builder().resp().args(&pki.server_args(false)).start();
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(pki.dir.join("ca.pem")).expect("read the CA");
    for certificate in rustls_pki_types::pem::PemObject::pem_slice_iter(&ca) {
        roots.add(certificate.expect("a PEM certificate")).expect("a CA certificate");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("a name");
    let connection = rustls::ClientConnection::new(Arc::new(config), name).expect("a TLS client");
    let socket = std::net::TcpStream::connect(server.resp_addr(0)).expect("connect");
    let mut tls = rustls::StreamOwned::new(connection, socket);
    tls.write_all(b"*1\r\n$4\r\nPING\r\n").expect("PING");
    let mut reply = [0u8; 7];
    tls.read_exact(&mut reply).expect("the reply");
    assert_eq!(&reply, b"+PONG\r\n");
}

/// A server listening in clear beyond the loopback interface says so in its log.
#[test]
fn listening_in_clear_on_the_network_is_warned_about() {
    let server = TestServer::builder().listen_ip("0.0.0.0").start();
    assert!(server.stderr().contains("listening in clear"), "{}", server.stderr());
    let local = TestServer::builder().start();
    assert!(!local.stderr().contains("listening in clear"), "{}", local.stderr());
}
