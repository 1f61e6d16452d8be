"""The asyncio API: the same sessions and pools as ``ferrite``, with awaitable methods.

    import asyncio
    import ferrite.aio

    async def main():
        async with await ferrite.aio.connect("127.0.0.1:11911") as session:
            async with await session.create_pool("demo") as pool:
                await asyncio.gather(*(pool.put(f"k{i}", b"v") for i in range(1000)))
                print(await pool.count())

    asyncio.run(main())

Calls run on a background Tokio runtime shared by every session; many calls in flight on one
session (``asyncio.gather``, or many tasks) are pipelined on one connection per shard, and their
results return to the event loop in batches. A session belongs to the event loop it was connected
on. Cancelling a call's awaitable drops its result but does not recall the request, which the
server may already have applied. Errors are the ``ferrite`` exception classes.
"""

import warnings
from os import PathLike

from ._ferrite import AsyncPool as Pool
from ._ferrite import AsyncSession as Session
from ._ferrite import InvalidArgument, _connect_async

# The names connect's options had before every client took the same ones (docs/clients.md).
_RENAMED = {"timeout": "connect_timeout", "tls_ca": "tls_ca_file", "tls_cert": "tls_client_cert_file",
            "tls_key": "tls_client_key_file"}


async def connect(
    address: str,
    *,
    client_name: "str | None" = None,
    connect_timeout: "float | None" = None,
    tls_ca_file: "str | PathLike[str] | None" = None,
    tls_client_cert_file: "str | PathLike[str] | None" = None,
    tls_client_key_file: "str | PathLike[str] | None" = None,
    user: "str | None" = None,
    password: "str | None" = None,
    **deprecated: "float | str | PathLike[str] | None",
) -> Session:
    """Connects to the Ferrite server at ``address`` ("host:port" of any shard).

    The options are those of ``ferrite.connect`` (its deprecated names included: ``timeout``,
    ``tls_ca``, ``tls_cert``, ``tls_key`` warn). Must be awaited in the event loop that will use
    the session. Raises ``ferrite.ConnectionFailed`` if the server cannot be reached and
    ``ferrite.AuthenticationFailed`` for a wrong user or password.
    """
    options = {"connect_timeout": connect_timeout, "tls_ca_file": tls_ca_file,
               "tls_client_cert_file": tls_client_cert_file, "tls_client_key_file": tls_client_key_file}
    for old, value in deprecated.items():
        if old not in _RENAMED:
            raise TypeError(f"connect() got an unexpected keyword argument {old!r}")
        new = _RENAMED[old]
        if options[new] is not None:
            raise InvalidArgument(f"give one of {new} and {old}, its deprecated name")
        warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=2)
        options[new] = value
    return await _connect_async(address, client_name=client_name, user=user, password=password, **options)


__all__ = ["Pool", "Session", "connect"]
