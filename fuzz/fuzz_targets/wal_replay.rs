//! Replays arbitrary write-ahead log segments: recovery and record decoding must never panic,
//! whatever the bytes; damage must come back as an error.
#![no_main]

#[path = "files.rs"]
mod files;

use ferrite_store::persistence::ssd::record;
use ferrite_store::persistence::wal::{recover, FsStorage};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let dir = files::ShardDir::new();
    for (index, segment) in files::split(data, 3).into_iter().enumerate() {
        dir.write(&format!("wal/wal-{:016x}.log", index + 1), segment);
    }
    let storage = FsStorage::open_dir(&dir.root.join("wal")).expect("open the log directory");
    let from_lsn = data.first().map_or(1, |b| u64::from(*b % 4) + 1);
    let _ = recover(&storage, from_lsn, |_, payload| {
        let _ = record::decode(payload);
    });
});
