//! The cluster harness tested on its own, with a stand-in server (`cluster_harness/standin.py`)
//! instead of `ferrite-server`: nodes get their own addresses and are reachable from the test by
//! their real pids, cuts and isolation really stop traffic and healing restores it, kill -9,
//! SIGSTOP/SIGCONT and restarts act on the node's own process, a failing start is reported with
//! its stderr, and nothing (namespace, link, process) outlives a cluster, even one dropped by a
//! panicking test or left by a test process that was killed.
//!
//! Each behaviour runs on both networks. Where network namespaces cannot be made, the namespace
//! tests say so on stderr and pass without checking anything.

mod cluster_harness;
mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use cluster_harness::{process_state, Cluster, ClusterSpec, Mode, Network, Readiness, Server};
use common::{wait_until, SETTLE_TIMEOUT};

/// How long an answer may take before a test calls the node unreachable. Longer than the
/// stand-in's one-second dial timeout, so a `dial` always answers in time.
const ASK_TIMEOUT: Duration = Duration::from_secs(3);

fn standin() -> Server {
    Server::Command {
        program: "python3".into(),
        args: vec![concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cluster_harness/standin.py").to_owned()],
    }
}

fn spec(network: Network, nodes: usize) -> ClusterSpec {
    ClusterSpec { nodes, shards: 2, server: standin(), network, ..ClusterSpec::default() }
}

/// `true` if namespaces can be made here; otherwise says that `test` checks nothing.
fn namespaces_here(test: &str) -> bool {
    match Network::namespaces_available() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("{test}: SKIPPED, network namespaces are not available here: {why}");
            false
        }
    }
}

/// Sends `line` to `address` and reads one line back.
fn ask(address: SocketAddr, line: &str) -> Result<String, String> {
    let stream = TcpStream::connect_timeout(&address, ASK_TIMEOUT).map_err(|e| format!("connect: {e}"))?;
    stream.set_read_timeout(Some(ASK_TIMEOUT)).map_err(|e| e.to_string())?;
    (&stream).write_all(format!("{line}\n").as_bytes()).map_err(|e| format!("write: {e}"))?;
    let mut reply = String::new();
    BufReader::new(&stream).read_line(&mut reply).map_err(|e| format!("read: {e}"))?;
    if reply.is_empty() {
        return Err("closed without an answer".to_owned());
    }
    Ok(reply.trim_end().to_owned())
}

/// Asks until the answer starts with `wanted` (the network may take a moment to mend).
fn ask_until(address: SocketAddr, line: &str, wanted: &str) -> String {
    wait_until(&format!("{address} to answer {line:?} with {wanted:?}"), SETTLE_TIMEOUT, || {
        ask(address, line).ok().filter(|reply| reply.starts_with(wanted))
    })
}

/// What node `from` gets when it dials node `to`'s peer listener for group 0.
fn dial(cluster: &Cluster, from: usize, to: usize) -> String {
    let target = cluster.node(to).peer_addr();
    ask(cluster.node(from).native_addr(), &format!("dial {target}")).expect("the dialling node answers")
}

fn assert_dial_blocked(cluster: &Cluster, from: usize, to: usize) {
    let reply = dial(cluster, from, to);
    assert!(reply.starts_with("error"), "node {from} reached node {to} across a cut: {reply}");
}

fn assert_dial_reaches(cluster: &Cluster, from: usize, to: usize) {
    let target = cluster.node(to).peer_addr();
    let reply = ask_until(cluster.node(from).native_addr(), &format!("dial {target}"), "ok");
    assert_eq!(reply, format!("ok node {} peer 0", to + 1));
}

/// `ip ARGS` output (for checking what exists).
fn ip(args: &[&str]) -> String {
    let output = Command::new("ip").args(args).output().expect("ip runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The namespace process `pid` runs in, by name (`None` if it is in none the harness named).
fn namespace_of(pid: u32) -> Option<String> {
    let name = ip(&["netns", "identify", &pid.to_string()]);
    Some(name.trim().to_owned()).filter(|name| !name.is_empty())
}

/// What a test must check is gone after a namespace cluster: its namespaces and host link.
struct NamespaceTraces {
    namespaces: Vec<String>,
    host_link: String,
}

impl NamespaceTraces {
    fn of(cluster: &Cluster) -> NamespaceTraces {
        let Mode::Namespaces { subnet } = cluster.mode() else { panic!("not on namespaces: {}", cluster.mode()) };
        let mut namespaces: Vec<String> =
            cluster.nodes().map(|node| namespace_of(node.pid()).expect("a node runs in a namespace")).collect();
        let hub = namespaces[0].rsplit_once("-n").expect("node namespaces end in -n<index>").0.to_owned() + "-hub";
        namespaces.push(hub);
        let host_address = subnet.replace(".0/24", ".1/24");
        let addresses = ip(&["-o", "-4", "addr", "show"]);
        let line = addresses.lines().find(|line| line.contains(&host_address)).expect("the host has the .1 address");
        let host_link = line.split_whitespace().nth(1).expect("`ip -o addr` names the link").to_owned();
        NamespaceTraces { namespaces, host_link }
    }

    fn assert_present(&self) {
        let listed = ip(&["netns", "list"]);
        for name in &self.namespaces {
            assert!(listed.lines().any(|line| line.split_whitespace().next() == Some(name)), "{name} missing");
        }
        assert!(!ip(&["link", "show", &self.host_link]).is_empty(), "{} missing", self.host_link);
    }

    fn assert_gone(&self) {
        let listed = ip(&["netns", "list"]);
        for name in &self.namespaces {
            assert!(!listed.lines().any(|line| line.split_whitespace().next() == Some(name)), "{name} left behind");
        }
        assert!(ip(&["link", "show", &self.host_link]).is_empty(), "{} left behind", self.host_link);
    }
}

fn assert_dead(pid: u32) {
    assert_eq!(process_state(pid), None, "pid {pid} outlived its cluster");
}

/// Nodes live in namespaces of their own, on addresses of their own, under their real pids; the
/// test reaches every listener of every shard; dropping the cluster removes it all.
#[test]
fn namespaces_give_each_node_its_own_address_and_leave_nothing_behind() {
    if !namespaces_here("namespaces_give_each_node_its_own_address_and_leave_nothing_behind") {
        return;
    }
    let cluster = Cluster::start(spec(Network::Namespaces, 3));
    let traces = NamespaceTraces::of(&cluster);
    traces.assert_present();
    let mut pids = Vec::new();
    for node in cluster.nodes() {
        let id = node.node_id();
        assert!(node.host().to_string().starts_with("10.231."), "{}", node.host());
        assert_eq!(node.host(), node.listen_host());
        assert_eq!(node.native_addr().port(), 7100);
        assert_eq!(ask(node.native_addr_of(1), "id"), Ok(format!("node {id} native 1")));
        assert_eq!(ask(node.resp_addr_of(1), "x"), Ok(format!("node {id} resp 1")));
        assert_eq!(ask(node.peer_addr(), "who"), Ok(format!("node {id} peer 0")));
        let cmdline = std::fs::read_to_string(format!("/proc/{}/cmdline", node.pid())).expect("the node runs");
        let argv: Vec<&str> = cmdline.split('\0').collect();
        assert!(
            argv[0].ends_with("python3") && argv[1].ends_with("standin.py"),
            "the pid is the stand-in's own, not a wrapper's: {argv:?}"
        );
        assert!(node.announcement().iter().any(|line| *line == format!("node {id}: peer {}", node.peer_addr())));
        pids.push(node.pid());
    }
    assert_eq!(traces.namespaces.iter().collect::<std::collections::BTreeSet<_>>().len(), 4, "{:?}", traces.namespaces);
    drop(cluster);
    traces.assert_gone();
    pids.into_iter().for_each(assert_dead);
}

/// A partition stops node-to-node traffic across it and nothing else, isolation cuts a node off
/// from everyone (the test included), and healing restores both.
fn partitions_and_isolation_stop_traffic(network: Network) {
    let cluster = Cluster::start(spec(network, 3));
    assert_dial_reaches(&cluster, 0, 1);

    cluster.partition(&[&[0], &[1, 2]]);
    assert_dial_blocked(&cluster, 0, 1);
    assert_dial_blocked(&cluster, 2, 0);
    assert_dial_reaches(&cluster, 1, 2);
    assert_eq!(ask(cluster.node(0).native_addr(), "id"), Ok("node 1 native 0".to_owned()), "the test still reaches 0");

    cluster.heal_all();
    assert_dial_reaches(&cluster, 0, 1);
    assert_dial_reaches(&cluster, 2, 0);

    cluster.cut(1, 2);
    assert_dial_blocked(&cluster, 1, 2);
    assert_dial_reaches(&cluster, 0, 2);
    cluster.mend(1, 2);
    assert_dial_reaches(&cluster, 1, 2);

    cluster.node(2).isolate();
    let isolated = cluster.node(2).native_addr();
    assert!(ask(isolated, "id").is_err(), "the test reached an isolated node");
    assert_dial_blocked(&cluster, 0, 2);
    assert_dial_blocked(&cluster, 1, 2);
    cluster.node(2).heal();
    assert_eq!(ask_until(isolated, "id", "node"), "node 3 native 0");
    assert_dial_reaches(&cluster, 2, 1);
}

#[test]
fn partitions_and_isolation_stop_traffic_between_namespaces() {
    if namespaces_here("partitions_and_isolation_stop_traffic_between_namespaces") {
        partitions_and_isolation_stop_traffic(Network::Namespaces);
    }
}

#[test]
fn partitions_and_isolation_stop_traffic_through_loopback_relays() {
    partitions_and_isolation_stop_traffic(Network::Loopback);
}

/// kill -9 ends the node's own process; a restart (from any thread) runs the same command line
/// on the same data directory; SIGSTOP freezes the node until SIGCONT.
fn signals_and_restart_act_on_the_node_itself(network: Network) {
    let cluster = Cluster::start(spec(network, 2));
    let node = cluster.node(1);
    let first = node.pid();
    let command_line = node.command_line();
    assert_eq!(ask(node.native_addr(), "starts"), Ok("1".to_owned()));

    node.kill9();
    assert!(!node.is_running());
    assert_dead(first);
    assert!(ask(node.native_addr(), "id").is_err(), "a killed node answered");
    assert_eq!(ask(cluster.node(0).native_addr(), "id"), Ok("node 1 native 0".to_owned()));

    // From a thread that ends at once: the node must outlive it (its parent-death signal follows
    // the harness's spawner thread, not the caller's).
    std::thread::scope(|scope| {
        scope.spawn(|| node.restart());
    });
    assert_ne!(node.pid(), first);
    assert_eq!(node.command_line(), command_line);
    assert_eq!(ask(node.native_addr(), "starts"), Ok("2".to_owned()), "the restart used the same data directory");
    assert!(node.stderr().contains("stand-in node 2: start 1") && node.stderr().contains("stand-in node 2: start 2"));

    node.stop();
    assert_eq!(process_state(node.pid()), Some('T'));
    assert!(ask(node.native_addr(), "id").is_err(), "a stopped node answered");
    node.cont();
    assert_eq!(ask_until(node.native_addr(), "id", "node"), "node 2 native 0");

    let status = node.terminate();
    assert!(!node.is_running(), "{status}");
}

#[test]
fn signals_and_restart_act_on_the_node_itself_in_namespaces() {
    if namespaces_here("signals_and_restart_act_on_the_node_itself_in_namespaces") {
        signals_and_restart_act_on_the_node_itself(Network::Namespaces);
    }
}

#[test]
fn signals_and_restart_act_on_the_node_itself_on_loopback() {
    signals_and_restart_act_on_the_node_itself(Network::Loopback);
}

/// A test that panics still drops its cluster: every process, namespace and link goes.
fn a_panicking_test_leaves_nothing(network: Network) -> Option<NamespaceTraces> {
    let (found_tx, found_rx) = std::sync::mpsc::channel();
    let test = std::thread::spawn(move || {
        let cluster = Cluster::start(spec(network, 2));
        let traces = matches!(cluster.mode(), Mode::Namespaces { .. }).then(|| NamespaceTraces::of(&cluster));
        let pids: Vec<u32> = cluster.nodes().map(|node| node.pid()).collect();
        let fronts: Vec<SocketAddr> = cluster.nodes().map(|node| node.native_addr()).collect();
        found_tx.send((traces, pids, fronts, cluster.dir().to_owned())).expect("the test is listening");
        panic!("a test failing on purpose, with its cluster running");
    });
    assert!(test.join().is_err(), "the thread panicked");
    let (traces, pids, fronts, dir) = found_rx.recv().expect("the cluster started");
    assert!(dir.join("node0/stderr.log").exists(), "a failed test's node files are kept");
    std::fs::remove_dir_all(&dir).expect("the kept files can be removed");
    pids.into_iter().for_each(assert_dead);
    // Only on loopback: once a namespace network is gone, its addresses would be dialled through
    // the host's default route, out of this machine.
    if traces.is_none() {
        for front in fronts {
            assert!(TcpStream::connect_timeout(&front, ASK_TIMEOUT).is_err(), "relay {front} still accepts");
        }
    }
    traces
}

#[test]
fn a_panicking_test_leaves_no_namespace_link_or_process() {
    if namespaces_here("a_panicking_test_leaves_no_namespace_link_or_process") {
        a_panicking_test_leaves_nothing(Network::Namespaces).expect("namespace traces").assert_gone();
    }
}

#[test]
fn a_panicking_test_leaves_no_relay_or_process_on_loopback() {
    a_panicking_test_leaves_nothing(Network::Loopback);
}

/// Kills its process when dropped, so a failing test does not leave it behind.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Namespaces and links named after a test process that no longer exists (killed before it could
/// clean up) are removed when the next cluster starts, and what ran in them is killed.
#[test]
fn leftovers_of_a_killed_test_process_are_removed_at_the_next_start() {
    if !namespaces_here("leftovers_of_a_killed_test_process_are_removed_at_the_next_start") {
        return;
    }
    let mut gone = Command::new("true").spawn().expect("true runs");
    gone.wait().expect("true exits");
    let dead = gone.id();
    assert_eq!(process_state(dead), None, "pid {dead} was taken again at once");
    let namespace = format!("ferrite-harness-{dead}-0-hub");
    let link = format!("frh{dead:x}k0");
    assert!(Command::new("ip").args(["netns", "add", &namespace]).status().expect("ip runs").success());
    assert!(Command::new("ip").args(["link", "add", &link, "type", "bridge"]).status().expect("ip runs").success());
    let mut orphan =
        Reaped(Command::new("ip").args(["netns", "exec", &namespace, "sleep", "600"]).spawn().expect("ip"));
    let orphan_pid = orphan.0.id();
    wait_until("the orphan to run in its namespace", SETTLE_TIMEOUT, || {
        (namespace_of(orphan_pid).as_deref() == Some(namespace.as_str())).then_some(())
    });

    let _cluster = Cluster::start(spec(Network::Namespaces, 1));

    assert!(!ip(&["netns", "list"]).contains(&namespace), "{namespace} is still there");
    assert!(ip(&["link", "show", &link]).is_empty(), "{link} is still there");
    let status = wait_until("the orphan to be killed", SETTLE_TIMEOUT, || orphan.0.try_wait().expect("wait works"));
    assert!(!status.success(), "the orphan was killed: {status}");
}

/// A node that exits before it is ready fails the start with its stderr, and leaves nothing.
#[test]
fn a_node_that_fails_to_start_is_reported_with_its_stderr() {
    let failed = catch_unwind(|| {
        Cluster::start(ClusterSpec { extra_args: vec!["--fail".to_owned()], ..spec(Network::Loopback, 2) })
    });
    let message = failed.expect_err("the start fails");
    let message = message.downcast_ref::<String>().expect("a formatted panic message");
    assert!(message.contains("exited before it was ready"), "{message}");
    assert!(message.contains("stand-in: failing on purpose"), "the message shows stderr: {message}");
    let data_dir = message.split("\"--data-dir\", \"").nth(1).and_then(|rest| rest.split('"').next());
    let kept = Path::new(data_dir.expect("the message shows the command line")).ancestors().nth(2);
    std::fs::remove_dir_all(kept.expect("node data sits two levels below the cluster's directory"))
        .expect("the failed cluster's files are kept");
}

/// On loopback, relays tell nodes apart by source address: a node dialling its peers from any
/// other address makes every later fault call fail, saying why, rather than cut nothing.
#[test]
fn loopback_faults_refuse_peers_dialling_from_an_unknown_address() {
    let cluster =
        Cluster::start(ClusterSpec { extra_args: vec!["--dial-from-any".to_owned()], ..spec(Network::Loopback, 2) });
    assert_dial_reaches(&cluster, 0, 1);
    let refused = catch_unwind(AssertUnwindSafe(|| cluster.cut(0, 1))).expect_err("the cut is refused");
    let message = refused.downcast_ref::<String>().expect("a formatted panic message");
    assert!(message.contains("must bind its outgoing peer connections"), "{message}");
    assert_dial_reaches(&cluster, 0, 1);
    cluster.heal_all();
}

/// `Network::Auto` runs on namespaces exactly where they can be made (unless the environment
/// forces a network).
#[test]
fn the_automatic_network_is_namespaces_where_they_can_be_made() {
    let cluster = Cluster::start(spec(Network::Auto, 1));
    let forced = std::env::var(cluster_harness::NETWORK_VARIABLE).ok();
    let on_namespaces = matches!(cluster.mode(), Mode::Namespaces { .. });
    match forced.as_deref() {
        Some("loopback") => assert!(!on_namespaces, "{}", cluster.mode()),
        Some(_) => assert!(on_namespaces, "{}", cluster.mode()),
        None => assert_eq!(on_namespaces, Network::namespaces_available().is_ok(), "{}", cluster.mode()),
    }
    assert_eq!(ask(cluster.node(0).native_addr(), "id"), Ok("node 1 native 0".to_owned()));
}

/// A stand-in that prints nothing is ready once it listens.
#[test]
fn readiness_can_be_listening_instead_of_the_announcement() {
    let cluster = Cluster::start(ClusterSpec {
        extra_args: vec!["--quiet".to_owned()],
        readiness: Readiness::Listening,
        ..spec(Network::Loopback, 2)
    });
    for node in cluster.nodes() {
        assert!(node.announcement().is_empty());
        assert_eq!(ask(node.native_addr(), "id"), Ok(format!("node {} native 0", node.node_id())));
    }
}
