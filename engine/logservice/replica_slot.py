"""ReplicaSlot: the one log replica a store process runs now, which HAKeeper's commands replace.

A log store starts with the replica its command line names. `KILL_ZOMBIE` closes it (a replica
the membership no longer names: its data stays where it is, and the store serves nothing on its
address until it is given a replica again); the store then heartbeats with no replica, so
HAKeeper counts it as a store a new replica can go to. `START_REPLICA` of a member this store does
not run opens it as a joining replica, in a directory of its own beside the store's, on the
store's address, with the shard's current members as its peers (the leader then brings it up to
date). Nothing here decides: HAKeeper's checkers do (docs/hakeeper.md, section 5).
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional

from logtide.engine.hakeeper.heartbeat import LogStoreHeartbeat
from logtide.errors import UnknownReplicaError

log = logging.getLogger("logtide.hakeeper")


class ReplicaSlot:
    def __init__(self, svc: Any, address: str, base_dir: str,
                 open_replica: Callable[[str, int, dict, str], Any]) -> None:
        """open_replica(dir, replica id, peers, listen) opens a joining ReplicatedLogService."""
        self.svc: Optional[Any] = svc
        self.address, self.base_dir, self._open = address, base_dir, open_replica
        self.lock = threading.RLock()

    @property
    def replica_id(self) -> int:
        with self.lock:
            return self.svc.id if self.svc is not None else 0

    def current(self) -> Any:
        """The running replica's service; UnknownReplicaError when this store runs none."""
        with self.lock:
            if self.svc is None:
                raise UnknownReplicaError("this log store runs no replica (its zombie was killed)")
            return self.svc

    def report(self, store_id: str, report: Callable[[Any, str], LogStoreHeartbeat]) -> LogStoreHeartbeat:
        with self.lock:
            return LogStoreHeartbeat(store_id, ()) if self.svc is None else report(self.svc, store_id)

    def kill(self, replica_id: int) -> bool:
        """Close replica `replica_id` if it is the one running; True when it was closed."""
        with self.lock:
            if self.svc is None or self.svc.id != replica_id:
                return False
            svc, self.svc = self.svc, None
        svc.close()
        return True

    def start(self, replica_id: int, peers: dict[int, str]) -> bool:
        """Open replica `replica_id` as a joiner unless one runs; True when it was opened."""
        with self.lock:
            if self.svc is not None:
                return False
            d = f"{self.base_dir}.replica-{replica_id}"
            self.svc = self._open(d, replica_id, {**peers, replica_id: self.address}, self.address)
            return True

    def close(self) -> None:
        with self.lock:
            svc, self.svc = self.svc, None
        if svc is not None:
            svc.close()
