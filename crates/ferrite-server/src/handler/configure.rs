//! `configure_pool` (MCAS `configure_pool`): adding a secondary index to a pool that has none, or
//! dropping one, while the shard serves.
//!
//! An index is built in bounded steps: the shard's index task walks the pool's hash table
//! [`HOMES_PER_STEP`] home buckets at a time, one step per turn of the event loop, so a pool of
//! millions of keys gains its index without any client waiting more than a step for the shard.
//! From the start the pool's writes keep the partial index up to date (they update whatever index
//! the pool has), and the walk adds every key that was there before (`Store::scan` returns every
//! key present for the whole walk at least once, whatever the table does between steps); `find`
//! uses the index only once it is whole. The pool's new setting is logged when the walk ends, and
//! the caller is answered once that record is durable: a crash before leaves the pool as it was,
//! without an index; after, a restart rebuilds it.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use bytes::BytesMut;
use ferrite_proto::{ErrorCode, PoolHandle, PoolSetting, Response};
use ferrite_store::SecondaryIndex;
use tokio::sync::watch;

use super::{log_failure, Accepted, Failure, ShardState};
use crate::completion::Completion;
use crate::session::Session;
use crate::stats::Op;

/// Home buckets of the hash table one step of a build walks (a few thousand keys at most at
/// the table's usual load).
const HOMES_PER_STEP: u64 = 1024;

/// An index under construction: where the walk stands, and who waits for it.
#[derive(Debug)]
pub(crate) struct IndexBuild {
    cursor: u64,
    answer: Arc<Completion>,
    request_id: u64,
}

impl ShardState {
    /// Takes a `configure_pool` request; its answer comes through the completion returned.
    pub(crate) fn configure_pool(
        &mut self,
        name: &str,
        setting: PoolSetting,
        request_id: u64,
        session: &Session,
    ) -> Result<Accepted, Failure> {
        self.check_owner(name)?;
        let handle = self.pools.find(name).ok_or_else(|| self.pool_not_found(name))?;
        let answer = Completion::telling(session.answers.clone(), Op::Other);
        let pool = self.pools.get_mut(handle).expect("found by name");
        match setting {
            PoolSetting::AddIndex if pool.index_build.is_some() => {
                return Err(Failure::new(
                    ErrorCode::InvalidArgument,
                    format!("pool '{name}': its index is being built already"),
                ));
            }
            PoolSetting::AddIndex if pool.index.is_some() => {
                let visible = self.durability.as_ref().map_or(0, |durability| durability.visible_lsn);
                answer.complete(visible, |out| Response::PoolConfigured.encode(request_id, out));
            }
            PoolSetting::AddIndex => {
                pool.index = Some(SecondaryIndex::default());
                pool.index_build = Some(IndexBuild { cursor: 0, answer: Arc::clone(&answer), request_id });
                self.index_builds.push(handle);
                self.index_builds_queued.notify_one();
                tracing::info!(shard = self.index, pool = name, "building a secondary index");
            }
            PoolSetting::RemoveIndex => {
                let build = pool.index_build.take();
                self.pools.set_indexed(handle, false).map_err(|error| log_failure(self.index, &error))?;
                let lsn = self.log_position(true)?;
                let pool = self.pools.get_mut(handle).expect("found by name");
                pool.index = None;
                if let Some(build) = build {
                    build.refuse(
                        ErrorCode::InvalidArgument,
                        &format!("pool '{name}': its index was removed while built"),
                    );
                }
                answer.complete(lsn, |out| Response::PoolConfigured.encode(request_id, out));
            }
        }
        Ok(Accepted::Later(answer))
    }

    /// One step of every index being built; whether any is left for a later step.
    fn step_index_builds(&mut self) -> bool {
        let mut building = std::mem::take(&mut self.index_builds);
        building.retain(|&handle| self.step_index_build(handle));
        let left = !building.is_empty();
        building.append(&mut self.index_builds);
        self.index_builds = building;
        left
    }

    /// One step of pool `handle`'s index build; false once it is over (or the pool is gone).
    fn step_index_build(&mut self, handle: PoolHandle) -> bool {
        let Some(pool) = self.pools.get_mut(handle) else { return false };
        let (Some(build), Some(index)) = (&mut pool.index_build, &mut pool.index) else { return false };
        build.cursor = pool.store.scan(build.cursor, HOMES_PER_STEP, &mut |key| index.insert(key));
        if build.cursor != 0 {
            return true;
        }
        let build = pool.index_build.take().expect("matched above");
        let (name, keys) = (pool.name.clone(), index.len());
        let logged = self.pools.set_indexed(handle, true).map_err(|error| log_failure(self.index, &error));
        match logged.and_then(|()| self.log_position(true)) {
            Ok(lsn) => {
                tracing::info!(shard = self.index, pool = %name, keys, "secondary index built");
                build.answer.complete(lsn, |out| Response::PoolConfigured.encode(build.request_id, out));
            }
            Err(failure) => {
                if let Some(pool) = self.pools.get_mut(handle) {
                    pool.index = None;
                }
                build.refuse(failure.code, &failure.message);
            }
        }
        false
    }
}

impl IndexBuild {
    /// Answers the caller that the build did not complete.
    pub(crate) fn refuse(self, code: ErrorCode, message: &str) {
        let mut frame = BytesMut::new();
        Response::Error { code, message }.encode(self.request_id, &mut frame);
        self.answer.complete(0, |out| out.extend_from_slice(&frame));
    }
}

/// The shard's index task: runs the steps of the indexes being built, one step of each per turn
/// of the event loop, until the shard stops.
pub(crate) async fn run(shard: Rc<RefCell<ShardState>>, mut stop: watch::Receiver<bool>) {
    let queued = Arc::clone(&shard.borrow().index_builds_queued);
    loop {
        tokio::select! {
            _ = stop.wait_for(|stop| *stop) => return,
            () = queued.notified() => {}
        }
        while shard.borrow_mut().step_index_builds() {
            // Every connection with requests runs before the next step.
            tokio::task::yield_now().await;
            if *stop.borrow() {
                return;
            }
        }
    }
}
