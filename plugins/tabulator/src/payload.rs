//! The tabulator's payloads, parsed from ASCII text.

use ferrite_plugin::PluginError;

/// One request to the tabulator.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// `add X Y ...`: add one or more samples, every one finite. Parsed whole before anything
    /// is applied, so one bad sample refuses them all. Each sample takes two bytes of text at
    /// least (a digit and a space), so the list is at most four times the payload's size and the
    /// server's payload limit bounds it.
    Add(Vec<f64>),
    /// `get`: read the statistics.
    Get,
    /// `reset`: back to no samples.
    Reset,
}

const USAGE: &str = "expected `add X [Y ...]`, `get` or `reset`";

fn sample(word: &str) -> Result<f64, PluginError> {
    let sample: f64 =
        word.parse().map_err(|_| PluginError::invalid(format!("tabulator: `{word}` is not a number; {USAGE}")))?;
    // "inf", "NaN" and overflowing text like "1e999" parse, but would poison min, max or mean.
    if !sample.is_finite() {
        return Err(PluginError::invalid(format!("tabulator: `{word}` is not a finite number")));
    }
    Ok(sample)
}

impl Operation {
    pub fn parse(payload: &[u8]) -> Result<Operation, PluginError> {
        let text =
            std::str::from_utf8(payload).map_err(|_| PluginError::invalid(format!("tabulator: not text; {USAGE}")))?;
        let mut words = text.split_ascii_whitespace();
        let operation = match words.next() {
            Some("add") => {
                let samples = words.by_ref().map(sample).collect::<Result<Vec<f64>, PluginError>>()?;
                if samples.is_empty() {
                    return Err(PluginError::invalid(format!("tabulator: a number is missing; {USAGE}")));
                }
                Operation::Add(samples)
            }
            Some("get") => Operation::Get,
            Some("reset") => Operation::Reset,
            _ => return Err(PluginError::invalid(format!("tabulator: unknown request `{text}`; {USAGE}"))),
        };
        if let Some(extra) = words.next() {
            return Err(PluginError::invalid(format!("tabulator: unexpected `{extra}`; {USAGE}")));
        }
        Ok(operation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each payload form parses, with several samples, signs, exponents and surrounding spaces.
    #[test]
    fn parses_every_form() {
        assert_eq!(Operation::parse(b"add 3"), Ok(Operation::Add(vec![3.0])));
        assert_eq!(Operation::parse(b" add -2.5  1e3 +4 .5 "), Ok(Operation::Add(vec![-2.5, 1000.0, 4.0, 0.5])));
        assert_eq!(Operation::parse(b"get"), Ok(Operation::Get));
        assert_eq!(Operation::parse(b" reset\n"), Ok(Operation::Reset));
    }

    /// Malformed payloads, and samples that are not finite numbers, are refused as invalid.
    #[test]
    fn refuses_malformed_payloads() {
        for payload in [
            &b""[..],
            b"add",
            b"add x",
            b"add 1 x 2",
            b"add NaN",
            b"add inf",
            b"add -infinity",
            b"add 1e999",
            b"add 0x10",
            b"get 1",
            b"reset now",
            b"sum 1",
            b"\xff",
        ] {
            let error = Operation::parse(payload).expect_err("malformed");
            assert_eq!(error.code(), ferrite_plugin::ErrorCode::Invalid, "{payload:?}");
            assert!(error.message().starts_with("tabulator:"), "{}", error.message());
        }
    }
}
