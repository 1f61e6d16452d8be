"""Type stubs of the asyncio API; the docstrings live in the extension (``help(ferrite.aio.Pool)``)."""

import asyncio
from types import TracebackType

from typing import final

from typing_extensions import Buffer, Self

from . import _Bytes, _ClusterMap, _Durability, _FindKind, Limits, PoolAttributes, PoolInfo, _StrPath, ValueAttributes

async def connect(
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
    ) -> asyncio.Future[Pool]: ...
    def open_pool(self, name: str) -> asyncio.Future[Pool]: ...
    def delete_pool(self, name: str) -> asyncio.Future[None]: ...
    def configure_pool(self, name: str, *, add_index: bool = False, remove_index: bool = False) -> asyncio.Future[None]: ...
    def pools(self) -> asyncio.Future[list[PoolInfo]]: ...
    def stats(self) -> asyncio.Future[list[dict[str, int]]]: ...
    def backup(self, directory: str) -> asyncio.Future[list[dict[str, int]]]: ...
    def cluster_map(self) -> asyncio.Future[_ClusterMap]: ...
    def close(self) -> asyncio.Future[None]: ...
    def __aenter__(self) -> asyncio.Future[Self]: ...
    def __aexit__(
        self,
        _exc_type: type[BaseException] | None = None,
        _exc_value: BaseException | None = None,
        _traceback: TracebackType | None = None,
    ) -> asyncio.Future[None]: ...

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
    ) -> asyncio.Future[None]: ...
    def get(self, key: _Bytes) -> asyncio.Future[bytes]: ...
    def get_into(self, key: _Bytes, buffer: Buffer, *, offset: int | None = None) -> asyncio.Future[int]: ...
    def get_offset(self, key: _Bytes, offset: int, length: int | None = None) -> asyncio.Future[bytes]: ...
    def put_offset(
        self, key: _Bytes, offset: int, data: _Bytes, *, durability: _Durability | None = None
    ) -> asyncio.Future[None]: ...
    def erase(self, key: _Bytes) -> asyncio.Future[None]: ...
    def count(self) -> asyncio.Future[int]: ...
    def attributes(self, key: _Bytes | None = None) -> asyncio.Future[ValueAttributes | PoolAttributes]: ...
    def find(
        self, pattern: _Bytes, kind: _FindKind = "prefix", limit: int | None = None
    ) -> asyncio.Future[list[bytes]]: ...
    def invoke(
        self,
        key: _Bytes,
        payload: _Bytes,
        *,
        create_size: int | None = None,
        read_only: bool = False,
        fire_and_forget: bool = False,
    ) -> asyncio.Future[list[tuple[int, bytes]]]: ...
    def invoke_pool(
        self, payload: _Bytes, *, read_only: bool = False, fire_and_forget: bool = False
    ) -> asyncio.Future[list[tuple[int, bytes]]]: ...
    def invoke_put(
        self,
        key: _Bytes,
        value: _Bytes,
        payload: _Bytes,
        *,
        no_overwrite: bool = False,
        detached: bool = False,
        fire_and_forget: bool = False,
    ) -> asyncio.Future[list[tuple[int, bytes]]]: ...
    def close(self) -> asyncio.Future[None]: ...
    def __aenter__(self) -> asyncio.Future[Self]: ...
    def __aexit__(
        self,
        _exc_type: type[BaseException] | None = None,
        _exc_value: BaseException | None = None,
        _traceback: TracebackType | None = None,
    ) -> asyncio.Future[None]: ...

__all__ = ["Pool", "Session", "connect"]
