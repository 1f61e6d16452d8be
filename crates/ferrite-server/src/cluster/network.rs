//! The peer protocol's two ends: the client openraft sends a group's messages through (one TCP
//! connection per replication stream, made on first use, remade after a failure) and the
//! listener that hands what other replicas send to this replica's Raft.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;
use std::time::Duration;

use openraft::errors::{NetworkError, RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::{RPCOption, RaftNetworkFactory, RaftNetworkV2};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, TransferLeaderRequest, TransferLeaderResponse,
    VoteRequest, VoteResponse,
};
use openraft::OptionalSend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

use super::handshake::{self, PeerSecret};
use super::snapshot::{SnapshotFiles, SnapshotStore};
use super::types::{ShardNode, Vote, C};
use super::view::shard_address;
use super::wire::{self, Hello, Kind, Malformed, Reader, FRAME_BODY_BYTES_MAX, FRAME_HEADER_BYTES, RESPONSE};

type SnapshotOf = openraft::type_config::alias::SnapshotOf<C, SnapshotFiles>;
pub(crate) type ShardRaft = openraft::Raft<C, super::state_machine::ShardMachine>;

/// How long a connection to a peer may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// Bytes of a snapshot file per chunk.
const CHUNK_BYTES: usize = 1 << 20;
/// How long a peer may take to install a snapshot once it has all of it.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(600);

/// What both ends of a group's peer connections know: who this replica is, the cluster it
/// belongs to, and the secret that proves it.
#[derive(Debug, Clone)]
pub(crate) struct PeerIdentity {
    pub group: u16,
    pub node_id: u64,
    /// The cluster's id, 0 until this replica learns it (at `cluster init`, or from the first
    /// member that calls it).
    pub cluster: Rc<Cell<u64>>,
    pub secret: PeerSecret,
    /// The address calls leave from: the peer listener's, so that peers (and a test's relays)
    /// see the node where it listens. `None` when it listens on every address.
    pub local_ip: Option<IpAddr>,
}

/// Makes the clients openraft sends one group's messages through.
#[derive(Debug, Clone)]
pub(crate) struct PeerNetwork {
    pub identity: PeerIdentity,
    pub first_readable: FirstReadable,
}

/// The first log index this replica can still read (the one after the last it purged), read
/// when a client sends.
#[derive(Clone)]
pub(crate) struct FirstReadable(pub Rc<dyn Fn() -> u64>);

impl std::fmt::Debug for FirstReadable {
    /// Names it without reading it: the shard may be borrowed where this is printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FirstReadable")
    }
}

impl RaftNetworkFactory<C> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &ShardNode) -> PeerClient {
        self.client(target, node, Some(self.first_readable.clone()))
    }

    /// Heartbeats carry no entries from the follower's matching place, which may lie before the
    /// purge while the follower waits for its snapshot: they still go, so it hears its leader.
    async fn new_heartbeat_client(&mut self, target: u64, node: &ShardNode) -> PeerClient {
        self.client(target, node, None)
    }
}

impl PeerNetwork {
    fn client(&self, target: u64, node: &ShardNode, first_readable: Option<FirstReadable>) -> PeerClient {
        PeerClient {
            address: shard_address(&node.peer, usize::from(self.identity.group)),
            identity: self.identity.clone(),
            first_readable,
            target,
            stream: None,
            next_id: 1,
        }
    }
}

/// A connection to one peer replica of the group.
#[derive(Debug)]
pub(crate) struct PeerClient {
    /// The peer's listener for this group; `None` if its address is not one.
    address: Option<String>,
    identity: PeerIdentity,
    /// For a replication client: what it may send from (see [`follows_purged_entries`]).
    first_readable: Option<FirstReadable>,
    target: u64,
    stream: Option<TcpStream>,
    next_id: u64,
}

/// A failure to reach a peer: it did not answer (backoff), or the exchange broke (retry).
enum Failure {
    Unreachable(String),
    Broken(String),
}

impl From<Failure> for RPCError<C> {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Unreachable(why) => RPCError::Unreachable(Unreachable::from_string(why)),
            Failure::Broken(why) => RPCError::Network(NetworkError::from_string(why)),
        }
    }
}

impl From<Failure> for StreamingError<C> {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Unreachable(why) => StreamingError::Unreachable(Unreachable::from_string(why)),
            Failure::Broken(why) => StreamingError::Network(NetworkError::from_string(why)),
        }
    }
}

impl PeerClient {
    async fn connected(&mut self) -> Result<&mut TcpStream, Failure> {
        if self.stream.is_none() {
            let address = self.address.clone().ok_or_else(|| Failure::Unreachable("no peer address".into()))?;
            let connect = tokio::time::timeout(CONNECT_TIMEOUT, connect(&address, self.identity.local_ip));
            let mut stream = match connect.await {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => return Err(Failure::Unreachable(format!("{address}: {error}"))),
                Err(_) => return Err(Failure::Unreachable(format!("{address}: no answer within {CONNECT_TIMEOUT:?}"))),
            };
            let _ = stream.set_nodelay(true);
            let identity = &self.identity;
            let hello = Hello {
                group: identity.group,
                from: identity.node_id,
                to: self.target,
                cluster: identity.cluster.get(),
                nonce: handshake::nonce(),
            };
            handshake::call(&mut stream, &hello, &identity.secret)
                .await
                .map_err(|e| Failure::Unreachable(format!("{address}: {e}")))?;
            self.stream = Some(stream);
        }
        Ok(self.stream.as_mut().expect("connected above"))
    }

    /// Sends one request and waits (up to `timeout`) for its response body.
    async fn call(
        &mut self,
        kind: Kind,
        body: impl FnOnce(&mut Vec<u8>),
        timeout: Duration,
    ) -> Result<Vec<u8>, Failure> {
        let id = self.next_id;
        self.next_id += 1;
        let mut frame = Vec::new();
        wire::encode_frame(kind as u8, id, &mut frame, body);
        let exchange = async {
            let stream = self.connected().await?;
            stream.write_all(&frame).await.map_err(|e| Failure::Broken(e.to_string()))?;
            // A response to an earlier request this stream carried (one whose caller stopped
            // waiting) may come first: skip it.
            let (response_kind, body) = loop {
                let (response_kind, response_id, body) =
                    read_frame(stream).await.map_err(|e| Failure::Broken(e.to_string()))?;
                if response_id == id {
                    break (response_kind, body);
                }
                if response_id > id {
                    return Err(Failure::Broken("a response to a request not made".into()));
                }
            };
            match Kind::from_u8(response_kind) {
                Some(Kind::Failed) => Err(Failure::Unreachable(String::from_utf8_lossy(&body).into_owned())),
                Some(answered) if answered == kind && response_kind & RESPONSE != 0 => Ok(body),
                _ => Err(Failure::Broken("a response of the wrong kind".into())),
            }
        };
        let outcome = match tokio::time::timeout(timeout, exchange).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::Broken(format!("no response within {timeout:?}"))),
        };
        if outcome.is_err() {
            // The stream may hold half an exchange: the next call starts a new one.
            self.stream = None;
        }
        outcome
    }

    /// Sends one part of a snapshot, with no response.
    async fn send(&mut self, kind: Kind, body: impl FnOnce(&mut Vec<u8>)) -> Result<(), Failure> {
        let mut frame = Vec::new();
        wire::encode_frame(kind as u8, 0, &mut frame, body);
        let stream = self.connected().await?;
        let sent = stream.write_all(&frame).await.map_err(|e| Failure::Broken(e.to_string()));
        if sent.is_err() {
            self.stream = None;
        }
        sent
    }
}

fn decode<T>(body: &[u8], get: impl FnOnce(&mut Reader<'_>) -> Result<T, Malformed>) -> Result<T, Failure> {
    let mut reader = Reader::new(body);
    let value = get(&mut reader).map_err(|e| Failure::Broken(e.to_string()))?;
    reader.finish().map_err(|e| Failure::Broken(e.to_string()))?;
    Ok(value)
}

/// Whether `rpc` carries no entries from a place whose next entries this leader has purged
/// (`first_readable` is the first it still holds): what openraft's replication stream sends
/// when the log it was replicating from was purged under it.
fn follows_purged_entries(rpc: &AppendEntriesRequest<C>, first_readable: u64) -> bool {
    let next = rpc.prev_log_id.as_ref().map_or(0, |id| id.index + 1);
    rpc.entries.is_empty() && next < first_readable
}

impl RaftNetworkV2<C> for PeerClient {
    type SnapshotData = SnapshotFiles;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<C>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<C>, RPCError<C>> {
        if self.first_readable.as_ref().is_some_and(|first| follows_purged_entries(&rpc, (first.0)())) {
            // The stream stalled on a purge: openraft's stream, given no entries, sends a
            // heartbeat from the same place for good, which a follower that installed a later
            // snapshot accepts. Failing the call ends the stream, and the leader decides again:
            // a snapshot, since what follows this place is purged.
            return Err(RPCError::Network(NetworkError::from_string(format!(
                "the entries after {} are purged: the follower needs a snapshot",
                rpc.prev_log_id.as_ref().map_or(0, |id| id.index)
            ))));
        }
        // A follower answers once the entries are durable: allow a group commit or two beyond
        // the soft deadline.
        let timeout = option.soft_ttl().max(Duration::from_millis(200)) * 4;
        let body = self.call(Kind::AppendEntries, |out| wire::put_append_request(out, &rpc), timeout).await?;
        Ok(decode(&body, wire::get_append_response)?)
    }

    async fn vote(&mut self, rpc: VoteRequest<C>, option: RPCOption) -> Result<VoteResponse<C>, RPCError<C>> {
        let body = self.call(Kind::Vote, |out| wire::put_vote_request(out, &rpc), option.soft_ttl()).await?;
        Ok(decode(&body, wire::get_vote_response)?)
    }

    async fn pre_vote(&mut self, rpc: VoteRequest<C>, option: RPCOption) -> Result<VoteResponse<C>, RPCError<C>> {
        let body = self.call(Kind::PreVote, |out| wire::put_vote_request(out, &rpc), option.soft_ttl()).await?;
        Ok(decode(&body, wire::get_vote_response)?)
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<C>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<C>, RPCError<C>> {
        let timeout = option.soft_ttl().max(Duration::from_millis(500));
        self.call(Kind::TransferLeader, |out| wire::put_transfer_request(out, &req), timeout).await?;
        Ok(Ok(()))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: SnapshotOf,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<C>, StreamingError<C>> {
        let sending = async {
            let meta = super::snapshot::encode_snapshot_meta(&snapshot.meta);
            self.send(Kind::SnapshotBegin, |out| {
                wire::put_vote(out, &vote);
                wire::put_bytes(out, &meta);
            })
            .await?;
            let files = snapshot.snapshot.files().map_err(|e| Failure::Unreachable(e.to_string()))?;
            for name in files {
                let path = snapshot.snapshot.dir.join(&name);
                // Read a chunk at a time on the shard's thread: a local file, a millisecond a chunk.
                let mut file = std::fs::File::open(&path).map_err(|e| Failure::Unreachable(e.to_string()))?;
                let mut offset = 0u64;
                let mut chunk = vec![0u8; CHUNK_BYTES];
                loop {
                    let read =
                        std::io::Read::read(&mut file, &mut chunk).map_err(|e| Failure::Unreachable(e.to_string()))?;
                    self.send(Kind::SnapshotChunk, |out| {
                        wire::put_bytes(out, name.as_bytes());
                        out.extend_from_slice(&offset.to_le_bytes());
                        wire::put_bytes(out, &chunk[..read]);
                    })
                    .await?;
                    if read == 0 {
                        break;
                    }
                    offset += read as u64;
                }
            }
            let body = self.call(Kind::SnapshotEnd, |_| {}, INSTALL_TIMEOUT).await?;
            decode(&body, wire::get_snapshot_response)
        };
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            sent = sending => sent.map_err(StreamingError::from),
        }
    }
}

/// Connects to `address` (a host name is looked up each time: a node that moved keeps its name)
/// from `local_ip`, if given.
async fn connect(address: &str, local_ip: Option<IpAddr>) -> io::Result<TcpStream> {
    let mut last_error = io::Error::other("the name has no address");
    for target in tokio::net::lookup_host(address).await? {
        let socket = if target.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        if let Some(ip) = local_ip.filter(|ip| ip.is_ipv4() == target.is_ipv4()) {
            socket.bind(SocketAddr::new(ip, 0))?;
        }
        match socket.connect(target).await {
            Ok(stream) => return Ok(stream),
            Err(error) => last_error = error,
        }
    }
    Err(last_error)
}

/// Reads one frame: its kind, request id and body (bounded before anything is allocated).
async fn read_frame(stream: &mut TcpStream) -> io::Result<(u8, u64, Vec<u8>)> {
    let mut header = [0u8; FRAME_HEADER_BYTES];
    stream.read_exact(&mut header).await?;
    let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
    if len > FRAME_BODY_BYTES_MAX {
        return Err(io::Error::other(format!("a peer frame of {len} bytes, over the limit")));
    }
    let kind = header[4];
    let id = u64::from_le_bytes(header[5..13].try_into().expect("8 bytes"));
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await?;
    Ok((kind, id, body))
}

/// What a peer listener needs of its replica.
#[derive(Clone)]
pub(crate) struct PeerContext {
    pub identity: PeerIdentity,
    /// This replica's Raft, once it runs.
    pub raft: Rc<RefCell<Option<ShardRaft>>>,
    pub snapshots: SnapshotStore,
    /// Whether a node may send this replica messages: a member of its group (or anyone while
    /// the group has no members yet: a new node waits to be added).
    pub admits: Rc<dyn Fn(u64) -> bool>,
    /// Records that the group's leader reached this replica (an append it accepted).
    pub heard: Rc<dyn Fn()>,
    /// Records the cluster this replica learned it belongs to (from the first member that
    /// calls it while it knows none).
    pub join_cluster: Rc<dyn Fn(u64) -> io::Result<()>>,
}

/// Accepts other replicas' connections to this group's peer listener until `stop`.
pub(crate) async fn serve_peers(listener: TcpListener, context: PeerContext, mut stop: watch::Receiver<bool>) {
    loop {
        let accepted = tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                let context = context.clone();
                tokio::task::spawn_local(async move {
                    if let Err(error) = serve_peer(stream, context).await {
                        tracing::debug!(%peer, %error, "peer connection ended");
                    }
                });
            }
            Err(error) => {
                tracing::warn!(%error, "peer accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A snapshot being received on one connection.
struct Receiving {
    vote: Vote,
    meta: Vec<u8>,
    dir: std::path::PathBuf,
}

async fn serve_peer(mut stream: TcpStream, context: PeerContext) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let identity = &context.identity;
    let hello = handshake::answer(&mut stream, &identity.secret).await?;
    if hello.group != identity.group || hello.to != identity.node_id {
        return Err(io::Error::other(format!(
            "a peer meant for node {} group {} reached node {} group {}",
            hello.to, hello.group, identity.node_id, identity.group
        )));
    }
    let ours = identity.cluster.get();
    if hello.cluster != ours && ours != 0 {
        return Err(io::Error::other(format!(
            "node {} belongs to cluster {:016x}, this node to {ours:016x}",
            hello.from, hello.cluster
        )));
    }
    if !(context.admits)(hello.from) {
        return Err(io::Error::other(format!("node {} is no member of group {}", hello.from, identity.group)));
    }
    let mut receiving: Option<Receiving> = None;
    loop {
        let (kind, id, body) = read_frame(&mut stream).await?;
        let Some(raft) = context.raft.borrow().clone() else {
            return Err(io::Error::other("this replica's Raft is not running"));
        };
        let kind_of = Kind::from_u8(kind);
        let replicated = matches!(kind_of, Some(Kind::AppendEntries | Kind::SnapshotBegin));
        if replicated && identity.cluster.get() == 0 && hello.cluster != 0 {
            // A leader of the cluster replicates to this replica: it joins that cluster.
            (context.join_cluster)(hello.cluster)?;
        }
        let mut response = Vec::new();
        let answer = match kind_of {
            Some(Kind::Vote | Kind::PreVote) if identity.cluster.get() == 0 => {
                // A replica that belongs to no cluster yet is new, or empty after losing its
                // disk: a vote it gave before may be forgotten, so it votes only once a leader
                // has replicated to it.
                Err("this replica has joined no cluster yet and does not vote".to_owned())
            }
            Some(Kind::AppendEntries) => {
                let request = parse(&body, wire::get_append_request)?;
                let reply = raft.append_entries(request).await;
                if matches!(reply, Ok(AppendEntriesResponse::Success | AppendEntriesResponse::PartialSuccess(_))) {
                    (context.heard)();
                }
                reply
                    .map(|reply| respond(kind, id, &mut response, |out| wire::put_append_response(out, &reply)))
                    .map_err(|e| e.to_string())
            }
            Some(Kind::Vote) => {
                let request = parse(&body, wire::get_vote_request)?;
                raft.vote(request)
                    .await
                    .map(|reply| respond(kind, id, &mut response, |out| wire::put_vote_response(out, &reply)))
                    .map_err(|e| e.to_string())
            }
            Some(Kind::PreVote) => {
                let request = parse(&body, wire::get_vote_request)?;
                raft.pre_vote(request)
                    .await
                    .map(|reply| respond(kind, id, &mut response, |out| wire::put_vote_response(out, &reply)))
                    .map_err(|e| e.to_string())
            }
            Some(Kind::TransferLeader) => {
                let request = parse(&body, wire::get_transfer_request)?;
                raft.handle_transfer_leader(request)
                    .await
                    .map(|_| respond(kind, id, &mut response, |_| {}))
                    .map_err(|e| e.to_string())
            }
            Some(Kind::SnapshotBegin) => {
                let mut r = Reader::new(&body);
                let vote = wire::get_vote(&mut r).map_err(io::Error::other)?;
                let meta = r.bytes(FRAME_BODY_BYTES_MAX).map_err(io::Error::other)?.to_vec();
                let dir = context.snapshots.incoming_dir(&format!("{}-{}", hello.from, std::process::id()));
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::create_dir_all(&dir)?;
                receiving = Some(Receiving { vote, meta, dir });
                continue;
            }
            Some(Kind::SnapshotChunk) => {
                let Some(snapshot) = &receiving else { return Err(io::Error::other("a snapshot chunk out of place")) };
                let mut r = Reader::new(&body);
                let name = r.text(255).map_err(io::Error::other)?;
                let offset = r.u64().map_err(io::Error::other)?;
                let data = r.bytes(FRAME_BODY_BYTES_MAX).map_err(io::Error::other)?;
                if name.contains('/') || name.starts_with('.') || name.is_empty() {
                    return Err(io::Error::other("a snapshot file name that is not one"));
                }
                write_chunk(&snapshot.dir.join(&name), offset, data)?;
                continue;
            }
            Some(Kind::SnapshotEnd) => {
                let Some(snapshot) = receiving.take() else {
                    return Err(io::Error::other("a snapshot end out of place"));
                };
                let meta = super::snapshot::decode_meta(&snapshot.meta)?;
                let files = SnapshotFiles { dir: snapshot.dir };
                let installed = raft
                    .install_full_snapshot(snapshot.vote, SnapshotOf { meta, snapshot: files })
                    .await
                    .map_err(|e| e.to_string());
                installed.map(|reply| respond(kind, id, &mut response, |out| wire::put_snapshot_response(out, &reply)))
            }
            _ => return Err(io::Error::other("a peer frame of unknown kind")),
        };
        if let Err(reason) = answer {
            wire::encode_frame(Kind::Failed as u8 | RESPONSE, id, &mut response, |out| {
                out.extend_from_slice(reason.as_bytes())
            });
        }
        stream.write_all(&response).await?;
    }
}

fn parse<T>(body: &[u8], get: impl FnOnce(&mut Reader<'_>) -> Result<T, Malformed>) -> io::Result<T> {
    let mut reader = Reader::new(body);
    let value = get(&mut reader).map_err(io::Error::other)?;
    reader.finish().map_err(io::Error::other)?;
    Ok(value)
}

fn respond(kind: u8, id: u64, out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    wire::encode_frame(kind | RESPONSE, id, out, body);
}

fn write_chunk(path: &std::path::Path, offset: u64, data: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().create(true).write(true).truncate(false).open(path)?;
    file.write_all_at(data, offset)?;
    if data.is_empty() {
        file.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use openraft::EntryPayload;

    use super::*;
    use crate::cluster::types::{log_id, Entry};

    fn append(prev: Option<u64>, entries: u64) -> AppendEntriesRequest<C> {
        let first = prev.map_or(0, |index| index + 1);
        AppendEntriesRequest {
            vote: Vote::new_committed(2, 1),
            prev_log_id: prev.map(|index| log_id(2, index)),
            leader_commit: None,
            entries: (first..first + entries)
                .map(|index| Entry { log_id: log_id(2, index), payload: EntryPayload::Blank })
                .collect(),
        }
    }

    /// The stalled stream's request (no entries from a place whose next entries are purged) is
    /// told apart from a request that carries entries, and from one that follows a place the
    /// leader still holds the next entries of.
    #[test]
    fn a_request_from_before_the_purge_with_no_entries_is_the_stalled_stream() {
        assert!(follows_purged_entries(&append(Some(240), 0), 300), "the next entry, 241, is purged");
        assert!(follows_purged_entries(&append(None, 0), 300), "from the log's start, purged");
        assert!(!follows_purged_entries(&append(Some(299), 0), 300), "300 is the first still held");
        assert!(!follows_purged_entries(&append(Some(240), 3), 300), "entries were read: not stalled");
        assert!(!follows_purged_entries(&append(None, 0), 0), "nothing purged");
    }
}
