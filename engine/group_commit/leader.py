"""Leader group commit: one writer at a time appends every queued item with one log call.

For a log that cannot queue a record without waiting for it (a remote or replicated log). Writers
queue items in the order their caller chose (under the caller's own ordering lock: the TN's commit
lock, the primary's WAL insert lock) and wait. Whoever finds no group in flight leads: it takes
every queued item and calls `write_group(group, handoff)` with no lock held; `write_group` appends
the group with one log call (one fsync) and publishes it. Groups never overlap, so appends and
publications happen in queue order, and a writer returns only once its group's write returned.

A flushed group's writers are woken by handoff (see __init__.py): the leader wakes the next leader
only; the group's first writer is woken just before the GIL is next given up (by the next leader
right before its append, when it calls `handoff()`, or by any writer about to sleep), and each
woken writer wakes the next one of its group as it resumes. Woken all at once, they would compete
for the GIL with the next leader, whose append then starts only after some of them ran. With no
next leader the group's writers are woken at once by their leader.

A failed write fails its group and everything queued after it (their order depends on it), and
the committer stays failed: the caller's in-memory state may be ahead of its log. The writers of
the group before it were acknowledged already and are woken all the same.
"""
from __future__ import annotations

import threading
from typing import Callable, Generic, TypeVar

from logtide.errors import GroupCommitFailed, GroupCommitTimeout

T = TypeVar("T")

# A group is one append + fsync: milliseconds. A minute means the disk or the log service is stuck.
WAIT_TIMEOUT_S = 60.0

QUEUED, DONE, LEAD, FAILED = 0, 1, 2, 3


class _Waiter:
    """A blocked writer: its ticket and a lock it sleeps on until it is settled (one wake-up)."""
    __slots__ = ("ticket", "lock", "state", "next")

    def __init__(self, ticket: int) -> None:
        self.ticket = ticket
        self.lock = threading.Lock()
        self.lock.acquire()
        self.state = QUEUED
        self.next: _Waiter | None = None   # the next writer of its group: this one wakes it


class LeaderCommitter(Generic[T]):
    """Queue items in order with `enqueue`; `wait(ticket)` returns once the item's group is written.

    `write_group(group, handoff)` gets the items of one group in queue order and must call
    `handoff()` (no arguments) right before the call that waits for the disk."""

    pipelined = False

    def __init__(self, write_group: Callable[[list[T], Callable[[], None]], None], *,
                 timeout: float = WAIT_TIMEOUT_S) -> None:
        self._write_group = write_group
        self.timeout = timeout
        self._mu = threading.Lock()
        self._queue: list[T] = []
        self._waiters: list[_Waiter] = []   # blocked writers, in ticket order
        self._queued = 0          # tickets handed out
        self._done = 0            # tickets written (a prefix: groups are written in order)
        self._leading = False
        self._failed: BaseException | None = None
        # the first writer of the last written group while it is still asleep (at most one): taken
        # with list.pop, atomic under the GIL, by whoever hands off first
        self._settled: list[_Waiter] = []
        self.groups = 0           # groups written: items / groups = the group-commit factor
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
        """Items queued or in flight, not yet written."""
        with self._mu:
            return self._queued - self._done

    def wait(self, ticket: int) -> None:
        """Return once the item of `ticket` is written (leading a group when nobody does)."""
        with self._mu:
            if self._done >= ticket:
                return
            if self._failed is not None:
                raise GroupCommitFailed(f"the group could not be flushed ({self._failed!r})") from self._failed
            if self._leading:
                me = _Waiter(ticket)
                self._waiters.append(me)
            else:
                self._leading = True
                me = None
        if me is not None:
            self._handoff()      # about to sleep (the GIL goes): the settled group may run now
            if not me.lock.acquire(timeout=self.timeout):
                with self._mu:
                    gone = me not in self._waiters
                    if not gone:
                        self._waiters.remove(me)
                if not gone:
                    raise GroupCommitTimeout(f"not flushed within {self.timeout} s (the group in flight is stuck)")
                me.lock.acquire()     # the leader settled us just now: take its word
            if me.state == DONE:
                if me.next is not None:
                    me.next.lock.release()
                return
            if me.state == FAILED:
                raise GroupCommitFailed(f"the group could not be flushed ({self._failed!r})") from self._failed
        self._lead()    # our item is queued, so the group we take includes it

    def _handoff(self) -> None:
        """Wake the settled group's first writer, unless someone did (it wakes the rest in turn)."""
        try:
            w = self._settled.pop()
        except IndexError:
            return
        w.lock.release()

    def _lead(self) -> None:
        with self._mu:
            batch, self._queue = self._queue, []
        try:
            self._write_group(batch, self._handoff)
        except BaseException as exc:
            self._handoff()     # the group before was acknowledged: its writers still wake
            with self._mu:
                self._failed = exc
                self._leading = False
                waiters, self._waiters = self._waiters, []
            for w in waiters:
                w.state = FAILED
                w.lock.release()
            raise
        self._handoff()
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
        for k in range(len(done) - 1):
            done[k].next = done[k + 1]
        for w in done:
            w.state = DONE
        if nxt is not None:
            if done:
                self._settled.append(done[0])   # woken before the next append or the next sleep
            nxt.state = LEAD     # its item is queued: it writes the next group
            nxt.lock.release()
        elif done:
            done[0].lock.release()

    def drain(self) -> None:
        """Return once everything queued so far is written."""
        self.wait(self._queued)

    @property
    def failed(self) -> BaseException | None:
        return self._failed
