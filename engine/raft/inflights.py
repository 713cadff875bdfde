"""Inflights: the flow-control window of a follower in replicate state.

Each APP sent optimistically records its last index; an APP_RESP frees every entry up to the
acknowledged index. When `size` messages are in flight the leader stops sending to that follower.
"""
from __future__ import annotations

from collections import deque


class Inflights:
    __slots__ = ("size", "_q")

    def __init__(self, size: int) -> None:
        self.size = size
        self._q: deque[int] = deque()

    def add(self, last_index: int) -> None:
        self._q.append(last_index)

    def free_le(self, index: int) -> None:
        """Free every message whose last index is <= index (they were acknowledged)."""
        q = self._q
        while q and q[0] <= index:
            q.popleft()

    def free_first_one(self) -> None:
        if self._q:
            self._q.popleft()

    def full(self) -> bool:
        return len(self._q) >= self.size

    def count(self) -> int:
        return len(self._q)

    def reset(self) -> None:
        self._q.clear()
