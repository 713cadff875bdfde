"""Progress: the leader's view of one follower's log (match, next) and how to send to it.

States (etcd's): PROBE sends one APP per heartbeat until the follower's position is found;
REPLICATE streams APPs optimistically inside the inflight window; SNAPSHOT waits while a
snapshot is being delivered.
"""
from __future__ import annotations

from logtide.engine.raft.inflights import Inflights

PROBE, REPLICATE, SNAPSHOT = 0, 1, 2
STATE_NAMES = ("probe", "replicate", "snapshot")


class Progress:
    __slots__ = ("match", "next", "state", "pending_snapshot", "probe_sent", "recent_active", "inflights",
                 "is_learner")

    def __init__(self, next_index: int, max_inflight: int, is_learner: bool = False) -> None:
        self.match = 0
        self.next = next_index
        self.state = PROBE
        self.pending_snapshot = 0
        self.probe_sent = False
        self.recent_active = False
        self.inflights = Inflights(max_inflight)
        self.is_learner = is_learner

    def _reset(self, state: int) -> None:
        self.probe_sent = False
        self.pending_snapshot = 0
        self.state = state
        self.inflights.reset()

    def become_probe(self) -> None:
        if self.state == SNAPSHOT:
            pending = self.pending_snapshot
            self._reset(PROBE)
            self.next = max(self.match + 1, pending + 1)
        else:
            self._reset(PROBE)
            self.next = self.match + 1

    def become_replicate(self) -> None:
        self._reset(REPLICATE)
        self.next = self.match + 1

    def become_snapshot(self, index: int) -> None:
        self._reset(SNAPSHOT)
        self.pending_snapshot = index

    def maybe_update(self, n: int) -> bool:
        """The follower has entries up to n; False if that is old news."""
        updated = False
        if self.match < n:
            self.match = n
            updated = True
            self.probe_sent = False
        self.next = max(self.next, n + 1)
        return updated

    def maybe_decr_to(self, rejected: int, match_hint: int) -> bool:
        """An APP at `rejected` was refused; the follower suggests match_hint. False if stale."""
        if self.state == REPLICATE:
            if rejected <= self.match:  # stale rejection
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:  # stale: not the probe we sent
            return False
        # never at or below match: the follower holds those entries durably (it acknowledged
        # them), and a probe there only spends a round trip to learn it again
        self.next = max(min(rejected, match_hint + 1), self.match + 1)
        self.probe_sent = False
        return True

    def is_paused(self) -> bool:
        if self.state == PROBE:
            return self.probe_sent
        if self.state == REPLICATE:
            return self.inflights.full()
        return True

    def __repr__(self) -> str:
        return (f"Progress({STATE_NAMES[self.state]} match={self.match} next={self.next}"
                f"{' learner' if self.is_learner else ''})")
