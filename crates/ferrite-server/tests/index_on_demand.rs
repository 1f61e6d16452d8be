//! Secondary indexes added to and removed from existing pools (`configure_pool`), through the
//! real server, against a model: an index built while another client writes holds exactly the
//! pool's keys; every kind of `find`, `next:` included, then answers as the model says, page by
//! page, with writes between the pages; the setting survives kill -9; and the index goes again.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::{fresh_dir, TestServer};
use ferrite_client::{blocking, Durability, ErrorCode, FindKind, PoolOptions, PoolSetting};

/// A small deterministic generator (xorshift64*), so a failure can be replayed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn key(&mut self) -> String {
        let prefixes = ["user:", "order:", "item:", "x"];
        let prefix = prefixes[(self.next() % prefixes.len() as u64) as usize];
        format!("{prefix}{}", self.next() % 100_000)
    }
}

fn plain_pool(session: &blocking::Session, name: &str) -> blocking::Pool {
    let options = PoolOptions { size_bytes: 256 << 20, durability: Durability::Async, ..PoolOptions::default() };
    session.create_pool(name, options).expect("create a pool without an index")
}

fn strings(keys: Vec<Vec<u8>>) -> Vec<String> {
    keys.into_iter().map(|key| String::from_utf8(key).expect("test keys are UTF-8")).collect()
}

/// Every key a find of `kind` and `pattern` returns, page by page of `limit`.
fn paged(pool: &blocking::Pool, kind: FindKind, pattern: &str, limit: u32) -> Vec<String> {
    let mut keys = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = pool.find(kind, pattern.as_bytes(), after.as_deref(), limit).expect("find");
        keys.extend(strings(page.keys));
        match page.next {
            Some(next) => after = Some(next),
            None => return keys,
        }
    }
}

#[test]
fn an_index_built_while_clients_write_answers_every_find_as_the_model_does() {
    let server = TestServer::start(&[]);
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = plain_pool(&session, "orders");
    let mut random = Random(0x5eed_1dea);
    let model = Arc::new(Mutex::new(BTreeSet::new()));
    for _ in 0..20_000 {
        let key = random.key();
        pool.put(&key, b"v").expect("put");
        model.lock().expect("model").insert(key);
    }
    let error = pool.find(FindKind::Next, b"user:", None, 10).expect_err("next: needs an index");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");

    // Another client writes and erases while the index is built.
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(std::sync::Barrier::new(2));
    let writer = {
        let (address, model, stop) = (server.addr_string(), Arc::clone(&model), Arc::clone(&stop));
        let started = Arc::clone(&started);
        std::thread::spawn(move || {
            let session = blocking::Session::connect(&address).expect("connect");
            let pool = session.open_pool("orders").expect("open");
            let mut random = Random(0xfeed_beef);
            let mut writes = 0;
            while !stop.load(Ordering::SeqCst) || writes < 200 {
                let key = random.key();
                if random.next().is_multiple_of(3) {
                    match pool.erase(&key) {
                        Ok(()) => assert!(model.lock().expect("model").remove(&key)),
                        Err(error) => assert!(error.is_key_not_found(), "{error}"),
                    }
                } else {
                    pool.put(&key, b"w").expect("put");
                    model.lock().expect("model").insert(key);
                }
                writes += 1;
                if writes == 50 {
                    started.wait();
                }
            }
            writes
        })
    };
    started.wait();
    session.configure_pool("orders", PoolSetting::AddIndex).expect("add an index");
    stop.store(true, Ordering::SeqCst);
    assert!(writer.join().expect("the writer") >= 200);
    let model: Vec<String> = model.lock().expect("model").iter().cloned().collect();
    assert_eq!(paged(&pool, FindKind::Prefix, "", 1024), model, "the index holds exactly the pool's keys, in order");
    session.configure_pool("orders", PoolSetting::AddIndex).expect("adding an index it has changes nothing");

    let expect = |kind: FindKind, pattern: &str, wanted: Vec<&String>| {
        for limit in [1, 7, 1024] {
            let found = paged(&pool, kind, pattern, limit);
            assert_eq!(found.iter().collect::<Vec<_>>(), wanted, "{kind:?} {pattern:?} in pages of {limit}");
        }
    };
    expect(FindKind::Prefix, "user:1", model.iter().filter(|k| k.starts_with("user:1")).collect());
    expect(FindKind::Exact, &model[17], vec![&model[17]]);
    expect(FindKind::Exact, "absent", vec![]);
    expect(
        FindKind::Glob,
        "item:?7",
        model.iter().filter(|k| k.len() == 7 && k.starts_with("item:") && k.ends_with('7')).collect(),
    );
    expect(
        FindKind::Regex,
        "^x9+$",
        model.iter().filter(|k| k.starts_with('x') && k[1..].chars().all(|c| c == '9') && k.len() > 1).collect(),
    );
    expect(FindKind::Next, "order:5", model.iter().filter(|k| k.as_str() > "order:5").collect());
    expect(FindKind::Next, &model[100], model[101..].iter().collect());
    let first_after = pool.find(FindKind::Next, model[100].as_bytes(), None, 1).expect("next");
    assert_eq!(strings(first_after.keys), [model[101].clone()], "next: is the first key after the given one");

    // Paging while the pool changes: keys present throughout come exactly once, in order.
    let mut seen = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    let mut random = Random(7);
    loop {
        let page = pool.find(FindKind::Prefix, b"", after.as_deref(), 500).expect("page");
        seen.extend(strings(page.keys));
        for _ in 0..50 {
            pool.put(format!("new:{}", random.next()), b"n").expect("put between pages");
        }
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert!(seen.windows(2).all(|pair| pair[0] < pair[1]), "pages come in key order, each key once");
    let seen: BTreeSet<&String> = seen.iter().collect();
    assert!(model.iter().all(|key| seen.contains(key)), "every key present throughout was found");

    let error = pool.find(FindKind::Regex, b"(unclosed", None, 10).expect_err("a bad regular expression");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    let missing = session.configure_pool("nosuch", PoolSetting::AddIndex).expect_err("no such pool");
    assert_eq!(missing.code(), Some(ErrorCode::PoolNotFound), "{missing}");

    session.configure_pool("orders", PoolSetting::RemoveIndex).expect("remove the index");
    let error = pool.find(FindKind::Next, b"a", None, 1).expect_err("next: needs the index removed");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    let walked: BTreeSet<String> = paged(&pool, FindKind::Prefix, "user:", 1024).into_iter().collect();
    let users: BTreeSet<String> = model.iter().filter(|k| k.starts_with("user:")).cloned().collect();
    assert_eq!(walked, users, "without the index, find walks the table");
}

/// A checkpoint after every 4 MiB of log (the smallest segment size the default limits allow),
/// so a test can make one happen.
const SMALL_CHECKPOINTS: &str = "[durability]\nwal_segment_bytes = 4194304\ncheckpoint_wal_bytes = 4194304\n";

#[test]
fn the_index_setting_survives_kill_9() {
    let data_dir = fresh_dir("index-on-demand-crash");
    let start = || TestServer::builder().data_dir(&data_dir).append_config(SMALL_CHECKPOINTS).start();
    let mut server = start();
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = plain_pool(&session, "kept");
    for i in 0..2_000 {
        pool.put(format!("k{i:05}"), b"v").expect("put");
    }
    session.configure_pool("kept", PoolSetting::AddIndex).expect("add an index");
    // A checkpoint after the setting: the restart reads it from the checkpoint's descriptor, not
    // from the log record, which the checkpoint has made unnecessary.
    let checkpoints = || session.statistics().expect("statistics")[0].get("checkpoints").expect("a durable shard");
    let before = checkpoints();
    let filler = plain_pool(&session, "filler");
    let mut i = 0;
    common::wait_until("a checkpoint after the setting", std::time::Duration::from_secs(60), || {
        for _ in 0..200 {
            filler.put(format!("f{i}"), [0u8; 4096]).expect("put");
            i += 1;
        }
        (checkpoints() > before).then_some(())
    });
    server.kill9();

    let mut server = start();
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = session.open_pool("kept").expect("open");
    let next = pool.find(FindKind::Next, b"k00041", None, 3).expect("the index came back with the pool");
    assert_eq!(strings(next.keys), ["k00042", "k00043", "k00044"]);
    session.configure_pool("kept", PoolSetting::RemoveIndex).expect("remove the index");
    server.kill9();

    let server = start();
    let session = blocking::Session::connect(&server.addr_string()).expect("connect");
    let pool = session.open_pool("kept").expect("open");
    let error = pool.find(FindKind::Next, b"k", None, 1).expect_err("the removal came back too");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    assert_eq!(pool.count().expect("count"), 2_000);
}
