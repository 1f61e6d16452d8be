//! Drives every callback of the header through the safe `Call` API, the export shims and the
//! test host, with a plugin whose payload names what to exercise. Each test proves one
//! behaviour a plugin author relies on: writes are declared and undone on failure, handles
//! retire, panics stop at the boundary, a chain is one transaction.

use std::ops::ControlFlow;

use ferrite_plugin::testing::{InvokeOptions, TestHost, TestHostError};
use ferrite_plugin::{abi, Access, Call, Context, ErrorCode, LogLevel, Plugin, PluginError, PoolEvent};

/// A plugin whose payload is `COMMAND [ARGUMENT...]`.
#[derive(Debug, Default)]
struct Toolbox {
    events: Vec<String>,
}

fn arg<'p>(words: &[&'p str], index: usize) -> &'p str {
    words.get(index).copied().unwrap_or_default()
}

fn number(words: &[&str], index: usize) -> usize {
    arg(words, index).parse().unwrap_or_default()
}

impl Toolbox {
    fn run(&mut self, call: &mut Call<'_>, words: &[&str]) -> Result<(), PluginError> {
        let name = arg(words, 1).as_bytes();
        match arg(words, 0) {
            "create" => {
                let handle = call.create_key(name, number(words, 2))?;
                call.opened_value_mut(handle)?.fill(b'c');
                call.respond(call.opened_value(handle)?)
            }
            "create-then-fail" => {
                let handle = call.create_key(name, 4)?;
                call.opened_value_mut(handle)?.fill(b'c');
                Err(PluginError::failed("failing after a create"))
            }
            "open-write" => {
                let handle = call.open_key(name, Access::Write)?;
                call.opened_value_mut(handle)?.fill(b'w');
                Ok(())
            }
            "open-read-write" => {
                let handle = call.open_key(name, Access::Read)?;
                call.opened_value_mut(handle).map(|_| ())
            }
            "unlock" => {
                let handle = call.open_key(name, Access::Read)?;
                call.unlock(handle)?;
                call.opened_value(handle).map(|_| ())
            }
            "erase" => call.erase_key(name),
            "resize" => {
                let key = call.key();
                call.resize_value(key, number(words, 1))?;
                call.respond(call.value())
            }
            "range" => {
                call.value_range_mut(2..4)?.fill(b'z');
                call.value_range_mut(3..99).map(|_| ())
            }
            "alloc" => {
                let memory = call.allocate(16, 64)?;
                call.memory_mut(memory)?.fill(0xAB);
                let offset = call.memory_offset(memory)?;
                call.respond(offset.to_string().as_bytes())
            }
            "alloc-free" => {
                let memory = call.allocate(16, 8)?;
                call.free(memory)?;
                call.memory(memory).map(|_| ())
            }
            "iterate" => {
                let mut seen = 0;
                call.iterate(0, u64::MAX, |pair| {
                    let _ = call.respond(pair.key);
                    seen += 1;
                    if seen == number(words, 1) {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })
            }
            "iterate-panic" => call.iterate(0, u64::MAX, |_| panic!("panic inside a visit")),
            "refs" => {
                let keys: Vec<Vec<u8>> = call
                    .reference_vector(0, u64::MAX, number(words, 1))?
                    .iter()
                    .map(|pair| pair.key.to_vec())
                    .collect();
                keys.iter().try_for_each(|key| call.respond(key))
            }
            "find" => {
                let mut position = 0;
                while let Some(key) = call.find_key(arg(words, 1), &mut position)? {
                    call.respond(key)?;
                }
                Ok(())
            }
            "info" => {
                let info = call.pool_info()?;
                call.respond(format!("{} {}", info.pool_id, info.objects).as_bytes())
            }
            "log" => {
                call.log(LogLevel::Info, "hello from the toolbox");
                Ok(())
            }
            "flags" => {
                let flags = format!(
                    "new={} ro={} detached={} signal={} pool={} layer={}",
                    call.is_new_key(),
                    call.is_read_only(),
                    call.is_detached(),
                    call.is_signal(),
                    call.targets_pool(),
                    call.layer()
                );
                call.respond(flags.as_bytes())?;
                match call.detached() {
                    Some(detached) => call.respond(detached),
                    None => Ok(()),
                }
            }
            "fill-then-fail-at-layer-1" => {
                let layer = call.layer() as u8;
                call.value_mut()?.fill(b'0' + layer);
                if layer == 1 {
                    return Err(PluginError::failed("layer 1 fails"));
                }
                Ok(())
            }
            "events" => call.respond(self.events.join(",").as_bytes()),
            "panic" => panic!("toolbox panics"),
            other => Err(PluginError::invalid(format!("unknown command {other}"))),
        }
    }
}

impl Plugin for Toolbox {
    fn launch(context: &Context<'_>, config: &[u8]) -> Result<Toolbox, PluginError> {
        if config == b"refuse" {
            return Err(PluginError::invalid("refusing as configured"));
        }
        context.pool_info()?;
        Ok(Toolbox::default())
    }

    fn do_work(&mut self, call: &mut Call<'_>) -> Result<(), PluginError> {
        let payload = String::from_utf8_lossy(call.payload()).into_owned();
        let words: Vec<&str> = payload.split(' ').collect();
        self.run(call, &words)
    }

    fn pool_event(&mut self, event: PoolEvent<'_>, _context: &Context<'_>) {
        self.events.push(match event {
            PoolEvent::Erase { key } => format!("erase {}", String::from_utf8_lossy(key)),
            other => format!("{other:?}"),
        });
    }
}

ferrite_plugin::export_plugin!(Toolbox, "toolbox");

fn host() -> TestHost {
    let mut host = TestHost::new(plugin_table(), b"").expect("toolbox launches");
    host.put(b"target", b"abcdef");
    host
}

fn ok(host: &mut TestHost, payload: &str) -> Vec<Vec<u8>> {
    let responses = host.invoke(b"target", payload.as_bytes(), InvokeOptions::default()).expect(payload);
    assert!(host.undeclared_writes().is_empty(), "{payload}: {:?}", host.undeclared_writes());
    responses.into_iter().map(|response| response.data).collect()
}

fn failed(host: &mut TestHost, payload: &str) -> ErrorCode {
    let error = host.invoke(b"target", payload.as_bytes(), InvokeOptions::default()).expect_err(payload);
    assert!(host.undeclared_writes().is_empty(), "{payload}: {:?}", host.undeclared_writes());
    error.code().expect("a header status")
}

/// A created key is zeroed, writable once declared, and stays after a successful call; an
/// existing key cannot be created again.
#[test]
fn create_key_writes_and_commits() {
    let mut host = host();
    assert_eq!(ok(&mut host, "create new 3"), vec![b"ccc".to_vec()]);
    assert_eq!(host.get(b"new").as_deref(), Some(&b"ccc"[..]));
    assert_eq!(failed(&mut host, "create new 3"), ErrorCode::Exists);
}

/// A failed call undoes its create, and its writes to the created value.
#[test]
fn failed_call_undoes_a_create() {
    let mut host = host();
    assert_eq!(failed(&mut host, "create-then-fail gone"), ErrorCode::Failed);
    assert_eq!(host.get(b"gone"), None);
}

/// A key opened for writing is written; one opened read-only refuses to be; unknown keys and the
/// call's own target (already locked) are refused.
#[test]
fn open_key_respects_the_access() {
    let mut host = host();
    host.put(b"other", b"xy");
    ok(&mut host, "open-write other");
    assert_eq!(host.get(b"other").as_deref(), Some(&b"ww"[..]));
    assert_eq!(failed(&mut host, "open-read-write other"), ErrorCode::Invalid);
    assert_eq!(failed(&mut host, "open-write missing"), ErrorCode::NotFound);
    assert_eq!(failed(&mut host, "open-write target"), ErrorCode::Locked);
}

/// An unlocked handle is retired: using it is an error, not stale bytes.
#[test]
fn unlock_retires_the_handle() {
    let mut host = host();
    host.put(b"other", b"xy");
    assert_eq!(failed(&mut host, "unlock other"), ErrorCode::Invalid);
}

/// Erase removes another key; the target cannot be erased.
#[test]
fn erase_key() {
    let mut host = host();
    host.put(b"other", b"xy");
    ok(&mut host, "erase other");
    assert_eq!(host.get(b"other"), None);
    assert_eq!(failed(&mut host, "erase target"), ErrorCode::Invalid);
    assert_eq!(failed(&mut host, "erase other"), ErrorCode::NotFound);
}

/// Resizing the target keeps its prefix, zero-fills the rest, and the call sees the new value.
#[test]
fn resize_the_target() {
    let mut host = host();
    assert_eq!(ok(&mut host, "resize 8"), vec![b"abcdef\0\0".to_vec()]);
    assert_eq!(host.get(b"target").as_deref(), Some(&b"abcdef\0\0"[..]));
    assert_eq!(ok(&mut host, "resize 2"), vec![b"ab".to_vec()]);
}

/// A sub-range is declared alone; a range past the value is refused and the call undone.
#[test]
fn value_range_mut_declares_only_its_range() {
    let mut host = host();
    assert_eq!(failed(&mut host, "range"), ErrorCode::Invalid);
    assert_eq!(host.get(b"target").as_deref(), Some(&b"abcdef"[..]));
}

/// Allocated memory is aligned, declared on first mutable access and survives the call.
#[test]
fn allocate_memory() {
    let mut host = host();
    let responses = ok(&mut host, "alloc");
    let offset: u64 = String::from_utf8_lossy(&responses[0]).parse().expect("an offset");
    assert_eq!(offset % 64, 0);
    assert_eq!(host.pool_bytes(offset, 16), vec![0xAB; 16]);
}

/// A freed handle is retired.
#[test]
fn free_retires_the_handle() {
    let mut host = host();
    assert_eq!(failed(&mut host, "alloc-free"), ErrorCode::Invalid);
}

/// Iteration visits pairs in key order and stops when the visitor breaks.
#[test]
fn iterate_stops_on_break() {
    let mut host = host();
    host.put(b"a", b"1");
    host.put(b"b", b"2");
    assert_eq!(ok(&mut host, "iterate 2"), vec![b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(ok(&mut host, "iterate 0").len(), 3);
}

/// A panic inside a visit crosses no C frame: it reaches the shim and fails the call.
#[test]
fn panic_inside_iterate_fails_the_call() {
    let mut host = host();
    assert_eq!(failed(&mut host, "iterate-panic"), ErrorCode::Failed);
    assert!(host.log().iter().any(|line| line.message.contains("panic inside a visit")));
    assert_eq!(ok(&mut host, "iterate 0").len(), 1);
}

/// The reference vector holds at most `max` pairs.
#[test]
fn reference_vector() {
    let mut host = host();
    host.put(b"a", b"1");
    assert_eq!(ok(&mut host, "refs 1"), vec![b"a".to_vec()]);
    assert_eq!(ok(&mut host, "refs 10").len(), 2);
}

/// find_key walks every match by prefix and resumes after each.
#[test]
fn find_key_by_prefix() {
    let mut host = host();
    host.put(b"user:1", b"");
    host.put(b"user:2", b"");
    host.put(b"zzz", b"");
    assert_eq!(ok(&mut host, "find prefix:user:"), vec![b"user:1".to_vec(), b"user:2".to_vec()]);
    assert_eq!(ok(&mut host, "find zzz"), vec![b"zzz".to_vec()]);
}

#[test]
fn pool_info_and_log() {
    let mut host = host();
    assert_eq!(ok(&mut host, "info"), vec![b"1 1".to_vec()]);
    ok(&mut host, "log");
    assert!(host.log().iter().any(|line| line.level == LogLevel::Info && line.message == "hello from the toolbox"));
}

/// The flags reach the plugin, and a detached value is lent to it.
#[test]
fn flags_and_detached_value() {
    let mut host = host();
    let options =
        InvokeOptions { create_size: Some(4), read_only: true, detached: Some(b"loose".to_vec()), signal: true };
    let responses = host.invoke(b"fresh", b"flags", options).expect("flags");
    assert_eq!(responses[0].data, b"new=true ro=true detached=true signal=true pool=false layer=0");
    assert_eq!(responses[1].data, b"loose");
    let responses = host.invoke_pool(b"flags", InvokeOptions::default()).expect("pool invocation");
    assert_eq!(responses[0].data, b"new=false ro=false detached=false signal=false pool=true layer=0");
}

/// A read-only call cannot declare, so it cannot write.
#[test]
fn read_only_call_cannot_write() {
    let mut host = host();
    let read_only = InvokeOptions { read_only: true, ..InvokeOptions::default() };
    let error = host.invoke(b"target", b"range", read_only).expect_err("read-only");
    assert_eq!(error.code(), Some(ErrorCode::Invalid));
    assert_eq!(host.get(b"target").as_deref(), Some(&b"abcdef"[..]));
}

/// A panic in do_work is ERR_FAILED with its message logged, and the plugin serves on.
#[test]
fn panic_in_do_work_is_contained() {
    let mut host = host();
    assert_eq!(failed(&mut host, "panic"), ErrorCode::Failed);
    assert!(host.log().iter().any(|line| line.level == LogLevel::Error && line.message.contains("toolbox panics")));
    ok(&mut host, "info");
}

/// In a chain every layer sees its number and a failure at any layer undoes the writes of all.
#[test]
fn chain_is_one_transaction() {
    let mut host =
        TestHost::builder().plugin(plugin_table(), b"").plugin(plugin_table(), b"").build().expect("a chain of two");
    host.put(b"target", b"abcdef");
    let responses = host.invoke(b"target", b"flags", InvokeOptions::default()).expect("flags");
    assert_eq!(responses.iter().map(|response| response.layer).collect::<Vec<_>>(), vec![0, 1]);
    let error = host.invoke(b"target", b"fill-then-fail-at-layer-1", InvokeOptions::default()).expect_err("fails");
    assert_eq!(error.code(), Some(ErrorCode::Failed));
    assert_eq!(host.get(b"target").as_deref(), Some(&b"abcdef"[..]));
}

/// A launch error refuses the plugin with its status and logged reason.
#[test]
fn launch_can_refuse() {
    match TestHost::new(plugin_table(), b"refuse") {
        Err(TestHostError::Launch { status, log, .. }) => {
            assert_eq!(status, abi::ERR_INVALID);
            assert!(log.iter().any(|line| line.message.contains("refusing as configured")));
        }
        other => panic!("expected a refused launch, got {other:?}"),
    }
}

/// Pool events reach the plugin with their key.
#[test]
fn pool_events_reach_the_plugin() {
    let mut host = host();
    host.pool_event(abi::EVENT_OPEN, b"");
    host.pool_event(abi::EVENT_ERASE, b"gone");
    assert_eq!(ok(&mut host, "events"), vec![b"Open,erase gone".to_vec()]);
}
