//! Membership changes with the `ferrite cluster` commands on real processes: a fresh node added
//! under load becomes a voter and has the data (it serves every key once it leads), a leader
//! cannot be removed but a follower can, a dead node is replaced by an empty one with a new node
//! id (which then counts towards the majority), and an init sent again is accepted. The load's
//! history is checked as in the fault tests: nothing acknowledged is lost across the changes.

mod cluster_common;
mod cluster_harness;
mod common;

use std::time::{Duration, Instant};

use cluster_common::{
    assert_node_serves, block_on, cli_at, create_pool, form, init, serial, wait_caught_up, wait_for_leader, Load,
    LoadSpec, LEADER_TIMEOUT,
};
use cluster_harness::{Cluster, ClusterSpec};
use ferrite_client::{ClusterMap, Session};

/// The map as node `index` knows it.
fn map_of(cluster: &Cluster, index: usize) -> ClusterMap {
    let addr = cluster.node(index).native_addr().to_string();
    block_on(LEADER_TIMEOUT, async move { Session::connect(&addr).await.ok()?.cluster_map().await.ok() })
        .flatten()
        .unwrap_or_else(|| panic!("node {index} answers its map"))
}

/// Group 0's voters as the leader among `among` knows them, sorted.
fn voters(cluster: &Cluster, among: &[usize]) -> Vec<u64> {
    let leader = wait_for_leader(cluster, 0, among, LEADER_TIMEOUT);
    let mut voters = map_of(cluster, leader).groups[0].voters.clone();
    voters.sort_unstable();
    voters
}

/// The voters the leader among `among` names, once they are `expected` (the leader's map follows
/// a committed membership change a moment after the change is answered), or as they are after
/// [`LEADER_TIMEOUT`].
fn voters_become(cluster: &Cluster, among: &[usize], expected: &[u64]) -> Vec<u64> {
    let started = Instant::now();
    loop {
        let now = voters(cluster, among);
        if now == expected || started.elapsed() > LEADER_TIMEOUT {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Four nodes, the first three of them initialized as a cluster, with the load's pool.
fn three_of_four() -> Cluster {
    let cluster = Cluster::start(ClusterSpec { nodes: 4, ..ClusterSpec::default() });
    init(&cluster, &[0, 1, 2]);
    wait_for_leader(&cluster, 0, &[0, 1, 2], LEADER_TIMEOUT);
    create_pool(&cluster);
    cluster
}

/// `cluster init` of the same nodes again is accepted and says so; an init of other members is
/// refused.
#[test]
fn init_sent_again_is_accepted() {
    let _serial = serial();
    let cluster = Cluster::start(ClusterSpec { nodes: 3, ..ClusterSpec::default() });
    form(&cluster);
    let again = init(&cluster, &[0, 1, 2]);
    assert!(again.stdout.contains("initialized already"), "{again:?}");
    let addrs: Vec<String> = (0..2).map(|i| cluster.node(i).native_addr().to_string()).collect();
    let other = cli_at(cluster.node(0).native_addr(), &["cluster", "init", "--node", &addrs[0], "--node", &addrs[1]]);
    assert!(!other.success, "an init of other members was accepted: {other:?}");
    assert_eq!(voters(&cluster, &[0, 1, 2]), [1, 2, 3]);
}

/// A fresh node added under load becomes a voter, catches up, and once leadership is transferred
/// to it serves every key's final value; the leader cannot be removed, a follower can.
#[test]
fn a_fresh_node_added_votes_and_has_the_data() {
    let _serial = serial();
    let cluster = three_of_four();
    let load = Load::start(&cluster, LoadSpec::default());
    load.wait_for_acks(100, LEADER_TIMEOUT, "before the add");
    let added =
        cli_at(cluster.node(1).native_addr(), &["cluster", "add-node", &cluster.node(3).native_addr().to_string()]);
    assert!(added.success, "add-node: {added:?}");
    let all = [0, 1, 2, 3];
    assert_eq!(voters(&cluster, &all), [1, 2, 3, 4]);
    wait_caught_up(&cluster, 0, 3, LEADER_TIMEOUT);
    load.wait_for_acks(20, LEADER_TIMEOUT, "after the add");
    let finals = load.finish_and_check();

    let leader = wait_for_leader(&cluster, 0, &all, LEADER_TIMEOUT);
    let transferred =
        cli_at(cluster.node(leader).native_addr(), &["cluster", "transfer-leader", "--group", "0", "--to", "4"]);
    assert!(transferred.success, "transfer-leader: {transferred:?}");
    assert_eq!(wait_for_leader(&cluster, 0, &all, LEADER_TIMEOUT), 3);
    assert_node_serves(&cluster, 3, &finals);

    let refused = cli_at(cluster.node(0).native_addr(), &["cluster", "remove-node", "4"]);
    assert!(!refused.success, "the leader was removed: {refused:?}");
    let removed = cli_at(cluster.node(0).native_addr(), &["cluster", "remove-node", "2"]);
    assert!(removed.success, "remove-node 2: {removed:?}");
    assert_eq!(voters_become(&cluster, &[0, 2, 3], &[1, 3, 4]), [1, 3, 4]);
}

/// A follower dies for good; an empty node with a new id is added and the dead one removed. The
/// replacement then counts towards the majority: with one more original node killed, the
/// survivors (one original, the replacement) still acknowledge writes, and nothing acknowledged
/// is lost.
#[test]
fn a_dead_node_is_replaced_by_an_empty_one_with_a_new_id() {
    let _serial = serial();
    let cluster = three_of_four();
    let load = Load::start(&cluster, LoadSpec::default());
    load.wait_for_acks(50, LEADER_TIMEOUT, "before the death");
    let leader = wait_for_leader(&cluster, 0, &[0, 1, 2], LEADER_TIMEOUT);
    let dead = (leader + 1) % 3;
    cluster.node(dead).kill9();
    let survivor = (0..3).find(|&i| i != dead).expect("a survivor");
    let added = cli_at(
        cluster.node(survivor).native_addr(),
        &["cluster", "add-node", &cluster.node(3).native_addr().to_string()],
    );
    assert!(added.success, "add-node with a member dead: {added:?}");
    let dead_id = cluster.node(dead).node_id().to_string();
    let removed = cli_at(cluster.node(survivor).native_addr(), &["cluster", "remove-node", &dead_id]);
    assert!(removed.success, "remove-node of the dead node: {removed:?}");
    let alive: Vec<usize> = [0, 1, 2, 3].into_iter().filter(|&i| i != dead).collect();
    let mut expected: Vec<u64> = alive.iter().map(|&i| cluster.node(i).node_id()).collect();
    expected.sort_unstable();
    assert_eq!(voters(&cluster, &alive), expected);
    wait_caught_up(&cluster, 0, 3, LEADER_TIMEOUT);

    // Kill one more original node (the leader, so that the replacement must take part in an
    // election): the two left are a majority of the three voters only if the replacement votes.
    let leader = wait_for_leader(&cluster, 0, &alive, LEADER_TIMEOUT);
    let victim = if leader == 3 { alive[0] } else { leader };
    cluster.node(victim).kill9();
    let left: Vec<usize> = alive.iter().copied().filter(|&i| i != victim).collect();
    wait_for_leader(&cluster, 0, &left, Duration::from_secs(20));
    load.wait_for_acks(20, LEADER_TIMEOUT, "with the replacement and one original node");
    load.finish_and_check();
}
