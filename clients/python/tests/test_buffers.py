"""Values from and into buffer-protocol objects, numpy arrays above all, without copies.

Proves that `put` takes a numpy array (or a memoryview of one, of any dtype and shape) as its
bytes, that `get_into` writes a value into the very array it is given (same object, same data
pointer, new contents) and returns the value's length, that it writes only a prefix of a larger
buffer, and that a buffer that is too small, read-only or not contiguous is refused with a clear
error before anything is written.
"""

import array

import numpy as np
import pytest

import ferrite


def data_pointer(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_numpy_array_round_trip_in_place(pool):
    source = np.arange(4096, dtype=np.float64) * 1.5
    pool.put("array", memoryview(source))
    assert pool.get("array") == source.tobytes()

    target = np.zeros_like(source)
    before = (id(target), data_pointer(target))
    written = pool.get_into("array", target)
    assert written == source.nbytes
    assert (id(target), data_pointer(target)) == before, "the same array, written in place"
    assert np.array_equal(target, source)
    assert not np.shares_memory(target, source)


def test_put_takes_arrays_of_any_dtype_and_shape_directly(pool):
    matrix = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    pool.put(b"matrix", matrix)
    out = np.empty((3, 4, 5), dtype=np.int32)
    assert pool.get_into(b"matrix", out) == matrix.nbytes
    assert np.array_equal(out, matrix)
    as_bytes = np.empty(matrix.nbytes, dtype=np.uint8)
    pool.get_into(b"matrix", as_bytes)
    assert as_bytes.tobytes() == matrix.tobytes(), "get_into fills any dtype with the raw bytes"


def test_get_into_writes_a_prefix_of_a_larger_buffer(pool):
    pool.put("short", b"abc")
    buffer = bytearray(b"0123456789")
    assert pool.get_into("short", buffer) == 3
    assert buffer == bytearray(b"abc3456789"), "bytes past the value are left as they were"
    view = memoryview(buffer)[5:]
    assert pool.get_into("short", view) == 3
    assert buffer == bytearray(b"abc34abc89")
    numbers = array.array("B", bytes(4))
    assert pool.get_into("short", numbers) == 3
    assert numbers.tobytes() == b"abc\x00"


def test_buffer_too_small_says_the_length_needed(pool):
    pool.put("big", bytes(100))
    small = np.full(10, 7, dtype=np.uint8)
    with pytest.raises(ferrite.BufferTooSmall) as raised:
        pool.get_into("big", small)
    error = raised.value
    assert isinstance(error, ferrite.InvalidArgument) and isinstance(error, ValueError)
    assert error.needed == 100
    assert "100 bytes" in str(error) and "10" in str(error)
    assert np.all(small == 7), "nothing was written"


def test_unusable_buffers_are_refused_before_the_request(pool):
    pool.put("k", b"value")
    with pytest.raises(ferrite.InvalidArgument, match="read-only"):
        pool.get_into("k", b"immutable bytes")
    frozen = np.zeros(16, dtype=np.uint8)
    frozen.flags.writeable = False
    with pytest.raises(ferrite.InvalidArgument, match="read-only"):
        pool.get_into("k", frozen)
    strided = np.zeros(32, dtype=np.uint8)[::2]
    with pytest.raises(ferrite.InvalidArgument, match="C-contiguous"):
        pool.get_into("k", strided)
    with pytest.raises(ferrite.InvalidArgument, match="C-contiguous"):
        pool.put("k2", np.arange(16, dtype=np.uint8)[::2])
    with pytest.raises(TypeError, match="buffer protocol"):
        pool.get_into("k", [0] * 16)
    with pytest.raises(ferrite.KeyNotFound):
        pool.get_into("absent", bytearray(16))


def test_a_bytearray_is_held_while_the_put_reads_it(pool):
    # The export pins the bytearray for the call; once the call returns it may be resized again.
    value = bytearray(b"x" * 1000)
    pool.put("held", value)
    value.extend(b"more")
    assert pool.get("held") == b"x" * 1000
