//! The Tokio runtime each session owns, shared with every pool and operation made through it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ferrite_client::Error;

use crate::status::Failure;

/// Background threads per session. One is plenty for a client: it runs the connections' reader
/// and writer tasks and the asynchronous operations, while blocking calls run on the C caller's
/// own thread (`block_on`), encoding their requests there.
const WORKER_THREADS: usize = 1;

/// How long dropping the runtime waits for its threads to stop. They stop at once unless a task
/// is stuck in a system call; waiting at all means the threads are gone when the last handle is
/// freed, so a leak checker run at exit sees no thread still holding memory.
const SHUTDOWN_TIMEOUT_MS: u64 = 1_000;

/// A multi-threaded runtime rather than the current-thread one `ferrite_client::blocking` uses:
/// an asynchronous operation must progress while the C program does something else, so some
/// thread other than the caller's must drive the sockets.
#[derive(Debug)]
pub(crate) struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    pub(crate) fn new() -> Result<Arc<Runtime>, Failure> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("libferrite")
            .enable_all()
            .build()
            .map_err(|error| {
                Failure::from(Error::Io { context: "starting the client's runtime".into(), source: error })
            })?;
        Ok(Arc::new(Runtime(Some(runtime))))
    }

    fn inner(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("the runtime is only taken out in Drop")
    }

    /// Runs `future` to completion on the calling (C) thread.
    pub(crate) fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.inner().block_on(future)
    }

    pub(crate) fn handle(&self) -> &tokio::runtime::Handle {
        self.inner().handle()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            // Waiting for the threads panics inside an async context; there (only possible if a
            // C program calls us from a Tokio task of its own) let them stop in the background.
            if tokio::runtime::Handle::try_current().is_ok() {
                runtime.shutdown_background();
            } else {
                runtime.shutdown_timeout(Duration::from_millis(SHUTDOWN_TIMEOUT_MS));
            }
        }
    }
}
