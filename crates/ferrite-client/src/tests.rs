//! Whole-client tests against the fake shard in `fake_server.rs`: no real server needed.

use bytes::BytesMut;
use ferrite_proto::{shard_for_pool, ErrorCode, Limits, PoolHandle, Request, Response};

use crate::fake_server::{crc32, serve_memory_shard, serve_memory_shard_stalling, FakeShard, FAKE_WRITE_TIME_NS};
use crate::{blocking, Error, InvokeOptions, InvokePutOptions, InvokeResponse, PoolOptions, PutFlags, Session};

/// A pool name that `shard_for_pool` puts on `shard` of `shard_count`.
fn name_on_shard(shard: u16, shard_count: u16) -> String {
    (0..)
        .map(|i| format!("pool-{i}"))
        .find(|name| shard_for_pool(name, shard_count) == shard)
        .expect("some name hashes to every shard")
}

/// Proves the handshake yields the shard list and limits, and that an unspecified host in a
/// shard address is replaced by the host we actually reached.
#[tokio::test]
async fn connect_learns_shards_and_limits_and_resolves_unspecified_hosts() {
    let shard = FakeShard::bind().await;
    let port = shard.port();
    let limits = Limits { key_bytes_max: 100, value_bytes_max: 1000 };
    let server = tokio::spawn(async move {
        let mut peer = shard.accept().await;
        peer.handshake(0, &[format!("0.0.0.0:{port}"), "[::]:9".to_owned(), "10.0.0.5:7".to_owned()], limits).await;
        // Answers the session's request for the cluster map, then waits for it to hang up.
        assert!(peer.next_frame().await.is_none());
    });

    let session = Session::connect(&format!("127.0.0.1:{port}")).await.expect("connect");
    assert_eq!(session.shard_count(), 3);
    assert_eq!(
        session.shard_addresses(),
        [format!("127.0.0.1:{port}"), "127.0.0.1:9".to_owned(), "10.0.0.5:7".to_owned()]
    );
    assert_eq!(session.limits(), limits);
    assert!(!session.is_cluster());
    drop(session);
    server.await.expect("fake server");
}

/// Proves responses are matched to requests by id, not by arrival order.
#[tokio::test]
async fn pipelined_replies_are_matched_by_id_even_out_of_order() {
    let shard = FakeShard::bind().await;
    let address = shard.address();
    let addresses = vec![address.clone()];
    let server = tokio::spawn(async move {
        let mut peer = shard.accept().await;
        peer.handshake(0, &addresses, Limits::MAX).await;
        let open = peer.expect_frame().await;
        assert_eq!(open.request(), Request::OpenPool { name: "p" });
        peer.reply(open.id(), &Response::PoolOpened { pool: PoolHandle(7) }).await;

        let mut gets = Vec::new();
        for _ in 0..3 {
            gets.push(peer.expect_frame().await);
        }
        for frame in gets.iter().rev() {
            let Request::Get { pool: PoolHandle(7), key } = frame.request() else {
                panic!("expected a get on pool 7, got {:?}", frame.request());
            };
            let value = [b"value-of-".as_slice(), key].concat();
            peer.reply(frame.id(), &Response::Value(&value)).await;
        }
        peer
    });

    let session = Session::connect(&address).await.expect("connect");
    let pool = session.open_pool("p").await.expect("open");
    let (a, b, c) = tokio::join!(pool.get("a"), pool.get("b"), pool.get("c"));
    assert_eq!(a.expect("get a"), b"value-of-a");
    assert_eq!(b.expect("get b"), b"value-of-b");
    assert_eq!(c.expect("get c"), b"value-of-c");
    drop(server.await.expect("fake server"));
}

/// Proves one connection carries 10,000 outstanding requests from concurrent tasks: the fake
/// server answers nothing until it holds all of them, then answers in reverse order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_requests_in_flight_on_one_connection() {
    const REQUESTS: usize = 10_000;
    let shard = FakeShard::bind().await;
    let address = shard.address();
    let addresses = vec![address.clone()];
    let server = tokio::spawn(async move {
        let mut peer = shard.accept().await;
        peer.handshake(0, &addresses, Limits::MAX).await;
        let open = peer.expect_frame().await;
        peer.reply(open.id(), &Response::PoolOpened { pool: PoolHandle(1) }).await;

        let mut gets = Vec::with_capacity(REQUESTS);
        while gets.len() < REQUESTS {
            gets.push(peer.expect_frame().await);
        }
        let mut out = BytesMut::new();
        for frame in gets.iter().rev() {
            let Request::Get { key, .. } = frame.request() else { panic!("expected a get") };
            Response::Value(key).encode(frame.id(), &mut out);
        }
        peer.send_raw(&out).await;
        peer
    });

    let session = Session::connect(&address).await.expect("connect");
    let pool = session.open_pool("p").await.expect("open");
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..REQUESTS {
        let pool = pool.clone();
        tasks.spawn(async move {
            let key = format!("key-{i}");
            let value = pool.get(&key).await.expect("get");
            assert_eq!(value, key.as_bytes(), "reply matched to the wrong request");
        });
    }
    let mut done = 0;
    while let Some(result) = tasks.join_next().await {
        result.expect("task");
        done += 1;
    }
    assert_eq!(done, REQUESTS);
    drop(server.await.expect("fake server"));
}

/// Proves requests queued beyond the outgoing buffer's high-water mark wait and then all arrive:
/// the server stops reading after the pool is created, so 32 MiB of puts back up behind full
/// socket buffers before it drains them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_values_beyond_the_outgoing_high_water_mark_all_arrive() {
    const PUTS: usize = 32;
    let shard = FakeShard::bind().await;
    let addresses = vec![shard.address()];
    let address = addresses[0].clone();
    let stall = Some((1, std::time::Duration::from_millis(300)));
    let server =
        tokio::spawn(async move { serve_memory_shard_stalling(shard.accept().await, 0, &addresses, stall).await });

    let session = Session::connect(&address).await.expect("connect");
    let options = PoolOptions { size_bytes: 1 << 30, ..PoolOptions::default() };
    let pool = session.create_pool("big", options).await.expect("create");
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..PUTS {
        let pool = pool.clone();
        tasks.spawn(async move { pool.put(format!("k{i}"), vec![i as u8; 1 << 20]).await.expect("put") });
    }
    while let Some(result) = tasks.join_next().await {
        result.expect("task");
    }
    assert_eq!(pool.count().await.expect("count"), PUTS as u64);
    assert_eq!(pool.get("k7").await.expect("get"), vec![7u8; 1 << 20]);
    drop((pool, session));
    server.await.expect("fake server");
}

/// Proves that when the server drops the connection, every outstanding request fails with
/// `ConnectionClosed`, later requests on the dead connection fail at once, and the session
/// reconnects for its next call.
#[tokio::test]
async fn pending_requests_fail_when_the_server_drops_the_connection() {
    let shard = FakeShard::bind().await;
    let address = shard.address();
    let addresses = vec![address.clone()];
    let server = tokio::spawn(async move {
        let mut peer = shard.accept().await;
        peer.handshake(0, &addresses, Limits::MAX).await;
        let open = peer.expect_frame().await;
        peer.reply(open.id(), &Response::PoolOpened { pool: PoolHandle(1) }).await;
        peer.expect_frame().await;
        peer.expect_frame().await;
        drop(peer);

        let mut peer = shard.accept().await;
        peer.handshake(0, &addresses, Limits::MAX).await;
        let open = peer.expect_frame().await;
        peer.reply(open.id(), &Response::PoolOpened { pool: PoolHandle(2) }).await;
        peer
    });

    let session = Session::connect(&address).await.expect("connect");
    let pool = session.open_pool("p").await.expect("open");
    let (a, b) = tokio::join!(pool.get("a"), pool.get("b"));
    for result in [a, b] {
        let error = result.expect_err("the server vanished");
        assert!(error.is_connection_closed(), "{error}");
        assert!(error.to_string().contains(&address), "names the peer: {error}");
    }
    let later = pool.get("c").await.expect_err("the connection is dead");
    assert!(later.is_connection_closed(), "{later}");

    let reopened = session.open_pool("p").await.expect("the session reconnects");
    assert_eq!(reopened.handle(), PoolHandle(2));
    drop(server.await.expect("fake server"));
}

/// Proves oversized keys and values fail locally, with the code the server would send, against
/// the limits the server announced, and that nothing of them reaches the wire.
#[tokio::test]
async fn oversized_requests_fail_locally_with_the_servers_code() {
    let shard = FakeShard::bind().await;
    let address = shard.address();
    let addresses = vec![address.clone()];
    let server = tokio::spawn(async move {
        let mut peer = shard.accept().await;
        peer.handshake(0, &addresses, Limits { key_bytes_max: 8, value_bytes_max: 16 }).await;
        let open = peer.expect_frame().await;
        peer.reply(open.id(), &Response::PoolOpened { pool: PoolHandle(1) }).await;
        let get = peer.expect_frame().await;
        assert_eq!(get.request(), Request::Get { pool: PoolHandle(1), key: b"12345678" });
        peer.reply(get.id(), &Response::Value(b"fine")).await;
        peer
    });

    let session = Session::connect(&address).await.expect("connect");
    let pool = session.open_pool("p").await.expect("open");
    let too_long_key = pool.put([0u8; 9], b"v").await.expect_err("9-byte key");
    assert_eq!(too_long_key.code(), Some(ErrorCode::KeyTooLarge));
    // A put of a value past the inline limit goes direct (`direct.rs`); an invocation's cannot.
    let too_long_value = pool.invoke_put(b"k", &[0u8; 17], b"", Default::default()).await.expect_err("17-byte value");
    assert_eq!(too_long_value.code(), Some(ErrorCode::ValueTooLarge));
    let bad_name = session.open_pool("").await.expect_err("empty pool name");
    assert_eq!(bad_name.code(), Some(ErrorCode::InvalidArgument));
    assert_eq!(pool.get(b"12345678").await.expect("key at the limit"), b"fine");
    drop(server.await.expect("fake server"));
}

/// Proves a connection refused with an id-0 error frame (`too_many_connections`) fails
/// `connect` with that code rather than a vague "closed".
#[tokio::test]
async fn connection_refused_with_an_error_frame_reports_its_code() {
    let shard = FakeShard::bind().await;
    let address = shard.address();
    let server = tokio::spawn(async move {
        let mut peer = shard.accept().await;
        peer.expect_frame().await;
        peer.reply(0, &Response::Error { code: ErrorCode::TooManyConnections, message: "limit is 1" }).await;
        // Wait for the client to hang up, so our close cannot reset the connection before the
        // client has read the error frame.
        assert!(peer.next_frame().await.is_none());
    });

    let error = Session::connect(&address).await.expect_err("the shard is full");
    assert_eq!(error.code(), Some(ErrorCode::TooManyConnections), "{error}");
    assert_eq!(error.to_string(), "too_many_connections: limit is 1");
    server.await.expect("fake server");
}

/// Proves a reply to a request id we never used ends the connection with a clear cause instead
/// of being silently dropped or delivered to the wrong caller.
#[tokio::test]
async fn reply_to_an_unknown_request_id_ends_the_connection() {
    let shard = FakeShard::bind().await;
    let address = shard.address();
    let addresses = vec![address.clone()];
    let server = tokio::spawn(async move {
        let mut peer = shard.accept().await;
        peer.handshake(0, &addresses, Limits::MAX).await;
        let open = peer.expect_frame().await;
        peer.reply(open.id() + 1000, &Response::PoolOpened { pool: PoolHandle(1) }).await;
        peer
    });

    let session = Session::connect(&address).await.expect("connect");
    let error = session.open_pool("p").await.expect_err("the reply went to an unknown id");
    assert!(error.is_connection_closed(), "{error}");
    assert!(error.to_string().contains("not outstanding"), "{error}");
    drop(server.await.expect("fake server"));
}

/// Proves pool names are routed to the shard that owns them, that the connection made by
/// `connect` is reused for its shard, and that listing and statistics cover every shard.
#[tokio::test]
async fn pools_route_to_their_shard_and_listings_cover_every_shard() {
    let shards = [FakeShard::bind().await, FakeShard::bind().await];
    let addresses: Vec<String> = shards.iter().map(FakeShard::address).collect();
    let [shard0, shard1] = shards;
    let servers = [(0, shard0), (1, shard1)].map(|(index, shard)| {
        let addresses = addresses.clone();
        tokio::spawn(async move { serve_memory_shard(shard.accept().await, index, &addresses).await })
    });

    let name0 = name_on_shard(0, 2);
    let name1 = name_on_shard(1, 2);
    // Connect through shard 1 so shard 0 must be reached through the address list.
    let session = Session::connect(&addresses[1]).await.expect("connect");
    let pool1 = session.create_pool(&name1, PoolOptions::default()).await.expect("create on shard 1");
    let pool0 = session
        .create_pool(&name0, PoolOptions { size_bytes: 4096, ..PoolOptions::default() })
        .await
        .expect("create on shard 0");
    assert!(pool0.created() && pool1.created());
    assert_eq!((pool0.shard(), pool1.shard()), (0, 1));
    pool0.put("k", "v").await.expect("put");

    let mut pools = session.list_pools().await.expect("list");
    pools.sort_by_key(|pool| pool.shard);
    assert_eq!(pools.len(), 2);
    assert_eq!((pools[0].name.as_str(), pools[0].shard, pools[0].objects), (name0.as_str(), 0, 1));
    assert_eq!((pools[0].size_bytes, pools[0].open_count), (4096, 1));
    assert_eq!(pools[0].memory.other_bytes, 2, "the memory figures reach the listing");
    assert_eq!((pools[0].bytes_per_key(), pools[0].table_load()), (Some(4098.0), Some(1.0 / 64.0)));
    assert_eq!((pools[1].bytes_per_key(), pools[1].objects), (None, 0), "an empty pool has no bytes per key");
    assert_eq!((pools[1].name.as_str(), pools[1].shard), (name1.as_str(), 1));
    assert_eq!((pools[1].indexed, pools[1].durability), (false, crate::Durability::Sync), "the settings reach it");
    let described = session.pool_info(&name1).await.expect("describe").expect("the pool exists");
    assert_eq!((described.name, described.shard), (name1.clone(), 1), "asked of its shard alone");
    assert_eq!(session.pool_info("absent").await.expect("describe"), None);

    let stats = session.statistics().await.expect("statistics");
    assert_eq!(stats.iter().map(|s| (s.shard, s.get("shard"))).collect::<Vec<_>>(), [(0, Some(0)), (1, Some(1))]);

    drop((session, pool0, pool1));
    let [log0, log1] = servers;
    let log0 = log0.await.expect("shard 0");
    let log1 = log1.await.expect("shard 1");
    assert!(log0.contains(&format!("create_pool {name0}")) && !log0.contains(&format!("create_pool {name1}")));
    assert!(log1.contains(&format!("create_pool {name1}")) && !log1.contains(&format!("create_pool {name0}")));
    assert!(log1.contains(&format!("list_pools {name1}")) && !log0.contains(&format!("list_pools {name1}")));
}

/// Proves the key-value calls against a server that behaves like the real one, including
/// server errors that leave the connection usable and the close sent when a pool is dropped.
#[tokio::test]
async fn key_value_workflow_and_close_on_drop() {
    let shard = FakeShard::bind().await;
    let addresses = vec![shard.address()];
    let address = addresses[0].clone();
    let server = tokio::spawn(async move { serve_memory_shard(shard.accept().await, 0, &addresses).await });

    let session = Session::connect(&address).await.expect("connect");
    let missing = session.open_pool("demo").await.expect_err("no pool yet");
    assert!(missing.is_pool_not_found(), "{missing}");

    let pool = session.create_pool("demo", PoolOptions::default()).await.expect("create");
    assert!(pool.created());
    pool.put(b"k", b"value").await.expect("put");
    assert_eq!(pool.get(b"k").await.expect("get"), b"value");
    let exists = pool.put_with(b"k", b"x", PutFlags::CREATE_ONLY).await.expect_err("create-only");
    assert!(exists.is_key_exists(), "{exists}");
    let absent = pool.put_with(b"nope", b"x", PutFlags::UPDATE_ONLY).await.expect_err("update-only");
    assert!(absent.is_key_not_found(), "{absent}");
    assert_eq!(pool.count().await.expect("count"), 1);

    let attributes = pool.value_attributes(b"k").await.expect("attributes");
    assert_eq!(attributes.length, 5);
    assert_eq!(attributes.crc32, crc32(b"value"));
    assert_eq!(attributes.write_time_ns, FAKE_WRITE_TIME_NS);
    let pool_attributes = pool.pool_attributes().await.expect("pool attributes");
    assert_eq!((pool_attributes.objects, pool_attributes.size_bytes), (1, PoolOptions::DEFAULT_SIZE_BYTES));

    pool.erase(b"k").await.expect("erase");
    let gone = pool.get(b"k").await.expect_err("erased");
    assert!(gone.is_key_not_found(), "{gone}");
    assert_eq!(gone.to_string(), "key_not_found: no such key");

    let in_use = session.delete_pool("demo").await.expect_err("still open");
    assert_eq!(in_use.code(), Some(ErrorCode::PoolInUse));
    let again = session.create_pool("demo", PoolOptions::default()).await.expect("reopen");
    assert!(!again.created());
    again.close().await.expect("close");
    drop(pool);
    session.delete_pool("demo").await.expect("both opens are closed");

    drop(session);
    let log = server.await.expect("fake server");
    assert_eq!(log.iter().filter(|line| line.starts_with("close_pool")).count(), 2, "{log:?}");
}

/// Proves the blocking API works end to end from a thread with no runtime of its own.
#[test]
fn blocking_api_reads_like_mcas() {
    let server_runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("server runtime");
    let shard = server_runtime.block_on(FakeShard::bind());
    let addresses = vec![shard.address()];
    let address = addresses[0].clone();
    let server = server_runtime.spawn(async move { serve_memory_shard(shard.accept().await, 0, &addresses).await });

    let session = blocking::Session::connect(&address).expect("connect");
    let pool = session.create_pool("demo", PoolOptions::default()).expect("create");
    pool.put(b"k", b"v").expect("put");
    assert_eq!(pool.get(b"k").expect("get"), b"v");
    assert_eq!(pool.count().expect("count"), 1);
    let missing = pool.get(b"other").expect_err("absent");
    assert!(matches!(missing, Error::Server { code: ErrorCode::KeyNotFound, .. }));
    assert_eq!(session.list_pools().expect("list").len(), 1);

    // Calls from several threads share the session.
    std::thread::scope(|scope| {
        for thread in 0..4 {
            let pool = pool.clone();
            scope.spawn(move || {
                for i in 0..50 {
                    let key = format!("t{thread}-{i}");
                    pool.put(&key, &key).expect("put");
                    assert_eq!(pool.get(&key).expect("get"), key.as_bytes());
                }
            });
        }
    });
    assert_eq!(pool.count().expect("count"), 201);
    pool.close().expect("close");
    session.delete_pool("demo").expect("delete");
    drop(session);

    let log = server_runtime.block_on(server).expect("fake server");
    assert!(log.contains(&"delete_pool demo".to_owned()), "{log:?}");
}

#[test]
fn fake_server_crc32_is_the_ieee_one() {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
}

/// Durability travels as flags: a pool's default on `create_pool`, a put's own on `put`.
#[tokio::test]
async fn durability_choices_reach_the_wire() {
    let shard = FakeShard::bind().await;
    let addresses = vec![shard.address()];
    let server = {
        let addresses = addresses.clone();
        tokio::spawn(async move { serve_memory_shard(shard.accept().await, 0, &addresses).await })
    };
    let session = Session::connect(&addresses[0]).await.expect("connect");
    let options = PoolOptions { durability: crate::Durability::Async, ..PoolOptions::default() };
    let pool = session.create_pool("lazy", options).await.expect("create");
    pool.put("plain", "v").await.expect("put");
    let sync = PutFlags::NONE.with_durability(crate::Durability::Sync);
    pool.put_with("forced", "v", sync).await.expect("put");
    drop((session, pool));
    let log = server.await.expect("fake server");
    assert!(log.contains(&"create_pool lazy async".to_string()), "{log:?}");
    assert_eq!(log.iter().filter(|line| line.starts_with("put ")).collect::<Vec<_>>(), ["put sync"], "{log:?}");
}

fn echo(data: &'static [u8]) -> Vec<InvokeResponse> {
    vec![InvokeResponse { layer: 0, data: bytes::Bytes::from_static(data) }]
}

/// Proves invocations reach the wire with the flags their options ask for, come back as
/// layer-tagged buffers, and that a plugin failure is a server error that leaves the connection
/// usable and the pool unchanged.
#[tokio::test]
async fn invocations_carry_their_options_and_return_buffers() {
    let shard = FakeShard::bind().await;
    let addresses = vec![shard.address()];
    let address = addresses[0].clone();
    let server = tokio::spawn(async move { serve_memory_shard(shard.accept().await, 0, &addresses).await });
    let session = Session::connect(&address).await.expect("connect");
    let pool = session.create_pool("ado", PoolOptions::default()).await.expect("create");

    let absent = pool.invoke(b"counter", b"get", InvokeOptions::default()).await.expect_err("no such key");
    assert!(absent.is_key_not_found(), "{absent}");
    let create = InvokeOptions { create_size: Some(8), ..InvokeOptions::default() };
    assert_eq!(pool.invoke(b"counter", b"add 1", create).await.expect("create on demand"), echo(b"add 1"));
    assert_eq!(pool.get(b"counter").await.expect("created"), [0; 8]);
    let read_only = InvokeOptions { read_only: true, ..InvokeOptions::default() };
    assert_eq!(pool.invoke(b"counter", b"get", read_only).await.expect("read-only"), echo(b"get"));
    assert_eq!(pool.invoke_pool(b"list", InvokeOptions::default()).await.expect("key-less"), echo(b"list"));
    let forget = InvokeOptions { fire_and_forget: true, ..InvokeOptions::default() };
    assert_eq!(pool.invoke(b"counter", b"add 2", forget).await.expect("fire and forget"), []);

    assert_eq!(pool.invoke_put(b"v", b"one", b"put", InvokePutOptions::default()).await.expect("put"), echo(b"put"));
    let keep = InvokePutOptions { no_overwrite: true, ..InvokePutOptions::default() };
    pool.invoke_put(b"v", b"two", b"put", keep).await.expect("no overwrite");
    let detached = InvokePutOptions { detached: true, fire_and_forget: true, ..InvokePutOptions::default() };
    assert_eq!(pool.invoke_put(b"v", b"three", b"put", detached).await.expect("detached"), []);
    assert_eq!(pool.get(b"v").await.expect("get"), b"one", "neither no-overwrite nor detached replaced it");

    let failed = pool.invoke_put(b"w", b"x", b"fail", InvokePutOptions::default()).await.expect_err("plugin fails");
    assert!(failed.is_ado_failed(), "{failed}");
    assert!(pool.get(b"w").await.expect_err("the failed call stored nothing").is_key_not_found());

    // Checked locally, before anything is sent: a key-less call has no value to create.
    let keyless = pool.invoke_pool(b"x", create).await.expect_err("create without a key");
    assert_eq!(keyless.code(), Some(ErrorCode::InvalidArgument));
    let empty = pool.invoke_put(b"", b"x", b"p", InvokePutOptions::default()).await.expect_err("put without a key");
    assert_eq!(empty.code(), Some(ErrorCode::InvalidArgument));

    drop((pool, session));
    let log = server.await.expect("fake server");
    let invokes: Vec<&str> = log.iter().map(String::as_str).filter(|line| line.starts_with("invoke")).collect();
    assert_eq!(
        invokes,
        [
            "invoke_ado 0x0000",
            "invoke_ado 0x0001",
            "invoke_ado 0x0002",
            "invoke_ado 0x0000",
            "invoke_ado 0x0020",
            "invoke_put_ado 0x0000",
            "invoke_put_ado 0x0004",
            "invoke_put_ado 0x0030",
        ]
    );
}

/// Proves the blocking client invokes like the async one.
#[test]
fn blocking_invocations() {
    let server_runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("server runtime");
    let shard = server_runtime.block_on(FakeShard::bind());
    let addresses = vec![shard.address()];
    let address = addresses[0].clone();
    let server = server_runtime.spawn(async move { serve_memory_shard(shard.accept().await, 0, &addresses).await });

    let session = blocking::Session::connect(&address).expect("connect");
    let pool = session.create_pool("ado", PoolOptions::default()).expect("create");
    let create = InvokeOptions { create_size: Some(4), ..InvokeOptions::default() };
    assert_eq!(pool.invoke(b"k", b"get", create).expect("invoke"), echo(b"get"));
    assert_eq!(pool.invoke_pool(b"list", InvokeOptions::default()).expect("key-less"), echo(b"list"));
    assert_eq!(pool.invoke_put(b"k", b"v", b"put", InvokePutOptions::default()).expect("put"), echo(b"put"));
    assert!(pool.invoke(b"k", b"fail", InvokeOptions::default()).expect_err("fails").is_ado_failed());
    pool.close().expect("close");
    drop(session);
    server_runtime.block_on(server).expect("fake server");
}

/// A direct put sends its commit right behind its last piece, before any answer (so the server
/// can make the pieces and the commit durable with one flush), and a put whose opening is refused
/// fails with that refusal, though its pieces and commit were already on their way.
#[tokio::test]
async fn a_direct_put_sends_its_commit_behind_its_pieces() {
    let shard = FakeShard::bind().await;
    let address = shard.address();
    let addresses = vec![address.clone()];
    let limits = Limits { key_bytes_max: 100, value_bytes_max: 1000 };
    let server = tokio::spawn(async move {
        let mut peer = shard.accept().await;
        peer.handshake(0, &addresses, limits).await;
        let open = peer.expect_frame().await;
        peer.reply(open.id(), &Response::PoolOpened { pool: PoolHandle(7) }).await;
        for refused in [false, true] {
            // The opening, pieces of 1000, 1000 and 500 bytes, and the commit, all unanswered.
            let mut frames = Vec::new();
            for _ in 0..5 {
                let frame = tokio::time::timeout(std::time::Duration::from_secs(10), peer.expect_frame()).await;
                frames.push(frame.expect("every frame of the put arrives before any answer"));
            }
            assert!(matches!(frames[0].request(), Request::PutDirect { length: 2500, .. }), "{:?}", frames[0]);
            for (n, piece) in frames[1..4].iter().enumerate() {
                let Request::DirectWrite { offset, bytes, .. } = piece.request() else {
                    panic!("expected a piece, got {:?}", piece.request());
                };
                assert_eq!((offset, bytes.len()), (n as u64 * 1000, if n == 2 { 500 } else { 1000 }));
            }
            assert!(
                matches!(frames[4].request(), Request::EndTransfer { flags, .. } if !flags.aborts()),
                "the commit follows the pieces: {:?}",
                frames[4].request()
            );
            let refusal = |message| Response::Error { code: ErrorCode::KeyExists, message };
            let answers = if refused {
                [refusal("key exists"), refusal("no direct put"), refusal("no direct put"), refusal("no direct put")]
            } else {
                [Response::TransferOpened { length: 2500 }, Response::Written, Response::Written, Response::Written]
            };
            for (frame, answer) in frames.iter().zip(answers.iter()) {
                peer.reply(frame.id(), answer).await;
            }
            let end = if refused { refusal("no direct put") } else { Response::TransferEnded };
            peer.reply(frames[4].id(), &end).await;
        }
        peer
    });

    let session = Session::connect(&address).await.expect("connect");
    let pool = session.open_pool("p").await.expect("open");
    pool.put_direct("k", &[1u8; 2500]).await.expect("committed");
    let error = pool.put_direct("k", &[2u8; 2500]).await.expect_err("refused at its opening");
    assert_eq!(error.code(), Some(ErrorCode::KeyExists), "{error}");
    assert!(error.to_string().contains("key exists"), "the opening's refusal: {error}");
    drop(server.await.expect("fake server"));
}
