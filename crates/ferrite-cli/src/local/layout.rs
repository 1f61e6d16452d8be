//! Where the nodes of a local cluster listen: ports chosen free at the first run, then kept in
//! `DIR/nodes`, because the cluster records each member's addresses when it is initialized and a
//! later run on the same data must listen where the members expect each other.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::fs;
use std::hash::BuildHasher;
use std::io::ErrorKind;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};

/// Every node listens on loopback.
pub const HOST: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// Ports are drawn from [`PORT_LOW`, `PORT_HIGH`): below Linux's ephemeral range (32768 and up),
/// so no outgoing connection takes one of them between the check and the server's bind.
const PORT_LOW: u16 = 20_000;
const PORT_HIGH: u16 = 32_000;

/// How many blocks of ports are tried before giving up.
const PORT_ATTEMPTS: usize = 64;

/// The file, in DIR, that keeps the layout for the next run.
const LAYOUT_FILE: &str = "nodes";

/// The shard-0 ports of one node; shard g listens on each + g.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodePorts {
    pub id: u16,
    pub native: u16,
    pub resp: u16,
    pub peer: u16,
}

impl fmt::Display for NodePorts {
    /// `node 1: native 127.0.0.1:24001 resp 127.0.0.1:24004 peer 127.0.0.1:24007`, as printed
    /// and as kept in `DIR/nodes`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}: native {HOST}:{} resp {HOST}:{} peer {HOST}:{}", self.id, self.native, self.resp, self.peer)
    }
}

/// The nodes of a local cluster and their shard count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub shards: u16,
    pub nodes: Vec<NodePorts>,
}

impl Layout {
    /// The layout `dir` keeps from an earlier run, if any; refused if it is for another number
    /// of nodes or shards than asked, since its data is.
    pub fn kept(dir: &Path, nodes: u16, shards: u16) -> Result<Option<Layout>, String> {
        let path = dir.join(LAYOUT_FILE);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        };
        let layout = Layout::parse(&text).map_err(|why| {
            format!("{} is not as `ferrite cluster local` writes it ({why}); use another --data-dir", path.display())
        })?;
        if layout.nodes.len() != usize::from(nodes) || layout.shards != shards {
            return Err(format!(
                "{} holds a local cluster of {} nodes with {} shard(s) each: run it with --nodes {} --shards {}, \
                 or use another --data-dir",
                dir.display(),
                layout.nodes.len(),
                layout.shards,
                layout.nodes.len(),
                layout.shards
            ));
        }
        Ok(Some(layout))
    }

    /// A new layout on free ports: node I's native ports first, then RESP, then peer, each
    /// node's S ports after the previous node's, in one block chosen at random.
    pub fn choose(nodes: u16, shards: u16) -> Result<Layout, String> {
        let span = nodes * shards;
        let random = RandomState::new();
        for attempt in 0..PORT_ATTEMPTS {
            let range = u64::from(PORT_HIGH - PORT_LOW - 3 * span);
            let offset = random.hash_one(attempt) % range;
            let base = PORT_LOW + u16::try_from(offset).expect("below PORT_HIGH");
            let layout = Layout {
                shards,
                nodes: (0..nodes)
                    .map(|index| NodePorts {
                        id: index + 1,
                        native: base + index * shards,
                        resp: base + span + index * shards,
                        peer: base + 2 * span + index * shards,
                    })
                    .collect(),
            };
            if layout.port_in_use().is_none() {
                return Ok(layout);
            }
        }
        Err(format!("no free block of {} ports on {HOST} after {PORT_ATTEMPTS} tries", 3 * span))
    }

    /// The first port of the layout that something listens on already, named.
    pub fn port_in_use(&self) -> Option<String> {
        // Held until every port was tried, so a port is never counted twice.
        let mut held = Vec::new();
        for node in &self.nodes {
            for (what, base) in [("native", node.native), ("RESP", node.resp), ("peer", node.peer)] {
                for shard in 0..self.shards {
                    let port = base + shard;
                    match TcpListener::bind((HOST, port)) {
                        Ok(listener) => held.push(listener),
                        Err(error) => {
                            return Some(format!(
                                "port {port} (node {}'s {what} port for shard {shard}) is in use: {error}",
                                node.id
                            ))
                        }
                    }
                }
            }
        }
        None
    }

    /// Keeps the layout in `dir` for the next run.
    pub fn keep(&self, dir: &Path) -> Result<(), String> {
        let path = dir.join(LAYOUT_FILE);
        let mut text = format!(
            "# ferrite cluster local: the nodes of this directory, where the next run starts them again\nshards {}\n",
            self.shards
        );
        for node in &self.nodes {
            text.push_str(&format!("{node}\n"));
        }
        fs::write(&path, text).map_err(|error| format!("cannot write {}: {error}", path.display()))
    }

    fn parse(text: &str) -> Result<Layout, String> {
        let mut shards = None;
        let mut nodes = Vec::new();
        for line in text.lines().map(str::trim).filter(|line| !line.is_empty() && !line.starts_with('#')) {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["shards", count] => shards = Some(count.parse().map_err(|_| format!("bad line {line:?}"))?),
                ["node", id, "native", native, "resp", resp, "peer", peer] => {
                    let port = |address: &str| {
                        address
                            .strip_prefix(&format!("{HOST}:"))
                            .and_then(|port| port.parse().ok())
                            .ok_or_else(|| format!("bad address {address:?}"))
                    };
                    let expected = nodes.len() + 1;
                    let Some(id) =
                        id.strip_suffix(':').and_then(|id| id.parse().ok()).filter(|id| usize::from(*id) == expected)
                    else {
                        return Err(format!("bad line {line:?}: node {expected} expected"));
                    };
                    nodes.push(NodePorts { id, native: port(native)?, resp: port(resp)?, peer: port(peer)? });
                }
                _ => return Err(format!("bad line {line:?}")),
            }
        }
        let shards = shards.ok_or("no shards line")?;
        if nodes.is_empty() {
            return Err("no node".to_owned());
        }
        Ok(Layout { shards, nodes })
    }
}

/// Node `id`'s directory in `dir`: its data, log and command line.
pub fn node_dir(dir: &Path, id: u16) -> PathBuf {
    dir.join(format!("node-{id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves a layout reads back as it was kept, and that a kept layout for other counts, or
    /// damaged, is refused with what to do.
    #[test]
    fn a_kept_layout_reads_back_and_must_match_the_counts() {
        let dir = std::env::temp_dir().join(format!("ferrite-layout-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("a temporary directory");
        assert_eq!(Layout::kept(&dir, 3, 2), Ok(None));
        let layout = Layout::choose(3, 2).expect("free ports");
        assert_eq!(layout.nodes[1], NodePorts { id: 2, native: layout.nodes[0].native + 2, ..layout.nodes[1] });
        assert_eq!(layout.nodes[0].resp, layout.nodes[0].native + 6);
        assert_eq!(layout.nodes[2].peer, layout.nodes[0].native + 16);
        layout.keep(&dir).expect("kept");
        assert_eq!(Layout::kept(&dir, 3, 2), Ok(Some(layout.clone())));
        let other = Layout::kept(&dir, 5, 2).expect_err("other counts");
        assert!(other.contains("holds a local cluster of 3 nodes with 2 shard(s) each"), "{other}");
        fs::write(dir.join(LAYOUT_FILE), "shards 1\nnode 2: native x resp y peer z\n").expect("written");
        let damaged = Layout::kept(&dir, 1, 1).expect_err("damaged");
        assert!(damaged.contains("is not as `ferrite cluster local` writes it"), "{damaged}");
        fs::remove_dir_all(&dir).expect("removed");
    }

    /// Proves a port something listens on is found and named.
    #[test]
    fn a_port_in_use_is_named() {
        let layout = Layout::choose(1, 1).expect("free ports");
        let _taken = TcpListener::bind((HOST, layout.nodes[0].resp)).expect("bind the RESP port");
        let found = layout.port_in_use().expect("the RESP port is taken");
        assert!(found.starts_with(&format!("port {} (node 1's RESP port for shard 0) is in use", layout.nodes[0].resp)));
    }
}
