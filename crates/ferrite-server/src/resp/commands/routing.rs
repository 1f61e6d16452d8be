//! Cluster mode: which slot a command's keys hash to (or, at `EXEC`, the keys of every command
//! the transaction queued), and whether this listener answers it, as Redis Cluster decides: keys
//! of several slots are `-CROSSSLOT`; a slot whose group this node's replica does not lead (or
//! that belongs to another group) is `-MOVED slot host:port`, the RESP address of that group's
//! leader; a group without a known leader is `-CLUSTERDOWN`. Commands without keys are answered
//! wherever they arrive. On a single server nothing is refused here.

use super::{is, lookup, Args, Client, RespError};
use crate::handler::ShardState;
use crate::resp::slots::{key_slot, serving, Serving};

/// Why this listener does not answer the command `args` (at `EXEC`, the transaction), if it does
/// not. A command that has begun (a many-key command between its steps) goes on where it began.
pub(super) fn refusal(args: Args<'_>, client: &Client, shard: &ShardState) -> Option<RespError> {
    let cluster = shard.cluster.as_ref()?;
    if client.progress.is_some() {
        return None;
    }
    let addressed = match &client.transaction {
        Some(transaction) if is(args.get(0), "exec") => addressed(transaction.commands()),
        _ => addressed(std::iter::once(args)),
    };
    let slot = match addressed {
        Ok(Some(slot)) => slot,
        Ok(None) => return None,
        Err(crossed) => return Some(crossed),
    };
    match cluster.map.with(|view| serving(view, cluster.group, slot)) {
        Serving::Here => None,
        Serving::Elsewhere(address) => Some(RespError(format!("MOVED {slot} {address}"))),
        Serving::Down => Some(RespError("CLUSTERDOWN The cluster is down".into())),
    }
}

/// The one slot the keys of `commands` hash to; `None` if they name no key. Unknown commands
/// and wrong arities are left for the command to refuse.
fn addressed<'a>(commands: impl Iterator<Item = Args<'a>>) -> Result<Option<u16>, RespError> {
    let mut found: Option<u16> = None;
    for args in commands {
        let Some(spec) = lookup(args.get(0)).filter(|spec| spec.accepts(args.len())) else { continue };
        let (keys, _writes) = spec.keys.of(args);
        for key in keys {
            let slot = key_slot(key);
            match found {
                Some(known) if known != slot => {
                    return Err(RespError("CROSSSLOT Keys in request don't hash to the same slot".into()))
                }
                _ => found = Some(slot),
            }
        }
    }
    Ok(found)
}
