//! The checkers against a simulated replicated store driven by concurrent clients under faults
//! (see `sim`): its correct mode must pass every run, each lossy mode must be caught in every
//! run. Several seeds each; thread interleavings vary from run to run as well.

mod rng;
mod sim;

use ferrite_history::{check_acknowledged, check_linearizable, CheckOptions, Verdict};
use sim::{Mode, Ran, Run};

const SEEDS: [u64; 4] = [1, 2, 3, 4];

fn run(mode: Mode, seed: u64) -> Ran {
    Run { mode, seed, clients: 4, ops_per_client: 300, keys: 3 }.go()
}

fn verdict(ran: &Ran) -> Verdict {
    check_linearizable(&ran.history, &CheckOptions::default())
}

/// Correct replication under failovers, refusals and lost answers: both checks pass, and the
/// runs did contain failed and indeterminate operations for the checkers to reason about.
#[test]
fn the_correct_mode_passes() {
    for seed in SEEDS {
        let ran = run(Mode::Correct, seed);
        let summary = ran.history.summary();
        assert!(summary.by_kind.values().any(|c| c.failed > 0), "no refused request:\n{summary}");
        assert!(summary.by_kind.values().any(|c| c.indeterminate > 0), "no lost answer:\n{summary}");
        if let Err(anomalies) = check_acknowledged(&ran.history, ran.finals.clone()) {
            panic!("seed {seed}: {anomalies}\n{}", ran.history.dump_text());
        }
        let verdict = verdict(&ran);
        assert!(verdict.is_linearizable(), "seed {seed}: {verdict}\n{}", ran.history.dump_text());
    }
}

/// Acknowledging before replicating, then failing over to a lagging follower: every run loses
/// acknowledged writes, and both checks say so.
#[test]
fn acknowledging_before_replication_is_caught() {
    for seed in SEEDS {
        let ran = run(Mode::AckBeforeReplication, seed);
        assert!(check_acknowledged(&ran.history, ran.finals.clone()).is_err(), "seed {seed}: lost writes passed");
        assert!(matches!(verdict(&ran), Verdict::Violation(_)), "seed {seed}: {}", verdict(&ran));
    }
}

/// Lagging replicas answering reads: nothing is lost, so the acknowledged-write check passes,
/// but the stale reads are caught by the linearizability check in every run.
#[test]
fn stale_replica_reads_are_caught() {
    for seed in SEEDS {
        let ran = run(Mode::StaleReplicaReads, seed);
        assert_eq!(check_acknowledged(&ran.history, ran.finals.clone()), Ok(()), "seed {seed}");
        assert!(matches!(verdict(&ran), Verdict::Violation(_)), "seed {seed}: {}", verdict(&ran));
    }
}

/// Thousands of operations on one key, concurrent and faulty: a verdict within the default
/// budget, either way.
#[test]
fn thousands_of_operations_on_one_key_get_a_verdict() {
    let long = |mode| Run { mode, seed: 9, clients: 8, ops_per_client: 1000, keys: 1 }.go();
    let correct = long(Mode::Correct);
    assert_eq!(correct.history.ops().len(), 8001);
    assert!(verdict(&correct).is_linearizable(), "{}", verdict(&correct));
    assert!(matches!(verdict(&long(Mode::StaleReplicaReads)), Verdict::Violation(_)));
}
