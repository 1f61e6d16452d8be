//! The pure parts of a benchmark run: the random stream, which key each request touches, and
//! whether it reads or writes. No I/O here, so all of it is unit-tested.

/// SplitMix64 (Steele, Lea and Flood, 2014; the seeder of the xoshiro family): one `u64` of
/// state, an add and three multiply-xorshift steps per number. A benchmark needs speed and
/// reproducibility from its generator, not cryptographic strength, so a dozen lines here beat a
/// new dependency.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64 { state: seed }
    }

    /// A generator for worker `index` of a run seeded with `seed`. Each worker draws from its
    /// own stream, so no state is shared on the hot path and a run is reproducible per worker.
    /// The seed is hashed with the index rather than added to it, so that run `seed` worker 1
    /// and run `seed + 1` worker 0 do not replay the same keys.
    pub fn for_worker(seed: u64, index: u64) -> SplitMix64 {
        let mut mixer = SplitMix64::new(seed ^ index.wrapping_mul(0xA076_1D64_78BD_642F));
        SplitMix64::new(mixer.next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`, by Lemire's multiply-shift: no division, and a bias of at most
    /// `bound / 2^64`, far below anything a benchmark could notice.
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "below(0) has no possible result");
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }
}

/// The kind of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Put,
    Get,
}

/// Chooses each request's kind: always `Put`, always `Get`, or `Get` with a given percentage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpMix {
    read_percent: u8,
}

impl OpMix {
    pub const ALL_PUTS: OpMix = OpMix { read_percent: 0 };
    pub const ALL_GETS: OpMix = OpMix { read_percent: 100 };

    /// `read_percent` of requests are gets, the rest puts.
    pub fn reads(read_percent: u8) -> OpMix {
        assert!(read_percent <= 100, "a percentage is at most 100, got {read_percent}");
        OpMix { read_percent }
    }

    pub fn read_percent(self) -> u8 {
        self.read_percent
    }

    /// The next request's kind. Pure workloads draw no number, so a `put` run's key stream does
    /// not depend on whether it was started as `mixed --read-percent 0`.
    pub fn choose(self, rng: &mut SplitMix64) -> Op {
        match self.read_percent {
            0 => Op::Put,
            100 => Op::Get,
            percent if rng.below(100) < u64::from(percent) => Op::Get,
            _ => Op::Put,
        }
    }
}

/// Decimal digits needed to write `n`.
pub fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// Writes `n` into `key` as zero-padded decimal filling the whole buffer (42 in 8 bytes is
/// `00000042`), so every key of a run has the same width and the buffer is reused from request
/// to request. Returns `false`, leaving `key` unspecified, when `n` has more digits than fit.
pub fn format_key(n: u64, key: &mut [u8]) -> bool {
    let mut rest = n;
    for byte in key.iter_mut().rev() {
        *byte = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    rest == 0
}

/// The value every put stores: `value_size` bytes of a printable pattern, so a value read back
/// with `ferrite get` is recognisable.
pub fn value_pattern(value_size: usize) -> Vec<u8> {
    const PATTERN: &[u8] = b"ferrite-bench-value-";
    PATTERN.iter().copied().cycle().take(value_size).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generator is the published SplitMix64: same numbers as the reference C code
    /// (the sequence for seed 1234567 is the one the `rand_xoshiro` crate tests against).
    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        let mut rng = SplitMix64::new(1_234_567);
        let expected = [
            6_457_827_717_110_365_317,
            3_203_168_211_198_807_973,
            9_817_491_932_198_370_423,
            4_593_380_528_125_082_431,
        ];
        for value in expected {
            assert_eq!(rng.next_u64(), value);
        }
    }

    /// A seed fixes the stream; different workers of one run get different streams.
    #[test]
    fn streams_are_reproducible_and_distinct_per_worker() {
        let draw = |seed, worker| {
            let mut rng = SplitMix64::for_worker(seed, worker);
            (0..8).map(|_| rng.below(100_000)).collect::<Vec<_>>()
        };
        assert_eq!(draw(7, 0), draw(7, 0));
        assert_ne!(draw(7, 0), draw(7, 1));
        assert_ne!(draw(7, 1), draw(8, 0));
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = SplitMix64::new(3);
        let mut seen = [false; 10];
        for _ in 0..1_000 {
            let n = rng.below(10);
            assert!(n < 10);
            seen[n as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "1,000 draws from 0..10 should hit every value");
        assert_eq!(SplitMix64::new(3).below(1), 0);
    }

    /// Keys are fixed-width zero-padded decimals, and a number too wide for the key is refused
    /// rather than silently truncated (which would make distinct keys collide).
    #[test]
    fn keys_are_zero_padded_to_the_key_size() {
        let mut key = [0u8; 8];
        assert!(format_key(42, &mut key));
        assert_eq!(&key, b"00000042");
        assert!(format_key(0, &mut key));
        assert_eq!(&key, b"00000000");
        assert!(format_key(99_999_999, &mut key));
        assert_eq!(&key, b"99999999");
        assert!(!format_key(100_000_000, &mut key));

        let mut short = [0u8; 3];
        assert!(format_key(7, &mut short));
        assert_eq!(&short, b"007");
        assert!(!format_key(1_000, &mut short));

        let mut wide = [0u8; 24];
        assert!(format_key(u64::MAX, &mut wide));
        assert_eq!(&wide, b"000018446744073709551615");
    }

    #[test]
    fn digit_counts() {
        assert_eq!(decimal_digits(0), 1);
        assert_eq!(decimal_digits(9), 1);
        assert_eq!(decimal_digits(10), 2);
        assert_eq!(decimal_digits(99_999), 5);
        assert_eq!(decimal_digits(100_000), 6);
        assert_eq!(decimal_digits(u64::MAX), 20);
    }

    #[test]
    fn pure_workloads_never_draw_the_other_kind() {
        let mut rng = SplitMix64::new(1);
        assert!((0..1_000).all(|_| OpMix::ALL_PUTS.choose(&mut rng) == Op::Put));
        assert!((0..1_000).all(|_| OpMix::ALL_GETS.choose(&mut rng) == Op::Get));
        assert_eq!(OpMix::reads(0), OpMix::ALL_PUTS);
        assert_eq!(OpMix::reads(100), OpMix::ALL_GETS);
    }

    /// With a seeded generator the mix is exact for that seed and close to the asked percentage.
    #[test]
    fn mixed_workload_follows_the_read_percentage() {
        for percent in [1u8, 10, 50, 90, 99] {
            let mix = OpMix::reads(percent);
            let mut rng = SplitMix64::new(42);
            let draws = 100_000;
            let gets = (0..draws).filter(|_| mix.choose(&mut rng) == Op::Get).count();
            let expected = draws * usize::from(percent) / 100;
            // Binomial standard deviation is at most 158 here; 800 is five of them.
            assert!(gets.abs_diff(expected) < 800, "{percent}%: {gets} gets of {draws}");
        }
        let sequence = |seed| {
            let mut rng = SplitMix64::new(seed);
            (0..64).map(|_| OpMix::reads(30).choose(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(sequence(5), sequence(5), "the same seed gives the same mix");
    }

    #[test]
    #[should_panic(expected = "at most 100")]
    fn percentages_above_100_are_a_bug() {
        let _ = OpMix::reads(101);
    }

    #[test]
    fn values_have_the_asked_size() {
        assert_eq!(value_pattern(0), b"");
        assert_eq!(value_pattern(7), b"ferrite");
        assert_eq!(value_pattern(16).len(), 16);
        assert_eq!(value_pattern(45).len(), 45);
    }
}
