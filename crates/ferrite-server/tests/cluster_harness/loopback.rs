//! The loopback network, for hosts where the test may not make network namespaces: node i
//! listens on 127.0.0.(2+i) and advertises 127.0.1.(2+i), where relays forward every one of its
//! listeners (see [`super::relay`]). Node-to-node and client traffic goes through the relays, so
//! cutting a link is the relays holding its traffic.
//!
//! All nodes of a cluster use the same ports (each node has its own addresses), chosen at random
//! below the kernel's ephemeral range and checked free on every address involved.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};

use super::faults::{Fabric, Faults, Hosts, Mode, Ports};
use super::random_u64;
use super::relay::{Relays, Route};

/// Ports are drawn from [`PORT_LOW`, `PORT_HIGH`): below Linux's default ephemeral range, where
/// servers started on port 0 by other tests land.
const PORT_LOW: u16 = 20_000;
const PORT_HIGH: u16 = 32_000;

/// How many port blocks to try before giving up.
const PORT_ATTEMPTS: usize = 64;

/// The relays and addresses of one cluster.
#[derive(Debug)]
pub struct Loopback {
    why: String,
    node_count: usize,
    ports: Ports,
    relays: Relays,
}

impl Loopback {
    /// Claims ports for `node_count` nodes of `shards` shards and starts their relays. `why` says
    /// why namespaces are not used (shown with the mode).
    pub fn create(node_count: usize, shards: usize, why: String) -> Loopback {
        assert!((1..=100).contains(&node_count), "{node_count} nodes: the loopback network has room for 1 to 100");
        let span = u16::try_from(shards).expect("shard count fits in u16");
        for _ in 0..PORT_ATTEMPTS {
            let range = u64::from(PORT_HIGH - PORT_LOW - 3 * span);
            let base = PORT_LOW + u16::try_from(random_u64() % range).expect("below PORT_HIGH");
            let ports = Ports { native: base, resp: base + span, peer: base + 2 * span };
            if let Some(routes) = claim(node_count, span, ports) {
                let sources = (0..node_count).map(|node| IpAddr::V4(listen_host(node))).collect();
                return Loopback { why, node_count, ports, relays: Relays::start(routes, sources) };
            }
        }
        panic!("cluster harness: no free block of {} ports on loopback after {PORT_ATTEMPTS} tries", 3 * span);
    }
}

/// Binds every relay front of every node, and checks the node's own listeners are free too.
/// `None` if any port is taken.
fn claim(node_count: usize, span: u16, ports: Ports) -> Option<Vec<(Route, TcpListener)>> {
    let mut routes = Vec::new();
    for node in 0..node_count {
        let (real, front) = (listen_host(node), advertised_host(node));
        for (base, peer) in [(ports.native, false), (ports.resp, false), (ports.peer, true)] {
            for port in base..base + span {
                // Probed and released at once: the node binds it when it starts.
                TcpListener::bind((real, port)).ok()?;
                let listener = TcpListener::bind((front, port)).ok()?;
                let route = Route {
                    front: SocketAddr::from((front, port)),
                    upstream: SocketAddr::from((real, port)),
                    node,
                    peer,
                };
                routes.push((route, listener));
            }
        }
    }
    Some(routes)
}

fn listen_host(node: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, u8::try_from(node + 2).expect("at most 100 nodes"))
}

fn advertised_host(node: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 1, u8::try_from(node + 2).expect("at most 100 nodes"))
}

impl Fabric for Loopback {
    fn mode(&self) -> Mode {
        Mode::Loopback { why: self.why.clone() }
    }

    fn hosts(&self, node: usize) -> Hosts {
        assert!(node < self.node_count, "node {node} of {}", self.node_count);
        Hosts { listen: listen_host(node), advertised: advertised_host(node) }
    }

    fn ports(&self) -> Ports {
        self.ports
    }

    fn launcher(&self, _node: usize) -> Vec<String> {
        Vec::new()
    }

    fn apply(&self, faults: &Faults) -> Result<(), String> {
        self.relays.apply(faults)
    }
}
