//! Storage engines behind Ferrite pools.
//!
//! A pool holds one [`Store`]. The server talks to stores only through the trait, so engines can be
//! swapped per shard by configuration and the server holds no engine-specific code.

mod mapstore;
mod store;

pub use mapstore::MapStore;
pub use store::{PoolSpec, PutMode, Store, StoreError, StoreKind, ValueAttributes, ENTRY_OVERHEAD_BYTES};
