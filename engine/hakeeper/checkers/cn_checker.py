"""The CN checker: a CN whose heartbeats stopped for longer than its timeout is deleted."""
from __future__ import annotations

from logtide.engine.hakeeper.checkers.check_context import CheckContext
from logtide.engine.hakeeper.schedule_command import CommandType, ScheduleCommand
from logtide.engine.hakeeper.store_role import StoreRole


def check_cn(ctx: CheckContext) -> list[ScheduleCommand]:
    return [ScheduleCommand(CommandType.DELETE_CN_STORE, sid, store_tick=ctx.state.stores[sid].tick,
                            **ctx.lifetime)
            for sid in ctx.expired[StoreRole.CN]]
