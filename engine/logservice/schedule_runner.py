"""ScheduleRunner: a log store carrying out the membership commands HAKeeper sends it.

`ADD_REPLICA` (learner: add `replica_id` as a Raft learner at the address its store registered
with HAKeeper; not learner: promote it) and `REMOVE_REPLICA` go to the shard leader's store and
run through this store's RaftNode (`change_membership`), one at a time, as HAKeeper issues them.
A store that no longer leads refuses (NotLeader): HAKeeper sees the command unfinished and issues
it again after its timeout, to the new leader.

`START_TN` sent to a log store names a TN store that died (`replica_store`): a store of a local
cluster (`--cluster-dir`) starts that process again, with its recorded command line (same id,
address and data directory), through `launch(store id)`; the TN recovers from its checkpoint and
its log. Every other command is logged (a `--join` spare already runs its replica, waiting).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from logtide.engine.hakeeper.schedule_command import CommandType, ScheduleCommand
from logtide.engine.raft import messages as M
from logtide.engine.raft.errors import RaftError
from logtide.engine.raft.messages import ConfChange
from logtide.errors import LogtideError

log = logging.getLogger("logtide.hakeeper")

CHANGE_TIMEOUT = 5.0


class ScheduleRunner:
    def __init__(self, svc: Any, store_id: str, store_address: Callable[[str], str],
                 launch: Optional[Callable[[str], Any]] = None) -> None:
        """store_address(store id) -> the address that store registered with (HAKeeper's status);
        launch(store id) starts that store's process again (None: this store cannot)."""
        self.svc, self.store_id, self.store_address, self.launch = svc, store_id, store_address, launch
        self.done: list[ScheduleCommand] = []

    def __call__(self, commands: list[ScheduleCommand]) -> None:
        for c in commands:
            try:
                self.run(c)
            except (RaftError, LogtideError, OSError) as exc:
                log.warning("store %s: schedule command %s failed: %s: %s", self.store_id, c, type(exc).__name__, exc)

    def run(self, c: ScheduleCommand) -> None:
        if c.kind == CommandType.ADD_REPLICA:
            if c.learner:
                cc = ConfChange(M.ADD_LEARNER, c.replica_id, self.store_address(c.replica_store).encode())
            else:
                cc = ConfChange(M.ADD_VOTER, c.replica_id, b"")
        elif c.kind == CommandType.REMOVE_REPLICA:
            cc = ConfChange(M.REMOVE, c.replica_id, b"")
        elif c.kind == CommandType.START_TN and c.replica_store != self.store_id and self.launch is not None:
            p, started = self.launch(c.replica_store)
            self.done.append(c)
            log.warning("store %s ran schedule command %s: %s %s (pid %d)", self.store_id, c, p.name,
                        "started" if started else "was already running", p.pid)
            return
        else:
            log.warning("store %s received schedule command %s (not carried out in this version)", self.store_id, c)
            return
        index = self.svc.node.change_membership(cc, timeout=CHANGE_TIMEOUT)
        self.done.append(c)
        log.warning("store %s ran schedule command %s (membership change at index %d)", self.store_id, c, index)
