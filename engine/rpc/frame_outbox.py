"""FrameOutbox: frames written from any thread, handed to the event loop in the order they came.

A connection's loop owns its transport; other threads (callers, stream threads) put their frames
here. The first frame after a flush asks the loop for one more flush, so a burst of frames from
many threads costs the loop one wake-up and one writelines.
"""
from __future__ import annotations

import threading
from typing import Callable


class FrameOutbox:
    """put() from any thread; take() on the loop, in the flush that `schedule_flush` arranges."""

    def __init__(self, schedule_flush: Callable[[], None]) -> None:
        self._lock = threading.Lock()
        self._frames: list[bytes] = []
        self._due = False
        self._schedule_flush = schedule_flush

    def put(self, frame: bytes) -> None:
        with self._lock:
            self._frames.append(frame)
            if self._due:
                return
            self._due = True
        self._schedule_flush()

    def take(self) -> list[bytes]:
        """Every frame put since the last take, in order."""
        with self._lock:
            out, self._frames, self._due = self._frames, [], False
        return out
