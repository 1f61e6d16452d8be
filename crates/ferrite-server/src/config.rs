//! Server configuration: a TOML file, or the embedded default, plus command-line overrides.
//!
//! A file gives only what it changes: every missing table and key takes the embedded default
//! (`config/default.toml`, which [`Config::default`] mirrors and a test keeps equal). Unknown keys
//! are errors that name the key, because a misspelt option silently ignored is a setting the
//! operator believes is in force and is not.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ferrite_proto::{Limits, KEY_BYTES_MAX, POOLS_PER_SHARD_MAX, POOL_NAME_BYTES_MAX, VALUE_INLINE_BYTES_MAX};
use ferrite_store::persistence::wal::{record_bytes, SEGMENT_HEADER_BYTES};
use ferrite_store::{PoolSpec, StoreKind};
use serde::{Deserialize, Serialize};

/// The configuration used when no file is given.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../config/default.toml");

/// Most shards one server runs; shard indexes travel as `u16` on the wire.
pub const SHARDS_MAX: usize = 256;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid config {origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("invalid config: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// IP address every shard listens on.
    pub listen: IpAddr,
    pub data_dir: PathBuf,
    pub limits: LimitsConfig,
    /// The shards; a shard table without `port` listens on [`SHARD_PORT_DEFAULT`] + its index.
    pub shards: Vec<ShardConfig>,
    /// The optional RESP (Redis protocol) listener of every shard.
    pub resp: RespConfig,
    /// How the `ssd` backing commits and checkpoints.
    pub durability: DurabilityConfig,
    /// The `[plugins]` table: Active Data Object plugins by name (`counter = "/path/lib.so"`),
    /// beside the shipped ones installed next to the server.
    pub plugins: std::collections::BTreeMap<String, PathBuf>,
    /// The `[plugin_config]` table: the configuration text each plugin's `launch` gets, by
    /// name (`versioning = "versions=8"`); a plugin not named gets none.
    pub plugin_config: std::collections::BTreeMap<String, String>,
    /// How plugin hosts are contained.
    pub ado: AdoConfig,
    /// The Prometheus metrics endpoint.
    pub metrics: MetricsConfig,
    /// TLS for both client listeners.
    pub tls: TlsConfig,
    /// Where online backups may be written.
    pub backup: BackupConfig,
    /// Users, their grants and quotas.
    pub auth: AuthConfig,
    /// Cluster mode: this server is a node whose shards are replicas of Raft groups.
    pub cluster: ClusterConfig,
}

/// The `[cluster]` table (see `docs/cluster.md`). A server is a cluster node when `node_id` is
/// set (or `--node-id` given); otherwise it is a single server and the rest is unused.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// This node's id: 1 or more, unique in its cluster, never reused for another node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<u64>,
    /// `HOST:PORT` of the peer listener of group 0, where the other nodes reach this one; group g
    /// listens on PORT + g. Default: the client listener's host, port 7300.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_listen: Option<std::net::SocketAddr>,
    /// The host name or address other nodes and clients are told to reach this node at.
    /// Default: the listener's address (127.0.0.1 if that is a wildcard: set it then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub advertise_host: Option<String>,
    /// A follower that hears nothing from its leader for `max` milliseconds (the leader's lease,
    /// during which it votes for no one) and then a random time in `[min, max]` starts an
    /// election: a dead leader is replaced after `max + [min, max]`, 450-600 ms by default.
    pub election_timeout_ms: [u64; 2],
    /// How often a leader tells its followers it is there, in milliseconds.
    pub heartbeat_ms: u64,
    /// Entries the log keeps behind the latest snapshot, for members that lag: one further
    /// behind is sent the snapshot instead.
    pub log_kept_entries: u64,
    /// A file holding the cluster's secret (16 bytes or more), the same on every node: peers
    /// prove they hold it before any message is taken. Without one, anyone who reaches the peer
    /// port can act as a node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
}

/// The default peer port of group 0.
pub const PEER_PORT_DEFAULT: u16 = 7300;

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            node_id: None,
            peer_listen: None,
            advertise_host: None,
            election_timeout_ms: [150, 300],
            heartbeat_ms: 50,
            log_kept_entries: 100_000,
            secret_file: None,
        }
    }
}

impl ClusterConfig {
    /// Whether the server is a cluster node.
    pub fn enabled(&self) -> bool {
        self.node_id.is_some()
    }
}

/// The `[auth]` table. Without a users file every client may do everything; with one, clients
/// must authenticate and may do only what their grants allow (see `docs/security.md`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// The users file (edited with `ferrite user`; reloaded on SIGHUP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub users_file: Option<PathBuf>,
}

/// The `[backup]` table. A backup's directory comes from the client: without a root, any client
/// can make the server write a backup wherever the server's user may write; with one, only
/// beneath it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackupConfig {
    /// An absolute directory that every backup directory must lie beneath.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<PathBuf>,
}

/// The `[tls]` table: with a certificate and its key, both listeners (native and RESP) speak TLS
/// only; with a client CA as well, clients must present a certificate it signed (mutual TLS).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM file with the server's certificate chain, leaf first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_file: Option<PathBuf>,
    /// PEM file with the certificate's private key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_file: Option<PathBuf>,
    /// PEM file with the CA certificates that sign client certificates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_ca_file: Option<PathBuf>,
}

impl TlsConfig {
    /// Whether the listeners speak TLS.
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }
}

/// The `[metrics]` table: an HTTP endpoint serving every shard's counters in the Prometheus text
/// format. Off unless `listen` is set (or `--metrics-listen` given).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// `HOST:PORT` of the endpoint (`GET /metrics`); port 0 picks a free port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<std::net::SocketAddr>,
}

/// The port of shard 0 when the configuration names none; shard i takes this + i.
pub const SHARD_PORT_DEFAULT: u16 = 11911;

impl Default for Config {
    /// The embedded default configuration, `config/default.toml`.
    fn default() -> Self {
        Config {
            listen: IpAddr::from([127, 0, 0, 1]),
            data_dir: PathBuf::from("./ferrite-data"),
            limits: LimitsConfig::default(),
            shards: vec![ShardConfig::default()],
            resp: RespConfig::default(),
            durability: DurabilityConfig::default(),
            plugins: std::collections::BTreeMap::new(),
            plugin_config: std::collections::BTreeMap::new(),
            ado: AdoConfig::default(),
            metrics: MetricsConfig::default(),
            tls: TlsConfig::default(),
            backup: BackupConfig::default(),
            auth: AuthConfig::default(),
            cluster: ClusterConfig::default(),
        }
    }
}

/// The `[ado]` table: limits of the `ferrite-ado` host processes that run pools' plugins. Every
/// key is optional.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdoConfig {
    /// A plugin call that runs longer gets its host killed, its writes undone and `ado_timeout`.
    pub call_timeout_ms: u64,
    /// A host's own memory beyond the pool it maps (its plugins' heaps); a host that needs more
    /// fails its call with `ado_failed` and is restarted.
    pub memory_limit_bytes: u64,
    /// How long a host keeps polling for work before it sleeps (0: it never spins).
    pub spin_us: u32,
    /// Checking mode: each call's host compares the whole pool before and after the call and
    /// logs writes the plugin did not declare. Costs a copy of the pool per call: for tests.
    pub check_writes: bool,
    /// Which puts, gets and erases on pools with plugins are signalled to their chain
    /// (MCAS's ADO signals): any of `post-put`, `post-get`, `post-erase`. The request's answer
    /// waits until the chain has handled the signal.
    pub signals: Vec<String>,
}

/// The signals `[ado] signals` may name.
pub const SIGNALS: [&str; 3] = ["post-put", "post-get", "post-erase"];

impl AdoConfig {
    /// Whether `[ado] signals` names `signal`.
    pub fn signals(&self, signal: &str) -> bool {
        self.signals.iter().any(|name| name == signal)
    }
}

impl Default for AdoConfig {
    fn default() -> Self {
        AdoConfig {
            call_timeout_ms: 10_000,
            memory_limit_bytes: 1 << 30,
            spin_us: 0,
            check_writes: false,
            signals: Vec::new(),
        }
    }
}

/// The `[durability]` table: group commit and checkpoint settings of shards with the `ssd`
/// backing. Every key is optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DurabilityConfig {
    /// An `async` write reaches stable storage at most this long after it is acknowledged.
    pub commit_interval_ms: u64,
    /// Size of each preallocated write-ahead log segment file.
    pub wal_segment_bytes: u64,
    /// A checkpoint starts once this much log has accumulated since the last one...
    pub checkpoint_wal_bytes: u64,
    /// ...or this long after the last one, if anything changed.
    pub checkpoint_interval_secs: u64,
}

impl Default for DurabilityConfig {
    fn default() -> Self {
        DurabilityConfig {
            commit_interval_ms: 10,
            wal_segment_bytes: 16 << 20,
            checkpoint_wal_bytes: 256 << 20,
            checkpoint_interval_secs: 300,
        }
    }
}

/// The `[resp]` table: each shard also serves RESP, on its own port, against a default pool of
/// its own. Every key is optional; the table is absent (and RESP off) in the embedded default.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RespConfig {
    pub enabled: bool,
    /// IP address of the RESP listeners; the top-level `listen` when absent.
    pub listen: Option<IpAddr>,
    /// Shard i listens on `port + i`; 0 gives every shard a free port.
    pub port: u16,
    /// Shard i serves the pool `@i/<pool>`, which the routing rule pins to it.
    pub pool: String,
    /// Capacity of each shard's default pool, used when the shard creates it.
    pub pool_size_bytes: u64,
    /// Whether the shard creates its default pool with a secondary index (sorted `find`, at
    /// about 70 bytes per key). `SCAN` walks the hash table either way.
    pub indexed: bool,
    /// The plugin chain the shard gives its default pool when it creates it (`FERRITE.INVOKE`
    /// calls it; with `counter` in it, `INCR` and kin use it).
    pub plugins: Vec<String>,
}

impl Default for RespConfig {
    fn default() -> Self {
        RespConfig {
            enabled: false,
            listen: None,
            port: 6379,
            pool: "redis".to_owned(),
            pool_size_bytes: 1024 * 1024 * 1024,
            indexed: false,
            plugins: Vec::new(),
        }
    }
}

impl RespConfig {
    /// The default pool of shard `index`.
    pub fn pool_name(&self, index: usize) -> String {
        format!("@{index}/{}", self.pool)
    }

    /// The RESP port of shard `index` (0: a free port).
    pub fn port(&self, index: usize) -> u16 {
        shard_port(self.port, index)
    }
}

/// The default largest direct value: 1 GiB.
pub const DIRECT_VALUE_BYTES_DEFAULT: u64 = 1 << 30;

/// The largest direct value any configuration may allow: what an hstore entry records of a
/// value's length (32 bits).
pub const DIRECT_VALUE_BYTES_CEILING: u64 = u32::MAX as u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    pub key_bytes_max: u32,
    pub value_bytes_max: u32,
    /// Largest value a direct put may store (`put_direct`), in bytes: values past the inline
    /// limit travel in pieces, up to this.
    pub direct_value_bytes_max: u64,
    /// A direct read that has read no piece for this long stops holding its key once a writer
    /// waits for it (the writer goes ahead, the read's next piece fails), so a client that stops
    /// reading cannot hold a key's writers for ever. A connection with a direct put (or a long
    /// RESP `SET`) under way that sends nothing for this long is closed and its staged value
    /// dropped, so one that stops sending cannot hold the value's heap space for ever.
    pub direct_read_idle_ms: u64,
    pub pools_per_shard_max: u32,
    pub connections_per_shard_max: u32,
    /// Largest pool a client may create, in bytes.
    pub pool_bytes_max: u64,
    /// A native client must complete its hello (and a TLS client its handshake) within this;
    /// otherwise it is disconnected, so a silent or trickling client cannot hold a connection slot.
    pub handshake_timeout_ms: u64,
    /// A connection that sends nothing for this long is closed (0: never, as Redis's default).
    pub idle_timeout_ms: u64,
    /// Most requests one connection may have in flight whose answers come later (plugin calls);
    /// past it the connection reads nothing more until answers leave.
    pub requests_in_flight_per_connection_max: u32,
}

impl Default for LimitsConfig {
    /// The protocol's ceilings for keys and values; 1024 pools and 1024 connections per shard;
    /// pools up to 16 GiB: large enough for real pools, small enough that one request cannot make
    /// the server try to reserve more memory than a machine has.
    fn default() -> Self {
        LimitsConfig {
            key_bytes_max: KEY_BYTES_MAX as u32,
            value_bytes_max: VALUE_INLINE_BYTES_MAX as u32,
            direct_value_bytes_max: DIRECT_VALUE_BYTES_DEFAULT,
            direct_read_idle_ms: 30_000,
            pools_per_shard_max: 1024,
            connections_per_shard_max: 1024,
            pool_bytes_max: 16 << 30,
            handshake_timeout_ms: 10_000,
            idle_timeout_ms: 0,
            requests_in_flight_per_connection_max: 256,
        }
    }
}

impl LimitsConfig {
    pub fn protocol_limits(&self) -> Limits {
        Limits { key_bytes_max: self.key_bytes_max, value_bytes_max: self.value_bytes_max }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShardConfig {
    /// TCP port of the shard's native protocol listener; 0 picks a free port.
    pub port: u16,
    /// CPU core to pin the shard's thread to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub core: Option<usize>,
    pub store: StoreName,
    pub backing: Backing,
    /// Microseconds the shard keeps polling its sockets after answering a batch, while requests
    /// keep arriving (see `low_load_poll.rs`); 0 never polls.
    pub poll_us: u64,
}

/// The polling window a shard gets unless its table sets one: see `docs/configuration.md`.
pub const POLL_US_DEFAULT: u64 = 50;

impl Default for ShardConfig {
    fn default() -> Self {
        ShardConfig {
            port: SHARD_PORT_DEFAULT,
            core: None,
            store: StoreName::default(),
            backing: Backing::default(),
            poll_us: POLL_US_DEFAULT,
        }
    }
}

/// Storage engine names as written in the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreName {
    /// DRAM only, for caches and tests; needs `backing = "memory"`.
    Mapstore,
    /// The persistent hopscotch hash engine (MCAS section 3.2): durable with `backing = "ssd"`.
    #[default]
    Hstore,
}

impl StoreName {
    pub fn kind(self) -> StoreKind {
        match self {
            StoreName::Mapstore => StoreKind::MapStore,
            StoreName::Hstore => StoreKind::HStore,
        }
    }
}

/// Where pool memory lives and how it becomes durable (see `docs/durability.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backing {
    /// Shared memory, made durable by the shard's write-ahead log and checkpoints in the data
    /// directory: survives kill -9 and power loss.
    #[default]
    Ssd,
    /// A `MAP_SHARED` file per pool in the data directory, changed in place under an undo log
    /// and cache-line flushes: every write is durable when acknowledged. Survives kill -9; survives
    /// power loss only when the data directory is on persistent memory (a DAX file system).
    Pmem,
    /// Process memory only: pools are lost when the server stops.
    Memory,
}

impl Backing {
    pub fn name(self) -> &'static str {
        match self {
            Backing::Ssd => "ssd",
            Backing::Pmem => "pmem",
            Backing::Memory => "memory",
        }
    }

    /// What a pool on this backing survives, for the startup announcement.
    pub fn promise(self) -> &'static str {
        match self {
            Backing::Ssd => "acknowledged sync writes survive kill -9 and power loss",
            Backing::Pmem => "acknowledged writes survive kill -9, and power loss on persistent memory (DAX)",
            Backing::Memory => "pools live in memory and are lost on stop",
        }
    }
}

/// Command-line settings that replace parts of the loaded configuration.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `HOST:PORT`: every shard listens on HOST; shard i on PORT + i.
    pub listen: Option<std::net::SocketAddr>,
    /// Number of shards; new shards copy the first shard's settings on consecutive ports.
    pub shards: Option<usize>,
    pub data_dir: Option<PathBuf>,
    /// `HOST:PORT`: enables RESP; every shard's RESP listener is on HOST, shard i on PORT + i.
    pub resp_listen: Option<std::net::SocketAddr>,
    /// `--plugin NAME=PATH`: plugins added to (or replacing) the `[plugins]` table.
    pub plugins: Vec<(String, PathBuf)>,
    /// `HOST:PORT`: serve the metrics endpoint there.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// `--tls-cert`, `--tls-key`, `--tls-client-ca`: replace the `[tls]` table's files.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
    /// `--users FILE`: replaces `[auth] users_file`.
    pub users_file: Option<PathBuf>,
    /// `--node-id`, `--peer-listen`, `--advertise-host`, `--cluster-secret`: replace the
    /// `[cluster]` table's.
    pub node_id: Option<u64>,
    pub peer_listen: Option<std::net::SocketAddr>,
    pub advertise_host: Option<String>,
    pub cluster_secret: Option<PathBuf>,
}

impl Config {
    /// Reads a configuration that gives only what it changes from the embedded default.
    pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let parse_error =
            |e: toml::de::Error| ConfigError::Parse { origin: origin.to_string(), message: e.to_string() };
        let mut config: Config = toml::from_str(text).map_err(parse_error)?;
        // A shard table without a port takes the default shard's port plus its index, so that a
        // file listing several shards by their other settings alone gets distinct ports.
        let table: toml::Table = toml::from_str(text).map_err(parse_error)?;
        if let Some(shards) = table.get("shards").and_then(toml::Value::as_array) {
            for (index, entry) in shards.iter().enumerate() {
                if entry.as_table().is_some_and(|entry| !entry.contains_key("port")) {
                    config.shards[index].port = shard_port(SHARD_PORT_DEFAULT, index);
                }
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// The configuration in effect, as a TOML file that gives every setting
    /// (`ferrite-server --check-config`).
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("every configuration value has a TOML form")
    }

    pub fn embedded_default() -> Config {
        Config::from_toml(DEFAULT_CONFIG_TOML, "(embedded default)")
            .expect("the embedded default configuration is valid")
    }

    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::from_toml(&text, &path.display().to_string())
    }

    /// Applies command-line overrides, then validates the result.
    pub fn apply(mut self, overrides: &Overrides) -> Result<Config, ConfigError> {
        if let Some(count) = overrides.shards {
            if count == 0 || count > SHARDS_MAX {
                return Err(ConfigError::Invalid(format!("--shards must be between 1 and {SHARDS_MAX}, not {count}")));
            }
            let template = self.shards[0];
            self.shards = (0..count)
                .map(|i| ShardConfig { port: shard_port(template.port, i), core: None, ..template })
                .collect();
            self.shards[0].core = template.core;
        }
        if let Some(listen) = overrides.listen {
            self.listen = listen.ip();
            for (i, shard) in self.shards.iter_mut().enumerate() {
                shard.port = shard_port(listen.port(), i);
            }
        }
        if let Some(dir) = &overrides.data_dir {
            self.data_dir.clone_from(dir);
        }
        if let Some(listen) = overrides.resp_listen {
            self.resp.enabled = true;
            self.resp.listen = Some(listen.ip());
            self.resp.port = listen.port();
        }
        self.plugins.extend(overrides.plugins.iter().cloned());
        if let Some(listen) = overrides.metrics_listen {
            self.metrics.listen = Some(listen);
        }
        for (file, given) in [
            (&mut self.tls.cert_file, &overrides.tls_cert),
            (&mut self.tls.key_file, &overrides.tls_key),
            (&mut self.tls.client_ca_file, &overrides.tls_client_ca),
        ] {
            if given.is_some() {
                file.clone_from(given);
            }
        }
        if overrides.users_file.is_some() {
            self.auth.users_file.clone_from(&overrides.users_file);
        }
        if overrides.node_id.is_some() {
            self.cluster.node_id = overrides.node_id;
        }
        if overrides.peer_listen.is_some() {
            self.cluster.peer_listen = overrides.peer_listen;
        }
        if overrides.advertise_host.is_some() {
            self.cluster.advertise_host.clone_from(&overrides.advertise_host);
        }
        if overrides.cluster_secret.is_some() {
            self.cluster.secret_file.clone_from(&overrides.cluster_secret);
        }
        self.validate()?;
        Ok(self)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| Err(ConfigError::Invalid(message));
        for (name, path) in &self.plugins {
            if !ferrite_proto::is_plugin_name(name) {
                return invalid(format!(
                    "plugin name {name:?} (under [plugins]) must be 1 to 64 ASCII letters, digits, '-' or '_'"
                ));
            }
            if !path.is_file() {
                return invalid(format!("plugin '{name}': {} is not a file", path.display()));
            }
        }
        if let Some(name) = self.plugin_config.keys().find(|name| !ferrite_proto::is_plugin_name(name)) {
            return invalid(format!(
                "plugin name {name:?} (under [plugin_config]) must be 1 to 64 ASCII letters, digits, '-' or '_'"
            ));
        }
        if self.shards.is_empty() {
            return invalid("at least one [[shards]] entry is required".into());
        }
        if self.shards.len() > SHARDS_MAX {
            return invalid(format!("{} shards configured; at most {SHARDS_MAX} are supported", self.shards.len()));
        }
        let limits = &self.limits;
        if limits.key_bytes_max == 0 || limits.key_bytes_max as usize > KEY_BYTES_MAX {
            return invalid(format!("limits.key_bytes_max must be between 1 and {KEY_BYTES_MAX}"));
        }
        if limits.value_bytes_max as usize > VALUE_INLINE_BYTES_MAX {
            return invalid(format!("limits.value_bytes_max must be at most {VALUE_INLINE_BYTES_MAX}"));
        }
        if limits.direct_read_idle_ms == 0 {
            return invalid("limits.direct_read_idle_ms must be at least 1".into());
        }
        if limits.direct_value_bytes_max > DIRECT_VALUE_BYTES_CEILING {
            return invalid(format!("limits.direct_value_bytes_max must be at most {DIRECT_VALUE_BYTES_CEILING}"));
        }
        if limits.pools_per_shard_max == 0 || limits.pools_per_shard_max as usize > POOLS_PER_SHARD_MAX {
            return invalid(format!("limits.pools_per_shard_max must be between 1 and {POOLS_PER_SHARD_MAX}"));
        }
        if limits.pool_bytes_max == 0 {
            return invalid("limits.pool_bytes_max must be at least 1".into());
        }
        if limits.connections_per_shard_max == 0 {
            return invalid("limits.connections_per_shard_max must be at least 1".into());
        }
        if limits.requests_in_flight_per_connection_max == 0 {
            return invalid("limits.requests_in_flight_per_connection_max must be at least 1".into());
        }
        if limits.handshake_timeout_ms == 0 {
            return invalid("limits.handshake_timeout_ms must be at least 1".into());
        }
        if let Some((index, _)) =
            self.shards.iter().enumerate().find(|(_, s)| s.store == StoreName::Mapstore && s.backing != Backing::Memory)
        {
            return invalid(format!(
                "shard {index}: store \"mapstore\" keeps pools in DRAM only and needs backing = \"memory\" (use \
                 store = \"hstore\" for durable pools)"
            ));
        }
        let durability = &self.durability;
        if durability.commit_interval_ms == 0 || durability.commit_interval_ms > 10_000 {
            return invalid("durability.commit_interval_ms must be between 1 and 10000".into());
        }
        if durability.wal_segment_bytes < (1 << 20) || durability.wal_segment_bytes > (1 << 32) {
            return invalid("durability.wal_segment_bytes must be between 1 MiB and 4 GiB".into());
        }
        if durability.checkpoint_wal_bytes < durability.wal_segment_bytes {
            return invalid("durability.checkpoint_wal_bytes must be at least durability.wal_segment_bytes".into());
        }
        if durability.checkpoint_interval_secs == 0 {
            return invalid("durability.checkpoint_interval_secs must be at least 1".into());
        }
        self.validate_log_room()?;
        self.validate_cluster()?;
        let mut ports: Vec<u16> = self.shards.iter().map(|s| s.port).filter(|p| *p != 0).collect();
        ports.sort_unstable();
        if let Some(pair) = ports.windows(2).find(|pair| pair[0] == pair[1]) {
            return invalid(format!("two shards are configured on port {}", pair[0]));
        }
        if self.backup.root.as_ref().is_some_and(|root| !root.is_absolute()) {
            return invalid("backup.root must be an absolute path".into());
        }
        let tls = &self.tls;
        if tls.cert_file.is_some() != tls.key_file.is_some() {
            return invalid("tls.cert_file and tls.key_file (--tls-cert, --tls-key) go together".into());
        }
        if tls.client_ca_file.is_some() && tls.cert_file.is_none() {
            return invalid("tls.client_ca_file (--tls-client-ca) needs tls.cert_file and tls.key_file".into());
        }
        if let Some(missing) =
            [&tls.cert_file, &tls.key_file, &tls.client_ca_file].into_iter().flatten().find(|path| !path.is_file())
        {
            return invalid(format!("TLS file {} is not a file", missing.display()));
        }
        if let Some(unknown) = self.ado.signals.iter().find(|name| !SIGNALS.contains(&name.as_str())) {
            return invalid(format!("ado.signals: unknown signal {unknown:?}; expected any of {SIGNALS:?}"));
        }
        if self.ado.call_timeout_ms == 0 {
            return invalid("ado.call_timeout_ms must be greater than zero".into());
        }
        if self.ado.memory_limit_bytes < 16 << 20 {
            return invalid("ado.memory_limit_bytes must be at least 16 MiB (a host loads its plugins in it)".into());
        }
        self.validate_resp()
    }

    /// Refuses a log whose segments cannot hold the largest record a shard can write: a put of
    /// the largest key and value with its table's growth, or the creation of the largest pool.
    fn validate_cluster(&self) -> Result<(), ConfigError> {
        let cluster = &self.cluster;
        let Some(node_id) = cluster.node_id else { return Ok(()) };
        let invalid = |message: String| Err(ConfigError::Invalid(message));
        if node_id == 0 {
            return invalid("[cluster] node_id must be 1 or more (0 names no node)".into());
        }
        if let Some(index) = self.shards.iter().position(|shard| shard.backing != Backing::Ssd) {
            return invalid(format!(
                "shard {index}: a cluster node replicates its shards' write-ahead logs, so every shard needs backing = \"ssd\""
            ));
        }
        let [min, max] = cluster.election_timeout_ms;
        if cluster.heartbeat_ms < 10 || cluster.heartbeat_ms > 10_000 {
            return invalid(format!(
                "[cluster] heartbeat_ms must be between 10 and 10000, not {}",
                cluster.heartbeat_ms
            ));
        }
        if min < 3 * cluster.heartbeat_ms || max <= min || max > 60_000 {
            return invalid(format!(
                "[cluster] election_timeout_ms = [{min}, {max}]: the minimum must be at least three heartbeats ({} ms), \
                 the maximum above the minimum and at most 60000",
                3 * cluster.heartbeat_ms
            ));
        }
        if let Some(host) = &cluster.advertise_host {
            if host.is_empty() || host.len() > 253 || host.chars().any(|c| c.is_whitespace() || c == '/' || c == '@') {
                return invalid(format!("[cluster] advertise_host {host:?} is not a host name or address"));
            }
        }
        let peer = self.peer_listen();
        let span = self.shards.len() as u32;
        if u32::from(peer.port()) + span > 65_536 || peer.port() == 0 {
            return invalid(format!(
                "[cluster] peer_listen {peer}: needs a fixed port with room for {span} groups (port + group number)"
            ));
        }
        Ok(())
    }

    /// The peer listener of group 0 (see [`ClusterConfig::peer_listen`]).
    pub fn peer_listen(&self) -> std::net::SocketAddr {
        self.cluster.peer_listen.unwrap_or(std::net::SocketAddr::new(self.listen, PEER_PORT_DEFAULT))
    }

    /// The host other nodes and clients are told to reach this node at.
    pub fn advertise_host(&self) -> String {
        match &self.cluster.advertise_host {
            Some(host) => host.clone(),
            None if self.listen.is_unspecified() => "127.0.0.1".to_owned(),
            None => self.listen.to_string(),
        }
    }

    fn validate_log_room(&self) -> Result<(), ConfigError> {
        let limits = &self.limits;
        let segment_bytes = self.durability.wal_segment_bytes;
        for (index, shard) in self.shards.iter().enumerate().filter(|(_, shard)| shard.backing == Backing::Ssd) {
            let kind = shard.store.kind();
            let key_max = u64::from(limits.key_bytes_max);
            let value_max = u64::from(limits.value_bytes_max);
            let write = kind.largest_put_footprint(key_max, value_max);
            let spec = PoolSpec { size_bytes: limits.pool_bytes_max, expected_objects: u64::MAX };
            let creation = kind.creation_footprint(spec).map_err(|error| {
                ConfigError::Invalid(format!("limits.pool_bytes_max = {}: {error}", limits.pool_bytes_max))
            })?;
            let payload = ferrite_store::persistence::ssd::record::largest_payload(write, creation);
            let needed = usize::try_from(payload).map_or(u64::MAX, record_bytes).saturating_add(SEGMENT_HEADER_BYTES);
            if segment_bytes < needed {
                return Err(ConfigError::Invalid(format!(
                    "durability.wal_segment_bytes = {segment_bytes} cannot hold the largest write-ahead log record \
                     shard {index} can write ({needed} bytes with its segment header: a put of a {key_max}-byte key \
                     and a {value_max}-byte value with the growth of its table); set it to at least {needed}, or \
                     lower limits.key_bytes_max or limits.value_bytes_max"
                )));
            }
        }
        Ok(())
    }

    fn validate_resp(&self) -> Result<(), ConfigError> {
        let resp = &self.resp;
        if !resp.enabled {
            return Ok(());
        }
        let invalid = |message: String| Err(ConfigError::Invalid(message));
        let last = self.shards.len() - 1;
        let longest = resp.pool_name(last);
        if resp.pool.is_empty() || longest.len() > POOL_NAME_BYTES_MAX {
            return invalid(format!(
                "resp.pool must be 1 to {} bytes, so that '{longest}' is a valid pool name",
                POOL_NAME_BYTES_MAX - (longest.len() - resp.pool.len())
            ));
        }
        if resp.pool_size_bytes == 0 {
            return invalid("resp.pool_size_bytes must be greater than zero".into());
        }
        if resp.port != 0 && usize::from(resp.port) + last > usize::from(u16::MAX) {
            return invalid(format!(
                "resp.port {} leaves no port for shard {last} (shard i listens on port + i)",
                resp.port
            ));
        }
        if resp.listen.unwrap_or(self.listen) == self.listen {
            let native: Vec<u16> = self.shards.iter().map(|s| s.port).filter(|p| *p != 0).collect();
            if let Some(port) = (0..self.shards.len()).map(|i| resp.port(i)).find(|p| *p != 0 && native.contains(p)) {
                return invalid(format!("port {port} is configured for both a shard and a RESP listener"));
            }
        }
        Ok(())
    }
}

/// Port of shard `index` when shards take consecutive ports from `base`. Port 0 stays 0 (every
/// shard picks its own free port).
fn shard_port(base: u16, index: usize) -> u16 {
    if base == 0 {
        return 0;
    }
    u16::try_from(usize::from(base) + index).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_one_shard_on_11911() {
        let config = Config::embedded_default();
        assert_eq!(config.listen.to_string(), "127.0.0.1");
        assert_eq!(config.data_dir, PathBuf::from("./ferrite-data"));
        assert_eq!(config.shards.len(), 1);
        assert_eq!(config.shards[0].port, 11911);
        assert_eq!(config.shards[0].store, StoreName::Hstore);
        assert_eq!(config.shards[0].backing, Backing::Ssd);
        assert_eq!(config.durability, DurabilityConfig::default());
        assert_eq!(config.limits.protocol_limits(), Limits::MAX);
    }

    /// The code's defaults are the embedded default file's: an empty file is that file, and a
    /// file gives only what it changes.
    #[test]
    fn a_file_gives_only_what_it_changes() {
        assert_eq!(Config::from_toml("", "empty.toml").expect("empty file"), Config::embedded_default());
        assert_eq!(Config::default(), Config::embedded_default());
        let config = Config::from_toml("[durability]\ncommit_interval_ms = 5\n", "t").expect("one key");
        assert_eq!(config.durability.commit_interval_ms, 5);
        assert_eq!(Config { durability: DurabilityConfig::default(), ..config }, Config::embedded_default());
        let config = Config::from_toml("[limits]\nkey_bytes_max = 1024\n", "t").expect("one limit");
        assert_eq!(config.limits, LimitsConfig { key_bytes_max: 1024, ..LimitsConfig::default() });
    }

    /// A certificate needs its key and the reverse, a client CA needs a certificate, and every
    /// file named must exist; each refusal names the setting or the file.
    #[test]
    fn tls_files_are_checked_together() {
        let file = std::env::current_exe().expect("the test binary is a file").display().to_string();
        let with = |table: String| Config::from_toml(&format!("[tls]\n{table}"), "t");
        let error = with(format!("cert_file = {file:?}\n")).expect_err("no key").to_string();
        assert!(error.contains("tls.cert_file and tls.key_file"), "{error}");
        let error = with(format!("client_ca_file = {file:?}\n")).expect_err("no certificate").to_string();
        assert!(error.contains("tls.client_ca_file"), "{error}");
        let error = with("cert_file = \"/no/cert.pem\"\nkey_file = \"/no/key.pem\"\n".into()).expect_err("missing");
        assert!(error.to_string().contains("/no/cert.pem"), "{error}");
        let config = with(format!("cert_file = {file:?}\nkey_file = {file:?}\n")).expect("both files exist");
        assert!(config.tls.enabled());
        assert!(!Config::embedded_default().tls.enabled(), "TLS is off by default");
    }

    #[test]
    fn a_backup_root_must_be_absolute() {
        let error = Config::from_toml("[backup]\nroot = \"backups\"\n", "t").expect_err("relative").to_string();
        assert!(error.contains("backup.root"), "{error}");
        let config = Config::from_toml("[backup]\nroot = \"/srv/backups\"\n", "t").expect("absolute");
        assert_eq!(config.backup.root, Some(PathBuf::from("/srv/backups")));
    }

    /// Shard tables without a port take consecutive ports from the default one.
    #[test]
    fn shards_without_ports_take_consecutive_ports() {
        let config = Config::from_toml("[[shards]]\n[[shards]]\npoll_us = 0\n[[shards]]\nport = 5000\n", "t")
            .expect("three shards");
        let ports: Vec<u16> = config.shards.iter().map(|shard| shard.port).collect();
        assert_eq!(ports, [SHARD_PORT_DEFAULT, SHARD_PORT_DEFAULT + 1, 5000]);
        assert_eq!(config.shards[1].poll_us, 0);
        assert_eq!(config.shards[0].backing, Backing::Ssd);
    }

    /// A value of the wrong type is refused with a message that names its key.
    #[test]
    fn wrong_types_are_named() {
        for (text, key) in [
            ("[limits]\nkey_bytes_max = \"big\"\n", "key_bytes_max"),
            ("listen = 5\n", "listen"),
            ("[[shards]]\npoll_us = -1\n", "poll_us"),
            ("[durability]\ncommit_interval_ms = true\n", "commit_interval_ms"),
            ("[resp]\nplugins = \"counter\"\n", "plugins"),
        ] {
            let error = Config::from_toml(text, "t").expect_err(text).to_string();
            assert!(error.contains(key), "{text}: {error}");
        }
    }

    /// The effective configuration printed by `--check-config` reads back as the same one.
    #[test]
    fn the_effective_configuration_reads_back_the_same() {
        let text = "[[shards]]\ncore = 1\n[[shards]]\nbacking = \"memory\"\n[resp]\nenabled = true\nport = 0\n";
        let config = Config::from_toml(text, "t").expect("valid");
        let printed = config.to_toml();
        assert_eq!(Config::from_toml(&printed, "printed").expect("printed config is valid"), config, "{printed}");
        assert!(printed.contains("[[shards]]") && printed.contains("core = 1"), "{printed}");
    }

    #[test]
    fn unknown_keys_are_named() {
        let text = DEFAULT_CONFIG_TOML.replace("data_dir", "data_dri");
        let error = Config::from_toml(&text, "test.toml").expect_err("misspelt key").to_string();
        assert!(error.contains("data_dri"), "{error}");
        let text = DEFAULT_CONFIG_TOML.replace("port = 11911", "port = 11911\nprot = 1");
        let error = Config::from_toml(&text, "test.toml").expect_err("unknown shard key").to_string();
        assert!(error.contains("prot"), "{error}");
    }

    #[test]
    fn mapstore_is_selected_by_name_and_needs_the_memory_backing() {
        let text = DEFAULT_CONFIG_TOML.replace("store = \"hstore\"", "store = \"mapstore\"");
        let error = Config::from_toml(&text, "test.toml").expect_err("mapstore cannot be durable").to_string();
        assert!(error.contains("backing = \"memory\""), "{error}");
        let text = text.replace("backing = \"ssd\"", "backing = \"memory\"");
        let config = Config::from_toml(&text, "test.toml").expect("mapstore in memory");
        assert_eq!(config.shards[0].store, StoreName::Mapstore);
        assert_eq!(config.shards[0].store.kind(), StoreKind::MapStore);
        assert_eq!(config.shards[0].store.kind().name(), "mapstore");
    }

    #[test]
    fn every_backing_is_selected_by_name() {
        for (name, backing) in [("ssd", Backing::Ssd), ("pmem", Backing::Pmem), ("memory", Backing::Memory)] {
            let text = DEFAULT_CONFIG_TOML.replace("backing = \"ssd\"", &format!("backing = \"{name}\""));
            let config = Config::from_toml(&text, "t").expect("a known backing");
            assert_eq!(config.shards[0].backing, backing);
            assert_eq!(backing.name(), name);
        }
        let text = DEFAULT_CONFIG_TOML.replace("backing = \"ssd\"", "backing = \"tape\"");
        assert!(Config::from_toml(&text, "t").expect_err("unknown").to_string().contains("tape"));
    }

    #[test]
    fn the_durability_table_is_read_and_checked() {
        let with = |table: &str| Config::from_toml(&format!("{DEFAULT_CONFIG_TOML}\n[durability]\n{table}\n"), "t");
        let config = with("commit_interval_ms = 2").expect("valid");
        assert_eq!(config.durability.commit_interval_ms, 2);
        assert_eq!(config.durability.wal_segment_bytes, 16 << 20, "missing keys take defaults");
        assert!(with("commit_interval_ms = 0").is_err());
        assert!(with("wal_segment_bytes = 1000").is_err());
        assert!(with("checkpoint_wal_bytes = 1048576").is_err(), "below the segment size");
        let error = with("comit_interval_ms = 5").expect_err("misspelt").to_string();
        assert!(error.contains("comit_interval_ms"), "{error}");
    }

    #[test]
    fn unknown_store_is_an_error() {
        let text = DEFAULT_CONFIG_TOML.replace("\"hstore\"", "\"nosuchstore\"");
        let error = Config::from_toml(&text, "test.toml").expect_err("bad store").to_string();
        assert!(error.contains("nosuchstore"), "{error}");
    }

    #[test]
    fn overrides_spread_shards_over_consecutive_ports() {
        let overrides = Overrides {
            listen: Some("0.0.0.0:12000".parse().expect("literal address")),
            shards: Some(3),
            data_dir: Some(PathBuf::from("/tmp/x")),
            ..Overrides::default()
        };
        let config = Config::embedded_default().apply(&overrides).expect("valid overrides");
        assert_eq!(config.listen.to_string(), "0.0.0.0");
        assert_eq!(config.shards.iter().map(|s| s.port).collect::<Vec<_>>(), vec![12000, 12001, 12002]);
        assert_eq!(config.data_dir, PathBuf::from("/tmp/x"));
    }

    #[test]
    fn plugins_come_from_the_table_and_the_command_line_and_must_be_files() {
        let library = std::env::current_exe().expect("the test binary is a file");
        let text = format!("{DEFAULT_CONFIG_TOML}\n[plugins]\ncounter = {:?}\n", library.display().to_string());
        let config = Config::from_toml(&text, "test.toml").expect("a plugin table");
        assert_eq!(config.plugins["counter"], library);
        let overrides = Overrides { plugins: vec![("mine".into(), library.clone())], ..Overrides::default() };
        let config = config.apply(&overrides).expect("a plugin on the command line");
        assert_eq!(config.plugins.keys().collect::<Vec<_>>(), ["counter", "mine"]);
        let missing = Overrides { plugins: vec![("gone".into(), "/no/such/lib.so".into())], ..Overrides::default() };
        let error = Config::embedded_default().apply(&missing).expect_err("no such file").to_string();
        assert!(error.contains("plugin 'gone'") && error.contains("/no/such/lib.so"), "{error}");
        let configured = format!("{DEFAULT_CONFIG_TOML}\n[plugin_config]\nversioning = \"versions=8\"\n");
        let config = Config::from_toml(&configured, "test.toml").expect("a plugin's configuration");
        assert_eq!(config.plugin_config["versioning"], "versions=8");
        let bad = format!("{DEFAULT_CONFIG_TOML}\n[plugin_config]\n\"a b\" = \"x\"\n");
        assert!(Config::from_toml(&bad, "test.toml").is_err(), "a bad name is refused");
        let badly_named = Overrides { plugins: vec![("a,b".into(), library)], ..Overrides::default() };
        let error = Config::embedded_default().apply(&badly_named).expect_err("bad name").to_string();
        assert!(error.contains("\"a,b\""), "{error}");
    }

    #[test]
    fn port_zero_gives_every_shard_a_free_port() {
        let overrides = Overrides {
            listen: Some("127.0.0.1:0".parse().expect("literal")),
            shards: Some(2),
            ..Overrides::default()
        };
        let config = Config::embedded_default().apply(&overrides).expect("valid overrides");
        assert!(config.shards.iter().all(|s| s.port == 0));
    }

    #[test]
    fn invalid_settings_are_refused() {
        let zero = Overrides { shards: Some(0), ..Overrides::default() };
        assert!(Config::embedded_default().apply(&zero).is_err());
        let text = DEFAULT_CONFIG_TOML.replace("key_bytes_max = 65536", "key_bytes_max = 65537");
        assert!(Config::from_toml(&text, "t").is_err());
        let text = format!("{DEFAULT_CONFIG_TOML}\n[[shards]]\nport = 11911\n");
        let error = Config::from_toml(&text, "t").expect_err("duplicate port").to_string();
        assert!(error.contains("11911"), "{error}");
    }

    /// Log segments must hold the largest record a shard can write (a put of the largest key and
    /// value with a table growth): a configuration whose segments cannot is refused at startup,
    /// naming the setting and the size it needs; smaller limits let small segments through.
    #[test]
    fn segments_too_small_for_the_largest_record_are_refused() {
        let small = format!("{DEFAULT_CONFIG_TOML}\n[durability]\nwal_segment_bytes = 2097152\n");
        let error = Config::from_toml(&small, "t").expect_err("2 MiB segments, 2 MiB values").to_string();
        assert!(error.contains("durability.wal_segment_bytes = 2097152"), "{error}");
        assert!(error.contains("at least"), "{error}");
        let limited = small.replace("value_bytes_max = 2097152", "value_bytes_max = 262144");
        Config::from_toml(&limited, "t").expect("256 KiB values fit 2 MiB segments");
        let memory = small.replace("backing = \"ssd\"", "backing = \"memory\"");
        Config::from_toml(&memory, "t").expect("a memory shard writes no log");
    }

    #[test]
    fn resp_is_off_by_default_and_documented_in_the_default_file() {
        let config = Config::embedded_default();
        assert!(!config.resp.enabled);
        assert_eq!(config.resp, RespConfig::default());
        assert!(DEFAULT_CONFIG_TOML.contains("# [resp]"), "the default file shows the table, commented out");
    }

    #[test]
    fn the_ado_table_is_read_with_defaults_and_checked() {
        assert_eq!(Config::embedded_default().ado, AdoConfig::default());
        assert!(DEFAULT_CONFIG_TOML.contains("# [ado]"), "the default file shows the table, commented out");
        let text = format!("{DEFAULT_CONFIG_TOML}\n[ado]\ncall_timeout_ms = 250\ncheck_writes = true\n");
        let config = Config::from_toml(&text, "test.toml").expect("an ado table");
        assert_eq!(config.ado, AdoConfig { call_timeout_ms: 250, check_writes: true, ..AdoConfig::default() });
        let zero = format!("{DEFAULT_CONFIG_TOML}\n[ado]\ncall_timeout_ms = 0\n");
        let error = Config::from_toml(&zero, "test.toml").expect_err("no deadline").to_string();
        assert!(error.contains("ado.call_timeout_ms"), "{error}");
        let signals = format!("{DEFAULT_CONFIG_TOML}\n[ado]\nsignals = [\"post-put\", \"post-erase\"]\n");
        let config = Config::from_toml(&signals, "test.toml").expect("signals");
        assert!(config.ado.signals("post-put") && config.ado.signals("post-erase") && !config.ado.signals("post-get"));
        let bad = format!("{DEFAULT_CONFIG_TOML}\n[ado]\nsignals = [\"pre-put\"]\n");
        let error = Config::from_toml(&bad, "test.toml").expect_err("unknown signal").to_string();
        assert!(error.contains("pre-put"), "{error}");
        let unknown = format!("{DEFAULT_CONFIG_TOML}\n[ado]\ntimeout = 5\n");
        let error = Config::from_toml(&unknown, "test.toml").expect_err("unknown key").to_string();
        assert!(error.contains("timeout"), "{error}");
    }

    #[test]
    fn the_resp_table_is_read_with_defaults_for_missing_keys() {
        let text = format!("{DEFAULT_CONFIG_TOML}\n[resp]\nenabled = true\nport = 7000\n");
        let config = Config::from_toml(&text, "t").expect("valid");
        assert!(config.resp.enabled);
        assert_eq!((config.resp.port(0), config.resp.port(2)), (7000, 7002));
        assert_eq!(config.resp.pool_name(1), "@1/redis");
        assert_eq!(config.resp.pool_size_bytes, 1 << 30);
        assert_eq!(config.resp.listen, None);
        assert!(!config.resp.indexed, "the RESP pool is unindexed unless asked");
        let text = format!("{DEFAULT_CONFIG_TOML}\n[resp]\nenabeld = true\n");
        let error = Config::from_toml(&text, "t").expect_err("misspelt key").to_string();
        assert!(error.contains("enabeld"), "{error}");
    }

    /// The polling window is in the default file, and a shard table without it gets the default.
    #[test]
    fn the_polling_window_defaults_per_shard() {
        let config = Config::from_toml(DEFAULT_CONFIG_TOML, "t").expect("valid");
        assert_eq!(config.shards[0].poll_us, POLL_US_DEFAULT);
        let line = format!("poll_us = {POLL_US_DEFAULT}");
        let text = DEFAULT_CONFIG_TOML.replace(&line, "poll_us = 0");
        assert_eq!(Config::from_toml(&text, "t").expect("valid").shards[0].poll_us, 0);
        let text = DEFAULT_CONFIG_TOML.replace(&line, "");
        assert_eq!(Config::from_toml(&text, "t").expect("valid").shards[0].poll_us, POLL_US_DEFAULT);
    }

    #[test]
    fn resp_listen_override_enables_resp() {
        let overrides = Overrides {
            resp_listen: Some("0.0.0.0:0".parse().expect("literal")),
            shards: Some(2),
            ..Overrides::default()
        };
        let config = Config::embedded_default().apply(&overrides).expect("valid overrides");
        assert!(config.resp.enabled);
        assert_eq!(config.resp.listen, Some("0.0.0.0".parse().expect("literal")));
        assert_eq!((config.resp.port(0), config.resp.port(1)), (0, 0));
    }

    #[test]
    fn invalid_resp_settings_are_refused() {
        let with =
            |table: &str| Config::from_toml(&format!("{DEFAULT_CONFIG_TOML}\n[resp]\nenabled = true\n{table}\n"), "t");
        assert!(with("pool = \"\"").is_err());
        assert!(with(&format!("pool = \"{}\"", "x".repeat(253))).is_err());
        assert!(with(&format!("pool = \"{}\"", "x".repeat(252))).is_ok());
        assert!(with("pool_size_bytes = 0").is_err());
        let error = with("port = 11911").expect_err("clash with shard 0").to_string();
        assert!(error.contains("11911"), "{error}");
        assert!(with("port = 11911\nlisten = \"127.0.0.2\"").is_ok(), "another address may reuse the port");
        let two = Overrides { shards: Some(2), ..Overrides::default() };
        let config = Config::from_toml(&format!("{DEFAULT_CONFIG_TOML}\n[resp]\nenabled = true\nport = 65535\n"), "t")
            .expect("one shard fits");
        assert!(config.apply(&two).is_err(), "shard 1 would need port 65536");
    }
}
