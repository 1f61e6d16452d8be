//! `ferrite pool ...` and `ferrite attr POOL`: creating, describing, configuring, deleting and
//! listing pools, each pool shown with its settings (index, default durability, plugins).

use ferrite_client::{blocking, Durability, ErrorCode, PoolInfo, PoolOptions, PoolSetting};
use serde_json::json;

use crate::args::PoolCommand;
use crate::commands::{bytes_with_exact, open_pool, shell_quote, CliError, Result};
use crate::output::{fields, format_bytes, Report, Table};

pub fn run(session: &blocking::Session, command: &PoolCommand) -> Result<Report> {
    match command {
        PoolCommand::Create { name, size, expected_objects, create_only, indexed, durability, plugins } => {
            let asked = Asked { size: *size, indexed: *indexed, durability: *durability, plugins };
            create(session, name, *expected_objects, *create_only, &asked)
        }
        PoolCommand::Open { name } => describe(session, name, true),
        PoolCommand::Delete { name } => {
            session.delete_pool(name).map_err(|error| match error.code() {
                Some(ErrorCode::PoolNotFound) => CliError(format!("pool '{name}' does not exist")),
                Some(ErrorCode::PoolInUse) => CliError(format!(
                    "pool '{name}' is open in a session and cannot be deleted until every session closes it"
                )),
                _ => error.into(),
            })?;
            Ok(Report::text(format!("deleted pool '{name}'"), json!({ "pool": name, "deleted": true })))
        }
        PoolCommand::Configure { name, setting } => {
            let (setting, done) = if setting.add_index {
                (PoolSetting::AddIndex, "has a secondary index")
            } else {
                (PoolSetting::RemoveIndex, "has no secondary index")
            };
            session.configure_pool(name, setting).map_err(|error| match error.code() {
                Some(ErrorCode::PoolNotFound) => CliError(format!("pool '{name}' does not exist")),
                _ => error.into(),
            })?;
            Ok(Report::text(format!("pool '{name}' {done}"), json!({ "pool": name, "configured": setting.name() })))
        }
        PoolCommand::List => list(session),
    }
}

/// What `pool create` was given, `None` (or false, or empty) where an option was not: an
/// existing pool must match what was given, and what was not does not matter.
#[derive(Debug)]
struct Asked<'a> {
    size: Option<u64>,
    indexed: bool,
    durability: Option<Durability>,
    plugins: &'a [String],
}

impl Asked<'_> {
    /// Where `pool` differs from what was asked, in words, with what was asked.
    fn differences(&self, pool: &PoolInfo) -> Vec<String> {
        let mut differences = Vec::new();
        if let Some(size) = self.size.filter(|size| *size != pool.size_bytes) {
            differences.push(format!("size {} (asked: {})", format_bytes(pool.size_bytes), format_bytes(size)));
        }
        if self.indexed && !pool.indexed {
            differences.push(format!(
                "not indexed (asked: --indexed; `ferrite pool configure {} --add-index` gives it an index)",
                shell_quote(&pool.name)
            ));
        }
        if let Some(durability) = self.durability.filter(|durability| *durability != pool.durability) {
            differences.push(format!("durability {} (asked: {})", pool.durability.name(), durability.name()));
        }
        if !self.plugins.is_empty() && self.plugins != pool.plugins.as_slice() {
            differences.push(format!("plugins {} (asked: {})", plugin_chain(&pool.plugins), self.plugins.join(",")));
        }
        differences
    }
}

/// `pool create`: creates the pool, or opens an existing one whose settings match what was
/// asked; one that differs is refused with every difference named, and left as it is.
fn create(
    session: &blocking::Session,
    name: &str,
    expected_objects: u64,
    create_only: bool,
    asked: &Asked<'_>,
) -> Result<Report> {
    let options = PoolOptions {
        size_bytes: asked.size.unwrap_or(PoolOptions::DEFAULT_SIZE_BYTES),
        expected_objects,
        create_only,
        indexed: asked.indexed,
        durability: asked.durability.unwrap_or(Durability::Sync),
        plugins: asked.plugins.to_vec(),
    };
    let pool = session.create_pool(name, options).map_err(|error| {
        if error.is_pool_exists() {
            CliError(format!("pool '{name}' already exists (--create-only was given)"))
        } else {
            error.into()
        }
    })?;
    let (created, shard) = (pool.created(), pool.shard());
    let info = pool_info(session, name)?;
    pool.close()?;
    let differences = if created { Vec::new() } else { asked.differences(&info) };
    if !differences.is_empty() {
        return Err(CliError(format!(
            "pool '{name}' already exists with other settings: {}. It was left as it is; a pool's size, durability \
             and plugins are fixed when it is created",
            differences.join(", ")
        )));
    }
    let text = if created {
        format!("created pool '{name}' on shard {shard} ({})", format_bytes(info.size_bytes))
    } else {
        format!(
            "pool '{name}' already exists on shard {shard} ({}, {} objects)",
            format_bytes(info.size_bytes),
            info.objects
        )
    };
    let mut json = settings_json(&info);
    json["pool"] = json!(name);
    json["shard"] = json!(shard);
    json["created"] = json!(created);
    json["size_bytes"] = json!(info.size_bytes);
    json["objects"] = json!(info.objects);
    Ok(Report::text(text, json))
}

/// `pool open NAME` (`with_shard`) and `attr NAME`: the pool's counts and settings. The pool is
/// opened and closed as the commands promise, so a missing pool gets the usual suggestion.
pub fn describe(session: &blocking::Session, name: &str, with_shard: bool) -> Result<Report> {
    let pool = open_pool(session, name)?;
    let info = pool_info(session, name)?;
    pool.close()?;
    let mut text = vec![("pool", name.to_owned())];
    if with_shard {
        text.push(("shard", info.shard.to_string()));
    }
    text.extend([
        ("objects", info.objects.to_string()),
        ("size", bytes_with_exact(info.size_bytes)),
        ("used", bytes_with_exact(info.used_bytes)),
        ("indexed", yes_no(info.indexed).to_owned()),
        ("durability", info.durability.name().to_owned()),
        ("plugins", plugin_chain(&info.plugins)),
    ]);
    let mut json = settings_json(&info);
    json["pool"] = json!(name);
    if with_shard {
        json["shard"] = json!(info.shard);
    }
    json["objects"] = json!(info.objects);
    json["size_bytes"] = json!(info.size_bytes);
    json["used_bytes"] = json!(info.used_bytes);
    Ok(Report::text(fields(&text), json))
}

/// The pool `name`, which the caller has open, with its settings.
fn pool_info(session: &blocking::Session, name: &str) -> Result<PoolInfo> {
    session
        .pool_info(name)?
        .ok_or_else(|| CliError(format!("pool '{name}' is open but its shard does not list it (deleted meanwhile?)")))
}

fn list(session: &blocking::Session) -> Result<Report> {
    let mut pools = session.list_pools()?;
    pools.sort_by(|a, b| a.name.cmp(&b.name));
    let mut table = Table::new(&[
        ("NAME", false),
        ("SHARD", true),
        ("OBJECTS", true),
        ("SIZE", true),
        ("USED", true),
        ("OPENS", true),
        ("MEMORY", true),
        ("BYTES/KEY", true),
        ("LOAD", true),
        ("INDEXED", false),
        ("DURABILITY", false),
        ("PLUGINS", false),
    ]);
    for pool in &pools {
        table.row(vec![
            pool.name.clone(),
            pool.shard.to_string(),
            pool.objects.to_string(),
            format_bytes(pool.size_bytes),
            format_bytes(pool.used_bytes),
            pool.open_count.to_string(),
            format_bytes(pool.memory.total_bytes()),
            format_bytes_per_key(pool),
            format_load(pool),
            yes_no(pool.indexed).to_owned(),
            pool.durability.name().to_owned(),
            plugin_chain(&pool.plugins),
        ]);
    }
    let text = if pools.is_empty() { "no pools".to_owned() } else { table.render() };
    Ok(Report::text(text, json!({ "pools": pools_json(&pools) })))
}

fn yes_no(value: bool) -> &'static str {
    if value {
        "yes"
    } else {
        "no"
    }
}

/// A plugin chain as it was given, comma-separated; `-` for none.
fn plugin_chain(plugins: &[String]) -> String {
    if plugins.is_empty() {
        "-".to_owned()
    } else {
        plugins.join(",")
    }
}

/// A pool's settings in JSON: `indexed`, `durability` and `plugins` (a list).
fn settings_json(pool: &PoolInfo) -> serde_json::Value {
    json!({ "indexed": pool.indexed, "durability": pool.durability.name(), "plugins": pool.plugins })
}

/// Bytes per key with one decimal; `-` for an empty pool, which has none.
pub fn format_bytes_per_key(pool: &PoolInfo) -> String {
    pool.bytes_per_key().map_or_else(|| "-".to_owned(), |bytes| format!("{bytes:.1}"))
}

/// Pairs per bucket with three decimals (a pool's first pairs load its table by thousandths);
/// `-` before the table has buckets.
pub fn format_load(pool: &PoolInfo) -> String {
    pool.table_load().map_or_else(|| "-".to_owned(), |load| format!("{load:.3}"))
}

/// The pools as `pool list --json` and `stats --json` show them: every figure of the listing,
/// its settings, memory by part with its total, bytes per key and load (`null` where there are
/// none).
pub fn pools_json(pools: &[PoolInfo]) -> Vec<serde_json::Value> {
    pools
        .iter()
        .map(|pool| {
            let memory = &pool.memory;
            let mut json = settings_json(pool);
            json["name"] = json!(pool.name);
            json["shard"] = json!(pool.shard);
            json["objects"] = json!(pool.objects);
            json["size_bytes"] = json!(pool.size_bytes);
            json["used_bytes"] = json!(pool.used_bytes);
            json["open_count"] = json!(pool.open_count);
            json["memory"] = json!({
                "total_bytes": memory.total_bytes(),
                "bytes_per_key": pool.bytes_per_key(),
                "table_load": pool.table_load(),
                "table_buckets": memory.table_buckets,
                "table_bytes": memory.table_bytes,
                "slab_bytes": memory.slab_bytes,
                "large_bytes": memory.large_bytes,
                "other_bytes": memory.other_bytes,
                "index_bytes": memory.index_bytes,
            });
            json
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrite_client::PoolMemory;

    fn pool(indexed: bool, durability: Durability, plugins: &[&str]) -> PoolInfo {
        PoolInfo {
            name: "p q".to_owned(),
            shard: 0,
            objects: 0,
            size_bytes: 1 << 20,
            used_bytes: 0,
            open_count: 0,
            memory: PoolMemory::default(),
            plugins: plugins.iter().map(|p| (*p).to_owned()).collect(),
            indexed,
            durability,
        }
    }

    /// Only what was given is compared: nothing given matches any pool; each option given that
    /// differs is named with the pool's value and the one asked.
    #[test]
    fn an_existing_pool_differs_only_in_what_was_asked() {
        let existing = pool(false, Durability::Sync, &["counter"]);
        let nothing = Asked { size: None, indexed: false, durability: None, plugins: &[] };
        assert!(nothing.differences(&existing).is_empty());
        let same = ["counter".to_owned()];
        let matching =
            Asked { size: Some(1 << 20), indexed: false, durability: Some(Durability::Sync), plugins: &same };
        assert!(matching.differences(&existing).is_empty());
        let other = ["versioning".to_owned(), "counter".to_owned()];
        let all = Asked { size: Some(2 << 20), indexed: true, durability: Some(Durability::Async), plugins: &other };
        assert_eq!(
            all.differences(&existing),
            [
                "size 1 MiB (asked: 2 MiB)",
                "not indexed (asked: --indexed; `ferrite pool configure 'p q' --add-index` gives it an index)",
                "durability sync (asked: async)",
                "plugins counter (asked: versioning,counter)",
            ]
        );
        let indexed = pool(true, Durability::Sync, &[]);
        let plain = Asked { size: None, indexed: false, durability: None, plugins: &[] };
        assert!(plain.differences(&indexed).is_empty(), "--indexed not given: an index is no difference");
    }
}
