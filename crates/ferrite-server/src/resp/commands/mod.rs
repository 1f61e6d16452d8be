//! The RESP command table: each command's arity, its keys, and the function that translates it
//! onto native requests; and how a command is run (authentication, waiting for plugin calls,
//! `MULTI` queueing).
//!
//! A command runs inside one turn of the shard's single-threaded loop, with no await between its
//! requests, so a read-modify-write such as `INCR` or `APPEND`, or a many-key `DEL`, is atomic with
//! respect to every other client, native or RESP. Its writes are native puts and erases, so they
//! are exactly as durable as a native client's, and their replies wait for the log as theirs do.
//! Replies and errors follow `redis-server` wherever a client may depend on them (error texts
//! included).
//!
//! The commands live by concern: `strings` (values), `keyspace` (keys as a whole), `server`
//! (connection and server), `transaction` (`MULTI`/`EXEC`), `plugins` (`FERRITE.INVOKE` and
//! signals); `steps` runs many-key commands in bounded steps.

use std::sync::Arc;

use bytes::BytesMut;
use ferrite_proto::{Attribute, ErrorCode, PoolHandle, PutFlags, Request, Response};

use super::parser::{parse_i64, Args};
use super::reply::{self, Protocol};
use super::Settings;
use crate::cluster::gate::Gate;
use crate::cluster::replication::Role;
use crate::completion::Completion;
use crate::handler::{Failure, Flow, ShardState, WRONG_PASSWORD_MESSAGE};
use crate::session::{Identity, Session};
use long_values::LongValue;
pub(crate) use long_values::{begin_set, go_on, poll_receive};
use steps::Progress;
use transaction::{queue, Transaction, TRANSACTION_CONTROL};

/// The Redis version the listener claims in `INFO` and `HELLO`. Clients read it to decide which
/// commands they may send; 7.0.0 is the oldest that has every command they send on connect here.
pub(crate) const REDIS_VERSION: &str = "7.0.0";

/// Largest reply one multi-key command (`MGET`) may build: the reply is held whole in memory, so
/// it is bounded like the command that asked for it.
const REPLY_BYTES_MAX: usize = super::parser::COMMAND_BYTES_MAX;

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
    /// In cluster mode, `READONLY`: a follower may answer this connection's reads of its
    /// group's keys from its replica (see `follower.rs`).
    readonly: bool,
    /// A value longer than the inline limit on its way in or out (`long_values.rs`).
    long_value: Option<LongValue>,
}

impl Client {
    pub fn new(session: Session, pool: PoolHandle, id: u64) -> Client {
        Client {
            session,
            pool,
            id,
            protocol: Protocol::Resp2,
            name: None,
            transaction: None,
            progress: None,
            readonly: false,
            long_value: None,
        }
    }

    /// Whether the client may act: it has authenticated, or the server has no users.
    pub fn authenticated(&self) -> bool {
        self.session.identity != Identity::Nobody
    }
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

    /// What a command that would give a key a time to live is told.
    fn no_expiry(what: &str) -> RespError {
        RespError::err(format!("{what} is not supported: keys in ferrite do not expire"))
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

/// Where a command's keys are among its arguments. The one description of a command's keys: a
/// command on a key that a plugin call holds waits for the call, `COMMAND` tells clients where the
/// keys are, and in cluster mode the keys decide where the command is answered.
#[derive(Debug, Clone, Copy)]
enum Keys {
    None,
    /// The first argument, read or written.
    First {
        writes: bool,
    },
    /// The first two arguments (`RENAME key newkey`).
    FirstTwo {
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
    /// The first argument, the key a plugin call acts on, which it may write; an empty one is no
    /// key (the call acts on the pool itself).
    Invoked,
}

impl Keys {
    /// Where the keys are, as Redis's `COMMAND` says: the first key's position, the last's
    /// (negative: counted from the end, -1 the last argument), and the step between two; all 0
    /// for a command without keys.
    fn positions(self) -> (i64, i64, i64) {
        match self {
            Keys::None => (0, 0, 0),
            Keys::First { .. } | Keys::Invoked => (1, 1, 1),
            Keys::FirstTwo { .. } => (1, 2, 1),
            Keys::All { .. } => (1, -1, 1),
            Keys::Pairs { .. } => (1, -1, 2),
        }
    }

    /// Whether the command may write its keys.
    fn writes(self) -> bool {
        match self {
            Keys::None => false,
            Keys::First { writes } | Keys::FirstTwo { writes } | Keys::All { writes } | Keys::Pairs { writes } => {
                writes
            }
            Keys::Invoked => true,
        }
    }

    /// The keys among `args` (the command name first), and whether the command writes them.
    fn of<'a>(self, args: Args<'a>) -> (impl Iterator<Item = &'a [u8]>, bool) {
        let (first, last, step) = self.positions();
        let len = args.len() as i64;
        let end = match (first, last) {
            (0, _) => 0,
            (_, last) if last < 0 => len + last + 1,
            (_, last) => (last + 1).min(len),
        };
        let invoked = matches!(self, Keys::Invoked);
        let keys = (first..end.max(first))
            .step_by(step.max(1) as usize)
            .map(move |at| args.get(at as usize))
            .filter(move |key| !(invoked && key.is_empty()));
        (keys, self.writes())
    }
}

impl Spec {
    fn accepts(&self, args: usize) -> bool {
        accepts(self.arity, args)
    }
}

/// Whether `args` arguments (the name included) suit `arity` (Redis's convention, see [`Spec`]).
fn accepts(arity: i32, args: usize) -> bool {
    let count = arity.unsigned_abs() as usize;
    if arity < 0 {
        args >= count
    } else {
        args == count
    }
}

/// A subcommand (`CLIENT SETNAME`): its name, lower case, its arity counted as its command's (the
/// command and subcommand names included), and what runs it.
struct Subcommand {
    name: &'static str,
    arity: i32,
    run: Handler,
}

/// The commands made of subcommands, and their subcommands: the command runs them through
/// [`subcommand`], and `COMMAND` lists them.
static SUBCOMMANDS: &[(&str, &[Subcommand])] = &[
    ("client", &server::CLIENT),
    ("command", &command_table::COMMAND),
    ("config", &server::CONFIG),
    ("cluster", &cluster::CLUSTER),
];

fn subcommands_of(command: &str) -> &'static [Subcommand] {
    SUBCOMMANDS.iter().find(|(name, _)| *name == command).map_or(&[], |(_, subcommands)| subcommands)
}

/// Runs the subcommand `call` names (its second argument) of `command`, checking its arity.
fn subcommand(call: &mut Call<'_, '_>, command: &str) -> Result<Flow, RespError> {
    let name = call.args.get(1);
    let Some(subcommand) = subcommands_of(command).iter().find(|subcommand| is(name, subcommand.name)) else {
        return Err(RespError::unknown_subcommand(name, &command.to_uppercase()));
    };
    if !accepts(subcommand.arity, call.args.len()) {
        return Err(RespError::arity(&format!("{command}|{}", subcommand.name)));
    }
    (subcommand.run)(call)
}

/// Every command, the most frequent first (the table is searched in order). `COMMAND LIST` and
/// `COMMAND COUNT` answer from it.
static COMMANDS: &[Spec] = &[
    Spec { name: "get", arity: 2, keys: Keys::First { writes: false }, run: strings::get },
    Spec { name: "set", arity: -3, keys: Keys::First { writes: true }, run: strings::set },
    Spec { name: "mget", arity: -2, keys: Keys::All { writes: false }, run: strings::mget },
    Spec { name: "mset", arity: -3, keys: Keys::Pairs { writes: true }, run: strings::mset },
    Spec { name: "del", arity: -2, keys: Keys::All { writes: true }, run: keyspace::del },
    Spec { name: "exists", arity: -2, keys: Keys::All { writes: false }, run: keyspace::exists },
    Spec { name: "incr", arity: 2, keys: Keys::First { writes: true }, run: |call| strings::incr_by(call, 1) },
    Spec { name: "decr", arity: 2, keys: Keys::First { writes: true }, run: |call| strings::incr_by(call, -1) },
    Spec { name: "incrby", arity: 3, keys: Keys::First { writes: true }, run: strings::incrby },
    Spec { name: "decrby", arity: 3, keys: Keys::First { writes: true }, run: strings::decrby },
    Spec { name: "incrbyfloat", arity: 3, keys: Keys::First { writes: true }, run: strings::incrbyfloat },
    Spec { name: "setnx", arity: 3, keys: Keys::First { writes: true }, run: strings::setnx },
    Spec { name: "getset", arity: 3, keys: Keys::First { writes: true }, run: strings::getset },
    Spec { name: "getdel", arity: 2, keys: Keys::First { writes: true }, run: strings::getdel },
    Spec { name: "getex", arity: -2, keys: Keys::First { writes: false }, run: strings::getex },
    Spec { name: "msetnx", arity: -3, keys: Keys::Pairs { writes: true }, run: strings::msetnx },
    Spec { name: "append", arity: 3, keys: Keys::First { writes: true }, run: strings::append },
    Spec { name: "strlen", arity: 2, keys: Keys::First { writes: false }, run: strings::strlen },
    Spec { name: "getrange", arity: 4, keys: Keys::First { writes: false }, run: strings::getrange },
    Spec { name: "substr", arity: 4, keys: Keys::First { writes: false }, run: strings::getrange },
    Spec { name: "setrange", arity: 4, keys: Keys::First { writes: true }, run: strings::setrange },
    Spec { name: "setex", arity: 4, keys: Keys::None, run: keyspace::expire },
    Spec { name: "psetex", arity: 4, keys: Keys::None, run: keyspace::expire },
    Spec { name: "unlink", arity: -2, keys: Keys::All { writes: true }, run: keyspace::del },
    Spec { name: "touch", arity: -2, keys: Keys::All { writes: false }, run: keyspace::exists },
    Spec { name: "type", arity: 2, keys: Keys::First { writes: false }, run: keyspace::type_of },
    Spec { name: "ttl", arity: 2, keys: Keys::First { writes: false }, run: keyspace::ttl },
    Spec { name: "pttl", arity: 2, keys: Keys::First { writes: false }, run: keyspace::ttl },
    Spec { name: "expiretime", arity: 2, keys: Keys::First { writes: false }, run: keyspace::ttl },
    Spec { name: "pexpiretime", arity: 2, keys: Keys::First { writes: false }, run: keyspace::ttl },
    Spec { name: "persist", arity: 2, keys: Keys::First { writes: false }, run: keyspace::persist },
    Spec { name: "expire", arity: -3, keys: Keys::None, run: keyspace::expire },
    Spec { name: "pexpire", arity: -3, keys: Keys::None, run: keyspace::expire },
    Spec { name: "expireat", arity: -3, keys: Keys::None, run: keyspace::expire },
    Spec { name: "pexpireat", arity: -3, keys: Keys::None, run: keyspace::expire },
    Spec { name: "rename", arity: 3, keys: Keys::FirstTwo { writes: true }, run: keyspace::rename },
    Spec { name: "renamenx", arity: 3, keys: Keys::FirstTwo { writes: true }, run: keyspace::renamenx },
    Spec { name: "copy", arity: -3, keys: Keys::FirstTwo { writes: true }, run: keyspace::copy },
    Spec { name: "keys", arity: 2, keys: Keys::None, run: keyspace::keys },
    Spec { name: "ping", arity: -1, keys: Keys::None, run: server::ping },
    Spec { name: "echo", arity: 2, keys: Keys::None, run: server::echo },
    Spec { name: "dbsize", arity: 1, keys: Keys::None, run: keyspace::dbsize },
    Spec { name: "scan", arity: -2, keys: Keys::None, run: keyspace::scan },
    Spec { name: "info", arity: -1, keys: Keys::None, run: server::info },
    Spec { name: "hello", arity: -1, keys: Keys::None, run: server::hello },
    Spec { name: "select", arity: 2, keys: Keys::None, run: server::select },
    Spec { name: "quit", arity: -1, keys: Keys::None, run: server::quit },
    Spec { name: "auth", arity: -2, keys: Keys::None, run: server::auth },
    Spec { name: "command", arity: -1, keys: Keys::None, run: command_table::command },
    Spec { name: "client", arity: -2, keys: Keys::None, run: |call| subcommand(call, "client") },
    Spec { name: "config", arity: -2, keys: Keys::None, run: |call| subcommand(call, "config") },
    Spec { name: "time", arity: 1, keys: Keys::None, run: server::time },
    Spec { name: "multi", arity: 1, keys: Keys::None, run: transaction::multi },
    Spec { name: "exec", arity: 1, keys: Keys::None, run: transaction::exec },
    Spec { name: "discard", arity: 1, keys: Keys::None, run: transaction::discard },
    Spec { name: "watch", arity: -2, keys: Keys::None, run: transaction::watch },
    Spec { name: "ferrite.invoke", arity: -3, keys: Keys::Invoked, run: plugins::ferrite_invoke },
    Spec { name: "cluster", arity: -2, keys: Keys::None, run: cluster::cluster },
    Spec { name: "asking", arity: 1, keys: Keys::None, run: cluster::asking },
    Spec { name: "readonly", arity: 1, keys: Keys::None, run: cluster::readonly },
    Spec { name: "readwrite", arity: 1, keys: Keys::None, run: cluster::readwrite },
    Spec { name: "wait", arity: 3, keys: Keys::None, run: wait::wait },
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

mod cluster;
#[cfg(test)]
mod cluster_tests;
mod command_table;
mod follower;
mod keyspace;
mod long_values;
mod plugins;
mod routing;
mod server;
mod steps;
mod strings;
#[cfg(test)]
mod testing;
mod transaction;
mod wait;

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
    if let Some(flow) = follower::read_here(args, client, shard, settings, out) {
        return flow;
    }
    if let Some(RespError(text)) = routing::refusal(args, client, shard) {
        shard.stats.requests += 1;
        shard.count_failure();
        if is(args.get(0), "exec") {
            // Redis discards a transaction its node cannot run.
            client.transaction = None;
        }
        reply::error(out, &text);
        return Flow::Continue;
    }
    if let Some(flow) = ready_in_cluster(client, shard, settings, out) {
        return flow;
    }
    if let Some(waiting) = waits_for_plugin_call(args, client, shard) {
        return Flow::Wait { completion: waiting, consumed: false };
    }
    dispatch(args, client, shard, settings, now_ns, out, true)
}

/// In cluster mode, on a replica that leads its group (or was just elected): the command waits
/// until the replica may answer (its lease holds, it applied what came before its term), and the
/// connection opens the default pool if it was accepted while the replica followed. On a
/// follower nothing waits: routing redirected the commands with keys, and the shard refuses
/// any other that reaches the group's pools.
fn ready_in_cluster(
    client: &mut Client,
    shard: &mut ShardState,
    settings: &Settings,
    out: &mut BytesMut,
) -> Option<Flow> {
    match not_ready_in_cluster(client, shard, settings)? {
        NotReady::Wait(completion) => Some(Flow::Wait { completion, consumed: false }),
        NotReady::Refused(RespError(text)) => {
            reply::error(out, &text);
            Some(Flow::Continue)
        }
    }
}

/// Why a command cannot run yet in cluster mode ([`ready_in_cluster`]).
enum NotReady {
    Wait(Arc<Completion>),
    Refused(RespError),
}

fn not_ready_in_cluster(client: &mut Client, shard: &mut ShardState, settings: &Settings) -> Option<NotReady> {
    let replication = shard.replication.as_ref()?;
    if matches!(replication.role, Role::Following | Role::Deposed) {
        return None;
    }
    match shard.group_gate() {
        Gate::Open => {}
        Gate::Wait(completion) => return Some(NotReady::Wait(completion)),
        Gate::Refuse(_) => return None,
    }
    if client.pool == UNOPENED {
        match super::open_pool(shard, settings, &mut client.session) {
            Ok(pool) => client.pool = pool,
            Err(message) => {
                shard.count_failure();
                return Some(NotReady::Refused(RespError::err(format!(
                    "cannot open pool '{}': {message}",
                    settings.pool
                ))));
            }
        }
    }
    None
}

/// The pool of a connection that has not opened the default pool yet (accepted while this
/// node's replica followed its group): no pool has this handle.
pub(crate) const UNOPENED: PoolHandle = PoolHandle(0);

/// What a session may say before it authenticates, on a server with users.
const BEFORE_AUTHENTICATION: [&str; 3] = ["auth", "hello", "quit"];

/// If the command names a key of the default pool that a plugin call holds: a completion woken
/// when the call ends, for the command to run then (`EXEC` waits for every queued command's).
/// A command the session lacks the right for never waits: it is refused at once, so that its
/// client cannot learn from a delay which keys other sessions hold.
fn waits_for_plugin_call(args: Args<'_>, client: &mut Client, shard: &mut ShardState) -> Option<Arc<Completion>> {
    if !shard.calls.contains_key(&client.pool) && !shard.direct_reads.holds_any(client.pool) {
        return None;
    }
    let mut wait = |args: Args<'_>| {
        let spec = lookup(args.get(0))?;
        let (keys, writes) = spec.keys.of(args);
        if !shard.may_wait(&mut client.session, client.pool, writes) {
            return None;
        }
        keys.into_iter().find_map(|key| shard.wait_for_key(client.pool, key, writes, 0))
    };
    match &client.transaction {
        Some(transaction) if is(args.get(0), "exec") => transaction.commands().find_map(wait),
        _ => wait(args),
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
        Some(spec) => match plugins::signal_of(spec, args, client, shard).filter(|_| deferrable) {
            Some(signal) => {
                let mut held = BytesMut::new();
                let call =
                    &mut Call { args, client, shard, settings, now_ns, out: &mut held, deferrable, steppable: false };
                let outcome = (spec.run)(call);
                return plugins::signal_or_reply(signal, outcome, held, client, shard, out);
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

/// The length of the value under `key`, if there is one: the pool's own record of it, so values
/// longer than the inline limit (stored by a native direct put) have theirs too.
fn value_length(call: &mut Call<'_, '_>, key: &[u8]) -> Result<Option<u64>, RespError> {
    match run!(call, Request::GetAttribute { pool: call.client.pool, attribute: Attribute::ValueLength, key }) {
        Ok(Response::Attribute(length)) => Ok(Some(length)),
        Ok(other) => Err(RespError::unexpected(&other)),
        Err(failure) if failure.code == ErrorCode::KeyNotFound => Ok(None),
        Err(failure) => Err(failure.into()),
    }
}

/// Puts `value` under `key` as a native put with `flags`, exactly as durable as one: whether it
/// was stored (`false`: `CREATE_ONLY` found the key, or `UPDATE_ONLY` did not).
fn store(call: &mut Call<'_, '_>, key: &[u8], value: &[u8], flags: PutFlags) -> Result<bool, RespError> {
    match run!(call, Request::Put { pool: call.client.pool, flags, key, value }) {
        Ok(Response::Stored) => Ok(true),
        Ok(other) => Err(RespError::unexpected(&other)),
        Err(failure) if flags.contains(PutFlags::CREATE_ONLY) && failure.code == ErrorCode::KeyExists => Ok(false),
        Err(failure) if flags.contains(PutFlags::UPDATE_ONLY) && failure.code == ErrorCode::KeyNotFound => Ok(false),
        Err(failure) => Err(failure.into()),
    }
}

/// Erases `key`, exactly as durably as a native erase: whether it was there.
fn erase(call: &mut Call<'_, '_>, key: &[u8]) -> Result<bool, RespError> {
    match run!(call, Request::Erase { pool: call.client.pool, key }) {
        Ok(Response::Erased) => Ok(true),
        Ok(other) => Err(RespError::unexpected(&other)),
        Err(failure) if failure.code == ErrorCode::KeyNotFound => Ok(false),
        Err(failure) => Err(failure.into()),
    }
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

    /// The keys a command names, which wait for a plugin call holding them: `RENAME` and `COPY`
    /// name two, `MSETNX` every other argument, `KEYS` none (its argument is a pattern),
    /// `FERRITE.INVOKE` its first unless empty.
    #[test]
    fn commands_name_their_keys() {
        let keys_of = |words: &[&str]| {
            let source: Vec<u8> = words.concat().into_bytes();
            let mut ranges = Vec::new();
            let mut at = 0;
            for word in words {
                ranges.push(at..at + word.len());
                at += word.len();
            }
            let args = Args::new(&source, &ranges);
            let spec = lookup(args.get(0)).expect("a command");
            let (keys, writes) = spec.keys.of(args);
            (keys.map(|key| String::from_utf8_lossy(key).into_owned()).collect::<Vec<_>>(), writes)
        };
        assert_eq!(keys_of(&["rename", "a", "b"]), (vec!["a".into(), "b".into()], true));
        assert_eq!(keys_of(&["copy", "a", "b", "replace"]), (vec!["a".into(), "b".into()], true));
        assert_eq!(keys_of(&["msetnx", "a", "1", "b", "2"]), (vec!["a".into(), "b".into()], true));
        assert_eq!(keys_of(&["getrange", "a", "0", "1"]), (vec!["a".into()], false));
        assert_eq!(keys_of(&["unlink", "a", "b"]), (vec!["a".into(), "b".into()], true));
        assert_eq!(keys_of(&["keys", "a*"]), (vec![], false));
        assert_eq!(keys_of(&["mset", "a", "1", "b"]), (vec!["a".into(), "b".into()], true));
        assert_eq!(keys_of(&["ferrite.invoke", "a", "payload"]), (vec!["a".into()], true));
        assert_eq!(keys_of(&["ferrite.invoke", "", "payload"]), (vec![], true), "a call on the pool names no key");
    }

    #[test]
    fn arity_follows_the_redis_convention() {
        let get = lookup(b"get").expect("get");
        assert!(get.accepts(2) && !get.accepts(1) && !get.accepts(3));
        let del = lookup(b"del").expect("del");
        assert!(!del.accepts(1) && del.accepts(2) && del.accepts(100));
    }
}
