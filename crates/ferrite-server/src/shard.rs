//! A shard: one thread, one single-threaded event loop, one listening port, its own pools.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use ferrite_proto::{ErrorCode, Response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{info, warn};

use crate::connection;
use crate::handler::ShardState;

/// How long a refused connection gets to receive its `too_many_connections` error and hang up.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a stopping shard waits for its connections to finish their current batch.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Pause after a failed accept (for example, out of file descriptors) so the loop does not spin.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// Runs the shard's event loop on the current thread until `shutdown` turns true (or its sender is
/// dropped), then waits for every connection to finish its current batch.
pub(crate) fn run(
    listener: std::net::TcpListener,
    state: ShardState,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, serve(listener, state, shutdown))
}

async fn serve(
    listener: std::net::TcpListener,
    state: ShardState,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let listener = TcpListener::from_std(listener)?;
    let index = state.index;
    let shard = Rc::new(RefCell::new(state));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.changed() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let mut state = shard.borrow_mut();
                    if state.stats.clients >= state.connections_max {
                        state.stats.clients_refused += 1;
                        let max = state.connections_max;
                        connections.spawn_local(refuse(stream, max));
                        continue;
                    }
                    state.stats.clients += 1;
                    state.stats.clients_total += 1;
                    connections.spawn_local(connection::serve(stream, Rc::clone(&shard), shutdown.clone()));
                }
                Err(error) => {
                    warn!(shard = index, %error, "accept failed");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                }
            },
        }
    }
    drop(listener);
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
    Ok(())
}

/// Tells a client over the connection limit why it is being turned away, then closes. The client
/// has usually sent its hello already; closing a socket with unread input makes the kernel send a
/// reset that can destroy the error frame in flight, so the input is drained until the client
/// closes (or a timeout passes) before the socket is dropped.
async fn refuse(mut stream: TcpStream, max: u64) {
    let mut frame = BytesMut::new();
    let message = format!("this shard already serves {max} connections, its configured maximum");
    Response::Error { code: ErrorCode::TooManyConnections, message: &message }.encode(0, &mut frame);
    // Every failure below means the client is already gone; there is nobody left to tell.
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
        stream.write_all(&frame).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 1024];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    })
    .await;
}
