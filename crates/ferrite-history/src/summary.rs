//! Counts of what a run did, for a test's log: how many operations of each kind were
//! acknowledged, failed or left indeterminate.

use std::collections::BTreeMap;
use std::fmt;

use crate::history::{History, OpKind, Outcome};

/// How the operations of one kind ended.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Counts {
    /// Acknowledged.
    pub ok: usize,
    /// Definitely not applied.
    pub failed: usize,
    /// Unknown or still pending.
    pub indeterminate: usize,
}

/// [`Counts`] per kind of operation; kinds a run never used are left out.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct Summary {
    /// The counts, by kind.
    pub by_kind: BTreeMap<OpKind, Counts>,
}

impl History {
    /// Counts of ok, failed and indeterminate operations per kind.
    pub fn summary(&self) -> Summary {
        let mut summary = Summary::default();
        for record in self.ops() {
            let counts = summary.by_kind.entry(record.op.kind()).or_default();
            match record.outcome {
                Outcome::Ok(_) => counts.ok += 1,
                Outcome::Failed => counts.failed += 1,
                Outcome::Unknown | Outcome::Pending => counts.indeterminate += 1,
            }
        }
        summary
    }
}

/// One line per kind: `write: 120 ok, 3 failed, 2 indeterminate`.
impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.by_kind.is_empty() {
            return f.write_str("no operations");
        }
        let lines: Vec<String> = self
            .by_kind
            .iter()
            .map(|(kind, c)| format!("{kind}: {} ok, {} failed, {} indeterminate", c.ok, c.failed, c.indeterminate))
            .collect();
        f.write_str(&lines.join("\n"))
    }
}

#[cfg(test)]
mod tests {
    use crate::history::{History, Op, Ret};

    /// Each ending is counted under its kind, a dropped handle as indeterminate.
    #[test]
    fn counts_each_ending() {
        let history = History::new();
        history.invoke(1, "k", Op::Write("a".into())).ok(Ret::Done);
        history.invoke(1, "k", Op::Write("b".into())).fail();
        drop(history.invoke(1, "k", Op::Write("c".into())));
        history.invoke(2, "k", Op::Read).ok(Ret::Read(None));
        assert_eq!(
            history.summary().to_string(),
            "read: 1 ok, 0 failed, 0 indeterminate\nwrite: 1 ok, 1 failed, 1 indeterminate"
        );
    }
}
