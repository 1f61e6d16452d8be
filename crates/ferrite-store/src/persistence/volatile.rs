//! The `memory` backing: pool memory is ordinary process memory and a commit persists nothing.

use super::{Offset, PoolMemory};

/// Pool memory that lives only as long as the process.
#[derive(Debug)]
pub struct VolatileMemory {
    bytes: Vec<u8>,
}

impl VolatileMemory {
    /// A zeroed region of `len` bytes. The allocation is zeroed lazily by the operating system,
    /// so a large, mostly empty pool costs little resident memory.
    pub fn zeroed(len: usize) -> Self {
        VolatileMemory { bytes: vec![0; len] }
    }

    /// A region holding `bytes`, as when an engine is reopened over existing memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        VolatileMemory { bytes }
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl PoolMemory for VolatileMemory {
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn modify(&mut self, offset: Offset, len: usize) -> &mut [u8] {
        let start = usize::try_from(offset).expect("pool memory offsets fit the address space");
        &mut self.bytes[start..start + len]
    }

    fn commit(&mut self) {}
}
