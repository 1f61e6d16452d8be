//! A raw RESP client for tests: plain blocking TCP, commands encoded and replies decoded by the
//! test's own code (not the server's), so tests can send what a well-behaved client never would;
//! and the real `redis-cli`, run as a user would run it.

// Each test file uses its own subset.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Longest a test waits for one reply before declaring the server stuck.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// A RESP reply as received, decoded by the test's own reader (not the server's encoder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    /// `$-1` (RESP2) or `_` (RESP3).
    Nil,
    Array(Vec<Reply>),
    /// A RESP3 map, as its key, value, key, value ... elements.
    Map(Vec<Reply>),
}

pub fn bulk(text: &str) -> Reply {
    Reply::Bulk(text.as_bytes().to_vec())
}

pub fn simple(text: &str) -> Reply {
    Reply::Simple(text.to_owned())
}

pub fn error(text: &str) -> Reply {
    Reply::Error(text.to_owned())
}

pub fn ok() -> Reply {
    simple("OK")
}

/// A command as a RESP array of bulk strings.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A plain blocking RESP client that hides nothing.
pub struct RespClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl RespClient {
    pub fn connect(address: SocketAddr) -> RespClient {
        let stream = TcpStream::connect(address).unwrap_or_else(|e| panic!("connect to {address}: {e}"));
        stream.set_read_timeout(Some(IO_TIMEOUT)).expect("read timeout");
        stream.set_nodelay(true).expect("nodelay");
        let writer = stream.try_clone().expect("clone the socket");
        RespClient { reader: BufReader::new(stream), writer }
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).expect("send");
    }

    pub fn send(&mut self, args: &[&str]) {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.send_bytes(&encode(&args));
    }

    /// Sends one command and reads its reply.
    pub fn call(&mut self, args: &[&str]) -> Reply {
        self.send(args);
        self.read()
    }

    pub fn line(&mut self) -> String {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line).expect("read a reply line");
        assert!(line.ends_with(b"\r\n"), "a reply line ends with CRLF: {:?}", String::from_utf8_lossy(&line));
        line.truncate(line.len() - 2);
        String::from_utf8(line).expect("reply lines are text")
    }

    pub fn read(&mut self) -> Reply {
        let line = self.line();
        let (kind, rest) = line.split_at(1);
        let number = || rest.parse::<i64>().unwrap_or_else(|_| panic!("bad length in {line:?}"));
        match kind {
            "+" => Reply::Simple(rest.to_owned()),
            "-" => Reply::Error(rest.to_owned()),
            ":" => Reply::Integer(number()),
            "_" => Reply::Nil,
            "$" if number() < 0 => Reply::Nil,
            "$" => {
                let mut data = vec![0; number() as usize + 2];
                self.reader.read_exact(&mut data).expect("bulk data");
                assert_eq!(&data[data.len() - 2..], b"\r\n");
                data.truncate(data.len() - 2);
                Reply::Bulk(data)
            }
            "*" => Reply::Array((0..number()).map(|_| self.read()).collect()),
            "%" => Reply::Map((0..2 * number()).map(|_| self.read()).collect()),
            _ => panic!("unknown reply type in {line:?}"),
        }
    }

    /// Sends one command and reads the first line of its reply, without its CRLF; `None` if the
    /// server has closed the connection (before or after the command).
    pub fn call_unless_closed(&mut self, args: &[&str]) -> Option<String> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        // A write to a socket the server closed may fail; the read then tells.
        let _ = self.writer.write_all(&encode(&args));
        let mut line = Vec::new();
        match self.reader.read_until(b'\n', &mut line) {
            Ok(0) => None,
            Ok(_) => {
                assert!(line.ends_with(b"\r\n"), "a reply line ends with CRLF: {:?}", String::from_utf8_lossy(&line));
                line.truncate(line.len() - 2);
                Some(String::from_utf8(line).expect("reply lines are text"))
            }
            Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => None,
            Err(e) => panic!("reading a reply: {e}"),
        }
    }

    /// Whether the server has closed the connection (reads end of stream or a reset).
    pub fn is_closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        match self.reader.read(&mut byte) {
            Ok(0) => true,
            Ok(_) => panic!("unexpected byte {:?} after the last reply", byte[0] as char),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
            Err(e) => panic!("reading for end of stream: {e}"),
        }
    }
}

/// Whether `redis-cli` is installed; if not, a test that needs it says so and is skipped.
pub fn redis_cli_installed() -> bool {
    let installed =
        Command::new("redis-cli").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !installed {
        eprintln!("note: redis-cli is not installed; skipping (scripts/install-test-deps.sh installs it)");
    }
    installed
}

pub fn redis_cli(address: SocketAddr, args: &[&str], input: Option<&[u8]>) -> String {
    let mut child = Command::new("redis-cli")
        .args(["-h", &address.ip().to_string(), "-p", &address.port().to_string()])
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start redis-cli");
    if let Some(input) = input {
        child.stdin.take().expect("stdin is piped").write_all(input).expect("feed redis-cli");
    }
    let output = child.wait_with_output().expect("redis-cli runs");
    assert!(output.status.success(), "redis-cli {args:?} failed: {output:?}");
    String::from_utf8(output.stdout).expect("redis-cli prints text")
}
