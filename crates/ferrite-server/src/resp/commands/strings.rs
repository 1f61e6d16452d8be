//! String commands: a key's value read, written or changed in place (`GET`, `SET`, `INCR`, ...).
//! A read-modify-write reads and stores in one turn of the shard loop, as `INCR` does, so no
//! other client sees the key in between.

use bytes::BytesMut;
use ferrite_proto::{ErrorCode, PutFlags, Request, Response};

use super::plugins::{counter_layer, invoke, COUNTER_BYTES};
use super::steps::Steps;
use super::{check_all, integer_arg, is, read_value, reply, Call, RespError, REPLY_BYTES_MAX};
use crate::ado::Answer;
use crate::handler::Flow;
use crate::resp::parser::parse_i64;

pub(super) fn get(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let key = call.args.get(1);
    match run!(call, Request::Get { pool: call.client.pool, key }) {
        Ok(Response::Value(value)) => reply::bulk(call.out, value),
        Ok(other) => return Err(RespError::unexpected(&other)),
        Err(failure) if failure.code == ErrorCode::KeyNotFound => reply::null(call.out, call.client.protocol),
        Err(failure) => return Err(failure.into()),
    }
    Ok(Flow::Continue)
}

/// `SET key value [NX|XX] [GET] [KEEPTTL]`. Expiry options are refused: keys do not expire.
pub(super) fn set(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
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
    let value = reply::decimal(sum, &mut digits);
    match run!(call, Request::Put { pool: call.client.pool, flags: PutFlags::NONE, key, value }) {
        Ok(Response::Stored) => reply::integer(call.out, sum),
        Ok(other) => return Err(RespError::unexpected(&other)),
        Err(failure) => return Err(failure.into()),
    }
    Ok(Flow::Continue)
}
