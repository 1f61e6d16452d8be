//! A shard's replica of its group: what the Raft log store and state machine act on.
//!
//! The group's log is the shard's write-ahead log: each record is one entry, framed with its
//! term and kind (`ferrite_store::persistence::ssd::entry`), its LSN the entry's index. Recent
//! entries are also kept in memory, where replication to the other replicas reads them.
//!
//! How an entry gets into the log:
//! - **Executed here.** The leading replica executes a write as a single server would: the
//!   store changes pool memory and the shard's log appends the change as a framed entry at the
//!   next index. Only then is the entry proposed to Raft (as [`Redo::Appended`]): Raft's append
//!   of it finds it in place. Raft applies it like every entry; this replica skips it, as its
//!   effect is in memory already.
//! - **Written elsewhere** (or Raft's own blank and membership entries): Raft appends it, with
//!   its payload, and applies it once committed; this replica then writes its record into pool
//!   memory as recovery would.
//!
//! A replica that led and stops leading may hold in memory writes the group did not commit. It
//! drops them by restarting its process, whose recovery replays only committed entries
//! ([`Replication::restart_reason`]).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ferrite_store::persistence::ssd::entry::Entry as Framed;
use ferrite_store::persistence::ssd::{FramedEntry, ReplicaPools, SharedLog, IN_LOG_RANGE_BYTES_MIN};
use ferrite_store::persistence::wal::{FsStorage, Lsn, RecordAt};
use openraft::EntryPayload;
use tokio::sync::Notify;

use super::admin::AdminJob;
use super::read_back::ReadBack;
use super::state_file::StateFile;
use super::types::{log_id, Entry, LogId, Redo, StoredMembership};
use super::wire::{get_membership, put_membership, Reader};
use crate::completion::Completion;

/// Bytes of recent entries kept in memory for replication; older ones are read back from the log.
const CACHE_BYTES_MAX: usize = 64 << 20;

/// How an append of entries ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Appending {
    Done,
    /// An entry conflicts with the log's at this index: the log is cut back to before it.
    CutFrom(Lsn),
    /// The log is empty and the entries begin here: the log starts over at this index.
    StartAt(Lsn),
}

/// What a replica is in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Follows (or is a candidate, a learner, or uninitialized): answers no requests.
    Following,
    /// Won the election of `term` and applies what came before it: requests wait.
    Elected { term: u64 },
    /// Leads `term` and has applied every entry before its own: executes requests.
    Leading { term: u64 },
    /// Stopped leading, or must restart for another reason: refuses every request until the
    /// process restarts (see `group::depose`).
    Deposed,
}

/// A shard's replica of its group.
#[derive(Debug)]
pub(crate) struct Replication {
    pub node_id: u64,
    pub group: usize,
    pub state: StateFile,
    /// The pools while this replica follows: their memory, which applied entries change. `None`
    /// while it leads: the shard's stores hold them then.
    pub replica: Option<ReplicaPools>,
    pub role: Role,
    /// The group's first entry (index 0, the membership `cluster init` gave), which the log,
    /// whose first record is 1, cannot hold: kept in the state file.
    first: Option<Entry>,
    /// Recent entries, contiguous from `cache_first`.
    cache: VecDeque<Entry>,
    cache_first: Lsn,
    cache_bytes: usize,
    /// The last entry of the log.
    last_log: Option<LogId>,
    /// Entries this replica executed and appended as leader and Raft has not applied yet: their
    /// indexes and sequence numbers.
    executed: BTreeMap<Lsn, u64>,
    /// Where entries appended and not yet applied lie in the log, for those large enough that a
    /// checkpoint keeps their pages there (see `ReplicaPools::apply_at`).
    places: BTreeMap<Lsn, RecordAt>,
    /// The sequence number the next entry executed here gets.
    next_seq: u64,
    pub applied: Option<LogId>,
    /// The last entry Raft says the group committed; saved with the state file now and then.
    pub committed_in_memory: Option<LogId>,
    pub membership: StoredMembership,
    /// Why this replica must restart its process, once it knows it must.
    restart: Option<String>,
    /// Entries no longer in memory, read back from the log's directory.
    read_back: ReadBack,
    /// Told when the shard appended entries to propose (see `group::propose`).
    pub proposals: Arc<Notify>,
    /// Requests that wait for this replica to begin leading (it won the election and applies
    /// what came before its term) or for a read's leadership to be confirmed: run again then.
    pub waiters: Vec<Arc<Completion>>,
    /// Until when this replica may answer reads without asking a quorum: a quorum acknowledged
    /// it as leader recently enough that no other replica can have been elected yet.
    pub lease_until: Option<Instant>,
    /// How long a confirmation of leadership holds (see `GroupSettings::lease`).
    pub lease: std::time::Duration,
    /// Told when the shard completed a checkpoint: a snapshot of it is made for replicas that
    /// lag behind the log this replica keeps (see `group::snapshot_checkpoints`).
    pub checkpointed: Arc<Notify>,
    /// Told when a request waits for leadership to be confirmed (see `group::confirm_leadership`).
    pub confirmations: Arc<Notify>,
    /// How many reasons this leader has to execute nothing now (a membership change, whose
    /// entry no executed one may take the index of; the beginning of a checkpoint, which needs
    /// everything executed committed): requests wait while it is above 0.
    pub pauses: u32,
    /// When this follower last took entries (or a heartbeat) from its leader.
    pub last_heard: Option<Instant>,
    /// How long after `last_heard` it may still answer reads itself (`READONLY` RESP reads):
    /// the longest election timeout, past which another leader may have been elected unseen.
    pub fresh_for: std::time::Duration,
    /// The membership (by the index of its entry) whose members the cluster map last took.
    pub published_membership: Option<Option<u64>>,
    /// Elections this replica started (as a candidate), for the metrics.
    pub elections: u64,
    /// The term of the last election it started.
    pub candidate_term: u64,
    /// Set while this leader hands its leadership over: requests wait (and find it deposed).
    pub transferring: bool,
    /// Held while entries are proposed (see `group::propose_executed`).
    pub proposing: Arc<tokio::sync::Mutex<()>>,
    /// Administration requests not yet run (see `admin::administer`).
    admin: VecDeque<AdminJob>,
    /// Told when one is queued.
    pub admin_queued: Arc<Notify>,
}

impl Replication {
    /// The replica of `group` on node `node_id`, as recovery left it: `last_log` the log's last
    /// entry, `applied` the last one replayed.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        node_id: u64,
        group: usize,
        state: StateFile,
        replica: ReplicaPools,
        storage: FsStorage,
        last_log: Option<LogId>,
        applied: Option<LogId>,
        membership: StoredMembership,
    ) -> Replication {
        let first = state.state().first_entry.clone().map(|(log_id, membership)| Entry {
            log_id,
            payload: membership.map_or(EntryPayload::Blank, EntryPayload::Membership),
        });
        Replication {
            first,
            node_id,
            group,
            state,
            replica: Some(replica),
            role: Role::Following,
            cache: VecDeque::new(),
            cache_first: last_log.map_or(1, |id| id.index + 1),
            cache_bytes: 0,
            last_log,
            executed: BTreeMap::new(),
            places: BTreeMap::new(),
            // Unique across restarts: a process's entries never share a sequence with an earlier one's.
            next_seq: now_ns(),
            applied,
            committed_in_memory: None,
            membership,
            restart: None,
            read_back: ReadBack::new(storage),
            proposals: Arc::default(),
            waiters: Vec::new(),
            lease_until: None,
            lease: std::time::Duration::ZERO,
            confirmations: Arc::default(),
            checkpointed: Arc::default(),
            pauses: 0,
            transferring: false,
            last_heard: None,
            fresh_for: std::time::Duration::ZERO,
            published_membership: None,
            elections: 0,
            candidate_term: 0,
            proposing: Arc::default(),
            admin: VecDeque::new(),
            admin_queued: Arc::default(),
        }
    }

    /// The first log index this replica may still read: the one after the last it purged.
    pub fn first_readable(&self) -> Lsn {
        self.state.state().purged.map_or(0, |id| id.index + 1)
    }

    pub fn last_log(&self) -> Option<LogId> {
        self.last_log
    }

    /// The id of the cluster this replica belongs to; 0 while it knows none.
    pub fn cluster_id(&self) -> u64 {
        parse_cluster_id(&self.state.state().cluster_id)
    }

    /// Records (durably) that this replica belongs to cluster `id`.
    pub fn join_cluster(&mut self, id: u64) -> std::io::Result<()> {
        self.state.update(|state| state.cluster_id = format_cluster_id(id))
    }

    /// Asks for a process restart (the first reason wins).
    pub fn must_restart(&mut self, reason: String) {
        self.restart.get_or_insert(reason);
    }

    pub fn restart_reason(&self) -> Option<&str> {
        self.restart.as_deref()
    }

    /// Whether this replica executes requests now.
    pub fn leads(&self) -> bool {
        matches!(self.role, Role::Leading { .. })
    }

    /// Begins leading `term`: the shard's log frames what it appends from now on, and tells the
    /// proposer.
    pub fn begin_leading(&mut self, term: u64, log: &SharedLog) {
        self.role = Role::Leading { term };
        let proposals = Arc::clone(&self.proposals);
        log.frame_as(term, self.node_id, self.next_seq, Box::new(move || proposals.notify_one()));
    }

    /// Queues an administration request for `admin::administer`.
    pub fn queue_admin(&mut self, job: AdminJob) {
        self.admin.push_back(job);
        self.admin_queued.notify_one();
    }

    /// The next administration request to run.
    pub fn next_admin_job(&mut self) -> Option<AdminJob> {
        self.admin.pop_front()
    }

    /// Runs every waiting request again.
    pub fn wake_waiters(&mut self) {
        for waiter in self.waiters.drain(..) {
            waiter.wake();
        }
    }

    /// Extends the lease to `until`, if that is later.
    pub fn renew_lease(&mut self, until: Option<Instant>) {
        self.lease_until = self.lease_until.max(until);
    }

    /// Whether this follower may answer a read from its replica now: it heard from its leader
    /// recently (see [`Replication::fresh_for`]).
    pub fn reads_locally(&self, now: Instant) -> bool {
        self.role == Role::Following
            && self.replica.is_some()
            && self.last_heard.is_some_and(|heard| now.saturating_duration_since(heard) < self.fresh_for)
    }

    /// Whether this leader's lease covers a read now.
    pub fn lease_holds(&self, now: Instant) -> bool {
        self.lease_until.is_some_and(|until| now < until)
    }

    /// Takes the entries the shard appended while executing requests: they are kept for
    /// replication and remembered as executed here. Returns their sequence numbers, in order,
    /// for the caller to propose.
    pub fn take_executed(&mut self, log: &SharedLog) -> Vec<(Lsn, u64)> {
        let appended = log.take_framed();
        let mut proposals = Vec::with_capacity(appended.len());
        for FramedEntry { lsn, term, seq, payload } in appended {
            self.next_seq = self.next_seq.max(seq + 1);
            self.executed.insert(lsn, seq);
            let entry =
                Entry { log_id: log_id(term, lsn), payload: EntryPayload::Normal(Redo::Payload(payload.into())) };
            self.remember(entry);
            proposals.push((lsn, seq));
        }
        proposals
    }

    /// Keeps `entry` (the next of the log) in memory.
    fn remember(&mut self, entry: Entry) {
        let index = entry.log_id.index;
        if index != self.cache_first + self.cache.len() as u64 {
            // Not contiguous (the log was cut back or restarted): start the cache over.
            self.cache.clear();
            self.cache_bytes = 0;
            self.cache_first = index;
        }
        self.cache_bytes += entry_bytes(&entry);
        self.last_log = Some(entry.log_id);
        self.cache.push_back(entry);
    }

    /// Drops remembered entries beyond what the cache keeps, oldest first, but none the log has
    /// not made durable (they could not be read back) and none executed here and not yet applied
    /// (Raft's append of them finds them here).
    pub fn trim_cache(&mut self, durable: Lsn) {
        let executed = self.executed.first_key_value().map_or(Lsn::MAX, |(first, _)| *first);
        while self.cache_bytes > CACHE_BYTES_MAX && self.cache_first <= durable && self.cache_first < executed {
            let Some(entry) = self.cache.pop_front() else { break };
            self.cache_bytes -= entry_bytes(&entry);
            self.cache_first += 1;
        }
    }

    /// Appends entries Raft gives: each at the log's next index, or (the leader's own) where it
    /// already is. Says what the caller must do first, once the log is quiet, before it calls
    /// again, if an entry conflicts with what the log holds or the log must begin elsewhere.
    pub fn append(&mut self, log: &SharedLog, entries: &[Entry]) -> Result<Appending, std::io::Error> {
        let on_disk = self.held_on_disk(log.next_lsn(), entries);
        for entry in entries {
            let index = entry.log_id.index;
            let next = log.next_lsn();
            if index == 0 || index < next {
                if self.holds(entry, &on_disk) {
                    continue;
                }
                if index > 0 || self.first.is_some() {
                    if !self.executed.is_empty() {
                        self.must_restart(format!(
                            "entry {index} of the group's log replaces one this replica executed"
                        ));
                    }
                    return Ok(Appending::CutFrom(index));
                }
                self.keep_first(entry)?;
                continue;
            }
            if index > next {
                if self.last_log.is_some() {
                    return Err(std::io::Error::other(format!("entry {index} appended after a hole (next is {next})")));
                }
                // An empty log may begin anywhere (a replica whose log begins after a snapshot).
                return Ok(Appending::StartAt(index));
            }
            let payload = record_of(entry)?;
            let at = log.append_entry(index, &payload).map_err(std::io::Error::other)?;
            if payload.len() as u64 >= IN_LOG_RANGE_BYTES_MIN {
                self.places.insert(index, at);
            }
            let stored = Entry {
                log_id: entry.log_id,
                payload: match &entry.payload {
                    EntryPayload::Normal(_) => EntryPayload::Normal(Redo::Payload(Bytes::from(payload))),
                    other => other.clone(),
                },
            };
            self.remember(stored);
        }
        Ok(Appending::Done)
    }

    /// Keeps the group's first entry (see [`Replication::first`]), durably.
    fn keep_first(&mut self, entry: &Entry) -> std::io::Result<()> {
        let membership = match &entry.payload {
            EntryPayload::Membership(membership) => Some(membership.clone()),
            EntryPayload::Blank => None,
            EntryPayload::Normal(_) => {
                return Err(std::io::Error::other("the group's first entry is neither a membership nor blank"))
            }
        };
        let first = (entry.log_id, membership);
        self.state.update(|state| state.first_entry = Some(first))?;
        self.first = Some(entry.clone());
        self.last_log = self.last_log.max(Some(entry.log_id));
        Ok(())
    }

    /// The entries of `entries` before `next` (the log's end) that the log holds but memory no
    /// longer does (after a restart), read back in one pass: an entry the log holds must never
    /// be cut and written again, since this replica may be one of the majority that committed
    /// it.
    fn held_on_disk(&self, next: Lsn, entries: &[Entry]) -> Vec<Entry> {
        let mut uncached = entries.iter().map(|entry| entry.log_id.index).filter(|index| *index > 0 && *index < next);
        let Some(from) = uncached.find(|index| self.cached(*index).is_none()) else { return Vec::new() };
        let to = entries.last().map_or(from, |entry| entry.log_id.index).min(next - 1);
        // Unreadable: taken as not held, so the leader's entries replace them.
        self.read(from, to + 1).unwrap_or_default()
    }

    /// Whether the log holds `entry` already: the leader's own, appended when it executed it, or
    /// one a leader sends again (in memory, or among those read back from disk, `on_disk`).
    fn holds(&self, entry: &Entry, on_disk: &[Entry]) -> bool {
        let index = entry.log_id.index;
        let held = match index {
            0 => self.first.as_ref(),
            _ => self.cached(index).or_else(|| {
                let offset = index.checked_sub(on_disk.first()?.log_id.index)?;
                on_disk.get(usize::try_from(offset).ok()?).filter(|held| held.log_id.index == index)
            }),
        };
        let Some(cached) = held else { return false };
        if cached.log_id != entry.log_id {
            return false;
        }
        match (&entry.payload, &cached.payload) {
            (EntryPayload::Normal(Redo::Appended { seq }), _) => self.executed.get(&index) == Some(seq),
            (EntryPayload::Normal(Redo::Payload(a)), EntryPayload::Normal(Redo::Payload(b))) => a == b,
            (EntryPayload::Blank, EntryPayload::Blank) => true,
            (EntryPayload::Membership(a), EntryPayload::Membership(b)) => a == b,
            _ => false,
        }
    }

    fn cached(&self, index: Lsn) -> Option<&Entry> {
        let offset = index.checked_sub(self.cache_first)?;
        self.cache.get(usize::try_from(offset).ok()?)
    }

    /// Forgets the entries after `last` (the log was cut back there; `None`: all of it, the
    /// first entry too).
    pub fn truncated(&mut self, last: Option<LogId>) -> std::io::Result<()> {
        if last.is_none() && self.first.take().is_some() {
            self.state.update(|state| state.first_entry = None)?;
        }
        let keep_to = last.map_or(0, |id| id.index);
        self.read_back.forget();
        self.places.split_off(&(keep_to + 1));
        if self.executed.range(keep_to + 1..).next().is_some() {
            self.must_restart(format!("the group's log was cut back after {keep_to}, over entries executed here"));
        }
        while self.cache_first + (self.cache.len() as u64) > keep_to + 1 {
            match self.cache.pop_back() {
                Some(entry) => self.cache_bytes -= entry_bytes(&entry),
                None => break,
            }
        }
        if self.cache.is_empty() {
            self.cache_first = keep_to + 1;
        }
        self.last_log = last.min(self.last_log);
        Ok(())
    }

    /// Bounds the entries kept after reads from disk (see [`ReadBack::limit_bytes`]).
    #[cfg(test)]
    pub fn limit_read_back(&self, bytes: usize) {
        self.read_back.limit_bytes(bytes);
    }

    /// The entries of `range` the log holds (from memory, else read back from disk).
    pub fn read(&self, from: Lsn, to_exclusive: Lsn) -> Result<Vec<Entry>, std::io::Error> {
        let mut from = from.max(self.first_readable());
        let to = to_exclusive.min(self.last_log.map_or(0, |id| id.index + 1));
        if from >= to {
            return Ok(Vec::new());
        }
        let mut entries = Vec::new();
        if from == 0 {
            entries.extend(self.first.clone());
            from = 1;
        }
        if from >= to {
            return Ok(entries);
        }
        if from >= self.cache_first {
            entries.extend((from..to).filter_map(|index| self.cached(index).cloned()));
            return Ok(entries);
        }
        let disk_to = to.min(self.cache_first);
        entries.extend(self.read_back.read(from, disk_to, self.first_readable(), self.cache_first)?);
        entries.extend((disk_to..to).filter_map(|index| self.cached(index).cloned()));
        Ok(entries)
    }

    /// The log started over at `first` (it held nothing).
    pub fn started_at(&mut self, first: Lsn) {
        self.read_back.forget();
        self.places.clear();
        self.cache.clear();
        self.cache_bytes = 0;
        self.cache_first = first;
    }

    /// The replica installed a snapshot whose state is as of `last`: its log holds `kept` past
    /// it (the entries it held that follow the snapshot's last), and nothing it executed counts
    /// any more.
    pub fn installed(&mut self, last: LogId, membership: StoredMembership, kept: Vec<Entry>) {
        self.read_back.forget();
        self.places.clear();
        self.cache.clear();
        self.cache_bytes = 0;
        self.cache_first = last.index + 1;
        self.last_log = Some(last);
        for entry in kept {
            self.remember(entry);
        }
        self.executed.clear();
        self.applied = Some(last);
        self.membership = membership;
    }

    /// Saves the committed entry Raft last reported, if it moved past what the file holds, but
    /// never past `durable`, where this replica's log is durable: a restart recovers the saved
    /// position at once, from entries the log then surely holds (an entry a new leader replaced
    /// is replaced durably only up to there).
    pub fn save_committed(&mut self, durable: Lsn) -> std::io::Result<()> {
        let Some(committed) = self.committed_in_memory else { return Ok(()) };
        let saved = if committed.index <= durable {
            Some(committed)
        } else {
            self.read(durable, durable + 1)?.first().map(|entry| entry.log_id)
        };
        if saved.is_none() || saved <= self.state.state().committed {
            return Ok(());
        }
        self.state.update(|state| state.committed = saved)
    }

    /// Pauses the execution of requests (see [`Replication::pauses`]).
    pub fn pause(&mut self) {
        self.pauses += 1;
    }

    /// Ends a pause; requests that waited run again once none is left.
    pub fn resume(&mut self) {
        self.pauses = self.pauses.saturating_sub(1);
        if self.pauses == 0 {
            self.wake_waiters();
        }
    }

    /// Whether the entry at `index` was executed here (its effect is in memory already); forgets
    /// it either way, as Raft applies each entry once.
    pub fn take_executed_at(&mut self, index: Lsn) -> bool {
        self.executed.remove(&index).is_some()
    }

    /// Where entry `index`, about to be applied, lies in the log, if it is large (see
    /// [`Replication::places`]); forgets it and every earlier one.
    pub fn take_place(&mut self, index: Lsn) -> Option<RecordAt> {
        while let Some(first) = self.places.first_entry() {
            if *first.key() > index {
                break;
            }
            let (at, place) = first.remove_entry();
            if at == index {
                return Some(place);
            }
        }
        None
    }
}

/// The log record that holds `entry`: its frame and, for a normal entry, the shard's record.
pub fn record_of(entry: &Entry) -> std::io::Result<Vec<u8>> {
    let mut payload = Vec::new();
    let term = entry.log_id.leader_id.term;
    match &entry.payload {
        EntryPayload::Blank => Framed::Blank { term }.encode(&mut payload),
        EntryPayload::Normal(Redo::Payload(bytes)) => payload.extend_from_slice(bytes),
        EntryPayload::Normal(Redo::Appended { seq }) => {
            return Err(std::io::Error::other(format!(
                "entry {} (executed here as #{seq}) is not where it was appended",
                entry.log_id.index
            )));
        }
        EntryPayload::Membership(membership) => {
            let mut body = Vec::new();
            put_membership(&mut body, membership);
            Framed::Membership { term, body: &body }.encode(&mut payload);
        }
    }
    Ok(payload)
}

/// A cluster id as people read it: 16 hexadecimal digits.
pub fn format_cluster_id(id: u64) -> String {
    format!("{id:016x}")
}

/// The cluster id `text` names (as [`format_cluster_id`] writes it); 0 for none.
pub fn parse_cluster_id(text: &str) -> u64 {
    u64::from_str_radix(text, 16).unwrap_or(0)
}

/// What an entry costs the cache.
pub(crate) fn entry_bytes(entry: &Entry) -> usize {
    match &entry.payload {
        EntryPayload::Normal(Redo::Payload(payload)) => payload.len() + 64,
        _ => 64,
    }
}

/// An entry of the group's log from the record that holds it.
pub fn decode_entry(lsn: Lsn, payload: &[u8]) -> Result<Entry, std::io::Error> {
    let bad = |what: &str| std::io::Error::other(format!("log record {lsn} is no entry of the group's log: {what}"));
    let framed = Framed::decode(payload).ok_or_else(|| bad("no frame"))?;
    let payload = match framed {
        Framed::Blank { .. } => EntryPayload::Blank,
        Framed::Normal { .. } => EntryPayload::Normal(Redo::Payload(Bytes::copy_from_slice(payload))),
        Framed::Membership { body, .. } => {
            EntryPayload::Membership(get_membership(&mut Reader::new(body)).map_err(|_| bad("its membership"))?)
        }
    };
    Ok(Entry { log_id: log_id(framed.term(), lsn), payload })
}

fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
}
