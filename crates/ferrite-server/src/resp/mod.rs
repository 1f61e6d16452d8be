//! The RESP (Redis protocol) listener: `redis-cli`, Redis client libraries and `redis-benchmark`
//! talk to a shard's default pool unchanged.
//!
//! This is a translator, not a second server: each RESP command becomes one or more native
//! [`ferrite_proto::Request`]s executed by [`ShardState::execute`], exactly as a native client's
//! would be, and the [`ferrite_proto::Response`] is rendered as RESP. Statistics, limits, error
//! semantics and durability are therefore the native protocol's, never a copy of them.
//!
//! `parser` turns bytes into command arguments, `commands` maps each command onto requests,
//! `reply` encodes RESP, and `connection` runs the socket. The command set and its differences
//! from Redis are in `docs/resp.md`.

mod commands;
mod connection;
mod parser;
mod reply;
mod slots;
mod topology;

use bytes::BytesMut;
use ferrite_proto::{CreatePoolFlags, Limits, PoolHandle, Request, Response};

pub(crate) use connection::serve;

use crate::config::RespConfig;
use crate::handler::ShardState;
use crate::session::Session;
use parser::ParseLimits;

/// Sizing hint for the default pool's table: it starts with room for a cache of tens of
/// thousands of keys and grows on demand past this.
const POOL_EXPECTED_OBJECTS: u64 = 64 * 1024;

/// What one shard's RESP listener serves.
#[derive(Debug)]
pub(crate) struct Settings {
    /// The default pool: `@{shard}/{name}`, pinned to this shard.
    pub pool: String,
    pub pool_size_bytes: u64,
    /// Whether the default pool is created with a secondary index (`[resp] indexed`).
    pub indexed: bool,
    /// The default pool's plugin chain when the shard creates it (`[resp] plugins`), comma-separated.
    pub plugins: String,
    /// The port the listener is bound to, reported by `INFO`.
    pub port: u16,
    limits: ParseLimits,
}

impl Settings {
    /// What shard `index`'s listener, bound to `port`, serves: keys and values within `limits`,
    /// and `SET` values up to `long_value_bytes_max` streamed (`commands/long_values.rs`).
    pub fn new(config: &RespConfig, index: usize, port: u16, limits: &Limits, long_value_bytes_max: u64) -> Settings {
        let limits = ParseLimits::for_server(limits.key_bytes_max as usize, limits.value_bytes_max as usize)
            .with_long_values(long_value_bytes_max);
        Settings {
            pool: config.pool_name(index),
            pool_size_bytes: config.pool_size_bytes,
            indexed: config.indexed,
            plugins: config.plugins.join(","),
            port,
            limits,
        }
    }
}

/// A shard's bound RESP listener and what it serves.
#[derive(Debug)]
pub(crate) struct Listener {
    pub listener: std::net::TcpListener,
    pub settings: Settings,
}

/// Creates the default pool, or opens it if it exists, in `session`. An existing pool keeps the
/// index it was created with, whatever `[resp] indexed` says now. The error is a message for the log or the client.
fn open_pool(shard: &mut ShardState, settings: &Settings, session: &mut Session) -> Result<PoolHandle, String> {
    let request = Request::CreatePool {
        name: &settings.pool,
        size_bytes: settings.pool_size_bytes,
        expected_objects: POOL_EXPECTED_OBJECTS,
        flags: if settings.indexed { CreatePoolFlags::INDEXED } else { CreatePoolFlags::NONE },
        plugins: &settings.plugins,
    };
    let index = shard.index;
    match shard.execute(request, session, 0) {
        Ok(Response::PoolCreated { pool, created }) => {
            if created {
                tracing::info!(shard = index, pool = %settings.pool, "created the RESP default pool");
            }
            Ok(pool)
        }
        Ok(other) => Err(format!("create_pool was answered with {:?}", other.request_opcode())),
        Err(failure) => Err(failure.message),
    }
}

/// Creates the default pool when the shard starts, so it exists (and is listed, sized as
/// configured) before the first RESP client arrives. The shard's own session closes it again at
/// once: a pool held open cannot be deleted, and the shard has no reason to hold it.
pub(crate) fn create_pool(shard: &mut ShardState, settings: &Settings) -> Result<(), String> {
    let mut session = Session::for_server();
    let pool = open_pool(shard, settings, &mut session)
        .map_err(|message| format!("cannot create the RESP pool '{}': {message}", settings.pool))?;
    shard
        .execute(Request::ClosePool { pool }, &mut session, 0)
        .map_err(|failure| format!("cannot close the RESP pool '{}': {}", settings.pool, failure.message))?;
    debug_assert_eq!(session.drain_opens().count(), 0, "the shard's session holds nothing open");
    Ok(())
}

/// An array of bulk strings (a plugin call's buffers), for answers written outside the command
/// table.
pub(crate) fn reply_array_of_bulks<'b>(out: &mut BytesMut, items: impl ExactSizeIterator<Item = &'b [u8]>) {
    reply::array(out, items.len());
    for item in items {
        reply::bulk(out, item);
    }
}

pub(crate) fn reply_integer(out: &mut BytesMut, value: i64) {
    reply::integer(out, value);
}

pub(crate) fn reply_error(out: &mut BytesMut, text: &str) {
    reply::error(out, text);
}

/// What a RESP client over the connection limit is told before it is closed (`redis-server`'s
/// words).
pub(crate) fn refusal() -> BytesMut {
    let mut out = BytesMut::new();
    reply::error(&mut out, "ERR max number of clients reached");
    out
}

/// What a RESP connection parses from `input` when its bytes arrive in two reads, the first of
/// `first_read` bytes, from a client that has `authenticated` or not: each whole command's
/// arguments, in order, until the parser needs more bytes or refuses them (then an empty command
/// marks the refusal). `SET` values past 64 bytes (up to 4 KiB) stream as long values do, and come
/// out as one argument with the options after them. For the `resp_parse` fuzz target, through
/// [`crate::fuzzing`].
pub(crate) fn parse_in_two_reads(input: &[u8], first_read: usize, authenticated: bool) -> Vec<Vec<Vec<u8>>> {
    let limits = parser::ParseLimits {
        value_bytes_max: 64,
        ..parser::ParseLimits::for_server(ferrite_proto::KEY_BYTES_MAX, ferrite_proto::VALUE_INLINE_BYTES_MAX)
    };
    let mut parser = parser::Parser::new(limits.with_long_values(4096));
    parser.set_authenticated(authenticated);
    let mut buffer: Vec<u8> = input[..first_read].to_vec();
    let mut rest = &input[first_read..];
    let mut commands = Vec::new();
    // A long value's command so far, its length still to come, and the options after it.
    let mut long: Option<(Vec<Vec<u8>>, Option<usize>, usize)> = None;
    loop {
        if let Some((args, Some(length), options)) = &mut long {
            if buffer.len() < *length + 2 {
                if rest.is_empty() {
                    return commands;
                }
                buffer.extend_from_slice(rest);
                rest = &[];
                continue;
            }
            if &buffer[*length..*length + 2] != b"\r\n" {
                commands.push(Vec::new());
                return commands;
            }
            args.push(buffer[..*length].to_vec());
            buffer.drain(..*length + 2);
            parser.resume_array(*options);
            if *options == 0 {
                commands.extend(long.take().map(|(args, ..)| args));
            } else {
                long = long.take().map(|(args, _, options)| (args, None, options));
            }
            continue;
        }
        match parser.parse(&buffer) {
            Ok(parser::Parsed::Command { consumed }) => {
                let parsed = parser.args(&buffer).iter().map(<[u8]>::to_vec);
                match long.take() {
                    Some((mut args, _, _)) => {
                        args.extend(parsed);
                        commands.push(args);
                    }
                    None => commands.push(parsed.collect()),
                }
                buffer.drain(..consumed);
            }
            Ok(parser::Parsed::LongValue { value_start, length, options }) => {
                let args = parser.args(&buffer).iter().map(<[u8]>::to_vec).collect();
                parser.take_long_value();
                buffer.drain(..value_start);
                long = Some((args, Some(length as usize), options));
            }
            Ok(parser::Parsed::Skip { consumed }) => {
                buffer.drain(..consumed);
            }
            Ok(parser::Parsed::Incomplete { .. }) if !rest.is_empty() => {
                buffer.extend_from_slice(rest);
                rest = &[];
            }
            Ok(parser::Parsed::Incomplete { .. }) => return commands,
            Err(_) => {
                commands.push(Vec::new());
                return commands;
            }
        }
    }
}
