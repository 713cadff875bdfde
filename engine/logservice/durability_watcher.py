"""DurabilityWatcher: tells whoever queued appends when the log is durable up to their LSN, with one
thread for all of them.

Code that queues appends without waiting (LogService.queue_group) and runs on no event loop
registers `watch(lsn, callback)`; on a loop, LoopDurability answers with no thread between. The
watcher thread sleeps in the log's commit queue (`wait_durable`, a futex with the GIL released)
for the oldest LSN registered; once the log is durable up to it, it calls, in registration order,
every callback whose LSN is covered. A batch then costs one wake-up of this thread, where a
blocking append holds a thread per call through its fsync.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Callable

from logtide.engine.logservice.durability_callbacks import Callback, answer, pop_settled


class DurabilityWatcher:
    """`watch(lsn, callback)` from any thread: callback(None) once every record up to lsn is durable,
    callback(exc) if the log fails first; both on the watcher's thread. Started at the first watch."""

    def __init__(self, wait_durable: Callable[[int], int], name: str = "logservice-durability") -> None:
        self._wait = wait_durable
        self._name = name
        self._cv = threading.Condition(threading.Lock())
        self._pending: deque = deque()       # (lsn, callback), in registration order
        self._idle = False                   # the thread sleeps for want of a registration
        self._closing = False
        self._thread: threading.Thread | None = None

    def watch(self, lsn: int, callback: Callback) -> None:
        with self._cv:
            if self._closing:
                raise RuntimeError("the durability watcher is closed")
            self._pending.append((lsn, callback))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            elif self._idle:
                self._cv.notify()

    def close(self) -> None:
        """Answer what is registered (the log drains its queue on close), then stop the thread."""
        with self._cv:
            self._closing = True
            self._cv.notify()
            th = self._thread
        if th is not None and th is not threading.current_thread():
            th.join()

    def _run(self) -> None:
        pending = self._pending
        while True:
            with self._cv:
                while not pending and not self._closing:
                    self._idle = True
                    self._cv.wait()
                    self._idle = False
                if not pending:
                    return
                lsn = pending[0][0]
            err: BaseException | None = None
            durable = 0
            try:
                durable = self._wait(lsn)
            except BaseException as exc:  # noqa: B902 - the log failed (or closed): every waiter learns it
                err = exc
            with self._cv:
                settled = pop_settled(pending, durable, err)
            for callback, e in settled:
                answer(callback, e)
