//! `READONLY` reads answered by a follower from its replica: `GET`, `MGET`, `EXISTS` and
//! `STRLEN` of keys of the listener's own group, on a connection that sent `READONLY`, by a
//! follower that heard from its leader within the longest election timeout. The reply may miss
//! the writes of the last moments (see `docs/cluster.md`, "Reads"); every other command, and
//! every read a follower may not answer (a value past the inline limit among them), is redirected
//! to the leader as usual.

use std::time::Instant;

use bytes::BytesMut;
use ferrite_auth::Rights;

use super::{is, Args, Client};
use crate::handler::{Flow, ShardState};
use crate::resp::reply;
use crate::resp::slots::{group_of, key_slot};
use crate::resp::Settings;

/// The reads a follower answers, and how many arguments each takes (the name included; 0: two
/// or more).
const READS: [(&str, usize); 4] = [("get", 2), ("mget", 0), ("exists", 0), ("strlen", 2)];

/// Answers `args` from this follower's replica if it may (see the module's doc); `None` if the
/// command goes the usual way.
pub(super) fn read_here(
    args: Args<'_>,
    client: &Client,
    shard: &mut ShardState,
    settings: &Settings,
    out: &mut BytesMut,
) -> Option<Flow> {
    // A many-key command paused between its steps finishes the way it began.
    if !client.readonly || client.transaction.is_some() || client.progress.is_some() || args.len() < 2 {
        return None;
    }
    let name = args.get(0);
    let (command, arity) = READS.iter().find(|(command, _)| is(name, command))?;
    if *arity != 0 && args.len() != *arity {
        return None;
    }
    let cluster = shard.cluster.as_ref()?;
    let groups = cluster.map.with(|view| view.groups.len());
    let keys: Vec<&[u8]> = (1..args.len()).map(|at| args.get(at)).collect();
    if keys.iter().any(|key| group_of(key_slot(key), groups) != cluster.group) {
        return None;
    }
    if !shard.rights_on(&client.session.identity, &settings.pool).contains(Rights::READ) {
        return None;
    }
    let replication = shard.replication.as_ref()?;
    if !replication.reads_locally(Instant::now()) {
        return None;
    }
    let replica = replication.replica.as_ref()?;
    let value = |key: &[u8]| replica.peek(&settings.pool, key).flatten();
    // A value past the inline limit is answered in pieces, by the leader (`long_values.rs`):
    // the reply begun here is taken back.
    let inline_max = shard.limits.value_bytes_max as usize;
    let started = out.len();
    let bulk_or_null = |out: &mut BytesMut, key: &[u8]| match value(key) {
        Some(found) if found.len() > inline_max => false,
        Some(found) => {
            reply::bulk(out, found);
            true
        }
        None => {
            reply::null(out, client.protocol);
            true
        }
    };
    match *command {
        "get" | "mget" => {
            if *command == "mget" {
                reply::array(out, keys.len());
            }
            // `GET` has one key; `MGET` answers each in its array.
            if !keys.iter().all(|key| bulk_or_null(out, key)) {
                out.truncate(started);
                return None;
            }
        }
        "exists" => reply::integer(out, keys.iter().filter(|key| value(key).is_some()).count() as i64),
        _ => reply::integer(out, value(keys[0]).map_or(0, |found| found.len() as i64)),
    }
    shard.stats.requests += 1;
    Some(Flow::Continue)
}
