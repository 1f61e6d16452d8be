//! The host's status: a small shared area in which the host names the call it is running, so
//! that once the host has died the link can tell the call it died in (which failed) from the
//! calls it had not begun (which run again on the next host, so that one call's crash costs no
//! other call).
//!
//! Layout (native-endian, which is little-endian on every platform we build for):
//!
//! | offset | size | field                                                  |
//! |-------:|-----:|--------------------------------------------------------|
//! |      0 |    8 | magic `STATUS_MAGIC`                                   |
//! |      8 |    8 | running: the call the host runs now (0: none)          |
//!
//! The host stores the call's id before it begins the call and 0 once it has reported it (its
//! Done is in the ring by then), both with Release; the link reads it only after the host is
//! dead.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;

use crate::message::CallId;
use crate::shm::Mapping;

/// `b"FRSTAT01"` as a little-endian integer.
pub const STATUS_MAGIC: u64 = u64::from_le_bytes(*b"FRSTAT01");
/// The area's size: one page.
pub const STATUS_BYTES: usize = 4096;

const MAGIC_OFFSET: usize = 0;
const RUNNING_OFFSET: usize = 8;

/// Why the status area cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StatusError {
    #[error("the host's status area is too short or has a bad magic")]
    Corrupt,
}

/// One side's view of the status area.
#[derive(Debug)]
pub struct HostStatus {
    area: Mapping,
}

impl HostStatus {
    /// The link's side: a new area, with its descriptor for the host.
    pub fn create() -> std::io::Result<(OwnedFd, HostStatus)> {
        let fd = Mapping::create_memfd("ferrite-ado-status", STATUS_BYTES)?;
        let status = HostStatus { area: Mapping::map(&fd)? };
        status.reset().map_err(std::io::Error::other)?;
        Ok((fd, status))
    }

    /// The host's side, over the descriptor it inherited.
    pub fn open(fd: &OwnedFd) -> Result<HostStatus, std::io::Error> {
        let status = HostStatus { area: Mapping::map(fd)? };
        match status.area.atomic_u64(MAGIC_OFFSET).map(|magic| magic.load(Ordering::Acquire)) {
            Some(STATUS_MAGIC) => Ok(status),
            _ => Err(std::io::Error::other(StatusError::Corrupt)),
        }
    }

    /// Writes a fresh area (only while no host runs).
    pub fn reset(&self) -> Result<(), StatusError> {
        self.area.atomic_u64(RUNNING_OFFSET).ok_or(StatusError::Corrupt)?.store(0, Ordering::Relaxed);
        self.area.atomic_u64(MAGIC_OFFSET).ok_or(StatusError::Corrupt)?.store(STATUS_MAGIC, Ordering::Release);
        Ok(())
    }

    /// Names the call the host runs now (`None`: between calls).
    pub fn set_running(&self, call: Option<CallId>) {
        if let Some(running) = self.area.atomic_u64(RUNNING_OFFSET) {
            running.store(call.map_or(0, |call| call.0), Ordering::Release);
        }
    }

    /// The call the host was running, read once the host is dead.
    pub fn running(&self) -> Option<CallId> {
        let running = self.area.atomic_u64(RUNNING_OFFSET)?.load(Ordering::Acquire);
        (running != 0).then_some(CallId(running))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the host names, the link reads; a fresh area names nothing.
    #[test]
    fn the_link_reads_the_call_the_host_names() {
        let (fd, link) = HostStatus::create().expect("create");
        let host = HostStatus::open(&fd).expect("open");
        assert_eq!(link.running(), None);
        host.set_running(Some(CallId(7)));
        assert_eq!(link.running(), Some(CallId(7)));
        host.set_running(None);
        assert_eq!(link.running(), None);
        host.set_running(Some(CallId(9)));
        link.reset().expect("reset");
        assert_eq!(link.running(), None);
    }

    /// An area that is not one (no magic) is refused.
    #[test]
    fn a_foreign_area_is_refused() {
        let fd = Mapping::create_memfd("other", STATUS_BYTES).expect("memfd");
        assert!(HostStatus::open(&fd).is_err());
    }
}
