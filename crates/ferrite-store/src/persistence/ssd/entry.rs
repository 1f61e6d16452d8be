//! Log records of a replicated shard: each record of its write-ahead log is one entry of its Raft
//! group's log (the LSN is the entry's index), framed with the entry's term and kind. A normal
//! entry carries one record of this shard's own kinds ([`super::record`]), with the node that
//! wrote it and that node's sequence number for it; blank and membership entries are Raft's own.
//!
//! ```text
//! offset  size  field
//!      0     1  kind: 0x81 blank, 0x82 normal, 0x83 membership
//!      1     8  term (little-endian)
//! normal:
//!      9     8  origin: the node that executed the write
//!     17     8  seq: that node's number for it (tells its own entries apart)
//!     25     .  the record
//! membership:
//!      9     .  the membership, as the server encodes it
//! ```
//!
//! The kinds have the high bit set and the record kinds of a single server's log
//! ([`super::record`]) never do, so every record says which kind of shard wrote it: recovery in
//! the wrong mode refuses a log rather than read it the other way. The frame has no length of
//! its own: the log record's (checksummed) length bounds the body.

/// Bytes before a normal entry's record.
pub const NORMAL_HEADER_BYTES: usize = 25;
/// Bytes before a membership entry's body, and all of a blank entry.
pub const HEADER_BYTES: usize = 9;

/// Set in every entry kind, clear in every record kind of a single server's log.
pub const ENTRY_KIND_BIT: u8 = 0x80;

const BLANK: u8 = ENTRY_KIND_BIT | 1;
const NORMAL: u8 = ENTRY_KIND_BIT | 2;
const MEMBERSHIP: u8 = ENTRY_KIND_BIT | 3;

/// One entry as a log record holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry<'a> {
    Blank { term: u64 },
    Normal { term: u64, origin: u64, seq: u64, record: &'a [u8] },
    Membership { term: u64, body: &'a [u8] },
}

impl<'a> Entry<'a> {
    /// The entry a record's payload holds; `None` if it is none.
    pub fn decode(payload: &'a [u8]) -> Option<Entry<'a>> {
        let (&kind, rest) = payload.split_first()?;
        let term = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
        let body = &rest[8..];
        match kind {
            BLANK if body.is_empty() => Some(Entry::Blank { term }),
            NORMAL => {
                let origin = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
                let seq = u64::from_le_bytes(body.get(8..16)?.try_into().ok()?);
                Some(Entry::Normal { term, origin, seq, record: &body[16..] })
            }
            MEMBERSHIP => Some(Entry::Membership { term, body }),
            _ => None,
        }
    }

    pub fn term(&self) -> u64 {
        match *self {
            Entry::Blank { term } | Entry::Normal { term, .. } | Entry::Membership { term, .. } => term,
        }
    }

    /// Appends the entry's record payload to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Entry::Blank { term } => {
                out.push(BLANK);
                out.extend_from_slice(&term.to_le_bytes());
            }
            Entry::Normal { term, origin, seq, record } => {
                encode_normal_header(term, origin, seq, out);
                out.extend_from_slice(record);
            }
            Entry::Membership { term, body } => {
                out.push(MEMBERSHIP);
                out.extend_from_slice(&term.to_le_bytes());
                out.extend_from_slice(body);
            }
        }
    }
}

/// Appends the header of a normal entry to `out`; its record follows.
pub fn encode_normal_header(term: u64, origin: u64, seq: u64, out: &mut Vec<u8>) {
    out.push(NORMAL);
    out.extend_from_slice(&term.to_le_bytes());
    out.extend_from_slice(&origin.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind comes back as it was encoded; a payload that is no entry is refused.
    #[test]
    fn entries_round_trip_and_garbage_is_refused() {
        let entries = [
            Entry::Blank { term: 7 },
            Entry::Normal { term: 7, origin: 3, seq: 99, record: b"record bytes" },
            Entry::Normal { term: 1, origin: 1, seq: 1, record: b"" },
            Entry::Membership { term: 2, body: b"members" },
        ];
        for entry in entries {
            let mut out = Vec::new();
            entry.encode(&mut out);
            assert_eq!(Entry::decode(&out), Some(entry));
        }
        let mut normal = Vec::new();
        encode_normal_header(5, 2, 8, &mut normal);
        assert_eq!(normal.len(), NORMAL_HEADER_BYTES);
        for garbage in [&[][..], &[0x82, 0, 0][..], &[9; 30][..], &[0x81; 12][..], &normal[..20]] {
            assert_eq!(Entry::decode(garbage), None, "{garbage:?}");
        }
    }
}
