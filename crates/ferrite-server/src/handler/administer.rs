//! The administration of a group as a request (`cluster_init`, `cluster_add_node`,
//! `cluster_remove_node`, `cluster_transfer_leader`, `cluster_status`): checked here, queued on
//! the shard's replica, carried out by the cluster core (`cluster::admin`), and answered through
//! a completion when it is done (adding a node answers once it caught up and votes).

use std::sync::Arc;

use ferrite_proto::{ClusterAdmin, ClusterStatus, ErrorCode, FollowerProgress, RaftRole, Response};

use super::cluster::not_leader;
use super::{Accepted, Failure, ShardState};
use crate::cluster::admin::{AdminError, AdminJob, AdminOp, AdminOutcome, Status, StatusRole};
use crate::cluster::view::NodeInfo;
use crate::completion::Completion;
use crate::session::Session;
use crate::stats::Op;

/// What the administration of a group answers on a server started without `--node-id`.
const NOT_IN_CLUSTER_MODE: &str = "this server is not in cluster mode (start it with --node-id)";

impl ShardState {
    /// The administration of this shard's group, already checked and authorized (`admin` on
    /// every pool). Refused on a server not in cluster mode, and when sent to a shard other than
    /// its group's; otherwise answered once the replica has carried it out.
    pub(crate) fn cluster_admin(
        &mut self,
        admin: &ClusterAdmin,
        request_id: u64,
        session: &Session,
    ) -> Result<Accepted, Failure> {
        let Some(cluster) = self.cluster.clone() else {
            return Err(Failure::new(ErrorCode::InvalidArgument, NOT_IN_CLUSTER_MODE));
        };
        if admin.group() != self.index {
            return Err(Failure::new(
                ErrorCode::WrongShard,
                format!(
                    "{} of group {} reached shard {}: send it to shard {} of the node (its native port plus {})",
                    admin.name(),
                    admin.group(),
                    self.index,
                    admin.group(),
                    admin.group()
                ),
            ));
        }
        let Some(replication) = self.replication.as_mut() else {
            return Err(Failure::new(
                ErrorCode::Internal,
                format!("this node's replica of group {} is not running", self.index),
            ));
        };
        let op = admin_op(admin);
        let completion = Completion::telling(session.answers.clone(), Op::Other);
        let answer = Arc::clone(&completion);
        let answered = Answered::of(admin);
        replication.queue_admin(AdminJob {
            op,
            answer: Box::new(move |outcome| {
                let response = match outcome {
                    Ok(AdminOutcome::Done) => Ok(answered.response()),
                    Ok(AdminOutcome::Status(status)) => Ok(Response::ClusterStatus(status_of(status))),
                    Err(AdminError::NotLeader) => Err(not_leader(&cluster)),
                    Err(AdminError::Invalid(message)) => Err(Failure::new(ErrorCode::InvalidArgument, message)),
                    Err(AdminError::Failed(message)) => Err(Failure::new(ErrorCode::Internal, message)),
                };
                answer.complete(0, |out| match response {
                    Ok(response) => response.encode(request_id, out),
                    Err(failure) => failure.encode(request_id, out),
                });
            }),
        });
        Ok(Accepted::Later(completion))
    }
}

/// Which answer a successful request gets.
#[derive(Debug, Clone, Copy)]
enum Answered {
    Initialized,
    Added,
    Removed,
    Transferred,
    Status,
}

impl Answered {
    fn of(admin: &ClusterAdmin) -> Answered {
        match admin {
            ClusterAdmin::Init { .. } => Answered::Initialized,
            ClusterAdmin::AddNode { .. } => Answered::Added,
            ClusterAdmin::RemoveNode { .. } => Answered::Removed,
            ClusterAdmin::TransferLeader { .. } => Answered::Transferred,
            ClusterAdmin::Status { .. } => Answered::Status,
        }
    }

    fn response(self) -> Response<'static> {
        match self {
            Answered::Initialized => Response::ClusterInitialized,
            Answered::Added => Response::NodeAdded,
            Answered::Removed => Response::NodeRemoved,
            // A status is answered with its figures; this is never reached for one.
            Answered::Transferred | Answered::Status => Response::LeaderTransferred,
        }
    }
}

/// The core's form of a request.
fn admin_op(admin: &ClusterAdmin) -> AdminOp {
    let node = |node: &ferrite_proto::ClusterNode| NodeInfo {
        node_id: node.node_id,
        peer: node.peer.clone(),
        native: node.native.clone(),
        resp: node.resp.clone(),
    };
    match admin {
        ClusterAdmin::Init { members, .. } => AdminOp::Init { members: members.iter().map(node).collect() },
        ClusterAdmin::AddNode { node: added, .. } => AdminOp::AddNode(node(added)),
        ClusterAdmin::RemoveNode { node_id, .. } => AdminOp::RemoveNode(*node_id),
        ClusterAdmin::TransferLeader { to, .. } => AdminOp::TransferLeader(*to),
        ClusterAdmin::Status { .. } => AdminOp::Status,
    }
}

/// A replica's status as `cluster_status` answers it.
fn status_of(status: Status) -> ClusterStatus {
    ClusterStatus {
        node_id: status.node_id,
        role: match status.role {
            StatusRole::Follower => RaftRole::Follower,
            StatusRole::Candidate => RaftRole::Candidate,
            StatusRole::Leader => RaftRole::Leader,
            StatusRole::Learner => RaftRole::Learner,
            StatusRole::Uninitialized => RaftRole::Uninitialized,
        },
        leader: status.leader,
        term: status.term,
        last_log: status.last_log,
        committed: status.committed,
        applied: status.applied,
        snapshot: status.snapshot,
        followers: status
            .followers
            .into_iter()
            .map(|(node_id, matched, lag)| FollowerProgress { node_id, matched, lag })
            .collect(),
    }
}
