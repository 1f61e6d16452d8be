//! Starting a host: the five shared descriptors land on fixed numbers in the child, everything
//! else the shard has open is closed at exec, and the child dies with its parent.

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::args::HostArgs;

/// The child's descriptor for the first shared descriptor; the others follow in order.
const CHILD_FD_FIRST: RawFd = 3;
/// Descriptors are moved out of the way above this before landing on their numbers, so a
/// source that already sits on a target number is not overwritten.
const CHILD_FD_SCRATCH: RawFd = 64;
/// `CLOSE_RANGE_CLOEXEC` from `linux/close_range.h`: mark instead of close, so the standard
/// library's own exec-error pipe (already close-on-exec) keeps working until exec.
const CLOSE_RANGE_CLOEXEC: libc::c_int = 1 << 2;

/// The shared descriptors, in the order they land in the child.
#[derive(Debug, Clone, Copy)]
pub struct SharedFds<'a> {
    pub pool: BorrowedFd<'a>,
    pub rings: BorrowedFd<'a>,
    pub to_host: BorrowedFd<'a>,
    pub to_shard: BorrowedFd<'a>,
    pub status: BorrowedFd<'a>,
}

/// The child's numbers for the shared descriptors, as the host's command line names them.
pub fn child_fds(args: &mut HostArgs) {
    args.pool_fd = CHILD_FD_FIRST;
    args.ring_fd = CHILD_FD_FIRST + 1;
    args.to_host_fd = CHILD_FD_FIRST + 2;
    args.to_shard_fd = CHILD_FD_FIRST + 3;
    args.status_fd = CHILD_FD_FIRST + 4;
}

/// Starts `binary` with `args` (whose descriptor numbers `child_fds` set) and `fds`.
///
/// The child gets SIGKILL when the thread that spawned it exits (PR_SET_PDEATHSIG is tied to
/// the parent thread): spawn from the shard's own long-lived thread.
#[allow(unsafe_code)]
pub fn spawn_host(binary: &Path, args: &HostArgs, fds: SharedFds<'_>) -> std::io::Result<Child> {
    let sources = [fds.pool, fds.rings, fds.to_host, fds.to_shard, fds.status].map(|fd| fd.as_raw_fd());
    let mut command = Command::new(binary);
    command.args(args.to_args()).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::inherit());
    // SAFETY: the closure runs in the forked child before exec and makes only async-signal-safe
    // system calls (prctl, fcntl, dup2, close_range) on integers it captured by value.
    unsafe {
        command.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            let mut moved = [0 as RawFd; 5];
            for (slot, source) in moved.iter_mut().zip(sources) {
                *slot = libc::fcntl(source, libc::F_DUPFD_CLOEXEC, CHILD_FD_SCRATCH);
                if *slot < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (target, scratch) in (CHILD_FD_FIRST..).zip(moved) {
                // dup2 clears close-on-exec on the target: these five survive exec.
                if libc::dup2(scratch, target) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            let first_other = (CHILD_FD_FIRST + moved.len() as RawFd) as libc::c_uint;
            if libc::close_range(first_other, libc::c_uint::MAX, CLOSE_RANGE_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    command.spawn()
}
