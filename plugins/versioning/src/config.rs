//! The plugin's configuration bytes: how many versions a value formatted from now on keeps.

use ferrite_plugin::PluginError;

use crate::layout::{SLOTS_DEFAULT, SLOTS_MAX};

/// Reads `versions=N` (1..=[`SLOTS_MAX`]); empty configuration means [`SLOTS_DEFAULT`].
/// Surrounding ASCII whitespace is ignored so a configuration file's trailing newline is harmless.
/// Anything else refuses to launch: a typo silently falling back to the default would format
/// values with a slot count nobody asked for, and that count is fixed for the value's life.
pub fn slots(config: &[u8]) -> Result<u32, PluginError> {
    let refuse = || {
        PluginError::invalid(format!(
            "versioning: configuration {:?} is not `versions=N` with N from 1 to {SLOTS_MAX}",
            String::from_utf8_lossy(config)
        ))
    };
    let text = std::str::from_utf8(config).map_err(|_| refuse())?.trim_ascii();
    if text.is_empty() {
        return Ok(SLOTS_DEFAULT);
    }
    let slots: u32 = text.strip_prefix("versions=").and_then(|n| n.parse().ok()).ok_or_else(refuse)?;
    if !(1..=SLOTS_MAX).contains(&slots) {
        return Err(refuse());
    }
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Empty means the default; `versions=N` within bounds is read, whitespace around it too.
    #[test]
    fn reads_versions() {
        assert_eq!(slots(b""), Ok(SLOTS_DEFAULT));
        assert_eq!(slots(b"versions=2"), Ok(2));
        assert_eq!(slots(b" versions=1024\n"), Ok(SLOTS_MAX));
    }

    /// Out-of-range counts and anything that is not `versions=N` are refused, naming the form.
    #[test]
    fn refuses_anything_else() {
        for config in [&b"versions=0"[..], b"versions=1025", b"versions=", b"versions=x", b"slots=4", b"4", b"\xff"] {
            let error = slots(config).expect_err("refused");
            assert_eq!(error.code(), ferrite_plugin::ErrorCode::Invalid, "{config:?}");
            assert!(error.message().contains("versions=N"), "{}", error.message());
        }
    }
}
