//! The C ABI of `include/ferrite_plugin.h`, mirrored field for field. The header is the
//! contract; these types let the Rust SDK export it and the `ferrite-ado` host load it. A test
//! compiles the header with the system C compiler and compares every size and offset.

use std::ffi::{c_char, c_int, c_void};

/// `FERRITE_PLUGIN_ABI_VERSION`: the version this crate exports and a host accepts.
pub const ABI_VERSION: u32 = 1;

pub const OK: c_int = 0;
pub const ERR_FAILED: c_int = -1;
pub const ERR_INVALID: c_int = -2;
pub const ERR_NOT_FOUND: c_int = -3;
pub const ERR_EXISTS: c_int = -4;
pub const ERR_NO_SPACE: c_int = -5;
pub const ERR_LOCKED: c_int = -6;
pub const ERR_UNSUPPORTED: c_int = -7;

pub const WORK_NEW_KEY: u32 = 1 << 0;
pub const WORK_READ_ONLY: u32 = 1 << 1;
pub const WORK_DETACHED: u32 = 1 << 2;
pub const WORK_SIGNAL: u32 = 1 << 3;
pub const WORK_POOL: u32 = 1 << 4;

pub const LOG_ERROR: c_int = 1;
pub const LOG_WARN: c_int = 2;
pub const LOG_INFO: c_int = 3;
pub const LOG_DEBUG: c_int = 4;

pub const EVENT_OPEN: u32 = 1;
pub const EVENT_CLOSE: u32 = 2;
pub const EVENT_ERASE: u32 = 3;
pub const EVENT_RESIZE: u32 = 4;
pub const EVENT_DELETE: u32 = 5;

/// The name of the one symbol a plugin exports.
pub const ENTRY_SYMBOL: &[u8] = b"ferrite_plugin_entry\0";

/// `ferrite_bytes`: borrowed, read-only bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Bytes {
    pub data: *const u8,
    pub len: usize,
}

/// `ferrite_work`: one invocation.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Work {
    pub struct_size: u32,
    pub flags: u32,
    pub pool_id: u64,
    pub key: Bytes,
    pub value: *mut u8,
    pub value_len: usize,
    pub value_offset: u64,
    pub payload: Bytes,
    pub detached: *mut u8,
    pub detached_len: usize,
    pub detached_offset: u64,
    pub layer: u32,
    pub reserved: u32,
}

/// `ferrite_pair`: a key-value pair a callback hands out.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Pair {
    pub key: Bytes,
    pub value: *mut u8,
    pub value_len: usize,
    pub value_offset: u64,
    pub write_time_ns: u64,
}

/// `ferrite_pool_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolInfo {
    pub pool_id: u64,
    pub size_bytes: u64,
    pub used_bytes: u64,
    pub objects: u64,
    pub region_bytes: u64,
}

/// `ferrite_host`: opaque to plugins.
#[repr(C)]
#[derive(Debug)]
pub struct Host {
    _private: [u8; 0],
}

/// `ferrite_pair_fn`.
pub type PairFn = unsafe extern "C" fn(context: *mut c_void, pair: *const Pair) -> c_int;

/// `ferrite_callbacks`: what the host offers a plugin.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Callbacks {
    pub struct_size: u32,
    pub reserved: u32,
    /// Ranges inside the target value, the value of a key this call created or opened for
    /// writing, or memory this call allocated.
    pub declare_write: unsafe extern "C" fn(host: *mut Host, addr: *const c_void, len: usize) -> c_int,
    pub respond: unsafe extern "C" fn(host: *mut Host, data: *const u8, len: usize) -> c_int,
    pub create_key: unsafe extern "C" fn(
        host: *mut Host,
        key: *const u8,
        key_len: usize,
        value_len: usize,
        out: *mut Pair,
    ) -> c_int,
    pub open_key: unsafe extern "C" fn(
        host: *mut Host,
        key: *const u8,
        key_len: usize,
        read_only: c_int,
        out: *mut Pair,
    ) -> c_int,
    pub erase_key: unsafe extern "C" fn(host: *mut Host, key: *const u8, key_len: usize) -> c_int,
    pub resize_value:
        unsafe extern "C" fn(host: *mut Host, key: *const u8, key_len: usize, new_len: usize, out: *mut Pair) -> c_int,
    pub allocate_memory:
        unsafe extern "C" fn(host: *mut Host, len: usize, align: usize, out: *mut *mut u8, offset: *mut u64) -> c_int,
    pub free_memory: unsafe extern "C" fn(host: *mut Host, addr: *mut u8, len: usize) -> c_int,
    pub iterate: unsafe extern "C" fn(
        host: *mut Host,
        since_ns: u64,
        until_ns: u64,
        visit: PairFn,
        context: *mut c_void,
    ) -> c_int,
    pub get_reference_vector: unsafe extern "C" fn(
        host: *mut Host,
        since_ns: u64,
        until_ns: u64,
        max: usize,
        pairs: *mut *const Pair,
        count: *mut usize,
    ) -> c_int,
    pub find_key: unsafe extern "C" fn(
        host: *mut Host,
        expression: *const c_char,
        expression_len: usize,
        position: *mut u64,
        key: *mut Bytes,
    ) -> c_int,
    pub pool_info: unsafe extern "C" fn(host: *mut Host, info: *mut PoolInfo) -> c_int,
    pub unlock: unsafe extern "C" fn(host: *mut Host, key: *const u8, key_len: usize) -> c_int,
    pub log: unsafe extern "C" fn(host: *mut Host, level: c_int, message: *const c_char, len: usize),
}

/// `ferrite_plugin_v1`: the table a plugin exports.
#[repr(C)]
#[derive(Debug)]
pub struct PluginV1 {
    pub abi_version: u32,
    pub struct_size: u32,
    pub name: *const c_char,
    pub launch: unsafe extern "C" fn(
        callbacks: *const Callbacks,
        host: *mut Host,
        config: Bytes,
        status: *mut c_int,
    ) -> *mut c_void,
    pub do_work: unsafe extern "C" fn(
        state: *mut c_void,
        work: *const Work,
        callbacks: *const Callbacks,
        host: *mut Host,
    ) -> c_int,
    pub pool_event: Option<
        unsafe extern "C" fn(state: *mut c_void, event: u32, key: Bytes, callbacks: *const Callbacks, host: *mut Host),
    >,
    pub shutdown: Option<unsafe extern "C" fn(state: *mut c_void)>,
}

/// A plugin's table lives in the plugin's static memory and is never written: sharing the
/// pointer between threads is sound.
#[allow(unsafe_code)]
unsafe impl Sync for PluginV1 {}

/// `ferrite_plugin_entry`'s type.
pub type EntryFn = unsafe extern "C" fn() -> *const PluginV1;
