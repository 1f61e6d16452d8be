//! What the library allocates and hands to C, and the functions that take it back.
//!
//! Every array is a Rust `Box<[T]>` given away with `Box::into_raw` and rebuilt with
//! `Box::from_raw` by its free function, with the same length; C never frees these with `free()`.
//! The free functions reset the caller's struct to empty, so freeing twice is harmless.

use std::ffi::{c_char, CString};
use std::ptr;

use crate::session::{ferrite_pool_flags, FERRITE_POOL_ASYNC, FERRITE_POOL_INDEXED};
use crate::status::guard_void;

/// A byte string the library allocated: a value, a key, a plugin's answer. `data` is NULL exactly
/// when `len` is 0. Free it with `ferrite_buffer_free` (buffers inside a list are freed with the
/// list).
#[repr(C)]
#[derive(Debug)]
pub struct ferrite_buffer {
    pub data: *mut u8,
    pub len: usize,
}

impl ferrite_buffer {
    pub(crate) const EMPTY: ferrite_buffer = ferrite_buffer { data: ptr::null_mut(), len: 0 };

    pub(crate) fn from_vec(bytes: Vec<u8>) -> ferrite_buffer {
        let (data, len) = give(bytes);
        ferrite_buffer { data, len }
    }

    /// Frees the bytes and leaves the buffer empty.
    ///
    /// # Safety
    /// The buffer is empty or was made by [`ferrite_buffer::from_vec`] and not changed since.
    unsafe fn release(&mut self) {
        // SAFETY: passed on to our caller.
        drop(unsafe { take_back(self.data, self.len) });
        *self = ferrite_buffer::EMPTY;
    }
}

/// A list of keys (`ferrite_find`). Free it with `ferrite_key_list_free`, which frees the keys too.
#[repr(C)]
#[derive(Debug)]
pub struct ferrite_key_list {
    pub keys: *mut ferrite_buffer,
    pub len: usize,
}

impl ferrite_key_list {
    pub(crate) const EMPTY: ferrite_key_list = ferrite_key_list { keys: ptr::null_mut(), len: 0 };

    pub(crate) fn from_keys(keys: Vec<Vec<u8>>) -> ferrite_key_list {
        let (keys, len) = give(keys.into_iter().map(ferrite_buffer::from_vec).collect());
        ferrite_key_list { keys, len }
    }
}

/// One buffer of a plugin chain's answer: `layer` is the index in the pool's plugin chain of the
/// plugin that produced it.
#[repr(C)]
#[derive(Debug)]
pub struct ferrite_response {
    pub layer: u16,
    pub data: ferrite_buffer,
}

/// A plugin chain's answer (`ferrite_invoke`, `ferrite_invoke_put`), in chain order. Free it with
/// `ferrite_response_list_free`, which frees the buffers too.
#[repr(C)]
#[derive(Debug)]
pub struct ferrite_response_list {
    pub items: *mut ferrite_response,
    pub len: usize,
}

impl ferrite_response_list {
    pub(crate) const EMPTY: ferrite_response_list = ferrite_response_list { items: ptr::null_mut(), len: 0 };

    pub(crate) fn from_responses(responses: Vec<ferrite_client::InvokeResponse>) -> ferrite_response_list {
        let items = responses
            .into_iter()
            .map(|response| ferrite_response {
                layer: response.layer,
                data: ferrite_buffer::from_vec(response.data.to_vec()),
            })
            .collect();
        let (items, len) = give(items);
        ferrite_response_list { items, len }
    }
}

/// One pool, as `ferrite_pool_list` reports it. The strings belong to the list.
#[repr(C)]
#[derive(Debug)]
pub struct ferrite_pool_info {
    /// The pool's name, NUL-terminated.
    pub name: *mut c_char,
    /// The pool's plugin chain, comma-separated in the order the plugins run; "" for none.
    pub plugins: *mut c_char,
    /// The shard that holds the pool.
    pub shard: u16,
    /// Opens held on the pool across all sessions; a pool with opens cannot be deleted.
    pub open_count: u32,
    /// Key-value pairs in the pool.
    pub objects: u64,
    /// Capacity in bytes, fixed at creation.
    pub size_bytes: u64,
    /// Bytes of capacity in use.
    pub used_bytes: u64,
    /// The pool's settings, as `ferrite_pool_create`'s flags name them: `FERRITE_POOL_INDEXED`
    /// if it has a whole secondary index (given at creation, or by `ferrite_pool_configure`),
    /// `FERRITE_POOL_ASYNC` if its writes that choose no durability are acknowledged once
    /// applied.
    pub flags: ferrite_pool_flags,
}

/// The pools of every shard (`ferrite_pool_list`). Free it with `ferrite_pool_info_list_free`.
#[repr(C)]
#[derive(Debug)]
pub struct ferrite_pool_info_list {
    pub items: *mut ferrite_pool_info,
    pub len: usize,
}

impl ferrite_pool_info_list {
    pub(crate) const EMPTY: ferrite_pool_info_list = ferrite_pool_info_list { items: ptr::null_mut(), len: 0 };

    pub(crate) fn from_pools(pools: Vec<ferrite_client::PoolInfo>) -> ferrite_pool_info_list {
        let items = pools
            .into_iter()
            .map(|pool| ferrite_pool_info {
                name: give_text(&pool.name),
                plugins: give_text(&pool.plugins.join(",")),
                shard: pool.shard,
                open_count: pool.open_count,
                objects: pool.objects,
                size_bytes: pool.size_bytes,
                used_bytes: pool.used_bytes,
                flags: pool_flags(&pool),
            })
            .collect();
        let (items, len) = give(items);
        ferrite_pool_info_list { items, len }
    }
}

/// A listed pool's settings as creation flags.
fn pool_flags(pool: &ferrite_client::PoolInfo) -> ferrite_pool_flags {
    let indexed = if pool.indexed { FERRITE_POOL_INDEXED } else { 0 };
    let durability = match pool.durability {
        ferrite_client::Durability::Sync => 0,
        ferrite_client::Durability::Async => FERRITE_POOL_ASYNC,
    };
    indexed | durability
}

/// One counter of one shard (`ferrite_statistics`): see `get_statistics` in `docs/protocol.md`
/// for the names.
#[repr(C)]
#[derive(Debug)]
pub struct ferrite_statistic {
    pub shard: u16,
    /// The counter's name, NUL-terminated (`"puts"`, `"clients"`, ...).
    pub name: *mut c_char,
    pub value: u64,
}

/// Every shard's counters (`ferrite_statistics`). Free it with `ferrite_statistic_list_free`.
#[repr(C)]
#[derive(Debug)]
pub struct ferrite_statistic_list {
    pub items: *mut ferrite_statistic,
    pub len: usize,
}

impl ferrite_statistic_list {
    pub(crate) const EMPTY: ferrite_statistic_list = ferrite_statistic_list { items: ptr::null_mut(), len: 0 };

    pub(crate) fn from_shards(shards: Vec<ferrite_client::ShardStatistics>) -> ferrite_statistic_list {
        let items = shards
            .into_iter()
            .flat_map(|shard| {
                shard.counters.into_iter().map(move |(name, value)| ferrite_statistic {
                    shard: shard.shard,
                    name: give_text(&name),
                    value,
                })
            })
            .collect();
        let (items, len) = give(items);
        ferrite_statistic_list { items, len }
    }
}

/// Hands a vector to C as pointer and length; NULL for an empty one.
pub(crate) fn give<T>(items: Vec<T>) -> (*mut T, usize) {
    if items.is_empty() {
        return (ptr::null_mut(), 0);
    }
    let items = items.into_boxed_slice();
    let len = items.len();
    (Box::into_raw(items).cast::<T>(), len)
}

/// Takes back what [`give`] handed out.
///
/// # Safety
/// `(data, len)` came from [`give`] (or is `(NULL, 0)`) and has not been taken back before.
pub(crate) unsafe fn take_back<T>(data: *mut T, len: usize) -> Box<[T]> {
    if data.is_null() {
        return Box::default();
    }
    // SAFETY: `give` made this pointer from a `Box<[T]>` of exactly `len` elements.
    unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(data, len)) }
}

/// A NUL-terminated copy of `text` for C, freed with [`take_back_text`].
pub(crate) fn give_text(text: &str) -> *mut c_char {
    // Names come from the server; an interior NUL would make the C string lie about its end.
    CString::new(text.replace('\0', "\\0")).unwrap_or_default().into_raw()
}

/// # Safety
/// `text` is NULL or came from [`give_text`] and has not been taken back before.
pub(crate) unsafe fn take_back_text(text: *mut c_char) {
    if !text.is_null() {
        // SAFETY: made by `CString::into_raw` in `give_text`.
        drop(unsafe { CString::from_raw(text) });
    }
}

/// Frees a buffer's bytes and resets it to `{NULL, 0}`. NULL, or an already empty buffer, is a
/// no-op.
///
/// # Safety
/// `buffer` is NULL or points to a `ferrite_buffer` that is empty or that this library filled in
/// and the caller has not changed.
#[no_mangle]
pub unsafe extern "C" fn ferrite_buffer_free(buffer: *mut ferrite_buffer) {
    guard_void(|| {
        // SAFETY: the caller promises a valid buffer when non-null.
        if let Some(buffer) = unsafe { buffer.as_mut() } {
            // SAFETY: the caller promises it is ours and unchanged.
            unsafe { buffer.release() };
        }
        Ok(())
    });
}

/// Frees a key list and every key in it, and resets it to `{NULL, 0}`. NULL is a no-op.
///
/// # Safety
/// `list` is NULL or points to a `ferrite_key_list` that is empty or that this library filled in
/// and the caller has not changed.
#[no_mangle]
pub unsafe extern "C" fn ferrite_key_list_free(list: *mut ferrite_key_list) {
    guard_void(|| {
        // SAFETY: the caller promises a valid list when non-null.
        if let Some(list) = unsafe { list.as_mut() } {
            // SAFETY: the list and its buffers are ours and unchanged.
            for mut key in unsafe { take_back(list.keys, list.len) } {
                unsafe { key.release() };
            }
            *list = ferrite_key_list::EMPTY;
        }
        Ok(())
    });
}

/// Frees a plugin answer and every buffer in it, and resets it to `{NULL, 0}`. NULL is a no-op.
///
/// # Safety
/// `list` is NULL or points to a `ferrite_response_list` that is empty or that this library
/// filled in and the caller has not changed.
#[no_mangle]
pub unsafe extern "C" fn ferrite_response_list_free(list: *mut ferrite_response_list) {
    guard_void(|| {
        // SAFETY: the caller promises a valid list when non-null.
        if let Some(list) = unsafe { list.as_mut() } {
            // SAFETY: the list and its buffers are ours and unchanged.
            for mut response in unsafe { take_back(list.items, list.len) } {
                unsafe { response.data.release() };
            }
            *list = ferrite_response_list::EMPTY;
        }
        Ok(())
    });
}

/// Frees a pool list and its strings, and resets it to `{NULL, 0}`. NULL is a no-op.
///
/// # Safety
/// `list` is NULL or points to a `ferrite_pool_info_list` that is empty or that this library
/// filled in and the caller has not changed.
#[no_mangle]
pub unsafe extern "C" fn ferrite_pool_info_list_free(list: *mut ferrite_pool_info_list) {
    guard_void(|| {
        // SAFETY: the caller promises a valid list when non-null.
        if let Some(list) = unsafe { list.as_mut() } {
            // SAFETY: the list and its strings are ours and unchanged.
            for pool in unsafe { take_back(list.items, list.len) } {
                unsafe {
                    take_back_text(pool.name);
                    take_back_text(pool.plugins);
                }
            }
            *list = ferrite_pool_info_list::EMPTY;
        }
        Ok(())
    });
}

/// Frees a statistics list and its names, and resets it to `{NULL, 0}`. NULL is a no-op.
///
/// # Safety
/// `list` is NULL or points to a `ferrite_statistic_list` that is empty or that this library
/// filled in and the caller has not changed.
#[no_mangle]
pub unsafe extern "C" fn ferrite_statistic_list_free(list: *mut ferrite_statistic_list) {
    guard_void(|| {
        // SAFETY: the caller promises a valid list when non-null.
        if let Some(list) = unsafe { list.as_mut() } {
            // SAFETY: the list and its strings are ours and unchanged.
            for statistic in unsafe { take_back(list.items, list.len) } {
                unsafe { take_back_text(statistic.name) };
            }
            *list = ferrite_statistic_list::EMPTY;
        }
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lists round-trip through C's hands: what `give` hands out, the free functions take back
    /// whole (Miri or valgrind would flag a mismatch), and a freed list reads as empty, so a
    /// second free is harmless.
    #[test]
    fn lists_are_freed_whole_and_reset() {
        let mut keys = ferrite_key_list::from_keys(vec![b"a".to_vec(), Vec::new(), b"ccc".to_vec()]);
        assert_eq!(keys.len, 3);
        let second = unsafe { &*keys.keys.add(1) };
        assert!(second.data.is_null() && second.len == 0, "an empty key is {{NULL, 0}}");
        let third = unsafe { &*keys.keys.add(2) };
        assert_eq!(unsafe { std::slice::from_raw_parts(third.data, third.len) }, b"ccc");
        unsafe { ferrite_key_list_free(&mut keys) };
        assert!(keys.keys.is_null() && keys.len == 0);
        unsafe { ferrite_key_list_free(&mut keys) };

        let mut empty = ferrite_key_list::from_keys(Vec::new());
        assert!(empty.keys.is_null());
        unsafe { ferrite_key_list_free(&mut empty) };
        unsafe { ferrite_key_list_free(ptr::null_mut()) };
    }

    #[test]
    fn buffers_are_null_exactly_when_empty() {
        let mut buffer = ferrite_buffer::from_vec(b"value".to_vec());
        assert!(!buffer.data.is_null() && buffer.len == 5);
        unsafe { ferrite_buffer_free(&mut buffer) };
        assert!(buffer.data.is_null() && buffer.len == 0);
        unsafe { ferrite_buffer_free(&mut buffer) };
        assert!(ferrite_buffer::from_vec(Vec::new()).data.is_null());
    }

    #[test]
    fn pool_names_become_c_strings() {
        let pool = ferrite_client::PoolInfo {
            name: "orders".into(),
            shard: 1,
            objects: 2,
            size_bytes: 3,
            used_bytes: 4,
            open_count: 5,
            memory: ferrite_client::PoolMemory::default(),
            plugins: vec!["counter".into(), "filter".into()],
            indexed: true,
            durability: ferrite_client::Durability::Async,
        };
        let mut list = ferrite_pool_info_list::from_pools(vec![pool]);
        let info = unsafe { &*list.items };
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(info.name) }, c"orders");
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(info.plugins) }, c"counter,filter");
        assert_eq!((info.shard, info.objects, info.size_bytes, info.used_bytes, info.open_count), (1, 2, 3, 4, 5));
        assert_eq!(info.flags, FERRITE_POOL_INDEXED | FERRITE_POOL_ASYNC);
        unsafe { ferrite_pool_info_list_free(&mut list) };
        assert!(list.items.is_null());
    }
}
