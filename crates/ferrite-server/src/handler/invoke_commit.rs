//! The end of a plugin call: what it changed applied to the store as one transaction (the ranges
//! it declared in its copy of its value, the keys it staged, the memory it allocated or freed),
//! or dropped, and its answer. A call never wrote pool memory that anything refers to, so a call
//! that failed, or whose changes the pool or the log refuses, leaves nothing to undo, whatever
//! its host has done since.

use ferrite_ado::message::{Done, Location};
use ferrite_plugin::abi;
use ferrite_proto::{ErrorCode, PoolHandle};
use ferrite_store::persistence::wal::Lsn;
use ferrite_store::{PutMode, RegionCopy, Store, WriteFootprint};

use super::invoke_keys::ALLOCATION_ID_BYTES;
use super::{store_failure, Failure, ShardState};
use crate::ado::{CopyOf, Running, Target};

impl ShardState {
    /// Applies a finished call's changes (or drops them if it failed or they cannot be stored),
    /// and answers it.
    pub(super) fn finish(&mut self, pool: PoolHandle, mut running: Running, done: Done) {
        let outcome = if !done.writes.iter().all(|write| running.may_write(write)) {
            // The host checks this too; a host that did not is not trusted with the pool.
            if let Some(calls) = self.calls.get_mut(&pool) {
                let _ = calls.link.restart();
            }
            Err(Failure::new(
                ErrorCode::AdoFailed,
                format!(
                    "pool '{}': the plugin host declared writes outside the memory the call was given; the call changed nothing",
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
                    "pool '{}': the plugin failed (status {}): {reason}; the call changed nothing",
                    self.pool_name(pool),
                    done.status
                ),
            ))
        } else {
            self.commit_call(pool, &mut running, &done).map(|lsn| lsn.max(running.call.wait_lsn))
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

    /// Applies a successful call's changes to the store as one transaction; the LSN its answer
    /// waits for. New values go first (the target's own last of them), so that if one is
    /// refused (a pool too full or fragmented for it) the changes already applied are put back
    /// inside the same transaction, which then logs no change, and the call fails with the
    /// refusal. Erasures, frees and the declared ranges copied onto a value kept out of line
    /// come last: none of them can fail.
    fn commit_call(&mut self, handle: PoolHandle, running: &mut Running, done: &Done) -> Result<Lsn, Failure> {
        let key = &running.call.key;
        let pool = self.pools.get(handle).expect("a pool with calls exists");
        let read = |location: Location| {
            read_region(pool, location).ok_or_else(|| {
                Failure::new(ErrorCode::Internal, format!("pool '{}': cannot read a plugin's new value", pool.name))
            })
        };
        let mut writes: Vec<(&[u8], Vec<u8>)> = Vec::new();
        let mut erasures: Vec<&[u8]> = Vec::new();
        for staged in running.staged.iter().filter(|staged| staged.key != *key) {
            match staged.value {
                Some(value) => writes.push((&staged.key, read(value)?)),
                None => erasures.push(&staged.key),
            }
        }
        // The target: staged (given, resized or erased) as a whole, else what the plugin
        // declared in its copy.
        let mut copies = Vec::new();
        match (running.staged(key).map(|staged| staged.value), running.target) {
            (Some(Some(value)), _) => writes.push((key, read(value)?)),
            (Some(None), _) => erasures.push(key),
            (None, Target::Copy { copy, of: CopyOf::Value(value) }) => {
                copies = declared_within(&done.writes, copy)
                    .into_iter()
                    .map(|(at, len)| RegionCopy { from: copy.offset + at, to: value.offset + at, len })
                    .collect();
            }
            (None, Target::Copy { copy, of: CopyOf::Entry }) => {
                let declared = declared_within(&done.writes, copy);
                if !declared.is_empty() {
                    let mut value = pool.store.get(key).map(<[u8]>::to_vec).ok_or_else(|| key_gone(&pool.name))?;
                    let new = read(copy)?;
                    for (at, len) in declared {
                        let range = at as usize..(at + len) as usize;
                        value[range.clone()].copy_from_slice(&new[range]);
                    }
                    writes.push((key, value));
                }
            }
            (None, _) => {}
        }
        let changes_nothing = writes.is_empty()
            && erasures.is_empty()
            && copies.is_empty()
            && running.allocated.is_empty()
            && running.freed.is_empty();
        if changes_nothing {
            return Ok(running.call.wait_lsn);
        }
        let footprint = transaction_footprint(pool.store.as_ref(), running, copies_footprint(&copies));
        self.admit_call_transaction(footprint)?;
        let now = now_ns();
        let pool = self.pools.get_mut(handle).expect("a pool with calls exists");
        if !pool.store.begin_transaction() {
            return Err(Failure::new(ErrorCode::Internal, format!("pool '{}' cannot group writes", pool.name)));
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
            return Err(failure);
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
        if !copies.is_empty() {
            pool.store.copy_within_region(&copies);
        }
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

    /// Checks that the log can take a call's transaction of `footprint`: its record fits one log
    /// segment of the configured size (a call never makes the log grow a segment of its own)
    /// and the log has room for it now.
    pub(super) fn admit_call_transaction(&self, footprint: WriteFootprint) -> Result<(), Failure> {
        let fits = self.durability.as_ref().is_none_or(|durability| durability.log.fits_segment(footprint));
        if !fits {
            return Err(Failure::new(
                ErrorCode::ValueTooLarge,
                format!(
                    "a plugin call's changes ({} bytes in {} ranges) exceed what one log segment holds; the call changed nothing",
                    footprint.bytes, footprint.ranges
                ),
            ));
        }
        self.admit_write(footprint)
    }
}

/// The ranges of `writes` that lie in `copy`, merged where they touch, as (offset from the
/// copy's start, length) in ascending order: exactly the bytes a call declared of its value.
pub(super) fn declared_within(writes: &[Location], copy: Location) -> Vec<(u64, u64)> {
    let mut inside: Vec<(u64, u64)> = writes
        .iter()
        .filter(|write| write.len > 0 && copy.covers(write))
        .map(|write| (write.offset - copy.offset, write.len))
        .collect();
    inside.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(inside.len());
    for (at, len) in inside {
        match merged.last_mut() {
            Some((start, merged_len)) if at <= *start + *merged_len => {
                *merged_len = (*merged_len).max(at + len - *start);
            }
            _ => merged.push((at, len)),
        }
    }
    merged
}

/// What copying `copies` logs.
fn copies_footprint(copies: &[RegionCopy]) -> WriteFootprint {
    WriteFootprint { bytes: copies.iter().map(|copy| copy.len).sum(), ranges: copies.len() as u64 }
}

/// A key's value and write time before a transaction changed it, to put back should a later
/// change of the transaction be refused.
type Before = (Vec<u8>, u64);

fn key_gone(pool: &str) -> Failure {
    Failure::new(ErrorCode::Internal, format!("pool '{pool}': a held key's value is gone"))
}

/// The bytes at `location` of `pool`'s memory region.
pub(super) fn read_region(pool: &crate::pools::Pool, location: Location) -> Option<Vec<u8>> {
    pool.store.region_bytes(location.offset, location.len).map(<[u8]>::to_vec)
}

/// The most a call's transaction may log, given what its target's own writes log (`target`):
/// each staged key's change and, should a later change be refused, the change that puts the
/// key back as it was; its allocations kept, and those it frees.
pub(super) fn transaction_footprint(store: &dyn Store, running: &Running, target: WriteFootprint) -> WriteFootprint {
    let mut total = target;
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

/// The most the writes of a running call's target may log, before it has declared them: its
/// whole value as one range copied onto it, or put back.
pub(super) fn target_footprint(store: &dyn Store, running: &Running) -> WriteFootprint {
    match running.target {
        Target::Copy { of: CopyOf::Value(value), .. } => WriteFootprint { bytes: value.len, ranges: 1 },
        Target::Copy { copy, of: CopyOf::Entry } => store.update_footprint(running.call.key.len() as u64, copy.len),
        Target::Copy { of: CopyOf::Given, .. } | Target::InPlace(_) => WriteFootprint { bytes: 0, ranges: 0 },
    }
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

    /// Only the ranges inside the copy count, relative to it, sorted and merged where they
    /// touch or overlap; ranges elsewhere (the call's other memory) and empty ones do not.
    #[test]
    fn declared_ranges_are_taken_from_the_copy_and_merged() {
        let copy = Location { offset: 4096, len: 100 };
        let writes = [
            Location { offset: 4096 + 50, len: 10 },
            Location { offset: 8192, len: 8 },
            Location { offset: 4096 + 10, len: 5 },
            Location { offset: 4096 + 15, len: 1 },
            Location { offset: 4096 + 55, len: 2 },
            Location { offset: 4096 + 90, len: 0 },
            Location { offset: 4096 + 95, len: 10 },
        ];
        assert_eq!(declared_within(&writes, copy), vec![(10, 6), (50, 10)]);
    }
}
