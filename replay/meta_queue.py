"""MetaQueue: the primary's in-memory queue of WAL meta, read by one WAL-meta sender per RO node.

Entries are (LSN, meta) in LSN order. Each sender keeps its own position; the queue drops entries
every subscriber has read (and keeps at most `capacity` entries: a sender that falls further behind
rebuilds the meta it missed from the log).
"""
from __future__ import annotations

import threading
from collections import deque


class MetaQueue:
    def __init__(self, capacity: int = 200_000):
        self.capacity = capacity
        self._lsns: deque[int] = deque()
        self._metas: deque[bytes] = deque()
        self._cv = threading.Condition()
        self._closed = False

    def push(self, lsn: int, meta: bytes) -> None:
        with self._cv:
            self._lsns.append(lsn)
            self._metas.append(meta)
            while len(self._lsns) > self.capacity:
                self._lsns.popleft()
                self._metas.popleft()
            self._cv.notify_all()

    def push_many(self, lsns, metas) -> None:
        """Queue consecutive records at once (one wake-up of the senders per group commit)."""
        with self._cv:
            self._lsns.extend(lsns)
            self._metas.extend(metas)
            while len(self._lsns) > self.capacity:
                self._lsns.popleft()
                self._metas.popleft()
            self._cv.notify_all()

    def first_lsn(self) -> int:
        """The oldest LSN still queued (0 when empty)."""
        with self._cv:
            return self._lsns[0] if self._lsns else 0

    def read(self, from_lsn: int, max_n: int, timeout: float) -> tuple[list[int], list[bytes]] | None:
        """Up to max_n entries with LSN >= from_lsn, waiting up to `timeout` for the first one.

        Returns None when from_lsn is older than the queue (the caller reads the log instead).
        """
        with self._cv:
            if not self._wait(from_lsn, timeout):
                return [], []
            if self._lsns[0] > from_lsn:
                return None
            i = from_lsn - self._lsns[0]  # LSNs are dense in the queue
            if i < 0 or i >= len(self._lsns) or self._lsns[i] != from_lsn:
                i = next((k for k, l in enumerate(self._lsns) if l >= from_lsn), len(self._lsns))
            j = min(len(self._lsns), i + max_n)
            return [self._lsns[k] for k in range(i, j)], [self._metas[k] for k in range(i, j)]

    def _wait(self, from_lsn: int, timeout: float) -> bool:
        if self._lsns and self._lsns[-1] >= from_lsn:
            return True
        if self._closed:
            return False
        self._cv.wait(timeout)
        return bool(self._lsns) and self._lsns[-1] >= from_lsn

    def trim(self, below_lsn: int) -> None:
        """Drop entries below `below_lsn` (every subscriber has them)."""
        with self._cv:
            while self._lsns and self._lsns[0] < below_lsn:
                self._lsns.popleft()
                self._metas.popleft()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def __len__(self) -> int:
        return len(self._lsns)
