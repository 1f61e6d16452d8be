"""A three-node Ferrite cluster for the Python suites: `ferrite cluster local`, which starts the
nodes on loopback, initializes the cluster and prints one line per node, stopped by its own
process id (SIGTERM stops every node). Nodes can be killed by their pids and started again from
the command line `cluster local` saved for each.
"""

import json
import os
import queue
import re
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from ferrite_process import CLI_BINARY, SERVER_BINARY, STARTUP_TIMEOUT_S, terminate

NODE_LINE = re.compile(
    r"^node (?P<id>\d+): native (?P<native>\S+) resp (?P<resp>\S+) peer (?P<peer>\S+) pid (?P<pid>\d+)$"
)
LAST_LINE = "Ctrl-C stops every node."


def host_port(address: str) -> tuple:
    host, port = address.rsplit(":", 1)
    return host, int(port)


class LocalCluster:
    """A running `ferrite cluster local --nodes N --shards S`: `nodes` maps each node id to its
    `native`, `resp` (shard 0) addresses and `pid`."""

    def __init__(self, nodes: int = 3, shards: int = 2):
        for binary in (SERVER_BINARY, CLI_BINARY):
            if not binary.exists():
                pytest.fail(f"{binary} does not exist; run `cargo build --workspace` first")
        self.dir = tempfile.TemporaryDirectory(prefix="ferrite-python-cluster-")
        self.data = Path(self.dir.name) / "cluster"
        self.stderr = open(Path(self.dir.name) / "stderr.log", "wb")
        env = {key: value for key, value in os.environ.items() if key != "FERRITE_ADDR"}
        self.process = subprocess.Popen(
            [str(CLI_BINARY), "cluster", "local", "--nodes", str(nodes), "--shards", str(shards),
             "--data-dir", str(self.data)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.stderr, env=env,
        )
        lines = queue.Queue()
        threading.Thread(target=self._read, args=(lines,), daemon=True).start()
        self.nodes = {}
        deadline = time.monotonic() + STARTUP_TIMEOUT_S * 2
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                pytest.fail(f"cluster local printed no '{LAST_LINE}' in time")
            if line is None:
                self.stop()
                pytest.fail("cluster local exited before its nodes were ready")
            found = NODE_LINE.match(line)
            if found:
                self.nodes[int(found["id"])] = {
                    "native": found["native"], "resp": found["resp"], "pid": int(found["pid"]),
                }
            if line == LAST_LINE:
                break
        assert sorted(self.nodes) == list(range(1, nodes + 1)), self.nodes

    def _read(self, lines: queue.Queue):
        for raw in self.process.stdout:
            lines.put(raw.decode(errors="replace").rstrip("\n"))
        lines.put(None)

    def ferrite(self, node: int, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """Runs the `ferrite` CLI against node `node`."""
        return subprocess.run(
            [str(CLI_BINARY), "--addr", self.nodes[node]["native"], *args],
            capture_output=True, text=True, timeout=60, check=check,
        )

    def leader_of(self, group: int, asked: int) -> int:
        """The node that leads `group` as node `asked` sees it (0 while there is none)."""
        status = json.loads(self.ferrite(asked, "--json", "cluster", "status").stdout)
        for entry in status["groups"]:
            if entry["group"] == group:
                return entry.get("leader") or 0
        return 0

    def wait_for_leader(self, group: int, asked: int, not_node: int = 0, timeout_s: float = 20.0) -> int:
        """The leader of `group` as node `asked` sees it, once there is one other than `not_node`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                leader = self.leader_of(group, asked)
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired, ValueError, KeyError):
                leader = 0
            if leader and leader != not_node:
                return leader
            time.sleep(0.1)
        pytest.fail(f"group {group} elected no leader within {timeout_s} s")

    def kill9(self, node: int):
        os.kill(self.nodes[node]["pid"], signal.SIGKILL)

    def start_again(self, node: int):
        """Starts node `node` again with the command line `cluster local` saved for it."""
        command = shlex.split((self.data / f"node-{node}" / "command").read_text())
        log = open(self.data / f"node-{node}" / "again.log", "ab")
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        self.nodes[node]["pid"] = process.pid
        self.nodes[node]["process"] = process

    def stop(self):
        terminate(self.process)
        for node in self.nodes.values():
            if "process" in node:
                terminate(node["process"])
        self.stderr.close()
        self.dir.cleanup()
