//! The state of the call in progress: what it may write, what it declared, what it answered,
//! and the bytes the host lent the plugin until `do_work` returns.

use std::ffi::c_int;

use ferrite_plugin::abi::{self, Pair, WORK_READ_ONLY};

use super::checking::Snapshot;
use crate::message::{CallId, Invocation, Location, Response};
use crate::shm::Mapping;

/// Most ranges one call may declare (after adjacent and overlapping ones are merged): they travel
/// in its Done message and its log record.
pub const DECLARED_RANGES_MAX: usize = 4096;

/// One call's bookkeeping. When the call ends the host keeps it for its buffers only; the next
/// call starts every field over.
#[derive(Debug)]
pub struct CallState {
    pub id: CallId,
    pub read_only: bool,
    /// The layer whose `do_work` runs now (tags its responses).
    pub layer: u32,
    /// Memory the call may declare writes in: the target value unless read-only, the
    /// detached value, memory it allocated, values of keys it created or opened for write.
    writable: Vec<Location>,
    /// Every range declared so far, in order, each merged into the one before it where they
    /// touch.
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
    /// The bookkeeping of call `id`, in the buffers of `recycled` (the last finished call's
    /// state) if there is one: a call then allocates nothing for its lists until they outgrow
    /// the last call's. `checking` is the pool to snapshot in checking mode.
    pub fn start(
        recycled: Option<CallState>,
        id: CallId,
        invocation: &Invocation,
        checking: Option<&Mapping>,
    ) -> CallState {
        let mut state = recycled.unwrap_or_else(|| CallState {
            id,
            read_only: false,
            layer: 0,
            writable: Vec::new(),
            declared: Vec::new(),
            responses: Vec::new(),
            response_bytes: 0,
            lent_bytes: Vec::new(),
            lent_pairs: Vec::new(),
            snapshot: None,
            finds: Vec::new(),
            last_complaint: String::new(),
        });
        state.reset(id, invocation, checking);
        state
    }

    /// Starts every field over for call `id`, keeping only the buffers' capacity, so nothing of
    /// the last call (least of all what it was allowed to write) reaches this one. Every field
    /// is named here: a new one cannot be forgotten.
    fn reset(&mut self, id: CallId, invocation: &Invocation, checking: Option<&Mapping>) {
        let CallState {
            id: call,
            read_only,
            layer,
            writable,
            declared,
            responses,
            response_bytes,
            lent_bytes,
            lent_pairs,
            snapshot,
            finds,
            last_complaint,
        } = self;
        *call = id;
        *read_only = invocation.flags & WORK_READ_ONLY != 0;
        *layer = 0;
        writable.clear();
        if !*read_only && invocation.value.len > 0 {
            writable.push(invocation.value);
        }
        if invocation.detached.len > 0 {
            writable.push(invocation.detached);
        }
        declared.clear();
        responses.clear();
        *response_bytes = 0;
        lent_bytes.clear();
        lent_pairs.clear();
        match (checking, snapshot.as_mut()) {
            (Some(pool), Some(previous)) => previous.retake(pool),
            (Some(pool), None) => *snapshot = Some(Snapshot::take(pool)),
            (None, _) => *snapshot = None,
        }
        finds.clear();
        last_complaint.clear();
    }

    /// The memory the call may write so far.
    pub fn writable(&self) -> &[Location] {
        &self.writable
    }

    /// Records a declared write (which the caller checked the call may make): merged into the
    /// last range if they touch, else a range of its own, up to [`DECLARED_RANGES_MAX`].
    pub fn declare(&mut self, range: Location) -> Result<(), c_int> {
        let Some(end) = range.end().filter(|_| range.len > 0) else { return Ok(()) };
        if let Some(last) = self.declared.last_mut() {
            let last_end = last.end().unwrap_or(last.offset);
            if range.offset <= last_end && last.offset <= end {
                let start = last.offset.min(range.offset);
                *last = Location { offset: start, len: last_end.max(end) - start };
                return Ok(());
            }
        }
        if self.declared.len() >= DECLARED_RANGES_MAX {
            return Err(abi::ERR_NO_SPACE);
        }
        self.declared.push(range);
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A call started in a finished call's buffers inherits nothing from it: not the ranges it
    /// was allowed or declared, not its responses, searches, lent keys or complaint.
    #[test]
    fn recycled_state_starts_over() {
        let first = Invocation { value: Location { offset: 0, len: 8 }, ..Invocation::default() };
        let mut state = CallState::start(None, CallId(1), &first, None);
        let allocated = Location { offset: 512, len: 64 };
        state.allow(allocated);
        state.declared.push(allocated);
        state.responses.push(Response { layer: 0, data: b"answer".to_vec() });
        state.response_bytes = 14;
        state.layer = 1;
        state.lend_bytes(b"key".to_vec());
        state.lend_pairs(Vec::new());
        state.finds.push(Search { expression: b"k.*".to_vec(), keys: Vec::new(), cursor: None });
        state.last_complaint.push_str("no room");

        let second = Invocation { flags: WORK_READ_ONLY, value: Location { offset: 64, len: 8 }, ..first };
        let state = CallState::start(Some(state), CallId(2), &second, None);
        assert_eq!(state.id, CallId(2));
        assert!(state.read_only);
        assert!(!state.may_write(&allocated));
        assert!(state.writable.is_empty(), "a read-only call may write nothing");
        assert!(state.declared.is_empty() && state.responses.is_empty() && state.finds.is_empty());
        assert!(state.lent_bytes.is_empty() && state.lent_pairs.is_empty());
        assert_eq!((state.response_bytes, state.layer), (0, 0));
        assert!(state.last_complaint.is_empty() && state.snapshot.is_none());

        let third = Invocation { flags: 0, ..second };
        let state = CallState::start(Some(state), CallId(3), &third, None);
        assert!(state.may_write(&third.value) && !state.may_write(&first.value));
    }

    /// Declared ranges that touch are merged into one; others are kept apart, up to the most a
    /// call may declare.
    #[test]
    fn declared_ranges_merge_where_they_touch() {
        let invocation = Invocation { value: Location { offset: 0, len: 1 << 20 }, ..Invocation::default() };
        let mut state = CallState::start(None, CallId(1), &invocation, None);
        for (offset, len) in [(10, 4), (14, 2), (12, 8), (8, 2), (40, 1)] {
            state.declare(Location { offset, len }).expect("room");
        }
        assert_eq!(state.declared, [Location { offset: 8, len: 12 }, Location { offset: 40, len: 1 }]);
        for index in 0..DECLARED_RANGES_MAX as u64 - 2 {
            state.declare(Location { offset: 100 + 2 * index, len: 1 }).expect("room");
        }
        let full = state.declare(Location { offset: 1 << 19, len: 1 });
        assert_eq!(full, Err(abi::ERR_NO_SPACE), "no more than the most ranges");
        state.declare(Location { offset: 100, len: 1 }).expect_err("not adjacent to the last one either");
        state.declare(Location { offset: 100 + 2 * (DECLARED_RANGES_MAX as u64 - 3), len: 2 }).expect("merged");
    }
}
