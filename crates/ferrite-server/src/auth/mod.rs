//! Who a client is and what it may do, on a server with a users file (`--users FILE`, `[auth]
//! users_file`). Without one every client may do everything, as on a server before users
//! existed; with one, a session can do nothing but authenticate, and afterwards only what its
//! user's grants allow (default deny). See `docs/security.md`.
//!
//! One `Auth` is shared by every shard. It holds the users (replaced whole on SIGHUP and numbered
//! by a generation, which sessions compare against to refresh the rights they hold), the password
//! verifier (argon2 on its own threads: a shard never spends tens of milliseconds on a KDF), a
//! keyed cache of secrets verified already (a client's connection to each shard, or its
//! reconnections, cost one argon2 run, not one each), and every user's use of its quota.

mod usage;
mod verifier;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use ferrite_auth::{secret, UsersFile};
use foldhash::HashMap;
use ring::hmac;

pub(crate) use usage::{Held, Usage};
pub(crate) use verifier::Verification;
use verifier::Verifier;

/// The shared authentication state of a server.
#[derive(Debug)]
pub(crate) struct Auth {
    /// The users file; `None`: no users, everyone may do everything.
    path: Option<PathBuf>,
    users: RwLock<Arc<UsersFile>>,
    /// Raised by every reload, while it holds the `users` lock: a reader under that lock sees
    /// the users and their generation as one.
    generation: AtomicU64,
    verifier: Option<Verifier>,
    verified: Mutex<Verified>,
    key: hmac::Key,
    pub usage: Usage,
}

/// Secrets argon2 verified against the users file as it is now: tags of `user NUL password`
/// under a key made at start. Only successes are kept, so guessing still pays argon2 every time.
#[derive(Debug, Default)]
struct Verified {
    /// The users file's generation the tags were verified against. A verification against an
    /// older one (still running when the file was reloaded) adds nothing: it checked a password
    /// that may have changed since.
    generation: u64,
    tags: HashMap<String, Vec<u8>>,
}

impl Auth {
    /// No users: every session may do everything.
    pub(crate) fn open() -> Auth {
        Auth::with(None, UsersFile::default(), None)
    }

    /// The users of the file at `path`, or why it cannot be used.
    pub(crate) fn load(path: &Path) -> Result<Auth, String> {
        let users = load_users(path)?;
        let verifier = Verifier::start().map_err(|error| format!("cannot start the password verifier: {error}"))?;
        Ok(Auth::with(Some(path.to_owned()), users, Some(verifier)))
    }

    fn with(path: Option<PathBuf>, users: UsersFile, verifier: Option<Verifier>) -> Auth {
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &ring::rand::SystemRandom::new())
            .expect("the system's random number generator works");
        Auth {
            path,
            users: RwLock::new(Arc::new(users)),
            generation: AtomicU64::new(0),
            verifier,
            verified: Mutex::default(),
            key,
            usage: Usage::default(),
        }
    }

    /// Whether the server has users (and so requires authentication).
    pub(crate) fn enabled(&self) -> bool {
        self.path.is_some()
    }

    pub(crate) fn users_file(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Raised whenever the users change: rights computed under an older one are stale.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The users as they are now.
    pub(crate) fn users(&self) -> Arc<UsersFile> {
        Arc::clone(&self.users.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Reads the users file again and, if it is valid, uses it from now on: rights held by
    /// sessions are recomputed at their next request, and secrets verified before are verified
    /// again. An invalid file changes nothing. Returns how many users there are now.
    pub(crate) fn reload(&self) -> Result<usize, String> {
        let Some(path) = &self.path else { return Ok(0) };
        let users = load_users(path)?;
        let count = users.users.len();
        let mut current = self.users.write().unwrap_or_else(PoisonError::into_inner);
        let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        *current = Arc::new(users);
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        *verified = Verified { generation, tags: HashMap::default() };
        Ok(count)
    }

    /// The users as they are now, and their generation.
    fn users_and_generation(&self) -> (Arc<UsersFile>, u64) {
        let users = self.users.read().unwrap_or_else(PoisonError::into_inner);
        (Arc::clone(&users), self.generation.load(Ordering::Acquire))
    }

    /// The user a client certificate (by fingerprint) identifies, if any.
    pub(crate) fn user_for_certificate(&self, fingerprint: &str) -> Option<Arc<str>> {
        self.users().user_by_certificate(fingerprint).map(|(name, _)| Arc::from(name))
    }

    fn tag_message(user: &str, password: &[u8]) -> Vec<u8> {
        [user.as_bytes(), &[0], password].concat()
    }

    /// Whether `password` is `user`'s, as argon2 said since the last reload.
    pub(crate) fn verified_before(&self, user: &str, password: &[u8]) -> bool {
        let verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        let tag = verified.tags.get(user);
        tag.is_some_and(|tag| hmac::verify(&self.key, &Auth::tag_message(user, password), tag).is_ok())
    }

    /// Starts verifying `password` for `user` against the users as they are now, on the
    /// verifier's threads; the verification's completion is woken when the outcome is known. A
    /// match is remembered only if the users file has not been reloaded meanwhile.
    pub(crate) fn verify(self: &Arc<Self>, user: &str, password: &[u8]) -> Result<Arc<Verification>, String> {
        let Some(verifier) = &self.verifier else { return Err("this server has no users".into()) };
        let (users, generation) = self.users_and_generation();
        let hash = users.user(user).and_then(|user| user.password.clone());
        let auth = Arc::clone(self);
        let (name, secret_bytes) = (user.to_owned(), password.to_vec());
        verifier.submit(user, generation, hash, password.to_vec(), move |matched| {
            let mut verified = auth.verified.lock().unwrap_or_else(PoisonError::into_inner);
            if matched && verified.generation == generation {
                let tag = hmac::sign(&auth.key, &Auth::tag_message(&name, &secret_bytes));
                verified.tags.insert(name, tag.as_ref().to_vec());
            }
        })
    }
}

/// Reads the users file at `path`, warning if other accounts may read or write it.
fn load_users(path: &Path) -> Result<UsersFile, String> {
    let users = UsersFile::load(path).map_err(|error| error.to_string())?;
    if let Some(warning) = ferrite_auth::exposure_warning(path) {
        tracing::warn!("{warning}");
    }
    Ok(users)
}

/// The hash a password of an unknown user is checked against, so that a wrong user name takes as
/// long to refuse as a wrong password (no user enumeration by timing).
fn decoy_hash() -> String {
    let mut secret_bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret_bytes)
        .expect("the system's random number generator works");
    secret::hash_secret(&secret_bytes).expect("argon2 hashes a random secret")
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &[u8] = b"the old password";
    const NEW: &[u8] = b"the new password";

    fn save_users(path: &Path, password: &[u8]) {
        let mut users = UsersFile::default();
        users.add("alice", Some(secret::hash_secret(password).expect("hash")), None).expect("add");
        users.save(path).expect("save");
    }

    fn users_file(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("ferrite-auth-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir.join("users.toml")
    }

    /// A verification of the old password still queued when the users file is reloaded must
    /// not put the old secret back into the cache the reload cleared: new connections would log
    /// in with the old password until the next reload.
    #[test]
    fn a_verification_against_an_older_users_file_is_not_trusted() {
        let path = users_file("stale");
        save_users(&path, OLD);
        let auth = Arc::new(Auth::load(&path).expect("loads"));
        let release = auth.verifier.as_ref().expect("a verifier").occupy();
        let in_flight = auth.verify("alice", OLD).expect("queued");
        save_users(&path, NEW);
        auth.reload().expect("reloads");
        drop(release);
        in_flight.wait();
        assert!(!auth.verified_before("alice", OLD), "the old password is trusted after the reload");
        assert!(!in_flight.answers("alice", auth.generation()), "its outcome counts after the reload");
        std::fs::remove_dir_all(path.parent().expect("dir")).expect("cleaned");
    }
}
