//! The `ferrite-ado` host process: maps one pool's memory, loads its plugin chain, and runs
//! invocations from the shard until told to stop or orphaned.
//!
//! The pool is mapped read-only. Per invocation the host gives the call write access to its own
//! pages ([`access`]), fills the call's copy of its value if the shard asked it to, runs every
//! layer's `do_work` in chain order (stopping at the first failure), takes write access back,
//! and reports in Done the ranges the plugins declared (if the call succeeded) or the failure.
//! A call never writes pool memory that anything else refers to: it writes its copies and its
//! allocations, and the shard applies the declared ranges when it commits the call, so a
//! failed or crashed call leaves nothing to undo.

mod access;
mod call;
mod channel;
mod checking;
mod context;

use std::ffi::c_void;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use ferrite_plugin::abi::{self, Bytes, Host, Work};
use ferrite_plugin::host::callbacks;
use ferrite_plugin::{LoadError, LoadedPlugin};

use crate::args::HostArgs;
use crate::codec::DecodeError;
use crate::message::{encode_done, CallId, Invocation, Location, ToHost, ToShard};
use crate::ring::{ring_bytes, Consumer, Producer, RingError};
use crate::shm::Mapping;
use crate::status::HostStatus;
use crate::wake::Wake;

use access::WriteAccess;
use call::CallState;
use channel::Channel;
use context::HostContext;

/// Why the host stopped other than by a Shutdown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot apply the memory limit: {0}")]
    MemoryLimit(std::io::Error),
    #[error("ring: {0}")]
    Ring(RingError),
    #[error("message from the shard: {0}")]
    Decode(DecodeError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("plugin {name} refused to launch with status {status}")]
    LaunchRefused { name: String, status: i32 },
    #[error("the parent process went away")]
    ParentGone,
}

/// One plugin of the chain and the state its `launch` returned.
#[derive(Debug)]
struct Layer {
    plugin: LoadedPlugin,
    state: *mut c_void,
}

/// Takes ownership of an inherited descriptor named on the command line.
#[allow(unsafe_code)]
fn inherited(fd: RawFd) -> Result<OwnedFd, HostError> {
    rustix::io::fcntl_getfd(
        // SAFETY: borrowed only to check it is open; ownership is taken below.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) },
    )
    .map_err(|e| HostError::Io(e.into()))?;
    // SAFETY: the link passed this descriptor to this process for it to own, and each is named
    // once on the command line.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Caps the address space at the host's budget plus the shared mappings it is about to make,
/// before any plugin code runs.
fn apply_memory_limit(budget: u64, shared: &[&OwnedFd]) -> Result<(), HostError> {
    let mut limit = budget;
    for fd in shared {
        let len = Mapping::file_len(std::os::fd::AsFd::as_fd(*fd))?;
        limit = limit.saturating_add(len as u64);
    }
    let rlimit = rustix::process::Rlimit { current: Some(limit), maximum: Some(limit) };
    rustix::process::setrlimit(rustix::process::Resource::As, rlimit).map_err(|e| HostError::MemoryLimit(e.into()))
}

/// Runs the host until a Shutdown (Ok) or a failure (Err).
pub fn run(args: HostArgs) -> Result<(), HostError> {
    let pool_fd = inherited(args.pool_fd)?;
    let ring_fd = inherited(args.ring_fd)?;
    let status_fd = inherited(args.status_fd)?;
    let to_host = Wake::from_fd(inherited(args.to_host_fd)?);
    let to_shard = Wake::from_fd(inherited(args.to_shard_fd)?);
    apply_memory_limit(args.memory_limit_bytes, &[&pool_fd, &ring_fd, &status_fd])?;
    let status = HostStatus::open(&status_fd)?;

    let pool = Arc::new(Mapping::map_read_only(&pool_fd)?);
    let rings = Arc::new(Mapping::map(&ring_fd)?);
    let inbox = Consumer::open(rings.clone(), 0).map_err(HostError::Ring)?;
    let outbox = Producer::open(rings, ring_bytes(args.ring_capacity)).map_err(HostError::Ring)?;
    let channel = Channel::new(inbox, outbox, to_host, to_shard, args.spin_us);
    let access = WriteAccess::new(Arc::clone(&pool));
    let context = Box::new(HostContext { pool, channel, access, call: None, fatal: None });
    let mut host = HostProcess { layers: Vec::new(), context, checking: args.checking, finished: None, status };
    let outcome = host.serve(&args);
    host.stop();
    outcome
}

/// The running host: the chain and the context the callbacks see.
#[derive(Debug)]
struct HostProcess {
    layers: Vec<Layer>,
    context: Box<HostContext>,
    checking: bool,
    /// The last finished call's state, kept for its buffers: the next call reuses them.
    finished: Option<CallState>,
    /// Where the link learns, should this process die, which call it died in.
    status: HostStatus,
}

impl HostProcess {
    /// The `ferrite_host` pointer for one entry call into a plugin. Nothing else touches the
    /// context until that entry call returns.
    fn host_pointer(&mut self) -> *mut Host {
        let context: *mut HostContext = &mut *self.context;
        context.cast()
    }

    fn serve(&mut self, args: &HostArgs) -> Result<(), HostError> {
        self.launch(args)?;
        self.pool_event(abi::EVENT_OPEN, &[]);
        self.context.channel.flush()?;
        loop {
            let message = match self.context.channel.next() {
                Ok(message) => message,
                Err(HostError::ParentGone) => return Ok(()),
                Err(e) => return Err(e),
            };
            match message {
                ToHost::Invoke { call, invocation } => self.invoke(call, &invocation)?,
                ToHost::PoolEvent { event, key } => self.pool_event(event, &key),
                ToHost::Shutdown => return Ok(()),
                // A reply to a callback of a call that already ended: nothing waits for it.
                ToHost::CallbackReply { .. } => {}
            }
            if let Some(fatal) = self.context.fatal.take() {
                return Err(fatal);
            }
            if !self.context.channel.has_backlog() {
                self.context.channel.flush()?;
            }
        }
    }

    #[allow(unsafe_code)]
    fn launch(&mut self, args: &HostArgs) -> Result<(), HostError> {
        for spec in &args.chain {
            let plugin = LoadedPlugin::open(&spec.path)?;
            let mut status = abi::OK;
            let config = Bytes { data: spec.config.as_ptr(), len: spec.config.len() };
            let host = self.host_pointer();
            // SAFETY: the loader checked the table; `config` and `status` outlive the call, and
            // the host pointer is the context, untouched until `launch` returns.
            let state = unsafe { (plugin.table().launch)(callbacks::<HostContext>(), host, config, &mut status) };
            if status < 0 {
                return Err(HostError::LaunchRefused { name: plugin.name().to_owned(), status });
            }
            self.layers.push(Layer { plugin, state });
        }
        Ok(())
    }

    #[allow(unsafe_code)]
    fn pool_event(&mut self, event: u32, key: &[u8]) {
        let key = Bytes { data: key.as_ptr(), len: key.len() };
        let host = self.host_pointer();
        for layer in &self.layers {
            if let Some(pool_event) = layer.plugin.table().pool_event {
                // SAFETY: the plugin's own state and a key that outlives the call; see `launch`.
                unsafe { pool_event(layer.state, event, key, callbacks::<HostContext>(), host) };
            }
        }
    }

    /// Runs one invocation through the chain and reports it.
    #[allow(unsafe_code)]
    fn invoke(&mut self, call: CallId, invocation: &Invocation) -> Result<(), HostError> {
        self.status.set_running(Some(call));
        let checking = self.checking.then_some(&*self.context.pool);
        self.context.call = Some(CallState::start(self.finished.take(), call, invocation, checking));
        let value = self.context.address_of(invocation.value);
        let detached = self.context.address_of(invocation.detached);
        let mut status = abi::OK;
        if let Err(complaint) = self.context.prepare(invocation) {
            status = abi::ERR_FAILED;
            if let Some(state) = self.context.call.as_mut() {
                state.last_complaint = complaint;
            }
        } else if let (Some(value), Some(detached)) = (value, detached) {
            for (index, layer) in self.layers.iter().enumerate() {
                let work = Work {
                    struct_size: std::mem::size_of::<Work>() as u32,
                    flags: invocation.flags,
                    pool_id: invocation.pool_id,
                    key: Bytes { data: invocation.key.as_ptr(), len: invocation.key.len() },
                    value: if invocation.value.len == 0 { std::ptr::null_mut() } else { value },
                    value_len: invocation.value.len as usize,
                    value_offset: invocation.value.offset,
                    payload: Bytes { data: invocation.payload.as_ptr(), len: invocation.payload.len() },
                    detached: if invocation.detached.len == 0 { std::ptr::null_mut() } else { detached },
                    detached_len: invocation.detached.len as usize,
                    detached_offset: invocation.detached.offset,
                    layer: index as u32,
                    reserved: 0,
                };
                if let Some(state) = self.context.call.as_mut() {
                    state.layer = index as u32;
                }
                let context: *mut HostContext = &mut *self.context;
                // SAFETY: `work` and everything it points to (the invocation's bytes, pool
                // memory checked in bounds above) outlive the call; the context is reached
                // only through the host pointer until `do_work` returns.
                status = unsafe {
                    (layer.plugin.table().do_work)(layer.state, &work, callbacks::<HostContext>(), context.cast())
                };
                if status != abi::OK {
                    break;
                }
            }
        } else {
            status = abi::ERR_INVALID;
        }
        // Nothing of the plugins' may write pool memory once the call reports.
        self.context.access.revoke_all()?;
        let state = self.context.call.take().expect("the call state was set at the start of the call");
        if let Some(snapshot) = &state.snapshot {
            let ranges = snapshot.undeclared(&self.context.pool, &state.declared);
            if !ranges.is_empty() {
                self.context.channel.send(&ToShard::Undeclared { call, ranges })?;
            }
        }
        let status = if status > 0 { abi::ERR_FAILED } else { status };
        let succeeded = status == abi::OK;
        let (writes, reason): (&[Location], &str) =
            if succeeded { (&state.declared, "") } else { (&[], &state.last_complaint) };
        let sent =
            self.context.channel.send_with(|out| encode_done(call, status, &state.responses, writes, reason, out));
        // Should the host die before its Done leaves, the call runs again on the next host: its
        // changes are only ever made by the shard, from the Done.
        self.status.set_running(None);
        self.finished = Some(state);
        sent
    }

    /// Tells every plugin the pool closes and unloads them, last first.
    #[allow(unsafe_code)]
    fn stop(&mut self) {
        self.pool_event(abi::EVENT_CLOSE, &[]);
        while let Some(layer) = self.layers.pop() {
            if let Some(shutdown) = layer.plugin.table().shutdown {
                // SAFETY: the plugin's own state, once, before its library is unloaded.
                unsafe { shutdown(layer.state) };
            }
        }
        let _ = self.context.channel.flush();
    }
}
