//! `ferrite.aio`'s `Session` and `Pool`: the async client, each call an asyncio future.
//!
//! Calls run as Tokio tasks on the shared runtime ([`crate::bridge`]); a session's calls share
//! one connection per shard, where the client batches them into few writes and matches replies by
//! request id, so `asyncio.gather` of a thousand calls keeps a thousand requests in flight on one
//! connection. Keys are copied when the call is made (they are small); values and `get_into`
//! buffers are held as buffer-protocol exports until the call completes, never copied.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use ferrite_client::{Error, InvokeOptions, InvokePutOptions};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::bridge::Bridge;
use crate::buffer::{Owned, Writable};
use crate::errors::{pool_closed, session_closed, to_py};
use crate::fill::{fill_async, slice_vec, Filled};
use crate::types::{self, Attributes, FoundKeys, Limits};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Holders swap or push one value: a panic cannot leave the data half-changed.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// `Ok(None)` for Python.
fn none(py: Python<'_>, result: Result<(), Error>) -> PyResult<Py<PyAny>> {
    result.map_err(|error| to_py(py, error))?;
    Ok(py.None())
}

/// An async session with a Ferrite server; create it with `await ferrite.aio.connect()`.
///
/// Every method returns an awaitable. Calls made without awaiting each in turn (with
/// `asyncio.gather`, or from many tasks) are pipelined on the session's connections. Use it from
/// the event loop it was connected on. Closing the session (or leaving its `async with` block)
/// closes every pool opened through it.
#[pyclass(module = "ferrite.aio", name = "Session", frozen)]
#[derive(Debug)]
pub(crate) struct AsyncSession {
    inner: Mutex<Option<ferrite_client::Session>>,
    pools: Mutex<Vec<Weak<PoolState>>>,
    bridge: Arc<Bridge>,
    limits: Limits,
    shard_addresses: Vec<String>,
}

impl AsyncSession {
    fn session(&self) -> PyResult<ferrite_client::Session> {
        lock(&self.inner).clone().ok_or_else(session_closed)
    }

    /// The `Pool` for a pool the server opened, registered to close with this session; or, if
    /// the session was closed while the pool was being opened, the pool closed again (dropping
    /// the last handle closes it) and `ConnectionClosed`.
    fn adopt(&self, pool: ferrite_client::Pool) -> PyResult<AsyncPool> {
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
        Ok(AsyncPool { state, bridge: Arc::clone(&self.bridge) })
    }
}

#[pymethods]
impl AsyncSession {
    /// The key and value limits the server announced (see `ferrite.Limits`).
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

    /// Creates the pool `name`, or opens it if it exists; see `ferrite.Session.create_pool`.
    #[pyo3(signature = (name, size_bytes = None, expected_objects = None, create_only = false, durability = "sync", plugins = None, indexed = false, *, size = None, expected_count = None))]
    #[allow(clippy::too_many_arguments)] // One per keyword argument.
    fn create_pool<'py>(
        slf: &Bound<'py, Self>,
        name: String,
        size_bytes: Option<u64>,
        expected_objects: Option<u64>,
        create_only: bool,
        durability: &str,
        plugins: Option<Vec<String>>,
        indexed: bool,
        size: Option<u64>,
        expected_count: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
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
        let this = slf.get();
        let session = this.session()?;
        let owner = slf.clone().unbind();
        this.bridge.spawn(py, async move { session.create_pool(&name, options).await }, move |py, result| {
            let pool = result.map_err(|error| to_py(py, error))?;
            Ok(Py::new(py, owner.get().adopt(pool)?)?.into_any())
        })
    }

    /// Opens the existing pool `name`; raises `PoolNotFound` if there is none.
    fn open_pool<'py>(slf: &Bound<'py, Self>, name: String) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let this = slf.get();
        let session = this.session()?;
        let owner = slf.clone().unbind();
        this.bridge.spawn(py, async move { session.open_pool(&name).await }, move |py, result| {
            let pool = result.map_err(|error| to_py(py, error))?;
            Ok(Py::new(py, owner.get().adopt(pool)?)?.into_any())
        })
    }

    /// Deletes the pool `name`; see `ferrite.Session.delete_pool`.
    fn delete_pool<'py>(&self, py: Python<'py>, name: String) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session()?;
        self.bridge.spawn(py, async move { session.delete_pool(&name).await }, none)
    }

    /// Adds or drops the pool's secondary index; see `ferrite.Session.configure_pool`.
    #[pyo3(signature = (name, *, add_index = false, remove_index = false))]
    fn configure_pool<'py>(
        &self,
        py: Python<'py>,
        name: String,
        add_index: bool,
        remove_index: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let setting = types::pool_setting(add_index, remove_index)?;
        let session = self.session()?;
        self.bridge.spawn(py, async move { session.configure_pool(&name, setting).await }, none)
    }

    /// Every pool of every shard, as `ferrite.PoolInfo` objects.
    fn pools<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session()?;
        self.bridge.spawn(py, async move { session.list_pools().await }, |py, result| {
            types::pool_infos(py, result.map_err(|error| to_py(py, error))?)
        })
    }

    /// The counters of every shard: one dict per shard, `{"shard": index, "puts": n, ...}`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session()?;
        self.bridge.spawn(py, async move { session.statistics().await }, |py, result| {
            types::statistics(py, result.map_err(|error| to_py(py, error))?)
        })
    }

    /// Backs up every shard into `directory` on the server; see `ferrite.Session.backup`.
    fn backup<'py>(&self, py: Python<'py>, directory: String) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session()?;
        self.bridge.spawn(py, async move { session.back_up(&directory).await }, |py, result| {
            types::backups(py, result.map_err(|error| to_py(py, error))?)
        })
    }

    /// The cluster map, fetched anew; see `ferrite.Session.cluster_map`.
    fn cluster_map<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let session = self.session()?;
        self.bridge.spawn(py, async move { session.cluster_map().await }, |py, result| {
            types::cluster_map(py, result.map_err(|error| to_py(py, error))?)
        })
    }

    /// Closes every pool opened through this session, then the session's connections. Further
    /// calls raise `ConnectionClosed`; closing twice does nothing.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let session = lock(&self.inner).take();
        let pools: Vec<Arc<PoolState>> = lock(&self.pools).drain(..).filter_map(|weak| weak.upgrade()).collect();
        self.bridge.spawn(
            py,
            async move {
                let mut first_error = None;
                for pool in &pools {
                    if let Err(error) = pool.close().await {
                        first_error.get_or_insert(error);
                    }
                }
                drop(session);
                first_error.map_or(Ok(()), Err)
            },
            none,
        )
    }

    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.get().bridge.ready(slf.py(), slf.clone().into_any().unbind())
    }

    #[pyo3(signature = (_exc_type = None, _exc_value = None, _traceback = None))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _exc_type: Option<&Bound<'py, PyAny>>,
        _exc_value: Option<&Bound<'py, PyAny>>,
        _traceback: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.close(py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let state = if lock(&self.inner).is_some() { "open" } else { "closed" };
        Ok(format!("<ferrite.aio.Session {} shards={}>", state, types::python_repr(py, &self.shard_addresses)?))
    }
}

#[derive(Debug)]
struct PoolState {
    name: String,
    pool: ferrite_client::Pool,
    /// The server's inline value limit, which decides how `get_into` reads.
    inline_max: usize,
    closed: AtomicBool,
}

impl PoolState {
    async fn close(&self) -> ferrite_client::Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.pool.clone().close().await
    }
}

/// An open pool of a `ferrite.aio.Session`. The same calls as `ferrite.Pool`, each returning an
/// awaitable.
#[pyclass(module = "ferrite.aio", name = "Pool", frozen)]
#[derive(Debug)]
pub(crate) struct AsyncPool {
    state: Arc<PoolState>,
    bridge: Arc<Bridge>,
}

impl AsyncPool {
    /// A handle for a call: a clone of the client's pool, which the call's task owns.
    fn pool(&self) -> PyResult<ferrite_client::Pool> {
        if self.state.closed.load(Ordering::Acquire) {
            return Err(pool_closed(&self.state.name));
        }
        Ok(self.state.pool.clone())
    }
}

#[pymethods]
impl AsyncPool {
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

    /// Whether the call that returned this pool created it.
    #[getter]
    fn created(&self) -> bool {
        self.state.pool.created()
    }

    /// Whether the pool has been closed.
    #[getter]
    fn closed(&self) -> bool {
        self.state.closed.load(Ordering::Acquire)
    }

    /// Stores `value` under `key`; see `ferrite.Pool.put`.
    #[pyo3(signature = (key, value, *, create_only = false, update_only = false, durability = None))]
    fn put<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        create_only: bool,
        update_only: bool,
        durability: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let flags = types::put_flags(create_only, update_only, durability)?;
        let key = Owned::copied(key, "key")?;
        let value = Owned::from_object(value, "value")?;
        let pool = self.pool()?;
        self.bridge.spawn(
            py,
            async move {
                let result = pool.put_with(&key, &value, flags).await;
                (result, value)
            },
            // The value's export is released here, on the loop's thread, under the GIL.
            |py, (result, _value)| none(py, result),
        )
    }

    /// The value stored under `key`, as bytes; raises `KeyNotFound` if there is none.
    fn get<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let key = Owned::copied(key, "key")?;
        let pool = self.pool()?;
        self.bridge.spawn(py, async move { pool.get_bytes(&key).await }, |py, result| {
            let value = result.map_err(|error| to_py(py, error))?;
            Ok(PyBytes::new(py, &value).into_any().unbind())
        })
    }

    /// Writes the value under `key` into `buffer` and returns its length, or with `offset` a
    /// slice of it and how many bytes were read; see `ferrite.Pool.get_into`. The runtime's
    /// threads write into the buffer (a value past the inline limit by a direct read, piece by
    /// piece straight into it): do not touch it until the call completes, which a cancelled
    /// call still does.
    #[pyo3(signature = (key, buffer, *, offset = None))]
    fn get_into<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        buffer: &Bound<'py, PyAny>,
        offset: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut target = Writable::from_object(buffer)?;
        let key = Owned::copied(key, "key")?;
        let pool = self.pool()?;
        let inline_max = self.state.inline_max;
        self.bridge.spawn(
            py,
            async move {
                let result = match offset {
                    Some(offset) => {
                        pool.get_direct_offset(&key, offset, target.as_mut_slice()).await.map(Filled::Value)
                    }
                    None => fill_async(&pool, inline_max, key.as_ref(), target.as_mut_slice()).await,
                };
                (result, target)
            },
            // The buffer's export is released here, on the loop's thread, under the GIL.
            |py, (result, target)| {
                let length = result.map_err(|error| to_py(py, error))?.into_length(target.len())?;
                Ok(length.into_pyobject(py)?.into_any().unbind())
            },
        )
    }

    /// A slice of the value under `key` as bytes; see `ferrite.Pool.get_offset`.
    #[pyo3(signature = (key, offset, length = None))]
    fn get_offset<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        offset: u64,
        length: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = Owned::copied(key, "key")?;
        let pool = self.pool()?;
        self.bridge.spawn(
            py,
            async move {
                let mut slice = slice_vec(length);
                let read = pool.get_direct_to(&key, offset, length, |_, bytes| {
                    slice.extend_from_slice(bytes);
                    Ok(())
                });
                read.await.map(|_| slice)
            },
            |py, result| {
                let slice = result.map_err(|error| to_py(py, error))?;
                Ok(PyBytes::new(py, &slice).into_any().unbind())
            },
        )
    }

    /// Writes `data` at `offset` inside the value under `key`; see `ferrite.Pool.put_offset`.
    #[pyo3(signature = (key, offset, data, *, durability = None))]
    fn put_offset<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        offset: u64,
        data: &Bound<'py, PyAny>,
        durability: Option<&str>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let flags = types::put_flags(false, false, durability)?;
        let key = Owned::copied(key, "key")?;
        let data = Owned::from_object(data, "data")?;
        let pool = self.pool()?;
        self.bridge.spawn(
            py,
            async move {
                let result = pool.put_direct_offset_with(&key, offset, data.as_ref(), flags).await;
                (result, data)
            },
            // The data's export is released here, on the loop's thread, under the GIL.
            |py, (result, _data)| none(py, result),
        )
    }

    /// Removes `key` and its value; raises `KeyNotFound` if there is none.
    fn erase<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let key = Owned::copied(key, "key")?;
        let pool = self.pool()?;
        self.bridge.spawn(py, async move { pool.erase(&key).await }, none)
    }

    /// Number of key-value pairs in the pool.
    fn count<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let pool = self.pool()?;
        self.bridge.spawn(py, async move { pool.count().await }, |py, result| {
            let count = result.map_err(|error| to_py(py, error))?;
            Ok(count.into_pyobject(py)?.into_any().unbind())
        })
    }

    /// A value's `ValueAttributes`, or without a key the pool's `PoolAttributes`; see
    /// `ferrite.Pool.attributes`.
    #[pyo3(signature = (key = None))]
    fn attributes<'py>(&self, py: Python<'py>, key: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let key = key.map(|key| Owned::copied(key, "key")).transpose()?;
        let pool = self.pool()?;
        self.bridge.spawn(
            py,
            async move {
                match key {
                    Some(key) => pool.value_attributes(&key).await.map(Attributes::Value),
                    None => pool.pool_attributes().await.map(Attributes::Pool),
                }
            },
            |py, result| result.map_err(|error| to_py(py, error))?.into_py(py),
        )
    }

    /// The keys matching `pattern`, sorted; see `ferrite.Pool.find`.
    #[pyo3(signature = (pattern, kind = "prefix", limit = None))]
    fn find<'py>(
        &self,
        py: Python<'py>,
        pattern: &Bound<'py, PyAny>,
        kind: &str,
        limit: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kind = types::find_kind(kind)?;
        let limit = types::find_limit(limit)?;
        let pattern = Owned::copied(pattern, "pattern")?;
        let pool = self.pool()?;
        self.bridge.spawn(
            py,
            async move {
                let mut found = FoundKeys::new(limit);
                let mut after: Option<Vec<u8>> = None;
                loop {
                    let page = pool.find(kind, pattern.as_ref(), after.as_deref(), found.page_limit()).await?;
                    match found.take(page) {
                        Some(next) => after = Some(next),
                        None => return Ok(found.finish()),
                    }
                }
            },
            |py, result: Result<Vec<Vec<u8>>, Error>| {
                types::byte_strings(py, result.map_err(|error| to_py(py, error))?)
            },
        )
    }

    /// Runs the pool's plugin chain on `key`'s value; see `ferrite.Pool.invoke`.
    #[pyo3(signature = (key, payload, *, create_size = None, read_only = false, fire_and_forget = false))]
    fn invoke<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        payload: &Bound<'py, PyAny>,
        create_size: Option<u64>,
        read_only: bool,
        fire_and_forget: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = Owned::copied(key, "key")?;
        let payload = Owned::from_object(payload, "payload")?;
        let pool = self.pool()?;
        let options = InvokeOptions { create_size, read_only, fire_and_forget };
        self.bridge.spawn(
            py,
            async move {
                let result = pool.invoke(key.as_ref(), payload.as_ref(), options).await;
                (result, payload)
            },
            |py, (result, _payload)| types::invoked(py, result.map_err(|error| to_py(py, error))?),
        )
    }

    /// Runs the pool's plugin chain on the pool itself; see `ferrite.Pool.invoke_pool`.
    #[pyo3(signature = (payload, *, read_only = false, fire_and_forget = false))]
    fn invoke_pool<'py>(
        &self,
        py: Python<'py>,
        payload: &Bound<'py, PyAny>,
        read_only: bool,
        fire_and_forget: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let payload = Owned::from_object(payload, "payload")?;
        let pool = self.pool()?;
        let options = InvokeOptions { create_size: None, read_only, fire_and_forget };
        self.bridge.spawn(
            py,
            async move {
                let result = pool.invoke_pool(payload.as_ref(), options).await;
                (result, payload)
            },
            |py, (result, _payload)| types::invoked(py, result.map_err(|error| to_py(py, error))?),
        )
    }

    /// Stores `value` under `key` and runs the plugin chain on it; see `ferrite.Pool.invoke_put`.
    #[pyo3(signature = (key, value, payload, *, no_overwrite = false, detached = false, fire_and_forget = false))]
    #[allow(clippy::too_many_arguments)] // One per keyword argument.
    fn invoke_put<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
        payload: &Bound<'py, PyAny>,
        no_overwrite: bool,
        detached: bool,
        fire_and_forget: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = Owned::copied(key, "key")?;
        let value = Owned::from_object(value, "value")?;
        let payload = Owned::from_object(payload, "payload")?;
        let pool = self.pool()?;
        let options = InvokePutOptions { no_overwrite, detached, fire_and_forget };
        self.bridge.spawn(
            py,
            async move {
                let result = pool.invoke_put(key.as_ref(), value.as_ref(), payload.as_ref(), options).await;
                (result, value, payload)
            },
            |py, (result, _value, _payload)| types::invoked(py, result.map_err(|error| to_py(py, error))?),
        )
    }

    /// Closes the pool on the server; further calls raise `PoolNotOpen`.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let state = Arc::clone(&self.state);
        self.bridge.spawn(py, async move { state.close().await }, none)
    }

    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.get().bridge.ready(slf.py(), slf.clone().into_any().unbind())
    }

    #[pyo3(signature = (_exc_type = None, _exc_value = None, _traceback = None))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _exc_type: Option<&Bound<'py, PyAny>>,
        _exc_value: Option<&Bound<'py, PyAny>>,
        _traceback: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.close(py)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let state = if self.closed() { "closed" } else { "open" };
        Ok(format!(
            "<ferrite.aio.Pool {} shard={} {}>",
            types::python_repr(py, &self.state.name)?,
            self.state.pool.shard(),
            state
        ))
    }
}

/// `ferrite.aio.connect` without its Python wrapper: an asyncio future of the session. Must be
/// called from a running event loop, which the session then belongs to.
#[pyfunction]
#[pyo3(signature = (address, *, client_name = None, connect_timeout = None, tls_ca_file = None, tls_client_cert_file = None, tls_client_key_file = None, user = None, password = None))]
#[allow(clippy::too_many_arguments)] // One per keyword argument.
fn _connect_async(
    py: Python<'_>,
    address: String,
    client_name: Option<String>,
    connect_timeout: Option<f64>,
    tls_ca_file: Option<PathBuf>,
    tls_client_cert_file: Option<PathBuf>,
    tls_client_key_file: Option<PathBuf>,
    user: Option<String>,
    password: Option<String>,
) -> PyResult<Bound<'_, PyAny>> {
    let options = types::client_options(
        client_name,
        connect_timeout,
        tls_ca_file,
        tls_client_cert_file,
        tls_client_key_file,
        user,
        password,
    )?;
    let bridge = Bridge::for_running_loop(py)?;
    let owner = Arc::clone(&bridge);
    bridge.spawn(
        py,
        async move { ferrite_client::Session::connect_with(&address, options).await },
        move |py, result| {
            let session = result.map_err(|error| to_py(py, error))?;
            let session = AsyncSession {
                limits: session.limits().into(),
                shard_addresses: session.shard_addresses().to_vec(),
                inner: Mutex::new(Some(session)),
                pools: Mutex::new(Vec::new()),
                bridge: owner,
            };
            Ok(Py::new(py, session)?.into_any())
        },
    )
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add("AsyncSession", py.get_type::<AsyncSession>())?;
    module.add("AsyncPool", py.get_type::<AsyncPool>())?;
    module.add_function(wrap_pyfunction!(_connect_async, module)?)?;
    Ok(())
}
