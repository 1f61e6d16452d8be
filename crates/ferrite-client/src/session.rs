//! A session with one Ferrite server: every shard, reached through one connection each.

use std::sync::Arc;
use std::time::Duration;

use ferrite_proto::{shard_for_pool, CreatePoolFlags, Durability, Limits, PoolMemory, PoolSetting, Request};
use foldhash::HashMap;
use tokio::sync::Mutex;

use crate::address::resolve_shard_address;
use crate::cluster::{fetch_map, predates_clusters, Resend, Routes};
use crate::connection::Connection;
use crate::error::{Error, Result};
use crate::pool::{Bound, Pool};
use crate::reply::{Hello, PoolRow, Reply};

/// How to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    /// Sent in the handshake and shown in the server's logs; name your program here.
    pub client_name: String,
    /// Limit on connecting plus the handshake, per shard connection. A server that accepts but
    /// never answers would otherwise hang `connect` forever.
    pub connect_timeout: Duration,
    /// Speak TLS to every shard (servers configured with `[tls]` require it).
    pub tls: Option<crate::TlsOptions>,
    /// Who this client is, on a server with users (`--users`); every shard connection
    /// authenticates with them. Over mutual TLS a client certificate may identify the user
    /// instead.
    pub credentials: Option<UserCredentials>,
}

/// A user name and its password, sent in each shard connection's handshake.
#[derive(Clone, PartialEq, Eq)]
pub struct UserCredentials {
    pub user: String,
    pub password: String,
}

impl UserCredentials {
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> UserCredentials {
        UserCredentials { user: user.into(), password: password.into() }
    }

    /// The handshake's `auth` bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        ferrite_proto::Credentials { user: &self.user, password: self.password.as_bytes() }.encode()
    }
}

impl std::fmt::Debug for UserCredentials {
    /// Names the user, never shows the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserCredentials").field("user", &self.user).finish_non_exhaustive()
    }
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            client_name: concat!("ferrite-client/", env!("CARGO_PKG_VERSION")).to_owned(),
            connect_timeout: Duration::from_secs(10),
            tls: None,
            credentials: None,
        }
    }
}

/// What one shard's backup copied ([`Session::back_up`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardBackup {
    pub shard: u16,
    /// The last log record the backup holds: every write the shard had applied when the backup
    /// began is in it.
    pub lsn: u64,
    pub files: u64,
    pub bytes: u64,
}

/// How to create a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolOptions {
    /// Capacity: key bytes + value bytes + 64 bytes per pair. Fixed at creation; opening an
    /// existing pool keeps its original size.
    pub size_bytes: u64,
    /// Sizing hint for the pool's hash table, so it need not grow while the pool fills.
    pub expected_objects: u64,
    /// Fail with `pool_exists` instead of opening a pool that already exists.
    pub create_only: bool,
    /// Keep a secondary index (an ordered index over the keys) so [`Pool::find`] searches in key
    /// order; without it, `find` walks the hash table. Costs a copy of every key in server memory
    /// (about 70 bytes per key).
    pub indexed: bool,
    /// The durability of writes that do not choose one ([`Pool::put_with`] with
    /// [`PutFlags::with_durability`](crate::PutFlags::with_durability) does): `Sync` acknowledges
    /// a write once it is on stable storage, `Async` once it is applied. Fixed at creation.
    pub durability: Durability,
    /// The pool's chain of Active Data Object plugins, by the names the server knows them by,
    /// in the order they run. Fixed at creation; opening an existing pool keeps its chain.
    pub plugins: Vec<String>,
}

impl PoolOptions {
    pub const DEFAULT_SIZE_BYTES: u64 = 64 * 1024 * 1024;
    pub const DEFAULT_EXPECTED_OBJECTS: u64 = 1024;
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            size_bytes: PoolOptions::DEFAULT_SIZE_BYTES,
            expected_objects: PoolOptions::DEFAULT_EXPECTED_OBJECTS,
            create_only: false,
            indexed: false,
            durability: Durability::Sync,
            plugins: Vec::new(),
        }
    }
}

/// One pool as listed by [`Session::list_pools`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolInfo {
    pub name: String,
    /// The shard that holds the pool.
    pub shard: u16,
    /// Key-value pairs in the pool.
    pub objects: u64,
    pub size_bytes: u64,
    pub used_bytes: u64,
    /// Opens held on the pool across all sessions; a pool with opens cannot be deleted.
    pub open_count: u32,
    /// What the pool takes in memory, by part.
    pub memory: PoolMemory,
    /// The pool's chain of Active Data Object plugins, in the order they run.
    pub plugins: Vec<String>,
    /// Whether the pool has a whole secondary index ([`PoolOptions::indexed`], or one
    /// [`Session::configure_pool`] built), which [`Pool::find`](crate::Pool::find) searches in
    /// key order.
    pub indexed: bool,
    /// The durability of the pool's writes that choose none ([`PoolOptions::durability`]).
    pub durability: Durability,
}

impl PoolInfo {
    fn from_row(row: PoolRow, shard: u16) -> Result<PoolInfo> {
        let settings = row.settings.ok_or_else(|| {
            Error::UnexpectedResponse("the server answered a described list_pools without the settings".to_owned())
        })?;
        Ok(PoolInfo {
            name: row.name,
            shard,
            objects: row.objects,
            size_bytes: row.size_bytes,
            used_bytes: row.used_bytes,
            open_count: row.open_count,
            memory: row.memory,
            plugins: row.plugins,
            indexed: settings.indexed,
            durability: settings.durability,
        })
    }

    /// The pool's memory in use over its pairs: what sizing a machine for more of the same
    /// costs a pair. `None` for an empty pool.
    pub fn bytes_per_key(&self) -> Option<f64> {
        (self.objects > 0).then(|| self.memory.total_bytes() as f64 / self.objects as f64)
    }

    /// Pairs over buckets of the pool's hash table. `None` before the table has buckets.
    pub fn table_load(&self) -> Option<f64> {
        (self.memory.table_buckets > 0).then(|| self.objects as f64 / self.memory.table_buckets as f64)
    }
}

/// The counters of one shard, as named pairs so a newer server can add counters without
/// breaking this client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardStatistics {
    pub shard: u16,
    pub counters: Vec<(String, u64)>,
}

impl ShardStatistics {
    /// The counter called `name` (`"puts"`, `"clients"`, ...; see docs/protocol.md), if the
    /// server reports it.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.counters.iter().find(|(n, _)| n == name).map(|(_, value)| *value)
    }
}

/// A session with a Ferrite server.
///
/// Knows every shard's address from the handshake, opens one connection per shard on first use
/// and routes each pool to the shard that owns its name (the MCAS model: clients choose the
/// shard, so the server needs no proxy). Cheap to clone; clones share the connections.
///
/// If a shard connection dies, the next session-level call on that shard reconnects. Pools
/// opened on the dead connection do not come back: their handles lived in the server-side
/// session that ended with it, so they fail with [`Error::ConnectionClosed`] and must be
/// reopened.
///
/// In a cluster (`docs/clients.md`, "Clusters") the session keeps the cluster map and sends each
/// pool's requests to the leader of the pool's group, following the leader where it moves;
/// pools then reopen themselves on the new leader.
#[derive(Debug, Clone)]
pub struct Session {
    inner: Arc<SessionInner>,
}

#[derive(Debug)]
struct SessionInner {
    options: ClientOptions,
    /// Dialable addresses of every shard of the node first reached, by index (unspecified hosts
    /// already resolved).
    shard_addresses: Vec<String>,
    /// The limits announced by the shard we first reached.
    limits: Limits,
    /// Connections by the address they reach, each opened on first use. A Tokio mutex per
    /// address because it is held across the connect, so that concurrent first uses of a shard
    /// share one connection rather than racing to open several.
    connections: std::sync::Mutex<HashMap<String, Arc<Mutex<Option<Connection>>>>>,
    /// In a cluster: where each group's requests go. `None` on a single server.
    routes: Option<std::sync::Mutex<Routes>>,
}

impl Session {
    /// Connects to the shard at `address` (`host:port`) with default options.
    pub async fn connect(address: &str) -> Result<Session> {
        Session::connect_with(address, ClientOptions::default()).await
    }

    /// Connects to the shard at `address` and learns the server's shards and limits from the
    /// handshake. Any shard's address will do; the connection is kept for that shard.
    pub async fn connect_with(address: &str, options: ClientOptions) -> Result<Session> {
        let (connection, hello) = open_shard(address, &options).await?;
        let shard_count = hello.shard_addresses.len();
        if usize::from(hello.shard_index) >= shard_count {
            return Err(Error::UnexpectedResponse(format!(
                "{address} says it is shard {} of a server with {shard_count} shards",
                hello.shard_index
            )));
        }
        let shard_addresses = hello
            .shard_addresses
            .iter()
            .map(|announced| resolve_shard_address(announced, connection.peer_ip()))
            .collect::<Result<Vec<_>>>()?;
        let limits = connection.limits();
        let shard_count_u16 = u16::try_from(shard_count).expect("the hello reply carries the shard count as a u16");
        let routes = match fetch_map(&connection, shard_count_u16).await {
            Ok(map) if map.is_single_server() => None,
            Ok(map) => Some(std::sync::Mutex::new(Routes::new(map, connection.peer_ip()))),
            Err(error) if predates_clusters(&error) => None,
            Err(error) => return Err(error),
        };
        let first = shard_addresses[usize::from(hello.shard_index)].clone();
        let connections = HashMap::from_iter([(first, Arc::new(Mutex::new(Some(connection))))]);
        let connections = std::sync::Mutex::new(connections);
        Ok(Session { inner: Arc::new(SessionInner { options, shard_addresses, limits, connections, routes }) })
    }

    /// Number of shards on the server.
    pub fn shard_count(&self) -> u16 {
        u16::try_from(self.inner.shard_addresses.len()).expect("the hello reply carries the shard count as a u16")
    }

    /// Whether the server is a node of a cluster (its cluster map names nodes other than a
    /// single server's node 0), so that requests are routed to each group's leader.
    pub fn is_cluster(&self) -> bool {
        self.inner.routes.is_some()
    }

    /// The address of every shard, by index, as this client dials them.
    pub fn shard_addresses(&self) -> &[String] {
        &self.inner.shard_addresses
    }

    /// The key and value limits the server announced. Requests beyond them fail locally.
    pub fn limits(&self) -> Limits {
        self.inner.limits
    }

    /// The shard that owns the pool `name`.
    pub fn shard_for_pool(&self, name: &str) -> u16 {
        shard_for_pool(name, self.shard_count())
    }

    /// Creates the pool `name`, or opens it if it exists and `options.create_only` is not set.
    /// [`Pool::created`] tells which happened.
    pub async fn create_pool(&self, name: &str, options: PoolOptions) -> Result<Pool> {
        if options.size_bytes == 0 {
            return Err(Error::InvalidArgument(format!("pool {name:?}: size must be greater than zero")));
        }
        let shard = self.shard_for_pool(name);
        let mut flags = CreatePoolFlags::NONE;
        if options.create_only {
            flags = flags.union(CreatePoolFlags::CREATE_ONLY);
        }
        if options.indexed {
            flags = flags.union(CreatePoolFlags::INDEXED);
        }
        if options.durability == Durability::Async {
            flags = flags.union(CreatePoolFlags::ASYNC);
        }
        let plugins = options.plugins.join(",");
        let request = Request::CreatePool {
            name,
            size_bytes: options.size_bytes,
            expected_objects: options.expected_objects,
            flags,
            plugins: &plugins,
        };
        let request = &request;
        self.routed(shard, Resend::Never, |connection| async move {
            match connection.call(request).await? {
                Reply::PoolCreated { pool, created } => {
                    Ok(self.pool(Bound { connection, handle: pool }, name, created))
                }
                other => Err(other.unexpected("pool_created")),
            }
        })
        .await
    }

    /// Opens an existing pool. Fails with `pool_not_found` ([`Error::is_pool_not_found`]).
    pub async fn open_pool(&self, name: &str) -> Result<Pool> {
        self.routed(self.shard_for_pool(name), Resend::Never, |connection| async move {
            match connection.call(&Request::OpenPool { name }).await? {
                Reply::PoolOpened { pool } => Ok(self.pool(Bound { connection, handle: pool }, name, false)),
                other => Err(other.unexpected("pool_opened")),
            }
        })
        .await
    }

    /// A pool just opened on `bound`; in a cluster it follows its group's leader through this
    /// session.
    fn pool(&self, bound: Bound, name: &str, created: bool) -> Pool {
        let session = self.inner.routes.is_some().then(|| self.clone());
        Pool::new(bound, name, self.shard_for_pool(name), created, session)
    }

    /// Deletes a pool and all its pairs. Refused with `pool_in_use` while any session (this one
    /// included) has it open, so close or drop every [`Pool`] for it first.
    pub async fn delete_pool(&self, name: &str) -> Result<()> {
        self.routed(self.shard_for_pool(name), Resend::Never, |connection| async move {
            match connection.call(&Request::DeletePool { name }).await? {
                Reply::PoolDeleted => Ok(()),
                other => Err(other.unexpected("pool_deleted")),
            }
        })
        .await
    }

    /// Changes a setting of the existing pool `name` (MCAS `configure_pool`; needs `admin` on a
    /// server with users). [`PoolSetting::AddIndex`] builds a secondary index over its keys,
    /// which [`Pool::find`](crate::Pool::find) then searches in key order (and `next:`
    /// searches need); the server builds it in steps while it serves, and answers once it is
    /// whole and its setting durable. [`PoolSetting::RemoveIndex`] drops it. Adding an index the
    /// pool has, or removing one it has not, changes nothing.
    pub async fn configure_pool(&self, name: &str, setting: PoolSetting) -> Result<()> {
        self.routed(self.shard_for_pool(name), Resend::Never, |connection| async move {
            match connection.call(&Request::ConfigurePool { name, setting }).await? {
                Reply::PoolConfigured => Ok(()),
                other => Err(other.unexpected("pool_configured")),
            }
        })
        .await
    }

    /// Lists the pools of every shard, shard by shard, with their settings (a described
    /// `list_pools`, which servers answer since the describe flag was added within protocol
    /// version 3).
    pub async fn list_pools(&self) -> Result<Vec<PoolInfo>> {
        let mut pools = Vec::new();
        for (shard, reply) in self.ask_every_shard(&Request::DescribePools { name: None }, Resend::Once).await? {
            match reply {
                Reply::Pools(rows) => {
                    for row in rows {
                        pools.push(PoolInfo::from_row(row, shard)?);
                    }
                }
                other => return Err(other.unexpected("pools")),
            }
        }
        Ok(pools)
    }

    /// The pool `name` as [`Session::list_pools`] lists it, asked of its shard alone; `None` if
    /// there is no such pool (or, on a server with users, the user has no right on it). Opens
    /// nothing.
    pub async fn pool_info(&self, name: &str) -> Result<Option<PoolInfo>> {
        let shard = self.shard_for_pool(name);
        let request = Request::DescribePools { name: Some(name) };
        request.check(&self.limits())?;
        let request = &request;
        self.routed(shard, Resend::Once, |connection| async move {
            match connection.call(request).await? {
                Reply::Pools(rows) => {
                    rows.into_iter().find(|row| row.name == name).map(|row| PoolInfo::from_row(row, shard)).transpose()
                }
                other => Err(other.unexpected("pools")),
            }
        })
        .await
    }

    /// The counters of every shard of the node this session connected to, by shard index: in a
    /// cluster, that node's own (any node answers, whether or not it leads, or is initialized).
    pub async fn statistics(&self) -> Result<Vec<ShardStatistics>> {
        self.ask_own_shards(&Request::GetStatistics)
            .await?
            .into_iter()
            .map(|(shard, reply)| match reply {
                Reply::Statistics(counters) => Ok(ShardStatistics { shard, counters }),
                other => Err(other.unexpected("statistics")),
            })
            .collect()
    }

    /// Backs up every shard into `dir` on the server's file system (an absolute path; each shard
    /// writes `dir/shard-N`) while the server keeps serving: each shard copies its last
    /// checkpoint and its log up to the last record it had applied, durably. Returns each shard's
    /// report, in shard order. See `docs/deployment.md`, "Backups".
    pub async fn back_up(&self, dir: &str) -> Result<Vec<ShardBackup>> {
        let request = Request::Backup { dir };
        request.check(&self.limits())?;
        self.ask_every_shard(&request, Resend::Never)
            .await?
            .into_iter()
            .map(|(shard, reply)| match reply {
                Reply::BackedUp(report) => {
                    Ok(ShardBackup { shard, lsn: report.lsn, files: report.files, bytes: report.bytes })
                }
                other => Err(other.unexpected("backup")),
            })
            .collect()
    }

    /// Sends `request` to every shard (in a cluster: to each group's leader) and gathers the
    /// replies by shard. On a single server every request is sent before any reply is awaited,
    /// so the slowest shard, not the sum of all, sets the latency; in a cluster each shard's
    /// request follows its group's leader in turn.
    async fn ask_every_shard(&self, request: &Request<'_>, resend: Resend) -> Result<Vec<(u16, Reply)>> {
        if self.inner.routes.is_none() {
            return self.ask_own_shards(request).await;
        }
        let mut replies = Vec::with_capacity(self.shard_addresses().len());
        for shard in 0..self.shard_count() {
            let reply = self.routed(shard, resend, |connection| async move { connection.call(request).await });
            replies.push((shard, reply.await?));
        }
        Ok(replies)
    }

    /// Sends `request` to every shard of the node this session connected to, every request
    /// before any reply is awaited, and gathers the replies by shard.
    async fn ask_own_shards(&self, request: &Request<'_>) -> Result<Vec<(u16, Reply)>> {
        let mut replies = Vec::with_capacity(self.shard_addresses().len());
        let mut pending = Vec::with_capacity(self.shard_addresses().len());
        for shard in 0..self.shard_count() {
            pending.push((shard, self.connection(shard).await?.send(request).await?));
        }
        for (shard, reply) in pending {
            replies.push((shard, reply.wait().await?));
        }
        Ok(replies)
    }

    /// In a cluster: where each group's requests go.
    pub(crate) fn routes(&self) -> Option<&std::sync::Mutex<Routes>> {
        self.inner.routes.as_ref()
    }

    /// The connection to `shard` of the node this session first reached, opened (or reopened,
    /// if it died) on demand.
    pub(crate) async fn connection(&self, shard: u16) -> Result<Connection> {
        let address = self
            .inner
            .shard_addresses
            .get(usize::from(shard))
            .expect("shard indexes come from shard_for_pool or 0..shard_count");
        self.connection_at(address, shard).await
    }

    /// The connection to the shard `shard` listening at `address`, opened (or reopened, if it
    /// died) on demand.
    pub(crate) async fn connection_at(&self, address: &str, shard: u16) -> Result<Connection> {
        let slot = {
            let mut connections = self.inner.connections.lock().expect("the connections lock is held for lookups only");
            Arc::clone(connections.entry(address.to_owned()).or_default())
        };
        let mut slot = slot.lock().await;
        if let Some(connection) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(connection.clone());
        }
        let (connection, hello) = open_shard(address, &self.inner.options).await?;
        // A shard that disagrees about who it is would make us route pools to the wrong place.
        let shard_count = self.shard_addresses().len();
        if hello.shard_index != shard || hello.shard_addresses.len() != shard_count {
            return Err(Error::UnexpectedResponse(format!(
                "{address} says it is shard {} of {}, but the session expected shard {shard} of {shard_count}",
                hello.shard_index,
                hello.shard_addresses.len(),
            )));
        }
        *slot = Some(connection.clone());
        Ok(connection)
    }
}

async fn open_shard(address: &str, options: &ClientOptions) -> Result<(Connection, Hello)> {
    let connector = options.tls.as_ref().map(crate::tls::connector).transpose()?;
    let auth = options.credentials.as_ref().map(UserCredentials::encode).unwrap_or_default();
    Connection::open(address, &options.client_name, &auth, connector.as_ref(), options.connect_timeout).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_encode_for_the_handshake_and_never_show_their_password() {
        let credentials = UserCredentials::new("alice", "hunter22 secret");
        let auth = credentials.encode();
        let decoded = ferrite_proto::Credentials::decode(&auth).expect("decodes").expect("present");
        assert_eq!((decoded.user, decoded.password), ("alice", &b"hunter22 secret"[..]));
        let shown = format!("{:?}", ClientOptions { credentials: Some(credentials), ..ClientOptions::default() });
        assert!(shown.contains("alice") && !shown.contains("hunter22"), "{shown}");
    }

    #[test]
    fn pool_options_default_to_the_documented_sizes() {
        let options = PoolOptions::default();
        assert_eq!(options.size_bytes, 64 * 1024 * 1024);
        assert_eq!(options.expected_objects, 1024);
        assert!(!options.create_only);
    }

    #[test]
    fn statistics_lookup_by_name() {
        let stats = ShardStatistics { shard: 1, counters: vec![("puts".into(), 3), ("gets".into(), 4)] };
        assert_eq!(stats.get("gets"), Some(4));
        assert_eq!(stats.get("unknown"), None);
    }

    #[test]
    fn session_and_pool_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<Session>();
        assert_send_sync::<Pool>();
    }

    /// The futures must be `Send` too, or callers could not `tokio::spawn` them. Compiling is
    /// the test; it never runs.
    #[allow(dead_code)]
    fn futures_are_send(session: &Session, pool: &Pool) {
        fn assert_send<T: Send>(_: &T) {}
        assert_send(&session.create_pool("p", PoolOptions::default()));
        assert_send(&session.open_pool("p"));
        assert_send(&session.list_pools());
        assert_send(&session.statistics());
        assert_send(&pool.put("k", "v"));
        assert_send(&pool.value_attributes("k"));
        assert_send(&pool.clone().close());
    }
}
