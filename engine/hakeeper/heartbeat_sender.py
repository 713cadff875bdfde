"""HeartbeatSender: a store's thread that registers with HAKeeper and heartbeats once a second.

`report()` builds the store's heartbeat (its role's dataclass) from the live process; the reply's
schedule commands are handed to a CommandExecutor, which runs each through `run_command` on its
own thread (logged when none is given), so a slow command never delays the next heartbeat. A
heartbeat refused with UnknownStoreError (HAKeeper dropped the store, or never had it) registers
again. Every call has the client's deadline, so a lost HAKeeper delays the next beat
and never hangs the store; errors are counted and logged, never raised into the store.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from logtide.engine.hakeeper.client import HAKeeperClient
from logtide.engine.hakeeper.command_executor import CommandExecutor
from logtide.engine.hakeeper.heartbeat import Heartbeat
from logtide.engine.hakeeper.schedule_command import ScheduleCommand
from logtide.engine.hakeeper.store_role import StoreRole
from logtide.errors import LogtideError, UnknownStoreError
from logtide.failure_log import worth_logging

log = logging.getLogger("logtide.hakeeper")

INTERVAL = 1.0   # the seed's heartbeat period


def log_command(store_id: str, c: ScheduleCommand) -> None:
    log.warning("store %s received schedule command %s", store_id, c)


class HeartbeatSender:
    def __init__(self, addresses: str, role: StoreRole, store_id: str, address: str,
                 report: Callable[[], Heartbeat], *, run_command: Callable[[ScheduleCommand], None] | None = None,
                 interval: float = INTERVAL, timeout: float = 2.0) -> None:
        """run_command(command) carries out one schedule command (on the executor's thread)."""
        self.client = HAKeeperClient(addresses, timeout=timeout, call_timeout=min(1.0, timeout))
        self.role, self.store_id, self.address = role, store_id, address
        self.report, self.interval = report, interval
        self.executor = CommandExecutor(run_command or (lambda c: log_command(store_id, c)), store_id)
        self.registered = False
        self.sent = self.failed = 0
        self.received: list[ScheduleCommand] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"hakeeper-heartbeat-{store_id}", daemon=True)

    def start(self) -> "HeartbeatSender":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.executor.stop()
        self.client.close()

    def beat(self) -> list[ScheduleCommand]:
        """One round: register when needed, then heartbeat; the commands received."""
        if not self.registered:
            self.client.register(self.role, self.store_id, self.address)
            self.registered = True
        try:
            cmds = self.client.heartbeat(self.report())
        except UnknownStoreError:
            self.registered = False   # dropped by HAKeeper (or its state is new): register again next round
            raise
        self.sent += 1
        return cmds

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                cmds = self.beat()
                if cmds:
                    self.received.extend(cmds)
                    self.executor.submit(cmds)
            except LogtideError as exc:
                self.failed += 1
                if worth_logging(self.failed):
                    log.warning("store %s: heartbeat to HAKeeper failed (%d so far): %s: %s", self.store_id,
                                self.failed, type(exc).__name__, exc)
            except Exception:  # noqa: BLE001 - a report() bug must not kill the store; keep beating
                self.failed += 1
                log.exception("store %s: heartbeat round failed", self.store_id)
            self._stop.wait(self.interval)
