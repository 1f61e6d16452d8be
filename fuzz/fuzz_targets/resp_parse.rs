//! Parses arbitrary bytes as RESP commands, as a RESP connection does, for a client that has
//! authenticated and for one that has not (the first byte's low bit says which): the parser must
//! never panic, and feeding the bytes in two pieces (the connection's buffer grown by a second
//! read) must give exactly the commands that feeding them at once gives.
#![no_main]

use ferrite_server::fuzzing::resp_commands;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(([mode, split], input)) = data.split_first_chunk::<2>() else { return };
    let authenticated = mode & 1 == 1;
    let split = usize::from(*split) % (input.len() + 1);
    let whole = resp_commands(input, input.len(), authenticated);
    let pieces = resp_commands(input, split, authenticated);
    assert_eq!(whole, pieces, "split at {split}");
});
