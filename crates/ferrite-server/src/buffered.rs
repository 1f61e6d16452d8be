//! The socket loop both client protocols share (native and RESP): read whatever the socket has,
//! answer every complete request in the buffer, write every response with one write. A pipelining
//! client therefore costs one read and one write per batch, not per request.
//!
//! On a durable shard, the responses of a batch leave only once the log is durable up to the LSN
//! the batch needs (`durability.rs`): one wait per batch, so a pipelining client's writes share
//! one group commit.
//!
//! Every wait races the shard's shutdown signal, so neither a silent client nor one that stops
//! reading its responses can hold a stopping shard hostage.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::durability::DurableGate;
use ferrite_store::persistence::wal::Lsn;

/// Responses are flushed once this much is buffered, so a client that pipelines many large reads
/// cannot make the server buffer unbounded output.
pub(crate) const WRITE_FLUSH_BYTES: usize = 1024 * 1024;

/// An idle buffer larger than this (left over from a large value) is given back to the allocator,
/// so a thousand idle connections do not each pin megabytes.
const IDLE_BUFFER_BYTES_MAX: usize = 256 * 1024;

/// What a connection does after answering the requests it has buffered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Every complete request was answered; read more.
    Read,
    /// The output buffer is full; write it, then answer the requests already buffered.
    Flush,
    /// Write what is buffered, then end the connection.
    Close,
}

/// How a connection's loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    PeerClosed,
    ShuttingDown,
    /// The protocol asked to close (`Next::Close`) and its last responses were written.
    Closed,
    /// The shard's log failed while responses waited for durability; they were not sent.
    LogFailed,
}

/// A connection's input and output buffers.
#[derive(Debug)]
pub(crate) struct Buffers {
    pub(crate) read: BytesMut,
    pub(crate) write: BytesMut,
    /// How much room a read asks for.
    read_chunk_bytes: usize,
}

impl Buffers {
    pub(crate) fn new(read_chunk_bytes: usize) -> Self {
        Buffers {
            read: BytesMut::with_capacity(read_chunk_bytes),
            write: BytesMut::with_capacity(read_chunk_bytes),
            read_chunk_bytes,
        }
    }

    fn shrink_idle(&mut self) {
        if self.read.is_empty() && self.read.capacity() > IDLE_BUFFER_BYTES_MAX {
            self.read = BytesMut::with_capacity(self.read_chunk_bytes);
        }
        if self.write.capacity() > IDLE_BUFFER_BYTES_MAX {
            self.write = BytesMut::with_capacity(self.read_chunk_bytes);
        }
    }
}

/// Runs the loop until the peer hangs up, `answer` says to close, or the shard stops. `answer`
/// consumes complete requests from `buffers.read`, appends their responses to `buffers.write`,
/// and says which LSN must be durable before they are sent (0: none); `gate` waits for it.
pub(crate) async fn drive(
    stream: &mut TcpStream,
    shutdown: &mut watch::Receiver<bool>,
    buffers: &mut Buffers,
    mut gate: Option<DurableGate>,
    mut answer: impl FnMut(&mut Buffers) -> (Next, Lsn),
) -> std::io::Result<Ended> {
    let mut next = Next::Read;
    loop {
        if next == Next::Read {
            if buffers.read.capacity() - buffers.read.len() < buffers.read_chunk_bytes / 4 {
                buffers.read.reserve(buffers.read_chunk_bytes);
            }
            let read = tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => return Ok(Ended::ShuttingDown),
                read = stream.read_buf(&mut buffers.read) => read?,
            };
            if read == 0 {
                return Ok(Ended::PeerClosed);
            }
        }
        let wait_lsn;
        (next, wait_lsn) = answer(buffers);
        if let (Some(gate), true) = (gate.as_mut(), wait_lsn > 0) {
            tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => return Ok(Ended::ShuttingDown),
                waited = gate.wait_for(wait_lsn) => if waited.is_err() {
                    return Ok(Ended::LogFailed);
                },
            }
        }
        if !buffers.write.is_empty() {
            tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => return Ok(Ended::ShuttingDown),
                written = stream.write_all(&buffers.write) => written?,
            }
            buffers.write.clear();
        }
        if next == Next::Close {
            return Ok(Ended::Closed);
        }
        buffers.shrink_idle();
    }
}
