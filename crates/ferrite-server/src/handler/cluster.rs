//! Cluster mode's requests on a shard: what any node answers from its map (`node_info`,
//! `cluster_map`), the way in for the administration of its group (`cluster_admin`, carried out
//! by the Raft core), and the `not_leader` refusal with which a replica that does not lead its
//! group sends clients to the leader. A server not in cluster mode answers the first two as a
//! cluster of one node (id 0) leading every group, so clients treat both modes alike, and refuses
//! the administration.

use bytes::BytesMut;
use ferrite_proto::{
    ClusterGroup, ClusterMap, ClusterNode, ErrorCode, NodeInfo, NotLeader, Response, CLUSTER_GROUPS_MAX,
};

use super::{Failure, ShardState};
use crate::cluster::view::{shard_address, ClusterView};

// Every shard index of a server is a group of its cluster map.
const _: () = assert!(crate::config::SHARDS_MAX <= CLUSTER_GROUPS_MAX);

impl ShardState {
    /// `node_info`: this node and its cluster; node 0 with its native address on a server not in
    /// cluster mode.
    pub(super) fn node_info(&self) -> Response<'static> {
        let Some(cluster) = &self.cluster else {
            return Response::NodeInfo(NodeInfo { node: self.single_server_node(), cluster_id: String::new() });
        };
        let view = cluster.view();
        let node = match view.node(view.node_id) {
            Some(known) => cluster_node(known),
            // A node not yet a member knows only its id and where it serves.
            None => ClusterNode { node_id: view.node_id, ..self.single_server_node() },
        };
        Response::NodeInfo(NodeInfo { node, cluster_id: view.cluster_id })
    }

    /// `cluster_map`: every node and each group's leader and members, as this node knows them.
    pub(super) fn cluster_map(&self) -> Result<Response<'static>, Failure> {
        let map = match &self.cluster {
            Some(cluster) => map_of(&cluster.view()),
            None => self.single_server_map(),
        };
        map.check().map_err(|error| {
            Failure::new(ErrorCode::Internal, format!("this node's cluster map cannot be sent: {error}"))
        })?;
        Ok(Response::ClusterMap(map))
    }

    /// The refusal of a request on this shard by a node that does not lead its group (or leads
    /// it without a valid lease): a `not_leader` frame naming the leader this node knows of, its
    /// native address for this shard, and this node's map version. The Raft core answers every
    /// request that must go to the leader (pool requests, invocations, backups) with it.
    ///
    /// # Panics
    /// On a server not in cluster mode, which leads every group.
    pub(crate) fn not_leader(&self) -> Failure {
        not_leader(self.cluster.as_ref().expect("only a cluster node can be a group's follower"))
    }

    /// A server not in cluster mode as a cluster node: id 0, its shard 0 native address, no
    /// peer listener.
    fn single_server_node(&self) -> ClusterNode {
        ClusterNode { native: self.shard_addresses.first().cloned().unwrap_or_default(), ..ClusterNode::default() }
    }

    /// The map of a server not in cluster mode: itself, leading every group.
    fn single_server_map(&self) -> ClusterMap {
        let shard_count = u16::try_from(self.shard_addresses.len()).expect("shard count is bounded by SHARDS_MAX");
        ClusterMap::single_server(&self.single_server_node().native, shard_count)
    }
}

impl Failure {
    /// A `not_leader` refusal (see [`ShardState::not_leader`]); its error code is
    /// [`ErrorCode::NotLeader`].
    pub(crate) fn redirect(not_leader: NotLeader) -> Failure {
        let message = not_leader.message.clone();
        Failure { redirect: Some(Box::new(not_leader)), ..Failure::new(NotLeader::CODE, message) }
    }

    /// Appends the frame that tells the client of this failure: a `not_leader` frame for a
    /// redirect, an `error` frame otherwise.
    pub(crate) fn encode(&self, request_id: u64, out: &mut BytesMut) {
        match &self.redirect {
            Some(not_leader) => Response::NotLeader((**not_leader).clone()).encode(request_id, out),
            None => Response::Error { code: self.code, message: &self.message }.encode(request_id, out),
        }
    }
}

pub(super) fn cluster_node(node: &crate::cluster::view::NodeInfo) -> ClusterNode {
    ClusterNode { node_id: node.node_id, peer: node.peer.clone(), native: node.native.clone(), resp: node.resp.clone() }
}

/// The `not_leader` refusal of a replica of `cluster`'s group (see [`ShardState::not_leader`]).
/// A leader this node's map names but that is this node itself (it was just elected, or is being
/// deposed) is not named: the client waits and asks again rather than come back at once.
pub(crate) fn not_leader(cluster: &crate::cluster::ShardCluster) -> Failure {
    let view = cluster.view();
    let leader = view.leader_of(cluster.group).filter(|leader| leader.node_id != view.node_id);
    let leader_native = leader.and_then(|leader| shard_address(&leader.native, cluster.group)).unwrap_or_default();
    let message = match leader {
        Some(leader) => format!(
            "node {} does not lead group {}; node {} does, at {leader_native}",
            view.node_id, cluster.group, leader.node_id
        ),
        None => {
            format!("node {} does not lead group {} now, and knows no other leader yet", view.node_id, cluster.group)
        }
    };
    Failure::redirect(NotLeader {
        group: u16::try_from(cluster.group).expect("groups are shard indexes"),
        leader: leader.map_or(0, |leader| leader.node_id),
        leader_native,
        map_version: view.version,
        message,
    })
}

/// A node's view of its cluster as the `cluster_map` answer carries it.
fn map_of(view: &ClusterView) -> ClusterMap {
    ClusterMap {
        version: view.version,
        cluster_id: view.cluster_id.clone(),
        nodes: view.nodes.iter().map(cluster_node).collect(),
        groups: view
            .groups
            .iter()
            .map(|group| ClusterGroup {
                leader: group.leader.unwrap_or(0),
                term: group.term,
                voters: group.voters.clone(),
                learners: group.learners.clone(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferrite_proto::{ClusterAdmin, Header, HEADER_BYTES};

    use super::*;
    use crate::cluster::view::{ClusterMap as NodeMap, GroupView, NodeInfo as ViewNode};
    use crate::cluster::ShardCluster;
    use crate::session::Session;

    fn view_node(id: u64) -> ViewNode {
        ViewNode {
            node_id: id,
            peer: format!("10.0.0.{id}:7300"),
            native: format!("10.0.0.{id}:7100"),
            resp: String::new(),
        }
    }

    /// Shard 1 of node 1 in a cluster of nodes 1 and 2 where `leader` leads group 1.
    fn follower(leader: Option<u64>) -> ShardCluster {
        let map = NodeMap::new(1, 2);
        let group = GroupView { leader, term: 3, voters: vec![1, 2], ..GroupView::default() };
        map.update_group(1, group, &[view_node(1), view_node(2)], "c1");
        ShardCluster { map, group: 1 }
    }

    /// Shard 1 of a two-shard server.
    fn shard_one(tag: &str) -> (ShardState, std::path::PathBuf) {
        let (mut state, dir) = super::super::tests::durable_shard(tag);
        state.index = 1;
        state.shard_addresses = Arc::from(vec!["127.0.0.1:7100".to_owned(), "127.0.0.1:7101".to_owned()]);
        (state, dir)
    }

    fn decoded(failure: &Failure) -> Response<'static> {
        let mut frame = BytesMut::new();
        failure.encode(7, &mut frame);
        let header = Header::parse(&frame).expect("a whole header");
        let response = Response::decode(&header, &frame[HEADER_BYTES..]).expect("decodes");
        match response {
            Response::NotLeader(not_leader) => Response::NotLeader(not_leader),
            Response::Error { code, .. } => Response::Error { code, message: "" },
            other => panic!("a failure is not {other:?}"),
        }
    }

    /// Proves the refusal a follower answers names the leader and its address for this shard
    /// (the port plus the group), and says so while no leader is known; and that it travels as
    /// a `not_leader` frame, other failures as `error` frames.
    #[test]
    fn a_follower_names_the_leader_of_its_group() {
        let (mut state, dir) = shard_one("cluster-follower");
        state.cluster = Some(follower(Some(2)));
        let refusal = state.not_leader();
        assert_eq!(refusal.code, ErrorCode::NotLeader);
        let Response::NotLeader(not_leader) = decoded(&refusal) else { panic!("a not_leader frame") };
        assert_eq!((not_leader.group, not_leader.leader), (1, 2));
        assert_eq!(not_leader.leader_native, "10.0.0.2:7101");
        assert!(not_leader.map_version > 0 && not_leader.message.contains("node 2"), "{not_leader:?}");

        state.cluster = Some(follower(None));
        let Response::NotLeader(unknown) = decoded(&state.not_leader()) else { panic!("a not_leader frame") };
        assert_eq!((unknown.leader, unknown.leader_native.as_str()), (0, ""));
        assert!(unknown.message.contains("knows no other leader"), "{}", unknown.message);

        let other = Failure::new(ErrorCode::KeyNotFound, "no key");
        assert_eq!(decoded(&other), Response::Error { code: ErrorCode::KeyNotFound, message: "" });
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Proves a cluster node answers from its map: its own entry, each group's leader (0 where
    /// none is known), and that the administration reaches the core only on its group's shard.
    #[test]
    fn a_cluster_node_answers_from_its_map() {
        let (mut state, dir) = shard_one("cluster-map");
        state.cluster = Some(follower(Some(2)));
        let Response::NodeInfo(info) = state.node_info() else { panic!("node_info") };
        assert_eq!((info.node.node_id, info.node.peer.as_str(), info.cluster_id.as_str()), (1, "10.0.0.1:7300", "c1"));
        let Ok(Response::ClusterMap(map)) = state.cluster_map() else { panic!("cluster_map") };
        assert_eq!(map.nodes.len(), 2);
        assert_eq!(map.groups.iter().map(|g| g.leader).collect::<Vec<_>>(), [0, 2]);
        assert_eq!(map.groups[1].voters, [1, 2]);

        let session = Session::default();
        let elsewhere = ClusterAdmin::Status { group: 0 };
        let refused = state.cluster_admin(&elsewhere, 1, &session).expect_err("wrong shard");
        assert_eq!(refused.code, ErrorCode::WrongShard, "{}", refused.message);
        let here = state.cluster_admin(&ClusterAdmin::Status { group: 1 }, 1, &session).expect_err("no core");
        assert_eq!(here.code, ErrorCode::Internal, "{}", here.message);
        let _ = std::fs::remove_dir_all(dir);
    }
}
