//! `ferrite bench` against real servers: a few hundred operations of every workload, and the
//! report must account for each of them. These prove the load generator works and counts
//! correctly; they measure nothing (speed is recorded by `bench/compare`, never asserted).
//!
//! Needs the server binary beside the CLI's (`cargo build -p ferrite-server`, as for `cli.rs`).
//! The RESP and memcached targets are exercised when the server has `--resp-listen` and when
//! `memcached` is installed (`scripts/install-test-deps.sh` installs it); otherwise those tests
//! say why they skipped.

#[path = "../../ferrite-server/tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::TestServer;
use serde_json::Value;

/// Longest one bench run may take before the test calls it hung (a debug build of both sides on
/// a loaded two-core machine does a few hundred operations in well under a second).
const BENCH_TIMEOUT: Duration = Duration::from_secs(60);

/// Operations per run: enough to exercise every kind of a mix and the pipelining.
const OPS: u64 = 300;

/// The workloads that choose keys by a distribution (all but erase).
const WORKLOADS: [&str; 9] = ["put", "get", "mixed", "ycsb-a", "ycsb-b", "ycsb-c", "ycsb-d", "ycsb-e", "ycsb-f"];

fn sibling_binary(name: &str) -> PathBuf {
    let cli = PathBuf::from(env!("CARGO_BIN_EXE_ferrite"));
    let path = cli.with_file_name(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(path.exists(), "{} is missing; run `cargo build -p ferrite-server` first", path.display());
    path
}

/// Runs `ferrite --addr ADDR --json bench ARGS` and returns its output.
fn bench(addr: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    command.env_remove("FERRITE_ADDR").args(["--addr", addr, "--json", "bench"]).args(args);
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the ferrite binary");
    let deadline = Instant::now() + BENCH_TIMEOUT;
    while child.try_wait().expect("wait for ferrite").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("ferrite bench {args:?} did not finish within {BENCH_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("collect the output")
}

/// Runs a bench that must succeed and returns its JSON report.
#[track_caller]
fn report(addr: &str, args: &[&str]) -> Value {
    let output = bench(addr, args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "ferrite bench {args:?} failed with {}\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("--json output is not JSON ({e}): {stdout}"))
}

fn number(value: &Value, what: &str) -> f64 {
    value.as_f64().unwrap_or_else(|| panic!("{what} is not a number: {value}"))
}

/// The report accounts for every operation: `ops` in total, none failed, the kinds add up, and
/// each kind's latency figures climb with the percentile.
#[track_caller]
fn assert_accounts_for(report: &Value, ops: u64) {
    let context = || serde_json::to_string_pretty(report).expect("a report serializes");
    assert_eq!(report["ops"], ops, "{}", context());
    assert_eq!(report["errors"], 0, "first error: {}\n{}", report["first_error"], context());
    let by_op = report["by_op"].as_object().expect("by_op is an object");
    let mix = report["parameters"]["mix_percent"].as_object().expect("mix_percent is an object");
    assert_eq!(
        by_op.keys().collect::<Vec<_>>(),
        mix.keys().collect::<Vec<_>>(),
        "a row for each kind the workload sends"
    );
    let sum: u64 = by_op.values().map(|row| row["ops"].as_u64().expect("ops is a count")).sum();
    assert_eq!(sum, ops, "the kinds add up to the total\n{}", context());
    for (name, row) in by_op.iter().chain([(&"total".to_owned(), report)]) {
        assert_eq!(row["errors"], 0, "{name}");
        if row["ops"] == 0 {
            assert!(row["latency_us"].is_null(), "{name}: no samples, no latency");
            continue;
        }
        let latency = &row["latency_us"];
        let figures: Vec<f64> = ["min", "p50", "p90", "p99", "p99_9", "max"]
            .iter()
            .map(|field| number(&latency[*field], &format!("{name} {field}")))
            .collect();
        assert!(figures.windows(2).all(|pair| pair[0] <= pair[1]), "{name}: {figures:?}");
        let ladder = latency["percentiles"].as_array().expect("a percentile ladder");
        let steps: Vec<(f64, f64)> =
            ladder.iter().map(|step| (number(&step["p"], "p"), number(&step["us"], "us"))).collect();
        assert!(steps.windows(2).all(|pair| pair[0].0 < pair[1].0 && pair[0].1 <= pair[1].1), "{name}: {steps:?}");
        assert_eq!(steps.last().map(|step| step.1), Some(figures[5]), "{name}: the ladder ends at the maximum");
    }
}

/// Every native workload, with uniform and zipfian keys, against a real server: counts add up and
/// nothing fails. Preloading workloads store every key first; erase erases each key once.
#[test]
fn every_native_workload_accounts_for_every_operation() {
    let server = TestServer::builder_for(sibling_binary("ferrite-server")).start();
    let addr = server.addr_string();
    let ops = OPS.to_string();
    for workload in WORKLOADS {
        for distribution in ["uniform", "zipfian"] {
            let pool = format!("smoke-{workload}-{distribution}");
            let args = [
                "--workload",
                workload,
                "--distribution",
                distribution,
                "--keys",
                "1000",
                "--ops",
                &ops,
                "--clients",
                "2",
                "--outstanding",
                "4",
                "--pool",
                &pool,
            ];
            let run = report(&addr, &args);
            assert_accounts_for(&run, OPS);
            assert_eq!(run["parameters"]["distribution"], distribution);
            match workload {
                "put" => assert!(run["preload"].is_null(), "put stores nothing first"),
                _ => assert_eq!(run["preload"]["ops"], 1000, "{workload}: every key stored first"),
            }
            assert_eq!(run["pool"], "deleted", "{workload}");
        }
    }
    // YCSB D's own distribution favours the newest keys, inserts included.
    assert_accounts_for(&report(&addr, &["--workload", "ycsb-d", "--keys", "1000", "--ops", &ops]), OPS);

    // Erase: each key exactly once, then the run ends by itself.
    let erase = report(&addr, &["--workload", "erase", "--keys", "300", "--clients", "2", "--outstanding", "8"]);
    assert_accounts_for(&erase, 300);
    let erase = report(&addr, &["--workload", "erase", "--keys", "1000", "--ops", &ops]);
    assert_accounts_for(&erase, OPS);
    // Every pool the runs created is gone again.
    let pools = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["--addr", &addr, "--json", "pool", "list"])
        .output()
        .expect("run ferrite pool list");
    let pools: Value = serde_json::from_slice(&pools.stdout).expect("pool list --json is JSON");
    assert_eq!(pools["pools"].as_array().map(Vec::len), Some(0), "{pools}");
}

/// `--pools` spreads the keys over pools that cover every shard, and a timed run stops on time.
#[test]
fn pools_cover_every_shard_and_timed_runs_stop() {
    let server = TestServer::builder_for(sibling_binary("ferrite-server")).shards(2).start();
    let addr = server.addr_string();
    let spread = report(&addr, &["--workload", "mixed", "--keys", "1000", "--ops", "400", "--pools", "3"]);
    assert_accounts_for(&spread, 400);
    let shards: Vec<u64> = spread["parameters"]["pools"]
        .as_array()
        .expect("the pools are listed")
        .iter()
        .map(|pool| pool["shard"].as_u64().expect("a shard index"))
        .collect();
    assert_eq!(shards, [0, 1, 0], "pools go to the shards in turn");
    assert_eq!(spread["parameters"]["shards"], 2);

    let started = Instant::now();
    let timed = report(&addr, &["--workload", "ycsb-b", "--keys", "500", "--duration", "0.3"]);
    assert!(started.elapsed() < BENCH_TIMEOUT);
    let ops = timed["ops"].as_u64().expect("a count");
    assert!(ops > 0, "a timed run did something");
    assert_accounts_for(&timed, ops);
    assert!(number(&timed["elapsed_s"], "elapsed_s") >= 0.3);
}

/// The server of a test that invokes the shipped plugins, which it finds beside itself with the
/// `ferrite-ado` host (`cargo build --workspace` builds them; `make test-rust` does).
fn plugin_server() -> TestServer {
    sibling_binary("ferrite-ado");
    for plugin in ["passthru", "counter"] {
        let library = sibling_binary("ferrite-server").with_file_name(format!("libferrite_plugin_{plugin}.so"));
        assert!(library.exists(), "{} is missing; run `cargo build --workspace` first", library.display());
    }
    TestServer::builder_for(sibling_binary("ferrite-server")).start()
}

/// `--workload invoke` with each shipped plugin: every invocation is counted, none fails, and the
/// counter's keys, preloaded as zeros, end up holding exactly one increment per invocation sent.
#[test]
fn invoke_workload_runs_the_shipped_plugins() {
    let server = plugin_server();
    let addr = server.addr_string();
    let ops = OPS.to_string();
    let common = ["--workload", "invoke", "--keys", "20", "--ops", &ops, "--clients", "2", "--outstanding", "4"];
    let passthru = report(&addr, &[&common[..], &["--plugin", "passthru"]].concat());
    assert_accounts_for(&passthru, OPS);
    assert_eq!(passthru["parameters"]["plugin"], "passthru");
    assert_eq!(passthru["parameters"]["payload"], "");
    assert_eq!(passthru["preload"]["ops"], 20, "every key exists before the invocations");
    assert_eq!(passthru["preload"]["host_start"]["invocations"], 1, "the host is started before measuring");

    let counter = report(&addr, &[&common[..], &["--plugin", "counter", "--pool", "counters", "--keep-pool"]].concat());
    assert_accounts_for(&counter, OPS);
    assert_eq!((&counter["parameters"]["payload"], &counter["parameters"]["value_size"]), (&"add 1".into(), &8.into()));
    let mut sum = 0;
    for number in 0..20 {
        let key = format!("{number:08}");
        let output = Command::new(env!("CARGO_BIN_EXE_ferrite"))
            .args(["--addr", &addr, "invoke", "counters", &key, "get"])
            .output()
            .expect("run ferrite invoke");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        sum += String::from_utf8_lossy(&output.stdout).trim().parse::<u64>().expect("a counter answers a number");
    }
    // Plus the one that started the host before measuring.
    assert_eq!(sum, OPS + 1, "one increment per operation, on counters that started at zero");
}

/// An invoke run on a plugin the server does not know, or on a pool without the plugin, fails
/// before measuring, saying why.
#[test]
fn invoke_workload_needs_a_pool_running_its_plugin() {
    let server = plugin_server();
    let addr = server.addr_string();
    let unknown = bench(&addr, &["--workload", "invoke", "--plugin", "nosuch", "--payload", "x", "--ops", "10"]);
    assert_eq!(unknown.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(stderr.contains("unknown plugin 'nosuch'"), "{stderr}");

    let created = Command::new(env!("CARGO_BIN_EXE_ferrite"))
        .args(["--addr", &addr, "pool", "create", "plain"])
        .output()
        .expect("run ferrite pool create");
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let plain = bench(&addr, &["--workload", "invoke", "--plugin", "counter", "--pool", "plain", "--ops", "10"]);
    assert_eq!(plain.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(stderr.contains("pool 'plain' already exists with no plugins"), "{stderr}");
}

/// Options that cannot work together are refused before anything is sent.
#[test]
fn impossible_combinations_are_usage_errors() {
    for args in [
        &["--workload", "ycsb-e", "--target", "resp"][..],
        &["--workload", "erase", "--keys", "10", "--ops", "11"],
        &["--workload", "get", "--read-percent", "20"],
        &["--pools", "2", "--target", "memcache"],
        &["--workload", "invoke"],
        &["--workload", "invoke", "--plugin", "counter", "--target", "resp"],
        &["--workload", "get", "--plugin", "passthru"],
    ] {
        let output = bench("127.0.0.1:1", args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
        assert!(output.stdout.is_empty());
    }
}

/// A child process (echo server, memcached) stopped by its own id when the test ends.
struct KillOnDrop {
    child: Child,
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SIGKILL to this child only: neither keeps anything worth a clean shutdown.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `ferrite-echo` and returns it with its native and RESP addresses.
fn start_echo() -> (KillOnDrop, String, String) {
    let mut child = Command::new(sibling_binary("ferrite-echo"))
        .args(["--listen", "127.0.0.1:0", "--resp-listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ferrite-echo");
    let stdout = child.stdout.take().expect("stdout is piped");
    let echo = KillOnDrop { child };
    let (mut native, mut resp) = (None, None);
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("read ferrite-echo's announcement");
        if let Some(address) = line.strip_prefix("shard 0: native ") {
            native = Some(address.to_owned());
        } else if let Some(address) = line.strip_prefix("shard 0: resp ") {
            resp = Some(address.to_owned());
        } else if line.starts_with("ready.") {
            break;
        }
    }
    (echo, native.expect("a native address"), resp.expect("a RESP address"))
}

/// The echo server answers every native and RESP request the load generator sends.
#[test]
fn the_echo_server_answers_every_workload() {
    let (_echo, native, resp) = start_echo();
    let ops = OPS.to_string();
    for workload in ["put", "get", "ycsb-a", "ycsb-e", "erase"] {
        let run = report(&native, &["--workload", workload, "--keys", "1000", "--ops", &ops, "--outstanding", "8"]);
        assert_accounts_for(&run, OPS);
    }
    for workload in ["put", "get", "ycsb-f"] {
        let args = ["--target", "resp", "--workload", workload, "--keys", "1000", "--ops", &ops, "--outstanding", "8"];
        assert_accounts_for(&report(&resp, &args), OPS);
    }
}

/// A port that was free a moment ago, for servers that cannot pick their own (memcached) or
/// announce it (the RESP listener's line is not read by the shared harness).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("a bound address").port()
}

/// Every workload RESP can carry, against Ferrite's RESP listener.
#[test]
fn resp_workloads_against_ferrites_resp_listener() {
    let server_binary = sibling_binary("ferrite-server");
    let help = Command::new(&server_binary).arg("--help").output().expect("run ferrite-server --help");
    if !String::from_utf8_lossy(&help.stdout).contains("--resp-listen") {
        eprintln!("skipped: this ferrite-server has no RESP listener (--resp-listen)");
        return;
    }
    let port = free_port();
    let resp_listen = format!("127.0.0.1:{port}");
    let _server = TestServer::builder_for(server_binary).args(&["--resp-listen", &resp_listen]).start();
    let ops = OPS.to_string();
    for workload in ["put", "get", "mixed", "ycsb-a", "ycsb-b", "ycsb-c", "ycsb-d", "ycsb-f"] {
        for distribution in ["uniform", "zipfian"] {
            let args = [
                "--target",
                "resp",
                "--workload",
                workload,
                "--distribution",
                distribution,
                "--keys",
                "1000",
                "--ops",
                &ops,
                "--clients",
                "2",
                "--outstanding",
                "4",
            ];
            let run = report(&resp_listen, &args);
            assert_accounts_for(&run, OPS);
            assert_eq!(run["parameters"]["target"], "resp");
        }
    }
    let erase = ["--target", "resp", "--workload", "erase", "--keys", "300", "--outstanding", "8"];
    assert_accounts_for(&report(&resp_listen, &erase), 300);
}

/// The memcached target, where memcached is installed.
#[test]
fn memcache_workloads_against_memcached() {
    let Ok(version) = Command::new("memcached").arg("-V").output() else {
        eprintln!("skipped: memcached is not installed (scripts/install-test-deps.sh installs it)");
        return;
    };
    assert!(version.status.success(), "memcached -V failed: {version:?}");
    let port = free_port();
    let mut command = Command::new("memcached");
    command.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0", "-t", "1", "-m", "64"]);
    // memcached refuses to run as root unless told which user to become.
    if is_root() {
        command.args(["-u", "nobody"]);
    }
    let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start memcached");
    let _memcached = KillOnDrop { child };
    let addr = format!("127.0.0.1:{port}");
    common::wait_until("memcached to accept connections", Duration::from_secs(10), || {
        std::net::TcpStream::connect(&addr).ok()
    });
    let ops = OPS.to_string();
    for workload in ["put", "get", "mixed", "ycsb-a", "ycsb-d", "ycsb-f"] {
        let args =
            ["--target", "memcache", "--workload", workload, "--keys", "1000", "--ops", &ops, "--outstanding", "8"];
        assert_accounts_for(&report(&addr, &args), OPS);
    }
    let erase = ["--target", "memcache", "--workload", "erase", "--keys", "300", "--outstanding", "8"];
    assert_accounts_for(&report(&addr, &erase), 300);
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|output| output.stdout.starts_with(b"0\n"))
}
