//! `ferrite cluster` against a real server not in cluster mode, and its command line: usage
//! errors exit with status 2 before anything connects; each command that changes a cluster
//! refuses a single server with a sentence that says how to start a node; `cluster status`
//! shows a single server as node 0 leading every group.
//!
//! As for `cli.rs`, build the server first (`cargo build -p ferrite-server`).

#[path = "../../ferrite-server/tests/common/mod.rs"]
mod common;
mod ferrite_process;

use std::process::Output;

use common::TestServer;
use ferrite_process::{command, fails, ferrite_offline, ok, run, server_binary, text, CLI_TIMEOUT};
use serde_json::Value;

const NOT_IN_CLUSTER_MODE: &str = "is not in cluster mode (start it with --node-id)";

fn ferrite(server: &TestServer, args: &[&str]) -> Output {
    run(command(&server.addr_string(), args), b"", CLI_TIMEOUT)
}

/// Proves what the command line refuses, each with status 2 and an `error:` line: `init`
/// without a node, a node id of 0 or not a number, `transfer-leader` without
/// `--to`, `add-node` without its address, `local` without its options, with a node count out
/// of 1 to 9, no shard, or with `--json`. No server runs: nothing connects or starts.
#[test]
fn cluster_usage_errors_exit_with_status_2() {
    for args in [
        &["cluster", "init"][..],
        &["cluster", "remove-node", "0"],
        &["cluster", "remove-node", "two"],
        &["cluster", "transfer-leader", "--group", "1"],
        &["cluster", "transfer-leader", "--to", "0"],
        &["cluster", "transfer-leader", "--group", "-1", "--to", "2"],
        &["cluster", "add-node"],
        &["cluster", "local"],
        &["cluster", "local", "--nodes", "0", "--data-dir", "d"],
        &["cluster", "local", "--nodes", "10", "--data-dir", "d"],
        &["cluster", "local", "--nodes", "3"],
        &["cluster", "local", "--nodes", "3", "--data-dir", "d", "--shards", "0"],
        &["--json", "cluster", "local", "--nodes", "3", "--data-dir", "d"],
    ] {
        let output = ferrite_offline(args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    }
    let zero = text(&ferrite_offline(&["cluster", "remove-node", "0"]).stderr);
    assert!(zero.contains("node ids are whole numbers from 1"), "{zero}");
}

/// Proves each command that changes a cluster, pointed at a server not in cluster mode, fails
/// with status 1 and a sentence naming the server and how to start a cluster node.
#[test]
fn a_single_server_is_told_to_start_in_cluster_mode() {
    let server = TestServer::builder_for(server_binary()).shards(2).start();
    let address = server.addr_string();
    for args in [
        &["cluster", "init", "--node", &address][..],
        &["cluster", "add-node", &address],
        &["cluster", "remove-node", "2"],
        &["cluster", "transfer-leader", "--to", "2"],
        &["cluster", "transfer-leader", "--group", "1", "--to", "2"],
    ] {
        let stderr = fails(&ferrite(&server, args));
        assert!(stderr.contains(&format!("{address} {NOT_IN_CLUSTER_MODE}")), "{args:?}: {stderr}");
    }
}

/// Proves `cluster status` shows a single server as node 0 leading each of its groups, in text
/// (a sentence, then one row per group) and as JSON.
#[test]
fn cluster_status_shows_a_single_server_leading_every_group() {
    let server = TestServer::builder_for(server_binary()).shards(2).start();
    let shown = ok(&ferrite(&server, &["cluster", "status"]));
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(
        lines[0],
        format!("not in cluster mode: the server at {} is node 0, alone, leading all 2 groups", server.addr_string())
    );
    assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["GROUP", "NODE", "ROLE", "LEADER"]);
    assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["0", "0", "leader", "0"]);
    assert_eq!(lines[3].split_whitespace().collect::<Vec<_>>(), ["1", "0", "leader", "0"]);
    assert_eq!(lines.len(), 4, "{shown}");

    let json: Value = serde_json::from_str(&ok(&ferrite(&server, &["--json", "cluster", "status"]))).expect("JSON");
    assert_eq!(json["single_server"], true);
    assert_eq!(json["nodes"][0]["node_id"], 0);
    assert_eq!(json["groups"].as_array().map(Vec::len), Some(2));
    assert_eq!(json["groups"][1]["replicas"][0]["role"], "leader");
}

/// A node in cluster mode that no `cluster init` reached yet, on a free peer port (a node's peer
/// port is fixed: group g listens on it + g).
fn uninitialized_node() -> TestServer {
    let free = (20_000..32_000)
        .step_by(97)
        .find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())
        .expect("a free port on loopback");
    TestServer::builder_for(server_binary())
        .args(&["--node-id", "1", "--peer-listen", &format!("127.0.0.1:{free}")])
        .start()
}

/// Proves `ferrite stats` answers on a node that is in no cluster yet (its groups have no
/// leader, so its pools cannot be listed): the node's counters, and a line saying why the pools
/// are missing. Containers' health checks run it on nodes waiting for `cluster init`.
#[test]
fn stats_answer_on_a_node_waiting_for_its_cluster() {
    let node = uninitialized_node();
    let shown = ok(&ferrite(&node, &["stats"]));
    assert!(shown.starts_with("COUNTER"), "{shown}");
    assert!(shown.contains("pools: not listed: not_leader: no leader of group 0 is known"), "{shown}");
    let json: Value = serde_json::from_str(&ok(&ferrite(&node, &["--json", "stats"]))).expect("JSON");
    assert_eq!(json["pools"], Value::Null, "{json}");
    assert!(json["pools_not_listed"].as_str().is_some_and(|why| why.contains("not_leader")), "{json}");
}

/// Proves `cluster status` on a node in no cluster yet says so and how to form or join one,
/// instead of an empty table.
#[test]
fn cluster_status_on_a_node_of_no_cluster_says_how_to_form_one() {
    let node = uninitialized_node();
    let shown = ok(&ferrite(&node, &["cluster", "status"]));
    assert!(shown.starts_with("node 1 at "), "{shown}");
    assert!(shown.contains("belongs to no cluster yet"), "{shown}");
    assert!(shown.contains("cluster init") && shown.contains("cluster add-node"), "{shown}");
    let json: Value = serde_json::from_str(&ok(&ferrite(&node, &["--json", "cluster", "status"]))).expect("JSON");
    assert_eq!(json["cluster_id"], "", "{json}");
    assert_eq!(json["node_id"], 1, "{json}");
    assert_eq!(json["groups"].as_array().map(Vec::len), Some(0), "{json}");
}
