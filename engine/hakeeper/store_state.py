"""StoreState: what HAKeeper knows of one registered store: role, address, the tick at which its
last heartbeat was applied, and that heartbeat's report."""
from __future__ import annotations

from dataclasses import dataclass

from logtide.engine.hakeeper.heartbeat import Heartbeat, LogReplicaInfo, TNHeartbeat
from logtide.engine.hakeeper.store_role import StoreRole


@dataclass
class StoreState:
    role: StoreRole
    store_id: str
    address: str = ""
    tick: int = 0                    # tick of the last applied heartbeat (or of the registration)
    report: Heartbeat | None = None  # the last heartbeat; None until the first one

    def log_replicas(self) -> dict[int, LogReplicaInfo]:
        """shard id -> the log replica this store runs (log stores)."""
        if self.role != StoreRole.LOG or self.report is None:
            return {}
        return {rep.shard_id: rep for rep in self.report.replicas}

    def tn_shards(self) -> dict[int, int]:
        """TN shard id -> replica id this store runs (TN stores)."""
        if not isinstance(self.report, TNHeartbeat):
            return {}
        return dict(self.report.shards)

    def copy(self) -> "StoreState":
        return StoreState(self.role, self.store_id, self.address, self.tick, self.report)
