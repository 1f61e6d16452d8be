//! Allocation inside an hstore region (MCAS section 3.2.1): a region allocator for extents (table
//! segments, slabs, large values) and a size-class (slab) allocator for small keys and values.
//!
//! All of this state is volatile. Nothing here is written to pool memory: every allocation is
//! reachable from the table (an entry's out-of-line key or value, a segment in the header's
//! directory), so `open` rebuilds the allocators by walking the table and claiming what it finds,
//! the MCAS "reconstituting allocator". A crash between choosing space and committing the entry
//! that points at it therefore leaks nothing: the uncommitted choice is simply never found.
//!
//! Placement policy, chosen so that a pool that only grows never fragments: slabs are taken from
//! the lowest free address (they all have one size and alignment, so they pack without gaps), and
//! large values and table segments from the high end of the smallest free extent that fits (they
//! pack downward). Frees coalesce, so the free list is always the maximal free extents, and a
//! rebuilt allocator equals the one it replaces.

use std::collections::{BTreeMap, BTreeSet};

use super::layout::{align_up, is_aligned, GRAIN_BYTES};

/// Slab size classes: multiples of 16 up to 128, then four classes per power of two up to 4 KiB.
/// Rounding a length `n` up to its class wastes at most `n / 4 + 15` bytes.
pub(crate) const CLASS_BYTES: [u64; 28] = [
    16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 1792,
    2048, 2560, 3072, 3584, 4096,
];

/// The smallest class that holds `len` bytes.
pub(crate) fn class_of(len: u64) -> Option<usize> {
    let class = CLASS_BYTES.partition_point(|bytes| *bytes < len);
    (class < CLASS_BYTES.len()).then_some(class)
}

/// How many classes a pool whose small objects go up to `small_max` bytes uses.
pub(crate) fn class_count(small_max: u64) -> usize {
    CLASS_BYTES.partition_point(|bytes| *bytes <= small_max)
}

/// Free extents of the heap, kept maximal (adjacent free extents are always merged).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct RegionAllocator {
    by_start: BTreeMap<u64, u64>,
    /// The same extents ordered by (length, start), for best fit.
    by_len: BTreeSet<(u64, u64)>,
    free_bytes: u64,
}

impl RegionAllocator {
    fn insert(&mut self, start: u64, len: u64) {
        if len > 0 {
            self.by_start.insert(start, len);
            self.by_len.insert((len, start));
            self.free_bytes += len;
        }
    }

    fn remove(&mut self, start: u64, len: u64) {
        self.by_start.remove(&start);
        self.by_len.remove(&(len, start));
        self.free_bytes -= len;
    }

    /// Returns `len` bytes at `start` to the free list, merging with free neighbours.
    ///
    /// # Panics
    /// If any of the bytes is already free: a double free is a bug in the engine.
    pub(crate) fn free(&mut self, start: u64, len: u64) {
        debug_assert!(
            len > 0 && is_aligned(start, GRAIN_BYTES) && is_aligned(len, GRAIN_BYTES),
            "grain-aligned extent"
        );
        let (mut start, mut len) = (start, len);
        if let Some((&next, _)) = self.by_start.range(start..).next() {
            assert!(next >= start + len, "double free of {start:#x}+{len}");
        }
        if let Some((&before, &before_len)) = self.by_start.range(..start).next_back() {
            assert!(before + before_len <= start, "double free of {start:#x}+{len}");
            if before + before_len == start {
                self.remove(before, before_len);
                start = before;
                len += before_len;
            }
        }
        if let Some(&after_len) = self.by_start.get(&(start + len)) {
            self.remove(start + len, after_len);
            len += after_len;
        }
        self.insert(start, len);
    }

    /// Best fit, carved from the high end of the extent.
    pub(crate) fn alloc_high(&mut self, len: u64) -> Option<u64> {
        debug_assert!(len > 0 && is_aligned(len, GRAIN_BYTES));
        let &(extent_len, start) = self.by_len.range((len, 0)..).next()?;
        self.remove(start, extent_len);
        self.insert(start, extent_len - len);
        Some(start + extent_len - len)
    }

    /// Best fit for `len` bytes at an `align`-aligned start (a multiple of the grain), carved from
    /// the high end of the extent as `alloc_high` does.
    pub(crate) fn alloc_high_aligned(&mut self, len: u64, align: u64) -> Option<u64> {
        debug_assert!(len > 0 && is_aligned(len, GRAIN_BYTES) && is_aligned(align, GRAIN_BYTES));
        let (extent_len, start, at) = self.by_len.range((len, 0)..).find_map(|&(extent_len, start)| {
            let at = (start + extent_len - len) / align * align;
            (at >= start).then_some((extent_len, start, at))
        })?;
        self.remove(start, extent_len);
        self.insert(start, at - start);
        self.insert(at + len, start + extent_len - at - len);
        Some(at)
    }

    /// The lowest `align`-aligned free range of `len` bytes. Scans the free list, which is fine
    /// for its one caller: a new slab is needed once per slab's worth of objects.
    pub(crate) fn alloc_low_aligned(&mut self, len: u64, align: u64) -> Option<u64> {
        let (start, extent_len, at) = self.by_start.iter().find_map(|(&start, &extent_len)| {
            let at = align_up(start, align);
            (at + len <= start + extent_len).then_some((start, extent_len, at))
        })?;
        self.remove(start, extent_len);
        self.insert(start, at - start);
        self.insert(at + len, start + extent_len - at - len);
        Some(at)
    }

    /// Takes exactly `len` bytes at `start`; false (and no change) unless all of them are free.
    pub(crate) fn claim(&mut self, start: u64, len: u64) -> bool {
        let Some((&extent, &extent_len)) = self.by_start.range(..=start).next_back() else {
            return false;
        };
        if start.checked_add(len).is_none_or(|end| end > extent + extent_len) {
            return false;
        }
        self.remove(extent, extent_len);
        self.insert(extent, start - extent);
        self.insert(start + len, extent + extent_len - start - len);
        true
    }

    pub(crate) fn free_bytes(&self) -> u64 {
        self.free_bytes
    }

    pub(crate) fn free_extents(&self) -> usize {
        self.by_start.len()
    }
}

/// One slab: `slab_bytes` holding objects of one size class, with a bitmap of used slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slab {
    pub class: usize,
    pub used: u64,
    bits: Vec<u64>,
}

impl Slab {
    fn new(class: usize, slots: u64) -> Slab {
        Slab { class, used: 0, bits: vec![0; slots.div_ceil(64) as usize] }
    }

    fn is_set(&self, slot: u64) -> bool {
        self.bits[(slot / 64) as usize] & (1 << (slot % 64)) != 0
    }

    fn set(&mut self, slot: u64) {
        self.bits[(slot / 64) as usize] |= 1 << (slot % 64);
        self.used += 1;
    }

    fn clear(&mut self, slot: u64) {
        self.bits[(slot / 64) as usize] &= !(1 << (slot % 64));
        self.used -= 1;
    }

    fn first_free(&self) -> Option<u64> {
        self.bits
            .iter()
            .enumerate()
            .find(|(_, word)| **word != u64::MAX)
            .map(|(i, word)| i as u64 * 64 + u64::from(word.trailing_ones()))
    }
}

/// The size-class allocator: per class, the slabs that still have a free slot. Slabs are aligned
/// to their size, so the slab of any object is its offset rounded down, and the class of an
/// object follows from its length; that is what lets `open` rebuild this from the table alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlabAllocator {
    slab_bytes: u64,
    slabs: BTreeMap<u64, Slab>,
    /// Per class, the slabs with a free slot; the lowest address is filled first.
    partial: Vec<BTreeSet<u64>>,
}

impl SlabAllocator {
    fn new(slab_bytes: u64, classes: usize) -> SlabAllocator {
        SlabAllocator { slab_bytes, slabs: BTreeMap::new(), partial: vec![BTreeSet::new(); classes] }
    }

    fn slots(&self, class: usize) -> u64 {
        self.slab_bytes / CLASS_BYTES[class]
    }

    fn alloc(&mut self, class: usize, region: &mut RegionAllocator) -> Option<u64> {
        let start = match self.partial[class].first() {
            Some(start) => *start,
            None => {
                let start = region.alloc_low_aligned(self.slab_bytes, self.slab_bytes)?;
                self.slabs.insert(start, Slab::new(class, self.slots(class)));
                self.partial[class].insert(start);
                start
            }
        };
        let slots = self.slots(class);
        let slab = self.slabs.get_mut(&start).expect("every partial slab is in the slab map");
        let slot = slab.first_free().expect("a partial slab has a free slot");
        debug_assert!(slot < slots);
        slab.set(slot);
        if slab.used == slots {
            self.partial[class].remove(&start);
        }
        Some(start + slot * CLASS_BYTES[class])
    }

    fn free(&mut self, offset: u64, class: usize, region: &mut RegionAllocator) {
        let start = offset / self.slab_bytes * self.slab_bytes;
        let slab = self.slabs.get_mut(&start).expect("a freed object lies in a live slab");
        assert_eq!(slab.class, class, "object freed with the size class it was allocated with");
        let slot = (offset - start) / CLASS_BYTES[class];
        assert!(slab.is_set(slot), "double free of {offset:#x}");
        slab.clear(slot);
        if slab.used == 0 {
            // MCAS returns a slab whose slots are all free to the region allocator.
            self.slabs.remove(&start);
            self.partial[class].remove(&start);
            region.free(start, self.slab_bytes);
        } else {
            self.partial[class].insert(start);
        }
    }

    /// Marks the slot at `offset` used, creating its slab if needed. Used to rebuild the allocator
    /// from the table and to undo a free; fails (changing nothing) if the slot cannot be this
    /// object's.
    fn claim(&mut self, offset: u64, class: usize, region: &mut RegionAllocator) -> Result<(), String> {
        let start = offset / self.slab_bytes * self.slab_bytes;
        let class_bytes = CLASS_BYTES[class];
        let within = offset - start;
        if !is_aligned(within, class_bytes) || within / class_bytes >= self.slots(class) {
            return Err(format!("is not at a slot boundary of the {class_bytes}-byte class in slab {start:#x}"));
        }
        let slot = within / class_bytes;
        match self.slabs.get(&start) {
            Some(slab) if slab.class != class => {
                return Err(format!(
                    "lies in slab {start:#x} of the {}-byte class, not the {class_bytes}-byte class",
                    CLASS_BYTES[slab.class]
                ));
            }
            Some(slab) if slab.is_set(slot) => return Err("shares its slot with another object".into()),
            Some(_) => {}
            None => {
                if !region.claim(start, self.slab_bytes) {
                    return Err(format!("needs slab {start:#x}, which overlaps another allocation"));
                }
                self.slabs.insert(start, Slab::new(class, self.slots(class)));
            }
        }
        let slots = self.slots(class);
        let slab = self.slabs.get_mut(&start).expect("inserted or found above");
        slab.set(slot);
        if slab.used == slots {
            self.partial[class].remove(&start);
        } else {
            self.partial[class].insert(start);
        }
        Ok(())
    }
}

/// What backs an object of a given length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Backing {
    Slot { class: usize },
    Extent { bytes: u64 },
}

/// The whole heap of one region: `[start, end)` shared by slabs, large values and table segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Heap {
    region: RegionAllocator,
    slabs: SlabAllocator,
    small_max: u64,
    /// Bytes of the extents holding objects above the small limit (table segments not
    /// included): counted here, as they are allocated, claimed and freed, so that the memory
    /// figures need no walk; a heap rebuilt by `open` claims every one of them again.
    large_bytes: u64,
}

impl Heap {
    /// A heap with everything in `[start, end)` free.
    pub(crate) fn new(start: u64, end: u64, slab_bytes: u64, small_max: u64) -> Heap {
        let mut region = RegionAllocator::default();
        if end > start {
            region.insert(start, end - start);
        }
        Heap { region, slabs: SlabAllocator::new(slab_bytes, class_count(small_max)), small_max, large_bytes: 0 }
    }

    /// Objects up to the pool's small limit take a slab slot, larger ones an extent of their own.
    pub(crate) fn backing(&self, len: u64) -> Backing {
        match class_of(len) {
            Some(class) if len <= self.small_max => Backing::Slot { class },
            _ => Backing::Extent { bytes: align_up(len, GRAIN_BYTES) },
        }
    }

    /// Space for an object of `len` (> 0) bytes.
    pub(crate) fn alloc(&mut self, len: u64) -> Option<u64> {
        match self.backing(len) {
            Backing::Slot { class } => self.slabs.alloc(class, &mut self.region),
            Backing::Extent { bytes } => {
                let offset = self.region.alloc_high(bytes)?;
                self.large_bytes += bytes;
                Some(offset)
            }
        }
    }

    pub(crate) fn free(&mut self, offset: u64, len: u64) {
        match self.backing(len) {
            Backing::Slot { class } => self.slabs.free(offset, class, &mut self.region),
            Backing::Extent { bytes } => {
                self.region.free(offset, bytes);
                self.large_bytes -= bytes;
            }
        }
    }

    /// Marks the object of `len` bytes at `offset` allocated; the error says why it cannot be.
    pub(crate) fn claim(&mut self, offset: u64, len: u64) -> Result<(), String> {
        match self.backing(len) {
            Backing::Slot { class } => self.slabs.claim(offset, class, &mut self.region),
            Backing::Extent { bytes } => {
                if !is_aligned(offset, GRAIN_BYTES) {
                    Err(format!("is not {GRAIN_BYTES}-byte aligned"))
                } else if self.region.claim(offset, bytes) {
                    self.large_bytes += bytes;
                    Ok(())
                } else {
                    Err(format!("({bytes} bytes) overlaps another allocation or lies outside the heap"))
                }
            }
        }
    }

    /// Whole pages of `page_bytes` for `len` bytes: an extent that starts on a page and holds its
    /// pages alone, counted with the large objects.
    pub(crate) fn alloc_pages(&mut self, len: u64, page_bytes: u64) -> Option<u64> {
        let bytes = align_up(len.max(1), page_bytes);
        let offset = self.region.alloc_high_aligned(bytes, page_bytes)?;
        self.large_bytes += bytes;
        Some(offset)
    }

    /// Frees what [`Self::alloc_pages`] gave for `len` bytes.
    pub(crate) fn free_pages(&mut self, offset: u64, len: u64, page_bytes: u64) {
        let bytes = align_up(len.max(1), page_bytes);
        self.region.free(offset, bytes);
        self.large_bytes -= bytes;
    }

    /// Marks `bytes` (whole pages, as recorded) at `offset` allocated; the error says why they
    /// cannot be.
    pub(crate) fn claim_pages(&mut self, offset: u64, bytes: u64) -> Result<(), String> {
        if !is_aligned(offset, GRAIN_BYTES) || !is_aligned(bytes, GRAIN_BYTES) || bytes == 0 {
            Err(format!("({bytes} bytes of whole pages) is not {GRAIN_BYTES}-byte aligned"))
        } else if self.region.claim(offset, bytes) {
            self.large_bytes += bytes;
            Ok(())
        } else {
            Err(format!("({bytes} bytes of whole pages) overlaps another allocation or lies outside the heap"))
        }
    }

    pub(crate) fn alloc_segment(&mut self, bytes: u64) -> Option<u64> {
        self.region.alloc_high(bytes)
    }

    pub(crate) fn free_segment(&mut self, offset: u64, bytes: u64) {
        self.region.free(offset, bytes);
    }

    pub(crate) fn claim_segment(&mut self, offset: u64, bytes: u64) -> bool {
        self.region.claim(offset, bytes)
    }

    /// Bytes in free extents (free slots inside slabs not counted).
    pub(crate) fn free_bytes(&self) -> u64 {
        self.region.free_bytes()
    }

    pub(crate) fn free_extents(&self) -> usize {
        self.region.free_extents()
    }

    pub(crate) fn slabs(&self) -> usize {
        self.slabs.slabs.len()
    }

    /// Bytes of every slab, its free slots included: a slab is held whole until its last object
    /// goes.
    pub(crate) fn slab_bytes(&self) -> u64 {
        self.slabs.slabs.len() as u64 * self.slabs.slab_bytes
    }

    /// Bytes of the extents of objects above the small limit.
    pub(crate) fn large_bytes(&self) -> u64 {
        self.large_bytes
    }

    /// Allocates every free extent, returning them, so tests can run out of heap on demand.
    #[cfg(test)]
    pub(crate) fn take_all_free(&mut self) -> Vec<(u64, u64)> {
        let extents: Vec<(u64, u64)> = self.region.by_start.iter().map(|(start, len)| (*start, *len)).collect();
        for (start, len) in &extents {
            assert!(self.region.claim(*start, *len));
        }
        extents
    }
}

#[derive(Debug, Clone, Copy)]
enum Action {
    Allocated { offset: u64, len: u64 },
    Freed { offset: u64, len: u64 },
    Segment { offset: u64, bytes: u64 },
}

/// The allocator changes of one store operation, kept so that an operation that turns out not to
/// fit can undo them before it touches pool memory. Undoing in reverse order always succeeds:
/// each freed range is still free when its free is undone.
#[derive(Debug, Default)]
pub(crate) struct AllocTxn {
    actions: Vec<Action>,
}

impl AllocTxn {
    pub(crate) fn alloc(&mut self, heap: &mut Heap, len: u64) -> Option<u64> {
        let offset = heap.alloc(len)?;
        self.actions.push(Action::Allocated { offset, len });
        Some(offset)
    }

    pub(crate) fn free(&mut self, heap: &mut Heap, offset: u64, len: u64) {
        heap.free(offset, len);
        self.actions.push(Action::Freed { offset, len });
    }

    pub(crate) fn alloc_segment(&mut self, heap: &mut Heap, bytes: u64) -> Option<u64> {
        let offset = heap.alloc_segment(bytes)?;
        self.actions.push(Action::Segment { offset, bytes });
        Some(offset)
    }

    /// Moves `other`'s changes into this transaction, after its own.
    pub(crate) fn absorb(&mut self, other: AllocTxn) {
        self.actions.extend(other.actions);
    }

    pub(crate) fn rollback(self, heap: &mut Heap) {
        for action in self.actions.into_iter().rev() {
            match action {
                Action::Allocated { offset, len } => heap.free(offset, len),
                Action::Freed { offset, len } => heap
                    .claim(offset, len)
                    .expect("a range freed in this transaction is free again when undone in reverse order"),
                Action::Segment { offset, bytes } => heap.free_segment(offset, bytes),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Class rounding stays within the bound the region rule relies on.
    #[test]
    fn classes_round_within_a_quarter_plus_sixteen() {
        assert!(CLASS_BYTES.windows(2).all(|pair| pair[0] < pair[1] && is_aligned(pair[0], 16)));
        for len in 1..=4096 {
            let class = class_of(len).expect("small length has a class");
            let bytes = CLASS_BYTES[class];
            assert!(bytes >= len && bytes <= len + len / 4 + 15, "{len} -> {bytes}");
            assert!(class == 0 || CLASS_BYTES[class - 1] < len);
        }
        assert_eq!(class_of(4097), None);
        assert_eq!(class_count(512), 16);
        assert_eq!(class_count(4096), 28);
    }

    /// Frees merge with both neighbours, best fit picks the smallest extent and carves its top.
    #[test]
    fn region_allocator_coalesces_and_fits_best() {
        let mut region = RegionAllocator::default();
        region.insert(0, 64 * 100);
        let a = region.alloc_high(64 * 10).expect("room");
        assert_eq!(a, 64 * 90);
        let b = region.alloc_high(64 * 10).expect("room");
        let c = region.alloc_high(64 * 10).expect("room");
        assert_eq!((b, c), (64 * 80, 64 * 70));
        region.free(b, 64 * 10);
        // The hole at b (10 grains) is the best fit for 5 grains, not the 70-grain extent.
        assert_eq!(region.alloc_high(64 * 5), Some(64 * 85));
        region.free(64 * 85, 64 * 5);
        region.free(a, 64 * 10);
        region.free(c, 64 * 10);
        assert_eq!(region.by_start.len(), 1);
        assert_eq!(region.free_bytes(), 64 * 100);
        assert_eq!(region.alloc_high(64 * 101), None);
    }

    #[test]
    fn page_aligned_allocation_takes_whole_pages_best_fit() {
        let mut heap = Heap::new(4096, 4096 * 10 + 64, 1024, 128);
        let at = heap.alloc_pages(100, 4096).expect("room");
        assert!(is_aligned(at, 4096), "{at:#x} starts a page");
        assert_eq!(heap.large_bytes(), 4096, "the whole page is its own");
        let next = heap.alloc_pages(4097, 4096).expect("room");
        assert!(is_aligned(next, 4096) && (next + 8192 <= at || at + 4096 <= next), "two pages apart from the first");
        heap.free_pages(at, 100, 4096);
        heap.free_pages(next, 4097, 4096);
        assert_eq!(heap.large_bytes(), 0);
        assert_eq!(heap.free_bytes(), 4096 * 9 + 64, "everything coalesced back");
        heap.claim_pages(8192, 4096).expect("free pages");
        assert!(heap.claim_pages(8192, 4096).is_err(), "taken");
        assert!(heap.alloc_pages(4096 * 10, 4096).is_none(), "no ten free pages");
    }

    #[test]
    fn aligned_allocation_and_claim() {
        let mut region = RegionAllocator::default();
        region.insert(64, 64 * 1000);
        let slab = region.alloc_low_aligned(4096, 4096).expect("room");
        assert_eq!(slab, 4096);
        assert!(!region.claim(4096, 64), "already allocated");
        assert!(region.claim(64, 64));
        assert!(!region.claim(64 * 1000, 128), "runs past the end");
        region.free(64, 64);
        region.free(4096, 4096);
        assert_eq!(region.by_start.len(), 1);
        let mut tiny = RegionAllocator::default();
        tiny.insert(64, 4096);
        assert_eq!(tiny.alloc_low_aligned(4096, 4096), None, "no aligned 4 KiB inside 64..4160");
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn region_double_free_panics() {
        let mut region = RegionAllocator::default();
        region.insert(0, 4096);
        region.free(64, 64);
    }

    /// Slots fill a slab before a new one is taken; an emptied slab goes back to the region.
    #[test]
    fn slabs_fill_then_return() {
        let mut heap = Heap::new(4096, 4096 * 10, 4096, 512);
        let objects: Vec<u64> = (0..9).map(|_| heap.alloc(500).expect("room")).collect();
        // 512-byte class: 8 slots per 4 KiB slab, so the ninth object opens a second slab.
        assert_eq!(heap.slabs(), 2);
        assert_eq!(heap.slab_bytes(), 2 * 4096, "a slab counts whole, free slots included");
        assert_eq!(objects[1] - objects[0], 512);
        assert_eq!(objects[8] % 4096, 0);
        for offset in &objects {
            heap.free(*offset, 500);
        }
        assert_eq!(heap.slabs(), 0);
        assert_eq!(heap.slab_bytes(), 0);
        assert_eq!(heap.free_bytes(), 4096 * 9);
        assert_eq!(heap.backing(513), Backing::Extent { bytes: 576 });
    }

    /// Objects above the small limit count as large bytes at their grain-rounded size, whether
    /// allocated or claimed by a rebuild; table segments do not count.
    #[test]
    fn large_objects_are_counted_apart_from_segments() {
        let mut heap = Heap::new(4096, 4096 * 10, 4096, 512);
        let large = heap.alloc(513).expect("room");
        heap.alloc_segment(4096).expect("room");
        assert_eq!((heap.large_bytes(), heap.slab_bytes()), (576, 0));
        heap.free(large, 513);
        assert_eq!(heap.large_bytes(), 0);
        heap.claim(4096, 1000).expect("free extent");
        assert_eq!(heap.large_bytes(), 1024);
    }

    #[test]
    fn claim_rejects_misplaced_objects() {
        let mut heap = Heap::new(4096, 4096 * 10, 4096, 512);
        heap.claim(8192 + 48, 40).expect("48-byte class slot 1");
        assert!(heap.claim(8192 + 48, 40).is_err(), "same slot twice");
        assert!(heap.claim(8192 + 50, 40).is_err(), "not at a slot boundary");
        assert!(heap.claim(8192 + 64, 100).is_err(), "slab holds another class");
        assert!(heap.claim(8192, 1000).is_err(), "extent overlaps the slab");
        assert!(heap.claim(4096 * 10, 1000).is_err(), "outside the heap");
        heap.claim(4096 * 5, 1000).expect("free extent");
    }

    proptest! {
        /// Any sequence of allocations and frees, undone through an `AllocTxn`, leaves the heap
        /// exactly as it was; and the heap never hands out overlapping space.
        #[test]
        fn rollback_restores_the_heap(
            setup in proptest::collection::vec(1u64..3000, 0..40),
            ops in proptest::collection::vec((any::<bool>(), 1u64..3000, any::<prop::sample::Index>()), 0..40),
        ) {
            let mut heap = Heap::new(4096, 4096 * 64, 4096, 512);
            let mut live: Vec<(u64, u64)> = setup.iter().filter_map(|len| heap.alloc(*len).map(|at| (at, *len))).collect();
            let before = heap.clone();
            let mut txn = AllocTxn::default();
            for (allocate, len, pick) in ops {
                if allocate || live.is_empty() {
                    if let Some(at) = txn.alloc(&mut heap, len) {
                        live.push((at, len));
                    }
                } else {
                    let (at, len) = live.swap_remove(pick.index(live.len()));
                    txn.free(&mut heap, at, len);
                }
            }
            let mut extents: Vec<(u64, u64)> = live.iter().map(|(at, len)| match heap.backing(*len) {
                Backing::Slot { class } => (*at, CLASS_BYTES[class]),
                Backing::Extent { bytes } => (*at, bytes),
            }).collect();
            extents.sort_unstable();
            for pair in extents.windows(2) {
                prop_assert!(pair[0].0 + pair[0].1 <= pair[1].0, "overlap {:?}", pair);
            }
            txn.rollback(&mut heap);
            prop_assert_eq!(heap, before);
        }
    }
}
