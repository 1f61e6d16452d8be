//! The identity file `FERRITE` of a data directory, or of a backup (which is laid out like one):
//! what it is and for how many shards it was written. The server writes and checks it
//! (`ferrite-server`'s `data_dir.rs` says when); `ferrite check` and a restore read a backup's.
//!
//! It is `key = value` lines of ASCII text, so a person can read it, ending with the CRC-32C
//! (Castagnoli) of the lines before it, newlines included, as eight lowercase hex digits:
//!
//! ```text
//! format = ferrite-data-dir
//! version = 2
//! shards = 4
//! crc32c = 1a2b3c4d
//! ```
//!
//! A backup's has one more line before the checksum, `kind = backup`, so that a backup whose
//! shard descriptors were all lost is still known for one. A file without that line (a data
//! directory's, or a backup's taken before the line existed) is a data directory's.

use std::path::{Path, PathBuf};

/// The identity file's name.
pub const IDENTITY_NAME: &str = "FERRITE";
const IDENTITY_MAGIC: &str = "ferrite-data-dir";
/// Version 2: write-ahead log format 2 (salted records) and hstore format 2 (subtables). A
/// directory of version 1 is refused, never misread.
const IDENTITY_VERSION: u32 = 2;
const BACKUP_KIND: &str = "backup";

/// Shard N of a data directory or a backup keeps its files in `shard-N`.
pub const SHARD_DIR_PREFIX: &str = "shard-";

/// The directory of shard `index` in the data directory or backup `dir`.
pub fn shard_dir(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("{SHARD_DIR_PREFIX}{index}"))
}

/// What a directory's identity file says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub shards: usize,
    /// Whether it is a backup's (`kind = backup`).
    pub backup: bool,
}

impl Identity {
    /// The file's text.
    pub fn text(&self) -> String {
        let kind = if self.backup { format!("kind = {BACKUP_KIND}\n") } else { String::new() };
        let body = format!("format = {IDENTITY_MAGIC}\nversion = {IDENTITY_VERSION}\nshards = {}\n{kind}", self.shards);
        format!("{body}crc32c = {:08x}\n", crate::checksum::crc32c(body.as_bytes()))
    }

    /// The identity `text` records, or why it is not a valid identity file.
    pub fn parse(text: &str) -> Result<Identity, String> {
        let Some((body, crc_line)) = text.trim_end_matches('\n').rsplit_once('\n') else {
            return Err("too short".into());
        };
        let body = format!("{body}\n");
        let stored = crc_line.strip_prefix("crc32c = ").ok_or("the last line is not its checksum")?;
        let computed = format!("{:08x}", crate::checksum::crc32c(body.as_bytes()));
        if stored != computed {
            return Err(format!("checksum mismatch: stored {stored}, computed {computed}"));
        }
        let field =
            |key: &str| body.lines().find_map(|line| line.strip_prefix(key).and_then(|rest| rest.strip_prefix(" = ")));
        let required = |key: &str| field(key).ok_or_else(|| format!("no '{key}' line"));
        if required("format")? != IDENTITY_MAGIC {
            return Err("not a Ferrite data directory identity".into());
        }
        let version = required("version")?;
        if version != IDENTITY_VERSION.to_string() {
            return Err(format!("format version {version}; this build reads version {IDENTITY_VERSION}"));
        }
        let shards = required("shards")?.parse().map_err(|_| "the shard count is not a number")?;
        let backup = match field("kind") {
            None => false,
            Some(BACKUP_KIND) => true,
            Some(other) => return Err(format!("unknown kind '{other}'")),
        };
        Ok(Identity { shards, backup })
    }

    /// The identity of the directory `dir`, or why it has none that is valid.
    pub fn read(dir: &Path) -> Result<Identity, String> {
        let file = dir.join(IDENTITY_NAME);
        let text =
            std::fs::read_to_string(&file).map_err(|error| format!("cannot read {}: {error}", file.display()))?;
        Identity::parse(&text).map_err(|reason| format!("{} is not a valid identity file: {reason}", file.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_read_back() {
        for identity in [Identity { shards: 7, backup: false }, Identity { shards: 2, backup: true }] {
            assert_eq!(Identity::parse(&identity.text()), Ok(identity));
        }
        let data = Identity { shards: 1, backup: false }.text();
        assert!(!data.contains("kind"), "a data directory's identity keeps its four lines: {data}");
    }

    /// A foreign file, a newer format or an unknown kind is refused even when its checksum is
    /// right; so is a damaged one.
    #[test]
    fn a_wrong_magic_version_kind_or_checksum_is_refused() {
        let with_crc = |body: &str| format!("{body}crc32c = {:08x}\n", crate::checksum::crc32c(body.as_bytes()));
        let cases = [
            (with_crc("format = something-else\nversion = 2\nshards = 1\n"), "not a Ferrite data directory"),
            (with_crc("format = ferrite-data-dir\nversion = 3\nshards = 1\n"), "format version 3"),
            (with_crc("format = ferrite-data-dir\nversion = 1\nshards = 1\n"), "format version 1"),
            (with_crc("format = ferrite-data-dir\nversion = 2\n"), "no 'shards' line"),
            (with_crc("format = ferrite-data-dir\nversion = 2\nshards = 1\nkind = tape\n"), "unknown kind 'tape'"),
            ("format = ferrite-data-dir\nversion = 2\n".to_string(), "the last line is not its checksum"),
            (String::new(), "too short"),
            (Identity { shards: 1, backup: false }.text().replace("shards = 1", "shards = 4"), "checksum mismatch"),
        ];
        for (text, reason) in cases {
            let error = Identity::parse(&text).expect_err(&text);
            assert!(error.contains(reason), "{text:?}: {error}");
        }
    }
}
