//! `get_into`: reading a value into a caller's buffer by the cheapest way the buffer allows, in
//! a blocking form (over `ferrite_client::blocking`) and an async one (`ferrite.aio`).
//!
//! - An empty buffer only asks for the value's length (its attribute): the value never moves.
//! - A buffer no larger than the server's inline limit (`value_bytes_max`) takes an inline get,
//!   one round trip, copied once from the response frame; only a value that short can fit.
//! - A larger buffer is filled by a direct read, piece by piece straight into it, so a value past
//!   the inline limit is never held in a second buffer. That is one round trip more than an
//!   inline get for a short value, which is why the buffer's size decides. A value that does not
//!   fit is refused before any piece is read; its length is then asked for, to report it.

use ferrite_client::{blocking, Attribute, Error, Pool};
use pyo3::PyResult;

use crate::errors::buffer_too_small;

/// What became of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Filled {
    /// The value, this long, is at the start of the buffer; the rest is as it was.
    Value(usize),
    /// The value, this long, does not fit the buffer; nothing was written.
    TooSmall(u64),
}

impl Filled {
    /// `get_into`'s answer: the value's length, or `BufferTooSmall` for a buffer of `have` bytes.
    pub(crate) fn into_length(self, have: usize) -> PyResult<usize> {
        match self {
            Filled::Value(length) => Ok(length),
            Filled::TooSmall(needed) => Err(buffer_too_small(needed, have)),
        }
    }
}

/// Reads of a value whose length changes between a refusal and the look at its length.
const DIRECT_ATTEMPTS: usize = 3;

/// The length answer of an empty buffer.
fn length_only(length: u64) -> Filled {
    if length == 0 {
        Filled::Value(0)
    } else {
        Filled::TooSmall(length)
    }
}

/// Copies an inline value to the start of `buffer`, if it fits.
fn copy_inline(value: &[u8], buffer: &mut [u8]) -> Filled {
    if value.len() > buffer.len() {
        return Filled::TooSmall(value.len() as u64);
    }
    buffer[..value.len()].copy_from_slice(value);
    Filled::Value(value.len())
}

/// `get_direct_into` refuses a value longer than the buffer with the client's own
/// `InvalidArgument`, before reading any of it (the server's errors are `Error::Server`).
fn refused_as_too_long(error: &Error) -> bool {
    matches!(error, Error::InvalidArgument(_))
}

/// The blocking form, for `ferrite.Pool.get_into`.
pub(crate) fn fill_blocking(
    pool: &blocking::Pool,
    inline_max: usize,
    key: &[u8],
    buffer: &mut [u8],
) -> Result<Filled, Error> {
    if buffer.is_empty() {
        return Ok(length_only(pool.attribute(Attribute::ValueLength, key)?));
    }
    if buffer.len() <= inline_max {
        return Ok(copy_inline(&pool.get_bytes(key)?, buffer));
    }
    let mut length = 0;
    for _ in 0..DIRECT_ATTEMPTS {
        match pool.get_direct_into(key, buffer) {
            Ok(read) => return Ok(Filled::Value(read)),
            Err(error) if refused_as_too_long(&error) => {
                length = pool.attribute(Attribute::ValueLength, key)?;
                if length > buffer.len() as u64 {
                    return Ok(Filled::TooSmall(length));
                }
            }
            Err(error) => return Err(error),
        }
    }
    Ok(Filled::TooSmall(length.max(buffer.len() as u64 + 1)))
}

/// The async form, for `ferrite.aio.Pool.get_into`.
pub(crate) async fn fill_async(pool: &Pool, inline_max: usize, key: &[u8], buffer: &mut [u8]) -> Result<Filled, Error> {
    if buffer.is_empty() {
        return Ok(length_only(pool.attribute(Attribute::ValueLength, key).await?));
    }
    if buffer.len() <= inline_max {
        return Ok(copy_inline(&pool.get_bytes(key).await?, buffer));
    }
    let mut length = 0;
    for _ in 0..DIRECT_ATTEMPTS {
        match pool.get_direct_into(key, buffer).await {
            Ok(read) => return Ok(Filled::Value(read)),
            Err(error) if refused_as_too_long(&error) => {
                length = pool.attribute(Attribute::ValueLength, key).await?;
                if length > buffer.len() as u64 {
                    return Ok(Filled::TooSmall(length));
                }
            }
            Err(error) => return Err(error),
        }
    }
    Ok(Filled::TooSmall(length.max(buffer.len() as u64 + 1)))
}

/// Most bytes `get_offset` reserves before the first piece arrives: a slice asked for with a
/// huge length (to read "the rest") must not allocate that much up front.
const SLICE_RESERVE_MAX: u64 = 8 << 20;

/// A vector for a slice of up to `length` bytes (`None`: to the value's end) and the sink that
/// fills it, for `get_direct_to`.
pub(crate) fn slice_vec(length: Option<u64>) -> Vec<u8> {
    Vec::with_capacity(length.unwrap_or(SLICE_RESERVE_MAX).min(SLICE_RESERVE_MAX) as usize)
}
