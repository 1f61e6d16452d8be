//! Connection and server commands: who the client is and what it speaks (`HELLO`, `AUTH`,
//! `CLIENT`, `SELECT`, `QUIT`), and what the server says about itself (`PING`, `INFO`,
//! `COMMAND`, `CONFIG`).

use ferrite_proto::{Attribute, Request, Response, PROTOCOL_VERSION};

use super::keyspace::count;
use super::reply::{self, Protocol};
use super::{integer_arg, is, lossy, Call, Client, RespError, Subcommand, REDIS_VERSION};
use crate::handler::{Authenticating, Flow, ShardState};
use crate::resp::parser::parse_i64;
use crate::resp::topology;
use crate::session::Identity;

pub(super) fn ping(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    match call.args.len() {
        1 => reply::simple(call.out, "PONG"),
        2 => reply::bulk(call.out, call.args.get(1)),
        _ => return Err(RespError::arity("ping")),
    }
    Ok(Flow::Continue)
}

pub(super) fn echo(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    reply::bulk(call.out, call.args.get(1));
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
pub(super) fn info(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
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
             redis_mode:{}\r\narch_bits:{}\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{uptime_s}\r\n\
             uptime_in_days:{}\r\nferrite_shard:{}\r\nferrite_shards:{}\r\nferrite_pool:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            if call.shard.cluster.is_some() { "cluster" } else { "standalone" },
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
    if wanted("replication") {
        let replication = match &call.shard.cluster {
            Some(cluster) => cluster.map.with(|view| topology::replication(view, cluster.group)),
            None => "role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:0\r\n".to_owned(),
        };
        text.push_str(&format!("# Replication\r\n{replication}\r\n"));
    }
    if wanted("cluster") {
        text.push_str(&format!("# Cluster\r\ncluster_enabled:{}\r\n\r\n", u8::from(call.shard.cluster.is_some())));
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

/// Whether this listener is a master to Redis clients (see [`topology::is_master`]); a single
/// server always is.
fn is_master(shard: &ShardState) -> bool {
    shard.cluster.as_ref().is_none_or(|cluster| cluster.map.with(|view| topology::is_master(view, cluster.group)))
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
pub(super) fn hello(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
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
    reply::bulk(out, if call.shard.cluster.is_some() { "cluster" } else { "standalone" }.as_bytes());
    reply::bulk(out, b"role");
    reply::bulk(out, if is_master(call.shard) { "master" } else { "replica" }.as_bytes());
    reply::bulk(out, b"modules");
    reply::array(out, 0);
    Ok(Flow::Continue)
}

/// `TIME`: the server's clock, as Redis gives it: seconds and microseconds since the Unix epoch,
/// as two bulk strings.
pub(super) fn time(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let micros = call.now_ns / 1_000;
    reply::array(call.out, 2);
    reply::bulk(call.out, (micros / 1_000_000).to_string().as_bytes());
    reply::bulk(call.out, (micros % 1_000_000).to_string().as_bytes());
    Ok(Flow::Continue)
}

/// Only database 0 exists: each shard's RESP listener serves one pool.
pub(super) fn select(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    match integer_arg(call.args.get(1))? {
        0 => reply::ok(call.out),
        _ => return Err(RespError::err("DB index is out of range")),
    }
    Ok(Flow::Continue)
}

pub(super) fn quit(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    reply::ok(call.out);
    Ok(Flow::Close)
}

/// `AUTH [user] password`: on a server with users, authenticates the connection as `user`
/// (`default` when only a password is given, as in Redis). Without users the replies are
/// Redis's when the default user has no password.
pub(super) fn auth(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
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

/// `CLIENT SETNAME|GETNAME|SETINFO|ID`. Client libraries send `SETNAME` and `SETINFO` on connect.
pub(super) static CLIENT: [Subcommand; 4] = [
    Subcommand { name: "setname", arity: 3, run: client_setname },
    Subcommand { name: "getname", arity: 2, run: client_getname },
    Subcommand { name: "setinfo", arity: 4, run: client_setinfo },
    Subcommand { name: "id", arity: 2, run: client_id },
];

fn client_setname(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let name = call.args.get(2);
    check_client_name(name)?;
    set_client_name(call.client, name);
    reply::ok(call.out);
    Ok(Flow::Continue)
}

fn client_getname(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    match &call.client.name {
        Some(name) => reply::bulk(call.out, name),
        None => reply::null(call.out, call.client.protocol),
    }
    Ok(Flow::Continue)
}

fn client_setinfo(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let attribute = call.args.get(2);
    if !is(attribute, "LIB-NAME") && !is(attribute, "LIB-VER") {
        return Err(RespError::err(format!("Unrecognized option '{}'", lossy(attribute, 128))));
    }
    reply::ok(call.out);
    Ok(Flow::Continue)
}

fn client_id(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    reply::integer(call.out, i64::try_from(call.client.id).unwrap_or(i64::MAX));
    Ok(Flow::Continue)
}

/// `CONFIG GET parameter ...`: the server is configured by its own file, not through RESP, so only
/// the parameters tools ask about are answered (`redis-benchmark` asks for `save` and
/// `appendonly`); any other matches nothing, which is a valid answer. `CONFIG SET`, `RESETSTAT`
/// and `REWRITE` are refused.
pub(super) static CONFIG: [Subcommand; 4] = [
    Subcommand { name: "get", arity: -3, run: config_get },
    Subcommand { name: "set", arity: -4, run: config_refused },
    Subcommand { name: "resetstat", arity: 2, run: config_refused },
    Subcommand { name: "rewrite", arity: 2, run: config_refused },
];

fn config_get(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
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
}

fn config_refused(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    Err(RespError::err(format!(
        "CONFIG {} is not supported: ferrite-server is configured by its configuration file",
        lossy(call.args.get(1), 16).to_uppercase()
    )))
}
