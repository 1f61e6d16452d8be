//! The linearizability check: is there, for every key, one order of its operations that
//! respects real time (an operation that returned before another was invoked comes first) and
//! that a single register, starting absent, could have produced?
//!
//! Keys are independent registers, and linearizability is compositional (Herlihy & Wing), so
//! each key is checked alone: the history is linearizable exactly when every key's is.
//! Per key, reads that saw a value nothing wrote are reported first (plainly), then
//! [`search`](search::search) looks for an order.

mod prepare;
mod register;
mod search;

use std::fmt;

use crate::bytes::{Content, Key, Value};
use crate::history::{History, Op, OpRecord, Outcome, Ret};
use crate::observe::{by_key, list_ops, unwritten_reads, UnwrittenRead};
use prepare::{prepare, Prepared};
use search::{search, DeadEnd, Search};

/// The default [`CheckOptions::step_budget`]: about two seconds of search for one key in a debug
/// build, far more than an ordinary history of thousands of operations needs.
pub const DEFAULT_STEP_BUDGET: u64 = 2_000_000;

/// How hard to look.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct CheckOptions {
    /// The most moves (one operation tried at one place) the search of one key may make before
    /// it gives up with [`Verdict::Unknown`]. Memory grows with it (a small entry per state
    /// explored).
    pub step_budget: u64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions { step_budget: DEFAULT_STEP_BUDGET }
    }
}

/// What the check concluded.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Verdict {
    /// Every key's operations can be ordered.
    Linearizable,
    /// Some keys' cannot (never empty; at most one [`Violation::Stuck`] per key). Reported even
    /// when other keys ran out of budget.
    Violation(Vec<Violation>),
    /// No violation found, but the search of some keys ran out of budget.
    Unknown {
        /// Which keys, and how large their histories were.
        reason: String,
    },
}

impl Verdict {
    /// Whether the history was shown linearizable.
    pub fn is_linearizable(&self) -> bool {
        *self == Verdict::Linearizable
    }
}

/// Why one key's history is not linearizable.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Violation {
    /// A read saw a value nothing wrote.
    UnwrittenRead(UnwrittenRead),
    /// No order exists; where the longest order found got stuck.
    Stuck(Box<Stuck>),
}

impl Violation {
    /// The key concerned.
    pub fn key(&self) -> &Key {
        match self {
            Violation::UnwrittenRead(read) => &read.read.key,
            Violation::Stuck(stuck) => &stuck.key,
        }
    }
}

/// The end of the longest order the search found for a key that has none: a small explanation,
/// since any order must get stuck somewhere and this one got furthest.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Stuck {
    /// The key.
    pub key: Key,
    /// How many operations the order placed.
    pub placed: usize,
    /// How many operations the search considered (after dropping those that cannot matter).
    pub considered: usize,
    /// The last operations placed, in order.
    pub placed_tail: Vec<OpRecord>,
    /// What the key held after them.
    pub held: Option<Value>,
    /// The operation that had to take effect next (its return came) and could not.
    pub blocked: OpRecord,
    /// Other operations in flight then, none of which could be placed first to unblock it.
    pub concurrent: Vec<OpRecord>,
    /// Operations not placed yet that saw what the key held, a value written once: `blocked`
    /// would hide it from them for good, and they cannot come before it. Empty when the
    /// explanation lies elsewhere.
    pub waiting: Vec<OpRecord>,
}

/// Checks every key of `history` for linearizability. Indeterminate operations may take effect
/// at any point after their invocation, or never.
pub fn check_linearizable(history: &History, options: &CheckOptions) -> Verdict {
    let ops = history.ops();
    let mut violations = Vec::new();
    let mut gave_up = Vec::new();
    for (key, key_ops) in by_key(&ops) {
        let unwritten = unwritten_reads(&key_ops);
        if !unwritten.is_empty() {
            violations.extend(unwritten.into_iter().map(Violation::UnwrittenRead));
            continue;
        }
        let prepared = prepare(&key_ops);
        match search(&prepared, options.step_budget) {
            Search::Linearizable => {}
            Search::DeadEnd(dead_end) => violations.push(Violation::Stuck(Box::new(stuck(key, &prepared, dead_end)))),
            Search::OutOfBudget => gave_up.push(format!(
                "key {key}: no verdict within {} steps ({} operations, {} considered)",
                options.step_budget,
                key_ops.len(),
                prepared.ops.len()
            )),
        }
    }
    match (violations.is_empty(), gave_up.is_empty()) {
        (false, _) => Verdict::Violation(violations),
        (true, false) => Verdict::Unknown { reason: gave_up.join("; ") },
        (true, true) => Verdict::Linearizable,
    }
}

fn stuck(key: &Key, prepared: &Prepared<'_>, dead_end: DeadEnd) -> Stuck {
    let record = |op: usize| prepared.ops[op].clone();
    Stuck {
        key: key.clone(),
        placed: dead_end.placed,
        considered: prepared.ops.len(),
        placed_tail: dead_end.placed_tail.into_iter().map(record).collect(),
        held: prepared.contents[dead_end.held as usize].cloned(),
        blocked: record(dead_end.blocked),
        concurrent: dead_end.concurrent.into_iter().filter(|op| *op != dead_end.blocked).map(record).collect(),
        waiting: dead_end.waiting.into_iter().map(record).collect(),
    }
}

/// Why the blocked operation of `stuck` cannot take effect, in words.
fn why_blocked(stuck: &Stuck) -> String {
    let held = Content(stuck.held.as_ref());
    if !stuck.waiting.is_empty() {
        return format!(
            "it would overwrite {held} for good, yet these operations, which cannot come before it, saw it:"
        );
    }
    match (stuck.blocked.observed(), &stuck.blocked.op, &stuck.blocked.outcome) {
        (Some(seen), _, _) if seen != held.0 => format!("it saw {} while the key held {held}", Content(seen)),
        (_, Op::CompareAndSet { expected, .. }, Outcome::Ok(Ret::Swapped(false))) if expected.as_ref() == held.0 => {
            format!("it did not swap, yet the key held its expected {held}")
        }
        _ => "every order placing it here was shown to fail further on".to_string(),
    }
}

impl fmt::Display for Stuck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "key {}: not linearizable. The longest order found places {} of {} operations, ending with:",
            self.key, self.placed, self.considered
        )?;
        if self.placed_tail.is_empty() {
            f.write_str("    (nothing: the key starts absent)\n")?;
        }
        list_ops(f, &self.placed_tail)?;
        writeln!(
            f,
            "  the key then held {}; this operation had to take effect next and cannot:",
            Content(self.held.as_ref())
        )?;
        writeln!(f, "    {}", self.blocked)?;
        writeln!(f, "  because {}", why_blocked(self))?;
        list_ops(f, &self.waiting)?;
        if !self.concurrent.is_empty() {
            f.write_str("  operations in flight then (placing any of them first does not help):\n")?;
            list_ops(f, &self.concurrent)?;
        }
        Ok(())
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::UnwrittenRead(read) => read.fmt(f),
            Violation::Stuck(stuck) => stuck.fmt(f),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Linearizable => f.write_str("linearizable"),
            Verdict::Unknown { reason } => write!(f, "linearizability unknown: {reason}"),
            Verdict::Violation(violations) => {
                writeln!(f, "not linearizable ({} violations):", violations.len())?;
                violations.iter().try_for_each(|violation| violation.fmt(f))
            }
        }
    }
}
