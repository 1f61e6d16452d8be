//! The client's one error type.

use ferrite_proto::{ErrorCode, ProtocolError};

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a client call.
///
/// Failures reported by the server keep their stable wire [`ErrorCode`] so callers can branch on
/// them ([`Error::code`], [`Error::is_key_not_found`], ...) rather than on message text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The network failed: connecting, reading or writing. `context` says what we were doing and
    /// with which address, because a bare "connection refused" does not say to whom.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    /// No TCP connection to the shard at `address` could be made: refused, unreachable, or not
    /// made within the connect timeout. Nothing answered there ([`Error::is_unreachable`]).
    #[error("connecting to {address}: {source}")]
    Unreachable {
        address: String,
        #[source]
        source: std::io::Error,
    },

    /// The shard at `address` answered, but TLS with it failed: `problem` says why in a sentence
    /// (the server's certificate expired, names other hosts, was not signed by the CA this client
    /// trusts, is a CA's own; the server wants a client certificate; ...).
    #[error("TLS with {address}: {problem}")]
    Tls { address: String, problem: String },

    /// The shard at `address` speaks TLS and this client connected in clear: it answered the
    /// handshake with a TLS alert. Connect with [`ClientOptions::tls`](crate::ClientOptions::tls)
    /// ([`Error::is_tls_required`]).
    #[error(
        "{address} speaks TLS and this client connected in clear: connect with TLS, trusting the CA that signed the \
         server's certificate"
    )]
    TlsRequired { address: String },

    /// The server answered the request with an error frame. The request had no effect.
    #[error("{}", server_error_text(*code, message))]
    Server { code: ErrorCode, message: String },

    /// In a cluster: the node that answered does not lead the group of the request's shard, and
    /// the request had no effect ([`Error::is_not_leader`], code [`ErrorCode::NotLeader`]). A
    /// session follows these to the leader by itself, up to
    /// [`REDIRECTS_MAX`](crate::REDIRECTS_MAX) times per request; one that reaches the caller
    /// means the leader stayed unknown (an election that did not end) or kept moving.
    #[error("{}", server_error_text(ErrorCode::NotLeader, &.0.message))]
    NotLeader(Box<ferrite_proto::NotLeader>),

    /// The request breaks a protocol limit (key or value too large for this server, bad pool
    /// name). Checked before sending, so it fails with the same code the server would give,
    /// without a round trip and without shipping megabytes the server would discard.
    #[error("{0}")]
    Protocol(ProtocolError),

    /// The connection to the shard is gone. Every request outstanding on it, and every later
    /// request on it, fails this way; the text carries the cause. Pool handles die with their
    /// connection, so reopen the pool (the session reconnects by itself).
    #[error("{0}")]
    ConnectionClosed(String),

    /// The server sent something this client cannot make sense of: a reply of the wrong type, an
    /// undecodable body, an unknown request id. Points at a bug or a version mismatch.
    #[error("unexpected response from the server: {0}")]
    UnexpectedResponse(String),

    /// An argument was rejected before anything was sent (an address that does not parse, a pool
    /// size of zero, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

fn server_error_text(code: ErrorCode, message: &str) -> String {
    if message.is_empty() {
        format!("{code}: {}", code.description())
    } else {
        format!("{code}: {message}")
    }
}

impl Error {
    /// The wire error code this error corresponds to, if any. Local limit checks report the code
    /// the server would have answered with, so callers need not care where the check happened.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Server { code, .. } => Some(*code),
            Error::NotLeader(_) => Some(ErrorCode::NotLeader),
            Error::Protocol(error) => Some(error.code()),
            Error::InvalidArgument(_) => Some(ErrorCode::InvalidArgument),
            Error::Io { .. }
            | Error::Unreachable { .. }
            | Error::Tls { .. }
            | Error::TlsRequired { .. }
            | Error::ConnectionClosed(_)
            | Error::UnexpectedResponse(_) => None,
        }
    }

    /// The key does not exist (or an update-only put found it absent).
    pub fn is_key_not_found(&self) -> bool {
        self.code() == Some(ErrorCode::KeyNotFound)
    }

    /// No pool of that name exists.
    pub fn is_pool_not_found(&self) -> bool {
        self.code() == Some(ErrorCode::PoolNotFound)
    }

    /// Either a key or a pool was not found.
    pub fn is_not_found(&self) -> bool {
        self.is_key_not_found() || self.is_pool_not_found()
    }

    /// A create-only put found the key present.
    pub fn is_key_exists(&self) -> bool {
        self.code() == Some(ErrorCode::KeyExists)
    }

    /// A create-only `create_pool` found the pool present.
    pub fn is_pool_exists(&self) -> bool {
        self.code() == Some(ErrorCode::PoolExists)
    }

    /// A plugin failed the invocation, crashed, or its host process died; the pool is as it was
    /// before the call, and the message carries the plugin's reason.
    pub fn is_ado_failed(&self) -> bool {
        self.code() == Some(ErrorCode::AdoFailed)
    }

    /// An invocation passed its deadline; its host process was stopped and the pool is as it
    /// was before the call.
    pub fn is_ado_timeout(&self) -> bool {
        self.code() == Some(ErrorCode::AdoTimeout)
    }

    /// The server requires a user and the handshake named none, an unknown one, or the wrong
    /// password.
    pub fn is_authentication_failed(&self) -> bool {
        self.code() == Some(ErrorCode::AuthenticationFailed)
    }

    /// The user has no grant for this operation on this pool; nothing was changed.
    pub fn is_permission_denied(&self) -> bool {
        self.code() == Some(ErrorCode::PermissionDenied)
    }

    /// The user's quota (connections, pools or pool bytes) does not allow this.
    pub fn is_quota_exceeded(&self) -> bool {
        self.code() == Some(ErrorCode::QuotaExceeded)
    }

    /// In a cluster: the node does not lead the request's group and the session could not reach
    /// the one that does within its redirects (see [`Error::NotLeader`]).
    pub fn is_not_leader(&self) -> bool {
        self.code() == Some(ErrorCode::NotLeader)
    }

    /// Nothing answered at the shard's address: the TCP connection was refused, the host is
    /// unreachable, or the connection was not made in time. (An answer that went wrong is
    /// another error: [`Error::Tls`], [`Error::TlsRequired`], a server error.)
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Error::Unreachable { .. })
    }

    /// The server speaks TLS and this client connected in clear.
    pub fn is_tls_required(&self) -> bool {
        matches!(self, Error::TlsRequired { .. })
    }

    /// The connection to the shard failed or was closed.
    pub fn is_connection_closed(&self) -> bool {
        matches!(self, Error::ConnectionClosed(_))
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io { context: context.into(), source }
    }
}

impl From<ProtocolError> for Error {
    fn from(error: ProtocolError) -> Self {
        Error::Protocol(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_errors_show_code_name_and_message() {
        let error = Error::Server { code: ErrorCode::KeyNotFound, message: "no key 'k'".into() };
        assert_eq!(error.to_string(), "key_not_found: no key 'k'");
        assert!(error.is_key_not_found());
        assert!(error.is_not_found());
        assert!(!error.is_pool_not_found());
    }

    #[test]
    fn plugin_failures_are_told_apart() {
        let failed = Error::Server { code: ErrorCode::AdoFailed, message: "plugin 'faulty' panicked".into() };
        assert!(failed.is_ado_failed() && !failed.is_ado_timeout());
        assert_eq!(failed.to_string(), "ado_failed: plugin 'faulty' panicked");
        let timeout = Error::Server { code: ErrorCode::AdoTimeout, message: String::new() };
        assert!(timeout.is_ado_timeout() && !timeout.is_ado_failed());
    }

    #[test]
    fn a_refusal_by_a_follower_carries_the_not_leader_code() {
        let refusal =
            ferrite_proto::NotLeader { group: 2, message: "node 1 does not lead group 2".into(), ..Default::default() };
        let error = Error::NotLeader(Box::new(refusal));
        assert!(error.is_not_leader());
        assert_eq!(error.code(), Some(ErrorCode::NotLeader));
        assert_eq!(error.to_string(), "not_leader: node 1 does not lead group 2");
    }

    #[test]
    fn empty_server_message_falls_back_to_the_code_description() {
        let error = Error::Server { code: ErrorCode::PoolInUse, message: String::new() };
        assert_eq!(error.to_string(), "pool_in_use: the pool is open by a session");
    }

    #[test]
    fn local_limit_checks_carry_the_code_the_server_would_send() {
        let error = Error::from(ProtocolError::KeyTooLarge { len: 10, max: 4 });
        assert_eq!(error.code(), Some(ErrorCode::KeyTooLarge));
        assert_eq!(error.to_string(), "key of 10 bytes exceeds the limit of 4");

        let error = Error::from(ProtocolError::EmptyPoolName);
        assert_eq!(error.code(), Some(ErrorCode::InvalidArgument));
    }

    #[test]
    fn transport_errors_have_no_code() {
        let error = Error::ConnectionClosed("connection to 127.0.0.1:1 closed: reset".into());
        assert_eq!(error.code(), None);
        assert!(error.is_connection_closed());
        let refused = Error::Unreachable {
            address: "127.0.0.1:1".to_owned(),
            source: std::io::ErrorKind::ConnectionRefused.into(),
        };
        assert_eq!(refused.code(), None);
        assert!(refused.is_unreachable() && !refused.is_tls_required());
        assert!(refused.to_string().starts_with("connecting to 127.0.0.1:1: "));
        let clear = Error::TlsRequired { address: "127.0.0.1:2".to_owned() };
        assert!(clear.is_tls_required() && !clear.is_unreachable());
        assert!(clear.to_string().starts_with("127.0.0.1:2 speaks TLS and this client connected in clear"));
    }
}
