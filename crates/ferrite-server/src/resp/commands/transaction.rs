//! `MULTI` ... `EXEC`: commands queued, then run together in one turn of the shard loop.

use std::ops::Range;

use bytes::BytesMut;

use super::{dispatch, lookup, reply, routing, unknown_command, Args, Call, Client, RespError, REPLY_BYTES_MAX};
use crate::handler::{Flow, ShardState};

/// Most commands, and most argument bytes, one `MULTI` transaction may queue: it is held in memory
/// until `EXEC`.
const TRANSACTION_COMMANDS_MAX: usize = 64 * 1024;
const TRANSACTION_BYTES_MAX: usize = crate::resp::parser::COMMAND_BYTES_MAX;

/// A `MULTI` transaction being queued: the commands' arguments, copied (the read buffer moves on).
#[derive(Debug, Default)]
pub(super) struct Transaction {
    bytes: Vec<u8>,
    /// Each command's argument ranges in `bytes`.
    commands: Vec<Vec<Range<usize>>>,
    /// A command was refused while queueing: `EXEC` runs nothing.
    failed: bool,
}

impl Transaction {
    /// Notes a command refused while queueing: `EXEC` will run nothing.
    pub(super) fn refuse(&mut self) {
        self.failed = true;
    }

    /// The queued commands, in order.
    pub fn commands(&self) -> impl Iterator<Item = Args<'_>> {
        self.commands.iter().map(|ranges| Args::new(&self.bytes, ranges))
    }
}

/// Commands that act at once inside `MULTI` rather than being queued.
pub(super) const TRANSACTION_CONTROL: [&str; 5] = ["exec", "discard", "multi", "watch", "quit"];

/// Queues a command of a transaction. A command that could never run (unknown, wrong arity, past
/// the transaction's size limits, or in cluster mode not answered by this listener) is refused
/// now, and the whole transaction with it at `EXEC`, as in Redis.
pub(super) fn queue(args: Args<'_>, client: &mut Client, shard: &mut ShardState, out: &mut BytesMut) {
    let elsewhere = routing::refusal(args, client, shard);
    let transaction = client.transaction.as_mut().expect("the caller checked that a transaction is open");
    let refusal = match lookup(args.get(0)) {
        None => Some(unknown_command(args)),
        Some(spec) if !spec.accepts(args.len()) => Some(RespError::arity(spec.name)),
        Some(_) if elsewhere.is_some() => elsewhere,
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

pub(super) fn multi(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
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
pub(super) fn exec(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let transaction = call.client.transaction.take().ok_or_else(|| RespError::err("EXEC without MULTI"))?;
    if transaction.failed {
        return Err(RespError("EXECABORT Transaction discarded because of previous errors.".into()));
    }
    let start = call.out.len();
    reply::array(call.out, transaction.commands.len());
    let mut dropped = BytesMut::new();
    for args in transaction.commands() {
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

pub(super) fn discard(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    call.client.transaction.take().ok_or_else(|| RespError::err("DISCARD without MULTI"))?;
    reply::ok(call.out);
    Ok(Flow::Continue)
}

/// Optimistic locking is not offered: a transaction here cannot be interleaved with other clients'
/// commands anyway, so `MULTI`/`EXEC` alone is atomic.
pub(super) fn watch(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    if call.client.transaction.is_some() {
        return Err(RespError::err("WATCH inside MULTI is not allowed"));
    }
    Err(RespError::err("WATCH is not supported by ferrite"))
}
