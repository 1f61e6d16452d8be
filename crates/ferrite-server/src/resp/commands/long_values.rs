//! Values longer than the inline limit through RESP, streamed in pieces as the native protocol's
//! direct transfers move them (`handler/direct.rs`), so no buffer ever holds one whole.
//!
//! - `SET key value [NX|XX]` with a value past `limits.value_bytes_max` (up to
//!   `limits.direct_value_bytes_max`): the parser stops at the value's length line
//!   ([`Parsed::LongValue`](crate::resp::parser::Parsed::LongValue)); the command is checked as
//!   far as it can be without its options (rights, cluster routing, the pool's room), a direct put
//!   stages the value, each piece of up to the inline limit is written to the staged value and
//!   logged as it lands, and once the options have arrived the value is committed as the key's
//!   with one small record, as `end_transfer` commits a direct put. A reader sees the old value
//!   or the new one, never part of it, and a crash before the commit leaves the old one.
//! - On a default pool whose plugins take `SET`'s post-put signal, a long `SET` is refused, and a
//!   long `GET` answered with the inline limit's error, as a signal holds the whole reply until
//!   the plugins have handled it.
//! - A command that is refused after its value has begun to arrive (no right to write, a key
//!   another node serves, a full pool, a bad option) has the rest of its value read and dropped,
//!   then its error answered: the connection stays usable, as `redis-server` keeps it.
//! - `GET` of such a value answers it in pieces under a direct read, which holds the key: writers
//!   from other connections wait until the last piece has left (or the read has been idle for the
//!   shard's hold limit). A piece that cannot be read once the reply has begun ends the
//!   connection: a bulk string cannot be taken back half sent. `GETRANGE` reads only its range:
//!   one within the inline limit at once ([`read_part`]), a longer one in pieces as `GET` does.
//! - `MGET` opens a direct read of each long value among its keys in the turn that reads the
//!   others ([`open_read`]), so the reply is one moment's values as for short ones, then answers
//!   the reply with each long value in pieces in its place ([`answer_with_long_values`]). While
//!   it answers one, the holds of those still to come count as read: the reply as a whole is
//!   being read.
//!
//! Each piece is one native request, bounded work in one turn of the shard loop, so the shard
//! serves every other client between the pieces of a 1 GiB value. The pieces are as durable as a
//! direct put's: the `+OK` waits for the log like any `SET` of the pool. A piece of at least
//! [`IN_PLACE_PIECE_BYTES_MIN`] that has not all arrived is read from the socket straight into the
//! staged value's pool memory ([`poll_receive`]), as a native piece is, rather than through the
//! connection's read buffer: one copy of every byte fewer.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use ferrite_proto::{Attribute, EndTransferFlags, ErrorCode, PutFlags, Request, Response};

use super::strings::SetOptions;
use super::{lookup, not_ready_in_cluster, plugins, reply, routing, Args, Client, NotReady, RespError};
use crate::buffered::{self, Buffers, Next};
use crate::completion::Completion;
use crate::handler::{Failure, Flow, ShardState, IN_PLACE_PIECE_BYTES_MIN, TRANSFERS_PER_SESSION_MAX};
use crate::resp::parser::{Parsed, Parser, ProtocolError};
use crate::resp::Settings;
use crate::stream::ClientStream;
use crate::write_through::WriteThrough;

/// The direct transfer that carries a connection's long value: a RESP session opens no other.
const TRANSFER: u64 = 0;

/// A long value on its way in or out of one connection.
#[derive(Debug)]
pub(crate) enum LongValue {
    /// A `SET`'s value arriving.
    Arriving(Arriving),
    /// A reply with long values in it leaving: a `GET`'s value, a `GETRANGE`'s part of one, an
    /// `MGET`'s array.
    Leaving(Leaving),
}

/// A reply whose long values leave in pieces, each under the direct read that holds its key.
#[derive(Debug)]
pub(crate) struct Leaving {
    /// The reply's other bytes still to be answered: what stands between and after the long
    /// values (their `\r\n` ends included).
    rest: BytesMut,
    /// Bytes of the reply's other bytes answered so far, which the places count from.
    answered: usize,
    /// The long values still to be answered, in their order in the reply.
    places: VecDeque<LongPlace>,
}

/// Where a long value's bytes go in a reply, and which of them are still to be answered.
#[derive(Debug, Clone, Copy)]
pub(super) struct LongPlace {
    /// How many of the reply's other bytes come before the value.
    at: usize,
    /// The direct read that answers it.
    transfer: u64,
    /// The value's bytes from `next` to `end` are still to be answered.
    next: u64,
    end: u64,
}

#[derive(Debug)]
pub(crate) struct Arriving {
    key: Box<[u8]>,
    length: u64,
    received: u64,
    /// Arguments after the value (the options).
    options: usize,
    /// Why the `SET` is refused, once its bytes have all been read; nothing is staged then.
    refusal: Option<RespError>,
    stage: Stage,
    /// The piece being read from the socket straight into the staged value, at `received`.
    in_place: Option<InPlace>,
}

/// A piece of `len` bytes, `received` of them read in place so far.
#[derive(Debug, Clone, Copy)]
struct InPlace {
    len: usize,
    received: usize,
}

#[derive(Debug, Clone, Copy)]
enum Stage {
    /// The value's bytes, then its `\r\n`.
    Value,
    /// The options, parsed by the connection's parser.
    Options,
    /// Everything has arrived: the value is committed with these options.
    Commit(SetOptions),
}

/// Takes the `SET` the parser stopped at: `args` are its name and key, and the `length`-byte value
/// follows, then `options` more arguments. `None`: taken, the connection consumes the bytes before
/// the value and goes on with [`go_on`]. `Some`: not taken yet, the command waits for this (the
/// group's leader to be ready) and is parsed again after it.
pub(crate) fn begin_set(
    args: Args<'_>,
    length: u64,
    options: usize,
    client: &mut Client,
    shard: &mut ShardState,
    settings: &Settings,
) -> Option<Arc<Completion>> {
    shard.begin_request();
    let key = args.get(1);
    let refusal = match refusal_before_staging(key, client, shard, settings) {
        Some(NotReady::Wait(completion)) => return Some(completion),
        Some(NotReady::Refused(refusal)) => Some(refusal),
        None => stage(key, length, client, shard).err(),
    };
    shard.stats.requests += 1;
    client.long_value = Some(LongValue::Arriving(Arriving {
        key: key.into(),
        length,
        received: 0,
        options,
        refusal,
        stage: Stage::Value,
        in_place: None,
    }));
    None
}

/// What refuses a long `SET` before anything is staged, as [`super::execute`] would refuse the
/// command, or makes it wait.
fn refusal_before_staging(
    key: &[u8],
    client: &mut Client,
    shard: &mut ShardState,
    settings: &Settings,
) -> Option<NotReady> {
    if let Some(transaction) = &mut client.transaction {
        transaction.refuse();
        return Some(NotReady::Refused(RespError::err(format!(
            "a SET of a value longer than {} bytes cannot be queued in a transaction",
            shard.limits.value_bytes_max
        ))));
    }
    // Routing and signals look at a whole command: the value's place holds an empty one.
    let source = [b"set".as_slice(), key].concat();
    let ranges = [0..3, 3..source.len(), source.len()..source.len()];
    let args = Args::new(&source, &ranges);
    if let Some(refusal) = routing::refusal(args, client, shard) {
        return Some(NotReady::Refused(refusal));
    }
    let set = lookup(b"set").expect("SET is a command");
    if plugins::signal_of(set, args, client, shard).is_some() {
        return Some(NotReady::Refused(RespError::err(format!(
            "a SET of a value longer than {} bytes cannot be signalled to the pool's plugins (post-put)",
            shard.limits.value_bytes_max
        ))));
    }
    not_ready_in_cluster(client, shard, settings)
}

/// Opens the direct put that stages the value: the pool's room and the session's right to write
/// are checked here.
fn stage(key: &[u8], length: u64, client: &mut Client, shard: &mut ShardState) -> Result<(), RespError> {
    let request = Request::PutDirect { pool: client.pool, flags: PutFlags::NONE, transfer: TRANSFER, length, key };
    match shard.execute(request, &mut client.session, 0) {
        Ok(Response::TransferOpened { .. }) => Ok(()),
        Ok(other) => Err(RespError::unexpected(&other)),
        Err(failure) => Err(failure.into()),
    }
}

/// Begins answering `GET` (`part` all of it) or `GETRANGE` (`part` a range longer than the inline
/// limit) of `key`, whose value is longer than the inline limit: the length line of the part of
/// the value that `part` chooses from the value's length now, its bytes in pieces through
/// [`go_on`]. The key is held from here to the last piece, so the part comes from one value.
pub(super) fn begin_read(
    client: &mut Client,
    shard: &mut ShardState,
    key: &[u8],
    part: impl FnOnce(u64) -> std::ops::Range<u64>,
    out: &mut BytesMut,
) -> Result<Flow, RespError> {
    let length = open_direct_read(client, shard, TRANSFER, key)?;
    let part = part(length);
    reply::bulk_header(out, part.end - part.start);
    let place = LongPlace { at: 0, transfer: TRANSFER, next: part.start, end: part.end };
    let rest = BytesMut::from(&b"\r\n"[..]);
    client.long_value = Some(LongValue::Leaving(Leaving { rest, answered: 0, places: VecDeque::from([place]) }));
    Ok(Flow::Continue)
}

/// Opens a direct read of `key`'s value, longer than the inline limit, for a reply that answers
/// it among others (`MGET`): the key is held from now until its last byte has left. Writes the
/// value's length line and its `\r\n` end into `out`, whose reply began at `reply_start`, and
/// notes the value's place between them in `places`. A connection has at most
/// [`TRANSFERS_PER_SESSION_MAX`] such reads open; [`ShardState::end_transfers`] releases them all
/// when the reply cannot be answered.
pub(super) fn open_read(
    client: &mut Client,
    shard: &mut ShardState,
    key: &[u8],
    out: &mut BytesMut,
    reply_start: usize,
    places: &mut Vec<LongPlace>,
) -> Result<(), RespError> {
    if places.len() >= TRANSFERS_PER_SESSION_MAX {
        return Err(RespError::err(format!(
            "a reply holds at most {TRANSFERS_PER_SESSION_MAX} values longer than {} bytes; ask for fewer keys at a \
             time",
            shard.limits.value_bytes_max
        )));
    }
    let transfer = places.len() as u64;
    let length = open_direct_read(client, shard, transfer, key)?;
    reply::bulk_header(out, length);
    places.push(LongPlace { at: out.len() - reply_start, transfer, next: 0, end: length });
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// Answers the reply that `out` holds from `reply_start` on, built with [`open_read`]: its bytes
/// up to the first long value stay in `out`, the rest leaves through [`go_on`], each long value in
/// pieces in its place.
pub(super) fn answer_with_long_values(
    client: &mut Client,
    out: &mut BytesMut,
    reply_start: usize,
    places: Vec<LongPlace>,
) {
    let Some(first) = places.first() else { return };
    let split = reply_start + first.at;
    let rest = BytesMut::from(&out[split..]);
    out.truncate(split);
    client.long_value = Some(LongValue::Leaving(Leaving { rest, answered: first.at, places: places.into() }));
}

/// Opens direct read `transfer` of `key`'s value, which holds the key until the read ends, and
/// answers the value's length.
fn open_direct_read(client: &mut Client, shard: &mut ShardState, transfer: u64, key: &[u8]) -> Result<u64, RespError> {
    match shard.execute(Request::GetDirect { pool: client.pool, transfer, key }, &mut client.session, 0) {
        Ok(Response::TransferOpened { length }) => Ok(length),
        Ok(other) => Err(RespError::unexpected(&other)),
        Err(failure) => Err(failure.into()),
    }
}

/// Answers `part` of `key`'s value, a range within the inline limit of a value longer than it,
/// whole: read in this one turn of the shard loop, so it may stand in `EXEC`'s array. An empty
/// `part` reads nothing.
pub(super) fn read_part(
    client: &mut Client,
    shard: &mut ShardState,
    key: &[u8],
    part: std::ops::Range<u64>,
    out: &mut BytesMut,
) -> Result<(), RespError> {
    if part.is_empty() {
        reply::bulk(out, b"");
        return Ok(());
    }
    open_direct_read(client, shard, TRANSFER, key)?;
    let length = (part.end - part.start) as u32;
    let request = Request::DirectRead { transfer: TRANSFER, offset: part.start, length };
    let read = match shard.execute(request, &mut client.session, 0) {
        Ok(Response::Value(bytes)) if bytes.len() == length as usize => {
            reply::bulk(out, bytes);
            Ok(())
        }
        Ok(other) => Err(RespError::unexpected(&other)),
        Err(failure) => Err(failure.into()),
    };
    let _ = end_transfer(client, shard, EndTransferFlags::COMMIT, 0);
    read
}

/// Moves the connection's long value on, if it has one: `None` once there is none (the
/// connection parses its next command), else what the connection does next.
pub(crate) fn go_on(
    parser: &mut Parser,
    client: &mut Client,
    shard: &mut ShardState,
    buffers: &mut Buffers,
    through: &WriteThrough<'_>,
    now_ns: u64,
) -> Option<Next> {
    let Buffers { read, write, .. } = buffers;
    loop {
        let arriving = match client.long_value.as_mut()? {
            LongValue::Leaving(_) => return Some(send_piece(client, shard, write, through)),
            LongValue::Arriving(arriving) => arriving,
        };
        match arriving.stage {
            Stage::Value => match receive(client, shard, read, now_ns) {
                Received::Needs(needed) => {
                    read.reserve(needed.saturating_sub(read.len()));
                    return Some(Next::Read);
                }
                // Back to the socket loop after each piece logged, so its wait for the log (when
                // the log's backlog is long) paces the client.
                Received::Piece => return Some(Next::Flush),
                Received::InPlace => return Some(Next::Receive),
                Received::Dropped => {}
                Received::Whole { options } => {
                    parser.resume_array(options);
                }
                Received::Unframed(error) => return Some(protocol_error(client, shard, write, &error)),
            },
            Stage::Options => match parser.parse(read) {
                Ok(Parsed::Command { consumed }) => {
                    let options = SetOptions::parse(parser.args(read));
                    read.advance(consumed);
                    options_arrived(client, shard, options);
                }
                Ok(Parsed::Incomplete { needed }) => {
                    read.reserve(needed.unwrap_or(0).saturating_sub(read.len()));
                    return Some(Next::Read);
                }
                Ok(Parsed::Skip { .. } | Parsed::LongValue { .. }) => {
                    unreachable!("the rest of an array holds bulk strings only, none streamed")
                }
                Err(error) => return Some(protocol_error(client, shard, write, &error)),
            },
            Stage::Commit(options) => {
                if let Some(completion) = commit(client, shard, options, now_ns, write) {
                    return Some(Next::Wait(completion));
                }
            }
        }
    }
}

/// What arrived of a long value's bytes.
enum Received {
    /// The buffer must hold this many bytes for the next step.
    Needs(usize),
    /// A piece was staged (and logged).
    Piece,
    /// A piece is being read in place ([`poll_receive`]).
    InPlace,
    /// Bytes of a refused `SET` were dropped.
    Dropped,
    /// The value and its `\r\n` have arrived; `options` arguments follow.
    Whole { options: usize },
    /// The value was not followed by `\r\n`.
    Unframed(ProtocolError),
}

/// The `SET` arriving on `client`, which the caller knows there is.
fn arriving_on(client: &mut Client) -> &mut Arriving {
    match &mut client.long_value {
        Some(LongValue::Arriving(arriving)) => arriving,
        _ => unreachable!("called while a value arrives"),
    }
}

fn receive(client: &mut Client, shard: &mut ShardState, read: &mut BytesMut, now_ns: u64) -> Received {
    let arriving = arriving_on(client);
    let remaining = arriving.length - arriving.received;
    if remaining == 0 {
        if read.len() < 2 {
            return Received::Needs(2);
        }
        if &read[..2] != b"\r\n" {
            return Received::Unframed(ProtocolError::MissingBulkTerminator);
        }
        read.advance(2);
        if arriving.options == 0 {
            arriving.stage = Stage::Commit(SetOptions::default());
        } else {
            arriving.stage = Stage::Options;
        }
        return Received::Whole { options: arriving.options };
    }
    if arriving.refusal.is_some() {
        let dropped = remaining.min(read.len() as u64) as usize;
        if dropped == 0 {
            return Received::Needs(1);
        }
        read.advance(dropped);
        arriving.received += dropped as u64;
        return Received::Dropped;
    }
    let offset = arriving.received;
    if let Some(piece) = arriving.in_place {
        if piece.received < piece.len {
            return Received::InPlace;
        }
        arriving.in_place = None;
        let written = shard.write_piece_in_place(TRANSFER, offset, piece.len, &mut client.session).map(drop);
        return piece_written(client, shard, piece.len, written);
    }
    // Whole pieces of the inline limit: each is logged as one record, which the log keeps for the
    // value instead of a checkpoint copying its pages (`docs/durability.md`).
    let piece = remaining.min(u64::from(shard.limits.value_bytes_max)) as usize;
    if read.len() < piece {
        if piece < IN_PLACE_PIECE_BYTES_MIN {
            return Received::Needs(piece);
        }
        let Some(lent) = shard.staged_piece_mut(TRANSFER, offset, piece, &client.session) else {
            return Received::Needs(piece);
        };
        // The buffer holds nothing past the piece's first bytes: they move to their place, and
        // the rest is read there.
        lent[..read.len()].copy_from_slice(read);
        arriving_on(client).in_place = Some(InPlace { len: piece, received: read.len() });
        read.clear();
        return Received::InPlace;
    }
    let request = Request::DirectWrite { transfer: TRANSFER, offset, bytes: &read[..piece] };
    let written = shard.execute(request, &mut client.session, now_ns).map(drop);
    read.advance(piece);
    piece_written(client, shard, piece, written)
}

/// Accounts for a piece of `len` bytes taken (or refused: the `SET` will be, once its bytes have
/// all arrived, and what was staged is dropped now).
fn piece_written(client: &mut Client, shard: &mut ShardState, len: usize, written: Result<(), Failure>) -> Received {
    if let Err(failure) = written {
        arriving_on(client).refusal = Some(failure.into());
        abort(client, shard);
    }
    arriving_on(client).received += len as u64;
    Received::Piece
}

/// Reads what the socket has of the piece being read in place into the staged value's memory.
/// Only this connection can end its transfer or close its pool, and it is reading: the memory
/// stays lent unless the shard stopped, which ends the connection.
pub(crate) fn poll_receive(
    client: &mut Client,
    shard: &mut ShardState,
    cx: &mut Context<'_>,
    stream: &mut ClientStream,
) -> Poll<io::Result<usize>> {
    let Client { long_value, session, .. } = client;
    let Some(LongValue::Arriving(Arriving { received, in_place: Some(piece), .. })) = long_value else {
        return Poll::Ready(Err(io::Error::other("no piece is being read in place")));
    };
    let lent = shard.staged_piece_mut(TRANSFER, *received, piece.len, session);
    buffered::poll_read_lent(lent, &mut piece.received, cx, stream)
}

fn options_arrived(client: &mut Client, shard: &mut ShardState, options: Result<SetOptions, RespError>) {
    let arriving = arriving_on(client);
    let options = options.and_then(|options| match options.get {
        true => Err(RespError::err(format!(
            "SET with GET is not supported for values longer than {} bytes",
            shard.limits.value_bytes_max
        ))),
        false => Ok(options),
    });
    match options {
        Ok(options) => arriving.stage = Stage::Commit(options),
        Err(refusal) => {
            arriving.stage = Stage::Commit(SetOptions::default());
            if arriving.refusal.is_none() {
                arriving.refusal = Some(refusal);
                abort(client, shard);
            }
        }
    }
}

/// Commits the staged value as the key's, unless the `SET` was refused or its condition (`NX`,
/// `XX`) does not hold; answers it. Waits first for a plugin call or another connection's long
/// read holding the key: `Some` is the wait, after which the commit is tried again.
fn commit(
    client: &mut Client,
    shard: &mut ShardState,
    options: SetOptions,
    now_ns: u64,
    out: &mut BytesMut,
) -> Option<Arc<Completion>> {
    let pool = client.pool;
    let arriving = arriving_on(client);
    if let Some(RespError(text)) = arriving.refusal.take() {
        client.long_value = None;
        shard.count_failure();
        reply::error(out, &text);
        return None;
    }
    let key = std::mem::take(&mut arriving.key);
    if shard.may_wait(&mut client.session, pool, true) {
        if let Some(completion) = shard.wait_for_key(pool, &key, true, 0) {
            arriving_on(client).key = key;
            return Some(completion);
        }
    }
    client.long_value = None;
    if options.nx || options.xx {
        let request = Request::GetAttribute { pool, attribute: Attribute::ValueLength, key: &key };
        let present = match shard.execute(request, &mut client.session, now_ns) {
            Ok(_) => true,
            Err(failure) if failure.code == ErrorCode::KeyNotFound => false,
            Err(failure) => {
                abort(client, shard);
                shard.count_failure();
                reply::error(out, &RespError::from(failure).0);
                return None;
            }
        };
        let holds = if options.nx { !present } else { present };
        if !holds {
            abort(client, shard);
            reply::null(out, client.protocol);
            return None;
        }
    }
    match end_transfer(client, shard, EndTransferFlags::COMMIT, now_ns) {
        Ok(()) => reply::ok(out),
        Err(failure) => {
            shard.count_failure();
            reply::error(out, &RespError::from(failure).0);
        }
    }
    None
}

/// Ends the connection's transfer: commits or drops a `SET`'s staged value, releases a `GET`'s
/// hold on its key.
fn end_transfer(
    client: &mut Client,
    shard: &mut ShardState,
    flags: EndTransferFlags,
    now_ns: u64,
) -> Result<(), Failure> {
    shard.execute(Request::EndTransfer { transfer: TRANSFER, flags }, &mut client.session, now_ns).map(drop)
}

/// Drops the staged value, if one is staged: the key keeps its value.
fn abort(client: &mut Client, shard: &mut ShardState) {
    // Fails only when nothing is staged (the `SET` was refused before), which is what is wanted.
    let _ = end_transfer(client, shard, EndTransferFlags::ABORT, 0);
}

/// Answers the reply that is leaving on `client` on to the end of the next piece of its next
/// long value, and ends that value's read after its last piece; after the last value's, the rest
/// of the reply ends it.
fn send_piece(client: &mut Client, shard: &mut ShardState, out: &mut BytesMut, through: &WriteThrough<'_>) -> Next {
    let Client { long_value, session, .. } = client;
    let Some(LongValue::Leaving(leaving)) = long_value else { unreachable!("called while a reply leaves") };
    if leaving.places.len() > 1 {
        shard.note_reads(session);
    }
    let place = leaving.places.front_mut().expect("a leaving reply has a long value still to answer");
    let before = place.at - leaving.answered;
    out.extend_from_slice(&leaving.rest[..before]);
    leaving.rest.advance(before);
    leaving.answered = place.at;
    let piece = (place.end - place.next).min(u64::from(shard.limits.value_bytes_max));
    if piece > 0 {
        let request = Request::DirectRead { transfer: place.transfer, offset: place.next, length: piece as u32 };
        match shard.execute(request, session, 0) {
            Ok(Response::Value(bytes)) if bytes.len() as u64 == piece => through.append(out, bytes, session.wait_lsn),
            Ok(_) | Err(_) => {
                // Half a bulk string has left: nothing after it could be read as a reply.
                tracing::debug!(
                    next = place.next,
                    end = place.end,
                    "a long read could not read its next piece; closing the connection"
                );
                *long_value = None;
                shard.end_transfers(session);
                return Next::Close;
            }
        }
        place.next += piece;
    }
    if place.next == place.end {
        let transfer = place.transfer;
        leaving.places.pop_front();
        let _ = shard.execute(Request::EndTransfer { transfer, flags: EndTransferFlags::COMMIT }, session, 0);
        if leaving.places.is_empty() {
            out.extend_from_slice(&leaving.rest);
            *long_value = None;
        }
    }
    Next::Flush
}

/// Answers a framing error inside a long `SET` and closes, dropping what was staged.
fn protocol_error(client: &mut Client, shard: &mut ShardState, out: &mut BytesMut, error: &ProtocolError) -> Next {
    abort(client, shard);
    client.long_value = None;
    shard.count_failure();
    reply::error(out, &format!("ERR Protocol error: {error}"));
    Next::Close
}

/// Why the long `SET` under way on `client` will be refused, if it will.
#[cfg(test)]
pub(super) fn refusal(client: &Client) -> Option<&str> {
    match &client.long_value {
        Some(LongValue::Arriving(arriving)) => arriving.refusal.as_ref().map(|RespError(text)| text.as_str()),
        _ => None,
    }
}
