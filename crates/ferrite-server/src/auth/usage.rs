//! What each user holds against its quota: connections open now (over every shard and both
//! protocols), and the pools it created with their sizes. Counts change only when a session
//! authenticates or ends and when a pool is created or deleted, never per request, so one mutex
//! shared by the shards is never a bottleneck.

use std::sync::{Mutex, PoisonError};

use ferrite_auth::Quota;
use foldhash::HashMap;

/// What one user holds now.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    pub connections: u64,
    pub pools: u64,
    pub pool_bytes: u64,
}

/// Every user's holdings.
#[derive(Debug, Default)]
pub(crate) struct Usage {
    held: Mutex<HashMap<String, Held>>,
}

impl Usage {
    fn with<T>(&self, user: &str, change: impl FnOnce(&mut Held) -> T) -> T {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        change(held.entry(user.to_owned()).or_default())
    }

    /// Every user's holdings, by name, for the metrics endpoint.
    pub(crate) fn snapshot(&self) -> Vec<(String, Held)> {
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let mut users: Vec<(String, Held)> = held.iter().map(|(user, held)| (user.clone(), *held)).collect();
        users.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        users
    }

    /// Counts a connection of `user`, unless it holds `quota.connections` already.
    pub(crate) fn connect(&self, user: &str, quota: &Quota) -> Result<(), String> {
        self.with(user, |held| {
            if let Some(max) = quota.connections.filter(|max| held.connections >= *max) {
                return Err(format!("user '{user}' has {max} connections open, its quota (quota.connections)"));
            }
            held.connections += 1;
            Ok(())
        })
    }

    pub(crate) fn disconnect(&self, user: &str) {
        self.with(user, |held| held.connections = held.connections.saturating_sub(1));
    }

    /// Counts a new pool of `size_bytes` owned by `user`, unless that takes it past its quota.
    pub(crate) fn reserve_pool(&self, user: &str, quota: &Quota, size_bytes: u64) -> Result<(), String> {
        self.with(user, |held| {
            if let Some(max) = quota.pools.filter(|max| held.pools >= *max) {
                return Err(format!("user '{user}' owns {max} pools, its quota (quota.pools)"));
            }
            let bytes = held.pool_bytes.saturating_add(size_bytes);
            if let Some(max) = quota.pool_bytes.filter(|max| bytes > *max) {
                return Err(format!(
                    "a pool of {size_bytes} bytes would take user '{user}' to {bytes} pool bytes, past its quota of \
                     {max} (quota.pool_bytes)"
                ));
            }
            held.pools += 1;
            held.pool_bytes = bytes;
            Ok(())
        })
    }

    /// Counts a pool `user` owns that exists already (found at start), whatever its quota.
    pub(crate) fn count_pool(&self, user: &str, size_bytes: u64) {
        self.with(user, |held| {
            held.pools += 1;
            held.pool_bytes = held.pool_bytes.saturating_add(size_bytes);
        });
    }

    /// Forgets a pool `user` owned (deleted, or its creation failed after the reservation).
    pub(crate) fn release_pool(&self, user: &str, size_bytes: u64) {
        self.with(user, |held| {
            held.pools = held.pools.saturating_sub(1);
            held.pool_bytes = held.pool_bytes.saturating_sub(size_bytes);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_refuse_past_their_limit_and_releases_make_room() {
        let usage = Usage::default();
        let quota = Quota { connections: Some(1), pools: Some(2), pool_bytes: Some(100) };
        usage.connect("alice", &quota).expect("first connection");
        assert!(usage.connect("alice", &quota).expect_err("second").contains("quota.connections"));
        usage.connect("bob", &quota).expect("another user's count is its own");
        usage.disconnect("alice");
        usage.connect("alice", &quota).expect("room again");

        usage.reserve_pool("alice", &quota, 60).expect("first pool");
        assert!(usage.reserve_pool("alice", &quota, 41).expect_err("bytes").contains("quota.pool_bytes"));
        usage.reserve_pool("alice", &quota, 40).expect("exactly the quota");
        assert!(usage.reserve_pool("alice", &quota, 0).expect_err("count").contains("quota.pools"));
        usage.release_pool("alice", 60);
        usage.reserve_pool("alice", &quota, 60).expect("room again");
        usage.count_pool("alice", 1000);
        assert!(usage.reserve_pool("alice", &Quota::default(), 1).is_ok(), "no quota, no limit");
        let snapshot = usage.snapshot();
        assert_eq!(snapshot.iter().map(|(user, _)| user.as_str()).collect::<Vec<_>>(), ["alice", "bob"]);
        assert_eq!(snapshot[0].1, Held { connections: 1, pools: 4, pool_bytes: 1101 });
    }
}
