//! The messages of cluster mode (`docs/protocol.md`, "Cluster"): what a node is (`node_info`),
//! who leads each group (`cluster_map`), the administration of groups (`cluster_init`,
//! `cluster_add_node`, `cluster_remove_node`, `cluster_transfer_leader`, `cluster_status`) and the
//! `not_leader` answer that sends a client to a group's leader.
//!
//! Unlike the data path's messages these own their strings: they are small and rare, and a
//! server builds them from a copy of its map taken under a lock, which a borrowed message could
//! not outlive.

use bytes::{BufMut, BytesMut};

use crate::error::{ErrorCode, ProtocolError};
use crate::limits::{CLUSTER_GROUPS_MAX, CLUSTER_ID_BYTES_MAX, CLUSTER_NODES_MAX, NODE_ADDRESS_BYTES_MAX};
use crate::wire::{put_str16, Reader};

/// A node as the cluster knows it: its id and the addresses of its listeners, each that of shard
/// 0 (shard g listens on the port plus g).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterNode {
    /// At least 1 in a cluster; 0 is a server not in cluster mode.
    pub node_id: u64,
    /// `host:port` of its peer (node-to-node) listener.
    pub peer: String,
    /// `host:port` of its native protocol listener.
    pub native: String,
    /// `host:port` of its RESP listener; empty if it serves none.
    pub resp: String,
}

impl ClusterNode {
    /// The node as `node_info`, `cluster_init` and `cluster_add_node` carry it: id, peer, native,
    /// resp.
    fn encode(&self, out: &mut BytesMut) {
        out.put_u64_le(self.node_id);
        for address in [&self.peer, &self.native, &self.resp] {
            put_str16(out, address);
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<ClusterNode, ProtocolError> {
        let node_id = r.u64()?;
        let peer = read_address(r, "peer address")?;
        let native = read_address(r, "native address")?;
        let resp = read_address(r, "resp address")?;
        Ok(ClusterNode { node_id, peer, native, resp })
    }

    /// The node as a `cluster_map` entry carries it: id, native, resp, peer.
    fn encode_map_entry(&self, out: &mut BytesMut) {
        out.put_u64_le(self.node_id);
        for address in [&self.native, &self.resp, &self.peer] {
            put_str16(out, address);
        }
    }

    fn decode_map_entry(r: &mut Reader<'_>) -> Result<ClusterNode, ProtocolError> {
        let node_id = r.u64()?;
        let native = read_address(r, "native address")?;
        let resp = read_address(r, "resp address")?;
        let peer = read_address(r, "peer address")?;
        Ok(ClusterNode { node_id, peer, native, resp })
    }

    /// A node to make a member: an id of 1 or more, and the peer and native addresses other
    /// nodes and clients reach it at.
    fn check_member(&self) -> Result<(), ProtocolError> {
        if self.node_id == 0 {
            return Err(ProtocolError::InvalidCluster { reason: "a node id is 1 or more" });
        }
        if self.peer.is_empty() || self.native.is_empty() {
            return Err(ProtocolError::InvalidCluster { reason: "a member needs its peer and native addresses" });
        }
        [&self.peer, &self.native, &self.resp].into_iter().try_for_each(|address| check_address(address))
    }
}

/// The address of shard `shard` of a node whose shard 0 listens at `base` (`host:port`): shard g
/// listens on the port plus g. `None` for an address without a port, or one past the last port.
pub fn shard_address(base: &str, shard: u16) -> Option<String> {
    let (host, port) = base.rsplit_once(':')?;
    let port = port.parse::<u16>().ok()?.checked_add(shard)?;
    Some(format!("{host}:{port}"))
}

/// The answer to `node_info`: the node that answered, and the cluster it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeInfo {
    /// `node_id` 0 on a server not in cluster mode.
    pub node: ClusterNode,
    /// Empty on a server not in cluster mode and on a node not initialized yet.
    pub cluster_id: String,
}

/// One group (shard index) in a `cluster_map`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterGroup {
    /// The node that leads the group; 0 while none is known (an election is running).
    pub leader: u64,
    pub term: u64,
    /// Voting members, by node id.
    pub voters: Vec<u64>,
    /// Members that receive the log without voting (a node being added), by node id.
    pub learners: Vec<u64>,
}

/// The answer to `cluster_map`: every node, and each group's leader and members. A server not in
/// cluster mode answers one node (id 0, its own addresses) leading every group, so clients treat
/// both alike ([`ClusterMap::is_single_server`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterMap {
    /// Moves whenever a leader or a membership changes: a client keeps the newer of two maps of
    /// one node.
    pub version: u64,
    /// Empty: not a cluster, or not initialized yet.
    pub cluster_id: String,
    /// Every node that is a member of some group.
    pub nodes: Vec<ClusterNode>,
    /// One per shard index: the map's shard count is their number.
    pub groups: Vec<ClusterGroup>,
}

impl ClusterMap {
    /// The map a server not in cluster mode answers: itself as node 0 at `native` (its shard 0
    /// address), leading each of its `shard_count` groups alone.
    pub fn single_server(native: &str, shard_count: u16) -> ClusterMap {
        let node = ClusterNode { native: native.to_owned(), ..ClusterNode::default() };
        let group = ClusterGroup { leader: 0, term: 0, voters: vec![0], learners: Vec::new() };
        ClusterMap {
            version: 0,
            cluster_id: String::new(),
            nodes: vec![node],
            groups: vec![group; usize::from(shard_count)],
        }
    }

    /// Whether the map is a single server's (one node, id 0): no cluster, nothing to route.
    pub fn is_single_server(&self) -> bool {
        matches!(self.nodes.as_slice(), [only] if only.node_id == 0)
    }

    pub fn node(&self, node_id: u64) -> Option<&ClusterNode> {
        self.nodes.iter().find(|node| node.node_id == node_id)
    }

    /// The node that leads `group`, if the map knows one and knows the node.
    pub fn leader_of(&self, group: u16) -> Option<&ClusterNode> {
        let leader = self.groups.get(usize::from(group))?.leader;
        self.nodes.iter().find(|node| node.node_id == leader)
    }

    /// The map's shard count (its number of groups).
    pub fn shard_count(&self) -> u16 {
        u16::try_from(self.groups.len()).expect("a map holds at most CLUSTER_GROUPS_MAX groups")
    }

    /// Checks the counts and lengths the protocol bounds, as an encoder must before writing.
    pub fn check(&self) -> Result<(), ProtocolError> {
        check_cluster_id(&self.cluster_id)?;
        check_count("nodes", self.nodes.len(), CLUSTER_NODES_MAX)?;
        if self.groups.is_empty() {
            return Err(ProtocolError::InvalidCluster { reason: "a map has at least one group" });
        }
        check_count("groups", self.groups.len(), CLUSTER_GROUPS_MAX)?;
        for node in &self.nodes {
            [&node.peer, &node.native, &node.resp].into_iter().try_for_each(|address| check_address(address))?;
        }
        for group in &self.groups {
            check_count("voters", group.voters.len(), CLUSTER_NODES_MAX)?;
            check_count("learners", group.learners.len(), CLUSTER_NODES_MAX)?;
        }
        Ok(())
    }
}

/// What a replica is in its group, as `cluster_status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RaftRole {
    Follower = 0,
    Candidate = 1,
    Leader = 2,
    /// Receives the log without voting (a node being added).
    Learner = 3,
    /// The group has no members yet (`cluster_init` makes them).
    Uninitialized = 4,
}

impl RaftRole {
    pub const ALL: [RaftRole; 5] =
        [RaftRole::Follower, RaftRole::Candidate, RaftRole::Leader, RaftRole::Learner, RaftRole::Uninitialized];

    pub fn from_u8(raw: u8) -> Result<RaftRole, ProtocolError> {
        RaftRole::ALL
            .iter()
            .copied()
            .find(|role| *role as u8 == raw)
            .ok_or(ProtocolError::InvalidField { field: "role", value: u64::from(raw) })
    }

    pub fn name(self) -> &'static str {
        match self {
            RaftRole::Follower => "follower",
            RaftRole::Candidate => "candidate",
            RaftRole::Leader => "leader",
            RaftRole::Learner => "learner",
            RaftRole::Uninitialized => "uninitialized",
        }
    }
}

/// How far one member of a group has the leader's log, as the leader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProgress {
    pub node_id: u64,
    /// The last log index the member is known to hold.
    pub matched: u64,
    /// Entries it lacks: the leader's last log index minus `matched`.
    pub lag: u64,
}

/// The answer to `cluster_status`: one replica of a group, as the node that answered sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    /// The node that answered.
    pub node_id: u64,
    pub role: RaftRole,
    /// 0 while none is known.
    pub leader: u64,
    pub term: u64,
    /// Index of the last entry of the replica's log.
    pub last_log: u64,
    /// Index of the last entry known committed (durable on a majority).
    pub committed: u64,
    /// Index of the last entry applied to the shard's pools.
    pub applied: u64,
    /// Index of the last entry the replica's latest snapshot covers.
    pub snapshot: u64,
    /// On the leader: every other member's progress; empty elsewhere.
    pub followers: Vec<FollowerProgress>,
}

/// The failure that answers a pool request on a shard whose group this node does not lead (or
/// leads without a valid lease). Nothing was changed; the client sends the request to the leader.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NotLeader {
    pub group: u16,
    /// The node that leads the group; 0 while none is known (an election is running).
    pub leader: u64,
    /// `host:port` of the leader's native listener for this shard (the port already plus the
    /// group); empty while the leader is unknown.
    pub leader_native: String,
    /// The version of the answering node's map: newer than a client's, the client refreshes its
    /// map.
    pub map_version: u64,
    pub message: String,
}

impl NotLeader {
    /// The code a `not_leader` frame carries: clients that read only `error` frames see it as
    /// this error code.
    pub const CODE: ErrorCode = ErrorCode::NotLeader;

    pub(crate) fn encode(&self, out: &mut BytesMut) {
        out.put_u16_le(NotLeader::CODE.as_u16());
        out.put_u16_le(self.group);
        out.put_u64_le(self.leader);
        put_str16(out, &self.leader_native);
        out.put_u64_le(self.map_version);
        put_str16(out, crate::message::truncate_utf8(&self.message, u16::MAX as usize));
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<NotLeader, ProtocolError> {
        let code = r.u16()?;
        if code != NotLeader::CODE.as_u16() {
            return Err(ProtocolError::InvalidField { field: "not_leader code", value: u64::from(code) });
        }
        Ok(NotLeader {
            group: r.u16()?,
            leader: r.u64()?,
            leader_native: read_address(r, "leader address")?,
            map_version: r.u64()?,
            message: r.str16("not_leader message")?.to_owned(),
        })
    }
}

/// The administration of a group, each request sent to shard `group` of a node (needs `admin`
/// on every pool, `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterAdmin {
    /// Makes `members` the group's first voters; sent to one of them.
    Init { group: u16, members: Vec<ClusterNode> },
    /// Sent to the group's leader: adds `node` as a learner, waits until it has caught up, then
    /// makes it a voter.
    AddNode { group: u16, node: ClusterNode },
    /// Sent to the group's leader: removes the member `node_id`.
    RemoveNode { group: u16, node_id: u64 },
    /// Sent to the group's leader: hands the leadership to the member `to`.
    TransferLeader { group: u16, to: u64 },
    /// Any node: its replica of the group.
    Status { group: u16 },
}

impl ClusterAdmin {
    /// The group the request is about (and the shard it is sent to).
    pub fn group(&self) -> u16 {
        match self {
            ClusterAdmin::Init { group, .. }
            | ClusterAdmin::AddNode { group, .. }
            | ClusterAdmin::RemoveNode { group, .. }
            | ClusterAdmin::TransferLeader { group, .. }
            | ClusterAdmin::Status { group } => *group,
        }
    }

    /// The request's name in `docs/protocol.md`.
    pub fn name(&self) -> &'static str {
        match self {
            ClusterAdmin::Init { .. } => "cluster_init",
            ClusterAdmin::AddNode { .. } => "cluster_add_node",
            ClusterAdmin::RemoveNode { .. } => "cluster_remove_node",
            ClusterAdmin::TransferLeader { .. } => "cluster_transfer_leader",
            ClusterAdmin::Status { .. } => "cluster_status",
        }
    }

    /// The member rules: `cluster_init` names 1 to [`CLUSTER_NODES_MAX`] distinct nodes, and
    /// every node it or `cluster_add_node` names is one a cluster can reach.
    pub(crate) fn check(&self) -> Result<(), ProtocolError> {
        match self {
            ClusterAdmin::Init { members, .. } => {
                if members.is_empty() {
                    return Err(ProtocolError::InvalidCluster { reason: "cluster_init names at least one member" });
                }
                check_count("members", members.len(), CLUSTER_NODES_MAX)?;
                for (index, member) in members.iter().enumerate() {
                    member.check_member()?;
                    if members[..index].iter().any(|earlier| earlier.node_id == member.node_id) {
                        return Err(ProtocolError::InvalidCluster { reason: "a node id appears twice" });
                    }
                }
                Ok(())
            }
            ClusterAdmin::AddNode { node, .. } => node.check_member(),
            ClusterAdmin::RemoveNode { node_id, .. } | ClusterAdmin::TransferLeader { to: node_id, .. } => {
                match node_id {
                    0 => Err(ProtocolError::InvalidCluster { reason: "a node id is 1 or more" }),
                    _ => Ok(()),
                }
            }
            ClusterAdmin::Status { .. } => Ok(()),
        }
    }

    pub(crate) fn encode(&self, out: &mut BytesMut) {
        out.put_u16_le(self.group());
        match self {
            ClusterAdmin::Init { members, .. } => {
                out.put_u16_le(u16::try_from(members.len()).expect("members are checked against CLUSTER_NODES_MAX"));
                for member in members {
                    member.encode(out);
                }
            }
            ClusterAdmin::AddNode { node, .. } => node.encode(out),
            ClusterAdmin::RemoveNode { node_id, .. } | ClusterAdmin::TransferLeader { to: node_id, .. } => {
                out.put_u64_le(*node_id)
            }
            ClusterAdmin::Status { .. } => {}
        }
    }
}

/// Which administration request an opcode carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AdminKind {
    Init,
    AddNode,
    RemoveNode,
    TransferLeader,
    Status,
}

impl AdminKind {
    pub(crate) fn decode(self, r: &mut Reader<'_>) -> Result<ClusterAdmin, ProtocolError> {
        let group = r.u16()?;
        let admin = match self {
            AdminKind::Init => {
                let count = usize::from(r.u16()?);
                check_count("members", count, CLUSTER_NODES_MAX)?;
                let members = (0..count).map(|_| ClusterNode::decode(r)).collect::<Result<_, _>>()?;
                ClusterAdmin::Init { group, members }
            }
            AdminKind::AddNode => ClusterAdmin::AddNode { group, node: ClusterNode::decode(r)? },
            AdminKind::RemoveNode => ClusterAdmin::RemoveNode { group, node_id: r.u64()? },
            AdminKind::TransferLeader => ClusterAdmin::TransferLeader { group, to: r.u64()? },
            AdminKind::Status => ClusterAdmin::Status { group },
        };
        admin.check()?;
        Ok(admin)
    }
}

pub(crate) fn encode_node_info(info: &NodeInfo, out: &mut BytesMut) {
    info.node.encode(out);
    put_str16(out, &info.cluster_id);
}

pub(crate) fn decode_node_info(r: &mut Reader<'_>) -> Result<NodeInfo, ProtocolError> {
    let node = ClusterNode::decode(r)?;
    let cluster_id = read_cluster_id(r)?;
    Ok(NodeInfo { node, cluster_id })
}

/// # Panics
/// If the map breaks a limit; encoders call [`ClusterMap::check`] first.
pub(crate) fn encode_map(map: &ClusterMap, out: &mut BytesMut) {
    let count = |len: usize| u16::try_from(len).expect("maps are checked against the cluster limits");
    out.put_u64_le(map.version);
    put_str16(out, &map.cluster_id);
    out.put_u16_le(count(map.groups.len()));
    out.put_u16_le(count(map.nodes.len()));
    for node in &map.nodes {
        node.encode_map_entry(out);
    }
    for group in &map.groups {
        out.put_u64_le(group.leader);
        out.put_u64_le(group.term);
        put_node_ids(out, &group.voters);
        put_node_ids(out, &group.learners);
    }
}

pub(crate) fn decode_map(r: &mut Reader<'_>) -> Result<ClusterMap, ProtocolError> {
    let version = r.u64()?;
    let cluster_id = read_cluster_id(r)?;
    let shard_count = usize::from(r.u16()?);
    if shard_count == 0 {
        return Err(ProtocolError::InvalidCluster { reason: "a map has at least one group" });
    }
    check_count("groups", shard_count, CLUSTER_GROUPS_MAX)?;
    let node_count = usize::from(r.u16()?);
    check_count("nodes", node_count, CLUSTER_NODES_MAX)?;
    let nodes = (0..node_count).map(|_| ClusterNode::decode_map_entry(r)).collect::<Result<_, _>>()?;
    let groups = (0..shard_count)
        .map(|_| {
            Ok(ClusterGroup {
                leader: r.u64()?,
                term: r.u64()?,
                voters: read_node_ids(r, "voters")?,
                learners: read_node_ids(r, "learners")?,
            })
        })
        .collect::<Result<_, ProtocolError>>()?;
    Ok(ClusterMap { version, cluster_id, nodes, groups })
}

pub(crate) fn encode_status(status: &ClusterStatus, out: &mut BytesMut) {
    out.put_u64_le(status.node_id);
    out.put_u8(status.role as u8);
    for figure in [status.leader, status.term, status.last_log, status.committed, status.applied, status.snapshot] {
        out.put_u64_le(figure);
    }
    let count = u16::try_from(status.followers.len()).expect("followers are checked against CLUSTER_NODES_MAX");
    out.put_u16_le(count);
    for follower in &status.followers {
        out.put_u64_le(follower.node_id);
        out.put_u64_le(follower.matched);
        out.put_u64_le(follower.lag);
    }
}

pub(crate) fn decode_status(r: &mut Reader<'_>) -> Result<ClusterStatus, ProtocolError> {
    let node_id = r.u64()?;
    let role = RaftRole::from_u8(r.u8()?)?;
    let (leader, term, last_log, committed, applied, snapshot) =
        (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
    let count = usize::from(r.u16()?);
    check_count("followers", count, CLUSTER_NODES_MAX)?;
    let followers = (0..count)
        .map(|_| Ok(FollowerProgress { node_id: r.u64()?, matched: r.u64()?, lag: r.u64()? }))
        .collect::<Result<_, ProtocolError>>()?;
    Ok(ClusterStatus { node_id, role, leader, term, last_log, committed, applied, snapshot, followers })
}

impl ClusterStatus {
    /// Checks the follower count against [`CLUSTER_NODES_MAX`], as an encoder must.
    pub fn check(&self) -> Result<(), ProtocolError> {
        check_count("followers", self.followers.len(), CLUSTER_NODES_MAX)
    }
}

fn check_count(what: &'static str, count: usize, max: usize) -> Result<(), ProtocolError> {
    if count > max {
        return Err(ProtocolError::TooManyEntries { what, count, max });
    }
    Ok(())
}

fn check_address(address: &str) -> Result<(), ProtocolError> {
    if address.len() > NODE_ADDRESS_BYTES_MAX {
        return Err(ProtocolError::FieldTooLong {
            field: "node address",
            len: address.len(),
            max: NODE_ADDRESS_BYTES_MAX,
        });
    }
    Ok(())
}

fn check_cluster_id(cluster_id: &str) -> Result<(), ProtocolError> {
    if cluster_id.len() > CLUSTER_ID_BYTES_MAX {
        return Err(ProtocolError::FieldTooLong {
            field: "cluster id",
            len: cluster_id.len(),
            max: CLUSTER_ID_BYTES_MAX,
        });
    }
    Ok(())
}

fn read_address(r: &mut Reader<'_>, field: &'static str) -> Result<String, ProtocolError> {
    let address = r.str16(field)?;
    check_address(address)?;
    Ok(address.to_owned())
}

fn read_cluster_id(r: &mut Reader<'_>) -> Result<String, ProtocolError> {
    let cluster_id = r.str16("cluster id")?;
    check_cluster_id(cluster_id)?;
    Ok(cluster_id.to_owned())
}

fn put_node_ids(out: &mut BytesMut, ids: &[u64]) {
    out.put_u16_le(u16::try_from(ids.len()).expect("member lists are checked against CLUSTER_NODES_MAX"));
    for id in ids {
        out.put_u64_le(*id);
    }
}

fn read_node_ids(r: &mut Reader<'_>, what: &'static str) -> Result<Vec<u64>, ProtocolError> {
    let count = usize::from(r.u16()?);
    check_count(what, count, CLUSTER_NODES_MAX)?;
    (0..count).map(|_| r.u64()).collect()
}

/// The largest `cluster_map` body: version, cluster id, the two counts, every node with
/// addresses of the longest length, and every group with as many voters and learners as a
/// cluster has nodes.
const CLUSTER_MAP_BYTES_MAX: usize = 8
    + (2 + CLUSTER_ID_BYTES_MAX)
    + 2
    + 2
    + CLUSTER_NODES_MAX * (8 + 3 * (2 + NODE_ADDRESS_BYTES_MAX))
    + CLUSTER_GROUPS_MAX * (8 + 8 + 2 * (2 + CLUSTER_NODES_MAX * 8));
const _: () = assert!(CLUSTER_MAP_BYTES_MAX <= crate::limits::FRAME_BODY_BYTES_MAX);
// Counts and lengths travel as u16; the largest of each kind fits.
const _: () = assert!(CLUSTER_GROUPS_MAX <= u16::MAX as usize);
const _: () = assert!(NODE_ADDRESS_BYTES_MAX <= u16::MAX as usize);

#[cfg(test)]
mod tests {
    use super::*;

    fn node(node_id: u64) -> ClusterNode {
        ClusterNode {
            node_id,
            peer: format!("10.0.0.{node_id}:7300"),
            native: format!("10.0.0.{node_id}:7100"),
            resp: String::new(),
        }
    }

    fn map(nodes: Vec<ClusterNode>, groups: usize) -> ClusterMap {
        let group = ClusterGroup { leader: 2, term: 1, voters: vec![1, 2], learners: Vec::new() };
        ClusterMap { version: 1, cluster_id: "c".to_owned(), nodes, groups: vec![group; groups] }
    }

    /// Proves a map names its single server and its leaders, and that `check` refuses what a
    /// decoder would: too many nodes or groups, none, a long address or cluster id.
    #[test]
    fn maps_know_their_leaders_and_their_limits() {
        let cluster = map(vec![node(1), node(2)], 2);
        assert_eq!(cluster.check(), Ok(()));
        assert!(!cluster.is_single_server());
        assert_eq!(cluster.leader_of(1), Some(&node(2)));
        assert_eq!(cluster.leader_of(2), None, "no such group");
        assert_eq!(cluster.shard_count(), 2);
        assert!(map(vec![node(0)], 1).is_single_server());

        let too_many = map((1..=CLUSTER_NODES_MAX as u64 + 1).map(node).collect(), 1);
        assert!(matches!(too_many.check(), Err(ProtocolError::TooManyEntries { what: "nodes", .. })));
        assert!(matches!(map(vec![], CLUSTER_GROUPS_MAX + 1).check(), Err(ProtocolError::TooManyEntries { .. })));
        assert!(matches!(map(vec![], 0).check(), Err(ProtocolError::InvalidCluster { .. })));
        let mut long = map(vec![node(1)], 1);
        long.nodes[0].native = "n".repeat(NODE_ADDRESS_BYTES_MAX + 1);
        assert!(matches!(long.check(), Err(ProtocolError::FieldTooLong { .. })));
        let mut long = map(vec![node(1)], 1);
        long.cluster_id = "c".repeat(CLUSTER_ID_BYTES_MAX + 1);
        assert_eq!(long.check().map_err(|e| e.code()), Err(ErrorCode::InvalidArgument));
    }

    #[test]
    fn shard_addresses_add_the_shard_to_the_port() {
        assert_eq!(shard_address("10.0.0.1:7100", 3).as_deref(), Some("10.0.0.1:7103"));
        assert_eq!(shard_address("[::1]:6379", 1).as_deref(), Some("[::1]:6380"));
        assert_eq!(shard_address("host:65535", 1), None);
        assert_eq!(shard_address("no-port", 0), None);
    }

    /// Proves the member rules a client checks before sending and a server at decode.
    #[test]
    fn members_have_ids_addresses_and_no_twins() {
        let init = |members| ClusterAdmin::Init { group: 0, members };
        assert_eq!(init(vec![node(1), node(2)]).check(), Ok(()));
        for refused in [
            init(Vec::new()),
            init(vec![node(1), node(1)]),
            init(vec![node(0)]),
            init(vec![ClusterNode { native: String::new(), ..node(1) }]),
            init((1..=CLUSTER_NODES_MAX as u64 + 1).map(node).collect()),
            ClusterAdmin::AddNode { group: 0, node: ClusterNode { peer: String::new(), ..node(3) } },
            ClusterAdmin::RemoveNode { group: 0, node_id: 0 },
            ClusterAdmin::TransferLeader { group: 0, to: 0 },
        ] {
            assert_eq!(refused.check().map_err(|e| e.code()), Err(ErrorCode::InvalidArgument), "{refused:?}");
        }
    }
}
