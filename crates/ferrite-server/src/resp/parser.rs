//! RESP request parsing: bytes in the connection's read buffer to command arguments.
//!
//! Two request forms exist, as in `redis-server`: an array of bulk strings (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`,
//! what every client library sends) and an inline command (`GET k\r\n`, what a person types into
//! `telnet`). Arguments of an array are ranges into the read buffer, never copied; an inline line is
//! split (with Redis's quoting rules) into a small scratch buffer of the parser's own.
//!
//! Every length comes from the peer, so each is checked against its limit before the buffer is
//! asked to grow for it: a bulk length against the largest argument, an argument count against
//! [`ARGS_MAX`], an inline line against [`INLINE_BYTES_MAX`], and the whole command against
//! [`COMMAND_BYTES_MAX`]; until the client has authenticated, against the far smaller
//! [`UNAUTHENTICATED_ARGS_MAX`] and [`UNAUTHENTICATED_BULK_BYTES_MAX`]. The parser is resumable: when a command has arrived only in part it
//! remembers the arguments it has, so a large command trickling in is not parsed again from its
//! first byte on every read.
//!
//! One argument may be longer than the command limit: the value of `SET key value [options]`
//! past the inline value limit (up to the direct value limit). The parser does not wait for it:
//! it yields [`Parsed::LongValue`] at the value's length line, the connection streams the value's
//! bytes into a staged value as they arrive (`commands/long_values.rs`), and
//! [`Parser::resume_array`] then parses the options that follow as the rest of the same array.

use std::ops::Range;

use ferrite_proto::{FRAME_OVERHEAD_BYTES, KEY_BYTES_MAX, VALUE_INLINE_BYTES_MAX};

/// Most arguments one command may have; `redis-server` has the same limit.
pub(crate) const ARGS_MAX: usize = 1024 * 1024;

/// Longest inline command line (`redis-server`'s `PROTO_INLINE_MAX_SIZE`).
pub(crate) const INLINE_BYTES_MAX: usize = 64 * 1024;

/// Largest whole command, framing included. One command must be in the read buffer at once (its
/// arguments are slices of it), so this bounds a connection's read buffer: room for a `MSET` of
/// several maximal values, far below `redis-server`'s 1 GiB query buffer limit.
pub(crate) const COMMAND_BYTES_MAX: usize = 32 * 1024 * 1024;

/// Most arguments a command may have before its client has authenticated, on a server with users:
/// `redis-server`'s limit since CVE-2021-32675, room for `HELLO 3 AUTH user password SETNAME
/// name`. With [`UNAUTHENTICATED_BULK_BYTES_MAX`] it bounds what a stranger makes the server
/// buffer to about 160 KiB, where a command may otherwise take [`COMMAND_BYTES_MAX`].
pub(crate) const UNAUTHENTICATED_ARGS_MAX: usize = 10;

/// Longest argument before authentication (`redis-server`'s limit, as above): room for any
/// user name and password.
pub(crate) const UNAUTHENTICATED_BULK_BYTES_MAX: usize = 16 * 1024;

/// Longest `*<count>` or `$<length>` line: a sign and 19 digits, with room to spare. Valid lines
/// are never longer (leading zeros are refused), so nothing legitimate is turned away.
const NUMBER_LINE_BYTES_MAX: usize = 32;

// A `SET` of a maximal key and a maximal value, with its framing, must fit one command.
const _: () = assert!(KEY_BYTES_MAX + VALUE_INLINE_BYTES_MAX + FRAME_OVERHEAD_BYTES <= COMMAND_BYTES_MAX);
const _: () = assert!(INLINE_BYTES_MAX <= COMMAND_BYTES_MAX);
const _: () = assert!(UNAUTHENTICATED_ARGS_MAX <= ARGS_MAX);
const _: () = assert!(UNAUTHENTICATED_BULK_BYTES_MAX <= KEY_BYTES_MAX);

/// What makes a request unreadable. The connection answers `-ERR Protocol error: <this>` and
/// closes, as `redis-server` does: after a framing error nothing later on the stream can be trusted.
/// The texts mirror `redis-server`'s where it has one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ProtocolError {
    #[error("invalid multibulk length")]
    InvalidMultibulkLength,
    #[error("too big mbulk count string")]
    MultibulkCountTooLong,
    #[error("invalid bulk length")]
    InvalidBulkLength,
    #[error("invalid bulk length {len}: arguments are at most {max} bytes")]
    BulkTooLarge { len: u64, max: usize },
    #[error("too big bulk count string")]
    BulkCountTooLong,
    #[error("expected '$', got '{}'", char::from(*.0))]
    ExpectedBulk(u8),
    #[error("expected CRLF after a bulk string")]
    MissingBulkTerminator,
    #[error("too big inline request")]
    InlineTooLong,
    #[error("unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("command larger than {max} bytes")]
    CommandTooLarge { max: usize },
    #[error(
        "unauthenticated multibulk length: a client that has not authenticated may send at most {} arguments",
        UNAUTHENTICATED_ARGS_MAX
    )]
    UnauthenticatedMultibulkLength,
    #[error(
        "unauthenticated bulk length: a client that has not authenticated may send arguments of at most {} bytes",
        UNAUTHENTICATED_BULK_BYTES_MAX
    )]
    UnauthenticatedBulkLength,
}

/// The parser's limits. The largest bulk string is the server's: a key or a value, whichever is
/// larger, with slack so a value a little over the limit gets the value limit's own error rather
/// than a closed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ParseLimits {
    pub bulk_bytes_max: usize,
    /// Longest value taken in the command: a `SET` value longer than this streams
    /// ([`Parsed::LongValue`]) when `long_value_bytes_max` allows it.
    pub value_bytes_max: usize,
    /// Longest `SET` value streamed into a staged value (the direct value limit); 0: none is.
    pub long_value_bytes_max: u64,
    pub args_max: usize,
    pub inline_bytes_max: usize,
    pub command_bytes_max: usize,
}

impl ParseLimits {
    /// The limits for a server whose keys and values are at most these sizes.
    pub fn for_server(key_bytes_max: usize, value_bytes_max: usize) -> ParseLimits {
        ParseLimits {
            bulk_bytes_max: key_bytes_max + value_bytes_max,
            value_bytes_max,
            long_value_bytes_max: 0,
            args_max: ARGS_MAX,
            inline_bytes_max: INLINE_BYTES_MAX,
            command_bytes_max: COMMAND_BYTES_MAX,
        }
    }

    /// These limits, with `SET` values up to `long_value_bytes_max` streamed.
    pub fn with_long_values(self, long_value_bytes_max: u64) -> ParseLimits {
        ParseLimits { long_value_bytes_max, ..self }
    }
}

/// What the buffer holds next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parsed {
    /// A whole command of `consumed` bytes; [`Parser::args`] gives its arguments until the next
    /// call to [`Parser::parse`].
    Command { consumed: usize },
    /// `consumed` bytes that carry no command (an empty inline line, `*0`): skipped, not answered.
    Skip { consumed: usize },
    /// The command has not fully arrived. `needed`, when known, is how many bytes the buffer must
    /// hold for it to be complete (already checked against the limits), so the caller can grow the
    /// buffer once instead of doubling it over and over.
    Incomplete { needed: Option<usize> },
    /// A `SET` whose value, `length` bytes, is longer than the inline value limit: its name and
    /// key are [`Parser::args`], its value begins at `value_start`, and `options` more arguments
    /// follow the value. The command stays half parsed (this comes again from the same bytes)
    /// until the caller takes it with [`Parser::take_long_value`].
    LongValue { value_start: usize, length: u64, options: usize },
}

/// Where a partly parsed array stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Progress {
    /// Arguments the array announced.
    expected: usize,
    /// Offset of the first byte not yet parsed.
    position: usize,
    /// Whether these are the arguments after a long value ([`Parser::resume_array`]), where
    /// none streams.
    after_long_value: bool,
}

/// A resumable RESP request parser. Feed it the same buffer, grown by appending, until it yields a
/// command; then the caller consumes that command's bytes from the front of the buffer.
#[derive(Debug)]
pub(crate) struct Parser {
    limits: ParseLimits,
    /// Argument ranges: into the caller's buffer for an array, into `scratch` for an inline line.
    args: Vec<Range<usize>>,
    /// Set while an array is only partly parsed.
    progress: Option<Progress>,
    inline: bool,
    scratch: Vec<u8>,
    /// Whether the client has authenticated (or needs not): if not, the unauthenticated limits
    /// apply.
    authenticated: bool,
}

/// The arguments of one command, borrowed from the buffer they were parsed from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Args<'a> {
    source: &'a [u8],
    ranges: &'a [Range<usize>],
}

impl<'a> Args<'a> {
    /// Arguments held elsewhere: `ranges` index `source`.
    pub fn new(source: &'a [u8], ranges: &'a [Range<usize>]) -> Args<'a> {
        Args { source, ranges }
    }

    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Argument `index`.
    ///
    /// # Panics
    /// If `index` is out of range: callers check the arity first.
    pub fn get(&self, index: usize) -> &'a [u8] {
        &self.source[self.ranges[index].clone()]
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
        let source = self.source;
        self.ranges.iter().map(move |range| &source[range.clone()])
    }

    /// Arguments from `start` on.
    pub fn skip(&self, start: usize) -> Args<'a> {
        Args { source: self.source, ranges: &self.ranges[start.min(self.ranges.len())..] }
    }
}

/// Finds `\r\n` in `buf[start..]`, looking at no more than `max` bytes before it. `Ok(None)`: not
/// yet arrived; `Err(())`: the line is longer than `max`.
fn find_crlf(buf: &[u8], start: usize, max: usize) -> Result<Option<usize>, ()> {
    let window_end = buf.len().min(start + max + 2);
    let window = &buf[start..window_end];
    match window.windows(2).position(|pair| pair == b"\r\n") {
        Some(offset) => Ok(Some(start + offset)),
        None if buf.len() - start > max + 1 => Err(()),
        None => Ok(None),
    }
}

/// Parses a decimal integer exactly as `redis-server`'s `string2ll` does: an optional `-`, then
/// digits with no leading zero (except `0` itself), no `+`, no spaces, no overflow.
pub(crate) fn parse_i64(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    if bytes == b"0" {
        return Some(0);
    }
    let (negative, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut magnitude: u64 = 0;
    for &byte in digits {
        if !byte.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(byte - b'0'))?;
    }
    if negative {
        if magnitude > i64::MAX as u64 + 1 {
            return None;
        }
        Some((magnitude as i64).wrapping_neg())
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// `isspace` in the C locale, which `redis-server` uses to split inline commands.
fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// Splits an inline line into arguments with `redis-server`'s `sdssplitargs` rules: whitespace
/// separates; `"..."` understands `\n \r \t \b \a \xHH` and `\<any>`; `'...'` understands only `\'`;
/// a closing quote must be followed by whitespace or the end of the line.
fn split_inline(line: &[u8], scratch: &mut Vec<u8>, args: &mut Vec<Range<usize>>) -> Result<(), ProtocolError> {
    let mut i = 0;
    loop {
        while i < line.len() && is_space(line[i]) {
            i += 1;
        }
        if i == line.len() {
            return Ok(());
        }
        let start = scratch.len();
        let mut in_double = false;
        let mut in_single = false;
        loop {
            let byte = line.get(i).copied();
            if in_double {
                match byte {
                    None => return Err(ProtocolError::UnbalancedQuotes),
                    Some(b'\\') if line.get(i + 1) == Some(&b'x') => {
                        let high = line.get(i + 2).copied().and_then(hex_value);
                        let low = line.get(i + 3).copied().and_then(hex_value);
                        if let (Some(high), Some(low)) = (high, low) {
                            scratch.push(high * 16 + low);
                            i += 4;
                        } else {
                            scratch.push(b'x');
                            i += 2;
                        }
                    }
                    Some(b'\\') if i + 1 < line.len() => {
                        scratch.push(match line[i + 1] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        });
                        i += 2;
                    }
                    Some(b'"') => {
                        if line.get(i + 1).is_some_and(|next| !is_space(*next)) {
                            return Err(ProtocolError::UnbalancedQuotes);
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => {
                        scratch.push(other);
                        i += 1;
                    }
                }
            } else if in_single {
                match byte {
                    None => return Err(ProtocolError::UnbalancedQuotes),
                    Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                        scratch.push(b'\'');
                        i += 2;
                    }
                    Some(b'\'') => {
                        if line.get(i + 1).is_some_and(|next| !is_space(*next)) {
                            return Err(ProtocolError::UnbalancedQuotes);
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => {
                        scratch.push(other);
                        i += 1;
                    }
                }
            } else {
                match byte {
                    None => break,
                    Some(byte) if is_space(byte) => break,
                    Some(b'"') => {
                        in_double = true;
                        i += 1;
                    }
                    Some(b'\'') => {
                        in_single = true;
                        i += 1;
                    }
                    Some(other) => {
                        scratch.push(other);
                        i += 1;
                    }
                }
            }
        }
        args.push(start..scratch.len());
    }
}

impl Parser {
    pub fn new(limits: ParseLimits) -> Parser {
        Parser { limits, args: Vec::new(), progress: None, inline: false, scratch: Vec::new(), authenticated: true }
    }

    /// Says whether the client has authenticated, before each [`Parser::parse`]: a client that
    /// has not may send only small commands (see [`UNAUTHENTICATED_ARGS_MAX`]). A client
    /// authenticates only by a command, so this never changes while a command is half parsed.
    pub fn set_authenticated(&mut self, authenticated: bool) {
        debug_assert!(self.progress.is_none() || self.authenticated == authenticated, "changed mid-command");
        self.authenticated = authenticated;
    }

    /// The arguments of the command the last [`Parser::parse`] returned. `buf` must be the buffer
    /// that call was given.
    pub fn args<'a>(&'a self, buf: &'a [u8]) -> Args<'a> {
        let source = if self.inline { &self.scratch[..] } else { buf };
        Args { source, ranges: &self.args }
    }

    /// Parses the command at the front of `buf`. After `Incomplete`, call again with the same bytes
    /// plus whatever arrived since; after `Command` or `Skip`, with the consumed bytes removed.
    pub fn parse(&mut self, buf: &[u8]) -> Result<Parsed, ProtocolError> {
        let progress = match self.progress {
            Some(progress) => progress,
            None => {
                self.args.clear();
                self.inline = false;
                match buf.first() {
                    None => return Ok(Parsed::Incomplete { needed: None }),
                    Some(b'*') => match self.parse_count(buf)? {
                        Count::Incomplete => return Ok(Parsed::Incomplete { needed: None }),
                        Count::Empty { consumed } => return Ok(Parsed::Skip { consumed }),
                        Count::Args(progress) => progress,
                    },
                    Some(_) => return self.parse_inline(buf),
                }
            }
        };
        match self.parse_bulks(buf, progress) {
            Ok(Parsed::Incomplete { needed }) => Ok(Parsed::Incomplete { needed }),
            Ok(long @ Parsed::LongValue { .. }) => Ok(long),
            Ok(done) => {
                self.progress = None;
                Ok(done)
            }
            Err(error) => {
                self.progress = None;
                Err(error)
            }
        }
    }

    /// Parses `*<count>\r\n`.
    fn parse_count(&mut self, buf: &[u8]) -> Result<Count, ProtocolError> {
        let Some(line_end) =
            find_crlf(buf, 1, NUMBER_LINE_BYTES_MAX).map_err(|()| ProtocolError::MultibulkCountTooLong)?
        else {
            return Ok(Count::Incomplete);
        };
        let count = parse_i64(&buf[1..line_end]).ok_or(ProtocolError::InvalidMultibulkLength)?;
        let consumed = line_end + 2;
        if count <= 0 {
            // `*0` and `*-1` carry no command; `redis-server` skips them silently.
            return Ok(Count::Empty { consumed });
        }
        let expected = usize::try_from(count).map_err(|_| ProtocolError::InvalidMultibulkLength)?;
        if expected > self.limits.args_max {
            return Err(ProtocolError::InvalidMultibulkLength);
        }
        if !self.authenticated && expected > UNAUTHENTICATED_ARGS_MAX {
            return Err(ProtocolError::UnauthenticatedMultibulkLength);
        }
        // Reserve for what has arrived, not for what the peer claims: a count of a million costs
        // nothing until a million arguments are actually sent.
        self.args.reserve(expected.min(64));
        let progress = Progress { expected, position: consumed, after_long_value: false };
        self.progress = Some(progress);
        Ok(Count::Args(progress))
    }

    /// Parses the bulk strings of an array from `progress` on.
    fn parse_bulks(&mut self, buf: &[u8], mut progress: Progress) -> Result<Parsed, ProtocolError> {
        while self.args.len() < progress.expected {
            let start = progress.position;
            let Some(&kind) = buf.get(start) else {
                self.progress = Some(progress);
                return Ok(Parsed::Incomplete { needed: None });
            };
            if kind != b'$' {
                return Err(ProtocolError::ExpectedBulk(kind));
            }
            let Some(line_end) =
                find_crlf(buf, start + 1, NUMBER_LINE_BYTES_MAX).map_err(|()| ProtocolError::BulkCountTooLong)?
            else {
                self.progress = Some(progress);
                return Ok(Parsed::Incomplete { needed: None });
            };
            let len = parse_i64(&buf[start + 1..line_end]).ok_or(ProtocolError::InvalidBulkLength)?;
            let len = u64::try_from(len).map_err(|_| ProtocolError::InvalidBulkLength)?;
            let data_start = line_end + 2;
            if self.streams(buf, &progress, len) {
                let max = self.limits.long_value_bytes_max;
                if len > max {
                    return Err(ProtocolError::BulkTooLarge { len, max: max as usize });
                }
                self.progress = Some(progress);
                let options = progress.expected - self.args.len() - 1;
                return Ok(Parsed::LongValue { value_start: data_start, length: len, options });
            }
            let max = self.limits.bulk_bytes_max;
            if len > max as u64 {
                return Err(ProtocolError::BulkTooLarge { len, max });
            }
            if !self.authenticated && len > UNAUTHENTICATED_BULK_BYTES_MAX as u64 {
                return Err(ProtocolError::UnauthenticatedBulkLength);
            }
            // `len` is at most `bulk_bytes_max`, so this cannot overflow.
            let data_end = data_start + len as usize;
            let needed = data_end + 2;
            if needed > self.limits.command_bytes_max {
                return Err(ProtocolError::CommandTooLarge { max: self.limits.command_bytes_max });
            }
            if buf.len() < needed {
                self.progress = Some(progress);
                return Ok(Parsed::Incomplete { needed: Some(needed) });
            }
            if &buf[data_end..needed] != b"\r\n" {
                return Err(ProtocolError::MissingBulkTerminator);
            }
            self.args.push(data_start..data_end);
            progress.position = needed;
        }
        Ok(Parsed::Command { consumed: progress.position })
    }

    /// Whether a bulk string of `len` bytes, next in the array, is a long `SET` value: the third
    /// argument of a `SET`, longer than the inline value limit, on a listener that streams them.
    fn streams(&self, buf: &[u8], progress: &Progress, len: u64) -> bool {
        self.limits.long_value_bytes_max > 0
            && self.authenticated
            && len > self.limits.value_bytes_max as u64
            && !progress.after_long_value
            && self.args.len() == 2
            && buf[self.args[0].clone()].eq_ignore_ascii_case(b"set")
    }

    /// Takes the long value [`Parsed::LongValue`] announced: the caller has copied the key, and
    /// consumes the value's bytes itself. The parser starts afresh.
    pub fn take_long_value(&mut self) {
        self.progress = None;
        self.args.clear();
    }

    /// Parses the `options` arguments that follow a long value, once its bytes and their `\r\n`
    /// have left the buffer, as the rest of its array: the next [`Parsed::Command`] holds just
    /// them. Nothing to do for none.
    pub fn resume_array(&mut self, options: usize) {
        debug_assert!(self.progress.is_none(), "resumed inside another command");
        if options > 0 {
            self.args.clear();
            self.inline = false;
            self.progress = Some(Progress { expected: options, position: 0, after_long_value: true });
        }
    }

    /// Parses one inline command line, ended by `\n` (an `\r` before it is dropped).
    fn parse_inline(&mut self, buf: &[u8]) -> Result<Parsed, ProtocolError> {
        let max = self.limits.inline_bytes_max;
        let window = &buf[..buf.len().min(max + 1)];
        let Some(newline) = window.iter().position(|byte| *byte == b'\n') else {
            if buf.len() > max {
                return Err(ProtocolError::InlineTooLong);
            }
            return Ok(Parsed::Incomplete { needed: None });
        };
        let consumed = newline + 1;
        let line = buf[..newline].strip_suffix(b"\r").unwrap_or(&buf[..newline]);
        self.scratch.clear();
        self.args.clear();
        split_inline(line, &mut self.scratch, &mut self.args)?;
        if self.args.is_empty() {
            return Ok(Parsed::Skip { consumed });
        }
        self.inline = true;
        Ok(Parsed::Command { consumed })
    }
}

enum Count {
    Incomplete,
    Empty { consumed: usize },
    Args(Progress),
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn limits() -> ParseLimits {
        ParseLimits::for_server(KEY_BYTES_MAX, VALUE_INLINE_BYTES_MAX)
    }

    /// Parses every command in `input`, all of it present at once.
    fn parse_all(input: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut parser = Parser::new(limits());
        let mut buf = input;
        let mut commands = Vec::new();
        loop {
            match parser.parse(buf)? {
                Parsed::Command { consumed } => {
                    commands.push(parser.args(buf).iter().map(<[u8]>::to_vec).collect());
                    buf = &buf[consumed..];
                }
                Parsed::Skip { consumed } => buf = &buf[consumed..],
                Parsed::Incomplete { .. } => return Ok(commands),
                Parsed::LongValue { .. } => unreachable!("these limits stream no value"),
            }
        }
    }

    /// Parses `input` as a connection would receive it: the bytes arrive in the pieces `cuts`
    /// marks, and after each arrival every complete command is taken from the buffer's front.
    fn parse_in_pieces(input: &[u8], cuts: &[usize]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut parser = Parser::new(limits());
        let mut buf: Vec<u8> = Vec::new();
        let mut commands = Vec::new();
        let mut previous = 0;
        for &cut in cuts.iter().chain(std::iter::once(&input.len())) {
            buf.extend_from_slice(&input[previous..cut]);
            previous = cut;
            loop {
                match parser.parse(&buf)? {
                    Parsed::Command { consumed } => {
                        commands.push(parser.args(&buf).iter().map(<[u8]>::to_vec).collect());
                        buf.drain(..consumed);
                    }
                    Parsed::Skip { consumed } => {
                        buf.drain(..consumed);
                    }
                    Parsed::Incomplete { .. } => break,
                    Parsed::LongValue { .. } => unreachable!("these limits stream no value"),
                }
            }
        }
        Ok(commands)
    }

    fn strings(commands: &[Vec<Vec<u8>>]) -> Vec<Vec<String>> {
        commands.iter().map(|c| c.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect()).collect()
    }

    fn encode(args: &[Vec<u8>]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            out.extend_from_slice(arg);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    #[test]
    fn arrays_of_bulk_strings() {
        let commands =
            parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n").expect("valid");
        assert_eq!(strings(&commands), [vec!["GET", "k"], vec!["SET", "k", ""]]);
    }

    #[test]
    fn bulk_strings_are_binary_safe() {
        let commands = parse_all(b"*1\r\n$4\r\n\r\n\0\xff\r\n").expect("valid");
        assert_eq!(commands, [vec![b"\r\n\0\xff".to_vec()]]);
    }

    #[test]
    fn array_arguments_are_slices_of_the_buffer() {
        let buf = b"*1\r\n$4\r\nPING\r\n";
        let mut parser = Parser::new(limits());
        assert_eq!(parser.parse(buf), Ok(Parsed::Command { consumed: buf.len() }));
        let arg = parser.args(buf).get(0);
        assert!(std::ptr::eq(arg.as_ptr(), buf[8..].as_ptr()), "zero-copy");
    }

    #[test]
    fn empty_arrays_and_lines_are_skipped() {
        let commands = parse_all(b"*0\r\n*-1\r\n\r\n   \n*1\r\n$4\r\nPING\r\n").expect("valid");
        assert_eq!(strings(&commands), [vec!["PING"]]);
    }

    #[test]
    fn inline_commands_split_like_redis() {
        let commands = parse_all(b"SET k v\r\nget  k\nECHO \"a b\\n\\x41\" 'it\\'s' \"\"\r\n").expect("valid");
        assert_eq!(strings(&commands), [vec!["SET", "k", "v"], vec!["get", "k"], vec!["ECHO", "a b\nA", "it's", ""]]);
        // A quote in the middle of a word opens a quoted section, as in sdssplitargs; its closing
        // quote must end the word.
        assert_eq!(parse_all(b"a\"b c\"d\n"), Err(ProtocolError::UnbalancedQuotes));
        assert_eq!(strings(&parse_all(b"a\"b c\" d\n").expect("valid")), [vec!["ab c", "d"]]);
    }

    #[test]
    fn inline_errors() {
        assert_eq!(parse_all(b"ECHO \"abc\n"), Err(ProtocolError::UnbalancedQuotes));
        assert_eq!(parse_all(b"ECHO 'abc\n"), Err(ProtocolError::UnbalancedQuotes));
        assert_eq!(parse_all(b"ECHO \"a\"b\n"), Err(ProtocolError::UnbalancedQuotes));
        let long = vec![b'a'; INLINE_BYTES_MAX + 1];
        assert_eq!(parse_all(&long), Err(ProtocolError::InlineTooLong));
        let mut long_line = vec![b'a'; INLINE_BYTES_MAX + 1];
        long_line.push(b'\n');
        assert_eq!(parse_all(&long_line), Err(ProtocolError::InlineTooLong));
        // Just under the limit and unterminated: wait for more.
        assert_eq!(parse_all(&vec![b'a'; INLINE_BYTES_MAX]), Ok(vec![]));
    }

    #[test]
    fn framing_errors() {
        assert_eq!(parse_all(b"*x\r\n"), Err(ProtocolError::InvalidMultibulkLength));
        assert_eq!(parse_all(b"*01\r\n"), Err(ProtocolError::InvalidMultibulkLength));
        assert_eq!(parse_all(b"*1\r\n+PING\r\n"), Err(ProtocolError::ExpectedBulk(b'+')));
        assert_eq!(parse_all(b"*1\r\n$-1\r\n"), Err(ProtocolError::InvalidBulkLength));
        assert_eq!(parse_all(b"*1\r\n$abc\r\n"), Err(ProtocolError::InvalidBulkLength));
        assert_eq!(parse_all(b"*1\r\n$4\r\nPINGxx"), Err(ProtocolError::MissingBulkTerminator));
        let long_count = format!("*{}\r\n", "1".repeat(40));
        assert_eq!(parse_all(long_count.as_bytes()), Err(ProtocolError::MultibulkCountTooLong));
        let long_len = format!("*1\r\n${}", "1".repeat(40));
        assert_eq!(parse_all(long_len.as_bytes()), Err(ProtocolError::BulkCountTooLong));
    }

    /// The lengths a peer claims are refused before anything is reserved for them: the parser
    /// answers at once, with only the header bytes present.
    #[test]
    fn oversized_lengths_are_refused_before_the_data_arrives() {
        let too_many = format!("*{}\r\n", ARGS_MAX + 1);
        assert_eq!(parse_all(too_many.as_bytes()), Err(ProtocolError::InvalidMultibulkLength));
        assert_eq!(parse_all(b"*9223372036854775807\r\n"), Err(ProtocolError::InvalidMultibulkLength));
        let max = limits().bulk_bytes_max;
        let too_long = format!("*1\r\n${}\r\n", max + 1);
        assert_eq!(parse_all(too_long.as_bytes()), Err(ProtocolError::BulkTooLarge { len: max as u64 + 1, max }));
        assert_eq!(
            parse_all(b"*1\r\n$9223372036854775807\r\n"),
            Err(ProtocolError::BulkTooLarge { len: i64::MAX as u64, max })
        );
        // Many maximal arguments: the command as a whole is refused once it would pass the limit.
        let mut big = format!("*{}\r\n", ARGS_MAX).into_bytes();
        let arg = vec![b'v'; max];
        let mut error = None;
        for _ in 0..(COMMAND_BYTES_MAX / max + 2) {
            big.extend_from_slice(format!("${max}\r\n").as_bytes());
            let mut parser = Parser::new(limits());
            if let Err(e) = parser.parse(&big) {
                error = Some(e);
                break;
            }
            big.extend_from_slice(&arg);
            big.extend_from_slice(b"\r\n");
        }
        assert_eq!(error, Some(ProtocolError::CommandTooLarge { max: COMMAND_BYTES_MAX }));
    }

    /// Before authentication, Redis's limits apply from the header alone: more than 10 arguments,
    /// or an argument over 16 KiB, is refused without waiting for the data; at the limits, the
    /// command parses. Once authenticated, the server's own limits apply again.
    #[test]
    fn unauthenticated_clients_send_only_small_commands() {
        let parse = |input: &[u8], authenticated: bool| {
            let mut parser = Parser::new(limits());
            parser.set_authenticated(authenticated);
            parser.parse(input)
        };
        let many = format!("*{}\r\n", UNAUTHENTICATED_ARGS_MAX + 1);
        assert_eq!(parse(many.as_bytes(), false), Err(ProtocolError::UnauthenticatedMultibulkLength));
        assert_eq!(parse(many.as_bytes(), true), Ok(Parsed::Incomplete { needed: None }));
        let long = format!("*2\r\n$4\r\nAUTH\r\n${}\r\n", UNAUTHENTICATED_BULK_BYTES_MAX + 1);
        assert_eq!(parse(long.as_bytes(), false), Err(ProtocolError::UnauthenticatedBulkLength));
        assert!(matches!(parse(long.as_bytes(), true), Ok(Parsed::Incomplete { needed: Some(_) })));
        let largest = vec![b'p'; UNAUTHENTICATED_BULK_BYTES_MAX];
        let at_the_limits = encode(&vec![largest; UNAUTHENTICATED_ARGS_MAX]);
        assert_eq!(parse(&at_the_limits, false), Ok(Parsed::Command { consumed: at_the_limits.len() }));
        // The absurd is refused as it is for anyone, in the same words.
        let absurd = format!("*{}\r\n", ARGS_MAX + 1);
        assert_eq!(parse(absurd.as_bytes(), false), Err(ProtocolError::InvalidMultibulkLength));
    }

    #[test]
    fn an_incomplete_bulk_says_how_many_bytes_it_needs() {
        let mut parser = Parser::new(limits());
        let buf = b"*2\r\n$3\r\nGET\r\n$10\r\nabc";
        assert_eq!(parser.parse(buf), Ok(Parsed::Incomplete { needed: Some(buf.len() - 3 + 12) }));
        // Resuming does not reparse the first argument: it is kept.
        assert_eq!(parser.args.len(), 1);
        let mut whole = buf.to_vec();
        whole.extend_from_slice(b"defghij\r\n");
        assert_eq!(parser.parse(&whole), Ok(Parsed::Command { consumed: whole.len() }));
        assert_eq!(parser.args(&whole).get(1), b"abcdefghij");
    }

    #[test]
    fn a_pipelined_stream_split_at_every_byte_parses_the_same() {
        let mut input = Vec::new();
        input.extend_from_slice(b"PING\r\n");
        input.extend_from_slice(&encode(&[b"SET".to_vec(), b"key".to_vec(), b"va\r\nlue".to_vec()]));
        input.extend_from_slice(b"*0\r\n");
        input.extend_from_slice(b"ECHO \"x y\"\n");
        input.extend_from_slice(&encode(&[b"GET".to_vec(), Vec::new()]));
        let whole = parse_all(&input).expect("valid");
        assert_eq!(whole.len(), 4);
        for cut in 0..=input.len() {
            assert_eq!(parse_in_pieces(&input, &[cut]).expect("valid"), whole, "cut at {cut}");
        }
        let every_byte: Vec<usize> = (1..input.len()).collect();
        assert_eq!(parse_in_pieces(&input, &every_byte).expect("valid"), whole);
    }

    #[test]
    fn integers_parse_like_string2ll() {
        for (text, value) in [("0", Some(0)), ("-1", Some(-1)), ("42", Some(42))] {
            assert_eq!(parse_i64(text.as_bytes()), value, "{text}");
        }
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        for text in ["", "-", "-0", "01", "+1", " 1", "1 ", "9223372036854775808", "-9223372036854775809", "1a"] {
            assert_eq!(parse_i64(text.as_bytes()), None, "{text:?}");
        }
    }

    fn arg_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(any::<u8>(), 0..40)
    }

    fn command_strategy() -> impl Strategy<Value = Vec<Vec<u8>>> {
        prop::collection::vec(arg_strategy(), 1..6)
    }

    proptest! {
        /// Whatever a peer sends, the parser answers with a command, a skip, a request for more
        /// bytes or an error; it never panics, and it never claims more bytes than it was given.
        #[test]
        fn arbitrary_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..512)) {
            let mut parser = Parser::new(limits());
            let mut buf = &input[..];
            loop {
                match parser.parse(buf) {
                    Ok(Parsed::Command { consumed }) => {
                        prop_assert!(consumed > 0 && consumed <= buf.len());
                        let args = parser.args(buf);
                        prop_assert!(args.len() > 0);
                        let _: usize = args.iter().map(<[u8]>::len).sum();
                        buf = &buf[consumed..];
                    }
                    Ok(Parsed::Skip { consumed }) => {
                        prop_assert!(consumed > 0 && consumed <= buf.len());
                        buf = &buf[consumed..];
                    }
                    Ok(Parsed::Incomplete { needed }) => {
                        if let Some(needed) = needed {
                            prop_assert!(needed > buf.len() && needed <= COMMAND_BYTES_MAX);
                        }
                        break;
                    }
                    Ok(Parsed::LongValue { .. }) => prop_assert!(false, "these limits stream no value"),
                    Err(_) => break,
                }
            }
        }

        /// Arbitrary bytes behind a valid array header (the likeliest place for a hostile peer to
        /// aim) never panic either.
        #[test]
        fn arbitrary_bytes_after_a_header_never_panic(count in 0usize..8, tail in prop::collection::vec(any::<u8>(), 0..256)) {
            let mut input = format!("*{count}\r\n").into_bytes();
            input.extend_from_slice(&tail);
            let _ = parse_all(&input);
            let _ = parse_in_pieces(&input, &[input.len() / 2]);
        }

        /// A pipelined stream of commands parses to the same commands however it is cut into
        /// reads, and to exactly the commands that were encoded.
        #[test]
        fn a_stream_cut_anywhere_parses_the_same(
            commands in prop::collection::vec(command_strategy(), 1..8),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let input: Vec<u8> = commands.iter().flat_map(|c| encode(c)).collect();
            let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(input.len() + 1)).collect();
            cuts.sort_unstable();
            prop_assert_eq!(parse_all(&input).expect("valid"), commands.clone());
            prop_assert_eq!(parse_in_pieces(&input, &cuts).expect("valid"), commands);
        }

        /// Any bulk length over the limit, and any argument count over the limit, is refused as
        /// soon as its header line is in: nothing waits for (or makes room for) the data.
        #[test]
        fn oversized_lengths_are_refused_from_the_header_alone(
            len in (VALUE_INLINE_BYTES_MAX + KEY_BYTES_MAX + 1) as u64..=i64::MAX as u64,
            count in (ARGS_MAX + 1) as u64..=i64::MAX as u64,
        ) {
            let header = format!("*1\r\n${len}\r\n");
            let refused = matches!(parse_all(header.as_bytes()), Err(ProtocolError::BulkTooLarge { .. }));
            prop_assert!(refused);
            let header = format!("*{count}\r\n");
            prop_assert_eq!(parse_all(header.as_bytes()), Err(ProtocolError::InvalidMultibulkLength));
        }

        /// Inline lines of plain words parse to their words, however they are cut.
        #[test]
        fn inline_words_parse_to_themselves(
            lines in prop::collection::vec(prop::collection::vec("[a-zA-Z0-9:_-]{1,12}", 1..5), 1..5),
            cut in any::<prop::sample::Index>(),
        ) {
            let input: Vec<u8> = lines.iter().flat_map(|words| format!("{}\r\n", words.join(" ")).into_bytes()).collect();
            let expected: Vec<Vec<Vec<u8>>> =
                lines.iter().map(|words| words.iter().map(|w| w.clone().into_bytes()).collect()).collect();
            prop_assert_eq!(parse_in_pieces(&input, &[cut.index(input.len() + 1)]).expect("valid"), expected);
        }
    }

    /// A `SET` value past the inline limit stops the parser at its length line (again and again
    /// until it is taken), with the name and key as arguments; the options after the value are
    /// then parsed as the rest of the same array. No other argument streams, nor any for a client
    /// that has not authenticated, and past the long limit the length is refused.
    #[test]
    fn long_set_values_stop_the_parser_at_their_length() {
        let long = ParseLimits { value_bytes_max: 8, ..limits() }.with_long_values(64);
        let mut parser = Parser::new(long);
        let input = b"*5\r\n$3\r\nsEt\r\n$1\r\nk\r\n$20\r\n01234567890123456789\r\n$2\r\nNX\r\n$3\r\nGET\r\n";
        let header = b"*5\r\n$3\r\nsEt\r\n$1\r\nk\r\n$20\r\n".len();
        for _ in 0..2 {
            let parsed = parser.parse(&input[..header - 1]).expect("parses");
            assert_eq!(parsed, Parsed::Incomplete { needed: None });
            let parsed = parser.parse(input).expect("parses");
            assert_eq!(parsed, Parsed::LongValue { value_start: header, length: 20, options: 2 });
            assert_eq!(strings(&[parser.args(input).iter().map(<[u8]>::to_vec).collect()]), [["sEt", "k"]]);
        }
        parser.take_long_value();
        let rest = &input[header + 22..];
        parser.resume_array(2);
        assert_eq!(parser.parse(&rest[..5]), Ok(Parsed::Incomplete { needed: Some(8) }));
        assert_eq!(parser.parse(rest), Ok(Parsed::Command { consumed: rest.len() }));
        assert_eq!(strings(&[parser.args(rest).iter().map(<[u8]>::to_vec).collect()]), [["NX", "GET"]]);

        // Not a SET's value, or after the value: taken whole, within the argument limit.
        let mut parser = Parser::new(long);
        let get = b"*2\r\n$3\r\nGET\r\n$20\r\n01234567890123456789\r\n";
        assert_eq!(parser.parse(get), Ok(Parsed::Command { consumed: get.len() }));
        parser.resume_array(3);
        let tail = b"$3\r\nSET\r\n$1\r\nk\r\n$20\r\n01234567890123456789\r\n";
        assert_eq!(parser.parse(tail), Ok(Parsed::Command { consumed: tail.len() }), "no long value in a tail");

        let mut stranger = Parser::new(long);
        stranger.set_authenticated(false);
        assert_eq!(stranger.parse(input), Ok(Parsed::Command { consumed: input.len() }), "within its limits");

        let mut parser = Parser::new(long);
        let past = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$65\r\n";
        assert_eq!(parser.parse(past), Err(ProtocolError::BulkTooLarge { len: 65, max: 64 }));
        let mut plain = Parser::new(ParseLimits { value_bytes_max: 8, ..limits() });
        assert_eq!(plain.parse(input), Ok(Parsed::Command { consumed: input.len() }), "without long values");
    }
}
