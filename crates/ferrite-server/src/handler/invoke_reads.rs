//! The callbacks that read the pool for a plugin call: `open_key` for reading and `unlock`,
//! `pool_info`, `iterate` and reference vectors.

use ferrite_ado::message::{CallId, CallbackReply, CallbackRequest, CallbackResult, Location, PairRecord};
use ferrite_plugin::abi;
use ferrite_proto::PoolHandle;

use super::invoke::{refused_status, scratch_copy};
use super::ShardState;
use crate::ado::Running;

impl ShardState {
    /// `open_key` for reading: the pair, read-locked for the call (writers of the key wait until
    /// it ends or unlocks it); a small value, which inserts may move, is lent as a copy.
    /// `FERRITE_ERR_LOCKED` for a key a call is writing (a callback cannot wait), the call's own
    /// target included; a key the call itself changed is lent as the call left it.
    pub(super) fn open_key(&mut self, handle: PoolHandle, call: CallId, key: Vec<u8>) -> CallbackReply {
        let reply = |status: i32| CallbackReply { status, result: CallbackResult::Nothing };
        let Some(calls) = self.calls.get_mut(&handle) else { return reply(abi::ERR_FAILED) };
        // A key the call changed reads as the call left it.
        if let Some(own) = calls.running_mut().find(|running| running.id == call) {
            if let Some(staged) = own.staged(&key).cloned() {
                let Some(value) = staged.value else { return reply(abi::ERR_NOT_FOUND) };
                own.opened.push((key.clone(), None));
                let record = PairRecord { key, value, write_time_ns: 0 };
                return CallbackReply { status: abi::OK, result: CallbackResult::Pair(record) };
            }
        }
        let written = |running: &Running| {
            (running.call.key == key && running.call.work_flags & abi::WORK_READ_ONLY == 0)
                || running.staged(&key).is_some()
        };
        if calls.running().iter().any(written) {
            return reply(abi::ERR_LOCKED);
        }
        let Some(pool) = self.pools.get_mut(handle) else { return reply(abi::ERR_FAILED) };
        let (Some(value), Some(attributes)) = (pool.store.value_location(&key), pool.store.attributes(&key)) else {
            return reply(abi::ERR_NOT_FOUND);
        };
        let mut location = Location { offset: value.offset, len: value.len };
        let mut copy = None;
        if !value.stable && value.len > 0 {
            let Some(bytes) = pool.store.get(&key).map(<[u8]>::to_vec) else { return reply(abi::ERR_NOT_FOUND) };
            let offset = match scratch_copy(pool.store.as_mut(), &bytes, value.len) {
                Ok(offset) => offset,
                Err(refused) => return reply(refused_status(refused)),
            };
            location = Location { offset, len: value.len };
            copy = Some(location);
        }
        let record = PairRecord { key: key.clone(), value: location, write_time_ns: attributes.write_time_ns };
        let calls = self.calls.get_mut(&handle).expect("looked up above");
        match calls.running_mut().find(|running| running.id == call) {
            Some(running) => {
                running.opened.push((key, copy));
                CallbackReply { status: abi::OK, result: CallbackResult::Pair(record) }
            }
            None => {
                self.release_opened(handle, &[(key, copy)]);
                reply(abi::ERR_FAILED)
            }
        }
    }

    /// `unlock`: ends the read lock of a key the call opened, and frees its copy.
    pub(super) fn unlock(&mut self, handle: PoolHandle, call: CallId, key: &[u8]) -> CallbackReply {
        let opened = self.calls.get_mut(&handle).and_then(|calls| {
            let running = calls.running_mut().find(|running| running.id == call)?;
            let at = running.opened.iter().position(|(opened, _)| opened == key)?;
            Some(running.opened.remove(at))
        });
        let Some(opened) = opened else {
            return CallbackReply { status: abi::ERR_INVALID, result: CallbackResult::Nothing };
        };
        self.release_opened(handle, &[opened]);
        if let Some(calls) = self.calls.get_mut(&handle) {
            calls.wake_waiters();
        }
        CallbackReply { status: abi::OK, result: CallbackResult::Nothing }
    }

    /// Carries out a plugin's read-only callbacks: `pool_info`, `iterate` and the reference
    /// vector. Any other answers `FERRITE_ERR_UNSUPPORTED`, which the SDK reports to the plugin
    /// as an error.
    pub(super) fn callback(&self, handle: PoolHandle, request: &CallbackRequest) -> CallbackReply {
        let Some(pool) = self.pools.get(handle) else {
            return CallbackReply { status: abi::ERR_FAILED, result: CallbackResult::Nothing };
        };
        match request {
            CallbackRequest::PoolInfo => CallbackReply {
                status: abi::OK,
                result: CallbackResult::PoolInfo(abi::PoolInfo {
                    pool_id: handle.0,
                    size_bytes: pool.store.capacity_bytes(),
                    used_bytes: pool.store.used_bytes(),
                    objects: pool.store.count(),
                    region_bytes: pool.persisted.as_ref().map_or(0, |p| p.descriptor.region_bytes),
                }),
            },
            CallbackRequest::Iterate { since_ns, until_ns, cursor } => {
                pairs_page(pool, *since_ns..=*until_ns, usize::MAX, *cursor)
            }
            CallbackRequest::ReferenceVector { since_ns, until_ns, max, cursor } => {
                pairs_page(pool, *since_ns..=*until_ns, usize::try_from(*max).unwrap_or(usize::MAX), *cursor)
            }
            _ => CallbackReply { status: abi::ERR_UNSUPPORTED, result: CallbackResult::Nothing },
        }
    }
}

/// Bytes of pairs after which a page of `iterate` or a reference vector ends (at the next step):
/// a page crosses the ring to the host as one message, and is walked in one turn of the shard.
const PAIRS_PAGE_BYTES: usize = 1 << 20;

/// Bytes a page may not pass, whatever its last step found (a step of long keys): well under a
/// ring message. A step that would pass it fails the walk with `FERRITE_ERR_NO_SPACE`.
const PAIRS_PAGE_BYTES_MAX: usize = 3 << 20;

/// Bytes a pair costs in a page besides its key: its value's place and its write time.
const PAIR_RECORD_BYTES: usize = 32;

/// Home buckets walked per step while collecting a page: a page ends only between steps, so the
/// next one resumes exactly where it left off.
const PAIRS_SCAN_STEP: u64 = 64;

/// A page of the pairs of `pool` written within `written`, from the scan `cursor` (0 to start),
/// with their values' places, for a plugin to read: not locked, so another client may change them
/// meanwhile, and a key may come twice if the table grows between pages. The page ends after
/// `max` pairs or about [`PAIRS_PAGE_BYTES`]; its `next` cursor is 0 at the end of the pool.
fn pairs_page(
    pool: &crate::pools::Pool,
    written: std::ops::RangeInclusive<u64>,
    max: usize,
    cursor: u64,
) -> CallbackReply {
    let store = pool.store.as_ref();
    let mut pairs = Vec::new();
    let mut bytes = 0;
    let mut next = cursor;
    loop {
        next = store.scan(next, PAIRS_SCAN_STEP, &mut |key| {
            let (Some(value), Some(attributes)) = (store.value_location(key), store.attributes(key)) else { return };
            if written.contains(&attributes.write_time_ns) {
                bytes += key.len() + PAIR_RECORD_BYTES;
                pairs.push(PairRecord {
                    key: key.to_vec(),
                    value: Location { offset: value.offset, len: value.len },
                    write_time_ns: attributes.write_time_ns,
                });
            }
        });
        if bytes > PAIRS_PAGE_BYTES_MAX {
            return CallbackReply { status: abi::ERR_NO_SPACE, result: CallbackResult::Nothing };
        }
        if next == 0 || bytes >= PAIRS_PAGE_BYTES || pairs.len() >= max {
            return CallbackReply { status: abi::OK, result: CallbackResult::Pairs { pairs, next } };
        }
    }
}
