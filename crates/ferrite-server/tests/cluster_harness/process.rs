//! One node's process: how it is started (and started again), when it counts as ready, and the
//! signals the harness sends it, always to its own pid.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::{signal, wait_exit, wait_until, SETTLE_TIMEOUT, SHUTDOWN_TIMEOUT, STARTUP_TIMEOUT};

/// How a node shows it is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// It prints its announcement as `ferrite-server` does, up to `ready.`: a `shard g: native`
    /// (and `shard g: resp`) line per shard on exactly the addresses it was given, and
    /// `node N: peer HOST:PORT` with its node id and advertised peer address.
    Announcement,
    /// It accepts TCP connections on shard 0's native and peer addresses (for stand-ins that
    /// print nothing useful).
    Listening,
}

/// What a node must announce (or listen on) to be ready.
#[derive(Debug, Clone)]
pub struct Expected {
    pub readiness: Readiness,
    pub node_id: u64,
    pub native: Vec<SocketAddr>,
    pub resp: Vec<SocketAddr>,
    /// `HOST:PORT` of the advertised peer listener (shard 0).
    pub peer_line: String,
    /// Shard 0's bound peer address (where [`Readiness::Listening`] connects).
    pub peer_listen: SocketAddr,
}

/// Starts node processes from one thread that lives as long as the cluster. Each process is
/// started under `setpriv --pdeathsig KILL`, so the kernel kills it when that thread ends: when
/// the cluster is dropped, or when the whole test process dies (a kill -9, a timeout in CI)
/// without running any destructor. One long-lived thread rather than the caller's, since the
/// signal follows the thread that forked, and a test may restart a node from a short-lived one.
#[derive(Debug)]
pub struct Spawner {
    requests: Mutex<Option<mpsc::Sender<Request>>>,
    thread: Option<JoinHandle<()>>,
}

type Request = (Command, mpsc::Sender<std::io::Result<Child>>);

impl Spawner {
    pub fn new() -> Spawner {
        let (requests, incoming) = mpsc::channel::<Request>();
        let thread = std::thread::spawn(move || {
            for (mut command, reply) in incoming {
                let _ = reply.send(command.spawn());
            }
        });
        Spawner { requests: Mutex::new(Some(requests)), thread: Some(thread) }
    }

    fn spawn(&self, command: Command) -> std::io::Result<Child> {
        let (reply, answer) = mpsc::channel();
        let requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        requests.as_ref().expect("the spawner runs until dropped").send((command, reply)).expect("spawner thread runs");
        drop(requests);
        answer.recv().expect("the spawner thread answers every request")
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A node's process, started again on the same command line by [`NodeProcess::restart`].
#[derive(Debug)]
pub struct NodeProcess {
    /// The whole command line, launcher (`ip netns exec NAME`) and `setpriv` included.
    argv: Vec<String>,
    expected: Expected,
    /// `None` once the process has been waited for.
    child: Option<Child>,
    pid: u32,
    starts: usize,
    announcement: Vec<String>,
    stderr_path: PathBuf,
}

impl NodeProcess {
    /// Starts `argv` and waits until it is ready; its stderr is appended to `stderr_path`.
    ///
    /// # Panics
    /// If it cannot start or is not ready within [`STARTUP_TIMEOUT`] (its output is in the
    /// message; the process is killed).
    pub fn start(spawner: &Spawner, argv: Vec<String>, expected: Expected, stderr_path: PathBuf) -> NodeProcess {
        let mut node =
            NodeProcess { argv, expected, child: None, pid: 0, starts: 0, announcement: Vec::new(), stderr_path };
        node.launch(spawner);
        node
    }

    /// Starts the same command line again (same data directory).
    ///
    /// # Panics
    /// If the process is still running: stop it first ([`NodeProcess::kill9`] or
    /// [`NodeProcess::terminate`]).
    pub fn restart(&mut self, spawner: &Spawner) {
        assert!(!self.is_running(), "node (pid {}) is still running; kill9() or terminate() it first", self.pid);
        self.launch(spawner);
    }

    fn launch(&mut self, spawner: &Spawner) {
        self.starts += 1;
        let mut stderr = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr_path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", self.stderr_path.display()));
        let _ = writeln!(stderr, "--- cluster harness: start {} of {:?} ---", self.starts, self.argv);
        let mut command = Command::new(&self.argv[0]);
        command.args(&self.argv[1..]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(stderr);
        let mut child = spawner.spawn(command).unwrap_or_else(|e| panic!("cannot start {:?}: {e}", self.argv));
        self.pid = child.id();
        let stdout = child.stdout.take().expect("stdout is piped");
        self.child = Some(child);
        // Drained for the process's whole life, so it never blocks on a full pipe.
        let (lines_tx, lines_rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = lines_tx.send(line);
            }
        });
        match self.expected.readiness {
            Readiness::Announcement => self.announcement = self.await_announcement(&lines_rx),
            Readiness::Listening => self.await_listening(),
        }
    }

    fn await_announcement(&mut self, lines: &mpsc::Receiver<String>) -> Vec<String> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let mut seen = Vec::new();
        loop {
            let line = match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.fail_start(&format!("did not announce `ready.` within {STARTUP_TIMEOUT:?}"), &seen)
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.as_mut().and_then(|child| child.wait().ok());
                    self.child = None;
                    self.fail_start(&format!("exited before it was ready ({status:?})"), &seen)
                }
            };
            let ready = line.starts_with("ready.");
            seen.push(line);
            if ready {
                if let Err(why) = check_announcement(&seen, &self.expected) {
                    self.fail_start(&why, &seen);
                }
                return seen;
            }
        }
    }

    fn await_listening(&mut self) {
        let targets = [self.expected.native[0], self.expected.peer_listen];
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        while !targets.iter().all(|target| TcpStream::connect_timeout(target, Duration::from_secs(1)).is_ok()) {
            if !self.is_running() {
                self.fail_start("exited before it was listening", &[]);
            }
            if Instant::now() >= deadline {
                self.fail_start(&format!("was not listening on {targets:?} within {STARTUP_TIMEOUT:?}"), &[]);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn fail_start(&self, why: &str, stdout: &[String]) -> ! {
        panic!(
            "node {} (pid {}, {:?}) {why}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.expected.node_id,
            self.pid,
            self.argv,
            stdout.join("\n"),
            self.stderr()
        )
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    pub fn announcement(&self) -> &[String] {
        &self.announcement
    }

    /// Everything the node wrote to stderr, over all its starts.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_else(|e| format!("(cannot read stderr: {e})"))
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                self.child = None;
                false
            }
            None => false,
        }
    }

    /// SIGKILL to the node's pid, then reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // `Child::kill` is SIGKILL to this pid; it may have died already, the wait reaps it.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM (with SIGCONT, in case it is stopped) and waits up to [`SHUTDOWN_TIMEOUT`]; `None`
    /// if it is still running then.
    pub fn terminate(&mut self) -> Option<ExitStatus> {
        self.child.as_ref()?;
        signal(self.pid, "-TERM");
        signal(self.pid, "-CONT");
        self.wait_exit(SHUTDOWN_TIMEOUT)
    }

    /// Sends SIGTERM without waiting (the cluster stops all its nodes at once).
    pub fn ask_to_stop(&mut self) {
        if self.is_running() {
            signal(self.pid, "-TERM");
            signal(self.pid, "-CONT");
        }
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let status = wait_exit(self.child.as_mut()?, timeout)?;
        self.child = None;
        Some(status)
    }

    /// SIGSTOP, and waits until the kernel reports the process stopped.
    pub fn stop(&mut self) {
        assert!(self.is_running(), "node (pid {}) is not running", self.pid);
        signal(self.pid, "-STOP");
        let pid = self.pid;
        wait_until(&format!("pid {pid} to stop"), SETTLE_TIMEOUT, || (process_state(pid) == Some('T')).then_some(()));
    }

    /// SIGCONT, and waits until the process runs again.
    pub fn cont(&mut self) {
        signal(self.pid, "-CONT");
        let pid = self.pid;
        wait_until(&format!("pid {pid} to continue"), SETTLE_TIMEOUT, || {
            (process_state(pid) != Some('T')).then_some(())
        });
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if self.terminate().is_none() {
            self.kill9();
        }
    }
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `T` for stopped, ...), `None` once it is gone.
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (in parentheses) may contain spaces; the state follows its closing one.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next())
}

/// Whether `announcement` shows exactly the listeners and peer address the node was given.
fn check_announcement(announcement: &[String], expected: &Expected) -> Result<(), String> {
    let mut native = Vec::new();
    let mut resp = Vec::new();
    let mut peer = None;
    for line in announcement {
        if let Some(rest) = line.strip_prefix("shard ") {
            if let Some((_, address)) = rest.split_once(": native ") {
                native.push(address.to_owned());
            } else if let Some((_, address)) = rest.split_once(": resp ") {
                resp.push(address.to_owned());
            }
        } else if let Some(rest) = line.strip_prefix("node ") {
            if let Some((id, address)) = rest.split_once(": peer ") {
                peer = Some((id.to_owned(), address.to_owned()));
            }
        }
    }
    let strings = |addresses: &[SocketAddr]| addresses.iter().map(ToString::to_string).collect::<Vec<_>>();
    if native != strings(&expected.native) {
        return Err(format!("announced native listeners {native:?}, expected {:?}", expected.native));
    }
    if resp != strings(&expected.resp) {
        return Err(format!("announced RESP listeners {resp:?}, expected {:?}", expected.resp));
    }
    let wanted = (expected.node_id.to_string(), expected.peer_line.clone());
    if peer.as_ref() != Some(&wanted) {
        return Err(format!("announced node and peer {peer:?}, expected `node {}: peer {}`", wanted.0, wanted.1));
    }
    Ok(())
}
