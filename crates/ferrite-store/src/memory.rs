//! What a pool's storage takes in memory, by part: the figures behind "bytes per key", which is
//! how users size machines.
//!
//! hstore's figures are exact: they are what its own allocators hand out inside the region. The
//! figures of DRAM structures (mapstore, the secondary index) are estimates built from the sizes
//! Rust lays them out with and the sizes the system allocator (glibc's malloc) rounds requests
//! up to; `docs/hstore.md` says what each counts. None of them needs a walk of the keys.

/// A store's memory, by part (see [`Store::memory_usage`](crate::Store::memory_usage)). A secondary index
/// lives beside the store and is counted apart ([`SecondaryIndex::memory_bytes`]).
///
/// [`SecondaryIndex::memory_bytes`]: crate::SecondaryIndex::memory_bytes
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryUsage {
    /// Slots of the hash table (hstore: buckets of every subtable; mapstore: the hash map's
    /// buckets). Pairs over buckets is the table's load.
    pub table_buckets: u64,
    /// Bytes of the hash table (hstore: 64 per bucket, keys and values that fit an entry
    /// included; mapstore: its slot and control arrays, estimated).
    pub table_bytes: u64,
    /// hstore: bytes of the slabs holding out-of-line keys and values up to the small-object
    /// limit, whole slabs (free slots included). mapstore has none.
    pub slab_bytes: u64,
    /// hstore: bytes of the extents holding out-of-line keys and values above the small-object
    /// limit, rounded to the 64-byte grain. mapstore has none.
    pub large_bytes: u64,
    /// hstore: the header page and the subtable directory. mapstore: every key and value (each
    /// its own heap allocation) and the hash-ordered key set scans walk, estimated.
    pub other_bytes: u64,
}

impl MemoryUsage {
    /// Every part together.
    pub fn total_bytes(&self) -> u64 {
        self.table_bytes + self.slab_bytes + self.large_bytes + self.other_bytes
    }
}

/// Bytes glibc's malloc takes for a request of `bytes` (> 0): the request plus its 8-byte size
/// header, rounded up to 16, and never less than its 32-byte smallest chunk. Allocations past its
/// mmap threshold are rounded to pages instead, a difference of well under one percent of them.
pub(crate) fn heap_allocation_bytes(bytes: u64) -> u64 {
    const HEADER_BYTES: u64 = 8;
    const ALIGN_BYTES: u64 = 16;
    const CHUNK_BYTES_MIN: u64 = 32;
    (bytes + HEADER_BYTES).next_multiple_of(ALIGN_BYTES).max(CHUNK_BYTES_MIN)
}

/// Slots of a standard B-tree node (`alloc::collections::btree`: B = 6, 2B - 1 keys).
const BTREE_NODE_KEYS_MAX: u64 = 11;
/// A leaf's fixed part: parent pointer, index in the parent and length (u16 each).
const BTREE_LEAF_HEADER_BYTES: u64 = 12;
/// An internal node adds a pointer per child (2B) to the leaf layout.
const BTREE_EDGES_BYTES: u64 = 12 * 8;
/// Keys per leaf, in tenths, counting the separator each leaf puts in its parent: a B-tree of
/// random inserts fills its nodes to about ln 2 (Yao), 7.6 of 11 slots. Keys inserted in order
/// leave leaves of 6 behind (the tree splits a full leaf 6 to 5), for about a quarter more node
/// bytes than this estimate (12 % more in all with 16-byte keys); a rebuild after a restart
/// inserts in hash order, which is random. `tests/memory_estimates.rs` measures both.
const BTREE_KEYS_PER_LEAF_TENTHS: u64 = 86;
/// Leaves per internal node, in tenths, with the levels above folded in (8.6 children each, and
/// 1 / (1 - 1/8.6) for the levels above).
const BTREE_LEAVES_PER_INTERNAL_TENTHS: u64 = 76;

/// Estimated bytes of the nodes of a `BTreeSet` of `len` elements of `element_bytes` (aligned to
/// 8) each: leaves and internal nodes at the fill above, each rounded as malloc rounds it. The
/// elements' own heap allocations are not included.
pub(crate) fn btree_set_node_bytes(len: u64, element_bytes: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let leaf = (BTREE_LEAF_HEADER_BYTES + BTREE_NODE_KEYS_MAX * element_bytes).next_multiple_of(8);
    let internal = leaf + BTREE_EDGES_BYTES;
    let leaves = (len * 10).div_ceil(BTREE_KEYS_PER_LEAF_TENTHS);
    let internals = if leaves > 1 { (leaves * 10).div_ceil(BTREE_LEAVES_PER_INTERNAL_TENTHS) } else { 0 };
    leaves * heap_allocation_bytes(leaf) + internals * heap_allocation_bytes(internal)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// malloc's rounding at its edges: the smallest chunk, then 16-byte steps after the header.
    #[test]
    fn heap_allocations_round_as_malloc_does() {
        assert_eq!(heap_allocation_bytes(1), 32);
        assert_eq!(heap_allocation_bytes(24), 32);
        assert_eq!(heap_allocation_bytes(25), 48);
        assert_eq!(heap_allocation_bytes(40), 48);
        assert_eq!(heap_allocation_bytes(192), 208);
    }

    /// An empty set has no node, a small one a single leaf, and a large one about a leaf per 8.6
    /// keys plus the internal nodes above them.
    #[test]
    fn btree_nodes_follow_the_fill() {
        assert_eq!(btree_set_node_bytes(0, 16), 0);
        assert_eq!(btree_set_node_bytes(5, 16), 208, "one 192-byte leaf");
        let per_key = btree_set_node_bytes(1_000_000, 16) as f64 / 1e6;
        assert!((28.0..30.0).contains(&per_key), "{per_key} node bytes per 16-byte element");
    }
}
