"""CommitTso: the log's timestamp oracle as the TN calls it under its commit lock.

A commit takes its ts under the commit lock (ts order is queue order). With a remote log, that call
waits on a peer: if the log is unreachable it ends only at the log's deadline, and every commit
queued on the lock would then spend a whole deadline in turn. So a call that fails also fails, at
once and with its error, each commit that was waiting for the lock while it ran.
"""
from __future__ import annotations

import copy
from typing import Callable

from logtide.errors import LogtideError


class CommitTso:
    """`since = tso.failures` before taking the lock, `tso.take(since)` under it."""

    __slots__ = ("_tso", "failures", "_error")

    def __init__(self, tso: Callable[[int], int]) -> None:
        self._tso = tso
        self.failures = 0       # calls failed so far
        self._error: LogtideError | None = None

    def take(self, since: int) -> int:
        """One timestamp; raises the last failure if a call failed since `since`."""
        if since != self.failures:
            raise _again(self._error)
        try:
            return self._tso(1)
        except LogtideError as exc:
            self._error = exc
            self.failures += 1
            raise


def _again(exc: LogtideError) -> LogtideError:
    """A fresh instance of a shared failure (one exception object raised in many threads would
    share one traceback)."""
    try:
        again = copy.copy(exc)
    except Exception:  # noqa: BLE001 - an error type that cannot be rebuilt from its args
        return exc
    again.__cause__ = exc
    return again
