//! The Redis Cluster protocol over a hand-filled cluster map: three nodes, two groups, group 0 led
//! by node 1 (term 3) and group 1 by node 2 (term 5), every node a voter of both. Each test is a
//! RESP connection to one node's listener for one group, on a `memory` shard, its commands run as
//! a real connection runs them. Slots: `bar` 5061 and `foo{{bar}}zap` 4015 are group 0's, `foo`
//! 12182 group 1's.

use std::sync::Arc;

use super::testing::{error, ok, Connection, Value};
use crate::cluster::view::tests::node;
use crate::cluster::view::{ClusterMap, GroupView, NodeInfo};
use crate::cluster::ShardCluster;
use crate::handler::Flow;

impl Connection {
    /// A connection to the listener of node `me` for `group`.
    fn to(me: u64, group: usize) -> Connection {
        Connection::over(Some(ShardCluster { map: cluster_map(me), group }))
    }
}

/// What group `group` is to node `me`, led by `leader` in `term`: the leader knows how far the
/// others' logs reach (node 2's to 10, node 3's to 7, its own to 12).
fn group_view(me: u64, leader: Option<u64>, term: u64) -> GroupView {
    let leads = leader == Some(me);
    GroupView {
        leader,
        term,
        voters: vec![1, 2, 3],
        learners: Vec::new(),
        leads_here: leads,
        matched: if leads {
            [(1, 12), (2, 10), (3, 7)].into_iter().filter(|(id, _)| *id != me).collect()
        } else {
            Vec::new()
        },
        last_log: 12,
    }
}

/// The cluster map as node `me` sees it.
fn cluster_map(me: u64) -> Arc<ClusterMap> {
    let map = ClusterMap::new(me, 2);
    let nodes = [node(1), node(2), node(3)];
    map.update_group(0, group_view(me, Some(1), 3), &nodes, "c1");
    map.update_group(1, group_view(me, Some(2), 5), &nodes, "c1");
    map
}

fn id(node: u64, group: u64) -> String {
    format!("{node:020x}{group:020x}")
}

const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// The leader of a group answers its keys; a key of the other group is redirected to that group's
/// leader, at its RESP port for the group.
#[test]
fn keys_are_answered_by_their_groups_leader_and_redirected_elsewhere() {
    let mut leader = Connection::to(1, 0);
    assert_eq!(leader.send(&["SET", "bar", "1"]), ok());
    assert_eq!(leader.send(&["GET", "bar"]), Value::Bulk(b"1".to_vec()));
    assert_eq!(leader.send(&["GET", "foo"]), error("MOVED 12182 10.0.0.2:6380"));
    assert_eq!(leader.send(&["SET", "foo", "1"]), error("MOVED 12182 10.0.0.2:6380"));
    assert_eq!(leader.send(&["EXISTS", "foo"]), error("MOVED 12182 10.0.0.2:6380"), "reads too");
    assert_eq!(leader.send(&["GET", "foo{bar}zap"]), Value::Null, "a hash tag of group 0");

    // Node 2 follows group 0 and leads group 1: group 0's keys go to node 1; group 1's to this
    // same node, at its listener for group 1.
    let mut follower = Connection::to(2, 0);
    assert_eq!(follower.send(&["GET", "bar"]), error("MOVED 5061 10.0.0.1:6379"));
    assert_eq!(follower.send(&["GET", "foo"]), error("MOVED 12182 10.0.0.2:6380"));
    let mut other_group = Connection::to(2, 1);
    assert_eq!(other_group.send(&["SET", "foo", "2"]), ok());
    assert_eq!(other_group.send(&["GET", "bar"]), error("MOVED 5061 10.0.0.1:6379"));
}

/// A command's keys must share a slot, whoever serves it; commands without keys are answered on
/// any node; a wrong command is refused as it would be anywhere.
#[test]
fn keys_of_one_command_must_share_a_slot() {
    let mut follower = Connection::to(3, 0);
    assert_eq!(follower.send(&["MGET", "bar", "foo{{bar}}zap"]), error(CROSSSLOT), "two slots of one group");
    assert_eq!(follower.send(&["DEL", "bar", "foo"]), error(CROSSSLOT));
    assert_eq!(follower.send(&["RENAME", "bar", "foo"]), error(CROSSSLOT));
    assert_eq!(follower.send(&["MSET", "bar", "1", "foo", "2"]), error(CROSSSLOT));
    assert_eq!(follower.send(&["MGET", "bar", "{bar}2"]), error("MOVED 5061 10.0.0.1:6379"), "one slot");
    assert_eq!(follower.send(&["MSET", "bar", "1", "foo"]), error(CROSSSLOT), "keys are checked before arguments");
    assert_eq!(follower.send(&["MSET", "bar"]), error("ERR wrong number of arguments for 'mset' command"));
    assert_eq!(
        follower.send(&["NOSUCH", "bar", "foo"]).text(),
        "ERR unknown command 'NOSUCH', with args beginning with: 'bar' 'foo' "
    );
    assert_eq!(follower.send(&["PING"]), Value::Simple("PONG".into()));
    assert_eq!(follower.send(&["DBSIZE"]), Value::Int(0), "this node's keys of its group");
    assert_eq!(follower.send(&["SCAN", "0"]).items()[1], Value::Array(Vec::new()));

    let mut leader = Connection::to(1, 0);
    assert_eq!(leader.send(&["MSET", "bar", "1", "{bar}2", "2"]), ok());
    assert_eq!(
        leader.send(&["MGET", "bar", "{bar}2"]),
        Value::Array(vec![Value::Bulk(b"1".to_vec()), Value::Bulk(b"2".to_vec())])
    );
    assert_eq!(leader.send(&["MGET", "bar", "foo{{bar}}zap"]), error(CROSSSLOT), "even on the leader of both");
}

/// In a transaction, each command is checked as it is queued (a redirection then aborts `EXEC`),
/// and at `EXEC` all the keys must share one slot, or the transaction is discarded.
#[test]
fn a_transactions_keys_must_share_a_slot_too() {
    let mut leader = Connection::to(1, 0);
    assert_eq!(leader.send(&["MULTI"]), ok());
    assert_eq!(leader.send(&["SET", "bar", "1"]), Value::Simple("QUEUED".into()));
    assert_eq!(leader.send(&["INCR", "{bar}n"]), Value::Simple("QUEUED".into()));
    assert_eq!(leader.send(&["EXEC"]), Value::Array(vec![ok(), Value::Int(1)]));

    assert_eq!(leader.send(&["MULTI"]), ok());
    assert_eq!(leader.send(&["SET", "bar", "2"]), Value::Simple("QUEUED".into()));
    assert_eq!(leader.send(&["SET", "foo", "2"]), error("MOVED 12182 10.0.0.2:6380"));
    assert_eq!(leader.send(&["EXEC"]), error("EXECABORT Transaction discarded because of previous errors."));

    assert_eq!(leader.send(&["MULTI"]), ok());
    assert_eq!(leader.send(&["SET", "bar", "3"]), Value::Simple("QUEUED".into()));
    assert_eq!(
        leader.send(&["SET", "foo{{bar}}zap", "3"]),
        Value::Simple("QUEUED".into()),
        "each alone is served here"
    );
    assert_eq!(leader.send(&["EXEC"]), error(CROSSSLOT));
    assert_eq!(leader.send(&["EXEC"]), error("ERR EXEC without MULTI"), "the transaction was discarded");
    assert_eq!(leader.send(&["GET", "bar"]), Value::Bulk(b"1".to_vec()), "and ran nothing");
}

/// A group without a known leader, or whose leader here may not answer yet, is down; so is every
/// group of a node not yet in a cluster.
#[test]
fn a_group_without_a_leader_is_down() {
    let mut leader = Connection::to(1, 0);
    leader.map().update_group(1, group_view(1, None, 6), &[], "c1");
    assert_eq!(leader.send(&["GET", "foo"]), error("CLUSTERDOWN The cluster is down"));
    leader.map().update_group(0, GroupView { leads_here: false, ..group_view(1, Some(1), 3) }, &[], "c1");
    assert_eq!(leader.send(&["GET", "bar"]), error("CLUSTERDOWN The cluster is down"), "not sent back to itself");

    let mut fresh = Connection::over(Some(ShardCluster { map: ClusterMap::new(4, 2), group: 0 }));
    assert_eq!(fresh.send(&["SET", "bar", "1"]), error("CLUSTERDOWN The cluster is down"));
    assert_eq!(fresh.send(&["CLUSTER", "SLOTS"]), Value::Array(Vec::new()));
    assert_eq!(
        fresh.send(&["CLUSTER", "NODES"]).text(),
        format!("{} :6379@0 myself,master - 0 0 0 connected\n", id(4, 0))
    );
    assert!(fresh.send(&["CLUSTER", "INFO"]).text().starts_with("cluster_state:fail\r\ncluster_slots_assigned:0\r\n"));
}

/// `READONLY` on a node whose replica may not answer reads itself (here it has none running; in a
/// cluster, one that has not heard from its leader lately) changes nothing: reads are redirected
/// to the leader like writes; `READWRITE` is accepted too.
#[test]
fn readonly_connections_are_still_redirected_to_the_leader() {
    let mut follower = Connection::to(2, 0);
    assert_eq!(follower.send(&["READONLY"]), ok());
    assert_eq!(follower.send(&["GET", "bar"]), error("MOVED 5061 10.0.0.1:6379"));
    assert_eq!(follower.send(&["SET", "bar", "1"]), error("MOVED 5061 10.0.0.1:6379"));
    assert_eq!(follower.send(&["READWRITE"]), ok());
    assert_eq!(follower.send(&["GET", "bar"]), error("MOVED 5061 10.0.0.1:6379"));
}

/// `FERRITE.INVOKE`'s key is routed like any other; an empty key (the pool itself) is answered
/// where it arrives.
#[test]
fn plugin_calls_are_routed_by_their_key() {
    let mut follower = Connection::to(2, 0);
    assert_eq!(follower.send(&["FERRITE.INVOKE", "bar", "x"]), error("MOVED 5061 10.0.0.1:6379"));
    let pool_call = follower.send(&["FERRITE.INVOKE", "", "x"]).text();
    assert!(pool_call.starts_with("ERR pool '@0/redis' has no plugins"), "{pool_call}");
}

/// `CLUSTER SLOTS`: each group's range, its leader then its followers, as `[host, port, id, {}]`
/// at the node's RESP port for the group.
#[test]
fn cluster_slots_lists_each_groups_leader_then_followers() {
    let mut connection = Connection::to(3, 1);
    let node = |n: u64, group: u64| {
        Value::Array(vec![
            Value::Bulk(format!("10.0.0.{n}").into_bytes()),
            Value::Int(6379 + group as i64),
            Value::Bulk(id(n, group).into_bytes()),
            Value::Array(Vec::new()),
        ])
    };
    let expected = Value::Array(vec![
        Value::Array(vec![Value::Int(0), Value::Int(8191), node(1, 0), node(2, 0), node(3, 0)]),
        Value::Array(vec![Value::Int(8192), Value::Int(16383), node(2, 1), node(1, 1), node(3, 1)]),
    ]);
    assert_eq!(connection.send(&["CLUSTER", "SLOTS"]), expected);
    assert_eq!(connection.send(&["cluster", "slots"]), expected, "names are case-insensitive");

    // A group without a leader serves no slots; learners are left out.
    connection.map().update_group(0, GroupView { learners: vec![4], ..group_view(3, Some(1), 3) }, &[], "c1");
    connection.map().update_group(1, group_view(3, None, 6), &[], "c1");
    let slots = connection.send(&["CLUSTER", "SLOTS"]);
    assert_eq!(slots.items().len(), 1);
    assert_eq!(slots.items()[0].items().len(), 5);
}

/// `CLUSTER NODES`: a `\n`-terminated line per (node, group): id, address with bus port, flags,
/// master, `0 0`, the group's term as epoch, `connected`, and a master's slots.
#[test]
fn cluster_nodes_describes_each_node_of_each_group() {
    let mut connection = Connection::to(2, 0);
    let text = connection.send(&["CLUSTER", "NODES"]).text();
    assert!(text.ends_with('\n'));
    let lines: Vec<&str> = text.lines().collect();
    let expected = [
        format!("{} 10.0.0.1:6379@7300 master - 0 0 3 connected 0-8191", id(1, 0)),
        format!("{} 10.0.0.2:6379@7300 myself,slave {} 0 0 3 connected", id(2, 0), id(1, 0)),
        format!("{} 10.0.0.3:6379@7300 slave {} 0 0 3 connected", id(3, 0), id(1, 0)),
        format!("{} 10.0.0.2:6380@7301 master - 0 0 5 connected 8192-16383", id(2, 1)),
        format!("{} 10.0.0.1:6380@7301 slave {} 0 0 5 connected", id(1, 1), id(2, 1)),
        format!("{} 10.0.0.3:6380@7301 slave {} 0 0 5 connected", id(3, 1), id(2, 1)),
    ];
    assert_eq!(lines, expected);
    assert_eq!(text.matches('\n').count(), 6, "every line ends with a newline");

    // A node that serves no RESP has no address; a group without a leader has no master.
    let nodes = [NodeInfo { resp: String::new(), ..node(3) }];
    connection.map().update_group(1, group_view(2, None, 6), &nodes, "c1");
    let text = connection.send(&["CLUSTER", "NODES"]).text();
    assert!(text.contains(&format!("{} :0@0 slave,noaddr {} 0 0 3 connected\n", id(3, 0), id(1, 0))), "{text}");
    assert!(text.contains(&format!("{} 10.0.0.2:6380@7301 slave - 0 0 6 connected\n", id(2, 1))), "{text}");
}

/// `CLUSTER SHARDS`: each group's slots and nodes, with their role, log reach and health.
#[test]
fn cluster_shards_lists_each_groups_nodes() {
    let mut connection = Connection::to(1, 0);
    connection.map().update_group(0, GroupView { learners: vec![4], ..group_view(1, Some(1), 3) }, &[node(4)], "c1");
    let shards = connection.send(&["CLUSTER", "SHARDS"]);
    assert_eq!(shards.items().len(), 2);
    let first = &shards.items()[0];
    assert_eq!(first.field("slots"), &Value::Array(vec![Value::Int(0), Value::Int(8191)]));
    let nodes = first.field("nodes").items();
    let summary: Vec<(String, i64, String, String, i64, String)> = nodes
        .iter()
        .map(|node| {
            (
                node.field("id").text(),
                node.field("port").int(),
                node.field("ip").text(),
                node.field("role").text(),
                node.field("replication-offset").int(),
                node.field("health").text(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (id(1, 0), 6379, "10.0.0.1".into(), "master".into(), 12, "online".into()),
            (id(2, 0), 6379, "10.0.0.2".into(), "replica".into(), 10, "online".into()),
            (id(3, 0), 6379, "10.0.0.3".into(), "replica".into(), 7, "online".into()),
            (id(4, 0), 6379, "10.0.0.4".into(), "replica".into(), 0, "loading".into()),
        ]
    );
    assert_eq!(nodes[0].field("endpoint").text(), "10.0.0.1");
    let second = &shards.items()[1];
    assert_eq!(second.field("slots"), &Value::Array(vec![Value::Int(8192), Value::Int(16383)]));
    assert_eq!(second.field("nodes").items()[0].field("port").int(), 6380);

    let mut resp3 = Connection::to(1, 0);
    assert_eq!(resp3.send(&["HELLO", "3"]).field("mode").text(), "cluster");
    let (_, out) = resp3.run(&["CLUSTER", "SHARDS"]);
    assert!(out.starts_with(b"*2\r\n%2\r\n$5\r\nslots\r\n"), "maps in RESP3");
}

/// `CLUSTER INFO`, `MYID` and `KEYSLOT`; the subcommands that would change the cluster are
/// refused with a pointer to `ferrite cluster`, unknown ones as Redis does.
#[test]
fn cluster_info_myid_and_keyslot() {
    let mut connection = Connection::to(2, 0);
    let info = connection.send(&["CLUSTER", "INFO"]).text();
    for line in [
        "cluster_state:ok",
        "cluster_slots_assigned:16384",
        "cluster_slots_ok:16384",
        "cluster_slots_fail:0",
        "cluster_known_nodes:6",
        "cluster_size:2",
        "cluster_current_epoch:5",
        "cluster_my_epoch:3",
    ] {
        assert!(info.split("\r\n").any(|field| field == line), "{line} in {info}");
    }
    connection.map().update_group(1, group_view(2, None, 6), &[], "c1");
    let info = connection.send(&["CLUSTER", "INFO"]).text();
    assert!(
        info.starts_with("cluster_state:fail\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:8192\r\n"),
        "{info}"
    );
    assert!(info.contains("cluster_slots_fail:8192\r\n") && info.contains("cluster_size:1\r\n"), "{info}");

    assert_eq!(connection.send(&["CLUSTER", "MYID"]).text(), id(2, 0));
    assert_eq!(connection.send(&["CLUSTER", "KEYSLOT", "foo{}{bar}"]), Value::Int(8363));
    assert_eq!(
        connection.send(&["CLUSTER", "KEYSLOT"]),
        error("ERR wrong number of arguments for 'cluster|keyslot' command")
    );
    assert_eq!(connection.send(&["CLUSTER", "COUNTKEYSINSLOT", "16384"]), error("ERR Invalid slot"));
    assert!(connection.send(&["CLUSTER", "COUNTKEYSINSLOT", "7"]).text().contains("not supported"));
    let meet = connection.send(&["CLUSTER", "MEET", "10.0.0.9", "6379"]).text();
    assert!(meet.starts_with("ERR CLUSTER MEET is not supported") && meet.contains("ferrite cluster"), "{meet}");
    assert_eq!(connection.send(&["CLUSTER", "NOSUCH"]), error("ERR unknown subcommand 'NOSUCH'. Try CLUSTER HELP."));
    assert_eq!(connection.send(&["ASKING"]), ok());
}

/// `INFO` says cluster mode is on and whether this listener is its group's master; `HELLO` too.
#[test]
fn info_reports_cluster_mode_and_role() {
    let mut leader = Connection::to(1, 0);
    let info = leader.send(&["INFO"]).text();
    for line in
        ["redis_mode:cluster", "cluster_enabled:1", "role:master", "connected_slaves:2", "master_repl_offset:12"]
    {
        assert!(info.split("\r\n").any(|field| field == line), "{line} in {info}");
    }
    assert!(info.contains("slave0:ip=10.0.0.2,port=6379,state=online,offset=10,lag=0\r\n"), "{info}");
    let mut follower = Connection::to(3, 1);
    let info = follower.send(&["INFO", "replication"]).text();
    assert!(
        info.starts_with(
            "# Replication\r\nrole:slave\r\nmaster_host:10.0.0.2\r\nmaster_port:6380\r\nmaster_link_status:up\r\n"
        ),
        "{info}"
    );
    assert_eq!(follower.send(&["HELLO"]).field("role").text(), "replica");
}

/// A server not in cluster mode: the cluster commands are refused as by Redis without cluster
/// support, `WAIT` answers 0 at once, and keys of any slot are answered.
#[test]
fn a_single_server_has_no_cluster() {
    let mut single = Connection::single_server();
    let disabled = error("ERR This instance has cluster support disabled");
    assert_eq!(single.send(&["CLUSTER", "INFO"]), disabled);
    assert_eq!(single.send(&["CLUSTER", "NOSUCH"]), disabled);
    assert_eq!(single.send(&["READONLY"]), disabled);
    assert_eq!(single.send(&["READWRITE"]), disabled);
    assert_eq!(single.send(&["ASKING"]), disabled);
    assert_eq!(single.send(&["WAIT", "0", "0"]), Value::Int(0));
    assert_eq!(single.send(&["WAIT", "1", "0"]), Value::Int(0), "no replica will ever hold it");
    assert_eq!(single.send(&["MSET", "bar", "1", "foo", "2"]), ok());
    let info = single.send(&["INFO"]).text();
    assert!(
        info.contains("redis_mode:standalone\r\n")
            && info.contains("cluster_enabled:0\r\n")
            && info.contains("role:master\r\n")
    );
}

/// `WAIT` answers how many other replicas hold the connection's last write: at once when enough
/// do (or inside `EXEC`), otherwise once enough do, or at its timeout; it is refused on a follower,
/// and a wait ends if the node stops leading.
#[test]
fn wait_counts_replicas_holding_the_last_write() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
    tokio::task::LocalSet::new().block_on(&runtime, async {
        let mut leader = Connection::to(1, 0);
        leader.client.session.last_write_lsn = 8;
        assert_eq!(leader.send(&["WAIT", "1", "0"]), Value::Int(1), "node 2 holds 10");
        assert_eq!(leader.send(&["WAIT", "-1", "0"]), Value::Int(1));
        assert_eq!(leader.send(&["WAIT", "1", "-1"]), error("ERR timeout is negative"));
        assert_eq!(leader.send(&["WAIT", "1", "x"]), error("ERR timeout is not an integer or out of range"));
        assert_eq!(leader.send(&["WAIT", "x", "0"]), error("ERR value is not an integer or out of range"));
        assert_eq!(leader.send(&["MULTI"]), ok());
        assert_eq!(leader.send(&["WAIT", "2", "0"]), Value::Simple("QUEUED".into()));
        assert_eq!(leader.send(&["EXEC"]), Value::Array(vec![Value::Int(1)]), "no waiting inside a transaction");

        // Node 3 reaches the write later.
        let (flow, out) = leader.run(&["WAIT", "2", "0"]);
        let Flow::Wait { completion, consumed: true } = flow else { panic!("WAIT 2 waits") };
        assert!(out.is_empty());
        tokio::task::yield_now().await;
        assert!(!completion.is_done());
        let caught_up = GroupView { matched: vec![(2, 10), (3, 8)], ..group_view(1, Some(1), 3) };
        leader.map().update_group(0, caught_up, &[], "c1");
        completion.wait().await;
        assert_eq!(completion.take().0, &b":2\r\n"[..]);

        // Nobody reaches it: the timeout answers what there is.
        leader.client.session.last_write_lsn = 11;
        let (flow, _) = leader.run(&["WAIT", "1", "5"]);
        let Flow::Wait { completion, .. } = flow else { panic!("WAIT 1 waits") };
        completion.wait().await;
        assert_eq!(completion.take().0, &b":0\r\n"[..]);

        // Leadership moves while it waits.
        let (flow, _) = leader.run(&["WAIT", "1", "0"]);
        let Flow::Wait { completion, .. } = flow else { panic!("WAIT 1 waits") };
        leader.map().update_group(0, group_view(1, Some(2), 4), &[], "c1");
        completion.wait().await;
        assert!(completion.take().0.starts_with(b"-UNBLOCKED "));

        let mut follower = Connection::to(2, 0);
        assert!(follower
            .send(&["WAIT", "0", "0"])
            .text()
            .starts_with("ERR WAIT cannot be used with replica instances"));
    });
}

/// A `SET` of a value past the inline limit is routed by its key before any of the value is
/// staged: a key of another group is answered `MOVED` once the value has been read and dropped.
#[test]
fn a_long_set_is_redirected_before_its_value_is_staged() {
    let mut leader = Connection::to(1, 0);
    let long = 8 * 1024 * 1024;
    let args = |key: &'static str| (["set".as_bytes(), key.as_bytes()].concat(), [0..3, 3..3 + key.len()]);
    let (source, ranges) = args("foo");
    let begun = super::begin_set(
        super::Args::new(&source, &ranges),
        long,
        0,
        &mut leader.client,
        &mut leader.shard,
        &leader.settings,
    );
    assert!(begun.is_none(), "taken at once");
    assert_eq!(super::long_values::refusal(&leader.client), Some("MOVED 12182 10.0.0.2:6380"));
    assert_eq!(leader.shard.stats.direct_transfers, 0, "nothing staged");

    let mut here = Connection::to(1, 0);
    let (source, ranges) = args("bar");
    let begun = super::begin_set(
        super::Args::new(&source, &ranges),
        long,
        0,
        &mut here.client,
        &mut here.shard,
        &here.settings,
    );
    assert!(begun.is_none());
    assert_eq!(super::long_values::refusal(&here.client), None, "its own group's key is staged");
    assert_eq!(here.shard.stats.direct_transfers, 1);
}
