//! The state of the call in progress: what it may write, what it declared, what it answered,
//! and the bytes the host lent the plugin until `do_work` returns.

use ferrite_plugin::abi::{Pair, WORK_READ_ONLY};

use super::checking::Snapshot;
use crate::message::{CallId, Invocation, Location, Response};

/// One call's bookkeeping, dropped when the call ends.
#[derive(Debug)]
pub struct CallState {
    pub id: CallId,
    pub read_only: bool,
    /// The layer whose `do_work` runs now (tags its responses).
    pub layer: u32,
    /// Memory the call may declare writes in: the target value unless read-only, the
    /// detached value, memory it allocated, values of keys it created or opened for write.
    writable: Vec<Location>,
    /// Every range declared so far, in order.
    pub declared: Vec<Location>,
    pub responses: Vec<Response>,
    /// Bytes of every response so far, to keep Done within one ring message.
    pub response_bytes: usize,
    /// Keys handed to the plugin (`ferrite_pair.key`, find_key's key): each inner vector's heap
    /// buffer stays put when the outer one grows, so pointers into it live until the call ends.
    lent_bytes: Vec<Vec<u8>>,
    /// Arrays handed out by get_reference_vector, same rule.
    lent_pairs: Vec<Vec<Pair>>,
    /// Checking mode: pool memory before the call (and ranges the shard filled since).
    pub snapshot: Option<Snapshot>,
    /// The searches of find_key so far, each paged from the shard as the plugin reads on.
    pub finds: Vec<Search>,
    /// The last warning or error the plugin logged during the call: why it failed, if it did.
    pub last_complaint: String,
}

/// One find_key expression's matches, as far as the call has read them.
#[derive(Debug)]
pub struct Search {
    pub expression: Vec<u8>,
    pub keys: Vec<Vec<u8>>,
    /// Where the shard's next step starts; `None` once the search is over.
    pub cursor: Option<u64>,
}

impl CallState {
    pub fn new(id: CallId, invocation: &Invocation, snapshot: Option<Snapshot>) -> CallState {
        let read_only = invocation.flags & WORK_READ_ONLY != 0;
        let mut writable = Vec::new();
        if !read_only && invocation.value.len > 0 {
            writable.push(invocation.value);
        }
        if invocation.detached.len > 0 {
            writable.push(invocation.detached);
        }
        CallState {
            id,
            read_only,
            layer: 0,
            writable,
            declared: Vec::new(),
            responses: Vec::new(),
            response_bytes: 0,
            lent_bytes: Vec::new(),
            lent_pairs: Vec::new(),
            snapshot,
            finds: Vec::new(),
            last_complaint: String::new(),
        }
    }

    /// Lets the call write `range` from now on.
    pub fn allow(&mut self, range: Location) {
        if range.len > 0 {
            self.writable.push(range);
        }
    }

    /// Withdraws a range (memory the call freed).
    pub fn forbid(&mut self, range: Location) {
        self.writable.retain(|allowed| *allowed != range);
    }

    pub fn may_write(&self, range: &Location) -> bool {
        !self.read_only && self.writable.iter().any(|allowed| allowed.covers(range))
    }

    /// Keeps `bytes` alive until the call ends and returns where they are.
    pub fn lend_bytes(&mut self, bytes: Vec<u8>) -> &[u8] {
        self.lent_bytes.push(bytes);
        self.lent_bytes.last().map_or(&[], Vec::as_slice)
    }

    /// Keeps `pairs` alive until the call ends and returns where they are.
    pub fn lend_pairs(&mut self, pairs: Vec<Pair>) -> &[Pair] {
        self.lent_pairs.push(pairs);
        self.lent_pairs.last().map_or(&[], Vec::as_slice)
    }
}
