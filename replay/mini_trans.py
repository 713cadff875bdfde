"""Mini-transaction locks: make a multi-page WAL record atomic to readers of its pages.

The startup worker takes the locks of every page a record touches (in one fixed order, so two
multi-page holders cannot deadlock), adds the record's LSN to each page's LSN list, marks the
cached pages OUTDATED, and only then releases them. A backend replays a page under that page's
lock, so it waits while a record touching the page is half indexed: it can never replay page 0
to LSN N+1 while page 1's list still ends at N. Locks are striped by tag hash (bounded memory);
a backend holds one stripe at a time, so it never waits in a cycle.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterable, Iterator

import numpy as np

STRIPES = 1024
# a page's stripe: a weighted sum of its PageTag fields, the same in Python ints and int64 numpy
# (no overflow: 2**32 * sum(weights) < 2**63)
_W = (1, 17, 7919, 31, 104729)
_WA = np.array(_W, dtype=np.int64)


class MiniTransLocks:
    def __init__(self, stripes: int = STRIPES):
        self.stripes = stripes
        self.page_locks = [threading.Lock() for _ in range(stripes)]   # one per stripe (the C insert path takes them too)
        self.waits = 0  # times a page lock was found held (a reader met a mini-transaction)

    def _stripe(self, tag) -> int:
        spc, db, rel, fork, block = tag
        return (spc * _W[0] + db * _W[1] + rel * _W[2] + fork * _W[3] + block * _W[4]) % self.stripes

    def stripes_of(self, tags) -> list[int]:
        """The sorted distinct stripes of an iterable of tags or an (n, 5) tag array."""
        if isinstance(tags, np.ndarray):
            return np.unique((tags.astype(np.int64) @ _WA) % self.stripes).tolist()
        return sorted({self._stripe(t) for t in tags})

    def acquire_many(self, tags) -> list[int]:
        """Lock every page of a record, in stripe order; returns the token for release_many."""
        held = self.stripes_of(tags)
        for s in held:
            if not self.page_locks[s].acquire(blocking=False):
                self.waits += 1
                self.page_locks[s].acquire()
        return held

    def release_many(self, held: list[int]) -> None:
        for s in reversed(held):
            self.page_locks[s].release()

    @contextmanager
    def record(self, tags: Iterable) -> Iterator[None]:
        """The startup worker's mini-transaction over all pages of one record."""
        held = self.acquire_many(tags)
        try:
            yield
        finally:
            self.release_many(held)

    def page_lock(self, tag) -> "_PageLock":
        """page(tag) without a generator frame: a context manager over the page's stripe lock."""
        return _PageLock(self, self.page_locks[self._stripe(tag)])

    @contextmanager
    def page(self, tag) -> Iterator[None]:
        """A reader's lock on one page while it replays it."""
        lock = self.page_locks[self._stripe(tag)]
        if not lock.acquire(blocking=False):
            self.waits += 1
            lock.acquire()
        try:
            yield
        finally:
            lock.release()


class _PageLock:
    """One page's stripe lock held as a context manager (counts a wait as page() does)."""
    __slots__ = ("owner", "lock")

    def __init__(self, owner: MiniTransLocks, lock) -> None:
        self.owner = owner
        self.lock = lock

    def __enter__(self) -> None:
        if not self.lock.acquire(blocking=False):
            self.owner.waits += 1
            self.lock.acquire()

    def __exit__(self, *exc) -> None:
        self.lock.release()
