"""A `ferrite-server` child process for the Python suites (`tests/python` and the Python client's
`clients/python/tests`): ports chosen at run time, a temporary data directory, the addresses the
server announces, and a stop by its own process id. Also the `ferrite user` CLI and unique pool
names.

The binaries come from `target/debug` (`cargo build --workspace`, which also builds the shipped
plugins the server finds beside itself).
"""

import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER_BINARY = REPO_ROOT / "target" / "debug" / "ferrite-server"
CLI_BINARY = REPO_ROOT / "target" / "debug" / "ferrite"
STARTUP_TIMEOUT_S = 30
SHUTDOWN_TIMEOUT_S = 10


def terminate(process: subprocess.Popen):
    """Stops a child by its own process id: SIGTERM, then SIGKILL if it does not exit in time."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


class FerriteServer:
    """A running ferrite-server child process and its announced addresses: `native` and (with
    `resp`) `resp` map each shard to `(host, port)`; `metrics_url` is set by `--metrics-listen`."""

    def __init__(self, shards: int = 1, extra_args: tuple = (), resp: bool = False):
        if not SERVER_BINARY.exists():
            pytest.fail(f"{SERVER_BINARY} does not exist; run `cargo build --workspace` first")
        self.dir = tempfile.TemporaryDirectory(prefix="ferrite-python-test-")
        self.stderr = open(Path(self.dir.name) / "stderr.log", "wb")
        self.process = subprocess.Popen(
            [
                str(SERVER_BINARY),
                "--listen", "127.0.0.1:0",
                *(("--resp-listen", "127.0.0.1:0") if resp else ()),
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
        self._await_ready(resp)

    @property
    def address(self) -> str:
        """`host:port` of shard 0's native listener; a client learns the other shards from it."""
        return self.native_address(0)

    def native_address(self, shard: int) -> str:
        host, port = self.native[shard]
        return f"{host}:{port}"

    def _await_ready(self, resp: bool):
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
                text = self.stderr_text()
                self.stop()
                pytest.fail(f"ferrite-server exited before it was ready: {seen}\n{text}")
            seen.append(line)
            if line.startswith("shard "):
                index, rest = line[len("shard "):].split(": ", 1)
                kind, address = rest.split(" ", 1)
                host, port = address.rsplit(":", 1)
                (self.resp if kind == "resp" else self.native)[int(index)] = (host, int(port))
            elif line.startswith("metrics: "):
                self.metrics_url = line[len("metrics: "):]
            elif line.startswith("ready."):
                assert self.native, f"no `shard N: native` line in {seen}"
                assert self.resp or not resp, f"no `shard N: resp` line in {seen}"
                return

    def stderr_text(self) -> str:
        return (Path(self.dir.name) / "stderr.log").read_text(errors="replace")

    def stop(self):
        terminate(self.process)
        self.stderr.close()
        self.dir.cleanup()


def unique_name(prefix: str = "py") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def ferrite_user(users_file: Path, *args: str, password: "str | None" = None) -> str:
    """Runs `ferrite user ARGS --file USERS_FILE` with the password (if any) as one line of
    standard input, and returns its output; fails the test if it fails."""
    if not CLI_BINARY.exists():
        pytest.fail(f"{CLI_BINARY} does not exist; run `cargo build --workspace` first")
    result = subprocess.run(
        [str(CLI_BINARY), "user", *args, "--file", str(users_file)],
        input=None if password is None else password + "\n",
        stdin=None if password is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if result.returncode != 0:
        pytest.fail(f"ferrite user {' '.join(args)} failed: {result.stdout}{result.stderr}")
    return result.stdout
