//! A shard's plugin hosts over their lives: started on demand, polled for what they send, told
//! of pool events, and stopped gracefully when their pool closes or is deleted.

use std::time::Instant;

use ferrite_ado::{AdoLink, LinkEvent};
use ferrite_proto::{ErrorCode, PoolHandle};

use super::{Failure, ShardState};
use crate::ado::PoolCalls;

/// How long a stopping host may take to close its plugins before it is killed.
pub(crate) const HOST_STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

impl ShardState {
    /// Tells `pool`'s running host (if any) of a change made outside any call: `key` erased
    /// (`FERRITE_EVENT_ERASE`) or its value's length changed by a put (`FERRITE_EVENT_RESIZE`), so
    /// plugins that keep state about keys can follow. A host that cannot take the event now
    /// misses it: events are advice, not part of the pool's state.
    pub(crate) fn tell_plugins(&mut self, pool: PoolHandle, event: u32, key: &[u8]) {
        if let Some(calls) = self.calls.get_mut(&pool) {
            if let Err(error) = calls.link.pool_event(event, key.to_vec()) {
                tracing::debug!(shard = self.index, pool = pool.0, event, %error, "a plugin host missed an event");
            }
        }
    }

    /// Starts `pool`'s host if it has none.
    pub(crate) fn ensure_host(&mut self, pool: PoolHandle) -> Result<(), Failure> {
        if !self.calls.contains_key(&pool) {
            let link = self.start_host(pool)?;
            self.hosts_started += 1;
            self.calls.insert(pool, PoolCalls::new(self.hosts_started, link));
            self.new_hosts.push((pool, self.hosts_started));
            self.host_started.notify_one();
        }
        Ok(())
    }

    /// A host for `pool`'s chain, mapping the pool's memory.
    pub(super) fn start_host(&self, handle: PoolHandle) -> Result<AdoLink, Failure> {
        let pool = self.pools.get(handle).expect("the caller found the pool");
        let failed = |message: String| Failure::new(ErrorCode::AdoFailed, format!("pool '{}': {message}", pool.name));
        let chain = ferrite_proto::plugin_names(&pool.plugin_chain)
            .map(|name| {
                let path = self
                    .plugins
                    .path(name)
                    .ok_or_else(|| failed(format!("plugin '{name}' of its chain is not known to this server now")))?;
                Ok(ferrite_ado::args::PluginSpec {
                    name: name.to_string(),
                    path: path.to_path_buf(),
                    config: self.plugins.config(name).to_vec(),
                })
            })
            .collect::<Result<Vec<_>, Failure>>()?;
        let persisted = pool.persisted.as_ref().expect("the caller checked the backing");
        AdoLink::start(self.ado.link_config(chain), std::os::fd::AsFd::as_fd(&*persisted.region))
            .map_err(|error| failed(format!("cannot start its plugin host: {error}")))
    }

    /// Stops `pool`'s host once no session has the pool open and no call is left: its plugins
    /// get `FERRITE_EVENT_CLOSE` and their shutdown, and the host exits (see [`Self::retire`]).
    pub(crate) fn stop_idle_host(&mut self, pool: PoolHandle) {
        let open = self.pools.get(pool).is_some_and(|pool| pool.open_count > 0);
        let busy = self.calls.get(&pool).is_some_and(|calls| !calls.running().is_empty() || calls.queued() > 0);
        if !open && !busy {
            // The pool's task sees its host gone and ends.
            if let Some(calls) = self.calls.remove(&pool) {
                self.retire(calls.link);
            }
        }
    }

    /// The host that tells `pool`'s plugins of its deletion (`FERRITE_EVENT_DELETE`): its idle
    /// one, or one started for the purpose. `None` for a pool without plugins, or (logged) when
    /// no host can start: the deletion goes on.
    pub(crate) fn host_for_deletion(&mut self, pool: PoolHandle) -> Option<AdoLink> {
        if let Some(calls) = self.calls.remove(&pool) {
            return Some(calls.link);
        }
        let chained =
            self.pools.get(pool).is_some_and(|pool| !pool.plugin_chain.is_empty() && pool.persisted.is_some());
        if !chained {
            return None;
        }
        match self.start_host(pool) {
            Ok(link) => Some(link),
            Err(failure) => {
                tracing::warn!(
                    shard = self.index,
                    pool = pool.0,
                    "cannot tell plugins of a pool's deletion: {}",
                    failure.message
                );
                None
            }
        }
    }

    /// Asks an idle host to stop (its plugins get `FERRITE_EVENT_CLOSE` and their shutdown) and
    /// keeps its link until it has exited, or is killed at [`HOST_STOP_GRACE`].
    pub(crate) fn retire(&mut self, mut link: AdoLink) {
        if link.begin_shutdown().is_ok() {
            self.retiring.push((link, Instant::now() + HOST_STOP_GRACE));
            self.host_started.notify_one();
        }
    }

    /// Drops the retiring hosts that have exited, or passed their grace (killing them); true
    /// while some remain. Their plugins' last log lines are passed on.
    pub(crate) fn reap_retired(&mut self, now: Instant) -> bool {
        let mut retiring = std::mem::take(&mut self.retiring);
        retiring.retain_mut(|(link, deadline)| {
            for event in link.poll(now) {
                if let LinkEvent::Log { text, .. } = event {
                    tracing::info!(shard = self.index, "plugin: {text}");
                }
            }
            link.host_pid().is_some() && now < *deadline
        });
        self.retiring = retiring;
        !self.retiring.is_empty()
    }

    /// Takes what `pool`'s host sent and acts on it (first its wake-ups, if it `signalled`);
    /// false once the pool has no host (its task then ends).
    pub(crate) fn poll_plugins(&mut self, pool: PoolHandle, host: u64, signalled: bool, now: Instant) -> bool {
        let Some(calls) = self.calls.get_mut(&pool).filter(|calls| calls.host == host) else { return false };
        if signalled {
            calls.link.take_wakeups();
        }
        let events = calls.link.poll(now);
        let answered = events.iter().any(|event| matches!(event, LinkEvent::Done(_) | LinkEvent::Failed { .. }));
        for event in events {
            self.plugin_event(pool, event);
        }
        if answered {
            // Answers leave now: the clients' next requests follow soon, as after a batch.
            self.low_load_poll.answered();
        }
        self.calls.get(&pool).is_some_and(|calls| calls.host == host)
    }

    /// Whether any pool's host has calls of this shard to run.
    pub(crate) fn plugin_calls_running(&self) -> bool {
        self.calls.values().any(|calls| !calls.running().is_empty())
    }

    /// When `pool`'s task for `host` must look at it again without a wake-up; `None` once the
    /// pool no longer has that host.
    pub(crate) fn plugin_recheck(&self, pool: PoolHandle, host: u64) -> Option<Instant> {
        let calls = self.calls.get(&pool).filter(|calls| calls.host == host)?;
        Some(crate::ado::recheck_at(calls, Instant::now()))
    }
}
