//! The host's end of the rings. The host is its own process and may block: it waits on its
//! eventfd (after an optional spin) when there is no work, and it retries with a short sleep
//! when the shard's ring is full, since the shard drains it without ever blocking.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::message::{CallId, CallbackReply, ToHost, ToShard};
use crate::ring::{Consumer, Drained, Producer, RingError};
use crate::wake::Wake;

use super::HostError;

/// How often a sleeping host looks whether its parent is still there.
const PARENT_CHECK_INTERVAL: Duration = Duration::from_millis(500);
/// How long the host sleeps before retrying a push into a full ring.
const FULL_RING_RETRY: Duration = Duration::from_micros(100);

/// The host's inbox and outbox.
#[derive(Debug)]
pub struct Channel {
    inbox: Consumer,
    outbox: Producer,
    to_host: Wake,
    to_shard: Wake,
    spin: Duration,
    parent: Option<rustix::process::Pid>,
    /// Messages taken off the ring but not handled yet (kept while a callback waits).
    backlog: VecDeque<ToHost>,
    /// The messages of the last drain of the shard's ring, before they are decoded.
    drained: Drained,
    /// Each message to the shard is encoded here, then copied into the ring.
    scratch: Vec<u8>,
}

impl Channel {
    pub fn new(inbox: Consumer, outbox: Producer, to_host: Wake, to_shard: Wake, spin_us: u32) -> Channel {
        Channel {
            inbox,
            outbox,
            to_host,
            to_shard,
            spin: Duration::from_micros(spin_us.into()),
            parent: rustix::process::getppid(),
            backlog: VecDeque::new(),
            drained: Drained::new(),
            scratch: Vec::new(),
        }
    }

    /// The largest message the shard can receive.
    pub fn max_message_bytes(&self) -> usize {
        self.outbox.max_message_bytes()
    }

    /// The next message to handle, waiting for one if none is queued.
    pub fn next(&mut self) -> Result<ToHost, HostError> {
        loop {
            if let Some(message) = self.backlog.pop_front() {
                return Ok(message);
            }
            self.receive()?;
        }
    }

    /// True if messages are queued: the current batch is not finished.
    pub fn has_backlog(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// Waits for the shard's reply to the callback `call` sent, keeping other messages queued.
    pub fn wait_reply(&mut self, call: CallId) -> Result<CallbackReply, HostError> {
        self.flush()?;
        loop {
            let found = self
                .backlog
                .iter()
                .position(|message| matches!(message, ToHost::CallbackReply { call: c, .. } if *c == call));
            if let Some(index) = found {
                if let Some(ToHost::CallbackReply { reply, .. }) = self.backlog.remove(index) {
                    return Ok(reply);
                }
            }
            self.receive()?;
        }
    }

    /// Queues a message for the shard, waiting while its ring is full.
    pub fn send(&mut self, message: &ToShard) -> Result<(), HostError> {
        self.send_with(|out| message.encode_into(out))
    }

    /// Queues the message `encode` writes into the channel's scratch buffer, as `send` does.
    pub fn send_with(&mut self, encode: impl FnOnce(&mut Vec<u8>)) -> Result<(), HostError> {
        encode(&mut self.scratch);
        loop {
            match self.outbox.push(&self.scratch) {
                Ok(()) => return Ok(()),
                Err(RingError::Full) => {
                    self.flush()?;
                    self.check_parent()?;
                    std::thread::sleep(FULL_RING_RETRY);
                }
                Err(e) => return Err(HostError::Ring(e)),
            }
        }
    }

    /// Wakes the shard if it sleeps: once per batch, after its messages are in the ring.
    pub fn flush(&mut self) -> Result<(), HostError> {
        if self.outbox.consumer_needs_wake() {
            self.to_shard.signal().map_err(HostError::Io)?;
        }
        Ok(())
    }

    /// Takes every message available, waiting (spin, then sleep) until there is at least one.
    fn receive(&mut self) -> Result<(), HostError> {
        loop {
            if self.drain()? > 0 {
                return Ok(());
            }
            if self.spin_until_work()? {
                continue;
            }
            if !self.inbox.prepare_sleep().map_err(HostError::Ring)? {
                continue;
            }
            self.flush()?;
            let signalled = self.to_host.wait(PARENT_CHECK_INTERVAL).map_err(HostError::Io)?;
            self.inbox.wake_up();
            if signalled {
                self.to_host.take().map_err(HostError::Io)?;
            } else {
                self.check_parent()?;
            }
        }
    }

    /// Polls the ring for up to the configured spin; true if work arrived.
    fn spin_until_work(&self) -> Result<bool, HostError> {
        if self.spin.is_zero() {
            return Ok(false);
        }
        let deadline = Instant::now() + self.spin;
        while Instant::now() < deadline {
            if !self.inbox.is_empty().map_err(HostError::Ring)? {
                return Ok(true);
            }
            std::hint::spin_loop();
        }
        Ok(false)
    }

    fn drain(&mut self) -> Result<usize, HostError> {
        let taken = self.inbox.drain(&mut self.drained).map_err(HostError::Ring)?;
        for bytes in self.drained.iter() {
            self.backlog.push_back(ToHost::decode(bytes).map_err(HostError::Decode)?);
        }
        Ok(taken)
    }

    /// A parent that went away means the shard is gone: stop as if told to.
    fn check_parent(&self) -> Result<(), HostError> {
        if rustix::process::getppid() != self.parent {
            return Err(HostError::ParentGone);
        }
        Ok(())
    }
}
