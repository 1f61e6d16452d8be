//! Recording: client threads note each operation when they send it and again when they learn how
//! it ended. Every note takes the next number of one counter, under the same lock as the record,
//! so the numbers order all events of a run the way they happened.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::bytes::{Content, Key, Value};

/// What a client asked of one key.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Op {
    /// Read the key; ends with [`Ret::Read`].
    Read,
    /// Put a value; ends with [`Ret::Done`].
    Write(Value),
    /// Erase the key; ends with [`Ret::Done`]. An erase answered "key not found" also left the
    /// key absent: record it as done.
    Erase,
    /// Set `new` if the key holds `expected` (`None`: absent, i.e. put-if-absent); ends with
    /// [`Ret::Swapped`].
    CompareAndSet {
        /// What the key must hold for the swap to happen.
        expected: Option<Value>,
        /// What the key holds after a swap.
        new: Value,
    },
}

/// What an acknowledged operation returned.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Ret {
    /// A write or an erase was applied.
    Done,
    /// What a read saw (`None`: the key was absent).
    Read(Option<Value>),
    /// Whether a compare-and-set swapped.
    Swapped(bool),
}

/// The kind of an operation, for counting.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub enum OpKind {
    /// [`Op::Read`].
    Read,
    /// [`Op::Write`].
    Write,
    /// [`Op::Erase`].
    Erase,
    /// [`Op::CompareAndSet`].
    CompareAndSet,
}

/// How an operation ended, as far as its client knows.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// Not ended yet. Checkers treat it as [`Outcome::Unknown`].
    Pending,
    /// Acknowledged: it took effect, once, between its invocation and its completion.
    Ok(Ret),
    /// Definitely not applied (`not_leader`, or any answer the protocol says changed nothing).
    Failed,
    /// Indeterminate (timeout, connection lost): it may take effect at any time after its
    /// invocation, even after the client gave up, or never.
    Unknown,
}

/// When an event happened: its place in the run's single order of events, and the time since
/// the history began (to line a report up with server logs).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Stamp {
    /// The event's number: events are numbered 0, 1, 2... in the order they were recorded.
    pub seq: u64,
    /// Time since [`History::new`].
    pub elapsed: Duration,
}

/// One operation of a history.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct OpRecord {
    /// Its index in the history.
    pub id: usize,
    /// The client that ran it (operations of one client never overlap, if the test is right).
    pub client: u64,
    /// The key it concerns.
    pub key: Key,
    /// What it asked.
    pub op: Op,
    /// How it ended.
    pub outcome: Outcome,
    /// When it was sent.
    pub invoked: Stamp,
    /// When its client learned the outcome (or gave up); `None` while pending.
    pub completed: Option<Stamp>,
}

impl Op {
    /// Its kind.
    pub fn kind(&self) -> OpKind {
        match self {
            Op::Read => OpKind::Read,
            Op::Write(_) => OpKind::Write,
            Op::Erase => OpKind::Erase,
            Op::CompareAndSet { .. } => OpKind::CompareAndSet,
        }
    }

    /// What the key would hold right after this operation, if it took effect and changed it:
    /// `Some(None)` for an erase, `None` for a read.
    pub fn writes(&self) -> Option<Option<&Value>> {
        match self {
            Op::Read => None,
            Op::Write(value) | Op::CompareAndSet { new: value, .. } => Some(Some(value)),
            Op::Erase => Some(None),
        }
    }

    /// Whether `ret` is an answer this operation can have.
    fn accepts(&self, ret: &Ret) -> bool {
        matches!(
            (self, ret),
            (Op::Read, Ret::Read(_))
                | (Op::Write(_) | Op::Erase, Ret::Done)
                | (Op::CompareAndSet { .. }, Ret::Swapped(_))
        )
    }
}

impl OpRecord {
    /// Whether it was acknowledged.
    pub fn is_ok(&self) -> bool {
        matches!(self.outcome, Outcome::Ok(_))
    }

    /// Whether it may or may not have taken effect (unknown, or still pending).
    pub fn is_indeterminate(&self) -> bool {
        matches!(self.outcome, Outcome::Unknown | Outcome::Pending)
    }

    /// What the key holds right after this operation, if it changed the key or may have:
    /// `Some(None)` for an erase. Failed operations and compare-and-sets that did not swap
    /// changed nothing.
    pub fn written(&self) -> Option<Option<&Value>> {
        match self.outcome {
            Outcome::Failed | Outcome::Ok(Ret::Swapped(false)) => None,
            _ => self.op.writes(),
        }
    }

    /// What this operation saw the key hold, if it was acknowledged and that tells: a read's
    /// answer, or a swapped compare-and-set's expected content.
    pub fn observed(&self) -> Option<Option<&Value>> {
        match (&self.op, &self.outcome) {
            (Op::Read, Outcome::Ok(Ret::Read(value))) => Some(value.as_ref()),
            (Op::CompareAndSet { expected, .. }, Outcome::Ok(Ret::Swapped(true))) => Some(expected.as_ref()),
            _ => None,
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Read => f.write_str("read"),
            Op::Write(value) => write!(f, "write {value}"),
            Op::Erase => f.write_str("erase"),
            Op::CompareAndSet { expected, new } => write!(f, "compare-and-set {} -> {new}", Content(expected.as_ref())),
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Pending => f.write_str("pending"),
            Outcome::Ok(Ret::Done) => f.write_str("ok"),
            Outcome::Ok(Ret::Read(value)) => write!(f, "ok, saw {}", Content(value.as_ref())),
            Outcome::Ok(Ret::Swapped(true)) => f.write_str("ok, swapped"),
            Outcome::Ok(Ret::Swapped(false)) => f.write_str("ok, not swapped"),
            Outcome::Failed => f.write_str("failed (not applied)"),
            Outcome::Unknown => f.write_str("indeterminate"),
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Erase => "erase",
            OpKind::CompareAndSet => "compare-and-set",
        })
    }
}

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:.3} ms)", self.seq, self.elapsed.as_secs_f64() * 1e3)
    }
}

/// One line: `#id client C key K: OP -> OUTCOME [invoked at S, completed at S]`.
impl fmt::Display for OpRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} client {} key {}: {} -> {} [invoked at {}",
            self.id, self.client, self.key, self.op, self.outcome, self.invoked
        )?;
        match self.completed {
            Some(completed) => write!(f, ", completed at {completed}]"),
            None => f.write_str("]"),
        }
    }
}

struct Inner {
    start: Instant,
    next_seq: u64,
    ops: Vec<OpRecord>,
}

impl Inner {
    fn stamp(&mut self) -> Stamp {
        let stamp = Stamp { seq: self.next_seq, elapsed: self.start.elapsed() };
        self.next_seq += 1;
        stamp
    }
}

/// The operations clients ran during a test, shared by every client thread: a clone is another
/// handle on the same history.
#[derive(Clone)]
pub struct History {
    inner: Arc<Mutex<Inner>>,
}

impl fmt::Debug for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("History").field("operations", &self.lock().ops.len()).finish()
    }
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl History {
    /// An empty history; its clock starts now.
    pub fn new() -> History {
        History { inner: Arc::new(Mutex::new(Inner { start: Instant::now(), next_seq: 0, ops: Vec::new() })) }
    }

    /// A client panicking while it held the lock left the history whole (every update is one
    /// push or one assignment), so a poisoned lock is used as it is.
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Notes that `client` sends `op` on `key`, now. Call it right before sending, and end the
    /// returned handle right after the answer (or the failure) comes back.
    pub fn invoke(&self, client: u64, key: impl Into<Key>, op: Op) -> PendingOp {
        let mut inner = self.lock();
        let id = inner.ops.len();
        let invoked = inner.stamp();
        inner.ops.push(OpRecord {
            id,
            client,
            key: key.into(),
            op,
            outcome: Outcome::Pending,
            invoked,
            completed: None,
        });
        PendingOp { history: self.clone(), id, ended: false }
    }

    /// A copy of every operation so far, in invocation order (`ops()[i].id == i`).
    pub fn ops(&self) -> Vec<OpRecord> {
        self.lock().ops.clone()
    }

    fn end(&self, id: usize, outcome: Outcome) {
        let mut inner = self.lock();
        let completed = inner.stamp();
        let record = &mut inner.ops[id];
        debug_assert_eq!(record.outcome, Outcome::Pending, "a handle ends its operation once");
        record.outcome = outcome;
        record.completed = Some(completed);
    }
}

/// An operation sent and not yet answered. End it with [`ok`](PendingOp::ok),
/// [`fail`](PendingOp::fail) or [`unknown`](PendingOp::unknown); dropping it unended records it
/// as indeterminate (the client gave up, or panicked, without knowing).
#[derive(Debug)]
#[must_use = "end the operation with ok, fail or unknown once its answer is known"]
pub struct PendingOp {
    history: History,
    id: usize,
    ended: bool,
}

impl PendingOp {
    /// Its index in the history.
    pub fn id(&self) -> usize {
        self.id
    }

    /// Acknowledged, with what it returned.
    ///
    /// # Panics
    /// If `ret` does not answer this kind of operation (a read needs [`Ret::Read`], a write or
    /// an erase [`Ret::Done`], a compare-and-set [`Ret::Swapped`]): a mistake in the test.
    pub fn ok(mut self, ret: Ret) {
        let op = self.history.lock().ops[self.id].op.clone();
        assert!(op.accepts(&ret), "operation #{} ({op}) cannot return {ret:?}", self.id);
        self.finish(Outcome::Ok(ret));
    }

    /// Definitely not applied.
    pub fn fail(mut self) {
        self.finish(Outcome::Failed);
    }

    /// Indeterminate: it may or may not have taken effect.
    pub fn unknown(mut self) {
        self.finish(Outcome::Unknown);
    }

    fn finish(&mut self, outcome: Outcome) {
        self.ended = true;
        self.history.end(self.id, outcome);
    }
}

impl Drop for PendingOp {
    fn drop(&mut self) {
        if !self.ended {
            self.finish(Outcome::Unknown);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events are numbered in the order they are recorded, across clients, and an unended
    /// handle leaves an indeterminate operation behind.
    #[test]
    fn events_are_numbered_in_order() {
        let history = History::new();
        let write = history.invoke(1, "k", Op::Write("a".into()));
        let read = history.invoke(2, "k", Op::Read);
        write.ok(Ret::Done);
        drop(read);
        let ops = history.ops();
        assert_eq!(ops[0].invoked.seq, 0);
        assert_eq!(ops[1].invoked.seq, 1);
        assert_eq!(ops[0].completed.map(|s| s.seq), Some(2));
        assert_eq!(ops[1].completed.map(|s| s.seq), Some(3));
        assert_eq!(ops[1].outcome, Outcome::Unknown);
    }

    /// A read answered as if it were a write is a mistake in the test, caught where it is made.
    #[test]
    #[should_panic(expected = "cannot return")]
    fn a_mismatched_answer_panics() {
        let history = History::new();
        history.invoke(1, "k", Op::Read).ok(Ret::Done);
    }
}
