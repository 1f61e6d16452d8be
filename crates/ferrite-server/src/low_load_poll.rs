//! Polling after a batch, at low load.
//!
//! A shard that has answered a batch and has nothing else to do sleeps in `epoll_wait`, and the
//! kernel halts its vCPU. When the client's next request arrives a few microseconds later, waking
//! the halted vCPU costs more than answering the request: at one client, that wake-up is most of
//! the round trip. So after answering a batch the shard keeps polling its sockets without
//! sleeping (`epoll_wait` with no timeout, through the runtime's yield) for a short window. The
//! window is extended by every batch answered, so it runs only while requests keep arriving; once
//! no request has come for a whole window the shard parks as before and uses no CPU at all (the
//! seeds' "friendly neighbour" rule: never spin when there is nothing to do).
//!
//! The window is `[[shards]] poll_us`; 0 turns polling off. See `docs/configuration.md` for how
//! the default was chosen.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use crate::handler::ShardState;

/// A shard's polling window and whether it is polling now. Lives in the shard's state, touched
/// only by the shard's thread.
#[derive(Debug)]
pub(crate) struct LowLoadPoll {
    window: Duration,
    /// Poll until then.
    deadline: Cell<Instant>,
    /// The polling task is running (not parked on `wake`).
    polling: Cell<bool>,
    wake: Arc<Notify>,
}

impl LowLoadPoll {
    /// Polling for `window` after each batch; a zero window never polls.
    pub fn new(window: Duration) -> LowLoadPoll {
        LowLoadPoll { window, deadline: Cell::new(Instant::now()), polling: Cell::new(false), wake: Arc::default() }
    }

    /// A connection answered a batch: poll for another window from now.
    pub fn answered(&self) {
        if self.window.is_zero() {
            return;
        }
        self.deadline.set(Instant::now() + self.window);
        if !self.polling.replace(true) {
            self.wake.notify_one();
        }
    }

    /// Whether to keep polling; clears the flag when the window has passed.
    fn keep_polling(&self) -> bool {
        let keep = Instant::now() < self.deadline.get();
        self.polling.set(keep);
        keep
    }
}

/// The shard's polling task: parked until a batch is answered, then yields to the runtime (which
/// polls the sockets without sleeping each time) until the window passes. Ends when the shard
/// stops.
pub(crate) async fn run(shard: Rc<RefCell<ShardState>>, mut stop: watch::Receiver<bool>) {
    let wake = Arc::clone(&shard.borrow().low_load_poll.wake);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            () = wake.notified() => {}
        }
        while shard.borrow().low_load_poll.keep_polling() {
            tokio::task::yield_now().await;
        }
    }
}
