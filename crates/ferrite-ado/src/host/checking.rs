//! Checking mode: a copy of pool memory taken before a call, compared after it, finds bytes the
//! call changed without declaring them. It costs a copy of the pool per call and is meant for
//! tests and plugin authors. It sees every change to pool memory during the call, so writes the
//! shard makes to other keys meanwhile show up too: run it where only the plugin writes.

use crate::message::Location;
use crate::shm::Mapping;

const PAGE_BYTES: usize = 4096;

/// Pool memory as it was before a call.
#[derive(Debug)]
pub struct Snapshot {
    bytes: Vec<u8>,
}

impl Snapshot {
    pub fn take(pool: &Mapping) -> Snapshot {
        let mut snapshot = Snapshot { bytes: Vec::new() };
        snapshot.retake(pool);
        snapshot
    }

    /// Copies pool memory anew into this snapshot's buffer: each call of a checking host
    /// reuses the last call's copy rather than allocating (and faulting in) a pool-sized one.
    pub fn retake(&mut self, pool: &Mapping) {
        self.bytes.resize(pool.len(), 0);
        let copied = pool.read(0, &mut self.bytes);
        debug_assert!(copied, "the whole mapping is in bounds");
    }

    /// Takes `range` anew: the shard just filled it for the call (a key created or opened for
    /// writing), so only the plugin's changes after this count.
    pub fn refresh(&mut self, pool: &Mapping, range: Location) {
        let (Ok(start), Ok(len)) = (usize::try_from(range.offset), usize::try_from(range.len)) else { return };
        if let Some(bytes) = start.checked_add(len).and_then(|end| self.bytes.get_mut(start..end)) {
            pool.read(range.offset, bytes);
        }
    }

    /// The ranges that changed since the snapshot and that no `declared` range covers.
    pub fn undeclared(&self, pool: &Mapping, declared: &[Location]) -> Vec<Location> {
        let mut ranges: Vec<Location> = Vec::new();
        let mut page = [0u8; PAGE_BYTES];
        for (index, before) in self.bytes.chunks(PAGE_BYTES).enumerate() {
            let start = index * PAGE_BYTES;
            let now = &mut page[..before.len()];
            if !pool.read(start as u64, now) || now == before {
                continue;
            }
            for (i, (old, new)) in before.iter().zip(now.iter()).enumerate() {
                let offset = (start + i) as u64;
                let covered = declared.iter().any(|d| d.covers(&Location { offset, len: 1 }));
                if old == new || covered {
                    continue;
                }
                match ranges.last_mut() {
                    Some(last) if last.end() == Some(offset) => last.len += 1,
                    _ => ranges.push(Location { offset, len: 1 }),
                }
            }
        }
        ranges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Changed bytes outside the declared ranges are reported as merged ranges.
    #[test]
    fn reports_only_undeclared_changes() {
        let fd = Mapping::create_memfd("pool", 3 * PAGE_BYTES).expect("memfd");
        let pool = Mapping::map(&fd).expect("map");
        let snapshot = Snapshot::take(&pool);
        assert!(pool.write(10, b"abcd"));
        assert!(pool.write(5000, b"xy"));
        let declared = [Location { offset: 10, len: 2 }];
        assert_eq!(
            snapshot.undeclared(&pool, &declared),
            vec![Location { offset: 12, len: 2 }, Location { offset: 5000, len: 2 }]
        );
    }

    /// A retaken snapshot is pool memory as it is now: the last call's changes no longer count,
    /// only the ones made after it.
    #[test]
    fn retake_forgets_earlier_changes() {
        let fd = Mapping::create_memfd("pool", 2 * PAGE_BYTES).expect("memfd");
        let pool = Mapping::map(&fd).expect("map");
        let mut snapshot = Snapshot::take(&pool);
        assert!(pool.write(10, b"ab"));
        snapshot.retake(&pool);
        assert!(snapshot.undeclared(&pool, &[]).is_empty());
        assert!(pool.write(4100, b"c"));
        assert_eq!(snapshot.undeclared(&pool, &[]), vec![Location { offset: 4100, len: 1 }]);
    }
}
