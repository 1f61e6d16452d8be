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
//! A poll also stops while plugin calls run. A pool's plugin host usually shares the shard's CPU
//! (it inherits the server's placement), and a woken task does not preempt one that is still
//! running: a shard polling for its window would keep the host it waits for off the CPU for that
//! whole window. Parked, the shard lets the host run at once; the host's answers are a batch
//! answered, which starts the next poll.
//!
//! The window is `[[shards]] poll_us`; 0 turns polling off. See `docs/configuration.md` for how
//! the default was chosen.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};

use crate::handler::ShardState;

/// Longest run of batches answered without polling after polls that found nothing.
const BACKOFF_BATCHES_MAX: u32 = 64;

/// A shard's polling window and whether it is polling now. Lives in the shard's state, touched
/// only by the shard's thread.
///
/// A poll is worth its CPU only if a request comes while it runs. When polls keep running out
/// with nothing found (every client waits for the disk, or for something else), polling backs
/// off: after each fruitless poll the next 1, 2, 4, ... (at most [`BACKOFF_BATCHES_MAX`])
/// batches are answered without polling, and the first poll that finds a request ends the
/// backoff. On a small machine a fruitless poll takes CPU from the processes the shard waits
/// for (the sync thread, the clients).
#[derive(Debug)]
pub(crate) struct LowLoadPoll {
    window: Duration,
    /// Poll until then.
    deadline: Cell<Instant>,
    /// The polling task is running (not parked on `wake`).
    polling: Cell<bool>,
    /// The running poll has given the runtime at least one look at the sockets.
    looked: Cell<bool>,
    /// A batch was answered after the running poll looked: the poll found work.
    found: Cell<bool>,
    /// Batches to answer without polling, and the length of the next backoff.
    skip: Cell<u32>,
    backoff: Cell<u32>,
    wake: Arc<Notify>,
}

impl LowLoadPoll {
    /// Polling for `window` after each batch; a zero window never polls.
    pub fn new(window: Duration) -> LowLoadPoll {
        LowLoadPoll {
            window,
            deadline: Cell::new(Instant::now()),
            polling: Cell::new(false),
            looked: Cell::new(false),
            found: Cell::new(false),
            skip: Cell::new(0),
            backoff: Cell::new(0),
            wake: Arc::default(),
        }
    }

    /// A connection answered a batch: poll for another window from now.
    pub fn answered(&self) {
        if self.window.is_zero() {
            return;
        }
        if self.polling.get() {
            self.found.set(self.found.get() || self.looked.get());
        } else if self.skip.get() > 0 {
            self.skip.set(self.skip.get() - 1);
            return;
        }
        self.deadline.set(Instant::now() + self.window);
        if !self.polling.replace(true) {
            self.looked.set(false);
            self.found.set(false);
            self.wake.notify_one();
        }
    }

    /// Whether to keep polling. When the window has passed, ends the poll and sets the backoff
    /// by whether it found work.
    fn keep_polling(&self) -> bool {
        if Instant::now() < self.deadline.get() {
            self.looked.set(true);
            return true;
        }
        self.end_poll();
        if self.found.get() {
            self.backoff.set(0);
        } else {
            let backoff = (self.backoff.get() * 2).clamp(1, BACKOFF_BATCHES_MAX);
            self.backoff.set(backoff);
            self.skip.set(backoff);
        }
        false
    }

    /// Ends the running poll without judging it: nothing was waited for long enough to say.
    fn end_poll(&self) {
        self.polling.set(false);
    }
}

/// The shard's polling task: parked until a batch is answered, then yields to the runtime (which
/// polls the sockets without sleeping each time) until the window passes or a plugin call runs.
/// Ends when the shard stops.
pub(crate) async fn run(shard: Rc<RefCell<ShardState>>, mut stop: watch::Receiver<bool>) {
    let wake = Arc::clone(&shard.borrow().low_load_poll.wake);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            () = wake.notified() => {}
        }
        while shard.borrow().low_load_poll.keep_polling() {
            if shard.borrow().plugin_calls_running() {
                shard.borrow().low_load_poll.end_poll();
                break;
            }
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_micros(50);

    /// Lets the window pass and ends the poll, as the polling task would.
    fn run_out(poll: &LowLoadPoll) {
        std::thread::sleep(WINDOW * 2);
        assert!(!poll.keep_polling(), "the window has passed");
    }

    /// Polls that find nothing make the next 1, 2, 4, ... batches go without polling; a poll that
    /// finds a request ends the backoff.
    #[test]
    fn fruitless_polls_back_off_and_a_fruitful_one_resets() {
        let poll = LowLoadPoll::new(WINDOW);
        for backoff in [1, 2, 4] {
            poll.answered();
            assert!(poll.polling.get(), "a batch starts a poll");
            assert!(poll.keep_polling());
            run_out(&poll);
            for _ in 0..backoff {
                poll.answered();
                assert!(!poll.polling.get(), "batches during a backoff of {backoff} do not poll");
            }
        }
        poll.answered();
        assert!(poll.keep_polling(), "the poll has looked at the sockets");
        poll.answered();
        run_out(&poll);
        poll.answered();
        assert!(poll.polling.get(), "after a poll that found a request, the next batch polls at once");
    }

    /// A poll stopped for a plugin call is not judged: the next batch polls at once.
    #[test]
    fn a_poll_ended_for_a_plugin_call_does_not_back_off() {
        let poll = LowLoadPoll::new(WINDOW);
        poll.answered();
        assert!(poll.keep_polling());
        poll.end_poll();
        assert!(!poll.polling.get());
        poll.answered();
        assert!(poll.polling.get(), "the batch after an ended poll starts another");
        assert_eq!(poll.skip.get(), 0);
    }

    #[test]
    fn backoff_is_bounded() {
        let poll = LowLoadPoll::new(WINDOW);
        for _ in 0..20 {
            poll.answered();
            while !poll.polling.get() {
                poll.answered();
            }
            run_out(&poll);
        }
        assert_eq!(poll.skip.get(), BACKOFF_BATCHES_MAX);
    }

    #[test]
    fn a_zero_window_never_polls() {
        let poll = LowLoadPoll::new(Duration::ZERO);
        poll.answered();
        assert!(!poll.polling.get());
    }
}
