"""The protocol test vectors, checked through this package's extension.

`testdata/protocol/vectors.json` is the language-neutral definition of the wire format. The
extension's `_encode_message` and `_decode_frame` are `ferrite_proto`'s encoder and decoder, the
ones the client sends and reads with, so checking every vector here means a change to the wire
format fails the Python client's tests at the same moment as the Rust client's. Proves, for every
vector: encoding its message gives exactly its frame, decoding its frame gives back exactly its
message, and every error vector fails to decode with the `FerriteError` subclass of its named
code; and that routing agrees with every case of `routing.json`.
"""

import json
from pathlib import Path

import pytest

import ferrite
from ferrite import _ferrite

PROTOCOL_DIR = Path(__file__).resolve().parents[3] / "testdata" / "protocol"
VECTORS = json.loads((PROTOCOL_DIR / "vectors.json").read_text(encoding="utf-8"))
ROUTING = json.loads((PROTOCOL_DIR / "routing.json").read_text(encoding="utf-8"))
VALID = [v for v in VECTORS if "error" not in v]
INVALID = [v for v in VECTORS if "error" in v]


def test_the_vectors_cover_both_directions_and_errors():
    assert {v["direction"] for v in VALID} == {"request", "response"}
    assert len(VALID) > 50 and len(INVALID) > 20


@pytest.mark.parametrize("vector", VALID, ids=lambda v: v["name"])
def test_encode_gives_the_frame(vector):
    frame = _ferrite._encode_message(vector["direction"], json.dumps(vector["message"]), vector["request_id"])
    assert frame.hex() == vector["frame"]


@pytest.mark.parametrize("vector", VALID, ids=lambda v: v["name"])
def test_decode_gives_the_message(vector):
    decoded = json.loads(_ferrite._decode_frame(vector["direction"], bytes.fromhex(vector["frame"])))
    assert decoded == vector["message"]


@pytest.mark.parametrize("vector", INVALID, ids=lambda v: v["name"])
def test_bad_frames_fail_with_their_code(vector):
    with pytest.raises(ferrite.FerriteError) as raised:
        _ferrite._decode_frame(vector["direction"], bytes.fromhex(vector["frame"]))
    assert raised.value.code == vector["error"]
    assert type(raised.value) is ferrite.error_class(vector["error"])


@pytest.mark.parametrize("case", ROUTING, ids=lambda c: f"{c['pool']}/{c['shard_count']}")
def test_routing(case):
    assert _ferrite._shard_for_pool(case["pool"], case["shard_count"]) == case["shard"]


def test_the_helpers_refuse_what_is_not_a_vector():
    with pytest.raises(ValueError, match="unknown request type"):
        _ferrite._encode_message("request", '{"type": "teleport"}', 1)
    with pytest.raises(ValueError, match="direction"):
        _ferrite._encode_message("sideways", '{"type": "get"}', 1)
    with pytest.raises(ferrite.MalformedFrame):
        _ferrite._decode_frame("request", b"\x00" * 3)
    with pytest.raises(ValueError):
        _ferrite._shard_for_pool("p", 0)
