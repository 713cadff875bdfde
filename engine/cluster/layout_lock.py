"""The lock every writer of D/cluster.json holds while it reads, changes and replaces the file.

`cluster up`, `cluster down` and the log stores that restart a process for HAKeeper all write
cluster.json; an flock on D/cluster.lock makes each read-change-replace whole, so no writer
loses another's pid. The lock dies with its holder (a SIGKILLed writer never blocks the rest).
"""
from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from typing import Iterator

from logtide.errors import ClusterLockTimeout

LOCK_FILE = "cluster.lock"
LOCK_TIMEOUT_S = 10.0


@contextmanager
def locked(d: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """Hold D/cluster.lock; ClusterLockTimeout when another holder keeps it past `timeout` s."""
    fd = os.open(os.path.join(d, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        end = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= end:
                    raise ClusterLockTimeout(f"{d}/{LOCK_FILE} is still held after {timeout:g} s") from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)   # closing the descriptor releases the lock
