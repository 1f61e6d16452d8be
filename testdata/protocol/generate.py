#!/usr/bin/env python3
"""Generate the Ferrite protocol test vectors from docs/protocol.md.

This encoder is written from the specification alone, independently of the Rust
implementation in crates/ferrite-proto, so that the two check each other. It uses the Python
standard library only.

Running it rewrites, next to this file:

- vectors.json: one object per case, as described in the "Test vectors" section of
  docs/protocol.md (valid requests and responses with their frames, and error vectors: frames
  that must fail to decode with a named error code);
- routing.json: pool names with the shard that owns them for several shard counts.

The output is deterministic. Never edit the JSON files by hand: change this script and rerun
it; test_vectors.py fails if the files and the script disagree.
"""

import binascii
import json
import re
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
VECTORS_PATH = HERE / "vectors.json"
ROUTING_PATH = HERE / "routing.json"

HEADER_LEN = 16
MAGIC = b"FRRT"
PROTOCOL_VERSION = 1
RESPONSE_BIT = 0x8000
ERROR_OPCODE = 0xFFFF
NOT_LEADER_OPCODE = 0xFFFE

KEY_BYTES_MAX = 65_536
VALUE_INLINE_BYTES_MAX = 2_097_152
CLUSTER_NODES_MAX = 64
CLUSTER_GROUPS_MAX = 256
NODE_ADDRESS_BYTES_MAX = 259

U64_MAX = 2**64 - 1

REQUEST_OPCODES = {
    "hello": 0x0001,
    "create_pool": 0x0010,
    "open_pool": 0x0011,
    "close_pool": 0x0012,
    "delete_pool": 0x0013,
    "configure_pool": 0x0015,
    "list_pools": 0x0014,
    "put": 0x0020,
    "get": 0x0021,
    "erase": 0x0022,
    "count": 0x0023,
    "get_attribute": 0x0024,
    "find": 0x0025,
    "put_direct": 0x0026,
    "direct_write": 0x0027,
    "get_direct": 0x0028,
    "direct_read": 0x0029,
    "end_transfer": 0x002A,
    "put_offset": 0x002B,
    "get_statistics": 0x0030,
    "invoke_ado": 0x0040,
    "invoke_put_ado": 0x0041,
    "backup": 0x0050,
    "node_info": 0x0060,
    "cluster_map": 0x0061,
    "cluster_init": 0x0062,
    "cluster_add_node": 0x0063,
    "cluster_remove_node": 0x0064,
    "cluster_transfer_leader": 0x0065,
    "cluster_status": 0x0066,
}

# Successful response name -> the request it answers.
RESPONSE_TO_REQUEST = {
    "hello": "hello",
    "pool_created": "create_pool",
    "pool_opened": "open_pool",
    "pool_closed": "close_pool",
    "pool_deleted": "delete_pool",
    "pool_configured": "configure_pool",
    "pools": "list_pools",
    "stored": "put",
    "value": "get",
    "erased": "erase",
    "count": "count",
    "attribute": "get_attribute",
    "found": "find",
    "statistics": "get_statistics",
    "backed_up": "backup",
    "written": "direct_write",
    "transfer_ended": "end_transfer",
    "node_info": "node_info",
    "cluster_map": "cluster_map",
    "cluster_initialized": "cluster_init",
    "node_added": "cluster_add_node",
    "node_removed": "cluster_remove_node",
    "leader_transferred": "cluster_transfer_leader",
    "cluster_status": "cluster_status",
    # "invoked" answers both invocations and "transfer_opened" both put_direct and get_direct; their
    # vectors name which one in "answers".
}

# Responses that also answer a second request: a vector naming that request in "answers" gets its
# opcode; without "answers" the response answers the request RESPONSE_TO_REQUEST names.
ALSO_ANSWERS = {"value": ("direct_read",), "stored": ("put_offset",)}

# Both invocations share one flag table; which flags each accepts is the decoder's to check.
INVOKE_FLAGS = {
    "create_on_demand": 0x0001,
    "read_only": 0x0002,
    "no_overwrite": 0x0004,
    "zero_new_value": 0x0008,
    "detached": 0x0010,
    "fire_and_forget": 0x0020,
}

# put_direct and put_offset carry a put's flags; put_offset accepts only sync or async, which is
# the decoder's to check.
PUT_FLAGS = {"create_only": 0x0001, "update_only": 0x0002, "sync": 0x0004, "async": 0x0008}

# Flag bits per request; a request absent here defines no flags.
REQUEST_FLAGS = {
    "create_pool": {"create_only": 0x0001, "indexed": 0x0002, "async": 0x0004, "plugins": 0x0008},
    "put": PUT_FLAGS,
    "put_direct": PUT_FLAGS,
    "put_offset": PUT_FLAGS,
    # No flag (an empty list) commits a direct put or releases a direct read.
    "end_transfer": {"abort": 0x0001},
    "invoke_ado": INVOKE_FLAGS,
    "invoke_put_ado": INVOKE_FLAGS,
    # Exactly one setting.
    "configure_pool": {"add_index": 0x0001, "remove_index": 0x0002},
    # Entries end with the pool's settings; the body may name one pool.
    "list_pools": {"describe": 0x0001},
}

# Flag bits per response; a response absent here defines no flags.
RESPONSE_FLAGS = {"pools": {"describe": 0x0001}}

# The bits of a described `pools` entry's `settings` (u16).
POOL_SETTINGS = {"indexed": 0x0001, "async": 0x0002}

FIND_KINDS = {"exact": 1, "prefix": 2, "regex": 3, "glob": 4, "next": 5}

# The memory figures of a `pools` entry, in wire order after `open_count`, each a u64.
POOL_MEMORY_FIELDS = ("table_buckets", "table_bytes", "slab_bytes", "large_bytes", "other_bytes", "index_bytes")

ATTRIBUTES = {
    "value_length": 1,
    "object_count": 2,
    "crc32": 3,
    "write_time": 4,
    "pool_size": 5,
    "pool_used": 6,
}

# A replica's role in its group, as `cluster_status` reports it (u8).
RAFT_ROLES = {"follower": 0, "candidate": 1, "leader": 2, "learner": 3, "uninitialized": 4}

ERROR_CODES = {
    "malformed_frame": 1,
    "unknown_opcode": 2,
    "frame_too_large": 3,
    "key_too_large": 4,
    "value_too_large": 5,
    "handshake_required": 6,
    "unsupported_version": 7,
    "pool_not_found": 8,
    "pool_exists": 9,
    "pool_in_use": 10,
    "pool_not_open": 11,
    "too_many_pools": 12,
    "key_not_found": 13,
    "key_exists": 14,
    "pool_full": 15,
    "too_many_connections": 16,
    "wrong_shard": 17,
    "invalid_argument": 18,
    "internal": 19,
    "shutting_down": 20,
    "no_space": 21,
    "storage_failed": 22,
    "ado_failed": 23,
    "ado_timeout": 24,
    "authentication_failed": 25,
    "permission_denied": 26,
    "quota_exceeded": 27,
    "not_leader": 28,
}


def credentials(user, password):
    """The `auth` bytes of a hello with a user name and password (method 1)."""
    return (u8(1) + str16(user) + bytes16(password)).hex()


# --- routing -------------------------------------------------------------------------------


def fnv1a64(data):
    """64-bit FNV-1a of `data` (bytes)."""
    h = 0xCBF29CE484222325
    for byte in data:
        h ^= byte
        h = (h * 0x100000001B3) % 2**64
    return h


PINNED = re.compile(r"@([0-9]{1,5})/")


def shard_for_pool(pool, shard_count):
    """Index of the shard that owns the pool named `pool` (str): the N of a pinned name `@N/...`
    (1 to 5 ASCII digits), otherwise FNV-1a 64 of its UTF-8 bytes; either modulo the shard count."""
    pinned = PINNED.match(pool)
    position = int(pinned.group(1)) if pinned else fnv1a64(pool.encode("utf-8"))
    return position % shard_count


# --- field encoders ------------------------------------------------------------------------


def u8(n):
    return struct.pack("<B", n)


def u16(n):
    return struct.pack("<H", n)


def u32(n):
    return struct.pack("<I", n)


def u64(n):
    return struct.pack("<Q", n)


def bytes16(data):
    return u16(len(data)) + data


def str16(text):
    return bytes16(text.encode("utf-8"))


def unhex(text):
    return binascii.unhexlify(text)


def frame(opcode, flags, request_id, body):
    """A whole frame: 16-byte header, then `body`."""
    return u32(len(body)) + u16(opcode) + u16(flags) + u64(request_id) + body


def optional_key(hex_or_none):
    """`has` (u8) then, if present, a u32-length-prefixed key: find's `after` and `next`."""
    if hex_or_none is None:
        return u8(0)
    key = unhex(hex_or_none)
    return u8(1) + u32(len(key)) + key


def cluster_node(node):
    """A node as node_info, cluster_init and cluster_add_node carry it: id, peer, native, resp."""
    return u64(node["node_id"]) + str16(node["peer"]) + str16(node["native"]) + str16(node["resp"])


def map_entry(node):
    """A node as a cluster_map entry carries it: id, native, resp, peer."""
    return u64(node["node_id"]) + str16(node["native"]) + str16(node["resp"]) + str16(node["peer"])


def node_ids(ids):
    """A u16 count, then each node id as a u64."""
    return u16(len(ids)) + b"".join(u64(node_id) for node_id in ids)


def flag_bits(request_type, names, table=REQUEST_FLAGS):
    defined = table.get(request_type, {})
    bits = 0
    for name in names:
        bits |= defined[name]
    return bits


# --- message encoders ----------------------------------------------------------------------


def request_body(msg):
    """The body of request `msg` (a vectors.json message object)."""
    kind = msg["type"]
    if kind == "hello":
        return MAGIC + u16(msg["version"]) + str16(msg["client_name"]) + bytes16(unhex(msg["auth"]))
    if kind == "create_pool":
        chain = str16(msg["plugins"]) if msg["plugins"] else b""
        return str16(msg["name"]) + u64(msg["size_bytes"]) + u64(msg["expected_objects"]) + chain
    if kind in ("open_pool", "delete_pool", "configure_pool"):
        return str16(msg["name"])
    if kind == "backup":
        return str16(msg["dir"])
    if kind in ("close_pool", "count"):
        return u64(msg["pool"])
    if kind == "list_pools":
        if "describe" not in msg["flags"]:
            return b""
        return str16(msg["name"]) if msg["name"] is not None else b""
    if kind in ("get_statistics", "node_info", "cluster_map"):
        return b""
    if kind == "cluster_init":
        members = msg["members"]
        return u16(msg["group"]) + u16(len(members)) + b"".join(cluster_node(m) for m in members)
    if kind == "cluster_add_node":
        return u16(msg["group"]) + cluster_node(msg["node"])
    if kind == "cluster_remove_node":
        return u16(msg["group"]) + u64(msg["node_id"])
    if kind == "cluster_transfer_leader":
        return u16(msg["group"]) + u64(msg["to"])
    if kind == "cluster_status":
        return u16(msg["group"])
    if kind == "put":
        key, value = unhex(msg["key"]), unhex(msg["value"])
        return u64(msg["pool"]) + u32(len(key)) + u32(len(value)) + key + value
    if kind in ("get", "erase"):
        key = unhex(msg["key"])
        return u64(msg["pool"]) + u32(len(key)) + key
    if kind == "get_attribute":
        key = unhex(msg["key"])
        return u64(msg["pool"]) + u16(ATTRIBUTES[msg["attribute"]]) + u32(len(key)) + key
    if kind == "find":
        pattern = unhex(msg["pattern"])
        body = u64(msg["pool"]) + u16(FIND_KINDS[msg["kind"]]) + u32(msg["limit"]) + u32(len(pattern)) + pattern
        return body + optional_key(msg["after"])
    if kind == "invoke_ado":
        key, payload = unhex(msg["key"]), unhex(msg["payload"])
        return u64(msg["pool"]) + u64(msg["value_size"]) + u32(len(key)) + u32(len(payload)) + key + payload
    if kind == "invoke_put_ado":
        key, value, payload = unhex(msg["key"]), unhex(msg["value"]), unhex(msg["payload"])
        lengths = u32(len(key)) + u32(len(value)) + u32(len(payload))
        return u64(msg["pool"]) + lengths + key + value + payload
    if kind == "put_direct":
        key = unhex(msg["key"])
        return u64(msg["pool"]) + u64(msg["transfer"]) + u64(msg["length"]) + u32(len(key)) + key
    if kind == "direct_write":
        data = unhex(msg["data"])
        return u64(msg["transfer"]) + u64(msg["offset"]) + u32(len(data)) + data
    if kind == "get_direct":
        key = unhex(msg["key"])
        return u64(msg["pool"]) + u64(msg["transfer"]) + u32(len(key)) + key
    if kind == "direct_read":
        return u64(msg["transfer"]) + u64(msg["offset"]) + u32(msg["length"])
    if kind == "end_transfer":
        return u64(msg["transfer"])
    if kind == "put_offset":
        key, data = unhex(msg["key"]), unhex(msg["data"])
        return u64(msg["pool"]) + u64(msg["offset"]) + u32(len(key)) + u32(len(data)) + key + data
    raise ValueError(f"unknown request type {kind!r}")


def encode_request(request_id, msg):
    kind = msg["type"]
    flags = flag_bits(kind, msg.get("flags", []))
    return frame(REQUEST_OPCODES[kind], flags, request_id, request_body(msg))


def response_body(msg):
    """The body of response `msg` (a vectors.json message object)."""
    kind = msg["type"]
    if kind == "hello":
        addresses = msg["shard_addresses"]
        if len(addresses) != msg["shard_count"]:
            raise ValueError("hello: shard_count must equal the number of shard_addresses")
        return (
            u16(msg["version"])
            + u16(msg["shard_index"])
            + u16(msg["shard_count"])
            + u32(msg["key_bytes_max"])
            + u32(msg["value_bytes_max"])
            + b"".join(str16(address) for address in addresses)
        )
    if kind == "pool_created":
        return u64(msg["pool"]) + u8(1 if msg["created"] else 0)
    if kind == "pool_opened":
        return u64(msg["pool"])
    if kind in (
        "pool_closed",
        "pool_deleted",
        "pool_configured",
        "stored",
        "erased",
        "written",
        "transfer_ended",
        "cluster_initialized",
        "node_added",
        "node_removed",
        "leader_transferred",
    ):
        return b""
    if kind == "node_info":
        return cluster_node(msg) + str16(msg["cluster_id"])
    if kind == "cluster_map":
        groups = msg["groups"]
        if len(groups) != msg["shard_count"]:
            raise ValueError("cluster_map: shard_count must equal the number of groups")
        return (
            u64(msg["version"])
            + str16(msg["cluster_id"])
            + u16(msg["shard_count"])
            + u16(len(msg["nodes"]))
            + b"".join(map_entry(node) for node in msg["nodes"])
            + b"".join(u64(g["leader"]) + u64(g["term"]) + node_ids(g["voters"]) + node_ids(g["learners"]) for g in groups)
        )
    if kind == "cluster_status":
        figures = ("leader", "term", "last_log", "committed", "applied", "snapshot")
        followers = msg["followers"]
        return (
            u64(msg["node_id"])
            + u8(RAFT_ROLES[msg["role"]])
            + b"".join(u64(msg[figure]) for figure in figures)
            + u16(len(followers))
            + b"".join(u64(f["node_id"]) + u64(f["matched"]) + u64(f["lag"]) for f in followers)
        )
    if kind == "not_leader":
        return (
            u16(ERROR_CODES["not_leader"])
            + u16(msg["group"])
            + u64(msg["leader"])
            + str16(msg["leader_native"])
            + u64(msg["map_version"])
            + str16(msg["message"])
        )
    if kind == "pools":
        entries = msg["pools"]
        described = "describe" in msg["flags"]
        return u16(len(entries)) + b"".join(
            str16(e["name"])
            + u64(e["objects"])
            + u64(e["size_bytes"])
            + u64(e["used_bytes"])
            + u32(e["open_count"])
            + b"".join(u64(e[field]) for field in POOL_MEMORY_FIELDS)
            + str16(e["plugins"])
            + (u16(flag_bits("settings", e["settings"], {"settings": POOL_SETTINGS})) if described else b"")
            for e in entries
        )
    if kind == "value":
        value = unhex(msg["value"])
        return u32(len(value)) + value
    if kind == "count":
        return u64(msg["count"])
    if kind == "transfer_opened":
        return u64(msg["length"])
    if kind == "attribute":
        return u64(msg["value"])
    if kind == "found":
        keys = [unhex(k) for k in msg["keys"]]
        return u32(len(keys)) + b"".join(u32(len(k)) + k for k in keys) + optional_key(msg["next"])
    if kind == "backed_up":
        return u64(msg["lsn"]) + u64(msg["files"]) + u64(msg["bytes"])
    if kind == "statistics":
        counters = msg["counters"]
        return u16(len(counters)) + b"".join(str16(c["name"]) + u64(c["value"]) for c in counters)
    if kind == "invoked":
        buffers = msg["buffers"]
        return u32(len(buffers)) + b"".join(u16(b["layer"]) + u32(len(unhex(b["data"]))) + unhex(b["data"]) for b in buffers)
    if kind == "error":
        return u16(ERROR_CODES[msg["code"]]) + str16(msg["message"])
    raise ValueError(f"unknown response type {kind!r}")


def encode_response(request_id, msg):
    kind = msg["type"]
    if kind == "error":
        opcode = ERROR_OPCODE
    elif kind == "not_leader":
        opcode = NOT_LEADER_OPCODE
    elif kind == "invoked":
        opcode = REQUEST_OPCODES[msg["answers"]] | RESPONSE_BIT
    elif kind == "transfer_opened":
        if msg["answers"] not in ("put_direct", "get_direct"):
            raise ValueError("transfer_opened answers put_direct or get_direct")
        opcode = REQUEST_OPCODES[msg["answers"]] | RESPONSE_BIT
    elif "answers" in msg:
        if msg["answers"] not in ALSO_ANSWERS.get(kind, ()):
            raise ValueError(f"{kind} does not answer {msg['answers']!r}")
        opcode = REQUEST_OPCODES[msg["answers"]] | RESPONSE_BIT
    else:
        opcode = REQUEST_OPCODES[RESPONSE_TO_REQUEST[kind]] | RESPONSE_BIT
    flags = flag_bits(kind, msg.get("flags", []), RESPONSE_FLAGS)
    return frame(opcode, flags, request_id, response_body(msg))


# --- vectors -------------------------------------------------------------------------------


def _valid(name, direction, request_id, message):
    encode = encode_request if direction == "request" else encode_response
    return {
        "name": name,
        "direction": direction,
        "request_id": request_id,
        "message": message,
        "frame": encode(request_id, message).hex(),
    }


def _invalid(name, direction, request_id, error, frame_bytes):
    if error not in ERROR_CODES:
        raise ValueError(f"unknown error code name {error!r}")
    return {
        "name": name,
        "direction": direction,
        "request_id": request_id,
        "error": error,
        "frame": frame_bytes.hex(),
    }


def request_vectors():
    def req(name, request_id, message):
        return _valid(name, "request", request_id, message)

    return [
        req("hello", 0, {"type": "hello", "version": 3, "client_name": "ferrite-cli/0.1.0", "auth": ""}),
        req("hello_with_auth", 1, {"type": "hello", "version": 3, "client_name": "", "auth": "00ff7f80"}),
        req(
            "hello_with_password",
            1,
            {"type": "hello", "version": 3, "client_name": "app", "auth": credentials("alice", b"s3cret\x00pw")},
        ),
        req(
            "create_pool",
            2,
            {"type": "create_pool", "name": "users", "flags": [], "size_bytes": 1 << 30, "expected_objects": 100_000, "plugins": ""},
        ),
        req(
            "create_pool_create_only",
            3,
            {"type": "create_pool", "name": "sessions", "flags": ["create_only"], "size_bytes": 4096, "expected_objects": 0, "plugins": ""},
        ),
        req(
            "create_pool_name_255_bytes",
            4,
            {"type": "create_pool", "name": "p" * 255, "flags": [], "size_bytes": U64_MAX, "expected_objects": U64_MAX, "plugins": ""},
        ),
        req(
            "create_pool_with_plugins",
            4,
            {
                "type": "create_pool",
                "name": "counters",
                "flags": ["plugins"],
                "size_bytes": 1 << 20,
                "expected_objects": 1000,
                "plugins": "counter,versioning",
            },
        ),
        req("open_pool", 5, {"type": "open_pool", "name": "users"}),
        req("open_pool_non_ascii_name", 6, {"type": "open_pool", "name": "café/日本"}),
        req("close_pool", 7, {"type": "close_pool", "pool": 1}),
        req("delete_pool", 8, {"type": "delete_pool", "name": "sessions"}),
        req("configure_pool_add_index", 45, {"type": "configure_pool", "name": "users", "flags": ["add_index"]}),
        req("configure_pool_remove_index", 46, {"type": "configure_pool", "name": "users", "flags": ["remove_index"]}),
        req("find_next", 47, {"type": "find", "pool": 1, "kind": "next", "limit": 1, "pattern": "6b31", "after": None}),
        req("list_pools", 9, {"type": "list_pools", "flags": []}),
        req("list_pools_described", 9, {"type": "list_pools", "flags": ["describe"], "name": None}),
        req("list_pools_described_one", 9, {"type": "list_pools", "flags": ["describe"], "name": "café"}),
        req("put", 10, {"type": "put", "pool": 1, "flags": [], "key": "6b6579", "value": "76616c7565"}),
        req("put_create_only", 7, {"type": "put", "pool": 1, "flags": ["create_only"], "key": "6b6579", "value": "76616c7565"}),
        req(
            "put_update_only",
            0x0102030405060708,
            {"type": "put", "pool": 0xA1B2C3D4E5F60718, "flags": ["update_only"], "key": "00", "value": "ff00ff"},
        ),
        req("put_sync", 28, {"type": "put", "pool": 1, "flags": ["sync"], "key": "6b6579", "value": "76616c7565"}),
        req("put_async_create_only", 29, {"type": "put", "pool": 1, "flags": ["create_only", "async"], "key": "6b6579", "value": "76"}),
        req(
            "create_pool_async",
            30,
            {"type": "create_pool", "name": "cache", "flags": ["async"], "size_bytes": 1 << 20, "expected_objects": 10, "plugins": ""},
        ),
        req("put_empty_value", 11, {"type": "put", "pool": 2, "flags": [], "key": "656d707479", "value": ""}),
        req("get", 12, {"type": "get", "pool": 1, "key": "6b6579"}),
        req("get_max_request_id", U64_MAX, {"type": "get", "pool": U64_MAX, "key": "ff" * 16}),
        req("erase", 13, {"type": "erase", "pool": 1, "key": "6b6579"}),
        req("count", 2**32, {"type": "count", "pool": 3}),
        req("get_attribute_value_length", 14, {"type": "get_attribute", "pool": 1, "attribute": "value_length", "key": "6b6579"}),
        req("get_attribute_object_count", 15, {"type": "get_attribute", "pool": 1, "attribute": "object_count", "key": ""}),
        req("get_attribute_crc32", 16, {"type": "get_attribute", "pool": 1, "attribute": "crc32", "key": "6b6579"}),
        req("get_attribute_write_time", 17, {"type": "get_attribute", "pool": 1, "attribute": "write_time", "key": "6b6579"}),
        req("get_attribute_pool_size", 18, {"type": "get_attribute", "pool": 1, "attribute": "pool_size", "key": ""}),
        req("get_attribute_pool_used", 19, {"type": "get_attribute", "pool": 1, "attribute": "pool_used", "key": ""}),
        req("get_statistics", 20, {"type": "get_statistics"}),
        req("backup", 21, {"type": "backup", "dir": "/var/backups/ferrite/2026-11-25"}),
        req(
            "create_pool_indexed",
            23,
            {"type": "create_pool", "name": "@1/redis", "flags": ["create_only", "indexed"], "size_bytes": 1 << 30, "expected_objects": 0, "plugins": ""},
        ),
        req("find_prefix_from_start", 24, {"type": "find", "pool": 1, "kind": "prefix", "limit": 100, "pattern": "757365723a", "after": None}),
        req("find_regex_after", 25, {"type": "find", "pool": 2, "kind": "regex", "limit": 1024, "pattern": "5e615b302d395d2b24", "after": "6131"}),
        req("find_glob_empty_after", 26, {"type": "find", "pool": 1, "kind": "glob", "limit": 1, "pattern": "2a", "after": ""}),
        req("find_exact", 27, {"type": "find", "pool": 1, "kind": "exact", "limit": 1, "pattern": "6b6579", "after": None}),
        req(
            "invoke_ado",
            40,
            {"type": "invoke_ado", "pool": 1, "flags": [], "key": "6b6579", "payload": "616464203130", "value_size": 0},
        ),
        req(
            "invoke_ado_create_on_demand",
            41,
            {
                "type": "invoke_ado",
                "pool": 2,
                "flags": ["create_on_demand", "zero_new_value"],
                "key": "636f756e746572",
                "payload": "676574",
                "value_size": 8,
            },
        ),
        req(
            "invoke_ado_read_only_fire_and_forget",
            42,
            {"type": "invoke_ado", "pool": 1, "flags": ["read_only", "fire_and_forget"], "key": "6b", "payload": "", "value_size": 0},
        ),
        req(
            "invoke_ado_pool_without_key",
            43,
            {"type": "invoke_ado", "pool": U64_MAX, "flags": [], "key": "", "payload": "6c697374", "value_size": 0},
        ),
        req(
            "invoke_put_ado",
            44,
            {"type": "invoke_put_ado", "pool": 1, "flags": [], "key": "6b6579", "value": "7631", "payload": "7075742076657273696f6e"},
        ),
        req(
            "invoke_put_ado_no_overwrite_detached",
            45,
            {
                "type": "invoke_put_ado",
                "pool": 3,
                "flags": ["no_overwrite", "detached"],
                "key": "6b",
                "value": "00ff00ff",
                "payload": "",
            },
        ),
        req(
            "put_direct",
            60,
            {"type": "put_direct", "pool": 1, "flags": [], "transfer": 1, "length": 8_388_608, "key": "6b6579"},
        ),
        req(
            "put_direct_update_only_sync",
            61,
            {"type": "put_direct", "pool": 2, "flags": ["update_only", "sync"], "transfer": U64_MAX, "length": 0, "key": "626967"},
        ),
        req("direct_write", 62, {"type": "direct_write", "transfer": 1, "offset": 0, "data": "00010203"}),
        req("direct_write_later_piece", 63, {"type": "direct_write", "transfer": 1, "offset": 2_097_152, "data": "ff"}),
        req("get_direct", 64, {"type": "get_direct", "pool": 1, "transfer": 2, "key": "6b6579"}),
        req("direct_read", 65, {"type": "direct_read", "transfer": 2, "offset": 0, "length": VALUE_INLINE_BYTES_MAX}),
        req("direct_read_last_piece", 66, {"type": "direct_read", "transfer": 2, "offset": 8_388_607, "length": 1}),
        req("end_transfer", 67, {"type": "end_transfer", "transfer": 1, "flags": []}),
        req("end_transfer_abort", 68, {"type": "end_transfer", "transfer": U64_MAX, "flags": ["abort"]}),
        req("put_offset", 69, {"type": "put_offset", "pool": 1, "flags": [], "offset": 4, "key": "6b6579", "data": "7878"}),
        req("put_offset_sync", 70, {"type": "put_offset", "pool": 3, "flags": ["sync"], "offset": 0, "key": "6b", "data": ""}),
        req("put_offset_async", 71, {"type": "put_offset", "pool": 3, "flags": ["async"], "offset": 2**40, "key": "6b", "data": "00"}),
        req("node_info", 90, {"type": "node_info"}),
        req("cluster_map", 91, {"type": "cluster_map"}),
        req(
            "cluster_init_three_members",
            92,
            {
                "type": "cluster_init",
                "group": 0,
                "members": [
                    {"node_id": 1, "peer": "10.0.0.1:7300", "native": "10.0.0.1:7100", "resp": "10.0.0.1:6379"},
                    {"node_id": 2, "peer": "10.0.0.2:7300", "native": "10.0.0.2:7100", "resp": ""},
                    {"node_id": U64_MAX, "peer": "[fd00::3]:7300", "native": "node-3.example:7100", "resp": "node-3.example:6379"},
                ],
            },
        ),
        req(
            "cluster_add_node",
            93,
            {
                "type": "cluster_add_node",
                "group": 255,
                "node": {"node_id": 4, "peer": "10.0.0.4:7300", "native": "10.0.0.4:7100", "resp": "10.0.0.4:6379"},
            },
        ),
        req("cluster_remove_node", 94, {"type": "cluster_remove_node", "group": 3, "node_id": 2}),
        req("cluster_transfer_leader", 95, {"type": "cluster_transfer_leader", "group": 1, "to": 3}),
        req("cluster_status", 96, {"type": "cluster_status", "group": 7}),
    ]


def response_vectors():
    def resp(name, request_id, message):
        return _valid(name, "response", request_id, message)

    return [
        resp(
            "hello_response",
            0,
            {
                "type": "hello",
                "version": 3,
                "shard_index": 1,
                "shard_count": 2,
                "key_bytes_max": KEY_BYTES_MAX,
                "value_bytes_max": VALUE_INLINE_BYTES_MAX,
                "shard_addresses": ["0.0.0.0:11911", "[::1]:11912"],
            },
        ),
        resp("pool_created", 2, {"type": "pool_created", "pool": 1, "created": True}),
        resp("pool_created_existing", 3, {"type": "pool_created", "pool": 0xFEDCBA9876543210, "created": False}),
        resp("pool_opened", 5, {"type": "pool_opened", "pool": 1}),
        resp("pool_closed", 7, {"type": "pool_closed"}),
        resp("pool_deleted", 8, {"type": "pool_deleted"}),
        resp("pool_configured", 45, {"type": "pool_configured"}),
        resp("pools_empty", 9, {"type": "pools", "flags": [], "pools": []}),
        resp("pools_described_none", 9, {"type": "pools", "flags": ["describe"], "pools": []}),
        resp(
            "pools_described",
            9,
            {
                "type": "pools",
                "flags": ["describe"],
                "pools": [
                    {
                        "name": "orders",
                        "objects": 7,
                        "size_bytes": 1 << 26,
                        "used_bytes": 700,
                        "open_count": 1,
                        "table_buckets": 1024,
                        "table_bytes": 65536,
                        "slab_bytes": 0,
                        "large_bytes": 0,
                        "other_bytes": 4160,
                        "index_bytes": 490,
                        "plugins": "counter",
                        "settings": ["indexed", "async"],
                    },
                    {
                        "name": "café",
                        "objects": 0,
                        "size_bytes": 4096,
                        "used_bytes": 0,
                        "open_count": 0,
                        "table_buckets": 0,
                        "table_bytes": 0,
                        "slab_bytes": 0,
                        "large_bytes": 0,
                        "other_bytes": 0,
                        "index_bytes": 0,
                        "plugins": "",
                        "settings": [],
                    },
                ],
            },
        ),
        resp(
            "pools_two",
            9,
            {
                "type": "pools",
                "flags": [],
                "pools": [
                    {
                        "name": "users",
                        "objects": 3,
                        "size_bytes": 1 << 30,
                        "used_bytes": 250,
                        "open_count": 2,
                        "table_buckets": 64,
                        "table_bytes": 4096,
                        "slab_bytes": 1 << 20,
                        "large_bytes": 8192,
                        "other_bytes": 4160,
                        "index_bytes": 304,
                        "plugins": "counter,versioning",
                    },
                    {
                        "name": "café",
                        "objects": 0,
                        "size_bytes": 4096,
                        "used_bytes": 0,
                        "open_count": 0,
                        "table_buckets": 0,
                        "table_bytes": 0,
                        "slab_bytes": 0,
                        "large_bytes": 0,
                        "other_bytes": U64_MAX,
                        "index_bytes": 0,
                        "plugins": "",
                    },
                ],
            },
        ),
        resp("stored", 10, {"type": "stored"}),
        resp("value", 12, {"type": "value", "value": "76616c7565"}),
        resp("value_empty", U64_MAX, {"type": "value", "value": ""}),
        resp("erased", 13, {"type": "erased"}),
        resp("count_response", 2**32, {"type": "count", "count": 1_000_000}),
        resp("attribute", 16, {"type": "attribute", "value": 0xCBF43926}),
        resp(
            "statistics",
            20,
            {
                "type": "statistics",
                "counters": [
                    {"name": "shard", "value": 0},
                    {"name": "requests", "value": 1234},
                    {"name": "puts", "value": 100},
                    {"name": "gets", "value": 1000},
                    {"name": "erases", "value": 10},
                    {"name": "failures", "value": 3},
                    {"name": "clients", "value": 2},
                    {"name": "clients_total", "value": 17},
                    {"name": "pools", "value": 4},
                    {"name": "uptime_ms", "value": 86_400_000},
                ],
            },
        ),
        resp("backed_up", 21, {"type": "backed_up", "lsn": 123_456, "files": 9, "bytes": 16_777_216}),
        resp("error_non_ascii_message", 10, {"type": "error", "code": "pool_full", "message": "pool « users » est plein ✗"}),
        resp("error_empty_message", 0, {"type": "error", "code": "too_many_connections", "message": ""}),
        resp("error_no_space", 28, {"type": "error", "code": "no_space", "message": "no space left for the write-ahead log"}),
        resp("error_storage_failed", 29, {"type": "error", "code": "storage_failed", "message": "log failed"}),
        resp("found_done", 24, {"type": "found", "keys": ["757365723a31", "757365723a32"], "next": None}),
        resp("found_more", 25, {"type": "found", "keys": ["6131"], "next": "6139"}),
        resp("found_nothing_yet", 26, {"type": "found", "keys": [], "next": "00"}),
        resp("found_empty_key", 27, {"type": "found", "keys": [""], "next": None}),
        resp(
            "invoked_two_layers",
            40,
            {"type": "invoked", "answers": "invoke_ado", "buffers": [{"layer": 0, "data": "3131"}, {"layer": 1, "data": ""}]},
        ),
        resp("invoked_fire_and_forget", 42, {"type": "invoked", "answers": "invoke_ado", "buffers": []}),
        resp("put_invoked", 44, {"type": "invoked", "answers": "invoke_put_ado", "buffers": [{"layer": 7, "data": "00ff"}]}),
        resp("error_ado_failed", 40, {"type": "error", "code": "ado_failed", "message": "plugin 'counter' panicked"}),
        resp("error_ado_timeout", 41, {"type": "error", "code": "ado_timeout", "message": ""}),
        resp(
            "error_authentication_failed",
            0,
            {"type": "error", "code": "authentication_failed", "message": "wrong user or password"},
        ),
        resp(
            "error_permission_denied",
            9,
            {"type": "error", "code": "permission_denied", "message": "user 'bob' has no write right on pool 'orders'"},
        ),
        resp("error_quota_exceeded", 10, {"type": "error", "code": "quota_exceeded", "message": ""}),
        resp("transfer_opened_put_direct", 60, {"type": "transfer_opened", "answers": "put_direct", "length": 8_388_608}),
        resp("transfer_opened_get_direct", 64, {"type": "transfer_opened", "answers": "get_direct", "length": 8_388_608}),
        resp("transfer_opened_get_direct_empty", 72, {"type": "transfer_opened", "answers": "get_direct", "length": 0}),
        resp("written", 62, {"type": "written"}),
        resp("transfer_ended", 67, {"type": "transfer_ended"}),
        resp("value_direct_read", 66, {"type": "value", "answers": "direct_read", "value": "ff"}),
        resp("value_direct_read_empty", 73, {"type": "value", "answers": "direct_read", "value": ""}),
        resp("stored_put_offset", 69, {"type": "stored", "answers": "put_offset"}),
        resp("error_direct_read_past_end", 74, {"type": "error", "code": "invalid_argument", "message": "offset 9 is past the end of a value of 8 bytes"}),
        resp(
            "node_info_single_server",
            90,
            {"type": "node_info", "node_id": 0, "peer": "", "native": "0.0.0.0:11911", "resp": "", "cluster_id": ""},
        ),
        resp(
            "node_info_cluster_node",
            90,
            {
                "type": "node_info",
                "node_id": 2,
                "peer": "10.0.0.2:7300",
                "native": "10.0.0.2:7100",
                "resp": "10.0.0.2:6379",
                "cluster_id": "c0ffee00-1234-5678-9abc-def012345678",
            },
        ),
        resp(
            "cluster_map_single_server",
            91,
            {
                "type": "cluster_map",
                "version": 0,
                "cluster_id": "",
                "shard_count": 2,
                "nodes": [{"node_id": 0, "native": "0.0.0.0:11911", "resp": "0.0.0.0:6379", "peer": ""}],
                "groups": [
                    {"leader": 0, "term": 0, "voters": [0], "learners": []},
                    {"leader": 0, "term": 0, "voters": [0], "learners": []},
                ],
            },
        ),
        resp(
            "cluster_map_three_nodes",
            91,
            {
                "type": "cluster_map",
                "version": 17,
                "cluster_id": "c0ffee00",
                "shard_count": 2,
                "nodes": [
                    {"node_id": 1, "native": "10.0.0.1:7100", "resp": "10.0.0.1:6379", "peer": "10.0.0.1:7300"},
                    {"node_id": 2, "native": "10.0.0.2:7100", "resp": "", "peer": "10.0.0.2:7300"},
                    {"node_id": 3, "native": "10.0.0.3:7100", "resp": "10.0.0.3:6379", "peer": "10.0.0.3:7300"},
                ],
                "groups": [
                    {"leader": 1, "term": 4, "voters": [1, 2, 3], "learners": []},
                    {"leader": 0, "term": U64_MAX, "voters": [1, 2], "learners": [3]},
                ],
            },
        ),
        resp("cluster_initialized", 92, {"type": "cluster_initialized"}),
        resp("node_added", 93, {"type": "node_added"}),
        resp("node_removed", 94, {"type": "node_removed"}),
        resp("leader_transferred", 95, {"type": "leader_transferred"}),
        resp(
            "cluster_status_leader",
            96,
            {
                "type": "cluster_status",
                "node_id": 1,
                "role": "leader",
                "leader": 1,
                "term": 4,
                "last_log": 1000,
                "committed": 998,
                "applied": 997,
                "snapshot": 512,
                "followers": [{"node_id": 2, "matched": 1000, "lag": 0}, {"node_id": 3, "matched": 640, "lag": 360}],
            },
        ),
        resp(
            "cluster_status_uninitialized",
            96,
            {
                "type": "cluster_status",
                "node_id": 5,
                "role": "uninitialized",
                "leader": 0,
                "term": 0,
                "last_log": 0,
                "committed": 0,
                "applied": 0,
                "snapshot": 0,
                "followers": [],
            },
        ),
        resp(
            "not_leader",
            12,
            {
                "type": "not_leader",
                "group": 3,
                "leader": 2,
                "leader_native": "10.0.0.2:7103",
                "map_version": 18,
                "message": "node 1 does not lead group 3; node 2 does",
            },
        ),
        resp(
            "not_leader_unknown",
            10,
            {"type": "not_leader", "group": 0, "leader": 0, "leader_native": "", "map_version": U64_MAX, "message": ""},
        ),
        resp("error_not_leader", 10, {"type": "error", "code": "not_leader", "message": "no leader for group 0"}),
    ]


def error_vectors():
    put = REQUEST_OPCODES["put"]
    get = REQUEST_OPCODES["get"]
    create_pool = REQUEST_OPCODES["create_pool"]
    key = b"key"
    hello_body = b"FRRX" + u16(PROTOCOL_VERSION) + str16("ferrite-cli/0.1.0") + bytes16(b"")
    find = REQUEST_OPCODES["find"]
    invoke = REQUEST_OPCODES["invoke_ado"]
    invoke_put = REQUEST_OPCODES["invoke_put_ado"]

    def invoke_body(key, payload, value_size=0):
        return u64(1) + u64(value_size) + u32(len(key)) + u32(len(payload)) + key + payload

    def invoke_put_body(key, value, payload):
        return u64(1) + u32(len(key)) + u32(len(value)) + u32(len(payload)) + key + value + payload

    flags = INVOKE_FLAGS
    backup = REQUEST_OPCODES["backup"]
    put_direct = REQUEST_OPCODES["put_direct"]
    direct_write = REQUEST_OPCODES["direct_write"]
    get_direct = REQUEST_OPCODES["get_direct"]
    direct_read = REQUEST_OPCODES["direct_read"]
    end_transfer = REQUEST_OPCODES["end_transfer"]
    put_offset = REQUEST_OPCODES["put_offset"]
    node_info = REQUEST_OPCODES["node_info"]
    cluster_map = REQUEST_OPCODES["cluster_map"]
    cluster_init = REQUEST_OPCODES["cluster_init"]
    cluster_status = REQUEST_OPCODES["cluster_status"]

    def member(node_id):
        return u64(node_id) + str16("10.0.0.1:7300") + str16("10.0.0.1:7100") + str16("")

    def put_offset_body(key, data):
        return u64(1) + u64(0) + u32(len(key)) + u32(len(data)) + key + data

    return [
        _invalid(
            "direct_read_length_too_large",
            "request",
            80,
            "value_too_large",
            frame(direct_read, 0, 80, u64(1) + u64(0) + u32(VALUE_INLINE_BYTES_MAX + 1)),
        ),
        _invalid(
            "direct_write_data_too_large",
            "request",
            81,
            "value_too_large",
            # The length is checked against the limit before the bytes are sliced from the body.
            frame(direct_write, 0, 81, u64(1) + u64(0) + u32(VALUE_INLINE_BYTES_MAX + 1)),
        ),
        _invalid("direct_write_flags", "request", 82, "invalid_argument", frame(direct_write, 0x0001, 82, u64(1) + u64(0) + u32(1) + b"v")),
        _invalid(
            "put_offset_create_only",
            "request",
            83,
            "invalid_argument",
            frame(put_offset, PUT_FLAGS["create_only"], 83, put_offset_body(key, b"v")),
        ),
        _invalid(
            "put_offset_update_only",
            "request",
            84,
            "invalid_argument",
            frame(put_offset, PUT_FLAGS["update_only"], 84, put_offset_body(key, b"v")),
        ),
        _invalid("end_transfer_unknown_flag", "request", 85, "invalid_argument", frame(end_transfer, 0x0002, 85, u64(1))),
        _invalid("end_transfer_trailing_bytes", "request", 86, "malformed_frame", frame(end_transfer, 0, 86, u64(1) + b"\x00")),
        _invalid(
            "put_direct_sync_and_async",
            "request",
            87,
            "invalid_argument",
            frame(put_direct, 0x000C, 87, u64(1) + u64(1) + u64(5) + u32(len(key)) + key),
        ),
        _invalid(
            "put_direct_key_too_large",
            "request",
            88,
            "key_too_large",
            frame(put_direct, 0, 88, u64(1) + u64(1) + u64(5) + u32(KEY_BYTES_MAX + 1)),
        ),
        _invalid("get_direct_with_flags", "request", 89, "invalid_argument", frame(get_direct, 0x0001, 89, u64(1) + u64(1) + u32(len(key)) + key)),
        _invalid(
            "transfer_opened_response_truncated",
            "response",
            90,
            "malformed_frame",
            frame(get_direct | RESPONSE_BIT, 0, 90, u32(5)),
        ),
        _invalid(
            "create_pool_plugins_flag_with_empty_chain",
            "request",
            22,
            "invalid_argument",
            frame(create_pool, 0x0008, 22, str16("pool") + u64(1 << 20) + u64(16) + str16("")),
        ),
        _invalid("backup_relative_dir", "request", 21, "invalid_argument", frame(backup, 0, 21, str16("backups/today"))),
        _invalid("backup_flags", "request", 21, "invalid_argument", frame(backup, 0x0001, 21, str16("/backups"))),
        _invalid(
            "configure_pool_both_settings",
            "request",
            45,
            "invalid_argument",
            frame(REQUEST_OPCODES["configure_pool"], 0x0003, 45, str16("users")),
        ),
        _invalid(
            "configure_pool_no_setting",
            "request",
            46,
            "invalid_argument",
            frame(REQUEST_OPCODES["configure_pool"], 0x0000, 46, str16("users")),
        ),
        _invalid("invoke_ado_unknown_flag", "request", 40, "invalid_argument", frame(invoke, 0x0040, 40, invoke_body(key, b"p"))),
        _invalid(
            "invoke_ado_no_overwrite",
            "request",
            41,
            "invalid_argument",
            frame(invoke, flags["no_overwrite"], 41, invoke_body(key, b"p")),
        ),
        _invalid("invoke_ado_detached", "request", 42, "invalid_argument", frame(invoke, flags["detached"], 42, invoke_body(key, b"p"))),
        _invalid(
            "invoke_ado_create_on_demand_without_key",
            "request",
            43,
            "invalid_argument",
            frame(invoke, flags["create_on_demand"], 43, invoke_body(b"", b"p", 8)),
        ),
        _invalid(
            "invoke_ado_value_size_without_create_on_demand",
            "request",
            44,
            "invalid_argument",
            frame(invoke, 0, 44, invoke_body(key, b"p", 8)),
        ),
        _invalid(
            "invoke_ado_value_size_too_large",
            "request",
            45,
            "value_too_large",
            frame(invoke, flags["create_on_demand"], 45, invoke_body(key, b"p", VALUE_INLINE_BYTES_MAX + 1)),
        ),
        _invalid(
            "invoke_ado_key_too_large",
            "request",
            46,
            "key_too_large",
            frame(invoke, 0, 46, u64(1) + u64(0) + u32(KEY_BYTES_MAX + 1) + u32(0)),
        ),
        _invalid(
            "invoke_ado_truncated_payload",
            "request",
            47,
            "malformed_frame",
            frame(invoke, 0, 47, u64(1) + u64(0) + u32(len(key)) + u32(4) + key + b"ad"),
        ),
        _invalid(
            "invoke_put_ado_create_on_demand",
            "request",
            48,
            "invalid_argument",
            frame(invoke_put, flags["create_on_demand"], 48, invoke_put_body(key, b"v", b"p")),
        ),
        _invalid(
            "invoke_put_ado_read_only_detached",
            "request",
            49,
            "invalid_argument",
            frame(invoke_put, flags["read_only"] | flags["detached"], 49, invoke_put_body(key, b"v", b"p")),
        ),
        _invalid(
            "invoke_put_ado_read_only_no_overwrite",
            "request",
            50,
            "invalid_argument",
            frame(invoke_put, flags["read_only"] | flags["no_overwrite"], 50, invoke_put_body(key, b"v", b"p")),
        ),
        _invalid("invoke_put_ado_empty_key", "request", 51, "invalid_argument", frame(invoke_put, 0, 51, invoke_put_body(b"", b"v", b"p"))),
        _invalid(
            "invoke_put_ado_value_and_payload_too_large",
            "request",
            52,
            "value_too_large",
            # Each fits the value limit alone; together they do not. Checked before any is sliced.
            frame(invoke_put, 0, 52, u64(1) + u32(len(key)) + u32(VALUE_INLINE_BYTES_MAX) + u32(1) + key),
        ),
        _invalid(
            "invoked_response_truncated_buffer",
            "response",
            53,
            "malformed_frame",
            frame(invoke | RESPONSE_BIT, 0, 53, u32(1) + u16(0) + u32(3) + b"ab"),
        ),
        _invalid(
            "invoked_response_count_beyond_body",
            "response",
            54,
            "malformed_frame",
            # A count no body could hold: decoders must not reserve room for it.
            frame(invoke_put | RESPONSE_BIT, 0, 54, u32(0xFFFFFFFF) + u16(0) + u32(0)),
        ),
        _invalid("find_limit_zero", "request", 30, "invalid_argument", frame(find, 0, 30, u64(1) + u16(2) + u32(0) + u32(0) + u8(0))),
        _invalid("find_limit_too_large", "request", 31, "invalid_argument", frame(find, 0, 31, u64(1) + u16(2) + u32(1025) + u32(0) + u8(0))),
        _invalid("find_unknown_kind", "request", 32, "invalid_argument", frame(find, 0, 32, u64(1) + u16(9) + u32(1) + u32(0) + u8(0))),
        _invalid("find_truncated_after", "request", 33, "malformed_frame", frame(find, 0, 33, u64(1) + u16(2) + u32(1) + u32(0) + u8(1) + u32(4) + b"ab")),
        _invalid("unknown_opcode", "request", 21, "unknown_opcode", frame(0x0070, 0, 21, b"")),
        _invalid(
            "put_truncated_body",
            "request",
            22,
            "malformed_frame",
            # key_len 3 and value_len 5 announce 8 bytes; only 5 follow.
            frame(put, 0, 22, u64(1) + u32(3) + u32(5) + key + b"va"),
        ),
        _invalid(
            "get_trailing_bytes",
            "request",
            23,
            "malformed_frame",
            frame(get, 0, 23, u64(1) + u32(3) + key + b"\x00"),
        ),
        _invalid(
            "put_key_too_large",
            "request",
            24,
            "key_too_large",
            # The length is checked against the limit before the key is sliced from the body.
            frame(put, 0, 24, u64(1) + u32(KEY_BYTES_MAX + 1) + u32(0)),
        ),
        _invalid(
            "put_value_too_large",
            "request",
            25,
            "value_too_large",
            # The length is checked against the limit before the value is sliced from the body.
            frame(put, 0, 25, u64(1) + u32(len(key)) + u32(VALUE_INLINE_BYTES_MAX + 1) + key),
        ),
        _invalid(
            "put_both_flags",
            "request",
            26,
            "invalid_argument",
            frame(put, 0x0003, 26, u64(1) + u32(3) + u32(5) + key + b"value"),
        ),
        _invalid(
            "get_with_flags",
            "request",
            27,
            "invalid_argument",
            frame(get, 0x0001, 27, u64(1) + u32(3) + key),
        ),
        _invalid(
            "put_undefined_flag",
            "request",
            28,
            "invalid_argument",
            frame(put, 0x0010, 28, u64(1) + u32(3) + u32(5) + key + b"value"),
        ),
        _invalid(
            "put_sync_and_async",
            "request",
            36,
            "invalid_argument",
            frame(put, 0x000C, 36, u64(1) + u32(3) + u32(5) + key + b"value"),
        ),
        _invalid(
            "create_pool_empty_name",
            "request",
            29,
            "invalid_argument",
            frame(create_pool, 0, 29, str16("") + u64(4096) + u64(0)),
        ),
        _invalid(
            "create_pool_name_256_bytes",
            "request",
            30,
            "invalid_argument",
            frame(create_pool, 0, 30, str16("p" * 256) + u64(4096) + u64(0)),
        ),
        _invalid(
            "hello_wrong_magic",
            "request",
            0,
            "malformed_frame",
            frame(REQUEST_OPCODES["hello"], 0, 0, hello_body),
        ),
        _invalid(
            "get_attribute_unknown_attribute",
            "request",
            31,
            "invalid_argument",
            frame(REQUEST_OPCODES["get_attribute"], 0, 31, u64(1) + u16(99) + u32(0)),
        ),
        _invalid(
            "open_pool_invalid_utf8",
            "request",
            32,
            "malformed_frame",
            frame(REQUEST_OPCODES["open_pool"], 0, 32, bytes16(b"\xff\xfe")),
        ),
        _invalid(
            "value_response_truncated",
            "response",
            33,
            "malformed_frame",
            frame(get | RESPONSE_BIT, 0, 33, u32(5) + b"val"),
        ),
        _invalid(
            "value_response_value_too_large",
            "response",
            33,
            "value_too_large",
            # The length is checked against the limit before the value is sliced from the body.
            frame(get | RESPONSE_BIT, 0, 33, u32(VALUE_INLINE_BYTES_MAX + 1)),
        ),
        _invalid(
            "pool_closed_response_trailing_bytes",
            "response",
            34,
            "malformed_frame",
            frame(REQUEST_OPCODES["close_pool"] | RESPONSE_BIT, 0, 34, b"\x00"),
        ),
        _invalid(
            "hello_response_missing_address",
            "response",
            0,
            "malformed_frame",
            # shard_count 2 announces two addresses; only one follows.
            frame(
                REQUEST_OPCODES["hello"] | RESPONSE_BIT,
                0,
                0,
                u16(1) + u16(0) + u16(2) + u32(KEY_BYTES_MAX) + u32(VALUE_INLINE_BYTES_MAX) + str16("0.0.0.0:11911"),
            ),
        ),
        _invalid(
            "stored_response_with_flags",
            "response",
            10,
            "invalid_argument",
            # A response defines no flags, so every flag bit must be zero.
            frame(put | RESPONSE_BIT, 0x0001, 10, b""),
        ),
        _invalid(
            "list_pools_unknown_flag",
            "request",
            9,
            "invalid_argument",
            frame(REQUEST_OPCODES["list_pools"], 0x0002, 9, b""),
        ),
        _invalid(
            "list_pools_name_without_describe",
            "request",
            9,
            "malformed_frame",
            # Without the describe flag the body is empty: a name is bytes left over.
            frame(REQUEST_OPCODES["list_pools"], 0, 9, str16("users")),
        ),
        _invalid(
            "list_pools_described_empty_name",
            "request",
            9,
            "invalid_argument",
            # A pool name has 1 to 255 bytes; every pool is asked for with an empty body.
            frame(REQUEST_OPCODES["list_pools"], 0x0001, 9, str16("")),
        ),
        _invalid(
            "pools_response_unknown_flag",
            "response",
            9,
            "invalid_argument",
            frame(REQUEST_OPCODES["list_pools"] | RESPONSE_BIT, 0x0002, 9, u16(0)),
        ),
        _invalid(
            "pools_described_unknown_setting",
            "response",
            9,
            "invalid_argument",
            frame(
                REQUEST_OPCODES["list_pools"] | RESPONSE_BIT,
                0x0001,
                9,
                u16(1) + str16("p") + u64(0) * 3 + u32(0) + u64(0) * 6 + str16("") + u16(0x0004),
            ),
        ),
        _invalid(
            "error_response_invalid_utf8",
            "response",
            35,
            "malformed_frame",
            frame(ERROR_OPCODE, 0, 35, u16(ERROR_CODES["internal"]) + bytes16(b"\xc3\x28")),
        ),
        _invalid("node_info_trailing_bytes", "request", 90, "malformed_frame", frame(node_info, 0, 90, b"\x00")),
        _invalid("cluster_map_with_flags", "request", 91, "invalid_argument", frame(cluster_map, 0x0001, 91, b"")),
        _invalid("cluster_status_with_flags", "request", 96, "invalid_argument", frame(cluster_status, 0x0001, 96, u16(0))),
        _invalid("cluster_status_truncated", "request", 96, "malformed_frame", frame(cluster_status, 0, 96, b"\x00")),
        _invalid("cluster_init_no_members", "request", 92, "invalid_argument", frame(cluster_init, 0, 92, u16(0) + u16(0))),
        _invalid(
            "cluster_init_too_many_members",
            "request",
            92,
            "invalid_argument",
            # The count is checked against the limit before any member is read.
            frame(cluster_init, 0, 92, u16(0) + u16(CLUSTER_NODES_MAX + 1)),
        ),
        _invalid(
            "cluster_init_node_id_zero",
            "request",
            92,
            "invalid_argument",
            frame(cluster_init, 0, 92, u16(0) + u16(1) + member(0)),
        ),
        _invalid(
            "cluster_init_same_node_twice",
            "request",
            92,
            "invalid_argument",
            frame(cluster_init, 0, 92, u16(0) + u16(2) + member(1) + member(1)),
        ),
        _invalid(
            "cluster_init_member_without_native",
            "request",
            92,
            "invalid_argument",
            frame(cluster_init, 0, 92, u16(0) + u16(1) + u64(1) + str16("10.0.0.1:7300") + str16("") + str16("")),
        ),
        _invalid(
            "cluster_add_node_address_too_long",
            "request",
            93,
            "invalid_argument",
            frame(
                REQUEST_OPCODES["cluster_add_node"],
                0,
                93,
                u16(0) + u64(4) + str16("10.0.0.4:7300") + str16("n" * (NODE_ADDRESS_BYTES_MAX + 1)) + str16(""),
            ),
        ),
        _invalid(
            "cluster_remove_node_zero",
            "request",
            94,
            "invalid_argument",
            frame(REQUEST_OPCODES["cluster_remove_node"], 0, 94, u16(0) + u64(0)),
        ),
        _invalid(
            "cluster_map_response_no_groups",
            "response",
            91,
            "invalid_argument",
            frame(cluster_map | RESPONSE_BIT, 0, 91, u64(1) + str16("") + u16(0) + u16(0)),
        ),
        _invalid(
            "cluster_map_response_too_many_groups",
            "response",
            91,
            "invalid_argument",
            frame(cluster_map | RESPONSE_BIT, 0, 91, u64(1) + str16("") + u16(CLUSTER_GROUPS_MAX + 1) + u16(0)),
        ),
        _invalid(
            "cluster_map_response_too_many_nodes",
            "response",
            91,
            "invalid_argument",
            # Checked before any node is read: a decoder reserves nothing for them.
            frame(cluster_map | RESPONSE_BIT, 0, 91, u64(1) + str16("") + u16(1) + u16(CLUSTER_NODES_MAX + 1)),
        ),
        _invalid(
            "cluster_map_response_too_many_voters",
            "response",
            91,
            "invalid_argument",
            frame(cluster_map | RESPONSE_BIT, 0, 91, u64(1) + str16("") + u16(1) + u16(0) + u64(0) + u64(0) + u16(CLUSTER_NODES_MAX + 1)),
        ),
        _invalid(
            "cluster_map_response_missing_group",
            "response",
            91,
            "malformed_frame",
            # shard_count 2 announces two groups; only one follows.
            frame(cluster_map | RESPONSE_BIT, 0, 91, u64(1) + str16("") + u16(2) + u16(0) + u64(0) + u64(0) + u16(0) + u16(0)),
        ),
        _invalid(
            "cluster_status_response_unknown_role",
            "response",
            96,
            "malformed_frame",
            frame(cluster_status | RESPONSE_BIT, 0, 96, u64(1) + u8(9) + u64(0) * 6 + u16(0)),
        ),
        _invalid(
            "cluster_status_response_too_many_followers",
            "response",
            96,
            "invalid_argument",
            frame(cluster_status | RESPONSE_BIT, 0, 96, u64(1) + u8(2) + u64(0) * 6 + u16(CLUSTER_NODES_MAX + 1)),
        ),
        _invalid(
            "not_leader_other_code",
            "response",
            12,
            "malformed_frame",
            # A not_leader frame always carries code 28.
            frame(NOT_LEADER_OPCODE, 0, 12, u16(ERROR_CODES["internal"]) + u16(0) + u64(0) + str16("") + u64(0) + str16("")),
        ),
        _invalid(
            "not_leader_truncated",
            "response",
            12,
            "malformed_frame",
            frame(NOT_LEADER_OPCODE, 0, 12, u16(ERROR_CODES["not_leader"]) + u16(0) + u64(2)),
        ),
        _invalid("not_leader_as_request", "request", 12, "unknown_opcode", frame(NOT_LEADER_OPCODE, 0, 12, b"")),
    ]


def vectors():
    """All vectors, in a fixed order: requests, responses, then error vectors."""
    all_vectors = request_vectors() + response_vectors() + error_vectors()
    names = [v["name"] for v in all_vectors]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"duplicate vector names: {duplicates}")
    return all_vectors


ROUTING_POOLS = ["a", "users", "pool-42", "café", "日本語", "🦀ferrite", "@0/redis", "@3/redis", "@12/x", "@123456/x", "@a/x", "@/x"]
ROUTING_SHARD_COUNTS = [1, 2, 3, 7, 16]


def routing():
    """Routing cases: every pool in ROUTING_POOLS for every count in ROUTING_SHARD_COUNTS."""
    return [
        {"pool": pool, "shard_count": n, "shard": shard_for_pool(pool, n)}
        for pool in ROUTING_POOLS
        for n in ROUTING_SHARD_COUNTS
    ]


def render(value):
    """The exact text written to a JSON file: UTF-8, two-space indent, trailing newline."""
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def main():
    VECTORS_PATH.write_text(render(vectors()), encoding="utf-8")
    ROUTING_PATH.write_text(render(routing()), encoding="utf-8")


if __name__ == "__main__":
    main()
