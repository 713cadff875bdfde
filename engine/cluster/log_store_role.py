"""A log store's role in D/cluster.json follows what it runs: `spare` while it runs no replica of
the shard's membership, `logservice` once its replica is a voter.

A spare (`--join`) that HAKeeper put to work is listed as `logservice#N` from then on (`cluster
kill logservice#N` names it), and a store whose zombie replica HAKeeper had killed as `spare#N`;
id, address, data directory and log file stay. The store records the change itself, under the
layout lock: `LogStoreRole.observe` watches its heartbeats, `mark(d, store_id, role)` writes.
"""
from __future__ import annotations

import logging
from typing import Callable

from logtide.engine.cluster.layout import ClusterLayout
from logtide.engine.cluster.layout_lock import locked
from logtide.engine.cluster.store_process import process_of_store
from logtide.engine.hakeeper.heartbeat import LogStoreHeartbeat
from logtide.errors import LogtideError

log = logging.getLogger("logtide.hakeeper")

SPARE, LOGSERVICE = "spare", "logservice"


def mark(d: str, store_id: str, role: str) -> bool:
    """Record the log store that heartbeats as `store_id` with `role`; True when it changed."""
    with locked(d):
        layout = ClusterLayout.load(d)
        p = process_of_store(layout, store_id)
        if p.role == role:
            return False
        p.role = role
        layout.save()
        return True


class LogStoreRole:
    """Records a store as a `logservice` once its own replica (`replica_id()`, 0: none) is a voter."""

    def __init__(self, d: str, store_id: str, replica_id: Callable[[], int]) -> None:
        self.d, self.store_id, self.replica_id = d, store_id, replica_id
        self.recorded = ""

    def observe(self, hb: LogStoreHeartbeat) -> LogStoreHeartbeat:
        """Called with each heartbeat before it is sent; returns it unchanged."""
        rid = self.replica_id()
        voter = rid and any(r.replica_id == rid and any(v == rid for v, _s in r.voters) for r in hb.replicas)
        if voter and self.recorded != LOGSERVICE:
            self.record(LOGSERVICE)
        return hb

    def record(self, role: str) -> None:
        try:
            if mark(self.d, self.store_id, role):
                log.warning("store %s: recorded as a %s in %s", self.store_id, role, self.d)
            self.recorded = role
        except LogtideError as exc:   # the next heartbeat tries again
            log.warning("store %s: could not record it as a %s: %s: %s", self.store_id, role, type(exc).__name__, exc)
