//! openraft's storage conformance suite, run on a replica's log store and state machine over a
//! real shard directory (its write-ahead log, its Raft state file), with the shard's sync thread
//! making appends durable as in a running server.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use openraft::testing::log::{StoreBuilder, Suite};
use openraft::StorageError;

use super::log_store::{complete_flushes, ShardLog};
use super::snapshot::SnapshotStore;
use super::startup::recover_replica;
use super::state_machine::ShardMachine;
use super::types::C;
use crate::config::{Config, DurabilityConfig};
use crate::data_dir::DataDir;
use crate::handler::tests::shard_state;

/// Each store the suite asks for gets a fresh data directory.
static STORES: AtomicU64 = AtomicU64::new(0);

struct Builder {
    tag: String,
}

/// Keeps a store's data directory (locked) until the suite's test ends, then removes it.
struct Guard {
    dir: std::path::PathBuf,
    _data_dir: std::sync::Mutex<DataDir>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl StoreBuilder<C, ShardLog, ShardMachine, Guard> for Builder {
    async fn build(&self) -> Result<(Guard, ShardLog, ShardMachine), StorageError<C>> {
        let number = STORES.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("ferrite-suite-{}-{}-{number}", self.tag, std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut config = Config::embedded_default();
        config.data_dir.clone_from(&dir);
        config.durability = DurabilityConfig { commit_interval_ms: 1, ..DurabilityConfig::default() };
        let data_dir = DataDir::open(&dir, 1).expect("data dir");
        let replica = recover_replica(&config, &data_dir, 0, 1).expect("a fresh replica");
        let mut durability = replica.durability;
        if let Some(task) = durability.take_task() {
            tokio::task::spawn_local(task.run());
        }
        let durable = durability.local_durable();
        let mut state = shard_state(replica.pools, Some(durability));
        state.replication = Some(replica.replication);
        let shard = Rc::new(RefCell::new(state));
        let log = ShardLog::new(Rc::clone(&shard));
        tokio::task::spawn_local(complete_flushes(log.flushes(), durable));
        let snapshots = SnapshotStore::open(&replica.raft_dir).expect("snapshots");
        let machine = ShardMachine::new(shard, snapshots);
        Ok((Guard { dir, _data_dir: std::sync::Mutex::new(data_dir) }, log, machine))
    }
}

#[test]
fn the_replica_passes_openrafts_storage_suite() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async {
        Suite::test_all(Builder { tag: "all".into() }).await.expect("the storage suite");
    });
}
