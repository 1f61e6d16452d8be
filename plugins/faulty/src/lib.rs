//! `faulty`: a Ferrite test plugin that misbehaves as asked, so containment is tested the same
//! way in CI and on a user's deployment. Payloads (ASCII):
//!
//! - `ok`: answers `ok`; proves the host is back after a crash.
//! - `panic`: panics. The SDK stops the panic at the C boundary: the call fails with
//!   `FERRITE_ERR_FAILED` and the panic message is logged; the host keeps running.
//! - `abort`: calls `std::process::abort`, killing the host process.
//! - `segv`: writes through a null pointer, killing the host process with SIGSEGV.
//! - `loop`: spins forever, until the call's deadline.
//! - `oom`: allocates and touches heap memory without bound, until the memory limit.
//! - `write-then-fail`: declares and overwrites the value with `0xEE` bytes, then fails; the
//!   value must come back unchanged.
//! - `undeclared`: overwrites the value with `0x55` bytes without declaring it, then succeeds;
//!   the host's checking mode must report the write.
//! - `peek KEY`: opens KEY for reading, answers its value and unlocks it (the read callbacks).
//! - `slow-bump`: waits 300 ms, then adds one to the value's first byte and succeeds: a correct
//!   call long enough for other clients to change the pool meanwhile.
//! - key scripts (`create KEY TEXT; update KEY TEXT; erase KEY; set TEXT; find EXPR; fail`):
//!   change other keys through the callbacks; see [`keys`].
//!
//! Any other payload is `FERRITE_ERR_INVALID` with a message listing these. A signal
//! (`[ado] signals`) is logged as `faulty: ADO::Signal::<signal> on <key>` and succeeds, and each
//! pool event as `faulty: <event> event` (`on <key>` for erase and resize).

pub mod keys;
mod misbehave;

use ferrite_plugin::{Access, Call, Context, LogLevel, Plugin, PluginError, PoolEvent};

pub use misbehave::{UNDECLARED_BYTE, WRITE_THEN_FAIL_BYTE};

/// The plugin: no state.
#[derive(Debug)]
pub struct Faulty;

impl Plugin for Faulty {
    fn launch(_context: &Context<'_>, _config: &[u8]) -> Result<Faulty, PluginError> {
        Ok(Faulty)
    }

    /// Says which pool events it gets in the server's log, for tests to see.
    fn pool_event(&mut self, event: PoolEvent<'_>, context: &Context<'_>) {
        let line = match event {
            PoolEvent::Erase { key } => format!("faulty: erase event on {}", String::from_utf8_lossy(key)),
            PoolEvent::Resize { key } => format!("faulty: resize event on {}", String::from_utf8_lossy(key)),
            PoolEvent::Open => "faulty: open event".to_owned(),
            PoolEvent::Close => "faulty: close event".to_owned(),
            PoolEvent::Delete => "faulty: delete event".to_owned(),
            _ => return,
        };
        context.log(LogLevel::Info, &line);
    }

    fn do_work(&mut self, call: &mut Call<'_>) -> Result<(), PluginError> {
        if call.is_signal() {
            // Told of a request on the pool: says so in the server's log, for tests to see.
            let message = format!(
                "faulty: {} on {}",
                String::from_utf8_lossy(call.payload()),
                String::from_utf8_lossy(call.key())
            );
            call.log(LogLevel::Info, &message);
            return Ok(());
        }
        if keys::is_script(call.payload()) {
            let script = call.payload().to_vec();
            return keys::run(call, &script);
        }
        if let Some(other) = call.payload().strip_prefix(b"peek ") {
            // Copied out: the payload borrows the call that `peek` must change.
            let other = other.to_vec();
            return peek(call, &other);
        }
        match call.payload() {
            b"ok" => call.respond(b"ok"),
            b"panic" => misbehave::panic(),
            b"abort" => misbehave::abort(),
            b"segv" => {
                misbehave::segv();
                Err(PluginError::failed("faulty: the null write did not crash"))
            }
            b"loop" => misbehave::endless_loop(),
            b"oom" => misbehave::unbounded_memory(),
            b"write-then-fail" => misbehave::write_then_fail(call),
            b"slow-bump" => misbehave::slow_bump(call),
            b"undeclared" => misbehave::undeclared(call),
            other => {
                let message = format!(
                    "faulty: unknown payload `{}`; expected ok, panic, abort, segv, loop, oom, write-then-fail, undeclared, slow-bump, peek KEY or a key script (create, update, erase, set, find, fail)",
                    String::from_utf8_lossy(other)
                );
                call.respond(message.as_bytes())?;
                Err(PluginError::invalid(message))
            }
        }
    }
}

/// `peek KEY`: opens another key for reading, answers its value and unlocks it.
fn peek(call: &mut Call<'_>, key: &[u8]) -> Result<(), PluginError> {
    let opened = call.open_key(key, Access::Read)?;
    let value = call.opened_value(opened)?.to_vec();
    call.unlock(opened)?;
    call.respond(&value)
}

ferrite_plugin::export_plugin!(Faulty, "faulty");

/// Only the payloads that leave the test process alive are driven here; the others are for the
/// server's containment tests, where they kill a `ferrite-ado` host, not the test.
#[cfg(test)]
mod tests {
    use ferrite_plugin::testing::{InvokeOptions, TestHost};
    use ferrite_plugin::{ErrorCode, LogLevel};

    use super::*;

    fn host_with_value(value: &[u8]) -> TestHost {
        let mut host = TestHost::new(plugin_table(), b"").expect("faulty launches");
        host.put(b"k", value);
        host
    }

    #[test]
    fn ok_answers_ok() {
        let mut host = host_with_value(b"v");
        let responses = host.invoke(b"k", b"ok", InvokeOptions::default()).expect("ok succeeds");
        assert_eq!(responses[0].data, b"ok");
    }

    /// A panic fails the call with FERRITE_ERR_FAILED and its message logged, and the plugin
    /// keeps serving.
    #[test]
    fn panic_is_caught_at_the_boundary() {
        let mut host = host_with_value(b"v");
        let error = host.invoke(b"k", b"panic", InvokeOptions::default()).expect_err("panic fails");
        assert_eq!(error.code(), Some(ErrorCode::Failed));
        assert!(
            host.log().iter().any(|line| line.level == LogLevel::Error && line.message.contains("panicking as asked")),
            "{:?}",
            host.log()
        );
        assert!(host.invoke(b"k", b"ok", InvokeOptions::default()).is_ok());
    }

    /// The declared overwrite is undone when the call fails; nothing was written undeclared.
    #[test]
    fn write_then_fail_changes_nothing() {
        let mut host = host_with_value(b"original");
        let error = host.invoke(b"k", b"write-then-fail", InvokeOptions::default()).expect_err("fails");
        assert_eq!(error.code(), Some(ErrorCode::Failed));
        assert_eq!(host.get(b"k").as_deref(), Some(&b"original"[..]));
        assert!(host.undeclared_writes().is_empty());
    }

    /// The checking mode reports exactly the value's bytes, which stay overwritten: the host
    /// cannot undo what it was not told about.
    #[test]
    fn undeclared_write_is_reported() {
        let mut host = host_with_value(b"original");
        host.invoke(b"k", b"undeclared", InvokeOptions::default()).expect("the buggy call itself succeeds");
        let offset = host.value_offset(b"k").expect("the key exists");
        assert_eq!(host.undeclared_writes(), std::slice::from_ref(&(offset..offset + 8)));
        assert_eq!(host.get(b"k"), Some(vec![UNDECLARED_BYTE; 8]));
    }

    /// A script's changes to other keys land together, and a failing script's are undone.
    #[test]
    fn scripts_change_other_keys_or_nothing() {
        let mut host = host_with_value(b"v");
        host.put(b"other", b"o");
        host.invoke(b"k", b"create fresh new; update other longer; set own", InvokeOptions::default()).expect("runs");
        assert_eq!(host.get(b"fresh").as_deref(), Some(&b"new"[..]));
        assert_eq!(host.get(b"other").as_deref(), Some(&b"longer"[..]));
        assert_eq!(host.get(b"k").as_deref(), Some(&b"own"[..]));
        let error = host.invoke(b"k", b"erase other; set changed; fail", InvokeOptions::default()).expect_err("fails");
        assert_eq!(error.code(), Some(ErrorCode::Failed));
        assert_eq!(host.get(b"other").as_deref(), Some(&b"longer"[..]));
        assert_eq!(host.get(b"k").as_deref(), Some(&b"own"[..]));
        assert!(host.undeclared_writes().is_empty());
    }

    #[test]
    fn unknown_payload_is_invalid() {
        let mut host = host_with_value(b"v");
        let error = host.invoke(b"k", b"explode", InvokeOptions::default()).expect_err("unknown");
        assert_eq!(error.code(), Some(ErrorCode::Invalid));
        assert!(String::from_utf8_lossy(&error.responses[0].data).contains("write-then-fail"));
    }
}
