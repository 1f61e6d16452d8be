//! `ferrite._ferrite`: the Python binding of the Ferrite Rust client.
//!
//! There is one protocol implementation, `ferrite-client`; this crate only adapts it to Python:
//!
//! - [`blocking`]: `ferrite.Session` and `ferrite.Pool` over `ferrite_client::blocking`, whose
//!   private current-thread runtime lets the calling thread drive the socket. Every network wait
//!   runs with the GIL released, so threads sharing a session overlap and their requests are
//!   pipelined on its connections.
//! - [`aio`]: `ferrite.aio`'s sessions and pools over the async client, running on a shared
//!   background Tokio runtime; [`bridge`] hands finished calls back to the asyncio event loop in
//!   batches.
//! - [`errors`]: the exception hierarchy, one class per wire error code, generated from
//!   `ErrorCode::ALL` so a new code gets its class without touching this crate.
//! - [`buffer`]: keys and values read from any buffer-protocol object, and `get_into`'s writes,
//!   without intermediate copies; [`fill`]: how `get_into` reads a value into its buffer (inline,
//!   or a direct read straight into it for values past the inline limit).
//! - [`vectors`]: the protocol test vectors' encoder and decoder, for the Python tests.

mod aio;
mod blocking;
mod bridge;
mod buffer;
mod errors;
mod fill;
mod types;
mod vectors;

use pyo3::prelude::*;

/// The compiled core of the `ferrite` package. Import `ferrite` (or `ferrite.aio`) instead.
#[pymodule]
fn _ferrite(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(module)?;
    types::register(module)?;
    blocking::register(module)?;
    aio::register(module)?;
    vectors::register(module)?;
    Ok(())
}
