"""The blocking API (`ferrite.connect`, `Session`, `Pool`) against a real two-shard server.

Proves every call does what its docstring says: pools are created, opened, listed and deleted on
the shard that owns their name; keys and values of every accepted type round-trip; put's flags,
attributes, find and invoke behave; and every failure raises the class of its wire error code
(KeyNotFound, KeyExists, PoolExists, PoolNotFound, PoolInUse, PoolNotOpen, KeyTooLarge,
InvalidArgument; ValueTooLarge is in test_large_values.py) or of its client-side cause
(ConnectionFailed, ConnectionClosed), with `.code`, `.number` and `.message` set.
"""

import socket
import time
import warnings
import zlib

import pytest

import ferrite
from ferrite import _ferrite
from ferrite_servers import unique_name


def test_connect_learns_shards_and_limits(server, session):
    assert session.shard_count == 2
    assert session.shard_addresses == [server.native_address(0), server.native_address(1)]
    limits = session.limits
    assert (limits.key_bytes_max, limits.value_bytes_max) == (64 * 1024, 2 * 1024 * 1024)
    assert "value_bytes_max=2097152" in repr(limits)
    for name in ["a", "b", "users", "@1/pinned"]:
        assert session.shard_for_pool(name) == _ferrite._shard_for_pool(name, 2)
    assert repr(session).startswith("<ferrite.Session open")


def test_pools_are_created_opened_listed_and_deleted_on_their_shard(session):
    name = unique_name()
    pool = session.create_pool(name, size_bytes=1 << 20, expected_objects=100)
    assert (pool.name, pool.created, pool.closed) == (name, True, False)
    assert pool.shard == session.shard_for_pool(name)
    again = session.create_pool(name)
    assert again.created is False, "create_pool opens an existing pool"
    opened = session.open_pool(name)
    opened.put("k", "v")
    assert pool.get("k") == b"v", "every open of a pool sees the same pairs"

    [info] = [p for p in session.pools() if p.name == name]
    assert (info.shard, info.objects, info.size_bytes, info.open_count) == (pool.shard, 1, 1 << 20, 3)
    assert info.used_bytes > 0 and info.plugins == [] and info.memory_bytes > 0
    assert set(info.memory) == {"table_buckets", "table_bytes", "slab_bytes", "large_bytes", "other_bytes", "index_bytes"}
    assert info.bytes_per_key == info.memory_bytes / 1
    assert (info.indexed, info.durability) == (False, "sync")
    assert repr(info).startswith(f"PoolInfo(name='{name}'")
    tuned = unique_name()
    with session.create_pool(tuned, size_bytes=1 << 20, indexed=True, durability="async"):
        [described] = [p for p in session.pools() if p.name == tuned]
        assert (described.indexed, described.durability) == (True, "async")
        assert "indexed=True, durability='async'" in repr(described)
    session.delete_pool(tuned)

    with pytest.raises(ferrite.PoolInUse):
        session.delete_pool(name)
    for handle in (pool, again, opened):
        handle.close()
    session.delete_pool(name)
    assert name not in [p.name for p in session.pools()]


def test_pool_errors(session):
    name = unique_name()
    with session.create_pool(name):
        with pytest.raises(ferrite.PoolExists) as raised:
            session.create_pool(name, create_only=True)
        assert raised.value.code == "pool_exists" and raised.value.number == 9
    session.delete_pool(name)
    with pytest.raises(ferrite.PoolNotFound):
        session.open_pool(name)
    with pytest.raises(ferrite.PoolNotFound):
        session.delete_pool(name)
    with pytest.raises(ferrite.InvalidArgument):
        session.create_pool(name, size_bytes=0)
    with pytest.raises(ferrite.InvalidArgument):
        session.create_pool("")
    with pytest.raises(ferrite.InvalidArgument):
        session.create_pool(name, durability="sometimes")
    with pytest.raises(ferrite.InvalidArgument):
        session.create_pool(name, plugins=["no-such-plugin"])
    with pytest.raises(TypeError):
        session.create_pool(name, plugins="counter")  # a list of names, not a string


def test_keys_and_values_of_every_accepted_type(pool):
    pool.put(b"bytes-key", b"bytes value")
    assert pool.get(b"bytes-key") == b"bytes value"
    pool.put("str-key \u00e9", "str value \u2713")
    assert pool.get("str-key \u00e9".encode()) == "str value \u2713".encode(), "str is stored as UTF-8"
    assert pool.get("str-key \u00e9") == "str value \u2713".encode()
    pool.put(bytearray(b"ba"), bytearray(b"from a bytearray"))
    assert pool.get(b"ba") == b"from a bytearray"
    pool.put(memoryview(b"xxmvxx")[2:4], memoryview(b"--from a memoryview--")[2:-2])
    assert pool.get("mv") == b"from a memoryview"
    pool.put("empty", b"")
    assert pool.get("empty") == b""
    pool.put(b"\x00\xff", bytes(range(256)))
    assert pool.get(b"\x00\xff") == bytes(range(256))
    assert pool.count() == 6
    with pytest.raises(TypeError, match="key must be bytes, str or an object supporting the buffer protocol"):
        pool.put(42, b"v")
    with pytest.raises(TypeError, match="value must be"):
        pool.put("k", 4.2)


def test_put_get_erase_and_their_errors(pool):
    with pytest.raises(ferrite.KeyNotFound) as raised:
        pool.get("absent")
    error = raised.value
    assert isinstance(error, ferrite.FerriteError)
    assert (error.code, error.number) == ("key_not_found", ferrite.ErrorCode.key_not_found)
    assert error.message and str(error).startswith("key_not_found: ")

    pool.put("k", "one")
    pool.put("k", "two")
    assert pool.get("k") == b"two", "put replaces"
    with pytest.raises(ferrite.KeyExists):
        pool.put("k", "three", create_only=True)
    with pytest.raises(ferrite.KeyNotFound):
        pool.put("other", "x", update_only=True)
    pool.put("k", "four", update_only=True)
    pool.put("new", "x", create_only=True)
    pool.put("fast", "x", durability="async")
    pool.put("safe", "x", durability="sync")
    with pytest.raises(ferrite.InvalidArgument, match="exclude each other"):
        pool.put("k", "v", create_only=True, update_only=True)
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError too
        pool.put("k", "v", durability="later")
    assert pool.get("k") == b"four"
    pool.erase("k")
    with pytest.raises(ferrite.KeyNotFound):
        pool.erase("k")
    assert pool.count() == 3


def test_values_past_the_inline_limit_travel_direct_and_long_keys_fail_before_sending(session, pool):
    # The direct transfers themselves are tested in test_large_values.py.
    limit = session.limits.value_bytes_max
    for length in (limit, limit + 1):
        value = bytes(range(256)) * (length // 256) + bytes(length % 256)
        pool.put(f"value-{length}", value)
        assert pool.get(f"value-{length}") == value
    with pytest.raises(ferrite.KeyTooLarge) as raised:
        pool.put(bytes(session.limits.key_bytes_max + 1), b"v")
    assert raised.value.number == ferrite.ErrorCode.key_too_large
    assert str(session.limits.key_bytes_max + 1) in raised.value.message
    with pytest.raises(ferrite.KeyNotFound):
        pool.get("too-large")


def test_attributes_of_a_value_and_of_the_pool(pool):
    before = time.time()
    pool.put("k", b"attribute me")
    attributes = pool.attributes("k")
    assert attributes.length == len(b"attribute me")
    assert attributes.crc32 == zlib.crc32(b"attribute me")
    assert before - 5 <= attributes.write_time <= time.time() + 5
    assert attributes.write_time_ns // 1_000_000_000 == int(attributes.write_time)
    with pytest.raises(ferrite.KeyNotFound):
        pool.attributes("absent")
    pool.put("k2", b"x")
    whole = pool.attributes()
    assert (whole.objects, whole.size_bytes) == (2, 32 << 20)
    assert 0 < whole.used_bytes <= whole.size_bytes
    assert "objects=2" in repr(whole)


def test_find_by_prefix_exact_regex_and_glob(pool):
    for key in ["user:1", "user:2", "user:10", "order:1", "userless"]:
        pool.put(key, b"v")
    assert pool.find("user:") == [b"user:1", b"user:10", b"user:2"]
    assert pool.find(b"user:", kind="prefix") == [b"user:1", b"user:10", b"user:2"]
    assert pool.find("order:1", kind="exact") == [b"order:1"]
    assert pool.find("^user:[0-9]$", kind="regex") == [b"user:1", b"user:2"]
    assert pool.find("user:?", kind="glob") == [b"user:1", b"user:2"]
    assert pool.find("nobody") == []
    assert len(pool.find("", limit=3)) == 3
    assert len(pool.find("")) == 5
    with pytest.raises(ferrite.InvalidArgument, match="unknown find kind"):
        pool.find("x", kind="fuzzy")
    with pytest.raises(ferrite.InvalidArgument, match="at least 1"):
        pool.find("x", limit=0)


def test_find_pages_through_many_keys_of_an_indexed_pool(session):
    name = unique_name()
    with session.create_pool(name, indexed=True, expected_objects=5000) as pool:
        keys = [f"k{i:05}".encode() for i in range(3000)]
        for key in keys:
            pool.put(key, b"")
        assert pool.find("k") == keys, "three pages of 1,024, each key once, in order"
        assert pool.find("k", limit=1500) == keys[:1500]
    session.delete_pool(name)


def test_an_index_added_to_an_existing_pool_serves_next(session, pool, pool_name):
    for key in ("b", "a", "d", "c"):
        pool.put(key, b"v")
    with pytest.raises(ferrite.InvalidArgument, match="secondary index"):
        pool.find("b", kind="next")
    session.configure_pool(pool_name, add_index=True)
    assert pool.find("b", kind="next") == [b"c", b"d"]
    assert pool.find("a", kind="next", limit=1) == [b"b"]
    session.configure_pool(pool_name, remove_index=True)
    with pytest.raises(ferrite.InvalidArgument):
        pool.find("b", kind="next")
    with pytest.raises(ferrite.InvalidArgument, match="exactly one"):
        session.configure_pool(pool_name, add_index=True, remove_index=True)
    with pytest.raises(ferrite.PoolNotFound):
        session.configure_pool(unique_name("absent"), add_index=True)


def test_stats_and_backup(session, pool, tmp_path):
    pool.put("counted", b"v")
    stats = session.stats()
    assert [shard["shard"] for shard in stats] == [0, 1]
    assert all(shard["puts"] >= 0 and "requests" in shard for shard in stats)
    assert stats[pool.shard]["puts"] >= 1
    reports = session.backup(str(tmp_path / "backup"))
    assert [report["shard"] for report in reports] == [0, 1]
    assert all(report["files"] >= 1 and report["bytes"] > 0 for report in reports)
    assert (tmp_path / "backup" / "shard-0").is_dir()


def test_closed_pools_and_sessions_refuse_calls(server):
    session = ferrite.connect(server.address)
    name = unique_name()
    pool = session.create_pool(name)
    pool.put("k", "v")
    pool.close()
    pool.close()  # twice is fine
    assert pool.closed and "closed" in repr(pool)
    with pytest.raises(ferrite.PoolNotOpen, match="is closed"):
        pool.get("k")

    other = session.open_pool(name)
    session.close()
    assert other.closed, "closing the session closes its pools"
    with pytest.raises(ferrite.PoolNotOpen):
        other.get("k")
    with pytest.raises(ferrite.ConnectionClosed):
        session.open_pool(name)
    session.close()  # twice is fine

    with ferrite.connect(server.address) as session:
        with session.open_pool(name) as pool:
            assert pool.get("k") == b"v"
        assert pool.closed
        session.delete_pool(name)
    with pytest.raises(ferrite.ConnectionClosed):
        session.pools()


def test_connect_failures(server):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ferrite.ConnectionFailed) as raised:
        ferrite.connect(f"127.0.0.1:{port}", connect_timeout=5)
    assert isinstance(raised.value, ConnectionError), "a ConnectionFailed is a ConnectionError too"
    assert raised.value.code == "connection_failed" and raised.value.number is None
    assert str(port) in str(raised.value)
    with pytest.raises(ferrite.InvalidArgument, match="timeout"):
        ferrite.connect(server.address, connect_timeout=0)
    with pytest.raises(ferrite.InvalidArgument, match="timeout"):
        ferrite.connect(server.address, connect_timeout=-1)
    with pytest.raises(ferrite.InvalidArgument, match="tls_client_cert_file and tls_client_key_file"):
        ferrite.connect(server.address, tls_ca_file="ca.pem", tls_client_cert_file="c.pem")
    with pytest.raises(ferrite.InvalidArgument, match="password needs a user"):
        ferrite.connect(server.address, password="secret")
    with pytest.raises(ferrite.ConnectionFailed, match="invalid socket address"):
        ferrite.connect("no port here")
    with pytest.raises(ferrite.ConnectionFailed, match="TLS"):
        ferrite.connect(server.address, tls_ca_file="/nonexistent/ca.pem")


def test_invoke_on_a_pool_without_plugins_is_an_invalid_argument(pool):
    with pytest.raises(ferrite.InvalidArgument):
        pool.invoke("k", "add 1", create_size=8)


def test_every_wire_error_code_has_its_class():
    assert len(ferrite.ErrorCode) == len(_ferrite.ERROR_CODES) >= 27
    for code in ferrite.ErrorCode:
        cls = ferrite.error_class(code.name)
        assert cls is ferrite.error_class(int(code))
        assert issubclass(cls, ferrite.FerriteError)
        assert cls.__module__ == "ferrite"
        assert (cls.code, cls.number) == (code.name, code.value)
        assert cls.__name__ == "".join(word.capitalize() for word in code.name.split("_"))
        assert getattr(ferrite, cls.__name__) is cls and cls.__name__ in ferrite.__all__
        assert cls.__doc__ and code.name in cls.__doc__
    for name in ["KeyNotFound", "PoolExists", "PoolNotFound", "NoSpace", "PermissionDenied", "AuthenticationFailed",
                 "QuotaExceeded", "AdoFailed", "AdoTimeout", "ValueTooLarge", "InvalidArgument"]:
        assert issubclass(getattr(ferrite, name), ferrite.FerriteError), name
    assert issubclass(ferrite.InvalidArgument, ValueError)
    assert issubclass(ferrite.BufferTooSmall, ferrite.InvalidArgument)
    assert issubclass(ferrite.ConnectionClosed, ferrite.ConnectionFailed)
    assert issubclass(ferrite.ConnectionFailed, ConnectionError)
    assert issubclass(ferrite.UnexpectedResponse, ferrite.FerriteError)
    assert ferrite.ErrorCode.key_not_found == 13 and ferrite.ErrorCode["quota_exceeded"] == 27
    assert ferrite.error_class("not_leader") is ferrite.NotLeader and ferrite.NotLeader.number == 28


def test_a_single_server_maps_as_one_node_leading_every_group(server, session):
    """The cluster map of a server not in cluster mode: node 0 at its shard 0, leading both
    groups of the two-shard server, so a program reads both modes alike."""
    cluster = session.cluster_map()
    assert cluster["single_server"] is True
    assert (cluster["version"], cluster["cluster_id"]) == (0, "")
    assert [node["node_id"] for node in cluster["nodes"]] == [0]
    assert cluster["nodes"][0]["native"] == session.shard_addresses[0]
    assert [(group["group"], group["leader"], group["voters"]) for group in cluster["groups"]] == [(0, 0, [0]), (1, 0, [0])]


def test_options_carry_the_names_every_client_uses_and_old_names_still_work_with_a_warning(server, session):
    """One vocabulary in every client (docs/clients.md, "One vocabulary"): `size_bytes`,
    `expected_objects`, `connect_timeout`, `tls_ca_file`, `tls_client_cert_file`,
    `tls_client_key_file`, and `size_bytes`/`used_bytes` on pool listings and attributes. The
    names these had before are accepted still, each with a DeprecationWarning; a name given twice
    over (old and new) is refused."""
    name = unique_name()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names warn about nothing
        with ferrite.connect(server.address, connect_timeout=5) as fresh:
            with fresh.create_pool(name, size_bytes=1 << 20, expected_objects=100) as pool:
                pool.put("k", "v")
                assert (pool.attributes().size_bytes, pool.attributes().used_bytes) == (1 << 20, 1 + 1 + 64)
            [info] = [p for p in fresh.pools() if p.name == name]
            assert (info.size_bytes, info.used_bytes) == (1 << 20, 66)
    with pytest.warns(DeprecationWarning, match="size is deprecated: use size_bytes"):
        session.create_pool(name, size=1 << 20).close()
    with pytest.warns(DeprecationWarning, match="expected_count is deprecated: use expected_objects"):
        session.create_pool(name, expected_count=10).close()
    with pytest.warns(DeprecationWarning, match="timeout is deprecated: use connect_timeout"):
        ferrite.connect(server.address, timeout=5).close()
    with pytest.warns(DeprecationWarning, match="tls_ca is deprecated: use tls_ca_file"):
        with pytest.raises(ferrite.ConnectionFailed, match="/nonexistent/ca.pem"):
            ferrite.connect(server.address, tls_ca="/nonexistent/ca.pem")
    with pytest.warns(DeprecationWarning, match="tls_cert is deprecated: use tls_client_cert_file"):
        with pytest.raises(ferrite.InvalidArgument, match="tls_client_cert_file and tls_client_key_file"):
            ferrite.connect(server.address, tls_ca_file="ca.pem", tls_cert="c.pem")
    with pytest.warns(DeprecationWarning, match="used is deprecated: use used_bytes"):
        assert info.used == 66
    with pytest.warns(DeprecationWarning, match="size is deprecated: use size_bytes"):
        assert info.size == 1 << 20
    with pytest.raises(ferrite.InvalidArgument, match="give one of size_bytes and size"):
        session.create_pool(name, size_bytes=1 << 20, size=1 << 20)
    session.delete_pool(name)
