"""LoopDurability: tells code on an asyncio event loop when the log is durable up to an LSN, with no
thread between the log's flusher and the loop, and lets the loop commit its own batches.

The log's commit queue writes an eventfd once it has published the oldest LSN registered
(`CommitQueue.notify_durable`); the loop reads it, runs every callback whose LSN is covered, in
registration order, and arms the eventfd for the next. A framed server's batch of appends then
costs one wake-up of the loop, where DurabilityWatcher costs two of its thread and one of the loop.

Batches the loop queued without waking the flusher (`commit_soon`) are written by the loop itself,
after it has read every connection that was ready (one group for all of them), when the log is
idle (`CommitQueue.commit_here`); the flusher takes them when it is not. A batch then costs no
thread wake-up at all on the server: waking the flusher and being woken back cost more on this
VM than the write and fdatasync the loop waits for meanwhile.
"""
from __future__ import annotations

import asyncio
import logging
import os
from collections import deque

from logtide.engine.logservice.durability_callbacks import Callback, answer, pop_settled
from logtide.errors import LogServiceFailed

log = logging.getLogger(__name__)


class LoopDurability:
    """`watch(lsn, callback)` on `loop`'s thread only: callback(None) on the loop once every record
    up to lsn is published, callback(exc) if the log fails first."""

    def __init__(self, queue, loop: asyncio.AbstractEventLoop) -> None:
        self._q = queue
        self.loop = loop
        self._pending: deque = deque()       # (lsn, callback), in registration order
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._closed = False
        self._commit_due = False
        loop.add_reader(self._fd, self._ready)

    def commit_soon(self) -> None:
        """On the loop's thread, after queueing with the flusher left asleep: commit what is
        queued once the loop has run what is ready now."""
        if not self._commit_due:
            self._commit_due = True
            self.loop.call_soon(self._commit)

    def _commit(self) -> None:
        self._commit_due = False
        try:
            written = self._q.commit_here()
        except OSError as exc:               # the queue failed: its waiters and notices are told
            log.error("the log's write on the event loop failed: %s", exc)
            written = True
        if written and self._pending:
            self._ready()

    def watch(self, lsn: int, callback: Callback) -> None:
        if self._closed:
            raise RuntimeError("the loop's durability notices are closed")
        self._pending.append((lsn, callback))
        if len(self._pending) == 1 and self._arm():
            self._ready()

    def _arm(self) -> bool:
        """Arm the eventfd for the oldest registration: True when it is already due."""
        return not self._closed and self._q.notify_durable(self._pending[0][0], self._fd)

    def _ready(self) -> None:
        try:
            os.eventfd_read(self._fd)
        except BlockingIOError:
            pass
        pending = self._pending
        while pending:
            # read after the drain: a publish from here on writes the eventfd again (arming below
            # says so at once when it has already happened)
            published, failure = self._q.published_lsn, self._q.failure
            for callback, err in pop_settled(pending, published,
                                             None if failure is None else LogServiceFailed.after(failure)):
                answer(callback, err)
            if not pending or not self._arm():
                return

    def close(self) -> None:
        """On the loop's thread: answer what is registered and published (the log drains its queue
        on close; anything still unpublished fails with RuntimeError), then stop watching."""
        if self._closed:
            return
        self._closed = True                  # arms no more
        self._q.notify_durable(0, -1)
        self._ready()
        err = RuntimeError("the log closed before these records were published")
        try:
            while self._pending:
                answer(self._pending.popleft()[1], err)
        finally:
            self.loop.remove_reader(self._fd)
            os.close(self._fd)
