//! `find`: keys by exact key, prefix, regular expression or glob, a bounded page at a time.
//!
//! On a pool with a secondary index (an optional ordered index over its keys, MCAS section 3.3)
//! `find` returns keys in byte order and resumes after a key. The index is volatile: it holds
//! copies of the keys in DRAM and is rebuilt from the primary index when a pool is loaded. It lives
//! beside the engine rather than inside it, so every engine gets it.
//!
//! On a pool without one, [`find_by_scan`] walks the store itself ([`Store::scan`]) in hash order
//! and resumes from a cursor: no memory per key, and the guarantee of Redis's `SCAN` instead of
//! the index's order.

use std::collections::BTreeSet;
use std::ops::Bound;

use crate::glob::glob_match;
use crate::memory::{btree_set_node_bytes, heap_allocation_bytes};
use crate::store::{Store, SCAN_KEYS_PER_WORK_MAX};

/// Largest compiled regular expression `find` accepts, so a hostile pattern cannot make the shard
/// build a huge automaton.
const REGEX_COMPILED_BYTES_MAX: usize = 1 << 20;

/// A `find` pattern, ready to match.
#[derive(Debug)]
pub enum FindQuery<'a> {
    Exact(&'a [u8]),
    Prefix(&'a [u8]),
    Regex(regex::bytes::Regex),
    Glob(&'a [u8]),
    /// Every key after this one in key order (MCAS's `next:`): meaningful in an index only.
    After(&'a [u8]),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid regular expression: {0}")]
pub struct InvalidPattern(String);

impl<'a> FindQuery<'a> {
    /// Compiles a regular expression (Rust `regex` syntax, matched anywhere in the key's bytes).
    pub fn regex(pattern: &[u8]) -> Result<FindQuery<'a>, InvalidPattern> {
        let text = std::str::from_utf8(pattern).map_err(|_| InvalidPattern("the pattern is not UTF-8".into()))?;
        regex::bytes::RegexBuilder::new(text)
            .size_limit(REGEX_COMPILED_BYTES_MAX)
            .build()
            .map(FindQuery::Regex)
            .map_err(|error| InvalidPattern(error.to_string()))
    }

    /// Whether `key` matches the query.
    pub fn matches(&self, key: &[u8]) -> bool {
        match self {
            FindQuery::Exact(wanted) => key == *wanted,
            FindQuery::Prefix(prefix) => key.starts_with(prefix),
            FindQuery::Regex(regex) => regex.is_match(key),
            FindQuery::Glob(pattern) => glob_match(pattern, key),
            FindQuery::After(after) => key > *after,
        }
    }

    /// The smallest key that can match; the scan starts there.
    fn lower_bound(&self) -> &[u8] {
        match self {
            FindQuery::Exact(key) | FindQuery::Prefix(key) | FindQuery::After(key) => key,
            FindQuery::Regex(_) | FindQuery::Glob(_) => &[],
        }
    }

    /// Whether no key at or after `key` (in order) can match, so the scan can stop early.
    fn past_end(&self, key: &[u8]) -> bool {
        match self {
            FindQuery::Exact(wanted) => key > *wanted,
            FindQuery::Prefix(prefix) => !key.starts_with(prefix) && key > *prefix,
            FindQuery::Regex(_) | FindQuery::Glob(_) | FindQuery::After(_) => false,
        }
    }
}

/// How much one `find` call may do before it returns what it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FindBudget {
    /// Most keys to return.
    pub keys_max: usize,
    /// Stop adding keys once their bytes reach this.
    pub key_bytes_max: usize,
    /// Most index entries to examine.
    pub scan_keys_max: usize,
}

/// One page of `find` results.
#[derive(Debug, PartialEq, Eq)]
pub struct FindPage<'i> {
    pub keys: Vec<&'i [u8]>,
    /// Resume after this key; `None` when nothing further can match.
    pub next: Option<&'i [u8]>,
}

/// One page of a [`find_by_scan`].
#[derive(Debug, PartialEq, Eq)]
pub struct ScanPage<'s> {
    pub keys: Vec<&'s [u8]>,
    /// The cursor to resume from; `None` when the whole store has been walked.
    pub next: Option<u64>,
}

/// One page of `find` over a store without a secondary index: walks it from `cursor` (0 to
/// start), in steps of [`Store::scan`], keeping the keys `query` matches, until the budget is
/// spent (`scan_keys_max` counts units of the store's scan work) or the walk is done.
///
/// A step's keys are kept only if they all fit the page's `keys_max` and `key_bytes_max`;
/// otherwise the step is retried as a single home bucket, and if even that does not fit the page
/// ends before it (the next page walks it again). The page's first step is one bucket (at most
/// [`SCAN_KEYS_PER_WORK_MAX`] keys) and is always kept, or a bucket holding more matches than the
/// limit would never be passed. Every key present for a whole paged search is returned at least
/// once; a key may be returned again on a later page (after a growth of the table).
pub fn find_by_scan<'s>(store: &'s dyn Store, query: &FindQuery<'_>, cursor: u64, budget: FindBudget) -> ScanPage<'s> {
    let per_step = SCAN_KEYS_PER_WORK_MAX as usize;
    let mut keys: Vec<&'s [u8]> = Vec::new();
    let mut key_bytes = 0;
    let mut cursor = cursor;
    let mut work = 0;
    let mut step_keys: Vec<&'s [u8]> = Vec::new();
    let mut step = 1;
    while work < budget.scan_keys_max {
        step_keys.clear();
        let mut step_bytes = 0;
        let next = store.scan(cursor, step as u64, &mut |key| {
            if query.matches(key) {
                step_bytes += key.len();
                step_keys.push(key);
            }
        });
        let fits = keys.len() + step_keys.len() <= budget.keys_max && key_bytes + step_bytes <= budget.key_bytes_max;
        if !fits && !keys.is_empty() {
            if step == 1 {
                return ScanPage { keys, next: Some(cursor) };
            }
            step = 1;
            continue;
        }
        keys.append(&mut step_keys);
        key_bytes += step_bytes;
        work += step;
        cursor = next;
        if cursor == 0 {
            return ScanPage { keys, next: None };
        }
        // Several buckets at a time while far from the limits.
        let room = budget.keys_max.saturating_sub(keys.len());
        step = (room / per_step).clamp(1, 64).min(budget.scan_keys_max.saturating_sub(work).max(1));
    }
    ScanPage { keys, next: Some(cursor) }
}

/// Bytes of the heap allocation holding one key of the index.
fn key_heap_bytes(key: &[u8]) -> u64 {
    if key.is_empty() {
        0
    } else {
        heap_allocation_bytes(key.len() as u64)
    }
}

#[derive(Debug, Default)]
pub struct SecondaryIndex {
    keys: BTreeSet<Box<[u8]>>,
    /// The keys' own heap allocations, as malloc rounds them: kept up to date by `insert` and
    /// `remove` so that [`SecondaryIndex::memory_bytes`] walks nothing.
    key_heap_bytes: u64,
}

impl SecondaryIndex {
    /// The index of every key in `store`: what a restart rebuilds, since the index itself is not
    /// persisted (the store is the truth).
    pub fn rebuild_from(store: &dyn crate::Store) -> SecondaryIndex {
        let mut index = SecondaryIndex::default();
        store.for_each_key(&mut |key| index.insert(key));
        index
    }

    pub fn insert(&mut self, key: &[u8]) {
        if self.keys.insert(key.into()) {
            self.key_heap_bytes += key_heap_bytes(key);
        }
    }

    pub fn remove(&mut self, key: &[u8]) {
        if self.keys.remove(key) {
            self.key_heap_bytes -= key_heap_bytes(key);
        }
    }

    /// Estimated bytes of DRAM the index takes: each key's own allocation (its length, rounded
    /// as malloc rounds it; an empty key allocates nothing) and the set's B-tree nodes, whose
    /// slots hold a 16-byte boxed-slice pointer per key, at the fill random inserts give (see
    /// [`crate::memory`]).
    pub fn memory_bytes(&self) -> u64 {
        self.key_heap_bytes + btree_set_node_bytes(self.keys.len() as u64, size_of::<Box<[u8]>>() as u64)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Keys that match `query`, in order, strictly after `after` (from the start if `None`), within
    /// `budget`. Stateless: the caller resumes with the returned `next`, so keys present for the
    /// whole of a paged search are returned exactly once even while others come and go.
    pub fn find(&self, query: &FindQuery<'_>, after: Option<&[u8]>, budget: FindBudget) -> FindPage<'_> {
        let lower = query.lower_bound();
        let start = match after {
            Some(after) if after >= lower => Bound::Excluded(after),
            _ => Bound::Included(lower),
        };
        debug_assert!(budget.keys_max > 0 && budget.scan_keys_max > 0, "an empty budget could never make progress");
        let mut keys = Vec::new();
        let mut key_bytes = 0;
        // Everything up to this key has been considered; a later call resumes after it.
        let mut last_examined = None;
        for (examined, key) in self.keys.range::<[u8], _>((start, Bound::Unbounded)).enumerate() {
            if query.past_end(key) {
                return FindPage { keys, next: None };
            }
            let budget_spent =
                examined >= budget.scan_keys_max || keys.len() >= budget.keys_max || key_bytes >= budget.key_bytes_max;
            if budget_spent {
                return FindPage { keys, next: last_examined };
            }
            last_examined = Some(&**key);
            if query.matches(key) {
                key_bytes += key.len();
                keys.push(&**key);
            }
        }
        FindPage { keys, next: None }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    const ROOMY: FindBudget = FindBudget { keys_max: 1024, key_bytes_max: 1 << 20, scan_keys_max: 1 << 20 };

    fn index(keys: &[&str]) -> SecondaryIndex {
        let mut index = SecondaryIndex::default();
        for key in keys {
            index.insert(key.as_bytes());
        }
        index
    }

    fn strings(page: &FindPage<'_>) -> Vec<String> {
        page.keys.iter().map(|k| String::from_utf8_lossy(k).into_owned()).collect()
    }

    /// `next:` gives the keys after a key, in order, whether or not that key is present, and
    /// pages like every other query.
    #[test]
    fn after_gives_the_keys_following_a_key_in_order() {
        let index = index(&["a", "b", "c", "d"]);
        assert_eq!(strings(&index.find(&FindQuery::After(b"b"), None, ROOMY)), ["c", "d"]);
        assert_eq!(strings(&index.find(&FindQuery::After(b"bb"), None, ROOMY)), ["c", "d"]);
        assert_eq!(strings(&index.find(&FindQuery::After(b""), None, ROOMY)), ["a", "b", "c", "d"]);
        assert!(index.find(&FindQuery::After(b"d"), None, ROOMY).keys.is_empty());
        let one = FindBudget { keys_max: 1, ..ROOMY };
        let first = index.find(&FindQuery::After(b"a"), None, one);
        assert_eq!((strings(&first), first.next), (vec!["b".to_owned()], Some(&b"b"[..])));
        assert_eq!(strings(&index.find(&FindQuery::After(b"a"), first.next, one)), ["c"]);
    }

    #[test]
    fn finds_by_each_kind_in_key_order() {
        let index = index(&["user:2", "user:10", "order:1", "user:1", "users"]);
        let prefix = index.find(&FindQuery::Prefix(b"user:"), None, ROOMY);
        assert_eq!(strings(&prefix), ["user:1", "user:10", "user:2"]);
        assert_eq!(prefix.next, None);
        let exact = index.find(&FindQuery::Exact(b"users"), None, ROOMY);
        assert_eq!(strings(&exact), ["users"]);
        let glob = index.find(&FindQuery::Glob(b"user:?"), None, ROOMY);
        assert_eq!(strings(&glob), ["user:1", "user:2"]);
        let regex = FindQuery::regex(b"^user:1").expect("valid regex");
        assert_eq!(strings(&index.find(&regex, None, ROOMY)), ["user:1", "user:10"]);
        assert!(FindQuery::regex(b"(unclosed").is_err());
    }

    #[test]
    fn pages_resume_after_the_last_examined_key() {
        let index = index(&["a", "b", "c", "d", "e"]);
        let budget = FindBudget { keys_max: 2, ..ROOMY };
        let first = index.find(&FindQuery::Glob(b"*"), None, budget);
        assert_eq!((strings(&first), first.next), (vec!["a".to_string(), "b".to_string()], Some(&b"b"[..])));
        let second = index.find(&FindQuery::Glob(b"*"), first.next, budget);
        assert_eq!(strings(&second), ["c", "d"]);
        let third = index.find(&FindQuery::Glob(b"*"), second.next, budget);
        assert_eq!((strings(&third), third.next), (vec!["e".to_string()], None));
    }

    #[test]
    fn a_rare_match_is_found_in_bounded_steps() {
        let keys: Vec<String> = (0..100).map(|i| format!("k{i:03}")).collect();
        let index = index(&keys.iter().map(String::as_str).collect::<Vec<_>>());
        let budget = FindBudget { scan_keys_max: 10, ..ROOMY };
        let mut after: Option<Vec<u8>> = None;
        let mut found = Vec::new();
        let mut calls = 0;
        loop {
            calls += 1;
            let page = index.find(&FindQuery::Glob(b"k099"), after.as_deref(), budget);
            found.extend(strings(&page));
            match page.next {
                Some(next) => after = Some(next.to_vec()),
                None => break,
            }
        }
        assert_eq!(found, ["k099"]);
        assert_eq!(calls, 10, "each call examines at most 10 of the 100 keys");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u16),
        Erase(u16),
    }

    /// Key `i`: 2 to 41 bytes, so hstore keeps some inline and some out of line.
    fn key(i: u16) -> Vec<u8> {
        let mut key = i.to_le_bytes().to_vec();
        key.resize(2 + usize::from(i) % 40, b'k');
        key
    }

    proptest! {
        /// The index a restart rebuilds from a store (`rebuild_from`) equals the one a shard
        /// maintained put by put and erase by erase, for both engines; up to 400 live keys in a
        /// pool created for one usually grow the hstore table several times along the way.
        #[test]
        fn rebuilt_from_a_store_equals_maintained_incrementally(
            ops in proptest::collection::vec(prop_oneof![3 => (0u16..400).prop_map(Op::Put), 1 => (0u16..400).prop_map(Op::Erase)], 0..600),
        ) {
            for kind in [crate::StoreKind::MapStore, crate::StoreKind::HStore] {
                let spec = crate::PoolSpec { size_bytes: 1 << 20, expected_objects: 1 };
                let mut store = kind.try_create(spec).expect("a small pool");
                let mut maintained = SecondaryIndex::default();
                for op in &ops {
                    match op {
                        Op::Put(i) => {
                            store.put(&key(*i), b"value", crate::PutMode::Upsert, 0).expect("room");
                            maintained.insert(&key(*i));
                        }
                        Op::Erase(i) => {
                            if store.erase(&key(*i)).is_ok() {
                                maintained.remove(&key(*i));
                            }
                        }
                    }
                }
                let rebuilt = SecondaryIndex::rebuild_from(store.as_ref());
                prop_assert_eq!(&rebuilt.keys, &maintained.keys, "{}", kind.name());
                prop_assert_eq!(rebuilt.memory_bytes(), maintained.memory_bytes(), "{}", kind.name());
                prop_assert_eq!(rebuilt.len() as u64, store.count());
            }
        }

        /// Paging through any index with any small budget returns exactly the matching keys, in
        /// order, each once.
        #[test]
        fn paging_returns_every_match_once(
            keys in proptest::collection::btree_set(proptest::collection::vec(0u8..4, 0..4), 0..40),
            prefix in proptest::collection::vec(0u8..4, 0..2),
            keys_max in 1usize..5,
            scan_keys_max in 1usize..5,
        ) {
            let mut index = SecondaryIndex::default();
            for key in &keys {
                index.insert(key);
            }
            let budget = FindBudget { keys_max, key_bytes_max: 1 << 20, scan_keys_max };
            let mut after: Option<Vec<u8>> = None;
            let mut found = Vec::new();
            loop {
                let page = index.find(&FindQuery::Prefix(&prefix), after.as_deref(), budget);
                found.extend(page.keys.iter().map(|k| k.to_vec()));
                match page.next {
                    Some(next) => after = Some(next.to_vec()),
                    None => break,
                }
            }
            let expected: Vec<Vec<u8>> = keys.iter().filter(|k| k.starts_with(&prefix)).cloned().collect();
            prop_assert_eq!(found, expected);
            let unique: BTreeSet<_> = index.keys.iter().collect();
            prop_assert_eq!(unique.len(), keys.len());
        }
    }

    /// A store of each kind holding keys `k0000`..`k1999`, plus `other` keys that never match.
    fn stores() -> Vec<Box<dyn crate::Store>> {
        [crate::StoreKind::HStore, crate::StoreKind::MapStore]
            .into_iter()
            .map(|kind| {
                let spec = crate::PoolSpec { size_bytes: 1 << 20, expected_objects: 1 };
                let mut store = kind.try_create(spec).expect("store");
                for i in 0..2000 {
                    store.put(format!("k{i:04}").as_bytes(), b"v", crate::PutMode::Upsert, 0).expect("room");
                    store.put(format!("other{i}").as_bytes(), b"v", crate::PutMode::Upsert, 0).expect("room");
                }
                store
            })
            .collect()
    }

    /// Paging through a store without an index finds every matching key, pages never pass the
    /// limit (save a first bucket holding more matches, at most 32 keys), and a page that stops
    /// early says where to resume.
    #[test]
    fn find_by_scan_pages_through_every_match() {
        for store in stores() {
            for (query, expected) in [(FindQuery::Prefix(b"k1"), 1000), (FindQuery::Glob(b"k?5??"), 200)] {
                let budget = FindBudget { keys_max: 50, key_bytes_max: 1 << 20, scan_keys_max: 300 };
                let (mut cursor, mut found, mut pages) = (0, BTreeSet::new(), 0);
                loop {
                    let page = find_by_scan(store.as_ref(), &query, cursor, budget);
                    assert!(page.keys.len() <= 50, "{} keys", page.keys.len());
                    assert!(page.keys.iter().all(|key| query.matches(key)));
                    found.extend(page.keys.iter().map(|key| key.to_vec()));
                    pages += 1;
                    match page.next {
                        Some(next) => cursor = next,
                        None => break,
                    }
                }
                assert_eq!(found.len(), expected, "{query:?}");
                assert!(pages > 1);
            }
        }
    }

    /// A page stops after its work budget even when nothing matches, so a rare pattern cannot hold
    /// the shard: it comes back empty with a place to resume.
    #[test]
    fn find_by_scan_stops_at_its_work_budget() {
        for store in stores() {
            let budget = FindBudget { keys_max: 1024, key_bytes_max: 1 << 20, scan_keys_max: 10 };
            let page = find_by_scan(store.as_ref(), &FindQuery::Exact(b"nothing"), 0, budget);
            assert!(page.keys.is_empty());
            assert!(page.next.is_some(), "more remains to walk");
        }
    }
}
