"""Leader group commit: one writer at a time appends every queued item with one log call.

For a log that cannot queue a record without waiting for it (a remote or replicated log). Writers
queue items in the order their caller chose (under the caller's own ordering lock: the TN's commit
lock, the primary's WAL insert lock, the meta-service's proposal lock) and wait. Whoever finds no
group in flight leads: it takes every queued item and calls `write_group(group)` with no lock held;
`write_group` appends the group with one log call (one fsync) and publishes it. Groups never
overlap, so appends and publications happen in queue order, and a writer returns only once its
group's write returned.

Writers sleep in C (_ext/group_wake.pyx), on the word of their group: the group in flight, or the
next one. The first writer to wait for the next group sleeps on a word of its own instead: it is
named the next leader when the group in flight is written, and woken alone. A written group's
writers are woken with one wake, issued with the GIL released, and take the GIL through the gate
of _ext/gil_gate.pxd: no writer wakes another.

A failed write fails its group and everything queued after it (their order depends on it), and
the committer stays failed: the caller's in-memory state may be ahead of its log. The writers of
the group before it were acknowledged already and are woken all the same.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Generic, TypeVar

from logtide._ext.group_wake import LEAD, LEAD_WORD, TIMED_OUT, WRITTEN, GroupWake
from logtide.errors import GroupCommitFailed, GroupCommitTimeout

T = TypeVar("T")

# A group is one append + fsync: milliseconds. A minute means the disk or the log service is stuck.
WAIT_TIMEOUT_S = 60.0


class LeaderCommitter(Generic[T]):
    """Queue items in order with `enqueue`; `wait(ticket)` returns once the item's group is written.

    `write_group(group)` gets the items of one group in queue order."""

    pipelined = False

    def __init__(self, write_group: Callable[[list[T]], None], *, timeout: float = WAIT_TIMEOUT_S) -> None:
        self._write_group = write_group
        self.timeout = timeout
        self._mu = threading.Lock()
        self._queue: list[T] = []
        self._queued = 0          # tickets handed out
        self._done = 0            # tickets written (a prefix: groups are written in order)
        self._taken = 0           # the last ticket of the group in flight (or written last)
        self._group = 0           # groups taken: the group in flight sleeps on word _group % 2
        self._leading = False
        self._candidate = 0       # the writer asleep on the next leader's word (0: none)
        self._failed: BaseException | None = None
        self._wake = GroupWake()
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
        wake = self._wake
        end = time.monotonic() + self.timeout
        while True:
            with self._mu:
                if self._done >= ticket:
                    return
                if self._failed is not None:
                    raise GroupCommitFailed(f"the group could not be flushed ({self._failed!r})") from self._failed
                if wake.lead == ticket:
                    break                       # named the next leader: _leading stays set for us
                if not self._leading:
                    self._leading = True
                    break
                if ticket <= self._taken:
                    k = self._group % 2         # in the group in flight
                elif self._candidate in (0, ticket):
                    self._candidate, k = ticket, LEAD_WORD
                else:
                    k = (self._group + 1) % 2   # in the next group, led by the candidate
                seen = wake.word(k)
            r = wake.wait(k, seen, ticket, end - time.monotonic())
            if r == WRITTEN:
                return
            if r == LEAD:
                break
            if r == TIMED_OUT:
                with self._mu:
                    if self._done >= ticket:
                        return
                    if wake.lead != ticket and self._failed is None:
                        if self._candidate == ticket:
                            self._candidate = 0    # the leader then wakes the next group to look again
                        raise GroupCommitTimeout(f"not flushed within {self.timeout} s (the group in flight is stuck)")
            # FAILED, LOOK_AGAIN, or named leader / failed as the wait timed out: look again under the lock
        self._lead()    # our item is queued, so the group we take includes it

    def _lead(self) -> None:
        with self._mu:
            batch, self._queue = self._queue, []
            self._taken = self._done + len(batch)
            self._group += 1
            k = self._group % 2
        try:
            self._write_group(batch)
        except BaseException as exc:
            with self._mu:
                self._failed = exc
                self._leading = False
                self._candidate = 0
            self._wake.fail()
            raise
        with self._mu:
            self._done += len(batch)
            self.groups += 1
            self.items += len(batch)
            self._wake.set_done(self._done)
            # a candidate that came to wait before this group was taken (while the last leader
            # handed over) has its item in it: it is written, not named to lead
            cand, self._candidate = self._candidate, 0
            lead = cand > self._done
            if lead:
                self._wake.grant(cand)          # it leads next: _leading stays set
            else:
                self._leading = False
            # queued items whose writers sleep with nobody named to lead them (their candidate
            # timed out, or was written): wake their group to look again
            nudge = not lead and bool(self._queue)
        self._wake.wake(k, bool(cand), nudge)

    def drain(self) -> None:
        """Return once everything queued so far is written."""
        self.wait(self._queued)

    @property
    def failed(self) -> BaseException | None:
        return self._failed
