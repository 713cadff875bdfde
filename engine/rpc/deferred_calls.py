"""DeferredBatch: one frame's unary calls that a servicer answers later, from any thread.

A servicer may start every call of a method in a batch and return at once with the hook
`defer_<Method>(requests, context, done)`; it calls `done(results)` once, from any thread, with a
response or an exception per request (a Raft driver, when the proposals are applied). With
`defer_frames_<Method>(ids, requests, context, done)` it takes the raw request bytes and answers
`done(frames, failed)` with packed reply frames (the log service, when its appends are durable). No server
thread waits meanwhile: with blocking handlers, each call in flight holds a worker thread, and every
call costs that worker two sleeps and two wake-ups (and a turn for the GIL among hundreds of them).

The batch is answered once every group is done, or at its deadline: the groups still out then get a
DeadlineExceededError (whether they take effect is unknown), and their late `done` is ignored.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, NamedTuple

from logtide.errors import DeadlineExceededError


class Packed(NamedTuple):
    """A `defer_frames_<Method>` group's answer: its reply frames, packed, and its failed calls."""
    frames: bytes
    failed: list          # (call id, exception)


class DeferredBatch:
    """The groups of one frame's calls: (unit, call ids, results) as each group finishes."""
    __slots__ = ("conn", "calls", "nbytes", "timeout", "timer", "parts", "_lock", "_left", "_sealed",
                 "_over", "_finished", "_started")

    def __init__(self, conn: Any, calls: int, nbytes: int, timeout: float,
                 finished: Callable[["DeferredBatch"], None]) -> None:
        self.conn, self.calls, self.nbytes = conn, calls, nbytes
        self.timeout = timeout
        self.timer = None                   # the loop's deadline handle, cancelled once answered
        self.parts: list[tuple[Any, list[int], list]] = []
        self._lock = threading.Lock()
        self._left = 0                      # groups started and not done
        self._sealed = False                # every group started
        self._over = False                  # answered (or past its deadline): later results are dropped
        self._finished = finished
        self._started = {}                  # id(done) -> (unit, ids) of the groups still out

    def add(self, unit: Any, ids: list[int], results: list) -> None:
        """A group answered at once (on the loop, before `seal`)."""
        self.parts.append((unit, ids, results))

    def expect(self, unit: Any, ids: list[int]) -> Callable[[list], None]:
        """The `done(results)` callback of one group started now (a `defer_<Method>` hook's)."""
        key = object()

        def done(results: list) -> None:
            if len(results) != len(ids):
                results = [TypeError(f"defer_{unit.method.name} answered {len(results)} results for "
                                     f"{len(ids)} calls")] * len(ids)
            self._settle(key, (unit, ids, results))
        self._start(key, unit, ids)
        return done

    def expect_frames(self, unit: Any, ids: list[int]) -> Callable[[bytes, list], None]:
        """The `done(frames, failed)` callback of one group started now (a `defer_frames_<Method>`
        hook's: packed reply frames, and (id, exception) for each failed call)."""
        key = object()

        def done(frames: bytes, failed: list) -> None:
            self._settle(key, (unit, ids, Packed(frames, failed)))
        self._start(key, unit, ids)
        return done

    def _start(self, key: object, unit: Any, ids: list[int]) -> None:
        with self._lock:
            self._started[key] = (unit, ids)
            self._left += 1

    def _settle(self, key: object, part: tuple) -> None:
        with self._lock:
            if self._over or key not in self._started:
                return
            del self._started[key]
            self.parts.append(part)
            self._left -= 1
            last = self._sealed and self._left == 0
            if last:
                self._over = True
        if last:
            self._finished(self)

    def seal(self) -> None:
        """Every group is started: the batch finishes with its last group (now, if none is out)."""
        with self._lock:
            self._sealed = True
            last = self._left == 0 and not self._over
            if last:
                self._over = True
        if last:
            self._finished(self)

    def expire(self) -> None:
        """The deadline passed: the groups still out fail with DeadlineExceededError."""
        with self._lock:
            if self._over:
                return
            self._over = True
            err = DeadlineExceededError(f"not answered within {self.timeout:g} s (whether the call took "
                                        f"effect is unknown: read it back before retrying)")
            for unit, ids in self._started.values():
                self.parts.append((unit, ids, [err] * len(ids)))
            self._started.clear()
        self._finished(self)

