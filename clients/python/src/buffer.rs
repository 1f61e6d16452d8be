//! Keys and values taken from Python objects without copying them, and values written into
//! writable Python buffers (`get_into`).
//!
//! `bytes` and `str` are borrowed through their safe accessors. Any other object that exports the
//! buffer protocol (`bytearray`, `memoryview`, `array.array`, numpy arrays, `mmap`, ...) is held
//! as a `Py_buffer` export for as long as the call needs its memory, and read or written through
//! the export's pointer. That is the only unsafe code in the crate; it lives here, behind two
//! functions (`exported` to read, `Writable::as_mut_slice` to write), each with its argument for
//! soundness.
//!
//! The contract is the one `socket.send` and `readinto` have: the exporter keeps the memory
//! allocated and in place while the export is held (a `bytearray` cannot be resized, a numpy
//! array cannot be reallocated), but nothing stops another thread from writing to it. A program
//! that changes a buffer while a `put` from it is in flight, or reads one while `get_into` fills
//! it, races with itself, as it would with a socket.
#![allow(unsafe_code)]

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use crate::errors::invalid_argument;

/// The memory of a held export.
fn exported(buffer: &PyUntypedBuffer) -> &[u8] {
    let len = buffer.len_bytes();
    if len == 0 {
        // An empty export may carry a dangling or null pointer, which a slice may not.
        return &[];
    }
    // SAFETY: the export was checked C-contiguous when it was taken (`take_export`), so its
    // `len_bytes()` bytes lie in one block starting at `buf_ptr()`; the exporter keeps that block
    // allocated and unmoved until the export is released, which happens when `buffer` drops, and
    // the returned slice borrows `buffer`. Concurrent writes by other threads are the caller's
    // race, as documented on this module.
    unsafe { std::slice::from_raw_parts(buffer.buf_ptr().cast::<u8>(), len) }
}

/// Takes a C-contiguous export of `object`, or says why it cannot be used as `what`.
fn take_export(object: &Bound<'_, PyAny>, what: &str) -> PyResult<PyUntypedBuffer> {
    let buffer = PyUntypedBuffer::get(object).map_err(|_| {
        let type_name = object.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".to_owned());
        PyTypeError::new_err(format!(
            "{what} must be bytes, str or an object supporting the buffer protocol (bytearray, memoryview, \
             numpy array, ...), not {type_name}"
        ))
    })?;
    if !buffer.is_c_contiguous() {
        return Err(invalid_argument(format!(
            "{what} must be a C-contiguous buffer; copy it first (bytes(x), numpy.ascontiguousarray(x))"
        )));
    }
    Ok(buffer)
}

/// A key or value borrowed from a Python object for the length of a blocking call.
#[derive(Debug)]
pub(crate) enum Borrowed<'a> {
    /// The bytes of a `bytes`, or the UTF-8 of a `str`.
    Slice(&'a [u8]),
    /// Any other buffer-protocol object.
    Export(PyUntypedBuffer),
}

impl<'a> Borrowed<'a> {
    /// `object`'s bytes: a `bytes` as is, a `str` as UTF-8, anything else through the buffer
    /// protocol. `what` names the argument in errors.
    pub(crate) fn from_object(object: &'a Bound<'_, PyAny>, what: &str) -> PyResult<Borrowed<'a>> {
        if let Ok(bytes) = object.cast::<PyBytes>() {
            return Ok(Borrowed::Slice(bytes.as_bytes()));
        }
        if let Ok(text) = object.cast::<PyString>() {
            return Ok(Borrowed::Slice(text.to_str()?.as_bytes()));
        }
        take_export(object, what).map(Borrowed::Export)
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Borrowed::Slice(slice) => slice,
            Borrowed::Export(buffer) => exported(buffer),
        }
    }
}

/// A key or value owned by a call that outlives the Python frame that made it (`ferrite.aio`).
/// A buffer-protocol object is still not copied: the export travels with the call.
#[derive(Debug)]
pub(crate) enum Owned {
    Vec(Vec<u8>),
    Export(PyUntypedBuffer),
}

impl Owned {
    /// Like [`Borrowed::from_object`]; a `str` is encoded into a new vector, anything else is
    /// held through the buffer protocol (`bytes` included, so a large value is never copied).
    pub(crate) fn from_object(object: &Bound<'_, PyAny>, what: &str) -> PyResult<Owned> {
        if let Ok(text) = object.cast::<PyString>() {
            return Ok(Owned::Vec(text.to_str()?.as_bytes().to_vec()));
        }
        take_export(object, what).map(Owned::Export)
    }

    /// A copy, for keys: small, and cheaper to copy than to export and release.
    pub(crate) fn copied(object: &Bound<'_, PyAny>, what: &str) -> PyResult<Owned> {
        Ok(Owned::Vec(Borrowed::from_object(object, what)?.as_slice().to_vec()))
    }
}

impl AsRef<[u8]> for Owned {
    fn as_ref(&self) -> &[u8] {
        match self {
            Owned::Vec(vec) => vec,
            Owned::Export(buffer) => exported(buffer),
        }
    }
}

/// A writable, C-contiguous buffer that `get_into` fills.
#[derive(Debug)]
pub(crate) struct Writable(PyUntypedBuffer);

impl Writable {
    pub(crate) fn from_object(object: &Bound<'_, PyAny>) -> PyResult<Writable> {
        let buffer = take_export(object, "the buffer")?;
        if buffer.readonly() {
            return Err(invalid_argument(
                "the buffer is read-only; pass a writable one (bytearray, numpy array, memoryview of either)",
            ));
        }
        Ok(Writable(buffer))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len_bytes()
    }

    /// The buffer's memory, for a call to fill while the GIL is released (`py.detach`) or on a
    /// Tokio thread (`ferrite.aio`), as `socket.recv_into` fills its buffer.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        let len = self.len();
        if len == 0 {
            // An empty export may carry a dangling or null pointer, which a slice may not.
            return &mut [];
        }
        // SAFETY: the export is C-contiguous (`take_export`) and writable (`from_object`), so
        // `len` bytes from `buf_ptr()` are one writable block, kept allocated and unmoved until
        // the export is released, which happens when `self` drops; the slice borrows `self`
        // mutably, so this binding hands out one at a time. Python code touching the same memory
        // meanwhile (another thread, or a key taken from the same object, which the callers copy
        // first for that reason) is the caller's race, as documented on this module.
        unsafe { std::slice::from_raw_parts_mut(self.0.buf_ptr().cast::<u8>(), len) }
    }
}
