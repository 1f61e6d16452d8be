//! Password verification off the shards' threads. argon2 costs tens of milliseconds and 19 MiB
//! by design; a shard that ran it would stall every client it serves. Verifications queue for a
//! few threads of their own instead, the session's request waits on a [`Completion`] (its
//! connection reads nothing more meanwhile), and the request runs again once the outcome is known.
//!
//! The queue is bounded and so are the threads: a flood of logins (or guesses) gets refused
//! quickly with "too many authentications in progress" instead of taking the server's memory.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use ferrite_auth::secret;

use crate::completion::Completion;

/// Threads verifying at once: each holds argon2's 19 MiB while it works.
const VERIFIER_THREADS: usize = 2;

/// Verifications that may wait for a thread; more are refused.
const QUEUE_MAX: usize = 64;

/// One verification under way: its outcome, once known, and the completion its request waits on.
#[derive(Debug)]
pub(crate) struct Verification {
    pub completion: Arc<Completion>,
    user: String,
    /// The generation of the users file whose hash the password is checked against: once the
    /// file is reloaded, the outcome says nothing about the password that counts now.
    generation: u64,
    outcome: OnceLock<bool>,
}

impl Verification {
    /// Whether this verification is of `user`'s password (the request that started it is the
    /// one running again) against the users of `generation`, the current one.
    pub(crate) fn answers(&self, user: &str, generation: u64) -> bool {
        self.user == user && self.generation == generation
    }

    /// Whether the password matched, once known.
    pub(crate) fn outcome(&self) -> Option<bool> {
        self.outcome.get().copied()
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The verifying threads and their queue.
#[derive(Debug)]
pub(super) struct Verifier {
    jobs: SyncSender<Job>,
    decoy: Arc<str>,
}

impl Verifier {
    pub(super) fn start() -> std::io::Result<Verifier> {
        let (jobs, queue) = sync_channel::<Job>(QUEUE_MAX);
        let queue = Arc::new(Mutex::new(queue));
        for index in 0..VERIFIER_THREADS {
            let queue = Arc::clone(&queue);
            std::thread::Builder::new().name(format!("ferrite-auth-{index}")).spawn(move || work(&queue))?;
        }
        Ok(Verifier { jobs, decoy: Arc::from(super::decoy_hash()) })
    }

    /// Queues a check of `password` against `hash`, `user`'s in the users file of `generation`
    /// (`None`: the user does not exist, and the decoy is checked so that this takes as long).
    /// `then` runs on the verifier's thread with the outcome before the completion is woken.
    pub(super) fn submit(
        &self,
        user: &str,
        generation: u64,
        hash: Option<String>,
        password: Vec<u8>,
        then: impl FnOnce(bool) + Send + 'static,
    ) -> Result<Arc<Verification>, String> {
        let verification = Arc::new(Verification {
            completion: Completion::new(),
            user: user.to_owned(),
            generation,
            outcome: OnceLock::new(),
        });
        let exists = hash.is_some();
        let hash = hash.unwrap_or_else(|| self.decoy.to_string());
        let job = {
            let verification = Arc::clone(&verification);
            Box::new(move || {
                let matched = secret::verify_secret(&hash, &password) && exists;
                then(matched);
                // Set once, by this job only.
                let _ = verification.outcome.set(matched);
                verification.completion.wake();
            })
        };
        match self.jobs.try_send(job) {
            Ok(()) => Ok(verification),
            Err(TrySendError::Full(_)) => Err("too many authentications in progress; try again".into()),
            Err(TrySendError::Disconnected(_)) => Err("the password verifier has stopped".into()),
        }
    }
}

fn work(queue: &Mutex<Receiver<Job>>) {
    loop {
        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

#[cfg(test)]
impl Verification {
    /// Blocks until the outcome is known.
    pub(super) fn wait(&self) {
        while !self.completion.is_done() {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

#[cfg(test)]
impl Verifier {
    /// Holds every verifying thread until the returned sender is dropped, so that verifications
    /// queued meanwhile stay in flight and the queue holds nothing else.
    pub(super) fn occupy(&self) -> std::sync::mpsc::Sender<()> {
        let (release, released) = std::sync::mpsc::channel::<()>();
        let released = Arc::new(Mutex::new(released));
        let (started, running) = std::sync::mpsc::channel();
        for _ in 0..VERIFIER_THREADS {
            let (released, started) = (Arc::clone(&released), started.clone());
            let job: Job = Box::new(move || {
                started.send(()).expect("the test waits for every thread");
                // Returns once the test drops its sender.
                let _ = released.lock().unwrap_or_else(PoisonError::into_inner).recv();
            });
            self.jobs.try_send(job).expect("an empty queue has room");
        }
        for _ in 0..VERIFIER_THREADS {
            running.recv().expect("every thread takes a holding job");
        }
        release
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A full queue refuses at once, whatever is asked: verifications are never queued without
    /// bound, nor does a caller wait for room.
    #[test]
    fn past_its_bound_the_queue_refuses_at_once() {
        let verifier = Verifier::start().expect("threads");
        let release = verifier.occupy();
        let submit = || verifier.submit("alice", 0, None, b"a guess".to_vec(), |_| {});
        let queued: Vec<_> = (0..QUEUE_MAX).map(|_| submit().expect("room in the queue")).collect();
        let refused = submit().expect_err("the queue is full");
        assert_eq!(refused, "too many authentications in progress; try again");
        drop(release);
        for verification in &queued {
            verification.wait();
            assert_eq!(verification.outcome(), Some(false), "an unknown user never matches");
        }
        submit().expect("room again once the queue drains");
    }
}
