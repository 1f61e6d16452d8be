//! An in-process host for unit tests of plugins, for Ferrite's own plugins and for plugin
//! authors.
//!
//! [`TestHost`] keeps a fake pool (keys to values laid out in one memory arena, so values have
//! real addresses and offsets like pool memory), implements every callback of the header, and
//! calls plugins through their C table, so a Rust plugin's export shims are exercised and a C
//! plugin loaded from a `.so` is tested the same way. Like the `ferrite-ado` host, it records
//! every declared range with its before-image and puts them back when `do_work` fails; its
//! checking mode (on by default) compares the whole arena before and after each invocation and
//! reports bytes that changed outside any declared range.
//!
//! ```ignore
//! let mut host = TestHost::new(plugin_table(), b"")?;
//! let responses = host.invoke(b"hits", b"add 2", InvokeOptions::create(8))?;
//! assert_eq!(responses[0].data, b"2");
//! assert!(host.undeclared_writes().is_empty());
//! ```

mod arena;
mod call_state;
mod check;
mod host_state;
mod pool;

use std::ffi::{c_int, c_void};
use std::ops::Range;
use std::path::Path;

use crate::abi::{self, Bytes, Host, PluginV1, Work};
use crate::error::ErrorCode;
use crate::host::callbacks;
use crate::load::{LoadError, LoadedPlugin};

pub use call_state::Response;
pub use host_state::LogLine;

use call_state::CallState;
use host_state::HostState;
use pool::Pool;

/// The test pool's size unless [`TestHostBuilder::pool_bytes`] says otherwise.
pub const POOL_BYTES_DEFAULT: usize = 1 << 20;

/// The `pool_id` the test host reports.
pub const TEST_POOL_ID: u64 = 1;

/// A plugin table to drive: one a Rust plugin's `plugin_table()` returns, or a loaded library
/// (kept loaded while the host lives).
#[derive(Debug)]
pub enum PluginSource {
    Static(&'static PluginV1),
    Loaded(LoadedPlugin),
}

impl PluginSource {
    fn table(&self) -> &PluginV1 {
        match self {
            PluginSource::Static(table) => table,
            PluginSource::Loaded(plugin) => plugin.table(),
        }
    }
}

impl From<&'static PluginV1> for PluginSource {
    fn from(table: &'static PluginV1) -> PluginSource {
        PluginSource::Static(table)
    }
}

impl From<LoadedPlugin> for PluginSource {
    fn from(plugin: LoadedPlugin) -> PluginSource {
        PluginSource::Loaded(plugin)
    }
}

/// Why a test host could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestHostError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("plugin at layer {layer} refused to launch with status {status}; its log: {log:?}")]
    Launch { layer: usize, status: c_int, log: Vec<LogLine> },
}

/// How to invoke: the flags of `invoke_ado` / `invoke_put_ado` the test host models.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvokeOptions {
    /// Create the key with a zeroed value of this many bytes if it does not exist.
    pub create_size: Option<usize>,
    /// Read-only: `declare_write` fails.
    pub read_only: bool,
    /// A value put into unattached pool memory and handed to the plugin as the detached value.
    pub detached: Option<Vec<u8>>,
    /// Deliver the invocation as a signal.
    pub signal: bool,
}

impl InvokeOptions {
    /// Create-on-demand with a value of `size` bytes.
    pub fn create(size: usize) -> InvokeOptions {
        InvokeOptions { create_size: Some(size), ..InvokeOptions::default() }
    }
}

/// A failed invocation: the status the chain returned (or the host refused with) and the
/// responses sent before it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvokeError {
    pub status: c_int,
    pub responses: Vec<Response>,
}

impl InvokeError {
    /// The header's error for the status, if it names one.
    pub fn code(&self) -> Option<ErrorCode> {
        ErrorCode::from_code(self.status)
    }
}

/// Builds a [`TestHost`] with a chain of plugins and a pool size.
#[derive(Debug, Default)]
pub struct TestHostBuilder {
    layers: Vec<(PluginSource, Vec<u8>)>,
    pool_bytes: Option<usize>,
}

impl TestHostBuilder {
    /// Appends a plugin to the chain, with its configuration.
    pub fn plugin(mut self, plugin: impl Into<PluginSource>, config: &[u8]) -> TestHostBuilder {
        self.layers.push((plugin.into(), config.to_vec()));
        self
    }

    pub fn pool_bytes(mut self, bytes: usize) -> TestHostBuilder {
        self.pool_bytes = Some(bytes);
        self
    }

    /// Launches every plugin in chain order.
    pub fn build(self) -> Result<TestHost, TestHostError> {
        let mut host = TestHost {
            state: Box::new(HostState {
                pool: Pool::new(self.pool_bytes.unwrap_or(POOL_BYTES_DEFAULT)),
                pool_id: TEST_POOL_ID,
                call: None,
                log: Vec::new(),
            }),
            layers: Vec::new(),
            checking: true,
            undeclared: Vec::new(),
        };
        for (layer, (source, config)) in self.layers.into_iter().enumerate() {
            let mut status = abi::OK;
            let config = Bytes { data: config.as_ptr(), len: config.len() };
            let launch = source.table().launch;
            // SAFETY: the table was checked (a loaded library) or built by the SDK; the
            // callbacks, host state and config live through the call.
            #[allow(unsafe_code)]
            let state = unsafe { launch(callbacks::<HostState>(), host.host_pointer(), config, &mut status) };
            if status != abi::OK {
                return Err(TestHostError::Launch { layer, status, log: host.state.log.clone() });
            }
            host.layers.push(Layer { source, state });
        }
        Ok(host)
    }
}

#[derive(Debug)]
struct Layer {
    source: PluginSource,
    /// What the plugin's `launch` returned, handed to every later entry.
    state: *mut c_void,
}

/// An in-process host for a chain of plugins over a fake pool. See the module docs.
#[derive(Debug)]
pub struct TestHost {
    state: Box<HostState>,
    layers: Vec<Layer>,
    checking: bool,
    undeclared: Vec<Range<u64>>,
}

impl TestHost {
    /// A host for one plugin with its configuration.
    pub fn new(plugin: impl Into<PluginSource>, config: &[u8]) -> Result<TestHost, TestHostError> {
        TestHost::builder().plugin(plugin, config).build()
    }

    /// A host for the plugin library at `path`, loaded and checked as the `ferrite-ado` host
    /// loads one.
    pub fn open(path: &Path, config: &[u8]) -> Result<TestHost, TestHostError> {
        TestHost::new(LoadedPlugin::open(path)?, config)
    }

    pub fn builder() -> TestHostBuilder {
        TestHostBuilder::default()
    }

    fn host_pointer(&mut self) -> *mut Host {
        (&mut *self.state as *mut HostState).cast()
    }

    /// Turns the checking mode (compare the pool before and after each invocation) on or off.
    pub fn set_checking(&mut self, on: bool) {
        self.checking = on;
    }

    /// Pool ranges (offsets) the last invocation changed without declaring them. Always empty
    /// with the checking mode off.
    pub fn undeclared_writes(&self) -> &[Range<u64>] {
        &self.undeclared
    }

    /// Every line the plugins logged, oldest first.
    pub fn log(&self) -> &[LogLine] {
        &self.state.log
    }

    /// Stores `value` under `key`, as a client's put would.
    ///
    /// # Panics
    /// When the test pool is full: make it bigger with [`TestHostBuilder::pool_bytes`].
    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        let entry = self.state.pool.place(key, value.len()).expect("the test pool is full; give it more pool_bytes");
        self.state.pool.arena.write(entry.offset, value);
    }

    /// The value stored under `key`.
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.state.pool.value(key).map(<[u8]>::to_vec)
    }

    /// Where the value of `key` lies in the pool.
    pub fn value_offset(&self, key: &[u8]) -> Option<u64> {
        self.state.pool.entry(key).map(|entry| entry.offset as u64)
    }

    /// Erases `key`, as a client's erase would; tells no plugin.
    pub fn erase(&mut self, key: &[u8]) -> bool {
        self.state.pool.tables.index.remove(key).is_some()
    }

    /// Every key, in byte order.
    pub fn keys(&self) -> Vec<Vec<u8>> {
        self.state.pool.tables.index.keys().cloned().collect()
    }

    /// The bytes at a pool offset (for memory a plugin allocated).
    pub fn pool_bytes(&self, offset: u64, len: usize) -> Vec<u8> {
        let offset = usize::try_from(offset).expect("a test pool offset fits in usize");
        self.state.pool.arena.bytes(offset, len).to_vec()
    }

    /// Tells every plugin of the chain of a pool event (`abi::EVENT_*`).
    pub fn pool_event(&mut self, event: u32, key: &[u8]) {
        let host = self.host_pointer();
        for layer in &self.layers {
            if let Some(pool_event) = layer.source.table().pool_event {
                // SAFETY: the plugin's own entry with the state its launch returned; the key,
                // callbacks and host state live through the call.
                #[allow(unsafe_code)]
                unsafe {
                    pool_event(
                        layer.state,
                        event,
                        Bytes { data: key.as_ptr(), len: key.len() },
                        callbacks::<HostState>(),
                        host,
                    )
                };
            }
        }
    }

    /// Invokes the chain on `key` with `payload`. Each plugin is called in chain order; the
    /// first failure stops the chain and undoes every declared write and every structural
    /// change of the whole invocation.
    pub fn invoke(&mut self, key: &[u8], payload: &[u8], options: InvokeOptions) -> Result<Vec<Response>, InvokeError> {
        self.run(Some(key), payload, options)
    }

    /// A key-less invocation: the target is the pool itself.
    pub fn invoke_pool(&mut self, payload: &[u8], options: InvokeOptions) -> Result<Vec<Response>, InvokeError> {
        self.run(None, payload, options)
    }

    fn run(
        &mut self,
        key: Option<&[u8]>,
        payload: &[u8],
        options: InvokeOptions,
    ) -> Result<Vec<Response>, InvokeError> {
        self.undeclared.clear();
        let checkpoint = self.state.pool.checkpoint();
        let refuse = |status| Err(InvokeError { status, responses: Vec::new() });
        let mut flags = 0;
        if let Some(key) = key {
            if self.state.pool.entry(key).is_none() {
                let Some(size) = options.create_size else { return refuse(abi::ERR_NOT_FOUND) };
                if self.state.pool.place(key, size).is_none() {
                    self.state.pool.roll_back(checkpoint);
                    return refuse(abi::ERR_NO_SPACE);
                }
                flags |= abi::WORK_NEW_KEY;
            }
        } else {
            flags |= abi::WORK_POOL;
        }
        let detached = match &options.detached {
            Some(value) => match self.state.pool.arena.allocate(value.len(), pool::VALUE_ALIGN_BYTES) {
                Some(offset) => {
                    self.state.pool.arena.write(offset, value);
                    self.state.pool.tables.allocations.insert(offset, value.len());
                    flags |= abi::WORK_DETACHED;
                    Some((offset, value.len()))
                }
                None => {
                    self.state.pool.roll_back(checkpoint);
                    return refuse(abi::ERR_NO_SPACE);
                }
            },
            None => None,
        };
        if options.read_only {
            flags |= abi::WORK_READ_ONLY;
        }
        if options.signal {
            flags |= abi::WORK_SIGNAL;
        }

        let mut call =
            CallState { target: key.map(<[u8]>::to_vec), read_only: options.read_only, ..CallState::default() };
        if let Some(key) = key {
            call.locked.insert(key.to_vec());
            if !options.read_only {
                call.writable.insert(key.to_vec());
            }
        }
        self.state.call = Some(call);
        let before = self.checking.then(|| self.state.pool.arena.snapshot());
        let failure = self.run_chain(key, payload, flags, detached);

        let call = self.state.call.take().expect("the call state lives until the chain returns");
        if let Some(before) = before {
            self.undeclared = check::undeclared_writes(&before, &self.state.pool.arena, &call.accounted_ranges());
        }
        match failure {
            None => Ok(call.responses),
            Some(status) => {
                for image in call.before_images.iter().rev() {
                    self.state.pool.arena.write(image.offset, &image.bytes);
                }
                self.state.pool.roll_back(checkpoint);
                Err(InvokeError { status, responses: call.responses })
            }
        }
    }

    /// Calls each layer's `do_work`; the status of the first that fails.
    fn run_chain(
        &mut self,
        key: Option<&[u8]>,
        payload: &[u8],
        flags: u32,
        detached: Option<(usize, usize)>,
    ) -> Option<c_int> {
        for (layer, plugin) in self.layers.iter().enumerate() {
            let layer = u32::try_from(layer).expect("a chain has fewer than 2^32 plugins");
            if let Some(call) = self.state.call.as_mut() {
                call.layer = layer;
            }
            // An earlier layer may have resized the target, so its place is read afresh.
            let target = key.and_then(|key| self.state.pool.entry(key));
            let arena = &self.state.pool.arena;
            let work = Work {
                struct_size: std::mem::size_of::<Work>() as u32,
                flags,
                pool_id: self.state.pool_id,
                key: key.map_or(Bytes { data: std::ptr::null(), len: 0 }, |key| Bytes {
                    data: key.as_ptr(),
                    len: key.len(),
                }),
                value: target.map_or(std::ptr::null_mut(), |entry| arena.address(entry.offset)),
                value_len: target.map_or(0, |entry| entry.len),
                value_offset: target.map_or(0, |entry| entry.offset as u64),
                payload: Bytes { data: payload.as_ptr(), len: payload.len() },
                detached: detached.map_or(std::ptr::null_mut(), |(offset, _)| arena.address(offset)),
                detached_len: detached.map_or(0, |(_, len)| len),
                detached_offset: detached.map_or(0, |(offset, _)| offset as u64),
                layer,
                reserved: 0,
            };
            let do_work = plugin.source.table().do_work;
            // Taken afresh after the host's own accesses above, so it is the newest borrow.
            let host: *mut Host = (&mut *self.state as *mut HostState).cast();
            // SAFETY: the plugin's own entry with the state its launch returned; the work, its
            // buffers, the callbacks and the host state live through the call, and the test host
            // holds no reference into its state while the plugin runs.
            #[allow(unsafe_code)]
            let status = unsafe { do_work(plugin.state, &work, callbacks::<HostState>(), host) };
            if status != abi::OK {
                return Some(status);
            }
        }
        None
    }
}

impl Drop for TestHost {
    /// Shuts the chain down in reverse order while the plugins' libraries are still loaded.
    fn drop(&mut self) {
        for layer in self.layers.iter().rev() {
            if let Some(shutdown) = layer.source.table().shutdown {
                // SAFETY: the plugin's own entry, called once, with the state its launch returned.
                #[allow(unsafe_code)]
                unsafe {
                    shutdown(layer.state)
                };
            }
        }
    }
}
