//! Authentication and authorization of requests, on the shard's thread. Rights come from the
//! shared [`Auth`](crate::auth::Auth); a session keeps what it may do on each pool it has open, so
//! checking a request is a lookup, and recomputes it when the users file is reloaded.
//!
//! What each request needs: `read` for get, count, attributes and find; `write` for put and
//! erase; `invoke` plus `read` (read-only calls) or `write` (others) for plugin calls, since a
//! plugin acts with its caller's rights; `admin` for creating and deleting pools, and `admin` on
//! every pool (`*`) for a backup and for the administration of a cluster's groups. What a node
//! and its cluster are (`node_info`, `cluster_map`) needs no right. Opening a pool needs any right on it; listing shows only the
//! pools the user has rights on. A direct transfer's pieces and commit need its right again (the
//! users file may have been reloaded since it opened); one that lost it is ended.

use std::sync::Arc;

use ferrite_auth::Rights;
use ferrite_proto::{Credentials, ErrorCode, InvokeFlags, PoolHandle, Request, PROTOCOL_VERSION};

use super::{Accepted, Failure, ShardState};
use crate::session::{Identity, Session};

/// What a refused password is told: the same for an unknown user and a wrong password, so
/// that the answer does not reveal which users exist.
pub(crate) const WRONG_PASSWORD_MESSAGE: &str = "wrong user or password";

/// Where an authentication stands.
pub(crate) enum Authenticating {
    /// The session now acts for the user.
    Done,
    Refused(Failure),
    /// The password is being verified; the request runs again once this completes.
    Pending(Arc<crate::completion::Completion>),
}

impl ShardState {
    /// What `identity` may do on the pool named `pool`.
    pub(crate) fn rights_on(&self, identity: &Identity, pool: &str) -> Rights {
        match identity {
            Identity::Everyone | Identity::Server => Rights::ALL,
            Identity::Nobody => Rights::NONE,
            Identity::User(name) => self.auth.users().user(name).map_or(Rights::NONE, |user| user.rights_on(pool)),
        }
    }

    /// What `identity` may do on every pool, present and future.
    fn rights_everywhere(&self, identity: &Identity) -> Rights {
        match identity {
            Identity::Everyone | Identity::Server => Rights::ALL,
            Identity::Nobody => Rights::NONE,
            Identity::User(name) => self.auth.users().user(name).map_or(Rights::NONE, |user| user.rights_everywhere()),
        }
    }

    /// Recomputes the rights `session` holds on its open pools if its identity or the users
    /// changed since they were computed.
    pub(crate) fn refresh_rights(&self, session: &mut Session) {
        let generation = self.auth.generation();
        let identity = session.identity.clone();
        session.refresh_rights(|pool| match self.pools.get(pool) {
            Some(pool) => self.rights_on(&identity, &pool.name),
            None => Rights::NONE,
        });
        session.rights_generation = generation;
    }

    /// Sets who `session` acts for, moving its connection count from its old user to the new one
    /// (refused past the new user's connection quota, leaving the session as it was).
    pub(crate) fn set_identity(&mut self, session: &mut Session, identity: Identity) -> Result<(), Failure> {
        if session.identity == identity {
            return Ok(());
        }
        if let Identity::User(name) = &identity {
            let quota = self.auth.users().user(name).map(|user| user.quota.clone()).unwrap_or_default();
            self.auth.usage.connect(name, &quota).map_err(|message| Failure::new(ErrorCode::QuotaExceeded, message))?;
        }
        if let Some(name) = session.identity.user() {
            self.auth.usage.disconnect(name);
        }
        session.identity = identity;
        self.refresh_rights(session);
        Ok(())
    }

    /// The identity a RESP session starts with (it has no hello): everyone on a server without
    /// users; otherwise the user its client certificate names, or nobody until it authenticates.
    pub(crate) fn begin_identity(&mut self, session: &mut Session) -> Result<(), Failure> {
        let identity = if !self.auth.enabled() {
            Identity::Everyone
        } else {
            match session.certificate.as_deref().and_then(|fingerprint| self.auth.user_for_certificate(fingerprint)) {
                Some(user) => Identity::User(user),
                None => Identity::Nobody,
            }
        };
        self.set_identity(session, identity)
    }

    /// Authenticates `session` as `user` with `password`: at once if this secret was verified
    /// before, otherwise on the verifier's threads (then [`Authenticating::Pending`], and the
    /// caller runs its request again when the completion wakes it). A verification against a
    /// users file reloaded since is dropped and the password verified again: the password may
    /// have changed meanwhile.
    pub(crate) fn authenticate(&mut self, session: &mut Session, user: &str, password: &[u8]) -> Authenticating {
        if !self.auth.enabled() {
            return Authenticating::Refused(Failure::new(
                ErrorCode::AuthenticationFailed,
                "this server has no users to authenticate as (it was started without --users)",
            ));
        }
        let matched = match session.verification.take() {
            Some(verification) if verification.answers(user, self.auth.generation()) => match verification.outcome() {
                Some(matched) => matched,
                None => {
                    let completion = Arc::clone(&verification.completion);
                    session.verification = Some(verification);
                    return Authenticating::Pending(completion);
                }
            },
            _ if self.auth.verified_before(user, password) => true,
            _ => match self.auth.verify(user, password) {
                Ok(verification) => {
                    let completion = Arc::clone(&verification.completion);
                    session.verification = Some(verification);
                    return Authenticating::Pending(completion);
                }
                Err(message) => return Authenticating::Refused(Failure::new(ErrorCode::AuthenticationFailed, message)),
            },
        };
        if !matched {
            self.stats.authentication_failures += 1;
            tracing::warn!(shard = self.index, user, "authentication failed");
            return Authenticating::Refused(Failure::new(ErrorCode::AuthenticationFailed, WRONG_PASSWORD_MESSAGE));
        }
        match self.set_identity(session, Identity::User(Arc::from(user))) {
            Ok(()) => Authenticating::Done,
            Err(failure) => Authenticating::Refused(failure),
        }
    }

    /// Authenticates a native `hello` on a server with users: `None` once the session acts for a
    /// user (the hello is then answered as usual), the refusal (which closes the connection), or
    /// the wait for the verifier.
    pub(super) fn authenticate_hello(
        &mut self,
        version: u16,
        auth: &[u8],
        session: &mut Session,
    ) -> Option<Result<Accepted, Failure>> {
        if !self.auth.enabled() || version != PROTOCOL_VERSION {
            return None;
        }
        let refused = |failure: Failure| Some(Err(Failure { close: true, ..failure }));
        let credentials = match Credentials::decode(auth) {
            Ok(credentials) => credentials,
            Err(error) => {
                return refused(Failure::new(
                    ErrorCode::AuthenticationFailed,
                    format!("malformed credentials: {error}"),
                ))
            }
        };
        let Some(credentials) = credentials else {
            let by_certificate =
                session.certificate.as_deref().and_then(|fingerprint| self.auth.user_for_certificate(fingerprint));
            if let Some(user) = by_certificate {
                return match self.set_identity(session, Identity::User(user)) {
                    Ok(()) => None,
                    Err(failure) => refused(failure),
                };
            }
            self.stats.authentication_failures += 1;
            return refused(Failure::new(
                ErrorCode::AuthenticationFailed,
                "this server requires a user: connect with a user name and password, or a client certificate the \
                 users file names",
            ));
        };
        match self.authenticate(session, credentials.user, credentials.password) {
            Authenticating::Done => None,
            Authenticating::Refused(failure) => refused(failure),
            Authenticating::Pending(completion) => Some(Ok(Accepted::Blocked(completion))),
        }
    }

    /// Refuses `request` unless the session's identity may make it. Requests on a pool handle
    /// the session has not open pass here and fail where the handle is looked up.
    pub(crate) fn authorize(&mut self, request: &Request<'_>, session: &mut Session) -> Result<(), Failure> {
        if matches!(session.identity, Identity::Everyone | Identity::Server) {
            return Ok(());
        }
        if session.rights_generation != self.auth.generation() {
            self.refresh_rights(session);
        }
        let denied = match *request {
            Request::Hello { .. }
            | Request::ClosePool { .. }
            | Request::ListPools
            | Request::DescribePools { .. }
            | Request::GetStatistics
            | Request::NodeInfo
            | Request::ClusterMap => {
                return match session.identity {
                    Identity::Nobody if !matches!(request, Request::Hello { .. }) => Err(self.deny_unauthenticated()),
                    _ => Ok(()),
                }
            }
            Request::CreatePool { name, .. } | Request::DeletePool { name } | Request::ConfigurePool { name, .. } => {
                (!self.rights_on(&session.identity, name).contains(Rights::ADMIN)).then(|| ("admin", name.to_owned()))
            }
            Request::OpenPool { name } => {
                self.rights_on(&session.identity, name).is_empty().then(|| ("any", name.to_owned()))
            }
            Request::Backup { .. } | Request::ClusterAdmin(_) => {
                (!self.rights_everywhere(&session.identity).contains(Rights::ADMIN)).then(|| ("admin", "*".to_owned()))
            }
            Request::Put { pool, .. }
            | Request::Erase { pool, .. }
            | Request::PutDirect { pool, .. }
            | Request::PutOffset { pool, .. } => self.lacks(session, pool, Rights::WRITE),
            Request::GetDirect { pool, .. } => self.lacks(session, pool, Rights::READ),
            Request::DirectWrite { .. } | Request::DirectRead { .. } | Request::EndTransfer { .. } => {
                return self.authorize_transfer(request, session);
            }
            Request::Get { pool, .. }
            | Request::GetAttribute { pool, .. }
            | Request::Count { pool }
            | Request::Find { pool, .. } => self.lacks(session, pool, Rights::READ),
            Request::InvokeAdo { pool, flags, .. } => {
                let data = if flags.contains(InvokeFlags::READ_ONLY) { Rights::READ } else { Rights::WRITE };
                self.lacks(session, pool, Rights::INVOKE.union(data))
            }
            Request::InvokePutAdo { pool, .. } => self.lacks(session, pool, Rights::INVOKE.union(Rights::WRITE)),
        };
        match denied {
            None => Ok(()),
            Some((right, pool)) => Err(self.deny(session, &format!("{right} right"), &format!("pool '{pool}'"))),
        }
    }

    /// Refuses a piece or the commit of a direct transfer whose session no longer holds the
    /// right the transfer needs (the users file was reloaded since it opened), and ends the
    /// transfer: a read gives its key back to writers, a put drops its staged value.
    fn authorize_transfer(&mut self, request: &Request<'_>, session: &mut Session) -> Result<(), Failure> {
        if session.identity == Identity::Nobody {
            return Err(self.deny_unauthenticated());
        }
        let Some((transfer, pool, needed)) = session.transfers.right_needed(request) else { return Ok(()) };
        let Some((right, name)) = self.lacks(session, pool, needed) else { return Ok(()) };
        self.drop_transfer(transfer, session);
        let failure = self.deny(session, &format!("{right} right"), &format!("pool '{name}'"));
        // In words a RESP client's user understands too: its long `SET` is a transfer it never named.
        let ended = match needed == Rights::READ {
            true => "the direct read was ended",
            false => "the value being written was dropped",
        };
        Err(Failure { message: format!("{}; {ended}", failure.message), ..failure })
    }

    /// Whether `session` may make a request that reads (or `writes`) a key of `pool`, and so may
    /// wait for a key another session holds: not before its hello, nor on a pool it has not
    /// open, nor without the right. A refused request is answered at once, so that no session
    /// learns from a delay which keys other sessions hold.
    pub(crate) fn may_wait(&mut self, session: &mut Session, pool: PoolHandle, writes: bool) -> bool {
        if !session.handshaken || !session.is_open(pool) {
            return false;
        }
        if matches!(session.identity, Identity::Everyone | Identity::Server) {
            return true;
        }
        if session.rights_generation != self.auth.generation() {
            self.refresh_rights(session);
        }
        let needed = if writes { Rights::WRITE } else { Rights::READ };
        self.lacks(session, pool, needed).is_none()
    }

    /// The right (by name) and pool `session` lacks for `needed` on `pool`, if it lacks one.
    pub(crate) fn lacks(&self, session: &Session, pool: PoolHandle, needed: Rights) -> Option<(&'static str, String)> {
        let held = session.rights(pool)?;
        if held.contains(needed) {
            return None;
        }
        let missing = needed.without(held).names().next().unwrap_or("any");
        Some((missing, self.pools.get(pool).map_or_else(String::new, |pool| pool.name.clone())))
    }

    /// Refuses unless the session holds `needed` on its open pool `pool` (for requests answered
    /// outside [`Self::execute`], such as RESP `SCAN` steps).
    pub(crate) fn require(&mut self, session: &mut Session, pool: PoolHandle, needed: Rights) -> Result<(), Failure> {
        if session.rights_generation != self.auth.generation() {
            self.refresh_rights(session);
        }
        match self.lacks(session, pool, needed) {
            None => Ok(()),
            Some((right, name)) => Err(self.deny(session, &format!("{right} right"), &format!("pool '{name}'"))),
        }
    }

    /// Every user's holdings and quota as `get_statistics` counters (`user.NAME.connections`,
    /// `user.NAME.connections_max` where the quota sets one, and the same for `pools` and
    /// `pool_bytes`), kept in `user_statistics` for the response to borrow. Shard 0 reports them
    /// (the counts are the server's); a session acting for a user sees only its own unless it
    /// has `admin` on every pool.
    pub(crate) fn gather_user_statistics(&mut self, session: &Session) {
        self.user_statistics.clear();
        if self.index != 0 || !self.auth.enabled() {
            return;
        }
        let everyone = match &session.identity {
            Identity::User(_) => self.rights_everywhere(&session.identity).contains(Rights::ADMIN),
            Identity::Everyone | Identity::Server => true,
            Identity::Nobody => return,
        };
        let users = self.auth.users();
        let held: foldhash::HashMap<String, crate::auth::Held> = self.auth.usage.snapshot().into_iter().collect();
        for (name, user) in &users.users {
            if !everyone && session.identity.user() != Some(name.as_str()) {
                continue;
            }
            let now = held.get(name).copied().unwrap_or_default();
            let quota = &user.quota;
            for (field, value, max) in [
                ("connections", now.connections, quota.connections),
                ("pools", now.pools, quota.pools),
                ("pool_bytes", now.pool_bytes, quota.pool_bytes),
            ] {
                self.user_statistics.push((format!("user.{name}.{field}"), value));
                if let Some(max) = max {
                    self.user_statistics.push((format!("user.{name}.{field}_max"), max));
                }
            }
        }
    }

    /// Counts and describes a request refused for want of `what` (a right) on `on` (a pool).
    fn deny(&mut self, session: &Session, what: &str, on: &str) -> Failure {
        match session.identity.user() {
            Some(user) => {
                self.stats.requests_denied += 1;
                Failure::new(ErrorCode::PermissionDenied, format!("user '{user}' has no {what} on {on}"))
            }
            None => self.deny_unauthenticated(),
        }
    }

    /// Counts and describes a request of a session that acts for no user yet.
    fn deny_unauthenticated(&mut self) -> Failure {
        self.stats.requests_denied += 1;
        Failure::new(
            ErrorCode::PermissionDenied,
            "authenticate first: this session acts for no user, and may do nothing else",
        )
    }
}
