//! Keyspace commands: keys as a whole, never their values (`DEL`, `EXISTS`, `DBSIZE`, `SCAN`,
//! ...).

use bytes::BytesMut;
use ferrite_proto::{Attribute, ErrorCode, Request, Response};
use ferrite_store::FindQuery;

use super::steps::{self, Steps, Walk};
use super::{
    check_all, erase, integer_arg, is, lossy, read_value, reply, store, value_length, Call, RespError, REPLY_BYTES_MAX,
};
use crate::handler::{Flow, ScanLimits};
use ferrite_proto::PutFlags;

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

/// `TYPE key`: `string` for any key (every value is one), `none` for a missing key.
pub(super) fn type_of(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let found = value_length(call, call.args.get(1))?.is_some();
    reply::simple(call.out, if found { "string" } else { "none" });
    Ok(Flow::Continue)
}

/// `TTL`, `PTTL`, `EXPIRETIME` and `PEXPIRETIME key`: keys do not expire, so Redis's answer for
/// a key without a time to live, -1, or for a missing key, -2.
pub(super) fn ttl(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let found = value_length(call, call.args.get(1))?.is_some();
    reply::integer(call.out, if found { -1 } else { -2 });
    Ok(Flow::Continue)
}

/// `PERSIST key`: 0, Redis's answer when there is no time to live to remove, key or no key. It
/// still reads the key, so it needs the rights (and waits for plugin calls) a read does.
pub(super) fn persist(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    value_length(call, call.args.get(1))?;
    reply::integer(call.out, 0);
    Ok(Flow::Continue)
}

/// `EXPIRE`, `PEXPIRE`, `EXPIREAT`, `PEXPIREAT`, `SETEX` and `PSETEX`: refused, changing nothing,
/// since keys do not expire. A client that sets a time to live expects the key to go away; storing
/// it for ever instead would break that silently.
pub(super) fn expire(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    Err(RespError::no_expiry(&lossy(call.args.get(0), 16).to_uppercase()))
}

pub(super) fn rename(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    move_value(call, false)
}

pub(super) fn renamenx(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    move_value(call, true)
}

/// `RENAME key newkey`, and `RENAMENX` (`only_new`) which renames only if `newkey` is absent: the
/// value is put under `newkey` and `key` erased in one turn of the shard loop, so no other client
/// sees both names or neither. Each is durable like a native put and erase, and the reply waits
/// for both; a crash before the reply may leave the value under both names (the log keeps a prefix
/// of a torn commit), never under neither. Values longer than the inline limit cannot be renamed
/// here (reading them is refused as `GET` is).
fn move_value(call: &mut Call<'_, '_>, only_new: bool) -> Result<Flow, RespError> {
    let (from, to) = (call.args.get(1), call.args.get(2));
    let Some(value) = read_value(call, from)? else {
        return Err(RespError::err("no such key"));
    };
    let renamed = from != to && store(call, to, &value, if only_new { PutFlags::CREATE_ONLY } else { PutFlags::NONE })?;
    if renamed {
        erase(call, from)?;
    }
    match only_new {
        true => reply::integer(call.out, i64::from(renamed)),
        false => reply::ok(call.out),
    }
    Ok(Flow::Continue)
}

/// `COPY source destination [DB 0] [REPLACE]`: 1 once `destination` holds a copy of `source`'s
/// value; 0 if `source` is missing, or `destination` exists and `REPLACE` was not given. There is
/// one database, so `DB` may name only database 0.
pub(super) fn copy(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (source, destination) = (call.args.get(1), call.args.get(2));
    let options = call.args.skip(3);
    let mut replace = false;
    let mut i = 0;
    while i < options.len() {
        if is(options.get(i), "REPLACE") {
            replace = true;
            i += 1;
        } else if is(options.get(i), "DB") && i + 1 < options.len() {
            if integer_arg(options.get(i + 1))? != 0 {
                return Err(RespError::err("DB index is out of range"));
            }
            i += 2;
        } else {
            return Err(RespError::syntax());
        }
    }
    if source == destination {
        return Err(RespError::err("source and destination objects are the same"));
    }
    let copied = match read_value(call, source)? {
        Some(value) => store(call, destination, &value, if replace { PutFlags::NONE } else { PutFlags::CREATE_ONLY })?,
        None => false,
    };
    reply::integer(call.out, i64::from(copied));
    Ok(Flow::Continue)
}

/// Most keys one `KEYS` answers (with at most [`REPLY_BYTES_MAX`] bytes of keys): they are held,
/// once each, until the walk ends.
const KEYS_FOUND_MAX: usize = 64 * 1024;

/// `KEYS pattern`: every key the glob matches, each once. A pattern without wildcards names one
/// key and is answered by looking it up. Any other walks the pool's table as `SCAN` does, in steps
/// of at most 131,072 home buckets with every other connection served between two, so a large
/// pool holds no one up; but like a many-key command it is not isolated from other clients: a key
/// added or erased during the walk may or may not be answered (every key present throughout is).
/// A walk that finds more than [`KEYS_FOUND_MAX`] keys is refused with a pointer to `SCAN`, and so
/// is one inside `MULTI` that one step does not finish (`EXEC` runs whole).
pub(super) fn keys(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let pattern = call.args.get(1);
    if let Some(key) = glob_literal(pattern) {
        // A key past the limit cannot exist: no match, as for any other absent key.
        let possible = key.len() <= call.shard.limits.key_bytes_max as usize;
        let found = possible && value_length(call, &key)?.is_some();
        reply::array(call.out, usize::from(found));
        if found {
            reply::bulk(call.out, &key);
        }
        return Ok(Flow::Continue);
    }
    let mut progress = call.client.progress.take().unwrap_or_default();
    let walk = progress.walk.get_or_insert_with(Walk::default);
    let query = if pattern == b"*" { FindQuery::Prefix(b"") } else { FindQuery::Glob(pattern) };
    let limits = ScanLimits {
        keys: KEYS_FOUND_MAX + 1,
        homes: SCAN_HOMES_MAX,
        key_bytes: REPLY_BYTES_MAX.saturating_sub(walk.found_bytes) + 1,
    };
    let (next, keys) = call
        .shard
        .scan_step(&mut call.client.session, call.client.pool, &query, walk.cursor, limits)
        .map_err(RespError::from)?;
    for key in keys {
        if !walk.found.contains(key) {
            walk.found_bytes += key.len();
            walk.found.insert(key.into());
        }
    }
    let refuse = |why: &str| {
        Err(RespError::err(format!(
            "KEYS {why}: use SCAN, which walks any pool in steps (redis-cli --scan --pattern '{}')",
            lossy(pattern, 128)
        )))
    };
    if walk.found.len() > KEYS_FOUND_MAX || walk.found_bytes > REPLY_BYTES_MAX {
        return refuse(&format!("answers at most {KEYS_FOUND_MAX} keys of {REPLY_BYTES_MAX} bytes, and more match"));
    }
    if next != 0 {
        if !call.steppable {
            return refuse("inside MULTI walks only a pool one step covers, and this one is larger");
        }
        walk.cursor = next;
        return Ok(steps::pause(call, progress));
    }
    reply::array(call.out, walk.found.len());
    for key in &walk.found {
        reply::bulk(call.out, key);
    }
    Ok(Flow::Continue)
}

/// The one key a glob matches if it has no wildcard (`*`, `?`, `[`), its escapes (`\x`) undone:
/// a backslash at the end stands for itself, as in the glob matcher.
fn glob_literal(pattern: &[u8]) -> Option<Vec<u8>> {
    let mut key = Vec::with_capacity(pattern.len());
    let mut bytes = pattern.iter();
    while let Some(&byte) = bytes.next() {
        match byte {
            b'*' | b'?' | b'[' => return None,
            b'\\' => key.push(*bytes.next().unwrap_or(&b'\\')),
            _ => key.push(byte),
        }
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a glob without wildcards is a single key; its escapes are undone as the matcher
    /// reads them.
    #[test]
    fn a_glob_without_wildcards_is_one_key() {
        assert_eq!(glob_literal(b"user:1"), Some(b"user:1".to_vec()));
        assert_eq!(glob_literal(b""), Some(Vec::new()));
        assert_eq!(glob_literal(b"a\\*b\\?\\[c\\\\"), Some(b"a*b?[c\\".to_vec()));
        assert_eq!(glob_literal(b"tail\\"), Some(b"tail\\".to_vec()));
        for glob in [&b"user:*"[..], b"h?llo", b"h[ae]llo", b"["] {
            assert_eq!(glob_literal(glob), None, "{glob:?}");
        }
        for key in [&b"user:1"[..], b"a*b?[c\\", b"tail\\", b""] {
            let pattern: Vec<u8> =
                key.iter().flat_map(|&b| if b"*?[\\".contains(&b) { vec![b'\\', b] } else { vec![b] }).collect();
            assert!(ferrite_store::glob_match(&pattern, key), "{pattern:?} matches {key:?}");
            assert_eq!(glob_literal(&pattern), Some(key.to_vec()));
        }
    }
}
