//! Polling after a batch never turns into spinning: a shard that has served requests and then
//! has none goes back to sleep, using no CPU, whether polling is on (the default) or off.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::TestServer;

/// CPU time (user + system) the process has used, from `/proc/<pid>/stat`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read the server's stat");
    // Fields after the command name (which may hold spaces) start after its closing parenthesis;
    // utime and stime are fields 14 and 15 of the whole line.
    let after_name = &stat[stat.rfind(')').expect("stat has a command name") + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| fields[i - 3].parse::<u64>().expect("a tick count");
    ticks(14) + ticks(15)
}

/// Serves a burst of small reads, then checks the idle server uses (almost) no CPU for a second.
fn idles_after_a_burst(server: &TestServer) {
    let mut client = TcpStream::connect(server.resp_addr(0)).expect("connect");
    client.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n").expect("SET");
    let mut ok = [0; 5];
    client.read_exact(&mut ok).expect("SET reply");
    for _ in 0..2000 {
        client.write_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").expect("GET");
        let mut reply = [0; 7];
        client.read_exact(&mut reply).expect("GET reply");
        assert_eq!(&reply, b"$1\r\nv\r\n");
    }
    // Past any polling window, and past the server's own periodic work starting up.
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_ticks(server.pid());
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks(server.pid()) - before;
    // A clock tick is 10 ms; a shard spinning for the whole second would use about 100.
    assert!(used <= 10, "the idle server used {used} ticks of CPU in one second");
}

#[test]
fn an_idle_shard_sleeps_with_polling_on() {
    idles_after_a_burst(&TestServer::builder().resp().start());
}

#[test]
fn an_idle_shard_sleeps_with_polling_off() {
    idles_after_a_burst(&TestServer::builder().resp().config("poll_us", 0).start());
}
