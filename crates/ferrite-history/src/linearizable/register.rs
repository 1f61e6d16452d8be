//! The sequential specification every key must follow: one register, starting absent.

/// A register's content as the search sees it: 0 is absent, `i >= 1` the `i`-th distinct value of
/// the key (numbers compare and copy faster than byte strings).
pub(crate) type ValueId = u32;

/// The absent content.
pub(crate) const ABSENT: ValueId = 0;

/// One operation as the register applies it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Step {
    /// An acknowledged read that saw this content.
    Read(ValueId),
    /// A write or an erase (of [`ABSENT`]), acknowledged or not.
    Write(ValueId),
    /// A compare-and-set; `swapped` is `None` when its outcome is unknown.
    CompareAndSet { expected: ValueId, new: ValueId, swapped: Option<bool> },
}

impl Step {
    /// The content after this step, taken when the register holds `held`; `None` if the step
    /// cannot happen then (a read of something else, a swap that would not have matched).
    pub(crate) fn apply(self, held: ValueId) -> Option<ValueId> {
        match self {
            Step::Read(seen) => (seen == held).then_some(held),
            Step::Write(value) => Some(value),
            Step::CompareAndSet { expected, new, swapped: Some(true) } => (expected == held).then_some(new),
            Step::CompareAndSet { expected, swapped: Some(false), .. } => (expected != held).then_some(held),
            Step::CompareAndSet { expected, new, swapped: None } => Some(if expected == held { new } else { held }),
        }
    }
}

impl Step {
    /// The content this step shows the register held, if it is an acknowledged observation.
    pub(crate) fn observes(self) -> Option<ValueId> {
        match self {
            Step::Read(seen) => Some(seen),
            Step::CompareAndSet { expected, swapped: Some(true), .. } => Some(expected),
            Step::Write(_) | Step::CompareAndSet { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each step's precondition and effect, as a register defines them.
    #[test]
    fn steps_follow_a_register() {
        assert_eq!(Step::Read(1).apply(1), Some(1));
        assert_eq!(Step::Read(1).apply(2), None);
        assert_eq!(Step::Write(3).apply(1), Some(3));
        assert_eq!(Step::Write(ABSENT).apply(1), Some(ABSENT));
        let cas = |swapped| Step::CompareAndSet { expected: 1, new: 2, swapped };
        assert_eq!(cas(Some(true)).apply(1), Some(2));
        assert_eq!(cas(Some(true)).apply(3), None);
        assert_eq!(cas(Some(false)).apply(3), Some(3));
        assert_eq!(cas(Some(false)).apply(1), None);
        assert_eq!(cas(None).apply(1), Some(2));
        assert_eq!(cas(None).apply(3), Some(3));
    }
}
