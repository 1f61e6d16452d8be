"""Python client for Ferrite, a network key-value store with pools and Active Data Objects.

A thin binding over the Rust client (``ferrite-client``): the protocol is implemented once, in
Rust, and this package only adapts it to Python.

    import ferrite

    with ferrite.connect("127.0.0.1:11911") as session:
        with session.create_pool("demo", size_bytes=64 << 20) as pool:
            pool.put("greeting", b"hello")
            assert pool.get("greeting") == b"hello"

Keys and values are ``bytes``, ``str`` (stored as UTF-8) or any object supporting the buffer
protocol (``bytearray``, ``memoryview``, numpy arrays), read in place without a copy;
``Pool.get_into`` writes a value straight into such a buffer. Every network wait releases the
GIL, and a ``Session`` may be shared by threads, whose calls are pipelined on its connections.
For asyncio, see ``ferrite.aio``.

Errors raise ``FerriteError`` subclasses: one per wire error code (``KeyNotFound``,
``PoolExists``, ``ValueTooLarge``, ``AuthenticationFailed``, ...; ``ErrorCode`` maps their names
to numbers) and ``ConnectionFailed`` / ``ConnectionClosed`` / ``UnexpectedResponse`` for failures
on the client's side.

Values up to ``session.limits.value_bytes_max`` (2 MiB on a default server) travel inline; longer
ones travel as direct transfers by themselves (``put`` sends a value past 2 MiB in pipelined
pieces; ``get`` and ``get_into`` read one too long to come inline the same way, ``get_into``
straight into its buffer), up to the server's ``limits.direct_value_bytes_max`` (1 GiB by
default). ``Pool.get_offset`` / ``get_into(..., offset=)`` read a slice of a value and
``Pool.put_offset`` writes bytes inside one.
"""

import enum as _enum

from . import _ferrite
from ._ferrite import (
    ERROR_CODES,
    BufferTooSmall,
    ConnectionClosed,
    ConnectionFailed,
    FerriteError,
    Limits,
    Pool,
    PoolAttributes,
    PoolInfo,
    Session,
    UnexpectedResponse,
    ValueAttributes,
    __version__,
    connect,
)

ErrorCode = _enum.IntEnum("ErrorCode", ERROR_CODES, module=__name__)
ErrorCode.__doc__ = """The wire error codes, by their stable names: ``ErrorCode.key_not_found == 13``.

Each has an exception class named by camel-casing the name (``KeyNotFound``), whose ``code`` is
the name and ``number`` the code."""


def _class_name(code: str) -> str:
    return "".join(word.capitalize() for word in code.split("_"))


# One exception class per wire error code, made by the extension from the protocol's own list.
_WIRE_ERRORS = {_class_name(code): getattr(_ferrite, _class_name(code)) for code in ERROR_CODES}
globals().update(_WIRE_ERRORS)


def error_class(code: "str | int") -> type:
    """The exception class of a wire error code, given by name ("key_not_found") or number."""
    name = ErrorCode(code).name if isinstance(code, int) else ErrorCode[code].name
    return _WIRE_ERRORS[_class_name(name)]


__all__ = [
    "BufferTooSmall",
    "ConnectionClosed",
    "ConnectionFailed",
    "ErrorCode",
    "FerriteError",
    "Limits",
    "Pool",
    "PoolAttributes",
    "PoolInfo",
    "Session",
    "UnexpectedResponse",
    "ValueAttributes",
    "__version__",
    "connect",
    "error_class",
    *sorted(_WIRE_ERRORS),
]
