//! A raw protocol client for tests: plain blocking TCP, frames written byte by byte where a test
//! needs that, responses decoded with `ferrite_proto`. It hides nothing (no handles kept, no
//! limits checked, no retries), so tests can send what a well-behaved client never would.

// Each test file uses its own subset.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::BytesMut;
use ferrite_proto::{
    CreatePoolFlags, ErrorCode, Header, HelloReply, PoolHandle, Request, Response, HEADER_BYTES, PROTOCOL_VERSION,
};

/// Longest a test waits for one response before declaring the server stuck.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Opcode of an error frame.
pub const ERROR_OPCODE: u16 = 0xFFFF;

/// A frame header and body written by hand, independent of `ferrite_proto`'s encoder.
pub fn frame(opcode: u16, flags: u16, request_id: u64, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + body.len());
    out.extend_from_slice(&u32::try_from(body.len()).expect("test bodies fit u32").to_le_bytes());
    out.extend_from_slice(&opcode.to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&request_id.to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// A header alone, announcing `body_len` bytes that may never come.
pub fn header(opcode: u16, flags: u16, request_id: u64, body_len: u32) -> Vec<u8> {
    Header { body_len, opcode, flags, request_id }.to_bytes().to_vec()
}

/// A hello body, by hand: magic, version, client name, empty auth.
pub fn hello_body(magic: &[u8; 4], version: u16, client_name: &str) -> Vec<u8> {
    let mut body = magic.to_vec();
    body.extend_from_slice(&version.to_le_bytes());
    body.extend_from_slice(&u16::try_from(client_name.len()).expect("short name").to_le_bytes());
    body.extend_from_slice(client_name.as_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    body
}

/// A request frame as `ferrite_proto` encodes it.
pub fn encode(request_id: u64, request: &Request<'_>) -> Vec<u8> {
    let mut out = BytesMut::new();
    request.encode(request_id, &mut out);
    out.to_vec()
}

/// One response frame as received.
#[derive(Debug, Clone)]
pub struct Frame {
    pub header: Header,
    pub body: Vec<u8>,
}

impl Frame {
    pub fn response(&self) -> Response<'_> {
        Response::decode(&self.header, &self.body)
            .unwrap_or_else(|e| panic!("the server sent an undecodable frame {:?}: {e}", self.header))
    }

    /// The error code, if this is an error frame.
    pub fn error_code(&self) -> Option<ErrorCode> {
        match self.response() {
            Response::Error { code, .. } => Some(code),
            _ => None,
        }
    }

    /// Asserts that this is an error frame answering `request_id` with `code`; returns its message.
    #[track_caller]
    pub fn expect_error(&self, request_id: u64, code: ErrorCode) -> String {
        assert_eq!(self.header.opcode, ERROR_OPCODE, "expected {code} for request {request_id}, got {self:?}");
        assert_eq!(self.header.request_id, request_id, "error answers the wrong request: {self:?}");
        match self.response() {
            Response::Error { code: got, message } => {
                assert_eq!(got, code, "wrong error code for request {request_id} ({message})");
                message.to_owned()
            }
            other => panic!("expected {code}, got {other:?}"),
        }
    }

    /// Asserts that this is a successful response to `request_id`.
    #[track_caller]
    pub fn expect_ok(&self, request_id: u64) -> Response<'_> {
        assert_eq!(self.header.request_id, request_id, "response to the wrong request: {self:?}");
        let response = self.response();
        assert!(!matches!(response, Response::Error { .. }), "request {request_id} failed: {response:?}");
        response
    }
}

/// The server's limits and shards, as its hello reply announced them.
#[derive(Debug, Clone)]
pub struct Announced {
    pub shard_index: u16,
    pub key_bytes_max: u32,
    pub value_bytes_max: u32,
    pub shard_addresses: Vec<String>,
}

/// A blocking TCP connection speaking raw frames.
#[derive(Debug)]
pub struct RawClient {
    stream: TcpStream,
    buffer: Vec<u8>,
}

impl RawClient {
    /// Connects without saying anything.
    pub fn connect(address: SocketAddr) -> RawClient {
        let stream = TcpStream::connect(address).unwrap_or_else(|e| panic!("cannot connect to {address}: {e}"));
        stream.set_read_timeout(Some(IO_TIMEOUT)).expect("set a read timeout");
        stream.set_write_timeout(Some(IO_TIMEOUT)).expect("set a write timeout");
        stream.set_nodelay(true).expect("disable Nagle");
        RawClient { stream, buffer: Vec::new() }
    }

    /// Connects and completes the handshake (request id 1).
    pub fn handshaken(address: SocketAddr) -> RawClient {
        let mut client = RawClient::connect(address);
        client.hello();
        client
    }

    /// Sends a valid hello with request id 1 and returns what the server announced.
    pub fn hello(&mut self) -> Announced {
        self.send_bytes(&frame(0x0001, 0, 1, &hello_body(b"FRRT", PROTOCOL_VERSION, "raw-test")));
        let reply = self.read_frame();
        match reply.expect_ok(1) {
            Response::Hello(HelloReply { version, shard_index, limits, shard_addresses }) => {
                assert_eq!(version, PROTOCOL_VERSION);
                Announced {
                    shard_index,
                    key_bytes_max: limits.key_bytes_max,
                    value_bytes_max: limits.value_bytes_max,
                    shard_addresses: shard_addresses.iter().map(|a| (*a).to_owned()).collect(),
                }
            }
            other => panic!("expected a hello reply, got {other:?}"),
        }
    }

    pub fn send_bytes(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap_or_else(|e| panic!("cannot send {} bytes: {e}", bytes.len()));
    }

    /// Like [`RawClient::send_bytes`], but reports failure instead of panicking (the server may
    /// have closed the connection already).
    pub fn try_send_bytes(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Writes `bytes` from another thread, so the caller can read the answers meanwhile: a batch
    /// whose answers outgrow the socket buffers would otherwise deadlock, each side waiting for
    /// the other to read.
    pub fn send_in_background(&self, bytes: Vec<u8>) -> std::thread::JoinHandle<()> {
        let mut stream = self.stream.try_clone().expect("clone the socket");
        std::thread::spawn(move || stream.write_all(&bytes).expect("send the batch"))
    }

    pub fn send(&mut self, request_id: u64, request: &Request<'_>) {
        self.send_bytes(&encode(request_id, request));
    }

    /// Sends one request and reads one frame, which must answer it.
    #[track_caller]
    pub fn call(&mut self, request_id: u64, request: &Request<'_>) -> Frame {
        self.send(request_id, request);
        let frame = self.read_frame();
        assert_eq!(frame.header.request_id, request_id, "response to the wrong request: {frame:?}");
        frame
    }

    /// Reads the next frame; panics on end of stream or after [`IO_TIMEOUT`].
    #[track_caller]
    pub fn read_frame(&mut self) -> Frame {
        match self.read_frame_or_end() {
            Ok(Some(frame)) => frame,
            Ok(None) => panic!("the server closed the connection instead of answering"),
            Err(e) => panic!("no response from the server: {e}"),
        }
    }

    /// The next frame, `Ok(None)` if the server closed the connection between frames.
    pub fn read_frame_or_end(&mut self) -> std::io::Result<Option<Frame>> {
        loop {
            if let Some(header) = Header::parse(&self.buffer) {
                let frame_len = header.frame_len();
                if self.buffer.len() >= frame_len {
                    let body = self.buffer[HEADER_BYTES..frame_len].to_vec();
                    self.buffer.drain(..frame_len);
                    return Ok(Some(Frame { header, body }));
                }
            }
            let mut chunk = [0u8; 64 * 1024];
            let read = self.stream.read(&mut chunk)?;
            if read == 0 {
                if self.buffer.is_empty() {
                    return Ok(None);
                }
                return Err(std::io::Error::new(
                    ErrorKind::UnexpectedEof,
                    format!("connection closed inside a frame ({} bytes of it received)", self.buffer.len()),
                ));
            }
            self.buffer.extend_from_slice(&chunk[..read]);
        }
    }

    /// Asserts that the server closes the connection without sending anything more.
    #[track_caller]
    pub fn expect_closed(&mut self) {
        match self.read_frame_or_end() {
            Ok(None) => {}
            // A close with our input unread arrives as a reset; closed all the same.
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
            Ok(Some(frame)) => panic!("expected the server to close the connection, got {frame:?}"),
            Err(e) => panic!("expected the server to close the connection: {e}"),
        }
    }

    /// Creates (or opens) `name` with `size_bytes` and returns the handle.
    #[track_caller]
    pub fn create_pool(&mut self, request_id: u64, name: &str, size_bytes: u64) -> PoolHandle {
        let request =
            Request::CreatePool { name, size_bytes, expected_objects: 16, flags: CreatePoolFlags::NONE, plugins: "" };
        match self.call(request_id, &request).expect_ok(request_id) {
            Response::PoolCreated { pool, .. } => pool,
            other => panic!("expected pool_created, got {other:?}"),
        }
    }

    /// Opens `name` and returns the handle.
    #[track_caller]
    pub fn open_pool(&mut self, request_id: u64, name: &str) -> PoolHandle {
        match self.call(request_id, &Request::OpenPool { name }).expect_ok(request_id) {
            Response::PoolOpened { pool } => pool,
            other => panic!("expected pool_opened, got {other:?}"),
        }
    }

    /// The value of `key`, or the error code.
    #[track_caller]
    pub fn get(&mut self, request_id: u64, pool: PoolHandle, key: &[u8]) -> Result<Vec<u8>, ErrorCode> {
        let frame = self.call(request_id, &Request::Get { pool, key });
        match frame.response() {
            Response::Value(value) => Ok(value.to_vec()),
            Response::Error { code, .. } => Err(code),
            other => panic!("expected a value, got {other:?}"),
        }
    }

    /// The named counters of the shard this connection reached.
    #[track_caller]
    pub fn statistics(&mut self, request_id: u64) -> Vec<(String, u64)> {
        match self.call(request_id, &Request::GetStatistics).expect_ok(request_id) {
            Response::Statistics(stats) => stats.iter().map(|s| (s.name.to_owned(), s.value)).collect(),
            other => panic!("expected statistics, got {other:?}"),
        }
    }

    /// The underlying socket, for tests that shut down one direction.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }
}

/// Looks up counter `name` in a statistics reply.
#[track_caller]
pub fn counter(stats: &[(String, u64)], name: &str) -> u64 {
    stats.iter().find(|(n, _)| n == name).map(|(_, v)| *v).unwrap_or_else(|| panic!("no counter {name}: {stats:?}"))
}
