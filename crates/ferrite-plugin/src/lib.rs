//! The SDK for Ferrite's Active Data Object plugins.
//!
//! [`abi`] mirrors `include/ferrite_plugin.h`, the stable C ABI every plugin exports and the
//! `ferrite-ado` host loads; [`load`] opens a plugin library and checks its table.
//!
//! A Rust plugin implements [`Plugin`] and exports it with [`export_plugin!`]. Each invocation
//! arrives as a [`Call`], which lends the target value (declaring any range before lending it
//! mutably) and offers every host callback as a safe method. [`testing::TestHost`] runs plugins
//! in-process for unit tests, through the same C table the host uses: both hosts implement
//! [`host::PluginHost`] and hand plugins the table [`host::callbacks`] builds over it.

pub mod abi;
mod call;
mod context;
mod error;
pub mod export;
pub mod host;
pub mod load;
mod plugin;
pub mod testing;

pub use call::{Access, Call, KeyHandle, MemoryHandle, PairRef};
pub use context::{Context, LogLevel, PoolEvent};
pub use error::{ErrorCode, PluginError};
pub use load::{LoadError, LoadedPlugin};
pub use plugin::Plugin;
