"""The check of a snapshot ts passed to the logtail API (CN reads, TN pull)."""
from __future__ import annotations

import numpy as np

from logtide.arg_checks import lsn_arg


def ts_arg(name: str, v: object) -> int:
    """`v` as a ts, a Python int in [0, 2**64): TypeError unless it is an int (numpy integers too,
    bools not); InvalidArgument (a ValueError) naming `name` when it is out of range."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(v).__name__} {v!r}")
    return lsn_arg(name, int(v))    # ts come from the log service's TSO: u64, the range of its LSNs
