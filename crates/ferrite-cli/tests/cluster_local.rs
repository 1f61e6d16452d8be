//! `ferrite cluster local` for real: it starts `ferrite-server` nodes on loopback, prints them,
//! and watches them; the cluster it makes takes writes through any node, survives the loss of
//! one, takes the node back when it is started again from its command line, stops on SIGTERM,
//! and starts again from its directory. Also the administration commands on such a cluster.
//!
//! As for `cli.rs`, build the server first (`cargo build -p ferrite-server`).

#[path = "../../ferrite-server/tests/common/mod.rs"]
mod common;
mod ferrite_process;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use common::{fresh_dir, signal, wait_exit, TestServer};
use ferrite_process::{command, fails, ferrite_offline, ok, run, server_binary, text, CLI_TIMEOUT};
use serde_json::Value;

/// Longest `cluster local` may take to start its nodes and initialize them (debug builds on a
/// loaded two-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest a failover, a restarted node's return or a stop may take before the test gives up.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Numbers the runs of one test, whose standard errors are kept apart.
static RUNS: AtomicUsize = AtomicUsize::new(0);

/// One node as `cluster local` printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeLine {
    id: u64,
    native: String,
    resp: String,
    peer: String,
    pid: u32,
}

impl NodeLine {
    /// `node 1: native 127.0.0.1:7101 resp 127.0.0.1:6391 peer 127.0.0.1:7301 pid 41230`.
    fn parse(line: &str) -> Option<NodeLine> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let ["node", id, "native", native, "resp", resp, "peer", peer, "pid", pid] = words.as_slice() else {
            return None;
        };
        Some(NodeLine {
            id: id.strip_suffix(':')?.parse().ok()?,
            native: (*native).to_owned(),
            resp: (*resp).to_owned(),
            peer: (*peer).to_owned(),
            pid: pid.parse().ok()?,
        })
    }

    fn resp_port(&self) -> u16 {
        self.resp.rsplit_once(':').and_then(|(_, port)| port.parse().ok()).expect("a port")
    }
}

/// A running `ferrite cluster local`, its standard output read line by line.
struct Local {
    child: Child,
    lines: Receiver<String>,
    stderr: PathBuf,
    nodes: Vec<NodeLine>,
}

impl Local {
    /// Starts `cluster local` on `dir` and waits for its node lines and its last line.
    fn start(dir: &Path, nodes: u16) -> Local {
        let stderr = dir.with_extension(format!("stderr-{}", RUNS.fetch_add(1, Ordering::Relaxed)));
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferrite"))
            .env_remove("FERRITE_ADDR")
            .args(["cluster", "local", "--nodes", &nodes.to_string(), "--data-dir"])
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(File::create(&stderr).expect("a file for its stderr"))
            .spawn()
            .expect("start ferrite cluster local");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        let mut local = Local { child, lines, stderr, nodes: Vec::new() };
        let mut printed = Vec::new();
        let last = local.line_where("its last line before watching", START_TIMEOUT, |line| {
            printed.push(line.to_owned());
            line == "Ctrl-C stops every node."
        });
        assert_eq!(last, "Ctrl-C stops every node.");
        local.nodes = printed.iter().filter_map(|line| NodeLine::parse(line)).collect();
        assert_eq!(local.nodes.len(), usize::from(nodes), "{printed:?}");
        assert!(local.nodes.iter().zip(1..).all(|(node, id)| node.id == id), "{printed:?}");
        let hint = printed.iter().find(|line| line.starts_with("try: ")).expect("a hint line");
        assert!(hint.contains(&format!("ferrite --addr {} pool create demo", local.nodes[0].native)), "{hint}");
        assert!(hint.contains(&format!("redis-cli -c -p {} ", local.nodes[0].resp_port())), "{hint}");
        local
    }

    /// The next line `accept` takes, skipping others; panics after `timeout` or at the end.
    fn line_where(&self, what: &str, timeout: Duration, mut accept: impl FnMut(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if accept(&line) => return line,
                Ok(_) => {}
                Err(error) => panic!("cluster local printed no {what} ({error}); stderr:\n{}", self.stderr()),
            }
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// SIGTERM, then its exit status and the lines it printed meanwhile.
    fn terminate(&mut self) -> (ExitStatus, Vec<String>) {
        signal(self.child.id(), "-TERM");
        let status = wait_exit(&mut self.child, SETTLE_TIMEOUT).expect("cluster local exits after SIGTERM");
        (status, self.lines.try_iter().collect())
    }
}

impl Drop for Local {
    /// A failed test leaves no node running: `cluster local` stops them, or they are killed.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            signal(self.child.id(), "-TERM");
            if wait_exit(&mut self.child, SETTLE_TIMEOUT).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        for node in self.nodes.iter().filter(|node| is_running(node.pid)) {
            signal(node.pid, "-KILL");
        }
    }
}

/// A node started again by the test from its command line; killed if the test fails.
struct Restarted(Child);

impl Drop for Restarted {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn is_running(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn ferrite(address: &str, args: &[&str]) -> Output {
    run(command(address, args), b"", CLI_TIMEOUT)
}

/// Runs `ferrite ARGS` until it succeeds (an election may be running), within a bound.
fn until_ok(address: &str, args: &[&str]) -> String {
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let output = ferrite(address, args);
        if output.status.success() {
            return text(&output.stdout);
        }
        assert!(Instant::now() < deadline, "ferrite {args:?} at {address} kept failing: {}", text(&output.stderr));
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Node `id`'s replica of group 0 as `cluster status --json` through `address` shows it.
fn role_of(address: &str, id: u64) -> String {
    // The node at `address` may be restarting itself (a leader that stopped leading does).
    let status: Value = serde_json::from_str(&until_ok(address, &["--json", "cluster", "status"])).expect("JSON");
    let replicas = status["groups"][0]["replicas"].as_array().expect("replicas").clone();
    let replica = replicas.iter().find(|replica| replica["node_id"] == id).expect("the node is a member");
    replica["role"].as_str().expect("a role").to_owned()
}

/// Proves the whole life of a local cluster of three: writes through one node are read through
/// another; a node killed by its printed pid is reported with its exit status, the others keep
/// taking writes; the node started again from `DIR/node-1/command` rejoins; SIGTERM stops every
/// node `cluster local` started and exits 0; a second run on the same directory listens where
/// the first did and has the data; and a port in use is refused by name.
#[test]
fn a_local_cluster_survives_a_node_and_starts_again_from_its_directory() {
    let dir = fresh_dir("cluster-local").join("cluster");
    let mut local = Local::start(&dir, 3);
    let [one, two, three] = &local.nodes.clone()[..] else { panic!("three nodes") };

    ok(&ferrite(&one.native, &["pool", "create", "demo"]));
    ok(&ferrite(&one.native, &["put", "demo", "before", "one"]));
    assert_eq!(ok(&ferrite(&three.native, &["get", "demo", "before"])), "one");

    signal(one.pid, "-KILL");
    let exited = local.line_where("report of node 1's exit", SETTLE_TIMEOUT, |line| line.starts_with("node 1 exited"));
    assert!(exited.contains("signal: 9"), "{exited}");
    until_ok(&two.native, &["put", "demo", "during", "two"]);
    assert_eq!(ok(&ferrite(&three.native, &["get", "demo", "during"])), "two");

    let command_line = std::fs::read_to_string(dir.join("node-1/command")).expect("node 1's command line");
    assert!(command_line.contains(&format!("--listen {}", one.native)), "{command_line}");
    let log = File::create(dir.with_extension("node-1.log")).expect("a log for the restarted node");
    let restarted = Restarted(
        Command::new("sh")
            .arg("-c")
            .arg(format!("exec {command_line}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start node 1 again"),
    );
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    while !matches!(role_of(&two.native, 1).as_str(), "leader" | "follower") {
        assert!(Instant::now() < deadline, "node 1 did not rejoin");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(until_ok(&one.native, &["get", "demo", "during"]), "two");

    let (status, lines) = local.terminate();
    assert!(status.success(), "{status}: {lines:?}\n{}", local.stderr());
    for node in [two, three] {
        assert!(lines.iter().any(|line| line.starts_with(&format!("node {} stopped", node.id))), "{lines:?}");
        assert!(!is_running(node.pid), "node {} (pid {}) still runs", node.id, node.pid);
    }
    drop(restarted);

    let again = Local::start(&dir, 3);
    let addresses = |nodes: &[NodeLine]| {
        nodes.iter().map(|n| (n.native.clone(), n.resp.clone(), n.peer.clone())).collect::<Vec<_>>()
    };
    assert_eq!(addresses(&again.nodes), addresses(&local.nodes), "a second run listens where the first did");
    assert_eq!(until_ok(&again.nodes[1].native, &["get", "demo", "during"]), "two");
    drop(again);

    let _taken = TcpListener::bind(&two.resp).expect("node 2's RESP port is free once stopped");
    let mut refused = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    refused.env_remove("FERRITE_ADDR").args(["cluster", "local", "--nodes", "3", "--data-dir"]).arg(&dir);
    let stderr = fails(&run(refused, b"", SETTLE_TIMEOUT));
    assert!(
        stderr.contains(&format!("port {} (node 2's RESP port for shard 0) is in use", two.resp_port())),
        "{stderr}"
    );
}

/// Proves the administration commands on a local cluster: the same init again is accepted and
/// says so, an init of other members is refused, and a command's report alone is on standard
/// output with nothing on standard error when that is no terminal (progress lines there came
/// out glued to the report where both are captured).
#[test]
fn cluster_commands_on_a_local_cluster_print_their_report_alone() {
    let dir = fresh_dir("cluster-local-admin").join("cluster");
    let local = Local::start(&dir, 3);
    let natives: Vec<&str> = local.nodes.iter().map(|node| node.native.as_str()).collect();
    let init_args: Vec<&str> = natives.iter().flat_map(|native| ["--node", native]).collect();

    let again = ferrite(natives[1], &[&["cluster", "init"][..], &init_args].concat());
    let shown = ok(&again);
    assert!(shown.contains("nodes 1, 2, 3 voting in all 1 groups (initialized already"), "{shown}");
    assert_eq!(text(&again.stderr), "");

    let other = ferrite(natives[0], &["cluster", "init", "--node", natives[0], "--node", natives[1]]);
    let refused = fails(&other);
    assert!(refused.contains("initialized already, with other members"), "{refused}");

    let to = if role_of(natives[0], 1) == "leader" { "2" } else { "1" };
    let moved = ferrite(natives[0], &["cluster", "transfer-leader", "--group", "0", "--to", to]);
    let shown = ok(&moved);
    assert_eq!(shown.lines().next(), Some(format!("leadership to node {to}:").as_str()), "{shown}");
    assert_eq!(text(&moved.stderr), "", "nothing but the report");
    let deadline = Instant::now() + SETTLE_TIMEOUT;
    while role_of(natives[0], to.parse().expect("an id")) != "leader" {
        assert!(Instant::now() < deadline, "node {to} did not take the lead");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Proves what `cluster local` refuses before starting anything, each with a sentence: a DIR
/// that cannot be made, a server binary that is neither beside `ferrite` nor on PATH.
#[test]
fn cluster_local_refuses_what_it_cannot_start() {
    let dir = fresh_dir("cluster-local-refused");
    let file = dir.join("a-file");
    std::fs::write(&file, b"").expect("a file");
    let stderr = fails(&ferrite_offline(&[
        "cluster",
        "local",
        "--nodes",
        "1",
        "--data-dir",
        &format!("{}/dir", file.display()),
    ]));
    assert!(stderr.contains(&format!("cannot create {}/dir", file.display())), "{stderr}");

    let alone = dir.join("bin/ferrite");
    std::fs::create_dir_all(alone.parent().expect("a parent")).expect("a bin directory");
    std::fs::copy(env!("CARGO_BIN_EXE_ferrite"), &alone).expect("a copy of ferrite alone");
    let mut command = Command::new(&alone);
    command.env("PATH", dir.join("empty")).args(["cluster", "local", "--nodes", "1", "--data-dir"]).arg(dir.join("c"));
    let stderr = fails(&run(command, b"", CLI_TIMEOUT));
    assert!(stderr.contains("ferrite-server is neither beside this ferrite"), "{stderr}");
    assert!(stderr.contains("nor on PATH"), "{stderr}");
    assert!(!dir.join("c").exists(), "nothing is made before the server is found");
}

/// Proves a node that fails to start fails the run with the end of its log, and that the
/// nodes started with it are stopped: here node 2's directory holds a single server's data.
#[test]
fn a_node_that_fails_to_start_is_shown_with_its_log_and_the_others_stop() {
    let dir = fresh_dir("cluster-local-failed").join("cluster");
    let _reaper = Reaper(dir.clone());
    let single = TestServer::builder_for(server_binary()).data_dir(&dir.join("node-2")).start();
    ok(&ferrite(&single.addr_string(), &["pool", "create", "single"]));
    single.stop_gracefully();
    let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
    command.env_remove("FERRITE_ADDR").args(["cluster", "local", "--nodes", "3", "--data-dir"]).arg(&dir);
    let output = run(command, b"", START_TIMEOUT);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(output.stdout.is_empty(), "nothing is announced: {}", text(&output.stdout));
    assert!(stderr.starts_with("starting 3 node(s)"), "progress first: {stderr}");
    assert!(stderr.contains("\nerror: node 2 exited while starting (exit status: 1)"), "{stderr}");
    assert!(stderr.contains(&format!("the end of its log, {}:", dir.join("node-2/server.log").display())), "{stderr}");
    assert!(stderr.contains("holds a single server's data"), "the server's reason is shown: {stderr}");
    for node in ["node-1", "node-3"] {
        let pid = locked_by(&dir.join(node));
        assert!(!pid.is_some_and(is_running), "{node} (pid {pid:?}) was left running");
    }
    assert!(!dir.join("nodes").exists(), "a cluster that never ran keeps no ports");
}

/// The pid in a server's data directory lock; none if it never locked it.
fn locked_by(data_dir: &Path) -> Option<u32> {
    std::fs::read_to_string(data_dir.join("LOCK")).ok()?.trim().parse().ok()
}

/// Kills the nodes of a local cluster in `.0` still running when a test ends (it failed).
struct Reaper(PathBuf);

impl Drop for Reaper {
    fn drop(&mut self) {
        for id in 1..=9 {
            if let Some(pid) = locked_by(&self.0.join(format!("node-{id}"))).filter(|pid| is_running(*pid)) {
                signal(pid, "-KILL");
            }
        }
    }
}
