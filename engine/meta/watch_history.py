"""WatchHistory: a replica's recent changes in apply order, so a watch can resume after a cursor.

A change's cursor is (index, pos): the log index of the entry that made it and its place among
that entry's changes. Every replica applies the same entries in the same order, so a cursor names
the same change on every replica, and a watcher whose replica died resumes on another one after
the last cursor it saw, with no gap and no duplicate. Deletes and expiries take no seq, so the
cursor is the log position, not the seq (each event also carries its record's seq).
"""
from __future__ import annotations

import collections
from typing import Iterable, List, Optional, Tuple

from logtide.engine.meta.seqv import SeqV
from logtide.errors import MetaWatchCompacted

HISTORY_EVENTS = 100_000   # changes kept per replica (whole entries are dropped from the oldest end)
HISTORY_BYTES = 64 << 20   # and at most about this many bytes of keys and values
Cursor = Tuple[int, int]
Change = Tuple[str, Optional[SeqV], Optional[SeqV]]


class WatchHistory:
    """The changes of the entries after `floor` (a log index), oldest first."""

    def __init__(self, floor_index: int = 0, max_events: int = HISTORY_EVENTS, max_bytes: int = HISTORY_BYTES) -> None:
        self._events: "collections.deque[tuple]" = collections.deque()   # (index, pos, key, prev, current)
        self._max, self._max_bytes = max_events, max_bytes
        self._bytes = 0
        self.floor = floor_index   # every change of the entries after this index is kept

    def add(self, index: int, changes: Iterable[Change]) -> None:
        for pos, (key, prev, cur) in enumerate(changes):
            self._events.append((index, pos, key, prev, cur))
            self._bytes += _size(key, prev, cur)
        while len(self._events) > self._max or self._bytes > self._max_bytes:
            first = self._events[0][0]
            while self._events and self._events[0][0] == first:   # never half an entry
                _i, _p, key, prev, cur = self._events.popleft()
                self._bytes -= _size(key, prev, cur)
            self.floor = first

    def reset(self, floor_index: int) -> None:
        """The state was replaced (a snapshot installed): nothing before `floor_index` is known."""
        self._events.clear()
        self._bytes = 0
        self.floor = floor_index

    def after(self, cursor: Cursor) -> List[tuple]:
        """Every kept change after `cursor`; MetaWatchCompacted when some may be missing."""
        # the changes of entries up to the floor are gone (all, or the rest of the floor entry)
        if cursor[0] < self.floor or (cursor[0] == self.floor > 0):
            raise MetaWatchCompacted(f"changes after entry {cursor[0]} position {cursor[1]} are no longer kept "
                                     f"here (kept after entry {self.floor}); re-read the range")
        return [e for e in self._events if (e[0], e[1]) > tuple(cursor)]


def _size(key: str, prev: Optional[SeqV], cur: Optional[SeqV]) -> int:
    return len(key) + (len(prev.data) if prev is not None else 0) + (len(cur.data) if cur is not None else 0) + 64
