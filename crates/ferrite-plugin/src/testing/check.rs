//! The checking mode's comparison: bytes that differ between the pool before and after an
//! invocation, outside every range the plugin declared or the host wrote itself, are writes
//! the host could not have undone.

use std::ops::Range;

use super::arena::Arena;

/// Ranges (as pool offsets) where `after` differs from `before` outside `accounted`, merged
/// into runs of changed bytes.
pub(crate) fn undeclared_writes(before: &[u8], after: &Arena, accounted: &[Range<usize>]) -> Vec<Range<u64>> {
    let after = after.bytes(0, after.capacity());
    let mut covered = vec![false; before.len()];
    for range in accounted {
        let end = range.end.min(covered.len());
        if range.start < end {
            covered[range.start..end].fill(true);
        }
    }
    let mut runs: Vec<Range<u64>> = Vec::new();
    let changed = before.iter().zip(after).enumerate().filter(|&(offset, (old, new))| old != new && !covered[offset]);
    for (offset, _) in changed {
        let offset = offset as u64;
        match runs.last_mut() {
            Some(run) if run.end == offset => run.end += 1,
            _ => runs.push(offset..offset + 1),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Changes inside accounted ranges are fine; others come back as merged runs.
    #[test]
    fn reports_only_unaccounted_changes() {
        let mut arena = Arena::new(64);
        let before = arena.snapshot();
        arena.write(2, &[1, 1, 1]);
        arena.write(10, &[7, 7]);
        arena.write(20, &[9]);
        let runs = undeclared_writes(&before, &arena, &[10..12, 3..4]);
        assert_eq!(runs, vec![2..3, 4..5, 20..21]);
    }
}
