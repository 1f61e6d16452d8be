//! One key's operations turned into what the search walks: register steps with a call time and
//! a return time each, on one time line.
//!
//! Times: an event numbered `s` is at `2s`; a return moved just after an event `s` is at
//! `2s + 1`; the return of an operation that may take effect at any time after its call is
//! [`NEVER`].
//!
//! Indeterminate operations are what make a search explode (each may take effect at any point
//! after its call, so each multiplies what the search may try), so exact reductions come first,
//! each keeping the history linearizable if and only if it was:
//! - failed operations, and indeterminate reads, are left out: they changed and told nothing;
//! - an indeterminate writer of content nobody observed (no acknowledged read saw it, no
//!   compare-and-set expected it) is left out when no compare-and-set of the key was answered
//!   "not swapped". Taking effect could only have hidden it behind the next write, so a
//!   linearization with it is one without it (a "not swapped" answer is the one observation
//!   that content nobody observed can satisfy, hence the condition);
//! - an indeterminate writer of a value no other operation writes, when that value was
//!   observed, must have taken effect before the first observation returned: its return moves
//!   there, and it stops being concurrent with the rest of the run;
//! - the other indeterminate operations *linger*: their return is [`NEVER`]. Interchangeable
//!   lingering operations form a class: the same step, where any two *junk* values (written,
//!   but never observed nor expected by a compare-and-set, so that no operation can tell them
//!   apart) count as the same. In any linearization, the members of a class that take effect
//!   can be swapped for the earliest invoked ones, so the search places each class in
//!   invocation order.

use std::collections::{HashMap, HashSet};

use super::register::{Step, ValueId, ABSENT};
use crate::bytes::Value;
use crate::history::{Op, OpRecord, Outcome, Ret};

/// The return time of an operation that may take effect at any time after its call, or never.
pub(crate) const NEVER: u64 = u64::MAX;

/// One key's operations, ready for the search. Index `i` of each vector is the same operation.
#[derive(Debug)]
pub(crate) struct Prepared<'a> {
    /// The operations kept.
    pub(crate) ops: Vec<&'a OpRecord>,
    pub(crate) steps: Vec<Step>,
    pub(crate) calls: Vec<u64>,
    pub(crate) returns: Vec<u64>,
    /// For a lingering operation (return [`NEVER`]): its class in `classes`.
    pub(crate) class_of: Vec<Option<usize>>,
    pub(crate) classes: Vec<Class>,
    /// The content each [`ValueId`] stands for.
    pub(crate) contents: Vec<Option<&'a Value>>,
    /// For each [`ValueId`]: whether exactly one operation writes it, so that once overwritten
    /// it cannot come back.
    pub(crate) unique: Vec<bool>,
}

/// Interchangeable lingering operations.
#[derive(Debug)]
pub(crate) struct Class {
    /// Its operations, earliest invoked first: the order in which they take effect.
    pub(crate) members: Vec<usize>,
    /// For compare-and-sets: the content they expect, without which they change nothing.
    pub(crate) expected: Option<ValueId>,
}

/// Numbers the key's distinct contents, absent first.
struct Contents<'a> {
    ids: HashMap<Option<&'a Value>, ValueId>,
    contents: Vec<Option<&'a Value>>,
}

impl<'a> Contents<'a> {
    fn id(&mut self, content: Option<&'a Value>) -> ValueId {
        *self.ids.entry(content).or_insert_with(|| {
            self.contents.push(content);
            ValueId::try_from(self.contents.len() - 1).expect("fewer than 2^32 distinct values for one key")
        })
    }
}

fn completed_seq(record: &OpRecord) -> u64 {
    record.completed.map_or(u64::MAX, |stamp| stamp.seq)
}

/// What the key's operations tell about each content, before any is prepared.
struct Survey {
    /// The first return of an observation of each content.
    first_seen: HashMap<ValueId, u64>,
    /// How many operations may write each content.
    writers: HashMap<ValueId, usize>,
    /// Contents some compare-and-set (that did not fail) expected.
    expected: HashSet<ValueId>,
    /// Whether some compare-and-set was answered "not swapped".
    not_swapped: bool,
}

impl Survey {
    fn new<'a>(ops: &[&'a OpRecord], contents: &mut Contents<'a>) -> Survey {
        let mut survey = Survey {
            first_seen: HashMap::new(),
            writers: HashMap::new(),
            expected: HashSet::new(),
            not_swapped: ops.iter().any(|r| r.outcome == Outcome::Ok(Ret::Swapped(false))),
        };
        for record in ops {
            if let Some(seen) = record.observed() {
                let first = survey.first_seen.entry(contents.id(seen)).or_insert(u64::MAX);
                *first = (*first).min(completed_seq(record));
            }
            if let Some(written) = record.written() {
                *survey.writers.entry(contents.id(written)).or_default() += 1;
            }
            if let (Op::CompareAndSet { expected, .. }, false) = (&record.op, record.outcome == Outcome::Failed) {
                survey.expected.insert(contents.id(expected.as_ref()));
            }
        }
        survey
    }

    /// Whether no operation can tell `value` from another such value.
    fn is_junk(&self, value: ValueId) -> bool {
        value != ABSENT && !self.first_seen.contains_key(&value) && !self.expected.contains(&value)
    }

    /// `step` with junk values replaced by one stand-in: the class of a lingering operation.
    fn class_of(&self, step: Step) -> Step {
        let unjunk = |value| if self.is_junk(value) { JUNK } else { value };
        match step {
            Step::Read(_) => step,
            Step::Write(value) => Step::Write(unjunk(value)),
            Step::CompareAndSet { expected, new, swapped } => {
                Step::CompareAndSet { expected, new: unjunk(new), swapped }
            }
        }
    }
}

/// The stand-in for every junk value in a class.
const JUNK: ValueId = ValueId::MAX;

/// Prepares one key's operations, given in invocation order.
pub(crate) fn prepare<'a>(ops: &[&'a OpRecord]) -> Prepared<'a> {
    let mut contents = Contents { ids: HashMap::from([(None, ABSENT)]), contents: vec![None] };
    let survey = Survey::new(ops, &mut contents);
    let mut class_index: HashMap<Step, usize> = HashMap::new();
    let mut prepared = Prepared {
        ops: Vec::new(),
        steps: Vec::new(),
        calls: Vec::new(),
        returns: Vec::new(),
        class_of: Vec::new(),
        classes: Vec::new(),
        contents: Vec::new(),
        unique: Vec::new(),
    };
    for record in ops {
        let (step, written) = match (&record.op, &record.outcome) {
            (_, Outcome::Failed) => continue,
            (Op::Read, Outcome::Ok(Ret::Read(seen))) => (Step::Read(contents.id(seen.as_ref())), None),
            (Op::Read, _) => continue,
            (Op::Write(value), _) => {
                let value = contents.id(Some(value));
                (Step::Write(value), Some(value))
            }
            (Op::Erase, _) => (Step::Write(ABSENT), Some(ABSENT)),
            (Op::CompareAndSet { expected, new }, outcome) => {
                let (expected, new) = (contents.id(expected.as_ref()), contents.id(Some(new)));
                let swapped = match outcome {
                    Outcome::Ok(Ret::Swapped(swapped)) => Some(*swapped),
                    _ => None,
                };
                (Step::CompareAndSet { expected, new, swapped }, Some(new))
            }
        };
        let returned = match written {
            Some(written) if record.is_indeterminate() => match survey.first_seen.get(&written) {
                None if !survey.not_swapped && !survey.expected.contains(&written) => continue,
                Some(&first) if written != ABSENT && survey.writers.get(&written) == Some(&1) => {
                    2 * first.max(record.invoked.seq) + 1
                }
                _ => NEVER,
            },
            _ => 2 * completed_seq(record),
        };
        let mut class = None;
        if returned == NEVER {
            let key = survey.class_of(step);
            let index = *class_index.entry(key).or_insert(prepared.classes.len());
            if index == prepared.classes.len() {
                let expected = match key {
                    Step::CompareAndSet { expected, .. } => Some(expected),
                    Step::Read(_) | Step::Write(_) => None,
                };
                prepared.classes.push(Class { members: Vec::new(), expected });
            }
            prepared.classes[index].members.push(prepared.ops.len());
            class = Some(index);
        }
        prepared.ops.push(record);
        prepared.steps.push(step);
        prepared.calls.push(2 * record.invoked.seq);
        prepared.returns.push(returned);
        prepared.class_of.push(class);
    }
    prepared.unique = (0..contents.contents.len())
        .map(|id| {
            let id = ValueId::try_from(id).expect("ids are numbered from a ValueId");
            id != ABSENT && survey.writers.get(&id) == Some(&1)
        })
        .collect();
    prepared.contents = contents.contents;
    prepared
}
