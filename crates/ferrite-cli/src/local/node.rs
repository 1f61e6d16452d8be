//! One node of a local cluster: a `ferrite-server` child process with its directory, its log
//! and the command line that starts it (kept in its directory, to start it again by hand).

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

use rustix::process::{kill_process, Pid, Signal};

use super::layout::{node_dir, NodePorts, HOST};

/// How much of the end of a log an error shows.
const LOG_TAIL_BYTES: u64 = 4096;

#[derive(Debug)]
pub struct Node {
    pub ports: NodePorts,
    dir: PathBuf,
    /// The command line that starts it, as `sh` reads it (also in `DIR/node-I/command`).
    command_line: String,
    child: Child,
    /// Once seen: the child is reaped, so its status is asked only once.
    exited: Option<ExitStatus>,
}

impl Node {
    /// Starts node `ports.id` of a cluster of `shards` shards in its directory under `dir`; its
    /// standard output and error are appended to its log. The node runs in a process group of
    /// its own, so a Ctrl-C at the terminal reaches `cluster local` alone, which stops the nodes
    /// in order.
    pub fn start(server: &Path, dir: &Path, ports: NodePorts, shards: u16) -> Result<Node, String> {
        let dir = node_dir(dir, ports.id);
        fs::create_dir_all(&dir).map_err(|error| format!("cannot create {}: {error}", dir.display()))?;
        let arguments = arguments(&dir, ports, shards);
        let line = command_line(server.as_os_str(), &arguments);
        let command_file = dir.join("command");
        fs::write(&command_file, format!("{line}\n"))
            .map_err(|error| format!("cannot write {}: {error}", command_file.display()))?;
        let log_path = dir.join("server.log");
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|error| format!("cannot open {}: {error}", log_path.display()))?;
        writeln!(log, "--- started by ferrite cluster local: {line}")
            .map_err(|error| format!("cannot write {}: {error}", log_path.display()))?;
        let stdout = log.try_clone().map_err(|error| format!("cannot share {}: {error}", log_path.display()))?;
        let child = Command::new(server)
            .args(&arguments)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log)
            .process_group(0)
            .spawn()
            .map_err(|error| format!("cannot start {}: {error}", server.display()))?;
        Ok(Node { ports, dir, command_line: line, child, exited: None })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn native(&self) -> String {
        format!("{HOST}:{}", self.ports.native)
    }

    pub fn command_line(&self) -> &str {
        &self.command_line
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// How it ended, once it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            // An error here means the child is no longer ours to wait for: it is gone.
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// Asks it to stop (SIGTERM), as Ctrl-C at its own terminal would.
    pub fn terminate(&mut self) {
        if self.exited().is_none() {
            // It may exit in the meantime; then there is nothing to stop.
            let _ = kill_process(Pid::from_child(&self.child), Signal::TERM);
        }
    }

    /// Stops it at once (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
    }

    /// The last lines of its log, for an error that says why it failed.
    pub fn log_tail(&self) -> String {
        let path = self.log();
        let mut tail = String::new();
        let read = File::open(&path).and_then(|mut file| {
            let length = file.metadata()?.len();
            file.seek(SeekFrom::Start(length.saturating_sub(LOG_TAIL_BYTES)))?;
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            Ok(bytes)
        });
        match read {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                // A cut first line is dropped unless it is the only one.
                let whole = if bytes.len() as u64 == LOG_TAIL_BYTES {
                    text.split_once('\n').map_or(&*text, |(_, rest)| rest)
                } else {
                    &text
                };
                for line in whole.lines() {
                    tail.push_str(&format!("  | {line}\n"));
                }
            }
            Err(error) => tail.push_str(&format!("  (cannot read {}: {error})\n", path.display())),
        }
        tail
    }
}

/// The server's arguments for node `ports.id`, its data in `dir`.
fn arguments(dir: &Path, ports: NodePorts, shards: u16) -> Vec<OsString> {
    let mut arguments: Vec<OsString> = [
        "--node-id".to_owned(),
        ports.id.to_string(),
        "--listen".to_owned(),
        format!("{HOST}:{}", ports.native),
        "--resp-listen".to_owned(),
        format!("{HOST}:{}", ports.resp),
        "--peer-listen".to_owned(),
        format!("{HOST}:{}", ports.peer),
        "--shards".to_owned(),
        shards.to_string(),
        "--data-dir".to_owned(),
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    arguments.push(dir.as_os_str().to_owned());
    arguments
}

/// `program arguments...` as a POSIX shell reads it back: words with characters the shell
/// treats specially are single-quoted.
fn command_line(program: &OsStr, arguments: &[OsString]) -> String {
    std::iter::once(program)
        .chain(arguments.iter().map(OsString::as_os_str))
        .map(shell_word)
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_word(word: &OsStr) -> String {
    let word = word.to_string_lossy();
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:=@%+,".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.into_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves a command line with a space and a quote in a path reads back through `sh` as the
    /// same words.
    #[test]
    fn a_command_line_reads_back_through_the_shell() {
        let arguments: Vec<OsString> = ["%s|", "--data-dir", "/tmp/it's a dir", ""].map(OsString::from).to_vec();
        let line = command_line(OsStr::new("printf"), &arguments);
        assert_eq!(line, r"printf '%s|' --data-dir '/tmp/it'\''s a dir' ''");
        let printed = Command::new("sh").arg("-c").arg(&line).output().expect("sh runs");
        assert_eq!(String::from_utf8_lossy(&printed.stdout), "--data-dir|/tmp/it's a dir||");
    }
}
