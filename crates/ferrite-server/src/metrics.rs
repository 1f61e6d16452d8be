//! The metrics endpoint: the Prometheus (OpenMetrics) text format over HTTP, for a scraper.
//!
//! Shards keep their counters as plain integers on their own thread (no atomics, no locks on the
//! request path). A scrape asks every shard for a [`ShardSnapshot`] over a channel its loop
//! answers between requests, then writes them out with `prometheus-client`'s encoder. Nothing is
//! gathered unless somebody scrapes.
//!
//! The endpoint speaks just enough HTTP/1.1 for a scraper: it answers `GET /metrics` (and `GET /`)
//! with one response and closes the connection; anything else gets `404` or `405`.

use std::net::TcpListener;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

mod groups;

use crate::handler::ShardState;
use crate::stats::{LatencySnapshot, Op, PoolCounters, OPS};

/// How long a scrape waits for a shard's snapshot before leaving that shard out.
const SHARD_ANSWER_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a scraper may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest request head read; a scraper's is a few hundred bytes.
const REQUEST_HEAD_BYTES_MAX: usize = 8192;

/// What the response is served as (the OpenMetrics text format `prometheus-client` writes).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A request for a shard's snapshot: the shard answers on the sender.
pub(crate) type SnapshotRequest = oneshot::Sender<ShardSnapshot>;

/// One pool's gauges and counters.
#[derive(Debug, Clone)]
pub(crate) struct PoolSnapshot {
    pub name: String,
    pub objects: u64,
    pub memory_bytes: u64,
    pub counters: PoolCounters,
}

/// A shard's durable log, on the `ssd` backing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LogSnapshot {
    pub bytes: u64,
    pub commits: u64,
    pub appended_lsn: u64,
    pub durable_lsn: u64,
    pub checkpoints: u64,
    pub checkpoint_pages: u64,
    pub last_checkpoint_seconds: f64,
    pub last_checkpoint_pages: u64,
    pub recovery_seconds: f64,
}

/// Everything one shard reports to a scrape.
#[derive(Debug, Clone)]
pub(crate) struct ShardSnapshot {
    pub index: u16,
    pub uptime_seconds: f64,
    pub requests: u64,
    pub puts: u64,
    pub gets: u64,
    pub erases: u64,
    pub finds: u64,
    pub invocations: u64,
    pub failures: [u64; OPS],
    pub invocation_failures: u64,
    pub authentication_failures: u64,
    pub requests_denied: u64,
    pub direct_transfers: u64,
    pub direct_bytes_in: u64,
    pub direct_bytes_out: u64,
    pub direct_bytes_in_place: u64,
    pub connections: u64,
    pub connections_accepted: u64,
    pub connections_refused: u64,
    pub connections_timed_out: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Request latencies, by [`Op`] kind in [`Op::ALL`] order.
    pub latency: [LatencySnapshot; OPS],
    pub pools: Vec<PoolSnapshot>,
    pub log: Option<LogSnapshot>,
    /// What every user holds against its quota: reported by shard 0 alone, as the counts are
    /// the server's, not a shard's.
    pub users: Vec<(String, crate::auth::Held)>,
    /// In cluster mode, the shard's replica of its group.
    pub group: Option<groups::GroupSnapshot>,
}

impl ShardState {
    /// The shard's counters and gauges as of now.
    pub(crate) fn snapshot(&self) -> ShardSnapshot {
        let stats = &self.stats;
        let log = self.durability.as_ref().map(|durability| {
            let counters = durability.log.counters();
            LogSnapshot {
                bytes: counters.bytes_written,
                commits: counters.commits,
                appended_lsn: durability.log.last_lsn(),
                durable_lsn: durability.gate.durable_lsn(),
                checkpoints: durability.checkpoints,
                checkpoint_pages: durability.checkpoint_pages_total,
                last_checkpoint_seconds: durability.last_checkpoint_took.as_secs_f64(),
                last_checkpoint_pages: durability.last_checkpoint_pages,
                recovery_seconds: durability.recovered_in.as_secs_f64(),
            }
        });
        ShardSnapshot {
            index: self.index,
            uptime_seconds: stats.started.elapsed().as_secs_f64(),
            requests: stats.requests,
            puts: stats.puts,
            gets: stats.gets,
            erases: stats.erases,
            finds: stats.finds,
            invocations: stats.invocations,
            failures: stats.failures_by_op,
            invocation_failures: stats.invocation_failures,
            authentication_failures: stats.authentication_failures,
            requests_denied: stats.requests_denied,
            direct_transfers: stats.direct_transfers,
            direct_bytes_in: stats.direct_bytes_in,
            direct_bytes_out: stats.direct_bytes_out,
            direct_bytes_in_place: stats.direct_bytes_in_place,
            connections: stats.clients,
            connections_accepted: stats.clients_total,
            connections_refused: stats.clients_refused,
            connections_timed_out: stats.clients_timed_out,
            bytes_in: self.traffic.bytes().0,
            bytes_out: self.traffic.bytes().1,
            latency: Op::ALL.map(|op| self.traffic.latency(op)),
            users: if self.index == 0 { self.auth.usage.snapshot() } else { Vec::new() },
            pools: self
                .pools
                .each()
                .map(|pool| PoolSnapshot {
                    name: pool.name.clone(),
                    objects: pool.store.count(),
                    memory_bytes: pool.memory().total_bytes(),
                    counters: pool.counters,
                })
                .collect(),
            log,
            group: self.group_snapshot(),
        }
    }
}

/// The metric families of one scrape, written by the registry's encoder.
#[derive(Debug)]
struct Scrape {
    shards: Vec<ShardSnapshot>,
}

/// A series' labels: name and value pairs.
type Labels = Vec<(&'static str, String)>;

/// A family's series of one counter per pool and operation kind, read by `counts` from a pool's
/// counters.
fn per_pool_and_op(counts: fn(&PoolCounters) -> &[u64; OPS]) -> impl Fn(&ShardSnapshot) -> Vec<(Labels, ConstCounter)> {
    move |shard| {
        shard
            .pools
            .iter()
            .flat_map(|pool| {
                Op::ALL.into_iter().map(|op| {
                    let mut labels = shard_labels(shard);
                    labels.push(("pool", pool.name.clone()));
                    labels.push(("op", op.name().to_owned()));
                    (labels, ConstCounter::new(counts(&pool.counters)[op as usize]))
                })
            })
            .collect()
    }
}

/// Labels of a shard's series.
fn shard_labels(shard: &ShardSnapshot) -> Labels {
    vec![("shard", shard.index.to_string())]
}

impl Scrape {
    /// Writes one family: `value` of every shard that has it, labelled by shard (and `extra`).
    fn family<M: EncodeMetric>(
        &self,
        encoder: &mut DescriptorEncoder<'_>,
        name: &str,
        help: &str,
        series: impl Fn(&ShardSnapshot) -> Vec<(Labels, M)>,
    ) -> Result<(), std::fmt::Error> {
        let all: Vec<_> = self.shards.iter().flat_map(&series).collect();
        let Some((_, first)) = all.first() else { return Ok(()) };
        let mut family = encoder.encode_descriptor(name, help, None, first.metric_type())?;
        for (labels, metric) in &all {
            metric.encode(family.encode_family(labels)?)?;
        }
        Ok(())
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let counter = |value: u64| ConstCounter::new(value);
        self.family(&mut encoder, "ferrite_requests", "Requests handled, of every kind.", |s| {
            vec![(shard_labels(s), counter(s.requests))]
        })?;
        self.family(&mut encoder, "ferrite_operations", "Operations applied, by kind.", |s| {
            [("put", s.puts), ("get", s.gets), ("erase", s.erases), ("find", s.finds), ("invoke", s.invocations)]
                .into_iter()
                .map(|(op, value)| {
                    let mut labels = shard_labels(s);
                    labels.push(("op", op.to_owned()));
                    (labels, counter(value))
                })
                .collect()
        })?;
        self.family(&mut encoder, "ferrite_failures", "Requests answered with an error, by kind.", |s| {
            Op::ALL
                .into_iter()
                .map(|op| {
                    let mut labels = shard_labels(s);
                    labels.push(("op", op.name().to_owned()));
                    (labels, counter(s.failures[op as usize]))
                })
                .collect()
        })?;
        self.family(&mut encoder, "ferrite_received_bytes", "Bytes read from client connections.", |s| {
            vec![(shard_labels(s), counter(s.bytes_in))]
        })?;
        self.family(&mut encoder, "ferrite_sent_bytes", "Bytes written to client connections.", |s| {
            vec![(shard_labels(s), counter(s.bytes_out))]
        })?;
        self.latency(&mut encoder)?;
        self.family(
            &mut encoder,
            "ferrite_invocation_failures",
            "Plugin calls that failed: plugin error, crash or timeout.",
            |s| vec![(shard_labels(s), counter(s.invocation_failures))],
        )?;
        self.family(
            &mut encoder,
            "ferrite_authentication_failures",
            "Authentications refused: a wrong, unknown or missing user or password.",
            |s| vec![(shard_labels(s), counter(s.authentication_failures))],
        )?;
        self.family(&mut encoder, "ferrite_requests_denied", "Requests refused for want of a grant.", |s| {
            vec![(shard_labels(s), counter(s.requests_denied))]
        })?;
        self.family(&mut encoder, "ferrite_direct_transfers", "Direct transfers opened (large values).", |s| {
            vec![(shard_labels(s), counter(s.direct_transfers))]
        })?;
        self.family(&mut encoder, "ferrite_direct_received_bytes", "Value bytes received by direct puts.", |s| {
            vec![(shard_labels(s), counter(s.direct_bytes_in))]
        })?;
        self.family(&mut encoder, "ferrite_direct_sent_bytes", "Value bytes sent by direct reads.", |s| {
            vec![(shard_labels(s), counter(s.direct_bytes_out))]
        })?;
        self.family(
            &mut encoder,
            "ferrite_direct_received_in_place_bytes",
            "Value bytes of direct puts read from the socket straight into pool memory.",
            |s| vec![(shard_labels(s), counter(s.direct_bytes_in_place))],
        )?;
        self.family(&mut encoder, "ferrite_connections_accepted", "Client connections accepted.", |s| {
            vec![(shard_labels(s), counter(s.connections_accepted))]
        })?;
        self.family(
            &mut encoder,
            "ferrite_connections_refused",
            "Client connections turned away at the connection limit.",
            |s| vec![(shard_labels(s), counter(s.connections_refused))],
        )?;
        self.family(
            &mut encoder,
            "ferrite_connections_timed_out",
            "Client connections closed for missing the handshake deadline or idling past the idle timeout.",
            |s| vec![(shard_labels(s), counter(s.connections_timed_out))],
        )?;
        self.family(&mut encoder, "ferrite_connections", "Client connections open now.", |s| {
            vec![(shard_labels(s), ConstGauge::new(s.connections as i64))]
        })?;
        self.family(&mut encoder, "ferrite_uptime_seconds", "Seconds since the shard started.", |s| {
            vec![(shard_labels(s), ConstGauge::new(s.uptime_seconds))]
        })?;
        self.family(&mut encoder, "ferrite_pools", "Pools the shard holds.", |s| {
            vec![(shard_labels(s), ConstGauge::new(s.pools.len() as i64))]
        })?;
        let per_pool = |value: fn(&PoolSnapshot) -> u64| {
            move |s: &ShardSnapshot| {
                s.pools
                    .iter()
                    .map(|pool| {
                        let mut labels = shard_labels(s);
                        labels.push(("pool", pool.name.clone()));
                        (labels, ConstGauge::new(value(pool) as i64))
                    })
                    .collect()
            }
        };
        self.family(&mut encoder, "ferrite_pool_objects", "Key-value pairs in the pool.", per_pool(|p| p.objects))?;
        let per_user = |value: fn(&crate::auth::Held) -> u64| {
            move |shard: &ShardSnapshot| -> Vec<(Labels, ConstGauge)> {
                let user = |name: &String| vec![("user", name.clone())];
                shard.users.iter().map(|(name, held)| (user(name), ConstGauge::new(value(held) as i64))).collect()
            }
        };
        self.family(
            &mut encoder,
            "ferrite_user_connections",
            "Connections the user has open, over every shard (its quota: quota.connections).",
            per_user(|held| held.connections),
        )?;
        self.family(
            &mut encoder,
            "ferrite_user_pools",
            "Pools the user created that exist (its quota: quota.pools).",
            per_user(|held| held.pools),
        )?;
        self.family(
            &mut encoder,
            "ferrite_user_pool_bytes",
            "The sizes of the user's pools, added up (its quota: quota.pool_bytes).",
            per_user(|held| held.pool_bytes),
        )?;
        self.family(
            &mut encoder,
            "ferrite_pool_requests",
            "Requests on the pool, by kind.",
            per_pool_and_op(|counters| &counters.ops),
        )?;
        self.family(
            &mut encoder,
            "ferrite_pool_failures",
            "Requests on the pool answered with an error, by kind.",
            per_pool_and_op(|counters| &counters.failures),
        )?;
        self.family(
            &mut encoder,
            "ferrite_pool_memory_bytes",
            "Pool memory in use: its table, keys, values and allocator state.",
            per_pool(|p| p.memory_bytes),
        )?;
        let per_log = |value: fn(&LogSnapshot) -> u64| {
            move |s: &ShardSnapshot| s.log.map(|log| (shard_labels(s), counter(value(&log)))).into_iter().collect()
        };
        self.family(&mut encoder, "ferrite_wal_bytes", "Bytes written to the write-ahead log.", per_log(|l| l.bytes))?;
        self.family(
            &mut encoder,
            "ferrite_wal_commits",
            "Group commits of the write-ahead log, each with one fdatasync per segment it touches.",
            per_log(|l| l.commits),
        )?;
        self.family(
            &mut encoder,
            "ferrite_wal_puts_per_commit",
            "Puts since start over group commits since start: how many writes one fdatasync carries.",
            |s: &ShardSnapshot| {
                s.log
                    .filter(|log| log.commits > 0)
                    .map(|log| (shard_labels(s), ConstGauge::new(s.puts as f64 / log.commits as f64)))
                    .into_iter()
                    .collect()
            },
        )?;
        self.family(&mut encoder, "ferrite_checkpoints", "Checkpoints completed.", per_log(|l| l.checkpoints))?;
        self.family(
            &mut encoder,
            "ferrite_checkpoint_pages",
            "Pages written by checkpoints.",
            per_log(|l| l.checkpoint_pages),
        )?;
        let seconds_gauge = |value: fn(&LogSnapshot) -> f64| {
            move |s: &ShardSnapshot| {
                s.log.map(|log| (shard_labels(s), ConstGauge::new(value(&log)))).into_iter().collect()
            }
        };
        self.family(
            &mut encoder,
            "ferrite_last_checkpoint_seconds",
            "How long the last checkpoint took.",
            seconds_gauge(|l| l.last_checkpoint_seconds),
        )?;
        self.family(
            &mut encoder,
            "ferrite_recovery_seconds",
            "How long the shard took to recover its pools at start.",
            seconds_gauge(|l| l.recovery_seconds),
        )?;
        self.family(
            &mut encoder,
            "ferrite_last_checkpoint_pages",
            "Pages the last checkpoint wrote.",
            |s: &ShardSnapshot| {
                s.log
                    .map(|log| (shard_labels(s), ConstGauge::new(log.last_checkpoint_pages as i64)))
                    .into_iter()
                    .collect()
            },
        )?;
        let lsn_gauge = |value: fn(&LogSnapshot) -> u64| {
            move |s: &ShardSnapshot| {
                s.log.map(|log| (shard_labels(s), ConstGauge::new(value(&log) as i64))).into_iter().collect()
            }
        };
        self.family(
            &mut encoder,
            "ferrite_wal_appended_lsn",
            "Log sequence number of the last record appended.",
            lsn_gauge(|l| l.appended_lsn),
        )?;
        self.family(
            &mut encoder,
            "ferrite_wal_durable_lsn",
            "Log sequence number up to which the log is on stable storage.",
            lsn_gauge(|l| l.durable_lsn),
        )?;
        self.family(
            &mut encoder,
            "ferrite_wal_durable_lag_records",
            "Records appended but not yet on stable storage.",
            lsn_gauge(|l| l.appended_lsn.saturating_sub(l.durable_lsn)),
        )?;
        self.groups(&mut encoder)
    }
}

impl Scrape {
    /// `ferrite_request_seconds`: per shard and operation kind, from the read of a request to the
    /// write of its answer (its group commit's `fdatasync` included for a `sync` write).
    fn latency(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "ferrite_request_seconds",
            "Time from reading a request to writing its answer, by operation kind.",
            None,
            MetricType::Histogram,
        )?;
        for shard in &self.shards {
            for (op, histogram) in Op::ALL.iter().zip(&shard.latency) {
                let mut labels = shard_labels(shard);
                labels.push(("op", op.name().to_owned()));
                let mut buckets = family.encode_family(&labels)?;
                buckets.encode_histogram::<NoLabelSet>(
                    histogram.sum_seconds,
                    histogram.count,
                    &histogram.buckets,
                    None,
                )?;
            }
        }
        Ok(())
    }
}

/// The endpoint's side of the shards: one snapshot channel per shard.
#[derive(Debug, Clone)]
pub(crate) struct ShardLinks {
    shards: Vec<mpsc::UnboundedSender<SnapshotRequest>>,
}

impl ShardLinks {
    /// One link per shard, and each shard's receiving end.
    pub(crate) fn new(shards: usize) -> (ShardLinks, Vec<mpsc::UnboundedReceiver<SnapshotRequest>>) {
        let (senders, receivers) = (0..shards).map(|_| mpsc::unbounded_channel()).unzip();
        (ShardLinks { shards: senders }, receivers)
    }

    /// Every shard's snapshot, in shard order; a shard that does not answer in time (stopping,
    /// or stuck) is left out and logged.
    async fn gather(&self) -> Vec<ShardSnapshot> {
        let mut snapshots = Vec::with_capacity(self.shards.len());
        for (index, shard) in self.shards.iter().enumerate() {
            let (answer, answered) = oneshot::channel();
            if shard.send(answer).is_err() {
                continue;
            }
            match tokio::time::timeout(SHARD_ANSWER_TIMEOUT, answered).await {
                Ok(Ok(snapshot)) => snapshots.push(snapshot),
                _ => warn!(shard = index, "shard did not answer the metrics scrape in time"),
            }
        }
        snapshots
    }
}

/// Answers a shard's snapshot requests for as long as the shard runs: a task of the shard's loop.
pub(crate) async fn answer_snapshots(
    shard: std::rc::Rc<std::cell::RefCell<ShardState>>,
    mut requests: mpsc::UnboundedReceiver<SnapshotRequest>,
) {
    while let Some(answer) = requests.recv().await {
        // The scrape may have given up waiting; then nobody needs the snapshot.
        let _ = answer.send(shard.borrow().snapshot());
    }
}

/// The text a scrape returns.
pub(crate) fn render(shards: Vec<ShardSnapshot>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scrape { shards }));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("writing to a String cannot fail");
    text
}

/// Serves the endpoint on `listener` until the future is dropped.
pub(crate) async fn serve(listener: TcpListener, shards: ShardLinks) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(error) => {
            warn!(%error, "cannot serve metrics");
            return;
        }
    };
    loop {
        let Ok((stream, _peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let shards = shards.clone();
        tokio::spawn(async move {
            // A scraper that hangs up early has nothing left to be told.
            let _ = tokio::time::timeout(REQUEST_TIMEOUT * 2, answer(stream, &shards)).await;
        });
    }
}

/// Reads one request head and answers it.
async fn answer(mut stream: tokio::net::TcpStream, shards: &ShardLinks) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    let read = tokio::time::timeout(REQUEST_TIMEOUT, async {
        while !head.windows(4).any(|window| window == b"\r\n\r\n") && head.len() < REQUEST_HEAD_BYTES_MAX {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            head.extend_from_slice(&chunk[..n]);
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
    if !matches!(read, Ok(Ok(()))) {
        return Ok(());
    }
    let line = head.split(|byte| *byte == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let path = path.split('?').next().unwrap_or_default();
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics" | "/") => ("200 OK", CONTENT_TYPE, render(shards.gather().await)),
        ("GET", _) => ("404 Not Found", "text/plain", "not found: metrics are at /metrics\n".to_owned()),
        _ => ("405 Method Not Allowed", "text/plain", "only GET is served\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}
