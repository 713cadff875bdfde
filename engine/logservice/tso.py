"""The timestamp oracle: hands out disjoint, increasing ranges of u64 timestamps.

It reserves a window ahead through the state machine (persisted) and serves from memory inside
it, so a restart resumes above everything it may have handed out.
"""
from __future__ import annotations

import threading
from typing import Callable

from logtide.errors import InvalidArgument

TSO_WINDOW = 1 << 16


class TSO:
    def __init__(self, limit: int, reserve: Callable[[int], None], window: int = TSO_WINDOW) -> None:
        self._next = max(1, limit)  # everything below the persisted limit may have been used
        self._limit = self._next
        self._reserve = reserve
        self._window = window
        self._lock = threading.Lock()

    def get(self, count: int) -> int:
        """The first of `count` timestamps now owned by the caller: [first, first + count)."""
        if not isinstance(count, int) or isinstance(count, bool) or count < 1 or count > 1 << 32:
            raise InvalidArgument(f"get_tso_timestamp(count): count must be an int in [1, 2**32], got {count!r}")
        with self._lock:
            first = self._next
            if first + count > self._limit:
                limit = first + count + self._window
                self._reserve(limit)  # durable before any timestamp of the window is handed out
                self._limit = limit
            self._next = first + count
            return first
