//! The plugins a server knows by name, for pools' plugin chains: the shipped plugins installed
//! beside the server's executable (`libferrite_plugin_NAME.so`), then the `[plugins]` table of the
//! configuration and `--plugin NAME=PATH`, which add names or replace shipped ones.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ferrite_proto::plugin_names;

/// File names of shipped plugins: `libferrite_plugin_` + name + `.so` (what Cargo builds from a
/// package `ferrite-plugin-NAME`).
const SHIPPED_PREFIX: &str = "libferrite_plugin_";
const SHIPPED_SUFFIX: &str = ".so";

/// Plugin names, the libraries they load, and the configuration their `launch` gets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PluginRegistry {
    by_name: BTreeMap<String, PathBuf>,
    config: BTreeMap<String, String>,
}

impl PluginRegistry {
    /// The shipped plugins found in `shipped_dir` (if given), then `configured` over them, with
    /// `config` (`[plugin_config]`).
    pub fn new(
        shipped_dir: Option<&Path>,
        configured: &BTreeMap<String, PathBuf>,
        config: &BTreeMap<String, String>,
    ) -> PluginRegistry {
        let mut by_name = shipped_dir.map(shipped_plugins).unwrap_or_default();
        by_name.extend(configured.iter().map(|(name, path)| (name.clone(), path.clone())));
        for name in config.keys().filter(|name| !by_name.contains_key(*name)) {
            tracing::warn!(plugin = %name, "[plugin_config] names a plugin this server does not know");
        }
        PluginRegistry { by_name, config: config.clone() }
    }

    /// The configuration text of plugin `name` (empty if none).
    pub fn config(&self, name: &str) -> &[u8] {
        self.config.get(name).map_or(&[], |text| text.as_bytes())
    }

    /// The directory shipped plugins are installed in: the server executable's own.
    pub fn shipped_dir() -> Option<PathBuf> {
        std::env::current_exe().ok().and_then(|exe| exe.parent().map(Path::to_path_buf))
    }

    /// The names of `chain` (as `create_pool` carries it), each checked to be known; the error
    /// names the first unknown one and lists the known ones.
    pub fn resolve(&self, chain: &str) -> Result<Vec<String>, String> {
        plugin_names(chain)
            .map(|name| {
                if self.by_name.contains_key(name) {
                    Ok(name.to_string())
                } else {
                    Err(format!("unknown plugin '{name}'; this server knows {}", self.known()))
                }
            })
            .collect()
    }

    /// The library of a known plugin.
    pub fn path(&self, name: &str) -> Option<&Path> {
        self.by_name.get(name).map(PathBuf::as_path)
    }

    /// The known plugins' names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    fn known(&self) -> String {
        if self.by_name.is_empty() {
            return "none (configure them under [plugins] or with --plugin NAME=PATH)".to_string();
        }
        self.names().collect::<Vec<_>>().join(", ")
    }
}

/// Every `libferrite_plugin_NAME.so` in `dir`, by NAME.
fn shipped_plugins(dir: &Path) -> BTreeMap<String, PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let file_name = entry.file_name();
            let name = file_name.to_str()?.strip_prefix(SHIPPED_PREFIX)?.strip_suffix(SHIPPED_SUFFIX)?;
            ferrite_proto::is_plugin_name(name).then(|| (name.to_string(), entry.path()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_plugins_are_found_beside_the_server_and_configured_ones_replace_them() {
        let dir = std::env::temp_dir().join(format!("ferrite-plugin-registry-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        for file in ["libferrite_plugin_counter.so", "libferrite_plugin_passthru.so", "libother.so", "notes.txt"] {
            std::fs::write(dir.join(file), b"").expect("write");
        }
        let configured = BTreeMap::from([
            ("counter".to_string(), PathBuf::from("/opt/counter.so")),
            ("mine".to_string(), PathBuf::from("/opt/mine.so")),
        ]);
        let config = BTreeMap::from([("mine".to_string(), "versions=8".to_string())]);
        let registry = PluginRegistry::new(Some(&dir), &configured, &config);
        assert_eq!(registry.config("mine"), b"versions=8");
        assert_eq!(registry.config("counter"), b"");
        std::fs::remove_dir_all(&dir).expect("clean up");
        assert_eq!(
            registry.resolve("passthru,counter,mine"),
            Ok(vec!["passthru".into(), "counter".into(), "mine".into()])
        );
        assert_eq!(registry.by_name["counter"], PathBuf::from("/opt/counter.so"), "configured replaces shipped");
        assert_eq!(registry.by_name["passthru"], dir.join("libferrite_plugin_passthru.so"));
        assert_eq!(registry.resolve(""), Ok(Vec::new()));
        let error = registry.resolve("counter,other").expect_err("unknown");
        assert!(error.contains("unknown plugin 'other'") && error.contains("counter, mine, passthru"), "{error}");
    }

    #[test]
    fn a_server_without_plugins_says_how_to_add_them() {
        let error = PluginRegistry::default().resolve("counter").expect_err("unknown");
        assert!(error.contains("--plugin NAME=PATH"), "{error}");
    }
}
