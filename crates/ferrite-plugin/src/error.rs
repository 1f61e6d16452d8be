//! The error a plugin returns, and the error a host callback reports. Both carry one of the
//! header's status codes, because that code is what crosses the C boundary; the message goes
//! to the server's log.

use std::ffi::c_int;
use std::fmt;

use crate::abi;

/// The header's negative status codes, as a Rust type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// `FERRITE_ERR_FAILED`: the plugin's own reason.
    Failed,
    /// `FERRITE_ERR_INVALID`: an argument is out of range.
    Invalid,
    /// `FERRITE_ERR_NOT_FOUND`: no such key.
    NotFound,
    /// `FERRITE_ERR_EXISTS`: the key exists already.
    Exists,
    /// `FERRITE_ERR_NO_SPACE`: the pool (or the log) has no room.
    NoSpace,
    /// `FERRITE_ERR_LOCKED`: another call holds the key's lock.
    Locked,
    /// `FERRITE_ERR_UNSUPPORTED`: the host does not offer this callback.
    Unsupported,
}

impl ErrorCode {
    /// The status code the header gives this error.
    pub fn code(self) -> c_int {
        match self {
            ErrorCode::Failed => abi::ERR_FAILED,
            ErrorCode::Invalid => abi::ERR_INVALID,
            ErrorCode::NotFound => abi::ERR_NOT_FOUND,
            ErrorCode::Exists => abi::ERR_EXISTS,
            ErrorCode::NoSpace => abi::ERR_NO_SPACE,
            ErrorCode::Locked => abi::ERR_LOCKED,
            ErrorCode::Unsupported => abi::ERR_UNSUPPORTED,
        }
    }

    /// The error a status code names; `None` for `FERRITE_OK` and for codes this version of the
    /// header does not define.
    pub fn from_code(code: c_int) -> Option<ErrorCode> {
        match code {
            abi::ERR_FAILED => Some(ErrorCode::Failed),
            abi::ERR_INVALID => Some(ErrorCode::Invalid),
            abi::ERR_NOT_FOUND => Some(ErrorCode::NotFound),
            abi::ERR_EXISTS => Some(ErrorCode::Exists),
            abi::ERR_NO_SPACE => Some(ErrorCode::NoSpace),
            abi::ERR_LOCKED => Some(ErrorCode::Locked),
            abi::ERR_UNSUPPORTED => Some(ErrorCode::Unsupported),
            _ => None,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            ErrorCode::Failed => "failed",
            ErrorCode::Invalid => "invalid argument",
            ErrorCode::NotFound => "no such key",
            ErrorCode::Exists => "the key exists already",
            ErrorCode::NoSpace => "no space left in the pool or its log",
            ErrorCode::Locked => "the key is locked by another call",
            ErrorCode::Unsupported => "the host does not offer this callback",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// Why a plugin entry or a host callback failed: a status code for the host and a message for
/// the log. Returning one from [`crate::Plugin::do_work`] undoes every declared write of the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    code: ErrorCode,
    message: String,
}

impl PluginError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> PluginError {
        PluginError { code, message: message.into() }
    }

    /// `FERRITE_ERR_FAILED` with the plugin's reason.
    pub fn failed(message: impl Into<String>) -> PluginError {
        PluginError::new(ErrorCode::Failed, message)
    }

    /// `FERRITE_ERR_INVALID`: the request (payload, value) is not what the plugin accepts.
    pub fn invalid(message: impl Into<String>) -> PluginError {
        PluginError::new(ErrorCode::Invalid, message)
    }

    /// The error a callback's status code reports, naming the callback so the log says which
    /// one failed. Codes the header does not define count as `Failed` and keep their number in
    /// the message.
    pub(crate) fn from_callback(callback: &str, status: c_int) -> PluginError {
        match ErrorCode::from_code(status) {
            Some(code) => PluginError::new(code, format!("{callback} refused")),
            None => PluginError::failed(format!("{callback}: unknown status {status}")),
        }
    }

    pub fn code(&self) -> ErrorCode {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for PluginError {}

/// Turns a callback's status into a `Result`, naming the callback in the error.
pub(crate) fn check(callback: &str, status: c_int) -> Result<(), PluginError> {
    if status == abi::OK {
        Ok(())
    } else {
        Err(PluginError::from_callback(callback, status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code survives the round trip through its number, so a callback's status maps back
    /// to the error the host meant.
    #[test]
    fn codes_round_trip() {
        for code in [
            ErrorCode::Failed,
            ErrorCode::Invalid,
            ErrorCode::NotFound,
            ErrorCode::Exists,
            ErrorCode::NoSpace,
            ErrorCode::Locked,
            ErrorCode::Unsupported,
        ] {
            assert_eq!(ErrorCode::from_code(code.code()), Some(code));
        }
        assert_eq!(ErrorCode::from_code(abi::OK), None);
    }

    /// A status the header does not define still fails, and keeps its number for the log.
    #[test]
    fn unknown_status_is_a_failure() {
        let error = PluginError::from_callback("open_key", -99);
        assert_eq!(error.code(), ErrorCode::Failed);
        assert!(error.message().contains("-99"), "{}", error.message());
        assert!(check("open_key", abi::OK).is_ok());
        assert_eq!(check("open_key", abi::ERR_LOCKED).map_err(|e| e.code()), Err(ErrorCode::Locked));
    }
}
