//! The shims between the C table and the [`Plugin`] trait, and the macro that exports them.
//!
//! Every shim stops panics at the C boundary: a panic becomes `FERRITE_ERR_FAILED` with its
//! message logged, never an unwind into the host. An error's message is logged through the
//! host and its code returned.

use std::any::Any;
use std::ffi::{c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::abi::{self, Bytes, Callbacks, Host, PluginV1, Work};
use crate::call::Call;
use crate::context::{Context, LogLevel, PoolEvent};
use crate::error::PluginError;
use crate::plugin::Plugin;

/// The entry table for plugin type `P` named `name`. [`crate::export_plugin!`] stores it in a
/// static; it is a `const fn` so that static needs no initialisation at run time.
pub const fn table<P: Plugin>(name: &'static CStr) -> PluginV1 {
    PluginV1 {
        abi_version: abi::ABI_VERSION,
        struct_size: std::mem::size_of::<PluginV1>() as u32,
        name: name.as_ptr(),
        launch: launch::<P>,
        do_work: do_work::<P>,
        pool_event: Some(pool_event::<P>),
        shutdown: Some(shutdown::<P>),
    }
}

/// The text of a panic's payload (what `panic!` was given, when it was text).
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    if let Some(message) = panic.downcast_ref::<&str>() {
        message
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message
    } else {
        "a panic without a message"
    }
}

/// Checks the host's structs are at least as large as this SDK's: a host of an older ABI
/// version would lack fields the SDK reads.
fn check_sizes(callbacks: &Callbacks, work: Option<&Work>) -> Result<(), PluginError> {
    if (callbacks.struct_size as usize) < std::mem::size_of::<Callbacks>() {
        return Err(PluginError::invalid("the host's callback table is older than this plugin's SDK"));
    }
    if work.is_some_and(|work| (work.struct_size as usize) < std::mem::size_of::<Work>()) {
        return Err(PluginError::invalid("the host's work struct is older than this plugin's SDK"));
    }
    Ok(())
}

/// Runs an entry body, turning an error or a panic into a logged message and a status code.
fn guarded(context: &Context<'_>, entry: &str, body: impl FnOnce() -> Result<(), PluginError>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => abi::OK,
        Ok(Err(error)) => {
            context.log(LogLevel::Warn, &format!("{entry}: {error}"));
            error.code().code()
        }
        Err(panic) => {
            context.log(LogLevel::Error, &format!("{entry} panicked: {}", panic_message(panic.as_ref())));
            abi::ERR_FAILED
        }
    }
}

/// # Safety
/// Called by the host as the header's `launch`.
#[allow(unsafe_code)]
unsafe extern "C" fn launch<P: Plugin>(
    callbacks: *const Callbacks,
    host: *mut Host,
    config: Bytes,
    status: *mut c_int,
) -> *mut c_void {
    // SAFETY: the host passes its callback table, valid until launch returns.
    let Some(callbacks) = (unsafe { callbacks.as_ref() }) else {
        return report_launch(status, abi::ERR_INVALID);
    };
    // SAFETY: `host` came with `callbacks`, valid until launch returns.
    let context = unsafe { Context::new(callbacks, host) };
    let config = if config.data.is_null() || config.len == 0 {
        &[][..]
    } else {
        // SAFETY: the header makes the config readable until launch returns.
        unsafe { std::slice::from_raw_parts(config.data, config.len) }
    };
    let mut state = None;
    let code = guarded(&context, "launch", || {
        check_sizes(callbacks, None)?;
        state = Some(P::launch(&context, config)?);
        Ok(())
    });
    match state {
        Some(state) if code == abi::OK => {
            report_launch(status, abi::OK);
            Box::into_raw(Box::new(state)).cast()
        }
        _ => report_launch(status, code),
    }
}

#[allow(unsafe_code)]
fn report_launch(status: *mut c_int, code: c_int) -> *mut c_void {
    // SAFETY: the header has the host pass a writable status; a null one is left alone.
    if let Some(status) = unsafe { status.as_mut() } {
        *status = code;
    }
    std::ptr::null_mut()
}

/// # Safety
/// Called by the host as the header's `do_work`, with the state `launch::<P>` returned.
#[allow(unsafe_code)]
unsafe extern "C" fn do_work<P: Plugin>(
    state: *mut c_void,
    work: *const Work,
    callbacks: *const Callbacks,
    host: *mut Host,
) -> c_int {
    // SAFETY: the host passes its callback table and the work, valid until do_work returns.
    let (Some(callbacks), Some(work)) = (unsafe { callbacks.as_ref() }, unsafe { work.as_ref() }) else {
        return abi::ERR_INVALID;
    };
    // SAFETY: `host` came with `callbacks`, valid until do_work returns.
    let context = unsafe { Context::new(callbacks, host) };
    // SAFETY: a state is only ever what `launch::<P>` boxed; the host calls entries on one thread.
    let Some(plugin) = (unsafe { state.cast::<P>().as_mut() }) else {
        context.log(LogLevel::Error, "do_work: called without a launched plugin");
        return abi::ERR_INVALID;
    };
    guarded(&context, "do_work", || {
        check_sizes(callbacks, Some(work))?;
        // SAFETY: the work and its pointers are valid until do_work returns, which the call
        // does not outlive.
        let mut call = unsafe { Call::new(context, work) };
        plugin.do_work(&mut call)
    })
}

/// # Safety
/// Called by the host as the header's `pool_event`, with the state `launch::<P>` returned.
#[allow(unsafe_code)]
unsafe extern "C" fn pool_event<P: Plugin>(
    state: *mut c_void,
    event: u32,
    key: Bytes,
    callbacks: *const Callbacks,
    host: *mut Host,
) {
    // SAFETY: the host passes its callback table, valid until pool_event returns.
    let Some(callbacks) = (unsafe { callbacks.as_ref() }) else {
        return;
    };
    // SAFETY: `host` came with `callbacks`.
    let context = unsafe { Context::new(callbacks, host) };
    // SAFETY: a state is only ever what `launch::<P>` boxed.
    let Some(plugin) = (unsafe { state.cast::<P>().as_mut() }) else {
        return;
    };
    let key = if key.data.is_null() || key.len == 0 {
        &[][..]
    } else {
        // SAFETY: the header makes the key readable until pool_event returns.
        unsafe { std::slice::from_raw_parts(key.data, key.len) }
    };
    guarded(&context, "pool_event", || {
        plugin.pool_event(PoolEvent::from_abi(event, key), &context);
        Ok(())
    });
}

/// # Safety
/// Called by the host as the header's `shutdown`, once, with the state `launch::<P>` returned.
#[allow(unsafe_code)]
unsafe extern "C" fn shutdown<P: Plugin>(state: *mut c_void) {
    if state.is_null() {
        return;
    }
    // SAFETY: the state is the box `launch::<P>` made, and the host hands it back only once.
    let plugin = unsafe { Box::from_raw(state.cast::<P>()) };
    // Shutdown has no host to log to, so a panic here is stopped and dropped: the host is
    // unloading the plugin anyway.
    let _ = catch_unwind(AssertUnwindSafe(move || plugin.shutdown()));
}

/// Exports a [`Plugin`] type as a plugin library: generates the `ferrite_plugin_entry` symbol
/// the host looks up, returning a static table of shims around the trait, and a
/// `pub fn plugin_table() -> &'static PluginV1` so tests drive the same table in-process (for
/// example through [`crate::testing::TestHost`]).
///
/// ```ignore
/// ferrite_plugin::export_plugin!(Counter, "counter");
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty, $name:literal) => {
        /// This plugin's entry table, as the host sees it.
        pub fn plugin_table() -> &'static $crate::abi::PluginV1 {
            static TABLE: $crate::abi::PluginV1 = $crate::export::table::<$plugin>(
                match ::std::ffi::CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()) {
                    Ok(name) => name,
                    Err(_) => panic!("a plugin name may not contain NUL"),
                },
            );
            &TABLE
        }

        /// The one symbol a Ferrite plugin library exports.
        #[allow(unsafe_code)]
        #[no_mangle]
        pub extern "C" fn ferrite_plugin_entry() -> *const $crate::abi::PluginV1 {
            plugin_table()
        }
    };
}
