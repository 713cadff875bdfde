"""ScheduleCommand: one action HAKeeper's checkers ask of one store, with the seed's types.

Commands are queued per target store in the replicated state and handed over by the reply to
that store's next heartbeat. Each carries the tick until which it counts as in flight (until then
the checkers do not issue it, or another membership change of its shard, again), and how long it
stays in flight after its delivery: a command delivered just before its tick must not expire
before the store's next heartbeat can show what it did.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from logtide.engine.hakeeper.hakeeper_format import Reader, Writer
from logtide.errors import MalformedCommandError


class CommandType(IntEnum):
    ADD_REPLICA = 1                 # to the shard leader's store: add `replica_id` on `replica_store`
                                    # as a learner, or promote that learner
    REMOVE_REPLICA = 2              # to the shard leader's store: remove voter `replica_id` from the membership
    START_REPLICA = 3               # to `target`: start its replica `replica_id` (`members`: the founders)
    STOP_REPLICA = 4                # to `target`: stop its replica (it stays in the membership)
    KILL_ZOMBIE = 5                 # to `target`: kill a replica that is no longer in the membership
    ADD_NON_VOTING_REPLICA = 6      # as ADD_REPLICA, for a learner that stays a learner
    REMOVE_NON_VOTING_REPLICA = 7
    START_NON_VOTING_REPLICA = 8
    STOP_NON_VOTING_REPLICA = 9
    START_TN = 10                   # to a TN store: start TN shard `shard_id` as `replica_id`, from checkpoint and log
    STOP_TN = 11                    # to a TN store: stop its replica of TN shard `shard_id`
    DELETE_CN_STORE = 12            # applied by HAKeeper itself: forget an expired CN
    DROP_RO_NODE = 13               # applied by HAKeeper itself: drop an expired RO node from the truncation hold


# commands that change a log shard's membership: the shard's leader runs them, one at a time
MEMBERSHIP = frozenset((CommandType.ADD_REPLICA, CommandType.REMOVE_REPLICA, CommandType.ADD_NON_VOTING_REPLICA,
                        CommandType.REMOVE_NON_VOTING_REPLICA))
# commands HAKeeper applies to its own state when the batch commits (never queued for a store)
SELF_APPLIED = frozenset((CommandType.DELETE_CN_STORE, CommandType.DROP_RO_NODE))
# commands about one log replica
LOG_REPLICA = MEMBERSHIP | frozenset((CommandType.START_REPLICA, CommandType.STOP_REPLICA, CommandType.KILL_ZOMBIE,
                                      CommandType.START_NON_VOTING_REPLICA, CommandType.STOP_NON_VOTING_REPLICA))


@dataclass(frozen=True)
class ScheduleCommand:
    kind: CommandType
    target: str                                 # the store that receives and runs it
    shard_id: int = 0
    replica_id: int = 0
    replica_store: str = ""                     # the store the replica lives on
    learner: bool = False                       # ADD_REPLICA: True adds a learner, False promotes that learner
    members: tuple[tuple[int, str], ...] = ()   # START_REPLICA at bootstrap: the founding voters (id, store)
    expires_tick: int = 0                       # in flight until this tick
    timeout_ticks: int = 0                      # delivered, it is in flight this long again
    store_tick: int = 0                         # DELETE_CN_STORE, DROP_RO_NODE: the last heartbeat tick
                                                # the checker saw; a later heartbeat cancels the drop

    def key(self) -> tuple:
        """What two commands share when one makes the other redundant while in flight."""
        if self.kind in LOG_REPLICA:
            return (int(self.kind), self.shard_id, self.replica_id, self.learner)
        return (int(self.kind), self.shard_id, self.target)

    def encode_to(self, w: Writer) -> None:
        w.u8(int(self.kind), "command type")
        w.string(self.target, "target")
        w.u64(self.shard_id, "shard_id")
        w.u64(self.replica_id, "replica_id")
        w.string(self.replica_store, "replica_store")
        w.boolean(self.learner, "learner")
        w.count(len(self.members), "members")
        for rid, store in self.members:
            w.u64(rid, "member id")
            w.string(store, "member store")
        w.u64(self.expires_tick, "expires_tick")
        w.u64(self.timeout_ticks, "timeout_ticks")
        w.u64(self.store_tick, "store_tick")

    @classmethod
    def decode_from(cls, r: Reader) -> "ScheduleCommand":
        raw = r.u8("command type")
        try:
            kind = CommandType(raw)
        except ValueError:
            raise r.error(f"unknown schedule command type {raw}") from None
        target = r.string("target")
        shard_id, replica_id = r.u64("shard_id"), r.u64("replica_id")
        replica_store = r.string("replica_store")
        learner = r.boolean("learner")
        members = tuple((r.u64("member id"), r.string("member store")) for _ in range(r.count("members")))
        cmd = cls(kind, target, shard_id, replica_id, replica_store, learner, members, r.u64("expires_tick"),
                  r.u64("timeout_ticks"), r.u64("store_tick"))
        cmd.validate()
        return cmd

    def validate(self) -> None:
        if not self.target:
            raise MalformedCommandError(f"{self.kind.name}: empty target store")
        if self.kind in LOG_REPLICA and (self.shard_id < 1 or self.replica_id < 1):
            raise MalformedCommandError(f"{self.kind.name}: a log replica command needs shard_id and replica_id >= 1")
        if self.kind in (CommandType.START_TN, CommandType.STOP_TN) and self.shard_id < 1:
            raise MalformedCommandError(f"{self.kind.name}: needs a TN shard_id >= 1")

    def __str__(self) -> str:
        what = self.kind.name
        if self.kind in LOG_REPLICA:
            role = " learner" if self.learner and self.kind == CommandType.ADD_REPLICA else ""
            where = self.replica_store or self.target
            return f"{what}{role} shard {self.shard_id} replica {self.replica_id}@{where} -> {self.target}"
        return f"{what} shard {self.shard_id} -> {self.target}"
