"""Helpers of the Python client's tests: real `ferrite-server` child processes on free ports,
unique pool names, and the `ferrite user` CLI, shared with the repository's other Python suite
(`tests/python/ferrite_process.py`).

(A module with a name of its own, rather than `conftest`, so the tests import it unambiguously
even when pytest collects another suite's conftest.py in the same run.)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests" / "python"))

from ferrite_process import FerriteServer, ferrite_user, unique_name  # noqa: E402

__all__ = ["Server", "ferrite_user", "unique_name"]


class Server(FerriteServer):
    """A ferrite-server speaking the native protocol only, with two shards unless told otherwise."""

    def __init__(self, shards: int = 2, extra_args: tuple = ()):
        super().__init__(shards=shards, extra_args=extra_args)
