//! `ferrite check DATA_DIR`: verifies a stopped server's data directory offline. For every shard
//! it reads the last complete checkpoint (every page file's checksums), replays the write-ahead
//! log exactly as recovery would (without writing anything), then opens every pool's hash table
//! and checks its invariants. It reports what it found and every damage, and exits non-zero if
//! there is any. A backup (`ferrite backup`) is checked the same way, and must also be whole
//! (`read_backup`: every shard there, each with its descriptor), and each shard's log must end
//! exactly at the record its descriptor names: the very checks `ferrite-server --restore` makes
//! (`ferrite_store::persistence::ssd::verify`), so the two agree on every backup.

use std::fs::File;
use std::path::{Path, PathBuf};

use ferrite_store::hstore::HStore;
use ferrite_store::persistence::identity::Identity;
use ferrite_store::persistence::pmem::PmemMemory;
use ferrite_store::persistence::ssd::backup::files_bytes;
use ferrite_store::persistence::ssd::{
    is_backup, read_backup, verify_shard, BackupDescriptor, Manifest, PoolCheck, ShardPaths,
};
use ferrite_store::persistence::wal::TornCommit;
use ferrite_store::progress::Progress;
use serde_json::{json, Value};

/// What one shard looked like.
struct ShardFinding {
    dir: PathBuf,
    outcome: Result<ShardSummary, String>,
}

struct ShardSummary {
    checkpoint_seq: u64,
    checkpoint_pages: u64,
    pages_in_log: u64,
    replay_from: u64,
    records_replayed: u64,
    torn_tail: Option<(String, u64)>,
    torn_commit: Option<TornCommit>,
    /// The last log record of a backup's shard, as its descriptor names it.
    backup_lsn: Option<u64>,
    pools: Vec<PoolCheck>,
}

/// Runs the check; `Ok(true)` if nothing is damaged. With `progress` (`--progress`), how far it
/// is goes to standard error even when that is not a terminal (on one it goes anyway).
pub fn run(data_dir: &Path, json: bool, progress: bool) -> Result<bool, String> {
    if !data_dir.is_dir() {
        return Err(format!("{} is not a directory", data_dir.display()));
    }
    let _lock = lock(data_dir)?;
    let mut shard_dirs: Vec<PathBuf> = std::fs::read_dir(data_dir)
        .map_err(|e| format!("cannot list {}: {e}", data_dir.display()))?
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_str().is_some_and(|name| name.starts_with("shard-")))
        .map(|entry| entry.path())
        .collect();
    shard_dirs.sort_by_key(|dir| shard_number(dir));
    if shard_dirs.is_empty() {
        return Err(format!(
            "{} holds no shard directories (shard-N): is it a Ferrite data directory?",
            data_dir.display()
        ));
    }
    // A backup that is not whole, or a directory without a valid identity file (a server
    // refuses to start on it), is damage of its own; the shards are still checked (a backup's
    // each with its descriptor if it has one) to say what else is wrong.
    let backup = is_backup(data_dir).then(|| read_backup(data_dir).map_err(|error| error.to_string()));
    let identity = Identity::read(data_dir).err();
    let total = shard_dirs.iter().map(|dir| files_bytes(&dir.join("checkpoint")) + files_bytes(&dir.join("wal"))).sum();
    let mut shown = Progress::on_stderr(format!("check: {}", data_dir.display()), total, progress);
    let findings: Vec<ShardFinding> = shard_dirs
        .into_iter()
        .map(|dir| {
            let descriptor = match &backup {
                Some(Ok(descriptors)) => {
                    usize::try_from(shard_number(&dir)).ok().and_then(|i| descriptors.get(i)).copied()
                }
                Some(Err(_)) => BackupDescriptor::read(&dir).ok().flatten(),
                None => None,
            };
            check_shard(dir, backup.is_some(), descriptor, &mut shown)
        })
        .collect();
    shown.finish();
    let directory_damage = match backup {
        Some(read) => read.err().map(|error| format!("not a whole backup: {error}")),
        None => identity,
    };
    let healthy = directory_damage.is_none()
        && findings.iter().all(|shard| match &shard.outcome {
            Ok(summary) => summary.pools.iter().all(|pool| pool.outcome.is_ok()),
            Err(_) => false,
        });
    if json {
        println!("{}", to_json(data_dir, directory_damage.as_deref(), &findings, healthy));
    } else {
        print_text(data_dir, directory_damage.as_deref(), &findings, healthy);
    }
    Ok(healthy)
}

fn shard_number(dir: &Path) -> u64 {
    dir.file_name()
        .and_then(|name| name.to_str())
        .and_then(|name| name.strip_prefix("shard-")?.parse().ok())
        .unwrap_or(u64::MAX)
}

/// Takes the data directory's lock, so a running server's files are never read half-written.
fn lock(data_dir: &Path) -> Result<Option<File>, String> {
    let path = data_dir.join("LOCK");
    let Ok(file) = File::options().read(true).write(true).open(&path) else { return Ok(None) };
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(file)),
        Err(_) => {
            let holder = std::fs::read_to_string(&path).unwrap_or_default();
            Err(format!(
                "{} is in use by a running ferrite-server{}; stop it before checking",
                data_dir.display(),
                holder.trim().parse::<u32>().map(|pid| format!(" (pid {pid})")).unwrap_or_default()
            ))
        }
    }
}

/// A shard on the `pmem` backing: its catalog, then every pool as a restart would open it
/// (an interrupted transaction rolled back in a private copy; the files are not touched).
fn check_pmem_shard(dir: PathBuf) -> ShardFinding {
    let pmem = dir.join("pmem");
    let catalog = match Manifest::read(&pmem) {
        Ok(catalog) => catalog.unwrap_or_default(),
        Err(error) => return ShardFinding { dir, outcome: Err(error.to_string()) },
    };
    let pools = catalog
        .pools
        .iter()
        .map(|pool| {
            let descriptor = &pool.descriptor;
            let outcome = match PmemMemory::open_private(&pmem, descriptor.id, descriptor.region_bytes) {
                Ok(memory) => match HStore::open(memory) {
                    Ok(store) => store.check(),
                    Err(error) => Err(vec![error.to_string()]),
                },
                Err(error) => Err(vec![error.to_string()]),
            };
            PoolCheck { name: descriptor.name.clone(), id: descriptor.id, outcome }
        })
        .collect();
    let summary = ShardSummary {
        checkpoint_seq: catalog.seq,
        checkpoint_pages: 0,
        pages_in_log: 0,
        replay_from: 0,
        records_replayed: 0,
        torn_tail: None,
        torn_commit: None,
        backup_lsn: None,
        pools,
    };
    ShardFinding { dir, outcome: Ok(summary) }
}

/// A shard's files verified (`verify_shard`); a shard of a backup needs its descriptor, and its
/// log must end where that says.
fn check_shard(
    dir: PathBuf,
    backup: bool,
    descriptor: Option<BackupDescriptor>,
    progress: &mut Progress,
) -> ShardFinding {
    if dir.join("pmem").is_dir() {
        return check_pmem_shard(dir);
    }
    if backup && descriptor.is_none() {
        let outcome = Err("an unfinished backup: no valid BACKUP descriptor for this shard".to_owned());
        return ShardFinding { dir, outcome };
    }
    let outcome = verify_shard(&ShardPaths::new(&dir), descriptor.as_ref(), progress).map(|checked| {
        let report = checked.report;
        ShardSummary {
            checkpoint_seq: report.checkpoint_seq,
            checkpoint_pages: report.checkpoint_pages,
            pages_in_log: report.pages_in_log,
            replay_from: report.replay_from,
            records_replayed: report.records_replayed,
            torn_tail: report.torn_tail,
            torn_commit: report.torn_commit,
            backup_lsn: descriptor.map(|descriptor| descriptor.lsn),
            pools: checked.pools,
        }
    });
    ShardFinding { dir, outcome }
}

fn print_text(data_dir: &Path, directory_damage: Option<&str>, findings: &[ShardFinding], healthy: bool) {
    if let Some(damage) = directory_damage {
        println!("{}: DAMAGED: {damage}", data_dir.display());
    }
    let (mut pools, mut objects) = (0u64, 0u64);
    for shard in findings {
        match &shard.outcome {
            Err(damage) => println!("{}: DAMAGED: {damage}", shard.dir.display()),
            Ok(summary) => {
                let tail = match (&summary.torn_commit, &summary.torn_tail) {
                    (Some(torn), _) => format!(
                        "; interrupted last commit in {} at offset {}: LSN {} lost, {} later record(s) of it up to \
                         LSN {} cut on restart (never acknowledged)",
                        torn.file, torn.offset, torn.missing_lsn, torn.dropped_records, torn.last_dropped_lsn
                    ),
                    (None, Some((file, offset))) => {
                        format!("; torn tail in {file} at offset {offset} (cut on restart)")
                    }
                    (None, None) => String::new(),
                };
                let backup = summary.backup_lsn.map(|lsn| format!("; backup up to LSN {lsn}")).unwrap_or_default();
                let in_log = match summary.pages_in_log {
                    0 => String::new(),
                    pages => format!(", {pages} of them in the log"),
                };
                println!(
                    "{}: checkpoint {} ({} pages{in_log}), {} log records from LSN {}{tail}{backup}",
                    shard.dir.display(),
                    summary.checkpoint_seq,
                    summary.checkpoint_pages,
                    summary.records_replayed,
                    summary.replay_from
                );
                for pool in &summary.pools {
                    pools += 1;
                    match &pool.outcome {
                        Ok(report) => {
                            objects += report.objects;
                            println!(
                                "  pool '{}' (id {}): {} objects, {} of {} bytes used, {} buckets: ok",
                                pool.name,
                                pool.id,
                                report.objects,
                                report.used_bytes,
                                report.capacity_bytes,
                                report.buckets
                            );
                        }
                        Err(problems) => {
                            println!("  pool '{}' (id {}): DAMAGED", pool.name, pool.id);
                            for problem in problems {
                                println!("    {problem}");
                            }
                        }
                    }
                }
            }
        }
    }
    let verdict = if healthy { "ok" } else { "DAMAGE FOUND" };
    println!("{verdict}: {} shard(s), {pools} pool(s), {objects} object(s)", findings.len());
}

fn to_json(data_dir: &Path, directory_damage: Option<&str>, findings: &[ShardFinding], healthy: bool) -> Value {
    let shards: Vec<Value> = findings
        .iter()
        .map(|shard| match &shard.outcome {
            Err(damage) => json!({ "dir": shard.dir.display().to_string(), "damage": damage }),
            Ok(summary) => json!({
                "dir": shard.dir.display().to_string(),
                "checkpoint": summary.checkpoint_seq,
                "checkpoint_pages": summary.checkpoint_pages,
                "checkpoint_pages_in_log": summary.pages_in_log,
                "replay_from_lsn": summary.replay_from,
                "records_replayed": summary.records_replayed,
                "backup_lsn": summary.backup_lsn,
                "torn_tail": summary.torn_tail.as_ref().map(|(file, offset)| json!({ "file": file, "offset": offset })),
                "torn_commit": summary.torn_commit.as_ref().map(|torn| json!({
                    "file": torn.file, "offset": torn.offset, "missing_lsn": torn.missing_lsn,
                    "dropped_records": torn.dropped_records, "last_dropped_lsn": torn.last_dropped_lsn,
                })),
                "pools": summary.pools.iter().map(|pool| match &pool.outcome {
                    Ok(report) => json!({
                        "name": pool.name, "id": pool.id, "objects": report.objects,
                        "used_bytes": report.used_bytes, "size_bytes": report.capacity_bytes,
                        "buckets": report.buckets, "ok": true,
                    }),
                    Err(problems) => json!({ "name": pool.name, "id": pool.id, "ok": false, "damage": problems }),
                }).collect::<Vec<_>>(),
            }),
        })
        .collect();
    json!({
        "data_dir": data_dir.display().to_string(),
        "ok": healthy,
        "directory_damage": directory_damage,
        "shards": shards,
    })
}
