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


QUEUED, DONE, LEAD, FAILED = 0, 1, 2, 3


class Waiter:
    """A blocked writer: its ticket and a lock it sleeps on until it is settled (one wake-up)."""
    __slots__ = ("ticket", "lock", "state", "successor")

    def __init__(self, ticket: int) -> None:
        self.ticket = ticket
        self.lock = threading.Lock()
        self.lock.acquire()
        self.state = QUEUED
        self.successor: Waiter | None = None   # the next writer of its group, woken by this one


class GroupCommitter(Generic[T]):
    """Queue items in order with `enqueue`; `wait(ticket)` returns once the item's group is flushed.

    A writer that finds a group in flight sleeps on its own lock; the leader settles exactly the
    writers its group made durable, and hands leadership to the first writer still waiting. With
    `chain=True` the settled writers are woken as a chain: the leader wakes the first, and each
    woken writer wakes the next as it resumes; waking them all at once has them all wake only to
    queue for the GIL (one context switch more each, and the next leader queued behind them). The
    TN uses the chain; the primary (cheaper writes) keeps waking its group at once.
    """

    def __init__(self, flush: Callable[[list[T]], None], *, timeout: float = WAIT_TIMEOUT_S,
                 chain: bool = False) -> None:
        self._flush = flush
        self.timeout = timeout
        self.chain = chain
        self._mu = threading.Lock()
        self._queue: list[T] = []
        self._waiters: list[Waiter] = []   # blocked writers, in ticket order
        self._queued = 0          # tickets handed out
        self._done = 0            # tickets flushed (a prefix: groups are flushed in order)
        self._leading = False
        self._failed: BaseException | None = None
        self.groups = 0           # groups flushed: items / groups = the group-commit factor
        self.items = 0

    def enqueue(self, item: T) -> int:
        """Queue `item` behind everything queued before; its ticket for `wait`."""
        with self._mu:
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
        with self._mu:
            return self._queued - self._done

    def wait(self, ticket: int) -> None:
        """Return once the item of `ticket` is flushed (leading a group when nobody does)."""
        with self._mu:
            if self._done >= ticket:
                return
            if self._failed is not None:
                raise GroupCommitFailed(f"the group could not be flushed ({self._failed!r})") from self._failed
            if self._leading:
                me = Waiter(ticket)
                self._waiters.append(me)
            else:
                self._leading = True
                me = None
        if me is not None:
            self._before_sleep()
            if not me.lock.acquire(timeout=self.timeout):
                with self._mu:
                    gone = me not in self._waiters
                    if not gone:
                        self._waiters.remove(me)
                if not gone:
                    raise GroupCommitTimeout(f"not flushed within {self.timeout} s (the group in flight is stuck)")
                me.lock.acquire()     # the leader settled us just now: take its word
            if me.state == DONE:
                if me.successor is not None:
                    me.successor.lock.release()
                return
            if me.state == FAILED:
                raise GroupCommitFailed(f"the group could not be flushed ({self._failed!r})") from self._failed
        self._lead()    # our item is queued, so the group we take includes it

    # hooks for a subclass (relay_commit.py): what runs before a writer sleeps, the flush call, what
    # runs after a flush (or its failure), and how a flushed group's writers are woken

    def _before_sleep(self) -> None:
        pass

    def _run_flush(self, batch: list[T]) -> None:
        self._flush(batch)

    def _after_flush(self) -> None:
        pass

    def _lead(self) -> None:
        with self._mu:
            batch, self._queue = self._queue, []
        try:
            self._run_flush(batch)
        except BaseException as exc:
            self._after_flush()
            with self._mu:
                self._failed = exc
                self._leading = False
                waiters, self._waiters = self._waiters, []
            for w in waiters:
                w.state = FAILED
                w.lock.release()
            raise
        self._after_flush()
        with self._mu:
            self._done += len(batch)
            self.groups += 1
            self.items += len(batch)
            k = 0
            while k < len(self._waiters) and self._waiters[k].ticket <= self._done:
                k += 1
            done, self._waiters = self._waiters[:k], self._waiters[k:]
            nxt = self._waiters.pop(0) if self._waiters else None
            if nxt is None:
                self._leading = False
        self._wake(done, nxt)

    def _wake(self, done: list[Waiter], nxt: Waiter | None) -> None:
        """Settle a flushed group's writers `done`, and hand leadership to `nxt` (None: nobody waits)."""
        for k, w in enumerate(done):
            w.state = DONE
            if self.chain and k + 1 < len(done):
                w.successor = done[k + 1]
        if nxt is not None:
            nxt.state = LEAD     # its item is queued: it flushes the next group
            nxt.lock.release()
        for w in done[:1] if self.chain else done:
            w.lock.release()

    def drain(self) -> None:
        """Return once everything queued so far is flushed."""
        self.wait(self._queued)

    @property
    def failed(self) -> BaseException | None:
        return self._failed
