//! The way a replica drops state its group did not commit: the node's process starts itself
//! again, in place (same process id, same arguments), and recovery rebuilds every shard from its
//! checkpoint and the committed entries of its log.
//!
//! A leading replica executes writes in pool memory before its group commits them. When it stops
//! leading (or Raft refuses an entry it proposed), memory may hold writes the group will never
//! have; no answer revealed them (answers wait for the commit), but they must not stay. Undoing
//! them in memory would need before-images of every write; a restart needs nothing and follows the
//! path every crash already tests. It costs the node's other groups an election each if it led
//! them, and a second or so; leaders stop leading rarely (a failover, a transfer, a partition).

use std::os::unix::process::CommandExt;

/// Starts the process again with the arguments it was started with; never returns.
///
/// Threads end with the process image: a write in flight is cut off as a crash would cut it,
/// and recovery treats it so. Open files and sockets are closed on exec (Rust opens them
/// close-on-exec), which also releases the data directory's lock for the new image to take.
pub fn restart_process(reason: &str) -> ! {
    tracing::warn!(%reason, "restarting the server process");
    eprintln!("ferrite-server: restarting: {reason}");
    let mut args = std::env::args_os();
    let program = args.next().unwrap_or_else(|| "ferrite-server".into());
    let error = std::process::Command::new("/proc/self/exe").arg0(&program).args(args).exec();
    eprintln!("ferrite-server: cannot restart ({error}); stopping instead");
    std::process::abort()
}
