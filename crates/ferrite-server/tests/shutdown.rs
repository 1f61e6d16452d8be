//! Stopping the server: SIGTERM ends it cleanly, with status 0, whatever its clients are doing.

mod common;
mod wire;

use common::{TestServer, SHUTDOWN_TIMEOUT};
use ferrite_client::{blocking, PoolOptions};
use ferrite_proto::{PutFlags, Request};
use wire::{frame, header, RawClient};

/// SIGTERM while clients are connected to both shards (one with pools open, one idle before its
/// hello, one in the middle of a frame) stops the server with exit status 0; afterwards the
/// clients' requests fail instead of hanging.
#[test]
fn sigterm_with_connected_clients_exits_with_status_zero() {
    let server = TestServer::builder().shards(2).start();
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pools: Vec<_> =
        (0..4).map(|i| session.create_pool(&format!("open-{i}"), PoolOptions::default()).expect("create")).collect();
    for pool in &pools {
        pool.put("k", "v").expect("put");
    }
    assert_eq!(session.statistics().expect("both shards connected").len(), 2);
    let _idle = RawClient::connect(server.addr(1));
    let mut mid_frame = RawClient::handshaken(server.addr(0));
    mid_frame.send_bytes(&header(0x0021, 0, 2, 64));

    server.stop_gracefully();

    for pool in &pools {
        assert!(pool.get("k").is_err(), "a request to a stopped server fails");
    }
}

/// SIGTERM stops the server even while a client has pipelined far more large `get`s than it
/// reads, so the server's writes to it cannot complete: a peer that stops reading must not be
/// able to keep the server from shutting down.
#[test]
fn sigterm_stops_the_server_while_a_client_does_not_read() {
    let mut server = TestServer::start(&[]);
    let mut raw = RawClient::handshaken(server.addr(0));
    let handle = raw.create_pool(2, "big", 64 << 20);
    let value = vec![b'v'; 2 << 20];
    raw.call(3, &Request::Put { pool: handle, flags: PutFlags::NONE, key: b"k", value: &value }).expect_ok(3);
    // 64 gets of 2 MiB each: far more than the socket buffers hold. This client never reads them.
    let mut get = handle.0.to_le_bytes().to_vec();
    get.extend_from_slice(&1u32.to_le_bytes());
    get.push(b'k');
    let batch: Vec<u8> = (0..64).flat_map(|i| frame(0x0021, 0, 10 + i, &get)).collect();
    raw.send_bytes(&batch);
    // The first answer proves the server is busy writing the rest; from here on nobody reads them.
    assert_eq!(raw.read_frame().header.request_id, 10);
    // The shard itself is not blocked: another client is served.
    let mut other = RawClient::handshaken(server.addr(0));
    assert_eq!(other.open_pool(2, "big"), handle);

    server.sigterm();
    let status = server.wait_exit(SHUTDOWN_TIMEOUT);
    drop(raw);
    assert!(status.is_some(), "ferrite-server was still running {SHUTDOWN_TIMEOUT:?} after SIGTERM");
    assert!(status.is_some_and(|s| s.success()), "exit status {status:?}");
}
