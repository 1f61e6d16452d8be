"""Values past the inline limit (2 MiB), which travel as direct transfers by themselves, and the
offset calls, against real servers, through the blocking and the asyncio API.

Proves that 5 MiB and 20 MiB values round-trip through `put` / `get` and through `get_into` into
a numpy array (filled in place) and a larger bytearray (only its prefix written); that a buffer
too small for a large value, whether past the inline limit or not, raises `BufferTooSmall` with
the length needed and writes nothing; that `get_offset` and `get_into(..., offset=)` read slices
at the start, across pieces, at the end and at the very end, and that an offset past the end
raises `InvalidArgument` with the server's code; that `put_offset` writes inside a value, in one
piece or several, and refuses a range past the end; and that a value past the server's
`limits.direct_value_bytes_max` raises `ValueTooLarge`.
"""

import asyncio
import zlib

import numpy as np
import pytest

import ferrite
import ferrite.aio
from ferrite_servers import Server, unique_name

MIB = 1 << 20
LENGTHS = [5 * MIB, 20 * MIB]


def pattern(length: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, length, dtype=np.uint8)


def data_pointer(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@pytest.fixture
def big_pool(session):
    """A pool with room for two 20 MiB values and the staging of a third."""
    name = unique_name("large")
    pool = session.create_pool(name, size_bytes=128 * MIB, expected_objects=64)
    yield pool
    pool.close()
    session.delete_pool(name)


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, timeout=120))


@pytest.mark.parametrize("length", LENGTHS, ids=["5MiB", "20MiB"])
def test_large_values_round_trip(session, big_pool, length):
    pool = big_pool
    assert length > session.limits.value_bytes_max
    source = pattern(length, length)
    pool.put("big", source)  # a numpy array, read in place, sent in pieces
    expected = source.tobytes()
    assert pool.get("big") == expected
    attributes = pool.attributes("big")
    assert (attributes.length, attributes.crc32) == (length, zlib.crc32(expected))

    # Into a numpy array of exactly the value's length: the same array, filled in place.
    target = np.zeros(length, dtype=np.uint8)
    before = (id(target), data_pointer(target))
    assert pool.get_into("big", target) == length
    assert (id(target), data_pointer(target)) == before
    assert np.array_equal(target, source)
    # Into a numpy array of another dtype and shape, of the same number of bytes.
    as_words = np.zeros((length // 8 // 4, 4), dtype=np.float64)
    assert pool.get_into("big", as_words) == length
    assert as_words.tobytes() == expected

    # Into a larger bytearray: the prefix is written, the rest left as it was.
    buffer = bytearray(b"\xee") * (length + 100)
    assert pool.get_into("big", buffer) == length
    assert buffer[:length] == expected and buffer[length:] == b"\xee" * 100
    assert pool.get_into("big", memoryview(buffer)[50:]) == length
    assert buffer[50:50 + length] == expected

    # Replaced by another large value, as a whole.
    replacement = pattern(length, length + 1).tobytes()
    pool.put("big", replacement, update_only=True, durability="sync")
    assert pool.get("big") == replacement
    assert pool.get_into("big", target) == length and target.tobytes() == replacement
    with pytest.raises(ferrite.KeyExists):
        pool.put("big", replacement, create_only=True)


def test_buffers_too_small_for_a_large_value(session, big_pool):
    pool = big_pool
    length = 5 * MIB
    pool.put("big", pattern(length, 1))
    # Past the inline limit (a direct read, refused before any piece), within it (an inline
    # get), and empty (the length alone is asked for).
    for size in (length - 1, 3 * MIB, session.limits.value_bytes_max, 1024, 0):
        small = np.full(size, 7, dtype=np.uint8)
        with pytest.raises(ferrite.BufferTooSmall) as raised:
            pool.get_into("big", small)
        assert raised.value.needed == length
        assert str(length) in str(raised.value)
        assert np.all(small == 7), f"nothing was written into the buffer of {size} bytes"
    # A short value in a buffer past the inline limit, and a missing key.
    pool.put("short", b"hello")
    target = bytearray(4 * MIB)
    assert pool.get_into("short", target) == 5 and target[:6] == b"hello\x00"
    with pytest.raises(ferrite.KeyNotFound):
        pool.get_into("absent", target)
    with pytest.raises(ferrite.KeyNotFound):
        pool.get_into("absent", bytearray())
    pool.put("empty", b"")
    assert pool.get_into("empty", bytearray()) == 0


def test_get_offset_reads_slices(big_pool):
    pool = big_pool
    length = 5 * MIB
    source = pattern(length, 2)
    data = source.tobytes()
    pool.put("big", source)

    assert pool.get_offset("big", 0, 100) == data[:100]
    assert pool.get_offset("big", length - 10, 100) == data[-10:], "fewer at the end"
    assert pool.get_offset("big", MIB - 50, 3 * MIB) == data[MIB - 50:4 * MIB - 50], "across pieces"
    assert pool.get_offset("big", length, 100) == b"", "nothing at the very end"
    assert pool.get_offset("big", 7, 0) == b""
    assert pool.get_offset("big", length - 5) == data[-5:], "length=None reads the rest"
    assert pool.get_offset("big", 0) == data

    with pytest.raises(ferrite.InvalidArgument) as raised:
        pool.get_offset("big", length + 1, 1)
    error = raised.value
    assert (error.code, error.number) == ("invalid_argument", ferrite.ErrorCode.invalid_argument)
    assert "past the end" in error.message and str(length) in error.message
    with pytest.raises(ferrite.KeyNotFound):
        pool.get_offset("absent", 0, 1)
    with pytest.raises(OverflowError):
        pool.get_offset("big", -1, 1)

    # An inline value reads the same way.
    pool.put("short", b"hello world")
    assert pool.get_offset("short", 6, 100) == b"world"

    # get_into with an offset: as many bytes as the buffer holds, into its start.
    target = np.zeros(MIB, dtype=np.uint8)
    pointer = data_pointer(target)
    assert pool.get_into("big", target, offset=2 * MIB + 3) == MIB
    assert data_pointer(target) == pointer and target.tobytes() == data[2 * MIB + 3:3 * MIB + 3]
    tail = bytearray(b"\xee") * 100
    assert pool.get_into("big", tail, offset=length - 10) == 10
    assert tail[:10] == data[-10:] and tail[10:] == b"\xee" * 90
    assert pool.get_into("big", tail, offset=length) == 0
    with pytest.raises(ferrite.InvalidArgument, match="past the end"):
        pool.get_into("big", tail, offset=length + 1)


def test_put_offset_writes_inside_a_value(big_pool):
    pool = big_pool
    length = 5 * MIB
    expected = bytearray(pattern(length, 3).tobytes())
    pool.put("big", expected)

    pool.put_offset("big", 2 * MIB - 50, b"x" * 100)
    expected[2 * MIB - 50:2 * MIB + 50] = b"x" * 100
    patch = pattern(3 * MIB, 4)  # several pieces, from a numpy array in place
    pool.put_offset("big", length - 3 * MIB, patch, durability="sync")
    expected[length - 3 * MIB:] = patch.tobytes()
    pool.put_offset("big", 0, "head", durability="async")
    expected[:4] = b"head"
    assert pool.get("big") == expected
    assert pool.attributes("big").length == length, "the value keeps its length"

    pool.put("short", b"hello world")
    pool.put_offset("short", 0, b"HELLO")
    assert pool.get("short") == b"HELLO world"

    with pytest.raises(ferrite.InvalidArgument) as raised:
        pool.put_offset("big", length - 10, bytes(20))
    assert raised.value.code == "invalid_argument"
    with pytest.raises(ferrite.InvalidArgument):
        pool.put_offset("short", 12, b"x")
    with pytest.raises(ferrite.KeyNotFound):
        pool.put_offset("absent", 0, b"x")
    with pytest.raises(ferrite.InvalidArgument):
        pool.put_offset("short", 0, b"x", durability="later")
    assert pool.get("short") == b"HELLO world"
    assert pool.get("big") == expected


@pytest.mark.parametrize("length", LENGTHS, ids=["5MiB", "20MiB"])
def test_async_large_values_and_offsets(server, length):
    async def main():
        async with await ferrite.aio.connect(server.address) as session:
            name = unique_name("aio-large")
            async with await session.create_pool(name, size_bytes=128 * MIB) as pool:
                source = pattern(length, length + 7)
                data = source.tobytes()
                await pool.put("big", source)
                assert await pool.get("big") == data

                target = np.zeros(length, dtype=np.uint8)
                pointer = data_pointer(target)
                assert await pool.get_into("big", target) == length
                assert data_pointer(target) == pointer and np.array_equal(target, source)
                small = np.full(3 * MIB, 7, dtype=np.uint8)
                with pytest.raises(ferrite.BufferTooSmall) as raised:
                    await pool.get_into("big", small)
                assert raised.value.needed == length and np.all(small == 7)

                assert await pool.get_offset("big", length - 10, 100) == data[-10:]
                assert await pool.get_offset("big", MIB - 1, 2 * MIB) == data[MIB - 1:3 * MIB - 1]
                assert await pool.get_offset("big", length) == b""
                window = bytearray(1000)
                assert await pool.get_into("big", window, offset=5) == 1000 and window == data[5:1005]
                with pytest.raises(ferrite.InvalidArgument, match="past the end"):
                    await pool.get_offset("big", length + 1, 1)
                with pytest.raises(ferrite.KeyNotFound):
                    await pool.get_offset("absent", 0, 1)

                await pool.put_offset("big", MIB - 2, b"abcd", durability="sync")
                assert await pool.get_offset("big", MIB - 2, 4) == b"abcd"
                with pytest.raises(ferrite.InvalidArgument):
                    await pool.put_offset("big", length - 1, b"ab")
                with pytest.raises(ferrite.KeyNotFound):
                    await pool.put_offset("absent", 0, b"x")
                expected = bytearray(data)
                expected[MIB - 2:MIB + 2] = b"abcd"
                assert await pool.get("big") == expected
                # Many in flight at once on the one connection.
                values = await asyncio.gather(*(pool.get_offset("big", i * MIB, 10) for i in range(length // MIB)))
                assert values == [bytes(expected[i * MIB:i * MIB + 10]) for i in range(length // MIB)]
            await session.delete_pool(name)

    run(main())


@pytest.fixture
def small_direct_limit_server(tmp_path):
    """A one-shard server that takes direct values up to 8 MiB."""
    config = tmp_path / "ferrite.toml"
    config.write_text(f"[limits]\ndirect_value_bytes_max = {8 * MIB}\n")
    server = Server(shards=1, extra_args=("--config", str(config)))
    yield server
    server.stop()


def test_values_past_the_direct_limit_raise_value_too_large(small_direct_limit_server):
    with ferrite.connect(small_direct_limit_server.address) as session:
        with session.create_pool("direct-limit", size_bytes=64 * MIB) as pool:
            pool.put("largest", bytes(8 * MIB))
            assert pool.attributes("largest").length == 8 * MIB
            with pytest.raises(ferrite.ValueTooLarge) as raised:
                pool.put("too-large", bytes(8 * MIB + 1))
            error = raised.value
            assert (error.code, error.number) == ("value_too_large", ferrite.ErrorCode.value_too_large)
            assert "direct_value_bytes_max" in error.message and str(8 * MIB + 1) in error.message
            with pytest.raises(ferrite.KeyNotFound):
                pool.get("too-large")
        session.delete_pool("direct-limit")

    async def main():
        async with await ferrite.aio.connect(small_direct_limit_server.address) as session:
            async with await session.create_pool("direct-limit-aio", size_bytes=64 * MIB) as pool:
                with pytest.raises(ferrite.ValueTooLarge):
                    await pool.put("too-large", np.zeros(8 * MIB + 1, dtype=np.uint8))
            await session.delete_pool("direct-limit-aio")

    run(main())
