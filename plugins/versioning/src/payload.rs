//! The versioning plugin's payloads: an ASCII command, then after one space its operand.

use ferrite_plugin::PluginError;

/// One request to the versioning plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// `put DATA`: store DATA, every byte after the first space (binary, possibly empty), as
    /// the newest version. Copied out of the payload because the payload is borrowed from the
    /// call, which the write needs mutably; the server's payload limit bounds the copy.
    Put(Vec<u8>),
    /// `get`: the newest version.
    GetNewest,
    /// `get N`: version N, if still kept.
    Get(u64),
    /// `list`: the kept versions and their lengths.
    List,
}

const USAGE: &str = "expected `put DATA`, `get`, `get N` or `list`";

impl Operation {
    pub fn parse(payload: &[u8]) -> Result<Operation, PluginError> {
        // `put`'s operand is data, not text: it is taken byte for byte, never trimmed.
        if let Some(data) = payload.strip_prefix(b"put") {
            match data.split_first() {
                None => return Ok(Operation::Put(Vec::new())),
                Some((b' ', data)) => return Ok(Operation::Put(data.to_vec())),
                // `putx ...` is some other, unknown, command: refused below.
                Some(_) => {}
            }
        }
        let text =
            std::str::from_utf8(payload).map_err(|_| PluginError::invalid(format!("versioning: not text; {USAGE}")))?;
        let mut words = text.split_ascii_whitespace();
        let operation = match words.next() {
            Some("get") => match words.next() {
                None => Operation::GetNewest,
                Some(word) => Operation::Get(word.parse().map_err(|_| {
                    PluginError::invalid(format!("versioning: `{word}` is not a version number; {USAGE}"))
                })?),
            },
            Some("list") => Operation::List,
            _ => return Err(PluginError::invalid(format!("versioning: unknown request `{text}`; {USAGE}"))),
        };
        if let Some(extra) = words.next() {
            return Err(PluginError::invalid(format!("versioning: unexpected `{extra}`; {USAGE}")));
        }
        Ok(operation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each form parses; `put` keeps its data exactly (spaces, binary, empty), while `get` and
    /// `list` tolerate surrounding whitespace.
    #[test]
    fn parses_every_form() {
        assert_eq!(Operation::parse(b"put hello"), Ok(Operation::Put(b"hello".to_vec())));
        assert_eq!(Operation::parse(b"put  two words \n"), Ok(Operation::Put(b" two words \n".to_vec())));
        assert_eq!(Operation::parse(b"put \x00\xff"), Ok(Operation::Put(vec![0, 0xff])));
        assert_eq!(Operation::parse(b"put "), Ok(Operation::Put(Vec::new())));
        assert_eq!(Operation::parse(b"put"), Ok(Operation::Put(Vec::new())));
        assert_eq!(Operation::parse(b"get"), Ok(Operation::GetNewest));
        assert_eq!(Operation::parse(b" get 7\n"), Ok(Operation::Get(7)));
        assert_eq!(Operation::parse(b"list"), Ok(Operation::List));
    }

    /// Malformed payloads are refused as invalid, each with a message naming the plugin.
    #[test]
    fn refuses_malformed_payloads() {
        for payload in
            [&b""[..], b"putx", b"PUT x", b"get x", b"get -1", b"get 1 2", b"list all", b"erase", b"\xff", b"get \xff"]
        {
            let error = Operation::parse(payload).expect_err("malformed");
            assert_eq!(error.code(), ferrite_plugin::ErrorCode::Invalid, "{payload:?}");
            assert!(error.message().starts_with("versioning:"), "{}", error.message());
        }
    }
}
