//! The link and the real `ferrite-ado` host, end to end, with a C plugin built from the header.

mod common;

use std::time::{Duration, Instant};

use common::{config, done, invoke, process_exists, Shard, VALUE};
use ferrite_ado::message::{CallbackReply, CallbackRequest, CallbackResult, Location, PairRecord, Response};
use ferrite_ado::{FailReason, LinkEvent};
use ferrite_plugin::abi::{self, PoolInfo};

fn failure(events: &[LinkEvent]) -> FailReason {
    events
        .iter()
        .find_map(|event| match event {
            LinkEvent::Failed { reason, .. } => Some(reason.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no Failed in {events:?}"))
}

/// Both layers of a chain run in order, each response tagged with its layer.
#[test]
fn chain_tags_responses_by_layer() {
    let mut shard = Shard::start(config(&["first", "second"]));
    let events = shard.call(invoke("name"));
    let done = done(&events);
    assert_eq!(done.status, abi::OK);
    assert_eq!(
        done.responses,
        vec![Response { layer: 0, data: b"first".to_vec() }, Response { layer: 1, data: b"second".to_vec() }]
    );
    assert!(events.iter().any(|e| matches!(e, LinkEvent::Log { text, .. } if text == "launched")));
}

/// A declared write lands in the call's own page of pool memory (where a shard keeps the call's
/// copy of its value) and its range is reported in Done.
#[test]
fn declared_write_is_visible_and_reported() {
    let mut shard = Shard::start(config(&["writer"]));
    shard.set_value(41);
    let events = shard.call(invoke("inc"));
    assert_eq!(done(&events).status, abi::OK);
    assert_eq!(done(&events).writes, vec![VALUE]);
    assert_eq!(shard.value(), 42);
}

/// A call that writes and then fails reports the failure and no writes: what it wrote is in its
/// copy, which the shard drops.
#[test]
fn a_failed_call_reports_no_writes() {
    let mut shard = Shard::start(config(&["writer"]));
    let events = shard.call(invoke("inc-fail"));
    let done = done(&events);
    assert_eq!(done.status, abi::ERR_FAILED);
    assert!(done.writes.is_empty());
    assert_eq!(done.responses, vec![Response { layer: 0, data: b"failing".to_vec() }]);
}

/// abort() and SIGSEGV after a declared write: the call fails as Crashed and a restarted host
/// serves the next call.
#[test]
fn crashes_fail_the_call_and_a_new_host_serves() {
    for payload in ["inc-abort", "inc-segv"] {
        let mut shard = Shard::start(config(&["writer"]));
        let events = shard.call(invoke(payload));
        assert!(matches!(failure(&events), FailReason::Crashed(status) if !status.success()), "{payload}");
        assert!(events.iter().any(|e| matches!(e, LinkEvent::HostExited { .. })));
        assert_eq!(shard.link.counters().crashes, 1);
        shard.link.restart().expect("restart");
        shard.set_value(100);
        let events = shard.call(invoke("inc"));
        assert_eq!(done(&events).status, abi::OK);
        assert_eq!(shard.value(), 101);
    }
}

/// The host sees pool memory read-only but for the call's own pages: a write anywhere else
/// faults and fails that call alone. The calls sent with it that the host had not begun run on
/// a new host, once.
#[test]
fn a_stray_write_faults_and_the_calls_not_begun_run_again() {
    let mut shard = Shard::start(config(&["writer"]));
    shard.set_value(5);
    let stray = shard.link.submit(&invoke("stray")).expect("submit");
    let later: Vec<_> = (0..2).map(|_| shard.link.submit(&invoke("inc")).expect("submit")).collect();
    let mut calls = vec![stray];
    calls.extend(&later);
    let events = shard.run_until_done(&calls, |_| CallbackReply::default());
    let failed: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            LinkEvent::Failed { call, reason } => Some((*call, reason.clone())),
            _ => None,
        })
        .collect();
    assert!(
        matches!(&failed[..], [(call, FailReason::Crashed(status))] if *call == stray && !status.success()),
        "only the stray call fails: {failed:?}"
    );
    let finished: Vec<_> = events
        .iter()
        .filter_map(|event| match event {
            LinkEvent::Done(done) if done.status == abi::OK => Some(done.call),
            _ => None,
        })
        .collect();
    assert_eq!(finished, later, "the calls after it ran on the new host");
    assert_eq!(shard.value(), 7);
    assert_eq!(shard.link.counters().resubmitted, 2);
    let mut read = [0u8; 1];
    assert!(shard.pool.read(0, &mut read));
    assert_eq!(read, [0], "the stray byte never landed");
}

/// An endless loop passes its deadline: the host is killed, the call fails as Timeout, and a
/// restarted host works.
#[test]
fn endless_loop_times_out() {
    let mut cfg = config(&["looper"]);
    cfg.call_deadline = Duration::from_millis(300);
    let mut shard = Shard::start(cfg);
    let pid = shard.link.host_pid().expect("a host runs");
    let events = shard.call(invoke("loop"));
    assert_eq!(failure(&events), FailReason::Timeout);
    assert_eq!(shard.link.counters().timeouts, 1);
    assert!(!process_exists(pid), "killed and reaped");
    shard.link.restart().expect("restart");
    assert_eq!(done(&shard.call(invoke("inc"))).status, abi::OK);
}

/// Unbounded allocation hits the memory limit and kills only the host.
#[test]
fn memory_limit_contains_unbounded_allocation() {
    let mut shard = Shard::start(config(&["hog"]));
    let events = shard.call(invoke("oom"));
    assert!(matches!(failure(&events), FailReason::Crashed(_)));
    shard.link.restart().expect("restart");
    assert_eq!(done(&shard.call(invoke("name"))).status, abi::OK);
}

/// create_key and pool_info travel to the shard; the plugin sees the answers; the created
/// value becomes writable, and its write is reported.
#[test]
fn callbacks_round_trip_through_the_shard() {
    let mut shard = Shard::start(config(&["creator"]));
    let fresh = Location { offset: 8192, len: 16 };
    let call = shard.link.submit(&invoke("create")).expect("submit");
    let mut seen = Vec::new();
    let events = shard.run_until_done(&[call], |request| {
        seen.push(request.clone());
        match request {
            CallbackRequest::CreateKey { key, value_len: 16 } => CallbackReply {
                status: abi::OK,
                result: CallbackResult::Pair(PairRecord { key: key.clone(), value: fresh, write_time_ns: 0 }),
            },
            CallbackRequest::PoolInfo => CallbackReply {
                status: abi::OK,
                result: CallbackResult::PoolInfo(PoolInfo { objects: 12, ..PoolInfo::default() }),
            },
            _ => CallbackReply { status: abi::ERR_UNSUPPORTED, ..CallbackReply::default() },
        }
    });
    let done = done(&events);
    assert_eq!(done.status, abi::OK, "{events:?}");
    assert_eq!(done.responses[0].data, b"fresh@8192 objects=12".to_vec());
    assert_eq!(done.writes, vec![fresh]);
    assert_eq!(seen.len(), 2);
    let mut bytes = [0u8; 16];
    assert!(shard.pool.read(fresh.offset, &mut bytes));
    assert_eq!(bytes, [b'x'; 16]);

    let call = shard.link.submit(&invoke("missing")).expect("submit");
    let events =
        shard.run_until_done(&[call], |_| CallbackReply { status: abi::ERR_NOT_FOUND, ..CallbackReply::default() });
    assert_eq!(common::done(&events).responses[0].data, abi::ERR_NOT_FOUND.to_string().into_bytes());
}

/// declare_write outside the memory a call may write fails with ERR_INVALID, for a read-only
/// call too; a value that does not start a page (no shard gives one) is not made writable, and
/// the call fails before its plugins run.
#[test]
fn declare_write_is_checked() {
    let mut shard = Shard::start(config(&["checker"]));
    let events = shard.call(invoke("outside"));
    assert_eq!(done(&events).responses[0].data, abi::ERR_INVALID.to_string().into_bytes());
    let mut read_only = invoke("inc");
    read_only.flags = abi::WORK_READ_ONLY;
    assert_eq!(done(&shard.call(read_only)).status, abi::ERR_INVALID);
    let mut big = invoke("too-big");
    big.value = Location { offset: 0, len: 128 << 10 };
    assert_eq!(done(&shard.call(big)).status, abi::OK, "a whole value of its own pages may be declared");
    let mut unaligned = invoke("inc");
    unaligned.value = Location { offset: VALUE.offset + 8, len: 8 };
    let events = shard.call(unaligned);
    let done = done(&events);
    assert_eq!(done.status, abi::ERR_FAILED);
    assert!(done.reason.contains("write access"), "{}", done.reason);
}

/// Checking mode reports a write the plugin did not declare.
#[test]
fn checking_mode_reports_undeclared_writes() {
    let mut cfg = config(&["sloppy"]);
    cfg.checking = true;
    let mut shard = Shard::start(cfg);
    let events = shard.call(invoke("undeclared"));
    let undeclared = events.iter().find_map(|event| match event {
        LinkEvent::Undeclared { ranges, .. } => Some(ranges.clone()),
        _ => None,
    });
    assert_eq!(undeclared, Some(vec![Location { offset: VALUE.offset, len: 1 }]));
    let events = shard.call(invoke("inc"));
    assert!(!events.iter().any(|e| matches!(e, LinkEvent::Undeclared { .. })), "a declared write is fine");
}

/// A burst of 1000 invocations completes with far fewer wake-ups than invocations.
#[test]
fn burst_crosses_in_few_wakeups() {
    let mut shard = Shard::start(config(&["counter"]));
    let calls: Vec<_> = (0..1000).map(|_| shard.link.submit(&invoke("inc")).expect("room in the ring")).collect();
    let events = shard.run_until_done(&calls, |_| CallbackReply::default());
    assert_eq!(events.iter().filter(|e| matches!(e, LinkEvent::Done(d) if d.status == abi::OK)).count(), 1000);
    assert_eq!(shard.value(), 1000);
    let counters = shard.link.counters();
    assert_eq!(counters.invocations, 1000);
    assert!(counters.wakeups < 100, "{counters:?}");
}

/// A shard asleep on its eventfd is woken by the host's answer; one that promised to look at the
/// ring before it sleeps (`will_poll`) gets the answer without a wake-up.
#[test]
fn a_promised_look_needs_no_wake_up() {
    let mut shard = Shard::start(config(&["counter"]));
    // A first call takes whatever the host says as it starts.
    shard.call(invoke("inc"));
    // A look announces sleep: the next answer wakes the shard.
    shard.link.poll(Instant::now());
    let woken = shard.link.counters().wakeups;
    let call = shard.link.submit(&invoke("inc")).expect("submit");
    shard.run_until_done(&[call], |_| CallbackReply::default());
    // Taken while waiting for the answer, or still pending if the answer was there at once.
    let signalled = shard.link.take_wakeups() || shard.link.counters().wakeups > woken;
    assert!(signalled, "the sleeping shard was woken");

    // A trial counts only if the look came after the answer: a look that comes first announces
    // sleep again, and the host then rightly signals.
    let started = Instant::now();
    loop {
        assert!(started.elapsed() < Duration::from_secs(60), "the host never answered before the look");
        let expected = shard.value() + 1;
        shard.link.will_poll();
        let call = shard.link.submit(&invoke("inc")).expect("submit");
        while shard.value() != expected {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(20));
        let events = shard.link.poll(Instant::now());
        if events.iter().any(|event| matches!(event, LinkEvent::Done(done) if done.call == call)) {
            assert!(!shard.link.take_wakeups(), "the host signalled a shard that promised to look");
            return;
        }
        shard.run_until_done(&[call], |_| CallbackReply::default());
    }
}

/// Shutdown stops the host cleanly; dropping a link stops its host too: no process remains.
#[test]
fn shutdown_and_drop_leave_no_process() {
    let mut shard = Shard::start(config(&["quiet"]));
    let pid = shard.link.host_pid().expect("a host runs");
    shard.link.begin_shutdown().expect("shutdown");
    let started = Instant::now();
    let status = loop {
        assert!(started.elapsed() < Duration::from_secs(60), "host never exited");
        if let Some(status) = shard.link.poll(Instant::now()).into_iter().find_map(|event| match event {
            LinkEvent::HostExited { status } => Some(status),
            _ => None,
        }) {
            break status;
        }
        shard.wait();
    };
    assert!(status.success(), "{status}");
    assert!(!process_exists(pid));
    assert_eq!(shard.link.counters().crashes, 0);

    let shard = Shard::start(config(&["quiet"]));
    let pid = shard.link.host_pid().expect("a host runs");
    drop(shard);
    assert!(!process_exists(pid));
}

/// With the opt-in spin the host still serves calls and pool events, and sleeps between them.
#[test]
fn spinning_host_serves_calls() {
    let mut cfg = config(&["spinner"]);
    cfg.spin_us = 200;
    let mut shard = Shard::start(cfg);
    shard.link.pool_event(abi::EVENT_ERASE, b"gone".to_vec()).expect("event");
    for expected in 1..=3 {
        assert_eq!(done(&shard.call(invoke("inc"))).status, abi::OK);
        assert_eq!(shard.value(), expected);
        std::thread::sleep(Duration::from_millis(5));
    }
}
