//! What one client connection holds: whether it said hello, and which pools it has open.

use std::sync::Arc;

use foldhash::HashMap;
use tokio::sync::Notify;

use ferrite_proto::PoolHandle;
use ferrite_store::persistence::wal::Lsn;

use crate::completion::Completion;
use crate::stats::BatchOps;

#[derive(Debug, Default)]
pub(crate) struct Session {
    pub handshaken: bool,
    /// The log position that must be durable before the responses buffered so far are sent
    /// (0: none). Raised by `sync` writes and by reads; taken by the connection once per batch.
    pub wait_lsn: Lsn,
    /// Pools this session opened, with how many times: each open needs its own close.
    open: HashMap<PoolHandle, u32>,
    /// On a connection whose responses may leave out of order (native): what its answers that
    /// come later tell, and those answers, taken by the connection after each batch.
    pub answers: Option<Arc<Notify>>,
    pub deferred: Vec<Arc<Completion>>,
    /// Requests of each kind answered in the current batch, for the latency metrics; taken by
    /// the connection once per batch.
    pub batch_ops: BatchOps,
}

impl Session {
    pub fn is_open(&self, pool: PoolHandle) -> bool {
        self.open.contains_key(&pool)
    }

    pub fn record_open(&mut self, pool: PoolHandle) {
        *self.open.entry(pool).or_insert(0) += 1;
    }

    /// Forgets one open of `pool`; false if the session did not hold it.
    pub fn record_close(&mut self, pool: PoolHandle) -> bool {
        match self.open.get_mut(&pool) {
            None => false,
            Some(1) => {
                self.open.remove(&pool);
                true
            }
            Some(count) => {
                *count -= 1;
                true
            }
        }
    }

    /// Every open this session still holds, consumed: the connection is ending.
    pub fn drain_opens(&mut self) -> impl Iterator<Item = (PoolHandle, u32)> + '_ {
        self.open.drain()
    }
}
