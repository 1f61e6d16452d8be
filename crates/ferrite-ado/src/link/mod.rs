//! [`AdoLink`]: the shard's side of one pool's host process. Nothing here blocks: the shard
//! submits invocations, registers [`AdoLink::wake_fd`] (and [`AdoLink::exit_fd`]) with its
//! event loop, calls [`AdoLink::poll`] when either is readable or [`AdoLink::next_deadline`]
//! passes, and answers callbacks with [`AdoLink::answer`].
//!
//! A host never changes pool memory that anything refers to (it writes a call's own copies and
//! allocations, and the shard applies what a successful call declared), so a dead host leaves
//! nothing to undo: what matters is which calls fail. The host names the call it runs in its
//! status area ([`crate::status`]); once it is dead, the Dones it sent are taken first (those
//! calls finished), and then, as a decision table:
//!
//! | how the host ended              | the call it died in  | calls it had not begun              |
//! |---------------------------------|----------------------|-------------------------------------|
//! | exited or crashed by itself     | `Failed(Crashed)`    | run again on a new host, once       |
//! | killed: calls passed deadline   | `Failed(Timeout)`    | run again on a new host, once       |
//! | killed: it sent garbage         | `Failed(Protocol)`   | `Failed(Protocol)` (it is not trusted) |
//! | stopped by the shard (restart)  | `Failed(Crashed)`    | run again on the new host, once     |
//! | exited after a shutdown         | (none runs)          | `Failed(Crashed)`                   |
//!
//! A call runs again at most once: if the next host dies before beginning it too (a plugin
//! that crashes at launch, say), it fails. Running a call again is safe because nothing it did
//! before counted: its changes are made only by the shard, from its Done.

mod spawn;

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::args::{HostArgs, PluginSpec};
use crate::message::{
    encode_invoke, CallId, CallbackReply, CallbackRequest, Done, Invocation, Location, ToHost, ToShard,
};
use crate::ring::{init_ring, ring_bytes, Consumer, Drained, Producer, RingError, RING_CAPACITY_MIN_BYTES};
use crate::shm::Mapping;
use crate::status::HostStatus;
use crate::wake::Wake;

use spawn::{child_fds, spawn_host, SharedFds};

/// How soon `next_deadline` asks to be polled again while a killed host has not been reaped.
const KILLED_RECHECK: Duration = Duration::from_millis(1);

/// How a pool's host is started and contained.
#[derive(Debug, Clone)]
pub struct AdoConfig {
    /// The `ferrite-ado` executable.
    pub host_binary: PathBuf,
    /// The pool's plugin chain, layer 0 first.
    pub chain: Vec<PluginSpec>,
    /// The host's own memory budget beyond the shared mappings (applied as RLIMIT_AS).
    pub memory_limit_bytes: u64,
    /// How long one call may take, from submit to Done, before the host is killed.
    pub call_deadline: Duration,
    /// How long the host polls its ring before sleeping (0: never spin).
    pub spin_us: u32,
    /// Each ring's data area (a power of two): bounds the messages in flight.
    pub ring_capacity_bytes: usize,
    /// Report writes outside declared ranges (costs a copy of the pool per call).
    pub checking: bool,
}

/// Why a call did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailReason {
    /// The host died (exit status or signal) during the call, or twice before beginning it.
    Crashed(ExitStatus),
    /// The call passed its deadline; the host was killed.
    Timeout,
    /// The host broke the ring protocol and was killed.
    Protocol(String),
}

/// What [`AdoLink::poll`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LinkEvent {
    Done(Done),
    /// The call waits for the shard to carry this out and [`AdoLink::answer`].
    Callback {
        call: CallId,
        request: CallbackRequest,
    },
    Log {
        level: i32,
        text: String,
    },
    Undeclared {
        call: CallId,
        ranges: Vec<Location>,
    },
    /// The call did not finish; nothing of it reached pool memory.
    Failed {
        call: CallId,
        reason: FailReason,
    },
    /// The host is gone (after a Shutdown, a crash or a kill): `restart` starts a new one.
    HostExited {
        status: ExitStatus,
    },
}

/// Why the link could not start a host.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot start the host {path}: {source}")]
    Spawn { path: PathBuf, source: std::io::Error },
    #[error("ring: {0}")]
    Ring(#[from] RingError),
    #[error("configuration: {0}")]
    Config(&'static str),
}

/// Why a message was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SubmitError {
    /// The ring to the host is full: retry after a poll.
    #[error("the host's ring is full")]
    Full,
    #[error("message too large for the ring")]
    TooLarge,
    /// No host runs (it exited, or is being killed): restart first.
    #[error("the host is not running")]
    HostDown,
}

/// Figures for statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounters {
    pub invocations: u64,
    /// Polls that found the host's wake-up signalled.
    pub wakeups: u64,
    /// Hosts that died without being asked to (timeouts not included).
    pub crashes: u64,
    /// Calls a dead host had not begun, run again on the next one.
    pub resubmitted: u64,
    /// Calls that passed their deadline.
    pub timeouts: u64,
}

/// Why a killed host was killed.
#[derive(Debug)]
enum KillCause {
    Timeout(Vec<CallId>),
    Protocol(String),
    /// The shard itself stopped the host (restart of a live host, drop).
    Stopped,
}

#[derive(Debug)]
enum HostState {
    Running { child: Child, exit_fd: OwnedFd, shutdown_sent: bool },
    Killed { child: Child, exit_fd: OwnedFd, cause: KillCause },
    Exited,
}

/// A call submitted to the host and not yet ended.
#[derive(Debug)]
struct InFlight {
    call: CallId,
    deadline: Instant,
    /// Its Invoke message, as sent.
    message: Vec<u8>,
    /// Whether it already runs a second time, on a host after the one it was first sent to.
    resubmitted: bool,
}

/// The shard's link to one pool's host process.
#[derive(Debug)]
pub struct AdoLink {
    config: AdoConfig,
    pool_fd: OwnedFd,
    ring_fd: OwnedFd,
    rings: Arc<Mapping>,
    status_fd: OwnedFd,
    status: HostStatus,
    to_host: Wake,
    to_shard: Wake,
    outbox: Producer,
    inbox: Consumer,
    state: HostState,
    /// Calls submitted and not yet Done or Failed, in submit order (so deadlines are
    /// ascending): what a new host runs again if its predecessor died before beginning them.
    in_flight: VecDeque<InFlight>,
    /// Message buffers of ended calls, for the next submits to encode into.
    spare_messages: Vec<Vec<u8>>,
    last_call: u64,
    counters: LinkCounters,
    /// Events produced outside `poll` (by `restart`), reported by the next `poll`.
    pending: Vec<LinkEvent>,
    /// Between [`AdoLink::begin_batch`] and [`AdoLink::end_batch`]: messages are queued without
    /// waking the host, which is woken once at the end (and whether it needs to be).
    batching: bool,
    wake_pending: bool,
    /// The batch's clock: read at its first submit and reused by every call of the batch.
    batch_now: Option<Instant>,
    /// Each message to the host is encoded here, then copied into the ring.
    scratch: Vec<u8>,
    /// The messages of the last drain of the host's ring.
    drained: Drained,
}

impl AdoLink {
    /// Creates the shared memory and starts a host for the pool whose memory is `pool`.
    pub fn start(config: AdoConfig, pool: BorrowedFd<'_>) -> Result<AdoLink, LinkError> {
        let capacity = config.ring_capacity_bytes;
        if !capacity.is_power_of_two() || capacity < RING_CAPACITY_MIN_BYTES {
            return Err(LinkError::Config("ring capacity must be a power of two of at least 4 KiB"));
        }
        let pool_fd = rustix::io::fcntl_dupfd_cloexec(pool, 0).map_err(std::io::Error::from)?;
        let ring_fd = Mapping::create_memfd("ferrite-ado-rings", 2 * ring_bytes(capacity))?;
        let rings = Arc::new(Mapping::map(&ring_fd)?);
        init_ring(&rings, 0, capacity)?;
        init_ring(&rings, ring_bytes(capacity), capacity)?;
        let (status_fd, status) = HostStatus::create()?;
        let mut link = AdoLink {
            outbox: Producer::open(rings.clone(), 0)?,
            inbox: Consumer::open(rings.clone(), ring_bytes(capacity))?,
            config,
            pool_fd,
            ring_fd,
            rings,
            status_fd,
            status,
            to_host: Wake::new()?,
            to_shard: Wake::new()?,
            state: HostState::Exited,
            in_flight: VecDeque::new(),
            spare_messages: Vec::new(),
            last_call: 0,
            counters: LinkCounters::default(),
            pending: Vec::new(),
            batching: false,
            wake_pending: false,
            batch_now: None,
            scratch: Vec::new(),
            drained: Drained::new(),
        };
        link.spawn()?;
        Ok(link)
    }

    fn spawn(&mut self) -> Result<(), LinkError> {
        let mut args = HostArgs {
            pool_fd: 0,
            ring_fd: 0,
            to_host_fd: 0,
            to_shard_fd: 0,
            status_fd: 0,
            ring_capacity: self.config.ring_capacity_bytes,
            memory_limit_bytes: self.config.memory_limit_bytes,
            spin_us: self.config.spin_us,
            checking: self.config.checking,
            chain: self.config.chain.clone(),
        };
        child_fds(&mut args);
        let fds = SharedFds {
            pool: self.pool_fd.as_fd(),
            rings: self.ring_fd.as_fd(),
            to_host: self.to_host.as_fd(),
            to_shard: self.to_shard.as_fd(),
            status: self.status_fd.as_fd(),
        };
        let path = self.config.host_binary.clone();
        let child = spawn_host(&path, &args, fds).map_err(|source| LinkError::Spawn { path, source })?;
        let pid = rustix::process::Pid::from_child(&child);
        let exit_fd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::NONBLOCK) {
            Ok(fd) => fd,
            Err(e) => {
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                return Err(LinkError::Io(e.into()));
            }
        };
        self.state = HostState::Running { child, exit_fd, shutdown_sent: false };
        Ok(())
    }

    /// Sends one invocation. Err(Full) is backpressure: poll, then retry.
    pub fn submit(&mut self, invocation: &Invocation) -> Result<CallId, SubmitError> {
        let call = CallId(self.last_call + 1);
        let mut message = self.spare_messages.pop().unwrap_or_default();
        message.clear();
        encode_invoke(call, invocation, &mut message);
        if let Err(error) = self.push(&message) {
            self.spare_messages.push(message);
            return Err(error);
        }
        self.last_call = call.0;
        let deadline = self.submit_time() + self.config.call_deadline;
        self.in_flight.push_back(InFlight { call, deadline, message, resubmitted: false });
        self.counters.invocations += 1;
        Ok(call)
    }

    /// Takes `call` out of flight (it ended); its message buffer is kept for a later submit.
    fn end_flight(&mut self, call: CallId) {
        // Calls end in the order they were submitted, but for a host restart's.
        let at = match self.in_flight.front() {
            Some(first) if first.call == call => Some(0),
            _ => self.in_flight.iter().position(|flight| flight.call == call),
        };
        if let Some(flight) = at.and_then(|at| self.in_flight.remove(at)) {
            self.retire_message(flight.message);
        }
    }

    /// Keeps a message buffer for later submits (a few, none of them large).
    fn retire_message(&mut self, message: Vec<u8>) {
        const SPARE_MESSAGES_MAX: usize = 64;
        const SPARE_MESSAGE_BYTES_MAX: usize = 64 << 10;
        if self.spare_messages.len() < SPARE_MESSAGES_MAX && message.capacity() <= SPARE_MESSAGE_BYTES_MAX {
            self.spare_messages.push(message);
        }
    }

    /// When a call submitted now starts its deadline. Within a batch, the clock is read once,
    /// at the batch's first submit: a call's deadline then starts at most one batch (a few
    /// microseconds of submits) early, so it may be killed that much sooner, never later, and
    /// deadlines stay in submit order.
    fn submit_time(&mut self) -> Instant {
        if self.batching {
            *self.batch_now.get_or_insert_with(Instant::now)
        } else {
            Instant::now()
        }
    }

    /// Answers a [`LinkEvent::Callback`].
    pub fn answer(&mut self, call: CallId, reply: CallbackReply) -> Result<(), SubmitError> {
        self.send(&ToHost::CallbackReply { call, reply })
    }

    /// Tells the plugins of a pool event (`FERRITE_EVENT_*`).
    pub fn pool_event(&mut self, event: u32, key: Vec<u8>) -> Result<(), SubmitError> {
        self.send(&ToHost::PoolEvent { event, key })
    }

    /// Asks the host to close its plugins and exit; `poll` reports HostExited when it has.
    pub fn begin_shutdown(&mut self) -> Result<(), SubmitError> {
        self.send(&ToHost::Shutdown)?;
        if let HostState::Running { shutdown_sent, .. } = &mut self.state {
            *shutdown_sent = true;
        }
        Ok(())
    }

    fn send(&mut self, message: &ToHost) -> Result<(), SubmitError> {
        self.send_with(|out| message.encode_into(out))
    }

    /// Sends the message `encode` writes into the link's scratch buffer.
    fn send_with(&mut self, encode: impl FnOnce(&mut Vec<u8>)) -> Result<(), SubmitError> {
        let mut scratch = std::mem::take(&mut self.scratch);
        encode(&mut scratch);
        let pushed = self.push(&scratch);
        if pushed != Err(SubmitError::TooLarge) {
            // Keep no buffer larger than a message the ring can carry.
            self.scratch = scratch;
        }
        pushed
    }

    /// Puts `message` into the host's ring and wakes the host (or notes that it must be woken
    /// at the batch's end).
    fn push(&mut self, message: &[u8]) -> Result<(), SubmitError> {
        if !matches!(self.state, HostState::Running { shutdown_sent: false, .. }) {
            return Err(SubmitError::HostDown);
        }
        match self.outbox.push(message) {
            Ok(()) => {}
            Err(RingError::Full) => return Err(SubmitError::Full),
            Err(RingError::TooLarge { .. }) => return Err(SubmitError::TooLarge),
            Err(RingError::Corrupt(what)) => {
                self.kill(KillCause::Protocol(format!("shard-to-host ring: {what}")));
                return Err(SubmitError::HostDown);
            }
        }
        if self.batching {
            self.wake_pending = true;
        } else {
            self.wake_host();
        }
        Ok(())
    }

    /// Starts a batch: the messages sent until [`AdoLink::end_batch`] wake the host once. A
    /// host on the shard's CPU, woken per message, would run each call as it arrives and take
    /// the CPU back and forth with the shard; woken once, it takes the batch in one turn.
    /// Every call of the batch counts its deadline from the batch's first submit (see
    /// `submit_time`): end the batch as soon as its messages are sent.
    pub fn begin_batch(&mut self) {
        self.batching = true;
        self.batch_now = None;
    }

    /// Ends a batch, waking the host if it sent anything and the host sleeps.
    pub fn end_batch(&mut self) {
        self.batching = false;
        self.batch_now = None;
        if std::mem::take(&mut self.wake_pending) {
            self.wake_host();
        }
    }

    /// Takes the host's pending wake-ups (the count of the eventfd `wake_fd`), once the shard
    /// saw that eventfd readable; true if there were any. `poll` leaves the eventfd alone, so a
    /// look for another reason (a call started, a deadline) costs no system call.
    pub fn take_wakeups(&mut self) -> bool {
        let signalled = self.to_shard.take().unwrap_or(false);
        if signalled {
            self.counters.wakeups += 1;
        }
        signalled
    }

    /// Promises that the shard looks at the host's ring (`poll`) before it next sleeps, so the
    /// host's answers until then need no wake-up: the host skips its eventfd write, and the
    /// shard the read and the turn of its event loop that the write would cost. `poll` ends by
    /// announcing sleep again, so an answer that arrives later wakes the shard as before. A
    /// host on the shard's CPU, woken by a submit, runs its batch before the shard resumes, so
    /// its answers are all in the ring by the promised look.
    pub fn will_poll(&self) {
        self.inbox.wake_up();
    }

    fn wake_host(&mut self) {
        if self.outbox.consumer_needs_wake() {
            // An eventfd write fails only if the descriptor is broken; the deadline then
            // catches the call.
            if let Err(e) = self.to_host.signal() {
                tracing::warn!("cannot wake the ADO host: {e}");
            }
        }
    }

    /// The eventfd the host signals: readable when `poll` has messages to report.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.to_shard.as_fd()
    }

    /// A pidfd readable once the host has exited (none while no host runs).
    pub fn exit_fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.state {
            HostState::Running { exit_fd, .. } | HostState::Killed { exit_fd, .. } => Some(exit_fd.as_fd()),
            HostState::Exited => None,
        }
    }

    /// When `poll` must run next even if nothing is signalled: the earliest call deadline, or
    /// soon while a killed host awaits reaping.
    pub fn next_deadline(&self) -> Option<Instant> {
        match self.state {
            HostState::Running { .. } => self.in_flight.front().map(|flight| flight.deadline),
            HostState::Killed { .. } => Some(Instant::now() + KILLED_RECHECK),
            HostState::Exited => None,
        }
    }

    /// The host's process id, while one runs or awaits reaping.
    pub fn host_pid(&self) -> Option<u32> {
        match &self.state {
            HostState::Running { child, .. } | HostState::Killed { child, .. } => Some(child.id()),
            HostState::Exited => None,
        }
    }

    pub fn counters(&self) -> LinkCounters {
        self.counters
    }

    /// Calls submitted and not yet reported Done or Failed.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Takes everything the host sent, enforces deadlines, and notices a dead host.
    pub fn poll(&mut self, now: Instant) -> Vec<LinkEvent> {
        let mut events = std::mem::take(&mut self.pending);
        let mut received = 0;
        loop {
            received += self.receive(&mut events);
            // Announce sleep only after the last look: the host signals only if we sleep.
            match self.inbox.prepare_sleep() {
                Ok(true) => break,
                Ok(false) => continue,
                Err(e) => {
                    self.kill(KillCause::Protocol(format!("host-to-shard ring: {e}")));
                    break;
                }
            }
        }
        self.enforce_deadlines(now);
        let killed = matches!(self.state, HostState::Killed { .. });
        if received == 0 || killed {
            let again = self.reap(&mut events, false);
            if !again.is_empty() {
                if let Err(error) = self.respawn(again, &mut events) {
                    tracing::error!("cannot start a new ADO host for the calls the last one had not begun: {error}");
                }
            }
        }
        events
    }

    /// Drains and decodes the host's ring into `events`; returns how many messages.
    fn receive(&mut self, events: &mut Vec<LinkEvent>) -> usize {
        let mut drained = std::mem::take(&mut self.drained);
        let count = match self.inbox.drain(&mut drained) {
            Ok(count) => count,
            Err(e) => {
                self.kill(KillCause::Protocol(format!("host-to-shard ring: {e}")));
                0
            }
        };
        for bytes in drained.iter() {
            match ToShard::decode(bytes) {
                Ok(message) => events.push(self.accept(message)),
                Err(e) => {
                    self.kill(KillCause::Protocol(format!("undecodable message: {e}")));
                    break;
                }
            }
        }
        self.drained = drained;
        count
    }

    fn accept(&mut self, message: ToShard) -> LinkEvent {
        match message {
            ToShard::Done(done) => {
                self.end_flight(done.call);
                LinkEvent::Done(done)
            }
            ToShard::Callback { call, request } => LinkEvent::Callback { call, request },
            ToShard::Log { level, text } => LinkEvent::Log { level, text },
            ToShard::Undeclared { call, ranges } => LinkEvent::Undeclared { call, ranges },
        }
    }

    fn enforce_deadlines(&mut self, now: Instant) {
        if !matches!(self.state, HostState::Running { .. }) {
            return;
        }
        let expired: Vec<CallId> =
            self.in_flight.iter().take_while(|flight| flight.deadline <= now).map(|flight| flight.call).collect();
        if !expired.is_empty() {
            self.kill(KillCause::Timeout(expired));
        }
    }

    /// Sends SIGKILL; the host is reaped by a later poll.
    fn kill(&mut self, cause: KillCause) {
        let state = std::mem::replace(&mut self.state, HostState::Exited);
        self.state = match state {
            HostState::Running { mut child, exit_fd, .. } => {
                if let Err(e) = child.kill() {
                    tracing::warn!("cannot kill the ADO host: {e}");
                }
                HostState::Killed { child, exit_fd, cause }
            }
            other => other,
        };
    }

    /// If the host has exited (or `block`, after a kill, until it has): takes what it sent, and
    /// settles every call in flight as the module's decision table says. Returns the calls to
    /// run again on a new host, each with the failure it gets should it not run.
    fn reap(&mut self, events: &mut Vec<LinkEvent>, block: bool) -> Vec<(InFlight, FailReason)> {
        let status = match &mut self.state {
            HostState::Running { child, .. } | HostState::Killed { child, .. } => {
                let waited = if block { child.wait().map(Some) } else { child.try_wait() };
                match waited {
                    Ok(Some(status)) => status,
                    Ok(None) => return Vec::new(),
                    Err(e) => {
                        tracing::warn!("cannot wait for the ADO host: {e}");
                        return Vec::new();
                    }
                }
            }
            HostState::Exited => return Vec::new(),
        };
        let state = std::mem::replace(&mut self.state, HostState::Exited);
        self.receive(events);
        let (timed_out, protocol, requested, shutdown) = match state {
            HostState::Killed { cause: KillCause::Timeout(calls), .. } => (calls, None, false, false),
            HostState::Killed { cause: KillCause::Protocol(reason), .. } => (Vec::new(), Some(reason), false, false),
            HostState::Killed { cause: KillCause::Stopped, .. } => (Vec::new(), None, true, false),
            HostState::Running { shutdown_sent, .. } => (Vec::new(), None, shutdown_sent, shutdown_sent),
            HostState::Exited => (Vec::new(), None, false, false),
        };
        if timed_out.is_empty() && protocol.is_none() && !requested {
            self.counters.crashes += 1;
            tracing::warn!("ADO host exited unexpectedly: {status}");
        }
        let running = self.status.running();
        let mut again = Vec::new();
        for flight in std::mem::take(&mut self.in_flight) {
            let call = flight.call;
            let reason = if timed_out.contains(&call) {
                self.counters.timeouts += 1;
                FailReason::Timeout
            } else if let Some(reason) = &protocol {
                FailReason::Protocol(reason.clone())
            } else {
                FailReason::Crashed(status)
            };
            let runs_again = Some(call) != running
                && !flight.resubmitted
                && !timed_out.contains(&call)
                && protocol.is_none()
                && !shutdown;
            if runs_again {
                again.push((flight, reason));
            } else {
                self.retire_message(flight.message);
                events.push(LinkEvent::Failed { call, reason });
            }
        }
        events.push(LinkEvent::HostExited { status });
        again
    }

    /// Starts a fresh host after the old one exited (killing and reaping it first if it still
    /// runs): the call it was running is reported Failed by the next poll, and the calls it had
    /// not begun run on the new host.
    pub fn restart(&mut self) -> Result<(), LinkError> {
        let again = self.stop_host();
        let mut events = std::mem::take(&mut self.pending);
        let started = self.respawn(again, &mut events);
        self.pending = events;
        started
    }

    /// Starts a new host on fresh rings and sends it `again` (the calls a dead host had not
    /// begun), each with a new deadline; a call that cannot be sent, or every one if no host
    /// starts, is reported Failed with its reason.
    fn respawn(&mut self, again: Vec<(InFlight, FailReason)>, events: &mut Vec<LinkEvent>) -> Result<(), LinkError> {
        let started = self.reset_shared().and_then(|()| self.spawn());
        let now = Instant::now();
        for (mut flight, reason) in again {
            if started.is_ok() && self.push(&flight.message).is_ok() {
                flight.resubmitted = true;
                flight.deadline = now + self.config.call_deadline;
                self.counters.resubmitted += 1;
                self.in_flight.push_back(flight);
            } else {
                self.retire_message(flight.message);
                events.push(LinkEvent::Failed { call: flight.call, reason });
            }
        }
        started
    }

    /// Empties the rings, the wake-ups and the status area for a new host (only while none runs).
    fn reset_shared(&mut self) -> Result<(), LinkError> {
        let capacity = self.config.ring_capacity_bytes;
        init_ring(&self.rings, 0, capacity)?;
        init_ring(&self.rings, ring_bytes(capacity), capacity)?;
        self.status.reset().map_err(std::io::Error::other)?;
        self.outbox = Producer::open(self.rings.clone(), 0)?;
        self.inbox = Consumer::open(self.rings.clone(), ring_bytes(capacity))?;
        self.to_host.take()?;
        self.to_shard.take()?;
        Ok(())
    }

    /// Kills and reaps a host that still runs; returns the calls it had not begun.
    fn stop_host(&mut self) -> Vec<(InFlight, FailReason)> {
        if matches!(self.state, HostState::Running { .. }) {
            self.kill(KillCause::Stopped);
        }
        let mut events = std::mem::take(&mut self.pending);
        let again = self.reap(&mut events, true);
        self.pending = events;
        again
    }
}

impl Drop for AdoLink {
    /// Kills and reaps the host so no process outlives the link. Use `begin_shutdown` first for
    /// a graceful close.
    fn drop(&mut self) {
        self.stop_host();
    }
}
