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
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};
use tokio::sync::{watch, Notify};

use crate::completion::Completion;
use crate::durability::DurableGate;
use crate::stats::{BatchOps, Traffic};
use crate::stream::ClientStream;
use crate::write_through::WriteThrough;
use ferrite_store::persistence::wal::Lsn;

/// Responses are flushed once this much is buffered, so a client that pipelines many large reads
/// cannot make the server buffer unbounded output.
pub(crate) const WRITE_FLUSH_BYTES: usize = 1024 * 1024;

/// A connection that has moved this many bytes (requests answered and responses written) since it
/// last let the shard's other tasks run yields before its next batch. A socket that is always ready (a client streaming
/// a large value over loopback) would otherwise keep the loop for Tokio's whole cooperative budget,
/// over a hundred 1 MiB pieces, while a small get of another client waited.
const YIELD_AFTER_BYTES: usize = 1024 * 1024;

/// A buffer larger than this (left over from a large value) is given back to the allocator once
/// the connection has waited [`SPARE_BUFFERS_KEPT_FOR`] for its client, so a thousand idle
/// connections do not each pin megabytes.
const IDLE_BUFFER_BYTES_MAX: usize = 256 * 1024;

/// How long a connection waits for its client before it gives back its large buffers. A client
/// at work keeps them: giving a buffer back whenever a batch did not need it cost a megabyte
/// allocated and faulted in per 1 MiB get (its open and end are small batches), and gets of 1 MiB
/// values ran at 0.4 of the loopback bandwidth instead of 1.0. Redis gives back an idle client's
/// query buffer after 2 s the same way.
const SPARE_BUFFERS_KEPT_FOR: Duration = Duration::from_secs(1);

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
    /// The rest of the request being answered goes straight where it belongs, not through the
    /// read buffer: read it with [`Protocol::poll_receive`], then answer again.
    Receive,
}

/// A client protocol on the socket loop.
pub(crate) trait Protocol {
    /// Consumes complete requests from `buffers.read`, appends their responses to
    /// `buffers.write` (large values through the [`WriteThrough`] it is given, which may send
    /// them at once), and says what the log must reach before they are sent and before more is
    /// read ([`LogWaits`]), and how many requests of each kind it answered.
    fn answer(&mut self, buffers: &mut Buffers, through: &WriteThrough<'_>) -> (Next, LogWaits, BatchOps);

    /// Reads what the socket has of the request that [`Next::Receive`] announced straight into
    /// its destination: the bytes read, 0 if the peer closed.
    fn poll_receive(&mut self, cx: &mut Context<'_>, stream: &mut ClientStream) -> Poll<std::io::Result<usize>>;
}

/// A protocol whose requests all come through the read buffer: a function answering them.
impl<F> Protocol for F
where
    F: FnMut(&mut Buffers, &WriteThrough<'_>) -> (Next, LogWaits, BatchOps),
{
    fn answer(&mut self, buffers: &mut Buffers, through: &WriteThrough<'_>) -> (Next, LogWaits, BatchOps) {
        self(buffers, through)
    }

    fn poll_receive(&mut self, _: &mut Context<'_>, _: &mut ClientStream) -> Poll<std::io::Result<usize>> {
        Poll::Ready(Err(std::io::Error::other("this protocol reads every request through its buffer")))
    }
}

/// Reads what the socket has of a piece into `lent[*received..]`, the pool memory the shard lends
/// for this one read (`None`: the value it belongs to is gone, since only a stopped shard takes it
/// back while its connection reads), and counts the bytes read into `received`: the bytes read, 0
/// if the peer closed. The protocols' [`Protocol::poll_receive`] ask for the memory again at every
/// read, so the shard's other clients run between two reads and nothing is held across them.
pub(crate) fn poll_read_lent(
    lent: Option<&mut [u8]>,
    received: &mut usize,
    cx: &mut Context<'_>,
    stream: &mut ClientStream,
) -> Poll<std::io::Result<usize>> {
    let Some(lent) = lent else {
        return Poll::Ready(Err(std::io::Error::other("the value a piece was being read into is gone")));
    };
    let mut unread = ReadBuf::new(&mut lent[*received..]);
    ready!(Pin::new(stream).poll_read(cx, &mut unread))?;
    let read = unread.filled().len();
    *received += read;
    Poll::Ready(Ok(read))
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

/// What a batch of answers waits for in the shard's log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LogWaits {
    /// The LSN that must be durable before the batch's responses leave (0: none).
    pub durable: Lsn,
    /// The LSN that must be written to its file, durable or not, before the connection reads
    /// more requests (0: none): a client writing faster than the disk slows to its pace.
    pub written: Lsn,
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
}

impl Buffers {
    pub(crate) fn new(read_chunk_bytes: usize) -> Self {
        Buffers {
            read: BytesMut::with_capacity(read_chunk_bytes),
            write: BytesMut::with_capacity(read_chunk_bytes),
            read_chunk_bytes,
        }
    }

    /// Whether a buffer is larger than an idle connection keeps. Asked while waiting for the
    /// client, when every response has been written.
    fn holds_spare(&self) -> bool {
        (self.read.is_empty() && self.read.capacity() > IDLE_BUFFER_BYTES_MAX)
            || (self.write.is_empty() && self.write.capacity() > IDLE_BUFFER_BYTES_MAX)
    }

    /// Gives back every buffer larger than an idle connection keeps; a buffer that holds bytes
    /// (part of a request) stays.
    fn give_back_spare(&mut self) {
        if self.read.is_empty() && self.read.capacity() > IDLE_BUFFER_BYTES_MAX {
            self.read = BytesMut::with_capacity(self.read_chunk_bytes);
        }
        if self.write.is_empty() && self.write.capacity() > IDLE_BUFFER_BYTES_MAX {
            self.write = BytesMut::with_capacity(self.read_chunk_bytes);
        }
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
    /// Whether the connection has a value being staged (its session has a direct put open):
    /// then its client may send nothing for at most `staging_idle`, whatever `idle_timeout` says,
    /// so a client that stops half way cannot hold the staged value's heap space for ever.
    /// The connection sets it after each batch it answers.
    pub staging: &'a Cell<bool>,
    pub staging_idle: Duration,
    /// Most answers the connection may have coming (plugin calls in flight) before it reads no
    /// more requests: a client cannot pile up calls without bound.
    pub in_flight_max: usize,
}

impl Socket<'_> {
    /// When the read under way must have brought something, if ever: the handshake deadline
    /// or the idle timeout, and sooner while a value is being staged.
    fn read_deadline(&self) -> Option<Instant> {
        let now = Instant::now();
        let talk = if self.handshaken.get() {
            self.idle_timeout.map(|idle| now + idle)
        } else {
            Some(self.handshake_deadline)
        };
        earliest(talk, self.staging.get().then(|| now + self.staging_idle))
    }
}

/// The earlier of two deadlines, either of which may be none.
fn earliest(first: Option<Instant>, second: Option<Instant>) -> Option<Instant> {
    match (first, second) {
        (Some(first), Some(second)) => Some(first.min(second)),
        (first, second) => first.or(second),
    }
}

/// Runs the loop until the peer hangs up, `protocol` says to close, or the shard stops; `gate`
/// waits for the log. A batch's latency runs from the read that brought its requests (the last
/// bytes of them) to the write of its responses.
pub(crate) async fn drive(
    socket: Socket<'_>,
    shutdown: &mut watch::Receiver<bool>,
    buffers: &mut Buffers,
    mut gate: Option<DurableGate>,
    deferred: &Deferred,
    protocol: &mut impl Protocol,
) -> std::io::Result<Ended> {
    let mut next = Next::Read;
    let mut batch_read = Instant::now();
    let mut moved_since_yield = 0;
    loop {
        if moved_since_yield >= YIELD_AFTER_BYTES {
            moved_since_yield = 0;
            tokio::task::yield_now().await;
        }
        if matches!(next, Next::Read | Next::Receive) {
            let waiting = deferred.pending.borrow().len();
            // A client waiting for its answers (plugin calls) is not idle.
            let deadline = socket.read_deadline().filter(|_| waiting == 0);
            let read = if matches!(next, Next::Receive) {
                let received = tokio::select! {
                    biased;
                    _ = shutdown.wait_for(|stop| *stop) => return Ok(Ended::ShuttingDown),
                    () = deferred.notify.notified(), if waiting > 0 => None,
                    received = std::future::poll_fn(|cx| protocol.poll_receive(cx, socket.stream)) => Some(received?),
                    () = sleep_until(deadline), if deadline.is_some() => return Ok(Ended::TimedOut),
                };
                // Counted here: these bytes pass through no buffer, where the others are counted.
                moved_since_yield += received.unwrap_or(0);
                received
            } else {
                // A clock read only for a connection holding large buffers: most never do.
                let mut give_back_at = buffers.holds_spare().then(|| Instant::now() + SPARE_BUFFERS_KEPT_FOR);
                loop {
                    if buffers.read.capacity() - buffers.read.len() < buffers.read_chunk_bytes / 4 {
                        buffers.read.reserve(buffers.read_chunk_bytes);
                    }
                    let give_back = give_back_at.filter(|_| buffers.holds_spare());
                    break tokio::select! {
                        biased;
                        _ = shutdown.wait_for(|stop| *stop) => return Ok(Ended::ShuttingDown),
                        () = deferred.notify.notified(), if waiting > 0 => None,
                        read = socket.stream.read_buf(&mut buffers.read), if waiting < socket.in_flight_max => Some(read?),
                        () = sleep_until(deadline), if deadline.is_some() => return Ok(Ended::TimedOut),
                        () = sleep_until(give_back), if give_back.is_some() => {
                            buffers.give_back_spare();
                            give_back_at = None;
                            continue;
                        }
                    };
                }
            };
            match read {
                Some(0) => return Ok(Ended::PeerClosed),
                Some(bytes) => {
                    socket.traffic.read(bytes);
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
        let (waits, ops);
        let unanswered = buffers.read.len();
        let through = WriteThrough::new(socket.stream, gate.as_ref(), socket.traffic);
        (next, waits, ops) = protocol.answer(buffers, &through);
        moved_since_yield += unanswered - buffers.read.len() + buffers.write.len() + through.written();
        if let Some(ended) =
            send(socket.stream, socket.traffic, shutdown, gate.as_mut(), waits.durable, &mut buffers.write).await?
        {
            return Ok(ended);
        }
        if let (Some(gate), true) = (gate.as_mut(), waits.written > 0) {
            tokio::select! {
                biased;
                _ = shutdown.wait_for(|stop| *stop) => return Ok(Ended::ShuttingDown),
                waited = gate.wait_written(waits.written) => if waited.is_err() {
                    return Ok(Ended::LogFailed);
                },
            }
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

    /// A client staging a value may be silent for the staging limit at most, even on a server
    /// without an idle timeout and before its handshake deadline; one with nothing staged keeps
    /// the idle timeout or the handshake deadline.
    #[test]
    fn a_staging_client_idles_for_the_shorter_limit() {
        let now = Instant::now();
        let (soon, later) = (Some(now + Duration::from_secs(1)), Some(now + Duration::from_secs(60)));
        assert_eq!(earliest(None, None), None);
        assert_eq!(earliest(later, None), later);
        assert_eq!(earliest(None, soon), soon);
        assert_eq!(earliest(later, soon), soon);
        assert_eq!(earliest(soon, later), soon);
    }

    /// Large buffers stay until the connection idles; then the empty ones go back to the
    /// allocator and one holding part of a request stays.
    #[test]
    fn only_empty_large_buffers_are_given_back() {
        let mut buffers = Buffers::new(64 * 1024);
        assert!(!buffers.holds_spare(), "a new connection's buffers are small");
        buffers.write.extend_from_slice(&[0; 1 << 20]);
        buffers.write.clear();
        buffers.read.extend_from_slice(&[7; 1 << 20]);
        assert!(buffers.holds_spare());
        buffers.give_back_spare();
        assert!(buffers.write.capacity() <= IDLE_BUFFER_BYTES_MAX, "the empty write buffer goes back");
        assert_eq!(buffers.read.len(), 1 << 20, "the read buffer holds a request's bytes: it stays");
        assert!(!buffers.holds_spare());

        buffers.read.clear();
        assert!(buffers.holds_spare());
        buffers.give_back_spare();
        assert!(buffers.read.capacity() <= IDLE_BUFFER_BYTES_MAX);
        assert!(!buffers.holds_spare());
    }

    /// Serves one client whose `?` asks for a 1 MiB answer and `.` for one byte (a direct read's
    /// piece and its end): the client asks `?`, `.`, waits `idle_between`, asks `?` and hangs
    /// up. Returns the write buffer's capacity when the last request came.
    async fn serve_large_answers(idle_between: Duration) -> usize {
        use bytes::Buf;
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let client = tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(address).await.expect("connect");
            let mut answer = vec![0; 1 << 20];
            for (round, ask) in [b"?", b".", b"?"].into_iter().enumerate() {
                if round == 2 {
                    tokio::time::sleep(idle_between).await;
                }
                stream.write_all(ask).await.expect("ask");
                let length = if ask == b"?" { 1 << 20 } else { 1 };
                stream.read_exact(&mut answer[..length]).await.expect("answer");
            }
        });
        let (accepted, _) = listener.accept().await.expect("accept");
        let mut stream = ClientStream::Plain(accepted);
        let traffic = Traffic::default();
        let handshaken = Cell::new(true);
        let socket = Socket {
            stream: &mut stream,
            traffic: &traffic,
            handshake_deadline: Instant::now(),
            handshaken: &handshaken,
            idle_timeout: None,
            staging: &Cell::new(false),
            staging_idle: Duration::from_secs(30),
            in_flight_max: 1,
        };
        let (_stop, mut shutdown) = watch::channel(false);
        let mut buffers = Buffers::new(64 * 1024);
        let capacity_before_last = Cell::new(0);
        let mut asked = 0;
        let mut answer = |buffers: &mut Buffers, _: &WriteThrough<'_>| {
            while !buffers.read.is_empty() {
                let large = buffers.read[0] == b'?';
                buffers.read.advance(1);
                asked += 1;
                if asked == 3 {
                    capacity_before_last.set(buffers.write.capacity());
                }
                buffers.write.extend_from_slice(&vec![0; if large { 1 << 20 } else { 1 }]);
            }
            (Next::Read, LogWaits::default(), BatchOps::default())
        };
        let ended =
            drive(socket, &mut shutdown, &mut buffers, None, &Deferred::default(), &mut answer).await.expect("served");
        client.await.expect("client");
        assert_eq!(ended, Ended::PeerClosed);
        capacity_before_last.get()
    }

    /// A client that keeps asking keeps its connection's 1 MiB buffer across a small answer;
    /// one that goes quiet for longer than `SPARE_BUFFERS_KEPT_FOR` finds it given back.
    #[tokio::test]
    async fn large_buffers_are_kept_while_the_client_works_and_given_back_when_it_idles() {
        let busy_before_last = serve_large_answers(Duration::ZERO).await;
        assert!(busy_before_last >= 1 << 20, "kept between answers: {busy_before_last} bytes");
        let idle_before_last = serve_large_answers(SPARE_BUFFERS_KEPT_FOR + Duration::from_millis(500)).await;
        assert!(idle_before_last <= IDLE_BUFFER_BYTES_MAX, "given back while idle: {idle_before_last} bytes");
    }
}
