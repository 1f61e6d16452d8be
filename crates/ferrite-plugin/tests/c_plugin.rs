//! Proves a plugin written in C against the header works: `examples/c/counter.c` is built with
//! the system C compiler, loaded through `LoadedPlugin::open` (the host's own loader) and
//! invoked through the test host, including a failed call that must change nothing.

mod support;

use std::path::{Path, PathBuf};

use ferrite_plugin::testing::{InvokeOptions, TestHost};
use ferrite_plugin::{ErrorCode, LoadedPlugin};

fn build_counter(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/c/counter.c");
    let library = dir.join("libcounter_c.so");
    support::cc(&["-shared".as_ref(), "-fPIC".as_ref(), source.as_os_str(), "-o".as_ref(), library.as_os_str()]);
    library
}

#[test]
fn c_counter_loads_and_counts() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let library = build_counter(dir.path());
    let loaded = LoadedPlugin::open(&library).expect("the C plugin passes the loader's checks");
    assert_eq!(loaded.name(), "counter-c");

    let mut host = TestHost::new(loaded, b"").expect("the C plugin launches");
    let responses = host.invoke(b"hits", b"add 40", InvokeOptions::create(8)).expect("add succeeds");
    assert_eq!(responses[0].data, b"40");
    let responses = host.invoke(b"hits", b"add 2", InvokeOptions::default()).expect("add succeeds");
    assert_eq!(responses[0].data, b"42");
    assert!(host.undeclared_writes().is_empty(), "the C plugin declares before writing");
    assert_eq!(host.get(b"hits"), Some(42i64.to_ne_bytes().to_vec()));

    let error = host.invoke(b"hits", b"add 9223372036854775807", InvokeOptions::default()).expect_err("overflow");
    assert_eq!(error.code(), Some(ErrorCode::Invalid));
    assert_eq!(host.get(b"hits"), Some(42i64.to_ne_bytes().to_vec()));
}

#[test]
fn test_host_opens_a_library_by_path() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let library = build_counter(dir.path());
    let mut host = TestHost::open(&library, b"").expect("opens");
    host.put(b"c", &7i64.to_ne_bytes());
    let responses = host.invoke(b"c", b"get", InvokeOptions { read_only: true, ..Default::default() }).expect("get");
    assert_eq!(responses[0].data, b"7");
}
