//! What a replica keeps of its group's Raft state besides the log: the vote (durable before it
//! is answered), the last committed entry it knows of, the entries it purged, the cluster it
//! belongs to and its last memberships. One small file, `raft/STATE` in the shard's directory,
//! of two slots written in turn, so a write torn by a crash leaves the other slot whole:
//!
//! ```text
//! slot (at 0 and at SLOT_BYTES):
//!      0  4  magic "FRRS"
//!      4  2  format version (1)
//!      6  2  reserved
//!      8  4  CRC-32C of bytes 16..16+len
//!     12  4  len: bytes of the body
//!     16  .  body: u64 sequence (which slot is newer), then the fields of [`RaftState`]
//! ```

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::BufMut;

use super::types::{log_id, LogId, Membership, Vote};
use super::wire::{get_membership, get_option_log_id, get_vote, put_membership, put_option_log_id, put_vote, Reader};

const MAGIC: [u8; 4] = *b"FRRS";
const VERSION: u16 = 1;
const HEADER_BYTES: usize = 16;
/// Bytes of a slot: the header and the largest body (two memberships of the most members).
pub const SLOT_BYTES: usize = 64 << 10;
const NAME: &str = "STATE";

/// A replica's Raft state besides its log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RaftState {
    pub vote: Option<Vote>,
    /// The last entry known committed (not necessarily in this replica's log yet).
    pub committed: Option<LogId>,
    /// The last entry purged from the log (its state is in a snapshot).
    pub purged: Option<LogId>,
    /// The cluster this replica belongs to; empty until it learns it.
    pub cluster_id: String,
    /// The two last memberships applied, oldest first, each with the entry that carried it.
    pub memberships: Vec<(LogId, Membership)>,
    /// Set while the replica installs a snapshot whose last entry this is: a start that finds it
    /// set finishes the installation first (see `snapshot::finish_installing`).
    pub installing: Option<LogId>,
    /// The group's first entry (index 0: the membership it was initialized with, or a blank),
    /// which the log cannot hold.
    pub first_entry: Option<(LogId, Option<Membership>)>,
}

/// The state file of one replica.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    file: File,
    /// The sequence of the newest slot on disk.
    sequence: u64,
    state: RaftState,
}

impl StateFile {
    /// Opens (creating) the state file in `dir`, reading the newest whole slot.
    pub fn open(dir: &Path) -> std::io::Result<StateFile> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(NAME);
        let existed = path.exists();
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        if !existed {
            file.set_len(2 * SLOT_BYTES as u64)?;
            file.sync_all()?;
            File::open(dir)?.sync_all()?;
        }
        let mut newest: Option<(u64, RaftState)> = None;
        for slot in 0..2u64 {
            let mut bytes = vec![0u8; SLOT_BYTES];
            if file.read_exact_at(&mut bytes, slot * SLOT_BYTES as u64).is_err() {
                continue;
            }
            if let Some((sequence, state)) = decode_slot(&bytes) {
                if newest.as_ref().is_none_or(|(newest, _)| sequence > *newest) {
                    newest = Some((sequence, state));
                }
            }
        }
        let (sequence, state) = newest.unwrap_or_default();
        Ok(StateFile { path, file, sequence, state })
    }

    pub fn state(&self) -> &RaftState {
        &self.state
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `state` into the older slot and syncs it: durable when this returns.
    pub fn save(&mut self, state: RaftState) -> std::io::Result<()> {
        let sequence = self.sequence + 1;
        let slot = encode_slot(sequence, &state)?;
        self.file.write_all_at(&slot, (sequence % 2) * SLOT_BYTES as u64)?;
        self.file.sync_data()?;
        self.sequence = sequence;
        self.state = state;
        Ok(())
    }

    /// Changes the state with `change` and saves it.
    pub fn update(&mut self, change: impl FnOnce(&mut RaftState)) -> std::io::Result<()> {
        let mut state = self.state.clone();
        change(&mut state);
        self.save(state)
    }
}

fn encode_slot(sequence: u64, state: &RaftState) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    body.put_u64_le(sequence);
    match &state.vote {
        Some(vote) => {
            body.put_u8(1);
            put_vote(&mut body, vote);
        }
        None => body.put_u8(0),
    }
    put_option_log_id(&mut body, &state.committed);
    put_option_log_id(&mut body, &state.purged);
    super::wire::put_bytes(&mut body, state.cluster_id.as_bytes());
    body.put_u8(state.memberships.len() as u8);
    for (id, membership) in &state.memberships {
        body.put_u64_le(id.leader_id.term);
        body.put_u64_le(id.index);
        put_membership(&mut body, membership);
    }
    put_option_log_id(&mut body, &state.installing);
    match &state.first_entry {
        Some((id, membership)) => {
            body.put_u8(1);
            body.put_u64_le(id.leader_id.term);
            body.put_u64_le(id.index);
            body.put_u8(u8::from(membership.is_some()));
            if let Some(membership) = membership {
                put_membership(&mut body, membership);
            }
        }
        None => body.put_u8(0),
    }
    if HEADER_BYTES + body.len() > SLOT_BYTES {
        return Err(std::io::Error::other("the Raft state does not fit its slot"));
    }
    let mut slot = Vec::with_capacity(HEADER_BYTES + body.len());
    slot.put_slice(&MAGIC);
    slot.put_u16_le(VERSION);
    slot.put_u16_le(0);
    slot.put_u32_le(ferrite_store::checksum::crc32c(&body));
    slot.put_u32_le(body.len() as u32);
    slot.put_slice(&body);
    Ok(slot)
}

/// The slot's sequence and state, if it is a whole slot of this format.
fn decode_slot(bytes: &[u8]) -> Option<(u64, RaftState)> {
    if bytes.get(..4) != Some(&MAGIC[..]) || bytes.get(4..6) != Some(&VERSION.to_le_bytes()[..]) {
        return None;
    }
    let crc = u32::from_le_bytes(bytes.get(8..12)?.try_into().ok()?);
    let len = u32::from_le_bytes(bytes.get(12..16)?.try_into().ok()?) as usize;
    let body = bytes.get(HEADER_BYTES..HEADER_BYTES.checked_add(len)?)?;
    if ferrite_store::checksum::crc32c(body) != crc {
        return None;
    }
    let mut r = Reader::new(body);
    let sequence = r.u64().ok()?;
    let vote = if r.bool().ok()? { Some(get_vote(&mut r).ok()?) } else { None };
    let committed = get_option_log_id(&mut r).ok()?;
    let purged = get_option_log_id(&mut r).ok()?;
    let cluster_id = r.text(256).ok()?;
    let count = r.u8().ok()?;
    let mut memberships = Vec::new();
    for _ in 0..count.min(2) {
        let (term, index) = (r.u64().ok()?, r.u64().ok()?);
        memberships.push((log_id(term, index), get_membership(&mut r).ok()?));
    }
    let installing = get_option_log_id(&mut r).ok()?;
    let first_entry = if r.bool().ok()? {
        let (term, index) = (r.u64().ok()?, r.u64().ok()?);
        let membership = if r.bool().ok()? { Some(get_membership(&mut r).ok()?) } else { None };
        Some((log_id(term, index), membership))
    } else {
        None
    };
    r.finish().ok()?;
    Some((sequence, RaftState { vote, committed, purged, cluster_id, memberships, installing, first_entry }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::types::membership_of;

    fn dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ferrite-raft-state-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// What is saved is what the next open reads, through any number of saves; a slot torn by a
    /// crash leaves the other one, the state before that save.
    #[test]
    fn the_newest_whole_slot_wins() {
        let dir = dir("slots");
        let mut file = StateFile::open(&dir).expect("open");
        assert_eq!(file.state(), &RaftState::default(), "a new file holds nothing");
        let first = RaftState {
            vote: Some(Vote::new(3, 2)),
            committed: Some(log_id(3, 10)),
            purged: None,
            cluster_id: "c-1".into(),
            memberships: vec![(log_id(1, 1), membership_of(&[1, 2, 3]))],
            installing: Some(log_id(2, 7)),
            first_entry: Some((log_id(0, 0), Some(membership_of(&[1, 2])))),
        };
        file.save(first.clone()).expect("save");
        let second =
            RaftState { vote: Some(Vote::new_committed(4, 1)), committed: Some(log_id(4, 12)), ..first.clone() };
        file.save(second.clone()).expect("save");
        assert_eq!(StateFile::open(&dir).expect("reopen").state(), &second);
        // Tear the newer slot (the second save went to slot 0: sequence 2).
        let raw = OpenOptions::new().write(true).open(dir.join(NAME)).expect("open raw");
        raw.write_all_at(&[0xff; 32], 20).expect("tear");
        assert_eq!(StateFile::open(&dir).expect("reopen").state(), &first, "the older slot is whole");
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
