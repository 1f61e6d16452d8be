//! The group's log as openraft asks for it: a thin adapter over the shard's [`Replication`]
//! and write-ahead log. Entries are durable when the shard's sync thread has synced them; their
//! flush callbacks are completed on the shard's thread as the durable end of the log moves
//! ([`complete_flushes`]).
//!
//! [`Replication`]: super::replication::Replication

use std::cell::RefCell;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::rc::Rc;
use std::time::Duration;

use ferrite_store::persistence::ssd::SharedLog;
use ferrite_store::persistence::wal::Lsn;
use openraft::storage::{IOFlushed, LogState, RaftLogStorage};
use openraft::{OptionalSend, RaftLogReader};
use tokio::sync::watch;

use super::replication::Appending;
use super::types::{Entry, LogId, Redo, Vote, C};
use crate::handler::ShardState;

/// How often a cut of the log waits for its in-flight writes to finish.
const QUIET_POLL: Duration = Duration::from_millis(1);

/// Flush callbacks waiting for the log to be durable up to their index.
pub(crate) type Flushes = Rc<RefCell<Vec<(Lsn, IOFlushed<C>)>>>;

/// The group's log of one shard.
#[derive(Clone)]
pub(crate) struct ShardLog {
    shard: Rc<RefCell<ShardState>>,
    flushes: Flushes,
}

impl Debug for ShardLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardLog").finish_non_exhaustive()
    }
}

fn no_replication() -> io::Error {
    io::Error::other("the shard has no replica of a group")
}

fn log_of(shard: &ShardState) -> io::Result<SharedLog> {
    shard.durability.as_ref().map(|durability| durability.log.clone()).ok_or_else(no_replication)
}

/// Waits until everything appended to `log` is written and synced.
pub(crate) async fn quiet(log: &SharedLog) -> io::Result<()> {
    log.request_sync();
    while !log.is_quiet() {
        if let Some(reason) = log.failure() {
            return Err(io::Error::other(reason));
        }
        tokio::time::sleep(QUIET_POLL).await;
    }
    Ok(())
}

impl ShardLog {
    pub fn new(shard: Rc<RefCell<ShardState>>) -> ShardLog {
        ShardLog { shard, flushes: Rc::default() }
    }

    /// The shard whose log this is, for tests that look inside.
    #[cfg(test)]
    pub fn shard(&self) -> Rc<RefCell<ShardState>> {
        Rc::clone(&self.shard)
    }

    /// The flush callbacks, for [`complete_flushes`].
    pub fn flushes(&self) -> Flushes {
        Rc::clone(&self.flushes)
    }

    /// Cuts the shard's log back to before `cut_from` once it is quiet, and the replica's
    /// memory of it with it.
    async fn cut_from(&self, cut_from: Lsn) -> io::Result<()> {
        let last_kept = match cut_from {
            0 => None,
            _ => {
                let shard = self.shard.borrow();
                let replication = shard.replication.as_ref().ok_or_else(no_replication)?;
                replication.read(cut_from - 1, cut_from)?.first().map(|entry| entry.log_id)
            }
        };
        self.cut_after(last_kept).await
    }

    /// Starts the (empty) log over at `first` once it is quiet.
    async fn start_at(&self, first: Lsn) -> io::Result<()> {
        let log = log_of(&self.shard.borrow())?;
        quiet(&log).await?;
        log.restart_at(first).map_err(io::Error::other)?;
        let mut shard = self.shard.borrow_mut();
        shard.replication.as_mut().ok_or_else(no_replication)?.started_at(first);
        Ok(())
    }

    /// Cuts the shard's log back after `last` once it is quiet (`None`: all of it).
    async fn cut_after(&self, last: Option<LogId>) -> io::Result<()> {
        let log = log_of(&self.shard.borrow())?;
        quiet(&log).await?;
        log.truncate_after(last.map_or(0, |id| id.index)).map_err(io::Error::other)?;
        let mut shard = self.shard.borrow_mut();
        shard.replication.as_mut().ok_or_else(no_replication)?.truncated(last)
    }
}

/// Completes the flush callbacks whose entries the log has made durable, for as long as the
/// shard runs: Raft counts an entry as this replica's only then. It looks at the log's own
/// durable end after each batch (`batches` tells of each): the position a batch reported may
/// be from before the log was cut back, and the entries written there since are not durable
/// until a later batch.
pub(crate) async fn complete_flushes(flushes: Flushes, log: SharedLog, mut batches: watch::Receiver<Lsn>) {
    loop {
        batches.borrow_and_update();
        let lsn = log.durable_lsn();
        let done: Vec<IOFlushed<C>> = {
            let mut waiting = flushes.borrow_mut();
            let (done, pending): (Vec<_>, Vec<_>) = waiting.drain(..).partition(|(index, _)| *index <= lsn);
            *waiting = pending;
            done.into_iter().map(|(_, callback)| callback).collect()
        };
        for callback in done {
            callback.io_completed(Ok(()));
        }
        if batches.changed().await.is_err() {
            return;
        }
    }
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let from = match range.start_bound() {
        Bound::Included(from) => *from,
        Bound::Excluded(from) => from + 1,
        Bound::Unbounded => 0,
    };
    let to = match range.end_bound() {
        Bound::Included(to) => to.saturating_add(1),
        Bound::Excluded(to) => *to,
        Bound::Unbounded => u64::MAX,
    };
    (from, to)
}

impl RaftLogReader<C> for ShardLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let (from, to) = bounds(&range);
        let shard = self.shard.borrow();
        shard.replication.as_ref().ok_or_else(no_replication)?.read(from, to)
    }

    /// At most [`super::wire::BATCH_BYTES_MAX`] of entries (a larger single one alone), so that
    /// one append request stays a bounded frame.
    ///
    /// A range that begins before the first entry still held (the leader purged its log while a
    /// replication stream was about to send from there) gets no entries, where the entries after
    /// the purge would have followed `start - 1` with a hole between them. openraft's stream then
    /// sends an empty request from the same place, again and again; the replication client fails
    /// it (`network.rs`, `follows_purged_entries`), which ends the stream, and the leader chooses
    /// again: a snapshot.
    async fn limited_get_log_entries(&mut self, start: u64, end: u64) -> Result<Vec<Entry>, io::Error> {
        let purged = {
            let shard = self.shard.borrow();
            start < shard.replication.as_ref().ok_or_else(no_replication)?.first_readable()
        };
        if purged {
            return Ok(Vec::new());
        }
        let mut entries = self.try_get_log_entries(start..end).await?;
        let mut bytes = 0;
        let keep = entries
            .iter()
            .position(|entry| {
                bytes += match &entry.payload {
                    openraft::EntryPayload::Normal(Redo::Payload(payload)) => payload.len(),
                    _ => 64,
                };
                bytes > super::wire::BATCH_BYTES_MAX
            })
            .map_or(entries.len(), |over| over.max(1));
        entries.truncate(keep);
        Ok(entries)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        let shard = self.shard.borrow();
        Ok(shard.replication.as_ref().ok_or_else(no_replication)?.state.state().vote)
    }
}

impl RaftLogStorage<C> for ShardLog {
    type LogReader = ShardLog;

    async fn get_log_state(&mut self) -> Result<LogState<C>, io::Error> {
        let shard = self.shard.borrow();
        let replication = shard.replication.as_ref().ok_or_else(no_replication)?;
        let purged = replication.state.state().purged;
        Ok(LogState { last_purged_log_id: purged, last_log_id: replication.last_log().max(purged) })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let mut shard = self.shard.borrow_mut();
        let replication = shard.replication.as_mut().ok_or_else(no_replication)?;
        replication.state.update(|state| state.vote = Some(*vote))
    }

    /// Kept in memory, and saved with the state file before each checkpoint and snapshot and at
    /// shutdown (a sync of its own on every commit would cost the shard's thread more than the
    /// log's): a replica that restarts with an older committed entry replays less and applies the
    /// rest as Raft commits it again.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        let mut shard = self.shard.borrow_mut();
        if let Some(replication) = shard.replication.as_mut() {
            replication.committed_in_memory = committed;
        }
        Ok(())
    }

    /// The last entry known committed that the log holds: Raft applies those after the last
    /// applied at start (recovery replayed the committed entries it knew of already).
    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        let shard = self.shard.borrow();
        let replication = shard.replication.as_ref().ok_or_else(no_replication)?;
        let committed = replication.committed_in_memory.max(replication.state.state().committed);
        Ok(committed.min(replication.last_log()).max(replication.applied))
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<C>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let Some(last) = entries.last().map(|entry| entry.log_id.index) else {
            callback.io_completed(Ok(()));
            return Ok(());
        };
        loop {
            let appended = {
                let mut shard = self.shard.borrow_mut();
                let log = log_of(&shard)?;
                let replication = shard.replication.as_mut().ok_or_else(no_replication)?;
                replication.append(&log, &entries)?
            };
            match appended {
                Appending::Done => break,
                Appending::CutFrom(index) => self.cut_from(index).await?,
                Appending::StartAt(index) => self.start_at(index).await?,
            }
        }
        let log = log_of(&self.shard.borrow())?;
        log.request_sync();
        if log.durable_lsn() >= last {
            callback.io_completed(Ok(()));
        } else {
            self.flushes.borrow_mut().push((last, callback));
        }
        Ok(())
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> Result<(), io::Error> {
        self.cut_after(last).await
    }

    /// Records the purge; the log's segments go once a checkpoint no longer needs them either.
    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut shard = self.shard.borrow_mut();
        let replication = shard.replication.as_mut().ok_or_else(no_replication)?;
        replication.state.update(|state| state.purged = Some(log_id))
    }
}
