//! The pools of one shard.
//!
//! On the `ssd` backing a pool's creation and deletion are records in the shard's write-ahead log
//! and its memory is logged (`ferrite_store::persistence::ssd`); on the `memory` backing pools
//! are plain stores that vanish with the process.

use std::fs::File;
use std::sync::{Arc, Mutex};

use foldhash::HashMap;

use ferrite_proto::{Durability, PoolDescription, PoolHandle, PoolInfo, PoolMemory, PoolSettings};
use std::path::PathBuf;

use ferrite_store::hstore::{self, HStore};
use ferrite_store::persistence::pmem::{self, PmemMemory};
use ferrite_store::persistence::ssd::checkpoint::{Manifest, ManifestPool};
use ferrite_store::persistence::ssd::record::{encode_pool_configured, encode_pool_deleted};
use ferrite_store::persistence::ssd::{
    CheckpointPool, LoggedMemory, PageTracker, PoolDescriptor, RecoveredPool, SharedLog, SharedRegion,
};
use ferrite_store::persistence::wal::WalError;
use ferrite_store::{CreateStoreError, PoolSpec, SecondaryIndex, Store, StoreKind};

use crate::stats::PoolTotals;

/// Bytes of a `configure_pool` log record: its kind, the pool's id, the setting.
const POOL_CONFIGURED_PAYLOAD_BYTES: u64 = 1 + 8 + 1;

/// What a durable pool keeps so the checkpointer can copy its memory.
#[derive(Debug)]
pub(crate) struct Persisted {
    pub descriptor: PoolDescriptor,
    pub pages: Arc<Mutex<PageTracker>>,
    pub region: Arc<File>,
}

pub(crate) struct Pool {
    pub name: String,
    pub store: Box<dyn Store>,
    /// The ordered key index `find` searches, if the pool has one (or one is being built).
    pub index: Option<SecondaryIndex>,
    /// While `configure_pool` builds the index: where its walk of the hash table stands. Writes
    /// keep the partial index up to date meanwhile, but `find` does not use it until it is
    /// whole.
    pub index_build: Option<crate::handler::configure::IndexBuild>,
    /// Opens held across all sessions; a pool with opens cannot be deleted.
    pub open_count: u32,
    /// Writes that do not choose a durability are acknowledged before they are durable.
    pub async_default: bool,
    /// The pool's chain of Active Data Object plugins, comma-separated as listings carry it
    /// (durable in its descriptor).
    pub plugin_chain: String,
    /// The user who created the pool, whose quota counts it (durable in its descriptor).
    pub owner: Option<String>,
    /// `None` on the `memory` backing.
    pub persisted: Option<Persisted>,
    /// Requests and failures, for the metrics endpoint.
    pub counters: crate::stats::PoolCounters,
}

impl Pool {
    /// What the pool takes in memory: its store's parts and its secondary index's estimate.
    pub fn memory(&self) -> PoolMemory {
        let store = self.store.memory_usage();
        PoolMemory {
            table_buckets: store.table_buckets,
            table_bytes: store.table_bytes,
            slab_bytes: store.slab_bytes,
            large_bytes: store.large_bytes,
            other_bytes: store.other_bytes,
            index_bytes: self.index.as_ref().map_or(0, SecondaryIndex::memory_bytes),
        }
    }
}

impl Pool {
    /// The pool as `list_pools` lists it.
    fn info(&self) -> PoolInfo<'_> {
        PoolInfo {
            name: &self.name,
            objects: self.store.count(),
            size_bytes: self.store.capacity_bytes(),
            used_bytes: self.store.used_bytes(),
            open_count: self.open_count,
            memory: self.memory(),
            plugins: &self.plugin_chain,
        }
    }

    /// The pool as a described `list_pools` lists it: an index counts once it is whole, when
    /// `find` searches it.
    fn description(&self) -> PoolDescription<'_> {
        let settings = PoolSettings {
            indexed: self.index.is_some() && self.index_build.is_none(),
            durability: if self.async_default { Durability::Async } else { Durability::Sync },
        };
        PoolDescription { info: self.info(), settings }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("name", &self.name).field("open_count", &self.open_count).finish_non_exhaustive()
    }
}

/// Why a pool could not be created.
#[derive(Debug)]
pub(crate) enum CreateRefused {
    Exists,
    TooMany {
        max: usize,
    },
    Engine(CreateStoreError),
    /// The pool memory could not be allocated.
    Memory(std::io::Error),
    /// The log has no room for the pool's creation record (a full disk), or has failed.
    Log(WalError),
    /// The `pmem` backing could not create the pool's files or record it in its catalog.
    Pmem(String),
}

/// The pools of a shard on the `pmem` backing: their files' directory and the catalog naming
/// them (a manifest without page files, rewritten atomically on every create and delete).
#[derive(Debug)]
pub(crate) struct PmemPools {
    pub dir: PathBuf,
    pub catalog: Manifest,
}

/// How a pool is created: its shape and options.
#[derive(Debug, Clone)]
pub(crate) struct NewPool {
    pub spec: PoolSpec,
    pub indexed: bool,
    pub async_default: bool,
    /// Plugin names, already checked against the server's plugins.
    pub plugins: Vec<String>,
    /// The user creating it, on a server with users.
    pub owner: Option<String>,
}

#[derive(Debug)]
pub(crate) struct Pools {
    by_handle: HashMap<PoolHandle, Pool>,
    by_name: HashMap<String, PoolHandle>,
    /// Handles are pool ids: never reused within a data directory, so a handle to a deleted pool
    /// cannot reach a new pool of the same name, and a log record never reaches a later pool.
    next_handle: u64,
    max: usize,
    kind: StoreKind,
    /// The shard's log, on the `ssd` backing.
    log: Option<SharedLog>,
    /// The catalog, on the `pmem` backing.
    pmem: Option<PmemPools>,
    scratch: Vec<u8>,
}

impl Pools {
    /// The pools of a shard on the `memory` backing.
    pub fn in_memory(kind: StoreKind, max: usize) -> Self {
        Pools {
            by_handle: HashMap::default(),
            by_name: HashMap::default(),
            next_handle: 1,
            max,
            kind,
            log: None,
            pmem: None,
            scratch: Vec::new(),
        }
    }

    /// The pools of a shard on the `pmem` backing, whose catalog and files are in `dir`; ids
    /// continue from `next_handle`.
    pub fn on_pmem(pmem: PmemPools, max: usize, next_handle: u64) -> Self {
        Pools { next_handle: next_handle.max(1), pmem: Some(pmem), ..Pools::in_memory(StoreKind::HStore, max) }
    }

    /// The pools of a shard on the `ssd` backing, logged to `log`; ids continue from
    /// `next_handle`.
    pub fn logged(log: SharedLog, max: usize, next_handle: u64) -> Self {
        Pools { log: Some(log), next_handle: next_handle.max(1), ..Pools::in_memory(StoreKind::HStore, max) }
    }

    pub fn len(&self) -> usize {
        self.by_handle.len()
    }

    pub fn next_handle(&self) -> u64 {
        self.next_handle
    }

    /// Numbers new pools from `next` on, if that is higher (a replica that begins to lead takes
    /// over the ids its group used).
    pub fn continue_handles_from(&mut self, next: u64) {
        self.next_handle = self.next_handle.max(next);
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

    pub fn create(&mut self, name: &str, new: NewPool) -> Result<PoolHandle, CreateRefused> {
        if self.by_name.contains_key(name) {
            return Err(CreateRefused::Exists);
        }
        if self.by_handle.len() >= self.max {
            return Err(CreateRefused::TooMany { max: self.max });
        }
        // Consumed whatever happens next: an id that reached the log (or a pmem file name) must
        // never be given to another pool.
        let handle = PoolHandle(self.next_handle);
        self.next_handle += 1;
        let (store, persisted) = match (self.log.clone(), self.pmem.is_some()) {
            (Some(log), _) => {
                let (store, persisted) = self.create_logged(handle.0, name, &new, log)?;
                (store, Some(persisted))
            }
            (None, true) => (self.create_pmem(handle.0, name, &new)?, None),
            (None, false) => (self.kind.try_create(new.spec).map_err(CreateRefused::Engine)?, None),
        };
        let index = new.indexed.then(SecondaryIndex::default);
        let pool = Pool {
            name: name.to_string(),
            store,
            index,
            open_count: 0,
            async_default: new.async_default,
            plugin_chain: new.plugins.join(","),
            owner: new.owner.clone(),
            index_build: None,
            persisted,
            counters: Default::default(),
        };
        self.by_handle.insert(handle, pool);
        self.by_name.insert(name.to_string(), handle);
        Ok(handle)
    }

    /// Creates a durable hstore pool: memory and page tracking first (the steps that can fail
    /// for want of resources, before anything is logged), then the store's formatting, whose
    /// commit logs the pool's creation and its format as one record.
    fn create_logged(
        &mut self,
        id: u64,
        name: &str,
        new: &NewPool,
        log: SharedLog,
    ) -> Result<(Box<dyn Store>, Persisted), CreateRefused> {
        let region_bytes = HStore::<LoggedMemory>::region_bytes_for(new.spec)
            .map_err(|error| CreateRefused::Engine(error.into()))?
            .next_multiple_of(ferrite_store::persistence::ssd::pages::PAGE_BYTES);
        let formatting = HStore::<LoggedMemory>::creation_footprint(new.spec)
            .map_err(|error| CreateRefused::Engine(error.into()))?;
        log.reserve_pool_creation(formatting).map_err(CreateRefused::Log)?;
        let region =
            SharedRegion::zeroed(&format!("ferrite-pool-{id}"), region_bytes).map_err(CreateRefused::Memory)?;
        let descriptor = PoolDescriptor {
            id,
            name: name.to_string(),
            spec: new.spec,
            region_bytes,
            indexed: new.indexed,
            async_default: new.async_default,
            plugins: new.plugins.clone(),
            owner: new.owner.clone(),
        };
        let pages = PageTracker::try_new(region_bytes)
            .map_err(|error| CreateRefused::Memory(std::io::Error::other(error.to_string())))?;
        let pages = Arc::new(Mutex::new(pages));
        let region_file = Arc::clone(region.file());
        let memory = LoggedMemory::for_new_pool(descriptor.clone(), region, log, Arc::clone(&pages));
        let store = HStore::create_on_zeroed(memory, new.spec)
            .map_err(|error: hstore::CreateError| CreateRefused::Engine(error.into()))?;
        Ok((Box::new(store), Persisted { descriptor, pages, region: region_file }))
    }

    /// Creates a pool on the `pmem` backing: its files, formatted and flushed, first; then its
    /// catalog entry. A crash in between leaves files no catalog names, which the next start
    /// removes; a crash never leaves a catalog entry whose files are not a formatted pool.
    fn create_pmem(&mut self, id: u64, name: &str, new: &NewPool) -> Result<Box<dyn Store>, CreateRefused> {
        let pmem = self.pmem.as_mut().expect("called on the pmem backing");
        let region_bytes = HStore::<PmemMemory>::region_bytes_for(new.spec)
            .map_err(|error| CreateRefused::Engine(error.into()))?
            .next_multiple_of(ferrite_store::persistence::ssd::pages::PAGE_BYTES);
        let memory = PmemMemory::create(&pmem.dir, id, region_bytes).map_err(|e| CreateRefused::Pmem(e.to_string()))?;
        tracing::info!(pool = name, id, mapping = %memory.mapping(), "pmem pool created");
        let remove_files = |dir: &std::path::Path| {
            let (region, undo) = pmem::pool_files(dir, id);
            let _ = (std::fs::remove_file(region), std::fs::remove_file(undo));
        };
        let store = match HStore::create_on_zeroed(memory, new.spec) {
            Ok(store) => store,
            Err(error) => {
                remove_files(&pmem.dir);
                return Err(CreateRefused::Engine(error.into()));
            }
        };
        let descriptor = PoolDescriptor {
            id,
            name: name.to_string(),
            spec: new.spec,
            region_bytes,
            indexed: new.indexed,
            async_default: new.async_default,
            plugins: new.plugins.clone(),
            owner: new.owner.clone(),
        };
        let mut catalog = pmem.catalog.clone();
        catalog.seq += 1;
        catalog.next_pool_id = id + 1;
        catalog.pools.push(ManifestPool { descriptor, chain: Vec::new(), in_log: Vec::new() });
        if let Err(error) = catalog.write(&pmem.dir) {
            drop(store);
            remove_files(&pmem.dir);
            return Err(CreateRefused::Pmem(error.to_string()));
        }
        pmem.catalog = catalog;
        Ok(Box::new(store))
    }

    /// Adds a pool of the `pmem` catalog: opens its files (rolling back a transaction a crash
    /// interrupted), validates its table and rebuilds its secondary index.
    pub fn insert_pmem(&mut self, descriptor: PoolDescriptor) -> Result<(), String> {
        let pmem = self.pmem.as_ref().expect("called on the pmem backing");
        let memory = PmemMemory::open(&pmem.dir, descriptor.id, descriptor.region_bytes).map_err(|e| e.to_string())?;
        tracing::info!(pool = %descriptor.name, id = descriptor.id, mapping = %memory.mapping(), "pmem pool opened");
        let store = Box::new(HStore::open(memory).map_err(|e| e.to_string())?);
        self.insert_opened(&descriptor, store, None);
        Ok(())
    }

    /// Adds a pool whose store was opened over memory that survived a restart, rebuilding its
    /// secondary index from its keys.
    fn insert_opened(&mut self, descriptor: &PoolDescriptor, store: Box<dyn Store>, persisted: Option<Persisted>) {
        let index = descriptor.indexed.then(|| SecondaryIndex::rebuild_from(store.as_ref()));
        let handle = PoolHandle(descriptor.id);
        self.next_handle = self.next_handle.max(descriptor.id + 1);
        let pool = Pool {
            name: descriptor.name.clone(),
            store,
            index,
            open_count: 0,
            async_default: descriptor.async_default,
            plugin_chain: descriptor.plugins.join(","),
            owner: descriptor.owner.clone(),
            index_build: None,
            persisted,
            counters: Default::default(),
        };
        self.by_name.insert(pool.name.clone(), handle);
        self.by_handle.insert(handle, pool);
    }

    /// Adds a pool that recovery rebuilt: opens its store over the recovered memory (which
    /// validates the table and rebuilds the allocator) and rebuilds its secondary index.
    pub fn insert_recovered(&mut self, pool: RecoveredPool) -> Result<(), hstore::OpenError> {
        let log = self.log.clone().expect("recovered pools belong to a logged shard");
        let RecoveredPool { descriptor, region, pages } = pool;
        let region_file = Arc::clone(region.file());
        let memory = LoggedMemory::new(descriptor.id, region, log, Arc::clone(&pages));
        let store = Box::new(HStore::open(memory)?);
        let persisted = Persisted { descriptor: descriptor.clone(), pages, region: region_file };
        self.insert_opened(&descriptor, store, Some(persisted));
        Ok(())
    }

    /// Deletes a pool; on the `ssd` backing its deletion is logged first, and a log that has no
    /// room for the record (or has failed) leaves the pool in place.
    pub fn remove(&mut self, handle: PoolHandle) -> Result<Option<Pool>, WalError> {
        if let (Some(log), Some(pool)) = (&self.log, self.by_handle.get(&handle)) {
            if pool.persisted.is_some() {
                log.reserve_pool_deletion()?;
                self.scratch.clear();
                encode_pool_deleted(handle.0, &mut self.scratch);
                log.append(&self.scratch)?;
            }
        }
        if let Some(pmem) = &mut self.pmem {
            // The catalog forgets the pool first; its files are then only garbage.
            let mut catalog = pmem.catalog.clone();
            catalog.seq += 1;
            catalog.pools.retain(|pool| pool.descriptor.id != handle.0);
            catalog.write(&pmem.dir).map_err(|error| WalError::Io {
                context: format!("recording the deletion of pool {} in the pmem catalog", handle.0),
                source: std::io::Error::other(error.to_string()),
            })?;
            pmem.catalog = catalog;
            let (region, undo) = pmem::pool_files(&pmem.dir, handle.0);
            let _ = (std::fs::remove_file(region), std::fs::remove_file(undo));
        }
        let Some(pool) = self.by_handle.remove(&handle) else { return Ok(None) };
        self.by_name.remove(&pool.name);
        Ok(Some(pool))
    }

    /// Records whether the pool keeps a secondary index (`configure_pool`), so a restart rebuilds
    /// it or not: logged on the `ssd` backing (a log without room, or failed, changes nothing),
    /// written to the catalog on `pmem`. The caller adds or drops the index itself.
    pub fn set_indexed(&mut self, handle: PoolHandle, indexed: bool) -> Result<(), WalError> {
        if let (Some(log), Some(Pool { persisted: Some(_), .. })) = (&self.log, self.by_handle.get(&handle)) {
            // The record is the size of a deletion's plus one byte.
            log.ensure_room(POOL_CONFIGURED_PAYLOAD_BYTES)?;
            self.scratch.clear();
            encode_pool_configured(handle.0, indexed, &mut self.scratch);
            log.append(&self.scratch)?;
        }
        if let Some(pmem) = &mut self.pmem {
            let mut catalog = pmem.catalog.clone();
            catalog.seq += 1;
            for pool in catalog.pools.iter_mut().filter(|pool| pool.descriptor.id == handle.0) {
                pool.descriptor.indexed = indexed;
            }
            catalog.write(&pmem.dir).map_err(|error| WalError::Io {
                context: format!("recording pool {}'s index setting in the pmem catalog", handle.0),
                source: std::io::Error::other(error.to_string()),
            })?;
            pmem.catalog = catalog;
        }
        if let Some(persisted) = self.by_handle.get_mut(&handle).and_then(|pool| pool.persisted.as_mut()) {
            persisted.descriptor.indexed = indexed;
        }
        Ok(())
    }

    /// What a checkpoint needs of every durable pool.
    pub fn checkpoint_pools(&self) -> Vec<CheckpointPool> {
        self.by_handle
            .values()
            .filter_map(|pool| pool.persisted.as_ref())
            .map(|persisted| CheckpointPool {
                descriptor: persisted.descriptor.clone(),
                pages: Arc::clone(&persisted.pages),
                region: Arc::clone(&persisted.region),
            })
            .collect()
    }

    /// Every pool, sorted by name so listings are stable.
    pub fn infos(&self) -> Vec<PoolInfo<'_>> {
        let mut infos: Vec<PoolInfo<'_>> = self.by_handle.values().map(Pool::info).collect();
        infos.sort_unstable_by(|a, b| a.name.cmp(b.name));
        infos
    }

    /// Every pool with its settings, sorted by name (a described `list_pools`), or only the
    /// pool `name`, if there is one.
    pub fn descriptions(&self, name: Option<&str>) -> Vec<PoolDescription<'_>> {
        match name {
            Some(name) => {
                self.find(name).and_then(|handle| self.get(handle)).map(Pool::description).into_iter().collect()
            }
            None => {
                let mut descriptions: Vec<PoolDescription<'_>> =
                    self.by_handle.values().map(Pool::description).collect();
                descriptions.sort_unstable_by(|a, b| a.info.name.cmp(b.info.name));
                descriptions
            }
        }
    }

    /// What the shard's pools hold together, for its statistics.
    /// Every pool, for the metrics endpoint.
    pub fn each(&self) -> impl Iterator<Item = &Pool> {
        self.by_handle.values()
    }

    pub fn totals(&self) -> PoolTotals {
        self.by_handle.values().fold(
            PoolTotals { pools: self.len() as u64, ..PoolTotals::default() },
            |totals, pool| PoolTotals {
                objects: totals.objects + pool.store.count(),
                memory_bytes: totals.memory_bytes + pool.memory().total_bytes(),
                ..totals
            },
        )
    }
}
