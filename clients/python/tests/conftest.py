"""Fixtures of the Python client's tests (the helpers are in ferrite_servers.py).

Most tests share one two-shard server (`server`) and make their own pools, named uniquely, so
they neither see each other's keys nor depend on their order.
"""

import pytest

import ferrite
from ferrite_servers import Server, unique_name


@pytest.fixture(scope="session")
def server():
    """One two-shard server for the whole run."""
    server = Server()
    yield server
    status = server.process.poll()
    server.stop()
    assert status is None, "the server died during the tests"


@pytest.fixture
def session(server):
    with ferrite.connect(server.address, client_name="pytest") as session:
        yield session


@pytest.fixture
def pool_name():
    return unique_name()


@pytest.fixture
def pool(session, pool_name):
    """A fresh pool, deleted after the test."""
    pool = session.create_pool(pool_name, size_bytes=32 << 20, expected_objects=4096)
    yield pool
    pool.close()
    session.delete_pool(pool_name)
