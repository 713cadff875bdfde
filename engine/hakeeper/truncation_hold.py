"""TruncationHold: the replication primary's view of HAKeeper's truncation LSN, and HAKeeper's
verdict on its RO nodes applied to the primary's own hold.

HAKeeper is where the RO nodes' LSN feedback and the truncation LSN meet (docs/hakeeper.md,
section 6): RO nodes report their min used LSN in their heartbeats, the primary reports what it
no longer needs itself, and HAKeeper's state machine moves the truncation LSN to the lower of the
two. A thread reads it from HAKeeper's leader once a second; the primary truncates no further
than it (`Primary.cluster_hold`). Until HAKeeper has answered once, the hold is 0: nothing is
truncated on a guess.

An RO node that HAKeeper dropped (its checker's DROP_RO_NODE: no heartbeat for the RO timeout)
is dropped from the primary's in-process hold as well, once the primary has not heard from it
for `quiet_s` either, so the dead node holds the log nowhere. A node that still reports to the
primary (one that has just subscribed and not registered yet) is kept.
"""
from __future__ import annotations

import logging
import threading
from typing import Any

from logtide.engine.hakeeper.client import HAKeeperClient
from logtide.errors import LogtideError
from logtide.failure_log import worth_logging

log = logging.getLogger("logtide.hakeeper")

INTERVAL = 1.0


class TruncationHold:
    def __init__(self, addresses: str, primary: Any, *, interval: float = INTERVAL, quiet_s: float = 2.0,
                 timeout: float = 2.0) -> None:
        self.client = HAKeeperClient(addresses, timeout=timeout, call_timeout=min(1.0, timeout))
        self.primary, self.interval, self.quiet_s = primary, interval, quiet_s
        self.truncation_lsn = 0          # 0 until HAKeeper answered
        self.answered = self.failed = 0
        self.dropped: list[int] = []     # RO nodes dropped from the primary's hold on HAKeeper's word
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hakeeper-truncation-hold", daemon=True)

    def lsn(self) -> int:
        """The cluster's truncation LSN as last read (the primary's `cluster_hold`)."""
        return self.truncation_lsn

    def start(self) -> "TruncationHold":
        self.primary.cluster_hold = self.lsn
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.client.close()

    def poll(self) -> None:
        """One round: read HAKeeper's truncation LSN and RO nodes; drop the ones it dropped."""
        st = self.client.status()
        self.truncation_lsn = max(self.truncation_lsn, int(st["truncation_lsn"]))
        self.answered += 1
        known = {sid for sid, s in st["stores"].items() if s["role"] == "ro"}
        for node in list(self.primary.replicas):
            if f"ro-{node}" not in known and self.primary.drop_if_quiet(
                    node, self.quiet_s, f"HAKeeper dropped ro-{node} (no heartbeat for its RO timeout)"):
                self.dropped.append(node)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except LogtideError as exc:
                self.failed += 1
                if worth_logging(self.failed):
                    log.warning("truncation hold: HAKeeper did not answer (%d so far): %s: %s", self.failed,
                                type(exc).__name__, exc)
            self._stop.wait(self.interval)
