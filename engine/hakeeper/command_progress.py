"""finished(command, state): whether a schedule command's effect already shows in HAKeeper's state.

The state machine drops finished commands from the in-flight set (and from their store's queue)
when a heartbeat shows the effect, so the next step of a repair need not wait for the command to
time out. This is MatrixOne's operator-step IsFinish, applied inside the replicated state.
"""
from __future__ import annotations

from logtide.engine.hakeeper.hakeeper_state import HAKeeperState
from logtide.engine.hakeeper.schedule_command import CommandType, ScheduleCommand

C = CommandType


def finished(c: ScheduleCommand, st: HAKeeperState) -> bool:
    k = c.kind
    if k in (C.DELETE_CN_STORE, C.DROP_RO_NODE):
        return c.target not in st.stores
    if k in (C.START_TN, C.STOP_TN):
        # a restart (START_TN sent to a log store for the TN store `replica_store`) shows once that
        # store is heard from again after the check found it down
        store = st.stores.get(c.replica_store or c.target)
        running = store is not None and c.shard_id in store.tn_shards()
        return running and (store.tick > c.store_tick or not c.store_tick) if k == C.START_TN else not running
    shard = st.shards.get(c.shard_id)
    if shard is None:
        return True
    rid = c.replica_id
    if k == C.ADD_REPLICA:
        return rid in shard.voters or (c.learner and rid in shard.learners)
    if k == C.ADD_NON_VOTING_REPLICA:
        return rid in shard.learners
    if k in (C.REMOVE_REPLICA, C.REMOVE_NON_VOTING_REPLICA):
        return rid not in shard.members()
    store = st.stores.get(c.target)
    rep = store.log_replicas().get(c.shard_id) if store is not None else None
    runs = rep is not None and rep.replica_id == rid
    if k in (C.START_REPLICA, C.START_NON_VOTING_REPLICA):
        return runs
    return not runs   # STOP_*, KILL_ZOMBIE
