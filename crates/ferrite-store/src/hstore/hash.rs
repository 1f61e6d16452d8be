//! The key hash of the persistent table: SipHash-2-4 (Aumasson and Bernstein, 2012) under a
//! 128-bit key stored in the pool's header.
//!
//! Why this hash: the table persists, so the hash must give the same value in every process and
//! every version of Ferrite, which rules out `std`'s `DefaultHasher` (its algorithm is unspecified)
//! and any hash seeded per process. Keys come from network clients, so an unkeyed hash (FNV-1a,
//! unseeded xxh3) would let a client craft 64 keys with one home bucket, defeat hopscotch
//! displacement and force the table to grow until the pool is full. A keyed hash with a random key
//! chosen when the pool is formatted, and kept in its header, is both stable and unpredictable.
//! SipHash-2-4 is the reference keyed hash for this purpose and small enough to carry here rather
//! than add a dependency; its published test vector is checked below.

/// SipHash-2-4 of `data` under `key` (`key[0]` is k0, the first eight key bytes, little-endian).
pub(crate) fn siphash24(key: [u64; 2], data: &[u8]) -> u64 {
    let mut v = [
        key[0] ^ 0x736f_6d65_7073_6575,
        key[1] ^ 0x646f_7261_6e64_6f6d,
        key[0] ^ 0x6c79_6765_6e65_7261,
        key[1] ^ 0x7465_6462_7974_6573,
    ];
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let m = u64::from_le_bytes(chunk.try_into().expect("chunks_exact yields 8 bytes"));
        v[3] ^= m;
        round(&mut v);
        round(&mut v);
        v[0] ^= m;
    }
    let mut last = (data.len() as u64) << 56;
    for (i, byte) in chunks.remainder().iter().enumerate() {
        last |= u64::from(*byte) << (8 * i);
    }
    v[3] ^= last;
    round(&mut v);
    round(&mut v);
    v[0] ^= last;
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
}

/// A fresh, unpredictable hash key for a new pool, from the operating system's randomness that
/// `std` already gathers for `HashMap` seeds.
pub(crate) fn random_hash_key() -> [u64; 2] {
    use std::hash::{BuildHasher, Hasher};
    let state = std::collections::hash_map::RandomState::new();
    let half = |salt: u64| {
        let mut hasher = state.build_hasher();
        hasher.write_u64(salt);
        hasher.finish()
    };
    [half(0), half(1)]
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const REFERENCE_KEY: [u64; 2] = [0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908];

    /// The test vector of the SipHash paper (appendix A): key 00..0f, message 00..0e.
    #[test]
    fn matches_the_published_test_vector() {
        let message: Vec<u8> = (0..15).collect();
        assert_eq!(siphash24(REFERENCE_KEY, &message), 0xa129_ca61_49be_45e5);
    }

    /// The first entries of the reference implementation's 64-vector table (vectors.h), covering
    /// the empty message and every tail length.
    #[test]
    fn matches_reference_vectors_for_every_tail_length() {
        let expected: [u64; 9] = [
            0x726f_db47_dd0e_0e31,
            0x74f8_39c5_93dc_67fd,
            0x0d6c_8009_d9a9_4f5a,
            0x8567_6696_d7fb_7e2d,
            0xcf27_94e0_2771_87b7,
            0x1876_5564_cd99_a68d,
            0xcbc9_466e_58fe_e3ce,
            0xab02_00f5_8b01_d137,
            0x93f5_f579_9a93_2462,
        ];
        for (len, want) in expected.iter().enumerate() {
            let message: Vec<u8> = (0..len as u8).collect();
            assert_eq!(siphash24(REFERENCE_KEY, &message), *want, "message of {len} bytes");
        }
    }

    proptest! {
        /// Agrees with the standard library's (deprecated but still shipped) SipHash-2-4.
        #[test]
        fn agrees_with_std_siphasher(k0: u64, k1: u64, data in proptest::collection::vec(any::<u8>(), 0..100)) {
            #[allow(deprecated)]
            let mut reference = std::hash::SipHasher::new_with_keys(k0, k1);
            std::hash::Hasher::write(&mut reference, &data);
            prop_assert_eq!(siphash24([k0, k1], &data), std::hash::Hasher::finish(&reference));
        }
    }

    #[test]
    fn random_keys_differ() {
        assert_ne!(random_hash_key(), random_hash_key());
    }
}
