//! A full disk end to end: the server's data directory is on a small tmpfs (mounted in a private
//! mount namespace, so no privileges beyond an unprivileged user namespace are needed). Writes
//! fill it until the log has no room; then every write is refused with `no_space` and changes
//! nothing, reads keep working, and once space is freed (a ballast file removed) writes succeed
//! again, with every acknowledged value still readable.
//!
//! Where user namespaces are not available the test says so and passes without running.

mod common;
mod small_disk;

use common::fresh_dir;
use ferrite_client::blocking::Session;
use ferrite_client::{ErrorCode, FindKind, PoolOptions, PoolSetting};
use small_disk::SmallDisk;

#[test]
fn a_full_disk_refuses_writes_cleanly_and_recovers_when_space_returns() {
    if !small_disk::available() {
        eprintln!("skipping: `unshare -rm` (user and mount namespaces) is not available here");
        return;
    }
    let disk = SmallDisk::new(&fresh_dir("disk-full"), "");
    let server = disk.server().start();
    let session = Session::connect(&server.addr_string()).expect("connect");
    let options = PoolOptions { size_bytes: 64 << 20, expected_objects: 64, ..PoolOptions::default() };
    let pool = session.create_pool("filler", options).expect("create");
    let value = |i: usize| vec![(i % 251) as u8; 200 * 1024];
    let mut stored = 0;
    let refusal = loop {
        match pool.put(format!("key-{stored}"), value(stored)) {
            Ok(()) => stored += 1,
            Err(error) => break error,
        }
        assert!(stored < 100, "an 8 MiB disk cannot take 20 MiB of values");
    };
    assert_eq!(refusal.code(), Some(ErrorCode::NoSpace), "{refusal}");
    assert!(refusal.to_string().contains("nothing was written"), "{refusal}");
    assert!(stored >= 3, "some writes fit before the disk filled ({stored})");
    // Refused again, and nothing changed: the refused key is absent, the others intact.
    let again = pool.put(format!("key-{stored}"), value(stored)).expect_err("still full");
    assert_eq!(again.code(), Some(ErrorCode::NoSpace));
    assert!(pool.get(format!("key-{stored}")).expect_err("never written").is_key_not_found());
    assert_eq!(pool.count().expect("count"), stored as u64);

    // A direct put (values past the 256 KiB inline limit here) is refused the same way, piece by
    // piece: the key keeps its old value, and the room staged for the new one is given back.
    let used = pool.pool_attributes().expect("attributes").used_bytes;
    let large = vec![b'L'; 512 << 10];
    let direct = pool.put_direct("key-0", &large).expect_err("no room for the pieces");
    assert_eq!(direct.code(), Some(ErrorCode::NoSpace), "{direct}");
    assert_eq!(pool.get("key-0").expect("the old value"), value(0));
    let direct = pool.put_direct("direct-new", &large).expect_err("no room for the pieces");
    assert_eq!(direct.code(), Some(ErrorCode::NoSpace), "{direct}");
    assert!(pool.get("direct-new").expect_err("never stored").is_key_not_found());
    assert_eq!(pool.pool_attributes().expect("attributes").used_bytes, used, "nothing staged stays");

    // Filled with small writes too, the log still has room for a pool setting's small record:
    // adding and removing the index in turn uses it up, until one of them is refused for want of
    // room. The refused one changes nothing: the pool has an index exactly if the refused change
    // was its removal.
    let mut small = 0;
    for size in [16 * 1024, 1024, 64, 1] {
        while pool.put(format!("small-{small}"), vec![b's'; size]).is_ok() {
            small += 1;
            assert!(small < 100_000, "the log never filled up");
        }
    }
    let has_index = || pool.find(FindKind::Next, b"key-", None, 1).is_ok();
    let mut changes = 0;
    let refused = loop {
        let setting = if changes % 2 == 0 { PoolSetting::AddIndex } else { PoolSetting::RemoveIndex };
        match session.configure_pool("filler", setting) {
            Ok(()) => assert_eq!(has_index(), setting == PoolSetting::AddIndex, "{setting:?} applied"),
            Err(error) => break (setting, error),
        }
        changes += 1;
        assert!(changes < 100_000, "pool settings never filled the log");
    };
    assert_eq!(refused.1.code(), Some(ErrorCode::NoSpace), "{}", refused.1);
    assert_eq!(has_index(), refused.0 == PoolSetting::RemoveIndex, "a refused {:?} changed nothing", refused.0);

    disk.remove_ballast(&server);
    small_disk::once_room_is_back(|| pool.put(format!("key-{stored}"), value(stored)));
    pool.put_direct("direct-new", &large).expect("space is back: a direct put succeeds");
    assert!(pool.get("direct-new").expect("read directly") == large);
    session.configure_pool("filler", PoolSetting::AddIndex).expect("space is back: the index is added");
    let next = pool.find(FindKind::Next, b"key-0", None, 1).expect("the index serves next:");
    assert_eq!(next.keys, [b"key-1".to_vec()]);
    for i in 0..=stored {
        assert_eq!(pool.get(format!("key-{i}")).expect("every acknowledged value"), value(i), "key-{i}");
    }
    drop(pool);
    server.stop_gracefully();
}
