//! What one client connection holds: whether it said hello, who it acts for, and which pools it
//! has open with the rights it holds on each.

use std::sync::Arc;

use foldhash::HashMap;
use tokio::sync::Notify;

use ferrite_auth::Rights;
use ferrite_proto::PoolHandle;
use ferrite_store::persistence::wal::Lsn;

use crate::auth::Verification;
use crate::buffered::LogWaits;
use crate::completion::Completion;
use crate::stats::BatchOps;

/// Who a session acts for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum Identity {
    /// Users are configured and the session has not authenticated: it may do nothing else.
    #[default]
    Nobody,
    /// The server has no users: every session may do everything.
    Everyone,
    /// The shard itself (creating the RESP default pool).
    Server,
    User(Arc<str>),
}

impl Identity {
    /// The user's name, if it is one.
    pub fn user(&self) -> Option<&str> {
        match self {
            Identity::User(name) => Some(name),
            _ => None,
        }
    }
}

/// A pool a session holds open.
#[derive(Debug, Clone, Copy)]
struct Opened {
    /// How many times: each open needs its own close.
    count: u32,
    /// What the session's identity may do on it, as of `Session::rights_generation`.
    rights: Rights,
}

#[derive(Debug, Default)]
pub(crate) struct Session {
    pub handshaken: bool,
    pub identity: Identity,
    /// The users' generation the rights of `open` were computed under.
    pub rights_generation: u64,
    /// A password being verified for this session, whose request runs again once it is known.
    pub verification: Option<Arc<Verification>>,
    /// The fingerprint of the client certificate the connection presented (mutual TLS).
    pub certificate: Option<String>,
    /// The log position that must be durable before the responses buffered so far are sent
    /// (0: none). Raised by `sync` writes and by reads; taken by the connection once per batch.
    pub wait_lsn: Lsn,
    /// The log position that must be written to its file (durable or not) before the connection
    /// reads more requests (0: none). Raised by an `async` write that finds the log's backlog
    /// full; taken by the connection once per batch.
    pub backlog_lsn: Lsn,
    /// The log position of the last write the session made (0: none yet), for RESP's `WAIT`.
    pub last_write_lsn: Lsn,
    /// Pools this session opened.
    open: HashMap<PoolHandle, Opened>,
    /// On a connection whose responses may leave out of order (native): what its answers that
    /// come later tell, and those answers, taken by the connection after each batch.
    pub answers: Option<Arc<Notify>>,
    pub deferred: Vec<Arc<Completion>>,
    /// Requests of each kind answered in the current batch, for the latency metrics; taken by
    /// the connection once per batch.
    pub batch_ops: BatchOps,
    /// The direct transfers the session has open.
    pub transfers: crate::handler::Transfers,
}

impl Session {
    /// The session of a connection with no hello (RESP) or of the shard itself: handshaken, and
    /// acting for the shard until [`ShardState::begin_identity`](crate::handler::ShardState)
    /// says who the client is.
    pub fn for_server() -> Session {
        Session { handshaken: true, identity: Identity::Server, ..Session::default() }
    }

    /// What the batch answered so far waits for in the log, taken for the connection.
    pub fn take_log_waits(&mut self) -> LogWaits {
        LogWaits { durable: std::mem::take(&mut self.wait_lsn), written: std::mem::take(&mut self.backlog_lsn) }
    }

    pub fn is_open(&self, pool: PoolHandle) -> bool {
        self.open.contains_key(&pool)
    }

    /// The rights the session holds on `pool`, if it has it open.
    pub fn rights(&self, pool: PoolHandle) -> Option<Rights> {
        self.open.get(&pool).map(|opened| opened.rights)
    }

    pub fn record_open(&mut self, pool: PoolHandle, rights: Rights) {
        let opened = self.open.entry(pool).or_insert(Opened { count: 0, rights });
        opened.count += 1;
        opened.rights = rights;
    }

    /// Forgets one open of `pool`; false if the session did not hold it.
    pub fn record_close(&mut self, pool: PoolHandle) -> bool {
        match self.open.get_mut(&pool) {
            None => false,
            Some(Opened { count: 1, .. }) => {
                self.open.remove(&pool);
                true
            }
            Some(opened) => {
                opened.count -= 1;
                true
            }
        }
    }

    /// Recomputes the rights held on every open pool with `rights_on` (after the identity or the
    /// users changed).
    pub fn refresh_rights(&mut self, mut rights_on: impl FnMut(PoolHandle) -> Rights) {
        for (pool, opened) in &mut self.open {
            opened.rights = rights_on(*pool);
        }
    }

    /// Every open this session still holds, consumed: the connection is ending.
    pub fn drain_opens(&mut self) -> impl Iterator<Item = (PoolHandle, u32)> + '_ {
        self.open.drain().map(|(pool, opened)| (pool, opened.count))
    }
}
