//! The wake-up primitive: one eventfd per direction. A producer that finds its consumer asleep
//! (see [`crate::ring`]) adds 1; the consumer's read takes the whole count at once, so many
//! signals cost one wake-up. The eventfd is non-blocking: the shard registers it with its event
//! loop, and the host blocks in `poll` instead, with a timeout so it can notice a dead parent.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::event::{EventfdFlags, PollFd, PollFlags, Timespec};
use rustix::io::Errno;

/// One direction's eventfd.
#[derive(Debug)]
pub struct Wake {
    fd: OwnedFd,
}

impl Wake {
    /// A new non-blocking eventfd, closed on exec (the link passes it on explicitly).
    pub fn new() -> std::io::Result<Wake> {
        let fd = rustix::event::eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;
        Ok(Wake { fd })
    }

    /// Wraps an inherited eventfd.
    pub fn from_fd(fd: OwnedFd) -> Wake {
        Wake { fd }
    }

    /// Wakes the consumer.
    pub fn signal(&self) -> std::io::Result<()> {
        match rustix::io::write(&self.fd, &1u64.to_ne_bytes()) {
            Ok(_) => Ok(()),
            // The counter is near its maximum: the consumer has wake-ups pending anyway.
            Err(Errno::AGAIN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Takes every pending signal; true if there was any.
    pub fn take(&self) -> std::io::Result<bool> {
        let mut count = [0u8; 8];
        match rustix::io::read(&self.fd, &mut count) {
            Ok(_) => Ok(true),
            Err(Errno::AGAIN) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Blocks until signalled or `timeout` passes; true if signalled. Only the host calls this.
    pub fn wait(&self, timeout: Duration) -> std::io::Result<bool> {
        let timeout = Timespec {
            tv_sec: timeout.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: timeout.subsec_nanos().into(),
        };
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(ready) => Ok(ready > 0),
            Err(Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

impl AsFd for Wake {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
