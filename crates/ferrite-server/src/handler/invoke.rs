//! The shard's side of a plugin call (`invoke_ado`, `invoke_put_ado`): preparing the target value,
//! holding its key, submitting the pool's calls to its host and taking what the host sends. The
//! rest of a call's life is beside this module: the callbacks that read the pool
//! (`invoke_reads`) and those that change keys and memory (`invoke_keys`), the commit or undo of
//! a finished call (`invoke_commit`), and the hosts themselves (`invoke_hosts`).
//!
//! Durability and containment, step by step (see `docs/plugins.md`, "Running plugins on a
//! server"):
//! - A plugin never writes pool memory that anything else refers to. A call that may write its
//!   value works on a copy in scratch memory: whole pages nothing else shares, which its host
//!   (whose view of the pool is read-only) may write while the call runs. A value kept out of
//!   line is copied by the host itself, so the shard never copies a large value on its thread;
//!   a small value kept inside its index entry (which other inserts may move) by the shard. A
//!   read-only call reads a value kept out of line in place (it stays put while its key is
//!   held).
//! - A successful call's declared ranges are applied by the shard, in one store transaction
//!   with the call's other changes: copied onto the value kept out of line, or the value put
//!   back with them applied. Its record holds exactly the declared bytes; with `sync`, the
//!   answer leaves once it is durable.
//! - A value the call gives its key (`invoke_put_ado`'s, or one created on demand) is such a
//!   copy too, staged as the key's change: a successful call stores it in the transaction that
//!   holds its other changes, a failed one drops it, and the key stays as it was.
//! - A failed, crashed or timed-out call, or one whose changes the pool or the log refuses when
//!   it ends, changed nothing: its copies are dropped, whatever its host has done since.
//! - A crash of the server mid-call loses nothing acknowledged: the call's changes were never
//!   logged, and recovery rebuilds the pool from the log.

use std::sync::Arc;

use bytes::BytesMut;
use ferrite_ado::message::{CallId, CallbackRequest, Invocation, Location};
use ferrite_ado::{FailReason, LinkEvent};
use ferrite_plugin::abi;
use ferrite_proto::{ErrorCode, InvokeFlags, Opcode, PoolHandle, Request};
use ferrite_store::{Store, WriteFootprint};

use super::{key_not_found, open_pool, Failure, ShardState};
use crate::ado::{
    Answer, Call, CopyOf, HeldAnswer, NewValue, Running, Signals, StagedAllocation, StagedKey, Target,
    CALLS_IN_FLIGHT_MAX,
};
use crate::completion::Completion;
use crate::session::Session;
use crate::stats::Op;

/// An invocation as the shard runs it, whichever message carried it.
#[derive(Debug, Clone)]
pub(crate) struct Invoke<'a> {
    pub answer: Answer,
    pub pool: PoolHandle,
    /// Empty: the call targets the pool itself.
    pub key: &'a [u8],
    pub payload: &'a [u8],
    /// `invoke_put_ado`'s value, stored before the call.
    pub value: Option<&'a [u8]>,
    /// `invoke_ado` with create-on-demand: the size of the zeroed value created if the key is absent.
    pub create_size: Option<u64>,
    pub read_only: bool,
    pub no_overwrite: bool,
    pub detached: bool,
    pub fire_and_forget: bool,
}

impl<'a> Invoke<'a> {
    /// The invocation a request carries, if it is one.
    pub(crate) fn of(request: &Request<'a>, request_id: u64) -> Option<Invoke<'a>> {
        let fire_and_forget = |flags: InvokeFlags| flags.contains(InvokeFlags::FIRE_AND_FORGET);
        Some(match *request {
            Request::InvokeAdo { pool, flags, key, payload, value_size } => Invoke {
                answer: Answer::Native { opcode: Opcode::InvokeAdo, request_id },
                pool,
                key,
                payload,
                value: None,
                create_size: flags.contains(InvokeFlags::CREATE_ON_DEMAND).then_some(value_size),
                read_only: flags.contains(InvokeFlags::READ_ONLY),
                no_overwrite: false,
                detached: false,
                fire_and_forget: fire_and_forget(flags),
            },
            Request::InvokePutAdo { pool, flags, key, value, payload } => Invoke {
                answer: Answer::Native { opcode: Opcode::InvokePutAdo, request_id },
                pool,
                key,
                payload,
                value: Some(value),
                create_size: None,
                read_only: false,
                no_overwrite: flags.contains(InvokeFlags::NO_OVERWRITE),
                detached: flags.contains(InvokeFlags::DETACHED),
                fire_and_forget: fire_and_forget(flags),
            },
            _ => return None,
        })
    }
}

/// Why [`scratch_copy`] gave no memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ScratchRefused {
    /// The pool has no room for it.
    NoRoom,
    /// The memory could not be written (the backing lends none).
    Unwritable,
}

/// Scratch memory of `len` bytes in `store` (whole pages of its own) holding `bytes` then zeros
/// (`len` is at least `bytes.len()`): where a call's plugins get a copy to work on. Freed again
/// if it cannot be written.
pub(super) fn scratch_copy(store: &mut dyn Store, bytes: &[u8], len: u64) -> Result<u64, ScratchRefused> {
    let offset = store.allocate_scratch(len).ok_or(ScratchRefused::NoRoom)?;
    let written = if bytes.len() as u64 == len {
        store.write_scratch(offset, bytes)
    } else {
        let mut filled = vec![0; len as usize];
        filled[..bytes.len()].copy_from_slice(bytes);
        store.write_scratch(offset, &filled)
    };
    if !written {
        store.free_scratch(offset, len);
        return Err(ScratchRefused::Unwritable);
    }
    Ok(offset)
}

/// What a callback answers when it got no scratch memory.
pub(super) fn refused_status(refused: ScratchRefused) -> i32 {
    match refused {
        ScratchRefused::NoRoom => abi::ERR_NO_SPACE,
        ScratchRefused::Unwritable => abi::ERR_FAILED,
    }
}

/// The failure of a call that got no scratch memory for `what`.
fn scratch_failure(pool: &str, refused: ScratchRefused, what: &str) -> Failure {
    match refused {
        ScratchRefused::NoRoom => Failure::new(ErrorCode::PoolFull, format!("pool '{pool}': no room for {what}")),
        ScratchRefused::Unwritable => Failure::new(ErrorCode::Internal, format!("pool '{pool}': cannot write {what}")),
    }
}

/// A call submitted to its host, with what the shard keeps for it.
struct Begun {
    id: CallId,
    target: Target,
    /// `invoke_put_ado`'s detached value, in memory the call allocated.
    detached: Option<StagedAllocation>,
}

/// How the shard took an invocation (or a request on a key a call holds).
#[derive(Debug)]
pub(crate) enum Accepted {
    /// The answer comes later, through this completion.
    Later(Arc<Completion>),
    /// A call holds the request's key: run the request again once this completes.
    Blocked(Arc<Completion>),
}

impl ShardState {
    /// Takes an invocation: checks it, notes the value it gives its key (`invoke_put_ado`'s, or
    /// one created on demand; stored only if the call succeeds), and queues the call on the
    /// pool's host (starting it if need be).
    pub(crate) fn invoke(&mut self, invoke: Invoke<'_>, session: &mut Session) -> Result<Accepted, Failure> {
        self.count_pool_request(Some(invoke.pool), Op::Invoke);
        let pool = open_pool(&self.pools, session, invoke.pool)?;
        if pool.plugin_chain.is_empty() {
            return Err(Failure::new(
                ErrorCode::InvalidArgument,
                format!("pool '{}' has no plugins: give it a chain when it is created (--plugins)", pool.name),
            ));
        }
        if pool.persisted.is_none() {
            return Err(Failure::new(
                ErrorCode::InvalidArgument,
                format!(
                    "pool '{}': plugins run on pools of the ssd backing, whose memory a plugin host can map",
                    pool.name
                ),
            ));
        }
        let sync = !pool.async_default;
        // A call on a held key queues behind the calls holding it, which keeps their order; one
        // that must store its value first (`invoke_put_ado`) waits for them, as a put would.
        if invoke.value.is_some() {
            let own_reads = session.transfers.reads_of(invoke.pool, invoke.key);
            if let Some(waiting) = self.wait_for_key(invoke.pool, invoke.key, true, own_reads) {
                return Ok(Accepted::Blocked(waiting));
            }
        } else if !invoke.read_only && !invoke.key.is_empty() && self.direct_reads.holds_any(invoke.pool) {
            // A call that may write its value in place waits for other sessions' direct reads of
            // it, as a put does, so a direct read never sees a value half changed.
            let own_reads = session.transfers.reads_of(invoke.pool, invoke.key);
            if self.direct_reads.holders(invoke.pool, invoke.key) > own_reads {
                if let Some(waiting) = self.direct_reads.wait_for(invoke.pool, invoke.key) {
                    return Ok(Accepted::Blocked(waiting));
                }
            }
        }
        // The call reads the pool's state: its answer waits for what it read to be durable.
        self.reading(session);
        let new_value = if invoke.key.is_empty() { None } else { self.new_value(&invoke, session)? };
        let mut work_flags = 0;
        for (set, flag) in [
            (invoke.read_only, abi::WORK_READ_ONLY),
            (invoke.key.is_empty(), abi::WORK_POOL),
            (invoke.detached, abi::WORK_DETACHED),
        ] {
            if set {
                work_flags |= flag;
            }
        }
        let completion = Completion::telling(session.answers.clone(), Op::Invoke);
        let caller = if invoke.fire_and_forget {
            completion.complete(session.wait_lsn, |out| invoke.answer.success(&[], out));
            None
        } else {
            Some(Arc::clone(&completion))
        };
        let call = Call {
            answer: invoke.answer,
            key: invoke.key.to_vec(),
            key_hash: crate::ado::key_hash(invoke.key),
            payload: invoke.payload.to_vec(),
            work_flags,
            sync,
            wait_lsn: session.wait_lsn,
            completion: caller,
            detached: invoke.value.filter(|_| invoke.detached).map(<[u8]>::to_vec),
            new_value,
        };
        self.stats.invocations += 1;
        self.enqueue(invoke.pool, call)?;
        Ok(Accepted::Later(completion))
    }

    /// The signal `request` makes (`[ado] signals`), if it makes one.
    pub(crate) fn signal_of(&self, request: &Request<'_>, session: &Session) -> Option<Signals> {
        let (pool, key, signal) = match *request {
            Request::Put { pool, key, .. } => (pool, key, "post-put"),
            Request::Get { pool, key } => (pool, key, "post-get"),
            Request::Erase { pool, key } => (pool, key, "post-erase"),
            _ => return None,
        };
        let open = open_pool(&self.pools, session, pool).ok()?;
        let signalled = !open.plugin_chain.is_empty() && open.persisted.is_some() && self.ado.limits.signals(signal);
        signalled.then(|| Signals { pool, keys: vec![key.to_vec()], signal })
    }

    /// Signals a request that succeeded with the answer `held` to its pool's chain: a read-only
    /// call on each of its keys, with the payload `ADO::Signal::<signal>`. The answer leaves once
    /// the chain has handled every one of them. The pool's host runs already
    /// ([`Self::ensure_host`]).
    pub(crate) fn signal(&mut self, signals: Signals, held: BytesMut, session: &Session) -> Arc<Completion> {
        let op = match signals.signal {
            "post-put" => Op::Put,
            "post-get" => Op::Get,
            "post-erase" => Op::Erase,
            _ => Op::Other,
        };
        let completion = Completion::telling(session.answers.clone(), op);
        let answer = Answer::Held(Arc::new(HeldAnswer::new(held, signals.keys.len())));
        for key in signals.keys {
            let call = Call {
                answer: answer.clone(),
                key_hash: crate::ado::key_hash(&key),
                key,
                payload: format!("ADO::Signal::{}", signals.signal).into_bytes(),
                work_flags: abi::WORK_SIGNAL | abi::WORK_READ_ONLY,
                sync: false,
                wait_lsn: session.wait_lsn,
                completion: Some(Arc::clone(&completion)),
                detached: None,
                new_value: None,
            };
            self.queue(signals.pool, call);
        }
        completion
    }

    /// If a plugin call holds `key` of `pool` against a request that `writes` (or reads): a
    /// completion woken when a call of the pool ends, for the request to run again then.
    pub(crate) fn wait_for_key(
        &mut self,
        pool: PoolHandle,
        key: &[u8],
        writes: bool,
        own_reads: u32,
    ) -> Option<Arc<Completion>> {
        // A write waits for other sessions' direct reads of the key.
        if writes && self.direct_reads.holds_any(pool) && self.direct_reads.holders(pool, key) > own_reads {
            if let Some(waiting) = self.direct_reads.wait_for(pool, key) {
                return Some(waiting);
            }
        }
        let calls = self.calls.get_mut(&pool)?;
        if key.is_empty() || !calls.holds(key, writes) {
            return None;
        }
        let waiting = Completion::new();
        calls.waiters.push(Arc::clone(&waiting));
        Some(waiting)
    }

    /// The value the call gives its key before its plugins run, if any: `invoke_put_ado`'s, or
    /// a zeroed one created on demand (an empty one for a detached value). Nothing is stored
    /// now: the call stages it when it begins and stores it only if it succeeds (see
    /// [`NewValue`]). Checked here so that a value the pool cannot take is refused at once.
    fn new_value(&mut self, invoke: &Invoke<'_>, session: &mut Session) -> Result<Option<NewValue>, Failure> {
        let new_value = match (invoke.value, invoke.detached) {
            (Some(value), false) => NewValue::Put { value: value.to_vec(), keep_existing: invoke.no_overwrite },
            (Some(_), true) => NewValue::IfAbsent { len: 0 },
            (None, _) => {
                // Without create-on-demand the key must exist: the call finds out as it begins,
                // unless its caller is answered now (fire-and-forget).
                if invoke.create_size.is_none() && !invoke.fire_and_forget {
                    return Ok(None);
                }
                let pool = open_pool(&self.pools, session, invoke.pool)?;
                if pool.store.get(invoke.key).is_some() {
                    return Ok(None);
                }
                let Some(size) = invoke.create_size else { return Err(key_not_found(pool)) };
                if size > u64::from(self.limits.value_bytes_max) {
                    return Err(Failure::new(
                        ErrorCode::ValueTooLarge,
                        format!("a value of {size} bytes exceeds the limit of {}", self.limits.value_bytes_max),
                    ));
                }
                NewValue::IfAbsent { len: size }
            }
        };
        let len = match &new_value {
            NewValue::Put { value, .. } => value.len() as u64,
            NewValue::IfAbsent { len } => *len,
        };
        let footprint = open_pool(&self.pools, session, invoke.pool)?.store.put_footprint(invoke.key.len() as u64, len);
        self.admit_write(footprint)?;
        Ok(Some(new_value))
    }

    /// Queues `call` on its pool's host, starting the host first if the pool has none.
    fn enqueue(&mut self, pool: PoolHandle, call: Call) -> Result<(), Failure> {
        self.ensure_host(pool)?;
        self.queue(pool, call);
        Ok(())
    }

    /// Queues `call` on `pool`'s running host, for [`Self::submit_calls`].
    fn queue(&mut self, pool: PoolHandle, call: Call) {
        let calls = self.calls.get_mut(&pool).expect("the pool's host runs");
        calls.push_queued(call);
        if !self.to_submit.contains(&pool) {
            self.to_submit.push(pool);
        }
    }

    /// After a connection answered its batch of requests: the calls it queued are submitted
    /// once every connection ready in this turn of the shard's loop has answered its own (the
    /// submitting task runs after them), so the host takes all of them in one batch and one
    /// wake-up. A lone call waits only for the end of its own turn.
    pub(crate) fn submit_soon(&mut self) {
        if !self.to_submit.is_empty() {
            self.calls_queued.notify_one();
        }
    }

    /// Submits the calls queued since the last submission.
    pub(crate) fn submit_calls(&mut self) {
        for pool in std::mem::take(&mut self.to_submit) {
            self.start_next(pool);
        }
    }

    /// Submits queued calls of `pool` while fewer than [`CALLS_IN_FLIGHT_MAX`] run, each the
    /// first queued on a key no running call holds (calls on one key keep their order); calls
    /// that cannot start are answered with their failure.
    pub(super) fn start_next(&mut self, pool: PoolHandle) {
        let Some(calls) = self.calls.get_mut(&pool) else { return };
        calls.link.begin_batch();
        let started = self.submit_queued(pool);
        if let Some(calls) = self.calls.get_mut(&pool) {
            if started {
                // The pool's task looks at the host's ring once the batch started (told below),
                // so the host need not wake the shard for the answers it has by then.
                calls.link.will_poll();
            }
            calls.link.end_batch();
            if started {
                calls.call_started.notify_one();
            }
        }
    }

    /// Submits what [`Self::start_next`] may; true if it submitted any call.
    fn submit_queued(&mut self, pool: PoolHandle) -> bool {
        let mut started = false;
        loop {
            let Some(calls) = self.calls.get_mut(&pool) else { return started };
            if calls.running().len() >= CALLS_IN_FLIGHT_MAX {
                return started;
            }
            let Some(mut call) = calls.take_startable() else {
                if calls.queued() == 0 && calls.running().is_empty() {
                    self.stop_idle_host(pool);
                }
                return started;
            };
            match self.begin(pool, &mut call) {
                Ok(Begun { id, target, detached }) => {
                    let calls = self.calls.get_mut(&pool).expect("the pool's calls exist");
                    let mut running = Running::new(id, call, target);
                    running.allocated.extend(detached);
                    if let Target::Copy { of: CopyOf::Given, .. } = target {
                        // Stored as the key's value if the call succeeds, with its other changes.
                        let key = running.call.key.clone();
                        running.staged.push(StagedKey { key, value: Some(target.location()) });
                    }
                    calls.push_running(running);
                    started = true;
                }
                Err(failure) => self.answer_failure(&call, failure),
            }
        }
    }

    /// Gives `call` its target (checking the log has room for what it may write) and its
    /// detached value (in memory it allocates), and submits it to the host, which takes its
    /// payload.
    fn begin(&mut self, handle: PoolHandle, call: &mut Call) -> Result<Begun, Failure> {
        // `Some(key is new)` when the target is a value the call gives its key; `source` is the
        // value the host copies into the target.
        let (target, given, source) = self.target(handle, call)?;
        let detached = match &call.detached {
            Some(value) => match self.allocate_for_call(handle, value, value.len() as u64, 1) {
                Ok(allocation) => Some(allocation),
                Err(_) => {
                    self.release(handle, target);
                    return Err(Failure::new(
                        ErrorCode::PoolFull,
                        format!("pool '{}': no room for the detached value", self.pool_name(handle)),
                    ));
                }
            },
            None => None,
        };
        let invocation = Invocation {
            flags: call.work_flags | if given == Some(true) { abi::WORK_NEW_KEY } else { 0 },
            pool_id: handle.0,
            key: call.key.clone(),
            payload: std::mem::take(&mut call.payload),
            value: target.location(),
            source,
            detached: detached.map_or_else(Location::default, |allocation| Location {
                offset: allocation.id,
                len: call.detached.as_ref().map_or(0, |value| value.len() as u64),
            }),
        };
        let calls = self.calls.get_mut(&handle).expect("the pool's calls exist");
        let submitted = match calls.link.submit(&invocation) {
            Err(ferrite_ado::SubmitError::HostDown) => {
                // The host exited since the last call (a crash between calls): start another.
                calls
                    .link
                    .restart()
                    .map_err(|error| error.to_string())
                    .and_then(|()| calls.link.submit(&invocation).map_err(|error| error.to_string()))
            }
            other => other.map_err(|error| error.to_string()),
        };
        match submitted {
            Ok(id) => Ok(Begun { id, target, detached }),
            Err(reason) => {
                self.release(handle, target);
                if let Some(allocation) = detached {
                    self.release_lent(handle, &[allocation.memory]);
                }
                Err(Failure::new(
                    ErrorCode::AdoFailed,
                    format!("pool '{}': its plugin host cannot take the call: {reason}", self.pool_name(handle)),
                ))
            }
        }
    }

    /// The memory `call`'s plugin works on: the value the call gives its key (see [`NewValue`])
    /// as a copy in scratch memory, with whether the key is new; else, for a call that may write
    /// its value, a copy of it in scratch memory (filled by the host from the place returned
    /// last, for a value kept out of line); else (a read-only call) the value in place if it
    /// stays put, or a copy. A call that may write is checked to have log room for its record.
    fn target(&mut self, handle: PoolHandle, call: &Call) -> Result<(Target, Option<bool>, Location), Failure> {
        let none = Location::default();
        if call.key.is_empty() {
            return Ok((Target::InPlace(none), None, none));
        }
        let pool = self.pools.get(handle).expect("a pool with calls exists");
        let existing = pool.store.value_location(&call.key);
        if let Some(given) = self.give_new_value(handle, call, existing.is_some())? {
            return Ok((Target::Copy { copy: given, of: CopyOf::Given }, Some(existing.is_none()), none));
        }
        let pool = self.pools.get(handle).expect("a pool with calls exists");
        let value = match existing {
            Some(value) => value,
            // A post-erase signal: the key is gone, the plugin is told of it without a value.
            None if call.work_flags & abi::WORK_SIGNAL != 0 => return Ok((Target::InPlace(none), None, none)),
            None => return Err(key_not_found(pool)),
        };
        let location = Location { offset: value.offset, len: value.len };
        let writes = call.work_flags & abi::WORK_READ_ONLY == 0 && value.len > 0;
        if value.len == 0 || (value.stable && !writes) {
            return Ok((Target::InPlace(location), None, none));
        }
        if writes {
            let footprint = if value.stable {
                WriteFootprint { bytes: value.len, ranges: 1 }
            } else {
                pool.store.update_footprint(call.key.len() as u64, value.len)
            };
            self.admit_write(footprint)?;
        }
        let pool = self.pools.get_mut(handle).expect("a pool with calls exists");
        if value.stable {
            // The host fills the copy: a value kept out of line may be large.
            let offset = pool
                .store
                .allocate_scratch(value.len)
                .ok_or_else(|| scratch_failure(&pool.name, ScratchRefused::NoRoom, "the plugin's copy of the value"))?;
            let copy = Location { offset, len: value.len };
            return Ok((Target::Copy { copy, of: CopyOf::Value(location) }, None, location));
        }
        let bytes = pool.store.region_bytes(value.offset, value.len).ok_or_else(|| key_not_found(pool))?.to_vec();
        let offset = scratch_copy(pool.store.as_mut(), &bytes, value.len)
            .map_err(|refused| scratch_failure(&pool.name, refused, "the plugin's copy of the value"))?;
        Ok((Target::Copy { copy: Location { offset, len: value.len }, of: CopyOf::Entry }, None, none))
    }

    /// The value `call` gives its key, if it gives one now that the key `exists` or not, written
    /// into scratch memory: where the plugins work on it, and what the call stages as the key's
    /// change.
    fn give_new_value(&mut self, handle: PoolHandle, call: &Call, exists: bool) -> Result<Option<Location>, Failure> {
        let (bytes, len): (&[u8], u64) = match &call.new_value {
            Some(NewValue::Put { value, keep_existing }) if !(exists && *keep_existing) => (value, value.len() as u64),
            Some(NewValue::IfAbsent { len }) if !exists => (&[], *len),
            _ => return Ok(None),
        };
        let pool = self.pools.get(handle).expect("a pool with calls exists");
        self.admit_write(pool.store.put_footprint(call.key.len() as u64, len))?;
        let pool = self.pools.get_mut(handle).expect("a pool with calls exists");
        let offset = scratch_copy(pool.store.as_mut(), bytes, len)
            .map_err(|refused| scratch_failure(&pool.name, refused, "the call's new value"))?;
        Ok(Some(Location { offset, len }))
    }

    /// Frees a call's copy of its value.
    pub(super) fn release(&mut self, handle: PoolHandle, target: Target) {
        if let (Some(copy), Some(pool)) = (target.copy(), self.pools.get_mut(handle)) {
            pool.store.free_scratch(copy.offset, copy.len);
        }
    }

    /// Frees the copies lent for keys a call opened (their read locks end with the call).
    pub(super) fn release_opened(&mut self, handle: PoolHandle, opened: &[(Vec<u8>, Option<Location>)]) {
        if let Some(pool) = self.pools.get_mut(handle) {
            for copy in opened.iter().filter_map(|(_, copy)| *copy) {
                pool.store.free_scratch(copy.offset, copy.len);
            }
        }
    }

    pub(super) fn plugin_event(&mut self, pool: PoolHandle, event: LinkEvent) {
        if let LinkEvent::Done(done) = event {
            if let Some(running) = self.take_running(pool, done.call) {
                self.finish(pool, running, done);
            }
            return;
        }
        let name = self.pool_name(pool);
        match event {
            LinkEvent::Failed { call, reason } => {
                if let Some(running) = self.take_running(pool, call) {
                    // Nothing of the call reached the store: its copies are dropped.
                    self.release(pool, running.target);
                    self.release_opened(pool, &running.opened);
                    self.release_lent(pool, &running.lent);
                    self.release_allocated(pool, &running.allocated);
                    let failure = match reason {
                        FailReason::Timeout => Failure::new(
                            ErrorCode::AdoTimeout,
                            format!("pool '{name}': the plugin call passed its deadline; its host was stopped and the call undone"),
                        ),
                        FailReason::Crashed(status) => Failure::new(
                            ErrorCode::AdoFailed,
                            format!("pool '{name}': the plugin host died during the call ({status}); the call was undone"),
                        ),
                        FailReason::Protocol(reason) => Failure::new(
                            ErrorCode::AdoFailed,
                            format!("pool '{name}': the plugin host misbehaved ({reason}); the call was undone"),
                        ),
                        _ => Failure::new(ErrorCode::AdoFailed, format!("pool '{name}': the plugin call failed")),
                    };
                    self.stats.invocation_failures += 1;
                    self.answer_failure(&running.call, failure);
                    self.call_ended(pool);
                }
            }
            LinkEvent::HostExited { status } => {
                tracing::info!(shard = self.index, pool = %name, %status, "plugin host exited");
            }
            LinkEvent::Callback { call, request } => {
                let reply = match request {
                    CallbackRequest::OpenKey { key, read_only: true } => self.open_key(pool, call, key),
                    CallbackRequest::Unlock { key } => self.unlock(pool, call, &key),
                    request @ (CallbackRequest::CreateKey { .. }
                    | CallbackRequest::OpenKey { read_only: false, .. }
                    | CallbackRequest::EraseKey { .. }
                    | CallbackRequest::ResizeValue { .. }
                    | CallbackRequest::AllocateMemory { .. }
                    | CallbackRequest::FreeMemory { .. }
                    | CallbackRequest::FindKey { .. }) => self.key_callback(pool, call, request),
                    request => self.callback(pool, &request),
                };
                if let Some(calls) = self.calls.get_mut(&pool) {
                    if let Err(error) = calls.link.answer(call, reply) {
                        tracing::warn!(shard = self.index, pool = %name, %error, "cannot answer a plugin's callback");
                    }
                }
            }
            LinkEvent::Log { level, text } => match level {
                abi::LOG_ERROR => tracing::error!(shard = self.index, pool = %name, "plugin: {text}"),
                abi::LOG_WARN => tracing::warn!(shard = self.index, pool = %name, "plugin: {text}"),
                abi::LOG_INFO => tracing::info!(shard = self.index, pool = %name, "plugin: {text}"),
                _ => tracing::debug!(shard = self.index, pool = %name, "plugin: {text}"),
            },
            LinkEvent::Undeclared { call, ranges } => {
                tracing::error!(shard = self.index, pool = %name, call = call.0, ?ranges, "a plugin wrote pool memory it had not declared");
            }
            _ => {}
        }
    }

    /// The pool's name, for messages (empty if it is gone).
    pub(super) fn pool_name(&self, pool: PoolHandle) -> String {
        self.pools.get(pool).map_or_else(String::new, |pool| pool.name.clone())
    }

    fn take_running(&mut self, pool: PoolHandle, id: CallId) -> Option<Running> {
        self.calls.get_mut(&pool)?.take_running(id)
    }

    /// After a call ended: the requests waiting for its key run again, and the next call starts.
    pub(super) fn call_ended(&mut self, pool: PoolHandle) {
        let Some(calls) = self.calls.get_mut(&pool) else { return };
        calls.wake_waiters();
        if calls.queued() == 0 {
            // Nothing to start; the host may now be idle and its pool closed.
            self.start_next(pool);
            return;
        }
        // The queued calls that can start now start together, once every answer the host sent
        // is taken: a batch per wake-up of the host rather than a call per answer.
        if !self.to_submit.contains(&pool) {
            self.to_submit.push(pool);
        }
        self.calls_queued.notify_one();
    }

    pub(super) fn answer_failure(&mut self, call: &Call, failure: Failure) {
        self.stats.failures += 1;
        if let Some(completion) = call.completion.as_ref().filter(|_| call.answer.settles()) {
            completion.complete(call.wait_lsn, |out| call.answer.failure(failure.code, &failure.message, out));
        }
    }
}
