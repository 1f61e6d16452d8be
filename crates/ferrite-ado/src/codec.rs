//! Little-endian field encoding for ring messages. The reader checks every length against the
//! bytes that remain before it allocates, so a garbage message is a [`DecodeError`], never a
//! huge allocation or a panic.

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("message ends inside a field")]
    Truncated,
    #[error("unknown message tag {0}")]
    UnknownTag(u8),
    #[error("{0} trailing bytes after the message")]
    Trailing(usize),
    #[error("a count or flag is out of range")]
    OutOfRange,
}

/// Appends fields to a message in a buffer the caller keeps: a sender encodes every message into
/// one reused buffer instead of allocating one per message.
#[derive(Debug)]
pub struct Writer<'a> {
    bytes: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    /// Starts a message with `tag` in `out`, replacing what `out` held (its capacity stays).
    pub fn start(out: &'a mut Vec<u8>, tag: u8) -> Writer<'a> {
        out.clear();
        out.push(tag);
        Writer { bytes: out }
    }

    pub fn u8(&mut self, value: u8) -> &mut Self {
        self.bytes.push(value);
        self
    }

    pub fn u32(&mut self, value: u32) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    pub fn i32(&mut self, value: i32) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    pub fn u64(&mut self, value: u64) -> &mut Self {
        self.bytes.extend_from_slice(&value.to_le_bytes());
        self
    }

    /// A u32 length, then the bytes. Messages are bounded by the ring far below 4 GiB.
    pub fn bytes(&mut self, value: &[u8]) -> &mut Self {
        self.u32(value.len() as u32);
        self.bytes.extend_from_slice(value);
        self
    }
}

/// Takes fields off a message, checking every bound.
#[derive(Debug)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(message: &'a [u8]) -> Reader<'a> {
        Reader { rest: message }
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < len {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.rest.split_at(len);
        self.rest = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::OutOfRange),
        }
    }

    /// A u32 length, then the bytes, borrowed from the message.
    fn slice(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    pub fn bytes(&mut self) -> Result<Vec<u8>, DecodeError> {
        Ok(self.slice()?.to_vec())
    }

    /// Bytes as text, invalid UTF-8 replaced: text from a plugin is for people, never refused.
    pub fn text(&mut self) -> Result<String, DecodeError> {
        Ok(String::from_utf8_lossy(self.slice()?).into_owned())
    }

    /// A u32 element count, checked against the bytes left given each element's least size.
    pub fn count(&mut self, element_bytes_min: usize) -> Result<usize, DecodeError> {
        let count = self.u32()? as usize;
        if count.saturating_mul(element_bytes_min.max(1)) > self.rest.len() {
            return Err(DecodeError::Truncated);
        }
        Ok(count)
    }

    pub fn finish(self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing(self.rest.len()))
        }
    }
}
