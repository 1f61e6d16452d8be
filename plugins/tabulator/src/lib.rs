//! `tabulator`: a Ferrite plugin keeping running statistics of numeric samples per key.
//!
//! The value is 32 bytes, little-endian: count (`u64`) at offset 0, then min, max and sum
//! (`f64`) at 8, 16 and 24; the mean is the sum over the count. Invoke with create-on-demand and
//! a value size of 32 so a new key starts as 32 zero bytes, which is the tally of no samples. The
//! sum rather than a running mean is stored because it gives exact means wherever the samples'
//! total is representable (see [`Stats`]).
//!
//! Payloads are ASCII:
//!
//! - `add X [Y ...]`: adds one or more samples, each a finite decimal number as Rust's `f64`
//!   parser reads it (`3`, `-2.5`, `1e-3`); `NaN`, `inf` and numbers too large for an `f64` are
//!   refused. All or nothing: one bad sample refuses the whole call and changes nothing.
//! - `get`: changes nothing. Works on a read-only invocation.
//! - `reset`: back to no samples (32 zero bytes).
//!
//! Every call answers the statistics after it, in one response buffer:
//! `count=N min=A max=B mean=C`, each number the shortest text that reads back as the same `f64`
//! (`2.5`, `3.0`, `1e300`). With a count of 0, min, max and mean are `-`: they are undefined,
//! and a `0` would read as a real minimum.
//!
//! A value that is not 32 bytes (or whose fields contradict each other), a malformed payload, a
//! sum beyond the range of an `f64` (±1.8e308) or a count beyond a `u64`, or `add` / `reset` on
//! a read-only invocation answers a message starting with `tabulator:` and fails the call with
//! `FERRITE_ERR_INVALID`; nothing changes.

mod payload;
mod stats;

use ferrite_plugin::{Call, Context, Plugin, PluginError};

pub use payload::Operation;
pub use stats::{Stats, VALUE_BYTES};

/// The plugin: the statistics live in each key's value, so there is no state.
#[derive(Debug)]
pub struct Tabulator;

fn write(call: &mut Call<'_>, stats: &Stats) -> Result<(), PluginError> {
    let bytes = call
        .value_mut()
        .map_err(|error| PluginError::invalid(format!("tabulator: cannot write the value ({error})")))?;
    bytes.copy_from_slice(&stats.encode());
    Ok(())
}

/// Carries out one operation and returns the answer text.
fn apply(call: &mut Call<'_>, operation: Operation) -> Result<String, PluginError> {
    if call.targets_pool() {
        return Err(PluginError::invalid("tabulator: statistics live in a key; invoke it on one"));
    }
    let current = Stats::decode(call.value())?;
    let next = match operation {
        Operation::Get => return Ok(current.to_string()),
        // Folded into a copy and written once, so a failure part-way leaves the value alone.
        Operation::Add(samples) => samples.iter().try_fold(current, |stats, &sample| stats.with_sample(sample))?,
        Operation::Reset => Stats::EMPTY,
    };
    if call.is_read_only() {
        // Said here rather than left to the declare callback, whose refusal names no request.
        return Err(PluginError::invalid("tabulator: a read-only invocation can only `get`"));
    }
    write(call, &next)?;
    Ok(next.to_string())
}

impl Plugin for Tabulator {
    fn launch(_context: &Context<'_>, _config: &[u8]) -> Result<Tabulator, PluginError> {
        Ok(Tabulator)
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

ferrite_plugin::export_plugin!(Tabulator, "tabulator");

#[cfg(test)]
mod tests {
    use ferrite_plugin::testing::{InvokeError, InvokeOptions, TestHost};
    use ferrite_plugin::ErrorCode;

    use super::*;

    fn host() -> TestHost {
        TestHost::new(plugin_table(), b"").expect("tabulator launches")
    }

    /// Invokes with create-on-demand, expects success and one answer, and checks that every
    /// byte the call changed was declared.
    fn answer(host: &mut TestHost, key: &[u8], payload: &str) -> String {
        let responses = host.invoke(key, payload.as_bytes(), InvokeOptions::create(VALUE_BYTES)).expect("succeeds");
        assert_eq!(responses.len(), 1);
        assert!(host.undeclared_writes().is_empty(), "{:?}", host.undeclared_writes());
        String::from_utf8(responses[0].data.clone()).expect("text")
    }

    fn failure(host: &mut TestHost, key: &[u8], payload: &str, options: InvokeOptions) -> (InvokeError, String) {
        let error = host.invoke(key, payload.as_bytes(), options).expect_err("fails");
        assert!(host.undeclared_writes().is_empty(), "{:?}", host.undeclared_writes());
        let text = String::from_utf8(error.responses[0].data.clone()).expect("text");
        (error, text)
    }

    fn stored(host: &TestHost, key: &[u8]) -> Stats {
        Stats::decode(&host.get(key).expect("the key exists")).expect("a valid value")
    }

    /// A fresh key is the empty tally: its answer says so with `-`, and it is 32 zero bytes.
    #[test]
    fn get_on_a_fresh_value() {
        let mut host = host();
        assert_eq!(answer(&mut host, b"t", "get"), "count=0 min=- max=- mean=-");
        assert_eq!(host.get(b"t"), Some(vec![0; VALUE_BYTES]));
    }

    /// Samples added one call at a time and several in one call accumulate into one tally,
    /// stored in the documented layout; `reset` empties it.
    #[test]
    fn tallies_samples_across_calls() {
        let mut host = host();
        assert_eq!(answer(&mut host, b"t", "add 4"), "count=1 min=4.0 max=4.0 mean=4.0");
        assert_eq!(answer(&mut host, b"t", "add -2 10.5 1.5"), "count=4 min=-2.0 max=10.5 mean=3.5");
        assert_eq!(answer(&mut host, b"t", "get"), "count=4 min=-2.0 max=10.5 mean=3.5");
        let bytes = host.get(b"t").expect("stored");
        assert_eq!(bytes[0..8], 4u64.to_le_bytes());
        assert_eq!(bytes[8..16], (-2.0f64).to_le_bytes());
        assert_eq!(bytes[16..24], 10.5f64.to_le_bytes());
        assert_eq!(bytes[24..32], 14.0f64.to_le_bytes(), "the sum");

        assert_eq!(answer(&mut host, b"t", "reset"), "count=0 min=- max=- mean=-");
        assert_eq!(host.get(b"t"), Some(vec![0; VALUE_BYTES]));
        assert_eq!(answer(&mut host, b"t", "add 7"), "count=1 min=7.0 max=7.0 mean=7.0");
    }

    /// One bad sample among good ones refuses the whole call: the value is byte for byte as
    /// before, and the answer names the culprit.
    #[test]
    fn several_samples_are_all_or_nothing() {
        let mut host = host();
        answer(&mut host, b"t", "add 1 2");
        let before = host.get(b"t");
        for payload in ["add 5 nan 6", "add 5 inf", "add 5 x", "add 5 1e999"] {
            let (error, text) = failure(&mut host, b"t", payload, InvokeOptions::default());
            assert_eq!(error.code(), Some(ErrorCode::Invalid), "{payload}");
            assert!(text.starts_with("tabulator:"), "{text}");
            assert_eq!(host.get(b"t"), before, "{payload}");
        }
        assert_eq!(stored(&host, b"t"), Stats { count: 2, min: 1.0, max: 2.0, sum: 3.0 });
    }

    /// A read-only invocation may get but neither add nor reset.
    #[test]
    fn read_only_gets_but_does_not_add() {
        let mut host = host();
        answer(&mut host, b"t", "add 3");
        let before = host.get(b"t");
        let read_only = InvokeOptions { read_only: true, ..InvokeOptions::default() };
        let responses = host.invoke(b"t", b"get", read_only.clone()).expect("get works read-only");
        assert_eq!(responses[0].data, b"count=1 min=3.0 max=3.0 mean=3.0");
        for payload in ["add 1", "reset"] {
            let (error, text) = failure(&mut host, b"t", payload, read_only.clone());
            assert_eq!(error.code(), Some(ErrorCode::Invalid));
            assert!(text.contains("read-only"), "{text}");
            assert_eq!(host.get(b"t"), before);
        }
    }

    /// A value of another size, or one whose fields contradict each other, is refused by every
    /// request and left as it was.
    #[test]
    fn refuses_values_that_are_not_tallies() {
        let mut host = host();
        host.put(b"short", &[1; 8]);
        for payload in ["get", "add 1", "reset"] {
            let (error, text) = failure(&mut host, b"short", payload, InvokeOptions::default());
            assert_eq!(error.code(), Some(ErrorCode::Invalid));
            assert!(text.contains("8 bytes, not 32"), "{text}");
            assert_eq!(host.get(b"short"), Some(vec![1; 8]));
        }

        let mut garbage = vec![0; VALUE_BYTES];
        garbage[24..32].copy_from_slice(&1.0f64.to_le_bytes()); // a mean with a count of 0
        host.put(b"garbage", &garbage);
        let (error, text) = failure(&mut host, b"garbage", "add 1", InvokeOptions::default());
        assert_eq!(error.code(), Some(ErrorCode::Invalid));
        assert!(text.contains("not a tabulator value"), "{text}");
        assert_eq!(host.get(b"garbage"), Some(garbage));
    }

    /// A failed create-on-demand call leaves no key behind, and a key-less call is refused.
    #[test]
    fn failed_calls_leave_nothing() {
        let mut host = host();
        let (error, _) = failure(&mut host, b"new", "add x", InvokeOptions::create(VALUE_BYTES));
        assert_eq!(error.code(), Some(ErrorCode::Invalid));
        assert_eq!(host.get(b"new"), None);

        let error = host.invoke_pool(b"get", InvokeOptions::default()).expect_err("no key");
        assert_eq!(error.code(), Some(ErrorCode::Invalid));
    }
}
