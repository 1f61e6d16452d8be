//! The call area: a memfd in which the host records, for the call in progress, every declared
//! write range and its before-image, so that the shard can undo the call from this area alone
//! after the host crashed or was killed.
//!
//! Layout (native-endian, which is little-endian on every platform we build for):
//!
//! | offset | size | field                                                            |
//! |-------:|-----:|------------------------------------------------------------------|
//! |      0 |    8 | magic `CALL_AREA_MAGIC`                                          |
//! |      8 |    8 | capacity: the area's total length in bytes                       |
//! |     16 |    8 | call: the call the entries belong to (0: none yet)               |
//! |     24 |    8 | committed: how many entries are complete                         |
//! |     64 |    … | entries, back to back, each 8-aligned                            |
//!
//! An entry is `offset: u64`, `len: u64` (a range of pool memory) and then `len` bytes: the
//! range's contents before the plugin changed them, padded to 8.
//!
//! Publication: the host writes an entry completely and only then bumps `committed` with
//! Release, so an entry the shard counts is whole even if the host died during the next one.
//! A new call resets `committed` to 0 before it stores its id in `call`. The shard reads the
//! area only after the host is dead, and restores it only if `call` names a call that has not
//! reported Done: the entries of a finished call stay in the area until the next call begins.
//! Everything read back is checked: the count against the capacity, every range against the
//! pool's length. Entries are restored newest first, so a range declared twice ends with its
//! oldest image.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::message::{CallId, Location};
use crate::shm::Mapping;

/// `b"FRCALL01"` as a little-endian integer.
pub const CALL_AREA_MAGIC: u64 = u64::from_le_bytes(*b"FRCALL01");
/// Bytes before the first entry.
pub const CALL_AREA_HEADER_BYTES: usize = 64;
/// Bytes before each entry's before-image.
pub const ENTRY_HEADER_BYTES: usize = 16;
/// The smallest call area the link creates.
pub const CALL_AREA_MIN_BYTES: usize = 4096;

const MAGIC_OFFSET: usize = 0;
const CAPACITY_OFFSET: usize = 8;
const CALL_OFFSET: usize = 16;
const COMMITTED_OFFSET: usize = 24;

const _: () = assert!(COMMITTED_OFFSET + 8 <= CALL_AREA_HEADER_BYTES);
const _: () = assert!(CALL_AREA_MIN_BYTES > CALL_AREA_HEADER_BYTES + ENTRY_HEADER_BYTES);

/// Why the call area could not be used or read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallAreaError {
    #[error("the call area has no room for another {needed} bytes")]
    NoSpace { needed: usize },
    #[error("range {offset}+{len} lies outside pool memory")]
    OutsidePool { offset: u64, len: u64 },
    #[error("the call area is corrupt: {0}")]
    Corrupt(&'static str),
}

fn field(area: &Mapping, offset: usize) -> Result<&AtomicU64, CallAreaError> {
    area.atomic_u64(offset).ok_or(CallAreaError::Corrupt("call area shorter than its header"))
}

fn entry_bytes(len: u64) -> Option<usize> {
    let len = usize::try_from(len).ok()?;
    ENTRY_HEADER_BYTES.checked_add(len.checked_next_multiple_of(8)?)
}

/// Writes an empty header over the whole mapping (only while no host runs).
pub fn init_call_area(area: &Mapping) -> Result<(), CallAreaError> {
    if area.len() < CALL_AREA_MIN_BYTES {
        return Err(CallAreaError::Corrupt("call area below its minimum size"));
    }
    field(area, MAGIC_OFFSET)?.store(CALL_AREA_MAGIC, Ordering::Relaxed);
    field(area, CAPACITY_OFFSET)?.store(area.len() as u64, Ordering::Relaxed);
    field(area, COMMITTED_OFFSET)?.store(0, Ordering::Relaxed);
    field(area, CALL_OFFSET)?.store(0, Ordering::Release);
    Ok(())
}

/// The host's side: records the before-images of the call in progress.
#[derive(Debug)]
pub struct CallAreaWriter {
    area: Arc<Mapping>,
    cursor: usize,
    committed: u64,
    /// Each before-image passes through here on its way from the pool to the area; reused, it
    /// never grows past the area's length, as a range is checked to fit before it is copied.
    image: Vec<u8>,
}

impl CallAreaWriter {
    pub fn open(area: Arc<Mapping>) -> Result<CallAreaWriter, CallAreaError> {
        if field(&area, MAGIC_OFFSET)?.load(Ordering::Acquire) != CALL_AREA_MAGIC {
            return Err(CallAreaError::Corrupt("bad magic"));
        }
        if field(&area, CAPACITY_OFFSET)?.load(Ordering::Relaxed) != area.len() as u64 {
            return Err(CallAreaError::Corrupt("capacity differs from the mapping"));
        }
        Ok(CallAreaWriter { area, cursor: CALL_AREA_HEADER_BYTES, committed: 0, image: Vec::new() })
    }

    /// The area's mapping, for reading back what this writer recorded.
    pub fn mapping(&self) -> &Mapping {
        &self.area
    }

    /// Starts recording for `call`, forgetting the previous call's entries.
    pub fn begin(&mut self, call: CallId) -> Result<(), CallAreaError> {
        field(&self.area, COMMITTED_OFFSET)?.store(0, Ordering::Release);
        field(&self.area, CALL_OFFSET)?.store(call.0, Ordering::Release);
        self.cursor = CALL_AREA_HEADER_BYTES;
        self.committed = 0;
        Ok(())
    }

    /// Copies `range`'s current bytes from `pool` into a new entry, then publishes it.
    pub fn record(&mut self, pool: &Mapping, range: Location) -> Result<(), CallAreaError> {
        let outside = CallAreaError::OutsidePool { offset: range.offset, len: range.len };
        if !pool.contains(range.offset, range.len) {
            return Err(outside);
        }
        let needed = entry_bytes(range.len).ok_or(outside)?;
        if self.cursor.checked_add(needed).is_none_or(|end| end > self.area.len()) {
            return Err(CallAreaError::NoSpace { needed });
        }
        let mut header = [0u8; ENTRY_HEADER_BYTES];
        header[..8].copy_from_slice(&range.offset.to_le_bytes());
        header[8..].copy_from_slice(&range.len.to_le_bytes());
        self.image.resize(range.len as usize, 0);
        let read = pool.read(range.offset, &mut self.image);
        let wrote = self.area.write(self.cursor as u64, &header)
            && self.area.write((self.cursor + ENTRY_HEADER_BYTES) as u64, &self.image);
        if !(read && wrote) {
            return Err(CallAreaError::Corrupt("entry outside its checked bounds"));
        }
        self.cursor += needed;
        self.committed += 1;
        field(&self.area, COMMITTED_OFFSET)?.store(self.committed, Ordering::Release);
        Ok(())
    }
}

/// The recorded state of one call: its ranges and their before-images, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeforeImages {
    pub call: CallId,
    pub entries: Vec<(Location, Vec<u8>)>,
}

impl BeforeImages {
    /// Writes every before-image back into `pool`, newest first.
    pub fn restore(&self, pool: &Mapping) -> Result<(), CallAreaError> {
        for (range, image) in self.entries.iter().rev() {
            if !pool.write(range.offset, image) {
                return Err(CallAreaError::OutsidePool { offset: range.offset, len: range.len });
            }
        }
        Ok(())
    }
}

/// Reads back what the (dead) host recorded, checking every count and range; `None` if no call
/// ever began. `pool_len` bounds every range.
pub fn read_back(area: &Mapping, pool_len: u64) -> Result<Option<BeforeImages>, CallAreaError> {
    if field(area, MAGIC_OFFSET)?.load(Ordering::Acquire) != CALL_AREA_MAGIC {
        return Err(CallAreaError::Corrupt("bad magic"));
    }
    let call = field(area, CALL_OFFSET)?.load(Ordering::Acquire);
    let committed = field(area, COMMITTED_OFFSET)?.load(Ordering::Acquire);
    if call == 0 {
        return Ok(None);
    }
    let most = ((area.len() - CALL_AREA_HEADER_BYTES) / ENTRY_HEADER_BYTES) as u64;
    if committed > most {
        return Err(CallAreaError::Corrupt("more entries than the area can hold"));
    }
    let mut entries = Vec::with_capacity(committed as usize);
    let mut cursor = CALL_AREA_HEADER_BYTES;
    for _ in 0..committed {
        let mut header = [0u8; ENTRY_HEADER_BYTES];
        if !area.read(cursor as u64, &mut header) {
            return Err(CallAreaError::Corrupt("entry header past the end"));
        }
        let (offset_bytes, len_bytes) = header.split_at(8);
        let offset = u64::from_le_bytes(offset_bytes.try_into().map_err(|_| CallAreaError::Corrupt("header"))?);
        let len = u64::from_le_bytes(len_bytes.try_into().map_err(|_| CallAreaError::Corrupt("header"))?);
        let range = Location { offset, len };
        if range.end().is_none_or(|end| end > pool_len) {
            return Err(CallAreaError::OutsidePool { offset, len });
        }
        let size = entry_bytes(len).ok_or(CallAreaError::Corrupt("entry length"))?;
        if cursor.checked_add(size).is_none_or(|end| end > area.len()) {
            return Err(CallAreaError::Corrupt("entry past the end"));
        }
        let mut image = vec![0u8; len as usize];
        if !area.read((cursor + ENTRY_HEADER_BYTES) as u64, &mut image) {
            return Err(CallAreaError::Corrupt("entry past the end"));
        }
        entries.push((range, image));
        cursor += size;
    }
    Ok(Some(BeforeImages { call: CallId(call), entries }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn area_and_pool(area_bytes: usize) -> (Arc<Mapping>, Mapping) {
        let area_fd = Mapping::create_memfd("area", area_bytes).expect("memfd");
        let area = Arc::new(Mapping::map(&area_fd).expect("map"));
        init_call_area(&area).expect("init");
        let pool_fd = Mapping::create_memfd("pool", 4096).expect("memfd");
        (area, Mapping::map(&pool_fd).expect("map"))
    }

    /// Recorded images restore the pool, newest first, so a twice-declared range gets its
    /// oldest bytes back.
    #[test]
    fn records_and_restores_newest_first() {
        let (area, pool) = area_and_pool(4096);
        let mut writer = CallAreaWriter::open(area.clone()).expect("open");
        writer.begin(CallId(5)).expect("begin");
        assert!(pool.write(100, b"original"));
        writer.record(&pool, Location { offset: 100, len: 8 }).expect("record");
        assert!(pool.write(100, b"changed1"));
        writer.record(&pool, Location { offset: 100, len: 8 }).expect("record");
        assert!(pool.write(100, b"changed2"));
        let images = read_back(&area, 4096).expect("valid").expect("a call");
        assert_eq!(images.call, CallId(5));
        assert_eq!(images.entries.len(), 2);
        images.restore(&pool).expect("restore");
        let mut bytes = [0u8; 8];
        assert!(pool.read(100, &mut bytes));
        assert_eq!(&bytes, b"original");
    }

    /// A range that does not fit is NoSpace and leaves the published entries as they were.
    #[test]
    fn full_area_refuses_without_publishing() {
        let (area, pool) = area_and_pool(CALL_AREA_MIN_BYTES);
        let mut writer = CallAreaWriter::open(area.clone()).expect("open");
        writer.begin(CallId(1)).expect("begin");
        writer.record(&pool, Location { offset: 0, len: 2048 }).expect("fits");
        assert!(matches!(writer.record(&pool, Location { offset: 0, len: 2048 }), Err(CallAreaError::NoSpace { .. })));
        assert!(matches!(
            writer.record(&pool, Location { offset: 4000, len: 200 }),
            Err(CallAreaError::OutsidePool { .. })
        ));
        assert_eq!(read_back(&area, 4096).expect("valid").expect("a call").entries.len(), 1);
    }

    /// Garbage in the area (a huge count, a range past the pool) is an error, not a panic.
    #[test]
    fn corrupt_area_is_an_error() {
        let (area, pool) = area_and_pool(4096);
        let mut writer = CallAreaWriter::open(area.clone()).expect("open");
        writer.begin(CallId(1)).expect("begin");
        writer.record(&pool, Location { offset: 0, len: 8 }).expect("record");
        assert!(read_back(&area, 4).is_err(), "range past a shorter pool");
        field(&area, COMMITTED_OFFSET).expect("field").store(u64::MAX, Ordering::Relaxed);
        assert!(matches!(read_back(&area, 4096), Err(CallAreaError::Corrupt(_))));
        field(&area, COMMITTED_OFFSET).expect("field").store(2, Ordering::Relaxed);
        assert!(area.write(CALL_AREA_HEADER_BYTES as u64 + 24 + 8, &u64::MAX.to_le_bytes()));
        assert!(read_back(&area, 4096).is_err(), "second entry's length is garbage");
    }
}
