//! Little-endian field readers and writers shared by every message.

use bytes::{BufMut, BytesMut};

use crate::error::ProtocolError;
use crate::frame::{Header, HEADER_BYTES};

/// A bounds-checked cursor over a frame body. Every read checks the remaining length first, so a
/// lying length field yields [`ProtocolError::Truncated`], never a panic or an allocation.
pub(crate) struct Reader<'a> {
    body: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(body: &'a [u8]) -> Self {
        Reader { body, pos: 0 }
    }

    pub(crate) fn bytes(&mut self, len: usize) -> Result<&'a [u8], ProtocolError> {
        let end = self.pos.checked_add(len).filter(|end| *end <= self.body.len());
        let Some(end) = end else {
            return Err(ProtocolError::Truncated { need: self.pos.saturating_add(len), have: self.body.len() });
        };
        let out = &self.body[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtocolError> {
        let bytes = self.bytes(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, ProtocolError> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn u16(&mut self) -> Result<u16, ProtocolError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, ProtocolError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, ProtocolError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A string with a u16 length prefix.
    pub(crate) fn str16(&mut self, field: &'static str) -> Result<&'a str, ProtocolError> {
        let len = self.u16()? as usize;
        std::str::from_utf8(self.bytes(len)?).map_err(|_| ProtocolError::InvalidUtf8 { field })
    }

    /// Byte string with a u16 length prefix.
    pub(crate) fn bytes16(&mut self) -> Result<&'a [u8], ProtocolError> {
        let len = self.u16()? as usize;
        self.bytes(len)
    }

    /// Bytes of the body not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.body.len() - self.pos
    }

    /// Fails unless the whole body was consumed: trailing bytes mean the peer and we disagree on
    /// the layout, and guessing would hide the bug.
    pub(crate) fn finish(self) -> Result<(), ProtocolError> {
        match self.body.len() - self.pos {
            0 => Ok(()),
            extra => Err(ProtocolError::TrailingBytes { extra }),
        }
    }
}

/// Writes one frame into `out`: the header, then whatever `body` writes, then patches the body length.
pub(crate) fn write_frame(
    out: &mut BytesMut,
    opcode: u16,
    flags: u16,
    request_id: u64,
    body: impl FnOnce(&mut BytesMut),
) {
    let start = out.len();
    out.put_slice(&Header { body_len: 0, opcode, flags, request_id }.to_bytes());
    body(out);
    let body_len = out.len() - start - HEADER_BYTES;
    let body_len = u32::try_from(body_len).expect("callers check sizes against FRAME_BODY_BYTES_MAX, which fits u32");
    out[start..start + 4].copy_from_slice(&body_len.to_le_bytes());
}

pub(crate) fn put_str16(out: &mut BytesMut, value: &str) {
    put_bytes16(out, value.as_bytes());
}

pub(crate) fn put_bytes16(out: &mut BytesMut, value: &[u8]) {
    let len = u16::try_from(value.len()).expect("callers check strings against u16-sized limits");
    out.put_u16_le(len);
    out.put_slice(value);
}

pub(crate) fn put_len32(out: &mut BytesMut, len: usize) {
    out.put_u32_le(u32::try_from(len).expect("callers check sizes against limits that fit u32"));
}
