//! The `ferrite-ado` command line, written by the link and read by the host: one definition so
//! the two cannot drift apart.
//!
//! ```text
//! ferrite-ado --pool-fd 3 --ring-fd 4 --to-host-fd 5 --to-shard-fd 6 --status-fd 7
//!             --ring-capacity BYTES --memory-limit BYTES --spin-us MICROS [--checking]
//!             --plugin NAME=PATH [--config HEX] [--plugin NAME=PATH [--config HEX]]...
//! ```
//!
//! `--config` gives the plugin before it its configuration bytes, hex-encoded so that any bytes
//! pass through a command line.

use std::ffi::{OsStr, OsString};
use std::os::fd::RawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// One plugin of a pool's chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSpec {
    pub name: String,
    pub path: PathBuf,
    /// Handed to the plugin's `launch`.
    pub config: Vec<u8>,
}

/// Everything the host is told at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostArgs {
    /// The pool memory memfd, mapped shared and read-only (a call's own pages are made writable
    /// while it runs).
    pub pool_fd: RawFd,
    /// The memfd holding both rings: shard to host at offset 0, then host to shard.
    pub ring_fd: RawFd,
    /// Signalled when the shard-to-host ring has work for a sleeping host.
    pub to_host_fd: RawFd,
    /// Signalled when the host-to-shard ring has messages for a sleeping shard.
    pub to_shard_fd: RawFd,
    /// The memfd of the host's status: the call it is running.
    pub status_fd: RawFd,
    /// Each ring's data area in bytes.
    pub ring_capacity: usize,
    /// The host's own memory budget beyond the shared mappings (applied as RLIMIT_AS).
    pub memory_limit_bytes: u64,
    /// How long the host polls its ring before sleeping on the eventfd (0: never spin).
    pub spin_us: u32,
    /// Compare pool memory before and after each call and report undeclared writes.
    pub checking: bool,
    pub chain: Vec<PluginSpec>,
}

/// A command line the host cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgsError {
    #[error("{0} needs a value")]
    MissingValue(String),
    #[error("{flag}: {value:?} is not a number")]
    NotANumber { flag: String, value: OsString },
    #[error("--plugin {0:?} is not NAME=PATH")]
    BadPlugin(OsString),
    #[error("--config {0:?} is not hex, or follows no --plugin")]
    BadConfig(OsString),
    #[error("unknown argument {0:?}")]
    Unknown(OsString),
    #[error("{0} is required")]
    Missing(&'static str),
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &OsStr) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks(2)
        .map(|pair| std::str::from_utf8(pair).ok().and_then(|pair| u8::from_str_radix(pair, 16).ok()))
        .collect()
}

impl HostArgs {
    /// The arguments (without the program name) that `parse` reads back to `self`.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut number = |flag: &str, value: String| {
            args.push(flag.into());
            args.push(value.into());
        };
        number("--pool-fd", self.pool_fd.to_string());
        number("--ring-fd", self.ring_fd.to_string());
        number("--to-host-fd", self.to_host_fd.to_string());
        number("--to-shard-fd", self.to_shard_fd.to_string());
        number("--status-fd", self.status_fd.to_string());
        number("--ring-capacity", self.ring_capacity.to_string());
        number("--memory-limit", self.memory_limit_bytes.to_string());
        number("--spin-us", self.spin_us.to_string());
        if self.checking {
            args.push("--checking".into());
        }
        for plugin in &self.chain {
            args.push("--plugin".into());
            let mut spec = format!("{}=", plugin.name).into_bytes();
            spec.extend_from_slice(plugin.path.as_os_str().as_bytes());
            args.push(OsString::from_vec(spec));
            if !plugin.config.is_empty() {
                args.push("--config".into());
                args.push(hex(&plugin.config).into());
            }
        }
        args
    }

    /// Reads the arguments after the program name.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<HostArgs, ArgsError> {
        let mut args = args.into_iter();
        let mut numbers: [Option<u64>; 8] = [None; 8];
        const NUMBER_FLAGS: [&str; 8] = [
            "--pool-fd",
            "--ring-fd",
            "--to-host-fd",
            "--to-shard-fd",
            "--status-fd",
            "--ring-capacity",
            "--memory-limit",
            "--spin-us",
        ];
        let mut checking = false;
        let mut chain: Vec<PluginSpec> = Vec::new();
        while let Some(arg) = args.next() {
            let flag = arg.to_string_lossy().into_owned();
            if let Some(index) = NUMBER_FLAGS.iter().position(|known| *known == flag) {
                let value = args.next().ok_or_else(|| ArgsError::MissingValue(flag.clone()))?;
                let parsed = value.to_str().and_then(|v| v.parse::<u64>().ok());
                numbers[index] = Some(parsed.ok_or(ArgsError::NotANumber { flag, value })?);
            } else if flag == "--checking" {
                checking = true;
            } else if flag == "--plugin" {
                let value = args.next().ok_or_else(|| ArgsError::MissingValue(flag.clone()))?;
                let bytes = value.as_bytes();
                let split = bytes.iter().position(|b| *b == b'=').ok_or_else(|| ArgsError::BadPlugin(value.clone()))?;
                let name = std::str::from_utf8(&bytes[..split]).map_err(|_| ArgsError::BadPlugin(value.clone()))?;
                if name.is_empty() || split + 1 == bytes.len() {
                    return Err(ArgsError::BadPlugin(value));
                }
                let path = PathBuf::from(OsStr::from_bytes(&bytes[split + 1..]));
                chain.push(PluginSpec { name: name.to_owned(), path, config: Vec::new() });
            } else if flag == "--config" {
                let value = args.next().ok_or_else(|| ArgsError::MissingValue(flag.clone()))?;
                let config = unhex(&value).ok_or_else(|| ArgsError::BadConfig(value.clone()))?;
                chain.last_mut().ok_or(ArgsError::BadConfig(value))?.config = config;
            } else {
                return Err(ArgsError::Unknown(arg));
            }
        }
        let fd = |index: usize| -> Result<RawFd, ArgsError> {
            let value = numbers[index].ok_or(ArgsError::Missing(NUMBER_FLAGS[index]))?;
            RawFd::try_from(value).map_err(|_| ArgsError::Missing(NUMBER_FLAGS[index]))
        };
        Ok(HostArgs {
            pool_fd: fd(0)?,
            ring_fd: fd(1)?,
            to_host_fd: fd(2)?,
            to_shard_fd: fd(3)?,
            status_fd: fd(4)?,
            ring_capacity: numbers[5]
                .and_then(|capacity| usize::try_from(capacity).ok())
                .ok_or(ArgsError::Missing("--ring-capacity"))?,
            memory_limit_bytes: numbers[6].ok_or(ArgsError::Missing("--memory-limit"))?,
            spin_us: u32::try_from(numbers[7].unwrap_or(0)).map_err(|_| ArgsError::Missing("--spin-us"))?,
            checking,
            chain,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the link writes, the host reads back exactly, config bytes included.
    #[test]
    fn round_trips() {
        let args = HostArgs {
            pool_fd: 3,
            ring_fd: 4,
            to_host_fd: 5,
            to_shard_fd: 6,
            status_fd: 7,
            ring_capacity: 1 << 20,
            memory_limit_bytes: 1 << 30,
            spin_us: 50,
            checking: true,
            chain: vec![
                PluginSpec { name: "a".into(), path: "/x/liba=1.so".into(), config: vec![0, 255, 16] },
                PluginSpec { name: "b".into(), path: "/y/libb.so".into(), config: vec![] },
            ],
        };
        assert_eq!(HostArgs::parse(args.to_args()), Ok(args));
    }

    /// Malformed command lines are refused with the reason.
    #[test]
    fn rejects_malformed() {
        let parse = |args: &[&str]| HostArgs::parse(args.iter().map(OsString::from));
        assert!(matches!(parse(&["--pool-fd"]), Err(ArgsError::MissingValue(_))));
        assert!(matches!(parse(&["--pool-fd", "x"]), Err(ArgsError::NotANumber { .. })));
        assert!(matches!(parse(&["--plugin", "noequals"]), Err(ArgsError::BadPlugin(_))));
        assert!(matches!(parse(&["--config", "00"]), Err(ArgsError::BadConfig(_))));
        assert!(matches!(parse(&["--plugin", "a=/p", "--config", "0g"]), Err(ArgsError::BadConfig(_))));
        assert!(matches!(parse(&["--bogus"]), Err(ArgsError::Unknown(_))));
        assert!(matches!(parse(&["--plugin", "a=/p"]), Err(ArgsError::Missing("--pool-fd"))));
    }
}
