"""The examples in examples/python run to completion against a real server.

Each is run as its users would run it, `python examples/python/NAME.py` with FERRITE_ADDR set,
and must exit 0; so an API change that breaks an example fails here.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[3] / "examples" / "python").glob("*.py"))


def test_the_examples_are_there():
    assert {path.name for path in EXAMPLES} >= {"basic.py", "numpy_arrays.py", "plugin.py"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_example_runs(server, example):
    result = subprocess.run([sys.executable, str(example)], env={**os.environ, "FERRITE_ADDR": server.address},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip()
