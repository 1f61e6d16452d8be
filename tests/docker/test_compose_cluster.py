"""The three-node cluster of `deploy/docker-compose.cluster.yml` in real containers, from an image
that `deploy/docker/build-image.sh` builds out of this checkout's debug binaries (no registry).

Skipped, saying why, where no Docker engine answers. Each test runs its own compose project, with
a name no other run uses, on host ports Docker chooses, and takes it down with its volumes whatever
happens; the image, tagged for this run only, is removed at the end.

The binaries come from `target/debug` (`cargo build --workspace`).
"""

import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "deploy" / "docker-compose.cluster.yml"
BUILD_IMAGE = REPO_ROOT / "deploy" / "docker" / "build-image.sh"
BUILT = Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target")) / "debug"
NODES = ("node1", "node2", "node3")
NATIVE_PORT = 11911
RESP_PORT = 6379
# Bounds on waiting, not assertions on time: a node recovers an empty data directory at once.
HEALTHY_TIMEOUT_S = 120
COMMAND_TIMEOUT_S = 120


def run(*command: str, env: dict | None = None, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def check(*command: str, env: dict | None = None) -> str:
    result = run(*command, env=env)
    assert result.returncode == 0, f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}"
    return result.stdout


def docker_engine_problem() -> str | None:
    """Why this machine cannot run the test, or None."""
    if shutil.which("docker") is None:
        return "no docker command on this machine"
    result = run("docker", "info", timeout=30)
    if result.returncode != 0:
        said = (result.stderr.strip().splitlines() or ["no answer"])[-1]
        return f"no Docker engine answers (`docker info`: {said})"
    if compose_command() is None:
        return "neither `docker compose` nor `docker-compose` is installed"
    return None


def compose_command() -> list[str] | None:
    """Compose v2 (the docker CLI plugin) where it is installed, else the standalone docker-compose."""
    if run("docker", "compose", "version", timeout=30).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose") is not None:
        return ["docker-compose"]
    return None


ENGINE_PROBLEM = docker_engine_problem()
pytestmark = pytest.mark.skipif(ENGINE_PROBLEM is not None, reason=f"{ENGINE_PROBLEM}")


def open_files_limit(image: str) -> int:
    """The open files the compose file asks for each node (`${FERRITE_NOFILE:-65536}`) where the
    engine grants them; an engine whose own limit is lower (a sandboxed one) refuses to start such
    a container, so there the nodes get this process's limit, which such an engine shares."""
    asked = yaml.safe_load(COMPOSE_FILE.read_text())["services"][NODES[0]]["ulimits"]["nofile"]
    wanted = int(re.fullmatch(r"\$\{FERRITE_NOFILE:-(\d+)\}", asked).group(1))
    for limit in (wanted, resource.getrlimit(resource.RLIMIT_NOFILE)[1]):
        if limit > 0 and run("docker", "run", "--rm", "--ulimit", f"nofile={limit}:{limit}", "--entrypoint",
                             "ferrite", image, "--version").returncode == 0:
            return limit
    pytest.fail(f"the Docker engine grants neither {wanted} open files nor this process's own limit")


@pytest.fixture(scope="module")
def stop_on_sigterm():
    """A SIGTERM (make interrupted, a CI timeout) unwinds the tests, so their clean-up still runs."""
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="module")
def image(stop_on_sigterm):
    """The image of this checkout's debug build, under a tag of this run's own."""
    for binary in ("ferrite-server", "ferrite", "ferrite-ado"):
        if not (BUILT / binary).exists():
            pytest.fail(f"{BUILT / binary} does not exist; run `cargo build --workspace` first")
    tag = f"ferrite-test:{uuid.uuid4().hex[:12]}"
    try:
        check(str(BUILD_IMAGE), "--profile", "debug", "--tag", tag)
        yield tag
    finally:
        run("docker", "rmi", "--force", tag)


class Cluster:
    """One compose project of the cluster file: its own name, host ports chosen by Docker, and
    commands run in it."""

    def __init__(self, image: str):
        self.project = f"ferrite-test-{uuid.uuid4().hex[:12]}"
        self.env = dict(os.environ, FERRITE_IMAGE=image, FERRITE_NOFILE=str(open_files_limit(image)))
        for node in NODES:
            self.env[f"FERRITE_{node.upper()}_NATIVE_PORT"] = ""
            self.env[f"FERRITE_{node.upper()}_RESP_PORT"] = ""

    def compose(self, *arguments: str) -> subprocess.CompletedProcess:
        return run(*compose_command(), "--project-name", self.project, "--file", str(COMPOSE_FILE), *arguments,
                   env=self.env)

    def compose_check(self, *arguments: str) -> str:
        result = self.compose(*arguments)
        assert result.returncode == 0, \
            f"compose {' '.join(arguments)} failed:\n{result.stdout}{result.stderr}\n{self.logs()}"
        return result.stdout

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail", "40").stdout

    def host_port(self, node: str, port: int) -> int:
        """The host port Docker published `port` of `node` on (127.0.0.1)."""
        published = self.compose_check("port", node, str(port)).strip()
        host, _, number = published.rpartition(":")
        assert host == "127.0.0.1", f"{node}:{port} is published on {published}, not on loopback only"
        return int(number)

    def exec(self, node: str, *command: str) -> subprocess.CompletedProcess:
        return self.compose("exec", "-T", node, *command)

    def containers(self) -> list[str]:
        return self.compose_check("ps", "--quiet").split()

    def up_and_healthy(self):
        self.compose_check("up", "--detach")
        containers = self.containers()
        assert len(containers) == len(NODES), f"{len(containers)} containers for {len(NODES)} nodes\n{self.logs()}"
        deadline = time.monotonic() + HEALTHY_TIMEOUT_S
        while True:
            states = check("docker", "inspect", "--format", "{{.State.Status}} {{.State.Health.Status}}",
                           *containers).split("\n")[:len(containers)]
            if all(state == "running healthy" for state in states):
                return
            assert not any(state.endswith("unhealthy") or not state.startswith("running") for state in states), \
                f"a node stopped or is unhealthy: {states}\n{self.logs()}"
            assert time.monotonic() < deadline, f"not healthy within {HEALTHY_TIMEOUT_S} s: {states}\n{self.logs()}"
            time.sleep(1)

    def leftovers(self) -> dict[str, list[str]]:
        """The project's containers, networks and volumes that still exist."""
        label = f"label=com.docker.compose.project={self.project}"
        listings = {"container": ["container", "ls", "--all"], "network": ["network", "ls"], "volume": ["volume", "ls"]}
        return {kind: check("docker", *listing, "--quiet", "--filter", label).split()
                for kind, listing in listings.items()}

    def down(self):
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "10")


@pytest.fixture
def cluster(image):
    cluster = Cluster(image)
    try:
        yield cluster
    finally:
        cluster.down()


def test_three_nodes_start_serve_both_protocols_and_leave_nothing_behind(cluster):
    cluster.up_and_healthy()
    for node in NODES:
        native = cluster.host_port(node, NATIVE_PORT)
        resp = cluster.host_port(node, RESP_PORT)
        assert check("redis-cli", "-h", "127.0.0.1", "-p", str(resp), "PING").strip() == "PONG", node
        stats = check(str(BUILT / "ferrite"), "--addr", f"127.0.0.1:{native}", "stats")
        assert "requests" in stats, f"{node}: {stats}"
    # Every node reaches the next by its service name on the private network (the name each
    # advertises): the image resolves names through Docker's DNS.
    for node, other in zip(NODES, NODES[1:] + NODES[:1]):
        result = cluster.exec(node, "ferrite", "--addr", f"{other}:{NATIVE_PORT}", "stats")
        assert result.returncode == 0, f"{node} cannot reach {other}: {result.stdout}{result.stderr}"

    cluster.down()
    assert cluster.leftovers() == {"container": [], "network": [], "volume": []}


# CLUSTER STEPS: replication through the compose cluster (docs/cluster.md): the compose file's
# cluster-init service initializes it, a write goes through node1, node1 is killed, and node2
# reads the write back from the two nodes left.
CLUSTER_POOL = "replicated"


def wait_for(what: str, cluster: Cluster, attempt) -> subprocess.CompletedProcess:
    """Repeats `attempt` until it succeeds (an election may be running), within a bound."""
    deadline = time.monotonic() + HEALTHY_TIMEOUT_S
    while True:
        result = attempt()
        if result.returncode == 0:
            return result
        assert time.monotonic() < deadline, f"{what}: {result.stdout}{result.stderr}\n{cluster.logs()}"
        time.sleep(1)


def test_a_write_through_one_node_survives_the_loss_of_that_node(cluster):
    cluster.up_and_healthy()
    # Init: the compose file's one-shot service makes the three nodes the first members.
    init = cluster.compose("run", "--rm", "cluster-init")
    assert init.returncode == 0, f"cluster init failed:\n{init.stdout}{init.stderr}\n{cluster.logs()}"
    # Write through node1 (the client follows not_leader to the group's leader).
    wait_for("creating a pool through node1", cluster, lambda: cluster.exec(
        "node1", "ferrite", "--addr", f"node1:{NATIVE_PORT}", "pool", "create", CLUSTER_POOL))
    written = cluster.exec("node1", "ferrite", "--addr", f"node1:{NATIVE_PORT}", "put", CLUSTER_POOL, "key", "value")
    assert written.returncode == 0, written.stdout + written.stderr
    # Lose node1.
    cluster.compose_check("kill", "node1")
    # Read the write back through node2, once the two left have a leader.
    read = wait_for("reading the write back through node2", cluster, lambda: cluster.exec(
        "node2", "ferrite", "--addr", f"node2:{NATIVE_PORT}", "get", CLUSTER_POOL, "key"))
    assert read.stdout == "value"
