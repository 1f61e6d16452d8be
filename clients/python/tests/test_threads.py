"""Threads sharing one session, and the GIL released during network waits.

Proves that eight threads putting through one session and one pool (200 puts each) all succeed
and every pair is visible afterwards, that threads reading and writing at once through one
session see consistent values, and that a call waiting on the network lets other Python threads
run: a connect to a peer that accepts but never answers blocks its thread for the whole timeout
while the main thread keeps counting.
"""

import socket
import threading
import time

import pytest

import ferrite

THREADS = 8
PUTS_PER_THREAD = 200


def test_eight_threads_share_one_session_and_pool(session, pool):
    errors = []
    barrier = threading.Barrier(THREADS)

    def writer(thread: int):
        try:
            barrier.wait()
            for i in range(PUTS_PER_THREAD):
                pool.put(f"t{thread}-{i}", f"value {thread} {i}")
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert pool.count() == THREADS * PUTS_PER_THREAD
    for t in range(THREADS):
        for i in range(0, PUTS_PER_THREAD, 17):
            assert pool.get(f"t{t}-{i}") == f"value {t} {i}".encode()
    assert len(pool.find("t3-")) == PUTS_PER_THREAD


def test_threads_reading_and_writing_at_once(session, pool):
    for i in range(100):
        pool.put(f"k{i}", i.to_bytes(8, "little"))
    errors = []

    def reader():
        try:
            for _ in range(3):
                for i in range(100):
                    assert int.from_bytes(pool.get(f"k{i}"), "little") == i
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    def writer():
        try:
            other = session.open_pool(pool.name)
            for i in range(300):
                other.put(f"w{i}", b"w")
            other.close()
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=reader) for _ in range(4)] + [threading.Thread(target=writer) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert pool.count() == 100 + 300


def test_a_network_wait_releases_the_gil():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = "{}:{}".format(*listener.getsockname())
        outcome = {}

        def connect():
            started = time.monotonic()
            try:
                ferrite.connect(address, connect_timeout=1.0)
            except ferrite.FerriteError as error:
                outcome["error"] = error
            outcome["seconds"] = time.monotonic() - started

        thread = threading.Thread(target=connect)
        thread.start()
        spins = 0
        while thread.is_alive():
            spins += 1  # pure Python: runs only while the other thread does not hold the GIL
        thread.join()
    assert isinstance(outcome.get("error"), ferrite.ConnectionFailed)
    assert "handshake" in str(outcome["error"])
    assert outcome["seconds"] >= 0.9
    assert spins > 10_000, f"the main thread ran only {spins} loop turns during a one-second wait"


@pytest.mark.parametrize("threads", [2, 16])
def test_many_threads_one_key(pool, threads):
    """Concurrent puts to one key leave exactly one of the values, intact."""
    values = [bytes([t]) * 1000 for t in range(threads)]
    workers = [threading.Thread(target=lambda v=v: [pool.put("same", v) for _ in range(50)]) for v in values]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert pool.get("same") in values
