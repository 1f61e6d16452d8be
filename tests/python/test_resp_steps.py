"""Many-key RESP commands (MSET, MGET, DEL, EXISTS) run in bounded steps, the shard serving other
clients between two (docs/resp.md, "Many-key commands"): their answers are those of one command,
and another client is served while a huge one is under way.
"""

import threading

import pytest
import redis


def test_many_key_commands_answer_as_one_command(r):
    keys = [f"k{i:06d}" for i in range(5_000)]
    assert r.mset({key: f"v{key}" for key in keys}) is True
    absent = [f"absent{i}" for i in range(1_500)]
    values = r.mget(keys + absent + keys[:3])
    assert values == [f"v{key}".encode() for key in keys] + [None] * len(absent) + [b"vk000000", b"vk000001", b"vk000002"]
    assert r.exists(*keys, *absent, keys[0]) == len(keys) + 1
    assert r.delete(*keys[:3000], *absent) == 3000
    assert r.exists(*keys) == 2000
    assert r.dbsize() == 2000
    assert r.get("k004999") == b"vk004999"


def test_a_huge_mset_lets_other_clients_in_between_its_steps(server):
    host, port = server.resp[0]
    writer = redis.Redis(host=host, port=port, protocol=2, socket_timeout=120)
    reader = server.client(2)
    pairs = {f"big{i:07d}": "x" for i in range(60_000)}
    first, last = "big0000000", "big0059999"
    done = threading.Event()

    def write():
        writer.mset(pairs)
        done.set()

    thread = threading.Thread(target=write)
    thread.start()
    try:
        # Between two steps of the MSET, its first pairs are stored and its last are not yet: a
        # reader sees that only if it is served while the MSET runs.
        seen_partial = False
        while not done.is_set():
            if reader.get(first) is not None and reader.get(last) is None:
                seen_partial = True
                break
        assert seen_partial, "the reader was never served while the MSET ran"
    finally:
        thread.join(timeout=120)
    assert reader.get(last) == b"x"
    assert reader.exists(first, last) == 2


@pytest.mark.parametrize("keys, value_bytes", [(20, 2 << 20), (1_100, 32 << 10)], ids=["one-step", "many-steps"])
def test_an_mget_past_the_reply_limit_is_refused_and_the_connection_goes_on(server, keys, value_bytes):
    """Over 32 MiB of reply, whether found in one step or in several, MGET answers one error and
    nothing of the partial reply; the next command is answered normally."""
    client = server.client(2)
    names = [f"large{i:05d}" for i in range(keys)]
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.set(name, b"v" * value_bytes)
    pipe.execute()
    with pytest.raises(redis.ResponseError, match="MGET reply would exceed"):
        client.mget(names)
    assert client.get(names[-1]) == b"v" * value_bytes
    assert client.mget(names[:2]) == [b"v" * value_bytes] * 2
    client.close()
