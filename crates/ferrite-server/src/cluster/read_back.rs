//! Entries of the group's log read back from disk, kept for the reads that follow. A read of
//! entries no longer in memory reads whole log segments from their start, so reading a few at a
//! time would read the same segments over and over: Raft's start-up scans a restarted replica's
//! log backwards 64 entries at a time and looks up single entries all over it, then applies
//! what it did not replay forwards. Each read from disk therefore takes a window of entries
//! around the ones asked for, and the next reads inside it are answered from memory.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;

use ferrite_store::persistence::wal::{read_range, FsStorage, Lsn};

use super::replication::{decode_entry, entry_bytes};
use super::types::Entry;

/// Entries read on each side of those asked for.
const WINDOW_ENTRIES: u64 = 1024;
/// The most bytes of entries a window keeps on each side of those asked for, and the most bytes
/// asked for that are kept at all (large values make large entries).
const WINDOW_BYTES_MAX: usize = 32 << 20;

/// The window last read from the log's directory.
#[derive(Debug)]
pub(crate) struct ReadBack {
    storage: FsStorage,
    /// [`WINDOW_BYTES_MAX`], smaller in tests.
    bytes_max: Cell<usize>,
    /// Contiguous entries, the first at index `first`.
    window: RefCell<(Lsn, VecDeque<Entry>)>,
}

impl ReadBack {
    pub fn new(storage: FsStorage) -> ReadBack {
        ReadBack { storage, bytes_max: Cell::new(WINDOW_BYTES_MAX), window: RefCell::new((0, VecDeque::new())) }
    }

    /// Keeps windows of at most `bytes` on each side, and reads of more than `bytes` not at all.
    #[cfg(test)]
    pub fn limit_bytes(&self, bytes: usize) {
        self.bytes_max.set(bytes);
        self.forget();
    }

    /// Entries `from..to` of the log on disk, which holds them from `readable` on and up to
    /// `limit` (exclusive; memory holds the rest). `from..to` lies within those bounds.
    pub fn read(&self, from: Lsn, to: Lsn, readable: Lsn, limit: Lsn) -> io::Result<Vec<Entry>> {
        if let Some(entries) = self.in_window(from, to) {
            return Ok(entries);
        }
        let window_from = from.saturating_sub(WINDOW_ENTRIES).max(readable).max(1);
        let window_to = to.saturating_add(WINDOW_ENTRIES).min(limit);
        let mut window: VecDeque<Entry> = VecDeque::new();
        let (mut before_bytes, mut asked_bytes, mut after_bytes) = (0usize, 0usize, 0usize);
        let bytes_max = self.bytes_max.get();
        let mut bad = None;
        read_range(&self.storage, window_from, window_to - 1, |lsn, payload| match decode_entry(lsn, payload) {
            Ok(entry) if lsn < from => {
                // The nearest ones before `from` are kept.
                before_bytes += entry_bytes(&entry);
                window.push_back(entry);
                while before_bytes > bytes_max {
                    let Some(dropped) = window.pop_front() else { break };
                    before_bytes -= entry_bytes(&dropped);
                }
            }
            Ok(entry) if lsn < to => {
                asked_bytes += entry_bytes(&entry);
                window.push_back(entry);
            }
            Ok(entry) => {
                after_bytes += entry_bytes(&entry);
                if after_bytes <= bytes_max {
                    window.push_back(entry);
                }
            }
            Err(error) => {
                bad.get_or_insert(error);
            }
        })
        .map_err(io::Error::other)?;
        if let Some(error) = bad {
            return Err(error);
        }
        let first = window.front().map_or(from, |entry| entry.log_id.index);
        if asked_bytes > bytes_max {
            // A large read is answered, not kept: memory holds at most a window's worth.
            self.forget();
            let skip = usize::try_from(from.saturating_sub(first)).unwrap_or(usize::MAX);
            return Ok(window.into_iter().skip(skip).take_while(|entry| entry.log_id.index < to).collect());
        }
        *self.window.borrow_mut() = (first, window);
        self.in_window(from, to).ok_or_else(|| io::Error::other(format!("entries {from} to {to} were not read back")))
    }

    /// Forgets the window: the log changed where it lay (cut back, started over).
    pub fn forget(&self) {
        *self.window.borrow_mut() = (0, VecDeque::new());
    }

    fn in_window(&self, from: Lsn, to: Lsn) -> Option<Vec<Entry>> {
        let window = self.window.borrow();
        let (first, entries) = &*window;
        let start = usize::try_from(from.checked_sub(*first)?).ok()?;
        let end = usize::try_from(to.checked_sub(*first)?).ok()?;
        (end <= entries.len() && start < end).then(|| entries.range(start..end).cloned().collect())
    }
}
