//! Turning the raw pointers C passes in into Rust values, refusing NULLs and bad text with
//! `FERRITE_ERR_INVALID_ARGUMENT` instead of crashing. Each helper's `# Safety` is the contract
//! the public functions pass on to their C callers.

use std::ffi::{c_char, CStr};
use std::path::PathBuf;

use crate::status::Failure;

/// A required NUL-terminated UTF-8 string. `what` names the argument in the error message.
///
/// # Safety
/// `ptr` is NULL or points to a NUL-terminated string that stays valid and unchanged for `'a`.
pub(crate) unsafe fn text<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if ptr.is_null() {
        return Err(Failure::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string living for 'a.
    let text = unsafe { CStr::from_ptr(ptr) };
    text.to_str().map_err(|_| Failure::invalid(format!("{what} is not valid UTF-8")))
}

/// An optional string: NULL means absent.
///
/// # Safety
/// As for [`text`].
pub(crate) unsafe fn optional_text<'a>(ptr: *const c_char, what: &str) -> Result<Option<&'a str>, Failure> {
    if ptr.is_null() {
        Ok(None)
    } else {
        // SAFETY: passed on to our caller.
        unsafe { text(ptr, what) }.map(Some)
    }
}

/// An optional file path: NULL means absent. Paths are bytes on Unix, so any bytes will do there.
///
/// # Safety
/// As for [`text`].
pub(crate) unsafe fn optional_path(ptr: *const c_char, what: &str) -> Result<Option<PathBuf>, Failure> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null, and the caller promises a NUL-terminated string.
    let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let _ = what; // Any bytes are a path here, so nothing to complain about.
        Ok(Some(PathBuf::from(std::ffi::OsStr::from_bytes(bytes))))
    }
    #[cfg(not(unix))]
    {
        let text = std::str::from_utf8(bytes).map_err(|_| Failure::invalid(format!("{what} is not valid UTF-8")))?;
        Ok(Some(PathBuf::from(text)))
    }
}

/// A byte string given as pointer and length. A NULL pointer is allowed with length 0 (an empty
/// key or payload), since C programs often pass `NULL, 0` for "nothing".
///
/// # Safety
/// `ptr` is NULL or points to `len` readable bytes that stay valid and unchanged for `'a`.
pub(crate) unsafe fn bytes<'a>(ptr: *const u8, len: usize, what: &str) -> Result<&'a [u8], Failure> {
    if len == 0 {
        Ok(&[])
    } else if ptr.is_null() {
        Err(Failure::invalid(format!("{what} is NULL but its length is {len}")))
    } else {
        // SAFETY: non-null, and the caller promises `len` readable bytes living for 'a.
        Ok(unsafe { std::slice::from_raw_parts(ptr, len) })
    }
}

/// A caller's buffer to fill, given as pointer and capacity. NULL is allowed with capacity 0.
///
/// # Safety
/// `ptr` is NULL or points to `len` writable bytes that stay valid for `'a` and that nothing else
/// reads or writes meanwhile.
pub(crate) unsafe fn bytes_mut<'a>(ptr: *mut u8, len: usize, what: &str) -> Result<&'a mut [u8], Failure> {
    if len == 0 {
        Ok(&mut [])
    } else if ptr.is_null() {
        Err(Failure::invalid(format!("{what} is NULL but its capacity is {len}")))
    } else {
        // SAFETY: non-null, and the caller promises `len` writable bytes living for 'a, used by
        // nothing else while the slice lives.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
    }
}

/// A required pointer to a library object (a session, a pool, an operation).
///
/// # Safety
/// `ptr` is NULL or points to a live object of type `T` that this library allocated and that is
/// not freed while the reference is used.
pub(crate) unsafe fn object<'a, T>(ptr: *const T, what: &str) -> Result<&'a T, Failure> {
    // SAFETY: the caller promises a live `T` when non-null.
    unsafe { ptr.as_ref() }.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

/// Checks a required out-pointer. Out-pointers are written with `ptr::write` rather than through
/// a reference, because the memory they point to may still be uninitialised.
pub(crate) fn out<T>(ptr: *mut T, what: &str) -> Result<*mut T, Failure> {
    if ptr.is_null() {
        Err(Failure::invalid(format!("{what} is NULL")))
    } else {
        Ok(ptr)
    }
}

/// Writes `value` to an out-pointer if it is not NULL. Entry points call this first with the
/// "nothing" value (NULL, an empty buffer) so that after any failure the caller's variable holds
/// something it can safely pass to the matching free function.
///
/// # Safety
/// `ptr` is NULL or valid for writing a `T` (it may be uninitialised).
pub(crate) unsafe fn clear<T>(ptr: *mut T, value: T) {
    if !ptr.is_null() {
        // SAFETY: the caller promises `ptr` is writable.
        unsafe { ptr.write(value) };
    }
}

/// Flag bits from C, refusing bits outside `known`.
pub(crate) fn flags(bits: u32, known: u32, what: &str) -> Result<u32, Failure> {
    if bits & !known != 0 {
        return Err(Failure::invalid(format!("{what}: unknown flag bits {:#x}", bits & !known)));
    }
    Ok(bits)
}
