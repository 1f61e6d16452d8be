//! Turning fuzz input into the files of a shard directory, shared by both targets.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh shard directory (`wal/` and `checkpoint/`) under the temp directory, removed on drop.
pub struct ShardDir {
    pub root: PathBuf,
}

impl ShardDir {
    pub fn new() -> ShardDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("ferrite-fuzz-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("wal")).expect("create the log directory");
        std::fs::create_dir_all(root.join("checkpoint")).expect("create the checkpoint directory");
        ShardDir { root }
    }

    pub fn write(&self, relative: &str, bytes: &[u8]) {
        std::fs::write(self.root.join(relative), bytes).expect("write a fuzz file");
    }
}

impl Drop for ShardDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Splits `data` into up to `parts` pieces at the byte sequence `FRSPLIT!`, so the fuzzer can
/// learn file boundaries.
pub fn split(data: &[u8], parts: usize) -> Vec<&[u8]> {
    const MARK: &[u8] = b"FRSPLIT!";
    let mut pieces = Vec::new();
    let mut rest = data;
    while pieces.len() + 1 < parts {
        match rest.windows(MARK.len()).position(|window| window == MARK) {
            Some(at) => {
                pieces.push(&rest[..at]);
                rest = &rest[at + MARK.len()..];
            }
            None => break,
        }
    }
    pieces.push(rest);
    pieces
}
