//! `ferrite check DATA_DIR`: verifies a stopped server's data directory offline. For every shard
//! it reads the last complete checkpoint (every page file's checksums), replays the write-ahead
//! log exactly as recovery would (without writing anything), then opens every pool's hash table
//! and checks its invariants. It reports what it found and every damage, and exits non-zero if
//! there is any. A backup (`ferrite backup`) is checked the same way, and each shard's copy must
//! also have its descriptor and end exactly at the log record the descriptor names.

use std::fs::File;
use std::path::{Path, PathBuf};

use ferrite_store::hstore::HStore;
use ferrite_store::persistence::pmem::PmemMemory;
use ferrite_store::persistence::ssd::{load_shard, BackupDescriptor, Manifest, ShardPaths, BACKUP_NAME};
use ferrite_store::persistence::wal::TornCommit;
use serde_json::{json, Value};

/// What one pool looked like.
struct PoolFinding {
    name: String,
    id: u64,
    outcome: Result<ferrite_store::hstore::CheckReport, Vec<String>>,
}

/// What one shard looked like.
struct ShardFinding {
    dir: PathBuf,
    outcome: Result<ShardSummary, String>,
}

struct ShardSummary {
    checkpoint_seq: u64,
    checkpoint_pages: u64,
    replay_from: u64,
    records_replayed: u64,
    torn_tail: Option<(String, u64)>,
    torn_commit: Option<TornCommit>,
    /// The last log record of a backup's shard, as its descriptor names it.
    backup_lsn: Option<u64>,
    pools: Vec<PoolFinding>,
}

/// Runs the check; `Ok(true)` if nothing is damaged.
pub fn run(data_dir: &Path, json: bool) -> Result<bool, String> {
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
    let backup = shard_dirs.iter().any(|dir| dir.join(BACKUP_NAME).exists());
    let findings: Vec<ShardFinding> = shard_dirs.into_iter().map(|dir| check_shard(dir, backup)).collect();
    let healthy = findings.iter().all(|shard| match &shard.outcome {
        Ok(summary) => summary.pools.iter().all(|pool| pool.outcome.is_ok()),
        Err(_) => false,
    });
    if json {
        println!("{}", to_json(data_dir, &findings, healthy));
    } else {
        print_text(&findings, healthy);
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
            PoolFinding { name: descriptor.name.clone(), id: descriptor.id, outcome }
        })
        .collect();
    let summary = ShardSummary {
        checkpoint_seq: catalog.seq,
        checkpoint_pages: 0,
        replay_from: 0,
        records_replayed: 0,
        torn_tail: None,
        torn_commit: None,
        backup_lsn: None,
        pools,
    };
    ShardFinding { dir, outcome: Ok(summary) }
}

/// The backup descriptor of a backup's shard, checked against where its log ends (the LSN after
/// the last record recovery replayed).
fn backup_lsn(dir: &Path, next_lsn: u64) -> Result<u64, String> {
    match BackupDescriptor::read(dir) {
        Ok(Some(descriptor)) if descriptor.lsn + 1 == next_lsn => Ok(descriptor.lsn),
        Ok(Some(descriptor)) => Err(format!(
            "the backup's descriptor names LSN {} but its log ends at LSN {}",
            descriptor.lsn,
            next_lsn.saturating_sub(1)
        )),
        Ok(None) => Err(format!("an unfinished backup: no {BACKUP_NAME} descriptor")),
        Err(error) => Err(error.to_string()),
    }
}

fn check_shard(dir: PathBuf, backup: bool) -> ShardFinding {
    if dir.join("pmem").is_dir() {
        return check_pmem_shard(dir);
    }
    let loaded = match load_shard(&ShardPaths::new(&dir)) {
        Ok(loaded) => loaded,
        Err(error) => return ShardFinding { dir, outcome: Err(error.to_string()) },
    };
    let report = &loaded.report;
    let next_lsn = report.replay_from.max(1) + report.records_replayed;
    let backup_lsn = match backup.then(|| backup_lsn(&dir, next_lsn)).transpose() {
        Ok(lsn) => lsn,
        Err(damage) => return ShardFinding { dir, outcome: Err(damage) },
    };
    let pools = loaded
        .pools
        .into_iter()
        .map(|pool| {
            let (name, id) = (pool.descriptor.name.clone(), pool.descriptor.id);
            let outcome = match HStore::open(pool.region) {
                Ok(store) => store.check(),
                Err(error) => Err(vec![error.to_string()]),
            };
            PoolFinding { name, id, outcome }
        })
        .collect();
    let report = loaded.report;
    ShardFinding {
        dir,
        outcome: Ok(ShardSummary {
            checkpoint_seq: report.checkpoint_seq,
            checkpoint_pages: report.checkpoint_pages,
            replay_from: report.replay_from,
            records_replayed: report.records_replayed,
            torn_tail: report.torn_tail,
            torn_commit: report.torn_commit,
            backup_lsn,
            pools,
        }),
    }
}

fn print_text(findings: &[ShardFinding], healthy: bool) {
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
                println!(
                    "{}: checkpoint {} ({} pages), {} log records from LSN {}{tail}{backup}",
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

fn to_json(data_dir: &Path, findings: &[ShardFinding], healthy: bool) -> Value {
    let shards: Vec<Value> = findings
        .iter()
        .map(|shard| match &shard.outcome {
            Err(damage) => json!({ "dir": shard.dir.display().to_string(), "damage": damage }),
            Ok(summary) => json!({
                "dir": shard.dir.display().to_string(),
                "checkpoint": summary.checkpoint_seq,
                "checkpoint_pages": summary.checkpoint_pages,
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
    json!({ "data_dir": data_dir.display().to_string(), "ok": healthy, "shards": shards })
}
