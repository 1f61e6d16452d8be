//! For hosts: the `ferrite-ado` process and [`crate::testing::TestHost`].
//!
//! A host implements [`PluginHost`] in safe Rust and hands plugins the table [`callbacks`]
//! returns for it. Each entry of that table is written once, here: it checks the C arguments
//! (the host pointer, every input buffer, every out-pointer) before the host runs, calls the
//! matching method, and writes the results back. So every host answers a malformed call the
//! same way, and a null out-pointer fails the callback before it changes anything.
//!
//! The `ferrite_host` pointer a plugin passes back must be the host's `H`, lent for one entry
//! call (launch, do_work, pool_event) with no other reference to it live until that call
//! returns. A trampoline's `&mut H` lives only while it runs the method and never across a
//! call into plugin code: `iterate` collects its pairs first and lets the borrow end before
//! it calls `visit`, which may itself call back.

use std::ffi::{c_char, c_int, c_void};
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::abi::{self, Bytes, Callbacks, Host, Pair, PairFn, PoolInfo};

/// A host's side of every callback of `ferrite_callbacks`, over checked Rust values. A method
/// fails with one of the header's status codes (`abi::ERR_*`), which the plugin receives.
///
/// Pointers a method hands out (pair keys and values, allocated memory, the reference vector,
/// a found key) reach the plugin unchanged: the host keeps what they point to alive for as
/// long as the header promises (the call, for anything lent by a callback).
pub trait PluginHost {
    /// Keeps the old bytes of `len` bytes at `addr`, which the call is about to change;
    /// `ERR_INVALID` for a range the call may not write (or a read-only call).
    fn declare_write(&mut self, addr: *const u8, len: usize) -> Result<(), c_int>;
    /// Appends `data` to the call's response.
    fn respond(&mut self, data: &[u8]) -> Result<(), c_int>;
    /// Creates `key` with a zeroed value, locked and writable for the call.
    fn create_key(&mut self, key: &[u8], value_len: usize) -> Result<Pair, c_int>;
    /// Opens an existing key, locked for the call, writable unless `read_only`.
    fn open_key(&mut self, key: &[u8], read_only: bool) -> Result<Pair, c_int>;
    /// Erases a key other than the call's target.
    fn erase_key(&mut self, key: &[u8]) -> Result<(), c_int>;
    /// Resizes a locked, writable key's value; the pair says where it is now.
    fn resize_value(&mut self, key: &[u8], new_len: usize) -> Result<Pair, c_int>;
    /// Allocates zeroed pool memory: its address and pool offset.
    fn allocate_memory(&mut self, len: usize, align: usize) -> Result<(*mut u8, u64), c_int>;
    /// Frees memory an earlier `allocate_memory` returned.
    fn free_memory(&mut self, addr: *mut u8, len: usize) -> Result<(), c_int>;
    /// Every pair written between `since_ns` and `until_ns`, for `iterate` to visit. Returned
    /// whole rather than visited here so that no borrow of the host is live while plugin code
    /// runs.
    fn iterate(&mut self, since_ns: u64, until_ns: u64) -> Result<Vec<Pair>, c_int>;
    /// At most `max` pairs written between `since_ns` and `until_ns`, in an array the host
    /// keeps until `do_work` returns.
    fn reference_vector(&mut self, since_ns: u64, until_ns: u64, max: usize) -> Result<&[Pair], c_int>;
    /// The first key at or after `position` that matches `expression` (kept by the host until
    /// `do_work` returns) and the position to resume after it; `ERR_NOT_FOUND` at the end.
    fn find_key(&mut self, expression: &[u8], position: u64) -> Result<(&[u8], u64), c_int>;
    fn pool_info(&mut self) -> Result<PoolInfo, c_int>;
    /// Releases a lock the call took with `create_key` or `open_key`.
    fn unlock(&mut self, key: &[u8]) -> Result<(), c_int>;
    /// A line for the log; `level` is the plugin's `FERRITE_LOG_*`, unchecked.
    fn log(&mut self, level: c_int, message: String);
}

/// The callback table for hosts of type `H`, to pass to every plugin entry along with a
/// pointer to the `H` (see the module docs).
pub fn callbacks<H: PluginHost>() -> &'static Callbacks {
    &Table::<H>::CALLBACKS
}

/// Holds one table per host type: a constant of a generic type is promoted to a `'static`,
/// which a generic `static` cannot be.
struct Table<H>(PhantomData<H>);

impl<H: PluginHost> Table<H> {
    const CALLBACKS: Callbacks = Callbacks {
        struct_size: std::mem::size_of::<Callbacks>() as u32,
        reserved: 0,
        declare_write: declare_write::<H>,
        respond: respond::<H>,
        create_key: create_key::<H>,
        open_key: open_key::<H>,
        erase_key: erase_key::<H>,
        resize_value: resize_value::<H>,
        allocate_memory: allocate_memory::<H>,
        free_memory: free_memory::<H>,
        iterate: iterate::<H>,
        get_reference_vector: get_reference_vector::<H>,
        find_key: find_key::<H>,
        pool_info: pool_info::<H>,
        unlock: unlock::<H>,
        log: log::<H>,
    };
}

/// The host behind a plugin's `ferrite_host` pointer; `ERR_INVALID` for NULL.
///
/// # Safety
/// `host` must be null or the `H` lent to the entry call that is running, with no other
/// reference to it live (see the module docs).
#[allow(unsafe_code)]
unsafe fn host_mut<'h, H>(host: *mut Host) -> Result<&'h mut H, c_int> {
    // SAFETY: guaranteed by the caller.
    unsafe { host.cast::<H>().as_mut() }.ok_or(abi::ERR_INVALID)
}

/// Bytes a plugin passed in. Zero bytes are empty whatever the pointer (a slice may not be
/// built from NULL); NULL with a length is `ERR_INVALID`, an argument out of range, rather
/// than a silently empty key.
///
/// # Safety
/// A non-null `data` must be readable for `len` bytes while the callback runs, as the header
/// requires of the plugin.
#[allow(unsafe_code)]
unsafe fn input<'b>(data: *const u8, len: usize) -> Result<&'b [u8], c_int> {
    if len == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        return Err(abi::ERR_INVALID);
    }
    // SAFETY: non-null, and guaranteed by the caller.
    Ok(unsafe { std::slice::from_raw_parts(data, len) })
}

/// An out-pointer a plugin passed, checked before the host acts so that a null one fails the
/// callback without side effects. Kept raw: the plugin's memory may be uninitialized.
fn output<T>(out: *mut T) -> Result<NonNull<T>, c_int> {
    NonNull::new(out).ok_or(abi::ERR_INVALID)
}

/// The host and the bytes a plugin passed in, for the callbacks that take a buffer.
///
/// # Safety
/// As [`host_mut`] and [`input`].
#[allow(unsafe_code)]
unsafe fn with_bytes<'a, H>(host: *mut Host, data: *const u8, len: usize) -> Result<(&'a mut H, &'a [u8]), c_int> {
    // SAFETY: guaranteed by the caller.
    unsafe { Ok((host_mut::<H>(host)?, input(data, len)?)) }
}

/// The callbacks that take a key and fill a pair (create, open, resize): `method` runs only
/// once every argument passed its check.
///
/// # Safety
/// As [`host_mut`] and [`input`]; a non-null `out` must be writable.
#[allow(unsafe_code)]
unsafe fn key_to_pair<H>(
    host: *mut Host,
    key: *const u8,
    key_len: usize,
    out: *mut Pair,
    method: impl FnOnce(&mut H, &[u8]) -> Result<Pair, c_int>,
) -> c_int {
    checked(|| {
        let out = output(out)?;
        // SAFETY: guaranteed by the caller.
        let (host, key) = unsafe { with_bytes::<H>(host, key, key_len)? };
        let pair = method(host, key)?;
        // SAFETY: non-null, and the plugin's pair to fill.
        unsafe { out.write(pair) };
        Ok(())
    })
}

/// A callback's body as a `Result`, answered as the header's status code.
fn checked(body: impl FnOnce() -> Result<(), c_int>) -> c_int {
    match body() {
        Ok(()) => abi::OK,
        Err(status) => status,
    }
}

#[allow(unsafe_code)]
unsafe extern "C" fn declare_write<H: PluginHost>(host: *mut Host, addr: *const c_void, len: usize) -> c_int {
    checked(|| {
        // SAFETY: the plugin passes back the host pointer it was given.
        let host = unsafe { host_mut::<H>(host)? };
        host.declare_write(addr.cast(), len)
    })
}

#[allow(unsafe_code)]
unsafe extern "C" fn respond<H: PluginHost>(host: *mut Host, data: *const u8, len: usize) -> c_int {
    // SAFETY: the plugin passes back its host pointer and a readable buffer, as `with_bytes` needs.
    checked(|| unsafe { with_bytes::<H>(host, data, len) }.and_then(|(host, data)| host.respond(data)))
}

#[allow(unsafe_code)]
unsafe extern "C" fn create_key<H: PluginHost>(
    host: *mut Host,
    key: *const u8,
    key_len: usize,
    value_len: usize,
    out: *mut Pair,
) -> c_int {
    // SAFETY: the plugin passes back its host pointer, a readable key and a writable pair.
    unsafe { key_to_pair::<H>(host, key, key_len, out, |host, key| host.create_key(key, value_len)) }
}

#[allow(unsafe_code)]
unsafe extern "C" fn open_key<H: PluginHost>(
    host: *mut Host,
    key: *const u8,
    key_len: usize,
    read_only: c_int,
    out: *mut Pair,
) -> c_int {
    // SAFETY: the plugin passes back its host pointer, a readable key and a writable pair.
    unsafe { key_to_pair::<H>(host, key, key_len, out, |host, key| host.open_key(key, read_only != 0)) }
}

#[allow(unsafe_code)]
unsafe extern "C" fn erase_key<H: PluginHost>(host: *mut Host, key: *const u8, key_len: usize) -> c_int {
    // SAFETY: the plugin passes back its host pointer and a readable buffer, as `with_bytes` needs.
    checked(|| unsafe { with_bytes::<H>(host, key, key_len) }.and_then(|(host, key)| host.erase_key(key)))
}

#[allow(unsafe_code)]
unsafe extern "C" fn resize_value<H: PluginHost>(
    host: *mut Host,
    key: *const u8,
    key_len: usize,
    new_len: usize,
    out: *mut Pair,
) -> c_int {
    // SAFETY: the plugin passes back its host pointer, a readable key and a writable pair.
    unsafe { key_to_pair::<H>(host, key, key_len, out, |host, key| host.resize_value(key, new_len)) }
}

#[allow(unsafe_code)]
unsafe extern "C" fn allocate_memory<H: PluginHost>(
    host: *mut Host,
    len: usize,
    align: usize,
    out: *mut *mut u8,
    offset: *mut u64,
) -> c_int {
    checked(|| {
        let (out, offset) = (output(out)?, output(offset)?);
        // SAFETY: the plugin passes back its host pointer.
        let host = unsafe { host_mut::<H>(host)? };
        let (address, at) = host.allocate_memory(len, align)?;
        // SAFETY: both non-null, and the plugin's to fill.
        unsafe {
            out.write(address);
            offset.write(at);
        }
        Ok(())
    })
}

#[allow(unsafe_code)]
unsafe extern "C" fn free_memory<H: PluginHost>(host: *mut Host, addr: *mut u8, len: usize) -> c_int {
    checked(|| {
        // SAFETY: the plugin passes back its host pointer.
        let host = unsafe { host_mut::<H>(host)? };
        host.free_memory(addr, len)
    })
}

/// A visitor cannot unwind into this frame: a Rust visitor from this SDK stops its panic at
/// the boundary, returns non-zero and resumes unwinding after `iterate` returns.
#[allow(unsafe_code)]
unsafe extern "C" fn iterate<H: PluginHost>(
    host: *mut Host,
    since_ns: u64,
    until_ns: u64,
    visit: PairFn,
    context: *mut c_void,
) -> c_int {
    checked(|| {
        // SAFETY: the plugin passes back its host pointer. The borrow ends with this statement,
        // before `visit` runs, so the visitor may call back into the host.
        let pairs = unsafe { host_mut::<H>(host)? }.iterate(since_ns, until_ns)?;
        for pair in &pairs {
            // SAFETY: the plugin's own visitor and context, with a pair whose key and value the
            // host keeps alive; no borrow of the host is live.
            if unsafe { visit(context, pair) } != 0 {
                break;
            }
        }
        Ok(())
    })
}

#[allow(unsafe_code)]
unsafe extern "C" fn get_reference_vector<H: PluginHost>(
    host: *mut Host,
    since_ns: u64,
    until_ns: u64,
    max: usize,
    pairs: *mut *const Pair,
    count: *mut usize,
) -> c_int {
    checked(|| {
        let (pairs, count) = (output(pairs)?, output(count)?);
        // SAFETY: the plugin passes back its host pointer.
        let host = unsafe { host_mut::<H>(host)? };
        let array = host.reference_vector(since_ns, until_ns, max)?;
        // SAFETY: both non-null, and the plugin's to fill.
        unsafe {
            pairs.write(array.as_ptr());
            count.write(array.len());
        }
        Ok(())
    })
}

#[allow(unsafe_code)]
unsafe extern "C" fn find_key<H: PluginHost>(
    host: *mut Host,
    expression: *const c_char,
    expression_len: usize,
    position: *mut u64,
    key: *mut Bytes,
) -> c_int {
    checked(|| {
        let (position, key) = (output(position)?, output(key)?);
        // SAFETY: the plugin passes back its host pointer and a readable expression.
        let (host, expression) = unsafe { with_bytes::<H>(host, expression.cast(), expression_len)? };
        // SAFETY: non-null, and the plugin's cursor.
        let start = unsafe { position.read() };
        let (found, next) = host.find_key(expression, start)?;
        // SAFETY: both non-null, and the plugin's to fill.
        unsafe {
            key.write(Bytes { data: found.as_ptr(), len: found.len() });
            position.write(next);
        }
        Ok(())
    })
}

#[allow(unsafe_code)]
unsafe extern "C" fn pool_info<H: PluginHost>(host: *mut Host, info: *mut PoolInfo) -> c_int {
    checked(|| {
        let info = output(info)?;
        // SAFETY: the plugin passes back its host pointer.
        let figures = unsafe { host_mut::<H>(host)? }.pool_info()?;
        // SAFETY: non-null, and the plugin's struct to fill.
        unsafe { info.write(figures) };
        Ok(())
    })
}

#[allow(unsafe_code)]
unsafe extern "C" fn unlock<H: PluginHost>(host: *mut Host, key: *const u8, key_len: usize) -> c_int {
    // SAFETY: the plugin passes back its host pointer and a readable buffer, as `with_bytes` needs.
    checked(|| unsafe { with_bytes::<H>(host, key, key_len) }.and_then(|(host, key)| host.unlock(key)))
}

/// `log` has no status to answer with, so a line it cannot read is dropped.
#[allow(unsafe_code)]
unsafe extern "C" fn log<H: PluginHost>(host: *mut Host, level: c_int, message: *const c_char, len: usize) {
    // SAFETY: the plugin passes back its host pointer and `len` readable bytes.
    if let Ok((host, text)) = unsafe { with_bytes::<H>(host, message.cast(), len) } {
        host.log(level, String::from_utf8_lossy(text).into_owned());
    }
}

#[cfg(test)]
mod tests {
    //! The checks the trampolines make before a host runs, over a host that records what
    //! reached it.

    use super::*;
    use crate::call::empty_pair;

    #[derive(Debug, Default)]
    struct Recorder {
        responses: Vec<Vec<u8>>,
        created: Vec<Vec<u8>>,
    }

    impl PluginHost for Recorder {
        fn declare_write(&mut self, _: *const u8, _: usize) -> Result<(), c_int> {
            Err(abi::ERR_UNSUPPORTED)
        }
        fn respond(&mut self, data: &[u8]) -> Result<(), c_int> {
            self.responses.push(data.to_vec());
            Ok(())
        }
        fn create_key(&mut self, key: &[u8], _: usize) -> Result<Pair, c_int> {
            self.created.push(key.to_vec());
            Ok(empty_pair())
        }
        fn open_key(&mut self, _: &[u8], _: bool) -> Result<Pair, c_int> {
            Err(abi::ERR_UNSUPPORTED)
        }
        fn erase_key(&mut self, _: &[u8]) -> Result<(), c_int> {
            Err(abi::ERR_UNSUPPORTED)
        }
        fn resize_value(&mut self, _: &[u8], _: usize) -> Result<Pair, c_int> {
            Err(abi::ERR_UNSUPPORTED)
        }
        fn allocate_memory(&mut self, _: usize, _: usize) -> Result<(*mut u8, u64), c_int> {
            Err(abi::ERR_UNSUPPORTED)
        }
        fn free_memory(&mut self, _: *mut u8, _: usize) -> Result<(), c_int> {
            Err(abi::ERR_UNSUPPORTED)
        }
        fn iterate(&mut self, _: u64, _: u64) -> Result<Vec<Pair>, c_int> {
            Ok(vec![empty_pair(), empty_pair()])
        }
        fn reference_vector(&mut self, _: u64, _: u64, _: usize) -> Result<&[Pair], c_int> {
            Err(abi::ERR_UNSUPPORTED)
        }
        fn find_key(&mut self, _: &[u8], _: u64) -> Result<(&[u8], u64), c_int> {
            Err(abi::ERR_UNSUPPORTED)
        }
        fn pool_info(&mut self) -> Result<PoolInfo, c_int> {
            Err(abi::ERR_UNSUPPORTED)
        }
        fn unlock(&mut self, _: &[u8]) -> Result<(), c_int> {
            Err(abi::ERR_UNSUPPORTED)
        }
        fn log(&mut self, _: c_int, _: String) {}
    }

    fn host_pointer(recorder: &mut Recorder) -> *mut Host {
        (recorder as *mut Recorder).cast()
    }

    /// A null out-pointer fails the callback before the host acts, so no key is left behind.
    #[test]
    #[allow(unsafe_code)]
    fn null_out_pointer_fails_before_the_host_acts() {
        let mut recorder = Recorder::default();
        let host = host_pointer(&mut recorder);
        // SAFETY: the recorder is lent for the call and not otherwise touched meanwhile.
        let status = unsafe { (callbacks::<Recorder>().create_key)(host, b"k".as_ptr(), 1, 8, std::ptr::null_mut()) };
        assert_eq!(status, abi::ERR_INVALID);
        assert!(recorder.created.is_empty());
    }

    /// NULL with a length is out of range; zero bytes are empty whatever the pointer.
    #[test]
    #[allow(unsafe_code)]
    fn null_bytes_are_empty_only_without_a_length() {
        let mut recorder = Recorder::default();
        let host = host_pointer(&mut recorder);
        let respond = callbacks::<Recorder>().respond;
        // SAFETY: as above; NULL is never read.
        let (with_length, empty) = unsafe { (respond(host, std::ptr::null(), 3), respond(host, std::ptr::null(), 0)) };
        assert_eq!((with_length, empty), (abi::ERR_INVALID, abi::OK));
        assert_eq!(recorder.responses, vec![Vec::<u8>::new()]);
    }

    /// A visitor may call back into the host: `iterate` holds no borrow of it while visiting.
    #[test]
    #[allow(unsafe_code)]
    fn visitor_may_call_back_and_stop_the_walk() {
        #[allow(unsafe_code)]
        unsafe extern "C" fn visit(context: *mut c_void, _: *const Pair) -> c_int {
            // SAFETY: the test passes the recorder's host pointer as the context.
            unsafe { (callbacks::<Recorder>().respond)(context.cast(), b"seen".as_ptr(), 4) };
            1
        }
        let mut recorder = Recorder::default();
        let host = host_pointer(&mut recorder);
        // SAFETY: the recorder is lent for the call; the visitor reaches it only through `host`.
        let status = unsafe { (callbacks::<Recorder>().iterate)(host, 0, u64::MAX, visit, host.cast()) };
        assert_eq!(status, abi::OK);
        assert_eq!(recorder.responses, vec![b"seen".to_vec()]);
    }

    /// A NULL host is an invalid argument, not a crash.
    #[test]
    #[allow(unsafe_code)]
    fn null_host_is_invalid() {
        // SAFETY: NULL is checked before use.
        let status = unsafe { (callbacks::<Recorder>().erase_key)(std::ptr::null_mut(), b"k".as_ptr(), 1) };
        assert_eq!(status, abi::ERR_INVALID);
    }
}
