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

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{watch, Notify};

use crate::completion::Completion;
use crate::durability::DurableGate;
use crate::stats::{BatchOps, Traffic};
use crate::stream::ClientStream;
use ferrite_store::persistence::wal::Lsn;

/// Responses are flushed once this much is buffered, so a client that pipelines many large reads
/// cannot make the server buffer unbounded output.
pub(crate) const WRITE_FLUSH_BYTES: usize = 1024 * 1024;

/// A connection that has moved this many bytes (requests answered and responses written) since it
/// last let the shard's other tasks run yields before its next batch. A socket that is always ready (a client streaming
/// a large value over loopback) would otherwise keep the loop for Tokio's whole cooperative budget,
/// over a hundred 1 MiB pieces, while a small get of another client waited.
const YIELD_AFTER_BYTES: usize = 1024 * 1024;

/// A buffer larger than this (left over from a large value) is given back to the allocator once a
/// batch no longer needs it, so a thousand idle connections do not each pin megabytes. One that
/// keeps needing it (a direct transfer's 1 MiB pieces) keeps it: reallocating and faulting in a
/// megabyte per piece would cost more than the copy of the piece itself.
const IDLE_BUFFER_BYTES_MAX: usize = 256 * 1024;

/// What a connection does after answering the requests it has buffered.
#[derive(Debug, Clone)]
pub(crate) enum Next {
    /// Every complete request was answered; read more.
    Read,
    /// The output buffer is full; write it, then answer the requests already buffered.
    Flush,
    /// Write what is buffered, then end the connection.
    Close,
    /// Write what is buffered, then wait for this answer (a plugin call's, or a lock's release),
    /// write it, and go on answering the requests already buffered.
    Wait(Arc<Completion>),
}

/// The answers a connection has coming while it goes on answering other requests (native
/// plugin calls): written as each is ready, whatever the order.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    pub notify: Arc<Notify>,
    pub pending: RefCell<Vec<Arc<Completion>>>,
    /// The answers being written, for their latencies; kept to reuse its allocation.
    sent: RefCell<Vec<(crate::stats::Op, Instant)>>,
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
    /// The client missed its handshake deadline, or sent nothing for the idle timeout.
    TimedOut,
}

/// A connection's input and output buffers.
#[derive(Debug)]
pub(crate) struct Buffers {
    pub(crate) read: BytesMut,
    pub(crate) write: BytesMut,
    /// How much room a read asks for.
    read_chunk_bytes: usize,
    /// The most each buffer held during the last batch.
    read_peak: usize,
    write_peak: usize,
}

impl Buffers {
    pub(crate) fn new(read_chunk_bytes: usize) -> Self {
        Buffers {
            read: BytesMut::with_capacity(read_chunk_bytes),
            write: BytesMut::with_capacity(read_chunk_bytes),
            read_chunk_bytes,
            read_peak: 0,
            write_peak: 0,
        }
    }

    /// Gives back a large buffer the last batch did not need.
    fn shrink_idle(&mut self) {
        if self.read.is_empty()
            && self.read.capacity() > IDLE_BUFFER_BYTES_MAX
            && self.read_peak <= IDLE_BUFFER_BYTES_MAX
        {
            self.read = BytesMut::with_capacity(self.read_chunk_bytes);
        }
        if self.write.capacity() > IDLE_BUFFER_BYTES_MAX && self.write_peak <= IDLE_BUFFER_BYTES_MAX {
            self.write = BytesMut::with_capacity(self.read_chunk_bytes);
        }
        self.read_peak = 0;
        self.write_peak = 0;
    }
}

/// The socket a connection drives, what it counts there, and how long the client may stay
/// silent.
pub(crate) struct Socket<'a> {
    pub stream: &'a mut ClientStream,
    pub traffic: &'a Traffic,
    /// Until the connection says its client has shaken hands (`handshaken`), reading must bring
    /// the handshake before this instant.
    pub handshake_deadline: Instant,
    pub handshaken: &'a Cell<bool>,
    /// After the handshake, the longest a client may send nothing (`None`: no limit).
    pub idle_timeout: Option<Duration>,
    /// Most answers the connection may have coming (plugin calls in flight) before it reads no
    /// more requests: a client cannot pile up calls without bound.
    pub in_flight_max: usize,
}

impl Socket<'_> {
    /// When the read under way must have brought something, if ever.
    fn read_deadline(&self) -> Option<Instant> {
        if self.handshaken.get() {
            self.idle_timeout.map(|idle| Instant::now() + idle)
        } else {
            Some(self.handshake_deadline)
        }
    }
}

/// Runs the loop until the peer hangs up, `answer` says to close, or the shard stops. `answer`
/// consumes complete requests from `buffers.read`, appends their responses to `buffers.write`,
/// and says which LSN must be durable before they are sent (0: none), and how many requests of
/// each kind it answered; `gate` waits for the LSN. A batch's latency runs from the read that
/// brought its requests to the write of its responses.
pub(crate) async fn drive(
    socket: Socket<'_>,
    shutdown: &mut watch::Receiver<bool>,
    buffers: &mut Buffers,
    mut gate: Option<DurableGate>,
    deferred: &Deferred,
    mut answer: impl FnMut(&mut Buffers) -> (Next, Lsn, BatchOps),
) -> std::io::Result<Ended> {
    let mut next = Next::Read;
    let mut batch_read = Instant::now();
    let mut moved_since_yield = 0;
    loop {
        if moved_since_yield >= YIELD_AFTER_BYTES {
            moved_since_yield = 0;
            tokio::task::yield_now().await;
        }
        if matches!(next, Next::Read) {
            if buffers.read.capacity() - buffers.read.len() < buffers.read_chunk_bytes / 4 {
                buffers.read.reserve(buffers.read_chunk_bytes);
            }
            let waiting = deferred.pending.borrow().len();
            // A client waiting for its answers (plugin calls) is not idle.
            let deadline = socket.read_deadline().filter(|_| waiting == 0);
            let read = tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => return Ok(Ended::ShuttingDown),
                () = deferred.notify.notified(), if waiting > 0 => None,
                read = socket.stream.read_buf(&mut buffers.read), if waiting < socket.in_flight_max => Some(read?),
                () = sleep_until(deadline), if deadline.is_some() => return Ok(Ended::TimedOut),
            };
            match read {
                Some(0) => return Ok(Ended::PeerClosed),
                Some(bytes) => {
                    socket.traffic.read(bytes);
                    buffers.read_peak = buffers.read_peak.max(buffers.read.len());
                    batch_read = Instant::now();
                }
                None => {
                    if let Some(ended) =
                        send_ready(socket.stream, socket.traffic, shutdown, gate.as_mut(), deferred).await?
                    {
                        return Ok(ended);
                    }
                    continue;
                }
            }
        }
        let (wait_lsn, ops);
        let unanswered = buffers.read.len();
        (next, wait_lsn, ops) = answer(buffers);
        buffers.write_peak = buffers.write_peak.max(buffers.write.len());
        moved_since_yield += unanswered - buffers.read.len() + buffers.write.len();
        if let Some(ended) =
            send(socket.stream, socket.traffic, shutdown, gate.as_mut(), wait_lsn, &mut buffers.write).await?
        {
            return Ok(ended);
        }
        socket.traffic.answered(&ops, batch_read.elapsed());
        if let Next::Wait(completion) = &next {
            tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => return Ok(Ended::ShuttingDown),
                () = completion.wait() => {}
            }
            let (mut response, wait_lsn) = completion.take();
            if let Some(ended) =
                send(socket.stream, socket.traffic, shutdown, gate.as_mut(), wait_lsn, &mut response).await?
            {
                return Ok(ended);
            }
            if let Some((op, read)) = completion.timed() {
                socket.traffic.answered_one(op, read.elapsed());
            }
            // Answer what is already buffered before reading more.
            next = Next::Flush;
        }
        if matches!(next, Next::Close) {
            return Ok(Ended::Closed);
        }
        if let Some(ended) = send_ready(socket.stream, socket.traffic, shutdown, gate.as_mut(), deferred).await? {
            return Ok(ended);
        }
        buffers.shrink_idle();
    }
}

/// Completes at `deadline`; never without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
        None => std::future::pending().await,
    }
}

/// Writes every deferred answer that is ready, once the log is durable as far as they need.
async fn send_ready(
    stream: &mut ClientStream,
    traffic: &Traffic,
    shutdown: &mut watch::Receiver<bool>,
    gate: Option<&mut DurableGate>,
    deferred: &Deferred,
) -> std::io::Result<Option<Ended>> {
    let mut out = BytesMut::new();
    let mut wait_lsn = 0;
    // Taken out of its cell for the write: the cell is never borrowed across an await.
    let mut sent = std::mem::take(&mut *deferred.sent.borrow_mut());
    deferred.pending.borrow_mut().retain(|completion| {
        if !completion.is_done() {
            return true;
        }
        let (response, lsn) = completion.take();
        out.extend_from_slice(&response);
        wait_lsn = wait_lsn.max(lsn);
        sent.extend(completion.timed());
        false
    });
    let ended = send(stream, traffic, shutdown, gate, wait_lsn, &mut out).await?;
    let now = Instant::now();
    for (op, read) in sent.drain(..) {
        traffic.answered_one(op, now.saturating_duration_since(read));
    }
    *deferred.sent.borrow_mut() = sent;
    Ok(ended)
}

/// Writes `out` once the log is durable up to `wait_lsn` (0: at once) and clears it; `Some` if
/// the connection must end instead.
async fn send(
    stream: &mut ClientStream,
    traffic: &Traffic,
    shutdown: &mut watch::Receiver<bool>,
    gate: Option<&mut DurableGate>,
    wait_lsn: Lsn,
    out: &mut BytesMut,
) -> std::io::Result<Option<Ended>> {
    if let (Some(gate), true) = (gate, wait_lsn > 0) {
        tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => return Ok(Some(Ended::ShuttingDown)),
            waited = gate.wait_for(wait_lsn) => if waited.is_err() {
                return Ok(Some(Ended::LogFailed));
            },
        }
    }
    if !out.is_empty() {
        tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => return Ok(Some(Ended::ShuttingDown)),
            written = stream.write_all(out) => written?,
        }
        traffic.wrote(out.len());
        out.clear();
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A large buffer stays while batches keep filling it (a direct transfer's pieces) and goes
    /// back to the allocator after the first batch that did not need it.
    #[test]
    fn large_buffers_stay_while_batches_need_them() {
        let mut buffers = Buffers::new(64 * 1024);
        for _ in 0..3 {
            buffers.write.extend_from_slice(&[0; 1 << 20]);
            buffers.write_peak = buffers.write.len();
            buffers.write.clear();
            buffers.shrink_idle();
            assert!(buffers.write.capacity() >= 1 << 20, "kept while batches fill it");
        }
        buffers.write.extend_from_slice(&[0; 100]);
        buffers.write_peak = buffers.write.len();
        buffers.write.clear();
        buffers.shrink_idle();
        assert!(buffers.write.capacity() <= IDLE_BUFFER_BYTES_MAX, "given back after a small batch");

        buffers.read.reserve(1 << 20);
        buffers.read_peak = 1 << 20;
        buffers.shrink_idle();
        assert!(buffers.read.capacity() >= 1 << 20);
        buffers.shrink_idle();
        assert!(buffers.read.capacity() <= IDLE_BUFFER_BYTES_MAX);
    }
}
