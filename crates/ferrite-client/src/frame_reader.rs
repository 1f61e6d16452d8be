//! Cutting the incoming byte stream into frames.
//!
//! Kept apart from the socket so the buffer handling (partial headers, partial bodies, several
//! frames per read, hostile lengths) is tested without any I/O.

use bytes::{Bytes, BytesMut};
use ferrite_proto::{Header, ProtocolError, FRAME_BODY_BYTES_MAX, HEADER_BYTES};

/// Spare room kept in the buffer before each read, so small frames arrive many to a syscall.
pub(crate) const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Accumulates bytes from the socket and hands out whole frames.
#[derive(Debug, Default)]
pub(crate) struct FrameReader {
    buffer: BytesMut,
}

impl FrameReader {
    pub(crate) fn new() -> FrameReader {
        FrameReader { buffer: BytesMut::with_capacity(READ_CHUNK_BYTES) }
    }

    /// The buffer to read into. Ensures spare capacity first: `read_buf` only fills what is
    /// already allocated, and an empty `BytesMut` would read a few bytes per syscall.
    pub(crate) fn read_buffer(&mut self) -> &mut BytesMut {
        if self.buffer.capacity() - self.buffer.len() < READ_CHUNK_BYTES / 4 {
            self.buffer.reserve(READ_CHUNK_BYTES);
        }
        &mut self.buffer
    }

    /// Takes the next complete frame off the buffer, or `None` if it has not fully arrived.
    ///
    /// The body length comes from the peer, so it is checked against the protocol's frame limit
    /// before any memory is reserved for it: a corrupt or hostile header must not make us
    /// allocate gigabytes. Such an error is fatal for the connection, because the stream can no
    /// longer be cut into frames we trust.
    ///
    /// The body is split off the read buffer without copying; the caller decodes it in place.
    pub(crate) fn next_frame(&mut self) -> Result<Option<(Header, Bytes)>, ProtocolError> {
        let Some(header) = Header::parse(&self.buffer) else {
            return Ok(None);
        };
        let body_len = header.body_len as usize;
        if body_len > FRAME_BODY_BYTES_MAX {
            return Err(ProtocolError::FrameTooLarge { len: body_len, max: FRAME_BODY_BYTES_MAX });
        }
        let frame_len = HEADER_BYTES + body_len;
        if self.buffer.len() < frame_len {
            // Reserve exactly what the rest of this frame needs, so a large value is read
            // straight into place instead of through repeated small growths.
            self.buffer.reserve(frame_len - self.buffer.len());
            return Ok(None);
        }
        let mut frame = self.buffer.split_to(frame_len);
        let body = frame.split_off(HEADER_BYTES).freeze();
        Ok(Some((header, body)))
    }

    /// Bytes received but not yet handed out as a frame.
    pub(crate) fn buffered_len(&self) -> usize {
        self.buffer.len()
    }

    /// Whether the bytes waiting begin like a TLS record: an alert (21) or handshake (22) record
    /// of TLS 1.0 to 1.3 (version 3.1 to 3.4). What a TLS server answers a client in clear with;
    /// a Ferrite frame starting so would announce a body of about 200 KB, which no answer to a
    /// hello has.
    pub(crate) fn starts_with_tls_record(&self) -> bool {
        matches!(self.buffer.as_ref(), [21 | 22, 3, 1..=4, ..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_proto::{PoolHandle, Response};

    #[test]
    fn a_tls_alert_is_told_from_a_frame() {
        let mut reader = FrameReader::new();
        // A TLS 1.2 record: fatal alert, decode_error (what rustls answers a hello in clear with).
        reader.read_buffer().extend_from_slice(&[21, 3, 3, 0, 2, 2, 50]);
        assert!(reader.starts_with_tls_record());
        let mut reader = FrameReader::new();
        reader.read_buffer().extend_from_slice(&frame(1, &Response::Stored));
        assert!(!reader.starts_with_tls_record());
    }

    fn frame(request_id: u64, response: &Response<'_>) -> BytesMut {
        let mut out = BytesMut::new();
        response.encode(request_id, &mut out);
        out
    }

    #[test]
    fn partial_header_then_partial_body_then_whole_frame() {
        let bytes = frame(9, &Response::Value(b"hello world"));
        let mut reader = FrameReader::new();

        reader.read_buffer().extend_from_slice(&bytes[..HEADER_BYTES - 1]);
        assert_eq!(reader.next_frame(), Ok(None), "15 bytes are not a header");

        reader.read_buffer().extend_from_slice(&bytes[HEADER_BYTES - 1..HEADER_BYTES + 3]);
        assert_eq!(reader.next_frame(), Ok(None), "header but only part of the body");

        reader.read_buffer().extend_from_slice(&bytes[HEADER_BYTES + 3..]);
        let (header, body) = reader.next_frame().expect("valid frame").expect("complete frame");
        assert_eq!(header.request_id, 9);
        assert_eq!(Response::decode(&header, &body), Ok(Response::Value(b"hello world")));
        assert_eq!(reader.buffered_len(), 0);
    }

    #[test]
    fn several_frames_in_one_read_come_out_in_order() {
        let mut reader = FrameReader::new();
        let buffer = reader.read_buffer();
        buffer.extend_from_slice(&frame(1, &Response::Stored));
        buffer.extend_from_slice(&frame(2, &Response::Count(42)));
        buffer.extend_from_slice(&frame(3, &Response::PoolOpened { pool: PoolHandle(5) })[..5]);

        let (first, _) = reader.next_frame().expect("valid").expect("complete");
        let (second, body) = reader.next_frame().expect("valid").expect("complete");
        assert_eq!((first.request_id, second.request_id), (1, 2));
        assert_eq!(Response::decode(&second, &body), Ok(Response::Count(42)));
        assert_eq!(reader.next_frame(), Ok(None), "third frame is incomplete");
        assert_eq!(reader.buffered_len(), 5);
    }

    #[test]
    fn oversized_body_length_is_rejected_before_reserving() {
        let mut reader = FrameReader::new();
        let header = Header { body_len: u32::MAX, opcode: 0x8021, flags: 0, request_id: 1 };
        reader.read_buffer().extend_from_slice(&header.to_bytes());
        let capacity_before = reader.buffer.capacity();

        let error = reader.next_frame().expect_err("4 GiB body must be refused");
        assert_eq!(error, ProtocolError::FrameTooLarge { len: u32::MAX as usize, max: FRAME_BODY_BYTES_MAX });
        assert_eq!(reader.buffer.capacity(), capacity_before, "nothing was reserved for the body");
    }

    #[test]
    fn largest_legal_body_reserves_room_for_the_whole_frame() {
        let mut reader = FrameReader::new();
        let header = Header { body_len: FRAME_BODY_BYTES_MAX as u32, opcode: 0x8021, flags: 0, request_id: 1 };
        reader.read_buffer().extend_from_slice(&header.to_bytes());
        assert_eq!(reader.next_frame(), Ok(None));
        assert!(reader.buffer.capacity() >= HEADER_BYTES + FRAME_BODY_BYTES_MAX);
    }
}
