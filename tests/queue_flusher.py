"""Playing a CommitQueue's flusher in a test, through the flusher's own loop (`run`).

With the pre-allocation mark at 0, `run` hands every group it writes back to Python unindexed and
unpublished, as it hands the log writer a group that reaches the mark; the test then publishes
what it likes, when it likes (`q.publish`).
"""
from __future__ import annotations

import numpy as np


def take_group(q, fd: int, base: int, timeout: float, sync: bool = False):
    """Take what is queued and write it to fd at offset `base` (fdatasync'ed when sync): (first LSN,
    last LSN, absolute frame starts, bytes written), or CLOSED, KICKED, TIMEOUT."""
    q.configure(sync, False, 0.0)
    q.mark = 0
    q.bind_index(fd, np.zeros(1, dtype=np.uint64), np.zeros(1, dtype=np.uint64), base, 1 << 62)
    return q.run(timeout)
