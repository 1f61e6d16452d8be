//! Ferrite's Active Data Object host process and the shard's link to it.
//!
//! Each pool with plugins gets one `ferrite-ado` process that maps the pool's memory, loads the
//! pool's plugin chain and runs invocations next to the data. The shard reaches it through
//! [`AdoLink`]: two shared-memory rings with an eventfd per direction ([`ring`], [`wake`]),
//! messages defined once in [`message`], and the call area ([`call_area`]) in which the host
//! keeps the before-image of every range the call in progress declared, so that a crashed,
//! killed or failed call leaves the pool as it was.

pub mod args;
pub mod call_area;
pub mod codec;
pub mod host;
pub mod link;
pub mod message;
pub mod ring;
pub mod shm;
pub mod wake;

pub use link::{AdoConfig, AdoLink, FailReason, LinkCounters, LinkError, LinkEvent, SubmitError};
