# cython: language_level=3
"""TsoWindow: the timestamp oracle's counter (engine/logservice/tso.py is its Python shell).

It hands out disjoint, increasing ranges of u64 timestamps from memory, inside a window reserved
ahead through `reserve(limit)` (persisted before any timestamp of the window is handed out), so a
restart resumes above everything it may have handed out. Inside the window a range is taken with
the GIL held and no lock: nothing in between lets another thread in. Reserving takes a lock (the
reserve call is Python and may let other threads run; their ranges stay below the old limit).
"""
from libc.stdint cimport uint64_t

import threading

from logtide.errors import InvalidArgument, LogServiceClosed

DEF MAX_COUNT = 1 << 32


cdef class TsoWindow:
    """Timestamps from `limit` (at least 1) on, reserving `window` more ahead at a time."""

    def __init__(self, limit: int, reserve, window: int) -> None:
        self.next_ts = max(1, limit)   # everything below the persisted limit may have been used
        self.limit = self.next_ts
        self.reserve = reserve
        self.window = window
        self.lock = threading.Lock()

    def get(self, count) -> int:
        """The first of `count` timestamps now owned by the caller: [first, first + count)."""
        if self.closed:
            raise LogServiceClosed("the log service is closed")
        if not isinstance(count, int) or isinstance(count, bool) or count < 1 or count > MAX_COUNT:
            raise InvalidArgument(f"get_tso_timestamp(count): count must be an int in [1, 2**32], got {count!r}")
        return self.take(count)

    cdef uint64_t take(self, uint64_t count) except 0:
        """get(count) for a count known to be in [1, 2**32]."""
        cdef uint64_t first = self.next_ts
        if not self.closed and first + count <= self.limit:
            self.next_ts = first + count
            return first
        return self._reserve_and_take(count)

    cdef uint64_t _reserve_and_take(self, uint64_t count) except 0:
        cdef uint64_t first, limit
        with self.lock:
            while True:
                if self.closed:
                    raise LogServiceClosed("the log service is closed")
                first = self.next_ts
                if first + count <= self.limit:
                    self.next_ts = first + count
                    return first
                limit = first + count + self.window
                self.reserve(limit)   # durable before any timestamp of the window is handed out
                if limit > self.limit:
                    self.limit = limit

    def close(self) -> None:
        """Hand out nothing more (LogServiceClosed)."""
        self.closed = True
