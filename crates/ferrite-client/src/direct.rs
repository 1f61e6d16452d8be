//! Direct transfers: values past the inline limit (up to the server's direct limit, 1 GiB by
//! default), moved in pieces (MCAS `put_direct`, `get_direct` and their offset forms).
//!
//! A transfer is a run of requests under one transfer id: `put_direct` or `get_direct` opens it,
//! `direct_write` / `direct_read` pieces of up to [`PIECE_BYTES_MAX`] carry the bytes, and
//! `end_transfer` closes it. The pieces are pipelined, [`PIECES_IN_FLIGHT`] at a time, so a
//! transfer streams at the connection's pace rather than one round trip per piece. The caller's
//! buffer is the source or the destination of every piece: nothing assembles the value in a
//! second buffer on either side.
//!
//! [`Pool::put`] and [`Pool::get`] switch to these by themselves (see [`DIRECT_THRESHOLD_BYTES`]).
//!
//! In a cluster, a put (whole or at offsets) that a node refuses as not its group's leader is
//! sent whole to the leader: nothing of a direct put changes before its end, and pieces at
//! offsets write the same bytes again. A read follows the leader when it opens; once its pieces
//! flow, a refusal ends it with the error, since the caller has had part of the value.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use ferrite_proto::{EndTransferFlags, ErrorCode, PutFlags, Request};

use crate::cluster::Resend;
use crate::connection::PendingReply;
use crate::error::{Error, Result};
use crate::reply::Reply;
use crate::Pool;

/// Largest piece of a transfer: 1 MiB (or the server's inline value limit, if lower). Large
/// enough that per-request costs vanish next to the copy, small enough that one piece holds the
/// server's loop for well under a millisecond.
pub const PIECE_BYTES_MAX: usize = 1 << 20;

/// Pieces one transfer keeps in flight.
pub const PIECES_IN_FLIGHT: usize = 8;

/// [`Pool::put`] sends values longer than this (or than the server's inline limit, if lower) as a
/// direct put, and [`Pool::get`] reads values the server cannot send inline as a direct read. The
/// inline limit itself (2 MiB), chosen from measurements on loopback (`docs/benchmarks.md`, "Large
/// values", inline against direct): up to it an inline put or get is as fast as a direct one or
/// faster, by 7-23% with one request in flight, because a direct transfer adds its open and end.
pub const DIRECT_THRESHOLD_BYTES: usize = ferrite_proto::VALUE_INLINE_BYTES_MAX;

/// Transfer ids are unique in the process, hence in every session.
static NEXT_TRANSFER: AtomicU64 = AtomicU64::new(1);

/// A buffer kept for direct transfers (MCAS `register_direct_memory`): allocated and touched once,
/// then filled by [`Pool::get_direct_into_memory`] and sent by [`Pool::put_direct`] as often as
/// needed, so repeated large transfers pay for no allocation and no page faults.
#[derive(Debug, Clone)]
pub struct DirectMemory {
    bytes: Vec<u8>,
    len: usize,
}

impl DirectMemory {
    /// A buffer of `capacity` bytes, every page of it touched.
    pub fn new(capacity: usize) -> DirectMemory {
        let mut bytes = vec![0u8; capacity];
        // A zeroed allocation this large is mapped lazily; writing each page faults it in now.
        for page in bytes.chunks_mut(4096) {
            page[0] = 0xff;
            page[0] = 0;
        }
        DirectMemory { bytes, len: 0 }
    }

    pub fn capacity(&self) -> usize {
        self.bytes.len()
    }

    /// The bytes in use: what the last transfer into it left, or what [`Self::set_len`] says.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// The whole buffer, for filling.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// Says how many bytes of the buffer are in use.
    ///
    /// # Panics
    /// Past the capacity.
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.bytes.len(), "{len} bytes do not fit a buffer of {}", self.bytes.len());
        self.len = len;
    }
}

/// Replies awaited in order; the first failure is the transfer's.
struct InFlight {
    replies: VecDeque<PendingReply>,
}

impl InFlight {
    fn new() -> InFlight {
        InFlight { replies: VecDeque::with_capacity(PIECES_IN_FLIGHT + 2) }
    }

    /// Waits for the oldest reply while more than [`PIECES_IN_FLIGHT`] are out.
    async fn push(&mut self, pending: PendingReply, mut check: impl FnMut(Reply) -> Result<()>) -> Result<()> {
        self.replies.push_back(pending);
        while self.replies.len() > PIECES_IN_FLIGHT {
            let oldest = self.replies.pop_front().expect("more than zero");
            check(oldest.wait().await?)?;
        }
        Ok(())
    }

    async fn drain(&mut self, mut check: impl FnMut(Reply) -> Result<()>) -> Result<()> {
        while let Some(oldest) = self.replies.pop_front() {
            check(oldest.wait().await?)?;
        }
        Ok(())
    }
}

fn offset_past_end(offset: u64, length: u64) -> Error {
    Error::Server {
        code: ErrorCode::InvalidArgument,
        message: format!("offset {offset} is past the end of the value ({length} bytes)"),
    }
}

impl Pool {
    fn piece_bytes(&self) -> usize {
        (self.connection().limits().value_bytes_max as usize).clamp(1, PIECE_BYTES_MAX)
    }

    /// Stores `value` under `key` with a direct put: in pieces, made the key's value at once
    /// when the last has arrived (a reader sees the old value or this one; a crash before the
    /// end leaves the old one). Values up to the server's `limits.direct_value_bytes_max`.
    pub async fn put_direct(&self, key: impl AsRef<[u8]>, value: &[u8]) -> Result<()> {
        self.put_direct_with(key, value, PutFlags::NONE).await
    }

    /// [`Pool::put_direct`] with a put's flags (create-only, update-only, durability).
    pub async fn put_direct_with(&self, key: impl AsRef<[u8]>, value: &[u8], flags: PutFlags) -> Result<()> {
        let key = key.as_ref();
        let piece = self.piece_bytes();
        self.routed(Resend::Never, |bound| async move {
            let connection = bound.connection;
            let transfer = NEXT_TRANSFER.fetch_add(1, Ordering::Relaxed);
            let open = Request::PutDirect { pool: bound.handle, flags, transfer, length: value.len() as u64, key };
            let mut in_flight = InFlight::new();
            let expect_written = |reply: Reply| match reply {
                Reply::TransferOpened { .. } | Reply::Written => Ok(()),
                other => Err(other.unexpected("written")),
            };
            let sent = async {
                in_flight.push(connection.send(&open).await?, expect_written).await?;
                for (n, bytes) in value.chunks(piece).enumerate() {
                    let write = Request::DirectWrite { transfer, offset: (n * piece) as u64, bytes };
                    in_flight.push(connection.send(&write).await?, expect_written).await?;
                }
                Ok(())
            }
            .await;
            if let Err(error) = sent {
                connection.send_detached(&Request::EndTransfer { transfer, flags: EndTransferFlags::ABORT });
                return Err(error);
            }
            // The commit follows the last pieces without waiting for their answers, so the server
            // can make them and the commit durable with one flush (waiting first cost a value of
            // one piece two). A piece refused meanwhile fails the commit too: the server commits
            // only a value whose every byte arrived, and drops it otherwise.
            let end = connection.send(&Request::EndTransfer { transfer, flags: EndTransferFlags::COMMIT }).await?;
            let pieces = in_flight.drain(expect_written).await;
            let ended = end.wait().await;
            pieces?;
            match ended? {
                Reply::TransferEnded => Ok(()),
                other => Err(other.unexpected("transfer_ended")),
            }
        })
        .await
    }

    /// `key`'s value, read with a direct read (whatever its length).
    pub async fn get_direct(&self, key: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        let mut value = Vec::new();
        self.read_direct(key.as_ref(), 0, None, None, |length, _, bytes| {
            if value.capacity() == 0 {
                value.reserve_exact(length as usize);
            }
            value.extend_from_slice(bytes);
            Ok(())
        })
        .await?;
        Ok(value)
    }

    /// Reads `key`'s value into `buffer` with a direct read and returns its length. Fails with
    /// `invalid_argument` if the value is longer than the buffer.
    pub async fn get_direct_into(&self, key: impl AsRef<[u8]>, buffer: &mut [u8]) -> Result<usize> {
        let capacity = buffer.len() as u64;
        let length = self
            .read_direct(key.as_ref(), 0, None, Some(capacity), |_, at, bytes| {
                buffer[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
                Ok(())
            })
            .await?;
        Ok(length as usize)
    }

    /// [`Pool::get_direct_into`] a [`DirectMemory`], whose length becomes the value's.
    pub async fn get_direct_into_memory(&self, key: impl AsRef<[u8]>, memory: &mut DirectMemory) -> Result<usize> {
        let length = self.get_direct_into(key, memory.as_mut_slice()).await?;
        memory.set_len(length);
        Ok(length)
    }

    /// Reads up to `buffer.len()` bytes of `key`'s value from `offset` (MCAS
    /// `get_direct_offset`) and returns how many it read: fewer at the value's end, 0 at its
    /// very end. An offset past the end fails with `invalid_argument`.
    pub async fn get_direct_offset(&self, key: impl AsRef<[u8]>, offset: u64, buffer: &mut [u8]) -> Result<usize> {
        let mut read = 0;
        self.read_direct(key.as_ref(), offset, Some(buffer.len() as u64), None, |_, at, bytes| {
            let start = (at - offset) as usize;
            buffer[start..start + bytes.len()].copy_from_slice(bytes);
            read = start + bytes.len();
            Ok(())
        })
        .await?;
        Ok(read)
    }

    /// Streams `length` bytes (all, with `None`) of `key`'s value from `offset` to `sink`, piece
    /// by piece in order, holding no more than the pieces in flight: how a value larger than
    /// memory is written to a file. `sink` gets each piece's offset in the value. Returns the
    /// value's whole length.
    pub async fn get_direct_to(
        &self,
        key: impl AsRef<[u8]>,
        offset: u64,
        length: Option<u64>,
        mut sink: impl FnMut(u64, &[u8]) -> std::io::Result<()>,
    ) -> Result<u64> {
        self.read_direct(key.as_ref(), offset, length, None, |_, at, bytes| {
            sink(at, bytes).map_err(|error| Error::io("writing a value read directly", error))
        })
        .await
    }

    /// The direct read every read form shares: opens the transfer, learns the value's length
    /// (refusing one longer than `length_max`), pipelines the pieces of `[offset, offset +
    /// length)` and hands each to `sink` in order with the value's length and the piece's
    /// offset, then releases the key.
    async fn read_direct(
        &self,
        key: &[u8],
        offset: u64,
        length: Option<u64>,
        length_max: Option<u64>,
        mut sink: impl FnMut(u64, u64, &[u8]) -> Result<()>,
    ) -> Result<u64> {
        let transfer = NEXT_TRANSFER.fetch_add(1, Ordering::Relaxed);
        let (connection, value_length) = self
            .routed(Resend::Once, |bound| async move {
                match bound.connection.call(&Request::GetDirect { pool: bound.handle, transfer, key }).await? {
                    Reply::TransferOpened { length } => Ok((bound.connection, length)),
                    other => Err(other.unexpected("transfer_opened")),
                }
            })
            .await?;
        let read = async {
            if offset > value_length {
                return Err(offset_past_end(offset, value_length));
            }
            if let Some(max) = length_max.filter(|max| value_length > *max) {
                return Err(Error::InvalidArgument(format!(
                    "the value is {value_length} bytes; the buffer holds {max}"
                )));
            }
            let end = length.map_or(value_length, |length| offset.saturating_add(length).min(value_length));
            let piece = self.piece_bytes() as u64;
            let mut in_flight = InFlight::new();
            let mut at = offset;
            let mut expected = offset;
            let mut deliver = |reply: Reply| match reply {
                Reply::Value(bytes) => {
                    let result = sink(value_length, expected, &bytes);
                    expected += bytes.len() as u64;
                    result
                }
                other => Err(other.unexpected("value")),
            };
            while at < end {
                let take = piece.min(end - at) as u32;
                let pending = connection.send(&Request::DirectRead { transfer, offset: at, length: take }).await?;
                in_flight.push(pending, &mut deliver).await?;
                at += u64::from(take);
            }
            in_flight.drain(&mut deliver).await
        }
        .await;
        let ended = connection.send(&Request::EndTransfer { transfer, flags: EndTransferFlags::COMMIT }).await;
        read?;
        match ended?.wait().await? {
            Reply::TransferEnded => Ok(value_length),
            other => Err(other.unexpected("transfer_ended")),
        }
    }

    /// Writes `bytes` at `offset` inside `key`'s value, which keeps its length (MCAS
    /// `put_direct_offset`). Each piece of up to the inline value limit is written atomically and
    /// durably like a put; a longer write is several such pieces, pipelined, applied in order.
    /// A range past the value's end fails with `invalid_argument` and changes nothing of that
    /// piece.
    pub async fn put_direct_offset(&self, key: impl AsRef<[u8]>, offset: u64, bytes: &[u8]) -> Result<()> {
        self.put_direct_offset_with(key, offset, bytes, PutFlags::NONE).await
    }

    /// [`Pool::put_direct_offset`] with a durability ([`PutFlags::SYNC`] / [`PutFlags::ASYNC`]).
    pub async fn put_direct_offset_with(
        &self,
        key: impl AsRef<[u8]>,
        offset: u64,
        bytes: &[u8],
        flags: PutFlags,
    ) -> Result<()> {
        let key = key.as_ref();
        let piece = self.piece_bytes();
        self.routed(Resend::Never, |bound| async move {
            let (connection, pool) = (bound.connection, bound.handle);
            let mut in_flight = InFlight::new();
            let expect_stored = |reply: Reply| match reply {
                Reply::Stored => Ok(()),
                other => Err(other.unexpected("stored")),
            };
            let mut pieces = bytes.chunks(piece).enumerate().peekable();
            if pieces.peek().is_none() {
                // An empty write still says whether the key and offset are valid.
                let request = Request::PutOffset { pool, flags, offset, key, bytes };
                return expect_stored(connection.call(&request).await?);
            }
            for (n, chunk) in pieces {
                let request =
                    Request::PutOffset { pool, flags, offset: offset + (n * piece) as u64, key, bytes: chunk };
                in_flight.push(connection.send(&request).await?, expect_stored).await?;
            }
            in_flight.drain(expect_stored).await
        })
        .await
    }
}
