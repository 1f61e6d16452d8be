//! The Ferrite wire protocol.
//!
//! Every message travels in one frame: a fixed 16-byte [`Header`] followed by a body whose layout
//! depends on the header's opcode. All integers are little-endian. The full specification, with the
//! byte layout of every message, is `docs/protocol.md`; language-neutral test vectors live in
//! `testdata/protocol/` and every client's tests read them.
//!
//! This crate does no I/O. Decoding borrows from the caller's buffer so the server can parse a
//! request and store its value without an intermediate copy.

mod cluster;
mod credentials;
mod error;
mod frame;
mod limits;
mod message;
mod routing;
#[cfg(feature = "vectors")]
pub mod vectors;
mod wire;

pub use cluster::{
    shard_address, ClusterAdmin, ClusterGroup, ClusterMap, ClusterNode, ClusterStatus, FollowerProgress, NodeInfo,
    NotLeader, RaftRole,
};
pub use credentials::Credentials;
pub use error::{ErrorCode, ProtocolError};
pub use frame::{Header, HEADER_BYTES};
pub use limits::{
    Limits, CLUSTER_GROUPS_MAX, CLUSTER_ID_BYTES_MAX, CLUSTER_NODES_MAX, FIND_KEYS_MAX, FIND_REPLY_KEY_BYTES_MAX,
    FIND_SCAN_KEYS_MAX, FRAME_BODY_BYTES_MAX, FRAME_OVERHEAD_BYTES, KEY_BYTES_MAX, NODE_ADDRESS_BYTES_MAX,
    POOLS_PER_SHARD_MAX, POOL_NAME_BYTES_MAX, VALUE_INLINE_BYTES_MAX,
};
pub use message::{
    is_plugin_name, plugin_names, Attribute, BackupReport, CreatePoolFlags, DirectWriteHead, Durability,
    EndTransferFlags, FindKind, HelloReply, InvokeBuffer, InvokeFlags, Opcode, PoolDescription, PoolHandle, PoolInfo,
    PoolMemory, PoolSetting, PoolSettings, PutFlags, Request, Response, Statistic, BACKUP_DIR_BYTES_MAX, HELLO_MAGIC,
    PLUGINS_MAX, PLUGIN_NAME_BYTES_MAX, PROTOCOL_VERSION,
};
pub use routing::shard_for_pool;
