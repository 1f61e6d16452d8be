//! Running the async client's calls on a background Tokio runtime and handing their results to
//! an asyncio event loop.
//!
//! A call becomes an asyncio future, made by the loop (`loop.create_future()`), and a Tokio task
//! that runs the client's future. When the task finishes it does not touch Python: it queues the
//! result with a closure that turns it into a Python object, and wakes the loop by writing one
//! byte to a socket the loop watches (`loop.add_reader`) if the queue was empty. The loop's
//! reader callback ([`Drainer`]) then resolves every queued future at once, under the GIL it
//! already holds. So a Tokio worker never waits for the GIL, and a burst of a thousand replies
//! costs the loop one wake-up, not a thousand `call_soon_threadsafe`.
//!
//! Cancelling the asyncio future does not recall the request: it may already be on the wire, and
//! the server applies it or not; its result is dropped.

use std::future::Future;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use tokio::runtime::Runtime;

/// Worker threads of the shared runtime: they only move bytes between sockets and queues, so a
/// few serve any number of sessions.
const WORKER_THREADS_MAX: usize = 4;

static RUNTIME: PyOnceLock<Runtime> = PyOnceLock::new();

/// The runtime every `ferrite.aio` session's connections run on, started on first use.
fn runtime(py: Python<'_>) -> PyResult<&'static Runtime> {
    RUNTIME.get_or_try_init(py, || {
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(WORKER_THREADS_MAX);
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name("ferrite-aio")
            .enable_all()
            .build()
            .map_err(|error| {
                pyo3::exceptions::PyRuntimeError::new_err(format!("cannot start ferrite's runtime: {error}"))
            })
    })
}

/// Turns a finished call's output into the future's result, under the GIL.
type Deliver = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

struct Completion {
    future: Py<PyAny>,
    deliver: Deliver,
}

#[derive(Default)]
struct Queue {
    done: Vec<Completion>,
    /// A wake-up byte is on its way and the loop has not yet taken the queue.
    wake_pending: bool,
}

/// The queue of finished calls and the socket pair that wakes the loop for them.
struct Completions {
    queue: Mutex<Queue>,
    /// Written by Tokio workers (one byte per wake-up), read by the loop.
    wake_writer: UnixStream,
    wake_reader: UnixStream,
}

impl std::fmt::Debug for Completions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completions").field("fd", &self.wake_reader.as_raw_fd()).finish_non_exhaustive()
    }
}

impl Completions {
    fn lock(&self) -> MutexGuard<'_, Queue> {
        // Holders only push, or swap the vector out: a panic cannot leave the queue inconsistent.
        self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Called by a Tokio worker when a call finishes.
    fn complete(&self, completion: Completion) {
        let wake = {
            let mut queue = self.lock();
            queue.done.push(completion);
            !std::mem::replace(&mut queue.wake_pending, true)
        };
        if wake {
            // A full socket buffer (WouldBlock) means wake-ups are already waiting to be read; any
            // other failure means the loop's end is gone, and nobody is left to wake.
            let _ = (&self.wake_writer).write(&[1]);
        }
    }

    /// Called by the loop: empties the socket, then takes the queue. In that order, a call that
    /// finishes after the queue is taken finds `wake_pending` clear and writes a fresh byte.
    fn take(&self) -> Vec<Completion> {
        let mut sink = [0u8; 256];
        loop {
            match (&self.wake_reader).read(&mut sink) {
                Ok(n) if n == sink.len() => continue,
                Err(error) if error.kind() == ErrorKind::Interrupted => continue,
                _ => break,
            }
        }
        let mut queue = self.lock();
        queue.wake_pending = false;
        std::mem::take(&mut queue.done)
    }
}

/// The loop's reader callback: resolves every finished call's future.
#[pyclass(module = "ferrite.aio", frozen)]
#[derive(Debug)]
pub(crate) struct Drainer {
    completions: Arc<Completions>,
}

#[pymethods]
impl Drainer {
    fn __call__(&self, py: Python<'_>) {
        for Completion { future, deliver } in self.completions.take() {
            let future = future.bind(py);
            // A cancelled future is done already; its result has nobody to go to.
            if future.call_method0(intern!(py, "done")).and_then(|done| done.is_truthy()).unwrap_or(true) {
                continue;
            }
            let outcome = match deliver(py) {
                Ok(value) => future.call_method1(intern!(py, "set_result"), (value,)),
                Err(error) => future.call_method1(intern!(py, "set_exception"), (error.into_value(py),)),
            };
            // Only an InvalidStateError (the future finished meanwhile) can come back here; one
            // future's trouble must not strand the rest of the batch.
            drop(outcome);
        }
    }
}

/// One event loop's side of the bridge: makes its futures and watches the wake-up socket.
/// Shared by a `ferrite.aio` session and its pools; the socket is unwatched when the last goes.
#[derive(Debug)]
pub(crate) struct Bridge {
    event_loop: Py<PyAny>,
    completions: Arc<Completions>,
}

impl Bridge {
    /// A bridge to the running event loop (raises RuntimeError outside one).
    pub(crate) fn for_running_loop(py: Python<'_>) -> PyResult<Arc<Bridge>> {
        runtime(py)?;
        let event_loop = py.import(intern!(py, "asyncio"))?.call_method0(intern!(py, "get_running_loop"))?;
        let (wake_writer, wake_reader) = UnixStream::pair()?;
        wake_writer.set_nonblocking(true)?;
        wake_reader.set_nonblocking(true)?;
        let completions = Arc::new(Completions { queue: Mutex::new(Queue::default()), wake_writer, wake_reader });
        let drainer = Drainer { completions: Arc::clone(&completions) };
        event_loop.call_method1(intern!(py, "add_reader"), (completions.wake_reader.as_raw_fd(), drainer))?;
        Ok(Arc::new(Bridge { event_loop: event_loop.unbind(), completions }))
    }

    /// Runs `call` on the runtime and returns an asyncio future of its result, which `deliver`
    /// makes under the GIL on the loop's thread (so it may also drop Python-bound state, such as a
    /// buffer export, without waiting for the GIL on a Tokio thread).
    pub(crate) fn spawn<'py, F, T>(
        &self,
        py: Python<'py>,
        call: F,
        deliver: impl FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let future = self.event_loop.bind(py).call_method0(intern!(py, "create_future"))?;
        let handle = future.clone().unbind();
        let completions = Arc::clone(&self.completions);
        runtime(py)?.spawn(async move {
            let output = call.await;
            completions.complete(Completion { future: handle, deliver: Box::new(move |py| deliver(py, output)) });
        });
        Ok(future)
    }

    /// An asyncio future already resolved with `value` (for `__aenter__`).
    pub(crate) fn ready<'py>(&self, py: Python<'py>, value: Py<PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let future = self.event_loop.bind(py).call_method0(intern!(py, "create_future"))?;
        future.call_method1(intern!(py, "set_result"), (value,))?;
        Ok(future)
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let fd = self.completions.wake_reader.as_raw_fd();
        Python::attach(|py| {
            // A closed loop has forgotten its readers already and answers False.
            let _ = self.event_loop.bind(py).call_method1(intern!(py, "remove_reader"), (fd,));
        });
    }
}
