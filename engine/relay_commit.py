"""Relay group commit: ordered group commit whose acknowledged writers wake behind the next append.

Writers queue items in the order their caller chose (under the caller's own ordering lock: the TN's
commit lock, the primary's WAL insert lock) and wait. Whoever finds no group in flight leads: it
takes every queued item and calls `flush(group, release)` with no lock held; `flush` appends the
group with one log call (one fsync) and publishes it. Groups never overlap, so appends and
publications happen in queue order, and a writer returns only once its group's flush returned.

What differs from a plain group committer is who wakes the writers of a flushed group, and when.
Under the GIL, each woken writer takes the GIL to run its next transaction; woken as the group is
settled they all compete with the next group's leader, whose append (the fsync the next group waits
for) then starts only after some of them ran. Here the leader of a flushed group wakes the next
leader only. The first writer of the flushed group is woken just before the GIL is next given up:
by the next leader, once its records are encoded, right before its append (`release()`), or by any
writer about to sleep in `wait`, whichever comes first; each woken writer wakes the next one of its
group as it resumes (a chain: one wake-up per writer, each when the one before it has the GIL).
With no next leader the group's writers are woken at once by their leader.

A failed flush fails its group and everything queued after it, and the committer stays failed:
the caller's in-memory state may be ahead of its log. The writers of the group before it had
been acknowledged already and are woken all the same.
"""
from __future__ import annotations

import threading
from typing import Callable, Generic, TypeVar

from logtide.errors import GroupCommitFailed, GroupCommitTimeout

T = TypeVar("T")

# A group is one append + fsync: milliseconds. A minute means the disk or the log service is stuck.
WAIT_TIMEOUT_S = 60.0

_QUEUED, _DONE, _LEAD, _FAILED = 0, 1, 2, 3


class _Waiter:
    """A blocked writer: its ticket and a lock it sleeps on until it is settled (one wake-up)."""
    __slots__ = ("ticket", "lock", "state", "successor")

    def __init__(self, ticket: int) -> None:
        self.ticket = ticket
        self.lock = threading.Lock()
        self.lock.acquire()
        self.state = _QUEUED
        self.successor: _Waiter | None = None   # the next writer of its group, woken by this one


class RelayCommitter(Generic[T]):
    """Queue items in order with `enqueue`; `wait(ticket)` returns once the item's group is flushed.

    `flush(group, release)` gets the items of one group in queue order and must call `release()`
    (no arguments) right before the call that waits for the disk."""

    def __init__(self, flush: Callable[[list[T], Callable[[], None]], None], *,
                 timeout: float = WAIT_TIMEOUT_S) -> None:
        self._flush = flush
        self.timeout = timeout
        self._mu = threading.Lock()
        self._queue: list[T] = []
        self._waiters: list[_Waiter] = []   # blocked writers, in ticket order
        self._queued = 0          # tickets handed out
        self._done = 0            # tickets flushed (a prefix: groups are flushed in order)
        self._leading = False
        # the first writer of the last flushed group while it is still asleep (at most one): taken
        # with list.pop, atomic under the GIL, by whoever releases it first
        self._settled: list[_Waiter] = []
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
                me = _Waiter(ticket)
                self._waiters.append(me)
            else:
                self._leading = True
                me = None
        if me is not None:
            self._release()    # about to sleep (the GIL goes): the settled group may run now
            if not me.lock.acquire(timeout=self.timeout):
                with self._mu:
                    gone = me not in self._waiters
                    if not gone:
                        self._waiters.remove(me)
                if not gone:
                    raise GroupCommitTimeout(f"not flushed within {self.timeout} s (the group in flight is stuck)")
                me.lock.acquire()     # the leader settled us just now: take its word
            if me.state == _DONE:
                if me.successor is not None:
                    me.successor.lock.release()
                return
            if me.state == _FAILED:
                raise GroupCommitFailed(f"the group could not be flushed ({self._failed!r})") from self._failed
        self._lead()    # our item is queued, so the group we take includes it

    def _release(self) -> None:
        """Wake the settled group's first writer, unless someone did (it wakes the rest as a chain)."""
        try:
            w = self._settled.pop()
        except IndexError:
            return
        w.lock.release()

    def _lead(self) -> None:
        with self._mu:
            batch, self._queue = self._queue, []
        release = self._release
        try:
            self._flush(batch, release)
        except BaseException as exc:
            release()     # the previous group was acknowledged: its writers return
            with self._mu:
                self._failed = exc
                self._leading = False
                waiters, self._waiters = self._waiters, []
            for w in waiters:
                w.state = _FAILED
                w.lock.release()
            raise
        release()
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
            done[k].successor = done[k + 1]
        for w in done:
            w.state = _DONE
        if nxt is not None:
            if done:
                self._settled.append(done[0])   # woken before the next append or the next sleep
            nxt.state = _LEAD     # its item is queued: it flushes the next group
            nxt.lock.release()
        elif done:
            done[0].lock.release()

    def drain(self) -> None:
        """Return once everything queued so far is flushed."""
        self.wait(self._queued)

    @property
    def failed(self) -> BaseException | None:
        return self._failed
