//! `ferrite put` and `ferrite get` with values past the inline threshold, against a real
//! `ferrite-server`: they travel as direct transfers, `get` streams them to standard output, and
//! `--offset`/`--length` read slices. Small values must print exactly as they always did.
//!
//! Needs the server binary beside the CLI's (`cargo build -p ferrite-server`, as for `cli.rs`).

#[path = "../../ferrite-server/tests/common/mod.rs"]
mod common;
mod ferrite_process;

use std::io::Read;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::TestServer;
use ferrite_process::{command, fails, finish, run, server_binary, text};
use serde_json::{json, Value};

/// Longest one `ferrite` invocation may take before the test calls it hung (40 MiB through debug
/// builds of both sides takes a few seconds on a loaded machine).
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

const MIB: usize = 1 << 20;

/// `ferrite_client::DIRECT_THRESHOLD_BYTES`: the longest value that still travels inline.
const THRESHOLD: usize = 2 * MIB;

/// A one-shard server with a pool `p` large enough for every value these tests store.
fn server_with_pool() -> TestServer {
    let server = TestServer::builder_for(server_binary()).start();
    ok(&ferrite(&server, &["pool", "create", "p", "--size", "256MiB"]));
    server
}

fn ferrite(server: &TestServer, args: &[&str]) -> Output {
    ferrite_with_stdin(server, args, b"")
}

/// Runs `ferrite --addr <shard 0> ARGS` with `stdin` fed through a pipe.
fn ferrite_with_stdin(server: &TestServer, args: &[&str], stdin: &[u8]) -> Output {
    run(command(&server.addr_string(), args), stdin, CLI_TIMEOUT)
}

/// Asserts success with nothing on stderr (no progress line off a terminal) and returns stdout
/// as text.
#[track_caller]
fn ok(output: &Output) -> String {
    let stdout = ferrite_process::ok(output);
    assert!(output.stderr.is_empty(), "nothing on stderr when it is not a terminal: {}", text(&output.stderr));
    stdout
}

/// Asserts success and returns stdout's raw bytes.
#[track_caller]
fn ok_bytes(output: Output) -> Vec<u8> {
    ok(&output);
    output.stdout
}

/// `length` bytes no compressor or run-length shortcut could fake, the same for the same seed
/// (splitmix64).
fn random_bytes(length: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    let mut bytes = Vec::with_capacity(length + 8);
    while bytes.len() < length {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        bytes.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    bytes.truncate(length);
    bytes
}

/// Asserts two long values are equal without printing megabytes when they are not.
#[track_caller]
fn assert_same(got: &[u8], expected: &[u8], what: &str) {
    if got != expected {
        let first_difference = got.iter().zip(expected).position(|(a, b)| a != b);
        panic!(
            "{what}: got {} bytes, expected {}; first difference at {first_difference:?}",
            got.len(),
            expected.len()
        );
    }
}

/// A 5 MiB and a 40 MiB random value put from standard input (`-`) come back through `get`
/// byte for byte, streamed to standard output, with nothing on stderr; `attr` agrees on the
/// length. Standard input redirected from a file (whose size is known before reading) works the
/// same as a pipe.
#[test]
fn large_values_round_trip_through_stdin_and_stdout() {
    let server = server_with_pool();
    for (key, length, seed) in [("five", 5 * MIB, 5), ("forty", 40 * MIB, 40)] {
        let value = random_bytes(length, seed);
        let stored = ok(&ferrite_with_stdin(&server, &["put", "p", key, "-"], &value));
        assert_eq!(stored, format!("stored {} MiB under '{key}' in pool 'p'\n", length / MIB));
        assert_same(&ok_bytes(ferrite(&server, &["get", "p", key])), &value, key);
        let attr = ok(&ferrite(&server, &["--json", "attr", "p", key]));
        let attr: Value = serde_json::from_str(&attr).expect("JSON");
        assert_eq!(attr["length"], length);
    }

    let value = random_bytes(3 * MIB + 17, 3);
    let file = server.dir().join("value.bin");
    std::fs::write(&file, &value).expect("write the value to a file");
    let child = command(&server.addr_string(), &["put", "p", "from-file", "-"])
        .stdin(std::fs::File::open(&file).expect("open the value's file"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the ferrite binary");
    let stored = ok(&finish(child, CLI_TIMEOUT));
    assert_eq!(stored, "stored 3.0 MiB under 'from-file' in pool 'p'\n");
    assert_same(&ok_bytes(ferrite(&server, &["get", "p", "from-file"])), &value, "from a file");
}

/// `--offset` and `--length` read a slice: at the start, across piece boundaries in the middle,
/// to the end, clipped at the end; `--length` alone starts at 0. An offset at the very end reads
/// nothing; past it, the command fails with a message naming the offset and the value's length.
/// `--json` gives the slice with its offset and the whole value's length.
#[test]
fn offset_and_length_read_slices() {
    let server = server_with_pool();
    let length = 5 * MIB + 3;
    let value = random_bytes(length, 7);
    ok(&ferrite_with_stdin(&server, &["put", "p", "k", "-"], &value));
    let slice = |args: &[&str]| slice_of(&server, "k", args);

    assert_same(&slice(&["--offset", "0", "--length", "1000"]), &value[..1000], "start");
    assert_same(&slice(&["--length", "1000"]), &value[..1000], "--length alone starts at 0");
    let middle = 2 * MIB - 5;
    let middle_length = 2 * MIB + 10;
    assert_same(
        &slice(&["--offset", &middle.to_string(), "--length", &middle_length.to_string()]),
        &value[middle..middle + middle_length],
        "middle, across pieces",
    );
    let tail = length - 100;
    assert_same(&slice(&["--offset", &tail.to_string()]), &value[tail..], "to the end");
    assert_same(&slice(&["--offset", &tail.to_string(), "--length", "1000000"]), &value[tail..], "clipped at the end");
    assert!(slice(&["--offset", &length.to_string()]).is_empty(), "an offset at the end reads nothing");
    assert!(slice(&["--offset", "10", "--length", "0"]).is_empty());

    let past = (length + 1).to_string();
    let stderr = fails(&ferrite(&server, &["get", "p", "k", "--offset", &past]));
    assert!(
        stderr.contains("past the end") && stderr.contains(&past) && stderr.contains(&length.to_string()),
        "{stderr}"
    );
    fails(&ferrite(&server, &["--json", "get", "p", "k", "--offset", &past, "--length", "1"]));
    let stderr = fails(&ferrite(&server, &["get", "p", "absent", "--offset", "1"]));
    assert!(stderr.contains("'absent' not found"), "{stderr}");

    ok(&ferrite(&server, &["put", "p", "small", "hello world"]));
    assert_eq!(slice_of(&server, "small", &["--offset", "6"]), b"world", "small values slice too");
    let sliced = ok(&ferrite(&server, &["--json", "get", "p", "small", "--offset", "6", "--length", "3"]));
    let sliced: Value = serde_json::from_str(&sliced).expect("JSON");
    assert_eq!(
        sliced,
        json!({
            "pool": "p", "key": "small", "offset": 6, "length": 3, "value_length": 11,
            "encoding": "utf8", "value": "wor",
        })
    );
}

/// `put --offset` writes bytes inside an existing value, from an argument or from standard input
/// across pieces, and refuses a range past the end or an absent key.
#[test]
fn put_offset_writes_inside_a_value() {
    let server = server_with_pool();
    let mut value = random_bytes(5 * MIB, 9);
    ok(&ferrite_with_stdin(&server, &["put", "p", "k", "-"], &value));
    let patch = random_bytes(3 * MIB, 10);
    let at = MIB + 3;
    let said = ok(&ferrite_with_stdin(&server, &["put", "p", "k", "-", "--offset", &at.to_string()], &patch));
    assert!(said.starts_with("wrote 3 MiB at offset 1048579 of 'k'"), "{said}");
    value[at..at + patch.len()].copy_from_slice(&patch);
    ok(&ferrite(&server, &["put", "p", "k", "tail", "--offset", &(5 * MIB - 4).to_string(), "--durability", "sync"]));
    value[5 * MIB - 4..].copy_from_slice(b"tail");
    assert_same(&ok_bytes(ferrite(&server, &["get", "p", "k"])), &value, "after the offset writes");
    let stderr = fails(&ferrite(&server, &["put", "p", "k", "tail", "--offset", &(5 * MIB - 3).to_string()]));
    assert!(stderr.contains("pass the end"), "{stderr}");
    let stderr = fails(&ferrite(&server, &["put", "p", "absent", "x", "--offset", "0"]));
    assert!(stderr.contains("'absent' does not exist"), "{stderr}");
    assert_same(&ok_bytes(ferrite(&server, &["get", "p", "k"])), &value, "refused writes change nothing");
}

/// `ferrite get p KEY ARGS`'s standard output, asserting success.
fn slice_of(server: &TestServer, key: &str, args: &[&str]) -> Vec<u8> {
    let mut all = vec!["get", "p", key];
    all.extend_from_slice(args);
    ok_bytes(ferrite(server, &all))
}

/// Small values behave exactly as before: the same `put` line, the raw bytes with no newline
/// added, the same `--json` document. Values on either side of the threshold (the last inline,
/// the first direct) round-trip the same way.
#[test]
fn small_values_print_as_before() {
    let server = server_with_pool();
    assert_eq!(ok(&ferrite(&server, &["put", "p", "k", "hello"])), "stored 5 B under 'k' in pool 'p'\n");
    assert_eq!(ok_bytes(ferrite(&server, &["get", "p", "k"])), b"hello");
    let got: Value = serde_json::from_str(&ok(&ferrite(&server, &["--json", "get", "p", "k"]))).expect("JSON");
    assert_eq!(got, json!({ "pool": "p", "key": "k", "length": 5, "encoding": "utf8", "value": "hello" }));
    let binary: &[u8] = b"\x00\xff\r\n";
    ok(&ferrite_with_stdin(&server, &["put", "p", "bin", "-"], binary));
    assert_eq!(ok_bytes(ferrite(&server, &["get", "p", "bin"])), binary);
    let stderr = fails(&ferrite(&server, &["get", "p", "nope"]));
    assert!(stderr.contains("'nope' not found"), "{stderr}");

    for (key, length) in [("inline", THRESHOLD), ("direct", THRESHOLD + 1)] {
        let value = random_bytes(length, length as u64);
        ok(&ferrite_with_stdin(&server, &["put", "p", key, "-"], &value));
        assert_same(&ok_bytes(ferrite(&server, &["get", "p", key])), &value, key);
        let got = ok(&ferrite(&server, &["--json", "get", "p", key]));
        let got: Value = serde_json::from_str(&got).expect("JSON");
        assert_eq!((got["length"].as_u64(), got["encoding"].as_str()), (Some(length as u64), Some("hex")));
    }
}

/// A streamed `get` into a pipe that closes early (`| head -c 10`) stops and exits with status
/// 0, as a small value's does.
#[test]
fn streamed_get_into_a_pipe_closed_early_exits_zero() {
    let server = server_with_pool();
    let value = random_bytes(8 * MIB, 8);
    ok(&ferrite_with_stdin(&server, &["put", "p", "big", "-"], &value));
    let mut child = command(&server.addr_string(), &["get", "p", "big"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ferrite");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut first = [0u8; 10];
    stdout.read_exact(&mut first).expect("the value starts arriving");
    assert_eq!(first, value[..10]);
    drop(stdout);
    let deadline = Instant::now() + CLI_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "ferrite hung writing to a closed pipe");
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut stderr = String::new();
    child.stderr.take().expect("stderr is piped").read_to_string(&mut stderr).expect("read stderr");
    assert!(status.success(), "exit status {status} on a closed pipe; stderr: {stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

/// A value longer than the server's `limits.direct_value_bytes_max` is refused with the limit
/// named and nothing stored; a value of exactly the limit is stored and read back.
#[test]
fn a_value_over_the_direct_limit_is_refused() {
    let limit = 8 * MIB;
    let server = TestServer::builder_for(server_binary()).config("direct_value_bytes_max", limit).start();
    ok(&ferrite(&server, &["pool", "create", "p", "--size", "64MiB"]));
    let value = random_bytes(limit + 1, 9);
    let stderr = fails(&ferrite_with_stdin(&server, &["put", "p", "big", "-"], &value));
    assert!(
        stderr.contains(&(limit + 1).to_string())
            && stderr.contains(&limit.to_string())
            && stderr.contains("direct_value_bytes_max"),
        "{stderr}"
    );
    assert_eq!(ok(&ferrite(&server, &["count", "p"])), "0\n");
    ok(&ferrite_with_stdin(&server, &["put", "p", "big", "-"], &value[..limit]));
    assert_same(&ok_bytes(ferrite(&server, &["get", "p", "big"])), &value[..limit], "the largest value");
}
