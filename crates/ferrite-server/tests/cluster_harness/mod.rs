//! Cluster test harness: runs several real `ferrite-server` processes in cluster mode, each with
//! network addresses of its own, and breaks them and their network on request.
//!
//! # Use
//!
//! A test file includes it beside the single-server harness, whose helpers it uses:
//!
//! ```ignore
//! mod cluster_harness;
//! mod common;
//! use cluster_harness::{Cluster, ClusterSpec};
//!
//! let cluster = Cluster::start(ClusterSpec { nodes: 3, shards: 2, ..ClusterSpec::default() });
//! let leader = cluster.node(0);
//! client.connect(leader.native_addr());      // also resp_addr(), peer_addr(), *_addr_of(shard)
//! cluster.partition(&[&[0], &[1, 2]]);       // node 0 alone; 1 and 2 still together
//! cluster.heal_all();
//! leader.kill9();                            // SIGKILL to the server's own pid
//! leader.restart();                          // same command line, same data directory
//! cluster.node(1).stop();                    // SIGSTOP (cont() resumes)
//! cluster.node(2).isolate();                 // cut off from everyone, the test included (heal())
//! ```
//!
//! Node `i` (0-based) has node id `i + 1` and runs
//! `ferrite-server --node-id ID --peer-listen IP:PEER --advertise-host HOST --listen IP:NATIVE
//! --resp-listen IP:RESP --data-dir DIR --shards S` followed by [`ClusterSpec::extra_args`].
//! [`Cluster::start`] returns once every node has printed its announcement up to `ready.`, with
//! a `shard g: native`/`resp` line for each shard on exactly those addresses and
//! `node ID: peer HOST:PEER` (see [`Readiness`]); it does not initialize the cluster (that is
//! the test's first step, e.g. `ferrite cluster init`).
//!
//! # The two networks
//!
//! **Network namespaces** (used when the test may make them, which needs root or CAP_NET_ADMIN and
//! CAP_SYS_ADMIN, plus `ip` from iproute2, `nft` from nftables and `setpriv` from util-linux): a hub
//! namespace holding a bridge, and one namespace per node on a random unused subnet
//! 10.231.X.0/24 (the test process is `.1`, node i is `.(2+i)`), with loopback up in each. Every
//! node uses the same ports (native 7100, RESP 6379, peer 7300), since each has its own address.
//! Nodes run under `ip netns exec`, which execs the server in place, so the pid the harness holds
//! is the server's own. Isolating a node takes its bridge port down; cutting two nodes apart adds
//! drop rules (nftables, in each node's namespace, by the other's address). Details in `netns.rs`.
//!
//! **Loopback** (the fallback): node i listens on 127.0.0.(2+i) on ports chosen free, and
//! advertises 127.0.1.(2+i), where userspace relays forward each of its listeners. Everything that
//! dials a node (other nodes, clients following redirects, the test) goes through a relay, which
//! holds the traffic of a cut link. A relay knows which node is calling by its source address, so
//! partitions work only if the server binds its outgoing peer connections to its `--peer-listen`
//! IP; fault calls fail, saying so, after a peer connection from any other address. Details in
//! `relay.rs`.
//!
//! [`Network::Auto`] picks namespaces when a probe succeeds, otherwise loopback; the environment
//! variable `FERRITE_CLUSTER_NETWORK=namespaces|loopback` forces one. Either way the harness prints
//! which network it uses (and why not namespaces) on stderr, shown with a failing test's output.
//! Traffic only ever goes to loopback and to the namespaces' addresses.
//!
//! # Cleaning up
//!
//! Dropping the [`Cluster`] (also while a test panics) sends every node SIGTERM (and SIGCONT),
//! SIGKILLs those still running after `SHUTDOWN_TIMEOUT`, stops the relays, and deletes the host
//! link and every namespace. On a panic the node files (data directories, `stderr.log`) are kept
//! and every node's stderr is printed; otherwise the directory is removed. Nodes are started
//! under `setpriv --pdeathsig KILL`, so a test process killed outright takes its nodes with it.
//! Names carry the test's pid (`ferrite-harness-PID-N-...` namespaces, `frhPIDHEXkN` links), and
//! each start first removes those whose pid is dead, killing what still runs in them.

// Each test file uses its own subset of the harness.
#![allow(dead_code)]

mod faults;
mod loopback;
mod netns;
mod process;
mod relay;

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Mutex, MutexGuard, PoisonError};

pub use faults::Mode;
// Each test file uses its own subset (the self-test uses `process_state`).
#[allow(unused_imports)]
pub use process::{process_state, Readiness};

use crate::common::fresh_dir;
use faults::{Fabric, Faults, Hosts, Ports};
use loopback::Loopback;
use netns::Namespaces;
use process::{Expected, NodeProcess, Spawner};

/// Environment variable that forces a network for [`Network::Auto`]: `namespaces` or `loopback`.
pub const NETWORK_VARIABLE: &str = "FERRITE_CLUSTER_NETWORK";

/// What cluster to start.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    pub nodes: usize,
    /// Shards per node (`--shards`); shard g of every node is Raft group g.
    pub shards: usize,
    /// Arguments after the harness's own, for every node.
    pub extra_args: Vec<String>,
    pub server: Server,
    pub readiness: Readiness,
    pub network: Network,
}

impl Default for ClusterSpec {
    /// Three one-shard nodes of this crate's `ferrite-server`, on whatever network is available.
    fn default() -> Self {
        ClusterSpec {
            nodes: 3,
            shards: 1,
            extra_args: Vec::new(),
            server: Server::FerriteServer,
            readiness: Readiness::Announcement,
            network: Network::Auto,
        }
    }
}

/// The program each node runs.
#[derive(Debug, Clone)]
pub enum Server {
    /// This crate's `ferrite-server` binary.
    FerriteServer,
    /// `program args...`, given the node's arguments after `args` (a stand-in for the server).
    Command { program: PathBuf, args: Vec<String> },
}

impl Server {
    fn words(&self) -> Vec<String> {
        match self {
            Server::FerriteServer => {
                let Some(binary) = option_env!("CARGO_BIN_EXE_ferrite-server") else {
                    panic!("CARGO_BIN_EXE_ferrite-server is only set for ferrite-server's tests; use Server::Command");
                };
                vec![binary.to_owned()]
            }
            Server::Command { program, args } => {
                std::iter::once(program.display().to_string()).chain(args.iter().cloned()).collect()
            }
        }
    }
}

/// Which network to run a cluster on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// Namespaces if this process may make them, else loopback (or what
    /// [`NETWORK_VARIABLE`] says).
    Auto,
    /// Namespaces; panics if they cannot be made.
    Namespaces,
    Loopback,
}

impl Network {
    /// Whether namespaces can be used here; `Err` says why not.
    pub fn namespaces_available() -> Result<(), String> {
        netns::available()
    }

    fn fabric(self, nodes: usize, shards: usize) -> Box<dyn Fabric> {
        let forced = match std::env::var(NETWORK_VARIABLE).as_deref() {
            Ok("namespaces") => Some(Network::Namespaces),
            Ok("loopback") => Some(Network::Loopback),
            Ok(other) => panic!("{NETWORK_VARIABLE}={other:?}: expected `namespaces` or `loopback`"),
            Err(_) => None,
        };
        let chosen = if self == Network::Auto { forced.unwrap_or(self) } else { self };
        match (chosen, netns::available()) {
            (Network::Loopback, _) => {
                let why = if self == Network::Loopback {
                    "the test asked for Network::Loopback".to_owned()
                } else {
                    format!("{NETWORK_VARIABLE}=loopback")
                };
                Box::new(Loopback::create(nodes, shards, why))
            }
            (_, Ok(())) => Box::new(Namespaces::create(nodes)),
            (Network::Namespaces, Err(why)) => panic!("cluster harness: network namespaces are not available: {why}"),
            (Network::Auto, Err(why)) => Box::new(Loopback::create(nodes, shards, why)),
        }
    }
}

/// Running nodes and the network between them; everything goes away when dropped.
#[derive(Debug)]
pub struct Cluster {
    dir: PathBuf,
    shards: usize,
    ports: Ports,
    hosts: Vec<Hosts>,
    nodes: Vec<Mutex<NodeProcess>>,
    faults: Mutex<Faults>,
    /// Declared before the network: dropped (its nodes dead) before the network goes.
    spawner: Spawner,
    fabric: Box<dyn Fabric>,
}

impl Cluster {
    /// Makes the network and starts every node, each ready before the next starts.
    ///
    /// # Panics
    /// If the network cannot be made or a node is not ready in time (with its output; whatever
    /// was made is removed again).
    pub fn start(spec: ClusterSpec) -> Cluster {
        assert!(spec.nodes >= 1 && spec.shards >= 1, "a cluster needs nodes and shards: {spec:?}");
        let fabric = spec.network.fabric(spec.nodes, spec.shards);
        eprintln!("cluster harness: {} node(s) of {} shard(s) on {}", spec.nodes, spec.shards, fabric.mode());
        let mut cluster = Cluster {
            dir: fresh_dir("cluster"),
            shards: spec.shards,
            ports: fabric.ports(),
            hosts: (0..spec.nodes).map(|node| fabric.hosts(node)).collect(),
            nodes: Vec::new(),
            faults: Mutex::new(Faults::default()),
            spawner: Spawner::new(),
            fabric,
        };
        for index in 0..spec.nodes {
            let node = cluster.launch(index, &spec);
            cluster.nodes.push(Mutex::new(node));
        }
        cluster
    }

    fn launch(&self, index: usize, spec: &ClusterSpec) -> NodeProcess {
        let node_dir = self.dir.join(format!("node{index}"));
        std::fs::create_dir_all(&node_dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", node_dir.display()));
        let Hosts { listen, advertised } = self.hosts[index];
        let ports = self.ports;
        let node_id = node_id(index);
        let mut argv = self.fabric.launcher(index);
        argv.extend(["setpriv", "--pdeathsig", "KILL", "--"].map(str::to_owned));
        argv.extend(spec.server.words());
        argv.extend([
            "--node-id".to_owned(),
            node_id.to_string(),
            "--peer-listen".to_owned(),
            format!("{listen}:{}", ports.peer),
            "--advertise-host".to_owned(),
            advertised.to_string(),
            "--listen".to_owned(),
            format!("{listen}:{}", ports.native),
            "--resp-listen".to_owned(),
            format!("{listen}:{}", ports.resp),
            "--data-dir".to_owned(),
            node_dir.join("data").display().to_string(),
            "--shards".to_owned(),
            spec.shards.to_string(),
        ]);
        argv.extend(spec.extra_args.iter().cloned());
        let on = |base: u16| (0..self.shards).map(|g| shard_addr(listen.into(), base, g)).collect::<Vec<_>>();
        let expected = Expected {
            readiness: spec.readiness,
            node_id,
            native: on(ports.native),
            resp: on(ports.resp),
            peer_line: format!("{advertised}:{}", ports.peer),
            peer_listen: shard_addr(listen.into(), ports.peer, 0),
        };
        NodeProcess::start(&self.spawner, argv, expected, node_dir.join("stderr.log"))
    }

    /// Which network the cluster runs on.
    pub fn mode(&self) -> Mode {
        self.fabric.mode()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn shard_count(&self) -> usize {
        self.shards
    }

    /// Node `index` (0-based; its node id is `index + 1`).
    pub fn node(&self, index: usize) -> Node<'_> {
        assert!(index < self.nodes.len(), "node {index} of a {}-node cluster", self.nodes.len());
        Node { cluster: self, index }
    }

    pub fn nodes(&self) -> impl Iterator<Item = Node<'_>> {
        (0..self.nodes.len()).map(|index| self.node(index))
    }

    /// Every node's native address (shard 0), e.g. as a client's seed list.
    pub fn native_addrs(&self) -> Vec<SocketAddr> {
        self.nodes().map(|node| node.native_addr()).collect()
    }

    /// The directory holding every node's files (`node<i>/data`, `node<i>/stderr.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Cuts every pair of nodes in different groups, replacing earlier cuts (isolations stay).
    /// Every node must be in exactly one group: `partition(&[&[0], &[1, 2]])`.
    pub fn partition(&self, groups: &[&[usize]]) {
        let count = self.nodes.len();
        self.change_faults(|faults| faults.partition(count, groups));
    }

    /// Cuts the link between nodes `a` and `b`, both ways.
    pub fn cut(&self, a: usize, b: usize) {
        self.change_faults(|faults| faults.cut(a, b));
    }

    /// Restores the link between nodes `a` and `b`.
    pub fn mend(&self, a: usize, b: usize) {
        self.change_faults(|faults| faults.mend(a, b));
    }

    /// Ends every cut and isolation (stopped or killed nodes stay so).
    pub fn heal_all(&self) {
        self.change_faults(|faults| *faults = Faults::default());
    }

    fn change_faults(&self, change: impl FnOnce(&mut Faults)) {
        let mut faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next = faults.clone();
        change(&mut next);
        self.fabric.apply(&next).unwrap_or_else(|e| panic!("cluster harness: {e}"));
        *faults = next;
    }

    fn process(&self, index: usize) -> MutexGuard<'_, NodeProcess> {
        self.nodes[index].lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // All at once, so a cluster of hung nodes costs one shutdown timeout, not one per node.
        for node in &self.nodes {
            node.lock().unwrap_or_else(PoisonError::into_inner).ask_to_stop();
        }
        let panicking = std::thread::panicking();
        for (index, node) in self.nodes.drain(..).enumerate() {
            let node = node.into_inner().unwrap_or_else(PoisonError::into_inner);
            if panicking {
                eprintln!("--- cluster node {index} (pid {}) stderr ---\n{}", node.pid(), node.stderr());
            }
        }
        if panicking {
            eprintln!("cluster harness: node files kept in {} ({})", self.dir.display(), self.fabric.mode());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// One node of a [`Cluster`]; every method acts on the node's current process.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    cluster: &'a Cluster,
    index: usize,
}

impl Node<'_> {
    pub fn index(&self) -> usize {
        self.index
    }

    pub fn node_id(&self) -> u64 {
        node_id(self.index)
    }

    /// The host the node advertises: where other nodes and clients reach it.
    pub fn host(&self) -> IpAddr {
        self.cluster.hosts[self.index].advertised.into()
    }

    /// The host the node's listeners bind (the same as [`Node::host`] with namespaces; behind the
    /// relays on loopback).
    pub fn listen_host(&self) -> IpAddr {
        self.cluster.hosts[self.index].listen.into()
    }

    /// Shard 0's native address.
    pub fn native_addr(&self) -> SocketAddr {
        self.native_addr_of(0)
    }

    pub fn native_addr_of(&self, shard: usize) -> SocketAddr {
        self.addr(self.cluster.ports.native, shard)
    }

    /// Shard 0's RESP address.
    pub fn resp_addr(&self) -> SocketAddr {
        self.resp_addr_of(0)
    }

    pub fn resp_addr_of(&self, shard: usize) -> SocketAddr {
        self.addr(self.cluster.ports.resp, shard)
    }

    /// Group 0's peer address (what the node announces and `NodeInfo.peer` holds).
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr_of(0)
    }

    pub fn peer_addr_of(&self, shard: usize) -> SocketAddr {
        self.addr(self.cluster.ports.peer, shard)
    }

    fn addr(&self, base: u16, shard: usize) -> SocketAddr {
        assert!(shard < self.cluster.shards, "shard {shard} of {}", self.cluster.shards);
        shard_addr(self.host(), base, shard)
    }

    /// The pid of the node's current (or last) server process.
    pub fn pid(&self) -> u32 {
        self.cluster.process(self.index).pid()
    }

    pub fn is_running(&self) -> bool {
        self.cluster.process(self.index).is_running()
    }

    /// SIGKILL, as a crash would; returns once the process is reaped.
    pub fn kill9(&self) {
        self.cluster.process(self.index).kill9();
    }

    /// SIGTERM, and waits for the exit.
    ///
    /// # Panics
    /// If it does not exit within `SHUTDOWN_TIMEOUT` or was not running.
    pub fn terminate(&self) -> ExitStatus {
        let mut process = self.cluster.process(self.index);
        let pid = process.pid();
        process.terminate().unwrap_or_else(|| panic!("node {} (pid {pid}) did not exit on SIGTERM", self.node_id()))
    }

    /// SIGSTOP: the process freezes, its sockets stay open.
    pub fn stop(&self) {
        self.cluster.process(self.index).stop();
    }

    /// SIGCONT after [`Node::stop`].
    pub fn cont(&self) {
        self.cluster.process(self.index).cont();
    }

    /// Starts the node again, same command line and data directory, and waits until it is ready.
    ///
    /// # Panics
    /// If it is still running ([`Node::kill9`] or [`Node::terminate`] it first).
    pub fn restart(&self) {
        self.cluster.process(self.index).restart(&self.cluster.spawner);
    }

    /// Cuts the node off from everyone, the test included.
    pub fn isolate(&self) {
        let index = self.index;
        self.cluster.change_faults(|faults| faults.isolate(index));
    }

    /// Ends the node's isolation and every cut it is part of.
    pub fn heal(&self) {
        let index = self.index;
        self.cluster.change_faults(|faults| faults.heal_node(index));
    }

    pub fn data_dir(&self) -> PathBuf {
        self.cluster.dir.join(format!("node{}", self.index)).join("data")
    }

    /// Everything the node wrote to stderr, over all its starts.
    pub fn stderr(&self) -> String {
        self.cluster.process(self.index).stderr()
    }

    /// What the node printed when it last started, up to `ready.` (empty with
    /// [`Readiness::Listening`]).
    pub fn announcement(&self) -> Vec<String> {
        self.cluster.process(self.index).announcement().to_vec()
    }

    /// The node's whole command line (launcher and `setpriv` included).
    pub fn command_line(&self) -> Vec<String> {
        self.cluster.process(self.index).argv().to_vec()
    }
}

fn node_id(index: usize) -> u64 {
    u64::try_from(index).expect("node index fits in u64") + 1
}

fn shard_addr(host: IpAddr, base: u16, shard: usize) -> SocketAddr {
    let offset = u16::try_from(shard).expect("shard index fits in u16");
    SocketAddr::new(host, base.checked_add(offset).expect("shard port fits in u16"))
}

/// A random number (seeded per call by the standard library's hasher keys and the clock).
fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    hasher.write_u128(now.as_nanos());
    hasher.finish()
}
