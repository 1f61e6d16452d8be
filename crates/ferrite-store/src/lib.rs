//! Storage engines behind Ferrite pools.
//!
//! A pool holds one [`Store`]. The server talks to stores only through the trait, so engines can be
//! swapped per shard by configuration and the server holds no engine-specific code.

pub mod checksum;
mod glob;
pub mod hstore;
mod mapstore;
mod memory;
pub mod persistence;
pub mod progress;
mod secondary_index;
mod store;

pub use glob::glob_match;
pub use hstore::HStore;
pub use mapstore::MapStore;
pub use memory::MemoryUsage;
pub use secondary_index::{find_by_scan, FindBudget, FindPage, FindQuery, InvalidPattern, ScanPage, SecondaryIndex};
pub use store::{
    CreateStoreError, KeptAllocation, PoolSpec, PutMode, PutOutcome, RegionCopy, StagedValue, Store, StoreError,
    StoreKind, ValueAttributes, ValueLocation, WriteFootprint, ENTRY_OVERHEAD_BYTES, SCAN_KEYS_PER_WORK_MAX,
};
