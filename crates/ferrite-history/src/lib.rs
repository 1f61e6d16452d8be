//! Judges what clients observed during a cluster test with faults (Jepsen's approach: check the
//! history, not only the final state). Client threads record every operation they send and how
//! it ended in a shared [`History`]; afterwards [`check_acknowledged`] and
//! [`check_linearizable`] say whether an honest replicated store could have answered that way.
//!
//! # The model
//!
//! Every key is an independent register that starts absent. An operation ([`Op`]) reads it,
//! writes a value, erases it, or compares-and-sets it; keys and values are byte strings
//! ([`Key`], [`Value`]). Tests should write a distinct value in every write (for instance
//! `format!("{client}-{n}")`): then a read names the one write it saw, which makes violations
//! plain and the search fast. Repeated values are allowed and judged correctly, only slower.
//!
//! An operation spans from [`History::invoke`] (call it right before sending the request) to
//! the end of its [`PendingOp`] (right after the answer or the failure). All events of a
//! history take their numbers from one counter under one lock, so an operation that ended
//! before another was invoked really came first. That order is the only clock used: wall
//! times are recorded for reading only.
//!
//! How an operation ended ([`Outcome`]) is what the client knows:
//! - **ok** ([`PendingOp::ok`]): acknowledged; it took effect exactly once, at some instant
//!   between its invocation and its end, and returned what is recorded ([`Ret`]);
//! - **failed** ([`PendingOp::fail`]): definitely not applied, ever. Use it only where the
//!   protocol guarantees it: a `not_leader` answer, or an error that states nothing changed.
//!   A failed write whose value is later read is reported;
//! - **indeterminate** ([`PendingOp::unknown`], or dropping the handle, or never ending it):
//!   a timeout, a lost connection, a crash. It may have taken effect at any instant after its
//!   invocation, even long after the client gave up, or never. When in doubt, say unknown:
//!   only that is never wrong.
//!
//! # The checks
//!
//! [`check_acknowledged`] needs the history and one read of every key once the faults are over
//! (the final reads). It checks that every acknowledged write is still visible (the final
//! content of each key was written by an operation that could have been the last to take
//! effect) and that no read saw a value nothing wrote. Cheap and plain, but blind to a stale
//! read in the middle of a run; its exact rules are on the function.
//!
//! [`check_linearizable`] checks the whole history: is there, for each key, one order of its
//! operations that respects real time and that a single register could have produced? Record
//! the final reads as reads in the history as well, so that this check covers them too. Keys
//! are checked apart (linearizability is compositional, Herlihy & Wing 1990). For each key:
//! 1. reads of a value nothing wrote (before the read returned) are reported at once;
//! 2. exact reductions shrink what indeterminate operations may do: failed operations and
//!    indeterminate reads are dropped; an indeterminate write of a value nobody observed is
//!    dropped (unless a compare-and-set's answer could depend on it); an indeterminate write of a
//!    value written once and observed must have taken effect before the first observation
//!    returned; the rest *linger* (may take effect at any later point, or never), and
//!    interchangeable ones are tried in invocation order only;
//! 3. the search of Wing & Gong with Lowe's memoization, as in Porcupine (Anish Athalye) and
//!    Knossos (Kyle Kingsbury), looks for the order: depth first over the operations that may
//!    take effect next, never exploring twice the same (operations placed, register content)
//!    pair. Two exact prunings keep it near linear on real histories: a value written once may
//!    not be overwritten while an operation that saw it is still to be placed, and a lingering
//!    write is not followed directly by another write (it could as well go last).
//!
//! A key with no order gets a [`Violation`] that explains where the longest order the search
//! found got stuck: the operations placed last, what the key held, the operation that had to
//! take effect next and could not, and why (for instance the reads that saw the value it would
//! overwrite). A search that tries more than [`CheckOptions::step_budget`] moves stops with
//! [`Verdict::Unknown`], naming the key.
//!
//! # Limits
//!
//! - Deciding linearizability is NP-complete: many operations in flight at once, many
//!   repeated values or many indeterminate compare-and-sets can exhaust any budget. Thousands
//!   of operations per key with a few dozen clients and a tenth of answers lost take well
//!   under a second; the budget bounds the worst case, and memory grows with it (a small entry
//!   per state explored).
//! - Only single-key operations are modelled. Reads of several keys (find, count) and
//!   increments are not: record them as nothing, or as separate single-key reads.
//! - One history is one process's view: clients in other processes cannot be merged into it,
//!   since their events do not share its clock.
//!
//! # Example
//!
//! ```
//! use ferrite_history::{check_acknowledged, check_linearizable, CheckOptions, History, Op, Ret, Value};
//!
//! let history = History::new();
//! // In each client thread (`history.clone()` is another handle on the same history):
//! let write = history.invoke(1, "k", Op::Write("1-0".into()));
//! write.ok(Ret::Done); // the server answered
//! let read = history.invoke(2, "k", Op::Read);
//! read.ok(Ret::Read(Some("1-0".into())));
//! history.invoke(1, "k", Op::Write("1-1".into())).unknown(); // the connection broke
//!
//! // After the faults: read every key once more, and judge.
//! let last = history.invoke(0, "k", Op::Read);
//! last.ok(Ret::Read(Some("1-1".into())));
//! let finals = [("k", Some(Value::from("1-1")))];
//! if let Err(anomalies) = check_acknowledged(&history, finals) {
//!     panic!("{anomalies}\n{}", history.dump_text());
//! }
//! let verdict = check_linearizable(&history, &CheckOptions::default());
//! assert!(verdict.is_linearizable(), "{verdict}\n{}", history.summary());
//! ```

mod acknowledged;
mod bytes;
mod dump;
mod history;
mod linearizable;
mod observe;
mod summary;

pub use acknowledged::{check_acknowledged, Anomalies, Anomaly};
pub use bytes::{Key, Value};
pub use history::{History, Op, OpKind, OpRecord, Outcome, PendingOp, Ret, Stamp};
pub use linearizable::{check_linearizable, CheckOptions, Stuck, Verdict, Violation, DEFAULT_STEP_BUDGET};
pub use observe::UnwrittenRead;
pub use summary::{Counts, Summary};
