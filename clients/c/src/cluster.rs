//! The cluster map (`ferrite_cluster_map_get`): every node and each group's leader, as structs
//! the library allocates and `ferrite_cluster_map_free` takes back. Routing needs none of it: a
//! session sends each pool's requests to its group's leader by itself.

use std::ffi::c_char;
use std::ptr;

use crate::args;
use crate::memory::{give, give_text, take_back, take_back_text};
use crate::session::ferrite_session;
use crate::status::{ferrite_status, guard, guard_void};

/// One node of a cluster map. The strings belong to the map.
#[repr(C)]
#[derive(Debug)]
pub struct ferrite_cluster_node {
    /// The node's id; 0 for a server not in cluster mode.
    pub node_id: u64,
    /// `host:port` of its native listener for shard 0 (shard g listens on the port plus g).
    pub native: *mut c_char,
    /// `host:port` of its RESP listener for shard 0; "" if it serves none.
    pub resp: *mut c_char,
    /// `host:port` of its peer (node-to-node) listener; "" on a server not in cluster mode.
    pub peer: *mut c_char,
}

/// One group of a cluster map: the replicas of one shard index. The arrays belong to the map.
#[repr(C)]
#[derive(Debug)]
pub struct ferrite_cluster_group {
    /// The node leading the group; 0 while none is known.
    pub leader: u64,
    pub term: u64,
    /// The voting members, by node id; NULL when `voter_count` is 0.
    pub voters: *mut u64,
    pub voter_count: usize,
    /// The members receiving the log without voting (a node being added).
    pub learners: *mut u64,
    pub learner_count: usize,
}

/// The cluster map (`ferrite_cluster_map_get`). A server not in cluster mode answers one node
/// (id 0) leading every group, with `single_server` true. Free it with
/// `ferrite_cluster_map_free`.
#[repr(C)]
#[derive(Debug)]
pub struct ferrite_cluster_map {
    /// Moves whenever a leader or a membership changes.
    pub version: u64,
    /// The cluster's id; "" on a server not in cluster mode or a node not yet initialized.
    pub cluster_id: *mut c_char,
    /// Whether the map is a single server's: nothing to route.
    pub single_server: bool,
    pub nodes: *mut ferrite_cluster_node,
    pub node_count: usize,
    /// One per shard index, group 0 first.
    pub groups: *mut ferrite_cluster_group,
    pub group_count: usize,
}

impl ferrite_cluster_map {
    pub(crate) const EMPTY: ferrite_cluster_map = ferrite_cluster_map {
        version: 0,
        cluster_id: ptr::null_mut(),
        single_server: false,
        nodes: ptr::null_mut(),
        node_count: 0,
        groups: ptr::null_mut(),
        group_count: 0,
    };

    pub(crate) fn from_map(map: ferrite_client::ClusterMap) -> ferrite_cluster_map {
        let single_server = map.is_single_server();
        let nodes = map
            .nodes
            .iter()
            .map(|node| ferrite_cluster_node {
                node_id: node.node_id,
                native: give_text(&node.native),
                resp: give_text(&node.resp),
                peer: give_text(&node.peer),
            })
            .collect();
        let groups = map
            .groups
            .into_iter()
            .map(|group| {
                let (voters, voter_count) = give(group.voters);
                let (learners, learner_count) = give(group.learners);
                ferrite_cluster_group {
                    leader: group.leader,
                    term: group.term,
                    voters,
                    voter_count,
                    learners,
                    learner_count,
                }
            })
            .collect();
        let (nodes, node_count) = give(nodes);
        let (groups, group_count) = give(groups);
        ferrite_cluster_map {
            version: map.version,
            cluster_id: give_text(&map.cluster_id),
            single_server,
            nodes,
            node_count,
            groups,
            group_count,
        }
    }
}

/// The cluster map, fetched anew from a node of the session, into `*out`; free it with
/// `ferrite_cluster_map_free`. On failure `*out` is empty.
///
/// # Safety
/// `session` is NULL or a live session; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ferrite_cluster_map_get(
    session: *const ferrite_session,
    out: *mut ferrite_cluster_map,
) -> ferrite_status {
    guard(|| {
        // SAFETY: `out` is NULL or writable, as the caller promises.
        unsafe { args::clear(out, ferrite_cluster_map::EMPTY) };
        let out = args::out(out, "out")?;
        // SAFETY: the caller promises a live session.
        let session = unsafe { args::object(session, "session")? };
        let map = session.runtime.block_on(session.session.cluster_map())?;
        // SAFETY: checked non-null above; writable as the caller promises.
        unsafe { out.write(ferrite_cluster_map::from_map(map)) };
        Ok(())
    })
}

/// Frees a cluster map, its strings and arrays, and resets it to empty. NULL is a no-op.
///
/// # Safety
/// `map` is NULL or points to a `ferrite_cluster_map` that is empty or that this library filled
/// in and the caller has not changed.
#[no_mangle]
pub unsafe extern "C" fn ferrite_cluster_map_free(map: *mut ferrite_cluster_map) {
    guard_void(|| {
        // SAFETY: the caller promises a valid map when non-null.
        if let Some(map) = unsafe { map.as_mut() } {
            // SAFETY: the map, its arrays and its strings are ours and unchanged.
            unsafe {
                for node in take_back(map.nodes, map.node_count) {
                    take_back_text(node.native);
                    take_back_text(node.resp);
                    take_back_text(node.peer);
                }
                for group in take_back(map.groups, map.group_count) {
                    drop(take_back(group.voters, group.voter_count));
                    drop(take_back(group.learners, group.learner_count));
                }
                take_back_text(map.cluster_id);
            }
            *map = ferrite_cluster_map::EMPTY;
        }
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Proves a map crosses to C whole (nodes, groups and their member arrays) and that freeing
    /// takes everything back and leaves it empty, so a second free is harmless.
    #[test]
    fn a_map_is_handed_over_and_freed_whole() {
        let map = ferrite_client::ClusterMap::single_server("127.0.0.1:11911", 2);
        let mut c = ferrite_cluster_map::from_map(map);
        assert!(c.single_server && c.node_count == 1 && c.group_count == 2);
        let node = unsafe { &*c.nodes };
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(node.native) }, c"127.0.0.1:11911");
        assert_eq!(unsafe { std::ffi::CStr::from_ptr(node.peer) }, c"");
        let group = unsafe { &*c.groups.add(1) };
        assert_eq!((group.leader, group.voter_count, unsafe { *group.voters }), (0, 1, 0));
        assert!(group.learners.is_null() && group.learner_count == 0);
        unsafe { ferrite_cluster_map_free(&mut c) };
        assert!(c.nodes.is_null() && c.groups.is_null() && c.cluster_id.is_null());
        unsafe { ferrite_cluster_map_free(&mut c) };
        unsafe { ferrite_cluster_map_free(ptr::null_mut()) };
    }
}
