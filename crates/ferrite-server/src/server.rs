//! Starting and stopping a whole server: bind every shard's listener, run each shard on its own
//! thread, stop them all on a shutdown signal.

use std::future::Future;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::Duration;

use ferrite_store::persistence::ssd::{recover_shard, Manifest, RecoveryError, ShardPaths, SharedLog};
use ferrite_store::persistence::wal::WalConfig;
use tokio::sync::{mpsc, watch};
use tracing::{error, info, warn};

use crate::ado::AdoSettings;
use crate::auth::Auth;
use crate::cluster::group::GroupSettings;
use crate::cluster::handshake::PeerSecret;
use crate::cluster::replication::Replication;
use crate::cluster::startup::recover_replica;
use crate::cluster::view::{ClusterMap, NodeInfo};
use crate::cluster::ShardCluster;
use crate::config::{Backing, Config};
use crate::data_dir::{DataDir, DataDirError};
use crate::durability::ShardDurability;
use crate::handler::ShardState;
use crate::low_load_poll::LowLoadPoll;
use crate::metrics::{self, ShardLinks};
use crate::plugins::PluginRegistry;
use crate::pools::{PmemPools, Pools};
use crate::resp;
use crate::shard;
use crate::stats::ShardStats;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    #[error(transparent)]
    DataDir(#[from] DataDirError),
    #[error("cannot create the directory of shard {shard}: {source}")]
    ShardDir { shard: usize, source: std::io::Error },
    #[error("cannot recover shard {shard}: {source}")]
    Recovery { shard: usize, source: RecoveryError },
    #[error("cannot start shard {shard}: {reason}")]
    WrongMode { shard: usize, reason: String },
    #[error("cannot recover shard {shard}: pool '{pool}' is damaged: {reason}")]
    PoolDamaged { shard: usize, pool: String, reason: String },
    #[error("cannot start the write-ahead log sync thread of shard {shard}: {source}")]
    SyncThread { shard: usize, source: std::io::Error },
    #[error("shard {shard} cannot listen on {address}: {source}")]
    Bind { shard: usize, address: SocketAddr, source: std::io::Error },
    #[error("group {shard} cannot listen for its peers on {address}: {source}")]
    BindPeer { shard: usize, address: SocketAddr, source: std::io::Error },
    #[error("shard {shard} cannot listen for RESP on {address}: {source}")]
    BindResp { shard: usize, address: SocketAddr, source: std::io::Error },
    #[error("cannot start shard {shard}: {source}")]
    Spawn { shard: usize, source: std::io::Error },
    #[error("shard {shard} stopped unexpectedly: {reason}")]
    ShardFailed { shard: usize, reason: String },
    #[error("cannot serve metrics on {address}: {source}")]
    BindMetrics { address: SocketAddr, source: std::io::Error },
    #[error("cannot set up TLS: {0}")]
    Tls(String),
    #[error("cannot use the cluster secret: {0}")]
    ClusterSecret(String),
    #[error("cannot use the users file: {0}")]
    Users(String),
    #[error("cannot start the signal handler: {0}")]
    Runtime(std::io::Error),
}

/// A server whose listeners are bound but whose shards are not yet running. Binding first lets
/// the caller learn the real ports (port 0 picks free ones) before serving starts.
#[derive(Debug)]
pub struct BoundServer {
    config: Config,
    listeners: Vec<TcpListener>,
    addresses: Vec<SocketAddr>,
    /// One per shard when RESP is enabled, none otherwise.
    resp_listeners: Vec<TcpListener>,
    resp_addresses: Vec<SocketAddr>,
    /// The metrics endpoint's listener, when `[metrics] listen` is set.
    metrics_listener: Option<(TcpListener, SocketAddr)>,
    /// TLS for every shard's listeners, when `[tls]` names a certificate.
    tls: Option<Arc<rustls::ServerConfig>>,
    /// Each shard's pools and durability, recovered from the data directory.
    shards: Vec<RecoveredParts>,
    /// In cluster mode: the node's map, and each group's peer listener, by shard index.
    cluster: Option<(Arc<ClusterMap>, Vec<TcpListener>)>,
    /// What this node's peers prove themselves with (`[cluster] secret_file`).
    peer_secret: PeerSecret,
    /// The plugins pools' chains may name, shared by every shard.
    plugins: Arc<PluginRegistry>,
    /// Users, rights and quotas, shared by every shard.
    auth: Arc<Auth>,
    /// Held (locked) while the server runs.
    _data_dir: DataDir,
}

/// Reports a shard thread's end to the supervisor, even when the thread panics.
struct ExitReport {
    shard: usize,
    outcome: Option<Result<(), String>>,
    exits: mpsc::UnboundedSender<(usize, Result<(), String>)>,
}

impl Drop for ExitReport {
    fn drop(&mut self) {
        let outcome = self.outcome.take().unwrap_or_else(|| Err("the shard thread panicked".to_string()));
        // The supervisor may have stopped listening already; then nobody needs the report.
        let _ = self.exits.send((self.shard, outcome));
    }
}

/// Loads every file the configuration names that [`BoundServer::bind`] reads before it touches
/// the data directory (the TLS certificate, its key and the client CA, the users file) as `bind`
/// would, and starts nothing: what `ferrite-server --check-config` checks beyond the
/// configuration itself, so that a configuration it calls valid does not fail at start.
pub fn check_files(config: &Config) -> Result<(), ServerError> {
    crate::tls::server_config(&config.tls).map_err(ServerError::Tls)?;
    if let Some(path) = &config.cluster.secret_file {
        PeerSecret::load(path).map_err(ServerError::ClusterSecret)?;
    }
    if let Some(path) = &config.auth.users_file {
        ferrite_auth::UsersFile::load(path).map_err(|error| ServerError::Users(error.to_string()))?;
    }
    Ok(())
}

impl BoundServer {
    /// Loads the TLS and users files, locks the data directory, recovers every shard from it, and
    /// binds every shard's listener. The files come first: a file the server cannot use stops it
    /// before it creates or recovers anything.
    pub fn bind(config: Config) -> Result<BoundServer, ServerError> {
        let tls = crate::tls::server_config(&config.tls).map_err(ServerError::Tls)?;
        let auth = match &config.auth.users_file {
            Some(path) => Auth::load(path).map_err(ServerError::Users)?,
            None => Auth::open(),
        };
        let data_dir = DataDir::open(&config.data_dir, config.shards.len())?;
        let shards = recover_shards(&config, &data_dir)?;
        let peer_secret = match &config.cluster.secret_file {
            Some(path) => PeerSecret::load(path).map_err(ServerError::ClusterSecret)?,
            None => PeerSecret::new(None),
        };
        let cluster = match config.cluster.node_id {
            Some(node_id) => Some(bind_cluster(&config, node_id)?),
            None => None,
        };
        if cluster.is_some() && !peer_secret.configured && !config.peer_listen().ip().is_loopback() {
            warn!(
                peer_listen = %config.peer_listen(),
                "no [cluster] secret_file: anyone who reaches the peer port can act as a node of the cluster \
                 (docs/cluster.md)"
            );
        }
        let mut listeners = Vec::with_capacity(config.shards.len());
        let mut addresses = Vec::with_capacity(config.shards.len());
        for (index, shard) in config.shards.iter().enumerate() {
            let address = SocketAddr::new(config.listen, shard.port);
            let listener =
                TcpListener::bind(address).map_err(|source| ServerError::Bind { shard: index, address, source })?;
            listener.set_nonblocking(true).map_err(|source| ServerError::Bind { shard: index, address, source })?;
            let bound = listener.local_addr().map_err(|source| ServerError::Bind { shard: index, address, source })?;
            listeners.push(listener);
            addresses.push(bound);
        }
        let mut resp_listeners = Vec::new();
        let mut resp_addresses = Vec::new();
        if config.resp.enabled {
            let ip = config.resp.listen.unwrap_or(config.listen);
            for index in 0..config.shards.len() {
                let address = SocketAddr::new(ip, config.resp.port(index));
                let error = |source| ServerError::BindResp { shard: index, address, source };
                let listener = TcpListener::bind(address).map_err(error)?;
                listener.set_nonblocking(true).map_err(error)?;
                resp_addresses.push(listener.local_addr().map_err(error)?);
                resp_listeners.push(listener);
            }
        }
        if tls.is_none() {
            let resp_ip = config.resp.enabled.then(|| config.resp.listen.unwrap_or(config.listen));
            for ip in std::iter::once(config.listen).chain(resp_ip).filter(|ip| !ip.is_loopback()) {
                warn!(
                    %ip,
                    "listening in clear on a non-loopback address: anyone on the network can read and change the \
                     traffic; configure [tls] (docs/security.md)"
                );
            }
        }
        let metrics_listener = match config.metrics.listen {
            Some(address) => {
                let error = |source| ServerError::BindMetrics { address, source };
                let listener = TcpListener::bind(address).map_err(error)?;
                listener.set_nonblocking(true).map_err(error)?;
                let bound = listener.local_addr().map_err(error)?;
                Some((listener, bound))
            }
            None => None,
        };
        if let Some(path) = auth.users_file() {
            info!(users = auth.users().users.len(), file = %path.display(), "clients must authenticate");
        }
        // Pools created by users count against their quotas from the start.
        for parts in &shards {
            for pool in parts.pools.each() {
                if let Some(owner) = &pool.owner {
                    auth.usage.count_pool(owner, pool.store.capacity_bytes());
                }
            }
            // A node counts the pools of every group it is a member of, led here or not: the
            // quota is the user's in the whole cluster, and every node holds every group.
            let replica = parts.replica.as_ref().and_then(|replica| replica.replication.replica.as_ref());
            for pool in replica.iter().flat_map(|replica| replica.pools.values()) {
                if let Some(owner) = &pool.descriptor.owner {
                    auth.usage.count_pool(owner, pool.descriptor.spec.size_bytes);
                }
            }
        }
        let plugins = Arc::new(PluginRegistry::new(
            PluginRegistry::shipped_dir().as_deref(),
            &config.plugins,
            &config.plugin_config,
        ));
        Ok(BoundServer {
            config,
            listeners,
            addresses,
            resp_listeners,
            resp_addresses,
            metrics_listener,
            tls,
            shards,
            cluster,
            peer_secret,
            plugins,
            auth: Arc::new(auth),
            _data_dir: data_dir,
        })
    }

    /// How a cluster node tells others to reach it: its advertised host with the ports of its
    /// shard 0 listeners.
    fn advertised(&self, node_id: u64) -> NodeInfo {
        let host = self.config.advertise_host();
        let at = |port: u16| match host.parse::<std::net::Ipv6Addr>() {
            Ok(_) => format!("[{host}]:{port}"),
            Err(_) => format!("{host}:{port}"),
        };
        NodeInfo {
            node_id,
            peer: at(self.config.peer_listen().port()),
            native: self.addresses.first().map(|address| at(address.port())).unwrap_or_default(),
            resp: self.resp_addresses.first().map(|address| at(address.port())).unwrap_or_default(),
        }
    }

    /// In cluster mode: how this node tells others to reach it, and the cluster it belongs to
    /// (`None` while uninitialized).
    pub fn cluster_node(&self) -> Option<(NodeInfo, Option<String>)> {
        let node_id = self.config.cluster.node_id?;
        let replica = self.shards.first().and_then(|parts| parts.replica.as_ref());
        let cluster =
            replica.map(|replica| replica.replication.state.state().cluster_id.clone()).filter(|id| !id.is_empty());
        Some((self.advertised(node_id), cluster))
    }

    /// The address each shard listens on, by shard index.
    pub fn addresses(&self) -> &[SocketAddr] {
        &self.addresses
    }

    /// The address each shard's RESP listener is on, by shard index; empty when RESP is off.
    pub fn resp_addresses(&self) -> &[SocketAddr] {
        &self.resp_addresses
    }

    /// Where the metrics endpoint listens, when it is on.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics_listener.as_ref().map(|(_, address)| *address)
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The plugins pools' chains may name: the shipped ones beside the server and the
    /// configured ones.
    pub fn plugin_names(&self) -> Vec<String> {
        self.plugins.names().map(str::to_owned).collect()
    }

    /// The users file, when clients must authenticate.
    pub fn users_file(&self) -> Option<&std::path::Path> {
        self.auth.users_file()
    }

    /// The first user (by name) who proves itself with a password and holds `rights` on pool
    /// `pool`: someone the startup hint can show a working command for.
    pub fn password_user_with(&self, pool: &str, rights: ferrite_auth::Rights) -> Option<String> {
        let users = self.auth.users();
        let found =
            users.users.iter().find(|(_, user)| user.password.is_some() && user.rights_on(pool).contains(rights));
        found.map(|(name, _)| name.clone())
    }

    /// Runs every shard until `shutdown` completes, then stops them and waits for them. Returns an
    /// error if a shard stops on its own.
    pub fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
        if let (Some((map, _)), Some(node_id)) = (&self.cluster, self.config.cluster.node_id) {
            map.introduce(self.advertised(node_id));
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let (exit_tx, mut exit_rx) = mpsc::unbounded_channel();
        let shard_addresses: Arc<[String]> = self.addresses.iter().map(SocketAddr::to_string).collect();
        let plugins = Arc::clone(&self.plugins);
        let limits = self.config.limits;
        let mut threads = Vec::with_capacity(self.listeners.len());
        let mut resp_listeners = self.resp_listeners.into_iter().zip(self.resp_addresses);
        let (metrics_links, mut snapshot_requests) = ShardLinks::new(self.listeners.len());
        let shards = self.listeners.into_iter().zip(&self.config.shards).zip(self.shards);
        let (cluster_map, peer_listeners) = match self.cluster {
            Some((map, listeners)) => (Some(map), listeners.into_iter().map(Some).collect()),
            None => (None, Vec::new()),
        };
        let mut peer_listeners = peer_listeners.into_iter();
        let peer_secret = self.peer_secret.clone();
        let group_settings = self.config.cluster.node_id.map(|node_id| GroupSettings {
            node_id,
            election_timeout_ms: (
                self.config.cluster.election_timeout_ms[0],
                self.config.cluster.election_timeout_ms[1],
            ),
            heartbeat_ms: self.config.cluster.heartbeat_ms,
            log_kept_entries: self.config.cluster.log_kept_entries,
            secret: peer_secret.clone(),
            local_ip: Some(self.config.peer_listen().ip()).filter(|ip| !ip.is_unspecified()),
        });
        for (index, ((listener, shard_config), parts)) in shards.enumerate() {
            let RecoveredParts { pools, durability, replica } = parts;
            let (replication, group) = match (replica, peer_listeners.next().flatten(), &group_settings) {
                (Some(replica), Some(peers), Some(settings)) => (
                    Some(replica.replication),
                    Some(shard::GroupStart { peers, settings: settings.clone(), raft_dir: replica.raft_dir }),
                ),
                _ => (None, None),
            };
            let state = ShardState {
                index: u16::try_from(index).expect("shard count is bounded by SHARDS_MAX"),
                shard_addresses: Arc::clone(&shard_addresses),
                limits: limits.protocol_limits(),
                connections_max: u64::from(limits.connections_per_shard_max),
                admission: crate::stats::Admission {
                    connections_max: u64::from(limits.connections_per_shard_max),
                    handshake_timeout: Duration::from_millis(limits.handshake_timeout_ms),
                    idle_timeout: (limits.idle_timeout_ms > 0).then(|| Duration::from_millis(limits.idle_timeout_ms)),
                    staging_idle: Duration::from_millis(limits.direct_read_idle_ms),
                    in_flight_max: u64::from(limits.requests_in_flight_per_connection_max),
                },
                pool_bytes_max: limits.pool_bytes_max,
                direct_value_bytes_max: limits.direct_value_bytes_max,
                cluster: cluster_map.as_ref().map(|map| ShardCluster { map: Arc::clone(map), group: index }),
                replication,
                direct_reads: crate::handler::DirectReads::new(std::time::Duration::from_millis(
                    limits.direct_read_idle_ms,
                )),
                pools,
                stats: ShardStats::new(),
                durability,
                stop: watch::channel(false).0,
                halted: None,
                low_load_poll: LowLoadPoll::new(Duration::from_micros(shard_config.poll_us)),
                find_cursor: [0; 8],
                plugins: Arc::clone(&plugins),
                ado: AdoSettings::beside_server(self.config.ado.clone()),
                calls: Default::default(),
                new_hosts: Vec::new(),
                retiring: Vec::new(),
                hosts_started: 0,
                to_submit: Vec::new(),
                host_started: Default::default(),
                calls_queued: Default::default(),
                backups: Vec::new(),
                backups_queued: Default::default(),
                index_builds: Vec::new(),
                index_builds_queued: Default::default(),
                user_statistics: Vec::new(),
                backup_root: self.config.backup.root.clone(),
                traffic: Default::default(),
                current_pool: None,
                current_op: crate::stats::Op::Other,
                auth: Arc::clone(&self.auth),
            };
            let resp = resp_listeners.next().map(|(listener, address)| resp::Listener {
                listener,
                settings: resp::Settings::new(
                    &self.config.resp,
                    index,
                    address.port(),
                    &limits.protocol_limits(),
                    limits.direct_value_bytes_max,
                ),
            });
            let core = shard_config.core;
            let tls = self.tls.clone().map(tokio_rustls::TlsAcceptor::from);
            let snapshots = std::mem::replace(&mut snapshot_requests[index], tokio::sync::mpsc::unbounded_channel().1);
            let stop = stop_rx.clone();
            let exits = exit_tx.clone();
            let thread = std::thread::Builder::new()
                .name(format!("shard-{index}"))
                .spawn(move || {
                    let mut report = ExitReport { shard: index, outcome: None, exits };
                    if let Some(core) = core {
                        pin_to_core(index, core);
                    }
                    report.outcome =
                        Some(shard::run(listener, resp, tls, state, group, snapshots, stop).map_err(|e| e.to_string()));
                })
                .map_err(|source| ServerError::Spawn { shard: index, source })?;
            threads.push(thread);
        }
        drop(exit_tx);

        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(ServerError::Runtime)?;
        let metrics_listener = self.metrics_listener.map(|(listener, _)| listener);
        let failure = runtime.block_on(async {
            if let Some(listener) = metrics_listener {
                tokio::spawn(metrics::serve(listener, metrics_links));
            }
            // Registered before `shutdown` first runs (it announces readiness), so no SIGHUP after
            // the announcement can meet the default action, which would end the server.
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                Ok(hangups) => drop(tokio::spawn(reload_users_on_hangup(hangups, Arc::clone(&self.auth)))),
                Err(error) => warn!(%error, "cannot watch for SIGHUP: the users file is read only at start"),
            }
            tokio::select! {
                () = shutdown => None,
                Some((shard, outcome)) = exit_rx.recv() => Some(ServerError::ShardFailed {
                    shard,
                    reason: outcome.err().unwrap_or_else(|| "it returned without being asked to stop".into()),
                }),
            }
        });
        info!("stopping shards");
        // Shards also stop if the sender is gone, so a failed send needs no handling.
        let _ = stop_tx.send(true);
        for thread in threads {
            if thread.join().is_err() {
                warn!("a shard thread panicked while stopping");
            }
        }
        match failure {
            Some(failure) => {
                error!(%failure, "server stopped because a shard failed");
                Err(failure)
            }
            None => {
                info!("server stopped");
                Ok(())
            }
        }
    }
}

/// Reads the users file again on every SIGHUP. A file that does not load changes nothing: the
/// server goes on with the users it has and says why. Without a users file there is nothing to
/// read, and SIGHUP is only logged.
async fn reload_users_on_hangup(mut hangups: tokio::signal::unix::Signal, auth: Arc<Auth>) {
    while hangups.recv().await.is_some() {
        if !auth.enabled() {
            info!("SIGHUP: nothing to reload (the server has no users file)");
            continue;
        }
        match auth.reload() {
            Ok(users) => info!(users, "reloaded the users file"),
            Err(error) => warn!(%error, "kept the previous users: the users file did not load"),
        }
    }
}

/// A shard as recovery left it: its pools and durability, and in cluster mode its replica.
#[derive(Debug)]
struct RecoveredParts {
    pools: Pools,
    durability: Option<ShardDurability>,
    replica: Option<ReplicaParts>,
}

/// A cluster node's shard's replica of its group, as recovery left it.
#[derive(Debug)]
struct ReplicaParts {
    replication: Replication,
    raft_dir: std::path::PathBuf,
}

/// Recovers every shard, in parallel (each has its own files): pools and durability for the
/// `ssd` backing, empty pools for `memory`; in cluster mode, each shard's replica of its group.
fn recover_shards(config: &Config, data_dir: &DataDir) -> Result<Vec<RecoveredParts>, ServerError> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..config.shards.len())
            .map(|index| {
                scope.spawn(move || match config.cluster.node_id {
                    Some(node_id) => recover_replica(config, data_dir, index, node_id).map(|replica| RecoveredParts {
                        pools: replica.pools,
                        durability: Some(replica.durability),
                        replica: Some(ReplicaParts { replication: replica.replication, raft_dir: replica.raft_dir }),
                    }),
                    None => recover_one(config, data_dir, index).map(|(pools, durability)| RecoveredParts {
                        pools,
                        durability,
                        replica: None,
                    }),
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(shard, handle)| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err(ServerError::ShardFailed { shard, reason: "its recovery panicked".into() }))
            })
            .collect()
    })
}

/// Binds the peer listener of every group of a cluster node and makes its map, which knows the
/// node itself from the start.
fn bind_cluster(config: &Config, node_id: u64) -> Result<(Arc<ClusterMap>, Vec<TcpListener>), ServerError> {
    let base = config.peer_listen();
    let mut listeners = Vec::with_capacity(config.shards.len());
    for index in 0..config.shards.len() {
        let address = SocketAddr::new(base.ip(), base.port() + index as u16);
        let error = |source| ServerError::BindPeer { shard: index, address, source };
        let listener = TcpListener::bind(address).map_err(error)?;
        listener.set_nonblocking(true).map_err(error)?;
        listeners.push(listener);
    }
    Ok((ClusterMap::new(node_id, config.shards.len()), listeners))
}

fn recover_one(
    config: &Config,
    data_dir: &DataDir,
    index: usize,
) -> Result<(Pools, Option<ShardDurability>), ServerError> {
    let shard = &config.shards[index];
    let pools_max = config.limits.pools_per_shard_max as usize;
    if shard.backing == Backing::Memory {
        return Ok((Pools::in_memory(shard.store.kind(), pools_max), None));
    }
    let dir = data_dir.create_shard_dir(index).map_err(|source| ServerError::ShardDir { shard: index, source })?;
    if shard.backing == Backing::Pmem {
        return recover_pmem(&dir.join("pmem"), index, pools_max).map(|pools| (pools, None));
    }
    if ShardPaths::new(&dir).is_replicated() {
        return Err(ServerError::WrongMode {
            shard: index,
            reason: format!(
                "{} belongs to a cluster node (its replica's Raft state is in {}): start it with --node-id",
                dir.display(),
                ferrite_store::persistence::ssd::RAFT_DIR
            ),
        });
    }
    let started = std::time::Instant::now();
    let wal_config = WalConfig { segment_bytes: config.durability.wal_segment_bytes };
    let recovered = recover_shard(&ShardPaths::new(&dir), wal_config)
        .map_err(|source| ServerError::Recovery { shard: index, source })?;
    let report = recovered.report;
    let log = SharedLog::new(recovered.writer);
    // A spare segment written with zeros before serving: commits into written space are faster.
    // Without one (a full disk) the shard still runs and creates segments as it needs them.
    if let Err(error) = log.prepare_spare_now() {
        warn!(shard = index, %error, "cannot prepare a spare log segment; the shard will create them as needed");
    }
    let mut pools = Pools::logged(log.clone(), pools_max, recovered.next_pool_id);
    let count = recovered.pools.len();
    for pool in recovered.pools {
        let name = pool.descriptor.name.clone();
        pools.insert_recovered(pool).map_err(|error| ServerError::PoolDamaged {
            shard: index,
            pool: name,
            reason: error.to_string(),
        })?;
    }
    info!(
        shard = index,
        pools = count,
        checkpoint = report.checkpoint_seq,
        checkpoint_pages = report.checkpoint_pages,
        checkpoint_pages_in_log = report.pages_in_log,
        replayed_from_lsn = report.replay_from,
        records_replayed = report.records_replayed,
        bytes_replayed = report.bytes_replayed,
        torn_tail = ?report.torn_tail,
        torn_commit = ?report.torn_commit,
        stray_files_removed = report.stray_files_removed,
        elapsed_ms = report.elapsed.as_millis() as u64,
        "shard recovered from {}",
        dir.display()
    );
    let mut durability =
        ShardDurability::start(index, ShardPaths::new(&dir), log, recovered.checkpointer, config.durability)
            .map_err(|source| ServerError::SyncThread { shard: index, source })?;
    durability.recovered_in = started.elapsed();
    Ok((pools, Some(durability)))
}

/// Opens the pools of a shard on the `pmem` backing from its catalog; each rolls back the
/// transaction a crash interrupted, if any.
fn recover_pmem(dir: &std::path::Path, index: usize, pools_max: usize) -> Result<Pools, ServerError> {
    let started = std::time::Instant::now();
    let io = |source| ServerError::ShardDir { shard: index, source };
    if !dir.exists() {
        std::fs::create_dir_all(dir).map_err(io)?;
        if let Some(parent) = dir.parent() {
            std::fs::File::open(parent).and_then(|p| p.sync_all()).map_err(io)?;
        }
    }
    let catalog = Manifest::read(dir)
        .map_err(|error| ServerError::Recovery { shard: index, source: RecoveryError::Checkpoint(error) })?
        .unwrap_or_default();
    let descriptors: Vec<_> = catalog.pools.iter().map(|pool| pool.descriptor.clone()).collect();
    let highest_unlisted = remove_unlisted_pmem_files(dir, &catalog).map_err(io)?;
    let next_pool_id = catalog.next_pool_id.max(highest_unlisted.map_or(0, |id| id + 1));
    let mut pools = Pools::on_pmem(PmemPools { dir: dir.to_path_buf(), catalog }, pools_max, next_pool_id);
    for descriptor in descriptors {
        let name = descriptor.name.clone();
        pools.insert_pmem(descriptor).map_err(|reason| ServerError::PoolDamaged {
            shard: index,
            pool: name,
            reason,
        })?;
    }
    info!(
        shard = index,
        pools = pools.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "shard opened its pmem pools from {}",
        dir.display()
    );
    Ok(pools)
}

/// Removes pool files the `pmem` catalog does not list: a pool whose creation a crash interrupted
/// before its catalog entry was written (never visible to anyone). Returns the highest id among
/// them, so that no id that reached the disk is given out again.
fn remove_unlisted_pmem_files(dir: &std::path::Path, catalog: &Manifest) -> std::io::Result<Option<u64>> {
    let listed: std::collections::HashSet<u64> = catalog.pools.iter().map(|pool| pool.descriptor.id).collect();
    let mut highest = None;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(id) = name.to_str().and_then(pmem_pool_file_id) else {
            continue;
        };
        if !listed.contains(&id) {
            warn!(file = %entry.path().display(), "removing a pmem pool file no catalog entry names (a creation a crash interrupted)");
            std::fs::remove_file(entry.path())?;
            highest = highest.max(Some(id));
        }
    }
    if highest.is_some() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(highest)
}

/// The pool id in the name of a pmem pool's region or undo file (`pmem::pool_files`), if it is one.
fn pmem_pool_file_id(name: &str) -> Option<u64> {
    let stem = name.strip_prefix("pool-")?;
    let hex = stem.strip_suffix(".pmem").or_else(|| stem.strip_suffix(".undo"))?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

fn pin_to_core(shard: usize, core: usize) {
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    match cores.into_iter().find(|id| id.id == core) {
        Some(id) if core_affinity::set_for_current(id) => info!(shard, core, "shard pinned to core"),
        _ => warn!(shard, core, "cannot pin shard to core; it runs unpinned"),
    }
}
