//! The cluster map as Redis Cluster clients see it: each (node, group) pair is one Redis Cluster
//! "node", whose address is that node's RESP listener for the group (its `resp` port + g) and whose
//! bus port is its peer listener for the group; the group's leader is the master of the group's
//! slots, its other members are replicas. `CLUSTER SLOTS`, `SHARDS`, `NODES` and `INFO`, and
//! `INFO replication`, are rendered here from a [`ClusterView`].

use std::fmt::Write;
use std::ops::Range;

use bytes::BytesMut;

use super::reply::{self, Protocol};
use super::slots::{slot_range, SLOTS};
use crate::cluster::view::{shard_address, ClusterView, GroupView, NodeInfo};

/// The Redis Cluster node id of `node`'s replica of `group`: 40 hex digits, as Redis's are.
pub(crate) fn node_id(node: u64, group: usize) -> String {
    format!("{node:020x}{group:020x}")
}

/// Where clients reach `node`'s RESP listener for `group`: its host (an IPv6 address without its
/// brackets, as Redis writes it) and port. `None` if the node serves no RESP.
pub(crate) fn endpoint(node: &NodeInfo, group: usize) -> Option<(String, u16)> {
    if node.resp.is_empty() {
        return None;
    }
    let address = shard_address(&node.resp, group)?;
    let (host, port) = address.rsplit_once(':')?;
    let host = host.strip_prefix('[').and_then(|inner| inner.strip_suffix(']')).unwrap_or(host);
    Some((host.to_owned(), port.parse().ok()?))
}

/// The port of `node`'s peer listener for `group` (Redis's cluster bus port), 0 if unknown.
fn bus_port(node: &NodeInfo, group: usize) -> u16 {
    shard_address(&node.peer, group)
        .and_then(|address| address.rsplit_once(':').and_then(|(_, port)| port.parse().ok()))
        .unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Leader,
    Follower,
    /// Receives the log but does not vote yet (a node being added).
    Learner,
}

/// One member of a group.
struct Member<'v> {
    node_id: u64,
    /// What the cluster knows of the node, if anything.
    node: Option<&'v NodeInfo>,
    role: Role,
}

impl Member<'_> {
    /// Where clients reach this member for `group`, if they can.
    fn endpoint(&self, group: usize) -> Option<(String, u16)> {
        endpoint(self.node?, group)
    }
}

/// The members of `group`: its leader first (if known), then its other voters, then its learners.
fn members(view: &ClusterView, group: usize) -> Vec<Member<'_>> {
    let Some(seen) = view.groups.get(group) else { return Vec::new() };
    let member = |node_id: u64, role: Role| Member { node_id, node: view.node(node_id), role };
    let others = |ids: &'_ [u64], role: Role| {
        ids.iter().filter(|&&id| Some(id) != seen.leader).map(move |&id| member(id, role)).collect::<Vec<_>>()
    };
    let mut members: Vec<Member<'_>> = seen.leader.map(|leader| member(leader, Role::Leader)).into_iter().collect();
    members.extend(others(&seen.voters, Role::Follower));
    members.extend(others(&seen.learners, Role::Learner));
    members
}

fn is_member(seen: &GroupView, node: u64) -> bool {
    seen.voters.contains(&node) || seen.learners.contains(&node)
}

/// How far the log of `node`'s replica of a group reaches, as this node knows: its own last
/// entry, or (on the leader) what another member is known to hold; 0 when unknown.
fn log_reach(view: &ClusterView, seen: &GroupView, node: u64) -> u64 {
    if node == view.node_id {
        return seen.last_log;
    }
    seen.matched.iter().find(|(id, _)| *id == node).map_or(0, |(_, index)| *index)
}

/// Whether this node's replica of `group` is a master to Redis clients: it leads the group, or is
/// no member of it (a node not yet in a cluster is a master without slots, as a new Redis node
/// is). Otherwise it is a replica.
pub(crate) fn is_master(view: &ClusterView, group: usize) -> bool {
    view.groups.get(group).is_none_or(|seen| seen.leads_here || !is_member(seen, view.node_id))
}

/// A member clients can reach: its Redis node id and its RESP endpoint for the group.
struct Reached {
    id: String,
    host: String,
    port: u16,
}

/// A group whose slots are served: its slots, and its reachable leader (first) and voting
/// followers.
struct Served {
    slots: Range<u16>,
    nodes: Vec<Reached>,
}

/// The groups whose leader is known and reachable: what `CLUSTER SLOTS` lists. Learners are left
/// out: they are still catching up.
fn served_groups(view: &ClusterView) -> Vec<Served> {
    let reached = |member: &Member<'_>, group: usize| {
        let (host, port) = member.endpoint(group)?;
        Some(Reached { id: node_id(member.node_id, group), host, port })
    };
    let mut served = Vec::new();
    for group in 0..view.groups.len() {
        let members = members(view, group);
        let Some(leader) = members.first().filter(|first| first.role == Role::Leader) else { continue };
        let Some(leader) = reached(leader, group) else { continue };
        let mut nodes = vec![leader];
        nodes.extend(
            members[1..]
                .iter()
                .filter(|member| member.role == Role::Follower)
                .filter_map(|member| reached(member, group)),
        );
        served.push(Served { slots: slot_range(group, view.groups.len()), nodes });
    }
    served
}

/// `CLUSTER SLOTS`: for each group whose leader is known and serves RESP, its slot range, its
/// leader, then its voting followers that serve RESP; each as `[host, port, id, {}]`.
pub(crate) fn slots(out: &mut BytesMut, protocol: Protocol, view: &ClusterView) {
    let served = served_groups(view);
    reply::array(out, served.len());
    for Served { slots, nodes } in served {
        reply::array(out, 2 + nodes.len());
        reply::integer(out, i64::from(slots.start));
        reply::integer(out, i64::from(slots.end - 1));
        for node in &nodes {
            reply::array(out, 4);
            reply::bulk(out, node.host.as_bytes());
            reply::integer(out, i64::from(node.port));
            reply::bulk(out, node.id.as_bytes());
            reply::map(out, 0, protocol);
        }
    }
}

/// `CLUSTER SHARDS`: one shard per group that has members: `{slots: [start, end], nodes: [...]}`,
/// each node reachable over RESP as `{id, port, ip, endpoint, role, replication-offset,
/// health}` (a learner's health is `loading`: it is catching up).
pub(crate) fn shards(out: &mut BytesMut, protocol: Protocol, view: &ClusterView) {
    let groups: Vec<usize> = (0..view.groups.len()).filter(|&group| !members(view, group).is_empty()).collect();
    reply::array(out, groups.len());
    for group in groups {
        let seen = &view.groups[group];
        let range = slot_range(group, view.groups.len());
        let reachable: Vec<(Member<'_>, (String, u16))> = members(view, group)
            .into_iter()
            .filter_map(|member| {
                let endpoint = member.endpoint(group)?;
                Some((member, endpoint))
            })
            .collect();
        reply::map(out, 2, protocol);
        reply::bulk(out, b"slots");
        reply::array(out, 2);
        reply::integer(out, i64::from(range.start));
        reply::integer(out, i64::from(range.end - 1));
        reply::bulk(out, b"nodes");
        reply::array(out, reachable.len());
        for (member, (host, port)) in reachable {
            reply::map(out, 7, protocol);
            reply::bulk(out, b"id");
            reply::bulk(out, node_id(member.node_id, group).as_bytes());
            reply::bulk(out, b"port");
            reply::integer(out, i64::from(port));
            for field in ["ip", "endpoint"] {
                reply::bulk(out, field.as_bytes());
                reply::bulk(out, host.as_bytes());
            }
            let (role, health) = match member.role {
                Role::Leader => ("master", "online"),
                Role::Follower => ("replica", "online"),
                Role::Learner => ("replica", "loading"),
            };
            reply::bulk(out, b"role");
            reply::bulk(out, role.as_bytes());
            reply::bulk(out, b"replication-offset");
            reply::integer(out, i64::try_from(log_reach(view, seen, member.node_id)).unwrap_or(i64::MAX));
            reply::bulk(out, b"health");
            reply::bulk(out, health.as_bytes());
        }
    }
}

/// `CLUSTER NODES`: a line per member of each group, `\n`-terminated: `id host:port@busport
/// flags master-id 0 0 epoch connected [slots]`. The flags say `myself` for this listener's own
/// (node, group), `master` for a leader (whose line ends with its slot range), `slave` for the
/// other members, whose master id is their leader's (`-` while it is unknown); `noaddr` (and
/// `:0@0`) for a node that serves no RESP. The epoch is the group's Raft term. A listener whose
/// node is not a member of its own group (a node not yet in a cluster) lists itself as a master
/// without slots, on `own_port`.
pub(crate) fn nodes(view: &ClusterView, own_group: usize, own_port: u16) -> String {
    let mut text = String::new();
    let mut listed_myself = false;
    for (group, seen) in view.groups.iter().enumerate() {
        let range = slot_range(group, view.groups.len());
        let master = seen.leader.map_or_else(|| "-".to_owned(), |leader| node_id(leader, group));
        for member in members(view, group) {
            let myself = member.node_id == view.node_id && group == own_group;
            listed_myself |= myself;
            let mut flags = if myself { "myself," } else { "" }.to_owned();
            flags.push_str(if member.role == Role::Leader { "master" } else { "slave" });
            let address = match (member.endpoint(group), member.node) {
                (Some((host, port)), Some(node)) => format!("{host}:{port}@{}", bus_port(node, group)),
                _ => {
                    flags.push_str(",noaddr");
                    ":0@0".to_owned()
                }
            };
            let (master, slots) = match member.role {
                Role::Leader => ("-", format!(" {}-{}", range.start, range.end - 1)),
                _ => (master.as_str(), String::new()),
            };
            let id = node_id(member.node_id, group);
            let _ = writeln!(text, "{id} {address} {flags} {master} 0 0 {} connected{slots}", seen.term);
        }
    }
    if !listed_myself {
        let id = node_id(view.node_id, own_group);
        let _ = writeln!(text, "{id} :{own_port}@0 myself,master - 0 0 0 connected");
    }
    text
}

/// `CLUSTER INFO`: Redis's fields. A group's slots are assigned once it has members, and ok while
/// its leader is known and serves RESP; the state is `ok` when every slot is. Each (node, group)
/// pair is a node; `cluster_size` counts the groups whose slots are served (Redis's masters with
/// slots); the epochs are Raft terms.
pub(crate) fn info(view: &ClusterView, own_group: usize) -> String {
    let served = served_groups(view);
    let ok: usize = served.iter().map(|group| group.slots.len()).sum();
    let assigned: usize = (0..view.groups.len())
        .filter(|&group| !members(view, group).is_empty())
        .map(|group| slot_range(group, view.groups.len()).len())
        .sum();
    let own_member = view.groups.get(own_group).is_some_and(|seen| is_member(seen, view.node_id));
    let known_nodes: usize =
        (0..view.groups.len()).map(|group| members(view, group).len()).sum::<usize>() + usize::from(!own_member);
    let state = if ok == usize::from(SLOTS) { "ok" } else { "fail" };
    let current_epoch = view.groups.iter().map(|seen| seen.term).max().unwrap_or(0);
    let my_epoch = view.groups.get(own_group).map_or(0, |seen| seen.term);
    format!(
        "cluster_state:{state}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{ok}\r\n\
         cluster_slots_pfail:0\r\ncluster_slots_fail:{}\r\ncluster_known_nodes:{known_nodes}\r\n\
         cluster_size:{}\r\ncluster_current_epoch:{current_epoch}\r\ncluster_my_epoch:{my_epoch}\r\n\
         cluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\n\
         total_cluster_links_buffer_limit_exceeded:0\r\n",
        assigned - ok,
        served.len(),
    )
}

/// `INFO replication`'s fields for this node's replica of `group`: a leader lists its other
/// members as connected replicas (with the log index each holds as its offset); a follower names
/// its leader's RESP address as its master. Offsets are Raft log indexes.
pub(crate) fn replication(view: &ClusterView, group: usize) -> String {
    let Some(seen) = view.groups.get(group) else { return "role:master\r\nconnected_slaves:0\r\n".to_owned() };
    let mut text = String::new();
    if is_master(view, group) {
        let replicas: Vec<Member<'_>> =
            members(view, group).into_iter().filter(|member| member.node_id != view.node_id).collect();
        let _ = write!(text, "role:master\r\nconnected_slaves:{}\r\n", replicas.len());
        for (i, member) in replicas.iter().enumerate() {
            let (host, port) = member.endpoint(group).unwrap_or_default();
            let state = if member.role == Role::Learner { "wait_bgsave" } else { "online" };
            let offset = log_reach(view, seen, member.node_id);
            let _ = write!(text, "slave{i}:ip={host},port={port},state={state},offset={offset},lag=0\r\n");
        }
    } else {
        let leader = view.leader_of(group).and_then(|leader| endpoint(leader, group));
        let link = if leader.is_some() { "up" } else { "down" };
        let (host, port) = leader.unwrap_or_default();
        let _ = write!(
            text,
            "role:slave\r\nmaster_host:{host}\r\nmaster_port:{port}\r\nmaster_link_status:{link}\r\n\
             slave_repl_offset:{}\r\nslave_read_only:1\r\nconnected_slaves:0\r\n",
            seen.last_log
        );
    }
    let _ = write!(text, "master_repl_offset:{}\r\n", seen.last_log);
    text
}
