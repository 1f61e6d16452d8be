//! libferrite: the C client for Ferrite.
//!
//! A thin FFI layer over [`ferrite_client`], the one implementation of the native protocol: every
//! call here converts its C arguments, runs the Rust client on the session's runtime and converts
//! the result back. Nothing in this crate encodes or decodes a frame.
//!
//! The C API is described in `include/ferrite.h`, generated from the doc comments of this crate by
//! cbindgen (`tests/header.rs` fails when the checked-in header drifts from the code). Its rules:
//!
//! - Every operation returns a [`status::ferrite_status`] (only the free functions and the three
//!   that return strings do not); the wire error codes keep their numbers, client-side failures
//!   have their own, and `ferrite_last_error()` gives the calling thread's message.
//! - Everything the library allocates has a free or close function; the header says which.
//! - A NULL pointer or a name that is not UTF-8 is `FERRITE_ERR_INVALID_ARGUMENT`, never a crash.
//! - No panic crosses the boundary: each entry point catches it and answers
//!   `FERRITE_ERR_INTERNAL`.
//!
//! # Unsafe code
//!
//! The workspace denies `unsafe_code`; this crate alone allows it, because a C library cannot be
//! written without it: every C entry point is `#[no_mangle] extern "C"` and reads the raw pointers
//! C hands it. The unsafety is confined to turning those pointers into references and slices
//! (`args.rs`) and to handing allocations to C and taking them back (`memory.rs`, the
//! `Box::into_raw`/`Box::from_raw` pairs). Each `unsafe extern "C"` function states in its
//! `# Safety` section what the C caller must guarantee.

#![allow(unsafe_code)]
// The exported types carry their C names (`ferrite_session`), which cbindgen copies to the header.
#![allow(non_camel_case_types)]

// In the order cbindgen writes them to the header: statuses, sessions, pools, asynchronous
// operations, what the library allocates, then the cluster map.
pub mod status;

pub mod session;

pub mod pool;

pub mod op;

pub mod memory;

pub mod cluster;

mod args;
mod runtime;

pub use cluster::*;
pub use memory::*;
pub use op::*;
pub use pool::*;
pub use session::*;
pub use status::*;
