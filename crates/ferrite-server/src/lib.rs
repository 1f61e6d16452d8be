//! The Ferrite server: shards, sessions and pools.
//!
//! A server runs one or more shards. Each shard is a single-threaded event loop on its own thread
//! with its own listening port and its own pools; shards share nothing. See `DESIGN.md` and
//! `docs/configuration.md`.

mod ado;
mod auth;
pub mod backup;
mod backup_root;
mod buffered;
mod checkpointing;
pub mod cluster;
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
pub mod restore;
mod server;
mod session;
mod shard;
mod stats;
mod stream;
mod tls;
mod write_through;

pub use server::{check_files, BoundServer, ServerError};

/// Entry points for the fuzz targets in `fuzz/`: the parsers of bytes a peer controls that are
/// not public otherwise.
#[doc(hidden)]
pub mod fuzzing {
    /// The RESP commands (arguments) a connection parses from `input` arriving in two reads, the
    /// first of `first_read` bytes, from a client that has `authenticated` or not (then only
    /// small commands pass); an empty command marks a refusal, after which nothing is read.
    pub fn resp_commands(input: &[u8], first_read: usize, authenticated: bool) -> Vec<Vec<Vec<u8>>> {
        crate::resp::parse_in_two_reads(input, first_read, authenticated)
    }
}
