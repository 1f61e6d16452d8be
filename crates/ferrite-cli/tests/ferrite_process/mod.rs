//! Running the `ferrite` binary in tests against a real `ferrite-server`: its sibling in Cargo's
//! target directory, fed and drained through pipes, with a deadline, and the checks of what it
//! printed that every CLI test makes.

#![allow(dead_code)] // Each test file uses its own part of this module.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest one `ferrite` invocation may take before the test calls it hung.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(30);

/// The server binary beside the CLI's. Cargo builds it only for `ferrite-server`'s own tests, so
/// `cargo build -p ferrite-server` (or `cargo build --workspace --bins`, as the Makefile does)
/// must have run first.
pub fn server_binary() -> PathBuf {
    let cli = PathBuf::from(env!("CARGO_BIN_EXE_ferrite"));
    let server = cli.with_file_name(format!("ferrite-server{}", std::env::consts::EXE_SUFFIX));
    assert!(
        server.exists(),
        "{} is missing: these tests run the real server; run `cargo build -p ferrite-server` first",
        server.display()
    );
    server
}

/// `ferrite --addr ADDRESS ARGS`, with no `FERRITE_ADDR` from the test runner's environment.
pub fn command(address: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    command.env_remove("FERRITE_ADDR").arg("--addr").arg(address).args(args);
    command
}

/// Runs `ferrite ARGS` with no server address (for `check`, which needs none).
pub fn ferrite_offline(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    command.env_remove("FERRITE_ADDR").args(args);
    run(command, b"", CLI_TIMEOUT)
}

/// Runs `command` with `stdin` fed through a pipe and returns what it did; panics if it runs
/// past `timeout`.
pub fn run(mut command: Command, stdin: &[u8], timeout: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the ferrite binary");
    // Fed and drained from threads so a full pipe can never deadlock the test.
    let mut input = child.stdin.take().expect("stdin is piped");
    let stdin = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        // A command that does not read stdin may exit first; that is not a failure.
        let _ = input.write_all(&stdin);
    });
    let output = finish(child, timeout);
    writer.join().expect("stdin writer");
    output
}

/// Collects a started `ferrite`'s output (its stdout and stderr piped), killing it if it runs past
/// `timeout`.
pub fn finish(mut child: Child, timeout: Duration) -> Output {
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).expect("read the command's output");
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout is piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr is piped")));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for ferrite") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ferrite did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output { status, stdout: stdout.join().expect("stdout reader"), stderr: stderr.join().expect("stderr reader") }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts success and returns stdout as text.
#[track_caller]
pub fn ok(output: &Output) -> String {
    assert!(
        output.status.success(),
        "ferrite failed with {}\nstdout: {}\nstderr: {}",
        output.status,
        text(&output.stdout),
        text(&output.stderr)
    );
    text(&output.stdout)
}

/// Asserts exit status 1 with nothing on stdout and `error: ...` on stderr; returns stderr.
#[track_caller]
pub fn fails(output: &Output) -> String {
    let stderr = text(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(1),
        "expected exit status 1\nstdout: {}\nstderr: {stderr}",
        text(&output.stdout)
    );
    assert!(output.stdout.is_empty(), "a failure prints nothing on stdout, got {} bytes", output.stdout.len());
    assert!(stderr.starts_with("error: "), "errors are reported as `error: ...`: {stderr:?}");
    stderr
}
