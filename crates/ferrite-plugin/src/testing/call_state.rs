//! What the test host tracks during one invocation: the target, the locks the call holds, the
//! ranges it declared with their before-images, the bytes the host itself wrote, the memory it
//! allocated, the responses, and host-owned buffers that must live until the call returns.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use crate::abi::Pair;

/// One buffer a plugin passed to `respond`, tagged with the plugin's layer in the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub layer: u32,
    pub data: Vec<u8>,
}

/// A declared range and the bytes it held when declared.
#[derive(Debug)]
pub(crate) struct BeforeImage {
    pub(crate) offset: usize,
    pub(crate) bytes: Vec<u8>,
}

#[derive(Debug, Default)]
pub(crate) struct CallState {
    /// `None` for a key-less invocation.
    pub(crate) target: Option<Vec<u8>>,
    pub(crate) read_only: bool,
    pub(crate) layer: u32,
    /// Keys this call holds a lock on (the target and every key it created or opened).
    pub(crate) locked: BTreeSet<Vec<u8>>,
    /// Locked keys whose values the call may write.
    pub(crate) writable: BTreeSet<Vec<u8>>,
    /// Blocks this call allocated and has not freed: offset to length.
    pub(crate) allocated: BTreeMap<usize, usize>,
    pub(crate) before_images: Vec<BeforeImage>,
    /// Ranges the host wrote itself (zeroed new values, resized copies): not the plugin's.
    pub(crate) host_writes: Vec<Range<usize>>,
    pub(crate) responses: Vec<Response>,
    /// Keys and pair arrays handed to the plugin, kept until the call returns as the header
    /// promises, whatever the plugin erases meanwhile.
    pub(crate) kept_keys: Vec<Box<[u8]>>,
    pub(crate) kept_pairs: Vec<Box<[Pair]>>,
}

impl CallState {
    /// Copies a key into host-owned memory that lives until the call returns.
    pub(crate) fn keep_key(&mut self, key: &[u8]) -> &[u8] {
        self.kept_keys.push(key.into());
        self.kept_keys.last().map_or(&[], |kept| kept)
    }

    /// The ranges whose changes are accounted for: declared by the plugin or written by the host.
    pub(crate) fn accounted_ranges(&self) -> Vec<Range<usize>> {
        self.before_images
            .iter()
            .map(|image| image.offset..image.offset + image.bytes.len())
            .chain(self.host_writes.iter().cloned())
            .collect()
    }
}
