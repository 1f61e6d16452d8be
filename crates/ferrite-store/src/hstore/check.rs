//! Integrity of an hstore region: the table walk that `open` uses to rebuild the volatile state
//! (the reconstituting allocator and the counts), and [`HStore::check`](super::HStore::check),
//! which repeats the walk and compares its result with the state of the open store.

use std::fmt;

use super::allocator::Heap;
use super::layout::{
    index, slice, Header, Occupant, CAPACITY_BYTES_OFFSET, ENTRY_BYTES, HEADER_BYTES, HOP_MASK, NEIGHBOURHOOD,
    OCCUPANT_OFFSET, PAYLOAD_OFFSET, SEGMENTS_OFFSET, USED_BIT,
};
use super::table::Table;
use crate::store::ENTRY_OVERHEAD_BYTES;

/// A walk stops collecting after this many problems: past that, the region is plainly damaged and
/// a longer list helps nobody.
const PROBLEMS_MAX: usize = 100;

/// One inconsistency, at the region offset where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    pub offset: u64,
    pub detail: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at offset {:#x}: {}", self.offset, self.detail)
    }
}

/// What a walk of the table finds.
#[derive(Debug)]
pub(crate) struct Walk {
    pub objects: u64,
    pub used_bytes: u64,
    pub out_of_line_objects: u64,
    /// The allocator state the table implies: every segment, slab slot and extent it references
    /// claimed, everything else free.
    pub heap: Heap,
}

/// Summary of a region that passed [`HStore::check`](super::HStore::check).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckReport {
    pub objects: u64,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    pub region_bytes: u64,
    pub buckets: u64,
    pub segments: usize,
    /// Keys and values stored outside their table entry.
    pub out_of_line_objects: u64,
    pub slabs: usize,
    /// Bytes of the heap in free extents (free slots inside slabs not counted).
    pub heap_free_bytes: u64,
    pub heap_free_extents: usize,
}

struct Problems<'a>(&'a mut Vec<Problem>);

impl Problems<'_> {
    fn push(&mut self, offset: u64, detail: String) {
        if self.0.len() < PROBLEMS_MAX {
            self.0.push(Problem { offset, detail });
        }
    }

    fn full(&self) -> bool {
        self.0.len() >= PROBLEMS_MAX
    }
}

/// Walks the table of a region whose header decoded as `header`, checking every entry and
/// claiming every allocation it references in a fresh heap. Problems are appended to `problems`;
/// the returned counts and heap are meaningful only if none were found.
///
/// Checks: segments inside the heap and disjoint; every used entry's key hashes to its stored
/// hash, sits within the neighbourhood of its home and is listed in the home's hop bitmap; every
/// hop bit names a used entry with that home; empty entries are all zero; out-of-line keys and
/// values lie inside the heap, at a slot of their size class or on their own extent, and overlap
/// nothing; every key is found by a lookup (so no key is stored twice); used bytes fit the capacity.
pub(crate) fn walk(bytes: &[u8], header: &Header, table: &Table, problems: &mut Vec<Problem>) -> Walk {
    let mut problems = Problems(problems);
    let mut heap = Heap::new(HEADER_BYTES, header.heap_end(), header.slab_bytes, header.small_object_bytes_max());
    let mut walk = Walk { objects: 0, used_bytes: 0, out_of_line_objects: 0, heap: heap.clone() };
    for (k, segment) in table.segments().iter().enumerate() {
        let segment_bytes = table.segment_bytes(k);
        if !heap.claim_segment(*segment, segment_bytes) {
            problems.push(
                (SEGMENTS_OFFSET + 8 * k) as u64,
                format!(
                    "segment {k} ({segment_bytes} bytes at {segment:#x}) overlaps another segment or lies outside \
                     the heap"
                ),
            );
        }
    }
    if !problems.0.is_empty() {
        // Entries cannot be read safely from segments that are not where they should be.
        return walk;
    }
    let mask = table.mask();
    for bucket in 0..table.buckets() {
        if problems.full() {
            return walk;
        }
        let entry = table.entry_offset(bucket);
        let at = index(entry);
        let word = table.word(bytes, bucket);
        let mut hop = word & HOP_MASK;
        while hop != 0 {
            let distance = u64::from(hop.trailing_zeros());
            hop &= hop - 1;
            let target = (bucket + distance) & mask;
            if distance >= NEIGHBOURHOOD {
                problems.push(entry, format!("hop bit {distance} of bucket {bucket} is outside the neighbourhood"));
            } else if table.word(bytes, target) & USED_BIT == 0 {
                problems.push(
                    entry,
                    format!("hop bit {distance} of bucket {bucket} names bucket {target}, which is empty"),
                );
            } else {
                let home = table.home(table.occupant(bytes, target).hash);
                if home != bucket {
                    problems.push(
                        entry,
                        format!("hop bit {distance} of bucket {bucket} names bucket {target}, whose home is {home}"),
                    );
                }
            }
        }
        if word & USED_BIT == 0 {
            if bytes[at + OCCUPANT_OFFSET..at + ENTRY_BYTES as usize].iter().any(|b| *b != 0) {
                problems.push(entry, format!("bucket {bucket} is empty but its entry is not zeroed"));
            }
            continue;
        }
        let occupant = table.occupant(bytes, bucket);
        check_occupant(bytes, header, table, bucket, &occupant, &mut heap, &mut problems, &mut walk);
    }
    if walk.used_bytes > header.capacity_bytes {
        problems.push(
            CAPACITY_BYTES_OFFSET as u64,
            format!("the pairs take {} bytes, more than the capacity of {}", walk.used_bytes, header.capacity_bytes),
        );
    }
    walk.heap = heap;
    walk
}

#[allow(clippy::too_many_arguments)]
fn check_occupant(
    bytes: &[u8],
    header: &Header,
    table: &Table,
    bucket: u64,
    occupant: &Occupant,
    heap: &mut Heap,
    problems: &mut Problems<'_>,
    walk: &mut Walk,
) {
    let entry = table.entry_offset(bucket);
    let payload = entry + PAYLOAD_OFFSET as u64;
    let (key_at, key_len) = occupant.key_range(entry);
    let (value_at, value_len) = occupant.value_range(entry);
    for (what, at, len, inline) in [
        ("key", key_at, key_len, occupant.key_at().is_none()),
        ("value", value_at, value_len, occupant.value_at().is_none()),
    ] {
        if slice(bytes, at, len).is_none() {
            problems.push(
                payload,
                format!("the {what} of bucket {bucket} ({len} bytes at {at:#x}) lies outside the region"),
            );
            return;
        }
        if !inline {
            walk.out_of_line_objects += 1;
            if let Err(reason) = heap.claim(at, len) {
                problems.push(payload, format!("the {what} of bucket {bucket} ({len} bytes at {at:#x}) {reason}"));
            }
        }
    }
    let Some((key, _)) = table.pair(bytes, bucket, occupant) else {
        return;
    };
    let hash = header.hash(key);
    if hash != occupant.hash {
        problems
            .push(entry, format!("bucket {bucket} stores hash {:#x} but its key hashes to {hash:#x}", occupant.hash));
        return;
    }
    let home = table.home(hash);
    let distance = table.distance(home, bucket);
    if distance >= NEIGHBOURHOOD {
        problems
            .push(entry, format!("bucket {bucket} is {distance} buckets from its home {home}, past the neighbourhood"));
    } else if table.word(bytes, home) & (1 << distance) == 0 {
        problems.push(entry, format!("bucket {bucket} is not listed in the hop bitmap of its home {home}"));
    } else {
        match table.find(bytes, hash, key) {
            Some(found) if found == bucket => {}
            Some(found) => {
                problems.push(entry, format!("the key of bucket {bucket} is stored again in bucket {found}"))
            }
            None => problems.push(entry, format!("the key of bucket {bucket} is not found by a lookup")),
        }
    }
    walk.objects += 1;
    walk.used_bytes += key_len + value_len + ENTRY_OVERHEAD_BYTES;
}
