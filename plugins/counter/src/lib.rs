//! `counter`: a Ferrite plugin keeping a 64-bit signed integer per key.
//!
//! The value is 8 bytes, little-endian. Invoke with create-on-demand and a value size of 8 so a
//! new key starts as zero. Payloads are ASCII:
//!
//! - `add N`: adds N (which may be negative) and answers the new value, e.g. `42`. A sum that
//!   would overflow is an error that changes nothing.
//! - `get`: answers the value. Works on a read-only invocation.
//! - `cas OLD NEW`: if the value is OLD, sets NEW and answers it (`NEW`); otherwise changes
//!   nothing and answers `mismatch CURRENT`. So the caller tells success from failure by the
//!   answer: a bare number means the swap happened; `mismatch ` and the current value mean it
//!   did not (and say what to retry with).
//!
//! Every answer is decimal text in one response buffer. A value that is not 8 bytes, a
//! malformed payload, an overflow, or a write on a read-only invocation answers a message
//! starting with `counter:` and fails the call with `FERRITE_ERR_INVALID`; nothing changes.

mod payload;

use ferrite_plugin::{Call, Context, Plugin, PluginError};

pub use payload::Operation;

/// The bytes of a counter value.
pub const VALUE_BYTES: usize = 8;

/// The plugin: the counter lives in each key's value, so there is no state.
#[derive(Debug)]
pub struct Counter;

fn read(call: &Call<'_>) -> Result<i64, PluginError> {
    let bytes: [u8; VALUE_BYTES] = call.value().try_into().map_err(|_| {
        PluginError::invalid(format!("counter: the value is {} bytes, not {VALUE_BYTES}", call.value().len()))
    })?;
    Ok(i64::from_le_bytes(bytes))
}

fn write(call: &mut Call<'_>, value: i64) -> Result<(), PluginError> {
    let bytes =
        call.value_mut().map_err(|error| PluginError::invalid(format!("counter: cannot write the value ({error})")))?;
    bytes.copy_from_slice(&value.to_le_bytes());
    Ok(())
}

/// Carries out one operation and returns the answer text.
fn apply(call: &mut Call<'_>, operation: Operation) -> Result<String, PluginError> {
    if call.targets_pool() {
        return Err(PluginError::invalid("counter: a counter lives in a key; invoke it on one"));
    }
    let current = read(call)?;
    match operation {
        Operation::Get => Ok(current.to_string()),
        Operation::Add(delta) => {
            let sum = current
                .checked_add(delta)
                .ok_or_else(|| PluginError::invalid(format!("counter: {current} + {delta} overflows 64 bits")))?;
            write(call, sum)?;
            Ok(sum.to_string())
        }
        Operation::CompareAndSwap { old, new } if old == current => {
            write(call, new)?;
            Ok(new.to_string())
        }
        Operation::CompareAndSwap { .. } => Ok(format!("mismatch {current}")),
    }
}

impl Plugin for Counter {
    fn launch(_context: &Context<'_>, _config: &[u8]) -> Result<Counter, PluginError> {
        Ok(Counter)
    }

    fn do_work(&mut self, call: &mut Call<'_>) -> Result<(), PluginError> {
        if call.is_signal() {
            // A request on the pool (`[ado] signals`): nothing to do about it.
            return Ok(());
        }
        let answer = Operation::parse(call.payload()).and_then(|operation| apply(call, operation));
        match answer {
            Ok(text) => call.respond(text.as_bytes()),
            Err(error) => {
                // The client sees why; the error's code fails the call so nothing changes.
                call.respond(error.message().as_bytes())?;
                Err(error)
            }
        }
    }
}

ferrite_plugin::export_plugin!(Counter, "counter");

#[cfg(test)]
mod tests {
    use ferrite_plugin::testing::{InvokeError, InvokeOptions, TestHost};
    use ferrite_plugin::ErrorCode;

    use super::*;

    fn host() -> TestHost {
        TestHost::new(plugin_table(), b"").expect("counter launches")
    }

    fn answer(host: &mut TestHost, key: &[u8], payload: &str) -> String {
        let responses = host.invoke(key, payload.as_bytes(), InvokeOptions::create(VALUE_BYTES)).expect("succeeds");
        assert_eq!(responses.len(), 1);
        assert!(host.undeclared_writes().is_empty(), "{:?}", host.undeclared_writes());
        String::from_utf8(responses[0].data.clone()).expect("text")
    }

    fn failure(host: &mut TestHost, key: &[u8], payload: &str, options: InvokeOptions) -> (InvokeError, String) {
        let error = host.invoke(key, payload.as_bytes(), options).expect_err("fails");
        let text = String::from_utf8(error.responses[0].data.clone()).expect("text");
        (error, text)
    }

    /// A new key starts at zero; adds accumulate, negative ones too; the value is 8 bytes LE.
    #[test]
    fn adds_from_zero() {
        let mut host = host();
        assert_eq!(answer(&mut host, b"c", "get"), "0");
        assert_eq!(answer(&mut host, b"c", "add 5"), "5");
        assert_eq!(answer(&mut host, b"c", "add -7"), "-2");
        assert_eq!(host.get(b"c"), Some((-2i64).to_le_bytes().to_vec()));
    }

    /// A signal (a put or get on the pool, with `[ado] signals`) is nothing to count: it
    /// succeeds, answers nothing and leaves the value alone.
    #[test]
    fn signals_change_nothing() {
        let mut host = host();
        assert_eq!(answer(&mut host, b"c", "add 3"), "3");
        let signal = InvokeOptions { signal: true, ..InvokeOptions::default() };
        let responses = host.invoke(b"c", b"ADO::Signal::post-put", signal).expect("a signal succeeds");
        assert!(responses.is_empty());
        assert_eq!(host.get(b"c"), Some(3i64.to_le_bytes().to_vec()));
    }

    /// A swap from the right old value happens and answers the new value; from a wrong one it
    /// changes nothing and answers the mismatch, even when the current value equals NEW.
    #[test]
    fn compare_and_swap() {
        let mut host = host();
        answer(&mut host, b"c", "add 5");
        assert_eq!(answer(&mut host, b"c", "cas 5 9"), "9");
        assert_eq!(answer(&mut host, b"c", "cas 3 9"), "mismatch 9");
        assert_eq!(answer(&mut host, b"c", "cas 5 6"), "mismatch 9");
        assert_eq!(answer(&mut host, b"c", "get"), "9");
    }

    /// Overflow is an error that leaves the value as it was.
    #[test]
    fn overflow_changes_nothing() {
        let mut host = host();
        host.put(b"c", &i64::MAX.to_le_bytes());
        let (error, text) = failure(&mut host, b"c", "add 1", InvokeOptions::default());
        assert_eq!(error.code(), Some(ErrorCode::Invalid));
        assert!(text.contains("overflows"), "{text}");
        assert_eq!(host.get(b"c"), Some(i64::MAX.to_le_bytes().to_vec()));
    }

    /// A value of the wrong size, or a malformed payload, is a clear error and changes nothing.
    #[test]
    fn refuses_bad_values_and_payloads() {
        let mut host = host();
        host.put(b"short", b"abc");
        let (error, text) = failure(&mut host, b"short", "add 1", InvokeOptions::default());
        assert_eq!(error.code(), Some(ErrorCode::Invalid));
        assert!(text.contains("3 bytes"), "{text}");
        assert_eq!(host.get(b"short").as_deref(), Some(&b"abc"[..]));

        host.put(b"c", &4i64.to_le_bytes());
        let (error, text) = failure(&mut host, b"c", "add one", InvokeOptions::default());
        assert_eq!(error.code(), Some(ErrorCode::Invalid));
        assert!(text.starts_with("counter:"), "{text}");
        assert_eq!(host.get(b"c"), Some(4i64.to_le_bytes().to_vec()));
    }

    /// A read-only invocation may get but not add.
    #[test]
    fn read_only_gets_but_does_not_add() {
        let mut host = host();
        host.put(b"c", &3i64.to_le_bytes());
        let read_only = InvokeOptions { read_only: true, ..InvokeOptions::default() };
        let responses = host.invoke(b"c", b"get", read_only.clone()).expect("get works read-only");
        assert_eq!(responses[0].data, b"3");
        let (error, _) = failure(&mut host, b"c", "add 1", read_only);
        assert_eq!(error.code(), Some(ErrorCode::Invalid));
        assert_eq!(host.get(b"c"), Some(3i64.to_le_bytes().to_vec()));
    }

    /// A failed create-on-demand call leaves no key behind.
    #[test]
    fn failed_call_on_a_new_key_leaves_no_key() {
        let mut host = host();
        let (error, _) = failure(&mut host, b"new", "add x", InvokeOptions::create(VALUE_BYTES));
        assert_eq!(error.code(), Some(ErrorCode::Invalid));
        assert_eq!(host.get(b"new"), None);
    }
}
