//! Which key an operation touches: uniform, zipfian or latest, as YCSB chooses them.
//!
//! The zipfian generator is YCSB's (`site.ycsb.generator.ZipfianGenerator`), which is the
//! rejection-free method of Gray et al., "Quickly generating billion-record synthetic databases"
//! (SIGMOD 1994), with YCSB's constant 0.99. Its "scrambled" form spreads the popular items over
//! the key space with a hash, so the hot keys are not all neighbours (which would put them in one
//! page, one pool or one range of a scan); "latest" makes the most recently inserted keys the
//! popular ones. A dozen lines of arithmetic, so no crate.

use super::workload::SplitMix64;

/// YCSB's `ZIPFIAN_CONSTANT`: item i (from 0) is drawn with probability proportional to
/// 1 / (i + 1)^0.99.
pub const ZIPFIAN_THETA: f64 = 0.99;

/// The item count YCSB's scrambled zipfian draws ranks from before hashing them onto the key
/// space (`ScrambledZipfianGenerator.ITEM_COUNT`), and zeta(10^10, 0.99) for it
/// (`ScrambledZipfianGenerator.ZETAN`), precomputed by YCSB because summing 10^10 terms is slow.
/// Using YCSB's constants keeps our skew the same as YCSB's for any key count.
const SCRAMBLED_ITEMS: u64 = 10_000_000_000;
const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// How operations choose their keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Distribution {
    /// Every key of the preloaded key space equally likely.
    Uniform,
    /// YCSB's scrambled zipfian over the preloaded key space: a few keys are very popular, and
    /// they are scattered over the key space.
    Zipfian,
    /// YCSB's "latest": zipfian over how recently a key was inserted, so the newest keys are the
    /// popular ones (YCSB D reads what was just written).
    Latest,
}

impl Distribution {
    pub fn name(self) -> &'static str {
        match self {
            Distribution::Uniform => "uniform",
            Distribution::Zipfian => "zipfian",
            Distribution::Latest => "latest",
        }
    }
}

/// Gray et al.'s zipfian generator over `0..items`: item 0 is the most popular.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Zipfian {
    items: u64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    /// 1 + 0.5^theta: draws below it (times zetan) are item 1.
    second_threshold: f64,
}

impl Zipfian {
    /// A generator over `0..items`, computing zeta(items, theta) (one power per item: fast for
    /// millions of items, which is what a benchmark preloads).
    pub fn new(items: u64, theta: f64) -> Zipfian {
        Zipfian::with_zetan(items, theta, zeta(items, theta))
    }

    /// A generator whose zeta(items, theta) is already known.
    pub fn with_zetan(items: u64, theta: f64, zetan: f64) -> Zipfian {
        assert!(items > 0, "a zipfian distribution needs at least one item");
        assert!(theta > 0.0 && theta < 1.0, "Gray's method needs 0 < theta < 1, got {theta}");
        let zeta2 = zeta(2, theta);
        Zipfian {
            items,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta: (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan),
            second_threshold: 1.0 + 0.5f64.powf(theta),
        }
    }

    /// An item in `0..items`.
    pub fn next(&self, rng: &mut SplitMix64) -> u64 {
        let u = rng.unit_f64();
        let uz = u * self.zetan;
        if uz < 1.0 || self.items == 1 {
            return 0;
        }
        if uz < self.second_threshold {
            return 1;
        }
        let item = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        // Rounding can reach `items` only at the very top of the unit interval.
        item.min(self.items - 1)
    }
}

/// zeta(n, theta) = sum over i in 1..=n of 1 / i^theta.
pub fn zeta(n: u64, theta: f64) -> f64 {
    (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum()
}

/// YCSB's `Utils.fnvhash64`: 64-bit FNV-1a over the eight little-endian bytes of `value`, made
/// non-negative as Java's `Math.abs` of the signed result.
pub fn ycsb_fnv_hash64(value: u64) -> u64 {
    const OFFSET_BASIS: u64 = 0xCBF2_9CE4_8422_2325;
    const PRIME: u64 = 1_099_511_628_211;
    let hash =
        value.to_le_bytes().iter().fold(OFFSET_BASIS, |hash, &octet| (hash ^ u64::from(octet)).wrapping_mul(PRIME));
    (hash as i64).unsigned_abs()
}

/// Chooses key numbers for one run. Cheap to copy: every worker has its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyChooser {
    kind: Distribution,
    /// The preloaded key space, `0..keys`.
    keys: u64,
    zipfian: Option<Zipfian>,
}

impl KeyChooser {
    pub fn new(kind: Distribution, keys: u64) -> KeyChooser {
        assert!(keys > 0, "a key space has at least one key");
        let zipfian = match kind {
            Distribution::Uniform => None,
            Distribution::Zipfian => Some(Zipfian::with_zetan(SCRAMBLED_ITEMS, ZIPFIAN_THETA, SCRAMBLED_ZETAN)),
            // Over the preloaded count, fixed for the run: YCSB grows this zipfian's item count
            // with every insert (recomputing zeta incrementally), which changes the skew by a
            // negligible amount over a run that inserts a few percent of the key space.
            Distribution::Latest => Some(Zipfian::new(keys, ZIPFIAN_THETA)),
        };
        KeyChooser { kind, keys, zipfian }
    }

    /// A key number. `present` is how many keys are certainly stored (`keys` plus the
    /// acknowledged inserts, see `workload::Inserts`); only `latest` looks beyond the preloaded
    /// key space, as in YCSB, where uniform and zipfian requests never target new keys.
    pub fn next(&self, rng: &mut SplitMix64, present: u64) -> u64 {
        debug_assert!(present >= self.keys, "the preloaded keys are always present");
        match (self.kind, &self.zipfian) {
            (Distribution::Uniform, _) | (_, None) => rng.below(self.keys),
            (Distribution::Zipfian, Some(zipfian)) => ycsb_fnv_hash64(zipfian.next(rng)) % self.keys,
            // The zipfian draw is below `keys`, hence below `present`.
            (Distribution::Latest, Some(zipfian)) => present - 1 - zipfian.next(rng),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// YCSB's precomputed constant is zeta(10^10, 0.99); check it against the sum's known
    /// asymptotic expansion rather than summing 10^10 terms: zeta(n, s) ~ zeta(s) + n^(1-s)/(1-s)
    /// + n^(-s)/2, and at 10^5 terms the direct sum is exact enough to pin zeta(0.99) itself.
    #[test]
    fn scrambled_zetan_is_zeta_of_ten_billion() {
        let n = 100_000f64;
        let theta = ZIPFIAN_THETA;
        let riemann = zeta(100_000, theta) - n.powf(1.0 - theta) / (1.0 - theta) - n.powf(-theta) / 2.0;
        let big = 1e10f64;
        let expected = riemann + big.powf(1.0 - theta) / (1.0 - theta) + big.powf(-theta) / 2.0;
        assert!((expected - SCRAMBLED_ZETAN).abs() < 1e-3, "{expected} vs {SCRAMBLED_ZETAN}");
    }

    #[test]
    fn zipfian_draws_stay_in_range() {
        for items in [1u64, 2, 3, 10, 1_000] {
            let zipfian = Zipfian::new(items, ZIPFIAN_THETA);
            let mut rng = SplitMix64::new(5);
            assert!((0..10_000).all(|_| zipfian.next(&mut rng) < items), "{items} items");
        }
        for kind in [Distribution::Uniform, Distribution::Zipfian, Distribution::Latest] {
            let chooser = KeyChooser::new(kind, 1_000);
            let mut rng = SplitMix64::new(6);
            assert!((0..10_000).all(|_| chooser.next(&mut rng, 1_000) < 1_000), "{kind:?}");
            assert!((0..10_000).all(|_| chooser.next(&mut rng, 1_500) < 1_500), "{kind:?}");
        }
        assert_eq!(KeyChooser::new(Distribution::Zipfian, 1).next(&mut SplitMix64::new(1), 1), 0);
    }

    /// With theta 0.99 over 1,000 items, item i has probability 1 / ((i + 1)^0.99 zeta): about
    /// 12.9% for the first, 6.5% for the second, and the top 10% of items take 68.5% of the
    /// draws. A fixed seed makes the counts exact; the bounds are loose around the
    /// theoretical values so a correct generator passes with any seed.
    #[test]
    fn zipfian_is_skewed_as_theory_says() {
        let items = 1_000u64;
        let zipfian = Zipfian::new(items, ZIPFIAN_THETA);
        let zetan = zeta(items, ZIPFIAN_THETA);
        let mut rng = SplitMix64::new(42);
        let draws = 200_000;
        let mut counts = vec![0u32; items as usize];
        for _ in 0..draws {
            counts[zipfian.next(&mut rng) as usize] += 1;
        }
        let share = |count: u32| f64::from(count) / f64::from(draws);
        let expect = |i: u64| 1.0 / ((i + 1) as f64).powf(ZIPFIAN_THETA) / zetan;
        assert!((share(counts[0]) - expect(0)).abs() < 0.005, "item 0: {} vs {}", share(counts[0]), expect(0));
        assert!((share(counts[1]) - expect(1)).abs() < 0.005, "item 1: {} vs {}", share(counts[1]), expect(1));
        let top_tenth: u32 = counts[..100].iter().sum();
        let expected_top: f64 = (0..100).map(expect).sum();
        // Gray's method is exact for the first two items and an approximation beyond them (about
        // 1% high for the top tenth here), which is what YCSB runs with.
        assert!((share(top_tenth) - expected_top).abs() < 0.02, "top 10%: {} vs {expected_top}", share(top_tenth));
        assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[500]);
    }

    /// Scrambling keeps the skew but moves the hot keys away from key 0, and apart.
    #[test]
    fn scrambled_zipfian_scatters_the_hot_keys() {
        let keys = 100_000u64;
        let chooser = KeyChooser::new(Distribution::Zipfian, keys);
        let mut rng = SplitMix64::new(7);
        let draws = 200_000;
        let mut counts = std::collections::HashMap::new();
        for _ in 0..draws {
            *counts.entry(chooser.next(&mut rng, keys)).or_insert(0u32) += 1;
        }
        let mut by_count: Vec<(u64, u32)> = counts.into_iter().collect();
        by_count.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        // The hottest key is YCSB's rank 0 hashed: 1 / 26.47 of the draws, about 3.8%.
        let hottest = by_count[0];
        assert_eq!(hottest.0, ycsb_fnv_hash64(0) % keys);
        let share = f64::from(hottest.1) / f64::from(draws);
        assert!((share - 1.0 / SCRAMBLED_ZETAN).abs() < 0.004, "hottest key share {share}");
        // Far more skewed than uniform (which would give each key 2 draws), and not clustered.
        let top: Vec<u64> = by_count[..10].iter().map(|(key, _)| *key).collect();
        assert!(by_count[9].1 > 100, "{:?}", &by_count[..10]);
        let spread = top.iter().max().expect("ten keys") - top.iter().min().expect("ten keys");
        assert!(spread > keys / 4, "the ten hottest keys are clustered: {top:?}");
    }

    /// "Latest" favours the newest keys, and follows the key space as inserts grow it.
    #[test]
    fn latest_prefers_recent_keys() {
        let chooser = KeyChooser::new(Distribution::Latest, 10_000);
        let mut rng = SplitMix64::new(8);
        // Theory: zeta(100) / zeta(10,000) = 51.8% of reads hit the newest 1%, and 1 / zeta(10,000)
        // = 9.8% hit the newest key.
        let recent = (0..10_000).filter(|_| chooser.next(&mut rng, 10_000) >= 9_900).count();
        assert!(recent.abs_diff(5_178) < 300, "{recent} of 10,000 reads hit the newest 1% of keys");
        let newest = (0..10_000).filter(|_| chooser.next(&mut rng, 12_000) == 11_999).count();
        assert!(newest.abs_diff(978) < 150, "the newest key drew {newest} of 10,000");
    }

    #[test]
    fn uniform_covers_the_key_space_evenly() {
        let chooser = KeyChooser::new(Distribution::Uniform, 10);
        let mut rng = SplitMix64::new(9);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[chooser.next(&mut rng, 10) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c.abs_diff(10_000) < 500), "{counts:?}");
    }

    /// The hash is YCSB's, byte for byte: FNV-1a 64 of the value's little-endian bytes.
    #[test]
    fn fnv_hash_matches_ycsb() {
        // FNV-1a 64 of eight zero bytes, 0xA8C7F832281A39C5, has its top bit set: YCSB's Math.abs
        // negates it.
        assert_eq!(ycsb_fnv_hash64(0), 0xA8C7_F832_281A_39C5u64.wrapping_neg());
        assert_ne!(ycsb_fnv_hash64(1), ycsb_fnv_hash64(0));
        assert!(ycsb_fnv_hash64(12_345) <= i64::MAX as u64);
    }
}
