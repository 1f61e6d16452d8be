//! One invocation as a Rust plugin sees it: the target, the payload, and every host callback as
//! a safe method.
//!
//! Pool memory is only ever borrowed from a [`Call`], so no pool bytes outlive the call. Mutable
//! access declares its range with the host before handing out the bytes, so the safe way to
//! write is also the crash-consistent way. Methods that can move or drop pool memory (resize,
//! erase, free, unlock) take `&mut self`, so the borrow checker rejects any earlier borrow of the
//! bytes they invalidate.

use std::any::Any;
use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::ops::{ControlFlow, Range};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use crate::abi::{self, Bytes, Host, Pair, PoolInfo, Work};
use crate::context::{Context, LogLevel};
use crate::error::{check, ErrorCode, PluginError};

/// How [`Call::open_key`] locks a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A read lock; the value cannot be written.
    Read,
    /// A write lock; the value can be written through [`Call::opened_value_mut`].
    Write,
}

/// A key this call created or opened. Only meaningful for the call that returned it; unlocking
/// or erasing the key retires it, and a retired handle is an `Invalid` error, never stale bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyHandle(usize);

/// Pool memory this call allocated. Retired by [`Call::free`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryHandle(usize);

/// A key-value pair the host handed out (iterate, reference vector). Read-only: these pairs are
/// not locked for the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairRef<'p> {
    pub key: &'p [u8],
    pub value: &'p [u8],
    /// The value's position in pool memory.
    pub value_offset: u64,
    /// When the pair was last written, nanoseconds since the Unix epoch.
    pub write_time_ns: u64,
}

/// A run of pool bytes the call may write once declared.
#[derive(Debug)]
struct Region {
    data: *mut u8,
    len: usize,
    offset: u64,
    /// Declared whole with the host, so later mutable borrows need not declare again.
    declared: bool,
}

impl Region {
    fn from_pair(pair: &Pair) -> Region {
        Region { data: pair.value, len: pair.value_len, offset: pair.value_offset, declared: false }
    }
}

#[derive(Debug)]
struct OpenedKey {
    key: Vec<u8>,
    region: Region,
    writable: bool,
}

/// One invocation of [`crate::Plugin::do_work`].
#[derive(Debug)]
pub struct Call<'a> {
    context: Context<'a>,
    work: &'a Work,
    target: Region,
    opened: Vec<Option<OpenedKey>>,
    allocated: Vec<Option<Region>>,
    _pool: PhantomData<&'a mut [u8]>,
}

/// Reads host-owned bytes, treating a null pointer as empty (the host passes NULL and 0 for
/// absent bytes, and a slice may not be built from NULL).
///
/// # Safety
/// Unless null, `data` must be readable for `len` bytes for `'b`.
#[allow(unsafe_code)]
unsafe fn host_bytes<'b>(data: *const u8, len: usize) -> &'b [u8] {
    if data.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts(data, len) }
    }
}

/// Writes to host-owned bytes, treating a null pointer as empty.
///
/// # Safety
/// Unless null, `data` must be writable for `len` bytes for `'b`, and nothing else may access
/// them meanwhile.
#[allow(unsafe_code)]
unsafe fn host_bytes_mut<'b>(data: *mut u8, len: usize) -> &'b mut [u8] {
    if data.is_null() || len == 0 {
        &mut []
    } else {
        // SAFETY: guaranteed by the caller.
        unsafe { std::slice::from_raw_parts_mut(data, len) }
    }
}

impl<'p> PairRef<'p> {
    /// # Safety
    /// The pair's key and value must be readable for `'p`.
    #[allow(unsafe_code)]
    unsafe fn from_abi(pair: &Pair) -> PairRef<'p> {
        // SAFETY: guaranteed by the caller.
        unsafe {
            PairRef {
                key: host_bytes(pair.key.data, pair.key.len),
                value: host_bytes(pair.value, pair.value_len),
                value_offset: pair.value_offset,
                write_time_ns: pair.write_time_ns,
            }
        }
    }
}

pub(crate) fn empty_pair() -> Pair {
    Pair {
        key: Bytes { data: std::ptr::null(), len: 0 },
        value: std::ptr::null_mut(),
        value_len: 0,
        value_offset: 0,
        write_time_ns: 0,
    }
}

impl<'a> Call<'a> {
    /// Wraps one `do_work` entry's arguments.
    ///
    /// # Safety
    /// `work` must be the work passed with `context`'s callbacks and host, and every pointer in
    /// it must be valid (as the header says) for `'a`.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn new(context: Context<'a>, work: &'a Work) -> Call<'a> {
        let target = Region { data: work.value, len: work.value_len, offset: work.value_offset, declared: false };
        Call { context, work, target, opened: Vec::new(), allocated: Vec::new(), _pool: PhantomData }
    }

    fn host(&self) -> *mut Host {
        self.context.host()
    }

    fn has_flag(&self, flag: u32) -> bool {
        self.work.flags & flag != 0
    }

    /// The target key (empty when the call targets the pool).
    #[allow(unsafe_code)]
    pub fn key(&self) -> &'a [u8] {
        // SAFETY: the work's key is valid for 'a (see `new`).
        unsafe { host_bytes(self.work.key.data, self.work.key.len) }
    }

    /// The client's request bytes.
    #[allow(unsafe_code)]
    pub fn payload(&self) -> &'a [u8] {
        // SAFETY: the work's payload is valid for 'a (see `new`).
        unsafe { host_bytes(self.work.payload.data, self.work.payload.len) }
    }

    pub fn pool_id(&self) -> u64 {
        self.work.pool_id
    }

    /// This plugin's position in the pool's chain, from 0.
    pub fn layer(&self) -> u32 {
        self.work.layer
    }

    /// The target was created for this call (create-on-demand); its value is zeros.
    pub fn is_new_key(&self) -> bool {
        self.has_flag(abi::WORK_NEW_KEY)
    }

    /// The caller asked for read-only: the target holds a read lock and cannot be written.
    pub fn is_read_only(&self) -> bool {
        self.has_flag(abi::WORK_READ_ONLY)
    }

    /// The caller put a value into unattached pool memory: see [`Call::detached`].
    pub fn is_detached(&self) -> bool {
        self.has_flag(abi::WORK_DETACHED)
    }

    /// A post-put/get/erase signal; the payload says which.
    pub fn is_signal(&self) -> bool {
        self.has_flag(abi::WORK_SIGNAL)
    }

    /// A key-less invocation: the target is the pool itself and there is no value.
    pub fn targets_pool(&self) -> bool {
        self.has_flag(abi::WORK_POOL)
    }

    /// The target value.
    #[allow(unsafe_code)]
    pub fn value(&self) -> &[u8] {
        // SAFETY: the target lies in pool memory valid for 'a; `&self` keeps any mutable borrow
        // of it (which needs `&mut self`) from coexisting.
        unsafe { host_bytes(self.target.data, self.target.len) }
    }

    /// The target value's position in pool memory.
    pub fn value_offset(&self) -> u64 {
        self.target.offset
    }

    /// The whole target value, writable. Declares it with the host first (once per call), so
    /// the host can undo every change if the call fails.
    pub fn value_mut(&mut self) -> Result<&mut [u8], PluginError> {
        let context = self.context;
        region_mut(&context, &mut self.target)
    }

    /// Part of the target value, writable; declares only that part, so the host copies aside
    /// no more than will change.
    pub fn value_range_mut(&mut self, range: Range<usize>) -> Result<&mut [u8], PluginError> {
        let context = self.context;
        region_range_mut(&context, &mut self.target, range)
    }

    /// The value an `invoke_put_ado` with a detached value put into unattached pool memory.
    #[allow(unsafe_code)]
    pub fn detached(&self) -> Option<&[u8]> {
        if !self.is_detached() {
            return None;
        }
        // SAFETY: with the detached flag, the detached bytes are valid for 'a.
        Some(unsafe { host_bytes(self.work.detached, self.work.detached_len) })
    }

    /// Where the detached value lies in pool memory.
    pub fn detached_offset(&self) -> Option<u64> {
        self.is_detached().then_some(self.work.detached_offset)
    }

    /// Appends one buffer to the call's response. Buffers reach the client whether the call
    /// succeeds or fails.
    #[allow(unsafe_code)]
    pub fn respond(&self, data: &[u8]) -> Result<(), PluginError> {
        // SAFETY: the host pointer is valid for the call; `data` is readable for its length.
        let status = unsafe { (self.context.callbacks().respond)(self.host(), data.as_ptr(), data.len()) };
        check("respond", status)
    }

    /// Writes a line to the server's log.
    pub fn log(&self, level: LogLevel, message: &str) {
        self.context.log(level, message);
    }

    /// The pool's figures.
    pub fn pool_info(&self) -> Result<PoolInfo, PluginError> {
        self.context.pool_info()
    }

    fn remember(&mut self, key: &[u8], pair: &Pair, writable: bool) -> KeyHandle {
        self.opened.push(Some(OpenedKey { key: key.to_vec(), region: Region::from_pair(pair), writable }));
        KeyHandle(self.opened.len() - 1)
    }

    fn opened(&self, handle: KeyHandle) -> Result<&OpenedKey, PluginError> {
        self.opened
            .get(handle.0)
            .and_then(Option::as_ref)
            .ok_or_else(|| PluginError::invalid("the key handle was unlocked, erased or belongs to another call"))
    }

    /// Creates `key` with a zeroed value of `value_len` bytes, write-locked for this call.
    #[allow(unsafe_code)]
    pub fn create_key(&mut self, key: &[u8], value_len: usize) -> Result<KeyHandle, PluginError> {
        let mut pair = empty_pair();
        // SAFETY: the host pointer is valid for the call; `key` is readable; `pair` is writable.
        let status = unsafe {
            (self.context.callbacks().create_key)(self.host(), key.as_ptr(), key.len(), value_len, &mut pair)
        };
        check("create_key", status)?;
        Ok(self.remember(key, &pair, true))
    }

    /// Opens an existing key, locked for this call (a write lock with [`Access::Write`]).
    #[allow(unsafe_code)]
    pub fn open_key(&mut self, key: &[u8], access: Access) -> Result<KeyHandle, PluginError> {
        let mut pair = empty_pair();
        let read_only = c_int::from(access == Access::Read);
        // SAFETY: the host pointer is valid for the call; `key` is readable; `pair` is writable.
        let status =
            unsafe { (self.context.callbacks().open_key)(self.host(), key.as_ptr(), key.len(), read_only, &mut pair) };
        check("open_key", status)?;
        Ok(self.remember(key, &pair, access == Access::Write))
    }

    /// The key a handle names.
    pub fn opened_key(&self, handle: KeyHandle) -> Result<&[u8], PluginError> {
        Ok(&self.opened(handle)?.key)
    }

    /// The value of a key this call created or opened.
    #[allow(unsafe_code)]
    pub fn opened_value(&self, handle: KeyHandle) -> Result<&[u8], PluginError> {
        let region = &self.opened(handle)?.region;
        // SAFETY: the key is locked for this call, so its value stays in place in pool memory
        // until the call returns or `&mut self` resizes, erases or unlocks it.
        Ok(unsafe { host_bytes(region.data, region.len) })
    }

    /// Where the value of a key this call created or opened lies in pool memory.
    pub fn opened_offset(&self, handle: KeyHandle) -> Result<u64, PluginError> {
        Ok(self.opened(handle)?.region.offset)
    }

    /// The value of a key this call created or opened for writing, writable; declared first.
    pub fn opened_value_mut(&mut self, handle: KeyHandle) -> Result<&mut [u8], PluginError> {
        let context = self.context;
        let opened =
            self.opened.get_mut(handle.0).and_then(Option::as_mut).ok_or_else(|| {
                PluginError::invalid("the key handle was unlocked, erased or belongs to another call")
            })?;
        if !opened.writable {
            return Err(PluginError::invalid("the key was opened read-only"));
        }
        region_mut(&context, &mut opened.region)
    }

    fn retire_key(&mut self, key: &[u8]) {
        for slot in &mut self.opened {
            if slot.as_ref().is_some_and(|opened| opened.key == key) {
                *slot = None;
            }
        }
    }

    /// Erases a key (not the call's target). Retires every handle to it.
    #[allow(unsafe_code)]
    pub fn erase_key(&mut self, key: &[u8]) -> Result<(), PluginError> {
        // SAFETY: the host pointer is valid for the call; `key` is readable.
        let status = unsafe { (self.context.callbacks().erase_key)(self.host(), key.as_ptr(), key.len()) };
        check("erase_key", status)?;
        self.retire_key(key);
        Ok(())
    }

    /// Resizes a locked key's value (the target, or a key this call created or opened) to
    /// `new_len` bytes, kept up to the shorter length and zeros after. The value may move, so
    /// this takes `&mut self`: no borrow of the old bytes survives it.
    #[allow(unsafe_code)]
    pub fn resize_value(&mut self, key: &[u8], new_len: usize) -> Result<(), PluginError> {
        let mut pair = empty_pair();
        // SAFETY: the host pointer is valid for the call; `key` is readable; `pair` is writable.
        let status = unsafe {
            (self.context.callbacks().resize_value)(self.host(), key.as_ptr(), key.len(), new_len, &mut pair)
        };
        check("resize_value", status)?;
        if !self.targets_pool() && key == self.key() {
            self.target = Region::from_pair(&pair);
        }
        for opened in self.opened.iter_mut().flatten() {
            if opened.key == key {
                opened.region = Region::from_pair(&pair);
            }
        }
        Ok(())
    }

    /// Releases the lock this call took on a created or opened key before the call returns.
    /// Retires the handle (and every other handle to the key).
    #[allow(unsafe_code)]
    pub fn unlock(&mut self, handle: KeyHandle) -> Result<(), PluginError> {
        let key = self.opened(handle)?.key.clone();
        // SAFETY: the host pointer is valid for the call; `key` is readable.
        let status = unsafe { (self.context.callbacks().unlock)(self.host(), key.as_ptr(), key.len()) };
        check("unlock", status)?;
        self.retire_key(&key);
        Ok(())
    }

    /// Allocates `len` bytes of pool memory aligned to `align` (a power of two up to 4096). The
    /// memory is freed again if the call fails; it is declared on the first mutable access.
    #[allow(unsafe_code)]
    pub fn allocate(&mut self, len: usize, align: usize) -> Result<MemoryHandle, PluginError> {
        let mut data = std::ptr::null_mut();
        let mut offset = 0;
        // SAFETY: the host pointer is valid for the call; both out-pointers are writable.
        let status =
            unsafe { (self.context.callbacks().allocate_memory)(self.host(), len, align, &mut data, &mut offset) };
        check("allocate_memory", status)?;
        self.allocated.push(Some(Region { data, len, offset, declared: false }));
        Ok(MemoryHandle(self.allocated.len() - 1))
    }

    fn allocation(&self, handle: MemoryHandle) -> Result<&Region, PluginError> {
        self.allocated
            .get(handle.0)
            .and_then(Option::as_ref)
            .ok_or_else(|| PluginError::invalid("the memory handle was freed or belongs to another call"))
    }

    /// Memory this call allocated.
    #[allow(unsafe_code)]
    pub fn memory(&self, handle: MemoryHandle) -> Result<&[u8], PluginError> {
        let region = self.allocation(handle)?;
        // SAFETY: allocated memory stays in place until `&mut self` frees it or the call ends.
        Ok(unsafe { host_bytes(region.data, region.len) })
    }

    /// Where memory this call allocated lies in pool memory (what a plugin stores to find it
    /// again in a later call).
    pub fn memory_offset(&self, handle: MemoryHandle) -> Result<u64, PluginError> {
        Ok(self.allocation(handle)?.offset)
    }

    /// Memory this call allocated, writable; declared with the host on first access.
    pub fn memory_mut(&mut self, handle: MemoryHandle) -> Result<&mut [u8], PluginError> {
        let context = self.context;
        let region = self
            .allocated
            .get_mut(handle.0)
            .and_then(Option::as_mut)
            .ok_or_else(|| PluginError::invalid("the memory handle was freed or belongs to another call"))?;
        region_mut(&context, region)
    }

    /// Frees memory this call allocated, retiring the handle.
    #[allow(unsafe_code)]
    pub fn free(&mut self, handle: MemoryHandle) -> Result<(), PluginError> {
        let region = self.allocation(handle)?;
        // SAFETY: the host pointer is valid for the call; the address and length are what
        // allocate_memory returned.
        let status = unsafe { (self.context.callbacks().free_memory)(self.host(), region.data, region.len) };
        check("free_memory", status)?;
        self.allocated[handle.0] = None;
        Ok(())
    }

    /// Frees memory an earlier call allocated, named by the place it was given (what
    /// [`memory_offset`](Self::memory_offset) answered then) and its length; the memory is
    /// freed when this call succeeds. Retires any handle of this call to it.
    #[allow(unsafe_code)]
    pub fn free_at(&mut self, offset: u64, len: usize) -> Result<(), PluginError> {
        let base = self.pool_base()?;
        let data = base.wrapping_add(usize::try_from(offset).map_err(|_| PluginError::invalid("offset too large"))?);
        // SAFETY: the host pointer is valid for the call; the host checks that the range lies
        // in pool memory and is an allocation before it frees anything.
        let status = unsafe { (self.context.callbacks().free_memory)(self.host(), data.cast_mut(), len) };
        check("free_memory", status)?;
        for slot in &mut self.allocated {
            if slot.as_ref().is_some_and(|region| region.offset == offset) {
                *slot = None;
            }
        }
        Ok(())
    }

    /// `len` bytes of pool memory at `offset`, for reading: memory an earlier call allocated
    /// (found again by the offset it recorded), or any other place in the pool. Not locked: the
    /// plugin's own keys are what keep other calls away from its structures.
    #[allow(unsafe_code)]
    pub fn pool_bytes(&self, offset: u64, len: usize) -> Result<&[u8], PluginError> {
        let base = self.pool_base()?;
        let region_bytes = self.pool_info()?.region_bytes;
        let inside = offset.checked_add(len as u64).is_some_and(|end| end <= region_bytes);
        if !inside {
            return Err(PluginError::invalid(format!("{len} bytes at {offset} lie outside the pool")));
        }
        // SAFETY: the range lies inside the pool's mapping, which outlives the call.
        Ok(unsafe { host_bytes(base.wrapping_add(offset as usize), len) })
    }

    /// Where the pool's memory starts in this process, from a value the call was given (its
    /// target or its detached value).
    fn pool_base(&self) -> Result<*const u8, PluginError> {
        let (value, offset) = if !self.work.value.is_null() {
            (self.work.value, self.work.value_offset)
        } else if !self.work.detached.is_null() {
            (self.work.detached, self.work.detached_offset)
        } else {
            return Err(PluginError::invalid("a call given no value cannot address pool memory by offset"));
        };
        Ok(value.cast_const().wrapping_sub(usize::try_from(offset).map_err(|_| PluginError::invalid("offset"))?))
    }

    /// Calls `visit` for each pair written between `since_ns` and `until_ns` (0 and `u64::MAX`
    /// for every pair) until it breaks. The pairs are not locked: their bytes are lent only for
    /// the visit.
    #[allow(unsafe_code)]
    pub fn iterate<F>(&self, since_ns: u64, until_ns: u64, mut visit: F) -> Result<(), PluginError>
    where
        F: FnMut(PairRef<'_>) -> ControlFlow<()>,
    {
        let mut visitor = Visitor { visit: &mut visit, panic: None };
        // SAFETY: the host pointer is valid for the call; `visitor` outlives the callback, which
        // hands it back to `visit_pair::<F>` only while it runs.
        let status = unsafe {
            (self.context.callbacks().iterate)(
                self.host(),
                since_ns,
                until_ns,
                visit_pair::<F>,
                (&mut visitor as *mut Visitor<'_, F>).cast::<c_void>(),
            )
        };
        if let Some(panic) = visitor.panic {
            // The panic was stopped at the C boundary; carry on unwinding to the export shim.
            resume_unwind(panic);
        }
        check("iterate", status)
    }

    /// Up to `max` pairs written between `since_ns` and `until_ns`, lent while `self` is
    /// borrowed.
    #[allow(unsafe_code)]
    pub fn reference_vector(&self, since_ns: u64, until_ns: u64, max: usize) -> Result<Vec<PairRef<'_>>, PluginError> {
        let mut pairs: *const Pair = std::ptr::null();
        let mut count = 0usize;
        // SAFETY: the host pointer is valid for the call; both out-pointers are writable.
        let status = unsafe {
            (self.context.callbacks().get_reference_vector)(
                self.host(),
                since_ns,
                until_ns,
                max,
                &mut pairs,
                &mut count,
            )
        };
        check("get_reference_vector", status)?;
        if pairs.is_null() || count == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the host's array holds `count` pairs and lives until do_work returns; the
        // pairs' bytes are borrowed only while `&self` is, so no resize or erase intervenes.
        let pairs = unsafe { std::slice::from_raw_parts(pairs, count.min(max)) };
        // SAFETY: as above, each pair's key and value are readable while `&self` is borrowed.
        Ok(pairs.iter().map(|pair| unsafe { PairRef::from_abi(pair) }).collect())
    }

    /// Finds the first key at or after `*position` that matches `expression` (the syntax of
    /// `ferrite find`: `prefix:`, `glob:`, `regex:`, `next:` or an exact key) and moves `*position` past
    /// it. `Ok(None)` at the end. Start with `*position` = 0.
    #[allow(unsafe_code)]
    pub fn find_key(&self, expression: &str, position: &mut u64) -> Result<Option<&'a [u8]>, PluginError> {
        let mut key = Bytes { data: std::ptr::null(), len: 0 };
        // SAFETY: the host pointer is valid for the call; the expression is readable for its
        // length; `position` and `key` are writable.
        let status = unsafe {
            (self.context.callbacks().find_key)(
                self.host(),
                expression.as_ptr().cast(),
                expression.len(),
                position,
                &mut key,
            )
        };
        if status == abi::ERR_NOT_FOUND {
            return Ok(None);
        }
        check("find_key", status)?;
        // SAFETY: the header keeps the found key valid until do_work returns.
        Ok(Some(unsafe { host_bytes(key.data, key.len) }))
    }
}

/// Declares a region whole (once) and lends it writable.
#[allow(unsafe_code)]
fn region_mut<'r>(context: &Context<'_>, region: &'r mut Region) -> Result<&'r mut [u8], PluginError> {
    if !region.declared {
        declare(context, region.data, region.len)?;
        region.declared = true;
    }
    // SAFETY: the region lies in pool memory valid for the call and is declared; the `&mut`
    // borrow of the region (and through it of the call) makes this the only access.
    Ok(unsafe { host_bytes_mut(region.data, region.len) })
}

/// Declares part of a region and lends that part writable.
#[allow(unsafe_code)]
fn region_range_mut<'r>(
    context: &Context<'_>,
    region: &'r mut Region,
    range: Range<usize>,
) -> Result<&'r mut [u8], PluginError> {
    if range.start > range.end || range.end > region.len {
        return Err(PluginError::new(
            ErrorCode::Invalid,
            format!("range {range:?} is outside the {}-byte value", region.len),
        ));
    }
    let len = range.end - range.start;
    if len == 0 {
        return Ok(&mut []);
    }
    // SAFETY: the range lies inside the region (checked above), so the offset pointer stays
    // inside the same pool mapping.
    let start = unsafe { region.data.add(range.start) };
    if !region.declared {
        declare(context, start, len)?;
    }
    // SAFETY: as in `region_mut`, for the declared sub-range.
    Ok(unsafe { host_bytes_mut(start, len) })
}

#[allow(unsafe_code)]
fn declare(context: &Context<'_>, data: *const u8, len: usize) -> Result<(), PluginError> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: the host pointer is valid for the call; the host only records the range.
    let status = unsafe { (context.callbacks().declare_write)(context.host(), data.cast(), len) };
    check("declare_write", status)
}

/// The closure `iterate` passes through the host as its context, and the panic it may raise.
struct Visitor<'f, F> {
    visit: &'f mut F,
    panic: Option<Box<dyn Any + Send>>,
}

/// The `ferrite_pair_fn` the host calls back: runs the closure and stops a panic at the C
/// boundary, handing it to `iterate` to resume.
#[allow(unsafe_code)]
unsafe extern "C" fn visit_pair<F>(context: *mut c_void, pair: *const Pair) -> c_int
where
    F: FnMut(PairRef<'_>) -> ControlFlow<()>,
{
    // SAFETY: `context` is the `Visitor<F>` `iterate` passed, alive and not otherwise borrowed
    // while the host runs the walk.
    let visitor = unsafe { &mut *context.cast::<Visitor<'_, F>>() };
    // SAFETY: the host passes a valid pair whose bytes are readable during the visit.
    let Some(pair) = (unsafe { pair.as_ref() }) else {
        return 0;
    };
    // SAFETY: as above.
    let pair = unsafe { PairRef::from_abi(pair) };
    match catch_unwind(AssertUnwindSafe(|| (visitor.visit)(pair))) {
        Ok(ControlFlow::Continue(())) => 0,
        Ok(ControlFlow::Break(())) => 1,
        Err(panic) => {
            visitor.panic = Some(panic);
            1
        }
    }
}
