"""Active Data Objects from Python: the shipped `counter`, `faulty` and `filter` plugins.

Proves that `invoke` with create-on-demand runs the pool's plugin and returns its answer as
`(layer, bytes)` pairs (`add 5` on a new counter answers `5`), that the value it keeps is the
counter's 8 bytes, that read-only and fire-and-forget invocations behave, that `invoke_put` stores
before it runs the chain, that `invoke_pool` runs a plugin on the whole pool, and that a plugin's
failure raises `AdoFailed` and leaves the pool as before — in both APIs.
"""

import asyncio

import pytest

import ferrite
import ferrite.aio
from ferrite_servers import unique_name


@pytest.fixture
def counters(session):
    name = unique_name("counters")
    pool = session.create_pool(name, plugins=["counter"])
    assert session.pools() and [p.plugins for p in session.pools() if p.name == name] == [["counter"]]
    yield pool
    pool.close()
    session.delete_pool(name)


def test_counter_add_get_and_its_value(counters):
    assert counters.invoke("hits", "add 5", create_size=8) == [(0, b"5")]
    assert counters.invoke(b"hits", b"add 37") == [(0, b"42")]
    assert counters.invoke("hits", "get", read_only=True) == [(0, b"42")]
    assert counters.get("hits") == (42).to_bytes(8, "little")
    assert counters.invoke("hits", "add 1", fire_and_forget=True) == []
    assert counters.invoke("hits", "get") in ([(0, b"43")], [(0, b"42")])


def test_counter_errors(counters):
    with pytest.raises(ferrite.KeyNotFound):
        counters.invoke("absent", "add 1")  # no create_size: the key must exist
    with pytest.raises(ferrite.AdoFailed) as raised:
        counters.invoke("hits", "bogus", create_size=8)
    assert raised.value.code == "ado_failed" and "counter" in raised.value.message
    with pytest.raises(ferrite.KeyNotFound):
        counters.get("hits")  # the failed call did not create its key
    assert counters.invoke("hits", "get", create_size=8) == [(0, b"0")]
    with pytest.raises(ferrite.AdoFailed):
        counters.invoke("hits", "add 1", read_only=True)  # a write on a read-only invocation
    assert counters.invoke("hits", "get") == [(0, b"0")], "failed calls changed nothing"


def test_invoke_put_stores_then_runs_the_chain(counters):
    answer = counters.invoke_put("preset", (100).to_bytes(8, "little"), "add 1")
    assert answer == [(0, b"101")]
    assert counters.invoke_put("preset", bytes(8), "get", no_overwrite=True) == [(0, b"101")]


def test_a_failing_plugin_leaves_the_pool_as_before(session):
    name = unique_name("faulty")
    with session.create_pool(name, plugins=["faulty"]) as pool:
        pool.put("k", b"original")
        assert pool.invoke("k", "ok") == [(0, b"ok")]
        with pytest.raises(ferrite.AdoFailed):
            pool.invoke("k", "write-then-fail")
        assert pool.get("k") == b"original"
        with pytest.raises(ferrite.AdoFailed):
            pool.invoke("k", "panic")
        assert pool.invoke("k", "ok") == [(0, b"ok")], "the next call is served"
    session.delete_pool(name)


def test_invoke_pool_runs_a_plugin_over_the_whole_pool(session):
    name = unique_name("filter")
    with session.create_pool(name, plugins=["filter"]) as pool:
        pool.put("red", b"a red apple")
        pool.put("green", b"a green pear")
        answer = pool.invoke_pool("contains red")
        assert answer == [(0, b"red")]
    session.delete_pool(name)


def test_counter_through_asyncio(server):
    async def main():
        async with await ferrite.aio.connect(server.address) as session:
            name = unique_name("counters")
            async with await session.create_pool(name, plugins=["counter"]) as pool:
                answers = await asyncio.gather(*(pool.invoke("hits", "add 1", create_size=8) for _ in range(50)))
                assert sorted(int(answer[0][1]) for answer in answers) == list(range(1, 51))
                assert await pool.invoke_put("p", (7).to_bytes(8, "little"), "add 1") == [(0, b"8")]
                with pytest.raises(ferrite.AdoFailed):
                    await pool.invoke("hits", "bogus")
                with pytest.raises(ferrite.AdoFailed, match="lives in a key"):
                    await pool.invoke_pool("get")
            await session.delete_pool(name)

    asyncio.run(main())
