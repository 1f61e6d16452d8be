//! The `ferrite` command against a real `ferrite-server`: what it prints, where, and with which
//! exit status.
//!
//! The server binary is the sibling of the CLI binary in Cargo's target directory. Cargo builds it
//! only for `ferrite-server`'s own tests, so run `cargo build -p ferrite-server` (or
//! `cargo build --workspace --bins`, as the Makefile does) before these tests.

#[path = "../../ferrite-server/tests/common/mod.rs"]
mod common;
mod ferrite_process;
#[path = "../../ferrite-server/tests/pki/mod.rs"]
mod pki;

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{crc32, TestServer};
use ferrite_process::{command, fails, ferrite_offline, ok, run, server_binary, text, CLI_TIMEOUT};
use serde_json::Value;

fn start_server(shards: usize) -> TestServer {
    TestServer::builder_for(server_binary()).shards(shards).start()
}

/// Runs `ferrite --addr <shard 0> ARGS`, feeding `stdin`, and returns what it did.
fn ferrite_with_stdin(server: &TestServer, args: &[&str], stdin: &[u8]) -> Output {
    run(command(&server.addr_string(), args), stdin, CLI_TIMEOUT)
}

fn ferrite(server: &TestServer, args: &[&str]) -> Output {
    ferrite_with_stdin(server, args, b"")
}

#[track_caller]
fn json(output: &Output) -> Value {
    let stdout = ok(output);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("--json output is not JSON ({e}): {stdout}"))
}

/// `pool create` creates and then reports an existing pool, refuses one with `--create-only`;
/// `pool list` shows pools with their shard and settings; `pool open` describes a pool; `pool
/// delete` removes it, and deleting it again says it does not exist.
#[test]
fn pool_create_list_open_and_delete() {
    let server = start_server(1);
    assert_eq!(ok(&ferrite(&server, &["pool", "list"])), "no pools\n");

    let created = ok(&ferrite(&server, &["pool", "create", "demo", "--size", "1MiB"]));
    assert_eq!(created, "created pool 'demo' on shard 0 (1 MiB)\n");
    let again = ok(&ferrite(&server, &["pool", "create", "demo"]));
    assert!(again.contains("already exists") && again.contains("1 MiB"), "keeps its size: {again}");
    let refused = fails(&ferrite(&server, &["pool", "create", "demo", "--create-only"]));
    assert!(refused.contains("already exists"), "{refused}");

    ok(&ferrite(&server, &["put", "demo", "k", "value"]));
    let list = ok(&ferrite(&server, &["pool", "list"]));
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 2, "a header and one pool: {list}");
    let columns: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        columns,
        [
            "NAME",
            "SHARD",
            "OBJECTS",
            "SIZE",
            "USED",
            "OPENS",
            "MEMORY",
            "BYTES/KEY",
            "LOAD",
            "INDEXED",
            "DURABILITY",
            "PLUGINS"
        ]
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(row[..8], ["demo", "0", "1", "1", "MiB", "70", "B", "0"], "{list}");
    assert_eq!(row[row.len() - 3..], ["no", "sync", "-"], "not indexed, sync, no plugin chain: {list}");
    // The memory figures agree with the JSON listing's: one pair carries the whole table.
    let memory = &json(&ferrite(&server, &["--json", "pool", "list"]))["pools"][0]["memory"];
    let total = memory["total_bytes"].as_u64().expect("total bytes");
    assert_eq!(row[10..12], [format!("{total}.0"), format!("{:.3}", memory["table_load"].as_f64().expect("load"))]);

    let open = ok(&ferrite(&server, &["pool", "open", "demo"]));
    assert!(open.lines().any(|l| l.split_whitespace().eq(["objects", "1"])), "{open}");
    assert!(open.lines().any(|l| l.starts_with("used") && l.contains("70 B")), "{open}");

    assert_eq!(ok(&ferrite(&server, &["pool", "delete", "demo"])), "deleted pool 'demo'\n");
    assert_eq!(ok(&ferrite(&server, &["pool", "list"])), "no pools\n");
    let missing = fails(&ferrite(&server, &["pool", "delete", "demo"]));
    assert!(missing.contains("does not exist"), "{missing}");
}

/// `pool create` on an existing pool accepts the options that match it or are not given, and
/// refuses, changing nothing, any that differ (size, index, durability, plugins), naming each;
/// `pool list`, `pool open` and `attr` show whether a pool is indexed, its default durability
/// and its plugins, as text and as JSON.
#[test]
fn pool_create_refuses_settings_an_existing_pool_lacks_and_listings_show_them() {
    let server = start_server(2);
    let settings = ["--size", "1MiB", "--indexed", "--durability", "async", "--plugins", "counter"];
    let create = |extra: &[&str]| ferrite(&server, &[&["pool", "create", "tuned"][..], extra].concat());
    ok(&create(&settings));
    for same in [&[][..], &settings, &["--size", "1MiB"], &["--indexed"], &["--plugins", "counter"]] {
        let again = ok(&create(same));
        assert!(again.contains("already exists"), "{same:?}: {again}");
    }
    let refused = fails(&create(&["--size", "2MiB", "--durability", "sync", "--plugins", "counter,versioning"]));
    assert!(refused.contains("pool 'tuned' already exists with other settings"), "{refused}");
    for difference in
        ["size 1 MiB (asked: 2 MiB)", "durability async (asked: sync)", "plugins counter (asked: counter,versioning)"]
    {
        assert!(refused.contains(difference), "names {difference:?}: {refused}");
    }
    ok(&ferrite(&server, &["pool", "create", "plain"]));
    let refused = fails(&ferrite(&server, &["pool", "create", "plain", "--indexed"]));
    assert!(refused.contains("not indexed (asked: --indexed") && refused.contains("pool configure"), "{refused}");

    let open = ok(&ferrite(&server, &["pool", "open", "tuned"]));
    let attr = ok(&ferrite(&server, &["attr", "tuned"]));
    for shown in [&open, &attr] {
        for (field, value) in [("indexed", "yes"), ("durability", "async"), ("plugins", "counter")] {
            assert!(shown.lines().any(|l| l.split_whitespace().eq([field, value])), "{field} {value}: {shown}");
        }
    }
    for args in [&["--json", "pool", "open", "tuned"][..], &["--json", "attr", "tuned"]] {
        let shown = json(&ferrite(&server, args));
        assert_eq!((shown["indexed"].clone(), shown["durability"].clone()), (true.into(), "async".into()), "{shown}");
        assert_eq!(shown["plugins"], serde_json::json!(["counter"]), "{shown}");
    }
    let list = json(&ferrite(&server, &["--json", "pool", "list"]));
    let pool = |name: &str| list["pools"].as_array().expect("pools").iter().find(|p| p["name"] == name).cloned();
    let (tuned, plain) = (pool("tuned").expect("tuned"), pool("plain").expect("plain"));
    assert_eq!((tuned["indexed"].clone(), tuned["durability"].clone()), (true.into(), "async".into()));
    assert_eq!((plain["indexed"].clone(), plain["durability"].clone()), (false.into(), "sync".into()));
    let table = ok(&ferrite(&server, &["pool", "list"]));
    let row = table.lines().find(|l| l.starts_with("tuned")).expect("a row for tuned");
    assert!(row.split_whitespace().rev().take(3).eq(["counter", "async", "yes"]), "{table}");
    ok(&ferrite(&server, &["pool", "configure", "plain", "--add-index"]));
    assert_eq!(json(&ferrite(&server, &["--json", "attr", "plain"]))["indexed"], true, "an index added later shows");
}

/// `put POOL KEY -` stores standard input byte for byte (a NUL, invalid UTF-8, no trailing
/// newline) and `get` writes exactly those bytes to stdout, adding nothing.
#[test]
fn put_from_stdin_then_get_writes_the_exact_bytes() {
    let server = start_server(1);
    ok(&ferrite(&server, &["pool", "create", "bin"]));
    let value: &[u8] = b"bin\x00ary\xff\xfe\r\nend";
    let stored = ok(&ferrite_with_stdin(&server, &["put", "bin", "blob", "-"], value));
    assert!(stored.contains(&format!("{} B", value.len())), "{stored}");
    let got = ferrite(&server, &["get", "bin", "blob"]);
    ok(&got);
    assert_eq!(got.stdout, value, "get writes the raw value and nothing else");
    assert!(got.stderr.is_empty(), "{}", text(&got.stderr));

    let empty = ok(&ferrite_with_stdin(&server, &["put", "bin", "empty", "-"], b""));
    assert!(empty.contains("0 B"), "{empty}");
    let got = ferrite(&server, &["get", "bin", "empty"]);
    ok(&got);
    assert!(got.stdout.is_empty(), "an empty value prints nothing");

    ok(&ferrite(&server, &["put", "bin", "text", "hello world"]));
    assert_eq!(ferrite(&server, &["get", "bin", "text"]).stdout, b"hello world");
}

/// `get` of a missing key exits with status 1, says so on stderr, and writes nothing to stdout
/// (so `ferrite get p k > file` never leaves an error message in the file).
#[test]
fn get_of_a_missing_key_exits_1_with_nothing_on_stdout() {
    let server = start_server(1);
    ok(&ferrite(&server, &["pool", "create", "p"]));
    let stderr = fails(&ferrite(&server, &["get", "p", "nope"]));
    assert!(stderr.contains("'nope'") && stderr.contains("not found"), "{stderr}");
    let stderr = fails(&ferrite(&server, &["--json", "get", "p", "nope"]));
    assert!(stderr.contains("not found"), "{stderr}");
}

/// `erase` removes a key (and fails for an absent one), and `count` follows.
#[test]
fn erase_and_count() {
    let server = start_server(1);
    ok(&ferrite(&server, &["pool", "create", "p"]));
    assert_eq!(ok(&ferrite(&server, &["count", "p"])), "0\n");
    for key in ["a", "b", "c"] {
        ok(&ferrite(&server, &["put", "p", key, "v"]));
    }
    assert_eq!(ok(&ferrite(&server, &["count", "p"])), "3\n");
    assert_eq!(ok(&ferrite(&server, &["erase", "p", "b"])), "erased 'b' from pool 'p'\n");
    assert_eq!(ok(&ferrite(&server, &["count", "p"])), "2\n");
    let stderr = fails(&ferrite(&server, &["erase", "p", "b"]));
    assert!(stderr.contains("not found"), "{stderr}");
    fails(&ferrite(&server, &["get", "p", "b"]));
    assert_eq!(ok(&ferrite(&server, &["count", "p"])), "2\n");
}

/// `put --create-only` refuses to overwrite and `put --update-only` refuses to create, each with a
/// message naming the flag, and neither changes the pool; both flags at once are a usage error.
#[test]
fn put_create_only_and_update_only() {
    let server = start_server(1);
    ok(&ferrite(&server, &["pool", "create", "p"]));
    ok(&ferrite(&server, &["put", "p", "k", "old", "--create-only"]));
    let stderr = fails(&ferrite(&server, &["put", "p", "k", "new", "--create-only"]));
    assert!(stderr.contains("already exists") && stderr.contains("--create-only"), "{stderr}");
    assert_eq!(ferrite(&server, &["get", "p", "k"]).stdout, b"old");

    let stderr = fails(&ferrite(&server, &["put", "p", "absent", "v", "--update-only"]));
    assert!(stderr.contains("does not exist") && stderr.contains("--update-only"), "{stderr}");
    fails(&ferrite(&server, &["get", "p", "absent"]));
    ok(&ferrite(&server, &["put", "p", "k", "new", "--update-only"]));
    assert_eq!(ferrite(&server, &["get", "p", "k"]).stdout, b"new");

    let usage = ferrite(&server, &["put", "p", "k", "v", "--create-only", "--update-only"]);
    assert_eq!(usage.status.code(), Some(2), "conflicting flags are a usage error");
}

/// `attr POOL KEY` shows the value's length and its zlib CRC-32; `attr POOL` the pool's counts.
#[test]
fn attr_shows_value_and_pool_attributes() {
    let server = start_server(1);
    ok(&ferrite(&server, &["pool", "create", "p", "--size", "4096"]));
    ok(&ferrite(&server, &["put", "p", "check", "123456789"]));
    let attr = ok(&ferrite(&server, &["attr", "p", "check"]));
    assert!(attr.lines().any(|l| l.split_whitespace().eq(["length", "9", "B"])), "{attr}");
    assert!(attr.lines().any(|l| l.split_whitespace().eq(["crc32", "0xcbf43926"])), "{attr}");
    assert!(attr.lines().any(|l| l.starts_with("write_time") && l.trim_end().ends_with('Z')), "{attr}");

    let pool = ok(&ferrite(&server, &["attr", "p"]));
    assert!(pool.lines().any(|l| l.split_whitespace().eq(["objects", "1"])), "{pool}");
    assert!(pool.lines().any(|l| l.starts_with("used") && l.contains("78 B")), "5 + 9 + 64 bytes: {pool}");
    let stderr = fails(&ferrite(&server, &["attr", "p", "missing"]));
    assert!(stderr.contains("not found"), "{stderr}");
}

/// `stats` prints one row per counter and one column per shard, counting what was done.
#[test]
fn stats_show_every_shards_counters() {
    let server = start_server(2);
    ok(&ferrite(&server, &["pool", "create", "p"]));
    ok(&ferrite(&server, &["put", "p", "k", "v"]));
    ok(&ferrite(&server, &["put", "p", "k", "w"]));
    let stats = ok(&ferrite(&server, &["stats"]));
    let header: Vec<&str> = stats.lines().next().expect("a header").split_whitespace().collect();
    assert_eq!(header, ["COUNTER", "SHARD", "0", "SHARD", "1"], "{stats}");
    let row = |name: &str| -> Vec<u64> {
        let line = stats.lines().find(|l| l.split_whitespace().next() == Some(name));
        let line = line.unwrap_or_else(|| panic!("no {name} row: {stats}"));
        line.split_whitespace().skip(1).map(|v| v.parse().expect("a number")).collect()
    };
    assert_eq!(row("puts").iter().sum::<u64>(), 2, "{stats}");
    assert_eq!(row("pools").iter().sum::<u64>(), 1, "{stats}");
    assert_eq!(row("shard"), [0, 1]);
    for name in ["requests", "gets", "erases", "failures", "clients", "clients_total", "uptime_ms", "memory_bytes"] {
        assert_eq!(row(name).len(), 2, "{name}: {stats}");
    }
    assert_eq!(row("objects").iter().sum::<u64>(), 1, "{stats}");

    // Below the counters, each pool's memory by part.
    let pools = stats.split("\n\n").nth(1).unwrap_or_else(|| panic!("no pool table: {stats}"));
    let header: Vec<&str> = pools.lines().next().expect("a header").split_whitespace().collect();
    let expected =
        ["POOL", "SHARD", "OBJECTS", "MEMORY", "BYTES/KEY", "LOAD", "TABLE", "SLABS", "LARGE", "OTHER", "INDEX"];
    assert_eq!(header, expected, "{stats}");
    let pool = pools.lines().nth(1).expect("one pool").split_whitespace().collect::<Vec<_>>();
    assert_eq!((pool[0], pool[2]), ("p", "1"), "{stats}");
    assert_eq!(&pool[pool.len() - 2..], ["0", "B"], "an unindexed pool has no index bytes: {stats}");
}

/// With `--json` every command prints one JSON document with the documented fields; a binary
/// value comes back as hex, text as a string.
#[test]
fn json_output_parses_with_the_expected_fields() {
    let server = start_server(2);
    let created = json(&ferrite(&server, &["--json", "pool", "create", "j", "--size", "1MiB"]));
    assert_eq!(created["pool"], "j");
    assert_eq!(created["created"], true);
    assert_eq!(created["size_bytes"], 1 << 20);
    assert_eq!(created["objects"], 0);
    let shard = created["shard"].as_u64().expect("shard is a number");
    assert!(shard < 2);

    let put = json(&ferrite(&server, &["put", "j", "text", "héllo", "--json"]));
    assert_eq!(
        (put["pool"].clone(), put["key"].clone(), put["stored"].clone()),
        ("j".into(), "text".into(), true.into())
    );
    assert_eq!(put["length"], "héllo".len());
    ok(&ferrite_with_stdin(&server, &["put", "j", "blob", "-"], b"\x00\xff"));

    let got = json(&ferrite(&server, &["--json", "get", "j", "text"]));
    assert_eq!(got["value"], "héllo");
    assert_eq!(got["encoding"], "utf8");
    assert_eq!(got["length"], 6);
    let got = json(&ferrite(&server, &["--json", "get", "j", "blob"]));
    assert_eq!(got["value"], "00ff");
    assert_eq!(got["encoding"], "hex");

    assert_eq!(json(&ferrite(&server, &["--json", "count", "j"]))["count"], 2);
    let attr = json(&ferrite(&server, &["--json", "attr", "j", "text"]));
    assert_eq!(attr["length"], 6);
    assert_eq!(attr["crc32"], crc32("héllo".as_bytes()));
    assert!(attr["write_time_ns"].as_u64().is_some_and(|t| t > 1_600_000_000_000_000_000), "{attr}");
    let pool = json(&ferrite(&server, &["--json", "attr", "j"]));
    assert_eq!(pool["objects"], 2);
    assert_eq!(pool["size_bytes"], 1 << 20);
    assert_eq!(pool["used_bytes"], (4 + 6 + 64) + (4 + 2 + 64));
    let open = json(&ferrite(&server, &["--json", "pool", "open", "j"]));
    assert_eq!(open["objects"], 2);
    assert_eq!(open["shard"], shard);

    let list = json(&ferrite(&server, &["--json", "pool", "list"]));
    let pools = list["pools"].as_array().expect("pools is an array");
    assert_eq!(pools.len(), 1);
    assert_eq!(pools[0]["name"], "j");
    assert_eq!(pools[0]["shard"], shard);
    assert_eq!(pools[0]["objects"], 2);
    assert_eq!(pools[0]["open_count"], 0);
    let memory = &pools[0]["memory"];
    let part = |name: &str| memory[name].as_u64().unwrap_or_else(|| panic!("{name} is a number: {memory}"));
    let parts = ["table_bytes", "slab_bytes", "large_bytes", "other_bytes", "index_bytes"];
    assert_eq!(part("total_bytes"), parts.iter().map(|name| part(name)).sum::<u64>(), "{memory}");
    assert_eq!(part("table_bytes"), part("table_buckets") * 64, "{memory}");
    assert_eq!(memory["bytes_per_key"].as_f64(), Some(part("total_bytes") as f64 / 2.0), "{memory}");

    let stats = json(&ferrite(&server, &["--json", "stats"]));
    let shards = stats["shards"].as_array().expect("shards is an array");
    assert_eq!(shards.len(), 2);
    for (index, entry) in shards.iter().enumerate() {
        assert_eq!(entry["shard"], index);
        assert_eq!(entry["counters"]["shard"], index);
    }
    let puts: u64 = shards.iter().map(|s| s["counters"]["puts"].as_u64().expect("puts")).sum();
    assert_eq!(puts, 2);
    assert_eq!(stats["pools"], list["pools"], "stats lists the pools as pool list does");

    assert_eq!(json(&ferrite(&server, &["--json", "erase", "j", "blob"]))["erased"], true);
    assert_eq!(json(&ferrite(&server, &["--json", "pool", "delete", "j"]))["deleted"], true);
}

/// Every key-value command on a pool that does not exist fails and tells the user the command
/// that creates it, quoted for the shell when the name needs it.
#[test]
fn operations_on_a_missing_pool_suggest_pool_create() {
    let server = start_server(1);
    for args in [
        &["get", "nosuch", "k"][..],
        &["put", "nosuch", "k", "v"],
        &["erase", "nosuch", "k"],
        &["count", "nosuch"],
        &["attr", "nosuch"],
        &["pool", "open", "nosuch"],
    ] {
        let stderr = fails(&ferrite(&server, args));
        assert!(stderr.contains("`ferrite pool create nosuch`"), "{args:?}: {stderr}");
    }
    let stderr = fails(&ferrite(&server, &["count", "my pool"]));
    assert!(stderr.contains("`ferrite pool create 'my pool'`"), "{stderr}");
    assert_eq!(ok(&ferrite(&server, &["pool", "list"])), "no pools\n", "nothing was created");
}

/// `pool delete` of a pool another session holds open is refused with an explanation, and works
/// once that session closes it.
#[test]
fn deleting_a_pool_open_elsewhere_is_refused() {
    let server = start_server(1);
    let session = ferrite_client::blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = session.create_pool("held", ferrite_client::PoolOptions::default()).expect("create");
    let stderr = fails(&ferrite(&server, &["pool", "delete", "held"]));
    assert!(stderr.contains("is open"), "{stderr}");
    let list = ok(&ferrite(&server, &["pool", "list"]));
    // NAME, SHARD, OBJECTS, then SIZE and USED as a number and a unit each, then OPENS.
    let opens = list.lines().nth(1).and_then(|row| row.split_whitespace().nth(7));
    assert_eq!(opens, Some("1"), "one open: {list}");
    pool.close().expect("close");
    ok(&ferrite(&server, &["pool", "delete", "held"]));
}

/// On a two-shard server, the CLI given shard 0's address reaches pools on either shard.
#[test]
fn pools_on_every_shard_are_reached_through_one_address() {
    let server = start_server(2);
    for name in ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"] {
        ok(&ferrite(&server, &["pool", "create", name]));
        ok(&ferrite(&server, &["put", name, "k", name]));
        assert_eq!(ferrite(&server, &["get", name, "k"]).stdout, name.as_bytes());
    }
    let list = json(&ferrite(&server, &["--json", "pool", "list"]));
    let shards: std::collections::BTreeSet<u64> =
        list["pools"].as_array().expect("pools").iter().map(|p| p["shard"].as_u64().expect("shard")).collect();
    assert_eq!(shards.len(), 2, "the names cover both shards: {list}");
}

/// `FERRITE_ADDR` chooses the server when `--addr` is not given.
#[test]
fn ferrite_addr_chooses_the_server() {
    let server = start_server(1);
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    command.env("FERRITE_ADDR", server.addr_string()).args(["pool", "list"]);
    let output = run(command, b"", CLI_TIMEOUT);
    assert_eq!(ok(&output), "no pools\n");
}

/// Pointed at an address where no server listens, the CLI fails with exit status 1 and says how
/// to choose the server.
#[test]
fn an_unreachable_server_is_explained() {
    // A port that was free a moment ago and that nobody listens on now.
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("address").port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    command.env_remove("FERRITE_ADDR").args(["--addr", &format!("127.0.0.1:{port}"), "pool", "list"]);
    let stderr = fails(&run(command, b"", CLI_TIMEOUT));
    assert!(stderr.contains(&format!("127.0.0.1:{port}")), "names the address: {stderr}");
    assert!(stderr.contains("--addr") && stderr.contains("FERRITE_ADDR"), "{stderr}");
}

/// `ferrite get` into a pipe that closes early (`| head -c 10`) is not an error: exit status 0.
#[test]
fn get_into_a_pipe_closed_early_exits_zero() {
    let server = start_server(1);
    ok(&ferrite(&server, &["pool", "create", "p"]));
    ok(&ferrite_with_stdin(&server, &["put", "p", "big", "-"], &vec![b'x'; 1 << 20]));
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .env_remove("FERRITE_ADDR")
        .args(["--addr", &server.addr_string(), "get", "p", "big"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ferrite");
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let mut first = [0u8; 10];
    stdout.read_exact(&mut first).expect("the value starts arriving");
    assert_eq!(&first, b"xxxxxxxxxx");
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
}

/// `ferrite check` verifies a stopped server's data directory: counts what it holds, refuses a
/// directory a server is using, and reports damage (naming the file) with exit status 1.
#[test]
fn check_verifies_a_data_directory_and_reports_damage() {
    let data_dir = common::fresh_dir("check").join("data");
    let data = data_dir.display().to_string();
    let server = TestServer::builder_for(server_binary()).data_dir(&data_dir).start();
    assert!(ferrite(&server, &["pool", "create", "checked"]).status.success());
    for i in 0..20 {
        let key = format!("key-{i}");
        assert!(ferrite(&server, &["put", "checked", &key, "a value"]).status.success());
    }
    let busy = ferrite_offline(&["check", &data]);
    assert_eq!(busy.status.code(), Some(2), "a directory in use is refused: {busy:?}");
    assert!(String::from_utf8_lossy(&busy.stderr).contains("in use"), "{busy:?}");
    server.stop_gracefully();

    let healthy = ferrite_offline(&["check", &data]);
    let text = String::from_utf8_lossy(&healthy.stdout);
    assert!(healthy.status.success(), "{healthy:?}");
    assert!(text.contains("pool 'checked'") && text.contains("20 objects") && text.contains("ok:"), "{text}");
    let json = ferrite_offline(&["--json", "check", &data]);
    let report: Value = serde_json::from_slice(&json.stdout).expect("--json prints JSON");
    assert_eq!(report["ok"], Value::Bool(true));
    assert_eq!(report["shards"][0]["pools"][0]["objects"], 20);

    // Flip a byte inside the first log record after the segment header: not a torn tail, since
    // intact records follow, so the log is damaged.
    let wal = data_dir.join("shard-0").join("wal");
    let segment = std::fs::read_dir(&wal)
        .expect("the log directory")
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .min()
        .expect("a log segment");
    let mut bytes = std::fs::read(&segment).expect("read the segment");
    bytes[64 + 30] ^= 0x01;
    std::fs::write(&segment, bytes).expect("damage the segment");
    let damaged = ferrite_offline(&["check", &data]);
    let text = String::from_utf8_lossy(&damaged.stdout);
    assert_eq!(damaged.status.code(), Some(1), "{damaged:?}");
    assert!(text.contains("DAMAGED") && text.contains("wal-"), "{text}");
    let _ = std::fs::remove_dir_all(data_dir.parent().expect("fresh dir"));
}

/// `ferrite check` reads a `pmem` data directory too: its catalog and every pool's table.
#[test]
fn check_verifies_a_pmem_data_directory() {
    let data_dir = common::fresh_dir("check-pmem").join("data");
    let server = TestServer::builder_for(server_binary()).config("backing", "\"pmem\"").data_dir(&data_dir).start();
    assert!(ferrite(&server, &["pool", "create", "direct"]).status.success());
    for i in 0..7 {
        assert!(ferrite(&server, &["put", "direct", &format!("k{i}"), "v"]).status.success());
    }
    server.stop_gracefully();
    let checked = ferrite_offline(&["check", &data_dir.display().to_string()]);
    let text = String::from_utf8_lossy(&checked.stdout);
    assert!(checked.status.success(), "{checked:?}");
    assert!(text.contains("pool 'direct'") && text.contains("7 objects"), "{text}");
    let _ = std::fs::remove_dir_all(data_dir.parent().expect("fresh dir"));
}

/// `ferrite invoke` against the real server and its plugin host: each response buffer raw on a
/// line, `--json` with the layer, the payload from standard input, and a plugin's failure as an
/// error that names it.
#[test]
fn invoke_runs_a_pools_plugins() {
    let server = start_server(1);
    ok(&ferrite(&server, &["pool", "create", "counters", "--plugins", "counter"]));
    assert_eq!(ok(&ferrite(&server, &["invoke", "counters", "hits", "add 5", "--create-size", "8"])), "5\n");
    assert_eq!(ok(&ferrite_with_stdin(&server, &["invoke", "counters", "hits", "-"], b"add 2")), "7\n");
    let json = json(&ferrite(&server, &["--json", "invoke", "counters", "hits", "get"]));
    assert_eq!(json[0]["layer"], 0);
    assert_eq!(json[0]["data"], "7");
    // Eight bytes of text are a counter too: the plugin reads them as a little-endian integer.
    let put = ok(&ferrite(&server, &["invoke", "counters", "other", "get", "--put", "12345678"]));
    assert_eq!(put, format!("{}\n", u64::from_le_bytes(*b"12345678")), "--put stores the value before the plugin runs");
    let failed = fails(&ferrite(&server, &["invoke", "counters", "hits", "bogus"]));
    assert!(failed.contains("ado_failed") && failed.contains("unknown request"), "{failed}");
    let unknown = fails(&ferrite(&server, &["pool", "create", "bad", "--plugins", "no-such-plugin"]));
    assert!(unknown.contains("unknown plugin 'no-such-plugin'"), "{unknown}");
}

/// `invoke --fire-and-forget` returns once the server accepted the call and prints nothing; its
/// old name `--async` (which names a durability everywhere else) still works, with a warning.
#[test]
fn invoke_fire_and_forget_and_its_deprecated_name() {
    let server = start_server(1);
    ok(&ferrite(&server, &["pool", "create", "counters", "--plugins", "counter"]));
    let sent = ferrite(&server, &["invoke", "counters", "hits", "add 2", "--create-size", "8", "--fire-and-forget"]);
    assert_eq!(ok(&sent), "", "nothing is printed");
    assert!(sent.stderr.is_empty(), "{}", text(&sent.stderr));
    // Its own key: the first call may not have created "hits" yet when this one arrives.
    let old = ferrite(&server, &["invoke", "counters", "misses", "add 3", "--create-size", "8", "--async"]);
    assert_eq!(ok(&old), "");
    assert!(text(&old.stderr).contains("warning: --async is deprecated: use --fire-and-forget"), "{old:?}");
}

/// Every contradiction `docs/cli.md` lists for `invoke` is a usage error (status 2, clap's
/// `error: ...` and usage lines) refused before connecting, `--put` or `--create-size` with an
/// empty KEY included: the server here is never reached, so nothing is created.
#[test]
fn invoke_contradictions_are_usage_errors() {
    let server = start_server(1);
    ok(&ferrite(&server, &["pool", "create", "counters", "--plugins", "counter"]));
    let contradictions: [&[&str]; 6] = [
        &["--no-overwrite"],
        &["--detached"],
        &["--put", "v", "--create-size", "8"],
        &["--put", "v", "--read-only"],
        &["--put", "v"],
        &["--create-size", "8"],
    ];
    for flags in contradictions {
        let key = if flags.len() == 2 { "" } else { "k" };
        let mut args = vec!["invoke", "counters", key, "get"];
        args.extend_from_slice(flags);
        let output = ferrite(&server, &args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: ") && stderr.contains("Usage:"), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?}");
    }
    let stderr = text(&ferrite(&server, &["invoke", "counters", "", "get", "--put", "v"]).stderr);
    assert!(stderr.contains("--put needs a KEY"), "{stderr}");
    assert_eq!(ok(&ferrite(&server, &["count", "counters"])), "0\n", "nothing was created");
}

/// `--ca` (or `FERRITE_CA`) makes the CLI speak TLS; a CA that did not sign the server's
/// certificate is a clear error, and a TLS server is not reached in clear.
#[test]
fn the_cli_speaks_tls_with_the_ca_it_is_given() {
    let pki = pki::Pki::new("cli-tls");
    let other = pki::Pki::new("cli-tls-other");
    let server = TestServer::builder_for(server_binary()).args(&pki.server_args(false)).start();
    ok(&ferrite(&server, &["--tls", "--ca", &pki.path("ca.pem"), "pool", "create", "sealed"]));
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    command.env("FERRITE_CA", pki.path("ca.pem")).arg("--addr").arg(server.addr_string()).args(["pool", "list"]);
    assert!(text(&run(command, b"", CLI_TIMEOUT).stdout).contains("sealed"), "FERRITE_CA alone is enough");
    let bench = ok(&ferrite(&server, &["--ca", &pki.path("ca.pem"), "bench", "--workload", "put", "--ops", "200"]));
    assert!(bench.contains("put"), "bench speaks TLS too: {bench}");
    let wrong = fails(&ferrite(&server, &["--ca", &other.path("ca.pem"), "pool", "list"]));
    assert!(wrong.contains("the server's certificate was not signed by a CA in"), "{wrong}");
    let clear = fails(&ferrite(&server, &["pool", "list"]));
    assert!(clear.contains("speaks TLS and this client connected in clear") && clear.contains("--ca"), "{clear}");
}

/// A refused certificate is named in a sentence (here a CA's own certificate given to the server,
/// which `openssl req -x509` makes), and a server that answered is never suspected of not running:
/// only an address where nothing answers gets that hint.
#[test]
fn tls_failures_are_sentences_and_an_answering_server_is_not_called_absent() {
    let pki = pki::Pki::new("cli-tls-sentences");
    let server = TestServer::builder_for(server_binary()).args(&pki.server_args_with("ca")).start();
    let refused = fails(&ferrite(&server, &["--ca", &pki.path("ca.pem"), "pool", "list"]));
    assert!(refused.contains("the server's certificate is a CA certificate"), "{refused}");
    assert!(!refused.contains("CaUsedAsEndEntity") && !refused.contains("OtherError"), "{refused}");
    assert!(!refused.contains("is ferrite-server running there?"), "the server answered: {refused}");
    let clear = fails(&ferrite(&server, &["pool", "list"]));
    assert!(!clear.contains("is ferrite-server running there?"), "the server answered: {clear}");
}

/// With mutual TLS the CLI presents its certificate (`--client-cert`, `--client-key`, or from
/// the environment as a health check in a container gets them); without one the server refuses
/// it.
#[test]
fn the_cli_presents_a_client_certificate_for_mutual_tls() {
    let pki = pki::Pki::new("cli-mtls");
    let server = TestServer::builder_for(server_binary()).args(&pki.server_args(true)).start();
    let ca = pki.path("ca.pem");
    let (cert, key) = (pki.path("client.pem"), pki.path("client-key.pem"));
    ok(&ferrite(&server, &["--ca", &ca, "--client-cert", &cert, "--client-key", &key, "pool", "create", "m"]));
    ok(&ferrite(&server, &["--ca", &ca, "--client-cert", &cert, "--client-key", &key, "put", "m", "k", "v"]));
    assert!(!ferrite(&server, &["--ca", &ca, "pool", "list"]).status.success(), "no certificate, no service");
    let mut command = command(&server.addr_string(), &["stats"]);
    command.env("FERRITE_CA", &ca).env("FERRITE_CLIENT_CERT", &cert).env("FERRITE_CLIENT_KEY", &key);
    ok(&run(command, b"", CLI_TIMEOUT));
}

/// Runs `ferrite --addr <shard 0> ARGS` as `user` with `password` in `FERRITE_PASSWORD` (none if
/// `None`), with standard input not a terminal.
fn ferrite_as(server: &TestServer, user: &str, password: Option<&str>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    command.env_remove("FERRITE_ADDR").env_remove("FERRITE_PASSWORD").env("FERRITE_USER", user);
    if let Some(password) = password {
        command.env("FERRITE_PASSWORD", password);
    }
    command.arg("--addr").arg(server.addr_string()).args(args);
    run(command, b"", CLI_TIMEOUT)
}

#[test]
fn users_authenticate_from_the_environment_and_grants_are_enforced() {
    let dir = common::fresh_dir("cli-users");
    let users = dir.join("users.toml");
    let users_arg = users.display().to_string();
    let mut add = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    add.args(["user", "add", "alice", "--file", &users_arg]);
    ok(&run(add, b"alice's long secret\n", CLI_TIMEOUT));
    let mut grant = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    grant.args(["user", "grant", "alice", "alice*", "read,write,admin", "--file", &users_arg]);
    ok(&run(grant, b"", CLI_TIMEOUT));
    let mut quota = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    quota.args(["user", "quota", "alice", "--pools", "3", "--file", &users_arg]);
    ok(&run(quota, b"", CLI_TIMEOUT));
    let mut bob = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    bob.args(["user", "add", "bob", "--file", &users_arg]);
    ok(&run(bob, b"bob's long secret\n", CLI_TIMEOUT));
    let server = TestServer::builder_for(server_binary()).arg("--users").arg(users_arg).start();

    let password = Some("alice's long secret");
    ok(&ferrite_as(&server, "alice", password, &["pool", "create", "alice-notes"]));
    ok(&ferrite_as(&server, "alice", password, &["put", "alice-notes", "k", "v"]));
    assert_eq!(ok(&ferrite_as(&server, "alice", password, &["get", "alice-notes", "k"])), "v");
    let denied = fails(&ferrite_as(&server, "alice", password, &["pool", "create", "bobs"]));
    assert!(denied.contains("permission_denied") && denied.contains("user 'alice' has no admin right"), "{denied}");

    // `ferrite stats` shows what a user holds against its quota, and only its own.
    let stats = json(&ferrite_as(&server, "alice", password, &["--json", "stats"]));
    assert_eq!(stats["users"]["alice"]["pools"], 1, "{stats}");
    assert_eq!(stats["users"]["alice"]["pools_max"], 3, "{stats}");
    assert_eq!(stats["users"]["alice"]["pool_bytes"], 64 << 20, "{stats}");
    assert!(stats["users"].get("bob").is_none(), "alice sees only her own: {stats}");
    let table = ok(&ferrite_as(&server, "alice", password, &["stats"]));
    assert!(table.contains("USER") && table.contains("1 / 3"), "{table}");
    let bobs = json(&ferrite_as(&server, "bob", Some("bob's long secret"), &["--json", "stats"]));
    assert_eq!(bobs["users"]["bob"]["pools"], 0, "{bobs}");
    assert!(bobs["users"].get("alice").is_none(), "{bobs}");
    let bobs_pools = json(&ferrite_as(&server, "bob", Some("bob's long secret"), &["--json", "pool", "list"]));
    assert_eq!(bobs_pools["pools"], serde_json::json!([]), "no right on alice's pool, not even its name: {bobs_pools}");

    let wrong = fails(&ferrite_as(&server, "alice", Some("not it at all"), &["pool", "list"]));
    assert!(wrong.contains("authentication_failed") && wrong.contains("wrong user or password"), "{wrong}");
    let missing = fails(&ferrite_as(&server, "alice", None, &["pool", "list"]));
    assert!(
        missing.contains("FERRITE_PASSWORD"),
        "without a terminal the password must come from the environment: {missing}"
    );
    let mut anonymous = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    anonymous.env_remove("FERRITE_USER").arg("--addr").arg(server.addr_string()).args(["pool", "list"]);
    let anonymous = fails(&run(anonymous, b"", CLI_TIMEOUT));
    assert!(anonymous.contains("requires a user"), "{anonymous}");
}

#[test]
fn pool_configure_adds_and_removes_an_index_that_find_next_uses() {
    let server = start_server(1);
    ok(&ferrite(&server, &["pool", "create", "catalog"]));
    for key in ["b", "a", "d", "c"] {
        ok(&ferrite(&server, &["put", "catalog", key, "v"]));
    }
    let refused = fails(&ferrite(&server, &["find", "catalog", "--next", "b"]));
    assert!(refused.contains("no secondary index") && refused.contains("--add-index"), "{refused}");
    assert!(ok(&ferrite(&server, &["pool", "configure", "catalog", "--add-index"])).contains("has a secondary index"));
    assert_eq!(ok(&ferrite(&server, &["find", "catalog", "--next", "b"])), "c\nd\n");
    assert_eq!(ok(&ferrite(&server, &["find", "catalog", "--next", "a", "--limit", "1"])), "b\n");
    let configured = json(&ferrite(&server, &["--json", "pool", "configure", "catalog", "--remove-index"]));
    assert_eq!(configured["configured"], "remove_index");
    fails(&ferrite(&server, &["find", "catalog", "--next", "b"]));
    let missing = fails(&ferrite(&server, &["pool", "configure", "nosuch", "--add-index"]));
    assert!(missing.contains("does not exist"), "{missing}");
    let usage = ferrite(&server, &["pool", "configure", "catalog"]);
    assert_eq!(usage.status.code(), Some(2), "a setting is required");
}

/// Runs the command of a server's `ready. Try: COMMAND[, or: ...]` line with `sh`, the `ferrite`
/// binary first on the path, `FERRITE_PASSWORD` set to `password` and no other `FERRITE_`
/// variable: as someone would paste it.
fn run_startup_hint(server: &TestServer, password: &str) -> Output {
    let ready = server.announcement().last().expect("the server announced itself");
    let command = ready.strip_prefix("ready. Try: ").unwrap_or_else(|| panic!("not a hint: {ready}"));
    let command = command.split(", or: ").next().expect("a command");
    let binaries = std::path::Path::new(env!("CARGO_BIN_EXE_ferrite")).parent().expect("the binary's directory");
    let path = format!("{}:{}", binaries.display(), std::env::var("PATH").unwrap_or_default());
    let mut shell = Command::new("sh");
    shell.env("PATH", path).env("FERRITE_PASSWORD", password).arg("-c").arg(command);
    for variable in ["FERRITE_ADDR", "FERRITE_USER", "FERRITE_CA"] {
        shell.env_remove(variable);
    }
    run(shell, b"", CLI_TIMEOUT)
}

/// The command the server suggests when it is ready works as printed: on a server without users,
/// and on one with users, where it names a user with a password who may create and write the
/// pool (not the first user, who may not), and needs only that user's password in
/// `FERRITE_PASSWORD`; a server whose users may not gets a hint that says how to grant it.
#[test]
fn the_startup_hint_works_as_printed() {
    let server = start_server(1);
    ok(&run_startup_hint(&server, ""));
    assert_eq!(ok(&ferrite(&server, &["get", "demo", "hello"])), "world");

    let dir = common::fresh_dir("cli-hint");
    let users = dir.join("users.toml").display().to_string();
    let user = |args: &[&str], stdin: &[u8]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
        command.arg("user").args(args).args(["--file", &users]);
        ok(&run(command, stdin, CLI_TIMEOUT));
    };
    user(&["add", "aaron"], b"aaron's long secret\n");
    user(&["grant", "aaron", "*", "read"], b"");
    let server = TestServer::builder_for(server_binary()).arg("--users").arg(&users).start();
    let announced = server.announcement().join("\n");
    assert!(announced.contains("ferrite user grant NAME demo admin,write"), "{announced}");
    user(&["add", "alice"], b"alice's long secret\n");
    user(&["grant", "alice", "demo", "admin,write,read"], b"");
    let server = TestServer::builder_for(server_binary()).arg("--users").arg(&users).start();
    let announced = server.announcement().join("\n");
    assert!(announced.contains("FERRITE_USER=alice") && announced.contains("FERRITE_PASSWORD"), "{announced}");
    ok(&run_startup_hint(&server, "alice's long secret"));
    assert_eq!(ok(&ferrite_as(&server, "alice", Some("alice's long secret"), &["get", "demo", "hello"])), "world");
}
