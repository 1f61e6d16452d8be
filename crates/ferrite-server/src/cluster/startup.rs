//! How a cluster node's shard starts: its replica of the group recovered from the shard's
//! checkpoint, the committed entries of its log, and its Raft state file.

use std::path::PathBuf;

use ferrite_store::persistence::ssd::{
    load_shard_in_mode, recover_shard_in_mode, ReplayMode, ReplicaPools, ShardPaths, SharedLog,
};
use ferrite_store::persistence::wal::{FsStorage, WalConfig};
use tracing::{info, warn};

use super::replication::Replication;
use super::snapshot::finish_installing;
use super::state_file::StateFile;
use super::types::{log_id, LogId, StoredMembership};
use super::wire::{get_membership, Reader};
use crate::config::Config;
use crate::data_dir::DataDir;
use crate::durability::ShardDurability;
use crate::pools::Pools;
use crate::server::ServerError;

/// A shard of a cluster node as recovery leaves it: no pools to serve (it follows until its
/// group elects it), its replica's pools, its log and its Raft state.
#[derive(Debug)]
pub(crate) struct RecoveredReplica {
    pub pools: Pools,
    pub durability: ShardDurability,
    pub replication: Replication,
    pub raft_dir: PathBuf,
}

/// Recovers shard `index` of a cluster node: its checkpoint, and its log's entries up to the last
/// one its state file says the group committed. Entries after it stay in the log, unapplied:
/// Raft applies them once it learns they were committed, or a new leader replaces them.
pub(crate) fn recover_replica(
    config: &Config,
    data_dir: &DataDir,
    index: usize,
    node_id: u64,
) -> Result<RecoveredReplica, ServerError> {
    let dir = data_dir.create_shard_dir(index).map_err(|source| ServerError::ShardDir { shard: index, source })?;
    let paths = ShardPaths::new(&dir);
    if !paths.is_replicated() && holds_records(&paths) {
        return Err(ServerError::WrongMode {
            shard: index,
            reason: format!(
                "{} holds a single server's data, which a cluster node cannot take over: start the node on an empty \
                 data directory and copy the data in through a client, or run it as a single server (no --node-id)",
                dir.display()
            ),
        });
    }
    let raft_dir = paths.raft();
    let io = |source| ServerError::ShardDir { shard: index, source };
    let mut state = StateFile::open(&raft_dir).map_err(io)?;
    let wal_config = WalConfig { segment_bytes: config.durability.wal_segment_bytes };
    finish_installing(&mut state, &paths, wal_config).map_err(io)?;
    let saved = state.state().clone();
    let until = saved.committed.map_or(0, |id| id.index);
    let started = std::time::Instant::now();
    let recovered = recover_shard_in_mode(&paths, wal_config, ReplayMode::Replicated { until })
        .map_err(|source| ServerError::Recovery { shard: index, source })?;
    let entries = recovered.entries;
    // A replica that installed a snapshot whose log holds nothing of it recorded the snapshot's
    // last entry as purged: its state is as of that entry.
    let purged = saved.purged;
    // The group's first entry is in the state file (the log cannot hold index 0).
    let first = saved.first_entry.as_ref().map(|(id, _)| *id);
    let first_applied = first.filter(|id| saved.committed >= Some(*id));
    let applied = entries.applied.map(|(index, term)| log_id(term, index)).max(purged).max(first_applied);
    let last_log = entries.last.map(|(index, term)| log_id(term, index)).max(applied).max(first);
    let mut memberships: Vec<StoredMembership> = saved
        .memberships
        .iter()
        .cloned()
        .chain(saved.first_entry.iter().filter_map(|(id, membership)| Some((*id, membership.clone()?))))
        .map(|(id, membership)| StoredMembership::new(Some(id), membership))
        .collect();
    for (lsn, term, body) in &entries.memberships {
        let membership = get_membership(&mut Reader::new(body)).map_err(|_| ServerError::Recovery {
            shard: index,
            source: ferrite_store::persistence::ssd::RecoveryError::BadRecord {
                lsn: *lsn,
                reason: "its membership cannot be read".into(),
            },
        })?;
        memberships.push(StoredMembership::new(Some(log_id(*term, *lsn)), membership));
    }
    let membership = latest_as_of(memberships, applied);
    let report = &recovered.report;
    info!(
        shard = index,
        pools = recovered.pools.len(),
        checkpoint = report.checkpoint_seq,
        replayed_from_lsn = report.replay_from,
        records_replayed = report.records_replayed,
        applied = applied.map_or(0, |id| id.index),
        last_log = last_log.map_or(0, |id| id.index),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "replica recovered from {}",
        dir.display()
    );
    let log = SharedLog::new(recovered.writer);
    if let Err(error) = log.prepare_spare_now() {
        warn!(shard = index, %error, "cannot prepare a spare log segment; the shard will create them as needed");
    }
    let pools_max = config.limits.pools_per_shard_max as usize;
    let pools = Pools::logged(log.clone(), pools_max, recovered.next_pool_id);
    let replica = ReplicaPools::new(recovered.pools, recovered.next_pool_id);
    let storage = FsStorage::open_dir(&paths.wal).map_err(io)?;
    let replication = Replication::new(node_id, index, state, replica, storage, last_log, applied, membership);
    let mut durability = ShardDurability::start(index, paths, log, recovered.checkpointer, config.durability)
        .map_err(|source| ServerError::SyncThread { shard: index, source })?;
    durability.recovered_in = started.elapsed();
    durability.set_committed(applied.map_or(0, |id| id.index));
    Ok(RecoveredReplica { pools, durability, replication, raft_dir })
}

/// Whether a shard that is no replica yet holds records (a single server's): a node does not
/// take them over. A shard never written to, or one a server created and never wrote, holds none.
fn holds_records(paths: &ShardPaths) -> bool {
    if !paths.wal.exists() && !paths.checkpoint.exists() {
        return false;
    }
    load_shard_in_mode(paths, ReplayMode::Plain, &mut |_| {})
        .map_or(true, |loaded| !loaded.pools.is_empty() || loaded.report.records_replayed > 0)
}

/// The newest of `memberships` carried by an entry at or before `applied` (the one the replica
/// applied last); the empty membership of an uninitialized group if none is.
fn latest_as_of(memberships: Vec<StoredMembership>, applied: Option<LogId>) -> StoredMembership {
    memberships
        .into_iter()
        .filter(|membership| membership.log_id().is_some_and(|id| Some(id) <= applied))
        .max_by_key(|membership| *membership.log_id())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cluster::types::{Membership, ShardNode};

    fn membership_of(nodes: &[u64]) -> Membership {
        let members: BTreeMap<u64, ShardNode> = nodes.iter().map(|id| (*id, ShardNode::default())).collect();
        Membership::new(vec![nodes.iter().copied().collect()], members).expect("a valid membership")
    }

    #[test]
    fn the_membership_is_the_newest_one_applied() {
        let stored = |index, nodes: &[u64]| StoredMembership::new(Some(log_id(1, index)), membership_of(nodes));
        let all = vec![stored(3, &[1]), stored(9, &[1, 2, 3]), stored(5, &[1, 2])];
        let as_of = |applied| latest_as_of(all.clone(), Some(log_id(1, applied)));
        assert_eq!(as_of(8).log_id().map(|id| id.index), Some(5), "entry 9 is not applied yet");
        assert_eq!(as_of(9).log_id().map(|id| id.index), Some(9));
        assert_eq!(as_of(2), StoredMembership::default(), "nothing applied carried a membership");
        assert_eq!(latest_as_of(all, None), StoredMembership::default());
    }
}
