//! What both checkers need first: each key's operations apart, and the reads that saw a value no
//! write could have put there (the plainest loss of integrity, named before anything subtler).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use crate::bytes::{Content, Key, Value};
use crate::history::OpRecord;

/// How many operations a report lists before it says how many more there are.
const REPORT_OPS_MAX: usize = 8;

/// Each key's operations, in invocation order.
pub(crate) fn by_key(ops: &[OpRecord]) -> BTreeMap<&Key, Vec<&OpRecord>> {
    let mut keys: BTreeMap<&Key, Vec<&OpRecord>> = BTreeMap::new();
    for record in ops {
        keys.entry(&record.key).or_default().push(record);
    }
    keys
}

/// An acknowledged read (or swapped compare-and-set) that saw a value no operation that may
/// have taken effect wrote before the read returned.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct UnwrittenRead {
    /// The read.
    pub read: OpRecord,
    /// Operations that would have written that value but are known not to have: failed, or
    /// compare-and-sets that did not swap.
    pub failed_writes: Vec<OpRecord>,
    /// Operations that wrote that value, but were invoked only after the read returned.
    pub later_writes: Vec<OpRecord>,
}

/// The unwritten reads among one key's operations. Absence is always written (a key starts
/// absent), so only reads of values count.
pub(crate) fn unwritten_reads(ops: &[&OpRecord]) -> Vec<UnwrittenRead> {
    let mut writes_of: HashMap<&Value, Vec<&OpRecord>> = HashMap::new();
    for record in ops {
        if let Some(Some(value)) = record.op.writes() {
            writes_of.entry(value).or_default().push(record);
        }
    }
    let mut found = Vec::new();
    for read in ops {
        let Some(Some(value)) = read.observed() else { continue };
        let returned = read.completed.map_or(u64::MAX, |stamp| stamp.seq);
        let writes = writes_of.get(value).map_or(&[][..], Vec::as_slice);
        let (applied, not_applied): (Vec<&OpRecord>, Vec<&OpRecord>) =
            writes.iter().copied().partition(|w| w.written().is_some());
        if applied.iter().any(|w| w.invoked.seq < returned) {
            continue;
        }
        found.push(UnwrittenRead {
            read: (*read).clone(),
            failed_writes: not_applied.into_iter().cloned().collect(),
            later_writes: applied.into_iter().cloned().collect(),
        });
    }
    found
}

impl fmt::Display for UnwrittenRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seen = self.read.observed().flatten();
        writeln!(
            f,
            "key {}: saw {}, which no operation that may have taken effect wrote before it returned:",
            self.read.key,
            Content(seen)
        )?;
        writeln!(f, "    {}", self.read)?;
        if self.failed_writes.is_empty() && self.later_writes.is_empty() {
            return f.write_str("  no operation ever wrote it\n");
        }
        if !self.failed_writes.is_empty() {
            f.write_str("  its writes were reported as not applied:\n")?;
            list_ops(f, &self.failed_writes)?;
        }
        if !self.later_writes.is_empty() {
            f.write_str("  its writes were invoked only after the read returned:\n")?;
            list_ops(f, &self.later_writes)?;
        }
        Ok(())
    }
}

/// Lists operations one a line, indented, at most [`REPORT_OPS_MAX`] of them.
pub(crate) fn list_ops<'a>(f: &mut fmt::Formatter<'_>, ops: impl IntoIterator<Item = &'a OpRecord>) -> fmt::Result {
    let ops: Vec<&OpRecord> = ops.into_iter().collect();
    for record in ops.iter().take(REPORT_OPS_MAX) {
        writeln!(f, "    {record}")?;
    }
    if ops.len() > REPORT_OPS_MAX {
        writeln!(f, "    ... and {} more", ops.len() - REPORT_OPS_MAX)?;
    }
    Ok(())
}
