"""The Python client against a real three-node cluster (`ferrite cluster local`): connected to
any node, it follows `not_leader` redirections to each group's leader, and after the leader of a
group is killed it finds the new one by itself."""

import sys
import time
from pathlib import Path

import pytest

import ferrite
from ferrite_servers import unique_name

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "python"))

from cluster_process import LocalCluster  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    cluster = LocalCluster(nodes=3, shards=2)
    yield cluster
    cluster.stop()


def test_a_session_with_any_node_reaches_every_groups_leader(cluster):
    name = unique_name("cluster")
    for node in cluster.nodes:
        with ferrite.connect(cluster.nodes[node]["native"]) as session:
            cluster_map = session.cluster_map()
            assert cluster_map["single_server"] is False and cluster_map["cluster_id"], cluster_map
            assert sorted(n["node_id"] for n in cluster_map["nodes"]) == [1, 2, 3], cluster_map
    with ferrite.connect(cluster.nodes[1]["native"]) as session:
        session.create_pool(name, size_bytes=8 << 20)
    with ferrite.connect(cluster.nodes[3]["native"]) as session:
        pool = session.open_pool(name)
        for n in range(50):
            pool.put(f"k{n}".encode(), f"v{n}".encode())
    with ferrite.connect(cluster.nodes[2]["native"]) as session:
        pool = session.open_pool(name)
        assert [pool.get(f"k{n}".encode()) for n in range(50)] == [f"v{n}".encode() for n in range(50)]


def test_the_client_finds_the_new_leader_after_a_kill(cluster):
    name = unique_name("failover")
    with ferrite.connect(cluster.nodes[1]["native"]) as session:
        pool = session.create_pool(name, size_bytes=8 << 20)
        pool.put(b"before", b"1")
        leader = next(group["leader"] for group in session.cluster_map()["groups"] if group["group"] == pool.shard)
    survivor = next(node for node in cluster.nodes if node != leader)
    cluster.kill9(leader)
    cluster.wait_for_leader(pool.shard, asked=survivor, not_node=leader)
    with ferrite.connect(cluster.nodes[survivor]["native"]) as session:
        pool = session.open_pool(name)
        deadline = time.monotonic() + 30
        while True:
            try:
                pool.put(b"after", b"2")
                break
            except ferrite.FerriteError as error:
                if time.monotonic() > deadline:
                    pytest.fail(f"no write accepted within 30 s of the failover: {error}")
                time.sleep(0.1)
        assert pool.get(b"before") == b"1" and pool.get(b"after") == b"2"
    cluster.start_again(leader)
