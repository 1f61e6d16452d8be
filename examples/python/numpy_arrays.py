"""Storing numpy arrays in Ferrite and loading them back without copies.

`put` reads any buffer-protocol object in place (here a memoryview of the array: no bytes object
is made), and `get_into` writes the value straight into an existing array, which is how a
preallocated buffer is refilled again and again without allocating. Arrays past the inline limit
(2 MiB) travel as direct transfers by themselves, piece by piece from and into the arrays, and
`get_into(..., offset=)` / `put_offset` read and write rows of a stored array in place.

    python examples/python/numpy_arrays.py     # FERRITE_ADDR=host:port, default 127.0.0.1:11911
"""

import os

import numpy as np

import ferrite

ADDRESS = os.environ.get("FERRITE_ADDR", "127.0.0.1:11911")


def main():
    with ferrite.connect(ADDRESS, client_name="examples/numpy_arrays.py") as session:
        limit = session.limits.value_bytes_max
        with session.create_pool("example-numpy", size_bytes=64 << 20) as pool:
            weights = np.random.default_rng(7).standard_normal((256, 512), dtype=np.float32)
            assert weights.nbytes <= limit, "this one travels inline"
            pool.put("weights", memoryview(weights))
            print(f"stored a {weights.shape} {weights.dtype} array ({weights.nbytes} bytes)")

            loaded = np.empty_like(weights)
            pointer = loaded.__array_interface__["data"][0]
            written = pool.get_into("weights", loaded)
            assert loaded.__array_interface__["data"][0] == pointer, "filled in place"
            assert np.array_equal(loaded, weights)
            print(f"loaded {written} bytes into the existing array: equal = {np.array_equal(loaded, weights)}")

            # One buffer reused for many values of the same shape.
            batch = np.empty(1024, dtype=np.int64)
            for step in range(3):
                pool.put(f"batch-{step}", np.arange(step, step + 1024, dtype=np.int64))
            for step in range(3):
                pool.get_into(f"batch-{step}", batch)
                print(f"batch-{step}: first {batch[0]}, last {batch[-1]}")

            # A buffer too small says how much it needs.
            try:
                pool.get_into("weights", np.empty(16, dtype=np.float32))
            except ferrite.BufferTooSmall as error:
                print(f"too small: needed {error.needed} bytes")

            # An array past the inline limit travels as a direct transfer, in pieces read from
            # and written into the arrays themselves.
            large = np.random.default_rng(8).standard_normal((2048, 1024), dtype=np.float32)
            assert large.nbytes > limit
            pool.put("large", large)
            loaded = np.empty_like(large)
            assert pool.get_into("large", loaded) == large.nbytes and np.array_equal(loaded, large)
            print(f"a {large.nbytes >> 20} MiB array went and came back direct: equal = {np.array_equal(loaded, large)}")

            # Rows of the stored array, read and written in place on the server.
            row_bytes = large.shape[1] * large.itemsize
            row = np.empty(large.shape[1], dtype=np.float32)
            pool.get_into("large", row, offset=1000 * row_bytes)
            assert np.array_equal(row, large[1000])
            pool.put_offset("large", 1000 * row_bytes, np.zeros(large.shape[1], dtype=np.float32))
            pool.get_into("large", row, offset=1000 * row_bytes)
            print(f"row 1000 read alone, then zeroed in place: sum = {row.sum()}")
        session.delete_pool("example-numpy")


if __name__ == "__main__":
    main()
