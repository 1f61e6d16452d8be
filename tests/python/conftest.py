"""Servers the Python suites talk to: a Ferrite server with RESP on, and a `redis-server` to
compare against. Each runs as a child process on ports chosen at run time and is stopped by its own
process id.
"""

import os
import queue
import signal
import socket
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


def terminate(process: subprocess.Popen):
    """Stops a child by its own process id: SIGTERM, then SIGKILL if it does not exit in time."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Server:
    """A running ferrite-server child process and its announced addresses."""

    def __init__(self, shards: int = 1, extra_args: tuple = ()):
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
                *extra_args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.native = {}
        self.resp = {}
        self.metrics_url = None
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
            elif line.startswith("metrics: "):
                self.metrics_url = line[len("metrics: "):]
            elif line.startswith("ready."):
                assert self.resp, f"no `shard N: resp` line in {seen}"
                return

    def client(self, protocol: int, shard: int = 0, **options) -> redis.Redis:
        host, port = self.resp[shard]
        return redis.Redis(host=host, port=port, protocol=protocol, socket_timeout=10, **options)

    def stderr_text(self) -> str:
        return (Path(self.dir.name) / "stderr.log").read_text(errors="replace")

    def stop(self):
        terminate(self.process)
        self.stderr.close()
        self.dir.cleanup()


@pytest.fixture
def server():
    server = Server()
    yield server
    status = server.process.poll()
    server.stop()
    assert status is None, "the server died during the test"


class RedisServer:
    """A `redis-server` child process without persistence, on a free port."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="ferrite-redis-test-")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", self.dir.name,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            try:
                self.client().ping()
                return
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    pytest.fail(f"redis-server did not start on port {self.port}")
                time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=10)

    def stop(self):
        terminate(self.process)
        self.dir.cleanup()


@pytest.fixture
def redis_server():
    server = RedisServer()
    yield server
    server.stop()
