"""The RESP listener through the `redis` package (redis-py), unchanged.

Each test starts its own `target/debug/ferrite-server` (see `conftest.py`) with RESP on a free
port (port 0), reads the ports from the server's announcement, and stops it by its own process id
with SIGTERM. Every test runs twice: with RESP2 and with RESP3 (redis-py's default since 8.0).
"""

import pytest
import redis
from conftest import Server


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
    persistence = r.info("persistence")
    assert persistence["aof_enabled"] == 1, "the default pool is durable: its log takes the AOF's place"
    assert persistence["loading"] == 0
    assert persistence["ferrite_wal_commits"] >= 1 and persistence["ferrite_durable_lsn"] >= 1
    # One field of each of Redis's default sections: server, clients, memory, persistence, stats,
    # keyspace.
    everything = r.info()
    for field in ("redis_version", "connected_clients", "used_memory", "aof_enabled", "total_commands_processed", "db0"):
        assert field in everything, field


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
    with pytest.raises(redis.ResponseError, match="has no plugins"):
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
