//! The callbacks that let a plugin call change keys besides its target and pool memory (MCAS
//! Table 4: `create_key`, `open_key` for writing, `erase_key`, `resize_value`,
//! `allocate_memory`, `free_memory`), and `find_key`. The transaction that commits what they
//! stage is in `invoke_commit`.
//!
//! A call changes nothing in the store while it runs. Each change is staged: a created, opened
//! or resized key gets its new value in scratch memory lent to the call (the plugin writes
//! there), an erased key is only marked. The key is write-locked by the call from then on, so
//! every other request on it waits. When the call succeeds, the shard applies its staged keys
//! and its target's writes to the store inside one store transaction: one log record, so after
//! a crash all of them are there or none. A failed, crashed or timed-out call drops its staged
//! keys: the store never saw them.

use ferrite_ado::message::{CallId, CallbackReply, CallbackRequest, CallbackResult, Location, PairRecord};
use ferrite_plugin::abi;
use ferrite_proto::PoolHandle;
use ferrite_store::FindQuery;

use super::invoke::{refused_status, scratch_copy};
use super::invoke_commit::{now_ns, read_region, target_footprint, transaction_footprint};
use super::ShardState;
use crate::ado::{Running, StagedAllocation, StagedKey};

/// Most keys one call may change besides its target, and most allocations it may make: all of
/// them go into one log record.
pub(crate) const STAGED_KEYS_MAX: usize = 64;

/// Home buckets one step of a plugin's `find_key` walks: the host asks for the next step only
/// when the plugin reads past the matches it has, and no step holds the shard long.
const FIND_STEP_HOMES: u64 = 256;

/// Keys after `next:KEY` one `find_key` answers (from a pool's secondary index, in key order).
const FIND_NEXT_KEYS_MAX: usize = 256;

/// Where a call stands with a key it asks to change.
enum KeyState {
    /// The call already changed it: its new value (`None`: erased).
    Staged(Option<Location>),
    /// The call's own target, whose value it is given as this.
    Target(Location),
    /// Another call holds it: one running, or one waiting in the queue (which holds its key from
    /// the moment it was accepted, so that requests on the key keep their order).
    Locked,
    /// Nothing holds it (besides a read lock of this call's own, which a change upgrades).
    Free,
}

/// A reply with only a status.
fn status(status: i32) -> CallbackReply {
    CallbackReply { status, result: CallbackResult::Nothing }
}

fn pair(key: Vec<u8>, value: Location, write_time_ns: u64) -> CallbackReply {
    CallbackReply { status: abi::OK, result: CallbackResult::Pair(PairRecord { key, value, write_time_ns }) }
}

/// Bytes of the id under which a store keeps an allocation.
pub(super) const ALLOCATION_ID_BYTES: u64 = 8;

/// The fewest bytes an allocation takes: long enough that the store keeps it out of line.
const ALLOCATION_BYTES_MIN: u64 = 64;

impl ShardState {
    /// Carries out a callback that changes keys or searches them, for call `call` of `handle`.
    pub(super) fn key_callback(&mut self, handle: PoolHandle, call: CallId, request: CallbackRequest) -> CallbackReply {
        let read_only = self
            .calls
            .get(&handle)
            .and_then(|calls| calls.running().iter().find(|running| running.id == call))
            .map(|running| running.call.work_flags & abi::WORK_READ_ONLY != 0);
        let Some(read_only) = read_only else { return status(abi::ERR_FAILED) };
        if let CallbackRequest::FindKey { expression, cursor } = request {
            return self.find_key(handle, &expression, cursor);
        }
        // A read-only call (and a signal) holds a read lock and changes nothing.
        if read_only {
            return status(abi::ERR_INVALID);
        }
        match request {
            CallbackRequest::CreateKey { key, value_len } => self.create_key(handle, call, key, value_len),
            CallbackRequest::OpenKey { key, read_only: false } => self.open_key_for_writing(handle, call, key),
            CallbackRequest::EraseKey { key } => self.erase_key(handle, call, key),
            CallbackRequest::ResizeValue { key, new_len } => self.resize_value(handle, call, key, new_len),
            CallbackRequest::AllocateMemory { len, align } => self.allocate_memory(handle, call, len, align),
            CallbackRequest::FreeMemory { memory } => self.free_memory(handle, call, memory),
            _ => status(abi::ERR_UNSUPPORTED),
        }
    }

    fn running_mut(&mut self, handle: PoolHandle, call: CallId) -> Option<&mut Running> {
        self.calls.get_mut(&handle)?.running_mut().find(|running| running.id == call)
    }

    /// Where call `call` stands with `key`.
    fn key_state(&self, handle: PoolHandle, call: CallId, key: &[u8]) -> KeyState {
        let Some(calls) = self.calls.get(&handle) else { return KeyState::Locked };
        let Some(own) = calls.running().iter().find(|running| running.id == call) else { return KeyState::Locked };
        if let Some(staged) = own.staged(key) {
            return KeyState::Staged(staged.value);
        }
        if own.call.key == key {
            return KeyState::Target(own.target.location());
        }
        if calls.running().iter().any(|running| running.id != call && running.locks(key, true)) || calls.queued_on(key)
        {
            return KeyState::Locked;
        }
        KeyState::Free
    }

    /// Checks a key a callback names against the server's limits.
    fn callback_key_ok(&self, key: &[u8]) -> bool {
        !key.is_empty() && key.len() <= self.limits.key_bytes_max as usize
    }

    /// `create_key`: a new key with a zeroed value of `value_len` bytes, stored when the call
    /// succeeds. `FERRITE_ERR_EXISTS` if the key is there (the call's own target included).
    fn create_key(&mut self, handle: PoolHandle, call: CallId, key: Vec<u8>, value_len: u64) -> CallbackReply {
        if !self.callback_key_ok(&key) || value_len > u64::from(self.limits.value_bytes_max) {
            return status(abi::ERR_INVALID);
        }
        match self.key_state(handle, call, &key) {
            KeyState::Locked => return status(abi::ERR_LOCKED),
            KeyState::Staged(Some(_)) | KeyState::Target(_) => return status(abi::ERR_EXISTS),
            KeyState::Staged(None) => {}
            KeyState::Free => {
                let exists = self.pools.get(handle).is_some_and(|pool| pool.store.get(&key).is_some());
                if exists {
                    return status(abi::ERR_EXISTS);
                }
            }
        }
        self.stage_value(handle, call, key, &[], value_len, now_ns())
    }

    /// `open_key` for writing: the key's value as a copy in scratch memory, which a successful
    /// call stores as the key's new value.
    fn open_key_for_writing(&mut self, handle: PoolHandle, call: CallId, key: Vec<u8>) -> CallbackReply {
        match self.key_state(handle, call, &key) {
            KeyState::Locked => status(abi::ERR_LOCKED),
            KeyState::Staged(None) => status(abi::ERR_NOT_FOUND),
            KeyState::Staged(Some(value)) | KeyState::Target(value) => pair(key, value, now_ns()),
            KeyState::Free => {
                let Some(pool) = self.pools.get(handle) else { return status(abi::ERR_FAILED) };
                let (Some(value), Some(attributes)) = (pool.store.get(&key), pool.store.attributes(&key)) else {
                    return status(abi::ERR_NOT_FOUND);
                };
                let value = value.to_vec();
                self.stage_value(handle, call, key, &value, value.len() as u64, attributes.write_time_ns)
            }
        }
    }

    /// `erase_key`: the key is gone once the call succeeds (its own target too: the plugin keeps
    /// its value's memory until the call ends, and what it writes there is not logged).
    fn erase_key(&mut self, handle: PoolHandle, call: CallId, key: Vec<u8>) -> CallbackReply {
        let exists = self.pools.get(handle).is_some_and(|pool| pool.store.get(&key).is_some());
        match self.key_state(handle, call, &key) {
            KeyState::Locked => return status(abi::ERR_LOCKED),
            KeyState::Staged(None) => return status(abi::ERR_NOT_FOUND),
            KeyState::Free | KeyState::Target(_) if !exists => return status(abi::ERR_NOT_FOUND),
            KeyState::Staged(Some(_)) | KeyState::Target(_) | KeyState::Free => {}
        }
        self.end_read_lock(handle, call, &key);
        let Some(running) = self.running_mut(handle, call) else { return status(abi::ERR_FAILED) };
        match running.staged.iter().position(|staged| staged.key == key) {
            // Created by this call and erased again: nothing to store.
            Some(at) if !exists => {
                running.staged.remove(at);
            }
            Some(at) => running.staged[at].value = None,
            None => return self.stage(handle, call, StagedKey { key, value: None }),
        }
        status(abi::OK)
    }

    /// `resize_value`: the key's value (its staged one, the call's target, or the stored one)
    /// in a new copy of `new_len` bytes, kept up to the shorter length and zeros after.
    fn resize_value(&mut self, handle: PoolHandle, call: CallId, key: Vec<u8>, new_len: u64) -> CallbackReply {
        if new_len > u64::from(self.limits.value_bytes_max) {
            return status(abi::ERR_INVALID);
        }
        let Some(pool) = self.pools.get(handle) else { return status(abi::ERR_FAILED) };
        let current = match self.key_state(handle, call, &key) {
            KeyState::Locked => return status(abi::ERR_LOCKED),
            KeyState::Staged(None) => return status(abi::ERR_NOT_FOUND),
            KeyState::Staged(Some(value)) | KeyState::Target(value) => match read_region(pool, value) {
                Some(bytes) => bytes,
                None => return status(abi::ERR_FAILED),
            },
            KeyState::Free => match pool.store.get(&key) {
                Some(value) => value.to_vec(),
                None => return status(abi::ERR_NOT_FOUND),
            },
        };
        let kept = &current[..current.len().min(new_len as usize)];
        let kept = kept.to_vec();
        self.stage_value(handle, call, key, &kept, new_len, now_ns())
    }

    /// Whether call `call`'s transaction, with its changes so far, may still go on: its record
    /// fits one log segment and the log has room for it now.
    fn admits_call(&self, handle: PoolHandle, call: CallId) -> bool {
        let running = self.calls.get(&handle).and_then(|calls| calls.running().iter().find(|r| r.id == call));
        let (Some(running), Some(pool)) = (running, self.pools.get(handle)) else { return false };
        let store = pool.store.as_ref();
        let footprint = transaction_footprint(store, running, target_footprint(store, running));
        self.admit_call_transaction(footprint).is_ok()
    }

    /// Lends the call a new value of `len` bytes beginning with `bytes` (zeros after) and stages
    /// it as `key`'s value; answers its pair.
    fn stage_value(
        &mut self,
        handle: PoolHandle,
        call: CallId,
        key: Vec<u8>,
        bytes: &[u8],
        len: u64,
        write_time_ns: u64,
    ) -> CallbackReply {
        let value = match self.lend_scratch(handle, call, bytes, len) {
            Ok(value) => value,
            Err(code) => return status(code),
        };
        self.end_read_lock(handle, call, &key);
        let reply = self.stage(handle, call, StagedKey { key: key.clone(), value: Some(value) });
        if reply.status != abi::OK {
            return reply;
        }
        pair(key, value, write_time_ns)
    }

    /// Records `staged` as the call's change to its key (replacing an earlier one), if the
    /// call's transaction still fits the log and [`STAGED_KEYS_MAX`].
    fn stage(&mut self, handle: PoolHandle, call: CallId, staged: StagedKey) -> CallbackReply {
        let Some(running) = self.running_mut(handle, call) else { return status(abi::ERR_FAILED) };
        let at = running.staged.iter().position(|earlier| earlier.key == staged.key);
        let before = match at {
            Some(at) => Some(std::mem::replace(&mut running.staged[at], staged)),
            // The target's own change (a value the call gives it) does not count.
            None if running.staged.iter().filter(|staged| staged.key != running.call.key).count()
                >= STAGED_KEYS_MAX =>
            {
                return status(abi::ERR_NO_SPACE)
            }
            None => {
                running.staged.push(staged);
                None
            }
        };
        if self.admits_call(handle, call) {
            return status(abi::OK);
        }
        // The log cannot take the call's transaction with this change: the change is dropped.
        if let Some(running) = self.running_mut(handle, call) {
            match (at, before) {
                (Some(at), Some(before)) => running.staged[at] = before,
                _ => {
                    running.staged.pop();
                }
            }
        }
        status(abi::ERR_NO_SPACE)
    }

    /// Scratch memory of `len` bytes holding `bytes` then zeros, lent to the call until it ends.
    fn lend_scratch(&mut self, handle: PoolHandle, call: CallId, bytes: &[u8], len: u64) -> Result<Location, i32> {
        if len == 0 {
            return Ok(Location::default());
        }
        let pool = self.pools.get_mut(handle).ok_or(abi::ERR_FAILED)?;
        let offset = scratch_copy(pool.store.as_mut(), bytes, len).map_err(refused_status)?;
        let location = Location { offset, len };
        match self.running_mut(handle, call) {
            Some(running) => {
                running.lent.push(location);
                Ok(location)
            }
            None => {
                if let Some(pool) = self.pools.get_mut(handle) {
                    pool.store.free_scratch(offset, len);
                }
                Err(abi::ERR_FAILED)
            }
        }
    }

    /// Ends a read lock the call took on `key` with `open_key` (a change takes a write lock).
    fn end_read_lock(&mut self, handle: PoolHandle, call: CallId, key: &[u8]) {
        let Some(running) = self.running_mut(handle, call) else { return };
        let Some(at) = running.opened.iter().position(|(opened, _)| opened == key) else { return };
        let opened = running.opened.remove(at);
        self.release_opened(handle, &[opened]);
    }

    /// `allocate_memory`: `len` zeroed bytes aligned to `align`, which the store keeps (no key
    /// owns them, a restart keeps them) once the call succeeds, and frees if it fails.
    fn allocate_memory(&mut self, handle: PoolHandle, call: CallId, len: u64, align: u64) -> CallbackReply {
        let aligned = align.is_power_of_two() && align <= 4096;
        if len == 0 || len > u64::from(self.limits.value_bytes_max) || !aligned {
            return status(abi::ERR_INVALID);
        }
        let full = self.running_mut(handle, call).is_none_or(|running| running.allocated.len() >= STAGED_KEYS_MAX);
        if full {
            return status(abi::ERR_NO_SPACE);
        }
        let allocation = match self.allocate_for_call(handle, &[], len, align) {
            Ok(allocation) => allocation,
            Err(code) => return status(code),
        };
        let Some(running) = self.running_mut(handle, call) else {
            self.release_allocated(handle, &[allocation]);
            return status(abi::ERR_FAILED);
        };
        running.allocated.push(allocation);
        if !self.admits_call(handle, call) {
            if let Some(running) = self.running_mut(handle, call) {
                running.allocated.pop();
            }
            self.release_allocated(handle, &[allocation]);
            return status(abi::ERR_NO_SPACE);
        }
        CallbackReply { status: abi::OK, result: CallbackResult::Memory(Location { offset: allocation.id, len }) }
    }

    /// `free_memory`: memory this call allocated is dropped; an allocation an earlier call made
    /// (named by the place it was given) is freed when this call succeeds.
    fn free_memory(&mut self, handle: PoolHandle, call: CallId, memory: Location) -> CallbackReply {
        let kept = self.pools.get(handle).and_then(|pool| pool.store.kept_containing(memory.offset, memory.len));
        let Some(running) = self.running_mut(handle, call) else { return status(abi::ERR_FAILED) };
        if let Some(at) = running.allocated.iter().position(|allocation| allocation.id == memory.offset) {
            let allocation = running.allocated.remove(at);
            // Freed when the call ends: the plugin may still hold its address until then.
            running.lent.push(allocation.memory);
            return status(abi::OK);
        }
        match kept.filter(|kept| kept.id == memory.offset) {
            Some(kept) => {
                if !running.freed.contains(&kept.id) {
                    running.freed.push(kept.id);
                }
                status(abi::OK)
            }
            None => status(abi::ERR_INVALID),
        }
    }

    /// Scratch memory for `len` bytes aligned to `align`, holding `bytes` then zeros: what a
    /// call allocates (its detached value included).
    pub(super) fn allocate_for_call(
        &mut self,
        handle: PoolHandle,
        bytes: &[u8],
        len: u64,
        align: u64,
    ) -> Result<StagedAllocation, i32> {
        let padded = (len + align - 1).max(ALLOCATION_BYTES_MIN);
        let pool = self.pools.get_mut(handle).ok_or(abi::ERR_FAILED)?;
        let at = pool.store.allocate_scratch(padded).ok_or(abi::ERR_NO_SPACE)?;
        let id = at.next_multiple_of(align);
        let mut filled = vec![0; padded as usize];
        let start = (id - at) as usize;
        filled[start..start + bytes.len()].copy_from_slice(bytes);
        if !pool.store.write_scratch(at, &filled) {
            pool.store.free_scratch(at, padded);
            return Err(abi::ERR_FAILED);
        }
        Ok(StagedAllocation { id, memory: Location { offset: at, len: padded } })
    }

    /// Frees memory calls allocated and the store did not keep.
    pub(super) fn release_allocated(&mut self, handle: PoolHandle, allocated: &[StagedAllocation]) {
        let memory: Vec<Location> = allocated.iter().map(|allocation| allocation.memory).collect();
        self.release_lent(handle, &memory);
    }

    /// Frees the scratch memory lent to a call for new values.
    pub(super) fn release_lent(&mut self, handle: PoolHandle, lent: &[Location]) {
        if let Some(pool) = self.pools.get_mut(handle) {
            for location in lent {
                pool.store.free_scratch(location.offset, location.len);
            }
        }
    }

    /// One step of `find_key`: the keys matching `expression` (`prefix:P`, `regex:R`, `glob:G`,
    /// `next:KEY` or an exact key) in a bounded part of the pool from `cursor`, in hash order;
    /// `next:KEY` answers the keys after KEY in key order and needs the pool's secondary index.
    fn find_key(&self, handle: PoolHandle, expression: &[u8], cursor: u64) -> CallbackReply {
        let Some(pool) = self.pools.get(handle) else { return status(abi::ERR_FAILED) };
        if let Some(after) = expression.strip_prefix(b"next:") {
            let Some(index) = &pool.index else { return status(abi::ERR_UNSUPPORTED) };
            let budget = ferrite_store::FindBudget {
                keys_max: FIND_NEXT_KEYS_MAX,
                key_bytes_max: super::FIND_REPLY_KEY_BYTES_MAX,
                scan_keys_max: super::FIND_SCAN_KEYS_MAX,
            };
            let page = index.find(&FindQuery::Prefix(b""), Some(after), budget);
            let keys = page.keys.into_iter().map(<[u8]>::to_vec).collect();
            return CallbackReply { status: abi::OK, result: CallbackResult::Keys { keys, next: 0 } };
        }
        let query = if let Some(prefix) = expression.strip_prefix(b"prefix:") {
            FindQuery::Prefix(prefix)
        } else if let Some(pattern) = expression.strip_prefix(b"glob:") {
            FindQuery::Glob(pattern)
        } else if let Some(pattern) = expression.strip_prefix(b"regex:") {
            match FindQuery::regex(pattern) {
                Ok(query) => query,
                Err(_) => return status(abi::ERR_INVALID),
            }
        } else {
            let keys = pool.store.stored_key(expression).map(<[u8]>::to_vec).into_iter().collect();
            return CallbackReply { status: abi::OK, result: CallbackResult::Keys { keys, next: 0 } };
        };
        let mut keys = Vec::new();
        let next = pool.store.scan(cursor, FIND_STEP_HOMES, &mut |key| {
            if query.matches(key) {
                keys.push(key.to_vec());
            }
        });
        CallbackReply { status: abi::OK, result: CallbackResult::Keys { keys, next } }
    }
}
