//! `WAIT numreplicas timeout`: how many other replicas of this shard's group hold the connection's
//! last write, once at least `numreplicas` do or `timeout` milliseconds have passed (0: no limit).
//! The leader's cluster map says how far each member's log reaches; the wait looks at it every
//! few milliseconds from a task of its own, so the shard goes on serving every other client. On a
//! single server, which has no replicas, the answer is 0 at once.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::{integer_arg, parse_i64, reply, Call, RespError};
use crate::cluster::ShardCluster;
use crate::completion::Completion;
use crate::handler::Flow;
use ferrite_store::persistence::wal::Lsn;

/// How often a waiting `WAIT` looks at the replicas' progress again.
const POLL_INTERVAL: Duration = Duration::from_millis(2);

/// Redis's words to a client whose wait ends because its node no longer leads the group.
const UNBLOCKED: &str = "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)";

pub(super) fn wait(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    if call.shard.cluster.as_ref().is_some_and(|cluster| !cluster.leads_here()) {
        return Err(RespError::err(
            "WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is \
             configured to be writable (which is not the default) writes to replicas are just local and are not \
             propagated.",
        ));
    }
    let wanted = integer_arg(call.args.get(1))?;
    let timeout_ms =
        parse_i64(call.args.get(2)).ok_or_else(|| RespError::err("timeout is not an integer or out of range"))?;
    let timeout_ms = u64::try_from(timeout_ms).map_err(|_| RespError::err("timeout is negative"))?;
    let lsn = call.client.session.last_write_lsn;
    let holding = call.shard.replicas_holding(lsn);
    // Inside `EXEC`, whose replies are written at once, Redis answers at once too.
    let waits = call.deferrable && !enough(holding, wanted);
    let Some(cluster) = call.shard.cluster.clone().filter(|_| waits) else {
        reply::integer(call.out, count(holding));
        return Ok(Flow::Continue);
    };
    let deadline = (timeout_ms > 0).then(|| Instant::now() + Duration::from_millis(timeout_ms));
    let completion = Completion::new();
    tokio::task::spawn_local(watch(cluster, lsn, wanted, deadline, Arc::downgrade(&completion)));
    Ok(Flow::Wait { completion, consumed: true })
}

fn enough(holding: u64, wanted: i64) -> bool {
    u64::try_from(wanted).map_or(true, |wanted| holding >= wanted)
}

fn count(holding: u64) -> i64 {
    i64::try_from(holding).unwrap_or(i64::MAX)
}

/// Completes a `WAIT` once `wanted` replicas hold `lsn`, at `deadline`, or when this node stops
/// leading the group. Ends quietly when the connection is gone (the server shut down).
async fn watch(cluster: ShardCluster, lsn: Lsn, wanted: i64, deadline: Option<Instant>, answer: Weak<Completion>) {
    loop {
        let next = Instant::now() + POLL_INTERVAL;
        tokio::time::sleep_until(deadline.map_or(next, |deadline| deadline.min(next)).into()).await;
        let Some(answer) = answer.upgrade() else { return };
        if !cluster.leads_here() {
            answer.complete(0, |out| reply::error(out, UNBLOCKED));
            return;
        }
        let holding = cluster.map.with(|view| view.replicas_holding(cluster.group, lsn));
        if enough(holding, wanted) || deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            answer.complete(0, |out| reply::integer(out, count(holding)));
            return;
        }
    }
}
