//! `filter`: a Ferrite plugin that evaluates a predicate over every value of a pool, next to the
//! data, and answers only the keys whose values match, so a client fetches keys instead of every
//! value. Invoke it on the pool itself (an empty key). Payloads (ASCII command, then its operand):
//!
//! - `contains BYTES`: the value contains BYTES (the rest of the payload after one space).
//! - `starts-with BYTES`: the value starts with BYTES.
//! - `u64-at-least N`: the value is 8 bytes whose little-endian integer is at least N (a
//!   `counter`'s value, for instance).
//!
//! The answer is the matching keys, one per line (`\n`-separated, a key per line), in buffers
//! of at most 64 KiB: a key containing a newline is answered on its own in a buffer of its own.
//! Pairs are read as they are (not locked): a value another client changes during the walk is
//! seen before or after the change, and a key may come twice if the table grows meanwhile (see
//! `docs/plugins.md`).

use std::ops::ControlFlow;

use ferrite_plugin::{Call, Context, Plugin, PluginError};

/// Bytes of keys one response buffer holds at most.
const BUFFER_BYTES_MAX: usize = 64 * 1024;

/// What a value must satisfy.
#[derive(Debug, PartialEq, Eq)]
enum Predicate<'p> {
    Contains(&'p [u8]),
    StartsWith(&'p [u8]),
    U64AtLeast(u64),
}

impl<'p> Predicate<'p> {
    fn parse(payload: &'p [u8]) -> Result<Predicate<'p>, PluginError> {
        let (command, operand) = match payload.iter().position(|b| *b == b' ') {
            Some(space) => (&payload[..space], &payload[space + 1..]),
            None => (payload, &payload[payload.len()..]),
        };
        match command {
            b"contains" => Ok(Predicate::Contains(operand)),
            b"starts-with" => Ok(Predicate::StartsWith(operand)),
            b"u64-at-least" => std::str::from_utf8(operand)
                .ok()
                .and_then(|text| text.trim().parse().ok())
                .map(Predicate::U64AtLeast)
                .ok_or_else(|| PluginError::invalid("filter: u64-at-least needs a decimal number")),
            _ => Err(PluginError::invalid(
                "filter: unknown predicate; expected `contains BYTES`, `starts-with BYTES` or `u64-at-least N`",
            )),
        }
    }

    fn matches(&self, value: &[u8]) -> bool {
        match self {
            Predicate::Contains(needle) => needle.is_empty() || value.windows(needle.len()).any(|w| w == *needle),
            Predicate::StartsWith(prefix) => value.starts_with(prefix),
            Predicate::U64AtLeast(least) => {
                value.try_into().map(u64::from_le_bytes).is_ok_and(|number| number >= *least)
            }
        }
    }
}

/// The plugin: no state.
#[derive(Debug)]
pub struct Filter;

impl Plugin for Filter {
    fn launch(_context: &Context<'_>, _config: &[u8]) -> Result<Filter, PluginError> {
        Ok(Filter)
    }

    fn do_work(&mut self, call: &mut Call<'_>) -> Result<(), PluginError> {
        if call.is_signal() {
            // A request on the pool (`[ado] signals`): nothing to do about it.
            return Ok(());
        }
        if !call.targets_pool() {
            return Err(PluginError::invalid("filter: invoke it on the pool (an empty key), not on a key"));
        }
        let payload = call.payload().to_vec();
        let predicate = Predicate::parse(&payload)?;
        let mut buffers: Vec<Vec<u8>> = vec![Vec::new()];
        call.iterate(0, u64::MAX, |pair| {
            if predicate.matches(pair.value) {
                add_key(&mut buffers, pair.key);
            }
            ControlFlow::Continue(())
        })?;
        for buffer in buffers.iter().filter(|buffer| !buffer.is_empty()) {
            call.respond(buffer)?;
        }
        Ok(())
    }
}

/// Appends `key` to the answer: a line of the last buffer, or a new buffer when it is full (or
/// when the key itself holds a newline, which would split its line).
fn add_key(buffers: &mut Vec<Vec<u8>>, key: &[u8]) {
    let last = buffers.last_mut().expect("there is always a buffer");
    if key.contains(&b'\n') {
        buffers.push(key.to_vec());
        buffers.push(Vec::new());
        return;
    }
    if !last.is_empty() && last.len() + 1 + key.len() > BUFFER_BYTES_MAX {
        buffers.push(Vec::new());
    }
    let last = buffers.last_mut().expect("there is always a buffer");
    if !last.is_empty() {
        last.push(b'\n');
    }
    last.extend_from_slice(key);
}

ferrite_plugin::export_plugin!(Filter, "filter");

#[cfg(test)]
mod tests {
    use ferrite_plugin::testing::{InvokeOptions, TestHost};

    use super::*;

    #[test]
    fn predicates_parse_and_match() {
        assert_eq!(Predicate::parse(b"contains needle"), Ok(Predicate::Contains(b"needle")));
        assert!(Predicate::Contains(b"ee").matches(b"needle"));
        assert!(!Predicate::StartsWith(b"ee").matches(b"needle"));
        assert!(Predicate::U64AtLeast(5).matches(&7u64.to_le_bytes()));
        assert!(!Predicate::U64AtLeast(5).matches(&4u64.to_le_bytes()));
        assert!(!Predicate::U64AtLeast(5).matches(b"not eight"));
        assert!(Predicate::parse(b"u64-at-least many").is_err());
        assert!(Predicate::parse(b"sort").is_err());
    }

    #[test]
    fn keys_fill_buffers_line_by_line() {
        let mut buffers = vec![Vec::new()];
        add_key(&mut buffers, b"a");
        add_key(&mut buffers, b"b");
        add_key(&mut buffers, b"odd\nkey");
        add_key(&mut buffers, b"c");
        assert_eq!(buffers, vec![b"a\nb".to_vec(), b"odd\nkey".to_vec(), b"c".to_vec()]);
    }

    /// Through the test host: only matching keys come back, a keyed call is refused, nothing is
    /// written.
    #[test]
    fn answers_only_the_matching_keys() {
        let mut host = TestHost::new(plugin_table(), b"").expect("filter launches");
        host.put(b"apple", b"red fruit");
        host.put(b"cherry", b"red stone fruit");
        host.put(b"lime", b"green fruit");
        let answer = host.invoke_pool(b"contains red", InvokeOptions::default()).expect("filter succeeds");
        let mut keys: Vec<&[u8]> = answer.iter().flat_map(|r| r.data.split(|b| *b == b'\n')).collect();
        keys.sort_unstable();
        assert_eq!(keys, [&b"apple"[..], b"cherry"]);
        assert!(host.invoke(b"apple", b"contains red", InvokeOptions::default()).is_err());
        assert!(host.undeclared_writes().is_empty());
    }
}
