//! Many-key commands in bounded steps, the shard serving every other connection between two.

use std::ops::Range;
use std::sync::Arc;

use bytes::BytesMut;

use super::long_values::LongPlace;
use super::Call;
use crate::completion::Completion;
use crate::handler::Flow;

/// Keys (or pairs) a many-key command (`MGET`, `MSET`, `DEL`, `EXISTS`) handles per step. A
/// command with more runs in steps, the shard serving every other connection between two, so a
/// million-key command never holds the shard for more than a step: it is not isolated from other
/// clients (each key's read or write is atomic, and its keys are handled in order).
pub(super) const KEYS_PER_STEP: usize = 1024;

/// A many-key command's state between its steps: how many keys it has handled, how many of
/// them succeeded (`DEL`, `EXISTS`), and its reply so far (`MGET`), written out whole at the end,
/// with the places of the long values in it, whose direct reads are open; or a walk's (`KEYS`).
#[derive(Debug, Default)]
pub(super) struct Progress {
    done: usize,
    pub succeeded: i64,
    pub reply: BytesMut,
    pub long_values: Vec<LongPlace>,
    pub walk: Option<Walk>,
}

/// Where a walk of the pool's table stands between its steps, and the keys it has found: a key
/// may be visited twice when the table grows between two steps, and is answered once.
#[derive(Debug, Default)]
pub(super) struct Walk {
    pub cursor: u64,
    pub found: foldhash::HashSet<Box<[u8]>>,
    /// Bytes of the keys in `found`.
    pub found_bytes: usize,
}

/// The part of a many-key command one step handles (see [`KEYS_PER_STEP`]).
pub(super) struct Steps {
    /// This is the command's first step (or its only one).
    pub first: bool,
    pub range: Range<usize>,
}

impl Steps {
    /// The step of a command over `total` keys or pairs that this run handles.
    pub fn begin(call: &Call<'_, '_>, total: usize) -> Steps {
        let done = call.client.progress.as_ref().map_or(0, |progress| progress.done);
        let end = if call.steppable { total.min(done + KEYS_PER_STEP) } else { total };
        Steps { first: done == 0, range: done..end }
    }

    /// Saves the command's state and lets every other connection run before its next step.
    pub fn next(self, call: &mut Call<'_, '_>, succeeded: i64, reply: BytesMut) -> Flow {
        pause(call, Progress { done: self.range.end, succeeded, reply, long_values: Vec::new(), walk: None })
    }

    /// [`next`](Self::next) for a reply so far with long values in it (`MGET`).
    pub fn next_with_long_values(self, call: &mut Call<'_, '_>, reply: BytesMut, long_values: Vec<LongPlace>) -> Flow {
        pause(call, Progress { done: self.range.end, succeeded: 0, reply, long_values, walk: None })
    }
}

/// Saves a command's state and lets every other connection of the shard run before its next
/// step: the command runs again (it is not consumed) once a task spawned now has had its turn on
/// the shard's event loop.
pub(super) fn pause(call: &mut Call<'_, '_>, progress: Progress) -> Flow {
    call.client.progress = Some(progress);
    // Counted once, when its last step runs.
    call.shard.stats.requests -= 1;
    let completion = Completion::new();
    let turn = Arc::clone(&completion);
    tokio::task::spawn_local(async move {
        tokio::task::yield_now().await;
        turn.wake();
    });
    Flow::Wait { completion, consumed: false }
}
