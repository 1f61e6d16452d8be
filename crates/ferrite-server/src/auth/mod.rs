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
    /// Raised by every reload.
    generation: AtomicU64,
    verifier: Option<Verifier>,
    /// Tags of `user NUL password` under a key made at start, for secrets argon2 verified since
    /// the last reload. Only successes are kept, so guessing still pays argon2 every time.
    verified: Mutex<HashMap<String, Vec<u8>>>,
    key: hmac::Key,
    pub usage: Usage,
}

impl Auth {
    /// No users: every session may do everything.
    pub(crate) fn open() -> Auth {
        Auth::with(None, UsersFile::default(), None)
    }

    /// The users of the file at `path`, or why it cannot be used.
    pub(crate) fn load(path: &Path) -> Result<Auth, String> {
        let users = UsersFile::load(path).map_err(|error| error.to_string())?;
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
        let users = UsersFile::load(path).map_err(|error| error.to_string())?;
        let count = users.users.len();
        *self.users.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(users);
        self.verified.lock().unwrap_or_else(PoisonError::into_inner).clear();
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(count)
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
        verified.get(user).is_some_and(|tag| hmac::verify(&self.key, &Auth::tag_message(user, password), tag).is_ok())
    }

    /// Starts verifying `password` for `user` on the verifier's threads; the verification's
    /// completion is woken when the outcome is known.
    pub(crate) fn verify(self: &Arc<Self>, user: &str, password: &[u8]) -> Result<Arc<Verification>, String> {
        let Some(verifier) = &self.verifier else { return Err("this server has no users".into()) };
        let users = self.users();
        let hash = users.user(user).and_then(|user| user.password.clone());
        let auth = Arc::clone(self);
        let (name, secret_bytes) = (user.to_owned(), password.to_vec());
        verifier.submit(user, hash, password.to_vec(), move |matched| {
            if matched {
                let tag = hmac::sign(&auth.key, &Auth::tag_message(&name, &secret_bytes));
                auth.verified.lock().unwrap_or_else(PoisonError::into_inner).insert(name, tag.as_ref().to_vec());
            }
        })
    }
}

/// The hash a password of an unknown user is checked against, so that a wrong user name takes as
/// long to refuse as a wrong password (no user enumeration by timing).
fn decoy_hash() -> String {
    let mut secret_bytes = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret_bytes)
        .expect("the system's random number generator works");
    secret::hash_secret(&secret_bytes).expect("argon2 hashes a random secret")
}
