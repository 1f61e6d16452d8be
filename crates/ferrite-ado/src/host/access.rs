//! Write access to pool memory. The host maps the pool read-only; a call gets write access to
//! its own pages only (its copy of the target value, copies of keys it creates or opens for
//! writing, memory it allocates: whole pages of scratch memory that nothing else shares), and
//! only while it runs. A plugin's stray write anywhere else, during its call or through a
//! pointer or thread kept past it, faults and costs only the call in progress: no other key,
//! no table page, no other call's memory can change.

use std::sync::Arc;

use crate::message::Location;
use crate::shm::Mapping;

/// The pages of pool memory the call in progress may write.
#[derive(Debug)]
pub struct WriteAccess {
    pool: Arc<Mapping>,
    granted: Vec<Location>,
}

impl WriteAccess {
    pub fn new(pool: Arc<Mapping>) -> WriteAccess {
        WriteAccess { pool, granted: Vec::new() }
    }

    /// Lets the call write `range`: the whole pages from its start, which the shard gave the
    /// call alone. Refuses a range that does not start a page (the shard gives no other).
    pub fn grant(&mut self, range: Location) -> std::io::Result<()> {
        if range.len == 0 || self.granted.iter().any(|granted| granted.covers(&range)) {
            return Ok(());
        }
        self.pool.set_writable(range.offset, range.len, true)?;
        self.granted.push(range);
        Ok(())
    }

    /// Takes back every grant: pool memory is read-only again. Done before the call reports, so
    /// nothing of the plugin's (a thread, a kept pointer) can write after its call ended.
    pub fn revoke_all(&mut self) -> std::io::Result<()> {
        for range in self.granted.drain(..) {
            self.pool.set_writable(range.offset, range.len, false)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Granted pages take writes through the read-only mapping; revoked, they are read-only
    /// again (a write would fault, which a test cannot survive, so the protection is read back
    /// from the kernel's view of the mapping).
    #[test]
    fn grants_make_pages_writable_until_revoked() {
        let page = rustix::param::page_size();
        let fd = Mapping::create_memfd("pool", 4 * page).expect("memfd");
        let pool = Arc::new(Mapping::map_read_only(&fd).expect("map"));
        let mut access = WriteAccess::new(Arc::clone(&pool));
        let range = Location { offset: page as u64, len: 100 };
        access.grant(range).expect("grant");
        assert!(pool.write(page as u64, b"written"), "a granted page takes a write");
        assert_eq!(protection_of(&pool, page), "rw");
        assert_eq!(protection_of(&pool, 2 * page), "r-", "the next page stays read-only");
        access.revoke_all().expect("revoke");
        assert_eq!(protection_of(&pool, page), "r-");
        assert!(access.grant(Location { offset: 10, len: 4 }).is_err(), "a range must start a page");
    }

    /// The permissions `/proc/self/maps` shows for the page at `offset` of `pool`.
    fn protection_of(pool: &Mapping, offset: usize) -> String {
        let address = pool.as_ptr() as usize + offset;
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        maps.lines()
            .find_map(|line| {
                let (range, rest) = line.split_once(' ')?;
                let (start, end) = range.split_once('-')?;
                let (start, end) = (usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?);
                (start <= address && address < end).then(|| rest[..2].to_owned())
            })
            .expect("the page is mapped")
    }
}
