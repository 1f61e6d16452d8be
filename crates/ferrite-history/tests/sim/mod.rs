//! A simulated replicated store, to prove the checkers on histories with real concurrency: three
//! replicas of a log, one leader, and faults injected at random moments (failovers, lagging
//! followers, requests refused during elections, answers lost, requests delivered after their
//! client gave up). Its correct mode is linearizable by construction; its lossy modes are not.
//!
//! Each request runs under one lock, so the simulated store is atomic; the concurrency the
//! checkers see comes from the clients: each records its operation before and after the
//! request, and other clients' requests run in between.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread;

use ferrite_history::{History, Op, Ret, Value};

use crate::rng::Rng;

/// How the store replicates and serves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// A write is acknowledged once a majority (the leader and one follower) holds it, reads
    /// are served by the leader, and a failover elects a follower holding every entry.
    Correct,
    /// Lossy: a write is acknowledged as soon as the leader holds it; followers catch up now and
    /// then; a failover elects the follower furthest behind, dropping what it lacks.
    AckBeforeReplication,
    /// Lossy: writes as in `Correct`, but any replica answers reads, lagging or not.
    StaleReplicaReads,
}

const REPLICAS: usize = 3;
/// One request in this many meets a fault first.
const FAULT_ONE_IN: u64 = 15;
/// One request in this many loses its answer (in one of three ways).
const LOST_ONE_IN: u64 = 10;
/// Requests refused while an election runs.
const ELECTION_REQUESTS: u32 = 3;

/// One entry of the log: a key's new content.
type Entry = (String, Option<String>);

#[derive(Default)]
struct Replica {
    applied: usize,
    data: HashMap<String, String>,
}

impl Replica {
    fn catch_up(&mut self, log: &[Entry], to: usize) {
        for (key, content) in &log[self.applied..to] {
            match content {
                Some(value) => self.data.insert(key.clone(), value.clone()),
                None => self.data.remove(key),
            };
        }
        self.applied = to;
    }
}

/// How a request ended, as its client sees it.
enum Reply {
    Done(Ret),
    NotLeader,
    Lost,
}

struct State {
    mode: Mode,
    rng: Rng,
    log: Vec<Entry>,
    replicas: [Replica; REPLICAS],
    leader: usize,
    electing: u32,
    /// Requests whose clients gave up, still on their way to the leader.
    delayed: Vec<(String, Op)>,
}

impl State {
    fn request(&mut self, key: &str, op: &Op) -> Reply {
        if self.rng.below(FAULT_ONE_IN) == 0 {
            self.fault();
        }
        if self.electing > 0 {
            self.electing -= 1;
            return Reply::NotLeader;
        }
        if self.rng.below(LOST_ONE_IN) == 0 {
            match self.rng.below(3) {
                0 => {}
                1 => self.delayed.push((key.to_string(), op.clone())),
                _ => {
                    self.execute(key, op);
                }
            }
            return Reply::Lost;
        }
        Reply::Done(self.execute(key, op))
    }

    fn execute(&mut self, key: &str, op: &Op) -> Ret {
        let text = |value: &Value| String::from_utf8(value.0.clone()).expect("the simulation writes text");
        match op {
            Op::Read => {
                let replica = match self.mode {
                    Mode::StaleReplicaReads => self.rng.below(REPLICAS as u64) as usize,
                    _ => self.leader,
                };
                Ret::Read(self.replicas[replica].data.get(key).map(|v| Value::from(v.as_str())))
            }
            Op::Write(value) => self.append(key, Some(text(value))),
            Op::Erase => self.append(key, None),
            Op::CompareAndSet { expected, new } => {
                if self.replicas[self.leader].data.get(key).map(String::as_bytes)
                    == expected.as_ref().map(Value::as_bytes)
                {
                    self.append(key, Some(text(new)));
                    Ret::Swapped(true)
                } else {
                    Ret::Swapped(false)
                }
            }
        }
    }

    fn append(&mut self, key: &str, content: Option<String>) -> Ret {
        self.log.push((key.to_string(), content));
        let len = self.log.len();
        self.replicas[self.leader].catch_up(&self.log, len);
        if self.mode != Mode::AckBeforeReplication {
            let follower = self.follower();
            self.replicas[follower].catch_up(&self.log, len);
        }
        Ret::Done
    }

    fn follower(&mut self) -> usize {
        (self.leader + 1 + self.rng.below(REPLICAS as u64 - 1) as usize) % REPLICAS
    }

    fn fault(&mut self) {
        match self.rng.below(3) {
            0 => self.fail_over(),
            1 => {
                let follower = self.follower();
                let applied = self.replicas[follower].applied;
                let to = applied + self.rng.below((self.log.len() - applied) as u64 + 1) as usize;
                self.replicas[follower].catch_up(&self.log, to);
            }
            _ => {
                if !self.delayed.is_empty() {
                    let (key, op) = self.delayed.remove(self.rng.below(self.delayed.len() as u64) as usize);
                    self.execute(&key, &op);
                }
            }
        }
    }

    /// The leader crashes and a follower takes over: the one holding the most entries, or in
    /// the lossy mode the one holding the fewest, whose missing entries are then dropped.
    fn fail_over(&mut self) {
        let followers = (0..REPLICAS).filter(|r| *r != self.leader);
        let applied = |r: &usize| self.replicas[*r].applied;
        let next = match self.mode {
            Mode::AckBeforeReplication => followers.min_by_key(applied),
            _ => followers.max_by_key(applied),
        }
        .expect("there are followers");
        let kept = self.replicas[next].applied;
        assert!(self.mode == Mode::AckBeforeReplication || kept == self.log.len(), "a majority holds every entry");
        self.log.truncate(kept);
        for replica in &mut self.replicas {
            if replica.applied > kept {
                *replica = Replica::default();
                replica.catch_up(&self.log, kept);
            }
        }
        self.leader = next;
        self.electing = ELECTION_REQUESTS;
    }
}

/// A run's shape.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub mode: Mode,
    pub seed: u64,
    pub clients: u64,
    pub ops_per_client: u64,
    pub keys: u64,
}

/// The outcome of a run: its history, and each key's content read once the load stopped.
pub struct Ran {
    pub history: History,
    pub finals: Vec<(String, Option<Value>)>,
}

impl Run {
    /// Runs the clients, each on its own thread, then lets the store settle (delayed requests
    /// delivered or dropped, one last failover) and reads every key from the leader.
    pub fn go(self) -> Ran {
        let state = State {
            mode: self.mode,
            rng: Rng::new(self.seed),
            log: Vec::new(),
            replicas: Default::default(),
            leader: 0,
            electing: 0,
            delayed: Vec::new(),
        };
        let store = Arc::new(Mutex::new(state));
        let history = History::new();
        let keys: Vec<String> = (0..self.keys).map(|k| format!("key{k}")).collect();
        let clients: Vec<_> = (1..=self.clients)
            .map(|client| {
                let (store, history, keys) = (Arc::clone(&store), history.clone(), keys.clone());
                thread::spawn(move || self.client(client, &store, &history, &keys))
            })
            .collect();
        for client in clients {
            client.join().expect("a client thread panicked");
        }
        let mut state = store.lock().expect("no client panicked");
        for (key, op) in std::mem::take(&mut state.delayed) {
            if state.rng.below(2) == 0 {
                state.execute(&key, &op);
            }
        }
        state.fail_over();
        let finals = keys
            .iter()
            .map(|key| {
                let read = history.invoke(0, key.as_str(), Op::Read);
                let value = state.replicas[state.leader].data.get(key).map(|v| Value::from(v.as_str()));
                read.ok(Ret::Read(value.clone()));
                (key.clone(), value)
            })
            .collect();
        Ran { history, finals }
    }

    /// One client: writes of values unique to it, reads, some erases and compare-and-sets
    /// (expecting what it last saw of the key), on random keys.
    fn client(self, client: u64, store: &Mutex<State>, history: &History, keys: &[String]) {
        let mut rng = Rng::new(self.seed ^ (client << 32));
        let mut last_seen: HashMap<&str, Option<Value>> = HashMap::new();
        for n in 0..self.ops_per_client {
            let key = keys[rng.below(keys.len() as u64) as usize].as_str();
            let unique = Value::from(format!("c{client}-{n}"));
            let op = match rng.below(20) {
                0..=8 => Op::Write(unique),
                9..=16 => Op::Read,
                17 => Op::Erase,
                _ => Op::CompareAndSet { expected: last_seen.get(key).cloned().flatten(), new: unique },
            };
            let pending = history.invoke(client, key, op.clone());
            let reply = store.lock().expect("no client panicked").request(key, &op);
            match reply {
                Reply::Done(ret) => {
                    if let Ret::Read(seen) = &ret {
                        last_seen.insert(key, seen.clone());
                    }
                    pending.ok(ret);
                }
                Reply::NotLeader => pending.fail(),
                Reply::Lost => pending.unknown(),
            }
        }
    }
}
