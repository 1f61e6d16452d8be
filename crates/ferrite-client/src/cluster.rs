//! Cluster awareness (`docs/clients.md`, "Clusters"): the map a session routes by, how a request
//! follows `not_leader` answers to its group's leader, and the administration of a cluster.
//!
//! A session asks for the cluster map right after its first hello. A single server's map (one
//! node, id 0) changes nothing: the session keeps no routes and every request goes to its shard
//! as it always did. In a cluster, each group's requests go to its leader, as the map or the
//! latest `not_leader` names it. A `not_leader` sends the request there, at most
//! [`REDIRECTS_MAX`] times, waiting [`LEADER_UNKNOWN_WAITS_MS`] in turn whenever no leader is
//! known (an election is running); one from a node whose map is newer than the session's makes
//! the session fetch that map. A node that cannot be reached makes the session ask another node
//! for the map. A request whose connection broke while it was in flight may have been applied,
//! so it is reported, never sent again, except reads ([`Resend::Once`]), which are sent once
//! more.

use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use ferrite_proto::{
    shard_address, ClusterAdmin, ClusterMap, ClusterNode, ClusterStatus, ErrorCode, NodeInfo, NotLeader, Request,
};

use crate::address::resolve_shard_address;
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::reply::Reply;
use crate::session::Session;

/// Most `not_leader` answers naming a leader one request follows before its error reaches the
/// caller (waits while no leader is known, or the one known is unreachable, are counted apart:
/// [`LEADER_UNKNOWN_WAITS_MS`]).
pub const REDIRECTS_MAX: usize = 5;

/// How long a request waits, in turn, each time no leader of its group is known (or the one
/// known cannot be reached) before it asks again; the request fails once they are spent. An
/// election takes a few hundred milliseconds, so the waits stay short (at most 250 ms): a
/// leader elected meanwhile is found within one of them, about 1.7 s in all.
pub const LEADER_UNKNOWN_WAITS_MS: [u64; 10] = [25, 50, 100, 150, 200, 200, 200, 250, 250, 250];

/// Whether a request whose connection broke while it was in flight is sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// A read (get, count, find, attributes, a direct read's opening): nothing changes if it
    /// ran twice, so it is sent once more, to the group's leader.
    Once,
    /// Anything that may change state: it may have been applied, so the error is reported.
    Never,
}

/// The node leading a group, and its native address for the group's shard.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Leader {
    node_id: u64,
    address: String,
}

/// Where a session in a cluster sends each group's requests.
#[derive(Debug)]
pub(crate) struct Routes {
    map: ClusterMap,
    /// The IP of the node the map came from: an address with an unspecified host means it.
    from: IpAddr,
    /// By group: its leader from the map, or from the latest `not_leader`; `None` while unknown.
    leaders: Vec<Option<Leader>>,
}

impl Routes {
    pub(crate) fn new(map: ClusterMap, from: IpAddr) -> Routes {
        let leaders = leaders_of(&map, from);
        Routes { map, from, leaders }
    }

    fn adopt(&mut self, map: ClusterMap, from: IpAddr) {
        *self = Routes::new(map, from);
    }

    /// Sends the refused group's requests where the refusal says its leader is.
    fn hint(&mut self, refusal: &NotLeader, from: IpAddr) {
        let Some(slot) = self.leaders.get_mut(usize::from(refusal.group)) else { return };
        *slot = match (refusal.leader, resolve_shard_address(&refusal.leader_native, from)) {
            (0, _) | (_, Err(_)) => None,
            (node_id, Ok(address)) => Some(Leader { node_id, address }),
        };
    }

    /// Forgets the leader of `group`, returning the node it was.
    fn forget(&mut self, group: u16) -> Option<u64> {
        self.leaders.get_mut(usize::from(group))?.take().map(|leader| leader.node_id)
    }

    /// The shard 0 addresses of the nodes the map knows, but `except`.
    fn nodes_except(&self, except: Option<u64>) -> Vec<String> {
        let others = self.map.nodes.iter().filter(|node| Some(node.node_id) != except);
        others.filter_map(|node| resolve_shard_address(&node.native, self.from).ok()).collect()
    }

    fn unknown_leader(&self, group: u16) -> Error {
        Error::NotLeader(Box::new(NotLeader {
            group,
            leader: 0,
            leader_native: String::new(),
            map_version: self.map.version,
            message: format!("no leader of group {group} is known (an election may be running)"),
        }))
    }
}

/// Each group's leader as `map` names it, with its address for the group's shard.
fn leaders_of(map: &ClusterMap, from: IpAddr) -> Vec<Option<Leader>> {
    (0..map.shard_count())
        .map(|group| {
            let node = map.leader_of(group)?;
            let address = resolve_shard_address(&shard_address(&node.native, group)?, from).ok()?;
            Some(Leader { node_id: node.node_id, address })
        })
        .collect()
}

/// The cluster map `connection`'s node knows, which must have a group for each of the
/// session's `shard_count` shards.
pub(crate) async fn fetch_map(connection: &Connection, shard_count: u16) -> Result<ClusterMap> {
    match connection.call(&Request::ClusterMap).await? {
        Reply::ClusterMap(map) if map.shard_count() == shard_count => Ok(map),
        Reply::ClusterMap(map) => Err(Error::UnexpectedResponse(format!(
            "the cluster map has {} groups, but the server has {shard_count} shards",
            map.shard_count()
        ))),
        other => Err(other.unexpected("cluster_map")),
    }
}

/// How a failed attempt was made.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Attempt<'c> {
    /// Connecting to the leader failed: nothing was sent.
    Connecting,
    /// The request went out on this connection.
    Sent(&'c Connection),
}

/// One request's budget of redirects, waits and resends.
#[derive(Debug)]
pub(crate) struct Redirects {
    followed: usize,
    waits: usize,
    resend: Resend,
    resent: bool,
}

impl Redirects {
    pub(crate) fn new(resend: Resend) -> Redirects {
        Redirects { followed: 0, waits: 0, resend, resent: false }
    }

    /// After `error`, updates the session's routes and says whether to try again (`Ok`) or
    /// give up with the error.
    pub(crate) async fn after(
        &mut self,
        session: &Session,
        shard: u16,
        error: Error,
        attempt: Attempt<'_>,
    ) -> Result<()> {
        match (&error, attempt) {
            (Error::NotLeader(refusal), _) => {
                let unknown = refusal.leader == 0 || refusal.leader_native.is_empty();
                if !(if unknown { self.take_wait() } else { self.take_redirect() }) {
                    return Err(error);
                }
                session.follow(refusal, attempt).await;
                if unknown {
                    self.wait().await;
                    // Without an answer the session keeps its map, and the next attempt says
                    // the leader is still unknown.
                    let _ = session.refresh_map(None).await;
                }
                Ok(())
            }
            // A refusal sent as a plain `error` frame names no leader: as one that knows none.
            (Error::Server { code: ErrorCode::NotLeader, .. }, _) => {
                if !self.take_wait() {
                    return Err(error);
                }
                let refusal = NotLeader { group: shard, ..NotLeader::default() };
                session.follow(&refusal, Attempt::Connecting).await;
                self.wait().await;
                let _ = session.refresh_map(None).await;
                Ok(())
            }
            (_, Attempt::Connecting) if node_failure(&error) => {
                if !self.take_wait() {
                    return Err(error);
                }
                self.wait().await;
                session.node_failed(shard).await;
                Ok(())
            }
            (Error::ConnectionClosed(_), Attempt::Sent(_)) => {
                session.node_failed(shard).await;
                match (self.resend, self.resent) {
                    (Resend::Once, false) => {
                        self.resent = true;
                        Ok(())
                    }
                    _ => Err(error),
                }
            }
            _ => Err(error),
        }
    }

    /// Takes one redirect from the budget; `false` once it is spent.
    fn take_redirect(&mut self) -> bool {
        if self.followed == REDIRECTS_MAX {
            return false;
        }
        self.followed += 1;
        true
    }

    /// Takes one wait from the budget; `false` once [`LEADER_UNKNOWN_WAITS_MS`] are spent.
    fn take_wait(&mut self) -> bool {
        self.waits < LEADER_UNKNOWN_WAITS_MS.len()
    }

    /// Waits the next of [`LEADER_UNKNOWN_WAITS_MS`].
    async fn wait(&mut self) {
        let ms = LEADER_UNKNOWN_WAITS_MS[self.waits.min(LEADER_UNKNOWN_WAITS_MS.len() - 1)];
        self.waits += 1;
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// Whether an error connecting to a node says the node is gone (rather than, say, refusing this
/// client's credentials).
fn node_failure(error: &Error) -> bool {
    matches!(error, Error::Unreachable { .. } | Error::Io { .. } | Error::ConnectionClosed(_))
}

impl Session {
    /// The connection to the leader of `shard`'s group: in a cluster, the node the routes name;
    /// on a single server, the shard itself.
    pub(crate) async fn leader_connection(&self, shard: u16) -> Result<Connection> {
        let Some(routes) = self.routes() else { return self.connection(shard).await };
        let leader = {
            let routes = routes.lock().expect(ROUTES_LOCK);
            routes.leaders.get(usize::from(shard)).cloned().flatten().ok_or_else(|| routes.unknown_leader(shard))
        };
        self.connection_at(&leader?.address, shard).await
    }

    /// Runs `attempt` on the connection to the leader of `shard`'s group, following redirects
    /// as [`Redirects`] allows. On a single server: once, on the shard's connection.
    pub(crate) async fn routed<T, F, Fut>(&self, shard: u16, resend: Resend, attempt: F) -> Result<T>
    where
        F: FnMut(Connection) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.routed_within(shard, &mut Redirects::new(resend), attempt).await
    }

    /// [`Session::routed`] within a budget `redirects` the caller already spent from.
    pub(crate) async fn routed_within<T, F, Fut>(
        &self,
        shard: u16,
        redirects: &mut Redirects,
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut(Connection) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        if self.routes().is_none() {
            return attempt(self.connection(shard).await?).await;
        }
        loop {
            let connection = match self.leader_connection(shard).await {
                Ok(connection) => connection,
                Err(error) => {
                    redirects.after(self, shard, error, Attempt::Connecting).await?;
                    continue;
                }
            };
            match attempt(connection.clone()).await {
                Err(error) => redirects.after(self, shard, error, Attempt::Sent(&connection)).await?,
                done => return done,
            }
        }
    }

    /// Takes in a refusal: fetches the map of the node that refused if it is newer than the
    /// session's, then sends the group's requests where the refusal says.
    async fn follow(&self, refusal: &NotLeader, attempt: Attempt<'_>) {
        let Some(routes) = self.routes() else { return };
        let Attempt::Sent(via) = attempt else {
            routes.lock().expect(ROUTES_LOCK).forget(refusal.group);
            return;
        };
        let newer = routes.lock().expect(ROUTES_LOCK).map.version < refusal.map_version;
        let map = match newer {
            true => fetch_map(via, self.shard_count()).await.ok(),
            false => None,
        };
        let mut routes = routes.lock().expect(ROUTES_LOCK);
        if let Some(map) = map {
            routes.adopt(map, via.peer_ip());
        }
        routes.hint(refusal, via.peer_ip());
    }

    /// Takes in that the leader of `shard`'s group could not be reached, or broke a connection:
    /// forgets it and asks the other nodes for the map.
    async fn node_failed(&self, shard: u16) {
        let Some(routes) = self.routes() else { return };
        let failed = routes.lock().expect(ROUTES_LOCK).forget(shard);
        // Without an answer the group's leader stays unknown, which the next attempt reports.
        let _ = self.refresh_map(failed).await;
    }

    /// Asks the nodes the map knows, but `except`, for their map, and adopts the first answer.
    /// The error of the last node asked if none answers.
    async fn refresh_map(&self, except: Option<u64>) -> Result<ClusterMap> {
        let Some(routes) = self.routes() else {
            return fetch_map(&self.connection(0).await?, self.shard_count()).await;
        };
        let mut nodes = routes.lock().expect(ROUTES_LOCK).nodes_except(except);
        if nodes.is_empty() {
            // A node not yet in a cluster knows no members, itself included.
            nodes.push(self.shard_addresses()[0].clone());
        }
        let mut last = None;
        for node in nodes {
            let fetched = match self.connection_at(&node, 0).await {
                Ok(connection) => {
                    fetch_map(&connection, self.shard_count()).await.map(|map| (map, connection.peer_ip()))
                }
                Err(error) => Err(error),
            };
            match fetched {
                Ok((map, from)) => {
                    routes.lock().expect(ROUTES_LOCK).adopt(map.clone(), from);
                    return Ok(map);
                }
                Err(error) => last = Some(error),
            }
        }
        Err(last.expect("a map is asked of one node at least"))
    }

    /// The cluster map, fetched anew from a node of the session: on a single server, one node
    /// (id 0) leading every group ([`ClusterMap::is_single_server`]). In a cluster the session
    /// routes by it from now on.
    pub async fn cluster_map(&self) -> Result<ClusterMap> {
        self.refresh_map(None).await
    }

    /// The node this session connected to, and its cluster (node 0, no cluster id, on a server
    /// not in cluster mode).
    pub async fn node_info(&self) -> Result<NodeInfo> {
        match self.connection(0).await?.call(&Request::NodeInfo).await? {
            Reply::NodeInfo(info) => Ok(info),
            other => Err(other.unexpected("node_info")),
        }
    }

    /// Makes `members` the first voters of group `group` (needs `admin` on every pool). Sent to
    /// shard `group` of the node this session connected to, which must be one of them; a group
    /// already initialized answers `invalid_argument`, and so does a server not in cluster mode.
    pub async fn cluster_init(&self, group: u16, members: &[ClusterNode]) -> Result<()> {
        let admin = ClusterAdmin::Init { group, members: members.to_vec() };
        match self.administer(admin, false).await? {
            Reply::ClusterInitialized => Ok(()),
            other => Err(other.unexpected("cluster_initialized")),
        }
    }

    /// Adds `node` to group `group`: sent to the group's leader, which makes it a learner, waits
    /// until it has caught up (a snapshot and the log: this may take long), then makes it a
    /// voter.
    pub async fn cluster_add_node(&self, group: u16, node: &ClusterNode) -> Result<()> {
        match self.administer(ClusterAdmin::AddNode { group, node: node.clone() }, true).await? {
            Reply::NodeAdded => Ok(()),
            other => Err(other.unexpected("node_added")),
        }
    }

    /// Removes the node `node_id` from group `group`, through the group's leader.
    pub async fn cluster_remove_node(&self, group: u16, node_id: u64) -> Result<()> {
        match self.administer(ClusterAdmin::RemoveNode { group, node_id }, true).await? {
            Reply::NodeRemoved => Ok(()),
            other => Err(other.unexpected("node_removed")),
        }
    }

    /// Hands the leadership of group `group` to the member `to`, through the group's leader;
    /// answered once `to` leads (or with `internal` after 5 seconds).
    pub async fn cluster_transfer_leader(&self, group: u16, to: u64) -> Result<()> {
        match self.administer(ClusterAdmin::TransferLeader { group, to }, true).await? {
            Reply::LeaderTransferred => Ok(()),
            other => Err(other.unexpected("leader_transferred")),
        }
    }

    /// The replica of group `group` on the node this session connected to: its role, term, log
    /// positions and, on the leader, each follower's progress.
    pub async fn cluster_status(&self, group: u16) -> Result<ClusterStatus> {
        match self.administer(ClusterAdmin::Status { group }, false).await? {
            Reply::ClusterStatus(status) => Ok(status),
            other => Err(other.unexpected("cluster_status")),
        }
    }

    /// Sends an administration request to shard `group` of its group's leader (`to_leader`) or
    /// of the node this session connected to.
    async fn administer(&self, admin: ClusterAdmin, to_leader: bool) -> Result<Reply> {
        let group = admin.group();
        if group >= self.shard_count() {
            return Err(Error::InvalidArgument(format!(
                "group {group} does not exist: the server has {} shards, so groups 0 to {}",
                self.shard_count(),
                self.shard_count() - 1
            )));
        }
        let request = Request::ClusterAdmin(admin);
        if !to_leader {
            return self.connection(group).await?.call(&request).await;
        }
        self.routed(group, Resend::Never, |connection| {
            let request = &request;
            async move { connection.call(request).await }
        })
        .await
    }
}

const ROUTES_LOCK: &str = "the routes lock is never held across anything that can panic";

/// Whether a server that does not know `cluster_map` answered: it predates cluster mode, so it
/// is a single server.
pub(crate) fn predates_clusters(error: &Error) -> bool {
    error.code() == Some(ErrorCode::UnknownOpcode)
}
