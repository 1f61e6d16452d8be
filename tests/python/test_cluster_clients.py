"""Redis Cluster clients, unchanged, against a real three-node Ferrite cluster (`ferrite cluster
local`, two groups): redis-py's RedisCluster, a plain redis-py client that meets -MOVED,
-CROSSSLOT, READONLY and WAIT, `redis-cli -c` and `redis-benchmark --cluster`; and, last, a
failover: the leader of a group killed with SIGKILL, the client going on with the new one.
"""

import subprocess
import time

import pytest
import redis
from redis.cluster import RedisCluster

from cluster_process import LocalCluster, host_port

# Keys whose CRC16 slots fall in both halves of the slot space, so both groups hold some.
KEYS = [f"key:{n}" for n in range(200)]


@pytest.fixture(scope="module")
def cluster():
    cluster = LocalCluster(nodes=3, shards=2)
    yield cluster
    cluster.stop()


def cluster_client(cluster, node: int = 1) -> RedisCluster:
    host, port = host_port(cluster.nodes[node]["resp"])
    return RedisCluster(host=host, port=port, socket_timeout=10)


def copies_of(cluster, key: str) -> list:
    """The (host, port) of each copy of `key`'s group, its leader first, as a fresh RedisCluster
    maps them."""
    client = cluster_client(cluster)
    nodes = client.nodes_manager.slots_cache[client.keyslot(key)]
    client.close()
    return [(node.host, int(node.port)) for node in nodes]


def test_redis_pys_cluster_client_stores_and_reads_keys_of_every_group(cluster):
    client = cluster_client(cluster)
    for key in KEYS:
        assert client.set(key, key.upper())
    assert [client.get(key) for key in KEYS] == [key.upper().encode() for key in KEYS]
    owners = {client.keyslot(key) < 8192 for key in KEYS}
    assert owners == {True, False}, "the keys cover both groups' slots"
    # Every node answers for the whole cluster: the map covers every slot, twice (two groups).
    slots = client.cluster_slots()
    covered = sum(end - start + 1 for start, end in slots)
    assert covered == 16384, slots
    client.close()


def test_topology_commands_describe_three_nodes_in_two_groups(cluster):
    host, port = host_port(cluster.nodes[2]["resp"])
    plain = redis.Redis(host=host, port=port, socket_timeout=10)
    info = plain.execute_command("CLUSTER INFO")
    assert info["cluster_state"] == "ok" and info["cluster_slots_assigned"] == "16384", info
    assert info["cluster_size"] == "2", info
    myid = plain.execute_command("CLUSTER MYID").decode()
    assert len(myid) == 40 and int(myid, 16) > 0, myid
    # One entry per node and group (each group of a node has its own RESP port and, for Redis
    # clients, is a node of its own): three copies of each group, one of which leads it; the
    # entry of the group this connection reached says "myself".
    nodes = plain.execute_command("CLUSTER NODES")
    assert len(nodes) == 6, nodes
    leaders = [entry for entry in nodes.values() if "master" in entry["flags"]]
    assert sorted(int(leader["slots"][0][0]) for leader in leaders) == [0, 8192], nodes
    mine = [entry for entry in nodes.values() if "myself" in entry["flags"]]
    assert [entry["node_id"] for entry in mine] == [myid], nodes
    shards = plain.execute_command("CLUSTER SHARDS")
    assert len(shards) == 2 and all(len(shard[b"nodes"]) == 3 for shard in shards), shards
    plain.close()


def test_a_plain_client_is_moved_to_the_leader_and_refused_across_slots(cluster):
    key = "moved-key"
    leader_address, follower_address, _ = copies_of(cluster, key)
    plain = redis.Redis(host=follower_address[0], port=follower_address[1], socket_timeout=10)
    slot = cluster_client(cluster).keyslot(key)
    with pytest.raises(redis.exceptions.MovedError) as moved:
        plain.set(key, "1")
    assert str(moved.value) == f"{slot} {leader_address[0]}:{leader_address[1]}"
    leader = redis.Redis(host=leader_address[0], port=leader_address[1], socket_timeout=10)
    assert leader.set(key, "1")
    # Keys of different slots in one command are refused, keys with one hash tag accepted.
    with pytest.raises(redis.exceptions.ResponseError, match="don.t hash to the same slot"):
        leader.execute_command("MSET", "{a}x", "1", "{b}y", "2")
    tagged = cluster_client(cluster)
    assert tagged.execute_command("MSET", "{user7}.name", "ada", "{user7}.city", "paris")
    assert tagged.mget_nonatomic(["{user7}.name", "{user7}.city"]) == [b"ada", b"paris"]
    plain.close()
    leader.close()
    tagged.close()


def test_followers_answer_reads_after_readonly_and_wait_counts_replicas(cluster):
    key = "replicated-key"
    leader_address, follower_address, _ = copies_of(cluster, key)
    leader = redis.Redis(host=leader_address[0], port=leader_address[1], socket_timeout=10)
    assert leader.set(key, "v1")
    # WAIT answers with the replicas that hold the write.
    assert leader.execute_command("WAIT", 2, 5000) == 2
    follower = redis.Redis(host=follower_address[0], port=follower_address[1], socket_timeout=10)
    with pytest.raises(redis.exceptions.MovedError):
        follower.get(key)
    assert follower.execute_command("READONLY") in (b"OK", "OK", True)
    deadline = time.monotonic() + 5
    while follower.get(key) != b"v1" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert follower.get(key) == b"v1"
    with pytest.raises(redis.exceptions.MovedError):
        follower.set(key, "v2")
    # A value past the inline limit is streamed by the leader; a follower redirects its reads
    # there rather than copying it whole into a reply.
    long_key, long_value = "{replicated-key}long", b"x" * (2 * 1024 * 1024 + 1)
    assert leader.set(long_key, long_value)
    deadline = time.monotonic() + 5
    while True:
        try:
            answer = follower.get(long_key)
        except redis.exceptions.MovedError:
            break
        assert answer is None and time.monotonic() < deadline, "a follower does not answer a long value"
        time.sleep(0.05)
    with pytest.raises(redis.exceptions.MovedError):
        follower.mget(key, long_key)
    assert follower.mget(key) == [b"v1"], "short values are still answered by the follower"
    assert leader.get(long_key) == long_value
    assert leader.mget(key, long_key) == [b"v1", long_value], "the leader streams it in MGET's array too"
    leader.close()
    follower.close()


def test_redis_cli_follows_redirections(cluster):
    host, port = host_port(cluster.nodes[3]["resp"])
    for key in ("alpha", "beta", "gamma"):
        stored = subprocess.run(["redis-cli", "-c", "-h", host, "-p", str(port), "SET", key, key * 2],
                                capture_output=True, text=True, timeout=30)
        assert stored.stdout.strip() == "OK", stored
        read = subprocess.run(["redis-cli", "-c", "-h", host, "-p", str(port), "GET", key],
                              capture_output=True, text=True, timeout=30)
        assert read.stdout.strip() == key * 2, read


def test_redis_benchmark_runs_against_the_cluster(cluster):
    host, port = host_port(cluster.nodes[1]["resp"])
    run = subprocess.run(
        ["redis-benchmark", "--cluster", "-h", host, "-p", str(port), "-t", "set,get", "-n", "2000",
         "-c", "8", "-r", "1000", "-q"],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run
    assert "requests per second" in run.stdout, run.stdout
    assert "error" not in (run.stdout + run.stderr).lower(), run


def test_the_cluster_client_goes_on_after_a_leader_is_killed(cluster):
    client = cluster_client(cluster)
    key = "through-failover"
    assert client.set(key, "before")
    group = 0 if client.keyslot(key) < 8192 else 1
    leader = cluster.wait_for_leader(group, asked=1)
    # The killed leader's listener for this group: the same once it is started again.
    host, port = copies_of(cluster, key)[0]
    survivor = next(node for node in cluster.nodes if node != leader)
    cluster.kill9(leader)
    new_leader = cluster.wait_for_leader(group, asked=survivor, not_node=leader)
    assert new_leader != leader
    deadline = time.monotonic() + 30
    while True:
        try:
            assert client.set(key, "after")
            break
        except (redis.exceptions.ConnectionError, redis.exceptions.ClusterDownError,
                redis.exceptions.TimeoutError, redis.exceptions.ResponseError) as error:
            if time.monotonic() > deadline:
                pytest.fail(f"no write accepted within 30 s of the failover: {error}")
            time.sleep(0.1)
    assert client.get(key) == b"after"
    # The killed node comes back from its files and catches up.
    cluster.start_again(leader)
    deadline = time.monotonic() + 30
    while True:
        try:
            back = redis.Redis(host=host, port=port, socket_timeout=5)
            back.execute_command("READONLY")
            if back.get(key) == b"after":
                break
        except (redis.exceptions.ConnectionError, redis.exceptions.ResponseError):
            pass
        if time.monotonic() > deadline:
            pytest.fail("the restarted node did not catch up within 30 s")
        time.sleep(0.1)
    client.close()
