//! One client connection: buffered socket I/O and framing.
//!
//! The task reads whatever the socket has, answers every complete frame in the buffer, and writes
//! all the responses with one write. A pipelining client therefore costs one read and one write
//! per batch, not per request. Lengths come from the peer, so each header is checked against the
//! frame limit before any buffer grows for its body.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Buf, BytesMut};
use ferrite_proto::{Header, HEADER_BYTES};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::debug;

use crate::handler::{Flow, ShardState};
use crate::session::Session;

/// How much room a read asks for.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Responses are flushed once this much is buffered, so a client that pipelines many large `get`s
/// cannot make the server buffer unbounded output.
const WRITE_FLUSH_BYTES: usize = 1024 * 1024;

/// An idle buffer larger than this (left over from a large value) is given back to the allocator,
/// so a thousand idle connections do not each pin megabytes.
const IDLE_BUFFER_BYTES_MAX: usize = 256 * 1024;

/// What the connection does next after answering the frames it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Every complete frame was answered; read more.
    Read,
    /// The output buffer is full; write it, then answer the frames already buffered.
    Flush,
    Close,
}

struct Connection {
    read_buf: BytesMut,
    write_buf: BytesMut,
    session: Session,
    /// Body bytes of a rejected oversized frame still to be skipped.
    discard: usize,
    frame_body_max: usize,
}

/// Serves one client until it disconnects, misbehaves beyond recovery, or the shard shuts down.
pub(crate) async fn serve(mut stream: TcpStream, shard: Rc<RefCell<ShardState>>, mut shutdown: watch::Receiver<bool>) {
    let peer = stream.peer_addr().ok();
    // Responses are small and latency matters more than packet count.
    if let Err(error) = stream.set_nodelay(true) {
        debug!(?peer, %error, "cannot disable Nagle's algorithm");
    }
    let frame_body_max = shard.borrow().limits.frame_body_bytes_max();
    let mut connection = Connection {
        read_buf: BytesMut::with_capacity(READ_CHUNK_BYTES),
        write_buf: BytesMut::with_capacity(READ_CHUNK_BYTES),
        session: Session::default(),
        discard: 0,
        frame_body_max,
    };
    match connection.run(&mut stream, &shard, &mut shutdown).await {
        Ok(()) => debug!(?peer, "connection closed"),
        Err(error) => debug!(?peer, %error, "connection failed"),
    }
    shard.borrow_mut().end_session(&mut connection.session);
}

impl Connection {
    async fn run(
        &mut self,
        stream: &mut TcpStream,
        shard: &RefCell<ShardState>,
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
            next = self.answer_buffered(&mut shard.borrow_mut());
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
                return Ok(());
            }
            self.shrink_idle_buffers();
        }
    }

    /// Answers every complete frame in the read buffer, until the output buffer fills.
    fn answer_buffered(&mut self, shard: &mut ShardState) -> Next {
        // One clock read per batch: every write in it gets the same timestamp.
        let now_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        loop {
            if self.discard > 0 {
                let skipped = self.discard.min(self.read_buf.len());
                self.read_buf.advance(skipped);
                self.discard -= skipped;
                if self.discard > 0 {
                    return Next::Read;
                }
            }
            if self.write_buf.len() >= WRITE_FLUSH_BYTES {
                return Next::Flush;
            }
            let Some(header) = Header::parse(&self.read_buf) else {
                return Next::Read;
            };
            let body_len = header.body_len as usize;
            if body_len > self.frame_body_max {
                self.read_buf.advance(HEADER_BYTES);
                self.discard = body_len;
                if shard.reject_oversized(&header, &self.session, self.frame_body_max, &mut self.write_buf)
                    == Flow::Close
                {
                    return Next::Close;
                }
                continue;
            }
            let frame_len = HEADER_BYTES + body_len;
            if self.read_buf.len() < frame_len {
                self.read_buf.reserve(frame_len - self.read_buf.len());
                return Next::Read;
            }
            let body = &self.read_buf[HEADER_BYTES..frame_len];
            let flow = shard.handle(&header, body, &mut self.session, now_ns, &mut self.write_buf);
            self.read_buf.advance(frame_len);
            if flow == Flow::Close {
                return Next::Close;
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
