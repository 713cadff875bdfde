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

The TN and the primary use it on a log that cannot queue a record without waiting for it (a remote
or replicated log); on the embedded log they use pipelined_commit.py.
"""
from __future__ import annotations

from typing import Callable, TypeVar

from logtide.engine.group_commit import DONE, LEAD, WAIT_TIMEOUT_S, GroupCommitter, Waiter

T = TypeVar("T")


class RelayCommitter(GroupCommitter[T]):
    """Queue items in order with `enqueue`; `wait(ticket)` returns once the item's group is flushed.

    `flush(group, release)` gets the items of one group in queue order and must call `release()`
    (no arguments) right before the call that waits for the disk. Queueing, leading and failing
    are GroupCommitter's; what differs is who wakes a flushed group's writers, and when."""

    def __init__(self, flush: Callable[[list[T], Callable[[], None]], None], *,
                 timeout: float = WAIT_TIMEOUT_S) -> None:
        super().__init__(flush, timeout=timeout, chain=True)
        # the first writer of the last flushed group while it is still asleep (at most one): taken
        # with list.pop, atomic under the GIL, by whoever releases it first
        self._settled: list[Waiter] = []

    def _release(self) -> None:
        """Wake the settled group's first writer, unless someone did (it wakes the rest as a chain)."""
        try:
            w = self._settled.pop()
        except IndexError:
            return
        w.lock.release()

    # about to sleep (the GIL goes): the settled group may run now; after a flush, or its failure,
    # the previous group (acknowledged already) is released if nobody did
    _before_sleep = _after_flush = _release

    def _run_flush(self, batch: list[T]) -> None:
        self._flush(batch, self._release)

    def _wake(self, done: list[Waiter], nxt: Waiter | None) -> None:
        for k in range(len(done) - 1):
            done[k].successor = done[k + 1]
        for w in done:
            w.state = DONE
        if nxt is not None:
            if done:
                self._settled.append(done[0])   # woken before the next append or the next sleep
            nxt.state = LEAD     # its item is queued: it flushes the next group
            nxt.lock.release()
        elif done:
            done[0].lock.release()
