//! The `ferrite_callbacks` table the host hands every plugin. Each entry checks its C arguments
//! (null pointers, lengths) and calls the matching [`HostContext`] method.
//!
//! The `ferrite_host` pointer a plugin passes back is the host's `HostContext`. A mutable
//! reference to it lives only inside one callback and never across a call into plugin code:
//! `iterate` collects its pairs first and lets the borrow end before it calls `visit`, which may
//! itself call back.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, c_void};

use ferrite_plugin::abi::{self, Bytes, Callbacks, Host, Pair, PairFn, PoolInfo};

use crate::message::CallbackRequest;

use super::context::HostContext;

/// The table every plugin receives; `struct_size` tells it which version it got.
pub static CALLBACKS: Callbacks = Callbacks {
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

/// The context behind a plugin's `ferrite_host` pointer.
///
/// # Safety
/// `host` must be the pointer the host passed to the plugin for the current entry call, and no
/// other reference to the context may be live (see the module comment).
unsafe fn context<'a>(host: *mut Host) -> Option<&'a mut HostContext> {
    // SAFETY: per the contract above, `host` is null or the context the host lent.
    unsafe { host.cast::<HostContext>().as_mut() }
}

/// Copies `len` bytes at `data` (a plugin's buffer), or None for a null pointer with bytes.
///
/// # Safety
/// A non-null `data` must point to `len` readable bytes, as the ABI requires of the plugin.
unsafe fn copy_bytes(data: *const u8, len: usize) -> Option<Vec<u8>> {
    if len == 0 {
        return Some(Vec::new());
    }
    if data.is_null() {
        return None;
    }
    // SAFETY: non-null, and the plugin promises `len` readable bytes.
    Some(unsafe { std::slice::from_raw_parts(data, len) }.to_vec())
}

fn status(result: Result<(), c_int>) -> c_int {
    result.err().unwrap_or(abi::OK)
}

/// Writes `value` through a plugin's out pointer, or fails for a null one.
///
/// # Safety
/// A non-null `out` must be valid for a write of `T`, as the ABI requires of the plugin.
unsafe fn put<T>(out: *mut T, value: T) -> Result<(), c_int> {
    if out.is_null() {
        return Err(abi::ERR_INVALID);
    }
    // SAFETY: non-null, and the plugin promises it points to a `T`.
    unsafe { out.write(value) };
    Ok(())
}

unsafe extern "C" fn declare_write(host: *mut Host, addr: *const c_void, len: usize) -> c_int {
    // SAFETY: the plugin passes back the host pointer it was given.
    let Some(ctx) = (unsafe { context(host) }) else { return abi::ERR_INVALID };
    let Some(range) = ctx.range_of(addr.cast(), len) else { return abi::ERR_INVALID };
    status(ctx.declare_write(range))
}

unsafe extern "C" fn respond(host: *mut Host, data: *const u8, len: usize) -> c_int {
    // SAFETY: as in `declare_write`; `data` holds `len` bytes per the ABI.
    let (Some(ctx), Some(data)) = (unsafe { context(host) }, unsafe { copy_bytes(data, len) }) else {
        return abi::ERR_INVALID;
    };
    status(ctx.respond(data))
}

unsafe extern "C" fn create_key(
    host: *mut Host,
    key: *const u8,
    key_len: usize,
    value_len: usize,
    out: *mut Pair,
) -> c_int {
    // SAFETY: as in `respond`.
    let (Some(ctx), Some(key)) = (unsafe { context(host) }, unsafe { copy_bytes(key, key_len) }) else {
        return abi::ERR_INVALID;
    };
    let request = CallbackRequest::CreateKey { key, value_len: value_len as u64 };
    // SAFETY: `out` is the plugin's pair to fill.
    status(ctx.pair_call(request, true).and_then(|pair| unsafe { put(out, pair) }))
}

unsafe extern "C" fn open_key(
    host: *mut Host,
    key: *const u8,
    key_len: usize,
    read_only: c_int,
    out: *mut Pair,
) -> c_int {
    // SAFETY: as in `respond`.
    let (Some(ctx), Some(key)) = (unsafe { context(host) }, unsafe { copy_bytes(key, key_len) }) else {
        return abi::ERR_INVALID;
    };
    let read_only = read_only != 0;
    let request = CallbackRequest::OpenKey { key, read_only };
    // SAFETY: `out` is the plugin's pair to fill.
    status(ctx.pair_call(request, !read_only).and_then(|pair| unsafe { put(out, pair) }))
}

unsafe extern "C" fn erase_key(host: *mut Host, key: *const u8, key_len: usize) -> c_int {
    // SAFETY: as in `respond`.
    let (Some(ctx), Some(key)) = (unsafe { context(host) }, unsafe { copy_bytes(key, key_len) }) else {
        return abi::ERR_INVALID;
    };
    status(ctx.round_trip(CallbackRequest::EraseKey { key }).map(|_| ()))
}

unsafe extern "C" fn resize_value(
    host: *mut Host,
    key: *const u8,
    key_len: usize,
    new_len: usize,
    out: *mut Pair,
) -> c_int {
    // SAFETY: as in `respond`.
    let (Some(ctx), Some(key)) = (unsafe { context(host) }, unsafe { copy_bytes(key, key_len) }) else {
        return abi::ERR_INVALID;
    };
    let request = CallbackRequest::ResizeValue { key, new_len: new_len as u64 };
    // SAFETY: `out` is the plugin's pair to fill.
    status(ctx.pair_call(request, true).and_then(|pair| unsafe { put(out, pair) }))
}

unsafe extern "C" fn allocate_memory(
    host: *mut Host,
    len: usize,
    align: usize,
    out: *mut *mut u8,
    offset: *mut u64,
) -> c_int {
    // SAFETY: as in `declare_write`.
    let Some(ctx) = (unsafe { context(host) }) else { return abi::ERR_INVALID };
    if out.is_null() || offset.is_null() {
        return abi::ERR_INVALID;
    }
    status(ctx.allocate(len as u64, align as u64).and_then(|(address, memory)| {
        // SAFETY: both out pointers were checked non-null and are the plugin's to fill.
        unsafe { put(out, address).and_then(|()| put(offset, memory.offset)) }
    }))
}

unsafe extern "C" fn free_memory(host: *mut Host, addr: *mut u8, len: usize) -> c_int {
    // SAFETY: as in `declare_write`.
    let Some(ctx) = (unsafe { context(host) }) else { return abi::ERR_INVALID };
    let Some(memory) = ctx.range_of(addr, len) else { return abi::ERR_INVALID };
    status(ctx.free(memory))
}

unsafe extern "C" fn iterate(
    host: *mut Host,
    since_ns: u64,
    until_ns: u64,
    visit: PairFn,
    visit_context: *mut c_void,
) -> c_int {
    let pairs = {
        // SAFETY: as in `declare_write`; the borrow ends with this block, before `visit` runs.
        let Some(ctx) = (unsafe { context(host) }) else { return abi::ERR_INVALID };
        match ctx.pairs_call(CallbackRequest::Iterate { since_ns, until_ns }) {
            Ok(pairs) => pairs,
            Err(code) => return code,
        }
    };
    for pair in &pairs {
        // SAFETY: calling the plugin's visitor with its own context and a pair whose key the
        // call keeps alive; no host borrow is live.
        if unsafe { visit(visit_context, pair) } != 0 {
            break;
        }
    }
    abi::OK
}

unsafe extern "C" fn get_reference_vector(
    host: *mut Host,
    since_ns: u64,
    until_ns: u64,
    max: usize,
    pairs: *mut *const Pair,
    count: *mut usize,
) -> c_int {
    // SAFETY: as in `declare_write`.
    let Some(ctx) = (unsafe { context(host) }) else { return abi::ERR_INVALID };
    if pairs.is_null() || count.is_null() {
        return abi::ERR_INVALID;
    }
    let request = CallbackRequest::ReferenceVector { since_ns, until_ns, max: max as u64 };
    let result = ctx.pairs_call(request).and_then(|mut found| {
        found.truncate(max);
        let call = ctx.call.as_mut().ok_or(abi::ERR_UNSUPPORTED)?;
        let (array, len) = call.lend_pairs(found);
        // SAFETY: both out pointers were checked non-null and are the plugin's to fill.
        unsafe { put(pairs, array).and_then(|()| put(count, len)) }
    });
    status(result)
}

unsafe extern "C" fn find_key(
    host: *mut Host,
    expression: *const c_char,
    expression_len: usize,
    position: *mut u64,
    key: *mut Bytes,
) -> c_int {
    // SAFETY: as in `respond`.
    let (Some(ctx), Some(expression)) =
        (unsafe { context(host) }, unsafe { copy_bytes(expression.cast(), expression_len) })
    else {
        return abi::ERR_INVALID;
    };
    if position.is_null() || key.is_null() {
        return abi::ERR_INVALID;
    }
    // SAFETY: checked non-null; the plugin's cursor.
    let start = unsafe { position.read() };
    let result = ctx.find_key(expression, start).and_then(|(found, next)| {
        // SAFETY: both out pointers were checked non-null and are the plugin's to fill.
        unsafe { put(key, found).and_then(|()| put(position, next)) }
    });
    status(result)
}

unsafe extern "C" fn pool_info(host: *mut Host, info: *mut PoolInfo) -> c_int {
    // SAFETY: as in `declare_write`.
    let Some(ctx) = (unsafe { context(host) }) else { return abi::ERR_INVALID };
    // SAFETY: `info` is the plugin's struct to fill.
    status(ctx.pool_info().and_then(|figures| unsafe { put(info, figures) }))
}

unsafe extern "C" fn unlock(host: *mut Host, key: *const u8, key_len: usize) -> c_int {
    // SAFETY: as in `respond`.
    let (Some(ctx), Some(key)) = (unsafe { context(host) }, unsafe { copy_bytes(key, key_len) }) else {
        return abi::ERR_INVALID;
    };
    status(ctx.round_trip(CallbackRequest::Unlock { key }).map(|_| ()))
}

unsafe extern "C" fn log(host: *mut Host, level: c_int, message: *const c_char, len: usize) {
    // SAFETY: as in `respond`.
    if let (Some(ctx), Some(text)) = (unsafe { context(host) }, unsafe { copy_bytes(message.cast(), len) }) {
        ctx.log(level, String::from_utf8_lossy(&text).into_owned());
    }
}
