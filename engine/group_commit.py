"""Ordered group commit: many writers, one log append (and one fsync) per group, in queue order.

A writer queues its item while it holds its own ordering lock (the TN's commit lock, the primary's
WAL insert lock), so queue order is the order the caller chose (commit ts, LSN). It then drops that
lock and calls `wait`. Whoever finds no group in flight leads: it takes every queued item and hands
them to `flush` with no lock held, while later writers queue behind it for the next group. `flush`
appends the group in one call (one fsync) and publishes it; once it returns, the group's writers
are acknowledged. Groups never overlap, so appends and publications happen in queue order.

A failed flush fails its group and everything queued after it (their order depends on it), and
the committer stays failed: the caller's in-memory state may be ahead of its log.
"""
from __future__ import annotations

import threading
from typing import Callable, Generic, TypeVar

from logtide.errors import GroupCommitFailed, GroupCommitTimeout

T = TypeVar("T")

# A group is one append + fsync: milliseconds. A minute means the disk or the log service is stuck.
WAIT_TIMEOUT_S = 60.0


class GroupCommitter(Generic[T]):
    """Queue items in order with `enqueue`; `wait(ticket)` returns once the item's group is flushed."""

    def __init__(self, flush: Callable[[list[T]], None], *, timeout: float = WAIT_TIMEOUT_S) -> None:
        self._flush = flush
        self.timeout = timeout
        self._cv = threading.Condition(threading.Lock())
        self._queue: list[T] = []
        self._queued = 0          # tickets handed out
        self._done = 0            # tickets flushed (a prefix: groups are flushed in order)
        self._leading = False
        self._failed: BaseException | None = None
        self.groups = 0           # groups flushed: items / groups = the group-commit factor
        self.items = 0

    def enqueue(self, item: T) -> int:
        """Queue `item` behind everything queued before; its ticket for `wait`."""
        with self._cv:
            if self._failed is not None:
                raise GroupCommitFailed(f"an earlier group failed ({self._failed!r})") from self._failed
            self._queue.append(item)
            self._queued += 1
            return self._queued

    @property
    def queued(self) -> int:
        """Tickets handed out so far (the ticket of the newest item)."""
        return self._queued

    def pending(self) -> int:
        """Items queued or in flight, not yet flushed."""
        with self._cv:
            return self._queued - self._done

    def wait(self, ticket: int) -> None:
        """Return once the item of `ticket` is flushed (leading groups meanwhile when nobody does)."""
        with self._cv:
            while True:
                if self._done >= ticket:
                    return
                if self._failed is not None:
                    raise GroupCommitFailed(f"the group could not be flushed ({self._failed!r})") from self._failed
                if not self._leading:
                    self._leading = True
                    batch, self._queue = self._queue, []
                    break
                if not self._cv.wait(self.timeout):
                    raise GroupCommitTimeout(f"not flushed within {self.timeout} s (the group in flight is stuck)")
        try:
            self._flush(batch)
        except BaseException as exc:
            with self._cv:
                self._failed = exc
                self._leading = False
                self._cv.notify_all()
            raise
        with self._cv:
            self._done += len(batch)
            self.groups += 1
            self.items += len(batch)
            self._leading = False
            self._cv.notify_all()   # the group's writers, and the next leader

    def drain(self) -> None:
        """Return once everything queued so far is flushed."""
        with self._cv:
            ticket = self._queued
        self.wait(ticket)

    @property
    def failed(self) -> BaseException | None:
        return self._failed
