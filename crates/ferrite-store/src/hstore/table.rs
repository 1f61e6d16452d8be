//! The hopscotch hash table (MCAS section 3.2.2; Herlihy, Shavit and Tzafrir, "Hopscotch
//! Hashing", DISC 2008) and its growth by segments.
//!
//! Addressing is TBB-style: segment 0 holds buckets `[0, B)`, segment `k >= 1` holds
//! `[B·2^(k-1), B·2^k)`, so the high set bit of a bucket index names its segment and the bits
//! below it the position inside. Segments live wherever the region allocator put them; the header's
//! directory lists their offsets. A key's home bucket is `hash mod buckets`; the key lives at most
//! `NEIGHBOURHOOD - 1` buckets after it (wrapping at the end of the table), and the home bucket's hop
//! bitmap says where.
//!
//! Growth adds one segment as large as the whole table, doubling it. Every entry then either stays
//! where it is or moves exactly one old table length forward, keeping its distance from its home:
//! an entry at distance `d` from home `h` gets the new home `h` or `h + T` (the hash bit that the
//! larger mask now sees decides), and its new position `(new home + d) mod 2T` is then either its
//! old position or that plus `T`. No two entries can collide (their old positions differ modulo
//! `T`), no displacement is needed, and hop bitmaps split bit for bit. About half the entries move,
//! all into the new segment (or, for those that had wrapped around the end, back to where they
//! were); the old segments are never copied.

use std::collections::BTreeMap;

use super::layout::{
    index, read_u64, slice, Occupant, ENTRY_BYTES, HOP_MASK, HOP_WORD_OFFSET, NEIGHBOURHOOD, OCCUPANT_BYTES,
    OCCUPANT_OFFSET, USED_BIT,
};

/// How far past its home bucket an insert looks for a free entry before it gives up and grows the
/// table instead. Displacement costs one entry move per `NEIGHBOURHOOD - 1` buckets of distance, so
/// this bounds an insert's moves to about 70.
pub(crate) const PROBE_BUCKETS_MAX: u64 = 4096;

/// Where the table's buckets are: the volatile mirror of the header's geometry and directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Table {
    base_log2: u32,
    segments: Vec<u64>,
}

impl Table {
    pub(crate) fn new(base_log2: u32, segments: Vec<u64>) -> Table {
        assert!(!segments.is_empty(), "a table has segment 0");
        Table { base_log2, segments }
    }

    pub(crate) fn segments(&self) -> &[u64] {
        &self.segments
    }

    pub(crate) fn buckets(&self) -> u64 {
        1 << (self.base_log2 + self.segments.len() as u32 - 1)
    }

    pub(crate) fn mask(&self) -> u64 {
        self.buckets() - 1
    }

    pub(crate) fn home(&self, hash: u64) -> u64 {
        hash & self.mask()
    }

    /// Buckets from `from` forward to `to`, wrapping at the end of the table.
    pub(crate) fn distance(&self, from: u64, to: u64) -> u64 {
        to.wrapping_sub(from) & self.mask()
    }

    /// First bucket of segment `k`.
    pub(crate) fn segment_first_bucket(base_log2: u32, k: usize) -> u64 {
        if k == 0 {
            0
        } else {
            1 << (base_log2 + k as u32 - 1)
        }
    }

    pub(crate) fn segment_buckets(base_log2: u32, k: usize) -> u64 {
        if k == 0 {
            1 << base_log2
        } else {
            1 << (base_log2 + k as u32 - 1)
        }
    }

    pub(crate) fn segment_bytes(&self, k: usize) -> u64 {
        Table::segment_buckets(self.base_log2, k) * ENTRY_BYTES
    }

    /// Region offset of bucket `bucket`'s entry. The segment is the position of the high bit
    /// above the base (TBB's segment index).
    pub(crate) fn entry_offset(&self, bucket: u64) -> u64 {
        debug_assert!(bucket < self.buckets());
        let above_base = bucket >> self.base_log2;
        let k = if above_base == 0 { 0 } else { 64 - above_base.leading_zeros() as usize };
        self.segments[k] + (bucket - Table::segment_first_bucket(self.base_log2, k)) * ENTRY_BYTES
    }

    /// The table after adding a segment at `offset`.
    pub(crate) fn grown(&self, offset: u64) -> Table {
        let mut segments = self.segments.clone();
        segments.push(offset);
        Table { base_log2: self.base_log2, segments }
    }

    pub(crate) fn word(&self, bytes: &[u8], bucket: u64) -> u64 {
        read_u64(bytes, index(self.entry_offset(bucket)) + HOP_WORD_OFFSET)
    }

    pub(crate) fn occupant(&self, bytes: &[u8], bucket: u64) -> Occupant {
        let at = index(self.entry_offset(bucket));
        Occupant::decode(&bytes[at..at + ENTRY_BYTES as usize])
    }

    /// The key and value bytes of the pair in `bucket`, or `None` if the entry points outside the
    /// region (only a corrupt region does; `open` refuses those).
    pub(crate) fn pair<'a>(&self, bytes: &'a [u8], bucket: u64, occupant: &Occupant) -> Option<(&'a [u8], &'a [u8])> {
        let entry = self.entry_offset(bucket);
        let (key_at, key_len) = occupant.key_range(entry);
        let (value_at, value_len) = occupant.value_range(entry);
        Some((slice(bytes, key_at, key_len)?, slice(bytes, value_at, value_len)?))
    }

    /// The bucket holding `key`, whose hash is `hash`.
    pub(crate) fn find(&self, bytes: &[u8], hash: u64, key: &[u8]) -> Option<u64> {
        let home = self.home(hash);
        let mask = self.mask();
        let mut hop = self.word(bytes, home) & HOP_MASK;
        while hop != 0 {
            let bucket = (home + u64::from(hop.trailing_zeros())) & mask;
            hop &= hop - 1;
            let at = index(self.entry_offset(bucket));
            let entry = &bytes[at..at + ENTRY_BYTES as usize];
            let occupant = Occupant::decode(entry);
            if occupant.hash == hash
                && occupant.key_len as usize == key.len()
                && self.pair(bytes, bucket, &occupant).is_some_and(|(stored, _)| stored == key)
            {
                return Some(bucket);
            }
        }
        None
    }
}

/// One displacement step: the pair in `from`, whose home is `home`, moves to the free `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Move {
    pub home: u64,
    pub from: u64,
    pub to: u64,
}

/// What the insertion planner needs to see of a table, so one planner serves the table in pool
/// memory (seen through an overlay of planned moves) and the in-DRAM image of a grown table.
pub(crate) trait HopView {
    fn buckets(&self) -> u64;
    fn is_used(&self, bucket: u64) -> bool;
    fn hop(&self, bucket: u64) -> u64;
    fn apply(&mut self, mv: Move);
}

/// Finds an entry for a new pair whose home is `home`: the nearest free entry, brought into the
/// neighbourhood by hopscotch displacement. Returns the moves (already applied to `view`) and the
/// free entry, or `None` if no free entry is near enough or no displacement can bring one closer;
/// then the table must grow.
pub(crate) fn plan_insert<V: HopView>(view: &mut V, home: u64) -> Option<(Vec<Move>, u64)> {
    let buckets = view.buckets();
    let mask = buckets - 1;
    let mut distance = (0..buckets.min(PROBE_BUCKETS_MAX)).find(|d| !view.is_used((home + d) & mask))?;
    let mut moves = Vec::new();
    while distance >= NEIGHBOURHOOD {
        let free = (home + distance) & mask;
        // The farthest bucket whose neighbourhood still covers `free` first, and its earliest
        // pair, so each move brings the free entry as close to `home` as it can.
        let mv = (1..NEIGHBOURHOOD).rev().find_map(|back| {
            let bucket = free.wrapping_sub(back) & mask;
            let before_free = view.hop(bucket) & ((1 << back) - 1);
            (before_free != 0).then(|| {
                let from = (bucket + u64::from(before_free.trailing_zeros())) & mask;
                Move { home: bucket, from, to: free }
            })
        })?;
        view.apply(mv);
        moves.push(mv);
        distance -= free.wrapping_sub(mv.from) & mask;
    }
    Some((moves, (home + distance) & mask))
}

fn moved_hop(hop: u64, mv: Move, mask: u64) -> u64 {
    let old = mv.from.wrapping_sub(mv.home) & mask;
    let new = mv.to.wrapping_sub(mv.home) & mask;
    (hop & !(1 << old)) | (1 << new)
}

/// The table in pool memory, with planned moves recorded on the side and nothing written.
#[derive(Debug)]
pub(crate) struct Overlay<'a> {
    bytes: &'a [u8],
    table: &'a Table,
    hop: BTreeMap<u64, u64>,
    used: BTreeMap<u64, bool>,
}

impl<'a> Overlay<'a> {
    pub(crate) fn new(bytes: &'a [u8], table: &'a Table) -> Overlay<'a> {
        Overlay { bytes, table, hop: BTreeMap::new(), used: BTreeMap::new() }
    }
}

impl HopView for Overlay<'_> {
    fn buckets(&self) -> u64 {
        self.table.buckets()
    }

    fn is_used(&self, bucket: u64) -> bool {
        self.used.get(&bucket).copied().unwrap_or_else(|| self.table.word(self.bytes, bucket) & USED_BIT != 0)
    }

    fn hop(&self, bucket: u64) -> u64 {
        self.hop.get(&bucket).copied().unwrap_or_else(|| self.table.word(self.bytes, bucket) & HOP_MASK)
    }

    fn apply(&mut self, mv: Move) {
        let hop = moved_hop(self.hop(mv.home), mv, self.table.mask());
        self.hop.insert(mv.home, hop);
        self.used.insert(mv.from, false);
        self.used.insert(mv.to, true);
    }
}

/// Where a pair in an [`Image`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The pair now in this bucket of the table in pool memory.
    Old(u64),
    /// The pair being inserted.
    New,
}

/// A table's hop bitmaps and occupancy in DRAM, for planning growth before anything is written.
#[derive(Debug, Clone)]
pub(crate) struct Image {
    hop: Vec<u64>,
    /// Per bucket: the hash and source of the pair in it.
    slots: Vec<Option<(u64, Source)>>,
}

impl Image {
    pub(crate) fn read(bytes: &[u8], table: &Table) -> Image {
        let buckets = table.buckets();
        let mut hop = Vec::with_capacity(index(buckets));
        let mut slots = Vec::with_capacity(index(buckets));
        for bucket in 0..buckets {
            let at = index(table.entry_offset(bucket));
            let word = read_u64(bytes, at);
            hop.push(word & HOP_MASK);
            slots.push((word & USED_BIT != 0).then(|| (read_u64(bytes, at + OCCUPANT_OFFSET), Source::Old(bucket))));
        }
        Image { hop, slots }
    }

    pub(crate) fn hop_word(&self, bucket: u64) -> u64 {
        let b = index(bucket);
        self.hop[b] | if self.slots[b].is_some() { USED_BIT } else { 0 }
    }

    pub(crate) fn source(&self, bucket: u64) -> Option<Source> {
        self.slots[index(bucket)].map(|(_, source)| source)
    }

    /// Doubles the table (see the module documentation): every pair keeps its distance from its
    /// home, so it stays put or moves forward by exactly the old length.
    pub(crate) fn split(&mut self) {
        let old = self.slots.len() as u64;
        let (old_mask, new_mask) = (old - 1, 2 * old - 1);
        let mut hop = vec![0; index(2 * old)];
        let mut slots = vec![None; index(2 * old)];
        for (bucket, slot) in self.slots.iter().enumerate() {
            if let Some((hash, source)) = *slot {
                let distance = (bucket as u64).wrapping_sub(hash & old_mask) & old_mask;
                let home = hash & new_mask;
                let to = (home + distance) & new_mask;
                debug_assert!(to == bucket as u64 || to == bucket as u64 + old);
                debug_assert!(slots[index(to)].is_none());
                slots[index(to)] = Some((hash, source));
                hop[index(home)] |= 1 << distance;
            }
        }
        self.hop = hop;
        self.slots = slots;
    }

    /// Puts the new pair, with home `home`, in the free bucket `bucket`.
    pub(crate) fn place(&mut self, home: u64, bucket: u64, hash: u64) {
        self.place_from(home, bucket, hash, Source::New);
    }

    fn place_from(&mut self, home: u64, bucket: u64, hash: u64, source: Source) {
        let mask = self.buckets() - 1;
        debug_assert!(self.slots[index(bucket)].is_none());
        self.slots[index(bucket)] = Some((hash, source));
        self.hop[index(home)] |= 1 << (bucket.wrapping_sub(home) & mask);
    }
}

impl HopView for Image {
    fn buckets(&self) -> u64 {
        self.slots.len() as u64
    }

    fn is_used(&self, bucket: u64) -> bool {
        self.slots[index(bucket)].is_some()
    }

    fn hop(&self, bucket: u64) -> u64 {
        self.hop[index(bucket)]
    }

    fn apply(&mut self, mv: Move) {
        let mask = self.buckets() - 1;
        self.hop[index(mv.home)] = moved_hop(self.hop[index(mv.home)], mv, mask);
        self.slots[index(mv.to)] = self.slots[index(mv.from)].take();
    }
}

/// Copies the occupant bytes of every entry of `table`, in bucket order, so a growth can rewrite
/// the segments they live in.
pub(crate) fn snapshot_occupants(bytes: &[u8], table: &Table) -> Vec<[u8; OCCUPANT_BYTES]> {
    (0..table.buckets())
        .map(|bucket| {
            let at = index(table.entry_offset(bucket)) + OCCUPANT_OFFSET;
            bytes[at..at + OCCUPANT_BYTES].try_into().expect("56 bytes")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// An image built from explicit hashes, each inserted through the planner; pair `i` is
    /// labelled `Source::Old(i)` so tests can follow it.
    fn image_with(buckets: u64, hashes: &[u64]) -> Option<Image> {
        let mut image = Image { hop: vec![0; buckets as usize], slots: vec![None; buckets as usize] };
        for (i, hash) in hashes.iter().enumerate() {
            let home = hash & (buckets - 1);
            let (_, bucket) = plan_insert(&mut image, home)?;
            image.place_from(home, bucket, *hash, Source::Old(i as u64));
        }
        Some(image)
    }

    /// Every pair sits within the neighbourhood of its home and its home's bitmap says where.
    fn assert_consistent(image: &Image) {
        let mask = image.buckets() - 1;
        let mut bits = 0;
        for bucket in 0..image.buckets() {
            bits += image.hop(bucket).count_ones();
            if let Some((hash, _)) = image.slots[bucket as usize] {
                let home = hash & mask;
                let distance = bucket.wrapping_sub(home) & mask;
                assert!(distance < NEIGHBOURHOOD, "bucket {bucket} is {distance} from home {home}");
                assert!(image.hop(home) & (1 << distance) != 0, "home {home} does not list bucket {bucket}");
            }
        }
        assert_eq!(bits as usize, image.slots.iter().flatten().count());
    }

    #[test]
    fn segment_addressing_follows_the_high_bit() {
        let table = Table::new(6, vec![1 << 20, 1 << 16, 1 << 24, 1 << 12]);
        assert_eq!(table.buckets(), 512);
        assert_eq!(table.entry_offset(0), 1 << 20);
        assert_eq!(table.entry_offset(63), (1 << 20) + 63 * 64);
        assert_eq!(table.entry_offset(64), 1 << 16);
        assert_eq!(table.entry_offset(127), (1 << 16) + 63 * 64);
        assert_eq!(table.entry_offset(128), 1 << 24);
        assert_eq!(table.entry_offset(256), 1 << 12);
        assert_eq!(table.entry_offset(511), (1 << 12) + 255 * 64);
        let total: u64 = (0..4).map(|k| Table::segment_buckets(6, k)).sum();
        assert_eq!(total, table.buckets());
    }

    /// 62 pairs share home 0 and fill its neighbourhood but one; a pair homed at bucket 0 then
    /// needs a displacement: the free entry at 63 is too far, so a pair homed nearer moves.
    #[test]
    fn displacement_brings_a_far_free_entry_into_the_neighbourhood() {
        // Homes 0 x 62 fill buckets 0..62, then a pair homed at 1 lands at 62 (distance 61).
        let mut hashes = vec![0u64; 62];
        hashes.push(1);
        let mut image = image_with(128, &hashes).expect("fits without displacement");
        assert_eq!(image.source(63), None);
        let (moves, bucket) = plan_insert(&mut image, 0).expect("the pair homed at 1 can move to 63");
        assert_eq!(moves, vec![Move { home: 1, from: 62, to: 63 }]);
        assert_eq!(bucket, 62);
        image.place(0, bucket, 0);
        assert_consistent(&image);
    }

    /// When every pair between the home and the free entry is homed so that it cannot move closer
    /// to the free entry, the planner gives up (and the caller grows the table).
    #[test]
    fn displacement_fails_when_no_pair_can_move() {
        let hashes = vec![0u64; 63];
        let mut image = image_with(128, &hashes).expect("63 pairs fill the neighbourhood exactly");
        assert_eq!(plan_insert(&mut image, 0), None);
        assert_eq!(image_with(128, &[5; 64]).map(|_| ()), None);
    }

    /// Growth splits without displacement, keeps every pair's distance, and wrapped pairs (those
    /// that went past the end of the table) land correctly in the doubled table.
    #[test]
    fn split_keeps_neighbourhoods() {
        // Home 126 of 128 with more pairs than fit before the end: some wrap to buckets 0, 1...
        let hashes: Vec<u64> = (0..10).map(|i| 126 | (i % 2) << 7).collect();
        let mut image = image_with(128, &hashes).expect("fits");
        assert!(image.is_used(0) && image.is_used(1), "pairs wrapped around");
        image.split();
        assert_eq!(image.buckets(), 256);
        assert_consistent(&image);
        // Pair 0 (hash bit 7 clear, distance 0) stays at 126; pair 1 (bit set, distance 1) moves
        // to 255; pair 2 (bit clear, distance 2) had wrapped to 0 and moves to 128; pair 3 (bit
        // set, distance 3) had wrapped to 1 and wraps to 1 again.
        assert_eq!(image.source(126), Some(Source::Old(0)));
        assert_eq!(image.source(255), Some(Source::Old(1)));
        assert_eq!(image.source(128), Some(Source::Old(2)));
        assert_eq!(image.source(1), Some(Source::Old(3)));
    }

    proptest! {
        /// Any set of hashes that fits stays consistent through inserts and repeated splits, and
        /// each split leaves every pair at its old bucket or that plus the old length.
        #[test]
        fn inserts_and_splits_stay_consistent(hashes in proptest::collection::vec(any::<u64>(), 0..110)) {
            let Some(mut image) = image_with(128, &hashes) else { return Ok(()) };
            assert_consistent(&image);
            for _ in 0..3 {
                let before = image.clone();
                image.split();
                assert_consistent(&image);
                for bucket in 0..before.buckets() {
                    if let Some(source) = before.source(bucket) {
                        let stayed = image.source(bucket) == Some(source);
                        let moved = image.source(bucket + before.buckets()) == Some(source);
                        prop_assert!(stayed != moved);
                    }
                }
            }
        }
    }
}
