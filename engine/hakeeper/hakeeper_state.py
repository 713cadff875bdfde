"""HAKeeperState: everything HAKeeper's replicas agree on.

Logical time (`tick`), the bootstrap state and cluster info, every registered store with its last
heartbeat, each log shard's membership, the schedule commands queued per store and those in flight,
the replica id allocator and the truncation LSN. Only the state machine changes it; the checkers
read it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from logtide.engine.hakeeper.cluster_info import BootstrapState, ClusterInfo
from logtide.engine.hakeeper.heartbeat import RoHeartbeat
from logtide.engine.hakeeper.log_shard_state import LogShardState
from logtide.engine.hakeeper.schedule_command import ScheduleCommand
from logtide.engine.hakeeper.store_role import StoreRole
from logtide.engine.hakeeper.store_state import StoreState


@dataclass
class HAKeeperState:
    index: int = 0                     # the last applied entry
    tick: int = 0
    term: int = 0                      # the newest leader term whose schedule commands were accepted
    last_batch_index: int = 0          # the entry index of the last accepted schedule command batch
    bootstrap: BootstrapState = BootstrapState.CREATED
    cluster: ClusterInfo | None = None
    next_replica_id: int = 1
    truncation_lsn: int = 0            # only moves forward: the log may be truncated up to here
    stores: dict[str, StoreState] = field(default_factory=dict)
    shards: dict[int, LogShardState] = field(default_factory=dict)
    queued: dict[str, list[ScheduleCommand]] = field(default_factory=dict)   # store -> undelivered batch
    in_flight: dict[tuple, ScheduleCommand] = field(default_factory=dict)    # key -> command, until it expires

    def stores_of(self, role: StoreRole) -> dict[str, StoreState]:
        return {sid: s for sid, s in self.stores.items() if s.role == role}

    def truncation_hold(self) -> int | None:
        """The highest LSN the RO nodes let go of (min over their min used LSNs, less one), or None
        with no RO node. A registered RO node that has not reported yet holds at the current
        truncation LSN."""
        hold = None
        for s in self.stores_of(StoreRole.RO).values():
            h = s.report.min_used_lsn - 1 if isinstance(s.report, RoHeartbeat) else self.truncation_lsn
            hold = h if hold is None else min(hold, h)
        return None if hold is None else max(0, hold)

    def copy(self) -> "HAKeeperState":
        return HAKeeperState(
            self.index, self.tick, self.term, self.last_batch_index, self.bootstrap, self.cluster,
            self.next_replica_id, self.truncation_lsn, {k: v.copy() for k, v in self.stores.items()},
            {k: v.copy() for k, v in self.shards.items()}, {k: list(v) for k, v in self.queued.items()},
            dict(self.in_flight))
