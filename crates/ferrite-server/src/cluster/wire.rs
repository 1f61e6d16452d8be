//! The peer protocol between the replicas of a group: Raft's messages, encoded by hand
//! (little-endian, length-prefixed, every length checked before anything is allocated for it).
//!
//! A connection carries one group's traffic between two nodes. It opens with a hello naming the
//! group and both nodes; then each frame is a request or its response:
//!
//! ```text
//! frame:  u32 body length, u8 kind, u64 request id, body
//! hello:  magic "FRPE", u16 version, u16 group, u64 from node, u64 to node
//! ```
//!
//! Requests and their responses (kind | 0x80): append entries, vote, pre-vote, transfer leader,
//! and a snapshot as a stream of `SnapshotBegin`, `SnapshotChunk`s and `SnapshotEnd` (answered
//! once, at the end). A request the receiver could not carry out is answered `Failed` with why.

use bytes::{Buf, BufMut, Bytes};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest, VoteRequest, VoteResponse,
};
use openraft::EntryPayload;

use super::types::{log_id, Entry, LogId, Membership, Redo, ShardNode, Vote, C};

/// `b"FRPE"`.
pub const MAGIC: [u8; 4] = *b"FRPE";
pub const VERSION: u16 = 1;
/// Bytes of a frame's header: body length, kind, request id.
pub const FRAME_HEADER_BYTES: usize = 4 + 1 + 8;
/// Bytes of a connection's hello.
pub const HELLO_BYTES: usize = 4 + 2 + 2 + 8 + 8 + 8 + NONCE_BYTES;
/// Bytes of a handshake's random challenge.
pub const NONCE_BYTES: usize = 16;
/// Largest frame body: a batch of entries the log reader caps at [`BATCH_BYTES_MAX`], with the
/// largest single entry (a record of a log segment's size) always allowed through alone.
pub const FRAME_BODY_BYTES_MAX: usize = 64 << 20;
/// Bytes of entries one append request carries at most (a single larger entry goes alone).
pub const BATCH_BYTES_MAX: usize = 8 << 20;
/// Most members a membership may name.
pub const MEMBERS_MAX: usize = 64;
/// Longest address a member's entry may carry.
const ADDRESS_BYTES_MAX: usize = 512;

/// The kinds of frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    AppendEntries = 1,
    Vote = 2,
    PreVote = 3,
    TransferLeader = 4,
    SnapshotBegin = 5,
    SnapshotChunk = 6,
    SnapshotEnd = 7,
    /// A response: the request could not be carried out (the text says why).
    Failed = 0x7f,
}

/// The response kind of a request kind.
pub const RESPONSE: u8 = 0x80;

impl Kind {
    pub fn from_u8(byte: u8) -> Option<Kind> {
        Some(match byte & !RESPONSE {
            1 => Kind::AppendEntries,
            2 => Kind::Vote,
            3 => Kind::PreVote,
            4 => Kind::TransferLeader,
            5 => Kind::SnapshotBegin,
            6 => Kind::SnapshotChunk,
            7 => Kind::SnapshotEnd,
            0x7f => Kind::Failed,
            _ => return None,
        })
    }
}

/// Why bytes from a peer are not a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed peer message: {0}")]
pub struct Malformed(pub &'static str);

type Decoded<T> = Result<T, Malformed>;

/// A connection's first bytes: who calls whom, in which cluster (0 while the caller knows none),
/// and the caller's challenge for the handshake (see `handshake`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub group: u16,
    pub from: u64,
    pub to: u64,
    pub cluster: u64,
    pub nonce: [u8; NONCE_BYTES],
}

impl Hello {
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut out = Vec::with_capacity(HELLO_BYTES);
        out.put_slice(&MAGIC);
        out.put_u16_le(VERSION);
        out.put_u16_le(self.group);
        out.put_u64_le(self.from);
        out.put_u64_le(self.to);
        out.put_u64_le(self.cluster);
        out.put_slice(&self.nonce);
        out.try_into().expect("the hello has its fixed size")
    }

    pub fn decode(bytes: &[u8; HELLO_BYTES]) -> Decoded<Hello> {
        let mut r = &bytes[..];
        if r.get(..4) != Some(&MAGIC[..]) {
            return Err(Malformed("not a Ferrite peer (bad magic)"));
        }
        r.advance(4);
        if r.get_u16_le() != VERSION {
            return Err(Malformed("unsupported peer protocol version"));
        }
        let (group, from, to, cluster) = (r.get_u16_le(), r.get_u64_le(), r.get_u64_le(), r.get_u64_le());
        let nonce = r[..NONCE_BYTES].try_into().expect("the hello has its fixed size");
        Ok(Hello { group, from, to, cluster, nonce })
    }
}

/// Appends a frame of `kind` for request `id` whose body `body` writes.
pub fn encode_frame(kind: u8, id: u64, out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.put_u32_le(0);
    out.put_u8(kind);
    out.put_u64_le(id);
    body(out);
    let len = (out.len() - start - FRAME_HEADER_BYTES) as u32;
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
}

/// A checked reader over a frame body.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    fn need(&self, len: usize) -> Decoded<()> {
        if self.bytes.len() < len {
            return Err(Malformed("truncated"));
        }
        Ok(())
    }

    pub fn u8(&mut self) -> Decoded<u8> {
        self.need(1)?;
        Ok(self.bytes.get_u8())
    }

    pub fn u16(&mut self) -> Decoded<u16> {
        self.need(2)?;
        Ok(self.bytes.get_u16_le())
    }

    pub fn u32(&mut self) -> Decoded<u32> {
        self.need(4)?;
        Ok(self.bytes.get_u32_le())
    }

    pub fn u64(&mut self) -> Decoded<u64> {
        self.need(8)?;
        Ok(self.bytes.get_u64_le())
    }

    pub fn bool(&mut self) -> Decoded<bool> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Malformed("a flag that is neither 0 nor 1")),
        }
    }

    /// `u32` length, then that many bytes (at most `max`).
    pub fn bytes(&mut self, max: usize) -> Decoded<&'a [u8]> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(Malformed("a field longer than its limit"));
        }
        self.need(len)?;
        let (field, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(field)
    }

    pub fn text(&mut self, max: usize) -> Decoded<String> {
        let bytes = self.bytes(max)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| Malformed("text that is not UTF-8"))
    }

    /// A count of elements each at least `element_bytes_min` long, checked against what is left.
    pub fn count(&mut self, element_bytes_min: usize, max: usize) -> Decoded<usize> {
        let count = self.u32()? as usize;
        if count > max || count.saturating_mul(element_bytes_min) > self.bytes.len() {
            return Err(Malformed("a count larger than the message"));
        }
        Ok(count)
    }

    /// Whether nothing is left to read.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The next `len` bytes as they are.
    pub fn raw(&mut self, len: usize) -> Decoded<&'a [u8]> {
        self.need(len)?;
        let (field, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Ok(field)
    }

    pub fn finish(self) -> Decoded<()> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(Malformed("trailing bytes"))
        }
    }
}

pub fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.put_u32_le(bytes.len() as u32);
    out.put_slice(bytes);
}

pub fn put_log_id(out: &mut Vec<u8>, id: &LogId) {
    out.put_u64_le(id.leader_id.term);
    out.put_u64_le(id.index);
}

pub fn get_log_id(r: &mut Reader<'_>) -> Decoded<LogId> {
    let term = r.u64()?;
    Ok(log_id(term, r.u64()?))
}

pub fn put_option_log_id(out: &mut Vec<u8>, id: &Option<LogId>) {
    match id {
        Some(id) => {
            out.put_u8(1);
            put_log_id(out, id);
        }
        None => out.put_u8(0),
    }
}

pub fn get_option_log_id(r: &mut Reader<'_>) -> Decoded<Option<LogId>> {
    if r.bool()? {
        get_log_id(r).map(Some)
    } else {
        Ok(None)
    }
}

pub fn put_vote(out: &mut Vec<u8>, vote: &Vote) {
    out.put_u64_le(vote.leader_id.term);
    out.put_u64_le(vote.leader_id.voted_for);
    out.put_u8(u8::from(vote.committed));
}

pub fn get_vote(r: &mut Reader<'_>) -> Decoded<Vote> {
    let (term, node) = (r.u64()?, r.u64()?);
    Ok(if r.bool()? { Vote::new_committed(term, node) } else { Vote::new(term, node) })
}

/// A membership: its configs (one, or two while joint) of voter ids, then every member node.
pub fn put_membership(out: &mut Vec<u8>, membership: &Membership) {
    let configs = membership.get_joint_config();
    out.put_u32_le(configs.len() as u32);
    for config in configs {
        out.put_u32_le(config.len() as u32);
        for id in config {
            out.put_u64_le(*id);
        }
    }
    let nodes: Vec<_> = membership.nodes().collect();
    out.put_u32_le(nodes.len() as u32);
    for (id, node) in nodes {
        out.put_u64_le(*id);
        put_bytes(out, node.peer.as_bytes());
        put_bytes(out, node.native.as_bytes());
        put_bytes(out, node.resp.as_bytes());
    }
}

pub fn get_membership(r: &mut Reader<'_>) -> Decoded<Membership> {
    let config_count = r.count(4, 2)?;
    let mut configs = Vec::with_capacity(config_count);
    for _ in 0..config_count {
        let count = r.count(8, MEMBERS_MAX)?;
        let mut config = std::collections::BTreeSet::new();
        for _ in 0..count {
            config.insert(r.u64()?);
        }
        configs.push(config);
    }
    let node_count = r.count(8 + 12, MEMBERS_MAX)?;
    let mut nodes = std::collections::BTreeMap::new();
    for _ in 0..node_count {
        let id = r.u64()?;
        let node = ShardNode {
            peer: r.text(ADDRESS_BYTES_MAX)?,
            native: r.text(ADDRESS_BYTES_MAX)?,
            resp: r.text(ADDRESS_BYTES_MAX)?,
        };
        nodes.insert(id, node);
    }
    Membership::new(configs, nodes).map_err(|_| Malformed("a membership naming voters it has no node for"))
}

/// An entry as it travels: its log id, then its kind (0 blank, 1 normal with its record
/// payload, 2 membership).
pub fn put_entry(out: &mut Vec<u8>, entry: &Entry) {
    put_log_id(out, &entry.log_id);
    match &entry.payload {
        EntryPayload::Blank => out.put_u8(0),
        EntryPayload::Normal(Redo::Payload(payload)) => {
            out.put_u8(1);
            put_bytes(out, payload);
        }
        EntryPayload::Normal(Redo::Appended { .. }) => {
            // The log reader hands replication entries with their payload, never this form.
            debug_assert!(false, "an entry without its payload was sent to a peer");
            out.put_u8(1);
            put_bytes(out, &[]);
        }
        EntryPayload::Membership(membership) => {
            out.put_u8(2);
            put_membership(out, membership);
        }
    }
}

pub fn get_entry(r: &mut Reader<'_>) -> Decoded<Entry> {
    let log_id = get_log_id(r)?;
    let payload = match r.u8()? {
        0 => EntryPayload::Blank,
        1 => EntryPayload::Normal(Redo::Payload(Bytes::copy_from_slice(r.bytes(FRAME_BODY_BYTES_MAX)?))),
        2 => EntryPayload::Membership(get_membership(r)?),
        _ => return Err(Malformed("an entry of unknown kind")),
    };
    Ok(Entry { log_id, payload })
}

pub fn put_append_request(out: &mut Vec<u8>, request: &AppendEntriesRequest<C>) {
    put_vote(out, &request.vote);
    put_option_log_id(out, &request.prev_log_id);
    put_option_log_id(out, &request.leader_commit);
    out.put_u32_le(request.entries.len() as u32);
    for entry in &request.entries {
        put_entry(out, entry);
    }
}

pub fn get_append_request(r: &mut Reader<'_>) -> Decoded<AppendEntriesRequest<C>> {
    let vote = get_vote(r)?;
    let prev_log_id = get_option_log_id(r)?;
    let leader_commit = get_option_log_id(r)?;
    let count = r.count(17, usize::MAX)?;
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        entries.push(get_entry(r)?);
    }
    Ok(AppendEntriesRequest { vote, prev_log_id, leader_commit, entries })
}

pub fn put_append_response(out: &mut Vec<u8>, response: &AppendEntriesResponse<C>) {
    match response {
        AppendEntriesResponse::Success => out.put_u8(0),
        AppendEntriesResponse::PartialSuccess(matched) => {
            out.put_u8(1);
            put_option_log_id(out, matched);
        }
        AppendEntriesResponse::Conflict => out.put_u8(2),
        AppendEntriesResponse::HigherVote(vote) => {
            out.put_u8(3);
            put_vote(out, vote);
        }
    }
}

pub fn get_append_response(r: &mut Reader<'_>) -> Decoded<AppendEntriesResponse<C>> {
    Ok(match r.u8()? {
        0 => AppendEntriesResponse::Success,
        1 => AppendEntriesResponse::PartialSuccess(get_option_log_id(r)?),
        2 => AppendEntriesResponse::Conflict,
        3 => AppendEntriesResponse::HigherVote(get_vote(r)?),
        _ => return Err(Malformed("an append response of unknown kind")),
    })
}

pub fn put_vote_request(out: &mut Vec<u8>, request: &VoteRequest<C>) {
    put_vote(out, &request.vote);
    put_option_log_id(out, &request.last_log_id);
    out.put_u8(u8::from(request.leadership_transfer));
}

pub fn get_vote_request(r: &mut Reader<'_>) -> Decoded<VoteRequest<C>> {
    let vote = get_vote(r)?;
    let last_log_id = get_option_log_id(r)?;
    let mut request = VoteRequest::new(vote, last_log_id);
    request.leadership_transfer = r.bool()?;
    Ok(request)
}

pub fn put_vote_response(out: &mut Vec<u8>, response: &VoteResponse<C>) {
    put_vote(out, &response.vote);
    out.put_u8(u8::from(response.vote_granted));
    put_option_log_id(out, &response.last_log_id);
}

pub fn get_vote_response(r: &mut Reader<'_>) -> Decoded<VoteResponse<C>> {
    let vote = get_vote(r)?;
    let granted = r.bool()?;
    Ok(VoteResponse::new(vote, get_option_log_id(r)?, granted))
}

pub fn put_transfer_request(out: &mut Vec<u8>, request: &TransferLeaderRequest<C>) {
    put_vote(out, request.from_leader());
    out.put_u64_le(*request.to_node_id());
    put_option_log_id(out, &request.last_log_id().copied());
}

pub fn get_transfer_request(r: &mut Reader<'_>) -> Decoded<TransferLeaderRequest<C>> {
    let from = get_vote(r)?;
    let to = r.u64()?;
    Ok(TransferLeaderRequest::new(from, to, get_option_log_id(r)?))
}

pub fn put_snapshot_response(out: &mut Vec<u8>, response: &SnapshotResponse<C>) {
    put_vote(out, &response.vote);
}

pub fn get_snapshot_response(r: &mut Reader<'_>) -> Decoded<SnapshotResponse<C>> {
    Ok(SnapshotResponse::new(get_vote(r)?))
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use super::*;

    fn node(id: u64) -> ShardNode {
        ShardNode { peer: format!("10.0.0.{id}:7300"), native: format!("10.0.0.{id}:7100"), resp: String::new() }
    }

    fn membership() -> Membership {
        let configs = vec![BTreeSet::from([1, 2, 3]), BTreeSet::from([2, 3, 4])];
        let nodes: BTreeMap<u64, ShardNode> = (1..=5).map(|id| (id, node(id))).collect();
        Membership::new(configs, nodes).expect("valid")
    }

    /// Compares by `Debug` text: not every openraft message implements `PartialEq`.
    fn round_trip<T: std::fmt::Debug>(
        value: &T,
        put: impl Fn(&mut Vec<u8>, &T),
        get: impl Fn(&mut Reader<'_>) -> Decoded<T>,
    ) {
        let mut out = Vec::new();
        put(&mut out, value);
        let mut reader = Reader::new(&out);
        assert_eq!(format!("{:?}", get(&mut reader).expect("decodes")), format!("{value:?}"));
        reader.finish().expect("nothing left over");
        for cut in 0..out.len() {
            assert!(get(&mut Reader::new(&out[..cut])).is_err(), "a message cut at {cut} is refused");
        }
    }

    /// Every message comes back as it was sent, and a message cut anywhere is refused rather than
    /// read short.
    #[test]
    fn messages_round_trip_and_truncation_is_refused() {
        let entries = vec![
            Entry { log_id: log_id(1, 1), payload: EntryPayload::Membership(membership()) },
            Entry { log_id: log_id(1, 2), payload: EntryPayload::Blank },
            Entry { log_id: log_id(2, 3), payload: EntryPayload::Normal(Redo::Payload(Bytes::from_static(b"rec"))) },
        ];
        let append = AppendEntriesRequest::<C> {
            vote: Vote::new_committed(2, 1),
            prev_log_id: Some(log_id(1, 0)),
            leader_commit: None,
            entries,
        };
        round_trip(&append, put_append_request, get_append_request);
        for response in [
            AppendEntriesResponse::Success,
            AppendEntriesResponse::PartialSuccess(Some(log_id(3, 9))),
            AppendEntriesResponse::Conflict,
            AppendEntriesResponse::HigherVote(Vote::new(7, 2)),
        ] {
            round_trip(&response, put_append_response, get_append_response);
        }
        let mut vote = VoteRequest::<C>::new(Vote::new(3, 2), Some(log_id(2, 40)));
        vote.leadership_transfer = true;
        round_trip(&vote, put_vote_request, get_vote_request);
        let response = VoteResponse::<C>::new(Vote::new(3, 2), None, true);
        round_trip(&response, put_vote_response, get_vote_response);
        let transfer = TransferLeaderRequest::<C>::new(Vote::new_committed(3, 1), 2, Some(log_id(3, 7)));
        round_trip(&transfer, put_transfer_request, get_transfer_request);
        let hello = Hello { group: 3, from: 1, to: 2, cluster: 0xfeed, nonce: [7; NONCE_BYTES] };
        assert_eq!(Hello::decode(&hello.encode()), Ok(hello));
    }

    /// Counts and lengths beyond the message or their limits are refused before any allocation.
    #[test]
    fn oversized_counts_are_refused() {
        let mut out = Vec::new();
        put_vote(&mut out, &Vote::new(1, 1));
        put_option_log_id(&mut out, &None);
        put_option_log_id(&mut out, &None);
        out.put_u32_le(u32::MAX);
        assert_eq!(
            get_append_request(&mut Reader::new(&out)).err(),
            Some(Malformed("a count larger than the message"))
        );
        let mut membership = Vec::new();
        membership.put_u32_le(3);
        assert!(get_membership(&mut Reader::new(&membership)).is_err(), "no more than a joint config");
    }
}
