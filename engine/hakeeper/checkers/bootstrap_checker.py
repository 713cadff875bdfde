"""The bootstrap checker (Bootstrapping only): each log shard with no members yet gets its
founding voters on distinct working log stores, started with the founders' membership; a founder
whose start expired undelivered (its store was down) is started again."""
from __future__ import annotations

from logtide.engine.hakeeper.checkers.check_context import CheckContext
from logtide.engine.hakeeper.checkers.log_checker import start_missing
from logtide.engine.hakeeper.schedule_command import CommandType, ScheduleCommand
from logtide.engine.hakeeper.store_role import StoreRole


def check_bootstrap(ctx: CheckContext) -> list[ScheduleCommand]:
    st = ctx.state
    if st.cluster is None:
        return []
    starting = {c.shard_id for c in ctx.in_flight() if c.kind == CommandType.START_REPLICA and c.members}
    load = {sid: 0 for sid in ctx.working[StoreRole.LOG]}
    for shard in st.shards.values():
        for sid in shard.members().values():
            if sid in load:
                load[sid] += 1
    out: list[ScheduleCommand] = []
    for shard_id in sorted(st.shards):
        shard = st.shards[shard_id]
        if shard.voters or shard.epoch:
            out.extend(start_missing(ctx, shard))
            continue
        if shard_id in starting:
            continue
        stores = sorted(load, key=lambda s: (load[s], s))[:st.cluster.log_replicas]
        if len(stores) < st.cluster.log_replicas:
            continue   # not enough working log stores yet: wait for more heartbeats
        members = tuple((ctx.new_replica_id(), sid) for sid in stores)
        for rid, sid in members:
            load[sid] += 1
            out.append(ScheduleCommand(CommandType.START_REPLICA, sid, shard_id, rid, sid, members=members,
                                       **ctx.lifetime))
    return out
