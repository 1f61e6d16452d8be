"""The Python code of clients/python/README.md runs as it is written, against a real server.

Every ```python block of the README is run, in the README's order, with the address it connects
to ("127.0.0.1:11911") read as the test server's. A block that continues an earlier one (it uses
`session` or `pool` without making them) gets them made here: an open session, and an open pool
holding a value "big" of 8 KiB with `out`, a buffer to read it into. So a renamed keyword, method
or class in the README fails here, as the examples in examples/python fail in test_examples.py.
(`pip install ./clients/python`, the README's install step, is how `make test-python` installs the
package these tests import.)
"""

import re
from pathlib import Path

import numpy as np

import ferrite
from ferrite_servers import unique_name

README = Path(__file__).resolve().parents[1] / "README.md"
README_ADDRESS = "127.0.0.1:11911"
# The pools the README's blocks create, deleted afterwards.
README_POOLS = ("demo", "counters")


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", README.read_text(), flags=re.DOTALL | re.MULTILINE)


def test_the_readme_has_its_examples():
    blocks = python_blocks()
    assert len(blocks) >= 5, blocks
    assert all(README_ADDRESS in block for block in blocks if "connect(" in block)


def test_every_python_block_of_the_readme_runs(server):
    with ferrite.connect(server.address, client_name="readme") as session:
        name = unique_name()
        with session.create_pool(name) as pool:
            pool.put("big", bytes(range(256)) * 32)
            made_here = {"session": session, "pool": pool, "out": np.zeros(64, dtype=np.uint8)}
            try:
                for block in python_blocks():
                    code = compile(block.replace(README_ADDRESS, server.address), str(README), "exec")
                    # Each block in a scope of its own: the first closes the session it binds.
                    exec(code, dict(made_here))  # noqa: S102 -- the README's own code is what is tested
            finally:
                for created in README_POOLS:
                    try:
                        session.delete_pool(created)
                    except ferrite.PoolNotFound:
                        pass
        session.delete_pool(name)
