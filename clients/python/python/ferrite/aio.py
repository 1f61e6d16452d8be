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

from os import PathLike

from ._ferrite import AsyncPool as Pool
from ._ferrite import AsyncSession as Session
from ._ferrite import _connect_async


async def connect(
    address: str,
    *,
    client_name: "str | None" = None,
    timeout: float = 10.0,
    tls_ca: "str | PathLike[str] | None" = None,
    tls_cert: "str | PathLike[str] | None" = None,
    tls_key: "str | PathLike[str] | None" = None,
    user: "str | None" = None,
    password: "str | None" = None,
) -> Session:
    """Connects to the Ferrite server at ``address`` ("host:port" of any shard).

    The options are those of ``ferrite.connect``. Must be awaited in the event loop that will use
    the session. Raises ``ferrite.ConnectionFailed`` if the server cannot be reached and
    ``ferrite.AuthenticationFailed`` for a wrong user or password.
    """
    return await _connect_async(
        address,
        client_name=client_name,
        timeout=timeout,
        tls_ca=tls_ca,
        tls_cert=tls_cert,
        tls_key=tls_key,
        user=user,
        password=password,
    )


__all__ = ["Pool", "Session", "connect"]
