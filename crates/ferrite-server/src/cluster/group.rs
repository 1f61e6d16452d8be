//! A shard's group at run time, on the shard's thread: its Raft, the listener its peers reach it
//! on, and the tasks around them: completing flushes, proposing what the leader executed,
//! saving the committed position, and following Raft's metrics to lead (promote the pools) or
//! stop leading (restart the process) and to keep the node's cluster map current.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use openraft::async_runtime::{Instant as _, WatchReceiver};
use openraft::ServerState;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use super::handshake::PeerSecret;
use super::log_store::{complete_flushes, ShardLog};
use super::network::{serve_peers, FirstReadable, PeerContext, PeerIdentity, PeerNetwork, ShardRaft};
use super::replication::Role;
use super::snapshot::SnapshotStore;
use super::state_machine::ShardMachine;
use super::types::{Membership, Redo, ShardNode};
use super::view::{GroupView, NodeInfo};
use crate::handler::ShardState;

/// How a node's groups run.
#[derive(Debug, Clone)]
pub struct GroupSettings {
    pub node_id: u64,
    pub election_timeout_ms: (u64, u64),
    pub heartbeat_ms: u64,
    /// Entries kept behind the latest snapshot (`[cluster] log_kept_entries`).
    pub log_kept_entries: u64,
    /// What peers prove themselves with.
    pub secret: PeerSecret,
    /// The address peer calls leave from (the peer listener's, unless it is a wildcard).
    pub local_ip: Option<std::net::IpAddr>,
}

impl GroupSettings {
    /// How long after a quorum acknowledged it a leader may still answer alone: the shortest
    /// election timeout (no follower grants a vote sooner after hearing from its leader), less a
    /// tenth for clocks that run at different rates. Ferrite assumes the nodes' clocks run at
    /// rates within a tenth of each other.
    pub fn lease(&self) -> Duration {
        Duration::from_millis(self.election_timeout_ms.0) * 9 / 10
    }
}

/// How often the entry cache is trimmed.
const HOUSEKEEPING: Duration = Duration::from_millis(500);

/// What a shard does when its replica begins to lead: creates pools it keeps by default (the
/// RESP pool), which only a leader can write.
pub(crate) type OnLeading = Box<dyn Fn(&mut ShardState)>;

/// Whether a replica lets node `from` in as a peer of its group: while it knows no voters (a new
/// replica, which the leader that adds it reaches first), any node; else a node that its
/// `applied` membership or the newest membership in its log (`in_log`, once its Raft runs) names.
/// Raft follows the newest membership in the log, applied or not: a replica that restarted
/// before it applied the change that added the group's new leader must still let that leader
/// in, or it never hears of the change and stays out of the group for good.
fn admits_peer(applied: &Membership, in_log: Option<&Membership>, from: u64) -> bool {
    applied.voter_ids().next().is_none()
        || applied.get_node(&from).is_some()
        || in_log.is_some_and(|membership| membership.get_node(&from).is_some())
}

/// Runs the shard's group until `stop`.
pub(crate) async fn run(
    shard: Rc<RefCell<ShardState>>,
    peers: std::net::TcpListener,
    settings: GroupSettings,
    raft_dir: std::path::PathBuf,
    on_leading: OnLeading,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let group = shard.borrow().replication.as_ref().map_or(0, |replication| replication.group);
    let snapshots = SnapshotStore::open(&raft_dir)?;
    let raft_cell: Rc<RefCell<Option<ShardRaft>>> = Rc::new(RefCell::new(None));
    let admits = {
        let shard = Rc::clone(&shard);
        let raft_cell = Rc::clone(&raft_cell);
        Rc::new(move |from: u64| {
            let state = shard.borrow();
            let Some(replication) = state.replication.as_ref() else { return false };
            let applied = replication.membership.membership();
            match raft_cell.borrow().as_ref() {
                Some(raft) => {
                    let metrics = raft.metrics();
                    let metrics = metrics.borrow_watched();
                    admits_peer(applied, Some(metrics.membership_config.membership()), from)
                }
                None => admits_peer(applied, None, from),
            }
        })
    };
    let cluster = Rc::new(Cell::new(shard.borrow().replication.as_ref().map_or(0, |r| r.cluster_id())));
    let identity = PeerIdentity {
        group: group as u16,
        node_id: settings.node_id,
        cluster: Rc::clone(&cluster),
        secret: settings.secret.clone(),
        local_ip: settings.local_ip,
    };
    let join_cluster = {
        let shard = Rc::clone(&shard);
        let cluster = Rc::clone(&cluster);
        Rc::new(move |id: u64| {
            let mut state = shard.borrow_mut();
            let replication = state.replication.as_mut().ok_or_else(|| std::io::Error::other("no replica"))?;
            replication.join_cluster(id)?;
            cluster.set(id);
            Ok(())
        })
    };
    let heard = {
        let shard = Rc::clone(&shard);
        Rc::new(move || {
            if let Some(replication) = shard.borrow_mut().replication.as_mut() {
                replication.last_heard = Some(std::time::Instant::now());
            }
        })
    };
    let context = PeerContext {
        identity: identity.clone(),
        heard,
        raft: Rc::clone(&raft_cell),
        snapshots: snapshots.clone(),
        admits,
        join_cluster,
    };
    let peer_task = tokio::task::spawn_local(serve_peers(TcpListener::from_std(peers)?, context, stop.clone()));
    let log = ShardLog::new(Rc::clone(&shard));
    let local_durable =
        shard.borrow().durability.as_ref().map(|durability| (durability.log.clone(), durability.local_durable()));
    let flush_task =
        local_durable.map(|(wal, batches)| tokio::task::spawn_local(complete_flushes(log.flushes(), wal, batches)));
    let config = raft_config(&settings).map_err(std::io::Error::other)?;
    let machine = ShardMachine::new(Rc::clone(&shard), snapshots);
    let first_readable = {
        let shard = Rc::clone(&shard);
        FirstReadable(Rc::new(move || {
            shard.borrow().replication.as_ref().map_or(0, |replication| replication.first_readable())
        }))
    };
    let network = PeerNetwork { identity, first_readable };
    let raft = ShardRaft::new(settings.node_id, config, network, log, machine).await.map_err(std::io::Error::other)?;
    *raft_cell.borrow_mut() = Some(raft.clone());
    let (proposals, confirmations) = match shard.borrow_mut().replication.as_mut() {
        Some(replication) => {
            replication.lease = settings.lease();
            replication.fresh_for = Duration::from_millis(settings.election_timeout_ms.1);
            (Arc::clone(&replication.proposals), Arc::clone(&replication.confirmations))
        }
        None => return Ok(()),
    };
    let proposer = tokio::task::spawn_local(propose(Rc::clone(&shard), raft.clone(), proposals, stop.clone()));
    let housekeeping = tokio::task::spawn_local(housekeep(Rc::clone(&shard), stop.clone()));
    let leases = tokio::task::spawn_local(keep_lease(Rc::clone(&shard), raft.clone(), settings.lease()));
    let snapshotting = tokio::task::spawn_local(snapshot_checkpoints(Rc::clone(&shard), raft.clone()));
    let admin_queued = shard.borrow().replication.as_ref().map(|replication| Arc::clone(&replication.admin_queued));
    let administering = admin_queued.map(|queued| {
        tokio::task::spawn_local(super::admin::administer(Rc::clone(&shard), raft.clone(), Rc::clone(&cluster), queued))
    });
    let confirming =
        tokio::task::spawn_local(confirm_leadership(Rc::clone(&shard), raft.clone(), confirmations, settings.lease()));
    let mut metrics = raft.metrics();
    loop {
        follow(&shard, &raft, &settings, &on_leading);
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => break,
            changed = metrics.changed() => if changed.is_err() { break },
        }
    }
    for task in [proposer, housekeeping, leases, confirming, snapshotting].into_iter().chain(administering) {
        task.abort();
    }
    if let Some(task) = flush_task {
        task.abort();
    }
    let _ = raft.shutdown().await;
    let _ = peer_task.await;
    // A restart then replays everything this replica knew committed at once.
    let mut state = shard.borrow_mut();
    let durable = state.durability.as_ref().map_or(0, |durability| durability.log.durable_lsn());
    if let Some(replication) = state.replication.as_mut() {
        replication.save_committed(durable)?;
    }
    Ok(())
}

/// Keeps the leader's lease current from Raft's record of the last quorum acknowledgement.
async fn keep_lease(shard: Rc<RefCell<ShardState>>, raft: ShardRaft, lease: Duration) {
    let mut metrics = raft.data_metrics();
    loop {
        let acked = metrics.borrow_watched().last_quorum_acked.as_ref().map(|acked| acked.elapsed());
        if let Some(replication) = shard.borrow_mut().replication.as_mut() {
            let until = acked.and_then(|since| lease.checked_sub(since)).map(|left| std::time::Instant::now() + left);
            replication.renew_lease(until);
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// Confirms with a quorum that this replica still leads (a heartbeat round) whenever requests
/// wait for it (their leader's lease lapsed), which renews the lease, then runs them again. A
/// failed confirmation runs them after a pause; by then Raft's state says whether this replica
/// still leads.
async fn confirm_leadership(
    shard: Rc<RefCell<ShardState>>,
    raft: ShardRaft,
    confirmations: Arc<Notify>,
    lease: Duration,
) {
    loop {
        confirmations.notified().await;
        let asked = std::time::Instant::now();
        let confirmed = raft.ensure_linearizable(openraft::ReadPolicy::ReadIndex).await.is_ok();
        if !confirmed {
            tokio::time::sleep(CONFIRM_RETRY).await;
        }
        let mut state = shard.borrow_mut();
        let Some(replication) = state.replication.as_mut() else { return };
        if confirmed {
            // A quorum heard from this leader after `asked`: none of them votes for another
            // before `asked` plus the lease.
            replication.renew_lease(Some(asked + lease));
        }
        replication.wake_waiters();
    }
}

/// Makes a snapshot of each checkpoint the shard completes: what a replica too far behind the
/// log installs, and what lets Raft purge the log before it.
async fn snapshot_checkpoints(shard: Rc<RefCell<ShardState>>, raft: ShardRaft) {
    let Some(checkpointed) = shard.borrow().replication.as_ref().map(|r| Arc::clone(&r.checkpointed)) else { return };
    loop {
        checkpointed.notified().await;
        if let Err(error) = raft.trigger().snapshot().await {
            tracing::warn!(%error, "cannot snapshot the checkpoint");
        }
    }
}

/// Pause before requests that waited for a failed confirmation of leadership run again.
const CONFIRM_RETRY: Duration = Duration::from_millis(10);

/// openraft's configuration for a group of a node with `settings`.
fn raft_config(settings: &GroupSettings) -> Result<Arc<openraft::Config>, openraft::ConfigError> {
    let config = openraft::Config {
        cluster_name: "ferrite".into(),
        election_timeout_min: settings.election_timeout_ms.0,
        election_timeout_max: settings.election_timeout_ms.1,
        heartbeat_interval: settings.heartbeat_ms,
        // Snapshots are the shard's checkpoints: one is offered after each (see checkpointing).
        snapshot_policy: openraft::SnapshotPolicy::Never,
        // Entries behind a snapshot stay for replicas that lag a little: sending them is cheaper
        // than a snapshot.
        max_in_snapshot_log_to_keep: settings.log_kept_entries,
        enable_pre_vote: Some(true),
        // A restarted leader holds elections like any node: what it committed before is only
        // replayed from its log, not taken for granted.
        enable_leader_restore: Some(false),
        // A member replaced by an empty node, or one whose committed position was not saved
        // before a kill, answers with less than the leader last saw: replicate to it again from
        // what it has instead of stopping replication to it.
        allow_log_reversion: Some(true),
        ..openraft::Config::default()
    };
    config.validate().map(Arc::new)
}

/// Looks at Raft's state after a change: keeps the cluster map current, begins leading once the
/// replica applied everything before its own term, and restarts the process if it stops leading
/// (or must, for another reason).
fn follow(shard: &Rc<RefCell<ShardState>>, raft: &ShardRaft, settings: &GroupSettings, on_leading: &OnLeading) {
    // Read in place: the metrics change with every batch of entries applied.
    let watched = raft.metrics();
    let metrics = watched.borrow_watched();
    let mut state = shard.borrow_mut();
    let Some(replication) = state.replication.as_mut() else { return };
    if let Some(reason) = replication.restart_reason().map(str::to_owned) {
        drop(state);
        depose(shard, reason);
        return;
    }
    if let Err(fatal) = &metrics.running_state {
        // Raft stopped for good (its storage failed: a full disk, most often): this replica can
        // neither lead nor follow until the process starts again from its files, which helps
        // only once the cause is gone, so it waits a while first instead of restarting in a loop.
        let reason = format!("Raft stopped in group {}: {fatal}", replication.group);
        drop(state);
        depose_after(shard, reason, STORAGE_RETRY);
        return;
    }
    let leads = metrics.state == ServerState::Leader && metrics.current_leader == Some(settings.node_id);
    let term = metrics.current_term;
    if metrics.state == ServerState::Candidate && replication.candidate_term != term {
        replication.candidate_term = term;
        replication.elections += 1;
    }
    let applied_own_term = metrics.last_applied.is_some_and(|id| id.leader_id.term == term);
    match replication.role {
        Role::Leading { term: led } if !leads || term != led => {
            let reason = format!(
                "this replica stopped leading group {} (term {led}); it restarts to drop what the group did not commit",
                replication.group
            );
            drop(state);
            depose(shard, reason);
            return;
        }
        Role::Following | Role::Elected { .. } if leads && applied_own_term => {
            state.begin_leading(term);
            on_leading(&mut state);
        }
        Role::Following if leads => replication.role = Role::Elected { term },
        Role::Elected { .. } if !leads => {
            replication.role = Role::Following;
            replication.wake_waiters();
        }
        _ => {}
    }
    state.publish_group(&metrics);
}

/// How long a replica that must restart goes on refusing requests first: answers already made
/// (an administration request's, a refusal) reach their clients.
const RESTART_GRACE: Duration = Duration::from_millis(100);

/// How long a replica whose Raft stopped (its storage failed) waits before it restarts the
/// process to try again.
const STORAGE_RETRY: Duration = Duration::from_secs(5);

/// This replica may hold writes its group did not commit: it refuses every request from now on,
/// and the process restarts shortly (see `restart.rs`).
pub(crate) fn depose(shard: &Rc<RefCell<ShardState>>, reason: String) {
    depose_after(shard, reason, RESTART_GRACE);
}

/// [`depose`], the process restarting after `delay`.
fn depose_after(shard: &Rc<RefCell<ShardState>>, reason: String, delay: Duration) {
    {
        let mut state = shard.borrow_mut();
        let Some(replication) = state.replication.as_mut() else { return };
        if replication.role == Role::Deposed {
            return;
        }
        replication.role = Role::Deposed;
        replication.must_restart(reason.clone());
        replication.wake_waiters();
        if let Some(cluster) = &state.cluster {
            cluster.map.set_leads_here(cluster.group, false);
        }
    }
    tracing::warn!(%reason, restart_in_ms = delay.as_millis() as u64, "this replica stops serving and restarts");
    tokio::task::spawn_local(async move {
        tokio::time::sleep(delay).await;
        super::restart::restart_process(&reason);
    });
}

impl ShardState {
    /// This replica leads `term` and has applied every entry before its own: its pools become
    /// stores that execute requests.
    fn begin_leading(&mut self, term: u64) {
        let Some(durability) = &self.durability else { return };
        let log = durability.log.clone();
        let Some(replication) = self.replication.as_mut() else { return };
        let Some(replica) = replication.replica.take() else { return };
        let group = replication.group;
        let next_pool_id = replica.next_pool_id;
        for (_, pool) in replica.pools {
            let name = pool.descriptor.name.clone();
            if let Err(error) = self.pools.insert_recovered(pool) {
                // The replica's pools passed recovery; a store that does not open over them is a
                // bug, and leading without the pool would answer as if it did not exist.
                if let Some(replication) = self.replication.as_mut() {
                    replication.must_restart(format!("pool '{name}' cannot be opened: {error}"));
                }
                return;
            }
        }
        self.pools.continue_handles_from(next_pool_id);
        if let Some(replication) = self.replication.as_mut() {
            replication.begin_leading(term, &log);
            replication.wake_waiters();
        }
        tracing::info!(shard = self.index, group, term, "this replica leads its group");
    }

    /// Writes what this replica knows of its group into the node's cluster map.
    fn publish_group(&mut self, metrics: &openraft::RaftMetrics<super::types::C>) {
        let (Some(cluster), Some(replication)) = (&self.cluster, &self.replication) else { return };
        let membership = metrics.membership_config.membership();
        let mut voters: Vec<u64> = membership.voter_ids().collect();
        voters.sort_unstable();
        let mut learners: Vec<u64> = membership.learner_ids().collect();
        learners.sort_unstable();
        let matched = metrics
            .replication
            .as_ref()
            .map(|progress| {
                progress.iter().filter_map(|(node, matched)| Some((*node, matched.as_ref()?.index))).collect()
            })
            .unwrap_or_default();
        let seen = GroupView {
            leader: metrics.current_leader,
            term: metrics.current_term,
            voters,
            learners,
            leads_here: replication.leads(),
            matched,
            last_log: metrics.last_log_index.unwrap_or(0),
        };
        // The members' addresses only when the membership changed: the rest changes with every
        // batch of entries.
        let membership_id = metrics.membership_config.log_id().as_ref().map(|id| id.index);
        let members: Vec<NodeInfo> = if replication.published_membership != Some(membership_id) {
            membership.nodes().map(|(id, node)| node_info(*id, node)).collect()
        } else {
            Vec::new()
        };
        cluster.map.update_group(cluster.group, seen, &members, &replication.state.state().cluster_id);
        if let Some(replication) = self.replication.as_mut() {
            replication.published_membership = Some(membership_id);
        }
    }
}

pub fn node_info(node_id: u64, node: &ShardNode) -> NodeInfo {
    NodeInfo { node_id, peer: node.peer.clone(), native: node.native.clone(), resp: node.resp.clone() }
}

/// Proposes the entries the leader executed, once per turn of the shard's loop that executed
/// writes (see [`propose_executed`]).
async fn propose(
    shard: Rc<RefCell<ShardState>>,
    raft: ShardRaft,
    proposals: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            () = proposals.notified() => {}
        }
        propose_executed(&shard, &raft).await;
    }
}

/// Proposes the entries the leader executed and appended since the last proposal: in log order,
/// in one batch, each by its sequence number. One proposal at a time (the replica's lock): Raft
/// gives entries their indexes in the order proposals reach it, which must be the log's. A
/// proposal Raft refuses (this replica no longer leads) means memory holds writes the group will
/// not have: the replica is deposed.
pub(crate) async fn propose_executed(shard: &Rc<RefCell<ShardState>>, raft: &ShardRaft) {
    let Some(lock) = shard.borrow().replication.as_ref().map(|replication| Arc::clone(&replication.proposing)) else {
        return;
    };
    let _turn = lock.lock().await;
    let batch = {
        let mut state = shard.borrow_mut();
        let Some(log) = state.durability.as_ref().map(|durability| durability.log.clone()) else { return };
        let Some(replication) = state.replication.as_mut() else { return };
        replication.take_executed(&log)
    };
    if batch.is_empty() {
        return;
    }
    let data: Vec<Redo> = batch.iter().map(|(_, seq)| Redo::Appended { seq: *seq }).collect();
    let mut results = match raft.client_write_many(data).await {
        Ok(results) => results,
        Err(fatal) => return depose(shard, format!("Raft stopped: {fatal}")),
    };
    let shard = Rc::clone(shard);
    tokio::task::spawn_local(async move {
        while let Some(result) = results.next().await {
            let refused = match result {
                Ok(Ok(_)) => None,
                Ok(Err(error)) => Some(error.to_string()),
                Err(fatal) => Some(fatal.to_string()),
            };
            if let Some(reason) = refused {
                return depose(&shard, format!("an entry this replica executed was not committed ({reason})"));
            }
        }
    });
}

/// Trims the entry cache now and then, saves the committed position (a restart then replays
/// what was committed from its log at once, instead of applying it again entry by entry as Raft
/// commits it anew), and runs again the requests that wait for an elected replica to begin
/// leading (should it never, they find out who leads instead).
async fn housekeep(shard: Rc<RefCell<ShardState>>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(HOUSEKEEPING) => {}
        }
        let mut state = shard.borrow_mut();
        let durable = state.durability.as_ref().map_or(0, |durability| durability.log.durable_lsn());
        if let Some(replication) = state.replication.as_mut() {
            replication.trim_cache(durable);
            if let Err(error) = replication.save_committed(durable) {
                tracing::warn!(%error, "cannot save the group's committed position");
            }
            if matches!(replication.role, Role::Elected { .. }) {
                replication.wake_waiters();
            }
        }
    }
}

/// The members a new group starts with, by node id.
pub fn members(nodes: &[NodeInfo]) -> BTreeMap<u64, ShardNode> {
    nodes
        .iter()
        .map(|node| {
            (node.node_id, ShardNode { peer: node.peer.clone(), native: node.native.clone(), resp: node.resp.clone() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::types::membership_of;

    /// A replica that restarted with the change that added node 4 in its log but not applied
    /// lets node 4 in (it may lead the group now); a node neither membership names stays out;
    /// a replica that knows no voters yet lets anyone in.
    #[test]
    fn a_peer_named_by_the_newest_membership_in_the_log_is_admitted() {
        let (applied, in_log) = (membership_of(&[1, 2, 3]), membership_of(&[1, 2, 3, 4]));
        assert!(admits_peer(&applied, Some(&in_log), 4), "the leader the log names");
        assert!(admits_peer(&applied, Some(&in_log), 2), "a member of both");
        assert!(!admits_peer(&applied, None, 4), "before Raft runs, only the applied membership counts");
        assert!(!admits_peer(&applied, Some(&in_log), 5), "a node neither names");
        let unjoined = Membership::default();
        assert!(admits_peer(&unjoined, None, 9), "a new replica, before any leader reached it");
    }
}
