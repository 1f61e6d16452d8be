//! One native-protocol client connection: framing on top of the shared socket loop
//! (`buffered.rs`). Lengths come from the peer, so each header is checked against the frame limit
//! before any buffer grows for its body; an oversized body is skipped, not buffered.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BytesMut};
use ferrite_proto::{DirectWriteHead, Header, Opcode, HEADER_BYTES};
use tokio::sync::watch;
use tracing::debug;

use crate::buffered::{self, Buffers, Deferred, Ended, LogWaits, Next, WRITE_FLUSH_BYTES};

use crate::handler::{Flow, ShardState, IN_PLACE_PIECE_BYTES_MIN};
use crate::session::Session;
use crate::stats::BatchOps;
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
    /// The piece being read in place, if one is.
    receiving: Option<PieceInPlace>,
}

/// A direct put's piece read from the socket into the staged value's memory
/// ([`ShardState::staged_piece_mut`]), answered once all of it is there.
#[derive(Debug)]
struct PieceInPlace {
    request_id: u64,
    transfer: u64,
    offset: u64,
    len: usize,
    received: usize,
    frame_len: usize,
}

/// The native protocol on the socket loop: its framing, and the shard it answers from.
struct Native<'a> {
    framing: Framing,
    shard: &'a RefCell<ShardState>,
    handshaken: &'a Cell<bool>,
    staging: &'a Cell<bool>,
    deferred: &'a Deferred,
}

impl buffered::Protocol for Native<'_> {
    fn answer(&mut self, buffers: &mut Buffers, through: &WriteThrough<'_>) -> (Next, LogWaits, BatchOps) {
        let mut shard = self.shard.borrow_mut();
        let next = self.framing.answer_buffered(&mut shard, buffers, through);
        self.handshaken.set(self.framing.session.handshaken);
        self.staging.set(self.framing.session.transfers.stages_any());
        shard.submit_soon();
        shard.low_load_poll.answered();
        self.deferred.pending.borrow_mut().append(&mut self.framing.session.deferred);
        let session = &mut self.framing.session;
        (next, session.take_log_waits(), std::mem::take(&mut session.batch_ops))
    }

    /// Reads into the pool memory the shard lends for the piece. Only this session can end its
    /// transfer or close its pool, and it is reading: the memory stays lent unless the shard
    /// stopped, which ends the connection.
    fn poll_receive(&mut self, cx: &mut Context<'_>, stream: &mut ClientStream) -> Poll<io::Result<usize>> {
        let Framing { receiving, session, .. } = &mut self.framing;
        let Some(piece) = receiving.as_mut() else {
            return Poll::Ready(Err(io::Error::other("no piece is being read in place")));
        };
        let mut shard = self.shard.borrow_mut();
        let lent = shard.staged_piece_mut(piece.transfer, piece.offset, piece.len, session);
        buffered::poll_read_lent(lent, &mut piece.received, cx, stream)
    }
}

/// Serves one client until it disconnects, misbehaves beyond recovery, or the shard shuts down.
pub(crate) async fn serve(
    mut stream: ClientStream,
    shard: Rc<RefCell<ShardState>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let peer = stream.peer_addr().ok();
    let frame_body_max = shard.borrow().limits.frame_body_bytes_max();
    let mut framing = Framing { session: Session::default(), discard: 0, frame_body_max, receiving: None };
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
    let mut native = Native { framing, shard: &shard, handshaken: &handshaken, staging: &staging, deferred: &deferred };
    let ended = buffered::drive(socket, &mut shutdown, &mut buffers, gate, &deferred, &mut native).await;
    if matches!(ended, Ok(Ended::TimedOut)) {
        shard.borrow_mut().stats.clients_timed_out += 1;
    }
    match ended {
        Ok(ended) => debug!(?peer, ?ended, "connection closed"),
        Err(error) => debug!(?peer, %error, "connection failed"),
    }
    shard.borrow_mut().end_session(&mut native.framing.session);
}

impl Framing {
    /// Answers the piece read in place, once all of it is there, then every complete frame in
    /// the read buffer, until the output buffer fills; a large piece that has not all arrived is
    /// read in place next ([`Self::receive_in_place`]).
    fn answer_buffered(&mut self, shard: &mut ShardState, buffers: &mut Buffers, through: &WriteThrough<'_>) -> Next {
        // One clock read per batch: every write in it gets the same timestamp.
        let now_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let Buffers { read, write, .. } = buffers;
        let mut answered_bytes = 0;
        if let Some(piece) = self.receiving.take_if(|piece| piece.received == piece.len) {
            answered_bytes += piece.frame_len;
            let flow = shard.answer_piece_in_place(
                piece.request_id,
                piece.transfer,
                piece.offset,
                piece.len,
                &mut self.session,
                write,
            );
            if matches!(flow, Flow::Close) {
                return Next::Close;
            }
        }
        if self.receiving.is_some() {
            return Next::Receive;
        }
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
                if self.receive_in_place(shard, &header, read) {
                    return Next::Receive;
                }
                read.reserve(room_to_read(&header, read.len()));
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

    /// Starts reading the frame `header` begins straight into pool memory, if it is a direct
    /// put's piece of at least [`IN_PLACE_PIECE_BYTES_MIN`] whose fields have arrived and whose
    /// staged value lends the memory its bytes go to ([`ShardState::staged_piece_mut`]): the
    /// bytes of it already read are copied there and leave the read buffer, which the frame's
    /// arrived part filled to its end. Anything else about the frame (flags, a length that does
    /// not match its body, a piece the put would refuse) leaves it to come whole, and be
    /// answered as it deserves.
    fn receive_in_place(&mut self, shard: &mut ShardState, header: &Header, read: &mut BytesMut) -> bool {
        let Some(head) = DirectWriteHead::parse(header, &read[HEADER_BYTES..]) else { return false };
        if head.len < IN_PLACE_PIECE_BYTES_MIN {
            return false;
        }
        let Some(lent) = shard.staged_piece_mut(head.transfer, head.offset, head.len, &self.session) else {
            return false;
        };
        let arrived = &read[HEADER_BYTES + DirectWriteHead::BYTES..];
        lent[..arrived.len()].copy_from_slice(arrived);
        let received = arrived.len();
        read.clear();
        let DirectWriteHead { transfer, offset, len } = head;
        let frame_len = HEADER_BYTES + header.body_len as usize;
        self.receiving =
            Some(PieceInPlace { request_id: header.request_id, transfer, offset, len, received, frame_len });
        true
    }
}

/// How much more room the read buffer needs for the frame `header` begins, of which `buffered`
/// bytes have arrived: the whole frame, except for a large direct put's piece whose fields are
/// still to come, which needs room for those only, as its bytes may go straight to pool memory
/// (a buffer grown for them would take them in whole at the next read instead).
fn room_to_read(header: &Header, buffered: usize) -> usize {
    let frame_len = HEADER_BYTES + header.body_len as usize;
    let fields_end = HEADER_BYTES + DirectWriteHead::BYTES;
    let piece_in_place = header.opcode == Opcode::DirectWrite as u16
        && header.body_len as usize >= DirectWriteHead::BYTES + IN_PLACE_PIECE_BYTES_MIN
        && buffered < fields_end;
    if piece_in_place {
        fields_end - buffered
    } else {
        frame_len - buffered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A large direct put's piece whose fields have not all arrived gets room for them only, so
    /// its bytes can go straight to pool memory; once they are there (a piece the put refused
    /// comes whole), and for any other frame, the room is the whole frame's.
    #[test]
    fn room_for_a_large_piece_stops_at_its_fields() {
        let piece = |body_len: usize| Header {
            body_len: body_len as u32,
            opcode: Opcode::DirectWrite as u16,
            flags: 0,
            request_id: 1,
        };
        let large = DirectWriteHead::BYTES + IN_PLACE_PIECE_BYTES_MIN;
        let fields_end = HEADER_BYTES + DirectWriteHead::BYTES;
        assert_eq!(room_to_read(&piece(large), HEADER_BYTES), DirectWriteHead::BYTES);
        assert_eq!(room_to_read(&piece(large), fields_end - 1), 1);
        assert_eq!(room_to_read(&piece(large), fields_end), HEADER_BYTES + large - fields_end);
        assert_eq!(room_to_read(&piece(large - 1), HEADER_BYTES), large - 1, "a short piece comes whole");
        let put = Header { opcode: Opcode::Put as u16, ..piece(large) };
        assert_eq!(room_to_read(&put, HEADER_BYTES), large, "another request comes whole");
    }
}
