"""The asyncio API (`ferrite.aio`) against real servers.

Proves that 1,000 puts and then 1,000 gets gathered on one session all complete correctly while
travelling on one connection (the server counts one client on the pool's shard), that every call
of the async session and pool matches its blocking twin, that failures raise the same exception
classes through the awaitables, that `async with` closes sessions and pools, that numpy arrays go
in and come back in place, and that a cancelled call leaves the session usable.
"""

import asyncio
import zlib

import numpy as np
import pytest

import ferrite
import ferrite.aio
from ferrite_servers import Server, unique_name


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=120))


@pytest.fixture
def one_shard_server():
    server = Server(shards=1)
    yield server
    server.stop()


def test_a_thousand_calls_in_flight_on_one_connection(one_shard_server):
    async def main():
        async with await ferrite.aio.connect(one_shard_server.address) as session:
            async with await session.create_pool("gathered", expected_objects=2000) as pool:
                await asyncio.gather(*(pool.put(f"key-{i}", f"value-{i}") for i in range(1000)))
                values = await asyncio.gather(*(pool.get(f"key-{i}") for i in range(1000)))
                assert values == [f"value-{i}".encode() for i in range(1000)]
                assert await pool.count() == 1000
                [stats] = await session.stats()
                assert stats["clients"] == 1, "every call travelled on the session's one connection"
                assert stats["puts"] == 1000 and stats["gets"] == 1000

    run(main())


def test_every_async_call(server):
    async def main():
        session = await ferrite.aio.connect(server.address, client_name="aio-test")
        assert isinstance(session, ferrite.aio.Session)
        assert session.shard_count == 2 and len(session.shard_addresses) == 2
        assert session.limits.value_bytes_max == 2 * 1024 * 1024
        name = unique_name("aio")
        assert session.shard_for_pool(name) in (0, 1)
        pool = await session.create_pool(name, size_bytes=8 << 20, indexed=True)
        assert isinstance(pool, ferrite.aio.Pool)
        assert (pool.name, pool.created, pool.shard) == (name, True, session.shard_for_pool(name))
        assert (await session.create_pool(name)).created is False

        await pool.put("k", b"value")
        await pool.put(b"k2", bytearray(b"v2"), create_only=True, durability="async")
        assert await pool.get("k") == b"value"
        attributes = await pool.attributes("k")
        assert (attributes.length, attributes.crc32) == (5, zlib.crc32(b"value"))
        assert (await pool.attributes()).objects == 2
        assert await pool.find("k") == [b"k", b"k2"]
        assert await pool.find("k", kind="exact", limit=1) == [b"k"]
        assert await pool.find("k", kind="next") == [b"k2"]
        await session.configure_pool(name, remove_index=True)
        with pytest.raises(ferrite.InvalidArgument):
            await pool.find("k", kind="next")
        await session.configure_pool(name, add_index=True)
        assert await pool.find("k", kind="next") == [b"k2"]
        assert await pool.count() == 2
        await pool.erase("k2")
        assert await pool.count() == 1

        [info] = [p for p in await session.pools() if p.name == name]
        assert info.objects == 1 and info.memory["index_bytes"] > 0, "an indexed pool"
        assert [s["shard"] for s in await session.stats()] == [0, 1]
        cluster = await session.cluster_map()
        assert cluster["single_server"] and [group["leader"] for group in cluster["groups"]] == [0, 0]

        opened = await session.open_pool(name)
        assert await opened.get("k") == b"value"
        await opened.close()
        await pool.close()
        assert pool.closed
        await session.delete_pool(name)
        await session.close()
        assert "closed" in repr(session)

    run(main())


def test_async_errors_raise_the_wire_classes(server):
    async def main():
        async with await ferrite.aio.connect(server.address) as session:
            name = unique_name("aio")
            async with await session.create_pool(name) as pool:
                with pytest.raises(ferrite.KeyNotFound) as raised:
                    await pool.get("absent")
                assert raised.value.code == "key_not_found" and raised.value.message
                with pytest.raises(ferrite.KeyNotFound):
                    await pool.erase("absent")
                await pool.put("k", "v")
                with pytest.raises(ferrite.KeyExists):
                    await pool.put("k", "v", create_only=True)
                with pytest.raises(ferrite.KeyTooLarge):
                    await pool.put(bytes(session.limits.key_bytes_max + 1), b"v")
                with pytest.raises(ferrite.InvalidArgument):
                    pool.put("k", "v", create_only=True, update_only=True)  # refused before any await
                with pytest.raises(ferrite.InvalidArgument):
                    await pool.invoke("k", "add 1")  # no plugins on this pool
                with pytest.raises(ferrite.PoolExists):
                    await session.create_pool(name, create_only=True)
            assert pool.closed
            with pytest.raises(ferrite.PoolNotOpen):
                await pool.get("k")
            with pytest.raises(ferrite.PoolInUse):
                extra = await session.open_pool(name)
                await session.delete_pool(name)
            await extra.close()
            await session.delete_pool(name)
            with pytest.raises(ferrite.PoolNotFound):
                await session.open_pool(name)
        with pytest.raises(ferrite.ConnectionClosed):
            await session.pools()

    run(main())


def test_async_connect_failures():
    async def main():
        with pytest.raises(ferrite.ConnectionFailed):
            await ferrite.aio.connect("127.0.0.1:1", connect_timeout=5)
        with pytest.raises(ferrite.InvalidArgument):
            await ferrite.aio.connect("127.0.0.1:1", connect_timeout=0)
        # The deprecated names of connect's options still work, with a warning.
        with pytest.warns(DeprecationWarning, match="timeout is deprecated: use connect_timeout"):
            with pytest.raises(ferrite.ConnectionFailed):
                await ferrite.aio.connect("127.0.0.1:1", timeout=5)
        with pytest.raises(ferrite.InvalidArgument, match="give one of connect_timeout and timeout"):
            await ferrite.aio.connect("127.0.0.1:1", connect_timeout=5, timeout=5)
        with pytest.raises(TypeError, match="unexpected keyword argument 'timeuot'"):
            await ferrite.aio.connect("127.0.0.1:1", timeuot=5)

    run(main())


def test_async_numpy_in_place(server):
    async def main():
        async with await ferrite.aio.connect(server.address) as session:
            name = unique_name("aio")
            async with await session.create_pool(name) as pool:
                source = np.linspace(0, 1, 10_000)
                await pool.put("array", source)
                target = np.empty_like(source)
                pointer = target.__array_interface__["data"][0]
                assert await pool.get_into("array", target) == source.nbytes
                assert np.array_equal(target, source)
                assert target.__array_interface__["data"][0] == pointer
                with pytest.raises(ferrite.BufferTooSmall) as raised:
                    await pool.get_into("array", np.empty(10))
                assert raised.value.needed == source.nbytes
            await session.delete_pool(name)

    run(main())


def test_a_cancelled_call_leaves_the_session_usable(server):
    async def main():
        async with await ferrite.aio.connect(server.address) as session:
            name = unique_name("aio")
            async with await session.create_pool(name) as pool:
                calls = [asyncio.ensure_future(pool.put(f"k{i}", b"v")) for i in range(100)]
                calls[50].cancel()
                await asyncio.gather(*calls, return_exceptions=True)
                assert calls[50].cancelled()
                await pool.put("after", b"ok")
                assert await pool.get("after") == b"ok"
                assert 100 <= await pool.count() <= 101
            await session.delete_pool(name)

    run(main())


def test_sessions_on_successive_event_loops(server):
    """Each asyncio.run() has its own loop; a session connects on each."""
    for _ in range(3):
        async def main():
            async with await ferrite.aio.connect(server.address) as session:
                return len(await session.pools()) >= 0

        assert run(main())


def test_connect_outside_an_event_loop_is_refused(server):
    with pytest.raises(RuntimeError):
        ferrite._ferrite._connect_async(server.address)
