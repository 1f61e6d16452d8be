//! The pools of one shard.

use foldhash::HashMap;

use ferrite_proto::{PoolHandle, PoolInfo};
use ferrite_store::{CreateStoreError, PoolSpec, SecondaryIndex, Store, StoreKind};

pub(crate) struct Pool {
    pub name: String,
    pub store: Box<dyn Store>,
    /// The ordered key index `find` searches, if the pool was created with one.
    pub index: Option<SecondaryIndex>,
    /// Opens held across all sessions; a pool with opens cannot be deleted.
    pub open_count: u32,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("name", &self.name).field("open_count", &self.open_count).finish_non_exhaustive()
    }
}

/// Why a pool could not be created.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum CreateRefused {
    Exists,
    TooMany { max: usize },
    Engine(CreateStoreError),
}

#[derive(Debug)]
pub(crate) struct Pools {
    by_handle: HashMap<PoolHandle, Pool>,
    by_name: HashMap<String, PoolHandle>,
    /// Handles are never reused, so a handle to a deleted pool cannot reach a new pool of the
    /// same name.
    next_handle: u64,
    max: usize,
    kind: StoreKind,
}

impl Pools {
    pub fn new(kind: StoreKind, max: usize) -> Self {
        Pools { by_handle: HashMap::default(), by_name: HashMap::default(), next_handle: 1, max, kind }
    }

    pub fn len(&self) -> usize {
        self.by_handle.len()
    }

    pub fn find(&self, name: &str) -> Option<PoolHandle> {
        self.by_name.get(name).copied()
    }

    pub fn get(&self, handle: PoolHandle) -> Option<&Pool> {
        self.by_handle.get(&handle)
    }

    pub fn get_mut(&mut self, handle: PoolHandle) -> Option<&mut Pool> {
        self.by_handle.get_mut(&handle)
    }

    pub fn create(&mut self, name: &str, spec: PoolSpec, indexed: bool) -> Result<PoolHandle, CreateRefused> {
        if self.by_name.contains_key(name) {
            return Err(CreateRefused::Exists);
        }
        if self.by_handle.len() >= self.max {
            return Err(CreateRefused::TooMany { max: self.max });
        }
        let handle = PoolHandle(self.next_handle);
        self.next_handle += 1;
        let index = indexed.then(SecondaryIndex::default);
        let store = self.kind.try_create(spec).map_err(CreateRefused::Engine)?;
        let pool = Pool { name: name.to_string(), store, index, open_count: 0 };
        self.by_handle.insert(handle, pool);
        self.by_name.insert(name.to_string(), handle);
        Ok(handle)
    }

    pub fn remove(&mut self, handle: PoolHandle) -> Option<Pool> {
        let pool = self.by_handle.remove(&handle)?;
        self.by_name.remove(&pool.name);
        Some(pool)
    }

    /// Every pool, sorted by name so listings are stable.
    pub fn infos(&self) -> Vec<PoolInfo<'_>> {
        let mut infos: Vec<PoolInfo<'_>> = self
            .by_handle
            .values()
            .map(|pool| PoolInfo {
                name: &pool.name,
                objects: pool.store.count(),
                size_bytes: pool.store.capacity_bytes(),
                used_bytes: pool.store.used_bytes(),
                open_count: pool.open_count,
            })
            .collect();
        infos.sort_unstable_by(|a, b| a.name.cmp(b.name));
        infos
    }
}
