//! Status codes, the calling thread's last error message, and the guard every entry point runs
//! in so that no panic unwinds into C.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use ferrite_client::{Error, ErrorCode};

/// What a libferrite call returned.
///
/// `FERRITE_OK` is success. Codes 1 to 999 are the server's wire error codes, with the same
/// numbers as on the wire (docs/protocol.md, "Error codes"), so C code can compare them with
/// what other clients report; a request this library refuses before sending because it breaks
/// the server's limits (a key too large, say) gets the code the server would have answered with.
/// Codes from 1000 are failures on the client side that have no wire code. After any status
/// other than `FERRITE_OK` and `FERRITE_PENDING`, `ferrite_last_error()` describes it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ferrite_status {
    /// Success.
    FERRITE_OK = 0,
    /// The frame body does not match the layout its opcode demands.
    FERRITE_MALFORMED_FRAME = 1,
    /// The opcode is not one the server knows.
    FERRITE_UNKNOWN_OPCODE = 2,
    /// The frame body is longer than the server accepts.
    FERRITE_FRAME_TOO_LARGE = 3,
    /// The key is longer than the server accepts.
    FERRITE_KEY_TOO_LARGE = 4,
    /// The value is longer than the server accepts.
    FERRITE_VALUE_TOO_LARGE = 5,
    /// A request arrived before a successful handshake.
    FERRITE_HANDSHAKE_REQUIRED = 6,
    /// The server does not speak this client's protocol version.
    FERRITE_UNSUPPORTED_VERSION = 7,
    /// No pool of that name exists.
    FERRITE_POOL_NOT_FOUND = 8,
    /// A create-only pool creation found the pool present.
    FERRITE_POOL_EXISTS = 9,
    /// The pool is open by at least one session and cannot be deleted.
    FERRITE_POOL_IN_USE = 10,
    /// The pool handle is not open in this session.
    FERRITE_POOL_NOT_OPEN = 11,
    /// The shard holds as many pools as it may.
    FERRITE_TOO_MANY_POOLS = 12,
    /// The key does not exist (or an update-only put found it absent).
    FERRITE_KEY_NOT_FOUND = 13,
    /// A create-only put found the key present.
    FERRITE_KEY_EXISTS = 14,
    /// The pool has no room for the value.
    FERRITE_POOL_FULL = 15,
    /// The shard serves as many connections as it may.
    FERRITE_TOO_MANY_CONNECTIONS = 16,
    /// The pool belongs to another shard.
    FERRITE_WRONG_SHARD = 17,
    /// The server (or the client, checking the server's rules before sending) refused an
    /// argument: an empty pool name, a pool size of zero, a regular expression that does not
    /// compile, a plugin call on a pool without plugins. Compare `FERRITE_ERR_INVALID_ARGUMENT`,
    /// a misuse of the C API itself.
    FERRITE_INVALID_ARGUMENT = 18,
    /// The server failed internally.
    FERRITE_INTERNAL = 19,
    /// The server is shutting down.
    FERRITE_SHUTTING_DOWN = 20,
    /// The server's disk has no room for its write-ahead log; nothing was written.
    FERRITE_NO_SPACE = 21,
    /// The shard's write-ahead log failed; it refuses writes until the server restarts.
    FERRITE_STORAGE_FAILED = 22,
    /// A plugin failed the call, crashed, or its host process died; the pool is as before.
    FERRITE_ADO_FAILED = 23,
    /// A plugin call passed its deadline; the pool is as before.
    FERRITE_ADO_TIMEOUT = 24,
    /// Unknown user or wrong password, on a server that requires authentication.
    FERRITE_AUTHENTICATION_FAILED = 25,
    /// The user has no grant for this operation on this pool; nothing was changed.
    FERRITE_PERMISSION_DENIED = 26,
    /// The user's quota (connections, pools or pool bytes) does not allow this.
    FERRITE_QUOTA_EXCEEDED = 27,
    /// In a cluster: the node does not lead the request's group, and the session could not
    /// reach the one that does within its redirects (the leader stayed unknown or kept moving).
    /// Nothing was changed.
    FERRITE_NOT_LEADER = 28,
    /// The network failed (connecting, reading, writing, TLS), or a connect timed out.
    FERRITE_ERR_IO = 1001,
    /// The connection to the shard is gone. Pools opened on it must be reopened; the session
    /// reconnects by itself on its next call.
    FERRITE_ERR_CLOSED = 1002,
    /// The server sent something this client cannot make sense of (a version mismatch or a bug),
    /// including a wire error code newer than this library.
    FERRITE_ERR_PROTOCOL = 1003,
    /// The C call itself is wrong: a NULL pointer where one is required, a string that is not
    /// UTF-8, unknown or contradictory flag bits, an operation that does not apply.
    FERRITE_ERR_INVALID_ARGUMENT = 1004,
    /// `ferrite_get_into`: the value is larger than the caller's buffer; the needed length was
    /// stored and nothing was copied.
    FERRITE_ERR_BUFFER_TOO_SMALL = 1005,
    /// A bug in libferrite: a Rust panic was caught at the C boundary. The message says where.
    FERRITE_ERR_INTERNAL = 1006,
    /// An asynchronous operation has not finished yet (`ferrite_op_poll`, `ferrite_op_wait`).
    /// Not an error, and not a final status.
    FERRITE_PENDING = -1,
}

use ferrite_status::*;

/// Every status, for tests and for `ferrite_status_name`.
pub(crate) const ALL_STATUSES: [ferrite_status; 36] = [
    FERRITE_OK,
    FERRITE_MALFORMED_FRAME,
    FERRITE_UNKNOWN_OPCODE,
    FERRITE_FRAME_TOO_LARGE,
    FERRITE_KEY_TOO_LARGE,
    FERRITE_VALUE_TOO_LARGE,
    FERRITE_HANDSHAKE_REQUIRED,
    FERRITE_UNSUPPORTED_VERSION,
    FERRITE_POOL_NOT_FOUND,
    FERRITE_POOL_EXISTS,
    FERRITE_POOL_IN_USE,
    FERRITE_POOL_NOT_OPEN,
    FERRITE_TOO_MANY_POOLS,
    FERRITE_KEY_NOT_FOUND,
    FERRITE_KEY_EXISTS,
    FERRITE_POOL_FULL,
    FERRITE_TOO_MANY_CONNECTIONS,
    FERRITE_WRONG_SHARD,
    FERRITE_INVALID_ARGUMENT,
    FERRITE_INTERNAL,
    FERRITE_SHUTTING_DOWN,
    FERRITE_NO_SPACE,
    FERRITE_STORAGE_FAILED,
    FERRITE_ADO_FAILED,
    FERRITE_ADO_TIMEOUT,
    FERRITE_AUTHENTICATION_FAILED,
    FERRITE_PERMISSION_DENIED,
    FERRITE_QUOTA_EXCEEDED,
    FERRITE_NOT_LEADER,
    FERRITE_ERR_IO,
    FERRITE_ERR_CLOSED,
    FERRITE_ERR_PROTOCOL,
    FERRITE_ERR_INVALID_ARGUMENT,
    FERRITE_ERR_BUFFER_TOO_SMALL,
    FERRITE_ERR_INTERNAL,
    FERRITE_PENDING,
];

impl ferrite_status {
    /// The status for a wire error code. A code newer than this library (the enum is
    /// non-exhaustive) cannot be named in C, so it becomes `FERRITE_ERR_PROTOCOL` and the message
    /// keeps its name; `tests::every_wire_code_has_its_own_status` catches a code added to the
    /// protocol but not here.
    pub(crate) fn from_code(code: ErrorCode) -> ferrite_status {
        match code {
            ErrorCode::MalformedFrame => FERRITE_MALFORMED_FRAME,
            ErrorCode::UnknownOpcode => FERRITE_UNKNOWN_OPCODE,
            ErrorCode::FrameTooLarge => FERRITE_FRAME_TOO_LARGE,
            ErrorCode::KeyTooLarge => FERRITE_KEY_TOO_LARGE,
            ErrorCode::ValueTooLarge => FERRITE_VALUE_TOO_LARGE,
            ErrorCode::HandshakeRequired => FERRITE_HANDSHAKE_REQUIRED,
            ErrorCode::UnsupportedVersion => FERRITE_UNSUPPORTED_VERSION,
            ErrorCode::PoolNotFound => FERRITE_POOL_NOT_FOUND,
            ErrorCode::PoolExists => FERRITE_POOL_EXISTS,
            ErrorCode::PoolInUse => FERRITE_POOL_IN_USE,
            ErrorCode::PoolNotOpen => FERRITE_POOL_NOT_OPEN,
            ErrorCode::TooManyPools => FERRITE_TOO_MANY_POOLS,
            ErrorCode::KeyNotFound => FERRITE_KEY_NOT_FOUND,
            ErrorCode::KeyExists => FERRITE_KEY_EXISTS,
            ErrorCode::PoolFull => FERRITE_POOL_FULL,
            ErrorCode::TooManyConnections => FERRITE_TOO_MANY_CONNECTIONS,
            ErrorCode::WrongShard => FERRITE_WRONG_SHARD,
            ErrorCode::InvalidArgument => FERRITE_INVALID_ARGUMENT,
            ErrorCode::Internal => FERRITE_INTERNAL,
            ErrorCode::ShuttingDown => FERRITE_SHUTTING_DOWN,
            ErrorCode::NoSpace => FERRITE_NO_SPACE,
            ErrorCode::StorageFailed => FERRITE_STORAGE_FAILED,
            ErrorCode::AdoFailed => FERRITE_ADO_FAILED,
            ErrorCode::AdoTimeout => FERRITE_ADO_TIMEOUT,
            ErrorCode::AuthenticationFailed => FERRITE_AUTHENTICATION_FAILED,
            ErrorCode::PermissionDenied => FERRITE_PERMISSION_DENIED,
            ErrorCode::QuotaExceeded => FERRITE_QUOTA_EXCEEDED,
            ErrorCode::NotLeader => FERRITE_NOT_LEADER,
            _ => FERRITE_ERR_PROTOCOL,
        }
    }

    /// The status for a client error: its wire code when it has one (as
    /// `ferrite_client::Error::code` says), else the client-side status for its kind.
    pub(crate) fn from_error(error: &Error) -> ferrite_status {
        if let Some(code) = error.code() {
            return ferrite_status::from_code(code);
        }
        match error {
            Error::Io { .. } | Error::Unreachable { .. } | Error::Tls { .. } | Error::TlsRequired { .. } => {
                FERRITE_ERR_IO
            }
            Error::ConnectionClosed(_) => FERRITE_ERR_CLOSED,
            Error::UnexpectedResponse(_) => FERRITE_ERR_PROTOCOL,
            // A kind of error newer than this library.
            _ => FERRITE_ERR_PROTOCOL,
        }
    }

    /// The status's name: the enumerator without `FERRITE_`, in lower case. For wire codes it is
    /// the protocol's own name (`key_not_found`), as every client prints it.
    pub(crate) fn name(self) -> &'static CStr {
        match self {
            FERRITE_OK => c"ok",
            FERRITE_MALFORMED_FRAME => c"malformed_frame",
            FERRITE_UNKNOWN_OPCODE => c"unknown_opcode",
            FERRITE_FRAME_TOO_LARGE => c"frame_too_large",
            FERRITE_KEY_TOO_LARGE => c"key_too_large",
            FERRITE_VALUE_TOO_LARGE => c"value_too_large",
            FERRITE_HANDSHAKE_REQUIRED => c"handshake_required",
            FERRITE_UNSUPPORTED_VERSION => c"unsupported_version",
            FERRITE_POOL_NOT_FOUND => c"pool_not_found",
            FERRITE_POOL_EXISTS => c"pool_exists",
            FERRITE_POOL_IN_USE => c"pool_in_use",
            FERRITE_POOL_NOT_OPEN => c"pool_not_open",
            FERRITE_TOO_MANY_POOLS => c"too_many_pools",
            FERRITE_KEY_NOT_FOUND => c"key_not_found",
            FERRITE_KEY_EXISTS => c"key_exists",
            FERRITE_POOL_FULL => c"pool_full",
            FERRITE_TOO_MANY_CONNECTIONS => c"too_many_connections",
            FERRITE_WRONG_SHARD => c"wrong_shard",
            FERRITE_INVALID_ARGUMENT => c"invalid_argument",
            FERRITE_INTERNAL => c"internal",
            FERRITE_SHUTTING_DOWN => c"shutting_down",
            FERRITE_NO_SPACE => c"no_space",
            FERRITE_STORAGE_FAILED => c"storage_failed",
            FERRITE_ADO_FAILED => c"ado_failed",
            FERRITE_ADO_TIMEOUT => c"ado_timeout",
            FERRITE_AUTHENTICATION_FAILED => c"authentication_failed",
            FERRITE_PERMISSION_DENIED => c"permission_denied",
            FERRITE_QUOTA_EXCEEDED => c"quota_exceeded",
            FERRITE_NOT_LEADER => c"not_leader",
            FERRITE_ERR_IO => c"err_io",
            FERRITE_ERR_CLOSED => c"err_closed",
            FERRITE_ERR_PROTOCOL => c"err_protocol",
            FERRITE_ERR_INVALID_ARGUMENT => c"err_invalid_argument",
            FERRITE_ERR_BUFFER_TOO_SMALL => c"err_buffer_too_small",
            FERRITE_ERR_INTERNAL => c"err_internal",
            FERRITE_PENDING => c"pending",
        }
    }
}

/// Why a call failed: its status and the message `ferrite_last_error` will give.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: ferrite_status,
    pub(crate) message: String,
}

impl Failure {
    /// `FERRITE_ERR_INVALID_ARGUMENT`: the C caller broke the API's contract.
    pub(crate) fn invalid(message: impl Into<String>) -> Failure {
        Failure { status: FERRITE_ERR_INVALID_ARGUMENT, message: message.into() }
    }

    /// Stores the message as this thread's last error and returns the status.
    pub(crate) fn record(self) -> ferrite_status {
        set_last_error(self.status, &self.message);
        self.status
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure { status: ferrite_status::from_error(&error), message: error.to_string() }
    }
}

thread_local! {
    /// The message of the last call on this thread that failed. A `CString` so that
    /// `ferrite_last_error` can hand out a pointer into it without allocating per call.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Makes `message` this thread's last error. Never leaves it empty: the status name stands in for
/// a message the error did not carry, so C code can always print something.
pub(crate) fn set_last_error(status: ferrite_status, message: &str) {
    let text = if message.is_empty() { status.name().to_string_lossy().into_owned() } else { message.to_owned() };
    // Server messages are arbitrary text; an interior NUL would cut the C string short.
    let text = CString::new(text.replace('\0', "\\0")).unwrap_or_default();
    // Fails only while the thread is being torn down, when nobody can read the message anyway.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = text);
}

/// Runs an entry point's body. An `Err` becomes its status, with its message stored as the
/// thread's last error; a panic becomes `FERRITE_ERR_INTERNAL` instead of unwinding into C,
/// which would be undefined behaviour.
pub(crate) fn guard_status(body: impl FnOnce() -> Result<ferrite_status, Failure>) -> ferrite_status {
    // `AssertUnwindSafe`: after a panic nothing the body touched is used again except through
    // mutexes that tolerate poisoning (`op.rs`), and the caller is told the call failed.
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(status)) => status,
        Ok(Err(failure)) => failure.record(),
        Err(panic) => {
            let message = format!("libferrite bug: {}", panic_message(panic.as_ref()));
            set_last_error(FERRITE_ERR_INTERNAL, &message);
            FERRITE_ERR_INTERNAL
        }
    }
}

/// [`guard_status`] for a body whose only success is `FERRITE_OK`.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), Failure>) -> ferrite_status {
    guard_status(|| body().map(|()| FERRITE_OK))
}

/// [`guard`] for the functions that return nothing (the free functions): a failure or panic is
/// still recorded as the thread's last error.
pub(crate) fn guard_void(body: impl FnOnce() -> Result<(), Failure>) {
    let _ = guard(body);
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        format!("panic: {text}")
    } else if let Some(text) = panic.downcast_ref::<String>() {
        format!("panic: {text}")
    } else {
        "panic with a non-text payload".to_owned()
    }
}

// `ferrite_last_error`, `ferrite_status_name` and `ferrite_version` run without `guard`: they
// cannot panic (the `RefCell` is borrowed mutably only within one statement of `set_last_error`,
// so a borrow here never conflicts), and they have no status to report a failure with.

/// The message describing the last call on the calling thread that returned an error status:
/// what failed and why, as the server or the client put it. Never NULL; "" before any failure.
///
/// The string belongs to the library. It stays valid until the next libferrite call that fails
/// on the same thread; copy it to keep it longer. Each thread has its own message, so calls on
/// other threads do not disturb it.
#[no_mangle]
pub extern "C" fn ferrite_last_error() -> *const c_char {
    LAST_ERROR.try_with(|last| last.borrow().as_ptr()).unwrap_or(c"".as_ptr())
}

/// The name of a status, e.g. "key_not_found" for `FERRITE_KEY_NOT_FOUND`: the enumerator
/// without its `FERRITE_` prefix, in lower case, which for wire codes is the name the protocol
/// and every other client use. "unknown" for a number that is not a status. The string is static:
/// never free it.
#[no_mangle]
pub extern "C" fn ferrite_status_name(status: c_int) -> *const c_char {
    // Takes an int, not the enum: a C caller may pass any number, and a Rust enum holding a value
    // outside its variants would be undefined behaviour.
    ALL_STATUSES.iter().find(|s| **s as c_int == status).map_or(c"unknown", |s| s.name()).as_ptr()
}

/// The library's version, e.g. "0.2.0" (the Ferrite release it belongs to). Static: never free it.
#[no_mangle]
pub extern "C" fn ferrite_version() -> *const c_char {
    const VERSION: &CStr = match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(version) => version,
        Err(_) => panic!("the package version contains no NUL"),
    };
    VERSION.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A C program compares statuses with the numbers other clients and the docs give for wire
    /// codes: each code must have its own status, with the same number and name. A code added to
    /// the protocol fails here until it is added to `ferrite_status`.
    #[test]
    fn every_wire_code_has_its_own_status() {
        for code in ErrorCode::ALL {
            let status = ferrite_status::from_code(code);
            assert_eq!(status as i32, i32::from(code.as_u16()), "{code}");
            assert_eq!(status.name().to_str().ok(), Some(code.name()), "{code}");
        }
        let wire = ALL_STATUSES.iter().filter(|s| (1..1000).contains(&(**s as i32))).count();
        assert_eq!(wire, ErrorCode::ALL.len(), "every wire-range status is a protocol code");
    }

    /// Statuses are distinct and named after their enumerator, so `ferrite_status_name` is a
    /// faithful inverse.
    #[test]
    fn status_names_follow_the_enumerators() {
        for status in ALL_STATUSES {
            let expected = format!("{status:?}").trim_start_matches("FERRITE_").to_lowercase();
            assert_eq!(status.name().to_str().ok(), Some(expected.as_str()));
            let named = unsafe { CStr::from_ptr(ferrite_status_name(status as c_int)) };
            assert_eq!(named, status.name());
        }
        let unknown = unsafe { CStr::from_ptr(ferrite_status_name(999)) };
        assert_eq!(unknown, c"unknown");
    }

    #[test]
    fn client_errors_keep_their_wire_code_or_get_a_client_status() {
        let server = Error::Server { code: ErrorCode::KeyNotFound, message: "no key".into() };
        assert_eq!(ferrite_status::from_error(&server), FERRITE_KEY_NOT_FOUND);
        let closed = Error::ConnectionClosed("gone".into());
        assert_eq!(ferrite_status::from_error(&closed), FERRITE_ERR_CLOSED);
        let odd = Error::UnexpectedResponse("what".into());
        assert_eq!(ferrite_status::from_error(&odd), FERRITE_ERR_PROTOCOL);
        let io = Error::Io { context: "connecting".into(), source: std::io::ErrorKind::TimedOut.into() };
        assert_eq!(ferrite_status::from_error(&io), FERRITE_ERR_IO);
        let refused =
            Error::Unreachable { address: "h:1".into(), source: std::io::ErrorKind::ConnectionRefused.into() };
        let tls = Error::Tls { address: "h:1".into(), problem: "expired".into() };
        let clear = Error::TlsRequired { address: "h:1".into() };
        for error in [refused, tls, clear] {
            assert_eq!(ferrite_status::from_error(&error), FERRITE_ERR_IO, "{error}");
        }
    }

    /// The guard's promise: a panic never unwinds into C, and it leaves a message.
    #[test]
    fn a_panic_becomes_an_internal_status_with_a_message() {
        let status = guard(|| panic!("deliberate"));
        assert_eq!(status, FERRITE_ERR_INTERNAL);
        let message = unsafe { CStr::from_ptr(ferrite_last_error()) }.to_string_lossy().into_owned();
        assert!(message.contains("deliberate"), "{message}");
    }

    #[test]
    fn failures_leave_a_message_even_when_they_carry_none() {
        let status = guard(|| Err(Failure { status: FERRITE_KEY_EXISTS, message: String::new() }));
        assert_eq!(status, FERRITE_KEY_EXISTS);
        assert_eq!(unsafe { CStr::from_ptr(ferrite_last_error()) }, c"key_exists");
        let status = guard(|| Err(Failure::invalid("a\0b")));
        assert_eq!(status, FERRITE_ERR_INVALID_ARGUMENT);
        assert_eq!(unsafe { CStr::from_ptr(ferrite_last_error()) }, c"a\\0b");
    }

    #[test]
    fn the_version_is_the_package_version() {
        let version = unsafe { CStr::from_ptr(ferrite_version()) };
        assert_eq!(version.to_str().ok(), Some(env!("CARGO_PKG_VERSION")));
    }
}
