"""The checks of the integers passed to the logtail API: a snapshot ts (CN reads, TN pull) and a
primary key (CN get). A value that is not an int is a TypeError; one out of range an
InvalidArgument (a ValueError) naming the argument."""
from __future__ import annotations

import numpy as np

from logtide.arg_checks import lsn_arg
from logtide.errors import InvalidArgument


def _integer(name: str, v: object) -> int:
    """`v` as a Python int: numpy integers too, bools not (True is not row or ts 1)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__} {v!r}")
    return int(v)


def ts_arg(name: str, v: object) -> int:
    """`v` as a ts, an int in [0, 2**64)."""
    return lsn_arg(name, _integer(name, v))    # ts come from the log service's TSO: u64, the range of its LSNs


def pk_arg(name: str, v: object) -> int:
    """`v` as a primary key, an int64 (the only primary key type, catalog.TableDef)."""
    v = _integer(name, v)
    if not -(1 << 63) <= v < 1 << 63:
        raise InvalidArgument(f"{name} must fit the int64 primary key, got {v!r}")
    return v
