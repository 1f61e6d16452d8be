//! Pool memory for the `ssd` backing: an anonymous shared-memory file (memfd) mapped into the
//! server. Anonymous, because the write-ahead log and the checkpoints are the durable copy and the
//! kernel must never write these pages to a data file behind Ferrite's back; a file, because an
//! Active Data Object host process maps the same pages by receiving the descriptor.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use memmap2::MmapMut;

use crate::persistence::{Offset, PoolMemory};

/// One pool's memory: a memfd of a fixed size, mapped read-write. Pages cost physical memory only
/// once written: a fresh region reads as zeros.
#[derive(Debug)]
pub struct SharedRegion {
    file: Arc<File>,
    map: MmapMut,
}

impl SharedRegion {
    /// A zeroed region of `len` bytes; `name` (at most 249 bytes, Linux's limit) shows in
    /// `/proc/<pid>/maps` to tell pools apart.
    pub fn zeroed(name: &str, len: u64) -> io::Result<SharedRegion> {
        let fd = rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)?;
        let file = File::from(fd);
        file.set_len(len)?;
        let map = map_whole(&file)?;
        Ok(SharedRegion { file: Arc::new(file), map })
    }

    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }

    /// The memfd, for copying pages out of the region with positional reads (checkpoints do, on
    /// the shard's thread, so no write races the copy) or for handing it to another process.
    pub fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// Gives the whole pages inside `len` bytes at `offset` back to the system: they stop costing
    /// memory and read as zeros. The partial pages at either end are left as they are, since
    /// other data may share them.
    pub fn release(&mut self, offset: u64, len: u64) -> io::Result<()> {
        let page = rustix::param::page_size() as u64;
        let start = offset.next_multiple_of(page);
        let end = offset.saturating_add(len) / page * page;
        if end <= start {
            return Ok(());
        }
        let mode = rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
        rustix::fs::fallocate(&*self.file, mode, start, end - start)?;
        Ok(())
    }

    /// Bytes of memory the region's pages hold now (pages never written, or released, hold none).
    pub fn resident_bytes(&self) -> io::Result<u64> {
        use std::os::unix::fs::MetadataExt;
        Ok(self.file.metadata()?.blocks() * 512)
    }

    /// Copies `len` bytes at `offset` into `out` through the file, not the mapping.
    pub fn read_at(file: &File, offset: u64, out: &mut [u8]) -> io::Result<()> {
        file.read_exact_at(out, offset)
    }
}

/// A region on its own is unlogged memory: what `ferrite check` opens a recovered pool over, and
/// nothing it does writes.
impl PoolMemory for SharedRegion {
    fn bytes(&self) -> &[u8] {
        &self.map
    }

    fn modify(&mut self, offset: Offset, len: usize) -> &mut [u8] {
        let start = usize::try_from(offset).expect("pool memory offsets fit the address space");
        &mut self.map[start..start + len]
    }

    fn commit(&mut self) {}
}

/// Maps the whole of `file` read-write and shared.
#[allow(unsafe_code)]
fn map_whole(file: &File) -> io::Result<MmapMut> {
    // SAFETY: the mapping's memory is valid for as long as the returned `MmapMut` lives (it owns
    // the mapping). The file is a memfd this process just created, whose size is fixed before
    // mapping and never changed afterwards, so no access can fall beyond its end (SIGBUS). Other
    // mappings of it (an ADO host's) write only through the same transaction discipline; within
    // this process the region is reached only through the `SharedRegion` that owns the map.
    unsafe { MmapMut::map_mut(file) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_starts_zeroed_and_its_file_sees_the_writes() {
        let mut region = SharedRegion::zeroed("test-pool", 1 << 20).expect("memfd");
        assert_eq!(region.bytes().len(), 1 << 20);
        assert!(region.bytes().iter().all(|b| *b == 0));
        region.bytes_mut()[4096..4101].copy_from_slice(b"hello");
        let mut out = [0u8; 5];
        SharedRegion::read_at(region.file(), 4096, &mut out).expect("read through the file");
        assert_eq!(&out, b"hello");
    }

    #[test]
    fn releasing_a_range_frees_its_whole_pages_and_keeps_the_partial_ones() {
        let page = rustix::param::page_size();
        let mut region = SharedRegion::zeroed("test-pool", 16 * page as u64).expect("memfd");
        region.bytes_mut().fill(7);
        let before = region.resident_bytes().expect("resident bytes");
        assert_eq!(before, 16 * page as u64);
        // From the middle of page 2 to the middle of page 9: pages 3 to 8 go, 2 and 9 stay whole.
        let (start, end) = (2 * page + page / 2, 9 * page + page / 2);
        region.release(start as u64, (end - start) as u64).expect("release");
        assert_eq!(region.resident_bytes().expect("resident bytes"), before - 6 * page as u64);
        let bytes = region.bytes();
        assert!(bytes[..3 * page].iter().all(|b| *b == 7), "the partial page before keeps its bytes");
        assert!(bytes[3 * page..9 * page].iter().all(|b| *b == 0), "released pages read as zeros");
        assert!(bytes[9 * page..].iter().all(|b| *b == 7), "the partial page after keeps its bytes");
        region.release(0, page as u64 - 1).expect("nothing whole to release");
        assert_eq!(region.bytes()[0], 7);
    }
}
