//! The group's state machine as openraft asks for it: the shard's pools, which committed entries
//! change in log order ([`ShardState::apply_entry`]). A thin adapter: what applying means is in
//! the shard's replica ([`super::replication`]).

use std::cell::RefCell;
use std::io;
use std::rc::Rc;

use futures_util::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};

use super::snapshot::{SnapshotFiles, SnapshotStore};
use super::types::{Entry, LogId, Redo, StoredMembership, C};
use crate::handler::ShardState;
use ferrite_store::persistence::ssd::entry::Entry as Framed;
use ferrite_store::persistence::ssd::PoolChange;

type SnapshotOf = openraft::type_config::alias::SnapshotOf<C, SnapshotFiles>;
type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<C>;

/// The state machine of one shard's group.
#[derive(Clone)]
pub(crate) struct ShardMachine {
    shard: Rc<RefCell<ShardState>>,
    snapshots: SnapshotStore,
}

impl std::fmt::Debug for ShardMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardMachine").finish_non_exhaustive()
    }
}

impl ShardMachine {
    pub fn new(shard: Rc<RefCell<ShardState>>, snapshots: SnapshotStore) -> ShardMachine {
        ShardMachine { shard, snapshots }
    }
}

impl ShardState {
    /// Applies one committed entry of the group's log: its record is written into pool memory,
    /// unless this replica executed it (then its effect is there already); a membership is
    /// remembered. Responses and checkpoints may then count it.
    pub(crate) fn apply_entry(&mut self, entry: &Entry) -> io::Result<()> {
        let index = entry.log_id.index;
        let replication = self.replication.as_mut().ok_or_else(|| io::Error::other("no replica"))?;
        match &entry.payload {
            EntryPayload::Normal(Redo::Payload(payload)) => {
                let at = replication.take_place(index);
                if !replication.take_executed_at(index) {
                    let Some(Framed::Normal { record, .. }) = Framed::decode(payload) else {
                        return Err(io::Error::other(format!("entry {index} holds no record")));
                    };
                    match replication.replica.as_mut() {
                        Some(pools) => match pools.apply_at(index, at, record).map_err(io::Error::other)? {
                            Some(PoolChange::Created { owner: Some(owner), size_bytes }) => {
                                self.auth.usage.count_pool(&owner, size_bytes);
                            }
                            Some(PoolChange::Deleted { owner: Some(owner), size_bytes }) => {
                                self.auth.usage.release_pool(&owner, size_bytes);
                            }
                            _ => {}
                        },
                        None => replication.must_restart(format!(
                            "the leading replica was given entry {index}, which it did not execute, to apply"
                        )),
                    }
                }
            }
            EntryPayload::Normal(Redo::Appended { seq }) => {
                return Err(io::Error::other(format!("entry {index} (#{seq}) was applied without its record")));
            }
            EntryPayload::Blank => {}
            EntryPayload::Membership(membership) => {
                replication.membership = StoredMembership::new(Some(entry.log_id), membership.clone());
                let stored = (entry.log_id, membership.clone());
                replication.state.update(|state| {
                    state.memberships.push(stored);
                    while state.memberships.len() > 2 {
                        state.memberships.remove(0);
                    }
                })?;
            }
        }
        replication.applied = Some(entry.log_id);
        if let Some(durability) = &self.durability {
            durability.set_committed(index);
        }
        Ok(())
    }
}

impl RaftSnapshotBuilder<C> for ShardMachine {
    type SnapshotData = SnapshotFiles;

    async fn build_snapshot(&mut self) -> Result<SnapshotOf, io::Error> {
        let (meta_membership, dir) = {
            let shard = self.shard.borrow();
            let replication = shard.replication.as_ref().ok_or_else(|| io::Error::other("no replica"))?;
            let durability = shard.durability.as_ref().ok_or_else(|| io::Error::other("no log"))?;
            (replication.membership.clone(), durability.paths.clone())
        };
        self.snapshots.build(&self.shard, &dir, meta_membership).await
    }
}

impl RaftStateMachine<C> for ShardMachine {
    type SnapshotData = SnapshotFiles;
    type SnapshotBuilder = ShardMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let shard = self.shard.borrow();
        let replication = shard.replication.as_ref().ok_or_else(|| io::Error::other("no replica"))?;
        Ok((replication.applied, replication.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<C>, io::Error>> + Unpin + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            self.shard.borrow_mut().apply_entry(&entry)?;
            if let Some(responder) = responder {
                responder.send(());
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: SnapshotFiles) -> Result<(), io::Error> {
        self.snapshots.install(&self.shard, meta, snapshot).await
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<SnapshotOf>, io::Error> {
        Ok(self.snapshots.current())
    }
}
