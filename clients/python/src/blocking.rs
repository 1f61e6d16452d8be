//! `ferrite.Session` and `ferrite.Pool`: the blocking API, over `ferrite_client::blocking`.
//!
//! Every call that waits on the network runs inside `Python::detach`, so the GIL is free while it
//! waits: threads sharing one session run their calls at once, and the client pipelines them on
//! the session's connections. Keys and values are read from the caller's objects in place
//! ([`crate::buffer`]); they stay alive and exported for the whole call because the calling frame
//! holds them.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use ferrite_client::blocking;
use ferrite_client::{InvokeOptions, InvokePutOptions};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyType};

use crate::buffer::{Borrowed, Writable};
use crate::errors::{failed, pool_closed, session_closed};
use crate::fill::{fill_blocking, slice_vec};
use crate::types::{self, Attributes, FoundKeys, Limits};

/// A session with a Ferrite server; create it with `ferrite.connect()`.
///
/// Knows every shard from the handshake and opens one connection per shard on first use. Safe to
/// share between threads: their calls are pipelined on the same connections, and every network
/// wait releases the GIL. Closing the session (or leaving its `with` block) closes every pool
/// opened through it.
#[pyclass(module = "ferrite", name = "Session", frozen)]
#[derive(Debug)]
pub(crate) struct Session {
    /// `None` once closed.
    inner: Mutex<Option<blocking::Session>>,
    /// Pools opened through this session that may still be open, to close with it.
    pools: Mutex<Vec<Weak<PoolState>>>,
    limits: Limits,
    shard_addresses: Vec<String>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks cannot leave its data half-changed (each holder
    // swaps or pushes one value), so a poisoned lock is still good.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Session {
    fn session(&self) -> PyResult<blocking::Session> {
        lock(&self.inner).clone().ok_or_else(session_closed)
    }

    /// The `Pool` for a pool the server opened, registered to close with this session; or, if
    /// the session was closed while the pool was being opened, the pool closed again (dropping
    /// the last handle closes it) and `ConnectionClosed`.
    fn adopt(&self, pool: blocking::Pool) -> PyResult<Pool> {
        let state = Arc::new(PoolState {
            name: pool.name().to_owned(),
            pool,
            inline_max: self.limits.inline_max(),
            closed: AtomicBool::new(false),
        });
        let mut pools = lock(&self.pools);
        if lock(&self.inner).is_none() {
            return Err(session_closed());
        }
        pools.retain(|weak| weak.strong_count() > 0);
        pools.push(Arc::downgrade(&state));
        Ok(Pool { state })
    }
}

#[pymethods]
impl Session {
    /// The key and value limits the server announced (see `Limits`).
    #[getter]
    fn limits(&self) -> Limits {
        self.limits
    }

    /// Number of shards on the server.
    #[getter]
    fn shard_count(&self) -> usize {
        self.shard_addresses.len()
    }

    /// The address of every shard, by index, as this client dials them.
    #[getter]
    fn shard_addresses(&self) -> Vec<String> {
        self.shard_addresses.clone()
    }

    /// The shard that owns the pool `name` (computed locally, as the server does).
    fn shard_for_pool(&self, name: &str) -> PyResult<u16> {
        Ok(self.session()?.shard_for_pool(name))
    }

    /// Creates the pool `name`, or opens it if it exists (unless `create_only`, which raises
    /// `PoolExists` instead); `Pool.created` tells which happened.
    ///
    /// `size_bytes` is the capacity in bytes (key bytes + value bytes + 64 per pair; 64 MiB when
    /// not given), fixed at creation; `expected_objects` sizes the pool's hash table (1024 when
    /// not given); `durability` ("sync" or "async") is the default of the pool's writes;
    /// `plugins` names the pool's chain of Active Data Objects, in the order they run; `indexed`
    /// keeps an ordered index so `find` walks keys in order. `size` and `expected_count` are the
    /// deprecated names of the sizes (they warn).
    #[pyo3(signature = (name, size_bytes = None, expected_objects = None, create_only = false, durability = "sync", plugins = None, indexed = false, *, size = None, expected_count = None))]
    #[allow(clippy::too_many_arguments)] // One per keyword argument.
    fn create_pool(
        &self,
        py: Python<'_>,
        name: &str,
        size_bytes: Option<u64>,
        expected_objects: Option<u64>,
        create_only: bool,
        durability: &str,
        plugins: Option<Vec<String>>,
        indexed: bool,
        size: Option<u64>,
        expected_count: Option<u64>,
    ) -> PyResult<Pool> {
        let options = types::pool_options(
            py,
            size_bytes,
            expected_objects,
            create_only,
            durability,
            plugins,
            indexed,
            (size, expected_count),
        )?;
        let session = self.session()?;
        let pool = py.detach(|| session.create_pool(name, options)).map_err(failed)?;
        self.adopt(pool)
    }

    /// Opens the existing pool `name`; raises `PoolNotFound` if there is none.
    fn open_pool(&self, py: Python<'_>, name: &str) -> PyResult<Pool> {
        let session = self.session()?;
        let pool = py.detach(|| session.open_pool(name)).map_err(failed)?;
        self.adopt(pool)
    }

    /// Deletes the pool `name` and all its pairs. Raises `PoolInUse` while any session (this one
    /// included) has it open, and `PoolNotFound` if there is none.
    fn delete_pool(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let session = self.session()?;
        py.detach(|| session.delete_pool(name)).map_err(failed)
    }

    /// Adds a secondary index to the existing pool `name` (`add_index=True`), which `find`
    /// then searches in key order and `kind="next"` needs, or drops it (`remove_index=True`).
    /// The server builds the index while it serves; the call returns once it is whole.
    #[pyo3(signature = (name, *, add_index = false, remove_index = false))]
    fn configure_pool(&self, py: Python<'_>, name: &str, add_index: bool, remove_index: bool) -> PyResult<()> {
        let setting = types::pool_setting(add_index, remove_index)?;
        let session = self.session()?;
        py.detach(|| session.configure_pool(name, setting)).map_err(failed)
    }

    /// Every pool of every shard, as `PoolInfo` objects.
    fn pools(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let session = self.session()?;
        let pools = py.detach(|| session.list_pools()).map_err(failed)?;
        types::pool_infos(py, pools)
    }

    /// The counters of every shard: one dict per shard, `{"shard": index, "puts": n, ...}`.
    fn stats(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let session = self.session()?;
        let stats = py.detach(|| session.statistics()).map_err(failed)?;
        types::statistics(py, stats)
    }

    /// Backs up every shard into `directory` on the server's file system (an absolute path;
    /// shard N writes `directory/shard-N`) while the server keeps serving. One dict per shard:
    /// `{"shard", "lsn", "files", "bytes"}`.
    fn backup(&self, py: Python<'_>, directory: &str) -> PyResult<Py<PyAny>> {
        let session = self.session()?;
        let reports = py.detach(|| session.back_up(directory)).map_err(failed)?;
        types::backups(py, reports)
    }

    /// The cluster map, fetched anew: `{"version", "cluster_id", "single_server", "nodes",
    /// "groups"}`, each node `{"node_id", "native", "resp", "peer"}` and each group `{"group",
    /// "leader", "term", "voters", "learners"}`. A single server is one node (id 0) leading every
    /// group. In a cluster the session sends each pool's requests to its group's leader by itself.
    fn cluster_map(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let session = self.session()?;
        let map = py.detach(|| session.cluster_map()).map_err(failed)?;
        types::cluster_map(py, map)
    }

    /// Closes every pool opened through this session, then the session's connections. Further
    /// calls raise `ConnectionClosed`; closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let Some(session) = lock(&self.inner).take() else {
            return Ok(());
        };
        let pools: Vec<Arc<PoolState>> = lock(&self.pools).drain(..).filter_map(|weak| weak.upgrade()).collect();
        let result = py.detach(|| {
            let mut first_error = None;
            for pool in &pools {
                if let Err(error) = pool.close() {
                    first_error.get_or_insert(error);
                }
            }
            drop(session);
            first_error.map_or(Ok(()), Err)
        });
        result.map_err(failed)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (_exc_type = None, _exc_value = None, _traceback = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyType>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let state = if lock(&self.inner).is_some() { "open" } else { "closed" };
        Ok(format!("<ferrite.Session {} shards={}>", state, types::python_repr(py, &self.shard_addresses)?))
    }
}

/// A pool's open, shared by the Python `Pool` and its session (which closes it on `close`).
#[derive(Debug)]
struct PoolState {
    name: String,
    pool: blocking::Pool,
    /// The server's inline value limit, which decides how `get_into` reads.
    inline_max: usize,
    closed: AtomicBool,
}

impl PoolState {
    fn close(&self) -> ferrite_client::Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Closing a clone closes the open they share.
        self.pool.clone().close()
    }
}

/// An open pool; get one from `Session.create_pool()` or `Session.open_pool()`.
///
/// Keys and values are `bytes`, `str` (stored as UTF-8) or any object supporting the buffer
/// protocol (`bytearray`, `memoryview`, numpy arrays), read in place without a copy. Safe to share
/// between threads. The pool closes on `close()`, at the end of its `with` block, when its session
/// closes, or when it is garbage collected.
#[pyclass(module = "ferrite", name = "Pool", frozen)]
#[derive(Debug)]
pub(crate) struct Pool {
    state: Arc<PoolState>,
}

impl Pool {
    fn pool(&self) -> PyResult<&blocking::Pool> {
        if self.state.closed.load(Ordering::Acquire) {
            return Err(pool_closed(&self.state.name));
        }
        Ok(&self.state.pool)
    }
}

#[pymethods]
impl Pool {
    /// The pool's name.
    #[getter]
    fn name(&self) -> &str {
        &self.state.name
    }

    /// The shard that holds the pool.
    #[getter]
    fn shard(&self) -> u16 {
        self.state.pool.shard()
    }

    /// Whether the call that returned this pool created it (False: it existed and was opened).
    #[getter]
    fn created(&self) -> bool {
        self.state.pool.created()
    }

    /// Whether the pool has been closed.
    #[getter]
    fn closed(&self) -> bool {
        self.state.closed.load(Ordering::Acquire)
    }

    /// Stores `value` under `key`, replacing any previous value.
    ///
    /// `create_only` raises `KeyExists` instead of replacing; `update_only` raises `KeyNotFound`
    /// instead of inserting; `durability` ("sync" or "async") overrides the pool's default for
    /// this write. A value longer than 2 MiB travels as a direct transfer by itself, in pipelined
    /// pieces read straight from `value` and made the key's value at once when the last has
    /// arrived, up to the server's `limits.direct_value_bytes_max` (1 GiB by default): a longer
    /// one raises `ValueTooLarge`, one the pool has no room for `PoolFull`.
    #[pyo3(signature = (key, value, *, create_only = false, update_only = false, durability = None))]
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        create_only: bool,
        update_only: bool,
        durability: Option<&str>,
    ) -> PyResult<()> {
        let flags = types::put_flags(create_only, update_only, durability)?;
        let key = Borrowed::from_object(key, "key")?;
        let value = Borrowed::from_object(value, "value")?;
        let pool = self.pool()?;
        py.detach(|| pool.put_with(key.as_slice(), value.as_slice(), flags)).map_err(failed)
    }

    /// The value stored under `key`, as bytes; raises `KeyNotFound` if there is none. A value too
    /// long to come inline (past `session.limits.value_bytes_max`) is read with a direct read by
    /// itself; `get_into` reads one without making a bytes object.
    fn get<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
        let key = Borrowed::from_object(key, "key")?;
        let pool = self.pool()?;
        let value = py.detach(|| pool.get_bytes(key.as_slice())).map_err(failed)?;
        Ok(PyBytes::new(py, &value))
    }

    /// Writes the value stored under `key` into `buffer` (any writable, C-contiguous
    /// buffer-protocol object: bytearray, numpy array, memoryview) from its start, and returns its
    /// length; the rest of the buffer is left as it was. No bytes object is made. Raises
    /// `BufferTooSmall` (an `InvalidArgument`, whose `needed` is the value's length) if the buffer
    /// is shorter than the value, writing nothing, and `KeyNotFound` if there is none.
    ///
    /// A buffer larger than `session.limits.value_bytes_max` is filled with a direct read, piece
    /// by piece straight into it, which is how a value past the inline limit is read without a
    /// second copy; that takes one round trip more than an inline get, so size buffers to the
    /// values they take. An empty buffer only asks for the value's length.
    ///
    /// With `offset`, reads a slice instead: the value's bytes from `offset`, as many as the
    /// buffer holds, into its start, and returns how many it read (fewer at the value's end, 0 at
    /// its very end). An offset past the end raises `InvalidArgument`.
    #[pyo3(signature = (key, buffer, *, offset = None))]
    fn get_into(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        buffer: &Bound<'_, PyAny>,
        offset: Option<u64>,
    ) -> PyResult<usize> {
        let mut target = Writable::from_object(buffer)?;
        // A copy: the key may be a view of the very buffer the call writes.
        let key = Borrowed::from_object(key, "key")?.as_slice().to_vec();
        let pool = self.pool()?;
        let inline_max = self.state.inline_max;
        let have = target.len();
        let buffer = target.as_mut_slice();
        match offset {
            Some(offset) => py.detach(|| pool.get_direct_offset(&key, offset, buffer)).map_err(failed),
            None => py.detach(|| fill_blocking(pool, inline_max, &key, buffer)).map_err(failed)?.into_length(have),
        }
    }

    /// `length` bytes of the value stored under `key` from byte `offset` (all the rest with
    /// `length=None`), as bytes: fewer at the value's end, none at its very end. A direct read,
    /// so a slice of a value of any length costs no more than the slice. Raises `KeyNotFound`,
    /// and `InvalidArgument` for an offset past the value's end.
    #[pyo3(signature = (key, offset, length = None))]
    fn get_offset<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        offset: u64,
        length: Option<u64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let key = Borrowed::from_object(key, "key")?;
        let pool = self.pool()?;
        let slice = py
            .detach(|| {
                let mut slice = slice_vec(length);
                pool.get_direct_to(key.as_slice(), offset, length, |_, bytes| {
                    slice.extend_from_slice(bytes);
                    Ok(())
                })?;
                Ok(slice)
            })
            .map_err(failed)?;
        Ok(PyBytes::new(py, &slice))
    }

    /// Writes `data` at byte `offset` inside the value stored under `key`, which keeps its
    /// length. Each piece of up to `session.limits.value_bytes_max` bytes is written atomically
    /// and durably like a put; longer data goes as several pieces, applied in order.
    /// `durability` ("sync" or "async") overrides the pool's default. Raises `KeyNotFound`, and
    /// `InvalidArgument` for a range that passes the value's end.
    #[pyo3(signature = (key, offset, data, *, durability = None))]
    fn put_offset(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        offset: u64,
        data: &Bound<'_, PyAny>,
        durability: Option<&str>,
    ) -> PyResult<()> {
        let flags = types::put_flags(false, false, durability)?;
        let key = Borrowed::from_object(key, "key")?;
        let data = Borrowed::from_object(data, "data")?;
        let pool = self.pool()?;
        py.detach(|| pool.put_direct_offset_with(key.as_slice(), offset, data.as_slice(), flags)).map_err(failed)
    }

    /// Removes `key` and its value; raises `KeyNotFound` if there is none.
    fn erase(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        let key = Borrowed::from_object(key, "key")?;
        let pool = self.pool()?;
        py.detach(|| pool.erase(key.as_slice())).map_err(failed)
    }

    /// Number of key-value pairs in the pool.
    fn count(&self, py: Python<'_>) -> PyResult<u64> {
        let pool = self.pool()?;
        py.detach(|| pool.count()).map_err(failed)
    }

    /// With a key: that value's `ValueAttributes` (length, crc32, write_time_ns), raising
    /// `KeyNotFound` if there is none. Without: the pool's `PoolAttributes` (objects, size, used).
    /// One round trip either way.
    #[pyo3(signature = (key = None))]
    fn attributes(&self, py: Python<'_>, key: Option<&Bound<'_, PyAny>>) -> PyResult<Py<PyAny>> {
        let key = key.map(|key| Borrowed::from_object(key, "key")).transpose()?;
        let pool = self.pool()?;
        let attributes = py
            .detach(|| match &key {
                Some(key) => pool.value_attributes(key.as_slice()).map(Attributes::Value),
                None => pool.pool_attributes().map(Attributes::Pool),
            })
            .map_err(failed)?;
        attributes.into_py(py)
    }

    /// The keys matching `pattern`, sorted, each once: up to `limit` of them, or all with
    /// `limit=None`. `kind` is "prefix" (keys starting with the pattern), "exact", "regex" (Rust
    /// regex syntax, matched anywhere in the key), "glob" (Redis-style, matched whole) or "next"
    /// (the keys after the pattern in key order; needs a secondary index).
    /// Searches page by page (1,024 keys a round trip).
    #[pyo3(signature = (pattern, kind = "prefix", limit = None))]
    fn find(&self, py: Python<'_>, pattern: &Bound<'_, PyAny>, kind: &str, limit: Option<i64>) -> PyResult<Py<PyAny>> {
        let kind = types::find_kind(kind)?;
        let limit = types::find_limit(limit)?;
        let pattern = Borrowed::from_object(pattern, "pattern")?;
        let pool = self.pool()?;
        let keys = py
            .detach(|| {
                let mut found = FoundKeys::new(limit);
                let mut after: Option<Vec<u8>> = None;
                loop {
                    let page = pool.find(kind, pattern.as_slice(), after.as_deref(), found.page_limit())?;
                    match found.take(page) {
                        Some(next) => after = Some(next),
                        None => return Ok(found.finish()),
                    }
                }
            })
            .map_err(failed)?;
        types::byte_strings(py, keys)
    }

    /// Runs the pool's plugin chain on `key`'s value with `payload` and returns the chain's
    /// answer as a list of `(layer, bytes)`, layer being the plugin's index in the chain.
    ///
    /// `create_size` creates an absent key with a zeroed value of that many bytes first
    /// (otherwise an absent key raises `KeyNotFound`); `read_only` runs the plugins under a read
    /// lock; `fire_and_forget` returns `[]` as soon as the server accepts the call. Raises
    /// `AdoFailed` or `AdoTimeout` when a plugin fails or overruns (the pool is then as before),
    /// and `InvalidArgument` on a pool without plugins.
    #[pyo3(signature = (key, payload, *, create_size = None, read_only = false, fire_and_forget = false))]
    fn invoke(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        payload: &Bound<'_, PyAny>,
        create_size: Option<u64>,
        read_only: bool,
        fire_and_forget: bool,
    ) -> PyResult<Py<PyAny>> {
        let key = Borrowed::from_object(key, "key")?;
        let payload = Borrowed::from_object(payload, "payload")?;
        let pool = self.pool()?;
        let options = InvokeOptions { create_size, read_only, fire_and_forget };
        let answer = py.detach(|| pool.invoke(key.as_slice(), payload.as_slice(), options)).map_err(failed)?;
        types::invoked(py, answer)
    }

    /// Runs the pool's plugin chain on the pool itself rather than on a key (the plugins decide
    /// what that means, e.g. a listing). Answers like `invoke`.
    #[pyo3(signature = (payload, *, read_only = false, fire_and_forget = false))]
    fn invoke_pool(
        &self,
        py: Python<'_>,
        payload: &Bound<'_, PyAny>,
        read_only: bool,
        fire_and_forget: bool,
    ) -> PyResult<Py<PyAny>> {
        let payload = Borrowed::from_object(payload, "payload")?;
        let pool = self.pool()?;
        let options = InvokeOptions { create_size: None, read_only, fire_and_forget };
        let answer = py.detach(|| pool.invoke_pool(payload.as_slice(), options)).map_err(failed)?;
        types::invoked(py, answer)
    }

    /// Stores `value` under `key`, then runs the pool's plugin chain on it with `payload`, in one
    /// request under one lock of the key; a failed call leaves the pool as before, the put
    /// included. `no_overwrite` keeps an existing value (the plugins run on it); `detached` puts
    /// the value in unattached pool memory whose location the plugins are told. Answers like
    /// `invoke`.
    #[pyo3(signature = (key, value, payload, *, no_overwrite = false, detached = false, fire_and_forget = false))]
    #[allow(clippy::too_many_arguments)] // One per keyword argument.
    fn invoke_put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        payload: &Bound<'_, PyAny>,
        no_overwrite: bool,
        detached: bool,
        fire_and_forget: bool,
    ) -> PyResult<Py<PyAny>> {
        let key = Borrowed::from_object(key, "key")?;
        let value = Borrowed::from_object(value, "value")?;
        let payload = Borrowed::from_object(payload, "payload")?;
        let pool = self.pool()?;
        let options = InvokePutOptions { no_overwrite, detached, fire_and_forget };
        let answer = py
            .detach(|| pool.invoke_put(key.as_slice(), value.as_slice(), payload.as_slice(), options))
            .map_err(failed)?;
        types::invoked(py, answer)
    }

    /// Closes the pool on the server; further calls raise `PoolNotOpen`. Closing twice does
    /// nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let state = &self.state;
        py.detach(|| state.close()).map_err(failed)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (_exc_type = None, _exc_value = None, _traceback = None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyType>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let state = if self.closed() { "closed" } else { "open" };
        Ok(format!(
            "<ferrite.Pool {} shard={} {}>",
            types::python_repr(py, &self.state.name)?,
            self.state.pool.shard(),
            state
        ))
    }
}

/// Connects to the Ferrite server at `address` ("host:port" of any shard) and returns a Session.
///
/// `client_name` shows in the server's logs; `connect_timeout` (seconds, 10 when not given) bounds
/// connecting plus the handshake, per shard connection. `tls_ca_file` (a PEM file with the CA of
/// the server's certificate) turns on TLS; `tls_client_cert_file` and `tls_client_key_file` add a
/// client certificate for servers that require one. `user` and `password` authenticate on a
/// server with users (a wrong one raises `AuthenticationFailed`). Raises `ConnectionFailed` if
/// the server cannot be reached. `timeout`, `tls_ca`, `tls_cert` and `tls_key` are the deprecated
/// names of `connect_timeout` and the TLS files (they warn).
#[pyfunction]
#[pyo3(signature = (address, *, client_name = None, connect_timeout = None, tls_ca_file = None, tls_client_cert_file = None, tls_client_key_file = None, user = None, password = None, timeout = None, tls_ca = None, tls_cert = None, tls_key = None))]
#[allow(clippy::too_many_arguments)] // One per keyword argument.
fn connect(
    py: Python<'_>,
    address: &str,
    client_name: Option<String>,
    connect_timeout: Option<f64>,
    tls_ca_file: Option<PathBuf>,
    tls_client_cert_file: Option<PathBuf>,
    tls_client_key_file: Option<PathBuf>,
    user: Option<String>,
    password: Option<String>,
    timeout: Option<f64>,
    tls_ca: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
) -> PyResult<Session> {
    let connect_timeout = types::renamed(py, ("connect_timeout", connect_timeout), ("timeout", timeout))?;
    let tls_ca_file = types::renamed(py, ("tls_ca_file", tls_ca_file), ("tls_ca", tls_ca))?;
    let tls_client_cert_file =
        types::renamed(py, ("tls_client_cert_file", tls_client_cert_file), ("tls_cert", tls_cert))?;
    let tls_client_key_file = types::renamed(py, ("tls_client_key_file", tls_client_key_file), ("tls_key", tls_key))?;
    let options = types::client_options(
        client_name,
        connect_timeout,
        tls_ca_file,
        tls_client_cert_file,
        tls_client_key_file,
        user,
        password,
    )?;
    let session = py.detach(|| blocking::Session::connect_with(address, options)).map_err(failed)?;
    Ok(Session {
        limits: session.limits().into(),
        shard_addresses: session.shard_addresses().to_vec(),
        inner: Mutex::new(Some(session)),
        pools: Mutex::new(Vec::new()),
    })
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Session>()?;
    module.add_class::<Pool>()?;
    module.add_function(wrap_pyfunction!(connect, module)?)?;
    Ok(())
}
