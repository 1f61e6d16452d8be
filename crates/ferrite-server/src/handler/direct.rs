//! Direct transfers: values larger than a frame, moved in pieces between a client and pool memory
//! (MCAS `put_direct`, `get_direct` and their offset forms).
//!
//! A transfer is opened by `put_direct` or `get_direct` under an id the client chooses (unique in
//! its session), fed or drained by `direct_write` / `direct_read` pieces of at most the inline
//! value limit, and closed by `end_transfer`. Each piece is one request: bounded work in one loop
//! turn, so the shard serves every other client between the pieces of a 1 GiB value, and a client
//! pipelines a whole transfer in one round trip.
//!
//! - A direct put stages its value in pool memory ([`Store::stage_value`]), where each piece is
//!   logged as it lands; nothing points at the staged bytes until `end_transfer` commits them as
//!   the key's value with one small record, so a reader sees the old value or the new one, and a
//!   crash before the commit leaves the old one (the staged bytes are free memory on restart).
//! - A direct read holds its key for the transfer's life: writers of the key from other sessions
//!   wait ([`DirectReads`]), so every piece comes from one value. A session's own writes do not
//!   wait for its own reads (they would wait forever); it sees what it wrote.
//! - A session's transfers end with it: an uncommitted put is dropped, a read released.
//!
//! [`Store::stage_value`]: ferrite_store::Store::stage_value

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrite_auth::Rights;
use ferrite_proto::{Durability, EndTransferFlags, ErrorCode, PoolHandle, ProtocolError, PutFlags, Request, Response};
use ferrite_store::{PutMode, PutOutcome, StagedValue, StoreError};
use foldhash::HashMap;

use super::{open_pool, open_pool_mut, put_mode, store_failure, Failure, ShardState};
use crate::completion::Completion;
use crate::session::Session;

/// A direct put's piece: the bytes of a request, or the length of bytes the connection read into
/// the staged value's memory already ([`ShardState::staged_piece_mut`]).
#[derive(Debug, Clone, Copy)]
pub(super) enum Piece<'a> {
    Bytes(&'a [u8]),
    InPlace(u64),
}

impl Piece<'_> {
    fn len(&self) -> u64 {
        match *self {
            Piece::Bytes(bytes) => bytes.len() as u64,
            Piece::InPlace(len) => len,
        }
    }
}

/// A direct put's piece at least this long that has not all arrived is read from the socket
/// straight into the staged value's pool memory ([`ShardState::staged_piece_mut`]) rather than
/// into the connection's read buffer and copied from there: a native piece whose frame is still
/// coming, a RESP `SET`'s long value. Shorter ones gain nothing worth a turn of the loop per read.
pub(crate) const IN_PLACE_PIECE_BYTES_MIN: usize = 64 * 1024;

/// Most transfers one session may have open at once: each holds a staged value or a key.
pub(crate) const TRANSFERS_PER_SESSION_MAX: usize = 64;

/// A session's open transfers, by the ids its client chose.
#[derive(Debug, Default)]
pub(crate) struct Transfers {
    open: HashMap<u64, Transfer>,
}

#[derive(Debug)]
enum Transfer {
    Put(PutTransfer),
    Read(ReadTransfer),
}

#[derive(Debug)]
struct PutTransfer {
    pool: PoolHandle,
    key: Box<[u8]>,
    flags: PutFlags,
    staged: StagedValue,
    /// Bytes received so far: pieces come in order.
    written: u64,
}

#[derive(Debug)]
struct ReadTransfer {
    pool: PoolHandle,
    key: Box<[u8]>,
    length: u64,
    /// The hold on the key this read shares ([`DirectReads`]); a hold broken for idleness is
    /// gone, and a later one has another number.
    hold: u64,
}

impl Transfers {
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Whether a direct put of this session is staging a value (which holds room in its pool).
    pub fn stages_any(&self) -> bool {
        !self.open.is_empty() && self.open.values().any(|transfer| matches!(transfer, Transfer::Put(_)))
    }

    /// How many of this session's direct reads hold `key` of `pool`.
    pub fn reads_of(&self, pool: PoolHandle, key: &[u8]) -> u32 {
        if self.open.is_empty() {
            return 0;
        }
        let holds =
            |transfer: &Transfer| matches!(transfer, Transfer::Read(read) if read.pool == pool && *read.key == *key);
        self.open.values().filter(|transfer| holds(transfer)).count() as u32
    }

    /// The pool and key a commit of direct put `transfer` would write, if it is one.
    pub fn put_target(&self, transfer: u64) -> Option<(PoolHandle, &[u8])> {
        match self.open.get(&transfer)? {
            Transfer::Put(put) => Some((put.pool, &put.key)),
            Transfer::Read(_) => None,
        }
    }

    /// The transfer a piece or an end names, its pool and the right the request needs there:
    /// `write` for a direct put's pieces and commit, `read` for a direct read's pieces. Ending
    /// a read or aborting a put needs none (it only gives back what the transfer holds); `None`
    /// too for a request on a transfer that is not open or of the other kind, which fails where
    /// it runs.
    pub fn right_needed(&self, request: &Request<'_>) -> Option<(u64, PoolHandle, Rights)> {
        let (transfer, put_needs, read_needs) = match *request {
            Request::DirectWrite { transfer, .. } => (transfer, Some(Rights::WRITE), None),
            Request::DirectRead { transfer, .. } => (transfer, None, Some(Rights::READ)),
            Request::EndTransfer { transfer, flags } if !flags.aborts() => (transfer, Some(Rights::WRITE), None),
            _ => return None,
        };
        match self.open.get(&transfer)? {
            Transfer::Put(put) => put_needs.map(|needed| (transfer, put.pool, needed)),
            Transfer::Read(read) => read_needs.map(|needed| (transfer, read.pool, needed)),
        }
    }
}

/// The keys that open direct reads hold, across the shard's sessions, and the requests waiting
/// for one of them to be released.
///
/// A hold that has seen no piece read for `idle_max` while a writer waits is broken: the writer
/// goes ahead and the reads that shared it fail their next piece. So a client that opens a direct
/// read and stops reading holds the key's writers back for `idle_max` at most, not for ever.
#[derive(Debug)]
pub(crate) struct DirectReads {
    held: HashMap<PoolHandle, HashMap<Box<[u8]>, Hold>>,
    waiters: Vec<Arc<Completion>>,
    idle_max: Duration,
    /// Numbers the holds, so a read of a broken hold never releases a later one.
    holds_made: u64,
}

#[derive(Debug, Clone, Copy)]
struct Hold {
    readers: u32,
    last_read: Instant,
    number: u64,
}

impl DirectReads {
    pub fn new(idle_max: Duration) -> DirectReads {
        DirectReads { held: HashMap::default(), waiters: Vec::new(), idle_max, holds_made: 0 }
    }

    /// How many direct reads hold `key` of `pool`.
    pub fn holders(&self, pool: PoolHandle, key: &[u8]) -> u32 {
        self.held.get(&pool).and_then(|keys| keys.get(key)).map_or(0, |hold| hold.readers)
    }

    /// Whether any key of `pool` is held: lets the hot paths skip the lookup.
    pub fn holds_any(&self, pool: PoolHandle) -> bool {
        self.held.contains_key(&pool)
    }

    /// For a writer of `key` that other sessions' direct reads hold: a completion woken when the
    /// hold is released or has been idle for `idle_max` (the writer then runs again and finds it
    /// broken), or `None` if it is idle already, in which case it is broken now and the writer
    /// goes ahead.
    pub fn wait_for(&mut self, pool: PoolHandle, key: &[u8]) -> Option<Arc<Completion>> {
        let hold = *self.held.get(&pool)?.get(key)?;
        let idle_until = hold.last_read + self.idle_max;
        if Instant::now() >= idle_until {
            tracing::warn!(pool = pool.0, "a direct read idle for {:?} no longer holds its key", self.idle_max);
            self.remove(pool, key);
            return None;
        }
        let waiting = Completion::new();
        self.waiters.push(Arc::clone(&waiting));
        let timer = Arc::clone(&waiting);
        tokio::task::spawn_local(async move {
            tokio::time::sleep_until(idle_until.into()).await;
            timer.wake();
        });
        Some(waiting)
    }

    /// Joins the hold on `key` (making one if there is none) and returns its number.
    fn hold(&mut self, pool: PoolHandle, key: &[u8]) -> u64 {
        let holds_made = &mut self.holds_made;
        let hold = self.held.entry(pool).or_default().entry(key.into()).or_insert_with(|| {
            *holds_made += 1;
            Hold { readers: 0, last_read: Instant::now(), number: *holds_made }
        });
        hold.readers += 1;
        hold.last_read = Instant::now();
        hold.number
    }

    /// Notes a piece read under hold `number`; false if that hold was broken.
    fn read_under(&mut self, pool: PoolHandle, key: &[u8], number: u64) -> bool {
        match self.held.get_mut(&pool).and_then(|keys| keys.get_mut(key)) {
            Some(hold) if hold.number == number => {
                hold.last_read = Instant::now();
                true
            }
            _ => false,
        }
    }

    fn release(&mut self, pool: PoolHandle, key: &[u8], number: u64) {
        let Some(hold) = self.held.get_mut(&pool).and_then(|keys| keys.get_mut(key)) else { return };
        if hold.number != number {
            return;
        }
        hold.readers -= 1;
        if hold.readers == 0 {
            self.remove(pool, key);
        }
    }

    /// Drops the hold on `key` and wakes every waiting writer to run again.
    fn remove(&mut self, pool: PoolHandle, key: &[u8]) {
        if let Some(keys) = self.held.get_mut(&pool) {
            keys.remove(key);
            if keys.is_empty() {
                self.held.remove(&pool);
            }
        }
        for waiter in self.waiters.drain(..) {
            waiter.wake();
        }
    }
}

/// A `put_offset` request's fields.
pub(super) struct RangeWrite<'a> {
    pub pool: PoolHandle,
    pub flags: PutFlags,
    pub offset: u64,
    pub key: &'a [u8],
    pub bytes: &'a [u8],
}

fn no_transfer(transfer: u64, kind: &str) -> Failure {
    Failure::new(ErrorCode::InvalidArgument, format!("no direct {kind} {transfer} is open in this session"))
}

impl ShardState {
    /// Opens direct put `transfer`: stages room for `length` bytes in the pool.
    pub(super) fn put_direct(
        &mut self,
        pool: PoolHandle,
        flags: PutFlags,
        transfer: u64,
        length: u64,
        key: &[u8],
        session: &mut Session,
    ) -> Result<Response<'static>, Failure> {
        if length > self.direct_value_bytes_max {
            return Err(Failure::new(
                ErrorCode::ValueTooLarge,
                format!(
                    "a direct value of {length} bytes exceeds this server's limit of {} bytes \
                     (limits.direct_value_bytes_max)",
                    self.direct_value_bytes_max
                ),
            ));
        }
        self.check_new_transfer(transfer, session)?;
        let mode = put_mode(flags);
        if mode != PutMode::Upsert {
            // Refused now rather than after the whole value has come; the commit checks again.
            self.reading(session);
            let pool_ref = open_pool(&self.pools, session, pool)?;
            match (mode, pool_ref.store.get(key).is_some()) {
                (PutMode::CreateOnly, true) => return Err(store_failure(StoreError::KeyExists, pool_ref)),
                (PutMode::UpdateOnly, false) => return Err(store_failure(StoreError::KeyNotFound, pool_ref)),
                _ => {}
            }
        }
        let pool_ref = open_pool_mut(&mut self.pools, session, pool)?;
        let staged = pool_ref.store.stage_value(key.len() as u64, length).map_err(|e| store_failure(e, pool_ref))?;
        let put = PutTransfer { pool, key: key.into(), flags, staged, written: 0 };
        session.transfers.open.insert(transfer, Transfer::Put(put));
        self.stats.direct_transfers += 1;
        Ok(Response::TransferOpened { length })
    }

    fn check_new_transfer(&self, transfer: u64, session: &Session) -> Result<(), Failure> {
        if session.transfers.open.contains_key(&transfer) {
            return Err(Failure::new(
                ErrorCode::InvalidArgument,
                format!("direct transfer {transfer} is already open in this session"),
            ));
        }
        if session.transfers.open.len() >= TRANSFERS_PER_SESSION_MAX {
            return Err(Failure::new(
                ErrorCode::InvalidArgument,
                format!("a session may have at most {TRANSFERS_PER_SESSION_MAX} direct transfers open"),
            ));
        }
        Ok(())
    }

    /// The pool memory that `len` bytes at `offset` of direct put `transfer` go to, lent so the
    /// connection reads a piece of that size straight into it from its socket, one read at a time
    /// ([`write_piece_in_place`](Self::write_piece_in_place) then takes the piece): one copy
    /// of every value byte fewer than reading it into the connection's buffer first. `None` where
    /// the piece must come the usual way, as a whole request, which then answers whatever is wrong
    /// with it: a piece longer than the server's value limit, a transfer that is not an open put,
    /// a piece not where the put stands or past its value, a pool not open in the session or
    /// whose memory is not lent, a stopped shard, and a replica of a group, whose requests pass
    /// the group's gate first.
    pub(crate) fn staged_piece_mut(
        &mut self,
        transfer: u64,
        offset: u64,
        len: usize,
        session: &Session,
    ) -> Option<&mut [u8]> {
        if len > self.limits.value_bytes_max as usize || self.halted.is_some() || self.replication.is_some() {
            return None;
        }
        let Some(Transfer::Put(put)) = session.transfers.open.get(&transfer) else { return None };
        if offset != put.written {
            return None;
        }
        let pool = open_pool_mut(&mut self.pools, session, put.pool).ok()?;
        pool.store.staged_piece_mut(&put.staged, offset, len)
    }

    /// Answers a direct put's piece that the connection read in place, as
    /// [`write_piece_in_place`](Self::write_piece_in_place) takes it.
    pub(crate) fn answer_piece_in_place(
        &mut self,
        request_id: u64,
        transfer: u64,
        offset: u64,
        len: usize,
        session: &mut Session,
        out: &mut bytes::BytesMut,
    ) -> super::Flow {
        self.stats.requests += 1;
        self.begin_request();
        match self.write_piece_in_place(transfer, offset, len, session) {
            Ok(response) => {
                response.encode(request_id, out);
                super::Flow::Continue
            }
            Err(failure) => self.answer_error(&failure, request_id, out),
        }
    }

    /// Takes a direct put's piece of `len` bytes at `offset` that the connection read into the
    /// memory [`staged_piece_mut`](Self::staged_piece_mut) lent, as [`execute`](Self::execute)
    /// takes a piece that came whole: the same checks (the session's rights, the shard's state,
    /// the log's room), then the piece is logged from where it lies. A piece refused here leaves
    /// its bytes unlogged in the staged value, which nothing refers to: the client's next piece
    /// at the same offset overwrites them.
    pub(crate) fn write_piece_in_place(
        &mut self,
        transfer: u64,
        offset: u64,
        len: usize,
        session: &mut Session,
    ) -> Result<Response<'static>, Failure> {
        // Its bytes are not in the request, so `admit` cannot check their length: checked here
        // too, though no memory is lent for a piece past the limit.
        let request = Request::DirectWrite { transfer, offset, bytes: &[] };
        self.admit(&request, session)?;
        let max = self.limits.value_bytes_max as usize;
        if len > max {
            return Err(Failure::from(ProtocolError::ValueTooLarge { len, max }));
        }
        self.direct_write(transfer, offset, Piece::InPlace(len as u64), session)
    }

    /// Stages the next piece of direct put `transfer`, logged as it lands.
    pub(super) fn direct_write(
        &mut self,
        transfer: u64,
        offset: u64,
        piece: Piece<'_>,
        session: &mut Session,
    ) -> Result<Response<'static>, Failure> {
        let Some(Transfer::Put(put)) = session.transfers.open.get(&transfer) else {
            return Err(no_transfer(transfer, "put"));
        };
        if offset != put.written {
            return Err(Failure::new(
                ErrorCode::InvalidArgument,
                format!("direct put {transfer}: a piece at offset {offset}, where {} was expected", put.written),
            ));
        }
        let length = put.staged.len();
        let piece_len = piece.len();
        if piece_len > length - offset {
            return Err(Failure::new(
                ErrorCode::InvalidArgument,
                format!("direct put {transfer}: {piece_len} bytes at offset {offset} pass the value's {length} bytes"),
            ));
        }
        let pool = open_pool(&self.pools, session, put.pool)?;
        self.admit_write(pool.store.staged_write_footprint(piece_len))?;
        let Some(Transfer::Put(put)) = session.transfers.open.get_mut(&transfer) else {
            return Err(no_transfer(transfer, "put"));
        };
        let pool = self.pools.get_mut(put.pool).expect("checked open just above");
        match piece {
            Piece::Bytes(bytes) => pool.store.write_staged(&mut put.staged, offset, bytes),
            Piece::InPlace(len) => {
                pool.store.write_staged_in_place(&mut put.staged, offset, len);
                self.stats.direct_bytes_in_place += len;
            }
        }
        put.written += piece_len;
        let completes_value = put.written == length;
        self.stats.direct_bytes_in += piece_len;
        // Pieces are acknowledged without waiting for the disk (the commit waits for all of
        // them), unless the log's backlog grows: then the client slows to the disk's pace.
        self.logged_piece(completes_value, session)?;
        Ok(Response::Written)
    }

    /// Opens direct read `transfer` of `key`, which other sessions' writers then wait for.
    pub(super) fn get_direct(
        &mut self,
        pool: PoolHandle,
        transfer: u64,
        key: &[u8],
        session: &mut Session,
    ) -> Result<Response<'static>, Failure> {
        self.reading(session);
        self.check_new_transfer(transfer, session)?;
        let pool_ref = open_pool(&self.pools, session, pool)?;
        let length = pool_ref.store.get(key).ok_or_else(|| super::key_not_found(pool_ref))?.len() as u64;
        let hold = self.direct_reads.hold(pool, key);
        session.transfers.open.insert(transfer, Transfer::Read(ReadTransfer { pool, key: key.into(), length, hold }));
        self.stats.direct_transfers += 1;
        Ok(Response::TransferOpened { length })
    }

    /// Up to `length` bytes at `offset` of the value direct read `transfer` holds.
    pub(super) fn direct_read(
        &mut self,
        transfer: u64,
        offset: u64,
        length: u32,
        session: &mut Session,
    ) -> Result<Response<'_>, Failure> {
        let Some(Transfer::Read(read)) = session.transfers.open.get(&transfer) else {
            return Err(no_transfer(transfer, "read"));
        };
        if offset > read.length {
            return Err(Failure::new(
                ErrorCode::InvalidArgument,
                format!("offset {offset} is past the end of the value ({} bytes)", read.length),
            ));
        }
        if !self.direct_reads.read_under(read.pool, &read.key, read.hold) {
            return Err(Failure::new(
                ErrorCode::InvalidArgument,
                format!(
                    "direct read {transfer} no longer holds its key: it read nothing for {:?} while a writer \
                     waited; end it and open it again",
                    self.direct_reads.idle_max
                ),
            ));
        }
        let take = u64::from(length).min(read.length - offset);
        if let Some(durability) = &self.durability {
            session.wait_lsn = session.wait_lsn.max(durability.visible_lsn);
        }
        let pool = open_pool(&self.pools, session, read.pool)?;
        let bytes = pool.store.read_value(&read.key, offset, take).ok_or_else(|| {
            Failure::new(
                ErrorCode::KeyNotFound,
                "the value changed under this session's own write during its direct read",
            )
        })?;
        self.stats.direct_bytes_out += take;
        Ok(Response::Value(bytes))
    }

    /// Ends `transfer`: commits or drops a direct put, releases a direct read.
    pub(super) fn end_transfer(
        &mut self,
        transfer: u64,
        flags: EndTransferFlags,
        session: &mut Session,
        now_ns: u64,
    ) -> Result<Response<'static>, Failure> {
        let Some(open) = session.transfers.open.remove(&transfer) else {
            return Err(no_transfer(transfer, "transfer"));
        };
        match open {
            Transfer::Read(read) => {
                self.direct_reads.release(read.pool, &read.key, read.hold);
                Ok(Response::TransferEnded)
            }
            Transfer::Put(put) if flags.aborts() => {
                self.discard(put);
                Ok(Response::TransferEnded)
            }
            Transfer::Put(put) if put.written < put.staged.len() => {
                let message =
                    format!("direct put {transfer} ended after {} of its {} bytes", put.written, put.staged.len());
                self.discard(put);
                Err(Failure::new(ErrorCode::InvalidArgument, message))
            }
            Transfer::Put(put) => self.commit(put, session, now_ns),
        }
    }

    /// Makes a whole direct put's value its key's, as one transaction.
    fn commit(&mut self, put: PutTransfer, session: &mut Session, now_ns: u64) -> Result<Response<'static>, Failure> {
        let mode = put_mode(put.flags);
        if mode != PutMode::Upsert {
            // Success or failure says whether the key was there.
            self.reading(session);
        }
        let admitted = match open_pool(&self.pools, session, put.pool) {
            Ok(pool) => self.admit_write(pool.store.staged_commit_footprint(put.key.len() as u64, &put.staged)),
            Err(failure) => Err(failure),
        };
        if let Err(failure) = admitted {
            self.discard(put);
            return Err(failure);
        }
        let handle = put.pool;
        let pool = self.pools.get_mut(handle).expect("checked open just above");
        let length_before = match self.calls.contains_key(&handle) {
            true => pool.store.get(&put.key).map(|value| value.len() as u64),
            false => None,
        };
        let length = put.staged.len();
        let outcome =
            pool.store.commit_staged(&put.key, put.staged, mode, now_ns).map_err(|e| store_failure(e, pool))?;
        if let (PutOutcome::Inserted, Some(index)) = (outcome, &mut pool.index) {
            index.insert(&put.key);
        }
        let sync = match put.flags.durability() {
            Some(durability) => durability == Durability::Sync,
            None => !pool.async_default,
        };
        self.stats.puts += 1;
        self.logged(sync, session)?;
        if length_before.is_some_and(|before| before != length) {
            self.tell_plugins(handle, ferrite_plugin::abi::EVENT_RESIZE, &put.key);
        }
        Ok(Response::TransferEnded)
    }

    fn discard(&mut self, put: PutTransfer) {
        if let Some(pool) = self.pools.get_mut(put.pool) {
            pool.store.discard_staged(put.staged);
        }
    }

    /// Writes `write.bytes` at `write.offset` inside its key's value, atomically and durably
    /// like a put.
    pub(super) fn put_offset(
        &mut self,
        write: RangeWrite<'_>,
        session: &mut Session,
        now_ns: u64,
    ) -> Result<Response<'static>, Failure> {
        let RangeWrite { pool: handle, flags, offset, key, bytes } = write;
        // Failure says whether the key was there, and how long its value is.
        self.reading(session);
        let pool = open_pool(&self.pools, session, handle)?;
        let value_len = pool.store.get(key).ok_or_else(|| super::key_not_found(pool))?.len() as u64;
        self.admit_write(pool.store.value_range_footprint(key.len() as u64, value_len, bytes.len() as u64))?;
        let pool = open_pool_mut(&mut self.pools, session, handle)?;
        pool.store.write_value_range(key, offset, bytes, now_ns).map_err(|error| match error {
            StoreError::RangeOutside { .. } => {
                Failure::new(ErrorCode::InvalidArgument, format!("pool '{}': {error}", pool.name))
            }
            other => store_failure(other, pool),
        })?;
        let sync = match flags.durability() {
            Some(durability) => durability == Durability::Sync,
            None => !pool.async_default,
        };
        self.stats.puts += 1;
        self.logged(sync, session).map(|()| Response::Stored)
    }

    /// Notes a piece read under every direct read `session` has open, as if each had read one:
    /// a reply that answers several long values one after another (RESP `MGET`) is read as a
    /// whole, so the holds of the values still to come last while the reader takes the first.
    pub(crate) fn note_reads(&mut self, session: &Session) {
        for open in session.transfers.open.values() {
            if let Transfer::Read(read) = open {
                // A hold already broken stays broken: its read fails at its next piece.
                self.direct_reads.read_under(read.pool, &read.key, read.hold);
            }
        }
    }

    /// Ends every transfer a finished session left open.
    pub(crate) fn end_transfers(&mut self, session: &mut Session) {
        for (_, open) in std::mem::take(&mut session.transfers.open) {
            self.give_back(open);
        }
    }

    /// Ends `transfer` without committing it (its session lost the right it needs).
    pub(super) fn drop_transfer(&mut self, transfer: u64, session: &mut Session) {
        if let Some(open) = session.transfers.open.remove(&transfer) {
            self.give_back(open);
        }
    }

    /// Releases what an ended transfer held: a read's hold on its key, a put's staged value.
    fn give_back(&mut self, open: Transfer) {
        match open {
            Transfer::Read(read) => self.direct_reads.release(read.pool, &read.key, read.hold),
            Transfer::Put(put) => self.discard(put),
        }
    }
}
