//! The blocking API, for programs that do not use async Rust.
//!
//! It reads like MCAS's C++ client:
//!
//! ```no_run
//! use ferrite_client::blocking;
//! use ferrite_client::PoolOptions;
//!
//! # fn main() -> ferrite_client::Result<()> {
//! let session = blocking::Session::connect("127.0.0.1:11911")?;
//! let pool = session.create_pool("demo", PoolOptions::default())?;
//! pool.put(b"k", b"v")?;
//! assert_eq!(pool.get(b"k")?, b"v");
//! pool.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! Every call runs the async client on a private Tokio runtime, so there is exactly one protocol
//! implementation. The runtime is a current-thread one: the calling thread drives the socket
//! itself, so a request costs no hand-off to a background thread. Sessions and pools are
//! `Send + Sync`; calls from several threads at once share the connections and are pipelined.
//!
//! Do not call this API from inside an async runtime (it would block that runtime's thread, and
//! Tokio refuses to nest runtimes); use the async [`crate::Session`] there.

use std::future::Future;
use std::sync::Arc;

use ferrite_proto::{
    Attribute, ClusterMap, ClusterNode, ClusterStatus, FindKind, Limits, NodeInfo, PoolHandle, PutFlags,
};

use crate::error::{Error, Result};
use crate::pool::{FindPage, InvokeOptions, InvokePutOptions, InvokeResponse, PoolAttributes, ValueAttributes};
use crate::session::{ClientOptions, PoolInfo, PoolOptions, ShardStatistics};

/// The private runtime, shared by a session and every pool opened through it.
#[derive(Debug)]
struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    fn new() -> Result<Runtime> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| Error::io("starting the client's runtime", error))?;
        Ok(Runtime(Some(runtime)))
    }

    fn block_on<F: Future>(&self, future: F) -> F::Output {
        self.0.as_ref().expect("the runtime is only taken out in Drop").block_on(future)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // A plain drop blocks until tasks finish and panics inside an async context;
        // `shutdown_background` does neither, so dropping a session is always safe.
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// A blocking session with a Ferrite server. See [`crate::Session`] for the semantics of each
/// method.
#[derive(Debug, Clone)]
pub struct Session {
    // Declared before `runtime` so the connections close while the runtime still runs.
    inner: crate::Session,
    runtime: Arc<Runtime>,
}

impl Session {
    /// Connects to the shard at `address` (`host:port`) with default options.
    pub fn connect(address: &str) -> Result<Session> {
        Session::connect_with(address, ClientOptions::default())
    }

    /// Connects with the given options.
    pub fn connect_with(address: &str, options: ClientOptions) -> Result<Session> {
        let runtime = Arc::new(Runtime::new()?);
        let inner = runtime.block_on(crate::Session::connect_with(address, options))?;
        Ok(Session { inner, runtime })
    }

    pub fn shard_count(&self) -> u16 {
        self.inner.shard_count()
    }

    pub fn shard_addresses(&self) -> &[String] {
        self.inner.shard_addresses()
    }

    pub fn limits(&self) -> Limits {
        self.inner.limits()
    }

    pub fn shard_for_pool(&self, name: &str) -> u16 {
        self.inner.shard_for_pool(name)
    }

    pub fn create_pool(&self, name: &str, options: PoolOptions) -> Result<Pool> {
        let pool = self.runtime.block_on(self.inner.create_pool(name, options))?;
        Ok(self.wrap(pool))
    }

    pub fn open_pool(&self, name: &str) -> Result<Pool> {
        let pool = self.runtime.block_on(self.inner.open_pool(name))?;
        Ok(self.wrap(pool))
    }

    pub fn delete_pool(&self, name: &str) -> Result<()> {
        self.runtime.block_on(self.inner.delete_pool(name))
    }

    /// See [`crate::Session::configure_pool`].
    pub fn configure_pool(&self, name: &str, setting: crate::PoolSetting) -> Result<()> {
        self.runtime.block_on(self.inner.configure_pool(name, setting))
    }

    pub fn list_pools(&self) -> Result<Vec<PoolInfo>> {
        self.runtime.block_on(self.inner.list_pools())
    }

    /// See [`crate::Session::pool_info`].
    pub fn pool_info(&self, name: &str) -> Result<Option<PoolInfo>> {
        self.runtime.block_on(self.inner.pool_info(name))
    }

    pub fn statistics(&self) -> Result<Vec<ShardStatistics>> {
        self.runtime.block_on(self.inner.statistics())
    }

    pub fn back_up(&self, dir: &str) -> Result<Vec<crate::ShardBackup>> {
        self.runtime.block_on(self.inner.back_up(dir))
    }

    /// See [`crate::Session::is_cluster`].
    pub fn is_cluster(&self) -> bool {
        self.inner.is_cluster()
    }

    /// See [`crate::Session::cluster_map`].
    pub fn cluster_map(&self) -> Result<ClusterMap> {
        self.runtime.block_on(self.inner.cluster_map())
    }

    /// See [`crate::Session::node_info`].
    pub fn node_info(&self) -> Result<NodeInfo> {
        self.runtime.block_on(self.inner.node_info())
    }

    /// See [`crate::Session::cluster_init`].
    pub fn cluster_init(&self, group: u16, members: &[ClusterNode]) -> Result<()> {
        self.runtime.block_on(self.inner.cluster_init(group, members))
    }

    /// See [`crate::Session::cluster_add_node`].
    pub fn cluster_add_node(&self, group: u16, node: &ClusterNode) -> Result<()> {
        self.runtime.block_on(self.inner.cluster_add_node(group, node))
    }

    /// See [`crate::Session::cluster_remove_node`].
    pub fn cluster_remove_node(&self, group: u16, node_id: u64) -> Result<()> {
        self.runtime.block_on(self.inner.cluster_remove_node(group, node_id))
    }

    /// See [`crate::Session::cluster_transfer_leader`].
    pub fn cluster_transfer_leader(&self, group: u16, to: u64) -> Result<()> {
        self.runtime.block_on(self.inner.cluster_transfer_leader(group, to))
    }

    /// See [`crate::Session::cluster_status`].
    pub fn cluster_status(&self, group: u16) -> Result<ClusterStatus> {
        self.runtime.block_on(self.inner.cluster_status(group))
    }

    /// The async session underneath, for code that mixes both styles.
    pub fn as_async(&self) -> &crate::Session {
        &self.inner
    }

    fn wrap(&self, pool: crate::Pool) -> Pool {
        Pool { inner: pool, runtime: Arc::clone(&self.runtime) }
    }
}

/// A blocking handle to an open pool. See [`crate::Pool`]; like it, the pool is closed on the
/// server by [`Pool::close`] or when the last clone is dropped.
#[derive(Debug, Clone)]
pub struct Pool {
    inner: crate::Pool,
    runtime: Arc<Runtime>,
}

impl Pool {
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    pub fn shard(&self) -> u16 {
        self.inner.shard()
    }

    pub fn handle(&self) -> PoolHandle {
        self.inner.handle()
    }

    pub fn created(&self) -> bool {
        self.inner.created()
    }

    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.runtime.block_on(self.inner.put(key, value))
    }

    pub fn put_with(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>, flags: PutFlags) -> Result<()> {
        self.runtime.block_on(self.inner.put_with(key, value, flags))
    }

    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        self.runtime.block_on(self.inner.get(key))
    }

    /// See [`crate::Pool::get_bytes`].
    pub fn get_bytes(&self, key: impl AsRef<[u8]>) -> Result<bytes::Bytes> {
        self.runtime.block_on(self.inner.get_bytes(key))
    }

    /// See [`crate::Pool::put_direct`].
    pub fn put_direct(&self, key: impl AsRef<[u8]>, value: &[u8]) -> Result<()> {
        self.runtime.block_on(self.inner.put_direct(key, value))
    }

    /// See [`crate::Pool::put_direct_with`].
    pub fn put_direct_with(&self, key: impl AsRef<[u8]>, value: &[u8], flags: PutFlags) -> Result<()> {
        self.runtime.block_on(self.inner.put_direct_with(key, value, flags))
    }

    /// See [`crate::Pool::get_direct`].
    pub fn get_direct(&self, key: impl AsRef<[u8]>) -> Result<Vec<u8>> {
        self.runtime.block_on(self.inner.get_direct(key))
    }

    /// See [`crate::Pool::get_direct_into`].
    pub fn get_direct_into(&self, key: impl AsRef<[u8]>, buffer: &mut [u8]) -> Result<usize> {
        self.runtime.block_on(self.inner.get_direct_into(key, buffer))
    }

    /// See [`crate::Pool::get_direct_into_memory`].
    pub fn get_direct_into_memory(&self, key: impl AsRef<[u8]>, memory: &mut crate::DirectMemory) -> Result<usize> {
        self.runtime.block_on(self.inner.get_direct_into_memory(key, memory))
    }

    /// See [`crate::Pool::get_direct_offset`].
    pub fn get_direct_offset(&self, key: impl AsRef<[u8]>, offset: u64, buffer: &mut [u8]) -> Result<usize> {
        self.runtime.block_on(self.inner.get_direct_offset(key, offset, buffer))
    }

    /// See [`crate::Pool::get_direct_to`].
    pub fn get_direct_to(
        &self,
        key: impl AsRef<[u8]>,
        offset: u64,
        length: Option<u64>,
        sink: impl FnMut(u64, &[u8]) -> std::io::Result<()>,
    ) -> Result<u64> {
        self.runtime.block_on(self.inner.get_direct_to(key, offset, length, sink))
    }

    /// See [`crate::Pool::put_direct_offset`].
    pub fn put_direct_offset(&self, key: impl AsRef<[u8]>, offset: u64, bytes: &[u8]) -> Result<()> {
        self.runtime.block_on(self.inner.put_direct_offset(key, offset, bytes))
    }

    /// See [`crate::Pool::put_direct_offset_with`].
    pub fn put_direct_offset_with(
        &self,
        key: impl AsRef<[u8]>,
        offset: u64,
        bytes: &[u8],
        flags: PutFlags,
    ) -> Result<()> {
        self.runtime.block_on(self.inner.put_direct_offset_with(key, offset, bytes, flags))
    }

    pub fn erase(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.runtime.block_on(self.inner.erase(key))
    }

    pub fn count(&self) -> Result<u64> {
        self.runtime.block_on(self.inner.count())
    }

    pub fn attribute(&self, attribute: Attribute, key: impl AsRef<[u8]>) -> Result<u64> {
        self.runtime.block_on(self.inner.attribute(attribute, key))
    }

    pub fn value_attributes(&self, key: impl AsRef<[u8]>) -> Result<ValueAttributes> {
        self.runtime.block_on(self.inner.value_attributes(key))
    }

    pub fn pool_attributes(&self) -> Result<PoolAttributes> {
        self.runtime.block_on(self.inner.pool_attributes())
    }

    pub fn find(&self, kind: FindKind, pattern: &[u8], after: Option<&[u8]>, limit: u32) -> Result<FindPage> {
        self.runtime.block_on(self.inner.find(kind, pattern, after, limit))
    }

    pub fn find_all(&self, kind: FindKind, pattern: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.runtime.block_on(self.inner.find_all(kind, pattern))
    }

    pub fn invoke(&self, key: &[u8], payload: &[u8], options: InvokeOptions) -> Result<Vec<InvokeResponse>> {
        self.runtime.block_on(self.inner.invoke(key, payload, options))
    }

    pub fn invoke_pool(&self, payload: &[u8], options: InvokeOptions) -> Result<Vec<InvokeResponse>> {
        self.runtime.block_on(self.inner.invoke_pool(payload, options))
    }

    pub fn invoke_put(
        &self,
        key: &[u8],
        value: &[u8],
        payload: &[u8],
        options: InvokePutOptions,
    ) -> Result<Vec<InvokeResponse>> {
        self.runtime.block_on(self.inner.invoke_put(key, value, payload, options))
    }

    pub fn close(self) -> Result<()> {
        let Pool { inner, runtime } = self;
        runtime.block_on(inner.close())
    }

    /// The async pool underneath.
    pub fn as_async(&self) -> &crate::Pool {
        &self.inner
    }
}
