//! Pool memory of the `ssd` backing: a shared-memory region whose every committed transaction
//! becomes one record in the shard's write-ahead log.

use std::sync::{Arc, Mutex};

use super::log::{Due, SharedLog};
use super::pages::{PageTracker, PAGE_BYTES};
use super::record::{encode_pool_created, encode_transaction, PoolDescriptor};
use super::region::SharedRegion;
use crate::persistence::wal::{FsStorage, LogStorage, Lsn};

/// The LSN pages are marked with when their change could not be logged: never durable, so the
/// page-LSN rule keeps every checkpoint from copying them.
pub const UNLOGGED: Lsn = Lsn::MAX;
use crate::persistence::{Offset, PoolMemory};

/// A range of a transaction this long or longer (a large value, a piece of a direct put) is
/// kept in the log for checkpoints: they refer to its record instead of copying its whole pages.
/// Shorter ones are copied: a reference costs a manifest entry and pins a log segment.
pub const IN_LOG_RANGE_BYTES_MIN: u64 = 64 * 1024;

/// One pool's memory, logged. `modify` notes the range; `commit` encodes the new bytes of every
/// noted range (merged) as one transaction record and appends it to the shard's log, then marks
/// the pages with the record's LSN for the checkpointer. The first commit of a new pool's memory
/// is its creation record instead, so the pool and its formatting are one record.
///
/// `commit` cannot fail by signature. A shard reserves log room for the whole record before it
/// lets a write change memory, so the log refusing a record means something failed under it (an
/// I/O error poisoned it meanwhile). Then the log stays poisoned, the pages the change touched are
/// marked as changed at an LSN that never becomes durable, so no checkpoint ever copies them, and
/// the shard, which checks the log after each write, stops before anything reveals the change.
#[derive(Debug)]
pub struct LoggedMemory<S: LogStorage = FsStorage> {
    pool: u64,
    region: SharedRegion,
    log: SharedLog<S>,
    pages: Arc<Mutex<PageTracker>>,
    ranges: Vec<(u64, u64)>,
    /// Ranges the current transaction freed, released once its record is in the log.
    releases: Vec<(u64, u64)>,
    /// Ranges the engine freed ([`PoolMemory::freed`]), marked free in the page tracker with the
    /// next record's LSN.
    frees: Vec<(u64, u64)>,
    /// A new pool's descriptor, until its first commit logs it.
    creating: Option<PoolDescriptor>,
    /// Inside a group ([`PoolMemory::begin_group`]): commits wait for its end.
    grouping: bool,
}

impl<S: LogStorage + Clone + 'static> LoggedMemory<S> {
    /// Memory of an existing pool (recovered after a restart).
    pub fn new(pool: u64, region: SharedRegion, log: SharedLog<S>, pages: Arc<Mutex<PageTracker>>) -> LoggedMemory<S> {
        LoggedMemory {
            pool,
            region,
            log,
            pages,
            ranges: Vec::new(),
            releases: Vec::new(),
            frees: Vec::new(),
            creating: None,
            grouping: false,
        }
    }

    /// Memory of a pool being created: its first commit (the engine formatting it) is logged
    /// as the pool's creation record, together with `descriptor`.
    pub fn for_new_pool(
        descriptor: PoolDescriptor,
        region: SharedRegion,
        log: SharedLog<S>,
        pages: Arc<Mutex<PageTracker>>,
    ) -> LoggedMemory<S> {
        LoggedMemory { creating: Some(descriptor.clone()), ..LoggedMemory::new(descriptor.id, region, log, pages) }
    }

    pub fn region(&self) -> &SharedRegion {
        &self.region
    }

    /// Logs the ranges noted since the last commit as one record, durable by `due`.
    fn commit_due(&mut self, due: Due) {
        if self.grouping {
            return;
        }
        if self.ranges.is_empty() && self.creating.is_none() {
            self.releases.clear();
            return;
        }
        let (pool, ranges, memory, creating) = (self.pool, &mut self.ranges, self.region.bytes(), self.creating.take());
        let transaction = creating.is_none();
        let (lsn, at) = self
            .log
            .append_encoded_due(due, |out| match creating {
                Some(descriptor) => encode_pool_created(&descriptor, ranges, memory, out),
                None => encode_transaction(pool, ranges, memory, out),
            })
            .unwrap_or((UNLOGGED, None));
        // A transaction's record holds its ranges merged (encoding merged them in place).
        let at = at.filter(|_| transaction);
        let mut pages = self.pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Frees first: a page this transaction freed and wrote again (a new value in the old
        // one's place) is recorded as changed just below, which makes it needed again.
        for (offset, len) in self.frees.drain(..) {
            if lsn != UNLOGGED {
                pages.freed(offset, len, lsn);
            }
        }
        for &(offset, len) in &self.ranges {
            match at {
                Some(at) if len >= IN_LOG_RANGE_BYTES_MIN => pages.record_in_log(offset, len, lsn, at),
                _ => pages.record(offset, len, lsn),
            }
        }
        self.ranges.clear();
        // Released pages read as zeros, which no log record says: harmless for bytes that are
        // free once this record is durable, as replay and checkpoints never need free bytes, and
        // the tracker makes a checkpoint in progress wait for this record before copying them. A
        // record the log refused leaves them as they were, for the shard stops before any reader.
        for (offset, len) in self.releases.drain(..) {
            if lsn != UNLOGGED {
                pages.released(offset, len, lsn);
                // A hint: pages that cannot be released stay resident and correct.
                let _ = self.region.release(offset, len);
            }
        }
        drop(pages);
    }
}

impl<S: LogStorage + Clone + 'static> PoolMemory for LoggedMemory<S> {
    fn bytes(&self) -> &[u8] {
        self.region.bytes()
    }

    fn modify(&mut self, offset: Offset, len: usize) -> &mut [u8] {
        self.ranges.push((offset, len as u64));
        let start = usize::try_from(offset).expect("pool memory offsets fit the address space");
        &mut self.region.bytes_mut()[start..start + len]
    }

    fn commit(&mut self) {
        self.commit_due(Due::Interval);
    }

    fn commit_with_next(&mut self) {
        self.commit_due(Due::WithNext);
    }

    fn release(&mut self, offset: Offset, len: u64) {
        self.releases.push((offset, len));
    }

    fn freed(&mut self, offset: Offset, len: u64) {
        // Only a range holding a whole page can leave anything out of a checkpoint: the small
        // objects most writes free are not even noted.
        if offset.div_ceil(PAGE_BYTES) < offset.saturating_add(len) / PAGE_BYTES {
            self.frees.push((offset, len));
        }
    }

    fn scratch_mut(&mut self, offset: Offset, len: usize) -> Option<&mut [u8]> {
        let start = usize::try_from(offset).ok()?;
        self.region.bytes_mut().get_mut(start..start.checked_add(len)?)
    }

    /// A new pool's first commit is its creation record, which no group may swallow.
    fn begin_group(&mut self) -> bool {
        if self.creating.is_some() {
            return false;
        }
        self.grouping = true;
        true
    }

    fn end_group(&mut self) {
        self.grouping = false;
        self.commit();
    }
}
