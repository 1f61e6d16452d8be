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

use ferrite_plugin::{Access, Call, PluginError};

/// The first word of every script command: a payload starting with one is a script.
pub const COMMANDS: [&str; 6] = ["create", "update", "erase", "set", "find", "fail"];

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
                let key = call.key().to_vec();
                call.resize_value(&key, text.len())?;
                call.value_mut()?.copy_from_slice(text.as_bytes());
            }
            ("find", Some(expression), None) => {
                let mut position = 0;
                while let Some(key) = call.find_key(expression, &mut position)? {
                    call.respond(key)?;
                }
            }
            ("fail", None, None) => return Err(PluginError::failed("faulty: failing the script as asked")),
            _ => return Err(PluginError::invalid(format!("faulty: cannot run `{command}`"))),
        }
    }
    Ok(())
}
