//! Just enough of memcached's text protocol for the benchmark: `set`, `get` and `delete`,
//! pipelined on one connection.
//!
//! memcached answers a connection's requests in order, so a pipelined client needs no request
//! ids: one task writes requests (every request queued since its last write, in one write, as
//! `ferrite-client` does), noting each caller's reply slot in a FIFO before the bytes leave; one
//! task reads replies and hands each to the oldest slot. No crate for this: the ones that exist are
//! blocking or pool connections, and the benchmark needs many requests in flight on one.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// Most request bytes one write carries; more queued requests wait for the next write.
const WRITE_BATCH_BYTES_MAX: usize = 256 * 1024;

/// Longest reply line we accept (memcached's are under 300 bytes: `VALUE <key> <flags> <bytes>`
/// with a key of at most 250 bytes).
const REPLY_LINE_BYTES_MAX: usize = 1024;

/// Largest value a reply may announce: memcached's item size ceiling (`-I`) is 1 GiB.
const VALUE_BYTES_MAX: usize = 1 << 30;

/// What memcached answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Stored,
    NotStored,
    /// A `get` hit, with the value's length (the bytes themselves are read and dropped).
    Value(usize),
    /// A `get` miss: `END` with no value before it.
    Miss,
    Deleted,
    NotFound,
    /// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...`.
    Error(String),
}

/// Why a call got no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed(pub String);

type Slot = oneshot::Sender<Result<Reply, Closed>>;

/// Reply slots of requests written and not yet answered, oldest first.
#[derive(Debug, Default)]
struct Waiting {
    slots: VecDeque<Slot>,
    /// Set once either task has stopped: no reply will come for anything queued after that.
    closed: Option<String>,
}

impl Waiting {
    fn close(&mut self, why: &str) {
        self.closed.get_or_insert_with(|| why.to_owned());
        for slot in self.slots.drain(..) {
            let _ = slot.send(Err(Closed(why.to_owned())));
        }
    }
}

/// One pipelined connection to memcached. Cheap to clone; clones share the connection.
#[derive(Debug, Clone)]
pub struct Connection {
    requests: mpsc::UnboundedSender<(Vec<u8>, Slot)>,
}

impl Connection {
    pub async fn connect(address: &str) -> std::io::Result<Connection> {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        let (reader, writer) = stream.into_split();
        let waiting = Arc::new(Mutex::new(Waiting::default()));
        let (requests, queue) = mpsc::unbounded_channel();
        tokio::spawn(write_requests(queue, writer, Arc::clone(&waiting)));
        tokio::spawn(read_replies(reader, waiting));
        Ok(Connection { requests })
    }

    /// Sends one request (complete, with its `\r\n`s) and waits for its reply.
    async fn call(&self, request: Vec<u8>) -> Result<Reply, Closed> {
        let (slot, reply) = oneshot::channel();
        self.requests.send((request, slot)).map_err(|_| Closed("connection closed".into()))?;
        reply.await.map_err(|_| Closed("connection closed".into()))?
    }

    pub async fn set(&self, key: &[u8], value: &[u8]) -> Result<Reply, Closed> {
        let mut request = Vec::with_capacity(key.len() + value.len() + 32);
        request.extend_from_slice(b"set ");
        request.extend_from_slice(key);
        request.extend_from_slice(format!(" 0 0 {}\r\n", value.len()).as_bytes());
        request.extend_from_slice(value);
        request.extend_from_slice(b"\r\n");
        self.call(request).await
    }

    pub async fn get(&self, key: &[u8]) -> Result<Reply, Closed> {
        self.call([b"get ", key, b"\r\n"].concat()).await
    }

    pub async fn delete(&self, key: &[u8]) -> Result<Reply, Closed> {
        self.call([b"delete ", key, b"\r\n"].concat()).await
    }
}

/// Writes queued requests, many per write, noting each one's reply slot before its bytes leave
/// (so the reader can never see a reply before its slot).
async fn write_requests(
    mut queue: mpsc::UnboundedReceiver<(Vec<u8>, Slot)>,
    mut writer: OwnedWriteHalf,
    waiting: Arc<Mutex<Waiting>>,
) {
    let mut batch = Vec::with_capacity(64 * 1024);
    while let Some(first) = queue.recv().await {
        // Let the other workers that are about to send do so, so they share this write.
        tokio::task::yield_now().await;
        let mut next = Some(first);
        {
            let mut waiting = lock(&waiting);
            while let Some((request, slot)) = next.take() {
                if let Some(why) = &waiting.closed {
                    let _ = slot.send(Err(Closed(why.clone())));
                } else {
                    batch.extend_from_slice(&request);
                    waiting.slots.push_back(slot);
                }
                if batch.len() < WRITE_BATCH_BYTES_MAX {
                    next = queue.try_recv().ok();
                }
            }
        }
        if batch.is_empty() {
            continue;
        }
        if let Err(error) = writer.write_all(&batch).await {
            lock(&waiting).close(&format!("writing to memcached: {error}"));
            return;
        }
        batch.clear();
    }
}

/// Reads replies in order and hands each to the oldest waiting slot.
async fn read_replies(reader: OwnedReadHalf, waiting: Arc<Mutex<Waiting>>) {
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let why = loop {
        match read_reply(&mut reader).await {
            Ok(reply) => {
                let slot = lock(&waiting).slots.pop_front();
                match slot {
                    // The caller may have given up waiting; nothing to do then.
                    Some(slot) => drop(slot.send(Ok(reply))),
                    None => break "memcached sent a reply nobody asked for".to_owned(),
                }
            }
            Err(why) => break why,
        }
    };
    lock(&waiting).close(&why);
}

async fn read_reply(reader: &mut BufReader<OwnedReadHalf>) -> Result<Reply, String> {
    let line = read_line(reader).await?;
    let reply = match line.as_str() {
        "STORED" => Reply::Stored,
        "NOT_STORED" => Reply::NotStored,
        "END" => Reply::Miss,
        "DELETED" => Reply::Deleted,
        "NOT_FOUND" => Reply::NotFound,
        error if error == "ERROR" || error.starts_with("CLIENT_ERROR") || error.starts_with("SERVER_ERROR") => {
            Reply::Error(error.to_owned())
        }
        value if value.starts_with("VALUE ") => {
            // VALUE <key> <flags> <bytes> [<cas>]
            let len: usize = value
                .split(' ')
                .nth(3)
                .and_then(|bytes| bytes.parse().ok())
                .filter(|&len| len <= VALUE_BYTES_MAX)
                .ok_or_else(|| format!("memcached sent a malformed value line {value:?}"))?;
            let mut skip = (&mut *reader).take(len as u64 + 2);
            let copied = tokio::io::copy(&mut skip, &mut tokio::io::sink()).await.map_err(|e| e.to_string())?;
            if copied != len as u64 + 2 {
                return Err("memcached closed the connection in the middle of a value".into());
            }
            match read_line(reader).await?.as_str() {
                "END" => Reply::Value(len),
                other => return Err(format!("memcached sent {other:?} after a value, not END")),
            }
        }
        other => return Err(format!("memcached sent an unexpected reply {other:?}")),
    };
    Ok(reply)
}

/// One reply line, without its `\r\n`.
async fn read_line(reader: &mut BufReader<OwnedReadHalf>) -> Result<String, String> {
    let mut line = Vec::with_capacity(64);
    let mut limited = (&mut *reader).take(REPLY_LINE_BYTES_MAX as u64);
    let read = limited.read_until(b'\n', &mut line).await.map_err(|e| format!("reading from memcached: {e}"))?;
    if read == 0 {
        return Err("memcached closed the connection".into());
    }
    if !line.ends_with(b"\r\n") {
        return Err(format!(
            "memcached sent a reply line that is too long or cut: {:?}",
            String::from_utf8_lossy(&line)
        ));
    }
    line.truncate(line.len() - 2);
    String::from_utf8(line).map_err(|_| "memcached sent a reply line that is not UTF-8".into())
}

fn lock(waiting: &Mutex<Waiting>) -> std::sync::MutexGuard<'_, Waiting> {
    // Neither task panics while holding the lock; if one did, the queue is still consistent.
    waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A scripted memcached: reads requests, and answers each with the next canned reply, all of
    /// them at once after the last request, so the client must match replies to callers in order.
    async fn scripted(replies: &'static [&'static [u8]], requests: usize) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a free port");
        let address = listener.local_addr().expect("a bound address").to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept the client");
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while seen.iter().filter(|&&b| b == b'\n').count() < requests {
                let n = socket.read(&mut buf).await.expect("read requests");
                assert!(n > 0, "client closed early");
                seen.extend_from_slice(&buf[..n]);
            }
            socket.write_all(&replies.concat()).await.expect("write replies");
            // Keep the socket open until the client is done.
            let _ = socket.read(&mut buf).await;
        });
        address
    }

    #[tokio::test]
    async fn pipelined_replies_reach_their_callers_in_order() {
        // Lines the client sends: set (2 lines), get, get, delete = 5.
        let address =
            scripted(&[b"STORED\r\n", b"VALUE k 0 5\r\nhello\r\nEND\r\n", b"END\r\n", b"NOT_FOUND\r\n"], 5).await;
        let connection = Connection::connect(&address).await.expect("connect");
        let (set, hit, miss, delete) = tokio::join!(
            connection.set(b"k", b"hello"),
            connection.get(b"k"),
            connection.get(b"missing"),
            connection.delete(b"other"),
        );
        assert_eq!(set, Ok(Reply::Stored));
        assert_eq!(hit, Ok(Reply::Value(5)));
        assert_eq!(miss, Ok(Reply::Miss));
        assert_eq!(delete, Ok(Reply::NotFound));
    }

    #[tokio::test]
    async fn a_closed_connection_fails_every_caller() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a free port");
        let address = listener.local_addr().expect("a bound address").to_string();
        tokio::spawn(async move {
            let (socket, _) = listener.accept().await.expect("accept the client");
            drop(socket);
        });
        let connection = Connection::connect(&address).await.expect("connect");
        let reply = connection.get(b"k").await;
        assert!(reply.is_err(), "{reply:?}");
        // And later calls fail at once rather than waiting forever.
        assert!(connection.get(b"k").await.is_err());
    }
}
