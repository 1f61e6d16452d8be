//! `ferrite cluster`: forming a cluster and looking after it with each group's administration
//! requests (`docs/cli.md`, "Clusters"). A cluster has one group per shard index, so every
//! command works group by group; progress goes to standard error as each group is done.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

use ferrite_client::{blocking, ClientOptions, ClusterMap, ClusterNode, ClusterStatus, RaftRole};
use serde_json::{json, Value};

use crate::args::{Cli, ClusterCommand};
use crate::commands::{connect, CliError, Result};
use crate::output::{Report, Table};

pub fn run(cli: &Cli, command: &ClusterCommand, options: &ClientOptions) -> Result<Report> {
    let nodes = Nodes::new(options, cli.json || !std::io::stderr().is_terminal());
    match command {
        ClusterCommand::Init { nodes: addresses } => init(&nodes, addresses),
        ClusterCommand::AddNode { node } => add_node(&nodes, &cli.addr, node),
        ClusterCommand::RemoveNode { node_id } => remove_node(&nodes, &cli.addr, *node_id),
        ClusterCommand::TransferLeader { group, to } => transfer_leader(&nodes, &cli.addr, *group, *to),
        ClusterCommand::Status => status(&nodes, &cli.addr),
        ClusterCommand::Local(_) => unreachable!("main runs `cluster local` itself: it starts the servers"),
    }
}

/// How the command reaches nodes, and whether it tells its progress.
#[derive(Debug)]
pub struct Nodes<'o> {
    options: &'o ClientOptions,
    /// Standard error stays quiet but for errors with --json, and where it is no terminal: there
    /// it is most often read apart from standard output (a log, a capture), where a progress
    /// line, which standard output's report repeats, would only come out of order.
    quiet: bool,
}

impl<'o> Nodes<'o> {
    pub fn new(options: &'o ClientOptions, quiet: bool) -> Nodes<'o> {
        Nodes { options, quiet }
    }

    fn connect(&self, address: &str) -> Result<blocking::Session> {
        connect(address, self.options.clone())
    }

    /// The cluster the node at `address` belongs to, and a session with it; refused for a
    /// server not in cluster mode.
    fn cluster(&self, address: &str) -> Result<(blocking::Session, ClusterMap)> {
        let session = self.connect(address)?;
        let map = session.cluster_map()?;
        if map.is_single_server() {
            return Err(not_in_cluster_mode(address));
        }
        Ok((session, map))
    }

    fn progress(&self, line: &str) {
        if !self.quiet {
            eprintln!("{line}");
        }
    }
}

fn not_in_cluster_mode(address: &str) -> CliError {
    CliError(format!("the server at {address} is not in cluster mode (start it with --node-id)"))
}

/// Runs `step` for a group, naming the group in its error.
fn in_group<T>(group: u16, step: impl FnOnce() -> ferrite_client::Result<T>) -> Result<T> {
    step().map_err(|error| CliError(format!("group {group}: {error}")))
}

/// `cluster init`: asks each node who it is, then makes them every group's first voters. Nodes
/// that are all members of one cluster already are sent the same init again, which each group
/// accepts if it has exactly these voters (so an interrupted init is finished, and a repeated
/// one changes nothing) and refuses otherwise.
pub fn init(nodes: &Nodes<'_>, addresses: &[String]) -> Result<Report> {
    let mut members: Vec<ClusterNode> = Vec::with_capacity(addresses.len());
    let mut clusters: Vec<String> = Vec::with_capacity(addresses.len());
    let mut sessions: Vec<blocking::Session> = Vec::with_capacity(addresses.len());
    for address in addresses {
        let session = nodes.connect(address)?;
        let info = session.node_info()?;
        if info.node.node_id == 0 {
            return Err(not_in_cluster_mode(address));
        }
        if let Some(twin) = members.iter().position(|member| member.node_id == info.node.node_id) {
            return Err(CliError(format!(
                "{address} and {} are both node {}: give each node its own --node-id",
                addresses[twin], info.node.node_id
            )));
        }
        if let Some(first) = sessions.first() {
            if first.shard_count() != session.shard_count() {
                return Err(CliError(format!(
                    "{address} runs {} shards and {} runs {}: every node runs the same number",
                    session.shard_count(),
                    addresses[0],
                    first.shard_count()
                )));
            }
        }
        members.push(info.node);
        clusters.push(info.cluster_id);
        sessions.push(session);
    }
    let again = same_cluster_already(addresses, &members, &clusters)?;
    let groups = sessions[0].shard_count();
    for group in 0..groups {
        // Every member is told: a replica votes only once it knows its cluster, and a member
        // that is initialized already (a leader reached it first) confirms the same members.
        for (session, address) in sessions.iter().zip(addresses) {
            in_group(group, || session.cluster_init(group, &members))
                .map_err(|CliError(error)| CliError(format!("{address}: {error}")))?;
        }
        nodes.progress(&format!("group {group}: initialized"));
    }
    let cluster_id = sessions[0].node_info()?.cluster_id;
    let ids: Vec<String> = members.iter().map(|member| member.node_id.to_string()).collect();
    let how = if again { "initialized already" } else { "initialized" };
    Ok(Report::text(
        format!("cluster {cluster_id}: nodes {} voting in all {groups} groups ({how})", ids.join(", ")),
        json!({
            "cluster_id": cluster_id,
            "groups": groups,
            "members": members.iter().map(node_json).collect::<Vec<_>>(),
            "initialized_already": again,
        }),
    ))
}

/// Whether the nodes (their `clusters`, as each said) are members of one cluster already, in
/// which case the init is sent again; refused when only some are, or they are in different
/// clusters: a node joins a cluster with `add-node`.
fn same_cluster_already(addresses: &[String], members: &[ClusterNode], clusters: &[String]) -> Result<bool> {
    let Some(member) = clusters.iter().position(|cluster| !cluster.is_empty()) else { return Ok(false) };
    match clusters.iter().position(|cluster| cluster != &clusters[member]) {
        None => Ok(true),
        Some(other) => {
            let in_other =
                if clusters[other].is_empty() { "in none".to_owned() } else { format!("in {}", clusters[other]) };
            Err(CliError(format!(
                "{} (node {}) is a member of cluster {} already and {} (node {}) is {in_other}: an init names \
                 the nodes of one new cluster (or all of an existing one's, again); add a node to a cluster \
                 with `ferrite cluster add-node`",
                addresses[member], members[member].node_id, clusters[member], addresses[other], members[other].node_id
            )))
        }
    }
}

/// `cluster add-node ADDR`: the node joins every group it is not a voter of yet, group by group.
fn add_node(nodes: &Nodes<'_>, address: &str, new_address: &str) -> Result<Report> {
    let (session, map) = nodes.cluster(address)?;
    let joining = nodes.connect(new_address)?;
    let info = joining.node_info()?;
    let node = info.node;
    if node.node_id == 0 {
        return Err(not_in_cluster_mode(new_address));
    }
    if !info.cluster_id.is_empty() && info.cluster_id != map.cluster_id {
        return Err(CliError(format!(
            "{new_address} (node {}) is a member of cluster {}, not of {}",
            node.node_id, info.cluster_id, map.cluster_id
        )));
    }
    if joining.shard_count() != map.shard_count() {
        return Err(CliError(format!(
            "{new_address} runs {} shards and the cluster {}: every node runs the same number",
            joining.shard_count(),
            map.shard_count()
        )));
    }
    let mut rows = Vec::new();
    for (group, members) in (0..).zip(&map.groups) {
        let outcome = if members.voters.contains(&node.node_id) {
            "a voter already"
        } else {
            nodes.progress(&format!("group {group}: adding node {} (it catches up first) ...", node.node_id));
            in_group(group, || session.cluster_add_node(group, &node))?;
            "added"
        };
        nodes.progress(&format!("group {group}: node {} {outcome}", node.node_id));
        rows.push((group, outcome));
    }
    Ok(group_report(&format!("node {} at {new_address}", node.node_id), &rows))
}

/// `cluster remove-node NODE_ID`: out of every group it is a member of.
fn remove_node(nodes: &Nodes<'_>, address: &str, node_id: u64) -> Result<Report> {
    let (session, map) = nodes.cluster(address)?;
    let member_of: Vec<u16> = (0..)
        .zip(&map.groups)
        .filter(|(_, group)| group.voters.contains(&node_id) || group.learners.contains(&node_id))
        .map(|(group, _)| group)
        .collect();
    if member_of.is_empty() {
        return Err(CliError(format!("node {node_id} is a member of no group of cluster {}", map.cluster_id)));
    }
    let mut rows = Vec::new();
    for group in member_of {
        in_group(group, || session.cluster_remove_node(group, node_id))?;
        nodes.progress(&format!("group {group}: node {node_id} removed"));
        rows.push((group, "removed"));
    }
    Ok(group_report(&format!("node {node_id}"), &rows))
}

/// `cluster transfer-leader`: group G, or every group the node at `address` leads, to `to`.
fn transfer_leader(nodes: &Nodes<'_>, address: &str, group: Option<u16>, to: u64) -> Result<Report> {
    let (session, map) = nodes.cluster(address)?;
    let groups: Vec<u16> = match group {
        Some(group) if group >= map.shard_count() => {
            return Err(CliError(format!(
                "group {group} does not exist: the cluster has groups 0 to {}",
                map.shard_count() - 1
            )))
        }
        Some(group) => vec![group],
        None => {
            let here = session.node_info()?.node.node_id;
            (0..).zip(&map.groups).filter(|(_, members)| members.leader == here).map(|(group, _)| group).collect()
        }
    };
    let mut rows = Vec::new();
    for group in groups {
        let members = &map.groups[usize::from(group)];
        if !members.voters.contains(&to) {
            return Err(CliError(format!("group {group}: node {to} is not one of its voters, so it cannot lead it")));
        }
        let outcome = if members.leader == to {
            "led by it already"
        } else {
            in_group(group, || {
                session.cluster_transfer_leader(group, to).or_else(|error| match leads_by_now(&session, group, to) {
                    true => Ok(()),
                    false => Err(error),
                })
            })?;
            "transferred"
        };
        nodes.progress(&format!("group {group}: {outcome}"));
        rows.push((group, outcome));
    }
    if rows.is_empty() {
        return Ok(Report::text(
            format!("the node at {address} leads no group: nothing to transfer"),
            json!({ "to": to, "groups": [] }),
        ));
    }
    Ok(group_report(&format!("leadership to node {to}"), &rows))
}

/// Whether `to` leads `group` by now, as the cluster's map says within a few seconds: the leader
/// that hands its group over restarts itself, and its answer may not leave before the
/// connection closes.
fn leads_by_now(session: &blocking::Session, group: u16, to: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let map = session.cluster_map();
        if map.is_ok_and(|map| map.groups.get(usize::from(group)).is_some_and(|members| members.leader == to)) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One row per group with what became of it.
fn group_report(subject: &str, rows: &[(u16, &str)]) -> Report {
    let mut table = Table::new(&[("GROUP", true), ("OUTCOME", false)]);
    for (group, outcome) in rows {
        table.row(vec![group.to_string(), (*outcome).to_owned()]);
    }
    let json_rows: Vec<Value> =
        rows.iter().map(|(group, outcome)| json!({ "group": group, "outcome": outcome })).collect();
    Report::text(format!("{subject}:\n{}", table.render()), json!({ "subject": subject, "groups": json_rows }))
}

/// One replica of a group as its node reports it, or why it could not.
type Replica = (u64, std::result::Result<ClusterStatus, String>);

/// `cluster status`: every member node's replica of every group.
fn status(nodes: &Nodes<'_>, address: &str) -> Result<Report> {
    let session = nodes.connect(address)?;
    let map = session.cluster_map()?;
    if map.is_single_server() {
        return Ok(single_server_status(address, &map));
    }
    if map.cluster_id.is_empty() {
        return Ok(no_cluster_status(address, &session));
    }
    let mut sessions: BTreeMap<u64, std::result::Result<blocking::Session, String>> = BTreeMap::new();
    let mut groups: Vec<(u16, Vec<Replica>)> = Vec::new();
    for (group, members) in (0..).zip(&map.groups) {
        let mut ids: Vec<u64> = members.voters.iter().chain(&members.learners).copied().collect();
        ids.sort_unstable();
        let mut replicas = Vec::new();
        for id in ids {
            let session = sessions.entry(id).or_insert_with(|| match map.node(id) {
                Some(node) => nodes.connect(&node.native).map_err(|error| error.to_string()),
                None => Err(format!("node {id} is not in the map")),
            });
            let status = match session {
                Ok(session) => session.cluster_status(group).map_err(|error| error.to_string()),
                Err(error) => Err(error.clone()),
            };
            replicas.push((id, status));
        }
        groups.push((group, replicas));
    }
    Ok(cluster_status_report(&map, &groups))
}

/// The lag of `node_id` behind its group's leader, as the leader's own status says.
fn lag_of(replicas: &[Replica], node_id: u64) -> Option<u64> {
    let leader = replicas.iter().find_map(|(_, status)| status.as_ref().ok().filter(|s| s.role == RaftRole::Leader))?;
    leader.followers.iter().find(|follower| follower.node_id == node_id).map(|follower| follower.lag)
}

fn cluster_status_report(map: &ClusterMap, groups: &[(u16, Vec<Replica>)]) -> Report {
    let mut table = Table::new(&[
        ("GROUP", true),
        ("NODE", true),
        ("ROLE", false),
        ("LEADER", true),
        ("TERM", true),
        ("LAST LOG", true),
        ("COMMITTED", true),
        ("APPLIED", true),
        ("SNAPSHOT", true),
        ("LAG", true),
    ]);
    let mut json_groups = Vec::new();
    for (group, replicas) in groups {
        let mut json_replicas = Vec::new();
        for (node_id, status) in replicas {
            match status {
                Ok(status) => {
                    let lag = (status.role != RaftRole::Leader).then(|| lag_of(replicas, *node_id)).flatten();
                    table.row(vec![
                        group.to_string(),
                        node_id.to_string(),
                        status.role.name().to_owned(),
                        status.leader.to_string(),
                        status.term.to_string(),
                        status.last_log.to_string(),
                        status.committed.to_string(),
                        status.applied.to_string(),
                        status.snapshot.to_string(),
                        lag.map_or_else(|| "-".to_owned(), |lag| lag.to_string()),
                    ]);
                    json_replicas.push(json!({
                        "node_id": node_id, "role": status.role.name(), "leader": status.leader,
                        "term": status.term, "last_log": status.last_log, "committed": status.committed,
                        "applied": status.applied, "snapshot": status.snapshot, "lag": lag,
                    }));
                }
                Err(error) => {
                    let mut row = vec![group.to_string(), node_id.to_string(), "unreachable".to_owned()];
                    row.extend(std::iter::repeat_n("-".to_owned(), 7));
                    table.row(row);
                    json_replicas.push(json!({ "node_id": node_id, "role": "unreachable", "error": error }));
                }
            }
        }
        let members = &map.groups[usize::from(*group)];
        json_groups.push(json!({
            "group": group, "leader": members.leader, "term": members.term, "replicas": json_replicas,
        }));
    }
    let unreachable: Vec<String> = groups
        .iter()
        .flat_map(|(group, replicas)| {
            replicas.iter().filter_map(move |(id, status)| {
                status.as_ref().err().map(|error| format!("group {group}, node {id}: {error}"))
            })
        })
        .collect();
    let mut text = format!(
        "cluster {} (map version {}): {} nodes, {} groups\n{}",
        map.cluster_id,
        map.version,
        map.nodes.len(),
        map.groups.len(),
        table.render()
    );
    for line in &unreachable {
        text.push_str(&format!("unreachable: {line}\n"));
    }
    Report::text(
        text,
        json!({
            "cluster_id": map.cluster_id, "version": map.version, "single_server": false,
            "nodes": map.nodes.iter().map(node_json).collect::<Vec<_>>(), "groups": json_groups,
        }),
    )
}

/// What a server not in cluster mode looks like as a cluster: itself, leading every group.
/// The status of a node in cluster mode that belongs to no cluster yet.
fn no_cluster_status(address: &str, session: &blocking::Session) -> Report {
    let node_id = session.node_info().map_or(0, |info| info.node.node_id);
    Report::text(
        format!(
            "node {node_id} at {address} belongs to no cluster yet: form one with `ferrite cluster init --node ADDR ...`, \
             or add it to one with `ferrite --addr MEMBER cluster add-node {address}`"
        ),
        json!({ "cluster_id": "", "node_id": node_id, "single_server": false, "groups": [] }),
    )
}

fn single_server_status(address: &str, map: &ClusterMap) -> Report {
    let mut table = Table::new(&[("GROUP", true), ("NODE", true), ("ROLE", false), ("LEADER", true)]);
    let mut json_groups = Vec::new();
    for (group, members) in (0..).zip(&map.groups) {
        table.row(vec![group.to_string(), "0".to_owned(), "leader".to_owned(), members.leader.to_string()]);
        json_groups.push(json!({
            "group": group, "leader": members.leader, "term": members.term,
            "replicas": [{ "node_id": 0, "role": "leader" }],
        }));
    }
    let text = format!(
        "not in cluster mode: the server at {address} is node 0, alone, leading all {} groups\n{}",
        map.groups.len(),
        table.render()
    );
    Report::text(
        text,
        json!({
            "cluster_id": "", "version": map.version, "single_server": true,
            "nodes": map.nodes.iter().map(node_json).collect::<Vec<_>>(), "groups": json_groups,
        }),
    )
}

fn node_json(node: &ClusterNode) -> Value {
    json!({ "node_id": node.node_id, "native": node.native, "resp": node.resp, "peer": node.peer })
}

#[cfg(test)]
mod tests {
    use ferrite_client::{ClusterGroup, FollowerProgress};

    use super::*;

    fn status(node_id: u64, role: RaftRole, followers: Vec<FollowerProgress>) -> ClusterStatus {
        ClusterStatus {
            node_id,
            role,
            leader: 1,
            term: 4,
            last_log: 100,
            committed: 98,
            applied: 97,
            snapshot: 64,
            followers,
        }
    }

    /// Proves the status table gives each follower the lag its group's leader reports, none to
    /// the leader, and marks a node that did not answer as unreachable, naming why below.
    #[test]
    fn status_rows_carry_each_followers_lag_from_the_leader() {
        let node =
            |node_id| ClusterNode { node_id, native: format!("10.0.0.{node_id}:7100"), ..ClusterNode::default() };
        let group = ClusterGroup { leader: 1, term: 4, voters: vec![1, 2, 3], learners: Vec::new() };
        let map = ClusterMap {
            version: 9,
            cluster_id: "c".to_owned(),
            nodes: vec![node(1), node(2), node(3)],
            groups: vec![group],
        };
        let leader = status(1, RaftRole::Leader, vec![FollowerProgress { node_id: 2, matched: 60, lag: 40 }]);
        let replicas = vec![
            (1, Ok(leader)),
            (2, Ok(status(2, RaftRole::Follower, Vec::new()))),
            (3, Err("connecting to 10.0.0.3:7100: refused".to_owned())),
        ];
        let report = cluster_status_report(&map, &[(0, replicas)]);
        let crate::output::Human::Text(text) = &report.human else { panic!("a text report") };
        let rows: Vec<Vec<&str>> = text.lines().map(|line| line.split_whitespace().collect()).collect();
        assert_eq!(text.lines().next(), Some("cluster c (map version 9): 3 nodes, 1 groups"));
        assert_eq!(rows[2], ["0", "1", "leader", "1", "4", "100", "98", "97", "64", "-"]);
        assert_eq!(rows[3], ["0", "2", "follower", "1", "4", "100", "98", "97", "64", "40"]);
        assert_eq!(rows[4][..3], ["0", "3", "unreachable"]);
        assert!(text.ends_with("unreachable: group 0, node 3: connecting to 10.0.0.3:7100: refused\n"), "{text}");
        assert_eq!(report.json["groups"][0]["replicas"][1]["lag"], 40);
        assert_eq!(report.json["groups"][0]["replicas"][0]["lag"], Value::Null);
    }
}
