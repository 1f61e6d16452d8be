//! The test host's pool memory: one zeroed, page-aligned block that values and allocations are
//! carved from, so a plugin sees real addresses and offsets, as in a pool mapping.
//!
//! Allocation only moves a bump pointer forward: freed memory is never handed out again, which
//! keeps every old offset meaningful and lets a rollback free everything a call allocated by
//! moving the pointer back.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// The largest alignment `allocate_memory` accepts, and the arena's own alignment.
pub(crate) const ALIGN_BYTES_MAX: usize = 4096;

#[derive(Debug)]
pub(crate) struct Arena {
    base: NonNull<u8>,
    layout: Layout,
    used: usize,
}

impl Arena {
    /// A zeroed arena of `capacity_bytes` (at least one byte).
    #[allow(unsafe_code)]
    pub(crate) fn new(capacity_bytes: usize) -> Arena {
        let layout = Layout::from_size_align(capacity_bytes.max(1), ALIGN_BYTES_MAX)
            .expect("the arena's capacity is below isize::MAX once aligned to a page");
        // SAFETY: the layout has a non-zero size.
        let base = unsafe { alloc_zeroed(layout) };
        let Some(base) = NonNull::new(base) else {
            std::alloc::handle_alloc_error(layout);
        };
        Arena { base, layout, used: 0 }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.layout.size()
    }

    /// Bytes up to the bump pointer (allocated at some time, freed or not).
    pub(crate) fn used(&self) -> usize {
        self.used
    }

    /// Moves the bump pointer back to where a rollback found it.
    pub(crate) fn rewind(&mut self, used: usize) {
        debug_assert!(used <= self.used);
        self.used = used;
    }

    /// Carves `len` bytes aligned to `align` (a power of two); `None` when the arena is full.
    pub(crate) fn allocate(&mut self, len: usize, align: usize) -> Option<usize> {
        debug_assert!(align.is_power_of_two() && align <= ALIGN_BYTES_MAX);
        let start = self.used.checked_next_multiple_of(align)?;
        let end = start.checked_add(len)?;
        if end > self.capacity() {
            return None;
        }
        self.used = end;
        Some(start)
    }

    /// The address of `offset`.
    pub(crate) fn address(&self, offset: usize) -> *mut u8 {
        debug_assert!(offset <= self.capacity());
        self.base.as_ptr().wrapping_add(offset)
    }

    /// The offset of `len` bytes at `address`, when they lie wholly inside the arena.
    pub(crate) fn offset_of(&self, address: *const u8, len: usize) -> Option<usize> {
        let offset = (address as usize).checked_sub(self.base.as_ptr() as usize)?;
        (offset.checked_add(len)? <= self.capacity()).then_some(offset)
    }

    /// The bytes at `offset`. Only read while no plugin code holds them mutably: between entries,
    /// or inside a callback (the Rust SDK lends no mutable pool bytes across a callback).
    #[allow(unsafe_code)]
    pub(crate) fn bytes(&self, offset: usize, len: usize) -> &[u8] {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.capacity()), "range outside the arena");
        // SAFETY: the range lies inside the allocation (asserted), which lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(offset), len) }
    }

    /// Writes `data` at `offset`.
    #[allow(unsafe_code)]
    pub(crate) fn write(&mut self, offset: usize, data: &[u8]) {
        assert!(offset.checked_add(data.len()).is_some_and(|end| end <= self.capacity()), "range outside the arena");
        // SAFETY: the range lies inside the allocation (asserted); `data` is host memory, not the
        // arena, unless it is a copy the caller made.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.as_ptr().add(offset), data.len()) }
    }

    /// Copies `len` bytes from `from` to `to` inside the arena (the ranges may overlap).
    #[allow(unsafe_code)]
    pub(crate) fn copy_within(&mut self, from: usize, to: usize, len: usize) {
        let fits = |start: usize| start.checked_add(len).is_some_and(|end| end <= self.capacity());
        assert!(fits(from) && fits(to), "range outside the arena");
        // SAFETY: both ranges lie inside the allocation (asserted); `copy` allows overlap.
        unsafe { std::ptr::copy(self.base.as_ptr().add(from), self.base.as_ptr().add(to), len) }
    }

    /// Zeroes `len` bytes at `offset`.
    pub(crate) fn zero(&mut self, offset: usize, len: usize) {
        self.write(offset, &vec![0; len]);
    }

    /// A copy of the whole arena, for the checking mode's before/after comparison.
    pub(crate) fn snapshot(&self) -> Vec<u8> {
        self.bytes(0, self.capacity()).to_vec()
    }
}

impl Drop for Arena {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: `base` came from `alloc_zeroed` with this layout and is freed once.
        unsafe { dealloc(self.base.as_ptr(), self.layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocations honour their alignment, never overlap, and stop at the capacity.
    #[test]
    fn allocations_align_and_stop_when_full() {
        let mut arena = Arena::new(8192);
        assert_eq!(arena.address(0) as usize % ALIGN_BYTES_MAX, 0);
        assert_eq!(arena.allocate(3, 1), Some(0));
        assert_eq!(arena.allocate(8, 8), Some(8));
        assert_eq!(arena.allocate(1, 4096), Some(4096));
        assert_eq!(arena.allocate(4096, 1), None);
        assert_eq!(arena.used(), 4097);
    }

    /// Addresses map back to offsets only when the whole range is inside.
    #[test]
    fn offsets_of_addresses() {
        let arena = Arena::new(100);
        assert_eq!(arena.offset_of(arena.address(10), 90), Some(10));
        assert_eq!(arena.offset_of(arena.address(10), 91), None);
        assert_eq!(arena.offset_of(std::ptr::null(), 1), None);
    }
}
