//! Conformance of this crate to the language-neutral test vectors in `testdata/protocol/`.
//!
//! Proves that, for every vector in `vectors.json`, encoding the JSON message produces exactly the
//! vector's frame and decoding the frame gives back the same message; that every error vector is
//! rejected with its named error code; and that `shard_for_pool` agrees with every case in
//! `routing.json`. The vectors are generated from `docs/protocol.md` by an independent encoder
//! (`testdata/protocol/generate.py`), so a failure here means the crate and the specification
//! disagree. Each test checks every vector and names all the failing ones.

use std::path::PathBuf;

use bytes::BytesMut;
use ferrite_proto::{
    shard_for_pool, Attribute, CreatePoolFlags, ErrorCode, FindKind, Header, HelloReply, InvokeBuffer, InvokeFlags,
    Limits, Opcode, PoolHandle, PoolInfo, PoolMemory, PoolSetting, PutFlags, Request, Response, Statistic,
    HEADER_BYTES,
};
use serde_json::{Map, Value};

fn load(file: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/protocol").join(file);
    let text = std::fs::read_to_string(&path).expect("the test vectors are committed under testdata/protocol");
    let json: Value = serde_json::from_str(&text).expect("the test vector files are valid JSON");
    let Value::Array(items) = json else {
        panic!("{} does not hold a JSON array", path.display());
    };
    items
}

/// Runs `check` on every item and fails once, naming every item that failed.
fn check_all(what: &str, items: &[Value], check: impl Fn(&Value) -> Result<(), String>) {
    let failures: Vec<String> =
        items.iter().filter_map(|item| check(item).err().map(|why| format!("  {}: {why}", item_name(item)))).collect();
    assert!(!items.is_empty(), "no {what} found");
    assert!(failures.is_empty(), "{} of {} {what} failed:\n{}", failures.len(), items.len(), failures.join("\n"));
}

fn item_name(item: &Value) -> String {
    match item.get("name").and_then(Value::as_str) {
        Some(name) => name.to_owned(),
        None => item.to_string(),
    }
}

/// The valid vectors of `direction` (`Some("request")`, `Some("response")`), or with `None` every
/// error vector.
fn vectors_where(direction: Option<&str>) -> Vec<Value> {
    load("vectors.json")
        .into_iter()
        .filter(|v| match direction {
            Some(direction) => v.get("error").is_none() && v["direction"] == direction,
            None => v.get("error").is_some(),
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Result<Vec<u8>, String> {
    text.as_bytes()
        .chunks(2)
        .map(|pair| hex_pair(pair).ok_or_else(|| format!("{text:?} is not pairs of hex digits")))
        .collect()
}

fn hex_pair(pair: &[u8]) -> Option<u8> {
    let digit = |d: u8| char::from(d).to_digit(16);
    match *pair {
        [high, low] => u8::try_from(digit(high)? * 16 + digit(low)?).ok(),
        _ => None,
    }
}

/// A JSON message object with typed accessors whose errors name the field. Byte-string fields
/// (`key`, `value`, `auth` when they are strings) are decoded from hex up front so that messages
/// can borrow them.
struct Fields<'j> {
    object: &'j Map<String, Value>,
    bytes: Vec<(&'j str, Vec<u8>)>,
    /// The `keys` list of a `found` response, decoded from hex.
    key_list: Vec<Vec<u8>>,
    /// The `buffers` of an `invoked` response: each layer, and its data decoded from hex.
    buffers: Vec<(u16, Vec<u8>)>,
}

impl<'j> Fields<'j> {
    fn new(message: &'j Value) -> Result<Fields<'j>, String> {
        let object = message.as_object().ok_or("message is not a JSON object")?;
        let mut bytes = Vec::new();
        for field in ["key", "value", "auth", "pattern", "after", "next", "payload"] {
            if let Some((name, Value::String(text))) = object.get_key_value(field) {
                bytes.push((name.as_str(), unhex(text)?));
            }
        }
        let key_list = match object.get("keys") {
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
        Ok(Fields { object, bytes, key_list, buffers })
    }

    fn get(&self, field: &str) -> Result<&'j Value, String> {
        self.object.get(field).ok_or_else(|| format!("message has no field {field:?}"))
    }

    fn kind(&self) -> Result<&'j str, String> {
        self.str("type")
    }

    fn str(&self, field: &str) -> Result<&'j str, String> {
        self.get(field)?.as_str().ok_or_else(|| format!("{field:?} is not a string"))
    }

    fn u64(&self, field: &str) -> Result<u64, String> {
        as_u64(self.get(field)?, field)
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
            .ok_or_else(|| format!("message has no hex string field {field:?}"))
    }

    /// A byte-string field that may be JSON `null`.
    fn optional_bytes(&self, field: &str) -> Result<Option<&[u8]>, String> {
        match self.get(field)? {
            Value::Null => Ok(None),
            _ => self.bytes(field).map(Some),
        }
    }

    fn array(&self, field: &str) -> Result<&'j Vec<Value>, String> {
        self.get(field)?.as_array().ok_or_else(|| format!("{field:?} is not an array"))
    }

    /// The header flag bits named by the `flags` list, looked up in `known` (name, bits) pairs.
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

fn as_u64(value: &Value, field: &str) -> Result<u64, String> {
    value.as_u64().ok_or_else(|| format!("{field:?} is not an unsigned 64-bit integer"))
}

fn entry_str<'j>(entry: &'j Value, field: &str) -> Result<&'j str, String> {
    entry.get(field).and_then(Value::as_str).ok_or_else(|| format!("entry field {field:?} is not a string"))
}

fn entry_u64(entry: &Value, field: &str) -> Result<u64, String> {
    as_u64(entry.get(field).ok_or_else(|| format!("entry has no field {field:?}"))?, field)
}

fn attribute(name: &str) -> Result<Attribute, String> {
    Attribute::ALL.into_iter().find(|a| a.name() == name).ok_or_else(|| format!("unknown attribute {name:?}"))
}

fn find_kind(name: &str) -> Result<FindKind, String> {
    FindKind::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| format!("unknown find kind {name:?}"))
}

fn error_code(name: &str) -> Result<ErrorCode, String> {
    ErrorCode::ALL.into_iter().find(|c| c.name() == name).ok_or_else(|| format!("unknown error code {name:?}"))
}

fn request<'f>(f: &'f Fields<'_>) -> Result<Request<'f>, String> {
    Ok(match f.kind()? {
        "hello" => {
            Request::Hello { version: f.u16("version")?, client_name: f.str("client_name")?, auth: f.bytes("auth")? }
        }
        "create_pool" => {
            let bits = f.flags(&[
                ("create_only", CreatePoolFlags::CREATE_ONLY.bits()),
                ("indexed", CreatePoolFlags::INDEXED.bits()),
                ("async", CreatePoolFlags::ASYNC.bits()),
                ("plugins", CreatePoolFlags::PLUGINS.bits()),
            ])?;
            Request::CreatePool {
                name: f.str("name")?,
                size_bytes: f.u64("size_bytes")?,
                expected_objects: f.u64("expected_objects")?,
                flags: CreatePoolFlags::from_bits(bits).map_err(|e| e.to_string())?,
                plugins: f.str("plugins")?,
            }
        }
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
        "list_pools" => Request::ListPools,
        "put" => {
            let bits = f.flags(&[
                ("create_only", PutFlags::CREATE_ONLY.bits()),
                ("update_only", PutFlags::UPDATE_ONLY.bits()),
                ("sync", PutFlags::SYNC.bits()),
                ("async", PutFlags::ASYNC.bits()),
            ])?;
            Request::Put {
                pool: f.pool()?,
                flags: PutFlags::from_bits(bits).map_err(|e| e.to_string())?,
                key: f.bytes("key")?,
                value: f.bytes("value")?,
            }
        }
        "get" => Request::Get { pool: f.pool()?, key: f.bytes("key")? },
        "erase" => Request::Erase { pool: f.pool()?, key: f.bytes("key")? },
        "count" => Request::Count { pool: f.pool()? },
        "get_attribute" => {
            Request::GetAttribute { pool: f.pool()?, attribute: attribute(f.str("attribute")?)?, key: f.bytes("key")? }
        }
        "find" => Request::Find {
            pool: f.pool()?,
            kind: find_kind(f.str("kind")?)?,
            pattern: f.bytes("pattern")?,
            after: f.optional_bytes("after")?,
            limit: f.u32("limit")?,
        },
        "get_statistics" => Request::GetStatistics,
        "backup" => Request::Backup { dir: f.str("dir")? },
        "invoke_ado" => Request::InvokeAdo {
            pool: f.pool()?,
            flags: invoke_flags(f)?,
            key: f.bytes("key")?,
            payload: f.bytes("payload")?,
            value_size: f.u64("value_size")?,
        },
        "invoke_put_ado" => Request::InvokePutAdo {
            pool: f.pool()?,
            flags: invoke_flags(f)?,
            key: f.bytes("key")?,
            value: f.bytes("value")?,
            payload: f.bytes("payload")?,
        },
        other => return Err(format!("unknown request type {other:?}")),
    })
}

fn invoke_flags(f: &Fields<'_>) -> Result<InvokeFlags, String> {
    let bits = f.flags(&[
        ("create_on_demand", InvokeFlags::CREATE_ON_DEMAND.bits()),
        ("read_only", InvokeFlags::READ_ONLY.bits()),
        ("no_overwrite", InvokeFlags::NO_OVERWRITE.bits()),
        ("zero_new_value", InvokeFlags::ZERO_NEW_VALUE.bits()),
        ("detached", InvokeFlags::DETACHED.bits()),
        ("fire_and_forget", InvokeFlags::FIRE_AND_FORGET.bits()),
    ])?;
    InvokeFlags::from_bits(bits).map_err(|e| e.to_string())
}

/// The request a response vector answers: `answers` for an `invoked` response, which serves
/// both invocations; any other response's own.
fn answered_opcode(f: &Fields<'_>, response: &Response<'_>) -> Result<Opcode, String> {
    match f.kind()? {
        "invoked" => match f.str("answers")? {
            "invoke_ado" => Ok(Opcode::InvokeAdo),
            "invoke_put_ado" => Ok(Opcode::InvokePutAdo),
            other => Err(format!("\"answers\" names {other:?}, not an invocation")),
        },
        _ => Ok(response.request_opcode()),
    }
}

fn response<'f>(f: &'f Fields<'_>) -> Result<Response<'f>, String> {
    Ok(match f.kind()? {
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
        "pools" => Response::Pools(
            f.array("pools")?
                .iter()
                .map(|entry| {
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
                })
                .collect::<Result<_, String>>()?,
        ),
        "stored" => Response::Stored,
        "value" => Response::Value(f.bytes("value")?),
        "erased" => Response::Erased,
        "count" => Response::Count(f.u64("count")?),
        "attribute" => Response::Attribute(f.u64("value")?),
        "found" => {
            Response::Found { keys: f.key_list.iter().map(Vec::as_slice).collect(), next: f.optional_bytes("next")? }
        }
        "statistics" => Response::Statistics(
            f.array("counters")?
                .iter()
                .map(|entry| Ok(Statistic { name: entry_str(entry, "name")?, value: entry_u64(entry, "value")? }))
                .collect::<Result<_, String>>()?,
        ),
        "backed_up" => Response::BackedUp(ferrite_proto::BackupReport {
            lsn: f.u64("lsn")?,
            files: f.u64("files")?,
            bytes: f.u64("bytes")?,
        }),
        "invoked" => Response::Invoked {
            buffers: f.buffers.iter().map(|(layer, data)| InvokeBuffer { layer: *layer, data }).collect(),
        },
        "error" => Response::Error { code: error_code(f.str("code")?)?, message: f.str("message")? },
        other => return Err(format!("unknown response type {other:?}")),
    })
}

/// The vector's frame, split into its parsed header and its body, after checking that the header
/// agrees with the vector about the body length and the request id.
fn frame_parts(vector: &Value) -> Result<(Vec<u8>, Header), String> {
    let frame = unhex(vector["frame"].as_str().ok_or("\"frame\" is not a string")?)?;
    let header = Header::parse(&frame).ok_or("frame is shorter than a header")?;
    if header.frame_len() != frame.len() {
        return Err(format!(
            "header body_len {} but the frame carries {} body bytes",
            header.body_len,
            frame.len() - HEADER_BYTES
        ));
    }
    let request_id = as_u64(&vector["request_id"], "request_id")?;
    if header.request_id != request_id {
        return Err(format!("header request id {} but the vector says {request_id}", header.request_id));
    }
    Ok((frame, header))
}

fn compare_frames(encoded: &[u8], expected: &[u8]) -> Result<(), String> {
    if encoded == expected {
        return Ok(());
    }
    let at = encoded.iter().zip(expected).take_while(|(a, b)| a == b).count();
    Err(format!("encode differs from byte {at} on:\n    encoded  {}\n    expected {}", hex(encoded), hex(expected)))
}

fn check_request_vector(vector: &Value) -> Result<(), String> {
    let (frame, header) = frame_parts(vector)?;
    let fields = Fields::new(&vector["message"])?;
    let expected = request(&fields)?;
    let mut encoded = BytesMut::new();
    expected.encode(header.request_id, &mut encoded);
    compare_frames(&encoded, &frame)?;
    let decoded = Request::decode(&header, &frame[HEADER_BYTES..]).map_err(|e| format!("decode failed: {e}"))?;
    if decoded != expected {
        return Err(format!("decode gave {decoded:?}, expected {expected:?}"));
    }
    Ok(())
}

fn check_response_vector(vector: &Value) -> Result<(), String> {
    let (frame, header) = frame_parts(vector)?;
    let fields = Fields::new(&vector["message"])?;
    let expected = response(&fields)?;
    let mut encoded = BytesMut::new();
    expected.encode_answer(answered_opcode(&fields, &expected)?, header.request_id, &mut encoded);
    compare_frames(&encoded, &frame)?;
    let decoded = Response::decode(&header, &frame[HEADER_BYTES..]).map_err(|e| format!("decode failed: {e}"))?;
    if decoded != expected {
        return Err(format!("decode gave {decoded:?}, expected {expected:?}"));
    }
    Ok(())
}

fn check_error_vector(vector: &Value) -> Result<(), String> {
    let (frame, header) = frame_parts(vector)?;
    let body = &frame[HEADER_BYTES..];
    let expected = vector["error"].as_str().ok_or("\"error\" is not a string")?;
    let outcome = match vector["direction"].as_str() {
        Some("request") => Request::decode(&header, body).map(|r| format!("{r:?}")),
        Some("response") => Response::decode(&header, body).map(|r| format!("{r:?}")),
        _ => return Err("\"direction\" is neither \"request\" nor \"response\"".to_owned()),
    };
    match outcome {
        Err(e) if e.code().name() == expected => Ok(()),
        Err(e) => Err(format!("decode failed with {} ({e}), expected {expected}", e.code().name())),
        Ok(message) => Err(format!("decode succeeded with {message}, expected {expected}")),
    }
}

fn check_routing_case(case: &Value) -> Result<(), String> {
    let pool = case["pool"].as_str().ok_or("\"pool\" is not a string")?;
    let shard_count = u16::try_from(as_u64(&case["shard_count"], "shard_count")?).map_err(|e| e.to_string())?;
    let expected = as_u64(&case["shard"], "shard")?;
    let shard = shard_for_pool(pool, shard_count);
    if u64::from(shard) != expected {
        return Err(format!("shard_for_pool gave {shard}, expected {expected}"));
    }
    Ok(())
}

#[test]
fn request_vectors_encode_and_decode() {
    check_all("request vectors", &vectors_where(Some("request")), check_request_vector);
}

#[test]
fn response_vectors_encode_and_decode() {
    check_all("response vectors", &vectors_where(Some("response")), check_response_vector);
}

#[test]
fn error_vectors_fail_to_decode_with_their_code() {
    check_all("error vectors", &vectors_where(None), check_error_vector);
}

#[test]
fn routing_cases_match_shard_for_pool() {
    check_all("routing cases", &load("routing.json"), check_routing_case);
}

#[test]
fn the_password_hello_vector_carries_its_credentials() {
    let vectors = vectors_where(Some("request"));
    let vector = vectors.iter().find(|v| item_name(v) == "hello_with_password").expect("the vector exists");
    let auth = vector["message"]["auth"].as_str().expect("auth is hex");
    let auth = unhex(auth).expect("valid hex");
    let credentials = ferrite_proto::Credentials::decode(&auth).expect("decodes").expect("carries credentials");
    assert_eq!((credentials.user, credentials.password), ("alice", &b"s3cret\x00pw"[..]));
    assert_eq!(ferrite_proto::Credentials { user: "alice", password: b"s3cret\x00pw" }.encode(), auth);
}
