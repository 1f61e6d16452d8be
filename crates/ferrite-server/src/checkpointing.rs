//! The shard task that takes checkpoints: when one is due it begins it, then copies pages in
//! bounded steps (yielding to the shard's connections between steps), hands file I/O to the
//! blocking pool, and finally recycles the log segments the checkpoint covers.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use ferrite_store::persistence::ssd::{CheckpointError, CheckpointPool, Step};
use ferrite_store::persistence::wal::{Lsn, Released};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::handler::ShardState;

/// How often the task checks whether a checkpoint is due.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Pages copied per step: 1 MiB, a few hundred microseconds of the shard's time.
const PAGES_PER_STEP: usize = 256;

/// Runs until `shutdown`. Does nothing on a shard without durability.
pub(crate) async fn run(shard: Rc<RefCell<ShardState>>, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => return,
            () = tokio::time::sleep(POLL_INTERVAL) => {}
        }
        let due = shard.borrow().durability.as_ref().is_some_and(|d| d.checkpoint_due());
        if due && !checkpoint(&shard, &mut shutdown).await {
            return;
        }
    }
}

/// Takes one checkpoint. Returns false if the shard is stopping.
async fn checkpoint(shard: &Rc<RefCell<ShardState>>, shutdown: &mut watch::Receiver<bool>) -> bool {
    let started = Instant::now();
    let index = shard.borrow().index;
    let paused = match settle_leader(shard).await {
        Settled::NotLeading => false,
        Settled::Paused => true,
        Settled::GaveUp => return true,
    };
    let (mut gate, log, keep_log_from) = {
        let mut state = shard.borrow_mut();
        if state.durability.as_ref().is_some_and(|durability| durability.checkpoints_held()) {
            // A snapshot installation began while the leader settled.
            if let Some(replication) = state.replication.as_mut().filter(|_| paused) {
                replication.resume();
            }
            return true;
        }
        let (pools, next_pool_id, replay_from, keep_log_from) = source(&mut state);
        let durability = state.durability.as_mut().expect("checked by the caller");
        let held = durability.log.held_segments();
        let segment_bytes = durability.log.segment_bytes();
        durability.checkpointer.begin(replay_from, next_pool_id, pools, &held, segment_bytes);
        let begun = (durability.gate.clone(), durability.log.clone(), keep_log_from);
        if let Some(replication) = state.replication.as_mut().filter(|_| paused) {
            replication.resume();
        }
        begun
    };
    let mut pages_written = 0u64;
    let outcome: Result<(u64, Released), CheckpointError> = loop {
        if let Some(reason) = log.failure() {
            // Pool memory may hold changes the log never took: nothing more may be copied.
            break Err(CheckpointError::LogFailed(reason));
        }
        let step = {
            let mut state = shard.borrow_mut();
            let durability = state.durability.as_mut().expect("checked by the caller");
            durability.checkpointer.step(gate.durable_lsn(), PAGES_PER_STEP)
        };
        match step {
            Ok(Step::Write(write)) => {
                pages_written += write.pages();
                match tokio::task::spawn_blocking(move || write.run()).await {
                    Ok(Ok(buffer)) => {
                        let mut state = shard.borrow_mut();
                        if let Some(durability) = state.durability.as_mut() {
                            durability.checkpointer.recycle(buffer);
                        }
                    }
                    Ok(Err(error)) => break Err(error),
                    Err(join) => break Err(blocking_failed(join)),
                }
            }
            Ok(Step::WaitDurable(lsn)) => {
                tokio::select! {
                    biased;
                    _ = shutdown.wait_for(|stop| *stop) => {
                        abandon(shard);
                        return false;
                    }
                    waited = gate.wait_for(lsn) => if waited.is_err() {
                        abandon(shard);
                        return false;
                    }
                }
            }
            Ok(Step::Continue) => tokio::task::yield_now().await,
            Ok(Step::Finish(job)) => {
                let log = log.clone();
                let finished = tokio::task::spawn_blocking(move || {
                    let manifest = job.run(|| log.failure())?;
                    let held = manifest.held_segments();
                    let recycled =
                        log.release_before(manifest.replay_from.min(keep_log_from), &held).map_err(|error| {
                            CheckpointError::Io {
                                context: "recycling log segments".into(),
                                source: std::io::Error::other(error.to_string()),
                            }
                        })?;
                    Ok((manifest, recycled))
                })
                .await
                .unwrap_or_else(|join| Err(blocking_failed(join)));
                let mut state = shard.borrow_mut();
                let durability = state.durability.as_mut().expect("checked by the caller");
                match finished {
                    Ok((manifest, recycled)) => {
                        let seq = manifest.seq;
                        let completed = durability.checkpointer.complete(Ok(manifest));
                        durability.last_checkpoint = Instant::now();
                        durability.checkpoints += 1;
                        durability.last_checkpoint_took = started.elapsed();
                        durability.last_checkpoint_pages = pages_written;
                        durability.checkpoint_pages_total += pages_written;
                        break completed.map(|_| (seq, recycled));
                    }
                    Err(error) => {
                        durability.checkpointer.abandon();
                        break Err(error);
                    }
                }
            }
            Err(error) => break Err(error),
        }
        if *shutdown.borrow() {
            abandon(shard);
            return false;
        }
        tokio::task::yield_now().await;
    };
    if outcome.is_ok() {
        if let Some(replication) = shard.borrow().replication.as_ref() {
            replication.checkpointed.notify_one();
        }
    }
    match outcome {
        Ok((seq, released)) => info!(
            shard = index,
            checkpoint = seq,
            pages_written,
            log_segments_recycled = released.recycled,
            log_segments_held = released.held,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "checkpoint complete"
        ),
        Err(error) => {
            abandon(shard);
            if let Some(durability) = shard.borrow_mut().durability.as_mut() {
                durability.last_checkpoint = Instant::now();
            }
            warn!(shard = index, %error, "checkpoint failed; the log keeps everything and the next one retries");
        }
    }
    true
}

/// How long a leader's requests may wait for a checkpoint to begin.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether a leader settled for a checkpoint to begin.
enum Settled {
    /// A single server, or a replica that does not lead: nothing to settle.
    NotLeading,
    /// Everything the leader executed is applied, and its requests wait until the checkpoint
    /// has begun.
    Paused,
    /// Its entries were not all committed in time (it may be losing its leadership): no
    /// checkpoint now.
    GaveUp,
}

/// On a leader, pauses its requests until everything it executed is applied: its stores then
/// hold exactly what its group committed, which a checkpoint must begin from (a pool created or
/// deleted by an entry not yet committed would otherwise be in the checkpoint and replayed
/// again). The pause lasts about one commit.
async fn settle_leader(shard: &Rc<RefCell<ShardState>>) -> Settled {
    match shard.borrow_mut().replication.as_mut() {
        Some(replication) if replication.leads() => replication.pause(),
        _ => return Settled::NotLeading,
    }
    let asked = Instant::now();
    loop {
        {
            let mut state = shard.borrow_mut();
            let last = state.durability.as_ref().map_or(0, |durability| durability.log.last_lsn());
            let Some(replication) = state.replication.as_mut() else { return Settled::NotLeading };
            if replication.applied.is_some_and(|id| id.index >= last) {
                return Settled::Paused;
            }
            if !replication.leads() || asked.elapsed() > SETTLE_TIMEOUT {
                replication.resume();
                return Settled::GaveUp;
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// What a checkpoint begun now copies: the pools, the next pool id, the LSN recovery replays
/// from, and the first LSN the log must keep after it.
///
/// A single server's pools hold every record its log holds. A replica's hold only the entries
/// it applied (those its group committed; a leader's, settled, hold nothing more), so recovery
/// replays from the one after the last applied; its log also keeps what Raft has not purged, for
/// replicas that lag behind. Its committed position is saved first: recovery replays that far.
fn source(state: &mut ShardState) -> (Vec<CheckpointPool>, u64, Lsn, Lsn) {
    let (last, durable) = state
        .durability
        .as_ref()
        .map_or((0, 0), |durability| (durability.log.last_lsn(), durability.log.durable_lsn()));
    let Some(replication) = state.replication.as_mut() else {
        return (state.pools.checkpoint_pools(), state.pools.next_handle(), last + 1, Lsn::MAX);
    };
    if let Err(error) = replication.save_committed(durable) {
        warn!(shard = state.index, %error, "cannot save the group's committed position before a checkpoint");
    }
    let replay_from = last.min(replication.applied.map_or(0, |id| id.index)) + 1;
    let keep_from = replication.first_readable();
    match &replication.replica {
        Some(replica) => (replica.checkpoint_pools(), replica.next_pool_id, replay_from, keep_from),
        None => (state.pools.checkpoint_pools(), state.pools.next_handle(), replay_from, keep_from),
    }
}

fn abandon(shard: &Rc<RefCell<ShardState>>) {
    if let Some(durability) = shard.borrow_mut().durability.as_mut() {
        durability.checkpointer.abandon();
    }
}

fn blocking_failed(join: tokio::task::JoinError) -> CheckpointError {
    CheckpointError::Io { context: "checkpoint I/O task".into(), source: std::io::Error::other(join.to_string()) }
}
