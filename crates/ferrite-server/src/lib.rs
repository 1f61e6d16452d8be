//! The Ferrite server: shards, sessions and pools.
//!
//! A server runs one or more shards. Each shard is a single-threaded event loop on its own thread
//! with its own listening port and its own pools; shards share nothing. See `DESIGN.md` and
//! `docs/configuration.md`.

mod ado;
pub mod backup;
mod buffered;
mod checkpointing;
mod completion;
pub mod config;
mod connection;
mod data_dir;
mod durability;
mod handler;
mod low_load_poll;
mod metrics;
mod plugins;
mod pools;
mod resp;
mod server;
mod session;
mod shard;
mod stats;
mod stream;
mod tls;

pub use server::{BoundServer, ServerError};
