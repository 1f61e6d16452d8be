//! The small value classes both APIs return, and the parsing of options both APIs take.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use ferrite_client::{
    ClientOptions, Durability, FindKind, FindPage, InvokeResponse, Limits as ClientLimits,
    PoolAttributes as ClientPoolAttributes, PoolInfo as ClientPoolInfo, PoolOptions, ShardBackup, ShardStatistics,
    TlsOptions, UserCredentials, ValueAttributes as ClientValueAttributes, FIND_KEYS_MAX,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use pyo3::IntoPyObjectExt;

use crate::errors::invalid_argument;

/// The key and value limits the server announced. A key beyond `key_bytes_max` fails before it
/// is sent, with the error the server would give (`KeyTooLarge`).
///
/// `value_bytes_max` is the largest value that travels inline, in one frame (2 MiB on a default
/// server); it does not bound what may be stored. Longer values travel as direct transfers by
/// themselves: `put` sends a value past 2 MiB in pipelined pieces, and `get` and `get_into` read a
/// value too long to come inline the same way, up to the server's
/// `limits.direct_value_bytes_max` (1 GiB by default; a longer put raises `ValueTooLarge`).
#[pyclass(module = "ferrite", frozen, get_all)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Largest key, in bytes.
    key_bytes_max: u32,
    /// Largest value carried inline, in bytes; longer ones travel as direct transfers.
    value_bytes_max: u32,
}

impl Limits {
    /// The largest value an inline get answers with, which decides how `get_into` reads.
    pub(crate) fn inline_max(&self) -> usize {
        self.value_bytes_max as usize
    }
}

#[pymethods]
impl Limits {
    fn __repr__(&self) -> String {
        format!("Limits(key_bytes_max={}, value_bytes_max={})", self.key_bytes_max, self.value_bytes_max)
    }
}

impl From<ClientLimits> for Limits {
    fn from(limits: ClientLimits) -> Limits {
        Limits { key_bytes_max: limits.key_bytes_max, value_bytes_max: limits.value_bytes_max }
    }
}

/// One pool as `Session.pools()` lists it.
#[pyclass(module = "ferrite", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct PoolInfo {
    /// The pool's name.
    name: String,
    /// The shard that holds the pool.
    shard: u16,
    /// Key-value pairs in the pool.
    objects: u64,
    /// Capacity in bytes, fixed at creation.
    size_bytes: u64,
    /// Bytes of the capacity in use.
    used_bytes: u64,
    /// Opens held on the pool across all sessions; a pool with opens cannot be deleted.
    open_count: u32,
    /// The pool's chain of Active Data Object plugins, in the order they run.
    plugins: Vec<String>,
    /// Whether the pool has a whole secondary index (created with `indexed=True`, or given one
    /// by `configure_pool(add_index=True)`), which `find` searches in key order.
    indexed: bool,
    /// The durability of the pool's writes that choose none: "sync" or "async".
    durability: &'static str,
    /// Server memory the pool takes, in bytes, by part: table_buckets (a count), table_bytes,
    /// slab_bytes, large_bytes, other_bytes, index_bytes.
    memory: Py<PyDict>,
    /// All of the pool's memory in use, in bytes.
    memory_bytes: u64,
    /// memory_bytes over objects (None for an empty pool): what sizing for more pairs costs.
    bytes_per_key: Option<f64>,
}

#[pymethods]
impl PoolInfo {
    /// Deprecated name of `size_bytes`.
    #[getter]
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        deprecated(py, "size", "size_bytes").map(|()| self.size_bytes)
    }

    /// Deprecated name of `used_bytes`.
    #[getter]
    fn used(&self, py: Python<'_>) -> PyResult<u64> {
        deprecated(py, "used", "used_bytes").map(|()| self.used_bytes)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "PoolInfo(name={}, shard={}, objects={}, size_bytes={}, used_bytes={}, open_count={}, plugins={}, \
             indexed={}, durability={})",
            python_repr(py, &self.name)?,
            self.shard,
            self.objects,
            self.size_bytes,
            self.used_bytes,
            self.open_count,
            python_repr(py, &self.plugins)?,
            if self.indexed { "True" } else { "False" },
            python_repr(py, self.durability)?
        ))
    }
}

/// What Python's `repr()` says of `value`.
pub(crate) fn python_repr<'py, T>(py: Python<'py>, value: T) -> PyResult<String>
where
    T: IntoPyObject<'py>,
{
    Ok(value.into_bound_py_any(py)?.repr()?.to_string())
}

pub(crate) fn pool_infos(py: Python<'_>, pools: Vec<ClientPoolInfo>) -> PyResult<Py<PyAny>> {
    let list = PyList::empty(py);
    for info in pools {
        let memory = PyDict::new(py);
        memory.set_item("table_buckets", info.memory.table_buckets)?;
        memory.set_item("table_bytes", info.memory.table_bytes)?;
        memory.set_item("slab_bytes", info.memory.slab_bytes)?;
        memory.set_item("large_bytes", info.memory.large_bytes)?;
        memory.set_item("other_bytes", info.memory.other_bytes)?;
        memory.set_item("index_bytes", info.memory.index_bytes)?;
        let bytes_per_key = info.bytes_per_key();
        list.append(PoolInfo {
            memory_bytes: info.memory.total_bytes(),
            bytes_per_key,
            name: info.name,
            shard: info.shard,
            objects: info.objects,
            size_bytes: info.size_bytes,
            used_bytes: info.used_bytes,
            open_count: info.open_count,
            plugins: info.plugins,
            indexed: info.indexed,
            durability: info.durability.name(),
            memory: memory.unbind(),
        })?;
    }
    Ok(list.into_any().unbind())
}

/// Length, CRC-32 and write time of one value (`Pool.attributes(key)`).
#[pyclass(module = "ferrite", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct ValueAttributes {
    /// Length of the value in bytes.
    length: u64,
    /// CRC-32 of the value (IEEE, as zlib.crc32), computed by the server.
    crc32: u32,
    /// When the value was last written, in nanoseconds since the Unix epoch.
    write_time_ns: u64,
}

#[pymethods]
impl ValueAttributes {
    /// write_time_ns in seconds since the Unix epoch, as time.time() counts.
    #[getter]
    fn write_time(&self) -> f64 {
        self.write_time_ns as f64 / 1e9
    }

    fn __repr__(&self) -> String {
        format!(
            "ValueAttributes(length={}, crc32={:#010x}, write_time_ns={})",
            self.length, self.crc32, self.write_time_ns
        )
    }
}

impl From<ClientValueAttributes> for ValueAttributes {
    fn from(a: ClientValueAttributes) -> ValueAttributes {
        ValueAttributes { length: a.length, crc32: a.crc32, write_time_ns: a.write_time_ns }
    }
}

/// Object count, capacity and use of a pool (`Pool.attributes()`).
#[pyclass(module = "ferrite", frozen, get_all)]
#[derive(Debug)]
pub(crate) struct PoolAttributes {
    /// Key-value pairs in the pool.
    objects: u64,
    /// Capacity in bytes.
    size_bytes: u64,
    /// Bytes of the capacity in use.
    used_bytes: u64,
}

#[pymethods]
impl PoolAttributes {
    /// Deprecated name of `size_bytes`.
    #[getter]
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        deprecated(py, "size", "size_bytes").map(|()| self.size_bytes)
    }

    /// Deprecated name of `used_bytes`.
    #[getter]
    fn used(&self, py: Python<'_>) -> PyResult<u64> {
        deprecated(py, "used", "used_bytes").map(|()| self.used_bytes)
    }

    fn __repr__(&self) -> String {
        format!(
            "PoolAttributes(objects={}, size_bytes={}, used_bytes={})",
            self.objects, self.size_bytes, self.used_bytes
        )
    }
}

impl From<ClientPoolAttributes> for PoolAttributes {
    fn from(a: ClientPoolAttributes) -> PoolAttributes {
        PoolAttributes { objects: a.objects, size_bytes: a.size_bytes, used_bytes: a.used_bytes }
    }
}

/// Warns, as a `DeprecationWarning` pointing at the caller's line, that `old` is the name an
/// option or attribute had before it took the one every client uses, `new`.
fn deprecated(py: Python<'_>, old: &str, new: &str) -> PyResult<()> {
    let message =
        std::ffi::CString::new(format!("{old} is deprecated: use {new}")).expect("option names hold no NUL byte");
    PyErr::warn(py, &py.get_type::<pyo3::exceptions::PyDeprecationWarning>(), &message, 1)
}

/// A renamed keyword argument's value: given under its name, or under its old name (with a
/// `DeprecationWarning`: programs written before the rename keep working); both at once is an
/// error.
pub(crate) fn renamed<T>(py: Python<'_>, new: (&str, Option<T>), old: (&str, Option<T>)) -> PyResult<Option<T>> {
    match (new, old) {
        ((name, Some(_)), (old_name, Some(_))) => {
            Err(invalid_argument(format!("give one of {name} and {old_name}, its deprecated name")))
        }
        ((name, None), (old_name, Some(value))) => {
            deprecated(py, old_name, name)?;
            Ok(Some(value))
        }
        ((_, value), (_, None)) => Ok(value),
    }
}

/// `Pool.attributes()`'s answer: a value's attributes or the pool's.
pub(crate) enum Attributes {
    Value(ClientValueAttributes),
    Pool(ClientPoolAttributes),
}

impl Attributes {
    pub(crate) fn into_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(match self {
            Attributes::Value(a) => Py::new(py, ValueAttributes::from(a))?.into_any(),
            Attributes::Pool(a) => Py::new(py, PoolAttributes::from(a))?.into_any(),
        })
    }
}

/// `Session.stats()`: one dict per shard, `{"shard": index, counter: value, ...}`.
pub(crate) fn statistics(py: Python<'_>, shards: Vec<ShardStatistics>) -> PyResult<Py<PyAny>> {
    let list = PyList::empty(py);
    for shard in shards {
        let dict = PyDict::new(py);
        dict.set_item("shard", shard.shard)?;
        for (name, value) in shard.counters {
            dict.set_item(name, value)?;
        }
        list.append(dict)?;
    }
    Ok(list.into_any().unbind())
}

/// `Session.cluster_map()`: a dict of the map, its nodes and its groups (by shard index).
pub(crate) fn cluster_map(py: Python<'_>, map: ferrite_client::ClusterMap) -> PyResult<Py<PyAny>> {
    let dict = PyDict::new(py);
    dict.set_item("version", map.version)?;
    dict.set_item("cluster_id", &map.cluster_id)?;
    dict.set_item("single_server", map.is_single_server())?;
    let nodes = PyList::empty(py);
    for node in map.nodes {
        let entry = PyDict::new(py);
        entry.set_item("node_id", node.node_id)?;
        entry.set_item("native", node.native)?;
        entry.set_item("resp", node.resp)?;
        entry.set_item("peer", node.peer)?;
        nodes.append(entry)?;
    }
    dict.set_item("nodes", nodes)?;
    let groups = PyList::empty(py);
    for (index, group) in map.groups.into_iter().enumerate() {
        let entry = PyDict::new(py);
        entry.set_item("group", index)?;
        entry.set_item("leader", group.leader)?;
        entry.set_item("term", group.term)?;
        entry.set_item("voters", group.voters)?;
        entry.set_item("learners", group.learners)?;
        groups.append(entry)?;
    }
    dict.set_item("groups", groups)?;
    Ok(dict.into_any().unbind())
}

/// `Session.backup()`: one dict per shard.
pub(crate) fn backups(py: Python<'_>, shards: Vec<ShardBackup>) -> PyResult<Py<PyAny>> {
    let list = PyList::empty(py);
    for shard in shards {
        let dict = PyDict::new(py);
        dict.set_item("shard", shard.shard)?;
        dict.set_item("lsn", shard.lsn)?;
        dict.set_item("files", shard.files)?;
        dict.set_item("bytes", shard.bytes)?;
        list.append(dict)?;
    }
    Ok(list.into_any().unbind())
}

/// An invocation's buffers as a list of `(layer, bytes)`.
pub(crate) fn invoked(py: Python<'_>, buffers: Vec<InvokeResponse>) -> PyResult<Py<PyAny>> {
    let list = PyList::empty(py);
    for buffer in buffers {
        list.append(PyTuple::new(
            py,
            [buffer.layer.into_pyobject(py)?.into_any(), PyBytes::new(py, &buffer.data).into_any()],
        )?)?;
    }
    Ok(list.into_any().unbind())
}

/// A list of `bytes`.
pub(crate) fn byte_strings(py: Python<'_>, items: Vec<Vec<u8>>) -> PyResult<Py<PyAny>> {
    let list = PyList::empty(py);
    for item in items {
        list.append(PyBytes::new(py, &item))?;
    }
    Ok(list.into_any().unbind())
}

pub(crate) fn durability(name: &str) -> PyResult<Durability> {
    name.parse::<Durability>().map_err(invalid_argument)
}

/// The setting `configure_pool`'s keyword arguments name: exactly one of them.
pub(crate) fn pool_setting(add_index: bool, remove_index: bool) -> PyResult<ferrite_client::PoolSetting> {
    match (add_index, remove_index) {
        (true, false) => Ok(ferrite_client::PoolSetting::AddIndex),
        (false, true) => Ok(ferrite_client::PoolSetting::RemoveIndex),
        _ => Err(crate::errors::invalid_argument(
            "configure_pool takes exactly one of add_index=True, remove_index=True",
        )),
    }
}

pub(crate) fn find_kind(name: &str) -> PyResult<FindKind> {
    FindKind::ALL.into_iter().find(|kind| kind.name() == name).ok_or_else(|| {
        let names: Vec<&str> = FindKind::ALL.iter().map(|kind| kind.name()).collect();
        invalid_argument(format!("unknown find kind {name:?} (expected one of {})", names.join(", ")))
    })
}

/// `put`'s flags from its keyword arguments.
pub(crate) fn put_flags(
    create_only: bool,
    update_only: bool,
    durability_name: Option<&str>,
) -> PyResult<ferrite_client::PutFlags> {
    use ferrite_client::PutFlags;
    if create_only && update_only {
        return Err(invalid_argument("create_only and update_only exclude each other"));
    }
    let mut flags = PutFlags::NONE;
    if create_only {
        flags = PutFlags::CREATE_ONLY;
    }
    if update_only {
        flags = PutFlags::UPDATE_ONLY;
    }
    if let Some(name) = durability_name {
        flags = flags.with_durability(durability(name)?);
    }
    Ok(flags)
}

/// The options of `create_pool`, checked: the sizes under their names or their deprecated ones
/// (`size`, `expected_count`), `None` when not given.
#[allow(clippy::too_many_arguments)] // One per keyword argument of `create_pool`.
pub(crate) fn pool_options(
    py: Python<'_>,
    size_bytes: Option<u64>,
    expected_objects: Option<u64>,
    create_only: bool,
    durability_name: &str,
    plugins: Option<Vec<String>>,
    indexed: bool,
    (size, expected_count): (Option<u64>, Option<u64>),
) -> PyResult<PoolOptions> {
    let size_bytes = renamed(py, ("size_bytes", size_bytes), ("size", size))?;
    let expected_objects = renamed(py, ("expected_objects", expected_objects), ("expected_count", expected_count))?;
    Ok(PoolOptions {
        size_bytes: size_bytes.unwrap_or(PoolOptions::DEFAULT_SIZE_BYTES),
        expected_objects: expected_objects.unwrap_or(PoolOptions::DEFAULT_EXPECTED_OBJECTS),
        create_only,
        indexed,
        durability: durability(durability_name)?,
        plugins: plugins.unwrap_or_default(),
    })
}

/// What `connect` was given, checked and turned into the client's options.
#[allow(clippy::too_many_arguments)] // One per keyword argument of `connect`.
pub(crate) fn client_options(
    client_name: Option<String>,
    connect_timeout: Option<f64>,
    tls_ca_file: Option<PathBuf>,
    tls_client_cert_file: Option<PathBuf>,
    tls_client_key_file: Option<PathBuf>,
    user: Option<String>,
    password: Option<String>,
) -> PyResult<ClientOptions> {
    let connect_timeout = match connect_timeout {
        None => ClientOptions::default().connect_timeout,
        Some(seconds) => Duration::try_from_secs_f64(seconds).ok().filter(|t| !t.is_zero()).ok_or_else(|| {
            invalid_argument(format!("connect_timeout must be a positive number of seconds, not {seconds}"))
        })?,
    };
    let client_cert = match (tls_client_cert_file, tls_client_key_file) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        _ => {
            return Err(invalid_argument(
                "tls_client_cert_file and tls_client_key_file go together: give both or neither",
            ))
        }
    };
    let tls = match (tls_ca_file, client_cert) {
        (Some(ca_file), client_cert) => Some(TlsOptions { ca_file, client_cert }),
        (None, None) => None,
        (None, Some(_)) => {
            return Err(invalid_argument("a client certificate needs tls_ca_file, the CA of the server"))
        }
    };
    let credentials = match (user, password) {
        (Some(user), password) => Some(UserCredentials::new(user, password.unwrap_or_default())),
        (None, None) => None,
        (None, Some(_)) => return Err(invalid_argument("a password needs a user")),
    };
    Ok(ClientOptions {
        client_name: client_name.unwrap_or_else(|| concat!("ferrite-python/", env!("CARGO_PKG_VERSION")).to_owned()),
        connect_timeout,
        tls,
        credentials,
    })
}

/// Gathers `find`'s pages into one list of distinct keys, up to the caller's limit.
#[derive(Debug)]
pub(crate) struct FoundKeys {
    keys: Vec<Vec<u8>>,
    seen: HashSet<Vec<u8>>,
    limit: Option<usize>,
}

impl FoundKeys {
    pub(crate) fn new(limit: Option<usize>) -> FoundKeys {
        FoundKeys { keys: Vec::new(), seen: HashSet::new(), limit }
    }

    fn remaining(&self) -> usize {
        self.limit.map_or(usize::MAX, |limit| limit.saturating_sub(self.keys.len()))
    }

    /// How many keys to ask the next page for.
    pub(crate) fn page_limit(&self) -> u32 {
        u32::try_from(self.remaining().min(FIND_KEYS_MAX)).expect("FIND_KEYS_MAX fits a u32")
    }

    /// Takes one page; returns where the next starts, or `None` when the search is done.
    pub(crate) fn take(&mut self, page: FindPage) -> Option<Vec<u8>> {
        for key in page.keys {
            if self.remaining() == 0 {
                break;
            }
            // A pool without an index is walked in hash order, where a key may come back twice.
            if self.seen.insert(key.clone()) {
                self.keys.push(key);
            }
        }
        if self.remaining() == 0 {
            None
        } else {
            page.next
        }
    }

    /// The keys, sorted.
    pub(crate) fn finish(mut self) -> Vec<Vec<u8>> {
        self.keys.sort_unstable();
        self.keys
    }
}

/// `find`'s limit, checked: `None` for every match.
pub(crate) fn find_limit(limit: Option<i64>) -> PyResult<Option<usize>> {
    match limit {
        None => Ok(None),
        Some(limit) if limit >= 1 => {
            Ok(Some(usize::try_from(limit).map_err(|_| invalid_argument(format!("find limit {limit} is too large")))?))
        }
        Some(limit) => Err(invalid_argument(format!("find limit must be at least 1, not {limit}"))),
    }
}

pub(crate) fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Limits>()?;
    module.add_class::<PoolInfo>()?;
    module.add_class::<ValueAttributes>()?;
    module.add_class::<PoolAttributes>()?;
    Ok(())
}
