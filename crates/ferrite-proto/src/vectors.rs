//! The protocol test vectors' JSON (`testdata/protocol/vectors.json`, see `docs/protocol.md`,
//! "Test vectors") mapped to and from this crate's messages: byte strings in hex, flags and codes
//! by name. This crate's conformance test and every client's bindings (the Python package checks
//! the vectors through its extension) read the vectors with this one mapping, so a wire change
//! breaks all of them at once. Behind the `vectors` feature: it needs `serde_json`.

use serde_json::{json, Map, Value};

use crate::{
    Attribute, BackupReport, ClusterAdmin, ClusterGroup, ClusterMap, ClusterNode, ClusterStatus, CreatePoolFlags,
    EndTransferFlags, ErrorCode, FindKind, FollowerProgress, Header, HelloReply, InvokeBuffer, InvokeFlags, Limits,
    NodeInfo, NotLeader, Opcode, PoolDescription, PoolHandle, PoolInfo, PoolMemory, PoolSetting, PoolSettings,
    PutFlags, RaftRole, Request, Response, Statistic,
};

const PUT_FLAGS: [(&str, PutFlags); 4] = [
    ("create_only", PutFlags::CREATE_ONLY),
    ("update_only", PutFlags::UPDATE_ONLY),
    ("sync", PutFlags::SYNC),
    ("async", PutFlags::ASYNC),
];

const END_TRANSFER_FLAGS: [(&str, EndTransferFlags); 1] = [("abort", EndTransferFlags::ABORT)];

const CREATE_POOL_FLAGS: [(&str, CreatePoolFlags); 4] = [
    ("create_only", CreatePoolFlags::CREATE_ONLY),
    ("indexed", CreatePoolFlags::INDEXED),
    ("async", CreatePoolFlags::ASYNC),
    ("plugins", CreatePoolFlags::PLUGINS),
];

const INVOKE_FLAGS: [(&str, InvokeFlags); 6] = [
    ("create_on_demand", InvokeFlags::CREATE_ON_DEMAND),
    ("read_only", InvokeFlags::READ_ONLY),
    ("no_overwrite", InvokeFlags::NO_OVERWRITE),
    ("zero_new_value", InvokeFlags::ZERO_NEW_VALUE),
    ("detached", InvokeFlags::DETACHED),
    ("fire_and_forget", InvokeFlags::FIRE_AND_FORGET),
];

/// The names of a described `pools` entry's settings bits.
const POOL_SETTINGS: [(&str, u16); 2] = [("indexed", PoolSettings::INDEXED), ("async", PoolSettings::ASYNC)];

/// A `pools` entry's listing fields.
fn pool_info(entry: &Value) -> Result<PoolInfo<'_>, String> {
    Ok(PoolInfo {
        name: entry_str(entry, "name")?,
        objects: entry_u64(entry, "objects")?,
        size_bytes: entry_u64(entry, "size_bytes")?,
        used_bytes: entry_u64(entry, "used_bytes")?,
        open_count: u32::try_from(entry_u64(entry, "open_count")?).map_err(|e| e.to_string())?,
        memory: PoolMemory {
            table_buckets: entry_u64(entry, "table_buckets")?,
            table_bytes: entry_u64(entry, "table_bytes")?,
            slab_bytes: entry_u64(entry, "slab_bytes")?,
            large_bytes: entry_u64(entry, "large_bytes")?,
            other_bytes: entry_u64(entry, "other_bytes")?,
            index_bytes: entry_u64(entry, "index_bytes")?,
        },
        plugins: entry_str(entry, "plugins")?,
    })
}

fn pool_info_json(p: &PoolInfo<'_>) -> Value {
    json!({
        "name": p.name, "objects": p.objects, "size_bytes": p.size_bytes, "used_bytes": p.used_bytes,
        "open_count": p.open_count, "table_buckets": p.memory.table_buckets,
        "table_bytes": p.memory.table_bytes, "slab_bytes": p.memory.slab_bytes,
        "large_bytes": p.memory.large_bytes, "other_bytes": p.memory.other_bytes,
        "index_bytes": p.memory.index_bytes, "plugins": p.plugins,
    })
}

/// A cluster node as `cluster_init`, `cluster_add_node` and `node_info` carry it, or as a
/// `cluster_map` entry: the same fields, named alike.
fn cluster_node(entry: &Value) -> Result<ClusterNode, String> {
    Ok(ClusterNode {
        node_id: entry_u64(entry, "node_id")?,
        peer: entry_str(entry, "peer")?.to_owned(),
        native: entry_str(entry, "native")?.to_owned(),
        resp: entry_str(entry, "resp")?.to_owned(),
    })
}

fn cluster_node_json(node: &ClusterNode) -> Value {
    json!({"node_id": node.node_id, "peer": node.peer, "native": node.native, "resp": node.resp})
}

/// A list of node ids (a group's voters or learners).
fn node_ids(entry: &Value, field: &str) -> Result<Vec<u64>, String> {
    entry
        .get(field)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("entry field {field:?} is not a list"))?
        .iter()
        .map(|id| id.as_u64().ok_or_else(|| format!("an id of {field:?} is not an unsigned integer")))
        .collect()
}

/// The entries of the list `field` of `f`, each mapped by `entry`.
fn entries<T>(f: &Fields<'_>, field: &str, entry: fn(&Value) -> Result<T, String>) -> Result<Vec<T>, String> {
    f.array(field)?.iter().map(entry).collect()
}

/// Bytes as lowercase hex, as the vectors write byte strings.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes a vector's hex string stands for.
pub fn unhex(text: &str) -> Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) {
        return Err(format!("{text:?} is not pairs of hex digits"));
    }
    (0..text.len())
        .step_by(2)
        .map(|at| {
            text.get(at..at + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
                .ok_or_else(|| format!("{text:?} is not pairs of hex digits"))
        })
        .collect()
}

/// The names of the flags set in `bits`, in bit order.
fn flag_names(bits: u16, known: &[(&str, u16)]) -> Value {
    Value::from(known.iter().filter(|(_, flag)| bits & flag != 0).map(|(name, _)| *name).collect::<Vec<_>>())
}

/// A JSON message with its byte strings decoded from hex up front, so messages can borrow them.
#[derive(Debug)]
pub struct Fields<'j> {
    /// The message whole, for the messages whose fields are an entry's (`node_info`).
    message: &'j Value,
    object: &'j Map<String, Value>,
    bytes: Vec<(&'static str, Vec<u8>)>,
    /// A `found` response's `keys`.
    keys: Vec<Vec<u8>>,
    /// An `invoked` response's `buffers`: layer and data.
    buffers: Vec<(u16, Vec<u8>)>,
}

impl<'j> Fields<'j> {
    /// Reads a vector's `message` object.
    pub fn new(message: &'j Value) -> Result<Fields<'j>, String> {
        let object = message.as_object().ok_or("the message is not a JSON object")?;
        let mut bytes = Vec::new();
        for field in ["key", "value", "auth", "pattern", "after", "next", "payload", "data"] {
            if let Some(Value::String(text)) = object.get(field) {
                bytes.push((field, unhex(text)?));
            }
        }
        let keys = match object.get("keys") {
            Some(Value::Array(keys)) => {
                keys.iter().map(|k| unhex(k.as_str().ok_or("a key is not a hex string")?)).collect::<Result<_, _>>()?
            }
            _ => Vec::new(),
        };
        let buffers = match object.get("buffers") {
            Some(Value::Array(buffers)) => buffers
                .iter()
                .map(|b| {
                    let layer = u16::try_from(entry_u64(b, "layer")?).map_err(|e| format!("\"layer\": {e}"))?;
                    Ok((layer, unhex(entry_str(b, "data")?)?))
                })
                .collect::<Result<_, String>>()?,
            _ => Vec::new(),
        };
        Ok(Fields { message, object, bytes, keys, buffers })
    }

    fn get(&self, field: &str) -> Result<&'j Value, String> {
        self.object.get(field).ok_or_else(|| format!("the message has no field {field:?}"))
    }

    fn str(&self, field: &str) -> Result<&'j str, String> {
        self.get(field)?.as_str().ok_or_else(|| format!("{field:?} is not a string"))
    }

    fn u64(&self, field: &str) -> Result<u64, String> {
        self.get(field)?.as_u64().ok_or_else(|| format!("{field:?} is not an unsigned 64-bit integer"))
    }

    fn u32(&self, field: &str) -> Result<u32, String> {
        u32::try_from(self.u64(field)?).map_err(|e| format!("{field:?}: {e}"))
    }

    fn u16(&self, field: &str) -> Result<u16, String> {
        u16::try_from(self.u64(field)?).map_err(|e| format!("{field:?}: {e}"))
    }

    fn pool(&self) -> Result<PoolHandle, String> {
        self.u64("pool").map(PoolHandle)
    }

    fn bytes(&self, field: &str) -> Result<&[u8], String> {
        self.bytes
            .iter()
            .find(|(name, _)| *name == field)
            .map(|(_, bytes)| bytes.as_slice())
            .ok_or_else(|| format!("the message has no hex string field {field:?}"))
    }

    fn optional_bytes(&self, field: &str) -> Result<Option<&[u8]>, String> {
        match self.get(field)? {
            Value::Null => Ok(None),
            _ => self.bytes(field).map(Some),
        }
    }

    fn array(&self, field: &str) -> Result<&'j Vec<Value>, String> {
        self.get(field)?.as_array().ok_or_else(|| format!("{field:?} is not an array"))
    }

    /// The bits of the flags the `flags` list names.
    fn flags(&self, known: &[(&str, u16)]) -> Result<u16, String> {
        let mut bits = 0;
        for flag in self.array("flags")? {
            let flag = flag.as_str().ok_or("a flag is not a string")?;
            let (_, flag_bits) =
                known.iter().find(|(name, _)| *name == flag).ok_or_else(|| format!("unknown flag {flag:?}"))?;
            bits |= flag_bits;
        }
        Ok(bits)
    }
}

fn entry_str<'j>(entry: &'j Value, field: &str) -> Result<&'j str, String> {
    entry.get(field).and_then(Value::as_str).ok_or_else(|| format!("entry field {field:?} is not a string"))
}

fn entry_u64(entry: &Value, field: &str) -> Result<u64, String> {
    entry.get(field).and_then(Value::as_u64).ok_or_else(|| format!("entry field {field:?} is not an unsigned integer"))
}

fn bits<T: Copy>(table: &[(&'static str, T)], to_bits: fn(T) -> u16) -> Vec<(&'static str, u16)> {
    table.iter().map(|(name, flag)| (*name, to_bits(*flag))).collect()
}

fn by_name<T: Copy>(all: &[T], name: &str, name_of: fn(T) -> &'static str, what: &str) -> Result<T, String> {
    all.iter().copied().find(|item| name_of(*item) == name).ok_or_else(|| format!("unknown {what} {name:?}"))
}

/// The request a vector's message describes.
pub fn request<'f>(f: &'f Fields<'_>) -> Result<Request<'f>, String> {
    let invoke_flags =
        || InvokeFlags::from_bits(f.flags(&bits(&INVOKE_FLAGS, InvokeFlags::bits))?).map_err(|e| e.to_string());
    let put_flags = || PutFlags::from_bits(f.flags(&bits(&PUT_FLAGS, PutFlags::bits))?).map_err(|e| e.to_string());
    Ok(match f.str("type")? {
        "hello" => {
            Request::Hello { version: f.u16("version")?, client_name: f.str("client_name")?, auth: f.bytes("auth")? }
        }
        "create_pool" => Request::CreatePool {
            name: f.str("name")?,
            size_bytes: f.u64("size_bytes")?,
            expected_objects: f.u64("expected_objects")?,
            flags: CreatePoolFlags::from_bits(f.flags(&bits(&CREATE_POOL_FLAGS, CreatePoolFlags::bits))?)
                .map_err(|e| e.to_string())?,
            plugins: f.str("plugins")?,
        },
        "open_pool" => Request::OpenPool { name: f.str("name")? },
        "close_pool" => Request::ClosePool { pool: f.pool()? },
        "delete_pool" => Request::DeletePool { name: f.str("name")? },
        "configure_pool" => {
            let bits = f.flags(&[("add_index", 0x0001), ("remove_index", 0x0002)])?;
            Request::ConfigurePool {
                name: f.str("name")?,
                setting: PoolSetting::from_flags(bits).map_err(|e| e.to_string())?,
            }
        }
        "list_pools" => match f.flags(&[("describe", 0x0001)])? {
            0 => Request::ListPools,
            _ => Request::DescribePools {
                name: match f.get("name")? {
                    Value::Null => None,
                    _ => Some(f.str("name")?),
                },
            },
        },
        "put" => Request::Put { pool: f.pool()?, flags: put_flags()?, key: f.bytes("key")?, value: f.bytes("value")? },
        "get" => Request::Get { pool: f.pool()?, key: f.bytes("key")? },
        "erase" => Request::Erase { pool: f.pool()?, key: f.bytes("key")? },
        "count" => Request::Count { pool: f.pool()? },
        "get_attribute" => Request::GetAttribute {
            pool: f.pool()?,
            attribute: by_name(&Attribute::ALL, f.str("attribute")?, Attribute::name, "attribute")?,
            key: f.bytes("key")?,
        },
        "find" => Request::Find {
            pool: f.pool()?,
            kind: by_name(&FindKind::ALL, f.str("kind")?, FindKind::name, "find kind")?,
            pattern: f.bytes("pattern")?,
            after: f.optional_bytes("after")?,
            limit: f.u32("limit")?,
        },
        "get_statistics" => Request::GetStatistics,
        "backup" => Request::Backup { dir: f.str("dir")? },
        "invoke_ado" => Request::InvokeAdo {
            pool: f.pool()?,
            flags: invoke_flags()?,
            key: f.bytes("key")?,
            payload: f.bytes("payload")?,
            value_size: f.u64("value_size")?,
        },
        "invoke_put_ado" => Request::InvokePutAdo {
            pool: f.pool()?,
            flags: invoke_flags()?,
            key: f.bytes("key")?,
            value: f.bytes("value")?,
            payload: f.bytes("payload")?,
        },
        "put_direct" => Request::PutDirect {
            pool: f.pool()?,
            flags: put_flags()?,
            transfer: f.u64("transfer")?,
            length: f.u64("length")?,
            key: f.bytes("key")?,
        },
        "direct_write" => {
            Request::DirectWrite { transfer: f.u64("transfer")?, offset: f.u64("offset")?, bytes: f.bytes("data")? }
        }
        "get_direct" => Request::GetDirect { pool: f.pool()?, transfer: f.u64("transfer")?, key: f.bytes("key")? },
        "direct_read" => {
            Request::DirectRead { transfer: f.u64("transfer")?, offset: f.u64("offset")?, length: f.u32("length")? }
        }
        "end_transfer" => Request::EndTransfer {
            transfer: f.u64("transfer")?,
            flags: EndTransferFlags::from_bits(f.flags(&bits(&END_TRANSFER_FLAGS, EndTransferFlags::bits))?)
                .map_err(|e| e.to_string())?,
        },
        "put_offset" => Request::PutOffset {
            pool: f.pool()?,
            flags: put_flags()?,
            offset: f.u64("offset")?,
            key: f.bytes("key")?,
            bytes: f.bytes("data")?,
        },
        "node_info" => Request::NodeInfo,
        "cluster_map" => Request::ClusterMap,
        "cluster_init" => Request::ClusterAdmin(ClusterAdmin::Init {
            group: f.u16("group")?,
            members: entries(f, "members", cluster_node)?,
        }),
        "cluster_add_node" => {
            Request::ClusterAdmin(ClusterAdmin::AddNode { group: f.u16("group")?, node: cluster_node(f.get("node")?)? })
        }
        "cluster_remove_node" => {
            Request::ClusterAdmin(ClusterAdmin::RemoveNode { group: f.u16("group")?, node_id: f.u64("node_id")? })
        }
        "cluster_transfer_leader" => {
            Request::ClusterAdmin(ClusterAdmin::TransferLeader { group: f.u16("group")?, to: f.u64("to")? })
        }
        "cluster_status" => Request::ClusterAdmin(ClusterAdmin::Status { group: f.u16("group")? }),
        other => return Err(format!("unknown request type {other:?}")),
    })
}

/// A request as a vector's message.
pub fn request_json(request: &Request<'_>) -> Value {
    match request {
        Request::Hello { version, client_name, auth } => {
            json!({"type": "hello", "version": version, "client_name": client_name, "auth": hex(auth)})
        }
        Request::CreatePool { name, size_bytes, expected_objects, flags, plugins } => json!({
            "type": "create_pool", "name": name, "flags": flag_names(flags.bits(), &bits(&CREATE_POOL_FLAGS, CreatePoolFlags::bits)),
            "size_bytes": size_bytes, "expected_objects": expected_objects, "plugins": plugins,
        }),
        Request::OpenPool { name } => json!({"type": "open_pool", "name": name}),
        Request::ClosePool { pool } => json!({"type": "close_pool", "pool": pool.0}),
        Request::DeletePool { name } => json!({"type": "delete_pool", "name": name}),
        Request::ConfigurePool { name, setting } => {
            json!({"type": "configure_pool", "name": name, "flags": [setting.name()]})
        }
        Request::ListPools => json!({"type": "list_pools", "flags": []}),
        Request::DescribePools { name } => json!({"type": "list_pools", "flags": ["describe"], "name": name}),
        Request::Put { pool, flags, key, value } => json!({
            "type": "put", "pool": pool.0, "flags": flag_names(flags.bits(), &bits(&PUT_FLAGS, PutFlags::bits)),
            "key": hex(key), "value": hex(value),
        }),
        Request::Get { pool, key } => json!({"type": "get", "pool": pool.0, "key": hex(key)}),
        Request::Erase { pool, key } => json!({"type": "erase", "pool": pool.0, "key": hex(key)}),
        Request::Count { pool } => json!({"type": "count", "pool": pool.0}),
        Request::GetAttribute { pool, attribute, key } => {
            json!({"type": "get_attribute", "pool": pool.0, "attribute": attribute.name(), "key": hex(key)})
        }
        Request::Find { pool, kind, pattern, after, limit } => json!({
            "type": "find", "pool": pool.0, "kind": kind.name(), "limit": limit, "pattern": hex(pattern),
            "after": after.map(hex),
        }),
        Request::GetStatistics => json!({"type": "get_statistics"}),
        Request::Backup { dir } => json!({"type": "backup", "dir": dir}),
        Request::InvokeAdo { pool, flags, key, payload, value_size } => json!({
            "type": "invoke_ado", "pool": pool.0, "flags": flag_names(flags.bits(), &bits(&INVOKE_FLAGS, InvokeFlags::bits)),
            "key": hex(key), "payload": hex(payload), "value_size": value_size,
        }),
        Request::InvokePutAdo { pool, flags, key, value, payload } => json!({
            "type": "invoke_put_ado", "pool": pool.0,
            "flags": flag_names(flags.bits(), &bits(&INVOKE_FLAGS, InvokeFlags::bits)),
            "key": hex(key), "value": hex(value), "payload": hex(payload),
        }),
        Request::PutDirect { pool, flags, transfer, length, key } => json!({
            "type": "put_direct", "pool": pool.0, "flags": flag_names(flags.bits(), &bits(&PUT_FLAGS, PutFlags::bits)),
            "transfer": transfer, "length": length, "key": hex(key),
        }),
        Request::DirectWrite { transfer, offset, bytes } => {
            json!({"type": "direct_write", "transfer": transfer, "offset": offset, "data": hex(bytes)})
        }
        Request::GetDirect { pool, transfer, key } => {
            json!({"type": "get_direct", "pool": pool.0, "transfer": transfer, "key": hex(key)})
        }
        Request::DirectRead { transfer, offset, length } => {
            json!({"type": "direct_read", "transfer": transfer, "offset": offset, "length": length})
        }
        Request::EndTransfer { transfer, flags } => json!({
            "type": "end_transfer", "transfer": transfer,
            "flags": flag_names(flags.bits(), &bits(&END_TRANSFER_FLAGS, EndTransferFlags::bits)),
        }),
        Request::PutOffset { pool, flags, offset, key, bytes } => json!({
            "type": "put_offset", "pool": pool.0, "flags": flag_names(flags.bits(), &bits(&PUT_FLAGS, PutFlags::bits)),
            "offset": offset, "key": hex(key), "data": hex(bytes),
        }),
        Request::NodeInfo => json!({"type": "node_info"}),
        Request::ClusterMap => json!({"type": "cluster_map"}),
        Request::ClusterAdmin(admin) => match admin {
            ClusterAdmin::Init { group, members } => json!({
                "type": "cluster_init", "group": group,
                "members": members.iter().map(cluster_node_json).collect::<Vec<_>>(),
            }),
            ClusterAdmin::AddNode { group, node } => {
                json!({"type": "cluster_add_node", "group": group, "node": cluster_node_json(node)})
            }
            ClusterAdmin::RemoveNode { group, node_id } => {
                json!({"type": "cluster_remove_node", "group": group, "node_id": node_id})
            }
            ClusterAdmin::TransferLeader { group, to } => {
                json!({"type": "cluster_transfer_leader", "group": group, "to": to})
            }
            ClusterAdmin::Status { group } => json!({"type": "cluster_status", "group": group}),
        },
    }
}

/// The response a vector's message describes, and the request it answers where the response
/// alone does not say (an `invoked` response answers either invocation, a `transfer_opened` one
/// either `put_direct` or `get_direct`; a `value` or `stored` one names `direct_read` or
/// `put_offset` in `answers` when it answers that instead of `get` or `put`).
pub fn response<'f>(f: &'f Fields<'_>) -> Result<(Response<'f>, Option<Opcode>), String> {
    // The request a response that may answer another one names in `answers`, if any.
    let answers = |allowed: &[(&str, Opcode)]| -> Result<Option<Opcode>, String> {
        let Some(answers) = f.object.get("answers") else { return Ok(None) };
        let answers = answers.as_str().ok_or("\"answers\" is not a string")?;
        let found = allowed.iter().find(|(name, _)| *name == answers).map(|(_, opcode)| *opcode);
        found.map(Some).ok_or_else(|| format!("\"answers\" names {answers:?}, which this response does not answer"))
    };
    let response = match f.str("type")? {
        "hello" => {
            let shard_addresses = f
                .array("shard_addresses")?
                .iter()
                .map(|a| a.as_str().ok_or("a shard address is not a string"))
                .collect::<Result<Vec<_>, _>>()?;
            if usize::from(f.u16("shard_count")?) != shard_addresses.len() {
                return Err("shard_count differs from the number of shard_addresses".to_owned());
            }
            Response::Hello(HelloReply {
                version: f.u16("version")?,
                shard_index: f.u16("shard_index")?,
                limits: Limits { key_bytes_max: f.u32("key_bytes_max")?, value_bytes_max: f.u32("value_bytes_max")? },
                shard_addresses,
            })
        }
        "pool_created" => Response::PoolCreated {
            pool: f.pool()?,
            created: f.get("created")?.as_bool().ok_or("\"created\" is not a boolean")?,
        },
        "pool_opened" => Response::PoolOpened { pool: f.pool()? },
        "pool_closed" => Response::PoolClosed,
        "pool_deleted" => Response::PoolDeleted,
        "pool_configured" => Response::PoolConfigured,
        "pools" => {
            let entries = f.array("pools")?;
            match f.flags(&[("describe", 0x0001)])? {
                0 => Response::Pools(entries.iter().map(pool_info).collect::<Result<_, String>>()?),
                _ => Response::PoolDescriptions(
                    entries
                        .iter()
                        .map(|entry| {
                            let names: Vec<&str> = entry
                                .get("settings")
                                .and_then(Value::as_array)
                                .ok_or("entry field \"settings\" is not a list")?
                                .iter()
                                .map(|name| name.as_str().ok_or("a setting is not a string"))
                                .collect::<Result<_, _>>()?;
                            let mut bits = 0;
                            for name in names {
                                let (_, bit) = POOL_SETTINGS
                                    .iter()
                                    .find(|(known, _)| *known == name)
                                    .ok_or_else(|| format!("unknown setting {name:?}"))?;
                                bits |= bit;
                            }
                            Ok(PoolDescription {
                                info: pool_info(entry)?,
                                settings: PoolSettings::from_bits(bits).map_err(|e| e.to_string())?,
                            })
                        })
                        .collect::<Result<_, String>>()?,
                ),
            }
        }
        "stored" => return Ok((Response::Stored, answers(&[("put_offset", Opcode::PutOffset)])?)),
        "value" => return Ok((Response::Value(f.bytes("value")?), answers(&[("direct_read", Opcode::DirectRead)])?)),
        "erased" => Response::Erased,
        "count" => Response::Count(f.u64("count")?),
        "attribute" => Response::Attribute(f.u64("value")?),
        "found" => {
            Response::Found { keys: f.keys.iter().map(Vec::as_slice).collect(), next: f.optional_bytes("next")? }
        }
        "statistics" => Response::Statistics(
            f.array("counters")?
                .iter()
                .map(|entry| Ok(Statistic { name: entry_str(entry, "name")?, value: entry_u64(entry, "value")? }))
                .collect::<Result<_, String>>()?,
        ),
        "backed_up" => {
            Response::BackedUp(BackupReport { lsn: f.u64("lsn")?, files: f.u64("files")?, bytes: f.u64("bytes")? })
        }
        "invoked" => {
            let answers = match f.str("answers")? {
                "invoke_ado" => Opcode::InvokeAdo,
                "invoke_put_ado" => Opcode::InvokePutAdo,
                other => return Err(format!("\"answers\" names {other:?}, not an invocation")),
            };
            let buffers = f.buffers.iter().map(|(layer, data)| InvokeBuffer { layer: *layer, data }).collect();
            return Ok((Response::Invoked { buffers }, Some(answers)));
        }
        "transfer_opened" => {
            let opened = Response::TransferOpened { length: f.u64("length")? };
            let answers = answers(&[("put_direct", Opcode::PutDirect), ("get_direct", Opcode::GetDirect)])?;
            return Ok((
                opened,
                Some(answers.ok_or("a transfer_opened response names put_direct or get_direct in \"answers\"")?),
            ));
        }
        "written" => Response::Written,
        "transfer_ended" => Response::TransferEnded,
        "node_info" => {
            Response::NodeInfo(NodeInfo { node: cluster_node(f.message)?, cluster_id: f.str("cluster_id")?.to_owned() })
        }
        "cluster_map" => {
            let groups = entries(f, "groups", |entry| {
                Ok(ClusterGroup {
                    leader: entry_u64(entry, "leader")?,
                    term: entry_u64(entry, "term")?,
                    voters: node_ids(entry, "voters")?,
                    learners: node_ids(entry, "learners")?,
                })
            })?;
            if usize::from(f.u16("shard_count")?) != groups.len() {
                return Err("shard_count differs from the number of groups".to_owned());
            }
            Response::ClusterMap(ClusterMap {
                version: f.u64("version")?,
                cluster_id: f.str("cluster_id")?.to_owned(),
                nodes: entries(f, "nodes", cluster_node)?,
                groups,
            })
        }
        "cluster_initialized" => Response::ClusterInitialized,
        "node_added" => Response::NodeAdded,
        "node_removed" => Response::NodeRemoved,
        "leader_transferred" => Response::LeaderTransferred,
        "cluster_status" => Response::ClusterStatus(ClusterStatus {
            node_id: f.u64("node_id")?,
            role: by_name(&RaftRole::ALL, f.str("role")?, RaftRole::name, "role")?,
            leader: f.u64("leader")?,
            term: f.u64("term")?,
            last_log: f.u64("last_log")?,
            committed: f.u64("committed")?,
            applied: f.u64("applied")?,
            snapshot: f.u64("snapshot")?,
            followers: entries(f, "followers", |entry| {
                Ok(FollowerProgress {
                    node_id: entry_u64(entry, "node_id")?,
                    matched: entry_u64(entry, "matched")?,
                    lag: entry_u64(entry, "lag")?,
                })
            })?,
        }),
        "not_leader" => Response::NotLeader(NotLeader {
            group: f.u16("group")?,
            leader: f.u64("leader")?,
            leader_native: f.str("leader_native")?.to_owned(),
            map_version: f.u64("map_version")?,
            message: f.str("message")?.to_owned(),
        }),
        "error" => Response::Error {
            code: by_name(&ErrorCode::ALL, f.str("code")?, ErrorCode::name, "error code")?,
            message: f.str("message")?,
        },
        other => return Err(format!("unknown response type {other:?}")),
    };
    Ok((response, None))
}

/// A response as a vector's message; `header` tells which request a response that answers more
/// than one answers (which invocation an `invoked` one, which direct transfer a `transfer_opened`
/// one, and whether a `value` or `stored` one answers `direct_read` or `put_offset`).
pub fn response_json(response: &Response<'_>, header: &Header) -> Value {
    let answers = |opcode: Opcode| header.opcode == opcode.response_code();
    match response {
        Response::Hello(reply) => json!({
            "type": "hello", "version": reply.version, "shard_index": reply.shard_index,
            "shard_count": reply.shard_addresses.len(), "key_bytes_max": reply.limits.key_bytes_max,
            "value_bytes_max": reply.limits.value_bytes_max, "shard_addresses": reply.shard_addresses,
        }),
        Response::PoolCreated { pool, created } => json!({"type": "pool_created", "pool": pool.0, "created": created}),
        Response::PoolOpened { pool } => json!({"type": "pool_opened", "pool": pool.0}),
        Response::PoolClosed => json!({"type": "pool_closed"}),
        Response::PoolDeleted => json!({"type": "pool_deleted"}),
        Response::PoolConfigured => json!({"type": "pool_configured"}),
        Response::Pools(pools) => json!({
            "type": "pools", "flags": [], "pools": pools.iter().map(pool_info_json).collect::<Vec<_>>(),
        }),
        Response::PoolDescriptions(pools) => json!({
            "type": "pools",
            "flags": ["describe"],
            "pools": pools.iter().map(|p| {
                let mut entry = pool_info_json(&p.info);
                entry["settings"] = flag_names(p.settings.bits(), &POOL_SETTINGS);
                entry
            }).collect::<Vec<_>>(),
        }),
        Response::Stored if answers(Opcode::PutOffset) => json!({"type": "stored", "answers": "put_offset"}),
        Response::Stored => json!({"type": "stored"}),
        Response::Value(value) if answers(Opcode::DirectRead) => {
            json!({"type": "value", "answers": "direct_read", "value": hex(value)})
        }
        Response::Value(value) => json!({"type": "value", "value": hex(value)}),
        Response::Erased => json!({"type": "erased"}),
        Response::Count(count) => json!({"type": "count", "count": count}),
        Response::Attribute(value) => json!({"type": "attribute", "value": value}),
        Response::Found { keys, next } => json!({
            "type": "found", "keys": keys.iter().map(|k| hex(k)).collect::<Vec<_>>(), "next": next.map(hex),
        }),
        Response::Statistics(counters) => json!({
            "type": "statistics",
            "counters": counters.iter().map(|c| json!({"name": c.name, "value": c.value})).collect::<Vec<_>>(),
        }),
        Response::BackedUp(report) => {
            json!({"type": "backed_up", "lsn": report.lsn, "files": report.files, "bytes": report.bytes})
        }
        Response::Invoked { buffers } => {
            let answers = if answers(Opcode::InvokePutAdo) { "invoke_put_ado" } else { "invoke_ado" };
            json!({
                "type": "invoked", "answers": answers,
                "buffers": buffers.iter().map(|b| json!({"layer": b.layer, "data": hex(b.data)})).collect::<Vec<_>>(),
            })
        }
        Response::TransferOpened { length } => {
            let answers = if answers(Opcode::PutDirect) { "put_direct" } else { "get_direct" };
            json!({"type": "transfer_opened", "answers": answers, "length": length})
        }
        Response::Written => json!({"type": "written"}),
        Response::TransferEnded => json!({"type": "transfer_ended"}),
        Response::NodeInfo(info) => {
            let mut message = cluster_node_json(&info.node);
            message["type"] = json!("node_info");
            message["cluster_id"] = json!(info.cluster_id);
            message
        }
        Response::ClusterMap(map) => json!({
            "type": "cluster_map", "version": map.version, "cluster_id": map.cluster_id,
            "shard_count": map.groups.len(),
            "nodes": map.nodes.iter().map(cluster_node_json).collect::<Vec<_>>(),
            "groups": map.groups.iter().map(|g| json!({
                "leader": g.leader, "term": g.term, "voters": g.voters, "learners": g.learners,
            })).collect::<Vec<_>>(),
        }),
        Response::ClusterInitialized => json!({"type": "cluster_initialized"}),
        Response::NodeAdded => json!({"type": "node_added"}),
        Response::NodeRemoved => json!({"type": "node_removed"}),
        Response::LeaderTransferred => json!({"type": "leader_transferred"}),
        Response::ClusterStatus(status) => json!({
            "type": "cluster_status", "node_id": status.node_id, "role": status.role.name(),
            "leader": status.leader, "term": status.term, "last_log": status.last_log,
            "committed": status.committed, "applied": status.applied, "snapshot": status.snapshot,
            "followers": status.followers.iter().map(|p| json!({
                "node_id": p.node_id, "matched": p.matched, "lag": p.lag,
            })).collect::<Vec<_>>(),
        }),
        Response::NotLeader(refusal) => json!({
            "type": "not_leader", "group": refusal.group, "leader": refusal.leader,
            "leader_native": refusal.leader_native, "map_version": refusal.map_version, "message": refusal.message,
        }),
        Response::Error { code, message } => json!({"type": "error", "code": code.name(), "message": message}),
    }
}
