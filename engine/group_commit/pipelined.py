"""Pipelined group commit: writers hand their records to the log at once and wait for durability
apart, so the next group forms (and is written) while the previous one is being synced.

For a log that queues a record without waiting for it (the embedded log service: `enqueue(payload)
-> lsn` and `wait_durable(lsn)` on its C commit queue). A writer calls `enqueue(payload, item)`
under its own ordering lock (the TN's commit lock, the primary's WAL insert lock): the log queues
the record and gives it the next LSN, so LSN order is the caller's order, and the item joins the
pending list in that order. Then, with no lock held, `wait(lsn)` sleeps in the log (a futex in C,
the GIL released) until the log's flusher has made the record durable, in a group with whatever
else was queued meanwhile. The first writer of a durable group to get the GIL back publishes, under
the publication lock, every pending item up to the durable LSN, in order (`publish(items, lsns)`);
the others find theirs published. A writer returns only once its item is durable and published.

The log wakes a durable group's writers by handoff (`set_handoff(True)`, see __init__.py). There is
no leader and no group boundary in Python: the log's flusher takes everything queued whenever it is
free, and no writer waits for another writer's wake-up to hand its record over.

A failed log fails every writer waiting or coming, and the committer stays failed: the caller's
in-memory state may be ahead of its log.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Generic, TypeVar

from logtide.errors import GroupCommitFailed, LogtideError

T = TypeVar("T")


class PipelinedCommitter(Generic[T]):
    """Group commit over a log with `enqueue(payload) -> lsn` and `wait_durable(lsn) -> durable lsn`.

    `publish(items, lsns)` makes durable items visible, in LSN order; it runs under `lock` (the
    caller's, when publishing must exclude its writers; else the committer's own). Tickets are LSNs.
    `on_fail(exc)` is called once when the committer fails (the caller stops taking writes).
    """

    pipelined = True

    def __init__(self, log, publish: Callable[[list[T], list[int]], None], lock=None,
                 on_fail: Callable[[BaseException], None] | None = None) -> None:
        self._on_fail = on_fail   # told once, when the committer fails
        self._log_enqueue = log.enqueue
        self._log_wait = log.wait_durable
        # woken at once, a durable group's writers would each wake only to queue for the GIL behind
        # the others (about one context switch more per write, and more CPU, in paired runs of the
        # TN and the primary)
        set_handoff = getattr(log, "set_handoff", None)
        if callable(set_handoff):
            set_handoff(True)
        self._publish = publish
        self._lock = lock if lock is not None else threading.Lock()
        # (lsn, item) queued and not yet published, in LSN order: appended under the caller's
        # ordering lock, popped under the publication lock (deque ends are atomic under the GIL)
        self._pending: deque = deque()
        self._queued = 0          # the LSN of the newest item queued
        self._published = 0       # the LSN of the newest item published
        self._failed: BaseException | None = None
        self.groups = 0           # publications (each one durable prefix at once)
        self.items = 0

    def enqueue(self, payload: bytes, item: T) -> int:
        """Under the caller's ordering lock: queue `payload` in the log and `item` for publication;
        its ticket (LSN) for `wait`."""
        if self._failed is not None:
            raise GroupCommitFailed(f"an earlier group failed ({self._failed!r})") from self._failed
        try:
            lsn = self._log_enqueue(payload)
        except BaseException as exc:
            # the caller changed its state for this item already: nothing may commit after it
            self.fail(exc)
            raise GroupCommitFailed(f"the log refused the record ({exc!r})") from exc
        self._pending.append((lsn, item))
        self._queued = lsn
        return lsn

    @property
    def queued(self) -> int:
        """The ticket of the newest item queued (0: none)."""
        return self._queued

    def pending(self) -> int:
        """Items queued, not yet published."""
        return len(self._pending)

    def wait(self, ticket: int) -> None:
        """Return once the item of `ticket` (and everything queued before it) is durable and published."""
        if self._published >= ticket:
            return
        if self._failed is not None:
            raise GroupCommitFailed(f"the group could not be flushed ({self._failed!r})") from self._failed
        try:
            durable = self._log_wait(ticket)
        except LogtideError as exc:
            self.fail(exc)
            raise GroupCommitFailed(f"the group could not be flushed ({exc!r})") from exc
        with self._lock:
            if self._published >= ticket:
                return
            if self._failed is not None:    # a publication failed: its items and all after it fail
                raise GroupCommitFailed(f"the group could not be published ({self._failed!r})") from self._failed
            pending = self._pending
            items, lsns = [], []
            while pending and pending[0][0] <= durable:
                lsn, item = pending.popleft()
                lsns.append(lsn)
                items.append(item)
            if not items:
                return            # a ticket of no item of ours (drain with nothing queued)
            try:
                self._publish(items, lsns)
            except BaseException as exc:
                self.fail(exc)
                raise
            self._published = lsns[-1]
            self.groups += 1
            self.items += len(items)

    def fail(self, exc: BaseException) -> None:
        """Fail the committer (the caller found its state and its log apart): every later enqueue
        and every wait not yet published raise GroupCommitFailed."""
        if self._failed is None:
            self._failed = exc
            if self._on_fail is not None:
                self._on_fail(exc)

    def drain(self) -> None:
        """Return once everything queued so far is durable and published."""
        self.wait(self._queued)

    @property
    def failed(self) -> BaseException | None:
        return self._failed
