"""Checks on the committed protocol test vectors.

Proves that vectors.json and routing.json are exactly what generate.py produces (so nobody edits
them by hand), that every frame's header announces the body length it actually carries, and that
the generator's FNV-1a 64 matches the published reference values.
"""

import importlib.util
import struct
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _load_generator():
    spec = importlib.util.spec_from_file_location("ferrite_protocol_generate", HERE / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _load_generator()


def test_vectors_json_is_generated():
    committed = (HERE / "vectors.json").read_text(encoding="utf-8")
    assert committed == generate.render(generate.vectors()), "vectors.json is stale: run generate.py"


def test_routing_json_is_generated():
    committed = (HERE / "routing.json").read_text(encoding="utf-8")
    assert committed == generate.render(generate.routing()), "routing.json is stale: run generate.py"


@pytest.mark.parametrize("vector", generate.vectors(), ids=lambda v: v["name"])
def test_header_body_len_matches_frame(vector):
    frame = bytes.fromhex(vector["frame"])
    assert len(frame) >= generate.HEADER_LEN
    (body_len,) = struct.unpack_from("<I", frame, 0)
    assert body_len == len(frame) - generate.HEADER_LEN


@pytest.mark.parametrize("vector", generate.vectors(), ids=lambda v: v["name"])
def test_header_request_id_matches_vector(vector):
    frame = bytes.fromhex(vector["frame"])
    (request_id,) = struct.unpack_from("<Q", frame, 8)
    assert request_id == vector["request_id"]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0xCBF29CE484222325),
        (b"a", 0xAF63DC4C8601EC8C),
        (b"foobar", 0x85944171F73967E8),
    ],
)
def test_fnv1a64_reference_values(data, expected):
    assert generate.fnv1a64(data) == expected
