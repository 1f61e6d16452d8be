//! Which pages of a pool's memory changed, and at which log position: what an incremental
//! checkpoint copies, and when it may copy it (the page-LSN rule).

use std::collections::BTreeMap;

use crate::persistence::wal::{Lsn, RecordAt};

/// Pool memory is checkpointed in pages of this size.
pub const PAGE_BYTES: u64 = 4096;

/// Whole pages of pool memory whose bytes are exactly what one log record wrote there: a
/// checkpoint refers to the record instead of copying the pages (see `docs/durability.md`,
/// "Large values"). Every byte of a large value is so written to the disk once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogExtent {
    pub first_page: u64,
    pub pages: u64,
    /// The record's LSN.
    pub lsn: Lsn,
    /// Where the record lies in the log.
    pub at: RecordAt,
}

impl LogExtent {
    pub fn end_page(&self) -> u64 {
        self.first_page + self.pages
    }
}

/// Per-page bookkeeping of one pool's memory: the LSN of each page's last change, the pages
/// changed since the last checkpoint began, and the pages that hold nothing the engine needs.
/// Costs 8 bytes plus two bits per 4 KiB page.
#[derive(Debug)]
pub struct PageTracker {
    page_lsn: Vec<Lsn>,
    dirty_bits: Vec<u64>,
    dirty: Vec<u64>,
    /// Pages wholly inside memory the engine freed ([`freed`](Self::freed)) and not written
    /// since: a checkpoint need not copy them. Known only since the pool was loaded.
    free_bits: Vec<u64>,
    /// Pages whose bytes one log record holds ([`LogExtent`]), by first page. Any other change
    /// of a page, or its freeing, takes it out.
    in_log: BTreeMap<u64, LogExtent>,
}

impl PageTracker {
    /// A tracker for a region of `region_bytes`, or an error if its bookkeeping cannot be
    /// allocated (a region size read from disk is checked this way, never trusted to fit).
    pub fn try_new(region_bytes: u64) -> Result<PageTracker, std::collections::TryReserveError> {
        let pages = usize::try_from(region_bytes.div_ceil(PAGE_BYTES)).unwrap_or(usize::MAX);
        let mut page_lsn = Vec::new();
        page_lsn.try_reserve_exact(pages)?;
        page_lsn.resize(pages, 0);
        let mut dirty_bits = Vec::new();
        dirty_bits.try_reserve_exact(pages.div_ceil(64))?;
        dirty_bits.resize(pages.div_ceil(64), 0);
        let mut free_bits = Vec::new();
        free_bits.try_reserve_exact(pages.div_ceil(64))?;
        free_bits.resize(pages.div_ceil(64), 0);
        Ok(PageTracker { page_lsn, dirty_bits, dirty: Vec::new(), free_bits, in_log: BTreeMap::new() })
    }

    /// Pages in the region.
    pub fn pages(&self) -> u64 {
        self.page_lsn.len() as u64
    }

    /// Records that `len` bytes at `offset` changed in the record with LSN `lsn`.
    pub fn record(&mut self, offset: u64, len: u64, lsn: Lsn) {
        if len == 0 {
            return;
        }
        let span = Self::page_span(offset, len);
        self.forget_in_log(span.start, span.end);
        for page in span {
            self.page_lsn[page as usize] = lsn;
            let (word, bit) = ((page / 64) as usize, page % 64);
            self.free_bits[word] &= !(1 << bit);
            if self.dirty_bits[word] & (1 << bit) == 0 {
                self.dirty_bits[word] |= 1 << bit;
                self.dirty.push(page);
            }
        }
    }

    /// Records that the pages of `len` bytes at `offset` are given back to the system after the
    /// record with LSN `lsn` freed them: they read as zeros from then on, a change no record
    /// holds. They are free memory, which no later checkpoint needs, so they are not marked
    /// changed; but a checkpoint that took them before the release must not copy the zeros before
    /// that record is durable, or after a crash its copy of a table that still names them (copied
    /// before the release) would meet zeros where the data was.
    pub fn released(&mut self, offset: u64, len: u64, lsn: Lsn) {
        for page in Self::page_span(offset, len) {
            self.page_lsn[page as usize] = lsn;
        }
        self.freed(offset, len, lsn);
    }

    /// Records that the record with LSN `lsn` freed `len` bytes at `offset`: the pages wholly
    /// inside hold nothing the engine reads again until a later record writes them (which
    /// [`record`](Self::record)s them as changed). A checkpoint skips such a page once `lsn` is
    /// durable, and waits for it before then: until the freeing record is durable, a checkpoint's
    /// copy of the table may still name what the page held. Pages at either end, which other
    /// objects may share, are left as they are.
    pub fn freed(&mut self, offset: u64, len: u64, lsn: Lsn) {
        let first = offset.div_ceil(PAGE_BYTES);
        let end = (offset.saturating_add(len) / PAGE_BYTES).min(self.pages());
        self.forget_in_log(first, end);
        for page in first..end {
            self.page_lsn[page as usize] = lsn;
            self.free_bits[(page / 64) as usize] |= 1 << (page % 64);
        }
    }

    /// Records that `len` bytes at `offset` changed in the record with LSN `lsn`, found in the
    /// log at `at`, which holds their bytes: the whole pages inside need no copy in a checkpoint
    /// while nothing else changes them.
    pub fn record_in_log(&mut self, offset: u64, len: u64, lsn: Lsn, at: RecordAt) {
        self.record(offset, len, lsn);
        let first = offset.div_ceil(PAGE_BYTES);
        let end = (offset.saturating_add(len) / PAGE_BYTES).min(self.pages());
        if first < end {
            self.in_log.insert(first, LogExtent { first_page: first, pages: end - first, lsn, at });
        }
    }

    /// Adds pages a checkpoint found in the log (recovery): they stay there until changed.
    pub fn restore_in_log(&mut self, extent: LogExtent) {
        let end = extent.end_page().min(self.pages());
        if extent.first_page < end {
            self.forget_in_log(extent.first_page, end);
            self.in_log.insert(extent.first_page, LogExtent { pages: end - extent.first_page, ..extent });
        }
    }

    /// Takes pages `first..end` out of their log extents (they changed otherwise, or were
    /// freed), splitting an extent that covers more.
    fn forget_in_log(&mut self, first: u64, end: u64) {
        if self.in_log.is_empty() || first >= end {
            return;
        }
        let overlapping: Vec<LogExtent> = self
            .in_log
            .range(..end)
            .rev()
            .take_while(|(_, extent)| extent.end_page() > first)
            .map(|(_, extent)| *extent)
            .collect();
        for extent in overlapping {
            self.in_log.remove(&extent.first_page);
            if extent.first_page < first {
                self.in_log.insert(extent.first_page, LogExtent { pages: first - extent.first_page, ..extent });
            }
            if extent.end_page() > end {
                self.in_log.insert(end, LogExtent { first_page: end, pages: extent.end_page() - end, ..extent });
            }
        }
    }

    /// Whether `page` is, as of now, wholly the bytes of a record with an LSN of `lsn` or later.
    pub fn written_whole_since(&self, page: u64, lsn: Lsn) -> bool {
        self.in_log.range(..=page).next_back().is_some_and(|(_, extent)| extent.end_page() > page && extent.lsn >= lsn)
    }

    /// Every extent of pages the log holds, in page order.
    pub fn in_log(&self) -> Vec<LogExtent> {
        self.in_log.values().copied().collect()
    }

    /// Takes `extent`'s pages out of the log's keeping: a checkpoint copies them instead (its
    /// cleaner, freeing the log space they pin).
    pub fn forget(&mut self, extent: &LogExtent) {
        self.forget_in_log(extent.first_page, extent.end_page());
    }

    /// Whether `page` holds nothing the engine needs (see [`freed`](Self::freed)).
    pub fn is_free(&self, page: u64) -> bool {
        self.free_bits[(page / 64) as usize] & (1 << (page % 64)) != 0
    }

    /// The LSN of the last change to `page` (0 if none since the pool was loaded).
    pub fn page_lsn(&self, page: u64) -> Lsn {
        self.page_lsn[page as usize]
    }

    /// The pages `len` bytes at `offset` touch.
    fn page_span(offset: u64, len: u64) -> std::ops::Range<u64> {
        if len == 0 {
            return 0..0;
        }
        offset / PAGE_BYTES..(offset + len - 1) / PAGE_BYTES + 1
    }

    /// Takes the pages changed since the last call, sorted; changes from now on count towards the
    /// next call. A checkpoint begins with this.
    pub fn take_dirty(&mut self) -> Vec<u64> {
        self.dirty_bits.fill(0);
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        dirty
    }

    /// Puts back pages a checkpoint took but did not write (it was abandoned), so the next one
    /// writes them.
    pub fn restore_dirty(&mut self, pages: &[u64]) {
        for &page in pages {
            let (word, bit) = ((page / 64) as usize, page % 64);
            if self.dirty_bits[word] & (1 << bit) == 0 {
                self.dirty_bits[word] |= 1 << bit;
                self.dirty.push(page);
            }
        }
    }

    /// Pages changed since the last `take_dirty`.
    pub fn dirty_pages(&self) -> usize {
        self.dirty.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_mark_every_page_they_touch_once() {
        let mut pages = PageTracker::try_new(10 * PAGE_BYTES).expect("small");
        pages.record(PAGE_BYTES - 1, 2, 5);
        pages.record(PAGE_BYTES, 10, 6);
        pages.record(9 * PAGE_BYTES, 1, 7);
        assert_eq!(pages.page_lsn(0), 5);
        assert_eq!(pages.page_lsn(1), 6);
        assert_eq!(pages.take_dirty(), vec![0, 1, 9]);
        assert_eq!(pages.dirty_pages(), 0);
        pages.record(0, 1, 8);
        pages.restore_dirty(&[0, 3]);
        assert_eq!(pages.take_dirty(), vec![0, 3]);
    }

    /// A released page carries the LSN of the record that freed it, so a checkpoint waits for
    /// that record before copying it, but it is not marked changed for the next checkpoint.
    #[test]
    fn released_pages_carry_their_lsn_but_are_not_changed() {
        let mut pages = PageTracker::try_new(4 * PAGE_BYTES).expect("small");
        pages.record(0, 1, 2);
        pages.take_dirty();
        pages.released(PAGE_BYTES, 2 * PAGE_BYTES, 7);
        assert_eq!((pages.page_lsn(0), pages.page_lsn(1), pages.page_lsn(2), pages.page_lsn(3)), (2, 7, 7, 0));
        assert_eq!(pages.take_dirty(), Vec::<u64>::new());
        assert!(pages.is_free(1) && pages.is_free(2) && !pages.is_free(0));
    }

    /// Only pages wholly inside a freed range become free, with the freeing LSN; a write to a
    /// free page makes it needed again.
    #[test]
    fn freed_pages_are_the_whole_ones_until_written_again() {
        let mut pages = PageTracker::try_new(5 * PAGE_BYTES).expect("small");
        pages.record(0, 5 * PAGE_BYTES, 3);
        pages.freed(PAGE_BYTES - 64, 3 * PAGE_BYTES, 9);
        let free: Vec<bool> = (0..5).map(|page| pages.is_free(page)).collect();
        assert_eq!(free, [false, true, true, false, false], "pages 0 and 3 are shared with the range's ends");
        assert_eq!((pages.page_lsn(0), pages.page_lsn(1), pages.page_lsn(3)), (3, 9, 3));
        pages.record(2 * PAGE_BYTES + 100, 8, 10);
        assert!(pages.is_free(1) && !pages.is_free(2), "written again: needed");
        pages.freed(4 * PAGE_BYTES, 10 * PAGE_BYTES, 11);
        assert!(pages.is_free(4), "a range past the region's end frees what lies inside it");
    }
}
