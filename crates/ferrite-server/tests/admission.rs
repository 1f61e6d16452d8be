//! Admission control over time: a client that does not complete its hello within the handshake
//! timeout, whether silent or trickling bytes, and one that idles past the idle timeout, are
//! disconnected and no longer counted, while a well-behaved client is served throughout.

mod common;
mod wire;

use std::time::{Duration, Instant};

use common::TestServer;
use wire::{counter, RawClient};

fn server(handshake_timeout_ms: u64, idle_timeout_ms: u64) -> TestServer {
    TestServer::builder()
        .config("handshake_timeout_ms", handshake_timeout_ms)
        .config("idle_timeout_ms", idle_timeout_ms)
        .start()
}

#[test]
fn clients_that_do_not_complete_their_hello_in_time_are_disconnected() {
    let server = server(300, 0);
    let mut good = RawClient::handshaken(server.addr(0));
    let started = Instant::now();
    let mut silent = RawClient::connect(server.addr(0));
    let mut trickling = RawClient::connect(server.addr(0));
    let hello = wire::frame(0x0001, 0, 1, &wire::hello_body(&ferrite_proto::HELLO_MAGIC, 3, "slow"));
    for byte in &hello[..hello.len() - 1] {
        if trickling.try_send_bytes(&[*byte]).is_err() {
            break;
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    silent.expect_closed();
    trickling.expect_closed();
    assert!(started.elapsed() < Duration::from_secs(5), "closed at the deadline, not at some later cleanup");
    let stats = good.statistics(2);
    assert_eq!(counter(&stats, "clients_timed_out"), 2, "{stats:?}");
    assert_eq!(counter(&stats, "clients"), 1, "only the good client is counted");
    assert_eq!(counter(&stats, "handshake_timeout_ms"), 300, "ferrite stats shows the setting");
    assert_eq!(counter(&stats, "requests_in_flight_per_connection_max"), 256, "and the default in-flight limit");
}

#[test]
fn idle_clients_are_closed_after_the_idle_timeout_only_when_one_is_set() {
    let idle = server(10_000, 300);
    let mut sleeper = RawClient::handshaken(idle.addr(0));
    std::thread::sleep(Duration::from_millis(800));
    sleeper.expect_closed();
    let mut counting = RawClient::handshaken(idle.addr(0));
    let stats = counting.statistics(2);
    assert_eq!((counter(&stats, "clients_timed_out"), counter(&stats, "idle_timeout_ms")), (1, 300), "{stats:?}");

    let patient = server(10_000, 0);
    let mut sleeper = RawClient::handshaken(patient.addr(0));
    std::thread::sleep(Duration::from_millis(800));
    let stats = sleeper.statistics(2);
    assert_eq!(counter(&stats, "clients_timed_out"), 0, "no idle timeout by default: {stats:?}");
}
