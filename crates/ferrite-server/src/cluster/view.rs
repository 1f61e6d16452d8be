//! What a node knows of its cluster: its members and, for each group (shard index), its leader,
//! term and replicas. Each shard's Raft group keeps its own entry current (when a leader, a term
//! or a membership changes); every shard reads the whole map: RESP's `CLUSTER` commands and
//! redirects, the native `cluster_map` and `not_leader` answers.

use std::sync::{Arc, RwLock};

/// A node as the cluster knows it: its id and the addresses (shard 0's; shard g adds g to the
/// port) of its listeners.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeInfo {
    pub node_id: u64,
    /// `host:port` of its peer (node-to-node) listener.
    pub peer: String,
    /// `host:port` of its native protocol listener.
    pub native: String,
    /// `host:port` of its RESP listener; empty if it serves none.
    pub resp: String,
}

/// One group (shard index) as its replica on this node sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupView {
    /// The node that leads the group, if one is known.
    pub leader: Option<u64>,
    pub term: u64,
    /// Voting members, by node id, ascending.
    pub voters: Vec<u64>,
    /// Members that receive the log but do not vote (a node being added), ascending.
    pub learners: Vec<u64>,
    /// Whether this node's replica leads the group and may answer its requests now.
    pub leads_here: bool,
    /// On the leader: the log index each other member holds (its replication progress).
    pub matched: Vec<(u64, u64)>,
    /// The index of the group's last log entry on this node.
    pub last_log: u64,
}

/// A snapshot of the cluster map.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterView {
    /// Empty while the cluster is not initialized.
    pub cluster_id: String,
    /// Changes whenever a group's leader, term or membership changes.
    pub version: u64,
    /// This node.
    pub node_id: u64,
    /// Every node that is a member of some group, by node id, ascending.
    pub nodes: Vec<NodeInfo>,
    /// One per shard index.
    pub groups: Vec<GroupView>,
}

impl ClusterView {
    pub fn node(&self, node_id: u64) -> Option<&NodeInfo> {
        self.nodes.iter().find(|node| node.node_id == node_id)
    }

    /// The node that leads `group`, if one is known and is a member.
    pub fn leader_of(&self, group: usize) -> Option<&NodeInfo> {
        self.groups.get(group)?.leader.and_then(|leader| self.node(leader))
    }

    /// How many members of `group` other than this node are known to hold its log up to `index`:
    /// the leader's replication progress (`matched`); 0 on a follower, which knows no one's.
    pub fn replicas_holding(&self, group: usize, index: u64) -> u64 {
        self.groups.get(group).map_or(0, |seen| {
            seen.matched.iter().filter(|&&(node, held)| node != self.node_id && held >= index).count() as u64
        })
    }
}

/// Adds `offset` to the port of `host:port` (an address of shard 0 becomes shard `offset`'s).
/// `None` for an address without a port or one past the last port.
pub fn shard_address(base: &str, offset: usize) -> Option<String> {
    let (host, port) = base.rsplit_once(':')?;
    let port = u16::try_from(u64::from(port.parse::<u16>().ok()?) + offset as u64).ok()?;
    Some(format!("{host}:{port}"))
}

/// The cluster map of a node, shared by its shards: each writes its own group, all read it.
#[derive(Debug)]
pub struct ClusterMap {
    view: RwLock<ClusterView>,
}

impl ClusterMap {
    pub fn new(node_id: u64, shard_count: usize) -> Arc<ClusterMap> {
        let view = ClusterView { node_id, groups: vec![GroupView::default(); shard_count], ..ClusterView::default() };
        Arc::new(ClusterMap { view: RwLock::new(view) })
    }

    /// A copy of the map as it is now.
    pub fn view(&self) -> ClusterView {
        self.view.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Reads the map in place (no copy).
    pub fn with<T>(&self, read: impl FnOnce(&ClusterView) -> T) -> T {
        read(&self.view.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// Records that this node's replica of `group` no longer answers its requests (it stops
    /// leading), before Raft's view says so.
    pub fn set_leads_here(&self, group: usize, leads: bool) {
        let mut view = self.view.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(slot) = view.groups.get_mut(group) {
            if slot.leads_here != leads {
                slot.leads_here = leads;
                view.version += 1;
            }
        }
    }

    /// Adds this node to the map as it tells others to reach it, so that it can say where it is
    /// before any group has members.
    pub fn introduce(&self, node: NodeInfo) {
        let mut view = self.view.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !view.nodes.iter().any(|known| known.node_id == node.node_id) {
            view.nodes.push(node);
            view.nodes.sort_by_key(|node| node.node_id);
        }
    }

    /// Records what group `group`'s replica here now sees, with the members it knows of (and the
    /// cluster's id): the version moves if the leader, term or membership changed.
    pub fn update_group(&self, group: usize, seen: GroupView, members: &[NodeInfo], cluster_id: &str) {
        let mut view = self.view.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(slot) = view.groups.get_mut(group) else { return };
        let moved = slot.leader != seen.leader
            || slot.term != seen.term
            || slot.voters != seen.voters
            || slot.learners != seen.learners;
        *slot = seen;
        let mut members_changed = false;
        for member in members {
            match view.nodes.iter_mut().find(|node| node.node_id == member.node_id) {
                Some(known) if known == member => {}
                Some(known) => {
                    *known = member.clone();
                    members_changed = true;
                }
                None => {
                    view.nodes.push(member.clone());
                    members_changed = true;
                }
            }
        }
        if members_changed {
            view.nodes.sort_by_key(|node| node.node_id);
        }
        if !cluster_id.is_empty() && view.cluster_id != cluster_id {
            view.cluster_id = cluster_id.to_owned();
            members_changed = true;
        }
        if moved || members_changed {
            view.version += 1;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Node `id` at `10.0.0.id`, its peer, native and RESP listeners on 7300, 7100 and 6379.
    pub(crate) fn node(id: u64) -> NodeInfo {
        NodeInfo {
            node_id: id,
            peer: format!("10.0.0.{id}:7300"),
            native: format!("10.0.0.{id}:7100"),
            resp: format!("10.0.0.{id}:6379"),
        }
    }

    /// A group's change of leader, term or members moves the version; the same view again does
    /// not; members are kept by id, ascending.
    #[test]
    fn the_version_moves_only_when_the_topology_does() {
        let map = ClusterMap::new(2, 2);
        let seen = GroupView { leader: Some(1), term: 3, voters: vec![1, 2, 3], ..GroupView::default() };
        map.update_group(0, seen.clone(), &[node(3), node(1), node(2)], "c1");
        let first = map.view();
        assert_eq!(first.nodes.iter().map(|n| n.node_id).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(first.leader_of(0), Some(&node(1)));
        assert_eq!(first.leader_of(1), None);
        map.update_group(0, GroupView { last_log: 99, ..seen.clone() }, &[node(1)], "c1");
        assert_eq!(map.view().version, first.version, "progress alone is no new topology");
        map.update_group(0, GroupView { leader: Some(2), term: 4, ..seen }, &[], "c1");
        assert!(map.view().version > first.version);
        assert_eq!(map.view().cluster_id, "c1");
    }

    /// Only other members whose progress reaches the index count.
    #[test]
    fn replicas_holding_counts_other_members_at_or_past_the_index() {
        let map = ClusterMap::new(1, 2);
        let seen = GroupView { leader: Some(1), matched: vec![(1, 50), (2, 10), (3, 9)], ..GroupView::default() };
        map.update_group(0, seen, &[], "c1");
        let view = map.view();
        assert_eq!(view.replicas_holding(0, 9), 2);
        assert_eq!(view.replicas_holding(0, 10), 1);
        assert_eq!(view.replicas_holding(0, 11), 0, "the node itself does not count");
        assert_eq!(view.replicas_holding(1, 0), 0, "a group whose progress is unknown here");
        assert_eq!(view.replicas_holding(7, 0), 0, "no such group");
    }

    #[test]
    fn shard_addresses_add_the_shard_to_the_port() {
        assert_eq!(shard_address("10.0.0.1:7100", 3).as_deref(), Some("10.0.0.1:7103"));
        assert_eq!(shard_address("[::1]:6379", 1).as_deref(), Some("[::1]:6380"));
        assert_eq!(shard_address("host:65535", 1), None);
        assert_eq!(shard_address("no-port", 0), None);
    }
}
