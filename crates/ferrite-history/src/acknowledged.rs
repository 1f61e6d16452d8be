//! The acknowledged-write check: a cheap, direct test of durability under faults, that needs
//! only the history and one read of every key once the faults are over.

use std::collections::BTreeMap;
use std::fmt;

use crate::bytes::{Content, Key, Value};
use crate::history::{History, OpRecord};
use crate::observe::{by_key, list_ops, unwritten_reads, UnwrittenRead};

/// Something a history and its final reads show that an honest store cannot have done.
#[derive(Clone, PartialEq, Eq, Debug)]
pub enum Anomaly {
    /// A read saw a value nothing wrote.
    UnwrittenRead(UnwrittenRead),
    /// The final content of a key was written by no operation that may have taken effect.
    UnwrittenFinalValue {
        /// The key.
        key: Key,
        /// Its final content.
        value: Value,
        /// Operations that would have written it but are known not to have.
        failed_writes: Vec<OpRecord>,
    },
    /// The final content of a key is older than acknowledged writes to it.
    LostWrite {
        /// The key.
        key: Key,
        /// Its final content.
        final_value: Option<Value>,
        /// The latest acknowledged writer of that content (`None`: the key's initial absence).
        final_writer: Option<OpRecord>,
        /// Acknowledged writers invoked after `final_writer` completed: their effect is gone.
        overwritten_by: Vec<OpRecord>,
    },
    /// A key with acknowledged writers has no final read.
    MissingFinalRead {
        /// The key.
        key: Key,
        /// Its last acknowledged writer.
        last_acknowledged: OpRecord,
    },
}

/// The anomalies found, in key order (never empty).
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Anomalies(pub Vec<Anomaly>);

/// Checks that every acknowledged write is still visible in `final_reads` (each key's content
/// read after the faults are over, `None` for absent), and that no read saw a value nothing
/// wrote.
///
/// A *writer* of a key is an operation that changes it when it takes effect: a write, an erase
/// (which writes absence), a compare-and-set that swapped or may have. A writer is
/// *acknowledged* when it ended ok, and *indeterminate* when it ended unknown or is still
/// pending; failed operations, and compare-and-sets answered "not swapped", write nothing.
/// Every key starts absent, as if an acknowledged writer of absence had completed before the
/// history began.
///
/// For each key whose final content `F` is given:
/// - if an indeterminate writer of `F` exists, `F` is accepted: that writer may have taken
///   effect last of all;
/// - otherwise `F` must come from an acknowledged writer `P` (or the initial absence) such that
///   no acknowledged writer of the key was invoked after `P` completed. Such a later writer
///   took effect after `P` did, so if `F` were still `P`'s, the later write would be lost
///   ([`Anomaly::LostWrite`]);
/// - `F` written by no writer at all (only by failed operations, or by none) is
///   [`Anomaly::UnwrittenFinalValue`].
///
/// Every acknowledged read (and every swapped compare-and-set) must also have seen a value
/// written by a writer invoked before it returned ([`Anomaly::UnwrittenRead`]), and every key
/// with an acknowledged writer must have a final read ([`Anomaly::MissingFinalRead`]).
///
/// The check is necessary for linearizability but far from sufficient: a stale read in the
/// middle of a run passes it. [`crate::check_linearizable`] judges the whole history.
pub fn check_acknowledged<K: Into<Key>>(
    history: &History,
    final_reads: impl IntoIterator<Item = (K, Option<Value>)>,
) -> Result<(), Anomalies> {
    let ops = history.ops();
    let keys = by_key(&ops);
    let finals: BTreeMap<Key, Option<Value>> =
        final_reads.into_iter().map(|(key, value)| (key.into(), value)).collect();
    let mut anomalies = Vec::new();
    for (key, key_ops) in &keys {
        anomalies.extend(unwritten_reads(key_ops).into_iter().map(Anomaly::UnwrittenRead));
        match finals.get(*key) {
            Some(final_value) => anomalies.extend(judge_final(key, key_ops, final_value.as_ref())),
            None => {
                let last = key_ops.iter().filter(|r| is_acknowledged_writer(r)).max_by_key(|r| completed_seq(r));
                if let Some(last) = last {
                    anomalies
                        .push(Anomaly::MissingFinalRead { key: (*key).clone(), last_acknowledged: (*last).clone() });
                }
            }
        }
    }
    for (key, value) in &finals {
        if let (false, Some(value)) = (keys.contains_key(key), value) {
            anomalies.push(Anomaly::UnwrittenFinalValue {
                key: key.clone(),
                value: value.clone(),
                failed_writes: Vec::new(),
            });
        }
    }
    if anomalies.is_empty() {
        Ok(())
    } else {
        Err(Anomalies(anomalies))
    }
}

fn is_acknowledged_writer(record: &OpRecord) -> bool {
    record.is_ok() && record.written().is_some()
}

fn completed_seq(record: &OpRecord) -> u64 {
    record.completed.map_or(u64::MAX, |stamp| stamp.seq)
}

/// The rules for one key's final content `last`, given its operations.
fn judge_final(key: &Key, ops: &[&OpRecord], last: Option<&Value>) -> Option<Anomaly> {
    let producers: Vec<&OpRecord> = ops.iter().copied().filter(|r| r.written() == Some(last)).collect();
    if producers.iter().any(|r| r.is_indeterminate()) {
        return None;
    }
    if let (true, Some(value)) = (producers.is_empty(), last) {
        let failed_writes = ops.iter().filter(|r| r.op.writes() == Some(last)).map(|r| (*r).clone()).collect();
        return Some(Anomaly::UnwrittenFinalValue { key: key.clone(), value: value.clone(), failed_writes });
    }
    // The producer least likely to have been overwritten: the one that completed last. The
    // initial absence (no producer) completed before every operation.
    let final_writer = producers.into_iter().max_by_key(|r| completed_seq(r));
    let done = final_writer.map_or(0, completed_seq);
    let overwritten_by: Vec<OpRecord> = ops
        .iter()
        .filter(|r| is_acknowledged_writer(r) && (final_writer.is_none() || r.invoked.seq > done))
        .map(|r| (*r).clone())
        .collect();
    if overwritten_by.is_empty() {
        return None;
    }
    Some(Anomaly::LostWrite {
        key: key.clone(),
        final_value: last.cloned(),
        final_writer: final_writer.cloned(),
        overwritten_by,
    })
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anomaly::UnwrittenRead(read) => read.fmt(f),
            Anomaly::UnwrittenFinalValue { key, value, failed_writes } => {
                writeln!(
                    f,
                    "key {key}: the final read saw {value}, which no operation that may have taken effect wrote"
                )?;
                if !failed_writes.is_empty() {
                    f.write_str("  its writes were reported as not applied:\n")?;
                    list_ops(f, failed_writes)?;
                }
                Ok(())
            }
            Anomaly::LostWrite { key, final_value, final_writer, overwritten_by } => {
                write!(
                    f,
                    "key {key}: lost acknowledged writes: the final read saw {}, ",
                    Content(final_value.as_ref())
                )?;
                match final_writer {
                    Some(writer) => writeln!(f, "written by\n    {writer}")?,
                    None => f.write_str("the key's initial absence,\n")?,
                }
                f.write_str("  but these acknowledged writers were invoked after that and are gone:\n")?;
                list_ops(f, overwritten_by)
            }
            Anomaly::MissingFinalRead { key, last_acknowledged } => {
                writeln!(f, "key {key}: acknowledged writes but no final read; the last one:")?;
                writeln!(f, "    {last_acknowledged}")
            }
        }
    }
}

impl fmt::Display for Anomalies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} anomalies in the history:", self.0.len())?;
        for anomaly in &self.0 {
            anomaly.fmt(f)?;
        }
        Ok(())
    }
}

impl std::error::Error for Anomalies {}
