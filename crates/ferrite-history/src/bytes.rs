//! Keys and values: byte strings, as Ferrite stores them, printed so that a report can be read and
//! pasted back into a test (`"text"`, with every other byte escaped as `\xNN`).

use std::fmt;

/// Declares a byte-string newtype with the conversions tests write most (`"k".into()`,
/// `format!(..).into()`, `bytes.to_vec().into()`), printed by [`escaped`].
macro_rules! byte_string {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub struct $name(pub Vec<u8>);

        impl $name {
            /// The bytes.
            pub fn as_bytes(&self) -> &[u8] {
                &self.0
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                $name(text.as_bytes().to_vec())
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> Self {
                $name(text.into_bytes())
            }
        }

        impl From<&[u8]> for $name {
            fn from(bytes: &[u8]) -> Self {
                $name(bytes.to_vec())
            }
        }

        impl From<Vec<u8>> for $name {
            fn from(bytes: Vec<u8>) -> Self {
                $name(bytes)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "\"{}\"", escaped(&self.0))
            }
        }
    };
}

byte_string!(
    /// A key. Keys are independent registers: each is checked on its own.
    Key
);

byte_string!(
    /// A value. Tests write a distinct value in every write, so that a read names the write it saw.
    Value
);

/// `bytes` as text: printable ASCII as is (but `"` and `\` escaped), anything else as `\xNN`.
/// Lossless, so a value in a report can be told apart from every other.
pub(crate) fn escaped(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

/// A register's content: a value, or `absent` (never written, or erased).
pub(crate) struct Content<'a>(pub(crate) Option<&'a Value>);

impl fmt::Display for Content<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(value) => value.fmt(f),
            None => f.write_str("absent"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Printing is lossless: bytes that are not printable text are escaped, never replaced.
    #[test]
    fn values_print_escaped() {
        assert_eq!(Value::from("a\"b").to_string(), r#""a\"b""#);
        assert_eq!(Value::from(vec![0u8, b'x', 0xff]).to_string(), r#""\x00x\xff""#);
        assert_eq!(Content(None).to_string(), "absent");
    }
}
