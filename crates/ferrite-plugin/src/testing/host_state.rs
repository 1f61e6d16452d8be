//! The test host's side of every callback, in safe Rust: each method checks its arguments
//! against the pool and the call, as the `ferrite-ado` host does, and answers with a status code
//! on failure. [`crate::host`] translates the C arguments.

use std::ffi::c_int;

use crate::abi::{self, Bytes, Pair, PoolInfo};
use crate::context::LogLevel;
use crate::host::PluginHost;

use super::arena::ALIGN_BYTES_MAX;
use super::call_state::{BeforeImage, CallState, Response};
use super::pool::{Entry, Pool, VALUE_ALIGN_BYTES};

/// A line a plugin wrote through the `log` callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub level: LogLevel,
    pub message: String,
}

#[derive(Debug)]
pub(crate) struct HostState {
    pub(crate) pool: Pool,
    pub(crate) pool_id: u64,
    /// The invocation in progress; `None` during launch, pool events and shutdown, when only
    /// `log` and `pool_info` make sense.
    pub(crate) call: Option<CallState>,
    pub(crate) log: Vec<LogLine>,
}

fn in_range(offset: usize, len: usize, start: usize, region_len: usize) -> bool {
    offset >= start && offset + len <= start + region_len
}

impl HostState {
    fn split(&mut self) -> Result<(&mut Pool, &mut CallState), c_int> {
        match self.call.as_mut() {
            Some(call) => Ok((&mut self.pool, call)),
            None => Err(abi::ERR_INVALID),
        }
    }

    fn pair(pool: &Pool, call: &mut CallState, key: &[u8], entry: Entry) -> Pair {
        let key = call.keep_key(key);
        Pair {
            key: Bytes { data: key.as_ptr(), len: key.len() },
            value: pool.arena.address(entry.offset),
            value_len: entry.len,
            value_offset: entry.offset as u64,
            write_time_ns: entry.write_time_ns,
        }
    }

    /// Pairs written between `since_ns` and `until_ns`, in key order, at most `max`.
    fn pairs_between(&mut self, since_ns: u64, until_ns: u64, max: usize) -> Result<Vec<Pair>, c_int> {
        let (pool, call) = self.split()?;
        let chosen: Vec<(Vec<u8>, Entry)> = pool
            .tables
            .index
            .iter()
            .filter(|(_, entry)| (since_ns..=until_ns).contains(&entry.write_time_ns))
            .take(max)
            .map(|(key, entry)| (key.clone(), *entry))
            .collect();
        Ok(chosen.into_iter().map(|(key, entry)| Self::pair(pool, call, &key, entry)).collect())
    }
}

impl PluginHost for HostState {
    fn declare_write(&mut self, address: *const u8, len: usize) -> Result<(), c_int> {
        let (pool, call) = self.split()?;
        if call.read_only {
            return Err(abi::ERR_INVALID);
        }
        let offset = pool.arena.offset_of(address, len).ok_or(abi::ERR_INVALID)?;
        let in_writable_value = call
            .writable
            .iter()
            .filter_map(|key| pool.entry(key))
            .any(|entry| in_range(offset, len, entry.offset, entry.len));
        let in_allocation = call.allocated.iter().any(|(&start, &block)| in_range(offset, len, start, block));
        if !in_writable_value && !in_allocation {
            return Err(abi::ERR_INVALID);
        }
        call.before_images.push(BeforeImage { offset, bytes: pool.arena.bytes(offset, len).to_vec() });
        Ok(())
    }

    fn respond(&mut self, data: &[u8]) -> Result<(), c_int> {
        let (_, call) = self.split()?;
        call.responses.push(Response { layer: call.layer, data: data.to_vec() });
        Ok(())
    }

    fn create_key(&mut self, key: &[u8], value_len: usize) -> Result<Pair, c_int> {
        let (pool, call) = self.split()?;
        if pool.entry(key).is_some() {
            return Err(abi::ERR_EXISTS);
        }
        let entry = pool.place(key, value_len).ok_or(abi::ERR_NO_SPACE)?;
        call.host_writes.push(entry.offset..entry.offset + entry.len);
        call.locked.insert(key.to_vec());
        call.writable.insert(key.to_vec());
        Ok(Self::pair(pool, call, key, entry))
    }

    fn open_key(&mut self, key: &[u8], read_only: bool) -> Result<Pair, c_int> {
        let (pool, call) = self.split()?;
        let entry = pool.entry(key).ok_or(abi::ERR_NOT_FOUND)?;
        // Locks are not re-entrant: the call already holds this one.
        if !call.locked.insert(key.to_vec()) {
            return Err(abi::ERR_LOCKED);
        }
        if !read_only {
            call.writable.insert(key.to_vec());
        }
        Ok(Self::pair(pool, call, key, entry))
    }

    fn erase_key(&mut self, key: &[u8]) -> Result<(), c_int> {
        let (pool, call) = self.split()?;
        if call.target.as_deref() == Some(key) {
            return Err(abi::ERR_INVALID);
        }
        pool.tables.index.remove(key).ok_or(abi::ERR_NOT_FOUND)?;
        call.locked.remove(key);
        call.writable.remove(key);
        Ok(())
    }

    fn resize_value(&mut self, key: &[u8], new_len: usize) -> Result<Pair, c_int> {
        let (pool, call) = self.split()?;
        if !call.writable.contains(key) {
            return Err(if pool.entry(key).is_some() { abi::ERR_INVALID } else { abi::ERR_NOT_FOUND });
        }
        let old = pool.entry(key).ok_or(abi::ERR_NOT_FOUND)?;
        let new = pool.place(key, new_len).ok_or(abi::ERR_NO_SPACE)?;
        pool.arena.copy_within(old.offset, new.offset, old.len.min(new_len));
        call.host_writes.push(new.offset..new.offset + new.len);
        Ok(Self::pair(pool, call, key, new))
    }

    fn allocate_memory(&mut self, len: usize, align: usize) -> Result<(*mut u8, u64), c_int> {
        let (pool, call) = self.split()?;
        if len == 0 || !align.is_power_of_two() || align > ALIGN_BYTES_MAX {
            return Err(abi::ERR_INVALID);
        }
        let offset = pool.arena.allocate(len, align).ok_or(abi::ERR_NO_SPACE)?;
        pool.arena.zero(offset, len);
        call.host_writes.push(offset..offset + len);
        pool.tables.allocations.insert(offset, len);
        call.allocated.insert(offset, len);
        Ok((pool.arena.address(offset), offset as u64))
    }

    fn free_memory(&mut self, address: *mut u8, len: usize) -> Result<(), c_int> {
        let (pool, call) = self.split()?;
        let offset = pool.arena.offset_of(address, len).ok_or(abi::ERR_INVALID)?;
        if pool.tables.allocations.get(&offset) != Some(&len) {
            return Err(abi::ERR_INVALID);
        }
        pool.tables.allocations.remove(&offset);
        call.allocated.remove(&offset);
        Ok(())
    }

    fn iterate(&mut self, since_ns: u64, until_ns: u64) -> Result<Vec<Pair>, c_int> {
        self.pairs_between(since_ns, until_ns, usize::MAX)
    }

    fn reference_vector(&mut self, since_ns: u64, until_ns: u64, max: usize) -> Result<&[Pair], c_int> {
        let pairs = self.pairs_between(since_ns, until_ns, max)?.into();
        let (_, call) = self.split()?;
        call.kept_pairs.push(pairs);
        Ok(call.kept_pairs.last().map_or(&[], |kept| kept))
    }

    /// The first key at or after `position` (an index into the keys in byte order) that
    /// matches `expression`. The test host knows `prefix:`, `next:` and exact keys; `regex:`
    /// is `FERRITE_ERR_UNSUPPORTED` here.
    fn find_key(&mut self, expression: &[u8], position: u64) -> Result<(&[u8], u64), c_int> {
        let (pool, call) = self.split()?;
        if expression.starts_with(b"regex:") {
            return Err(abi::ERR_UNSUPPORTED);
        }
        let matches = |key: &[u8]| match (expression.strip_prefix(b"prefix:"), expression.strip_prefix(b"next:")) {
            (Some(prefix), _) => key.starts_with(prefix),
            (None, Some(_)) => true,
            (None, None) => key == expression,
        };
        let start = usize::try_from(position).map_err(|_| abi::ERR_INVALID)?;
        let found = pool.tables.index.keys().enumerate().skip(start).find(|(_, key)| matches(key));
        let (index, key) = found.ok_or(abi::ERR_NOT_FOUND)?;
        Ok((call.keep_key(key), index as u64 + 1))
    }

    /// Answers outside a call too (during launch and pool events).
    fn pool_info(&mut self) -> Result<PoolInfo, c_int> {
        Ok(PoolInfo {
            pool_id: self.pool_id,
            size_bytes: self.pool.arena.capacity() as u64,
            used_bytes: self.pool.arena.used() as u64,
            objects: self.pool.tables.index.len() as u64,
            region_bytes: self.pool.arena.capacity() as u64,
        })
    }

    fn unlock(&mut self, key: &[u8]) -> Result<(), c_int> {
        let (_, call) = self.split()?;
        if call.target.as_deref() == Some(key) || !call.locked.remove(key) {
            return Err(abi::ERR_INVALID);
        }
        call.writable.remove(key);
        Ok(())
    }

    fn log(&mut self, level: c_int, message: String) {
        let level = LogLevel::from_code(level);
        eprintln!("plugin log [{level:?}]: {message}");
        self.log.push(LogLine { level, message });
    }
}

/// Values keep the alignment the test host promises plugins.
const _: () = assert!(VALUE_ALIGN_BYTES.is_power_of_two() && VALUE_ALIGN_BYTES <= ALIGN_BYTES_MAX);
