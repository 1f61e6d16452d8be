//! The test host's callback table: each entry turns the C arguments into Rust values, runs the
//! matching [`HostState`] method and writes its results back. Nothing here decides anything.

use std::ffi::{c_char, c_int, c_void};

use crate::abi::{self, Bytes, Callbacks, Host, Pair, PairFn, PoolInfo};
use crate::context::LogLevel;

use super::host_state::HostState;

/// The table every plugin entry receives from the test host.
pub(crate) static CALLBACKS: Callbacks = Callbacks {
    struct_size: std::mem::size_of::<Callbacks>() as u32,
    reserved: 0,
    declare_write,
    respond,
    create_key,
    open_key,
    erase_key,
    resize_value,
    allocate_memory,
    free_memory,
    iterate,
    get_reference_vector,
    find_key,
    pool_info,
    unlock,
    log,
};

/// The host state behind the opaque pointer.
///
/// # Safety
/// `host` must be the `HostState` the test host passed to the entry that is running, and no
/// other reference to it may be live (the test host holds none while a plugin entry runs, and
/// `iterate` releases its own before calling back into the plugin).
#[allow(unsafe_code)]
unsafe fn state<'h>(host: *mut Host) -> Option<&'h mut HostState> {
    // SAFETY: guaranteed by the caller.
    unsafe { host.cast::<HostState>().as_mut() }
}

/// Bytes a plugin passed in; NULL is empty.
///
/// # Safety
/// Unless null, `data` must be readable for `len` bytes while the callback runs.
#[allow(unsafe_code)]
unsafe fn input<'b>(data: *const u8, len: usize) -> &'b [u8] {
    if data.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts(data, len) }
    }
}

/// Writes a callback's result through its out-pointer, or answers its status.
///
/// # Safety
/// Unless null, `out` must be writable.
#[allow(unsafe_code)]
unsafe fn answer<T>(result: Result<T, c_int>, out: *mut T) -> c_int {
    match result {
        Ok(value) => {
            // SAFETY: guaranteed by the caller; a null out-pointer is an invalid argument.
            match unsafe { out.as_mut() } {
                Some(out) => {
                    *out = value;
                    abi::OK
                }
                None => abi::ERR_INVALID,
            }
        }
        Err(status) => status,
    }
}

fn status(result: Result<(), c_int>) -> c_int {
    result.err().unwrap_or(abi::OK)
}

#[allow(unsafe_code)]
unsafe extern "C" fn declare_write(host: *mut Host, address: *const c_void, len: usize) -> c_int {
    // SAFETY: the plugin passes back the host pointer it was given.
    let Some(state) = (unsafe { state(host) }) else { return abi::ERR_INVALID };
    status(state.declare_write(address.cast(), len))
}

#[allow(unsafe_code)]
unsafe extern "C" fn respond(host: *mut Host, data: *const u8, len: usize) -> c_int {
    // SAFETY: the plugin passes back its host pointer and readable bytes.
    let (Some(state), data) = (unsafe { state(host) }, unsafe { input(data, len) }) else { return abi::ERR_INVALID };
    status(state.respond(data))
}

#[allow(unsafe_code)]
unsafe extern "C" fn create_key(
    host: *mut Host,
    key: *const u8,
    key_len: usize,
    value_len: usize,
    out: *mut Pair,
) -> c_int {
    // SAFETY: the plugin passes back its host pointer, a readable key and a writable pair.
    unsafe {
        let Some(state) = state(host) else { return abi::ERR_INVALID };
        answer(state.create_key(input(key, key_len), value_len), out)
    }
}

#[allow(unsafe_code)]
unsafe extern "C" fn open_key(
    host: *mut Host,
    key: *const u8,
    key_len: usize,
    read_only: c_int,
    out: *mut Pair,
) -> c_int {
    // SAFETY: the plugin passes back its host pointer, a readable key and a writable pair.
    unsafe {
        let Some(state) = state(host) else { return abi::ERR_INVALID };
        answer(state.open_key(input(key, key_len), read_only != 0), out)
    }
}

#[allow(unsafe_code)]
unsafe extern "C" fn erase_key(host: *mut Host, key: *const u8, key_len: usize) -> c_int {
    // SAFETY: the plugin passes back its host pointer and a readable key.
    unsafe {
        let Some(state) = state(host) else { return abi::ERR_INVALID };
        status(state.erase_key(input(key, key_len)))
    }
}

#[allow(unsafe_code)]
unsafe extern "C" fn resize_value(
    host: *mut Host,
    key: *const u8,
    key_len: usize,
    new_len: usize,
    out: *mut Pair,
) -> c_int {
    // SAFETY: the plugin passes back its host pointer, a readable key and a writable pair.
    unsafe {
        let Some(state) = state(host) else { return abi::ERR_INVALID };
        answer(state.resize_value(input(key, key_len), new_len), out)
    }
}

#[allow(unsafe_code)]
unsafe extern "C" fn allocate_memory(
    host: *mut Host,
    len: usize,
    align: usize,
    out: *mut *mut u8,
    offset: *mut u64,
) -> c_int {
    // SAFETY: the plugin passes back its host pointer and two writable out-pointers.
    unsafe {
        let Some(state) = state(host) else { return abi::ERR_INVALID };
        if offset.is_null() {
            return abi::ERR_INVALID;
        }
        match state.allocate_memory(len, align) {
            Ok((address, at)) => {
                *offset = at;
                answer(Ok(address), out)
            }
            Err(status) => status,
        }
    }
}

#[allow(unsafe_code)]
unsafe extern "C" fn free_memory(host: *mut Host, address: *mut u8, len: usize) -> c_int {
    // SAFETY: the plugin passes back its host pointer.
    let Some(state) = (unsafe { state(host) }) else { return abi::ERR_INVALID };
    status(state.free_memory(address, len))
}

#[allow(unsafe_code)]
unsafe extern "C" fn iterate(
    host: *mut Host,
    since_ns: u64,
    until_ns: u64,
    visit: PairFn,
    context: *mut c_void,
) -> c_int {
    // The borrow of the state ends before the plugin is called back, so its callbacks may use
    // the state again.
    let pairs = {
        // SAFETY: the plugin passes back its host pointer.
        let Some(state) = (unsafe { state(host) }) else { return abi::ERR_INVALID };
        match state.pairs_between(since_ns, until_ns, usize::MAX) {
            Ok(pairs) => pairs,
            Err(status) => return status,
        }
    };
    for pair in &pairs {
        // SAFETY: the plugin's own visitor and context; each pair's key is kept until the call
        // returns and its value lies in the arena.
        if unsafe { visit(context, pair) } != 0 {
            break;
        }
    }
    abi::OK
}

#[allow(unsafe_code)]
unsafe extern "C" fn get_reference_vector(
    host: *mut Host,
    since_ns: u64,
    until_ns: u64,
    max: usize,
    pairs: *mut *const Pair,
    count: *mut usize,
) -> c_int {
    // SAFETY: the plugin passes back its host pointer and two writable out-pointers.
    unsafe {
        let Some(state) = state(host) else { return abi::ERR_INVALID };
        if count.is_null() {
            return abi::ERR_INVALID;
        }
        match state.reference_vector(since_ns, until_ns, max) {
            Ok((array, found)) => {
                *count = found;
                answer(Ok(array), pairs)
            }
            Err(status) => status,
        }
    }
}

#[allow(unsafe_code)]
unsafe extern "C" fn find_key(
    host: *mut Host,
    expression: *const c_char,
    expression_len: usize,
    position: *mut u64,
    key: *mut Bytes,
) -> c_int {
    // SAFETY: the plugin passes back its host pointer, a readable expression and two writable
    // out-pointers.
    unsafe {
        let (Some(state), Some(position)) = (state(host), position.as_mut()) else { return abi::ERR_INVALID };
        let found = state.find_key(input(expression.cast(), expression_len), position);
        answer(found.map(|(data, len)| Bytes { data, len }), key)
    }
}

#[allow(unsafe_code)]
unsafe extern "C" fn pool_info(host: *mut Host, info: *mut PoolInfo) -> c_int {
    // SAFETY: the plugin passes back its host pointer and a writable info.
    unsafe {
        let Some(state) = state(host) else { return abi::ERR_INVALID };
        answer(Ok(state.pool_info()), info)
    }
}

#[allow(unsafe_code)]
unsafe extern "C" fn unlock(host: *mut Host, key: *const u8, key_len: usize) -> c_int {
    // SAFETY: the plugin passes back its host pointer and a readable key.
    unsafe {
        let Some(state) = state(host) else { return abi::ERR_INVALID };
        status(state.unlock(input(key, key_len)))
    }
}

#[allow(unsafe_code)]
unsafe extern "C" fn log(host: *mut Host, level: c_int, message: *const c_char, len: usize) {
    // SAFETY: the plugin passes back its host pointer and readable text.
    unsafe {
        if let Some(state) = state(host) {
            let message = String::from_utf8_lossy(input(message.cast(), len)).into_owned();
            state.log(LogLevel::from_code(level), message);
        }
    }
}
