"""ReplicaStores: which store a log replica id lives on, as a log store names the members of its
shard in its heartbeat.

The founders and a spare added under its own `--id` live on `log-<id>`, but HAKeeper hands out
replica ids from its own counter, so a replica started later on another store (START_REPLICA)
lives elsewhere. HAKeeper knows: its shard membership and its in-flight `ADD_REPLICA` commands
name the store of each id. A miss asks HAKeeper's status once; what it names is kept (a replica
id is never reused), and an id it does not know yet is named `log-<id>` for this heartbeat only.
"""
from __future__ import annotations

from typing import Callable

from logtide.engine.hakeeper.store_reports import log_store_name
from logtide.errors import LogtideError


class ReplicaStores:
    def __init__(self, status: Callable[[], dict]) -> None:
        self.status = status
        self.known: dict[int, str] = {}

    def __call__(self, replica_id: int) -> str:
        if replica_id not in self.known:
            self._learn()
        return self.known.get(replica_id) or log_store_name(replica_id)

    def _learn(self) -> None:
        try:
            st = self.status()
        except LogtideError:
            return
        for sh in st.get("shards", {}).values():
            for rid, store in {**sh.get("voters", {}), **sh.get("learners", {})}.items():
                self.known[int(rid)] = store
        for c in st.get("pending_commands", []):
            if c.get("type") in ("ADD_REPLICA", "ADD_NON_VOTING_REPLICA") and c.get("replica_store"):
                self.known.setdefault(int(c["replica"]), c["replica_store"])
