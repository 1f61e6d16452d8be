//! What a plugin can ask of its host outside an invocation: at launch and when told of a pool
//! event. Only the callbacks that make sense without a target (log, pool info) are offered.

use std::marker::PhantomData;

use crate::abi::{self, Callbacks, Host, PoolInfo};
use crate::error::{check, PluginError};

/// The level of a line written through the host's `log` callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
}

impl LogLevel {
    /// The header's `FERRITE_LOG_*` number.
    pub fn code(self) -> std::ffi::c_int {
        match self {
            LogLevel::Error => abi::LOG_ERROR,
            LogLevel::Warn => abi::LOG_WARN,
            LogLevel::Info => abi::LOG_INFO,
            LogLevel::Debug => abi::LOG_DEBUG,
        }
    }

    /// The level a `FERRITE_LOG_*` number names; unknown numbers read as `Debug`, the least
    /// alarming, so a plugin from a later version cannot make the log shout.
    pub fn from_code(code: std::ffi::c_int) -> LogLevel {
        match code {
            abi::LOG_ERROR => LogLevel::Error,
            abi::LOG_WARN => LogLevel::Warn,
            abi::LOG_INFO => LogLevel::Info,
            _ => LogLevel::Debug,
        }
    }
}

/// A pool event (`FERRITE_EVENT_*`), with the key when the event names one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PoolEvent<'a> {
    /// The host attached to the pool.
    Open,
    /// The last session closed the pool; the host stops after.
    Close,
    /// A key was erased outside any call.
    Erase { key: &'a [u8] },
    /// A value was resized outside any call.
    Resize { key: &'a [u8] },
    /// The pool is being deleted.
    Delete,
    /// An event a later version of the header added.
    Other { event: u32, key: &'a [u8] },
}

impl<'a> PoolEvent<'a> {
    pub(crate) fn from_abi(event: u32, key: &'a [u8]) -> PoolEvent<'a> {
        match event {
            abi::EVENT_OPEN => PoolEvent::Open,
            abi::EVENT_CLOSE => PoolEvent::Close,
            abi::EVENT_ERASE => PoolEvent::Erase { key },
            abi::EVENT_RESIZE => PoolEvent::Resize { key },
            abi::EVENT_DELETE => PoolEvent::Delete,
            event => PoolEvent::Other { event, key },
        }
    }
}

/// The host as a plugin sees it outside an invocation. Lives only for the entry it was passed
/// to: the host pointer is valid until that entry returns.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    callbacks: &'a Callbacks,
    host: *mut Host,
    _host: PhantomData<&'a mut Host>,
}

impl<'a> Context<'a> {
    /// Wraps the pointers an entry received.
    ///
    /// # Safety
    /// `host` must be the host pointer passed with `callbacks`, valid for `'a`.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn new(callbacks: &'a Callbacks, host: *mut Host) -> Context<'a> {
        Context { callbacks, host, _host: PhantomData }
    }

    pub(crate) fn callbacks(&self) -> &'a Callbacks {
        self.callbacks
    }

    pub(crate) fn host(&self) -> *mut Host {
        self.host
    }

    /// Writes a line to the server's log, tagged with the pool and the plugin.
    #[allow(unsafe_code)]
    pub fn log(&self, level: LogLevel, message: &str) {
        // SAFETY: the host pointer is valid for 'a (see `new`); the message is readable for
        // `len` bytes during the call and the header does not ask for a NUL.
        unsafe { (self.callbacks.log)(self.host, level.code(), message.as_ptr().cast(), message.len()) }
    }

    /// The pool's figures.
    #[allow(unsafe_code)]
    pub fn pool_info(&self) -> Result<PoolInfo, PluginError> {
        let mut info = PoolInfo::default();
        // SAFETY: the host pointer is valid for 'a; `info` is a live, writable PoolInfo.
        let status = unsafe { (self.callbacks.pool_info)(self.host, &mut info) };
        check("pool_info", status)?;
        Ok(info)
    }
}
