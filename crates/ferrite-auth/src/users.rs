//! The users file (TOML), named by `ferrite-server --users FILE` or `[auth] users_file`:
//!
//! ```toml
//! [users.alice]
//! password = "$argon2id$v=19$m=19456,t=2,p=1$..."   # set by `ferrite user add`
//! grants = [{ pools = "orders*", rights = ["read", "write"] }]
//! quota = { connections = 16, pools = 4, pool_bytes = 1073741824 }
//!
//! [users.backup-agent]
//! certificate_sha256 = "9f86d0..."                  # `ferrite user add --certificate FILE`
//! grants = [{ pools = "*", rights = ["admin"] }]
//! ```
//!
//! A user proves who it is with its password, or with the client certificate whose fingerprint
//! it carries (over mutual TLS). What it may do is the union of its grants; nothing else is
//! allowed. A file is validated whole when it is read: one bad entry refuses the file, so a
//! typing error never silently opens or closes access.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::grant::{Grant, PoolPattern};
use crate::rights::Rights;
use crate::secret;

/// The longest user name.
pub const USER_NAME_BYTES_MAX: usize = 64;

/// Why a users file cannot be read, used or written.
#[derive(Debug, thiserror::Error)]
pub enum UsersError {
    #[error("cannot read the users file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write the users file {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("users file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("{0}")]
    Edit(String),
}

/// How much one user may hold; `None`: no limit of its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Connections open at once, over every shard and both protocols.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<u64>,
    /// Pools it created that still exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<u64>,
    /// The sizes of those pools, added up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_bytes: Option<u64>,
}

impl Quota {
    fn is_unlimited(&self) -> bool {
        *self == Quota::default()
    }
}

/// One user: how it proves itself, what it may do, how much it may hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// The argon2id PHC string of its password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The fingerprint of the client certificate that identifies it over mutual TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grants: Vec<Grant>,
    #[serde(default, skip_serializing_if = "Quota::is_unlimited")]
    pub quota: Quota,
}

impl User {
    /// Everything this user may do on pool `pool`.
    pub fn rights_on(&self, pool: &str) -> Rights {
        self.grants
            .iter()
            .filter(|grant| grant.pools.matches(pool))
            .fold(Rights::NONE, |rights, grant| rights.union(grant.rights))
    }

    /// What this user may do on every pool there is or will be (its grants on `*`).
    pub fn rights_everywhere(&self) -> Rights {
        self.grants
            .iter()
            .filter(|grant| grant.pools.is_everything())
            .fold(Rights::NONE, |rights, grant| rights.union(grant.rights))
    }
}

/// The whole file: users by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsersFile {
    #[serde(default)]
    pub users: BTreeMap<String, User>,
}

/// Checks a user name: 1 to 64 bytes of letters, digits, `_`, `-`, `.` and `@`.
pub fn check_user_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= USER_NAME_BYTES_MAX
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.@".contains(&b));
    if !valid {
        return Err(format!(
            "user name '{name}' must be 1 to {USER_NAME_BYTES_MAX} letters, digits, '_', '-', '.' or '@'"
        ));
    }
    Ok(())
}

impl UsersFile {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<UsersFile, UsersError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| UsersError::Read { path: path.to_owned(), source })?;
        UsersFile::parse(&text).map_err(|message| UsersError::Invalid { path: path.to_owned(), message })
    }

    /// Reads the file at `path`, or an empty one if there is none yet (for `ferrite user add`).
    pub fn load_or_empty(path: &Path) -> Result<UsersFile, UsersError> {
        match std::fs::metadata(path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(UsersFile::default()),
            _ => UsersFile::load(path),
        }
    }

    /// Parses and validates a file's text.
    pub fn parse(text: &str) -> Result<UsersFile, String> {
        let file: UsersFile = toml::from_str(text).map_err(|error| error.to_string())?;
        file.validate()?;
        Ok(file)
    }

    /// Checks every user: its name, that it has a way to prove itself, that its hash and
    /// fingerprint are well formed, and that no two users share a certificate.
    pub fn validate(&self) -> Result<(), String> {
        let mut certificates = BTreeMap::new();
        for (name, user) in &self.users {
            check_user_name(name)?;
            if user.password.is_none() && user.certificate_sha256.is_none() {
                return Err(format!("user '{name}' has neither a password nor a certificate_sha256"));
            }
            if let Some(password) = &user.password {
                secret::check_hash(password).map_err(|message| format!("user '{name}': {message}"))?;
            }
            if let Some(fingerprint) = &user.certificate_sha256 {
                secret::check_fingerprint(fingerprint).map_err(|message| format!("user '{name}': {message}"))?;
                if let Some(other) = certificates.insert(fingerprint.as_str(), name.as_str()) {
                    return Err(format!("users '{other}' and '{name}' have the same certificate_sha256"));
                }
            }
        }
        Ok(())
    }

    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.get(name)
    }

    /// The user the client certificate with this fingerprint identifies.
    pub fn user_by_certificate(&self, fingerprint: &str) -> Option<(&str, &User)> {
        self.users
            .iter()
            .find(|(_, user)| user.certificate_sha256.as_deref() == Some(fingerprint))
            .map(|(name, user)| (name.as_str(), user))
    }

    /// Adds user `name` with a password hash and/or a certificate fingerprint; refuses a name
    /// that exists already.
    pub fn add(
        &mut self,
        name: &str,
        password: Option<String>,
        certificate_sha256: Option<String>,
    ) -> Result<(), UsersError> {
        check_user_name(name).map_err(UsersError::Edit)?;
        if self.users.contains_key(name) {
            return Err(UsersError::Edit(format!(
                "user '{name}' exists already (delete it first, or use 'ferrite user passwd')"
            )));
        }
        let user = User { password, certificate_sha256, ..User::default() };
        self.users.insert(name.to_owned(), user);
        self.validate().map_err(|message| {
            self.users.remove(name);
            UsersError::Edit(message)
        })
    }

    /// Replaces user `name`'s password hash.
    pub fn set_password(&mut self, name: &str, password: String) -> Result<(), UsersError> {
        self.user_mut(name)?.password = Some(password);
        self.validate().map_err(UsersError::Edit)
    }

    pub fn remove(&mut self, name: &str) -> Result<(), UsersError> {
        self.users.remove(name).map(drop).ok_or_else(|| no_such_user(name))
    }

    /// Gives `name` `rights` on the pools `pattern` names, added to any it has there already.
    pub fn grant(&mut self, name: &str, pattern: PoolPattern, rights: Rights) -> Result<(), UsersError> {
        let user = self.user_mut(name)?;
        match user.grants.iter_mut().find(|grant| grant.pools == pattern) {
            Some(grant) => grant.rights = grant.rights.union(rights),
            None => user.grants.push(Grant { pools: pattern, rights }),
        }
        Ok(())
    }

    /// Takes `rights` on `pattern` back from `name` (the grant goes once it has none left).
    /// Only a grant on exactly this pattern is changed: revoking `orders` leaves `orders*`.
    pub fn revoke(&mut self, name: &str, pattern: &PoolPattern, rights: Rights) -> Result<(), UsersError> {
        let user = self.user_mut(name)?;
        let Some(grant) = user.grants.iter_mut().find(|grant| grant.pools == *pattern) else {
            return Err(UsersError::Edit(format!("user '{name}' has no grant on '{pattern}'")));
        };
        grant.rights = grant.rights.without(rights);
        user.grants.retain(|grant| !grant.rights.is_empty());
        Ok(())
    }

    /// Sets user `name`'s quota.
    pub fn set_quota(&mut self, name: &str, quota: Quota) -> Result<(), UsersError> {
        self.user_mut(name)?.quota = quota;
        Ok(())
    }

    fn user_mut(&mut self, name: &str) -> Result<&mut User, UsersError> {
        self.users.get_mut(name).ok_or_else(|| no_such_user(name))
    }

    /// Writes the file to `path` whole or not at all: a temporary file beside it, synced, then
    /// renamed over it, and the directory synced. The temporary file gets a random name and is
    /// created anew (never opened if something is there already), readable by its owner only:
    /// a file left at that name would keep its own mode, and a link planted there would be
    /// written through, and either would then be renamed into the users file's place.
    pub fn save(&self, path: &Path) -> Result<(), UsersError> {
        let failed = |source| UsersError::Write { path: path.to_owned(), source };
        let text = toml::to_string(self).map_err(|error| failed(std::io::Error::other(error)))?;
        let directory = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let file_name = path.file_name().ok_or_else(|| failed(std::io::Error::other("the path names no file")))?;
        let (temporary, mut file) = create_temporary(directory, &file_name.to_string_lossy()).map_err(failed)?;
        let written = file
            .write_all(HEADER.as_bytes())
            .and_then(|()| file.write_all(text.as_bytes()))
            .and_then(|()| file.sync_all())
            .and_then(|()| std::fs::rename(&temporary, path));
        if let Err(error) = written {
            // Nothing refers to it yet; a failure to remove it only leaves an owner-only file.
            let _ = std::fs::remove_file(&temporary);
            return Err(failed(error));
        }
        std::fs::File::open(directory).and_then(|directory| directory.sync_all()).map_err(failed)
    }
}

/// How many random names [`create_temporary`] tries before it gives up: a clash of 64 random
/// bits happens only if someone creates such names on purpose.
const TEMPORARY_NAME_ATTEMPTS: usize = 8;

/// Creates `directory/.NAME.RANDOM.tmp`, new and readable by its owner only.
fn create_temporary(directory: &Path, name: &str) -> std::io::Result<(PathBuf, std::fs::File)> {
    let random = ring::rand::SystemRandom::new();
    for _ in 0..TEMPORARY_NAME_ATTEMPTS {
        let suffix: [u8; 8] = ring::rand::generate(&random)
            .map_err(|_| std::io::Error::other("the system's random number generator failed"))?
            .expose();
        let suffix: String = suffix.iter().map(|byte| format!("{byte:02x}")).collect();
        let temporary = directory.join(format!(".{name}.{suffix}.tmp"));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(&temporary) {
            Ok(file) => return Ok((temporary, file)),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(error) => return Err(error),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AlreadyExists,
        format!("{TEMPORARY_NAME_ATTEMPTS} random temporary names in {} were all taken", directory.display()),
    ))
}

/// The comment every saved file starts with.
const HEADER: &str = "# Ferrite users. Edit with `ferrite user`; the server reads this at start and on SIGHUP.\n\n";

fn no_such_user(name: &str) -> UsersError {
    UsersError::Edit(format!("no user named '{name}'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint(byte: char) -> String {
        std::iter::repeat_n(byte, 64).collect()
    }

    fn pattern(text: &str) -> PoolPattern {
        PoolPattern::new(text).expect("valid pattern")
    }

    #[test]
    fn grants_add_up_and_revokes_take_back_exactly() {
        let mut file = UsersFile::default();
        file.add("alice", None, Some(fingerprint('a'))).expect("added");
        file.grant("alice", pattern("orders*"), Rights::READ).expect("granted");
        file.grant("alice", pattern("orders*"), Rights::WRITE).expect("granted");
        file.grant("alice", pattern("*"), Rights::INVOKE).expect("granted");
        let alice = file.user("alice").expect("present");
        assert_eq!(alice.rights_on("orders-1").to_string(), "read,write,invoke");
        assert_eq!(alice.rights_on("billing").to_string(), "invoke");
        assert_eq!(alice.rights_everywhere(), Rights::INVOKE);

        file.revoke("alice", &pattern("orders*"), Rights::WRITE).expect("revoked");
        assert_eq!(file.user("alice").expect("present").rights_on("orders-1").to_string(), "read,invoke");
        file.revoke("alice", &pattern("orders*"), Rights::READ).expect("revoked");
        assert_eq!(file.user("alice").expect("present").grants.len(), 1, "an empty grant goes");
        assert!(file.revoke("alice", &pattern("orders"), Rights::READ).is_err(), "only exact patterns");
        assert!(file.grant("bob", pattern("*"), Rights::READ).is_err());
    }

    #[test]
    fn a_saved_file_loads_back_equal_and_is_private() {
        let directory = std::env::temp_dir().join(format!("ferrite-auth-{}", std::process::id()));
        std::fs::create_dir_all(&directory).expect("dir");
        let path = directory.join("users.toml");
        let mut file = UsersFile::default();
        let phc = secret::hash_secret(b"a long secret").expect("hash");
        file.add("alice", Some(phc), None).expect("added");
        file.grant("alice", pattern("orders*"), Rights::parse_list("read,write").expect("rights")).expect("granted");
        file.set_quota("alice", Quota { connections: Some(3), pools: Some(2), pool_bytes: None }).expect("quota");
        file.add("agent", None, Some(fingerprint('b'))).expect("added");
        file.save(&path).expect("saved");
        assert_eq!(UsersFile::load(&path).expect("loads"), file);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("metadata").permissions().mode();
            assert_eq!(mode & 0o077, 0, "only its owner may read a users file");
        }
        std::fs::remove_dir_all(&directory).expect("cleaned");
    }

    #[test]
    fn invalid_files_are_refused_naming_what_is_wrong() {
        let cases = [
            ("[users.alice]\ngrants = []\n", "neither a password"),
            ("[users.alice]\npassword = \"plain\"\n", "not a PHC"),
            ("[users.\"bad name\"]\ncertificate_sha256 = \"x\"\n", "user name"),
            ("[users.alice]\ncertificate_sha256 = \"abc\"\n", "64 lowercase hex"),
            ("[users.alice]\ncertificate_sha256 = \"abc\"\nrole = \"root\"\n", "unknown field"),
            (
                "[users.alice]\ncertificate_sha256 = \"abc\"\ngrants = [{ pools = \"a*b\", rights = [\"read\"] }]\n",
                "may only end",
            ),
            (
                "[users.alice]\ncertificate_sha256 = \"abc\"\ngrants = [{ pools = \"a\", rights = [\"root\"] }]\n",
                "unknown right",
            ),
        ];
        for (text, expected) in cases {
            let error = UsersFile::parse(text).expect_err(text);
            assert!(error.contains(expected), "{text:?} gave {error:?}, expected {expected:?}");
        }
        let shared = format!(
            "[users.a]\ncertificate_sha256 = \"{0}\"\n[users.b]\ncertificate_sha256 = \"{0}\"\n",
            fingerprint('c')
        );
        assert!(UsersFile::parse(&shared).expect_err("shared").contains("same certificate"));
    }

    #[test]
    fn a_certificate_names_its_user() {
        let mut file = UsersFile::default();
        file.add("agent", None, Some(fingerprint('d'))).expect("added");
        assert_eq!(file.user_by_certificate(&fingerprint('d')).map(|(name, _)| name), Some("agent"));
        assert!(file.user_by_certificate(&fingerprint('e')).is_none());
    }
}
