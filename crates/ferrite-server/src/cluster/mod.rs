//! Cluster mode: every shard index is a Raft group across the cluster's nodes (see
//! `docs/cluster.md`).
//!
//! - [`view`]: what a node knows of its cluster (members, each group's leader), shared by its
//!   shards.

pub mod admin;
pub mod gate;
pub mod group;
pub mod handshake;
pub mod log_store;
pub mod network;
pub mod read_back;
pub mod replication;
pub mod restart;
pub mod snapshot;
pub mod startup;
pub mod state_file;
pub mod state_machine;
pub mod types;
pub mod view;
pub mod wire;

use std::sync::Arc;

use view::{ClusterMap, ClusterView};

/// A shard's place in its cluster: the node's map, and the group (its shard index) it is a
/// replica of.
#[derive(Debug, Clone)]
pub(crate) struct ShardCluster {
    pub map: Arc<ClusterMap>,
    pub group: usize,
}

impl ShardCluster {
    /// A copy of the cluster map.
    pub fn view(&self) -> ClusterView {
        self.map.view()
    }

    /// Whether this node's replica leads the shard's group and may answer its requests now.
    pub fn leads_here(&self) -> bool {
        self.map.with(|view| view.groups.get(self.group).is_some_and(|group| group.leads_here))
    }
}

#[cfg(test)]
mod suite_tests;
