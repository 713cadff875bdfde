"""The truncation worker: physically deletes whole segments nobody needs any more.

A segment goes only when all of its records are at or below min(truncated LSN, every registered
reader's replayed LSN), and never the segment being written.
"""
from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Callable

from logtide.errors import LogtideError

log = logging.getLogger("logtide.logservice")


class TruncationWorker:
    """Runs `step` every `interval` seconds (and at once when poked) until stopped, or until its
    owner is collected: `step` is held weakly (a weakref.WeakMethod), so the worker's thread does
    not keep a service nobody closed alive, with its directory locked, for the process's life."""

    def __init__(self, step: "weakref.WeakMethod[Callable[[], int]]", interval: float) -> None:
        self._step = step
        self._interval = interval
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.removed = 0
        self._thread = threading.Thread(target=self._loop, name="logservice-truncation", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            step = self._step()
            if step is None:     # the owner is gone (its __del__ closes it)
                return
            try:
                self.removed += step()
            except OSError as exc:  # a failed unlink is retried on the next round
                log.warning("truncation worker: %r", exc)
            except LogtideError as exc:  # the service failed (e.g. its directory was removed): stop
                log.error("truncation worker stops: %s", exc)
                return
            finally:
                del step     # the owner may be dropped here, and closed (stop()) on this thread

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()


def removable(segments: list, bound: int) -> int:
    """How many leading segments lie entirely at or below `bound` (the last one always stays)."""
    n = 0
    while n < len(segments) - 1 and segments[n].last_lsn <= bound and segments[n + 1].first_lsn <= bound + 1:
        n += 1
    return n


def unlink_segments(dirpath: str, paths: list[str]) -> None:
    for p in paths:
        os.unlink(p)
        log.info("truncation: removed %s", os.path.basename(p))
    fd = os.open(dirpath, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
