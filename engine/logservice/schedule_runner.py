"""ScheduleRunner: a log store carrying out the commands HAKeeper sends it (one at a time, on the
store's CommandExecutor thread, never on the heartbeat thread).

`ADD_REPLICA` (learner: add `replica_id` as a Raft learner at the address its store registered
with HAKeeper; not learner: promote it), `REMOVE_REPLICA`, `ADD_NON_VOTING_REPLICA` (a Raft
learner that HAKeeper never promotes) and `REMOVE_NON_VOTING_REPLICA` go to the shard leader's
store and run through this store's RaftNode (`change_membership`, with a deadline). A store that
no longer leads refuses (NotLeader): HAKeeper sees the command unfinished and issues it again
after its timeout, to the new leader.

`START_REPLICA` (and its non-voting variant) of a member this store does not run opens it
(`ReplicaSlot.start`: reopened from its directory when this store stopped it, else a joiner with
the shard's members from HAKeeper as its peers); a `--join` spare already runs its replica.
`STOP_REPLICA` (and its non-voting variant) closes the named member, which stays in the
membership. `KILL_ZOMBIE` closes the replica the membership no longer names and marks its
directory (`ReplicaSlot.kill`).

`START_TN` sent to a log store names a TN store that died (`replica_store`): a store of a local
cluster (`--cluster-dir`) starts that process again, with its recorded command line (same id,
address and data directory), through `launch(store id)`; the TN recovers from its checkpoint and
its log. A command meant for another kind of store (`STOP_TN`) is logged.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from logtide.engine.hakeeper.schedule_command import MEMBERSHIP, CommandType, ScheduleCommand
from logtide.engine.logservice.replica_slot import ReplicaSlot
from logtide.engine.raft import messages as M
from logtide.engine.raft.messages import ConfChange
from logtide.errors import UnknownReplicaError

log = logging.getLogger("logtide.hakeeper")

CHANGE_TIMEOUT = 5.0
C = CommandType


class ScheduleRunner:
    def __init__(self, slot: ReplicaSlot, store_id: str, store_address: Callable[[str], str],
                 members: Optional[Callable[[int], dict[int, str]]] = None,
                 launch: Optional[Callable[[str], Any]] = None,
                 on_killed: Optional[Callable[[int], None]] = None) -> None:
        """store_address(store id) -> the address that store registered with (HAKeeper's status);
        members(shard id) -> {replica id: address} of the shard's voters and learners;
        launch(store id) starts that store's process again (None: this store cannot);
        on_killed(replica id) is told when a zombie was closed."""
        self.slot, self.store_id, self.store_address = slot, store_id, store_address
        self.members, self.launch, self.on_killed = members, launch, on_killed
        self.done: list[ScheduleCommand] = []

    def run(self, c: ScheduleCommand) -> None:
        k = c.kind
        if k in MEMBERSHIP:
            self._change_membership(c)
        elif k in (C.START_REPLICA, C.START_NON_VOTING_REPLICA) and self.members is not None:
            if self.slot.replica_id == c.replica_id:
                return   # already runs it (a --join spare waits to be added)
            if self.slot.start(c.replica_id, {r: a for r, a in self.members(c.shard_id).items()
                                              if r != c.replica_id}):
                self._ran(c, f"replica {c.replica_id} opened on {self.slot.address}")
            else:
                log.warning("store %s: %s not run: it runs replica %d (a zombie is killed first)", self.store_id, c,
                            self.slot.replica_id)
        elif k in (C.STOP_REPLICA, C.STOP_NON_VOTING_REPLICA):
            if not self.slot.stop(c.replica_id):
                raise UnknownReplicaError(f"{c}: this store does not run replica {c.replica_id}")
            self._ran(c, f"replica {c.replica_id} stopped (still a member)")
        elif k == C.KILL_ZOMBIE:
            if self.slot.kill(c.replica_id):
                self._ran(c, f"replica {c.replica_id} closed")
                if self.on_killed is not None:
                    self.on_killed(c.replica_id)
        elif k == C.START_TN and c.replica_store != self.store_id and self.launch is not None:
            p, started = self.launch(c.replica_store)
            self._ran(c, f"{p.name} {'started' if started else 'was already running'} (pid {p.pid})")
        else:
            log.warning("store %s received schedule command %s (not a log store's to run)", self.store_id, c)

    def _change_membership(self, c: ScheduleCommand) -> None:
        if (c.kind == C.ADD_REPLICA and c.learner) or c.kind == C.ADD_NON_VOTING_REPLICA:
            cc = ConfChange(M.ADD_LEARNER, c.replica_id, self.store_address(c.replica_store).encode())
        elif c.kind == C.ADD_REPLICA:
            cc = ConfChange(M.ADD_VOTER, c.replica_id, b"")
        else:
            cc = ConfChange(M.REMOVE, c.replica_id, b"")
        index = self.slot.current().node.change_membership(cc, timeout=CHANGE_TIMEOUT)
        self._ran(c, f"membership change at index {index}")

    def _ran(self, c: ScheduleCommand, what: str) -> None:
        self.done.append(c)
        log.warning("store %s ran schedule command %s: %s", self.store_id, c, what)
