//! Ferrite's users file: who may connect, how each proves it (a password kept as an argon2id
//! hash, or a client certificate's fingerprint), what each may do to which pools, and how much
//! each may hold. The server reads it at start and again on SIGHUP; `ferrite user` edits it. Both
//! go through this crate, so they can never disagree on its format.
//!
//! - [`rights`]: the four rights a grant gives (read, write, invoke, admin).
//! - [`grant`]: a grant of rights on pools named exactly or by prefix.
//! - [`users`]: the file itself: load, validate, look up, edit, save.
//! - [`secret`]: hashing and verifying secrets, fingerprinting certificates.
//! - [`exposure`]: whether other accounts of the machine may read or write the file.

pub mod exposure;
pub mod grant;
pub mod rights;
pub mod secret;
pub mod users;

pub use exposure::exposure_warning;
pub use grant::{Grant, PoolPattern};
pub use rights::Rights;
pub use users::{Quota, User, UsersError, UsersFile};
