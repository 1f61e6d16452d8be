//! Ferrite's Active Data Object host process and the shard's link to it.
//!
//! Each pool with plugins gets one `ferrite-ado` process that maps the pool's memory, loads the
//! pool's plugin chain and runs invocations next to the data. The shard reaches it through
//! [`AdoLink`]: two shared-memory rings with an eventfd per direction ([`ring`], [`wake`]) and
//! messages defined once in [`message`]. The host maps pool memory read-only and writes only a
//! call's own pages (its copies and allocations) while the call runs; the shard applies what a
//! successful call declared, so a crashed, killed or failed call leaves the pool as it was.

pub mod args;
pub mod codec;
pub mod host;
pub mod link;
pub mod message;
pub mod ring;
pub mod shm;
pub mod status;
pub mod wake;

pub use link::{AdoConfig, AdoLink, FailReason, LinkCounters, LinkError, LinkEvent, SubmitError};
