"""UncommittedTail: the payload bytes of a leader's entries above its commit index.

The leader adds what it appends and drops what commits; propose() refuses new entries while the
sum is over Config.max_uncommitted_size (etcd's MaxUncommittedEntriesSize plays the same part).
Payload bytes only, so the leader's empty no-op costs nothing.
"""
from __future__ import annotations

from collections import deque


class UncommittedTail:
    __slots__ = ("size", "_sizes")

    def __init__(self) -> None:
        self.size = 0
        self._sizes: deque = deque()  # (index, payload bytes) of each uncommitted entry, in log order

    def reset(self) -> None:
        self.size = 0
        self._sizes.clear()

    def add(self, ents) -> None:
        sizes = self._sizes
        for e in ents:
            n = len(e.data)
            sizes.append((e.index, n))
            self.size += n

    def committed_to(self, index: int) -> None:
        sizes = self._sizes
        while sizes and sizes[0][0] <= index:
            self.size -= sizes.popleft()[1]
