//! Error codes carried on the wire, and the errors of decoding.

use std::fmt;

/// A stable numeric error code. Codes are never renumbered; new ones are appended. Every client
/// mirrors this table (see `docs/protocol.md`, "Error codes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u16)]
pub enum ErrorCode {
    /// The frame body does not match the layout its opcode demands.
    MalformedFrame = 1,
    /// The opcode is not one this server knows.
    UnknownOpcode = 2,
    /// The frame body is longer than the server accepts; the body was skipped.
    FrameTooLarge = 3,
    KeyTooLarge = 4,
    ValueTooLarge = 5,
    /// A request arrived before a successful handshake.
    HandshakeRequired = 6,
    /// The client speaks a protocol version this server does not.
    UnsupportedVersion = 7,
    PoolNotFound = 8,
    PoolExists = 9,
    /// The pool is open by at least one session and cannot be deleted.
    PoolInUse = 10,
    /// The pool handle is not open in this session.
    PoolNotOpen = 11,
    TooManyPools = 12,
    KeyNotFound = 13,
    /// A create-only put found the key already present.
    KeyExists = 14,
    /// The pool has no room for the value.
    PoolFull = 15,
    TooManyConnections = 16,
    /// The pool belongs to another shard; the message names it.
    WrongShard = 17,
    InvalidArgument = 18,
    Internal = 19,
    ShuttingDown = 20,
    /// The server's disk has no room for the write-ahead log. Nothing was written; writes succeed
    /// again once space is freed.
    NoSpace = 21,
    /// The shard's write-ahead log failed (an I/O error): the shard refuses writes until the
    /// server is restarted. Acknowledged writes are safe.
    StorageFailed = 22,
    /// An Active Data Object plugin failed the call, crashed, or its host process died. The pool
    /// is as it was before the call; the message carries the plugin's reason.
    AdoFailed = 23,
    /// An invocation passed its deadline. Its host process was stopped and the pool is as it was
    /// before the call.
    AdoTimeout = 24,
    /// The `hello` named no user, an unknown one, or the wrong password, on a server that
    /// requires authentication. The connection is closed.
    AuthenticationFailed = 25,
    /// The session's user has no grant for this operation on this pool; nothing was changed.
    PermissionDenied = 26,
    /// The operation would take the session's user past its quota (connections, pools or pool
    /// bytes); nothing was changed.
    QuotaExceeded = 27,
    /// This node does not lead the group of the request's shard (or leads it without a valid
    /// lease); nothing was changed. Carried by a `not_leader` frame, which names the leader.
    NotLeader = 28,
}

impl ErrorCode {
    /// Every code, in numeric order.
    pub const ALL: [ErrorCode; 28] = [
        ErrorCode::MalformedFrame,
        ErrorCode::UnknownOpcode,
        ErrorCode::FrameTooLarge,
        ErrorCode::KeyTooLarge,
        ErrorCode::ValueTooLarge,
        ErrorCode::HandshakeRequired,
        ErrorCode::UnsupportedVersion,
        ErrorCode::PoolNotFound,
        ErrorCode::PoolExists,
        ErrorCode::PoolInUse,
        ErrorCode::PoolNotOpen,
        ErrorCode::TooManyPools,
        ErrorCode::KeyNotFound,
        ErrorCode::KeyExists,
        ErrorCode::PoolFull,
        ErrorCode::TooManyConnections,
        ErrorCode::WrongShard,
        ErrorCode::InvalidArgument,
        ErrorCode::Internal,
        ErrorCode::ShuttingDown,
        ErrorCode::NoSpace,
        ErrorCode::StorageFailed,
        ErrorCode::AdoFailed,
        ErrorCode::AdoTimeout,
        ErrorCode::AuthenticationFailed,
        ErrorCode::PermissionDenied,
        ErrorCode::QuotaExceeded,
        ErrorCode::NotLeader,
    ];

    pub fn as_u16(self) -> u16 {
        self as u16
    }

    pub fn from_u16(code: u16) -> Option<ErrorCode> {
        ErrorCode::ALL.iter().copied().find(|c| c.as_u16() == code)
    }

    /// The stable snake_case name used in docs, JSON output and other clients.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::MalformedFrame => "malformed_frame",
            ErrorCode::UnknownOpcode => "unknown_opcode",
            ErrorCode::FrameTooLarge => "frame_too_large",
            ErrorCode::KeyTooLarge => "key_too_large",
            ErrorCode::ValueTooLarge => "value_too_large",
            ErrorCode::HandshakeRequired => "handshake_required",
            ErrorCode::UnsupportedVersion => "unsupported_version",
            ErrorCode::PoolNotFound => "pool_not_found",
            ErrorCode::PoolExists => "pool_exists",
            ErrorCode::PoolInUse => "pool_in_use",
            ErrorCode::PoolNotOpen => "pool_not_open",
            ErrorCode::TooManyPools => "too_many_pools",
            ErrorCode::KeyNotFound => "key_not_found",
            ErrorCode::KeyExists => "key_exists",
            ErrorCode::PoolFull => "pool_full",
            ErrorCode::TooManyConnections => "too_many_connections",
            ErrorCode::WrongShard => "wrong_shard",
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::Internal => "internal",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::NoSpace => "no_space",
            ErrorCode::StorageFailed => "storage_failed",
            ErrorCode::AdoFailed => "ado_failed",
            ErrorCode::AdoTimeout => "ado_timeout",
            ErrorCode::AuthenticationFailed => "authentication_failed",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::QuotaExceeded => "quota_exceeded",
            ErrorCode::NotLeader => "not_leader",
        }
    }

    /// A human description of the code, used when no more specific message is at hand.
    pub fn description(self) -> &'static str {
        match self {
            ErrorCode::MalformedFrame => "the frame body does not match its message layout",
            ErrorCode::UnknownOpcode => "unknown message type",
            ErrorCode::FrameTooLarge => "frame larger than the server accepts",
            ErrorCode::KeyTooLarge => "key larger than the server accepts",
            ErrorCode::ValueTooLarge => "value larger than the server accepts inline",
            ErrorCode::HandshakeRequired => "the connection must start with a hello",
            ErrorCode::UnsupportedVersion => "unsupported protocol version",
            ErrorCode::PoolNotFound => "no such pool",
            ErrorCode::PoolExists => "the pool already exists",
            ErrorCode::PoolInUse => "the pool is open by a session",
            ErrorCode::PoolNotOpen => "the pool handle is not open in this session",
            ErrorCode::TooManyPools => "the shard holds as many pools as it may",
            ErrorCode::KeyNotFound => "no such key",
            ErrorCode::KeyExists => "the key already exists",
            ErrorCode::PoolFull => "the pool has no room for the value",
            ErrorCode::TooManyConnections => "the shard serves as many connections as it may",
            ErrorCode::WrongShard => "the pool belongs to another shard",
            ErrorCode::InvalidArgument => "invalid argument",
            ErrorCode::Internal => "internal server error",
            ErrorCode::ShuttingDown => "the server is shutting down",
            ErrorCode::NoSpace => "no space left for the write-ahead log; nothing was written",
            ErrorCode::StorageFailed => "the shard's write-ahead log failed; writes are refused until restart",
            ErrorCode::AdoFailed => "the plugin failed; the pool is as before the call",
            ErrorCode::AdoTimeout => "the invocation passed its deadline; the pool is as before the call",
            ErrorCode::AuthenticationFailed => "authentication failed: unknown user or wrong password",
            ErrorCode::PermissionDenied => "the user has no grant for this operation on this pool",
            ErrorCode::QuotaExceeded => "the user's quota does not allow this",
            ErrorCode::NotLeader => "this node does not lead the shard's group; nothing was changed",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a frame could not be decoded. Each maps to the [`ErrorCode`] the server answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    #[error("frame body ends after {have} bytes but its layout needs {need}")]
    Truncated { need: usize, have: usize },
    #[error("frame body has {extra} bytes after the end of its message")]
    TrailingBytes { extra: usize },
    #[error("unknown opcode {0:#06x}")]
    UnknownOpcode(u16),
    #[error("unknown flag bits {flags:#06x} for {message}")]
    UnknownFlags { message: &'static str, flags: u16 },
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 { field: &'static str },
    #[error("frame body of {len} bytes exceeds the limit of {max}")]
    FrameTooLarge { len: usize, max: usize },
    #[error("key of {len} bytes exceeds the limit of {max}")]
    KeyTooLarge { len: usize, max: usize },
    #[error("value of {len} bytes exceeds the limit of {max}")]
    ValueTooLarge { len: usize, max: usize },
    #[error("pool name of {len} bytes exceeds the limit of {max}")]
    PoolNameTooLong { len: usize, max: usize },
    #[error("pool name must not be empty")]
    EmptyPoolName,
    #[error("unknown attribute {0}")]
    UnknownAttribute(u16),
    #[error("unknown find kind {0}")]
    UnknownFindKind(u16),
    #[error("find limit {0} is outside 1 to 1024")]
    InvalidFindLimit(u64),
    #[error("unknown error code {0}")]
    UnknownErrorCode(u16),
    #[error("hello does not carry the Ferrite magic number")]
    BadMagic,
    #[error("invalid invocation: {reason}")]
    InvalidInvocation { reason: &'static str },
    #[error("plugin chain {chain:?} is invalid: {reason}")]
    InvalidPluginChain { chain: String, reason: &'static str },
    #[error("backup directory {dir:?} is not an absolute path")]
    RelativeBackupDir { dir: String },
    #[error("unknown {field} {value}")]
    InvalidField { field: &'static str, value: u64 },
    #[error("{count} {what} exceed the limit of {max}")]
    TooManyEntries { what: &'static str, count: usize, max: usize },
    #[error("{field} of {len} bytes exceeds the limit of {max}")]
    FieldTooLong { field: &'static str, len: usize, max: usize },
    #[error("invalid cluster message: {reason}")]
    InvalidCluster { reason: &'static str },
}

impl ProtocolError {
    /// The code a server answers with when a request fails to decode this way.
    pub fn code(&self) -> ErrorCode {
        match self {
            ProtocolError::UnknownOpcode(_) => ErrorCode::UnknownOpcode,
            ProtocolError::FrameTooLarge { .. } => ErrorCode::FrameTooLarge,
            ProtocolError::KeyTooLarge { .. } => ErrorCode::KeyTooLarge,
            ProtocolError::ValueTooLarge { .. } => ErrorCode::ValueTooLarge,
            ProtocolError::UnknownFlags { .. }
            | ProtocolError::PoolNameTooLong { .. }
            | ProtocolError::EmptyPoolName
            | ProtocolError::UnknownAttribute(_)
            | ProtocolError::UnknownFindKind(_)
            | ProtocolError::InvalidFindLimit(_)
            | ProtocolError::InvalidPluginChain { .. }
            | ProtocolError::RelativeBackupDir { .. }
            | ProtocolError::InvalidInvocation { .. }
            | ProtocolError::TooManyEntries { .. }
            | ProtocolError::FieldTooLong { .. }
            | ProtocolError::InvalidCluster { .. } => ErrorCode::InvalidArgument,
            ProtocolError::Truncated { .. }
            | ProtocolError::TrailingBytes { .. }
            | ProtocolError::InvalidUtf8 { .. }
            | ProtocolError::UnknownErrorCode(_)
            | ProtocolError::InvalidField { .. }
            | ProtocolError::BadMagic => ErrorCode::MalformedFrame,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_dense() {
        for (index, code) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(code.as_u16() as usize, index + 1);
            assert_eq!(ErrorCode::from_u16(code.as_u16()), Some(*code));
        }
        assert_eq!(ErrorCode::from_u16(0), None);
        assert_eq!(ErrorCode::from_u16(ErrorCode::ALL.len() as u16 + 1), None);
    }

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = ErrorCode::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ErrorCode::ALL.len());
    }
}
