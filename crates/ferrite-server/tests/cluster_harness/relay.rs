//! Userspace TCP relays: the loopback network's stand-in for wires the harness can cut.
//!
//! Each listener of each node has a relay on the node's advertised address, forwarding to the
//! node's real listener. A relay tells who connects by the source address: a node's own loopback
//! address means that node, anything else (the test) means a client. While [`Faults`] says the
//! link between the two is cut, the relay forwards nothing in either direction and holds new
//! connections unanswered; bytes already read wait in the relay. Healing lets them through in
//! order, so a partition delays a TCP stream, as a real one shorter than TCP's give-up time does,
//! and never corrupts it.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::faults::Faults;

/// How often a relay thread blocked on a socket or a cut looks at whether it should end.
const POLL: Duration = Duration::from_millis(100);

/// How long a relay waits to reach a node's real listener before hanging up on its client.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// One relayed listener: where clients connect, where the node listens, and which node.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    pub front: SocketAddr,
    pub upstream: SocketAddr,
    pub node: usize,
    /// A peer (node-to-node) listener: a connection from something that is not a node is worth
    /// a warning there, as faults cannot be applied to it.
    pub peer: bool,
}

/// The relays of one cluster; they stop (and their threads are joined) when dropped.
#[derive(Debug)]
pub struct Relays {
    shared: Arc<Shared>,
    fronts: Vec<SocketAddr>,
    listeners: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    faults: Mutex<Faults>,
    /// Signalled whenever the faults change or the relays close.
    changed: Condvar,
    closing: AtomicBool,
    /// Each node's own address, by index: how a relay knows who connected.
    sources: Vec<IpAddr>,
    /// The first peer connection whose source was not a node's address.
    unidentified: Mutex<Option<String>>,
    connections: Mutex<Vec<JoinHandle<()>>>,
}

impl Relays {
    /// Starts one relay per route on its already bound `listener`.
    pub fn start(routes: Vec<(Route, TcpListener)>, sources: Vec<IpAddr>) -> Relays {
        let shared = Arc::new(Shared {
            faults: Mutex::new(Faults::default()),
            changed: Condvar::new(),
            closing: AtomicBool::new(false),
            sources,
            unidentified: Mutex::new(None),
            connections: Mutex::new(Vec::new()),
        });
        let fronts = routes.iter().map(|(route, _)| route.front).collect();
        let listeners = routes
            .into_iter()
            .map(|(route, listener)| {
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || accept(&shared, &listener, route))
            })
            .collect();
        Relays { shared, fronts, listeners }
    }

    pub fn apply(&self, faults: &Faults) -> Result<(), String> {
        if !faults.is_empty() {
            if let Some(what) = self.shared.unidentified.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
                return Err(format!(
                    "the loopback network cannot cut links: {what}; a node must bind its outgoing peer \
                     connections to its own address (the --peer-listen IP) for its relays to know it"
                ));
            }
        }
        *self.shared.faults.lock().unwrap_or_else(PoisonError::into_inner) = faults.clone();
        self.shared.changed.notify_all();
        Ok(())
    }
}

impl Drop for Relays {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        // Wakes each accept loop, which then sees `closing`.
        for front in &self.fronts {
            let _ = TcpStream::connect_timeout(front, CONNECT_TIMEOUT);
        }
        for listener in self.listeners.drain(..) {
            let _ = listener.join();
        }
        let connections = std::mem::take(&mut *self.shared.connections.lock().unwrap_or_else(PoisonError::into_inner));
        for connection in connections {
            let _ = connection.join();
        }
    }
}

fn accept(shared: &Arc<Shared>, listener: &TcpListener, route: Route) {
    for client in listener.incoming() {
        if shared.closing.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else {
            // Out of descriptors, say: give the process a moment rather than spin.
            std::thread::sleep(POLL);
            continue;
        };
        let Ok(source) = client.peer_addr().map(|address| address.ip()) else { continue };
        let from = shared.sources.iter().position(|node| *node == source);
        if from.is_none() && route.peer {
            let mut unidentified = shared.unidentified.lock().unwrap_or_else(PoisonError::into_inner);
            if unidentified.is_none() {
                let what = format!("node {}'s peer listener {} was dialled from {source}", route.node, route.front);
                eprintln!("cluster harness: {what}, not from a node's own address");
                *unidentified = Some(what);
            }
        }
        let worker = Arc::clone(shared);
        let connection = std::thread::spawn(move || relay(&worker, client, from, route));
        let mut connections = shared.connections.lock().unwrap_or_else(PoisonError::into_inner);
        connections.retain(|handle| !handle.is_finished());
        connections.push(connection);
    }
}

/// Forwards one client connection to the node once (and while) the link between them is whole.
fn relay(shared: &Shared, client: TcpStream, from: Option<usize>, route: Route) {
    if !shared.wait_open(from, route.node) {
        return;
    }
    let Ok(node) = TcpStream::connect_timeout(&route.upstream, CONNECT_TIMEOUT) else { return };
    let (Ok(client_back), Ok(node_back)) = (client.try_clone(), node.try_clone()) else { return };
    std::thread::scope(|scope| {
        scope.spawn(|| pump(shared, node_back, client_back, from, route.node));
        pump(shared, client, node, from, route.node);
    });
}

/// Copies `source` to `sink` until either ends, holding the bytes while the link is cut.
fn pump(shared: &Shared, mut source: TcpStream, mut sink: TcpStream, from: Option<usize>, to: usize) {
    let mut buffer = [0u8; 16 * 1024];
    if source.set_read_timeout(Some(POLL)).is_ok() && sink.set_write_timeout(Some(POLL)).is_ok() {
        'copy: while shared.wait_open(from, to) {
            let read = match source.read(&mut buffer) {
                Ok(0) => {
                    // Half-close: the other direction may still have something to say.
                    let _ = sink.shutdown(Shutdown::Write);
                    return;
                }
                Ok(read) => read,
                Err(e) if is_timeout(&e) => continue,
                Err(_) => break,
            };
            let mut written = 0;
            while written < read {
                if !shared.wait_open(from, to) {
                    break 'copy;
                }
                match sink.write(&buffer[written..read]) {
                    Ok(0) => break 'copy,
                    Ok(n) => written += n,
                    Err(e) if is_timeout(&e) => {}
                    Err(_) => break 'copy,
                }
            }
        }
    }
    let _ = source.shutdown(Shutdown::Both);
    let _ = sink.shutdown(Shutdown::Both);
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted)
}

impl Shared {
    /// Waits while the link between `from` and `to` is cut; `false` if the relays are closing.
    fn wait_open(&self, from: Option<usize>, to: usize) -> bool {
        let mut faults = self.faults.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.closing.load(Ordering::SeqCst) {
                return false;
            }
            if !faults.blocks(from, to) {
                return true;
            }
            faults = self.changed.wait_timeout(faults, POLL).unwrap_or_else(PoisonError::into_inner).0;
        }
    }
}
