//! The two checksums Ferrite computes, in one place.
//!
//! - CRC-32C (Castagnoli) guards every structure Ferrite writes to disk: log records and segment
//!   headers, checkpoint pages and headers, pmem slots, identity and backup manifests, the Raft
//!   state file.
//! - CRC-32 (ISO-HDLC, zlib's) is what the API reports for a value and what guards an hstore
//!   pool's header and directory, as MCAS's hstore does.
//!
//! Both come from `crc-fast`, which folds the bytes with carry-less multiplication (VPCLMULQDQ on
//! CPUs with AVX-512, PCLMULQDQ on any other x86-64, PMULL on AArch64), chosen at run time. A
//! large put's log records are checksummed whole, and with the `crc32` instruction alone (three
//! streams at once, the `crc32c` crate's method) that took 9 % of the shard's CPU time. Measured
//! on a benchmark VM (Intel Xeon with AVX-512, `docs/benchmarks.md`): three to four times the
//! instruction's rate from 4 KiB buffers up (76 against 20 GiB/s at 1 MiB), the same time on a
//! small put's record (26 ns with a 100-byte payload). The values are the standard ones: files
//! written before keep their meaning.

use crc_fast::{CrcAlgorithm, Digest};

/// CRC-32C of `bytes`.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(bytes)
}

/// CRC-32C of the bytes `crc` was computed over, followed by `bytes`.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    // A running CRC-32C is the complement of the checksum so far (the algorithm's final xor).
    let mut digest = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, u64::from(!crc));
    digest.update(bytes);
    digest.finalize() as u32
}

/// CRC-32 (ISO-HDLC) of `bytes`.
pub fn crc32(bytes: &[u8]) -> u32 {
    crc_fast::crc32_iso_hdlc(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_checksums_are_the_standard_ones() {
        // The check values of the CRC catalogue (CRC-32/ISCSI and CRC-32/ISO-HDLC).
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32(b""), 0);
        // RFC 3720, B.4: 32 bytes of zeros, and of ones.
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
    }

    proptest! {
        #[test]
        fn appending_is_checksumming_the_whole(bytes in proptest::collection::vec(any::<u8>(), 0..5000),
                                               split in any::<prop::sample::Index>()) {
            let at = split.index(bytes.len() + 1);
            let (head, tail) = bytes.split_at(at);
            prop_assert_eq!(crc32c_append(crc32c(head), tail), crc32c(&bytes));
            prop_assert_eq!(crc32c_append(crc32c(&bytes), &[]), crc32c(&bytes));
        }
    }
}
