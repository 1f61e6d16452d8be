"""What Redis Cluster clients read from a single Ferrite server (cluster mode off) through
redis-py, unchanged: the full `COMMAND` table, parsed as redis-py's cluster client parses it to
find each command's keys; the cluster commands refused as by Redis without cluster support; `WAIT`
answered at once. A cluster's own answers (`MOVED`, `CLUSTER SLOTS`, ...) are covered by the
server's unit tests over a hand-filled cluster map (`resp/commands/cluster_tests.rs`).
"""

import pytest
import redis
from redis._parsers.commands import CommandsParser, RequestPolicy
from redis.commands.policies import DynamicPolicyResolver


def test_command_table_lists_every_command_with_its_keys(r):
    table = r.command()
    listed = {name.decode() for name in r.command_list()}
    assert set(table) == listed
    assert len(table) == r.command_count()
    positions = {name: (entry["arity"], entry["first_key_pos"], entry["last_key_pos"], entry["step_count"])
                 for name, entry in table.items()}
    assert positions["get"] == (2, 1, 1, 1)
    assert positions["set"] == (-3, 1, 1, 1)
    assert positions["mset"] == (-3, 1, -1, 2)
    assert positions["del"] == (-2, 1, -1, 1)
    assert positions["rename"] == (3, 1, 2, 1)
    assert positions["ferrite.invoke"] == (-3, 1, 1, 1)
    assert positions["ping"] == (-1, 0, 0, 0)
    assert positions["wait"] == (3, 0, 0, 0)
    assert "readonly" in table["get"]["flags"] and "write" in table["set"]["flags"]
    subcommands = {entry[0].decode() for entry in table["cluster"]["subcommands"]}
    assert {"cluster|slots", "cluster|nodes", "cluster|shards", "cluster|info", "cluster|myid"} <= subcommands


def test_redis_pys_cluster_parser_finds_each_commands_keys(r):
    parser = CommandsParser(r)
    assert parser.get_keys(r, "GET", "k") == ["k"]
    assert parser.get_keys(r, "MSET", "a", "1", "b", "2") == ["a", "b"]
    assert parser.get_keys(r, "DEL", "a", "b", "c") == ["a", "b", "c"]
    assert parser.get_keys(r, "RENAME", "a", "b") == ["a", "b"]
    assert parser.get_keys(r, "COPY", "a", "b", "REPLACE") == ["a", "b"]
    assert parser.get_keys(r, "FERRITE.INVOKE", "k", "payload") == ["k"]
    assert parser.get_keys(r, "DBSIZE", "x") is None
    assert parser.get_keys(r, "CLIENT", "SETNAME", "me") is None
    with pytest.raises(redis.RedisError, match="LPUSH command doesn't exist"):
        parser.get_keys(r, "LPUSH", "list", "x")
    # Its resolver of routing policies reads the tips and subcommands of the table.
    policies = DynamicPolicyResolver(parser)
    assert policies.resolve("mget").request_policy == RequestPolicy.MULTI_SHARD
    assert policies.resolve("dbsize").request_policy == RequestPolicy.ALL_SHARDS
    assert policies.resolve("get").request_policy == RequestPolicy.DEFAULT_KEYED


def test_command_getkeys_answers_from_the_table(r):
    assert [redis.utils.str_if_bytes(key) for key in r.command_getkeys("MSET", "a", "1", "b", "2")] == ["a", "b"]
    assert r.command_getkeysandflags("SET", "k", "v")[0][0] == b"k"
    with pytest.raises(redis.ResponseError, match="The command has no key arguments"):
        r.command_getkeys("PING", "x")
    with pytest.raises(redis.ResponseError, match="Invalid command specified"):
        r.command_getkeys("NOSUCH", "x")


def test_cluster_commands_say_cluster_support_is_disabled(r):
    for command in (("CLUSTER", "INFO"), ("CLUSTER", "SLOTS"), ("CLUSTER", "NOSUCH"), ("READONLY",), ("ASKING",)):
        with pytest.raises(redis.ResponseError, match="^This instance has cluster support disabled$"):
            r.execute_command(*command)
    info = r.info()
    assert info["cluster_enabled"] == 0
    assert info["role"] == "master"
    assert info["redis_mode"] == "standalone"


def test_wait_answers_zero_at_once(r):
    r.set("k", "v")
    assert r.wait(0, 0) == 0
    assert r.wait(1, 0) == 0, "a single server has no replica to wait for, so it does not"


def test_redis_pys_cluster_client_finds_no_cluster(server):
    host, port = server.resp[0]
    with pytest.raises(redis.exceptions.RedisClusterException, match="Cluster mode is not enabled on this node"):
        redis.RedisCluster(host=host, port=port, socket_timeout=10)
