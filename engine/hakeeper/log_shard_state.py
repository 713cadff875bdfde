"""LogShardState: one log shard's membership, term and leader, as its replicas' heartbeats report.

A report moves the membership only when it comes from a newer membership epoch (the index of the
membership change the replica applied), and the leader only with a term at least as new, so a
zombie's stale report changes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from logtide.engine.hakeeper.heartbeat import LogReplicaInfo


@dataclass
class LogShardState:
    shard_id: int
    epoch: int = 0
    term: int = 0
    leader_id: int = 0
    voters: dict[int, str] = field(default_factory=dict)     # replica id -> store id
    learners: dict[int, str] = field(default_factory=dict)
    non_voting: set[int] = field(default_factory=set)        # learner ids meant to stay learners

    def update(self, rep: LogReplicaInfo) -> None:
        if rep.epoch > self.epoch:
            self.epoch = rep.epoch
            self.voters = dict(rep.voters)
            self.learners = dict(rep.learners)
        if rep.term > self.term:
            self.term, self.leader_id = rep.term, rep.leader_id
        elif rep.term == self.term and rep.leader_id and not self.leader_id:
            self.leader_id = rep.leader_id
        if self.leader_id and self.leader_id not in self.voters:
            self.leader_id = 0   # the leader was removed at a newer epoch than its term says

    def members(self) -> dict[int, str]:
        return {**self.voters, **self.learners}

    def store_of(self, replica_id: int) -> str | None:
        return self.voters.get(replica_id) or self.learners.get(replica_id)

    def copy(self) -> "LogShardState":
        return LogShardState(self.shard_id, self.epoch, self.term, self.leader_id, dict(self.voters),
                             dict(self.learners), set(self.non_voting))
