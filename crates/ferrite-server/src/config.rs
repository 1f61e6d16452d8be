//! Server configuration: a TOML file, or the embedded default, plus command-line overrides.
//!
//! Unknown keys are errors that name the key, because a misspelt option silently ignored is a
//! setting the operator believes is in force and is not.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ferrite_proto::{Limits, KEY_BYTES_MAX, POOLS_PER_SHARD_MAX, VALUE_INLINE_BYTES_MAX};
use ferrite_store::StoreKind;
use serde::Deserialize;

/// The configuration used when no file is given.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("../config/default.toml");

/// Most shards one server runs; shard indexes travel as `u16` on the wire.
pub const SHARDS_MAX: usize = 256;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid config {origin}: {message}")]
    Parse { origin: String, message: String },
    #[error("invalid config: {0}")]
    Invalid(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// IP address every shard listens on.
    pub listen: IpAddr,
    pub data_dir: PathBuf,
    pub limits: LimitsConfig,
    pub shards: Vec<ShardConfig>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    pub key_bytes_max: u32,
    pub value_bytes_max: u32,
    pub pools_per_shard_max: u32,
    pub connections_per_shard_max: u32,
}

impl LimitsConfig {
    pub fn protocol_limits(&self) -> Limits {
        Limits { key_bytes_max: self.key_bytes_max, value_bytes_max: self.value_bytes_max }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardConfig {
    /// TCP port of the shard's native protocol listener; 0 picks a free port.
    pub port: u16,
    /// CPU core to pin the shard's thread to.
    #[serde(default)]
    pub core: Option<usize>,
    #[serde(default)]
    pub store: StoreName,
    #[serde(default)]
    pub backing: Backing,
}

/// Storage engine names as written in the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreName {
    #[default]
    Mapstore,
}

impl StoreName {
    pub fn kind(self) -> StoreKind {
        match self {
            StoreName::Mapstore => StoreKind::MapStore,
        }
    }
}

/// Where pool memory lives. Only `memory` exists so far: pools live in DRAM and are lost when the
/// server stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backing {
    #[default]
    Memory,
}

impl Backing {
    pub fn name(self) -> &'static str {
        match self {
            Backing::Memory => "memory",
        }
    }
}

/// Command-line settings that replace parts of the loaded configuration.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `HOST:PORT`: every shard listens on HOST; shard i on PORT + i.
    pub listen: Option<std::net::SocketAddr>,
    /// Number of shards; new shards copy the first shard's settings on consecutive ports.
    pub shards: Option<usize>,
    pub data_dir: Option<PathBuf>,
}

impl Config {
    pub fn from_toml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text)
            .map_err(|e| ConfigError::Parse { origin: origin.to_string(), message: e.to_string() })?;
        config.validate()?;
        Ok(config)
    }

    pub fn embedded_default() -> Config {
        Config::from_toml(DEFAULT_CONFIG_TOML, "(embedded default)")
            .expect("the embedded default configuration is valid")
    }

    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        Config::from_toml(&text, &path.display().to_string())
    }

    /// Applies command-line overrides, then validates the result.
    pub fn apply(mut self, overrides: &Overrides) -> Result<Config, ConfigError> {
        if let Some(count) = overrides.shards {
            if count == 0 || count > SHARDS_MAX {
                return Err(ConfigError::Invalid(format!("--shards must be between 1 and {SHARDS_MAX}, not {count}")));
            }
            let template = self.shards[0];
            self.shards = (0..count)
                .map(|i| ShardConfig { port: shard_port(template.port, i), core: None, ..template })
                .collect();
            self.shards[0].core = template.core;
        }
        if let Some(listen) = overrides.listen {
            self.listen = listen.ip();
            for (i, shard) in self.shards.iter_mut().enumerate() {
                shard.port = shard_port(listen.port(), i);
            }
        }
        if let Some(dir) = &overrides.data_dir {
            self.data_dir.clone_from(dir);
        }
        self.validate()?;
        Ok(self)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |message: String| Err(ConfigError::Invalid(message));
        if self.shards.is_empty() {
            return invalid("at least one [[shards]] entry is required".into());
        }
        if self.shards.len() > SHARDS_MAX {
            return invalid(format!("{} shards configured; at most {SHARDS_MAX} are supported", self.shards.len()));
        }
        let limits = &self.limits;
        if limits.key_bytes_max == 0 || limits.key_bytes_max as usize > KEY_BYTES_MAX {
            return invalid(format!("limits.key_bytes_max must be between 1 and {KEY_BYTES_MAX}"));
        }
        if limits.value_bytes_max as usize > VALUE_INLINE_BYTES_MAX {
            return invalid(format!("limits.value_bytes_max must be at most {VALUE_INLINE_BYTES_MAX}"));
        }
        if limits.pools_per_shard_max == 0 || limits.pools_per_shard_max as usize > POOLS_PER_SHARD_MAX {
            return invalid(format!("limits.pools_per_shard_max must be between 1 and {POOLS_PER_SHARD_MAX}"));
        }
        if limits.connections_per_shard_max == 0 {
            return invalid("limits.connections_per_shard_max must be at least 1".into());
        }
        let mut ports: Vec<u16> = self.shards.iter().map(|s| s.port).filter(|p| *p != 0).collect();
        ports.sort_unstable();
        if let Some(pair) = ports.windows(2).find(|pair| pair[0] == pair[1]) {
            return invalid(format!("two shards are configured on port {}", pair[0]));
        }
        Ok(())
    }
}

/// Port of shard `index` when shards take consecutive ports from `base`. Port 0 stays 0 (every
/// shard picks its own free port).
fn shard_port(base: u16, index: usize) -> u16 {
    if base == 0 {
        return 0;
    }
    u16::try_from(usize::from(base) + index).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_one_shard_on_11911() {
        let config = Config::embedded_default();
        assert_eq!(config.listen.to_string(), "127.0.0.1");
        assert_eq!(config.data_dir, PathBuf::from("./ferrite-data"));
        assert_eq!(config.shards.len(), 1);
        assert_eq!(config.shards[0].port, 11911);
        assert_eq!(config.shards[0].store, StoreName::Mapstore);
        assert_eq!(config.limits.protocol_limits(), Limits::MAX);
    }

    #[test]
    fn unknown_keys_are_named() {
        let text = DEFAULT_CONFIG_TOML.replace("data_dir", "data_dri");
        let error = Config::from_toml(&text, "test.toml").expect_err("misspelt key").to_string();
        assert!(error.contains("data_dri"), "{error}");
        let text = DEFAULT_CONFIG_TOML.replace("port = 11911", "port = 11911\nprot = 1");
        let error = Config::from_toml(&text, "test.toml").expect_err("unknown shard key").to_string();
        assert!(error.contains("prot"), "{error}");
    }

    #[test]
    fn unknown_store_is_an_error() {
        let text = DEFAULT_CONFIG_TOML.replace("\"mapstore\"", "\"nosuchstore\"");
        let error = Config::from_toml(&text, "test.toml").expect_err("bad store").to_string();
        assert!(error.contains("nosuchstore"), "{error}");
    }

    #[test]
    fn overrides_spread_shards_over_consecutive_ports() {
        let overrides = Overrides {
            listen: Some("0.0.0.0:12000".parse().expect("literal address")),
            shards: Some(3),
            data_dir: Some(PathBuf::from("/tmp/x")),
        };
        let config = Config::embedded_default().apply(&overrides).expect("valid overrides");
        assert_eq!(config.listen.to_string(), "0.0.0.0");
        assert_eq!(config.shards.iter().map(|s| s.port).collect::<Vec<_>>(), vec![12000, 12001, 12002]);
        assert_eq!(config.data_dir, PathBuf::from("/tmp/x"));
    }

    #[test]
    fn port_zero_gives_every_shard_a_free_port() {
        let overrides =
            Overrides { listen: Some("127.0.0.1:0".parse().expect("literal")), shards: Some(2), data_dir: None };
        let config = Config::embedded_default().apply(&overrides).expect("valid overrides");
        assert!(config.shards.iter().all(|s| s.port == 0));
    }

    #[test]
    fn invalid_settings_are_refused() {
        let zero = Overrides { shards: Some(0), ..Overrides::default() };
        assert!(Config::embedded_default().apply(&zero).is_err());
        let text = DEFAULT_CONFIG_TOML.replace("key_bytes_max = 65536", "key_bytes_max = 65537");
        assert!(Config::from_toml(&text, "t").is_err());
        let text = format!("{DEFAULT_CONFIG_TOML}\n[[shards]]\nport = 11911\n");
        let error = Config::from_toml(&text, "t").expect_err("duplicate port").to_string();
        assert!(error.contains("11911"), "{error}");
    }
}
