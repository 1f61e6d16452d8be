//! A scriptable stand-in for a shard, for tests that must not depend on the real server.
//!
//! Each test drives the server side by hand (read this request, answer that, drop the socket),
//! which is what lets it prove things a well-behaved server never does on cue: answering out of
//! order, vanishing mid-request, refusing a connection with an error frame.

use bytes::{Bytes, BytesMut};
use ferrite_proto::{
    ClusterGroup, ClusterMap, ClusterNode, Header, HelloReply, Limits, Request, Response, PROTOCOL_VERSION,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::frame_reader::FrameReader;

/// A listening fake shard on an ephemeral loopback port.
#[derive(Debug)]
pub(crate) struct FakeShard {
    listener: TcpListener,
}

impl FakeShard {
    pub(crate) async fn bind() -> FakeShard {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind an ephemeral loopback port");
        FakeShard { listener }
    }

    pub(crate) fn port(&self) -> u16 {
        self.listener.local_addr().expect("a bound listener has an address").port()
    }

    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    pub(crate) async fn accept(&self) -> FakePeer {
        let (stream, _) = self.listener.accept().await.expect("accept the client");
        FakePeer { stream, frames: FrameReader::new(), map: None }
    }
}

/// One frame received from the client.
#[derive(Debug)]
pub(crate) struct Frame {
    pub(crate) header: Header,
    pub(crate) body: Bytes,
}

impl Frame {
    pub(crate) fn request(&self) -> Request<'_> {
        Request::decode(&self.header, &self.body).expect("the client sends well-formed requests")
    }

    pub(crate) fn id(&self) -> u64 {
        self.header.request_id
    }
}

/// The server side of one client connection.
#[derive(Debug)]
pub(crate) struct FakePeer {
    stream: TcpStream,
    frames: FrameReader,
    /// The map this peer answers `cluster_map` with, unseen by the test; `None` passes those
    /// requests on. The handshake sets a single server's, so tests of a single server never see
    /// the session's request for the map.
    pub(crate) map: Option<ClusterMap>,
}

impl FakePeer {
    /// The next frame, or `None` once the client has closed the connection.
    pub(crate) async fn next_frame(&mut self) -> Option<Frame> {
        loop {
            let frame = self.next_raw_frame().await?;
            match (&self.map, frame.request()) {
                (Some(map), Request::ClusterMap) => {
                    let mut out = BytesMut::new();
                    Response::ClusterMap(map.clone()).encode(frame.id(), &mut out);
                    self.send_raw(&out).await;
                }
                _ => return Some(frame),
            }
        }
    }

    async fn next_raw_frame(&mut self) -> Option<Frame> {
        loop {
            if let Some((header, body)) = self.frames.next_frame().expect("client frames are within limits") {
                return Some(Frame { header, body });
            }
            let read = self.stream.read_buf(self.frames.read_buffer()).await.expect("read from the client");
            if read == 0 {
                return None;
            }
        }
    }

    pub(crate) async fn expect_frame(&mut self) -> Frame {
        self.next_frame().await.expect("the client sent another frame")
    }

    pub(crate) async fn reply(&mut self, request_id: u64, response: &Response<'_>) {
        let mut out = BytesMut::new();
        response.encode(request_id, &mut out);
        self.send_raw(&out).await;
    }

    pub(crate) async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write to the client");
    }

    /// Answers the client's hello as shard `shard_index` of a server with these shards.
    pub(crate) async fn handshake(&mut self, shard_index: u16, shard_addresses: &[String], limits: Limits) {
        let frame = self.expect_frame().await;
        assert!(matches!(frame.request(), Request::Hello { version: PROTOCOL_VERSION, .. }), "first frame is hello");
        let reply = HelloReply {
            version: PROTOCOL_VERSION,
            shard_index,
            limits,
            shard_addresses: shard_addresses.iter().map(String::as_str).collect(),
        };
        self.reply(frame.id(), &Response::Hello(reply)).await;
        self.map = Some(single_server_map(shard_addresses));
    }
}

/// The map a server not in cluster mode answers: node 0 at its shard 0, leading every group.
pub(crate) fn single_server_map(shard_addresses: &[String]) -> ClusterMap {
    let shard_count = u16::try_from(shard_addresses.len()).expect("a fake server has few shards");
    ClusterMap::single_server(&shard_addresses[0], shard_count)
}

/// A fake shard that really stores pairs in memory and answers every request the way the
/// protocol says, for tests of whole workflows. Serves one connection until the client closes
/// it, then returns a log of the requests it saw (`"create_pool demo"`, `"close_pool 1"`, ...).
pub(crate) async fn serve_memory_shard(peer: FakePeer, shard_index: u16, shard_addresses: &[String]) -> Vec<String> {
    serve_memory_shard_stalling(peer, shard_index, shard_addresses, None).await
}

/// [`serve_memory_shard`], but after answering `stall.0` requests it stops reading for `stall.1`,
/// so the client's socket buffers fill up as they would behind a slow network.
pub(crate) async fn serve_memory_shard_stalling(
    mut peer: FakePeer,
    shard_index: u16,
    shard_addresses: &[String],
    stall: Option<(usize, std::time::Duration)>,
) -> Vec<String> {
    use std::collections::{BTreeMap, HashMap};

    use ferrite_proto::{
        Attribute, CreatePoolFlags, ErrorCode, InvokeFlags, PoolDescription, PoolHandle, PoolInfo, PoolMemory,
        PoolSettings, PutFlags, Statistic,
    };

    struct StoredPool {
        size_bytes: u64,
        settings: PoolSettings,
        pairs: BTreeMap<Vec<u8>, Vec<u8>>,
    }

    peer.handshake(shard_index, shard_addresses, Limits::MAX).await;
    let mut pools: BTreeMap<String, StoredPool> = BTreeMap::new();
    let mut opens: HashMap<u64, String> = HashMap::new();
    let mut next_handle = 1u64;
    let mut log = Vec::new();

    fn error(code: ErrorCode, message: &str) -> Response<'_> {
        Response::Error { code, message }
    }

    let mut answered = 0;
    while let Some(frame) = peer.next_frame().await {
        if let Some((after, pause)) = stall {
            if answered == after {
                tokio::time::sleep(pause).await;
            }
        }
        answered += 1;
        let request = frame.request();
        let opcode = request.opcode();
        let mut out = BytesMut::new();
        let mut owned_value = Vec::new();
        let response = match request {
            Request::CreatePool { name, size_bytes, flags, .. } => {
                let durability = if flags.contains(CreatePoolFlags::ASYNC) { " async" } else { "" };
                log.push(format!("create_pool {name}{durability}"));
                let exists = pools.contains_key(name);
                if exists && flags.contains(CreatePoolFlags::CREATE_ONLY) {
                    error(ErrorCode::PoolExists, "pool exists")
                } else {
                    pools.entry(name.to_owned()).or_insert(StoredPool {
                        size_bytes,
                        settings: PoolSettings {
                            indexed: flags.contains(CreatePoolFlags::INDEXED),
                            durability: flags.durability(),
                        },
                        pairs: BTreeMap::new(),
                    });
                    let handle = next_handle;
                    next_handle += 1;
                    opens.insert(handle, name.to_owned());
                    Response::PoolCreated { pool: PoolHandle(handle), created: !exists }
                }
            }
            Request::OpenPool { name } => {
                log.push(format!("open_pool {name}"));
                if pools.contains_key(name) {
                    let handle = next_handle;
                    next_handle += 1;
                    opens.insert(handle, name.to_owned());
                    Response::PoolOpened { pool: PoolHandle(handle) }
                } else {
                    error(ErrorCode::PoolNotFound, "no such pool")
                }
            }
            Request::ClosePool { pool } => {
                log.push(format!("close_pool {}", pool.0));
                match opens.remove(&pool.0) {
                    Some(_) => Response::PoolClosed,
                    None => error(ErrorCode::PoolNotOpen, "not open"),
                }
            }
            Request::DeletePool { name } => {
                log.push(format!("delete_pool {name}"));
                if opens.values().any(|open| open == name) {
                    error(ErrorCode::PoolInUse, "pool is open")
                } else if pools.remove(name).is_some() {
                    Response::PoolDeleted
                } else {
                    error(ErrorCode::PoolNotFound, "no such pool")
                }
            }
            Request::ConfigurePool { name, setting } => {
                log.push(format!("configure_pool {name} {}", setting.name()));
                if pools.contains_key(name) {
                    Response::PoolConfigured
                } else {
                    error(ErrorCode::PoolNotFound, "no such pool")
                }
            }
            Request::DescribePools { name: asked } => {
                log.push(asked.map_or_else(|| "list_pools".to_owned(), |name| format!("list_pools {name}")));
                let rows = pools
                    .iter()
                    .filter(|(name, _)| asked.is_none_or(|asked| asked == name.as_str()))
                    .map(|(name, pool)| PoolDescription {
                        info: PoolInfo {
                            name,
                            objects: pool.pairs.len() as u64,
                            size_bytes: pool.size_bytes,
                            used_bytes: pool.pairs.iter().map(|(k, v)| (k.len() + v.len() + 64) as u64).sum(),
                            open_count: opens.values().filter(|open| *open == name).count() as u32,
                            // A table of 64 buckets, and each pair's bytes beside it.
                            memory: PoolMemory {
                                table_buckets: 64,
                                table_bytes: 64 * 64,
                                other_bytes: pool.pairs.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum(),
                                ..PoolMemory::default()
                            },
                            plugins: "",
                        },
                        settings: pool.settings,
                    })
                    .collect();
                Response::PoolDescriptions(rows)
            }
            Request::Find { .. } => {
                log.push("find".to_owned());
                error(ErrorCode::InvalidArgument, "the fake shard keeps no secondary index")
            }
            Request::Backup { dir } => {
                log.push(format!("backup {dir}"));
                Response::BackedUp(ferrite_proto::BackupReport { lsn: u64::from(shard_index), files: 1, bytes: 1 })
            }
            Request::GetStatistics => {
                log.push("get_statistics".to_owned());
                Response::Statistics(vec![
                    Statistic { name: "shard", value: u64::from(shard_index) },
                    Statistic { name: "pools", value: pools.len() as u64 },
                ])
            }
            Request::Hello { .. } => error(ErrorCode::MalformedFrame, "second hello"),
            Request::NodeInfo => {
                log.push("node_info".to_owned());
                let node = single_server_map(shard_addresses).nodes.remove(0);
                Response::NodeInfo(ferrite_proto::NodeInfo { node, cluster_id: String::new() })
            }
            Request::ClusterMap => Response::ClusterMap(single_server_map(shard_addresses)),
            Request::ClusterAdmin(ref admin) => {
                log.push(admin.name().to_owned());
                error(ErrorCode::InvalidArgument, "this server is not in cluster mode (start it with --node-id)")
            }
            // The client lists pools with their settings only.
            Request::ListPools => error(ErrorCode::InvalidArgument, "the fake shard lists pools described only"),
            // The real server's direct transfers are tested against it (`crates/ferrite-server/tests/direct.rs`).
            Request::PutDirect { .. }
            | Request::DirectWrite { .. }
            | Request::GetDirect { .. }
            | Request::DirectRead { .. }
            | Request::EndTransfer { .. }
            | Request::PutOffset { .. } => {
                log.push("direct".to_owned());
                error(ErrorCode::InvalidArgument, "the fake shard has no direct transfers")
            }
            Request::Put { pool, .. }
            | Request::Get { pool, .. }
            | Request::Erase { pool, .. }
            | Request::Count { pool }
            | Request::GetAttribute { pool, .. }
            | Request::InvokeAdo { pool, .. }
            | Request::InvokePutAdo { pool, .. } => {
                let Some(stored) = opens.get(&pool.0).and_then(|name| pools.get_mut(name)) else {
                    let mut out = BytesMut::new();
                    error(ErrorCode::PoolNotOpen, "not open").encode(frame.id(), &mut out);
                    peer.send_raw(&out).await;
                    continue;
                };
                match request {
                    Request::Put { flags, key, value, .. } => {
                        if let Some(durability) = flags.durability() {
                            log.push(format!("put {durability}"));
                        }
                        let present = stored.pairs.contains_key(key);
                        if present && flags.contains(PutFlags::CREATE_ONLY) {
                            error(ErrorCode::KeyExists, "key exists")
                        } else if !present && flags.contains(PutFlags::UPDATE_ONLY) {
                            error(ErrorCode::KeyNotFound, "no such key")
                        } else {
                            stored.pairs.insert(key.to_vec(), value.to_vec());
                            Response::Stored
                        }
                    }
                    Request::Get { key, .. } => match stored.pairs.get(key) {
                        Some(value) => {
                            owned_value.clone_from(value);
                            Response::Value(&owned_value)
                        }
                        None => error(ErrorCode::KeyNotFound, "no such key"),
                    },
                    Request::Erase { key, .. } => match stored.pairs.remove(key) {
                        Some(_) => Response::Erased,
                        None => error(ErrorCode::KeyNotFound, "no such key"),
                    },
                    Request::Count { .. } => Response::Count(stored.pairs.len() as u64),
                    Request::GetAttribute { attribute, key, .. } => {
                        let value = stored.pairs.get(key);
                        match (attribute, value) {
                            (Attribute::ObjectCount, _) => Response::Attribute(stored.pairs.len() as u64),
                            (Attribute::PoolSize, _) => Response::Attribute(stored.size_bytes),
                            (Attribute::PoolUsed, _) => Response::Attribute(7),
                            (_, None) => error(ErrorCode::KeyNotFound, "no such key"),
                            (Attribute::ValueLength, Some(value)) => Response::Attribute(value.len() as u64),
                            (Attribute::Crc32, Some(value)) => Response::Attribute(u64::from(crc32(value))),
                            (Attribute::WriteTime, Some(_)) => Response::Attribute(FAKE_WRITE_TIME_NS),
                        }
                    }
                    // A stand-in for a plugin chain of one (see `invoked`). A failed call changes
                    // nothing, as on the real server.
                    Request::InvokeAdo { payload: FAIL_PAYLOAD, .. }
                    | Request::InvokePutAdo { payload: FAIL_PAYLOAD, .. } => {
                        error(ErrorCode::AdoFailed, "the fake plugin fails on request")
                    }
                    Request::InvokeAdo { flags, key, payload, value_size, .. } => {
                        log.push(format!("invoke_ado {:#06x}", flags.bits()));
                        if !key.is_empty() && !stored.pairs.contains_key(key) {
                            if flags.contains(InvokeFlags::CREATE_ON_DEMAND) {
                                stored.pairs.insert(key.to_vec(), vec![0; value_size as usize]);
                            } else {
                                let mut out = BytesMut::new();
                                error(ErrorCode::KeyNotFound, "no such key").encode(frame.id(), &mut out);
                                peer.send_raw(&out).await;
                                continue;
                            }
                        }
                        invoked(flags, payload)
                    }
                    Request::InvokePutAdo { flags, key, value, payload, .. } => {
                        log.push(format!("invoke_put_ado {:#06x}", flags.bits()));
                        let keep = flags.contains(InvokeFlags::NO_OVERWRITE) && stored.pairs.contains_key(key);
                        if !keep && !flags.contains(InvokeFlags::DETACHED) {
                            stored.pairs.insert(key.to_vec(), value.to_vec());
                        }
                        invoked(flags, payload)
                    }
                    _ => unreachable!("matched above"),
                }
            }
        };
        response.encode_answer(opcode, frame.id(), &mut out);
        peer.send_raw(&out).await;
    }
    log
}

/// The payload on which the memory shard's stand-in plugin fails with `ado_failed`.
pub(crate) const FAIL_PAYLOAD: &[u8] = b"fail";

/// The stand-in plugin's answer: one buffer from layer 0 echoing the payload, or no buffers when
/// the caller does not wait for them.
fn invoked(flags: ferrite_proto::InvokeFlags, payload: &[u8]) -> Response<'_> {
    if flags.contains(ferrite_proto::InvokeFlags::FIRE_AND_FORGET) {
        return Response::Invoked { buffers: Vec::new() };
    }
    Response::Invoked { buffers: vec![ferrite_proto::InvokeBuffer { layer: 0, data: payload }] }
}

/// The write time the memory shard reports for every value.
pub(crate) const FAKE_WRITE_TIME_NS: u64 = 1_700_000_000_123_456_789;

/// Bitwise CRC-32 (IEEE 802.3), slow and obviously right; the real server uses a table.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = u32::MAX;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// How a [`FakeNode`] answers the next pool request (open, put, get).
#[derive(Debug, Clone)]
pub(crate) enum NodeAnswer {
    /// Refuses it with this `not_leader`, then answers `cluster_map` with `then_map`, if given.
    Refuse { refusal: ferrite_proto::NotLeader, then_map: Option<ClusterMap> },
    /// Closes the connection instead of answering, as a node that died with the request in
    /// flight.
    Vanish,
    /// Refuses it with a plain `error` frame of code `not_leader` (no leader named), then
    /// answers `cluster_map` with `then_map`.
    RefusePlainly { then_map: ClusterMap },
}

/// What a [`FakeNode`] holds, shared with the test that scripts it.
#[derive(Debug, Default)]
pub(crate) struct NodeState {
    /// What it answers `cluster_map` with.
    pub(crate) map: ClusterMap,
    /// How it answers the next pool requests, in turn; once they are used up it serves them.
    pub(crate) answers: std::collections::VecDeque<NodeAnswer>,
    /// Every request it received but hellos: `"open_pool p"`, `"put k"`, `"get k"`,
    /// `"close_pool"`, `"cluster_map"`.
    pub(crate) log: Vec<String>,
    /// Its pool's pairs (one pool serves every name).
    pub(crate) pairs: std::collections::BTreeMap<Vec<u8>, Vec<u8>>,
    /// The handles open on it; a put or get on another is refused with `pool_not_open`.
    pub(crate) open: std::collections::BTreeSet<u64>,
    next_handle: u64,
}

/// A fake cluster node serving shard 0 of a server with one shard (so a cluster with one group)
/// to any number of connections, for tests of how a session follows its group's leader.
#[derive(Debug)]
pub(crate) struct FakeNode {
    pub(crate) address: String,
    pub(crate) state: std::sync::Arc<std::sync::Mutex<NodeState>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeNode {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeNode {
    pub(crate) async fn start() -> FakeNode {
        let shard = FakeShard::bind().await;
        let address = shard.address();
        let state = std::sync::Arc::new(std::sync::Mutex::new(NodeState { next_handle: 1, ..NodeState::default() }));
        let (serving, served) = (address.clone(), std::sync::Arc::clone(&state));
        let task = tokio::spawn(async move {
            loop {
                let peer = shard.accept().await;
                tokio::spawn(serve_node_connection(peer, serving.clone(), std::sync::Arc::clone(&served)));
            }
        });
        FakeNode { address, state, task }
    }

    /// The node as a map names it.
    pub(crate) fn as_member(&self, node_id: u64) -> ClusterNode {
        ClusterNode { node_id, native: self.address.clone(), ..ClusterNode::default() }
    }

    pub(crate) fn state(&self) -> std::sync::MutexGuard<'_, NodeState> {
        self.state.lock().expect("a fake node's state lock is never poisoned")
    }

    /// The requests it received, by kind: `"put"` counts every `"put k"`.
    pub(crate) fn received(&self, kind: &str) -> usize {
        self.state().log.iter().filter(|entry| entry.split(' ').next() == Some(kind)).count()
    }
}

/// A map of one group led by `leader` over `nodes`, at `version`.
pub(crate) fn cluster_map(version: u64, nodes: Vec<ClusterNode>, leader: u64) -> ClusterMap {
    let voters = nodes.iter().map(|node| node.node_id).collect();
    let group = ClusterGroup { leader, term: version, voters, learners: Vec::new() };
    ClusterMap { version, cluster_id: "fake".to_owned(), nodes, groups: vec![group] }
}

async fn serve_node_connection(
    mut peer: FakePeer,
    address: String,
    state: std::sync::Arc<std::sync::Mutex<NodeState>>,
) {
    use ferrite_proto::{ErrorCode, PoolHandle};

    peer.handshake(0, std::slice::from_ref(&address), Limits::MAX).await;
    peer.map = None;
    while let Some(frame) = peer.next_frame().await {
        let request = frame.request();
        let mut out = BytesMut::new();
        {
            let mut state = state.lock().expect("a fake node's state lock is never poisoned");
            let entry = match request {
                Request::ClusterMap => "cluster_map".to_owned(),
                Request::ClosePool { .. } => "close_pool".to_owned(),
                Request::OpenPool { name } => format!("open_pool {name}"),
                Request::Put { key, .. } => format!("put {}", String::from_utf8_lossy(key)),
                Request::Get { key, .. } => format!("get {}", String::from_utf8_lossy(key)),
                ref other => format!("{:?}", other.opcode()),
            };
            state.log.push(entry);
            let pool_request = matches!(request, Request::OpenPool { .. } | Request::Put { .. } | Request::Get { .. });
            match state.answers.front().cloned().filter(|_| pool_request) {
                Some(NodeAnswer::Vanish) => {
                    state.answers.pop_front();
                    return;
                }
                Some(NodeAnswer::RefusePlainly { then_map }) => {
                    state.answers.pop_front();
                    let refusal = Response::Error { code: ErrorCode::NotLeader, message: "not the leader" };
                    refusal.encode(frame.id(), &mut out);
                    state.map = then_map;
                }
                Some(NodeAnswer::Refuse { refusal, then_map }) => {
                    state.answers.pop_front();
                    Response::NotLeader(refusal).encode(frame.id(), &mut out);
                    if let Some(map) = then_map {
                        state.map = map;
                    }
                }
                None => {
                    let opcode = request.opcode();
                    let handle = state.next_handle;
                    let response = match request {
                        Request::ClusterMap => Response::ClusterMap(state.map.clone()),
                        Request::ClosePool { pool } => match state.open.remove(&pool.0) {
                            true => Response::PoolClosed,
                            false => Response::Error { code: ErrorCode::PoolNotOpen, message: "not open" },
                        },
                        Request::OpenPool { .. } => {
                            state.next_handle += 1;
                            state.open.insert(handle);
                            Response::PoolOpened { pool: PoolHandle(handle) }
                        }
                        Request::Put { pool, .. } | Request::Get { pool, .. } if !state.open.contains(&pool.0) => {
                            Response::Error { code: ErrorCode::PoolNotOpen, message: "not open" }
                        }
                        Request::Put { key, value, .. } => {
                            state.pairs.insert(key.to_vec(), value.to_vec());
                            Response::Stored
                        }
                        Request::Get { key, .. } => match state.pairs.get(key) {
                            Some(value) => Response::Value(value),
                            None => Response::Error { code: ErrorCode::KeyNotFound, message: "no such key" },
                        },
                        _ => Response::Error {
                            code: ErrorCode::InvalidArgument,
                            message: "the fake node does not serve this",
                        },
                    };
                    response.encode_answer(opcode, frame.id(), &mut out);
                }
            }
        }
        peer.send_raw(&out).await;
    }
}
