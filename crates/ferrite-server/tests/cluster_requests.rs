//! Cluster requests on a server not in cluster mode: it answers `node_info` and `cluster_map` as
//! a cluster of one node (id 0) leading every group, so clients treat both modes alike, and
//! refuses the administration of groups with a sentence saying how to start a cluster node.
//! Who may ask: anyone after hello for the first two, `admin` on every pool for the rest.

mod common;
mod wire;

use std::path::PathBuf;

use common::{fresh_dir, TestServer};
use ferrite_auth::{secret, PoolPattern, Rights, UsersFile};
use ferrite_client::blocking::Session;
use ferrite_client::{ClientOptions, ClusterNode, ErrorCode, UserCredentials};
use ferrite_proto::{ClusterAdmin, Request, Response};
use wire::{frame, RawClient};

const NODE_INFO: u16 = 0x0060;
const NOT_IN_CLUSTER_MODE: &str = "this server is not in cluster mode (start it with --node-id)";

/// Every administration request, for group `group`.
fn administration(group: u16) -> Vec<ClusterAdmin> {
    let node = ClusterNode {
        node_id: 2,
        peer: "127.0.0.1:7300".to_owned(),
        native: "127.0.0.1:7100".to_owned(),
        resp: String::new(),
    };
    vec![
        ClusterAdmin::Init { group, members: vec![node.clone()] },
        ClusterAdmin::AddNode { group, node },
        ClusterAdmin::RemoveNode { group, node_id: 2 },
        ClusterAdmin::TransferLeader { group, to: 2 },
        ClusterAdmin::Status { group },
    ]
}

/// Proves a single server answers `node_info` (written by hand) as node 0 at its shard 0
/// address with no cluster id, and `cluster_map`, on any shard, as that node leading every
/// group at version 0.
#[test]
fn a_single_server_answers_as_a_cluster_of_one_node() {
    let server = TestServer::builder().shards(2).start();
    let mut raw = RawClient::connect(server.addr(1));
    let announced = raw.hello();
    raw.send_bytes(&frame(NODE_INFO, 0, 7, &[]));
    let reply = raw.read_frame();
    assert_eq!(reply.header.opcode, 0x8060);
    let Response::NodeInfo(info) = reply.expect_ok(7) else { panic!("a node_info answer: {reply:?}") };
    assert_eq!(info.node.node_id, 0);
    assert_eq!(info.node.native, announced.shard_addresses[0]);
    assert_eq!((info.node.peer.as_str(), info.node.resp.as_str(), info.cluster_id.as_str()), ("", "", ""));

    let reply = raw.call(8, &Request::ClusterMap);
    let Response::ClusterMap(map) = reply.expect_ok(8) else { panic!("a cluster_map answer: {reply:?}") };
    assert!(map.is_single_server(), "{map:?}");
    assert_eq!((map.version, map.cluster_id.as_str()), (0, ""));
    assert_eq!(map.nodes[0].native, announced.shard_addresses[0]);
    assert_eq!(map.groups.len(), 2);
    assert!(map.groups.iter().all(|group| group.leader == 0 && group.voters == [0]), "{map:?}");
}

/// Proves every administration request, sent raw or through the client, is refused with
/// `invalid_argument` and the sentence that says how to start a cluster node, and that the
/// connection goes on serving.
#[test]
fn administration_needs_cluster_mode() {
    let server = TestServer::builder().shards(2).start();
    let mut raw = RawClient::handshaken(server.addr(1));
    for (id, admin) in (10..).zip(administration(1)) {
        let message = raw.call(id, &Request::ClusterAdmin(admin)).expect_error(id, ErrorCode::InvalidArgument);
        assert_eq!(message, NOT_IN_CLUSTER_MODE);
    }
    assert!(matches!(raw.call(20, &Request::NodeInfo).expect_ok(20), Response::NodeInfo(_)));

    let session = Session::connect(&server.addr_string()).expect("connect");
    assert!(!session.is_cluster());
    assert!(session.cluster_map().expect("cluster map").is_single_server());
    assert_eq!(session.node_info().expect("node info").node.node_id, 0);
    let error = session.cluster_status(1).expect_err("not a cluster");
    assert_eq!(
        (error.code(), error.to_string()),
        (Some(ErrorCode::InvalidArgument), format!("invalid_argument: {NOT_IN_CLUSTER_MODE}"))
    );
    let error = session.cluster_transfer_leader(0, 2).expect_err("not a cluster");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument));
    let error = session.cluster_status(2).expect_err("no such group");
    assert!(error.to_string().contains("group 2 does not exist"), "{error}");
}

/// Proves `node_info` and `cluster_map` need a hello but no right, and the administration
/// `admin` on every pool: a user who administers only its own pools is refused with
/// `permission_denied` before anything else is looked at.
#[test]
fn administration_needs_admin_on_every_pool() {
    const PASSWORD: &str = "correct horse battery";
    let path: PathBuf = fresh_dir("cluster-users").join("users.toml");
    let mut users = UsersFile::default();
    for (name, pools) in [("root", "*"), ("alice", "alice*")] {
        users.add(name, Some(secret::hash_secret(PASSWORD.as_bytes()).expect("hash")), None).expect("add");
        let pattern = PoolPattern::new(pools).expect("pattern");
        users.grant(name, pattern, Rights::parse_list("all").expect("rights")).expect("grant");
    }
    users.save(&path).expect("save the users file");
    let server = TestServer::builder().arg("--users").arg(path.display().to_string()).start();

    let mut raw = RawClient::connect(server.addr(0));
    raw.send_bytes(&frame(NODE_INFO, 0, 3, &[]));
    raw.read_frame().expect_error(3, ErrorCode::HandshakeRequired);

    let connect = |user: &str| {
        let credentials = Some(UserCredentials::new(user, PASSWORD));
        Session::connect_with(&server.addr_string(), ClientOptions { credentials, ..ClientOptions::default() })
            .unwrap_or_else(|error| panic!("{user} connects (which asks for the map): {error}"))
    };
    let alice = connect("alice");
    assert_eq!(alice.node_info().expect("node info").node.node_id, 0);
    assert!(alice.cluster_map().expect("cluster map").is_single_server());
    let refused = alice.cluster_status(0).expect_err("alice administers only alice*");
    assert_eq!(refused.code(), Some(ErrorCode::PermissionDenied), "{refused}");
    assert!(refused.to_string().contains("admin right on pool '*'"), "{refused}");

    let error = connect("root").cluster_status(0).expect_err("not a cluster");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
}
