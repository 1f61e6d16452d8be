//! A shard: one thread, one single-threaded event loop, one listening port (two with RESP), its
//! own pools.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use ferrite_proto::{ErrorCode, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use crate::ado;
use crate::backup;
use crate::checkpointing;
use crate::cluster;
use crate::cluster::group::{GroupSettings, OnLeading};
use crate::connection;
use crate::handler::ShardState;
use crate::low_load_poll;
use crate::metrics::{self, SnapshotRequest};
use crate::resp;
use crate::stream::ClientStream;
use crate::tls;

/// How long a refused connection gets to receive its `too_many_connections` error and hang up.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a stopping shard waits for its connections to finish their current batch.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Pause after a failed accept (for example, out of file descriptors) so the loop does not spin.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// What a cluster node's shard needs to run its replica of its group.
#[derive(Debug)]
pub(crate) struct GroupStart {
    /// The group's peer listener.
    pub peers: std::net::TcpListener,
    pub settings: GroupSettings,
    /// Where its Raft state and snapshots are.
    pub raft_dir: std::path::PathBuf,
}

/// Runs the shard's event loop on the current thread until `shutdown` turns true (or its sender is
/// dropped), then waits for every connection to finish its current batch.
pub(crate) fn run(
    listener: std::net::TcpListener,
    resp: Option<resp::Listener>,
    tls: Option<TlsAcceptor>,
    state: ShardState,
    group: Option<GroupStart>,
    snapshots: tokio::sync::mpsc::UnboundedReceiver<SnapshotRequest>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, serve(listener, resp, tls, state, group, snapshots, shutdown))
}

/// Counts a new connection against the shard's limit; false if it is over the limit (and counted
/// as refused).
fn admit(state: &mut ShardState) -> bool {
    if state.stats.clients >= state.connections_max {
        state.stats.clients_refused += 1;
        return false;
    }
    state.stats.clients += 1;
    state.stats.clients_total += 1;
    true
}

/// Accepts on the RESP listener, if the shard has one; otherwise never completes.
async fn accept_resp(
    resp: Option<&(TcpListener, Rc<resp::Settings>)>,
) -> std::io::Result<(TcpStream, Rc<resp::Settings>)> {
    match resp {
        Some((listener, settings)) => listener.accept().await.map(|(stream, _peer)| (stream, Rc::clone(settings))),
        None => std::future::pending().await,
    }
}

async fn serve(
    listener: std::net::TcpListener,
    resp: Option<resp::Listener>,
    tls: Option<TlsAcceptor>,
    mut state: ShardState,
    group: Option<GroupStart>,
    snapshots: tokio::sync::mpsc::UnboundedReceiver<SnapshotRequest>,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let listener = TcpListener::from_std(listener)?;
    let resp = match resp {
        Some(resp) => {
            // A replica creates the default pool when it begins to lead its group, if the group
            // has none yet: only a leader writes.
            if group.is_none() {
                resp::create_pool(&mut state, &resp.settings).map_err(std::io::Error::other)?;
            }
            Some((TcpListener::from_std(resp.listener)?, Rc::new(resp.settings)))
        }
        None => None,
    };
    let index = state.index;
    // The shard's own stop signal: the server's shutdown, or the shard halting itself. Every
    // connection and the checkpoint task watch it.
    let stop = state.stop.subscribe();
    let mut stopping = stop.clone();
    let shard = Rc::new(RefCell::new(state));
    let forward_shutdown = {
        let shard = Rc::clone(&shard);
        tokio::task::spawn_local(async move {
            // A dropped sender means the server is gone: stop as well.
            let _ = shutdown.wait_for(|stop| *stop).await;
            shard.borrow().stop.send_replace(true);
        })
    };
    let mut connections = JoinSet::new();
    let checkpoints = tokio::task::spawn_local(checkpointing::run(Rc::clone(&shard), stop.clone()));
    let durability_task = shard.borrow_mut().durability.as_mut().and_then(|durability| durability.take_task());
    let durability_task = durability_task.map(|task| tokio::task::spawn_local(task.run()));
    let polling = tokio::task::spawn_local(low_load_poll::run(Rc::clone(&shard), stop.clone()));
    let plugins = tokio::task::spawn_local(ado::supervise(Rc::clone(&shard), stop.clone()));
    let submitting = tokio::task::spawn_local(ado::submit_queued_calls(Rc::clone(&shard), stop.clone()));
    let scrapes = tokio::task::spawn_local(metrics::answer_snapshots(Rc::clone(&shard), snapshots));
    let backups = tokio::task::spawn_local(backup::run(Rc::clone(&shard), stop.clone()));
    let index_builds = tokio::task::spawn_local(crate::handler::configure::run(Rc::clone(&shard), stop.clone()));
    let group = group.map(|group| {
        let settings = resp.as_ref().map(|(_, settings)| Rc::clone(settings));
        let on_leading: OnLeading = Box::new(move |state: &mut ShardState| {
            if let Some(settings) = &settings {
                if let Err(error) = resp::create_pool(state, settings) {
                    warn!(shard = state.index, %error, "cannot create the RESP default pool");
                }
            }
        });
        let task = cluster::group::run(
            Rc::clone(&shard),
            group.peers,
            group.settings,
            group.raft_dir,
            on_leading,
            stop.clone(),
        );
        let shard = Rc::clone(&shard);
        tokio::task::spawn_local(async move {
            if let Err(error) = task.await {
                // Without its group the replica can neither follow nor lead: the node stops.
                shard.borrow_mut().halt(format!("its replica of group {index} failed: {error}"));
            }
        })
    });
    loop {
        tokio::select! {
            _ = stopping.wait_for(|stop| *stop) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    if !admit(&mut shard.borrow_mut()) {
                        let max = shard.borrow().connections_max;
                        connections.spawn_local(refuse(stream, refusal(max)));
                        continue;
                    }
                    let (shard, stop, tls) = (Rc::clone(&shard), stop.clone(), tls.clone());
                    connections.spawn_local(async move {
                        if let Some(stream) = handshake(stream, tls.as_ref(), &shard).await {
                            connection::serve(stream, shard, stop).await;
                        }
                    });
                }
                Err(error) => {
                    warn!(shard = index, %error, "accept failed");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                }
            },
            accepted = accept_resp(resp.as_ref()) => match accepted {
                Ok((stream, settings)) => {
                    if !admit(&mut shard.borrow_mut()) {
                        connections.spawn_local(refuse(stream, resp::refusal()));
                        continue;
                    }
                    let id = shard.borrow().stats.clients_total;
                    let (shard, stop, tls) = (Rc::clone(&shard), stop.clone(), tls.clone());
                    connections.spawn_local(async move {
                        if let Some(stream) = handshake(stream, tls.as_ref(), &shard).await {
                            resp::serve(stream, shard, settings, id, stop).await;
                        }
                    });
                }
                Err(error) => {
                    warn!(shard = index, %error, "RESP accept failed");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                }
            },
        }
    }
    drop(listener);
    drop(resp);
    forward_shutdown.abort();
    info!(shard = index, connections = connections.len(), "shard stopping");
    // Connections see the same signal and finish their current batch; the deadline only guards
    // against a bug keeping one alive.
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async { while connections.join_next().await.is_some() {} });
    if drained.await.is_err() {
        warn!(
            shard = index,
            connections = connections.len(),
            "connections still open at the shutdown deadline; closing them"
        );
        connections.shutdown().await;
    }
    // The checkpoint task stops at the same signal; one interrupted mid-way is simply redone.
    let _ = checkpoints.await;
    if let Some(task) = durability_task {
        task.abort();
    }
    let _ = polling.await;
    let _ = plugins.await;
    let _ = submitting.await;
    scrapes.abort();
    let _ = backups.await;
    let _ = index_builds.await;
    if let Some(group) = group {
        let _ = group.await;
    }
    ado::stop_hosts(&shard).await;
    if let Some(durability) = shard.borrow_mut().durability.as_mut() {
        // Async writes acknowledged before the stop become durable now (a failed log takes none).
        durability.stop();
    }
    let halted = shard.borrow().halted.clone();
    match halted {
        Some(reason) => Err(std::io::Error::other(format!("shard {index} stopped itself: {reason}"))),
        None => Ok(()),
    }
}

/// A new client's stream, after its TLS handshake when the shard speaks TLS; `None` (and the
/// client no longer counted) if the handshake fails or times out.
async fn handshake(
    stream: TcpStream,
    tls: Option<&TlsAcceptor>,
    shard: &Rc<RefCell<ShardState>>,
) -> Option<ClientStream> {
    let peer = stream.peer_addr().ok();
    let timeout = shard.borrow().admission.handshake_timeout;
    match tls::accept(stream, tls, timeout).await {
        Ok(stream) => Some(stream),
        Err(error) => {
            debug!(?peer, %error, "client connection failed before it was served");
            shard.borrow_mut().stats.clients -= 1;
            None
        }
    }
}

/// The native protocol's answer to a client over the connection limit.
fn refusal(max: u64) -> BytesMut {
    let mut frame = BytesMut::new();
    let message = format!("this shard already serves {max} connections, its configured maximum");
    Response::Error { code: ErrorCode::TooManyConnections, message: &message }.encode(0, &mut frame);
    frame
}

/// Tells a client over the connection limit why it is being turned away (`reply`, in its protocol),
/// then closes. The client has usually sent its hello already; closing a socket with unread input
/// makes the kernel send a reset that can destroy the error frame in flight, so the input is
/// drained until the client closes (or a timeout passes) before the socket is dropped.
async fn refuse(mut stream: TcpStream, reply: BytesMut) {
    // Every failure below means the client is already gone; there is nobody left to tell.
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
        stream.write_all(&reply).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    })
    .await;
}
