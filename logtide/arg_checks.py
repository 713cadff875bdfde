"""Checks of API arguments (LSNs, seconds, counts, reader names) shared by the log service, its
clients, the logtail API, the replay nodes, the meta client and Spark: each refuses a bad value
with InvalidArgument naming it. (argparse options: logtide.arg_types.)"""
from __future__ import annotations

from logtide.errors import InvalidArgument

BYTES_LIKE = (bytes, bytearray, memoryview)


def lsn_arg(name: str, v: object) -> int:
    """`v` as an LSN (an int in [0, 2**64)), or InvalidArgument naming `name`."""
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 1 << 64:
        raise InvalidArgument(f"{name} must be an int in [0, 2**64), got {v!r}")
    return v


def reader_name(name: object) -> str:
    """A registered reader's name: a non-empty str, never another type turned into one (123 once
    unregistered reader "123"; None became "")."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"reader name must be a non-empty str, got {name!r}")
    return name


def seconds_arg(name: str, v: object, allow_none: bool = True, zero: str = "") -> float | None:
    """A timeout or deadline in seconds: a finite number > 0 (None: the default, when allowed; 0
    too when `zero` says what it means). NaN or a negative number would give a call no deadline,
    or end every call at once."""
    if v is None and allow_none:
        return None
    f = float("nan")
    if not isinstance(v, bool) and isinstance(v, (int, float)):
        try:
            f = float(v)
        except OverflowError:       # an int past the float range: not a finite number of seconds
            pass
    if not ((f >= 0) if zero else (f > 0)) or f == float("inf"):
        raise InvalidArgument(f"{name} must be a finite number of seconds > 0{f' (0: {zero})' if zero else ''}, "
                              f"got {v!r}")
    return f


def int_arg(name: str, v: object, least: int, below: int = 1 << 64) -> int:
    """An integer option in [least, below): never a bool, a float or a str read as one."""
    if isinstance(v, bool) or not isinstance(v, int) or not least <= v < below:
        raise InvalidArgument(f"{name} must be an int in [{least}, {below}), got {v!r}")
    return v
