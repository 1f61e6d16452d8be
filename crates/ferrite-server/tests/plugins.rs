//! Active Data Objects through the real server and its `ferrite-ado` host processes, with the
//! shipped plugins (`counter`, `faulty`) that `cargo build --workspace` puts beside the server:
//! invocation and its flags, chains, key locks, containment of misbehaving plugins while other
//! clients carry on, and the crash consistency of plugin writes across kill -9.

mod common;
mod wire;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{fresh_dir, ServerBuilder, TestServer};
use ferrite_client::blocking::{Pool, Session};
use ferrite_client::{Attribute, ErrorCode, InvokeOptions, InvokePutOptions, InvokeResponse, PoolOptions};

/// A server whose plugin calls time out after `timeout_ms` and whose hosts may use 256 MiB.
fn server_with_limits(timeout_ms: u64) -> ServerBuilder {
    let binary_dir = std::path::Path::new(env!("CARGO_BIN_EXE_ferrite-server")).parent().expect("a directory");
    for needed in ["ferrite-ado", "libferrite_plugin_counter.so", "libferrite_plugin_faulty.so"] {
        assert!(
            binary_dir.join(needed).exists(),
            "{needed} is missing beside the server: run `cargo build --workspace` first"
        );
    }
    TestServer::builder()
        .append_config(&format!("[ado]\ncall_timeout_ms = {timeout_ms}\nmemory_limit_bytes = 268435456"))
}

fn chain(names: &[&str]) -> PoolOptions {
    PoolOptions { plugins: names.iter().map(|name| (*name).to_owned()).collect(), ..PoolOptions::default() }
}

fn open(server: &TestServer, pool: &str, plugins: &[&str]) -> (Session, Pool) {
    let session = Session::connect(&server.addr_string()).expect("connect");
    let pool = session.create_pool(pool, chain(plugins)).expect("create the pool");
    (session, pool)
}

fn created(size: u64) -> InvokeOptions {
    InvokeOptions { create_size: Some(size), ..InvokeOptions::default() }
}

fn texts(responses: &[InvokeResponse]) -> Vec<(u16, String)> {
    responses.iter().map(|r| (r.layer, String::from_utf8_lossy(&r.data).into_owned())).collect()
}

fn counter_value(pool: &Pool, key: &[u8]) -> u64 {
    let bytes = pool.get(key).expect("the counter exists");
    u64::from_le_bytes(bytes[..].try_into().expect("8 bytes"))
}

/// A counter's value, 0 while it does not exist yet.
fn counted(pool: &Pool, key: &[u8]) -> u64 {
    match pool.get(key) {
        Ok(bytes) => u64::from_le_bytes(bytes[..].try_into().expect("8 bytes")),
        Err(error) if error.code() == Some(ErrorCode::KeyNotFound) => 0,
        Err(error) => panic!("reading the counter: {error}"),
    }
}

#[test]
fn counters_count_every_acknowledged_increment_once_across_kill_9() {
    let data_dir = fresh_dir("plugins-counter").join("data");
    let mut server = server_with_limits(10_000).data_dir(&data_dir).start();
    let (_session, pool) = open(&server, "counters", &["counter"]);
    assert_eq!(texts(&pool.invoke(b"hits", b"add 5", created(8)).expect("add")), [(0, "5".to_owned())]);
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let address = server.addr_string();
            std::thread::spawn(move || {
                let session = Session::connect(&address).expect("connect");
                let pool = session.open_pool("counters").expect("open");
                let mut acknowledged = 0;
                for _ in 0..50 {
                    pool.invoke(b"hits", b"add 1", InvokeOptions::default()).expect("add 1");
                    acknowledged += 1;
                    pool.invoke(format!("own-{w}").as_bytes(), b"add 2", created(8)).expect("add 2");
                }
                acknowledged
            })
        })
        .collect();
    let acknowledged: u64 = writers.into_iter().map(|w| w.join().expect("writer")).sum();
    assert_eq!(counter_value(&pool, b"hits"), 5 + acknowledged);
    assert_eq!(texts(&pool.invoke(b"hits", b"get", InvokeOptions::default()).expect("get")), [(0, "205".to_owned())]);
    drop(pool);
    server.kill9();
    let server = server_with_limits(10_000).data_dir(&data_dir).start();
    let session = Session::connect(&server.addr_string()).expect("reconnect");
    let pool = session.open_pool("counters").expect("open");
    assert_eq!(counter_value(&pool, b"hits"), 205, "every acknowledged increment survives, once");
    for w in 0..4 {
        assert_eq!(counter_value(&pool, format!("own-{w}").as_bytes()), 100);
    }
}

/// Whether `key` is absent from `pool`.
fn absent(pool: &Pool, key: &[u8]) -> bool {
    match pool.get(key) {
        Err(error) => error.code() == Some(ErrorCode::KeyNotFound),
        Ok(_) => false,
    }
}

/// A call that fails, or whose host dies, leaves its key as it was: `invoke_put_ado`'s value, a
/// value created on demand and the empty value a detached call gives an absent key are stored
/// only if the call succeeds, in its transaction, so neither the live pool nor a restart after
/// kill -9 shows them.
#[test]
fn a_failed_call_stores_neither_its_put_nor_a_key_it_creates() {
    let data_dir = fresh_dir("failed-call-values");
    let mut server = server_with_limits(10_000).data_dir(&data_dir).start();
    let (_session, pool) = open(&server, "values", &["faulty"]);
    pool.put(b"kept", b"original").expect("put");
    let detached = InvokePutOptions { detached: true, ..InvokePutOptions::default() };
    for payload in [&b"fail"[..], b"panic", b"segv"] {
        let what = String::from_utf8_lossy(payload);
        let replaced = pool.invoke_put(b"kept", b"replaced", payload, InvokePutOptions::default());
        assert_eq!(replaced.expect_err("the call fails").code(), Some(ErrorCode::AdoFailed), "{what}");
        assert_eq!(pool.get(b"kept").expect("kept"), &b"original"[..], "{what}: the put was not stored");
        let new_key = pool.invoke_put(b"put-new", b"created", payload, InvokePutOptions::default());
        assert_eq!(new_key.expect_err("the call fails").code(), Some(ErrorCode::AdoFailed), "{what}");
        assert!(absent(&pool, b"put-new"), "{what}: the put's new key was not stored");
        let zeroed = pool.invoke(b"on-demand", payload, created(8));
        assert_eq!(zeroed.expect_err("the call fails").code(), Some(ErrorCode::AdoFailed), "{what}");
        assert!(absent(&pool, b"on-demand"), "{what}: the key created on demand was not stored");
        let carried = pool.invoke_put(b"carrier", b"bytes", payload, detached);
        assert_eq!(carried.expect_err("the call fails").code(), Some(ErrorCode::AdoFailed), "{what}");
        assert!(absent(&pool, b"carrier"), "{what}: the detached call's key was not stored");
    }
    pool.invoke_put(b"put-new", b"created", b"ok", InvokePutOptions::default()).expect("ok");
    pool.invoke(b"on-demand", b"ok", created(8)).expect("ok");
    pool.invoke_put(b"carrier", b"bytes", b"ok", detached).expect("ok");
    let stored = |pool: &Pool| {
        assert_eq!(pool.get(b"kept").expect("kept"), &b"original"[..]);
        assert_eq!(pool.get(b"put-new").expect("stored by a successful call"), &b"created"[..]);
        assert_eq!(pool.get(b"on-demand").expect("created by a successful call"), &[0; 8][..]);
        assert_eq!(pool.get(b"carrier").expect("created by a successful call"), &b""[..]);
    };
    stored(&pool);
    drop(pool);
    server.kill9();
    let server = server_with_limits(10_000).data_dir(&data_dir).start();
    let session = Session::connect(&server.addr_string()).expect("reconnect");
    stored(&session.open_pool("values").expect("open"));
}

#[test]
fn a_chain_answers_with_each_layers_buffers_and_invoke_put_stores_first() {
    let server = server_with_limits(10_000).start();
    let (session, pool) = open(&server, "chained", &["counter", "counter"]);
    // Both layers add one, in order, each answering the value it left.
    let answer = pool.invoke(b"c", b"add 1", created(8)).expect("invoke");
    assert_eq!(texts(&answer), [(0, "1".to_owned()), (1, "2".to_owned())]);
    let put = pool.invoke_put(b"p", &10u64.to_le_bytes(), b"add 5", InvokePutOptions::default()).expect("put");
    assert_eq!(texts(&put), [(0, "15".to_owned()), (1, "20".to_owned())]);
    let kept = InvokePutOptions { no_overwrite: true, ..InvokePutOptions::default() };
    let put = pool.invoke_put(b"p", &0u64.to_le_bytes(), b"get", kept).expect("no overwrite");
    assert_eq!(texts(&put), [(0, "20".to_owned()), (1, "20".to_owned())], "the existing value is kept");
    let missing = pool.invoke(b"absent", b"get", InvokeOptions::default()).expect_err("no create-on-demand");
    assert_eq!(missing.code(), Some(ErrorCode::KeyNotFound), "{missing}");
    let read_only = InvokeOptions { read_only: true, ..InvokeOptions::default() };
    let refused = pool.invoke(b"c", b"add 1", read_only).expect_err("a read-only call cannot write");
    assert_eq!(refused.code(), Some(ErrorCode::AdoFailed), "{refused}");
    assert_eq!(counter_value(&pool, b"c"), 2, "a refused write changes nothing");
    let forget = InvokeOptions { fire_and_forget: true, ..InvokeOptions::default() };
    assert!(pool.invoke(b"c", b"add 1", forget).expect("accepted").is_empty());
    // The next call on the key runs after the forgotten one.
    assert_eq!(
        texts(&pool.invoke(b"c", b"get", InvokeOptions::default()).expect("get")),
        [(0, "4".to_owned()), (1, "4".to_owned())]
    );
    let plain = session.create_pool("plain", PoolOptions::default()).expect("no plugins");
    let error = plain.invoke(b"k", b"get", created(8)).expect_err("a pool without plugins");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
}

/// Each misbehaving payload of `faulty` costs only its own call: the caller gets a clear error,
/// the value it was given is as before, the host is restarted for the next call, and a client of
/// another pool on the same shard sees no error throughout.
#[test]
fn misbehaving_plugins_cost_only_their_own_call() {
    let server = server_with_limits(1_000).start();
    let (session, faulty) = open(&server, "faulty", &["faulty"]);
    let bystander = session.create_pool("bystander", PoolOptions::default()).expect("a plain pool");
    bystander.put(b"k", b"v").expect("put");
    let stop = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicU64::new(0));
    let other = {
        let (address, stop, served) = (server.addr_string(), Arc::clone(&stop), Arc::clone(&served));
        std::thread::spawn(move || {
            let session = Session::connect(&address).expect("connect");
            let pool = session.open_pool("bystander").expect("open");
            while !stop.load(Ordering::Relaxed) {
                pool.put(b"k", b"v2").expect("a bystander's put");
                assert_eq!(pool.get(b"k").expect("a bystander's get"), &b"v2"[..]);
                served.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // 100 bytes: kept out of line, so the plugin changes the value in place (and the undo of
    // each failure is the host's or the link's, from the before-images).
    let ok = faulty.invoke(b"v", b"ok", created(100)).expect("ok");
    assert_eq!(texts(&ok), [(0, "ok".to_owned())]);
    let before = faulty.get(b"v").expect("the value");
    for (payload, code) in [
        ("write-then-fail", ErrorCode::AdoFailed),
        ("panic", ErrorCode::AdoFailed),
        ("abort", ErrorCode::AdoFailed),
        ("segv", ErrorCode::AdoFailed),
        ("oom", ErrorCode::AdoFailed),
        ("loop", ErrorCode::AdoTimeout),
    ] {
        let error = faulty.invoke(b"v", payload.as_bytes(), InvokeOptions::default()).expect_err(payload);
        assert_eq!(error.code(), Some(code), "{payload}: {error}");
        assert_eq!(faulty.get(b"v").expect("the value"), before, "{payload} left the value as it was");
        let again = faulty.invoke(b"v", b"ok", InvokeOptions::default()).expect("the host serves again");
        assert_eq!(texts(&again), [(0, "ok".to_owned())], "after {payload}");
    }
    stop.store(true, Ordering::Relaxed);
    other.join().expect("the bystander saw no error");
    assert!(served.load(Ordering::Relaxed) > 0, "the bystander was served meanwhile");
}

/// A call of `faulty` that loops on key `k` of `pool` until its deadline, from a session of its
/// own: its error code once it ends, and a flag set when it has.
fn looping_call(
    server: &TestServer,
    pool: &str,
    options: InvokeOptions,
) -> (std::thread::JoinHandle<Option<ErrorCode>>, Arc<AtomicBool>) {
    let finished = Arc::new(AtomicBool::new(false));
    let (address, pool, ended) = (server.addr_string(), pool.to_owned(), Arc::clone(&finished));
    let looping = std::thread::spawn(move || {
        let session = Session::connect(&address).expect("connect");
        let pool = session.open_pool(&pool).expect("open");
        let error = pool.invoke(b"k", b"loop", options).expect_err("times out");
        ended.store(true, Ordering::SeqCst);
        error.code()
    });
    std::thread::sleep(Duration::from_millis(300));
    (looping, finished)
}

/// A request on a key a call holds waits for the call, then runs; requests on other keys do not
/// wait.
#[test]
fn requests_on_a_held_key_wait_for_the_call() {
    let server = server_with_limits(1_500).start();
    let (_session, faulty) = open(&server, "held", &["faulty"]);
    faulty.invoke(b"k", b"ok", created(8)).expect("create k");
    faulty.put(b"other", b"o").expect("put other");
    let (looping, finished) = looping_call(&server, "held", InvokeOptions::default());
    assert_eq!(faulty.get(b"other").expect("another key"), &b"o"[..]);
    assert!(!finished.load(Ordering::SeqCst), "a request on another key did not wait for the call");
    faulty.put(b"k", [1; 8]).expect("a put on the held key, once the call ended");
    assert!(finished.load(Ordering::SeqCst), "the put on the held key waited for the call");
    assert_eq!(looping.join().expect("the looping call"), Some(ErrorCode::AdoTimeout));
    assert_eq!(faulty.get(b"k").expect("k"), &[1; 8][..]);
}

/// A read-only call holds its key against writers only: a get on the key runs at once, a put on
/// it waits for the call.
#[test]
fn a_read_only_call_holds_its_key_against_writers_only() {
    let server = server_with_limits(1_500).start();
    let (_session, faulty) = open(&server, "read-held", &["faulty"]);
    faulty.invoke(b"k", b"ok", created(8)).expect("create k");
    let read_only = InvokeOptions { read_only: true, ..InvokeOptions::default() };
    let (looping, finished) = looping_call(&server, "read-held", read_only);
    assert_eq!(faulty.get(b"k").expect("a get under a read lock"), &[0; 8][..]);
    assert!(!finished.load(Ordering::SeqCst), "the get did not wait for the read-only call");
    faulty.put(b"k", [2; 8]).expect("a put on the read-locked key, once the call ended");
    assert!(finished.load(Ordering::SeqCst), "the put waited for the read-only call");
    assert_eq!(looping.join().expect("the looping call"), Some(ErrorCode::AdoTimeout));
    assert_eq!(faulty.get(b"k").expect("k"), &[2; 8][..]);
}

/// kill -9 in the middle of concurrent increments, round after round: after each restart every
/// acknowledged increment is counted, and at most the one each writer had in flight besides.
#[test]
fn increments_survive_kill_9_mid_load_exactly_once() {
    const WRITERS: usize = 3;
    const ROUNDS: usize = 4;
    let data_dir = fresh_dir("plugins-torture").join("data");
    let mut acknowledged = 0u64;
    for round in 0..ROUNDS {
        let mut server = server_with_limits(10_000).data_dir(&data_dir).start();
        let (_session, pool) = open(&server, "torture", &["counter"]);
        let found = counted(&pool, b"n");
        assert!(
            found >= acknowledged && found <= acknowledged + WRITERS as u64,
            "round {round}: {found} after {acknowledged} acknowledged increments and {WRITERS} in flight at most"
        );
        acknowledged = found;
        let writers: Vec<_> = (0..WRITERS)
            .map(|_| {
                let address = server.addr_string();
                std::thread::spawn(move || {
                    let Ok(session) = Session::connect(&address) else { return 0 };
                    let Ok(pool) = session.open_pool("torture") else { return 0 };
                    let mut acknowledged = 0u64;
                    while pool.invoke(b"n", b"add 1", created(8)).is_ok() {
                        acknowledged += 1;
                    }
                    acknowledged
                })
            })
            .collect();
        // Let the writers get going, then kill the server under them.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while counted(&pool, b"n") < acknowledged + 30 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(pool);
        server.kill9();
        acknowledged += writers.into_iter().map(|w| w.join().expect("writer")).sum::<u64>();
    }
    let server = server_with_limits(10_000).data_dir(&data_dir).start();
    let (_session, pool) = open(&server, "torture", &["counter"]);
    let found = counted(&pool, b"n");
    assert!(found >= acknowledged && found <= acknowledged + WRITERS as u64, "{found} after {acknowledged}");
    assert!(acknowledged > 30 * ROUNDS as u64 / 2, "the writers made progress in every round: {acknowledged}");
}

/// Sends one RESP command and reads its reply whole, as text (`:N`, `-ERR ...`, or an array as
/// `[a, b]` of its bulk strings and other elements' lines): enough for the replies plugin calls
/// give.
fn resp(stream: &mut std::io::BufReader<std::net::TcpStream>, args: &[&str]) -> String {
    use std::io::{BufRead, Read, Write};
    let mut command = format!("*{}\r\n", args.len());
    for arg in args {
        command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.get_mut().write_all(command.as_bytes()).expect("send");
    let mut line = String::new();
    stream.read_line(&mut line).expect("reply");
    let line = line.trim_end().to_owned();
    let Some(count) = line.strip_prefix('*') else { return line };
    let mut items = Vec::new();
    for _ in 0..count.parse::<usize>().expect("an array length") {
        let mut header = String::new();
        stream.read_line(&mut header).expect("an element");
        let Some(len) = header.trim_end().strip_prefix('$').filter(|len| *len != "-1") else {
            items.push(header.trim_end().to_owned());
            continue;
        };
        let len: usize = len.parse().expect("a bulk length");
        let mut bulk = vec![0; len + 2];
        stream.read_exact(&mut bulk).expect("a bulk");
        items.push(String::from_utf8_lossy(&bulk[..len]).into_owned());
    }
    format!("[{}]", items.join(", "))
}

/// The RESP default pool with `[resp] plugins = ["counter"]`: `INCR` and kin count through the
/// plugin (durably, across kill -9), `FERRITE.INVOKE` answers the chain's buffers, and a plugin
/// call inside `MULTI` is refused.
#[test]
fn resp_clients_count_through_the_default_pools_counter() {
    let data_dir = fresh_dir("plugins-resp").join("data");
    let resp_counter = "[resp]\nplugins = [\"counter\"]";
    let mut server = server_with_limits(10_000).resp().append_config(resp_counter).data_dir(&data_dir).start();
    let connect = |server: &TestServer| {
        let stream = std::net::TcpStream::connect(server.resp_addr(0)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        std::io::BufReader::new(stream)
    };
    let mut client = connect(&server);
    assert_eq!(resp(&mut client, &["INCR", "hits"]), ":1");
    assert_eq!(resp(&mut client, &["INCRBY", "hits", "41"]), ":42");
    assert_eq!(resp(&mut client, &["DECR", "hits"]), ":41");
    assert_eq!(resp(&mut client, &["FERRITE.INVOKE", "hits", "get"]), "[41]");
    assert_eq!(resp(&mut client, &["FERRITE.INVOKE", "fresh", "add 2", "CREATE", "8"]), "[2]");
    let missing = resp(&mut client, &["FERRITE.INVOKE", "absent", "get"]);
    assert!(missing.starts_with("-ERR") && missing.contains("key not found"), "{missing}");
    assert_eq!(resp(&mut client, &["MULTI"]), "+OK");
    assert_eq!(resp(&mut client, &["INCR", "hits"]), "+QUEUED");
    let exec = resp(&mut client, &["EXEC"]);
    assert!(exec.starts_with("[-ERR") && exec.contains("cannot run inside MULTI"), "{exec}");
    drop(client);
    server.kill9();
    let server = server_with_limits(10_000).resp().append_config(resp_counter).data_dir(&data_dir).start();
    let mut client = connect(&server);
    assert_eq!(resp(&mut client, &["INCR", "hits"]), ":42", "acknowledged increments survived");
}

/// The client's typed helpers for the shipped plugins, against the real server: counters with
/// compare-and-swap, the tabulator's running statistics, versions, and filtering.
#[test]
fn the_clients_plugin_helpers_work_against_the_server() {
    use ferrite_client::plugins::blocking::{Counter, Filter, Tabulator, Versioning};

    let binary_dir = std::path::Path::new(env!("CARGO_BIN_EXE_ferrite-server")).parent().expect("a directory");
    assert!(binary_dir.join("libferrite_plugin_tabulator.so").exists(), "run `cargo build --workspace` first");
    let server = server_with_limits(10_000).start();
    let (session, counters) = open(&server, "helpers", &["counter"]);
    assert_eq!(Counter::add(&counters, b"c", 5).expect("add"), 5);
    assert_eq!(Counter::add(&counters, b"c", -2).expect("add"), 3);
    assert_eq!(Counter::compare_and_swap(&counters, b"c", 3, 10).expect("cas"), Ok(10));
    assert_eq!(Counter::compare_and_swap(&counters, b"c", 3, 11).expect("cas"), Err(10));
    assert_eq!(Counter::get(&counters, b"c").expect("get"), 10);
    let samples = session.create_pool("samples", chain(&["tabulator"])).expect("create");
    Tabulator::add(&samples, b"t", &[4.0, -2.0]).expect("add");
    let stats = Tabulator::add(&samples, b"t", &[10.5, 1.5]).expect("add");
    assert_eq!((stats.count, stats.min, stats.max, stats.mean), (4, -2.0, 10.5, 3.5));
    Tabulator::reset(&samples, b"t").expect("reset");
    assert_eq!(Tabulator::get(&samples, b"t").expect("get").count, 0);

    let documents = session.create_pool("documents", chain(&["versioning"])).expect("create");
    // Four versions of up to 60 bytes.
    let size = 32 + 4 * (4 + 60);
    for (n, text) in ["one", "two", "three", "four", "five"].iter().enumerate() {
        assert_eq!(Versioning::put(&documents, b"d", text.as_bytes(), size).expect("put"), n as u64 + 1);
    }
    assert_eq!(Versioning::get(&documents, b"d", None).expect("newest"), b"five");
    assert_eq!(Versioning::get(&documents, b"d", Some(2)).expect("version 2"), b"two");
    assert!(Versioning::get(&documents, b"d", Some(1)).is_err(), "version 1 is no longer kept");
    assert_eq!(Versioning::list(&documents, b"d").expect("list"), vec![(2, 3), (3, 5), (4, 4), (5, 4)]);
    // `invoke_put_ado` stores a version with the detached flag (the value sent is the data); a
    // plain one would replace the versions with the data, which the plugin refuses, and the
    // call's put is undone with it.
    let detached = InvokePutOptions { detached: true, ..InvokePutOptions::default() };
    let stored = documents.invoke_put(b"d", b"six", b"put", detached).expect("a version from a detached value");
    assert_eq!(texts(&stored), [(0, "6".to_owned())]);
    let used = documents.pool_attributes().expect("attributes").used_bytes;
    let stored = documents.invoke_put(b"d", b"seven", b"put", detached).expect("a version from a detached value");
    assert_eq!(texts(&stored), [(0, "7".to_owned())]);
    let after = documents.pool_attributes().expect("attributes").used_bytes;
    assert_eq!(after, used, "the detached value's memory was freed");
    let plain = documents.invoke_put(b"d", b"eight", b"put", InvokePutOptions::default());
    assert_eq!(plain.expect_err("not a versioning value").code(), Some(ErrorCode::AdoFailed));
    assert_eq!(Versioning::get(&documents, b"d", None).expect("newest"), b"seven", "the history is whole");

    let fruit = session.create_pool("fruit-helpers", chain(&["filter"])).expect("create");
    fruit.put(b"apple", b"red").expect("put");
    fruit.put(b"lime", b"green").expect("put");
    assert_eq!(Filter::keys(&fruit, b"contains red").expect("filter"), vec![b"apple".to_vec()]);
}

/// A call's value stays its own while other clients change the pool under it: inserts that move
/// the table's entries about (hopscotch displacement, subtable growth) neither lose the call's
/// write nor receive it, whether the value lives in its entry (put back with the write) or out of
/// line (the write copied onto it); and the write survives kill -9. The call lasts until the
/// inserts are done (it waits for a key the test writes last).
#[test]
fn a_calls_write_lands_on_its_own_value_while_the_table_changes() {
    for size in [8usize, 100] {
        let data_dir = fresh_dir(&format!("plugins-moving-{size}")).join("data");
        let mut server = server_with_limits(10_000).data_dir(&data_dir).start();
        let session = Session::connect(&server.addr_string()).expect("connect");
        // Without a sizing hint the subtables start at 64 buckets: a few hundred inserts grow them.
        let options = PoolOptions { expected_objects: 1, size_bytes: 4 << 20, ..chain(&["faulty"]) };
        let pool = session.create_pool("moving", options).expect("create the pool");
        pool.invoke(b"target", b"ok", created(size as u64)).expect("create the target");
        let slow = {
            let address = server.addr_string();
            std::thread::spawn(move || {
                let session = Session::connect(&address).expect("connect");
                let pool = session.open_pool("moving").expect("open");
                pool.invoke(b"target", b"await go; scrawl X", InvokeOptions::default()).expect("the call succeeds")
            })
        };
        // Inserted while the call waits: enough keys to displace entries and grow subtables.
        for inserted in 0..400u32 {
            pool.put(format!("filler-{inserted:08}").as_bytes(), inserted.to_le_bytes()).expect("insert");
        }
        assert!(!slow.is_finished(), "size {size}: the call lasts until it is told to end");
        pool.put(b"go", b"").expect("end the call");
        slow.join().expect("the call");
        let inserted = 400u32;
        let mut expected = vec![0u8; size];
        expected[0] = b'X';
        assert_eq!(pool.get(b"target").expect("the target"), &expected[..], "size {size}");
        drop(pool);
        server.kill9();
        let server = server_with_limits(10_000).data_dir(&data_dir).start();
        let session = Session::connect(&server.addr_string()).expect("reconnect");
        let pool = session.open_pool("moving").expect("open");
        assert_eq!(pool.get(b"target").expect("the target"), &expected[..], "size {size}, after kill -9");
        for i in 0..inserted {
            assert_eq!(pool.get(format!("filler-{i:08}").as_bytes()).expect("a filler"), &i.to_le_bytes()[..]);
        }
    }
}

/// With `[ado] check_writes`, a plugin's write it did not declare is reported in the server's
/// log, naming the pool; without it, nothing checks (and nothing is reported).
#[test]
fn the_checking_mode_reports_undeclared_writes() {
    let server = server_with_limits(10_000).append_config("check_writes = true").start();
    let (_session, pool) = open(&server, "checked", &["faulty"]);
    pool.invoke(b"v", b"ok", created(100)).expect("create");
    pool.invoke(b"v", b"undeclared", InvokeOptions::default()).expect("the call itself succeeds");
    let report = common::wait_until("the report in the log", Duration::from_secs(10), || {
        server
            .stderr()
            .lines()
            .find(|line| line.contains("a plugin wrote pool memory it had not declared"))
            .map(String::from)
    });
    assert!(report.contains("checked"), "the report names the pool: {report}");
}

/// A pool whose caller went away while its plugin call runs cannot be deleted until the call
/// ends; then it can, and its host stops.
#[test]
fn a_pool_is_deleted_only_once_its_calls_end() {
    let server = server_with_limits(10_000).start();
    let session = Session::connect(&server.addr_string()).expect("connect");
    {
        let caller = Session::connect(&server.addr_string()).expect("connect the caller");
        let pool = caller.create_pool("doomed", chain(&["faulty"])).expect("create");
        pool.invoke(b"k", b"ok", created(8)).expect("create k");
        // Fire and forget: the call runs on (300 ms) after its caller has closed and gone.
        let forget = InvokeOptions { fire_and_forget: true, ..InvokeOptions::default() };
        pool.invoke(b"k", b"slow-bump", forget).expect("accepted");
        pool.close().expect("close");
    }
    let refused = session.delete_pool("doomed").expect_err("the call is still running");
    assert_eq!(refused.code(), Some(ErrorCode::PoolInUse), "{refused}");
    assert!(refused.to_string().contains("plugin call"), "{refused}");
    common::wait_until("the delete", Duration::from_secs(10), || session.delete_pool("doomed").ok());
    assert!(session.open_pool("doomed").is_err(), "the pool is gone");
}

/// `filter` walks the pool next to the data (the shard's `iterate` callback) and answers only
/// the keys whose values match: exactly those a client-side scan of every value would find.
#[test]
fn filter_answers_only_the_matching_keys() {
    let server = server_with_limits(10_000).start();
    let (_session, pool) = open(&server, "fruit", &["filter"]);
    let mut expected = Vec::new();
    for i in 0..500u32 {
        let key = format!("item-{i:04}");
        // Every seventh value is "red"; values of 16 and of 200 bytes (in the entry and out of line).
        let colour = if i % 7 == 0 { "red" } else { "green" };
        let value = if i % 2 == 0 { format!("{colour} {i:08}") } else { format!("{colour} {}", "x".repeat(190)) };
        pool.put(key.as_bytes(), value.as_bytes()).expect("put");
        if i % 7 == 0 {
            expected.push(key);
        }
    }
    let answer = pool.invoke_pool(b"starts-with red", InvokeOptions::default()).expect("filter");
    let mut found: Vec<String> = answer.iter().map(|key| String::from_utf8_lossy(&key.data).into_owned()).collect();
    found.sort();
    assert_eq!(found, expected);
    let keyed = pool.invoke(b"item-0000", b"starts-with red", InvokeOptions::default()).expect_err("keyed");
    assert_eq!(keyed.code(), Some(ErrorCode::AdoFailed), "{keyed}");
}

/// A pool whose pairs take more than one page of the shard's walk (1 MiB) is filtered whole: the
/// host asks page after page.
#[test]
fn filter_walks_a_pool_larger_than_one_page() {
    let server = server_with_limits(10_000).start();
    let session = Session::connect(&server.addr_string()).expect("connect");
    let options = PoolOptions {
        durability: ferrite_client::Durability::Async,
        size_bytes: 16 << 20,
        expected_objects: 8000,
        ..chain(&["filter"])
    };
    let pool = session.create_pool("long-keys", options).expect("create");
    // 6,000 keys of 200 bytes: about 1.4 MB of pairs, two pages.
    let key = |i: u32| format!("{i:0200}");
    for i in 0..6000u32 {
        pool.put(key(i).as_bytes(), (u64::from(i)).to_le_bytes()).expect("put");
    }
    // Half the keys match: they lie on every page.
    let answer = pool.invoke_pool(b"u64-at-least 3000", InvokeOptions::default()).expect("filter");
    let mut found: Vec<String> = answer.iter().map(|key| String::from_utf8_lossy(&key.data).into_owned()).collect();
    found.sort();
    assert_eq!(found, (3000..6000).map(key).collect::<Vec<_>>());
}

/// `[ado] signals`: a native put, get or erase on a pool with plugins is signalled to its chain,
/// and answered only once the chain has handled the signal; a request that failed is not
/// signalled. An erase is also told to the host as a pool event.
#[test]
fn signals_reach_the_chain_before_the_request_is_answered() {
    let server =
        server_with_limits(10_000).append_config("signals = [\"post-put\", \"post-get\", \"post-erase\"]").start();
    let (_session, pool) = open(&server, "signalled", &["faulty"]);
    let logged = |line: &str| server.stderr().lines().any(|logged| logged.contains(line));
    pool.put(b"alpha", b"one").expect("put");
    assert!(logged("faulty: ADO::Signal::post-put on alpha"), "the put was answered after its signal");
    assert_eq!(pool.get(b"alpha").expect("get"), &b"one"[..]);
    assert!(logged("faulty: ADO::Signal::post-get on alpha"));
    pool.erase(b"alpha").expect("erase");
    assert!(logged("faulty: ADO::Signal::post-erase on alpha"), "an erased key is signalled without a value");
    let logged_soon = |line: &str| {
        common::wait_until(line, Duration::from_secs(10), || logged(line).then_some(()));
    };
    logged_soon("faulty: erase event on alpha");
    let missing = pool.get(b"alpha").expect_err("gone");
    assert_eq!(missing.code(), Some(ErrorCode::KeyNotFound));
    assert_eq!(server.stderr().matches("post-get on alpha").count(), 1, "a failed get is not signalled");
}

/// kill -9 in the middle of concurrent `versioning` puts, round after round: after each restart
/// every key's history is whole. Each kept version holds exactly the bytes that version was
/// given, the newest is at least the last acknowledged one (and at most one more, the put in
/// flight), and the plugin's configuration (`versions=3`) is what it keeps.
#[test]
fn version_histories_survive_kill_9_whole() {
    const WRITERS: usize = 3;
    const KEPT: u64 = 3;
    let binary_dir = std::path::Path::new(env!("CARGO_BIN_EXE_ferrite-server")).parent().expect("a directory");
    assert!(binary_dir.join("libferrite_plugin_versioning.so").exists(), "run `cargo build --workspace` first");
    let data_dir = fresh_dir("plugins-versions").join("data");
    let start = || {
        server_with_limits(10_000)
            .append_config("[plugin_config]\nversioning = \"versions=3\"")
            .data_dir(&data_dir)
            .start()
    };
    // 32 bytes of header and 3 slots of 4 + 100 bytes: kept out of line, changed in place.
    let size = 32 + KEPT * (4 + 100);
    let version = |writer: usize, n: u64| format!("writer {writer} version {n:06} {}", "v".repeat((n % 50) as usize));
    let mut acknowledged = [0u64; WRITERS];
    for round in 0..4 {
        let mut server = start();
        let (_session, pool) = open(&server, "versions", &["versioning"]);
        for (writer, acknowledged) in acknowledged.iter_mut().enumerate() {
            let acked = *acknowledged;
            let key = format!("doc-{writer}");
            if acked == 0 {
                continue;
            }
            let list = pool.invoke(key.as_bytes(), b"list", InvokeOptions::default()).expect("list");
            let lines: Vec<(u64, usize)> = String::from_utf8_lossy(&list[0].data)
                .lines()
                .map(|line| {
                    let (n, len) = line.split_once(' ').expect("N LEN");
                    (n.parse().expect("a version"), len.parse().expect("a length"))
                })
                .collect();
            let newest = lines.last().expect("versions").0;
            assert!(
                newest >= acked && newest <= acked + 1,
                "round {round}, writer {writer}: newest {newest}, acknowledged {acked}"
            );
            assert_eq!(lines.len() as u64, newest.min(KEPT), "round {round}: {KEPT} versions kept");
            for (n, len) in lines {
                let got =
                    pool.invoke(key.as_bytes(), format!("get {n}").as_bytes(), InvokeOptions::default()).expect("get");
                assert_eq!(got[0].data.len(), len);
                assert_eq!(
                    String::from_utf8_lossy(&got[0].data),
                    version(writer, n),
                    "round {round}: version {n} whole"
                );
            }
            *acknowledged = newest;
        }
        let writers: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let address = server.addr_string();
                let first = acknowledged[writer] + 1;
                std::thread::spawn(move || {
                    let Ok(session) = Session::connect(&address) else { return first - 1 };
                    let Ok(pool) = session.open_pool("versions") else { return first - 1 };
                    let key = format!("doc-{writer}");
                    let mut n = first;
                    let options = InvokeOptions { create_size: Some(size), ..InvokeOptions::default() };
                    while pool.invoke(key.as_bytes(), format!("put {}", version(writer, n)).as_bytes(), options).is_ok()
                    {
                        n += 1;
                    }
                    n - 1
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(150));
        drop(pool);
        server.kill9();
        for (writer, handle) in writers.into_iter().enumerate() {
            acknowledged[writer] = handle.join().expect("writer");
        }
    }
    assert!(acknowledged.iter().all(|&acked| acked > KEPT), "every writer got past {KEPT} versions: {acknowledged:?}");
}

/// Signals from RESP: `SET`, `GET` and a one-key `DEL` on the default pool are signalled to its
/// chain and answered after it; a `GET` of a missing key is not signalled, and a `SET` of a value
/// past the inline limit is refused.
#[test]
fn resp_commands_are_signalled_too() {
    let config = "signals = [\"post-put\", \"post-get\", \"post-erase\"]\n[resp]\nplugins = [\"faulty\"]";
    let server = server_with_limits(10_000).resp().append_config(config).start();
    let stream = std::net::TcpStream::connect(server.resp_addr(0)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut client = std::io::BufReader::new(stream);
    let logged = |line: &str| server.stderr().lines().any(|logged| logged.contains(line));
    assert_eq!(resp(&mut client, &["SET", "beta", "two"]), "+OK");
    assert!(logged("faulty: ADO::Signal::post-put on beta"), "SET was answered after its signal");
    assert_eq!(resp(&mut client, &["GET", "beta"]), "$3");
    let mut value = String::new();
    std::io::BufRead::read_line(&mut client, &mut value).expect("the value");
    assert!(logged("faulty: ADO::Signal::post-get on beta"));
    assert_eq!(resp(&mut client, &["DEL", "beta"]), ":1");
    assert!(logged("faulty: ADO::Signal::post-erase on beta"));
    assert_eq!(resp(&mut client, &["GET", "beta"]), "$-1");
    assert_eq!(server.stderr().matches("post-get on beta").count(), 1, "a missing key's GET is not signalled");

    // Many-key commands signal each key they write, find or erase, once, before answering.
    assert_eq!(resp(&mut client, &["MSET", "k1", "a", "k2", "b", "k1", "c"]), "+OK");
    assert!(logged("faulty: ADO::Signal::post-put on k2"));
    assert_eq!(server.stderr().matches("post-put on k1").count(), 1, "each key once");
    assert_eq!(resp(&mut client, &["MGET", "k1", "absent", "k2"]), "[c, $-1, b]");
    assert!(logged("faulty: ADO::Signal::post-get on k1") && logged("faulty: ADO::Signal::post-get on k2"));
    assert!(!logged("post-get on absent"), "a key MGET does not find is not signalled");
    assert_eq!(resp(&mut client, &["DEL", "k1", "absent", "k2"]), ":2");
    assert!(logged("faulty: ADO::Signal::post-erase on k1") && logged("faulty: ADO::Signal::post-erase on k2"));
    assert!(!logged("post-erase on absent"));

    // A SET past the inline limit would stream, but its signal would hold the reply whole:
    // refused once its value has been read, and the connection carries on.
    let long = "v".repeat(2 * 1024 * 1024 + 1);
    let reply = resp(&mut client, &["SET", "long", &long]);
    assert!(reply.starts_with("-ERR") && reply.contains("signalled"), "{reply}");
    assert_eq!(resp(&mut client, &["EXISTS", "long"]), ":0");
    assert!(!logged("post-put on long"));
}

/// The read callbacks: a plugin opens another key for reading (`open_key`), reads its value (a
/// small one lent as a copy, a large one in place) and unlocks it; opening its own target, which
/// it holds for writing, is refused; opening a missing key is not found.
#[test]
fn plugins_read_other_keys_through_open_key() {
    let server = server_with_limits(10_000).start();
    let (_session, pool) = open(&server, "peeking", &["faulty"]);
    pool.put(b"small", b"hello").expect("put");
    let large = "l".repeat(300);
    pool.put(b"large", large.as_bytes()).expect("put");
    pool.invoke(b"target", b"ok", created(8)).expect("create the target");
    let small = pool.invoke(b"target", b"peek small", InvokeOptions::default()).expect("peek small");
    assert_eq!(texts(&small), [(0, "hello".to_owned())]);
    let answer = pool.invoke(b"target", b"peek large", InvokeOptions::default()).expect("peek large");
    assert_eq!(texts(&answer), [(0, large.clone())]);
    let own = pool.invoke(b"target", b"peek target", InvokeOptions::default()).expect_err("its own target");
    assert_eq!(own.code(), Some(ErrorCode::AdoFailed), "{own}");
    let missing = pool.invoke(b"target", b"peek nothing", InvokeOptions::default()).expect_err("missing");
    assert_eq!(missing.code(), Some(ErrorCode::AdoFailed), "{missing}");
    // The lock ended with the call: the key takes writes again.
    pool.put(b"small", b"bye").expect("put after the call");
    assert_eq!(pool.get(b"small").expect("get"), &b"bye"[..]);
}

/// The write callbacks through the real server: one call creates a key, rewrites and resizes
/// another (a small one, copied, and a large one), erases a third and resizes its own value; all
/// of it lands together. A call that does the same and then fails changes nothing, and a call on
/// a read-only invocation may change no key.
#[test]
fn a_call_changes_other_keys_all_together_or_not_at_all() {
    let data_dir = fresh_dir("plugins-keys").join("data");
    let mut server = server_with_limits(10_000).data_dir(&data_dir).start();
    let (_session, pool) = open(&server, "keys", &["faulty"]);
    let large = "L".repeat(400);
    for (key, value) in [("small", "s"), ("large", large.as_str()), ("doomed", "d"), ("target", "t")] {
        pool.put(key.as_bytes(), value.as_bytes()).expect("put");
    }
    let script = b"create fresh new; update small grown-bigger; update large short; erase doomed; set own value";
    pool.invoke(b"target", script, InvokeOptions::default()).expect("the script runs");
    let expect_all = |pool: &Pool| {
        assert_eq!(pool.get(b"fresh").expect("created"), &b"new"[..]);
        assert_eq!(pool.get(b"small").expect("updated"), &b"grown-bigger"[..]);
        assert_eq!(pool.get(b"large").expect("updated"), &b"short"[..]);
        assert_eq!(pool.get(b"doomed").expect_err("erased").code(), Some(ErrorCode::KeyNotFound));
        assert_eq!(pool.get(b"target").expect("resized"), &b"own value"[..]);
        assert_eq!(pool.count().expect("count"), 4);
    };
    expect_all(&pool);

    let failing = b"create other x; update small changed; update large changed; erase fresh; set changed; fail";
    let error = pool.invoke(b"target", failing, InvokeOptions::default()).expect_err("the script fails");
    assert_eq!(error.code(), Some(ErrorCode::AdoFailed), "{error}");
    assert_eq!(pool.get(b"other").expect_err("never created").code(), Some(ErrorCode::KeyNotFound));
    expect_all(&pool);

    let read_only = InvokeOptions { read_only: true, ..InvokeOptions::default() };
    let refused = pool.invoke(b"target", b"create sneaky x", read_only).expect_err("read-only");
    assert_eq!(refused.code(), Some(ErrorCode::AdoFailed), "{refused}");
    assert_eq!(pool.get(b"sneaky").expect_err("not created").code(), Some(ErrorCode::KeyNotFound));

    // Erasing the call's own key, and creating a key that exists, are as a client would expect.
    pool.invoke(b"fresh", b"erase fresh", InvokeOptions::default()).expect("erase itself");
    assert_eq!(pool.get(b"fresh").expect_err("erased").code(), Some(ErrorCode::KeyNotFound));
    let exists = pool.invoke(b"target", b"create small x", InvokeOptions::default()).expect_err("exists");
    assert_eq!(exists.code(), Some(ErrorCode::AdoFailed), "{exists}");

    drop(pool);
    server.kill9();
    let server = server_with_limits(10_000).data_dir(&data_dir).start();
    let session = Session::connect(&server.addr_string()).expect("reconnect");
    let pool = session.open_pool("keys").expect("open");
    assert_eq!(pool.get(b"small").expect("survived"), &b"grown-bigger"[..]);
    assert_eq!(pool.get(b"large").expect("survived"), &b"short"[..]);
    assert_eq!(pool.get(b"target").expect("survived"), &b"own value"[..]);
    assert_eq!(pool.count().expect("count"), 3, "fresh and doomed stay erased, nothing else appeared");
}

/// `find_key` walks the whole pool a bounded step at a time: every matching key comes back,
/// however many steps it takes, and none that does not match. `pool_info` counts the pairs, and
/// `get_reference_vector` hands out at most as many pairs as asked, every pair when asked for all.
#[test]
fn find_key_finds_every_matching_key() {
    let server = server_with_limits(10_000).start();
    let (_session, pool) = open(&server, "finding", &["faulty"]);
    for i in 0..3000 {
        let key = if i % 100 == 0 { format!("wanted-{i}") } else { format!("other-{i}") };
        pool.put(key.as_bytes(), b"v").expect("put");
    }
    pool.put(b"target", b"t").expect("put");
    let found = pool.invoke(b"target", b"find prefix:wanted-", InvokeOptions::default()).expect("find");
    let mut keys: Vec<String> = texts(&found).into_iter().map(|(_, key)| key).collect();
    keys.sort();
    keys.dedup();
    let mut expected: Vec<String> = (0..3000).step_by(100).map(|i| format!("wanted-{i}")).collect();
    expected.sort();
    assert_eq!(keys, expected);
    let exact = pool.invoke(b"target", b"find other-7", InvokeOptions::default()).expect("find one");
    assert_eq!(texts(&exact), [(0, "other-7".to_owned())]);
    // pool_info and get_reference_vector, the other read callbacks.
    let info = pool.invoke(b"target", b"info", InvokeOptions::default()).expect("info");
    assert_eq!(texts(&info), [(0, "objects=3001".to_owned())]);
    let recent = pool.invoke(b"target", b"recent 2500", InvokeOptions::default()).expect("reference vector");
    assert_eq!(recent.len(), 2500, "at most the number asked for");
    let all = pool.invoke(b"target", b"recent 100000", InvokeOptions::default()).expect("reference vector");
    let mut keys: Vec<String> = texts(&all).into_iter().map(|(_, key)| key).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 3001, "every pair, over several pages");
}

/// kill -9 while calls move a value between two keys (each call writes the same new text to
/// both, one of them the call's own value): after every restart the two keys hold the same text,
/// at least the last one acknowledged. A call's changes to several keys are one transaction.
#[test]
fn changes_to_several_keys_survive_kill_9_together() {
    let data_dir = fresh_dir("plugins-pairs").join("data");
    let mut server = server_with_limits(10_000).data_dir(&data_dir).start();
    {
        let (_session, pool) = open(&server, "pairs", &["faulty"]);
        pool.put(b"left", b"0").expect("put");
        pool.put(b"right", b"0").expect("put");
    }
    let mut acknowledged_total = 0;
    for round in 0..4 {
        let stop = Arc::new(AtomicBool::new(false));
        let last_acknowledged = Arc::new(AtomicU64::new(0));
        let writer = {
            let (address, stop, last) = (server.addr_string(), Arc::clone(&stop), Arc::clone(&last_acknowledged));
            std::thread::spawn(move || {
                let session = Session::connect(&address).expect("connect");
                let pool = session.open_pool("pairs").expect("open");
                for n in (round * 100_000 + 1).. {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let text = format!("{n:0width$}", width = 1 + n as usize % 40);
                    let script = format!("update right {text}; set {text}");
                    match pool.invoke(b"left", script.as_bytes(), InvokeOptions::default()) {
                        Ok(_) => last.store(n as u64, Ordering::SeqCst),
                        Err(_) => return,
                    }
                }
            })
        };
        std::thread::sleep(Duration::from_millis(300 + 150 * round as u64));
        server.kill9();
        stop.store(true, Ordering::Relaxed);
        writer.join().expect("writer");
        server = server_with_limits(10_000).data_dir(&data_dir).start();
        let session = Session::connect(&server.addr_string()).expect("reconnect");
        let pool = session.open_pool("pairs").expect("open");
        let left = String::from_utf8(pool.get(b"left").expect("left").to_vec()).expect("text");
        let right = String::from_utf8(pool.get(b"right").expect("right").to_vec()).expect("text");
        assert_eq!(left, right, "round {round}: both keys of a call or neither");
        let acknowledged = last_acknowledged.load(Ordering::SeqCst);
        assert!(left.parse::<u64>().expect("a number") >= acknowledged, "round {round}: an acknowledged call was lost");
        acknowledged_total += acknowledged.min(1);
    }
    assert!(acknowledged_total > 0, "calls were acknowledged before the kills");
}

/// A call whose later change the pool refuses (it is full) puts back the changes it had already
/// applied in the same transaction: the call fails with nothing changed, and the next calls work.
/// `next:` finds keys in key order through the pool's secondary index.
#[test]
fn a_refused_change_puts_back_the_calls_earlier_ones() {
    let server = server_with_limits(10_000).start();
    let session = Session::connect(&server.addr_string()).expect("connect");
    let options = PoolOptions { size_bytes: 64 << 10, indexed: true, ..chain(&["faulty"]) };
    let pool = session.create_pool("tight", options).expect("create");
    pool.put(b"first", b"1").expect("put");
    pool.put(b"second", b"2").expect("put");
    pool.put(b"target", b"t").expect("put");
    let mut filled = 0;
    while pool.put(format!("filler-{filled:05}").as_bytes(), [7; 1000]).is_ok() {
        filled += 1;
    }
    let count = pool.count().expect("count");
    let script = format!("update first {}; update second two; create huge {}", "x".repeat(40), "h".repeat(3000));
    let error = pool.invoke(b"target", script.as_bytes(), InvokeOptions::default()).expect_err("the pool is full");
    assert_eq!(error.code(), Some(ErrorCode::PoolFull), "{error}");
    assert_eq!(pool.get(b"first").expect("kept"), &b"1"[..]);
    assert_eq!(pool.get(b"second").expect("kept"), &b"2"[..]);
    assert_eq!(pool.count().expect("count"), count);
    // The put of `invoke_put_ado` is one of the call's changes: with no room for it, neither it
    // nor the plugin's other changes are stored.
    let put = pool.invoke_put(b"fresh", &[9; 3000], b"update first changed", InvokePutOptions::default());
    assert_eq!(put.expect_err("the pool is full").code(), Some(ErrorCode::PoolFull));
    assert!(absent(&pool, b"fresh"), "the put was not stored");
    assert_eq!(pool.get(b"first").expect("kept"), &b"1"[..]);
    assert_eq!(pool.count().expect("count"), count);
    pool.invoke(b"target", b"update second two", InvokeOptions::default()).expect("a change that fits");
    assert_eq!(pool.get(b"second").expect("changed"), &b"two"[..]);
    let next = pool.invoke(b"target", b"find next:filler-00000", InvokeOptions::default()).expect("next");
    let keys: Vec<String> = texts(&next).into_iter().map(|(_, key)| key).take(2).collect();
    assert_eq!(keys, ["filler-00001", "filler-00002"]);
}

/// Pool events: a host's plugins hear `open` when it starts, `resize` when a put changes the
/// length of a value (not when it keeps it), `close` when the last session closes the pool (the
/// host stops gracefully), and `delete` when the pool is deleted.
#[test]
fn plugins_hear_the_pools_events() {
    let server = server_with_limits(10_000).start();
    let logged = |line: &str| server.stderr().matches(line).count();
    let logged_soon = |line: &str, times: usize| {
        common::wait_until(line, Duration::from_secs(10), || (logged(line) >= times).then_some(()));
    };
    let session = Session::connect(&server.addr_string()).expect("connect");
    let pool = session.create_pool("eventful", chain(&["faulty"])).expect("create");
    pool.put(b"k", b"four").expect("put");
    pool.invoke(b"k", b"ok", InvokeOptions::default()).expect("start the host");
    logged_soon("faulty: open event", 1);
    pool.put(b"k", b"same").expect("same length");
    pool.put(b"k", b"longer now").expect("a new length");
    logged_soon("faulty: resize event on k", 1);
    assert_eq!(logged("faulty: resize event on k"), 1, "a put that keeps the length is no resize");
    pool.close().expect("close");
    logged_soon("faulty: close event", 1);
    session.delete_pool("eventful").expect("delete");
    logged_soon("faulty: delete event", 1);
    assert_eq!(logged("faulty: open event"), 2, "a host started to tell of the deletion");
    logged_soon("faulty: close event", 2);
}

/// Pool memory a plugin allocates (`allocate_memory`) outlives its call and a kill -9, stays
/// out of every count, and is freed by a later call (`free_memory`); a failing call's
/// allocation is dropped. A detached value (`invoke_put_ado --detached`) is such memory too:
/// the key's own value is left alone, and the plugin keeps the memory by recording where it is.
#[test]
fn allocations_and_detached_values_outlive_their_calls() {
    let data_dir = fresh_dir("plugins-memory").join("data");
    let mut server = server_with_limits(10_000).data_dir(&data_dir).start();
    let (_session, pool) = open(&server, "memory", &["faulty"]);
    let used = |pool: &Pool| pool.attribute(Attribute::PoolUsed, b"holder").expect("used bytes");
    pool.put(b"holder", b"x").expect("put");
    let before = used(&pool);
    pool.invoke(b"holder", b"alloc hello world", InvokeOptions::default()).expect("allocate");
    let place = pool.get(b"holder").expect("the place").to_vec();
    assert!(String::from_utf8_lossy(&place).ends_with(":11"), "{place:?}");
    let read = |pool: &Pool| texts(&pool.invoke(b"holder", b"read-alloc", InvokeOptions::default()).expect("read"));
    assert_eq!(read(&pool), [(0, "hello world".to_owned())]);
    let with_allocation = used(&pool);
    assert!(with_allocation > before, "the allocation takes pool capacity");

    let failing = pool.invoke(b"holder", b"alloc dropped; fail", InvokeOptions::default()).expect_err("fails");
    assert_eq!(failing.code(), Some(ErrorCode::AdoFailed), "{failing}");
    assert_eq!(used(&pool), with_allocation, "a failed call's allocation is dropped");
    assert_eq!(pool.get(b"holder").expect("unchanged"), &place[..]);

    let detached = InvokePutOptions { detached: true, ..InvokePutOptions::default() };
    let kept = pool.invoke_put(b"carrier", b"detached bytes", b"keep-detached", detached).expect("detached");
    assert_eq!(texts(&kept), [(0, "detached bytes".to_owned())]);
    let carrier_place = pool.get(b"carrier").expect("the carrier records the place").to_vec();
    assert!(String::from_utf8_lossy(&carrier_place).ends_with(":14"), "{carrier_place:?}");
    assert_eq!(pool.count().expect("count"), 2, "allocations are no keys");

    drop(pool);
    server.kill9();
    server = server_with_limits(10_000).data_dir(&data_dir).start();
    let session = Session::connect(&server.addr_string()).expect("reconnect");
    let pool = session.open_pool("memory").expect("open");
    assert_eq!(read(&pool), [(0, "hello world".to_owned())], "the allocation survived kill -9");
    let carried = pool.invoke(b"carrier", b"read-alloc", InvokeOptions::default()).expect("read the detached value");
    assert_eq!(texts(&carried), [(0, "detached bytes".to_owned())]);
    assert_eq!(pool.count().expect("count"), 2);

    let after_restart = used(&pool);
    pool.invoke(b"holder", b"free-alloc", InvokeOptions::default()).expect("free");
    assert!(used(&pool) < after_restart, "freed");
    assert_eq!(pool.get(b"holder").expect("emptied"), &b""[..]);
    pool.put(b"holder", b"64:5").expect("a place that is no allocation");
    let bogus = pool.invoke(b"holder", b"free-alloc", InvokeOptions::default()).expect_err("no allocation there");
    assert_eq!(bogus.code(), Some(ErrorCode::AdoFailed), "{bogus}");
}

/// A host that dies in the middle of a call that created, rewrote and erased keys and allocated
/// memory leaves the pool exactly as it was: none of it was applied, the memory is given back,
/// and the next call runs on a new host.
#[test]
fn a_host_that_dies_mid_call_leaves_no_change_behind() {
    let server = server_with_limits(10_000).start();
    let (_session, pool) = open(&server, "dying", &["faulty"]);
    pool.put(b"small", b"s").expect("put");
    pool.put(b"target", b"t").expect("put");
    let used = |pool: &Pool| pool.attribute(Attribute::PoolUsed, b"target").expect("used bytes");
    let before = used(&pool);
    let script = b"create born x; update small changed; erase target; alloc memory; crash";
    let error = pool.invoke(b"target", script, InvokeOptions::default()).expect_err("the host dies");
    assert_eq!(error.code(), Some(ErrorCode::AdoFailed), "{error}");
    assert_eq!(pool.get(b"born").expect_err("never created").code(), Some(ErrorCode::KeyNotFound));
    assert_eq!(pool.get(b"small").expect("kept"), &b"s"[..]);
    assert_eq!(pool.get(b"target").expect("kept"), &b"t"[..]);
    assert_eq!(used(&pool), before, "nothing allocated stays");
    let answer = pool.invoke(b"target", b"ok", InvokeOptions::default()).expect("a new host answers");
    assert_eq!(texts(&answer), [(0, "ok".to_owned())]);
}

/// A call's changes are one log record, which must fit one log segment: a call that creates more
/// keys than that allows is refused (`FERRITE_ERR_NO_SPACE` to the plugin) and changes nothing,
/// and the log never grows a segment of its own for a call.
#[test]
fn a_call_changes_no_more_than_one_log_segment_holds() {
    let data_dir = fresh_dir("plugins-segment").join("data");
    let server = server_with_limits(10_000).data_dir(&data_dir).start();
    let (_session, pool) = open(&server, "bounded", &["faulty"]);
    pool.put(b"target", b"t").expect("put");
    let creates =
        |count: usize, tag: &str| (0..count).map(|i| format!("create {tag}-{i} v")).collect::<Vec<_>>().join("; ");
    pool.invoke(b"target", creates(8, "few").as_bytes(), InvokeOptions::default()).expect("a few keys fit");
    assert_eq!(pool.count().expect("count"), 9);
    for round in 0..5 {
        let error = pool
            .invoke(b"target", creates(64, &format!("many{round}")).as_bytes(), InvokeOptions::default())
            .expect_err("too many new keys for one record");
        assert_eq!(error.code(), Some(ErrorCode::AdoFailed), "{error}");
        assert!(error.to_string().contains("status -5"), "FERRITE_ERR_NO_SPACE: {error}");
        assert!(error.to_string().contains("create_key"), "the plugin's own words reach the client: {error}");
    }
    assert_eq!(pool.count().expect("count"), 9, "nothing of the refused calls was stored");
    let log_bytes: u64 = walkdir(&data_dir)
        .filter(|path| path.to_string_lossy().contains("wal"))
        .map(|path| std::fs::metadata(&path).map_or(0, |metadata| metadata.len()))
        .sum();
    assert!(log_bytes <= 48 << 20, "the log stayed within its usual segments: {log_bytes} bytes");
}

/// Every file under `dir`.
fn walkdir(dir: &std::path::Path) -> impl Iterator<Item = std::path::PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.into_iter()
}

/// A plugin call that may write a value waits while another session reads that value directly
/// (so the read never sees it half changed); a read-only call and plain gets do not wait.
#[test]
fn plugin_writes_wait_for_direct_reads_of_their_key() {
    let server = server_with_limits(10_000).start();
    let (_session, pool) = open(&server, "held", &["counter"]);
    pool.invoke(b"hits", b"add 1", created(8)).expect("create the counter");
    let mut raw = wire::RawClient::handshaken(server.addr(0));
    let handle = raw.open_pool(2, "held");
    let opened = raw.call(3, &ferrite_proto::Request::GetDirect { pool: handle, transfer: 1, key: b"hits" });
    assert_eq!(opened.response(), ferrite_proto::Response::TransferOpened { length: 8 });
    let read_only = InvokeOptions { read_only: true, ..InvokeOptions::default() };
    assert_eq!(texts(&pool.invoke(b"hits", b"get", read_only).expect("a read-only call")), vec![(0, "1".into())]);
    let writer = {
        let address = server.addr_string();
        std::thread::spawn(move || {
            let session = Session::connect(&address).expect("connect");
            let pool = session.open_pool("held").expect("open");
            let started = std::time::Instant::now();
            pool.invoke(b"hits", b"add 1", InvokeOptions::default()).expect("the call runs once the read ends");
            started.elapsed()
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(counter_value(&pool, b"hits"), 1, "the call waits for the direct read");
    drop(raw);
    let waited = writer.join().expect("writer");
    assert!(waited >= Duration::from_millis(250), "the call waited ({waited:?})");
    assert_eq!(counter_value(&pool, b"hits"), 2);
}
