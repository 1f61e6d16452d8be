"""Type stubs of the blocking API; the docstrings live in the extension (``help(ferrite.Pool)``)."""

import enum
from os import PathLike
from types import TracebackType
from typing import Final, Literal, TypedDict, final

from typing_extensions import Buffer, Self, TypeAlias, deprecated

__version__: Final[str]

_Bytes: TypeAlias = bytes | str | Buffer
"""A key, value, pattern or payload: bytes, str (stored as UTF-8), or any buffer-protocol object."""

_Durability: TypeAlias = Literal["sync", "async"]
_FindKind: TypeAlias = Literal["prefix", "exact", "regex", "glob", "next"]
_StrPath: TypeAlias = str | PathLike[str]

ERROR_CODES: Final[dict[str, int]]

class ErrorCode(enum.IntEnum):
    """The wire error codes, by their stable names."""

    malformed_frame = 1
    unknown_opcode = 2
    frame_too_large = 3
    key_too_large = 4
    value_too_large = 5
    handshake_required = 6
    unsupported_version = 7
    pool_not_found = 8
    pool_exists = 9
    pool_in_use = 10
    pool_not_open = 11
    too_many_pools = 12
    key_not_found = 13
    key_exists = 14
    pool_full = 15
    too_many_connections = 16
    wrong_shard = 17
    invalid_argument = 18
    internal = 19
    shutting_down = 20
    no_space = 21
    storage_failed = 22
    ado_failed = 23
    ado_timeout = 24
    authentication_failed = 25
    permission_denied = 26
    quota_exceeded = 27
    not_leader = 28

def error_class(code: str | int) -> type[FerriteError]: ...

# Exceptions

class FerriteError(Exception):
    code: str | None
    number: int | None
    message: str | None

class MalformedFrame(FerriteError): ...
class UnknownOpcode(FerriteError): ...
class FrameTooLarge(FerriteError): ...
class KeyTooLarge(FerriteError): ...
class ValueTooLarge(FerriteError): ...
class HandshakeRequired(FerriteError): ...
class UnsupportedVersion(FerriteError): ...
class PoolNotFound(FerriteError): ...
class PoolExists(FerriteError): ...
class PoolInUse(FerriteError): ...
class PoolNotOpen(FerriteError): ...
class TooManyPools(FerriteError): ...
class KeyNotFound(FerriteError): ...
class KeyExists(FerriteError): ...
class PoolFull(FerriteError): ...
class TooManyConnections(FerriteError): ...
class WrongShard(FerriteError): ...
class InvalidArgument(FerriteError, ValueError): ...
class Internal(FerriteError): ...
class ShuttingDown(FerriteError): ...
class NoSpace(FerriteError): ...
class StorageFailed(FerriteError): ...
class AdoFailed(FerriteError): ...
class AdoTimeout(FerriteError): ...
class AuthenticationFailed(FerriteError): ...
class PermissionDenied(FerriteError): ...
class QuotaExceeded(FerriteError): ...

class NotLeader(FerriteError):
    # In a cluster: the node does not lead the request's group, and the session could not reach
    # the one that does within its 5 redirects. What the last refusal said:
    group: int
    leader: int  # 0 while no leader is known
    leader_native: str  # "" while no leader is known
    map_version: int

class BufferTooSmall(InvalidArgument):
    needed: int | None

class ConnectionFailed(FerriteError, ConnectionError): ...
class ConnectionClosed(ConnectionFailed): ...
class UnexpectedResponse(FerriteError): ...

# Values returned by the API

@final
class Limits:
    @property
    def key_bytes_max(self) -> int: ...
    @property
    def value_bytes_max(self) -> int: ...

@final
class PoolInfo:
    @property
    def name(self) -> str: ...
    @property
    def shard(self) -> int: ...
    @property
    def objects(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def used_bytes(self) -> int: ...
    @property
    @deprecated("use size_bytes")
    def size(self) -> int: ...
    @property
    @deprecated("use used_bytes")
    def used(self) -> int: ...
    @property
    def open_count(self) -> int: ...
    @property
    def plugins(self) -> list[str]: ...
    @property
    def indexed(self) -> bool: ...
    @property
    def durability(self) -> _Durability: ...
    @property
    def memory(self) -> dict[str, int]: ...
    @property
    def memory_bytes(self) -> int: ...
    @property
    def bytes_per_key(self) -> float | None: ...

@final
class ValueAttributes:
    @property
    def length(self) -> int: ...
    @property
    def crc32(self) -> int: ...
    @property
    def write_time_ns(self) -> int: ...
    @property
    def write_time(self) -> float: ...

@final
class PoolAttributes:
    @property
    def objects(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def used_bytes(self) -> int: ...
    @property
    @deprecated("use size_bytes")
    def size(self) -> int: ...
    @property
    @deprecated("use used_bytes")
    def used(self) -> int: ...

# Sessions and pools

def connect(
    address: str,
    *,
    client_name: str | None = None,
    connect_timeout: float | None = None,
    tls_ca_file: _StrPath | None = None,
    tls_client_cert_file: _StrPath | None = None,
    tls_client_key_file: _StrPath | None = None,
    user: str | None = None,
    password: str | None = None,
    # Deprecated names of connect_timeout and the TLS files (they warn).
    timeout: float | None = None,
    tls_ca: _StrPath | None = None,
    tls_cert: _StrPath | None = None,
    tls_key: _StrPath | None = None,
) -> Session: ...

class _ClusterNode(TypedDict):
    node_id: int  # 0 on a server not in cluster mode
    native: str  # host:port of its shard 0 (shard g listens on the port plus g)
    resp: str
    peer: str

class _ClusterGroup(TypedDict):
    group: int  # the shard index
    leader: int  # 0 while no leader is known
    term: int
    voters: list[int]
    learners: list[int]

class _ClusterMap(TypedDict):
    version: int
    cluster_id: str  # "" on a single server, or a node not yet in a cluster
    single_server: bool
    nodes: list[_ClusterNode]
    groups: list[_ClusterGroup]

@final
class Session:
    @property
    def limits(self) -> Limits: ...
    @property
    def shard_count(self) -> int: ...
    @property
    def shard_addresses(self) -> list[str]: ...
    def shard_for_pool(self, name: str) -> int: ...
    def create_pool(
        self,
        name: str,
        size_bytes: int | None = None,
        expected_objects: int | None = None,
        create_only: bool = False,
        durability: _Durability = "sync",
        plugins: list[str] | None = None,
        indexed: bool = False,
        *,
        # Deprecated names of size_bytes and expected_objects (they warn).
        size: int | None = None,
        expected_count: int | None = None,
    ) -> Pool: ...
    def open_pool(self, name: str) -> Pool: ...
    def delete_pool(self, name: str) -> None: ...
    def configure_pool(self, name: str, *, add_index: bool = False, remove_index: bool = False) -> None: ...
    def pools(self) -> list[PoolInfo]: ...
    def stats(self) -> list[dict[str, int]]: ...
    def backup(self, directory: str) -> list[dict[str, int]]: ...
    def cluster_map(self) -> _ClusterMap: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        _exc_type: type[BaseException] | None = None,
        _exc_value: BaseException | None = None,
        _traceback: TracebackType | None = None,
    ) -> bool: ...

@final
class Pool:
    @property
    def name(self) -> str: ...
    @property
    def shard(self) -> int: ...
    @property
    def created(self) -> bool: ...
    @property
    def closed(self) -> bool: ...
    def put(
        self,
        key: _Bytes,
        value: _Bytes,
        *,
        create_only: bool = False,
        update_only: bool = False,
        durability: _Durability | None = None,
    ) -> None: ...
    def get(self, key: _Bytes) -> bytes: ...
    def get_into(self, key: _Bytes, buffer: Buffer, *, offset: int | None = None) -> int: ...
    def get_offset(self, key: _Bytes, offset: int, length: int | None = None) -> bytes: ...
    def put_offset(self, key: _Bytes, offset: int, data: _Bytes, *, durability: _Durability | None = None) -> None: ...
    def erase(self, key: _Bytes) -> None: ...
    def count(self) -> int: ...
    def attributes(self, key: _Bytes | None = None) -> ValueAttributes | PoolAttributes: ...
    def find(self, pattern: _Bytes, kind: _FindKind = "prefix", limit: int | None = None) -> list[bytes]: ...
    def invoke(
        self,
        key: _Bytes,
        payload: _Bytes,
        *,
        create_size: int | None = None,
        read_only: bool = False,
        fire_and_forget: bool = False,
    ) -> list[tuple[int, bytes]]: ...
    def invoke_pool(
        self, payload: _Bytes, *, read_only: bool = False, fire_and_forget: bool = False
    ) -> list[tuple[int, bytes]]: ...
    def invoke_put(
        self,
        key: _Bytes,
        value: _Bytes,
        payload: _Bytes,
        *,
        no_overwrite: bool = False,
        detached: bool = False,
        fire_and_forget: bool = False,
    ) -> list[tuple[int, bytes]]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        _exc_type: type[BaseException] | None = None,
        _exc_value: BaseException | None = None,
        _traceback: TracebackType | None = None,
    ) -> bool: ...

__all__ = [
    "AdoFailed",
    "AdoTimeout",
    "AuthenticationFailed",
    "BufferTooSmall",
    "ConnectionClosed",
    "ConnectionFailed",
    "ErrorCode",
    "FerriteError",
    "FrameTooLarge",
    "HandshakeRequired",
    "Internal",
    "InvalidArgument",
    "KeyExists",
    "KeyNotFound",
    "KeyTooLarge",
    "Limits",
    "MalformedFrame",
    "NoSpace",
    "NotLeader",
    "PermissionDenied",
    "Pool",
    "PoolAttributes",
    "PoolExists",
    "PoolFull",
    "PoolInUse",
    "PoolInfo",
    "PoolNotFound",
    "PoolNotOpen",
    "QuotaExceeded",
    "Session",
    "ShuttingDown",
    "StorageFailed",
    "TooManyConnections",
    "TooManyPools",
    "UnexpectedResponse",
    "UnknownOpcode",
    "UnsupportedVersion",
    "ValueAttributes",
    "ValueTooLarge",
    "WrongShard",
    "__version__",
    "connect",
    "error_class",
]
