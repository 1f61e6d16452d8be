"""An Active Data Object from Python: the shipped `counter` plugin.

A pool created with `plugins=["counter"]` runs the counter next to the data: `invoke` sends a
payload ("add 5", "get", "cas OLD NEW") and gets the plugin's answer back, so a counter is
incremented in one round trip without a read-modify-write race. The server finds its shipped
plugins beside its binary (`cargo build --workspace` or `make build` builds them).

    python examples/python/plugin.py     # FERRITE_ADDR=host:port, default 127.0.0.1:11911
"""

import os
import threading

import ferrite

ADDRESS = os.environ.get("FERRITE_ADDR", "127.0.0.1:11911")


def main():
    with ferrite.connect(ADDRESS, client_name="examples/plugin.py") as session:
        with session.create_pool("example-counters", plugins=["counter"]) as pool:
            # create_size=8: an absent key starts as an 8-byte zero, the counter's 0.
            print("add 5 ->", pool.invoke("hits", "add 5", create_size=8))  # [(0, b'5')]

            # Many threads adding at once: each add runs on the server under the key's lock.
            def add_many():
                for _ in range(100):
                    pool.invoke("hits", "add 1", create_size=8)

            threads = [threading.Thread(target=add_many) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            [(layer, value)] = pool.invoke("hits", "get", read_only=True)
            print(f"after 4 x 100 concurrent adds: {int(value)} (layer {layer})")

            print("cas 405 0 ->", pool.invoke("hits", "cas 405 0"))
            print("cas 1 2   ->", pool.invoke("hits", "cas 1 2"))  # answers mismatch and the value

            try:
                pool.invoke("hits", "multiply 3")
            except ferrite.AdoFailed as error:
                print(f"a bad payload fails the call and changes nothing: {error.message}")
            print("the counter's value, as stored:", int.from_bytes(pool.get("hits"), "little", signed=True))
        session.delete_pool("example-counters")


if __name__ == "__main__":
    main()
