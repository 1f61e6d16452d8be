//! An answer that is not ready when its request is read: a plugin call, answered when the pool's
//! host finishes it, or a request that waits for a key a plugin call holds. The connection that
//! read the request stops answering (it reads nothing more, so its responses stay in order) and
//! awaits the completion; the shard completes it from its event loop. No thread blocks. (Both
//! sides are on the shard's thread; the atomics and the mutex, never contended, only let the
//! shard's state move to that thread when the server starts it.)

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::BytesMut;
use ferrite_store::persistence::wal::Lsn;
use tokio::sync::Notify;

use crate::stats::Op;

#[derive(Debug, Default)]
pub(crate) struct Completion {
    done: AtomicBool,
    notify: Notify,
    /// Also told when this completes: the connection that keeps answering other requests
    /// meanwhile (a native one: its responses may leave out of order).
    connection: Option<Arc<Notify>>,
    /// Response frames, already encoded with their request id; empty for a wake-up to retry.
    response: Mutex<BytesMut>,
    /// What must be durable before the response leaves (0: nothing).
    wait_lsn: AtomicU64,
    /// For an answer a client waits for: the kind of its request and when it was read, for the
    /// latency metrics.
    timed: Option<(Op, Instant)>,
}

impl Completion {
    pub(crate) fn new() -> Arc<Completion> {
        Arc::new(Completion::default())
    }

    /// The answer to a request of kind `op` read now, which also tells `connection` (if any)
    /// when it completes.
    pub(crate) fn telling(connection: Option<Arc<Notify>>, op: Op) -> Arc<Completion> {
        Arc::new(Completion { connection, timed: Some((op, Instant::now())), ..Completion::default() })
    }

    /// The kind of request this answers and when it was read, if it answers one.
    pub(crate) fn timed(&self) -> Option<(Op, Instant)> {
        self.timed
    }

    /// Completes with `encode`'s frames, to be sent once the log is durable up to `wait_lsn`.
    pub(crate) fn complete(&self, wait_lsn: Lsn, encode: impl FnOnce(&mut BytesMut)) {
        encode(&mut self.response.lock().unwrap_or_else(PoisonError::into_inner));
        self.wait_lsn.fetch_max(wait_lsn, Ordering::Relaxed);
        self.wake();
    }

    /// Completes without a response: the waiting request is answered by running it again (a
    /// lock it waited for was released).
    pub(crate) fn wake(&self) {
        self.done.store(true, Ordering::Release);
        self.notify.notify_one();
        if let Some(connection) = &self.connection {
            connection.notify_one();
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Resolves once completed (at once if it already was).
    pub(crate) async fn wait(&self) {
        while !self.is_done() {
            self.notify.notified().await;
        }
    }

    /// The response frames and the LSN they wait for.
    pub(crate) fn take(&self) -> (BytesMut, Lsn) {
        let response = std::mem::take(&mut *self.response.lock().unwrap_or_else(PoisonError::into_inner));
        (response, self.wait_lsn.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_completion_resolves_its_waiter_once_completed_even_if_completed_first() {
        let early = Completion::new();
        early.complete(7, |out| out.extend_from_slice(b"frame"));
        early.wait().await;
        assert_eq!(early.take(), (BytesMut::from(&b"frame"[..]), 7));

        let late = Completion::new();
        let waiter = {
            let late = Arc::clone(&late);
            async move {
                late.wait().await;
                late.take()
            }
        };
        let completer = async {
            tokio::task::yield_now().await;
            assert!(!late.is_done());
            late.wake();
        };
        let ((response, lsn), ()) = tokio::join!(waiter, completer);
        assert!(response.is_empty() && lsn == 0, "a wake-up carries no response");
    }
}
