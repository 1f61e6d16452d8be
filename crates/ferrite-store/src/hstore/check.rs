//! Integrity of an hstore region: the table walk that `open` uses to rebuild the volatile state
//! (the reconstituting allocator and the counts), and [`HStore::check`](super::HStore::check),
//! which repeats the walk and compares its result with the state of the open store.

use std::collections::BTreeMap;
use std::fmt;

use super::allocator::Heap;
use super::layout::{
    index, slice, subtable_of, tag_of, DirectoryEntry, Header, Occupant, CAPACITY_BYTES_OFFSET, DIRECTORY_ENTRY_BYTES,
    DIRECTORY_OFFSET, ENTRY_BYTES, HEADER_BYTES, NEIGHBOURHOOD, OCCUPANT_OFFSET, PAYLOAD_OFFSET,
};
use super::table::Subtable;
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

/// What a walk of the directory and the tables finds.
#[derive(Debug)]
pub(crate) struct Walk {
    pub objects: u64,
    pub used_bytes: u64,
    pub out_of_line_objects: u64,
    /// The allocator state the tables imply: the directory, every subtable, slab slot and extent
    /// they reference claimed, everything else free.
    pub heap: Heap,
    /// Every subtable's place, as the directory records it.
    pub subtables: Vec<Subtable>,
    /// Pairs found in each subtable (the engine's own allocations included).
    pub pairs: Vec<u32>,
    /// The engine's own allocations (see `Occupant::allocation`), by place.
    pub allocations: BTreeMap<u64, Allocation>,
}

/// An allocation of pool memory the engine keeps for a plugin: `len` bytes at the place it is
/// listed under, recorded under `id` (the place the plugin was given, inside it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Allocation {
    pub id: u64,
    pub len: u64,
    /// Whole pages (see `layout::PAGES`), freed as such; else an object of `len` bytes.
    pub pages: bool,
}

/// Summary of a region that passed [`HStore::check`](super::HStore::check).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CheckReport {
    pub objects: u64,
    pub used_bytes: u64,
    pub capacity_bytes: u64,
    pub region_bytes: u64,
    /// Buckets of every subtable together.
    pub buckets: u64,
    pub subtables: usize,
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

/// Walks the directory and every table of a region whose header decoded as `header`, checking
/// every entry and claiming every allocation it references in a fresh heap. Problems are appended
/// to `problems`; the returned counts and heap are meaningful only if none were found.
///
/// Checks: the directory and every subtable inside the heap and disjoint, every directory entry
/// intact and in its place; every used entry's key hashes to its subtable and its stored hash,
/// sits within the neighbourhood of its home and is listed in the home's hop bitmap; every hop bit
/// names a used entry with that home; empty entries are all zero; out-of-line keys and values lie
/// inside the heap, at a slot of their size class or on their own extent, and overlap nothing;
/// every key is found by a lookup (so no key is stored twice); used bytes fit the capacity.
pub(crate) fn walk(bytes: &[u8], header: &Header, problems: &mut Vec<Problem>) -> Walk {
    let mut problems = Problems(problems);
    let mut heap = Heap::new(HEADER_BYTES, header.heap_end(), header.slab_bytes, header.small_object_bytes_max());
    let count = index(header.subtables);
    let mut walk = Walk {
        objects: 0,
        used_bytes: 0,
        out_of_line_objects: 0,
        heap: heap.clone(),
        subtables: Vec::with_capacity(count),
        pairs: vec![0; count],
        allocations: BTreeMap::new(),
    };
    if !heap.claim_segment(header.directory, header.directory_bytes()) {
        problems.push(
            DIRECTORY_OFFSET as u64,
            format!(
                "the directory ({} bytes at {:#x}) lies outside the heap",
                header.directory_bytes(),
                header.directory
            ),
        );
        return walk;
    }
    for k in 0..header.subtables {
        let at = header.directory_entry_offset(k);
        let entry = slice(bytes, at, DIRECTORY_ENTRY_BYTES).map(|raw| DirectoryEntry::decode(raw, k));
        match entry {
            Some(Ok(entry)) => {
                if entry.buckets > 0 && !heap.claim_segment(entry.offset, entry.buckets * ENTRY_BYTES) {
                    problems.push(
                        at,
                        format!(
                            "subtable {k} ({} buckets at {:#x}) overlaps another allocation or lies outside the heap",
                            entry.buckets, entry.offset
                        ),
                    );
                }
                walk.subtables.push(Subtable { offset: entry.offset, buckets: entry.buckets });
            }
            Some(Err(reason)) => problems.push(at, format!("the directory entry of subtable {k} is damaged: {reason}")),
            None => problems.push(at, format!("the directory entry of subtable {k} lies outside the region")),
        }
    }
    if !problems.0.is_empty() {
        // Entries cannot be read safely from subtables that are not where they should be.
        return walk;
    }
    for (k, subtable) in walk.subtables.clone().into_iter().enumerate() {
        for bucket in 0..subtable.buckets {
            if problems.full() {
                return walk;
            }
            check_bucket(bytes, header, k, subtable, bucket, &mut heap, &mut problems, &mut walk);
        }
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

/// Checks one bucket: its hop bitmap, and its entry (empty, or a pair in its place).
#[allow(clippy::too_many_arguments)]
fn check_bucket(
    bytes: &[u8],
    header: &Header,
    k: usize,
    subtable: Subtable,
    bucket: u64,
    heap: &mut Heap,
    problems: &mut Problems<'_>,
    walk: &mut Walk,
) {
    let entry = subtable.entry_offset(bucket);
    let mut hop = subtable.hop(bytes, bucket);
    while hop != 0 {
        let distance = u64::from(hop.trailing_zeros());
        hop &= hop - 1;
        let target = subtable.forward(bucket, distance);
        if !subtable.is_used(bytes, target) {
            problems.push(
                entry,
                format!("hop bit {distance} of bucket {bucket} of subtable {k} names bucket {target}, which is empty"),
            );
        } else {
            let home = subtable.home(subtable.occupant(bytes, target).tag);
            if home != bucket {
                problems.push(
                    entry,
                    format!(
                        "hop bit {distance} of bucket {bucket} of subtable {k} names bucket {target}, whose home is \
                         {home}"
                    ),
                );
            }
        }
    }
    if !subtable.is_used(bytes, bucket) {
        let at = index(entry);
        if bytes[at + OCCUPANT_OFFSET..at + ENTRY_BYTES as usize].iter().any(|b| *b != 0) {
            problems.push(entry, format!("bucket {bucket} of subtable {k} is empty but its entry is not zeroed"));
        }
        return;
    }
    let occupant = subtable.occupant(bytes, bucket);
    check_occupant(bytes, header, k, subtable, bucket, &occupant, heap, problems, walk);
}

#[allow(clippy::too_many_arguments)]
fn check_occupant(
    bytes: &[u8],
    header: &Header,
    k: usize,
    subtable: Subtable,
    bucket: u64,
    occupant: &Occupant,
    heap: &mut Heap,
    problems: &mut Problems<'_>,
    walk: &mut Walk,
) {
    let entry = subtable.entry_offset(bucket);
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
                format!(
                    "the {what} of bucket {bucket} of subtable {k} ({len} bytes at {at:#x}) lies outside the region"
                ),
            );
            return;
        }
        if !inline {
            walk.out_of_line_objects += 1;
            // An allocation of whole pages holds exactly the pages it recorded; keys and values
            // hold what their lengths give them.
            let claimed =
                if occupant.pages && what == "value" { heap.claim_pages(at, len) } else { heap.claim(at, len) };
            if let Err(reason) = claimed {
                problems.push(
                    payload,
                    format!("the {what} of bucket {bucket} of subtable {k} ({len} bytes at {at:#x}) {reason}"),
                );
            }
        }
    }
    let Some((key, _)) = subtable.pair(bytes, bucket, occupant) else {
        return;
    };
    let hash = header.hash(key);
    let (owner, tag) = (subtable_of(hash, header.subtables), tag_of(hash));
    if owner != k as u64 || tag != occupant.tag {
        problems.push(
            entry,
            format!(
                "bucket {bucket} of subtable {k} holds a key of subtable {owner} with hash part {tag:#x}; it stores \
                 {:#x}",
                occupant.tag
            ),
        );
        return;
    }
    let home = subtable.home(tag);
    let distance = subtable.distance(home, bucket);
    if distance >= NEIGHBOURHOOD {
        problems.push(
            entry,
            format!(
                "bucket {bucket} of subtable {k} is {distance} buckets from its home {home}, past the neighbourhood"
            ),
        );
    } else if subtable.hop(bytes, home) & (1 << distance) == 0 {
        problems
            .push(entry, format!("bucket {bucket} of subtable {k} is not listed in the hop bitmap of its home {home}"));
    } else {
        match subtable.find(bytes, tag, key, occupant.internal) {
            Some(found) if found == bucket => {}
            Some(found) => problems
                .push(entry, format!("the key of bucket {bucket} of subtable {k} is stored again in bucket {found}")),
            None => {
                problems.push(entry, format!("the key of bucket {bucket} of subtable {k} is not found by a lookup"))
            }
        }
    }
    if occupant.internal {
        let id = key.try_into().map(u64::from_le_bytes).unwrap_or(u64::MAX);
        walk.allocations.insert(value_at, Allocation { id, len: value_len, pages: occupant.pages });
    } else {
        walk.objects += 1;
    }
    walk.pairs[k] += 1;
    walk.used_bytes += key_len + value_len + ENTRY_OVERHEAD_BYTES;
}
