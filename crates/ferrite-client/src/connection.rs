//! One pipelined connection to one shard.
//!
//! Many requests travel on one TCP connection at once; each carries a request id and its
//! response is matched by that id, in whatever order responses arrive. Three parties share the
//! connection:
//!
//! - callers encode their request into a shared outgoing buffer, register a oneshot channel
//!   under the request's id and wake the writer;
//! - the writer task swaps the whole buffer out and writes it with one `write_all`, so thousands
//!   of concurrent requests go out in a handful of syscalls instead of one each;
//! - the reader task cuts incoming bytes into frames, decodes each and completes the matching
//!   channel.
//!
//! When the connection fails, every outstanding request is failed at once with the cause, and
//! every later request fails immediately: a caller never waits on a dead socket.

use std::fmt;
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ferrite_proto::{ErrorCode, Header, Limits, Request, PROTOCOL_VERSION};
use foldhash::HashMap;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{oneshot, Notify};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::frame_reader::FrameReader;
use crate::reply::{Hello, Reply};
use crate::tls::Connector;
use crate::tls_problem::{self, Attempt};

/// Requests wait (asynchronously) while this many bytes are queued and not yet handed to the
/// socket. Without a bound, callers producing large values faster than the network drains them
/// would grow the buffer without limit; with it, memory stays near twice this figure (the queued
/// buffer plus the one being written) while batches stay large enough to amortise syscalls.
const OUTGOING_BYTES_HIGH: usize = 8 * 1024 * 1024;

/// Request id 0 is never used: the server sends connection-level errors (`too_many_connections`)
/// with id 0, and they must not be mistaken for the answer to a request.
const FIRST_REQUEST_ID: u64 = 1;

type ReplySender = oneshot::Sender<Result<Reply>>;

/// A handle to a pipelined shard connection. Cheap to clone; the socket closes when the last
/// clone is dropped.
#[derive(Debug, Clone)]
pub(crate) struct Connection {
    shared: Arc<Shared>,
    /// Owned only by handles, never by the tasks, so dropping the last handle stops the tasks.
    /// Never read: it exists for its `Drop`.
    _tasks: Arc<Tasks>,
    /// The server's announced limits, capped at the protocol ceilings: `Request::encode` panics
    /// beyond those, and a buggy server must not be able to make us panic.
    limits: Limits,
    /// The IP this connection reached, for resolving `0.0.0.0` in shard addresses.
    peer_ip: IpAddr,
}

#[derive(Debug)]
struct Shared {
    /// A std mutex, not Tokio's: it is held only to append bytes or touch the map, never across
    /// an `.await`, and uncontended std locks are far cheaper.
    state: Mutex<State>,
    /// Wakes the writer when bytes are queued or the connection closed. `notify_one` stores a
    /// permit when the writer is busy, so no wake-up is lost and bursts coalesce into one.
    wake_writer: Notify,
    /// Wakes requests held back by [`OUTGOING_BYTES_HIGH`] once the writer takes the buffer.
    drained: Notify,
    /// The address we dialled, for error messages.
    address: Arc<str>,
}

#[derive(Debug)]
struct State {
    next_request_id: u64,
    pending: HashMap<u64, ReplySender>,
    outgoing: BytesMut,
    /// Set once, when the connection fails; every later request fails with it.
    closed: Option<CloseCause>,
}

/// The background tasks of one connection, stopped when the last handle goes away.
#[derive(Debug)]
struct Tasks {
    reader: AbortHandle,
    writer: AbortHandle,
}

impl Drop for Tasks {
    fn drop(&mut self) {
        // Aborting drops both socket halves, which closes the connection; the server then closes
        // every pool this connection still had open.
        self.reader.abort();
        self.writer.abort();
    }
}

/// Why a connection stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CloseCause {
    /// The server closed its end cleanly between frames.
    PeerClosed,
    /// Reading or writing the socket failed.
    Io(String),
    /// The server sent a connection-level error (request id 0, e.g. `too_many_connections`).
    Server { code: ErrorCode, message: String },
    /// The byte stream can no longer be trusted (a frame too large to be real, a reply to a
    /// request we never sent, end of stream inside a frame).
    Violation(String),
    /// TLS failed after the handshake; the sentence says why.
    Tls(String),
    /// The server answered this client's first frame, sent in clear, with a TLS record (the
    /// alert a TLS server sends to a client that does not speak TLS) and closed.
    ServerSpeaksTls,
}

impl fmt::Display for CloseCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseCause::PeerClosed => f.write_str("the server closed the connection"),
            CloseCause::Io(text) => f.write_str(text),
            CloseCause::Server { code, message } => {
                write!(f, "the server ended the connection with {code}: {message}")
            }
            CloseCause::Violation(text) => write!(f, "protocol violation: {text}"),
            CloseCause::Tls(problem) => write!(f, "TLS: {problem}"),
            CloseCause::ServerSpeaksTls => f.write_str("the server speaks TLS and this client connected in clear"),
        }
    }
}

impl CloseCause {
    /// The error for requests that were outstanding when the connection stopped. A server that
    /// ended the connection with an error code gets that code passed on, so `connect` to a full
    /// shard fails with `too_many_connections` rather than a vague "closed".
    fn pending_error(&self, address: &str) -> Error {
        match self {
            CloseCause::Server { code, message } => Error::Server { code: *code, message: message.clone() },
            CloseCause::Tls(problem) => Error::Tls { address: address.to_owned(), problem: problem.clone() },
            CloseCause::ServerSpeaksTls => Error::TlsRequired { address: address.to_owned() },
            other => other.later_error(address),
        }
    }

    /// The error for requests made after the connection stopped.
    fn later_error(&self, address: &str) -> Error {
        Error::ConnectionClosed(format!("connection to {address} closed: {self}"))
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("connection state lock poisoned: nothing that can panic runs while it is held")
    }

    /// Encodes the request and registers its reply channel, unless the connection is closed or
    /// the outgoing buffer is over its high-water mark (`Ok(None)`: wait and retry).
    fn try_enqueue(&self, request: &Request<'_>, ignore_high_water: bool) -> Result<Option<PendingReply>> {
        let mut state = self.lock();
        if let Some(cause) = &state.closed {
            return Err(cause.later_error(&self.address));
        }
        if !ignore_high_water && state.outgoing.len() >= OUTGOING_BYTES_HIGH {
            return Ok(None);
        }
        let request_id = state.next_request_id;
        state.next_request_id += 1;
        request.encode(request_id, &mut state.outgoing);
        let (sender, receiver) = oneshot::channel();
        state.pending.insert(request_id, sender);
        drop(state);
        self.wake_writer.notify_one();
        Ok(Some(PendingReply { receiver, address: Arc::clone(&self.address) }))
    }

    /// Marks the connection closed and fails every outstanding request. Idempotent: the first
    /// cause wins, because later failures are usually consequences of it.
    fn close(&self, cause: CloseCause) {
        let pending = {
            let mut state = self.lock();
            if state.closed.is_some() {
                return;
            }
            state.closed = Some(cause.clone());
            state.outgoing = BytesMut::new();
            std::mem::take(&mut state.pending)
        };
        for (_, sender) in pending {
            // The caller may have given up waiting; nothing to tell it then.
            let _ = sender.send(Err(cause.pending_error(&self.address)));
        }
        self.wake_writer.notify_one();
        self.drained.notify_waiters();
    }

    /// Hands one response to the request waiting for it. An error return ends the connection.
    fn dispatch(&self, header: &Header, body: &Bytes) -> Result<(), CloseCause> {
        // Decode before taking the lock: callers keep enqueueing meanwhile.
        let reply = Reply::decode(header, body);
        let sender = self.lock().pending.remove(&header.request_id);
        match (sender, reply) {
            (Some(sender), reply) => {
                let _ = sender.send(reply);
                Ok(())
            }
            (None, Err(Error::Server { code, message })) if header.request_id == 0 => {
                Err(CloseCause::Server { code, message })
            }
            (None, _) => Err(CloseCause::Violation(format!(
                "the server answered request id {}, which is not outstanding",
                header.request_id
            ))),
        }
    }
}

/// A request on the wire whose reply has not been awaited yet. Lets one caller put several
/// requests in flight before waiting for any of them.
#[derive(Debug)]
pub(crate) struct PendingReply {
    receiver: oneshot::Receiver<Result<Reply>>,
    address: Arc<str>,
}

impl PendingReply {
    pub(crate) async fn wait(self) -> Result<Reply> {
        match self.receiver.await {
            Ok(reply) => reply,
            // Only possible if the tasks were aborted with the request outstanding.
            Err(_) => Err(Error::ConnectionClosed(format!(
                "connection to {} closed before the server answered",
                self.address
            ))),
        }
    }
}

impl Connection {
    /// Connects to `address` and performs the hello handshake, all within `timeout`. Must run
    /// inside a Tokio runtime: the reader and writer tasks are spawned onto it.
    ///
    /// Each step fails its own way, so the caller can tell "nothing answered" from "the server
    /// answered wrongly": [`Error::Unreachable`] if no TCP connection was made, [`Error::Tls`]
    /// if TLS failed, [`Error::TlsRequired`] if the server speaks TLS to a client in clear.
    pub(crate) async fn open(
        address: &str,
        client_name: &str,
        auth: &[u8],
        tls: Option<&Connector>,
        timeout: Duration,
    ) -> Result<(Connection, Hello)> {
        let deadline = Instant::now() + timeout;
        let stream = match tokio::time::timeout_at(deadline, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(source)) => return Err(Error::Unreachable { address: address.to_owned(), source }),
            Err(_) => {
                let source = io::Error::new(io::ErrorKind::TimedOut, format!("no connection within {timeout:?}"));
                return Err(Error::Unreachable { address: address.to_owned(), source });
            }
        };
        // We batch writes ourselves; Nagle would only add latency to the last frame of a batch.
        stream
            .set_nodelay(true)
            .map_err(|error| Error::io(format!("configuring the connection to {address}"), error))?;
        let peer_ip = stream.peer_addr().map_err(|error| Error::io(format!("connecting to {address}"), error))?.ip();
        let mut connection = match tls {
            None => {
                let (read_half, write_half) = stream.into_split();
                Connection::start(read_half, write_half, address.into(), peer_ip, None)
            }
            Some(connector) => {
                let handshake = crate::tls::handshake(connector, address, stream);
                let (stream, attempt) =
                    tokio::time::timeout_at(deadline, handshake).await.map_err(|_| Error::Tls {
                        address: address.to_owned(),
                        problem: format!(
                        "the server accepted the connection but did not complete a TLS handshake within {timeout:?}: \
                         a server without TLS waits for a hello in clear instead (is it configured with [tls]?)"
                    ),
                    })??;
                let (read_half, write_half) = tokio::io::split(stream);
                Connection::start(read_half, write_half, address.into(), peer_ip, Some(attempt))
            }
        };

        let hello = Request::Hello { version: PROTOCOL_VERSION, client_name, auth };
        let hello = match tokio::time::timeout_at(deadline, connection.call(&hello)).await {
            Ok(reply) => reply?,
            Err(_) => {
                return Err(Error::io(
                    format!("connecting to {address}"),
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the server accepted the connection but sent no handshake reply within {timeout:?}"),
                    ),
                ))
            }
        };
        let hello = match hello {
            Reply::Hello(hello) => hello,
            other => return Err(other.unexpected("hello")),
        };
        connection.limits = Limits {
            key_bytes_max: hello.limits.key_bytes_max.min(Limits::MAX.key_bytes_max),
            value_bytes_max: hello.limits.value_bytes_max.min(Limits::MAX.value_bytes_max),
        };
        Ok((connection, hello))
    }

    /// Spawns the reader and writer tasks for an established stream's two halves.
    fn start<R, W>(read_half: R, write_half: W, address: Arc<str>, peer_ip: IpAddr, tls: Option<Attempt>) -> Connection
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                next_request_id: FIRST_REQUEST_ID,
                pending: HashMap::default(),
                outgoing: BytesMut::new(),
                closed: None,
            }),
            wake_writer: Notify::new(),
            drained: Notify::new(),
            address,
        });
        let reader = tokio::spawn(read_loop(Arc::clone(&shared), read_half, tls)).abort_handle();
        let writer = tokio::spawn(write_loop(Arc::clone(&shared), write_half, reader.clone())).abort_handle();
        Connection { shared, _tasks: Arc::new(Tasks { reader, writer }), limits: Limits::MAX, peer_ip }
    }

    pub(crate) fn limits(&self) -> Limits {
        self.limits
    }

    pub(crate) fn peer_ip(&self) -> IpAddr {
        self.peer_ip
    }

    /// Whether both handles are of one connection.
    pub(crate) fn is(&self, other: &Connection) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.shared.lock().closed.is_some()
    }

    /// Puts a request on the wire (or in the outgoing buffer) and returns without waiting for
    /// the reply. Waits only while the outgoing buffer is over its high-water mark.
    pub(crate) async fn send(&self, request: &Request<'_>) -> Result<PendingReply> {
        request.check(&self.limits)?;
        loop {
            if let Some(pending) = self.shared.try_enqueue(request, false)? {
                return Ok(pending);
            }
            // Register for the wake-up before checking again, or the writer could drain the
            // buffer between our check and our wait and we would sleep forever.
            let drained = self.shared.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if let Some(pending) = self.shared.try_enqueue(request, false)? {
                return Ok(pending);
            }
            drained.await;
        }
    }

    /// Sends a request and waits for its reply.
    pub(crate) async fn call(&self, request: &Request<'_>) -> Result<Reply> {
        self.send(request).await?.wait().await
    }

    /// Queues a request whose reply nobody will read. Synchronous and runtime-free so it can run
    /// in `Drop`; its reply is matched and discarded like any other.
    pub(crate) fn send_detached(&self, request: &Request<'_>) {
        if request.check(&self.limits).is_ok() {
            // A closed connection needs no close_pool: the server already closed its pools.
            let _ = self.shared.try_enqueue(request, true);
        }
    }
}

/// Reads frames and hands each to its request until the connection ends. `tls` is what the TLS
/// handshake knew, to explain a TLS failure that shows only at a read (a server refusing a
/// client certificate after a TLS 1.3 handshake).
async fn read_loop(shared: Arc<Shared>, mut socket: impl AsyncRead + Unpin, tls: Option<Attempt>) {
    let mut frames = FrameReader::new();
    let mut answered = false;
    let cause = 'read: loop {
        loop {
            match frames.next_frame() {
                Ok(Some((header, body))) => {
                    answered = true;
                    if let Err(cause) = shared.dispatch(&header, &body) {
                        break 'read cause;
                    }
                }
                Ok(None) => break,
                Err(error) => break 'read CloseCause::Violation(error.to_string()),
            }
        }
        match socket.read_buf(frames.read_buffer()).await {
            Ok(0) if frames.buffered_len() == 0 => break CloseCause::PeerClosed,
            Ok(0) if !answered && tls.is_none() && frames.starts_with_tls_record() => {
                break CloseCause::ServerSpeaksTls
            }
            Ok(0) => {
                break CloseCause::Violation(format!(
                    "the server closed the connection in the middle of a frame ({} bytes of it received)",
                    frames.buffered_len()
                ))
            }
            Ok(_) => {}
            Err(error) => match tls.as_ref().and_then(|attempt| tls_problem::explain(&error, attempt)) {
                Some(problem) => break CloseCause::Tls(problem),
                None => break CloseCause::Io(format!("reading failed: {error}")),
            },
        }
    };
    shared.close(cause);
}

async fn write_loop(shared: Arc<Shared>, mut socket: impl AsyncWrite + Unpin, reader: AbortHandle) {
    // Swapped with the shared buffer each round, so both allocations are reused.
    let mut batch = BytesMut::new();
    loop {
        shared.wake_writer.notified().await;
        // Let every other runnable task queue its request before the buffer is taken. Without
        // this, a caller's wake-up schedules the writer next and it sends one request per
        // syscall; with it, a burst of concurrent requests leaves in one write.
        tokio::task::yield_now().await;
        {
            let mut state = shared.lock();
            if state.closed.is_some() {
                return;
            }
            std::mem::swap(&mut state.outgoing, &mut batch);
        }
        if batch.is_empty() {
            continue;
        }
        shared.drained.notify_waiters();
        if let Err(error) = socket.write_all(&batch).await {
            shared.close(CloseCause::Io(format!("writing failed: {error}")));
            // The reader could otherwise wait forever on a socket nobody will answer.
            reader.abort();
            return;
        }
        batch.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_causes_read_clearly() {
        let address = "127.0.0.1:7001";
        assert_eq!(
            CloseCause::PeerClosed.later_error(address).to_string(),
            "connection to 127.0.0.1:7001 closed: the server closed the connection"
        );
        let full = CloseCause::Server { code: ErrorCode::TooManyConnections, message: "limit 2".into() };
        let error = full.pending_error(address);
        assert_eq!(error.code(), Some(ErrorCode::TooManyConnections));
        assert_eq!(
            full.later_error(address).to_string(),
            "connection to 127.0.0.1:7001 closed: the server ended the connection with too_many_connections: limit 2"
        );
    }
}
