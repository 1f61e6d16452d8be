//! How a session follows its group's leader in a cluster, against fake cluster nodes
//! (`fake_server.rs`): each serves the one shard of a cluster with one group, answers
//! `cluster_map` with the map a test gives it and pool requests as the test scripts them.

use ferrite_proto::{ErrorCode, NotLeader};

use crate::fake_server::{cluster_map, serve_memory_shard, FakeNode, FakeShard, NodeAnswer};
use crate::{Error, Session, REDIRECTS_MAX};

/// Nodes 1 (`a`) and 2 (`b`), both answering a map in which `leader` leads at `version`.
async fn two_nodes(version: u64, leader: u64) -> (FakeNode, FakeNode) {
    let (a, b) = (FakeNode::start().await, FakeNode::start().await);
    let map = cluster_map(version, vec![a.as_member(1), b.as_member(2)], leader);
    a.state().map = map.clone();
    b.state().map = map;
    (a, b)
}

/// The refusal of a node that knows `leader` leads at `at`, its map at `map_version`.
fn refusal(leader: u64, at: &str, map_version: u64) -> NotLeader {
    NotLeader {
        group: 0,
        leader,
        leader_native: at.to_owned(),
        map_version,
        message: format!("node {leader} leads group 0"),
    }
}

/// Proves a session on a single server keeps no routes: its map is one node, id 0, leading
/// every group, and pool requests stay on their shard's connection (the fake shard serves them).
#[tokio::test]
async fn a_single_server_is_no_cluster() {
    let shard = FakeShard::bind().await;
    let address = shard.address();
    let addresses = vec![address.clone()];
    let server = tokio::spawn(async move { serve_memory_shard(shard.accept().await, 0, &addresses).await });

    let session = Session::connect(&address).await.expect("connect");
    assert!(!session.is_cluster());
    let map = session.cluster_map().await.expect("cluster map");
    assert!(map.is_single_server(), "{map:?}");
    assert_eq!((map.nodes[0].native.as_str(), map.groups.len()), (address.as_str(), 1));
    let pool = session.create_pool("p", crate::PoolOptions::default()).await.expect("create");
    pool.put("k", "v").await.expect("put");
    pool.close().await.expect("close");
    drop(session);
    assert_eq!(server.await.expect("fake shard"), ["create_pool p", "close_pool 1"]);
}

/// Proves a request refused with `not_leader` goes to the leader the refusal names: the session
/// fetches the newer map of the node that refused, reopens the pool on the leader and sends the
/// put there, and the pool's later requests go there directly.
#[tokio::test]
async fn a_refused_request_follows_the_leader_and_its_pool_reopens_there() {
    let (a, b) = two_nodes(1, 1).await;
    let session = Session::connect(&a.address).await.expect("connect");
    assert!(session.is_cluster());
    let pool = session.open_pool("p").await.expect("open on the leader the map names");

    let moved = cluster_map(2, vec![a.as_member(1), b.as_member(2)], 2);
    a.state().answers.push_back(NodeAnswer::Refuse { refusal: refusal(2, &b.address, 2), then_map: Some(moved) });
    pool.put("k", "v").await.expect("the put reaches the new leader");
    assert_eq!(pool.get("k").await.expect("get"), b"v");

    assert_eq!(b.state().log[..3], ["open_pool p", "put k", "get k"]);
    assert_eq!((a.received("put"), a.received("get")), (1, 0), "{:?}", a.state().log);
    assert_eq!(a.received("cluster_map"), 2, "fetched at connect, and again for the newer version");
    let map = session.cluster_map().await.expect("cluster map");
    assert_eq!((map.version, map.groups[0].leader), (2, 2));
}

/// Proves requests refused together follow the leader together and end on one open of the pool
/// there: each put lands on the new leader, and the pool's later requests use the open it kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_refused_together_end_on_one_open_of_the_pool() {
    let (a, b) = two_nodes(1, 1).await;
    let session = Session::connect(&a.address).await.expect("connect");
    let pool = session.open_pool("p").await.expect("open");
    for _ in 0..8 {
        a.state().answers.push_back(NodeAnswer::Refuse { refusal: refusal(2, &b.address, 1), then_map: None });
    }
    let mut puts = tokio::task::JoinSet::new();
    for i in 0..8 {
        let pool = pool.clone();
        puts.spawn(async move { pool.put(format!("k{i}"), "v").await });
    }
    while let Some(put) = puts.join_next().await {
        put.expect("task").expect("every put reaches the leader");
    }
    assert_eq!(b.received("put"), 8, "{:?}", b.state().log);
    assert_eq!(pool.get("k7").await.expect("get"), b"v");
    assert!(b.state().open.contains(&pool.handle().0), "the pool's open is one b keeps");
}

/// Proves redirects are bounded: two nodes that each name the other as leader see the request
/// once plus five redirects, and the caller gets the last `not_leader`.
#[tokio::test]
async fn redirects_are_bounded() {
    let (a, b) = two_nodes(1, 1).await;
    for _ in 0..REDIRECTS_MAX + 1 {
        a.state().answers.push_back(NodeAnswer::Refuse { refusal: refusal(2, &b.address, 1), then_map: None });
        b.state().answers.push_back(NodeAnswer::Refuse { refusal: refusal(1, &a.address, 1), then_map: None });
    }
    let session = Session::connect(&a.address).await.expect("connect");
    let error = session.open_pool("p").await.expect_err("the leader keeps moving");
    assert!(error.is_not_leader(), "{error}");
    assert_eq!(error.code(), Some(ErrorCode::NotLeader));
    assert_eq!(a.received("open_pool") + b.received("open_pool"), 1 + REDIRECTS_MAX);
}

/// Proves a refusal that knows no leader (an election is running) makes the session wait, then
/// ask for the map again, and go to the leader it names.
#[tokio::test]
async fn an_unknown_leader_is_waited_for_then_found_in_a_new_map() {
    let (a, b) = two_nodes(1, 1).await;
    let elected = cluster_map(2, vec![a.as_member(1), b.as_member(2)], 2);
    a.state().answers.push_back(NodeAnswer::Refuse { refusal: refusal(0, "", 1), then_map: Some(elected) });
    let session = Session::connect(&a.address).await.expect("connect");
    session.open_pool("p").await.expect("opened on the leader elected meanwhile");
    assert_eq!(a.state().log, ["cluster_map", "open_pool p", "cluster_map"]);
    assert_eq!(b.state().log, ["open_pool p"]);
}

/// Proves a refusal sent as a plain `error` frame with code 28 (a server path that knows only
/// error frames) is followed like one that knows no leader: the session waits, asks for the map
/// again, and goes to the leader it names.
#[tokio::test]
async fn a_plain_not_leader_error_is_followed_through_a_new_map() {
    let (a, b) = two_nodes(1, 1).await;
    let elected = cluster_map(2, vec![a.as_member(1), b.as_member(2)], 2);
    a.state().answers.push_back(NodeAnswer::RefusePlainly { then_map: elected });
    let session = Session::connect(&a.address).await.expect("connect");
    session.open_pool("p").await.expect("opened on the leader the new map names");
    assert_eq!(b.state().log, ["open_pool p"]);
}

/// Proves a put whose connection broke while it was in flight is reported, never sent again
/// (it may have been applied), and that the session asks another node for the map; the pool's
/// next request reopens it on the leader that map names.
#[tokio::test]
async fn a_write_in_flight_when_its_connection_breaks_is_not_resent() {
    let (a, b) = two_nodes(1, 1).await;
    let session = Session::connect(&a.address).await.expect("connect");
    let pool = session.open_pool("p").await.expect("open");
    b.state().map = cluster_map(2, vec![a.as_member(1), b.as_member(2)], 2);
    a.state().answers.push_back(NodeAnswer::Vanish);

    let error = pool.put("k", "v").await.expect_err("the put's connection broke");
    assert!(matches!(error, Error::ConnectionClosed(_)), "{error}");
    assert_eq!(a.received("put") + b.received("put"), 1, "sent once, to a");
    assert_eq!(b.received("cluster_map"), 1, "the map was asked of the node still up");

    let error = pool.get("k").await.expect_err("b never had the put");
    assert!(error.is_key_not_found(), "{error}");
    assert_eq!(b.state().log, ["cluster_map", "open_pool p", "get k"]);
}

/// Proves a read whose connection broke while it was in flight is sent once more, to the leader
/// of the map another node gives, and only once.
#[tokio::test]
async fn a_read_in_flight_when_its_connection_breaks_is_sent_once_more() {
    let (a, b) = two_nodes(1, 1).await;
    let session = Session::connect(&a.address).await.expect("connect");
    let pool = session.open_pool("p").await.expect("open");
    b.state().map = cluster_map(2, vec![a.as_member(1), b.as_member(2)], 2);
    b.state().pairs.insert(b"k".to_vec(), b"from b".to_vec());
    a.state().answers.push_back(NodeAnswer::Vanish);

    assert_eq!(pool.get("k").await.expect("resent to b"), b"from b");
    assert_eq!(b.state().log, ["cluster_map", "open_pool p", "get k"]);

    // Both break now: the get goes to b, once more to a (whose map names itself), then fails.
    b.state().answers.push_back(NodeAnswer::Vanish);
    a.state().answers.push_back(NodeAnswer::Vanish);
    let error = pool.get("k").await.expect_err("both broke");
    assert!(matches!(error, Error::ConnectionClosed(_)), "{error}");
    assert_eq!((b.received("get"), a.received("open_pool"), a.received("get")), (2, 2, 1));
}
