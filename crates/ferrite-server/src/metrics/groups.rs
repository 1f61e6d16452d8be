//! The metrics of a cluster node's replicas: one series per shard (group) for its role, term,
//! log positions and elections, and on a leader one per follower for its lag.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::{shard_labels, Labels, Scrape, ShardSnapshot};
use crate::cluster::replication::Role;
use crate::handler::ShardState;

/// What a shard's replica of its group reports.
#[derive(Debug, Clone, Default)]
pub(crate) struct GroupSnapshot {
    /// `follower`, `elected`, `leader` or `deposed` (see `Role`).
    pub role: &'static str,
    pub term: u64,
    /// The node that leads the group (0: none known).
    pub leader: u64,
    pub last_log: u64,
    pub committed: u64,
    pub applied: u64,
    pub elections: u64,
    /// On the leader: each other member and how many entries it lacks.
    pub lag: Vec<(u64, u64)>,
}

impl ShardState {
    /// The shard's replica of its group, in cluster mode.
    pub(crate) fn group_snapshot(&self) -> Option<GroupSnapshot> {
        let (replication, cluster) = (self.replication.as_ref()?, self.cluster.as_ref()?);
        let seen = cluster.map.with(|view| view.groups.get(cluster.group).cloned()).unwrap_or_default();
        let role = match replication.role {
            Role::Following => "follower",
            Role::Elected { .. } => "elected",
            Role::Leading { .. } => "leader",
            Role::Deposed => "deposed",
        };
        let lag = seen
            .matched
            .iter()
            .filter(|(node, _)| *node != replication.node_id)
            .map(|(node, matched)| (*node, seen.last_log.saturating_sub(*matched)))
            .collect();
        Some(GroupSnapshot {
            role,
            term: seen.term,
            leader: seen.leader.unwrap_or(0),
            last_log: replication.last_log().map_or(0, |id| id.index),
            committed: replication.committed_in_memory.map_or(0, |id| id.index),
            applied: replication.applied.map_or(0, |id| id.index),
            elections: replication.elections,
            lag,
        })
    }
}

/// The roles a replica reports, each a series of its own (1 for the current one).
const ROLES: [&str; 4] = ["follower", "elected", "leader", "deposed"];

impl Scrape {
    pub(super) fn groups(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let gauge = |value: u64| ConstGauge::new(value as i64);
        let per_group = |value: fn(&GroupSnapshot) -> u64| {
            move |s: &ShardSnapshot| s.group.as_ref().map(|g| (shard_labels(s), gauge(value(g)))).into_iter().collect()
        };
        self.family(encoder, "ferrite_group_role", "The replica's role in its group (1 for the current one).", |s| {
            let Some(group) = &s.group else { return Vec::new() };
            ROLES
                .iter()
                .map(|role| {
                    let mut labels: Labels = shard_labels(s);
                    labels.push(("role", (*role).to_owned()));
                    (labels, gauge(u64::from(group.role == *role)))
                })
                .collect()
        })?;
        self.family(encoder, "ferrite_group_term", "The group's current Raft term.", per_group(|g| g.term))?;
        self.family(
            encoder,
            "ferrite_group_leader",
            "The node that leads the group (0: none known).",
            per_group(|g| g.leader),
        )?;
        self.family(
            encoder,
            "ferrite_group_last_log_index",
            "The last entry of the replica's log.",
            per_group(|g| g.last_log),
        )?;
        self.family(
            encoder,
            "ferrite_group_committed_index",
            "The last entry the replica knows the group committed.",
            per_group(|g| g.committed),
        )?;
        self.family(
            encoder,
            "ferrite_group_applied_index",
            "The last entry the replica applied.",
            per_group(|g| g.applied),
        )?;
        self.family(encoder, "ferrite_group_elections", "Elections this replica started.", |s| {
            s.group.as_ref().map(|g| (shard_labels(s), ConstCounter::new(g.elections))).into_iter().collect()
        })?;
        self.family(
            encoder,
            "ferrite_group_follower_lag_entries",
            "On the leader: entries each other member lacks.",
            |s| {
                let Some(group) = &s.group else { return Vec::new() };
                group
                    .lag
                    .iter()
                    .map(|(node, lag)| {
                        let mut labels = shard_labels(s);
                        labels.push(("node", node.to_string()));
                        (labels, gauge(*lag))
                    })
                    .collect()
            },
        )
    }
}
