//! A test backing that catches undeclared writes: it keeps a copy of the memory as of the last
//! commit, and at each commit checks that every byte that changed lies in a range declared with
//! `modify`. An engine that wrote outside its declared ranges would lose that write on recovery
//! from a write-ahead log, so this is the property every engine's tests run under.

use super::{Offset, PoolMemory};

#[derive(Debug)]
pub(crate) struct CheckedMemory {
    bytes: Vec<u8>,
    at_last_commit: Vec<u8>,
    declared: Vec<(usize, usize)>,
    pub(crate) commits: u64,
}

impl CheckedMemory {
    pub(crate) fn zeroed(len: usize) -> Self {
        CheckedMemory { bytes: vec![0; len], at_last_commit: vec![0; len], declared: Vec::new(), commits: 0 }
    }

    /// The memory as the last commit left it: what a recovery would reconstruct.
    pub(crate) fn committed_bytes(&self) -> &[u8] {
        &self.at_last_commit
    }
}

impl PoolMemory for CheckedMemory {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn modify(&mut self, offset: Offset, len: usize) -> &mut [u8] {
        let start = usize::try_from(offset).expect("offsets fit usize");
        self.declared.push((start, start + len));
        &mut self.bytes[start..start + len]
    }

    fn commit(&mut self) {
        // Whole chunks compare fast; only a chunk that changed is walked byte by byte.
        const CHUNK_BYTES: usize = 4096;
        let chunks = self.bytes.chunks(CHUNK_BYTES).zip(self.at_last_commit.chunks(CHUNK_BYTES));
        for (chunk_index, (now, before)) in chunks.enumerate() {
            if now == before {
                continue;
            }
            for (offset, (now, before)) in now.iter().zip(before).enumerate() {
                let index = chunk_index * CHUNK_BYTES + offset;
                if now != before {
                    assert!(
                        self.declared.iter().any(|(start, end)| (*start..*end).contains(&index)),
                        "byte {index} changed without being declared with modify"
                    );
                }
            }
        }
        self.at_last_commit.copy_from_slice(&self.bytes);
        self.declared.clear();
        self.commits += 1;
    }
}
