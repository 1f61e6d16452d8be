//! `ferrite backup`, `ferrite check` on a backup and `ferrite-server --restore` against a real
//! server: what a backup holds, where it may be written, and that checking and restoring a backup
//! agree.
//!
//! The server binary is the sibling of the CLI binary in Cargo's target directory (see `cli.rs`).

#[path = "../../ferrite-server/tests/common/mod.rs"]
mod common;
mod ferrite_process;

use std::path::{Path, PathBuf};
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
    assert!(text(&refused.stderr).contains("not a complete backup"), "{refused:?}");
    assert!(!dir.join("never").exists(), "a refused backup creates nothing");

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

/// Copies the directory tree `from` to `to` (files and directories only).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create a directory of the copy");
    for entry in std::fs::read_dir(from).expect("list a directory") {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("its type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a file");
        }
    }
}

/// The files of `dir` whose names end with `suffix`, in name order.
fn files_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list a directory")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.to_string_lossy().ends_with(suffix))
        .collect();
    files.sort();
    files
}

/// A stopped two-shard server's backup in `dir/backup` whose shards each hold a checkpoint with
/// page files and log records after it: a pool pinned to each shard gets 2.5 MiB (past the
/// 2 MiB that starts a checkpoint), then, once each shard has checkpointed, ten small writes.
fn backup_with_pages_and_log(dir: &Path) -> PathBuf {
    let server = TestServer::builder_for(server_binary())
        .shards(2)
        .config("value_bytes_max", 65536)
        .config("pool_bytes_max", 67108864)
        .append_config(
            "[durability]\nwal_segment_bytes = 2097152\ncheckpoint_wal_bytes = 2097152\ncheckpoint_interval_secs = 3600\n",
        )
        .start();
    let session = ferrite_client::blocking::Session::connect(&server.addr_string()).expect("connect");
    let pools: Vec<_> = (0..2)
        .map(|shard| session.create_pool(&format!("@{shard}/kept"), Default::default()).expect("create a pool"))
        .collect();
    for pool in &pools {
        for index in 0..40 {
            pool.put(format!("large-{index}"), vec![b'x'; 64 * 1024]).expect("put a large value");
        }
    }
    common::wait_until("a checkpoint on every shard", Duration::from_secs(30), || {
        let shards = session.statistics().expect("statistics");
        shards.iter().all(|shard| shard.get("checkpoints").unwrap_or(0) >= 1).then_some(())
    });
    for pool in &pools {
        for index in 0..10 {
            pool.put(format!("small-{index}"), b"after the checkpoint").expect("put a small value");
        }
    }
    let backup = dir.join("backup");
    ok(&ferrite(&server, &["backup", backup.to_str().expect("UTF-8 path")]));
    server.stop_gracefully();
    for shard in 0..2 {
        let checkpoint = backup.join(format!("shard-{shard}/checkpoint"));
        assert!(!files_ending(&checkpoint, ".pages").is_empty(), "shard {shard} has page files");
    }
    backup
}

/// A way to damage the backup in a directory.
type Damage = fn(&Path);

/// Proves `ferrite check` and `ferrite-server --restore` give the same verdict on a backup: both
/// pass it whole, and both refuse it damaged in each of these ways.
#[test]
fn check_and_restore_agree_on_damaged_backups() {
    let dir = common::fresh_dir("backup-agree");
    let backup = backup_with_pages_and_log(&dir);
    let damages: [(&str, Damage); 9] = [
        ("a shard's descriptor removed", |backup| std::fs::remove_file(backup.join("shard-1/BACKUP")).expect("remove")),
        ("every descriptor removed", |backup| {
            for shard in 0..2 {
                std::fs::remove_file(backup.join(format!("shard-{shard}/BACKUP"))).expect("remove");
            }
        }),
        ("a descriptor of another shard", |backup| {
            std::fs::copy(backup.join("shard-0/BACKUP"), backup.join("shard-1/BACKUP")).expect("copy");
        }),
        ("a shard directory removed", |backup| std::fs::remove_dir_all(backup.join("shard-1")).expect("remove")),
        ("the identity file removed", |backup| std::fs::remove_file(backup.join("FERRITE")).expect("remove")),
        ("the identity file and every descriptor removed", |backup| {
            std::fs::remove_file(backup.join("FERRITE")).expect("remove");
            for shard in 0..2 {
                std::fs::remove_file(backup.join(format!("shard-{shard}/BACKUP"))).expect("remove");
            }
        }),
        ("a page file truncated", |backup| {
            let page_file = files_ending(&backup.join("shard-0/checkpoint"), ".pages").remove(0);
            let length = std::fs::metadata(&page_file).expect("its size").len();
            std::fs::File::options().write(true).open(&page_file).expect("open").set_len(length / 2).expect("cut");
        }),
        ("the manifest corrupted", |backup| {
            let manifest = backup.join("shard-0/checkpoint/MANIFEST");
            let mut bytes = std::fs::read(&manifest).expect("read");
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x40;
            std::fs::write(&manifest, bytes).expect("write");
        }),
        ("the log cut before the backup's last record", |backup| {
            let segment = files_ending(&backup.join("shard-0/wal"), ".log").pop().expect("a log segment");
            std::fs::File::options().write(true).open(&segment).expect("open").set_len(100).expect("cut");
        }),
    ];
    let checked = ferrite_offline(&["check", backup.to_str().expect("UTF-8 path")]);
    assert!(checked.status.success(), "the whole backup passes the check: {checked:?}");
    let restored = restore(&backup, &dir.join("restored"));
    assert!(restored.status.success(), "the whole backup is restored: {restored:?}");
    let mut passed = Vec::new();
    for (index, (damage, make)) in damages.into_iter().enumerate() {
        let damaged = dir.join(format!("damaged-{index}"));
        copy_tree(&backup, &damaged);
        make(&damaged);
        let checked = ferrite_offline(&["check", damaged.to_str().expect("UTF-8 path")]);
        let restored = restore(&damaged, &dir.join(format!("restored-{index}")));
        for (command, output) in [("check", checked), ("restore", restored)] {
            if output.status.code() != Some(1) {
                passed.push(format!("{damage}: {command} gave {}: {}", output.status, text(&output.stdout)));
            }
        }
    }
    assert!(passed.is_empty(), "damaged backups not refused:\n{}", passed.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Proves a restore that fails once it has begun copying (here on a page file cut short, found
/// when the copy is verified) removes what it created, and only that: a new `NEW_DIR` (and the
/// parents it needed) is gone again, an empty one is empty again, and the next restore into it
/// is not refused as "not empty".
#[test]
fn a_failed_restore_leaves_nothing_and_the_next_one_succeeds() {
    let dir = common::fresh_dir("restore-undo");
    let backup = backup_with_pages_and_log(&dir);
    let damaged = dir.join("damaged");
    copy_tree(&backup, &damaged);
    let page_file = files_ending(&damaged.join("shard-1/checkpoint"), ".pages").remove(0);
    std::fs::File::options().write(true).open(&page_file).expect("open").set_len(4096).expect("cut a page file");

    let nested = dir.join("new/restored");
    let refused = restore(&damaged, &nested);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(text(&refused.stderr).contains("nothing was restored"), "{refused:?}");
    assert!(!dir.join("new").exists(), "the directories the restore created are gone");

    let empty = dir.join("empty");
    std::fs::create_dir(&empty).expect("an empty directory");
    let refused = restore(&damaged, &empty);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let left: Vec<_> = std::fs::read_dir(&empty).expect("still there").collect();
    assert!(left.is_empty(), "the empty directory is empty again: {left:?}");
    let restored = restore(&backup, &empty);
    assert!(restored.status.success(), "the next restore goes ahead: {restored:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Proves `ferrite backup` and `ferrite-server --restore` report the same files and bytes for
/// each shard of one backup, and that these are the backup's files and their sizes.
#[test]
fn backup_and_restore_report_the_same_sizes() {
    let dir = common::fresh_dir("backup-sizes");
    let server = TestServer::builder_for(server_binary()).shards(2).start();
    for shard in 0..2 {
        ok(&ferrite(&server, &["pool", "create", &format!("@{shard}/sized")]));
        ok(&ferrite(&server, &["put", &format!("@{shard}/sized"), "k", "a value"]));
    }
    let backup = dir.join("backup");
    let reported = json(&ferrite(&server, &["--json", "backup", backup.to_str().expect("UTF-8 path")]));
    server.stop_gracefully();
    let restored = restore(&backup, &dir.join("restored"));
    let stdout = ok(&restored);
    for shard in reported["shards"].as_array().expect("shards") {
        let index = shard["shard"].as_u64().expect("a shard number");
        let (files, bytes) = (shard["files"].as_u64().expect("files"), shard["bytes"].as_u64().expect("bytes"));
        let expected = format!("shard {index}: restored {files} files ({bytes} bytes)");
        assert!(stdout.contains(&expected), "{expected:?} missing from:\n{stdout}");
        let shard_dir = backup.join(format!("shard-{index}"));
        let on_disk: Vec<u64> = ["checkpoint", "wal"]
            .iter()
            .flat_map(|part| std::fs::read_dir(shard_dir.join(part)).expect("list"))
            .map(|entry| entry.expect("an entry").metadata().expect("its size").len())
            .collect();
        assert_eq!((files, bytes), (on_disk.len() as u64, on_disk.iter().sum()), "shard {index}: the files copied");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `command` with `FERRITE_PROGRESS_BYTES` set to `threshold` (unset for `None`).
fn with_threshold(mut command: Command, threshold: Option<&str>) -> Output {
    command.env_remove("FERRITE_PROGRESS_BYTES");
    if let Some(threshold) = threshold {
        command.env("FERRITE_PROGRESS_BYTES", threshold);
    }
    run(command, b"", CLI_TIMEOUT)
}

/// Proves the online backup, `ferrite check` and the restore show their progress once the data
/// reaches the threshold (lowered here with `FERRITE_PROGRESS_BYTES`): the backup in the server's
/// log, the other two on standard error with `--progress` (off a terminal, as here), a line per
/// tenth up to 100%; and that nothing is shown without `--progress` or below the threshold.
#[test]
fn backup_check_and_restore_show_progress_on_large_data() {
    const LOW: &str = "1048576";
    let dir = common::fresh_dir("progress");
    let server = TestServer::builder_for(server_binary()).env("FERRITE_PROGRESS_BYTES", LOW).start();
    ok(&ferrite(&server, &["pool", "create", "large"]));
    let value = "v".repeat(60_000);
    for index in 0..40 {
        ok(&ferrite(&server, &["put", "large", &format!("key-{index}"), &value]));
    }
    let backup = dir.join("backup");
    ok(&ferrite(&server, &["backup", backup.to_str().expect("UTF-8 path")]));
    let logged = server.stderr();
    assert!(logged.contains("shard 0: backup into") && logged.contains("(100%)"), "{logged}");
    server.stop_gracefully();
    let backup_arg = backup.to_str().expect("UTF-8 path");

    let check = |args: &[&str], threshold| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ferrite"));
        command.env_remove("FERRITE_ADDR").arg("check").args(args).arg(backup_arg);
        with_threshold(command, threshold)
    };
    let checked = check(&["--progress"], Some(LOW));
    ok(&checked);
    let lines = text(&checked.stderr);
    assert!(lines.lines().count() <= 10 && lines.contains("check: ") && lines.contains("(100%)"), "{lines}");
    assert!(check(&[], Some(LOW)).stderr.is_empty(), "no progress off a terminal unless asked");
    assert!(check(&["--progress"], None).stderr.is_empty(), "no progress below the default threshold");

    let mut command = Command::new(server_binary());
    command.arg("--restore").arg(&backup).arg("--data-dir").arg(dir.join("restored")).arg("--progress");
    let restored = with_threshold(command, Some(LOW));
    ok(&restored);
    let lines = text(&restored.stderr);
    assert!(lines.contains("restore: copying") && lines.contains("restore: verifying"), "{lines}");
    assert!(lines.lines().filter(|line| line.contains("(100%)")).count() == 2, "{lines}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Large values whose pages a checkpoint keeps in the log (its segments held under their own
/// names) come back whole after a restart, a kill -9, and through a backup and its restore; `ferrite check`
/// reads them back from the log, on the data directory and on the backup.
#[test]
fn large_values_kept_in_the_log_survive_restarts_kills_backups_and_restores() {
    let dir = common::fresh_dir("backup-in-log");
    let data = dir.join("data");
    let builder = || {
        TestServer::builder_for(server_binary()).shards(1).data_dir(&data).append_config(
            "[durability]\nwal_segment_bytes = 4194304\ncheckpoint_wal_bytes = 4194304\ncheckpoint_interval_secs = 1\n",
        )
    };
    let value = |index: usize, round: u8| -> Vec<u8> {
        (0..512 * 1024).map(|at: usize| (at.wrapping_mul(7) ^ index.wrapping_mul(131)) as u8 ^ round).collect()
    };
    let server = builder().start();
    let session = ferrite_client::blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = session.create_pool("large", Default::default()).expect("create a pool");
    for index in 0..24 {
        pool.put(format!("value-{index}"), value(index, 1)).expect("put a large value");
    }
    common::wait_until("segments held for a checkpoint", Duration::from_secs(30), || {
        let shards = session.statistics().expect("statistics");
        (shards[0].get("wal_held_bytes").unwrap_or(0) > 0).then_some(())
    });
    let held = files_ending(&data.join("shard-0/wal"), ".held");
    assert!(!held.is_empty(), "held segments are in the log directory under their own names");
    let backup = dir.join("backup");
    ok(&ferrite(&server, &["backup", backup.to_str().expect("UTF-8 path")]));
    assert!(!files_ending(&backup.join("shard-0/wal"), ".held").is_empty(), "the backup holds them too");
    for index in 0..12 {
        pool.put(format!("value-{index}"), value(index, 2)).expect("replace a large value");
    }
    drop(pool);
    drop(session);
    let mut server = server;
    server.kill9();
    drop(server);

    for checked in [&data, &backup] {
        let report = ferrite_offline(&["check", checked.to_str().expect("UTF-8 path")]);
        let stdout = ok(&report);
        assert!(stdout.contains("of them in the log"), "check reads pages back from the log:\n{stdout}");
    }
    let expect_values = |server: &TestServer, replaced: bool| {
        let session = ferrite_client::blocking::Session::connect(&server.addr_string()).expect("connect");
        let pool = session.open_pool("large").expect("the pool");
        for index in 0..24 {
            let round = if replaced && index < 12 { 2 } else { 1 };
            assert!(
                pool.get(format!("value-{index}")).expect("get") == value(index, round),
                "value {index} round {round}"
            );
        }
    };
    let server = builder().start();
    expect_values(&server, true);
    server.stop_gracefully();
    let restored_dir = dir.join("restored");
    ok(&restore(&backup, &restored_dir));
    let server = TestServer::builder_for(server_binary()).shards(1).data_dir(&restored_dir).start();
    expect_values(&server, false);
    server.stop_gracefully();
    let _ = std::fs::remove_dir_all(&dir);
}
