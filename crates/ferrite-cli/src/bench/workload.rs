//! The pure parts of a benchmark run: the random stream, the kind of each operation (the
//! workload mixes, YCSB's among them) and the key numbers inserts take. Which key an operation
//! touches is `distribution`'s. No I/O here, so all of it is unit-tested.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::distribution::Distribution;

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

    /// A number in `[0, 1)` with 53 random bits, the precision of an `f64`.
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The kind of one measured operation. Each is one request, except read-modify-write: a get and
/// then a put of the same key, timed together as YCSB times it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Get,
    /// Replaces the value of a key that exists (YCSB's "update").
    Put,
    /// Stores a key that did not exist before the run (YCSB's "insert").
    Insert,
    /// Up to N keys in order from a start key (YCSB's "scan").
    Scan,
    /// A get, then a put of the same key (YCSB's "read-modify-write").
    ReadModifyWrite,
    Erase,
    /// Runs the pool's plugin chain on a key (an Active Data Object invocation).
    Invoke,
}

impl Op {
    /// Every kind, in the order reports list them.
    pub const ALL: [Op; 7] = [Op::Get, Op::Put, Op::Insert, Op::Scan, Op::ReadModifyWrite, Op::Erase, Op::Invoke];

    /// The name reports use for the kind.
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Put => "put",
            Op::Insert => "insert",
            Op::Scan => "scan",
            Op::ReadModifyWrite => "rmw",
            Op::Erase => "erase",
            Op::Invoke => "invoke",
        }
    }
}

/// Chooses each operation's kind: one kind always, or one of two with a given percentage. Every
/// workload here (put, get, mixed, erase, invoke and the six YCSB core workloads) mixes at most two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    first: Op,
    /// Share of `first`, in percent; the rest is `second`.
    first_percent: u8,
    second: Op,
}

impl Mix {
    pub const ALL_PUTS: Mix = Mix::only(Op::Put);
    pub const ALL_GETS: Mix = Mix::only(Op::Get);

    /// Every operation is `op`.
    pub const fn only(op: Op) -> Mix {
        Mix { first: op, first_percent: 100, second: op }
    }

    /// `first_percent` of operations are `first`, the rest `second`.
    pub fn split(first: Op, first_percent: u8, second: Op) -> Mix {
        assert!(first_percent <= 100, "a percentage is at most 100, got {first_percent}");
        match first_percent {
            100 => Mix::only(first),
            0 => Mix::only(second),
            _ => Mix { first, first_percent, second },
        }
    }

    /// `read_percent` of requests are gets, the rest puts (`--workload mixed`).
    pub fn reads(read_percent: u8) -> Mix {
        Mix::split(Op::Get, read_percent, Op::Put)
    }

    /// Percentage of `op` among the operations.
    pub fn percent(self, op: Op) -> u8 {
        if self.first_percent == 100 {
            return if op == self.first { 100 } else { 0 };
        }
        match op {
            op if op == self.first => self.first_percent,
            op if op == self.second => 100 - self.first_percent,
            _ => 0,
        }
    }

    /// The kinds this mix sends, in report order.
    pub fn ops(self) -> Vec<Op> {
        Op::ALL.into_iter().filter(|&op| self.percent(op) > 0).collect()
    }

    /// Whether the mix sends `op` at all.
    pub fn sends(self, op: Op) -> bool {
        self.percent(op) > 0
    }

    /// The next operation's kind. A pure workload draws no number, so a `put` run's key stream does
    /// not depend on whether it was started as `mixed --read-percent 0`.
    pub fn choose(self, rng: &mut SplitMix64) -> Op {
        match self.first_percent {
            100 => self.first,
            percent if rng.below(100) < u64::from(percent) => self.first,
            _ => self.second,
        }
    }
}

/// The YCSB core workloads (Cooper et al., SoCC 2010, and the `workloads/workload[a-f]` files of
/// the YCSB repository), with YCSB's operation names mapped onto ours: read = get, update = put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ycsb {
    /// Update heavy: 50% reads, 50% updates (a session store recording recent actions).
    A,
    /// Read mostly: 95% reads, 5% updates (photo tagging).
    B,
    /// Read only (a user-profile cache).
    C,
    /// Read latest: 95% reads, 5% inserts, reads skewed towards recent inserts (status updates).
    D,
    /// Short ranges: 95% scans of 1 to 100 keys, 5% inserts (threaded conversations).
    E,
    /// Read-modify-write: 50% reads, 50% read-modify-writes (a user database).
    F,
}

impl Ycsb {
    pub fn mix(self) -> Mix {
        match self {
            Ycsb::A => Mix::split(Op::Get, 50, Op::Put),
            Ycsb::B => Mix::split(Op::Get, 95, Op::Put),
            Ycsb::C => Mix::only(Op::Get),
            Ycsb::D => Mix::split(Op::Get, 95, Op::Insert),
            Ycsb::E => Mix::split(Op::Scan, 95, Op::Insert),
            Ycsb::F => Mix::split(Op::Get, 50, Op::ReadModifyWrite),
        }
    }

    /// YCSB's `requestdistribution` for the workload: `latest` for D, `zipfian` for the others.
    pub fn default_distribution(self) -> Distribution {
        match self {
            Ycsb::D => Distribution::Latest,
            _ => Distribution::Zipfian,
        }
    }
}

/// Longest YCSB-E scan, in keys: YCSB's `maxscanlength` default. Each scan's length is uniform in
/// 1..=this (`scanlengthdistribution=uniform`).
pub const SCAN_LENGTH_MAX: u32 = 100;

/// Key numbers handed to inserts, and how many of them are known to be stored.
///
/// Inserts take the numbers after the preloaded key space (`keys`, `keys + 1`, ...) from one
/// shared counter. Reads may only pick keys that are certainly present, so the key space a read
/// chooses from grows only over the unbroken prefix of acknowledged inserts: with requests in
/// flight on several connections, insert `n + 1` may be answered before insert `n`, and a read of
/// `n` in between would miss. YCSB's `AcknowledgedCounterGenerator` does the same. Only inserts
/// (5% of YCSB D and E) touch the lock.
#[derive(Debug)]
pub struct Inserts {
    next: AtomicU64,
    /// Every number below this has been acknowledged.
    present: AtomicU64,
    /// Acknowledged numbers above `present`, waiting for the gap below them to close.
    early: Mutex<BTreeSet<u64>>,
    /// First number that no longer fits the key width.
    end: u64,
}

impl Inserts {
    /// Inserts after `keys` preloaded keys, with numbers below `end`.
    pub fn new(keys: u64, end: u64) -> Inserts {
        Inserts { next: AtomicU64::new(keys), present: AtomicU64::new(keys), early: Mutex::default(), end }
    }

    /// The number of the next key to insert, or `None` once the key width is exhausted.
    pub fn claim(&self) -> Option<u64> {
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        (number < self.end).then_some(number)
    }

    /// Records that the insert of `number` was answered (successfully or not: a failed insert
    /// must not hold back the others forever; reads of it are then misses, counted as errors).
    pub fn acknowledge(&self, number: u64) {
        let mut early = self.early.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut present = self.present.load(Ordering::Relaxed);
        if number != present {
            early.insert(number);
            return;
        }
        present += 1;
        while early.remove(&present) {
            present += 1;
        }
        self.present.store(present, Ordering::Release);
    }

    /// Keys `0..present()` are all stored.
    pub fn present(&self) -> u64 {
        self.present.load(Ordering::Acquire)
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
    let mut value = Vec::with_capacity(value_size);
    value.extend_from_slice(&PATTERN[..PATTERN.len().min(value_size)]);
    // Doubling by copies of what is there already: a 1 GiB value in a few dozen large copies
    // rather than a billion single bytes. Every copy starts at a multiple of the pattern's length,
    // so the pattern runs on unbroken.
    while value.len() < value_size {
        let take = value.len().min(value_size - value.len());
        value.extend_from_within(..take);
    }
    value
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

    /// The doubling fill writes the same bytes as repeating the pattern one byte at a time.
    #[test]
    fn value_pattern_repeats_unbroken_at_any_length() {
        let naive = |size: usize| b"ferrite-bench-value-".iter().copied().cycle().take(size).collect::<Vec<u8>>();
        for size in [0, 1, 7, 19, 20, 21, 39, 40, 41, 1000, 4096, 65_537] {
            assert_eq!(value_pattern(size), naive(size), "{size} bytes");
        }
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
        assert!((0..1_000).all(|_| Mix::ALL_PUTS.choose(&mut rng) == Op::Put));
        assert!((0..1_000).all(|_| Mix::ALL_GETS.choose(&mut rng) == Op::Get));
        assert_eq!(Mix::reads(0), Mix::ALL_PUTS);
        assert_eq!(Mix::reads(100), Mix::ALL_GETS);
    }

    /// With a seeded generator the mix is exact for that seed and close to the asked percentage.
    #[test]
    fn mixed_workload_follows_the_read_percentage() {
        for percent in [1u8, 10, 50, 90, 99] {
            let mix = Mix::reads(percent);
            let mut rng = SplitMix64::new(42);
            let draws = 100_000;
            let gets = (0..draws).filter(|_| mix.choose(&mut rng) == Op::Get).count();
            let expected = draws * usize::from(percent) / 100;
            // Binomial standard deviation is at most 158 here; 800 is five of them.
            assert!(gets.abs_diff(expected) < 800, "{percent}%: {gets} gets of {draws}");
        }
        let sequence = |seed| {
            let mut rng = SplitMix64::new(seed);
            (0..64).map(|_| Mix::reads(30).choose(&mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(sequence(5), sequence(5), "the same seed gives the same mix");
    }

    #[test]
    #[should_panic(expected = "at most 100")]
    fn percentages_above_100_are_a_bug() {
        let _ = Mix::reads(101);
    }

    /// Each YCSB workload sends the operations of its definition, in its proportions.
    #[test]
    fn ycsb_mixes_follow_the_core_workload_definitions() {
        let expected: [(Ycsb, &[(Op, u8)]); 6] = [
            (Ycsb::A, &[(Op::Get, 50), (Op::Put, 50)]),
            (Ycsb::B, &[(Op::Get, 95), (Op::Put, 5)]),
            (Ycsb::C, &[(Op::Get, 100)]),
            (Ycsb::D, &[(Op::Get, 95), (Op::Insert, 5)]),
            (Ycsb::E, &[(Op::Insert, 5), (Op::Scan, 95)]),
            (Ycsb::F, &[(Op::Get, 50), (Op::ReadModifyWrite, 50)]),
        ];
        for (workload, parts) in expected {
            let mix = workload.mix();
            let ops: Vec<Op> = parts.iter().map(|(op, _)| *op).collect();
            assert_eq!(mix.ops(), ops, "{workload:?}");
            for (op, percent) in parts {
                assert_eq!(mix.percent(*op), *percent, "{workload:?} {op:?}");
            }
            assert_eq!(Op::ALL.iter().map(|&op| u32::from(mix.percent(op))).sum::<u32>(), 100, "{workload:?}");
            // And the draws follow the proportions: within five binomial deviations.
            let mut rng = SplitMix64::new(11);
            let draws = 100_000u32;
            let mut counts = [0u32; Op::ALL.len()];
            let slot = |op: Op| Op::ALL.iter().position(|&kind| kind == op).expect("every op is in ALL");
            for _ in 0..draws {
                counts[slot(mix.choose(&mut rng))] += 1;
            }
            for op in Op::ALL {
                let expected = draws * u32::from(mix.percent(op)) / 100;
                assert!(counts[slot(op)].abs_diff(expected) < 800, "{workload:?} {op:?}: {counts:?}");
            }
        }
        assert_eq!(Ycsb::D.default_distribution(), Distribution::Latest);
        for workload in [Ycsb::A, Ycsb::B, Ycsb::C, Ycsb::E, Ycsb::F] {
            assert_eq!(workload.default_distribution(), Distribution::Zipfian);
        }
    }

    #[test]
    fn op_names() {
        let names: Vec<&str> = Op::ALL.iter().map(|op| op.name()).collect();
        assert_eq!(names, ["get", "put", "insert", "scan", "rmw", "erase", "invoke"]);
    }

    /// Reads see an insert only once every insert before it was answered, whatever the order the
    /// answers come in.
    #[test]
    fn inserts_become_visible_as_an_unbroken_prefix() {
        let inserts = Inserts::new(100, 105);
        let claimed: Vec<u64> = (0..5).map(|_| inserts.claim().expect("room for five")).collect();
        assert_eq!(claimed, [100, 101, 102, 103, 104]);
        assert_eq!(inserts.claim(), None, "the key width is exhausted");
        assert_eq!(inserts.present(), 100);
        inserts.acknowledge(102);
        inserts.acknowledge(101);
        assert_eq!(inserts.present(), 100, "100 is still in flight");
        inserts.acknowledge(100);
        assert_eq!(inserts.present(), 103);
        inserts.acknowledge(104);
        assert_eq!(inserts.present(), 103);
        inserts.acknowledge(103);
        assert_eq!(inserts.present(), 105);
    }

    #[test]
    fn values_have_the_asked_size() {
        assert_eq!(value_pattern(0), b"");
        assert_eq!(value_pattern(7), b"ferrite");
        assert_eq!(value_pattern(16).len(), 16);
        assert_eq!(value_pattern(45).len(), 45);
    }
}
