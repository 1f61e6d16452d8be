//! Requests and responses, and their body layouts. `docs/protocol.md` is the prose twin of this file.

use std::fmt;

use bytes::{BufMut, BytesMut};

use crate::cluster::{
    decode_map, decode_node_info, decode_status, encode_map, encode_node_info, encode_status, AdminKind, ClusterAdmin,
    ClusterMap, ClusterStatus, NodeInfo, NotLeader,
};
use crate::error::{ErrorCode, ProtocolError};
use crate::frame::Header;
use crate::limits::{Limits, FIND_KEYS_MAX, KEY_BYTES_MAX, POOL_NAME_BYTES_MAX, VALUE_INLINE_BYTES_MAX};
use crate::wire::{put_bytes16, put_len32, put_str16, write_frame, Reader};

/// Version of the protocol this crate speaks, exchanged in the handshake.
pub const PROTOCOL_VERSION: u16 = 3;

/// First four bytes of every hello body: `FRRT`. Lets a server tell a Ferrite client from a stray
/// connection (a Redis client on the wrong port, a port scanner) and close it at once.
pub const HELLO_MAGIC: [u8; 4] = *b"FRRT";

/// Bit that turns a request opcode into the opcode of its successful response.
const RESPONSE_BIT: u16 = 0x8000;

/// Message types. A successful response carries `request opcode | 0x8000`; any failure is
/// [`Opcode::Error`], except a refusal by a node that does not lead the shard's group
/// ([`Opcode::NotLeader`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Opcode {
    Hello = 0x0001,
    CreatePool = 0x0010,
    OpenPool = 0x0011,
    ClosePool = 0x0012,
    DeletePool = 0x0013,
    ListPools = 0x0014,
    ConfigurePool = 0x0015,
    Put = 0x0020,
    Get = 0x0021,
    Erase = 0x0022,
    Count = 0x0023,
    GetAttribute = 0x0024,
    Find = 0x0025,
    PutDirect = 0x0026,
    DirectWrite = 0x0027,
    GetDirect = 0x0028,
    DirectRead = 0x0029,
    EndTransfer = 0x002A,
    PutOffset = 0x002B,
    GetStatistics = 0x0030,
    InvokeAdo = 0x0040,
    InvokePutAdo = 0x0041,
    Backup = 0x0050,
    NodeInfo = 0x0060,
    ClusterMap = 0x0061,
    ClusterInit = 0x0062,
    ClusterAddNode = 0x0063,
    ClusterRemoveNode = 0x0064,
    ClusterTransferLeader = 0x0065,
    ClusterStatus = 0x0066,
    /// The failure that names a group's leader (see [`NotLeader`]).
    NotLeader = 0xFFFE,
    Error = 0xFFFF,
}

impl Opcode {
    /// Every request opcode.
    pub const REQUESTS: [Opcode; 30] = [
        Opcode::Hello,
        Opcode::CreatePool,
        Opcode::OpenPool,
        Opcode::ClosePool,
        Opcode::DeletePool,
        Opcode::ListPools,
        Opcode::ConfigurePool,
        Opcode::Put,
        Opcode::Get,
        Opcode::Erase,
        Opcode::Count,
        Opcode::GetAttribute,
        Opcode::Find,
        Opcode::PutDirect,
        Opcode::DirectWrite,
        Opcode::GetDirect,
        Opcode::DirectRead,
        Opcode::EndTransfer,
        Opcode::PutOffset,
        Opcode::GetStatistics,
        Opcode::InvokeAdo,
        Opcode::InvokePutAdo,
        Opcode::Backup,
        Opcode::NodeInfo,
        Opcode::ClusterMap,
        Opcode::ClusterInit,
        Opcode::ClusterAddNode,
        Opcode::ClusterRemoveNode,
        Opcode::ClusterTransferLeader,
        Opcode::ClusterStatus,
    ];

    pub fn from_request(raw: u16) -> Option<Opcode> {
        Opcode::REQUESTS.iter().copied().find(|op| *op as u16 == raw)
    }

    pub fn response_code(self) -> u16 {
        match self {
            Opcode::Error | Opcode::NotLeader => self as u16,
            other => other as u16 | RESPONSE_BIT,
        }
    }
}

/// A pool opened in a session. Opaque to clients; valid only on the connection that opened it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolHandle(pub u64);

/// When a write is acknowledged (see `docs/durability.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Durability {
    /// After the shard's write-ahead log record holding the write is on stable storage.
    Sync,
    /// As soon as the write is applied in memory; it reaches stable storage within the server's
    /// commit interval.
    Async,
}

impl Durability {
    pub fn name(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = String;

    fn from_str(text: &str) -> Result<Durability, String> {
        match text {
            "sync" => Ok(Durability::Sync),
            "async" => Ok(Durability::Async),
            other => Err(format!("unknown durability '{other}' (expected sync or async)")),
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Flags of `put`, carried in the header's flag field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PutFlags(u16);

impl PutFlags {
    pub const NONE: PutFlags = PutFlags(0);
    /// Fail with `key_exists` if the key is present (MCAS "don't stomp").
    pub const CREATE_ONLY: PutFlags = PutFlags(0x0001);
    /// Fail with `key_not_found` if the key is absent.
    pub const UPDATE_ONLY: PutFlags = PutFlags(0x0002);
    /// Acknowledge only once durable, whatever the pool's default.
    pub const SYNC: PutFlags = PutFlags(0x0004);
    /// Acknowledge once applied, whatever the pool's default.
    pub const ASYNC: PutFlags = PutFlags(0x0008);
    const KNOWN: u16 = 0x000F;

    pub fn bits(self) -> u16 {
        self.0
    }

    pub fn from_bits(bits: u16) -> Result<PutFlags, ProtocolError> {
        if bits & !PutFlags::KNOWN != 0 {
            return Err(ProtocolError::UnknownFlags { message: "put", flags: bits });
        }
        let both = |a: PutFlags, b: PutFlags| bits & (a.0 | b.0) == a.0 | b.0;
        if both(PutFlags::CREATE_ONLY, PutFlags::UPDATE_ONLY) {
            return Err(ProtocolError::UnknownFlags { message: "put (create-only with update-only)", flags: bits });
        }
        if both(PutFlags::SYNC, PutFlags::ASYNC) {
            return Err(ProtocolError::UnknownFlags { message: "put (sync with async)", flags: bits });
        }
        Ok(PutFlags(bits))
    }

    pub fn contains(self, other: PutFlags) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    /// The durability the put asks for; `None` means the pool's default.
    pub fn durability(self) -> Option<Durability> {
        if self.contains(PutFlags::SYNC) {
            Some(Durability::Sync)
        } else if self.contains(PutFlags::ASYNC) {
            Some(Durability::Async)
        } else {
            None
        }
    }

    /// These flags asking for `durability` instead of whatever they asked before.
    pub fn with_durability(self, durability: Durability) -> PutFlags {
        let bits = self.0 & !(PutFlags::SYNC.0 | PutFlags::ASYNC.0);
        match durability {
            Durability::Sync => PutFlags(bits | PutFlags::SYNC.0),
            Durability::Async => PutFlags(bits | PutFlags::ASYNC.0),
        }
    }
}

/// Flags of `end_transfer`, carried in the header's flag field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EndTransferFlags(u16);

impl EndTransferFlags {
    /// Commit a direct put (its value replaces the key's), or end a direct read.
    pub const COMMIT: EndTransferFlags = EndTransferFlags(0);
    /// Drop a direct put: the key keeps its value and the staged bytes are freed.
    pub const ABORT: EndTransferFlags = EndTransferFlags(0x0001);
    const KNOWN: u16 = 0x0001;

    pub fn bits(self) -> u16 {
        self.0
    }

    pub fn from_bits(bits: u16) -> Result<EndTransferFlags, ProtocolError> {
        if bits & !EndTransferFlags::KNOWN != 0 {
            return Err(ProtocolError::UnknownFlags { message: "end_transfer", flags: bits });
        }
        Ok(EndTransferFlags(bits))
    }

    pub fn aborts(self) -> bool {
        self.0 & EndTransferFlags::ABORT.0 != 0
    }
}

/// Flags of `create_pool`, carried in the header's flag field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CreatePoolFlags(u16);

impl CreatePoolFlags {
    pub const NONE: CreatePoolFlags = CreatePoolFlags(0);
    /// Fail with `pool_exists` rather than open an existing pool.
    pub const CREATE_ONLY: CreatePoolFlags = CreatePoolFlags(0x0001);
    /// Keep a secondary index: an ordered index over the pool's keys that `find` searches.
    pub const INDEXED: CreatePoolFlags = CreatePoolFlags(0x0002);
    /// Writes that do not choose a durability are `async` (without this flag: `sync`).
    pub const ASYNC: CreatePoolFlags = CreatePoolFlags(0x0004);
    /// The body ends with the pool's plugin chain. Set by [`Request::encode`] when the chain
    /// is not empty; callers need not set it.
    pub const PLUGINS: CreatePoolFlags = CreatePoolFlags(0x0008);
    const KNOWN: u16 = 0x000F;

    pub fn bits(self) -> u16 {
        self.0
    }

    pub fn from_bits(bits: u16) -> Result<CreatePoolFlags, ProtocolError> {
        if bits & !CreatePoolFlags::KNOWN != 0 {
            return Err(ProtocolError::UnknownFlags { message: "create_pool", flags: bits });
        }
        Ok(CreatePoolFlags(bits))
    }

    pub fn contains(self, other: CreatePoolFlags) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    /// The pool's default durability.
    pub fn durability(self) -> Durability {
        if self.contains(CreatePoolFlags::ASYNC) {
            Durability::Async
        } else {
            Durability::Sync
        }
    }

    pub fn union(self, other: CreatePoolFlags) -> CreatePoolFlags {
        CreatePoolFlags(self.0 | other.0)
    }
}

/// Flags of `invoke_ado` and `invoke_put_ado` (MCAS Table 3), carried in the header's flag field.
/// [`InvokeFlags::from_bits`] refuses what no invocation means; [`Request::check`] also refuses
/// what the one message carrying them does not mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InvokeFlags(u16);

impl InvokeFlags {
    pub const NONE: InvokeFlags = InvokeFlags(0);
    /// `invoke_ado` only: create the key with a zeroed value of `value_size` bytes if it is absent.
    pub const CREATE_ON_DEMAND: InvokeFlags = InvokeFlags(0x0001);
    /// The plugin gets a read lock on the value and may not write to it.
    pub const READ_ONLY: InvokeFlags = InvokeFlags(0x0002);
    /// `invoke_put_ado` only: keep an existing value; the plugin runs on it.
    pub const NO_OVERWRITE: InvokeFlags = InvokeFlags(0x0004);
    /// A value created for the call is zeroed. Ferrite always zeroes new values; the flag exists
    /// so MCAS callers can send what they always sent.
    pub const ZERO_NEW_VALUE: InvokeFlags = InvokeFlags(0x0008);
    /// `invoke_put_ado` only: the value goes into unattached pool memory, whose location the
    /// plugin is given, instead of becoming the key's value.
    pub const DETACHED: InvokeFlags = InvokeFlags(0x0010);
    /// The server answers as soon as it accepts the invocation, with no buffers; the plugin's
    /// answer is dropped.
    pub const FIRE_AND_FORGET: InvokeFlags = InvokeFlags(0x0020);
    const KNOWN: u16 = 0x003F;

    pub fn bits(self) -> u16 {
        self.0
    }

    /// Flags from the wire. Unknown bits, and a read lock beside a flag that writes the value,
    /// are refused for either message.
    pub fn from_bits(bits: u16) -> Result<InvokeFlags, ProtocolError> {
        if bits & !InvokeFlags::KNOWN != 0 {
            return Err(ProtocolError::UnknownFlags { message: "an invocation", flags: bits });
        }
        let flags = InvokeFlags(bits);
        if flags.contains(InvokeFlags::READ_ONLY) && flags.contains(InvokeFlags::NO_OVERWRITE) {
            return Err(ProtocolError::UnknownFlags {
                message: "an invocation (read-only with no-overwrite)",
                flags: bits,
            });
        }
        if flags.contains(InvokeFlags::READ_ONLY) && flags.contains(InvokeFlags::DETACHED) {
            return Err(ProtocolError::UnknownFlags {
                message: "an invocation (read-only with detached)",
                flags: bits,
            });
        }
        Ok(flags)
    }

    pub fn contains(self, other: InvokeFlags) -> bool {
        self.0 & other.0 == other.0 && other.0 != 0
    }

    pub fn union(self, other: InvokeFlags) -> InvokeFlags {
        InvokeFlags(self.0 | other.0)
    }

    /// Refuses the flags that only `invoke_put_ado` defines: there is no value to keep or detach.
    fn check_invoke_ado(self) -> Result<InvokeFlags, ProtocolError> {
        let flags = InvokeFlags::from_bits(self.0)?;
        if flags.0 & (InvokeFlags::NO_OVERWRITE.0 | InvokeFlags::DETACHED.0) != 0 {
            return Err(ProtocolError::UnknownFlags {
                message: "invoke_ado (no-overwrite and detached need invoke_put_ado)",
                flags: self.0,
            });
        }
        Ok(flags)
    }

    /// Refuses create-on-demand on `invoke_put_ado`: the put creates the key.
    fn check_invoke_put_ado(self) -> Result<InvokeFlags, ProtocolError> {
        let flags = InvokeFlags::from_bits(self.0)?;
        if flags.contains(InvokeFlags::CREATE_ON_DEMAND) {
            return Err(ProtocolError::UnknownFlags {
                message: "invoke_put_ado (create-on-demand: the put creates the key)",
                flags: self.0,
            });
        }
        Ok(flags)
    }
}

/// How `find` matches keys against its pattern (MCAS `find`: exact, prefix, regular expression;
/// plus Redis-style globs for the RESP `SCAN MATCH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum FindKind {
    /// Keys equal to the pattern.
    Exact = 1,
    /// Keys starting with the pattern.
    Prefix = 2,
    /// Keys matched anywhere by the pattern, a regular expression (Rust `regex` syntax, over bytes).
    Regex = 3,
    /// Keys matched whole by the pattern, a Redis-style glob (`*`, `?`, `[a-z]`, `[^x]`, `\`).
    Glob = 4,
    /// The first key after the pattern in key order (MCAS's `next:` expression); the pattern
    /// need not be a key of the pool. Needs a secondary index.
    Next = 5,
}

impl FindKind {
    pub const ALL: [FindKind; 5] = [FindKind::Exact, FindKind::Prefix, FindKind::Regex, FindKind::Glob, FindKind::Next];

    pub fn from_u16(raw: u16) -> Result<FindKind, ProtocolError> {
        FindKind::ALL.iter().copied().find(|k| *k as u16 == raw).ok_or(ProtocolError::UnknownFindKind(raw))
    }

    pub fn name(self) -> &'static str {
        match self {
            FindKind::Exact => "exact",
            FindKind::Prefix => "prefix",
            FindKind::Regex => "regex",
            FindKind::Glob => "glob",
            FindKind::Next => "next",
        }
    }
}

/// What `configure_pool` changes (MCAS `configure_pool`), carried in the header's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum PoolSetting {
    /// Build a secondary index over the pool's keys (in bounded steps; answered once built).
    AddIndex = 0x0001,
    /// Drop the pool's secondary index.
    RemoveIndex = 0x0002,
}

impl PoolSetting {
    pub fn from_flags(flags: u16) -> Result<PoolSetting, ProtocolError> {
        match flags {
            0x0001 => Ok(PoolSetting::AddIndex),
            0x0002 => Ok(PoolSetting::RemoveIndex),
            _ => Err(ProtocolError::UnknownFlags { message: "configure_pool (exactly one setting)", flags }),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PoolSetting::AddIndex => "add_index",
            PoolSetting::RemoveIndex => "remove_index",
        }
    }
}

/// What `get_attribute` asks for. Key attributes need a key; pool attributes ignore it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Attribute {
    /// Length of the key's value in bytes.
    ValueLength = 1,
    /// Number of key-value pairs in the pool.
    ObjectCount = 2,
    /// CRC-32 (IEEE 802.3, as zlib's `crc32`) of the key's value.
    Crc32 = 3,
    /// When the key's value was last written, in nanoseconds since the Unix epoch.
    WriteTime = 4,
    /// The pool's capacity in bytes, as given at creation.
    PoolSize = 5,
    /// Bytes of the pool's capacity in use.
    PoolUsed = 6,
}

impl Attribute {
    pub const ALL: [Attribute; 6] = [
        Attribute::ValueLength,
        Attribute::ObjectCount,
        Attribute::Crc32,
        Attribute::WriteTime,
        Attribute::PoolSize,
        Attribute::PoolUsed,
    ];

    pub fn from_u16(raw: u16) -> Result<Attribute, ProtocolError> {
        Attribute::ALL.iter().copied().find(|a| *a as u16 == raw).ok_or(ProtocolError::UnknownAttribute(raw))
    }

    /// Whether the attribute describes one key (and so needs one) rather than the whole pool.
    pub fn needs_key(self) -> bool {
        matches!(self, Attribute::ValueLength | Attribute::Crc32 | Attribute::WriteTime)
    }

    pub fn name(self) -> &'static str {
        match self {
            Attribute::ValueLength => "value_length",
            Attribute::ObjectCount => "object_count",
            Attribute::Crc32 => "crc32",
            Attribute::WriteTime => "write_time",
            Attribute::PoolSize => "pool_size",
            Attribute::PoolUsed => "pool_used",
        }
    }
}

/// A request, borrowing its strings and bytes from the frame it was decoded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Hello {
        version: u16,
        client_name: &'a str,
        auth: &'a [u8],
    },
    CreatePool {
        name: &'a str,
        size_bytes: u64,
        expected_objects: u64,
        flags: CreatePoolFlags,
        /// The pool's chain of Active Data Object plugins: names separated by commas, in the
        /// order they run (see [`plugin_names`]); empty for none.
        plugins: &'a str,
    },
    OpenPool {
        name: &'a str,
    },
    ClosePool {
        pool: PoolHandle,
    },
    DeletePool {
        name: &'a str,
    },
    /// Changes a setting of an existing pool (MCAS `configure_pool`).
    ConfigurePool {
        name: &'a str,
        setting: PoolSetting,
    },
    ListPools,
    /// `list_pools` with its describe flag: every pool of the shard (`name` `None`) or the one
    /// named, each with its settings.
    DescribePools {
        name: Option<&'a str>,
    },
    Put {
        pool: PoolHandle,
        flags: PutFlags,
        key: &'a [u8],
        value: &'a [u8],
    },
    Get {
        pool: PoolHandle,
        key: &'a [u8],
    },
    Erase {
        pool: PoolHandle,
        key: &'a [u8],
    },
    Count {
        pool: PoolHandle,
    },
    GetAttribute {
        pool: PoolHandle,
        attribute: Attribute,
        key: &'a [u8],
    },
    /// Up to `limit` keys of the pool's secondary index that match, in key order, starting after
    /// the key `after` (from the first key if `None`).
    Find {
        pool: PoolHandle,
        kind: FindKind,
        pattern: &'a [u8],
        after: Option<&'a [u8]>,
        limit: u32,
    },
    /// Opens direct transfer `transfer` of this session: a value of `length` bytes for `key`,
    /// sent in [`Request::DirectWrite`] pieces and made the key's value at once by
    /// [`Request::EndTransfer`] (MCAS `put_direct`). `flags` are a put's.
    PutDirect {
        pool: PoolHandle,
        flags: PutFlags,
        transfer: u64,
        length: u64,
        key: &'a [u8],
    },
    /// The next piece of direct put `transfer`: `bytes` land at `offset` of the staged value.
    /// Pieces come in order, each at most the inline value limit.
    DirectWrite {
        transfer: u64,
        offset: u64,
        bytes: &'a [u8],
    },
    /// Opens direct transfer `transfer` of this session for reading `key`'s value in
    /// [`Request::DirectRead`] pieces (MCAS `get_direct`). Writers of the key wait until the
    /// transfer ends, so every piece comes from the same value.
    GetDirect {
        pool: PoolHandle,
        transfer: u64,
        key: &'a [u8],
    },
    /// `length` bytes (at most the inline value limit) at `offset` of the value that direct read
    /// `transfer` holds; fewer at the value's end.
    DirectRead {
        transfer: u64,
        offset: u64,
        length: u32,
    },
    /// Ends direct transfer `transfer`: commits (or with [`EndTransferFlags::ABORT`], drops) a
    /// direct put, or releases a direct read.
    EndTransfer {
        transfer: u64,
        flags: EndTransferFlags,
    },
    /// Writes `bytes` at `offset` inside `key`'s existing value, atomically and durably like a
    /// put (MCAS `put_direct_offset`); the value keeps its length, so the range must lie inside
    /// it. `flags` may carry a durability, nothing else.
    PutOffset {
        pool: PoolHandle,
        flags: PutFlags,
        offset: u64,
        key: &'a [u8],
        bytes: &'a [u8],
    },
    GetStatistics,
    /// Runs the pool's plugin chain on `key`'s value (MCAS `invoke_ado`). An empty key invokes
    /// the chain on the pool itself. `value_size` is the size of the zeroed value that
    /// [`InvokeFlags::CREATE_ON_DEMAND`] creates for an absent key, and 0 without that flag.
    InvokeAdo {
        pool: PoolHandle,
        flags: InvokeFlags,
        key: &'a [u8],
        payload: &'a [u8],
        value_size: u64,
    },
    /// Stores `value` under `key` (or, with [`InvokeFlags::DETACHED`], in unattached pool
    /// memory), then runs the pool's plugin chain on it (MCAS `invoke_put_ado`).
    InvokePutAdo {
        pool: PoolHandle,
        flags: InvokeFlags,
        key: &'a [u8],
        value: &'a [u8],
        payload: &'a [u8],
    },
    /// Copies the shard's durable state (its last checkpoint and its log up to the last record
    /// applied) into `dir/shard-N` on the server's file system while it keeps serving, and
    /// answers [`Response::BackedUp`] once the copy is durable. `dir` is an absolute path.
    Backup {
        dir: &'a str,
    },
    /// Which node answered and the cluster it belongs to; any shard of any node answers.
    NodeInfo,
    /// Every node and each group's leader and members; any shard of any node answers.
    ClusterMap,
    /// The administration of a group (cluster mode; `admin` on every pool).
    ClusterAdmin(ClusterAdmin),
}

/// Most plugins in a pool's chain.
pub const PLUGINS_MAX: usize = 8;
/// Longest plugin name, in bytes.
pub const PLUGIN_NAME_BYTES_MAX: usize = 64;

/// The names of a plugin chain as `create_pool` carries it (comma-separated).
pub fn plugin_names(chain: &str) -> impl Iterator<Item = &str> {
    chain.split(',').filter(|name| !name.is_empty())
}

/// Whether `name` can name a plugin: 1 to [`PLUGIN_NAME_BYTES_MAX`] bytes of ASCII letters,
/// digits, `-` and `_` (so a chain prints as a comma-separated list and a name is safe in a file
/// name).
pub fn is_plugin_name(name: &str) -> bool {
    (1..=PLUGIN_NAME_BYTES_MAX).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A chain is at most [`PLUGINS_MAX`] plugin names ([`is_plugin_name`]) separated by single
/// commas.
fn check_plugin_chain(chain: &str) -> Result<(), ProtocolError> {
    if chain.is_empty() {
        return Ok(());
    }
    let invalid = |reason| Err(ProtocolError::InvalidPluginChain { chain: chain.to_string(), reason });
    let mut count = 0;
    for name in chain.split(',') {
        count += 1;
        if !is_plugin_name(name) {
            return invalid("each name is 1 to 64 bytes of ASCII letters, digits, '-' and '_'");
        }
    }
    if count > PLUGINS_MAX {
        return invalid("a chain has at most 8 plugins");
    }
    Ok(())
}

/// What a shard's backup copied: the last log record it holds, and its files and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupReport {
    pub lsn: u64,
    pub files: u64,
    pub bytes: u64,
}

/// Longest backup directory path a request may carry.
pub const BACKUP_DIR_BYTES_MAX: usize = 4096;

/// A backup directory is an absolute path of at most [`BACKUP_DIR_BYTES_MAX`] bytes: the server
/// resolves it on its own file system, where the client's working directory means nothing.
fn check_backup_dir(dir: &str) -> Result<(), ProtocolError> {
    if dir.len() > BACKUP_DIR_BYTES_MAX {
        return Err(ProtocolError::FrameTooLarge { len: dir.len(), max: BACKUP_DIR_BYTES_MAX });
    }
    if !dir.starts_with('/') {
        return Err(ProtocolError::RelativeBackupDir { dir: dir.to_owned() });
    }
    Ok(())
}

fn check_pool_name(name: &str) -> Result<(), ProtocolError> {
    if name.is_empty() {
        return Err(ProtocolError::EmptyPoolName);
    }
    if name.len() > POOL_NAME_BYTES_MAX {
        return Err(ProtocolError::PoolNameTooLong { len: name.len(), max: POOL_NAME_BYTES_MAX });
    }
    Ok(())
}

fn check_key(key: &[u8], limits: &Limits) -> Result<(), ProtocolError> {
    let max = limits.key_bytes_max as usize;
    if key.len() > max {
        return Err(ProtocolError::KeyTooLarge { len: key.len(), max });
    }
    Ok(())
}

fn check_value(value: &[u8], limits: &Limits) -> Result<(), ProtocolError> {
    let max = limits.value_bytes_max as usize;
    if value.len() > max {
        return Err(ProtocolError::ValueTooLarge { len: value.len(), max });
    }
    Ok(())
}

/// Reads a u32 length and checks it against `max` before the bytes are sliced: the length comes
/// from the peer.
fn read_sized<'a>(
    reader: &mut Reader<'a>,
    max: usize,
    too_large: fn(usize, usize) -> ProtocolError,
) -> Result<usize, ProtocolError> {
    let len = reader.u32()? as usize;
    if len > max {
        return Err(too_large(len, max));
    }
    Ok(len)
}

fn key_too_large(len: usize, max: usize) -> ProtocolError {
    ProtocolError::KeyTooLarge { len, max }
}

fn value_too_large(len: usize, max: usize) -> ProtocolError {
    ProtocolError::ValueTooLarge { len, max }
}

/// An invocation's payload counts against the value limit together with the value it puts, so
/// an invocation frame never exceeds the frame limit a put of the same sizes fits.
fn check_value_and_payload(value: &[u8], payload: &[u8], limits: &Limits) -> Result<(), ProtocolError> {
    let len = value.len().saturating_add(payload.len());
    let max = limits.value_bytes_max as usize;
    if len > max {
        return Err(ProtocolError::ValueTooLarge { len, max });
    }
    Ok(())
}

/// The rules of `invoke_ado` beyond sizes: its flags, a created value needs a key, and a size
/// only means something with create-on-demand.
fn check_invoke_ado(flags: InvokeFlags, key: &[u8], value_size: u64, limits: &Limits) -> Result<(), ProtocolError> {
    flags.check_invoke_ado()?;
    if !flags.contains(InvokeFlags::CREATE_ON_DEMAND) {
        if value_size != 0 {
            return Err(ProtocolError::InvalidInvocation { reason: "value_size without create-on-demand" });
        }
        return Ok(());
    }
    if key.is_empty() {
        return Err(ProtocolError::InvalidInvocation { reason: "create-on-demand needs a key" });
    }
    let max = limits.value_bytes_max as usize;
    if value_size > max as u64 {
        return Err(ProtocolError::ValueTooLarge { len: usize::try_from(value_size).unwrap_or(usize::MAX), max });
    }
    Ok(())
}

/// The rules of `invoke_put_ado` beyond sizes: its flags, and a put needs a key.
fn check_invoke_put_ado(flags: InvokeFlags, key: &[u8]) -> Result<(), ProtocolError> {
    flags.check_invoke_put_ado()?;
    if key.is_empty() {
        return Err(ProtocolError::InvalidInvocation { reason: "invoke_put_ado needs a key" });
    }
    Ok(())
}

fn read_key<'a>(reader: &mut Reader<'a>) -> Result<&'a [u8], ProtocolError> {
    let len = read_sized(reader, KEY_BYTES_MAX, key_too_large)?;
    reader.bytes(len)
}

fn read_pool_name<'a>(reader: &mut Reader<'a>) -> Result<&'a str, ProtocolError> {
    let name = reader.str16("pool name")?;
    check_pool_name(name)?;
    Ok(name)
}

fn check_find_limit(limit: u32) -> Result<(), ProtocolError> {
    if limit == 0 || limit as usize > FIND_KEYS_MAX {
        return Err(ProtocolError::InvalidFindLimit(u64::from(limit)));
    }
    Ok(())
}

/// `put_offset` changes a value that exists and keeps its length: only a durability may be
/// asked for.
fn check_put_offset_flags(flags: PutFlags) -> Result<(), ProtocolError> {
    if flags.contains(PutFlags::CREATE_ONLY) || flags.contains(PutFlags::UPDATE_ONLY) {
        return Err(ProtocolError::UnknownFlags { message: "put_offset (only sync or async)", flags: flags.bits() });
    }
    Ok(())
}

fn no_flags(header: &Header, message: &'static str) -> Result<(), ProtocolError> {
    match header.flags {
        0 => Ok(()),
        flags => Err(ProtocolError::UnknownFlags { message, flags }),
    }
}

/// An administration request of `kind`, which defines no flags.
fn admin<'a>(
    header: &Header,
    message: &'static str,
    kind: AdminKind,
    r: &mut Reader<'_>,
) -> Result<Request<'a>, ProtocolError> {
    no_flags(header, message)?;
    Ok(Request::ClusterAdmin(kind.decode(r)?))
}

impl<'a> Request<'a> {
    pub fn opcode(&self) -> Opcode {
        match self {
            Request::Hello { .. } => Opcode::Hello,
            Request::CreatePool { .. } => Opcode::CreatePool,
            Request::OpenPool { .. } => Opcode::OpenPool,
            Request::ClosePool { .. } => Opcode::ClosePool,
            Request::DeletePool { .. } => Opcode::DeletePool,
            Request::ConfigurePool { .. } => Opcode::ConfigurePool,
            Request::ListPools | Request::DescribePools { .. } => Opcode::ListPools,
            Request::Put { .. } => Opcode::Put,
            Request::Get { .. } => Opcode::Get,
            Request::Erase { .. } => Opcode::Erase,
            Request::Count { .. } => Opcode::Count,
            Request::GetAttribute { .. } => Opcode::GetAttribute,
            Request::Find { .. } => Opcode::Find,
            Request::PutDirect { .. } => Opcode::PutDirect,
            Request::DirectWrite { .. } => Opcode::DirectWrite,
            Request::GetDirect { .. } => Opcode::GetDirect,
            Request::DirectRead { .. } => Opcode::DirectRead,
            Request::EndTransfer { .. } => Opcode::EndTransfer,
            Request::PutOffset { .. } => Opcode::PutOffset,
            Request::GetStatistics => Opcode::GetStatistics,
            Request::InvokeAdo { .. } => Opcode::InvokeAdo,
            Request::InvokePutAdo { .. } => Opcode::InvokePutAdo,
            Request::Backup { .. } => Opcode::Backup,
            Request::NodeInfo => Opcode::NodeInfo,
            Request::ClusterMap => Opcode::ClusterMap,
            Request::ClusterAdmin(admin) => match admin {
                ClusterAdmin::Init { .. } => Opcode::ClusterInit,
                ClusterAdmin::AddNode { .. } => Opcode::ClusterAddNode,
                ClusterAdmin::RemoveNode { .. } => Opcode::ClusterRemoveNode,
                ClusterAdmin::TransferLeader { .. } => Opcode::ClusterTransferLeader,
                ClusterAdmin::Status { .. } => Opcode::ClusterStatus,
            },
        }
    }

    /// Checks the request's sizes against `limits`. Servers configured below the protocol
    /// ceilings call this after [`Request::decode`]; clients call it before sending, so an
    /// oversized request fails locally with the same error the server would give.
    pub fn check(&self, limits: &Limits) -> Result<(), ProtocolError> {
        match self {
            Request::CreatePool { name, plugins, .. } => {
                check_pool_name(name)?;
                check_plugin_chain(plugins)
            }
            Request::OpenPool { name } | Request::DeletePool { name } | Request::ConfigurePool { name, .. } => {
                check_pool_name(name)
            }
            Request::DescribePools { name } => name.map_or(Ok(()), check_pool_name),
            Request::Put { key, value, .. } => {
                check_key(key, limits)?;
                check_value(value, limits)
            }
            Request::Get { key, .. }
            | Request::Erase { key, .. }
            | Request::GetAttribute { key, .. }
            | Request::PutDirect { key, .. }
            | Request::GetDirect { key, .. } => check_key(key, limits),
            Request::DirectWrite { bytes, .. } => check_value(bytes, limits),
            Request::DirectRead { length, .. } => {
                let max = limits.value_bytes_max as usize;
                match *length as usize {
                    len if len > max => Err(ProtocolError::ValueTooLarge { len, max }),
                    _ => Ok(()),
                }
            }
            Request::PutOffset { key, bytes, flags, .. } => {
                check_key(key, limits)?;
                check_value(bytes, limits)?;
                check_put_offset_flags(*flags)
            }
            Request::EndTransfer { .. } => Ok(()),
            Request::Find { pattern, after, limit, .. } => {
                check_key(pattern, limits)?;
                check_key(after.unwrap_or_default(), limits)?;
                check_find_limit(*limit)
            }
            Request::Hello { client_name, auth, .. } => {
                if client_name.len() > u16::MAX as usize || auth.len() > u16::MAX as usize {
                    return Err(ProtocolError::FrameTooLarge {
                        len: client_name.len() + auth.len(),
                        max: u16::MAX as usize,
                    });
                }
                Ok(())
            }
            Request::ClosePool { .. }
            | Request::ListPools
            | Request::Count { .. }
            | Request::GetStatistics
            | Request::NodeInfo
            | Request::ClusterMap => Ok(()),
            Request::ClusterAdmin(admin) => admin.check(),
            Request::Backup { dir } => check_backup_dir(dir),
            Request::InvokeAdo { flags, key, payload, value_size, .. } => {
                check_key(key, limits)?;
                check_value(payload, limits)?;
                check_invoke_ado(*flags, key, *value_size, limits)
            }
            Request::InvokePutAdo { flags, key, value, payload, .. } => {
                check_key(key, limits)?;
                check_value_and_payload(value, payload, limits)?;
                check_invoke_put_ado(*flags, key)
            }
        }
    }

    /// Decodes a request body. Sizes are checked against the protocol ceilings; a server with
    /// tighter limits also calls [`Request::check`].
    pub fn decode(header: &Header, body: &'a [u8]) -> Result<Request<'a>, ProtocolError> {
        let opcode = Opcode::from_request(header.opcode).ok_or(ProtocolError::UnknownOpcode(header.opcode))?;
        let mut r = Reader::new(body);
        let request = match opcode {
            Opcode::Hello => {
                no_flags(header, "hello")?;
                if r.bytes(4)? != HELLO_MAGIC {
                    return Err(ProtocolError::BadMagic);
                }
                let version = r.u16()?;
                let client_name = r.str16("client name")?;
                let auth = r.bytes16()?;
                Request::Hello { version, client_name, auth }
            }
            Opcode::CreatePool => {
                let flags = CreatePoolFlags::from_bits(header.flags)?;
                let name = read_pool_name(&mut r)?;
                let size_bytes = r.u64()?;
                let expected_objects = r.u64()?;
                let plugins = if flags.contains(CreatePoolFlags::PLUGINS) { r.str16("plugin chain")? } else { "" };
                if flags.contains(CreatePoolFlags::PLUGINS) && plugins.is_empty() {
                    // The flag says a chain follows; an empty one would decode to a request that
                    // encodes differently (without the flag).
                    return Err(ProtocolError::InvalidPluginChain {
                        chain: String::new(),
                        reason: "the plugins flag is set but the chain is empty",
                    });
                }
                Request::CreatePool { name, size_bytes, expected_objects, flags, plugins }
            }
            Opcode::OpenPool => {
                no_flags(header, "open_pool")?;
                Request::OpenPool { name: read_pool_name(&mut r)? }
            }
            Opcode::ClosePool => {
                no_flags(header, "close_pool")?;
                Request::ClosePool { pool: PoolHandle(r.u64()?) }
            }
            Opcode::DeletePool => {
                no_flags(header, "delete_pool")?;
                Request::DeletePool { name: read_pool_name(&mut r)? }
            }
            Opcode::ListPools => match header.flags {
                0 => Request::ListPools,
                LIST_POOLS_DESCRIBE => {
                    let name = if r.remaining() == 0 { None } else { Some(read_pool_name(&mut r)?) };
                    Request::DescribePools { name }
                }
                flags => return Err(ProtocolError::UnknownFlags { message: "list_pools", flags }),
            },
            Opcode::ConfigurePool => {
                let setting = PoolSetting::from_flags(header.flags)?;
                Request::ConfigurePool { name: read_pool_name(&mut r)?, setting }
            }
            Opcode::Put => {
                let flags = PutFlags::from_bits(header.flags)?;
                let pool = PoolHandle(r.u64()?);
                let key_len = read_sized(&mut r, KEY_BYTES_MAX, key_too_large)?;
                let value_len = read_sized(&mut r, VALUE_INLINE_BYTES_MAX, value_too_large)?;
                let key = r.bytes(key_len)?;
                let value = r.bytes(value_len)?;
                Request::Put { pool, flags, key, value }
            }
            Opcode::Get => {
                no_flags(header, "get")?;
                Request::Get { pool: PoolHandle(r.u64()?), key: read_key(&mut r)? }
            }
            Opcode::Erase => {
                no_flags(header, "erase")?;
                Request::Erase { pool: PoolHandle(r.u64()?), key: read_key(&mut r)? }
            }
            Opcode::Count => {
                no_flags(header, "count")?;
                Request::Count { pool: PoolHandle(r.u64()?) }
            }
            Opcode::GetAttribute => {
                no_flags(header, "get_attribute")?;
                let pool = PoolHandle(r.u64()?);
                let attribute = Attribute::from_u16(r.u16()?)?;
                let key = read_key(&mut r)?;
                Request::GetAttribute { pool, attribute, key }
            }
            Opcode::Find => {
                no_flags(header, "find")?;
                let pool = PoolHandle(r.u64()?);
                let kind = FindKind::from_u16(r.u16()?)?;
                let limit = r.u32()?;
                check_find_limit(limit)?;
                let pattern = read_key(&mut r)?;
                let after = match r.u8()? {
                    0 => None,
                    _ => Some(read_key(&mut r)?),
                };
                Request::Find { pool, kind, pattern, after, limit }
            }
            Opcode::PutDirect => {
                let flags = PutFlags::from_bits(header.flags)?;
                let pool = PoolHandle(r.u64()?);
                let transfer = r.u64()?;
                let length = r.u64()?;
                Request::PutDirect { pool, flags, transfer, length, key: read_key(&mut r)? }
            }
            Opcode::DirectWrite => {
                no_flags(header, "direct_write")?;
                let transfer = r.u64()?;
                let offset = r.u64()?;
                let len = read_sized(&mut r, VALUE_INLINE_BYTES_MAX, value_too_large)?;
                Request::DirectWrite { transfer, offset, bytes: r.bytes(len)? }
            }
            Opcode::GetDirect => {
                no_flags(header, "get_direct")?;
                let pool = PoolHandle(r.u64()?);
                let transfer = r.u64()?;
                Request::GetDirect { pool, transfer, key: read_key(&mut r)? }
            }
            Opcode::DirectRead => {
                no_flags(header, "direct_read")?;
                let transfer = r.u64()?;
                let offset = r.u64()?;
                let length = r.u32()?;
                if length as usize > VALUE_INLINE_BYTES_MAX {
                    return Err(value_too_large(length as usize, VALUE_INLINE_BYTES_MAX));
                }
                Request::DirectRead { transfer, offset, length }
            }
            Opcode::EndTransfer => {
                let flags = EndTransferFlags::from_bits(header.flags)?;
                Request::EndTransfer { transfer: r.u64()?, flags }
            }
            Opcode::PutOffset => {
                let flags = PutFlags::from_bits(header.flags)?;
                check_put_offset_flags(flags)?;
                let pool = PoolHandle(r.u64()?);
                let offset = r.u64()?;
                let key_len = read_sized(&mut r, KEY_BYTES_MAX, key_too_large)?;
                let len = read_sized(&mut r, VALUE_INLINE_BYTES_MAX, value_too_large)?;
                let key = r.bytes(key_len)?;
                Request::PutOffset { pool, flags, offset, key, bytes: r.bytes(len)? }
            }
            Opcode::GetStatistics => {
                no_flags(header, "get_statistics")?;
                Request::GetStatistics
            }
            Opcode::Backup => {
                no_flags(header, "backup")?;
                let dir = r.str16("backup directory")?;
                check_backup_dir(dir)?;
                Request::Backup { dir }
            }
            Opcode::InvokeAdo => {
                let flags = InvokeFlags::from_bits(header.flags)?;
                let pool = PoolHandle(r.u64()?);
                let value_size = r.u64()?;
                let key_len = read_sized(&mut r, KEY_BYTES_MAX, key_too_large)?;
                let payload_len = read_sized(&mut r, VALUE_INLINE_BYTES_MAX, value_too_large)?;
                let key = r.bytes(key_len)?;
                let payload = r.bytes(payload_len)?;
                check_invoke_ado(flags, key, value_size, &Limits::MAX)?;
                Request::InvokeAdo { pool, flags, key, payload, value_size }
            }
            Opcode::InvokePutAdo => {
                let flags = InvokeFlags::from_bits(header.flags)?;
                let pool = PoolHandle(r.u64()?);
                let key_len = read_sized(&mut r, KEY_BYTES_MAX, key_too_large)?;
                let value_len = read_sized(&mut r, VALUE_INLINE_BYTES_MAX, value_too_large)?;
                // Value and payload share the value limit, checked before either is sliced.
                let payload_len = r.u32()? as usize;
                let len = value_len.saturating_add(payload_len);
                if len > VALUE_INLINE_BYTES_MAX {
                    return Err(value_too_large(len, VALUE_INLINE_BYTES_MAX));
                }
                let key = r.bytes(key_len)?;
                let value = r.bytes(value_len)?;
                let payload = r.bytes(payload_len)?;
                check_invoke_put_ado(flags, key)?;
                Request::InvokePutAdo { pool, flags, key, value, payload }
            }
            Opcode::NodeInfo => {
                no_flags(header, "node_info")?;
                Request::NodeInfo
            }
            Opcode::ClusterMap => {
                no_flags(header, "cluster_map")?;
                Request::ClusterMap
            }
            Opcode::ClusterInit => admin(header, "cluster_init", AdminKind::Init, &mut r)?,
            Opcode::ClusterAddNode => admin(header, "cluster_add_node", AdminKind::AddNode, &mut r)?,
            Opcode::ClusterRemoveNode => admin(header, "cluster_remove_node", AdminKind::RemoveNode, &mut r)?,
            Opcode::ClusterTransferLeader => {
                admin(header, "cluster_transfer_leader", AdminKind::TransferLeader, &mut r)?
            }
            Opcode::ClusterStatus => admin(header, "cluster_status", AdminKind::Status, &mut r)?,
            Opcode::Error | Opcode::NotLeader => return Err(ProtocolError::UnknownOpcode(header.opcode)),
        };
        r.finish()?;
        Ok(request)
    }

    /// Appends this request as one frame to `out`.
    ///
    /// # Panics
    /// If a size exceeds the protocol ceilings; call [`Request::check`] first.
    pub fn encode(&self, request_id: u64, out: &mut BytesMut) {
        let flags = match self {
            Request::CreatePool { flags, plugins, .. } => {
                // The chain's flag says whether the body carries one, whatever the caller set.
                let chain = if plugins.is_empty() { 0 } else { CreatePoolFlags::PLUGINS.0 };
                flags.0 & !CreatePoolFlags::PLUGINS.0 | chain
            }
            Request::Put { flags, .. } | Request::PutDirect { flags, .. } | Request::PutOffset { flags, .. } => {
                flags.bits()
            }
            Request::EndTransfer { flags, .. } => flags.bits(),
            Request::InvokeAdo { flags, .. } | Request::InvokePutAdo { flags, .. } => flags.bits(),
            Request::ConfigurePool { setting, .. } => *setting as u16,
            Request::DescribePools { .. } => LIST_POOLS_DESCRIBE,
            _ => 0,
        };
        write_frame(out, self.opcode() as u16, flags, request_id, |out| match self {
            Request::Hello { version, client_name, auth } => {
                out.put_slice(&HELLO_MAGIC);
                out.put_u16_le(*version);
                put_str16(out, client_name);
                put_bytes16(out, auth);
            }
            Request::CreatePool { name, size_bytes, expected_objects, plugins, .. } => {
                put_str16(out, name);
                out.put_u64_le(*size_bytes);
                out.put_u64_le(*expected_objects);
                if !plugins.is_empty() {
                    put_str16(out, plugins);
                }
            }
            Request::OpenPool { name } | Request::DeletePool { name } | Request::ConfigurePool { name, .. } => {
                put_str16(out, name)
            }
            Request::Backup { dir } => put_str16(out, dir),
            Request::ClosePool { pool } | Request::Count { pool } => out.put_u64_le(pool.0),
            Request::ListPools
            | Request::GetStatistics
            | Request::DescribePools { name: None }
            | Request::NodeInfo
            | Request::ClusterMap => {}
            Request::ClusterAdmin(admin) => admin.encode(out),
            Request::DescribePools { name: Some(name) } => put_str16(out, name),
            Request::Put { pool, key, value, .. } => {
                out.put_u64_le(pool.0);
                put_len32(out, key.len());
                put_len32(out, value.len());
                out.put_slice(key);
                out.put_slice(value);
            }
            Request::Get { pool, key } | Request::Erase { pool, key } => {
                out.put_u64_le(pool.0);
                put_len32(out, key.len());
                out.put_slice(key);
            }
            Request::PutDirect { pool, transfer, length, key, .. } => {
                out.put_u64_le(pool.0);
                out.put_u64_le(*transfer);
                out.put_u64_le(*length);
                put_len32(out, key.len());
                out.put_slice(key);
            }
            Request::DirectWrite { transfer, offset, bytes } => {
                out.put_u64_le(*transfer);
                out.put_u64_le(*offset);
                put_len32(out, bytes.len());
                out.put_slice(bytes);
            }
            Request::GetDirect { pool, transfer, key } => {
                out.put_u64_le(pool.0);
                out.put_u64_le(*transfer);
                put_len32(out, key.len());
                out.put_slice(key);
            }
            Request::DirectRead { transfer, offset, length } => {
                out.put_u64_le(*transfer);
                out.put_u64_le(*offset);
                out.put_u32_le(*length);
            }
            Request::EndTransfer { transfer, .. } => out.put_u64_le(*transfer),
            Request::PutOffset { pool, offset, key, bytes, .. } => {
                out.put_u64_le(pool.0);
                out.put_u64_le(*offset);
                put_len32(out, key.len());
                put_len32(out, bytes.len());
                out.put_slice(key);
                out.put_slice(bytes);
            }
            Request::GetAttribute { pool, attribute, key } => {
                out.put_u64_le(pool.0);
                out.put_u16_le(*attribute as u16);
                put_len32(out, key.len());
                out.put_slice(key);
            }
            Request::Find { pool, kind, pattern, after, limit } => {
                out.put_u64_le(pool.0);
                out.put_u16_le(*kind as u16);
                out.put_u32_le(*limit);
                put_len32(out, pattern.len());
                out.put_slice(pattern);
                match after {
                    None => out.put_u8(0),
                    Some(after) => {
                        out.put_u8(1);
                        put_len32(out, after.len());
                        out.put_slice(after);
                    }
                }
            }
            Request::InvokeAdo { pool, key, payload, value_size, .. } => {
                out.put_u64_le(pool.0);
                out.put_u64_le(*value_size);
                put_len32(out, key.len());
                put_len32(out, payload.len());
                out.put_slice(key);
                out.put_slice(payload);
            }
            Request::InvokePutAdo { pool, key, value, payload, .. } => {
                out.put_u64_le(pool.0);
                put_len32(out, key.len());
                put_len32(out, value.len());
                put_len32(out, payload.len());
                out.put_slice(key);
                out.put_slice(value);
                out.put_slice(payload);
            }
        });
    }
}

/// The reply to a successful hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloReply<'a> {
    pub version: u16,
    /// Index of the shard this connection reached.
    pub shard_index: u16,
    /// The server's limits; clients reject larger requests before sending them.
    pub limits: Limits,
    /// `host:port` of every shard of the server, by shard index. A host of `0.0.0.0` or `::`
    /// means "the host you connected to".
    pub shard_addresses: Vec<&'a str>,
}

/// One row of `list_pools`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolInfo<'a> {
    pub name: &'a str,
    pub objects: u64,
    pub size_bytes: u64,
    pub used_bytes: u64,
    /// How many opens across all sessions hold the pool.
    pub open_count: u32,
    pub memory: PoolMemory,
    /// The pool's plugin chain, comma-separated (see [`plugin_names`]); empty for none.
    pub plugins: &'a str,
}

impl<'a> PoolInfo<'a> {
    fn encode(&self, out: &mut BytesMut) {
        put_str16(out, self.name);
        out.put_u64_le(self.objects);
        out.put_u64_le(self.size_bytes);
        out.put_u64_le(self.used_bytes);
        out.put_u32_le(self.open_count);
        let memory = &self.memory;
        for part in [
            memory.table_buckets,
            memory.table_bytes,
            memory.slab_bytes,
            memory.large_bytes,
            memory.other_bytes,
            memory.index_bytes,
        ] {
            out.put_u64_le(part);
        }
        put_str16(out, self.plugins);
    }

    fn decode(r: &mut Reader<'a>) -> Result<PoolInfo<'a>, ProtocolError> {
        Ok(PoolInfo {
            name: r.str16("pool name")?,
            objects: r.u64()?,
            size_bytes: r.u64()?,
            used_bytes: r.u64()?,
            open_count: r.u32()?,
            memory: PoolMemory {
                table_buckets: r.u64()?,
                table_bytes: r.u64()?,
                slab_bytes: r.u64()?,
                large_bytes: r.u64()?,
                other_bytes: r.u64()?,
                index_bytes: r.u64()?,
            },
            plugins: r.str16("plugin chain")?,
        })
    }
}

/// The flag of `list_pools` (and of its answer) that asks for each pool's settings, and lets the
/// body name one pool.
const LIST_POOLS_DESCRIBE: u16 = 0x0001;

/// A pool's settings, as a described `list_pools` entry carries them: what `create_pool` set
/// and `configure_pool` changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// The pool has a whole secondary index, which `find` searches in key order (not yet while
    /// `configure_pool` builds one).
    pub indexed: bool,
    /// The durability of writes that choose none.
    pub durability: Durability,
}

impl PoolSettings {
    /// The bit of [`PoolSettings::indexed`].
    pub const INDEXED: u16 = 0x0001;
    /// The bit of an `async` [`PoolSettings::durability`].
    pub const ASYNC: u16 = 0x0002;

    pub fn bits(self) -> u16 {
        let indexed = if self.indexed { PoolSettings::INDEXED } else { 0 };
        let durability = match self.durability {
            Durability::Sync => 0,
            Durability::Async => PoolSettings::ASYNC,
        };
        indexed | durability
    }

    pub fn from_bits(bits: u16) -> Result<PoolSettings, ProtocolError> {
        if bits & !(PoolSettings::INDEXED | PoolSettings::ASYNC) != 0 {
            return Err(ProtocolError::UnknownFlags { message: "pool settings", flags: bits });
        }
        Ok(PoolSettings {
            indexed: bits & PoolSettings::INDEXED != 0,
            durability: if bits & PoolSettings::ASYNC != 0 { Durability::Async } else { Durability::Sync },
        })
    }
}

/// One entry of a described `list_pools` answer: the pool's listing and its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolDescription<'a> {
    pub info: PoolInfo<'a>,
    pub settings: PoolSettings,
}

/// What one pool takes in memory, by part, as a `list_pools` row carries it (`docs/protocol.md`
/// and `docs/hstore.md` say what each part counts). Whole byte counts rather than ratios, so that
/// bytes per key and the table's load are computed exactly from them and the row's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolMemory {
    /// Slots of the pool's hash table.
    pub table_buckets: u64,
    pub table_bytes: u64,
    /// hstore's slabs of out-of-line keys and values.
    pub slab_bytes: u64,
    /// hstore's extents of keys and values too large for a slab.
    pub large_bytes: u64,
    /// Everything else the engine holds: hstore's header and directory; mapstore's keys, values
    /// and ordered key set.
    pub other_bytes: u64,
    /// The secondary index of a pool created `indexed`; 0 for any other.
    pub index_bytes: u64,
}

impl PoolMemory {
    /// Every part together: the pool's memory in use.
    pub fn total_bytes(&self) -> u64 {
        self.table_bytes + self.slab_bytes + self.large_bytes + self.other_bytes + self.index_bytes
    }
}

/// One named counter of `get_statistics`. Named pairs rather than a fixed struct so servers can
/// add counters without breaking older clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statistic<'a> {
    pub name: &'a str,
    pub value: u64,
}

/// One buffer of an invocation's answer, tagged with the plugin that produced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvokeBuffer<'a> {
    /// Index in the pool's plugin chain of the plugin that produced the buffer.
    pub layer: u16,
    pub data: &'a [u8],
}

/// Bytes of an invocation answer's buffer before its data: layer (u16) and length (u32). Bounds
/// how many buffers a body can hold, so a peer's count never sizes an allocation by itself.
const INVOKE_BUFFER_HEADER_BYTES: usize = 2 + 4;

/// A response, borrowing from the frame it was decoded from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response<'a> {
    Hello(HelloReply<'a>),
    PoolCreated {
        pool: PoolHandle,
        created: bool,
    },
    PoolOpened {
        pool: PoolHandle,
    },
    PoolClosed,
    PoolDeleted,
    PoolConfigured,
    Pools(Vec<PoolInfo<'a>>),
    /// The answer to a described `list_pools`: each pool with its settings.
    PoolDescriptions(Vec<PoolDescription<'a>>),
    Stored,
    Value(&'a [u8]),
    Erased,
    Count(u64),
    Attribute(u64),
    /// Matching keys in order, and where to resume: `next` is the last key examined when the
    /// search stopped early (limit, reply size or scan budget reached), `None` once the index is
    /// exhausted.
    Found {
        keys: Vec<&'a [u8]>,
        next: Option<&'a [u8]>,
    },
    Statistics(Vec<Statistic<'a>>),
    /// The answer to `invoke_ado` and to `invoke_put_ado`: the chain's buffers in chain order
    /// (none for a fire-and-forget call). The response opcode follows the request, which this
    /// value does not know: encode it with [`Response::encode_answer`].
    Invoked {
        buffers: Vec<InvokeBuffer<'a>>,
    },
    /// The shard's backup is complete and durable.
    BackedUp(BackupReport),
    /// A direct transfer is open: the answer to `put_direct` (echoing the length to come) and to
    /// `get_direct` (the value's length). Encode it with [`Response::encode_answer`].
    TransferOpened {
        length: u64,
    },
    /// A direct put's piece is staged.
    Written,
    /// A direct transfer ended: a put's value is the key's (durable as its flags asked), or it
    /// was dropped; a read's key is released.
    TransferEnded,
    NodeInfo(NodeInfo),
    ClusterMap(ClusterMap),
    /// The group has its first members (`cluster_init`).
    ClusterInitialized,
    /// The node is a voter of the group (`cluster_add_node`).
    NodeAdded,
    /// The node is no longer a member of the group (`cluster_remove_node`).
    NodeRemoved,
    /// The node the request named leads the group (`cluster_transfer_leader`).
    LeaderTransferred,
    ClusterStatus(ClusterStatus),
    /// A refusal: this node does not lead the shard's group. Nothing was changed.
    NotLeader(NotLeader),
    Error {
        code: ErrorCode,
        message: &'a str,
    },
}

impl<'a> Response<'a> {
    /// The opcode of the request this response answers (or [`Opcode::Error`]).
    pub fn request_opcode(&self) -> Opcode {
        match self {
            Response::Hello(_) => Opcode::Hello,
            Response::PoolCreated { .. } => Opcode::CreatePool,
            Response::PoolOpened { .. } => Opcode::OpenPool,
            Response::PoolClosed => Opcode::ClosePool,
            Response::PoolDeleted => Opcode::DeletePool,
            Response::PoolConfigured => Opcode::ConfigurePool,
            Response::Pools(_) | Response::PoolDescriptions(_) => Opcode::ListPools,
            Response::Stored => Opcode::Put,
            Response::Value(_) => Opcode::Get,
            Response::Erased => Opcode::Erase,
            Response::Count(_) => Opcode::Count,
            Response::Attribute(_) => Opcode::GetAttribute,
            Response::Found { .. } => Opcode::Find,
            Response::Statistics(_) => Opcode::GetStatistics,
            // Also answers invoke_put_ado; see `encode_answer`.
            Response::Invoked { .. } => Opcode::InvokeAdo,
            Response::BackedUp(_) => Opcode::Backup,
            // Also answers put_direct; see `encode_answer`.
            Response::TransferOpened { .. } => Opcode::GetDirect,
            Response::Written => Opcode::DirectWrite,
            Response::TransferEnded => Opcode::EndTransfer,
            Response::NodeInfo(_) => Opcode::NodeInfo,
            Response::ClusterMap(_) => Opcode::ClusterMap,
            Response::ClusterInitialized => Opcode::ClusterInit,
            Response::NodeAdded => Opcode::ClusterAddNode,
            Response::NodeRemoved => Opcode::ClusterRemoveNode,
            Response::LeaderTransferred => Opcode::ClusterTransferLeader,
            Response::ClusterStatus(_) => Opcode::ClusterStatus,
            Response::NotLeader(_) => Opcode::NotLeader,
            Response::Error { .. } => Opcode::Error,
        }
    }

    /// Appends this response as one frame to `out`. Error messages longer than a u16 length can
    /// carry are cut at a character boundary. [`Response::Invoked`] is encoded as the answer to
    /// `invoke_ado`; use [`Response::encode_answer`] for `invoke_put_ado`.
    pub fn encode(&self, request_id: u64, out: &mut BytesMut) {
        self.encode_answer(self.request_opcode(), request_id, out);
    }

    /// The opcode whose response code this response carries when it answers a request of opcode
    /// `request` (see [`Response::encode_answer`]).
    fn answer_opcode(&self, request: Opcode) -> Opcode {
        match (self, request) {
            (Response::Invoked { .. }, Opcode::InvokeAdo | Opcode::InvokePutAdo)
            | (Response::TransferOpened { .. }, Opcode::PutDirect | Opcode::GetDirect)
            | (Response::Value(_), Opcode::DirectRead)
            | (Response::Stored, Opcode::PutOffset) => request,
            _ => self.request_opcode(),
        }
    }

    /// Appends this response to `out` like [`Response::encode_answer`], except the bytes of a
    /// [`Response::Value`], which it returns instead: the frame is whole once they follow what
    /// was appended. Every other response is appended whole and returns no bytes. A server
    /// writes a large value to its socket from where it is stored this way, rather than copying
    /// it into its output buffer first.
    pub fn encode_answer_head(&self, request: Opcode, request_id: u64, out: &mut BytesMut) -> &'a [u8] {
        match self {
            Response::Value(value) => {
                const LENGTH_BYTES: usize = 4;
                let body_len = u32::try_from(LENGTH_BYTES + value.len())
                    .expect("callers check sizes against FRAME_BODY_BYTES_MAX, which fits u32");
                let opcode = self.answer_opcode(request).response_code();
                out.put_slice(&Header { body_len, opcode, flags: 0, request_id }.to_bytes());
                put_len32(out, value.len());
                value
            }
            _ => {
                self.encode_answer(request, request_id, out);
                &[]
            }
        }
    }

    /// Appends this response as one frame to `out`, as the answer to a request of opcode
    /// `request`. This matters for the responses that answer more than one request, each with
    /// its own response opcode: [`Response::Invoked`] (both invocations),
    /// [`Response::TransferOpened`] (`put_direct`, `get_direct`), [`Response::Value`] (`get`,
    /// `direct_read`) and [`Response::Stored`] (`put`, `put_offset`); any other response keeps
    /// its own opcode.
    pub fn encode_answer(&self, request: Opcode, request_id: u64, out: &mut BytesMut) {
        let opcode = self.answer_opcode(request);
        let flags = match self {
            Response::PoolDescriptions(_) => LIST_POOLS_DESCRIBE,
            _ => 0,
        };
        write_frame(out, opcode.response_code(), flags, request_id, |out| match self {
            Response::Hello(reply) => {
                out.put_u16_le(reply.version);
                out.put_u16_le(reply.shard_index);
                let shard_count = u16::try_from(reply.shard_addresses.len()).expect("shard count fits u16");
                out.put_u16_le(shard_count);
                out.put_u32_le(reply.limits.key_bytes_max);
                out.put_u32_le(reply.limits.value_bytes_max);
                for address in &reply.shard_addresses {
                    put_str16(out, address);
                }
            }
            Response::PoolCreated { pool, created } => {
                out.put_u64_le(pool.0);
                out.put_u8(u8::from(*created));
            }
            Response::PoolOpened { pool } => out.put_u64_le(pool.0),
            Response::PoolClosed
            | Response::PoolDeleted
            | Response::PoolConfigured
            | Response::Stored
            | Response::Erased
            | Response::Written
            | Response::TransferEnded
            | Response::ClusterInitialized
            | Response::NodeAdded
            | Response::NodeRemoved
            | Response::LeaderTransferred => {}
            Response::NodeInfo(info) => encode_node_info(info, out),
            Response::ClusterMap(map) => encode_map(map, out),
            Response::ClusterStatus(status) => encode_status(status, out),
            Response::NotLeader(not_leader) => not_leader.encode(out),
            Response::TransferOpened { length } => out.put_u64_le(*length),
            Response::Pools(pools) => {
                out.put_u16_le(u16::try_from(pools.len()).expect("pools per shard fit u16"));
                for pool in pools {
                    pool.encode(out);
                }
            }
            Response::PoolDescriptions(pools) => {
                out.put_u16_le(u16::try_from(pools.len()).expect("pools per shard fit u16"));
                for pool in pools {
                    pool.info.encode(out);
                    out.put_u16_le(pool.settings.bits());
                }
            }
            Response::Value(value) => {
                put_len32(out, value.len());
                out.put_slice(value);
            }
            Response::Count(n) | Response::Attribute(n) => out.put_u64_le(*n),
            Response::Found { keys, next } => {
                put_len32(out, keys.len());
                for key in keys {
                    put_len32(out, key.len());
                    out.put_slice(key);
                }
                match next {
                    None => out.put_u8(0),
                    Some(next) => {
                        out.put_u8(1);
                        put_len32(out, next.len());
                        out.put_slice(next);
                    }
                }
            }
            Response::BackedUp(report) => {
                out.put_u64_le(report.lsn);
                out.put_u64_le(report.files);
                out.put_u64_le(report.bytes);
            }
            Response::Statistics(stats) => {
                out.put_u16_le(u16::try_from(stats.len()).expect("statistics fit u16"));
                for stat in stats {
                    put_str16(out, stat.name);
                    out.put_u64_le(stat.value);
                }
            }
            Response::Invoked { buffers } => {
                put_len32(out, buffers.len());
                for buffer in buffers {
                    out.put_u16_le(buffer.layer);
                    put_len32(out, buffer.data.len());
                    out.put_slice(buffer.data);
                }
            }
            Response::Error { code, message } => {
                out.put_u16_le(code.as_u16());
                put_str16(out, truncate_utf8(message, u16::MAX as usize));
            }
        });
    }

    /// Decodes a response body.
    pub fn decode(header: &Header, body: &'a [u8]) -> Result<Response<'a>, ProtocolError> {
        // Only a `pools` answer defines a flag; `decode_success` checks it.
        if header.opcode != Opcode::ListPools.response_code() {
            no_flags(header, "a response")?;
        }
        let mut r = Reader::new(body);
        let response = if header.opcode == Opcode::Error as u16 {
            let raw = r.u16()?;
            let code = ErrorCode::from_u16(raw).ok_or(ProtocolError::UnknownErrorCode(raw))?;
            Response::Error { code, message: r.str16("error message")? }
        } else if header.opcode == Opcode::NotLeader as u16 {
            Response::NotLeader(NotLeader::decode(&mut r)?)
        } else {
            let request_opcode = (header.opcode & RESPONSE_BIT != 0)
                .then(|| Opcode::from_request(header.opcode & !RESPONSE_BIT))
                .flatten()
                .ok_or(ProtocolError::UnknownOpcode(header.opcode))?;
            Response::decode_success(request_opcode, header.flags, &mut r)?
        };
        r.finish()?;
        Ok(response)
    }

    fn decode_success(opcode: Opcode, flags: u16, r: &mut Reader<'a>) -> Result<Response<'a>, ProtocolError> {
        Ok(match opcode {
            Opcode::Hello => {
                let version = r.u16()?;
                let shard_index = r.u16()?;
                let shard_count = r.u16()?;
                let limits = Limits { key_bytes_max: r.u32()?, value_bytes_max: r.u32()? };
                // Each address needs at least its 2-byte length, so the body bounds the count.
                let mut shard_addresses = Vec::with_capacity(usize::from(shard_count).min(1024));
                for _ in 0..shard_count {
                    shard_addresses.push(r.str16("shard address")?);
                }
                Response::Hello(HelloReply { version, shard_index, limits, shard_addresses })
            }
            Opcode::CreatePool => {
                let pool = PoolHandle(r.u64()?);
                let created = r.u8()? != 0;
                Response::PoolCreated { pool, created }
            }
            Opcode::OpenPool => Response::PoolOpened { pool: PoolHandle(r.u64()?) },
            Opcode::ClosePool => Response::PoolClosed,
            Opcode::DeletePool => Response::PoolDeleted,
            Opcode::ConfigurePool => Response::PoolConfigured,
            Opcode::ListPools => {
                let count = usize::from(r.u16()?);
                match flags {
                    0 => Response::Pools((0..count).map(|_| PoolInfo::decode(r)).collect::<Result<_, _>>()?),
                    LIST_POOLS_DESCRIBE => Response::PoolDescriptions(
                        (0..count)
                            .map(|_| {
                                Ok(PoolDescription {
                                    info: PoolInfo::decode(r)?,
                                    settings: PoolSettings::from_bits(r.u16()?)?,
                                })
                            })
                            .collect::<Result<_, ProtocolError>>()?,
                    ),
                    flags => return Err(ProtocolError::UnknownFlags { message: "pools", flags }),
                }
            }
            Opcode::Put | Opcode::PutOffset => Response::Stored,
            Opcode::PutDirect | Opcode::GetDirect => Response::TransferOpened { length: r.u64()? },
            Opcode::DirectWrite => Response::Written,
            Opcode::EndTransfer => Response::TransferEnded,
            Opcode::Get | Opcode::DirectRead => {
                let len = read_sized(r, VALUE_INLINE_BYTES_MAX, value_too_large)?;
                Response::Value(r.bytes(len)?)
            }
            Opcode::Erase => Response::Erased,
            Opcode::Count => Response::Count(r.u64()?),
            Opcode::GetAttribute => Response::Attribute(r.u64()?),
            Opcode::Find => {
                let count = r.u32()? as usize;
                if count > FIND_KEYS_MAX {
                    return Err(ProtocolError::InvalidFindLimit(count as u64));
                }
                let mut keys = Vec::with_capacity(count.min(1024));
                for _ in 0..count {
                    keys.push(read_key(r)?);
                }
                let next = match r.u8()? {
                    0 => None,
                    _ => Some(read_key(r)?),
                };
                Response::Found { keys, next }
            }
            Opcode::Backup => Response::BackedUp(BackupReport { lsn: r.u64()?, files: r.u64()?, bytes: r.u64()? }),
            Opcode::GetStatistics => {
                let count = r.u16()?;
                let mut stats = Vec::with_capacity(usize::from(count).min(1024));
                for _ in 0..count {
                    stats.push(Statistic { name: r.str16("statistic name")?, value: r.u64()? });
                }
                Response::Statistics(stats)
            }
            Opcode::InvokeAdo | Opcode::InvokePutAdo => {
                let count = r.u32()? as usize;
                // Every buffer takes at least its header, so the body bounds the count.
                let mut buffers = Vec::with_capacity(count.min(r.remaining() / INVOKE_BUFFER_HEADER_BYTES));
                for _ in 0..count {
                    let layer = r.u16()?;
                    let len = r.u32()? as usize;
                    buffers.push(InvokeBuffer { layer, data: r.bytes(len)? });
                }
                Response::Invoked { buffers }
            }
            Opcode::NodeInfo => Response::NodeInfo(decode_node_info(r)?),
            Opcode::ClusterMap => Response::ClusterMap(decode_map(r)?),
            Opcode::ClusterInit => Response::ClusterInitialized,
            Opcode::ClusterAddNode => Response::NodeAdded,
            Opcode::ClusterRemoveNode => Response::NodeRemoved,
            Opcode::ClusterTransferLeader => Response::LeaderTransferred,
            Opcode::ClusterStatus => Response::ClusterStatus(decode_status(r)?),
            Opcode::Error | Opcode::NotLeader => return Err(ProtocolError::UnknownOpcode(opcode as u16)),
        })
    }
}

pub(crate) fn truncate_utf8(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The fields of a `direct_write` frame before its bytes: what a server needs to read a piece's
/// bytes from its socket somewhere other than the frame's buffer (straight into the memory they
/// go to), known once the first [`DirectWriteHead::BYTES`] of the body have arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectWriteHead {
    pub transfer: u64,
    pub offset: u64,
    /// The piece's length: the rest of the body.
    pub len: usize,
}

impl DirectWriteHead {
    /// The fields' length: transfer, offset, and the bytes' length.
    pub const BYTES: usize = 8 + 8 + 4;

    /// The fields of the frame `header` begins, from the start of its body; `None` unless they
    /// have all arrived and the frame is a `direct_write` that [`Request::decode`] would take
    /// once whole (no flags, a piece within the inline value limit, a body of exactly the fields
    /// and the piece). Decoding the whole frame then says what is wrong with it.
    pub fn parse(header: &Header, body: &[u8]) -> Option<DirectWriteHead> {
        if header.opcode != Opcode::DirectWrite as u16 || header.flags != 0 {
            return None;
        }
        let mut r = Reader::new(body.get(..Self::BYTES)?);
        let (transfer, offset, len) = (r.u64().ok()?, r.u64().ok()?, r.u32().ok()? as usize);
        let whole = len <= VALUE_INLINE_BYTES_MAX && Self::BYTES + len == header.body_len as usize;
        whole.then_some(DirectWriteHead { transfer, offset, len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::HEADER_BYTES;

    fn encode(request: &Request<'_>) -> BytesMut {
        let mut out = BytesMut::new();
        request.encode(9, &mut out);
        out
    }

    /// Decodes an encoded request, as a server would.
    fn decode(frame: &[u8]) -> Result<Request<'_>, ProtocolError> {
        let header = Header::parse(frame).expect("an encoded frame has a header");
        Request::decode(&header, &frame[HEADER_BYTES..])
    }

    fn invoke(flags: InvokeFlags, key: &'static [u8], value_size: u64) -> Request<'static> {
        Request::InvokeAdo { pool: PoolHandle(1), flags, key, payload: b"get", value_size }
    }

    fn invoke_put(flags: InvokeFlags, key: &'static [u8]) -> Request<'static> {
        Request::InvokePutAdo { pool: PoolHandle(1), flags, key, value: b"v", payload: b"add 1" }
    }

    /// Proves `from_bits` refuses unknown bits and a read lock beside a flag that writes, for
    /// either message, and keeps every defined bit otherwise.
    #[test]
    fn invoke_flags_refuse_unknown_bits_and_read_only_writes() {
        assert_eq!(InvokeFlags::from_bits(0x003F & !0x0006).map(InvokeFlags::bits), Ok(0x0039));
        for bits in [0x0040, 0x8000, 0x0002 | 0x0004, 0x0002 | 0x0010] {
            let error = InvokeFlags::from_bits(bits).expect_err("refused");
            assert!(matches!(error, ProtocolError::UnknownFlags { flags, .. } if flags == bits), "{error}");
            assert_eq!(error.code(), ErrorCode::InvalidArgument);
        }
        let flags = InvokeFlags::READ_ONLY.union(InvokeFlags::FIRE_AND_FORGET);
        assert!(flags.contains(InvokeFlags::READ_ONLY) && flags.contains(InvokeFlags::FIRE_AND_FORGET));
        assert!(!flags.contains(InvokeFlags::NONE));
    }

    /// Proves each message refuses the flags only the other defines, both when a client checks
    /// before sending and when a server decodes.
    #[test]
    fn flags_of_one_invocation_message_are_refused_on_the_other() {
        let refused = [
            invoke(InvokeFlags::NO_OVERWRITE, b"k", 0),
            invoke(InvokeFlags::DETACHED, b"k", 0),
            invoke_put(InvokeFlags::CREATE_ON_DEMAND, b"k"),
            invoke_put(InvokeFlags::READ_ONLY.union(InvokeFlags::DETACHED), b"k"),
        ];
        for request in &refused {
            assert!(
                matches!(request.check(&Limits::MAX), Err(ProtocolError::UnknownFlags { .. })),
                "{request:?} passes check"
            );
            assert!(matches!(decode(&encode(request)), Err(ProtocolError::UnknownFlags { .. })), "{request:?}");
        }
        let accepted = [
            invoke(InvokeFlags::CREATE_ON_DEMAND.union(InvokeFlags::ZERO_NEW_VALUE), b"k", 64),
            invoke(InvokeFlags::READ_ONLY.union(InvokeFlags::FIRE_AND_FORGET), b"", 0),
            invoke_put(InvokeFlags::NO_OVERWRITE.union(InvokeFlags::DETACHED), b"k"),
            invoke_put(InvokeFlags::READ_ONLY, b"k"),
        ];
        for request in &accepted {
            assert_eq!(request.check(&Limits::MAX), Ok(()));
            assert_eq!(decode(&encode(request)).as_ref(), Ok(request));
        }
    }

    /// Proves the key rules: a key-less invocation cannot create a value, a size needs
    /// create-on-demand, a created value obeys the value limit, and invoke_put_ado needs a key.
    #[test]
    fn invocation_keys_and_sizes_follow_their_rules() {
        let limits = Limits { key_bytes_max: 4, value_bytes_max: 10 };
        let invalid = |request: Request<'_>| {
            matches!(request.check(&limits), Err(ProtocolError::InvalidInvocation { .. }))
                && matches!(decode(&encode(&request)), Err(ProtocolError::InvalidInvocation { .. }))
        };
        assert!(invalid(invoke(InvokeFlags::CREATE_ON_DEMAND, b"", 8)));
        assert!(invalid(invoke(InvokeFlags::NONE, b"k", 8)));
        assert!(invalid(invoke_put(InvokeFlags::NONE, b"")));
        assert_eq!(invoke(InvokeFlags::CREATE_ON_DEMAND, b"k", 10).check(&limits), Ok(()));
        assert_eq!(
            invoke(InvokeFlags::CREATE_ON_DEMAND, b"k", 11).check(&limits),
            Err(ProtocolError::ValueTooLarge { len: 11, max: 10 })
        );
        assert_eq!(
            invoke(InvokeFlags::NONE, b"keyss", 0).check(&limits),
            Err(ProtocolError::KeyTooLarge { len: 5, max: 4 })
        );
    }

    /// Proves an invoke_put_ado's value and payload share the value limit: each fits alone but
    /// not together, locally and at decode, where the sum is checked before anything is sliced.
    #[test]
    fn invoke_put_value_and_payload_share_the_value_limit() {
        let limits = Limits { key_bytes_max: 4, value_bytes_max: 10 };
        let request = Request::InvokePutAdo {
            pool: PoolHandle(1),
            flags: InvokeFlags::NONE,
            key: b"k",
            value: b"123456",
            payload: b"12345",
        };
        assert_eq!(request.check(&limits), Err(ProtocolError::ValueTooLarge { len: 11, max: 10 }));

        let mut body = BytesMut::new();
        body.put_u64_le(1);
        body.put_u32_le(1);
        body.put_u32_le(VALUE_INLINE_BYTES_MAX as u32);
        body.put_u32_le(1);
        let header =
            Header { body_len: body.len() as u32, opcode: Opcode::InvokePutAdo as u16, flags: 0, request_id: 1 };
        assert_eq!(
            Request::decode(&header, &body),
            Err(ProtocolError::ValueTooLarge { len: VALUE_INLINE_BYTES_MAX + 1, max: VALUE_INLINE_BYTES_MAX })
        );
    }

    /// Proves one `Invoked` answers both messages, each with its own response opcode, and that
    /// both decode back to it.
    #[test]
    fn invoked_answers_carry_the_request_opcode() {
        let response = Response::Invoked {
            buffers: vec![InvokeBuffer { layer: 0, data: b"1" }, InvokeBuffer { layer: 1, data: b"" }],
        };
        for request in [Opcode::InvokeAdo, Opcode::InvokePutAdo] {
            let mut frame = BytesMut::new();
            response.encode_answer(request, 5, &mut frame);
            let header = Header::parse(&frame).expect("an encoded frame has a header");
            assert_eq!(header.opcode, request as u16 | 0x8000);
            assert_eq!(Response::decode(&header, &frame[HEADER_BYTES..]).as_ref(), Ok(&response));
        }
        let mut frame = BytesMut::new();
        Response::Stored.encode_answer(Opcode::InvokeAdo, 5, &mut frame);
        assert_eq!(Header::parse(&frame).map(|h| h.opcode), Some(0x8020), "other responses keep their opcode");
    }

    /// Proves a buffer count larger than the body can hold fails as truncated instead of
    /// reserving room for it.
    #[test]
    fn invoked_buffer_count_is_bounded_by_the_body() {
        let body = [0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0];
        let header = Header { body_len: 10, opcode: 0x8040, flags: 0, request_id: 1 };
        assert!(matches!(Response::decode(&header, &body), Err(ProtocolError::Truncated { .. })));
    }

    /// Decodes a request frame built by hand: `body` under a header of `opcode` and `flags`.
    fn decode_raw(opcode: Opcode, flags: u16, body: &[u8]) -> Result<Request<'_>, ProtocolError> {
        let header = Header { body_len: body.len() as u32, opcode: opcode as u16, flags, request_id: 1 };
        Request::decode(&header, body)
    }

    /// Proves every direct-transfer request and `put_offset` passes the client's check and
    /// decodes back to itself, flags included.
    #[test]
    fn direct_transfer_requests_round_trip() {
        let requests = [
            Request::PutDirect { pool: PoolHandle(1), flags: PutFlags::NONE, transfer: 1, length: 8 << 20, key: b"k" },
            Request::PutDirect {
                pool: PoolHandle(2),
                flags: PutFlags::UPDATE_ONLY.with_durability(Durability::Sync),
                transfer: u64::MAX,
                length: 0,
                key: b"key",
            },
            Request::DirectWrite { transfer: 1, offset: 2 << 20, bytes: b"piece" },
            Request::DirectWrite { transfer: 1, offset: 0, bytes: b"" },
            Request::GetDirect { pool: PoolHandle(1), transfer: 2, key: b"k" },
            Request::DirectRead { transfer: 2, offset: u64::MAX, length: VALUE_INLINE_BYTES_MAX as u32 },
            Request::EndTransfer { transfer: 1, flags: EndTransferFlags::COMMIT },
            Request::EndTransfer { transfer: 2, flags: EndTransferFlags::ABORT },
            Request::PutOffset { pool: PoolHandle(1), flags: PutFlags::NONE, offset: 4, key: b"k", bytes: b"xy" },
            Request::PutOffset { pool: PoolHandle(3), flags: PutFlags::SYNC, offset: 0, key: b"k", bytes: b"" },
            Request::PutOffset { pool: PoolHandle(3), flags: PutFlags::ASYNC, offset: 1 << 40, key: b"k", bytes: b"0" },
        ];
        for request in &requests {
            assert_eq!(request.check(&Limits::MAX), Ok(()), "{request:?}");
            assert_eq!(decode(&encode(request)).as_ref(), Ok(request));
        }
        assert!(EndTransferFlags::ABORT.aborts() && !EndTransferFlags::COMMIT.aborts());
    }

    /// Proves what the decoder refuses of the new messages: `put_offset` with a flag other than a
    /// durability, an unknown `end_transfer` bit, flags on `direct_write` and `get_direct`, and a
    /// `direct_read` or `direct_write` over the value limit (checked before anything is sliced).
    /// The client's check refuses the same before sending, against the server's own limits.
    #[test]
    fn direct_transfer_requests_refuse_bad_flags_and_lengths() {
        let unknown_flags = |result: Result<Request<'_>, ProtocolError>| {
            let error = result.expect_err("refused");
            matches!(error, ProtocolError::UnknownFlags { .. }) && error.code() == ErrorCode::InvalidArgument
        };
        let put_offset_body =
            [&1u64.to_le_bytes()[..], &0u64.to_le_bytes(), &1u32.to_le_bytes(), &1u32.to_le_bytes(), b"kv"].concat();
        for flags in [PutFlags::CREATE_ONLY, PutFlags::UPDATE_ONLY.with_durability(Durability::Sync)] {
            let request = Request::PutOffset { pool: PoolHandle(1), flags, offset: 0, key: b"k", bytes: b"v" };
            assert!(matches!(request.check(&Limits::MAX), Err(ProtocolError::UnknownFlags { .. })), "{request:?}");
            assert!(unknown_flags(decode(&encode(&request))), "{request:?}");
            assert!(unknown_flags(decode_raw(Opcode::PutOffset, flags.bits(), &put_offset_body)));
        }
        assert!(unknown_flags(decode_raw(Opcode::PutOffset, 0x000C, &put_offset_body)), "sync with async");

        let transfer = 7u64.to_le_bytes();
        assert!(unknown_flags(decode_raw(Opcode::EndTransfer, 0x0002, &transfer)));
        assert!(matches!(EndTransferFlags::from_bits(0x8001), Err(ProtocolError::UnknownFlags { flags: 0x8001, .. })));
        let piece = [&transfer[..], &0u64.to_le_bytes(), &1u32.to_le_bytes(), b"v"].concat();
        assert!(unknown_flags(decode_raw(Opcode::DirectWrite, 0x0001, &piece)));
        let open = [&1u64.to_le_bytes()[..], &transfer, &1u32.to_le_bytes(), b"k"].concat();
        assert!(unknown_flags(decode_raw(Opcode::GetDirect, 0x0001, &open)));

        let over = (VALUE_INLINE_BYTES_MAX + 1) as u32;
        let too_large = Err(ProtocolError::ValueTooLarge { len: over as usize, max: VALUE_INLINE_BYTES_MAX });
        let read = [&transfer[..], &0u64.to_le_bytes(), &over.to_le_bytes()].concat();
        assert_eq!(decode_raw(Opcode::DirectRead, 0, &read), too_large);
        let write = [&transfer[..], &0u64.to_le_bytes(), &over.to_le_bytes()].concat();
        assert_eq!(decode_raw(Opcode::DirectWrite, 0, &write), too_large);

        let limits = Limits { key_bytes_max: 4, value_bytes_max: 10 };
        let read = Request::DirectRead { transfer: 1, offset: 0, length: 11 };
        assert_eq!(read.check(&limits), Err(ProtocolError::ValueTooLarge { len: 11, max: 10 }));
        let write = Request::DirectWrite { transfer: 1, offset: 0, bytes: b"12345678901" };
        assert_eq!(write.check(&limits), Err(ProtocolError::ValueTooLarge { len: 11, max: 10 }));
        let open = Request::GetDirect { pool: PoolHandle(1), transfer: 1, key: b"keyss" };
        assert_eq!(open.check(&limits), Err(ProtocolError::KeyTooLarge { len: 5, max: 4 }));
    }

    /// Proves a response's head followed by the bytes it leaves out is exactly its whole frame,
    /// for a value (a get's and a direct read's) and for a response without one.
    #[test]
    fn a_head_and_its_value_make_the_whole_frame() {
        let value = vec![0x5A; 70_000];
        let answers = [
            (Response::Value(&value), Opcode::Get),
            (Response::Value(&value), Opcode::DirectRead),
            (Response::Value(b""), Opcode::Get),
            (Response::Stored, Opcode::PutOffset),
        ];
        for (response, request) in &answers {
            let mut whole = BytesMut::new();
            response.encode_answer(*request, 9, &mut whole);
            let mut split = BytesMut::from(&b"earlier"[..]);
            let rest = response.encode_answer_head(*request, 9, &mut split);
            split.extend_from_slice(rest);
            assert_eq!(&split[..7], b"earlier", "appended after what the buffer held");
            assert_eq!(split[7..], whole[..], "{request:?}");
        }
    }

    /// Proves the responses of direct transfers carry the opcode of the request they answer:
    /// `TransferOpened` both opens, `Value` a `direct_read`, `Stored` a `put_offset`; and that
    /// each decodes back to itself.
    #[test]
    fn direct_transfer_answers_carry_the_request_opcode() {
        let answers = [
            (Response::TransferOpened { length: 8 << 20 }, Opcode::PutDirect, 0x8026),
            (Response::TransferOpened { length: 0 }, Opcode::GetDirect, 0x8028),
            (Response::Written, Opcode::DirectWrite, 0x8027),
            (Response::Value(b"piece"), Opcode::DirectRead, 0x8029),
            (Response::TransferEnded, Opcode::EndTransfer, 0x802A),
            (Response::Stored, Opcode::PutOffset, 0x802B),
        ];
        for (response, request, opcode) in &answers {
            let mut frame = BytesMut::new();
            response.encode_answer(*request, 5, &mut frame);
            let header = Header::parse(&frame).expect("an encoded frame has a header");
            assert_eq!(header.opcode, *opcode, "{response:?}");
            assert_eq!(Response::decode(&header, &frame[HEADER_BYTES..]).as_ref(), Ok(response));
        }
        let mut frame = BytesMut::new();
        Response::TransferOpened { length: 1 }.encode(5, &mut frame);
        assert_eq!(Header::parse(&frame).map(|h| h.opcode), Some(0x8028), "on its own it answers get_direct");
        let truncated = Header { body_len: 4, opcode: 0x8026, flags: 0, request_id: 5 };
        assert!(matches!(Response::decode(&truncated, &[0; 4]), Err(ProtocolError::Truncated { .. })));
    }

    /// A `direct_write`'s fields read from the start of its body are the ones the whole frame
    /// decodes to; a frame the decoder would refuse, or whose fields have not all arrived, has
    /// none.
    #[test]
    fn a_direct_write_head_is_what_the_whole_frame_decodes_to() {
        let piece = vec![9u8; 70_000];
        let mut frame = BytesMut::new();
        Request::DirectWrite { transfer: 7, offset: 1 << 20, bytes: &piece }.encode(3, &mut frame);
        let header = Header::parse(&frame).expect("a header");
        let body = &frame[HEADER_BYTES..];
        let head = DirectWriteHead::parse(&header, &body[..DirectWriteHead::BYTES]).expect("the fields");
        assert_eq!(head, DirectWriteHead { transfer: 7, offset: 1 << 20, len: piece.len() });
        let Ok(Request::DirectWrite { transfer, offset, bytes }) = Request::decode(&header, body) else {
            panic!("a direct_write")
        };
        assert_eq!((transfer, offset, bytes.len()), (head.transfer, head.offset, head.len));

        assert_eq!(DirectWriteHead::parse(&header, &body[..DirectWriteHead::BYTES - 1]), None, "not arrived");
        let flagged = Header { flags: 1, ..header };
        assert_eq!(DirectWriteHead::parse(&flagged, body), None, "flags");
        assert!(Request::decode(&flagged, body).is_err());
        let longer = Header { body_len: header.body_len + 1, ..header };
        assert_eq!(DirectWriteHead::parse(&longer, body), None, "a body longer than the fields and the piece");
        let read = Header { opcode: Opcode::DirectRead as u16, ..header };
        assert_eq!(DirectWriteHead::parse(&read, body), None, "another request");
        let over = (VALUE_INLINE_BYTES_MAX + 1) as u32;
        let fields = [&7u64.to_le_bytes()[..], &0u64.to_le_bytes(), &over.to_le_bytes()].concat();
        let too_long = Header { body_len: (DirectWriteHead::BYTES + over as usize) as u32, ..header };
        assert_eq!(DirectWriteHead::parse(&too_long, &fields), None, "past the inline value limit");
    }
}
