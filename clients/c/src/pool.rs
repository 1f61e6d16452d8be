//! An open pool and its blocking key-value calls.

use std::sync::Arc;

use ferrite_client::{Attribute, Error, FindKind, InvokeOptions, InvokePutOptions, Pool, PutFlags};

use crate::args;
use crate::memory::{ferrite_buffer, ferrite_key_list, ferrite_response_list};
use crate::runtime::Runtime;
use crate::status::{ferrite_status, guard, Failure};

/// An open pool. Made by `ferrite_pool_create` or `ferrite_pool_open`, closed and freed by
/// `ferrite_pool_close`. May be used from several threads at once.
#[derive(Debug)]
pub struct ferrite_pool {
    pub(crate) pool: Pool,
    pub(crate) runtime: Arc<Runtime>,
    /// The largest value the server sends inline (its announced `value_bytes_max`):
    /// `ferrite_get_into` reads into a larger buffer with a direct read.
    inline_max: usize,
}

impl ferrite_pool {
    pub(crate) fn new(pool: Pool, runtime: Arc<Runtime>, inline_max: u32) -> ferrite_pool {
        ferrite_pool { pool, runtime, inline_max: inline_max as usize }
    }
}

/// Flags of `ferrite_put` and `ferrite_put_async`, or-ed together. The values are the wire's.
pub type ferrite_put_flags = u32;
/// Fail with `FERRITE_KEY_EXISTS` instead of replacing a present key.
pub const FERRITE_PUT_CREATE_ONLY: ferrite_put_flags = 1;
/// Fail with `FERRITE_KEY_NOT_FOUND` instead of inserting an absent key.
pub const FERRITE_PUT_UPDATE_ONLY: ferrite_put_flags = 2;
/// Acknowledge once on stable storage, whatever the pool's default durability.
pub const FERRITE_PUT_SYNC: ferrite_put_flags = 4;
/// Acknowledge once applied in memory, whatever the pool's default durability.
pub const FERRITE_PUT_ASYNC: ferrite_put_flags = 8;

/// What `ferrite_find` matches keys against its pattern with. The values are the wire's.
pub type ferrite_find_kind = u32;
/// Keys equal to the pattern.
pub const FERRITE_FIND_EXACT: ferrite_find_kind = 1;
/// Keys starting with the pattern.
pub const FERRITE_FIND_PREFIX: ferrite_find_kind = 2;
/// Keys matched anywhere by the pattern, a regular expression (Rust `regex` syntax, over bytes).
pub const FERRITE_FIND_REGEX: ferrite_find_kind = 3;
/// Keys matched whole by the pattern, a Redis-style glob (`*`, `?`, `[a-z]`, `[^x]`, `\`).
pub const FERRITE_FIND_GLOB: ferrite_find_kind = 4;
/// The keys after the pattern in key order (MCAS `next:`); needs a pool with a secondary index.
pub const FERRITE_FIND_NEXT: ferrite_find_kind = 5;

/// Flags of `ferrite_invoke` and `ferrite_invoke_put`, or-ed together.
pub type ferrite_invoke_flags = u32;
/// `ferrite_invoke`: run the plugins under a read lock; they may not write.
pub const FERRITE_INVOKE_READ_ONLY: ferrite_invoke_flags = 1;
/// Both: return as soon as the server accepts the call, with no responses; the plugins' answer
/// is dropped and their failure goes unreported.
pub const FERRITE_INVOKE_FIRE_AND_FORGET: ferrite_invoke_flags = 2;
/// `ferrite_invoke_put`: keep an existing value instead of replacing it; the plugins run on it.
pub const FERRITE_INVOKE_NO_OVERWRITE: ferrite_invoke_flags = 4;
/// `ferrite_invoke_put`: put the value in unattached pool memory, whose location the plugins are
/// told, instead of making it the key's value.
pub const FERRITE_INVOKE_DETACHED: ferrite_invoke_flags = 8;

/// The Rust client's put flags for C's. Contradictions (create-only with update-only, sync with
/// async) are refused here, as the server would refuse them.
pub(crate) fn put_flags(flags: ferrite_put_flags) -> Result<PutFlags, Failure> {
    u16::try_from(flags).ok().and_then(|bits| PutFlags::from_bits(bits).ok()).ok_or_else(|| {
        Failure::invalid(format!(
            "put flags {flags:#x}: unknown bits, or both of create-only/update-only or sync/async"
        ))
    })
}

/// # Safety
/// `pool` is NULL or a live pool.
pub(crate) unsafe fn pool<'a>(pool: *const ferrite_pool) -> Result<&'a ferrite_pool, Failure> {
    // SAFETY: passed on from our caller.
    unsafe { args::object(pool, "pool") }
}

/// Whether the `ferrite_pool_create` call that returned `pool` created it (true) or opened an
/// existing one (false; always false for `ferrite_pool_open`).
///
/// # Safety
/// `pool` is NULL or a live pool; `created` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_pool_created(pool: *const ferrite_pool, created: *mut bool) -> ferrite_status {
    guard(|| {
        let created = args::out(created, "created")?;
        // SAFETY: the caller promises a live pool, and `created` was checked non-null.
        unsafe { created.write(self::pool(pool)?.pool.created()) };
        Ok(())
    })
}

/// Closes the pool on the server and frees the handle. The handle is freed whatever the status,
/// so never use it again. Asynchronous operations still in flight on it complete normally.
/// NULL is a no-op.
///
/// # Safety
/// `pool` is NULL or a pool not closed before; no other thread may use it during or after this
/// call.
#[no_mangle]
pub unsafe extern "C" fn ferrite_pool_close(pool: *mut ferrite_pool) -> ferrite_status {
    guard(|| {
        if pool.is_null() {
            return Ok(());
        }
        // SAFETY: the caller hands back a pool we allocated, once.
        let pool = unsafe { Box::from_raw(pool) };
        let ferrite_pool { pool, runtime, .. } = *pool;
        runtime.block_on(pool.close())?;
        Ok(())
    })
}

/// Stores `value` under `key`. `flags` is 0 or an or of `FERRITE_PUT_*`: create-only fails with
/// `FERRITE_KEY_EXISTS`, update-only with `FERRITE_KEY_NOT_FOUND`; without a durability flag the
/// pool's default applies. The bytes are read before the call returns.
///
/// A value longer than 2 MiB travels as a direct transfer by itself: in pipelined pieces read
/// straight from `value`, made the key's value at once when the last has arrived (a reader sees
/// the old value or the new one). Values may be as long as the server's
/// `limits.direct_value_bytes_max` (1 GiB by default); a longer one fails with
/// `FERRITE_VALUE_TOO_LARGE`, and one the pool has no room for with `FERRITE_POOL_FULL`.
///
/// # Safety
/// `pool` is NULL or a live pool; `key` and `value` are NULL or point to `key_len` and
/// `value_len` readable bytes (NULL only with length 0).
#[no_mangle]
pub unsafe extern "C" fn ferrite_put(
    pool: *const ferrite_pool,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: ferrite_put_flags,
) -> ferrite_status {
    guard(|| {
        // SAFETY: the caller promises a live pool and readable bytes.
        let (pool, key, value) =
            unsafe { (self::pool(pool)?, args::bytes(key, key_len, "key")?, args::bytes(value, value_len, "value")?) };
        let flags = put_flags(flags)?;
        pool.runtime.block_on(pool.pool.put_with(key, value, flags))?;
        Ok(())
    })
}

/// Fetches the value stored under `key` into `*out`, a buffer the library allocates, to be freed
/// with `ferrite_buffer_free`. On failure `*out` is empty (`{NULL, 0}`). Fails with
/// `FERRITE_KEY_NOT_FOUND`. A value too long to come inline (past the server's
/// `value_bytes_max`, 2 MiB by default) is read with a direct read by itself.
///
/// # Safety
/// `pool` is NULL or a live pool; `key` is NULL or points to `key_len` readable bytes (NULL only
/// with length 0); `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_get(
    pool: *const ferrite_pool,
    key: *const u8,
    key_len: usize,
    out: *mut ferrite_buffer,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, ferrite_buffer::EMPTY) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live pool and readable bytes.
        let (pool, key) = unsafe { (self::pool(pool)?, args::bytes(key, key_len, "key")?) };
        let value = pool.runtime.block_on(pool.pool.get_bytes(key))?;
        // A value read directly is a vector of its own, handed over without a copy; an inline one
        // is copied out of its response frame.
        let value = Vec::from(value);
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { out.write(ferrite_buffer::from_vec(value)) };
        Ok(())
    })
}

/// What [`fill`] made of a caller's buffer.
enum Filled {
    /// The value, this long, is at the start of the buffer.
    Value(usize),
    /// The value, this long, does not fit; nothing was written.
    TooSmall(u64),
}

/// Reads `key`'s value into `buffer`, by the cheapest way the buffer allows:
///
/// - an empty buffer only learns the value's length (its attribute), so asking for the size
///   never moves the value;
/// - a buffer no larger than the inline limit takes an inline get (one round trip), copied from
///   the response frame; a value that long is the only kind that fits;
/// - a larger buffer is filled by a direct read, piece by piece straight into it (no second
///   buffer holds the value); a value that does not fit is refused before any piece is read.
async fn fill(pool: &Pool, inline_max: usize, key: &[u8], buffer: &mut [u8]) -> Result<Filled, Error> {
    if buffer.is_empty() {
        let length = pool.attribute(Attribute::ValueLength, key).await?;
        return Ok(if length == 0 { Filled::Value(0) } else { Filled::TooSmall(length) });
    }
    if buffer.len() <= inline_max {
        let value = pool.get_bytes(key).await?;
        if value.len() > buffer.len() {
            return Ok(Filled::TooSmall(value.len() as u64));
        }
        buffer[..value.len()].copy_from_slice(&value);
        return Ok(Filled::Value(value.len()));
    }
    // A value that changes length between the refusal and the look at its length is read again.
    for _ in 0..3 {
        match pool.get_direct_into(key, buffer).await {
            Ok(length) => return Ok(Filled::Value(length)),
            // The client's own refusal (the server's errors are `Error::Server`): too long.
            Err(Error::InvalidArgument(_)) => {
                let length = pool.attribute(Attribute::ValueLength, key).await?;
                if length > buffer.len() as u64 {
                    return Ok(Filled::TooSmall(length));
                }
            }
            Err(error) => return Err(error),
        }
    }
    let length = pool.attribute(Attribute::ValueLength, key).await?;
    Ok(Filled::TooSmall(length.max(buffer.len() as u64 + 1)))
}

/// Fetches the value stored under `key` into the caller's buffer `buf` of `capacity` bytes, and
/// stores its length in `*len_out`. If the value does not fit, nothing is copied, `*len_out` is
/// the length needed and the status is `FERRITE_ERR_BUFFER_TOO_SMALL`, so a caller may ask with
/// `capacity` 0 (and `buf` NULL) to learn the size (that asks for the length alone and moves no
/// value). Fails with `FERRITE_KEY_NOT_FOUND`.
///
/// A buffer larger than the server's inline limit (`value_bytes_max`, 2 MiB by default) is filled
/// with a direct read, piece by piece straight into `buf`, which is how values past the inline
/// limit (up to `limits.direct_value_bytes_max`, 1 GiB by default) are read without a second copy;
/// that costs one round trip more than an inline get, so size buffers to the values they take.
///
/// # Safety
/// `pool` is NULL or a live pool; `key` is NULL or points to `key_len` readable bytes (NULL only
/// with length 0); `buf` is NULL or points to `capacity` writable bytes (NULL only with capacity
/// 0), which nothing else uses during the call; `len_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_get_into(
    pool: *const ferrite_pool,
    key: *const u8,
    key_len: usize,
    buf: *mut u8,
    capacity: usize,
    len_out: *mut usize,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `len_out` is NULL or writable, as the caller promises.
        unsafe { args::clear(len_out, 0) };
        let len_out = args::out(len_out, "len_out")?;
        // SAFETY: the caller promises a live pool, readable key bytes and a writable buffer.
        let (pool, key, buffer) =
            unsafe { (self::pool(pool)?, args::bytes(key, key_len, "key")?, args::bytes_mut(buf, capacity, "buf")?) };
        match pool.runtime.block_on(fill(&pool.pool, pool.inline_max, key, buffer))? {
            Filled::Value(length) => {
                // SAFETY: checked non-null above; writable as the caller promises.
                unsafe { len_out.write(length) };
                Ok(())
            }
            Filled::TooSmall(needed) => {
                // SAFETY: checked non-null above; writable as the caller promises.
                unsafe { len_out.write(usize::try_from(needed).unwrap_or(usize::MAX)) };
                Err(Failure {
                    status: ferrite_status::FERRITE_ERR_BUFFER_TOO_SMALL,
                    message: format!("the value of {needed} bytes does not fit the buffer of {capacity} bytes"),
                })
            }
        }
    })
}

/// Reads up to `capacity` bytes of the value stored under `key`, from byte `offset` of it, into
/// `buf`, and stores how many it read in `*len_out`: `capacity`, or fewer at the value's end (0
/// at its very end, `offset` equal to its length). A direct read (MCAS `get_direct_offset`),
/// piece by piece straight into `buf`, so a slice of a value of any length costs no more than
/// the slice. Fails with `FERRITE_KEY_NOT_FOUND`, and with `FERRITE_INVALID_ARGUMENT` (the
/// server's code) for an offset past the value's end.
///
/// # Safety
/// `pool` is NULL or a live pool; `key` is NULL or points to `key_len` readable bytes (NULL only
/// with length 0); `buf` is NULL or points to `capacity` writable bytes (NULL only with capacity
/// 0), which nothing else uses during the call; `len_out` is NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // A C signature: each byte string is a pointer and a length.
pub unsafe extern "C" fn ferrite_get_offset(
    pool: *const ferrite_pool,
    key: *const u8,
    key_len: usize,
    offset: u64,
    buf: *mut u8,
    capacity: usize,
    len_out: *mut usize,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `len_out` is NULL or writable, as the caller promises.
        unsafe { args::clear(len_out, 0) };
        let len_out = args::out(len_out, "len_out")?;
        // SAFETY: the caller promises a live pool, readable key bytes and a writable buffer.
        let (pool, key, buffer) =
            unsafe { (self::pool(pool)?, args::bytes(key, key_len, "key")?, args::bytes_mut(buf, capacity, "buf")?) };
        let read = pool.runtime.block_on(pool.pool.get_direct_offset(key, offset, buffer))?;
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { len_out.write(read) };
        Ok(())
    })
}

/// Writes the `data_len` bytes of `data` at byte `offset` inside the value stored under `key`,
/// which keeps its length (MCAS `put_direct_offset`). Each piece of up to the inline limit (2 MiB
/// by default) is written atomically and durably like a put; a longer write is several pieces,
/// applied in order. `flags` is 0, `FERRITE_PUT_SYNC` or `FERRITE_PUT_ASYNC` (other put flags do
/// not apply: the key must exist). Fails with `FERRITE_KEY_NOT_FOUND`, and with
/// `FERRITE_INVALID_ARGUMENT` (the server's code) for a range that passes the value's end.
///
/// # Safety
/// `pool` is NULL or a live pool; `key` and `data` are NULL or point to `key_len` and `data_len`
/// readable bytes (NULL only with length 0).
#[no_mangle]
pub unsafe extern "C" fn ferrite_put_offset(
    pool: *const ferrite_pool,
    key: *const u8,
    key_len: usize,
    offset: u64,
    data: *const u8,
    data_len: usize,
    flags: ferrite_put_flags,
) -> ferrite_status {
    guard(|| {
        // SAFETY: the caller promises a live pool and readable bytes.
        let (pool, key, data) =
            unsafe { (self::pool(pool)?, args::bytes(key, key_len, "key")?, args::bytes(data, data_len, "data")?) };
        let flags = args::flags(flags, FERRITE_PUT_SYNC | FERRITE_PUT_ASYNC, "ferrite_put_offset flags")?;
        let flags = put_flags(flags)?;
        pool.runtime.block_on(pool.pool.put_direct_offset_with(key, offset, data, flags))?;
        Ok(())
    })
}

/// Removes `key` and its value. Fails with `FERRITE_KEY_NOT_FOUND` if absent.
///
/// # Safety
/// `pool` is NULL or a live pool; `key` is NULL or points to `key_len` readable bytes (NULL only
/// with length 0).
#[no_mangle]
pub unsafe extern "C" fn ferrite_erase(pool: *const ferrite_pool, key: *const u8, key_len: usize) -> ferrite_status {
    guard(|| {
        // SAFETY: the caller promises a live pool and readable bytes.
        let (pool, key) = unsafe { (self::pool(pool)?, args::bytes(key, key_len, "key")?) };
        pool.runtime.block_on(pool.pool.erase(key))?;
        Ok(())
    })
}

/// Stores the number of key-value pairs in the pool in `*count`.
///
/// # Safety
/// `pool` is NULL or a live pool; `count` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_count(pool: *const ferrite_pool, count: *mut u64) -> ferrite_status {
    guard(|| {
        let count = args::out(count, "count")?;
        // SAFETY: the caller promises a live pool.
        let pool = unsafe { self::pool(pool)? };
        let objects = pool.runtime.block_on(pool.pool.count())?;
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { count.write(objects) };
        Ok(())
    })
}

/// What the server knows of one value (`ferrite_get_attributes`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ferrite_value_attributes {
    /// Length of the value in bytes.
    pub length: u64,
    /// CRC-32 (IEEE 802.3, as zlib's `crc32`) of the value, computed by the server, so a value
    /// can be verified without fetching it.
    pub crc32: u32,
    /// When the value was last written, in nanoseconds since the Unix epoch.
    pub write_time_ns: u64,
}

/// What the server knows of a pool (`ferrite_get_pool_attributes`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ferrite_pool_attributes {
    /// Key-value pairs in the pool.
    pub objects: u64,
    /// Capacity in bytes, fixed at creation.
    pub size_bytes: u64,
    /// Bytes of capacity in use.
    pub used_bytes: u64,
}

/// Stores the length, CRC-32 and write time of the value under `key` in `*out`, without
/// fetching the value. Fails with `FERRITE_KEY_NOT_FOUND` if there is none.
///
/// # Safety
/// `pool` is NULL or a live pool; `key` is NULL or `key_len` readable bytes; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_get_attributes(
    pool: *const ferrite_pool,
    key: *const u8,
    key_len: usize,
    out: *mut ferrite_value_attributes,
) -> ferrite_status {
    guard(|| {
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live pool and readable bytes.
        let (pool, key) = unsafe { (self::pool(pool)?, args::bytes(key, key_len, "key")?) };
        let attributes = pool.runtime.block_on(pool.pool.value_attributes(key))?;
        let attributes = ferrite_value_attributes {
            length: attributes.length,
            crc32: attributes.crc32,
            write_time_ns: attributes.write_time_ns,
        };
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { out.write(attributes) };
        Ok(())
    })
}

/// Stores the pool's pair count, capacity and bytes in use in `*out`.
///
/// # Safety
/// `pool` is NULL or a live pool; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_get_pool_attributes(
    pool: *const ferrite_pool,
    out: *mut ferrite_pool_attributes,
) -> ferrite_status {
    guard(|| {
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live pool.
        let pool = unsafe { self::pool(pool)? };
        let attributes = pool.runtime.block_on(pool.pool.pool_attributes())?;
        let attributes = ferrite_pool_attributes {
            objects: attributes.objects,
            size_bytes: attributes.size_bytes,
            used_bytes: attributes.used_bytes,
        };
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { out.write(attributes) };
        Ok(())
    })
}

/// Every key matching `pattern` as `kind` (`FERRITE_FIND_*`) says, once each, in key order, into
/// `*out`, to be freed with `ferrite_key_list_free`. On failure `*out` is empty. A regular
/// expression that does not compile fails with `FERRITE_INVALID_ARGUMENT`.
///
/// # Safety
/// `pool` is NULL or a live pool; `pattern` is NULL or points to `pattern_len` readable bytes
/// (NULL only with length 0); `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_find(
    pool: *const ferrite_pool,
    kind: ferrite_find_kind,
    pattern: *const u8,
    pattern_len: usize,
    out: *mut ferrite_key_list,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, ferrite_key_list::EMPTY) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live pool and readable bytes.
        let (pool, pattern) = unsafe { (self::pool(pool)?, args::bytes(pattern, pattern_len, "pattern")?) };
        let kind = u16::try_from(kind)
            .ok()
            .and_then(|raw| FindKind::from_u16(raw).ok())
            .ok_or_else(|| Failure::invalid(format!("find kind {kind} is none of FERRITE_FIND_*")))?;
        let keys = pool.runtime.block_on(pool.pool.find_all(kind, pattern))?;
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { out.write(ferrite_key_list::from_keys(keys)) };
        Ok(())
    })
}

/// Runs the pool's plugin chain on `key`'s value with `payload` and stores the chain's buffers,
/// in chain order, in `*out`, to be freed with `ferrite_response_list_free` (on failure it is
/// empty).
///
/// - `flags`: `FERRITE_INVOKE_READ_ONLY`, `FERRITE_INVOKE_FIRE_AND_FORGET` (then `*out` is empty).
/// - `create_size`: if not 0, an absent key is created with a zeroed value of this many bytes
///   first; if 0, an absent key fails with `FERRITE_KEY_NOT_FOUND`.
///
/// Fails with `FERRITE_INVALID_ARGUMENT` on a pool without plugins, `FERRITE_ADO_FAILED` or
/// `FERRITE_ADO_TIMEOUT` when a plugin fails or overruns (the pool is then as before the call).
/// An empty key (`NULL, 0`) runs the chain on the pool itself.
///
/// # Safety
/// `pool` is NULL or a live pool; `key` and `payload` are NULL or point to `key_len` and
/// `payload_len` readable bytes (NULL only with length 0); `out` is NULL or writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // A C signature: each byte string is a pointer and a length.
pub unsafe extern "C" fn ferrite_invoke(
    pool: *const ferrite_pool,
    key: *const u8,
    key_len: usize,
    payload: *const u8,
    payload_len: usize,
    flags: ferrite_invoke_flags,
    create_size: u64,
    out: *mut ferrite_response_list,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, ferrite_response_list::EMPTY) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live pool and readable bytes.
        let (pool, key, payload) = unsafe {
            (self::pool(pool)?, args::bytes(key, key_len, "key")?, args::bytes(payload, payload_len, "payload")?)
        };
        let flags =
            args::flags(flags, FERRITE_INVOKE_READ_ONLY | FERRITE_INVOKE_FIRE_AND_FORGET, "ferrite_invoke flags")?;
        let options = InvokeOptions {
            create_size: (create_size > 0).then_some(create_size),
            read_only: flags & FERRITE_INVOKE_READ_ONLY != 0,
            fire_and_forget: flags & FERRITE_INVOKE_FIRE_AND_FORGET != 0,
        };
        let responses = pool.runtime.block_on(pool.pool.invoke(key, payload, options))?;
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { out.write(ferrite_response_list::from_responses(responses)) };
        Ok(())
    })
}

/// Stores `value` under `key`, then runs the pool's plugin chain on it with `payload`, in one
/// request under one lock of the key; the chain's buffers go to `*out` as for `ferrite_invoke`.
/// `flags`: `FERRITE_INVOKE_NO_OVERWRITE`, `FERRITE_INVOKE_DETACHED`,
/// `FERRITE_INVOKE_FIRE_AND_FORGET`. Fails like `ferrite_invoke`; a failed call leaves the pool as
/// before it, the put included.
///
/// # Safety
/// `pool` is NULL or a live pool; `key`, `value` and `payload` are NULL or point to `key_len`,
/// `value_len` and `payload_len` readable bytes (NULL only with length 0); `out` is NULL or
/// writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)] // A C signature: each byte string is a pointer and a length.
pub unsafe extern "C" fn ferrite_invoke_put(
    pool: *const ferrite_pool,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    payload: *const u8,
    payload_len: usize,
    flags: ferrite_invoke_flags,
    out: *mut ferrite_response_list,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, ferrite_response_list::EMPTY) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live pool and readable bytes.
        let (pool, key, value, payload) = unsafe {
            (
                self::pool(pool)?,
                args::bytes(key, key_len, "key")?,
                args::bytes(value, value_len, "value")?,
                args::bytes(payload, payload_len, "payload")?,
            )
        };
        let known = FERRITE_INVOKE_NO_OVERWRITE | FERRITE_INVOKE_DETACHED | FERRITE_INVOKE_FIRE_AND_FORGET;
        let flags = args::flags(flags, known, "ferrite_invoke_put flags")?;
        let options = InvokePutOptions {
            no_overwrite: flags & FERRITE_INVOKE_NO_OVERWRITE != 0,
            detached: flags & FERRITE_INVOKE_DETACHED != 0,
            fire_and_forget: flags & FERRITE_INVOKE_FIRE_AND_FORGET != 0,
        };
        let responses = pool.runtime.block_on(pool.pool.invoke_put(key, value, payload, options))?;
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { out.write(ferrite_response_list::from_responses(responses)) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// C code passes the documented constants; they must be the wire's bits, which `put_flags`
    /// hands to the protocol unchanged.
    #[test]
    fn put_flag_constants_are_the_wire_bits() {
        assert_eq!(put_flags(FERRITE_PUT_CREATE_ONLY).ok(), Some(PutFlags::CREATE_ONLY));
        assert_eq!(put_flags(FERRITE_PUT_UPDATE_ONLY).ok(), Some(PutFlags::UPDATE_ONLY));
        assert_eq!(put_flags(FERRITE_PUT_SYNC).ok(), Some(PutFlags::SYNC));
        assert_eq!(put_flags(FERRITE_PUT_ASYNC).ok(), Some(PutFlags::ASYNC));
        assert!(put_flags(FERRITE_PUT_CREATE_ONLY | FERRITE_PUT_UPDATE_ONLY).is_err());
        assert!(put_flags(FERRITE_PUT_SYNC | FERRITE_PUT_ASYNC).is_err());
        assert!(put_flags(0x10).is_err());
        assert!(put_flags(0x1_0001).is_err(), "bits beyond 16 are not silently dropped");
    }

    #[test]
    fn find_kind_constants_are_the_wire_kinds() {
        for (constant, kind) in [
            (FERRITE_FIND_EXACT, FindKind::Exact),
            (FERRITE_FIND_PREFIX, FindKind::Prefix),
            (FERRITE_FIND_REGEX, FindKind::Regex),
            (FERRITE_FIND_GLOB, FindKind::Glob),
            (FERRITE_FIND_NEXT, FindKind::Next),
        ] {
            assert_eq!(constant, kind as u32);
        }
    }
}
