//! The counter's payloads, parsed from ASCII text.

use ferrite_plugin::PluginError;

/// One request to the counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `add N`: add N (may be negative).
    Add(i64),
    /// `get`: read the value.
    Get,
    /// `cas OLD NEW`: set NEW if the value is OLD.
    CompareAndSwap { old: i64, new: i64 },
}

const USAGE: &str = "expected `add N`, `get` or `cas OLD NEW`";

fn number(word: Option<&str>) -> Result<i64, PluginError> {
    let word = word.ok_or_else(|| PluginError::invalid(format!("counter: a number is missing; {USAGE}")))?;
    word.parse().map_err(|_| PluginError::invalid(format!("counter: `{word}` is not a 64-bit signed integer")))
}

impl Operation {
    pub fn parse(payload: &[u8]) -> Result<Operation, PluginError> {
        let text =
            std::str::from_utf8(payload).map_err(|_| PluginError::invalid(format!("counter: not text; {USAGE}")))?;
        let mut words = text.split_ascii_whitespace();
        let operation = match words.next() {
            Some("add") => Operation::Add(number(words.next())?),
            Some("get") => Operation::Get,
            Some("cas") => Operation::CompareAndSwap { old: number(words.next())?, new: number(words.next())? },
            _ => return Err(PluginError::invalid(format!("counter: unknown request `{text}`; {USAGE}"))),
        };
        if let Some(extra) = words.next() {
            return Err(PluginError::invalid(format!("counter: unexpected `{extra}`; {USAGE}")));
        }
        Ok(operation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each payload form parses, with negative numbers and surrounding spaces.
    #[test]
    fn parses_every_form() {
        assert_eq!(Operation::parse(b"add -3"), Ok(Operation::Add(-3)));
        assert_eq!(Operation::parse(b" get "), Ok(Operation::Get));
        assert_eq!(Operation::parse(b"cas 1 -2"), Ok(Operation::CompareAndSwap { old: 1, new: -2 }));
    }

    /// Malformed payloads are refused as invalid, naming what is wrong.
    #[test]
    fn refuses_malformed_payloads() {
        for payload in
            [&b""[..], b"add", b"add x", b"add 1 2", b"cas 1", b"inc 1", b"add 99999999999999999999", b"\xff"]
        {
            let error = Operation::parse(payload).expect_err("malformed");
            assert_eq!(error.code(), ferrite_plugin::ErrorCode::Invalid, "{payload:?}");
        }
    }
}
