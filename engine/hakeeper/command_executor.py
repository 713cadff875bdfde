"""CommandExecutor: a store's thread that carries out HAKeeper's schedule commands, off the heartbeat thread.

A membership change waits for a Raft commit (seconds when the shard is slow or has lost its
quorum); run on the heartbeat thread it would stop the store's heartbeats, and HAKeeper would
call a live store down. The heartbeat thread hands each reply's commands here and goes on.

Commands run one at a time, in the order received. Each has a deadline from its receipt: one
still waiting when its deadline passes is dropped, not run late (HAKeeper sees it unfinished and
issues it again when it expires). A command with the key of one waiting or running (the same
action, re-issued) is not queued twice.
Each command's own wait (a membership change's commit) has its own deadline in `run`. Errors
are logged and counted, never raised into the store.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Callable

from logtide.engine.hakeeper.schedule_command import ScheduleCommand
from logtide.engine.raft.errors import RaftError
from logtide.errors import LogtideError

log = logging.getLogger("logtide.hakeeper")

DEADLINE = 10.0   # seconds a received command may wait to start (HAKeeper's default command timeout)


class CommandExecutor:
    def __init__(self, run: Callable[[ScheduleCommand], None], store_id: str, *, deadline: float = DEADLINE) -> None:
        """run(command) carries out one command (raising a typed error when it cannot)."""
        self.run, self.store_id, self.deadline = run, store_id, deadline
        self.failed: list[tuple[ScheduleCommand, str]] = []
        self.expired: list[ScheduleCommand] = []
        self._queue: collections.deque[tuple[float, ScheduleCommand]] = collections.deque()
        self._running: ScheduleCommand | None = None
        self._cv = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name=f"hakeeper-commands-{store_id}", daemon=True)
        self._thread.start()

    def submit(self, commands: list[ScheduleCommand]) -> None:
        """Queue the commands of one heartbeat reply; returns at once."""
        with self._cv:
            # by key: HAKeeper re-issues an expired command with a new lifetime while the first may still run
            waiting = {c.key() for _, c in self._queue} | ({self._running.key()} if self._running else set())
            for c in commands:
                if c.key() in waiting:
                    log.info("store %s: %s is already waiting or running", self.store_id, c)
                    continue
                self._queue.append((time.monotonic() + self.deadline, c))
                waiting.add(c.key())
            self._cv.notify()

    def pending(self) -> int:
        """Commands waiting or running."""
        with self._cv:
            return len(self._queue) + (self._running is not None)

    def stop(self, timeout: float = 5.0) -> None:
        with self._cv:
            self._stopped = True
            self._queue.clear()
            self._cv.notify()
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._stopped:
                    self._cv.wait()
                if self._stopped:
                    return
                deadline, c = self._queue.popleft()
                if time.monotonic() > deadline:
                    self.expired.append(c)
                    log.warning("store %s: schedule command %s dropped: waited past its deadline", self.store_id, c)
                    continue
                self._running = c
            t0 = time.monotonic()
            try:
                self.run(c)
            except (RaftError, LogtideError, OSError) as exc:
                self.failed.append((c, type(exc).__name__))
                log.warning("store %s: schedule command %s failed after %.1f s: %s: %s", self.store_id, c,
                            time.monotonic() - t0, type(exc).__name__, exc)
            except Exception:  # noqa: BLE001 - a bug in one command must not end the store's executor
                self.failed.append((c, "bug"))
                log.exception("store %s: schedule command %s failed", self.store_id, c)
            finally:
                with self._cv:
                    self._running = None
