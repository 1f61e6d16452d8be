//! A simulated disk for crash tests: it keeps each file's durable image (what survives a power
//! cut) apart from its live image, records the writes made since the last sync, and can fail
//! writes, syncs or file creation on demand. `crash` builds the disk as a power cut would leave
//! it: the durable images, plus any prefix of the unsynced writes in the order they were made,
//! the last of which may be torn at any byte.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::storage::{LogStorage, SegmentFile};

#[derive(Debug, Clone, Default)]
struct SimFile {
    durable: Vec<u8>,
    live: Vec<u8>,
}

/// Files are kept by a stable id and names map to ids, so an open handle survives a rename as it
/// does on a real file system.
#[derive(Debug, Default)]
struct Disk {
    files: BTreeMap<u64, SimFile>,
    names: BTreeMap<String, u64>,
    next_id: u64,
    /// Writes since the file they touched was last synced, in order: (file id, offset, bytes).
    unsynced: Vec<(u64, u64, Vec<u8>)>,
    /// Fail every write once this many more have succeeded.
    writes_left: Option<u64>,
    /// Fail every sync once this many more have succeeded.
    syncs_left: Option<u64>,
    /// Refuse to create files, as a full device does.
    full: bool,
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

    /// How many writes are not yet covered by a sync.
    pub(crate) fn unsynced_writes(&self) -> usize {
        lock(&self.disk).unsynced.len()
    }

    /// Bytes of the `kept`-th unsynced write (counting from 1): the one a cut keeping `kept`
    /// writes may tear.
    pub(crate) fn last_unsynced_len_after(&self, kept: usize) -> usize {
        lock(&self.disk).unsynced.get(kept.wrapping_sub(1)).map_or(0, |(_, _, bytes)| bytes.len())
    }

    /// The disk after a power cut in which the first `kept` unsynced writes reached the device,
    /// the last of them only its first `torn_at` bytes if given.
    pub(crate) fn crash(&self, kept: usize, torn_at: Option<usize>) -> SimStorage {
        let disk = lock(&self.disk);
        let mut files: BTreeMap<u64, SimFile> = disk
            .files
            .iter()
            .map(|(id, file)| (*id, SimFile { durable: file.durable.clone(), live: file.durable.clone() }))
            .collect();
        let kept_writes = &disk.unsynced[..kept.min(disk.unsynced.len())];
        for (index, (id, offset, bytes)) in kept_writes.iter().enumerate() {
            let bytes = match torn_at {
                Some(cut) if index + 1 == kept_writes.len() => &bytes[..cut.min(bytes.len())],
                _ => &bytes[..],
            };
            if let Some(file) = files.get_mut(id) {
                let start = *offset as usize;
                file.durable[start..start + bytes.len()].copy_from_slice(bytes);
                file.live.clone_from(&file.durable);
            }
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
        disk.unsynced.push((self.id, offset, data.to_vec()));
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut disk = lock(&self.disk);
        take_one(&mut disk.syncs_left, "sync")?;
        let file = disk.files.get_mut(&self.id).ok_or_else(not_found)?;
        file.durable.clone_from(&file.live);
        let id = self.id;
        disk.unsynced.retain(|(file, _, _)| *file != id);
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
