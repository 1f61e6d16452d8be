//! An open pool and its key-value operations.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ferrite_proto::{Attribute, FindKind, PoolHandle, PutFlags, Request, FIND_KEYS_MAX};

use crate::connection::{Connection, PendingReply};
use crate::error::{Error, Result};
use crate::reply::Reply;

/// What the server knows about one value, fetched in one round trip by
/// [`Pool::value_attributes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueAttributes {
    /// Length of the value in bytes.
    pub length: u64,
    /// CRC-32 (IEEE 802.3, as zlib's `crc32`) of the value, computed by the server so a client
    /// can verify a value without fetching it.
    pub crc32: u32,
    /// When the value was last written, in nanoseconds since the Unix epoch.
    pub write_time_ns: u64,
}

impl ValueAttributes {
    /// [`ValueAttributes::write_time_ns`] as a `SystemTime`.
    pub fn write_time(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_nanos(self.write_time_ns)
    }
}

/// The pool-wide attributes, fetched in one round trip by [`Pool::pool_attributes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolAttributes {
    /// Key-value pairs in the pool.
    pub objects: u64,
    /// Capacity in bytes, fixed at creation.
    pub size_bytes: u64,
    /// Bytes of capacity in use.
    pub used_bytes: u64,
}

/// A pool open in a [`Session`](crate::Session).
///
/// Holds its shard's connection directly, so key-value calls go straight to the wire without
/// consulting the session. Cheap to clone; clones share one open. The pool is closed on the
/// server when [`Pool::close`] is called or the last clone is dropped, whichever comes first:
/// every open must be matched by one close, or the pool could never be deleted while this
/// connection lives.
#[derive(Debug, Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

#[derive(Debug)]
struct PoolInner {
    connection: Connection,
    handle: PoolHandle,
    name: String,
    shard: u16,
    created: bool,
    /// Set by an explicit close, so dropping the last clone does not close a second time.
    closed: AtomicBool,
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        if !*self.closed.get_mut() {
            // Queued without waiting: Drop cannot await, and nobody needs the reply.
            self.connection.send_detached(&Request::ClosePool { pool: self.handle });
        }
    }
}

impl Pool {
    pub(crate) fn new(connection: Connection, handle: PoolHandle, name: &str, shard: u16, created: bool) -> Pool {
        Pool {
            inner: Arc::new(PoolInner {
                connection,
                handle,
                name: name.to_owned(),
                shard,
                created,
                closed: AtomicBool::new(false),
            }),
        }
    }

    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The shard that holds the pool.
    pub fn shard(&self) -> u16 {
        self.inner.shard
    }

    /// The server's handle for this open; meaningful only on this pool's connection.
    pub fn handle(&self) -> PoolHandle {
        self.inner.handle
    }

    /// Whether the call that returned this pool created it (`false`: it existed and was opened).
    pub fn created(&self) -> bool {
        self.inner.created
    }

    /// Stores `value` under `key`, replacing any previous value.
    pub async fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_with(key, value, PutFlags::NONE).await
    }

    /// Stores `value` under `key`. [`PutFlags::CREATE_ONLY`] fails with `key_exists` instead of
    /// replacing; [`PutFlags::UPDATE_ONLY`] fails with `key_not_found` instead of inserting.
    pub async fn put_with(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, flags: PutFlags) -> Result<()> {
        let request = Request::Put { pool: self.inner.handle, flags, key: key.as_ref(), value: value.as_ref() };
        match self.call(&request).await? {
            Reply::Stored => Ok(()),
            other => Err(other.unexpected("stored")),
        }
    }

    /// The value stored under `key`. Fails with `key_not_found` ([`Error::is_key_not_found`]).
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        match self.call(&Request::Get { pool: self.inner.handle, key: key.as_ref() }).await? {
            Reply::Value(value) => Ok(value.to_vec()),
            other => Err(other.unexpected("value")),
        }
    }

    /// Removes `key` and its value. Fails with `key_not_found` if absent.
    pub async fn erase(&self, key: impl AsRef<[u8]>) -> Result<()> {
        match self.call(&Request::Erase { pool: self.inner.handle, key: key.as_ref() }).await? {
            Reply::Erased => Ok(()),
            other => Err(other.unexpected("erased")),
        }
    }

    /// Number of key-value pairs in the pool.
    pub async fn count(&self) -> Result<u64> {
        match self.call(&Request::Count { pool: self.inner.handle }).await? {
            Reply::Count(count) => Ok(count),
            other => Err(other.unexpected("count")),
        }
    }

    /// One attribute of `key`'s value, or of the pool (then `key` is ignored; pass `b""`).
    pub async fn attribute(&self, attribute: Attribute, key: impl AsRef<[u8]>) -> Result<u64> {
        self.send_attribute(attribute, key.as_ref()).await?.await_attribute().await
    }

    /// Length, CRC-32 and write time of `key`'s value: three requests pipelined into one round
    /// trip.
    pub async fn value_attributes(&self, key: impl AsRef<[u8]>) -> Result<ValueAttributes> {
        let key = key.as_ref();
        let length = self.send_attribute(Attribute::ValueLength, key).await?;
        let crc32 = self.send_attribute(Attribute::Crc32, key).await?;
        let write_time = self.send_attribute(Attribute::WriteTime, key).await?;
        let length = length.await_attribute().await?;
        let crc32 = crc32.await_attribute().await?;
        let write_time_ns = write_time.await_attribute().await?;
        let crc32 = u32::try_from(crc32)
            .map_err(|_| Error::UnexpectedResponse(format!("crc32 attribute {crc32:#x} does not fit 32 bits")))?;
        Ok(ValueAttributes { length, crc32, write_time_ns })
    }

    /// Object count, capacity and used bytes of the pool: three requests pipelined into one
    /// round trip.
    pub async fn pool_attributes(&self) -> Result<PoolAttributes> {
        let objects = self.send_attribute(Attribute::ObjectCount, b"").await?;
        let size = self.send_attribute(Attribute::PoolSize, b"").await?;
        let used = self.send_attribute(Attribute::PoolUsed, b"").await?;
        Ok(PoolAttributes {
            objects: objects.await_attribute().await?,
            size_bytes: size.await_attribute().await?,
            used_bytes: used.await_attribute().await?,
        })
    }

    /// One page of a search of the pool: up to `limit` (1 to 1,024) keys matching `pattern` as
    /// `kind` says, from `after` (`None` to start, else the previous page's [`FindPage::next`]).
    /// Resume with [`FindPage::next`] until it is `None`; a page may hold few keys, even none,
    /// before the search is done, because the server bounds the work of each call. A pool created
    /// with [`crate::PoolOptions::indexed`] is searched in key order and returns each key once;
    /// any other pool is searched by walking its hash table, in hash order, where a key may come
    /// back twice (after the table grew) and a page may pass `limit` by the keys of one bucket.
    pub async fn find(&self, kind: FindKind, pattern: &[u8], after: Option<&[u8]>, limit: u32) -> Result<FindPage> {
        let request = Request::Find { pool: self.inner.handle, kind, pattern, after, limit };
        match self.call(&request).await? {
            Reply::Found { keys, next } => {
                Ok(FindPage { keys: keys.iter().map(|k| k.to_vec()).collect(), next: next.map(|k| k.to_vec()) })
            }
            other => Err(other.unexpected("found")),
        }
    }

    /// Every key matching `pattern`, once each, in key order: [`Pool::find`] page after page.
    pub async fn find_all(&self, kind: FindKind, pattern: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut keys = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = self.find(kind, pattern, after.as_deref(), FIND_KEYS_MAX as u32).await?;
            keys.extend(page.keys);
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        // A walk of a pool without an index comes in hash order and may repeat a key.
        keys.sort_unstable();
        keys.dedup();
        Ok(keys)
    }

    /// Closes the pool on the server. Clones of this pool become unusable (the server answers
    /// them with `pool_not_open`); closing twice is a no-op.
    pub async fn close(self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        match self.call(&Request::ClosePool { pool: self.inner.handle }).await? {
            Reply::PoolClosed => Ok(()),
            other => Err(other.unexpected("pool_closed")),
        }
    }

    async fn call(&self, request: &Request<'_>) -> Result<Reply> {
        self.inner.connection.call(request).await
    }

    async fn send_attribute(&self, attribute: Attribute, key: &[u8]) -> Result<PendingAttribute> {
        let request = Request::GetAttribute { pool: self.inner.handle, attribute, key };
        Ok(PendingAttribute(self.inner.connection.send(&request).await?))
    }
}

/// One page of [`Pool::find`] results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindPage {
    pub keys: Vec<Vec<u8>>,
    /// Pass as `after` to continue the search; `None` when no further key can match.
    pub next: Option<Vec<u8>>,
}

/// An attribute request in flight.
struct PendingAttribute(PendingReply);

impl PendingAttribute {
    async fn await_attribute(self) -> Result<u64> {
        match self.0.wait().await? {
            Reply::Attribute(value) => Ok(value),
            other => Err(other.unexpected("attribute")),
        }
    }
}
