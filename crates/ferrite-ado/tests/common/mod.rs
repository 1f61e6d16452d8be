//! The test shard: a pool memfd, a link to a real `ferrite-ado`, and a loop that polls the
//! link until a call ends, answering callbacks the way the test says.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use ferrite_ado::args::PluginSpec;
use ferrite_ado::message::{CallId, CallbackReply, CallbackRequest, Invocation, Location};
use ferrite_ado::shm::Mapping;
use ferrite_ado::{AdoConfig, AdoLink, LinkEvent};
use rustix::event::{PollFd, PollFlags, Timespec};

pub const POOL_BYTES: usize = 1 << 20;
/// Where tests keep their 8-byte target value: at the start of a page, as the call's own copy
/// is (the host makes only a call's own pages writable).
pub const VALUE: Location = Location { offset: 4096, len: 8 };
/// A liveness bound, never a timing assertion: a call that takes this long is stuck.
const STUCK: Duration = Duration::from_secs(60);

/// Builds `tests/plugins/behaviours.c` once per test process, into a file of its own: test
/// processes that run at once (a runner that starts one per test) must not load a library
/// another is still writing.
pub fn plugin() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
            let name = format!("libbehaviours-{}.so", std::process::id());
            let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
            let status = Command::new("cc")
                .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-I"])
                .arg(manifest.join("../ferrite-plugin/include"))
                .arg("-o")
                .arg(&out)
                .arg(manifest.join("tests/plugins/behaviours.c"))
                .status()
                .expect("run cc");
            assert!(status.success(), "cc failed");
            out
        })
        .clone()
}

pub fn config(names: &[&str]) -> AdoConfig {
    AdoConfig {
        host_binary: PathBuf::from(env!("CARGO_BIN_EXE_ferrite-ado")),
        chain: names
            .iter()
            .map(|name| PluginSpec { name: (*name).into(), path: plugin(), config: name.as_bytes().to_vec() })
            .collect(),
        memory_limit_bytes: 256 << 20,
        call_deadline: STUCK,
        spin_us: 0,
        ring_capacity_bytes: 1 << 20,
        checking: false,
    }
}

pub fn invoke(payload: &str) -> Invocation {
    Invocation {
        flags: 0,
        pool_id: 1,
        key: b"counter".to_vec(),
        payload: payload.as_bytes().to_vec(),
        value: VALUE,
        ..Invocation::default()
    }
}

/// The test playing the shard.
pub struct Shard {
    _pool_fd: OwnedFd,
    pub pool: Mapping,
    pub link: AdoLink,
}

impl Shard {
    pub fn start(config: AdoConfig) -> Shard {
        let pool_fd = Mapping::create_memfd("test-pool", POOL_BYTES).expect("pool memfd");
        let pool = Mapping::map(&pool_fd).expect("map pool");
        let link = AdoLink::start(config, std::os::fd::AsFd::as_fd(&pool_fd)).expect("start link");
        Shard { _pool_fd: pool_fd, pool, link }
    }

    pub fn value(&self) -> u64 {
        let mut bytes = [0u8; 8];
        assert!(self.pool.read(VALUE.offset, &mut bytes));
        u64::from_le_bytes(bytes)
    }

    pub fn set_value(&self, value: u64) {
        assert!(self.pool.write(VALUE.offset, &value.to_le_bytes()));
    }

    /// Sleeps until the host signals, exits, or a short while passes (the shard's event loop),
    /// and takes the host's wake-ups.
    pub fn wait(&mut self) {
        let timeout = Timespec { tv_sec: 0, tv_nsec: 20_000_000 };
        let mut fds = vec![PollFd::from_borrowed_fd(self.link.wake_fd(), PollFlags::IN)];
        if let Some(exit) = self.link.exit_fd() {
            fds.push(PollFd::from_borrowed_fd(exit, PollFlags::IN));
        }
        rustix::event::poll(&mut fds, Some(&timeout)).expect("poll");
        self.link.take_wakeups();
    }

    /// Polls until every call in `calls` ended, answering callbacks with `answer`; returns
    /// every event seen.
    pub fn run_until_done(
        &mut self,
        calls: &[CallId],
        mut answer: impl FnMut(&CallbackRequest) -> CallbackReply,
    ) -> Vec<LinkEvent> {
        let started = Instant::now();
        let mut events = Vec::new();
        let mut open: Vec<CallId> = calls.to_vec();
        while !open.is_empty() {
            assert!(started.elapsed() < STUCK, "calls {open:?} never ended");
            for event in self.link.poll(Instant::now()) {
                match &event {
                    LinkEvent::Done(done) => open.retain(|c| *c != done.call),
                    LinkEvent::Failed { call, .. } => open.retain(|c| c != call),
                    LinkEvent::Callback { call, request } => {
                        self.link.answer(*call, answer(request)).expect("answer");
                    }
                    _ => {}
                }
                events.push(event);
            }
            if !open.is_empty() {
                self.wait();
            }
        }
        events
    }

    /// Submits one invocation and runs it to its end, refusing every callback.
    pub fn call(&mut self, invocation: Invocation) -> Vec<LinkEvent> {
        let call = self.link.submit(&invocation).expect("submit");
        self.run_until_done(&[call], |_| CallbackReply { status: -7, ..CallbackReply::default() })
    }
}

pub fn done(events: &[LinkEvent]) -> &ferrite_ado::message::Done {
    events
        .iter()
        .find_map(|event| match event {
            LinkEvent::Done(done) => Some(done),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Done in {events:?}"))
}

/// True if a process with this id exists (a zombie counts).
pub fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}
