//! Test harness: runs the real `ferrite-server` binary as a child process.
//!
//! Every server listens on `127.0.0.1:0`, so each shard gets a free ephemeral port from the kernel
//! and tests never collide with each other or with a server someone runs by hand. The harness
//! learns the ports from the `shard N: native ADDRESS` lines the server prints when it is ready,
//! keeps the server's stderr in a file of its own temporary directory (shown when a test fails),
//! and stops the server by its own process id: SIGTERM first, SIGKILL only if it will not stop.
//!
//! The file is shared: `ferrite-cli`'s tests include it with `#[path]`, passing the path of the
//! server binary, which Cargo only names (`CARGO_BIN_EXE_ferrite-server`) for this crate's tests.
//! It uses nothing but `std`, so including it adds no dependency.

// Each test file uses its own subset of the harness.
#![allow(dead_code)]

use std::fmt::Display;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a server may take to print its shard addresses and `ready.` (a debug build on a
/// loaded two-core machine is slow to start, but not this slow).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the server may take to act on something it learns asynchronously (a client hanging
/// up) before a test waiting for it gives up.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a server may take to exit after SIGTERM before it is considered hung.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

/// Distinguishes the temporary directories of servers started by one test process.
static NEXT_SERVER: AtomicUsize = AtomicUsize::new(0);

/// A fresh, empty directory under the system temp dir, unique to this process and call. It is
/// removed when the thread that asked for it (the test's) ends, unless that thread panicked: a
/// failed test's files stay for whoever reads the failure.
pub fn fresh_dir(label: &str) -> PathBuf {
    let n = NEXT_SERVER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("ferrite-test-{label}-{}-{n}", std::process::id()));
    // A directory left by an earlier process that had the same pid is stale.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create test dir {}: {e}", dir.display()));
    KEEP_ON_PANIC.call_once(|| {
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = MADE_DIRS.try_with(|made| made.borrow_mut().keep = true);
            report(info);
        }));
    });
    MADE_DIRS.with(|made| made.borrow_mut().dirs.push(dir.clone()));
    dir
}

/// Installs, once per test process, the panic hook that keeps a panicking thread's directories.
static KEEP_ON_PANIC: std::sync::Once = std::sync::Once::new();

thread_local! {
    /// The directories [`fresh_dir`] made on this thread.
    static MADE_DIRS: std::cell::RefCell<MadeDirs> = std::cell::RefCell::new(MadeDirs::default());
}

/// A thread's test directories: removed when the thread ends, kept if it panicked.
#[derive(Default)]
struct MadeDirs {
    dirs: Vec<PathBuf>,
    keep: bool,
}

impl Drop for MadeDirs {
    fn drop(&mut self) {
        if self.keep {
            for dir in &self.dirs {
                eprintln!("test files kept in {}", dir.display());
            }
            return;
        }
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Calls `attempt` until it returns `Some`, or panics with `what` after `timeout`. For conditions
/// the server reaches asynchronously (a closed connection being accounted for), where a fixed sleep
/// would be either flaky or slow.
pub fn wait_until<T>(what: &str, timeout: Duration, mut attempt: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = attempt() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// How to start a server: which binary, which arguments, which configuration changes.
#[derive(Debug)]
pub struct ServerBuilder {
    binary: PathBuf,
    /// IP address every shard listens on, always with port 0.
    listen_ip: String,
    args: Vec<String>,
    /// `(key, value)` pairs replacing `key = ...` lines of the default configuration.
    config: Vec<(String, String)>,
    /// Whether to pass `--resp-listen <listen_ip>:0`.
    resp: bool,
    /// TOML appended to the configuration (tables the default file only shows commented out).
    extra_config: String,
    /// A data directory to use instead of a fresh one (to restart a server on its own files).
    data_dir: Option<PathBuf>,
    /// Environment variables set for the server process.
    env: Vec<(String, String)>,
}

impl ServerBuilder {
    /// Runs `--shards n`.
    pub fn shards(self, n: usize) -> Self {
        self.arg("--shards").arg(n.to_string())
    }

    /// Also serves RESP (`--resp-listen`), on the same IP with port 0; the addresses are in
    /// [`TestServer::resp_addr`].
    pub fn resp(mut self) -> Self {
        self.resp = true;
        self
    }

    /// Listens on `ip` (default `127.0.0.1`; `0.0.0.0`, `[::1]`, ...), still with port 0.
    pub fn listen_ip(mut self, ip: &str) -> Self {
        ip.clone_into(&mut self.listen_ip);
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args(mut self, args: &[impl AsRef<str>]) -> Self {
        self.args.extend(args.iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Starts the server with a config file: the server's own `--print-default-config` output
    /// with the line `key = ...` changed to `key = value` (for example `pools_per_shard_max`, 2).
    pub fn config(mut self, key: &str, value: impl Display) -> Self {
        self.config.push((key.to_owned(), value.to_string()));
        self
    }

    /// Appends `toml` to the configuration file, e.g. a `[durability]` table.
    pub fn append_config(mut self, toml: &str) -> Self {
        self.extra_config.push_str(toml);
        self.extra_config.push('\n');
        self
    }

    /// Uses `dir` as the data directory, so a test can restart a server on the files an earlier
    /// one left.
    pub fn data_dir(mut self, dir: &Path) -> Self {
        self.data_dir = Some(dir.to_path_buf());
        self
    }

    /// Sets an environment variable of the server process.
    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_owned(), value.into()));
        self
    }

    /// Starts the server and waits until it has announced every shard and `ready.`.
    pub fn start(self) -> TestServer {
        let dir = fresh_dir("server");
        let mut args = self.args.clone();
        if !self.config.is_empty() || !self.extra_config.is_empty() {
            let path = dir.join("ferrite.toml");
            std::fs::write(&path, self.config_text())
                .unwrap_or_else(|e| panic!("cannot write config {}: {e}", path.display()));
            args.push("--config".to_owned());
            args.push(path.display().to_string());
        }
        // Given last so they override whatever the config file says.
        args.extend(["--listen".to_owned(), format!("{}:0", self.listen_ip)]);
        if self.resp {
            args.extend(["--resp-listen".to_owned(), format!("{}:0", self.listen_ip)]);
        }
        let data_dir = self.data_dir.clone().unwrap_or_else(|| dir.join("data"));
        args.extend(["--data-dir".to_owned(), data_dir.display().to_string()]);
        TestServer::spawn(&self.binary, &args, &self.env, dir)
    }

    fn config_text(&self) -> String {
        let output = Command::new(&self.binary)
            .arg("--print-default-config")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {} --print-default-config: {e}", self.binary.display()));
        assert!(output.status.success(), "--print-default-config failed: {output:?}");
        let default = String::from_utf8(output.stdout).expect("the default config is UTF-8");
        let mut lines: Vec<String> = default.lines().map(str::to_owned).collect();
        for (key, value) in &self.config {
            let prefix = format!("{key} =");
            let matching: Vec<&mut String> = lines.iter_mut().filter(|line| line.starts_with(&prefix)).collect();
            assert_eq!(matching.len(), 1, "the default config should have exactly one `{key} = ...` line:\n{default}");
            for line in matching {
                *line = format!("{key} = {value}");
            }
        }
        lines.join("\n") + "\n" + &self.extra_config
    }
}

/// A running `ferrite-server` process, stopped when dropped.
#[derive(Debug)]
pub struct TestServer {
    /// `None` once the process has been waited for.
    child: Option<Child>,
    pid: u32,
    /// Where to connect to each shard: the announced address, with an unspecified host
    /// (`0.0.0.0`, `::`) replaced by the loopback address of its family.
    addresses: Vec<SocketAddr>,
    /// Each shard's address exactly as the server announced it.
    announced: Vec<String>,
    /// Each shard's RESP address (dialable), if the server serves RESP.
    resp_addresses: Vec<SocketAddr>,
    /// What the server printed on standard output up to its `ready.` line, that line included.
    announcement: Vec<String>,
    dir: PathBuf,
    stderr_path: PathBuf,
}

impl TestServer {
    /// A builder for this crate's own server binary.
    ///
    /// # Panics
    /// Outside `ferrite-server`'s tests, where Cargo does not name the binary; use
    /// [`TestServer::builder_for`] there.
    pub fn builder() -> ServerBuilder {
        // `option_env!`, not `env!`: this file is also compiled into ferrite-cli's tests, where
        // Cargo does not set the variable and those tests use `builder_for` instead.
        let Some(binary) = option_env!("CARGO_BIN_EXE_ferrite-server") else {
            panic!("CARGO_BIN_EXE_ferrite-server is only set for ferrite-server's tests; use builder_for(path)");
        };
        TestServer::builder_for(binary)
    }

    /// A builder for the server binary at `binary`.
    pub fn builder_for(binary: impl Into<PathBuf>) -> ServerBuilder {
        ServerBuilder {
            binary: binary.into(),
            listen_ip: "127.0.0.1".to_owned(),
            args: Vec::new(),
            config: Vec::new(),
            resp: false,
            extra_config: String::new(),
            data_dir: None,
            env: Vec::new(),
        }
    }

    /// Starts this crate's server binary with `args` (plus `--listen 127.0.0.1:0` and a fresh
    /// `--data-dir`).
    pub fn start(args: &[&str]) -> TestServer {
        TestServer::builder().args(args).start()
    }

    fn spawn(binary: &Path, args: &[String], env: &[(String, String)], dir: PathBuf) -> TestServer {
        assert!(
            binary.exists(),
            "server binary {} does not exist; run `cargo build -p ferrite-server` first",
            binary.display()
        );
        let stderr_path = dir.join("stderr.log");
        let stderr = std::fs::File::create(&stderr_path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", stderr_path.display()));
        let mut child = Command::new(binary)
            .args(args)
            .envs(env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
        let pid = child.id();
        let stdout = child.stdout.take().expect("stdout is piped");
        // A thread reads stdout so the wait below can time out, and keeps draining it afterwards
        // so the server can never block on a full pipe.
        let (lines_tx, lines_rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // Once the server is ready nobody listens any more; reading on keeps the pipe empty.
                let _ = lines_tx.send(line);
            }
        });
        let mut server = TestServer {
            child: Some(child),
            pid,
            addresses: Vec::new(),
            announced: Vec::new(),
            resp_addresses: Vec::new(),
            announcement: Vec::new(),
            dir,
            stderr_path,
        };
        let mut resp = Vec::new();
        server.announced = server.await_ready(&lines_rx, args, &mut resp);
        server.addresses = server.announced.iter().map(|a| dialable(a)).collect();
        server.resp_addresses = resp.iter().map(|a| dialable(a)).collect();
        server
    }

    /// Reads the announcement until `ready.`, collecting `shard N: native ADDRESS` lines (and
    /// `shard N: resp ADDRESS` lines into `resp`).
    fn await_ready(&mut self, lines: &mpsc::Receiver<String>, args: &[String], resp: &mut Vec<String>) -> Vec<String> {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        let mut addresses = Vec::new();
        let mut seen = Vec::new();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            let line = match lines.recv_timeout(remaining) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Timeout) => self.fail_start(
                    &format!("did not announce `ready.` within {STARTUP_TIMEOUT:?} (args {args:?})"),
                    &seen,
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.as_mut().and_then(|c| c.wait().ok());
                    self.fail_start(&format!("exited before it was ready ({status:?}; args {args:?})"), &seen)
                }
            };
            seen.push(line.clone());
            if let Some(rest) = line.strip_prefix("shard ") {
                if let Some((index, address)) = rest.split_once(": resp ") {
                    assert_eq!(
                        index.parse::<usize>().ok(),
                        Some(resp.len()),
                        "resp lines arrive in index order: {line:?}"
                    );
                    resp.push(address.to_owned());
                    continue;
                }
                let Some((index, address)) = rest.split_once(": native ") else { continue };
                let index: usize = index.parse().unwrap_or_else(|_| panic!("bad shard line {line:?}"));
                assert_eq!(index, addresses.len(), "shard lines arrive in index order: {line:?}");
                addresses.push(address.to_owned());
            } else if line.starts_with("ready.") {
                assert!(!addresses.is_empty(), "`ready.` before any shard line: {seen:?}");
                self.announcement = seen;
                return addresses;
            }
        }
    }

    fn fail_start(&self, why: &str, stdout: &[String]) -> ! {
        panic!("ferrite-server {why}\n--- stdout ---\n{}\n--- stderr ---\n{}", stdout.join("\n"), self.stderr())
    }

    /// The address of shard `index`.
    pub fn addr(&self, index: usize) -> SocketAddr {
        self.addresses[index]
    }

    /// Shard 0's address as `host:port`, for clients that take a string.
    pub fn addr_string(&self) -> String {
        self.addresses[0].to_string()
    }

    pub fn addresses(&self) -> &[SocketAddr] {
        &self.addresses
    }

    /// The RESP address of shard `index`.
    ///
    /// # Panics
    /// If the server was not started with [`ServerBuilder::resp`].
    pub fn resp_addr(&self, index: usize) -> SocketAddr {
        assert!(!self.resp_addresses.is_empty(), "the server was started without RESP (ServerBuilder::resp)");
        self.resp_addresses[index]
    }

    /// The lines the server printed when it started, up to and including `ready. ...`.
    pub fn announcement(&self) -> &[String] {
        &self.announcement
    }

    /// Each shard's address exactly as the server printed it.
    pub fn announced(&self) -> &[String] {
        &self.announced
    }

    pub fn shard_count(&self) -> usize {
        self.addresses.len()
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The temporary directory of this server (config file, data dir, stderr log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Everything the server has written to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_else(|e| format!("(cannot read stderr: {e})"))
    }

    /// Whether the process is still running.
    pub fn is_alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Sends SIGTERM to this server's own process id.
    pub fn sigterm(&self) {
        if self.child.is_some() {
            signal(self.pid, "-TERM");
        }
    }

    /// Kills the server with SIGKILL (to its own process id), as a crash would, and waits for it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            // The process may have died already; the wait below reaps it either way.
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `timeout` for the process to exit; `None` if it is still running then.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let status = wait_exit(self.child.as_mut()?, timeout)?;
        self.child = None;
        Some(status)
    }

    /// Stops the server with SIGTERM and asserts that it exits with status 0 within
    /// [`SHUTDOWN_TIMEOUT`].
    pub fn stop_gracefully(mut self) -> ExitStatus {
        assert!(self.is_alive(), "ferrite-server died before it was asked to stop:\n{}", self.stderr());
        self.sigterm();
        let Some(status) = self.wait_exit(SHUTDOWN_TIMEOUT) else {
            panic!("ferrite-server did not exit within {SHUTDOWN_TIMEOUT:?} of SIGTERM\n{}", self.stderr());
        };
        assert!(status.success(), "ferrite-server exited with {status} after SIGTERM\n{}", self.stderr());
        status
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.sigterm();
            if self.wait_exit(SHUTDOWN_TIMEOUT).is_none() {
                if let Some(mut child) = self.child.take() {
                    // SIGKILL, to this child only.
                    let _ = child.kill();
                    let _ = child.wait();
                }
            }
        }
        if std::thread::panicking() {
            // Keep the evidence for whoever reads the failure.
            eprintln!(
                "ferrite-server (pid {}) files kept in {}\n--- server stderr ---\n{}",
                self.pid,
                self.dir.display(),
                self.stderr()
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// An announced `host:port` as an address a test can connect to.
fn dialable(announced: &str) -> SocketAddr {
    let mut address: SocketAddr =
        announced.parse().unwrap_or_else(|_| panic!("the server announced {announced:?}, not an IP address"));
    if address.ip().is_unspecified() {
        let loopback: std::net::IpAddr = match address {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        };
        address.set_ip(loopback);
    }
    address
}

/// Waits up to `timeout` for `child` to exit; `None` if it is still running then.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => return None,
            Err(e) => panic!("cannot wait for pid {}: {e}", child.id()),
        }
    }
}

/// Sends signal `which` (`-TERM`, `-KILL`, `-STOP`, ...) to process `pid`; a process that has
/// already exited is not an error (the caller's wait tells).
pub fn signal(pid: u32, which: &str) {
    // `kill(1)` rather than libc: the workspace denies unsafe code, and this is not hot.
    let status = Command::new("kill").arg(which).arg(pid.to_string()).status();
    match status {
        Ok(status) if status.success() => {}
        // The process may have exited on its own already; the caller's wait tells.
        Ok(_) => {}
        Err(e) => panic!("cannot run kill {which} {pid}: {e}"),
    }
}

/// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320: the one zlib's `crc32` computes),
/// bit by bit. Written out here so the tests check the server against an independent
/// implementation, not against the crate the server itself uses.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}
