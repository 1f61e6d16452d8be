//! What the cluster fault tests share: forming a cluster with the `ferrite` CLI, finding leaders
//! and members' progress through `cluster_status`, a concurrent write and read load recorded in a
//! `ferrite-history` history, and the final checks (every acknowledged write is there, every key's
//! history is linearizable).
//!
//! Every call that talks to a node is bounded in time: a stopped (SIGSTOP) or cut-off node
//! accepts connections or requests and never answers, and the client has no request timeout of
//! its own, so each request runs under a tokio timeout here.
//!
//! Cluster tests start three debug-build servers each; on a two-core machine two such tests at
//! once starve each other's elections. [`serial`] makes the tests of one file run one at a time
//! (cargo runs test binaries one after the other).

// Each test file uses its own subset.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrite_client::{ClientOptions, ClusterStatus, Error, ErrorCode, Pool, PoolOptions, RaftRole, Session};
use ferrite_history::{check_acknowledged, check_linearizable, CheckOptions, History, Op, PendingOp, Ret, Value};

use crate::cluster_harness::Cluster;
use crate::common::{fresh_dir, wait_exit};

/// How long one request may take before the load calls its outcome unknown and reconnects. Longer
/// than a failover (an election timeout of at most 600 ms, plus a deposed leader's restart in a
/// debug build), so that a request that can still be answered usually is.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a status question or a connection may take (a stopped node never answers).
pub const ASK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a group may be without a leader after a fault ends before the test fails. Generous:
/// a failover takes about one election timeout, but a debug build on two loaded cores restarts a
/// deposed leader in seconds.
pub const LEADER_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a CLI command may run.
pub const CLI_TIMEOUT: Duration = Duration::from_secs(120);

/// The pool every load writes to.
pub const POOL: &str = "faults";

static SERIAL: Mutex<()> = Mutex::new(());

/// Held for a whole test: the tests of one file run one at a time (see the module doc). A test
/// that panicked poisons nothing for the others.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `future` on a runtime of its own, giving up (`None`) after `timeout`.
pub fn block_on<T>(timeout: Duration, future: impl Future<Output = T>) -> Option<T> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(async { tokio::time::timeout(timeout, future).await.ok() })
}

/// Stores `count` values of `bytes` each (keys `bulk-N`, apart from the load's) in the load's
/// pool through node `via`, following redirects to the leader: a quick way to grow every
/// replica's log. Returns how many were acknowledged within `timeout`.
pub fn put_bulk(cluster: &Cluster, via: usize, count: usize, bytes: usize, timeout: Duration) -> usize {
    let addr = cluster.node(via).native_addr().to_string();
    block_on(timeout, async {
        let Ok(session) = Session::connect_with(&addr, client_options()).await else { return 0 };
        let Ok(pool) = session.open_pool(POOL).await else { return 0 };
        let mut stored = 0;
        for n in 0..count {
            if pool.put(format!("bulk-{n}"), vec![(n % 251) as u8; bytes]).await.is_ok() {
                stored += 1;
            }
        }
        stored
    })
    .unwrap_or(0)
}

/// How many of the `count` values [`put_bulk`] stored (of `bytes` bytes each) node `via` serves
/// whole: it must lead the group.
pub fn bulk_served(cluster: &Cluster, via: usize, count: usize, bytes: usize, timeout: Duration) -> usize {
    let addr = cluster.node(via).native_addr().to_string();
    block_on(timeout, async {
        let Ok(session) = Session::connect_with(&addr, client_options()).await else { return 0 };
        let Ok(pool) = session.open_pool(POOL).await else { return 0 };
        let mut served = 0;
        for n in 0..count {
            if pool.get(format!("bulk-{n}")).await.is_ok_and(|value| value == vec![(n % 251) as u8; bytes]) {
                served += 1;
            }
        }
        served
    })
    .unwrap_or(0)
}

fn client_options() -> ClientOptions {
    ClientOptions { connect_timeout: ASK_TIMEOUT, ..ClientOptions::default() }
}

/// The `ferrite` CLI built beside the server (`cargo build --workspace` builds both).
pub fn ferrite_cli() -> PathBuf {
    let server = Path::new(env!("CARGO_BIN_EXE_ferrite-server"));
    let cli = server.with_file_name("ferrite");
    assert!(cli.exists(), "{} is missing: run `cargo build --workspace` first", cli.display());
    cli
}

/// What a CLI run printed, and whether it succeeded.
#[derive(Debug)]
pub struct CliRun {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `ferrite ARGS`, killing it (by its own pid) after [`CLI_TIMEOUT`].
pub fn cli(args: &[String]) -> CliRun {
    let dir = fresh_dir("cli");
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new(ferrite_cli())
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("the ferrite CLI starts");
    let status = match wait_exit(&mut child, CLI_TIMEOUT) {
        Some(status) => status,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ferrite {args:?} did not finish within {CLI_TIMEOUT:?}");
        }
    };
    let run = CliRun {
        success: status.success(),
        stdout: std::fs::read_to_string(&out).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err).unwrap_or_default(),
    };
    let _ = std::fs::remove_dir_all(&dir);
    run
}

/// `ferrite --addr ADDR WORDS...`.
///
/// A node that stepped down restarts its process, and refuses connections for a moment: a run
/// refused so is tried again, for up to [`RESTART_WAIT`].
pub fn cli_at(addr: SocketAddr, words: &[&str]) -> CliRun {
    let mut args = vec!["--addr".to_owned(), addr.to_string()];
    args.extend(words.iter().map(|word| (*word).to_owned()));
    let deadline = Instant::now() + RESTART_WAIT;
    loop {
        let run = cli(&args);
        if run.success || !run.stderr.contains("Connection refused") || Instant::now() > deadline {
            return run;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How long a node that restarts itself may refuse connections.
pub const RESTART_WAIT: Duration = Duration::from_secs(10);

/// `ferrite cluster init` of `members` (node indexes), sent through the first; panics unless it
/// succeeds.
pub fn init(cluster: &Cluster, members: &[usize]) -> CliRun {
    let mut words = vec!["cluster".to_owned(), "init".to_owned()];
    for &member in members {
        words.extend(["--node".to_owned(), cluster.node(member).native_addr().to_string()]);
    }
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let run = cli_at(cluster.node(members[0]).native_addr(), &words);
    assert!(run.success, "cluster init failed: {run:?}");
    run
}

/// Starts `cluster`'s nodes as one cluster of them all and waits for every group's leader.
pub fn form(cluster: &Cluster) {
    let all: Vec<usize> = (0..cluster.node_count()).collect();
    init(cluster, &all);
    for group in 0..cluster.shard_count() {
        wait_for_leader(cluster, group, &all, LEADER_TIMEOUT);
    }
}

/// The replica of `group` on node `index`, as it reports it; `None` if it does not answer in time.
pub fn status(cluster: &Cluster, index: usize, group: usize) -> Option<ClusterStatus> {
    let addr = cluster.node(index).native_addr().to_string();
    let group = u16::try_from(group).expect("a group number");
    block_on(ASK_TIMEOUT, async move {
        let session = Session::connect_with(&addr, client_options()).await.ok()?;
        session.cluster_status(group).await.ok()
    })
    .flatten()
}

/// The node among `among` that reports leading `group` in the highest term, if one does.
pub fn leader(cluster: &Cluster, group: usize, among: &[usize]) -> Option<usize> {
    among
        .iter()
        .filter_map(|&index| Some((index, status(cluster, index, group)?)))
        .filter(|(_, status)| status.role == RaftRole::Leader)
        .max_by_key(|(_, status)| status.term)
        .map(|(index, _)| index)
}

/// Waits until a node among `among` leads `group` and a majority of `among` agrees (each names
/// it as leader), and returns it.
pub fn wait_for_leader(cluster: &Cluster, group: usize, among: &[usize], timeout: Duration) -> usize {
    let deadline = Instant::now() + timeout;
    loop {
        let statuses: Vec<(usize, ClusterStatus)> =
            among.iter().filter_map(|&index| Some((index, status(cluster, index, group)?))).collect();
        let leading = statuses.iter().filter(|(_, s)| s.role == RaftRole::Leader).max_by_key(|(_, s)| s.term);
        if let Some((index, led)) = leading {
            let id = cluster.node(*index).node_id();
            let agree = statuses.iter().filter(|(_, s)| s.leader == id && s.term == led.term).count();
            if agree * 2 > among.len() {
                return *index;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no leader of group {group} among nodes {among:?} within {timeout:?}: {statuses:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until every follower of `group` that `leader` reports has lag 0 and `members` (node
/// ids, the leader's included) are exactly who it reports on; returns the leader's status.
pub fn wait_in_sync(cluster: &Cluster, group: usize, members: &[u64], timeout: Duration) -> ClusterStatus {
    let among: Vec<usize> = (0..cluster.node_count()).collect();
    let deadline = Instant::now() + timeout;
    let mut last = None;
    loop {
        if let Some(leader) = leader(cluster, group, &among) {
            if let Some(status) = status(cluster, leader, group) {
                let mut reported: BTreeSet<u64> = status.followers.iter().map(|f| f.node_id).collect();
                reported.insert(status.node_id);
                let wanted: BTreeSet<u64> = members.iter().copied().collect();
                if reported == wanted && status.followers.iter().all(|f| f.lag == 0) {
                    return status;
                }
                last = Some(status);
            }
        }
        assert!(Instant::now() < deadline, "group {group} not in sync with members {members:?}: {last:#?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Creates the load's pool through any node (following redirects), retrying while leaders are
/// being elected.
pub fn create_pool(cluster: &Cluster) {
    let seeds: Vec<String> = cluster.native_addrs().iter().map(ToString::to_string).collect();
    let options = PoolOptions { size_bytes: 16 << 20, expected_objects: 1024, ..PoolOptions::default() };
    let deadline = Instant::now() + LEADER_TIMEOUT;
    loop {
        let made = block_on(REQUEST_TIMEOUT, async {
            let session = connect_any(&seeds).await?;
            session.create_pool(POOL, options.clone()).await.map_err(|e| e.to_string())
        });
        match made {
            Some(Ok(_)) => return,
            other => assert!(Instant::now() < deadline, "cannot create the pool {POOL}: {other:?}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A session with the first of `seeds` that answers.
async fn connect_any(seeds: &[String]) -> Result<Session, String> {
    let mut errors = Vec::new();
    for seed in seeds {
        match Session::connect_with(seed, client_options()).await {
            Ok(session) => return Ok(session),
            Err(error) => errors.push(format!("{seed}: {error}")),
        }
    }
    Err(errors.join("; "))
}

/// Whether an error says for certain that the request changed nothing: a refusal by a node that
/// does not lead (the protocol says nothing was changed).
fn refused(error: &Error) -> bool {
    error.code() == Some(ErrorCode::NotLeader)
}

/// One client of the load: its id in the history and the keys it alone writes.
fn key_of(client: u64, n: u64, keys: u64) -> String {
    format!("c{client}-k{}", n % keys)
}

/// What a load looks like.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Client threads, each with its own session and its own keys.
    pub clients: u64,
    pub keys_per_client: u64,
    /// Every `read_every`-th operation of a client is a read of one of its keys.
    pub read_every: u64,
    /// Most operations one client sends (a bound on the loop; the test usually stops it first).
    pub max_ops: u64,
}

impl Default for LoadSpec {
    fn default() -> Self {
        LoadSpec { clients: 3, keys_per_client: 4, read_every: 3, max_ops: 200_000 }
    }
}

/// Client threads writing and reading concurrently, each operation recorded in one history with
/// how it ended: acknowledged, refused (`not_leader`: certainly not applied) or unknown (timeout,
/// broken connection). Every write writes a value of its own (`client-n`).
pub struct Load {
    history: History,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// When each acknowledged write completed, in order of completion per client.
    acks: Arc<Mutex<Vec<Instant>>>,
    keys: Vec<String>,
    seeds: Vec<String>,
    acknowledged: Arc<AtomicU64>,
}

impl Load {
    /// Starts `spec.clients` threads against the pool [`POOL`] (create it first), reaching the
    /// cluster through any of its nodes.
    pub fn start(cluster: &Cluster, spec: LoadSpec) -> Load {
        let seeds: Vec<String> = cluster.native_addrs().iter().map(ToString::to_string).collect();
        let history = History::new();
        let stop = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(Mutex::new(Vec::new()));
        let acknowledged = Arc::new(AtomicU64::new(0));
        let mut keys = Vec::new();
        let mut threads = Vec::new();
        for client in 1..=spec.clients {
            keys.extend((0..spec.keys_per_client).map(|n| key_of(client, n, spec.keys_per_client)));
            let (history, stop, acks, seeds, acknowledged, spec) =
                (history.clone(), stop.clone(), acks.clone(), seeds.clone(), acknowledged.clone(), spec.clone());
            let thread = std::thread::Builder::new()
                .name(format!("load-client-{client}"))
                .spawn(move || {
                    let runtime =
                        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
                    runtime.block_on(run_client(client, spec, seeds, history, stop, acks, acknowledged));
                })
                .expect("a load thread starts");
            threads.push(thread);
        }
        Load { history, stop, threads, acks, keys, seeds, acknowledged }
    }

    /// Writes acknowledged so far.
    pub fn acknowledged(&self) -> u64 {
        self.acknowledged.load(Ordering::Relaxed)
    }

    /// Waits until `more` writes beyond those acknowledged now are acknowledged (the cluster
    /// serves writes again); returns when the first of them was acknowledged.
    pub fn wait_for_acks(&self, more: u64, timeout: Duration, what: &str) -> Instant {
        let from = self.acks.lock().unwrap_or_else(PoisonError::into_inner).len();
        let deadline = Instant::now() + timeout;
        loop {
            {
                let acks = self.acks.lock().unwrap_or_else(PoisonError::into_inner);
                if acks.len() >= from + usize::try_from(more).expect("a count") {
                    return acks[from];
                }
            }
            assert!(Instant::now() < deadline, "fewer than {more} writes acknowledged within {timeout:?} {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The first write acknowledged after `since`, waiting for it up to `timeout`.
    pub fn first_ack_after(&self, since: Instant, timeout: Duration) -> Option<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let acks = self.acks.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(ack) = acks.iter().find(|ack| **ack > since) {
                    return Some(*ack);
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Writes acknowledged after `since`.
    pub fn acks_since(&self, since: Instant) -> usize {
        self.acks.lock().unwrap_or_else(PoisonError::into_inner).iter().filter(|ack| **ack > since).count()
    }

    /// Stops the clients, reads every key once more (recorded in the history too), and checks
    /// that every acknowledged write is there and every key's history is linearizable. Panics
    /// with the history's summary and the problems found, the history saved to a file. Returns
    /// what the final reads found, key by key.
    pub fn finish_and_check(mut self) -> Vec<(String, Option<Value>)> {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            thread.join().expect("a load client panicked");
        }
        let finals = final_reads(&self.history, &self.keys, &self.seeds);
        let acknowledged = self.acknowledged();
        assert!(acknowledged > 0, "the load had no write acknowledged at all: {}", self.history.summary());
        if let Err(anomalies) = check_acknowledged(&self.history, finals.clone()) {
            panic!("acknowledged writes lost or unwritten values read:\n{anomalies}\n{}", self.report());
        }
        let verdict = check_linearizable(&self.history, &CheckOptions::default());
        assert!(verdict.is_linearizable(), "the history is not linearizable:\n{verdict}\n{}", self.report());
        eprintln!("load: {acknowledged} writes acknowledged; {}", self.history.summary());
        finals
    }

    /// The summary, and where the whole history was saved.
    fn report(&self) -> String {
        let path = fresh_dir("history").join("history.jsonl");
        let saved = std::fs::File::create(&path).and_then(|file| self.history.write_json_lines(file));
        format!("{}\nhistory: {} ({saved:?})", self.history.summary(), path.display())
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One client: writes (and every `read_every`-th operation reads) its own keys until stopped.
async fn run_client(
    client: u64,
    spec: LoadSpec,
    seeds: Vec<String>,
    history: History,
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Vec<Instant>>>,
    acknowledged: Arc<AtomicU64>,
) {
    let mut connection: Option<(Session, Pool)> = None;
    let mut seed = usize::try_from(client).expect("a client number");
    for n in 0..spec.max_ops {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let Some((_, pool)) = &connection else {
            seed += 1;
            connection = reconnect(&seeds[seed % seeds.len()]).await;
            if connection.is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            continue;
        };
        let key = key_of(client, n, spec.keys_per_client);
        let keep = if n % spec.read_every == spec.read_every - 1 {
            let op = history.invoke(client, key.as_str(), Op::Read);
            end_read(op, tokio::time::timeout(REQUEST_TIMEOUT, pool.get(&key)).await)
        } else {
            let value = format!("{client}-{n}");
            let op = history.invoke(client, key.as_str(), Op::Write(Value::from(value.as_str())));
            let answer = tokio::time::timeout(REQUEST_TIMEOUT, pool.put(&key, &value)).await;
            if matches!(answer, Ok(Ok(()))) {
                acks.lock().unwrap_or_else(PoisonError::into_inner).push(Instant::now());
                acknowledged.fetch_add(1, Ordering::Relaxed);
            }
            end_write(op, answer)
        };
        if !keep {
            // A refused or lost request: the routes may be stale, or the connection stuck.
            connection = None;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn reconnect(seed: &str) -> Option<(Session, Pool)> {
    let session = tokio::time::timeout(ASK_TIMEOUT, Session::connect_with(seed, client_options())).await.ok()?.ok()?;
    let pool = tokio::time::timeout(REQUEST_TIMEOUT, session.open_pool(POOL)).await.ok()?.ok()?;
    Some((session, pool))
}

type Answer<T> = Result<ferrite_client::Result<T>, tokio::time::error::Elapsed>;

/// Records how a write ended; `false` if the connection should be dropped.
fn end_write(op: PendingOp, answer: Answer<()>) -> bool {
    match answer {
        Ok(Ok(())) => {
            op.ok(Ret::Done);
            true
        }
        Ok(Err(error)) if refused(&error) => {
            op.fail();
            false
        }
        _ => {
            op.unknown();
            false
        }
    }
}

/// Records how a read ended; `false` if the connection should be dropped.
fn end_read(op: PendingOp, answer: Answer<Vec<u8>>) -> bool {
    match answer {
        Ok(Ok(value)) => {
            op.ok(Ret::Read(Some(Value::from(value))));
            true
        }
        Ok(Err(error)) if error.code() == Some(ErrorCode::KeyNotFound) => {
            op.ok(Ret::Read(None));
            true
        }
        Ok(Err(error)) if refused(&error) => {
            op.fail();
            false
        }
        _ => {
            op.unknown();
            false
        }
    }
}

/// Reads every key once more, through any node, retrying each until it is answered (within
/// [`LEADER_TIMEOUT`]); the reads are recorded in the history (client 0).
fn final_reads(history: &History, keys: &[String], seeds: &[String]) -> Vec<(String, Option<Value>)> {
    let deadline = Instant::now() + LEADER_TIMEOUT;
    let mut finals = Vec::new();
    let mut connection: Option<(Session, Pool)> = None;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let mut seed = 0;
    for key in keys {
        loop {
            assert!(Instant::now() < deadline, "the final reads were not answered within {LEADER_TIMEOUT:?}");
            let Some((_, pool)) = &connection else {
                seed += 1;
                connection = runtime.block_on(reconnect(&seeds[seed % seeds.len()]));
                if connection.is_none() {
                    std::thread::sleep(Duration::from_millis(100));
                }
                continue;
            };
            let op = history.invoke(0, key.as_str(), Op::Read);
            let answer = runtime.block_on(async { tokio::time::timeout(REQUEST_TIMEOUT, pool.get(key)).await });
            let value = match &answer {
                Ok(Ok(value)) => Some(Some(Value::from(value.clone()))),
                Ok(Err(error)) if error.code() == Some(ErrorCode::KeyNotFound) => Some(None),
                _ => None,
            };
            end_read(op, answer);
            match value {
                Some(value) => {
                    finals.push((key.clone(), value));
                    break;
                }
                None => {
                    connection = None;
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }
    finals
}

/// Reads every key of `finals` through the native address of node `index` only (no redirects
/// followed: it must lead), and asserts each holds what the final reads found.
pub fn assert_node_serves(cluster: &Cluster, index: usize, finals: &[(String, Option<Value>)]) {
    let addr = cluster.node(index).native_addr().to_string();
    let found = block_on(LEADER_TIMEOUT, async {
        let session = Session::connect_with(&addr, client_options()).await.map_err(|e| e.to_string())?;
        let pool = session.open_pool(POOL).await.map_err(|e| e.to_string())?;
        let mut found = Vec::new();
        for (key, _) in finals {
            let value = match pool.get(key).await {
                Ok(value) => Some(Value::from(value)),
                Err(error) if error.code() == Some(ErrorCode::KeyNotFound) => None,
                Err(error) => return Err(format!("{key}: {error}")),
            };
            found.push((key.clone(), value));
        }
        Ok(found)
    });
    let found = found.unwrap_or_else(|| panic!("node {index} did not answer the reads in time"));
    assert_eq!(found.as_ref().ok(), Some(&finals.to_vec()), "node {index} answers other values");
}

/// Sends one RESP command (`words`) to `addr` and reads the first line of the answer; `None` if
/// none comes within [`ASK_TIMEOUT`] or the connection fails.
pub fn resp_line(addr: SocketAddr, words: &[&str]) -> Option<String> {
    use std::io::{BufRead, BufReader, Write};
    let stream = std::net::TcpStream::connect_timeout(&addr, ASK_TIMEOUT).ok()?;
    stream.set_read_timeout(Some(ASK_TIMEOUT)).ok()?;
    let mut command = format!("*{}\r\n", words.len());
    for word in words {
        command.push_str(&format!("${}\r\n{word}\r\n", word.len()));
    }
    (&stream).write_all(command.as_bytes()).ok()?;
    let mut line = String::new();
    BufReader::new(&stream).read_line(&mut line).ok()?;
    Some(line.trim_end().to_owned()).filter(|line| !line.is_empty())
}

/// A configuration file with `toml` in it (the rest stays the embedded default), for
/// `--config`.
pub fn config_file(toml: &str) -> PathBuf {
    let path = fresh_dir("cluster-config").join("ferrite.toml");
    std::fs::write(&path, toml).expect("the configuration file is written");
    path
}

/// Milliseconds, for reports.
pub fn ms(duration: Duration) -> u128 {
    duration.as_millis()
}

/// Waits until node `index` has applied everything `group`'s leader had committed when the wait
/// began (it caught up, though the load goes on); returns that index.
pub fn wait_caught_up(cluster: &Cluster, group: usize, index: usize, timeout: Duration) -> u64 {
    let among: Vec<usize> = (0..cluster.node_count()).collect();
    let leader = wait_for_leader(cluster, group, &among, timeout);
    let target = status(cluster, leader, group).map_or(0, |status| status.committed);
    let deadline = Instant::now() + timeout;
    loop {
        let now = status(cluster, index, group);
        if now.as_ref().is_some_and(|status| status.applied >= target) {
            return target;
        }
        assert!(
            Instant::now() < deadline,
            "node {index} did not apply group {group} up to {target} within {timeout:?}: {now:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Median and maximum of `times`, for reports.
pub fn median_and_max(times: &[Duration]) -> (Duration, Duration) {
    let mut sorted = times.to_vec();
    sorted.sort();
    (sorted[sorted.len() / 2], *sorted.last().expect("some times"))
}
