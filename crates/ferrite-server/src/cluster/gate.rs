//! Which requests a cluster node's shard answers: those about its group's data only while its
//! replica leads the group, and reads and writes alike only within its lease (a quorum heard
//! from it recently enough that no other replica can lead yet).
//!
//! Both client protocols ask [`ShardState::group_gate`] before they run such a request: a
//! follower refuses it (`not_leader`, naming the leader it knows of); a replica that won its
//! election but still applies what came before its term, or that runs a membership change, makes
//! it wait; a leader whose lease lapsed makes it wait while it confirms its leadership with a
//! quorum. [`ShardState::refuse_unless_leading`] is the last line, inside the shard's request
//! execution: nothing that reads or writes pools ever runs on a replica that does not lead.

use std::sync::Arc;
use std::time::Instant;

use ferrite_proto::Request;

use super::replication::Role;
use crate::completion::Completion;
use crate::handler::{Failure, ShardState};

/// What a request about the group's data meets on this shard.
#[derive(Debug)]
pub(crate) enum Gate {
    /// It runs now.
    Open,
    /// It runs again once this completes.
    Wait(Arc<Completion>),
    /// This replica does not lead: the client goes to the leader.
    Refuse(Failure),
}

/// Whether `request` is about the shard's group's data (its pools), which only the group's
/// leader serves. The rest (the handshake, statistics, the cluster's map and administration) any
/// node answers.
pub(crate) fn concerns_group(request: &Request<'_>) -> bool {
    !matches!(
        request,
        Request::Hello { .. }
            | Request::GetStatistics
            | Request::NodeInfo
            | Request::ClusterMap
            | Request::ClusterAdmin(_)
    )
}

impl ShardState {
    /// Whether a request about the group's data may run now (see the module's doc).
    pub(crate) fn group_gate(&mut self) -> Gate {
        let Some(replication) = self.replication.as_mut() else { return Gate::Open };
        let confirm = match replication.role {
            Role::Leading { .. } if replication.pauses == 0 && !replication.transferring => {
                if replication.lease_holds(Instant::now()) {
                    return Gate::Open;
                }
                true
            }
            Role::Leading { .. } | Role::Elected { .. } => false,
            Role::Following | Role::Deposed => return Gate::Refuse(self.not_leader()),
        };
        let waiter = Completion::new();
        replication.waiters.push(Arc::clone(&waiter));
        if confirm {
            replication.confirmations.notify_one();
        }
        Gate::Wait(waiter)
    }

    /// Refuses `request` if it concerns the group's data and this replica does not lead: the
    /// last check before a request reads or changes pools (the protocols' gates came first).
    pub(crate) fn refuse_unless_leading(&self, request: &Request<'_>) -> Result<(), Failure> {
        match &self.replication {
            Some(replication) if !replication.leads() && concerns_group(request) => Err(self.not_leader()),
            _ => Ok(()),
        }
    }
}
