//! Faults other than a leader's crash, each under concurrent load, with real processes on a real
//! network (`cluster_harness`): a paused leader, a leader cut off from the majority, a follower
//! that lost its disk (with a kill in the middle of the snapshot it installs), a follower whose
//! disk fills, every node killed at once, five nodes with two and three of them dead, and a node
//! killed while it is being added. After each, the cluster must serve again,
//! every acknowledged write must be there and every key's history linearizable
//! (`ferrite-history`): a deposed leader that acknowledged a write it could not commit, a split
//! brain or a replica that came back without the data shows up there.
//!
//! The tests of this file run one at a time ([`serial`]): two three-node clusters at once on two
//! cores starve each other's elections.

mod cluster_common;
mod cluster_harness;
mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cluster_common::{
    assert_node_serves, bulk_served, cli_at, config_file, create_pool, form, leader, put_bulk, resp_line, serial,
    status, wait_caught_up, wait_for_leader, wait_in_sync, Load, LoadSpec, LEADER_TIMEOUT,
};
use cluster_harness::{Cluster, ClusterSpec};

/// Longer than a dead leader's lease and an election timeout (600 ms by default), with room for a
/// slow machine:
/// the rest of the group must have elected another leader by then.
const PAST_ELECTION: Duration = Duration::from_secs(2);

/// How many writes the load must get acknowledged to count as serving again.
const SERVING: u64 = 20;

/// Starts a formed cluster of `spec` with the load's pool and the load running.
fn loaded(spec: ClusterSpec) -> (Cluster, Load) {
    let cluster = Cluster::start(spec);
    form(&cluster);
    create_pool(&cluster);
    let load = Load::start(&cluster, LoadSpec::default());
    load.wait_for_acks(SERVING, LEADER_TIMEOUT, "before the fault");
    (cluster, load)
}

fn all(cluster: &Cluster) -> Vec<usize> {
    (0..cluster.node_count()).collect()
}

fn others(cluster: &Cluster, except: usize) -> Vec<usize> {
    all(cluster).into_iter().filter(|&index| index != except).collect()
}

/// SIGSTOP freezes the leader past the election timeout: the others elect a new leader and serve
/// the load; after SIGCONT the old leader finds a newer term, must acknowledge nothing it could
/// not commit (the history would show the write lost), and rejoins as a follower.
#[test]
fn a_paused_leader_acknowledges_nothing_after_it_lost_leadership() {
    let _serial = serial();
    let (cluster, load) = loaded(ClusterSpec::default());
    let paused = wait_for_leader(&cluster, 0, &all(&cluster), LEADER_TIMEOUT);
    cluster.node(paused).stop();
    std::thread::sleep(PAST_ELECTION);
    let next = wait_for_leader(&cluster, 0, &others(&cluster, paused), LEADER_TIMEOUT);
    load.wait_for_acks(SERVING, LEADER_TIMEOUT, "by the new leader while the old one is paused");
    cluster.node(paused).cont();
    // It hears of the newer term and follows (restarting itself to drop what it held).
    wait_caught_up(&cluster, 0, paused, LEADER_TIMEOUT);
    let status = status(&cluster, paused, 0).expect("the resumed node answers");
    assert_ne!(status.role, ferrite_client::RaftRole::Leader, "two leaders: {status:?}");
    load.wait_for_acks(SERVING, LEADER_TIMEOUT, "after the old leader resumed");
    eprintln!("node {} paused, node {} led meanwhile", paused + 1, next + 1);
    load.finish_and_check();
}

/// The leader is cut off from the two others (the test still reaches every node): the majority
/// elects a new leader and serves; the old leader acknowledges no write (a RESP `SET` sent to it
/// is redirected or unanswered), and what it may have executed is gone once the partition heals.
#[test]
fn a_leader_cut_off_from_the_majority_acknowledges_nothing() {
    let _serial = serial();
    let (cluster, load) = loaded(ClusterSpec::default());
    let cut = wait_for_leader(&cluster, 0, &all(&cluster), LEADER_TIMEOUT);
    let majority = others(&cluster, cut);
    cluster.partition(&[&[cut], &majority]);
    let next = wait_for_leader(&cluster, 0, &majority, LEADER_TIMEOUT);
    load.wait_for_acks(SERVING, LEADER_TIMEOUT, "by the majority's leader");

    let minority_write = resp_line(cluster.node(cut).resp_addr(), &["SET", "minority-key", "minority-value"]);
    assert!(
        !minority_write.as_deref().is_some_and(|reply| reply.starts_with('+')),
        "the cut-off node {} acknowledged a write: {minority_write:?}",
        cut + 1
    );
    let minority_status = status(&cluster, cut, 0);
    eprintln!("cut-off node {} answered SET with {minority_write:?}; its status: {minority_status:?}", cut + 1);

    cluster.heal_all();
    wait_caught_up(&cluster, 0, cut, LEADER_TIMEOUT);
    load.wait_for_acks(SERVING, LEADER_TIMEOUT, "after the partition healed");
    let leader_now = wait_for_leader(&cluster, 0, &all(&cluster), LEADER_TIMEOUT);
    let read = resp_line(cluster.node(leader_now).resp_addr(), &["GET", "minority-key"]);
    assert_eq!(
        read.as_deref(),
        Some("$-1"),
        "the minority's write is visible after the heal (leader {})",
        leader_now + 1
    );
    eprintln!("node {} cut off, node {} led the majority", cut + 1, next + 1);
    load.finish_and_check();
}

/// Checkpoints every second and few log entries kept behind them, so that a replica that lost
/// its disk is sent a snapshot within seconds of load.
fn snapshotting() -> ClusterSpec {
    let config = config_file("[durability]\ncheckpoint_interval_secs = 1\n[cluster]\nlog_kept_entries = 20\n");
    ClusterSpec { extra_args: vec!["--config".to_owned(), config.display().to_string()], ..ClusterSpec::default() }
}

/// Whether a snapshot is being received somewhere under `dir` (an `incoming-*` directory).
fn receiving_snapshot(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|entry| {
        let path = entry.path();
        entry.file_name().to_string_lossy().starts_with("incoming-") || (path.is_dir() && receiving_snapshot(&path))
    })
}

/// A follower is killed and its data directory wiped; while the load goes on the leader
/// checkpoints and purges its log, so the empty follower, started again, must catch up by a
/// snapshot. It is killed once more while receiving it (when that moment is caught), started
/// again, and must end up with everything: in sync (lag 0), and serving every key's final value
/// once it is made the leader, the large values among them too (which the leader's checkpoints
/// keep in its log, and its snapshot must carry in a page file).
#[test]
fn a_follower_that_lost_its_disk_catches_up_by_snapshot() {
    const LARGE: (usize, usize) = (8, 200 * 1024);
    let _serial = serial();
    let (cluster, load) = loaded(snapshotting());
    let leader_at_start = wait_for_leader(&cluster, 0, &all(&cluster), LEADER_TIMEOUT);
    assert_eq!(put_bulk(&cluster, leader_at_start, LARGE.0, LARGE.1, LEADER_TIMEOUT), LARGE.0, "large values stored");
    let wiped = (leader_at_start + 1) % cluster.node_count();
    let node = cluster.node(wiped);
    node.kill9();
    std::fs::remove_dir_all(node.data_dir()).expect("the follower's data directory is removed");
    // Enough writes that the log the follower would need is purged behind a snapshot.
    load.wait_for_acks(300, LEADER_TIMEOUT * 3, "while the follower is down");
    let current = wait_for_leader(&cluster, 0, &others(&cluster, wiped), LEADER_TIMEOUT);
    let snapshot = wait_snapshot(&cluster, current);
    eprintln!("leader node {} has a snapshot up to {snapshot}", current + 1);

    node.restart();
    let caught = Instant::now();
    let mut interrupted = false;
    while caught.elapsed() < LEADER_TIMEOUT && !interrupted {
        if receiving_snapshot(&node.data_dir()) {
            node.kill9();
            node.restart();
            interrupted = true;
        }
        if status(&cluster, wiped, 0).is_some_and(|s| s.applied >= snapshot) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    eprintln!("the snapshot's reception was {}interrupted by a kill", if interrupted { "" } else { "not " });
    wait_caught_up(&cluster, 0, wiped, LEADER_TIMEOUT * 2);
    let replica = status(&cluster, wiped, 0).expect("the wiped node answers");
    assert!(replica.snapshot > 0, "the wiped node caught up without a snapshot: {replica:?}");
    load.wait_for_acks(SERVING, LEADER_TIMEOUT, "after the wiped follower came back");
    let finals = load.finish_and_check();

    let ids: Vec<u64> = cluster.nodes().map(|node| node.node_id()).collect();
    wait_in_sync(&cluster, 0, &ids, LEADER_TIMEOUT);
    let current = wait_for_leader(&cluster, 0, &all(&cluster), LEADER_TIMEOUT);
    let to = node.node_id().to_string();
    let run = cli_at(cluster.node(current).native_addr(), &["cluster", "transfer-leader", "--group", "0", "--to", &to]);
    assert!(run.success, "transfer-leader to the wiped node: {run:?}");
    assert_eq!(wait_for_leader(&cluster, 0, &all(&cluster), LEADER_TIMEOUT), wiped);
    assert_node_serves(&cluster, wiped, &finals);
    assert_eq!(
        bulk_served(&cluster, wiped, LARGE.0, LARGE.1, LEADER_TIMEOUT),
        LARGE.0,
        "the large values came with the snapshot"
    );
}

/// Waits until node `index` reports a snapshot, and returns the index it covers.
fn wait_snapshot(cluster: &Cluster, index: usize) -> u64 {
    common::wait_until("the leader's first snapshot", LEADER_TIMEOUT, || {
        status(cluster, index, 0).map(|s| s.snapshot).filter(|snapshot| *snapshot > 0)
    })
}

/// Every node is killed at once, then all are started again: the cluster elects a leader and
/// serves, and every acknowledged write is still there.
#[test]
fn every_node_killed_at_once_loses_nothing() {
    let _serial = serial();
    let (cluster, load) = loaded(ClusterSpec::default());
    for round in 0..2 {
        for node in cluster.nodes() {
            node.kill9();
        }
        let killed = Instant::now();
        for node in cluster.nodes() {
            node.restart();
        }
        let next = wait_for_leader(&cluster, 0, &all(&cluster), LEADER_TIMEOUT);
        load.wait_for_acks(SERVING, LEADER_TIMEOUT, "after every node restarted");
        eprintln!("round {round}: node {} leads {} ms after the kill", next + 1, killed.elapsed().as_millis());
    }
    load.finish_and_check();
}

/// Five nodes: the leader and a follower are killed at once; the three left are a majority,
/// elect a leader and serve the load. A third node killed leaves two, a minority: nothing more
/// is acknowledged until one of the dead nodes is back. Nothing acknowledged is lost.
#[test]
fn five_nodes_serve_with_two_dead_and_not_with_three() {
    let _serial = serial();
    let (cluster, load) = loaded(ClusterSpec { nodes: 5, ..ClusterSpec::default() });
    let first = wait_for_leader(&cluster, 0, &all(&cluster), LEADER_TIMEOUT);
    let follower = (first + 1) % cluster.node_count();
    cluster.node(first).kill9();
    cluster.node(follower).kill9();
    let alive: Vec<usize> = all(&cluster).into_iter().filter(|index| ![first, follower].contains(index)).collect();
    let next = wait_for_leader(&cluster, 0, &alive, LEADER_TIMEOUT);
    load.wait_for_acks(SERVING, LEADER_TIMEOUT, "with two of five nodes dead");
    // A third death: two of five cannot commit.
    cluster.node(next).kill9();
    std::thread::sleep(PAST_ELECTION);
    let before = load.acknowledged();
    std::thread::sleep(PAST_ELECTION);
    assert_eq!(load.acknowledged(), before, "a minority of two acknowledged writes");
    cluster.node(first).restart();
    load.wait_for_acks(SERVING, LEADER_TIMEOUT, "with three of five nodes alive again");
    cluster.node(follower).restart();
    cluster.node(next).restart();
    load.finish_and_check();
}

/// Mounts a tmpfs of `bytes` over `dir` (holding a copy of what `dir` held); `None` where this
/// process may not mount (then the test says so and passes without running).
fn small_disk_over(dir: &Path, bytes: u64) -> Option<std::path::PathBuf> {
    let disk = dir.with_extension("small-disk");
    std::fs::create_dir_all(&disk).ok()?;
    let mount = |args: &[&str]| std::process::Command::new("mount").args(args).status().is_ok_and(|s| s.success());
    if !mount(&["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs", &disk.display().to_string()]) {
        return None;
    }
    let copied = std::process::Command::new("cp")
        .args(["-a", &format!("{}/.", dir.display()), &disk.display().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(copied, "the node's data is copied onto the small disk");
    assert!(mount(&["--bind", &disk.display().to_string(), &dir.display().to_string()]), "the small disk is bound");
    Some(disk)
}

/// Unmounts what [`small_disk_over`] mounted, whatever the test's outcome.
struct SmallDiskMounts(Vec<std::path::PathBuf>);

impl Drop for SmallDiskMounts {
    fn drop(&mut self) {
        for path in self.0.iter().rev() {
            let _ = std::process::Command::new("umount").arg("-l").arg(path).status();
        }
    }
}

/// A follower's disk fills under load: the group goes on with the leader and the other
/// follower; once the follower's disk has room again and it is started again, it catches up,
/// and nothing acknowledged is lost.
#[test]
fn a_follower_whose_disk_fills_is_left_behind_and_catches_up() {
    let _serial = serial();
    // Small log segments (values up to 256 KiB): the log needs a new one soon after the disk is
    // full.
    let config = config_file("[limits]\nvalue_bytes_max = 262144\n[durability]\nwal_segment_bytes = 2097152\n");
    let spec =
        ClusterSpec { extra_args: vec!["--config".into(), config.display().to_string()], ..ClusterSpec::default() };
    let (cluster, load) = loaded(spec);
    let leader_at_start = wait_for_leader(&cluster, 0, &all(&cluster), LEADER_TIMEOUT);
    let full = (leader_at_start + 1) % cluster.node_count();
    let node = cluster.node(full);
    node.kill9();
    let data = node.data_dir();
    let Some(disk) = small_disk_over(&data, 256 << 20) else {
        eprintln!("skipping: this process may not mount a tmpfs");
        return;
    };
    let _mounts = SmallDiskMounts(vec![data.clone(), disk.clone()]);
    node.restart();
    // Ballast takes all the room but a little: the log fills its segment, then finds no room for
    // the next.
    let available = std::process::Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(&disk)
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok()?.lines().nth(1)?.trim().parse::<u64>().ok())
        .expect("the small disk's free room");
    let ballast = vec![0u8; usize::try_from(available - (256 << 10)).expect("a size")];
    std::fs::write(disk.join("ballast"), ballast).expect("the ballast is written");
    // The load fills the follower's disk while the other two go on acknowledging writes.
    let filled = Instant::now() + Duration::from_secs(60);
    loop {
        // Large values fill the follower's log segments (and its spare) quickly.
        let stored = put_bulk(&cluster, leader_at_start, 16, 200 << 10, LEADER_TIMEOUT);
        assert!(stored > 0, "no large value was stored while the follower's disk fills");
        let stderr = node.stderr();
        if let Some(line) = stderr.lines().find(|line| line.contains("No space left on device")) {
            eprintln!("the follower's disk is full: {line}");
            break;
        }
        assert!(Instant::now() < filled, "the follower's disk did not fill within 60 s");
    }
    load.wait_for_acks(SERVING, LEADER_TIMEOUT, "with the follower's disk full");
    // It waits before it tries again: no restart loop while the disk stays full.
    let starts = node.stderr().matches("replica recovered").count();
    std::thread::sleep(Duration::from_secs(3));
    let restarted = node.stderr().matches("replica recovered").count() - starts;
    assert!(restarted <= 1, "a follower with a full disk restarted {restarted} times in 3 s");
    // Room again, and the follower started again: it catches up.
    let grown = std::process::Command::new("mount")
        .args(["-o", "remount,size=1g", &disk.display().to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(grown, "the small disk is given room again");
    if node.is_running() {
        node.kill9();
    }
    node.restart();
    wait_caught_up(&cluster, 0, full, LEADER_TIMEOUT);
    load.finish_and_check();
    cluster.node(full).kill9();
}

/// A fourth node is added (`cluster add-node`) under load and killed while the change runs; the
/// command fails or not, the node is started again and the add sent again must finish: four
/// voters, the new one in sync, nothing acknowledged lost.
#[test]
fn a_node_killed_while_it_is_added_joins_when_added_again() {
    let _serial = serial();
    let cluster = Cluster::start(ClusterSpec { nodes: 4, ..ClusterSpec::default() });
    cluster_common::init(&cluster, &[0, 1, 2]);
    wait_for_leader(&cluster, 0, &[0, 1, 2], LEADER_TIMEOUT);
    create_pool(&cluster);
    let load = Load::start(&cluster, LoadSpec::default());
    load.wait_for_acks(100, LEADER_TIMEOUT, "before the add");

    let new = cluster.node(3);
    let added = new.native_addr().to_string();
    let through = cluster.node(0).native_addr();
    let done = AtomicBool::new(false);
    let first_try = std::thread::scope(|scope| {
        let adding = scope.spawn(|| {
            let run = cli_at(through, &["cluster", "add-node", &added]);
            done.store(true, Ordering::Relaxed);
            run
        });
        // Kill it once it has joined as a learner (it knows a leader), or after a second.
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(1) && !done.load(Ordering::Relaxed) {
            if status(&cluster, 3, 0).is_some_and(|s| s.leader != 0) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        new.kill9();
        std::thread::sleep(Duration::from_millis(500));
        new.restart();
        adding.join().expect("the add-node thread")
    });
    eprintln!("add-node with a kill in the middle: {first_try:?}");
    let again = cli_at(through, &["cluster", "add-node", &added]);
    assert!(again.success, "add-node sent again after the kill: {again:?}");

    let current = wait_for_leader(&cluster, 0, &all(&cluster), LEADER_TIMEOUT);
    let map = cluster_common::block_on(LEADER_TIMEOUT, async {
        let session = ferrite_client::Session::connect(&cluster.node(current).native_addr().to_string()).await.ok()?;
        session.cluster_map().await.ok()
    })
    .flatten()
    .expect("the leader answers the map");
    let mut voters = map.groups[0].voters.clone();
    voters.sort_unstable();
    assert_eq!(voters, [1, 2, 3, 4], "{map:?}");
    wait_caught_up(&cluster, 0, 3, LEADER_TIMEOUT);
    load.wait_for_acks(SERVING, LEADER_TIMEOUT, "after the add");
    load.finish_and_check();
    assert!(leader(&cluster, 0, &all(&cluster)).is_some());
}
