"""The TN checker: every TN shard runs on exactly one working TN store.

No working store runs a shard: start it (as a new replica, recovering from its checkpoint and
the log) on the working TN store that runs the fewest shards, then by id. No TN store works at
all: restart the down TN store that last ran the shard (its newest replica, same replica id):
`START_TN` goes to a working log store (the first by id), which starts that store's process
again (`replica_store` names it; a local cluster's log stores can). Two or more run it: keep the
newest replica (highest id) and stop the others.
"""
from __future__ import annotations

from logtide.engine.hakeeper.checkers.check_context import CheckContext
from logtide.engine.hakeeper.schedule_command import CommandType, ScheduleCommand
from logtide.engine.hakeeper.store_role import StoreRole


def check_tn(ctx: CheckContext) -> list[ScheduleCommand]:
    st = ctx.state
    if st.cluster is None:
        return []
    working = ctx.working[StoreRole.TN]
    runs = {sid: st.stores[sid].tn_shards() for sid in working}
    busy = {(c.kind, c.shard_id) for c in ctx.in_flight() if c.kind in (CommandType.START_TN, CommandType.STOP_TN)}
    out = []
    for shard_id in st.cluster.tn_shard_ids():
        runners = sorted((runs[sid][shard_id], sid) for sid in working if shard_id in runs[sid])
        if not runners:
            if (CommandType.START_TN, shard_id) in busy:
                continue
            if not working:
                out += _restart_tn_store(ctx, shard_id)
                continue
            sid = min(working, key=lambda s: (len(runs[s]), s))
            runs[sid][shard_id] = ctx.new_replica_id()
            out.append(ScheduleCommand(CommandType.START_TN, sid, shard_id, runs[sid][shard_id], sid,
                                       **ctx.lifetime))
        elif len(runners) > 1 and (CommandType.STOP_TN, shard_id) not in busy:
            for rid, sid in runners[:-1]:
                out.append(ScheduleCommand(CommandType.STOP_TN, sid, shard_id, rid, sid, **ctx.lifetime))
    return out


def _restart_tn_store(ctx: CheckContext, shard_id: int) -> list[ScheduleCommand]:
    st = ctx.state
    launchers = ctx.working[StoreRole.LOG]
    last = sorted((st.stores[sid].tn_shards()[shard_id], sid) for sid in ctx.expired[StoreRole.TN]
                  if shard_id in st.stores[sid].tn_shards())
    if not launchers or not last:
        return []
    rid, sid = last[-1]
    return [ScheduleCommand(CommandType.START_TN, launchers[0], shard_id, rid, sid, store_tick=st.stores[sid].tick,
                            **ctx.lifetime)]
