//! Active Data Objects on a shard: each pool with plugins gets a `ferrite-ado` host process (an
//! [`AdoLink`]) when its first invocation arrives, and a task that wakes the shard when the host
//! answers. The shard keeps up to [`CALLS_IN_FLIGHT_MAX`] calls of a pool submitted at once, on
//! distinct keys (calls on one key run in arrival order), so a host takes a batch of calls per
//! wake-up; it runs them one after another on its thread.
//!
//! The shard's side of a call (checks, locks, logging, answers) is in `handler/invoke.rs`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ferrite_ado::args::PluginSpec;
use ferrite_ado::message::{CallId, Location, Response};
use ferrite_ado::{AdoConfig, AdoLink};
use ferrite_proto::{ErrorCode, InvokeBuffer, Opcode, PoolHandle, Response as ProtoResponse};
use ferrite_store::persistence::wal::Lsn;
use foldhash::HashMap;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::{watch, Notify};

use crate::completion::Completion;
use crate::handler::ShardState;
use crate::resp;

/// How a shard contains its plugin hosts.
#[derive(Debug, Clone)]
pub(crate) struct AdoSettings {
    pub host_binary: PathBuf,
    pub limits: crate::config::AdoConfig,
}

impl AdoSettings {
    /// Messages in flight between the shard and a host, each way.
    const RING_CAPACITY_BYTES: usize = 4 << 20;

    /// Hosts run the `ferrite-ado` binary installed beside the server's executable.
    pub fn beside_server(limits: crate::config::AdoConfig) -> AdoSettings {
        let dir = std::env::current_exe().ok().and_then(|exe| exe.parent().map(PathBuf::from)).unwrap_or_default();
        AdoSettings { host_binary: dir.join("ferrite-ado"), limits }
    }

    pub(crate) fn link_config(&self, chain: Vec<PluginSpec>) -> AdoConfig {
        AdoConfig {
            host_binary: self.host_binary.clone(),
            chain,
            memory_limit_bytes: self.limits.memory_limit_bytes,
            call_deadline: Duration::from_millis(self.limits.call_timeout_ms),
            spin_us: self.limits.spin_us,
            ring_capacity_bytes: Self::RING_CAPACITY_BYTES,
            checking: self.limits.check_writes,
        }
    }
}

/// How a call's answer is written for the client that asked, in its protocol.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// A native frame, whose opcode follows the request's.
    Native { opcode: Opcode, request_id: u64 },
    /// RESP `FERRITE.INVOKE`: an array of the buffers.
    RespBuffers,
    /// RESP `INCR` and kin through `counter`: the integer the chain's layer `layer` answered.
    RespInteger { layer: u32 },
    /// A signal: the answer of the request it signals (shared by the signals of a request on
    /// several keys, RESP `MSET`, `MGET`, `DEL`), sent once the chain has handled every one of
    /// them, whatever the chain answers or whether it fails (the request succeeded).
    Held(Arc<HeldAnswer>),
}

/// The answer of a request that makes signals, shared by their calls.
#[derive(Debug)]
pub(crate) struct HeldAnswer {
    answer: std::sync::Mutex<BytesMut>,
    /// Signal calls not yet ended.
    pending: std::sync::atomic::AtomicUsize,
}

impl HeldAnswer {
    pub fn new(answer: BytesMut, calls: usize) -> HeldAnswer {
        HeldAnswer { answer: std::sync::Mutex::new(answer), pending: calls.into() }
    }

    fn take(&self) -> BytesMut {
        std::mem::take(&mut *self.answer.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// The signals one request makes (`[ado] signals`): a read-only call on each key of `pool`,
/// with the payload `ADO::Signal::<signal>`.
#[derive(Debug)]
pub(crate) struct Signals {
    pub pool: PoolHandle,
    pub keys: Vec<Vec<u8>>,
    pub signal: &'static str,
}

impl Answer {
    /// Writes a successful call's answer: its response buffers, in chain order.
    pub fn success(&self, responses: &[Response], out: &mut BytesMut) {
        match self {
            Answer::Native { opcode, request_id } => {
                let buffers = responses.iter().map(|r| InvokeBuffer { layer: r.layer as u16, data: &r.data }).collect();
                ProtoResponse::Invoked { buffers }.encode_answer(*opcode, *request_id, out);
            }
            Answer::RespBuffers => {
                resp::reply_array_of_bulks(out, responses.iter().map(|r| &r.data[..]));
            }
            Answer::RespInteger { layer } => {
                let answered = responses.iter().rev().find(|r| r.layer == *layer);
                match answered.and_then(|r| std::str::from_utf8(&r.data).ok()?.trim().parse::<i64>().ok()) {
                    Some(value) => resp::reply_integer(out, value),
                    None => resp::reply_error(out, "ERR the counter plugin's answer is not an integer"),
                }
            }
            Answer::Held(held) => out.extend_from_slice(&held.take()),
        }
    }

    /// Whether the call with this answer answers its request when it ends: every call does but
    /// the signals of a request on several keys, of which the last to end does.
    pub fn settles(&self) -> bool {
        match self {
            Answer::Held(held) => held.pending.fetch_sub(1, std::sync::atomic::Ordering::AcqRel) == 1,
            _ => true,
        }
    }

    /// Writes a failure: an error frame, or a RESP error (a signal's held answer all the same).
    pub fn failure(&self, code: ErrorCode, message: &str, out: &mut BytesMut) {
        match self {
            Answer::Native { request_id, .. } => ProtoResponse::Error { code, message }.encode(*request_id, out),
            Answer::RespBuffers | Answer::RespInteger { .. } => resp::reply_error(out, &format!("ERR {message}")),
            Answer::Held(held) => {
                tracing::warn!("a plugin chain failed a signal: {message}");
                out.extend_from_slice(&held.take());
            }
        }
    }
}

/// An invocation waiting for its turn (or running), with what the shard needs to finish it.
#[derive(Debug)]
pub(crate) struct Call {
    pub answer: Answer,
    /// Empty for an invocation of the pool itself.
    pub key: Vec<u8>,
    /// [`key_hash`] of `key`.
    pub key_hash: u64,
    /// Handed to the host (and emptied) when the call is submitted.
    pub payload: Vec<u8>,
    /// `FERRITE_WORK_*` flags.
    pub work_flags: u32,
    /// Whether the answer waits for the call's writes to be durable.
    pub sync: bool,
    /// What the answer waits for besides the call's own writes: the state it read, and the put
    /// of `invoke_put_ado`.
    pub wait_lsn: Lsn,
    /// `None` for fire-and-forget: the caller was answered when the call was accepted.
    pub completion: Option<Arc<Completion>>,
    /// `invoke_put_ado`'s detached value: placed in memory the call allocates.
    pub detached: Option<Vec<u8>>,
    /// The value the call gives its key before the plugins run, stored only if the call
    /// succeeds, in its transaction.
    pub new_value: Option<NewValue>,
}

/// A value a call gives its key before its plugins run: the plugins work on it as a copy in
/// scratch memory, staged as the key's change, so a call that fails leaves the key as it was
/// (absent included).
#[derive(Debug)]
pub(crate) enum NewValue {
    /// `invoke_put_ado`'s value; with no-overwrite, only if the key is absent when the call
    /// begins (else the plugins run on the value there).
    Put { value: Vec<u8>, keep_existing: bool },
    /// A zeroed value of `len` bytes if the key is absent when the call begins: create-on-demand,
    /// and the empty value a detached `invoke_put_ado` gives an absent key.
    IfAbsent { len: u64 },
}

/// The call a pool's host is running.
#[derive(Debug)]
pub(crate) struct Running {
    pub id: CallId,
    pub call: Call,
    pub target: Target,
    /// Keys the call opened (read-only, `open_key`), each read-locked until the call ends or
    /// unlocks it; a small value is lent as a copy in scratch memory, freed then.
    pub opened: Vec<(Vec<u8>, Option<Location>)>,
    /// Keys the call created, opened for writing, resized or erased, write-locked until it ends,
    /// in the order first changed: a successful call applies them to the store in one
    /// transaction with its target's writes.
    pub staged: Vec<StagedKey>,
    /// Scratch memory lent to the call for new values (every copy, those a resize replaced
    /// included): where its declared writes may lie besides its target, freed when it ends.
    pub lent: Vec<Location>,
    /// Pool memory the call allocated (`allocate_memory`, and its detached value): kept by the
    /// store if the call succeeds, freed otherwise.
    pub allocated: Vec<StagedAllocation>,
    /// Allocations of earlier calls this call freed (by id), released if it succeeds.
    pub freed: Vec<u64>,
}

impl Running {
    pub fn new(id: CallId, call: Call, target: Target) -> Running {
        Running {
            id,
            call,
            target,
            opened: Vec::new(),
            staged: Vec::new(),
            lent: Vec::new(),
            allocated: Vec::new(),
            freed: Vec::new(),
        }
    }

    /// Whether a write the call declared lies in memory it was given to write.
    pub fn may_write(&self, write: &Location) -> bool {
        self.target.copy().is_some_and(|copy| copy.covers(write) && !is_read_only(&self.call))
            || self.lent.iter().any(|lent| lent.covers(write))
            || self.allocated.iter().any(|allocated| allocated.memory.covers(write))
    }

    /// The change the call made to `key`, if it made one.
    pub fn staged(&self, key: &[u8]) -> Option<&StagedKey> {
        self.staged.iter().find(|staged| staged.key == key)
    }

    /// Whether the call locks `key` against a request that `writes` (or reads): its target, a
    /// key it opened (a read lock) or one it changes (a write lock).
    pub fn locks(&self, key: &[u8], writes: bool) -> bool {
        (self.call.key == key && (writes || !is_read_only(&self.call))) || self.locks_besides_target(key, writes)
    }

    /// Whether the call locks `key` through a key it opened or changes (not its target).
    pub fn locks_besides_target(&self, key: &[u8], writes: bool) -> bool {
        (writes && self.opened.iter().any(|(opened, _)| opened == key)) || self.staged(key).is_some()
    }
}

/// Pool memory a running call allocated: `memory` (scratch) holds the `id` the plugin was
/// given (its aligned start, where its `len` requested bytes begin).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StagedAllocation {
    pub id: u64,
    pub memory: Location,
}

/// A key a running call changes, applied when the call succeeds.
#[derive(Debug, Clone)]
pub(crate) struct StagedKey {
    pub key: Vec<u8>,
    /// The key's new value, in scratch memory lent to the call; `None` if the call erased it.
    pub value: Option<Location>,
}

/// The memory a call's plugin is given as its value. A plugin writes only memory of its call's
/// own (whole pages of scratch memory nothing else shares, which its host may write while the
/// call runs): never a value in place, which other requests, calls and checkpoints read.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target {
    /// The value itself, read in place and never written: a read-only call's (or a signal's)
    /// value kept out of line, which stays where it is while its key is held; or nothing, for a
    /// call on the pool or a key a post-erase signal names.
    InPlace(Location),
    /// A copy the plugin works on; a successful call stores what it declared there as `of` says.
    Copy { copy: Location, of: CopyOf },
}

/// What a call's copy of its value is a copy of: where a successful call's declared writes go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CopyOf {
    /// A value kept out of line at this place, which stays where it is while the call holds its
    /// key: the declared ranges are copied onto it in the call's transaction.
    Value(Location),
    /// A value kept inside its index entry, which other inserts may move: the value with the
    /// declared ranges applied is put back.
    Entry,
    /// The value the call gives its key (see [`NewValue`]): staged as the key's change and
    /// stored whole.
    Given,
}

impl Target {
    /// Where the plugin finds its value.
    pub fn location(self) -> Location {
        match self {
            Target::InPlace(location) | Target::Copy { copy: location, .. } => location,
        }
    }

    /// The call's own copy, if its target is one.
    pub fn copy(self) -> Option<Location> {
        match self {
            Target::Copy { copy, .. } => Some(copy),
            Target::InPlace(_) => None,
        }
    }
}

/// Calls of one pool submitted to its host at once.
pub(crate) const CALLS_IN_FLIGHT_MAX: usize = 64;

/// One pool's plugin calls.
#[derive(Debug)]
pub(crate) struct PoolCalls {
    /// Tells this host from a later one of the same pool (its task serves only this one).
    pub host: u64,
    pub link: AdoLink,
    /// Calls submitted and not yet finished, in submit order (they mostly end in it too, so the
    /// one that ends is mostly the first).
    running: VecDeque<Running>,
    queue: VecDeque<Call>,
    /// How many queued and running calls target each key, by [`key_hash`]: every request asks
    /// whether a call holds its key, and almost always none does, which this answers without
    /// comparing the key with every call's. A count is exact for its hash; keys that share a
    /// hash only make the answer look at the calls themselves.
    targets: HashMap<u64, TargetCount>,
    /// Requests waiting for a key one of these calls holds; woken (to run again) when a call ends.
    pub waiters: Vec<Arc<Completion>>,
    /// Signalled when a call starts, so the pool's task begins watching it (its deadline, and
    /// a host that dies without a word).
    pub call_started: Arc<Notify>,
}

/// The calls of a pool that target keys of one hash.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct TargetCount {
    /// Queued or running calls that may write their target.
    writers: u32,
    /// Queued or running read-only calls.
    readers: u32,
    /// Running calls, of either kind.
    running: u32,
}

impl PoolCalls {
    pub fn new(host: u64, link: AdoLink) -> PoolCalls {
        PoolCalls {
            host,
            link,
            running: VecDeque::new(),
            queue: VecDeque::new(),
            targets: HashMap::default(),
            waiters: Vec::new(),
            call_started: Arc::new(Notify::new()),
        }
    }

    /// The calls submitted and not yet finished, in submit order.
    pub fn running(&self) -> &VecDeque<Running> {
        &self.running
    }

    /// The running calls, to record what their callbacks open and change (never their targets;
    /// calls start and end only through this type, which keeps the counts of their keys).
    pub fn running_mut(&mut self) -> std::collections::vec_deque::IterMut<'_, Running> {
        self.running.iter_mut()
    }

    /// Calls accepted and not yet submitted.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Accepts a call: it holds its key from now on.
    pub fn push_queued(&mut self, call: Call) {
        self.count(&call, false);
        self.queue.push_back(call);
    }

    /// Takes the first queued call that may start: one on a key no running call targets, has
    /// opened or changes (calls on one key keep their order). It no longer holds its key until
    /// [`Self::push_running`] (or never, if it cannot start).
    pub fn take_startable(&mut self) -> Option<Call> {
        let next = self.queue.iter().position(|call| !self.running_on(call))?;
        let call = self.queue.remove(next).expect("the position is in the queue");
        self.uncount(&call, false);
        Some(call)
    }

    /// Records a submitted call.
    pub fn push_running(&mut self, running: Running) {
        self.count(&running.call, true);
        self.running.push_back(running);
    }

    /// Takes the running call `id` (it has ended).
    pub fn take_running(&mut self, id: CallId) -> Option<Running> {
        let at = self.running.iter().position(|running| running.id == id)?;
        let running = self.running.remove(at).expect("the position is in the running calls");
        self.uncount(&running.call, true);
        Some(running)
    }

    /// Counts `call` (queued, or `running`) as holding its key.
    fn count(&mut self, call: &Call, running: bool) {
        if call.key.is_empty() {
            return;
        }
        let count = self.targets.entry(call.key_hash).or_default();
        if is_read_only(call) {
            count.readers += 1;
        } else {
            count.writers += 1;
        }
        if running {
            count.running += 1;
        }
    }

    /// Takes back what [`Self::count`] counted.
    fn uncount(&mut self, call: &Call, running: bool) {
        if call.key.is_empty() {
            return;
        }
        let hash = call.key_hash;
        let Some(count) = self.targets.get_mut(&hash) else { return };
        if is_read_only(call) {
            count.readers -= 1;
        } else {
            count.writers -= 1;
        }
        if running {
            count.running -= 1;
        }
        if *count == TargetCount::default() {
            self.targets.remove(&hash);
        }
    }

    /// Whether a running call targets `call`'s key, has opened it or changes it.
    fn running_on(&self, call: &Call) -> bool {
        let key = &call.key[..];
        if key.is_empty() {
            return false;
        }
        let targeted = self.targets.get(&call.key_hash).is_some_and(|count| count.running > 0);
        if targeted {
            self.running.iter().any(|running| running.locks(key, true))
        } else {
            self.running.iter().any(|running| running.locks_besides_target(key, true))
        }
    }

    /// Whether a call waiting in the queue targets `key` (and so holds it).
    pub fn queued_on(&self, key: &[u8]) -> bool {
        let counted =
            self.targets.get(&key_hash(key)).is_some_and(|count| count.writers + count.readers > count.running);
        counted && self.queue.iter().any(|call| call.key == key)
    }

    /// Whether a request on `key` must wait: a call running or waiting holds the key (every call
    /// holds its key from the moment it is accepted, so requests on it keep their order), or a
    /// running call opened or changes it, with a write lock, or with a read lock and the request
    /// writes.
    pub fn holds(&self, key: &[u8], writes: bool) -> bool {
        if key.is_empty() {
            return false;
        }
        let targeted =
            self.targets.get(&key_hash(key)).is_some_and(|count| count.writers > 0 || (writes && count.readers > 0));
        if !targeted {
            return self.running.iter().any(|running| running.locks_besides_target(key, writes));
        }
        let held = |call: &Call| call.key == key && (writes || !is_read_only(call));
        self.running.iter().any(|running| running.locks(key, writes)) || self.queue.iter().any(held)
    }

    /// Wakes every request waiting for a key, to run again.
    pub fn wake_waiters(&mut self) {
        for waiter in self.waiters.drain(..) {
            waiter.wake();
        }
    }
}

/// A key's hash for [`PoolCalls`]' counts, keyed per process so that clients cannot choose keys
/// that share one (which would only make their requests look at the calls one by one).
pub(crate) fn key_hash(key: &[u8]) -> u64 {
    static HASHER: LazyLock<foldhash::fast::RandomState> = LazyLock::new(foldhash::fast::RandomState::default);
    HASHER.hash_one(key)
}

fn is_read_only(call: &Call) -> bool {
    call.work_flags & ferrite_plugin::abi::WORK_READ_ONLY != 0
}

/// How long the task sleeps between looks at a running call when the host does not signal (a
/// host that dies signals nothing; its death is noticed at the next look).
const RUNNING_RECHECK: Duration = Duration::from_millis(10);

/// How often stopping hosts are looked at, to let go of those that have exited.
const RETIRING_RECHECK: Duration = Duration::from_millis(20);

/// How long an idle pool's task sleeps between looks: it ends within this of its host stopping.
const IDLE_RECHECK: Duration = Duration::from_secs(1);

/// Runs while the shard runs: starts the task of each host the shard starts, and lets go of the
/// hosts it stops once they have exited.
pub(crate) async fn supervise(shard: Rc<RefCell<ShardState>>, mut stop: watch::Receiver<bool>) {
    let started = Arc::clone(&shard.borrow().host_started);
    loop {
        let retiring = !shard.borrow().retiring.is_empty();
        tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop) => return,
            () = started.notified() => {}
            () = tokio::time::sleep(RETIRING_RECHECK), if retiring => {}
        }
        shard.borrow_mut().reap_retired(Instant::now());
        let new = std::mem::take(&mut shard.borrow_mut().new_hosts);
        for (pool, host) in new {
            let watched = shard
                .borrow()
                .calls
                .get(&pool)
                .map(|calls| (calls.link.wake_fd().try_clone_to_owned(), Arc::clone(&calls.call_started)));
            match watched {
                Some((Ok(wake), call_started)) => {
                    let task = serve_host(Rc::clone(&shard), pool, host, wake, call_started, stop.clone());
                    tokio::task::spawn_local(task);
                }
                Some((Err(error), _)) => {
                    tracing::error!(pool = pool.0, %error, "cannot watch the plugin host's wake-ups")
                }
                None => {}
            }
        }
    }
}

/// Runs while `pool` has host `host`: waits for the host's wake-ups (or a call's deadline, or a
/// short recheck while a call runs) and lets the shard take what the host sent.
async fn serve_host(
    shard: Rc<RefCell<ShardState>>,
    pool: PoolHandle,
    host: u64,
    wake: OwnedFd,
    call_started: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    // SAFETY: `wake` is an owned descriptor, open until the `AsyncFd` that owns it is dropped.
    #[allow(unsafe_code)]
    let registered = unsafe { AsyncFd::register_with_interest(wake, Interest::READABLE) };
    let wake = match registered {
        Ok(wake) => wake,
        Err(error) => {
            tracing::error!(pool = pool.0, %error, "cannot watch the plugin host's wake-ups");
            return;
        }
    };
    loop {
        let recheck = shard.borrow().plugin_recheck(pool, host);
        let Some(recheck) = recheck else { return };
        let sleep = tokio::time::sleep_until(recheck.into());
        let signalled = tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop) => return,
            ready = wake.readable() => {
                if let Ok(mut guard) = ready {
                    guard.clear_ready();
                }
                true
            }
            () = call_started.notified() => false,
            () = sleep => false,
        };
        if !shard.borrow_mut().poll_plugins(pool, host, signalled, Instant::now()) {
            return;
        }
    }
}

/// When a pool's task must look again without a wake-up: the link's next deadline or the
/// recheck, whichever is first.
pub(crate) fn recheck_at(calls: &PoolCalls, now: Instant) -> Instant {
    let recheck = now + if calls.running().is_empty() { IDLE_RECHECK } else { RUNNING_RECHECK };
    calls.link.next_deadline().map_or(recheck, |deadline| deadline.min(recheck))
}

/// Runs while the shard runs: submits the plugin calls connections queued, once per turn of the
/// shard's loop (see [`ShardState::submit_soon`]).
pub(crate) async fn submit_queued_calls(shard: Rc<RefCell<ShardState>>, mut stop: watch::Receiver<bool>) {
    let queued = Arc::clone(&shard.borrow().calls_queued);
    loop {
        tokio::select! {
            biased;
            _ = stop.wait_for(|stop| *stop) => return,
            () = queued.notified() => {}
        }
        shard.borrow_mut().submit_calls();
    }
}

/// Stops a stopping shard's hosts: idle ones are asked to close their plugins (which get
/// `FERRITE_EVENT_CLOSE` and their shutdown) and given their grace; a host still running a
/// call is killed at once, the call undone and never logged.
pub(crate) async fn stop_hosts(shard: &Rc<RefCell<ShardState>>) {
    let hosts: Vec<PoolCalls> = shard.borrow_mut().calls.drain().map(|(_, calls)| calls).collect();
    for calls in hosts {
        if calls.running().is_empty() {
            shard.borrow_mut().retire(calls.link);
        }
    }
    while shard.borrow_mut().reap_retired(Instant::now()) {
        tokio::time::sleep(RETIRING_RECHECK).await;
    }
}
