//! Shared memory: a memfd mapped `MAP_SHARED`. The shard and the host each map the same memfd
//! (the rings, the call area, the pool), so a byte one of them stores is the byte the other loads.
//!
//! A [`Mapping`] hands out raw pointers only: the other process may change any byte at any
//! moment, so no `&[u8]` over shared memory is ever formed. Readers copy bytes out first and
//! then validate the copy.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use rustix::fs::MemfdFlags;
use rustix::mm::{MapFlags, ProtFlags};

/// A `MAP_SHARED` mapping of a whole memfd (or any mappable file): read-write, or read-only
/// with writable windows.
#[derive(Debug)]
pub struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value until it is dropped; every access goes
// through raw pointers and atomics whose users document their own synchronisation.
#[allow(unsafe_code)]
unsafe impl Send for Mapping {}
// SAFETY: as above: `Mapping` itself has no interior state besides the address and length.
#[allow(unsafe_code)]
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Creates a memfd of `len` bytes (zero-filled) named `name`, closed on exec: the link
    /// chooses which descriptors a host inherits.
    pub fn create_memfd(name: &str, len: usize) -> std::io::Result<OwnedFd> {
        let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC)?;
        rustix::fs::ftruncate(&fd, len as u64)?;
        Ok(fd)
    }

    /// The length in bytes of the file behind `fd`.
    pub fn file_len(fd: BorrowedFd<'_>) -> std::io::Result<usize> {
        let stat = rustix::fs::fstat(fd)?;
        usize::try_from(stat.st_size).map_err(|_| std::io::Error::other("file length does not fit in memory"))
    }

    /// Maps the whole file behind `fd` shared and read-write.
    pub fn map(fd: impl AsFd) -> std::io::Result<Mapping> {
        Self::map_with(fd.as_fd(), ProtFlags::READ | ProtFlags::WRITE)
    }

    /// Maps the whole file behind `fd` shared and read-only: a plugin host's view of pool
    /// memory, of which only a call's own pages are made writable, and only while it runs
    /// ([`Mapping::set_writable`]).
    pub fn map_read_only(fd: impl AsFd) -> std::io::Result<Mapping> {
        Self::map_with(fd.as_fd(), ProtFlags::READ)
    }

    #[allow(unsafe_code)]
    fn map_with(fd: BorrowedFd<'_>, protection: ProtFlags) -> std::io::Result<Mapping> {
        let len = Self::file_len(fd)?;
        if len == 0 {
            return Err(std::io::Error::other("cannot map an empty file"));
        }
        // SAFETY: a fresh mapping at an address the kernel chooses aliases no Rust object; it is
        // unmapped only in `drop`.
        let base = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, protection, MapFlags::SHARED, fd, 0) }?;
        let base = NonNull::new(base.cast::<u8>()).ok_or_else(|| std::io::Error::other("mmap returned null"))?;
        Ok(Mapping { base, len })
    }

    /// Makes the `len` bytes at `offset` writable in this process, or read-only again: the whole
    /// pages they lie on, which must start at `offset` (a page boundary) so that no byte before
    /// the range is touched. The file must be open for writing; the range must lie inside the
    /// mapping.
    #[allow(unsafe_code)]
    pub fn set_writable(&self, offset: u64, len: u64, writable: bool) -> std::io::Result<()> {
        let page = rustix::param::page_size() as u64;
        if !offset.is_multiple_of(page) {
            return Err(std::io::Error::other(format!("{offset:#x} does not start a page")));
        }
        let pages = len.div_ceil(page) * page;
        if len == 0 || !self.contains(offset, pages) {
            return Err(std::io::Error::other(format!("{len} bytes at {offset:#x} are no pages of the mapping")));
        }
        let protection = if writable {
            rustix::mm::MprotectFlags::READ | rustix::mm::MprotectFlags::WRITE
        } else {
            rustix::mm::MprotectFlags::READ
        };
        // SAFETY: whole pages inside this mapping, which nothing in this process borrows as a
        // Rust reference (every access goes through raw pointers), so changing their
        // protection invalidates no reference.
        unsafe { rustix::mm::mprotect(self.as_ptr().add(offset as usize).cast(), pages as usize, protection) }?;
        Ok(())
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True if `offset..offset + len` lies inside the mapping.
    pub fn contains(&self, offset: u64, len: u64) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len as u64)
    }

    /// The 8-byte atomic at `offset`, if it lies inside the mapping and is aligned. Shared
    /// fields that both processes update are only ever touched through atomics.
    #[allow(unsafe_code)]
    pub fn atomic_u64(&self, offset: usize) -> Option<&AtomicU64> {
        if !offset.is_multiple_of(8) || !self.contains(offset as u64, 8) {
            return None;
        }
        // SAFETY: in bounds and aligned (the mapping is page-aligned), and the mapping outlives
        // the returned reference.
        Some(unsafe { &*self.as_ptr().add(offset).cast::<AtomicU64>() })
    }

    /// The 4-byte atomic at `offset`, if it lies inside the mapping and is aligned.
    #[allow(unsafe_code)]
    pub fn atomic_u32(&self, offset: usize) -> Option<&AtomicU32> {
        if !offset.is_multiple_of(4) || !self.contains(offset as u64, 4) {
            return None;
        }
        // SAFETY: as in `atomic_u64`.
        Some(unsafe { &*self.as_ptr().add(offset).cast::<AtomicU32>() })
    }

    /// Copies `out.len()` bytes from `offset`; false (and nothing copied) if out of bounds.
    #[allow(unsafe_code)]
    pub fn read(&self, offset: u64, out: &mut [u8]) -> bool {
        if !self.contains(offset, out.len() as u64) {
            return false;
        }
        // SAFETY: bounds checked above; `out` is private memory, so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr().add(offset as usize), out.as_mut_ptr(), out.len()) };
        true
    }

    /// Copies `len` bytes from `from` to `to` inside the mapping (the ranges may overlap); false
    /// (and nothing copied) if either lies out of bounds.
    #[allow(unsafe_code)]
    pub fn copy_within(&self, from: u64, to: u64, len: u64) -> bool {
        if !self.contains(from, len) || !self.contains(to, len) {
            return false;
        }
        // SAFETY: both ranges checked to lie in the mapping; `copy` allows overlap.
        unsafe { std::ptr::copy(self.as_ptr().add(from as usize), self.as_ptr().add(to as usize), len as usize) };
        true
    }

    /// Copies `bytes` to `offset`; false (and nothing written) if out of bounds.
    #[allow(unsafe_code)]
    pub fn write(&self, offset: u64, bytes: &[u8]) -> bool {
        if !self.contains(offset, bytes.len() as u64) {
            return false;
        }
        // SAFETY: bounds checked above; `bytes` is private memory, so the ranges cannot overlap.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.as_ptr().add(offset as usize), bytes.len()) };
        true
    }
}

impl Drop for Mapping {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: `base..base + len` is the mapping `map` made, and nothing refers to it after
        // the owner is dropped. A failure leaves a leaked mapping, which is harmless.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}
