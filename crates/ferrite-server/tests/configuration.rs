//! The server binary's configuration front: a file that gives only what it changes,
//! `--check-config` that validates a file and prints what is in effect, and log lines as JSON.

mod common;
mod pki;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{fresh_dir, TestServer};
use pki::Pki;

fn server_binary() -> &'static str {
    env!("CARGO_BIN_EXE_ferrite-server")
}

/// Runs `ferrite-server --check-config` on a file holding `text`.
fn check(dir: &Path, text: &str) -> Output {
    let path = dir.join("check.toml");
    std::fs::write(&path, text).expect("write the config");
    Command::new(server_binary()).arg("--check-config").arg(&path).output().expect("run ferrite-server")
}

/// Runs a server that is expected to refuse to start; one that starts anyway is stopped (by its
/// own process id) after [`common::STARTUP_TIMEOUT`], so the test fails instead of hanging.
fn run_refused(mut command: Command) -> Output {
    let child =
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run ferrite-server");
    let pid = child.id();
    let (done, finished) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let output = child.wait_with_output().expect("wait for ferrite-server");
        let _ = done.send(());
        output
    });
    if finished.recv_timeout(common::STARTUP_TIMEOUT).is_err() {
        let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
    }
    waiter.join().expect("the waiting thread")
}

/// A partial file is valid, and the printed configuration holds its settings and every default.
#[test]
fn check_config_prints_the_effective_configuration_of_a_partial_file() {
    let dir = fresh_dir("check-config");
    let output = check(&dir, "[durability]\ncommit_interval_ms = 5\n[[shards]]\n[[shards]]\nbacking = \"memory\"\n");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    assert!(stdout.contains("valid"), "{stdout}");
    for line in ["commit_interval_ms = 5", "port = 11911", "port = 11912", "backing = \"memory\"", "poll_us = 50"] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    assert!(!dir.join("ferrite-data").exists() && !Path::new("./ferrite-data").exists(), "nothing was started");
}

/// An unknown key or a value of the wrong type fails the check with a message naming the key.
#[test]
fn check_config_names_the_bad_key() {
    let dir = fresh_dir("check-config-bad");
    for (text, key) in [
        ("[limits]\nkey_bytes_max = \"big\"\n", "key_bytes_max"),
        ("[durability]\ncomit_interval_ms = 5\n", "comit_interval_ms"),
        ("[[shards]]\nbacking = \"tape\"\n", "tape"),
    ] {
        let output = check(&dir, text);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{text}: {output:?}");
        assert!(stderr.contains(key), "{text}: {stderr}");
        assert!(output.stdout.is_empty(), "nothing is printed as effective: {output:?}");
    }
}

/// A server started on a partial file runs with the file's settings and the defaults for the rest.
#[test]
fn a_server_starts_on_a_file_with_one_setting() {
    let dir = fresh_dir("partial-start");
    let path = dir.join("partial.toml");
    std::fs::write(&path, "[limits]\nkey_bytes_max = 8\n").expect("write the config");
    let server = TestServer::start(&["--config", path.to_str().expect("UTF-8 path")]);
    let session = ferrite_client::blocking::Session::connect(&server.addr_string()).expect("connect");
    assert_eq!(session.limits().key_bytes_max, 8, "the file's limit is in force");
    assert_eq!(session.limits().value_bytes_max, 2 << 20, "the default limit is in force");
    let pool = session.create_pool("partial", ferrite_client::PoolOptions::default()).expect("create a pool");
    pool.put(b"12345678", b"fits").expect("an 8-byte key");
    pool.put(b"123456789", b"too long").expect_err("a 9-byte key is over the file's limit");
}

/// `--log-format json` writes every log line as one JSON object with the level and the message.
#[test]
fn json_logs_are_one_object_per_line() {
    let server = TestServer::start(&["--log-format", "json"]);
    let stderr = server.stderr();
    let lines: Vec<&str> = stderr.lines().filter(|line| !line.is_empty()).collect();
    assert!(!lines.is_empty(), "the server logs its recovery at start");
    for line in lines {
        let object: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(object["level"].is_string() && object["fields"].is_object(), "{line}");
    }
    assert!(!stderr.contains('\u{1b}'), "no colour codes in JSON logs");
}

/// Text logs carry colour codes only on a terminal; the tests' stderr is a file.
#[test]
fn text_logs_have_no_colour_off_a_terminal() {
    let server = TestServer::start(&[]);
    let stderr = server.stderr();
    assert!(stderr.contains("INFO"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
}

/// Under a `Type=notify` systemd unit the server tells the service manager when it is ready
/// (after the announcement: every shard recovered and listening) and when it starts stopping.
#[test]
fn the_service_manager_hears_ready_and_stopping() {
    let dir = fresh_dir("notify");
    let socket_path = dir.join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).expect("bind the notify socket");
    socket.set_read_timeout(Some(std::time::Duration::from_secs(20))).expect("timeout");
    let server = TestServer::builder().env("NOTIFY_SOCKET", socket_path.display().to_string()).start();
    let mut message = [0u8; 256];
    let n = socket.recv(&mut message).expect("the server notifies once it is ready");
    assert_eq!(&message[..n], b"READY=1\n");
    let addr = server.addr_string();
    ferrite_client::blocking::Session::connect(&addr).expect("ready means serving");
    server.stop_gracefully();
    let n = socket.recv(&mut message).expect("the server notifies when it stops");
    assert_eq!(&message[..n], b"STOPPING=1\n");
}

/// A `--log-level` that names no level (a word alone that is not one, which the filter syntax
/// would take for a target and then log nothing at all) or an unknown level is a usage error
/// (status 2) that names it, before anything starts; a level or a `target=level` filter is
/// taken and logs.
#[test]
fn a_log_level_that_is_not_one_is_a_usage_error() {
    let dir = fresh_dir("log-level");
    let data_dir = dir.join("data");
    for bogus in ["bogus", "info,verbose", "ferrite_server=loud"] {
        let mut command = Command::new(server_binary());
        command.args(["--log-level", bogus, "--listen", "127.0.0.1:0", "--data-dir"]).arg(&data_dir);
        let output = run_refused(command);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{bogus}: {output:?}");
        assert!(stderr.contains("--log-level") && stderr.contains(bogus), "{bogus}: {stderr}");
        assert!(!data_dir.exists(), "{bogus}: nothing was started");
    }
    for (level, logged) in [("warn", None), ("ferrite_server=info", Some("INFO")), ("INFO", Some("INFO"))] {
        let server = TestServer::start(&["--log-level", level]);
        let session = ferrite_client::blocking::Session::connect(&server.addr_string()).expect("connect");
        session.list_pools().expect("served");
        let stderr = server.stderr();
        match logged {
            Some(text) => assert!(stderr.contains(text), "{level}: {stderr}"),
            None => assert!(!stderr.contains("INFO"), "{level}: {stderr}"),
        }
    }
}

/// Proves that a file the configuration names but the server cannot use is refused alike by
/// `--check-config` (status 1, nothing printed as effective) and by a start (status 1), each
/// naming the file and the problem (`expected`), and that the start refuses it before it creates
/// the data directory, let alone recovers it.
fn refused_by_the_check_and_at_start(label: &str, args: &[String], expected: &[&str]) {
    let dir = fresh_dir(label);
    let config = dir.join("ferrite.toml");
    std::fs::write(&config, "").expect("an empty configuration");
    let checked = Command::new(server_binary()).arg("--check-config").arg(&config).args(args).output();
    let checked = checked.expect("run ferrite-server --check-config");
    let stderr = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(checked.status.code(), Some(1), "--check-config {args:?}: {checked:?}");
    assert!(checked.stdout.is_empty(), "nothing is printed as effective: {checked:?}");
    for text in expected {
        assert!(stderr.contains(text), "--check-config {args:?}: {text:?} missing from {stderr}");
    }
    let data_dir = dir.join("data");
    let mut start = Command::new(server_binary());
    start.args(args).args(["--listen", "127.0.0.1:0", "--data-dir"]).arg(&data_dir);
    let started = run_refused(start);
    let stderr = String::from_utf8_lossy(&started.stderr);
    assert_eq!(started.status.code(), Some(1), "start with {args:?}: {started:?}");
    for text in expected {
        assert!(stderr.contains(text), "start with {args:?}: {text:?} missing from {stderr}");
    }
    assert!(!stderr.contains("shard recovered"), "refused before recovering: {stderr}");
    assert!(!data_dir.exists(), "refused before creating the data directory");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_users_file_that_does_not_exist_is_refused_by_the_check_and_at_start() {
    let missing = fresh_dir("users-missing").join("users.toml").display().to_string();
    refused_by_the_check_and_at_start(
        "users-missing-run",
        &["--users".into(), missing.clone()],
        &[&missing, "No such file"],
    );
}

#[test]
fn a_users_file_with_a_bad_password_hash_is_refused_by_the_check_and_at_start() {
    let file = fresh_dir("users-bad-hash").join("users.toml");
    std::fs::write(&file, "[users.alice]\npassword = \"correct horse\"\n").expect("write the users file");
    let shown = file.display().to_string();
    refused_by_the_check_and_at_start("users-bad-hash-run", &["--users".into(), shown.clone()], &[&shown, "alice"]);
}

#[test]
fn a_tls_key_of_another_key_pair_is_refused_by_the_check_and_at_start() {
    let pki = Pki::new("tls-other-key");
    let args = ["--tls-cert".into(), pki.path("server.pem"), "--tls-key".into(), pki.path("client-key.pem")];
    refused_by_the_check_and_at_start(
        "tls-other-key-run",
        &args,
        &[&pki.path("client-key.pem"), "is not the key of the certificate"],
    );
}

#[test]
fn a_certificate_that_is_not_pem_is_refused_by_the_check_and_at_start() {
    use rustls_pki_types::pem::PemObject;
    let pki = Pki::new("tls-der");
    let der = rustls_pki_types::CertificateDer::from_pem_file(pki.dir.join("server.pem")).expect("the certificate");
    let der_file = pki.dir.join("server.der");
    std::fs::write(&der_file, der.as_ref()).expect("write it as DER");
    let shown = der_file.display().to_string();
    let args = ["--tls-cert".into(), shown.clone(), "--tls-key".into(), pki.path("server-key.pem")];
    refused_by_the_check_and_at_start("tls-der-run", &args, &[&shown, "PEM"]);
}
