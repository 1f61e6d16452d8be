//! The test host's pool: an index of keys to values in the arena, the live allocations, and a
//! logical clock for write times. Small enough to clone whole, which is how a failed call's
//! structural changes (create, erase, resize, allocate, free) are undone.

use std::collections::BTreeMap;

use super::arena::Arena;

/// Where a value lies and when it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) write_time_ns: u64,
}

/// Values are aligned like a pool allocator aligns them, so plugins may read integers in place.
pub(crate) const VALUE_ALIGN_BYTES: usize = 8;

/// The parts of the pool a failed call's rollback restores wholesale.
#[derive(Debug, Clone)]
pub(crate) struct PoolTables {
    pub(crate) index: BTreeMap<Vec<u8>, Entry>,
    /// Live `allocate_memory` blocks: offset to length.
    pub(crate) allocations: BTreeMap<usize, usize>,
    /// A logical clock: each write takes the next tick as its write time, so tests of
    /// time-ranged iteration are deterministic.
    pub(crate) clock_ns: u64,
}

#[derive(Debug)]
pub(crate) struct Pool {
    pub(crate) arena: Arena,
    pub(crate) tables: PoolTables,
}

/// What a rollback puts back.
#[derive(Debug)]
pub(crate) struct PoolCheckpoint {
    tables: PoolTables,
    arena_used: usize,
}

impl Pool {
    pub(crate) fn new(capacity_bytes: usize) -> Pool {
        Pool {
            arena: Arena::new(capacity_bytes),
            tables: PoolTables { index: BTreeMap::new(), allocations: BTreeMap::new(), clock_ns: 0 },
        }
    }

    pub(crate) fn tick(&mut self) -> u64 {
        self.tables.clock_ns += 1;
        self.tables.clock_ns
    }

    /// Places a zeroed value of `len` bytes for `key` (replacing any entry) and returns it.
    /// `None` when the arena is full.
    pub(crate) fn place(&mut self, key: &[u8], len: usize) -> Option<Entry> {
        let offset = self.arena.allocate(len, VALUE_ALIGN_BYTES)?;
        self.arena.zero(offset, len);
        let entry = Entry { offset, len, write_time_ns: self.tick() };
        self.tables.index.insert(key.to_vec(), entry);
        Some(entry)
    }

    pub(crate) fn entry(&self, key: &[u8]) -> Option<Entry> {
        self.tables.index.get(key).copied()
    }

    pub(crate) fn value(&self, key: &[u8]) -> Option<&[u8]> {
        self.entry(key).map(|entry| self.arena.bytes(entry.offset, entry.len))
    }

    pub(crate) fn checkpoint(&self) -> PoolCheckpoint {
        PoolCheckpoint { tables: self.tables.clone(), arena_used: self.arena.used() }
    }

    /// Puts the index, the allocations and the bump pointer back as they were (the bytes of
    /// declared ranges are restored separately, from their before-images).
    pub(crate) fn roll_back(&mut self, checkpoint: PoolCheckpoint) {
        self.tables = checkpoint.tables;
        self.arena.rewind(checkpoint.arena_used);
    }
}
