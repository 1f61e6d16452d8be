//! The stores a run can drive, behind one small interface: connect the clients, hand each worker
//! its way to the store, perform one operation, clean up.
//!
//! - native: Ferrite's protocol through `ferrite-client`, on one or more pools (`--pools`) whose
//!   names route to every shard in turn; values inline or as direct transfers (`--transfer`), and
//!   inline puts the client would send directly through `super::inline`;
//! - resp: the Redis protocol through the `redis` crate's multiplexed connection (which
//!   pipelines the requests of concurrent tasks on one connection, as `ferrite-client` does);
//! - memcache: memcached's text protocol through `super::memcache`.
//!
//! An enum rather than a trait object: the set is closed, and a `match` per operation keeps the
//! hot path free of boxing.

use std::sync::Arc;
use std::time::Duration;

use ferrite_client::{
    ClientOptions, DirectMemory, Durability, Error, FindKind, InvokeOptions, Limits, Pool, PoolOptions, PutFlags,
    Session,
};
use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;

use super::memcache::{self, Reply};
use super::{Plan, TargetKind, Transfer};

/// Connecting plus the handshake, per connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the RESP client waits for one reply before failing the request. The `redis` crate's
/// default is half a second, which a loaded server with `appendfsync always` can exceed without
/// anything being wrong; the native client has no such limit either.
const RESP_RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// Candidate names tried per pool when looking for one that routes to a given shard. With FNV-1a
/// routing a name lands on a given one of S shards with probability 1/S, so failing 1,000 tries is
/// out of the question for any shard count a server has.
const POOL_NAME_TRIES_MAX: u32 = 1000;

/// Why one operation failed, and whether the connection it used is gone (every later operation
/// on it would fail at once, so the worker stops).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    pub fatal: bool,
}

impl Failure {
    fn new(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), fatal: false }
    }

    fn native(error: &Error) -> Failure {
        Failure { message: error.to_string(), fatal: error.is_connection_closed() }
    }

    fn resp(error: &redis::RedisError) -> Failure {
        Failure {
            message: error.to_string(),
            fatal: error.is_connection_dropped() || error.is_io_error() || error.is_unrecoverable_error(),
        }
    }

    fn memcache(closed: memcache::Closed) -> Failure {
        Failure { message: closed.0, fatal: true }
    }
}

/// Everything a run connected (and, for native, the pools it opened), one entry per client.
#[derive(Debug)]
pub enum Connections {
    Native(Native),
    Resp(Vec<MultiplexedConnection>),
    Memcache(Vec<memcache::Connection>),
}

/// The native target's sessions and pools.
#[derive(Debug)]
pub struct Native {
    sessions: Vec<Session>,
    /// Each session's handles on every pool, by pool index.
    pools: Vec<Arc<[Pool]>>,
    /// How puts and gets move their values, resolved against the server's limits.
    paths: Paths,
    value_size: usize,
    names: Vec<String>,
    /// Whether this run created each pool (and so may delete it).
    created: Vec<bool>,
    /// Shard of each pool.
    shards: Vec<u16>,
    shard_count: u16,
    /// Flags of every put: the durability the plan asks for, if any.
    put_flags: PutFlags,
}

impl Connections {
    /// Connects `plan.clients` clients and prepares what they work on.
    pub async fn open(plan: &Plan) -> Result<Connections, String> {
        match plan.target {
            TargetKind::Native => Native::open(plan).await.map(Connections::Native),
            TargetKind::Resp => {
                let url = format!("redis://{}/", plan.addr);
                let client = redis::Client::open(url.as_str()).map_err(|e| format!("--addr {}: {e}", plan.addr))?;
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESP_RESPONSE_TIMEOUT));
                let mut connections = Vec::with_capacity(plan.clients as usize);
                for _ in 0..plan.clients {
                    let connection = client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .map_err(|error| format!("connecting to the RESP server at {}: {error}", plan.addr))?;
                    connections.push(connection);
                }
                Ok(Connections::Resp(connections))
            }
            TargetKind::Memcache => {
                let mut connections = Vec::with_capacity(plan.clients as usize);
                for _ in 0..plan.clients {
                    let connection = tokio::time::timeout(CONNECT_TIMEOUT, memcache::Connection::connect(&plan.addr))
                        .await
                        .map_err(|_| format!("connecting to memcached at {}: timed out", plan.addr))?
                        .map_err(|error| format!("connecting to memcached at {}: {error}", plan.addr))?;
                    connections.push(connection);
                }
                Ok(Connections::Memcache(connections))
            }
        }
    }

    /// A worker's handle on client `index`'s connection.
    pub fn client(&self, index: usize) -> Client {
        match self {
            Connections::Native(native) => {
                let session = index % native.pools.len();
                let puts = native.paths.puts;
                Client::Native(NativeClient {
                    pools: Arc::clone(&native.pools[session]),
                    put_flags: native.put_flags,
                    puts,
                    gets_direct: native.paths.gets_direct,
                    value_size: native.value_size,
                })
            }
            Connections::Resp(connections) => Client::Resp(connections[index % connections.len()].clone()),
            Connections::Memcache(connections) => Client::Memcache(connections[index % connections.len()].clone()),
        }
    }

    /// What the run worked on, for the report: pool names and shards (native), or nothing.
    pub fn pools(&self) -> Vec<(String, u16)> {
        match self {
            Connections::Native(native) => native.names.iter().cloned().zip(native.shards.iter().copied()).collect(),
            _ => Vec::new(),
        }
    }

    /// Whether gets read values with direct transfers, so each worker that gets needs a buffer of
    /// `--value-size` bytes.
    pub fn gets_direct(&self) -> bool {
        matches!(self, Connections::Native(native) if native.paths.gets_direct)
    }

    /// Shards of the server (native), or `None` where the protocol does not say.
    pub fn shard_count(&self) -> Option<u16> {
        match self {
            Connections::Native(native) => Some(native.shard_count),
            _ => None,
        }
    }

    /// Closes what the run opened and deletes the pools it created (unless --keep-pool).
    /// Problems here are reported but do not void the measurements. Returns what happened to
    /// the pools, for the record.
    pub async fn finish(self, plan: &Plan) -> &'static str {
        match self {
            Connections::Native(native) => native.finish(plan).await,
            Connections::Resp(_) => "none (RESP: the keys are left in the server's default pool)",
            Connections::Memcache(_) => "none (memcached: the keys are left in place)",
        }
    }
}

impl Native {
    async fn open(plan: &Plan) -> Result<Native, String> {
        let options = ClientOptions {
            client_name: concat!("ferrite-bench/", env!("CARGO_PKG_VERSION")).to_owned(),
            connect_timeout: CONNECT_TIMEOUT,
            tls: plan.tls.clone(),
            credentials: plan.credentials.clone(),
        };
        let mut sessions = Vec::with_capacity(plan.clients as usize);
        for _ in 0..plan.clients {
            let session =
                Session::connect_with(&plan.addr, options.clone()).await.map_err(crate::commands::connect_error)?;
            sessions.push(session);
        }
        let limits = sessions[0].limits();
        let paths = Paths::resolve(plan, limits)?;
        if paths.gets_direct {
            plan.check_direct_outstanding()?;
        }
        let shard_count = sessions[0].shard_count();
        let names = pool_names(&plan.pool, plan.pools, shard_count, |name| sessions[0].shard_for_pool(name));
        let shards = names.iter().map(|name| sessions[0].shard_for_pool(name)).collect();
        let pool_options = PoolOptions {
            size_bytes: plan.pool_size_bytes(),
            expected_objects: plan.pairs_max().div_ceil(u64::from(plan.pools)),
            // Scans (YCSB E) need the ordered index; other workloads do not pay for it.
            indexed: plan.mix.sends(super::Op::Scan),
            durability: plan.durability.unwrap_or(Durability::Sync),
            plugins: plan.invoke.iter().map(|invoke| invoke.plugin.clone()).collect(),
            ..PoolOptions::default()
        };
        let put_flags = plan.durability.map_or(PutFlags::NONE, |durability| PutFlags::NONE.with_durability(durability));
        let mut native = Native {
            sessions,
            pools: Vec::new(),
            paths,
            value_size: plan.value_size,
            names,
            created: Vec::new(),
            shards,
            shard_count,
            put_flags,
        };
        let mut first = Vec::with_capacity(native.names.len());
        for name in &native.names {
            match native.sessions[0].create_pool(name, pool_options.clone()).await {
                Ok(pool) => {
                    if !pool.created() {
                        eprintln!(
                            "note: pool '{name}' already exists; using it as it is (its size is kept) and leaving it in place"
                        );
                    }
                    native.created.push(pool.created());
                    first.push(pool);
                }
                Err(error) => {
                    let message = format!("creating pool '{name}': {error}");
                    native.pools.push(first.into());
                    native.finish(plan).await;
                    return Err(message);
                }
            }
        }
        native.pools.push(first.into());
        if let Err(message) = native.check_chains(plan).await {
            native.finish(plan).await;
            return Err(message);
        }
        for index in 1..native.sessions.len() {
            let mut pools = Vec::with_capacity(native.names.len());
            for name in &native.names {
                match native.sessions[index].open_pool(name).await {
                    Ok(pool) => pools.push(pool),
                    Err(error) => {
                        let message = format!("opening pool '{name}' in another session: {error}");
                        native.pools.push(pools.into());
                        native.finish(plan).await;
                        return Err(message);
                    }
                }
            }
            native.pools.push(pools.into());
        }
        Ok(native)
    }

    /// For an invoke workload, that every pool that already existed (and so kept its own chain)
    /// runs exactly the plugin asked for: on a pool without it every invocation would fail, and
    /// with more plugins the report would name one plugin and measure several. The pools this run
    /// created were given that chain, which the server checked.
    async fn check_chains(&self, plan: &Plan) -> Result<(), String> {
        let Some(invoke) = &plan.invoke else {
            return Ok(());
        };
        if self.created.iter().all(|&created| created) {
            return Ok(());
        }
        let listed = self.sessions[0].list_pools().await.map_err(|error| format!("listing the pools: {error}"))?;
        for (name, _) in self.names.iter().zip(&self.created).filter(|(_, &created)| !created) {
            let chain = listed.iter().find(|info| &info.name == name).map(|info| info.plugins.as_slice());
            if chain != Some(std::slice::from_ref(&invoke.plugin)) {
                let has = match chain {
                    Some([]) => "no plugins".to_owned(),
                    Some(plugins) => format!("the plugins {}", plugins.join(",")),
                    None => "a chain the server's pool listing does not show".to_owned(),
                };
                return Err(format!(
                    "pool '{name}' already exists with {has}, and a pool keeps its chain: --workload invoke \
                 --plugin {} needs a pool whose chain is {0} alone (choose another --pool, or delete this one)",
                    invoke.plugin
                ));
            }
        }
        Ok(())
    }

    async fn finish(self, plan: &Plan) -> &'static str {
        for pools in self.pools {
            for pool in pools.iter() {
                if let Err(error) = pool.clone().close().await {
                    eprintln!("warning: closing pool '{}': {error}", pool.name());
                }
            }
        }
        if !self.created.iter().any(|&created| created) {
            return "existed before the run; left in place";
        }
        if plan.keep_pool {
            return "kept (--keep-pool)";
        }
        let mut fate = "deleted";
        for (name, _) in self.names.iter().zip(&self.created).filter(|(_, &created)| created) {
            if let Err(error) = self.sessions[0].delete_pool(name).await {
                eprintln!("warning: deleting pool '{name}': {error}");
                fate = "delete failed";
            }
        }
        fate
    }
}

/// How the native target's puts go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PutPath {
    /// `Pool::put_with`: inline up to the client's threshold (the server's inline limit), direct
    /// beyond.
    Client,
    /// `Pool::put_direct_with`, whatever the length.
    Direct,
}

/// How the native target's puts and gets move values, for one plan against one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Paths {
    puts: PutPath,
    /// Gets read with `Pool::get_direct_into_memory` rather than `Pool::get_bytes`.
    gets_direct: bool,
}

impl Paths {
    /// Resolves `--transfer` against the server's limits, refusing what the server cannot take.
    fn resolve(plan: &Plan, limits: Limits) -> Result<Paths, String> {
        let inline_max = limits.value_bytes_max as usize;
        if plan.key_size > limits.key_bytes_max as usize {
            return Err(format!(
                "the server takes keys of at most {} bytes; --key-size {} does not fit",
                limits.key_bytes_max, plan.key_size
            ));
        }
        if plan.invoke.is_some() && plan.value_size > inline_max {
            return Err(format!(
                "the server takes values of at most {inline_max} bytes for plugins; --value-size {} does not fit",
                plan.value_size
            ));
        }
        match plan.transfer {
            Transfer::Auto => Ok(Paths { puts: PutPath::Client, gets_direct: plan.value_size > inline_max }),
            Transfer::Direct => Ok(Paths { puts: PutPath::Direct, gets_direct: true }),
            Transfer::Inline if plan.value_size > inline_max => Err(format!(
                "--transfer inline: the server sends and takes values of at most {inline_max} bytes inline \
                 (its limits.value_bytes_max); --value-size {} needs --transfer direct or auto",
                plan.value_size
            )),
            // `Pool::put_with` sends every value the server takes inline as one frame.
            Transfer::Inline => Ok(Paths { puts: PutPath::Client, gets_direct: false }),
        }
    }
}

/// Names for `count` pools on a server with `shards` shards: `base` itself for one pool;
/// otherwise `base-0`, `base-1`, ..., adjusted (`base-1.1`, `base-1.2`, ...) until pool i routes
/// to shard i mod shards, so the pools cover every shard in turn. A name that cannot be steered
/// (a pinned `@N/` base) is used as is.
pub fn pool_names(base: &str, count: u32, shards: u16, shard_for: impl Fn(&str) -> u16) -> Vec<String> {
    if count == 1 {
        return vec![base.to_owned()];
    }
    (0..count)
        .map(|index| {
            let plain = format!("{base}-{index}");
            let wanted = (index % u32::from(shards.max(1))) as u16;
            std::iter::once(plain.clone())
                .chain((1..=POOL_NAME_TRIES_MAX).map(|attempt| format!("{base}-{index}.{attempt}")))
                .find(|name| shard_for(name) == wanted)
                .unwrap_or(plain)
        })
        .collect()
}

/// One worker's way to the store.
#[derive(Debug, Clone)]
pub enum Client {
    Native(NativeClient),
    Resp(MultiplexedConnection),
    Memcache(memcache::Connection),
}

/// A native worker's session: its handles on every pool (key number k goes to pool k mod N),
/// the flags of its puts, and how its puts and gets move values.
#[derive(Debug, Clone)]
pub struct NativeClient {
    pools: Arc<[Pool]>,
    put_flags: PutFlags,
    puts: PutPath,
    gets_direct: bool,
    /// What a direct get must find: a value of another length is a failure, so a run against a
    /// store holding other values (or an echo announcing another length) cannot pass unnoticed.
    value_size: usize,
}

impl Client {
    fn pool(pools: &[Pool], number: u64) -> &Pool {
        &pools[Client::pool_index(pools.len(), number)]
    }

    fn pool_index(pools: usize, number: u64) -> usize {
        (number % pools as u64) as usize
    }

    /// Stores `value` under `key` (key number `number`).
    pub async fn put(&mut self, number: u64, key: &[u8], value: &[u8]) -> Result<(), Failure> {
        match self {
            Client::Native(native) => {
                let pool = Client::pool(&native.pools, number);
                let result = match native.puts {
                    PutPath::Client => pool.put_with(key, value, native.put_flags).await,
                    PutPath::Direct => pool.put_direct_with(key, value, native.put_flags).await,
                };
                result.map_err(|e| Failure::native(&e))
            }
            Client::Resp(connection) => {
                redis::cmd("SET").arg(key).arg(value).query_async::<()>(connection).await.map_err(|e| Failure::resp(&e))
            }
            Client::Memcache(connection) => match connection.set(key, value).await.map_err(Failure::memcache)? {
                Reply::Stored => Ok(()),
                other => Err(Failure::new(format!("memcached answered set with {other:?}"))),
            },
        }
    }

    /// Reads `key`'s value; a missing key is a failure (YCSB counts it as a failed read). A native
    /// worker whose gets go direct reads into `buffer`, its own, allocated before the run.
    pub async fn get(&mut self, number: u64, key: &[u8], buffer: Option<&mut DirectMemory>) -> Result<(), Failure> {
        match self {
            Client::Native(native) => {
                let pool = Client::pool(&native.pools, number);
                if !native.gets_direct {
                    // The value stays in the response frame's buffer: nothing is copied out.
                    return pool.get_bytes(key).await.map(drop).map_err(|e| Failure::native(&e));
                }
                let length = match buffer {
                    Some(buffer) => pool.get_direct_into_memory(key, buffer).await,
                    None => pool.get_direct(key).await.map(|value| value.len()),
                }
                .map_err(|e| Failure::native(&e))?;
                if length != native.value_size {
                    return Err(Failure::new(format!(
                        "the value is {length} bytes, not the {} of --value-size",
                        native.value_size
                    )));
                }
                Ok(())
            }
            Client::Resp(connection) => {
                match redis::cmd("GET").arg(key).query_async::<Option<Vec<u8>>>(connection).await {
                    Ok(Some(_)) => Ok(()),
                    Ok(None) => Err(Failure::new("key not found (GET answered nil)")),
                    Err(error) => Err(Failure::resp(&error)),
                }
            }
            Client::Memcache(connection) => match connection.get(key).await.map_err(Failure::memcache)? {
                Reply::Value(_) => Ok(()),
                Reply::Miss => Err(Failure::new("key not found (get answered END)")),
                other => Err(Failure::new(format!("memcached answered get with {other:?}"))),
            },
        }
    }

    /// Removes `key`; a missing key is a failure.
    pub async fn erase(&mut self, number: u64, key: &[u8]) -> Result<(), Failure> {
        match self {
            Client::Native(native) => {
                Client::pool(&native.pools, number).erase(key).await.map_err(|e| Failure::native(&e))
            }
            Client::Resp(connection) => match redis::cmd("DEL").arg(key).query_async::<i64>(connection).await {
                Ok(1) => Ok(()),
                Ok(_) => Err(Failure::new("key not found (DEL answered 0)")),
                Err(error) => Err(Failure::resp(&error)),
            },
            Client::Memcache(connection) => match connection.delete(key).await.map_err(Failure::memcache)? {
                Reply::Deleted => Ok(()),
                other => Err(Failure::new(format!("memcached answered delete with {other:?}"))),
            },
        }
    }

    /// Runs the pool's plugin chain on `key` with `payload`, creating an absent key as
    /// `create_size` zero bytes. Native only: `Plan::new` refuses invoke workloads on the other
    /// targets.
    pub async fn invoke(&mut self, number: u64, key: &[u8], payload: &[u8], create_size: u64) -> Result<(), Failure> {
        let options = InvokeOptions { create_size: Some(create_size), ..InvokeOptions::default() };
        match self {
            // As for get, the client hands back owned response buffers; dropping them is the only
            // cost beyond the request itself.
            Client::Native(native) => Client::pool(&native.pools, number)
                .invoke(key, payload, options)
                .await
                .map(drop)
                .map_err(|e| Failure::native(&e)),
            Client::Resp(_) | Client::Memcache(_) => Err(Failure::new("this protocol invokes no plugins")),
        }
    }

    /// Up to `count` keys in key order after `key`, in `key`'s pool: one `find` request (YCSB's
    /// scan reads the records too; a `find` returns keys only). Native only: `Plan::new` refuses
    /// scanning workloads on the other targets.
    pub async fn scan(&mut self, number: u64, key: &[u8], count: u32) -> Result<(), Failure> {
        match self {
            Client::Native(native) => Client::pool(&native.pools, number)
                .find(FindKind::Prefix, b"", Some(key), count)
                .await
                .map(drop)
                .map_err(|e| Failure::native(&e)),
            Client::Resp(_) | Client::Memcache(_) => Err(Failure::new("this protocol has no ordered scan")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_proto::shard_for_pool;

    /// Pools cover the shards round-robin, with distinct names, whatever the routing hash does.
    #[test]
    fn pool_names_cover_every_shard_in_turn() {
        assert_eq!(pool_names("bench", 1, 4, |_| 3), ["bench"]);
        for shards in [1u16, 2, 3, 8] {
            let names = pool_names("bench", 10, shards, |name| shard_for_pool(name, shards));
            let routed: Vec<u16> = names.iter().map(|name| shard_for_pool(name, shards)).collect();
            let wanted: Vec<u16> = (0..10u16).map(|i| i % shards).collect();
            assert_eq!(routed, wanted, "{names:?}");
            let mut unique = names.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), names.len(), "{names:?}");
        }
        // A pinned base cannot be steered: every name stays on its shard.
        let pinned = pool_names("@1/bench", 3, 2, |name| shard_for_pool(name, 2));
        assert_eq!(pinned, ["@1/bench-0", "@1/bench-1", "@1/bench-2"]);
    }
}
