"""Argument checks shared by the embedded log service and its gRPC client."""
from __future__ import annotations

from logtide.errors import InvalidArgument

BYTES_LIKE = (bytes, bytearray, memoryview)


def lsn_arg(name: str, v: object) -> int:
    """`v` as an LSN (an int in [0, 2**64)), or InvalidArgument naming `name`."""
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1 << 64:
        raise InvalidArgument(f"{name} must be an int in [0, 2**64), got {v!r}")
    return v
