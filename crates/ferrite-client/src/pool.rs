//! An open pool and its key-value operations.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use ferrite_proto::{Attribute, ErrorCode, FindKind, InvokeFlags, PoolHandle, PutFlags, Request, FIND_KEYS_MAX};

use crate::cluster::{Attempt, Redirects, Resend};
use crate::connection::{Connection, PendingReply};
use crate::error::{Error, Result};
use crate::reply::Reply;
use crate::session::Session;

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

/// How [`Pool::invoke`] runs the pool's plugins on a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InvokeOptions {
    /// Create an absent key with a zeroed value of this many bytes (MCAS create-on-demand);
    /// `None` fails with `key_not_found` instead. Not for [`Pool::invoke_pool`], which has no key.
    pub create_size: Option<u64>,
    /// Run the plugins under a read lock: they may not write, and other readers of the key need
    /// not wait for them.
    pub read_only: bool,
    /// Return as soon as the server accepts the call, with no responses; the plugins' answer is
    /// dropped, and their failure goes unreported.
    pub fire_and_forget: bool,
}

/// How [`Pool::invoke_put`] stores the value before running the pool's plugins on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InvokePutOptions {
    /// Keep an existing value instead of replacing it; the plugins run on the existing one.
    pub no_overwrite: bool,
    /// Put the value in unattached pool memory, whose location the plugins are told, instead of
    /// making it the key's value.
    pub detached: bool,
    /// Return as soon as the server accepts the call, with no responses.
    pub fire_and_forget: bool,
}

/// One buffer of a plugin chain's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvokeResponse {
    /// Index in the pool's plugin chain of the plugin that produced the buffer.
    pub layer: u16,
    pub data: Bytes,
}

/// A pool open in a [`Session`](crate::Session).
///
/// Holds its shard's connection directly, so key-value calls go straight to the wire without
/// consulting the session. Cheap to clone; clones share one open. The pool is closed on the
/// server when [`Pool::close`] is called or the last clone is dropped, whichever comes first:
/// every open must be matched by one close, or the pool could never be deleted while this
/// connection lives.
///
/// In a cluster the pool follows its group's leader: a request the node refuses with
/// `not_leader` reopens the pool on the leader and goes there (see `docs/clients.md`,
/// "Clusters").
#[derive(Debug, Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

/// Where a pool is open: the connection and the server's handle on it.
#[derive(Debug, Clone)]
pub(crate) struct Bound {
    pub(crate) connection: Connection,
    pub(crate) handle: PoolHandle,
}

impl Bound {
    /// Whether both name the same open: the same handle on the same connection.
    fn is(&self, other: &Bound) -> bool {
        self.handle == other.handle && self.connection.is(&other.connection)
    }
}

#[derive(Debug)]
struct PoolInner {
    /// A std mutex held only to copy or swap the binding: in a cluster a redirected request
    /// moves it to the group's new leader.
    bound: Mutex<Bound>,
    name: String,
    shard: u16,
    created: bool,
    /// Set by an explicit close, so dropping the last clone does not close a second time.
    closed: AtomicBool,
    /// In a cluster: the session whose routes a redirected request follows. `None` on a single
    /// server, where nothing moves.
    session: Option<Session>,
}

const BOUND_LOCK: &str = "the pool's binding lock is held only to copy or swap it";

impl Drop for PoolInner {
    fn drop(&mut self) {
        if !*self.closed.get_mut() {
            let bound = self.bound.get_mut().expect(BOUND_LOCK);
            // Queued without waiting: Drop cannot await, and nobody needs the reply.
            bound.connection.send_detached(&Request::ClosePool { pool: bound.handle });
        }
    }
}

impl Pool {
    pub(crate) fn new(bound: Bound, name: &str, shard: u16, created: bool, session: Option<Session>) -> Pool {
        Pool {
            inner: Arc::new(PoolInner {
                bound: Mutex::new(bound),
                name: name.to_owned(),
                shard,
                created,
                closed: AtomicBool::new(false),
                session,
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

    /// The server's handle for this open; meaningful only on this pool's connection (in a
    /// cluster it changes when the pool follows its group's leader).
    pub fn handle(&self) -> PoolHandle {
        self.bound().handle
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
    ///
    /// A value longer than [`crate::DIRECT_THRESHOLD_BYTES`] (or than the server's inline limit)
    /// goes as a direct put ([`Pool::put_direct_with`]), up to the server's direct limit.
    pub async fn put_with(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, flags: PutFlags) -> Result<()> {
        let value = value.as_ref();
        let inline_max = (self.connection().limits().value_bytes_max as usize).min(crate::DIRECT_THRESHOLD_BYTES);
        if value.len() > inline_max {
            return self.put_direct_with(key, value, flags).await;
        }
        let key = key.as_ref();
        match self.call(Resend::Never, |pool| Request::Put { pool, flags, key, value }).await? {
            Reply::Stored => Ok(()),
            other => Err(other.unexpected("stored")),
        }
    }

    /// The value stored under `key`. Fails with `key_not_found` ([`Error::is_key_not_found`]).
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        self.get_bytes(key).await.map(|value| value.to_vec())
    }

    /// The value stored under `key` as the response frame's own bytes, without copying them out
    /// (what the bindings use to fill a caller's buffer with one copy). Fails like [`Pool::get`].
    /// A value too long to come inline is read with a direct read ([`Pool::get_direct`]).
    pub async fn get_bytes(&self, key: impl AsRef<[u8]>) -> Result<bytes::Bytes> {
        let key = key.as_ref();
        match self.call(Resend::Once, |pool| Request::Get { pool, key }).await {
            Ok(Reply::Value(value)) => Ok(value),
            Ok(other) => Err(other.unexpected("value")),
            Err(error) if error.code() == Some(ferrite_proto::ErrorCode::ValueTooLarge) => {
                self.get_direct(key).await.map(bytes::Bytes::from)
            }
            Err(error) => Err(error),
        }
    }

    /// Removes `key` and its value. Fails with `key_not_found` if absent.
    pub async fn erase(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let key = key.as_ref();
        match self.call(Resend::Never, |pool| Request::Erase { pool, key }).await? {
            Reply::Erased => Ok(()),
            other => Err(other.unexpected("erased")),
        }
    }

    /// Number of key-value pairs in the pool.
    pub async fn count(&self) -> Result<u64> {
        match self.call(Resend::Once, |pool| Request::Count { pool }).await? {
            Reply::Count(count) => Ok(count),
            other => Err(other.unexpected("count")),
        }
    }

    /// One attribute of `key`'s value, or of the pool (then `key` is ignored; pass `b""`).
    pub async fn attribute(&self, attribute: Attribute, key: impl AsRef<[u8]>) -> Result<u64> {
        let key = key.as_ref();
        self.routed(Resend::Once, |bound| async move {
            send_attribute(&bound, attribute, key).await?.await_attribute().await
        })
        .await
    }

    /// Length, CRC-32 and write time of `key`'s value: three requests pipelined into one round
    /// trip.
    pub async fn value_attributes(&self, key: impl AsRef<[u8]>) -> Result<ValueAttributes> {
        let key = key.as_ref();
        let (length, crc32, write_time_ns) = self
            .routed(Resend::Once, |bound| async move {
                let length = send_attribute(&bound, Attribute::ValueLength, key).await?;
                let crc32 = send_attribute(&bound, Attribute::Crc32, key).await?;
                let write_time = send_attribute(&bound, Attribute::WriteTime, key).await?;
                Ok((
                    length.await_attribute().await?,
                    crc32.await_attribute().await?,
                    write_time.await_attribute().await?,
                ))
            })
            .await?;
        let crc32 = u32::try_from(crc32)
            .map_err(|_| Error::UnexpectedResponse(format!("crc32 attribute {crc32:#x} does not fit 32 bits")))?;
        Ok(ValueAttributes { length, crc32, write_time_ns })
    }

    /// Object count, capacity and used bytes of the pool: three requests pipelined into one
    /// round trip.
    pub async fn pool_attributes(&self) -> Result<PoolAttributes> {
        self.routed(Resend::Once, |bound| async move {
            let objects = send_attribute(&bound, Attribute::ObjectCount, b"").await?;
            let size = send_attribute(&bound, Attribute::PoolSize, b"").await?;
            let used = send_attribute(&bound, Attribute::PoolUsed, b"").await?;
            Ok(PoolAttributes {
                objects: objects.await_attribute().await?,
                size_bytes: size.await_attribute().await?,
                used_bytes: used.await_attribute().await?,
            })
        })
        .await
    }

    /// One page of a search of the pool: up to `limit` (1 to 1,024) keys matching `pattern` as
    /// `kind` says, from `after` (`None` to start, else the previous page's [`FindPage::next`]).
    /// Resume with [`FindPage::next`] until it is `None`; a page may hold few keys, even none,
    /// before the search is done, because the server bounds the work of each call. A pool created
    /// with [`crate::PoolOptions::indexed`] is searched in key order and returns each key once;
    /// any other pool is searched by walking its hash table, in hash order, where a key may come
    /// back twice (after the table grew) and a page may pass `limit` by the keys of one bucket.
    pub async fn find(&self, kind: FindKind, pattern: &[u8], after: Option<&[u8]>, limit: u32) -> Result<FindPage> {
        match self.call(Resend::Once, |pool| Request::Find { pool, kind, pattern, after, limit }).await? {
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

    /// Runs the pool's plugin chain on `key`'s value with `payload` (MCAS `invoke_ado`) and
    /// returns the chain's buffers in chain order. Fails with `key_not_found` for an absent key
    /// unless [`InvokeOptions::create_size`] is set, `invalid_argument` on a pool without
    /// plugins, and [`Error::is_ado_failed`] / [`Error::is_ado_timeout`] when a plugin fails or
    /// overruns its deadline (the pool is then as before the call).
    pub async fn invoke(&self, key: &[u8], payload: &[u8], options: InvokeOptions) -> Result<Vec<InvokeResponse>> {
        let mut flags = InvokeFlags::NONE;
        if options.create_size.is_some() {
            flags = flags.union(InvokeFlags::CREATE_ON_DEMAND);
        }
        if options.read_only {
            flags = flags.union(InvokeFlags::READ_ONLY);
        }
        if options.fire_and_forget {
            flags = flags.union(InvokeFlags::FIRE_AND_FORGET);
        }
        let value_size = options.create_size.unwrap_or(0);
        self.invoked(|pool| Request::InvokeAdo { pool, flags, key, payload, value_size }).await
    }

    /// Runs the pool's plugin chain on the pool itself rather than on a key: [`Pool::invoke`]
    /// with an empty key. There is no value to create, so `create_size` must be `None`.
    pub async fn invoke_pool(&self, payload: &[u8], options: InvokeOptions) -> Result<Vec<InvokeResponse>> {
        self.invoke(b"", payload, options).await
    }

    /// Stores `value` under `key`, then runs the pool's plugin chain on it with `payload` (MCAS
    /// `invoke_put_ado`), in one request under one lock of the key. Fails like [`Pool::invoke`];
    /// a failed call leaves the pool as before it, the put included.
    pub async fn invoke_put(
        &self,
        key: &[u8],
        value: &[u8],
        payload: &[u8],
        options: InvokePutOptions,
    ) -> Result<Vec<InvokeResponse>> {
        let mut flags = InvokeFlags::NONE;
        if options.no_overwrite {
            flags = flags.union(InvokeFlags::NO_OVERWRITE);
        }
        if options.detached {
            flags = flags.union(InvokeFlags::DETACHED);
        }
        if options.fire_and_forget {
            flags = flags.union(InvokeFlags::FIRE_AND_FORGET);
        }
        self.invoked(|pool| Request::InvokePutAdo { pool, flags, key, value, payload }).await
    }

    async fn invoked<'r>(&self, request: impl Fn(PoolHandle) -> Request<'r>) -> Result<Vec<InvokeResponse>> {
        match self.call(Resend::Never, request).await? {
            Reply::Invoked(buffers) => Ok(buffers),
            other => Err(other.unexpected("invoked")),
        }
    }

    /// Closes the pool on the server. Clones of this pool become unusable (the server answers
    /// them with `pool_not_open`); closing twice is a no-op.
    pub async fn close(self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let bound = self.bound();
        match bound.connection.call(&Request::ClosePool { pool: bound.handle }).await {
            Ok(Reply::PoolClosed) => Ok(()),
            Ok(other) => Err(other.unexpected("pool_closed")),
            // In a cluster, a node that no longer leads the pool's group serves it no more: the
            // open ends with the connection, and there is nothing to follow to the leader.
            Err(error) if error.is_not_leader() => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Sends the request `request` makes of the pool's handle and waits for its reply, following
    /// the group's leader in a cluster ([`Pool::routed`]).
    async fn call<'r>(&self, resend: Resend, request: impl Fn(PoolHandle) -> Request<'r>) -> Result<Reply> {
        self.routed(resend, |bound| {
            let request = request(bound.handle);
            async move { bound.connection.call(&request).await }
        })
        .await
    }

    /// Runs `attempt` on where the pool is open. In a cluster, a `not_leader` answer (or, for a
    /// read, a connection that broke in flight) reopens the pool on its group's leader and runs
    /// `attempt` there, within the session's redirect budget; a connection found closed before
    /// anything was sent reopens the pool first.
    pub(crate) async fn routed<T, F, Fut>(&self, resend: Resend, mut attempt: F) -> Result<T>
    where
        F: FnMut(Bound) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let Some(session) = &self.inner.session else { return attempt(self.bound()).await };
        let mut redirects = Redirects::new(resend);
        let mut bound = self.bound();
        if bound.connection.is_closed() {
            bound = self.rebind(session, &mut redirects, &bound).await?;
        }
        loop {
            match attempt(bound.clone()).await {
                // Another request of this pool moved it meanwhile and closed the open this one
                // used: it goes where the pool is now.
                Err(error) if error.code() == Some(ErrorCode::PoolNotOpen) && !self.bound().is(&bound) => {}
                Err(error) => {
                    redirects.after(session, self.inner.shard, error, Attempt::Sent(&bound.connection)).await?;
                }
                done => return done,
            }
            bound = self.rebind(session, &mut redirects, &bound).await?;
        }
    }

    /// Opens the pool on its group's leader and makes that its binding in place of `failed`,
    /// closing that open. If another request of the pool moved it meanwhile, the pool stays
    /// where that one put it (and a second open made here is closed again), so concurrent
    /// requests refused together end on one open.
    async fn rebind(&self, session: &Session, redirects: &mut Redirects, failed: &Bound) -> Result<Bound> {
        let current = self.bound();
        if !current.is(failed) {
            return Ok(current);
        }
        let name = self.inner.name.as_str();
        let fresh = session
            .routed_within(self.inner.shard, redirects, |connection| async move {
                match connection.call(&Request::OpenPool { name }).await? {
                    Reply::PoolOpened { pool } => Ok(Bound { connection, handle: pool }),
                    other => Err(other.unexpected("pool_opened")),
                }
            })
            .await?;
        let (kept, dropped) = {
            let mut slot = self.inner.bound.lock().expect(BOUND_LOCK);
            if slot.is(failed) {
                let old = std::mem::replace(&mut *slot, fresh.clone());
                (fresh, old)
            } else {
                (slot.clone(), fresh)
            }
        };
        dropped.connection.send_detached(&Request::ClosePool { pool: dropped.handle });
        Ok(kept)
    }

    /// Where the pool is open now.
    pub(crate) fn bound(&self) -> Bound {
        self.inner.bound.lock().expect(BOUND_LOCK).clone()
    }

    /// The pool's shard connection, for its limits (`direct.rs`).
    pub(crate) fn connection(&self) -> Connection {
        self.bound().connection
    }
}

async fn send_attribute(bound: &Bound, attribute: Attribute, key: &[u8]) -> Result<PendingAttribute> {
    let request = Request::GetAttribute { pool: bound.handle, attribute, key };
    Ok(PendingAttribute(bound.connection.send(&request).await?))
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
