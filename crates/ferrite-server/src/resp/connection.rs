//! One RESP client connection: RESP framing on top of the shared socket loop (`buffered.rs`).
//!
//! The task reads whatever the socket has, answers every complete command in the buffer, and
//! writes all the replies with one write, so a pipelining client (`redis-benchmark -P`,
//! `redis-cli --pipe`) costs one read and one write per batch. A protocol error is answered with
//! `-ERR Protocol error: ...` and closes this connection only, as `redis-server` does. Until the
//! client has authenticated, on a server with users, its commands must be small (`parser.rs`) and
//! it must authenticate within the handshake timeout.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::stream::ClientStream;
use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tracing::debug;

use super::commands::{self, Client, UNOPENED};
use super::parser::{Parsed, Parser};
use super::{reply, Settings};
use crate::buffered::{self, Buffers, Deferred, Ended, LogWaits, Next, WRITE_FLUSH_BYTES};
use crate::handler::{Flow, ShardState};
use crate::session::Session;
use crate::stats::BatchOps;
use crate::write_through::WriteThrough;

/// How much room a read asks for.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// How long a closing connection waits for its client to hang up.
const CLOSE_DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

struct Connection {
    parser: Parser,
    client: Client,
}

/// RESP on the socket loop: a connection, and the shard it answers from.
struct Resp<'a> {
    connection: Connection,
    shard: &'a RefCell<ShardState>,
    settings: &'a Settings,
    handshaken: &'a Cell<bool>,
    staging: &'a Cell<bool>,
}

impl buffered::Protocol for Resp<'_> {
    fn answer(&mut self, buffers: &mut Buffers, through: &WriteThrough<'_>) -> (Next, LogWaits, BatchOps) {
        let mut shard = self.shard.borrow_mut();
        let next = self.connection.answer_buffered(&mut shard, self.settings, buffers, through);
        if !buffers.write.is_empty() && self.connection.client.authenticated() {
            self.handshaken.set(true);
        }
        shard.submit_soon();
        shard.low_load_poll.answered();
        let session = &mut self.connection.client.session;
        self.staging.set(session.transfers.stages_any());
        (next, session.take_log_waits(), std::mem::take(&mut session.batch_ops))
    }

    /// A long `SET`'s piece, read into the staged value (`commands/long_values.rs`).
    fn poll_receive(&mut self, cx: &mut Context<'_>, stream: &mut ClientStream) -> Poll<io::Result<usize>> {
        commands::poll_receive(&mut self.connection.client, &mut self.shard.borrow_mut(), cx, stream)
    }
}

/// Serves one RESP client until it disconnects, sends something unparseable, says `QUIT`, or the
/// shard shuts down. `id` is unique among the shard's connections.
pub(crate) async fn serve(
    mut stream: ClientStream,
    shard: Rc<RefCell<ShardState>>,
    settings: Rc<Settings>,
    id: u64,
    mut shutdown: watch::Receiver<bool>,
) {
    let peer = stream.peer_addr().ok();
    // A RESP client has no handshake of its own: the connection is its session's hello.
    let mut session = Session::for_server();
    session.certificate = stream.peer_certificate_fingerprint();
    // The shard opens its default pool for the connection, then the session acts for whoever the
    // client turns out to be (nobody, on a server with users, until it authenticates).
    let opened = {
        let mut shard = shard.borrow_mut();
        // A replica that does not lead its group has no pools to open: the connection opens the
        // pool when it first runs a command here as its leader (see `commands::ready_in_cluster`).
        let leads = shard.replication.as_ref().is_none_or(|replication| replication.leads());
        let pool = if leads { super::open_pool(&mut shard, &settings, &mut session) } else { Ok(UNOPENED) };
        pool.and_then(|pool| shard.begin_identity(&mut session).map(|()| pool).map_err(|failure| failure.message))
    };
    let pool = match opened {
        Ok(pool) => pool,
        Err(message) => {
            // The pool was deleted through the native protocol and cannot be created again (the
            // shard is at its pool limit, say): tell the client why, then hang up.
            debug!(?peer, %message, "cannot open the RESP pool");
            let mut out = BytesMut::new();
            reply::error(&mut out, &format!("ERR cannot open pool '{}': {message}", settings.pool));
            let _ = tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => Ok(()),
                written = stream.write_all(&out) => written,
            };
            shard.borrow_mut().end_session(&mut session);
            return;
        }
    };
    let connection = Connection { parser: Parser::new(settings.limits), client: Client::new(session, pool, id) };
    let mut buffers = Buffers::new(READ_CHUNK_BYTES);
    let gate = shard.borrow().durable_gate();
    // RESP replies leave in order: a plugin call's is waited for in line (`Next::Wait`), never
    // deferred past later commands.
    let in_order = Deferred::default();
    let (traffic, admission) = {
        let shard = shard.borrow();
        (std::sync::Arc::clone(&shard.traffic), shard.admission)
    };
    // RESP has no hello: the first command answered to a client that may act counts as the
    // handshake. On a server with users that is the first after it has authenticated: replies
    // to a stranger (`NOAUTH`) do not end its handshake deadline.
    let handshaken = Cell::new(false);
    // A long SET stages its value (`commands/long_values.rs`): see `buffered::Socket::staging`.
    let staging = Cell::new(false);
    let socket = buffered::Socket {
        stream: &mut stream,
        traffic: &traffic,
        handshake_deadline: std::time::Instant::now() + admission.handshake_timeout,
        handshaken: &handshaken,
        idle_timeout: admission.idle_timeout,
        staging: &staging,
        staging_idle: admission.staging_idle,
        in_flight_max: usize::try_from(admission.in_flight_max).unwrap_or(usize::MAX),
    };
    let mut resp = Resp { connection, shard: &shard, settings: &settings, handshaken: &handshaken, staging: &staging };
    let ended = buffered::drive(socket, &mut shutdown, &mut buffers, gate, &in_order, &mut resp).await;
    if matches!(ended, Ok(Ended::TimedOut)) {
        shard.borrow_mut().stats.clients_timed_out += 1;
    }
    match ended {
        // `QUIT` or a protocol error: the client gets to read the last reply before the close.
        Ok(Ended::Closed) => close_gently(&mut stream, &mut shutdown).await,
        Ok(ended) => debug!(?peer, ?ended, "RESP connection closed"),
        Err(error) => debug!(?peer, %error, "RESP connection failed"),
    }
    shard.borrow_mut().end_session(&mut resp.connection.client.session);
}

/// Closes after a last reply (`QUIT`, a protocol error) so the client can read it: closing a socket
/// with unread input makes the kernel send a reset that can destroy the reply in flight, so our
/// side is shut down and the client's input discarded until it hangs up, for a moment at most.
async fn close_gently(stream: &mut ClientStream, shutdown: &mut watch::Receiver<bool>) {
    let drain = async {
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        loop {
            tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
                read = stream.read(&mut sink) => if read? == 0 { return Ok(()) },
            }
        }
    };
    // Every failure here means the client is gone already; there is nobody left to tell.
    let _: Result<std::io::Result<()>, _> = tokio::time::timeout(CLOSE_DRAIN_TIMEOUT, drain).await;
}

impl Connection {
    /// Answers every complete command in the read buffer, until the output buffer fills; moves a
    /// long value (`commands/long_values.rs`) on first.
    fn answer_buffered(
        &mut self,
        shard: &mut ShardState,
        settings: &Settings,
        buffers: &mut Buffers,
        through: &WriteThrough<'_>,
    ) -> Next {
        // One clock read per batch: every write in it gets the same timestamp.
        let now_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        loop {
            if buffers.write.len() >= WRITE_FLUSH_BYTES {
                return Next::Flush;
            }
            if let Some(next) = commands::go_on(&mut self.parser, &mut self.client, shard, buffers, through, now_ns) {
                return next;
            }
            let Buffers { read, write, .. } = &mut *buffers;
            self.parser.set_authenticated(self.client.authenticated());
            match self.parser.parse(read) {
                Ok(Parsed::Incomplete { needed }) => {
                    if let Some(needed) = needed {
                        // Already checked against the command limit by the parser.
                        read.reserve(needed.saturating_sub(read.len()));
                    }
                    return Next::Read;
                }
                Ok(Parsed::Skip { consumed }) => read.advance(consumed),
                Ok(Parsed::LongValue { value_start, length, options }) => {
                    let args = self.parser.args(read);
                    if let Some(completion) =
                        commands::begin_set(args, length, options, &mut self.client, shard, settings)
                    {
                        return Next::Wait(completion);
                    }
                    self.parser.take_long_value();
                    read.advance(value_start);
                }
                Ok(Parsed::Command { consumed }) => {
                    let args = self.parser.args(read);
                    match commands::execute(args, &mut self.client, shard, settings, now_ns, write) {
                        Flow::Continue => read.advance(consumed),
                        Flow::Close => {
                            read.advance(consumed);
                            return Next::Close;
                        }
                        Flow::Wait { completion, consumed: taken } => {
                            if taken {
                                read.advance(consumed);
                            }
                            return Next::Wait(completion);
                        }
                    }
                }
                Err(error) => {
                    shard.stats.requests += 1;
                    shard.count_failure();
                    reply::error(write, &format!("ERR Protocol error: {error}"));
                    return Next::Close;
                }
            }
        }
    }
}
