//! Pools' plugin chains, from the real server: a chain is checked against the plugins the server
//! knows when the pool is created, kept in the pool's durable metadata, listed with the pool, and
//! back after a kill -9 and a restart.

mod common;

use common::{fresh_dir, TestServer};
use ferrite_client::blocking::Session;
use ferrite_client::{ErrorCode, PoolOptions};

/// The plugins this test makes known. Creating a pool only names them, so any file will do as
/// their library: the server checks the path exists when it starts.
fn with_plugins(builder: common::ServerBuilder) -> common::ServerBuilder {
    let library = env!("CARGO_BIN_EXE_ferrite-server");
    builder.arg("--plugin").arg(format!("counter={library}")).arg("--plugin").arg(format!("versioning={library}"))
}

fn chain_of(session: &Session, pool: &str) -> Option<Vec<String>> {
    let pools = session.list_pools().expect("list");
    pools.into_iter().find(|info| info.name == pool).map(|info| info.plugins)
}

fn options(plugins: &[&str]) -> PoolOptions {
    PoolOptions { plugins: plugins.iter().map(|name| (*name).to_owned()).collect(), ..PoolOptions::default() }
}

#[test]
fn a_pool_keeps_its_plugin_chain_across_a_crash_and_unknown_plugins_are_refused() {
    let data_dir = fresh_dir("plugin-chains").join("data");
    let mut server = with_plugins(TestServer::builder().data_dir(&data_dir)).start();
    let session = Session::connect(&server.addr_string()).expect("connect");

    session
        .create_pool("counters", options(&["versioning", "counter"]))
        .expect("a known chain")
        .close()
        .expect("close");
    session.create_pool("plain", PoolOptions::default()).expect("no chain").close().expect("close");
    let error = session.create_pool("bad", options(&["counter", "nope"])).expect_err("an unknown plugin");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    let message = error.to_string();
    assert!(message.contains("unknown plugin 'nope'"), "{message}");
    assert!(message.contains("counter") && message.contains("versioning"), "the known plugins are listed: {message}");
    assert_eq!(chain_of(&session, "bad"), None, "a refused chain creates nothing");
    assert_eq!(chain_of(&session, "counters"), Some(vec!["versioning".to_owned(), "counter".to_owned()]));
    assert_eq!(chain_of(&session, "plain"), Some(Vec::new()));
    // Opening an existing pool keeps its chain, whatever the caller asks for.
    session.create_pool("counters", options(&["counter"])).expect("opens").close().expect("close");
    assert_eq!(chain_of(&session, "counters"), Some(vec!["versioning".to_owned(), "counter".to_owned()]));
    drop(session);

    server.kill9();
    let server = with_plugins(TestServer::builder().data_dir(&data_dir)).start();
    let session = Session::connect(&server.addr_string()).expect("reconnect");
    assert_eq!(chain_of(&session, "counters"), Some(vec!["versioning".to_owned(), "counter".to_owned()]));
    assert_eq!(chain_of(&session, "plain"), Some(Vec::new()));
}

/// A name neither configured nor shipped beside the server is refused, and the server starts
/// only with plugin libraries that exist.
#[test]
fn unconfigured_plugins_are_refused_and_missing_libraries_stop_the_start() {
    let server = TestServer::builder().start();
    let session = Session::connect(&server.addr_string()).expect("connect");
    let error = session.create_pool("counters", options(&["not-configured"])).expect_err("not known");
    assert_eq!(error.code(), Some(ErrorCode::InvalidArgument), "{error}");
    assert!(error.to_string().contains("unknown plugin 'not-configured'"), "{error}");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ferrite-server"))
        .args(["--plugin", "gone=/no/such/library.so", "--listen", "127.0.0.1:0"])
        .output()
        .expect("run the server");
    assert!(!output.status.success(), "a missing plugin library is a configuration error");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("plugin 'gone'") && stderr.contains("/no/such/library.so"), "{stderr}");
}
