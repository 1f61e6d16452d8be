"""String and keyspace commands against `redis-server` in the same test: each scenario runs the same
commands, in the same order, on a fresh Ferrite RESP listener and a fresh `redis-server`, and every
reply must be the same, errors included (their kind and text). Where Ferrite differs on purpose
(keys do not expire, one database, `KEYS` bounded), the test says so and checks Ferrite's own
answer. Read-modify-write commands are also run by many clients at once: none may lose another's
change.
"""

import threading
import time

import pytest
import redis

# Each scenario: the commands to run, in order, on a fresh server.
SCENARIOS = {
    "strlen": [
        ("SET", "k", "hello"), ("STRLEN", "k"), ("STRLEN", "missing"), ("SET", "empty", ""),
        ("STRLEN", "empty"), ("STRLEN",), ("STRLEN", "k", "extra"),
    ],
    "append": [
        ("APPEND", "a", "Hello"), ("APPEND", "a", " World"), ("GET", "a"), ("APPEND", "a", ""),
        ("APPEND", "b", ""), ("EXISTS", "b"), ("SET", "n", "1"), ("APPEND", "n", "2"), ("INCR", "n"),
        ("APPEND", "a"),
    ],
    "setnx": [
        ("SETNX", "k", "v"), ("SETNX", "k", "w"), ("GET", "k"), ("SETNX", "k"),
    ],
    "getset": [
        ("GETSET", "g", "1"), ("GETSET", "g", "2"), ("GET", "g"), ("GETSET", "g"),
    ],
    "getdel": [
        ("SET", "k", "v"), ("GETDEL", "k"), ("GETDEL", "k"), ("EXISTS", "k"), ("GETDEL",),
    ],
    "getex": [
        ("SET", "k", "v"), ("GETEX", "k"), ("GETEX", "k", "PERSIST"), ("GETEX", "missing"),
        ("GETEX", "k", "BOGUS"), ("GETEX", "k", "PERSIST", "PERSIST"), ("TTL", "k"),
    ],
    "incrbyfloat": [
        ("SET", "f", "10.50"), ("INCRBYFLOAT", "f", "0.1"), ("INCRBYFLOAT", "f", "-5"), ("GET", "f"),
        ("SET", "e", "5.0e3"), ("INCRBYFLOAT", "e", "2.0e2"), ("INCRBYFLOAT", "missing", "1.5"),
        ("INCRBYFLOAT", "i", "3"), ("INCR", "i"), ("INCRBYFLOAT", "i", "-4"), ("GET", "i"),
        ("INCRBYFLOAT", "f", "0"), ("INCRBYFLOAT", "f", "1e2"), ("INCRBYFLOAT", "f", ".5"),
        ("SET", "t", "text"), ("INCRBYFLOAT", "t", "1"), ("INCRBYFLOAT", "f", "abc"),
        ("INCRBYFLOAT", "f", ""), ("INCRBYFLOAT", "f", " 1"), ("INCRBYFLOAT", "f", "1 "),
        ("INCRBYFLOAT", "f", "nan"), ("INCRBYFLOAT", "f", "inf"), ("INCRBYFLOAT", "f", "-inf"),
        ("GET", "f"), ("INCRBYFLOAT", "f"),
    ],
    "msetnx": [
        ("MSETNX", "a", "1", "b", "2"), ("MSETNX", "b", "3", "c", "4"), ("MGET", "a", "b", "c"),
        ("MSETNX", "c", "5", "c", "6"), ("GET", "c"), ("MSETNX", "d", "1", "e"), ("MSETNX", "d"),
        ("EXISTS", "d"),
    ],
    "getrange": [
        ("SET", "s", "This is a string"), ("GETRANGE", "s", "0", "3"), ("GETRANGE", "s", "-3", "-1"),
        ("GETRANGE", "s", "0", "-1"), ("GETRANGE", "s", "10", "100"), ("GETRANGE", "s", "5", "2"),
        ("GETRANGE", "s", "-100", "-50"), ("GETRANGE", "s", "-1", "-5"), ("GETRANGE", "s", "-100", "2"),
        ("GETRANGE", "s", "20", "30"), ("GETRANGE", "missing", "0", "-1"), ("GETRANGE", "s", "x", "1"),
        ("SUBSTR", "s", "0", "3"), ("SET", "empty", ""), ("GETRANGE", "empty", "0", "-1"),
        ("GETRANGE", "s", "0"),
    ],
    "setrange": [
        ("SET", "k", "Hello World"), ("SETRANGE", "k", "6", "Redis"), ("GET", "k"),
        ("SETRANGE", "k", "20", "!"), ("GET", "k"), ("SETRANGE", "new", "5", "x"), ("GET", "new"),
        ("SETRANGE", "k", "-1", "x"), ("SETRANGE", "k", "x", "x"), ("SETRANGE", "none", "3", ""),
        ("EXISTS", "none"), ("SETRANGE", "k", "100", ""), ("STRLEN", "k"), ("SETRANGE", "k", "0"),
    ],
    "type": [
        ("SET", "k", "v"), ("TYPE", "k"), ("TYPE", "missing"), ("TYPE",),
    ],
    "ttl": [
        ("SET", "k", "v"), ("TTL", "k"), ("TTL", "missing"), ("PTTL", "k"), ("PTTL", "missing"),
        ("EXPIRETIME", "k"), ("EXPIRETIME", "missing"), ("PEXPIRETIME", "k"), ("PEXPIRETIME", "missing"),
        ("PERSIST", "k"), ("PERSIST", "missing"), ("TTL",),
    ],
    "rename": [
        ("SET", "a", "1"), ("RENAME", "a", "b"), ("GET", "b"), ("EXISTS", "a"), ("RENAME", "a", "c"),
        ("SET", "c", "3"), ("RENAME", "b", "c"), ("GET", "c"), ("EXISTS", "b"), ("RENAME", "c", "c"),
        ("GET", "c"), ("RENAMENX", "c", "d"), ("SET", "e", "5"), ("RENAMENX", "d", "e"),
        ("MGET", "c", "d", "e"), ("RENAMENX", "d", "d"), ("RENAMENX", "missing", "x"), ("RENAME", "d"),
    ],
    "copy": [
        ("SET", "src", "v"), ("COPY", "src", "dst"), ("GET", "dst"), ("SET", "src", "w"),
        ("COPY", "src", "dst"), ("GET", "dst"), ("COPY", "src", "dst", "REPLACE"), ("GET", "dst"),
        ("COPY", "missing", "x"), ("EXISTS", "x"), ("COPY", "src", "src"), ("COPY", "src", "x", "DB", "0"),
        ("GET", "x"), ("COPY", "src", "y", "BOGUS"), ("COPY", "src", "y", "DB", "x"), ("COPY", "src", "y", "DB"),
        ("COPY", "src"),
    ],
    "unlink_and_touch": [
        ("MSET", "a", "1", "b", "2"), ("TOUCH", "a", "a", "missing"), ("UNLINK", "a", "missing"),
        ("EXISTS", "a", "b"), ("UNLINK",), ("TOUCH",),
    ],
    "keys": [
        ("MSET", "hello", "1", "hallo", "2", "hxllo", "3", "user:1", "4", "user:2", "5"),
        ("KEYS", "h?llo"), ("KEYS", "h[ae]llo"), ("KEYS", "user:*"), ("KEYS", "*"), ("KEYS", "nothing*"),
        ("KEYS",),
    ],
}


def outcome(connection: redis.Connection, command: tuple):
    """One command's reply as redis-py reads it, an error as its class and text; key lists (whose
    order neither server promises) sorted."""
    connection.send_command(*command)
    try:
        reply = connection.read_response()
    except redis.ResponseError as error:
        return (type(error).__name__, str(error))
    if command[0] == "KEYS" and isinstance(reply, list):
        return sorted(reply)
    return reply


def run(server_client: redis.Redis, commands: list) -> list:
    connection = server_client.connection_pool.get_connection()
    try:
        return [(command, outcome(connection, command)) for command in commands]
    finally:
        server_client.connection_pool.release(connection)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_replies_are_redis_replies(ferrite_and_redis, scenario):
    ferrite, reference = ferrite_and_redis
    commands = SCENARIOS[scenario]
    expected = run(reference, commands)
    assert run(ferrite, commands) == expected


def test_expiry_is_refused_and_keys_never_expire(server):
    r = server.client(2)
    r.set("k", "v")
    for command in [
        ("EXPIRE", "k", "10"), ("PEXPIRE", "k", "10"), ("EXPIREAT", "k", "9999999999"),
        ("PEXPIREAT", "k", "9999999999999"), ("SETEX", "k", "10", "v"), ("PSETEX", "k", "10", "v"),
        ("GETEX", "k", "EX", "10"), ("GETEX", "k", "PX", "10"), ("GETEX", "k", "EXAT", "1"),
        ("GETEX", "k", "PXAT", "1"),
    ]:
        with pytest.raises(redis.ResponseError, match="do not expire"):
            r.execute_command(*command)
    assert r.ttl("k") == -1
    assert r.get("k") == b"v", "a refused command changes nothing"


def test_copy_to_another_database_is_refused(server):
    r = server.client(2)
    r.set("src", "v")
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        r.copy("src", "dst", destination_db=1)
    assert r.exists("dst") == 0


def test_setrange_past_the_value_limit_is_refused_before_anything_is_allocated(server):
    r = server.client(2)
    r.set("k", "v")
    with pytest.raises(redis.ResponseError, match="maximum allowed size"):
        r.setrange("k", 1 << 40, "x")
    with pytest.raises(redis.ResponseError, match="maximum allowed size"):
        r.setrange("new", 1 << 40, "x")
    assert r.get("k") == b"v"
    assert r.exists("new") == 0


def test_msetnx_pairs_are_bounded(server):
    r = server.client(2)
    pairs = {f"k{i}": "v" for i in range(1025)}
    with pytest.raises(redis.ResponseError, match="at most 1024 pairs"):
        r.msetnx(pairs)
    assert r.dbsize() == 0
    del pairs["k0"]
    assert r.msetnx(pairs) is True
    assert r.dbsize() == 1024


def test_keys_walks_a_large_pool_in_steps_and_bounds_its_answer(server):
    r = server.client(2)
    for start in range(0, 200_000, 10_000):
        r.mset({f"key:{i}": "v" for i in range(start, start + 10_000)})
    expected = sorted(f"key:{i}".encode() for i in range(200_000) if str(i).startswith("1999"))
    assert sorted(r.keys("key:1999*")) == expected, "each matching key once, from a walk of many steps"
    with pytest.raises(redis.ResponseError, match="at most 65536 keys.*use SCAN"):
        r.keys("*")
    assert r.keys("key:1") == [b"key:1"], "a pattern without wildcards is a lookup"
    assert r.keys("k" * 100_000) == [], "of a key that cannot exist, too"
    assert r.keys("key:\\*") == [], "so is an escaped one"
    with r.pipeline(transaction=True) as pipe:
        pipe.keys("key:1999*")
        with pytest.raises(redis.ResponseError, match="inside MULTI.*use SCAN"):
            pipe.execute()


def test_time_is_the_servers_clock(server):
    r = server.client(2)
    seconds, micros = r.time()
    assert abs(seconds + micros / 1e6 - time.time()) < 60, "the same clock as this machine's"
    assert 0 <= micros < 1_000_000


def test_command_list_names_every_command(server):
    [(_, listed), (_, count)] = run(server.client(2), [("COMMAND", "LIST"), ("COMMAND", "COUNT")])
    listed = {name.decode() for name in listed}
    commands = {command[0].lower() for scenario in SCENARIOS.values() for command in scenario}
    assert commands <= listed, commands - listed
    assert count == len(listed)


CLIENTS = 8
ROUNDS = 200


def concurrently(server, work):
    """Runs `work(client, index)` on CLIENTS clients at once, each with its own connection."""
    clients = [server.client(2) for _ in range(CLIENTS)]
    start = threading.Barrier(CLIENTS)
    failures = []

    def body(client, index):
        try:
            start.wait()
            work(client, index)
        except Exception as error:  # reported below, in the test's thread
            failures.append(error)

    threads = [threading.Thread(target=body, args=(client, i)) for i, client in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for client in clients:
        client.close()
    assert not failures, failures


def test_read_modify_write_commands_lose_no_update(server):
    def work(client, index):
        for round_ in range(ROUNDS):
            client.append("appended", "x")
            client.incrbyfloat("float", 0.5)
            client.setrange("ranged", index, "y")
            old = client.getset("swapped", f"{index}:{round_}")
            olds.append(old)

    olds = []
    concurrently(server, work)
    r = server.client(2)
    assert r.strlen("appended") == CLIENTS * ROUNDS
    assert r.get("float") == str(CLIENTS * ROUNDS * 0.5).removesuffix(".0").encode()
    assert r.get("ranged") == b"y" * CLIENTS
    # Every value GETSET wrote was read back by exactly one later GETSET, but the last one.
    written = {f"{i}:{j}".encode() for i in range(CLIENTS) for j in range(ROUNDS)}
    read = [old for old in olds if old is not None]
    assert olds.count(None) == 1, "only the first GETSET found no value"
    assert len(read) == len(set(read)) == len(written) - 1
    assert set(read) | {r.get("swapped")} == written
