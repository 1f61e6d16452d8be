//! The RESP command table: each command's arity, and its translation onto native requests.
//!
//! A command runs inside one turn of the shard's single-threaded loop, with no await between its
//! requests, so a read-modify-write such as `INCR` or a many-key `DEL` is atomic with respect to
//! every other client, native or RESP. Replies and errors follow `redis-server` wherever a client
//! may depend on them (error texts included).

use std::ops::Range;
use std::sync::Arc;

use bytes::BytesMut;
use ferrite_proto::{Attribute, ErrorCode, PoolHandle, PutFlags, Request, Response, PROTOCOL_VERSION};

use ferrite_store::FindQuery;

use super::parser::{parse_i64, Args};
use super::reply::{self, Protocol};
use super::Settings;
use crate::ado::{Answer, Signals};
use crate::completion::Completion;
use crate::handler::{Accepted, Authenticating, Failure, Flow, Invoke, ScanLimits, ShardState, WRONG_PASSWORD_MESSAGE};
use crate::session::{Identity, Session};
use ferrite_auth::Rights;

/// The Redis version the listener claims in `INFO` and `HELLO`. Clients read it to decide which
/// commands they may send; 7.0.0 is the oldest that has every command they send on connect here.
pub(crate) const REDIS_VERSION: &str = "7.0.0";

/// Largest reply one multi-key command (`MGET`) may build: the reply is held whole in memory, so
/// it is bounded like the command that asked for it.
const REPLY_BYTES_MAX: usize = super::parser::COMMAND_BYTES_MAX;

/// Largest `COUNT` a `SCAN` honours: a bound on the keys of one reply.
const SCAN_COUNT_MAX: u64 = ferrite_proto::FIND_SCAN_KEYS_MAX as u64;

/// Home buckets a `SCAN` may walk per key of its `COUNT` when the table is sparse (Redis's
/// `maxiterations`, which allows 10 per key in its chained table). A home here is a 64-byte entry
/// read in order, far cheaper than a chain, and a large pool spreads few keys over many subtables
/// of at least 64 buckets: 64 per key lets a step pass one such subtable per key asked for, so
/// walks take about as many calls as Redis's.
const SCAN_HOMES_PER_COUNT: u64 = 64;

/// Most home buckets one `SCAN` walks, whatever its `COUNT`: 8 MiB of entries read in order, a
/// bound on one loop turn.
const SCAN_HOMES_MAX: u64 = 128 * 1024;

/// Most commands, and most argument bytes, one `MULTI` transaction may queue: it is held in memory
/// until `EXEC`.
const TRANSACTION_COMMANDS_MAX: usize = 64 * 1024;
const TRANSACTION_BYTES_MAX: usize = super::parser::COMMAND_BYTES_MAX;

/// `SCAN`'s default `COUNT`, as in Redis.
const SCAN_COUNT_DEFAULT: u64 = 10;

/// One RESP connection's state.
#[derive(Debug)]
pub(crate) struct Client {
    pub session: Session,
    /// The default pool, opened in `session` when the connection was accepted.
    pub pool: PoolHandle,
    /// Unique among the shard's connections (`CLIENT ID`).
    pub id: u64,
    pub protocol: Protocol,
    name: Option<Vec<u8>>,
    /// Commands queued since `MULTI`.
    transaction: Option<Transaction>,
    /// Where a many-key command stands between its steps.
    progress: Option<Progress>,
}

impl Client {
    pub fn new(session: Session, pool: PoolHandle, id: u64) -> Client {
        Client { session, pool, id, protocol: Protocol::Resp2, name: None, transaction: None, progress: None }
    }

    /// Whether the client may act: it has authenticated, or the server has no users.
    pub fn authenticated(&self) -> bool {
        self.session.identity != Identity::Nobody
    }
}

/// Keys (or pairs) a many-key command (`MGET`, `MSET`, `DEL`, `EXISTS`) handles per step. A
/// command with more runs in steps, the shard serving every other connection between two, so a
/// million-key command never holds the shard for more than a step: it is not isolated from other
/// clients (each key's read or write is atomic, and its keys are handled in order).
const KEYS_PER_STEP: usize = 1024;

/// A many-key command's state between its steps: how many keys it has handled, how many of
/// them succeeded (`DEL`, `EXISTS`), and its reply so far (`MGET`), written out whole at the end.
#[derive(Debug, Default)]
struct Progress {
    done: usize,
    succeeded: i64,
    reply: BytesMut,
}

/// A `MULTI` transaction being queued: the commands' arguments, copied (the read buffer moves on).
#[derive(Debug, Default)]
struct Transaction {
    bytes: Vec<u8>,
    /// Each command's argument ranges in `bytes`.
    commands: Vec<Vec<Range<usize>>>,
    /// A command was refused while queueing: `EXEC` runs nothing.
    failed: bool,
}

/// An error reply: its full text, kind first (`ERR ...`, `NOPROTO ...`).
#[derive(Debug)]
struct RespError(String);

impl RespError {
    fn err(message: impl std::fmt::Display) -> RespError {
        RespError(format!("ERR {message}"))
    }

    fn syntax() -> RespError {
        RespError::err("syntax error")
    }

    fn not_integer() -> RespError {
        RespError::err("value is not an integer or out of range")
    }

    fn arity(name: &str) -> RespError {
        RespError(format!("ERR wrong number of arguments for '{name}' command"))
    }

    fn unknown_subcommand(subcommand: &[u8], command: &str) -> RespError {
        RespError(format!("ERR unknown subcommand '{}'. Try {command} HELP.", lossy(subcommand, 128)))
    }

    fn unexpected(response: &Response<'_>) -> RespError {
        RespError::err(format!("internal error: unexpected {:?} response", response.request_opcode()))
    }
}

impl From<Failure> for RespError {
    fn from(failure: Failure) -> RespError {
        match failure.code {
            // Redis refuses writes past `maxmemory` with OOM; clients map it to an out-of-memory
            // error rather than a bug.
            ErrorCode::PoolFull => RespError(format!("OOM {}", failure.message)),
            // Redis's words for a command the user may not run, and for failed authentication.
            ErrorCode::PermissionDenied => RespError(format!("NOPERM {}", failure.message)),
            ErrorCode::AuthenticationFailed if failure.message == WRONG_PASSWORD_MESSAGE => {
                RespError("WRONGPASS invalid username-password pair or user is disabled.".into())
            }
            _ => RespError::err(failure.message),
        }
    }
}

/// Up to `max` bytes of `bytes` as text for a message.
fn lossy(bytes: &[u8], max: usize) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(max)]).into_owned()
}

type Handler = fn(&mut Call<'_, '_>) -> Result<Flow, RespError>;

struct Spec {
    /// Lower case, as in Redis's error messages.
    name: &'static str,
    /// Redis's convention: `n` exactly n arguments (the name included), `-n` at least n.
    arity: i32,
    /// Which arguments are keys, and whether the command writes them: a command on a key that
    /// a plugin call holds waits for the call.
    keys: Keys,
    run: Handler,
}

/// Where a command's keys are among its arguments.
#[derive(Debug, Clone, Copy)]
enum Keys {
    None,
    /// The first argument, read or written.
    First {
        writes: bool,
    },
    /// Every argument.
    All {
        writes: bool,
    },
    /// Every other argument from the first (`MSET key value ...`).
    Pairs {
        writes: bool,
    },
}

impl Keys {
    /// The keys among `args` (the command name first), and whether the command writes them.
    fn of<'a>(self, args: Args<'a>) -> (impl Iterator<Item = &'a [u8]>, bool) {
        let (skip, step, take, writes) = match self {
            Keys::None => (1, 1, 0, false),
            Keys::First { writes } => (1, 1, 1, writes),
            Keys::All { writes } => (1, 1, usize::MAX, writes),
            Keys::Pairs { writes } => (1, 2, usize::MAX, writes),
        };
        (args.iter().skip(skip).step_by(step).take(take), writes)
    }
}

impl Spec {
    fn accepts(&self, args: usize) -> bool {
        let arity = self.arity.unsigned_abs() as usize;
        if self.arity < 0 {
            args >= arity
        } else {
            args == arity
        }
    }
}

/// Every command, the most frequent first (the table is searched in order).
static COMMANDS: &[Spec] = &[
    Spec { name: "get", arity: 2, keys: Keys::First { writes: false }, run: get },
    Spec { name: "set", arity: -3, keys: Keys::First { writes: true }, run: set },
    Spec { name: "mget", arity: -2, keys: Keys::All { writes: false }, run: mget },
    Spec { name: "mset", arity: -3, keys: Keys::Pairs { writes: true }, run: mset },
    Spec { name: "del", arity: -2, keys: Keys::All { writes: true }, run: del },
    Spec { name: "exists", arity: -2, keys: Keys::All { writes: false }, run: exists },
    Spec { name: "incr", arity: 2, keys: Keys::First { writes: true }, run: |call| incr_by(call, 1) },
    Spec { name: "decr", arity: 2, keys: Keys::First { writes: true }, run: |call| incr_by(call, -1) },
    Spec { name: "incrby", arity: 3, keys: Keys::First { writes: true }, run: incrby },
    Spec { name: "decrby", arity: 3, keys: Keys::First { writes: true }, run: decrby },
    Spec { name: "ping", arity: -1, keys: Keys::None, run: ping },
    Spec { name: "echo", arity: 2, keys: Keys::None, run: echo },
    Spec { name: "dbsize", arity: 1, keys: Keys::None, run: dbsize },
    Spec { name: "scan", arity: -2, keys: Keys::None, run: scan },
    Spec { name: "info", arity: -1, keys: Keys::None, run: info },
    Spec { name: "hello", arity: -1, keys: Keys::None, run: hello },
    Spec { name: "select", arity: 2, keys: Keys::None, run: select },
    Spec { name: "quit", arity: -1, keys: Keys::None, run: quit },
    Spec { name: "auth", arity: -2, keys: Keys::None, run: auth },
    Spec { name: "command", arity: -1, keys: Keys::None, run: command },
    Spec { name: "client", arity: -2, keys: Keys::None, run: client },
    Spec { name: "config", arity: -2, keys: Keys::None, run: config },
    Spec { name: "multi", arity: 1, keys: Keys::None, run: multi },
    Spec { name: "exec", arity: 1, keys: Keys::None, run: exec },
    Spec { name: "discard", arity: 1, keys: Keys::None, run: discard },
    Spec { name: "watch", arity: -2, keys: Keys::None, run: watch },
    Spec { name: "ferrite.invoke", arity: -3, keys: Keys::None, run: ferrite_invoke },
];

fn lookup(name: &[u8]) -> Option<&'static Spec> {
    COMMANDS.iter().find(|spec| spec.name.as_bytes().eq_ignore_ascii_case(name))
}

/// One command being answered.
struct Call<'a, 'b> {
    args: Args<'a>,
    client: &'b mut Client,
    shard: &'b mut ShardState,
    settings: &'b Settings,
    now_ns: u64,
    out: &'b mut BytesMut,
    /// Whether the answer may come later (see [`dispatch`]).
    deferrable: bool,
    /// Whether a many-key command may run in steps: not inside `EXEC` (a transaction runs whole)
    /// nor when its keys are signalled to plugins (signals are taken before it runs).
    steppable: bool,
}

/// Runs one native request in the client's session. A macro rather than a method so the response,
/// which borrows the shard, leaves the call's other fields (the output buffer) free.
macro_rules! run {
    ($call:expr, $request:expr) => {
        $call.shard.execute($request, &mut $call.client.session, $call.now_ns)
    };
}

/// Answers one command, appending its reply to `out`; inside `MULTI`, queues it instead.
pub(crate) fn execute(
    args: Args<'_>,
    client: &mut Client,
    shard: &mut ShardState,
    settings: &Settings,
    now_ns: u64,
    out: &mut BytesMut,
) -> Flow {
    debug_assert!(args.len() > 0, "the parser never yields an empty command");
    shard.begin_request();
    if client.transaction.is_some()
        && client.authenticated()
        && !TRANSACTION_CONTROL.iter().any(|name| is(args.get(0), name))
    {
        queue(args, client, shard, out);
        return Flow::Continue;
    }
    if !client.authenticated() && !BEFORE_AUTHENTICATION.iter().any(|name| is(args.get(0), name)) {
        shard.stats.requests += 1;
        shard.stats.requests_denied += 1;
        shard.count_failure();
        reply::error(out, "NOAUTH Authentication required.");
        return Flow::Continue;
    }
    if let Some(waiting) = waits_for_plugin_call(args, client, shard) {
        return Flow::Wait { completion: waiting, consumed: false };
    }
    dispatch(args, client, shard, settings, now_ns, out, true)
}

/// What a session may say before it authenticates, on a server with users.
const BEFORE_AUTHENTICATION: [&str; 3] = ["auth", "hello", "quit"];

/// If the command names a key of the default pool that a plugin call holds: a completion woken
/// when the call ends, for the command to run then (`EXEC` waits for every queued command's).
fn waits_for_plugin_call(args: Args<'_>, client: &Client, shard: &mut ShardState) -> Option<Arc<Completion>> {
    if !shard.calls.contains_key(&client.pool) && !shard.direct_reads.holds_any(client.pool) {
        return None;
    }
    let mut wait = |args: Args<'_>| {
        let spec = lookup(args.get(0))?;
        let (keys, writes) = spec.keys.of(args);
        keys.into_iter().find_map(|key| shard.wait_for_key(client.pool, key, writes, 0))
    };
    match &client.transaction {
        Some(transaction) if is(args.get(0), "exec") => {
            transaction.commands.iter().find_map(|ranges| wait(Args::new(&transaction.bytes, ranges)))
        }
        _ => wait(args),
    }
}

/// Commands that act at once inside `MULTI` rather than being queued.
const TRANSACTION_CONTROL: [&str; 5] = ["exec", "discard", "multi", "watch", "quit"];

/// Queues a command of a transaction. A command that could never run (unknown, wrong arity, or
/// past the transaction's size limits) is refused now, and the whole transaction with it at `EXEC`,
/// as in Redis.
fn queue(args: Args<'_>, client: &mut Client, shard: &mut ShardState, out: &mut BytesMut) {
    let transaction = client.transaction.as_mut().expect("the caller checked that a transaction is open");
    let refusal = match lookup(args.get(0)) {
        None => Some(unknown_command(args)),
        Some(spec) if !spec.accepts(args.len()) => Some(RespError::arity(spec.name)),
        Some(_) => {
            let bytes: usize = args.iter().map(<[u8]>::len).sum();
            if transaction.commands.len() >= TRANSACTION_COMMANDS_MAX
                || transaction.bytes.len() + bytes > TRANSACTION_BYTES_MAX
            {
                Some(RespError::err(format!(
                    "a transaction holds at most {TRANSACTION_COMMANDS_MAX} commands of {TRANSACTION_BYTES_MAX} bytes in all"
                )))
            } else {
                None
            }
        }
    };
    shard.stats.requests += 1;
    match refusal {
        Some(RespError(text)) => {
            shard.count_failure();
            transaction.failed = true;
            reply::error(out, &text);
        }
        None => {
            let ranges = args
                .iter()
                .map(|arg| {
                    let start = transaction.bytes.len();
                    transaction.bytes.extend_from_slice(arg);
                    start..transaction.bytes.len()
                })
                .collect();
            transaction.commands.push(ranges);
            reply::simple(out, "QUEUED");
        }
    }
}

/// Runs one command now. `deferrable`: its answer may come later (a plugin call); not inside
/// `EXEC`, whose replies are one array written at once.
fn dispatch(
    args: Args<'_>,
    client: &mut Client,
    shard: &mut ShardState,
    settings: &Settings,
    now_ns: u64,
    out: &mut BytesMut,
    deferrable: bool,
) -> Flow {
    shard.stats.requests += 1;
    let name = args.get(0);
    let outcome = match lookup(name) {
        None => Err(unknown_command(args)),
        Some(spec) if !spec.accepts(args.len()) => Err(RespError::arity(spec.name)),
        Some(spec) => match signal_of(spec, args, client, shard).filter(|_| deferrable) {
            Some(signal) => {
                let mut held = BytesMut::new();
                let call =
                    &mut Call { args, client, shard, settings, now_ns, out: &mut held, deferrable, steppable: false };
                let outcome = (spec.run)(call);
                return signal_or_reply(signal, outcome, held, client, shard, out);
            }
            None => {
                let steppable = deferrable;
                (spec.run)(&mut Call { args, client, shard, settings, now_ns, out, deferrable, steppable })
            }
        },
    };
    if !matches!(outcome, Ok(Flow::Wait { .. })) {
        // Whatever the command was, it is over: a stepped one finished or failed.
        client.progress = None;
    }
    match outcome {
        Ok(flow) => flow,
        Err(RespError(text)) => {
            shard.count_failure();
            reply::error(out, &text);
            Flow::Continue
        }
    }
}

/// The signals a command makes (`[ado] signals`) on a default pool with plugins: `SET` and
/// `MSET` signal each key they write (post-put), `GET` and `MGET` each key they find
/// (post-get), `DEL` each key it erases (post-erase). A many-key command's keys are taken as
/// they are before it runs (it never waits part way), each key once.
fn signal_of(spec: &Spec, args: Args<'_>, client: &Client, shard: &ShardState) -> Option<Signals> {
    let (signal, keys, present_only): (_, Vec<&[u8]>, _) = match spec.name {
        "set" => ("post-put", vec![args.get(1)], false),
        "mset" => ("post-put", (1..args.len()).step_by(2).map(|at| args.get(at)).collect(), false),
        "get" => ("post-get", vec![args.get(1)], false),
        "mget" => ("post-get", args.skip(1).iter().collect(), true),
        "del" if args.len() == 2 => ("post-erase", vec![args.get(1)], false),
        "del" => ("post-erase", args.skip(1).iter().collect(), true),
        _ => return None,
    };
    let pool = shard.pools.get(client.pool)?;
    if pool.plugin_chain.is_empty() || pool.persisted.is_none() || !shard.ado.limits.signals(signal) {
        return None;
    }
    let mut signalled: Vec<Vec<u8>> = Vec::with_capacity(keys.len());
    for key in keys {
        if (!present_only || pool.store.get(key).is_some()) && !signalled.iter().any(|seen| seen == key) {
            signalled.push(key.to_vec());
        }
    }
    (!signalled.is_empty()).then_some(Signals { pool: client.pool, keys: signalled, signal })
}

/// Answers a command that makes a signal, whose reply is `held`: when it changed or found its
/// key, the reply leaves once the pool's chain has handled the signal; otherwise (an error, no
/// such key) at once.
fn signal_or_reply(
    signal: Signals,
    outcome: Result<Flow, RespError>,
    held: BytesMut,
    client: &Client,
    shard: &mut ShardState,
    out: &mut BytesMut,
) -> Flow {
    let found = !(held.starts_with(b"-") || held[..] == *b"$-1\r\n" || held[..] == *b"_\r\n" || held[..] == *b":0\r\n");
    match outcome {
        Ok(Flow::Continue) if found => match shard.ensure_host(signal.pool) {
            Ok(()) => Flow::Wait { completion: shard.signal(signal, held, &client.session), consumed: true },
            Err(failure) => {
                tracing::warn!(shard = shard.index, "cannot signal a plugin chain: {}", failure.message);
                out.extend_from_slice(&held);
                Flow::Continue
            }
        },
        Ok(flow) => {
            out.extend_from_slice(&held);
            flow
        }
        Err(RespError(text)) => {
            shard.count_failure();
            reply::error(out, &text);
            Flow::Continue
        }
    }
}

/// `redis-server`'s words, which its test suites and some clients match.
fn unknown_command(args: Args<'_>) -> RespError {
    let mut listed = String::new();
    for arg in args.skip(1).iter() {
        if listed.len() >= 128 {
            break;
        }
        let room = 128 - listed.len();
        listed.push_str(&format!("'{}' ", lossy(arg, room)));
    }
    RespError(format!("ERR unknown command '{}', with args beginning with: {listed}", lossy(args.get(0), 128)))
}

fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

fn integer_arg(arg: &[u8]) -> Result<i64, RespError> {
    parse_i64(arg).ok_or_else(RespError::not_integer)
}

/// Checks a batch of requests against the limits before any runs, so a multi-key command with one
/// oversized key fails as a whole instead of after changing some keys.
fn check_all<'r>(shard: &ShardState, requests: impl Iterator<Item = Request<'r>>) -> Result<(), RespError> {
    for request in requests {
        request.check(&shard.limits).map_err(|error| RespError::from(Failure::from(error)))?;
    }
    Ok(())
}

fn get(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let key = call.args.get(1);
    match run!(call, Request::Get { pool: call.client.pool, key }) {
        Ok(Response::Value(value)) => reply::bulk(call.out, value),
        Ok(other) => return Err(RespError::unexpected(&other)),
        Err(failure) if failure.code == ErrorCode::KeyNotFound => reply::null(call.out, call.client.protocol),
        Err(failure) => return Err(failure.into()),
    }
    Ok(Flow::Continue)
}

/// The value under `key` if there is one, copied out of the pool.
fn read_value(call: &mut Call<'_, '_>, key: &[u8]) -> Result<Option<Vec<u8>>, RespError> {
    match run!(call, Request::Get { pool: call.client.pool, key }) {
        Ok(Response::Value(value)) => Ok(Some(value.to_vec())),
        Ok(other) => Err(RespError::unexpected(&other)),
        Err(failure) if failure.code == ErrorCode::KeyNotFound => Ok(None),
        Err(failure) => Err(failure.into()),
    }
}

/// `SET key value [NX|XX] [GET] [KEEPTTL]`. Expiry options are refused: keys do not expire.
fn set(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (key, value) = (call.args.get(1), call.args.get(2));
    let (mut nx, mut xx, mut get) = (false, false, false);
    let options = call.args.skip(3);
    for option in options.iter() {
        if is(option, "NX") && !xx {
            nx = true;
        } else if is(option, "XX") && !nx {
            xx = true;
        } else if is(option, "GET") {
            get = true;
        } else if is(option, "KEEPTTL") {
            // Keys have no time to live to keep.
        } else if ["EX", "PX", "EXAT", "PXAT"].iter().any(|word| is(option, word)) {
            return Err(RespError::err(
                "SET with EX, PX, EXAT or PXAT is not supported: keys in ferrite do not expire",
            ));
        } else {
            return Err(RespError::syntax());
        }
    }
    let old = if get { Some(read_value(call, key)?) } else { None };
    let flags = if nx {
        PutFlags::CREATE_ONLY
    } else if xx {
        PutFlags::UPDATE_ONLY
    } else {
        PutFlags::NONE
    };
    let stored = match run!(call, Request::Put { pool: call.client.pool, flags, key, value }) {
        Ok(Response::Stored) => true,
        Ok(other) => return Err(RespError::unexpected(&other)),
        Err(failure) if nx && failure.code == ErrorCode::KeyExists => false,
        Err(failure) if xx && failure.code == ErrorCode::KeyNotFound => false,
        Err(failure) => return Err(failure.into()),
    };
    match old {
        Some(Some(old)) => reply::bulk(call.out, &old),
        Some(None) => reply::null(call.out, call.client.protocol),
        None if stored => reply::ok(call.out),
        None => reply::null(call.out, call.client.protocol),
    }
    Ok(Flow::Continue)
}

fn mget(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let pool = call.client.pool;
    let keys = call.args.skip(1);
    let steps = Steps::begin(call, keys.len());
    if steps.first {
        check_all(call.shard, keys.iter().map(|key| Request::Get { pool, key }))?;
    }
    // A command done in one step replies straight into the output; one in several assembles its
    // reply between the steps, and writes it whole at the end.
    let whole = steps.first && steps.range.end == keys.len();
    let mut held = match whole {
        true => BytesMut::new(),
        false => call.client.progress.take().map(|progress| progress.reply).unwrap_or_default(),
    };
    let start = call.out.len();
    let (out, base) = if whole { (&mut *call.out, start) } else { (&mut held, 0) };
    let filled: Result<(), RespError> = 'fill: {
        if steps.first {
            reply::array(out, keys.len());
        }
        for i in steps.range.clone() {
            match run!(call, Request::Get { pool, key: keys.get(i) }) {
                Ok(Response::Value(value)) => reply::bulk(out, value),
                Err(failure) if failure.code == ErrorCode::KeyNotFound => reply::null(out, call.client.protocol),
                Ok(other) => break 'fill Err(RespError::unexpected(&other)),
                Err(failure) => break 'fill Err(failure.into()),
            }
            if out.len() - base > REPLY_BYTES_MAX {
                break 'fill Err(RespError::err(format!(
                    "MGET reply would exceed {REPLY_BYTES_MAX} bytes; ask for fewer keys at a time"
                )));
            }
        }
        Ok(())
    };
    if let Err(error) = filled {
        call.out.truncate(start);
        return Err(error);
    }
    if steps.range.end < keys.len() {
        return Ok(steps.next(call, 0, held));
    }
    call.out.extend_from_slice(&held);
    Ok(Flow::Continue)
}

/// The part of a many-key command one step handles (see [`KEYS_PER_STEP`]).
struct Steps {
    /// This is the command's first step (or its only one).
    first: bool,
    range: Range<usize>,
}

impl Steps {
    /// The step of a command over `total` keys or pairs that this run handles.
    fn begin(call: &Call<'_, '_>, total: usize) -> Steps {
        let done = call.client.progress.as_ref().map_or(0, |progress| progress.done);
        let end = if call.steppable { total.min(done + KEYS_PER_STEP) } else { total };
        Steps { first: done == 0, range: done..end }
    }

    /// Saves the command's state and lets every other connection of the shard run before its
    /// next step: the command runs again (it is not consumed) once a task spawned now has had
    /// its turn on the shard's event loop.
    fn next(self, call: &mut Call<'_, '_>, succeeded: i64, reply: BytesMut) -> Flow {
        call.client.progress = Some(Progress { done: self.range.end, succeeded, reply });
        // Counted once, when its last step runs.
        call.shard.stats.requests -= 1;
        let completion = Completion::new();
        let turn = Arc::clone(&completion);
        tokio::task::spawn_local(async move {
            tokio::task::yield_now().await;
            turn.wake();
        });
        Flow::Wait { completion, consumed: false }
    }
}

/// `MSET k v [k v ...]`. Every pair is checked against the limits first; a pool that fills up
/// part-way keeps the pairs stored before it did (Redis's `MSET` cannot run out of room midway).
fn mset(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let pairs = call.args.skip(1);
    if pairs.len() % 2 == 1 {
        return Err(RespError::arity("mset"));
    }
    let pool = call.client.pool;
    let put =
        |i: usize| Request::Put { pool, flags: PutFlags::NONE, key: pairs.get(2 * i), value: pairs.get(2 * i + 1) };
    let steps = Steps::begin(call, pairs.len() / 2);
    if steps.first {
        check_all(call.shard, (0..pairs.len() / 2).map(put))?;
    }
    for i in steps.range.clone() {
        match run!(call, put(i)) {
            Ok(Response::Stored) => {}
            Ok(other) => return Err(RespError::unexpected(&other)),
            Err(failure) => return Err(failure.into()),
        }
    }
    if steps.range.end < pairs.len() / 2 {
        return Ok(steps.next(call, 0, BytesMut::new()));
    }
    reply::ok(call.out);
    Ok(Flow::Continue)
}

fn del(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let pool = call.client.pool;
    count_keys_where(call, |key| Request::Erase { pool, key })
}

/// `EXISTS k [k ...]`: how many of the keys exist, a key named twice counting twice (as in Redis).
fn exists(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let pool = call.client.pool;
    count_keys_where(call, |key| Request::GetAttribute { pool, attribute: Attribute::ValueLength, key })
}

/// Runs `request` for every key argument and replies with how many succeeded; a missing key counts
/// zero. All requests are checked against the limits first, so an oversized key changes nothing.
fn count_keys_where<'k>(call: &mut Call<'k, '_>, request: impl Fn(&'k [u8]) -> Request<'k>) -> Result<Flow, RespError> {
    let keys = call.args.skip(1);
    let steps = Steps::begin(call, keys.len());
    if steps.first {
        check_all(call.shard, keys.iter().map(&request))?;
    }
    let mut succeeded = call.client.progress.as_ref().map_or(0, |progress| progress.succeeded);
    for i in steps.range.clone() {
        match run!(call, request(keys.get(i))) {
            Ok(_) => succeeded += 1,
            Err(failure) if failure.code == ErrorCode::KeyNotFound => {}
            Err(failure) => return Err(failure.into()),
        }
    }
    if steps.range.end < keys.len() {
        return Ok(steps.next(call, succeeded, BytesMut::new()));
    }
    reply::integer(call.out, succeeded);
    Ok(Flow::Continue)
}

fn incrby(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let delta = integer_arg(call.args.get(2))?;
    incr_by(call, delta)
}

fn decrby(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let delta = integer_arg(call.args.get(2))?;
    let delta = delta.checked_neg().ok_or_else(|| RespError::err("decrement would overflow"))?;
    incr_by(call, delta)
}

/// Adds `delta` to the decimal integer stored under the key (0 if absent) and stores the sum: a
/// read and a write in one turn of the shard loop, so no other client sees the key in between.
fn incr_by(call: &mut Call<'_, '_>, delta: i64) -> Result<Flow, RespError> {
    let key = call.args.get(1);
    if let Some(layer) = counter_layer(call) {
        let payload = format!("add {delta}");
        return invoke(call, key, payload.as_bytes(), Some(COUNTER_BYTES), Answer::RespInteger { layer });
    }
    let current = match read_value(call, key)? {
        Some(value) => parse_i64(&value).ok_or_else(RespError::not_integer)?,
        None => 0,
    };
    let sum = current.checked_add(delta).ok_or_else(|| RespError::err("increment or decrement would overflow"))?;
    let mut digits = [0u8; 20];
    let value = reply::decimal(sum, &mut digits);
    match run!(call, Request::Put { pool: call.client.pool, flags: PutFlags::NONE, key, value }) {
        Ok(Response::Stored) => reply::integer(call.out, sum),
        Ok(other) => return Err(RespError::unexpected(&other)),
        Err(failure) => return Err(failure.into()),
    }
    Ok(Flow::Continue)
}

fn ping(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    match call.args.len() {
        1 => reply::simple(call.out, "PONG"),
        2 => reply::bulk(call.out, call.args.get(1)),
        _ => return Err(RespError::arity("ping")),
    }
    Ok(Flow::Continue)
}

fn echo(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    reply::bulk(call.out, call.args.get(1));
    Ok(Flow::Continue)
}

fn count(call: &mut Call<'_, '_>) -> Result<u64, RespError> {
    match run!(call, Request::Count { pool: call.client.pool }) {
        Ok(Response::Count(count)) => Ok(count),
        Ok(other) => Err(RespError::unexpected(&other)),
        Err(failure) => Err(failure.into()),
    }
}

fn dbsize(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let count = count(call)?;
    reply::integer(call.out, i64::try_from(count).unwrap_or(i64::MAX));
    Ok(Flow::Continue)
}

/// `SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]`: one step of a walk of the pool's hash
/// table, as in Redis: the step ends once it has `COUNT` keys or has walked `64 × COUNT` home
/// buckets (Redis's own rule, scaled to this table), so `COUNT` is a hint, not a page size. The cursor is the walk's
/// position: it needs no state on the server, stays valid across table growth, and may be used
/// from any connection. Every key present for the whole walk is returned at least once; a key may
/// come back twice.
fn scan(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let cursor = std::str::from_utf8(call.args.get(1))
        .ok()
        .and_then(|text| text.parse::<u64>().ok())
        .ok_or_else(|| RespError::err("invalid cursor"))?;
    let mut pattern: Option<&[u8]> = None;
    let mut count = SCAN_COUNT_DEFAULT;
    let mut only_other_type = false;
    let options = call.args.skip(2);
    let mut i = 0;
    while i < options.len() {
        let Some(value) = (i + 1 < options.len()).then(|| options.get(i + 1)) else {
            return Err(RespError::syntax());
        };
        let option = options.get(i);
        if is(option, "MATCH") {
            pattern = Some(value);
        } else if is(option, "COUNT") {
            let requested = integer_arg(value)?;
            if requested < 1 {
                return Err(RespError::syntax());
            }
            count = u64::try_from(requested).unwrap_or(u64::MAX).min(SCAN_COUNT_MAX);
        } else if is(option, "TYPE") {
            // Every value is a string; a scan for any other type finds nothing, but walks as far
            // as one for strings would, as in Redis.
            only_other_type = !is(value, "string");
        } else {
            return Err(RespError::syntax());
        }
        i += 2;
    }
    let query = match pattern {
        None | Some(b"*") => FindQuery::Prefix(b""),
        Some(glob) => FindQuery::Glob(glob),
    };
    let limits = ScanLimits {
        keys: count as usize,
        homes: (count * SCAN_HOMES_PER_COUNT).min(SCAN_HOMES_MAX),
        key_bytes: REPLY_BYTES_MAX,
    };
    let (next, keys) = call
        .shard
        .scan_step(&mut call.client.session, call.client.pool, &query, cursor, limits)
        .map_err(RespError::from)?;
    reply::array(call.out, 2);
    reply::bulk(call.out, next.to_string().as_bytes());
    if only_other_type {
        reply::array(call.out, 0);
        return Ok(Flow::Continue);
    }
    reply::array(call.out, keys.len());
    for key in keys {
        reply::bulk(call.out, key);
    }
    Ok(Flow::Continue)
}

fn pool_attribute(call: &mut Call<'_, '_>, attribute: Attribute) -> Result<u64, RespError> {
    match run!(call, Request::GetAttribute { pool: call.client.pool, attribute, key: b"" }) {
        Ok(Response::Attribute(value)) => Ok(value),
        Ok(other) => Err(RespError::unexpected(&other)),
        Err(failure) => Err(failure.into()),
    }
}

/// Bytes of memory the connection's pool takes, as `list_pools` reports them.
fn pool_memory_bytes(call: &mut Call<'_, '_>) -> Result<u64, RespError> {
    match run!(call, Request::ListPools) {
        Ok(Response::Pools(pools)) => {
            Ok(pools.iter().find(|pool| pool.name == call.settings.pool).map_or(0, |pool| pool.memory.total_bytes()))
        }
        Ok(other) => Err(RespError::unexpected(&other)),
        Err(failure) => Err(failure.into()),
    }
}

/// `INFO [section ...]`: Redis's text format (`# Section` headers, `field:value` lines), built from
/// the shard's statistics as `get_statistics` reports them.
fn info(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let statistics: Vec<(String, u64)> = match run!(call, Request::GetStatistics) {
        Ok(Response::Statistics(statistics)) => statistics.iter().map(|s| (s.name.to_owned(), s.value)).collect(),
        Ok(other) => return Err(RespError::unexpected(&other)),
        Err(failure) => return Err(failure.into()),
    };
    let stat = |name: &str| statistics.iter().find(|(n, _)| n == name).map_or(0, |(_, value)| *value);
    let used = pool_attribute(call, Attribute::PoolUsed)?;
    let size = pool_attribute(call, Attribute::PoolSize)?;
    let keys = count(call)?;
    let memory = pool_memory_bytes(call)?;

    let sections = call.args.skip(1);
    let wanted = |section: &str| {
        sections.len() == 0
            || sections.iter().any(|s| is(s, section) || is(s, "all") || is(s, "everything") || is(s, "default"))
    };
    let uptime_s = stat("uptime_ms") / 1000;
    let mut text = String::new();
    if wanted("server") {
        text.push_str(&format!(
            "# Server\r\nredis_version:{REDIS_VERSION}\r\nferrite_version:{}\r\nferrite_protocol_version:{PROTOCOL_VERSION}\r\n\
             redis_mode:standalone\r\narch_bits:{}\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{uptime_s}\r\n\
             uptime_in_days:{}\r\nferrite_shard:{}\r\nferrite_shards:{}\r\nferrite_pool:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            usize::BITS,
            std::process::id(),
            call.settings.port,
            uptime_s / 86_400,
            call.shard.index,
            call.shard.shard_addresses.len(),
            call.settings.pool,
        ));
    }
    if wanted("clients") {
        text.push_str(&format!(
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n\r\n",
            stat("clients"),
            call.shard.connections_max
        ));
    }
    if wanted("memory") {
        let bytes_per_key = if keys == 0 { 0.0 } else { memory as f64 / keys as f64 };
        text.push_str(&format!(
            "# Memory\r\nused_memory:{used}\r\nmaxmemory:{size}\r\nmaxmemory_policy:noeviction\r\n\
             ferrite_pool_memory:{memory}\r\nferrite_pool_bytes_per_key:{bytes_per_key:.2}\r\n\r\n"
        ));
    }
    if wanted("persistence") {
        // Redis's fields for what Ferrite does instead: every write goes to the write-ahead log
        // (the AOF's place), group-committed; checkpoints take the place of RDB snapshots.
        let durable = statistics.iter().any(|(name, _)| name == "wal_commits");
        text.push_str(&format!(
            "# Persistence\r\nloading:0\r\nasync_loading:0\r\naof_enabled:{}\r\naof_rewrite_in_progress:0\r\n\
             rdb_bgsave_in_progress:0\r\nferrite_wal_bytes:{}\r\nferrite_wal_commits:{}\r\n\
             ferrite_durable_lsn:{}\r\nferrite_checkpoints:{}\r\n\r\n",
            u8::from(durable),
            stat("wal_bytes"),
            stat("wal_commits"),
            stat("durable_lsn"),
            stat("checkpoints"),
        ));
    }
    if wanted("stats") {
        text.push_str(&format!(
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nrejected_connections:{}\r\n\
             ferrite_puts:{}\r\nferrite_gets:{}\r\nferrite_erases:{}\r\nferrite_finds:{}\r\nferrite_failures:{}\r\n\r\n",
            stat("clients_total"),
            stat("requests"),
            stat("clients_refused"),
            stat("puts"),
            stat("gets"),
            stat("erases"),
            stat("finds"),
            stat("failures"),
        ));
    }
    if wanted("keyspace") {
        text.push_str("# Keyspace\r\n");
        if keys > 0 {
            text.push_str(&format!("db0:keys={keys},expires=0,avg_ttl=0\r\n"));
        }
        text.push_str("\r\n");
    }
    // Redis ends the text without the blank line that closes the last section.
    let text = text.strip_suffix("\r\n").unwrap_or(&text);
    reply::bulk(call.out, text.as_bytes());
    Ok(Flow::Continue)
}

/// Client names are one printable word, as Redis requires.
fn check_client_name(name: &[u8]) -> Result<(), RespError> {
    if name.iter().all(|byte| (b'!'..=b'~').contains(byte)) {
        Ok(())
    } else {
        Err(RespError::err("Client names cannot contain spaces, newlines or special characters."))
    }
}

fn set_client_name(client: &mut Client, name: &[u8]) {
    client.name = (!name.is_empty()).then(|| name.to_vec());
}

/// `HELLO [protover [AUTH user pass] [SETNAME name]]`: switches the connection to RESP2 or RESP3
/// and describes the server.
fn hello(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let mut protocol = call.client.protocol;
    if call.args.len() >= 2 {
        let version = parse_i64(call.args.get(1))
            .ok_or_else(|| RespError::err("Protocol version is not an integer or out of range"))?;
        protocol = match version {
            2 => Protocol::Resp2,
            3 => Protocol::Resp3,
            _ => return Err(RespError("NOPROTO sorry, this protocol version is not supported".into())),
        };
    }
    let options = call.args.skip(2);
    let mut name = None;
    let mut credentials = None;
    let mut i = 0;
    while i < options.len() {
        let option = options.get(i);
        if is(option, "AUTH") && i + 2 < options.len() {
            credentials = Some((options.get(i + 1), options.get(i + 2)));
            i += 3;
        } else if is(option, "SETNAME") && i + 1 < options.len() {
            let value = options.get(i + 1);
            check_client_name(value)?;
            name = Some(value);
            i += 2;
        } else {
            return Err(RespError::err(format!("Syntax error in HELLO option '{}'", lossy(option, 128))));
        }
    }
    match credentials {
        Some((user, password)) => {
            if let Some(waiting) = authenticate(call, user, password)? {
                return Ok(waiting);
            }
        }
        None if call.client.session.identity == Identity::Nobody => {
            return Err(RespError(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH \
                 <user> <pass> option can be used to authenticate the client and select the RESP protocol version at \
                 the same time"
                    .into(),
            ));
        }
        None => {}
    }
    if let Some(name) = name {
        set_client_name(call.client, name);
    }
    call.client.protocol = protocol;
    let out = &mut *call.out;
    reply::map(out, 7, protocol);
    reply::bulk(out, b"server");
    reply::bulk(out, b"ferrite");
    reply::bulk(out, b"version");
    reply::bulk(out, REDIS_VERSION.as_bytes());
    reply::bulk(out, b"proto");
    reply::integer(out, protocol.version());
    reply::bulk(out, b"id");
    reply::integer(out, i64::try_from(call.client.id).unwrap_or(i64::MAX));
    reply::bulk(out, b"mode");
    reply::bulk(out, b"standalone");
    reply::bulk(out, b"role");
    reply::bulk(out, b"master");
    reply::bulk(out, b"modules");
    reply::array(out, 0);
    Ok(Flow::Continue)
}

/// Only database 0 exists: each shard's RESP listener serves one pool.
fn select(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    match integer_arg(call.args.get(1))? {
        0 => reply::ok(call.out),
        _ => return Err(RespError::err("DB index is out of range")),
    }
    Ok(Flow::Continue)
}

fn quit(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    reply::ok(call.out);
    Ok(Flow::Close)
}

/// `AUTH [user] password`: on a server with users, authenticates the connection as `user`
/// (`default` when only a password is given, as in Redis). Without users the replies are
/// Redis's when the default user has no password.
fn auth(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (user, password) = match call.args.len() {
        2 => (&b"default"[..], call.args.get(1)),
        3 => (call.args.get(1), call.args.get(2)),
        _ => return Err(RespError::syntax()),
    };
    if !call.shard.auth.enabled() {
        return match call.args.len() {
            2 => Err(RespError::err(
                "AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            )),
            _ if user == b"default" => {
                reply::ok(call.out);
                Ok(Flow::Continue)
            }
            _ => Err(RespError("WRONGPASS invalid username-password pair or user is disabled.".into())),
        };
    }
    if let Some(waiting) = authenticate(call, user, password)? {
        return Ok(waiting);
    }
    reply::ok(call.out);
    Ok(Flow::Continue)
}

/// Authenticates the connection as `user`: `None` once done, the wait while the password is
/// verified (the command then runs again), or why not.
fn authenticate(call: &mut Call<'_, '_>, user: &[u8], password: &[u8]) -> Result<Option<Flow>, RespError> {
    if !call.deferrable {
        return Err(RespError::err("authentication cannot run inside MULTI"));
    }
    let Ok(user) = std::str::from_utf8(user) else {
        return Err(RespError("WRONGPASS invalid username-password pair or user is disabled.".into()));
    };
    match call.shard.authenticate(&mut call.client.session, user, password) {
        Authenticating::Done => Ok(None),
        Authenticating::Refused(failure) => Err(failure.into()),
        Authenticating::Pending(completion) => {
            // Counted when it runs again.
            call.shard.stats.requests -= 1;
            Ok(Some(Flow::Wait { completion, consumed: false }))
        }
    }
}

/// `COMMAND [COUNT|DOCS|INFO|LIST]`: `redis-cli` asks for `COMMAND DOCS` when it starts, for hints
/// it can do without; an empty answer is a valid one.
fn command(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    if call.args.len() == 1 {
        reply::array(call.out, 0);
        return Ok(Flow::Continue);
    }
    let subcommand = call.args.get(1);
    if is(subcommand, "COUNT") {
        reply::integer(call.out, COMMANDS.len() as i64);
    } else if is(subcommand, "DOCS") {
        reply::map(call.out, 0, call.client.protocol);
    } else if is(subcommand, "INFO") {
        reply::array(call.out, 0);
    } else if is(subcommand, "LIST") {
        reply::array(call.out, COMMANDS.len());
        for spec in COMMANDS {
            reply::bulk(call.out, spec.name.as_bytes());
        }
    } else {
        return Err(RespError::unknown_subcommand(subcommand, "COMMAND"));
    }
    Ok(Flow::Continue)
}

/// `CLIENT SETNAME|GETNAME|SETINFO|ID`. Client libraries send `SETNAME` and `SETINFO` on connect.
fn client(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let subcommand = call.args.get(1);
    let arity = |expected: usize, name: &str| {
        if call.args.len() == expected {
            Ok(())
        } else {
            Err(RespError::arity(&format!("client|{name}")))
        }
    };
    if is(subcommand, "SETNAME") {
        arity(3, "setname")?;
        let name = call.args.get(2);
        check_client_name(name)?;
        set_client_name(call.client, name);
        reply::ok(call.out);
    } else if is(subcommand, "GETNAME") {
        arity(2, "getname")?;
        match &call.client.name {
            Some(name) => reply::bulk(call.out, name),
            None => reply::null(call.out, call.client.protocol),
        }
    } else if is(subcommand, "SETINFO") {
        arity(4, "setinfo")?;
        let attribute = call.args.get(2);
        if !is(attribute, "LIB-NAME") && !is(attribute, "LIB-VER") {
            return Err(RespError::err(format!("Unrecognized option '{}'", lossy(attribute, 128))));
        }
        reply::ok(call.out);
    } else if is(subcommand, "ID") {
        arity(2, "id")?;
        reply::integer(call.out, i64::try_from(call.client.id).unwrap_or(i64::MAX));
    } else {
        return Err(RespError::unknown_subcommand(subcommand, "CLIENT"));
    }
    Ok(Flow::Continue)
}

/// `CONFIG GET parameter ...`: the server is configured by its own file, not through RESP, so only
/// the parameters tools ask about are answered (`redis-benchmark` asks for `save` and
/// `appendonly`); any other matches nothing, which is a valid answer.
fn config(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let subcommand = call.args.get(1);
    if is(subcommand, "GET") {
        if call.args.len() < 3 {
            return Err(RespError::arity("config|get"));
        }
        const KNOWN: [(&str, &str); 3] = [("save", ""), ("appendonly", "no"), ("databases", "1")];
        let parameters = call.args.skip(2);
        let found: Vec<(&str, &str)> =
            KNOWN.iter().copied().filter(|(name, _)| parameters.iter().any(|p| is(p, name))).collect();
        reply::map(call.out, found.len(), call.client.protocol);
        for (name, value) in found {
            reply::bulk(call.out, name.as_bytes());
            reply::bulk(call.out, value.as_bytes());
        }
        Ok(Flow::Continue)
    } else if ["SET", "RESETSTAT", "REWRITE"].iter().any(|word| is(subcommand, word)) {
        Err(RespError::err(format!(
            "CONFIG {} is not supported: ferrite-server is configured by its configuration file",
            lossy(subcommand, 16).to_uppercase()
        )))
    } else {
        Err(RespError::unknown_subcommand(subcommand, "CONFIG"))
    }
}

fn multi(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    if call.client.transaction.is_some() {
        return Err(RespError::err("MULTI calls can not be nested"));
    }
    call.client.transaction = Some(Transaction::default());
    reply::ok(call.out);
    Ok(Flow::Continue)
}

/// `EXEC`: runs the queued commands one after the other in this one turn of the shard loop, so no
/// other client's command runs between them. The reply is an array of their replies. Replies are
/// held in memory until the whole array is written, so once they pass [`REPLY_BYTES_MAX`] the
/// later commands still run but their replies are replaced by an error saying so.
fn exec(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let transaction = call.client.transaction.take().ok_or_else(|| RespError::err("EXEC without MULTI"))?;
    if transaction.failed {
        return Err(RespError("EXECABORT Transaction discarded because of previous errors.".into()));
    }
    let start = call.out.len();
    reply::array(call.out, transaction.commands.len());
    let mut dropped = BytesMut::new();
    for ranges in &transaction.commands {
        let args = Args::new(&transaction.bytes, ranges);
        if call.out.len() - start <= REPLY_BYTES_MAX {
            dispatch(args, call.client, call.shard, call.settings, call.now_ns, call.out, false);
        } else {
            dispatch(args, call.client, call.shard, call.settings, call.now_ns, &mut dropped, false);
            dropped.clear();
            reply::error(
                call.out,
                &format!(
                    "ERR reply dropped: the transaction's replies exceed {REPLY_BYTES_MAX} bytes (the command ran)"
                ),
            );
        }
    }
    Ok(Flow::Continue)
}

fn discard(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    call.client.transaction.take().ok_or_else(|| RespError::err("DISCARD without MULTI"))?;
    reply::ok(call.out);
    Ok(Flow::Continue)
}

/// Optimistic locking is not offered: a transaction here cannot be interleaved with other clients'
/// commands anyway, so `MULTI`/`EXEC` alone is atomic.
fn watch(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    if call.client.transaction.is_some() {
        return Err(RespError::err("WATCH inside MULTI is not allowed"));
    }
    Err(RespError::err("WATCH is not supported by ferrite"))
}

/// `FERRITE.INVOKE key payload [CREATE size]`: calls the default pool's plugin chain on `key`
/// (creating it as `size` zero bytes if absent, with `CREATE`), answering an array of the
/// chain's response buffers. An empty key calls the chain on the pool itself.
fn ferrite_invoke(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (key, payload) = (call.args.get(1), call.args.get(2));
    let create_size = match call.args.len() {
        3 => None,
        5 if is(call.args.get(3), "create") => Some(integer_arg(call.args.get(4))?),
        _ => return Err(RespError::syntax()),
    };
    let create_size = create_size.map(|size| u64::try_from(size).map_err(|_| RespError::not_integer())).transpose()?;
    invoke(call, key, payload, create_size, Answer::RespBuffers)
}

/// Bytes of a `counter` plugin's value: a 64-bit integer.
const COUNTER_BYTES: u64 = 8;

/// The layer of `counter` in the default pool's chain, if it has one: `INCR` and kin then count
/// through it, and its values are 8-byte integers rather than decimal text.
fn counter_layer(call: &Call<'_, '_>) -> Option<u32> {
    let pool = call.shard.pools.get(call.client.pool)?;
    let position = ferrite_proto::plugin_names(&pool.plugin_chain).position(|name| name == "counter")?;
    u32::try_from(position).ok()
}

/// Invokes the default pool's chain; the answer comes later, as `answer` says.
fn invoke(
    call: &mut Call<'_, '_>,
    key: &[u8],
    payload: &[u8],
    create_size: Option<u64>,
    answer: Answer,
) -> Result<Flow, RespError> {
    if !call.deferrable {
        return Err(RespError::err("plugin calls cannot run inside MULTI"));
    }
    // A plugin acts with its caller's rights: this call may write.
    call.shard.require(&mut call.client.session, call.client.pool, Rights::INVOKE.union(Rights::WRITE))?;
    let invoke = Invoke {
        answer,
        pool: call.client.pool,
        key,
        payload,
        value: None,
        create_size,
        read_only: false,
        no_overwrite: false,
        detached: false,
        fire_and_forget: false,
    };
    match call.shard.invoke(invoke, &mut call.client.session)? {
        Accepted::Later(completion) => Ok(Flow::Wait { completion, consumed: true }),
        Accepted::Blocked(completion) => Ok(Flow::Wait { completion, consumed: false }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_names_are_lower_case_and_unique() {
        for (i, spec) in COMMANDS.iter().enumerate() {
            assert_eq!(spec.name, spec.name.to_lowercase());
            assert!(COMMANDS[..i].iter().all(|other| other.name != spec.name), "{} twice", spec.name);
        }
        assert_eq!(lookup(b"GeT").map(|spec| spec.name), Some("get"));
        assert!(lookup(b"nosuch").is_none());
    }

    #[test]
    fn arity_follows_the_redis_convention() {
        let get = lookup(b"get").expect("get");
        assert!(get.accepts(2) && !get.accepts(1) && !get.accepts(3));
        let del = lookup(b"del").expect("del");
        assert!(!del.accepts(1) && del.accepts(2) && del.accepts(100));
    }
}
