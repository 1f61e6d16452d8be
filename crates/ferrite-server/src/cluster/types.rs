//! The Raft types of a shard's group: what its log entries carry and what it knows of a node.

use std::fmt;

use bytes::Bytes;

/// The data of a normal entry of a group's log: one record of the shard, with the node that
/// executed it and that node's number for it, framed as the shard's log keeps it
/// (`ferrite_store::persistence::ssd::entry`).
#[derive(Clone, PartialEq, Eq)]
pub enum Redo {
    /// Proposed by this node's leading replica, which appended the entry to its log when it
    /// executed the write: the log holds it already, at the index Raft gives it, under `seq`.
    Appended { seq: u64 },
    /// The entry's whole record payload (frame and record), as the log holds it and as it travels
    /// to the other replicas.
    Payload(Bytes),
}

impl fmt::Debug for Redo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Redo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Redo::Appended { seq } => write!(f, "appended#{seq}"),
            Redo::Payload(payload) => write!(f, "payload({} bytes)", payload.len()),
        }
    }
}

/// A member node as Raft's membership records it: where its listeners are (shard 0's address;
/// group g adds g to the port).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardNode {
    /// `host:port` of its peer listener.
    pub peer: String,
    /// `host:port` of its native protocol listener.
    pub native: String,
    /// `host:port` of its RESP listener; empty if it serves none.
    pub resp: String,
}

openraft::declare_raft_types!(
    /// The type configuration of every shard's group.
    pub TypeConfig:
        D = Redo,
        R = (),
        NodeId = u64,
        Node = ShardNode,
        Term = u64,
        LeaderId = openraft::impls::leader_id_std::LeaderId<u64, u64>,
);

pub type C = TypeConfig;
pub type Entry = openraft::type_config::alias::EntryOf<C>;
pub type LogId = openraft::type_config::alias::LogIdOf<C>;
pub type Vote = openraft::type_config::alias::VoteOf<C>;
pub type Membership = openraft::Membership<u64, ShardNode>;
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<C>;

/// The log id of entry `index` of `term`.
pub fn log_id(term: u64, index: u64) -> LogId {
    openraft::LogId::new_term_index(term, index)
}

/// A membership of one voter set, `ids`, each with a node of placeholder addresses: for tests.
#[cfg(test)]
pub(crate) fn membership_of(ids: &[u64]) -> Membership {
    let nodes: std::collections::BTreeMap<u64, ShardNode> =
        ids.iter().map(|id| (*id, ShardNode { peer: format!("p{id}"), ..ShardNode::default() })).collect();
    Membership::new(vec![ids.iter().copied().collect()], nodes).expect("valid")
}
