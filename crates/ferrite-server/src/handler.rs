//! A shard's state and how it answers each request.
//!
//! Everything here is synchronous and runs on the shard's thread: the connection task decodes the
//! frames it has buffered, calls [`ShardState::handle`] for each, and writes the responses once.

mod administer;
mod authorize;
mod cluster;
pub(crate) mod configure;
mod direct;
mod invoke;
mod invoke_commit;
mod invoke_hosts;
mod invoke_keys;
mod invoke_reads;

use std::sync::Arc;

use foldhash::HashMap;

use bytes::BytesMut;
use ferrite_proto::{
    shard_for_pool, Attribute, CreatePoolFlags, Durability, ErrorCode, FindKind, Header, HelloReply, Limits, Opcode,
    PoolHandle, ProtocolError, PutFlags, Request, Response, FIND_REPLY_KEY_BYTES_MAX, FIND_SCAN_KEYS_MAX,
    PROTOCOL_VERSION,
};
use ferrite_store::persistence::wal::{Lsn, WalError};
use ferrite_store::{find_by_scan, FindBudget, FindQuery, PoolSpec, PutMode, PutOutcome, StoreError, WriteFootprint};
use tokio::sync::watch;

use crate::ado::{AdoSettings, PoolCalls};
use crate::cluster::gate::{concerns_group, Gate};
use crate::completion::Completion;
use crate::durability::{DurableGate, ShardDurability};
use crate::low_load_poll::LowLoadPoll;
use crate::plugins::PluginRegistry;
use crate::pools::{CreateRefused, NewPool, Pool, Pools};
use crate::session::Session;
use crate::stats::{Admission, Op, ShardStats, Traffic};
use crate::write_through::WriteThrough;
pub(crate) use authorize::{Authenticating, WRONG_PASSWORD_MESSAGE};
pub(crate) use direct::{DirectReads, Transfers, IN_PLACE_PIECE_BYTES_MIN, TRANSFERS_PER_SESSION_MAX};
pub(crate) use invoke::{Accepted, Invoke};

/// Whether a connection goes on after a request.
#[derive(Debug, Clone)]
pub(crate) enum Flow {
    Continue,
    Close,
    /// The answer comes through `completion`. `consumed`: the request was taken (a plugin
    /// call); otherwise it waits for a key a call holds and runs again once woken.
    Wait {
        completion: Arc<Completion>,
        consumed: bool,
    },
}

/// A request that failed: the code and message the client receives.
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: ErrorCode,
    pub message: String,
    /// Close the connection after answering: the peer is not a client we can talk to.
    close: bool,
    /// In cluster mode: this node does not lead the shard's group; the client is sent a
    /// `not_leader` frame naming the leader instead of an `error` frame (see `cluster.rs`).
    redirect: Option<Box<ferrite_proto::NotLeader>>,
}

impl Failure {
    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Failure { code, message: message.into(), close: false, redirect: None }
    }

    fn closing(code: ErrorCode, message: impl Into<String>) -> Self {
        Failure { close: true, ..Failure::new(code, message) }
    }
}

impl From<ProtocolError> for Failure {
    fn from(error: ProtocolError) -> Self {
        Failure::new(error.code(), error.to_string())
    }
}

fn store_failure(error: StoreError, pool: &Pool) -> Failure {
    let code = match error {
        StoreError::KeyExists => ErrorCode::KeyExists,
        StoreError::KeyNotFound => ErrorCode::KeyNotFound,
        StoreError::PoolFull { .. } => ErrorCode::PoolFull,
        StoreError::KeyTooLarge { .. } => ErrorCode::KeyTooLarge,
        StoreError::ValueTooLarge { .. } => ErrorCode::ValueTooLarge,
        _ => ErrorCode::Internal,
    };
    Failure::new(code, format!("pool '{}': {error}", pool.name))
}

fn put_mode(flags: PutFlags) -> PutMode {
    if flags.contains(PutFlags::CREATE_ONLY) {
        PutMode::CreateOnly
    } else if flags.contains(PutFlags::UPDATE_ONLY) {
        PutMode::UpdateOnly
    } else {
        PutMode::Upsert
    }
}

/// The pool behind `handle`, if this session has it open.
fn open_pool<'p>(pools: &'p Pools, session: &Session, handle: PoolHandle) -> Result<&'p Pool, Failure> {
    match pools.get(handle) {
        Some(pool) if session.is_open(handle) => Ok(pool),
        _ => Err(Failure::new(ErrorCode::PoolNotOpen, format!("pool handle {} is not open in this session", handle.0))),
    }
}

fn open_pool_mut<'p>(pools: &'p mut Pools, session: &Session, handle: PoolHandle) -> Result<&'p mut Pool, Failure> {
    match pools.get_mut(handle) {
        Some(pool) if session.is_open(handle) => Ok(pool),
        _ => Err(Failure::new(ErrorCode::PoolNotOpen, format!("pool handle {} is not open in this session", handle.0))),
    }
}

/// Log bytes waiting for the disk past which the log is asked to write them without a sync (see
/// [`ShardState::logged`]).
const ASYNC_PENDING_BYTES_MAX: u64 = 1024 * 1024;

/// Log bytes an `async` write may leave waiting for the disk before its connection waits for a
/// write (see [`backlog_wait`]): each connection adds at most one turn's requests past it before
/// it waits, however fast its client writes.
const ASYNC_UNTAKEN_BYTES_MAX: u64 = 4 * 1024 * 1024;

/// What the connection of an `async` write whose record is `lsn` waits for, with `pending` log
/// bytes untaken: nothing up to [`ASYNC_UNTAKEN_BYTES_MAX`]; past it, the write of the batch on
/// its way to the disk (records up to `taken`, of which the log has written up to `written`) if
/// there is one, else the write of its own record. Waiting for the batch on its way lets the
/// shard fill the next batch while the disk writes the one before. The bound is the same with a
/// batch on its way as without: a lower one (1 MiB) made the shard stop for each batch's write,
/// idle a quarter of the time under a stream of large values. Waits are for the write, not the
/// sync: a flush per megabyte held the disk at a fraction of its bandwidth.
fn backlog_wait(pending: u64, lsn: Lsn, taken: Lsn, written: Lsn) -> Option<Lsn> {
    if pending <= ASYNC_UNTAKEN_BYTES_MAX {
        None
    } else if taken > written {
        Some(taken)
    } else {
        Some(lsn)
    }
}

/// What a client is told when the shard's log refuses or fails.
fn log_failure(shard: u16, error: &WalError) -> Failure {
    match error {
        WalError::NoSpace(detail) => Failure::new(
            ErrorCode::NoSpace,
            format!(
                "shard {shard}: no space left on the device for the write-ahead log ({detail}); nothing was \
                 written, and writes succeed again once space is freed"
            ),
        ),
        other => Failure::new(
            ErrorCode::StorageFailed,
            format!(
                "shard {shard}: the write-ahead log failed ({other}); the shard refuses writes until the server is \
                 restarted; acknowledged writes are safe"
            ),
        ),
    }
}

/// A value stored by a direct put, longer than a response frame may carry.
pub(crate) fn value_too_long_for_a_frame(pool: &Pool, len: usize, inline_max: u32) -> Failure {
    Failure::new(
        ErrorCode::ValueTooLarge,
        format!(
            "pool '{}': the value is {len} bytes, longer than the inline limit of {inline_max}; read it with a \
             direct read (get_direct)",
            pool.name
        ),
    )
}

fn key_not_found(pool: &Pool) -> Failure {
    Failure::new(ErrorCode::KeyNotFound, format!("pool '{}': key not found", pool.name))
}

#[derive(Debug)]
pub(crate) struct ShardState {
    pub index: u16,
    /// `host:port` of every shard of the server, announced in the handshake.
    pub shard_addresses: Arc<[String]>,
    pub limits: Limits,
    pub connections_max: u64,
    /// The connection limit and timeouts, as `ferrite stats` shows them.
    pub admission: Admission,
    /// Largest pool a client may create: engines reserve memory in proportion to a pool's size
    /// (hstore several times it), so the size a client asks for is bounded before anything is
    /// allocated.
    pub pool_bytes_max: u64,
    pub pools: Pools,
    pub stats: ShardStats,
    /// The log, sync thread and checkpoints of a shard on the `ssd` backing.
    pub durability: Option<ShardDurability>,
    /// Set to stop the shard: by the server's shutdown, or by [`ShardState::halt`].
    pub stop: watch::Sender<bool>,
    /// Why the shard stopped itself, if it did.
    pub halted: Option<String>,
    /// The shard's polling after a batch (see `low_load_poll.rs`).
    pub low_load_poll: LowLoadPoll,
    /// The resume cursor of the last `find` over a pool without an index, which the response
    /// borrows: see [`find`].
    pub find_cursor: [u8; 8],
    /// The plugins pools' chains may name.
    pub plugins: Arc<PluginRegistry>,
    /// How plugin hosts are started and contained.
    pub ado: AdoSettings,
    /// The plugin calls of each pool that has a host.
    pub calls: HashMap<PoolHandle, PoolCalls>,
    /// Hosts (pool, host number) started since the shard's plugin task last looked, and its
    /// signal.
    pub new_hosts: Vec<(PoolHandle, u64)>,
    /// Hosts started so far: numbers them.
    pub hosts_started: u64,
    /// Pools with calls queued since their host was last given work (see `submit_calls`).
    pub to_submit: Vec<PoolHandle>,
    /// Told when a host starts or begins to stop, for the shard's plugin task to watch it.
    pub host_started: Arc<tokio::sync::Notify>,
    /// Told when calls are queued, for the shard's submitting task (see `submit_soon`).
    pub calls_queued: Arc<tokio::sync::Notify>,
    /// Hosts asked to stop, kept until they exit or their grace runs out (then killed).
    pub retiring: Vec<(ferrite_ado::AdoLink, std::time::Instant)>,
    /// Backups asked for and not yet begun: the directory and the caller's answer.
    pub backups: Vec<crate::backup::PendingBackup>,
    /// Told when a backup is asked for, for the shard's backup task.
    pub backups_queued: Arc<tokio::sync::Notify>,
    /// Where backups may go (`[backup] root`): anywhere when `None`.
    pub backup_root: Option<std::path::PathBuf>,
    /// Bytes and latencies its connections count.
    pub traffic: Arc<Traffic>,
    /// The pool of the request being answered, if it names one, and its kind: its failure is
    /// counted there.
    pub current_pool: Option<PoolHandle>,
    pub current_op: Op,
    /// Users, their rights and their quotas, shared by every shard.
    pub auth: Arc<crate::auth::Auth>,
    /// Pools whose secondary index is being built (`configure_pool`), and the signal of the
    /// shard's index task.
    pub index_builds: Vec<PoolHandle>,
    pub index_builds_queued: Arc<tokio::sync::Notify>,
    /// Each user's holdings and quota as named counters, for the `get_statistics` response that
    /// borrows them (see `gather_user_statistics`).
    pub user_statistics: Vec<(String, u64)>,
    /// Largest value a direct put may store.
    pub direct_value_bytes_max: u64,
    /// Keys held by open direct reads, and the writers waiting for them.
    pub direct_reads: direct::DirectReads,
    /// In cluster mode: the cluster this shard's group belongs to. `None`: a single server.
    pub cluster: Option<crate::cluster::ShardCluster>,
    /// In cluster mode: this shard's replica of its group (its Raft log and state).
    pub replication: Option<crate::cluster::replication::Replication>,
}

impl ShardState {
    /// What a connection of this shard waits on before sending responses that need durability.
    pub fn durable_gate(&self) -> Option<DurableGate> {
        self.durability.as_ref().map(|durability| durability.gate.clone())
    }

    /// How many replicas of this shard's group other than this node hold the log up to `lsn`
    /// (RESP's `WAIT`): as the leader last learned their progress; always 0 on a single server,
    /// which has no replicas, and on a follower.
    pub fn replicas_holding(&self, lsn: Lsn) -> u64 {
        self.cluster.as_ref().map_or(0, |cluster| cluster.map.with(|view| view.replicas_holding(cluster.group, lsn)))
    }

    /// Refuses a write before it changes anything if the log has failed or has no room for the
    /// record of a write that changes `footprint` of pool memory, growth included (a full disk):
    /// a write must never change pool memory that the log cannot record.
    fn admit_write(&self, footprint: WriteFootprint) -> Result<(), Failure> {
        let Some(durability) = &self.durability else { return Ok(()) };
        durability.log.reserve_transaction(footprint).map_err(|error| log_failure(self.index, &error))
    }

    /// Accounts for a write just applied: a `sync` one makes the batch's responses (and later
    /// reads) wait for its record to be durable. An `async` one is answered at once; past
    /// [`ASYNC_PENDING_BYTES_MAX`] of log waiting, the backlog is handed to the disk without a
    /// sync ([`SharedLog::request_write`]): nobody waits for its durability yet, and the next
    /// sync (a `sync` write's, such as a direct put's commit, or the commit interval's) covers
    /// it. Past [`ASYNC_UNTAKEN_BYTES_MAX`] its connection reads nothing more until a write
    /// ([`backlog_wait`]), so clients writing faster than the disk slow to its pace instead of
    /// growing the log's buffer without bound. If the log could not take the record (it failed
    /// under the write, after the room was reserved), pool memory holds a change nothing
    /// recorded: the shard stops before any answer can reveal it.
    fn logged(&mut self, sync: bool, session: &mut Session) -> Result<(), Failure> {
        let lsn = self.log_position(sync)?;
        session.last_write_lsn = lsn;
        if sync {
            session.wait_lsn = session.wait_lsn.max(lsn);
        } else {
            self.pace_backlog(lsn, true, session);
        }
        Ok(())
    }

    /// Accounts for a direct put's piece just logged, an `async` write (see [`Self::logged`]),
    /// except that the piece that completes its value leaves the backlog for the put's commit,
    /// which follows it, unless the connection must wait: one write and one flush then take the
    /// value's last bytes and its commit record, where handing them over at once made two writes.
    fn logged_piece(&mut self, completes_value: bool, session: &mut Session) -> Result<(), Failure> {
        let lsn = self.log_position(false)?;
        session.last_write_lsn = lsn;
        self.pace_backlog(lsn, !completes_value, session);
        Ok(())
    }

    /// Past [`ASYNC_PENDING_BYTES_MAX`] of log waiting, hands the backlog to the disk (if
    /// `hand_over`, or if the session must wait for it) and, past [`ASYNC_UNTAKEN_BYTES_MAX`],
    /// makes the session wait (see [`Self::logged`]).
    fn pace_backlog(&self, lsn: Lsn, hand_over: bool, session: &mut Session) {
        let Some(durability) = self.durability.as_ref() else { return };
        let log = &durability.log;
        let pending = log.pending_bytes();
        if pending <= ASYNC_PENDING_BYTES_MAX {
            return;
        }
        let wait = backlog_wait(pending, lsn, log.taken_lsn(), log.written_lsn());
        if hand_over || wait.is_some() {
            // Asked even with a batch on its way: the sync thread then takes the backlog the
            // moment that batch is written, and the disk does not wait for this connection's
            // next write to be asked again.
            log.request_write();
        }
        if let Some(wait) = wait {
            session.backlog_lsn = session.backlog_lsn.max(wait);
        }
    }

    /// The LSN of the write just applied (0 without a log); a `sync` one becomes what reads
    /// wait for. Stops the shard if the log could not take the write (see [`Self::logged`]).
    fn log_position(&mut self, sync: bool) -> Result<Lsn, Failure> {
        let Some(durability) = &mut self.durability else { return Ok(0) };
        let lsn = match durability.log.appended() {
            Ok(lsn) => lsn,
            Err(error) => {
                return Err(self.halt(format!("a write changed pool memory but could not be logged: {error}")))
            }
        };
        if sync {
            durability.visible_lsn = lsn;
        }
        Ok(lsn)
    }

    /// Stops the shard at once: pool memory holds a change its log does not, so nothing may be
    /// answered, exposed or checkpointed from now on. Every connection of the shard is closed
    /// without the responses it holds (as on shutdown, but the shard's thread then ends with an
    /// error, which stops the server); the restart recovers what the log holds. Returns what the
    /// request that found out would be told, were anything still sent.
    pub fn halt(&mut self, reason: String) -> Failure {
        tracing::error!(shard = self.index, %reason, "stopping the shard: it cannot go on without losing or exposing data");
        self.halted.get_or_insert(reason.clone());
        if let Some(durability) = &self.durability {
            durability.log.fail(&reason);
        }
        self.stop.send_replace(true);
        Failure::closing(ErrorCode::StorageFailed, format!("shard {}: {reason}; the shard stopped", self.index))
    }

    /// A read's response waits until every `sync` write applied before it is durable. So does
    /// every answer whose content depends on pool state, failures included: "key exists", "not
    /// found" and "pool exists" reveal state just as a value does, and a client must never act
    /// on a state that a crash could take back.
    /// A stopped shard answers nothing but this; other connections may still run in the loop
    /// turn that stopped it.
    fn refuse_if_halted(&self) -> Result<(), Failure> {
        match &self.halted {
            Some(reason) => {
                Err(Failure::closing(ErrorCode::StorageFailed, format!("shard {} stopped: {reason}", self.index)))
            }
            None => Ok(()),
        }
    }

    fn reading(&self, session: &mut Session) {
        if let Some(durability) = &self.durability {
            session.wait_lsn = session.wait_lsn.max(durability.visible_lsn);
        }
    }

    /// Answers one request frame, appending the response frame to `out`; a large value in it
    /// goes through `through`, which may write it to the socket behind `out` at once.
    pub fn handle(
        &mut self,
        header: &Header,
        body: &[u8],
        session: &mut Session,
        now_ns: u64,
        out: &mut BytesMut,
        through: &WriteThrough<'_>,
    ) -> Flow {
        self.stats.requests += 1;
        self.begin_request();
        let request = match Request::decode(header, body) {
            Ok(request) => request,
            // Before the handshake we do not know the peer speaks our protocol at all.
            Err(error) if !session.handshaken => {
                return self.answer_error(&Failure { close: true, ..Failure::from(error) }, header.request_id, out)
            }
            Err(error) => return self.answer_error(&Failure::from(error), header.request_id, out),
        };
        if session.handshaken && concerns_group(&request) {
            match self.group_gate() {
                Gate::Open => {}
                Gate::Wait(completion) => {
                    // Counted when it runs again.
                    self.stats.requests -= 1;
                    return Flow::Wait { completion, consumed: false };
                }
                Gate::Refuse(failure) => return self.answer_error(&failure, header.request_id, out),
            }
        }
        let mut opcode = Opcode::Error;
        let outcome = match self.answer_later(&request, header, session) {
            Some(Ok(Accepted::Later(completion))) => {
                // A native connection goes on answering; the answer leaves when ready.
                session.deferred.push(completion);
                return Flow::Continue;
            }
            Some(Ok(Accepted::Blocked(completion))) => {
                // Counted when it runs again.
                self.stats.requests -= 1;
                return Flow::Wait { completion, consumed: false };
            }
            Some(Err(failure)) => Err(failure),
            None => match self.signal_of(&request, session) {
                Some(signal) => return self.answer_signalled(signal, request, header, session, now_ns, out),
                None => {
                    opcode = request.opcode();
                    self.execute(request, session, now_ns)
                }
            },
        };
        match outcome {
            Ok(response) => {
                let value = response.encode_answer_head(opcode, header.request_id, out);
                if !value.is_empty() {
                    through.append(out, value, session.wait_lsn);
                }
                Flow::Continue
            }
            Err(failure) => self.answer_error(&failure, header.request_id, out),
        }
    }

    /// Runs a request that `[ado] signals` signals to its pool's chain: a successful one is
    /// answered once the chain has handled the signal; a failed one at once.
    fn answer_signalled(
        &mut self,
        signal: crate::ado::Signals,
        request: Request<'_>,
        header: &Header,
        session: &mut Session,
        now_ns: u64,
        out: &mut BytesMut,
    ) -> Flow {
        let mut held = BytesMut::new();
        let outcome = match self.execute(request, session, now_ns) {
            Ok(response) => {
                response.encode(header.request_id, &mut held);
                Ok(())
            }
            Err(failure) => Err(failure),
        };
        let failure = match outcome {
            Ok(()) => {
                if let Err(failure) = self.ensure_host(signal.pool) {
                    // The request succeeded: it is answered, unsignalled.
                    tracing::warn!(shard = self.index, "cannot signal a plugin chain: {}", failure.message);
                    out.extend_from_slice(&held);
                    return Flow::Continue;
                }
                session.deferred.push(self.signal(signal, held, session));
                return Flow::Continue;
            }
            Err(failure) => failure,
        };
        self.answer_error(&failure, header.request_id, out)
    }

    /// Counts a request on `pool` (if it names one), whose failure, if it fails, is then counted
    /// there too ([`Self::count_failure`]).
    pub(crate) fn count_pool_request(&mut self, pool: Option<PoolHandle>, op: Op) {
        self.current_pool = pool;
        self.current_op = op;
        if let Some(pool) = pool.and_then(|pool| self.pools.get_mut(pool)) {
            pool.counters.ops[op as usize] += 1;
        }
    }

    /// Counts a request answered with an error, on the shard and on its pool.
    pub(crate) fn count_failure(&mut self) {
        let op = std::mem::replace(&mut self.current_op, Op::Other) as usize;
        self.stats.failures += 1;
        self.stats.failures_by_op[op] += 1;
        if let Some(pool) = self.current_pool.take().and_then(|pool| self.pools.get_mut(pool)) {
            pool.counters.failures[op] += 1;
        }
    }

    /// A new request begins: nothing is known of it yet.
    pub(crate) fn begin_request(&mut self) {
        self.current_pool = None;
        self.current_op = Op::Other;
    }

    /// Answers a request that failed with its error frame; closes the connection if it must.
    fn answer_error(&mut self, failure: &Failure, request_id: u64, out: &mut BytesMut) -> Flow {
        self.count_failure();
        failure.encode(request_id, out);
        if failure.close {
            Flow::Close
        } else {
            Flow::Continue
        }
    }

    /// Answers a frame whose body is larger than the limit; the caller skips the body.
    pub fn reject_oversized(&mut self, header: &Header, session: &Session, max: usize, out: &mut BytesMut) -> Flow {
        self.stats.requests += 1;
        self.stats.failures += 1;
        let message = format!("frame body of {} bytes exceeds the limit of {max}", header.body_len);
        Response::Error { code: ErrorCode::FrameTooLarge, message: &message }.encode(header.request_id, out);
        if session.handshaken {
            Flow::Continue
        } else {
            Flow::Close
        }
    }

    /// Releases every pool a finished session still held open.
    pub fn end_session(&mut self, session: &mut Session) {
        if !session.transfers.is_empty() {
            self.end_transfers(session);
        }
        for (handle, opens) in session.drain_opens() {
            if let Some(pool) = self.pools.get_mut(handle) {
                pool.open_count -= opens;
            }
            self.stop_idle_host(handle);
        }
        if let Some(user) = session.identity.user() {
            self.auth.usage.disconnect(user);
        }
        self.stats.clients -= 1;
    }

    /// One step of a RESP `SCAN` over the pool's hash table, whether or not it has an index:
    /// the keys `query` matches, walking home buckets from `cursor` until `limits` are reached,
    /// and the cursor to continue from (0 once the walk is done). A step always walks at least one
    /// bucket, so a walk always ends. Every key present for a whole walk is returned at least
    /// once, whatever changes between the steps (see `Store::scan`).
    pub(crate) fn scan_step<'s>(
        &'s mut self,
        session: &mut Session,
        pool: PoolHandle,
        query: &FindQuery<'_>,
        cursor: u64,
        limits: ScanLimits,
    ) -> Result<(u64, Vec<&'s [u8]>), Failure> {
        self.refuse_if_halted()?;
        self.require(session, pool, ferrite_auth::Rights::READ)?;
        self.reading(session);
        self.stats.finds += 1;
        let store = open_pool(&self.pools, session, pool)?.store.as_ref();
        let (mut cursor, mut keys, mut key_bytes) = (cursor, Vec::new(), 0);
        for _ in 0..limits.homes.max(1) {
            cursor = store.scan(cursor, 1, &mut |key| {
                if query.matches(key) {
                    key_bytes += key.len();
                    keys.push(key);
                }
            });
            if cursor == 0 || keys.len() >= limits.keys || key_bytes >= limits.key_bytes {
                break;
            }
        }
        Ok((cursor, keys))
    }

    /// Takes the requests whose answer may come later: invocations, and requests on a key a
    /// plugin call holds. `None` for every other request, which `execute` answers now.
    fn answer_later(
        &mut self,
        request: &Request<'_>,
        header: &Header,
        session: &mut Session,
    ) -> Option<Result<Accepted, Failure>> {
        if let Request::Hello { version, auth, .. } = *request {
            return self.authenticate_hello(version, auth, session);
        }
        if let Request::ConfigurePool { name, setting } = *request {
            return Some(
                self.checked(request, session)
                    .and_then(|()| self.configure_pool(name, setting, header.request_id, session)),
            );
        }
        if let Request::Backup { dir } = *request {
            return Some(
                self.checked(request, session).and_then(|()| self.queue_backup(dir, header.request_id, session)),
            );
        }
        if let Request::ClusterAdmin(admin) = request {
            return Some(
                self.checked(request, session).and_then(|()| self.cluster_admin(admin, header.request_id, session)),
            );
        }
        if let Some(invoke) = Invoke::of(request, header.request_id) {
            return Some(self.checked(request, session).and_then(|()| self.invoke(invoke, session)));
        }
        let (pool, key, writes) = match *request {
            Request::Put { pool, key, .. } | Request::Erase { pool, key } | Request::PutOffset { pool, key, .. } => {
                (pool, key, true)
            }
            Request::Get { pool, key }
            | Request::GetAttribute { pool, key, .. }
            | Request::GetDirect { pool, key, .. } => (pool, key, false),
            Request::EndTransfer { transfer, flags } if !flags.aborts() => {
                let (pool, key) = session.transfers.put_target(transfer)?;
                let own_reads = session.transfers.reads_of(pool, key);
                let key = key.to_vec();
                if !self.may_wait(session, pool, true) {
                    return None;
                }
                return self.wait_for_key(pool, &key, true, own_reads).map(|waiting| Ok(Accepted::Blocked(waiting)));
            }
            _ => return None,
        };
        // A request `execute` would refuse is answered at once: waiting first would tell its
        // session which keys other sessions hold.
        if !self.may_wait(session, pool, writes) {
            return None;
        }
        let own_reads = session.transfers.reads_of(pool, key);
        self.wait_for_key(pool, key, writes, own_reads).map(|waiting| Ok(Accepted::Blocked(waiting)))
    }

    /// The checks `execute` makes of every request, for those answered elsewhere.
    fn checked(&mut self, request: &Request<'_>, session: &mut Session) -> Result<(), Failure> {
        self.refuse_if_halted()?;
        if !session.handshaken {
            return Err(Failure::closing(
                ErrorCode::HandshakeRequired,
                "the first message on a connection must be hello",
            ));
        }
        request.check(&self.limits)?;
        self.authorize(request, session)
    }

    /// What every request passes before it runs: the shard is not stopped, the session has shaken
    /// hands (unless this is its hello), the request is within the limits, the session holds the
    /// rights it needs, and a replica leads the group where the request must run on its leader.
    /// Counts the request, on its pool too.
    fn admit(&mut self, request: &Request<'_>, session: &mut Session) -> Result<(), Failure> {
        self.refuse_if_halted()?;
        if !session.handshaken && !matches!(request, Request::Hello { .. }) {
            return Err(Failure::closing(
                ErrorCode::HandshakeRequired,
                "the first message on a connection must be hello",
            ));
        }
        let op = Op::of(request);
        session.batch_ops[op as usize] += 1;
        self.count_pool_request(pool_of(request), op);
        request.check(&self.limits)?;
        self.authorize(request, session)?;
        self.refuse_unless_leading(request)
    }

    pub(crate) fn execute<'s>(
        &'s mut self,
        request: Request<'_>,
        session: &mut Session,
        now_ns: u64,
    ) -> Result<Response<'s>, Failure> {
        self.admit(&request, session)?;
        match request {
            Request::Hello { version, .. } => self.hello(version, session),
            Request::CreatePool { name, size_bytes, expected_objects, flags, plugins } => {
                self.create_pool(name, PoolSpec { size_bytes, expected_objects }, flags, plugins, session)
            }
            Request::OpenPool { name } => {
                self.reading(session);
                self.check_owner(name)?;
                let handle = self.pools.find(name).ok_or_else(|| self.pool_not_found(name))?;
                self.record_open(handle, session);
                Ok(Response::PoolOpened { pool: handle })
            }
            Request::ClosePool { pool } => {
                if !session.record_close(pool) {
                    return Err(Failure::new(
                        ErrorCode::PoolNotOpen,
                        format!("pool handle {} is not open in this session", pool.0),
                    ));
                }
                if let Some(open) = self.pools.get_mut(pool) {
                    open.open_count -= 1;
                }
                self.stop_idle_host(pool);
                Ok(Response::PoolClosed)
            }
            Request::DeletePool { name } => self.delete_pool(name, session),
            Request::ListPools => {
                self.reading(session);
                let mut infos = self.pools.infos();
                if session.identity.user().is_some() {
                    infos.retain(|info| !self.rights_on(&session.identity, info.name).is_empty());
                }
                Ok(Response::Pools(infos))
            }
            Request::DescribePools { name } => {
                self.reading(session);
                let mut descriptions = self.pools.descriptions(name);
                if session.identity.user().is_some() {
                    descriptions.retain(|pool| !self.rights_on(&session.identity, pool.info.name).is_empty());
                }
                Ok(Response::PoolDescriptions(descriptions))
            }
            Request::Put { pool, flags, key, value } => {
                if put_mode(flags) != PutMode::Upsert {
                    // Success or failure says whether the key was there.
                    self.reading(session);
                }
                let footprint =
                    open_pool(&self.pools, session, pool)?.store.put_footprint(key.len() as u64, value.len() as u64);
                self.admit_write(footprint)?;
                let handle = pool;
                let pool = open_pool_mut(&mut self.pools, session, pool)?;
                // Plugins that run are told of a value whose length a put changes.
                let length_before = match self.calls.contains_key(&handle) {
                    true => pool.store.attributes(key).map(|attributes| attributes.length),
                    false => None,
                };
                let outcome =
                    pool.store.put(key, value, put_mode(flags), now_ns).map_err(|e| store_failure(e, pool))?;
                if let (PutOutcome::Inserted, Some(index)) = (outcome, &mut pool.index) {
                    index.insert(key);
                }
                let sync = match flags.durability() {
                    Some(durability) => durability == Durability::Sync,
                    None => !pool.async_default,
                };
                self.stats.puts += 1;
                self.logged(sync, session)?;
                if length_before.is_some_and(|length| length != value.len() as u64) {
                    self.tell_plugins(handle, ferrite_plugin::abi::EVENT_RESIZE, key);
                }
                Ok(Response::Stored)
            }
            Request::Get { pool, key } => {
                self.reading(session);
                let pool = open_pool(&self.pools, session, pool)?;
                let value = pool.store.get(key).ok_or_else(|| key_not_found(pool))?;
                if value.len() > self.limits.value_bytes_max as usize {
                    return Err(value_too_long_for_a_frame(pool, value.len(), self.limits.value_bytes_max));
                }
                self.stats.gets += 1;
                Ok(Response::Value(value))
            }
            Request::Erase { pool: handle, key } => {
                self.reading(session);
                self.admit_write(open_pool(&self.pools, session, handle)?.store.erase_footprint())?;
                let pool = open_pool_mut(&mut self.pools, session, handle)?;
                pool.store.erase(key).map_err(|e| store_failure(e, pool))?;
                if let Some(index) = &mut pool.index {
                    index.remove(key);
                }
                let sync = !pool.async_default;
                self.stats.erases += 1;
                self.logged(sync, session)?;
                self.tell_plugins(handle, ferrite_plugin::abi::EVENT_ERASE, key);
                Ok(Response::Erased)
            }
            Request::Count { pool } => {
                self.reading(session);
                Ok(Response::Count(open_pool(&self.pools, session, pool)?.store.count()))
            }
            Request::GetAttribute { pool, attribute, key } => {
                self.reading(session);
                let pool = open_pool(&self.pools, session, pool)?;
                Ok(Response::Attribute(attribute_value(pool, attribute, key)?))
            }
            Request::Find { pool, kind, pattern, after, limit } => {
                self.reading(session);
                let pool = open_pool(&self.pools, session, pool)?;
                let found = find(pool, FindStep { kind, pattern, after, limit }, &mut self.find_cursor)?;
                self.stats.finds += 1;
                Ok(found)
            }
            Request::PutDirect { pool, flags, transfer, length, key } => {
                self.put_direct(pool, flags, transfer, length, key, session)
            }
            Request::DirectWrite { transfer, offset, bytes } => {
                self.direct_write(transfer, offset, direct::Piece::Bytes(bytes), session)
            }
            Request::GetDirect { pool, transfer, key } => self.get_direct(pool, transfer, key, session),
            Request::DirectRead { transfer, offset, length } => self.direct_read(transfer, offset, length, session),
            Request::EndTransfer { transfer, flags } => self.end_transfer(transfer, flags, session, now_ns),
            Request::PutOffset { pool, flags, offset, key, bytes } => {
                self.put_offset(direct::RangeWrite { pool, flags, offset, key, bytes }, session, now_ns)
            }
            // The native connection takes invocations before they get here (`answer_later`); no
            // other path sends them.
            Request::InvokeAdo { .. } | Request::InvokePutAdo { .. } => {
                Err(Failure::new(ErrorCode::InvalidArgument, "plugins are invoked through the native protocol"))
            }
            Request::GetStatistics => {
                let durability = self.durability.as_ref().map(ShardDurability::report);
                let mut report = self.stats.report(self.index, self.pools.totals(), durability, self.admission);
                // 0: no users file, every client may do everything.
                let users = if self.auth.enabled() { self.auth.users().users.len() as u64 } else { 0 };
                report.push(ferrite_proto::Statistic { name: "users", value: users });
                self.gather_user_statistics(session);
                let per_user =
                    self.user_statistics.iter().map(|(name, value)| ferrite_proto::Statistic { name, value: *value });
                report.extend(per_user);
                Ok(Response::Statistics(report))
            }
            // Taken by `answer_later` on native connections; no other front sends them.
            Request::Backup { .. } => {
                Err(Failure::new(ErrorCode::InvalidArgument, "a backup is asked for on a native connection"))
            }
            Request::ConfigurePool { .. } => {
                Err(Failure::new(ErrorCode::InvalidArgument, "a pool is configured on a native connection"))
            }
            Request::NodeInfo => Ok(self.node_info()),
            Request::ClusterMap => self.cluster_map(),
            Request::ClusterAdmin(_) => {
                Err(Failure::new(ErrorCode::InvalidArgument, "a cluster is administered on a native connection"))
            }
        }
    }

    fn hello(&mut self, version: u16, session: &mut Session) -> Result<Response<'_>, Failure> {
        if version != PROTOCOL_VERSION {
            return Err(Failure::closing(
                ErrorCode::UnsupportedVersion,
                format!("client speaks protocol version {version}; this server speaks {PROTOCOL_VERSION}"),
            ));
        }
        if !self.auth.enabled() {
            self.set_identity(session, crate::session::Identity::Everyone)?;
        } else if session.identity.user().is_none() {
            // `authenticate_hello` runs first; this guards against any path around it.
            return Err(Failure::closing(ErrorCode::AuthenticationFailed, "this server requires a user"));
        }
        session.handshaken = true;
        Ok(Response::Hello(HelloReply {
            version: PROTOCOL_VERSION,
            shard_index: self.index,
            limits: self.limits,
            shard_addresses: self.shard_addresses.iter().map(String::as_str).collect(),
        }))
    }

    /// Refuses pool names owned by another shard: clients route by name (see `docs/protocol.md`),
    /// and a pool created on the wrong shard could never be found again.
    fn check_owner(&self, name: &str) -> Result<(), Failure> {
        let shard_count = u16::try_from(self.shard_addresses.len()).expect("shard count is bounded by SHARDS_MAX");
        let owner = shard_for_pool(name, shard_count);
        if owner == self.index {
            return Ok(());
        }
        Err(Failure::new(
            ErrorCode::WrongShard,
            format!(
                "pool '{name}' belongs to shard {owner} at {}, not shard {}",
                self.shard_addresses[usize::from(owner)],
                self.index
            ),
        ))
    }

    fn pool_not_found(&self, name: &str) -> Failure {
        Failure::new(ErrorCode::PoolNotFound, format!("no pool named '{name}' on shard {}", self.index))
    }

    fn record_open(&mut self, handle: PoolHandle, session: &mut Session) {
        let rights = match self.pools.get(handle) {
            Some(pool) => self.rights_on(&session.identity, &pool.name),
            None => return,
        };
        if let Some(pool) = self.pools.get_mut(handle) {
            pool.open_count += 1;
            session.record_open(handle, rights);
        }
    }

    fn create_pool(
        &mut self,
        name: &str,
        spec: PoolSpec,
        flags: CreatePoolFlags,
        plugins: &str,
        session: &mut Session,
    ) -> Result<Response<'static>, Failure> {
        self.reading(session);
        self.check_owner(name)?;
        if spec.size_bytes == 0 {
            return Err(Failure::new(ErrorCode::InvalidArgument, "pool size must be greater than zero"));
        }
        if spec.size_bytes > self.pool_bytes_max {
            return Err(Failure::new(
                ErrorCode::InvalidArgument,
                format!(
                    "pool size of {} bytes exceeds this server's limit of {} bytes (limits.pool_bytes_max)",
                    spec.size_bytes, self.pool_bytes_max
                ),
            ));
        }
        let plugins = self
            .plugins
            .resolve(plugins)
            .map_err(|message| Failure::new(ErrorCode::InvalidArgument, format!("pool '{name}': {message}")))?;
        let owner = session.identity.user().map(str::to_owned);
        let reserved = match &owner {
            Some(owner) if self.pools.find(name).is_none() => {
                let quota = self.auth.users().user(owner).map(|user| user.quota.clone()).unwrap_or_default();
                self.auth
                    .usage
                    .reserve_pool(owner, &quota, spec.size_bytes)
                    .map_err(|message| Failure::new(ErrorCode::QuotaExceeded, message))?;
                true
            }
            _ => false,
        };
        let new = NewPool {
            spec,
            indexed: flags.contains(CreatePoolFlags::INDEXED),
            async_default: flags.durability() == Durability::Async,
            plugins,
            owner: owner.clone(),
        };
        let outcome = self.pools.create(name, new);
        if let (true, Some(owner), Err(_)) = (reserved, &owner, &outcome) {
            self.auth.usage.release_pool(owner, spec.size_bytes);
        }
        let (handle, created) = match outcome {
            Ok(handle) => (handle, true),
            Err(CreateRefused::Exists) if flags.contains(CreatePoolFlags::CREATE_ONLY) => {
                return Err(Failure::new(ErrorCode::PoolExists, format!("pool '{name}' already exists")));
            }
            Err(CreateRefused::Exists) => (self.pools.find(name).expect("the pool exists"), false),
            Err(CreateRefused::TooMany { max }) => {
                return Err(Failure::new(
                    ErrorCode::TooManyPools,
                    format!("shard {} already holds {max} pools, its configured maximum", self.index),
                ));
            }
            Err(CreateRefused::Engine(error)) => {
                return Err(Failure::new(ErrorCode::InvalidArgument, format!("pool '{name}': {error}")));
            }
            Err(CreateRefused::Memory(error)) => {
                return Err(Failure::new(
                    ErrorCode::PoolFull,
                    format!("pool '{name}': cannot allocate its memory ({} bytes requested): {error}", spec.size_bytes),
                ));
            }
            Err(CreateRefused::Log(error)) => return Err(log_failure(self.index, &error)),
            Err(CreateRefused::Pmem(reason)) => {
                return Err(Failure::new(ErrorCode::StorageFailed, format!("pool '{name}': {reason}")));
            }
        };
        if created {
            self.logged(true, session)?;
        }
        self.record_open(handle, session);
        Ok(Response::PoolCreated { pool: handle, created })
    }

    fn delete_pool(&mut self, name: &str, session: &mut Session) -> Result<Response<'static>, Failure> {
        self.reading(session);
        self.check_owner(name)?;
        let handle = self.pools.find(name).ok_or_else(|| self.pool_not_found(name))?;
        let open_count = self.pools.get(handle).map_or(0, |pool| pool.open_count);
        if open_count > 0 {
            return Err(Failure::new(
                ErrorCode::PoolInUse,
                format!("pool '{name}' is open ({open_count} open handle(s)); close it everywhere before deleting"),
            ));
        }
        // Calls of clients that went away may still run: they end before the pool does.
        let calls = self.calls.get(&handle).map_or(0, |calls| calls.running().len() + calls.queued());
        if calls > 0 {
            return Err(Failure::new(
                ErrorCode::PoolInUse,
                format!("pool '{name}' has {calls} plugin call(s) in progress; delete it once they end"),
            ));
        }
        // Its plugins are told once the deletion is logged, through its idle host or one
        // started now (it maps the pool's memory, so it must start before the pool goes).
        let host = self.host_for_deletion(handle);
        let mut removed = self.pools.remove(handle).map_err(|error| log_failure(self.index, &error));
        if let Ok(Some(pool)) = &mut removed {
            if let Some(owner) = &pool.owner {
                self.auth.usage.release_pool(owner, pool.store.capacity_bytes());
            }
            if let Some(build) = pool.index_build.take() {
                build.refuse(ErrorCode::PoolNotFound, &format!("pool '{name}' was deleted while its index was built"));
            }
        }
        let logged = removed.and_then(|_| self.logged(true, session));
        if let Some(mut host) = host {
            if logged.is_ok() {
                if let Err(error) = host.pool_event(ferrite_plugin::abi::EVENT_DELETE, Vec::new()) {
                    tracing::warn!(shard = self.index, pool = name, %error, "plugins missed the pool's deletion");
                }
            }
            self.retire(host);
        }
        logged?;
        Ok(Response::PoolDeleted)
    }
}

fn attribute_value(pool: &Pool, attribute: Attribute, key: &[u8]) -> Result<u64, Failure> {
    let store = &pool.store;
    let value_attributes = || store.attributes(key).ok_or_else(|| key_not_found(pool));
    Ok(match attribute {
        Attribute::ObjectCount => store.count(),
        Attribute::PoolSize => store.capacity_bytes(),
        Attribute::PoolUsed => store.used_bytes(),
        Attribute::ValueLength => value_attributes()?.length,
        Attribute::Crc32 => u64::from(value_attributes()?.crc32),
        Attribute::WriteTime => value_attributes()?.write_time_ns,
    })
}

/// Where one [`ShardState::scan_step`] stops: at whichever limit it reaches first.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScanLimits {
    /// Keys found (the step may pass it by the keys of one bucket).
    pub keys: usize,
    /// Home buckets walked.
    pub homes: u64,
    /// Bytes of the keys found (passed by at most one key's length and one bucket's keys).
    pub key_bytes: usize,
}

/// One `find` request's search.
struct FindStep<'r> {
    kind: FindKind,
    pattern: &'r [u8],
    after: Option<&'r [u8]>,
    limit: u32,
}

/// One bounded step of a possibly longer search (see `FIND_SCAN_KEYS_MAX`), so no pattern can
/// stall the shard. A pool with a secondary index is searched in key order, each page resuming
/// after its last key; any other pool is walked in hash-table order (see [`find_by_scan`]), each
/// page resuming from an opaque 8-byte cursor, written into `cursor_slot` for the response to
/// borrow.
fn find<'p>(pool: &'p Pool, step: FindStep<'_>, cursor_slot: &'p mut [u8; 8]) -> Result<Response<'p>, Failure> {
    let index = pool.index.as_ref().filter(|_| pool.index_build.is_none());
    let query = match step.kind {
        FindKind::Next if index.is_none() => {
            return Err(Failure::new(
                ErrorCode::InvalidArgument,
                format!(
                    "pool '{}' has no secondary index, which a next: search needs (add one with `ferrite pool \
                     configure {} --add-index`, or wait for the one being built)",
                    pool.name, pool.name
                ),
            ));
        }
        FindKind::Next => FindQuery::After(step.pattern),
        FindKind::Exact => FindQuery::Exact(step.pattern),
        FindKind::Prefix => FindQuery::Prefix(step.pattern),
        FindKind::Glob => FindQuery::Glob(step.pattern),
        FindKind::Regex => {
            FindQuery::regex(step.pattern).map_err(|e| Failure::new(ErrorCode::InvalidArgument, e.to_string()))?
        }
    };
    let budget = FindBudget {
        keys_max: step.limit as usize,
        key_bytes_max: FIND_REPLY_KEY_BYTES_MAX,
        scan_keys_max: FIND_SCAN_KEYS_MAX,
    };
    if let Some(index) = index {
        let page = index.find(&query, step.after, budget);
        return Ok(Response::Found { keys: page.keys, next: page.next });
    }
    let cursor = match step.after {
        None => 0,
        Some(after) => after.try_into().map(u64::from_le_bytes).map_err(|_| {
            Failure::new(
                ErrorCode::InvalidArgument,
                format!(
                    "pool '{}' has no secondary index: a find resumes from the 8-byte cursor of the previous \
                     page, not from a key ({} bytes given)",
                    pool.name,
                    after.len()
                ),
            )
        })?,
    };
    if let FindQuery::Exact(key) = query {
        let keys = pool.store.stored_key(key).into_iter().collect();
        return Ok(Response::Found { keys, next: None });
    }
    let page = find_by_scan(pool.store.as_ref(), &query, cursor, budget);
    let next = match page.next {
        Some(next) => {
            *cursor_slot = next.to_le_bytes();
            Some(&cursor_slot[..])
        }
        None => None,
    };
    Ok(Response::Found { keys: page.keys, next })
}

/// The pool a request works on, if it names one by handle.
fn pool_of(request: &Request<'_>) -> Option<PoolHandle> {
    match *request {
        Request::Put { pool, .. }
        | Request::Get { pool, .. }
        | Request::Erase { pool, .. }
        | Request::Count { pool }
        | Request::GetAttribute { pool, .. }
        | Request::Find { pool, .. }
        | Request::ClosePool { pool }
        | Request::InvokeAdo { pool, .. }
        | Request::InvokePutAdo { pool, .. }
        | Request::PutDirect { pool, .. }
        | Request::GetDirect { pool, .. }
        | Request::PutOffset { pool, .. } => Some(pool),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests;
