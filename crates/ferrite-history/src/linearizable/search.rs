//! The Wing & Gong search with Lowe's memoization (the algorithm of Porcupine, by Anish Athalye,
//! and of Knossos), over one key's operations.
//!
//! The calls and returns of the operations form one list in time order. The operations that may
//! take effect next are those invoked before the first return in the list (the *frontier*): the
//! one returning must have taken effect by then, and nothing invoked after may precede it. The
//! search tries each in turn (the register must accept it from its current content), takes its
//! call and return out of the list and goes on from the new frontier; when nothing at a frontier
//! can be placed, it undoes the last placement and tries the next candidate there. The list
//! empties exactly when every operation has been placed in an order that respects real time and
//! the register: the history is linearizable. Running out of candidates at the first frontier
//! means no such order exists.
//!
//! Lingering operations (see `prepare`) stay out of the list: each frontier also offers the next
//! member of each class invoked before it, when that would change the register, and the search
//! succeeds as soon as the list is empty (the rest take effect at the end, or never).
//!
//! Lowe's memoization: the search's future depends only on which operations are placed and the
//! register's content, so each such pair is explored once. The placed set is a bitset, hashed
//! incrementally (a fixed random word per operation, XORed in and out), and stored compactly
//! (the count of leading full words, then the words up to the last set bit): the operations
//! placed are nearly always all the early ones plus a few.

use std::collections::{HashMap, HashSet};

use super::prepare::Prepared;
use super::register::{Step, ValueId, ABSENT};

/// How many operations placed just before a dead end it reports.
const DEAD_END_PLACED_MAX: usize = 6;
/// How many unplaced operations concurrent with a dead end it reports.
const DEAD_END_CONCURRENT_MAX: usize = 8;

/// What the search concluded. Operations are indexes into [`Prepared::ops`].
#[derive(Debug)]
pub(crate) enum Search {
    Linearizable,
    /// No linearization; where the longest order the search built stopped.
    DeadEnd(DeadEnd),
    /// The step budget ran out first.
    OutOfBudget,
}

/// The end of the longest order found: `placed` operations could be ordered, the last of them
/// `placed_tail`, leaving the register holding `held`; then `blocked` had to take effect (its
/// return came) and could not, nor could any of `concurrent` (placed first) help. `waiting`:
/// operations not placed that saw `held`, a content written once, so that changing it would
/// hide it from them for good.
#[derive(Debug)]
pub(crate) struct DeadEnd {
    pub(crate) placed: usize,
    pub(crate) placed_tail: Vec<usize>,
    pub(crate) held: ValueId,
    pub(crate) blocked: usize,
    pub(crate) concurrent: Vec<usize>,
    pub(crate) waiting: Vec<usize>,
}

/// The calls and returns of the operations that do not linger, in time order, as a doubly linked
/// list: node 0 is the head, `1..=2n` the events, `2n + 1` the tail. Placing an operation takes
/// its two events out; undoing it puts them back where they were.
struct Events {
    next: Vec<usize>,
    prev: Vec<usize>,
    /// Each event's operation, and whether the event is its call.
    op: Vec<usize>,
    is_call: Vec<bool>,
    /// Each operation's call and return nodes.
    call_node: Vec<usize>,
    return_node: Vec<usize>,
}

const HEAD: usize = 0;

impl Events {
    fn new(prepared: &Prepared<'_>) -> Events {
        let n = prepared.steps.len();
        let mut order: Vec<(u64, usize, bool)> = (0..n)
            .filter(|op| prepared.class_of[*op].is_none())
            .flat_map(|op| [(prepared.calls[op], op, true), (prepared.returns[op], op, false)])
            .collect();
        // Calls sit at even times, distinct from every other event, and before their own
        // returns; only returns may share a time, and their order among themselves is free.
        order.sort_unstable();
        let len = order.len();
        let mut events = Events {
            next: (1..=len + 2).collect(),
            prev: (0..len + 2).map(|node| node.saturating_sub(1)).collect(),
            op: vec![usize::MAX; len + 2],
            is_call: vec![false; len + 2],
            call_node: vec![0; n],
            return_node: vec![0; n],
        };
        for (index, (_, op, is_call)) in order.into_iter().enumerate() {
            let node = index + 1;
            events.op[node] = op;
            events.is_call[node] = is_call;
            if is_call {
                events.call_node[op] = node;
            } else {
                events.return_node[op] = node;
            }
        }
        events
    }

    fn is_empty(&self) -> bool {
        self.next[HEAD] == self.next.len() - 1
    }

    fn unlink(&mut self, node: usize) {
        let (prev, next) = (self.prev[node], self.next[node]);
        self.next[prev] = next;
        self.prev[next] = prev;
    }

    fn relink(&mut self, node: usize) {
        let (prev, next) = (self.prev[node], self.next[node]);
        self.next[prev] = node;
        self.prev[next] = node;
    }

    fn lift(&mut self, op: usize) {
        self.unlink(self.call_node[op]);
        self.unlink(self.return_node[op]);
    }

    /// Undoes the last [`lift`](Events::lift) (in reverse order, so the links are the old ones).
    fn unlift(&mut self, op: usize) {
        self.relink(self.return_node[op]);
        self.relink(self.call_node[op]);
    }

    /// The operations invoked before the first return, and that return's operation: the ones
    /// that may take effect next, and the one that must have by then. The list is not empty.
    fn frontier(&self) -> (Vec<usize>, usize) {
        let mut calls = Vec::new();
        let mut node = self.next[HEAD];
        while self.is_call[node] {
            calls.push(self.op[node]);
            node = self.next[node];
        }
        (calls, self.op[node])
    }
}

/// The set of placed operations, with its incremental hash.
struct Placed {
    words: Vec<u64>,
    hash: u64,
}

/// A state the search has explored: the placed set (hash, then compact form) and the register.
/// Hashing uses the incremental hash and the register only; equality compares everything.
#[derive(PartialEq, Eq)]
struct Explored {
    hash: u64,
    held: ValueId,
    full_words: usize,
    rest: Box<[u64]>,
}

impl std::hash::Hash for Explored {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.hash.hash(state);
        self.held.hash(state);
    }
}

/// A fixed pseudo-random word per operation (SplitMix64 of its index).
fn word_of(op: usize) -> u64 {
    let mut z = (op as u64).wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Placed {
    fn toggle(&mut self, op: usize) {
        self.words[op / 64] ^= 1 << (op % 64);
        self.hash ^= word_of(op);
    }

    fn contains(&self, op: usize) -> bool {
        self.words[op / 64] & (1 << (op % 64)) != 0
    }

    fn explored(&self, held: ValueId) -> Explored {
        let full_words = self.words.iter().take_while(|w| **w == u64::MAX).count();
        let end = self.words.iter().rposition(|w| *w != 0).map_or(full_words, |last| (last + 1).max(full_words));
        Explored { hash: self.hash, held, full_words, rest: self.words[full_words..end].into() }
    }
}

/// One level of the search: the register's content there, the operations that may take effect
/// next (tried in order), and the operation whose return bounds them.
struct Frame {
    held: ValueId,
    moves: Vec<usize>,
    tried: usize,
    blocked: usize,
}

/// The search's position: what is placed, and where each class of lingering operations stands.
struct Position<'p, 'a> {
    prepared: &'p Prepared<'a>,
    events: Events,
    placed: Placed,
    /// How many of each class are placed (always its earliest members).
    class_placed: Vec<usize>,
    /// For each content: the operations that observe it, and how many are not placed yet.
    observers: Vec<Vec<usize>>,
    observers_left: Vec<usize>,
    /// Classes that may change the register whatever it holds (writes).
    unconditional: Vec<usize>,
    /// Classes of compare-and-sets, by the content they expect.
    by_expected: HashMap<ValueId, Vec<usize>>,
}

impl Position<'_, '_> {
    /// The frame at `held`: the operations invoked before the first return, then the next
    /// member of each class invoked by then, if it could change the register.
    fn frame(&self, held: ValueId, after_lingering: bool) -> Frame {
        let (mut moves, blocked) = self.events.frontier();
        let horizon = self.prepared.returns[blocked];
        let conditional = self.by_expected.get(&held).map_or(&[][..], Vec::as_slice);
        for &class in self.unconditional.iter().chain(conditional) {
            let next = self.prepared.classes[class].members.get(self.class_placed[class]);
            if let Some(&op) = next.filter(|op| self.prepared.calls[**op] < horizon) {
                moves.push(op);
            }
        }
        if self.must_keep(held) {
            // `held` cannot come back once overwritten, and an operation still has to see it.
            moves.retain(|op| {
                let step = self.prepared.steps[*op];
                step.observes() == Some(held) || step.apply(held) == Some(held)
            });
        }
        if after_lingering {
            // A write right after a lingering operation would hide its effect at once: the
            // lingering one may as well take effect at the end.
            moves.retain(|op| !matches!(self.prepared.steps[*op], Step::Write(_)));
        }
        Frame { held, moves, tried: 0, blocked }
    }

    /// Whether `held` cannot change yet: it is written once, so it cannot come back, and an
    /// operation still has to see it.
    fn must_keep(&self, held: ValueId) -> bool {
        self.prepared.unique[held as usize] && self.observers_left[held as usize] > 0
    }

    /// The end of the order built so far, for a report: `frames` is the path to here.
    fn dead_end(&self, frames: &[Frame]) -> DeadEnd {
        let depth = frames.len() - 1;
        let frame = &frames[depth];
        let tail = &frames[depth.saturating_sub(DEAD_END_PLACED_MAX)..depth];
        let waiting = if self.must_keep(frame.held) {
            self.observers[frame.held as usize].iter().copied().filter(|op| !self.placed.contains(*op)).collect()
        } else {
            Vec::new()
        };
        DeadEnd {
            placed: depth,
            placed_tail: tail.iter().map(|f| f.moves[f.tried - 1]).collect(),
            held: frame.held,
            blocked: frame.blocked,
            concurrent: self.events.frontier().0.into_iter().take(DEAD_END_CONCURRENT_MAX).collect(),
            waiting,
        }
    }

    fn place(&mut self, op: usize) {
        self.placed.toggle(op);
        if let Some(seen) = self.prepared.steps[op].observes() {
            self.observers_left[seen as usize] -= 1;
        }
        match self.prepared.class_of[op] {
            Some(class) => self.class_placed[class] += 1,
            None => self.events.lift(op),
        }
    }

    fn unplace(&mut self, op: usize) {
        self.placed.toggle(op);
        if let Some(seen) = self.prepared.steps[op].observes() {
            self.observers_left[seen as usize] += 1;
        }
        match self.prepared.class_of[op] {
            Some(class) => self.class_placed[class] -= 1,
            None => self.events.unlift(op),
        }
    }
}

/// Searches for a linearization of `prepared`, trying at most `step_budget` moves (one move:
/// one operation tried at one place).
pub(crate) fn search(prepared: &Prepared<'_>, step_budget: u64) -> Search {
    let mut by_expected: HashMap<ValueId, Vec<usize>> = HashMap::new();
    let mut unconditional = Vec::new();
    for (index, class) in prepared.classes.iter().enumerate() {
        match class.expected {
            Some(expected) => by_expected.entry(expected).or_default().push(index),
            None => unconditional.push(index),
        }
    }
    let mut observers = vec![Vec::new(); prepared.contents.len()];
    for (op, step) in prepared.steps.iter().enumerate() {
        if let Some(seen) = step.observes() {
            observers[seen as usize].push(op);
        }
    }
    let observers_left = observers.iter().map(Vec::len).collect();
    let mut position = Position {
        prepared,
        events: Events::new(prepared),
        placed: Placed { words: vec![0; prepared.steps.len().div_ceil(64)], hash: 0 },
        class_placed: vec![0; prepared.classes.len()],
        observers,
        observers_left,
        unconditional,
        by_expected,
    };
    if position.events.is_empty() {
        // Only lingering operations: each can take effect at the end, or never.
        return Search::Linearizable;
    }
    let mut explored: HashSet<Explored> = HashSet::new();
    let mut frames = vec![position.frame(ABSENT, false)];
    let mut dead_end: Option<DeadEnd> = None;
    let mut steps = 0u64;
    loop {
        let depth = frames.len() - 1;
        let frame = frames.last_mut().expect("the search stops when the first frame is exhausted");
        if frame.tried == frame.moves.len() {
            if dead_end.as_ref().is_none_or(|d| depth > d.placed) {
                dead_end = Some(position.dead_end(&frames));
            }
            frames.pop();
            let Some(parent) = frames.last() else {
                return Search::DeadEnd(dead_end.expect("recorded as the first frame was exhausted"));
            };
            position.unplace(parent.moves[parent.tried - 1]);
            continue;
        }
        steps += 1;
        if steps > step_budget {
            return Search::OutOfBudget;
        }
        let (op, held) = (frame.moves[frame.tried], frame.held);
        frame.tried += 1;
        let Some(after) = prepared.steps[op].apply(held) else { continue };
        if prepared.class_of[op].is_some() && after == held {
            // A lingering operation that would change nothing here may as well take effect at
            // the very end, where it changes nothing either.
            continue;
        }
        position.placed.toggle(op);
        let new = explored.insert(position.placed.explored(after));
        position.placed.toggle(op);
        if !new {
            continue;
        }
        position.place(op);
        if position.events.is_empty() {
            // The lingering operations left can take effect at the end, or never.
            return Search::Linearizable;
        }
        frames.push(position.frame(after, prepared.class_of[op].is_some()));
    }
}
