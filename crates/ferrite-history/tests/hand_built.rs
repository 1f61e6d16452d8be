//! Histories written by hand, one per behaviour the checkers must accept or catch. The order of
//! the calls below is the order of events: `invoke` is a request sent, `ok`/`fail`/`unknown` its
//! answer (or its loss).

use ferrite_history::{
    check_acknowledged, check_linearizable, Anomaly, CheckOptions, History, Op, Ret, Value, Verdict, Violation,
};

fn write(value: &str) -> Op {
    Op::Write(value.into())
}

fn saw(value: &str) -> Ret {
    Ret::Read(Some(value.into()))
}

fn verdict(history: &History) -> Verdict {
    check_linearizable(history, &CheckOptions::default())
}

/// The one violation of a non-linearizable verdict.
fn only_violation(history: &History) -> Violation {
    match verdict(history) {
        Verdict::Violation(mut violations) if violations.len() == 1 => violations.remove(0),
        other => panic!("expected one violation, got: {other}"),
    }
}

/// The operations a `Stuck` violation names as the conflict: the one it could not place, and
/// those that saw a value it would have hidden for good.
fn named(violation: &Violation) -> Vec<usize> {
    match violation {
        Violation::Stuck(stuck) => std::iter::once(&stuck.blocked).chain(&stuck.waiting).map(|r| r.id).collect(),
        other => panic!("expected no linearization, got: {other}"),
    }
}

/// Sequential writes, reads and an erase, each seeing the one before: both checks pass.
#[test]
fn a_sequential_history_passes() {
    let history = History::new();
    history.invoke(1, "k", Op::Read).ok(Ret::Read(None));
    history.invoke(1, "k", write("a")).ok(Ret::Done);
    history.invoke(2, "k", Op::Read).ok(saw("a"));
    history.invoke(2, "k", Op::Erase).ok(Ret::Done);
    history.invoke(1, "k", Op::Read).ok(Ret::Read(None));
    history.invoke(1, "k", write("b")).ok(Ret::Done);
    history.invoke(3, "j", write("x")).ok(Ret::Done);
    assert!(verdict(&history).is_linearizable(), "{}", verdict(&history));
    let finals = [("k", Some(Value::from("b"))), ("j", Some("x".into()))];
    assert_eq!(check_acknowledged(&history, finals), Ok(()));
}

/// Reads overlapping a write may see either side of it, as long as no one sees the old value
/// after someone saw the new one finish.
#[test]
fn reads_concurrent_with_a_write_may_see_either_value() {
    let history = History::new();
    history.invoke(1, "k", write("a")).ok(Ret::Done);
    let w = history.invoke(1, "k", write("b"));
    let r1 = history.invoke(2, "k", Op::Read);
    let r2 = history.invoke(3, "k", Op::Read);
    r2.ok(saw("b"));
    let r3 = history.invoke(3, "k", Op::Read);
    r1.ok(saw("a"));
    r3.ok(saw("b"));
    w.ok(Ret::Done);
    assert!(verdict(&history).is_linearizable(), "{}", verdict(&history));
}

/// Once a read saw the new value and returned, a later read seeing the old one is a violation,
/// even while the write is still in flight: the checker names that later read.
#[test]
fn the_old_value_after_the_new_was_seen_is_caught() {
    let history = History::new();
    history.invoke(1, "k", write("a")).ok(Ret::Done);
    let w = history.invoke(1, "k", write("b"));
    history.invoke(2, "k", Op::Read).ok(saw("b"));
    let stale = history.invoke(3, "k", Op::Read);
    let stale_id = stale.id();
    stale.ok(saw("a"));
    w.ok(Ret::Done);
    assert!(named(&only_violation(&history)).contains(&stale_id));
}

/// A failover that drops an acknowledged write: the final read shows the older value. The
/// acknowledged-write check names the lost write; recorded as a read, so does linearizability.
#[test]
fn a_lost_acknowledged_write_is_caught() {
    let history = History::new();
    let first = history.invoke(1, "k", write("a"));
    let first_id = first.id();
    first.ok(Ret::Done);
    let lost = history.invoke(1, "k", write("b"));
    let lost_id = lost.id();
    lost.ok(Ret::Done);
    history.invoke(2, "k", Op::Read).ok(saw("a"));

    let Err(anomalies) = check_acknowledged(&history, [("k", Some(Value::from("a")))]) else {
        panic!("the lost write passed the acknowledged-write check");
    };
    match &anomalies.0[..] {
        [Anomaly::LostWrite { final_writer: Some(writer), overwritten_by, .. }] => {
            assert_eq!(writer.id, first_id);
            assert_eq!(overwritten_by.iter().map(|r| r.id).collect::<Vec<_>>(), [lost_id]);
        }
        other => panic!("expected one lost write, got {other:?}"),
    }
    assert!(anomalies.to_string().contains("lost acknowledged writes"), "{anomalies}");
    assert!(matches!(only_violation(&history), Violation::Stuck(_)));
}

/// A key whose every write is lost reads absent at the end: lost as well.
#[test]
fn a_key_gone_absent_is_a_lost_write() {
    let history = History::new();
    history.invoke(1, "k", write("a")).ok(Ret::Done);
    let Err(anomalies) = check_acknowledged(&history, [("k", None)]) else {
        panic!("the absent key passed");
    };
    assert!(matches!(&anomalies.0[..], [Anomaly::LostWrite { final_writer: None, .. }]), "{anomalies}");
}

/// A stale read in the middle of a run, after a newer write was acknowledged: the final state
/// is right, so only the linearizability check can see it, and it names the read.
#[test]
fn a_stale_read_after_a_newer_acknowledged_write_is_caught() {
    let history = History::new();
    history.invoke(1, "k", write("a")).ok(Ret::Done);
    history.invoke(1, "k", write("b")).ok(Ret::Done);
    let stale = history.invoke(2, "k", Op::Read);
    let stale_id = stale.id();
    stale.ok(saw("a"));
    assert_eq!(check_acknowledged(&history, [("k", Some(Value::from("b")))]), Ok(()));
    let violation = only_violation(&history);
    assert!(named(&violation).contains(&stale_id));
    let report = violation.to_string();
    assert!(report.contains("it would overwrite \"a\" for good"), "{report}");
}

/// A read of a value no one wrote, and a read of a value whose only write was refused: both
/// checks report each read, and say which write was refused.
#[test]
fn reads_of_values_never_written_are_caught() {
    let history = History::new();
    history.invoke(1, "k", write("a")).ok(Ret::Done);
    history.invoke(1, "k", write("refused")).fail();
    history.invoke(2, "k", Op::Read).ok(saw("invented"));
    history.invoke(2, "k", Op::Read).ok(saw("refused"));

    let Verdict::Violation(violations) = verdict(&history) else { panic!("phantom reads passed") };
    assert_eq!(violations.len(), 2);
    let Violation::UnwrittenRead(refused) = &violations[1] else { panic!("{}", violations[1]) };
    assert_eq!(refused.failed_writes.len(), 1);
    assert!(violations[1].to_string().contains("reported as not applied"), "{}", violations[1]);

    let Err(anomalies) = check_acknowledged(&history, [("k", Some(Value::from("a")))]) else {
        panic!("phantom reads passed the acknowledged-write check");
    };
    assert_eq!(anomalies.0.iter().filter(|a| matches!(a, Anomaly::UnwrittenRead(_))).count(), 2);
}

/// A read that saw a value before anyone started writing it.
#[test]
fn a_read_from_the_future_is_caught() {
    let history = History::new();
    history.invoke(2, "k", Op::Read).ok(saw("a"));
    history.invoke(1, "k", write("a")).ok(Ret::Done);
    let Violation::UnwrittenRead(read) = only_violation(&history) else { panic!("not an unwritten read") };
    assert_eq!(read.later_writes.len(), 1);
}

/// Split brain: two concurrent writes, and two clients reading them back in opposite orders.
/// Each client's view alone is fine; together no single order exists. The same history where
/// both clients agree passes.
#[test]
fn two_writes_seen_in_contradicting_orders_are_caught() {
    let run = |second_client_order: [&str; 2]| {
        let history = History::new();
        let wa = history.invoke(1, "k", write("a"));
        let wb = history.invoke(2, "k", write("b"));
        history.invoke(3, "k", Op::Read).ok(saw("a"));
        history.invoke(4, "k", Op::Read).ok(saw(second_client_order[0]));
        history.invoke(3, "k", Op::Read).ok(saw("b"));
        history.invoke(4, "k", Op::Read).ok(saw(second_client_order[1]));
        wa.ok(Ret::Done);
        wb.ok(Ret::Done);
        verdict(&history)
    };
    assert!(run(["a", "b"]).is_linearizable());
    assert!(matches!(run(["b", "a"]), Verdict::Violation(_)), "{}", run(["b", "a"]));
}

/// An indeterminate write may take effect after its client gave up, or never; but once seen it
/// has taken effect, and the value it replaced cannot come back.
#[test]
fn an_indeterminate_write_may_apply_late_or_never_but_once() {
    let late = History::new();
    late.invoke(1, "k", write("a")).ok(Ret::Done);
    late.invoke(1, "k", write("b")).unknown();
    late.invoke(2, "k", Op::Read).ok(saw("a"));
    late.invoke(2, "k", Op::Read).ok(saw("b"));
    assert!(verdict(&late).is_linearizable(), "{}", verdict(&late));
    assert_eq!(check_acknowledged(&late, [("k", Some(Value::from("b")))]), Ok(()));
    assert_eq!(check_acknowledged(&late, [("k", Some(Value::from("a")))]), Ok(()));

    let never = History::new();
    never.invoke(1, "k", write("a")).ok(Ret::Done);
    drop(never.invoke(1, "k", write("b")));
    never.invoke(2, "k", Op::Read).ok(saw("a"));
    assert!(verdict(&never).is_linearizable(), "{}", verdict(&never));

    let undone = History::new();
    undone.invoke(1, "k", write("a")).ok(Ret::Done);
    undone.invoke(1, "k", write("b")).unknown();
    undone.invoke(2, "k", Op::Read).ok(saw("b"));
    let back = undone.invoke(2, "k", Op::Read);
    let back_id = back.id();
    back.ok(saw("a"));
    assert!(named(&only_violation(&undone)).contains(&back_id));
}

/// A write reported as failed must not be seen at the end.
#[test]
fn a_failed_write_seen_at_the_end_is_caught() {
    let history = History::new();
    history.invoke(1, "k", write("a")).ok(Ret::Done);
    history.invoke(1, "k", write("b")).fail();
    let Err(anomalies) = check_acknowledged(&history, [("k", Some(Value::from("b")))]) else {
        panic!("a refused write applied passed");
    };
    assert!(
        matches!(&anomalies.0[..], [Anomaly::UnwrittenFinalValue { failed_writes, .. }] if failed_writes.len() == 1),
        "{anomalies}"
    );
}

/// Keys the final reads leave out, and final values on keys no one touched, are reported too.
#[test]
fn final_reads_must_cover_every_written_key() {
    let history = History::new();
    history.invoke(1, "k", write("a")).ok(Ret::Done);
    let Err(anomalies) = check_acknowledged(&history, [("other", Some(Value::from("x")))]) else {
        panic!("missing final read passed");
    };
    assert!(matches!(&anomalies.0[..], [Anomaly::MissingFinalRead { .. }, Anomaly::UnwrittenFinalValue { .. }]));
}

/// Compare-and-set: a put-if-absent race has one winner; a "not swapped" while the key held
/// the expected value with nothing in flight is a violation, explained as such.
#[test]
fn compare_and_set_follows_the_register() {
    let cas =
        |expected: Option<&str>, new: &str| Op::CompareAndSet { expected: expected.map(Value::from), new: new.into() };
    let race = History::new();
    let first = race.invoke(1, "k", cas(None, "a"));
    let second = race.invoke(2, "k", cas(None, "b"));
    second.ok(Ret::Swapped(false));
    first.ok(Ret::Swapped(true));
    race.invoke(3, "k", Op::Read).ok(saw("a"));
    race.invoke(3, "k", cas(Some("a"), "c")).unknown();
    race.invoke(3, "k", Op::Read).ok(saw("c"));
    assert!(verdict(&race).is_linearizable(), "{}", verdict(&race));

    let refused = History::new();
    refused.invoke(1, "k", write("a")).ok(Ret::Done);
    refused.invoke(2, "k", cas(Some("a"), "b")).ok(Ret::Swapped(false));
    let violation = only_violation(&refused);
    assert!(violation.to_string().contains("did not swap, yet the key held its expected \"a\""), "{violation}");
}

/// An erase makes the key absent until the next write; the old value cannot come back.
#[test]
fn an_erased_value_cannot_come_back() {
    let history = History::new();
    history.invoke(1, "k", write("a")).ok(Ret::Done);
    history.invoke(1, "k", Op::Erase).ok(Ret::Done);
    history.invoke(2, "k", Op::Read).ok(Ret::Read(None));
    let back = history.invoke(2, "k", Op::Read);
    let back_id = back.id();
    back.ok(saw("a"));
    assert!(named(&only_violation(&history)).contains(&back_id));
    assert_eq!(check_acknowledged(&history, [("k", None)]), Ok(()));
}

/// Keys are judged apart: a violation on one key names that key only.
#[test]
fn keys_are_judged_apart() {
    let history = History::new();
    history.invoke(1, "good", write("a")).ok(Ret::Done);
    history.invoke(1, "bad", write("a")).ok(Ret::Done);
    history.invoke(1, "bad", write("b")).ok(Ret::Done);
    history.invoke(2, "good", Op::Read).ok(saw("a"));
    history.invoke(2, "bad", Op::Read).ok(saw("a"));
    assert_eq!(only_violation(&history).key(), &"bad".into());
}

/// Many writes all in flight at once, then reads that contradict each other: the search would
/// have to try their orders one by one, so a small budget ends it with an explicit unknown.
#[test]
fn a_search_past_its_budget_says_unknown() {
    let history = History::new();
    let writes: Vec<_> = (0..24).map(|i| history.invoke(i, "k", write(&format!("v{i}")))).collect();
    for w in writes {
        w.ok(Ret::Done);
    }
    history.invoke(100, "k", Op::Read).ok(saw("v0"));
    history.invoke(100, "k", Op::Read).ok(saw("v1"));
    match check_linearizable(&history, &CheckOptions { step_budget: 10_000 }) {
        Verdict::Unknown { reason } => assert!(reason.contains("key \"k\": no verdict within 10000 steps"), "{reason}"),
        other => panic!("expected unknown, got {other}"),
    }
}
