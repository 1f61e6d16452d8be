//! The persistence layer: the only code that knows how bytes of pool memory become durable.
//!
//! An engine reads pool memory freely but changes it only through [`PoolMemory::modify`], which
//! declares the range about to change (the PMDK `tx_add_range` idea), and ends each operation with
//! [`PoolMemory::commit`], which makes every range declared since the previous commit one atomic
//! unit. A backing decides what a commit costs: nothing for `memory`, one checksummed write-ahead
//! log record for `ssd`, an undo log and cache-line flushes for `pmem`.
//!
//! Engines follow one rule that makes aborts unnecessary: an operation checks everything that can
//! fail before its first `modify`, so a failed operation has changed nothing.
//!
//! Everything persistent inside pool memory is addressed by [`Offset`], never by pointer, because
//! another process (an Active Data Object host) maps the same memory at another address.

pub mod identity;
pub mod pmem;
pub mod ssd;
mod volatile;
pub mod wal;

#[cfg(test)]
pub(crate) mod checked;

pub use volatile::VolatileMemory;

/// A byte position inside one pool's memory.
pub type Offset = u64;

/// One pool's memory region, as seen by a storage engine.
pub trait PoolMemory: Send {
    /// The whole region, for reading.
    fn bytes(&self) -> &[u8];

    /// Declares that `len` bytes at `offset` are about to change in the current transaction and
    /// returns them for writing.
    ///
    /// # Panics
    /// If the range lies outside the region: engines compute offsets from their own layout, so
    /// an out-of-range offset is a bug, not an input error.
    fn modify(&mut self, offset: Offset, len: usize) -> &mut [u8];

    /// Ends the current transaction: every range declared since the last commit becomes durable
    /// together, or (after a crash) not at all.
    fn commit(&mut self);

    /// [`commit`](PoolMemory::commit) of a transaction nobody is promised durable on its own:
    /// a piece of a staged value, which only its commit makes visible. A backing may make it
    /// durable with the next transaction that is promised, rather than within its commit
    /// interval. The default commits.
    fn commit_with_next(&mut self) {
        self.commit();
    }

    /// Says that the engine no longer needs the `len` bytes at `offset`: the current transaction
    /// freed them, and nothing reads them before a later transaction writes them anew. A backing
    /// may give the whole pages inside the range back to the operating system once the
    /// transaction commits (they read as zeros afterwards), so memory a growth left behind does
    /// not stay resident. The default keeps the bytes.
    fn release(&mut self, offset: Offset, len: u64) {
        let _ = (offset, len);
    }

    /// Says that the engine freed the `len` bytes at `offset`: nothing reads them before a later
    /// transaction writes them anew. Unlike [`release`](PoolMemory::release) the bytes stay; a
    /// backing may leave the whole pages inside out of its checkpoints from the first record
    /// after this call on, which attaches the hint to its transaction. The default ignores it.
    fn freed(&mut self, offset: Offset, len: u64) {
        let _ = (offset, len);
    }

    /// `len` bytes at `offset` that no pair owns (scratch memory), for writing without logging:
    /// nothing refers to them, so a crash or a restart may lose what they hold. `None` if this
    /// backing does not lend its memory so (then scratch memory is never handed out, and no
    /// piece of a staged value is read in place). A backing that lends its memory takes a range
    /// declared with [`modify`](PoolMemory::modify) after its bytes were written through this
    /// (a piece read in place, `Store::write_staged_in_place`): it logs what the range holds at
    /// the commit, not what it held when declared.
    fn scratch_mut(&mut self, offset: Offset, len: usize) -> Option<&mut [u8]> {
        let _ = (offset, len);
        None
    }

    /// Starts a group: the commits that follow, until [`end_group`](PoolMemory::end_group), make
    /// one transaction instead of one each, so several engine operations become durable together
    /// or (after a crash) not at all. False if this backing cannot group (then nothing changed).
    fn begin_group(&mut self) -> bool {
        false
    }

    /// Ends the group [`begin_group`](PoolMemory::begin_group) started, committing everything it
    /// declared as one transaction.
    fn end_group(&mut self) {}

    fn len(&self) -> usize {
        self.bytes().len()
    }

    fn is_empty(&self) -> bool {
        self.bytes().is_empty()
    }
}
