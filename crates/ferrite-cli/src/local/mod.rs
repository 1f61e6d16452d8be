//! `ferrite cluster local`: a cluster of N `ferrite-server` nodes on loopback, for trying and
//! testing (`docs/cluster.md`). It starts the nodes, initializes the cluster as `cluster init`
//! does, prints where each node listens, and then watches them until Ctrl-C or SIGTERM, when it
//! stops them all. A node that exits is reported and left alone: a test that kills one starts it
//! again from its command line.

mod layout;
mod node;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use ferrite_client::{blocking, ClientOptions};
use tokio::signal::unix::{signal, SignalKind};

use crate::args::LocalArgs;
use crate::cluster::{self, Nodes};
use layout::Layout;
use node::Node;

/// How long a node may take to answer after it was started (its recovery included).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// How long every group may take to elect its leader once the cluster is initialized.
const ELECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the nodes have to stop after SIGTERM before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// How often the nodes are looked at while waiting for them.
const POLL: Duration = Duration::from_millis(100);

pub fn main(args: &LocalArgs) -> ExitCode {
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &LocalArgs) -> Result<(), String> {
    // Taken before any node starts, so a Ctrl-C at any time stops what was started.
    let stop = stop_requests()?;
    let server = server_binary()?;
    fs::create_dir_all(&args.data_dir)
        .map_err(|error| format!("cannot create {}: {error}", args.data_dir.display()))?;
    // Absolute, so each node's command line starts it from anywhere.
    let dir = args.data_dir.canonicalize().map_err(|error| format!("{}: {error}", args.data_dir.display()))?;
    let kept = Layout::kept(&dir, args.nodes, args.shards)?;
    let again = kept.is_some();
    let layout = match kept {
        Some(layout) => layout,
        None => Layout::choose(args.nodes, args.shards)?,
    };
    if let Some(in_use) = layout.port_in_use() {
        let hint = if again { "; is this cluster running already?" } else { "" };
        return Err(format!("{in_use}{hint}"));
    }
    eprintln!(
        "starting {} node(s) of {} shard(s) each in {} ({})...",
        args.nodes,
        args.shards,
        dir.display(),
        server.display()
    );
    let mut cluster = Cluster { nodes: Vec::new(), reported: Vec::new() };
    for ports in &layout.nodes {
        cluster.nodes.push(Node::start(&server, &dir, *ports, args.shards)?);
        cluster.reported.push(false);
    }
    let options = ClientOptions {
        client_name: concat!("ferrite-cli/", env!("CARGO_PKG_VERSION"), " cluster local").to_owned(),
        ..ClientOptions::default()
    };
    if !cluster.wait_ready(&options, &stop)? {
        return Ok(());
    }
    if !again {
        layout.keep(&dir)?;
    }
    eprintln!("initializing the cluster...");
    let addresses: Vec<String> = cluster.nodes.iter().map(Node::native).collect();
    let initialized = cluster::init(&Nodes::new(&options, true), &addresses).map_err(|error| error.0)?;
    if let crate::output::Human::Text(text) = &initialized.human {
        eprintln!("{text}");
    }
    eprintln!("waiting for every group to elect a leader...");
    if let Err(why) = wait_for_leaders(&addresses[0], &options) {
        eprintln!("warning: {why}; the nodes keep trying (`ferrite --addr {} cluster status`)", addresses[0]);
    }
    cluster.announce(&dir);
    cluster.watch(&stop)
}

/// The nodes `cluster local` started, and which of their exits it has told of.
#[derive(Debug)]
struct Cluster {
    nodes: Vec<Node>,
    reported: Vec<bool>,
}

impl Cluster {
    /// Waits until every node answers as the node it should be; `false` if a stop was asked for
    /// meanwhile (the nodes are stopped then). A node that exits or does not answer in time is
    /// an error that shows the end of its log.
    fn wait_ready(&mut self, options: &ClientOptions, stop: &Receiver<&'static str>) -> Result<bool, String> {
        let deadline = Instant::now() + START_TIMEOUT;
        for index in 0..self.nodes.len() {
            loop {
                if let Ok(signal) = stop.try_recv() {
                    eprintln!("{signal}: stopping the nodes before they were all ready");
                    self.stop(stop);
                    return Ok(false);
                }
                let node = &mut self.nodes[index];
                let id = node.ports.id;
                if let Some(status) = node.exited() {
                    return Err(format!(
                        "node {id} exited while starting ({status}); the end of its log, {}:\n{}",
                        node.log().display(),
                        node.log_tail()
                    ));
                }
                if let Some(answered) = answering_node(&node.native(), options) {
                    if answered != u64::from(id) {
                        return Err(format!(
                            "the server at {} is node {answered}, not node {id}: is another cluster on these ports?",
                            node.native()
                        ));
                    }
                    eprintln!("node {id} ready (pid {})", node.pid());
                    break;
                }
                if Instant::now() > deadline {
                    return Err(format!(
                        "node {id} did not answer at {} within {} s; the end of its log, {}:\n{}",
                        node.native(),
                        START_TIMEOUT.as_secs(),
                        node.log().display(),
                        node.log_tail()
                    ));
                }
                std::thread::sleep(POLL);
            }
        }
        Ok(true)
    }

    /// Prints one line per node, how to try the cluster, and where its files are.
    fn announce(&self, dir: &Path) {
        for node in &self.nodes {
            println!("{} pid {}", node.ports, node.pid());
        }
        let first = &self.nodes[0];
        let last = &self.nodes[self.nodes.len() - 1];
        println!(
            "try: ferrite --addr {} pool create demo && ferrite --addr {} put demo hello world && redis-cli -c -p {} \
             set greeting hello",
            first.native(),
            last.native(),
            first.ports.resp
        );
        let pattern = dir.join("node-N");
        println!(
            "logs: {}; command lines, to start a node again: {}",
            pattern.join("server.log").display(),
            pattern.join("command").display()
        );
        println!("Ctrl-C stops every node.");
    }

    /// Tells of each node that exits, until a stop is asked for (then stops every node) or no
    /// node is left (an error).
    fn watch(&mut self, stop: &Receiver<&'static str>) -> Result<(), String> {
        loop {
            match stop.recv_timeout(POLL) {
                Ok(signal) => {
                    println!("{signal}: stopping every node...");
                    self.stop(stop);
                    return Ok(());
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err("signals can no longer be received".to_owned()),
            }
            for (node, reported) in self.nodes.iter_mut().zip(&mut self.reported) {
                if let Some(status) = node.exited().filter(|_| !*reported) {
                    *reported = true;
                    println!(
                        "node {} exited ({status}); the others keep running. Its command line (in {}):\n  {}",
                        node.ports.id,
                        node.dir().join("command").display(),
                        node.command_line()
                    );
                }
            }
            if self.reported.iter().all(|reported| *reported) {
                return Err("every node has exited".to_owned());
            }
        }
    }

    /// Stops every node, a second Ctrl-C hurrying it, and tells how each ended.
    fn stop(&mut self, stop: &Receiver<&'static str>) {
        self.halt(|| stop.try_recv().ok().map(|signal| format!("{signal} again")));
        for (node, reported) in self.nodes.iter_mut().zip(&mut self.reported) {
            if !*reported {
                *reported = true;
                let status = node.exited().map_or_else(|| "not reaped".to_owned(), |status| status.to_string());
                println!("node {} stopped ({status})", node.ports.id);
            }
        }
    }

    /// SIGTERM to every node still running, then SIGKILL to those still running after
    /// [`STOP_GRACE`], or as soon as `hurry` says why.
    fn halt(&mut self, mut hurry: impl FnMut() -> Option<String>) {
        for node in &mut self.nodes {
            node.terminate();
        }
        let deadline = Instant::now() + STOP_GRACE;
        while self.nodes.iter_mut().any(|node| node.exited().is_none()) {
            let why = hurry().or_else(|| {
                (Instant::now() > deadline).then(|| format!("still running {} s after SIGTERM", STOP_GRACE.as_secs()))
            });
            if let Some(why) = why {
                for node in &mut self.nodes {
                    if node.exited().is_none() {
                        eprintln!("node {}: {why}, killing it", node.ports.id);
                        node.kill();
                    }
                }
                return;
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Cluster {
    /// A run that fails after starting nodes stops them: none is left running behind an error.
    fn drop(&mut self) {
        self.halt(|| None);
    }
}

/// The node id of the server answering at `address`, if one answers.
fn answering_node(address: &str, options: &ClientOptions) -> Option<u64> {
    let session = blocking::Session::connect_with(address, options.clone()).ok()?;
    session.node_info().ok().map(|info| info.node.node_id)
}

/// Waits until the map of the node at `address` names a leader for every group.
fn wait_for_leaders(address: &str, options: &ClientOptions) -> Result<(), String> {
    let deadline = Instant::now() + ELECTION_TIMEOUT;
    let session = blocking::Session::connect_with(address, options.clone()).map_err(|error| error.to_string())?;
    loop {
        let map = session.cluster_map().map_err(|error| error.to_string())?;
        let leaderless: Vec<String> = (0..map.groups.len())
            .filter(|group| map.groups[*group].leader == 0)
            .map(|group| group.to_string())
            .collect();
        if leaderless.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "no leader elected within {} s in group(s) {}",
                ELECTION_TIMEOUT.as_secs(),
                leaderless.join(", ")
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// The server to start: the one beside this `ferrite` (installed or built together), else the
/// first on PATH.
fn server_binary() -> Result<PathBuf, String> {
    let name = format!("ferrite-server{}", std::env::consts::EXE_SUFFIX);
    let exe = std::env::current_exe().map_err(|error| format!("cannot tell where this ferrite is: {error}"))?;
    let beside = exe.with_file_name(&name);
    if beside.is_file() {
        return Ok(beside);
    }
    let on_path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join(&name)).find(|path| path.is_file()));
    match on_path {
        Some(path) => path.canonicalize().map_err(|error| format!("{}: {error}", path.display())),
        None => Err(format!(
            "{name} is neither beside this ferrite ({}) nor on PATH: install it there (from a checkout: cargo \
             build -p ferrite-server)",
            beside.display()
        )),
    }
}

/// The stop requests (Ctrl-C, SIGTERM, a hang-up), each named, as they arrive; received on a
/// thread of its own, so the rest of `cluster local` can block.
fn stop_requests() -> Result<Receiver<&'static str>, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|error| format!("cannot watch for signals: {error}"))?;
    let (mut interrupt, mut terminate, mut hangup) = runtime
        .block_on(async {
            Ok::<_, std::io::Error>((
                signal(SignalKind::interrupt())?,
                signal(SignalKind::terminate())?,
                signal(SignalKind::hangup())?,
            ))
        })
        .map_err(|error| format!("cannot watch for signals: {error}"))?;
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        runtime.block_on(async move {
            loop {
                let name = tokio::select! {
                    _ = interrupt.recv() => "SIGINT",
                    _ = terminate.recv() => "SIGTERM",
                    _ = hangup.recv() => "SIGHUP",
                };
                if sender.send(name).is_err() {
                    return;
                }
            }
        });
    });
    Ok(receiver)
}
