//! Hard limits of the protocol. A peer controls every length on the wire, so each one is checked
//! against these before anything is allocated for it.

/// Largest key, in bytes.
pub const KEY_BYTES_MAX: usize = 64 * 1024;

/// Largest value carried inline in a `put` or `get` frame (MCAS: "small (< 2 MiB)" values).
/// Larger values are the job of the direct operations.
pub const VALUE_INLINE_BYTES_MAX: usize = 2 * 1024 * 1024;

/// Largest pool name, in bytes of UTF-8.
pub const POOL_NAME_BYTES_MAX: usize = 255;

/// Most keys one `find` may ask for (and one reply may carry).
pub const FIND_KEYS_MAX: usize = 1024;

/// A `find` reply stops adding keys once their bytes reach this; with one more maximal key it
/// still fits a frame.
pub const FIND_REPLY_KEY_BYTES_MAX: usize = 1024 * 1024;

/// Most index entries one `find` examines before it returns what it has and where to resume, so a
/// pattern that matches rarely cannot stall the shard's event loop on a long scan.
pub const FIND_SCAN_KEYS_MAX: usize = 16 * 1024;

/// Most pools one shard may be configured to hold. Bounded so that a `list_pools` reply (one
/// entry per pool) always fits in one frame.
pub const POOLS_PER_SHARD_MAX: usize = 4096;

/// Most nodes a cluster may have: bounds a `cluster_map` (one entry per node) and every list of
/// members, so a map always fits one frame.
pub const CLUSTER_NODES_MAX: usize = 64;

/// Most groups a cluster map may carry: one per shard index, and a server runs at most this many
/// shards.
pub const CLUSTER_GROUPS_MAX: usize = 256;

/// Longest node address (`host:port`) a cluster message may carry: a DNS name (253 bytes), a
/// colon and a port (5 digits).
pub const NODE_ADDRESS_BYTES_MAX: usize = 253 + 1 + 5;

/// Longest cluster id, in bytes of UTF-8.
pub const CLUSTER_ID_BYTES_MAX: usize = 64;

/// Bytes of one `list_pools` entry with the longest name: name (2 + 255) plus objects, size,
/// used (3 x 8), open count (4) and the six memory figures (6 x 8).
const POOL_INFO_BYTES_MAX: usize = 2 + POOL_NAME_BYTES_MAX + 3 * 8 + 4 + 6 * 8;

/// Room in a frame body for everything that is not key or value bytes (pool handle, lengths).
pub const FRAME_OVERHEAD_BYTES: usize = 64;

/// Largest frame body a peer may send: one maximal key and one maximal inline value plus overhead.
pub const FRAME_BODY_BYTES_MAX: usize = KEY_BYTES_MAX + VALUE_INLINE_BYTES_MAX + FRAME_OVERHEAD_BYTES;

const _: () = assert!(KEY_BYTES_MAX + VALUE_INLINE_BYTES_MAX + FRAME_OVERHEAD_BYTES <= FRAME_BODY_BYTES_MAX);
const _: () = assert!(FRAME_BODY_BYTES_MAX <= u32::MAX as usize);
const _: () = assert!(POOL_NAME_BYTES_MAX <= u16::MAX as usize);
/// Largest `find` reply body: count, per-key lengths, the keys (the byte budget may be passed by
/// one key), then `has_next` and the resume key.
const FIND_REPLY_BYTES_MAX: usize =
    4 + FIND_KEYS_MAX * 4 + (FIND_REPLY_KEY_BYTES_MAX + KEY_BYTES_MAX) + 1 + 4 + KEY_BYTES_MAX;
const _: () = assert!(FIND_REPLY_BYTES_MAX <= FRAME_BODY_BYTES_MAX);
const _: () = assert!(2 + POOLS_PER_SHARD_MAX * POOL_INFO_BYTES_MAX <= FRAME_BODY_BYTES_MAX);

/// The limits one server enforces. A server may be configured below the protocol ceilings, never
/// above them; it announces its limits in the handshake so clients can reject oversized requests
/// before sending them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub key_bytes_max: u32,
    pub value_bytes_max: u32,
}

impl Limits {
    /// The protocol ceilings.
    pub const MAX: Limits =
        Limits { key_bytes_max: KEY_BYTES_MAX as u32, value_bytes_max: VALUE_INLINE_BYTES_MAX as u32 };

    /// Largest frame body these limits allow.
    pub fn frame_body_bytes_max(&self) -> usize {
        self.key_bytes_max as usize + self.value_bytes_max as usize + FRAME_OVERHEAD_BYTES
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::MAX
    }
}
