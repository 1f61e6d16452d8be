//! Loads a shard from an arbitrary checkpoint manifest, page file and log segment: loading must
//! never panic (nor allocate without bound), whatever the bytes; damage must come back as an
//! error naming the file.
#![no_main]

#[path = "files.rs"]
mod files;

use ferrite_store::persistence::ssd::checkpoint::{pages_name, Manifest};
use ferrite_store::persistence::ssd::{load_shard, ShardPaths};
use libfuzzer_sys::fuzz_target;

/// Regions larger than this are not allocated: a fuzzed descriptor may claim any size.
const REGION_BYTES_MAX: u64 = 1 << 24;

/// `bytes` with the manifest's checksum made right, so that fuzzing reaches what lies behind it
/// (pools, chains, extents kept in the log and the records they name) instead of stopping at it.
fn checksummed(bytes: &[u8]) -> Vec<u8> {
    let mut bytes = bytes.to_vec();
    if bytes.len() >= 16 {
        let crc = ferrite_store::checksum::crc32c(&bytes[16..]);
        bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    }
    bytes
}

fuzz_target!(|data: &[u8]| {
    let parts = files::split(data, 3);
    let manifest = &checksummed(parts[0])[..];
    let _ = Manifest::decode(manifest, "MANIFEST");
    if let Ok(decoded) = Manifest::decode(manifest, "MANIFEST") {
        if decoded.pools.iter().any(|pool| pool.descriptor.region_bytes > REGION_BYTES_MAX) {
            return;
        }
    }
    let dir = files::ShardDir::new();
    dir.write("checkpoint/MANIFEST", manifest);
    if let Some(pages) = parts.get(1) {
        dir.write(&format!("checkpoint/{}", pages_name(1, 1)), pages);
    }
    if let Some(segment) = parts.get(2) {
        dir.write(&format!("wal/wal-{:016x}.log", 1), segment);
    }
    let _ = load_shard(&ShardPaths::new(&dir.root));
});
