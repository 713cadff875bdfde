"""ReplicaSlot: the one log replica a store process runs now, which HAKeeper's commands replace.

A log store starts with the replica its command line names, unless that replica was killed as
a zombie before (`zombie_marker`): then it starts with none. `KILL_ZOMBIE` closes it (a replica
the membership no longer names: its data stays where it is, marked, and the store serves nothing
on its address until it is given a replica again); the store then heartbeats with no replica, so
HAKeeper counts it as a store a new replica can go to. `STOP_REPLICA` closes a member (it stays
in the membership; the slot remembers its directory). `START_REPLICA` of a member this store does
not run reopens it from its directory when this slot stopped it, and otherwise opens it as a
joining replica, in a directory of its own beside the store's, on the store's address, with the
shard's current members as its peers (the leader then brings it up to date); an idle `--join`
spare (no membership names it, so it holds nothing) makes way for it. Nothing here decides:
HAKeeper's checkers do (docs/hakeeper.md, section 5).
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional

from logtide.engine.hakeeper.heartbeat import LogStoreHeartbeat
from logtide.engine.logservice.zombie_marker import mark_killed
from logtide.errors import UnknownReplicaError

log = logging.getLogger("logtide.hakeeper")


class ReplicaSlot:
    def __init__(self, svc: Any, address: str, base_dir: str,
                 open_replica: Callable[[str, int, dict, str], Any]) -> None:
        """open_replica(dir, replica id, peers, listen) opens a joining ReplicatedLogService."""
        self.svc: Optional[Any] = svc
        self.address, self.base_dir, self._open = address, base_dir, open_replica
        self.stopped: dict[int, str] = {}   # replica id -> directory, of members STOP_REPLICA closed
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
        """Close zombie `replica_id` if it is the one running, marking its directory so a restarted
        store does not open it again; True when it was closed."""
        with self.lock:
            if self.svc is None or self.svc.id != replica_id:
                return False
            svc, self.svc = self.svc, None
        mark_killed(svc.dir, replica_id)   # durable before the close: a crash in between still skips it
        svc.close()
        return True

    def stop(self, replica_id: int) -> bool:
        """Close member `replica_id` if it is the one running (START_REPLICA reopens it); True when closed."""
        with self.lock:
            if self.svc is None or self.svc.id != replica_id:
                return False
            svc, self.svc = self.svc, None
            self.stopped[replica_id] = svc.dir
        svc.close()
        return True

    def start(self, replica_id: int, peers: dict[int, str]) -> bool:
        """Open replica `replica_id` unless a member runs (from its directory when this slot stopped it,
        else as a joiner; an idle `--join` spare that no membership names is closed first); True when
        it was opened. Called from one thread (the store's command executor)."""
        with self.lock:
            idle = self.svc if self.svc is not None and not self.svc.status()["voters"] else None
            if self.svc is not None and idle is None:
                return False
            self.svc = None
            d = self.stopped.get(replica_id, f"{self.base_dir}.replica-{replica_id}")
        if idle is not None:   # a --join spare no membership names holds nothing: it makes way
            log.warning("replica slot: closing idle joiner %d to open replica %d", idle.id, replica_id)
            idle.close()
        # opened outside the lock: recovery may take seconds, and the heartbeat's report takes the lock
        svc = self._open(d, replica_id, {**peers, replica_id: self.address}, self.address)
        with self.lock:
            self.svc = svc
            self.stopped.pop(replica_id, None)
        return True

    def close(self) -> None:
        with self.lock:
            svc, self.svc = self.svc, None
        if svc is not None:
            svc.close()
