"""DeferredBatch: one frame's unary calls that a servicer answers later, from any thread.

A servicer may start every call of a method in a batch and return at once with the hook
`defer_<Method>(requests, context, done)`; it calls `done(results)` once, from any thread, with a
response or an exception per request (a Raft driver, when the proposals are applied). With
`defer_frames_<Method>(ids, requests, context, done)` it takes the raw request bytes and answers
`done(frames, failed)` with packed reply frames (the log service, when its appends are durable). No server
thread waits meanwhile: with blocking handlers, each call in flight holds a worker thread, and every
call costs that worker two sleeps and two wake-ups (and a turn for the GIL among hundreds of them).

The batch is answered once every group is done, or at its deadline: the groups still out then get a
DeadlineExceededError (whether they take effect is unknown), and their late `done` is ignored. The
server expires batches from its sweeper, in the order they started (one deadline for all of them),
so a batch costs no timer of the event loop.

Most frames carry the calls of one method only, and for the log service's appends that method has a
`defer_frames_` hook: such a frame is a FramesCall, which has one answer and so needs no lock and no
bookkeeping per group.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, NamedTuple

from logtide.errors import DeadlineExceededError


class Packed(NamedTuple):
    """A `defer_frames_<Method>` group's answer: its reply frames, packed, and its failed calls."""
    frames: bytes
    failed: list          # (call id, exception)


def _expired(timeout: float) -> DeadlineExceededError:
    return DeadlineExceededError(f"not answered within {timeout:g} s (whether the call took effect is "
                                 f"unknown: read it back before retrying)")


class FramesCall:
    """A frame whose calls are all of one method with a `defer_frames_<Method>` hook: `done(frames,
    failed)` is that hook's callback, and the first of it and `expire` answers the frame."""
    __slots__ = ("conn", "ids", "path", "calls", "nbytes", "timeout", "deadline", "frames", "failed",
                 "_token", "_finished")

    def __init__(self, conn: Any, ids: list[int], path: str, nbytes: int, timeout: float,
                 finished: Callable[["FramesCall"], None]) -> None:
        self.conn, self.ids, self.path = conn, ids, path
        self.calls, self.nbytes = len(ids), nbytes
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.frames: bytes = b""
        self.failed: list = []
        self._token = [True]               # popped by the one answer: list.pop is atomic under the GIL
        self._finished = finished

    @property
    def over(self) -> bool:
        return not self._token

    def done(self, frames: bytes, failed: list) -> None:
        try:
            self._token.pop()
        except IndexError:                 # answered already, or past its deadline
            return
        self.frames, self.failed = frames, failed
        self._finished(self)

    def expire(self) -> None:
        try:
            self._token.pop()
        except IndexError:
            return
        err = _expired(self.timeout)
        self.failed = [(call_id, err) for call_id in self.ids]
        self._finished(self)


class DeferredBatch:
    """The groups of one frame's calls: (unit, call ids, results) as each group finishes."""
    __slots__ = ("conn", "calls", "nbytes", "timeout", "deadline", "parts", "_lock", "_left", "_sealed",
                 "_over", "_finished", "_started")

    def __init__(self, conn: Any, calls: int, nbytes: int, timeout: float,
                 finished: Callable[["DeferredBatch"], None]) -> None:
        self.conn, self.calls, self.nbytes = conn, calls, nbytes
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.parts: list[tuple[Any, list[int], list]] = []
        self._lock = threading.Lock()
        self._left = 0                      # groups started and not done
        self._sealed = False                # every group started
        self._over = False                  # answered (or past its deadline): later results are dropped
        self._finished = finished
        self._started = {}                  # id(done) -> (unit, ids) of the groups still out

    @property
    def over(self) -> bool:
        return self._over

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
            err = _expired(self.timeout)
            for unit, ids in self._started.values():
                self.parts.append((unit, ids, [err] * len(ids)))
            self._started.clear()
        self._finished(self)


class Outstanding:
    """The deferred frames a server has started and not answered, in start order, so in deadline
    order (one timeout for all): `expire(now)` ends those past it. Answered ones leave from the head
    as replies go out; a stuck frame at the head holding many answered ones behind it has them
    compacted away, so memory follows the frames in flight, not the rate. On the loop only."""
    __slots__ = ("_q", "_live")

    def __init__(self) -> None:
        self._q: deque = deque()
        self._live = 0

    def __len__(self) -> int:
        return self._live

    @property
    def kept(self) -> int:
        """Frames kept, answered or not: what the memory follows."""
        return len(self._q)

    def add(self, frame: "FramesCall | DeferredBatch") -> None:
        self._q.append(frame)
        self._live += 1

    def answered(self, n: int) -> None:
        """n of them were answered (or expired) and their replies written."""
        self._live -= n
        q = self._q
        while q and q[0].over:
            q.popleft()
        if len(q) > 2 * self._live + 1024:
            self._q = deque(f for f in q if not f.over)

    def expire(self, now: float) -> None:
        q = self._q
        while q and (q[0].over or q[0].deadline <= now):
            q.popleft().expire()               # a no-op for one answered already
