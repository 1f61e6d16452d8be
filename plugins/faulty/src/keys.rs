//! `faulty`'s key scripts: payloads that change other keys through the callbacks, so tests can
//! drive every one of them through the real server and check that a call's changes are atomic.
//!
//! A script is commands separated by `;`, run in order:
//! - `create KEY TEXT`: creates KEY (`create_key`) with the value TEXT.
//! - `update KEY TEXT`: opens KEY for writing, resizes it to TEXT's length and writes TEXT.
//! - `erase KEY`: erases KEY (`erase_key`).
//! - `set TEXT`: resizes the call's own value to TEXT's length and writes TEXT.
//! - `find EXPRESSION`: answers each key `find_key` finds, one response buffer each.
//! - `fail`: fails the call; everything the script changed before must be undone.
//! - `crash`: aborts the host process in the middle of the call; likewise.
//! - `alloc TEXT`: allocates pool memory (`allocate_memory`), writes TEXT there and sets the
//!   call's own value to `OFFSET:LENGTH`, where later calls find it.
//! - `read-alloc`: answers the bytes of the allocation the call's own value names.
//! - `free-alloc`: frees the allocation the call's own value names and empties the value.
//! - `keep-detached`: answers the detached value (`invoke_put_ado --detached`) and sets the
//!   call's own value to `OFFSET:LENGTH` of it, keeping it.
//! - `info`: answers `objects=N` from `pool_info`.
//! - `recent N`: answers the keys of `get_reference_vector` over all time, at most N of them.
//! - `sleep MS`: waits MS milliseconds (a call long enough for other clients to act meanwhile).
//! - `await KEY`: waits until KEY exists, looking every 10 ms (`open_key` for reading): a call
//!   that lasts exactly until a test says so.
//! - `scrawl TEXT`: overwrites the first bytes of the call's own value with TEXT (declared),
//!   keeping its length.
//! - `spread N`: allocates 100 bytes of pool memory and writes them (one declared range), then
//!   writes every other byte of the first 2N bytes of the call's own value, each byte its own
//!   declared range: a call that declares many ranges far apart.
//! - `smash`: zeroes every byte of pool memory but the call's own value through a stray
//!   pointer; the write must fault and fail the call.
//! - `smash-later MS`: leaves a thread that zeroes all of pool memory MS milliseconds after the
//!   call returned, through a pointer kept past the call; the call itself succeeds.

use ferrite_plugin::{Access, Call, PluginError};

/// The first word of every script command: a payload starting with one is a script.
pub const COMMANDS: [&str; 19] = [
    "create",
    "update",
    "erase",
    "set",
    "find",
    "fail",
    "alloc",
    "read-alloc",
    "free-alloc",
    "keep-detached",
    "info",
    "recent",
    "crash",
    "sleep",
    "await",
    "scrawl",
    "spread",
    "smash",
    "smash-later",
];

/// Whether `payload` is a key script.
pub fn is_script(payload: &[u8]) -> bool {
    let first = payload.split(|&b| b == b' ' || b == b';').next().unwrap_or_default();
    COMMANDS.iter().any(|command| command.as_bytes() == first)
}

/// Runs the script `payload`.
pub fn run(call: &mut Call<'_>, payload: &[u8]) -> Result<(), PluginError> {
    let script = String::from_utf8(payload.to_vec()).map_err(|_| PluginError::invalid("faulty: a script is text"))?;
    for command in script.split(';').map(str::trim).filter(|command| !command.is_empty()) {
        let mut words = command.splitn(3, ' ');
        let (verb, first, rest) = (words.next().unwrap_or_default(), words.next(), words.next());
        match (verb, first, rest) {
            ("create", Some(key), Some(text)) => {
                let handle = call.create_key(key.as_bytes(), text.len())?;
                call.opened_value_mut(handle)?.copy_from_slice(text.as_bytes());
            }
            ("update", Some(key), Some(text)) => {
                let handle = call.open_key(key.as_bytes(), Access::Write)?;
                call.resize_value(key.as_bytes(), text.len())?;
                call.opened_value_mut(handle)?.copy_from_slice(text.as_bytes());
            }
            ("erase", Some(key), None) => call.erase_key(key.as_bytes())?,
            ("set", Some(text), rest) => {
                let text = match rest {
                    Some(rest) => format!("{text} {rest}"),
                    None => text.to_owned(),
                };
                set_own_value(call, text.as_bytes())?;
            }
            ("find", Some(expression), None) => {
                let mut position = 0;
                while let Some(key) = call.find_key(expression, &mut position)? {
                    call.respond(key)?;
                }
            }
            ("fail", None, None) => return Err(PluginError::failed("faulty: failing the script as asked")),
            ("crash", None, None) => crate::misbehave::abort(),
            ("alloc", Some(text), rest) => {
                let text = match rest {
                    Some(rest) => format!("{text} {rest}"),
                    None => text.to_owned(),
                };
                let memory = call.allocate(text.len(), 8)?;
                call.memory_mut(memory)?.copy_from_slice(text.as_bytes());
                let place = format!("{}:{}", call.memory_offset(memory)?, text.len());
                set_own_value(call, place.as_bytes())?;
            }
            ("read-alloc", None, None) => {
                let (offset, len) = recorded_place(call)?;
                let bytes = call.pool_bytes(offset, len)?.to_vec();
                call.respond(&bytes)?;
            }
            ("free-alloc", None, None) => {
                let (offset, len) = recorded_place(call)?;
                call.free_at(offset, len)?;
                set_own_value(call, b"")?;
            }
            ("info", None, None) => {
                let info = call.pool_info()?;
                call.respond(format!("objects={}", info.objects).as_bytes())?;
            }
            ("recent", Some(max), None) => {
                let max = max.parse().map_err(|_| PluginError::invalid("faulty: recent takes a count"))?;
                let keys: Vec<Vec<u8>> =
                    call.reference_vector(0, u64::MAX, max)?.iter().map(|pair| pair.key.to_vec()).collect();
                for key in keys {
                    call.respond(&key)?;
                }
            }
            ("sleep", Some(ms), None) => std::thread::sleep(std::time::Duration::from_millis(number(ms)?)),
            ("await", Some(key), None) => loop {
                match call.open_key(key.as_bytes(), Access::Read) {
                    Ok(handle) => break call.unlock(handle)?,
                    Err(error) if error.code() == ferrite_plugin::ErrorCode::NotFound => {
                        std::thread::sleep(std::time::Duration::from_millis(10))
                    }
                    Err(error) => return Err(error),
                }
            },
            ("scrawl", Some(text), rest) => {
                let text = match rest {
                    Some(rest) => format!("{text} {rest}"),
                    None => text.to_owned(),
                };
                call.value_range_mut(0..text.len())?.copy_from_slice(text.as_bytes());
            }
            ("spread", Some(count), None) => {
                let memory = call.allocate(100, 8)?;
                call.memory_mut(memory)?.fill(b'M');
                for index in 0..number(count)? as usize {
                    call.value_range_mut(2 * index..2 * index + 1)?[0] = b'S';
                }
            }
            ("smash", None, None) => crate::misbehave::smash_pool(call)?,
            ("smash-later", Some(ms), None) => {
                crate::misbehave::smash_pool_later(call, std::time::Duration::from_millis(number(ms)?))?
            }
            ("keep-detached", None, None) => {
                let detached = call.detached().ok_or_else(|| PluginError::invalid("faulty: no detached value"))?;
                let (bytes, offset) = (detached.to_vec(), call.detached_offset().unwrap_or_default());
                call.respond(&bytes)?;
                set_own_value(call, format!("{offset}:{}", bytes.len()).as_bytes())?;
            }
            _ => return Err(PluginError::invalid(format!("faulty: cannot run `{command}`"))),
        }
    }
    Ok(())
}

/// A script's numeric argument.
fn number(text: &str) -> Result<u64, PluginError> {
    text.parse().map_err(|_| PluginError::invalid(format!("faulty: `{text}` is not a number")))
}

/// Resizes the call's own value to `bytes` and writes them there.
fn set_own_value(call: &mut Call<'_>, bytes: &[u8]) -> Result<(), PluginError> {
    let key = call.key().to_vec();
    call.resize_value(&key, bytes.len())?;
    call.value_mut()?.copy_from_slice(bytes);
    Ok(())
}

/// The `OFFSET:LENGTH` the call's own value records.
fn recorded_place(call: &Call<'_>) -> Result<(u64, usize), PluginError> {
    let text = std::str::from_utf8(call.value()).map_err(|_| PluginError::invalid("faulty: no place recorded"))?;
    let (offset, len) = text.split_once(':').ok_or_else(|| PluginError::invalid("faulty: no place recorded"))?;
    match (offset.parse(), len.parse()) {
        (Ok(offset), Ok(len)) => Ok((offset, len)),
        _ => Err(PluginError::invalid(format!("faulty: `{text}` is no OFFSET:LENGTH"))),
    }
}
