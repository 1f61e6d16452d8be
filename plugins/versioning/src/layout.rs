//! The versioning plugin's value: a header, then a ring of fixed-size slots, little-endian.
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | magic, `u64`: the bytes `FRVERS01` |
//! | 8 | 4 | slots, `u32`: versions kept, 1 to [`SLOTS_MAX`] |
//! | 12 | 4 | slot_bytes, `u32`: the most data a version holds, at least 1 |
//! | 16 | 8 | written, `u64`: versions ever stored; the newest is version `written`, counted from 1 |
//! | 24 | 8 | reserved, `u64`: zero |
//! | 32 | slots × (4 + slot_bytes) | the slots: a `u32` length, then slot_bytes bytes of data |
//!
//! Version v lives in slot (v - 1) % slots, so versions `written - slots + 1 ..= written` are
//! kept (those above 0) and a new one overwrites the oldest. Bytes of a slot beyond its length,
//! and bytes after the last slot (less than one slot's worth), mean nothing.
//!
//! A value of all zero bytes, which create-on-demand makes, holds no version; the first put
//! formats it. Anything else must be a header that fits the value and slots consistent with it
//! (checked whenever a value is read, and again after every put in debug builds): a value some
//! other writer put there is refused rather than overwritten.

use std::ops::{Range, RangeInclusive};

use ferrite_plugin::PluginError;

/// `FRVERS01`: tells a formatted value from bytes some other writer left, and names the layout's
/// revision so a later one can be told apart.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FRVERS01");
pub const HEADER_BYTES: usize = 32;
/// A slot's length field.
pub const SLOT_LEN_BYTES: usize = 4;
/// The most versions a value keeps: bounds the work of checking a header (one length per slot)
/// and of answering `list`.
pub const SLOTS_MAX: u32 = 1024;
/// The versions a value formatted without configuration keeps.
pub const SLOTS_DEFAULT: u32 = 4;

const MAGIC_OFFSET: usize = 0;
const SLOTS_OFFSET: usize = 8;
const SLOT_BYTES_OFFSET: usize = 12;
const WRITTEN_OFFSET: usize = 16;
const RESERVED_OFFSET: usize = 24;

/// The header bytes a put that does not format the value changes: `written` alone.
pub const WRITTEN_RANGE: Range<usize> = WRITTEN_OFFSET..RESERVED_OFFSET;

const _: () = assert!(MAGIC_OFFSET == 0);
const _: () = assert!(SLOTS_OFFSET == MAGIC_OFFSET + 8);
const _: () = assert!(SLOT_BYTES_OFFSET == SLOTS_OFFSET + 4);
const _: () = assert!(WRITTEN_OFFSET == SLOT_BYTES_OFFSET + 4);
const _: () = assert!(RESERVED_OFFSET == WRITTEN_OFFSET + 8);
const _: () = assert!(HEADER_BYTES == RESERVED_OFFSET + 8);
const _: () = assert!(SLOT_LEN_BYTES == std::mem::size_of::<u32>());
const _: () = assert!(1 <= SLOTS_DEFAULT && SLOTS_DEFAULT <= SLOTS_MAX);
// The largest layout's size, computed in u64, cannot overflow: slots × (4 + u32::MAX) + 32.
const _: () = assert!((SLOTS_MAX as u64).checked_mul(SLOT_LEN_BYTES as u64 + u32::MAX as u64).is_some());

/// The smallest value that can be formatted with `slots` slots: one data byte per slot.
pub fn value_bytes_min(slots: u32) -> usize {
    HEADER_BYTES + slots as usize * (SLOT_LEN_BYTES + 1)
}

/// A value's header fields (magic and reserved are constants, so not kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub slots: u32,
    pub slot_bytes: u32,
    pub written: u64,
}

impl Header {
    /// The header the first put gives a zero value of `value_len` bytes, before it stores a
    /// version: the slots share the room after the header equally, as large as fits.
    pub fn format(slots: u32, value_len: usize) -> Result<Header, PluginError> {
        debug_assert!((1..=SLOTS_MAX).contains(&slots), "{slots}");
        let min = value_bytes_min(slots);
        if value_len < min {
            return Err(PluginError::invalid(format!(
                "versioning: a value of {value_len} bytes cannot keep {slots} versions; \
                 it needs at least {min} bytes (32 + {slots} x (4 + slot_bytes), slot_bytes at least 1)"
            )));
        }
        let slot_bytes = (value_len - HEADER_BYTES) / slots as usize - SLOT_LEN_BYTES;
        let slot_bytes = u32::try_from(slot_bytes).map_err(|_| {
            PluginError::invalid(format!(
                "versioning: a value of {value_len} bytes gives slots of {slot_bytes} bytes, beyond the \
                 {} a slot's u32 length can say; use a smaller value or more versions",
                u32::MAX
            ))
        })?;
        let header = Header { slots, slot_bytes, written: 0 };
        debug_assert_eq!(header.check(value_len), Ok(()));
        Ok(header)
    }

    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut bytes = [0u8; HEADER_BYTES];
        bytes[MAGIC_OFFSET..SLOTS_OFFSET].copy_from_slice(&MAGIC.to_le_bytes());
        bytes[SLOTS_OFFSET..SLOT_BYTES_OFFSET].copy_from_slice(&self.slots.to_le_bytes());
        bytes[SLOT_BYTES_OFFSET..WRITTEN_OFFSET].copy_from_slice(&self.slot_bytes.to_le_bytes());
        bytes[WRITTEN_OFFSET..RESERVED_OFFSET].copy_from_slice(&self.written.to_le_bytes());
        bytes
    }

    /// Whether the sizes fit a value of `value_len` bytes: every slot inside it, and less than
    /// one slot's worth left over (so the sizes are the ones formatting that length gives).
    fn check(&self, value_len: usize) -> Result<(), String> {
        if !(1..=SLOTS_MAX).contains(&self.slots) {
            return Err(format!("{} slots, not 1 to {SLOTS_MAX}", self.slots));
        }
        if self.slot_bytes == 0 {
            return Err("slots of 0 bytes".to_owned());
        }
        // In u64, where it cannot overflow (asserted above), whatever the header says.
        let slot_total = SLOT_LEN_BYTES as u64 + u64::from(self.slot_bytes);
        let used = HEADER_BYTES as u64 + u64::from(self.slots) * slot_total;
        let value_len = value_len as u64;
        if used > value_len {
            return Err(format!(
                "{} slots of {} bytes need {used} bytes, the value has {value_len}",
                self.slots, self.slot_bytes
            ));
        }
        if value_len - used >= slot_total {
            return Err(format!(
                "{} slots of {} bytes leave {} of {value_len} bytes unused",
                self.slots,
                self.slot_bytes,
                value_len - used
            ));
        }
        Ok(())
    }

    /// The versions kept: empty before the first put.
    pub fn kept(&self) -> RangeInclusive<u64> {
        self.written.saturating_sub(u64::from(self.slots)) + 1..=self.written
    }

    /// Where version `version`'s slot lies in the value: its length field, then its data.
    /// Only meaningful for a header [`check`](Header::check) accepted.
    pub fn slot_range(&self, version: u64) -> Range<usize> {
        debug_assert!(version >= 1, "versions count from 1");
        let index = ((version - 1) % u64::from(self.slots)) as usize;
        let slot_total = SLOT_LEN_BYTES + self.slot_bytes as usize;
        let start = HEADER_BYTES + index * slot_total;
        start..start + slot_total
    }

    /// Says which versions are kept, for answers naming what a caller may ask for instead.
    pub fn describe_kept(&self) -> String {
        let kept = self.kept();
        match (kept.start(), kept.end()) {
            _ if kept.is_empty() => "no version is stored yet".to_owned(),
            (first, last) if first == last => format!("only version {last} is kept"),
            (first, last) => format!("versions {first} to {last} are kept"),
        }
    }
}

fn u32_at(bytes: &[u8], offset: usize) -> u32 {
    let mut field = [0u8; 4];
    field.copy_from_slice(&bytes[offset..offset + 4]);
    u32::from_le_bytes(field)
}

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    let mut field = [0u8; 8];
    field.copy_from_slice(&bytes[offset..offset + 8]);
    u64::from_le_bytes(field)
}

/// A value as the plugin finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'v> {
    /// All zero bytes: no version yet, and the first put formats it.
    Zero,
    Versions(Versions<'v>),
}

/// A formatted value whose header and slots have been checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions<'v> {
    header: Header,
    bytes: &'v [u8],
}

impl<'v> Value<'v> {
    /// Reads a value, refusing one that is neither zero nor a consistent formatted value.
    pub fn decode(bytes: &'v [u8]) -> Result<Value<'v>, PluginError> {
        let refuse = |problem: String| {
            PluginError::invalid(format!("versioning: not a versioning value ({problem}); it is left as it is"))
        };
        // The magic first, so a formatted value is not scanned for zeros.
        if bytes.len() < HEADER_BYTES || u64_at(bytes, MAGIC_OFFSET) != MAGIC {
            if bytes.iter().all(|&byte| byte == 0) {
                return Ok(Value::Zero);
            }
            return Err(refuse(format!("{} bytes, neither all zero nor starting with FRVERS01", bytes.len())));
        }
        let header = Header {
            slots: u32_at(bytes, SLOTS_OFFSET),
            slot_bytes: u32_at(bytes, SLOT_BYTES_OFFSET),
            written: u64_at(bytes, WRITTEN_OFFSET),
        };
        header.check(bytes.len()).map_err(refuse)?;
        let reserved = u64_at(bytes, RESERVED_OFFSET);
        if reserved != 0 {
            return Err(refuse(format!("reserved field {reserved:#x}, not 0")));
        }
        // Every kept version's length fits its slot, and a slot no version reached yet is empty:
        // otherwise `written` and the slots disagree, and a put would build on the confusion.
        // Slot i first holds version i + 1, so it has been written once `written` passes i.
        for slot in 0..u64::from(header.slots) {
            let len = u32_at(bytes, header.slot_range(slot + 1).start);
            let used = slot < header.written;
            if used && len > header.slot_bytes {
                return Err(refuse(format!("slot {slot} holds {len} bytes, more than its {}", header.slot_bytes)));
            }
            if !used && len != 0 {
                return Err(refuse(format!("slot {slot} holds {len} bytes, but {}", header.describe_kept())));
            }
        }
        Ok(Value::Versions(Versions { header, bytes }))
    }
}

impl<'v> Versions<'v> {
    pub fn header(&self) -> Header {
        self.header
    }

    /// Version `version`'s data, if it is still kept.
    pub fn get(&self, version: u64) -> Option<&'v [u8]> {
        if !self.header.kept().contains(&version) {
            return None;
        }
        let range = self.header.slot_range(version);
        let len = u32_at(self.bytes, range.start) as usize;
        let data = range.start + SLOT_LEN_BYTES;
        // Decode checked every kept length against slot_bytes, so this stays inside the slot.
        Some(&self.bytes[data..data + len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header encodes each field at its documented offset, magic first, reserved zero.
    #[test]
    fn header_at_the_documented_offsets() {
        let bytes = Header { slots: 3, slot_bytes: 10, written: 7 }.encode();
        assert_eq!(bytes[0..8], *b"FRVERS01");
        assert_eq!(bytes[8..12], 3u32.to_le_bytes());
        assert_eq!(bytes[12..16], 10u32.to_le_bytes());
        assert_eq!(bytes[16..24], 7u64.to_le_bytes());
        assert_eq!(bytes[24..32], [0; 8]);
        assert_eq!(WRITTEN_RANGE, 16..24);
    }

    /// Formatting shares the room after the header equally among the slots, a remainder under
    /// one slot left over; below one data byte per slot it is refused, naming the minimum.
    #[test]
    fn format_sizes_the_slots() {
        assert_eq!(Header::format(4, 80), Ok(Header { slots: 4, slot_bytes: 8, written: 0 }));
        assert_eq!(Header::format(4, 91), Ok(Header { slots: 4, slot_bytes: 10, written: 0 }));
        assert_eq!(Header::format(1, 37), Ok(Header { slots: 1, slot_bytes: 1, written: 0 }));
        assert_eq!(value_bytes_min(4), 52);
        assert_eq!(Header::format(4, 52).map(|header| header.slot_bytes), Ok(1));
        let error = Header::format(4, 51).expect_err("too small");
        assert!(error.message().contains("at least 52 bytes"), "{error}");
    }

    /// Versions wrap around the slots; the kept range is the last `slots` versions.
    #[test]
    fn slots_and_kept_versions() {
        let header = Header { slots: 3, slot_bytes: 2, written: 5 };
        assert_eq!(header.kept(), 3..=5);
        assert_eq!(header.slot_range(1), 32..38);
        assert_eq!(header.slot_range(3), 44..50);
        assert_eq!(header.slot_range(4), 32..38);
        assert_eq!(Header { written: 2, ..header }.kept(), 1..=2);
        assert!(Header { written: 0, ..header }.kept().is_empty());
        assert_eq!(header.describe_kept(), "versions 3 to 5 are kept");
        assert_eq!(Header { slots: 1, ..header }.describe_kept(), "only version 5 is kept");
        assert_eq!(Header { written: 0, ..header }.describe_kept(), "no version is stored yet");
    }

    fn formatted(header: Header, value_len: usize) -> Vec<u8> {
        let mut bytes = vec![0; value_len];
        bytes[..HEADER_BYTES].copy_from_slice(&header.encode());
        bytes
    }

    /// Zero bytes of any length are an unformatted value; a formatted one reads back its
    /// versions, and only the kept ones.
    #[test]
    fn decodes_zero_and_formatted_values() {
        assert_eq!(Value::decode(&[]), Ok(Value::Zero));
        assert_eq!(Value::decode(&[0; 10]), Ok(Value::Zero));
        assert_eq!(Value::decode(&[0; 80]), Ok(Value::Zero));

        let header = Header { slots: 2, slot_bytes: 4, written: 3 };
        let mut bytes = formatted(header, 50);
        bytes[32..36].copy_from_slice(&3u32.to_le_bytes()); // version 3, in slot 0
        bytes[36..39].copy_from_slice(b"abc");
        bytes[40..44].copy_from_slice(&4u32.to_le_bytes()); // version 2, in slot 1
        bytes[44..48].copy_from_slice(b"wxyz");
        let Ok(Value::Versions(versions)) = Value::decode(&bytes) else { panic!("a valid value") };
        assert_eq!(versions.header(), header);
        assert_eq!(versions.get(3), Some(&b"abc"[..]));
        assert_eq!(versions.get(2), Some(&b"wxyz"[..]));
        for gone in [0, 1, 4] {
            assert_eq!(versions.get(gone), None, "{gone}");
        }
    }

    /// Headers that do not fit the value, and slots that disagree with `written`, are refused.
    #[test]
    fn refuses_inconsistent_values() {
        let header = Header { slots: 2, slot_bytes: 4, written: 1 };
        let mut cases = vec![
            (vec![1; 50], "neither all zero"),
            (formatted(Header { slots: 0, ..header }, 50), "0 slots"),
            (formatted(Header { slots: SLOTS_MAX + 1, ..header }, 50), "1025 slots"),
            (formatted(Header { slot_bytes: 0, ..header }, 50), "slots of 0 bytes"),
            (formatted(Header { slot_bytes: u32::MAX, ..header }, 50), "need"),
            (formatted(header, 47), "need"),
            (formatted(header, 56), "unused"),
        ];
        let mut reserved = formatted(header, 50);
        reserved[24] = 1;
        cases.push((reserved, "reserved"));
        let mut long = formatted(header, 50);
        long[32..36].copy_from_slice(&5u32.to_le_bytes());
        cases.push((long, "more than its 4"));
        let mut unwritten = formatted(header, 50);
        unwritten[40..44].copy_from_slice(&1u32.to_le_bytes());
        cases.push((unwritten, "only version 1 is kept"));
        for (bytes, problem) in cases {
            let error = Value::decode(&bytes).expect_err(problem);
            assert_eq!(error.code(), ferrite_plugin::ErrorCode::Invalid);
            assert!(error.message().contains("not a versioning value"), "{error}");
            assert!(error.message().contains(problem), "{error} should say {problem}");
        }
        assert!(Value::decode(&formatted(header, 50)).is_ok(), "the unchanged header is valid");
        assert!(Value::decode(&formatted(header, 48)).is_ok(), "no remainder");
        assert!(Value::decode(&formatted(header, 55)).is_ok(), "a remainder under one slot");
    }
}
