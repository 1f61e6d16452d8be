//! Durable pools across restarts of the real server: what survives SIGKILL and a clean stop, per
//! durability level; the pool catalog and secondary indexes coming back; and the data
//! directory's guards (one server at a time, a fixed shard count).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{fresh_dir, TestServer};
use ferrite_client::blocking::Session;
use ferrite_client::{Durability, FindKind, PoolOptions, PutFlags};

fn connect(server: &TestServer) -> Session {
    Session::connect(&server.addr_string()).expect("connect")
}

/// Sync writes are durable when acknowledged; async ones within the commit interval (waited out
/// here with a wide margin); both come back after SIGKILL, as do the pool catalog (created pools,
/// deleted ones staying deleted) and a rebuilt secondary index.
#[test]
fn pools_and_writes_survive_kill_9() {
    let data_dir = fresh_dir("durable").join("data");
    let mut server = TestServer::builder().data_dir(&data_dir).start();
    let session = connect(&server);
    let sync_pool =
        session.create_pool("accounts", PoolOptions { indexed: true, ..PoolOptions::default() }).expect("create");
    let async_options = PoolOptions { durability: Durability::Async, ..PoolOptions::default() };
    let async_pool = session.create_pool("cache", async_options).expect("create");
    session.create_pool("doomed", PoolOptions::default()).expect("create").close().expect("close");
    for i in 0..100 {
        sync_pool.put(format!("user:{i:03}"), format!("balance {i}")).expect("sync put");
        async_pool.put(format!("page:{i}"), vec![i as u8; 3000]).expect("async put");
    }
    sync_pool.erase("user:050").expect("erase");
    let async_flags = PutFlags::NONE.with_durability(Durability::Async);
    sync_pool.put_with("user:async", "async on a sync pool", async_flags).expect("async put");
    let sync_flags = PutFlags::NONE.with_durability(Durability::Sync);
    async_pool.put_with("page:sync", "sync on an async pool", sync_flags).expect("sync put");
    session.delete_pool("doomed").expect("delete");
    // Async writes reach stable storage within the 10 ms commit interval.
    std::thread::sleep(Duration::from_millis(500));
    server.kill9();

    let server = TestServer::builder().data_dir(&data_dir).start();
    let session = connect(&server);
    let names: Vec<String> = session.list_pools().expect("list").into_iter().map(|p| p.name).collect();
    assert_eq!(names, vec!["accounts".to_string(), "cache".to_string()], "the catalog survives, deletion included");
    let accounts = session.open_pool("accounts").expect("open");
    let cache = session.open_pool("cache").expect("open");
    for i in 0..100 {
        let key = format!("user:{i:03}");
        if i == 50 {
            assert!(accounts.get(&key).expect_err("erased").is_key_not_found());
        } else {
            assert_eq!(accounts.get(&key).expect("sync write"), format!("balance {i}").into_bytes());
        }
        assert_eq!(cache.get(format!("page:{i}")).expect("async write"), vec![i as u8; 3000]);
    }
    assert_eq!(accounts.get("user:async").expect("async put"), b"async on a sync pool");
    assert_eq!(cache.get("page:sync").expect("sync put"), b"sync on an async pool");
    let found = accounts.find_all(FindKind::Prefix, b"user:00").expect("the index was rebuilt");
    assert_eq!(found.len(), 10);
    assert!(server.stderr().contains("shard recovered"), "recovery is logged:\n{}", server.stderr());
    drop((accounts, cache));
    server.stop_gracefully();
    let _ = std::fs::remove_dir_all(data_dir.parent().expect("fresh dir"));
}

/// A clean stop commits buffered async writes, however long the commit interval.
#[test]
fn a_clean_stop_makes_async_writes_durable() {
    let data_dir = fresh_dir("clean-stop").join("data");
    let server =
        TestServer::builder().data_dir(&data_dir).append_config("[durability]\ncommit_interval_ms = 10000").start();
    let session = connect(&server);
    let options = PoolOptions { durability: Durability::Async, ..PoolOptions::default() };
    let pool = session.create_pool("lazy", options).expect("create");
    pool.put("k", "v").expect("put");
    drop((pool, session));
    server.stop_gracefully();
    let server = TestServer::builder().data_dir(&data_dir).start();
    let pool = connect(&server).open_pool("lazy").expect("open");
    assert_eq!(pool.get("k").expect("committed at shutdown"), b"v");
    drop(pool);
    server.stop_gracefully();
    let _ = std::fs::remove_dir_all(data_dir.parent().expect("fresh dir"));
}

/// Runs the server binary on `data_dir` expecting it to refuse to start; returns its stderr.
fn refused_start(data_dir: &std::path::Path, extra: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_ferrite-server"))
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(extra)
        .output()
        .expect("run the server");
    assert!(!output.status.success(), "the server must refuse to start: {output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_data_directory_serves_one_server_with_one_shard_count() {
    let data_dir = fresh_dir("guards").join("data");
    let server = TestServer::builder().data_dir(&data_dir).shards(2).start();
    let stderr = refused_start(&data_dir, &["--shards", "2"]);
    assert!(
        stderr.contains("in use by another ferrite-server") && stderr.contains(&server.pid().to_string()),
        "{stderr}"
    );
    server.stop_gracefully();
    let stderr = refused_start(&data_dir, &["--shards", "3"]);
    assert!(stderr.contains("created for 2 shard(s)") && stderr.contains("has 3"), "{stderr}");
    let server = TestServer::builder().data_dir(&data_dir).shards(2).start();
    server.stop_gracefully();
    let _ = std::fs::remove_dir_all(data_dir.parent().expect("fresh dir"));
}

/// A damaged log stops the server from starting, naming the file and the offset.
#[test]
fn a_damaged_log_is_refused_with_its_place() {
    let data_dir = fresh_dir("damaged").join("data");
    let server = TestServer::builder().data_dir(&data_dir).start();
    let pool = connect(&server).create_pool("p", PoolOptions::default()).expect("create");
    for i in 0..10 {
        pool.put(format!("k{i}"), "v").expect("put");
    }
    drop(pool);
    server.stop_gracefully();
    let wal = data_dir.join("shard-0").join("wal");
    let segment = std::fs::read_dir(&wal)
        .expect("log dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "log"))
        .min()
        .expect("a segment");
    let mut bytes = std::fs::read(&segment).expect("read");
    bytes[64 + 40] ^= 0x20;
    std::fs::write(&segment, bytes).expect("write");
    let stderr = refused_start(&data_dir, &[]);
    assert!(stderr.contains("damaged") && stderr.contains("wal-") && stderr.contains("offset"), "{stderr}");
    let _ = std::fs::remove_dir_all(data_dir.parent().expect("fresh dir"));
}

/// Checkpoints run in the background once enough log has accumulated, and the log's segments are
/// recycled after them: writing many times the checkpoint threshold leaves only a few segment
/// files, and everything written is still there after SIGKILL.
#[test]
fn checkpoints_bound_the_log() {
    let data_dir = fresh_dir("bounded").join("data");
    // 2 MiB segments hold the largest record once values are at most 256 KiB.
    let config =
        "[durability]\nwal_segment_bytes = 2097152\ncheckpoint_wal_bytes = 2097152\ncheckpoint_interval_secs = 1";
    let start = |data_dir: &std::path::Path| {
        TestServer::builder().data_dir(data_dir).config("value_bytes_max", 262_144).append_config(config).start()
    };
    let mut server = start(&data_dir);
    let session = connect(&server);
    let options = PoolOptions { size_bytes: 64 << 20, expected_objects: 1000, ..PoolOptions::default() };
    let pool = session.create_pool("churn", options).expect("create");
    // About 24 MiB of log: 12,000 puts of 2 KiB over 500 keys.
    for i in 0..12_000u32 {
        pool.put(format!("k{}", i % 500), vec![(i % 251) as u8; 2048]).expect("put");
    }
    let checkpoints = common::wait_until("a checkpoint", Duration::from_secs(20), || {
        let stats = session.statistics().expect("statistics");
        stats[0].get("checkpoints").filter(|count| *count >= 1)
    });
    assert!(checkpoints >= 1);
    // Let a checkpoint that started after the last put finish too, then count the segments.
    std::thread::sleep(Duration::from_millis(1500));
    let segments = std::fs::read_dir(data_dir.join("shard-0").join("wal"))
        .expect("the log directory")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".log"))
        .count();
    assert!(segments <= 8, "24 MiB of log through 2 MiB segments left {segments} segment files");
    drop(pool);
    server.kill9();
    let server = start(&data_dir);
    let pool = connect(&server).open_pool("churn").expect("open");
    for k in 0..500u32 {
        let last = (11_500..12_000).find(|i| i % 500 == k).expect("every key was written last in the final round");
        assert_eq!(pool.get(format!("k{k}")).expect("get"), vec![(last % 251) as u8; 2048], "k{k}");
    }
    drop(pool);
    server.stop_gracefully();
    let _ = std::fs::remove_dir_all(data_dir.parent().expect("fresh dir"));
}

/// A `pmem` pool's creation that a crash interrupts before its catalog entry is written leaves
/// files no catalog names. The next start removes them and never gives their id out again, so
/// creating pools goes on working (the leftover files would otherwise block the next creation).
#[test]
fn pmem_files_of_an_interrupted_creation_are_removed_at_start() {
    let data_dir = fresh_dir("pmem-orphans").join("data");
    let server = TestServer::builder().data_dir(&data_dir).config("backing", "\"pmem\"").start();
    connect(&server).create_pool("first", PoolOptions::default()).expect("create");
    server.stop_gracefully();
    let pmem_dir = data_dir.join("shard-0").join("pmem");
    // What a creation of pool id 2 leaves when it is killed after making its files.
    for name in ["pool-0000000000000002.pmem", "pool-0000000000000002.undo"] {
        std::fs::write(pmem_dir.join(name), vec![0u8; 8192]).expect("plant a leftover file");
    }
    let server = TestServer::builder().data_dir(&data_dir).config("backing", "\"pmem\"").start();
    let session = connect(&server);
    let second = session.create_pool("second", PoolOptions::default()).expect("creation works again");
    second.put("k", "v").expect("put");
    assert!(!pmem_dir.join("pool-0000000000000002.undo").exists(), "the leftover files are removed");
    assert!(pmem_dir.join("pool-0000000000000003.pmem").exists(), "the leftover id is not given out again");
    drop((second, session));
    server.stop_gracefully();
    let server = TestServer::builder().data_dir(&data_dir).config("backing", "\"pmem\"").start();
    let names: Vec<String> = connect(&server).list_pools().expect("list").into_iter().map(|p| p.name).collect();
    assert_eq!(names, vec!["first".to_string(), "second".to_string()]);
    server.stop_gracefully();
    let _ = std::fs::remove_dir_all(data_dir.parent().expect("fresh dir"));
}
