//! One native-protocol client connection: framing on top of the shared socket loop
//! (`buffered.rs`). Lengths come from the peer, so each header is checked against the frame limit
//! before any buffer grows for its body; an oversized body is skipped, not buffered.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Buf;
use ferrite_proto::{Header, HEADER_BYTES};
use tokio::sync::watch;
use tracing::debug;

use crate::buffered::{self, Buffers, Deferred, Ended, Next, WRITE_FLUSH_BYTES};
use crate::handler::{Flow, ShardState};
use crate::session::Session;
use crate::stream::ClientStream;
use crate::write_through::WriteThrough;

/// How much room a read asks for.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// A batch answers requests until their frames reach this many bytes, then lets the connection
/// write and (past `YIELD_AFTER_BYTES` in `buffered.rs`) yield: a read that brought eight 1 MiB pieces of a
/// direct put is answered in several turns of the loop, not one, so other clients wait for at most
/// about one piece.
const BATCH_REQUEST_BYTES_MAX: usize = 1024 * 1024;

struct Framing {
    session: Session,
    /// Body bytes of a rejected oversized frame still to be skipped.
    discard: usize,
    frame_body_max: usize,
}

/// Serves one client until it disconnects, misbehaves beyond recovery, or the shard shuts down.
pub(crate) async fn serve(
    mut stream: ClientStream,
    shard: Rc<RefCell<ShardState>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let peer = stream.peer_addr().ok();
    let frame_body_max = shard.borrow().limits.frame_body_bytes_max();
    let mut framing = Framing { session: Session::default(), discard: 0, frame_body_max };
    // Checked against the users when the client says hello.
    framing.session.certificate = stream.peer_certificate_fingerprint();
    let mut buffers = Buffers::new(READ_CHUNK_BYTES);
    let gate = shard.borrow().durable_gate();
    let deferred = Deferred::default();
    framing.session.answers = Some(Arc::clone(&deferred.notify));
    let (traffic, admission) = {
        let shard = shard.borrow();
        (Arc::clone(&shard.traffic), shard.admission)
    };
    let handshaken = Cell::new(false);
    let staging = Cell::new(false);
    let socket = buffered::Socket {
        stream: &mut stream,
        traffic: &traffic,
        handshake_deadline: Instant::now() + admission.handshake_timeout,
        handshaken: &handshaken,
        idle_timeout: admission.idle_timeout,
        staging: &staging,
        staging_idle: admission.staging_idle,
        in_flight_max: usize::try_from(admission.in_flight_max).unwrap_or(usize::MAX),
    };
    let ended = buffered::drive(socket, &mut shutdown, &mut buffers, gate, &deferred, |buffers, through| {
        let mut shard = shard.borrow_mut();
        let next = framing.answer_buffered(&mut shard, buffers, through);
        handshaken.set(framing.session.handshaken);
        staging.set(framing.session.transfers.stages_any());
        shard.submit_soon();
        shard.low_load_poll.answered();
        deferred.pending.borrow_mut().append(&mut framing.session.deferred);
        let session = &mut framing.session;
        (next, session.take_log_waits(), std::mem::take(&mut session.batch_ops))
    })
    .await;
    if matches!(ended, Ok(Ended::TimedOut)) {
        shard.borrow_mut().stats.clients_timed_out += 1;
    }
    match ended {
        Ok(ended) => debug!(?peer, ?ended, "connection closed"),
        Err(error) => debug!(?peer, %error, "connection failed"),
    }
    shard.borrow_mut().end_session(&mut framing.session);
}

impl Framing {
    /// Answers every complete frame in the read buffer, until the output buffer fills.
    fn answer_buffered(&mut self, shard: &mut ShardState, buffers: &mut Buffers, through: &WriteThrough<'_>) -> Next {
        // One clock read per batch: every write in it gets the same timestamp.
        let now_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let Buffers { read, write, .. } = buffers;
        let mut answered_bytes = 0;
        loop {
            if answered_bytes >= BATCH_REQUEST_BYTES_MAX {
                return Next::Flush;
            }
            if self.discard > 0 {
                let skipped = self.discard.min(read.len());
                read.advance(skipped);
                self.discard -= skipped;
                if self.discard > 0 {
                    return Next::Read;
                }
            }
            if write.len() + through.written() >= WRITE_FLUSH_BYTES {
                return Next::Flush;
            }
            let Some(header) = Header::parse(read) else {
                return Next::Read;
            };
            let body_len = header.body_len as usize;
            if body_len > self.frame_body_max {
                read.advance(HEADER_BYTES);
                self.discard = body_len;
                if matches!(shard.reject_oversized(&header, &self.session, self.frame_body_max, write), Flow::Close) {
                    return Next::Close;
                }
                continue;
            }
            let frame_len = HEADER_BYTES + body_len;
            if read.len() < frame_len {
                read.reserve(frame_len - read.len());
                return Next::Read;
            }
            answered_bytes += frame_len;
            match shard.handle(&header, &read[HEADER_BYTES..frame_len], &mut self.session, now_ns, write, through) {
                Flow::Continue => read.advance(frame_len),
                Flow::Close => {
                    read.advance(frame_len);
                    return Next::Close;
                }
                Flow::Wait { completion, consumed } => {
                    if consumed {
                        read.advance(frame_len);
                    }
                    return Next::Wait(completion);
                }
            }
        }
    }
}
