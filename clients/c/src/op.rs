//! Asynchronous operations: submit now, check for completion later.
//!
//! Each operation is the async client's future, spawned as a task on the session's runtime; its
//! outcome lands in a mutex-guarded slot with a condition variable for `ferrite_op_wait`. Many
//! operations may be in flight on one pool at once: the client pipelines them on the shard's
//! connection and matches replies by request id.

use std::future::Future;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use ferrite_client::Error;

use crate::args;
use crate::memory::ferrite_buffer;
use crate::pool::{self, ferrite_put_flags, put_flags};
use crate::runtime::Runtime;
use crate::status::{ferrite_status, guard, guard_status, guard_void, set_last_error, Failure};

/// `ferrite_op_wait` without a time limit.
pub const FERRITE_WAIT_FOREVER: u64 = u64::MAX;

/// An asynchronous operation (`ferrite_put_async`, `ferrite_get_async`, `ferrite_erase_async`).
/// Check it with `ferrite_op_poll` or `ferrite_op_wait`, take a get's value with
/// `ferrite_op_result_buffer`, and free it with `ferrite_op_free`. Polling and waiting may happen
/// from several threads at once; freeing may not overlap any other use.
#[derive(Debug)]
pub struct ferrite_op {
    shared: Arc<Shared>,
    kind: Kind,
    /// Keeps the runtime running while the C program holds the operation, even after it closed
    /// the pool and the session: a stopped runtime would never finish the task.
    _runtime: Arc<Runtime>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Put,
    Get,
    Erase,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Put => "put",
            Kind::Get => "get",
            Kind::Erase => "erase",
        }
    }
}

#[derive(Debug, Default)]
struct Shared {
    outcome: Mutex<Option<Outcome>>,
    finished: Condvar,
}

#[derive(Debug)]
struct Outcome {
    status: ferrite_status,
    message: String,
    /// A get's value until `ferrite_op_result_buffer` takes it.
    value: Option<Vec<u8>>,
}

impl Shared {
    /// The slot, even if a thread panicked while holding it: the slot is written in one
    /// assignment, so it is never half-updated.
    fn lock(&self) -> MutexGuard<'_, Option<Outcome>> {
        self.outcome.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Delivers an operation's outcome exactly once. If the task is dropped unfinished (its runtime
/// stopped) or panics, `Drop` delivers a failure instead, so no waiter waits forever.
struct Completion {
    shared: Arc<Shared>,
    delivered: bool,
}

impl Completion {
    fn deliver(mut self, result: Result<Option<Vec<u8>>, Error>) {
        let outcome = match result {
            Ok(value) => Outcome { status: ferrite_status::FERRITE_OK, message: String::new(), value },
            Err(error) => {
                let failure = Failure::from(error);
                Outcome { status: failure.status, message: failure.message, value: None }
            }
        };
        self.publish(outcome);
        self.delivered = true;
    }

    fn publish(&self, outcome: Outcome) {
        *self.shared.lock() = Some(outcome);
        self.shared.finished.notify_all();
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if !self.delivered {
            let (status, message) = if std::thread::panicking() {
                (ferrite_status::FERRITE_ERR_INTERNAL, "libferrite bug: the operation panicked")
            } else {
                (ferrite_status::FERRITE_ERR_CLOSED, "the session's runtime stopped before the operation finished")
            };
            self.publish(Outcome { status, message: message.to_owned(), value: None });
        }
    }
}

/// Starts `future` and returns its operation.
///
/// The future is polled once here, on the caller's thread, before it is spawned: the client
/// encodes the request into the connection's outgoing buffer on that first poll, so requests
/// reach the wire in the order the C program submitted them rather than in the order the
/// runtime happens to run tasks, and a request refused locally (a key over the server's limit)
/// is finished at once without a task.
fn submit<F>(runtime: &Arc<Runtime>, kind: Kind, future: F) -> Box<ferrite_op>
where
    F: Future<Output = Result<Option<Vec<u8>>, Error>> + Send + 'static,
{
    let shared = Arc::new(Shared::default());
    let completion = Completion { shared: Arc::clone(&shared), delivered: false };
    let mut future = Box::pin(future);
    let _entered = runtime.handle().enter();
    // A no-op waker is enough: if the future is pending, the task polls it again with its own.
    match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(result) => completion.deliver(result),
        Poll::Pending => {
            // Detached: the outcome travels through `shared`, not the join handle.
            drop(runtime.handle().spawn(async move { completion.deliver(future.await) }));
        }
    }
    Box::new(ferrite_op { shared, kind, _runtime: Arc::clone(runtime) })
}

/// Writes a new operation to `out`.
///
/// # Safety
/// `out` was checked non-null and is writable.
unsafe fn hand_out(out: *mut *mut ferrite_op, op: Box<ferrite_op>) {
    // SAFETY: passed on from our caller.
    unsafe { out.write(Box::into_raw(op)) };
}

/// Submits `ferrite_put(pool, key, value, flags)` without waiting for it. On success `*out` is
/// the operation, to be freed with `ferrite_op_free`; its final status comes from
/// `ferrite_op_poll` or `ferrite_op_wait`. The submission itself fails only for invalid
/// arguments (then `*out` is NULL); every other failure is the operation's status. Key and value
/// are copied before the call returns; a value longer than 2 MiB then travels as a direct
/// transfer, as `ferrite_put`'s does.
///
/// Operations submitted from one thread leave on the pool's connection in submission order.
/// Today's server also applies them in that order, but the protocol does not promise it: to
/// order two writes to one key, wait for the first before submitting the second.
///
/// # Safety
/// As for `ferrite_put`; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_put_async(
    pool: *const pool::ferrite_pool,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    flags: ferrite_put_flags,
    out: *mut *mut ferrite_op,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, std::ptr::null_mut()) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live pool and readable bytes.
        let (pool, key, value) =
            unsafe { (pool::pool(pool)?, args::bytes(key, key_len, "key")?, args::bytes(value, value_len, "value")?) };
        let flags = put_flags(flags)?;
        let (client, key, value) = (pool.pool.clone(), key.to_vec(), value.to_vec());
        let op =
            submit(&pool.runtime, Kind::Put, async move { client.put_with(key, value, flags).await.map(|()| None) });
        // SAFETY: checked non-null above.
        unsafe { hand_out(out, op) };
        Ok(())
    })
}

/// Submits `ferrite_get(pool, key)` without waiting for it; once it finished with `FERRITE_OK`,
/// `ferrite_op_result_buffer` hands over the value (a large one read with a direct read, as
/// `ferrite_get` does). Otherwise as `ferrite_put_async`.
///
/// # Safety
/// As for `ferrite_get`; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_get_async(
    pool: *const pool::ferrite_pool,
    key: *const u8,
    key_len: usize,
    out: *mut *mut ferrite_op,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, std::ptr::null_mut()) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live pool and readable bytes.
        let (pool, key) = unsafe { (pool::pool(pool)?, args::bytes(key, key_len, "key")?) };
        let (client, key) = (pool.pool.clone(), key.to_vec());
        // `Vec::from` takes a directly read value's own vector; an inline one is copied out of its frame.
        let op =
            submit(&pool.runtime, Kind::Get, async move { client.get_bytes(key).await.map(|v| Some(Vec::from(v))) });
        // SAFETY: checked non-null above.
        unsafe { hand_out(out, op) };
        Ok(())
    })
}

/// Submits `ferrite_erase(pool, key)` without waiting for it. Otherwise as `ferrite_put_async`.
///
/// # Safety
/// As for `ferrite_erase`; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_erase_async(
    pool: *const pool::ferrite_pool,
    key: *const u8,
    key_len: usize,
    out: *mut *mut ferrite_op,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, std::ptr::null_mut()) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live pool and readable bytes.
        let (pool, key) = unsafe { (pool::pool(pool)?, args::bytes(key, key_len, "key")?) };
        let (client, key) = (pool.pool.clone(), key.to_vec());
        let op = submit(&pool.runtime, Kind::Erase, async move { client.erase(key).await.map(|()| None) });
        // SAFETY: checked non-null above.
        unsafe { hand_out(out, op) };
        Ok(())
    })
}

/// The status of a finished outcome, recording its message as this thread's last error.
fn finished(outcome: &Outcome) -> ferrite_status {
    if outcome.status != ferrite_status::FERRITE_OK {
        set_last_error(outcome.status, &outcome.message);
    }
    outcome.status
}

/// Whether the operation finished, without blocking: `FERRITE_PENDING` if not yet, else its final
/// status (the same on every later call; `ferrite_last_error()` describes a failure).
///
/// # Safety
/// `op` is NULL or a live operation.
#[no_mangle]
pub unsafe extern "C" fn ferrite_op_poll(op: *const ferrite_op) -> ferrite_status {
    guard_status(|| {
        // SAFETY: the caller promises a live operation.
        let op = unsafe { args::object(op, "op")? };
        Ok(op.shared.lock().as_ref().map_or(ferrite_status::FERRITE_PENDING, finished))
    })
}

/// Waits until the operation finished or `timeout_ms` milliseconds passed, whichever comes
/// first: its final status, or `FERRITE_PENDING` if the time ran out. 0 polls;
/// `FERRITE_WAIT_FOREVER` waits without limit.
///
/// # Safety
/// `op` is NULL or a live operation.
#[no_mangle]
pub unsafe extern "C" fn ferrite_op_wait(op: *const ferrite_op, timeout_ms: u64) -> ferrite_status {
    guard_status(|| {
        // SAFETY: the caller promises a live operation.
        let op = unsafe { args::object(op, "op")? };
        let outcome = op.shared.lock();
        let outcome = if timeout_ms == FERRITE_WAIT_FOREVER {
            op.shared.finished.wait_while(outcome, |outcome| outcome.is_none()).unwrap_or_else(PoisonError::into_inner)
        } else {
            let timeout = Duration::from_millis(timeout_ms);
            let waited = op.shared.finished.wait_timeout_while(outcome, timeout, |outcome| outcome.is_none());
            waited.unwrap_or_else(PoisonError::into_inner).0
        };
        Ok(outcome.as_ref().map_or(ferrite_status::FERRITE_PENDING, finished))
    })
}

/// Hands over the value of a finished get into `*out`, to be freed with `ferrite_buffer_free`.
/// Returns `FERRITE_PENDING` while the get runs, its failure status if it failed (e.g.
/// `FERRITE_KEY_NOT_FOUND`), and `FERRITE_ERR_INVALID_ARGUMENT` for an operation that is not a get
/// or whose value was already taken. `*out` is empty unless the status is `FERRITE_OK`.
///
/// # Safety
/// `op` is NULL or a live operation; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_op_result_buffer(op: *mut ferrite_op, out: *mut ferrite_buffer) -> ferrite_status {
    guard_status(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, ferrite_buffer::EMPTY) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live operation.
        let op = unsafe { args::object(op.cast_const(), "op")? };
        if op.kind != Kind::Get {
            return Err(Failure::invalid(format!("the operation is a {}, which has no value", op.kind.name())));
        }
        let mut outcome = op.shared.lock();
        let Some(outcome) = outcome.as_mut() else {
            return Ok(ferrite_status::FERRITE_PENDING);
        };
        if outcome.status != ferrite_status::FERRITE_OK {
            return Ok(finished(outcome));
        }
        let value = outcome.value.take().ok_or_else(|| Failure::invalid("the get's value was already taken"))?;
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { out.write(ferrite_buffer::from_vec(value)) };
        Ok(ferrite_status::FERRITE_OK)
    })
}

/// Frees an operation. One still pending is not cancelled: its request completes on the server
/// and the outcome is discarded. NULL is a no-op.
///
/// # Safety
/// `op` is NULL or an operation not freed before; no other thread may use it during or after
/// this call.
#[no_mangle]
pub unsafe extern "C" fn ferrite_op_free(op: *mut ferrite_op) {
    guard_void(|| {
        if !op.is_null() {
            // SAFETY: the caller hands back an operation we allocated, once.
            drop(unsafe { Box::from_raw(op) });
        }
        Ok(())
    });
}
