//! What the callbacks act on: the pool mapping, the channel to the shard, the call's write
//! access to pool memory and the call in progress. Its [`PluginHost`] methods are the callbacks of the table, in safe
//! Rust over checked values; [`ferrite_plugin::host`] turns the C arguments into them.

use std::ffi::c_int;
use std::sync::Arc;

use ferrite_plugin::abi::{self, Bytes, Pair, PoolInfo};
use ferrite_plugin::host::PluginHost;

use crate::message::{CallbackReply, CallbackRequest, CallbackResult, Invocation, Location, PairRecord, ToShard};
use crate::shm::Mapping;

use super::access::WriteAccess;
use super::call::{CallState, Search};
use super::channel::Channel;
use super::HostError;

/// The host's state that callbacks reach through the opaque `ferrite_host` pointer.
#[derive(Debug)]
pub struct HostContext {
    pub pool: Arc<Mapping>,
    pub channel: Channel,
    pub access: WriteAccess,
    pub call: Option<CallState>,
    /// Set when a callback could not reach the shard: the host stops after the call.
    pub fatal: Option<HostError>,
}

impl HostContext {
    /// The pool range `addr..addr + len` names, if it lies inside pool memory.
    fn range_of(&self, addr: *const u8, len: usize) -> Option<Location> {
        let offset = (addr as usize).checked_sub(self.pool.as_ptr() as usize)? as u64;
        let range = Location { offset, len: len as u64 };
        self.pool.contains(range.offset, range.len).then_some(range)
    }

    /// Where `range` is in this process, if it lies inside pool memory.
    pub fn address_of(&self, range: Location) -> Option<*mut u8> {
        if !self.pool.contains(range.offset, range.len) {
            return None;
        }
        Some(self.pool.as_ptr().wrapping_add(range.offset as usize))
    }

    fn call(&mut self) -> Result<&mut CallState, c_int> {
        self.call.as_mut().ok_or(abi::ERR_UNSUPPORTED)
    }

    /// Readies the call that just started: write access to the memory it may write (its copy
    /// of its value, its detached value), and its copy filled from `invocation.source` if the
    /// shard asked for that. The complaint says why the call cannot run.
    pub fn prepare(&mut self, invocation: &Invocation) -> Result<(), String> {
        let call = self.call.as_mut().ok_or("no call in progress")?;
        let writable: Vec<Location> = call.writable().to_vec();
        for range in writable {
            self.access.grant(range).map_err(|e| format!("cannot give the call write access to its memory: {e}"))?;
        }
        let (source, copy) = (invocation.source, invocation.value);
        if source.len > 0 {
            let fits = source.len == copy.len && self.pool.contains(source.offset, source.len);
            let filled = fits
                && self.call.as_ref().is_some_and(|call| call.may_write(&copy))
                && self.pool.copy_within(source.offset, copy.offset, copy.len);
            if !filled {
                return Err(format!("cannot copy the value ({source:?}) into the call's copy ({copy:?})"));
            }
            if let Some(snapshot) = self.call.as_mut().and_then(|call| call.snapshot.as_mut()) {
                snapshot.refresh(&self.pool, copy);
            }
        }
        Ok(())
    }

    /// Lets the call write `range` (memory the shard gave it alone) from now on.
    fn allow(&mut self, range: Location) -> Result<(), c_int> {
        self.access.grant(range).map_err(|_| abi::ERR_FAILED)?;
        self.call()?.allow(range);
        Ok(())
    }

    /// Sends a callback to the shard and waits for its reply. A channel failure ends the host
    /// once the call returns; the plugin sees FERRITE_ERR_FAILED.
    fn round_trip(&mut self, request: CallbackRequest) -> Result<CallbackReply, c_int> {
        let id = self.call()?.id;
        let exchanged =
            self.channel.send(&ToShard::Callback { call: id, request }).and_then(|()| self.channel.wait_reply(id));
        match exchanged {
            Ok(reply) if reply.status < 0 => Err(reply.status),
            Ok(reply) => Ok(reply),
            Err(e) => {
                self.fatal.get_or_insert(e);
                Err(abi::ERR_FAILED)
            }
        }
    }

    /// Turns a pair from the shard into the plugin's view, lending its key for the call.
    /// `writable` lets the call write the value.
    fn lend_pair(&mut self, record: PairRecord, writable: bool) -> Result<Pair, c_int> {
        let value = self.address_of(record.value).ok_or(abi::ERR_INVALID)?;
        if writable {
            self.allow(record.value)?;
        }
        let pool = Arc::clone(&self.pool);
        let call = self.call()?;
        if writable {
            if let Some(snapshot) = &mut call.snapshot {
                snapshot.refresh(&pool, record.value);
            }
        }
        let key = call.lend_bytes(record.key);
        Ok(Pair {
            key: Bytes { data: key.as_ptr(), len: key.len() },
            value,
            value_len: record.value.len as usize,
            value_offset: record.value.offset,
            write_time_ns: record.write_time_ns,
        })
    }

    /// A round trip whose answer is one pair (create, open, resize).
    fn pair_call(&mut self, request: CallbackRequest, writable: bool) -> Result<Pair, c_int> {
        match self.round_trip(request)?.result {
            CallbackResult::Pair(record) => self.lend_pair(record, writable),
            _ => Err(abi::ERR_INVALID),
        }
    }

    /// The pairs written in `since_ns..=until_ns`, up to `max`, asked of the shard a page at a
    /// time (each round trip walks a bounded part of the pool).
    fn pairs_call(&mut self, since_ns: u64, until_ns: u64, max: Option<u64>) -> Result<Vec<Pair>, c_int> {
        let mut pairs = Vec::new();
        let mut cursor = 0;
        loop {
            let request = match max {
                None => CallbackRequest::Iterate { since_ns, until_ns, cursor },
                Some(max) => CallbackRequest::ReferenceVector { since_ns, until_ns, max, cursor },
            };
            let CallbackResult::Pairs { pairs: page, next } = self.round_trip(request)?.result else {
                return Err(abi::ERR_INVALID);
            };
            for record in page {
                pairs.push(self.lend_pair(record, false)?);
            }
            if next == 0 || max.is_some_and(|max| pairs.len() as u64 >= max) {
                return Ok(pairs);
            }
            cursor = next;
        }
    }
}

impl PluginHost for HostContext {
    fn declare_write(&mut self, addr: *const u8, len: usize) -> Result<(), c_int> {
        let range = self.range_of(addr, len).ok_or(abi::ERR_INVALID)?;
        let call = self.call.as_mut().ok_or(abi::ERR_INVALID)?;
        if !call.may_write(&range) {
            return Err(abi::ERR_INVALID);
        }
        call.declare(range)
    }

    fn respond(&mut self, data: &[u8]) -> Result<(), c_int> {
        let limit = self.channel.max_message_bytes();
        let call = self.call()?;
        // Room for the Done header, each response's own header and the write list.
        let needed = call.response_bytes + data.len() + 8 + 64 + 16 * call.declared.len();
        if needed > limit / 2 {
            return Err(abi::ERR_NO_SPACE);
        }
        call.response_bytes += data.len() + 8;
        let layer = call.layer;
        call.responses.push(crate::message::Response { layer, data: data.to_vec() });
        Ok(())
    }

    fn create_key(&mut self, key: &[u8], value_len: usize) -> Result<Pair, c_int> {
        self.pair_call(CallbackRequest::CreateKey { key: key.to_vec(), value_len: value_len as u64 }, true)
    }

    fn open_key(&mut self, key: &[u8], read_only: bool) -> Result<Pair, c_int> {
        self.pair_call(CallbackRequest::OpenKey { key: key.to_vec(), read_only }, !read_only)
    }

    fn erase_key(&mut self, key: &[u8]) -> Result<(), c_int> {
        self.round_trip(CallbackRequest::EraseKey { key: key.to_vec() }).map(|_| ())
    }

    fn resize_value(&mut self, key: &[u8], new_len: usize) -> Result<Pair, c_int> {
        self.pair_call(CallbackRequest::ResizeValue { key: key.to_vec(), new_len: new_len as u64 }, true)
    }

    fn allocate_memory(&mut self, len: usize, align: usize) -> Result<(*mut u8, u64), c_int> {
        let (len, align) = (len as u64, align as u64);
        if !align.is_power_of_two() || align > 4096 {
            return Err(abi::ERR_INVALID);
        }
        match self.round_trip(CallbackRequest::AllocateMemory { len, align })?.result {
            CallbackResult::Memory(memory) if memory.len >= len && memory.offset.is_multiple_of(align) => {
                let address = self.address_of(memory).ok_or(abi::ERR_INVALID)?;
                self.allow(memory)?;
                Ok((address, memory.offset))
            }
            _ => Err(abi::ERR_INVALID),
        }
    }

    fn free_memory(&mut self, addr: *mut u8, len: usize) -> Result<(), c_int> {
        let memory = self.range_of(addr, len).ok_or(abi::ERR_INVALID)?;
        self.round_trip(CallbackRequest::FreeMemory { memory })?;
        self.call()?.forbid(memory);
        Ok(())
    }

    fn iterate(&mut self, since_ns: u64, until_ns: u64) -> Result<Vec<Pair>, c_int> {
        self.pairs_call(since_ns, until_ns, None)
    }

    fn reference_vector(&mut self, since_ns: u64, until_ns: u64, max: usize) -> Result<&[Pair], c_int> {
        let mut found = self.pairs_call(since_ns, until_ns, Some(max as u64))?;
        found.truncate(max);
        Ok(self.call()?.lend_pairs(found))
    }

    /// `position` counts the matches before the one wanted: the host keeps each expression's
    /// matches for the call and asks the shard for more, a bounded step at a time, as the plugin
    /// reads past them.
    fn find_key(&mut self, expression: &[u8], position: u64) -> Result<(&[u8], u64), c_int> {
        let wanted = usize::try_from(position).map_err(|_| abi::ERR_INVALID)?;
        let call = self.call()?;
        let search = match call.finds.iter().position(|search| search.expression == expression) {
            Some(search) => search,
            None => {
                call.finds.push(Search { expression: expression.to_vec(), keys: Vec::new(), cursor: Some(0) });
                call.finds.len() - 1
            }
        };
        loop {
            let found = &self.call()?.finds[search];
            if let Some(key) = found.keys.get(wanted) {
                let key = key.clone();
                return Ok((self.call()?.lend_bytes(key), position + 1));
            }
            let Some(cursor) = found.cursor else { return Err(abi::ERR_NOT_FOUND) };
            let request = CallbackRequest::FindKey { expression: expression.to_vec(), cursor };
            let CallbackResult::Keys { keys, next } = self.round_trip(request)?.result else {
                return Err(abi::ERR_INVALID);
            };
            let found = &mut self.call()?.finds[search];
            found.keys.extend(keys);
            found.cursor = (next != 0).then_some(next);
        }
    }

    fn pool_info(&mut self) -> Result<PoolInfo, c_int> {
        match self.round_trip(CallbackRequest::PoolInfo)?.result {
            CallbackResult::PoolInfo(info) => Ok(info),
            _ => Err(abi::ERR_INVALID),
        }
    }

    fn unlock(&mut self, key: &[u8]) -> Result<(), c_int> {
        self.round_trip(CallbackRequest::Unlock { key: key.to_vec() }).map(|_| ())
    }

    /// One-way: works outside a call too (during launch and pool events). A warning or an error
    /// during a call is kept as the reason it gives should it fail.
    fn log(&mut self, level: c_int, text: String) {
        if let (Some(call), true) = (self.call.as_mut(), level <= abi::LOG_WARN) {
            call.last_complaint.clone_from(&text);
        }
        if let Err(e) = self.channel.send(&ToShard::Log { level, text }) {
            self.fatal.get_or_insert(e);
        }
    }
}
