//! Which shard owns a pool. Clients choose the shard (the MCAS model), so every client in every
//! language must compute exactly this function; `testdata/protocol/routing.json` pins it.

/// 64-bit FNV-1a: tiny, stable across platforms and languages, and good enough to spread pool names.
fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(PRIME))
}

/// A pinned pool name, `@N/rest`, names its shard explicitly: N in decimal, 1 to 5 digits. Pinning
/// lets an operator place a pool, and gives every shard pools it is sure to own (the RESP
/// listener's default pool on shard i is `@i/redis`).
fn pinned_shard(name: &str) -> Option<u64> {
    let rest = name.strip_prefix('@')?;
    let (digits, _) = rest.split_once('/')?;
    if digits.is_empty() || digits.len() > 5 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The index of the shard that owns the pool `name` on a server with `shard_count` shards: the
/// pinned shard N of a name `@N/rest` (modulo the shard count), otherwise FNV-1a of the name
/// modulo the shard count.
///
/// # Panics
/// If `shard_count` is zero: a server always has at least one shard.
pub fn shard_for_pool(name: &str, shard_count: u16) -> u16 {
    assert!(shard_count > 0, "a server has at least one shard");
    let position = pinned_shard(name).unwrap_or_else(|| fnv1a64(name.as_bytes()));
    (position % u64::from(shard_count)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_published_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn pinned_names_choose_their_shard() {
        assert_eq!(shard_for_pool("@0/redis", 4), 0);
        assert_eq!(shard_for_pool("@3/redis", 4), 3);
        assert_eq!(shard_for_pool("@5/x", 4), 1);
        // Not pinned: hashed like any other name.
        for name in ["@/x", "@a/x", "@123456/x", "@1", "x@1/y", "@-1/x"] {
            assert_eq!(shard_for_pool(name, 1000), (fnv1a64(name.as_bytes()) % 1000) as u16, "{name}");
        }
    }

    #[test]
    fn one_shard_owns_everything() {
        assert_eq!(shard_for_pool("anything", 1), 0);
    }
}
