//! A simulated disk for crash tests: it keeps each file's durable image (what survives a power
//! cut) apart from its live image, records every sector written since its file was last synced,
//! and can fail writes, syncs or file creation on demand.
//!
//! A power cut ([`SimStorage::crash`]) keeps the durable images plus any subset of the unsynced
//! sector writes, not only a prefix: a device may persist the pages of one write or of one commit
//! in any order. Each kept sector may also be torn (only its first bytes reach the medium). A
//! sector written twice since the last sync has two versions; each version is kept or dropped on
//! its own, and of those kept the latest wins.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::storage::{LogStorage, SegmentFile};

/// The unit a device persists or loses on its own.
pub(crate) const SECTOR_BYTES: usize = 512;

#[derive(Debug, Clone, Default)]
struct SimFile {
    durable: Vec<u8>,
    live: Vec<u8>,
}

/// One sector's content after a write that touched it, not yet covered by a sync.
#[derive(Debug, Clone)]
struct UnsyncedSector {
    file: u64,
    /// Byte offset of the sector in its file.
    offset: usize,
    bytes: Vec<u8>,
}

/// Files are kept by a stable id and names map to ids, so an open handle survives a rename as it
/// does on a real file system.
#[derive(Debug, Default)]
struct Disk {
    files: BTreeMap<u64, SimFile>,
    names: BTreeMap<String, u64>,
    next_id: u64,
    /// Sector versions written since their file was last synced, in the order written.
    unsynced: Vec<UnsyncedSector>,
    /// Fail every write once this many more have succeeded.
    writes_left: Option<u64>,
    /// Fail every sync once this many more have succeeded.
    syncs_left: Option<u64>,
    /// Refuse to create files, as a full device does.
    full: bool,
}

/// What a power cut keeps of the unsynced sector writes (indexes into their list, in the order
/// they were written).
#[derive(Debug, Clone, Default)]
pub(crate) struct Cut {
    /// Per unsynced sector write: whether it reached the medium. Missing entries count as lost.
    pub keep: Vec<bool>,
    /// A kept sector write that was torn: only its first `.1` bytes reached the medium.
    pub tear: Option<(usize, usize)>,
}

impl Cut {
    /// The first `kept` sector writes reach the medium, the last of them torn at `torn_at` bytes
    /// if given: the cuts a device that persists in order could leave.
    pub(crate) fn prefix(kept: usize, torn_at: Option<usize>) -> Cut {
        Cut { keep: vec![true; kept], tear: torn_at.filter(|_| kept > 0).map(|at| (kept - 1, at)) }
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct SimStorage {
    disk: Arc<Mutex<Disk>>,
}

#[derive(Debug)]
pub(crate) struct SimSegment {
    disk: Arc<Mutex<Disk>>,
    id: u64,
}

fn lock(disk: &Mutex<Disk>) -> MutexGuard<'_, Disk> {
    disk.lock().expect("a test thread panicked while holding the simulated disk")
}

fn take_one(budget: &mut Option<u64>, what: &str) -> io::Result<()> {
    match budget {
        Some(0) => Err(io::Error::other(format!("injected {what} failure"))),
        Some(left) => {
            *left -= 1;
            Ok(())
        }
        None => Ok(()),
    }
}

fn not_found() -> io::Error {
    io::Error::from(io::ErrorKind::NotFound)
}

impl SimStorage {
    pub(crate) fn fail_writes_after(&self, writes: u64) {
        lock(&self.disk).writes_left = Some(writes);
    }

    pub(crate) fn fail_syncs_after(&self, syncs: u64) {
        lock(&self.disk).syncs_left = Some(syncs);
    }

    pub(crate) fn set_full(&self, full: bool) {
        lock(&self.disk).full = full;
    }

    /// How many sector writes are not yet covered by a sync.
    pub(crate) fn unsynced_sectors(&self) -> usize {
        lock(&self.disk).unsynced.len()
    }

    /// Bytes of the `index`-th unsynced sector write (the last sector of a file may be short).
    pub(crate) fn unsynced_sector_len(&self, index: usize) -> usize {
        lock(&self.disk).unsynced.get(index).map_or(0, |sector| sector.bytes.len())
    }

    /// The disk after a power cut that kept what `cut` says of the unsynced sector writes.
    pub(crate) fn crash(&self, cut: &Cut) -> SimStorage {
        let disk = lock(&self.disk);
        let mut files: BTreeMap<u64, SimFile> = disk
            .files
            .iter()
            .map(|(id, file)| (*id, SimFile { durable: file.durable.clone(), live: file.durable.clone() }))
            .collect();
        for (index, sector) in disk.unsynced.iter().enumerate() {
            if !cut.keep.get(index).copied().unwrap_or(false) {
                continue;
            }
            let bytes = match cut.tear {
                Some((torn, at)) if torn == index => &sector.bytes[..at.min(sector.bytes.len())],
                _ => &sector.bytes[..],
            };
            if let Some(file) = files.get_mut(&sector.file) {
                file.durable[sector.offset..sector.offset + bytes.len()].copy_from_slice(bytes);
            }
        }
        for file in files.values_mut() {
            file.live.clone_from(&file.durable);
        }
        let after = Disk { files, names: disk.names.clone(), next_id: disk.next_id, ..Disk::default() };
        SimStorage { disk: Arc::new(Mutex::new(after)) }
    }

    /// Flips one bit of a file's durable and live images: damage of the kind a checksum catches.
    pub(crate) fn corrupt(&self, name: &str, offset: u64) {
        let mut disk = lock(&self.disk);
        let id = disk.names[name];
        let file = disk.files.get_mut(&id).expect("every name maps to a file");
        file.durable[offset as usize] ^= 0x10;
        file.live[offset as usize] ^= 0x10;
    }

    /// A copy of a file's live bytes.
    pub(crate) fn read_file(&self, name: &str) -> Vec<u8> {
        let disk = lock(&self.disk);
        disk.files[&disk.names[name]].live.clone()
    }
}

impl SegmentFile for SimSegment {
    fn read_exact_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let disk = lock(&self.disk);
        let file = disk.files.get(&self.id).ok_or_else(not_found)?;
        let start = offset as usize;
        let bytes =
            file.live.get(start..start + buf.len()).ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(bytes);
        Ok(())
    }

    fn write_all_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        take_one(&mut disk.writes_left, "write")?;
        let file = disk.files.get_mut(&self.id).ok_or_else(not_found)?;
        let start = offset as usize;
        let end = start + data.len();
        if end > file.live.len() {
            file.live.resize(end, 0);
            file.durable.resize(end, 0);
        }
        file.live[start..end].copy_from_slice(data);
        let first = start / SECTOR_BYTES * SECTOR_BYTES;
        let sectors: Vec<UnsyncedSector> = (first..end)
            .step_by(SECTOR_BYTES)
            .map(|at| UnsyncedSector {
                file: self.id,
                offset: at,
                bytes: file.live[at..(at + SECTOR_BYTES).min(file.live.len())].to_vec(),
            })
            .collect();
        disk.unsynced.extend(sectors);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        take_one(&mut disk.syncs_left, "sync")?;
        let file = disk.files.get_mut(&self.id).ok_or_else(not_found)?;
        file.durable.clone_from(&file.live);
        let id = self.id;
        disk.unsynced.retain(|sector| sector.file != id);
        Ok(())
    }

    fn size_bytes(&self) -> io::Result<u64> {
        lock(&self.disk).files.get(&self.id).map(|file| file.live.len() as u64).ok_or_else(not_found)
    }
}

impl LogStorage for SimStorage {
    type File = SimSegment;

    fn list(&self) -> io::Result<Vec<String>> {
        Ok(lock(&self.disk).names.keys().cloned().collect())
    }

    fn open(&self, name: &str) -> io::Result<SimSegment> {
        let id = *lock(&self.disk).names.get(name).ok_or_else(not_found)?;
        Ok(SimSegment { disk: Arc::clone(&self.disk), id })
    }

    fn create(&self, name: &str, len: u64) -> io::Result<SimSegment> {
        let mut disk = lock(&self.disk);
        if disk.full {
            return Err(io::Error::from(io::ErrorKind::StorageFull));
        }
        if disk.names.contains_key(name) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        let id = disk.next_id;
        disk.next_id += 1;
        let zeros = vec![0u8; len as usize];
        disk.files.insert(id, SimFile { durable: zeros.clone(), live: zeros });
        disk.names.insert(name.to_string(), id);
        Ok(SimSegment { disk: Arc::clone(&self.disk), id })
    }

    fn create_written(&self, name: &str, len: u64) -> io::Result<SimSegment> {
        self.create(name, len)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        let id = disk.names.remove(name).ok_or_else(not_found)?;
        disk.files.remove(&id);
        Ok(())
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        let id = disk.names.remove(from).ok_or_else(not_found)?;
        disk.names.insert(to.to_string(), id);
        Ok(())
    }
}

/// Tear positions tried in each torn sector: its edges, record-header boundaries, the middle.
const TEARS: [usize; 8] = [0, 1, 8, 31, 32, 100, 256, 511];

/// Every cut worth trying of what `storage` holds unsynced: each prefix of the sector writes (a
/// device that persists in order), the last kept one torn at a few places; and, since a device
/// may persist a commit's sectors in any order, all but one, only one, and all with one torn.
pub(crate) fn power_cuts(storage: &SimStorage) -> Vec<(Cut, String)> {
    let sectors = storage.unsynced_sectors();
    let mut cuts = Vec::new();
    for kept in 0..=sectors {
        cuts.push((Cut::prefix(kept, None), format!("first {kept} sectors kept")));
        if kept > 0 {
            let len = storage.unsynced_sector_len(kept - 1);
            for at in TEARS.iter().filter(|at| **at < len) {
                cuts.push((Cut::prefix(kept, Some(*at)), format!("first {kept} sectors kept, the last torn at {at}")));
            }
        }
    }
    for chosen in 0..sectors {
        let all_but = Cut { keep: (0..sectors).map(|i| i != chosen).collect(), tear: None };
        cuts.push((all_but, format!("all sectors but {chosen}")));
        let only = Cut { keep: (0..sectors).map(|i| i == chosen).collect(), tear: None };
        cuts.push((only, format!("only sector {chosen}")));
        let torn = Cut { keep: vec![true; sectors], tear: Some((chosen, 40)) };
        cuts.push((torn, format!("all sectors, {chosen} torn")));
    }
    cuts
}
