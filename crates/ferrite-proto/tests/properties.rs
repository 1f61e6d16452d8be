//! Property tests of the codec.
//!
//! Proves that decoding never panics, whatever the header and body (arbitrary bytes, and valid
//! frames that were truncated or had a byte changed); that every valid request and response
//! round-trips through `encode` and `decode` unchanged; and that a stream of several encoded
//! requests, delivered in pieces split at any byte boundary, reassembles into the same requests
//! when read header first, then `body_len` bytes of body.

use bytes::BytesMut;
use ferrite_proto::{
    Attribute, ClusterAdmin, ClusterGroup, ClusterMap, ClusterNode, ClusterStatus, CreatePoolFlags, Durability,
    ErrorCode, FindKind, FollowerProgress, Header, HelloReply, InvokeBuffer, InvokeFlags, Limits, NodeInfo, NotLeader,
    Opcode, PoolDescription, PoolHandle, PoolInfo, PoolMemory, PoolSettings, PutFlags, RaftRole, Request, Response,
    Statistic, HEADER_BYTES, VALUE_INLINE_BYTES_MAX,
};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;
use proptest::sample::select;

/// An owned [`Request`], so that proptest can generate and shrink it.
#[derive(Debug, Clone)]
enum OwnedRequest {
    Hello { version: u16, client_name: String, auth: Vec<u8> },
    CreatePool { name: String, size_bytes: u64, expected_objects: u64, flags: CreatePoolFlags, plugins: String },
    OpenPool { name: String },
    ClosePool { pool: u64 },
    DeletePool { name: String },
    ListPools,
    DescribePools { name: Option<String> },
    Put { pool: u64, flags: PutFlags, key: Vec<u8>, value: Vec<u8> },
    Get { pool: u64, key: Vec<u8> },
    Erase { pool: u64, key: Vec<u8> },
    Count { pool: u64 },
    GetAttribute { pool: u64, attribute: Attribute, key: Vec<u8> },
    Find { pool: u64, kind: FindKind, pattern: Vec<u8>, after: Option<Vec<u8>>, limit: u32 },
    GetStatistics,
    InvokeAdo { pool: u64, flags: InvokeFlags, key: Vec<u8>, payload: Vec<u8>, value_size: u64 },
    InvokePutAdo { pool: u64, flags: InvokeFlags, key: Vec<u8>, value: Vec<u8>, payload: Vec<u8> },
    NodeInfo,
    ClusterMap,
    ClusterAdmin(ClusterAdmin),
}

impl OwnedRequest {
    fn borrow(&self) -> Request<'_> {
        match self {
            OwnedRequest::Hello { version, client_name, auth } => {
                Request::Hello { version: *version, client_name, auth }
            }
            OwnedRequest::CreatePool { name, size_bytes, expected_objects, flags, plugins } => Request::CreatePool {
                name,
                size_bytes: *size_bytes,
                expected_objects: *expected_objects,
                flags: *flags,
                plugins,
            },
            OwnedRequest::OpenPool { name } => Request::OpenPool { name },
            OwnedRequest::ClosePool { pool } => Request::ClosePool { pool: PoolHandle(*pool) },
            OwnedRequest::DeletePool { name } => Request::DeletePool { name },
            OwnedRequest::ListPools => Request::ListPools,
            OwnedRequest::DescribePools { name } => Request::DescribePools { name: name.as_deref() },
            OwnedRequest::Put { pool, flags, key, value } => {
                Request::Put { pool: PoolHandle(*pool), flags: *flags, key, value }
            }
            OwnedRequest::Get { pool, key } => Request::Get { pool: PoolHandle(*pool), key },
            OwnedRequest::Erase { pool, key } => Request::Erase { pool: PoolHandle(*pool), key },
            OwnedRequest::Count { pool } => Request::Count { pool: PoolHandle(*pool) },
            OwnedRequest::GetAttribute { pool, attribute, key } => {
                Request::GetAttribute { pool: PoolHandle(*pool), attribute: *attribute, key }
            }
            OwnedRequest::Find { pool, kind, pattern, after, limit } => {
                Request::Find { pool: PoolHandle(*pool), kind: *kind, pattern, after: after.as_deref(), limit: *limit }
            }
            OwnedRequest::GetStatistics => Request::GetStatistics,
            OwnedRequest::InvokeAdo { pool, flags, key, payload, value_size } => {
                Request::InvokeAdo { pool: PoolHandle(*pool), flags: *flags, key, payload, value_size: *value_size }
            }
            OwnedRequest::InvokePutAdo { pool, flags, key, value, payload } => {
                Request::InvokePutAdo { pool: PoolHandle(*pool), flags: *flags, key, value, payload }
            }
            OwnedRequest::NodeInfo => Request::NodeInfo,
            OwnedRequest::ClusterMap => Request::ClusterMap,
            OwnedRequest::ClusterAdmin(admin) => Request::ClusterAdmin(admin.clone()),
        }
    }
}

/// An owned [`Response`], so that proptest can generate and shrink it.
#[derive(Debug, Clone)]
enum OwnedResponse {
    Hello {
        version: u16,
        shard_index: u16,
        limits: Limits,
        shard_addresses: Vec<String>,
    },
    PoolCreated {
        pool: u64,
        created: bool,
    },
    PoolOpened {
        pool: u64,
    },
    PoolClosed,
    PoolDeleted,
    Pools(Vec<OwnedPoolInfo>),
    PoolDescriptions(Vec<(OwnedPoolInfo, bool, bool)>),
    Stored,
    Value(Vec<u8>),
    Erased,
    Count(u64),
    Attribute(u64),
    Found {
        keys: Vec<Vec<u8>>,
        next: Option<Vec<u8>>,
    },
    Statistics(Vec<(String, u64)>),
    /// `answers` is the invocation the buffers answer: its opcode picks the response opcode.
    Invoked {
        answers: Opcode,
        buffers: Vec<(u16, Vec<u8>)>,
    },
    Error {
        code: ErrorCode,
        message: String,
    },
    /// A cluster message: these own their fields already.
    Cluster(Response<'static>),
}

/// A `list_pools` entry: name, objects, size, used, open count, memory, plugin chain.
type OwnedPoolInfo = (String, u64, u64, u64, u32, PoolMemory, String);

fn borrow_pool_info(info: &OwnedPoolInfo) -> PoolInfo<'_> {
    let (name, objects, size_bytes, used_bytes, open_count, memory, plugins) = info;
    PoolInfo {
        name,
        objects: *objects,
        size_bytes: *size_bytes,
        used_bytes: *used_bytes,
        open_count: *open_count,
        memory: *memory,
        plugins,
    }
}

impl OwnedResponse {
    fn borrow(&self) -> Response<'_> {
        match self {
            OwnedResponse::Hello { version, shard_index, limits, shard_addresses } => Response::Hello(HelloReply {
                version: *version,
                shard_index: *shard_index,
                limits: *limits,
                shard_addresses: shard_addresses.iter().map(String::as_str).collect(),
            }),
            OwnedResponse::PoolCreated { pool, created } => {
                Response::PoolCreated { pool: PoolHandle(*pool), created: *created }
            }
            OwnedResponse::PoolOpened { pool } => Response::PoolOpened { pool: PoolHandle(*pool) },
            OwnedResponse::PoolClosed => Response::PoolClosed,
            OwnedResponse::PoolDeleted => Response::PoolDeleted,
            OwnedResponse::Pools(pools) => Response::Pools(pools.iter().map(borrow_pool_info).collect()),
            OwnedResponse::PoolDescriptions(pools) => Response::PoolDescriptions(
                pools
                    .iter()
                    .map(|(info, indexed, asynchronous)| PoolDescription {
                        info: borrow_pool_info(info),
                        settings: PoolSettings {
                            indexed: *indexed,
                            durability: if *asynchronous { Durability::Async } else { Durability::Sync },
                        },
                    })
                    .collect(),
            ),
            OwnedResponse::Stored => Response::Stored,
            OwnedResponse::Value(value) => Response::Value(value),
            OwnedResponse::Erased => Response::Erased,
            OwnedResponse::Count(n) => Response::Count(*n),
            OwnedResponse::Attribute(n) => Response::Attribute(*n),
            OwnedResponse::Found { keys, next } => {
                Response::Found { keys: keys.iter().map(Vec::as_slice).collect(), next: next.as_deref() }
            }
            OwnedResponse::Statistics(stats) => {
                Response::Statistics(stats.iter().map(|(name, value)| Statistic { name, value: *value }).collect())
            }
            OwnedResponse::Invoked { buffers, .. } => Response::Invoked {
                buffers: buffers.iter().map(|(layer, data)| InvokeBuffer { layer: *layer, data }).collect(),
            },
            OwnedResponse::Error { code, message } => Response::Error { code: *code, message },
            OwnedResponse::Cluster(response) => response.clone(),
        }
    }

    /// The response as one frame answering its request.
    fn encode(&self, request_id: u64) -> BytesMut {
        let response = self.borrow();
        let answers = match self {
            OwnedResponse::Invoked { answers, .. } => *answers,
            _ => response.request_opcode(),
        };
        let mut out = BytesMut::new();
        response.encode_answer(answers, request_id, &mut out);
        out
    }
}

/// A valid pool name: 1 to 255 bytes of UTF-8 (at most 63 characters of at most 4 bytes each, or
/// up to 255 ASCII characters).
/// Plugin chains as `create_pool` and `list_pools` carry them: none, one, or several names.
fn plugin_chain() -> impl Strategy<Value = String> {
    vec("[a-z0-9_-]{1,64}", 0..=8).prop_map(|names| names.join(","))
}

fn pool_name() -> impl Strategy<Value = String> {
    prop_oneof!["\\PC{1,63}", "[a-zA-Z0-9_.-]{1,255}"]
}

fn text() -> impl Strategy<Value = String> {
    "\\PC{0,40}"
}

fn byte_string(max_len: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..=max_len)
}

/// A `host:port` a cluster message may carry (at most `NODE_ADDRESS_BYTES_MAX` bytes), or empty
/// where `optional`.
fn node_address(optional: bool) -> impl Strategy<Value = String> {
    let address = prop_oneof!["[a-z0-9.-]{1,60}:[0-9]{1,5}", "\\[[0-9a-f:]{2,39}\\]:[0-9]{1,5}", "[a-z]{259}"];
    if optional {
        prop_oneof![Just(String::new()), address].boxed()
    } else {
        address.boxed()
    }
}

/// A node a cluster may make a member: id at least 1, peer and native addresses.
fn member() -> impl Strategy<Value = ClusterNode> {
    (1..=u64::MAX, node_address(false), node_address(false), node_address(true))
        .prop_map(|(node_id, peer, native, resp)| ClusterNode { node_id, peer, native, resp })
}

fn cluster_admin() -> impl Strategy<Value = ClusterAdmin> {
    prop_oneof![
        (any::<u16>(), vec(member(), 1..=8)).prop_map(|(group, members)| {
            // Member ids are distinct: the first of each id stays.
            let mut seen = std::collections::HashSet::new();
            let members = members.into_iter().filter(|m| seen.insert(m.node_id)).collect();
            ClusterAdmin::Init { group, members }
        }),
        (any::<u16>(), member()).prop_map(|(group, node)| ClusterAdmin::AddNode { group, node }),
        (any::<u16>(), 1..=u64::MAX).prop_map(|(group, node_id)| ClusterAdmin::RemoveNode { group, node_id }),
        (any::<u16>(), 1..=u64::MAX).prop_map(|(group, to)| ClusterAdmin::TransferLeader { group, to }),
        any::<u16>().prop_map(|group| ClusterAdmin::Status { group }),
    ]
}

/// Every cluster response, within the protocol's limits.
fn cluster_response() -> impl Strategy<Value = Response<'static>> {
    let node = || {
        (any::<u64>(), node_address(true), node_address(true), node_address(true))
            .prop_map(|(node_id, peer, native, resp)| ClusterNode { node_id, peer, native, resp })
    };
    let group = (any::<u64>(), any::<u64>(), vec(any::<u64>(), 0..=64), vec(any::<u64>(), 0..=4))
        .prop_map(|(leader, term, voters, learners)| ClusterGroup { leader, term, voters, learners });
    let status = (
        any::<u64>(),
        select(RaftRole::ALL.to_vec()),
        any::<[u64; 6]>(),
        vec(any::<[u64; 3]>().prop_map(|[node_id, matched, lag]| FollowerProgress { node_id, matched, lag }), 0..=64),
    )
        .prop_map(|(node_id, role, [leader, term, last_log, committed, applied, snapshot], followers)| {
            ClusterStatus { node_id, role, leader, term, last_log, committed, applied, snapshot, followers }
        });
    prop_oneof![
        (node(), "\\PC{0,16}").prop_map(|(node, cluster_id)| Response::NodeInfo(NodeInfo { node, cluster_id })),
        (any::<u64>(), "[a-z0-9-]{0,64}", vec(node(), 0..=8), vec(group, 1..=16)).prop_map(
            |(version, cluster_id, nodes, groups)| Response::ClusterMap(ClusterMap {
                version,
                cluster_id,
                nodes,
                groups
            })
        ),
        Just(Response::ClusterInitialized),
        Just(Response::NodeAdded),
        Just(Response::NodeRemoved),
        Just(Response::LeaderTransferred),
        status.prop_map(Response::ClusterStatus),
        (any::<u16>(), any::<u64>(), node_address(true), any::<u64>(), text()).prop_map(
            |(group, leader, leader_native, map_version, message)| Response::NotLeader(NotLeader {
                group,
                leader,
                leader_native,
                map_version,
                message
            })
        ),
    ]
}

/// Valid requests whose keys and values hold at most `max_len` bytes.
fn request(max_len: usize) -> impl Strategy<Value = OwnedRequest> {
    let create_flags = select(vec![
        CreatePoolFlags::NONE,
        CreatePoolFlags::CREATE_ONLY,
        CreatePoolFlags::INDEXED,
        CreatePoolFlags::CREATE_ONLY.union(CreatePoolFlags::INDEXED),
    ]);
    let put_flags = select(vec![PutFlags::NONE, PutFlags::CREATE_ONLY, PutFlags::UPDATE_ONLY]);
    // Every flag combination each invocation message accepts, except create-on-demand, which
    // `invoke_ado` below adds with a key and a size.
    let invoke_flags = select(vec![
        InvokeFlags::NONE,
        InvokeFlags::READ_ONLY,
        InvokeFlags::ZERO_NEW_VALUE,
        InvokeFlags::FIRE_AND_FORGET,
        InvokeFlags::READ_ONLY.union(InvokeFlags::FIRE_AND_FORGET),
    ]);
    let invoke_put_flags = select(vec![
        InvokeFlags::NONE,
        InvokeFlags::READ_ONLY,
        InvokeFlags::NO_OVERWRITE,
        InvokeFlags::DETACHED,
        InvokeFlags::NO_OVERWRITE.union(InvokeFlags::DETACHED).union(InvokeFlags::ZERO_NEW_VALUE),
        InvokeFlags::DETACHED.union(InvokeFlags::FIRE_AND_FORGET),
    ]);
    prop_oneof![
        (any::<u16>(), text(), byte_string(max_len))
            .prop_map(|(version, client_name, auth)| { OwnedRequest::Hello { version, client_name, auth } }),
        (pool_name(), any::<u64>(), any::<u64>(), create_flags, plugin_chain()).prop_map(
            |(name, size_bytes, expected_objects, flags, plugins)| {
                // The chain's flag travels with the chain: the encoder sets it exactly when there is one.
                let flags = if plugins.is_empty() { flags } else { flags.union(CreatePoolFlags::PLUGINS) };
                OwnedRequest::CreatePool { name, size_bytes, expected_objects, flags, plugins }
            }
        ),
        pool_name().prop_map(|name| OwnedRequest::OpenPool { name }),
        any::<u64>().prop_map(|pool| OwnedRequest::ClosePool { pool }),
        pool_name().prop_map(|name| OwnedRequest::DeletePool { name }),
        Just(OwnedRequest::ListPools),
        option::of(pool_name()).prop_map(|name| OwnedRequest::DescribePools { name }),
        (any::<u64>(), put_flags, byte_string(max_len), byte_string(max_len))
            .prop_map(|(pool, flags, key, value)| OwnedRequest::Put { pool, flags, key, value }),
        (any::<u64>(), byte_string(max_len)).prop_map(|(pool, key)| OwnedRequest::Get { pool, key }),
        (any::<u64>(), byte_string(max_len)).prop_map(|(pool, key)| OwnedRequest::Erase { pool, key }),
        any::<u64>().prop_map(|pool| OwnedRequest::Count { pool }),
        (any::<u64>(), select(Attribute::ALL.to_vec()), byte_string(max_len))
            .prop_map(|(pool, attribute, key)| OwnedRequest::GetAttribute { pool, attribute, key }),
        (
            any::<u64>(),
            select(FindKind::ALL.to_vec()),
            byte_string(max_len),
            option::of(byte_string(max_len)),
            1..=1024u32
        )
            .prop_map(|(pool, kind, pattern, after, limit)| OwnedRequest::Find {
                pool,
                kind,
                pattern,
                after,
                limit
            }),
        Just(OwnedRequest::GetStatistics),
        (any::<u64>(), invoke_flags, any::<Option<u64>>(), byte_string(max_len), byte_string(max_len)).prop_map(
            |(pool, flags, create_size, mut key, payload)| {
                // A created value needs a key and fits the value limit; no size without creating.
                let (flags, value_size) = match create_size {
                    Some(size) => {
                        if key.is_empty() {
                            key.push(b'k');
                        }
                        (flags.union(InvokeFlags::CREATE_ON_DEMAND), size % (VALUE_INLINE_BYTES_MAX as u64 + 1))
                    }
                    None => (flags, 0),
                };
                OwnedRequest::InvokeAdo { pool, flags, key, payload, value_size }
            }
        ),
        (
            any::<u64>(),
            invoke_put_flags,
            vec(any::<u8>(), 1..=max_len.max(1)),
            byte_string(max_len),
            byte_string(max_len)
        )
            .prop_map(|(pool, flags, key, value, payload)| OwnedRequest::InvokePutAdo {
                pool,
                flags,
                key,
                value,
                payload
            }),
        Just(OwnedRequest::NodeInfo),
        Just(OwnedRequest::ClusterMap),
        cluster_admin().prop_map(OwnedRequest::ClusterAdmin),
    ]
}

fn response() -> impl Strategy<Value = OwnedResponse> {
    let limits = (any::<u32>(), any::<u32>())
        .prop_map(|(key_bytes_max, value_bytes_max)| Limits { key_bytes_max, value_bytes_max });
    let memory =
        any::<[u64; 6]>().prop_map(|[table_buckets, table_bytes, slab_bytes, large_bytes, other_bytes, index_bytes]| {
            PoolMemory { table_buckets, table_bytes, slab_bytes, large_bytes, other_bytes, index_bytes }
        });
    let pool_info = || (text(), any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>(), memory.clone(), plugin_chain());
    prop_oneof![
        (any::<u16>(), any::<u16>(), limits, vec(text(), 0..8)).prop_map(
            |(version, shard_index, limits, shard_addresses)| OwnedResponse::Hello {
                version,
                shard_index,
                limits,
                shard_addresses
            }
        ),
        (any::<u64>(), any::<bool>()).prop_map(|(pool, created)| OwnedResponse::PoolCreated { pool, created }),
        any::<u64>().prop_map(|pool| OwnedResponse::PoolOpened { pool }),
        Just(OwnedResponse::PoolClosed),
        Just(OwnedResponse::PoolDeleted),
        vec(pool_info(), 0..8).prop_map(OwnedResponse::Pools),
        vec((pool_info(), any::<bool>(), any::<bool>()), 0..8).prop_map(OwnedResponse::PoolDescriptions),
        Just(OwnedResponse::Stored),
        byte_string(1024).prop_map(OwnedResponse::Value),
        Just(OwnedResponse::Erased),
        any::<u64>().prop_map(OwnedResponse::Count),
        any::<u64>().prop_map(OwnedResponse::Attribute),
        (vec(byte_string(64), 0..16), option::of(byte_string(64)))
            .prop_map(|(keys, next)| OwnedResponse::Found { keys, next }),
        vec((text(), any::<u64>()), 0..12).prop_map(OwnedResponse::Statistics),
        (select(vec![Opcode::InvokeAdo, Opcode::InvokePutAdo]), vec((any::<u16>(), byte_string(64)), 0..8))
            .prop_map(|(answers, buffers)| OwnedResponse::Invoked { answers, buffers }),
        (select(ErrorCode::ALL.to_vec()), text()).prop_map(|(code, message)| OwnedResponse::Error { code, message }),
        cluster_response().prop_map(OwnedResponse::Cluster),
    ]
}

/// Opcodes worth hitting often: every request, its response, and `error`, beside arbitrary ones.
fn opcode() -> impl Strategy<Value = u16> {
    let known: Vec<u16> = Opcode::REQUESTS
        .iter()
        .flat_map(|op| [*op as u16, op.response_code()])
        .chain([Opcode::Error as u16, Opcode::NotLeader as u16])
        .collect();
    prop_oneof![select(known), any::<u16>()]
}

fn header() -> impl Strategy<Value = Header> {
    (any::<u32>(), opcode(), prop_oneof![Just(0u16), 1..=0x3Fu16, any::<u16>()], any::<u64>())
        .prop_map(|(body_len, opcode, flags, request_id)| Header { body_len, opcode, flags, request_id })
}

fn encode_request(request: &Request<'_>, request_id: u64) -> BytesMut {
    let mut out = BytesMut::new();
    request.encode(request_id, &mut out);
    out
}

/// Decodes `frame` both as a request and as a response; only a panic can fail this.
fn decode_both_ways(frame: &[u8]) {
    if let Some(header) = Header::parse(frame) {
        let body = &frame[HEADER_BYTES..];
        let _ = Request::decode(&header, body);
        let _ = Response::decode(&header, body);
    }
}

/// Feeds `chunks` to a reader that buffers input, parses a header as soon as one has arrived, then
/// waits for `body_len` bytes of body and decodes the request. Checks that the requests come out
/// in order, equal to `expected` and with their request ids, and that nothing is left over.
fn reassemble<'c>(
    chunks: impl IntoIterator<Item = &'c [u8]>,
    expected: &[(OwnedRequest, u64)],
) -> Result<(), TestCaseError> {
    let mut buffer = Vec::new();
    let mut decoded = 0;
    for chunk in chunks {
        buffer.extend_from_slice(chunk);
        while let Some(header) = Header::parse(&buffer) {
            if buffer.len() < header.frame_len() {
                break;
            }
            let (request, request_id) = expected.get(decoded).ok_or_else(|| TestCaseError::fail("too many frames"))?;
            let body = &buffer[HEADER_BYTES..header.frame_len()];
            prop_assert_eq!(header.request_id, *request_id);
            prop_assert_eq!(Request::decode(&header, body), Ok(request.borrow()));
            buffer.drain(..header.frame_len());
            decoded += 1;
        }
    }
    prop_assert_eq!(decoded, expected.len());
    prop_assert!(buffer.is_empty(), "{} bytes left over", buffer.len());
    Ok(())
}

proptest! {
    #[test]
    fn decode_never_panics_on_arbitrary_input(header in header(), body in byte_string(512)) {
        let _ = Request::decode(&header, &body);
        let _ = Response::decode(&header, &body);
    }

    #[test]
    fn decode_never_panics_on_damaged_frames(
        request in request(300),
        response in response(),
        request_id in any::<u64>(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let frames = vec![encode_request(&request.borrow(), request_id), response.encode(request_id)];
        for frame in frames {
            let index = at.index(frame.len());
            decode_both_ways(&frame[..index]);
            let mut changed = frame.to_vec();
            changed[index] = byte;
            decode_both_ways(&changed);
        }
    }

    #[test]
    fn requests_round_trip(request in request(1024), request_id in any::<u64>()) {
        let request = request.borrow();
        let frame = encode_request(&request, request_id);
        let header = Header::parse(&frame).expect("an encoded frame starts with a whole header");
        prop_assert_eq!(header.frame_len(), frame.len());
        prop_assert_eq!(header.request_id, request_id);
        prop_assert_eq!(Request::decode(&header, &frame[HEADER_BYTES..]), Ok(request));
    }

    #[test]
    fn responses_round_trip(response in response(), request_id in any::<u64>()) {
        let frame = response.encode(request_id);
        let response = response.borrow();
        let header = Header::parse(&frame).expect("an encoded frame starts with a whole header");
        prop_assert_eq!(header.frame_len(), frame.len());
        prop_assert_eq!(header.request_id, request_id);
        prop_assert_eq!(Response::decode(&header, &frame[HEADER_BYTES..]), Ok(response));
    }

    #[test]
    fn split_streams_reassemble(requests in vec((request(48), any::<u64>()), 1..6)) {
        let mut stream = BytesMut::new();
        for (request, request_id) in &requests {
            request.borrow().encode(*request_id, &mut stream);
        }
        for split in 0..=stream.len() {
            let (first, second) = stream.split_at(split);
            reassemble([first, second], &requests)?;
        }
        reassemble(stream.chunks(1), &requests)?;
    }
}
