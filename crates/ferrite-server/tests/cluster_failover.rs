//! Failover under load, with real processes on a real network: concurrent clients write (and
//! read) their own keys while the leader of the group is killed with SIGKILL and started again,
//! round after round. After each kill the two survivors must elect a leader (within a generous
//! bound) and the cluster must acknowledge writes again; at the end every acknowledged write must
//! be there and every key's history linearizable (`ferrite-history`), which catches a lost write,
//! a write that reappears after it was refused, or a stale read.
//!
//! The short run (a few kills) is part of `make test`; the long one (50 kills) is `#[ignore]`d:
//! `cargo test -p ferrite-server --test cluster_failover -- --ignored --nocapture` prints the
//! failover times it saw (kill to the first acknowledged write).

mod cluster_common;
mod cluster_harness;
mod common;

use std::time::{Duration, Instant};

use cluster_common::{
    create_pool, form, median_and_max, ms, serial, wait_caught_up, wait_for_leader, Load, LoadSpec, LEADER_TIMEOUT,
};
use cluster_harness::{Cluster, ClusterSpec};

/// The bound on electing a new leader after a kill: an election timeout is at most 600 ms, so
/// this only catches a cluster that does not fail over at all.
const FAILOVER_BOUND: Duration = Duration::from_secs(10);

/// Kills the leader `kills` times under load; returns each round's time from the kill to the
/// first write acknowledged after it.
fn kill_the_leader_repeatedly(kills: usize) -> Vec<Duration> {
    let cluster = Cluster::start(ClusterSpec::default());
    form(&cluster);
    create_pool(&cluster);
    let load = Load::start(&cluster, LoadSpec::default());
    load.wait_for_acks(20, LEADER_TIMEOUT, "before the first kill");
    let all: Vec<usize> = (0..cluster.node_count()).collect();
    let mut failovers = Vec::with_capacity(kills);
    for round in 0..kills {
        let leader = wait_for_leader(&cluster, 0, &all, LEADER_TIMEOUT);
        cluster.node(leader).kill9();
        let killed = Instant::now();
        let survivors: Vec<usize> = all.iter().copied().filter(|&index| index != leader).collect();
        let next = wait_for_leader(&cluster, 0, &survivors, FAILOVER_BOUND);
        assert_ne!(next, leader, "round {round}: the killed node cannot lead");
        let first = load
            .first_ack_after(killed, FAILOVER_BOUND)
            .unwrap_or_else(|| panic!("round {round}: no write acknowledged within {FAILOVER_BOUND:?} of the kill"));
        failovers.push(first - killed);
        eprintln!(
            "round {round}: node {} killed, node {} leads, writes again after {} ms",
            leader + 1,
            next + 1,
            ms(first - killed)
        );
        cluster.node(leader).restart();
        // The restarted node must have caught up before the next kill, or the next round could
        // kill the only other node holding the latest entries and wait for nothing.
        wait_caught_up(&cluster, 0, leader, LEADER_TIMEOUT);
    }
    load.finish_and_check();
    failovers
}

fn report(failovers: &[Duration]) {
    let (median, max) = median_and_max(failovers);
    eprintln!(
        "{} kills: kill to first acknowledged write: median {} ms, max {} ms (all: {:?})",
        failovers.len(),
        ms(median),
        ms(max),
        failovers.iter().map(|d| ms(*d)).collect::<Vec<_>>()
    );
}

/// A few kills. It caught a restarted leader that never caught up: its uncommitted tail was cut
/// and written again with the new leader's entries, and the flush that waited for the same log
/// position again was never told it was durable, so it acknowledged no append.
#[test]
fn killing_the_leader_loses_no_acknowledged_write() {
    let _serial = serial();
    report(&kill_the_leader_repeatedly(4));
}

/// The same with 50 kills (about five minutes in a debug build).
#[test]
#[ignore = "long: 50 kills; run with --ignored"]
fn killing_the_leader_fifty_times_loses_no_acknowledged_write() {
    let _serial = serial();
    report(&kill_the_leader_repeatedly(50));
}
