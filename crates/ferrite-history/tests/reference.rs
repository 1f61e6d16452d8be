//! The linearizability checker against a reference: thousands of small random histories (one
//! key, a few clients, writes of shared and unique values, erases, compare-and-sets, failed and
//! indeterminate operations, some answers corrupted), each judged by the checker and by a
//! brute-force search over every order (remembering only the states that failed), with none
//! of the checker's reductions. They must agree.

mod rng;

use std::collections::HashSet;

use ferrite_history::{check_linearizable, CheckOptions, History, Op, OpRecord, Outcome, Ret, Value, Verdict};
use rng::Rng;

const HISTORIES: u64 = 20_000;
const CLIENTS: u64 = 3;
const OPS_MAX: usize = 10;

/// One operation as the reference sees it.
struct Plain {
    call: u64,
    /// `None`: indeterminate (it may take effect at any time after its call, or never).
    ret: Option<u64>,
    op: Op,
    outcome: Outcome,
}

fn plain(records: &[OpRecord]) -> Vec<Plain> {
    records
        .iter()
        .filter(|r| r.outcome != Outcome::Failed && !(r.op == Op::Read && r.is_indeterminate()))
        .map(|r| Plain {
            call: r.invoked.seq,
            ret: if r.is_ok() { r.completed.map(|s| s.seq) } else { None },
            op: r.op.clone(),
            outcome: r.outcome.clone(),
        })
        .collect()
}

/// The register's content after `p` when it held `held`, if `p` can take effect then.
fn apply(p: &Plain, held: &Option<Value>) -> Option<Option<Value>> {
    match (&p.op, &p.outcome) {
        (Op::Read, Outcome::Ok(Ret::Read(seen))) => (seen == held).then(|| held.clone()),
        (Op::Write(value), _) => Some(Some(value.clone())),
        (Op::Erase, _) => Some(None),
        (Op::CompareAndSet { expected, new }, Outcome::Ok(Ret::Swapped(true))) => {
            (expected == held).then(|| Some(new.clone()))
        }
        (Op::CompareAndSet { expected, .. }, Outcome::Ok(Ret::Swapped(false))) => {
            (expected != held).then(|| held.clone())
        }
        (Op::CompareAndSet { expected, new }, _) => {
            Some(if expected == held { Some(new.clone()) } else { held.clone() })
        }
        _ => unreachable!("failed operations and indeterminate reads are left out"),
    }
}

/// Whether the operations not in `placed` (a bit each) can follow, from `held`. An operation
/// may go next if no acknowledged operation still to place returned before it was invoked;
/// indeterminate ones may also never be placed. `failed` remembers the states already shown
/// to lead nowhere.
fn linearizable(ops: &[Plain], placed: u64, held: &Option<Value>, failed: &mut HashSet<(u64, Option<Value>)>) -> bool {
    let unplaced = |i: &usize| placed & (1 << i) == 0;
    if (0..ops.len()).filter(unplaced).all(|i| ops[i].ret.is_none()) {
        return true;
    }
    if failed.contains(&(placed, held.clone())) {
        return false;
    }
    let first_return = (0..ops.len()).filter(unplaced).filter_map(|i| ops[i].ret).min().unwrap_or(u64::MAX);
    for i in (0..ops.len()).filter(unplaced) {
        if ops[i].call > first_return {
            continue;
        }
        if let Some(after) = apply(&ops[i], held) {
            if linearizable(ops, placed | (1 << i), &after, failed) {
                return true;
            }
        }
    }
    failed.insert((placed, held.clone()));
    false
}

/// A client's operation in flight: its handle, and what it returned if it took effect already.
struct InFlight {
    pending: ferrite_history::PendingOp,
    op: Op,
    effect: Option<Ret>,
}

fn pick_value(rng: &mut Rng, n: usize) -> Value {
    match rng.below(4) {
        0 => "a".into(),
        1 => "b".into(),
        _ => format!("u{n}").into(),
    }
}

fn pick_content(rng: &mut Rng, n: usize) -> Option<Value> {
    (rng.below(3) != 0).then(|| pick_value(rng, n))
}

/// The register the generated clients run against, with every content it held.
struct Register {
    held: Option<Value>,
    past: Vec<Option<Value>>,
}

impl Register {
    fn set(&mut self, content: Option<Value>) {
        self.past.push(std::mem::replace(&mut self.held, content));
    }

    /// Takes effect; one read in eight answers something else instead (an older content, or
    /// any), as a lossy store would.
    fn take_effect(&mut self, rng: &mut Rng, op: &Op, n: usize) -> Ret {
        match op {
            Op::Read if rng.below(8) == 0 => match self.past.len() as u64 {
                0 => Ret::Read(pick_content(rng, n)),
                past => Ret::Read(self.past[rng.below(past) as usize].clone()),
            },
            Op::Read if rng.below(8) == 0 => Ret::Read(pick_content(rng, n)),
            Op::Read => Ret::Read(self.held.clone()),
            Op::Write(value) => {
                self.set(Some(value.clone()));
                Ret::Done
            }
            Op::Erase => {
                self.set(None);
                Ret::Done
            }
            Op::CompareAndSet { expected, new } => {
                let swapped = self.held == *expected;
                if swapped {
                    self.set(Some(new.clone()));
                }
                Ret::Swapped(swapped)
            }
        }
    }
}

/// A random history of one key, run against a register (with some answers corrupted).
fn generate(seed: u64) -> History {
    let mut rng = Rng::new(seed);
    let history = History::new();
    let mut register = Register { held: None, past: Vec::new() };
    let mut in_flight: Vec<Option<InFlight>> = (0..CLIENTS).map(|_| None).collect();
    // Operations given up on that have not taken effect yet: they may, later.
    let mut floating: Vec<Op> = Vec::new();
    let mut invoked = 0;
    let total = 1 + rng.below(OPS_MAX as u64) as usize;
    while invoked < total || in_flight.iter().any(Option::is_some) {
        let client = rng.below(CLIENTS) as usize;
        if rng.below(6) == 0 && !floating.is_empty() {
            let op = floating.swap_remove(rng.below(floating.len() as u64) as usize);
            register.take_effect(&mut rng, &op, invoked);
            continue;
        }
        match in_flight[client].take() {
            None if invoked < total => {
                let op = match rng.below(10) {
                    0..=3 => Op::Read,
                    4..=6 => Op::Write(pick_value(&mut rng, invoked)),
                    7 => Op::Erase,
                    _ => Op::CompareAndSet {
                        expected: pick_content(&mut rng, invoked),
                        new: pick_value(&mut rng, invoked),
                    },
                };
                invoked += 1;
                in_flight[client] =
                    Some(InFlight { pending: history.invoke(client as u64, "k", op.clone()), op, effect: None });
            }
            None => {}
            Some(mut f) if f.effect.is_none() && rng.below(2) == 0 => {
                f.effect = Some(register.take_effect(&mut rng, &f.op, invoked));
                in_flight[client] = Some(f);
            }
            Some(f) => match (f.effect, rng.below(6)) {
                (None, 0) => f.pending.fail(),
                (None, 1) => {
                    floating.push(f.op);
                    f.pending.unknown();
                }
                (Some(_), 0) => f.pending.unknown(),
                (Some(_), 1) if rng.below(4) == 0 => f.pending.fail(),
                (effect, _) => {
                    let ret = effect.unwrap_or_else(|| register.take_effect(&mut rng, &f.op, invoked));
                    f.pending.ok(ret);
                }
            },
        }
    }
    history
}

/// The checker and the brute-force reference agree on every history, and both verdicts occur
/// often enough for the agreement to mean something.
#[test]
fn the_checker_agrees_with_brute_force() {
    let (mut yes, mut no) = (0, 0);
    for seed in 0..HISTORIES {
        let history = generate(seed);
        let ops = plain(&history.ops());
        let expected = linearizable(&ops, 0, &None, &mut HashSet::new());
        let verdict = check_linearizable(&history, &CheckOptions::default());
        assert!(
            !matches!(verdict, Verdict::Unknown { .. }) && verdict.is_linearizable() == expected,
            "seed {seed}: reference says linearizable: {expected}, checker: {verdict}\n{}",
            history.dump_text()
        );
        if expected {
            yes += 1;
        } else {
            no += 1;
        }
    }
    assert!(yes > HISTORIES / 5 && no > HISTORIES / 5, "{yes} linearizable, {no} not");
}
