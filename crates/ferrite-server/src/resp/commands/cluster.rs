//! The Redis Cluster commands: `CLUSTER` (the topology, from the node's cluster map), `ASKING`,
//! `READONLY` and `READWRITE`. A server not in cluster mode answers each as Redis without cluster
//! support does. The cluster's members are managed with `ferrite cluster`, and each group's slots
//! are fixed, so the commands that change a Redis cluster are refused.

use super::{integer_arg, lossy, reply, subcommand, Call, RespError, Subcommand};
use crate::cluster::view::ClusterView;
use crate::handler::Flow;
use crate::resp::slots::{key_slot, SLOTS};
use crate::resp::topology;

fn disabled() -> RespError {
    RespError::err("This instance has cluster support disabled")
}

/// Refuses on a server not in cluster mode.
fn in_cluster(call: &Call<'_, '_>) -> Result<(), RespError> {
    call.shard.cluster.as_ref().map(|_| ()).ok_or_else(disabled)
}

/// A copy of the cluster map, and this listener's group.
fn view(call: &Call<'_, '_>) -> Result<(ClusterView, usize), RespError> {
    let cluster = call.shard.cluster.as_ref().ok_or_else(disabled)?;
    Ok((cluster.view(), cluster.group))
}

pub(super) fn cluster(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    in_cluster(call)?;
    subcommand(call, "cluster")
}

/// `CLUSTER` subcommands. Those that would change the cluster are refused (see
/// [`managed_elsewhere`]); `COUNTKEYSINSLOT` and `GETKEYSINSLOT` too, as keys are not indexed by slot.
pub(super) static CLUSTER: [Subcommand; 23] = [
    Subcommand { name: "info", arity: 2, run: info },
    Subcommand { name: "myid", arity: 2, run: myid },
    Subcommand { name: "slots", arity: 2, run: slots },
    Subcommand { name: "shards", arity: 2, run: shards },
    Subcommand { name: "nodes", arity: 2, run: nodes },
    Subcommand { name: "keyslot", arity: 3, run: keyslot },
    Subcommand { name: "countkeysinslot", arity: 3, run: keys_in_slot },
    Subcommand { name: "getkeysinslot", arity: 4, run: keys_in_slot },
    Subcommand { name: "addslots", arity: -3, run: managed_elsewhere },
    Subcommand { name: "addslotsrange", arity: -4, run: managed_elsewhere },
    Subcommand { name: "bumpepoch", arity: 2, run: managed_elsewhere },
    Subcommand { name: "count-failure-reports", arity: 3, run: managed_elsewhere },
    Subcommand { name: "delslots", arity: -3, run: managed_elsewhere },
    Subcommand { name: "delslotsrange", arity: -4, run: managed_elsewhere },
    Subcommand { name: "failover", arity: -2, run: managed_elsewhere },
    Subcommand { name: "flushslots", arity: 2, run: managed_elsewhere },
    Subcommand { name: "forget", arity: 3, run: managed_elsewhere },
    Subcommand { name: "meet", arity: -4, run: managed_elsewhere },
    Subcommand { name: "replicate", arity: 3, run: managed_elsewhere },
    Subcommand { name: "reset", arity: -2, run: managed_elsewhere },
    Subcommand { name: "saveconfig", arity: 2, run: managed_elsewhere },
    Subcommand { name: "set-config-epoch", arity: 3, run: managed_elsewhere },
    Subcommand { name: "setslot", arity: -4, run: managed_elsewhere },
];

fn info(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (view, group) = view(call)?;
    let text = topology::info(&view, group);
    reply::bulk(call.out, text.as_bytes());
    Ok(Flow::Continue)
}

fn myid(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (view, group) = view(call)?;
    let id = topology::node_id(view.node_id, group);
    reply::bulk(call.out, id.as_bytes());
    Ok(Flow::Continue)
}

fn slots(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (view, _) = view(call)?;
    topology::slots(call.out, call.client.protocol, &view);
    Ok(Flow::Continue)
}

fn shards(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (view, _) = view(call)?;
    topology::shards(call.out, call.client.protocol, &view);
    Ok(Flow::Continue)
}

fn nodes(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let (view, group) = view(call)?;
    let text = topology::nodes(&view, group, call.settings.port);
    reply::bulk(call.out, text.as_bytes());
    Ok(Flow::Continue)
}

fn keyslot(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    reply::integer(call.out, i64::from(key_slot(call.args.get(2))));
    Ok(Flow::Continue)
}

/// `COUNTKEYSINSLOT` and `GETKEYSINSLOT`: refused once the slot is checked, since a pool's keys are
/// not indexed by slot and counting them would walk the whole pool.
fn keys_in_slot(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    let slot = integer_arg(call.args.get(2)).ok().filter(|slot| (0..i64::from(SLOTS)).contains(slot));
    if slot.is_none() {
        return Err(RespError::err("Invalid slot"));
    }
    Err(RespError::err(format!(
        "CLUSTER {} is not supported: ferrite does not index keys by slot; SCAN walks this node's keys",
        lossy(call.args.get(1), 32).to_uppercase()
    )))
}

/// The commands that assign slots or change members: a Ferrite cluster's groups own fixed slot
/// ranges, and its members are managed with `ferrite cluster`.
fn managed_elsewhere(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    Err(RespError::err(format!(
        "CLUSTER {} is not supported: a ferrite cluster's members are managed with `ferrite cluster` and each \
         group owns a fixed range of slots (docs/resp.md, Redis Cluster protocol)",
        lossy(call.args.get(1), 32).to_uppercase()
    )))
}

/// `ASKING`: there are no slot migrations, hence no `-ASK` redirections, but clients may send it.
pub(super) fn asking(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    in_cluster(call)?;
    reply::ok(call.out);
    Ok(Flow::Continue)
}

/// `READONLY`: from now on a follower may answer this connection's reads of its group's keys
/// from its replica, which may lag a little behind the leader (see `follower.rs` and
/// `docs/resp.md`). Writes are still redirected to the leader.
pub(super) fn readonly(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    in_cluster(call)?;
    call.client.readonly = true;
    reply::ok(call.out);
    Ok(Flow::Continue)
}

/// `READWRITE`: ends `READONLY`.
pub(super) fn readwrite(call: &mut Call<'_, '_>) -> Result<Flow, RespError> {
    in_cluster(call)?;
    call.client.readonly = false;
    reply::ok(call.out);
    Ok(Flow::Continue)
}
