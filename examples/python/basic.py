"""Basic use of the Ferrite Python client: a pool, puts and gets, attributes, find, errors.

    pip install ./clients/python
    ferrite-server &                      # or: make run
    python examples/python/basic.py       # FERRITE_ADDR=host:port to reach another server
"""

import os

import ferrite

ADDRESS = os.environ.get("FERRITE_ADDR", "127.0.0.1:11911")


def main():
    with ferrite.connect(ADDRESS, client_name="examples/basic.py") as session:
        print(f"connected to {session.shard_count} shard(s): {session.shard_addresses}")
        limits = session.limits
        print(f"limits: keys up to {limits.key_bytes_max} bytes, values inline up to {limits.value_bytes_max} (longer ones travel direct)")

        with session.create_pool("example-basic", size_bytes=16 << 20, expected_objects=1000) as pool:
            print(f"pool {pool.name!r} on shard {pool.shard} ({'created' if pool.created else 'opened'})")

            # Keys and values are bytes, or str (stored as UTF-8).
            pool.put("greeting", "hello, world")
            pool.put(b"user:1", b'{"name": "Ada"}')
            pool.put(b"user:2", b'{"name": "Grace"}')
            print("greeting =", pool.get("greeting"))

            # Conditional puts and per-write durability.
            try:
                pool.put("greeting", "hi", create_only=True)
            except ferrite.KeyExists:
                print("greeting exists already; create_only refused to replace it")
            pool.put("scratch", b"not worth an fsync", durability="async")

            attributes = pool.attributes("greeting")
            print(f"greeting: {attributes.length} bytes, crc32 {attributes.crc32:#010x}")
            print("keys starting with user: ->", pool.find("user:"))
            print("pool:", pool.attributes())

            # Every wire error code has its exception class.
            try:
                pool.get("missing")
            except ferrite.KeyNotFound as error:
                print(f"get('missing') raised {type(error).__name__}: code={error.code} number={error.number}")

            pool.erase("scratch")
            print("pairs in the pool:", pool.count())

        for info in session.pools():
            print(f"  {info.name}: {info.objects} pairs, {info.used_bytes}/{info.size_bytes} bytes used, shard {info.shard}")
        session.delete_pool("example-basic")


if __name__ == "__main__":
    main()
