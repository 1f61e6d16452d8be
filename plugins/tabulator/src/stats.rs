//! The tabulator's value: running statistics in a fixed little-endian layout.
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | count, `u64` |
//! | 8 | 8 | min, `f64` |
//! | 16 | 8 | max, `f64` |
//! | 24 | 8 | sum, `f64` |
//!
//! A value of 32 zero bytes is the empty tally, so create-on-demand makes a valid one.
//! Invariants, checked whenever a value is read and (in debug builds) before one is written:
//! with a count of 0 every byte is zero; otherwise min, max and sum are finite and
//! `min <= max`.

use std::fmt;

use ferrite_plugin::PluginError;

/// The bytes of a tabulator value.
pub const VALUE_BYTES: usize = 32;

const COUNT_OFFSET: usize = 0;
const MIN_OFFSET: usize = 8;
const MAX_OFFSET: usize = 16;
const SUM_OFFSET: usize = 24;
const FIELD_BYTES: usize = 8;

const _: () = assert!(MIN_OFFSET == COUNT_OFFSET + FIELD_BYTES);
const _: () = assert!(MAX_OFFSET == MIN_OFFSET + FIELD_BYTES);
const _: () = assert!(SUM_OFFSET == MAX_OFFSET + FIELD_BYTES);
const _: () = assert!(VALUE_BYTES == SUM_OFFSET + FIELD_BYTES);

/// The statistics of the samples added so far.
///
/// The sum is kept, and the mean computed from it, rather than a running mean: a sum is exact
/// whenever the samples and their total are representable (integers below 2^53, halves, ...),
/// so the mean of 4, -2, 10.5 and 1.5 is 3.5, where a running mean (`mean += (x - mean) / n`)
/// rounds at every step and answers 3.4999999999999996. Both accumulate about the same error
/// on general data. The sum's cost is that it can overflow where a running mean cannot; that
/// takes a total beyond ±1.8e308, and is refused like the counter's overflow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub count: u64,
    pub min: f64,
    pub max: f64,
    pub sum: f64,
}

impl Stats {
    /// No samples: the all-zero value.
    pub const EMPTY: Stats = Stats { count: 0, min: 0.0, max: 0.0, sum: 0.0 };

    /// Reads a value, refusing one of another size or one that breaks the invariants (a value
    /// some other writer put there): adding to it would only compound the damage.
    pub fn decode(bytes: &[u8]) -> Result<Stats, PluginError> {
        let bytes: &[u8; VALUE_BYTES] = bytes.try_into().map_err(|_| {
            PluginError::invalid(format!("tabulator: the value is {} bytes, not {VALUE_BYTES}", bytes.len()))
        })?;
        let field = |offset: usize| {
            let mut field = [0u8; FIELD_BYTES];
            field.copy_from_slice(&bytes[offset..offset + FIELD_BYTES]);
            field
        };
        let stats = Stats {
            count: u64::from_le_bytes(field(COUNT_OFFSET)),
            min: f64::from_le_bytes(field(MIN_OFFSET)),
            max: f64::from_le_bytes(field(MAX_OFFSET)),
            sum: f64::from_le_bytes(field(SUM_OFFSET)),
        };
        stats
            .check()
            .map_err(|problem| PluginError::invalid(format!("tabulator: not a tabulator value: {problem}")))?;
        Ok(stats)
    }

    pub fn encode(&self) -> [u8; VALUE_BYTES] {
        debug_assert_eq!(self.check(), Ok(()), "{self:?}");
        let mut bytes = [0u8; VALUE_BYTES];
        bytes[COUNT_OFFSET..MIN_OFFSET].copy_from_slice(&self.count.to_le_bytes());
        bytes[MIN_OFFSET..MAX_OFFSET].copy_from_slice(&self.min.to_le_bytes());
        bytes[MAX_OFFSET..SUM_OFFSET].copy_from_slice(&self.max.to_le_bytes());
        bytes[SUM_OFFSET..VALUE_BYTES].copy_from_slice(&self.sum.to_le_bytes());
        bytes
    }

    fn check(&self) -> Result<(), String> {
        if self.count == 0 {
            // Bits, not `==`: -0.0 would pass `== 0.0` but is not what a fresh value holds.
            let zero = [self.min, self.max, self.sum].iter().all(|field| field.to_bits() == 0);
            return if zero { Ok(()) } else { Err(format!("count 0 with non-zero fields {self:?}")) };
        }
        if ![self.min, self.max, self.sum].iter().all(|field| field.is_finite()) {
            return Err(format!("a non-finite field in {self:?}"));
        }
        if self.min > self.max {
            return Err(format!("min above max in {self:?}"));
        }
        Ok(())
    }

    /// The mean of the samples; 0 with none (the answer text says `-` then).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        // The rounded sum of n equal samples divided by n can land an ulp outside [min, max];
        // the true mean never does.
        (self.sum / self.count as f64).clamp(self.min, self.max)
    }

    /// The tally with one more sample, which the payload parser has checked is finite.
    pub fn with_sample(self, sample: f64) -> Result<Stats, PluginError> {
        debug_assert!(sample.is_finite(), "{sample}");
        let count = self
            .count
            .checked_add(1)
            .ok_or_else(|| PluginError::invalid("tabulator: the count would overflow 64 bits"))?;
        if self.count == 0 {
            // The empty tally's zeros are placeholders, not samples to compare with.
            return Ok(Stats { count, min: sample, max: sample, sum: sample });
        }
        let sum = self.sum + sample;
        if !sum.is_finite() {
            return Err(PluginError::invalid(format!("tabulator: {} + {sample:?} overflows an f64", self.sum)));
        }
        Ok(Stats { count, min: self.min.min(sample), max: self.max.max(sample), sum })
    }
}

/// The answer text: `count=N min=A max=B mean=C`, each number the shortest text that reads back
/// as the same `f64` (Rust's `{:?}`: `2.5`, `3.0`, `1e300`); `-` for min, max and mean when the
/// count is 0, since they are undefined and a `0` would read as a real minimum.
impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.count == 0 {
            return write!(f, "count=0 min=- max=- mean=-");
        }
        write!(f, "count={} min={:?} max={:?} mean={:?}", self.count, self.min, self.max, self.mean())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Encoding puts each field at its documented offset, and decoding reads it back.
    #[test]
    fn layout_round_trips_at_the_documented_offsets() {
        let stats = Stats { count: 3, min: -1.5, max: 4.0, sum: 3.0 };
        let bytes = stats.encode();
        assert_eq!(bytes[0..8], 3u64.to_le_bytes());
        assert_eq!(bytes[8..16], (-1.5f64).to_le_bytes());
        assert_eq!(bytes[16..24], 4.0f64.to_le_bytes());
        assert_eq!(bytes[24..32], 3.0f64.to_le_bytes());
        assert_eq!(Stats::decode(&bytes), Ok(stats));
        assert_eq!(Stats::decode(&[0; VALUE_BYTES]), Ok(Stats::EMPTY));
    }

    /// Values that break the invariants are refused rather than added to.
    #[test]
    fn decode_refuses_inconsistent_values() {
        let mut empty_with_min = Stats::EMPTY.encode();
        empty_with_min[MIN_OFFSET..MAX_OFFSET].copy_from_slice(&1.0f64.to_le_bytes());
        let mut nan_sum = Stats { count: 1, min: 1.0, max: 1.0, sum: 1.0 }.encode();
        nan_sum[SUM_OFFSET..].copy_from_slice(&f64::NAN.to_le_bytes());
        let mut min_above_max = Stats { count: 2, min: 1.0, max: 2.0, sum: 3.0 }.encode();
        min_above_max[MIN_OFFSET..MAX_OFFSET].copy_from_slice(&3.0f64.to_le_bytes());
        for bytes in [empty_with_min, nan_sum, min_above_max] {
            let error = Stats::decode(&bytes).expect_err("inconsistent");
            assert!(error.message().contains("not a tabulator value"), "{error}");
        }
        let error = Stats::decode(&[0; 31]).expect_err("wrong size");
        assert!(error.message().contains("31 bytes"), "{error}");
    }

    fn tally(samples: &[f64]) -> Result<Stats, PluginError> {
        samples.iter().try_fold(Stats::EMPTY, |stats, &sample| stats.with_sample(sample))
    }

    /// Samples whose sum is representable give the exact mean, in any order; min and max follow.
    #[test]
    fn exact_mean_from_the_sum() {
        let stats = tally(&[4.0, -2.0, 10.5, 1.5]).expect("adds");
        assert_eq!(stats, Stats { count: 4, min: -2.0, max: 10.5, sum: 14.0 });
        assert_eq!(stats.mean(), 3.5);
        assert_eq!(tally(&[1.5, 10.5, -2.0, 4.0]).expect("adds").mean(), 3.5);
    }

    /// The mean never leaves [min, max], even when the rounded sum of equal samples would put
    /// it an ulp outside.
    #[test]
    fn mean_stays_within_min_and_max() {
        let stats = tally(&[0.1; 10]).expect("adds");
        assert_ne!(stats.sum / 10.0, 0.1, "the rounded sum is what this test is about");
        assert_eq!(stats.mean(), 0.1);
    }

    /// A sum that would overflow, or a count that would wrap, is an error.
    #[test]
    fn overflow_is_an_error() {
        let error = tally(&[f64::MAX, f64::MAX]).expect_err("the sum overflows");
        assert!(error.message().contains("overflows"), "{error}");
        assert_eq!(tally(&[f64::MAX, -f64::MAX]).expect("no overflow").mean(), 0.0);
        let full = Stats { count: u64::MAX, min: 1.0, max: 1.0, sum: 1.0 };
        assert!(full.with_sample(1.0).is_err());
    }

    /// The answer text, for an empty and a non-empty tally.
    #[test]
    fn answer_text() {
        assert_eq!(Stats::EMPTY.to_string(), "count=0 min=- max=- mean=-");
        let stats = Stats { count: 2, min: 0.5, max: 1e300, sum: 6.0 };
        assert_eq!(stats.to_string(), "count=2 min=0.5 max=1e300 mean=3.0");
    }
}
