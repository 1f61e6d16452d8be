//! The messages that cross the rings, defined once for both sides. Each is a tag byte followed
//! by little-endian fields; byte strings carry a u32 length. Decoding rejects unknown tags,
//! short or trailing bytes, and counts that could not fit in the message.

use ferrite_plugin::abi::PoolInfo;

use crate::codec::{DecodeError, Reader, Writer};

/// Names one invocation from submit to its Done or Failed. Never 0: 0 means "no call".
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(pub u64);

/// A range of pool memory: `len` bytes at `offset` from the pool mapping's start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Location {
    pub offset: u64,
    pub len: u64,
}

impl Location {
    pub fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.len)
    }

    /// True if `other` lies wholly inside this range.
    pub fn covers(&self, other: &Location) -> bool {
        match (self.end(), other.end()) {
            (Some(end), Some(other_end)) => other.offset >= self.offset && other_end <= end,
            _ => false,
        }
    }
}

/// One invocation of the pool's plugin chain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invocation {
    /// `FERRITE_WORK_*`.
    pub flags: u32,
    pub pool_id: u64,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
    /// The target value (empty for a pool invocation): for a call that may write it, the call's
    /// own copy in whole pages of scratch memory, which the host lets the plugins write.
    pub value: Location,
    /// Where the host fills the copy `value` from before the plugins run (empty: the shard
    /// filled it, or the target is no copy): a value kept out of line, copied by the host so
    /// that the shard never copies a large value on its own thread.
    pub source: Location,
    /// The detached value of `invoke_put_ado` (empty unless `FERRITE_WORK_DETACHED`).
    pub detached: Location,
}

/// A pair as the shard describes it to the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PairRecord {
    pub key: Vec<u8>,
    pub value: Location,
    pub write_time_ns: u64,
}

/// A callback the shard carries out for the call in progress (MCAS Table 4).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallbackRequest {
    CreateKey {
        key: Vec<u8>,
        value_len: u64,
    },
    OpenKey {
        key: Vec<u8>,
        read_only: bool,
    },
    EraseKey {
        key: Vec<u8>,
    },
    ResizeValue {
        key: Vec<u8>,
        new_len: u64,
    },
    AllocateMemory {
        len: u64,
        align: u64,
    },
    FreeMemory {
        memory: Location,
    },
    /// The pairs written in `since_ns..=until_ns`, a page at a time from `cursor` (0 to start),
    /// answered with `Pairs`: the shard walks a bounded part of the pool per request.
    Iterate {
        since_ns: u64,
        until_ns: u64,
        cursor: u64,
    },
    ReferenceVector {
        since_ns: u64,
        until_ns: u64,
        max: u64,
        cursor: u64,
    },
    /// One bounded step of a search for the keys `expression` matches, from `cursor` (0 to
    /// start), answered with `Keys`; the host pages through the steps for the plugin.
    FindKey {
        expression: Vec<u8>,
        cursor: u64,
    },
    PoolInfo,
    Unlock {
        key: Vec<u8>,
    },
}

/// What a callback produced, besides its status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallbackResult {
    #[default]
    Nothing,
    /// create_key, open_key, resize_value.
    Pair(PairRecord),
    /// allocate_memory.
    Memory(Location),
    /// iterate, get_reference_vector: a page of pairs, and the cursor of the next (0: none).
    Pairs {
        pairs: Vec<PairRecord>,
        next: u64,
    },
    /// find_key: the matching keys of one bounded step of the search, and the position of the
    /// next step (0: the search is over).
    Keys {
        keys: Vec<Vec<u8>>,
        next: u64,
    },
    PoolInfo(PoolInfo),
}

/// The shard's answer to a [`CallbackRequest`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallbackReply {
    /// `FERRITE_OK` or a negative `FERRITE_ERR_*`.
    pub status: i32,
    pub result: CallbackResult,
}

/// One response buffer, tagged with the layer (position in the chain) that produced it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub layer: u32,
    pub data: Vec<u8>,
}

/// A finished call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Done {
    pub call: CallId,
    /// `FERRITE_OK`, or the first failing layer's negative status (its writes are undone).
    pub status: i32,
    pub responses: Vec<Response>,
    /// The declared write ranges whose new bytes the shard logs (empty when the call failed).
    pub writes: Vec<Location>,
    /// Why a failed call failed, as the plugin last said it during the call (its last warning or
    /// error logged; the Rust SDK logs the error a `do_work` returns): empty if it said nothing.
    pub reason: String,
}

/// Shard to host.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToHost {
    Invoke { call: CallId, invocation: Invocation },
    CallbackReply { call: CallId, reply: CallbackReply },
    PoolEvent { event: u32, key: Vec<u8> },
    Shutdown,
}

/// Host to shard.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToShard {
    Done(Done),
    Callback {
        call: CallId,
        request: CallbackRequest,
    },
    Log {
        level: i32,
        text: String,
    },
    /// Checking mode: bytes of pool memory the call changed without declaring them.
    Undeclared {
        call: CallId,
        ranges: Vec<Location>,
    },
}

const LOCATION_BYTES: usize = 16;
const PAIR_BYTES_MIN: usize = 4 + LOCATION_BYTES + 8;
/// The fewest bytes a key takes in a message: its length.
const KEY_BYTES_MIN: usize = 4;
const RESPONSE_BYTES_MIN: usize = 8;

fn put_location(w: &mut Writer<'_>, location: &Location) {
    w.u64(location.offset).u64(location.len);
}

fn get_location(r: &mut Reader<'_>) -> Result<Location, DecodeError> {
    Ok(Location { offset: r.u64()?, len: r.u64()? })
}

fn put_locations(w: &mut Writer<'_>, locations: &[Location]) {
    w.u32(locations.len() as u32);
    for location in locations {
        put_location(w, location);
    }
}

fn get_locations(r: &mut Reader<'_>) -> Result<Vec<Location>, DecodeError> {
    let count = r.count(LOCATION_BYTES)?;
    (0..count).map(|_| get_location(r)).collect()
}

fn put_pair(w: &mut Writer<'_>, pair: &PairRecord) {
    w.bytes(&pair.key);
    put_location(w, &pair.value);
    w.u64(pair.write_time_ns);
}

fn get_pair(r: &mut Reader<'_>) -> Result<PairRecord, DecodeError> {
    Ok(PairRecord { key: r.bytes()?, value: get_location(r)?, write_time_ns: r.u64()? })
}

fn get_call(r: &mut Reader<'_>) -> Result<CallId, DecodeError> {
    match r.u64()? {
        0 => Err(DecodeError::OutOfRange),
        id => Ok(CallId(id)),
    }
}

impl CallbackRequest {
    fn encode(&self, w: &mut Writer<'_>) {
        match self {
            CallbackRequest::CreateKey { key, value_len } => w.u8(1).bytes(key).u64(*value_len),
            CallbackRequest::OpenKey { key, read_only } => w.u8(2).bytes(key).u8(u8::from(*read_only)),
            CallbackRequest::EraseKey { key } => w.u8(3).bytes(key),
            CallbackRequest::ResizeValue { key, new_len } => w.u8(4).bytes(key).u64(*new_len),
            CallbackRequest::AllocateMemory { len, align } => w.u8(5).u64(*len).u64(*align),
            CallbackRequest::FreeMemory { memory } => w.u8(6).u64(memory.offset).u64(memory.len),
            CallbackRequest::Iterate { since_ns, until_ns, cursor } => {
                w.u8(7).u64(*since_ns).u64(*until_ns).u64(*cursor)
            }
            CallbackRequest::ReferenceVector { since_ns, until_ns, max, cursor } => {
                w.u8(8).u64(*since_ns).u64(*until_ns).u64(*max).u64(*cursor)
            }
            CallbackRequest::FindKey { expression, cursor } => w.u8(9).bytes(expression).u64(*cursor),
            CallbackRequest::PoolInfo => w.u8(10),
            CallbackRequest::Unlock { key } => w.u8(11).bytes(key),
        };
    }

    fn decode(r: &mut Reader<'_>) -> Result<CallbackRequest, DecodeError> {
        Ok(match r.u8()? {
            1 => CallbackRequest::CreateKey { key: r.bytes()?, value_len: r.u64()? },
            2 => CallbackRequest::OpenKey { key: r.bytes()?, read_only: r.bool()? },
            3 => CallbackRequest::EraseKey { key: r.bytes()? },
            4 => CallbackRequest::ResizeValue { key: r.bytes()?, new_len: r.u64()? },
            5 => CallbackRequest::AllocateMemory { len: r.u64()?, align: r.u64()? },
            6 => CallbackRequest::FreeMemory { memory: get_location(r)? },
            7 => CallbackRequest::Iterate { since_ns: r.u64()?, until_ns: r.u64()?, cursor: r.u64()? },
            8 => CallbackRequest::ReferenceVector {
                since_ns: r.u64()?,
                until_ns: r.u64()?,
                max: r.u64()?,
                cursor: r.u64()?,
            },
            9 => CallbackRequest::FindKey { expression: r.bytes()?, cursor: r.u64()? },
            10 => CallbackRequest::PoolInfo,
            11 => CallbackRequest::Unlock { key: r.bytes()? },
            tag => return Err(DecodeError::UnknownTag(tag)),
        })
    }
}

impl CallbackResult {
    fn encode(&self, w: &mut Writer<'_>) {
        match self {
            CallbackResult::Nothing => {
                w.u8(0);
            }
            CallbackResult::Pair(pair) => {
                w.u8(1);
                put_pair(w, pair);
            }
            CallbackResult::Memory(memory) => {
                w.u8(2);
                put_location(w, memory);
            }
            CallbackResult::Pairs { pairs, next } => {
                w.u8(3).u64(*next).u32(pairs.len() as u32);
                for pair in pairs {
                    put_pair(w, pair);
                }
            }
            CallbackResult::Keys { keys, next } => {
                w.u8(4).u64(*next).u32(keys.len() as u32);
                for key in keys {
                    w.bytes(key);
                }
            }
            CallbackResult::PoolInfo(info) => {
                w.u8(5)
                    .u64(info.pool_id)
                    .u64(info.size_bytes)
                    .u64(info.used_bytes)
                    .u64(info.objects)
                    .u64(info.region_bytes);
            }
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<CallbackResult, DecodeError> {
        Ok(match r.u8()? {
            0 => CallbackResult::Nothing,
            1 => CallbackResult::Pair(get_pair(r)?),
            2 => CallbackResult::Memory(get_location(r)?),
            3 => {
                let next = r.u64()?;
                let count = r.count(PAIR_BYTES_MIN)?;
                let pairs = (0..count).map(|_| get_pair(r)).collect::<Result<_, _>>()?;
                CallbackResult::Pairs { pairs, next }
            }
            4 => {
                let next = r.u64()?;
                let count = r.count(KEY_BYTES_MIN)?;
                let keys = (0..count).map(|_| r.bytes()).collect::<Result<_, _>>()?;
                CallbackResult::Keys { keys, next }
            }
            5 => CallbackResult::PoolInfo(PoolInfo {
                pool_id: r.u64()?,
                size_bytes: r.u64()?,
                used_bytes: r.u64()?,
                objects: r.u64()?,
                region_bytes: r.u64()?,
            }),
            tag => return Err(DecodeError::UnknownTag(tag)),
        })
    }
}

/// Encodes `ToHost::Invoke { call, invocation }` into `out` from a borrowed invocation, so the
/// message is written from it rather than from a clone.
pub fn encode_invoke(call: CallId, invocation: &Invocation, out: &mut Vec<u8>) {
    let mut w = Writer::start(out, 1);
    w.u64(call.0).u32(invocation.flags).u64(invocation.pool_id);
    w.bytes(&invocation.key).bytes(&invocation.payload);
    put_location(&mut w, &invocation.value);
    put_location(&mut w, &invocation.source);
    put_location(&mut w, &invocation.detached);
}

/// Encodes `ToShard::Done` into `out` from borrowed parts: the host reports a call from its
/// call state, whose buffers the next call reuses.
pub fn encode_done(
    call: CallId,
    status: i32,
    responses: &[Response],
    writes: &[Location],
    reason: &str,
    out: &mut Vec<u8>,
) {
    let mut w = Writer::start(out, 1);
    w.u64(call.0).i32(status).u32(responses.len() as u32);
    for response in responses {
        w.u32(response.layer).bytes(&response.data);
    }
    put_locations(&mut w, writes);
    w.bytes(reason.as_bytes());
}

impl ToHost {
    /// The message in a new buffer; senders on a hot path use [`ToHost::encode_into`].
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Writes the message into `out`, replacing what it held, so a sender reuses one buffer.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            ToHost::Invoke { call, invocation } => encode_invoke(*call, invocation, out),
            ToHost::CallbackReply { call, reply } => {
                let mut w = Writer::start(out, 2);
                w.u64(call.0).i32(reply.status);
                reply.result.encode(&mut w);
            }
            ToHost::PoolEvent { event, key } => {
                Writer::start(out, 3).u32(*event).bytes(key);
            }
            ToHost::Shutdown => {
                Writer::start(out, 4);
            }
        }
    }

    pub fn decode(message: &[u8]) -> Result<ToHost, DecodeError> {
        let mut r = Reader::new(message);
        let decoded = match r.u8()? {
            1 => {
                let call = get_call(&mut r)?;
                let invocation = Invocation {
                    flags: r.u32()?,
                    pool_id: r.u64()?,
                    key: r.bytes()?,
                    payload: r.bytes()?,
                    value: get_location(&mut r)?,
                    source: get_location(&mut r)?,
                    detached: get_location(&mut r)?,
                };
                ToHost::Invoke { call, invocation }
            }
            2 => {
                let call = get_call(&mut r)?;
                let status = r.i32()?;
                ToHost::CallbackReply { call, reply: CallbackReply { status, result: CallbackResult::decode(&mut r)? } }
            }
            3 => ToHost::PoolEvent { event: r.u32()?, key: r.bytes()? },
            4 => ToHost::Shutdown,
            tag => return Err(DecodeError::UnknownTag(tag)),
        };
        r.finish()?;
        Ok(decoded)
    }
}

impl ToShard {
    /// The message in a new buffer; senders on a hot path use [`ToShard::encode_into`].
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Writes the message into `out`, replacing what it held, so a sender reuses one buffer.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            ToShard::Done(done) => {
                encode_done(done.call, done.status, &done.responses, &done.writes, &done.reason, out);
            }
            ToShard::Callback { call, request } => {
                let mut w = Writer::start(out, 2);
                w.u64(call.0);
                request.encode(&mut w);
            }
            ToShard::Log { level, text } => {
                Writer::start(out, 3).i32(*level).bytes(text.as_bytes());
            }
            ToShard::Undeclared { call, ranges } => {
                let mut w = Writer::start(out, 4);
                w.u64(call.0);
                put_locations(&mut w, ranges);
            }
        }
    }

    pub fn decode(message: &[u8]) -> Result<ToShard, DecodeError> {
        let mut r = Reader::new(message);
        let decoded = match r.u8()? {
            1 => {
                let call = get_call(&mut r)?;
                let status = r.i32()?;
                let count = r.count(RESPONSE_BYTES_MIN)?;
                let responses = (0..count)
                    .map(|_| Ok(Response { layer: r.u32()?, data: r.bytes()? }))
                    .collect::<Result<_, DecodeError>>()?;
                let writes = get_locations(&mut r)?;
                let reason = r.text()?;
                ToShard::Done(Done { call, status, responses, writes, reason })
            }
            2 => ToShard::Callback { call: get_call(&mut r)?, request: CallbackRequest::decode(&mut r)? },
            3 => ToShard::Log { level: r.i32()?, text: r.text()? },
            4 => ToShard::Undeclared { call: get_call(&mut r)?, ranges: get_locations(&mut r)? },
            tag => return Err(DecodeError::UnknownTag(tag)),
        };
        r.finish()?;
        Ok(decoded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples_to_host() -> Vec<ToHost> {
        vec![
            ToHost::Invoke {
                call: CallId(7),
                invocation: Invocation {
                    flags: 3,
                    pool_id: 9,
                    key: b"key".to_vec(),
                    payload: b"add 1".to_vec(),
                    value: Location { offset: 4096, len: 8 },
                    source: Location { offset: 64, len: 8 },
                    detached: Location::default(),
                },
            },
            ToHost::CallbackReply {
                call: CallId(7),
                reply: CallbackReply {
                    status: -3,
                    result: CallbackResult::Pairs {
                        pairs: vec![PairRecord {
                            key: b"k".to_vec(),
                            value: Location { offset: 1, len: 2 },
                            write_time_ns: 5,
                        }],
                        next: 9,
                    },
                },
            },
            ToHost::CallbackReply {
                call: CallId(3),
                reply: CallbackReply {
                    status: 0,
                    result: CallbackResult::Keys { keys: vec![b"a1".to_vec(), Vec::new(), b"a2".to_vec()], next: 77 },
                },
            },
            ToHost::CallbackReply {
                call: CallId(1),
                reply: CallbackReply {
                    status: 0,
                    result: CallbackResult::PoolInfo(PoolInfo { pool_id: 1, objects: 4, ..PoolInfo::default() }),
                },
            },
            ToHost::PoolEvent { event: 3, key: b"gone".to_vec() },
            ToHost::Shutdown,
        ]
    }

    fn samples_to_shard() -> Vec<ToShard> {
        vec![
            ToShard::Done(Done {
                call: CallId(2),
                status: 0,
                responses: vec![Response { layer: 0, data: b"a".to_vec() }, Response { layer: 1, data: vec![] }],
                writes: vec![Location { offset: 8, len: 8 }],
                reason: "no room".into(),
            }),
            ToShard::Callback {
                call: CallId(2),
                request: CallbackRequest::FindKey { expression: b"prefix:a".to_vec(), cursor: 3 },
            },
            ToShard::Callback { call: CallId(2), request: CallbackRequest::PoolInfo },
            ToShard::Log { level: 3, text: "hello".into() },
            ToShard::Undeclared { call: CallId(2), ranges: vec![Location { offset: 0, len: 1 }] },
        ]
    }

    /// Every message decodes to itself, and every strict prefix of it is rejected.
    #[test]
    fn round_trips_and_rejects_truncation() {
        for message in samples_to_host() {
            let bytes = message.encode();
            assert_eq!(ToHost::decode(&bytes), Ok(message));
            for cut in 0..bytes.len() {
                assert!(ToHost::decode(&bytes[..cut]).is_err(), "prefix of {cut} bytes accepted");
            }
        }
        for message in samples_to_shard() {
            let bytes = message.encode();
            assert_eq!(ToShard::decode(&bytes), Ok(message));
            for cut in 0..bytes.len() {
                assert!(ToShard::decode(&bytes[..cut]).is_err(), "prefix of {cut} bytes accepted");
            }
        }
    }

    /// Garbage is an error: unknown tags, trailing bytes, call id 0, absurd counts.
    #[test]
    fn rejects_garbage() {
        assert_eq!(ToHost::decode(&[99]), Err(DecodeError::UnknownTag(99)));
        let mut bytes = ToHost::Shutdown.encode();
        bytes.push(0);
        assert_eq!(ToHost::decode(&bytes), Err(DecodeError::Trailing(1)));
        let mut zero_call = Vec::new();
        Writer::start(&mut zero_call, 4).u64(0).u32(0);
        assert_eq!(ToShard::decode(&zero_call), Err(DecodeError::OutOfRange));
        let mut huge_count = Vec::new();
        Writer::start(&mut huge_count, 4).u64(1).u32(u32::MAX);
        assert_eq!(ToShard::decode(&huge_count), Err(DecodeError::Truncated));
    }

    /// Encoding into a reused buffer replaces what it held: each message comes out exactly as
    /// a fresh encoding, whatever longer or shorter message the buffer carried before.
    #[test]
    fn encode_into_replaces_the_buffer() {
        let mut out = vec![0xAA; 300];
        for message in samples_to_host().iter().chain(samples_to_host().iter().rev()) {
            message.encode_into(&mut out);
            assert_eq!(out, message.encode());
        }
        for message in samples_to_shard().iter().chain(samples_to_shard().iter().rev()) {
            message.encode_into(&mut out);
            assert_eq!(out, message.encode());
        }
    }

    /// The borrowed encoders write the very bytes of the messages they stand for, and those
    /// bytes are the wire format, spelled out field by field.
    #[test]
    fn borrowed_encoders_match_the_wire_format() {
        let samples = samples_to_host();
        let ToHost::Invoke { call, invocation } = &samples[0] else { panic!("the first sample is an Invoke") };
        let mut expected = vec![1];
        expected.extend_from_slice(&7u64.to_le_bytes());
        expected.extend_from_slice(&3u32.to_le_bytes());
        expected.extend_from_slice(&9u64.to_le_bytes());
        expected.extend_from_slice(&3u32.to_le_bytes());
        expected.extend_from_slice(b"key");
        expected.extend_from_slice(&5u32.to_le_bytes());
        expected.extend_from_slice(b"add 1");
        // value, source, detached: offset and length each.
        for field in [4096u64, 8, 64, 8, 0, 0] {
            expected.extend_from_slice(&field.to_le_bytes());
        }
        let mut out = vec![0xAA; 300];
        encode_invoke(*call, invocation, &mut out);
        assert_eq!(out, expected);
        assert_eq!(samples[0].encode(), expected);

        let samples = samples_to_shard();
        let ToShard::Done(done) = &samples[0] else { panic!("the first sample is a Done") };
        let mut expected = vec![1];
        expected.extend_from_slice(&2u64.to_le_bytes());
        expected.extend_from_slice(&0i32.to_le_bytes());
        expected.extend_from_slice(&2u32.to_le_bytes());
        expected.extend_from_slice(&0u32.to_le_bytes());
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.extend_from_slice(b"a");
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.extend_from_slice(&0u32.to_le_bytes());
        expected.extend_from_slice(&1u32.to_le_bytes());
        expected.extend_from_slice(&8u64.to_le_bytes());
        expected.extend_from_slice(&8u64.to_le_bytes());
        expected.extend_from_slice(&7u32.to_le_bytes());
        expected.extend_from_slice(b"no room");
        encode_done(done.call, done.status, &done.responses, &done.writes, &done.reason, &mut out);
        assert_eq!(out, expected);
        assert_eq!(samples[0].encode(), expected);
    }
}
