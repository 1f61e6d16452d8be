//! What a plugin call may reach, through the real server and its `ferrite-ado` host with the
//! shipped `faulty` plugin: a call's log record holds only the bytes it declared, never memory of
//! another call or key; a call whose changes the pool or the disk refuses fails alone while its
//! host has moved on to later calls; a stray write into pool memory the call was not given
//! (during the call, or through a pointer or thread kept after it) faults and fails only that
//! call; and a callback cannot change a key that a call waiting in the queue holds.

mod common;
mod small_disk;

use std::time::Duration;

use common::{fresh_dir, ServerBuilder, TestServer};
use ferrite_client::blocking::{Pool, Session};
use ferrite_client::{ErrorCode, InvokeOptions, PoolOptions, PoolSetting};
use small_disk::SmallDisk;

/// How the servers here run plugins: hosts may use 256 MiB, calls time out after 10 s.
const ADO_CONFIG: &str = "[ado]\ncall_timeout_ms = 10000\nmemory_limit_bytes = 268435456\n";

fn plugin_server() -> ServerBuilder {
    let binary_dir = std::path::Path::new(env!("CARGO_BIN_EXE_ferrite-server")).parent().expect("a directory");
    for needed in ["ferrite-ado", "libferrite_plugin_faulty.so"] {
        assert!(
            binary_dir.join(needed).exists(),
            "{needed} is missing beside the server: run `cargo build --workspace`"
        );
    }
    TestServer::builder().append_config(ADO_CONFIG)
}

fn faulty_pool(server: &TestServer, name: &str, size_bytes: u64) -> Pool {
    let session = Session::connect(&server.addr_string()).expect("connect");
    let options = PoolOptions { plugins: vec!["faulty".into()], size_bytes, ..PoolOptions::default() };
    session.create_pool(name, options).expect("create the pool")
}

fn reopen(server: &TestServer, name: &str) -> Pool {
    Session::connect(&server.addr_string()).expect("connect").open_pool(name).expect("open the pool")
}

/// Runs `payload` on `key` in a thread of its own, after `delay`.
fn invoke_later(
    pool: &Pool,
    key: &'static [u8],
    payload: &str,
    delay: Duration,
) -> std::thread::JoinHandle<Result<(), ferrite_client::Error>> {
    let (pool, payload) = (pool.clone(), payload.to_owned());
    std::thread::spawn(move || {
        std::thread::sleep(delay);
        pool.invoke(key, payload.as_bytes(), InvokeOptions::default()).map(drop)
    })
}

/// Call A declares more ranges than a record lists one by one, in its own value and in memory it
/// allocated, on either side of another key's value; call B, run by the same host right after A,
/// scrawls over that other value in place and fails while the shard logs A. Neither live nor
/// after kill -9 may the other value show B's bytes: A's record holds only what A declared.
#[test]
fn a_calls_record_holds_only_the_bytes_it_declared() {
    let data_dir = fresh_dir("containment-record");
    let mut server = plugin_server().data_dir(&data_dir).start();
    let pool = faulty_pool(&server, "spread", 16 << 20);
    // Values of one size class lie side by side in one slab: A's value, the victim, then the
    // memory A allocates.
    pool.put(b"a-target", [b'a'; 100]).expect("put");
    pool.put(b"victim", [b'v'; 100]).expect("put");
    let a = invoke_later(&pool, b"a-target", "sleep 300; spread 20", Duration::ZERO);
    let b = invoke_later(&pool, b"victim", "scrawl XXXXXXXXXXXX; sleep 700; fail", Duration::from_millis(100));
    a.join().expect("A").expect("A succeeds");
    let failed = b.join().expect("B").expect_err("B fails");
    assert_eq!(failed.code(), Some(ErrorCode::AdoFailed), "{failed}");
    let mut spread = [b'a'; 100];
    for index in 0..20 {
        spread[2 * index] = b'S';
    }
    let check = |pool: &Pool, when: &str| {
        assert_eq!(pool.get(b"victim").expect("victim"), [b'v'; 100], "{when}: B's failed bytes");
        assert_eq!(pool.get(b"a-target").expect("A's value"), spread, "{when}: A's declared bytes");
    };
    check(&pool, "live");
    drop(pool);
    server.kill9();
    let server = plugin_server().data_dir(&data_dir).start();
    check(&reopen(&server, "spread"), "after kill -9");
}

/// Call A writes its value, then sleeps; B, on another key, runs in the same host after it; the
/// pool is full, so A's change to another key is refused when A ends. A fails with `pool_full`
/// and changes nothing, B succeeds, and the server serves on.
#[test]
fn a_call_the_full_pool_refuses_fails_alone() {
    let data_dir = fresh_dir("containment-pool-full");
    let mut server = plugin_server().data_dir(&data_dir).start();
    let pool = faulty_pool(&server, "tight", 1 << 20);
    pool.put(b"target", [b't'; 100]).expect("put");
    pool.put(b"other", [b'o'; 100]).expect("put");
    let mut filled = 0u32;
    while pool.put(format!("filler-{filled:06}"), [7u8; 1000]).is_ok() {
        filled += 1;
        assert!(filled < 10_000, "a 1 MiB pool fills");
    }
    let script = format!("scrawl AAAA; sleep 700; create fresh {}", "f".repeat(3000));
    let a = invoke_later(&pool, b"target", &script, Duration::ZERO);
    let b = invoke_later(&pool, b"other", "scrawl BBBB", Duration::from_millis(200));
    let refused = a.join().expect("A").expect_err("A's change does not fit");
    assert_eq!(refused.code(), Some(ErrorCode::PoolFull), "{refused}");
    b.join().expect("B").expect("B succeeds");
    assert!(server.is_alive(), "the server serves on");
    let check = |pool: &Pool, when: &str| {
        assert_eq!(pool.get(b"target").expect("target"), [b't'; 100], "{when}: A changed nothing");
        assert!(pool.get(b"fresh").expect_err("never created").is_key_not_found(), "{when}");
        let mut other = [b'o'; 100];
        other[..4].copy_from_slice(b"BBBB");
        assert_eq!(pool.get(b"other").expect("other"), other, "{when}: B's change");
    };
    check(&pool, "live");
    drop(pool);
    server.kill9();
    let server = plugin_server().data_dir(&data_dir).start();
    check(&reopen(&server, "tight"), "after kill -9");
}

/// Call A writes its value, then sleeps; B, on another key, runs in the same host after it; the
/// disk fills meanwhile, so the log has no room for A's record when A ends. A fails with
/// `no_space` and changes nothing, B succeeds, and once the disk has room again calls succeed.
#[test]
fn a_call_the_full_disk_refuses_fails_alone() {
    if !small_disk::available() {
        eprintln!("skipping: `unshare -rm` (user and mount namespaces) is not available here");
        return;
    }
    let disk = SmallDisk::new(&fresh_dir("containment-disk-full"), ADO_CONFIG);
    let server = disk.server().start();
    let pool = faulty_pool(&server, "disk", 64 << 20);
    pool.put(b"target", [b't'; 1000]).expect("put");
    pool.put(b"other", [b'o'; 100]).expect("put");
    let fillers = faulty_pool(&server, "fillers", 16 << 20);
    let filler_sizes = [128usize << 10, 16 << 10, 1 << 10, 64];
    for size in filler_sizes {
        fillers.put(format!("filler-{size}"), vec![b'f'; size]).expect("put");
    }
    // Ever smaller puts until the log takes none: a put is admitted only with room for its
    // subtable to grow, so about a megabyte stays.
    let mut filled = 0;
    for size in [200 << 10, 16 << 10, 1 << 10] {
        while pool.put(format!("filler-{filled}"), vec![1u8; size]).is_ok() {
            filled += 1;
            assert!(filled < 10_000, "an 8 MiB disk cannot take this many values");
        }
    }
    let scrawl = format!("scrawl {}; sleep 3000", "A".repeat(900));
    let a = invoke_later(&pool, b"target", &scrawl, Duration::ZERO);
    let b = invoke_later(&pool, b"other", "ok", Duration::from_millis(100));
    std::thread::sleep(Duration::from_millis(400));
    // While A sleeps, B having begun: calls of another pool's host (admitted with room for their own value only)
    // take the rest, and pool settings, whose records are a few bytes, the last of it.
    for size in filler_sizes {
        let key = format!("filler-{size}");
        let script = format!("scrawl {}", "F".repeat(size));
        let mut calls = 0;
        while fillers.invoke(key.as_bytes(), script.as_bytes(), InvokeOptions::default()).is_ok() {
            calls += 1;
            assert!(calls < 10_000, "calls never filled the log");
        }
    }
    let session = Session::connect(&server.addr_string()).expect("connect");
    let mut changes = 0;
    let full = loop {
        let setting = if changes % 2 == 0 { PoolSetting::AddIndex } else { PoolSetting::RemoveIndex };
        if let Err(error) = session.configure_pool("disk", setting) {
            break error;
        }
        changes += 1;
        assert!(changes < 100_000, "pool settings never filled the log");
    };
    assert_eq!(full.code(), Some(ErrorCode::NoSpace), "{full}");
    let refused = a.join().expect("A").expect_err("the log has no room for A's record");
    assert_eq!(refused.code(), Some(ErrorCode::NoSpace), "{refused}");
    b.join().expect("B").expect("B succeeds");
    assert_eq!(pool.get(b"target").expect("target"), [b't'; 1000], "A changed nothing");
    disk.remove_ballast(&server);
    small_disk::once_room_is_back(|| pool.invoke(b"target", b"scrawl CCCC", InvokeOptions::default()));
    let mut changed = [b't'; 1000];
    changed[..4].copy_from_slice(b"CCCC");
    assert_eq!(pool.get(b"target").expect("target"), changed);
}

/// A plugin that zeroes pool memory outside its value faults at the first byte: its call fails,
/// the calls its host had not begun run on a new host, and every other key is intact. A pointer
/// a plugin keeps past its call (here a thread that writes after the call returned) reaches
/// nothing either.
#[test]
fn a_stray_write_faults_and_fails_only_its_call() {
    let data_dir = fresh_dir("containment-stray");
    let mut server = plugin_server().data_dir(&data_dir).start();
    let pool = faulty_pool(&server, "smashed", 16 << 20);
    let key = |i: u32| format!("key-{i:02}");
    let value = |i: u32| vec![i as u8 + 1; 10 + 20 * i as usize];
    for i in 0..50 {
        pool.put(key(i), value(i)).expect("put");
    }
    pool.put(b"target", [b't'; 100]).expect("put");
    // Calls sent while the stray one runs wait in its host; they run on the next host.
    let smash = invoke_later(&pool, b"target", "sleep 300; smash", Duration::ZERO);
    let others: Vec<_> = (0..3)
        .map(|i| invoke_later(&pool, [b"key-00", b"key-01", b"key-02"][i], "scrawl ok", Duration::from_millis(100)))
        .collect();
    let smashed = smash.join().expect("smash").expect_err("the stray write faults");
    assert_eq!(smashed.code(), Some(ErrorCode::AdoFailed), "{smashed}");
    for other in others {
        other.join().expect("call").expect("a call the dead host had not begun runs on the next");
    }
    for i in 0..3 {
        pool.put(key(i), value(i)).expect("put back");
    }
    let intact = |pool: &Pool, when: &str| {
        for i in 0..50 {
            assert_eq!(pool.get(key(i)).unwrap_or_else(|e| panic!("{when}: {}: {e}", key(i))), value(i), "{when}");
        }
        assert_eq!(pool.count().expect("count"), 51, "{when}");
    };
    intact(&pool, "after a stray write");
    pool.invoke(b"target", b"smash-later 200", InvokeOptions::default()).expect("the call itself succeeds");
    std::thread::sleep(Duration::from_millis(600));
    intact(&pool, "after a write through a kept pointer");
    pool.invoke(b"target", b"ok", InvokeOptions::default()).expect("a new host serves");
    drop(pool);
    server.kill9();
    let server = plugin_server().data_dir(&data_dir).start();
    intact(&reopen(&server, "smashed"), "after kill -9");
}

/// With as many calls running as a pool's host takes, a call on key `x` waits in the queue and
/// holds `x` from then on; a running call's callback that erases `x` is refused as locked, so the
/// waiting call finds `x` there.
#[test]
fn a_callback_cannot_change_a_key_a_queued_call_holds() {
    let server = plugin_server().start();
    let pool = faulty_pool(&server, "queued", 16 << 20);
    pool.put(b"x", [b'x'; 100]).expect("put");
    let keys: Vec<String> = (0..64).map(|i| format!("k-{i:02}")).collect();
    for key in &keys {
        pool.put(key, [b'k'; 100]).expect("put");
    }
    std::thread::scope(|scope| {
        let eraser = scope.spawn(|| pool.invoke(keys[0].as_bytes(), b"sleep 500; erase x", InvokeOptions::default()));
        std::thread::sleep(Duration::from_millis(50));
        let others: Vec<_> = keys[1..]
            .iter()
            .map(|key| scope.spawn(|| pool.invoke(key.as_bytes(), b"ok", InvokeOptions::default())))
            .collect();
        std::thread::sleep(Duration::from_millis(150));
        let waiting = scope.spawn(|| pool.invoke(b"x", b"ok", InvokeOptions::default()));
        let refused = eraser.join().expect("eraser").expect_err("x is held by the waiting call");
        assert_eq!(refused.code(), Some(ErrorCode::AdoFailed), "{refused}");
        assert!(refused.to_string().contains("locked"), "{refused}");
        for other in others {
            other.join().expect("call").expect("succeeds");
        }
        waiting.join().expect("waiting call").expect("x is still there");
    });
    assert_eq!(pool.get(b"x").expect("x"), [b'x'; 100]);
}
