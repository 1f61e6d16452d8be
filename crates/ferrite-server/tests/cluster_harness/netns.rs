//! The namespaces network: one network namespace per node, wired to a bridge that lives in a hub
//! namespace of its own, which the test process joins through one veth pair.
//!
//! ```text
//!  host namespace (the test)            hub namespace                node namespaces
//!  frh<pid>k<n>  10.231.X.1/24 ── veth ── host ─┐
//!                                               br0 ── n0 ── veth ── eth0 10.231.X.2/24  (node 0)
//!                                                  └── n1 ── veth ── eth0 10.231.X.3/24  (node 1) ...
//! ```
//!
//! The bridge is not in the host namespace because a host with `br_netfilter` loaded (any Docker
//! host) sends bridged frames through its iptables FORWARD chain, whose policy is often DROP; a
//! fresh namespace has no such rules. Isolating a node takes its bridge port (`n<i>`) down; cutting
//! a pair adds each one's address to the other's `cut` set, whose members an nftables input rule
//! in the node's namespace drops. Dropping on input (not output) keeps the cut silent, as a real
//! partition is: a sender sees timeouts, never an immediate error.

use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use super::faults::{Fabric, Faults, Hosts, Mode, Ports};
use super::random_u64;
use crate::common::signal;

/// Every namespace the harness makes is named `ferrite-harness-<pid>-<serial>-...`.
const NAMESPACE_PREFIX: &str = "ferrite-harness-";

/// The host end of the hub's veth pair is `frh<pid in hex>k<serial>`: interface names have at
/// most 15 bytes, and this one must carry the owner's pid to be found stale later.
const LINK_PREFIX: &str = "frh";

/// Node networks are 10.231.X.0/24 with X chosen at random among the unused ones.
const SUBNET_PREFIX: [u8; 2] = [10, 231];

/// Every node has an address of its own, so all use the same ports.
const PORTS: Ports = Ports { native: 7100, resp: 6379, peer: 7300 };

/// The nftables table each node namespace holds its drop rule in.
const NFT_TABLE: &str = "inet ferrite_harness";

/// How many unused subnets to try before giving up (256 exist; a busy host uses few).
const SUBNET_ATTEMPTS: usize = 64;

/// Distinguishes the networks of one test process.
static SERIAL: AtomicUsize = AtomicUsize::new(0);

/// Held while a subnet is chosen and claimed, so two clusters of one process never pick the same.
static SUBNET_CLAIM: Mutex<()> = Mutex::new(());

/// Whether this process may make namespaces (probed once: add one, configure it, remove it).
pub fn available() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE.get_or_init(probe).clone()
}

fn probe() -> Result<(), String> {
    let name = format!("{NAMESPACE_PREFIX}{}-probe", std::process::id());
    run(&["ip", "netns", "add", &name], None)?;
    let outcome = run(&["ip", "-n", &name, "link", "set", "lo", "up"], None)
        .and_then(|()| run(&["ip", "-n", &name, "link", "add", "br0", "type", "bridge"], None))
        .and_then(|()| run(&["ip", "netns", "exec", &name, "nft", "-f", "-"], Some(&nft_table())))
        .and_then(|()| run(&["ip", "netns", "exec", &name, "setpriv", "--pdeathsig", "KILL", "--", "true"], None));
    let removed = run(&["ip", "netns", "del", &name], None);
    outcome.and(removed)
}

/// The namespaces, links and addresses of one cluster, removed when dropped.
#[derive(Debug)]
pub struct Namespaces {
    /// `ferrite-harness-<pid>-<serial>`.
    tag: String,
    hub: String,
    nodes: Vec<String>,
    /// Every namespace made so far (also those of a half-built network), removed on drop.
    made: Vec<String>,
    /// The host end of the hub's veth pair, once made.
    host_link: Option<String>,
    /// X of 10.231.X.0/24.
    subnet: u8,
    /// What was last applied to each node: whether its port is down, and whom it is cut from.
    applied: Mutex<Vec<(bool, Vec<usize>)>>,
}

impl Namespaces {
    /// Makes the hub, `node_count` node namespaces and the host's link to them.
    ///
    /// # Panics
    /// If a step fails (what was made so far is removed again).
    pub fn create(node_count: usize) -> Namespaces {
        assert!((1..=200).contains(&node_count), "{node_count} nodes: the subnet has room for 1 to 200");
        clean_stale();
        let tag = format!("{NAMESPACE_PREFIX}{}-{}", std::process::id(), SERIAL.fetch_add(1, Ordering::Relaxed));
        let mut net = Namespaces {
            hub: format!("{tag}-hub"),
            nodes: (0..node_count).map(|i| format!("{tag}-n{i}")).collect(),
            tag,
            made: Vec::new(),
            host_link: None,
            subnet: 0,
            applied: Mutex::new(vec![(false, Vec::new()); node_count]),
        };
        let hub = net.hub.clone();
        net.add_namespace(&hub);
        must(&["ip", "-n", &hub, "link", "add", "br0", "type", "bridge"]);
        must(&["ip", "-n", &hub, "link", "set", "br0", "up"]);
        net.link_host();
        for index in 0..node_count {
            net.add_node(index);
        }
        net
    }

    fn add_namespace(&mut self, name: &str) {
        must(&["ip", "netns", "add", name]);
        self.made.push(name.to_owned());
        must(&["ip", "-n", name, "link", "set", "lo", "up"]);
    }

    /// Chooses a free subnet and gives the host its `.1` address, on a veth pair into the hub.
    fn link_host(&mut self) {
        let serial = self.tag.rsplit('-').next().expect("the tag ends with its serial");
        let link = format!("{LINK_PREFIX}{:x}k{serial}", std::process::id());
        must(&["ip", "link", "add", &link, "type", "veth", "peer", "name", "host", "netns", &self.hub]);
        self.host_link = Some(link.clone());
        must(&["ip", "-n", &self.hub, "link", "set", "host", "master", "br0", "up"]);
        let _claim = SUBNET_CLAIM.lock().unwrap_or_else(PoisonError::into_inner);
        self.subnet = free_subnet();
        must(&["ip", "addr", "add", &format!("{}/24", self.address(None)), "dev", &link]);
        must(&["ip", "link", "set", &link, "up"]);
    }

    fn add_node(&mut self, index: usize) {
        let name = self.nodes[index].clone();
        self.add_namespace(&name);
        let port = format!("n{index}");
        must(&["ip", "-n", &self.hub, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", &name]);
        must(&["ip", "-n", &self.hub, "link", "set", &port, "master", "br0", "up"]);
        must(&["ip", "-n", &name, "addr", "add", &format!("{}/24", self.address(Some(index))), "dev", "eth0"]);
        must(&["ip", "-n", &name, "link", "set", "eth0", "up"]);
        run(&["ip", "netns", "exec", &name, "nft", "-f", "-"], Some(&nft_table())).unwrap_or_else(|e| panic!("{e}"));
    }

    /// The address of node `index` (`None`: the host's).
    fn address(&self, index: Option<usize>) -> Ipv4Addr {
        let last = index.map_or(1, |i| u8::try_from(i + 2).expect("at most 200 nodes"));
        Ipv4Addr::new(SUBNET_PREFIX[0], SUBNET_PREFIX[1], self.subnet, last)
    }

    /// The namespace names (hub first), for tests that check they come and go.
    pub fn namespace_names(&self) -> Vec<String> {
        self.made.clone()
    }

    pub fn host_link(&self) -> Option<&str> {
        self.host_link.as_deref()
    }

    fn apply_to(&self, index: usize, down: bool, cut: &[usize], before: &(bool, Vec<usize>)) -> Result<(), String> {
        if before.0 != down {
            let state = if down { "down" } else { "up" };
            run(&["ip", "-n", &self.hub, "link", "set", &format!("n{index}"), state], None)?;
        }
        if before.1 != cut {
            let mut script = format!("flush set {NFT_TABLE} cut\n");
            if !cut.is_empty() {
                let peers: Vec<String> = cut.iter().map(|&peer| self.address(Some(peer)).to_string()).collect();
                script.push_str(&format!("add element {NFT_TABLE} cut {{ {} }}\n", peers.join(", ")));
            }
            run(&["ip", "netns", "exec", &self.nodes[index], "nft", "-f", "-"], Some(&script))?;
        }
        Ok(())
    }
}

impl Fabric for Namespaces {
    fn mode(&self) -> Mode {
        Mode::Namespaces { subnet: format!("{}.{}.{}.0/24", SUBNET_PREFIX[0], SUBNET_PREFIX[1], self.subnet) }
    }

    fn hosts(&self, node: usize) -> Hosts {
        let address = self.address(Some(node));
        Hosts { listen: address, advertised: address }
    }

    fn ports(&self) -> Ports {
        PORTS
    }

    fn launcher(&self, node: usize) -> Vec<String> {
        // `ip netns exec` execs the program after joining the namespace (no fork), so the child's
        // pid is the program's own.
        ["ip", "netns", "exec", &self.nodes[node]].map(str::to_owned).to_vec()
    }

    fn apply(&self, faults: &Faults) -> Result<(), String> {
        let mut applied = self.applied.lock().unwrap_or_else(PoisonError::into_inner);
        for (index, before) in applied.iter_mut().enumerate() {
            let now = (faults.is_isolated(index), faults.cut_from(index).into_iter().collect::<Vec<_>>());
            self.apply_to(index, now.0, &now.1, before)?;
            *before = now;
        }
        Ok(())
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        // Deleted first and explicitly: a veth end left to the hub's teardown vanishes only
        // whenever the kernel gets round to it.
        if let Some(link) = self.host_link.take() {
            report(run(&["ip", "link", "del", &link], None));
        }
        for name in self.made.drain(..).rev() {
            report(run(&["ip", "netns", "del", &name], None));
        }
    }
}

fn report(outcome: Result<(), String>) {
    if let Err(e) = outcome {
        eprintln!("cluster harness: cleanup: {e}");
    }
}

/// The `cut` set and the rule dropping what comes from its members.
fn nft_table() -> String {
    format!(
        "table {NFT_TABLE} {{\n\
         \tset cut {{ type ipv4_addr; }}\n\
         \tchain input {{ type filter hook input priority 0; policy accept; ip saddr @cut drop; }}\n\
         }}\n"
    )
}

/// An X such that nothing on the host uses 10.231.X.0/24 (no address, no route).
fn free_subnet() -> u8 {
    let addresses = output(&["ip", "-4", "-o", "addr", "show"]);
    let routes = output(&["ip", "-4", "route", "show", "table", "all"]);
    for _ in 0..SUBNET_ATTEMPTS {
        let x = (random_u64() % 256) as u8;
        let prefix = format!("{}.{}.{x}.", SUBNET_PREFIX[0], SUBNET_PREFIX[1]);
        if !addresses.contains(&prefix) && !routes.contains(&prefix) {
            return x;
        }
    }
    panic!("no free 10.231.X.0/24 subnet after {SUBNET_ATTEMPTS} tries:\n{addresses}\n{routes}");
}

/// Removes what killed test processes left: namespaces (after killing what runs in them) and host
/// links whose names carry the harness's prefix and the pid of a process that no longer exists.
fn clean_stale() {
    for line in output(&["ip", "netns", "list"]).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let owner = name.strip_prefix(NAMESPACE_PREFIX).and_then(|rest| rest.split('-').next());
        if owner.and_then(|pid| pid.parse().ok()).is_some_and(is_dead) {
            for pid in output(&["ip", "netns", "pids", name]).split_whitespace() {
                if let Ok(pid) = pid.parse() {
                    signal(pid, "-KILL");
                }
            }
            report(run(&["ip", "netns", "del", name], None));
        }
    }
    for line in output(&["ip", "-o", "link", "show"]).lines() {
        let Some(name) = line.split(": ").nth(1).map(|name| name.split('@').next().unwrap_or(name)) else { continue };
        let owner = name.strip_prefix(LINK_PREFIX).and_then(|rest| rest.split_once('k')).map(|(pid, _)| pid);
        if owner.and_then(|pid| u32::from_str_radix(pid, 16).ok()).is_some_and(is_dead) {
            report(run(&["ip", "link", "del", name], None));
        }
    }
}

fn is_dead(pid: u32) -> bool {
    pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// Runs `argv` (with `stdin` fed to it, if given); `Err` says what failed and what it printed.
fn run(argv: &[&str], stdin: Option<&str>) -> Result<(), String> {
    let mut child = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {argv:?}: {e}"))?;
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin is piped");
        pipe.write_all(text.as_bytes()).map_err(|e| format!("cannot feed {argv:?}: {e}"))?;
    }
    let result = child.wait_with_output().map_err(|e| format!("cannot wait for {argv:?}: {e}"))?;
    if result.status.success() {
        Ok(())
    } else {
        Err(format!("{argv:?} failed ({}): {}", result.status, String::from_utf8_lossy(&result.stderr).trim()))
    }
}

fn must(argv: &[&str]) {
    run(argv, None).unwrap_or_else(|e| panic!("cluster harness: {e}"));
}

/// What `argv` prints (empty if it cannot run: the callers treat that as nothing found).
fn output(argv: &[&str]) -> String {
    Command::new(argv[0])
        .args(&argv[1..])
        .stderr(Stdio::null())
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default()
}
