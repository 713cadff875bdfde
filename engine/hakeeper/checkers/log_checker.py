"""The log checker: keeps every log shard at its voter (and non-voting) count on working stores.

Per shard and round, at most one membership change, proposed through the shard's live leader and
only while no other change of that shard is in flight (Raft changes membership one at a time):

1. promote a learner that runs on a working store and is within `promote_lag` LSNs of the leader;
2. add a learner on the best spare store (a working log store holding no replica of the shard,
   least loaded first, then by id) while healthy voters and learners are fewer than wanted;
3. remove a voter whose store is down, once the healthy voters are enough again (or when no
   spare store exists and no learner is on its way): the shard keeps its size while the new
   replica catches up;
4. remove voters beyond the count, lowest id first and the leader last;
5. remove a learner whose store is down; add or remove non-voting replicas to their count.

Besides: start each member that a working store does not run, and kill each zombie, a replica
that a working store runs although the shard's newer membership no longer has it.
"""
from __future__ import annotations

from logtide.engine.hakeeper.checkers.check_context import CheckContext
from logtide.engine.hakeeper.log_shard_state import LogShardState
from logtide.engine.hakeeper.schedule_command import MEMBERSHIP, CommandType, ScheduleCommand
from logtide.engine.hakeeper.store_role import StoreRole

C = CommandType


def check_log(ctx: CheckContext) -> list[ScheduleCommand]:
    out: list[ScheduleCommand] = []
    for shard_id in sorted(ctx.state.shards):
        shard = ctx.state.shards[shard_id]
        step = _membership_step(ctx, shard)
        if step is not None:
            out.append(step)
        out.extend(start_missing(ctx, shard))
    out.extend(_zombies(ctx))
    return out


def _cmd(ctx: CheckContext, kind: CommandType, target: str, shard: LogShardState, rid: int, store: str,
         learner: bool = False) -> ScheduleCommand:
    return ScheduleCommand(kind, target, shard.shard_id, rid, store, learner, **ctx.lifetime)


def _membership_step(ctx: CheckContext, shard: LogShardState) -> ScheduleCommand | None:
    st, cfg = ctx.state, ctx.config
    if any(c.kind in MEMBERSHIP and c.shard_id == shard.shard_id for c in ctx.in_flight()):
        return None
    leader_store = shard.voters.get(shard.leader_id)
    if leader_store is None or not ctx.is_working(leader_store, StoreRole.LOG):
        return None   # membership changes go through a live leader; wait for the shard to elect one
    want = st.cluster.log_replicas if st.cluster else len(shard.voters)
    want_nv = st.cluster.non_voting_replicas if st.cluster else 0
    up = set(ctx.working[StoreRole.LOG])
    healthy = sorted(r for r, s in shard.voters.items() if s in up)
    dead = sorted(r for r, s in shard.voters.items() if s not in up)
    promoting = {r: s for r, s in shard.learners.items() if r not in shard.non_voting}
    non_voting = {r: s for r, s in shard.learners.items() if r in shard.non_voting}
    leader_rep = st.stores[leader_store].log_replicas().get(shard.shard_id)
    leader_lsn = leader_rep.latest_lsn if leader_rep is not None else 0
    spare = _best_spare(ctx, shard)

    # 1. promote a caught-up learner
    for rid in sorted(promoting):
        sid = promoting[rid]
        if sid not in up:
            continue
        rep = st.stores[sid].log_replicas().get(shard.shard_id)
        if rep is not None and rep.replica_id == rid and rep.latest_lsn + cfg.promote_lag >= leader_lsn:
            return _cmd(ctx, C.ADD_REPLICA, leader_store, shard, rid, sid, learner=False)
    # 2. add a learner
    live_promoting = [r for r, s in promoting.items() if s in up]
    if len(healthy) + len(live_promoting) < want and spare is not None:
        return _cmd(ctx, C.ADD_REPLICA, leader_store, shard, ctx.new_replica_id(), spare, learner=True)
    # 3. remove a voter on a down store, once a replacement is a voter (or none can come)
    if dead and (len(healthy) >= want or (spare is None and not live_promoting)):
        rid = dead[0]
        return _cmd(ctx, C.REMOVE_REPLICA, leader_store, shard, rid, shard.voters[rid])
    # 4. voters beyond the count: the leader last
    if len(healthy) > want:
        order = [r for r in healthy if r != shard.leader_id] + [r for r in healthy if r == shard.leader_id]
        rid = order[0]
        return _cmd(ctx, C.REMOVE_REPLICA, leader_store, shard, rid, shard.voters[rid])
    # 5. learners on down stores, then the non-voting count
    for rid in sorted(shard.learners):
        if shard.learners[rid] not in up:
            return _cmd(ctx, C.REMOVE_NON_VOTING_REPLICA, leader_store, shard, rid, shard.learners[rid])
    if len(non_voting) < want_nv and spare is not None:
        return _cmd(ctx, C.ADD_NON_VOTING_REPLICA, leader_store, shard, ctx.new_replica_id(), spare, learner=True)
    if len(non_voting) > want_nv:
        rid = min(non_voting)
        return _cmd(ctx, C.REMOVE_NON_VOTING_REPLICA, leader_store, shard, rid, non_voting[rid])
    return None


def _best_spare(ctx: CheckContext, shard: LogShardState) -> str | None:
    """A working log store with no replica of the shard (member or running), least loaded, then by id."""
    st = ctx.state
    taken = set(shard.members().values())
    load: dict[str, int] = {}
    for sid in ctx.working[StoreRole.LOG]:
        if sid in taken or shard.shard_id in st.stores[sid].log_replicas():
            continue
        load[sid] = sum(1 for sh in st.shards.values() if sid in sh.members().values())
    return min(load, key=lambda s: (load[s], s)) if load else None


def start_missing(ctx: CheckContext, shard: LogShardState) -> list[ScheduleCommand]:
    """START_REPLICA for each member a working store does not run (with the founders while no
    replica has reported the shard's membership yet: epoch 0, bootstrap)."""
    st = ctx.state
    busy = {(c.shard_id, c.replica_id) for c in ctx.in_flight()
            if c.kind in (C.START_REPLICA, C.START_NON_VOTING_REPLICA)}
    out = []
    for rid, sid in sorted(shard.members().items()):
        if not ctx.is_working(sid, StoreRole.LOG) or (shard.shard_id, rid) in busy:
            continue
        if shard.shard_id in st.stores[sid].log_replicas():
            continue   # it runs this shard (this replica, or a zombie the zombie rule kills first)
        kind = C.START_NON_VOTING_REPLICA if rid in shard.non_voting else C.START_REPLICA
        members = tuple(sorted(shard.voters.items())) if shard.epoch == 0 else ()
        out.append(ScheduleCommand(kind, sid, shard.shard_id, rid, sid, members=members,
                                   **ctx.lifetime))
    return out


def _zombies(ctx: CheckContext) -> list[ScheduleCommand]:
    st = ctx.state
    busy = {(c.shard_id, c.replica_id) for c in ctx.in_flight() if c.kind == C.KILL_ZOMBIE}
    out = []
    for sid in ctx.working[StoreRole.LOG]:
        for shard_id, rep in sorted(st.stores[sid].log_replicas().items()):
            shard = st.shards.get(shard_id)
            if shard is None or (shard_id, rep.replica_id) in busy:
                continue
            # a replica that has not seen the shard's current membership yet may be joining: only a
            # replica behind the newest epoch and outside the membership is a zombie
            if shard.members().get(rep.replica_id) != sid and rep.epoch < shard.epoch:
                out.append(_cmd(ctx, C.KILL_ZOMBIE, sid, shard, rep.replica_id, sid))
    return out
