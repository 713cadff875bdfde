"""MetaQueue: the primary's in-memory queue of WAL meta, read by one WAL-meta sender per RO node.

Entries are (LSN, meta) in increasing LSN order. Each sender keeps its own position; the queue drops
entries every subscriber has read (and keeps at most `capacity` entries: a sender that falls further
behind rebuilds the meta it missed from the log).

The entries live in two lists from `_head` on; dropping moves `_head`, and the dropped prefix is
deleted in one slice once it is a quarter of the live entries (so dropped metas stay referenced at
most that long, and each live entry is moved a bounded number of times per entry dropped). A checkpoint trims about a second of inserts (tens
of thousands of entries) while holding the GIL, so dropping one entry at a time cost the writers
tens of milliseconds a second; reads are slices and bisections for the same reason.
"""
from __future__ import annotations

import threading
from bisect import bisect_left

COMPACT_MIN = 4096  # a dropped prefix shorter than this is left in place (deleting it costs a memmove)


class MetaQueue:
    def __init__(self, capacity: int = 200_000):
        self.capacity = capacity
        self._lsns: list[int] = []
        self._metas: list[bytes] = []
        self._head = 0          # entries before it are dropped
        self._cv = threading.Condition()
        self._closed = False

    def push(self, lsn: int, meta: bytes) -> None:
        with self._cv:
            self._lsns.append(lsn)
            self._metas.append(meta)
            self._bound()
            self._cv.notify_all()

    def push_many(self, lsns, metas) -> None:
        """Queue consecutive records at once (one wake-up of the senders per group commit)."""
        with self._cv:
            self._lsns.extend(lsns)
            self._metas.extend(metas)
            self._bound()
            self._cv.notify_all()

    def first_lsn(self) -> int:
        """The oldest LSN still queued (0 when empty)."""
        with self._cv:
            return self._lsns[self._head] if self._head < len(self._lsns) else 0

    def read(self, from_lsn: int, max_n: int, timeout: float) -> tuple[list[int], list[bytes]] | None:
        """Up to max_n entries with LSN >= from_lsn, waiting up to `timeout` for the first one.

        Returns None when from_lsn is older than the queue (the caller reads the log instead).
        """
        with self._cv:
            if not self._wait(from_lsn, timeout):
                return [], []
            h = self._head
            if self._lsns[h] > from_lsn:
                return None     # dropped: only the log has it
            i = bisect_left(self._lsns, from_lsn, h)
            j = min(len(self._lsns), i + max_n)
            return self._lsns[i:j], self._metas[i:j]

    def _wait(self, from_lsn: int, timeout: float) -> bool:
        if self._has(from_lsn):
            return True
        if self._closed:
            return False
        self._cv.wait(timeout)
        return self._has(from_lsn)

    def _has(self, lsn: int) -> bool:
        """An entry at or after `lsn` is queued."""
        return self._head < len(self._lsns) and self._lsns[-1] >= lsn

    def trim(self, below_lsn: int) -> None:
        """Drop entries below `below_lsn` (every subscriber has them)."""
        with self._cv:
            self._drop_to(bisect_left(self._lsns, below_lsn, self._head))

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def __len__(self) -> int:
        return len(self._lsns) - self._head

    def _bound(self) -> None:
        over = len(self._lsns) - self._head - self.capacity
        if over > 0:
            self._drop_to(self._head + over)

    def _drop_to(self, k: int) -> None:
        self._head = k
        if k >= COMPACT_MIN and 4 * k >= len(self._lsns) - k:
            del self._lsns[:k]
            del self._metas[:k]
            self._head = 0
