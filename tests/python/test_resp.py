"""The RESP listener through the `redis` package (redis-py), unchanged.

Each test starts its own `target/debug/ferrite-server` with RESP on a free port (port 0), reads the
ports from the server's announcement, and stops it by its own process id with SIGTERM. Every test
runs twice: with RESP2 and with RESP3 (redis-py's default since 8.0).
"""

import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
import redis

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_BINARY = REPO_ROOT / "target" / "debug" / "ferrite-server"
STARTUP_TIMEOUT_S = 20
SHUTDOWN_TIMEOUT_S = 10


class Server:
    """A running ferrite-server child process and its announced addresses."""

    def __init__(self, shards: int = 1):
        if not SERVER_BINARY.exists():
            pytest.fail(f"{SERVER_BINARY} does not exist; run `cargo build -p ferrite-server` first")
        self.dir = tempfile.TemporaryDirectory(prefix="ferrite-resp-test-")
        self.stderr = open(Path(self.dir.name) / "stderr.log", "wb")
        self.process = subprocess.Popen(
            [
                str(SERVER_BINARY),
                "--listen", "127.0.0.1:0",
                "--resp-listen", "127.0.0.1:0",
                "--shards", str(shards),
                "--data-dir", str(Path(self.dir.name) / "data"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.native = {}
        self.resp = {}
        self._await_ready()

    def _await_ready(self):
        lines = queue.Queue()

        def read():
            # Keeps reading after `ready.` so the server never blocks on a full pipe.
            for line in self.process.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        seen = []
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                pytest.fail(f"ferrite-server did not announce `ready.` in {STARTUP_TIMEOUT_S} s: {seen}")
            if line is None:
                self.stop()
                pytest.fail(f"ferrite-server exited before it was ready: {seen}\n{self.stderr_text()}")
            seen.append(line)
            if line.startswith("shard "):
                index, rest = line[len("shard "):].split(": ", 1)
                kind, address = rest.split(" ", 1)
                host, port = address.rsplit(":", 1)
                (self.resp if kind == "resp" else self.native)[int(index)] = (host, int(port))
            elif line.startswith("ready."):
                assert self.resp, f"no `shard N: resp` line in {seen}"
                return

    def client(self, protocol: int, shard: int = 0, **options) -> redis.Redis:
        host, port = self.resp[shard]
        return redis.Redis(host=host, port=port, protocol=protocol, socket_timeout=10, **options)

    def stderr_text(self) -> str:
        return (Path(self.dir.name) / "stderr.log").read_text(errors="replace")

    def stop(self):
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=SHUTDOWN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.stderr.close()
        self.dir.cleanup()


@pytest.fixture
def server():
    server = Server()
    yield server
    status = server.process.poll()
    server.stop()
    assert status is None, "the server died during the test"


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def r(request, server):
    client = server.client(request.param)
    yield client
    client.close()


def test_ping_set_get(r):
    assert r.ping() is True
    assert r.set("greeting", "hello") is True
    assert r.get("greeting") == b"hello"
    assert r.get("missing") is None
    assert r.echo("x y") == b"x y"


def test_binary_values_round_trip(r):
    value = bytes(range(256)) * 64
    r.set(b"\x00key\r\n", value)
    assert r.get(b"\x00key\r\n") == value


def test_set_nx_and_xx(r):
    assert r.set("k", "1", nx=True) is True
    assert r.set("k", "2", nx=True) is None
    assert r.get("k") == b"1"
    assert r.set("absent", "x", xx=True) is None
    assert r.exists("absent") == 0
    assert r.set("k", "3", xx=True) is True
    assert r.set("k", "4", get=True) == b"3"
    assert r.get("k") == b"4"


def test_expiry_is_refused_with_a_clear_error(r):
    with pytest.raises(redis.ResponseError, match="expire"):
        r.set("k", "v", ex=10)


def test_delete_and_exists(r):
    r.set("a", "1")
    r.set("b", "2")
    assert r.exists("a", "b", "c") == 2
    assert r.delete("a", "c") == 1
    assert r.exists("a") == 0
    assert r.delete("nothing") == 0


def test_mset_and_mget(r):
    assert r.mset({"x": "1", "y": "2", "z": "3"}) is True
    assert r.mget(["x", "nope", "z"]) == [b"1", None, b"3"]


def test_incr_and_decr(r):
    assert r.incr("counter") == 1
    assert r.incr("counter", 10) == 11
    assert r.decr("counter") == 10
    assert r.decr("counter", 4) == 6
    r.set("text", "abc")
    with pytest.raises(redis.ResponseError, match="not an integer"):
        r.incr("text")


def test_dbsize(r):
    assert r.dbsize() == 0
    r.mset({f"key:{i}": i for i in range(25)})
    assert r.dbsize() == 25


def test_scan_iter_with_match(r):
    users = {f"user:{i:04}".encode() for i in range(300)}
    with r.pipeline(transaction=False) as pipe:
        for key in users:
            pipe.set(key, "u")
        for i in range(300):
            pipe.set(f"item:{i:04}", "i")
        pipe.execute()
    assert set(r.scan_iter(match="user:*", count=50)) == users
    assert len(list(r.scan_iter(count=1000))) == 600
    assert list(r.scan_iter(match="none:*")) == []


def test_info(r):
    r.mset({"a": "1", "b": "2"})
    info = r.info()
    assert info["redis_version"] == "7.0.0"
    assert "ferrite_version" in info
    assert info["connected_clients"] >= 1
    assert info["db0"]["keys"] == 2
    assert r.info("keyspace") == {"db0": {"keys": 2, "expires": 0, "avg_ttl": 0}}


def test_pipeline_without_transaction(r):
    with r.pipeline(transaction=False) as pipe:
        pipe.set("p", "1").incr("p").get("p").get("missing")
        assert pipe.execute() == [True, 2, b"2", None]


def test_pipeline_as_transaction(r):
    with r.pipeline() as pipe:
        pipe.set("t", "1").incr("t", 5).mget(["t", "missing"])
        assert pipe.execute() == [True, 6, [b"6", None]]


def test_errors_keep_the_connection_usable(r):
    with pytest.raises(redis.ResponseError, match="unknown command"):
        r.execute_command("NOSUCH", "a")
    with pytest.raises(redis.ResponseError, match="no plugin is attached to this pool"):
        r.execute_command("FERRITE.INVOKE", "k", "payload")
    assert r.ping() is True


def test_client_name_is_kept(server):
    client = server.client(3, client_name="tester")
    assert client.client_getname() == "tester" or client.client_getname() == b"tester"
    client.close()


def test_each_shard_has_its_own_pool():
    server = Server(shards=2)
    try:
        zero, one = server.client(2, 0), server.client(2, 1)
        zero.set("where", "zero")
        assert one.get("where") is None
        one.set("where", "one")
        assert zero.get("where") == b"zero"
        assert one.get("where") == b"one"
        zero.close()
        one.close()
    finally:
        server.stop()
