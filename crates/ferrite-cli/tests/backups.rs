//! `ferrite backup`, `ferrite check` on a backup and `ferrite-server --restore` against a real
//! server: what a backup holds, where it may be written, and that checking and restoring a backup
//! agree.
//!
//! The server binary is the sibling of the CLI binary in Cargo's target directory (see `cli.rs`).

#[path = "../../ferrite-server/tests/common/mod.rs"]
mod common;
mod ferrite_process;

use std::process::{Command, Output};
use std::time::Duration;

use common::TestServer;
use ferrite_process::{command, fails, ferrite_offline, ok, run, server_binary, text, CLI_TIMEOUT};
use serde_json::Value;

/// Runs `ferrite --addr <shard 0> ARGS` and returns what it did.
fn ferrite(server: &TestServer, args: &[&str]) -> Output {
    run(command(&server.addr_string(), args), b"", CLI_TIMEOUT)
}

#[track_caller]
fn json(output: &Output) -> Value {
    let stdout = ok(output);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("--json output is not JSON ({e}): {stdout}"))
}

/// A server whose shards checkpoint every second into small log segments (which hold the largest
/// record once values are at most 64 KiB), so that a backup taken under load copies page files as
/// well as log.
fn checkpointing_server() -> common::ServerBuilder {
    TestServer::builder_for(server_binary())
        .shards(2)
        .config("value_bytes_max", 65536)
        .config("pool_bytes_max", 67108864)
        .append_config(
            "[durability]\nwal_segment_bytes = 2097152\ncheckpoint_wal_bytes = 2097152\ncheckpoint_interval_secs = 1\n",
        )
}

/// Runs `ferrite-server --restore BACKUP --data-dir DATA_DIR`.
fn restore(backup: &std::path::Path, data_dir: &std::path::Path) -> Output {
    Command::new(server_binary())
        .arg("--restore")
        .arg(backup)
        .arg("--data-dir")
        .arg(data_dir)
        .output()
        .expect("run ferrite-server --restore")
}

/// The value writer `writer` stores under its `index`th key.
fn backup_value(writer: usize, index: u64) -> Vec<u8> {
    format!("writer {writer} value {index} ").repeat(8).into_bytes()
}

/// `ferrite backup` copies a running server while writers keep going: `ferrite check` passes on
/// the copy, `ferrite-server --restore` makes a data directory of it, and a server on that
/// directory holds every write acknowledged before the backup began and, per writer, an unbroken
/// prefix of its later writes (a shard is copied as of one moment), each with its exact value.
#[test]
fn a_backup_under_load_restores_every_write_acknowledged_before_it() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    const WRITERS: usize = 4;
    let dir = common::fresh_dir("backup");
    let server = checkpointing_server().start();
    let session = ferrite_client::blocking::Session::connect(&server.addr_string()).expect("connect");
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged: Vec<Arc<AtomicU64>> = (0..WRITERS).map(|_| Arc::default()).collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let pool = session.create_pool(&format!("backup-{writer}"), Default::default()).expect("create a pool");
            let (stop, acknowledged) = (Arc::clone(&stop), Arc::clone(&acknowledged[writer]));
            std::thread::spawn(move || {
                let mut index = 0;
                while !stop.load(Ordering::Relaxed) {
                    pool.put(format!("key-{index}"), backup_value(writer, index)).expect("put");
                    index += 1;
                    acknowledged.store(index, Ordering::Release);
                }
            })
        })
        .collect();
    // Let every shard complete a checkpoint first, so the backup has page files to copy.
    common::wait_until("a checkpoint on every shard", Duration::from_secs(30), || {
        let shards = session.statistics().expect("statistics");
        shards.iter().all(|shard| shard.get("checkpoints").unwrap_or(0) >= 1).then_some(())
    });
    let before: Vec<u64> = acknowledged.iter().map(|count| count.load(Ordering::Acquire)).collect();
    let backup = dir.join("backup");
    let backed_up = ferrite(&server, &["--json", "backup", backup.to_str().expect("UTF-8 path")]);
    let report = json(&backed_up);
    assert_eq!(report["shards"].as_array().map(Vec::len), Some(2), "{report}");
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().expect("a writer");
    }
    let after: Vec<u64> = acknowledged.iter().map(|count| count.load(Ordering::Acquire)).collect();
    assert!(
        backup.join("shard-0/checkpoint/MANIFEST").exists() || backup.join("shard-1/checkpoint/MANIFEST").exists(),
        "a checkpoint was copied"
    );
    let again = ferrite(&server, &["backup", backup.to_str().expect("UTF-8 path")]);
    assert!(fails(&again).contains("already exists"), "a backup never overwrites another");
    server.stop_gracefully();

    let checked = ferrite_offline(&["check", backup.to_str().expect("UTF-8 path")]);
    assert!(checked.status.success(), "ferrite check passes on the backup: {checked:?}");
    let restored_dir = dir.join("restored");
    let restored = restore(&backup, &restored_dir);
    assert!(restored.status.success(), "{restored:?}");
    assert!(text(&restored.stdout).contains("shard 1: restored"), "{restored:?}");
    let refused = restore(&backup, &restored_dir);
    assert!(text(&refused.stderr).contains("not empty"), "a restore never writes over data: {refused:?}");
    assert!(text(&checked.stdout).contains("backup up to LSN"), "{checked:?}");
    // A shard whose copy did not finish has no descriptor: check and restore both refuse it.
    let unfinished = dir.join("unfinished");
    std::fs::rename(&backup, &unfinished).expect("move the backup");
    std::fs::remove_file(unfinished.join("shard-1/BACKUP")).expect("remove a descriptor");
    let checked = ferrite_offline(&["check", unfinished.to_str().expect("UTF-8 path")]);
    assert_eq!(checked.status.code(), Some(1), "{checked:?}");
    assert!(text(&checked.stdout).contains("unfinished backup"), "{checked:?}");
    let refused = restore(&unfinished, &dir.join("never"));
    assert!(text(&refused.stderr).contains("incomplete"), "{refused:?}");

    let server = checkpointing_server().data_dir(&restored_dir).start();
    let session = ferrite_client::blocking::Session::connect(&server.addr_string()).expect("connect");
    for writer in 0..WRITERS {
        let pool = session.open_pool(&format!("backup-{writer}")).expect("the pool was restored");
        let held = pool.count().expect("count");
        assert!(
            (before[writer]..=after[writer]).contains(&held),
            "writer {writer}: {held} keys restored, {} acknowledged before the backup, {} in all",
            before[writer],
            after[writer]
        );
        for index in 0..held {
            let value = pool
                .get(format!("key-{index}"))
                .unwrap_or_else(|error| panic!("writer {writer} key {index}, in an unbroken prefix: {error}"));
            assert_eq!(value, backup_value(writer, index), "writer {writer} key {index}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A shard that keeps no log (the `memory` backing) has nothing durable to copy: the backup is
/// refused with the reason, and nothing is written.
#[test]
fn a_backup_of_a_memory_shard_is_refused() {
    let server = TestServer::builder_for(server_binary()).config("backing", "\"memory\"").start();
    let dir = common::fresh_dir("backup-memory").join("backup");
    let refused = ferrite(&server, &["backup", dir.to_str().expect("UTF-8 path")]);
    assert!(fails(&refused).contains("only shards on the ssd backing"), "{refused:?}");
    assert!(!dir.join("shard-0").exists(), "nothing was copied");
}

/// With `[backup] root`, a client can have backups written beneath it only: another directory,
/// or one that climbs out with `..`, is refused and nothing is written there.
#[test]
fn backups_stay_beneath_the_configured_root() {
    let dir = common::fresh_dir("backup-root");
    let root = dir.join("allowed");
    std::fs::create_dir_all(&root).expect("make the root");
    let server = TestServer::builder_for(server_binary())
        .append_config(&format!("[backup]\nroot = {:?}\n", root.display().to_string()))
        .start();
    ok(&ferrite(&server, &["backup", root.join("nightly").to_str().expect("UTF-8 path")]));
    assert!(root.join("nightly/shard-0/BACKUP").exists());
    for outside in [dir.join("elsewhere"), root.join("../elsewhere")] {
        let refused = fails(&ferrite(&server, &["backup", outside.to_str().expect("UTF-8 path")]));
        assert!(refused.contains("[backup] root"), "{refused}");
    }
    assert!(!dir.join("elsewhere").exists(), "nothing was written outside the root");
}

/// A backup that cannot be written (here a directory the kernel refuses to create, as a full or
/// read-only disk would refuse the copy) fails with its reason; the shard goes on serving and
/// takes the next backup, so the failed one left nothing held.
#[test]
fn a_failed_backup_reports_why_and_the_next_one_succeeds() {
    let server = TestServer::builder_for(server_binary()).start();
    ok(&ferrite(&server, &["pool", "create", "kept"]));
    ok(&ferrite(&server, &["put", "kept", "k", "v"]));
    let refused = fails(&ferrite(&server, &["backup", "/proc/ferrite-backup"]));
    assert!(refused.contains("backup into /proc/ferrite-backup failed"), "{refused}");
    let dir = common::fresh_dir("backup-after-failure").join("backup");
    ok(&ferrite(&server, &["backup", dir.to_str().expect("UTF-8 path")]));
    let checked = ferrite_offline(&["check", dir.to_str().expect("UTF-8 path")]);
    assert!(text(&checked.stdout).contains("1 object(s)"), "{checked:?}");
    assert_eq!(ok(&ferrite(&server, &["get", "kept", "k"])), "v");
}

/// Proves links beneath `[backup] root` are not followed: a backup directory that is a link to a
/// directory outside the root, or that lies beyond one, is refused and nothing is written
/// outside; and a link planted in a backup directory under the name of the temporary identity
/// file a backup writes is never written through (the file it points to keeps its content).
#[cfg(unix)]
#[test]
fn links_beneath_the_backup_root_are_not_followed() {
    let dir = common::fresh_dir("backup-root-links");
    let (root, outside) = (dir.join("allowed"), dir.join("outside"));
    for made in [&root, &outside] {
        std::fs::create_dir_all(made).expect("make a directory");
    }
    let server = TestServer::builder_for(server_binary())
        .append_config(&format!("[backup]\nroot = {:?}\n", root.display().to_string()))
        .start();
    ok(&ferrite(&server, &["pool", "create", "kept"]));
    ok(&ferrite(&server, &["put", "kept", "k", "v"]));
    std::os::unix::fs::symlink(&outside, root.join("escape")).expect("a link beneath the root");
    for target in [root.join("escape"), root.join("escape/nightly")] {
        let refused = fails(&ferrite(&server, &["backup", target.to_str().expect("UTF-8 path")]));
        assert!(refused.contains("symbolic link"), "{refused}");
    }
    let written: Vec<_> = std::fs::read_dir(&outside).expect("list outside").collect();
    assert!(written.is_empty(), "nothing was written outside the root: {written:?}");

    let planted = root.join("planted");
    std::fs::create_dir(&planted).expect("a backup directory made beforehand");
    let victim = outside.join("precious");
    std::fs::write(&victim, "not a backup's\n").expect("a file outside the root");
    std::os::unix::fs::symlink(&victim, planted.join("FERRITE.tmp.0")).expect("a link at the temporary name");
    let _ = ferrite(&server, &["backup", planted.to_str().expect("UTF-8 path")]);
    assert_eq!(std::fs::read_to_string(&victim).expect("the target is still there"), "not a backup's\n");
    ok(&ferrite(&server, &["backup", root.join("nightly").to_str().expect("UTF-8 path")]));
    assert!(root.join("nightly/shard-0/BACKUP").exists(), "a backup beneath the root is still taken");
    let _ = std::fs::remove_dir_all(&dir);
}
