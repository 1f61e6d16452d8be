//! Snapshots of a replica: its last complete checkpoint plus the log tail that makes the
//! checkpoint's fuzzy pages consistent (the records from the checkpoint's replay point to the
//! snapshot's last entry). What a new or lagging replica installs, streamed over the network,
//! when the leader no longer holds the entries it needs.
//!
//! A snapshot is a directory `raft/snapshots/<index>` in the shard's directory:
//!
//! - `MANIFEST` and the page files it names: hard links to the checkpoint's own (checkpoint page
//!   files are immutable; the links keep them while the snapshot lives, whatever later
//!   checkpoints remove);
//! - `TAIL`: the log records from the checkpoint's replay point to the snapshot's last entry, each
//!   `u64 LSN, u32 length, payload`;
//! - `META`: the snapshot's last entry (term, index) and the membership as of it.
//!
//! Installing one replaces the replica's checkpoint with the snapshot's, starts its log over at
//! the checkpoint's replay point with the tail's records, and recovers its pools from those.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::BufMut;
use ferrite_store::persistence::ssd::checkpoint::{pages_name, sync_dir, write_in_log_pages, MANIFEST_NAME};
use ferrite_store::persistence::ssd::{
    load_shard_in_mode, recover_shard_in_mode, Checkpointer, Manifest, ReplayMode, ReplicaPools, ShardPaths,
};
use ferrite_store::persistence::wal::{read_range, FsStorage, Lsn, WalConfig, WalWriter};

use super::replication::record_of;
use super::state_file::{RaftState, StateFile};
use super::types::{LogId, StoredMembership, C};
use super::wire::{
    get_log_id, get_membership, get_option_log_id, put_log_id, put_membership, put_option_log_id, Reader,
};
use crate::handler::ShardState;

type SnapshotOf = openraft::type_config::alias::SnapshotOf<C, SnapshotFiles>;
type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<C>;

const TAIL_NAME: &str = "TAIL";
/// The entries a replica's log held after a snapshot it installs, kept while it installs it.
const KEPT_NAME: &str = "KEPT";
/// The snapshots' directory, in the replica's Raft directory.
const SNAPSHOTS: &str = "snapshots";
const META_NAME: &str = "META";

/// A snapshot's files, in a directory of their own.
#[derive(Debug, Clone)]
pub struct SnapshotFiles {
    pub dir: PathBuf,
}

impl SnapshotFiles {
    /// Every file of the snapshot, by name, for sending.
    pub fn files(&self) -> io::Result<Vec<String>> {
        let mut names: Vec<String> = std::fs::read_dir(&self.dir)?
            .filter_map(Result::ok)
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }
}

/// The snapshots of one replica: where they are made, and the last one made or installed.
#[derive(Debug, Clone)]
pub(crate) struct SnapshotStore {
    root: PathBuf,
    current: Rc<RefCell<Option<(SnapshotMeta, SnapshotFiles)>>>,
}

impl SnapshotStore {
    /// The store under `raft_dir`, with the last snapshot found there (if it is whole).
    pub fn open(raft_dir: &Path) -> io::Result<SnapshotStore> {
        let root = raft_dir.join(SNAPSHOTS);
        std::fs::create_dir_all(&root)?;
        let mut made: Vec<(u64, PathBuf)> = Vec::new();
        for entry in std::fs::read_dir(&root)?.filter_map(Result::ok) {
            match entry.file_name().to_string_lossy().parse::<u64>() {
                Ok(index) => made.push((index, entry.path())),
                // Half-made and half-received snapshots.
                Err(_) => drop(std::fs::remove_dir_all(entry.path())),
            }
        }
        made.sort();
        let newest = made.pop();
        for (_, older) in made {
            let _ = std::fs::remove_dir_all(older);
        }
        let current = match newest {
            Some((_, dir)) => read_meta(&dir).ok().map(|meta| (meta, SnapshotFiles { dir })),
            None => None,
        };
        Ok(SnapshotStore { root, current: Rc::new(RefCell::new(current)) })
    }

    pub fn current(&self) -> Option<SnapshotOf> {
        self.current.borrow().as_ref().map(|(meta, files)| SnapshotOf { meta: meta.clone(), snapshot: files.clone() })
    }

    /// Where a snapshot being received is written.
    pub fn incoming_dir(&self, tag: &str) -> PathBuf {
        self.root.join(format!("incoming-{tag}"))
    }

    /// Makes a snapshot of the shard's last complete checkpoint and the log after it, up to the
    /// last entry the replica applied (once the log holds it durably). The committed position
    /// is saved first, so that a restart recovers at least as far as the snapshot reaches: a
    /// replica never installs its own snapshot.
    pub async fn build(
        &self,
        shard: &Rc<RefCell<ShardState>>,
        paths: &ShardPaths,
        membership: StoredMembership,
    ) -> io::Result<SnapshotOf> {
        let log = {
            let state = shard.borrow();
            state.durability.as_ref().ok_or_else(|| io::Error::other("no log"))?.log.clone()
        };
        super::log_store::quiet(&log).await?;
        // No checkpoint may complete while the snapshot copies this one: it would recycle the
        // log segments held for the pages this one keeps in the log.
        let held = CheckpointsHeld::wait(shard).await?;
        let (manifest, last) = {
            let mut state = shard.borrow_mut();
            let durability = state.durability.as_ref().ok_or_else(|| io::Error::other("no log"))?;
            let (manifest, durable) = (durability.checkpointer.manifest().clone(), durability.log.durable_lsn());
            let replication = state.replication.as_mut().ok_or_else(|| io::Error::other("no replica"))?;
            replication.save_committed(durable)?;
            (manifest, replication.applied)
        };
        let last_index = last.map_or(0, |id| id.index);
        if last_index + 1 < manifest.replay_from {
            return Err(io::Error::other("the checkpoint is ahead of what the replica applied"));
        }
        let membership = last.and_then(|last| membership_as_of(shard, last)).unwrap_or(membership);
        let meta = SnapshotMeta { last_log_id: last, last_membership: membership };
        let root = self.root.clone();
        let checkpoint = paths.checkpoint.clone();
        let wal = paths.wal.clone();
        let meta_bytes = encode_meta(&meta);
        let dir = tokio::task::spawn_blocking(move || {
            write_snapshot(&root, &checkpoint, &wal, &manifest, last_index, &meta_bytes)
        })
        .await
        .map_err(io::Error::other)??;
        drop(held);
        let files = SnapshotFiles { dir };
        self.replace_current(meta.clone(), files.clone());
        Ok(SnapshotOf { meta, snapshot: files })
    }

    /// Makes `files` the current snapshot, removing the one it replaces (a send that still
    /// reads it has its files open).
    fn replace_current(&self, meta: SnapshotMeta, files: SnapshotFiles) {
        let old = self.current.borrow_mut().replace((meta, files.clone()));
        if let Some((_, old)) = old.filter(|(_, old)| old.dir != files.dir) {
            let _ = std::fs::remove_dir_all(old.dir);
        }
    }

    /// Replaces the replica's state with the snapshot in `files` (received from the leader):
    /// its checkpoint, its log (started over at the checkpoint's replay point with the tail's
    /// records), and its pools, recovered from them.
    ///
    /// The snapshot is first moved where a restart finds it and the state file says it is being
    /// installed: the checkpoint and the log are replaced one after the other, and a crash in
    /// between would leave a checkpoint with the wrong log. A start that finds the mark finishes
    /// the installation from the snapshot before it recovers anything
    /// ([`finish_installing`]).
    pub async fn install(
        &self,
        shard: &Rc<RefCell<ShardState>>,
        meta: &SnapshotMeta,
        files: SnapshotFiles,
    ) -> io::Result<()> {
        let last = meta.last_log_id.ok_or_else(|| io::Error::other("a snapshot of nothing"))?;
        let manifest = Manifest::read(&files.dir).map_err(io::Error::other)?.unwrap_or_default();
        let tail = read_records(&files.dir.join(TAIL_NAME))?;
        check_tail(&tail, manifest.replay_from.max(1), last.index)?;
        let installing = self.root.join(INSTALLING);
        let _ = std::fs::remove_dir_all(&installing);
        std::fs::rename(&files.dir, &installing)?;
        sync_dir(&self.root)?;
        let _held = CheckpointsHeld::wait(shard).await?;
        let (paths, log) = {
            let state = shard.borrow();
            let durability = state.durability.as_ref().ok_or_else(|| io::Error::other("no log"))?;
            (durability.paths.clone(), durability.log.clone())
        };
        super::log_store::quiet(&log).await?;
        // Entries the log holds after the snapshot's last stay, if the log holds that last entry
        // (Raft keeps them then): kept with the snapshot, as the log is about to start over.
        let kept = {
            let state = shard.borrow();
            let replication = state.replication.as_ref().ok_or_else(|| io::Error::other("no replica"))?;
            let held = replication.read(last.index, last.index + 1)?.first().map(|entry| entry.log_id);
            if held == Some(last) {
                replication.read(last.index + 1, Lsn::MAX)?
            } else {
                Vec::new()
            }
        };
        let kept_records: Vec<(Lsn, Vec<u8>)> =
            kept.iter().map(|entry| Ok((entry.log_id.index, record_of(entry)?))).collect::<io::Result<_>>()?;
        write_records(&installing.join(KEPT_NAME), &kept_records)?;
        if let Some(replication) = shard.borrow_mut().replication.as_mut() {
            replication.state.update(|state| state.installing = Some(last))?;
        }
        // The log starts over at the checkpoint's replay point with the tail's records, then the
        // kept ones.
        log.restart_at(manifest.replay_from.max(1)).map_err(io::Error::other)?;
        for (lsn, payload) in tail {
            log.append_entry(lsn, &payload).map_err(io::Error::other)?;
        }
        for (lsn, payload) in &kept_records {
            log.append_entry(*lsn, payload).map_err(io::Error::other)?;
        }
        super::log_store::quiet(&log).await?;
        // The checkpoint: the snapshot's files replace the replica's.
        let checkpoint = paths.checkpoint.clone();
        let from = installing.clone();
        let installed = manifest.clone();
        tokio::task::spawn_blocking(move || replace_checkpoint(&checkpoint, &from, &installed))
            .await
            .map_err(io::Error::other)??;
        // The pools, recovered from them.
        let loaded = {
            let paths = paths.clone();
            tokio::task::spawn_blocking(move || {
                load_shard_in_mode(&paths, ReplayMode::Replicated { until: last.index }, &mut |_| {})
            })
            .await
            .map_err(io::Error::other)?
            .map_err(io::Error::other)?
        };
        let mut state = shard.borrow_mut();
        if let Some(durability) = state.durability.as_mut() {
            durability.checkpointer = Checkpointer::new(paths.checkpoint.clone(), loaded.manifest.clone());
            durability.set_committed(last.index);
        }
        let replication = state.replication.as_mut().ok_or_else(|| io::Error::other("no replica"))?;
        replication.state.update(|state| installed_state(state, last))?;
        replication.replica = Some(ReplicaPools::new(loaded.pools, loaded.next_pool_id));
        replication.installed(last, meta.last_membership.clone(), kept);
        drop(state);
        // Kept as this replica's own snapshot: another lagging replica may need it later.
        let own = self.root.join(last.index.to_string());
        let _ = std::fs::remove_dir_all(&own);
        std::fs::rename(&installing, &own)?;
        self.replace_current(meta.clone(), SnapshotFiles { dir: own });
        Ok(())
    }
}

/// Where a snapshot being installed is kept, in the snapshots' directory.
const INSTALLING: &str = "installing";

/// How often an installation looks whether the checkpoint or backup it waits for is done.
const HELD_POLL: std::time::Duration = std::time::Duration::from_millis(10);

/// Checkpoints (and backups) held off while a snapshot replaces the checkpoint and the log (one
/// running would write page files and a manifest over the snapshot's, or copy half of each), or
/// while a snapshot is made of the checkpoint (one completing would recycle the log segments its
/// large values are read from).
struct CheckpointsHeld {
    shard: Rc<RefCell<ShardState>>,
}

impl CheckpointsHeld {
    /// Waits until no checkpoint or backup runs, then holds them off until dropped.
    async fn wait(shard: &Rc<RefCell<ShardState>>) -> io::Result<CheckpointsHeld> {
        loop {
            {
                let mut state = shard.borrow_mut();
                let durability = state.durability.as_mut().ok_or_else(|| io::Error::other("no log"))?;
                if !durability.checkpoints_held() {
                    durability.installing = true;
                    return Ok(CheckpointsHeld { shard: Rc::clone(shard) });
                }
            }
            tokio::time::sleep(HELD_POLL).await;
        }
    }
}

impl Drop for CheckpointsHeld {
    fn drop(&mut self) {
        if let Some(durability) = self.shard.borrow_mut().durability.as_mut() {
            durability.installing = false;
        }
    }
}

/// The state file's record of an installed snapshot whose last entry is `last`: its state is
/// committed, and the log holds nothing before it a replica may read.
fn installed_state(state: &mut RaftState, last: LogId) {
    state.installing = None;
    state.committed = state.committed.max(Some(last));
    state.purged = state.purged.max(Some(last));
}

/// Finishes the installation of a snapshot a crash interrupted (the state file marks it), before
/// the shard is recovered: the snapshot's checkpoint replaces the shard's, and its log starts
/// over at the checkpoint's replay point with the snapshot's tail, exactly as the interrupted
/// installation would have left them. Does nothing if no installation was interrupted.
pub(crate) fn finish_installing(state: &mut StateFile, paths: &ShardPaths, wal_config: WalConfig) -> io::Result<()> {
    let Some(last) = state.state().installing else { return Ok(()) };
    let raft_dir = state.path().parent().map(Path::to_path_buf).unwrap_or_default();
    let snapshot = raft_dir.join(SNAPSHOTS).join(INSTALLING);
    let manifest = Manifest::read(&snapshot).map_err(io::Error::other)?.unwrap_or_default();
    tracing::warn!(last = last.index, "finishing the installation of a snapshot a stop interrupted");
    replace_checkpoint(&paths.checkpoint, &snapshot, &manifest)?;
    // The log: emptied, then started over at the snapshot's first record.
    for entry in std::fs::read_dir(&paths.wal)?.filter_map(Result::ok) {
        if entry.path().is_file() {
            std::fs::remove_file(entry.path())?;
        }
    }
    sync_dir(&paths.wal)?;
    let recovered =
        recover_shard_in_mode(paths, wal_config, ReplayMode::Replicated { until: 0 }).map_err(io::Error::other)?;
    let mut writer = recovered.writer;
    writer.restart_at(manifest.replay_from.max(1)).map_err(io::Error::other)?;
    let append = |writer: &mut WalWriter<FsStorage>, records: Vec<(Lsn, Vec<u8>)>| -> io::Result<()> {
        for (lsn, payload) in records {
            let appended = writer.append(&payload).map_err(io::Error::other)?;
            if appended != lsn {
                return Err(io::Error::other(format!(
                    "the snapshot holds record {lsn} where the log is at {appended}"
                )));
            }
        }
        writer.commit().map_err(io::Error::other).map(drop)
    };
    append(&mut writer, read_records(&snapshot.join(TAIL_NAME))?)?;
    let kept = snapshot.join(KEPT_NAME);
    append(&mut writer, if kept.exists() { read_records(&kept)? } else { Vec::new() })?;
    drop(writer);
    state.update(|state| installed_state(state, last))?;
    let own = raft_dir.join(SNAPSHOTS).join(last.index.to_string());
    let _ = std::fs::remove_dir_all(&own);
    std::fs::rename(&snapshot, &own)
}

/// The membership the replica applied as of entry `last`, from the two it keeps.
fn membership_as_of(shard: &Rc<RefCell<ShardState>>, last: LogId) -> Option<StoredMembership> {
    let state = shard.borrow();
    let replication = state.replication.as_ref()?;
    replication
        .state
        .state()
        .memberships
        .iter()
        .rev()
        .find(|(id, _)| id.index <= last.index)
        .map(|(id, membership)| StoredMembership::new(Some(*id), membership.clone()))
}

fn write_snapshot(
    root: &Path,
    checkpoint: &Path,
    wal: &Path,
    manifest: &Manifest,
    last: Lsn,
    meta: &[u8],
) -> io::Result<PathBuf> {
    let temp = root.join(format!("{last}.tmp"));
    let _ = std::fs::remove_dir_all(&temp);
    std::fs::create_dir_all(&temp)?;
    for pool in &manifest.pools {
        for seq in &pool.chain {
            let name = pages_name(pool.descriptor.id, *seq);
            std::fs::hard_link(checkpoint.join(&name), temp.join(&name))?;
        }
    }
    let storage = FsStorage::open_dir(wal)?;
    if checkpoint.join(MANIFEST_NAME).exists() {
        standalone(manifest, &temp, &storage)?.write(&temp).map_err(io::Error::other)?;
    }
    let mut tail = std::io::BufWriter::new(File::create(temp.join(TAIL_NAME))?);
    let mut failed = None;
    read_range(&storage, manifest.replay_from.max(1), last, |lsn, payload| {
        if failed.is_none() {
            let mut header = Vec::with_capacity(12);
            header.put_u64_le(lsn);
            header.put_u32_le(payload.len() as u32);
            if let Err(error) = tail.write_all(&header).and_then(|()| tail.write_all(payload)) {
                failed = Some(error);
            }
        }
    })
    .map_err(io::Error::other)?;
    if let Some(error) = failed {
        return Err(error);
    }
    tail.into_inner().map_err(io::Error::other)?.sync_all()?;
    let mut meta_file = File::create(temp.join(META_NAME))?;
    meta_file.write_all(meta)?;
    meta_file.sync_all()?;
    sync_dir(&temp)?;
    let dir = root.join(last.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&temp, &dir)?;
    sync_dir(root)?;
    Ok(dir)
}

/// `manifest` as a snapshot in `dir` holds it: the pages its checkpoint keeps in the log (large
/// values, in segments the log holds for it) are written into one more page file of each pool,
/// read from `log`, as a snapshot must stand on its own where it is installed.
fn standalone(manifest: &Manifest, dir: &Path, log: &FsStorage) -> io::Result<Manifest> {
    let mut copy = manifest.clone();
    let next_seq = manifest.pools.iter().flat_map(|pool| pool.chain.iter().copied()).max().unwrap_or(0) + 1;
    for pool in copy.pools.iter_mut().filter(|pool| !pool.in_log.is_empty()) {
        write_in_log_pages(dir, log, pool, next_seq).map_err(io::Error::other)?;
        pool.chain.push(next_seq);
        pool.in_log.clear();
    }
    Ok(copy)
}

/// Checks that a snapshot's tail holds exactly the records from its checkpoint's replay point
/// `from` to its last entry `last`, in order: what makes its fuzzy checkpoint whole.
fn check_tail(tail: &[(Lsn, Vec<u8>)], from: Lsn, last: Lsn) -> io::Result<()> {
    let expected = from..=last;
    let whole = tail.len() as u64 == last.saturating_add(1).saturating_sub(from)
        && tail.iter().zip(expected).all(|((lsn, _), wanted)| *lsn == wanted);
    if whole {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "a snapshot whose log tail does not hold records {from} to {last}: it cannot make its checkpoint whole"
        )))
    }
}

/// Writes `records` (LSN and payload each) to a new file at `path`, synced.
fn write_records(path: &Path, records: &[(Lsn, Vec<u8>)]) -> io::Result<()> {
    let mut out = std::io::BufWriter::new(File::create(path)?);
    for (lsn, payload) in records {
        out.write_all(&lsn.to_le_bytes())?;
        out.write_all(&(payload.len() as u32).to_le_bytes())?;
        out.write_all(payload)?;
    }
    out.into_inner().map_err(io::Error::other)?.sync_all()?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// The records of a file [`write_records`] wrote (or a snapshot's tail), in order.
fn read_records(path: &Path) -> io::Result<Vec<(Lsn, Vec<u8>)>> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let mut records = Vec::new();
    let mut r = Reader::new(&bytes);
    let bad = |_| io::Error::other("the snapshot's log tail is damaged");
    while !r.is_empty() {
        let lsn = r.u64().map_err(bad)?;
        let len = r.u32().map_err(bad)? as usize;
        let payload = r.raw(len).map_err(bad)?;
        records.push((lsn, payload.to_vec()));
    }
    Ok(records)
}

/// Replaces the checkpoint in `checkpoint` by the one in `from` (its page files and manifest),
/// the manifest last, so a crash meanwhile leaves the old manifest (whose files are kept until
/// then) or the new one whole.
fn replace_checkpoint(checkpoint: &Path, from: &Path, manifest: &Manifest) -> io::Result<()> {
    for pool in &manifest.pools {
        for seq in &pool.chain {
            let name = pages_name(pool.descriptor.id, *seq);
            // Another node's page files may share a name with this replica's: the snapshot's
            // replace them (an installation the manifest does not yet name is finished from the
            // snapshot after a crash, see `finish_installing`).
            let target = checkpoint.join(&name);
            match std::fs::remove_file(&target) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                Err(error) => return Err(error),
            }
            std::fs::hard_link(from.join(&name), &target)?;
        }
    }
    sync_dir(checkpoint)?;
    manifest.write(checkpoint).map_err(io::Error::other)?;
    let kept: std::collections::HashSet<String> = manifest
        .pools
        .iter()
        .flat_map(|pool| pool.chain.iter().map(move |seq| pages_name(pool.descriptor.id, *seq)))
        .collect();
    for entry in std::fs::read_dir(checkpoint)?.filter_map(Result::ok) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".pages") && !kept.contains(&name) {
            std::fs::remove_file(entry.path())?;
        }
    }
    sync_dir(checkpoint)
}

fn encode_meta(meta: &SnapshotMeta) -> Vec<u8> {
    let mut out = Vec::new();
    put_option_log_id(&mut out, &meta.last_log_id);
    match meta.last_membership.log_id() {
        Some(id) => {
            out.put_u8(1);
            put_log_id(&mut out, id);
        }
        None => out.put_u8(0),
    }
    put_membership(&mut out, meta.last_membership.membership());
    out
}

fn read_meta(dir: &Path) -> io::Result<SnapshotMeta> {
    let mut bytes = Vec::new();
    File::open(dir.join(META_NAME))?.read_to_end(&mut bytes)?;
    decode_meta(&bytes)
}

pub fn decode_meta(bytes: &[u8]) -> io::Result<SnapshotMeta> {
    let bad = |_| io::Error::other("a snapshot's META is damaged");
    let mut r = Reader::new(bytes);
    let last = get_option_log_id(&mut r).map_err(bad)?;
    let membership_id = if r.bool().map_err(bad)? { Some(get_log_id(&mut r).map_err(bad)?) } else { None };
    let membership = get_membership(&mut r).map_err(bad)?;
    r.finish().map_err(bad)?;
    Ok(SnapshotMeta { last_log_id: last, last_membership: StoredMembership::new(membership_id, membership) })
}

pub fn encode_snapshot_meta(meta: &SnapshotMeta) -> Vec<u8> {
    encode_meta(meta)
}
