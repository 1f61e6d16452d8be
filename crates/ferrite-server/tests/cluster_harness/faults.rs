//! What the network of a test cluster is doing wrong right now, and the trait each kind of network
//! (namespaces, loopback relays) implements to make it so.

use std::collections::BTreeSet;
use std::fmt;
use std::net::Ipv4Addr;

/// The network faults in force: nodes cut off from everyone, and pairs of nodes that cannot reach
/// each other. Cuts are symmetric (a real partition stops both directions of a TCP connection).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Faults {
    isolated: BTreeSet<usize>,
    /// Pairs `(a, b)` with `a < b`.
    cut: BTreeSet<(usize, usize)>,
}

impl Faults {
    pub fn isolate(&mut self, node: usize) {
        self.isolated.insert(node);
    }

    /// Ends `node`'s isolation and every cut it is part of.
    pub fn heal_node(&mut self, node: usize) {
        self.isolated.remove(&node);
        self.cut.retain(|&(a, b)| a != node && b != node);
    }

    pub fn cut(&mut self, a: usize, b: usize) {
        assert_ne!(a, b, "a node cannot be cut from itself");
        self.cut.insert((a.min(b), a.max(b)));
    }

    pub fn mend(&mut self, a: usize, b: usize) {
        self.cut.remove(&(a.min(b), a.max(b)));
    }

    /// Replaces every cut by the cuts between `groups` (isolations stay). Every node of a
    /// `node_count` cluster must be in exactly one group.
    pub fn partition(&mut self, node_count: usize, groups: &[&[usize]]) {
        let mut group_of = vec![None; node_count];
        for (group, members) in groups.iter().enumerate() {
            for &node in *members {
                assert!(node < node_count, "partition names node {node}; the cluster has {node_count}");
                assert!(group_of[node].is_none(), "partition names node {node} twice: {groups:?}");
                group_of[node] = Some(group);
            }
        }
        let group_of: Vec<usize> = group_of
            .iter()
            .enumerate()
            .map(|(node, group)| group.unwrap_or_else(|| panic!("partition {groups:?} leaves out node {node}")))
            .collect();
        self.cut.clear();
        for a in 0..node_count {
            for b in a + 1..node_count {
                if group_of[a] != group_of[b] {
                    self.cut.insert((a, b));
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.isolated.is_empty() && self.cut.is_empty()
    }

    pub fn is_isolated(&self, node: usize) -> bool {
        self.isolated.contains(&node)
    }

    /// Whether traffic between `from` (a node, or `None` for the test itself and anything else
    /// that is not a node) and node `to` is stopped.
    pub fn blocks(&self, from: Option<usize>, to: usize) -> bool {
        match from {
            None => self.is_isolated(to),
            Some(from) => {
                self.is_isolated(to) || self.is_isolated(from) || self.cut.contains(&(from.min(to), from.max(to)))
            }
        }
    }

    /// The nodes `node` is cut from (isolation aside).
    pub fn cut_from(&self, node: usize) -> BTreeSet<usize> {
        self.cut
            .iter()
            .filter_map(|&(a, b)| match (a == node, b == node) {
                (true, _) => Some(b),
                (_, true) => Some(a),
                _ => None,
            })
            .collect()
    }
}

/// The two addresses of a node: the one its listeners bind, and the one it advertises (what other
/// nodes and clients dial). They differ only where a relay stands in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hosts {
    pub listen: Ipv4Addr,
    pub advertised: Ipv4Addr,
}

/// Shard 0's port of each listener; shard g listens on port + g (the cluster spec's rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub native: u16,
    pub resp: u16,
    pub peer: u16,
}

/// Which network a cluster runs on (printed by the harness, so a test's output says which ran).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Every node in a network namespace of its own, on `subnet`.
    Namespaces { subnet: String },
    /// Nodes on loopback addresses behind userspace relays; `why` says why not namespaces.
    Loopback { why: String },
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mode::Namespaces { subnet } => write!(
                f,
                "network namespaces on {subnet} (a bridge in a namespace of its own; cuts are nftables drop rules)"
            ),
            Mode::Loopback { why } => {
                write!(f, "loopback addresses behind userspace TCP relays (no network namespaces: {why})")
            }
        }
    }
}

/// A network the nodes of a cluster run on, which can be told to misbehave.
pub trait Fabric: fmt::Debug + Send + Sync {
    fn mode(&self) -> Mode;

    fn hosts(&self, node: usize) -> Hosts;

    fn ports(&self) -> Ports;

    /// The words that run a program in node `node`'s network (empty: run it as it is).
    fn launcher(&self, node: usize) -> Vec<String>;

    /// Makes the network do what `faults` says (whatever it did before).
    fn apply(&self, faults: &Faults) -> Result<(), String>;
}
