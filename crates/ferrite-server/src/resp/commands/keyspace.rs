//! Keyspace commands: keys as a whole, never their values (`DEL`, `EXISTS`, `DBSIZE`, `SCAN`,
//! ...).

use bytes::BytesMut;
use ferrite_proto::{Attribute, ErrorCode, Request, Response};
use ferrite_store::FindQuery;

use super::steps::Steps;
use super::{check_all, integer_arg, is, reply, Call, RespError, REPLY_BYTES_MAX};
use crate::handler::{Flow, ScanLimits};

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

/// `SCAN`'s default `COUNT`, as in Redis.
const SCAN_COUNT_DEFAULT: u64 = 10;

pub(super) fn del(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let pool = call.client.pool;
    count_keys_where(call, |key| Request::Erase { pool, key })
}

/// `EXISTS k [k ...]`: how many of the keys exist, a key named twice counting twice (as in Redis).
pub(super) fn exists(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
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

pub(super) fn count(call: &mut Call<'_, '_>) -> Result<u64, RespError> {
    match run!(call, Request::Count { pool: call.client.pool }) {
        Ok(Response::Count(count)) => Ok(count),
        Ok(other) => Err(RespError::unexpected(&other)),
        Err(failure) => Err(failure.into()),
    }
}

pub(super) fn dbsize(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
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
pub(super) fn scan(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
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
