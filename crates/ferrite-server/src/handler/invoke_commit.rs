//! The end of a plugin call: its writes logged (in place, as a copy put back, or with the keys
//! and memory it changed as one store transaction), or undone, and its answer.

use std::time::{SystemTime, UNIX_EPOCH};

use ferrite_ado::message::{CallId, Done, Location};
use ferrite_plugin::abi;
use ferrite_proto::{ErrorCode, PoolHandle};
use ferrite_store::persistence::wal::Lsn;
use ferrite_store::{PutMode, Store, WriteFootprint};

use super::invoke_keys::ALLOCATION_ID_BYTES;
use super::{store_failure, Failure, ShardState};
use crate::ado::{Call, Running, Target};

/// Declared ranges logged as they are; a call that declares more is logged as the one range
/// that covers them all (within its target), which bounds the record the shard reserves room for.
pub(super) const LOGGED_RANGES_MAX: u64 = 16;

impl ShardState {
    /// Logs a finished call's writes (or undoes them if it failed or they cannot be logged), and
    /// answers it.
    pub(super) fn finish(&mut self, pool: PoolHandle, mut running: Running, done: Done) {
        let outcome = if !done.writes.iter().all(|write| running.may_write(write)) {
            // The host checks this too; a host that did not is not trusted with the pool.
            self.undo(pool, running.id);
            if let Some(calls) = self.calls.get_mut(&pool) {
                let _ = calls.link.restart();
            }
            Err(Failure::new(
                ErrorCode::AdoFailed,
                format!(
                    "pool '{}': the plugin host declared writes outside the memory the call was given; the call was undone",
                    self.pool_name(pool)
                ),
            ))
        } else if done.status != abi::OK {
            // What the plugin said of its failure, else its first answer.
            let reason = match done.reason.is_empty() {
                false => done.reason.clone(),
                true => {
                    done.responses.first().map_or_else(String::new, |r| String::from_utf8_lossy(&r.data).into_owned())
                }
            };
            Err(Failure::new(
                ErrorCode::AdoFailed,
                format!(
                    "pool '{}': the plugin failed (status {}): {reason}; its writes were undone",
                    self.pool_name(pool),
                    done.status
                ),
            ))
        } else if done.writes.is_empty() && !running.changes_more_than_its_target() {
            Ok(running.call.wait_lsn)
        } else {
            let logged = match running.target {
                _ if running.changes_more_than_its_target() => self.commit_call(pool, &mut running, &done),
                Target::InPlace(_) => self.log_writes(pool, &running, &done),
                Target::Copy(copy) => self.write_back(pool, &running.call, copy),
            };
            logged.map(|lsn| lsn.max(running.call.wait_lsn))
        };
        self.release(pool, running.target);
        self.release_opened(pool, &running.opened);
        self.release_lent(pool, &running.lent);
        self.release_allocated(pool, &running.allocated);
        match outcome {
            Ok(wait_lsn) => {
                if let Some(completion) = running.call.completion.as_ref().filter(|_| running.call.answer.settles()) {
                    completion.complete(wait_lsn, |out| running.call.answer.success(&done.responses, out));
                }
            }
            Err(failure) => {
                self.stats.invocation_failures += 1;
                self.answer_failure(&running.call, failure);
            }
        }
        self.call_ended(pool);
    }

    /// Puts a successful call's copy back as its key's value; the LSN the answer waits for. A
    /// put the log cannot take changes nothing: the copy is simply dropped.
    fn write_back(&mut self, handle: PoolHandle, call: &Call, copy: Location) -> Result<Lsn, Failure> {
        let pool = self.pools.get(handle).expect("a pool with calls exists");
        let value = pool.store.region_bytes(copy.offset, copy.len).map(<[u8]>::to_vec).ok_or_else(|| {
            Failure::new(ErrorCode::Internal, format!("pool '{}': cannot read the plugin's copy", pool.name))
        })?;
        self.admit_write(pool.store.put_footprint(call.key.len() as u64, copy.len))?;
        let now_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let pool = self.pools.get_mut(handle).expect("a pool with calls exists");
        pool.store.put(&call.key, &value, PutMode::UpdateOnly, now_ns).map_err(|error| store_failure(error, pool))?;
        self.stats.puts += 1;
        let lsn = self.log_position(call.sync)?;
        Ok(if call.sync { lsn } else { 0 })
    }

    /// Logs `done`'s writes, made in place, as one transaction; the LSN the answer waits for.
    fn log_writes(&mut self, pool: PoolHandle, running: &Running, done: &Done) -> Result<Lsn, Failure> {
        let ranges = logged_ranges(&done.writes);
        let bytes = ranges.iter().map(|(_, len)| len).sum();
        if let Err(failure) = self.admit_write(WriteFootprint { bytes, ranges: ranges.len() as u64 }) {
            // Room was reserved when the call began, but other writes may have taken it since.
            if !self.undo(pool, running.id) {
                return Err(self.halt("a plugin call changed pool memory that can be neither logged nor undone".into()));
            }
            return Err(failure);
        }
        let store = &mut self.pools.get_mut(pool).expect("a pool with calls exists").store;
        store.commit_external_writes(&ranges);
        let lsn = self.log_position(running.call.sync)?;
        Ok(if running.call.sync { lsn } else { 0 })
    }

    /// Puts back the before-images of the finished call `id`; false if they are gone.
    pub(super) fn undo(&mut self, pool: PoolHandle, id: CallId) -> bool {
        self.calls.get_mut(&pool).is_some_and(|calls| calls.link.undo_finished(id))
    }

    pub(super) fn pin(&mut self, pool: PoolHandle, target: Location) {
        if let Some(persisted) = self.pools.get(pool).and_then(|pool| pool.persisted.as_ref()) {
            persisted.pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pin(target.offset, target.len);
        }
    }

    pub(super) fn unpin(&mut self, pool: PoolHandle, target: Location) {
        let lsn = self.last_lsn();
        if let Some(persisted) = self.pools.get(pool).and_then(|pool| pool.persisted.as_ref()) {
            persisted.pages.lock().unwrap_or_else(std::sync::PoisonError::into_inner).unpin(
                target.offset,
                target.len,
                lsn,
            );
        }
    }

    /// The LSN of the log's last record (0 without a log).
    fn last_lsn(&self) -> Lsn {
        self.durability.as_ref().map_or(0, |durability| durability.log.last_lsn())
    }

    /// Applies a successful call's staged keys and its target's writes to the store as one
    /// transaction; the LSN its answer waits for. Keys other than the target go first and the
    /// target's own change last, so if one is refused (a pool too full or fragmented for a new
    /// value) the target is as the plugin left it: the changes already applied are put back
    /// (inside the same transaction, which then logs no change), and the target's in-place
    /// writes are undone by its host.
    fn commit_call(&mut self, handle: PoolHandle, running: &mut Running, done: &Done) -> Result<Lsn, Failure> {
        let key = &running.call.key;
        let target_staged = running.staged(key).is_some();
        let pool = self.pools.get(handle).expect("a pool with calls exists");
        let read = |location: Location| {
            read_region(pool, location).ok_or_else(|| {
                Failure::new(ErrorCode::Internal, format!("pool '{}': cannot read a plugin's new value", pool.name))
            })
        };
        // New values first, the target's own last of them; erasures after, as they cannot fail.
        let mut writes: Vec<(&[u8], Vec<u8>)> = Vec::new();
        let mut erasures: Vec<&[u8]> = Vec::new();
        for staged in running.staged.iter().filter(|staged| staged.key != *key) {
            match staged.value {
                Some(value) => writes.push((&staged.key, read(value)?)),
                None => erasures.push(&staged.key),
            }
        }
        match running.staged(key).map(|staged| staged.value) {
            Some(Some(value)) => writes.push((key, read(value)?)),
            Some(None) => erasures.push(key),
            None => {
                if let (Target::Copy(copy), false) = (running.target, done.writes.is_empty()) {
                    writes.push((key, read(copy)?));
                }
            }
        }
        let in_place = match running.target {
            Target::InPlace(_) if !target_staged => logged_ranges(&done.writes),
            _ => Vec::new(),
        };
        let footprint = transaction_footprint(pool.store.as_ref(), running);
        if let Err(failure) = self.admit_write(footprint) {
            // Room was reserved as the call went, but other writes may have taken it since.
            return Err(self.undo_in_place(handle, running, done, failure));
        }
        let now = now_ns();
        let pool = self.pools.get_mut(handle).expect("a pool with calls exists");
        if !pool.store.begin_transaction() {
            let failure = Failure::new(ErrorCode::Internal, format!("pool '{}' cannot group writes", pool.name));
            return Err(self.undo_in_place(handle, running, done, failure));
        }
        let mut applied: Vec<(&[u8], Option<Before>)> = Vec::new();
        let mut refused = None;
        // The memory the call allocated is kept first: nothing else depends on it.
        let mut kept: Vec<u64> = Vec::new();
        for allocation in &running.allocated {
            match pool.store.keep_scratch(allocation.id, allocation.memory.offset, allocation.memory.len, now) {
                Ok(()) => kept.push(allocation.id),
                Err(error) => {
                    refused = Some(store_failure(error, pool));
                    break;
                }
            }
        }
        for (key, value) in writes.iter().filter(|_| refused.is_none()) {
            let before = pool
                .store
                .get(key)
                .map(<[u8]>::to_vec)
                .zip(pool.store.attributes(key))
                .map(|(value, attributes)| (value, attributes.write_time_ns));
            match pool.store.put(key, value, PutMode::Upsert, now) {
                Ok(_) => applied.push((key, before)),
                Err(error) => {
                    refused = Some(store_failure(error, pool));
                    break;
                }
            }
        }
        if let Some(failure) = refused {
            let restored = applied.iter().rev().all(|(key, before)| match before {
                Some((value, written)) => pool.store.put(key, value, PutMode::Upsert, *written).is_ok(),
                None => pool.store.erase(key).is_ok(),
            }) && kept.iter().rev().all(|id| pool.store.release_kept(*id).is_ok());
            pool.store.end_transaction();
            if !restored {
                return Err(self.halt("a plugin call's changes could be neither applied nor put back".into()));
            }
            // Kept and released again: the store has freed their memory already.
            running.allocated.retain(|allocation| !kept.contains(&allocation.id));
            self.log_position(running.call.sync)?;
            return Err(self.undo_in_place(handle, running, done, failure));
        }
        // Erasures and frees come last: neither can fail (the keys are present and held; an
        // allocation another call freed meanwhile is simply gone).
        let mut erased = 0;
        for key in &erasures {
            if pool.store.erase(key).is_ok() {
                erased += 1;
                if let Some(index) = &mut pool.index {
                    index.remove(key);
                }
            }
        }
        for id in &running.freed {
            let _ = pool.store.release_kept(*id);
        }
        pool.store.commit_external_writes(&in_place);
        pool.store.end_transaction();
        // The store owns the call's allocations now.
        running.allocated.clear();
        for (key, before) in &applied {
            if let (None, Some(index)) = (before, &mut pool.index) {
                index.insert(key);
            }
        }
        self.stats.puts += applied.len() as u64;
        self.stats.erases += erased;
        let lsn = self.log_position(running.call.sync)?;
        Ok(if running.call.sync { lsn } else { 0 })
    }

    /// A call whose changes were refused: its target's in-place writes are undone by its host
    /// (the shard stops if the host has moved on and cannot); answers `failure`.
    fn undo_in_place(&mut self, handle: PoolHandle, running: &Running, done: &Done, failure: Failure) -> Failure {
        let wrote_in_place = matches!(running.target, Target::InPlace(_)) && !done.writes.is_empty();
        if wrote_in_place && !self.undo(handle, running.id) {
            return self.halt("a plugin call changed pool memory that can be neither logged nor undone".into());
        }
        failure
    }
}

/// The ranges to log for a call's declared writes: as declared (merged by the log) if there are
/// few, else the one range covering them.
pub(super) fn logged_ranges(writes: &[Location]) -> Vec<(u64, u64)> {
    if writes.len() as u64 <= LOGGED_RANGES_MAX {
        return writes.iter().map(|write| (write.offset, write.len)).collect();
    }
    let start = writes.iter().map(|write| write.offset).min().unwrap_or(0);
    let end = writes.iter().filter_map(Location::end).max().unwrap_or(start);
    vec![(start, end - start)]
}

/// A key's value and write time before a transaction changed it, to put back should a later
/// change of the transaction be refused.
type Before = (Vec<u8>, u64);

/// The bytes at `location` of `pool`'s memory region.
pub(super) fn read_region(pool: &crate::pools::Pool, location: Location) -> Option<Vec<u8>> {
    pool.store.region_bytes(location.offset, location.len).map(<[u8]>::to_vec)
}

/// The most a call's transaction may log: its target's writes, each staged key's change and,
/// should a later change be refused, the change that puts the key back as it was; its
/// allocations kept, and those it frees.
pub(super) fn transaction_footprint(store: &dyn Store, running: &Running) -> WriteFootprint {
    let mut total = match running.target {
        Target::InPlace(location) => WriteFootprint { bytes: location.len, ranges: LOGGED_RANGES_MAX },
        Target::Copy(copy) => store.update_footprint(running.call.key.len() as u64, copy.len),
    };
    for staged in &running.staged {
        let key_len = staged.key.len() as u64;
        // Only a new key may grow the index; erasures come last and are never put back.
        let change_and_undo = match (staged.value, store.attributes(&staged.key)) {
            (Some(value), Some(before)) => {
                plus(store.update_footprint(key_len, value.len), store.update_footprint(key_len, before.length))
            }
            (Some(value), None) => plus(store.put_footprint(key_len, value.len), store.erase_footprint()),
            (None, _) => store.erase_footprint(),
        };
        total = plus(total, change_and_undo);
    }
    for allocation in &running.allocated {
        let keep = store.put_footprint(ALLOCATION_ID_BYTES, allocation.memory.len);
        total = plus(total, plus(keep, store.erase_footprint()));
    }
    for _ in &running.freed {
        total = plus(total, store.erase_footprint());
    }
    total
}

fn plus(a: WriteFootprint, b: WriteFootprint) -> WriteFootprint {
    WriteFootprint { bytes: a.bytes + b.bytes, ranges: a.ranges + b.ranges }
}

pub(super) fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_declared_writes_are_logged_as_the_range_that_covers_them() {
        let few: Vec<Location> = (0..3).map(|i| Location { offset: 100 + 10 * i, len: 4 }).collect();
        assert_eq!(logged_ranges(&few), vec![(100, 4), (110, 4), (120, 4)]);
        let many: Vec<Location> = (0..40).rev().map(|i| Location { offset: 1000 + 2 * i, len: 1 }).collect();
        assert_eq!(logged_ranges(&many), vec![(1000, 79)]);
    }
}
