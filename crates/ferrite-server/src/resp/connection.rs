//! One RESP client connection: the socket loop of the native connection, with RESP framing.
//!
//! The task reads whatever the socket has, answers every complete command in the buffer, and
//! writes all the replies with one write, so a pipelining client (`redis-benchmark -P`,
//! `redis-cli --pipe`) costs one read and one write per batch. A protocol error is answered with
//! `-ERR Protocol error: ...` and closes this connection only, as `redis-server` does.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::debug;

use super::commands::{self, Client};
use super::parser::{Parsed, Parser};
use super::{reply, Settings};
use crate::handler::{Flow, ShardState};
use crate::session::Session;

/// How much room a read asks for.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// Replies are flushed once this much is buffered, so a client that pipelines many large `GET`s
/// cannot make the server buffer unbounded output.
const WRITE_FLUSH_BYTES: usize = 1024 * 1024;

/// An idle buffer larger than this (left over from a large value) is given back to the allocator.
const IDLE_BUFFER_BYTES_MAX: usize = 256 * 1024;

/// How long a closing connection waits for its client to hang up.
const CLOSE_DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

/// What the connection does next after answering the commands it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    Read,
    /// The output buffer is full; write it, then answer the commands already buffered.
    Flush,
    Close,
}

struct Connection {
    read_buf: BytesMut,
    write_buf: BytesMut,
    parser: Parser,
    client: Client,
}

/// Serves one RESP client until it disconnects, sends something unparseable, says `QUIT`, or the
/// shard shuts down. `id` is unique among the shard's connections.
pub(crate) async fn serve(
    mut stream: TcpStream,
    shard: Rc<RefCell<ShardState>>,
    settings: Rc<Settings>,
    id: u64,
    mut shutdown: watch::Receiver<bool>,
) {
    let peer = stream.peer_addr().ok();
    if let Err(error) = stream.set_nodelay(true) {
        debug!(?peer, %error, "cannot disable Nagle's algorithm");
    }
    // A RESP client has no handshake of its own: the connection is its session's hello.
    let mut session = Session::default();
    session.handshaken = true;
    let opened = super::open_pool(&mut shard.borrow_mut(), &settings, &mut session);
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
    let mut connection = Connection {
        read_buf: BytesMut::with_capacity(READ_CHUNK_BYTES),
        write_buf: BytesMut::with_capacity(READ_CHUNK_BYTES),
        parser: Parser::new(settings.limits),
        client: Client::new(session, pool, id),
    };
    match connection.run(&mut stream, &shard, &settings, &mut shutdown).await {
        Ok(()) => debug!(?peer, "RESP connection closed"),
        Err(error) => debug!(?peer, %error, "RESP connection failed"),
    }
    shard.borrow_mut().end_session(&mut connection.client.session);
}

/// Closes after a last reply (`QUIT`, a protocol error) so the client can read it: closing a socket
/// with unread input makes the kernel send a reset that can destroy the reply in flight, so our
/// side is shut down and the client's input discarded until it hangs up, for a moment at most.
async fn close_gently(stream: &mut TcpStream, shutdown: &mut watch::Receiver<bool>) {
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
    async fn run(
        &mut self,
        stream: &mut TcpStream,
        shard: &RefCell<ShardState>,
        settings: &Settings,
        shutdown: &mut watch::Receiver<bool>,
    ) -> std::io::Result<()> {
        let mut next = Next::Read;
        loop {
            if next == Next::Read {
                if self.read_buf.capacity() - self.read_buf.len() < READ_CHUNK_BYTES / 4 {
                    self.read_buf.reserve(READ_CHUNK_BYTES);
                }
                let read = tokio::select! {
                    biased;
                    _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
                    read = stream.read_buf(&mut self.read_buf) => read?,
                };
                if read == 0 {
                    return Ok(());
                }
            }
            next = self.answer_buffered(&mut shard.borrow_mut(), settings);
            if !self.write_buf.is_empty() {
                // A client that stops reading must not hold the shard's shutdown hostage.
                tokio::select! {
                    biased;
                    _ = shutdown.wait_for(|stop| *stop) => return Ok(()),
                    written = stream.write_all(&self.write_buf) => written?,
                }
                self.write_buf.clear();
            }
            if next == Next::Close {
                close_gently(stream, shutdown).await;
                return Ok(());
            }
            self.shrink_idle_buffers();
        }
    }

    /// Answers every complete command in the read buffer, until the output buffer fills.
    fn answer_buffered(&mut self, shard: &mut ShardState, settings: &Settings) -> Next {
        // One clock read per batch: every write in it gets the same timestamp.
        let now_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        loop {
            if self.write_buf.len() >= WRITE_FLUSH_BYTES {
                return Next::Flush;
            }
            match self.parser.parse(&self.read_buf) {
                Ok(Parsed::Incomplete { needed }) => {
                    if let Some(needed) = needed {
                        // Already checked against the command limit by the parser.
                        self.read_buf.reserve(needed.saturating_sub(self.read_buf.len()));
                    }
                    return Next::Read;
                }
                Ok(Parsed::Skip { consumed }) => self.read_buf.advance(consumed),
                Ok(Parsed::Command { consumed }) => {
                    let args = self.parser.args(&self.read_buf);
                    let flow = commands::execute(args, &mut self.client, shard, settings, now_ns, &mut self.write_buf);
                    self.read_buf.advance(consumed);
                    if flow == Flow::Close {
                        return Next::Close;
                    }
                }
                Err(error) => {
                    shard.stats.requests += 1;
                    shard.stats.failures += 1;
                    reply::error(&mut self.write_buf, &format!("ERR Protocol error: {error}"));
                    return Next::Close;
                }
            }
        }
    }

    fn shrink_idle_buffers(&mut self) {
        if self.read_buf.is_empty() && self.read_buf.capacity() > IDLE_BUFFER_BYTES_MAX {
            self.read_buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
        }
        if self.write_buf.capacity() > IDLE_BUFFER_BYTES_MAX {
            self.write_buf = BytesMut::with_capacity(READ_CHUNK_BYTES);
        }
    }
}
