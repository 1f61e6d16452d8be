//! Cluster mode: every shard index is a Raft group across the cluster's nodes (see
//! `docs/cluster.md`).
//!
//! - [`view`]: what a node knows of its cluster (members, each group's leader), shared by its
//!   shards.

pub mod view;
