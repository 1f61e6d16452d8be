//! Large values written to the client's socket from where they are stored, without a copy into
//! the connection's output buffer first.
//!
//! A get or a direct read's piece answers with bytes of pool memory. Copied into the output
//! buffer and then into the socket, each byte was copied twice on the shard's CPU; with 64 MiB
//! direct gets the first copy was a fifth of the shard's time. Here the buffered responses and
//! the value leave in one `writev`, while the shard still holds the value: the kernel copies it
//! into the socket and nothing keeps a reference to pool memory afterwards. Whatever the socket
//! does not take at once is copied into the output buffer as before, and leaves with it.
//!
//! Only over plain TCP, and only when the responses already buffered may leave now: TLS encrypts
//! from its own buffer, and a response that waits for durability must not overtake it.

use std::cell::Cell;
use std::io::IoSlice;

use bytes::{Buf, BytesMut};
use ferrite_store::persistence::wal::Lsn;
use tokio::net::TcpStream;

use crate::durability::DurableGate;
use crate::stats::Traffic;
use crate::stream::ClientStream;

/// Values shorter than this are copied into the output buffer: a batch of small answers leaves
/// in one write, where writing each value through would cost a system call apiece.
pub(crate) const WRITE_THROUGH_BYTES_MIN: usize = 64 * 1024;

/// Where one batch of a connection's answers puts its values.
pub(crate) struct WriteThrough<'a> {
    /// The client's socket, if values may be written to it directly.
    socket: Option<&'a TcpStream>,
    /// Whether a response that needs the log durable up to an LSN may leave yet.
    gate: Option<&'a DurableGate>,
    traffic: &'a Traffic,
    /// Bytes written to the socket during the batch.
    written: Cell<usize>,
}

impl<'a> WriteThrough<'a> {
    pub fn new(stream: &'a ClientStream, gate: Option<&'a DurableGate>, traffic: &'a Traffic) -> Self {
        WriteThrough { socket: stream.plain(), gate, traffic, written: Cell::new(0) }
    }

    /// Bytes this batch wrote to the socket itself: they count toward the connection's share of
    /// the shard like the ones it buffers.
    pub fn written(&self) -> usize {
        self.written.get()
    }

    /// Appends `value` to the output, after what `out` holds. A large value, when every buffered
    /// response may leave (the log is durable up to `wait_lsn`), goes to the socket together
    /// with them as far as the socket takes it without waiting; the rest is copied into `out`.
    pub fn append(&self, out: &mut BytesMut, value: &[u8], wait_lsn: Lsn) {
        let Some(socket) = self.socket.filter(|_| value.len() >= WRITE_THROUGH_BYTES_MIN) else {
            out.extend_from_slice(value);
            return;
        };
        if !self.may_leave(wait_lsn) {
            out.extend_from_slice(value);
            return;
        }
        // An error other than a full socket is left to the connection's own write of `out`,
        // which reports it.
        let written = socket.try_write_vectored(&[IoSlice::new(out), IoSlice::new(value)]).unwrap_or(0);
        self.traffic.wrote(written);
        self.written.set(self.written.get() + written);
        if written < out.len() {
            out.advance(written);
            out.extend_from_slice(value);
        } else {
            let taken = written - out.len();
            out.clear();
            out.extend_from_slice(&value[taken..]);
        }
    }

    fn may_leave(&self, wait_lsn: Lsn) -> bool {
        wait_lsn == 0 || self.gate.is_none_or(|gate| gate.is_durable(wait_lsn))
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::durability::DurableState;

    /// A connected socket, as the server holds it, and its client's end.
    async fn connected() -> (ClientStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("address")).await.expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        (ClientStream::Plain(server), client)
    }

    fn value(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i % 251) as u8).collect()
    }

    /// Writes what `out` kept and hangs up; returns every byte the client received.
    async fn finish(mut stream: ClientStream, out: &[u8], mut client: TcpStream) -> Vec<u8> {
        let reader = tokio::spawn(async move {
            let mut received = Vec::new();
            client.read_to_end(&mut received).await.expect("read");
            received
        });
        stream.write_all(out).await.expect("write the rest");
        stream.shutdown().await.expect("shut down");
        drop(stream);
        reader.await.expect("reader")
    }

    /// A value larger than the socket takes at once: the buffered bytes and the head of the
    /// value leave at once, the rest is kept in order, and the client receives every byte once.
    #[tokio::test]
    async fn a_large_value_follows_the_buffered_bytes_and_what_the_socket_refuses_is_kept() {
        let (stream, client) = connected().await;
        let traffic = Traffic::default();
        let value = value(32 << 20);
        let mut out = BytesMut::from(&b"earlier responses"[..]);
        let through = WriteThrough::new(&stream, None, &traffic);
        through.append(&mut out, &value, 0);
        let written = through.written();
        assert!(written > 0, "the socket took some at once");
        assert!(!out.is_empty(), "a socket nobody reads does not take 32 MiB");
        assert_eq!(written + out.len(), 17 + value.len());
        let received = finish(stream, &out, client).await;
        assert_eq!(&received[..17], b"earlier responses");
        assert!(received[17..] == value[..], "the value arrives whole and in order");
    }

    /// A small value, or any value while a buffered response waits for the log (or the log has
    /// failed), is copied into the output and nothing is written.
    #[tokio::test]
    async fn small_values_and_values_behind_a_wait_for_the_log_are_buffered() {
        let (stream, client) = connected().await;
        let traffic = Traffic::default();
        let (durable, gate) = DurableGate::durable_up_to(10);
        let through = WriteThrough::new(&stream, Some(&gate), &traffic);
        let small = value(WRITE_THROUGH_BYTES_MIN - 1);
        let large = value(WRITE_THROUGH_BYTES_MIN);
        let mut out = BytesMut::new();
        through.append(&mut out, &small, 0);
        through.append(&mut out, &large, 11);
        assert_eq!(through.written(), 0);
        assert_eq!(out.len(), small.len() + large.len());

        durable.send_replace(DurableState { lsn: 20, written: 20, failed: true });
        through.append(&mut out, &large, 11);
        assert_eq!(through.written(), 0, "nothing leaves once the log has failed");

        durable.send_replace(DurableState { lsn: 11, written: 11, failed: false });
        let buffered = out.len();
        through.append(&mut out, &large, 11);
        assert!(through.written() > 0, "sent once the log is durable");
        assert_eq!(through.written() + out.len(), buffered + large.len());
        drop(client);
    }
}
