//! Redis Cluster's key space on Ferrite: 16,384 hash slots, a key's slot (the CRC16 of its hash
//! tag, or of the whole key), the fixed range of slots each group (shard index) owns, and where a
//! slot is served.
//!
//! A group owns `[g × 16384 / S, (g + 1) × 16384 / S)` of S groups: slots never move between
//! groups (the group's pool holds their keys), so there is no resharding and no `ASK`.

use std::ops::Range;

use crate::cluster::view::ClusterView;

use super::topology;

/// Slots in the key space.
pub(crate) const SLOTS: u16 = 16_384;

/// CRC16-XMODEM (polynomial 0x1021, initial value 0, no reflection), Redis's key hash, one byte at
/// a time.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = (byte as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
};

fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0, |crc, &byte| (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ byte)])
}

/// The part of `key` that decides its slot: between its first `{` and the first `}` after that,
/// if there is something between them; otherwise the whole key (Redis's rule, which lets a
/// client keep related keys in one slot: `user:{42}:name`, `user:{42}:mail`).
fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|&byte| byte == b'{') {
        let rest = &key[open + 1..];
        if let Some(close) = rest.iter().position(|&byte| byte == b'}') {
            if close > 0 {
                return &rest[..close];
            }
        }
    }
    key
}

/// The slot of `key`.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    crc16(hash_tag(key)) & (SLOTS - 1)
}

/// The slots group `group` of `groups` owns: never empty for a group of at most 16,384 (empty past
/// the last group).
pub(crate) fn slot_range(group: usize, groups: usize) -> Range<u16> {
    let start = |g: usize| (g.min(groups) * usize::from(SLOTS)).checked_div(groups).map_or(SLOTS, |start| start as u16);
    start(group)..start(group + 1)
}

/// The group of `groups` (at least one) that owns `slot`: the last whose range starts at or before
/// it, `((slot + 1) × groups − 1) / 16384`.
pub(crate) fn group_of(slot: u16, groups: usize) -> usize {
    debug_assert!(groups > 0 && slot < SLOTS);
    ((usize::from(slot) + 1) * groups - 1) / usize::from(SLOTS)
}

/// Where a command on a slot is answered.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Serving {
    /// On this connection.
    Here,
    /// At the `host:port` of the RESP listener of the slot group's leader.
    Elsewhere(String),
    /// Nowhere now: the group has no known leader (an election, or a cluster not yet
    /// initialized), or its leader serves no RESP.
    Down,
}

/// Where a command on `slot` is answered, asked of the RESP listener of this node's replica of
/// `group`: here if this replica leads the slot's group and may answer now, or if `local_read`
/// (a read on a `READONLY` connection) and this node is a member of the slot's group; otherwise at
/// the group's leader. A leader that may not answer now (its lease is not yet established) is
/// reported down: sending the client back to it would only loop.
pub(crate) fn serving(view: &ClusterView, group: usize, slot: u16) -> Serving {
    if view.groups.is_empty() {
        return Serving::Down;
    }
    let owner = group_of(slot, view.groups.len());
    let owning = &view.groups[owner];
    if owner == group {
        if owning.leads_here {
            return Serving::Here;
        }
        if owning.leader == Some(view.node_id) {
            return Serving::Down;
        }
    }
    match view.leader_of(owner).and_then(|leader| topology::endpoint(leader, owner)) {
        Some((host, port)) => Serving::Elsewhere(format!("{host}:{port}")),
        None => Serving::Down,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis's own vectors (`cluster.h`, `crc16.c`): the check value of the CRC, plain keys, and
    /// the hash tag rules (an empty tag hashes the whole key; only the first `{` counts).
    #[test]
    fn keys_hash_to_redis_slots() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"foo{}{bar}"), 8363);
        assert_eq!(key_slot(b"foo{{bar}}zap"), 4015);
        assert_eq!(key_slot(b"foo{bar}{zap}"), 5061);
        assert_eq!(key_slot(b"{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"{user1000}.followers"));
        assert_eq!(key_slot(b""), 0);
        assert_eq!(key_slot(b"{"), key_slot(b"{"), "an unclosed brace is part of the key");
    }

    /// Every slot belongs to exactly the group whose range holds it, for any group count, and the
    /// ranges cover the key space in order.
    #[test]
    fn groups_own_consecutive_ranges_covering_every_slot() {
        for groups in [1, 2, 3, 5, 7, 16, 64, 255] {
            let mut next = 0;
            for group in 0..groups {
                let range = slot_range(group, groups);
                assert_eq!(range.start, next, "{groups} groups: group {group} starts where the last ended");
                for slot in range.clone() {
                    assert_eq!(group_of(slot, groups), group, "{groups} groups, slot {slot}");
                }
                next = range.end;
            }
            assert_eq!(next, SLOTS);
            assert!(slot_range(groups, groups).is_empty());
        }
        assert_eq!(slot_range(0, 2), 0..8192);
        assert_eq!(slot_range(1, 3), 5461..10922);
    }
}
