//! Rust client for Ferrite, a network key-value store built on the MCAS architecture.
//!
//! A [`Session`] connects to any shard of a server, learns every shard's address and the
//! server's limits from the handshake, and opens one connection per shard on first use. Pools
//! are routed to the shard that owns their name, computed here in the client as MCAS does, so no
//! proxy sits in the data path.
//!
//! ```no_run
//! use ferrite_client::{PoolOptions, Session};
//!
//! # async fn example() -> ferrite_client::Result<()> {
//! let session = Session::connect("127.0.0.1:11911").await?;
//! let pool = session.create_pool("demo", PoolOptions::default()).await?;
//! pool.put(b"greeting", b"hello").await?;
//! assert_eq!(pool.get(b"greeting").await?, b"hello");
//!
//! // Requests from concurrent tasks share one connection and are pipelined: they go out in
//! // batches and their replies are matched by request id, in any order.
//! let (a, b) = tokio::join!(pool.get(b"greeting"), pool.count());
//! assert_eq!((a?, b?), (b"hello".to_vec(), 1));
//! pool.close().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Programs without an async runtime use [`blocking`], a thin layer over the same code.
//! [`plugins`] has typed helpers for invoking the shipped plugins (`counter`, `tabulator`).
//!
//! Against a cluster ([`Session::is_cluster`]) the session keeps the cluster map and sends each
//! pool's requests to the leader of its group, following `not_leader` answers where the leader
//! moves (at most [`REDIRECTS_MAX`] per request); the API is the same.
//!
//! Requests are checked against the server's announced limits before they are sent, so a key
//! or value that is too large fails locally with the error code the server would have given.
//! Server errors keep their stable wire code: see [`Error::code`].

mod address;
pub mod blocking;
mod cluster;
mod connection;
mod direct;
mod error;
mod frame_reader;
pub mod plugins;
mod pool;
mod reply;
mod session;
mod tls;
mod tls_problem;

#[cfg(test)]
mod cluster_tests;
#[cfg(test)]
mod fake_server;
#[cfg(test)]
mod tests;

pub use cluster::{LEADER_UNKNOWN_WAITS_MS, REDIRECTS_MAX};
pub use direct::{DirectMemory, DIRECT_THRESHOLD_BYTES, PIECES_IN_FLIGHT, PIECE_BYTES_MAX};
pub use error::{Error, Result};
pub use ferrite_proto::{
    Attribute, ClusterGroup, ClusterMap, ClusterNode, ClusterStatus, Durability, ErrorCode, FindKind, FollowerProgress,
    Limits, NodeInfo, NotLeader, PoolHandle, PoolMemory, PoolSetting, ProtocolError, PutFlags, RaftRole, FIND_KEYS_MAX,
};
pub use pool::{FindPage, InvokeOptions, InvokePutOptions, InvokeResponse, Pool, PoolAttributes, ValueAttributes};
pub use session::{ClientOptions, PoolInfo, PoolOptions, Session, ShardBackup, ShardStatistics, UserCredentials};
pub use tls::TlsOptions;
