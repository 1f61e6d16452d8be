//! String commands: a key's value read, written or changed in place (`GET`, `SET`, `INCR`, ...).
//! A read-modify-write reads and stores in one turn of the shard loop, as `INCR` does, so no
//! other client sees the key in between.

use bytes::BytesMut;
use ferrite_proto::{ErrorCode, PutFlags, Request, Response};

use super::long_values;
use super::plugins::{counter_layer, invoke, COUNTER_BYTES};
use super::steps::{Steps, KEYS_PER_STEP};
use super::{
    check_all, erase, integer_arg, is, read_value, reply, store, value_length, Call, RespError, REPLY_BYTES_MAX,
};
use crate::ado::Answer;
use crate::handler::Flow;
use crate::resp::parser::{parse_i64, Args};

pub(super) fn get(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let key = call.args.get(1);
    match run!(call, Request::Get { pool: call.client.pool, key }) {
        Ok(Response::Value(value)) => reply::bulk(call.out, value),
        Ok(other) => return Err(RespError::unexpected(&other)),
        Err(failure) if failure.code == ErrorCode::KeyNotFound => reply::null(call.out, call.client.protocol),
        // Longer than the inline limit: answered in pieces, unless the reply must be whole (in
        // `EXEC`'s array, or held for a plugin's signal).
        Err(failure) if failure.code == ErrorCode::ValueTooLarge && call.steppable => {
            return long_values::begin_read(call.client, call.shard, key, |length| 0..length, call.out)
        }
        Err(failure) => return Err(failure.into()),
    }
    Ok(Flow::Continue)
}

/// `SET key value [NX|XX] [GET] [KEEPTTL]`. Expiry options are refused: keys do not expire.
pub(super) fn set(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (key, value) = (call.args.get(1), call.args.get(2));
    let options = SetOptions::parse(call.args.skip(3))?;
    let old = if options.get { Some(read_value(call, key)?) } else { None };
    let stored = store(call, key, value, options.flags())?;
    match old {
        Some(Some(old)) => reply::bulk(call.out, &old),
        Some(None) => reply::null(call.out, call.client.protocol),
        None if stored => reply::ok(call.out),
        None => reply::null(call.out, call.client.protocol),
    }
    Ok(Flow::Continue)
}

/// The options of a `SET`, after its value.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SetOptions {
    /// `NX`: only if the key is absent.
    pub nx: bool,
    /// `XX`: only if the key is present.
    pub xx: bool,
    /// `GET`: answer the old value.
    pub get: bool,
}

impl SetOptions {
    pub fn parse(options: Args<'_>) -> Result<SetOptions, RespError> {
        let mut parsed = SetOptions::default();
        for option in options.iter() {
            if is(option, "NX") && !parsed.xx {
                parsed.nx = true;
            } else if is(option, "XX") && !parsed.nx {
                parsed.xx = true;
            } else if is(option, "GET") {
                parsed.get = true;
            } else if is(option, "KEEPTTL") {
                // Keys have no time to live to keep.
            } else if ["EX", "PX", "EXAT", "PXAT"].iter().any(|word| is(option, word)) {
                return Err(RespError::no_expiry("SET with EX, PX, EXAT or PXAT"));
            } else {
                return Err(RespError::syntax());
            }
        }
        Ok(parsed)
    }

    /// The put's flags: `NX` creates only, `XX` updates only.
    pub fn flags(self) -> PutFlags {
        if self.nx {
            PutFlags::CREATE_ONLY
        } else if self.xx {
            PutFlags::UPDATE_ONLY
        } else {
            PutFlags::NONE
        }
    }
}

/// `MGET key [key ...]`: an array of values and nils. A value longer than the inline limit has
/// its direct read opened in the turn that reads the others, and leaves in pieces in its place
/// (`long_values.rs`), unless the reply must be whole (in `EXEC`'s array, or held for a plugin's
/// signal): then it is refused with the value's length.
pub(super) fn mget(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let pool = call.client.pool;
    let keys = call.args.skip(1);
    let steps = Steps::begin(call, keys.len());
    if steps.first {
        check_all(call.shard, keys.iter().map(|key| Request::Get { pool, key }))?;
    }
    // A command done in one step replies straight into the output; one in several assembles its
    // reply between the steps, and writes it whole at the end.
    let whole = steps.first && steps.range.end == keys.len();
    let (mut held, mut long_values) = match call.client.progress.take() {
        Some(progress) if !whole => (progress.reply, progress.long_values),
        _ => (BytesMut::new(), Vec::new()),
    };
    let start = call.out.len();
    let (out, base) = if whole { (&mut *call.out, start) } else { (&mut held, 0) };
    let filled: Result<(), RespError> = 'fill: {
        if steps.first {
            reply::array(out, keys.len());
        }
        for i in steps.range.clone() {
            let key = keys.get(i);
            match run!(call, Request::Get { pool, key }) {
                Ok(Response::Value(value)) => reply::bulk(out, value),
                Err(failure) if failure.code == ErrorCode::KeyNotFound => reply::null(out, call.client.protocol),
                Err(failure) if failure.code == ErrorCode::ValueTooLarge && call.steppable => {
                    if let Err(error) =
                        long_values::open_read(call.client, call.shard, key, out, base, &mut long_values)
                    {
                        break 'fill Err(error);
                    }
                }
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
        if !long_values.is_empty() {
            call.shard.end_transfers(&mut call.client.session);
        }
        return Err(error);
    }
    if steps.range.end < keys.len() {
        return Ok(steps.next_with_long_values(call, held, long_values));
    }
    call.out.extend_from_slice(&held);
    long_values::answer_with_long_values(call.client, call.out, start, long_values);
    Ok(Flow::Continue)
}

/// `MSET k v [k v ...]`. Every pair is checked against the limits first; a pool that fills up
/// part-way keeps the pairs stored before it did (Redis's `MSET` cannot run out of room midway).
pub(super) fn mset(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
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

pub(super) fn incrby(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let delta = integer_arg(call.args.get(2))?;
    incr_by(call, delta)
}

pub(super) fn decrby(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let delta = integer_arg(call.args.get(2))?;
    let delta = delta.checked_neg().ok_or_else(|| RespError::err("decrement would overflow"))?;
    incr_by(call, delta)
}

/// Adds `delta` to the decimal integer stored under the key (0 if absent) and stores the sum: a
/// read and a write in one turn of the shard loop, so no other client sees the key in between.
pub(super) fn incr_by(call: &mut Call<'_, '_>, delta: i64) -> Result<Flow, RespError> {
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
    store(call, key, reply::decimal(sum, &mut digits), PutFlags::NONE)?;
    reply::integer(call.out, sum);
    Ok(Flow::Continue)
}

/// `INCRBYFLOAT key increment`: adds to the number stored under the key (0 if absent) and stores
/// the sum as text, in one turn of the shard loop like `INCR`. Numbers are read and summed as
/// 64-bit floating point, where `redis-server` uses the C `long double` (80-bit on x86): sums
/// agree but for the last digits of long fractions. The sum is written in the shortest decimal
/// that reads back as the same number, never in exponent form, as Redis writes it.
pub(super) fn incrbyfloat(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let key = call.args.get(1);
    let increment = parse_float(call.args.get(2)).ok_or_else(not_float)?;
    let current = match read_value(call, key)? {
        Some(value) => parse_float(&value).ok_or_else(not_float)?,
        None => 0.0,
    };
    let sum = current + increment;
    if !sum.is_finite() {
        return Err(RespError::err("increment would produce NaN or Infinity"));
    }
    let text = sum.to_string();
    store(call, key, text.as_bytes(), PutFlags::NONE)?;
    reply::bulk(call.out, text.as_bytes());
    Ok(Flow::Continue)
}

fn not_float() -> RespError {
    RespError::err("value is not a valid float")
}

/// A number as `redis-server` reads one (`string2ld`): the whole text, with no space around it,
/// and not NaN; an infinity is a number (the sum it makes is refused).
fn parse_float(bytes: &[u8]) -> Option<f64> {
    let number: f64 = std::str::from_utf8(bytes).ok()?.parse().ok()?;
    (!number.is_nan()).then_some(number)
}

/// `SETNX key value`: 1 if the key was absent and is now set, 0 if it was present.
pub(super) fn setnx(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let stored = store(call, call.args.get(1), call.args.get(2), PutFlags::CREATE_ONLY)?;
    reply::integer(call.out, i64::from(stored));
    Ok(Flow::Continue)
}

/// `GETSET key value`: `SET key value GET`, the old value or nil.
pub(super) fn getset(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (key, value) = (call.args.get(1), call.args.get(2));
    let old = read_value(call, key)?;
    store(call, key, value, PutFlags::NONE)?;
    bulk_or_null(call, old.as_deref());
    Ok(Flow::Continue)
}

/// `GETDEL key`: the value, erased in the same turn; nil for a missing key.
pub(super) fn getdel(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let key = call.args.get(1);
    let old = read_value(call, key)?;
    if old.is_some() {
        erase(call, key)?;
    }
    bulk_or_null(call, old.as_deref());
    Ok(Flow::Continue)
}

/// `GETEX key [PERSIST]`: `GET`, since keys have no time to live to change; the expiry options
/// are refused.
pub(super) fn getex(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    for option in call.args.skip(2).iter() {
        if ["EX", "PX", "EXAT", "PXAT"].iter().any(|word| is(option, word)) {
            return Err(RespError::no_expiry("GETEX with EX, PX, EXAT or PXAT"));
        }
        if !is(option, "PERSIST") {
            return Err(RespError::syntax());
        }
    }
    get(call)
}

fn bulk_or_null(call: &mut Call<'_, '_>, value: Option<&[u8]>) {
    match value {
        Some(value) => reply::bulk(call.out, value),
        None => reply::null(call.out, call.client.protocol),
    }
}

/// Most pairs one `MSETNX` takes. It is atomic, so it runs in one turn of the shard loop, which
/// is bounded like one step of `MSET`.
const MSETNX_PAIRS_MAX: usize = KEYS_PER_STEP;

/// `MSETNX key value [key value ...]`: sets every pair if none of the keys exists (1), else
/// nothing (0), in one turn of the shard loop. Every pair is checked against the limits first; a
/// pool that fills up part-way keeps the pairs stored before it did, as `MSET` does.
pub(super) fn msetnx(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let pairs = call.args.skip(1);
    if pairs.len() % 2 == 1 {
        return Err(RespError::arity("msetnx"));
    }
    let count = pairs.len() / 2;
    if count > MSETNX_PAIRS_MAX {
        return Err(RespError::err(format!(
            "MSETNX takes at most {MSETNX_PAIRS_MAX} pairs: it is atomic, so it runs in one step of the shard; use \
             MSET, or MULTI with several MSETNX"
        )));
    }
    let pool = call.client.pool;
    let put =
        |i: usize| Request::Put { pool, flags: PutFlags::NONE, key: pairs.get(2 * i), value: pairs.get(2 * i + 1) };
    check_all(call.shard, (0..count).map(put))?;
    for i in 0..count {
        if value_length(call, pairs.get(2 * i))?.is_some() {
            reply::integer(call.out, 0);
            return Ok(Flow::Continue);
        }
    }
    for i in 0..count {
        store(call, pairs.get(2 * i), pairs.get(2 * i + 1), PutFlags::NONE)?;
    }
    reply::integer(call.out, 1);
    Ok(Flow::Continue)
}

/// `APPEND key value`: the value with `value` added at its end (created if absent), and its new
/// length, in one turn of the shard loop.
pub(super) fn append(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (key, suffix) = (call.args.get(1), call.args.get(2));
    let old = read_value(call, key)?;
    let mut value = match old {
        Some(old) if suffix.is_empty() => {
            reply::integer(call.out, old.len() as i64);
            return Ok(Flow::Continue);
        }
        Some(old) => old,
        None => Vec::new(),
    };
    check_length(call, value.len() as u64 + suffix.len() as u64)?;
    value.extend_from_slice(suffix);
    store(call, key, &value, PutFlags::NONE)?;
    reply::integer(call.out, value.len() as i64);
    Ok(Flow::Continue)
}

/// Refuses a value of `length` bytes past the server's value limit before it is built, in
/// Redis's words for its own limit.
fn check_length(call: &Call<'_, '_>, length: u64) -> Result<(), RespError> {
    let max = call.shard.limits.value_bytes_max;
    if length > u64::from(max) {
        return Err(RespError::err(format!(
            "string exceeds maximum allowed size (limits.value_bytes_max: {max} bytes)"
        )));
    }
    Ok(())
}

/// `STRLEN key`: the value's length, 0 for a missing key.
pub(super) fn strlen(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let length = value_length(call, call.args.get(1))?.unwrap_or(0);
    reply::integer(call.out, i64::try_from(length).unwrap_or(i64::MAX));
    Ok(Flow::Continue)
}

/// `GETRANGE key start end` (and its old name `SUBSTR`): the bytes from `start` to `end`
/// inclusive, counted from the end when negative; an empty string for a missing key. Of a value
/// longer than the inline limit, only the range is read: at once if it is within the inline
/// limit, else in pieces as a long `GET` is, unless the reply must be whole (in `EXEC`'s array).
pub(super) fn getrange(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let start = integer_arg(call.args.get(2))?;
    let end = integer_arg(call.args.get(3))?;
    let key = call.args.get(1);
    match run!(call, Request::Get { pool: call.client.pool, key }) {
        Ok(Response::Value(value)) => {
            let range = inclusive_range(value.len() as u64, start, end);
            reply::bulk(call.out, &value[range.start as usize..range.end as usize]);
        }
        Ok(other) => return Err(RespError::unexpected(&other)),
        Err(failure) if failure.code == ErrorCode::KeyNotFound => reply::bulk(call.out, b""),
        Err(failure) if failure.code == ErrorCode::ValueTooLarge => {
            let part = inclusive_range(value_length(call, key)?.unwrap_or(0), start, end);
            if part.end - part.start <= u64::from(call.shard.limits.value_bytes_max) {
                long_values::read_part(call.client, call.shard, key, part, call.out)?;
            } else if call.steppable {
                return long_values::begin_read(call.client, call.shard, key, |_| part, call.out);
            } else {
                return Err(failure.into());
            }
        }
        Err(failure) => return Err(failure.into()),
    }
    Ok(Flow::Continue)
}

/// Which bytes of a value of `len` bytes `GETRANGE start end` means, exactly as `redis-server`
/// works it out: negative positions count from the end, the end is cut to the value, and a start
/// past the end is nothing (an empty range).
fn inclusive_range(len: u64, start: i64, end: i64) -> std::ops::Range<u64> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    if (start < 0 && end < 0 && start > end) || len == 0 {
        return 0..0;
    }
    let from_end = |position: i64| if position < 0 { (len + position).max(0) } else { position };
    let (start, end) = (from_end(start), from_end(end).min(len - 1));
    if start > end {
        return 0..0;
    }
    start as u64..end as u64 + 1
}

/// `SETRANGE key offset value`: overwrites the value from `offset`, padding it with zero bytes
/// when it is shorter (a missing key counts as empty), and answers its new length, in one turn of
/// the shard loop. An empty `value` changes nothing, as in Redis.
pub(super) fn setrange(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (key, bytes) = (call.args.get(1), call.args.get(3));
    let offset = integer_arg(call.args.get(2))?;
    let offset = u64::try_from(offset).map_err(|_| RespError::err("offset is out of range"))?;
    let old = read_value(call, key)?;
    if bytes.is_empty() {
        reply::integer(call.out, old.map_or(0, |old| old.len() as i64));
        return Ok(Flow::Continue);
    }
    let end = offset.saturating_add(bytes.len() as u64);
    check_length(call, end)?;
    // Within the value limit, so both fit `usize`.
    let (offset, end) = (offset as usize, end as usize);
    let mut value = old.unwrap_or_default();
    if value.len() < end {
        value.resize(end, 0);
    }
    value[offset..end].copy_from_slice(bytes);
    store(call, key, &value, PutFlags::NONE)?;
    reply::integer(call.out, value.len() as i64);
    Ok(Flow::Continue)
}
