//! `filter`: a Ferrite plugin that evaluates a predicate over every value of a pool, next to the
//! data, and answers only the keys whose values match, so a client fetches keys instead of every
//! value. Invoke it on the pool itself (an empty key). Payloads (ASCII command, then its operand):
//!
//! - `contains BYTES`: the value contains BYTES (the rest of the payload after one space).
//! - `starts-with BYTES`: the value starts with BYTES.
//! - `u64-at-least N`: the value is 8 bytes whose little-endian integer is at least N (a
//!   `counter`'s value, for instance).
//!
//! The answer is the matching keys, one response buffer each (so any key, newlines included,
//! comes back as it is; RESP's `FERRITE.INVOKE` answers them as an array).
//! Pairs are read as they are (not locked): a value another client changes during the walk is
//! seen before or after the change, and a key may come twice if the table grows meanwhile (see
//! `docs/plugins.md`).

use std::ops::ControlFlow;

use ferrite_plugin::{Call, Context, Plugin, PluginError};

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
        let mut matching: Vec<Vec<u8>> = Vec::new();
        call.iterate(0, u64::MAX, |pair| {
            if predicate.matches(pair.value) {
                matching.push(pair.key.to_vec());
            }
            ControlFlow::Continue(())
        })?;
        for key in &matching {
            call.respond(key)?;
        }
        Ok(())
    }
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

    /// Through the test host: only matching keys come back, a keyed call is refused, nothing is
    /// written.
    #[test]
    fn answers_only_the_matching_keys() {
        let mut host = TestHost::new(plugin_table(), b"").expect("filter launches");
        host.put(b"apple", b"red fruit");
        host.put(b"cherry", b"red stone fruit");
        host.put(b"lime", b"green fruit");
        let answer = host.invoke_pool(b"contains red", InvokeOptions::default()).expect("filter succeeds");
        let mut keys: Vec<&[u8]> = answer.iter().map(|r| &r.data[..]).collect();
        keys.sort_unstable();
        assert_eq!(keys, [&b"apple"[..], b"cherry"]);
        assert!(host.invoke(b"apple", b"contains red", InvokeOptions::default()).is_err());
        assert!(host.undeclared_writes().is_empty());
    }
}
