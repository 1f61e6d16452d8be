//! The administration of a group, carried out on the shard's thread by its replica: the first
//! members (`init`), adding and removing a node, handing the leadership over, and the replica's
//! status.
//!
//! Requests are queued on the replica ([`Replication::admin`]) and run one at a time by
//! [`administer`]. A change that appends an entry to the group's log pauses the shard's requests
//! while Raft appends it: a leader's log takes the entries it executes at the next index, and
//! Raft's entry must not meet one there.
//!
//! [`Replication::admin`]: super::replication::Replication::admin

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::async_runtime::WatchReceiver;
use openraft::{ChangeMembers, ServerState};
use tokio::sync::Notify;

use super::group::propose_executed;
use super::network::ShardRaft;
use super::replication::format_cluster_id;
use super::types::ShardNode;
use super::view::NodeInfo;
use crate::handler::ShardState;

/// How long a new node may go without taking more of the log before adding it is given up
/// (it stays a learner): long enough to stream and install a snapshot of a large shard, which
/// counts as one step.
const STALLED_AFTER: Duration = Duration::from_secs(300);
/// How far behind the leader's log a learner may be when it is made a voter.
const CAUGHT_UP_LAG: u64 = 64;
/// How long a transfer of the leadership may take.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(5);
/// How often progress is looked at while waiting.
const POLL: Duration = Duration::from_millis(20);

/// A request for the administration of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AdminOp {
    Init { members: Vec<NodeInfo> },
    AddNode(NodeInfo),
    RemoveNode(u64),
    TransferLeader(u64),
    Status,
}

/// What a replica says of itself (`cluster status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Status {
    pub node_id: u64,
    pub role: StatusRole,
    pub leader: u64,
    pub term: u64,
    pub last_log: u64,
    pub committed: u64,
    pub applied: u64,
    pub snapshot: u64,
    /// On the leader: every other member, with the last entry it holds and how far behind it is.
    pub followers: Vec<(u64, u64, u64)>,
}

/// A replica's part in its group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum StatusRole {
    Follower,
    Candidate,
    Leader,
    Learner,
    #[default]
    Uninitialized,
}

/// How an administration request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AdminOutcome {
    Done,
    Status(Status),
}

/// Why an administration request was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AdminError {
    /// Only the group's leader does this.
    NotLeader,
    /// The request cannot be carried out as asked (the text says why); nothing changed.
    Invalid(String),
    /// It was begun and failed (the text says why and what may have changed).
    Failed(String),
}

/// A queued request and what to do with its outcome.
pub(crate) struct AdminJob {
    pub op: AdminOp,
    pub answer: Box<dyn FnOnce(Result<AdminOutcome, AdminError>) + Send>,
}

impl std::fmt::Debug for AdminJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminJob").field("op", &self.op).finish_non_exhaustive()
    }
}

/// Runs the replica's administration requests, one at a time, until the task is dropped.
pub(crate) async fn administer(
    shard: Rc<RefCell<ShardState>>,
    raft: ShardRaft,
    cluster: Rc<Cell<u64>>,
    queued: Arc<Notify>,
) {
    loop {
        queued.notified().await;
        loop {
            let job = shard.borrow_mut().replication.as_mut().and_then(|replication| replication.next_admin_job());
            let Some(job) = job else { break };
            let outcome = run(&shard, &raft, &cluster, &job.op).await;
            (job.answer)(outcome);
        }
    }
}

async fn run(
    shard: &Rc<RefCell<ShardState>>,
    raft: &ShardRaft,
    cluster: &Rc<Cell<u64>>,
    op: &AdminOp,
) -> Result<AdminOutcome, AdminError> {
    match op {
        AdminOp::Init { members } => init(shard, raft, cluster, members).await,
        AdminOp::AddNode(node) => add_node(shard, raft, node).await,
        AdminOp::RemoveNode(node_id) => remove_node(shard, raft, *node_id).await,
        AdminOp::TransferLeader(to) => transfer_leader(shard, raft, *to).await,
        AdminOp::Status => Ok(AdminOutcome::Status(status(shard, raft))),
    }
}

fn node_id_of(shard: &Rc<RefCell<ShardState>>) -> u64 {
    shard.borrow().replication.as_ref().map_or(0, |replication| replication.node_id)
}

fn shard_node(node: &NodeInfo) -> ShardNode {
    ShardNode { peer: node.peer.clone(), native: node.native.clone(), resp: node.resp.clone() }
}

/// The id of a cluster first made of `members`: the same for every group `cluster init` makes
/// with them, so all of a node's groups agree on it.
pub(crate) fn cluster_id_of(members: &[NodeInfo]) -> u64 {
    let mut sorted: Vec<&NodeInfo> = members.iter().collect();
    sorted.sort_by_key(|node| node.node_id);
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    for node in sorted {
        digest.update(&node.node_id.to_le_bytes());
        digest.update(node.peer.as_bytes());
        digest.update(&[0]);
    }
    let hash = digest.finish();
    let id = u64::from_le_bytes(hash.as_ref()[..8].try_into().expect("a SHA-256 digest has 32 bytes"));
    id.max(1)
}

async fn init(
    shard: &Rc<RefCell<ShardState>>,
    raft: &ShardRaft,
    cluster: &Rc<Cell<u64>>,
    members: &[NodeInfo],
) -> Result<AdminOutcome, AdminError> {
    let node_id = node_id_of(shard);
    if !members.iter().any(|member| member.node_id == node_id) {
        return Err(AdminError::Invalid(format!(
            "node {node_id} is not among the members it was asked to initialize the group with"
        )));
    }
    if raft.is_initialized().await.map_err(|fatal| AdminError::Failed(fatal.to_string()))? {
        return initialized_already(shard, raft, members);
    }
    let id = cluster_id_of(members);
    {
        let mut state = shard.borrow_mut();
        let replication = state.replication.as_mut().ok_or_else(|| AdminError::Failed("no replica".into()))?;
        replication.join_cluster(id).map_err(|error| AdminError::Failed(error.to_string()))?;
    }
    cluster.set(id);
    let nodes: BTreeMap<u64, ShardNode> = members.iter().map(|node| (node.node_id, shard_node(node))).collect();
    if let Err(error) = raft.initialize(nodes).await {
        // Another member, initialized by the same command, may have replicated to this one
        // while it was being initialized: then it has these members already.
        if raft.is_initialized().await.unwrap_or(false) {
            return initialized_already(shard, raft, members);
        }
        return Err(AdminError::Failed(error.to_string()));
    }
    tracing::info!(cluster = %format_cluster_id(id), members = members.len(), "initialized the group");
    Ok(AdminOutcome::Done)
}

/// The answer to an init of a replica initialized already: done if it was with the same members
/// (an init retried, or sent to every member), refused otherwise.
fn initialized_already(
    shard: &Rc<RefCell<ShardState>>,
    raft: &ShardRaft,
    members: &[NodeInfo],
) -> Result<AdminOutcome, AdminError> {
    let metrics = raft.metrics().borrow_watched().clone();
    let voters: BTreeSet<u64> = metrics.membership_config.membership().voter_ids().collect();
    let asked: BTreeSet<u64> = members.iter().map(|member| member.node_id).collect();
    let same_cluster = shard.borrow().replication.as_ref().is_some_and(|r| r.cluster_id() == cluster_id_of(members));
    if voters == asked && same_cluster {
        return Ok(AdminOutcome::Done);
    }
    let node_id = node_id_of(shard);
    Err(AdminError::Invalid(format!(
        "node {node_id}'s replica of this group is initialized already, with other members"
    )))
}

/// Whether this replica leads its group now.
fn leads(shard: &Rc<RefCell<ShardState>>) -> bool {
    shard.borrow().replication.as_ref().is_some_and(|replication| replication.leads())
}

/// Runs `change` (which appends entries to the group's log) with the shard's requests paused and
/// the entries it executed before proposed first.
async fn paused<T>(
    shard: &Rc<RefCell<ShardState>>,
    raft: &ShardRaft,
    change: impl std::future::Future<Output = T>,
) -> T {
    if let Some(replication) = shard.borrow_mut().replication.as_mut() {
        replication.pause();
    }
    propose_executed(shard, raft).await;
    let outcome = change.await;
    if let Some(replication) = shard.borrow_mut().replication.as_mut() {
        replication.resume();
    }
    outcome
}

async fn add_node(
    shard: &Rc<RefCell<ShardState>>,
    raft: &ShardRaft,
    node: &NodeInfo,
) -> Result<AdminOutcome, AdminError> {
    if !leads(shard) {
        return Err(AdminError::NotLeader);
    }
    let metrics = raft.metrics().borrow_watched().clone();
    let membership = metrics.membership_config.membership();
    if membership.voter_ids().any(|id| id == node.node_id) {
        return Err(AdminError::Invalid(format!("node {} is a voter of the group already", node.node_id)));
    }
    if node.node_id == 0 {
        return Err(AdminError::Invalid("node 0 names no node".into()));
    }
    paused(shard, raft, raft.add_learner(node.node_id, shard_node(node), false))
        .await
        .map_err(|error| AdminError::Failed(format!("cannot add node {} as a learner: {error}", node.node_id)))?;
    tracing::info!(node = node.node_id, "added a learner; it catches up before it votes");
    wait_caught_up(shard, raft, node.node_id).await?;
    let change = ChangeMembers::AddVoterIds(BTreeSet::from([node.node_id]));
    paused(shard, raft, raft.change_membership(change, false)).await.map_err(|error| {
        AdminError::Failed(format!("node {} caught up but could not be made a voter: {error}", node.node_id))
    })?;
    tracing::info!(node = node.node_id, "the node votes in the group");
    Ok(AdminOutcome::Done)
}

/// Waits until learner `node_id` holds the log up to near the leader's last entry.
async fn wait_caught_up(shard: &Rc<RefCell<ShardState>>, raft: &ShardRaft, node_id: u64) -> Result<(), AdminError> {
    let mut progressed = (0, Instant::now());
    let mut reported = Instant::now();
    loop {
        if !leads(shard) {
            return Err(AdminError::Failed(format!(
                "this node stopped leading while node {node_id} caught up; it stays a learner"
            )));
        }
        let metrics = raft.metrics().borrow_watched().clone();
        let last = metrics.last_log_index.unwrap_or(0);
        let matched = metrics
            .replication
            .as_ref()
            .and_then(|progress| progress.get(&node_id).cloned().flatten())
            .map_or(0, |id| id.index);
        if matched + CAUGHT_UP_LAG >= last {
            return Ok(());
        }
        if matched > progressed.0 {
            progressed = (matched, Instant::now());
        } else if progressed.1.elapsed() > STALLED_AFTER {
            return Err(AdminError::Failed(format!(
                "node {node_id} took no more of the log for {STALLED_AFTER:?} (it holds {matched} of {last} entries; \
                 is it reachable at its peer address?); it stays a learner"
            )));
        }
        if reported.elapsed() > Duration::from_secs(5) {
            tracing::info!(node = node_id, matched, last, "a new node catches up");
            reported = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn remove_node(
    shard: &Rc<RefCell<ShardState>>,
    raft: &ShardRaft,
    node_id: u64,
) -> Result<AdminOutcome, AdminError> {
    if !leads(shard) {
        return Err(AdminError::NotLeader);
    }
    if node_id == node_id_of(shard) {
        return Err(AdminError::Invalid(format!(
            "node {node_id} leads the group: hand the leadership to another node first (ferrite cluster transfer-leader)"
        )));
    }
    let metrics = raft.metrics().borrow_watched().clone();
    let membership = metrics.membership_config.membership();
    let voter = membership.voter_ids().any(|id| id == node_id);
    if !voter && !membership.learner_ids().any(|id| id == node_id) {
        return Err(AdminError::Invalid(format!("node {node_id} is no member of the group")));
    }
    if voter && membership.voter_ids().count() == 1 {
        return Err(AdminError::Invalid("the group's last voter cannot be removed".into()));
    }
    let removed = async {
        if voter {
            raft.change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([node_id])), false).await?;
        }
        raft.change_membership(ChangeMembers::RemoveNodes(BTreeSet::from([node_id])), false).await
    };
    paused(shard, raft, removed)
        .await
        .map_err(|error| AdminError::Failed(format!("cannot remove node {node_id}: {error}")))?;
    tracing::info!(node = node_id, "removed a node from the group");
    Ok(AdminOutcome::Done)
}

async fn transfer_leader(
    shard: &Rc<RefCell<ShardState>>,
    raft: &ShardRaft,
    to: u64,
) -> Result<AdminOutcome, AdminError> {
    if to == node_id_of(shard) && leads(shard) {
        return Ok(AdminOutcome::Done);
    }
    if !leads(shard) {
        return Err(AdminError::NotLeader);
    }
    let metrics = raft.metrics().borrow_watched().clone();
    if !metrics.membership_config.membership().voter_ids().any(|id| id == to) {
        return Err(AdminError::Invalid(format!("node {to} is no voter of the group")));
    }
    if let Some(replication) = shard.borrow_mut().replication.as_mut() {
        // From now on this leader answers nothing alone: the node it hands over to may be
        // elected before this one's lease would have lapsed.
        replication.lease_until = None;
        replication.transferring = true;
    }
    propose_executed(shard, raft).await;
    raft.trigger().transfer_leader(to).await.map_err(|fatal| AdminError::Failed(fatal.to_string()))?;
    let deadline = tokio::time::Instant::now() + TRANSFER_TIMEOUT;
    let mut metrics = raft.metrics();
    loop {
        // Done once this replica stepped down: it restarts shortly after (see `group::depose`),
        // and the answer must leave before; `to` was asked to take over and is elected at once
        // (clients find it in the map).
        if metrics.borrow_watched().state != ServerState::Leader {
            return Ok(AdminOutcome::Done);
        }
        match tokio::time::timeout_at(deadline, metrics.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Err(AdminError::Failed("this replica's Raft stopped".into())),
            Err(_) => {
                if let Some(replication) = shard.borrow_mut().replication.as_mut() {
                    replication.transferring = false;
                    replication.wake_waiters();
                }
                return Err(AdminError::Failed(format!(
                    "node {to} did not take over within {TRANSFER_TIMEOUT:?}; the leadership stays where it is"
                )));
            }
        }
    }
}

/// What this replica says of itself and, on the leader, of its followers.
pub(crate) fn status(shard: &Rc<RefCell<ShardState>>, raft: &ShardRaft) -> Status {
    let metrics = raft.metrics().borrow_watched().clone();
    let membership = metrics.membership_config.membership();
    let node_id = metrics.id;
    let role = if membership.voter_ids().next().is_none() {
        StatusRole::Uninitialized
    } else {
        match metrics.state {
            ServerState::Leader => StatusRole::Leader,
            ServerState::Candidate => StatusRole::Candidate,
            ServerState::Learner => StatusRole::Learner,
            ServerState::Follower | ServerState::Shutdown => StatusRole::Follower,
        }
    };
    let last_log = metrics.last_log_index.unwrap_or(0);
    let followers = metrics
        .replication
        .as_ref()
        .map(|progress| {
            progress
                .iter()
                .filter(|(id, _)| **id != node_id)
                .map(|(id, matched)| {
                    let matched = matched.as_ref().map_or(0, |id| id.index);
                    (*id, matched, last_log.saturating_sub(matched))
                })
                .collect()
        })
        .unwrap_or_default();
    let applied =
        shard.borrow().replication.as_ref().and_then(|replication| replication.applied).map_or(0, |id| id.index);
    Status {
        node_id,
        role,
        leader: metrics.current_leader.unwrap_or(0),
        term: metrics.current_term,
        last_log,
        committed: metrics.cluster_committed.map_or(0, |id| id.index),
        applied,
        snapshot: metrics.snapshot.map_or(0, |id| id.index),
        followers,
    }
}
