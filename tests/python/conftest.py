"""Servers the Python suites talk to: a Ferrite server with RESP on, and a `redis-server` to
compare against. Each runs as a child process on ports chosen at run time and is stopped by its own
process id.
"""

import socket
import subprocess
import tempfile
import time

import pytest
import redis

from ferrite_process import STARTUP_TIMEOUT_S, FerriteServer, terminate


class Server(FerriteServer):
    """A ferrite-server with its RESP listener on, and redis-py clients of it."""

    def __init__(self, shards: int = 1, extra_args: tuple = ()):
        super().__init__(shards=shards, extra_args=extra_args, resp=True)

    def client(self, protocol: int, shard: int = 0, **options) -> redis.Redis:
        host, port = self.resp[shard]
        return redis.Redis(host=host, port=port, protocol=protocol, socket_timeout=10, **options)


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def r(request, server):
    """A redis-py client of a fresh server's shard 0, speaking RESP2, then RESP3."""
    client = server.client(request.param)
    yield client
    client.close()


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


@pytest.fixture
def ferrite_and_redis(server, redis_server):
    """A redis-py client of a fresh Ferrite RESP listener and one of a fresh `redis-server`, for
    tests that send both the same commands and compare the answers."""
    ferrite = server.client(2)
    reference = redis_server.client()
    yield ferrite, reference
    ferrite.close()
    reference.close()
