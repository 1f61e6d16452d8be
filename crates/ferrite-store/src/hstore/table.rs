//! The hopscotch hash tables (MCAS section 3.2.2; Herlihy, Shavit and Tzafrir, "Hopscotch
//! Hashing", DISC 2008) that make up a pool's index.
//!
//! A pool's index is a fixed number of *subtables*; a key's hash picks one with its high 32 bits
//! and its home bucket inside it with its low 32 bits, both by scaling (`layout::scale`), so any
//! bucket count works and hash order is bucket order. A key lives at most `NEIGHBOURHOOD - 1`
//! buckets after its home (wrapping at the end of its subtable), and the home bucket's hop bitmap
//! says where.
//!
//! A subtable grows on its own, by rewriting it at 5/4 of its size: a growth is one bounded
//! transaction (a subtable has at most `BUCKETS_MAX` buckets), and the whole index's load stays
//! between 0.72 and 0.9 instead of falling to 0.44 after a doubling. The new layout is planned
//! in DRAM ([`Image`]) before anything is written.

use std::collections::BTreeMap;

use super::layout::{
    index, read_u32, scale, slice, Occupant, ENTRY_BYTES, HOP_OFFSET, IN_USE, META_OFFSET, NEIGHBOURHOOD,
    OCCUPANT_OFFSET,
};

/// How far past its home bucket an insert looks for a free entry before it gives up and grows the
/// subtable instead. Displacement costs one entry move per `NEIGHBOURHOOD - 1` buckets of
/// distance, so this bounds an insert's moves to about 33.
pub(crate) const PROBE_BUCKETS_MAX: u64 = 1024;

/// Most displacements one insert makes (each covers at least one bucket of the probe distance).
pub(crate) const MOVES_MAX: u64 = PROBE_BUCKETS_MAX;

/// Where one subtable's buckets are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Subtable {
    pub offset: u64,
    pub buckets: u64,
}

impl Subtable {
    /// The home bucket of a key whose hash keeps `tag` (its low 32 bits).
    pub(crate) fn home(&self, tag: u32) -> u64 {
        scale(tag, self.buckets)
    }

    /// `bucket + distance`, wrapping at the end of the subtable (`distance < buckets`).
    pub(crate) fn forward(&self, bucket: u64, distance: u64) -> u64 {
        wrap_forward(bucket, distance, self.buckets)
    }

    /// Buckets from `from` forward to `to`, wrapping at the end of the subtable.
    pub(crate) fn distance(&self, from: u64, to: u64) -> u64 {
        wrap_distance(from, to, self.buckets)
    }

    /// Region offset of bucket `bucket`'s entry.
    pub(crate) fn entry_offset(&self, bucket: u64) -> u64 {
        debug_assert!(bucket < self.buckets);
        self.offset + bucket * ENTRY_BYTES
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.buckets * ENTRY_BYTES
    }

    pub(crate) fn hop(&self, bytes: &[u8], bucket: u64) -> u32 {
        read_u32(bytes, index(self.entry_offset(bucket)) + HOP_OFFSET)
    }

    pub(crate) fn is_used(&self, bytes: &[u8], bucket: u64) -> bool {
        read_u32(bytes, index(self.entry_offset(bucket)) + META_OFFSET) & IN_USE != 0
    }

    pub(crate) fn occupant(&self, bytes: &[u8], bucket: u64) -> Occupant {
        let at = index(self.entry_offset(bucket));
        Occupant::decode(&bytes[at..at + ENTRY_BYTES as usize])
    }

    /// The occupant bytes of `bucket`, as a displacement or a growth copies them.
    pub(crate) fn occupant_bytes<'a>(&self, bytes: &'a [u8], bucket: u64) -> &'a [u8] {
        let at = index(self.entry_offset(bucket)) + OCCUPANT_OFFSET;
        &bytes[at..at + (ENTRY_BYTES as usize - OCCUPANT_OFFSET)]
    }

    /// The key and value bytes of the pair in `bucket`, or `None` if the entry points outside the
    /// region (only a corrupt region does; `open` refuses those).
    pub(crate) fn pair<'a>(&self, bytes: &'a [u8], bucket: u64, occupant: &Occupant) -> Option<(&'a [u8], &'a [u8])> {
        let entry = self.entry_offset(bucket);
        let (key_at, key_len) = occupant.key_range(entry);
        let (value_at, value_len) = occupant.value_range(entry);
        Some((slice(bytes, key_at, key_len)?, slice(bytes, value_at, value_len)?))
    }

    /// The bucket holding `key`, whose hash keeps `tag`.
    /// The bucket holding `key` (among client pairs, or among the engine's own allocations if
    /// `internal`), if present.
    pub(crate) fn find(&self, bytes: &[u8], tag: u32, key: &[u8], internal: bool) -> Option<u64> {
        let home = self.home(tag);
        let mut hop = self.hop(bytes, home);
        while hop != 0 {
            let bucket = self.forward(home, u64::from(hop.trailing_zeros()));
            hop &= hop - 1;
            let at = index(self.entry_offset(bucket));
            let entry = &bytes[at..at + ENTRY_BYTES as usize];
            let occupant = Occupant::decode(entry);
            if occupant.tag == tag
                && occupant.internal == internal
                && occupant.key_len as usize == key.len()
                && self.pair(bytes, bucket, &occupant).is_some_and(|(stored, _)| stored == key)
            {
                return Some(bucket);
            }
        }
        None
    }
}

fn wrap_forward(bucket: u64, distance: u64, buckets: u64) -> u64 {
    let to = bucket + distance;
    if to >= buckets {
        to - buckets
    } else {
        to
    }
}

fn wrap_distance(from: u64, to: u64, buckets: u64) -> u64 {
    if to >= from {
        to - from
    } else {
        to + buckets - from
    }
}

fn wrap_back(bucket: u64, distance: u64, buckets: u64) -> u64 {
    if bucket >= distance {
        bucket - distance
    } else {
        bucket + buckets - distance
    }
}

/// One displacement step: the pair in `from`, whose home is `home`, moves to the free `to`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Move {
    pub home: u64,
    pub from: u64,
    pub to: u64,
}

/// What the insertion planner needs to see of a table, so one planner serves a subtable in pool
/// memory (seen through an overlay of planned moves) and the in-DRAM image of a grown one.
pub(crate) trait HopView {
    fn buckets(&self) -> u64;
    fn is_used(&self, bucket: u64) -> bool;
    fn hop(&self, bucket: u64) -> u32;
    fn apply(&mut self, mv: Move);
}

/// Finds an entry for a new pair whose home is `home`: the nearest free entry, brought into the
/// neighbourhood by hopscotch displacement. Returns the moves (already applied to `view`) and the
/// free entry, or `None` if no free entry is near enough or no displacement can bring one closer;
/// then the subtable must grow.
pub(crate) fn plan_insert<V: HopView>(view: &mut V, home: u64) -> Option<(Vec<Move>, u64)> {
    let buckets = view.buckets();
    let mut distance = (0..buckets.min(PROBE_BUCKETS_MAX)).find(|d| !view.is_used(wrap_forward(home, *d, buckets)))?;
    let mut moves = Vec::new();
    while distance >= NEIGHBOURHOOD {
        let free = wrap_forward(home, distance, buckets);
        // The farthest bucket whose neighbourhood still covers `free` first, and its earliest
        // pair, so each move brings the free entry as close to `home` as it can.
        let mv = (1..NEIGHBOURHOOD).rev().find_map(|back| {
            let bucket = wrap_back(free, back, buckets);
            let before_free = view.hop(bucket) & ((1u32 << back) - 1);
            (before_free != 0).then(|| {
                let from = wrap_forward(bucket, u64::from(before_free.trailing_zeros()), buckets);
                Move { home: bucket, from, to: free }
            })
        })?;
        view.apply(mv);
        moves.push(mv);
        distance -= wrap_distance(mv.from, free, buckets);
    }
    Some((moves, wrap_forward(home, distance, buckets)))
}

/// The hop bitmap of `mv.home` after `mv`.
pub(crate) fn moved_hop(hop: u32, mv: Move, buckets: u64) -> u32 {
    let old = wrap_distance(mv.home, mv.from, buckets);
    let new = wrap_distance(mv.home, mv.to, buckets);
    (hop & !(1 << old)) | (1 << new)
}

/// A subtable in pool memory, with planned moves recorded on the side and nothing written.
#[derive(Debug)]
pub(crate) struct Overlay<'a> {
    bytes: &'a [u8],
    subtable: Subtable,
    hop: BTreeMap<u64, u32>,
    used: BTreeMap<u64, bool>,
}

impl<'a> Overlay<'a> {
    pub(crate) fn new(bytes: &'a [u8], subtable: Subtable) -> Overlay<'a> {
        Overlay { bytes, subtable, hop: BTreeMap::new(), used: BTreeMap::new() }
    }
}

impl HopView for Overlay<'_> {
    fn buckets(&self) -> u64 {
        self.subtable.buckets
    }

    fn is_used(&self, bucket: u64) -> bool {
        self.used.get(&bucket).copied().unwrap_or_else(|| self.subtable.is_used(self.bytes, bucket))
    }

    fn hop(&self, bucket: u64) -> u32 {
        self.hop.get(&bucket).copied().unwrap_or_else(|| self.subtable.hop(self.bytes, bucket))
    }

    fn apply(&mut self, mv: Move) {
        let hop = moved_hop(self.hop(mv.home), mv, self.subtable.buckets);
        self.hop.insert(mv.home, hop);
        self.used.insert(mv.from, false);
        self.used.insert(mv.to, true);
    }
}

/// Where a pair in an [`Image`] comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The pair now in this bucket of the subtable in pool memory.
    Old(u64),
    /// The pair being inserted.
    New,
}

/// A subtable's hop bitmaps and occupancy in DRAM, for planning its growth before anything is
/// written. At most `BUCKETS_MAX` buckets: a bounded buffer.
#[derive(Debug, Clone)]
pub(crate) struct Image {
    hop: Vec<u32>,
    /// Per bucket: the source of the pair in it.
    slots: Vec<Option<Source>>,
}

impl Image {
    /// An empty image of `buckets` buckets.
    pub(crate) fn empty(buckets: u64) -> Image {
        Image { hop: vec![0; index(buckets)], slots: vec![None; index(buckets)] }
    }

    /// The image of `old`'s pairs rehashed into `buckets` buckets, or `None` if some pair finds
    /// no place (then a larger size is tried).
    pub(crate) fn rehash(bytes: &[u8], old: Subtable, buckets: u64) -> Option<Image> {
        let mut image = Image::empty(buckets);
        let grown = Subtable { offset: 0, buckets };
        for bucket in 0..old.buckets {
            if old.is_used(bytes, bucket) {
                let home = grown.home(old.occupant(bytes, bucket).tag);
                let (_, to) = plan_insert(&mut image, home)?;
                image.place(home, to, Source::Old(bucket));
            }
        }
        Some(image)
    }

    pub(crate) fn hop_word(&self, bucket: u64) -> u32 {
        self.hop[index(bucket)]
    }

    pub(crate) fn source(&self, bucket: u64) -> Option<Source> {
        self.slots[index(bucket)]
    }

    /// Puts the pair `source`, with home `home`, in the free bucket `bucket`.
    pub(crate) fn place(&mut self, home: u64, bucket: u64, source: Source) {
        debug_assert!(self.slots[index(bucket)].is_none());
        self.slots[index(bucket)] = Some(source);
        self.hop[index(home)] |= 1 << wrap_distance(home, bucket, self.buckets());
    }
}

impl HopView for Image {
    fn buckets(&self) -> u64 {
        self.slots.len() as u64
    }

    fn is_used(&self, bucket: u64) -> bool {
        self.slots[index(bucket)].is_some()
    }

    fn hop(&self, bucket: u64) -> u32 {
        self.hop[index(bucket)]
    }

    fn apply(&mut self, mv: Move) {
        let buckets = self.buckets();
        self.hop[index(mv.home)] = moved_hop(self.hop[index(mv.home)], mv, buckets);
        self.slots[index(mv.to)] = self.slots[index(mv.from)].take();
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// An image built from explicit homes, each inserted through the planner; pair `i` is
    /// labelled `Source::Old(i)` so tests can follow it. Returns the image and each pair's home.
    fn image_with(buckets: u64, homes: &[u64]) -> Option<Image> {
        let mut image = Image::empty(buckets);
        for (i, home) in homes.iter().enumerate() {
            let (_, bucket) = plan_insert(&mut image, *home)?;
            image.place(*home, bucket, Source::Old(i as u64));
        }
        Some(image)
    }

    /// Every pair sits within the neighbourhood of its home and its home's bitmap says where; each
    /// pair is listed exactly once.
    fn assert_consistent(image: &Image, homes: &[u64]) {
        let buckets = image.buckets();
        let mut listed = 0;
        for bucket in 0..buckets {
            let hop = image.hop(bucket);
            listed += hop.count_ones();
            for distance in 0..NEIGHBOURHOOD {
                if hop & (1 << distance) != 0 {
                    let at = wrap_forward(bucket, distance, buckets);
                    let Some(Source::Old(i)) = image.source(at) else { panic!("bit {distance} of {bucket} is empty") };
                    assert_eq!(homes[i as usize], bucket, "bucket {at} is listed by a bucket not its home");
                }
            }
        }
        assert_eq!(listed as usize, image.slots.iter().flatten().count());
    }

    #[test]
    fn buckets_wrap_inside_a_subtable_of_any_size() {
        let subtable = Subtable { offset: 4096, buckets: 100 };
        assert_eq!(subtable.forward(95, 10), 5);
        assert_eq!(subtable.distance(95, 5), 10);
        assert_eq!(subtable.distance(5, 95), 90);
        assert_eq!(subtable.entry_offset(99), 4096 + 99 * 64);
        assert_eq!(subtable.home(u32::MAX), 99);
        assert_eq!(subtable.home(0), 0);
    }

    /// 31 pairs share home 0 and fill its neighbourhood but one; a pair homed at bucket 1 takes
    /// that last entry. A pair homed at 0 then needs a displacement: the free entry at 32 is too
    /// far, so the pair homed at 1 moves there.
    #[test]
    fn displacement_brings_a_far_free_entry_into_the_neighbourhood() {
        let mut homes = vec![0u64; 31];
        homes.push(1);
        let mut image = image_with(100, &homes).expect("fits without displacement");
        assert_eq!(image.source(32), None);
        let (moves, bucket) = plan_insert(&mut image, 0).expect("the pair homed at 1 can move to 32");
        assert_eq!(moves, vec![Move { home: 1, from: 31, to: 32 }]);
        assert_eq!(bucket, 31);
        image.place(0, bucket, Source::New);
        homes.push(0);
        let labelled: Vec<u64> = homes.clone();
        // The new pair carries `Source::New`; relabel it for the consistency check.
        image.slots[31] = Some(Source::Old(32));
        assert_consistent(&image, &labelled);
    }

    /// When every pair between the home and the free entry is homed so that it cannot move closer
    /// to the free entry, the planner gives up (and the caller grows the subtable).
    #[test]
    fn displacement_fails_when_no_pair_can_move() {
        let homes = vec![0u64; 32];
        let mut image = image_with(100, &homes).expect("32 pairs fill the neighbourhood exactly");
        assert_eq!(plan_insert(&mut image, 0), None);
        assert!(image_with(100, &[5; 33]).is_none());
    }

    /// A neighbourhood near the end of a subtable wraps to its start.
    #[test]
    fn neighbourhoods_wrap_at_the_end() {
        let homes = vec![98u64; 10];
        let image = image_with(100, &homes).expect("fits");
        assert!(image.is_used(0) && image.is_used(7), "pairs wrapped around");
        assert_consistent(&image, &homes);
    }

    proptest! {
        /// Any set of homes that fits stays consistent through inserts with displacements, in
        /// subtables of any size.
        #[test]
        fn inserts_stay_consistent(buckets in 64u64..300, fractions in proptest::collection::vec(any::<u32>(), 0..250)) {
            let homes: Vec<u64> = fractions.iter().map(|f| scale(*f, buckets)).collect();
            if let Some(image) = image_with(buckets, &homes) {
                assert_consistent(&image, &homes);
            }
        }
    }
}
