//! The fixed frame header.
//!
//! ```text
//! offset  size  field
//!      0     4  body_len    bytes of body that follow the header
//!      4     2  opcode      message type (responses: request opcode | 0x8000; errors: 0xFFFF)
//!      6     2  flags       message-specific flag bits; unknown bits must be zero
//!      8     8  request_id  chosen by the client, echoed in the response
//! ```

/// Size of the frame header in bytes.
pub const HEADER_BYTES: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub body_len: u32,
    pub opcode: u16,
    pub flags: u16,
    pub request_id: u64,
}

impl Header {
    /// Reads a header from the first [`HEADER_BYTES`] of `bytes`, or `None` if fewer have arrived.
    pub fn parse(bytes: &[u8]) -> Option<Header> {
        let raw: &[u8; HEADER_BYTES] = bytes.get(..HEADER_BYTES)?.try_into().ok()?;
        let [l0, l1, l2, l3, o0, o1, f0, f1, r0, r1, r2, r3, r4, r5, r6, r7] = *raw;
        Some(Header {
            body_len: u32::from_le_bytes([l0, l1, l2, l3]),
            opcode: u16::from_le_bytes([o0, o1]),
            flags: u16::from_le_bytes([f0, f1]),
            request_id: u64::from_le_bytes([r0, r1, r2, r3, r4, r5, r6, r7]),
        })
    }

    pub fn to_bytes(&self) -> [u8; HEADER_BYTES] {
        let mut out = [0u8; HEADER_BYTES];
        out[0..4].copy_from_slice(&self.body_len.to_le_bytes());
        out[4..6].copy_from_slice(&self.opcode.to_le_bytes());
        out[6..8].copy_from_slice(&self.flags.to_le_bytes());
        out[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        out
    }

    /// Total length of the frame this header starts.
    pub fn frame_len(&self) -> usize {
        HEADER_BYTES + self.body_len as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let header = Header { body_len: 0x0102_0304, opcode: 0x8020, flags: 3, request_id: u64::MAX - 5 };
        assert_eq!(Header::parse(&header.to_bytes()), Some(header));
    }

    #[test]
    fn short_input_is_not_a_header() {
        assert_eq!(Header::parse(&[0u8; HEADER_BYTES - 1]), None);
    }
}
