//! The default pool's plugin chain seen from RESP: `FERRITE.INVOKE`, `INCR` and kin through the
//! `counter` plugin, and the signals commands make to the chain (`[ado] signals`).

use bytes::BytesMut;
use ferrite_auth::Rights;

use super::{integer_arg, is, reply, Args, Call, Client, RespError, Spec};
use crate::ado::{Answer, Signals};
use crate::handler::{Accepted, Flow, Invoke, ShardState};

/// The signals a command makes (`[ado] signals`) on a default pool with plugins: `SET` and
/// `MSET` signal each key they write (post-put), `GET` and `MGET` each key they find
/// (post-get), `DEL` and `UNLINK` each key they erase (post-erase). A many-key command's keys are taken as
/// they are before it runs (it never waits part way), each key once.
pub(super) fn signal_of(spec: &Spec, args: Args<'_>, client: &Client, shard: &ShardState) -> Option<Signals> {
    let (signal, keys, present_only): (_, Vec<&[u8]>, _) = match spec.name {
        "set" => ("post-put", vec![args.get(1)], false),
        "mset" => ("post-put", (1..args.len()).step_by(2).map(|at| args.get(at)).collect(), false),
        "get" => ("post-get", vec![args.get(1)], false),
        "mget" => ("post-get", args.skip(1).iter().collect(), true),
        "del" | "unlink" if args.len() == 2 => ("post-erase", vec![args.get(1)], false),
        "del" | "unlink" => ("post-erase", args.skip(1).iter().collect(), true),
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
pub(super) fn signal_or_reply(
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

/// `FERRITE.INVOKE key payload [CREATE size]`: calls the default pool's plugin chain on `key`
/// (creating it as `size` zero bytes if absent, with `CREATE`), answering an array of the
/// chain's response buffers. An empty key calls the chain on the pool itself.
pub(super) fn ferrite_invoke(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
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
pub(super) const COUNTER_BYTES: u64 = 8;

/// The layer of `counter` in the default pool's chain, if it has one: `INCR` and kin then count
/// through it, and its values are 8-byte integers rather than decimal text.
pub(super) fn counter_layer(call: &Call<'_, '_>) -> Option<u32> {
    let pool = call.shard.pools.get(call.client.pool)?;
    let position = ferrite_proto::plugin_names(&pool.plugin_chain).position(|name| name == "counter")?;
    u32::try_from(position).ok()
}

/// Invokes the default pool's chain; the answer comes later, as `answer` says.
pub(super) fn invoke(
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
