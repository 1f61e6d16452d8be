//! RESP reply encoding into the connection's output buffer.
//!
//! RESP2 and RESP3 share every type the server sends except two: "no value" (`$-1` in RESP2, `_`
//! in RESP3) and maps (a flat array of key, value, key, value in RESP2; `%` in RESP3). A connection
//! speaks RESP2 until `HELLO 3` switches it.

use bytes::{BufMut, BytesMut};

/// The protocol version a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Protocol {
    #[default]
    Resp2,
    Resp3,
}

impl Protocol {
    pub fn version(self) -> i64 {
        match self {
            Protocol::Resp2 => 2,
            Protocol::Resp3 => 3,
        }
    }
}

/// Writes `value` in decimal into `buf`, returning the digits.
pub(crate) fn decimal(value: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut magnitude = value.unsigned_abs();
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (magnitude % 10) as u8;
        magnitude /= 10;
        if magnitude == 0 {
            break;
        }
    }
    if value < 0 {
        start -= 1;
        buf[start] = b'-';
    }
    &buf[start..]
}

fn line(out: &mut BytesMut, kind: u8, value: i64) {
    let mut digits = [0u8; 20];
    out.put_u8(kind);
    out.extend_from_slice(decimal(value, &mut digits));
    out.extend_from_slice(b"\r\n");
}

/// `+text`: a status such as `OK` or `PONG`. The text must not contain `\r` or `\n`.
pub(crate) fn simple(out: &mut BytesMut, text: &str) {
    debug_assert!(!text.contains(['\r', '\n']), "a simple string is one line");
    out.reserve(text.len() + 3);
    out.put_u8(b'+');
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn ok(out: &mut BytesMut) {
    out.extend_from_slice(b"+OK\r\n");
}

/// `-text`: an error, whose first word is its kind (`ERR`, `NOPROTO`, ...). Line breaks in the text
/// would end the reply early, so they become spaces, as `redis-server` does.
pub(crate) fn error(out: &mut BytesMut, text: &str) {
    out.reserve(text.len() + 3);
    out.put_u8(b'-');
    for byte in text.bytes() {
        out.put_u8(if byte == b'\r' || byte == b'\n' { b' ' } else { byte });
    }
    out.extend_from_slice(b"\r\n");
}

pub(crate) fn integer(out: &mut BytesMut, value: i64) {
    line(out, b':', value);
}

pub(crate) fn bulk(out: &mut BytesMut, value: &[u8]) {
    out.reserve(value.len() + 32);
    line(out, b'$', value.len() as i64);
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The length line of a bulk string whose bytes the caller writes, then `\r\n` (a long value
/// sent in pieces).
pub(crate) fn bulk_header(out: &mut BytesMut, len: u64) {
    line(out, b'$', i64::try_from(len).unwrap_or(i64::MAX));
}

/// "No value": a missing key's `GET`, a `SET NX` that did not set.
pub(crate) fn null(out: &mut BytesMut, protocol: Protocol) {
    match protocol {
        Protocol::Resp2 => out.extend_from_slice(b"$-1\r\n"),
        Protocol::Resp3 => out.extend_from_slice(b"_\r\n"),
    }
}

/// The header of an array of `len` elements; the caller writes the elements.
pub(crate) fn array(out: &mut BytesMut, len: usize) {
    line(out, b'*', len as i64);
}

/// The header of a map of `len` pairs; the caller writes key, value, key, value, ...
pub(crate) fn map(out: &mut BytesMut, len: usize, protocol: Protocol) {
    match protocol {
        Protocol::Resp2 => line(out, b'*', 2 * len as i64),
        Protocol::Resp3 => line(out, b'%', len as i64),
    }
}

/// The header of a set of `len` elements (an array in RESP2); the caller writes the elements.
pub(crate) fn set(out: &mut BytesMut, len: usize, protocol: Protocol) {
    match protocol {
        Protocol::Resp2 => line(out, b'*', len as i64),
        Protocol::Resp3 => line(out, b'~', len as i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(write: impl FnOnce(&mut BytesMut)) -> Vec<u8> {
        let mut out = BytesMut::new();
        write(&mut out);
        out.to_vec()
    }

    #[test]
    fn every_reply_type() {
        assert_eq!(encoded(|o| simple(o, "PONG")), b"+PONG\r\n");
        assert_eq!(encoded(ok), b"+OK\r\n");
        assert_eq!(encoded(|o| error(o, "ERR bad\r\nthing")), b"-ERR bad  thing\r\n");
        assert_eq!(encoded(|o| integer(o, -42)), b":-42\r\n");
        assert_eq!(encoded(|o| integer(o, i64::MIN)), b":-9223372036854775808\r\n");
        assert_eq!(encoded(|o| integer(o, i64::MAX)), b":9223372036854775807\r\n");
        assert_eq!(encoded(|o| bulk(o, b"a\r\nb")), b"$4\r\na\r\nb\r\n");
        assert_eq!(encoded(|o| bulk(o, b"")), b"$0\r\n\r\n");
        assert_eq!(encoded(|o| null(o, Protocol::Resp2)), b"$-1\r\n");
        assert_eq!(encoded(|o| null(o, Protocol::Resp3)), b"_\r\n");
        assert_eq!(encoded(|o| array(o, 0)), b"*0\r\n");
        assert_eq!(encoded(|o| map(o, 2, Protocol::Resp2)), b"*4\r\n");
        assert_eq!(encoded(|o| map(o, 2, Protocol::Resp3)), b"%2\r\n");
        assert_eq!(encoded(|o| set(o, 2, Protocol::Resp2)), b"*2\r\n");
        assert_eq!(encoded(|o| set(o, 2, Protocol::Resp3)), b"~2\r\n");
    }

    #[test]
    fn decimals() {
        let mut buf = [0u8; 20];
        for value in [0i64, 7, -7, 10, 1_000_000, i64::MAX, i64::MIN] {
            assert_eq!(decimal(value, &mut buf), value.to_string().as_bytes());
        }
    }
}
