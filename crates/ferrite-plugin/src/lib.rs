//! The SDK for Ferrite's Active Data Object plugins.
//!
//! [`abi`] mirrors `include/ferrite_plugin.h`, the stable C ABI every plugin exports and the
//! `ferrite-ado` host loads; [`load`] opens a plugin library and checks its table.

pub mod abi;
pub mod load;

pub use load::{LoadError, LoadedPlugin};
